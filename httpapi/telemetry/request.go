package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"cohort/actors"
)

// TokenEventEvery is how many output tokens separate two "tokens" events on
// a decode span. Spans never get an event per token.
const TokenEventEvery = 16

// ProviderName is gen_ai.provider.name for Cohort's spans.
const ProviderName = "cohort"

// Attribute keys. The gen_ai.* keys are the OpenTelemetry GenAI semantic
// conventions; cohort.* are ours (vLLM's gen_ai.latency.* extras, renamed).
const (
	AttrOperation     = attribute.Key("gen_ai.operation.name")
	AttrProvider      = attribute.Key("gen_ai.provider.name")
	AttrRequestModel  = attribute.Key("gen_ai.request.model")
	AttrResponseModel = attribute.Key("gen_ai.response.model") // the served model, once it generated
	AttrMaxTokens     = attribute.Key("gen_ai.request.max_tokens")
	AttrTemperature   = attribute.Key("gen_ai.request.temperature")
	AttrTopP          = attribute.Key("gen_ai.request.top_p")
	AttrStream        = attribute.Key("gen_ai.request.stream")
	AttrChoiceCount   = attribute.Key("gen_ai.request.choice.count")
	AttrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	AttrFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	AttrTTFT          = attribute.Key("gen_ai.server.time_to_first_token") // seconds
	AttrErrorType     = attribute.Key("error.type")
	AttrTimeInQueue   = attribute.Key("cohort.latency.time_in_queue")  // seconds
	AttrE2E           = attribute.Key("cohort.latency.e2e")            // seconds
	AttrChoiceIndex   = attribute.Key("cohort.choice.index")           // on child spans when N > 1
	AttrTokens        = attribute.Key("cohort.tokens")                 // cumulative output tokens, on decode events
	AttrFinishReason  = attribute.Key("gen_ai.response.finish_reason") // on the "finish" event
)

// Span and event names.
const (
	TokensEventName = "tokens" // every TokenEventEvery tokens on decode
	FinishEventName = "finish" // last event of the phase a choice ended in
	QueueSpanName   = "queue"
	PrefillSpanName = "prefill"
	DecodeSpanName  = "decode"
)

const (
	errorTypeOther     = "_OTHER"
	errorTypeCancelled = "cancelled"
	errorTypeTimeout   = "timeout"
)

// RequestAttrs are a generation request's parameters.
type RequestAttrs struct {
	Operation   string // "chat" or "text_completion"
	Model       string
	MaxTokens   int // 0: not set
	Temperature float64
	TopP        float64
	Stream      bool
	N           int // choices (the OpenAI n); 0 or 1 means one
}

// RequestSpan is the server span of one HTTP generation request.
//
// Use: StartRequest when the request arrives, Observe for every event of
// the request's stream in order (for n > 1, Choice(i).Observe for choice
// i's stream; Observe is Choice(0).Observe), then End once after the last
// Observe. On End the child spans queue, prefill and decode are created per
// choice with the timestamps that Observe saw.
//
// Different choices may be observed from different goroutines; one choice's
// events must come from one goroutine at a time, and End must happen after
// every Observe.
type RequestSpan struct {
	ctx    context.Context
	span   trace.Span
	tracer trace.Tracer
	start  time.Time
	n      int
	model  string

	c0      ChoiceObserver
	mu      sync.Mutex
	choices []*ChoiceObserver // index → observer; [0] is &c0
	ended   bool
}

// ChoiceObserver follows the event stream of one choice.
type ChoiceObserver struct {
	rec    bool
	index  int
	events int
	tokens int

	scheduled, firstToken, last time.Time
	marks                       []time.Time // the time of every TokenEventEvery-th token

	finish string
	usage  actors.Usage
	err    error
}

// disabled observes nothing; non-recording requests hand it out.
var disabled = &ChoiceObserver{}

// StartRequest starts the server span "<operation> <model>" at start as a
// child of ctx's span (see Extract). With a non-recording tracer it only
// carries ctx's span context along.
func StartRequest(ctx context.Context, tracer trace.Tracer, start time.Time, a RequestAttrs) *RequestSpan {
	if _, off := tracer.(noop.Tracer); off {
		// Tracing is off (Setup's no-op provider): carry ctx along, allocate
		// nothing else. ctx's own span is never ended here.
		return &RequestSpan{ctx: ctx, span: noop.Span{}, tracer: tracer, start: start, n: 1}
	}
	if start.IsZero() {
		start = time.Now()
	}
	name := a.Operation
	if a.Model != "" {
		name += " " + a.Model
	}
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
	s := &RequestSpan{ctx: ctx, span: span, tracer: tracer, start: start, n: max(a.N, 1), model: a.Model}
	if !span.IsRecording() {
		return s
	}
	s.c0.rec = true
	s.choices = []*ChoiceObserver{&s.c0}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		AttrOperation.String(a.Operation),
		AttrProvider.String(ProviderName),
		AttrRequestModel.String(a.Model),
		AttrTemperature.Float64(a.Temperature),
		AttrTopP.Float64(a.TopP),
		AttrStream.Bool(a.Stream),
	)
	if a.MaxTokens > 0 {
		attrs = append(attrs, AttrMaxTokens.Int(a.MaxTokens))
	}
	if s.n > 1 {
		attrs = append(attrs, AttrChoiceCount.Int(s.n))
	}
	span.SetAttributes(attrs...)
	return s
}

// Context returns the request's context carrying the server span, for
// anything the request starts (and for Inject).
func (s *RequestSpan) Context() context.Context { return s.ctx }

// Span returns the server span.
func (s *RequestSpan) Span() trace.Span { return s.span }

// SpanContext is the server span's context, for the engine requests it
// starts (actors.Request.Trace), so that the engine's step spans join the
// request's trace. With tracing off it is the caller's span context, if
// any (Extract), or the zero value.
func (s *RequestSpan) SpanContext() trace.SpanContext {
	return trace.SpanContextFromContext(s.ctx)
}

// Observe records an event of choice 0's stream.
func (s *RequestSpan) Observe(ev actors.Event) {
	if !s.c0.rec {
		return
	}
	s.c0.Observe(ev)
}

// Choice returns the observer of choice i (0-based, the OpenAI choice
// index). Call it once per choice and keep the observer.
func (s *RequestSpan) Choice(i int) *ChoiceObserver {
	if !s.c0.rec || i < 0 {
		return disabled
	}
	if i == 0 {
		return &s.c0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.choices) <= i {
		s.choices = append(s.choices, nil)
	}
	if s.choices[i] == nil {
		s.choices[i] = &ChoiceObserver{rec: true, index: i}
	}
	return s.choices[i]
}

// Observe records one event of this choice's stream; call it in order.
func (c *ChoiceObserver) Observe(ev actors.Event) {
	if !c.rec {
		return
	}
	t := ev.Time
	if t.IsZero() {
		t = time.Now()
	}
	c.events++
	if c.scheduled.IsZero() && !ev.ScheduledAt.IsZero() {
		c.scheduled = ev.ScheduledAt
	}
	if ev.HasToken {
		c.tokens++
		if c.firstToken.IsZero() {
			c.firstToken = t
			if c.scheduled.IsZero() {
				c.scheduled = t // no ScheduledAt: prefill collapses to an instant
			}
		}
		if c.tokens%TokenEventEvery == 0 {
			c.marks = append(c.marks, t)
		}
	}
	c.last = t
	if ev.Finish != "" {
		c.finish = ev.Finish
		c.usage = ev.Usage
		c.err = ev.Err
	}
}

// outputTokens is the usage's completion count, or the tokens seen.
func (c *ChoiceObserver) outputTokens() int {
	if c.usage.CompletionTokens > 0 {
		return c.usage.CompletionTokens
	}
	return c.tokens
}

func (c *ChoiceObserver) failed() bool { return c.err != nil || c.finish == "error" }

// End ends the server span, creating the child spans first. A non-nil err
// (or a choice that finished with "error") sets status Error with the
// message. End is idempotent.
func (s *RequestSpan) End(err error) {
	if !s.c0.rec {
		s.span.End()
		return
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	choices := s.choices
	s.mu.Unlock()

	end := time.Now()
	var (
		input, output int
		reasons       []string
		firstToken    time.Time
		scheduled     time.Time
		choiceErr     error
		choiceFailed  bool
	)
	for _, c := range choices {
		if c == nil || c.events == 0 {
			continue
		}
		if c.last.After(end) {
			end = c.last
		}
		input = max(input, c.usage.PromptTokens)
		output += c.outputTokens()
		if c.finish != "" {
			reasons = append(reasons, c.finish)
		}
		if !c.firstToken.IsZero() && (firstToken.IsZero() || c.firstToken.Before(firstToken)) {
			firstToken = c.firstToken
		}
		if !c.scheduled.IsZero() && (scheduled.IsZero() || c.scheduled.Before(scheduled)) {
			scheduled = c.scheduled
		}
		if c.failed() && !choiceFailed {
			choiceFailed, choiceErr = true, c.err
		}
		s.children(c)
	}

	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, AttrInputTokens.Int(input), AttrOutputTokens.Int(output),
		AttrE2E.Float64(end.Sub(s.start).Seconds()))
	if reasons != nil {
		attrs = append(attrs, AttrFinishReasons.StringSlice(reasons))
	}
	if !firstToken.IsZero() && s.model != "" {
		attrs = append(attrs, AttrResponseModel.String(s.model))
	}
	if !firstToken.IsZero() {
		attrs = append(attrs, AttrTTFT.Float64(nonNeg(firstToken.Sub(s.start)).Seconds()))
	}
	if !scheduled.IsZero() {
		attrs = append(attrs, AttrTimeInQueue.Float64(nonNeg(scheduled.Sub(s.start)).Seconds()))
	}
	switch {
	case err != nil:
		attrs = append(attrs, AttrErrorType.String(errorType(err)))
		s.span.RecordError(err, trace.WithTimestamp(end))
		s.span.SetStatus(codes.Error, err.Error())
	case choiceFailed:
		msg := "generation failed"
		if choiceErr != nil {
			msg = choiceErr.Error()
			s.span.RecordError(choiceErr, trace.WithTimestamp(end))
		}
		attrs = append(attrs, AttrErrorType.String(errorType(choiceErr)))
		s.span.SetStatus(codes.Error, msg)
	}
	s.span.SetAttributes(attrs...)
	s.span.End(trace.WithTimestamp(end))
}

// children creates choice c's queue, prefill and decode spans. The phase
// the choice ended in carries the finish event (and the error status).
func (s *RequestSpan) children(c *ChoiceObserver) {
	var extra []attribute.KeyValue
	if s.n > 1 || c.index > 0 {
		extra = []attribute.KeyValue{AttrChoiceIndex.Int(c.index)}
	}
	child := func(name string, from, to time.Time, last bool, events func(trace.Span)) {
		opts := []trace.SpanStartOption{trace.WithTimestamp(from), trace.WithSpanKind(trace.SpanKindInternal)}
		if extra != nil {
			opts = append(opts, trace.WithAttributes(extra...))
		}
		_, sp := s.tracer.Start(s.ctx, name, opts...)
		if events != nil {
			events(sp)
		}
		if last {
			ev := []attribute.KeyValue{AttrFinishReason.String(c.finish), AttrTokens.Int(c.tokens)}
			sp.AddEvent(FinishEventName, trace.WithTimestamp(to), trace.WithAttributes(ev...))
			if c.failed() {
				msg := "generation failed"
				if c.err != nil {
					msg = c.err.Error()
				}
				sp.SetStatus(codes.Error, msg)
			}
		}
		sp.End(trace.WithTimestamp(to))
	}

	// Clamp so that the phases are ordered and inside the server span.
	last := notBefore(c.last, s.start)
	if c.scheduled.IsZero() {
		child(QueueSpanName, s.start, last, true, nil) // never scheduled
		return
	}
	sched := min2(notBefore(c.scheduled, s.start), last)
	child(QueueSpanName, s.start, sched, false, nil)
	if c.firstToken.IsZero() {
		child(PrefillSpanName, sched, last, true, nil) // ended before its first token
		return
	}
	first := min2(notBefore(c.firstToken, sched), last)
	child(PrefillSpanName, sched, first, false, nil)
	child(DecodeSpanName, first, last, true, func(sp trace.Span) {
		for i, t := range c.marks {
			sp.AddEvent(TokensEventName, trace.WithTimestamp(min2(notBefore(t, first), last)),
				trace.WithAttributes(AttrTokens.Int((i+1)*TokenEventEvery)))
		}
	})
}

func notBefore(t, lo time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	return t
}

func min2(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func nonNeg(d time.Duration) time.Duration { return max(d, 0) }

func errorType(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return errorTypeCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return errorTypeTimeout
	}
	return errorTypeOther
}
