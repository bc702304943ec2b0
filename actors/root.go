package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/supervision"
)

// engineRoot is the engine's root actor, made of two halves that do not
// know each other: the supervisor (supervisor.go) owns the rank group, its
// generations and their failures; the scheduler (scheduler.go) wraps the
// pure planner and runs one step at a time on whatever group serves. The
// root routes each message to its half and runs the failure contract's
// reaction in order across both (fail, die). It is the protoactor parent and
// supervisor of every rank actor (HandleFailure).
type engineRoot struct {
	sup   *supervisor
	sched *scheduler
}

func (r *engineRoot) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.sup.self = ctx.Self()
		r.sched.startWatchdog(ctx)
		r.rebuild(ctx)
	case *actor.Stopping:
		r.sched.stopWatchdog()
		r.teardown(ctx, fmt.Errorf("actors: engine stopping"))
		r.sup.state = groupStopped
	case *actor.Terminated:
		r.fail(ctx, r.sup.rankTerminated(msg))
	case *ShardReady:
		r.shardReady(ctx, msg)
	case *rebuildTimedOut:
		r.fail(ctx, r.sup.rebuildTimedOut(msg))
	case *stepDeadlineExceeded:
		r.fail(ctx, r.sched.deadlineExceeded(msg, r.sup.group))
	case *commFailed:
		r.fail(ctx, &supervision.RankFailure{Rank: msg.rank, Generation: msg.gen, Cause: supervision.CauseComm, Err: msg.err})
	case *RankLost:
		r.fail(ctx, &supervision.RankFailure{Rank: msg.Rank, Generation: msg.Generation, Cause: supervision.CauseTerminated, Err: msg.Err})
	case *RankCommFailed:
		r.fail(ctx, &supervision.RankFailure{Rank: msg.Rank, Generation: msg.Generation, Cause: supervision.CauseComm, Err: msg.Err})
	case *rankPanicked:
		r.fail(ctx, &supervision.RankFailure{Rank: msg.rank, Generation: msg.gen, Cause: supervision.CausePanic, Err: msg.reason})
	case *InjectFault:
		ctx.Respond(r.sup.inject(ctx, msg.Fault))
	case *AdmitRequest:
		r.admit(ctx, msg)
	case *AbortRequest:
		r.sched.abort(msg.ID)
	case *FinishRequest:
		r.sched.finish(msg.ID)
	case *StepCompleted:
		r.fail(ctx, r.sched.completed(ctx, msg, r.sup.group))
	case *checkProgress:
		r.sched.watchProgress(time.Now(), r.sup.serving())
	case *queryStats:
		ctx.Respond(r.sched.planStats())
	case *querySupervision:
		ctx.Respond(r.sup.stats.snapshot(r.sup.poisoned()))
	case *queryInfo:
		ctx.Respond(r.sched.info)
	case *resetPrefixCache:
		r.sched.resetPrefixCache()
		ctx.Respond(true)
	default:
		ReportUnexpected("engine root", msg)
	}
	if r.sup.serving() {
		r.sched.maybeStep(ctx, r.sup.group)
	}
	r.sched.deliver(ctx)
}

// HandleFailure makes the engine root the supervisor of its rank actors
// (protoactor's SupervisorStrategy; see supervisor.handleFailure).
func (r *engineRoot) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ interface{}) {
	r.sup.handleFailure(sys, sup, child, reason)
}

func (r *engineRoot) admit(ctx actor.Context, msg *AdmitRequest) {
	if r.sup.ended() {
		ctx.Send(msg.PID, &RequestRejected{Err: fmt.Errorf("%w: engine stopped %s", ErrNotReady, r.sup.stats.deathReason())})
		return
	}
	r.sched.admit(ctx, msg, r.sup.serving())
}

// rebuild starts the next generation; one that cannot start ends the engine.
func (r *engineRoot) rebuild(ctx actor.Context) {
	if err := r.sup.rebuild(ctx); err != nil {
		r.die(ctx, err)
	}
}

// shardReady opens the group once every rank loaded: the first group sizes
// the planner (rebuilds keep it).
func (r *engineRoot) shardReady(ctx actor.Context, msg *ShardReady) {
	caps, loaded, f := r.sup.shardReady(msg)
	switch {
	case f != nil:
		r.fail(ctx, f)
	case loaded:
		if err := r.sched.open(caps, time.Now()); err != nil {
			r.die(ctx, err)
			return
		}
		r.sup.serve()
	}
}

// fail runs the reaction of the failure contract, in order: readiness off,
// poison the executor, abort every communicator from side goroutines, stop
// the group (the rebuild bumps the generation), replay (or fail) the
// in-flight requests, check restart intensity, rebuild. A nil or stale
// failure (of a generation already gone) does nothing.
func (r *engineRoot) fail(ctx actor.Context, f *supervision.RankFailure) {
	now := time.Now()
	if f == nil || !r.sup.detect(now, f) {
		return
	}
	loading := r.sup.state == groupLoading
	r.sched.noteFailure(now)
	inStep := r.sched.inStep()
	r.teardown(ctx, f)
	r.sched.requeueInFlight(ctx, f, inStep)
	if err := r.sup.inten.Allow(now); err != nil {
		r.die(ctx, fmt.Errorf("%w; last failure: %v", err, f))
		return
	}
	if loading {
		if err := r.sup.loadFailed(f); err != nil {
			r.die(ctx, err)
			return
		}
	}
	r.sup.stats.rebuilt()
	r.rebuild(ctx)
}

// teardown ends the step in flight and tears the current group down.
func (r *engineRoot) teardown(ctx actor.Context, reason error) {
	r.sched.dropStep(reason)
	r.sup.teardown(ctx, reason)
}

// die ends the engine: liveness off, every request ends with the reason, and
// the process is expected to exit non-zero (see Engine.Done).
func (r *engineRoot) die(ctx actor.Context, reason error) {
	r.teardown(ctx, reason)
	r.sup.die(reason)
	r.sched.failAll(ctx, reason)
	r.sup.done(reason)
}
