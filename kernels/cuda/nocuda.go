//go:build !cuda

// Package cuda is the GPU implementation of kernels.Backend. It is built
// only with -tags cuda (it is the only cgo in kernels, links libcuda through
// gorgonia.org/cu and opens NVRTC and cuBLASLt at run time); without the
// tag, New reports that the binary has no CUDA support.
package cuda

import (
	"errors"

	"cohort/nccl"
)

// Options configures a Backend.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// Comm is the rank's communicator; nil means a single rank.
	Comm nccl.Communicator
}

// Backend is the CUDA backend; without -tags cuda it cannot be made.
type Backend struct{}

// ErrNotBuilt is returned by New in binaries built without -tags cuda.
var ErrNotBuilt = errors.New("cuda: built without -tags cuda")

// New returns ErrNotBuilt: this binary was built without -tags cuda.
func New(Options) (*Backend, error) { return nil, ErrNotBuilt }
