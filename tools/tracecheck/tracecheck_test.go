package tracecheck

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServeStreamedChatTP2 runs a collector on loopback, serves one
// streamed chat completion with cohort serve --tp 2 exporting OTLP/HTTP to
// it, and checks the stored trace: the HTTP server span (joined to the
// client's traceparent) with its GenAI attributes and queue, prefill and
// decode children; the engine's step spans, each with one rank.step child
// per rank in its trace; and the steps' sampled rows matching the usage.
func TestServeStreamedChatTP2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := cohortBinary(t, ctx)

	col, err := Start(ctx, freeLoopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := col.Shutdown(); err != nil {
			t.Errorf("collector: %v", err)
		}
	}()

	srv := startServe(t, ctx, bin, col.Endpoint)
	traceID, clientSpan := randomHex(16), randomHex(8)
	usage := streamChat(t, ctx, srv.url, "00-"+traceID+"-"+clientSpan+"-01")

	// The server span is exported while serving (the batch delay is 50 ms).
	const serverName = "chat tiny"
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	waitFor(t, wctx, "the server span", func() bool {
		return len(find(col.Store.Spans(), func(s Span) bool { return s.TraceID == traceID && s.Name == serverName })) == 1
	})
	// Stopping cohort flushes every span it has: after it exits, the store
	// holds them all (the receiver answers an export once it is stored).
	srv.stop(t)
	spans := col.Store.Spans()

	server := find(spans, func(s Span) bool { return s.TraceID == traceID && s.Name == serverName })[0]
	if server.ParentSpanID != clientSpan || server.Kind != "Server" {
		t.Errorf("server span: parent %q kind %s, want the client's span %s and Server", server.ParentSpanID, server.Kind, clientSpan)
	}
	if server.Service != "cohort-tracecheck" {
		t.Errorf("service.name %q", server.Service)
	}
	for _, c := range []struct {
		key  string
		want any
	}{
		{"gen_ai.operation.name", "chat"},
		{"gen_ai.provider.name", "cohort"},
		{"gen_ai.request.model", "tiny"},
		{"gen_ai.response.model", "tiny"},
		{"gen_ai.request.max_tokens", int64(maxTokens)},
		{"gen_ai.request.stream", true},
		{"gen_ai.usage.input_tokens", int64(usage.PromptTokens)},
		{"gen_ai.usage.output_tokens", int64(usage.CompletionTokens)},
		{"gen_ai.response.finish_reasons", []any{"length"}},
	} {
		if got, ok := server.Attrs[c.key]; !ok || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("server span %s = %v (set: %v), want %v", c.key, got, ok, c.want)
		}
	}
	for _, key := range []string{"gen_ai.server.time_to_first_token", "cohort.latency.e2e"} {
		if v, ok := server.Attrs[key].(float64); !ok || v <= 0 {
			t.Errorf("server span %s = %v, want a positive duration", key, server.Attrs[key])
		}
	}
	for _, name := range []string{"queue", "prefill", "decode"} {
		if n := len(find(spans, func(s Span) bool { return s.Name == name && s.ParentSpanID == server.SpanID })); n != 1 {
			t.Errorf("%d %s spans under the server span, want 1", n, name)
		}
	}

	steps := find(spans, func(s Span) bool { return s.Name == "engine.step" })
	// Every engine step of this one request is a child of its server span
	// (the HTTP edge hands the span to the engine; the scheduler parents a
	// step's span on its first traced request).
	for _, s := range steps {
		if s.TraceID != traceID || s.ParentSpanID != server.SpanID {
			t.Errorf("engine step %v: trace %s parent %s, want the server span's child", s.Attrs["cohort.step"], s.TraceID, s.ParentSpanID)
		}
	}
	sampled := int64(0)
	for _, s := range steps {
		if v, _ := s.Attrs["cohort.sampled"].(int64); v > 0 {
			sampled += v
		}
		var ranks []int64
		for _, r := range find(spans, func(r Span) bool { return r.Name == "rank.step" && r.ParentSpanID == s.SpanID }) {
			if r.TraceID != s.TraceID || r.Attrs["cohort.step"] != s.Attrs["cohort.step"] {
				t.Errorf("rank span %v: trace %s step %v, want the step's trace %s and step %v",
					r.Attrs["cohort.rank"], r.TraceID, r.Attrs["cohort.step"], s.TraceID, s.Attrs["cohort.step"])
			}
			rank, _ := r.Attrs["cohort.rank"].(int64)
			ranks = append(ranks, rank)
		}
		slices.Sort(ranks)
		if !slices.Equal(ranks, []int64{0, 1}) {
			t.Errorf("engine step %v has rank spans of ranks %v, want [0 1]", s.Attrs["cohort.step"], ranks)
		}
	}
	// One request: every sampled row is one of its tokens.
	if sampled != int64(usage.CompletionTokens) || len(steps) == 0 {
		t.Errorf("%d engine steps sampling %d rows, want %d", len(steps), sampled, usage.CompletionTokens)
	}
	if t.Failed() {
		for _, s := range spans {
			t.Logf("span %s %s/%s parent %s %v", s.Name, s.TraceID, s.SpanID, s.ParentSpanID, s.Attrs)
		}
	}
}

// maxTokens is the chat request's max_tokens.
const maxTokens = 4

// cohortBinary is $COHORT_BIN, or cohort built from this repository.
func cohortBinary(t *testing.T, ctx context.Context) string {
	if bin := os.Getenv("COHORT_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "cohort")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/cohort")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/cohort: %v\n%s", err, out)
	}
	return bin
}

// freeLoopbackAddr is a loopback address that was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// server is a running cohort serve.
type server struct {
	url    string
	cmd    *exec.Cmd
	done   chan error
	stderr *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var servingLine = regexp.MustCompile(`serving \S+ on (http://\S+) `)

// startServe starts cohort serve --tp 2 on a free loopback port, exporting
// traces to the OTLP/HTTP endpoint, and waits for its "serving" line.
func startServe(t *testing.T, ctx context.Context, bin, endpoint string) *server {
	cmd := exec.CommandContext(ctx, bin, "serve", "--tp", "2", "--host", "127.0.0.1", "--port", "0",
		"--served-model-name", "tiny", "--kv-budget-mib", "64")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=cohort-tracecheck", "OTEL_TRACES_SAMPLER=always_on", "OTEL_BSP_SCHEDULE_DELAY=50")
	s := &server{cmd: cmd, done: make(chan error, 1), stderr: &lockedBuffer{}}
	cmd.Stderr = s.stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-s.done
		}
	})
	select {
	case s.url = <-urls:
		return s
	case err := <-s.done:
		t.Fatalf("cohort serve exited: %v\n%s", err, s.stderr)
	case <-ctx.Done():
		t.Fatalf("cohort serve did not start: %v\n%s", ctx.Err(), s.stderr)
	}
	return nil
}

// stop interrupts cohort serve (a graceful shutdown, which flushes its
// spans) and waits for it, killing it after 30 s.
func (s *server) stop(t *testing.T) {
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("cohort serve: %v\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Fatalf("cohort serve did not stop on SIGINT\n%s", s.stderr)
	}
	if strings.Contains(s.stderr.String(), "flushing traces") {
		t.Errorf("cohort could not flush its traces:\n%s", s.stderr)
	}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// streamChat sends one streamed chat completion with the traceparent
// header, reads it to [DONE] and returns its usage.
func streamChat(t *testing.T, ctx context.Context, base, traceparent string) usage {
	// ignore_eos: the random tiny model may draw an end of turn early, and
	// the check wants every one of the maxTokens tokens.
	body := fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"stream":true,`+
		`"max_tokens":%d,"ignore_eos":true,"stream_options":{"include_usage":true}}`, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("chat: %s: %s", resp.Status, b)
	}
	var u *usage
	var finish []string
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			if c.FinishReason != nil {
				finish = append(finish, *c.FinishReason)
			}
		}
		if chunk.Usage != nil {
			u = chunk.Usage
		}
	}
	if !done || u == nil || !slices.Equal(finish, []string{"length"}) || u.CompletionTokens != maxTokens {
		t.Fatalf("stream: done %v usage %+v finish %v (read error %v)", done, u, finish, sc.Err())
	}
	return *u
}

// waitFor polls cond until it holds, failing the test at ctx's deadline.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func find(spans []Span, keep func(Span) bool) []Span {
	var out []Span
	for _, s := range spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}
