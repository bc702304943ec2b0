package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/planner"
	"cohort/model"
	"cohort/nccl"
	"cohort/supervision"
)

// groupState is where the rank group stands.
type groupState uint8

const (
	groupLoading groupState = iota // a generation is loading its shards
	groupServing                   // steps run
	groupDead                      // restart intensity exceeded: the engine is done
	groupStopped                   // the engine is shutting down
)

// rankGroup is one generation of the tensor-parallel group.
type rankGroup struct {
	gen      uint64
	ranks    []*actor.PID
	comms    []nccl.Communicator
	counts   []*countingComm // by rank: collectives entered (see hungRanks)
	poison   *supervision.Poison
	ready    int
	caps     model.Capacity
	stopPoll chan struct{}
	timeout  *time.Timer
}

func (g *rankGroup) rankOf(pid *actor.PID) int {
	for i, p := range g.ranks {
		if p.Equal(pid) {
			return i
		}
	}
	return -1
}

// Internal supervision messages (scheduler family).
type (
	stepDeadlineExceeded struct {
		gen, step uint64
	}
	rebuildTimedOut struct{ gen uint64 }
	commFailed      struct {
		gen  uint64
		rank int
		err  error
	}
	rankPanicked struct {
		gen    uint64
		rank   int
		reason error
	}
	// InjectFault asks the engine root to inject a fault (tests, debug endpoint).
	InjectFault struct{ Fault Fault }
)

func (*stepDeadlineExceeded) schedulerMessage() {}
func (*rebuildTimedOut) schedulerMessage()      {}
func (*commFailed) schedulerMessage()           {}
func (*rankPanicked) schedulerMessage()         {}
func (*InjectFault) schedulerMessage()          {}

// rebuild starts a new generation of the group: a new communicator, new
// rank actors (children of this actor) and shard loads. The group reopens
// when every rank reports ShardReady.
func (s *schedulerActor) rebuild(ctx actor.Context) {
	s.gen++
	s.state = groupLoading
	placed, err := s.place()
	if err != nil {
		s.die(ctx, err)
		return
	}
	g := &rankGroup{gen: s.gen, poison: &supervision.Poison{}, stopPoll: make(chan struct{})}
	for r := 0; r < s.cfg.TP; r++ {
		cc := &countingComm{Communicator: placed[r].comm}
		g.counts = append(g.counts, cc)
		var c nccl.Communicator = cc
		var faults *rankFaults
		if s.faults != nil {
			c, faults = newFaultComm(c), s.faults[r]
		}
		g.comms = append(g.comms, c)
		pid := ctx.Spawn(placed[r].props)
		g.ranks = append(g.ranks, pid)
		ctx.Send(pid, &LoadShard{Checkpoint: s.cfg.Checkpoint, Shard: model.Shard{Rank: r, Size: s.cfg.TP},
			Comm: c, Capacity: s.cfg.Capacity, Poison: g.poison, Faults: faults, ReplyTo: ctx.Self()})
	}
	gen, root, self := s.gen, ctx.ActorSystem().Root, ctx.Self()
	g.timeout = time.AfterFunc(s.cfg.RecoveryTimeout, func() { root.Send(self, &rebuildTimedOut{gen: gen}) })
	go pollAsyncErrors(g, root, self, s.cfg.CommPoll)
	s.group = g
}

// place decides where the new generation's ranks run: in this process (the
// rank actors themselves, over NewComms) or on workers (proxies, see
// remote_group.go).
func (s *schedulerActor) place() ([]placedRank, error) {
	if s.pool != nil {
		return s.pool.place(s.gen, s.cfg.TP, func(why string) { s.health.SetReady(false, why) }), nil
	}
	comms, err := s.cfg.NewComms(s.cfg.TP)
	if err != nil {
		return nil, err
	}
	tracer := s.cfg.TracerProvider.Tracer(tracerName)
	out := make([]placedRank, s.cfg.TP)
	for r := range out {
		out[r] = placedRank{comm: comms[r],
			props: actor.PropsFromProducer(newRankActor(r, s.gen, s.cfg.NewBackend, s.cfg.LockThread, tracer, s.executors))}
	}
	return out, nil
}

// pollAsyncErrors watches the group's communicators for asynchronous errors
// (ncclCommGetAsyncError on GPUs) until the group is torn down.
func pollAsyncErrors(g *rankGroup, root *actor.RootContext, self *actor.PID, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.stopPoll:
			return
		case <-t.C:
			for r, c := range g.comms {
				if err := c.AsyncError(); err != nil {
					root.Send(self, &commFailed{gen: g.gen, rank: r, err: err})
					return
				}
			}
		}
	}
}

func (s *schedulerActor) shardReady(ctx actor.Context, msg *ShardReady) {
	g := s.group
	if g == nil || msg.Generation != g.gen || s.state != groupLoading {
		return
	}
	if msg.Err != nil {
		s.fail(ctx, &supervision.RankFailure{Rank: msg.Rank, Generation: msg.Generation, Cause: supervision.CauseLoad, Err: msg.Err})
		return
	}
	if g.ready == 0 || msg.Capacity.Slots < g.caps.Slots {
		g.caps.Slots = msg.Capacity.Slots
	}
	if g.ready == 0 || msg.Capacity.Pages < g.caps.Pages {
		g.caps.Pages = msg.Capacity.Pages
	}
	g.caps.PageSize = msg.Capacity.PageSize
	if g.ready++; g.ready < len(g.ranks) {
		return
	}
	g.timeout.Stop()
	if s.plan == nil {
		if err := s.createPlanner(g.caps); err != nil {
			s.die(ctx, err)
			return
		}
	}
	s.state = groupServing
	s.progress.Mark(time.Now()) // the time spent loading is not a stall
	s.health.SetReady(true, "") // before the hook: its observer sees the engine ready
	if !s.detected.IsZero() {
		d := time.Since(s.detected)
		s.stats.recovered(d)
		if s.cfg.OnRecovered != nil {
			s.cfg.OnRecovered(d)
		}
		s.detected = time.Time{}
	}
}

// createPlanner sizes the planner from the first group (capacity is the
// minimum over ranks; rebuilds keep the same configuration).
func (s *schedulerActor) createPlanner(caps model.Capacity) error {
	p, err := planner.New(planner.Config{MaxPrefillTokens: s.cfg.MaxPrefillTokens, MaxRows: s.cfg.MaxRows,
		Slots: caps.Slots, KVPages: caps.Pages, PageSize: caps.PageSize, MaxModelLen: s.cfg.Capacity.MaxModelLen})
	if err != nil {
		return err
	}
	s.plan = p
	s.info = Info{TP: s.cfg.TP, MaxModelLen: s.cfg.Capacity.MaxModelLen, Slots: caps.Slots, KVPages: caps.Pages,
		PageSize: caps.PageSize, VocabSize: s.cfg.Checkpoint.Config.VocabSize}
	return nil
}

func (s *schedulerActor) rebuildTimedOut(ctx actor.Context, msg *rebuildTimedOut) {
	if s.group != nil && msg.gen == s.group.gen && s.state == groupLoading {
		err := fmt.Errorf("group did not load within %v", s.cfg.RecoveryTimeout)
		if s.pool != nil && s.pool.status() != "" {
			err = fmt.Errorf("%w: %s", err, s.pool.status())
		}
		s.fail(ctx, &supervision.RankFailure{Rank: -1, Generation: msg.gen, Cause: supervision.CauseLoad, Err: err})
	}
}

// deadlineExceeded fails the group when a step's replies did not all arrive
// within its deadline. The failure names the rank that hung (see hungRanks;
// the error lists every suspect), and the elapsed time is recorded as a lower
// bound of the step's cost, so a step that was merely too large for the
// deadline is followed by smaller ones.
func (s *schedulerActor) deadlineExceeded(ctx actor.Context, msg *stepDeadlineExceeded) {
	f := s.inflight
	if f == nil || msg.gen != s.gen || msg.step != f.plan.Step {
		return
	}
	entered := make([]uint64, len(s.group.counts))
	for r, c := range s.group.counts {
		entered[r] = c.entered.Load()
	}
	hung := hungRanks(f.replied, entered)
	rank := -1
	if len(hung) > 0 {
		rank = hung[0]
	}
	s.cost.Observe(f.tokens, time.Since(f.started))
	s.fail(ctx, &supervision.RankFailure{Rank: rank, Generation: msg.gen, Cause: supervision.CauseDeadline,
		Err: fmt.Errorf("step %d (%d tokens): rank %v hung: %d of %d ranks replied within %v; collectives entered by rank: %v",
			msg.step, f.tokens, hung, f.replies, len(s.group.ranks), f.limit, entered)})
}

// HandleFailure makes the engine root the supervisor of its rank actors: a
// panicking rank is stopped (never restarted in place: a restart keeps the
// old mailbox) and the failure goes through the same path as any other.
func (s *schedulerActor) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ interface{}) {
	sup.StopChildren(child)
	if s.group == nil {
		return
	}
	if r := s.group.rankOf(child); r >= 0 {
		sys.Root.Send(s.self, &rankPanicked{gen: s.group.gen, rank: r, reason: fmt.Errorf("%v", reason)})
	}
}

// rankTerminated: a rank of the current generation stopped or was killed
// (ranks of older generations were stopped by teardown and are ignored).
func (s *schedulerActor) rankTerminated(ctx actor.Context, msg *actor.Terminated) {
	if s.group == nil {
		return
	}
	if r := s.group.rankOf(msg.Who); r >= 0 {
		s.fail(ctx, &supervision.RankFailure{Rank: r, Generation: s.group.gen, Cause: supervision.CauseTerminated,
			Err: errors.New("rank actor terminated")})
	}
}

// fail runs the reaction of the failure contract, in order: poison the
// executor, abort every communicator from side goroutines, stop the group
// and bump the generation, readiness off, replay (or fail) the in-flight
// requests, check restart intensity, rebuild.
func (s *schedulerActor) fail(ctx actor.Context, f *supervision.RankFailure) {
	g := s.group
	if g == nil || f.Generation != g.gen || s.state == groupDead || s.state == groupStopped {
		return // stale: that generation is already gone
	}
	now := time.Now()
	if s.detected.IsZero() {
		s.detected = now
	}
	s.noteFailure(now)
	s.stats.failed(f)
	s.health.SetReady(false, f.Error()) // before the hook: its observer sees readiness off
	if s.cfg.OnFailure != nil {
		s.cfg.OnFailure(f)
	}
	var inStep []planner.RequestID
	if s.inflight != nil {
		for _, sp := range s.inflight.plan.Seqs {
			inStep = append(inStep, sp.ID)
		}
	}
	s.teardown(ctx, f)
	s.requeueInFlight(ctx, f, inStep)
	if err := s.inten.Allow(now); err != nil {
		s.die(ctx, fmt.Errorf("%w; last failure: %v", err, f))
		return
	}
	s.stats.rebuilt()
	s.rebuild(ctx)
}

// teardown poisons and aborts the current group and stops its ranks.
func (s *schedulerActor) teardown(ctx actor.Context, reason error) {
	g := s.group
	if g == nil {
		return
	}
	s.group = nil
	if s.state == groupServing {
		s.state = groupLoading
	}
	g.poison.Set(reason)
	if stuck := supervision.AbortAll(context.Background(), g.comms, reason, s.cfg.AbortTimeout); len(stuck) > 0 {
		s.stats.stuckAborts(len(stuck))
	}
	close(g.stopPoll)
	g.timeout.Stop()
	if s.inflight != nil {
		if s.inflight.deadline != nil {
			s.inflight.deadline.Stop()
		}
		endStepSpan(s.inflight, reason)
		s.inflight = nil
	}
	for _, pid := range g.ranks {
		ctx.Stop(pid)
	}
}

// requeueInFlight puts the running requests back at the front of the queue
// (they are re-prefilled with their generated tokens and continue with the
// same sampling state), or ends them with the error when replay is off. A
// request that was in the failed step (inStep) and in Config.MaxReplays
// failed steps before it, with no completed step in between, ends with the
// error too: a request whose steps keep failing must not keep the group
// rebuilding until restart intensity takes the server down.
func (s *schedulerActor) requeueInFlight(ctx actor.Context, f *supervision.RankFailure, inStep []planner.RequestID) {
	if s.plan == nil {
		return
	}
	ids := s.plan.RequeueAll()
	end := func(l *liveRequest, id planner.RequestID, err error) {
		s.plan.Abort(id)
		delete(s.live, id)
		ctx.Send(l.pid, &RequestRejected{Err: err})
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

// die ends the engine: liveness off, every request ends with the reason, and
// the process is expected to exit non-zero (see Engine.Done).
func (s *schedulerActor) die(ctx actor.Context, reason error) {
	s.teardown(ctx, reason)
	s.state = groupDead
	s.stats.died(reason)
	s.health.SetDead(reason.Error())
	ids := make([]planner.RequestID, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if s.plan != nil {
			s.plan.Abort(id)
		}
		ctx.Send(s.live[id].pid, &RequestRejected{Err: fmt.Errorf("%w: %v", ErrEngineFailure, reason)})
		delete(s.live, id)
	}
	s.done(reason)
}

// inject applies a fault to the current group.
func (s *schedulerActor) inject(ctx actor.Context, f Fault) error {
	if s.faults == nil {
		return ErrFaultsDisabled
	}
	g := s.group
	if g == nil || f.Rank < 0 || f.Rank >= len(g.ranks) {
		return fmt.Errorf("actors: no rank %d to inject %s into", f.Rank, f.Kind)
	}
	pid := g.ranks[f.Rank]
	switch f.Kind {
	case FaultStop:
		ctx.Stop(pid)
	case FaultPoison:
		ctx.Poison(pid)
	case FaultPanic:
		ctx.Send(pid, &injectPanic{})
	case FaultHang:
		g.comms[f.Rank].(*faultComm).hang.Store(true)
	case FaultSlow, FaultError:
		s.faults[f.Rank].arm(f)
	case FaultDropComm:
		g.comms[f.Rank].(*faultComm).drop(fmt.Errorf("injected: rank %d lost its communicator", f.Rank))
	default:
		return fmt.Errorf("actors: unknown fault kind %q", f.Kind)
	}
	return nil
}

// supervisionStats counts what supervision did, for metrics and tests.
type supervisionStats struct {
	mu       sync.Mutex
	failures map[supervision.Cause]int
	rebuilds int
	replays  int
	stuck    int
	stalls   int
	recovery []time.Duration
	deathErr error
}

// SupervisionStats is a snapshot of supervisionStats.
type SupervisionStats struct {
	Failures map[supervision.Cause]int
	Rebuilds int
	Replayed int // in-flight requests requeued for replay
	// Recovery lists detect → ready durations, one per completed recovery.
	Recovery   []time.Duration
	StuckAbort int // communicator aborts that did not return in time
	// Stalls counts the times the progress watchdog turned readiness off.
	Stalls   int
	Poisoned bool
	Dead     error
}

func newSupervisionStats() *supervisionStats {
	return &supervisionStats{failures: map[supervision.Cause]int{}}
}

func (st *supervisionStats) failed(f *supervision.RankFailure) {
	st.mu.Lock()
	st.failures[f.Cause]++
	st.mu.Unlock()
}

func (st *supervisionStats) rebuilt()          { st.mu.Lock(); st.rebuilds++; st.mu.Unlock() }
func (st *supervisionStats) replayed(n int)    { st.mu.Lock(); st.replays += n; st.mu.Unlock() }
func (st *supervisionStats) stuckAborts(n int) { st.mu.Lock(); st.stuck += n; st.mu.Unlock() }
func (st *supervisionStats) stalled()          { st.mu.Lock(); st.stalls++; st.mu.Unlock() }
func (st *supervisionStats) died(err error)    { st.mu.Lock(); st.deathErr = err; st.mu.Unlock() }
func (st *supervisionStats) recovered(d time.Duration) {
	st.mu.Lock()
	st.recovery = append(st.recovery, d)
	st.mu.Unlock()
}

// retryAfter is the longest of the last 5 recoveries, or fallback.
func (st *supervisionStats) retryAfter(fallback time.Duration) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.recovery) == 0 {
		return fallback
	}
	var d time.Duration
	for _, r := range st.recovery[max(0, len(st.recovery)-5):] {
		d = max(d, r)
	}
	return d
}

func (st *supervisionStats) deathReason() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.deathErr == nil {
		return ""
	}
	return st.deathErr.Error()
}

func (st *supervisionStats) snapshot(poisoned bool) SupervisionStats {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := SupervisionStats{Failures: map[supervision.Cause]int{}, Rebuilds: st.rebuilds, Replayed: st.replays,
		Recovery: append([]time.Duration(nil), st.recovery...), StuckAbort: st.stuck, Stalls: st.stalls, Poisoned: poisoned, Dead: st.deathErr}
	for c, n := range st.failures {
		out.Failures[c] = n
	}
	return out
}
