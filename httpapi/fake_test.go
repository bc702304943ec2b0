package httpapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cohort/actors"
	"cohort/actors/planner"
	"cohort/internal/testmodels/modelgen"
	"cohort/model/sample"
	"cohort/model/tokenizer"
)

// chatML is the built-in tiny model's chat template (see modelgen).
const chatML = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}" +
	"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"

var (
	synthOnce sync.Once
	synthTok  *tokenizer.Tokenizer
)

// synthTokenizer is the tiny model's tokenizer, without writing weights.
func synthTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	synthOnce.Do(func() {
		data, err := tokenizer.Synthetic(modelgen.Presets["tiny"].Merges(), modelgen.Specials)
		if err != nil {
			panic(err)
		}
		if synthTok, err = tokenizer.Parse(data); err != nil {
			panic(err)
		}
	})
	return synthTok
}

// fakeEngine is a scripted engine: every request gets the events script
// returns (by default MaxTokens tokens "a", then "length").
type fakeEngine struct {
	info      actors.Info
	submitErr error                               // returned by every Submit when set
	script    func(actors.Request) []actors.Event // events of a request
	endless   bool                                // after the script: one token per Recv, forever
	hang      bool                                // after the script: block until cancelled

	mu       sync.Mutex
	notReady string
	reqs     []actors.Request
	streams  []*fakeStream
	pending  atomic.Int64
	resets   atomic.Int64     // ResetPrefixCache calls
	submits  chan *fakeStream // if set, each new stream is sent here
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{info: actors.Info{TP: 1, MaxModelLen: 1024, Slots: 8, KVPages: 100, PageSize: 16, VocabSize: 512,
		Scratch: 6 << 20, MaxStepTokens: 2111}}
}

// check is the engine's: the fake validates as a real engine of its shape.
func (f *fakeEngine) check(r actors.Request) (actors.Checked, error) {
	return actors.NewChecker(f.info, nil, nil).Check(r)
}

func (f *fakeEngine) submit(c actors.Checked) (eventStream, error) {
	r := c.Request()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	if f.notReady != "" {
		return nil, fmt.Errorf("%w: %s", actors.ErrNotReady, f.notReady)
	}
	evs := defaultScript(r)
	if f.script != nil {
		evs = f.script(r)
	}
	s := &fakeStream{script: evs, endless: f.endless, hang: f.hang, cancelled: make(chan struct{}), eng: f,
		prompt: len(r.Prompt)}
	f.pending.Add(1)
	f.reqs = append(f.reqs, r)
	f.streams = append(f.streams, s)
	if f.submits != nil {
		f.submits <- s
	}
	return s, nil
}

func (f *fakeEngine) Info() actors.Info { return f.info }
func (f *fakeEngine) Stats(context.Context) (planner.Stats, error) {
	return planner.Stats{Running: 3, Waiting: 2, UsedPages: 25, Preemptions: 7, PrefixQueries: 900, PrefixHits: 810}, nil
}
func (f *fakeEngine) Ready() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notReady == "", f.notReady
}
func (f *fakeEngine) Pending() int { return int(f.pending.Load()) }
func (f *fakeEngine) ResetPrefixCache(context.Context) error {
	f.resets.Add(1)
	return nil
}

// set changes the engine's behaviour while it serves.
func (f *fakeEngine) set(change func(*fakeEngine)) {
	f.mu.Lock()
	change(f)
	f.mu.Unlock()
}

func (f *fakeEngine) setNotReady(reason string) {
	f.mu.Lock()
	f.notReady = reason
	f.mu.Unlock()
}

func (f *fakeEngine) requests() []actors.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]actors.Request(nil), f.reqs...)
}

// defaultScript emits MaxTokens tokens "a" (id 97), the last with "length".
func defaultScript(r actors.Request) []actors.Event {
	evs := make([]actors.Event, r.MaxTokens)
	for i := range evs {
		evs[i] = actors.Event{Token: 97, Text: "a", HasToken: true, Logprob: -0.5,
			Top: topN(r.TopLogprobs)}
	}
	evs[len(evs)-1].Finish = "length"
	evs[len(evs)-1].Usage = actors.Usage{PromptTokens: len(r.Prompt), CompletionTokens: r.MaxTokens}
	return evs
}

func topN(n int) []sample.TokenLogprob {
	out := make([]sample.TokenLogprob, n)
	for i := range out {
		out[i] = sample.TokenLogprob{ID: int32(97 + i), Logprob: -0.5 - float64(i)}
	}
	return out
}

// fakeStream replays a script. Recv is called from one goroutine at a
// time; Cancel from any.
type fakeStream struct {
	eng             *fakeEngine
	script          []actors.Event
	endless, hang   bool
	prompt          int
	i, emitted      int
	finished        bool
	cancelOnce      sync.Once
	cancelled       chan struct{}
	cancelCalled    atomic.Bool
	pendingReleased atomic.Bool
}

func (s *fakeStream) Cancel() {
	s.cancelCalled.Store(true)
	s.cancelOnce.Do(func() { close(s.cancelled) })
}

func (s *fakeStream) done(ev actors.Event) (actors.Event, error) {
	s.finished = true
	if s.pendingReleased.CompareAndSwap(false, true) {
		s.eng.pending.Add(-1)
	}
	return ev, nil
}

func (s *fakeStream) Recv(ctx context.Context) (actors.Event, error) {
	if s.finished {
		return actors.Event{}, io.EOF
	}
	select {
	case <-s.cancelled:
		return s.done(actors.Event{Finish: "cancelled", Time: time.Now(),
			Usage: actors.Usage{PromptTokens: s.prompt, CompletionTokens: s.emitted}})
	default:
	}
	if s.i < len(s.script) {
		ev := s.script[s.i]
		s.i++
		if ev.HasToken {
			s.emitted++
		}
		if ev.Finish != "" {
			return s.done(ev)
		}
		return ev, nil
	}
	switch {
	case s.endless:
		s.emitted++
		return actors.Event{Token: 97, Text: "a", HasToken: true}, nil
	case s.hang:
		select {
		case <-s.cancelled:
			return s.done(actors.Event{Finish: "cancelled", Time: time.Now()})
		case <-ctx.Done():
			return actors.Event{}, ctx.Err()
		}
	}
	return s.done(actors.Event{Finish: "length"})
}

// startFake serves a fake engine on a loopback listener and returns the
// base URL.
func startFake(t testing.TB, f *fakeEngine, mutate func(*Options)) (string, *Server) {
	t.Helper()
	o := Options{ModelName: "fake", Tokenizer: synthTokenizer(t), ChatTemplate: chatML, EOS: "<|im_end|>"}
	if mutate != nil {
		mutate(&o)
	}
	s, err := newServer(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, s), s
}

// serveOn serves s on a loopback listener until the test ends.
func serveOn(t testing.TB, s *Server) string {
	t.Helper()
	ln, done := serveLoopback(t, s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// serveLoopback serves s on a new loopback listener; the channel gets
// Serve's result. The caller shuts s down.
func serveLoopback(t testing.TB, s *Server) (net.Listener, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	return ln, served
}

// testClient is an HTTP client that does not retry or pool forever.
func testClient() *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableCompression: true}}
}

func contextWithCancelled() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx, cancel
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
