//go:build !cuda

package main

import (
	"errors"
	"fmt"

	"cohort/actors"
)

// backendFactory returns the engine's per-rank backend factory for device
// ("cpu"; this binary has no CUDA support), whether the rank executors must
// lock their OS thread, and the bytes per KV/conv element of that backend.
func backendFactory(device string, threads int) (actors.BackendFactory, bool, int, error) {
	switch device {
	case "cpu":
		return cpuFactory(threads), false, 4, nil
	case "cuda":
		return nil, false, 0, errNoCUDA
	}
	return nil, false, 0, fmt.Errorf("unknown --device %q (want cpu or cuda)", device)
}

var errNoCUDA = errors.New("--device cuda: this binary was built without -tags cuda; run make build-cuda")

// configureDevices places the engine's ranks for --device and --devices;
// without CUDA only CPU ranks exist, which keep the in-process group.
func configureDevices(cfg *actors.Config, device, list string) error {
	switch {
	case device == "cuda":
		return errNoCUDA
	case list != "":
		return errors.New("--devices applies only to --device cuda")
	}
	return nil
}
