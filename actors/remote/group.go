package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"cohort/actors"
	"cohort/actors/remote/rankpb"
)

// remoteGroup places one generation's ranks on workers: it waits for enough
// live workers, spawns and prepares each rank there, and hands the proxies
// the ring addresses. Aborting any of its communicators cancels it.
type remoteGroup struct {
	pool   *workerPool
	gen    uint64
	size   int
	ctx    context.Context
	cancel context.CancelFunc
	health func(why string) // readiness reason while waiting for workers

	mu      sync.Mutex
	proxies []*actor.PID  // joined proxies, by rank
	placed  []*rankPlaced // outcomes, by rank
	ranks   []*actor.PID  // remote rank actors, by rank
	joined  chan struct{} // closed when every proxy joined
	nJoined int
}

// Place starts placing generation gen (actors.Placer); it never blocks the
// engine root: each proxy gets its placement as a message.
func (p *workerPool) Place(gen uint64, size int, health func(string)) []actors.PlacedRank {
	ctx, cancel := context.WithCancel(context.Background())
	g := &remoteGroup{pool: p, gen: gen, size: size, ctx: ctx, cancel: cancel, health: health,
		proxies: make([]*actor.PID, size), placed: make([]*rankPlaced, size), ranks: make([]*actor.PID, size),
		joined: make(chan struct{})}
	out := make([]actors.PlacedRank, size)
	for r := range out {
		out[r] = actors.PlacedRank{
			Props: actor.PropsFromProducer(func() actor.Actor { return &rankProxy{rank: r, gen: gen, group: g} }),
			Comm:  &remoteComm{group: g, rank: r},
		}
	}
	p.wg.Go(g.run)
	return out
}

// join records a proxy's PID; delivery waits for it.
func (g *remoteGroup) join(rank int, pid *actor.PID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.proxies[rank] = pid
	if g.nJoined++; g.nJoined == g.size {
		close(g.joined)
	}
}

func (g *remoteGroup) run() {
	select {
	case <-g.joined:
	case <-g.ctx.Done():
		return
	}
	for g.ctx.Err() == nil {
		workers, err := g.pool.assign(g.ctx, g.size, g.waitingFor)
		if err != nil {
			return
		}
		placed, failed := g.prepareAll(workers)
		if failed == "" {
			if err := g.withID(placed); err != nil {
				g.stopRanks()
			}
			g.deliver(placed)
			return
		}
		// A worker failed between its last heartbeat and now: it is marked
		// down; place again on the live ones (same generation).
		g.stopRanks()
	}
}

func (g *remoteGroup) waitingFor(why string) {
	if g.ctx.Err() == nil {
		g.health(why)
	}
}

// prepareAll spawns every rank on its worker and prepares it (identity,
// checkpoint, ring listener). It returns the first failing worker, if any.
func (g *remoteGroup) prepareAll(workers []string) ([]*rankPlaced, string) {
	placed := make([]*rankPlaced, g.size)
	local := localRanks(workers)
	var wg sync.WaitGroup
	for r, w := range workers {
		wg.Go(func() { placed[r] = g.prepare(r, local[r], w) })
	}
	wg.Wait()
	ring := make([]string, g.size)
	for r, p := range placed {
		if p.err != nil {
			g.pool.markDown(p.worker, p.err)
			return nil, p.worker
		}
		ring[r] = p.ring[0]
	}
	for _, p := range placed {
		p.ring, p.group = ring, fmt.Sprintf("%s/g%d", g.pool.sys.ID, g.gen)
	}
	return placed, ""
}

// withID gives every rank of a placement the same fresh NCCL unique id (GPU
// ranks; CPU ranks get none). If no id can be made, every rank's placement
// fails with the reason, which the caller delivers.
func (g *remoteGroup) withID(placed []*rankPlaced) error {
	id, err := newPlacementID(g.pool.cfg.NCCL, g.gen)
	for _, p := range placed {
		p.ncclID = id
		if err != nil {
			p.pid, p.err = nil, err
		}
	}
	return err
}

func (g *remoteGroup) prepare(rank, local int, worker string) *rankPlaced {
	out := &rankPlaced{worker: worker}
	name := fmt.Sprintf("rank-%s-g%d-r%d", g.pool.sys.ID, g.gen, rank)
	res, err := g.pool.rem.SpawnNamed(worker, name, rankKind, g.pool.cfg.SpawnTimeout)
	switch {
	case err != nil:
		out.err = fmt.Errorf("worker %s: spawning rank %d: %w", worker, rank, err)
		return out
	case res.StatusCode != remote.ResponseStatusCodeOK.ToInt32():
		out.err = fmt.Errorf("worker %s: spawning rank %d: status %d", worker, rank, res.StatusCode)
		return out
	}
	out.pid = res.Pid
	g.mu.Lock()
	g.ranks[rank] = res.Pid
	owner := g.proxies[rank]
	g.mu.Unlock()
	msg := &rankpb.PrepareRank{Identity: g.pool.ident, Generation: g.gen, Rank: int32(rank), Size: int32(g.size),
		OwnerAddress: owner.Address, OwnerId: owner.Id, LocalRank: int32(local)}
	ans, err := g.pool.sys.Root.RequestFuture(res.Pid, msg, g.pool.cfg.SpawnTimeout).Result()
	if err != nil {
		out.err = fmt.Errorf("worker %s: preparing rank %d: %w", worker, rank, err)
		return out
	}
	prep, ok := ans.(*rankpb.RankPrepared)
	switch {
	case !ok:
		out.err = fmt.Errorf("worker %s: preparing rank %d: unexpected answer %T", worker, rank, ans)
	case prep.Error != "":
		out.err = errors.New(prep.Error)
	default:
		out.ring = []string{prep.RingAddr}
	}
	return out
}

// deliver hands every proxy its placement, unless the group was torn down.
func (g *remoteGroup) deliver(placed []*rankPlaced) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		g.stopRanksLocked()
		return
	}
	for r, p := range placed {
		g.placed[r] = p
		g.pool.sys.Root.Send(g.proxies[r], p)
	}
}

func (g *remoteGroup) stopRanks() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopRanksLocked()
}

func (g *remoteGroup) stopRanksLocked() {
	for r, pid := range g.ranks {
		if pid != nil {
			g.pool.sys.Root.Stop(pid)
			g.ranks[r] = nil
		}
	}
}

// abort cancels the placement and aborts the communicator of the remote
// rank, so that peers blocked in a collective return.
func (g *remoteGroup) abort(rank int, reason error) {
	g.cancel()
	g.mu.Lock()
	pid := g.ranks[rank]
	g.mu.Unlock()
	if pid != nil {
		g.pool.sys.Root.Send(pid, &rankpb.AbortComm{Generation: g.gen, Reason: reason.Error()})
	}
}

// remoteComm is the engine's handle on a remote rank's communicator: the
// collectives run on the worker; Abort reaches it as a message.
type remoteComm struct {
	group *remoteGroup
	rank  int
}

var errRemoteComm = errors.New("remote: the communicator of a remote rank runs on its worker")

func (c *remoteComm) Rank() int                                             { return c.rank }
func (c *remoteComm) Size() int                                             { return c.group.size }
func (c *remoteComm) AllReduceSum(context.Context, []float32) error         { return errRemoteComm }
func (c *remoteComm) AllGather(context.Context, []float32, []float32) error { return errRemoteComm }
func (c *remoteComm) Broadcast(context.Context, []float32, int) error       { return errRemoteComm }
func (c *remoteComm) Abort(reason error)                                    { c.group.abort(c.rank, reason) }
func (c *remoteComm) AsyncError() error                                     { return nil }
