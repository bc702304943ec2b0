package remote

// Test helpers of the engine's own tests (package actors) that the remote
// tests need too: what needs no actors type comes from
// internal/testmodels/servetest; an internal test of actors cannot share the
// rest without an import cycle, so the few needed are repeated here.

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/internal/testmodels/servetest"
	"cohort/model"
	"cohort/model/sample"
	"cohort/model/tokenizer"
)

// chaosDeadline is the step deadline of the failure tests.
var chaosDeadline = map[bool]time.Duration{false: time.Second, true: 4 * time.Second}[raceEnabled]

func cpuBackends(threads int) actors.BackendFactory { return servetest.CPUBackends(threads) }

type testModel struct {
	ck  *model.Checkpoint
	tok *tokenizer.Tokenizer
	sm  servetest.Model
}

func fromServe(m servetest.Model) testModel {
	return testModel{ck: m.Checkpoint, tok: m.Tokenizer, sm: m}
}

func openPreset(t testing.TB, preset string) testModel {
	return fromServe(servetest.OpenPreset(t, preset))
}

func startEngine(t testing.TB, tm testModel, tp int, mutate func(*actors.Config)) *actors.Engine {
	t.Helper()
	cfg := actors.Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: tp, NewBackend: cpuBackends(1),
		Capacity: servetest.Capacity, MaxPrefillTokens: 256, MaxRows: 64}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func mustSubmit(t testing.TB, e *actors.Engine, r actors.Request) *actors.Stream {
	t.Helper()
	s, err := e.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// collect reads a stream to its end.
func collect(t testing.TB, s *actors.Stream) (ids []int32, text string, last actors.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if err == io.EOF {
			return ids, text, last
		}
		if err != nil {
			t.Errorf("stream: %v", err)
			return ids, text, last
		}
		if ev.HasToken {
			ids = append(ids, ev.Token)
		}
		text += ev.Text
		last = ev
	}
}

// aloneTokens is the tokens a request gets when run alone.
func aloneTokens(t testing.TB, tm testModel, r actors.Request) []int32 {
	t.Helper()
	return servetest.Alone(t, tm.sm, r.Prompt, r.Params, r.MaxTokens, r.IgnoreEOS)
}

func mixedRequests(n, vocab int) []actors.Request {
	reqs := make([]actors.Request, n)
	x := uint32(12345)
	for i := range reqs {
		plen := []int{1, 3, 17, 40, 64, 65, 90}[i%7]
		prompt := make([]int32, plen)
		for j := range prompt {
			x = x*1664525 + 1013904223
			prompt[j] = int32(x>>8) % int32(vocab-16) // stay clear of the special tokens
		}
		reqs[i] = actors.Request{Prompt: prompt, MaxTokens: 4 + i%9}
		if i%2 == 1 {
			reqs[i].Params = sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(1000 + i)}
		}
	}
	return reqs
}

// captureLog sends the standard logger to a buffer until the test ends.
func captureLog(t *testing.T) *bytes.Buffer { return servetest.CaptureLog(t) }

// presetModel opens a preset (echo: the tiny preset with the echo
// architecture, which does no compute).
func presetModel(b testing.TB, preset string) testModel {
	if preset != "echo" {
		return openPreset(b, preset)
	}
	return fromServe(servetest.OpenEcho(b))
}

func benchRequests(n, maxTokens int) []actors.Request {
	reqs := make([]actors.Request, n)
	for i := range reqs {
		prompt := make([]int32, 16)
		for j := range prompt {
			prompt[j] = int32((i*131 + j*7) % 250)
		}
		reqs[i] = actors.Request{Prompt: prompt, MaxTokens: maxTokens, IgnoreEOS: true}
	}
	return reqs
}

var benchCapacity = model.CapacityInput{Budget: 1 << 30, ElemBytes: 4, PageSize: 16, MaxSeqs: 64, MaxModelLen: 4096}

type result struct {
	elapsed time.Duration
	steps   int
	tokens  int
}

// runEngineWith starts an engine with cfg and times reqs through it, b.N
// times, checking that each request gets all its tokens.
func runEngineWith(b *testing.B, cfg actors.Config, reqs []actors.Request) result {
	e, err := actors.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var res result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before, _ := e.Stats(context.Background())
		start := time.Now()
		var wg sync.WaitGroup
		for _, r := range reqs {
			s := mustSubmit(b, e, r)
			wg.Go(func() {
				if ids, _, _ := collect(b, s); len(ids) != r.MaxTokens {
					b.Errorf("got %d tokens, want %d", len(ids), r.MaxTokens)
				}
			})
		}
		wg.Wait()
		res.elapsed += time.Since(start)
		after, _ := e.Stats(context.Background())
		res.steps += int(after.Step - before.Step)
		res.tokens += len(reqs) * reqs[0].MaxTokens
	}
	b.ReportMetric(float64(res.tokens)/res.elapsed.Seconds(), "tok/s")
	b.ReportMetric(res.elapsed.Seconds()*1e6/float64(res.steps), "µs/step")
	return res
}
