// Package tracecheck runs an OpenTelemetry Collector built from the
// collector's own Go modules (otelcol, the OTLP receiver) inside a test
// process, with a trace exporter that keeps every span it receives in
// memory, so that a test can serve requests through Cohort, exporting OTLP
// to the collector, and then check the stored traces.
//
// It is its own Go module so that the collector's dependencies stay out of
// Cohort's go.mod; its test runs the cohort binary as a subprocess.
package tracecheck

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry"
	"go.uber.org/zap"
)

// Span is one stored span, flattened from OTLP: ids in lowercase hex
// (ParentSpanID "" for a root), attributes as Go values (string, bool,
// int64, float64, []any).
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name, Kind                    string // Kind as pdata names it: "Server", "Internal", ...
	Scope                         string // instrumentation scope name
	Service                       string // the resource's service.name
	Attrs                         map[string]any
	Links                         []Link
	Start, End                    time.Time
}

// Link is a span link: the linked span's ids.
type Link struct{ TraceID, SpanID string }

// Store holds the spans a memory exporter received, in arrival order.
type Store struct {
	mu    sync.Mutex
	spans []Span
}

// Spans returns a copy of the stored spans.
func (s *Store) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

func (s *Store) add(td ptrace.Traces) {
	var got []Span
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		service := ""
		if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				out := Span{
					TraceID: traceHex(sp.TraceID()), SpanID: spanHex(sp.SpanID()),
					Name: sp.Name(), Kind: sp.Kind().String(), Scope: ss.Scope().Name(), Service: service,
					Attrs: sp.Attributes().AsRaw(),
					Start: sp.StartTimestamp().AsTime(), End: sp.EndTimestamp().AsTime(),
				}
				if !sp.ParentSpanID().IsEmpty() {
					out.ParentSpanID = spanHex(sp.ParentSpanID())
				}
				links := sp.Links()
				for l := 0; l < links.Len(); l++ {
					out.Links = append(out.Links, Link{TraceID: traceHex(links.At(l).TraceID()), SpanID: spanHex(links.At(l).SpanID())})
				}
				got = append(got, out)
			}
		}
	}
	s.mu.Lock()
	s.spans = append(s.spans, got...)
	s.mu.Unlock()
}

func traceHex(id pcommon.TraceID) string { return hex.EncodeToString(id[:]) }
func spanHex(id pcommon.SpanID) string   { return hex.EncodeToString(id[:]) }

// memoryType is the exporter's type in the collector configuration.
var memoryType = component.MustNewType("memory")

type memoryConfig struct{}

// memoryExporter is a traces exporter that adds what it consumes to a Store.
type memoryExporter struct{ store *Store }

func (e memoryExporter) Start(context.Context, component.Host) error { return nil }
func (e memoryExporter) Shutdown(context.Context) error              { return nil }
func (e memoryExporter) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

func (e memoryExporter) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	e.store.add(td)
	return nil
}

// newMemoryFactory is the factory of the "memory" exporter writing to store.
func newMemoryFactory(store *Store) exporter.Factory {
	return exporter.NewFactory(memoryType, func() component.Config { return &memoryConfig{} },
		exporter.WithTraces(func(context.Context, exporter.Settings, component.Config) (exporter.Traces, error) {
			return memoryExporter{store: store}, nil
		}, component.StabilityLevelDevelopment))
}

// telemetryConfig is the (empty) service::telemetry section.
type telemetryConfig struct{}

// newTelemetryFactory is the collector's own telemetry: warnings and errors
// logged to stderr, no metrics and no traces of its own (so no metrics
// endpoint). The collector's configurable telemetry (otelconftelemetry)
// would pull in its resource detectors, Kubernetes' client among them,
// a far larger build.
func newTelemetryFactory() telemetry.Factory {
	return telemetry.NewFactory(func() component.Config { return &telemetryConfig{} },
		telemetry.WithCreateLogger(func(_ context.Context, set telemetry.LoggerSettings, _ component.Config) (*zap.Logger, component.ShutdownFunc, error) {
			zc := zap.NewDevelopmentConfig()
			zc.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
			build := set.BuildZapLogger
			if build == nil {
				build = func(c zap.Config, opts ...zap.Option) (*zap.Logger, error) { return c.Build(opts...) }
			}
			l, err := build(zc)
			return l, nil, err
		}))
}

// Collector is a running collector: an OTLP/HTTP receiver on a loopback
// address feeding the memory exporter.
type Collector struct {
	// Endpoint is the OTLP/HTTP base URL (http://host:port); traces go to
	// Endpoint + "/v1/traces".
	Endpoint string
	Store    *Store

	col  *otelcol.Collector
	done chan error
}

// config is the collector's configuration: the OTLP receiver with HTTP
// only, on addr, and the memory exporter.
func config(addr string) string {
	return fmt.Sprintf(`yaml:
receivers:
  otlp:
    protocols:
      http:
        endpoint: %q
exporters:
  memory: {}
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [memory]
`, addr)
}

// Start runs a collector whose OTLP/HTTP receiver listens on addr, a
// loopback ip:port (anything else is refused), and waits, until ctx ends,
// for it to be running. Call Shutdown when done.
func Start(ctx context.Context, addr string) (*Collector, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tracecheck: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("tracecheck: %s is not a loopback address", addr)
	}
	store := &Store{}
	factories := func() (otelcol.Factories, error) {
		receivers, err := otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
		if err != nil {
			return otelcol.Factories{}, err
		}
		exporters, err := otelcol.MakeFactoryMap(newMemoryFactory(store))
		if err != nil {
			return otelcol.Factories{}, err
		}
		return otelcol.Factories{Receivers: receivers, Exporters: exporters, Telemetry: newTelemetryFactory()}, nil
	}
	col, err := otelcol.NewCollector(otelcol.CollectorSettings{
		Factories: factories,
		BuildInfo: component.BuildInfo{Command: "tracecheck", Description: "Cohort's test collector", Version: "test"},
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			URIs:              []string{config(addr)},
			ProviderFactories: []confmap.ProviderFactory{yamlprovider.NewFactory()},
		}},
		DisableGracefulShutdown: true, // no signal handler in a test process
	})
	if err != nil {
		return nil, err
	}
	c := &Collector{Endpoint: "http://" + addr, Store: store, col: col, done: make(chan error, 1)}
	go func() { c.done <- col.Run(context.Background()) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for col.GetState() != otelcol.StateRunning {
		select {
		case err := <-c.done:
			if err == nil {
				err = errors.New("tracecheck: the collector stopped before running")
			}
			return nil, err
		case <-ctx.Done():
			c.Shutdown()
			return nil, fmt.Errorf("tracecheck: the collector is not running: %w", ctx.Err())
		case <-tick.C:
		}
	}
	return c, nil
}

// Shutdown stops the collector and waits for it.
func (c *Collector) Shutdown() error {
	c.col.Shutdown()
	return <-c.done
}
