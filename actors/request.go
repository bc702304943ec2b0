package actors

import (
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors/planner"
	"cohort/model/grammar"
	"cohort/model/sample"
	"cohort/model/tokenizer"
)

// Request is one generation request as the engine runs it.
type Request struct {
	ID           planner.RequestID
	Prompt       []int32
	MaxTokens    int
	Params       sample.Params
	Stop         []string // stop strings: matched across token boundaries, never emitted
	StopTokenIDs []int32
	IgnoreEOS    bool
	TopLogprobs  int // alternatives per token (0 = none)
	// Logprobs asks for each generated token's logprob (Event.Logprob);
	// TopLogprobs > 0 implies it. Without either, Event.Logprob is 0 and
	// the sampler skips normalizing the distribution.
	Logprobs bool
	// PromptLogprobs asks for the logprob of every prompt token after the
	// first (with TopLogprobs alternatives); they come with the first
	// generated token's event (Event.PromptLogprobs).
	PromptLogprobs bool
	// SkipSpecialTokens leaves the text of special tokens (the tokenizer's
	// added tokens marked special, such as <|im_end|>) out of the output,
	// as vLLM's skip_special_tokens (which defaults to true there; the
	// zero value here keeps them).
	SkipSpecialTokens bool
	// IncludeStopStr keeps the matched stop string, or the text of the EOS
	// or stop token id that ended the request, in the output (vLLM's
	// include_stop_str_in_output; a special token still follows
	// SkipSpecialTokens).
	IncludeStopStr bool
	// Grammar, when set, constrains the output: each step samples only
	// tokens it allows, and the request ends (finish "stop") once it is
	// complete. It must come from the engine's Grammars cache.
	Grammar *grammar.Grammar
	// Boundaries are prompt offsets where later requests are likely to
	// part from this one: the chat template's (the end of the system and
	// tool part, the end of each earlier turn). The prefix cache keeps a
	// state snapshot at the last block boundary at or before each.
	Boundaries []int
	// Trace is the span of the request's caller (the HTTP server span);
	// the engine step spans that run the request join its trace (see
	// startStepSpan). The zero value leaves the steps in traces of their
	// own.
	Trace trace.SpanContext
}

// requestActor renders one request's output for its stream:
// detokenization (streaming-safe UTF-8), stop strings across token
// boundaries (the one end decided on text: it reports a match to the
// scheduler with FinishRequest), prompt logprobs and usage. It keeps no
// token list and no count of its own: each TokenGenerated brings the token,
// the count and any end from the request's completion, the scheduler's
// record (completion.go).
type requestActor struct {
	req    *Request
	sched  *actor.PID
	stream *Stream
	tok    *tokenizer.Tokenizer
	dec    *tokenizer.StreamDecoder
	held   string // text withheld because it may begin a stop string
	usage  Usage
	prompt []sample.Result // prompt logprobs not yet delivered
}

func newRequestActor(req *Request, sched *actor.PID, stream *Stream, tok *tokenizer.Tokenizer) actor.Producer {
	return func() actor.Actor {
		return &requestActor{req: req, sched: sched, stream: stream, tok: tok, dec: tok.NewStreamDecoder(),
			usage: Usage{PromptTokens: len(req.Prompt)}}
	}
}

func (a *requestActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		ctx.Send(a.sched, &AdmitRequest{Req: a.req, PID: ctx.Self()})
	case *PromptScored:
		a.prompt = append(a.prompt, msg.Result)
	case *TokenGenerated:
		a.token(ctx, msg)
	case *RequestRejected:
		a.finish(ctx, Event{Finish: "error", Err: msg.Err})
	case *CancelRequest:
		ctx.Send(a.sched, &AbortRequest{ID: a.req.ID})
		a.finish(ctx, Event{Finish: "cancelled"})
	default:
		ReportUnexpected("request", msg)
	}
}

func (a *requestActor) token(ctx actor.Context, msg *TokenGenerated) {
	a.usage.CompletionTokens = msg.N
	if msg.N == 1 {
		a.usage.CachedTokens = msg.CachedTokens
	}
	ev := Event{Token: msg.Result.Token.ID, Logprob: msg.Result.Token.Logprob, Top: msg.Result.Top, HasToken: true,
		ScheduledAt: msg.ScheduledAt, PromptLogprobs: a.prompt}
	a.prompt = nil
	text := a.held
	if (!msg.StopToken || a.req.IncludeStopStr) && !(a.req.SkipSpecialTokens && a.tok.IsSpecial(ev.Token)) {
		text += a.dec.Add(ev.Token)
	}
	if msg.Finish != "" {
		text += a.dec.Flush()
	}
	// Stop strings count from the min_tokens-th token on (vLLM's rule).
	if cut, ok := a.matchStop(text); ok && a.usage.CompletionTokens >= a.req.Params.MinTokens {
		ctx.Send(a.sched, &FinishRequest{ID: a.req.ID})
		ev.Text, ev.Finish = cut, "stop"
		a.finish(ctx, ev)
		return
	}
	ev.Text, a.held = a.splitHeld(text, msg.Finish != "")
	if msg.Finish != "" {
		ev.Finish, ev.Err = msg.Finish, msg.Err
		a.finish(ctx, ev)
		return
	}
	a.push(ev)
}

func (a *requestActor) push(ev Event) {
	ev.Time = time.Now()
	a.stream.push(ev)
}

// matchStop returns the text before the earliest stop string in text (up
// to its end with IncludeStopStr).
func (a *requestActor) matchStop(text string) (string, bool) {
	best, end := -1, 0
	for _, s := range a.req.Stop {
		if i := strings.Index(text, s); i >= 0 && (best < 0 || i < best) {
			best, end = i, i+len(s)
		}
	}
	if best < 0 {
		return "", false
	}
	if a.req.IncludeStopStr {
		return text[:end], true
	}
	return text[:best], true
}

// splitHeld emits text except a suffix that could still grow into a stop
// string; at the end everything is emitted.
func (a *requestActor) splitHeld(text string, final bool) (emit, held string) {
	if final {
		return text, ""
	}
	keep := 0
	for _, s := range a.req.Stop {
		for n := min(len(s)-1, len(text)); n > keep; n-- {
			if strings.HasSuffix(text, s[:n]) {
				keep = n
				break
			}
		}
	}
	return text[:len(text)-keep], text[len(text)-keep:]
}

func (a *requestActor) finish(ctx actor.Context, ev Event) {
	ev.Usage = a.usage
	a.push(ev)
	ctx.Stop(ctx.Self())
}
