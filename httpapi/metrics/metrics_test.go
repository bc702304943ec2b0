package metrics

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protodelim"

	"cohort/internal/golden"
)

// scrape returns r's text exposition without the process and Go runtime
// families, whose values change from scrape to scrape.
func scrape(t testing.TB, r *Registry) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	checkExposition(t, buf.Bytes())
	return cohortOnly(buf.Bytes())
}

// isRuntime reports whether a family is the client's process or Go runtime
// collector's.
func isRuntime(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// cohortOnly drops the lines of the process and Go runtime families.
func cohortOnly(out []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.SplitAfter(string(out), "\n") {
		name := line
		if strings.HasPrefix(line, "# ") {
			if f := strings.SplitN(line, " ", 4); len(f) > 2 {
				name = f[2]
			}
		}
		if line != "" && !isRuntime(name) {
			b.WriteString(line)
		}
	}
	return b.Bytes()
}

func goldenRegistry() *Registry {
	r := New("Qwen/Qwen3.5-0.8B", func() Gauges {
		return Gauges{Running: 3, Waiting: 2, KVUsage: 0.375, Preemptions: 7, Ready: true, Pending: 5, PrefixQueries: 4096, PrefixHits: 3712}
	})
	ms := time.Millisecond
	r.RequestFinished(RequestMetrics{PromptTokens: 12, GenerationTokens: 4, TTFT: 30 * ms, E2E: 400 * ms, Queue: 5 * ms,
		InterToken: []time.Duration{20 * ms, 25 * ms, 100 * ms}, Finish: "stop"})
	r.RequestFinished(RequestMetrics{PromptTokens: 100, GenerationTokens: 16, TTFT: 2 * time.Second, E2E: 9 * time.Second,
		Queue: 1500 * ms, InterToken: []time.Duration{90 * time.Second}, Finish: "length"})
	r.RequestFinished(RequestMetrics{PromptTokens: 8, E2E: 50 * ms, Finish: "error"})
	r.Rejected("overloaded")
	r.Rejected("overloaded")
	r.Rejected("invalid")
	fails := r.Counter("cohort:rank_failures_total", "Rank failures seen by the supervisor.", "rank", "cause")
	fails.With("1", "exit").Add(2)
	fails.With("0", `nccl "timeout"`+"\n"+`at C:\x`).Inc()
	r.Gauge("cohort:tp_generation", "Generation of the tensor-parallel group.").Set(4)
	return r
}

func TestGolden(t *testing.T) {
	out := scrape(t, goldenRegistry())
	checkExposition(t, out)
	golden.Check(t, filepath.Join("testdata", "exposition.txt"), out)
}

func TestGoldenEmpty(t *testing.T) {
	out := scrape(t, New("m", nil))
	checkExposition(t, out)
	golden.Check(t, filepath.Join("testdata", "empty.txt"), out)
}

func TestDeterministic(t *testing.T) {
	a := scrape(t, goldenRegistry())
	for range 5 {
		if b := scrape(t, goldenRegistry()); !bytes.Equal(a, b) {
			t.Fatal("exposition is not deterministic")
		}
	}
}

func TestLabelEscaping(t *testing.T) {
	cases := map[string]string{
		`plain`:          `plain`,
		`a"b`:            `a\"b`,
		`back\slash`:     `back\\slash`,
		"new\nline":      `new\nline`,
		"\\\"\n":         `\\\"\n`,
		"tab\tand ünï":   "tab\tand ünï",
		"bad\xffutf8":    "bad\uFFFDutf8",
		`{curly},=comma`: `{curly},=comma`,
	}
	for in, want := range cases {
		r := New(in, nil)
		v := r.Counter("x_total", "x", "v")
		v.With(in).Inc()
		out := string(scrape(t, r))
		checkExposition(t, []byte(out))
		line := `x_total{model_name="` + want + `",v="` + want + `"} 1` + "\n"
		if !strings.Contains(out, line) {
			t.Errorf("%q: missing line %q in\n%s", in, line, out)
		}
		// Round trip through the test parser.
		fams := parseExposition(t, []byte(out))
		s := fams["x_total"].samples[0]
		wantVal := in
		if in == "bad\xffutf8" {
			wantVal = "bad\uFFFDutf8"
		}
		if s.labels["v"] != wantVal || s.labels["model_name"] != wantVal {
			t.Errorf("%q: parsed labels %q", in, s.labels)
		}
	}
}

func TestHelpEscaping(t *testing.T) {
	r := New("m", nil)
	r.Gauge("g", "line one\nback\\slash \"quoted\"")
	out := string(scrape(t, r))
	if !strings.Contains(out, `# HELP g line one\nback\\slash "quoted"`+"\n") {
		t.Errorf("bad HELP escaping:\n%s", out)
	}
	checkExposition(t, []byte(out))
}

func TestHistogramBuckets(t *testing.T) {
	r := New("m", nil)
	h := r.Histogram("h_seconds", "h", []float64{0.1, 0.5, 1})
	for _, v := range []float64{0, 0.1, 0.10000001, 0.5, 0.7, 1, 1.5, 1e9, -3, math.Inf(1), math.NaN()} {
		h.Observe(v)
	}
	cum, sum, n := h.Snapshot()
	// le=0.1: 0, 0.1, -3 ; le=0.5: +0.10000001, 0.5 ; le=1: +0.7, 1 ; +Inf: +1.5, 1e9, Inf. NaN is dropped.
	want := []uint64{3, 5, 7, 10}
	for i := range want {
		if cum[i] != want[i] {
			t.Fatalf("cumulative = %v, want %v", cum, want)
		}
	}
	if n != 10 {
		t.Errorf("count = %d, want 10", n)
	}
	if !math.IsInf(sum, 1) {
		t.Errorf("sum = %v, want +Inf", sum)
	}

	h2 := r.Histogram("d_seconds", "d", []float64{0.01, 0.025})
	h2.ObserveDurations([]time.Duration{10 * time.Millisecond, 11 * time.Millisecond, 25 * time.Millisecond, time.Second})
	cum, sum, n = h2.Snapshot()
	if cum[0] != 1 || cum[1] != 3 || cum[2] != 4 || n != 4 {
		t.Errorf("durations: cumulative %v count %d", cum, n)
	}
	if math.Abs(sum-1.046) > 1e-12 {
		t.Errorf("durations: sum %v", sum)
	}
	out := scrape(t, r)
	checkExposition(t, out)
	for _, line := range []string{
		`h_seconds_bucket{model_name="m",le="0.1"} 3`,
		`h_seconds_bucket{model_name="m",le="0.5"} 5`,
		`h_seconds_bucket{model_name="m",le="1"} 7`,
		`h_seconds_bucket{model_name="m",le="+Inf"} 10`,
		`h_seconds_sum{model_name="m"} +Inf`,
		`h_seconds_count{model_name="m"} 10`,
		`d_seconds_bucket{model_name="m",le="0.025"} 3`,
	} {
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("missing %q", line)
		}
	}
}

func TestRequestFinishedValues(t *testing.T) {
	r := goldenRegistry()
	fams := parseExposition(t, scrape(t, r))
	val := func(name string, labels ...string) float64 {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("no family %s", name)
		}
	next:
		for _, s := range f.samples {
			for i := 0; i+1 < len(labels); i += 2 {
				if s.labels[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return s.value
		}
		t.Fatalf("no sample %s%v", name, labels)
		return 0
	}
	checks := []struct {
		got, want float64
		what      string
	}{
		{val("vllm:prompt_tokens_total"), 120, "prompt tokens"},
		{val("vllm:generation_tokens_total"), 20, "generation tokens"},
		{val("vllm:request_success_total", "finished_reason", "stop"), 1, "stop"},
		{val("vllm:request_success_total", "finished_reason", "length"), 1, "length"},
		{val("vllm:request_success_total", "finished_reason", "error"), 1, "error"},
		{val("vllm:request_success_total", "finished_reason", "abort"), 0, "abort"},
		{val("cohort:requests_rejected_total", "reason", "overloaded"), 2, "overloaded"},
		{val("cohort:requests_rejected_total", "reason", "capacity"), 0, "capacity"},
		{val("vllm:num_requests_running"), 3, "running"},
		{val("vllm:num_requests_waiting"), 2, "waiting"},
		{val("vllm:kv_cache_usage_perc"), 0.375, "kv"},
		{val("vllm:gpu_cache_usage_perc"), 0.375, "gpu kv"},
		{val("vllm:num_preemptions_total"), 7, "preemptions"},
		{val("cohort:ready"), 1, "ready"},
		{val("cohort:pending_requests"), 5, "pending"},
		// TTFT is not observed for the request that failed before its first token.
		{val("vllm:time_to_first_token_seconds_count"), 2, "ttft count"},
		{val("vllm:e2e_request_latency_seconds_count"), 3, "e2e count"},
		{val("vllm:request_queue_time_seconds_count"), 2, "queue count"},
		{val("vllm:inter_token_latency_seconds_count"), 4, "itl count"},
		{val("vllm:time_per_output_token_seconds_count"), 4, "tpot alias count"},
		{val("vllm:inter_token_latency_seconds_bucket", "le", "0.025"), 2, "itl le 0.025"},
		{val("vllm:inter_token_latency_seconds_bucket", "le", "80"), 3, "itl le 80"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestRegisterIdempotentAndConflicts(t *testing.T) {
	r := New("m", nil)
	a := r.Counter("cohort:rank_failures_total", "h", "rank")
	if b := r.Counter("cohort:rank_failures_total", "h", "rank"); a != b {
		t.Error("re-registering a compatible counter returned a new one")
	}
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", what)
			}
		}()
		f()
	}
	mustPanic("labels differ", func() { r.Counter("cohort:rank_failures_total", "h", "other") })
	mustPanic("type differs", func() { r.Gauge("cohort:rank_failures_total", "h") })
	mustPanic("built-in", func() { r.Gauge("vllm:num_requests_running", "h") })
	mustPanic("bad name", func() { r.Gauge("1abc", "h") })
	mustPanic("bad label", func() { r.Counter("c_total", "h", "model_name") })
	mustPanic("le label", func() { r.Counter("c_total", "h", "le") })
	mustPanic("bad buckets", func() { r.Histogram("hh", "h", []float64{1, 1}) })
	mustPanic("value count", func() { a.With() })
}

func TestConcurrent(t *testing.T) {
	r := New("m", func() Gauges { return Gauges{Running: 1} })
	const workers, per = 8, 500
	itl := []time.Duration{time.Millisecond, 30 * time.Millisecond}
	reasons := []string{"stop", "length", "abort", "error", "brand_new"}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var scrapes sync.WaitGroup
	var outs [][]byte // checked on the test goroutine: t.Fatal must not run elsewhere
	scrapes.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var buf bytes.Buffer
			r.WriteTo(&buf)
			if len(outs) < 64 {
				outs = append(outs, buf.Bytes())
			}
		}
	})
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				r.RequestFinished(RequestMetrics{PromptTokens: 2, GenerationTokens: 3, TTFT: time.Millisecond,
					E2E: time.Second, Queue: time.Millisecond, InterToken: itl, Finish: reasons[(w+i)%len(reasons)]})
				r.Rejected("overloaded")
			}
		})
	}
	wg.Wait()
	close(stop)
	scrapes.Wait()
	for _, out := range outs {
		checkExposition(t, out)
	}
	fams := parseExposition(t, scrape(t, r))
	total := float64(workers * per)
	get := func(name string) float64 { return fams[name].samples[0].value }
	if got := get("vllm:prompt_tokens_total"); got != 2*total {
		t.Errorf("prompt tokens %v, want %v", got, 2*total)
	}
	if got := get("vllm:generation_tokens_total"); got != 3*total {
		t.Errorf("generation tokens %v", got)
	}
	if got := get("vllm:e2e_request_latency_seconds_count"); got != total {
		t.Errorf("e2e count %v", got)
	}
	if got := get("vllm:inter_token_latency_seconds_count"); got != 2*total {
		t.Errorf("itl count %v", got)
	}
	var succ, rej float64
	for _, s := range fams["vllm:request_success_total"].samples {
		succ += s.value
	}
	for _, s := range fams["cohort:requests_rejected_total"].samples {
		rej += s.value
	}
	if succ != total || rej != total {
		t.Errorf("success %v rejected %v, want %v", succ, rej, total)
	}
}

func TestRequestFinishedAllocs(t *testing.T) {
	r := New("m", nil)
	m := RequestMetrics{PromptTokens: 5, GenerationTokens: 9, TTFT: time.Millisecond, E2E: time.Second,
		Queue: time.Millisecond, InterToken: make([]time.Duration, 8), Finish: "stop"}
	if n := testing.AllocsPerRun(100, func() { r.RequestFinished(m) }); n != 0 {
		t.Errorf("RequestFinished allocates %v times per call", n)
	}
	multi := r.Counter("multi_total", "m", "a", "b")
	multi.With("x", "y")
	if n := testing.AllocsPerRun(100, func() { multi.With("x", "y").Inc() }); n != 0 {
		t.Errorf("CounterVec.With (2 labels) allocates %v times per call", n)
	}
}

func BenchmarkRequestFinished(b *testing.B) {
	r := New("m", nil)
	itl := make([]time.Duration, 16)
	for i := range itl {
		itl[i] = time.Duration(i+1) * 5 * time.Millisecond
	}
	m := RequestMetrics{PromptTokens: 100, GenerationTokens: 17, TTFT: 80 * time.Millisecond, E2E: time.Second,
		Queue: 3 * time.Millisecond, InterToken: itl, Finish: "stop"}
	b.ReportAllocs()
	for b.Loop() {
		r.RequestFinished(m)
	}
}

func BenchmarkRequestFinishedParallel(b *testing.B) {
	r := New("m", nil)
	m := RequestMetrics{PromptTokens: 100, GenerationTokens: 17, TTFT: 80 * time.Millisecond, E2E: time.Second,
		Queue: 3 * time.Millisecond, InterToken: make([]time.Duration, 16), Finish: "length"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.RequestFinished(m)
		}
	})
}

func BenchmarkWriteTo(b *testing.B) {
	r := goldenRegistry()
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		r.WriteTo(&buf)
	}
}

// ---- a minimal text-format (0.0.4) parser and validator ----

type sample struct {
	name   string
	labels map[string]string
	order  []string
	value  float64
}

type parsedFamily struct {
	name, typ, help string
	samples         []sample // including _bucket/_sum/_count for histograms
}

// parseExposition parses out line by line against the text-format grammar
// and returns the samples by sample name (a histogram's lines appear under
// name_bucket, name_sum and name_count too).
func parseExposition(t testing.TB, out []byte) map[string]*parsedFamily {
	t.Helper()
	fams := map[string]*parsedFamily{}
	text := string(out)
	if text != "" && !strings.HasSuffix(text, "\n") {
		t.Fatalf("exposition does not end in a newline")
	}
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		if line == "" {
			fail("empty line")
		}
		if strings.HasPrefix(line, "#") {
			f := strings.SplitN(line, " ", 4)
			if len(f) < 3 || f[0] != "#" {
				fail("bad comment")
			}
			switch f[1] {
			case "HELP":
				if !isMetricName(f[2]) {
					fail("bad metric name")
				}
				help := ""
				if len(f) == 4 {
					help = f[3]
				}
				if err := checkEscapes(help, false); err != nil {
					fail("%v", err)
				}
			case "TYPE":
				if len(f) != 4 || !isMetricName(f[2]) {
					fail("bad TYPE")
				}
				switch f[3] {
				case "counter", "gauge", "histogram", "summary", "untyped":
				default:
					fail("bad type %q", f[3])
				}
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			fail("%v", err)
		}
		pf := fams[s.name]
		if pf == nil {
			pf = &parsedFamily{name: s.name}
			fams[s.name] = pf
		}
		pf.samples = append(pf.samples, s)
	}
	return fams
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' {
		i++
	}
	s.name = line[:i]
	if !isMetricName(s.name) {
		return s, fmt.Errorf("bad metric name %q", s.name)
	}
	if i < len(line) && line[i] == '{' {
		i++
		for {
			if i < len(line) && line[i] == '}' {
				i++
				break
			}
			j := i
			for j < len(line) && line[j] != '=' {
				j++
			}
			name := line[i:j]
			if !isLabelName(name) {
				return s, fmt.Errorf("bad label name %q", name)
			}
			if _, dup := s.labels[name]; dup {
				return s, fmt.Errorf("duplicate label %q", name)
			}
			if j+1 >= len(line) || line[j+1] != '"' {
				return s, fmt.Errorf("label %s: missing opening quote", name)
			}
			var val strings.Builder
			k := j + 2
			for ; k < len(line) && line[k] != '"'; k++ {
				if line[k] == '\\' {
					k++
					if k >= len(line) {
						return s, fmt.Errorf("dangling escape")
					}
					switch line[k] {
					case '\\':
						val.WriteByte('\\')
					case '"':
						val.WriteByte('"')
					case 'n':
						val.WriteByte('\n')
					default:
						return s, fmt.Errorf("bad escape \\%c", line[k])
					}
					continue
				}
				val.WriteByte(line[k])
			}
			if k >= len(line) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[name] = val.String()
			s.order = append(s.order, name)
			i = k + 1
			if i < len(line) && line[i] == ',' {
				i++
			} else if i >= len(line) || line[i] != '}' {
				return s, fmt.Errorf("expected , or } after label %s", name)
			}
		}
	}
	if i >= len(line) || line[i] != ' ' {
		return s, fmt.Errorf("missing space before value")
	}
	rest := strings.Split(line[i+1:], " ")
	if len(rest) < 1 || len(rest) > 2 {
		return s, fmt.Errorf("bad value/timestamp %q", line[i+1:])
	}
	v, err := parseValue(rest[0])
	if err != nil {
		return s, err
	}
	s.value = v
	if len(rest) == 2 {
		if _, err := strconv.ParseInt(rest[1], 10, 64); err != nil {
			return s, fmt.Errorf("bad timestamp %q", rest[1])
		}
	}
	return s, nil
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	if strings.ContainsAny(s, "xXpP_") || strings.EqualFold(s, "inf") || strings.EqualFold(s, "infinity") {
		return 0, fmt.Errorf("bad value %q", s)
	}
	return strconv.ParseFloat(s, 64)
}

func checkEscapes(s string, quotes bool) error {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return fmt.Errorf("raw newline")
		}
		if s[i] == '\\' {
			i++
			if i >= len(s) || !(s[i] == '\\' || s[i] == 'n' || quotes && s[i] == '"') {
				return fmt.Errorf("bad escape in %q", s)
			}
		}
	}
	return nil
}

func isMetricName(s string) bool { return model.IsValidMetricName(model.LabelValue(s)) }
func isLabelName(s string) bool  { return model.LabelName(s).IsValid() }

// checkExposition parses out and checks the structure the format requires:
// one HELP and one TYPE per family before its samples, families contiguous
// and sorted, every series but the runtime ones with model_name, histograms with increasing le,
// non-decreasing cumulative counts, a final +Inf equal to _count, and _sum.
func checkExposition(t testing.TB, out []byte) {
	t.Helper()
	parseExposition(t, out) // grammar
	type famState struct {
		typ     string
		help    bool
		samples int
	}
	seen := map[string]*famState{}
	var order []string
	var cur string
	var lastLe float64
	var lastCum float64
	var infCount = map[string]float64{}
	var countVal = map[string]float64{}
	var seriesSeen = map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if strings.HasPrefix(line, "# ") {
			f := strings.SplitN(line, " ", 4)
			name := f[2]
			st := seen[name]
			if st == nil {
				st = &famState{}
				seen[name] = st
				order = append(order, name)
			}
			if st.samples > 0 {
				t.Fatalf("%s: %s after samples", name, f[1])
			}
			switch f[1] {
			case "HELP":
				if st.help {
					t.Fatalf("%s: two HELP lines", name)
				}
				st.help = true
			case "TYPE":
				if st.typ != "" {
					t.Fatalf("%s: two TYPE lines", name)
				}
				st.typ = f[3]
			}
			cur = name
			lastLe, lastCum = math.Inf(-1), 0
			continue
		}
		s, _ := parseSample(line)
		st := seen[cur]
		if st == nil || st.typ == "" {
			t.Fatalf("sample %q before its TYPE", line)
		}
		st.samples++
		if _, ok := s.labels[ModelLabel]; !ok && !isRuntime(cur) {
			t.Errorf("sample %q without %s", line, ModelLabel)
		}
		key := line[:strings.LastIndexByte(line, ' ')]
		if seriesSeen[key] {
			t.Errorf("duplicate series %q", key)
		}
		seriesSeen[key] = true
		switch st.typ {
		case "histogram":
			switch s.name {
			case cur + "_bucket":
				le, err := parseValue(s.labels["le"])
				if err != nil {
					t.Fatalf("%q: bad le", line)
				}
				if le <= lastLe {
					t.Errorf("%q: le not increasing", line)
				}
				if s.value < lastCum {
					t.Errorf("%q: cumulative count decreases", line)
				}
				lastLe, lastCum = le, s.value
				if math.IsInf(le, 1) {
					infCount[cur] = s.value
				}
			case cur + "_sum":
			case cur + "_count":
				countVal[cur] = s.value
			default:
				t.Errorf("%q: not a sample of histogram %s", line, cur)
			}
		case "summary":
			if s.name != cur && s.name != cur+"_sum" && s.name != cur+"_count" {
				t.Errorf("%q: not a sample of summary %s", line, cur)
			}
		case "counter":
			if s.name != cur || s.value < 0 {
				t.Errorf("%q: bad counter sample of %s", line, cur)
			}
		default:
			if s.name != cur {
				t.Errorf("%q: sample outside its family %s", line, cur)
			}
		}
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("families not sorted: %s before %s", order[i-1], order[i])
		}
	}
	for name, st := range seen {
		if !st.help || st.typ == "" {
			t.Errorf("%s: missing HELP or TYPE", name)
		}
		if st.typ == "histogram" {
			c, ok := countVal[name]
			inf, ok2 := infCount[name]
			if !ok || !ok2 || c != inf {
				t.Errorf("%s: +Inf bucket %v != _count %v", name, inf, c)
			}
		}
	}
}

// TestNegotiate: the Accept headers scrapers send pick the format, and each
// format's output is what its parser expects.
func TestNegotiate(t *testing.T) {
	const (
		text = "text/plain; version=0.0.4; charset=utf-8"
		om1  = "application/openmetrics-text; version=1.0.0; charset=utf-8"
		om0  = "application/openmetrics-text; version=0.0.1; charset=utf-8"
		pb   = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
	)
	tests := []struct {
		name, accept, want string
	}{
		{"none", "", text},
		{"any", "*/*", text},
		{"browser", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", text},
		{"text", "text/plain", text},
		{"text 0.0.4", "text/plain;version=0.0.4", text},
		{"openmetrics", "application/openmetrics-text", om0},
		{"openmetrics 1.0.0", "application/openmetrics-text;version=1.0.0", om1},
		{"openmetrics 0.0.1", "application/openmetrics-text; version=0.0.1", om0},
		// What Prometheus 2.x sends by default: OpenMetrics first.
		{"prometheus", "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", om1},
		{"protobuf", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3", pb},
	}
	r := goldenRegistry()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Negotiate(tt.accept)
			if string(f) != tt.want {
				t.Fatalf("Negotiate(%q) = %q, want %q", tt.accept, f, tt.want)
			}
			var buf bytes.Buffer
			if err := r.Write(&buf, f); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			switch tt.want {
			case text:
				checkExposition(t, buf.Bytes())
				if strings.Contains(out, "# EOF") {
					t.Error("text format with # EOF")
				}
			case om0, om1:
				if !strings.HasSuffix(out, "\n# EOF\n") {
					t.Errorf("OpenMetrics without the final # EOF:\n%s", out[max(0, len(out)-200):])
				}
				// Counters are declared without _total, their samples keep it.
				for _, want := range []string{
					"# TYPE vllm:request_success counter\n",
					`vllm:request_success_total{finished_reason="stop",model_name="Qwen/Qwen3.5-0.8B"} 1.0` + "\n",
					"# TYPE vllm:time_to_first_token_seconds histogram\n",
					`vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen3.5-0.8B",le="+Inf"} 2` + "\n",
					"# TYPE go_goroutines gauge\n",
				} {
					if !strings.Contains(out, want) {
						t.Errorf("OpenMetrics lacks %q", want)
					}
				}
			case pb:
				var mf dto.MetricFamily
				if err := protodelim.UnmarshalFrom(&buf, &mf); err != nil {
					t.Fatalf("first protobuf family: %v", err)
				}
				if mf.GetName() == "" || len(mf.GetMetric()) == 0 {
					t.Errorf("empty first family %v", &mf)
				}
			}
		})
	}
}

// TestRuntimeCollectors: the client's process and Go runtime collectors are
// exported, without model_name.
func TestRuntimeCollectors(t *testing.T) {
	var buf bytes.Buffer
	if _, err := New("m", nil).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	fams := parseExposition(t, buf.Bytes())
	want := []string{"go_goroutines", "go_memstats_alloc_bytes", "go_gc_duration_seconds_count", "go_info"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds")
	}
	for _, name := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("no %s", name)
			continue
		}
		if _, ok := f.samples[0].labels[ModelLabel]; ok {
			t.Errorf("%s has %s", name, ModelLabel)
		}
	}
	if g := fams["go_goroutines"]; g != nil && g.samples[0].value < 1 {
		t.Errorf("go_goroutines = %v", g.samples[0].value)
	}
}

// TestGaugesOncePerScrape: the engine callback runs once per scrape, in
// every format.
func TestGaugesOncePerScrape(t *testing.T) {
	var calls int
	r := New("m", func() Gauges { calls++; return Gauges{Running: calls} })
	for i, f := range []expfmt.Format{expfmt.FmtText, expfmt.FmtOpenMetrics_1_0_0, expfmt.FmtProtoDelim} {
		if err := r.Write(io.Discard, f); err != nil {
			t.Fatal(err)
		}
		if calls != i+1 {
			t.Fatalf("after %d scrapes the callback ran %d times", i+1, calls)
		}
	}
}

// TestAlias: the deprecated vllm:time_per_output_token_seconds reads the
// same observations as vllm:inter_token_latency_seconds.
func TestAlias(t *testing.T) {
	fams := parseExposition(t, scrape(t, goldenRegistry()))
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		a, b := fams["vllm:inter_token_latency_seconds"+suffix], fams["vllm:time_per_output_token_seconds"+suffix]
		if a == nil || b == nil || len(a.samples) != len(b.samples) {
			t.Fatalf("%s: families %v and %v", suffix, a, b)
		}
		for i := range a.samples {
			if a.samples[i].value != b.samples[i].value || a.samples[i].labels["le"] != b.samples[i].labels["le"] {
				t.Errorf("%s sample %d: %v vs %v", suffix, i, a.samples[i], b.samples[i])
			}
		}
	}
}
