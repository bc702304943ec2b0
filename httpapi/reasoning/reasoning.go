// Package reasoning splits the think block of Qwen-style reasoning models
// off their output: text between <think> and </think> is reasoning, the rest
// is content.
//
// Qwen's chat templates open the block in the prompt when thinking is on, so
// the output may start inside it (NewParser(true)) and then holds only the
// closing </think>. Otherwise an output whose first non-blank text is
// <think> opens it. Only one block counts, at the start: a <think> later in
// the content is content. The newlines the templates put inside the block
// (after <think>, before </think>) and after it are not part of either
// text, so reasoning renders back into the same block. An output that ends
// inside the block is all reasoning.
//
// The parser is incremental: text fed in any split gives the same joined
// reasoning and content, and text is emitted as soon as no marker can
// still begin in it.
package reasoning

import "strings"

const (
	openTag  = "<think>"
	closeTag = "</think>"
)

// Event is one piece of output: reasoning or content.
type Event struct {
	Reasoning bool
	Text      string
}

type state uint8

const (
	detecting state = iota // at the start: a <think> may still open the block
	inside                 // in the block
	content                // after the block, or no block
)

// Parser splits one output. It is not safe for concurrent use.
type Parser struct {
	st        state
	buf       string // text not yet emitted
	lead      bool   // drop the newlines that start the current text
	reasoning bool   // reasoning was emitted
	out       []Event
}

// NewParser returns a parser for an output that starts inside the think
// block (startInside) or before it.
func NewParser(startInside bool) *Parser {
	p := &Parser{}
	if startInside {
		p.st, p.lead = inside, true
	}
	return p
}

// HasReasoning reports whether any reasoning has been emitted.
func (p *Parser) HasReasoning() bool { return p.reasoning }

// Feed consumes text and returns the events it completes (reused by the
// next call).
func (p *Parser) Feed(text string) []Event {
	p.out = p.out[:0]
	p.buf += text
	p.run(false)
	return p.out
}

// Finish ends the output and returns the held text's events.
func (p *Parser) Finish() []Event {
	p.out = p.out[:0]
	p.run(true)
	return p.out
}

func (p *Parser) run(final bool) {
	for {
		if p.lead {
			p.buf = strings.TrimLeft(p.buf, "\n")
			if p.buf == "" && !final {
				return
			}
			p.lead = false
		}
		switch p.st {
		case detecting:
			rest := strings.TrimLeft(p.buf, " \t\r\n")
			switch {
			case strings.HasPrefix(rest, openTag):
				p.buf, p.st, p.lead = rest[len(openTag):], inside, true
				continue
			case !final && strings.HasPrefix(openTag, rest):
				return // may still become <think>
			}
			p.st = content
			continue
		case inside:
			if i := strings.Index(p.buf, closeTag); i >= 0 {
				p.emit(true, strings.TrimRight(p.buf[:i], "\n"))
				p.buf, p.st, p.lead = p.buf[i+len(closeTag):], content, true
				continue
			}
			if final {
				p.emit(true, strings.TrimRight(p.buf, "\n"))
				p.buf = ""
				return
			}
			// Hold what may begin </think>, and trailing newlines, which
			// belong to the block's frame if </think> follows.
			keep := partialSuffix(p.buf, closeTag)
			body := p.buf[:len(p.buf)-keep]
			trimmed := strings.TrimRight(body, "\n")
			p.emit(true, trimmed)
			p.buf = p.buf[len(trimmed):]
			return
		case content:
			p.emit(false, p.buf)
			p.buf = ""
			return
		}
	}
}

func (p *Parser) emit(reasoning bool, s string) {
	if s == "" {
		return
	}
	if reasoning {
		p.reasoning = true
	}
	if n := len(p.out); n > 0 && p.out[n-1].Reasoning == reasoning {
		p.out[n-1].Text += s
		return
	}
	p.out = append(p.out, Event{Reasoning: reasoning, Text: s})
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
