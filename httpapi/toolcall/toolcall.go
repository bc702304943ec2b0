// Package toolcall parses the tool calls Qwen3.5 models write, in their XML
// form, out of a stream of generated text:
//
//	<tool_call>
//	<function=get_weather>
//	<parameter=city>
//	Paris
//	</parameter>
//	<parameter=days>
//	3
//	</parameter>
//	</function>
//	</tool_call>
//
// Text outside the calls is content. Each call becomes a name and a JSON
// object of its parameters, each value converted to the JSON type the
// tool's schema gives it (see Convert). The parser is incremental: fed
// text in arbitrary pieces, it emits content as soon as it cannot begin a
// call, a call's name as soon as it is complete, and the arguments as JSON
// fragments (one per parameter) whose concatenation is a valid JSON object.
// Feeding the same text in any split gives the same joined result.
//
// Like vLLM's qwen3_coder parser it is lenient where models are sloppy: a
// parameter may end at the next <parameter=, at </function> or at the end
// of the output, and a call left open when the output ends is closed.
package toolcall

import (
	"encoding/json"
	"strings"
)

// Tool is what the parser needs of one declared function: its name and
// the JSON Schema of each parameter (from parameters.properties).
type Tool struct {
	Name       string
	Properties map[string]any
	Schema     json.RawMessage // the parameters' JSON Schema as sent (nil: none)
}

// Kind says what an Event carries.
type Kind uint8

const (
	// Text is content outside any call.
	Text Kind = iota
	// CallStart opens call number Call with its Name.
	CallStart
	// CallArgs is the next fragment of call Call's JSON arguments.
	CallArgs
)

// Event is one piece of parsed output.
type Event struct {
	Kind Kind
	Text string // Text: the content; CallArgs: the JSON fragment
	Call int    // CallStart, CallArgs: the call's index (0, 1, ...)
	Name string // CallStart: the function's name
}

// Markers of the format.
const (
	openCall   = "<tool_call>"
	closeCall  = "</tool_call>"
	openFunc   = "<function="
	closeFunc  = "</function>"
	openParam  = "<parameter="
	closeParam = "</parameter>"
	maxName    = 256 // longer function or parameter names are not a call
)

type state uint8

const (
	inText     state = iota // content
	afterOpen               // after <tool_call>, before <function=
	inFuncName              // after <function=, before >
	inFunc                  // between parameters
	inParam                 // after <parameter=NAME>, in the value
	afterFunc               // after </function>, before </tool_call>
)

// Parser is an incremental tool-call parser. It is not safe for concurrent
// use.
type Parser struct {
	tools    map[string]Tool
	single   bool // parallel_tool_calls false: keep the first call only
	st       state
	buf      string // text not yet consumed
	raw      string // text of the call being opened (for the content fallback)
	calls    int    // calls started
	params   int    // parameters emitted in the current call
	seen     map[string]bool
	tool     Tool
	param    string
	dropping bool // the current call is past the first with single set: parse, emit nothing
	trimLead bool // a call just ended: drop the whitespace that follows it
	keepOut  bool // out holds StartInCall's event for the next Feed or Finish
	out      []Event
}

// NewParser returns a parser for the given tools. With single, only the
// first call is reported (OpenAI's parallel_tool_calls false); later ones
// are parsed and dropped.
func NewParser(tools []Tool, single bool) *Parser {
	m := make(map[string]Tool, len(tools))
	for _, t := range tools {
		m[t.Name] = t
	}
	return &Parser{tools: m, single: single}
}

// StartInCall makes the parser begin as if "<tool_call>\n<function=" had
// already been read (the prompt opened the call); with name set, as if
// "<function=name>" had been read too, and the next Feed or Finish reports
// the call's start first. Call it before any Feed.
func (p *Parser) StartInCall(name string) {
	if name == "" {
		p.st, p.raw = inFuncName, openCall+"\n"+openFunc
		return
	}
	p.startCall(name)
	p.keepOut = true
}

// begin starts the events of one Feed or Finish.
func (p *Parser) begin() {
	if !p.keepOut {
		p.out = p.out[:0]
	}
	p.keepOut = false
}

// Calls returns how many calls have been reported so far.
func (p *Parser) Calls() int {
	if p.single {
		return min(p.calls, 1)
	}
	return p.calls
}

// Feed consumes text and returns the events it completes. The returned
// slice is reused by the next call.
func (p *Parser) Feed(text string) []Event {
	p.begin()
	p.buf += text
	for p.step(false) {
	}
	return p.out
}

// Finish ends the output: held text becomes content, and an open call is
// closed (its arguments completed to a valid object).
func (p *Parser) Finish() []Event {
	p.begin()
	for p.step(true) {
	}
	switch p.st {
	case inText:
		p.text(p.buf)
	case afterOpen, inFuncName:
		p.text(p.raw + p.buf)
	case inParam:
		p.endParam(p.buf)
		p.endCall()
	case inFunc:
		p.endCall()
	}
	p.buf, p.raw, p.st = "", "", inText
	return p.out
}

// step makes one transition if the buffer allows it and reports whether
// it did. final says no more text will come.
func (p *Parser) step(final bool) bool {
	switch p.st {
	case inText:
		i := strings.Index(p.buf, openCall)
		if i < 0 {
			keep := partialSuffix(p.buf, openCall)
			if final {
				return false
			}
			p.text(p.buf[:len(p.buf)-keep])
			p.buf = p.buf[len(p.buf)-keep:]
			return false
		}
		p.text(p.buf[:i])
		p.raw, p.buf, p.st = openCall, p.buf[i+len(openCall):], afterOpen
		return true
	case afterOpen:
		rest := strings.TrimLeft(p.buf, " \t\r\n")
		if strings.HasPrefix(rest, openFunc) {
			p.raw += p.buf[:len(p.buf)-len(rest)+len(openFunc)]
			p.buf, p.st = rest[len(openFunc):], inFuncName
			return true
		}
		if strings.HasPrefix(openFunc, rest) && !final {
			return false // may still become <function=
		}
		p.fallback()
		return true
	case inFuncName:
		// The checks on a name read so far only fail if they fail on every
		// longer one, so the result does not depend on how the text was
		// split: the raw length, the trimmed length and the characters
		// inside the trimmed name only grow.
		i := strings.IndexByte(p.buf, '>')
		head := p.buf
		if i >= 0 {
			head = p.buf[:i]
		}
		name := strings.TrimSpace(head)
		if len(head) > 2*maxName || len(name) > maxName || strings.ContainsAny(name, "<\n") {
			p.fallback()
			return true
		}
		if i < 0 {
			return false
		}
		if name == "" {
			p.fallback()
			return true
		}
		p.buf = p.buf[i+1:]
		p.startCall(name)
		return true
	case inFunc:
		rest := strings.TrimLeft(p.buf, " \t\r\n")
		switch {
		case strings.HasPrefix(rest, openParam):
			i := strings.IndexByte(rest, '>')
			if i < 0 {
				if len(rest) > len(openParam)+maxName && !final {
					p.buf = rest[len(openParam):] // a runaway name: skip the marker
				}
				return false
			}
			if i > len(openParam)+maxName {
				// The same runaway name, read whole: skip the marker as
				// the streaming read above does, so the split does not
				// change the result.
				p.buf = rest[len(openParam):]
				return true
			}
			p.param = strings.TrimSpace(rest[len(openParam):i])
			p.buf, p.st = rest[i+1:], inParam
			return true
		case strings.HasPrefix(rest, closeFunc):
			p.buf = rest[len(closeFunc):]
			p.endCall()
			p.st = afterFunc
			return true
		case strings.HasPrefix(rest, closeCall):
			p.buf = rest[len(closeCall):]
			p.endCall()
			p.st = inText
			return true
		case rest == "" || (!final && (strings.HasPrefix(openParam, rest) || strings.HasPrefix(closeFunc, rest) ||
			strings.HasPrefix(closeCall, rest))):
			p.buf = rest
			return false
		}
		// Stray text between parameters: skip to the next marker.
		if j := strings.IndexByte(rest[1:], '<'); j >= 0 {
			p.buf = rest[1+j:]
			return true
		}
		p.buf = ""
		return false
	case inParam:
		end, next := -1, 0
		for _, m := range []string{closeParam, openParam, closeFunc, closeCall} {
			if i := strings.Index(p.buf, m); i >= 0 && (end < 0 || i < end) {
				end, next = i, i
				if m == closeParam {
					next = i + len(m)
				}
			}
		}
		if end < 0 {
			return false
		}
		p.endParam(p.buf[:end])
		p.buf, p.st = p.buf[next:], inFunc
		return true
	case afterFunc:
		rest := strings.TrimLeft(p.buf, " \t\r\n")
		if strings.HasPrefix(rest, closeCall) {
			p.buf, p.st = rest[len(closeCall):], inText
			return true
		}
		if rest == "" || (strings.HasPrefix(closeCall, rest) && !final) {
			p.buf = rest
			return false
		}
		p.buf, p.st = rest, inText // </tool_call> missing: carry on
		return true
	}
	return false
}

// fallback gives up on a call that never named its function: what was read
// of it is content again, and parsing resumes after its <tool_call>.
func (p *Parser) fallback() {
	p.text(openCall)
	p.buf = p.raw[len(openCall):] + p.buf
	p.raw, p.st = "", inText
}

func (p *Parser) text(s string) {
	if p.trimLead {
		s = strings.TrimLeft(s, " \t\r\n")
	}
	if s == "" {
		return
	}
	p.trimLead = false
	if n := len(p.out); n > 0 && p.out[n-1].Kind == Text {
		p.out[n-1].Text += s
		return
	}
	p.out = append(p.out, Event{Kind: Text, Text: s})
}

func (p *Parser) startCall(name string) {
	p.raw = ""
	p.tool = p.tools[name]
	p.tool.Name = name
	p.params = 0
	p.seen = map[string]bool{}
	p.dropping = p.single && p.calls > 0
	p.calls++
	p.st = inFunc
	if !p.dropping {
		p.out = append(p.out, Event{Kind: CallStart, Call: p.calls - 1, Name: name})
	}
}

func (p *Parser) args(s string) {
	if p.dropping {
		return
	}
	p.out = append(p.out, Event{Kind: CallArgs, Call: p.calls - 1, Text: s})
}

// endParam emits the parameter just read (its raw value between the
// markers, one leading and one trailing newline removed).
func (p *Parser) endParam(raw string) {
	name := p.param
	p.param = ""
	if name == "" || p.seen[name] {
		return // a nameless or repeated parameter: the first one stands
	}
	p.seen[name] = true
	raw = strings.TrimPrefix(raw, "\n")
	raw = strings.TrimSuffix(raw, "\n")
	key, _ := json.Marshal(name)
	sep := ", "
	if p.params == 0 {
		sep = "{"
	}
	p.params++
	p.args(sep + string(key) + ": " + string(Convert(raw, p.tool.Properties[name])))
}

func (p *Parser) endCall() {
	p.trimLead = true
	if p.params == 0 {
		p.args("{}")
	} else {
		p.args("}")
	}
	p.params = 0
}

// partialSuffix returns the length of the longest suffix of s that is a
// proper prefix of marker.
func partialSuffix(s, marker string) int {
	for n := min(len(marker)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, marker[:n]) {
			return n
		}
	}
	return 0
}
