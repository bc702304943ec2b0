package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"cohort/actors"
)

// The benchmarks serve the same Server core two ways, fasthttp (the
// product) and net/http (a thin adapter below), on a fake engine that
// answers instantly, and report both and their ratio. Each runs a fixed
// workload per iteration; run them with -benchtime=1x.

// netHTTPHandler serves s's core with net/http.
func netHTTPHandler(s *Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.maxBody)))
		var rep reply
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			rep = errorReply(tooLarge(s.maxBody))
		case err != nil:
			rep = errorReply(badRequest("", "reading the body: %v", err))
		default:
			rep = s.serve(&call{method: r.Method, path: r.URL.Path, body: body, start: start,
				traceparent: r.Header.Get("traceparent"), tracestate: r.Header.Get("tracestate")})
		}
		h := w.Header()
		h.Set("Content-Type", rep.contentType)
		if rep.retryAfter != "" {
			h.Set("Retry-After", rep.retryAfter)
		}
		if rep.allow != "" {
			h.Set("Allow", rep.allow)
		}
		if rep.stream == nil {
			w.WriteHeader(rep.status)
			w.Write(rep.body)
			return
		}
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(rep.status)
		rep.stream(bufio.NewWriter(flushWriter{w, http.NewResponseController(w)}))
	})
}

// flushWriter pushes every write to the client (bufio calls it on Flush).
type flushWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	return n, f.rc.Flush()
}

// benchServers starts the fasthttp and the net/http server over one fake
// engine and returns their addresses.
func benchServers(b *testing.B, f *fakeEngine) (fastAddr, netAddr string) {
	b.Helper()
	s, err := newServer(f, Options{ModelName: "fake", Tokenizer: synthTokenizer(b), ChatTemplate: chatML})
	if err != nil {
		b.Fatal(err)
	}
	fastAddr = serveOn(b, s)[len("http://"):]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: netHTTPHandler(s)}
	go hs.Serve(ln)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	})
	return fastAddr, ln.Addr().String()
}

// BenchmarkCompletionOneToken: requests/s and p99 latency of 1-token
// completions from 32 keep-alive clients.
func BenchmarkCompletionOneToken(b *testing.B) {
	const clients, requests = 32, 24000
	f := newFakeEngine()
	fast, nh := benchServers(b, f)
	body := []byte(`{"model":"fake","prompt":"Hello there","max_tokens":1}`)
	run := func(addr string) (rps float64, p99 time.Duration) {
		hc := &fasthttp.HostClient{Addr: addr, MaxConns: clients}
		lat := make([][]time.Duration, clients)
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		start := time.Now()
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(res)
				for i := c; i < requests; i += clients {
					req.SetRequestURI("http://" + addr + "/v1/completions")
					req.Header.SetMethod(http.MethodPost)
					req.Header.SetContentType("application/json")
					req.SetBody(body)
					t0 := time.Now()
					err := hc.DoTimeout(req, res, 30*time.Second)
					lat[c] = append(lat[c], time.Since(t0))
					if err == nil && (res.StatusCode() != 200 || !bytes.Contains(res.Body(), []byte(`"finish_reason":"length"`))) {
						err = fmt.Errorf("status %d: %s", res.StatusCode(), res.Body())
					}
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
				}
			}(c)
		}
		wg.Wait()
		elapsed := time.Since(start)
		if failed != nil {
			b.Fatal(failed)
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		return float64(len(all)) / elapsed.Seconds(), all[len(all)*99/100]
	}
	for i := 0; i < b.N; i++ {
		fastRPS, fastP99 := run(fast)
		netRPS, netP99 := run(nh)
		b.ReportMetric(fastRPS, "fasthttp_req/s")
		b.ReportMetric(netRPS, "nethttp_req/s")
		b.ReportMetric(fastRPS/netRPS, "req/s_ratio")
		b.ReportMetric(float64(fastP99.Microseconds()), "fasthttp_p99_µs")
		b.ReportMetric(float64(netP99.Microseconds()), "nethttp_p99_µs")
	}
}

// BenchmarkSSEStream: SSE events/s of 8 concurrent 50000-token chat streams.
func BenchmarkSSEStream(b *testing.B) {
	const streams, tokens = 8, 50000
	f := newFakeEngine()
	f.info.MaxModelLen = 1 << 20
	f.script = func(r actors.Request) []actors.Event {
		evs := make([]actors.Event, tokens)
		for i := range evs {
			evs[i] = actors.Event{Token: 97, Text: " token", HasToken: true}
		}
		evs[tokens-1].Finish = "length"
		return evs
	}
	fast, nh := benchServers(b, f)
	body := fmt.Sprintf(`{"model":"fake","messages":[{"role":"user","content":"go"}],"max_tokens":%d,"stream":true}`, tokens)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}}
	run := func(addr string) float64 {
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		start := time.Now()
		for c := 0; c < streams; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					errs <- err
					return
				}
				defer res.Body.Close()
				br := bufio.NewReaderSize(res.Body, 64<<10)
				events := 0
				for {
					line, err := br.ReadSlice('\n')
					if err == io.EOF {
						break
					}
					if err != nil {
						errs <- err
						return
					}
					if bytes.HasPrefix(line, []byte("data: ")) {
						events++
					}
				}
				if want := tokens + 3; events != want { // role, tokens, finish, [DONE]
					errs <- fmt.Errorf("%d events, want %d", events, want)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return float64(streams*(tokens+3)) / elapsed.Seconds()
	}
	for i := 0; i < b.N; i++ {
		fastEPS := run(fast)
		netEPS := run(nh)
		b.ReportMetric(fastEPS, "fasthttp_events/s")
		b.ReportMetric(netEPS, "nethttp_events/s")
		b.ReportMetric(fastEPS/netEPS, "events/s_ratio")
	}
}
