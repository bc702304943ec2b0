package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// DeviceCommunicator is a Communicator whose collectives can also run on
// device memory, ordered on a CUDA stream (NCCL on GPU ranks). The host-slice
// methods of Communicator still work: they stage through device memory.
//
// Threading: Init and the collectives must be called from the rank's device
// thread, with the rank's CUDA context current (it is the context NCCL binds
// the communicator to). Abort and AsyncError may be called from any
// goroutine.
type DeviceCommunicator interface {
	Communicator
	// Device is the CUDA device ordinal of the rank.
	Device() int
	// Init creates the rank's NCCL communicator on the calling thread's
	// current CUDA context. It blocks until every rank of the group has
	// joined, the group is aborted, or ctx ends. Collectives call it
	// themselves if it has not run yet; calling it again is a no-op.
	Init(ctx context.Context) error
	// AllReduceSumDevice sums count float32s at buf across the ranks, in
	// place, enqueued on stream (a CUstream; 0 is the legacy default
	// stream). It returns once the operation is enqueued; it can be
	// captured into a CUDA graph.
	AllReduceSumDevice(buf uintptr, count int, stream uintptr) error
	// AllGatherDevice gathers count float32s from every rank's send into
	// recv (Size()·count values, in rank order), enqueued on stream.
	AllGatherDevice(send, recv uintptr, count int, stream uintptr) error
}

// LocalPeers is implemented by device communicators whose ranks all live in
// this process (a DeviceGroup): the ranks can then reach each other's device
// memory directly (CUDA peer access) and agree on host values through
// Exchange, which the one-shot all-reduce of kernels/cuda uses.
type LocalPeers interface {
	// Devices returns every rank's CUDA device ordinal, in rank order.
	Devices() []int
	// Exchange publishes v for the calling rank and returns every rank's
	// value, in rank order, once all ranks have called it. Every rank must
	// call it the same number of times. It fails with an error wrapping
	// ErrAborted once the group is aborted, and with ctx's error if ctx
	// ends first (the group must then be aborted: the round is lost).
	Exchange(ctx context.Context, v uint64) ([]uint64, error)
	// OnAbort registers f to run once when the group is aborted, before the
	// NCCL communicators are torn down (at once if it already was). f runs
	// on the aborting goroutine and must not block.
	OnAbort(f func())
}

// Wrapper is implemented by communicators that decorate another one (fault
// injection, tracing); AsDevice looks through them.
type Wrapper interface {
	Unwrap() Communicator
}

// AsDevice returns c's device communicator: c itself, or the communicator
// it wraps (through Wrapper, a few levels deep).
func AsDevice(c Communicator) (DeviceCommunicator, bool) {
	for range 8 {
		if c == nil {
			return nil, false
		}
		if d, ok := c.(DeviceCommunicator); ok {
			return d, true
		}
		w, ok := c.(Wrapper)
		if !ok {
			return nil, false
		}
		c = w.Unwrap()
	}
	return nil, false
}

// ErrNoCUDA is returned by the GPU functions of a binary built without
// -tags cuda.
var ErrNoCUDA = errors.New("nccl: built without -tags cuda: no GPU communicators (run make build-cuda)")

// checkDevices validates a device list: at least one, each non-negative,
// all distinct (NCCL does not support two ranks on one device).
func checkDevices(devices []int) error {
	if len(devices) == 0 {
		return errors.New("nccl: no devices")
	}
	for i, d := range devices {
		if d < 0 {
			return fmt.Errorf("nccl: device ordinal %d of rank %d is negative", d, i)
		}
		if j := slices.Index(devices, d); j != i {
			return fmt.Errorf("nccl: device %d is given to ranks %d and %d; NCCL needs distinct devices", d, j, i)
		}
	}
	return nil
}

// localGroup is the in-process side of a device group: a rendezvous for
// Exchange and the group's sticky abort, whose hooks run before the NCCL
// communicators are torn down.
type localGroup struct {
	n int

	stickyAbort // mu guards cur and hooks too
	cur         *exchangeRound
	aborted     chan struct{}
	hooks       []func()
}

type exchangeRound struct {
	vals    []uint64
	arrived int
	done    chan struct{}
}

func newLocalGroup(n int) *localGroup {
	return &localGroup{n: n, cur: newExchangeRound(n), aborted: make(chan struct{})}
}

func newExchangeRound(n int) *exchangeRound {
	return &exchangeRound{vals: make([]uint64, n), done: make(chan struct{})}
}

func (g *localGroup) exchange(ctx context.Context, rank int, v uint64) ([]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := g.lockLive(); err != nil {
		return nil, err
	}
	rd := g.cur
	rd.vals[rank] = v
	rd.arrived++
	if rd.arrived == g.n {
		close(rd.done)
		g.cur = newExchangeRound(g.n)
	}
	g.mu.Unlock()
	select {
	case <-rd.done:
		return slices.Clone(rd.vals), nil
	case <-g.aborted:
		return nil, g.abortError()
	case <-ctx.Done():
		return nil, fmt.Errorf("nccl: rank %d left an exchange: %w", rank, ctx.Err())
	}
}

// abort makes the group's abort error sticky (the first reason wins) and
// runs the abort hooks; it reports whether this call aborted the group.
func (g *localGroup) abort(reason error) bool {
	g.mu.Lock()
	if !g.setAbortLocked(reason) {
		g.mu.Unlock()
		return false
	}
	close(g.aborted)
	hooks := g.hooks
	g.hooks = nil
	g.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	return true
}

func (g *localGroup) onAbort(f func()) {
	g.mu.Lock()
	if g.abortErr == nil {
		g.hooks = append(g.hooks, f)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	f()
}
