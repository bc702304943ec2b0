package actors

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors/planner"
)

// TestStepSpans: every engine step is a span, and each rank's execution of
// it is a child span in the step's trace.
func TestStepSpans(t *testing.T) {
	tm := openPreset(t, "tiny")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := startEngine(t, tm, 2, func(c *Config) { c.TracerProvider = tp })
	collect(t, mustSubmit(t, e, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 3}))
	e.Close()
	steps := map[trace.SpanID]trace.TraceID{}
	for _, s := range rec.Ended() {
		if s.Name() == EngineStepSpanName {
			steps[s.SpanContext().SpanID()] = s.SpanContext().TraceID()
		}
	}
	perStep := map[trace.SpanID]map[int64]bool{}
	for _, s := range rec.Ended() {
		if s.Name() != RankStepSpanName {
			continue
		}
		parent := s.Parent().SpanID()
		tid, ok := steps[parent]
		if !ok || tid != s.SpanContext().TraceID() {
			t.Errorf("rank span %v is not a child of an engine step span in its trace", s.Attributes())
			continue
		}
		if perStep[parent] == nil {
			perStep[parent] = map[int64]bool{}
		}
		for _, a := range s.Attributes() {
			if a.Key == "cohort.rank" {
				perStep[parent][a.Value.AsInt64()] = true
			}
		}
	}
	// 3 tokens: one prefill step that samples the first, two decode steps.
	if len(steps) != 3 {
		t.Fatalf("%d engine step spans, want 3", len(steps))
	}
	for id := range steps {
		if r := perStep[id]; !r[0] || !r[1] || len(r) != 2 {
			t.Errorf("step span %s has rank spans of ranks %v, want 0 and 1", id, r)
		}
	}
}

// TestStartStepSpan: a step's span is a child of its first traced request's
// span and links to the other requests' distinct spans.
func TestStartStepSpan(t *testing.T) {
	sc := func(tid, sid byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{tid}, SpanID: [8]byte{sid},
			TraceFlags: trace.FlagsSampled, Remote: true})
	}
	a, b, c := sc(1, 1), sc(2, 2), sc(1, 3) // c shares a's trace (another choice of the request)
	live := map[planner.RequestID]*liveRequest{
		1: {req: &Request{Trace: a}}, 2: {req: &Request{Trace: b}}, 3: {req: &Request{Trace: c}},
		4: {req: &Request{}}, 5: {req: &Request{Trace: a}},
	}
	for _, tc := range []struct {
		name   string
		seqs   []planner.RequestID
		parent trace.SpanContext // invalid: a root span
		links  []trace.SpanContext
	}{
		{"none traced", []planner.RequestID{4}, trace.SpanContext{}, nil},
		{"one", []planner.RequestID{1}, a, nil},
		{"untraced first", []planner.RequestID{4, 2}, b, nil},
		{"batch", []planner.RequestID{1, 2, 3}, a, []trace.SpanContext{b, c}},
		{"same span twice", []planner.RequestID{5, 1, 2}, a, []trace.SpanContext{b}},
		{"unknown id", []planner.RequestID{9, 1}, a, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			step := &RunStep{Step: 7, Generation: 2, Tokens: make([]int32, 5)}
			for _, id := range tc.seqs {
				step.Seqs = append(step.Seqs, StepSeq{ID: id})
			}
			span := startStepSpan(tp.Tracer(TracerName), step, live)
			step.Trace = span.SpanContext()
			_, rank := startRankSpan(tp.Tracer(TracerName), step, 1)
			rank.End()
			span.End()
			ended := rec.Ended()
			if len(ended) != 2 {
				t.Fatalf("%d spans ended", len(ended))
			}
			rs, ss := ended[0], ended[1]
			if ss.Name() != EngineStepSpanName || rs.Name() != RankStepSpanName {
				t.Fatalf("spans %q, %q", ss.Name(), rs.Name())
			}
			if tc.parent.IsValid() {
				if ss.Parent().SpanID() != tc.parent.SpanID() || ss.SpanContext().TraceID() != tc.parent.TraceID() {
					t.Errorf("step span parent %v in trace %v, want %v", ss.Parent().SpanID(), ss.SpanContext().TraceID(), tc.parent.SpanID())
				}
			} else if ss.Parent().IsValid() {
				t.Errorf("step span has parent %v, want a root", ss.Parent().SpanID())
			}
			var links []trace.SpanContext
			for _, l := range ss.Links() {
				links = append(links, l.SpanContext)
			}
			if len(links) != len(tc.links) {
				t.Fatalf("links %v, want %v", links, tc.links)
			}
			for i := range links {
				if !links[i].Equal(tc.links[i]) {
					t.Errorf("link %d: %v, want %v", i, links[i], tc.links[i])
				}
			}
			if rs.Parent().SpanID() != ss.SpanContext().SpanID() || rs.SpanContext().TraceID() != ss.SpanContext().TraceID() {
				t.Errorf("rank span is not the step span's child")
			}
		})
	}
}
