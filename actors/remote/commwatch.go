package remote

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors/remote/rankpb"
	"cohort/nccl"
)

// A worker watches each of its ranks' communicators for asynchronous
// errors (a TCP ring that lost a peer, ncclCommGetAsyncError on GPUs) and
// reports the first to the engine (rankpb.CommFailed, which the proxy turns
// into actors.RankCommFailed), so that supervision rebuilds the group
// before a step runs into the broken communicator. The watch ends when the
// rank is aborted (the engine already knows) or stops.

// asyncErrorer is what the watch needs of a communicator.
type asyncErrorer interface{ AsyncError() error }

// pollComm calls c.AsyncError at every tick until it reports an error,
// which it returns, or done is closed (nil).
func pollComm(c asyncErrorer, tick <-chan time.Time, done <-chan struct{}) error {
	for {
		select {
		case <-done:
			return nil
		case <-tick:
			if err := c.AsyncError(); err != nil {
				return err
			}
		}
	}
}

// watchComm polls comm every WorkerConfig.CommPoll, off the actor's
// goroutine, and hands its first asynchronous error to the rank.
func (r *remoteRank) watchComm(ctx actor.Context, comm nccl.Communicator) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	t := time.NewTicker(r.w.cfg.CommPoll)
	done := r.unwatched
	go func() {
		defer t.Stop()
		if err := pollComm(comm, t.C, done); err != nil {
			root.Send(self, &commAsyncError{err: err})
		}
	}()
}

// unwatch ends the communicator's watch (once).
func (r *remoteRank) unwatch() { r.unwatchOnce.Do(func() { close(r.unwatched) }) }

// reportComm tells the engine that the rank's communicator failed, unless
// the rank was aborted since (the engine is tearing the group down).
func (r *remoteRank) reportComm(ctx actor.Context, err error) {
	if r.owner == nil || r.halt.Err() != nil {
		return
	}
	ctx.Send(r.owner, &rankpb.CommFailed{Generation: r.Generation(), Rank: int32(r.Index()),
		Error: fmt.Sprintf("worker %s: rank %d: %s: asynchronous error: %v", r.w.addr, r.Index(), r.w.collective(), err)})
}
