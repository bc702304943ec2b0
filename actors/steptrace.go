package actors

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"cohort/actors/planner"
)

// Span names of the engine's tracing.
const (
	EngineStepSpanName = "engine.step" // one per step the scheduler runs
	RankStepSpanName   = "rank.step"   // one per rank and step, child of the step's span
)

// startStepSpan starts the span of engine step step. A step serves several
// requests but a span has one parent, so the span is a child of the span
// of the step's first sequence whose request carries one (Request.Trace),
// and links to the other requests' spans (each distinct one once). A step
// of requests without spans starts a trace of its own. live maps the
// step's request IDs to their requests (the scheduler's live table).
func startStepSpan(tracer trace.Tracer, step *RunStep, live map[planner.RequestID]*liveRequest) trace.Span {
	return startStepSpanOf(tracer, step, func(i int) *liveRequest { return live[step.Seqs[i].ID] })
}

// startStepSpanOf is startStepSpan with seqLive(i) the live request of
// step.Seqs[i] (nil: none). The no-op tracer (the engine's without
// tracing) takes only the parent's span context from a span's start, so
// for it the links and attributes are not built.
func startStepSpanOf(tracer trace.Tracer, step *RunStep, seqLive func(i int) *liveRequest) trace.Span {
	_, noopTracer := tracer.(noop.Tracer)
	var parent trace.SpanContext
	var links []trace.Link
	var seen map[trace.SpanID]bool // lookup only
	for i := range step.Seqs {
		l := seqLive(i)
		if l == nil || l.req == nil || !l.req.Trace.IsValid() {
			continue
		}
		if !parent.IsValid() {
			parent = l.req.Trace
			if noopTracer {
				break
			}
			continue
		}
		id := l.req.Trace.SpanID()
		if id == parent.SpanID() || seen[id] {
			continue
		}
		if seen == nil {
			seen = make(map[trace.SpanID]bool, len(step.Seqs)-i)
		}
		seen[id] = true
		links = append(links, trace.Link{SpanContext: l.req.Trace})
	}
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	if noopTracer {
		_, span := tracer.Start(ctx, EngineStepSpanName)
		return span
	}
	_, span := tracer.Start(ctx, EngineStepSpanName, trace.WithLinks(links...), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int64("cohort.step", int64(step.Step)), attribute.Int64("cohort.generation", int64(step.Generation)),
			attribute.Int("cohort.rows", len(step.Tokens)), attribute.Int("cohort.seqs", len(step.Seqs)),
			attribute.Int("cohort.sampled", len(step.Outputs))))
	return span
}

// startRankSpan starts rank's span of step msg, a child of the step's span
// (msg.Trace; a local step or one that came over the wire), so that each
// rank's work on a step sits in the step's trace.
func startRankSpan(tracer trace.Tracer, msg *RunStep, rank int) (context.Context, trace.Span) {
	ctx := context.Background()
	if msg.Trace.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, msg.Trace)
	}
	return tracer.Start(ctx, RankStepSpanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int("cohort.rank", rank), attribute.Int64("cohort.step", int64(msg.Step)),
			attribute.Int64("cohort.generation", int64(msg.Generation)), attribute.Int("cohort.rows", len(msg.Tokens))))
}
