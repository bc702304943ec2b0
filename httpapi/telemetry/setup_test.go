package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/otel/trace"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestSetupEmptyEnvIsNoop(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_TRACES_EXPORTER": " none , "},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"},
	} {
		tp, shutdown, err := Setup(context.Background(), envOf(env))
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		tracer := tp.Tracer(InstrumentationName)
		_, span := tracer.Start(context.Background(), "x")
		if span.IsRecording() {
			t.Errorf("%v: span is recording", env)
		}
		span.End()

		// A request span on a no-op provider records nothing and is cheap.
		ev := stream(time.Now(), 3, "stop", 1)
		allocs := testing.AllocsPerRun(50, func() {
			rs := StartRequest(context.Background(), tracer, time.Now(), RequestAttrs{Operation: "chat", Model: "m"})
			for _, e := range ev {
				rs.Observe(e)
			}
			rs.Choice(1).Observe(ev[0])
			rs.End(nil)
		})
		if allocs > 1 {
			t.Errorf("%v: no-op request span costs %v allocations", env, allocs)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutdown: %v", env, err)
		}
	}
}

func TestSetupNoopKeepsRemoteParent(t *testing.T) {
	tp, _, _ := Setup(context.Background(), envOf(nil))
	ctx := Extract(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	rs := StartRequest(ctx, tp.Tracer(InstrumentationName), time.Now(), RequestAttrs{Operation: "chat", Model: "m"})
	defer rs.End(nil)
	if got := trace.SpanContextFromContext(rs.Context()).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id lost through the no-op provider: %q", got)
	}
	if got := rs.SpanContext().SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("SpanContext through the no-op provider: span %q, want the caller's", got)
	}
}

func TestSetupErrors(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"},
		{"OTEL_TRACES_EXPORTER": "console", "OTEL_RESOURCE_ATTRIBUTES": "a=%zz"},
	} {
		if _, _, err := Setup(context.Background(), envOf(env)); err == nil {
			t.Errorf("%v: Setup succeeded", env)
		}
	}
}

func TestSetupConsole(t *testing.T) {
	tp, shutdown, err := Setup(context.Background(), envOf(map[string]string{"OTEL_TRACES_EXPORTER": "console,none"}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer(InstrumentationName).Start(context.Background(), "x")
	if !span.IsRecording() {
		t.Error("console exporter: span not recording")
	}
	// Not ended: nothing is printed.
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestSetupGRPC builds the gRPC exporter against an address where nothing
// listens; Setup must not block and shutdown must honour its deadline.
func TestSetupGRPC(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20x"},
	} {
		start := time.Now()
		tp, shutdown, err := Setup(context.Background(), envOf(env))
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		_, span := tp.Tracer(InstrumentationName).Start(context.Background(), "x")
		if !span.IsRecording() {
			t.Errorf("%v: not recording", env)
		}
		span.End()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_ = shutdown(ctx) // the export fails: nothing listens
		cancel()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: Setup+shutdown took %v", env, d)
		}
	}
}

// otlpReceiver is a minimal OTLP/HTTP trace collector.
type otlpReceiver struct {
	mu      sync.Mutex
	reqs    []*coltracepb.ExportTraceServiceRequest
	headers []http.Header
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := new(coltracepb.ExportTraceServiceRequest)
	if err := proto.Unmarshal(data, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, req)
	rc.headers = append(rc.headers, r.Header.Clone())
	rc.mu.Unlock()
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func (rc *otlpReceiver) spans() (res []*commonpb.KeyValue, spans []*tracepb.Span) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, req := range rc.reqs {
		for _, rs := range req.ResourceSpans {
			res = append(res, rs.GetResource().GetAttributes()...)
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}
	return res, spans
}

func kv(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

func TestOTLPHTTPExport(t *testing.T) {
	rc := &otlpReceiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	tp, shutdown, err := Setup(context.Background(), envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL + "/",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-tenant=blue%20team",
		"OTEL_SERVICE_NAME":           "cohort-test",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=ci,service.name=ignored",
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := Extract(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	t0 := time.Now().Add(-time.Second)
	rs := StartRequest(ctx, tp.Tracer(InstrumentationName), t0, RequestAttrs{Operation: "chat", Model: "qwen", MaxTokens: 8})
	for _, ev := range stream(t0, 18, "stop", 4) {
		rs.Observe(ev)
	}
	rs.End(nil)

	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil { // flushes the batch
		t.Fatalf("shutdown: %v", err)
	}

	res, spans := rc.spans()
	if got := kv(res, "service.name").GetStringValue(); got != "cohort-test" {
		t.Errorf("service.name = %q", got)
	}
	if got := kv(res, "deployment.environment").GetStringValue(); got != "ci" {
		t.Errorf("deployment.environment = %q", got)
	}
	rc.mu.Lock()
	if len(rc.headers) == 0 || rc.headers[0].Get("X-Tenant") != "blue team" {
		t.Errorf("headers not forwarded: %v", rc.headers)
	}
	rc.mu.Unlock()
	if len(spans) != 4 {
		t.Fatalf("received %d spans, want 4", len(spans))
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = s
		if got := hex.EncodeToString(s.TraceId); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s: trace id %s", s.Name, got)
		}
	}
	srvSpan := byName["chat qwen"]
	if srvSpan == nil {
		t.Fatalf("no server span among %v", byName)
	}
	if srvSpan.Kind != tracepb.Span_SPAN_KIND_SERVER || hex.EncodeToString(srvSpan.ParentSpanId) != "00f067aa0ba902b7" {
		t.Errorf("server span kind %v parent %x", srvSpan.Kind, srvSpan.ParentSpanId)
	}
	if got := kv(srvSpan.Attributes, string(AttrOutputTokens)).GetIntValue(); got != 18 {
		t.Errorf("output tokens %d", got)
	}
	if got := kv(srvSpan.Attributes, string(AttrFinishReasons)).GetArrayValue().GetValues(); len(got) != 1 || got[0].GetStringValue() != "stop" {
		t.Errorf("finish reasons %v", got)
	}
	for _, name := range []string{QueueSpanName, PrefillSpanName, DecodeSpanName} {
		s := byName[name]
		if s == nil || !bytes.Equal(s.ParentSpanId, srvSpan.SpanId) {
			t.Errorf("%s: missing or wrong parent", name)
		}
	}
	if d := byName[DecodeSpanName]; d != nil && len(d.Events) != 2 {
		t.Errorf("decode events %d, want 2", len(d.Events))
	}
	if !strings.HasPrefix(srv.URL, "http://") {
		t.Fatal(srv.URL)
	}
}
