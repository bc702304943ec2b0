package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors/planner"
	"cohort/kernels"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
	"cohort/supervision"
)

// The rank family: the messages a rank actor accepts (see messages.go for
// the conventions). A rank's replies (ShardReady, StepCompleted) belong to
// the engine family.

// rankMessage is accepted by a rank actor.
type rankMessage interface{ rankMessage() }

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

// rankBound hands the loaded shard from the executor back to the actor.
type rankBound struct {
	be       kernels.Backend
	m        model.Model
	st       model.State
	capacity model.Capacity
	replyTo  *actor.PID
	err      error
}

// injectPanic makes a rank actor panic inside Receive (fault injection).
type injectPanic struct{}

func (*LoadShard) rankMessage()    {}
func (*RunStep) rankMessage()      {}
func (*stepExecuted) rankMessage() {}
func (*rankBound) rankMessage()    {}
func (*injectPanic) rankMessage()  {}
