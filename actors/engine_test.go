package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cohort/internal/testmodels/servetest"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/qwen35"
	"cohort/model/sample"
	"cohort/model/tokenizer"
	"cohort/nccl"
)

func cpuBackends(threads int) BackendFactory { return servetest.CPUBackends(threads) }

type testModel struct {
	ck  *model.Checkpoint
	tok *tokenizer.Tokenizer
	be  kernels.Backend // a single-rank copy for reference runs
	m   model.Model
	sm  servetest.Model
}

func fromServe(m servetest.Model) testModel {
	return testModel{ck: m.Checkpoint, tok: m.Tokenizer, be: m.Backend, m: m.Model, sm: m}
}

func openPreset(t testing.TB, preset string) testModel {
	return fromServe(servetest.OpenPreset(t, preset))
}

// openDir opens a checkpoint directory with its tokenizer and a single-rank
// reference copy of the model.
func openDir(t testing.TB, dir string) testModel { return fromServe(servetest.OpenDir(t, dir)) }

func startEngine(t testing.TB, tm testModel, tp int, mutate func(*Config)) *Engine {
	t.Helper()
	cfg := Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: tp, NewBackend: cpuBackends(1),
		Capacity: servetest.Capacity, MaxPrefillTokens: 256, MaxRows: 64}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// collect reads a stream to its end.
func collect(t testing.TB, s *Stream) (ids []int32, text string, last Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if err == io.EOF {
			return ids, text, last
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if ev.HasToken {
			ids = append(ids, ev.Token)
		}
		text += ev.Text
		last = ev
	}
}

// aloneTokens is the reference for "the tokens a request gets when run
// alone".
func aloneTokens(t testing.TB, tm testModel, r Request) []int32 {
	t.Helper()
	return servetest.Alone(t, tm.sm, r.Prompt, r.Params, r.MaxTokens, r.IgnoreEOS)
}

func mixedRequests(n, vocab int) []Request {
	reqs := make([]Request, n)
	x := uint32(12345)
	for i := range reqs {
		plen := []int{1, 3, 17, 40, 64, 65, 90}[i%7]
		prompt := make([]int32, plen)
		for j := range prompt {
			x = x*1664525 + 1013904223
			prompt[j] = int32(x>>8) % int32(vocab-16) // stay clear of the special tokens
		}
		reqs[i] = Request{Prompt: prompt, MaxTokens: 4 + i%9}
		if i%2 == 1 {
			reqs[i].Params = sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(1000 + i)}
		}
	}
	return reqs
}

// TestConcurrentMatchesAlone: 32 concurrent requests of mixed lengths,
// greedy and seeded, get exactly the tokens each gets alone. Few slots and
// a small prefill budget force chunked prefill, mixed steps and slot reuse.
// Under the race detector 16 requests (every prompt length, greedy and
// seeded, still almost three times the slots) do.
func TestConcurrentMatchesAlone(t *testing.T) {
	tm := openPreset(t, "tiny")
	n := 32
	if raceEnabled {
		n = 16
	}
	reqs := mixedRequests(n, tm.tok.VocabSize())
	want := make([][]int32, len(reqs))
	for i, r := range reqs {
		want[i] = aloneTokens(t, tm, r)
	}
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp=%d", tp), func(t *testing.T) {
			e := startEngine(t, tm, tp, func(c *Config) { c.Capacity.MaxSeqs = 6; c.MaxPrefillTokens = 48 })
			streams := make([]*Stream, len(reqs))
			for i, r := range reqs {
				s, err := e.Submit(r)
				if err != nil {
					t.Fatal(err)
				}
				streams[i] = s
			}
			var wg sync.WaitGroup
			got := make([][]int32, len(reqs))
			for i := range streams {
				wg.Go(func() { got[i], _, _ = collect(t, streams[i]) })
			}
			wg.Wait()
			for i, r := range reqs {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("request %d (prompt %d, %+v): got %v, alone %v", i, len(r.Prompt), r.Params, got[i], want[i])
				}
			}
			st, err := e.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Running != 0 || st.Waiting != 0 || st.FreeSlots != e.Info().Slots || st.FreePages != e.Info().KVPages {
				t.Errorf("after all requests: %+v, info %+v", st, e.Info())
			}
		})
	}
}

func TestCancelFreesState(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 2, func(c *Config) { c.Capacity.MaxSeqs = 1 })
	long := Request{Prompt: []int32{5, 6, 7, 8, 9}, MaxTokens: 500, IgnoreEOS: true}
	s, err := e.Submit(long)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ { // a few decode steps in
		if _, err := s.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Cancel()
	_, _, last := collect(t, s)
	if last.Finish != "cancelled" {
		t.Fatalf("finish = %q, want cancelled", last.Finish)
	}
	// The only slot is reused by the next request: its tokens must equal a
	// fresh run, which needs the slot's GDN state zeroed before reuse.
	next := Request{Prompt: []int32{40, 41, 42}, MaxTokens: 8}
	s2, err := e.Submit(next)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := collect(t, s2)
	if want := aloneTokens(t, tm, next); !slices.Equal(got, want) {
		t.Fatalf("after reuse: %v, fresh %v", got, want)
	}
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.FreeSlots != 1 || st.FreePages != e.Info().KVPages {
		t.Fatalf("state not freed: %+v", st)
	}
}

// TestResetZeroesReusedSlot: executeStep zeroes the slot of each admitted
// request before the forward pass; without the reset a dirty slot changes
// the logits.
func TestResetZeroesReusedSlot(t *testing.T) {
	tm := openPreset(t, "tiny")
	be := cpu.New(cpu.Options{Threads: 1})
	m, err := tm.ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	st := m.NewState(be, 1, 8, 16)
	step := func(tokens []int32, reset bool) []sample.Result {
		// Each step starts the request at position 0 on slot 0: admitted
		// (which zeroes the slot), or recorded without an admission.
		sm := Sampling{TopN: 5}
		seqs := newSeqCache(true)
		msg := &RunStep{Tokens: tokens, Seqs: []StepSeq{{ID: 1, Len: len(tokens), NewPages: []int32{0}}},
			Outputs: []OutputRow{{ID: 1, Row: len(tokens) - 1}}}
		if reset {
			msg.Admitted = []AdmitSeq{{ID: 1, Slot: 0, PromptLen: len(tokens), Sampling: sm}}
		} else {
			seqs.seqs[1] = &seqState{slot: 0, promptLen: len(tokens), sampling: sm}
		}
		out, err := executeStep(be, m, st, seqs, msg, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	fresh := step([]int32{1, 2, 3}, false)
	step([]int32{9, 9, 9, 9}, false) // dirty the slot
	dirty := step([]int32{1, 2, 3}, false)
	clean := step([]int32{1, 2, 3}, true)
	if fmt.Sprint(dirty) == fmt.Sprint(fresh) {
		t.Fatal("a dirty slot did not change the output: the test cannot see a missing reset")
	}
	if fmt.Sprint(clean) != fmt.Sprint(fresh) {
		t.Fatalf("after Reset: %v, fresh %v", clean, fresh)
	}
	if snap := st.(*qwen35.State).GDN.(*cpu.StatePool).Snapshot(0); !slices.ContainsFunc(snap, func(v float32) bool { return v != 0 }) {
		t.Fatal("state stayed zero after a step")
	}
}

func TestStopStringsAcrossTokens(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	r := Request{Prompt: []int32{10, 20, 30}, MaxTokens: 24, IgnoreEOS: true}
	_, text, _ := collect(t, mustSubmit(t, e, r))
	if len(text) < 6 {
		t.Skipf("generated text %q too short to cut", text)
	}
	stop := text[3:6] // spans whatever token boundaries fall there
	r.Stop = []string{stop, "never-appears"}
	_, got, last := collect(t, mustSubmit(t, e, r))
	want := text[:strings.Index(text, stop)]
	if got != want || last.Finish != "stop" {
		t.Fatalf("with stop %q: got %q (finish %q), want %q", stop, got, last.Finish, want)
	}
	r.IncludeStopStr = true // vLLM's include_stop_str_in_output: the text ends with the stop string
	_, got, last = collect(t, mustSubmit(t, e, r))
	if want += stop; got != want || last.Finish != "stop" {
		t.Fatalf("with stop %q, IncludeStopStr: got %q (finish %q), want %q", stop, got, last.Finish, want)
	}
}

// TestSkipSpecialTokens: with SkipSpecialTokens a generated special token
// (here <|im_start|>, forced by a bias; not an EOS) leaves no text; without
// it the token's text is in the output.
func TestSkipSpecialTokens(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	special, ok := tm.tok.TokenID("<|im_start|>")
	if !ok || !tm.tok.IsSpecial(special) {
		t.Fatal("the tiny tokenizer has no special <|im_start|>")
	}
	for _, tt := range []struct {
		skip bool
		want string
	}{{false, "<|im_start|><|im_start|>"}, {true, ""}} {
		r := Request{Prompt: []int32{10, 20}, MaxTokens: 2, SkipSpecialTokens: tt.skip,
			Params: sample.Params{LogitBias: []sample.TokenBias{{ID: special, Bias: 100}}}}
		toks, text, last := collect(t, mustSubmit(t, e, r))
		if text != tt.want || len(toks) != 2 || last.Finish != "length" {
			t.Errorf("SkipSpecialTokens %v: text %q tokens %v finish %q, want %q", tt.skip, text, toks, last.Finish, tt.want)
		}
	}
}

func mustSubmit(t testing.TB, e *Engine, r Request) *Stream {
	t.Helper()
	s, err := e.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRejections(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	tests := []struct {
		name string
		r    Request
		want string
	}{
		{"empty prompt", Request{MaxTokens: 1}, "prompt is empty"},
		{"zero max tokens", Request{Prompt: []int32{1}}, "max_tokens 0"},
		{"out of vocab", Request{Prompt: []int32{1, 100000}, MaxTokens: 1}, "outside the vocabulary"},
		{"bad temperature", Request{Prompt: []int32{1}, MaxTokens: 1, Params: sample.Params{Temperature: -1}}, "temperature"},
		{"logit_bias out of vocab", Request{Prompt: []int32{1}, MaxTokens: 1,
			Params: sample.Params{LogitBias: []sample.TokenBias{{ID: 2, Bias: 1}, {ID: 100000, Bias: 1}}}}, "logit_bias token 100000"},
		{"logit_bias unsorted", Request{Prompt: []int32{1}, MaxTokens: 1,
			Params: sample.Params{LogitBias: []sample.TokenBias{{ID: 5, Bias: 1}, {ID: 2, Bias: 1}}}}, "ascending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Submit(tt.r)
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// Context length is the planner's call: the stream ends with an error.
	_, _, last := collect(t, mustSubmit(t, e, Request{Prompt: make([]int32, 1000), MaxTokens: 100}))
	if last.Finish != "error" || last.Err == nil || !strings.Contains(last.Err.Error(), "1024") {
		t.Fatalf("context length: finish %q err %v", last.Finish, last.Err)
	}
}

func TestTPDegreeMustDivideHeads(t *testing.T) {
	tm := openPreset(t, "tiny")
	_, err := Start(context.Background(), Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: 3, NewBackend: cpuBackends(1),
		Capacity: model.CapacityInput{Budget: 64 << 20, ElemBytes: 4, PageSize: 16, MaxSeqs: 8}, MaxPrefillTokens: 64, MaxRows: 8})
	if err == nil || !strings.Contains(err.Error(), "tensor-parallel degree 3 does not divide") {
		t.Fatalf("TP=3: %v", err)
	}
}

func TestOverloadedAndPendingCount(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, func(c *Config) { c.MaxPending = 2 })
	long := Request{Prompt: []int32{1, 2}, MaxTokens: 200, IgnoreEOS: true}
	a, b := mustSubmit(t, e, long), mustSubmit(t, e, long)
	if _, err := e.Submit(long); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third request: %v, want ErrOverloaded", err)
	}
	a.Cancel()
	collect(t, a)
	if got := e.Pending(); got != 1 {
		t.Fatalf("pending after one ended = %d, want 1", got)
	}
	c := mustSubmit(t, e, Request{Prompt: []int32{3}, MaxTokens: 2})
	collect(t, c)
	b.Cancel()
	collect(t, b)
	if got := e.Pending(); got != 0 {
		t.Fatalf("pending at the end = %d", got)
	}
}

// TestMinTokens: a stop token id that greedy decoding would pick at once
// is held back for the first min_tokens tokens, and so is a stop string;
// after them both end the request as usual.
func TestMinTokens(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	prompt := []int32{5, 9, 13, 2}
	free, _, _ := collect(t, mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true}))
	stopID := free[0]

	ids, _, last := collect(t, mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true,
		StopTokenIDs: []int32{stopID}, Params: sample.Params{MinTokens: 4}}))
	if len(ids) < 4 || slices.Contains(ids[:4], stopID) {
		t.Fatalf("min_tokens 4 with stop id %d: got %v", stopID, ids)
	}
	if len(ids) < 8 && (last.Finish != "stop" || ids[len(ids)-1] != stopID) {
		t.Errorf("ended early without the stop id: %v, finish %q", ids, last.Finish)
	}
	if _, _, last := collect(t, mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true,
		StopTokenIDs: []int32{stopID}})); last.Finish != "stop" || last.Usage.CompletionTokens != 1 {
		t.Errorf("without min_tokens: finish %q after %d tokens, want stop after 1", last.Finish, last.Usage.CompletionTokens)
	}

	// A stop string made of the first token's text.
	first := tm.tok.Decode(free[:1])
	if first == "" {
		t.Skip("first token decodes to no text")
	}
	_, text, last := collect(t, mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true,
		Stop: []string{first}, Params: sample.Params{MinTokens: 3}}))
	if last.Usage.CompletionTokens < 3 {
		t.Errorf("stop string %q ended the request after %d tokens (%q), before min_tokens 3", first, last.Usage.CompletionTokens, text)
	}
}

// TestPromptLogprobs: the first event of a request with PromptLogprobs
// carries the logprob of every prompt token after the first, equal to a
// single-sequence reference run's log-softmax, through chunked prefill
// (8-token chunks) and at TP=2, and the generated tokens are unchanged.
func TestPromptLogprobs(t *testing.T) {
	tm := openPreset(t, "tiny")
	prompt := make([]int32, 30)
	for i := range prompt {
		prompt[i] = int32((i*37 + 11) % 250)
	}
	logits, err := model.NewSession(tm.be, tm.m, len(prompt)).Step(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	vocab := len(logits) / len(prompt)
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp%d", tp), func(t *testing.T) {
			e := startEngine(t, tm, tp, func(c *Config) { c.MaxPrefillTokens = 8 })
			plain, _, _ := collect(t, mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 4, IgnoreEOS: true}))
			s := mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 4, IgnoreEOS: true, PromptLogprobs: true, TopLogprobs: 2})
			first, err := s.Recv(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ids, _, _ := collect(t, s)
			if got := append([]int32{first.Token}, ids...); !slices.Equal(got, plain) {
				t.Errorf("tokens %v with prompt logprobs, %v without", got, plain)
			}
			if len(first.PromptLogprobs) != len(prompt)-1 {
				t.Fatalf("%d prompt logprobs, want %d", len(first.PromptLogprobs), len(prompt)-1)
			}
			var worst float64
			for i, r := range first.PromptLogprobs {
				want := sample.LogSoftmax(logits[i*vocab : (i+1)*vocab])
				if r.Token.ID != prompt[i+1] || len(r.Top) != 2 {
					t.Fatalf("prompt logprob %d: %+v, want token %d with 2 alternatives", i, r, prompt[i+1])
				}
				worst = max(worst, math.Abs(r.Token.Logprob-want[prompt[i+1]]))
			}
			if worst > 1e-4 {
				t.Errorf("prompt logprobs differ from the reference by %g", worst)
			}
		})
	}
}

// TestLogprobsOnlyWhenAsked: without Logprobs or TopLogprobs the tokens
// are the same (greedy and seeded) but no logprob is computed (0); with
// Logprobs each token's logprob is a real, negative log-probability.
func TestLogprobsOnlyWhenAsked(t *testing.T) {
	tm := openPreset(t, "tiny")
	e := startEngine(t, tm, 1, nil)
	prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	for _, p := range []sample.Params{{}, {Temperature: 0.9, TopP: 0.95, Seed: 11}} {
		events := func(logprobs bool) []Event {
			s := mustSubmit(t, e, Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, Params: p, Logprobs: logprobs})
			var out []Event
			for {
				ev, err := s.Recv(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if ev.HasToken {
					out = append(out, ev)
				}
				if ev.Finish != "" {
					return out
				}
			}
		}
		without, with := events(false), events(true)
		if len(without) != 6 || len(with) != 6 {
			t.Fatalf("%d and %d tokens", len(without), len(with))
		}
		for i := range with {
			if without[i].Token != with[i].Token {
				t.Fatalf("params %+v token %d: %d without logprobs, %d with", p, i, without[i].Token, with[i].Token)
			}
			if without[i].Logprob != 0 || !(with[i].Logprob < 0) {
				t.Errorf("token %d: logprob %g without asking, %g when asked", i, without[i].Logprob, with[i].Logprob)
			}
		}
	}
}

// TestFailedLoadsEndTheEngine: generations that fail before they serve end
// the engine after MaxRebuilds of them in a row, however slowly they fail
// (a window too short for the restart intensity to see two rebuilds), so a
// load that cannot succeed is not retried for ever behind a 503.
func TestFailedLoadsEndTheEngine(t *testing.T) {
	tm := openPreset(t, "tiny")
	var loads atomic.Int32
	failing := func(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
		loads.Add(1)
		return nil, errors.New("no device memory for the probe")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Start(ctx, Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: 1, NewBackend: failing,
		Capacity:    model.CapacityInput{Budget: 64 << 20, ElemBytes: 4, PageSize: 16, MaxSeqs: 8},
		MaxRebuilds: 2, RebuildWindow: time.Nanosecond, MaxPrefillTokens: 64, MaxRows: 8})
	if err == nil || !strings.Contains(err.Error(), "3 generations in a row failed before they served") ||
		!strings.Contains(err.Error(), "no device memory for the probe") {
		t.Fatalf("Start: %v; want the engine dead after 3 failed loads, naming the last failure", err)
	}
	if n := loads.Load(); n != 3 {
		t.Errorf("%d loads; want 3 (the first and 2 rebuilds)", n)
	}
}
