package actors

import (
	"context"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cohort/actors/planner"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
)

// samplerBackend is the CPU backend with a DeviceSampler that counts its
// calls (the CUDA backend samples on the GPU; this one on the host). Its
// Sample knows each row only by its kernels.SampleRow, so the tokens it
// draws are the host sampler's only if the row says all the host sampler
// knows: it checks the conversion.
type samplerBackend struct {
	*cpu.Backend
	argmaxCalls, sampleCalls atomic.Int64
}

func (b *samplerBackend) Argmax(logits kernels.Tensor) []int32 {
	b.argmaxCalls.Add(1)
	host, vocab := b.rows(logits)
	ids := make([]int32, len(host)/vocab)
	for r := range ids {
		ids[r] = int32(sample.Argmax(host[r*vocab : (r+1)*vocab]))
	}
	return ids
}

func (b *samplerBackend) Sample(logits kernels.Tensor, rows []kernels.SampleRow) []kernels.SampleResult {
	b.sampleCalls.Add(1)
	host, vocab := b.rows(logits)
	out := make([]kernels.SampleResult, len(rows))
	for r, row := range rows {
		out[r] = sampleRowOnHost(host[r*vocab:(r+1)*vocab], row)
	}
	return out
}

func (b *samplerBackend) rows(logits kernels.Tensor) ([]float32, int) {
	_, vocab := kernels.Dims(logits.Shape())
	return b.Download(logits), vocab
}

// sampleRowOnHost is SampleRow's documented meaning, carried out with
// model/sample: the adjustments as kernels.AdjustOps describes them, then
// DrawFrom with the row's uniform; logprobs from the raw logits.
func sampleRowOnHost(raw []float32, row kernels.SampleRow) kernels.SampleResult {
	if row.Score {
		return deviceResult(sample.Score(raw, row.Target, row.TopN))
	}
	work := slices.Clone(raw)
	for _, a := range row.Adjust {
		work[a.ID] = applyAdjust(work[a.ID], a)
	}
	p := sample.Params{Temperature: row.Temperature, TopK: row.TopK, TopP: row.TopP, MinP: row.MinP}
	id := sample.DrawFrom(work, p, row.U)
	if !row.Logprobs && row.TopN == 0 {
		return kernels.SampleResult{Token: kernels.TokenLogprob{ID: id}}
	}
	return deviceResult(sample.Score(raw, id, row.TopN))
}

// applyAdjust is kernels.LogitAdjust's documented meaning.
func applyAdjust(v float32, a kernels.LogitAdjust) float32 {
	if a.Ops&kernels.AdjustRepeat != 0 {
		if v > 0 {
			v = float32(v / a.Scale)
		} else {
			v = float32(v * a.Scale)
		}
	}
	if a.Ops&kernels.AdjustPenalize != 0 {
		v = float32(v - a.Subtract)
	}
	if a.Ops&kernels.AdjustBias != 0 {
		v = float32(v + a.Bias)
	}
	if a.Ops&kernels.AdjustBan != 0 {
		v = float32(math.Inf(-1))
	}
	return v
}

func deviceResult(r sample.Result) kernels.SampleResult {
	out := kernels.SampleResult{Token: kernels.TokenLogprob{ID: r.Token.ID, Logprob: r.Token.Logprob}}
	for _, t := range r.Top {
		out.Top = append(out.Top, kernels.TokenLogprob{ID: t.ID, Logprob: t.Logprob})
	}
	return out
}

// path is where executeStep picked a step's tokens.
type path string

const (
	onHost   path = "host"
	byArgmax path = "Argmax"
	bySample path = "Sample"
)

// TestDeviceSampling: executeStep lets a DeviceSampler pick the tokens by
// Argmax when every row is a plain argmax without logprobs, by Sample when
// no row is constrained (temperature, top-k, top-p, min-p, penalties over
// a history, logit bias, min_tokens bans, logprobs and top logprobs,
// prompt logprobs), and on the host otherwise; the results (tokens,
// logprobs, alternatives) are the host sampler's every time.
func TestDeviceSampling(t *testing.T) {
	tm := openPreset(t, "tiny")
	be := &samplerBackend{Backend: cpu.New(cpu.Options{Threads: 1})}
	m, err := tm.ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	vocab := tm.tok.VocabSize()
	st := m.NewState(be, 2, 8, 16)
	admit := func(id int, promptLen int, sm Sampling) AdmitSeq {
		return AdmitSeq{ID: planner.RequestID(id), Slot: id - 1, PromptLen: promptLen, Sampling: sm}
	}
	seeded := func(p sample.Params) Sampling { p.Seed = 3; return Sampling{Params: p} }
	plain := Sampling{}
	mask := sample.NewMask(vocab)
	for id := range int32(40) {
		mask.Set(id)
	}
	draw := []OutputRow{{ID: 1, Row: 2}, {ID: 2, Row: 5}}
	for _, tc := range []struct {
		name   string
		first  Sampling
		second AdmitSeq
		rows   []OutputRow
		want   path
	}{
		{"greedy", plain, admit(2, 3, plain), draw, byArgmax},
		{"one row wants logprobs", plain, admit(2, 3, Sampling{Logprobs: true}), draw, bySample},
		{"top logprobs", Sampling{TopN: 3}, admit(2, 3, plain), draw, bySample},
		{"logprobs and top logprobs", Sampling{Logprobs: true, TopN: 20}, admit(2, 3, Sampling{Logprobs: true}), draw, bySample},
		{"temperature", seeded(sample.Params{Temperature: 0.7}), admit(2, 3, plain), draw, bySample},
		{"top-k", seeded(sample.Params{Temperature: 1.3, TopK: 5}), admit(2, 3, seeded(sample.Params{Temperature: 1, TopK: 1})), draw, bySample},
		{"top-p", seeded(sample.Params{Temperature: 1.5, TopP: 0.9}), admit(2, 3, seeded(sample.Params{Temperature: 0.3, TopP: 0.5})), draw, bySample},
		{"min-p", seeded(sample.Params{Temperature: 1.5, MinP: 0.05}), admit(2, 3, seeded(sample.Params{Temperature: 1, MinP: 0.2, TopK: 50})), draw, bySample},
		// Prompt length 1: two of the three tokens count as generated, so
		// the frequency and presence penalties have a history.
		{"penalties", seeded(sample.Params{Temperature: 1.2, FrequencyPenalty: 2, PresencePenalty: 1.5, RepetitionPenalty: 1.7}),
			admit(2, 1, Sampling{Params: sample.Params{FrequencyPenalty: -2, RepetitionPenalty: 0.5}}), draw, bySample},
		{"logit bias", Sampling{Params: sample.Params{LogitBias: []sample.TokenBias{{ID: 4, Bias: 50}}}}, admit(2, 3, plain), draw, bySample},
		{"seeded logit bias", seeded(sample.Params{Temperature: 1, LogitBias: []sample.TokenBias{{ID: 4, Bias: 3}, {ID: 9, Bias: -100}}}), admit(2, 3, plain), draw, bySample},
		{"min tokens with stops", Sampling{Params: sample.Params{MinTokens: 2, StopIDs: []int32{1}}}, admit(2, 3, plain), draw, bySample},
		// Prompt length 0: the three tokens count as generated, so the
		// draw is the fourth and min_tokens no longer bans the stops.
		{"min tokens reached", plain, admit(2, 0, Sampling{Params: sample.Params{MinTokens: 2, StopIDs: []int32{1}}}), draw, byArgmax},
		{"prompt logprobs", Sampling{TopN: 2}, admit(2, 3, plain),
			[]OutputRow{{ID: 1, Row: 0, Score: true, Target: 2, Pos: 1}, {ID: 1, Row: 1, Score: true, Target: 3, Pos: 2}, {ID: 1, Row: 2}, {ID: 2, Row: 5}}, bySample},
		{"constrained", seeded(sample.Params{Temperature: 1}), admit(2, 3, plain), []OutputRow{{ID: 1, Row: 2, Mask: mask}, {ID: 2, Row: 5}}, onHost},
		{"more alternatives than the device reports", Sampling{TopN: kernels.MaxSampleTopN + 1}, admit(2, 3, plain), draw, onHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &RunStep{Tokens: []int32{1, 2, 3, 4, 5, 6},
				Admitted: []AdmitSeq{admit(1, 3, tc.first), tc.second},
				Seqs:     []StepSeq{{ID: 1, Len: 3, NewPages: []int32{0}}, {ID: 2, Len: 3, NewPages: []int32{1}}},
				Outputs:  tc.rows}
			argmax, samples := be.argmaxCalls.Load(), be.sampleCalls.Load()
			got, err := executeStep(be, m, st, newSeqCache(true), msg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			took := onHost
			switch {
			case be.argmaxCalls.Load() > argmax:
				took = byArgmax
			case be.sampleCalls.Load() > samples:
				took = bySample
			}
			if took != tc.want {
				t.Errorf("sampled by %s, want %s", took, tc.want)
			}
			want, err := executeStep(be.Backend, m, st, newSeqCache(true), msg, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("results\n%+v\nhost sampler\n%+v", got, want)
			}
		})
	}
}

// TestEngineSamplesOnDevice: requests of every sampling kind, over many
// steps (the penalties' history grows, min_tokens runs out),
// get from an engine whose rank samples through a DeviceSampler the
// tokens, logprobs, alternatives and prompt logprobs the host sampler
// gives them, and the device did the sampling.
func TestEngineSamplesOnDevice(t *testing.T) {
	tm := openPreset(t, "tiny")
	vocab := tm.tok.VocabSize()
	reqs := penalizedRequests(vocab)
	for i, p := range []sample.Params{
		{Temperature: 0.9, TopP: 0.9, Seed: 21},
		{Temperature: 1.4, MinP: 0.1, Seed: 22},
		{Temperature: 0.6, TopK: 3, TopP: 0.8, MinP: 0.01, Seed: 23},
		{MinTokens: 6, StopIDs: []int32{0, 1, 2}},
	} {
		prompt := []int32{int32(7 + i), 11, 13, int32(17 + 3*i), 19}
		reqs = append(reqs, Request{Prompt: prompt, MaxTokens: 10, IgnoreEOS: true, Params: p, Logprobs: true, TopLogprobs: i * 5})
	}
	reqs[0].PromptLogprobs, reqs[0].TopLogprobs = true, 2
	var samplers []*samplerBackend
	var mu sync.Mutex
	device := func(c *Config) {
		c.NewBackend = func(_ model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
			b := &samplerBackend{Backend: cpu.New(cpu.Options{Comm: comm, Threads: 1})}
			mu.Lock()
			samplers = append(samplers, b)
			mu.Unlock()
			return b, nil
		}
		c.Capacity.MaxSeqs = 3
		c.MaxPrefillTokens = 16
	}
	got := runSampled(t, startEngine(t, tm, 1, device), reqs)
	want := runSampled(t, startEngine(t, tm, 1, nil), reqs)
	for i := range reqs {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("request %d (%+v):\ndevice %+v\nhost   %+v", i, reqs[i].Params, got[i], want[i])
		}
	}
	var calls int64
	for _, b := range samplers {
		calls += b.sampleCalls.Load()
	}
	if calls == 0 {
		t.Error("the device sampler's Sample was never called")
	}
}

// sampled is what a request's stream says of each of its tokens.
type sampled struct {
	Token   int32
	Logprob float64
	Top     []sample.TokenLogprob
	Prompt  []sample.Result
}

// runSampled runs the requests one after another (so that every step's
// batch, and so its logits, is the same in any engine) and collects what
// their streams say of their tokens.
func runSampled(t *testing.T, e *Engine, reqs []Request) [][]sampled {
	t.Helper()
	out := make([][]sampled, len(reqs))
	for i, r := range reqs {
		s := mustSubmit(t, e, r)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for {
			ev, err := s.Recv(ctx)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("request %d: %v", i, err)
				}
				break
			}
			if ev.Err != nil {
				t.Errorf("request %d: %v", i, ev.Err)
			}
			if ev.HasToken {
				out[i] = append(out[i], sampled{ev.Token, ev.Logprob, ev.Top, ev.PromptLogprobs})
			}
		}
		cancel()
	}
	return out
}
