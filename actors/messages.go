package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors/planner"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
	"cohort/supervision"
)

// Messages are pointer structs in sealed families: a marker method says which
// actor accepts them. Commands are imperative, events are in the past tense.

// rankMessage is accepted by a rank actor.
type rankMessage interface{ rankMessage() }

// schedulerMessage is accepted by the scheduler actor.
type schedulerMessage interface{ schedulerMessage() }

// requestMessage is accepted by a request actor.
type requestMessage interface{ requestMessage() }

// --- rank family ---

// LoadShard tells a rank to load its shard and allocate its request state.
type LoadShard struct {
	Checkpoint *model.Checkpoint
	Shard      model.Shard
	Comm       nccl.Communicator
	Capacity   model.CapacityInput
	Poison     *supervision.Poison // the group generation's executor poison
	Faults     *rankFaults         // armed injected faults (nil when disabled)
	ReplyTo    *actor.PID
}

// RunStep tells every rank to run one forward step of a plan.
type RunStep struct {
	Generation uint64
	Step       uint64
	Tokens     []int32
	Positions  []int32
	Seqs       []StepSeq
	Reset      []int       // slots to zero before the step
	Outputs    []OutputRow // rows whose logits are sampled (rank 0 samples)
	ReplyTo    *actor.PID
	Trace      trace.SpanContext // the engine step's span, the parent of each rank's span of the step
}

// StepSeq is one sequence of a step (see kernels.Seq).
type StepSeq struct {
	ID     planner.RequestID
	Slot   int
	Start  int
	Len    int
	Cached int
	Pages  []int32
}

// OutputRow asks for a token to be sampled from one row's logits.
type OutputRow struct {
	ID     planner.RequestID
	Row    int
	Params sample.Params
	Index  int // the request's generated-token index (drives the seeded draw)
	TopN   int // alternatives to report with logprobs (0 = none)
	// Logprobs asks for the drawn token's logprob (implied by TopN > 0).
	Logprobs bool
	// Prompt and Generated are sent only when a penalty needs them.
	Prompt, Generated []int32
	// Mask, for a constrained request, is the set of tokens its grammar
	// allows at this step (shared and read-only); nil: any token.
	Mask *sample.Mask
	// Score asks for the logprob of Target (the prompt token at position
	// Pos) instead of a draw: prompt logprobs.
	Score  bool
	Target int32
	Pos    int
}

// stepExecuted is the device executor's result, sent back to its rank actor.
type stepExecuted struct {
	step    *RunStep
	samples []Sampled
	err     error
}

func (*LoadShard) rankMessage()    {}
func (*RunStep) rankMessage()      {}
func (*stepExecuted) rankMessage() {}

// --- scheduler family ---

// ShardReady reports that a rank loaded its shard (or failed to).
type ShardReady struct {
	Generation uint64
	Rank       int
	Capacity   model.Capacity
	Err        error
}

// StepCompleted is a rank's reply to RunStep. Rank 0 carries the samples.
type StepCompleted struct {
	Generation uint64
	Step       uint64
	Rank       int
	Samples    []Sampled
	Err        error
}

// Sampled is one sampled token with its logprobs.
type Sampled struct {
	ID     planner.RequestID
	Result sample.Result
	// Scored marks the logprob of the prompt token at Pos (an OutputRow
	// with Score), not a generated token.
	Scored bool
	Pos    int
}

// AdmitRequest asks the scheduler to queue a request.
type AdmitRequest struct {
	Req *Request
	PID *actor.PID // the request actor
}

// AbortRequest tells the scheduler a request is gone (cancelled by its client).
type AbortRequest struct{ ID planner.RequestID }

// FinishRequest tells the scheduler a request ended on a stop string.
type FinishRequest struct{ ID planner.RequestID }

// queryStats asks the scheduler for its planner statistics.
type queryStats struct{}

// querySupervision asks for the supervision statistics.
type querySupervision struct{}

// queryInfo asks for the engine's shape and capacity.
type queryInfo struct{}

func (*querySupervision) schedulerMessage() {}
func (*queryInfo) schedulerMessage()        {}

func (*ShardReady) schedulerMessage()    {}
func (*StepCompleted) schedulerMessage() {}
func (*AdmitRequest) schedulerMessage()  {}
func (*AbortRequest) schedulerMessage()  {}
func (*FinishRequest) schedulerMessage() {}
func (*queryStats) schedulerMessage()    {}

// --- request family ---

// TokenGenerated delivers one sampled token to its request actor. Finish is
// set when the scheduler ended the request (length, EOS or a stop token id).
type TokenGenerated struct {
	Sampled
	Finish    string
	StopToken bool  // the token is EOS or a stop token id: its text is not emitted
	Err       error // with Finish "error": why the request ended
	// ScheduledAt is set on a request's first token: when its prefill first ran.
	ScheduledAt time.Time
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
