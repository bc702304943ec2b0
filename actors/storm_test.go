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

// TestFaultStorm injects a fault every 500 ms for 30 s (4 s with -short or
// -race) into a TP=2 group under 16 streaming clients. Every request must
// finish with its fault-free tokens, and no stream may go more than 5 s
// without an event (the HTTP edge adds SSE keep-alives on top of that). The
// storm's pace comes from a ticker: it is the load, not a wait.
func TestFaultStorm(t *testing.T) {
	storm := 30 * time.Second
	if testing.Short() || raceEnabled {
		storm = 4 * time.Second
	}
	const every, maxGap = 500 * time.Millisecond, 5 * time.Second
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
