package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// checkWorkerDevice validates `worker --device` and `--devices` before
// anything is started: the backend's name and the list's form (the GPUs
// are checked against the host once CUDA is loaded, workerGPU).
func checkWorkerDevice(device, list string) error {
	switch {
	case device != "cpu" && device != "cuda":
		return fmt.Errorf("worker: unknown --device %q (want cpu or cuda)", device)
	case device == "cpu" && list != "":
		return errors.New("worker: --devices applies only to --device cuda")
	case device == "cpu":
		return nil
	}
	_, err := parseWorkerDevices(list, -1)
	return err
}

// parseWorkerDevices turns `worker --devices` ("1,0": the worker's first
// rank of a generation on GPU 1, its second on GPU 0) into GPU ordinals on
// a host with count GPUs (count < 0: unknown, not checked). An empty list
// means every GPU of the host. The ordinals must be distinct and exist.
func parseWorkerDevices(list string, count int) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		if count == 0 {
			return nil, errors.New("worker: --device cuda: this host has no GPU")
		}
		out := make([]int, max(count, 0))
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		d, err := strconv.Atoi(f)
		switch {
		case err != nil || d < 0:
			return nil, fmt.Errorf("worker: --devices %q: %q is not a device ordinal (a non-negative integer)", list, f)
		case slices.Contains(out, d):
			return nil, fmt.Errorf("worker: --devices %q lists GPU %d twice; each rank needs its own GPU", list, d)
		case count >= 0 && d >= count:
			return nil, fmt.Errorf("worker: --devices %q: GPU %d does not exist: this host has %d GPU(s)", list, d, count)
		}
		out = append(out, d)
	}
	return out, nil
}
