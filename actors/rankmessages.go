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

// RunStep tells every rank to run one forward step of a plan. Like vLLM
// v1's scheduler output it carries diffs, not state: each request the
// plan admits is sent in full once (Admitted), and every step after that
// brings only what changed — its new tokens, its new pages, and the ids of
// requests that ended (Finished). The ranks keep the rest (seqCache), so a
// step's size does not grow with the length of its requests.
type RunStep struct {
	Generation uint64
	Step       uint64
	// Finished lists requests released since the previous step (finished,
	// aborted, preempted or requeued): the ranks forget them before taking
	// Admitted, which may name one of them again (a replay, a request
	// preempted and admitted anew).
	Finished []planner.RequestID
	Admitted []AdmitSeq // requests (re)admitted by this plan: their slots are zeroed before the step
	Tokens   []int32    // the tokens to compute, flat, in Seqs order
	Seqs     []StepSeq
	Outputs  []OutputRow // rows whose logits are sampled (rank 0 samples)
	// Saves are the prefix cache's snapshots to take after the forward
	// pass: each request's slot state into a place (every rank its shard,
	// under the same place). Restores come with admissions and run before
	// it.
	Saves   []SnapshotSave
	ReplyTo *actor.PID
	Trace   trace.SpanContext // the engine step's span, the parent of each rank's span of the step
}

// AdmitSeq is a request as the ranks keep it from its admission (the step
// that assigns its slot) until it is finished: sent once per admission.
type AdmitSeq struct {
	ID        planner.RequestID
	Slot      int
	PromptLen int // tokens before this length are the prompt; the rest were generated
	Sampling  Sampling
	// Cached is how many leading tokens the request resumes from the
	// prefix cache: their KV is in its first pages, and the slot takes the
	// state of snapshot place Restore (-1: none, the model keeps no slot
	// state) before the step. History holds those tokens when the request
	// is penalized (the sampling rank's history needs them); else nil.
	Cached  int
	Restore int
	History []int32
}

// SnapshotSave copies request ID's slot state into snapshot place Place
// after a step's forward pass.
type SnapshotSave struct {
	ID    planner.RequestID
	Place int
}

// Sampling is how a request's tokens are drawn and reported.
type Sampling struct {
	Params sample.Params
	TopN   int // alternatives to report with logprobs (0 = none)
	// Logprobs asks for the drawn token's logprob (implied by TopN > 0).
	Logprobs bool
}

// StepSeq is one sequence of a step: Len tokens of Tokens, following its
// previous ones. Its slot, its position and its earlier pages are what the
// ranks recorded.
type StepSeq struct {
	ID       planner.RequestID
	Len      int
	NewPages []int32 // pages added to the sequence's page table for this step
}

// OutputRow asks for a token to be drawn from one row's logits, with the
// request's Sampling, as its next generated token.
type OutputRow struct {
	ID  planner.RequestID
	Row int
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
	results []sample.Result // one for each of the step's output rows (sampling rank)
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
