package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/actors/planner"
)

// stepEngine is a fake engine whose steps the test runs. A submitted
// request waits in its queue; step first drops the requests cancelled since
// the last step (as the engine root drops an aborted request before it
// plans the next step), then gives every remaining request one token.
type stepEngine struct {
	info      actors.Info
	submitted chan *stepStream // every new request
	cancelled chan *stepStream // every cancellation, when it happens

	mu    sync.Mutex
	queue []*stepStream
}

func newStepEngine() *stepEngine {
	return &stepEngine{info: newFakeEngine().info, submitted: make(chan *stepStream, 16),
		cancelled: make(chan *stepStream, 16)}
}

// stepStream is one request of a stepEngine.
type stepStream struct {
	eng       *stepEngine
	maxTokens int
	events    chan actors.Event // buffered for every event the request can get

	mu         sync.Mutex
	generated  int
	isCanceled bool
}

func (e *stepEngine) check(r actors.Request) (actors.Checked, error) {
	return actors.NewChecker(e.info, nil, nil).Check(r)
}

func (e *stepEngine) submit(c actors.Checked) (eventStream, error) {
	r := c.Request()
	s := &stepStream{eng: e, maxTokens: r.MaxTokens, events: make(chan actors.Event, r.MaxTokens+1)}
	e.mu.Lock()
	e.queue = append(e.queue, s)
	e.mu.Unlock()
	e.submitted <- s
	return s, nil
}

func (e *stepEngine) Info() actors.Info                            { return e.info }
func (e *stepEngine) Stats(context.Context) (planner.Stats, error) { return planner.Stats{}, nil }
func (e *stepEngine) Ready() (bool, string)                        { return true, "" }
func (e *stepEngine) Pending() int                                 { return e.queued() }
func (e *stepEngine) ResetPrefixCache(context.Context) error       { return nil }

// queued is how many requests the engine holds.
func (e *stepEngine) queued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue)
}

// step runs one engine step and returns how many tokens it produced.
func (e *stepEngine) step() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept, tokens := e.queue[:0], 0
	for _, s := range e.queue {
		s.mu.Lock()
		if !s.isCanceled {
			s.generated++
			tokens++
			ev := actors.Event{Token: 97, Text: "a", HasToken: true}
			if s.generated == s.maxTokens {
				ev.Finish = "length"
				ev.Usage = actors.Usage{PromptTokens: 1, CompletionTokens: s.generated}
			} else {
				kept = append(kept, s)
			}
			s.events <- ev
		}
		s.mu.Unlock()
	}
	e.queue = kept
	return tokens
}

func (s *stepStream) Recv(ctx context.Context) (actors.Event, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	case <-ctx.Done():
		return actors.Event{}, ctx.Err()
	}
}

// Cancel marks the request cancelled (the next step drops it) and ends its
// stream, as a request actor does.
func (s *stepStream) Cancel() {
	s.mu.Lock()
	first := !s.isCanceled && s.generated < s.maxTokens
	if first {
		s.isCanceled = true
		s.events <- actors.Event{Finish: "cancelled"}
	}
	s.mu.Unlock()
	if first {
		s.eng.cancelled <- s
	}
}

// rawRequest is an HTTP/1.1 request with a JSON body, as bytes.
func rawRequest(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, len(body), body)
}

// TestAbandonedNonStreamedRequests closes the client's connection while a
// non-streamed request is queued or generating: every choice of it must be
// cancelled with no engine step run meanwhile, and the next step must leave
// the queue empty. A client that stays (or pipelines its next request) gets
// its answers and no cancellation.
func TestAbandonedNonStreamedRequests(t *testing.T) {
	const completion = `{"model":"fake","prompt":"hello","max_tokens":%d,"n":%d}`
	const chat = `{"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"n":%d}`
	cases := []struct {
		name      string
		path      string
		body      string
		choices   int
		stepsIn   int  // steps run before the client leaves
		stays     bool // the client waits for its answer instead
		pipelined bool // the client sends GET /health right behind the request
	}{
		{name: "completion queued", path: "/v1/completions", body: fmt.Sprintf(completion, 900, 1), choices: 1},
		{name: "completion generating", path: "/v1/completions", body: fmt.Sprintf(completion, 900, 1), choices: 1, stepsIn: 3},
		{name: "chat generating", path: "/v1/chat/completions", body: fmt.Sprintf(chat, 900, 1), choices: 1, stepsIn: 2},
		{name: "completion n=3 generating", path: "/v1/completions", body: fmt.Sprintf(completion, 200, 3), choices: 3, stepsIn: 1},
		{name: "client stays", path: "/v1/completions", body: fmt.Sprintf(completion, 4, 1), choices: 1, stays: true},
		{name: "client pipelines", path: "/v1/chat/completions", body: fmt.Sprintf(chat, 4, 2), choices: 2, stays: true, pipelined: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStepEngine()
			s, err := newServer(e, Options{ModelName: "fake", Tokenizer: synthTokenizer(t), ChatTemplate: chatML, EOS: "<|im_end|>"})
			if err != nil {
				t.Fatal(err)
			}
			addr := strings.TrimPrefix(serveOn(t, s), "http://")
			t.Cleanup(s.cancel) // before Shutdown: a request left hanging by a failure ends
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			deadline := time.Now().Add(10 * time.Second)
			if err := conn.SetDeadline(deadline); err != nil {
				t.Fatal(err)
			}
			req := rawRequest(tc.path, tc.body)
			if tc.pipelined {
				req += "GET /health HTTP/1.1\r\nHost: test\r\n\r\n"
			}
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			timeout := time.NewTimer(time.Until(deadline))
			defer timeout.Stop()
			streams := make([]*stepStream, tc.choices)
			for i := range streams {
				select {
				case streams[i] = <-e.submitted:
				case <-timeout.C:
					t.Fatalf("choice %d was not submitted", i)
				}
			}
			for range tc.stepsIn {
				e.step()
			}

			if tc.stays {
				for e.queued() > 0 {
					e.step()
				}
				br := bufio.NewReader(conn)
				paths := []string{tc.path}
				if tc.pipelined {
					paths = append(paths, "/health")
				}
				for _, p := range paths {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("%s: status %d: %s", p, resp.StatusCode, b)
					}
				}
				// The connection is still good for another request: the
				// watch gave it back to fasthttp intact.
				if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("kept-alive request: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("kept-alive request: status %d", resp.StatusCode)
				}
				select {
				case c := <-e.cancelled:
					t.Fatalf("a request whose client stayed was cancelled after %d tokens", c.generated)
				default:
				}
				return
			}

			conn.Close()
			// No step runs until every choice is cancelled: the disconnect
			// alone must reach the engine.
			for i := range tc.choices {
				select {
				case <-e.cancelled:
				case <-timeout.C:
					t.Fatalf("%d of %d choices cancelled after the client left (queue %d)", i, tc.choices, e.queued())
				}
			}
			if n := e.step(); n != 0 {
				t.Errorf("the step after the disconnect produced %d tokens", n)
			}
			if n := e.queued(); n != 0 {
				t.Errorf("%d requests still queued one step after the disconnect", n)
			}
			for i, st := range streams {
				if st.generated != tc.stepsIn {
					t.Errorf("choice %d: %d tokens generated, want %d (the steps before the disconnect)", i, st.generated, tc.stepsIn)
				}
			}
		})
	}
}
