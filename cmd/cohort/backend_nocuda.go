//go:build !cuda

package main

import (
	"errors"

	"cohort/actors"
	"cohort/actors/remote"
)

// defaultCUDAFactory is backendFactory's "cuda", which this binary lacks.
func defaultCUDAFactory() (actors.BackendFactory, int, error) {
	return nil, 0, errNoCUDA
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

// workerGPU refuses `worker --device cuda`: this binary has no CUDA.
func workerGPU(string) (*remote.GPURanks, error) {
	return nil, errors.New("worker: --device cuda: this binary was built without -tags cuda; run make build-cuda")
}

// engineNCCL refuses `serve --device cuda --workers`: this binary has no
// CUDA.
func engineNCCL() (remote.UniqueIDSource, error) { return nil, errNoCUDA }
