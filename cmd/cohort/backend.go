package main

import (
	"fmt"

	"cohort/actors"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/nccl"
)

// backendFactory returns the engine's per-rank backend factory for device
// ("cpu" or "cuda"), whether the rank executors must lock their OS thread,
// and the bytes per KV/conv element of that backend.
//
// On "cuda" rank r runs on CUDA device r (configureDevices places ranks on
// other GPUs); the backend is made inside the rank's device executor, which
// then stays locked to its OS thread (CUDA contexts are per thread). Phase 1
// keeps every tensor in float32. A binary built without -tags cuda refuses
// "cuda".
func backendFactory(device string, threads int) (actors.BackendFactory, bool, int, error) {
	switch device {
	case "cpu":
		return cpuFactory(threads), false, 4, nil
	case "cuda":
		f, kvBytes, err := defaultCUDAFactory()
		if err != nil {
			return nil, false, 0, err
		}
		return f, true, kvBytes, nil
	}
	return nil, false, 0, fmt.Errorf("unknown --device %q (want cpu or cuda)", device)
}

// cpuFactory makes each rank's CPU backend with threads workers.
func cpuFactory(threads int) actors.BackendFactory {
	return func(_ model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		return cpu.New(cpu.Options{Comm: comm, Threads: threads}), nil
	}
}
