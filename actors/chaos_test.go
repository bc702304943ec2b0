package actors

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cohort/model/sample"
	"cohort/supervision"
)

// chaosDeadline is the step deadline in the chaos tests (the default is 1
// minute); under the race detector steps are ~10× slower.
var chaosDeadline = map[bool]time.Duration{false: time.Second, true: 4 * time.Second}[raceEnabled]

// chaosEngine starts an engine with fault injection and a short deadline;
// failures and recoveries are reported on the returned channels.
func chaosEngine(t *testing.T, tm testModel, tp int, mutate func(*Config)) (*Engine, chan *supervision.RankFailure) {
	failures := make(chan *supervision.RankFailure, 1024)
	e := startEngine(t, tm, tp, func(c *Config) {
		c.Faults, c.Replay = true, true
		c.StepDeadline, c.CommPoll = chaosDeadline, 20*time.Millisecond
		c.MaxRebuilds, c.RebuildWindow = 1000, time.Minute
		c.Capacity.MaxSeqs = 8
		c.OnFailure = func(f *supervision.RankFailure) {
			select {
			case failures <- f:
			default:
			}
		}
		if mutate != nil {
			mutate(c)
		}
	})
	return e, failures
}

// chaosWorkload is a fixed set of greedy and seeded requests with their
// fault-free outputs: 24, or 12 under the race detector (every prompt
// length still), where each reference costs a second.
type chaosWorkload struct {
	reqs []Request
	want [][]int32
}

func newChaosWorkload(t *testing.T, tm testModel) chaosWorkload {
	n := 24
	if raceEnabled {
		n = 12
	}
	w := chaosWorkload{reqs: mixedRequests(n, tm.tok.VocabSize())}
	for i := range w.reqs {
		w.reqs[i].MaxTokens = 24 + i%16
		w.reqs[i].IgnoreEOS = true
		w.want = append(w.want, aloneTokens(t, tm, w.reqs[i]))
	}
	return w
}

// TestChaos kills, panics, hangs, slows, fails and disconnects rank actors
// under load from 16 streaming clients and checks that nothing is lost: every
// request completes with exactly its fault-free tokens (replay), hangs are
// detected within the step deadline, and no goroutines leak.
func TestChaos(t *testing.T) {
	tm := openPreset(t, "tiny")
	work := newChaosWorkload(t, tm)
	tps, faults := []int{2, 4}, 3*len(FaultKinds)
	switch {
	case raceEnabled:
		// Under -race a shorter run checks the same paths: every kind once.
		tps, faults = []int{2}, len(FaultKinds)
	case testing.Short():
		// `make test` (-short): every kind twice at both degrees, on two
		// ranks each; the full run (three rounds) runs without -short.
		faults = 2 * len(FaultKinds)
	}
	for _, tp := range tps {
		before, heapBefore := runtime.NumGoroutine(), heapAlloc()
		t.Run(fmt.Sprintf("tp=%d", tp), func(t *testing.T) { runChaos(t, tm, work, tp, faults) })
		// The engine is closed and its test cleanups have run.
		waitGoroutines(t, before)
		if grew := int64(heapAlloc()) - int64(heapBefore); grew > 16<<20 {
			t.Errorf("tp=%d: heap grew by %d MiB over the chaos run", tp, grew>>20)
		}
	}
}

func runChaos(t *testing.T, tm testModel, work chaosWorkload, tp, faults int) {
	e, failures := chaosEngine(t, tm, tp, nil)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var stop atomic.Bool
	var completed, mismatched, tokens atomic.Int64
	progress := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Go(func() {
			for i := c; !stop.Load(); i += 16 {
				k := i % len(work.reqs)
				got, err := submitWithRetry(ctx, e, work.reqs[k], func() {
					tokens.Add(1)
					select {
					case progress <- struct{}{}:
					default:
					}
				})
				if err != nil {
					t.Errorf("client %d request %d: %v", c, k, err)
					return
				}
				if !slices.Equal(got, work.want[k]) {
					mismatched.Add(1)
					t.Errorf("request %d: got %v, fault-free %v", k, got, work.want[k])
				}
				completed.Add(1)
			}
		})
	}

	kinds := FaultKinds
	var hangDetect []time.Duration
	for i := 0; i < faults; i++ {
		if err := e.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		// Let the load make progress so the fault hits running requests.
		for start := tokens.Load(); tokens.Load() < start+48; {
			select {
			case <-progress:
			case <-ctx.Done():
				t.Fatal("no progress after recovery")
			}
		}
		for len(failures) > 0 { // a failure from before belongs to no fault of ours
			<-failures
		}
		f := Fault{Kind: kinds[i%len(kinds)], Rank: i % tp}
		if f.Kind == FaultSlow {
			f.Duration = chaosDeadline + 300*time.Millisecond
		}
		injected := time.Now()
		if err := e.InjectFault(ctx, f); err != nil {
			t.Fatalf("inject %+v: %v", f, err)
		}
		select {
		case got := <-failures:
			if f.Kind == FaultHang {
				d := time.Since(injected)
				hangDetect = append(hangDetect, d)
				if got.Cause != supervision.CauseDeadline && got.Cause != supervision.CauseError {
					t.Errorf("hang detected as %s", got.Cause)
				}
			}
		case <-ctx.Done():
			t.Fatalf("fault %+v was never detected", f)
		}
	}
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()

	st, err := e.SupervisionStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range hangDetect {
		if d > chaosDeadline+time.Second {
			t.Errorf("a hung rank took %v to detect (deadline %v)", d, chaosDeadline)
		}
	}
	if st.Rebuilds < faults || len(st.Recovery) < faults {
		t.Errorf("rebuilds %d, recoveries %d, want ≥ %d", st.Rebuilds, len(st.Recovery), faults)
	}
	if completed.Load() < 16 {
		t.Errorf("only %d requests completed", completed.Load())
	}
	p50, p99 := percentile(st.Recovery, 0.5), percentile(st.Recovery, 0.99)
	t.Logf("tp=%d: %d faults, failures %v, %d requests completed (%d mismatched), %d replayed; recovery detect→ready p50 %v p99 %v; hang detection %v",
		tp, faults, st.Failures, completed.Load(), mismatched.Load(), st.Replayed, p50, p99, hangDetect)
}

// submitWithRetry runs a request to completion, waiting out recoveries
// (503) the way a client honouring Retry-After would.
func submitWithRetry(ctx context.Context, e *Engine, r Request, onToken func()) ([]int32, error) {
	for {
		s, err := e.Submit(r)
		if errors.Is(err, ErrNotReady) {
			if err := e.WaitReady(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		var ids []int32
		for {
			ev, err := s.Recv(ctx)
			if err != nil {
				return nil, fmt.Errorf("stream: %w", err)
			}
			if ev.HasToken {
				ids = append(ids, ev.Token)
				onToken()
			}
			if ev.Finish == "error" {
				return nil, fmt.Errorf("request failed: %w", ev.Err)
			}
			if ev.Finish != "" {
				return ids, nil
			}
		}
	}
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// waitGoroutines fails if the goroutine count does not come back to the
// baseline within a deadline (executors of stopped ranks finish their job).
func waitGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, baseline %d\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}

// TestRestartIntensity: a rank that fails on every step makes the engine die
// cleanly with the reason (no loop, no 503 forever), and the request in
// flight ends with an error.
func TestRestartIntensity(t *testing.T) {
	tm := openPreset(t, "tiny")
	e, _ := chaosEngine(t, tm, 2, func(c *Config) { c.MaxRebuilds = 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.InjectFault(ctx, Fault{Kind: FaultError, Rank: 1, Persistent: true}); err != nil {
		t.Fatal(err)
	}
	s := mustSubmit(t, e, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 8})
	select {
	case <-e.Done():
	case <-ctx.Done():
		t.Fatal("the engine did not die")
	}
	if err := e.Err(); !errors.Is(err, supervision.ErrIntensity) {
		t.Fatalf("Err = %v, want restart intensity", err)
	}
	if live, why := e.Live(); live || why == "" {
		t.Fatalf("Live = %v %q", live, why)
	}
	_, _, last := collect(t, s)
	if last.Finish != "error" || !errors.Is(last.Err, ErrEngineFailure) {
		t.Fatalf("in-flight request ended %q %v", last.Finish, last.Err)
	}
	if _, err := e.Submit(Request{Prompt: []int32{1}, MaxTokens: 1}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("submit after death: %v", err)
	}
	st, _ := e.SupervisionStats(ctx)
	if st.Rebuilds != 3 || st.Failures[supervision.CauseError] != 4 {
		t.Fatalf("stats %+v: want 3 rebuilds and 4 failures", st)
	}
}

// TestReplayOff: without replay, the in-flight request ends with a clear
// error, queued requests survive the rebuild, and the engine is ready again.
func TestReplayOff(t *testing.T) {
	tm := openPreset(t, "tiny")
	e, failures := chaosEngine(t, tm, 2, func(c *Config) { c.Replay = false; c.Capacity.MaxSeqs = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	running := mustSubmit(t, e, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 400, IgnoreEOS: true})
	if _, err := running.Recv(ctx); err != nil { // it is decoding
		t.Fatal(err)
	}
	queued := Request{Prompt: []int32{7, 8}, MaxTokens: 6, Params: sample.Params{Temperature: 0.9, Seed: 3}}
	qs := mustSubmit(t, e, queued) // waits: one slot
	if err := e.InjectFault(ctx, Fault{Kind: FaultStop, Rank: 1}); err != nil {
		t.Fatal(err)
	}
	if f := <-failures; f.Cause != supervision.CauseTerminated {
		t.Fatalf("cause %s", f.Cause)
	}
	_, _, last := collect(t, running)
	if last.Finish != "error" || !errors.Is(last.Err, ErrEngineFailure) {
		t.Fatalf("in-flight request ended %q %v", last.Finish, last.Err)
	}
	got, _, _ := collect(t, qs)
	if want := aloneTokens(t, tm, queued); !slices.Equal(got, want) {
		t.Fatalf("queued request after rebuild: %v, want %v", got, want)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestCommAsyncErrorDetected: a communicator's asynchronous error is found
// by the poller even when no step runs, and the group is rebuilt.
func TestCommAsyncErrorDetected(t *testing.T) {
	tm := openPreset(t, "tiny")
	e, failures := chaosEngine(t, tm, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.InjectFault(ctx, Fault{Kind: FaultDropComm, Rank: 0}); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-failures:
		if f.Cause != supervision.CauseComm {
			t.Fatalf("cause %s, want comm", f.Cause)
		}
	case <-ctx.Done():
		t.Fatal("async error not detected")
	}
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, _ := collect(t, mustSubmit(t, e, Request{Prompt: []int32{4, 5}, MaxTokens: 5}))
	if want := aloneTokens(t, tm, Request{Prompt: []int32{4, 5}, MaxTokens: 5}); !slices.Equal(got, want) {
		t.Fatalf("after rebuild: %v, want %v", got, want)
	}
}

func TestFaultsDisabledByDefault(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	if err := e.InjectFault(context.Background(), Fault{Kind: FaultStop}); !errors.Is(err, ErrFaultsDisabled) {
		t.Fatalf("InjectFault = %v, want ErrFaultsDisabled", err)
	}
}

// TestPromptLogprobsSurviveReplay: a rank failure during a request's
// chunked prefill replays it; its prompt logprobs arrive once each, equal
// to a fault-free run's, and its tokens are unchanged.
func TestPromptLogprobsSurviveReplay(t *testing.T) {
	tm := openPreset(t, "tiny")
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32((i*53 + 7) % 250)
	}
	req := Request{Prompt: prompt, MaxTokens: 3, IgnoreEOS: true, PromptLogprobs: true, TopLogprobs: 1}
	run := func(e *Engine, inject func()) ([]int32, Event) {
		s := mustSubmit(t, e, req)
		if inject != nil {
			inject()
		}
		first, err := s.Recv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids, _, _ := collect(t, s)
		return append([]int32{first.Token}, ids...), first
	}
	// One prompt token per step: the first step scores position 1; rank 0's
	// error, armed to let one step pass, fails the second.
	oneToken := func(c *Config) { c.MaxPrefillTokens = 1 }
	wantIDs, want := run(startEngine(t, tm, 2, oneToken), nil)

	e, _ := chaosEngine(t, tm, 2, oneToken)
	if err := e.InjectFault(context.Background(), Fault{Kind: FaultError, Rank: 0, Skip: 1}); err != nil {
		t.Fatal(err)
	}
	gotIDs, got := run(e, nil)
	st, _ := e.SupervisionStats(context.Background())
	t.Logf("failures %v, replayed %d", st.Failures, st.Replayed)
	if st.Replayed == 0 {
		t.Fatalf("the request was not replayed (failures %v)", st.Failures)
	}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Errorf("tokens %v after replay, %v fault-free", gotIDs, wantIDs)
	}
	if len(got.PromptLogprobs) != len(prompt)-1 {
		t.Fatalf("%d prompt logprobs after replay, want %d", len(got.PromptLogprobs), len(prompt)-1)
	}
	for i, r := range got.PromptLogprobs {
		if w := want.PromptLogprobs[i]; r.Token != w.Token {
			t.Errorf("prompt logprob %d: %+v after replay, %+v fault-free", i, r.Token, w.Token)
		}
	}
}
