package remote

import (
	"context"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"cohort/actors"
	"cohort/model/sample"
	"cohort/nccl"
)

// TestStepSizeIndependentOfLength: the bytes a step sends a rank do not
// grow with the length of its request. One greedy request with penalties,
// a logit bias and stop ids (parameters that used to travel with every
// step, with the whole output for the penalties) generates 1,000 tokens on
// the echo model, whose token is always 0; each RunStep is measured in
// its wire form (proto.Size of rankpb.RunStep). The decode steps at
// generated lengths 10 and 1,000 must be the same size, and so must every
// decode step that adds no page.
func TestStepSizeIndependentOfLength(t *testing.T) {
	got := stepSizesOfLongRequest(t, 1000)
	at := func(generated int) stepSize { return got[generated] } // the step feeding token `generated`
	if a, b := at(10), at(999); a.bytes != b.bytes || a.newPages > 0 || b.newPages > 0 {
		t.Errorf("RunStep bytes at generated length 10: %d (%d new pages), at 999: %d (%d new pages)", a.bytes, a.newPages, b.bytes, b.newPages)
	}
	for k, s := range got[1:] {
		if s.newPages == 0 && s.bytes != at(10).bytes {
			t.Errorf("decode step %d: %d bytes, want %d", k+2, s.bytes, at(10).bytes)
		}
	}
	t.Logf("RunStep bytes: admission + prefill %d, decode at length 10 %d, at 999 %d", got[0].bytes, at(10).bytes, at(999).bytes)
}

// BenchmarkStepBytes reports the wire bytes of the step that admits a
// request and of its decode steps at generated lengths 10 and 999 (the
// same: a step sends what changed), for issue 13's acceptance.
func BenchmarkStepBytes(b *testing.B) {
	for range b.N {
		got := stepSizesOfLongRequest(b, 1000)
		b.ReportMetric(float64(got[0].bytes), "admit-B")
		b.ReportMetric(float64(got[10].bytes), "len10-B")
		b.ReportMetric(float64(got[999].bytes), "len999-B")
	}
}

// stepSizesOfLongRequest serves one request of maxTokens tokens on the echo
// model and returns the wire size of every step it took, in order (step k
// feeds token k).
func stepSizesOfLongRequest(tb testing.TB, maxTokens int) []stepSize {
	tb.Helper()
	tm := presetModel(tb, "echo")
	sizes := &stepSizes{}
	var executors sync.WaitGroup
	cfg := actors.Config{Checkpoint: tm.ck, Tokenizer: tm.tok, TP: 1, Capacity: benchCapacity, MaxPrefillTokens: 512, MaxRows: 64,
		Placement: func(*actor.ActorSystem, actors.Config) (actors.Placer, error) {
			return &sizingPlacer{sizes: sizes, executors: &executors}, nil
		}}
	e, err := actors.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	req := actors.Request{Prompt: []int32{9, 8, 7, 6, 5}, MaxTokens: maxTokens, IgnoreEOS: true, StopTokenIDs: []int32{1},
		Params: sample.Params{RepetitionPenalty: 1.3, LogitBias: []sample.TokenBias{{ID: 3, Bias: 1}}, MinTokens: 2, StopIDs: []int32{1}}}
	ids, _, _ := collect(tb, mustSubmit(tb, e, req))
	e.Close()
	executors.Wait()
	if len(ids) != req.MaxTokens {
		tb.Fatalf("got %d tokens, want %d", len(ids), req.MaxTokens)
	}
	got := sizes.get()
	// Step 1 admits the request and prefills its prompt, drawing token 1;
	// step k > 1 feeds token k-1, so the request holds k-1 tokens.
	if len(got) != req.MaxTokens {
		tb.Fatalf("%d steps, want %d", len(got), req.MaxTokens)
	}
	return got
}

// stepSize is one RunStep as a rank received it.
type stepSize struct {
	bytes, newPages int
}

// stepSizes collects the wire sizes of the steps, in order.
type stepSizes struct {
	mu    sync.Mutex
	steps []stepSize
}

func (s *stepSizes) add(x stepSize) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, x)
}

func (s *stepSizes) get() []stepSize {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stepSize(nil), s.steps...)
}

// sizingPlacer places each generation's one rank in this process as a
// sizingRank.
type sizingPlacer struct {
	sizes     *stepSizes
	executors *sync.WaitGroup
}

func (p *sizingPlacer) Place(gen uint64, size int, _ func(string)) []actors.PlacedRank {
	g, err := nccl.NewGroup(size)
	if err != nil {
		panic(err)
	}
	out := make([]actors.PlacedRank, size)
	for r := range out {
		props := actor.PropsFromProducer(func() actor.Actor {
			rank := actors.NewRank(actors.RankHost{NewBackend: cpuBackends(1), Tracer: noop.NewTracerProvider().Tracer(""),
				Executors: p.executors})
			rank.Assign(r, gen)
			return &sizingRank{Rank: rank, sizes: p.sizes}
		})
		out[r] = actors.PlacedRank{Props: props, Comm: g.Comm(r)}
	}
	return out
}

func (p *sizingPlacer) Status() string { return "" }
func (p *sizingPlacer) Close()         {}

// sizingRank is a local rank that measures each step in its wire form.
type sizingRank struct {
	*actors.Rank
	sizes *stepSizes
}

func (r *sizingRank) Receive(ctx actor.Context) {
	if step, ok := ctx.Message().(*actors.RunStep); ok {
		pb, err := stepToPB(step)
		if err != nil {
			panic(err)
		}
		s := stepSize{bytes: proto.Size(pb)}
		for _, q := range step.Seqs {
			s.newPages += len(q.NewPages)
		}
		r.sizes.add(s)
	}
	r.Rank.Receive(ctx)
}
