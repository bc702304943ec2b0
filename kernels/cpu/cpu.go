// Package cpu is the pure-Go reference backend of kernels.Backend.
//
// Everything is float32 and row-major: weights arrive already upcast from
// bf16, activations are [rows, cols] matrices with one row per token of the
// flat batch. The code aims to be a readable oracle for the GPU kernels while
// still using every core where the work is (matmul, attention over
// (row, head) pairs, the gated delta rule over (sequence, head) pairs).
//
// Shape mismatches are programmer errors (the model layer guarantees shapes):
// ops check them cheaply and panic with a message naming the op and shapes.
// Collectives return errors that wrap the communicator's error.
package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"cohort/kernels"
	"cohort/nccl"
)

// Tensor is a host tensor: a shape and row-major float32 data.
type Tensor struct {
	shape []int
	data  []float32
}

var _ kernels.Tensor = (*Tensor)(nil)

// Shape returns the dimensions, outermost first. Callers must not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Data returns the tensor's backing slice (not a copy).
func (t *Tensor) Data() []float32 { return t.data }

// String describes the tensor's shape, for error messages.
func (t *Tensor) String() string { return fmt.Sprint(t.shape) }

// newTensor allocates a zeroed tensor.
func newTensor(shape ...int) *Tensor {
	return &Tensor{shape: append([]int(nil), shape...), data: make([]float32, numel(shape))}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("cpu: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// dims views t as a matrix [rows, cols] where cols is the last dimension.
func (t *Tensor) dims() (rows, cols int) { return kernels.Dims(t.shape) }

// Options configures a Backend.
type Options struct {
	// Comm is the rank's communicator; nil means a single rank.
	Comm nccl.Communicator
	// Threads bounds the goroutines an op uses; 0 means runtime.GOMAXPROCS.
	Threads int
}

// Backend is the CPU implementation of kernels.Backend.
type Backend struct {
	comm    nccl.Communicator
	threads int
}

var _ kernels.Backend = (*Backend)(nil)

// New returns a CPU backend.
func New(opts Options) *Backend {
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &Backend{comm: opts.Comm, threads: threads}
}

// Name identifies the backend.
func (b *Backend) Name() string { return "cpu" }

// Upload copies data into a new tensor of the given shape.
func (b *Backend) Upload(data []float32, shape ...int) kernels.Tensor {
	if numel(shape) != len(data) {
		panic(fmt.Sprintf("cpu: Upload: %d values for shape %v", len(data), shape))
	}
	t := newTensor(shape...)
	copy(t.data, data)
	return t
}

// Download copies a tensor to the host.
func (b *Backend) Download(t kernels.Tensor) []float32 {
	return append([]float32(nil), asTensor("Download", t).data...)
}

// asTensor unwraps a kernels.Tensor produced by this backend.
func asTensor(op string, t kernels.Tensor) *Tensor {
	ct, ok := t.(*Tensor)
	if !ok || ct == nil {
		panic(fmt.Sprintf("cpu: %s: tensor %T is not a *cpu.Tensor", op, t))
	}
	return ct
}

// parallelFor calls fn on disjoint ranges [lo, hi) covering [0, n), each at
// most grain long, from up to `threads` goroutines. Ranges are handed out
// dynamically, so uneven work (sequences of different lengths) balances.
func parallelFor(threads, n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	tasks := (n + grain - 1) / grain
	workers := min(threads, tasks)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				t := int(next.Add(1) - 1)
				if t >= tasks {
					return
				}
				lo := t * grain
				fn(lo, min(lo+grain, n))
			}
		})
	}
	wg.Wait()
}

// grainFor splits n items into about 4 ranges per thread (at least minGrain
// items each) so dynamic scheduling can balance uneven ranges.
func grainFor(threads, n, minGrain int) int {
	g := (n + 4*threads - 1) / (4 * threads)
	return max(g, minGrain, 1)
}
