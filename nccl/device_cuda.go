//go:build cuda

package nccl

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// DeviceGroup is one generation of a tensor-parallel group of GPU ranks in
// this process, communicating through NCCL. NewDeviceGroup makes the NCCL
// unique id on the caller's side (the engine, "rank 0"); each rank's
// communicator carries it to the rank, whose device thread creates its NCCL
// communicator (Init) after its CUDA context is current.
//
// The communicators are non-blocking (ncclConfig_t.blocking = 0): NCCL calls
// return ncclInProgress instead of blocking and the rank polls
// ncclCommGetAsyncError, so that an abort from another goroutine is never
// stuck behind a blocked call. Abort on any rank aborts the whole group:
// abort hooks first (the one-shot all-reduce's flag), then ncclCommAbort on
// every rank's communicator, which makes NCCL kernels stuck waiting for a
// dead peer exit.
type DeviceGroup struct {
	id      [128]byte
	size    int   // ranks in the group, in this process and in others
	devices []int // the ranks in this process (all of them unless joined)
	local   *localGroup
	comms   []*deviceComm
}

// NewDeviceGroup makes a group with rank r on CUDA device devices[r]. It
// loads NCCL (setting NCCL_NVLS_ENABLE=0 first) and makes the unique id;
// the ranks connect when they call Init.
func NewDeviceGroup(devices []int) (*DeviceGroup, error) {
	if err := checkDevices(devices); err != nil {
		return nil, err
	}
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	g := &DeviceGroup{size: len(devices), devices: append([]int(nil), devices...), local: newLocalGroup(len(devices))}
	if r := uniqueID(&g.id); r != nil {
		return nil, r
	}
	for r, d := range devices {
		g.comms = append(g.comms, &deviceComm{g: g, rank: r, device: d})
	}
	return g, nil
}

// NewUniqueID loads NCCL (setting NCCL_NVLS_ENABLE=0 first) and makes a
// unique id (ncclGetUniqueId) for a group whose ranks join it from other
// processes (JoinGroup). This process hosts the group's bootstrap root: it
// must stay up until every rank has joined, and the ranks must reach it.
func NewUniqueID() ([]byte, error) {
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	var id [UniqueIDBytes]byte
	if err := uniqueID(&id); err != nil {
		return nil, err
	}
	return id[:], nil
}

// JoinGroup makes this process's rank of a group of size ranks whose other
// ranks live in other processes, on CUDA device device, from the group's
// unique id (made by NewUniqueID elsewhere). Like a DeviceGroup's
// communicators it connects when Init runs on the rank's device thread. It
// does not implement LocalPeers (its peers are not in this process), so
// kernels/cuda uses NCCL for every collective. Abort aborts this rank's NCCL
// communicator; the other ranks' processes abort theirs.
func JoinGroup(id []byte, rank, size, device int) (DeviceCommunicator, error) {
	if err := checkJoin(id, rank, size, device); err != nil {
		return nil, err
	}
	if err := loadNCCL(); err != nil {
		return nil, err
	}
	g := &DeviceGroup{size: size, devices: []int{device}, local: newLocalGroup(1)}
	copy(g.id[:], id)
	c := &deviceComm{g: g, rank: rank, device: device}
	g.comms = []*deviceComm{c}
	return crossProcess{c}, nil
}

// Size is the number of ranks.
func (g *DeviceGroup) Size() int { return g.size }

// Comm returns rank's communicator. It panics if rank is out of range.
func (g *DeviceGroup) Comm(rank int) DeviceCommunicator {
	if rank < 0 || rank >= len(g.comms) {
		panic(fmt.Sprintf("nccl: rank %d out of range [0,%d)", rank, len(g.comms)))
	}
	return g.comms[rank]
}

// Comms returns every rank's communicator in rank order (for
// actors.Config.NewComms).
func (g *DeviceGroup) Comms() []Communicator {
	out := make([]Communicator, len(g.comms))
	for r, c := range g.comms {
		out[r] = c
	}
	return out
}

// Abort aborts the group (see the type's doc); the first reason sticks.
// It returns once every rank's NCCL communicator is aborted.
func (g *DeviceGroup) Abort(reason error) {
	g.local.abort(reason)
	var wg sync.WaitGroup
	for _, c := range g.comms {
		wg.Go(c.abortNCCL)
	}
	wg.Wait()
}

// Aborted returns nil, or the sticky abort reason wrapped with ErrAborted.
func (g *DeviceGroup) Aborted() error { return g.local.abortError() }

type commState uint8

const (
	stateNew     commState = iota // Init has not run
	stateInit                     // ncclCommInitRankConfig returned, ranks connecting
	stateReady                    // usable
	stateFailed                   // an NCCL error; the communicator waits for Abort
	stateAborted                  // ncclCommAbort ran (or Abort came before Init)
)

// deviceComm is one rank of a DeviceGroup. mu serializes every NCCL call on
// the rank's communicator (the rank's thread, the AsyncError poller and
// Abort); no NCCL call blocks for long because the communicator is
// non-blocking.
type deviceComm struct {
	g            *DeviceGroup
	rank, device int

	mu    sync.Mutex
	state commState
	comm  uintptr // ncclComm_t, valid in stateInit, stateReady and stateFailed
	err   error   // stateFailed: the error

	abortOnce sync.Once

	// Host-slice collectives stage through these (rank thread only).
	stream  uintptr
	staging uint64
	stBytes int
}

var (
	_ DeviceCommunicator = (*deviceComm)(nil)
	_ LocalPeers         = (*deviceComm)(nil)
)

func (c *deviceComm) Rank() int      { return c.rank }
func (c *deviceComm) Size() int      { return c.g.size }
func (c *deviceComm) Device() int    { return c.device }
func (c *deviceComm) Devices() []int { return append([]int(nil), c.g.devices...) }

// Abort aborts the whole group.
func (c *deviceComm) Abort(reason error) { c.g.Abort(reason) }

// Exchange implements LocalPeers.
func (c *deviceComm) Exchange(ctx context.Context, v uint64) ([]uint64, error) {
	return c.g.local.exchange(ctx, c.rank, v)
}

// OnAbort implements LocalPeers.
func (c *deviceComm) OnAbort(f func()) { c.g.local.onAbort(f) }

// AsyncError polls ncclCommGetAsyncError. An abort is not an asynchronous
// error (it is what supervision does about one).
func (c *deviceComm) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateFailed:
		return c.err
	case stateInit, stateReady:
		var st ncclRes
		if r := cAsyncError(c.comm, &st); r != ncclSuccess {
			return c.failLocked("ncclCommGetAsyncError", r)
		}
		if st != ncclSuccess && st != ncclInProgress {
			return c.failLocked("asynchronous error", st)
		}
	}
	return nil
}

// failLocked records an NCCL error (the communicator is unusable from now
// on, until the group is aborted) and returns it.
func (c *deviceComm) failLocked(call string, r ncclRes) error {
	if c.state == stateFailed {
		return c.err
	}
	detail := ""
	if c.comm != 0 {
		detail = cLastError(c.comm)
	}
	c.err = &Error{Rank: c.rank, Call: call, Code: int(r), Detail: detail}
	c.state = stateFailed
	return c.err
}

// usableLocked returns why the communicator cannot take a collective, or nil.
func (c *deviceComm) usableLocked() error {
	switch c.state {
	case stateReady:
		return nil
	case stateFailed:
		return c.err
	case stateAborted:
		if err := c.g.local.abortError(); err != nil {
			return err
		}
		return ErrAborted
	}
	return fmt.Errorf("nccl: rank %d: communicator not initialized", c.rank)
}

// Init implements DeviceCommunicator.
func (c *deviceComm) Init(ctx context.Context) error {
	c.mu.Lock()
	switch c.state {
	case stateReady:
		c.mu.Unlock()
		return nil
	case stateFailed, stateAborted:
		err := c.usableLocked()
		c.mu.Unlock()
		return err
	case stateNew:
		dev, err := currentDevice()
		if err == nil && dev != c.device {
			err = fmt.Errorf("nccl: rank %d belongs to device %d but the calling thread's current CUDA context is on device %d (call Init on the rank's device thread)", c.rank, c.device, dev)
		}
		if err != nil {
			c.err, c.state = err, stateFailed
			c.mu.Unlock()
			return err
		}
		comm, r := cInit(c.g.size, &c.g.id, c.rank)
		c.comm = comm
		if r != ncclSuccess && r != ncclInProgress {
			err := c.failLocked("ncclCommInitRankConfig", r)
			c.mu.Unlock()
			return err
		}
		c.state = stateInit
	}
	c.mu.Unlock()
	return c.wait(ctx, "ncclCommInitRankConfig")
}

// ensureInit initialises the communicator on first use.
func (c *deviceComm) ensureInit(ctx context.Context) error {
	c.mu.Lock()
	ready := c.state == stateReady
	c.mu.Unlock()
	if ready {
		return nil
	}
	return c.Init(ctx)
}

// wait polls ncclCommGetAsyncError until the pending operation (init, or a
// collective that returned ncclInProgress) completes, fails, the group is
// aborted or ctx ends.
func (c *deviceComm) wait(ctx context.Context, call string) error {
	var delay time.Duration
	for {
		c.mu.Lock()
		if c.state != stateInit && c.state != stateReady {
			err := c.usableLocked()
			c.mu.Unlock()
			return err
		}
		var st ncclRes
		r := cAsyncError(c.comm, &st)
		switch {
		case r != ncclSuccess:
			err := c.failLocked("ncclCommGetAsyncError", r)
			c.mu.Unlock()
			return err
		case st == ncclSuccess:
			c.state = stateReady
			c.mu.Unlock()
			return nil
		case st != ncclInProgress:
			err := c.failLocked(call, st)
			c.mu.Unlock()
			return err
		}
		c.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("nccl: rank %d: waiting for %s: %w", c.rank, call, err)
		}
		delay = min(max(2*delay, 20*time.Microsecond), 2*time.Millisecond)
		time.Sleep(delay)
	}
}

// finish completes a collective's enqueue that returned r.
func (c *deviceComm) finish(call string, r ncclRes) error {
	switch r {
	case ncclSuccess:
		return nil
	case ncclInProgress:
		return c.wait(context.Background(), call)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateAborted {
		return c.usableLocked()
	}
	return c.failLocked(call, r)
}

// AllReduceSumDevice implements DeviceCommunicator.
func (c *deviceComm) AllReduceSumDevice(buf uintptr, count int, stream uintptr) error {
	if err := c.ready("AllReduceSumDevice", count); err != nil {
		return err
	}
	return c.enqueue("ncclAllReduce", func() ncclRes { return cAllReduce(uint64(buf), uint64(buf), count, c.comm, stream) })
}

// AllGatherDevice implements DeviceCommunicator.
func (c *deviceComm) AllGatherDevice(send, recv uintptr, count int, stream uintptr) error {
	if err := c.ready("AllGatherDevice", count); err != nil {
		return err
	}
	return c.enqueue("ncclAllGather", func() ncclRes { return cAllGather(uint64(send), uint64(recv), count, c.comm, stream) })
}

func (c *deviceComm) broadcastDevice(buf uintptr, count, root int, stream uintptr) error {
	return c.enqueue("ncclBroadcast", func() ncclRes { return cBroadcast(uint64(buf), uint64(buf), count, root, c.comm, stream) })
}

// ready checks the count of the collective op and initialises the
// communicator on first use.
func (c *deviceComm) ready(op string, count int) error {
	if count < 0 {
		return fmt.Errorf("nccl: rank %d: %s of %d values", c.rank, op, count)
	}
	return c.ensureInit(context.Background())
}

// enqueue runs the NCCL call named call (it enqueues a collective on a
// stream) under mu while the communicator is usable, and turns its result
// into an error (finish).
func (c *deviceComm) enqueue(call string, nccl func() ncclRes) error {
	c.mu.Lock()
	if err := c.usableLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	r := nccl()
	c.mu.Unlock()
	return c.finish(call, r)
}

// abortNCCL aborts the rank's NCCL communicator once. The state turns
// aborted before ncclCommAbort runs, under mu, so the rank's thread never
// touches the communicator again (with several ranks in one process, the
// last rank's abort frees every rank's communicator).
func (c *deviceComm) abortNCCL() {
	c.abortOnce.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		comm := c.comm
		c.state, c.comm = stateAborted, 0
		if comm == 0 {
			return
		}
		// NCCL may switch the calling thread's CUDA device while it tears
		// the communicator down: run it on a thread of its own, which
		// exits with the goroutine.
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			cAbort(comm)
			close(done)
		}()
		<-done
	})
}

// ---- host-slice collectives: staged through device memory ----

// stage returns a device buffer of at least bytes and the rank's staging
// stream, made on first use in the current context (the rank's thread).
func (c *deviceComm) stage(bytes int) (uint64, uintptr, error) {
	if c.stream == 0 {
		s, err := streamCreate()
		if err != nil {
			return 0, 0, fmt.Errorf("nccl: rank %d: %w", c.rank, err)
		}
		c.stream = s
	}
	if bytes > c.stBytes {
		if c.staging != 0 {
			if err := devFree(c.staging); err != nil {
				return 0, 0, fmt.Errorf("nccl: rank %d: %w", c.rank, err)
			}
			c.staging, c.stBytes = 0, 0
		}
		n := max(bytes, 1<<20)
		p, err := devAlloc(n)
		if err != nil {
			return 0, 0, fmt.Errorf("nccl: rank %d: staging buffer: %w", c.rank, err)
		}
		c.staging, c.stBytes = p, n
	}
	return c.staging, c.stream, nil
}

// streamWait waits for the staging stream. After an abort NCCL's kernels
// exit and the stream drains; if it does not within abortDrain, the rank
// gives up on it (the group is dead anyway).
func (c *deviceComm) streamWait(ctx context.Context, stream uintptr) error {
	const abortDrain = 5 * time.Second
	var delay time.Duration
	var abortedAt time.Time
	for {
		done, err := streamDone(stream)
		if err != nil {
			return fmt.Errorf("nccl: rank %d: %w", c.rank, err)
		}
		if done {
			return nil
		}
		if err := c.g.local.abortError(); err != nil {
			if abortedAt.IsZero() {
				abortedAt = time.Now()
			} else if time.Since(abortedAt) > abortDrain {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			c.g.Abort(fmt.Errorf("rank %d abandoned a collective: %w", c.rank, err))
			return err
		}
		delay = min(max(2*delay, 5*time.Microsecond), time.Millisecond)
		time.Sleep(delay)
	}
}

// hostCollective runs a staged collective: copy in, enqueue, wait, copy
// out. in is copied to the staging buffer at offset 0; out is read from
// outOff (in float32s) once the collective is done.
func (c *deviceComm) hostCollective(ctx context.Context, in, out []float32, outOff, total int,
	enqueue func(buf uint64, stream uintptr) error) error {
	if err := c.ensureInit(ctx); err != nil {
		return err
	}
	buf, stream, err := c.stage(total * 4)
	if err != nil {
		return err
	}
	if err := htodAsync(buf, in, stream); err != nil {
		return fmt.Errorf("nccl: rank %d: %w", c.rank, err)
	}
	if err := enqueue(buf, stream); err != nil {
		return err
	}
	if err := c.streamWait(ctx, stream); err != nil {
		return err
	}
	// The collective may have "completed" because an abort killed it.
	if err := c.g.local.abortError(); err != nil {
		return err
	}
	if err := dtoh(out, buf+uint64(outOff)*4); err != nil {
		return fmt.Errorf("nccl: rank %d: %w", c.rank, err)
	}
	return nil
}

// AllReduceSum sums buf across the ranks through device memory; it must run
// on the rank's device thread.
func (c *deviceComm) AllReduceSum(ctx context.Context, buf []float32) error {
	if err := c.g.local.abortError(); err != nil {
		return err
	}
	if len(buf) == 0 || c.Size() == 1 {
		return ctx.Err()
	}
	return c.hostCollective(ctx, buf, buf, 0, len(buf), func(p uint64, s uintptr) error {
		return c.AllReduceSumDevice(uintptr(p), len(buf), s)
	})
}

// AllGather concatenates every rank's send into recv through device memory.
func (c *deviceComm) AllGather(ctx context.Context, send, recv []float32) error {
	if err := c.g.local.abortError(); err != nil {
		return err
	}
	n := c.Size()
	if len(recv) != n*len(send) {
		return fmt.Errorf("%w: rank %d: AllGather recv has %d values, want %d·%d", ErrMismatch, c.rank, len(recv), n, len(send))
	}
	if n == 1 || len(send) == 0 {
		copy(recv, send)
		return ctx.Err()
	}
	return c.hostCollective(ctx, send, recv, len(send), len(send)*(n+1), func(p uint64, s uintptr) error {
		return c.AllGatherDevice(uintptr(p), uintptr(p+uint64(len(send))*4), len(send), s)
	})
}

// Broadcast copies root's buf to every rank through device memory.
func (c *deviceComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if err := c.g.local.abortError(); err != nil {
		return err
	}
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("%w: rank %d: Broadcast root %d of %d ranks", ErrMismatch, c.rank, root, c.Size())
	}
	if c.Size() == 1 || len(buf) == 0 {
		return ctx.Err()
	}
	return c.hostCollective(ctx, buf, buf, 0, len(buf), func(p uint64, s uintptr) error {
		return c.broadcastDevice(uintptr(p), len(buf), root, s)
	})
}
