//go:build cuda

package main

import (
	"errors"
	"fmt"
	"os"

	"cohort/actors"
	"cohort/actors/remote"
	"cohort/cmd/cohort/gpuranks"
	"cohort/kernels/cuda"
	"cohort/nccl"
)

// defaultCUDAFactory is backendFactory's "cuda": rank r on GPU r, and the
// bytes of the KV cache element its backends will use.
func defaultCUDAFactory() (actors.BackendFactory, int, error) {
	kvBytes, err := cuda.KVElemBytes(cuda.Options{})
	if err != nil {
		return nil, 0, err
	}
	return gpuranks.Factory(nil), kvBytes, nil
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
	cfg.NewBackend, cfg.LockThread = gpuranks.Factory(devices), true
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
	cfg.NewComms = gpuranks.Comms(devices)
	return nil
}

// workerGPU is the GPU configuration of `cohort worker --device cuda
// --devices list`: the listed GPUs (default: every GPU of the host), each
// rank's backend made by the factory of in-process GPU ranks, and the rank's
// NCCL communicator joined from the engine's unique id.
func workerGPU(list string) (*remote.GPURanks, error) {
	count, err := nccl.CUDADeviceCount()
	if err != nil {
		return nil, fmt.Errorf("worker: --device cuda: %w", err)
	}
	devices, err := parseWorkerDevices(list, count)
	if err != nil {
		return nil, err
	}
	if _, _, err := nccl.Version(); err != nil {
		return nil, fmt.Errorf("worker: --device cuda: %w", err)
	}
	join := func(id []byte, rank, size, device int) (nccl.Communicator, error) {
		return nccl.JoinGroup(id, rank, size, device)
	}
	return &remote.GPURanks{Devices: devices, NewBackend: gpuranks.OnDevice, Join: join}, nil
}

// engineNCCL is the unique-id source of `serve --device cuda --workers`:
// ncclGetUniqueId in this process, which hosts each group's NCCL bootstrap
// root (the workers must reach it).
func engineNCCL() (remote.UniqueIDSource, error) {
	if _, _, err := nccl.Version(); err != nil {
		return nil, fmt.Errorf("--device cuda --workers: %w", err)
	}
	return remote.UniqueIDFunc(nccl.NewUniqueID), nil
}
