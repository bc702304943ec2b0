package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cohort/actors"
)

// parseDevices turns --devices ("1,0,3": rank r on GPU list[r]) into the
// ranks' device ordinals for a tensor-parallel degree of tp on a host with
// count GPUs (count < 0: unknown, not checked). An empty list means GPUs
// 0..tp-1. The ordinals must be distinct (NCCL needs one device per rank),
// there must be exactly tp of them, and each must exist.
func parseDevices(list string, tp, count int) ([]int, error) {
	if tp < 1 {
		return nil, fmt.Errorf("--tp %d must be at least 1", tp)
	}
	var devices []int
	if strings.TrimSpace(list) == "" {
		for r := range tp {
			devices = append(devices, r)
		}
	} else {
		for f := range strings.SplitSeq(list, ",") {
			f = strings.TrimSpace(f)
			d, err := strconv.Atoi(f)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("--devices %q: %q is not a device ordinal (a non-negative integer)", list, f)
			}
			if i := slices.Index(devices, d); i >= 0 {
				return nil, fmt.Errorf("--devices %q: GPU %d is given to ranks %d and %d; each rank needs its own GPU", list, d, i, len(devices))
			}
			devices = append(devices, d)
		}
		if len(devices) != tp {
			return nil, fmt.Errorf("--devices %q lists %d GPUs but --tp is %d: give one GPU per rank", list, len(devices), tp)
		}
	}
	if count >= 0 {
		for r, d := range devices {
			if d >= count {
				if list == "" {
					return nil, fmt.Errorf("--tp %d needs GPUs 0..%d but this host has %d GPU(s); lower --tp or pick GPUs with --devices", tp, tp-1, count)
				}
				return nil, fmt.Errorf("--devices %q: rank %d's GPU %d does not exist: this host has %d GPU(s) (0..%d)", list, r, d, count, count-1)
			}
		}
	}
	return devices, nil
}

// startOn places the engine's ranks for --device and --devices
// (configureDevices) and starts the engine.
func startOn(ctx context.Context, device, devices string, cfg actors.Config) (*actors.Engine, error) {
	if err := configureDevices(&cfg, device, devices); err != nil {
		return nil, err
	}
	return actors.Start(ctx, cfg)
}
