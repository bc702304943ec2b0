// Package metrics is a small, dependency-free Prometheus registry that writes
// the text exposition format 0.0.4.
//
// Metric names follow vLLM (prefix "vllm:") so that existing vLLM dashboards
// work unchanged; Cohort-specific metrics use the prefix "cohort:". Every
// series carries a model_name label, as vLLM's do.
//
// Request metrics are recorded once per finished request (RequestFinished);
// engine occupancy is read at scrape time through the Gauges callback, so
// the engine never pushes gauge updates.
//
// Histogram buckets are vLLM's (vllm/v1/metrics/loggers.py):
// TTFTBuckets for time to first token, InterTokenBuckets for inter-token
// latency, and RequestLatencyBuckets for end-to-end and queue time.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// ContentType is the Content-Type of WriteTo's output.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ModelLabel is the label every series of a Registry carries.
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

// Gauges is the engine's state at scrape time.
type Gauges struct {
	Running     int     // requests being decoded
	Waiting     int     // requests queued in the planner
	KVUsage     float64 // fraction of KV-cache pages in use, 0..1
	Preemptions uint64  // cumulative preemptions (exported as a counter)
	Ready       bool    // the server accepts requests
	Pending     int     // requests admitted by the edge and not finished
}

// RequestMetrics describes one finished request. A zero TTFT or Queue means
// "not measured" (the request ended before its first token or before it was
// scheduled) and is not observed; E2E is always observed.
type RequestMetrics struct {
	PromptTokens, GenerationTokens int
	TTFT, E2E, Queue               time.Duration
	InterToken                     []time.Duration // gaps between consecutive output tokens
	Finish                         string          // "stop", "length", "cancelled", "error", ...; "" counts as "unknown"
}

// Registry holds metric families and writes them sorted by name.
type Registry struct {
	model  string
	base   string // `model_name="…"`, escaped
	gauges func() Gauges

	mu     sync.Mutex
	fams   map[string]*family
	sorted []*family // nil when a registration invalidated it
	size   int       // the last exposition's size, to presize the buffer

	ttft, itl, e2e, queue *Histogram
	prompt, generation    *Counter
	success, rejected     *CounterVec
}

// family is one exposed metric name.
type family struct {
	name, help, typ string
	metric          any // *CounterVec, *Gauge, *Histogram, or nil for built-ins
	write           func(b []byte, base string, g *Gauges) []byte
}

// New returns a registry with Cohort's standard metrics. gauges is called
// once per scrape (WriteTo); it may be nil.
func New(model string, gauges func() Gauges) *Registry {
	r := &Registry{
		model:  model,
		base:   ModelLabel + `="` + escapeLabel(model) + `"`,
		gauges: gauges,
		fams:   map[string]*family{},
	}
	gauge := func(name, help string, v func(*Gauges) float64) {
		r.register(&family{name: name, help: help, typ: "gauge",
			write: func(b []byte, base string, g *Gauges) []byte {
				return appendSample(b, name, base, "", "", v(g))
			}})
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
		func(g *Gauges) float64 { return float64(g.Running) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
		func(g *Gauges) float64 { return float64(g.Waiting) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
		func(g *Gauges) float64 { return g.KVUsage })
	gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage. Deprecated alias of vllm:kv_cache_usage_perc.",
		func(g *Gauges) float64 { return g.KVUsage })
	gauge("cohort:ready", "1 when the server accepts requests, else 0.",
		func(g *Gauges) float64 {
			if g.Ready {
				return 1
			}
			return 0
		})
	gauge("cohort:pending_requests", "Requests admitted by the HTTP edge and not yet finished.",
		func(g *Gauges) float64 { return float64(g.Pending) })
	r.register(&family{name: "vllm:num_preemptions_total", help: "Cumulative number of preemptions from the engine.", typ: "counter",
		write: func(b []byte, base string, g *Gauges) []byte {
			return appendSample(b, "vllm:num_preemptions_total", base, "", "", float64(g.Preemptions))
		}})

	r.prompt = r.Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.").With()
	r.generation = r.Counter("vllm:generation_tokens_total", "Number of generation tokens processed.").With()
	r.success = r.Counter("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason")
	r.rejected = r.Counter("cohort:requests_rejected_total", "Requests refused before they reached the engine, by reason.", "reason")
	for _, f := range []string{"stop", "length", "cancelled", "error"} {
		r.success.With(f)
	}
	for _, f := range []string{"invalid", "overloaded", "not_ready", "context_length", "capacity"} {
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
// should come from a small fixed set (invalid, overloaded, not_ready,
// context_length, capacity, ...): each distinct value is a new series.
func (r *Registry) Rejected(reason string) {
	if reason == "" {
		reason = "unknown"
	}
	r.rejected.With(reason).Inc()
}

// WriteTo writes the exposition: families sorted by name, series sorted by
// label values. It calls the gauges callback once.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	var g Gauges
	if r.gauges != nil {
		g = r.gauges()
	}
	r.mu.Lock()
	if r.sorted == nil {
		r.sorted = make([]*family, 0, len(r.fams))
		for _, f := range r.fams {
			r.sorted = append(r.sorted, f)
		}
		slices.SortFunc(r.sorted, func(a, b *family) int {
			if a.name < b.name {
				return -1
			}
			if a.name > b.name {
				return 1
			}
			return 0
		})
	}
	fams, size := r.sorted, r.size
	r.mu.Unlock()

	b := make([]byte, 0, size+size/8+256)
	for _, f := range fams {
		b = append(b, "# HELP "...)
		b = append(b, f.name...)
		b = append(b, ' ')
		b = appendHelp(b, f.help)
		b = append(b, "\n# TYPE "...)
		b = append(b, f.name...)
		b = append(b, ' ')
		b = append(b, f.typ...)
		b = append(b, '\n')
		b = f.write(b, r.base, &g)
	}
	r.mu.Lock()
	r.size = len(b)
	r.mu.Unlock()
	n, err := w.Write(b)
	return int64(n), err
}

// register adds f, or returns the family already registered under f.name
// when it is compatible (same type and labels). It panics on an invalid name
// or a conflicting registration.
func (r *Registry) register(f *family) *family {
	if !validMetricName(f.name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", f.name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.fams[f.name]; ok {
		if old.metric != nil && compatible(old.metric, f.metric) {
			return old
		}
		panic(fmt.Sprintf("metrics: %s registered twice", f.name))
	}
	r.fams[f.name] = f
	r.sorted = nil
	return f
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
// convention name should end in "_total".
func (r *Registry) Counter(name, help string, labels ...string) *CounterVec {
	for _, l := range labels {
		if !validLabelName(l) || l == ModelLabel || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
	}
	v := &CounterVec{name: name, labels: slices.Clone(labels), m: map[string]*Counter{}}
	f := r.register(&family{name: name, help: help, typ: "counter", metric: v, write: v.write})
	return f.metric.(*CounterVec)
}

// Gauge registers (or returns the already registered) gauge name.
func (r *Registry) Gauge(name, help string) *Gauge {
	g := &Gauge{}
	f := r.register(&family{name: name, help: help, typ: "gauge", metric: g,
		write: func(b []byte, base string, _ *Gauges) []byte {
			return appendSample(b, name, base, "", "", g.Value())
		}})
	return f.metric.(*Gauge)
}

// Histogram registers (or returns the already registered) histogram name
// with the given upper bounds (strictly increasing, finite; +Inf is
// implicit).
func (r *Registry) Histogram(name, help string, buckets []float64) *Histogram {
	h := newHistogram(buckets)
	f := r.register(&family{name: name, help: help, typ: "histogram", metric: h,
		write: func(b []byte, base string, _ *Gauges) []byte { return h.write(b, name, base) }})
	return f.metric.(*Histogram)
}

// alias exposes h under a second name too.
func (r *Registry) alias(name, help string, h *Histogram) {
	r.register(&family{name: name, help: help, typ: "histogram",
		write: func(b []byte, base string, _ *Gauges) []byte { return h.write(b, name, base) }})
}

// ---- Counter ----

// CounterVec is a counter family partitioned by label values.
type CounterVec struct {
	name   string
	labels []string
	mu     sync.RWMutex
	m      map[string]*Counter // key: label values joined by "\x00"
}

// Counter is one monotonically increasing series.
type Counter struct {
	bits   atomic.Uint64 // float64
	values []string
}

// With returns the series for labelValues (one per label name, in order),
// creating it at zero on first use. It panics on a wrong value count.
// Looking up an existing series does not allocate.
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
	key := ""
	vals := make([]string, len(labelValues))
	for i, s := range labelValues {
		if i > 0 {
			key += "\x00"
		}
		key += s
		if !utf8.ValidString(s) {
			s = string([]rune(s)) // invalid bytes become U+FFFD
		}
		vals[i] = s
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.m[key]; c != nil {
		return c
	}
	c := &Counter{values: vals}
	v.m[key] = c
	return c
}

// Add adds n; negative and NaN values are ignored (counters only go up).
func (c *Counter) Add(n float64) {
	if !(n > 0) {
		return
	}
	for {
		old := c.bits.Load()
		if c.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+n)) {
			return
		}
	}
}

// Inc adds 1.
func (c *Counter) Inc() { c.Add(1) }

// Value returns the current value.
func (c *Counter) Value() float64 { return math.Float64frombits(c.bits.Load()) }

func (v *CounterVec) write(b []byte, base string, _ *Gauges) []byte {
	v.mu.RLock()
	cs := make([]*Counter, 0, len(v.m))
	for _, c := range v.m {
		cs = append(cs, c)
	}
	v.mu.RUnlock()
	slices.SortFunc(cs, func(a, b *Counter) int { return slices.Compare(a.values, b.values) })
	for _, c := range cs {
		b = append(b, v.name...)
		b = append(b, '{')
		b = append(b, base...)
		for i, l := range v.labels {
			b = append(b, ',')
			b = append(b, l...)
			b = append(b, `="`...)
			b = appendEscapedLabel(b, c.values[i])
			b = append(b, '"')
		}
		b = append(b, "} "...)
		b = appendFloat(b, c.Value())
		b = append(b, '\n')
	}
	return b
}

// ---- Gauge ----

// Gauge is a value that goes up and down.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the value.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Inc adds 1.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.Add(-1) }

// Value returns the current value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// ---- Histogram ----

// Histogram counts observations into cumulative buckets.
type Histogram struct {
	upper []float64
	mu    sync.Mutex
	count []uint64 // per bucket, not cumulative; the last is +Inf
	sum   float64
	n     uint64
}

func newHistogram(buckets []float64) *Histogram {
	for i, u := range buckets {
		if math.IsNaN(u) || math.IsInf(u, 0) || (i > 0 && u <= buckets[i-1]) {
			panic(fmt.Sprintf("metrics: histogram buckets must be finite and strictly increasing: %v", buckets))
		}
	}
	return &Histogram{upper: slices.Clone(buckets), count: make([]uint64, len(buckets)+1)}
}

// bucket returns the index of the first upper bound >= v (len(upper) for +Inf).
func (h *Histogram) bucket(v float64) int {
	lo, hi := 0, len(h.upper)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if h.upper[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Observe records v. NaN is ignored.
func (h *Histogram) Observe(v float64) {
	if math.IsNaN(v) {
		return
	}
	i := h.bucket(v)
	h.mu.Lock()
	h.count[i]++
	h.sum += v
	h.n++
	h.mu.Unlock()
}

// ObserveDurations records each duration in seconds, under one lock.
func (h *Histogram) ObserveDurations(ds []time.Duration) {
	h.mu.Lock()
	for _, d := range ds {
		v := d.Seconds()
		h.count[h.bucket(v)]++
		h.sum += v
	}
	h.n += uint64(len(ds))
	h.mu.Unlock()
}

// Snapshot returns cumulative bucket counts (one per upper bound, then +Inf),
// the sum and the count, consistently.
func (h *Histogram) Snapshot() (cumulative []uint64, sum float64, count uint64) {
	cumulative = make([]uint64, len(h.count))
	h.mu.Lock()
	copy(cumulative, h.count)
	sum, count = h.sum, h.n
	h.mu.Unlock()
	for i := 1; i < len(cumulative); i++ {
		cumulative[i] += cumulative[i-1]
	}
	return cumulative, sum, count
}

func (h *Histogram) write(b []byte, name, base string) []byte {
	cum, sum, n := h.Snapshot()
	for i, c := range cum {
		b = append(b, name...)
		b = append(b, "_bucket{"...)
		b = append(b, base...)
		b = append(b, `,le="`...)
		if i < len(h.upper) {
			b = appendFloat(b, h.upper[i])
		} else {
			b = append(b, "+Inf"...)
		}
		b = append(b, `"} `...)
		b = strconv.AppendUint(b, c, 10)
		b = append(b, '\n')
	}
	b = appendSample(b, name+"_sum", base, "", "", sum)
	b = append(b, name...)
	b = append(b, "_count{"...)
	b = append(b, base...)
	b = append(b, "} "...)
	b = strconv.AppendUint(b, n, 10)
	return append(b, '\n')
}

// ---- text format helpers ----

func appendSample(b []byte, name, base, label, value string, v float64) []byte {
	b = append(b, name...)
	b = append(b, '{')
	b = append(b, base...)
	if label != "" {
		b = append(b, ',')
		b = append(b, label...)
		b = append(b, `="`...)
		b = appendEscapedLabel(b, value)
		b = append(b, '"')
	}
	b = append(b, "} "...)
	b = appendFloat(b, v)
	return append(b, '\n')
}

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendEscapedLabel escapes a label value: backslash, double quote and
// line feed.
func appendEscapedLabel(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

func escapeLabel(s string) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	return string(appendEscapedLabel(nil, s))
}

// appendHelp escapes a HELP docstring: backslash and line feed.
func appendHelp(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

func validMetricName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func validLabelName(s string) bool {
	if s == "" || len(s) >= 2 && s[:2] == "__" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
