package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/planner"
	"cohort/model"
	"cohort/model/sample"
)

// Messages are pointer structs in sealed families: a marker method says which
// actor accepts them. Commands are imperative, events are in the past tense.
// This file holds the engine family (accepted by the engine root) and the
// request family (accepted by a request actor); the rank family is in
// rankmessages.go.

// EngineMessage is accepted by the engine root. It is sealed: only this
// package makes engine messages (a host of remote ranks relays them).
type EngineMessage interface{ engineMessage() }

// requestMessage is accepted by a request actor.
type requestMessage interface{ requestMessage() }

// --- engine family: replies of the ranks ---

// ShardReady reports that a rank loaded its shard (or failed to).
type ShardReady struct {
	Generation uint64
	Rank       int
	Capacity   model.Capacity
	Err        error
}

// StepCompleted is a rank's reply to RunStep. Rank 0 carries the
// results: one for each of the step's output rows, in their order (a drawn
// token, or the score of a prompt token for a row with Score); the engine
// knows from its step whose each one is.
type StepCompleted struct {
	Generation uint64
	Step       uint64
	Rank       int
	Results    []sample.Result
	Err        error
}

// RankLost reports that a rank in another process is gone (its worker died
// or stopped answering); its proxy, the engine root's child, sends it.
type RankLost struct {
	Generation uint64
	Rank       int
	Err        error
}

// RankCommFailed reports that the communicator of a rank in another
// process reported an asynchronous error (its worker polls it); its proxy,
// the engine root's child, sends it.
type RankCommFailed struct {
	Generation uint64
	Rank       int
	Err        error
}

// --- engine family: supervision's own events ---

type (
	// stepDeadlineExceeded: the step's replies did not all arrive in time.
	stepDeadlineExceeded struct {
		gen, step uint64
	}
	// rebuildTimedOut: the generation did not load within RecoveryTimeout.
	rebuildTimedOut struct{ gen uint64 }
	// commFailed: a communicator reported an asynchronous error.
	commFailed struct {
		gen  uint64
		rank int
		err  error
	}
	// rankPanicked: a rank panicked in Receive (from HandleFailure).
	rankPanicked struct {
		gen    uint64
		rank   int
		reason error
	}
	// checkProgress is the progress watchdog's tick.
	checkProgress struct{}
)

// InjectFault asks the engine root to inject a fault (tests, debug endpoint).
type InjectFault struct{ Fault Fault }

// --- engine family: requests and queries ---

// AdmitRequest asks the scheduler to queue a request.
type AdmitRequest struct {
	Req *Request
	PID *actor.PID // the request actor
}

// AbortRequest tells the scheduler a request is gone (cancelled by its client).
type AbortRequest struct{ ID planner.RequestID }

// FinishRequest tells the scheduler a request ended on a stop string (a
// condition on text, which only the request actor renders).
type FinishRequest struct{ ID planner.RequestID }

// queryStats asks the scheduler for its planner statistics.
type queryStats struct{}

// querySupervision asks for the supervision statistics.
type querySupervision struct{}

// queryInfo asks for the engine's shape and capacity.
type queryInfo struct{}

// resetPrefixCache asks the scheduler to empty the prefix cache.
type resetPrefixCache struct{}

func (*ShardReady) engineMessage()           {}
func (*StepCompleted) engineMessage()        {}
func (*RankLost) engineMessage()             {}
func (*RankCommFailed) engineMessage()       {}
func (*stepDeadlineExceeded) engineMessage() {}
func (*rebuildTimedOut) engineMessage()      {}
func (*commFailed) engineMessage()           {}
func (*rankPanicked) engineMessage()         {}
func (*checkProgress) engineMessage()        {}
func (*InjectFault) engineMessage()          {}
func (*AdmitRequest) engineMessage()         {}
func (*AbortRequest) engineMessage()         {}
func (*FinishRequest) engineMessage()        {}
func (*queryStats) engineMessage()           {}
func (*querySupervision) engineMessage()     {}
func (*queryInfo) engineMessage()            {}
func (*resetPrefixCache) engineMessage()     {}

// --- request family ---

// TokenGenerated delivers one generated token to its request actor, with
// what the request's completion (the scheduler's record of its tokens)
// knows: how many tokens it has now and, when it ends with this one, why
// (Finish: length, EOS, a stop token id, a complete grammar or an error).
type TokenGenerated struct {
	Result    sample.Result
	N         int // tokens generated so far, this one included
	Finish    string
	StopToken bool  // the token is EOS or a stop token id: its text is not emitted
	Err       error // with Finish "error": why the request ended
	// ScheduledAt is set on a request's first token: when its prefill first ran.
	ScheduledAt time.Time
	// CachedTokens, on a request's first token, is how many prompt tokens
	// its first admission resumed from the prefix cache.
	CachedTokens int
}

// PromptScored carries the logprob of one prompt token (position Pos,
// counted from the prompt's start) to its request actor, in position order.
type PromptScored struct {
	Pos    int
	Result sample.Result
}

// RequestRejected reports that the planner refused the request.
type RequestRejected struct{ Err error }

// CancelRequest tells a request actor its client went away.
type CancelRequest struct{}

func (*TokenGenerated) requestMessage()  {}
func (*RequestRejected) requestMessage() {}
func (*PromptScored) requestMessage()    {}
func (*CancelRequest) requestMessage()   {}
