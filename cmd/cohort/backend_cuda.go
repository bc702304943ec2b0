//go:build cuda

package main

import (
	"fmt"

	"cohort/actors"
	"cohort/kernels"
	"cohort/kernels/cuda"
	"cohort/model"
	"cohort/nccl"
)

// backendFactory returns the engine's per-rank backend factory for device
// ("cpu" or "cuda"), whether the rank executors must lock their OS thread,
// and the bytes per KV/conv element of that backend.
//
// On "cuda" rank r runs on CUDA device r; the backend is made inside the
// rank's device executor, which then stays locked to its OS thread (CUDA
// contexts are per thread). Phase 1 keeps every tensor in float32.
func backendFactory(device string, threads int) (actors.BackendFactory, bool, int, error) {
	switch device {
	case "cpu":
		return cpuFactory(threads), false, 4, nil
	case "cuda":
		return func(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
			be, err := cuda.New(cuda.Options{Device: shard.Rank, Comm: comm})
			if err != nil {
				return nil, fmt.Errorf("rank %d: %w", shard.Rank, err)
			}
			return be, nil
		}, true, 4, nil
	}
	return nil, false, 0, fmt.Errorf("unknown --device %q (want cpu or cuda)", device)
}
