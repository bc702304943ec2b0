package remote

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
)

// scriptedComm is a communicator whose AsyncError returns errs in turn
// (then nil) and which records its abort.
type scriptedComm struct {
	fakeNCCL
	mu      sync.Mutex
	errs    []error
	calls   int
	aborted []error
}

func (c *scriptedComm) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.calls <= len(c.errs) {
		return c.errs[c.calls-1]
	}
	return nil
}

func (c *scriptedComm) Abort(reason error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aborted = append(c.aborted, reason)
}

func (c *scriptedComm) aborts() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.aborted...)
}

// TestPollComm: the watch returns the communicator's first asynchronous
// error at the tick that found it, and nothing once it is told to stop.
// The ticks are the test's (an unbuffered channel), so no time passes.
func TestPollComm(t *testing.T) {
	boom := errors.New("ncclRemoteError: peer gone")
	cases := []struct {
		name  string
		errs  []error
		ticks int   // ticks sent before the result is read
		want  error // nil: the watch is stopped after the ticks
	}{
		{"error at the first tick", []error{boom}, 1, boom},
		{"error at the third tick", []error{nil, nil, boom}, 3, boom},
		{"no error, stopped", nil, 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comm := &scriptedComm{errs: c.errs}
			tick, done, got := make(chan time.Time), make(chan struct{}), make(chan error, 1)
			go func() { got <- pollComm(comm, tick, done) }()
			for range c.ticks {
				tick <- time.Time{}
			}
			if c.want == nil {
				close(done)
			}
			select {
			case err := <-got:
				if err != c.want {
					t.Fatalf("pollComm = %v, want %v", err, c.want)
				}
			case <-time.After(time.Minute): // the test's bound, not a wait for time to pass
				t.Fatal("pollComm did not return")
			}
			if comm.calls != c.ticks {
				t.Errorf("AsyncError called %d times for %d ticks", comm.calls, c.ticks)
			}
		})
	}
}

// sentContext is an actor context that carries a message and records what
// the actor sends.
type sentContext struct {
	strayContext
	parent *actor.PID
	sent   []any
}

func (c *sentContext) Send(_ *actor.PID, msg any) { c.sent = append(c.sent, msg) }
func (c *sentContext) Parent() *actor.PID         { return c.parent }

// TestAbortCommReachesComm: the engine's AbortComm poisons the remote rank,
// ends its watch and aborts its communicator with the engine's reason; a
// communicator joined after the abort is aborted at once.
func TestAbortCommReachesComm(t *testing.T) {
	for _, joinedFirst := range []bool{true, false} {
		r := newRemoteRank(&workerState{})
		comm := &scriptedComm{}
		if joinedFirst && !r.ring.keep(comm) {
			t.Fatal("the slot refused a communicator before any abort")
		}
		r.Receive(strayContext{msg: &rankpb.AbortComm{Generation: 1, Reason: "supervision: rank 1 failed"}})
		if !joinedFirst && r.ring.keep(comm) {
			t.Fatal("the slot kept a communicator after the abort")
		}
		if got := comm.aborts(); len(got) != 1 || got[0].Error() != "supervision: rank 1 failed" {
			t.Errorf("joined first %v: aborts %v, want the engine's reason once", joinedFirst, got)
		}
		if r.halt.Err() == nil {
			t.Error("the rank's executor is not poisoned")
		}
		select {
		case <-r.unwatched:
		default:
			t.Error("the communicator's watch goes on after the abort")
		}
	}
}

// TestReportComm: an asynchronous error of a rank's communicator goes to
// the engine's proxy as CommFailed (naming the worker, the rank and the
// error), and from the proxy to the engine root as a rank failure of its
// generation; after an abort the rank reports nothing.
func TestReportComm(t *testing.T) {
	r := newRemoteRank(&workerState{addr: "10.0.0.3:7400"})
	r.Assign(1, 4)
	r.owner = actor.NewPID("engine", "proxy")
	ctx := &sentContext{strayContext: strayContext{msg: &commAsyncError{err: errors.New("connection lost: rank 0")}}}
	r.Receive(ctx)
	if len(ctx.sent) != 1 {
		t.Fatalf("sent %v, want one CommFailed", ctx.sent)
	}
	cf, ok := ctx.sent[0].(*rankpb.CommFailed)
	want := "worker 10.0.0.3:7400: rank 1: tcp ring: asynchronous error: connection lost: rank 0"
	if !ok || cf.Generation != 4 || cf.Rank != 1 || cf.Error != want {
		t.Fatalf("sent %v, want CommFailed of generation 4, rank 1: %q", ctx.sent[0], want)
	}

	p := &rankProxy{rank: 1, gen: 4, placed: &rankPlaced{worker: "10.0.0.3:7400"}}
	for _, gen := range []uint64{3, 4} {
		pctx := &sentContext{strayContext: strayContext{msg: &rankpb.CommFailed{Generation: gen, Rank: 1, Error: cf.Error}}}
		p.Receive(pctx)
		if gen != p.gen {
			if len(pctx.sent) != 0 {
				t.Errorf("the proxy of generation 4 forwarded generation %d's failure: %v", gen, pctx.sent)
			}
			continue
		}
		f, ok := pctx.sent[0].(*actors.RankCommFailed)
		if !ok || f.Generation != 4 || f.Rank != 1 || !strings.Contains(f.Err.Error(), "rank 1 on worker 10.0.0.3:7400: "+want) {
			t.Errorf("the proxy sent %+v", pctx.sent)
		}
	}

	r.abort(errors.New("engine: tearing down"))
	ctx.sent = nil
	r.Receive(ctx)
	if len(ctx.sent) != 0 {
		t.Errorf("an aborted rank reported %v", ctx.sent)
	}
}
