package actors

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"cohort/actors/planner"
	"cohort/model/sample"
	"cohort/supervision"
)

// BenchmarkStepHost measures the scheduler's host work per decode step
// with every running request decoding, the two phases COHORT_STEP_TIMING
// reports for the scheduler (steptiming.go): "planning" (maybeStep: the
// planner's ScheduleWithin, nextStep's RunStep, maskOutputs, the step's
// span, its deadline timer and the sends to the ranks) and "results"
// (completed: the planner's Update and each request's token, through
// record and addToken). No actor runs: the rank and request messages go to
// a context that drops them, so what is measured is the scheduler's own
// work (plan-µs/step, results-µs/step). The prefix cache is on with
// snapshots (the serving default for a model with slot state) unless the
// name says nocache; tracer noop is the engine's default provider, sdk an
// OpenTelemetry SDK provider (sampled, no exporter) with a span per
// request for the step's links.
func BenchmarkStepHost(b *testing.B) {
	sys := actor.NewActorSystem() // its Root is in the deadline's callback, which never runs here
	defer sys.Shutdown()
	for _, v := range []struct {
		name   string
		sdk    bool
		cache  bool
		counts []int
	}{
		{"noop", false, true, []int{1, 32, 128, 256}},
		{"noop-nocache", false, false, []int{1, 32, 128, 256}},
		{"sdk", true, true, []int{1, 32, 256}},
	} {
		for _, n := range v.counts {
			b.Run(fmt.Sprintf("%s/batch=%d", v.name, n), func(b *testing.B) {
				var tp trace.TracerProvider = noop.NewTracerProvider()
				if v.sdk {
					p := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
					b.Cleanup(func() { _ = p.Shutdown(b.Context()) })
					tp = p
				}
				benchStepHost(b, sys, n, tp, v.sdk, v.cache)
			})
		}
	}
}

// Each round admits the requests with prompts of benchPrompt tokens,
// prefills them (not timed) and then times up to benchRound decode steps,
// so the requests' contexts stay in a serving range however many steps
// the benchmark runs.
const (
	benchPrompt = 256
	benchRound  = 512
)

func benchStepHost(b *testing.B, sys *actor.ActorSystem, n int, tp trace.TracerProvider, spans, cache bool) {
	ctx := &dropContext{sys: sys, self: actor.NewPID("local", "engine")}
	g := &rankGroup{gen: 1, ranks: []*actor.PID{actor.NewPID("local", "rank0")}}
	var sb *stepBench
	round := func() {
		sb = newStepBench(b, ctx, g, n, tp, spans, cache)
	}
	round()
	var plan, results time.Duration
	steps := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if steps > 0 && steps%benchRound == 0 {
			b.StopTimer()
			round()
			b.StartTimer()
		}
		t0 := time.Now()
		sb.s.maybeStep(ctx, g)
		t1 := time.Now()
		sb.complete(ctx, g)
		plan, results = plan+t1.Sub(t0), results+time.Since(t1)
		steps++
		if len(ctx.step.Seqs) != n || !decodeStep(ctx.step) {
			b.Fatalf("step %d: %d sequences (decode %v), want %d decode rows", ctx.step.Step, len(ctx.step.Seqs), decodeStep(ctx.step), n)
		}
		ctx.step = nil
	}
	b.StopTimer()
	b.ReportMetric(float64(plan.Nanoseconds())/1e3/float64(steps), "plan-µs/step")
	b.ReportMetric(float64(results.Nanoseconds())/1e3/float64(steps), "results-µs/step")
}

// stepBench is a scheduler with n running requests.
type stepBench struct {
	s       *scheduler
	results []sample.Result
}

func newStepBench(b *testing.B, ctx *dropContext, g *rankGroup, n int, tp trace.TracerProvider, spans, cache bool) *stepBench {
	b.Helper()
	const pageSize = 16
	maxLen := benchPrompt + benchRound + 2*pageSize
	cfg := Config{TP: 1, TracerProvider: tp, StepDeadline: time.Minute, MaxReplays: 3, Replay: true,
		ProgressTimeout: 30 * time.Second, MaxPrefillTokens: 8192, MaxRows: max(64, n), DisablePrefixCache: !cache}
	cfg.StepTarget = time.Second
	snapshots := 0
	if cache {
		snapshots = 64
	}
	p, err := planner.New(planner.Config{MaxPrefillTokens: cfg.MaxPrefillTokens, MaxRows: cfg.MaxRows, Slots: n,
		KVPages: n * (maxLen/pageSize + 1), PageSize: pageSize, MaxModelLen: maxLen, PrefixCache: cache,
		Snapshots: snapshots, MarkCutBlocks: planner.DefaultMarkCutBlocks})
	if err != nil {
		b.Fatal(err)
	}
	s := &scheduler{cfg: cfg, health: supervision.NewHealth(""), stats: newSupervisionStats(), plan: p,
		info: Info{TP: 1, MaxModelLen: maxLen, Slots: n, PageSize: pageSize, PrefixCache: cache, Snapshots: snapshots},
		live: map[planner.RequestID]*liveRequest{}}
	for i := range n {
		prompt := make([]int32, benchPrompt)
		for j := range prompt {
			prompt[j] = int32((i*7919 + j*31) % 50000) // distinct prompts: nothing is shared
		}
		r := &Request{ID: planner.RequestID(i + 1), Prompt: prompt, MaxTokens: benchRound + pageSize, IgnoreEOS: true}
		if spans {
			var tid trace.TraceID
			var sid trace.SpanID
			binary.BigEndian.PutUint64(tid[8:], uint64(i+1))
			binary.BigEndian.PutUint64(sid[:], uint64(i+1))
			r.Trace = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		}
		s.admit(ctx, &AdmitRequest{Req: r, PID: actor.NewPID("local", fmt.Sprintf("req%d", i))}, true)
		s.deliver(ctx)
	}
	if len(s.live) != n {
		b.Fatalf("%d of %d requests admitted", len(s.live), n)
	}
	sb := &stepBench{s: s}
	// Prefill (not timed): run steps until the next one is all decode rows.
	for range 1000 {
		s.maybeStep(ctx, g)
		if ctx.step == nil {
			b.Fatal("no step planned")
		}
		decode := decodeStep(ctx.step) && len(ctx.step.Seqs) == n
		sb.complete(ctx, g)
		ctx.step = nil
		if decode {
			return sb
		}
	}
	b.Fatal("the requests did not reach decode")
	return nil
}

// complete replies to the step in flight as rank 0 and applies it; the
// tokens sent to the request actors are dropped.
func (sb *stepBench) complete(ctx *dropContext, g *rankGroup) {
	f := sb.s.inflight
	if cap(sb.results) < len(f.outputs) {
		sb.results = make([]sample.Result, len(f.outputs))
	}
	res := sb.results[:len(f.outputs)]
	for i := range res {
		res[i] = sample.Result{Token: sample.TokenLogprob{ID: int32(1000 + i)}}
	}
	if fail := sb.s.completed(ctx, &StepCompleted{Generation: g.gen, Step: f.plan.Step, Rank: 0, Results: res}, g); fail != nil {
		panic(fail)
	}
	sb.s.deliver(ctx)
}

// dropContext is the actor context the scheduler's step functions use
// (Self, ActorSystem, Send) with nothing behind it: it keeps the latest
// RunStep sent and drops every message.
type dropContext struct {
	actor.Context // nil: any other method panics
	sys           *actor.ActorSystem
	self          *actor.PID
	step          *RunStep
}

func (c *dropContext) Self() *actor.PID                { return c.self }
func (c *dropContext) ActorSystem() *actor.ActorSystem { return c.sys }
func (c *dropContext) Send(_ *actor.PID, msg any) {
	if st, ok := msg.(*RunStep); ok {
		c.step = st
	}
}
