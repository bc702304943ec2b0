package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
)

// ErrMismatch is wrapped by the error every participant of a collective gets
// when the ranks disagree on the collective's kind, sizes or root.
var ErrMismatch = errors.New("nccl: collective mismatch between ranks")

// ErrConcurrentUse is returned when one rank's Comm is used by two
// collectives at the same time (each rank must call collectives in order).
var ErrConcurrentUse = errors.New("nccl: concurrent collectives on one rank")

type opKind uint8

const (
	opAllReduceSum opKind = iota + 1
	opAllGather
	opBroadcast
)

func (k opKind) String() string {
	switch k {
	case opAllReduceSum:
		return "AllReduceSum"
	case opAllGather:
		return "AllGather"
	case opBroadcast:
		return "Broadcast"
	}
	return "unknown"
}

// slot is what one rank publishes for one collective.
type slot struct {
	op   opKind
	a    []float32 // AllReduceSum/Broadcast: buf; AllGather: send
	b    []float32 // AllGather: recv
	root int
}

// round is one collective (one generation) of the group. A round passes its
// arrival barrier once all n ranks have published their slots; from then on
// ranks read (and, for AllReduceSum, write) each other's buffers, and leave
// through the departure barrier so that no rank returns while a peer still
// touches its buffers.
type round struct {
	slots []slot
	// Guarded by Group.mu until ready is closed, read-only afterwards.
	arrived int
	passed  bool
	err     error // validation error, set before ready is closed
	ready   chan struct{}
	// open mirrors passed for the lock-free spin phase of the waiters.
	open atomic.Bool
	// Departure barrier: the rank that brings left to zero closes gone.
	left atomic.Int32
	gone chan struct{}
}

// Group is one in-process collective group of n ranks (goroutines of one
// process). Each collective is a rendezvous of all n ranks; the ranks must
// call the same collectives in the same order. The group can be aborted from
// any goroutine; after that it is dead forever.
type Group struct {
	n     int
	comms []*inprocComm

	stickyAbort               // mu guards cur too
	cur         *round        // the round the next arriving rank joins
	abortCh     chan struct{} // closed on abort
	dead        atomic.Bool   // set on abort, for the spin phase

	asyncErr atomic.Pointer[error]
}

// NewGroup makes a group of n ≥ 1 ranks.
func NewGroup(n int) (*Group, error) {
	if n < 1 {
		return nil, fmt.Errorf("nccl: group size %d, want ≥ 1", n)
	}
	g := &Group{n: n, abortCh: make(chan struct{})}
	g.comms = make([]*inprocComm, n)
	for r := range g.comms {
		g.comms[r] = &inprocComm{g: g, rank: r}
	}
	g.cur = newRound(n)
	return g, nil
}

func newRound(n int) *round {
	rd := &round{
		slots: make([]slot, n),
		ready: make(chan struct{}),
		gone:  make(chan struct{}),
	}
	rd.left.Store(int32(n))
	return rd
}

// Comm returns rank's handle. It panics if rank is out of range.
func (g *Group) Comm(rank int) Communicator {
	if rank < 0 || rank >= g.n {
		panic(fmt.Sprintf("nccl: rank %d out of range [0,%d)", rank, g.n))
	}
	return g.comms[rank]
}

// Size is the number of ranks.
func (g *Group) Size() int { return g.n }

// Abort aborts the whole group: every pending and later collective on every
// rank fails with an error wrapping ErrAborted and reason. The first reason
// sticks; later calls are no-ops.
func (g *Group) Abort(reason error) {
	g.mu.Lock()
	g.abortLocked(reason)
	g.mu.Unlock()
}

func (g *Group) abortLocked(reason error) {
	if !g.setAbortLocked(reason) {
		return
	}
	g.dead.Store(true)
	close(g.abortCh)
}

// Aborted returns nil, or the sticky first abort reason wrapped with
// ErrAborted.
func (g *Group) Aborted() error { return g.abortError() }

// InjectAsyncError is a fault hook: it makes AsyncError return err on every
// rank and aborts the group with err. The first injected error sticks; a nil
// err is ignored.
func (g *Group) InjectAsyncError(err error) {
	if err == nil {
		return
	}
	g.asyncErr.CompareAndSwap(nil, &err)
	g.Abort(fmt.Errorf("async error: %w", err))
}

func (g *Group) asyncError() error {
	if p := g.asyncErr.Load(); p != nil {
		return *p
	}
	return nil
}

// arrive publishes s for rank in the current round and waits until all ranks
// have arrived, the group is aborted, or ctx is done. On a nil error the
// caller must take part in the round and leave through depart. A non-nil
// round with an error is a validation failure; the caller returns the error
// and must not touch peers' buffers.
func (g *Group) arrive(ctx context.Context, rank int, s slot) (*round, error) {
	if err := ctx.Err(); err != nil {
		g.Abort(fmt.Errorf("rank %d abandoned %v: %w", rank, s.op, err))
		return nil, err
	}
	if err := g.lockLive(); err != nil {
		return nil, err
	}
	rd := g.cur
	rd.slots[rank] = s
	rd.arrived++
	if rd.arrived == g.n {
		rd.err = validate(rd.slots)
		rd.passed = true
		g.cur = newRound(g.n)
		rd.open.Store(true)
		close(rd.ready)
		g.mu.Unlock()
		return rd, rd.err
	}
	g.mu.Unlock()

	if spin(func() bool { return rd.open.Load() || g.dead.Load() }) && rd.open.Load() {
		return rd, rd.err
	}
	var ctxDone bool
	select {
	case <-rd.ready:
		return rd, rd.err
	case <-g.abortCh:
	case <-ctx.Done():
		ctxDone = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if rd.passed {
		// The round completed before the abort/cancellation: peers are
		// already using our buffers, so finish the collective.
		return rd, rd.err
	}
	// No round passes after an abort, so rd never will: nobody else touches
	// our buffers and we may leave.
	if ctxDone {
		err := ctx.Err()
		g.abortLocked(fmt.Errorf("rank %d abandoned %v: %w", rank, s.op, err))
		return nil, err
	}
	return nil, g.abortErr
}

// depart is the departure barrier of a passed round. It waits for no abort or
// context: every rank passed the arrival barrier and only has bounded,
// non-blocking work left before it departs.
func (rd *round) depart() {
	if rd.left.Add(-1) == 0 {
		close(rd.gone)
		return
	}
	if spin(func() bool { return rd.left.Load() == 0 }) {
		return
	}
	<-rd.gone
}

// spinLimit bounds the optimistic phase of a wait: a rank that arrives
// shortly before its peers yields the processor up to spinLimit times
// before it parks on a channel. Parking and being readied costs several µs
// (the woken goroutine lands on the waker's P and must be stolen), which
// would dominate small collectives. The spin yields rather than burns the
// processor, so oversubscribed ranks (more ranks than Ps) still progress.
const spinLimit = 64

// spin yields until done reports true or spinLimit yields have passed; it
// reports whether done held.
func spin(done func() bool) bool {
	for range spinLimit {
		if done() {
			return true
		}
		runtime.Gosched()
	}
	return done()
}

// validate checks that all ranks called the same collective with consistent
// arguments. It runs once per round, in the last arriving rank.
func validate(slots []slot) error {
	n := len(slots)
	s0 := slots[0]
	for r, s := range slots {
		if s.op != s0.op {
			return fmt.Errorf("%w: rank 0 called %v, rank %d called %v", ErrMismatch, s0.op, r, s.op)
		}
		if len(s.a) != len(s0.a) {
			return fmt.Errorf("%w: %v: rank 0 has %d elements, rank %d has %d", ErrMismatch, s.op, len(s0.a), r, len(s.a))
		}
		switch s.op {
		case opAllGather:
			if len(s.b) != n*len(s.a) {
				return fmt.Errorf("%w: AllGather: rank %d has len(recv)=%d, want %d·%d", ErrMismatch, r, len(s.b), n, len(s.a))
			}
		case opBroadcast:
			if s.root != s0.root {
				return fmt.Errorf("%w: Broadcast: rank 0 has root %d, rank %d has root %d", ErrMismatch, s0.root, r, s.root)
			}
			if s.root < 0 || s.root >= n {
				return fmt.Errorf("%w: Broadcast: root %d out of range [0,%d)", ErrMismatch, s.root, n)
			}
		}
	}
	return nil
}

// inprocComm is one rank's handle on a Group.
type inprocComm struct {
	g    *Group
	rank int
	busy atomic.Bool
}

func (c *inprocComm) Rank() int          { return c.rank }
func (c *inprocComm) Size() int          { return c.g.n }
func (c *inprocComm) Abort(reason error) { c.g.Abort(reason) }
func (c *inprocComm) AsyncError() error  { return c.g.asyncError() }

// solo handles a group of one: no rendezvous, just the abort and ctx checks.
func (c *inprocComm) solo(ctx context.Context, op opKind) error {
	if err := c.g.Aborted(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		c.g.Abort(fmt.Errorf("rank %d abandoned %v: %w", c.rank, op, err))
		return err
	}
	return nil
}

// run performs one collective: arrival, work on the passed round, departure.
func (c *inprocComm) run(ctx context.Context, s slot, work func(rd *round)) error {
	if !c.busy.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: rank %d, %v", ErrConcurrentUse, c.rank, s.op)
	}
	defer c.busy.Store(false)
	rd, err := c.g.arrive(ctx, c.rank, s)
	if err != nil {
		return err
	}
	work(rd)
	rd.depart()
	return nil
}

// AllReduceSum sums buf element-wise across ranks, in place. The sum is taken
// in rank order (rank 0 + rank 1 + ...), so every rank gets bit-identical
// results independent of arrival order. Rank r reduces the r-th chunk of the
// buffers and writes the result into every rank's buffer.
func (c *inprocComm) AllReduceSum(ctx context.Context, buf []float32) error {
	if c.g.n == 1 {
		return c.solo(ctx, opAllReduceSum)
	}
	return c.run(ctx, slot{op: opAllReduceSum, a: buf}, func(rd *round) {
		lo, hi := chunk(len(buf), c.g.n, c.rank)
		if lo >= hi {
			return
		}
		reduceChunk(rd.slots, c.rank, lo, hi)
	})
}

// chunkAlign keeps chunk boundaries on 64-byte cache lines, so ranks never
// write the same line.
const chunkAlign = 16

// chunk returns rank's share [lo,hi) of l elements split across n ranks.
func chunk(l, n, rank int) (lo, hi int) {
	per := (l + n - 1) / n
	per = (per + chunkAlign - 1) / chunkAlign * chunkAlign
	lo = min(rank*per, l)
	hi = min(lo+per, l)
	return lo, hi
}

// reduceChunk sums slots[*].a[lo:hi] in rank order into slots[self].a[lo:hi]
// and copies the result into every other rank's buffer.
func reduceChunk(slots []slot, self, lo, hi int) {
	dst := slots[self].a[lo:hi]
	switch len(slots) {
	case 2:
		sum2(dst, slots[0].a[lo:hi], slots[1].a[lo:hi])
	case 3:
		sum3(dst, slots[0].a[lo:hi], slots[1].a[lo:hi], slots[2].a[lo:hi])
	case 4:
		sum4(dst, slots[0].a[lo:hi], slots[1].a[lo:hi], slots[2].a[lo:hi], slots[3].a[lo:hi])
	default:
		sumN(dst, slots, lo, hi)
	}
	for r := range slots {
		if r != self {
			copy(slots[r].a[lo:hi], dst)
		}
	}
}

func sum2(dst, a, b []float32) {
	b = b[:len(a)]
	dst = dst[:len(a)]
	for i := range a {
		dst[i] = a[i] + b[i]
	}
}

func sum3(dst, a, b, c []float32) {
	b = b[:len(a)]
	c = c[:len(a)]
	dst = dst[:len(a)]
	for i := range a {
		dst[i] = a[i] + b[i] + c[i]
	}
}

func sum4(dst, a, b, c, d []float32) {
	b = b[:len(a)]
	c = c[:len(a)]
	d = d[:len(a)]
	dst = dst[:len(a)]
	for i := range a {
		dst[i] = a[i] + b[i] + c[i] + d[i]
	}
}

// sumN handles any number of ranks. dst aliases one of the sources, so it
// accumulates block-wise in a temporary and writes each block once done.
func sumN(dst []float32, slots []slot, lo, hi int) {
	var tmp [256]float32
	for off := lo; off < hi; off += len(tmp) {
		end := min(off+len(tmp), hi)
		t := tmp[:end-off]
		copy(t, slots[0].a[off:end])
		for r := 1; r < len(slots); r++ {
			src := slots[r].a[off:end]
			src = src[:len(t)]
			for i := range t {
				t[i] += src[i]
			}
		}
		copy(dst[off-lo:end-lo], t)
	}
}

// AllGather concatenates every rank's send into recv, in rank order.
func (c *inprocComm) AllGather(ctx context.Context, send, recv []float32) error {
	if c.g.n == 1 {
		if err := c.solo(ctx, opAllGather); err != nil {
			return err
		}
		if len(recv) != len(send) {
			return fmt.Errorf("%w: AllGather: rank 0 has len(recv)=%d, want 1·%d", ErrMismatch, len(recv), len(send))
		}
		copy(recv, send)
		return nil
	}
	return c.run(ctx, slot{op: opAllGather, a: send, b: recv}, func(rd *round) {
		l := len(send)
		for r := range rd.slots {
			copy(recv[r*l:(r+1)*l], rd.slots[r].a)
		}
	})
}

// Broadcast copies root's buf into every rank's buf.
func (c *inprocComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if c.g.n == 1 {
		if err := c.solo(ctx, opBroadcast); err != nil {
			return err
		}
		if root != 0 {
			return fmt.Errorf("%w: Broadcast: root %d out of range [0,1)", ErrMismatch, root)
		}
		return nil
	}
	return c.run(ctx, slot{op: opBroadcast, a: buf, root: root}, func(rd *round) {
		if c.rank != root {
			copy(buf, rd.slots[root].a)
		}
	})
}

var _ Communicator = (*inprocComm)(nil)
