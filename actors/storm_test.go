package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFaultStorm injects a fault every 500 ms for 30 s (4 s with -short)
// into a TP=2 group under 16 streaming clients. Every request must finish
// with its fault-free tokens, and no stream may go more than 5 s without an
// event (the HTTP edge adds SSE keep-alives on top of that). Under the race
// detector, where steps are about ten times slower, the storm runs 8 s with
// a fault every 2 s and the bound on silence is 20 s, as the chaos deadline
// is scaled. The storm's pace comes from a ticker: it is the load, not a
// wait.
func TestFaultStorm(t *testing.T) {
	storm, every, maxGap := 30*time.Second, 500*time.Millisecond, 5*time.Second
	switch {
	case raceEnabled:
		storm, every, maxGap = 8*time.Second, 2*time.Second, 20*time.Second
	case testing.Short():
		storm = 4 * time.Second
	}
	tm := openPreset(t, "tiny")
	work := newChaosWorkload(t, tm)
	e, _ := chaosEngine(t, tm, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), storm+3*time.Minute)
	defer cancel()

	var stop atomic.Bool
	var completed, injected atomic.Int64
	var gapMu sync.Mutex
	var worstGap time.Duration
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Go(func() {
			for i := c; !stop.Load(); i += 16 {
				k := i % len(work.reqs)
				got, gap, err := stormRequest(ctx, e, work.reqs[k])
				if err != nil {
					t.Errorf("client %d request %d: %v", c, k, err)
					return
				}
				gapMu.Lock()
				worstGap = max(worstGap, gap)
				gapMu.Unlock()
				if gap > maxGap {
					t.Errorf("client %d request %d: %v without an event", c, k, gap)
				}
				if !slices.Equal(got, work.want[k]) {
					t.Errorf("request %d: got %v, fault-free %v", k, got, work.want[k])
				}
				completed.Add(1)
			}
		})
	}

	kinds := []FaultKind{FaultStop, FaultPanic, FaultError, FaultDropComm, FaultPoison, FaultHang}
	tick := time.NewTicker(every)
	end := time.NewTimer(storm)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			f := Fault{Kind: kinds[i%len(kinds)], Rank: i % 2}
			if err := e.InjectFault(ctx, f); err == nil {
				injected.Add(1)
			} else if !errors.Is(err, ErrFaultsDisabled) {
				t.Logf("inject %+v: %v (no group to inject into)", f, err)
			}
			continue
		case <-end.C:
		case <-ctx.Done():
			t.Fatal("storm did not end")
		}
		break
	}
	tick.Stop()
	stop.Store(true)
	wg.Wait()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := e.SupervisionStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if completed.Load() < 16 {
		t.Errorf("only %d requests completed", completed.Load())
	}
	t.Logf("storm %v: %d faults injected, failures %v, %d rebuilds, %d requests completed, %d replayed, worst silence %v, recovery p50 %v p99 %v",
		storm, injected.Load(), st.Failures, st.Rebuilds, completed.Load(), st.Replayed, worstGap,
		percentile(st.Recovery, 0.5), percentile(st.Recovery, 0.99))
}

// stormRequest runs r to its end like submitWithRetry, and returns the
// longest time the stream went without an event (waiting out a 503
// included, since a client sees nothing then either).
func stormRequest(ctx context.Context, e *Engine, r Request) ([]int32, time.Duration, error) {
	last, gap := time.Now(), time.Duration(0)
	mark := func() {
		now := time.Now()
		gap = max(gap, now.Sub(last))
		last = now
	}
	for {
		s, err := e.Submit(r)
		if errors.Is(err, ErrNotReady) {
			if err := e.WaitReady(ctx); err != nil {
				return nil, gap, err
			}
			continue
		}
		if err != nil {
			return nil, gap, err
		}
		var ids []int32
		for {
			ev, err := s.Recv(ctx)
			if err != nil {
				return nil, gap, fmt.Errorf("stream: %w", err)
			}
			mark()
			if ev.HasToken {
				ids = append(ids, ev.Token)
			}
			if ev.Finish == "error" {
				return nil, gap, fmt.Errorf("request failed: %w", ev.Err)
			}
			if ev.Finish != "" {
				return ids, gap, nil
			}
		}
	}
}

// TestStepTargetShrinksUnderFailures: while failures come often the step
// target is a quarter of the time between them, so steps complete between
// faults; once they stop coming, the configured target is back.
func TestStepTargetShrinksUnderFailures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	cases := []struct {
		name     string
		failures []time.Duration // offsets from t0
		at       time.Duration
		want     time.Duration
	}{
		{"no failure", nil, 0, time.Second},
		{"one failure", []time.Duration{0}, 10 * ms, time.Second},
		{"a failure every 500ms", []time.Duration{0, 500 * ms, 1000 * ms, 1500 * ms}, 1600 * ms, 125 * ms},
		{"storm over", []time.Duration{0, 500 * ms, 1000 * ms}, 3 * time.Second, time.Second},
		{"rare failures", []time.Duration{0, 20 * time.Second}, 21 * time.Second, time.Second},
		{"floor", []time.Duration{0, 1 * ms, 2 * ms}, 3 * ms, 5 * ms},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &scheduler{cfg: Config{StepTarget: time.Second, RebuildWindow: time.Minute}}
			for _, f := range c.failures {
				s.noteFailure(t0.Add(f))
			}
			if got := s.stepTarget(t0.Add(c.at)); got != c.want {
				t.Errorf("stepTarget = %v, want %v", got, c.want)
			}
		})
	}
}
