package httpapi

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"cohort/actors"
	"cohort/actors/planner"
	"cohort/httpapi/metrics"
	"cohort/httpapi/telemetry"
	"cohort/model/sample"
)

var (
	errClientGone = errors.New("httpapi: the client disconnected")
	errShutdown   = errors.New("httpapi: the server is shutting down")
)

// generation is one completions or chat request in flight: its engine
// streams (one per choice) and what the response needs.
type generation struct {
	s       *Server
	j       *job
	arrival time.Time
	span    *telemetry.RequestSpan
	choices []*choice
	ctx     context.Context
	cancel  context.CancelFunc
	prefix  []byte // a chunk's JSON up to the choices list
	buf     []byte
	delta   []byte // a chat chunk's delta object

	fanIn chan fanItem // n > 1 streams: events of every choice
}

// choice is one engine request and what has been seen of it.
type choice struct {
	index, prompt int
	st            eventStream
	obs           *telemetry.ChoiceObserver

	done   bool
	finish string
	err    error
	usage  actors.Usage
	tokens int

	first, lastTok, end time.Time
	queue               time.Duration
	inter               []time.Duration

	out    *chatOutput // chat: content and tool calls of the output
	text   []byte      // the whole text (non-stream)
	lps    []tokenLP   // logprobs (non-stream)
	offset int         // characters emitted so far (completions text_offset)
	echoed bool        // stream: the echoed prompt chunk was written
}

type tokenLP struct {
	id      int32
	logprob float64
	top     []sample.TokenLogprob
	offset  int
	none    bool // the prompt's first token: no logprob (JSON null)
}

// promptLPs are the logprob entries of an echoed prompt: its first token
// without a logprob, then each later token's from the engine (in
// Event.PromptLogprobs), with text offsets counted over the tokens' texts.
func (g *generation) promptLPs(prompt int, scored []sample.Result) []tokenLP {
	ids := g.j.prompts[prompt]
	out := make([]tokenLP, len(ids))
	offset := 0
	for i, id := range ids {
		// A prompt token without a score (the first; none arrive if the
		// engine could not score) is null, never a made-up 0.
		out[i] = tokenLP{id: id, offset: offset, none: i == 0 || i-1 >= len(scored)}
		if !out[i].none {
			out[i].logprob, out[i].top = scored[i-1].Token.Logprob, scored[i-1].Top
		}
		offset += utf8.RuneCountInString(g.tokenText(id))
	}
	return out
}

type fanItem struct {
	c   *choice
	ev  actors.Event
	err error
}

// generate validates with parse, submits the choices and answers.
func (s *Server) generate(c *call, parse func([]byte) (*job, *apiError)) reply {
	if ok, reason := s.eng.Ready(); !ok {
		s.metrics.Rejected("not_ready")
		return errorReply(notReady(reason))
	}
	j, aerr := parse(c.body)
	if aerr != nil {
		if aerr.code == "context_length_exceeded" {
			s.metrics.Rejected("context_length")
		} else {
			s.metrics.Rejected("invalid")
		}
		return errorReply(aerr)
	}
	op := "text_completion"
	if j.chat {
		op = "chat"
	}
	ctx := telemetry.Extract(context.Background(), c.traceparent, c.tracestate)
	g := &generation{s: s, j: j, arrival: c.start}
	if g.arrival.IsZero() {
		g.arrival = time.Now()
	}
	g.span = telemetry.StartRequest(ctx, s.tracer, g.arrival, telemetry.RequestAttrs{Operation: op,
		Model: s.opts.ModelName, MaxTokens: j.userMax, Temperature: j.base.Params.Temperature,
		TopP: j.base.Params.TopP, Stream: j.stream, N: j.n})
	if aerr := g.submit(); aerr != nil {
		g.span.End(aerr)
		return errorReply(aerr)
	}
	var cancel context.CancelCauseFunc
	g.ctx, cancel = context.WithCancelCause(s.base)
	g.cancel = func() { cancel(nil) }
	g.prefix = g.chunkPrefix()
	if j.stream {
		stream := g.writeSSE
		if j.resp != nil {
			stream = g.writeResponsesSSE
		}
		return reply{status: http.StatusOK, contentType: contentSSE, stream: stream, gone: func() { cancel(errClientGone) }}
	}
	if c.watch != nil {
		// Nothing is written before the end: watch the connection instead,
		// so that a client that leaves frees the engine at once.
		w := c.watch(func() { cancel(errClientGone) })
		defer w.stop()
	}
	return g.collect()
}

// submit checks every choice's engine request (the one validation of
// their ranges, the engine's checker), then starts them; on failure it
// cancels those already started.
func (g *generation) submit() *apiError {
	checked, prompts, err := g.check()
	if err != nil {
		return g.refused(err)
	}
	g.choices = make([]*choice, 0, len(checked))
	for idx, r := range checked {
		st, err := g.s.eng.submit(r)
		if err != nil {
			for _, c := range g.choices {
				c.st.Cancel()
			}
			g.choices = nil
			return g.refused(err)
		}
		c := &choice{index: idx, prompt: prompts[idx], st: st, obs: g.span.Choice(idx)}
		if g.j.chat {
			c.out = newChatOutput(g.j)
		}
		g.choices = append(g.choices, c)
	}
	return nil
}

// check builds and checks the engine request of every choice (prompts ×
// n), returning them with each one's prompt index.
func (g *generation) check() ([]actors.Checked, []int, error) {
	j := g.j
	checked := make([]actors.Checked, 0, j.choices())
	prompts := make([]int, 0, j.choices())
	for p, prompt := range j.prompts {
		var turns []int
		if j.chat {
			turns = g.s.turnStarts(prompt)
		}
		for i := 0; i < j.n; i++ {
			r := j.base
			r.Prompt, r.MaxTokens, r.Boundaries = prompt, j.maxTokens[p], turns
			r.Trace = g.span.SpanContext()
			switch {
			case j.seeded:
				r.Params.Seed = j.base.Params.Seed + uint64(i)
			case r.Params.Temperature > 0:
				r.Params.Seed = rand.Uint64() // unseeded sampling differs per request and choice
			}
			c, err := g.s.eng.check(r)
			if err != nil {
				return nil, nil, err
			}
			checked, prompts = append(checked, c), append(prompts, p)
		}
	}
	return checked, prompts, nil
}

// turnStarts marks where each message of a rendered conversation begins
// (after the first): the ends of the system and tool part and of every
// earlier turn, where the next requests of a conversation part from this
// one. The prefix cache keeps a state snapshot there. A message opens with
// the template's <|im_start|> token; without one there are no marks.
func (s *Server) turnStarts(prompt []int32) []int {
	start, ok := s.tok.TokenID("<|im_start|>")
	if !ok {
		return nil
	}
	var out []int
	for i, id := range prompt {
		if id == start && i > 0 {
			out = append(out, i)
		}
	}
	return out
}

// refused counts a refused submission in the metrics and returns its error.
func (g *generation) refused(err error) *apiError {
	switch {
	case errors.Is(err, actors.ErrOverloaded):
		g.s.metrics.Rejected("overloaded")
	case errors.Is(err, actors.ErrNotReady):
		g.s.metrics.Rejected("not_ready")
	default:
		g.s.metrics.Rejected("invalid")
	}
	return engineError(err)
}

// observe records ev for metrics and tracing.
func (g *generation) observe(c *choice, ev actors.Event) {
	t := ev.Time
	if t.IsZero() {
		t = time.Now()
	}
	if ev.HasToken {
		c.tokens++
		if c.first.IsZero() {
			c.first = t
			if !ev.ScheduledAt.IsZero() {
				c.queue = ev.ScheduledAt.Sub(g.arrival)
			}
		} else {
			c.inter = append(c.inter, t.Sub(c.lastTok))
		}
		c.lastTok = t
	}
	if ev.Finish != "" {
		c.done, c.finish, c.usage, c.err, c.end = true, ev.Finish, ev.Usage, ev.Err, t
		g.report(c)
	}
	c.obs.Observe(ev)
}

// report records a finished (or abandoned) choice in the metrics.
func (g *generation) report(c *choice) {
	var rej *planner.Rejection
	if c.finish == "error" && c.tokens == 0 && errors.As(c.err, &rej) {
		g.s.metrics.Rejected(rej.Reason)
		return
	}
	m := metrics.RequestMetrics{PromptTokens: c.usage.PromptTokens, GenerationTokens: c.usage.CompletionTokens,
		E2E: c.end.Sub(g.arrival), Queue: max(c.queue, 0), InterToken: c.inter, Finish: metricsFinish(c.finish)}
	if m.PromptTokens == 0 {
		m.PromptTokens = len(g.j.prompts[c.prompt])
	}
	if m.GenerationTokens == 0 {
		m.GenerationTokens = c.tokens
	}
	if !c.first.IsZero() {
		m.TTFT = max(c.first.Sub(g.arrival), time.Nanosecond)
	}
	g.s.metrics.RequestFinished(m)
}

// metricsFinish is the finished_reason label of a finish: vLLM's engine
// reasons, so a cancelled request counts as "abort" and a tool call as the
// "stop" it ended with.
func metricsFinish(finish string) string {
	switch finish {
	case "cancelled":
		return "abort"
	case "tool_calls":
		return "stop"
	}
	return finish
}

// abandon cancels every unfinished choice (the client is gone or the
// server is stopping), recording each as aborted first.
func (g *generation) abandon() {
	for _, c := range g.choices {
		if c.done {
			continue
		}
		c.done, c.finish, c.end = true, "cancelled", time.Now()
		g.report(c)
		c.st.Cancel()
	}
}

func (g *generation) promptTokens() int {
	n := 0
	for _, p := range g.j.prompts {
		n += len(p)
	}
	return n
}

func (g *generation) completionTokens() int {
	n := 0
	if g.j.echoOnly {
		return 0 // the one token made to reach the prompt's end is not returned
	}
	for _, c := range g.choices {
		n += max(c.usage.CompletionTokens, c.tokens)
	}
	return n
}

// recvError maps a failed Recv: the server's context ended (a forced
// shutdown), or the stream ended without a final event (an engine bug).
func recvError(err error) *apiError {
	if errors.Is(err, io.EOF) {
		return internal("the engine stream ended without a final event")
	}
	return notReady(errShutdown.Error())
}

// failure returns the error a choice ended with.
func failure(c *choice) *apiError {
	if c.finish == "cancelled" {
		return internal("the request was cancelled by the engine")
	}
	if c.err == nil {
		return internal("the engine failed the request without a reason")
	}
	return engineError(c.err)
}

// collect reads every choice to its end and builds the JSON body.
func (g *generation) collect() reply {
	defer g.cancel()
	for _, c := range g.choices {
		if g.j.echo {
			c.text = append(c.text, g.promptText(c.prompt)...)
			c.offset = utf8.RuneCount(c.text)
		}
		for !c.done {
			ev, err := c.st.Recv(g.ctx)
			if err != nil {
				if errors.Is(context.Cause(g.ctx), errClientGone) {
					g.gone()
					return errorReply(clientGone())
				}
				g.abandon()
				aerr := recvError(err)
				g.span.End(aerr)
				return errorReply(aerr)
			}
			g.observe(c, ev)
			if g.j.echo && g.j.logprobs && !c.echoed {
				c.lps, c.echoed = append(c.lps, g.promptLPs(c.prompt, ev.PromptLogprobs)...), true
			}
			if g.j.echoOnly {
				ev.Text, ev.HasToken = "", false
			}
			if g.j.logprobs && ev.HasToken {
				c.lps = append(c.lps, tokenLP{id: ev.Token, logprob: ev.Logprob, top: ev.Top, offset: c.offset})
			}
			c.text = append(c.text, ev.Text...)
			c.offset += utf8.RuneCountInString(ev.Text)
			if ev.Finish == "error" || ev.Finish == "cancelled" {
				g.abandon()
				aerr := failure(c)
				g.span.End(aerr)
				return errorReply(aerr)
			}
		}
	}
	g.span.End(nil)
	if g.j.resp != nil {
		return g.responsesReply()
	}
	b := g.prefix
	for i, c := range g.choices {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = appendInt(b, c.index)
		finish := c.finish
		if g.j.chat {
			c.out.feed(string(c.text))
			c.out.finish()
			finish = c.out.finishReason(c.finish)
			b = append(b, `,"message":`...)
			b = c.out.appendMessage(b)
			b = append(b, `,"logprobs":`...)
			b = g.appendChatLogprobs(b, c.lps)
		} else {
			b = append(b, `,"text":`...)
			b = appendString(b, string(c.text))
			b = append(b, `,"logprobs":`...)
			b = g.appendCompletionLogprobs(b, c.lps)
		}
		b = append(b, `,"finish_reason":`...)
		b = appendString(b, finish)
		b = append(b, '}')
	}
	b = append(b, `],"usage":`...)
	b = g.appendUsage(b)
	return jsonReply(http.StatusOK, append(b, '}'))
}

func (g *generation) promptText(p int) string {
	if t := g.j.texts[p]; t != "" {
		return t
	}
	return g.s.tok.Decode(g.j.prompts[p])
}

// chunkPrefix is the JSON of a response (or chunk) up to its choices.
func (g *generation) chunkPrefix() []byte {
	object, idPrefix := "text_completion", "cmpl-"
	if g.j.chat {
		object, idPrefix = "chat.completion", "chatcmpl-"
		if g.j.stream {
			object = "chat.completion.chunk"
		}
	}
	b := make([]byte, 0, 160)
	b = append(b, `{"id":"`...)
	b = append(b, idPrefix...)
	b = strconv.AppendUint(b, g.s.idBase, 16)
	b = append(b, '-')
	b = strconv.AppendUint(b, g.s.seq.Add(1), 16)
	b = append(b, `","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, g.arrival.Unix(), 10)
	b = append(b, `,"model":`...)
	b = appendString(b, g.s.opts.ModelName)
	return append(b, `,"choices":[`...)
}

func (g *generation) appendUsage(b []byte) []byte {
	p, c := g.promptTokens(), g.completionTokens()
	b = append(b, `{"prompt_tokens":`...)
	b = appendInt(b, p)
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, c)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, p+c)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = appendInt(b, g.cachedTokens())
	return append(b, "}}"...)
}

// cachedTokens is how many of the prompt tokens the prefix cache served:
// for each prompt, those of its first choice (the others share its prompt
// tokens in the usage).
func (g *generation) cachedTokens() int {
	n, seen := 0, make([]bool, len(g.j.prompts))
	for _, c := range g.choices {
		if c.prompt < len(seen) && !seen[c.prompt] {
			seen[c.prompt] = true
			n += c.usage.CachedTokens
		}
	}
	return n
}

// tokenText is a token's text, as in logprobs.
func (g *generation) tokenText(id int32) string { return g.s.tok.Decode([]int32{id}) }

// appendCompletionLogprobs writes the legacy completions logprobs object:
// tokens, token_logprobs, top_logprobs (the alternatives plus the chosen
// token) and text_offset; null when logprobs were not requested.
func (g *generation) appendCompletionLogprobs(b []byte, lps []tokenLP) []byte {
	if !g.j.logprobs {
		return append(b, "null"...)
	}
	b = append(b, `{"tokens":`...)
	b = appendList(b, lps, func(b []byte, lp tokenLP) []byte { return appendString(b, g.tokenText(lp.id)) })
	b = append(b, `,"token_logprobs":`...)
	b = appendList(b, lps, func(b []byte, lp tokenLP) []byte {
		if lp.none {
			return append(b, "null"...)
		}
		return appendFloat(b, lp.logprob)
	})
	b = append(b, `,"top_logprobs":`...)
	b = appendList(b, lps, g.appendTopLogprobs)
	b = append(b, `,"text_offset":`...)
	b = appendList(b, lps, func(b []byte, lp tokenLP) []byte { return appendInt(b, lp.offset) })
	return append(b, '}')
}

// appendTopLogprobs writes one token's legacy top_logprobs object: text to
// logprob of the alternatives and then the chosen token, each text once; null
// where the token has no logprob.
func (g *generation) appendTopLogprobs(b []byte, lp tokenLP) []byte {
	if lp.none {
		return append(b, "null"...)
	}
	b = append(b, '{')
	seen := make(map[string]bool, len(lp.top)+1)
	add := func(id int32, logprob float64) {
		t := g.tokenText(id)
		if seen[t] {
			return
		}
		if len(seen) > 0 {
			b = append(b, ',')
		}
		seen[t] = true
		b = appendString(b, t)
		b = append(b, ':')
		b = appendFloat(b, logprob)
	}
	for _, alt := range lp.top {
		add(alt.ID, alt.Logprob)
	}
	add(lp.id, lp.logprob)
	return append(b, '}')
}

// appendChatLogprobs writes the chat logprobs object {"content":[...]}, or
// null when logprobs were not requested.
func (g *generation) appendChatLogprobs(b []byte, lps []tokenLP) []byte {
	if !g.j.logprobs {
		return append(b, "null"...)
	}
	b = append(b, `{"content":`...)
	b = appendList(b, lps, func(b []byte, lp tokenLP) []byte {
		b = g.appendChatToken(b, lp.id, lp.logprob)
		b = b[:len(b)-1] // reopen the object
		b = append(b, `,"top_logprobs":`...)
		b = appendList(b, lp.top, func(b []byte, alt sample.TokenLogprob) []byte {
			return g.appendChatToken(b, alt.ID, alt.Logprob)
		})
		return append(b, '}')
	})
	return append(b, '}')
}

func (g *generation) appendChatToken(b []byte, id int32, logprob float64) []byte {
	t := g.tokenText(id)
	b = append(b, `{"token":`...)
	b = appendString(b, t)
	b = append(b, `,"logprob":`...)
	b = appendFloat(b, logprob)
	b = append(b, `,"bytes":`...)
	b = appendBytes(b, t)
	return append(b, '}')
}

// ---- streaming ----

// writeSSE streams the response. It runs after the HTTP handler returned
// and touches nothing of the request. A failed flush means the client is
// gone: the engine requests are cancelled at once.
func (g *generation) writeSSE(w *bufio.Writer) {
	defer g.cancel()
	for _, c := range g.choices {
		switch {
		case g.j.chat:
			g.writeChunk(w, c, `{"role":"assistant","content":""}`, "", nil, "")
		case g.j.echo && !g.j.logprobs:
			g.writeEcho(w, c, nil)
		}
	}
	if err := w.Flush(); err != nil {
		g.gone()
		return
	}
	remaining := len(g.choices)
	for remaining > 0 {
		c, ev, err := g.next()
		if err != nil {
			g.abandon()
			aerr := recvError(err)
			g.span.End(aerr)
			g.writeError(w, aerr)
			return
		}
		g.observe(c, ev)
		if ev.Finish == "error" || ev.Finish == "cancelled" {
			g.abandon()
			aerr := failure(c)
			g.span.End(aerr)
			g.s.logf("httpapi: request failed mid-stream: %v", aerr)
			g.writeError(w, aerr)
			return
		}
		if g.j.echo && g.j.logprobs && !c.echoed {
			// The prompt's logprobs come with its first token's event.
			g.writeEcho(w, c, g.promptLPs(c.prompt, ev.PromptLogprobs))
		}
		if g.j.echoOnly {
			ev.Text, ev.HasToken = "", false
		}
		var lps []tokenLP
		if g.j.logprobs && ev.HasToken {
			lps = []tokenLP{{id: ev.Token, logprob: ev.Logprob, top: ev.Top, offset: c.offset}}
		}
		switch {
		case g.j.chat:
			g.writeChatDeltas(w, c, c.out.feed(ev.Text), lps)
			if ev.Finish != "" {
				g.writeChatDeltas(w, c, c.out.finish(), nil)
			}
		case ev.Text != "" || lps != nil:
			g.writeChunk(w, c, "", ev.Text, lps, "")
			c.offset += utf8.RuneCountInString(ev.Text)
		}
		if ev.Finish != "" {
			remaining--
			finish := ev.Finish
			if g.j.chat {
				finish = c.out.finishReason(ev.Finish)
			}
			g.writeChunk(w, c, "{}", "", nil, finish)
		}
		if err := w.Flush(); err != nil {
			g.gone()
			return
		}
	}
	g.span.End(nil)
	if g.j.usage {
		b := append(g.buf[:0], "data: "...)
		b = append(b, g.prefix...)
		b = append(b, `],"usage":`...)
		b = g.appendUsage(b)
		b = append(b, "}\n\n"...)
		g.buf = b
		w.Write(b)
	}
	w.WriteString("data: [DONE]\n\n")
	w.Flush()
}

// writeChatDeltas writes one chunk per delta of a chat choice, the token's
// logprobs (if any) on the first; a token that completed no delta still
// gets a chunk for its logprobs.
func (g *generation) writeChatDeltas(w *bufio.Writer, c *choice, deltas []outDelta, lps []tokenLP) {
	if len(deltas) == 0 && lps != nil {
		g.writeChunk(w, c, `{"content":""}`, "", lps, "")
		return
	}
	for _, d := range deltas {
		g.delta = appendDelta(g.delta[:0], d)
		g.writeChunk(w, c, string(g.delta), "", lps, "")
		lps = nil
	}
}

// gone handles a client that disconnected.
func (g *generation) gone() {
	g.abandon()
	g.span.End(errClientGone)
}

// writeError ends a stream with an error event and [DONE].
func (g *generation) writeError(w *bufio.Writer, e *apiError) {
	b := append(g.buf[:0], "data: "...)
	b = appendError(b, e)
	b = append(b, "\n\ndata: [DONE]\n\n"...)
	g.buf = b
	w.Write(b)
	w.Flush()
}

// writeChunk writes one SSE chunk for choice c. For chat, delta is the raw
// delta object, or "" for a content delta of text; for completions, text
// is the text. finish is "" (null) or the finish reason.
// writeEcho writes a completion choice's echoed prompt as its first chunk,
// with the prompt's logprobs when they were asked for.
func (g *generation) writeEcho(w *bufio.Writer, c *choice, lps []tokenLP) {
	text := g.promptText(c.prompt)
	c.offset, c.echoed = utf8.RuneCountInString(text), true
	g.writeChunk(w, c, "", text, lps, "")
}

func (g *generation) writeChunk(w *bufio.Writer, c *choice, delta, text string, lps []tokenLP, finish string) {
	b := append(g.buf[:0], "data: "...)
	b = append(b, g.prefix...)
	b = append(b, `{"index":`...)
	b = appendInt(b, c.index)
	if g.j.chat {
		b = append(b, `,"delta":`...)
		if delta != "" {
			b = append(b, delta...)
		} else {
			b = append(b, `{"content":`...)
			b = appendString(b, text)
			b = append(b, '}')
		}
		b = append(b, `,"logprobs":`...)
		if lps != nil {
			b = g.appendChatLogprobs(b, lps)
		} else {
			b = append(b, "null"...)
		}
	} else {
		b = append(b, `,"text":`...)
		b = appendString(b, text)
		b = append(b, `,"logprobs":`...)
		if lps != nil {
			b = g.appendCompletionLogprobs(b, lps)
		} else {
			b = append(b, "null"...)
		}
	}
	b = append(b, `,"finish_reason":`...)
	b = appendNullableString(b, finish)
	b = append(b, "}]"...)
	if g.j.usage {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, "}\n\n"...)
	g.buf = b
	w.Write(b)
}

// next returns the next event of any unfinished choice.
func (g *generation) next() (*choice, actors.Event, error) {
	if len(g.choices) == 1 {
		c := g.choices[0]
		ev, err := c.st.Recv(g.ctx)
		return c, ev, err
	}
	if g.fanIn == nil {
		g.fanIn = make(chan fanItem, len(g.choices))
		for _, c := range g.choices {
			go g.forward(c)
		}
	}
	select {
	case it := <-g.fanIn:
		return it.c, it.ev, it.err
	case <-g.ctx.Done():
		return nil, actors.Event{}, g.ctx.Err()
	}
}

// forward copies one choice's events into fanIn until its final event.
func (g *generation) forward(c *choice) {
	for {
		ev, err := c.st.Recv(g.ctx)
		select {
		case g.fanIn <- fanItem{c, ev, err}:
		case <-g.ctx.Done():
			return
		}
		if err != nil || ev.Finish != "" {
			return
		}
	}
}
