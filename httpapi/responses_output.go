package httpapi

import (
	"bufio"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Output item types of a response.
const (
	itemReasoning = "reasoning"
	itemMessage   = "message"
	itemCall      = "function_call"
)

// respItem is one output item of a response.
type respItem struct {
	typ          string
	id           string
	text         strings.Builder // the reasoning, the message's text or the call's arguments
	callID, name string          // function_call
	status       string          // in_progress, then completed or incomplete
}

// responder turns a chat choice's output deltas into a response's output
// items (reasoning, then messages and function calls in the order the
// model wrote them) and, when streaming, writes the events that build
// them. The plain and the streamed response run the same steps, so both
// have the same items.
type responder struct {
	g     *generation
	id    string
	items []*respItem
	cur   *respItem   // the open item (nil: none)
	calls []*respItem // the function_call items, by call index
	space string      // content of blanks only, not yet in a message
	w     *bufio.Writer
	seq   int
	buf   []byte
}

// newResponder starts a response; w is its event stream (nil: not streamed).
func (g *generation) newResponder(w *bufio.Writer) *responder {
	b := make([]byte, 0, 40)
	b = append(b, "resp_"...)
	b = strconv.AppendUint(b, g.s.idBase, 16)
	b = strconv.AppendUint(b, g.s.seq.Add(1)|1<<63, 16)
	return &responder{g: g, id: string(b), w: w}
}

// newItemID returns a random id with prefix (24 hex digits after it).
func newItemID(prefix string) string {
	b := make([]byte, 0, len(prefix)+24)
	b = append(b, prefix...)
	b = strconv.AppendUint(b, rand.Uint64()|1<<63, 16)
	b = strconv.AppendUint(b, uint64(rand.Uint32())|1<<31, 16)
	return string(b)
}

// responseStatus is a finished response's status: incomplete when the
// output was cut at max_output_tokens (or the context's end).
func responseStatus(finish string) string {
	if finish == "length" {
		return "incomplete"
	}
	return "completed"
}

// responsesReply answers a finished non-streamed request.
func (g *generation) responsesReply() reply {
	c := g.choices[0]
	r := g.newResponder(nil)
	r.feed(c.out.feed(string(c.text)))
	r.feed(c.out.finish())
	status := responseStatus(c.finish)
	r.finish(status)
	return jsonReply(http.StatusOK, r.appendResponse(nil, status, nil))
}

// writeResponsesSSE streams a response as the Responses API's events. A
// failed flush means the client is gone; an engine failure ends the stream
// with response.failed.
func (g *generation) writeResponsesSSE(w *bufio.Writer) {
	defer g.cancel()
	r := g.newResponder(w)
	r.writeResponse("response.created", "in_progress", nil)
	r.writeResponse("response.in_progress", "in_progress", nil)
	if err := w.Flush(); err != nil {
		g.gone()
		return
	}
	c := g.choices[0]
	for {
		ev, err := c.st.Recv(g.ctx)
		if err != nil {
			g.abandon()
			r.fail(recvError(err))
			return
		}
		g.observe(c, ev)
		if ev.Finish == "error" || ev.Finish == "cancelled" {
			g.abandon()
			aerr := failure(c)
			g.s.logf("httpapi: request failed mid-stream: %v", aerr)
			r.fail(aerr)
			return
		}
		r.feed(c.out.feed(ev.Text))
		if ev.Finish != "" {
			r.feed(c.out.finish())
			status := responseStatus(ev.Finish)
			r.finish(status)
			g.span.End(nil)
			r.writeResponse("response."+status, status, nil)
			w.Flush()
			return
		}
		if err := w.Flush(); err != nil {
			g.gone()
			return
		}
	}
}

// fail ends a stream with response.failed.
func (r *responder) fail(e *apiError) {
	r.g.span.End(e)
	r.closeItem("incomplete")
	r.writeResponse("response.failed", "failed", e)
	r.w.Flush()
}

// feed takes a choice's output deltas.
func (r *responder) feed(deltas []outDelta) {
	for _, d := range deltas {
		switch d.kind {
		case reasoningDelta:
			r.addText(r.want(itemReasoning), d.text)
		case contentDelta:
			if r.cur == nil || r.cur.typ != itemMessage {
				if strings.TrimSpace(d.text) == "" {
					r.space += d.text // blanks between calls are no message
					continue
				}
				d.text, r.space = r.space+d.text, ""
			}
			r.addText(r.want(itemMessage), d.text)
		case callStartDelta:
			it := &respItem{typ: itemCall, id: newItemID("fc_"), callID: d.id, name: d.name}
			r.open(it)
			r.calls = append(r.calls, it)
		case callArgsDelta:
			if d.call < len(r.calls) {
				r.addText(r.calls[d.call], d.text)
			}
		}
	}
}

// finish closes the output: the last item gets status. An output without
// a message or a call gets a message (of its blanks, if any).
func (r *responder) finish(status string) {
	answered := false
	for _, it := range r.items {
		answered = answered || it.typ != itemReasoning
	}
	if !answered {
		r.want(itemMessage)
		if r.space != "" {
			r.addText(r.cur, r.space)
		}
	}
	r.closeItem(status)
}

// want returns the open item if it has type typ, or opens one.
func (r *responder) want(typ string) *respItem {
	if r.cur != nil && r.cur.typ == typ {
		return r.cur
	}
	prefix := "msg_"
	if typ == itemReasoning {
		prefix = "rs_"
	}
	it := &respItem{typ: typ, id: newItemID(prefix)}
	r.open(it)
	return it
}

func (r *responder) index(it *respItem) int {
	for i, x := range r.items {
		if x == it {
			return i
		}
	}
	return -1
}

// open closes the open item and opens it.
func (r *responder) open(it *respItem) {
	r.closeItem("completed")
	it.status = "in_progress"
	r.items = append(r.items, it)
	r.cur, r.space = it, ""
	if r.w == nil {
		return
	}
	b := r.start("response.output_item.added")
	b = append(b, `,"output_index":`...)
	b = appendInt(b, len(r.items)-1)
	b = append(b, `,"item":`...)
	b = appendItem(b, it, false)
	r.end(b)
	if it.typ != itemCall {
		b = r.start("response.content_part.added")
		b = r.appendRef(b, it, true)
		b = append(b, `,"part":`...)
		b = appendPart(b, it, "")
		r.end(b)
	}
}

// addText adds to an item's text (a delta event).
func (r *responder) addText(it *respItem, text string) {
	if text == "" {
		return
	}
	it.text.WriteString(text)
	if r.w == nil {
		return
	}
	typ := "response.output_text.delta"
	switch it.typ {
	case itemReasoning:
		typ = "response.reasoning_text.delta"
	case itemCall:
		typ = "response.function_call_arguments.delta"
	}
	b := r.start(typ)
	b = r.appendRef(b, it, it.typ != itemCall)
	b = append(b, `,"delta":`...)
	b = appendString(b, text)
	if it.typ == itemMessage {
		b = append(b, `,"logprobs":[]`...)
	}
	r.end(b)
}

// closeItem ends the open item with status (the done events).
func (r *responder) closeItem(status string) {
	it := r.cur
	if it == nil {
		return
	}
	r.cur, it.status = nil, status
	if r.w == nil {
		return
	}
	text := it.text.String()
	var b []byte
	switch it.typ {
	case itemCall:
		b = r.start("response.function_call_arguments.done")
		b = r.appendRef(b, it, false)
		b = append(b, `,"name":`...)
		b = appendString(b, it.name)
		b = append(b, `,"arguments":`...)
		b = appendString(b, text)
	case itemReasoning:
		b = r.start("response.reasoning_text.done")
		b = r.appendRef(b, it, true)
		b = append(b, `,"text":`...)
		b = appendString(b, text)
	default:
		b = r.start("response.output_text.done")
		b = r.appendRef(b, it, true)
		b = append(b, `,"text":`...)
		b = appendString(b, text)
		b = append(b, `,"logprobs":[]`...)
	}
	r.end(b)
	if it.typ != itemCall {
		b = r.start("response.content_part.done")
		b = r.appendRef(b, it, true)
		b = append(b, `,"part":`...)
		b = appendPart(b, it, text)
		r.end(b)
	}
	b = r.start("response.output_item.done")
	b = append(b, `,"output_index":`...)
	b = appendInt(b, r.index(it))
	b = append(b, `,"item":`...)
	b = appendItem(b, it, true)
	r.end(b)
}

// start begins an SSE event of type typ: its event line and its data up
// to its first members (type and sequence_number).
func (r *responder) start(typ string) []byte {
	b := append(r.buf[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = appendInt(b, r.seq)
	r.seq++
	return b
}

// end finishes and writes the event start began.
func (r *responder) end(b []byte) {
	b = append(b, "}\n\n"...)
	r.buf = b
	r.w.Write(b)
}

// appendRef writes an event's item_id and output_index (and its
// content_index, 0: each item has one part).
func (r *responder) appendRef(b []byte, it *respItem, part bool) []byte {
	b = append(b, `,"item_id":`...)
	b = appendString(b, it.id)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, r.index(it))
	if part {
		b = append(b, `,"content_index":0`...)
	}
	return b
}

// writeResponse writes an event carrying the response object.
func (r *responder) writeResponse(typ, status string, e *apiError) {
	b := r.start(typ)
	b = append(b, `,"response":`...)
	b = r.appendResponse(b, status, e)
	r.end(b)
}

// appendResponse writes the response object: in_progress has no usage,
// failed has the error.
func (r *responder) appendResponse(b []byte, status string, e *apiError) []byte {
	g := r.g
	b = append(b, `{"id":`...)
	b = appendString(b, r.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, g.arrival.Unix(), 10)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","background":false,"completed_at":`...)
	if status == "completed" {
		b = strconv.AppendInt(b, time.Now().Unix(), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"error":`...)
	b = appendRespError(b, e)
	b = append(b, `,"incomplete_details":`...)
	if status == "incomplete" {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, g.j.resp.echo...)
	b = append(b, `,"output":[`...)
	if status != "in_progress" {
		for i, it := range r.items {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendItem(b, it, true)
		}
	}
	b = append(b, `],"usage":`...)
	if status == "in_progress" {
		b = append(b, "null"...)
	} else {
		b = r.appendUsage(b)
	}
	return append(b, '}')
}

// appendRespError writes a failed response's error, {"code", "message"}
// (null for nil).
func appendRespError(b []byte, e *apiError) []byte {
	if e == nil {
		return append(b, "null"...)
	}
	code := e.code
	if code == "" {
		code = e.typ
	}
	b = append(b, `{"code":`...)
	b = appendString(b, code)
	b = append(b, `,"message":`...)
	b = appendString(b, e.msg)
	return append(b, '}')
}

// appendUsage writes the usage object. The reasoning tokens are counted by
// encoding the reasoning text.
func (r *responder) appendUsage(b []byte) []byte {
	in, out := r.g.promptTokens(), r.g.completionTokens()
	reasoning := 0
	for _, it := range r.items {
		if it.typ == itemReasoning {
			reasoning += len(r.g.s.tok.Encode(it.text.String()))
		}
	}
	b = append(b, `{"input_tokens":`...)
	b = appendInt(b, in)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = appendInt(b, r.g.cachedTokens())
	b = append(b, `},"output_tokens":`...)
	b = appendInt(b, out)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = appendInt(b, min(reasoning, out))
	b = append(b, `},"total_tokens":`...)
	b = appendInt(b, in+out)
	return append(b, '}')
}

// appendItem writes an output item; an item not yet done (full false) has
// no text.
func appendItem(b []byte, it *respItem, full bool) []byte {
	text := ""
	if full {
		text = it.text.String()
	}
	b = append(b, `{"id":`...)
	b = appendString(b, it.id)
	b = append(b, `,"type":"`...)
	b = append(b, it.typ...)
	b = append(b, `","status":"`...)
	b = append(b, it.status...)
	b = append(b, '"')
	switch it.typ {
	case itemCall:
		b = append(b, `,"call_id":`...)
		b = appendString(b, it.callID)
		b = append(b, `,"name":`...)
		b = appendString(b, it.name)
		b = append(b, `,"arguments":`...)
		return append(appendString(b, text), '}')
	case itemReasoning:
		b = append(b, `,"summary":[],"content":[`...)
	default:
		b = append(b, `,"role":"assistant","content":[`...)
	}
	if full {
		b = appendPart(b, it, text)
	}
	return append(b, "]}"...)
}

// appendPart writes the content part of a reasoning or message item.
func appendPart(b []byte, it *respItem, text string) []byte {
	if it.typ == itemReasoning {
		b = append(b, `{"type":"reasoning_text","text":`...)
		return append(appendString(b, text), '}')
	}
	b = append(b, `{"type":"output_text","text":`...)
	b = appendString(b, text)
	return append(b, `,"annotations":[],"logprobs":[]}`...)
}
