package httpapi

import (
	"strings"

	"cohort/httpapi/reasoning"
	"cohort/httpapi/toolcall"
)

// deltaKind says what a piece of a chat choice's output is.
type deltaKind uint8

const (
	contentDelta   deltaKind = iota
	reasoningDelta           // reasoning (the think block)
	callStartDelta           // a tool call's id and name
	callArgsDelta            // a fragment of a tool call's JSON arguments
)

// outDelta is one piece of a chat choice's output, in order.
type outDelta struct {
	kind deltaKind
	text string // content, reasoning, or the arguments fragment
	call int    // the tool call's index
	id   string // callStartDelta: the call's id
	name string // callStartDelta: the function
}

// toolCallOut is one parsed tool call of a finished choice.
type toolCallOut struct {
	id, name string
	args     strings.Builder
}

// chatOutput splits one chat choice's generated text into reasoning (when
// the template thinks), content and tool calls (when the request has
// tools), incrementally: feed takes each text delta, finish ends the
// output. Tool calls are looked for only in the content, after the
// reasoning. It also keeps the whole result for non-streamed responses.
type chatOutput struct {
	think *reasoning.Parser // nil: no reasoning split
	tools *toolcall.Parser  // nil: the content has no calls

	reasoning strings.Builder
	content   strings.Builder
	calls     []*toolCallOut
	out       []outDelta
}

func newChatOutput(j *job) *chatOutput {
	o := &chatOutput{}
	if j.reasoning {
		o.think = reasoning.NewParser(j.thinkOpen)
	}
	if j.tools.parse() {
		o.tools = j.tools.parser()
	}
	return o
}

// feed consumes a text delta and returns the deltas it completes (reused
// by the next call).
func (o *chatOutput) feed(text string) []outDelta {
	o.out = o.out[:0]
	o.add(text, false)
	return o.out
}

// finish ends the output and returns the last deltas.
func (o *chatOutput) finish() []outDelta {
	o.out = o.out[:0]
	o.add("", true)
	return o.out
}

func (o *chatOutput) add(text string, final bool) {
	if o.think == nil {
		o.addContent(text, final)
		return
	}
	feed(o.think, text, final, o.thinkEvent)
	if final {
		o.addContent("", true)
	}
}

// incremental is an incremental parser of output text: reasoning.Parser
// and toolcall.Parser.
type incremental[E any] interface {
	Feed(text string) []E
	Finish() []E
}

// feed passes text, and when final the end, through p, handing each
// event to each.
func feed[E any](p incremental[E], text string, final bool, each func(E)) {
	if text != "" {
		for _, ev := range p.Feed(text) {
			each(ev)
		}
	}
	if final {
		for _, ev := range p.Finish() {
			each(ev)
		}
	}
}

func (o *chatOutput) thinkEvent(ev reasoning.Event) {
	if !ev.Reasoning {
		o.addContent(ev.Text, false)
		return
	}
	o.reasoning.WriteString(ev.Text)
	if n := len(o.out); n > 0 && o.out[n-1].kind == reasoningDelta {
		o.out[n-1].text += ev.Text
		return
	}
	o.out = append(o.out, outDelta{kind: reasoningDelta, text: ev.Text})
}

// addContent takes content text: tool calls are parsed out of it.
func (o *chatOutput) addContent(text string, final bool) {
	if o.tools == nil {
		o.emitContent(text)
		return
	}
	feed(o.tools, text, final, o.toolEvent)
}

func (o *chatOutput) toolEvent(ev toolcall.Event) {
	switch ev.Kind {
	case toolcall.Text:
		o.emitContent(ev.Text)
	case toolcall.CallStart:
		id := newCallID()
		o.calls = append(o.calls, &toolCallOut{id: id, name: ev.Name})
		o.out = append(o.out, outDelta{kind: callStartDelta, call: ev.Call, id: id, name: ev.Name})
	case toolcall.CallArgs:
		o.calls[ev.Call].args.WriteString(ev.Text)
		o.out = append(o.out, outDelta{kind: callArgsDelta, call: ev.Call, text: ev.Text})
	}
}

func (o *chatOutput) emitContent(s string) {
	if s == "" {
		return
	}
	o.content.WriteString(s)
	if n := len(o.out); n > 0 && o.out[n-1].kind == contentDelta {
		o.out[n-1].text += s
		return
	}
	o.out = append(o.out, outDelta{kind: contentDelta, text: s})
}

// finishReason is the choice's finish_reason: "tool_calls" when it made
// calls (as vLLM reports it, whatever ended the generation), else the
// engine's.
func (o *chatOutput) finishReason(engine string) string {
	if len(o.calls) > 0 {
		return "tool_calls"
	}
	return engine
}

// newCallID returns a tool call id (OpenAI's call_ prefix, 24 random hex
// digits).
func newCallID() string { return newItemID("call_") }

// appendMessage writes a finished chat choice's message object; with the
// reasoning split on it has reasoning_content (null without reasoning).
func (o *chatOutput) appendMessage(b []byte) []byte {
	b = append(b, `{"role":"assistant","content":`...)
	if o.content.Len() == 0 && (len(o.calls) > 0 || o.reasoning.Len() > 0) {
		b = append(b, "null"...)
	} else {
		b = appendString(b, o.content.String())
	}
	if o.think != nil {
		b = append(b, `,"reasoning_content":`...)
		if o.reasoning.Len() == 0 {
			b = append(b, "null"...)
		} else {
			b = appendString(b, o.reasoning.String())
		}
	}
	if len(o.calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range o.calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, c.id)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, c.name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, c.args.String())
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendDelta writes the delta object of one streamed piece.
func appendDelta(b []byte, d outDelta) []byte {
	switch d.kind {
	case callStartDelta:
		b = append(b, `{"tool_calls":[{"index":`...)
		b = appendInt(b, d.call)
		b = append(b, `,"id":`...)
		b = appendString(b, d.id)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, d.name)
		return append(b, `,"arguments":""}}]}`...)
	case callArgsDelta:
		b = append(b, `{"tool_calls":[{"index":`...)
		b = appendInt(b, d.call)
		b = append(b, `,"function":{"arguments":`...)
		b = appendString(b, d.text)
		return append(b, "}}]}"...)
	}
	if d.kind == reasoningDelta {
		b = append(b, `{"reasoning_content":`...)
	} else {
		b = append(b, `{"content":`...)
	}
	b = appendString(b, d.text)
	return append(b, '}')
}
