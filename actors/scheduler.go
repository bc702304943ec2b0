package actors

import (
	"errors"
	"fmt"
	"log"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"cohort/actors/planner"
	"cohort/actors/prefix"
	"cohort/model"
	"cohort/model/sample"
	"cohort/supervision"
)

// scheduler is the engine root's scheduling half: it wraps the pure
// planner the way raft's Node wraps RawNode. It turns events (admissions,
// aborts, step results) into planner calls and planner output into RunStep
// broadcasts to the group that serves, one step in flight, and arms each
// step's deadline. It does not own the group: a failure it sees (an error
// reply, a missed deadline) is returned to the engine root, which runs the
// failure contract (root.go) and tells it what to drop and requeue.
type scheduler struct {
	cfg    Config
	health *supervision.Health
	stats  *supervisionStats

	plan *planner.Planner // created once the first group is loaded
	info Info
	// lastFailure and failGap (a moving average of the time between
	// failures) shrink the step target while failures are frequent, so that
	// steps still complete between them (see stepTarget).
	lastFailure time.Time
	failGap     time.Duration

	live     map[planner.RequestID]*liveRequest
	inflight *inflightStep
	// cost is what steps measured to take: it sizes each step's prefill
	// budget to StepTarget and arms its deadline after its work. It is kept
	// across rebuilds (the machine did not change).
	cost supervision.StepCost
	// progress is the watchdog over completed steps (see watchdog.go);
	// stopTicks ends its ticks (nil when it is off).
	progress  supervision.Progress
	stopTicks func()

	// timing (COHORT_STEP_TIMING) times the engine around the ranks'
	// steps; done is the last completed step, kept until the next dispatch.
	timing *stepTiming
	done   doneStep

	// outbox holds the messages for request actors until the engine root
	// has handled its message (deliver): a completed step's tokens go out
	// after the next step was sent to the ranks, so waking the request
	// actors overlaps the device's work instead of delaying it.
	outbox []delivery

	// tracer is cfg.TracerProvider's, asked for once.
	tracer trace.Tracer
	// Buffers record reuses from step to step (what they hold between
	// steps means nothing).
	seqLive []*liveRequest
	sampled []planner.RequestID
}

// delivery is one message for a request actor.
type delivery struct {
	to  *actor.PID
	msg any
}

// tell queues msg for the request actor at to, in order.
func (s *scheduler) tell(to *actor.PID, msg any) { s.outbox = append(s.outbox, delivery{to, msg}) }

// deliver sends the queued messages in the order they were told.
func (s *scheduler) deliver(ctx actor.Context) {
	for i, d := range s.outbox {
		ctx.Send(d.to, d.msg)
		s.outbox[i] = delivery{}
	}
	s.outbox = s.outbox[:0]
}

// doneStep is what the scheduler measured of its last completed step.
type doneStep struct {
	at                time.Time // its last reply
	decode            bool
	roundTrip, record time.Duration
}

// liveRequest is the scheduler's view of an admitted request.
type liveRequest struct {
	req       *Request
	pid       *actor.PID
	out       *completion // its tokens and its end: the one record of them
	scheduled time.Time   // when a step first included the request
	// promptScored is the last prompt position whose logprob was delivered
	// (PromptLogprobs), so a replay's re-prefill does not score it again.
	promptScored int
	// sentPages is how many of its pages the ranks were sent since its
	// admission: a step sends only the pages after them.
	sentPages int
	// failedSteps counts the failed steps that included the request since a
	// step with it last completed; beyond Config.MaxReplays it ends with an
	// error instead of being replayed again.
	failedSteps int
	// cache is the request's side of the prefix cache.
	cache reqPrefix
}

// reqPrefix is what the scheduler keeps of a request for the prefix cache:
// the hash of its last full block, which names the next one its tokens
// fill (the planner keeps the chain), and the prompt tokens its first
// admission resumed (its usage's cached tokens).
type reqPrefix struct {
	on         bool
	lastBlock  prefix.Hash
	admitted   bool
	cachedToks int
}

type inflightStep struct {
	span trace.Span
	plan planner.Plan
	// seqLive is the live request of each of plan.Seqs as the step was
	// planned, nil for one that ended before the step was sent (for its
	// span; looked up again once the step is done).
	seqLive  []*liveRequest
	replies  int
	replied  []bool          // by rank
	outputs  []OutputRow     // the step's output rows ...
	results  []sample.Result // ... and rank 0's result for each, in their order
	err      error
	errRank  int
	deadline *time.Timer
	started  time.Time
	tokens   int           // rows the step computes
	limit    time.Duration // its deadline
	decode   bool          // every sequence one token (for timing)
}

// admit queues a request with the planner (serving: whether a group
// serves now, for the watchdog).
func (s *scheduler) admit(ctx actor.Context, msg *AdmitRequest, serving bool) {
	r := msg.Req
	l := &liveRequest{req: r, pid: msg.PID, out: newCompletion(r, s.cfg.EOS)}
	pr := planner.Request{ID: r.ID, PromptLen: len(r.Prompt), MaxNewTokens: r.MaxTokens, MaxChunk: s.promptChunk(r),
		NoResume: r.PromptLogprobs, Boundaries: r.Boundaries}
	if s.info.PrefixCache {
		pr.Blocks = prefix.BlockHashes(r.Prompt, s.info.PageSize)
		l.cache.on = true
		if n := len(pr.Blocks); n > 0 {
			l.cache.lastBlock = pr.Blocks[n-1]
		}
	}
	if err := s.plan.Add(pr); err != nil {
		s.tell(msg.PID, &RequestRejected{Err: err})
		return
	}
	s.live[r.ID] = l
	s.watchProgress(time.Now(), serving) // a request arriving at an idle engine starts the watchdog's clock
}

// abort forgets a request whose client went away.
func (s *scheduler) abort(id planner.RequestID) {
	if s.plan != nil && s.plan.Abort(id) {
		delete(s.live, id)
	}
}

// finish forgets a request that ended on a stop string.
func (s *scheduler) finish(id planner.RequestID) {
	if s.plan != nil && s.plan.Finish(id) {
		delete(s.live, id)
	}
}

// open starts serving on a loaded group of capacity caps: the first group
// sizes the planner (rebuilds keep it), and the time spent loading is not
// a stall.
func (s *scheduler) open(caps model.Capacity, now time.Time) error {
	if s.plan == nil {
		if err := s.createPlanner(caps); err != nil {
			return err
		}
	}
	s.plan.ResetCache() // a rebuilt group's memory is new: nothing is cached in it
	s.progress.Mark(now)
	return nil
}

// resetPrefixCache empties the prefix cache (Engine.ResetPrefixCache).
func (s *scheduler) resetPrefixCache() {
	if s.plan != nil {
		s.plan.ResetCache()
	}
}

// createPlanner sizes the planner from the first group (capacity is the
// minimum over ranks; rebuilds keep the same configuration).
func (s *scheduler) createPlanner(caps model.Capacity) error {
	ck := s.cfg.Checkpoint
	stateless := ck.Arch.StateSize(ck.Config, model.Shard{Rank: 0, Size: s.cfg.TP}, max(1, s.cfg.Capacity.ElemBytes)).SlotBytes == 0
	p, err := planner.New(planner.Config{MaxPrefillTokens: s.cfg.MaxPrefillTokens, MaxRows: s.cfg.MaxRows,
		Slots: caps.Slots, KVPages: caps.Pages, PageSize: caps.PageSize, MaxModelLen: s.cfg.Capacity.MaxModelLen,
		PrefixCache: !s.cfg.DisablePrefixCache, Snapshots: caps.Snapshots, PagesOnly: stateless,
		MarkCutBlocks: planner.DefaultMarkCutBlocks})
	if err != nil {
		return err
	}
	s.plan = p
	s.info = Info{TP: s.cfg.TP, MaxModelLen: s.cfg.Capacity.MaxModelLen, Slots: caps.Slots, KVPages: caps.Pages,
		PageSize: caps.PageSize, VocabSize: ck.Config.VocabSize, PrefixCache: !s.cfg.DisablePrefixCache, Snapshots: caps.Snapshots,
		Scratch: caps.Scratch, MaxStepTokens: s.cfg.Capacity.MaxStepTokens}
	return nil
}

// maybeStep asks the planner for the next step when none is in flight,
// broadcasts it to every rank of g (the group that serves) and arms its
// deadline.
func (s *scheduler) maybeStep(ctx actor.Context, g *rankGroup) {
	if s.inflight != nil {
		return
	}
	t0 := time.Now()
	step := s.nextStep(ctx.Self(), g.gen)
	if step == nil {
		return
	}
	if d := s.done; !d.at.IsZero() {
		s.timing.add(d.decode, d.roundTrip, d.record, t0.Sub(d.at)-d.record, time.Since(t0))
		s.done = doneStep{}
	}
	s.maskOutputs(ctx, step)
	if s.tracer == nil {
		s.tracer = s.cfg.TracerProvider.Tracer(TracerName)
	}
	seqLive := s.inflight.seqLive
	s.inflight.span = startStepSpanOf(s.tracer, step, func(i int) *liveRequest { return seqLive[i] })
	step.Trace = s.inflight.span.SpanContext()
	gen, id, root, self := g.gen, step.Step, ctx.ActorSystem().Root, ctx.Self()
	f := s.inflight
	f.tokens, f.replied = len(step.Tokens), make([]bool, len(g.ranks))
	f.limit = s.cost.Deadline(f.tokens, s.cfg.StepDeadline)
	f.started, f.decode = time.Now(), decodeStep(step)
	f.deadline = time.AfterFunc(f.limit, func() {
		root.Send(self, &stepDeadlineExceeded{gen: gen, step: id})
	})
	for _, r := range g.ranks {
		ctx.Send(r, step)
	}
}

// nextStep turns the planner's next plan into a RunStep (nil when idle) and
// marks it in flight. The step carries diffs: requests the plan admits go
// in full (admission), the others only their new tokens and pages.
func (s *scheduler) nextStep(replyTo *actor.PID, gen uint64) *RunStep {
	plan := s.plan.ScheduleWithin(s.prefillBudget())
	if len(plan.Seqs) == 0 {
		return nil
	}
	step := &RunStep{Generation: gen, Step: plan.Step, ReplyTo: replyTo}
	if len(plan.Freed) > 0 {
		step.Finished = make([]planner.RequestID, 0, len(plan.Freed))
	}
	for _, f := range plan.Freed {
		step.Finished = append(step.Finished, f.ID)
	}
	// Size the step's slices for its rows and sampled rows (prompt
	// logprob rows may add to the outputs).
	rows, sampled := 0, 0
	for _, sp := range plan.Seqs {
		rows += sp.Len
		if sp.Sample {
			sampled++
		}
	}
	step.Tokens, step.Seqs = make([]int32, 0, rows), make([]StepSeq, 0, len(plan.Seqs))
	if sampled > 0 {
		step.Outputs = make([]OutputRow, 0, sampled)
	}
	seqLive := make([]*liveRequest, len(plan.Seqs))
	now := time.Now()
	for i, sp := range plan.Seqs {
		l := s.live[sp.ID]
		seqLive[i] = l
		if l.scheduled.IsZero() {
			l.scheduled = now
		}
		if _, ok := slices.BinarySearch(plan.Reset, sp.Slot); ok { // the plan assigned its slot (Reset is ascending): admitted
			step.Admitted = append(step.Admitted, l.admission(sp))
			l.sentPages = 0
		}
		if sp.Save >= 0 {
			step.Saves = append(step.Saves, SnapshotSave{ID: sp.ID, Place: sp.Save})
		}
		start := len(step.Tokens)
		step.Tokens = append(step.Tokens, l.out.tokens[sp.Cached:sp.Cached+sp.Len]...)
		step.Seqs = append(step.Seqs, StepSeq{ID: sp.ID, Len: sp.Len, NewPages: sp.Pages[l.sentPages:]})
		l.sentPages = len(sp.Pages)
		if l.req.PromptLogprobs {
			step.Outputs = append(step.Outputs, s.promptRows(l, sp, start)...)
		}
		if sp.Sample {
			step.Outputs = append(step.Outputs, OutputRow{ID: sp.ID, Row: start + sp.Len - 1})
		}
	}
	s.inflight = &inflightStep{plan: plan, outputs: step.Outputs, seqLive: seqLive}
	return step
}

// admission is what the ranks keep of the request from its admission (the
// plan's sp) until it is finished: with the prefix cache, the tokens it
// resumes after and the snapshot to restore. The first admission's cached
// tokens are the request's usage.
func (l *liveRequest) admission(sp planner.SeqPlan) AdmitSeq {
	r := l.req
	a := AdmitSeq{ID: r.ID, Slot: sp.Slot, PromptLen: len(r.Prompt),
		Sampling: Sampling{Params: r.Params, TopN: r.TopLogprobs, Logprobs: r.Logprobs}, Cached: sp.Cached, Restore: sp.Restore}
	if sp.Cached > 0 && r.Params.Penalized() {
		a.History = slices.Clone(l.out.tokens[:sp.Cached])
	}
	if !l.cache.admitted {
		l.cache.admitted, l.cache.cachedToks = true, min(sp.Cached, len(r.Prompt))
	}
	return a
}

// maskOutputs sets each constrained row's mask: the tokens its grammar
// allows now, within the tokens the request may still generate. A request
// whose grammar fails ends with the error (as if aborted during the step).
func (s *scheduler) maskOutputs(ctx actor.Context, step *RunStep) {
	var seqLive []*liveRequest
	if f := s.inflight; f != nil && len(f.seqLive) == len(step.Seqs) {
		seqLive = f.seqLive // the live table's requests as nextStep saw them, less those ended since
	}
	j := 0
	for i := range step.Outputs {
		o := &step.Outputs[i]
		if o.Score {
			continue
		}
		var l *liveRequest
		if j = seqOf(step.Seqs, o.ID, j); seqLive != nil && j < len(seqLive) {
			l = seqLive[j]
		} else {
			l = s.live[o.ID]
		}
		if l == nil || l.out.matcher == nil {
			continue
		}
		m, err := l.out.matcher.Mask(l.out.left())
		if err == nil && m.Count() == 0 {
			err = errors.New("actors: the grammar allows no token here")
		}
		if err != nil {
			s.endWithError(ctx, o.ID, fmt.Errorf("%w: structured output: %v", ErrEngineFailure, err))
			continue
		}
		o.Mask = m
	}
}

// seqOf returns the index of the sequence with id in seqs, searching from
// from on (len(seqs): none there). A step's output rows are in the order
// of its sequences, each of which is a distinct request, so walking the
// rows finds each row's sequence at or after the previous row's.
func seqOf(seqs []StepSeq, id planner.RequestID, from int) int {
	for from < len(seqs) && seqs[from].ID != id {
		from++
	}
	return from
}

// endWithError ends a live request with err.
func (s *scheduler) endWithError(ctx actor.Context, id planner.RequestID, err error) {
	l := s.live[id]
	s.plan.Abort(id)
	delete(s.live, id)
	if f := s.inflight; f != nil {
		if i := slices.Index(f.seqLive, l); i >= 0 {
			f.seqLive[i] = nil // gone from the live table
		}
	}
	s.tell(l.pid, &RequestRejected{Err: err})
}

// completed takes a rank's reply to the step in flight on g. The first
// error reply fails the group (returned for the engine root); with every
// reply in, the step is applied.
func (s *scheduler) completed(ctx actor.Context, msg *StepCompleted, g *rankGroup) *supervision.RankFailure {
	f := s.inflight
	if f == nil || msg.Generation != g.gen || msg.Step != f.plan.Step {
		return nil // a reply from an older step or generation
	}
	if msg.Rank >= 0 && msg.Rank < len(f.replied) {
		if f.replied[msg.Rank] {
			return nil // a duplicate
		}
		f.replied[msg.Rank] = true
	}
	f.replies++
	err := msg.Err
	if msg.Rank == 0 && err == nil {
		f.results = msg.Results
		if len(f.results) != len(f.outputs) {
			err = fmt.Errorf("actors: rank 0 returned %d results for the %d output rows of step %d", len(f.results), len(f.outputs), msg.Step)
		}
	}
	if err != nil && f.err == nil {
		f.err, f.errRank = err, msg.Rank
	}
	if f.err != nil {
		// Fail at the first error: peers may be blocked in a collective
		// waiting for the failed rank; the abort releases them.
		return &supervision.RankFailure{Rank: f.errRank, Generation: g.gen, Cause: supervision.CauseError, Err: f.err}
	}
	if f.replies < len(g.ranks) {
		return nil
	}
	f.deadline.Stop()
	f.span.End()
	s.inflight = nil
	now := time.Now()
	s.cost.Observe(f.tokens, now.Sub(f.started))
	s.stepProgressed(now)
	seqLive := s.liveSeqs(f)
	for _, l := range seqLive {
		if l != nil {
			l.failedSteps = 0
		}
	}
	s.recordSeqs(f, seqLive, func(pid *actor.PID, msg requestMessage) { s.tell(pid, msg) })
	if s.timing.enabled() {
		s.done = doneStep{at: now, decode: f.decode, roundTrip: now.Sub(f.started), record: time.Since(now)}
		if s.timing.each {
			logStep(f, s.plan.Stats().Waiting, s.done.roundTrip)
		}
	}
	return nil
}

// logStep logs one completed step's shape and round trip
// (COHORT_STEP_TIMING=steps).
func logStep(f *inflightStep, waiting int, roundTrip time.Duration) {
	decode, prefill, seqs := 0, 0, 0
	for _, sp := range f.plan.Seqs {
		if sp.Len == 1 && sp.Sample && sp.Cached > 0 {
			decode++
			continue
		}
		prefill, seqs = prefill+sp.Len, seqs+1
	}
	log.Printf("actors: step %d done at %s: %d decode rows, %d prefill tokens in %d sequences, %d waiting; round trip %v",
		f.plan.Step, time.Now().Format("15:04:05.000"), decode, prefill, seqs, waiting, roundTrip)
}

// coldPrefill is the prefill budget of steps before any step was measured:
// small, so that the first step of a slow machine fits any sane deadline.
const coldPrefill = 16

// prefillGrowth bounds how far a step's size may exceed the largest step
// measured so far: the cost fit is only measured up to there. The bound
// grows from that step's size rounded down to a power of two, so that the
// steps of a cold engine's first long prompts come in powers of two (16,
// 128, 1024, 8192, as far as the prompts and MaxPrefillTokens reach): the
// CUDA backend times cuBLASLt's candidates for each octave of rows on the
// first GEMM in it, and a ramp of other sizes had it time the octave of
// the 1k prompts on a step of 896 rows (docs/gpu.md, phase 16).
const prefillGrowth = 8

// floorPow2 is the largest power of two not above n (1 for n < 2).
func floorPow2(n int) int {
	p := 1
	for p <= n/2 {
		p *= 2
	}
	return p
}

// prefillBudget sizes the next step's prefill so that the whole step (the
// running requests' decode rows included) is predicted to take at most
// Config.StepTarget. The planner clamps it to Config.MaxPrefillTokens.
func (s *scheduler) prefillBudget() int {
	if !s.cost.Known() {
		return coldPrefill
	}
	n := s.cost.Tokens(s.stepTarget(time.Now()))
	if n != math.MaxInt {
		n -= s.plan.Stats().Running
	}
	return min(max(n, 1), growthCap(s.cost.MaxObserved()))
}

// growthCap is the most prefill tokens a step may take when the largest
// step measured so far had maxObserved rows (prefillGrowth).
func growthCap(maxObserved int) int {
	return max(coldPrefill, prefillGrowth*floorPow2(maxObserved))
}

// stepTarget is Config.StepTarget, or a quarter of the recent time between
// failures when that is shorter: under a fault storm a step sized to the
// normal target would never complete between two faults, and the requests
// in it would make no progress at all.
func (s *scheduler) stepTarget(now time.Time) time.Duration {
	t := s.cfg.StepTarget
	if s.failGap > 0 && now.Sub(s.lastFailure) < 4*s.failGap {
		t = min(t, max(s.failGap/4, 5*time.Millisecond))
	}
	return t
}

// noteFailure updates the moving average of the time between failures.
func (s *scheduler) noteFailure(now time.Time) {
	if !s.lastFailure.IsZero() {
		gap := min(now.Sub(s.lastFailure), s.cfg.RebuildWindow)
		if s.failGap == 0 {
			s.failGap = gap
		} else {
			s.failGap = (s.failGap + gap) / 2
		}
	}
	s.lastFailure = now
}

// promptLogprobBytes bounds the logits one step computes for the prompt
// rows of a request with prompt logprobs (every row of its chunks is an
// output); the request's prefill chunks are capped to stay within it.
const promptLogprobBytes = 64 << 20

// promptChunk is the planner's prefill chunk cap for r (0: none).
func (s *scheduler) promptChunk(r *Request) int {
	if !r.PromptLogprobs {
		return 0
	}
	return promptLogprobRows(s.cfg.Checkpoint.Config.VocabSize)
}

// promptLogprobRows is the chunk cap of a request with prompt logprobs
// over a vocabulary of vocab tokens: its logits within promptLogprobBytes,
// at least 16 rows.
func promptLogprobRows(vocab int) int { return max(16, promptLogprobBytes/(4*max(1, vocab))) }

// promptRows asks for the logprob of every prompt token that the chunk's
// rows predict and that has not been delivered yet: row r at position p
// predicts the token at p+1. The row predicting the first generated token
// is the sampled row, not a prompt row.
func (s *scheduler) promptRows(l *liveRequest, sp planner.SeqPlan, start int) []OutputRow {
	var out []OutputRow
	for i := range sp.Len {
		pos := sp.Cached + i + 1
		if pos >= len(l.req.Prompt) || pos <= l.promptScored {
			continue
		}
		out = append(out, OutputRow{ID: sp.ID, Row: start + i, Score: true, Target: l.req.Prompt[pos], Pos: pos})
	}
	return out
}

// record applies a completed step's results in output-row order: the
// planner advances, each generated token goes to its request's completion,
// which decides whether the request ends with it (then the planner frees it
// at once), and every result goes to its request actor through send.
func (s *scheduler) record(f *inflightStep, send func(*actor.PID, requestMessage)) {
	s.recordSeqs(f, s.liveSeqs(f), send)
}

// liveSeqs looks up the live request of each sequence of f's plan (nil:
// aborted or ended while the step ran), in a buffer that recordSeqs
// clears.
func (s *scheduler) liveSeqs(f *inflightStep) []*liveRequest {
	lives := s.seqLive[:0]
	for _, sp := range f.plan.Seqs {
		lives = append(lives, s.live[sp.ID])
	}
	s.seqLive = lives
	return lives
}

// recordSeqs is record with seqLive the live request of each of f's
// sequences (liveSeqs). Each output row is its sequence's: a step's rows
// are in the order of its sequences, each a distinct request, and a
// request's rows are consecutive with its sampled row last, so a request
// that ends with its token has no row after it.
func (s *scheduler) recordSeqs(f *inflightStep, seqLive []*liveRequest, send func(*actor.PID, requestMessage)) {
	seqs := f.plan.Seqs
	live := func(j int, id planner.RequestID) (int, *liveRequest) {
		for j < len(seqs) && seqs[j].ID != id {
			j++
		}
		if j < len(seqs) {
			return j, seqLive[j]
		}
		return j, s.live[id] // not reached: every row is a sequence's
	}
	sampled := s.sampled[:0]
	for j, i := 0, 0; i < len(f.outputs); i++ {
		o := f.outputs[i]
		var l *liveRequest
		if j, l = live(j, o.ID); l != nil && !o.Score {
			sampled = append(sampled, o.ID)
		}
	}
	s.plan.Update(f.plan, sampled)
	// The step's token messages share one allocation (one object for the
	// collector instead of one a request; each request actor reads only
	// its own).
	events := make([]TokenGenerated, len(sampled))
	s.sampled = sampled[:0]
	for j, i := 0, 0; i < len(f.outputs); i++ {
		o := f.outputs[i]
		var l *liveRequest
		j, l = live(j, o.ID)
		switch {
		case l == nil:
		case o.Score:
			l.promptScored = max(l.promptScored, o.Pos)
			send(l.pid, &PromptScored{Pos: o.Pos, Result: f.results[i]})
		default:
			ev := &events[0]
			events = events[1:]
			s.addToken(ev, o.ID, l, f.results[i])
			send(l.pid, ev)
		}
	}
	clear(seqLive)
}

// addToken records a request's new token in its completion and, when the
// request ends with it, frees it in the planner; it writes the token's
// message for the request actor into ev.
func (s *scheduler) addToken(ev *TokenGenerated, id planner.RequestID, l *liveRequest, res sample.Result) {
	end := l.out.add(res.Token.ID)
	s.extendBlocks(id, l)
	*ev = TokenGenerated{Result: res, N: l.out.generated(), Finish: end.reason, StopToken: end.stopToken, Err: end.err}
	if ev.N == 1 {
		ev.ScheduledAt, ev.CachedTokens = l.scheduled, l.cache.cachedToks
	}
	if end.reason != "" {
		s.plan.Finish(id)
		delete(s.live, id)
	}
}

// extendBlocks names the block a request's new token completed, for the
// prefix cache (the planner caches it once it is computed).
func (s *scheduler) extendBlocks(id planner.RequestID, l *liveRequest) {
	ps, n := s.info.PageSize, len(l.out.tokens)
	if !l.cache.on || n%ps != 0 {
		return
	}
	l.cache.lastBlock = prefix.Chain(l.cache.lastBlock, l.out.tokens[n-ps:])
	s.plan.AddBlock(id, l.cache.lastBlock)
}

func (s *scheduler) planStats() planner.Stats {
	if s.plan == nil {
		return planner.Stats{}
	}
	return s.plan.Stats()
}

// endStepSpan ends a failed step's span with the failure.
func endStepSpan(f *inflightStep, err error) {
	if f == nil || f.span == nil {
		return
	}
	f.span.RecordError(err)
	f.span.SetStatus(codes.Error, err.Error())
	f.span.End()
}

// --- the scheduler's side of a failure (the engine root calls these in the
// order of the failure contract, see root.go) ---

// deadlineExceeded fails g when a step's replies did not all arrive within
// its deadline. The failure names the rank that hung (see hungRanks; the
// error lists every suspect), and the elapsed time is recorded as a lower
// bound of the step's cost, so a step that was merely too large for the
// deadline is followed by smaller ones.
func (s *scheduler) deadlineExceeded(msg *stepDeadlineExceeded, g *rankGroup) *supervision.RankFailure {
	f := s.inflight
	if f == nil || g == nil || msg.gen != g.gen || msg.step != f.plan.Step {
		return nil
	}
	entered := make([]uint64, len(g.counts))
	for r, c := range g.counts {
		entered[r] = c.entered.Load()
	}
	hung := hungRanks(f.replied, entered)
	rank := -1
	if len(hung) > 0 {
		rank = hung[0]
	}
	s.cost.Observe(f.tokens, time.Since(f.started))
	return &supervision.RankFailure{Rank: rank, Generation: msg.gen, Cause: supervision.CauseDeadline,
		Err: fmt.Errorf("step %d (%d tokens): rank %v hung: %d of %d ranks replied within %v; collectives entered by rank: %v",
			msg.step, f.tokens, hung, f.replies, len(g.ranks), f.limit, entered)}
}

// inStep lists the requests of the step in flight.
func (s *scheduler) inStep() []planner.RequestID {
	if s.inflight == nil {
		return nil
	}
	ids := make([]planner.RequestID, 0, len(s.inflight.plan.Seqs))
	for _, sp := range s.inflight.plan.Seqs {
		ids = append(ids, sp.ID)
	}
	return ids
}

// dropStep forgets the step in flight (its group is being torn down): its
// deadline is disarmed and its span ends with the reason.
func (s *scheduler) dropStep(reason error) {
	if s.inflight == nil {
		return
	}
	if s.inflight.deadline != nil {
		s.inflight.deadline.Stop()
	}
	endStepSpan(s.inflight, reason)
	s.inflight = nil
}

// requeueInFlight puts the running requests back at the front of the queue
// (they are re-prefilled with their generated tokens and continue with the
// same sampling state), or ends them with the error when replay is off. A
// request that was in the failed step (inStep) and in Config.MaxReplays
// failed steps before it, with no completed step in between, ends with the
// error too: a request whose steps keep failing must not keep the group
// rebuilding until restart intensity takes the server down.
func (s *scheduler) requeueInFlight(ctx actor.Context, f *supervision.RankFailure, inStep []planner.RequestID) {
	if s.plan == nil {
		return
	}
	ids := s.plan.RequeueAll()
	end := func(l *liveRequest, id planner.RequestID, err error) {
		s.plan.Abort(id)
		delete(s.live, id)
		s.tell(l.pid, &RequestRejected{Err: err})
	}
	if !s.cfg.Replay {
		for _, id := range ids {
			if l, ok := s.live[id]; ok {
				end(l, id, fmt.Errorf("%w: %v", ErrEngineFailure, f))
			}
		}
		return
	}
	for _, id := range inStep {
		l, ok := s.live[id]
		if !ok {
			continue
		}
		if l.failedSteps++; l.failedSteps > s.cfg.MaxReplays {
			end(l, id, fmt.Errorf("%w: request %d was in %d failed steps in a row and is not replayed again (max %d replays); last failure: %v",
				ErrEngineFailure, id, l.failedSteps, s.cfg.MaxReplays, f))
			ids = slices.DeleteFunc(ids, func(x planner.RequestID) bool { return x == id })
		}
	}
	s.stats.replayed(len(ids))
	if s.cfg.OnReplayed != nil {
		s.cfg.OnReplayed(len(ids))
	}
}

// failAll ends every request with the reason the engine died, in id order.
func (s *scheduler) failAll(ctx actor.Context, reason error) {
	ids := make([]planner.RequestID, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if s.plan != nil {
			s.plan.Abort(id)
		}
		s.tell(s.live[id].pid, &RequestRejected{Err: fmt.Errorf("%w: %v", ErrEngineFailure, reason)})
		delete(s.live, id)
	}
}
