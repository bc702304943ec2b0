//go:build cuda

package main

import (
	"context"
	"errors"
	"fmt"
	"os"

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
// On "cuda" rank r runs on CUDA device r (configureDevices places ranks on
// other GPUs); the backend is made inside the rank's device executor, which
// then stays locked to its OS thread (CUDA contexts are per thread). Phase 1
// keeps every tensor in float32.
func backendFactory(device string, threads int) (actors.BackendFactory, bool, int, error) {
	switch device {
	case "cpu":
		return cpuFactory(threads), false, 4, nil
	case "cuda":
		return cudaFactory(nil), true, 4, nil
	}
	return nil, false, 0, fmt.Errorf("unknown --device %q (want cpu or cuda)", device)
}

// cudaFactory makes rank r's CUDA backend on GPU devices[r] (GPU r when
// devices is nil), in the rank's device thread, and initialises its
// collectives there: with an NCCL communicator that creates the rank's NCCL
// communicator (ncclCommInitRank on the thread's current context) and joins
// the group, so a group that cannot connect fails while loading (a failed or
// aborted peer releases it through the group's abort).
func cudaFactory(devices []int) actors.BackendFactory {
	return func(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		dev := shard.Rank
		if devices != nil {
			if shard.Rank < 0 || shard.Rank >= len(devices) {
				return nil, fmt.Errorf("rank %d: no GPU for it in %v", shard.Rank, devices)
			}
			dev = devices[shard.Rank]
		}
		be, err := cuda.New(cuda.Options{Device: dev, Comm: comm})
		if err != nil {
			return nil, fmt.Errorf("rank %d on GPU %d: %w", shard.Rank, dev, err)
		}
		if err := be.InitCollectives(context.Background()); err != nil {
			be.Close()
			return nil, fmt.Errorf("rank %d on GPU %d: %w", shard.Rank, dev, err)
		}
		return be, nil
	}
}

// configureDevices places the engine's ranks for --device and --devices.
// On cuda, rank r runs on GPU devices[r] (default 0..tp-1, checked against
// the host's GPUs) and, with tp > 1, the ranks communicate through NCCL: each
// rank-group generation gets a new group and unique id, made here on the
// engine's side and handed to the ranks with their shards.
// COHORT_TP_COMM=host keeps the in-process group (collectives through the
// host), for comparisons. CPU ranks keep the in-process group.
func configureDevices(cfg *actors.Config, device, list string) error {
	if device != "cuda" {
		if list != "" {
			return errors.New("--devices applies only to --device cuda")
		}
		return nil
	}
	if cfg.Placement != nil {
		// The ranks live in worker processes, which place them on their GPUs.
		if list != "" {
			return errors.New("--devices applies to ranks in this process, not to --workers")
		}
		return nil
	}
	count, err := nccl.CUDADeviceCount()
	if err != nil {
		return fmt.Errorf("--device cuda: %w", err)
	}
	devices, err := parseDevices(list, cfg.TP, count)
	if err != nil {
		return err
	}
	cfg.NewBackend, cfg.LockThread = cudaFactory(devices), true
	if cfg.TP == 1 {
		return nil
	}
	switch mode := os.Getenv("COHORT_TP_COMM"); mode {
	case "", "nccl":
	case "host":
		return nil
	default:
		return fmt.Errorf("COHORT_TP_COMM=%q: want nccl or host", mode)
	}
	if _, _, err := nccl.Version(); err != nil {
		return fmt.Errorf("--tp %d on GPUs: %w", cfg.TP, err)
	}
	cfg.NewComms = ncclComms(devices)
	return nil
}

// ncclComms is Config.NewComms for GPU ranks: a new NCCL group (and unique
// id) per rank-group generation.
func ncclComms(devices []int) func(size int) ([]nccl.Communicator, error) {
	return func(size int) ([]nccl.Communicator, error) {
		if size != len(devices) {
			return nil, fmt.Errorf("nccl group of %d ranks for %d GPUs %v", size, len(devices), devices)
		}
		g, err := nccl.NewDeviceGroup(devices)
		if err != nil {
			return nil, err
		}
		return g.Comms(), nil
	}
}
