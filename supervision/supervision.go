// Package supervision holds the failure contract's building blocks, free of
// actors so they can be tested alone: the typed rank failure and its causes,
// the sticky poison of an executor, restart intensity (more than N rebuilds
// within T stops the process), readiness, and the bounded abort of a group's
// communicators.
package supervision

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"cohort/nccl"
)

// Cause classifies how a rank failed.
type Cause string

// The detected causes (DESIGN.md §3).
const (
	CausePanic      Cause = "panic"      // the rank actor panicked (protoactor Failure)
	CauseError      Cause = "error"      // the rank replied with an error (a forward failed)
	CauseTerminated Cause = "terminated" // the rank actor stopped or was killed
	CauseDeadline   Cause = "deadline"   // the step missed its deadline (e.g. hung in a collective)
	CauseComm       Cause = "comm"       // the communicator reported an asynchronous error
	CauseLoad       Cause = "load"       // a rebuild could not load a shard
)

// Causes lists every cause, for metrics.
var Causes = []Cause{CausePanic, CauseError, CauseTerminated, CauseDeadline, CauseComm, CauseLoad}

// RankFailure is a detected failure of one rank of a group generation.
type RankFailure struct {
	Rank       int
	Generation uint64
	Cause      Cause
	Err        error
}

func (f *RankFailure) Error() string {
	return fmt.Sprintf("supervision: rank %d (generation %d) failed: %s: %v", f.Rank, f.Generation, f.Cause, f.Err)
}

func (f *RankFailure) Unwrap() error { return f.Err }

// Poison is an executor's sticky failure: the first reason wins and every
// later step is refused with it.
type Poison struct {
	mu  sync.Mutex
	err error
}

// Set records reason if none was recorded; it reports whether this call won.
func (p *Poison) Set(reason error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || reason == nil {
		return false
	}
	p.err = reason
	return true
}

// Err returns the first reason, or nil while healthy.
func (p *Poison) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ErrIntensity is wrapped by the error that ends the process when rebuilds
// come too often.
var ErrIntensity = errors.New("supervision: restart intensity exceeded")

// Intensity allows at most Max rebuilds within Window (Erlang's intensity
// and period). Time comes in as a value.
type Intensity struct {
	Max    int
	Window time.Duration
	times  []time.Time
}

// Allow records a rebuild at now and reports whether it stays within the
// limit; when it does not, the error says how many happened in the window.
func (in *Intensity) Allow(now time.Time) error {
	keep := in.times[:0]
	for _, t := range in.times {
		if now.Sub(t) < in.Window {
			keep = append(keep, t)
		}
	}
	in.times = append(keep, now)
	if len(in.times) > in.Max {
		return fmt.Errorf("%w: %d rebuilds within %v (limit %d)", ErrIntensity, len(in.times), in.Window, in.Max)
	}
	return nil
}

// AbortAll aborts every communicator from side goroutines, so a peer blocked
// inside a collective returns, and waits at most timeout for the calls. It
// reports the communicators whose Abort did not return in time.
func AbortAll(ctx context.Context, comms []nccl.Communicator, reason error, timeout time.Duration) []int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan int, len(comms))
	for i, c := range comms {
		go func() {
			c.Abort(reason)
			done <- i
		}()
	}
	returned := make([]bool, len(comms))
	for range comms {
		select {
		case i := <-done:
			returned[i] = true
		case <-ctx.Done():
			var stuck []int
			for i, ok := range returned {
				if !ok {
					stuck = append(stuck, i)
				}
			}
			return stuck
		}
	}
	return nil
}
