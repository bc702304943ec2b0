package actors

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

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

// supervisor is the engine root's supervision of its rank group: it spawns
// each generation (as the root's children, locally or through a Placer),
// detects the failures the group reports, tears a generation down
// (poison, abort, stop) and keeps the restart intensity, readiness and
// statistics. It knows nothing of requests or steps: the engine root (see
// root.go) runs the failure contract's reaction in order, calling it and
// the scheduler.
type supervisor struct {
	cfg       Config
	self      *actor.PID
	health    *supervision.Health
	stats     *supervisionStats
	executors *sync.WaitGroup // rank executors still running, of every generation
	placer    Placer          // places ranks in other processes (nil: ranks in this process)
	done      func(error)     // called once when the engine dies

	group    *rankGroup
	gen      uint64
	state    groupState
	faults   []*rankFaults // per rank, across generations (nil when disabled)
	inten    supervision.Intensity
	detected time.Time // when the failure being recovered was detected
	// failedLoads counts the generations in a row that failed before they
	// served: past inten.Max the engine dies however slowly they failed,
	// so a load that cannot succeed (out of memory, say) is not retried
	// for ever behind a 503.
	failedLoads int
}

// serving reports whether steps may run on the current group.
func (s *supervisor) serving() bool { return s.state == groupServing && s.group != nil }

// ended reports whether the engine is dead or stopping.
func (s *supervisor) ended() bool { return s.state == groupDead || s.state == groupStopped }

// poisoned reports whether the current group's executors are poisoned.
func (s *supervisor) poisoned() bool { return s.group != nil && s.group.poison.Err() != nil }

// rebuild starts a new generation of the group: a new communicator, new
// rank actors (children of the engine root) and shard loads. The group
// reopens when every rank reports ShardReady. An error (no communicator)
// ends the engine.
func (s *supervisor) rebuild(ctx actor.Context) error {
	s.gen++
	s.state = groupLoading
	placed, err := s.place()
	if err != nil {
		return err
	}
	g := &rankGroup{gen: s.gen, poison: &supervision.Poison{}, stopPoll: make(chan struct{})}
	for r := 0; r < s.cfg.TP; r++ {
		cc := &countingComm{Communicator: placed[r].Comm}
		g.counts = append(g.counts, cc)
		var c nccl.Communicator = cc
		var faults *rankFaults
		if s.faults != nil {
			c, faults = newFaultComm(c), s.faults[r]
		}
		g.comms = append(g.comms, c)
		pid := ctx.Spawn(placed[r].Props)
		g.ranks = append(g.ranks, pid)
		ctx.Send(pid, &LoadShard{Checkpoint: s.cfg.Checkpoint, Shard: model.Shard{Rank: r, Size: s.cfg.TP},
			Comm: c, Capacity: s.cfg.Capacity, Poison: g.poison, Faults: faults, ReplyTo: ctx.Self()})
	}
	gen, root, self := s.gen, ctx.ActorSystem().Root, ctx.Self()
	g.timeout = time.AfterFunc(s.cfg.RecoveryTimeout, func() { root.Send(self, &rebuildTimedOut{gen: gen}) })
	go pollAsyncErrors(g, root, self, s.cfg.CommPoll)
	s.group = g
	return nil
}

// place decides where the new generation's ranks run: in this process (the
// rank actors themselves, over NewComms) or wherever the Placer puts them
// (proxies of ranks on workers, see actors/remote).
func (s *supervisor) place() ([]PlacedRank, error) {
	if s.placer != nil {
		return s.placer.Place(s.gen, s.cfg.TP, func(why string) { s.health.SetReady(false, why) }), nil
	}
	comms, err := s.cfg.NewComms(s.cfg.TP)
	if err != nil {
		return nil, err
	}
	tracer := s.cfg.TracerProvider.Tracer(TracerName)
	out := make([]PlacedRank, s.cfg.TP)
	for r := range out {
		out[r] = PlacedRank{Comm: comms[r],
			Props: actor.PropsFromProducer(newRankActor(r, s.gen, s.cfg.NewBackend, s.cfg.LockThread, tracer, s.executors))}
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

// shardReady records a rank's load. It returns the failure of a rank that
// could not load, or, once every rank loaded, loaded with the group's
// capacity (the minimum over ranks).
func (s *supervisor) shardReady(msg *ShardReady) (caps model.Capacity, loaded bool, f *supervision.RankFailure) {
	g := s.group
	if g == nil || msg.Generation != g.gen || s.state != groupLoading {
		return caps, false, nil
	}
	if msg.Err != nil {
		return caps, false, &supervision.RankFailure{Rank: msg.Rank, Generation: msg.Generation, Cause: supervision.CauseLoad, Err: msg.Err}
	}
	if g.ready == 0 || msg.Capacity.Slots < g.caps.Slots {
		g.caps.Slots = msg.Capacity.Slots
	}
	if g.ready == 0 || msg.Capacity.Pages < g.caps.Pages {
		g.caps.Pages = msg.Capacity.Pages
	}
	if g.ready == 0 || msg.Capacity.Snapshots < g.caps.Snapshots {
		g.caps.Snapshots = msg.Capacity.Snapshots
	}
	g.caps.PageSize = msg.Capacity.PageSize
	g.caps.Scratch = max(g.caps.Scratch, msg.Capacity.Scratch)
	if g.ready++; g.ready < len(g.ranks) {
		return caps, false, nil
	}
	g.timeout.Stop()
	return g.caps, true, nil
}

// serve opens the loaded group: readiness returns, and a recovery in
// progress is measured (detect → ready).
func (s *supervisor) serve() {
	s.state, s.failedLoads = groupServing, 0
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

// loadFailed counts a failure of a generation that never served and
// returns the error that ends the engine once more than inten.Max such
// generations failed in a row (nil while within it).
func (s *supervisor) loadFailed(f *supervision.RankFailure) error {
	s.failedLoads++
	if s.failedLoads <= s.inten.Max {
		return nil
	}
	return fmt.Errorf("%w: %d generations in a row failed before they served (limit %d); last failure: %v",
		supervision.ErrIntensity, s.failedLoads, s.inten.Max, f)
}

// rebuildTimedOut fails a generation that did not load within
// RecoveryTimeout.
func (s *supervisor) rebuildTimedOut(msg *rebuildTimedOut) *supervision.RankFailure {
	if s.group == nil || msg.gen != s.group.gen || s.state != groupLoading {
		return nil
	}
	err := fmt.Errorf("group did not load within %v", s.cfg.RecoveryTimeout)
	if s.placer != nil && s.placer.Status() != "" {
		err = fmt.Errorf("%w: %s", err, s.placer.Status())
	}
	return &supervision.RankFailure{Rank: -1, Generation: msg.gen, Cause: supervision.CauseLoad, Err: err}
}

// handleFailure is the engine root's HandleFailure: a panicking rank is
// stopped (never restarted in place: a restart keeps the old mailbox) and
// the failure goes through the same path as any other.
func (s *supervisor) handleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, reason any) {
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
func (s *supervisor) rankTerminated(msg *actor.Terminated) *supervision.RankFailure {
	if s.group == nil {
		return nil
	}
	if r := s.group.rankOf(msg.Who); r >= 0 {
		return &supervision.RankFailure{Rank: r, Generation: s.group.gen, Cause: supervision.CauseTerminated,
			Err: errors.New("rank actor terminated")}
	}
	return nil
}

// detect accepts a failure of the current generation (false: stale, that
// generation is already gone) and turns readiness off.
func (s *supervisor) detect(now time.Time, f *supervision.RankFailure) bool {
	g := s.group
	if g == nil || f.Generation != g.gen || s.ended() {
		return false
	}
	if s.detected.IsZero() {
		s.detected = now
	}
	s.stats.failed(f)
	log.Printf("actors: %v", f)         // the operator's record of why the group is rebuilt (or dies)
	s.health.SetReady(false, f.Error()) // before the hook: its observer sees readiness off
	if s.cfg.OnFailure != nil {
		s.cfg.OnFailure(f)
	}
	return true
}

// teardown poisons and aborts the current group and stops its ranks.
func (s *supervisor) teardown(ctx actor.Context, reason error) {
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
	for _, pid := range g.ranks {
		ctx.Stop(pid)
	}
}

// die marks the engine dead: liveness off, with the reason.
func (s *supervisor) die(reason error) {
	s.state = groupDead
	s.stats.died(reason)
	s.health.SetDead(reason.Error())
}

// inject applies a fault to the current group.
func (s *supervisor) inject(ctx actor.Context, f Fault) error {
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
