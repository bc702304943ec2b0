package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
	"cohort/kernels"
	"cohort/model"
	"cohort/nccl"
	"cohort/supervision"
)

// remoteRank is a rank actor hosted by a worker for an engine in another
// process. It speaks protobuf (rankpb) with the engine-side proxy, opens the
// checkpoint from the worker's own path, joins its group's collective (the
// TCP ring for CPU ranks, NCCL for GPU ranks) and otherwise behaves exactly
// like a local rank (it embeds one).
type remoteRank struct {
	*actors.Rank
	w      *workerState
	owner  *actor.PID // the engine-side proxy; its loss stops this rank
	ckDir  string
	ck     *model.Checkpoint
	ln     net.Listener // CPU ranks: the ring listener, until the ring is dialed
	device int          // GPU ranks: the rank's GPU, chosen by prepare
	ring   ringSlot
	halt   supervision.Poison // the executor poison of this rank (set on abort)
	// unwatched ends the watch of the communicator (commwatch.go).
	unwatched   chan struct{}
	unwatchOnce sync.Once
}

// ringSlot holds the rank's communicator (the dialed TCP ring, or the NCCL
// communicator) so that a rank stopping while the ring forms still closes
// it, and an abort from the engine reaches it.
type ringSlot struct {
	mu     sync.Mutex
	comm   nccl.Communicator
	cancel context.CancelFunc
	closed error
}

func newRemoteRank(w *workerState) *remoteRank {
	r := &remoteRank{w: w, unwatched: make(chan struct{})}
	r.Rank = actors.NewRank(actors.RankHost{NewBackend: r.backend, LockThread: w.cfg.LockThread,
		Tracer: w.tracer, Executors: &w.executors, Reply: r.replyPB})
	return r
}

// backend makes the rank's backend (on its executor): a CPU backend, or a
// GPU backend on the device prepare chose for it.
func (r *remoteRank) backend(shard model.Shard, comm nccl.Communicator) (kernels.Backend, error) {
	if g := r.w.cfg.GPU; g != nil {
		return g.NewBackend(r.device)(shard, comm)
	}
	return r.w.cfg.NewBackend(shard, comm)
}

func (r *remoteRank) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.w.addRank(ctx.Self())
		r.Rank.Receive(ctx)
	case *rankpb.PrepareRank:
		ctx.Respond(r.prepare(ctx, msg))
	case *rankpb.LoadShard:
		r.connect(ctx, msg)
	case *ringDialed:
		r.joined(ctx, msg)
	case *commAsyncError:
		r.reportComm(ctx, msg.err)
	case *rankpb.RunStep:
		step, err := stepFromPB(msg)
		if err != nil {
			r.replyPB(ctx, r.owner, &actors.StepCompleted{Generation: msg.Generation, Step: msg.Step, Rank: r.Index(), Err: err})
			return
		}
		step.ReplyTo = r.owner
		r.Run(ctx, step)
	case *rankpb.AbortComm:
		r.abort(errors.New(msg.Reason))
	case *actor.Terminated:
		if r.owner != nil && msg.Who.Equal(r.owner) {
			ctx.Stop(ctx.Self()) // the engine's proxy is gone: so is this generation
		}
	case *actor.Stopped:
		r.stopped(ctx)
	default:
		r.Rank.Receive(ctx) // the local rank's messages, and its report of an unexpected one
	}
}

// prepare checks the engine's identity, opens the checkpoint and the ring
// listener, and watches the owner. A refusal stops the rank.
func (r *remoteRank) prepare(ctx actor.Context, msg *rankpb.PrepareRank) *rankpb.RankPrepared {
	out := &rankpb.RankPrepared{Generation: msg.Generation, Rank: msg.Rank}
	err := r.open(msg)
	if err != nil {
		out.Error = err.Error()
		ctx.Stop(ctx.Self())
		return out
	}
	r.Assign(int(msg.Rank), msg.Generation)
	r.owner = actor.NewPID(msg.OwnerAddress, msg.OwnerId)
	ctx.Watch(r.owner)
	if r.ln != nil {
		out.RingAddr = r.ln.Addr().String()
	}
	return out
}

func (r *remoteRank) open(msg *rankpb.PrepareRank) error {
	if err := r.w.check(msg.Identity, false); err != nil {
		return err
	}
	if r.w.cfg.GPU != nil {
		dev, err := r.w.gpuDevice(int(msg.Rank), int(msg.LocalRank))
		if err != nil {
			return err
		}
		r.device = dev
	}
	dir := r.w.modelDir(msg.Identity.GetModelDir())
	ck, err := r.w.openCheckpoint(dir)
	if err != nil {
		return fmt.Errorf("worker %s: %w", r.w.addr, err)
	}
	if r.w.cfg.GPU != nil { // NCCL: no ring listener
		r.ck, r.ckDir = ck, dir
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(r.w.cfg.RingHost, "0"))
	if err != nil {
		r.w.releaseCheckpoint(dir)
		return fmt.Errorf("worker %s: ring listener: %w", r.w.addr, err)
	}
	r.ck, r.ckDir, r.ln = ck, dir, ln
	return nil
}

// connect joins the group's collective, then loads the shard: GPU ranks
// the NCCL communicator named by the LoadShard's unique id, CPU ranks the
// TCP ring.
func (r *remoteRank) connect(ctx actor.Context, msg *rankpb.LoadShard) {
	err := r.w.checkCollective(msg)
	if err == nil && (r.ck == nil || (r.w.cfg.GPU == nil && r.ln == nil)) {
		err = fmt.Errorf("worker %s: rank %d was not prepared", r.w.addr, msg.Rank)
	}
	switch {
	case err != nil:
		r.replyPB(ctx, r.owner, &actors.ShardReady{Generation: msg.Generation, Rank: int(msg.Rank), Err: err})
	case r.w.cfg.GPU != nil:
		r.joinNCCL(ctx, msg)
	default:
		r.dial(ctx, msg)
	}
}

// joinNCCL makes the rank's NCCL communicator, which connects when the
// backend initialises its collectives on the rank's device thread (during
// the load); an abort from the engine reaches it through the slot.
func (r *remoteRank) joinNCCL(ctx actor.Context, msg *rankpb.LoadShard) {
	comm, err := r.w.cfg.GPU.Join(msg.NcclUniqueId, int(msg.Rank), int(msg.Size), r.device)
	if err == nil && !r.ring.keep(comm) {
		comm, err = nil, errors.New("rank stopped while joining NCCL")
	}
	r.joined(ctx, &ringDialed{load: msg, comm: comm, err: err})
}

// dial forms the TCP ring off the actor's goroutine (it blocks until every
// rank has joined or the dial timeout).
func (r *remoteRank) dial(ctx actor.Context, msg *rankpb.LoadShard) {
	cfg := nccl.TCPConfig{Rank: int(msg.Rank), Size: int(msg.Size), Addrs: msg.RingAddrs, Group: msg.RingGroup,
		DialTimeout: time.Duration(msg.DialTimeoutMs) * time.Millisecond, OpTimeout: time.Duration(msg.OpTimeoutMs) * time.Millisecond,
		Listener: r.ln}
	r.ln = nil // DialRing owns it now
	dctx, cancel := context.WithCancel(context.Background())
	r.ring.mu.Lock()
	r.ring.cancel = cancel
	r.ring.mu.Unlock()
	self, root := ctx.Self(), ctx.ActorSystem().Root
	go func() {
		var comm nccl.Communicator
		ring, err := nccl.DialRing(dctx, cfg)
		if err == nil {
			comm = ring
			if !r.ring.keep(comm) {
				comm, err = nil, errors.New("rank stopped while the ring formed")
			}
		}
		root.Send(self, &ringDialed{load: msg, comm: comm, err: err})
	}()
}

// keep stores the rank's communicator unless the rank already stopped (then
// it is aborted).
func (s *ringSlot) keep(c nccl.Communicator) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		c.Abort(s.closed)
		return false
	}
	s.comm = c
	return true
}

// shut aborts the ring (or the dial in progress); later keeps close theirs.
func (s *ringSlot) shut(reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed == nil {
		s.closed = reason
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.comm != nil {
		s.comm.Abort(reason)
	}
}

func (r *remoteRank) joined(ctx actor.Context, msg *ringDialed) {
	if msg.err != nil {
		r.replyPB(ctx, r.owner, &actors.ShardReady{Generation: r.Generation(), Rank: r.Index(),
			Err: fmt.Errorf("worker %s: rank %d: %s: %w", r.w.addr, r.Index(), r.w.collective(), msg.err)})
		return
	}
	r.watchComm(ctx, msg.comm)
	r.Load(ctx, &actors.LoadShard{Checkpoint: r.ck, Shard: model.Shard{Rank: r.Index(), Size: int(msg.load.Size)}, Comm: msg.comm,
		Capacity: capacityInputFromPB(msg.load.Capacity), Poison: &r.halt, ReplyTo: r.owner})
}

// abort poisons the rank's executor and aborts its communicator (or the
// ring being dialed), so that peers blocked in a collective return.
func (r *remoteRank) abort(reason error) {
	r.halt.Set(reason)
	r.unwatch()
	r.ring.shut(reason)
}

func (r *remoteRank) stopped(ctx actor.Context) {
	r.w.removeRank(ctx.Self())
	r.abort(errors.New("remote: remote rank stopped"))
	if r.ln != nil {
		r.ln.Close()
	}
	r.Rank.Receive(ctx) // closes the executor
	if r.ck != nil {
		dir := r.ckDir
		r.AfterExecutor(func() { r.w.releaseCheckpoint(dir) })
	}
}

// replyPB sends the rank's replies to the engine as protobuf.
func (r *remoteRank) replyPB(ctx actor.Context, to *actor.PID, msg actors.EngineMessage) {
	if to == nil {
		return
	}
	switch m := msg.(type) {
	case *actors.ShardReady:
		ctx.Send(to, readyToPB(m))
	case *actors.StepCompleted:
		ctx.Send(to, completedToPB(m))
	default:
		actors.ReportUnexpected("remote rank's reply", m)
	}
}
