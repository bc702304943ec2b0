package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cohort/nccl"
)

// FaultKind names an injectable failure. Fault injection is for tests and a
// debug-only admin endpoint; it is off unless Config.Faults is set.
type FaultKind string

// The injectable faults.
const (
	FaultStop     FaultKind = "stop"      // stop the rank actor (protoactor Stop)
	FaultPoison   FaultKind = "poison"    // poison the rank actor (protoactor Poison)
	FaultPanic    FaultKind = "panic"     // panic inside the rank actor's Receive
	FaultHang     FaultKind = "hang"      // the rank's next all-reduce blocks until the group is aborted
	FaultSlow     FaultKind = "slow"      // the rank's next step sleeps Duration first
	FaultError    FaultKind = "error"     // the rank's next forward fails (every forward if Persistent)
	FaultDropComm FaultKind = "drop-comm" // the communicator reports an asynchronous error
)

// FaultKinds lists every kind.
var FaultKinds = []FaultKind{FaultStop, FaultPoison, FaultPanic, FaultHang, FaultSlow, FaultError, FaultDropComm}

// Fault is one injection.
type Fault struct {
	Kind       FaultKind
	Rank       int
	Duration   time.Duration // FaultSlow
	Persistent bool          // FaultError: fail every forward, also after rebuilds
	Skip       int           // FaultError: let this many of the rank's steps pass first
}

// ErrFaultsDisabled is returned by InjectFault unless Config.Faults is set.
var ErrFaultsDisabled = errors.New("actors: fault injection is disabled")

// errInjected is the error of an injected forward failure.
var errInjected = errors.New("injected forward failure")

// rankFaults is the armed faults of one rank, read by its executor at the
// start of each step. It outlives group generations (Persistent errors).
type rankFaults struct {
	mu         sync.Mutex
	slow       time.Duration
	failNext   bool
	failSkip   int // steps to let pass before failNext fails one
	failAlways bool
}

func (f *rankFaults) arm(ft Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ft.Kind {
	case FaultSlow:
		f.slow = ft.Duration
	case FaultError:
		f.failNext, f.failSkip, f.failAlways = true, max(ft.Skip, 0), ft.Persistent
	}
}

// beforeStep applies the armed step faults.
func (f *rankFaults) beforeStep() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	next := f.failNext && f.failSkip == 0
	if f.failNext && f.failSkip > 0 {
		f.failSkip--
	}
	slow, fail := f.slow, next || f.failAlways
	f.slow = 0
	if next {
		f.failNext = false
	}
	f.mu.Unlock()
	if slow > 0 {
		time.Sleep(slow) // the injected fault itself: a rank that is slow
	}
	if fail {
		return errInjected
	}
	return nil
}

// faultComm wraps a rank's communicator so a hang can be injected: the
// armed rank blocks in its next all-reduce until the group is aborted, as a
// rank stuck in a collective would. A dropped communicator reports an
// asynchronous error, as a failed NCCL communicator would.
type faultComm struct {
	nccl.Communicator
	hang     atomic.Bool
	dropped  atomic.Pointer[error]
	released chan struct{}
	once     sync.Once
}

// AsyncError reports an injected drop before the wrapped communicator's own error.
func (c *faultComm) AsyncError() error {
	if err := c.dropped.Load(); err != nil {
		return *err
	}
	return c.Communicator.AsyncError()
}

// drop makes the communicator report err asynchronously.
func (c *faultComm) drop(err error) { c.dropped.Store(&err) }

func newFaultComm(c nccl.Communicator) *faultComm {
	return &faultComm{Communicator: c, released: make(chan struct{})}
}

func (c *faultComm) AllReduceSum(ctx context.Context, buf []float32) error {
	if c.hang.Swap(false) {
		<-c.released
		return fmt.Errorf("actors: hung rank released: %w", nccl.ErrAborted)
	}
	return c.Communicator.AllReduceSum(ctx, buf)
}

func (c *faultComm) Abort(reason error) {
	c.once.Do(func() { close(c.released) })
	c.Communicator.Abort(reason)
}
