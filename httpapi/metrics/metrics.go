// Package metrics is Cohort's Prometheus registry, built on the Prometheus
// Go client (github.com/prometheus/client_golang).
//
// Metric names follow vLLM (prefix "vllm:") so that existing vLLM dashboards
// work unchanged; Cohort-specific metrics use the prefix "cohort:". Every
// series of those carries a model_name label, as vLLM's do. The registry also
// exports the client's standard process ("process_") and Go runtime ("go_")
// collectors, which have no model_name.
//
// Request metrics are recorded once per finished request (RequestFinished);
// engine occupancy is read at scrape time through the Gauges callback, so
// the engine never pushes gauge updates.
//
// Histogram buckets are vLLM's (vllm/v1/metrics/loggers.py):
// TTFTBuckets for time to first token, InterTokenBuckets for inter-token
// latency, and RequestLatencyBuckets for end-to-end and queue time.
//
// The exposition is Prometheus text 0.0.4 by default; Negotiate picks
// OpenMetrics or protobuf when a scraper's Accept header asks for them.
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// ContentType is the Content-Type of WriteTo's output (text format 0.0.4).
const ContentType = string(expfmt.FmtText)

// ModelLabel is the label every Cohort and vLLM series carries.
const ModelLabel = "model_name"

// vLLM's bucket boundaries, in seconds.
var (
	TTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	InterTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	RequestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// FinishReasons are the finished_reason values of vllm:request_success_total
// that exist (at zero) before any request finishes: vLLM's engine reasons.
var FinishReasons = []string{"stop", "length", "abort", "error"}

// RejectReasons are the reason values of cohort:requests_rejected_total that
// exist (at zero) before any request is refused.
var RejectReasons = []string{"invalid", "overloaded", "not_ready", "context_length", "capacity"}

// Gauges is the engine's state at scrape time.
type Gauges struct {
	Running     int     // requests being decoded
	Waiting     int     // requests queued in the planner
	KVUsage     float64 // fraction of KV-cache pages in use, 0..1
	Preemptions uint64  // cumulative preemptions (exported as a counter)
	Ready       bool    // the server accepts requests
	Pending     int     // requests admitted by the edge and not finished
	// PrefixQueries and PrefixHits are the prompt tokens looked up in the
	// prefix cache and those it served (cumulative; exported as counters).
	PrefixQueries, PrefixHits uint64
}

// RequestMetrics describes one finished request. A zero TTFT or Queue means
// "not measured" (the request ended before its first token or before it was
// scheduled) and is not observed; E2E is always observed.
type RequestMetrics struct {
	PromptTokens, GenerationTokens int
	TTFT, E2E, Queue               time.Duration
	InterToken                     []time.Duration // gaps between consecutive output tokens
	Finish                         string          // a finished_reason ("stop", "length", "abort", "error", ...); "" counts as "unknown"
}

// Registry holds Cohort's metric families, and the process and Go runtime
// collectors, in one Prometheus registry.
type Registry struct {
	model  string
	reg    *prometheus.Registry
	labels prometheus.Labels // {model_name: model}, on every Cohort series

	mu   sync.Mutex
	fams map[string]any // name → *CounterVec, *Gauge, *Histogram or builtin

	ttft, itl, e2e, queue *Histogram
	prompt, generation    *Counter
	success, rejected     *CounterVec
}

// New returns a registry with Cohort's standard metrics and the process and
// Go runtime collectors. gauges is called once per scrape; it may be nil
// (the engine gauges then read zero).
func New(model string, gauges func() Gauges) *Registry {
	model = strings.ToValidUTF8(model, "\uFFFD")
	r := &Registry{
		model:  model,
		reg:    prometheus.NewRegistry(),
		labels: prometheus.Labels{ModelLabel: model},
		fams:   map[string]any{},
	}
	r.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())

	e := &engineCollector{gauges: gauges}
	var names []string
	for _, s := range []struct{ name, help string }{
		{"vllm:num_requests_running", "Number of requests in model execution batches."},
		{"vllm:num_requests_waiting", "Number of requests waiting to be processed."},
		{"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."},
		{"vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage. Deprecated alias of vllm:kv_cache_usage_perc."},
		{"cohort:ready", "1 when the server accepts requests, else 0."},
		{"cohort:pending_requests", "Requests admitted by the HTTP edge and not yet finished."},
		{"vllm:num_preemptions_total", "Cumulative number of preemptions from the engine."},
		{"vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache, counted at each request's first admission."},
		{"vllm:prefix_cache_hits_total", "Prompt tokens the prefix cache served of those looked up."},
	} {
		e.descs = append(e.descs, prometheus.NewDesc(s.name, s.help, nil, r.labels))
		names = append(names, s.name)
	}
	r.builtin(e, names...)

	r.prompt = r.Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.").With()
	r.generation = r.Counter("vllm:generation_tokens_total", "Number of generation tokens processed.").With()
	r.success = r.Counter("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason")
	r.rejected = r.Counter("cohort:requests_rejected_total", "Requests refused before they reached the engine, by reason.", "reason")
	for _, f := range FinishReasons {
		r.success.With(f)
	}
	for _, f := range RejectReasons {
		r.rejected.With(f)
	}

	r.ttft = r.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFTBuckets)
	r.itl = r.Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", InterTokenBuckets)
	r.alias("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds. Deprecated alias of vllm:inter_token_latency_seconds.", r.itl)
	r.e2e = r.Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", RequestLatencyBuckets)
	r.queue = r.Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", RequestLatencyBuckets)
	return r
}

// Model returns the model_name label value.
func (r *Registry) Model() string { return r.model }

// Gatherer returns the underlying Prometheus gatherer (for promhttp or a
// push gateway).
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// RequestFinished records one finished request. It is safe for concurrent
// use and does not allocate once the finish reason has been seen.
func (r *Registry) RequestFinished(m RequestMetrics) {
	if m.PromptTokens > 0 {
		r.prompt.Add(float64(m.PromptTokens))
	}
	if m.GenerationTokens > 0 {
		r.generation.Add(float64(m.GenerationTokens))
	}
	if m.TTFT > 0 {
		r.ttft.Observe(m.TTFT.Seconds())
	}
	if m.Queue > 0 {
		r.queue.Observe(m.Queue.Seconds())
	}
	r.e2e.Observe(m.E2E.Seconds())
	if len(m.InterToken) > 0 {
		r.itl.ObserveDurations(m.InterToken)
	}
	finish := m.Finish
	if finish == "" {
		finish = "unknown"
	}
	r.success.With(finish).Inc()
}

// Rejected counts a request refused before it reached the engine. reason
// should come from a small fixed set (RejectReasons, ...): each distinct
// value is a new series.
func (r *Registry) Rejected(reason string) {
	if reason == "" {
		reason = "unknown"
	}
	r.rejected.With(reason).Inc()
}

// Negotiate returns the exposition format for an HTTP Accept header:
// OpenMetrics 1.0.0 or 0.0.1 or a protobuf format when the header asks for
// one, else the Prometheus text format 0.0.4. The format's string is the
// response's Content-Type.
func Negotiate(accept string) expfmt.Format {
	return expfmt.NegotiateIncludingOpenMetrics(http.Header{"Accept": {accept}})
}

// Write writes the exposition in format f (from Negotiate): families sorted
// by name, series sorted by labels. It calls the gauges callback once. The
// OpenMetrics formats end with "# EOF".
func (r *Registry) Write(w io.Writer, f expfmt.Format) error {
	mfs, err := r.reg.Gather()
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	enc := expfmt.NewEncoder(w, f)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// WriteTo writes the exposition in the text format 0.0.4 (ContentType).
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := r.Write(cw, expfmt.FmtText)
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// builtin marks a name a scrape-time collector exports: it cannot be
// registered again.
type builtin struct{}

// add registers the collector mk makes for m under name, or returns the
// metric already registered under name when it is compatible with m (same
// kind, labels and buckets). It panics on a conflict, or when the Prometheus
// client refuses the collector (an invalid name, say).
func (r *Registry) add(name string, m any, mk func() prometheus.Collector) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.fams[name]; ok {
		if compatible(old, m) {
			return old
		}
		panic(fmt.Sprintf("metrics: %s registered twice", name))
	}
	if err := r.reg.Register(mk()); err != nil {
		panic(fmt.Sprintf("metrics: %s: %v", name, err))
	}
	r.fams[name] = m
	return m
}

func compatible(a, b any) bool {
	switch a := a.(type) {
	case *CounterVec:
		b, ok := b.(*CounterVec)
		return ok && slices.Equal(a.labels, b.labels)
	case *Gauge:
		_, ok := b.(*Gauge)
		return ok
	case *Histogram:
		b, ok := b.(*Histogram)
		return ok && slices.Equal(a.upper, b.upper)
	}
	return false
}

// Counter registers (or returns the already registered) counter family name
// with the given label names, in addition to model_name. By Prometheus
// convention name should end in "_total". It panics on an invalid or
// conflicting name or label.
func (r *Registry) Counter(name, help string, labels ...string) *CounterVec {
	for _, l := range labels {
		if l == ModelLabel || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: %s: reserved label name %q", name, l))
		}
	}
	v := &CounterVec{name: name, labels: slices.Clone(labels), m: map[string]*Counter{}}
	return r.add(name, v, func() prometheus.Collector {
		v.vec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: r.labels}, v.labels)
		return v.vec
	}).(*CounterVec)
}

// Gauge registers (or returns the already registered) gauge name.
func (r *Registry) Gauge(name, help string) *Gauge {
	g := &Gauge{}
	return r.add(name, g, func() prometheus.Collector {
		g.g = prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: r.labels})
		return g.g
	}).(*Gauge)
}

// Histogram registers (or returns the already registered) histogram name
// with the given upper bounds (strictly increasing, finite; +Inf is
// implicit).
func (r *Registry) Histogram(name, help string, buckets []float64) *Histogram {
	for i, u := range buckets {
		if math.IsNaN(u) || math.IsInf(u, 0) || (i > 0 && u <= buckets[i-1]) {
			panic(fmt.Sprintf("metrics: %s: histogram buckets must be finite and strictly increasing: %v", name, buckets))
		}
	}
	h := &Histogram{upper: slices.Clone(buckets)}
	return r.add(name, h, func() prometheus.Collector {
		h.h = prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: r.labels, Buckets: h.upper})
		return h.h
	}).(*Histogram)
}

// alias exposes h under a second name too, read from the same observations.
func (r *Registry) alias(name, help string, h *Histogram) {
	d := prometheus.NewDesc(name, help, nil, r.labels)
	r.builtin(&aliasCollector{h: h, desc: d}, name)
}

// builtin registers a scrape-time collector of Cohort's and reserves the
// names it exports.
func (r *Registry) builtin(c prometheus.Collector, names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reg.MustRegister(c)
	for _, n := range names {
		r.fams[n] = builtin{}
	}
}

// ---- Counter ----

// CounterVec is a counter family partitioned by label values.
type CounterVec struct {
	name   string
	labels []string
	vec    *prometheus.CounterVec
	mu     sync.RWMutex
	m      map[string]*Counter // key: label values joined by "\x00"
}

// Counter is one monotonically increasing series.
type Counter struct{ c prometheus.Counter }

// With returns the series for labelValues (one per label name, in order),
// creating it at zero on first use; invalid UTF-8 in a value becomes
// U+FFFD. It panics on a wrong value count. Looking up an existing series
// does not allocate.
func (v *CounterVec) With(labelValues ...string) *Counter {
	if len(labelValues) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s: %d label values for %d labels", v.name, len(labelValues), len(v.labels)))
	}
	var c *Counter
	switch len(labelValues) {
	case 0:
		v.mu.RLock()
		c = v.m[""]
		v.mu.RUnlock()
	case 1:
		v.mu.RLock()
		c = v.m[labelValues[0]]
		v.mu.RUnlock()
	default:
		var buf [128]byte
		key := buf[:0]
		for i, s := range labelValues {
			if i > 0 {
				key = append(key, 0)
			}
			key = append(key, s...)
		}
		v.mu.RLock()
		c = v.m[string(key)]
		v.mu.RUnlock()
	}
	if c != nil {
		return c
	}
	return v.create(labelValues)
}

func (v *CounterVec) create(labelValues []string) *Counter {
	key := strings.Join(labelValues, "\x00")
	vals := make([]string, len(labelValues))
	for i, s := range labelValues {
		vals[i] = strings.ToValidUTF8(s, "\uFFFD")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.m[key]; c != nil {
		return c
	}
	c := &Counter{c: v.vec.WithLabelValues(vals...)}
	v.m[key] = c
	return c
}

// Add adds n; negative and NaN values are ignored (counters only go up).
func (c *Counter) Add(n float64) {
	if n > 0 {
		c.c.Add(n)
	}
}

// Inc adds 1.
func (c *Counter) Inc() { c.c.Inc() }

// ---- Gauge ----

// Gauge is a value that goes up and down.
type Gauge struct{ g prometheus.Gauge }

// Set sets the value.
func (g *Gauge) Set(v float64) { g.g.Set(v) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) { g.g.Add(d) }

// Inc adds 1.
func (g *Gauge) Inc() { g.g.Inc() }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.g.Dec() }

// ---- Histogram ----

// Histogram counts observations into cumulative buckets.
type Histogram struct {
	upper []float64
	h     prometheus.Histogram
}

// Observe records v. NaN is ignored.
func (h *Histogram) Observe(v float64) {
	if !math.IsNaN(v) {
		h.h.Observe(v)
	}
}

// ObserveDurations records each duration in seconds.
func (h *Histogram) ObserveDurations(ds []time.Duration) {
	for _, d := range ds {
		h.h.Observe(d.Seconds())
	}
}

// Snapshot returns cumulative bucket counts (one per upper bound, then +Inf),
// the sum and the count, consistently.
func (h *Histogram) Snapshot() (cumulative []uint64, sum float64, count uint64) {
	var m dto.Metric
	if err := h.h.Write(&m); err != nil {
		panic(fmt.Sprintf("metrics: %v", err)) // a plain histogram always writes
	}
	hm := m.GetHistogram()
	cumulative = make([]uint64, 0, len(h.upper)+1)
	for _, b := range hm.GetBucket() {
		cumulative = append(cumulative, b.GetCumulativeCount())
	}
	return append(cumulative, hm.GetSampleCount()), hm.GetSampleSum(), hm.GetSampleCount()
}

// ---- scrape-time collectors ----

// engineCollector exports the Gauges callback's values, calling it once
// per scrape. descs are, in order: running, waiting, KV usage, its GPU
// alias, ready, pending (gauges), then preemptions and the prefix cache's
// queries and hits (counters).
type engineCollector struct {
	gauges func() Gauges
	descs  []*prometheus.Desc
}

func (e *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range e.descs {
		ch <- d
	}
}

func (e *engineCollector) Collect(ch chan<- prometheus.Metric) {
	var g Gauges
	if e.gauges != nil {
		g = e.gauges()
	}
	ready := 0.0
	if g.Ready {
		ready = 1
	}
	for i, v := range []float64{float64(g.Running), float64(g.Waiting), g.KVUsage, g.KVUsage, ready, float64(g.Pending)} {
		ch <- prometheus.MustNewConstMetric(e.descs[i], prometheus.GaugeValue, v)
	}
	for i, v := range []uint64{g.Preemptions, g.PrefixQueries, g.PrefixHits} {
		ch <- prometheus.MustNewConstMetric(e.descs[6+i], prometheus.CounterValue, float64(v))
	}
}

// aliasCollector exports a histogram's current state under another name.
type aliasCollector struct {
	h    *Histogram
	desc *prometheus.Desc
}

func (a *aliasCollector) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *aliasCollector) Collect(ch chan<- prometheus.Metric) {
	cum, sum, n := a.h.Snapshot()
	buckets := make(map[float64]uint64, len(a.h.upper))
	for i, u := range a.h.upper {
		buckets[u] = cum[i]
	}
	ch <- prometheus.MustNewConstHistogram(a.desc, n, sum, buckets)
}
