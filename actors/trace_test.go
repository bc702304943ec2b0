package actors

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestStepSpans: every engine step is a span, and each rank's execution of
// it is a span linked to the step that caused it.
func TestStepSpans(t *testing.T) {
	tm := openPreset(t, "tiny")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := startEngine(t, tm, 2, func(c *Config) { c.TracerProvider = tp })
	collect(t, mustSubmit(t, e, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 3}))
	e.Close()
	steps := map[string]bool{}
	ranks := 0
	for _, s := range rec.Ended() {
		if s.Name() == "engine.step" {
			steps[s.SpanContext().SpanID().String()] = true
		}
	}
	for _, s := range rec.Ended() {
		if s.Name() != "rank.step" {
			continue
		}
		ranks++
		if len(s.Links()) != 1 || !steps[s.Links()[0].SpanContext.SpanID().String()] {
			t.Errorf("rank span %v is not linked to an engine step span", s.Attributes())
		}
	}
	// 3 tokens: one prefill step that samples the first, two decode steps.
	if len(steps) != 3 || ranks != 2*len(steps) {
		t.Fatalf("%d engine step spans and %d rank step spans, want 3 and 6", len(steps), ranks)
	}
}
