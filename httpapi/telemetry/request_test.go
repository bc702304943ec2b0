package telemetry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors"
)

func newRecorder(t *testing.T) (*tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp.Tracer(InstrumentationName)
}

// stream returns a synthetic event stream: scheduled at t0+10ms, first token
// at t0+50ms, then one token every 10ms; the last token carries finish.
func stream(t0 time.Time, tokens int, finish string, prompt int) []actors.Event {
	sched := t0.Add(10 * time.Millisecond)
	evs := make([]actors.Event, tokens)
	for i := range evs {
		evs[i] = actors.Event{Token: int32(i), Text: "x", HasToken: true, Time: t0.Add(50*time.Millisecond + time.Duration(i)*10*time.Millisecond)}
	}
	evs[0].ScheduledAt = sched
	evs[tokens-1].Finish = finish
	evs[tokens-1].Usage = actors.Usage{PromptTokens: prompt, CompletionTokens: tokens}
	return evs
}

type spanTree struct {
	server tracetest.SpanStub
	kids   map[string][]tracetest.SpanStub
}

func tree(t *testing.T, spans tracetest.SpanStubs) spanTree {
	t.Helper()
	var st spanTree
	st.kids = map[string][]tracetest.SpanStub{}
	servers := 0
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			st.server = s
			servers++
		}
	}
	if servers != 1 {
		t.Fatalf("%d server spans, want 1", servers)
	}
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			continue
		}
		if s.Parent.SpanID() != st.server.SpanContext.SpanID() || s.Parent.TraceID() != st.server.SpanContext.TraceID() {
			t.Errorf("span %s: parent %s, want the server span %s", s.Name, s.Parent.SpanID(), st.server.SpanContext.SpanID())
		}
		if s.SpanKind != trace.SpanKindInternal {
			t.Errorf("span %s: kind %v", s.Name, s.SpanKind)
		}
		st.kids[s.Name] = append(st.kids[s.Name], s)
	}
	return st
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestRequestSpanTree(t *testing.T) {
	exp, tracer := newRecorder(t)
	t0 := time.Now().Add(-10 * time.Second)
	rs := StartRequest(context.Background(), tracer, t0, RequestAttrs{
		Operation: "chat", Model: "qwen3.5-0.8b", MaxTokens: 64, Temperature: 0.7, TopP: 0.9, Stream: true})
	if !trace.SpanFromContext(rs.Context()).IsRecording() {
		t.Fatal("Context does not carry the recording server span")
	}
	evs := stream(t0, 40, "length", 12)
	for _, ev := range evs {
		rs.Observe(ev)
	}
	rs.End(nil)
	rs.End(nil) // idempotent

	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	st := tree(t, spans)
	srv := st.server
	if srv.Name != "chat qwen3.5-0.8b" {
		t.Errorf("server span name %q", srv.Name)
	}
	if srv.Parent.IsValid() {
		t.Errorf("server span has a parent without a traceparent")
	}
	if got := rs.SpanContext(); !got.Equal(srv.SpanContext) {
		t.Errorf("SpanContext %v, want the server span's %v", got, srv.SpanContext)
	}
	a := attrs(srv.Attributes)
	checks := map[attribute.Key]any{
		AttrOperation:     "chat",
		AttrProvider:      "cohort",
		AttrRequestModel:  "qwen3.5-0.8b",
		AttrResponseModel: "qwen3.5-0.8b",
		AttrMaxTokens:     int64(64),
		AttrTemperature:   0.7,
		AttrTopP:          0.9,
		AttrStream:        true,
		AttrInputTokens:   int64(12),
		AttrOutputTokens:  int64(40),
	}
	for k, want := range checks {
		if got := a[k].AsInterface(); got != want {
			t.Errorf("%s = %v (%T), want %v", k, got, got, want)
		}
	}
	if got := a[AttrFinishReasons].AsStringSlice(); len(got) != 1 || got[0] != "length" {
		t.Errorf("finish_reasons = %v", got)
	}
	if got := a[AttrTTFT].AsFloat64(); got < 0.0499 || got > 0.0501 {
		t.Errorf("ttft = %v, want 0.05", got)
	}
	if got := a[AttrTimeInQueue].AsFloat64(); got < 0.0099 || got > 0.0101 {
		t.Errorf("time_in_queue = %v, want 0.01", got)
	}
	if _, ok := a[AttrChoiceCount]; ok {
		t.Error("choice.count set for n=1")
	}
	if srv.Status.Code != codes.Unset {
		t.Errorf("status %v", srv.Status)
	}

	for _, name := range []string{QueueSpanName, PrefillSpanName, DecodeSpanName} {
		if len(st.kids[name]) != 1 {
			t.Fatalf("%d %q spans, want 1", len(st.kids[name]), name)
		}
	}
	q, p, d := st.kids[QueueSpanName][0], st.kids[PrefillSpanName][0], st.kids[DecodeSpanName][0]
	sched, first, last := evs[0].ScheduledAt, evs[0].Time, evs[len(evs)-1].Time
	for _, c := range []struct {
		what      string
		got, want time.Time
	}{
		{"server start", srv.StartTime, t0},
		{"queue start", q.StartTime, t0},
		{"queue end", q.EndTime, sched},
		{"prefill start", p.StartTime, sched},
		{"prefill end", p.EndTime, first},
		{"decode start", d.StartTime, first},
		{"decode end", d.EndTime, last},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if srv.EndTime.Before(d.EndTime) {
		t.Errorf("server span ends before decode")
	}
	// 40 tokens: "tokens" events at 16 and 32, then "finish".
	if len(d.Events) != 3 {
		t.Fatalf("decode has %d events, want 3: %+v", len(d.Events), d.Events)
	}
	prev := d.StartTime
	for i, e := range d.Events {
		if e.Time.Before(prev) || e.Time.After(d.EndTime) {
			t.Errorf("event %d (%s) at %v out of order", i, e.Name, e.Time)
		}
		prev = e.Time
	}
	for i, want := range []int64{16, 32} {
		e := d.Events[i]
		if e.Name != TokensEventName || attrs(e.Attributes)[AttrTokens].AsInt64() != want {
			t.Errorf("event %d = %s %v", i, e.Name, e.Attributes)
		}
		if !e.Time.Equal(evs[want-1].Time) {
			t.Errorf("event %d at %v, want token %d's time", i, e.Time, want)
		}
	}
	fin := d.Events[2]
	if fin.Name != FinishEventName || attrs(fin.Attributes)[AttrFinishReason].AsString() != "length" || !fin.Time.Equal(last) {
		t.Errorf("finish event %+v", fin)
	}
	if len(q.Events) != 0 || len(p.Events) != 0 {
		t.Errorf("queue/prefill have events")
	}
}

func TestRequestSpanStreamError(t *testing.T) {
	exp, tracer := newRecorder(t)
	t0 := time.Now().Add(-time.Second)
	rs := StartRequest(context.Background(), tracer, t0, RequestAttrs{Operation: "text_completion", Model: "m"})
	evs := stream(t0, 5, "", 3)
	evs = append(evs, actors.Event{Finish: "error", Err: errors.New("rank 1 died"), Time: t0.Add(200 * time.Millisecond)})
	for _, ev := range evs {
		rs.Observe(ev)
	}
	rs.End(nil)
	st := tree(t, exp.GetSpans())
	if st.server.Status.Code != codes.Error || st.server.Status.Description != "rank 1 died" {
		t.Errorf("server status %+v", st.server.Status)
	}
	if len(st.kids) != 3 {
		t.Fatalf("children %v", st.kids)
	}
	d := st.kids[DecodeSpanName][0]
	if d.Status.Code != codes.Error || d.Status.Description != "rank 1 died" {
		t.Errorf("decode status %+v", d.Status)
	}
	if st.kids[PrefillSpanName][0].Status.Code != codes.Unset {
		t.Errorf("prefill has an error status")
	}
	a := attrs(st.server.Attributes)
	if a[AttrErrorType].AsString() != errorTypeOther {
		t.Errorf("error.type %v", a[AttrErrorType])
	}
	if got := a[AttrFinishReasons].AsStringSlice(); len(got) != 1 || got[0] != "error" {
		t.Errorf("finish_reasons %v", got)
	}
	if a[AttrOutputTokens].AsInt64() != 5 {
		t.Errorf("output tokens %v", a[AttrOutputTokens])
	}
	if n := len(st.server.Events); n != 1 || st.server.Events[0].Name != "exception" {
		t.Errorf("server events %+v", st.server.Events)
	}
}

func TestRequestSpanEndError(t *testing.T) {
	exp, tracer := newRecorder(t)
	rs := StartRequest(context.Background(), tracer, time.Now(), RequestAttrs{Operation: "chat", Model: "m"})
	rs.End(context.Canceled) // the client went away before any event
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want only the server span", len(spans))
	}
	s := spans[0]
	if s.Status.Code != codes.Error || s.Status.Description != context.Canceled.Error() {
		t.Errorf("status %+v", s.Status)
	}
	if got := attrs(s.Attributes)[AttrErrorType].AsString(); got != errorTypeCancelled {
		t.Errorf("error.type %q", got)
	}
}

func TestRequestSpanFailedInPrefill(t *testing.T) {
	exp, tracer := newRecorder(t)
	t0 := time.Now().Add(-time.Second)
	rs := StartRequest(context.Background(), tracer, t0, RequestAttrs{Operation: "chat", Model: "m"})
	rs.Observe(actors.Event{Finish: "error", Err: errors.New("out of pages"), ScheduledAt: t0.Add(5 * time.Millisecond), Time: t0.Add(30 * time.Millisecond)})
	rs.End(errors.New("out of pages"))
	st := tree(t, exp.GetSpans())
	if len(st.kids[QueueSpanName]) != 1 || len(st.kids[PrefillSpanName]) != 1 || len(st.kids[DecodeSpanName]) != 0 {
		t.Fatalf("children %v", st.kids)
	}
	p := st.kids[PrefillSpanName][0]
	if p.Status.Code != codes.Error || len(p.Events) != 1 || p.Events[0].Name != FinishEventName {
		t.Errorf("prefill %+v %+v", p.Status, p.Events)
	}
	for _, k := range []attribute.Key{AttrTTFT, AttrResponseModel} {
		if _, ok := attrs(st.server.Attributes)[k]; ok {
			t.Errorf("%s set without a token", k)
		}
	}
}

func TestRequestSpanChoices(t *testing.T) {
	exp, tracer := newRecorder(t)
	t0 := time.Now().Add(-5 * time.Second)
	rs := StartRequest(context.Background(), tracer, t0, RequestAttrs{Operation: "chat", Model: "m", N: 2})
	c0, c1 := rs.Choice(0), rs.Choice(1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, ev := range stream(t0, 20, "stop", 7) {
			c0.Observe(ev)
		}
	})
	wg.Go(func() {
		for _, ev := range stream(t0.Add(time.Millisecond), 33, "length", 7) {
			c1.Observe(ev)
		}
	})
	wg.Wait()
	rs.End(nil)
	st := tree(t, exp.GetSpans())
	for _, name := range []string{QueueSpanName, PrefillSpanName, DecodeSpanName} {
		ks := st.kids[name]
		if len(ks) != 2 {
			t.Fatalf("%d %s spans, want 2", len(ks), name)
		}
		seen := map[int64]bool{}
		for _, k := range ks {
			seen[attrs(k.Attributes)[AttrChoiceIndex].AsInt64()] = true
		}
		if !seen[0] || !seen[1] {
			t.Errorf("%s: choice indexes %v", name, seen)
		}
	}
	a := attrs(st.server.Attributes)
	if a[AttrInputTokens].AsInt64() != 7 || a[AttrOutputTokens].AsInt64() != 53 || a[AttrChoiceCount].AsInt64() != 2 {
		t.Errorf("usage %v %v n %v", a[AttrInputTokens], a[AttrOutputTokens], a[AttrChoiceCount])
	}
	if got := a[AttrFinishReasons].AsStringSlice(); len(got) != 2 || got[0] != "stop" || got[1] != "length" {
		t.Errorf("finish_reasons %v", got)
	}
	for _, d := range st.kids[DecodeSpanName] {
		want := 2 // 20 tokens: one "tokens" event + finish
		if attrs(d.Attributes)[AttrChoiceIndex].AsInt64() == 1 {
			want = 3 // 33 tokens: 16, 32 + finish
		}
		if len(d.Events) != want {
			t.Errorf("decode %v: %d events, want %d", d.Attributes, len(d.Events), want)
		}
	}
}

func TestExtractKeepsTraceID(t *testing.T) {
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	)
	ctx := Extract(context.Background(), tp, ts)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("extracted %+v", sc)
	}
	if sc.TraceState().Get("congo") != "t61rcWkgMzE" {
		t.Errorf("tracestate %q", sc.TraceState().String())
	}

	exp, tracer := newRecorder(t)
	rs := StartRequest(ctx, tracer, time.Now(), RequestAttrs{Operation: "chat", Model: "m"})
	gotTP, gotTS := Inject(rs.Context())
	rs.End(nil)
	s := exp.GetSpans()[0]
	if s.SpanContext.TraceID() != sc.TraceID() || s.Parent.SpanID() != sc.SpanID() {
		t.Errorf("server span trace %s parent %s", s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext.SpanID().String() + "-01"; gotTP != want || gotTS != ts {
		t.Errorf("Inject = %q %q, want %q %q", gotTP, gotTS, want, ts)
	}

	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), bad, "")); sc.IsValid() {
			t.Errorf("Extract(%q) gave a valid span context", bad)
		}
	}
}
