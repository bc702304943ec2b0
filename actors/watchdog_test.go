package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/nccl"
)

// stallGate holds chosen ranks in their next collectives until released,
// as ranks that stop making progress (a device that stopped answering)
// while no step deadline fires.
type stallGate struct {
	mu   sync.Mutex
	shut map[int]chan struct{} // rank → closed on release
}

// stall holds ranks from their next collective on.
func (g *stallGate) stall(ranks ...int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = map[int]chan struct{}{}
	ch := make(chan struct{})
	for _, r := range ranks {
		g.shut[r] = ch
	}
}

// release lets every held rank go on.
func (g *stallGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	done := map[chan struct{}]bool{}
	for _, ch := range g.shut {
		if !done[ch] {
			close(ch)
			done[ch] = true
		}
	}
	g.shut = nil
}

// comms is a Config.NewComms: in-process communicators behind the gate.
func (g *stallGate) comms(size int) ([]nccl.Communicator, error) {
	inner, err := inProcessComms(size)
	if err != nil {
		return nil, err
	}
	out := make([]nccl.Communicator, size)
	for r, c := range inner {
		out[r] = &stallComm{Communicator: c, gate: g, aborted: make(chan struct{})}
	}
	return out, nil
}

type stallComm struct {
	nccl.Communicator
	gate    *stallGate
	aborted chan struct{}
	once    sync.Once
}

func (c *stallComm) hold(ctx context.Context) error {
	c.gate.mu.Lock()
	ch := c.gate.shut[c.Rank()]
	c.gate.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-c.aborted:
		return fmt.Errorf("actors: stalled rank released by abort: %w", nccl.ErrAborted)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *stallComm) AllReduceSum(ctx context.Context, buf []float32) error {
	if err := c.hold(ctx); err != nil {
		return err
	}
	return c.Communicator.AllReduceSum(ctx, buf)
}

func (c *stallComm) AllGather(ctx context.Context, send, recv []float32) error {
	if err := c.hold(ctx); err != nil {
		return err
	}
	return c.Communicator.AllGather(ctx, send, recv)
}

func (c *stallComm) Abort(reason error) {
	c.once.Do(func() { close(c.aborted) })
	c.Communicator.Abort(reason)
}

// waitReady waits, until deadline, for the engine's readiness to be want,
// and returns the reason it gives then.
func waitReady(t *testing.T, e *Engine, want bool, deadline <-chan time.Time) string {
	t.Helper()
	for {
		ready, reason, changed := e.health.Watch()
		if ready == want {
			return reason
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("readiness still %v (%q), want %v", ready, reason, want)
		}
	}
}

// TestProgressWatchdogStalledRanks stalls ranks of a TP=2 group mid-request
// with a step deadline too long to fire: readiness must turn false with a
// reason naming the stall within the progress bound (plus a tick), new
// requests are refused, and once the ranks go on readiness returns, the
// request completes with its stall-free tokens and no failure was counted.
func TestProgressWatchdogStalledRanks(t *testing.T) {
	tm := openPreset(t, "tiny")
	bound := 300 * time.Millisecond
	if raceEnabled {
		bound = 2 * time.Second
	}
	req := Request{Prompt: []int32{5, 6, 7, 8, 9}, MaxTokens: 8, IgnoreEOS: true}
	want := aloneTokens(t, tm, req)
	cases := []struct {
		name  string
		stall []int // ranks held
	}{
		{name: "rank 1 stalls", stall: []int{1}},
		{name: "rank 0 stalls", stall: []int{0}},
		{name: "every rank stalls", stall: []int{0, 1}},
		{name: "no stall", stall: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gate := &stallGate{}
			e := startEngine(t, tm, 2, func(c *Config) {
				c.NewComms = gate.comms
				c.StepDeadline, c.ProgressTimeout = time.Hour, bound
			})
			deadline := time.After(30 * time.Second)
			gate.stall(tc.stall...)
			s := mustSubmit(t, e, req)
			if tc.stall != nil {
				reason := waitReady(t, e, false, deadline)
				t.Logf("stalled: %s", reason)
				if !strings.Contains(reason, "no progress") || !strings.Contains(reason, "1 requests waiting or running") {
					t.Errorf("reason %q does not name the stall", reason)
				}
				if _, err := e.Submit(req); !errors.Is(err, ErrNotReady) {
					t.Errorf("Submit while stalled: %v, want ErrNotReady", err)
				}
				gate.release()
				waitReady(t, e, true, deadline)
			}
			got, _, last := collect(t, s)
			if last.Finish != "length" || !slices.Equal(got, want) {
				t.Errorf("tokens %v (finish %q), want %v", got, last.Finish, want)
			}
			st, err := e.SupervisionStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Failures) != 0 || st.Rebuilds != 0 {
				t.Errorf("failures %v, rebuilds %d: the watchdog must only report", st.Failures, st.Rebuilds)
			}
			if wantStalls := min(len(tc.stall), 1); st.Stalls != wantStalls {
				t.Errorf("%d stalls reported, want %d", st.Stalls, wantStalls)
			}
			if ok, reason := e.Ready(); !ok {
				t.Errorf("not ready after the request: %s", reason)
			}
		})
	}
}
