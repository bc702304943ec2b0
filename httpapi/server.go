// Package httpapi is Cohort's OpenAI-compatible HTTP edge, served by
// fasthttp.
//
// Routes:
//
//	POST /v1/completions        text completions (stream or one JSON body)
//	POST /v1/chat/completions   chat completions through the model's chat template
//	POST /v1/responses          the Responses API (docs/responses.md)
//	GET  /v1/models             the served model, its max_model_len and capacity
//	GET  /v1/models/{id}        the same for one model id (404 for another)
//	GET  /health                liveness: 200 while serving (503 once the engine gave up)
//	GET  /ready                 readiness: 200, or 503 with Retry-After and the reason
//	GET  /metrics               Prometheus text exposition
//	POST /tokenize              {"prompt": s} or {"messages": [...]} → token ids
//	POST /detokenize            {"tokens": [...]} → {"prompt": s}
//	POST /debug/faults          fault injection, only when Options.InjectFault is set
//
// Handlers only translate: they validate and tokenize the request, submit
// one engine request per choice and stream what the engine's request actors
// emit (text deltas, logprobs, finish reasons, usage). Errors use OpenAI's
// envelope {"error":{"message","type","param","code"}}: 400 for invalid
// input (the param is named), 404 for an unknown model or route, 413 for a
// body over Options.MaxBodyBytes, 429 with Retry-After when the engine is
// overloaded, 503 with Retry-After when it is not ready. A request that
// could never be admitted (more choices than the engine holds) or that would
// queue more than Options.MaxRequestTokens is a 400, not a 429.
//
// Connections are bounded (Options.ReadTimeout, WriteTimeout, IdleTimeout,
// MaxConns, MaxConnsPerIP): slow and idle clients are cut, and when
// descriptors run short idle connections are shed instead of the server
// stopping (see connLimiter).
//
// Defaults: temperature 1, top_p 1 (OpenAI's). Without max_tokens a request
// may generate up to the rest of the context (max_model_len minus the
// prompt), capped at Options.DefaultMaxTokens (4096 unless set).
//
// A streamed response ends with `data: [DONE]`; if the engine fails mid
// stream, an error event `data: {"error":{...}}` comes before it. A client
// that disconnects mid stream is noticed on the next write, and its engine
// requests are cancelled at once (they are then aborted within one engine
// step). A non-streamed request writes nothing until it ends, so its
// connection is watched while it is queued or generating (see watchPeer):
// when the client closes it, the request's engine requests are cancelled
// the same way. MaxRequestTokens still bounds what one request may queue.
package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"cohort/actors"
	"cohort/actors/planner"
	"cohort/httpapi/chattemplate"
	"cohort/httpapi/metrics"
	"cohort/httpapi/telemetry"
	"cohort/model/grammar"
	"cohort/model/tokenizer"
)

// Engine is what the edge needs from the engine; *actors.Engine implements it.
type Engine interface {
	// Check validates a request once, into the form the engine trusts;
	// SubmitChecked runs it.
	Check(actors.Request) (actors.Checked, error)
	SubmitChecked(actors.Checked) (*actors.Stream, error)
	Info() actors.Info
	Stats(ctx context.Context) (planner.Stats, error)
	Ready() (bool, string)
	Pending() int
	// ResetPrefixCache empties the prefix cache (POST /reset_prefix_cache).
	ResetPrefixCache(ctx context.Context) error
}

// Options configure a Server.
type Options struct {
	ModelName    string               // the served model id (required)
	Tokenizer    *tokenizer.Tokenizer // required
	ChatTemplate string               // Jinja chat template; "" disables /v1/chat/completions
	BOS, EOS     string               // bos_token and eos_token for the template
	MaxBodyBytes int                  // request body limit; 0 means 1 MiB (larger → 413)
	// DefaultMaxTokens caps max_tokens when a request does not set it
	// (the default is the rest of the context); 0 means 4096.
	DefaultMaxTokens int
	// Sampling holds the defaults a request's unset sampling fields take
	// (generation_config.json's, as vLLM takes them); zero: OpenAI's.
	Sampling       SamplingDefaults
	Metrics        *metrics.Registry    // nil: a new registry reading the engine's gauges
	TracerProvider trace.TracerProvider // nil: no tracing
	Logf           func(string, ...any) // nil: no logging
	// InjectFault, when set, enables POST /debug/faults (fault injection for
	// chaos drills; never set by default).
	InjectFault func(context.Context, actors.Fault) error

	// Connection limits against slow or idle clients (slowloris, descriptor
	// exhaustion). Zero takes the default in brackets; a negative value
	// turns the limit off.
	//
	// ReadTimeout bounds reading one request, headers and body, from its
	// first byte (and a new connection's first request from its accept) [30s].
	// WriteTimeout bounds each write of a response, so a stream to a client
	// that reads is never cut but one to a client that stopped reading is
	// [30s]. IdleTimeout closes a kept-alive connection with no request [60s].
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConns bounds open connections; over it the oldest idle connection
	// is closed, or the new one when none is idle [the open-file limit less
	// a reserve of max(64, limit/8)]. MaxConnsPerIP bounds the connections
	// from one address; over it new ones are closed [256].
	MaxConns, MaxConnsPerIP int
	// KeepAlive is how long a stream may stay silent before an SSE comment
	// line is written to it [2s] (see keepAliveComment).
	KeepAlive time.Duration
	// MaxRequestTokens bounds the work one request may queue: the sum over
	// its choices (prompts × n) of prompt tokens plus max_tokens. A request
	// over it gets a 400 [4 × max_model_len].
	MaxRequestTokens int
}

// Connection-limit defaults (see Options).
const (
	defaultReadTimeout   = 30 * time.Second
	defaultWriteTimeout  = 30 * time.Second
	defaultIdleTimeout   = 60 * time.Second
	defaultMaxConnsPerIP = 256
)

// orDefault resolves an Options limit: 0 takes def, negative means off (0).
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Server serves the OpenAI-compatible API over one engine.
type Server struct {
	eng        backend
	opts       Options
	tok        *tokenizer.Tokenizer
	tmpl       *chattemplate.Template
	metrics    *metrics.Registry
	tracer     trace.Tracer
	logf       func(string, ...any)
	maxBody    int
	defaultMax int
	srv        *fasthttp.Server
	live       func() (bool, string)          // the engine's liveness, when it reports one
	grammars   func() (*grammar.Cache, error) // the engine's grammars (nil: no structured outputs)
	// maxPending is how many requests the engine holds at most (0: unknown):
	// a request with more choices can never be admitted.
	maxPending func() int
	limiter    *connLimiter // set by Serve
	// newTicker makes the keep-alive clock of a stream (nil: no keep-alives).
	newTicker func() ticker
	// retryAfter, when the engine measures its recoveries, is how long a
	// client refused with 503 should wait.
	retryAfter func(fallback time.Duration) time.Duration

	base   context.Context // cancelled by a forced shutdown: ends in-flight requests
	cancel context.CancelFunc
	seq    atomic.Uint64 // response ids
	idBase uint64
}

// backend is Engine with SubmitChecked returning an interface, so that
// tests can run the edge on a fake engine (actors.Stream has no public
// constructor).
type backend interface {
	check(actors.Request) (actors.Checked, error)
	submit(actors.Checked) (eventStream, error)
	Info() actors.Info
	Stats(ctx context.Context) (planner.Stats, error)
	Ready() (bool, string)
	Pending() int
	ResetPrefixCache(ctx context.Context) error
}

// eventStream is what the edge reads from a submitted request.
type eventStream interface {
	Recv(ctx context.Context) (actors.Event, error)
	Cancel()
}

type engineBackend struct{ Engine }

func (b engineBackend) check(r actors.Request) (actors.Checked, error) { return b.Check(r) }

func (b engineBackend) submit(c actors.Checked) (eventStream, error) {
	s, err := b.SubmitChecked(c)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New returns a server for e.
func New(e Engine, o Options) (*Server, error) {
	if e == nil {
		return nil, errors.New("httpapi: nil engine")
	}
	s, err := newServer(engineBackend{e}, o)
	if err != nil {
		return nil, err
	}
	if l, ok := e.(interface{ Live() (bool, string) }); ok {
		s.live = l.Live
	}
	if m, ok := e.(interface{ MaxPending() int }); ok {
		s.maxPending = m.MaxPending
	}
	if g, ok := e.(interface {
		Grammars() (*grammar.Cache, error)
	}); ok {
		s.grammars = g.Grammars
	}
	if r, ok := e.(interface {
		RetryAfter(time.Duration) time.Duration
	}); ok {
		s.retryAfter = r.RetryAfter
	}
	return s, nil
}

func newServer(e backend, o Options) (*Server, error) {
	if o.ModelName == "" {
		return nil, errors.New("httpapi: Options.ModelName is required")
	}
	if o.Tokenizer == nil {
		return nil, errors.New("httpapi: Options.Tokenizer is required")
	}
	if o.MaxBodyBytes < 0 || o.DefaultMaxTokens < 0 {
		return nil, errors.New("httpapi: negative MaxBodyBytes or DefaultMaxTokens")
	}
	if err := o.Sampling.validate(); err != nil {
		return nil, err
	}
	s := &Server{eng: e, opts: o, tok: o.Tokenizer, metrics: o.Metrics, logf: o.Logf,
		maxBody: o.MaxBodyBytes, defaultMax: o.DefaultMaxTokens}
	if s.maxBody == 0 {
		s.maxBody = 1 << 20
	}
	if s.defaultMax == 0 {
		s.defaultMax = 4096
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if ka := orDefault(o.KeepAlive, defaultKeepAlive); ka > 0 {
		s.newTicker = func() ticker { return newRealTicker(ka) }
	}
	if o.ChatTemplate != "" {
		t, err := chattemplate.New(o.ChatTemplate, o.BOS, o.EOS)
		if err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
		s.tmpl = t
	}
	if s.metrics == nil {
		s.metrics = metrics.New(o.ModelName, s.gauges)
	}
	tp := o.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s.tracer = tp.Tracer(telemetry.InstrumentationName)
	s.base, s.cancel = context.WithCancel(context.Background())
	s.idBase = uint64(time.Now().UnixNano())
	s.srv = &fasthttp.Server{
		Handler:            s.handleFast,
		ErrorHandler:       s.handleFastError,
		Name:               "cohort",
		MaxRequestBodySize: s.maxBody,
		ReadBufferSize:     16 << 10, // request headers up to 16 KiB
		ReadTimeout:        orDefault(o.ReadTimeout, defaultReadTimeout),
		IdleTimeout:        orDefault(o.IdleTimeout, defaultIdleTimeout),
		CloseOnShutdown:    true,
		Logger:             fastLogger(s.logf),
	}
	return s, nil
}

// Handler returns the fasthttp handler (for use with a fasthttp.Server of
// one's own; set its MaxRequestBodySize too).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handleFast }

// Serve serves HTTP on ln until Shutdown, within the connection limits of
// Options (see connLimiter). It is called once per Server.
func (s *Server) Serve(ln net.Listener) error {
	l := newConnLimiter(ln, orDefault(s.opts.MaxConns, defaultMaxConns()), orDefault(s.opts.MaxConnsPerIP, defaultMaxConnsPerIP),
		orDefault(s.opts.WriteTimeout, defaultWriteTimeout), s.logf)
	s.limiter = l
	s.srv.ConnState = l.connState
	return s.srv.Serve(l)
}

// Shutdown stops accepting connections and waits for in-flight requests
// (streams included) to finish. If ctx ends first, in-flight requests are
// cancelled (streams end with an error event) and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	if err != nil {
		s.cancel()
	}
	return err
}

// gauges reads the engine's occupancy for /metrics.
func (s *Server) gauges() metrics.Gauges {
	g := metrics.Gauges{Pending: s.eng.Pending()}
	g.Ready, _ = s.eng.Ready()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if st, err := s.eng.Stats(ctx); err == nil {
		g.Running, g.Waiting, g.Preemptions = st.Running, st.Waiting, st.Preemptions
		g.PrefixQueries, g.PrefixHits = st.PrefixQueries, st.PrefixHits
		if kv := s.eng.Info().KVPages; kv > 0 {
			g.KVUsage = float64(st.UsedPages) / float64(kv)
		}
	}
	return g
}

func (s *Server) vocab() int { return s.eng.Info().VocabSize }

// call is one HTTP request, independent of the transport. body is only
// valid until serve returns.
type call struct {
	method, path            string
	body                    []byte
	traceparent, tracestate string
	accept                  string // the Accept header (read by /metrics)
	start                   time.Time
	// watch, when the transport can, watches the connection for its
	// client's disconnect until the returned watch is stopped, calling
	// onGone if it sees one (see watchPeer); nil: not watched.
	watch func(onGone func()) *peerWatch
}

// reply is one HTTP response. When stream is set the body is written by it,
// after the handler has returned, and it must flush after every event.
type reply struct {
	status      int
	contentType string
	retryAfter  string
	allow       string
	body        []byte
	stream      func(w *bufio.Writer)
	// gone, for a stream, is told that the client went away while the
	// stream was silent (a keep-alive comment could not be written).
	gone func()
}

const (
	contentJSON = "application/json"
	contentSSE  = "text/event-stream; charset=utf-8"
)

func jsonReply(status int, body []byte) reply {
	return reply{status: status, contentType: contentJSON, body: body}
}

func errorReply(e *apiError) reply {
	r := jsonReply(e.status, appendError(make([]byte, 0, 128+len(e.msg)), e))
	r.retryAfter = e.retryAfter
	return r
}

// route is one endpoint: the method it answers (a GET route answers HEAD
// too) and its handler.
type route struct {
	method string
	handle func(*Server, *call) reply
}

// routes are the endpoints at fixed paths; /v1/models/{id} is matched by
// prefix in serve, and /debug/faults answers only with Options.InjectFault.
var routes = map[string]route{
	"/v1/completions":      {http.MethodPost, (*Server).handleCompletions},
	"/v1/chat/completions": {http.MethodPost, (*Server).handleChat},
	"/v1/responses":        {http.MethodPost, (*Server).handleResponses},
	"/v1/models":           {http.MethodGet, (*Server).handleModels},
	"/health":              {http.MethodGet, (*Server).handleHealth},
	"/ready":               {http.MethodGet, (*Server).handleReady},
	"/metrics":             {http.MethodGet, (*Server).handleMetrics},
	"/tokenize":            {http.MethodPost, (*Server).handleTokenize},
	"/detokenize":          {http.MethodPost, (*Server).handleDetokenize},
	"/debug/faults":        {http.MethodPost, (*Server).handleFault},
	"/reset_prefix_cache":  {http.MethodPost, (*Server).handleResetPrefixCache},
}

// serve routes one request.
func (s *Server) serve(c *call) reply {
	rt, ok := routes[c.path]
	if c.path == "/debug/faults" && s.opts.InjectFault == nil {
		ok = false
	}
	if id, model := cutPrefix(c.path, "/v1/models/"); model {
		rt, ok = route{http.MethodGet, func(s *Server, _ *call) reply { return s.handleModel(id) }}, true
	}
	if !ok {
		return errorReply(notFound(c.method, c.path))
	}
	if c.method != rt.method && !(rt.method == http.MethodGet && c.method == http.MethodHead) {
		r := errorReply(methodNotAllowed(c.method, c.path))
		r.allow = rt.method
		return r
	}
	if len(c.body) > s.maxBody {
		return errorReply(tooLarge(s.maxBody))
	}
	return rt.handle(s, c)
}

// handleModel answers /v1/models/{id}.
func (s *Server) handleModel(id string) reply {
	if id != s.opts.ModelName {
		return errorReply(modelNotFound(id))
	}
	return jsonReply(http.StatusOK, s.appendModel(nil))
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return "", false
}

func (s *Server) handleCompletions(c *call) reply {
	return s.generate(c, s.bounded(s.completionJob))
}

func (s *Server) handleChat(c *call) reply {
	return s.generate(c, s.bounded(s.chatJob))
}

func (s *Server) handleModels(*call) reply {
	b := append([]byte(nil), `{"object":"list","data":[`...)
	b = s.appendModel(b)
	return jsonReply(http.StatusOK, append(b, "]}"...))
}

func (s *Server) appendModel(b []byte) []byte {
	info := s.eng.Info()
	b = append(b, `{"id":`...)
	b = appendString(b, s.opts.ModelName)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, int64(s.idBase/1e9), 10)
	b = append(b, `,"owned_by":"cohort","root":`...)
	b = appendString(b, s.opts.ModelName)
	b = append(b, `,"parent":null`...)
	for _, f := range []struct {
		key string
		n   int
	}{
		{"max_model_len", info.MaxModelLen}, {"kv_pages", info.KVPages}, {"page_size", info.PageSize},
		{"slots", info.Slots}, {"tp", info.TP}, {"vocab_size", info.VocabSize},
		{"scratch_bytes", int(info.Scratch)}, {"max_step_tokens", info.MaxStepTokens},
	} {
		b = append(b, ',')
		b = appendString(b, f.key)
		b = append(b, ':')
		b = appendInt(b, f.n)
	}
	return append(b, '}')
}

func (s *Server) handleHealth(*call) reply {
	if s.live != nil {
		if ok, reason := s.live(); !ok {
			e := notReady(reason)
			e.code, e.msg = "not_live", "the engine is dead: "+reason
			return errorReply(e)
		}
	}
	return jsonReply(http.StatusOK, []byte(`{"status":"ok"}`))
}

func (s *Server) handleReady(*call) reply {
	if ok, reason := s.eng.Ready(); !ok {
		return errorReply(notReady(reason))
	}
	return jsonReply(http.StatusOK, []byte(`{"status":"ready"}`))
}

// handleResetPrefixCache empties the prefix cache, as vLLM's endpoint of
// that name does.
func (s *Server) handleResetPrefixCache(*call) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.eng.ResetPrefixCache(ctx); err != nil {
		return errorReply(internal("%v", err))
	}
	return jsonReply(http.StatusOK, []byte(`{"status":"reset"}`))
}

func (s *Server) handleMetrics(c *call) reply {
	var buf bytes.Buffer
	f := metrics.Negotiate(c.accept)
	if err := s.metrics.Write(&buf, f); err != nil {
		return errorReply(internal("%v", err))
	}
	return reply{status: http.StatusOK, contentType: string(f), body: buf.Bytes()}
}

func (s *Server) handleTokenize(c *call) reply {
	var r tokenizeRequest
	if aerr := s.decodeFor(c.body, &r, &r.Model); aerr != nil {
		return errorReply(aerr)
	}
	var text string
	switch {
	case r.Prompt != nil && r.Messages != nil:
		return errorReply(badRequest("messages", "give either prompt or messages, not both"))
	case r.Prompt != nil:
		if r.AddGenerationPrompt != nil || r.ChatTemplateKwargs != nil {
			return errorReply(badRequest("add_generation_prompt", "add_generation_prompt and chat_template_kwargs apply to messages only"))
		}
		text = *r.Prompt
	case r.Messages != nil:
		add := true
		if r.AddGenerationPrompt != nil {
			add = *r.AddGenerationPrompt
		}
		var aerr *apiError
		if text, aerr = s.renderChat(r.Messages, add, r.ChatTemplateKwargs); aerr != nil {
			return errorReply(aerr)
		}
	default:
		return errorReply(badRequest("prompt", "prompt or messages is required"))
	}
	ids := s.tok.Encode(text)
	b := append(make([]byte, 0, 64+len(ids)*6), `{"tokens":`...)
	b = appendList(b, ids, func(b []byte, id int32) []byte { return appendInt(b, int(id)) })
	b = append(b, `,"count":`...)
	b = appendInt(b, len(ids))
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, s.eng.Info().MaxModelLen)
	return jsonReply(http.StatusOK, append(b, '}'))
}

func (s *Server) handleDetokenize(c *call) reply {
	var r detokenizeRequest
	if aerr := s.decodeFor(c.body, &r, &r.Model); aerr != nil {
		return errorReply(aerr)
	}
	if r.Tokens == nil {
		return errorReply(badRequest("tokens", "tokens is required"))
	}
	vocab := s.vocab()
	ids := make([]int32, len(r.Tokens))
	for i, id := range r.Tokens {
		if id < 0 || id >= int64(vocab) {
			return errorReply(badRequest("tokens", "token %d at position %d is outside the vocabulary [0, %d)", id, i, vocab))
		}
		ids[i] = int32(id)
	}
	b := append([]byte(nil), `{"prompt":`...)
	b = appendString(b, s.tok.Decode(ids))
	return jsonReply(http.StatusOK, append(b, '}'))
}

// handleFast adapts fasthttp to serve. Nothing of ctx is kept: the request
// is parsed (and its bytes copied) before serve returns, and a stream
// writer only uses what serve built.
func (s *Server) handleFast(ctx *fasthttp.RequestCtx) {
	c := call{
		method:      string(ctx.Method()),
		path:        string(ctx.Path()),
		body:        ctx.PostBody(),
		traceparent: string(ctx.Request.Header.Peek("traceparent")),
		tracestate:  string(ctx.Request.Header.Peek("tracestate")),
		accept:      string(ctx.Request.Header.Peek("Accept")),
		start:       ctx.Time(),
		watch: func(onGone func()) *peerWatch {
			return watchPeer(ctx.Conn(), ctx.SetReadDeadline, onGone)
		},
	}
	r := s.serve(&c)
	if r.status == http.StatusServiceUnavailable && r.retryAfter == retryAfterNotReady && s.retryAfter != nil {
		r.retryAfter = retryAfterSeconds(s.retryAfter(notReadyFallback))
	}
	ctx.SetStatusCode(r.status)
	ctx.SetContentType(r.contentType)
	if r.retryAfter != "" {
		ctx.Response.Header.Set("Retry-After", r.retryAfter)
	}
	if r.allow != "" {
		ctx.Response.Header.Set("Allow", r.allow)
	}
	if r.stream != nil {
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
		if s.newTicker == nil {
			ctx.SetBodyStreamWriter(r.stream)
			return
		}
		stream, gone, newTicker := r.stream, r.gone, s.newTicker
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) { withKeepAlive(w, newTicker(), stream, gone) })
		return
	}
	ctx.SetBody(r.body)
}

// handleFastError answers requests fasthttp could not read (body too
// large, malformed) with the OpenAI envelope.
func (s *Server) handleFastError(ctx *fasthttp.RequestCtx, err error) {
	var e *apiError
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		e = tooLarge(s.maxBody)
		drainRequest(ctx)
	case errors.As(err, &small):
		e = &apiError{status: http.StatusRequestHeaderFieldsTooLarge, typ: "invalid_request_error",
			code: "headers_too_large", msg: "the request headers are too large"}
	default:
		e = badRequest("", "malformed HTTP request: %v", err)
	}
	r := errorReply(e)
	ctx.SetStatusCode(r.status)
	ctx.SetContentType(r.contentType)
	ctx.SetBody(r.body)
}

// Bounds on draining an oversized body.
const (
	maxDrain     = 64 << 20
	drainIdle    = 100 * time.Millisecond
	drainTimeout = 2 * time.Second
)

// drainRequest reads and discards what the client is still sending of an
// oversized body: fasthttp closes the connection after the 413, and closing
// with unread data resets it, which destroys the 413 before the client can
// read it (clients that send Expect: 100-continue never get here).
func drainRequest(ctx *fasthttp.RequestCtx) {
	n := ctx.Request.Header.ContentLength()
	conn := ctx.Conn()
	if n <= 0 || n > maxDrain || conn == nil {
		return
	}
	deadline := time.Now().Add(drainTimeout)
	buf := make([]byte, 32<<10)
	for total := 0; total < n; {
		next := time.Now().Add(drainIdle)
		if next.After(deadline) {
			next = deadline
		}
		if err := conn.SetReadDeadline(next); err != nil {
			return
		}
		k, err := conn.Read(buf)
		total += k
		if err != nil {
			break
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
}

// notReadyFallback is the Retry-After of a 503 before any recovery was
// measured (the first load, or an engine without failures yet).
const notReadyFallback = 5 * time.Second

// retryAfterSeconds renders d as a Retry-After value: whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}

type fastLogger func(string, ...any)

func (l fastLogger) Printf(format string, args ...any) { l("httpapi: fasthttp: "+format, args...) }

func itoa(i int) string { return strconv.Itoa(i) }
