// Package telemetry is Cohort's OpenTelemetry tracing: a TracerProvider
// configured from the standard OTEL_* variables (Setup), W3C trace-context
// propagation (Extract, Inject), and one server span per generation request
// with GenAI semantic-convention attributes and queue/prefill/decode child
// spans (StartRequest).
//
// Tracing is off unless configured: with no OTEL_TRACES_EXPORTER and no OTLP
// endpoint, Setup returns a no-op provider whose spans do not record, and
// RequestSpan's methods return at once.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is unset.
const DefaultServiceName = "cohort"

// InstrumentationName names Cohort's tracer (provider.Tracer(InstrumentationName)).
const InstrumentationName = "cohort/httpapi"

// Setup builds a TracerProvider from the standard OTEL_* variables, read
// through getenv (nil means os.Getenv):
//
//   - OTEL_SDK_DISABLED=true: no-op provider.
//   - OTEL_TRACES_EXPORTER: comma list of otlp, console (pretty JSON on
//     stdout) and none. Unset, it is "otlp" when an OTLP endpoint is set and
//     otherwise tracing is off (no-op provider: no exporter, no batching
//     goroutine, non-recording spans).
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (default) or grpc. http/json is refused.
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is), else
//     OTEL_EXPORTER_OTLP_ENDPOINT (a base URL; "/v1/traces" is appended for
//     HTTP), and OTEL_EXPORTER_OTLP_{TRACES_,}HEADERS.
//   - OTEL_SERVICE_NAME (default "cohort") and OTEL_RESOURCE_ATTRIBUTES.
//
// The OTLP exporters read the remaining variables (timeout, compression,
// TLS certificates, insecure) from the process environment themselves, and
// the SDK reads OTEL_TRACES_SAMPLER and the span limits likewise.
//
// The returned function shuts the provider down, flushing queued spans; it
// is safe to call with a bounded context. Setup does not install anything
// globally (no otel.SetTracerProvider).
func Setup(ctx context.Context, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	noShutdown := func(context.Context) error { return nil }
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return noop.NewTracerProvider(), noShutdown, nil
	}

	names := env("OTEL_TRACES_EXPORTER")
	tracesEndpoint, baseEndpoint := env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), env("OTEL_EXPORTER_OTLP_ENDPOINT")
	if names == "" {
		if tracesEndpoint == "" && baseEndpoint == "" {
			return noop.NewTracerProvider(), noShutdown, nil
		}
		names = "otlp"
	}

	var exporters []sdktrace.SpanExporter
	fail := func(err error) (trace.TracerProvider, func(context.Context) error, error) {
		for _, e := range exporters {
			_ = e.Shutdown(ctx)
		}
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(names, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" || name == "none" || seen[name] {
			continue
		}
		seen[name] = true
		var exp sdktrace.SpanExporter
		var err error
		switch name {
		case "otlp":
			exp, err = newOTLP(ctx, env, tracesEndpoint, baseEndpoint)
		case "console":
			exp, err = stdouttrace.New(stdouttrace.WithPrettyPrint())
		default:
			err = fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER: unsupported exporter %q (want otlp, console or none)", name)
		}
		if err != nil {
			return fail(err)
		}
		exporters = append(exporters, exp)
	}
	if len(exporters) == 0 {
		return noop.NewTracerProvider(), noShutdown, nil
	}

	res, err := newResource(env)
	if err != nil {
		return fail(err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, e := range exporters {
		opts = append(opts, sdktrace.WithBatcher(e))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, tp.Shutdown, nil
}

func newOTLP(ctx context.Context, env func(string) string, tracesEndpoint, baseEndpoint string) (sdktrace.SpanExporter, error) {
	proto := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto == "" {
		proto = "http/protobuf"
	}
	headers, err := parseKV(env("OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	th, err := parseKV(env("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_TRACES_HEADERS: %w", err)
	}
	for k, v := range th {
		headers[k] = v
	}

	switch strings.ToLower(proto) {
	case "http/protobuf":
		var opts []otlptracehttp.Option
		switch {
		case tracesEndpoint != "":
			if err := checkURL(tracesEndpoint); err != nil {
				return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: %w", err)
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(tracesEndpoint))
		case baseEndpoint != "":
			if err := checkURL(baseEndpoint); err != nil {
				return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(baseEndpoint, "/")+"/v1/traces"))
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		return otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		ep, which := tracesEndpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		if ep == "" {
			ep, which = baseEndpoint, "OTEL_EXPORTER_OTLP_ENDPOINT"
		}
		if ep != "" {
			if err := checkURL(ep); err != nil {
				return nil, fmt.Errorf("telemetry: %s: %w", which, err)
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(ep))
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q is not supported (want http/protobuf or grpc)", proto)
	}
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", s)
	}
	return nil
}

// parseKV parses the OTEL "key1=value1,key2=value2" list format with
// percent-encoded values.
func parseKV(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("malformed entry %q", kv)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", kv, err)
		}
		dk, err := url.PathUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", kv, err)
		}
		m[dk] = dv
	}
	return m, nil
}

func newResource(env func(string) string) (*resource.Resource, error) {
	kv, err := parseKV(env("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	service := env("OTEL_SERVICE_NAME")
	if service == "" {
		service = kv["service.name"]
	}
	if service == "" {
		service = DefaultServiceName
	}
	attrs := make([]attribute.KeyValue, 0, len(kv)+1)
	for k, v := range kv {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	attrs = append(attrs, attribute.String("service.name", service))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

// traceContext is the W3C trace-context propagator.
var traceContext propagation.TraceContext

// carrier is a two-header TextMapCarrier that does not allocate a map.
type carrier struct{ traceparent, tracestate string }

func (c *carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.traceparent
	case "tracestate":
		return c.tracestate
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.traceparent = value
	case "tracestate":
		c.tracestate = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// Extract returns ctx carrying the remote span context of the W3C
// traceparent and tracestate headers, so that spans started from it join
// the caller's trace. An empty or malformed traceparent leaves ctx as is.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, &carrier{traceparent: traceparent, tracestate: tracestate})
}

// Inject returns the W3C headers for ctx's span ("" when it has none).
func Inject(ctx context.Context) (traceparent, tracestate string) {
	var c carrier
	traceContext.Inject(ctx, &c)
	return c.traceparent, c.tracestate
}
