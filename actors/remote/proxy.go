package remote

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
)

// rankProxy stands in for a remote rank inside the engine: it is the engine
// root's child like a local rank and takes the same messages, so supervision
// is the same for both. It translates them to protobuf for the rank on its
// worker, watches that rank, and reports its loss (the worker died, or
// stopped answering heartbeats) to the engine root as actors.RankLost and
// its communicator's asynchronous errors (which the worker polls) as
// actors.RankCommFailed.
type rankProxy struct {
	rank    int
	gen     uint64
	group   *remoteGroup
	load    *actors.LoadShard
	placed  *rankPlaced
	remote  *actor.PID
	replyTo *actor.PID
	lost    error
}

func (p *rankProxy) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		p.group.join(p.rank, ctx.Self())
	case *actors.LoadShard:
		p.load, p.replyTo = msg, msg.ReplyTo
		p.start(ctx)
	case *rankPlaced:
		p.placed = msg
		p.start(ctx)
	case *rankpb.ShardReady:
		ctx.Send(p.replyTo, readyFromPB(msg, p.where()))
	case *actors.RunStep:
		p.step(ctx, msg)
	case *rankpb.StepCompleted:
		ctx.Send(p.replyTo, completedFromPB(msg, p.where()))
	case *rankpb.CommFailed:
		if msg.Generation == p.gen {
			ctx.Send(ctx.Parent(), &actors.RankCommFailed{Generation: p.gen, Rank: p.rank, Err: remoteErr(p.where(), msg.Error, false)})
		}
	case *actor.Terminated:
		if p.remote != nil && msg.Who.Equal(p.remote) {
			err := fmt.Errorf("%s: rank actor terminated (%s)", p.where(), msg.Why)
			if msg.Why == actor.TerminatedReason_AddressTerminated {
				p.group.pool.markDown(p.placed.worker, err)
			}
			p.lose(ctx, err)
		}
	case *workerDown:
		p.lose(ctx, msg.err)
	case *actor.Stopping:
		if p.remote != nil {
			ctx.Unwatch(p.remote)
			ctx.Stop(p.remote)
			p.group.pool.untrack(p.placed.worker, ctx.Self())
		}
	default:
		actors.ReportUnexpected("remote rank proxy", msg)
	}
}

func (p *rankProxy) where() string {
	if p.placed == nil {
		return fmt.Sprintf("rank %d (not placed)", p.rank)
	}
	return fmt.Sprintf("rank %d on worker %s", p.rank, p.placed.worker)
}

// start sends the load to the remote rank once both the engine's LoadShard
// and the placement are in.
func (p *rankProxy) start(ctx actor.Context) {
	if p.load == nil || p.placed == nil {
		return
	}
	if p.placed.err != nil {
		ctx.Send(p.replyTo, &actors.ShardReady{Generation: p.gen, Rank: p.rank, Err: p.placed.err})
		return
	}
	p.remote = p.placed.pid
	ctx.Watch(p.remote)
	p.group.pool.track(p.placed.worker, ctx.Self())
	ctx.Send(p.remote, loadToPB(p.gen, p.rank, p.load, p.placed, &p.group.pool.cfg))
}

// loadToPB is the LoadShard of a placed rank: the ring's addresses and
// token (CPU ranks) or the placement's NCCL unique id (GPU ranks), the
// timeouts and the capacity input.
func loadToPB(gen uint64, rank int, load *actors.LoadShard, placed *rankPlaced, cfg *Config) *rankpb.LoadShard {
	return &rankpb.LoadShard{Generation: gen, Rank: int32(rank), Size: int32(load.Shard.Size),
		RingAddrs: placed.ring, RingGroup: placed.group, NcclUniqueId: placed.ncclID, DialTimeoutMs: cfg.RingDialTimeout.Milliseconds(),
		OpTimeoutMs: cfg.RingOpTimeout.Milliseconds(), Capacity: capacityInputToPB(load.Capacity)}
}

func (p *rankProxy) step(ctx actor.Context, msg *actors.RunStep) {
	p.replyTo = msg.ReplyTo
	switch {
	case p.lost != nil:
		ctx.Send(msg.ReplyTo, &actors.StepCompleted{Generation: msg.Generation, Step: msg.Step, Rank: p.rank, Err: p.lost})
	case p.remote == nil:
		ctx.Send(msg.ReplyTo, &actors.StepCompleted{Generation: msg.Generation, Step: msg.Step, Rank: p.rank,
			Err: errors.New("remote: remote rank not placed")})
	default:
		pb, err := stepToPB(msg)
		if err != nil {
			ctx.Send(msg.ReplyTo, &actors.StepCompleted{Generation: msg.Generation, Step: msg.Step, Rank: p.rank, Err: err})
			return
		}
		ctx.Send(p.remote, pb)
	}
}

// lose reports the remote rank's loss once; the engine root tears the
// generation down (and stops this proxy).
func (p *rankProxy) lose(ctx actor.Context, err error) {
	if p.lost != nil {
		return
	}
	p.lost = err
	ctx.Send(ctx.Parent(), &actors.RankLost{Generation: p.gen, Rank: p.rank, Err: err})
}
