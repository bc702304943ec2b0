package actors

import (
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"cohort/kernels"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
	"cohort/supervision"
)

// BackendFactory makes the backend of one rank, inside the rank's device
// executor thread.
type BackendFactory func(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error)

// Rank is the rank actor: it owns one tensor-parallel shard of one group
// generation, its backend, its weights and its per-request state. All of it
// is touched only from Receive; the device executor gets values, not the
// actor. The engine spawns its local ranks itself; a host of ranks in
// another process (actors/remote) embeds one made by NewRank.
type Rank struct {
	index      int
	gen        uint64
	tracer     trace.Tracer
	executors  *sync.WaitGroup // the engine's running executors
	newBackend BackendFactory
	lockThread bool
	exec       *executor

	be     kernels.Backend
	m      model.Model
	st     model.State
	poison *supervision.Poison
	faults *rankFaults
	// owned is the backend the executor made; only executor jobs touch it,
	// and the last one closes it.
	owned kernels.Backend
	// reply, if set, replaces ctx.Send for the rank's replies (ShardReady,
	// StepCompleted): a remote rank turns them into protobuf.
	reply func(ctx actor.Context, to *actor.PID, msg EngineMessage)
	// timing is the executor's step phase record (COHORT_STEP_TIMING);
	// made by Receive, used only by executor jobs.
	timing *stepTiming
	// seqs is the rank's record of its admitted requests, which each step's
	// diffs update; made with the shard, used only by executor jobs (in
	// step order).
	seqs *seqCache
	// scratch watches the arena against the shard's reservation; made with
	// the shard, used only by executor jobs.
	scratch *scratchWatch
}

func newRankActor(index int, gen uint64, f BackendFactory, lockThread bool, tracer trace.Tracer, executors *sync.WaitGroup) actor.Producer {
	return func() actor.Actor {
		return &Rank{index: index, gen: gen, newBackend: f, lockThread: lockThread, tracer: tracer, executors: executors}
	}
}

// RankHost is what a host of rank actors outside the engine's process
// (actors/remote) gives each rank it makes.
type RankHost struct {
	NewBackend BackendFactory
	LockThread bool
	Tracer     trace.Tracer
	Executors  *sync.WaitGroup // counts the host's running executors
	// Reply sends the rank's replies (*ShardReady, *StepCompleted) to the
	// engine, e.g. as protobuf.
	Reply func(ctx actor.Context, to *actor.PID, msg EngineMessage)
}

// NewRank makes a rank actor for a host; it has no place in a group until
// Assign.
func NewRank(h RankHost) *Rank {
	r := &Rank{index: -1, newBackend: h.NewBackend, lockThread: h.LockThread, tracer: h.Tracer, executors: h.Executors}
	r.reply = h.Reply
	return r
}

// Assign gives the rank its place: its index in the group and the group's
// generation (steps of another generation are refused).
func (r *Rank) Assign(index int, gen uint64) { r.index, r.gen = index, gen }

// Index is the rank's index in its group (-1 before Assign).
func (r *Rank) Index() int { return r.index }

// Generation is the generation of the rank's group.
func (r *Rank) Generation() uint64 { return r.gen }

// Load loads the rank's shard on its executor; ShardReady goes to
// msg.ReplyTo.
func (r *Rank) Load(ctx actor.Context, msg *LoadShard) { r.load(ctx, msg) }

// Run runs one step on the rank's executor; StepCompleted goes to
// msg.ReplyTo.
func (r *Rank) Run(ctx actor.Context, msg *RunStep) { r.run(ctx, msg) }

// AfterExecutor runs f (on a goroutine of its own) once the rank's executor
// has run its last job, after the rank stopped.
func (r *Rank) AfterExecutor(f func()) {
	e := r.exec
	go func() {
		<-e.done
		f()
	}()
}

func (r *Rank) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.exec = newExecutor(r.lockThread, r.executors)
	case *actor.Stopped:
		// Free the device memory (weights, KV, state) of this generation
		// once the executor's queued jobs are done; a rank stuck in a
		// collective frees it when the abort releases it.
		r.exec.submit(r.closeOwned)
		r.exec.close()
		r.be, r.m, r.st, r.seqs, r.scratch = nil, nil, nil, nil, nil // the state is large; do not let a stale PID keep it
	case *LoadShard:
		r.load(ctx, msg)
	case *rankBound:
		r.be, r.m, r.st = msg.be, msg.m, msg.st
		r.seqs = newSeqCache(r.index == 0)
		r.scratch = &scratchWatch{rank: r.index, reserved: msg.capacity.Scratch}
		r.send(ctx, msg.replyTo, &ShardReady{Generation: r.gen, Rank: r.index, Capacity: msg.capacity, Err: msg.err})
	case *RunStep:
		r.run(ctx, msg)
	case *stepExecuted:
		r.send(ctx, msg.step.ReplyTo, completedStep(msg.step, r.index, msg.results, msg.err))
	case *injectPanic:
		panic(fmt.Sprintf("injected panic in rank %d", r.index))
	default:
		ReportUnexpected("rank", msg)
	}
}

// send delivers a reply of the rank.
func (r *Rank) send(ctx actor.Context, to *actor.PID, msg EngineMessage) {
	if r.reply != nil {
		r.reply(ctx, to, msg)
		return
	}
	ctx.Send(to, msg)
}

func (r *Rank) load(ctx actor.Context, msg *LoadShard) {
	r.poison, r.faults = msg.Poison, msg.Faults
	self, root, newBackend, index := ctx.Self(), ctx.ActorSystem().Root, r.newBackend, r.index
	r.exec.submit(func() {
		out := &rankBound{replyTo: msg.ReplyTo}
		out.err = protect("load shard", func() error {
			var err error
			if out.be, err = newBackend(msg.Shard, msg.Comm); err != nil {
				return err
			}
			if out.m, err = msg.Checkpoint.Load(out.be, msg.Shard); err != nil {
				return err
			}
			scratch, err := reserveScratch(out.be, out.m, msg.Capacity)
			if err != nil {
				return err
			}
			in, err := budgetFromDevice(out.be, msg.Capacity)
			if err != nil {
				return err
			}
			if out.capacity, err = msg.Checkpoint.PlanCapacity(msg.Shard, in); err != nil {
				if scratch > 0 {
					err = fmt.Errorf("%w (beside %d B of scratch reserved for a step of %d tokens)", err, scratch, in.MaxStepTokens)
				}
				return err
			}
			out.capacity.Scratch = scratch
			out.st = out.m.NewState(out.be, out.capacity.Slots, out.capacity.Pages, out.capacity.PageSize)
			allocSnapshots(out.st, &out.capacity)
			// Every rank warms the same buckets (their collectives must
			// meet), so the bound is the configured one, not the slots
			// this rank's memory gave.
			return warmDecode(index, out.be, out.m, out.st, msg.Capacity.MaxSeqs)
		})
		if out.be != nil && out.err != nil {
			closeBackend(out.be)
			out.be = nil
		}
		r.owned = out.be
		root.Send(self, out)
	})
}

func (r *Rank) run(ctx actor.Context, msg *RunStep) {
	fail := func(err error) {
		r.send(ctx, msg.ReplyTo, &StepCompleted{Generation: msg.Generation, Step: msg.Step, Rank: r.index, Err: err})
	}
	switch {
	case msg.Generation != r.gen:
		fail(fmt.Errorf("actors: rank %d of generation %d got a step of generation %d", r.index, r.gen, msg.Generation))
		return
	case r.m == nil:
		fail(fmt.Errorf("actors: rank %d has no shard loaded", r.index))
		return
	}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	// An in-process rank's executor replies to the scheduler itself: one
	// mailbox hop fewer on every step's way back. A hosted rank's reply
	// goes through its actor (its host's Reply needs the actor context).
	direct := r.reply == nil
	be, m, st, seqs, poison, faults, sampleHere, scratch := r.be, r.m, r.st, r.seqs, r.poison, r.faults, r.index == 0, r.scratch
	tracer, rank := r.tracer, r.index
	if r.timing == nil {
		r.timing = newStepTiming(r.index)
	}
	timing := r.timing
	r.exec.submit(func() {
		_, span := startRankSpan(tracer, msg, rank)
		defer span.End()
		var results []sample.Result
		err := protect("step", func() error {
			if err := poison.Err(); err != nil {
				return fmt.Errorf("actors: executor poisoned: %w", err)
			}
			if err := faults.beforeStep(); err != nil {
				return err
			}
			var err error
			results, err = executeStep(be, m, st, seqs, msg, sampleHere, timing)
			return err
		})
		if sr, ok := be.(kernels.ScratchResetter); ok {
			sr.ResetScratch()
		}
		scratch.check(be, len(msg.Tokens))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		if direct {
			root.Send(msg.ReplyTo, completedStep(msg, rank, results, err))
			return
		}
		root.Send(self, &stepExecuted{step: msg, results: results, err: err})
	})
}

// completedStep is the rank's reply to step msg.
func completedStep(msg *RunStep, rank int, results []sample.Result, err error) *StepCompleted {
	return &StepCompleted{Generation: msg.Generation, Step: msg.Step, Rank: rank, Results: results, Err: err}
}

// executeStep runs one step on a rank: apply the step's diffs to the
// rank's requests (zeroing newly assigned slots), run the forward pass over
// the flat batch and, on the sampling rank, pick tokens.
func executeStep(be kernels.Backend, m model.Model, st model.State, seqs *seqCache, msg *RunStep, sampleHere bool, timing *stepTiming) ([]sample.Result, error) {
	t0 := time.Now()
	b, draws, err := seqs.apply(st, msg)
	if err != nil {
		return nil, err
	}
	rows := make([]int, len(draws))
	for i, o := range draws {
		rows[i] = o.Row
	}
	logits, err := m.Forward(be, st, msg.Tokens, b, rows)
	if err == nil {
		err = seqs.save(st, msg)
	}
	if err != nil || !sampleHere || len(rows) == 0 {
		return nil, err
	}
	t1 := time.Now()
	if out, ok := sampleOnDevice(be, logits, draws); ok {
		t2 := time.Now()
		timing.add(decodeStep(msg), t1.Sub(t0), t2.Sub(t1), 0, t2.Sub(t0))
		return out, nil
	}
	host := be.Download(logits)
	t2 := time.Now()
	defer func() {
		t3 := time.Now()
		timing.add(decodeStep(msg), t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t3.Sub(t0))
	}()
	vocab := len(host) / len(rows)
	out := make([]sample.Result, len(rows))
	// Rows are independent (a draw depends only on its seed and index), so
	// large vocabularies are sampled in parallel.
	if len(rows) == 1 || vocab < 1<<14 {
		for i := range draws {
			out[i] = draws[i].pick(host[i*vocab : (i+1)*vocab])
		}
		return out, nil
	}
	var wg sync.WaitGroup
	for i := range draws {
		wg.Go(func() { out[i] = draws[i].pick(host[i*vocab : (i+1)*vocab]) })
	}
	wg.Wait()
	return out, nil
}

// sampleOnDevice picks the rows' tokens where the logits are, when the
// backend is a DeviceSampler: every row a plain argmax without logprobs
// takes its Argmax, any other step without a constrained row its Sample.
// It reports false when the host must sample.
func sampleOnDevice(be kernels.Backend, logits kernels.Tensor, draws []drawRow) ([]sample.Result, bool) {
	ds, ok := be.(kernels.DeviceSampler)
	if !ok {
		return nil, false
	}
	if plainArgmax(draws) {
		ids := ds.Argmax(logits)
		out := make([]sample.Result, len(draws))
		for i := range draws {
			out[i] = sample.Result{Token: sample.TokenLogprob{ID: ids[i]}}
		}
		return out, true
	}
	_, vocab := kernels.Dims(logits.Shape())
	rows, ok := deviceRows(draws, vocab)
	if !ok {
		return nil, false
	}
	return hostResults(ds.Sample(logits, rows)), true
}

// pick draws the row's token from its logits (or scores the prompt token
// it asks for).
func (o *drawRow) pick(logits []float32) sample.Result {
	sm := o.sampling
	if o.Score {
		return sample.Score(logits, o.Target, sm.TopN)
	}
	if !sm.Logprobs && sm.TopN == 0 {
		return sample.Result{Token: sample.TokenLogprob{ID: sample.Draw(logits, sm.Params, o.index, o.history, o.Mask)}}
	}
	return sample.PickWithHistory(logits, sm.Params, o.index, sm.TopN, o.history, o.Mask)
}

// decodeStep reports whether every sequence of the step brings one token.
func decodeStep(msg *RunStep) bool {
	for _, s := range msg.Seqs {
		if s.Len != 1 {
			return false
		}
	}
	return len(msg.Seqs) > 0
}

// plainArgmax reports whether every output row draws the argmax of its raw
// logits and wants no logprobs, so the backend may pick the tokens on the
// device and send back only the ids.
func plainArgmax(rows []drawRow) bool {
	for _, o := range rows {
		sm := o.sampling
		if o.Score || sm.Logprobs || sm.TopN > 0 || o.Mask != nil || !sm.Params.PlainArgmax(o.index) {
			return false
		}
	}
	return true
}

// warmDecode records the decode steps of every batch-size bucket up to
// maxRows rows before the rank serves (model.WarmDecode), and logs it.
func warmDecode(rank int, be kernels.Backend, m model.Model, st model.State, maxRows int) error {
	t0 := time.Now()
	buckets, err := model.WarmDecode(be, m, st, maxRows)
	if err == nil && len(buckets) > 0 {
		log.Printf("actors: rank %d recorded the decode steps of %d batch-size buckets (%d to %d rows) in %.2fs",
			rank, len(buckets), buckets[0], buckets[len(buckets)-1], time.Since(t0).Seconds())
	}
	return err
}

// allocSnapshots makes the prefix cache's snapshot places the capacity
// plan set aside; a state that keeps none (or a model without slot state)
// reports none.
func allocSnapshots(st model.State, c *model.Capacity) {
	ss, ok := st.(model.SnapshotState)
	if c.Snapshots == 0 || !ok || ss.AllocSnapshots(c.Snapshots) == 0 {
		c.Snapshots = 0
	}
}

// budgetFromDevice fills an unset (0) capacity budget with the device's free
// memory once the weights are loaded and the step scratch is reserved
// (reserveScratch), and an unset reserve with model.DeviceReserve;
// PlanCapacity then subtracts the reserve. A backend without device memory
// of its own needs an explicit budget.
func budgetFromDevice(be kernels.Backend, in model.CapacityInput) (model.CapacityInput, error) {
	if in.Budget > 0 {
		return in, nil
	}
	mr, ok := be.(kernels.MemoryReporter)
	if !ok {
		return in, fmt.Errorf("actors: no capacity budget given and the %s backend reports no device memory", be.Name())
	}
	free, _, err := mr.MemInfo()
	if err != nil {
		return in, fmt.Errorf("actors: capacity from device memory: %w", err)
	}
	in.Budget = free
	if in.Reserve == 0 {
		in.Reserve = model.DeviceReserve
	}
	return in, nil
}

// closeOwned closes the backend the executor made (on the executor).
func (r *Rank) closeOwned() {
	if r.owned != nil {
		closeBackend(r.owned)
		r.owned = nil
	}
}

// closeBackend releases a backend that holds resources of its own (the
// CUDA backend's device memory and context).
func closeBackend(be kernels.Backend) {
	if c, ok := be.(interface{ Close() error }); ok {
		c.Close()
	}
}
