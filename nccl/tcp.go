package nccl

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// TCPConfig configures one rank of a TCP ring (see DialRing).
type TCPConfig struct {
	Rank, Size int
	// Addrs holds the "host:port" of every rank, indexed by rank; rank r
	// listens on Addrs[r] and connects to Addrs[(r+1)%Size]. With Size 1 it
	// may be empty.
	Addrs []string
	// Group is the group/generation token. Ranks refuse connections that
	// present another token, so a stale generation never joins a new ring.
	Group string
	// DialTimeout bounds DialRing (default 10s). OpTimeout bounds each
	// collective (default 30s; negative disables it): a collective that
	// exceeds it aborts the communicator.
	DialTimeout, OpTimeout time.Duration
	// Listener, if set, is used instead of listening on Addrs[Rank].
	// DialRing takes ownership of it and closes it before returning: the
	// listener is needed only while the ring forms.
	Listener net.Listener
}

const (
	defaultDialTimeout = 10 * time.Second
	defaultOpTimeout   = 30 * time.Second
)

// ErrHandshake is wrapped by DialRing's error when a peer refuses the ring
// handshake or answers it inconsistently (group token, protocol version,
// group size or rank mismatch).
var ErrHandshake = errors.New("nccl: tcp ring handshake refused")

// errClosed is the abort reason of Close.
var errClosed = errors.New("nccl: tcp communicator closed")

// PeerError is the abort reason of a TCP communicator that failed because of
// a ring neighbour: its connection dropped, it timed out, it sent a frame
// that does not match this rank's collective, or it aborted itself.
type PeerError struct {
	Rank int    // the neighbour
	Self int    // the rank that observed the failure
	Dir  string // "prev" or "next": which neighbour of Self Rank is
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("rank %d (%s of rank %d): %v", e.Rank, e.Dir, e.Self, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// TCPComm is one rank of a ring of CPU ranks that talk over TCP, typically
// one per process. Rank r sends to rank r+1 and receives from rank r-1 on
// two connections; the unused reverse direction of each connection carries
// only abort notices, so a rank learns of a neighbour's failure even when
// idle. Each collective has a sequence number and every data frame names
// the collective, its sequence number, step and sizes: ranks that diverge
// fail loudly with ErrMismatch instead of exchanging garbage.
//
// A failure (Abort, a cancelled context, an OpTimeout, a peer's failure) is
// sticky and spreads around the ring: the aborting rank notifies both
// neighbours and closes its connections, so every blocked peer returns.
type TCPComm struct {
	rank, size         int
	prevRank, nextRank int
	opTimeout          time.Duration

	prev, next net.Conn
	br         *bufio.Reader // on prev
	rbuf       []float32     // payload pieces read from prev
	rhdr       [frameHdrLen]byte

	wmu     sync.Mutex // serializes whole frames on next
	wbuf    []byte     // guarded by wmu
	wbroken bool       // guarded by wmu: a frame was cut short, next is out of sync

	sendq       chan sendReq // to the writer; at most one request outstanding
	sent        chan error   // the writer's answer to each request
	writerDone  chan struct{}
	monitorDone chan struct{}

	busy atomic.Bool
	seq  uint64 // collectives started; owned by the busy holder

	mu    sync.Mutex
	err   error // sticky, wraps ErrAborted
	async bool  // err came from a peer or the network
	done  chan struct{}

	wg sync.WaitGroup
}

var _ Communicator = (*TCPComm)(nil)

const (
	frameMagic  = 0x474e5243 // "CRNG", little-endian
	frameHdrLen = 32
	// pieceBytes is the unit of encoding and socket I/O of payloads, and
	// the Broadcast pipeline's segment.
	pieceBytes  = 64 << 10
	pieceFloats = pieceBytes / 4
	maxReason   = 4096
	// notifyTimeout bounds the best-effort abort notices to neighbours.
	notifyTimeout = 100 * time.Millisecond

	opAbortFrame opKind = 0xff
)

// frameHdr is the header of every frame: magic u32, op u8, 3 pad bytes,
// seq u64, step u32, total u32, root u32, count u32, little-endian. count is
// the number of float32s that follow (of reason bytes for an abort frame);
// total is the per-rank element count of the collective.
type frameHdr struct {
	op                       opKind
	seq                      uint64
	step, total, root, count uint32
}

func (h frameHdr) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4], b[5], b[6], b[7] = byte(h.op), 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint32(b[16:], h.step)
	binary.LittleEndian.PutUint32(b[20:], h.total)
	binary.LittleEndian.PutUint32(b[24:], h.root)
	binary.LittleEndian.PutUint32(b[28:], h.count)
}

func parseHdr(b []byte) (frameHdr, bool) {
	h := frameHdr{
		op:    opKind(b[4]),
		seq:   binary.LittleEndian.Uint64(b[8:]),
		step:  binary.LittleEndian.Uint32(b[16:]),
		total: binary.LittleEndian.Uint32(b[20:]),
		root:  binary.LittleEndian.Uint32(b[24:]),
		count: binary.LittleEndian.Uint32(b[28:]),
	}
	return h, binary.LittleEndian.Uint32(b[0:]) == frameMagic
}

func (h frameHdr) String() string {
	s := fmt.Sprintf("%v seq=%d step=%d total=%d count=%d", h.op, h.seq, h.step, h.total, h.count)
	if h.op == opBroadcast {
		s += fmt.Sprintf(" root=%d", h.root)
	}
	return s
}

func abortFrame(text string) []byte {
	if len(text) > maxReason {
		text = text[:maxReason]
	}
	b := make([]byte, frameHdrLen, frameHdrLen+len(text))
	frameHdr{op: opAbortFrame, count: uint32(len(text))}.put(b)
	return append(b, text...)
}

// hostLE reports a little-endian host, whose float32 memory is the wire
// format: payloads then travel straight between buffers and sockets.
var hostLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// asBytes views f's memory as bytes (the wire format on a little-endian host).
func asBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

func putFloats(dst []byte, src []float32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func getFloats(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// addFloats adds the received partial sums to dst: dst[i] = recv[i] + dst[i].
func addFloats(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])) + dst[i]
	}
}

func addInto(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = src[i] + dst[i]
	}
}

// ---- Communicator ----

func (c *TCPComm) Rank() int { return c.rank }
func (c *TCPComm) Size() int { return c.size }

// Abort makes every pending and later collective fail with an error wrapping
// ErrAborted and reason; the first reason sticks. The neighbours are
// notified and both connections closed, so the whole ring aborts.
func (c *TCPComm) Abort(reason error) { c.abort(reason, false) }

// AsyncError returns the sticky abort error once the communicator failed
// because of a peer or the network (a dropped connection, an OpTimeout, a
// peer's abort, diverging collectives); nil otherwise, including after a
// local Abort or cancellation.
func (c *TCPComm) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.async {
		return c.err
	}
	return nil
}

// Aborted returns nil, or the sticky abort error (wrapping ErrAborted).
func (c *TCPComm) Aborted() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close aborts the communicator (peers see that this rank closed it) and
// waits for its goroutines. It always returns nil.
func (c *TCPComm) Close() error {
	c.abort(fmt.Errorf("rank %d: %w", c.rank, errClosed), false)
	c.wg.Wait()
	return nil
}

func (c *TCPComm) abort(reason error, async bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	text := "aborted"
	if reason == nil {
		c.err = ErrAborted
	} else {
		c.err = fmt.Errorf("%w: %w", ErrAborted, reason)
		text = reason.Error()
	}
	c.async = async
	close(c.done)
	c.mu.Unlock()
	if c.size == 1 {
		return
	}
	// Best-effort notices, then close so that blocked I/O returns. The
	// reverse direction of prev carries nothing else. On next, the notice
	// must follow a whole data frame: the deadline bounds the frame being
	// written, if any, then the notice goes after it unless it was cut.
	frame := abortFrame(text)
	dl := time.Now().Add(notifyTimeout)
	c.prev.SetWriteDeadline(dl)
	c.prev.Write(frame)
	c.next.SetWriteDeadline(dl)
	c.wmu.Lock()
	if !c.wbroken {
		c.next.Write(frame)
	}
	c.wbroken = true
	c.wmu.Unlock()
	c.prev.Close()
	c.next.Close()
}

// peerFail aborts with a PeerError for neighbour dir (unless already
// aborted) and returns the sticky error.
func (c *TCPComm) peerFail(dir string, err error) error {
	peer := c.prevRank
	if dir == "next" {
		peer = c.nextRank
	}
	if c.Aborted() == nil { // else our own abort closed the connection
		c.abort(&PeerError{Rank: peer, Self: c.rank, Dir: dir, Err: err}, true)
	}
	return c.Aborted()
}

// ioFail turns an I/O error on neighbour dir during collective h into the
// sticky abort error.
func (c *TCPComm) ioFail(dir string, h frameHdr, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return c.peerFail(dir, fmt.Errorf("%v seq %d: no progress within OpTimeout %v: %w", h.op, h.seq, c.opTimeout, err))
	}
	if dir == "next" && c.Aborted() == nil {
		// A write fails (EPIPE, reset) when next closed; its notice, which
		// says why, is queued for the monitor, which ends promptly on a
		// dead connection. Let it report first.
		t := time.NewTimer(notifyTimeout)
		select {
		case <-c.monitorDone:
		case <-t.C:
		}
		t.Stop()
	}
	return c.peerFail(dir, fmt.Errorf("connection lost during %v seq %d: %w", h.op, h.seq, err))
}

// monitor reads the reverse direction of next, which carries only abort
// notices: next's failure aborts this rank even while it is idle.
func (c *TCPComm) monitor() {
	defer c.wg.Done()
	defer close(c.monitorDone)
	var b [frameHdrLen]byte
	if _, err := io.ReadFull(c.next, b[:]); err != nil {
		c.peerFail("next", fmt.Errorf("connection lost: %w", err))
		return
	}
	h, ok := parseHdr(b[:])
	if !ok || h.op != opAbortFrame || h.count > maxReason {
		c.peerFail("next", fmt.Errorf("protocol error: unexpected frame %v on the notice channel", h))
		return
	}
	text := make([]byte, h.count)
	if _, err := io.ReadFull(c.next, text); err != nil {
		c.peerFail("next", fmt.Errorf("aborted (reason lost: %w)", err))
		return
	}
	c.peerFail("next", fmt.Errorf("aborted: %s", text))
}

type sendReq struct {
	h    frameHdr
	data []float32
}

// writer sends the data frames to next, so that sending overlaps receiving
// (a rank that only wrote before reading could deadlock the ring on full
// socket buffers). It answers every request it takes on sent.
func (c *TCPComm) writer() {
	defer c.wg.Done()
	defer close(c.writerDone)
	for {
		select {
		case r := <-c.sendq:
			c.sent <- c.writeFrame(r.h, r.data)
		case <-c.done:
			return
		}
	}
}

// writeFrame writes one whole frame to next.
func (c *TCPComm) writeFrame(h frameHdr, data []float32) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	h.count = uint32(len(data))
	b := c.wbuf
	h.put(b)
	var err error
	switch {
	case hostLE && len(data) > smallFloats:
		bufs := net.Buffers{b[:frameHdrLen], asBytes(data)}
		_, err = bufs.WriteTo(c.next)
	case hostLE:
		_, err = c.next.Write(append(b[:frameHdrLen], asBytes(data)...))
	default:
		off := frameHdrLen
		for {
			m := min(len(data), (len(b)-off)/4)
			putFloats(b[off:], data[:m])
			if _, err = c.next.Write(b[:off+4*m]); err != nil || m == len(data) {
				break
			}
			data = data[m:]
			off = 0
		}
	}
	if err != nil {
		c.wbroken = true
	}
	return err
}

// smallFloats bounds the frames a collective writes itself rather than
// through the writer: the handoff costs more than writing a small frame.
// This cannot deadlock the ring. In AllReduceSum and AllGather a rank writes
// at most one frame more than it has read, so for every rank to block in a
// write each link would have to hold more than one unread frame, more than
// its socket buffers' worth when the last is small; in Broadcast the data
// flows down a chain whose end only reads, then acknowledges.
const smallFloats = 1024

// post sends a frame to next: a small one right away, a larger one through
// the writer, in which case it reports async and the caller must waitSend
// before the next post and before it returns (the writer reads data).
func (c *TCPComm) post(h frameHdr, data []float32) (async bool, err error) {
	if len(data) <= smallFloats {
		if err := c.writeFrame(h, data); err != nil {
			return false, c.ioFail("next", h, err)
		}
		return false, nil
	}
	select {
	case c.sendq <- sendReq{h, data}:
	case <-c.writerDone:
	}
	return true, nil
}

func (c *TCPComm) waitSend(h frameHdr) error {
	select {
	case err := <-c.sent:
		if err != nil {
			return c.ioFail("next", h, err)
		}
		return nil
	case <-c.writerDone: // aborted; the writer no longer touches data
		return c.Aborted()
	}
}

// recvFrame reads the frame want from prev into dst (adding it when add).
func (c *TCPComm) recvFrame(want frameHdr, dst []float32, add bool) error {
	want.count = uint32(len(dst))
	if _, err := io.ReadFull(c.br, c.rhdr[:]); err != nil {
		return c.ioFail("prev", want, err)
	}
	got, ok := parseHdr(c.rhdr[:])
	switch {
	case !ok:
		return c.peerFail("prev", fmt.Errorf("protocol error: bad frame magic %#x during %v", binary.LittleEndian.Uint32(c.rhdr[:]), want))
	case got.op == opAbortFrame && got.count <= maxReason:
		text := make([]byte, got.count)
		if _, err := io.ReadFull(c.br, text); err != nil {
			return c.peerFail("prev", fmt.Errorf("aborted (reason lost: %w)", err))
		}
		return c.peerFail("prev", fmt.Errorf("aborted: %s", text))
	case got != want:
		return c.peerFail("prev", fmt.Errorf("%w: rank %d expected %v, rank %d sent %v", ErrMismatch, c.rank, want, c.prevRank, got))
	}
	if hostLE && !add {
		if _, err := io.ReadFull(c.br, asBytes(dst)); err != nil {
			return c.ioFail("prev", want, err)
		}
		return nil
	}
	for len(dst) > 0 {
		m := min(len(dst), pieceFloats)
		p := c.rbuf[:m]
		if _, err := io.ReadFull(c.br, asBytes(p)); err != nil {
			return c.ioFail("prev", want, err)
		}
		switch {
		case hostLE:
			addInto(dst[:m], p)
		case add:
			addFloats(dst[:m], asBytes(p))
		default:
			getFloats(dst[:m], asBytes(p))
		}
		dst = dst[m:]
	}
	return nil
}

// exchange sends send to next while receiving recv from prev.
func (c *TCPComm) exchange(h frameHdr, send, recv []float32, add bool) error {
	async, err := c.post(h, send)
	if err != nil {
		return err
	}
	err = c.recvFrame(h, recv, add)
	if async {
		if serr := c.waitSend(h); err == nil {
			err = serr
		}
	}
	return err
}

// begin starts collective op: it claims the communicator, checks the abort
// state and ctx, arms OpTimeout and ctx cancellation. end releases it.
func (c *TCPComm) begin(ctx context.Context, op opKind) (frameHdr, func(), error) {
	if !c.busy.CompareAndSwap(false, true) {
		return frameHdr{}, nil, fmt.Errorf("%w: rank %d, %v", ErrConcurrentUse, c.rank, op)
	}
	release := func() { c.busy.Store(false) }
	if err := c.Aborted(); err != nil {
		release()
		return frameHdr{}, nil, err
	}
	c.seq++
	h := frameHdr{op: op, seq: c.seq}
	if err := ctx.Err(); err != nil {
		c.abort(fmt.Errorf("rank %d abandoned %v seq %d: %w", c.rank, op, h.seq, err), false)
		release()
		return frameHdr{}, nil, c.fail(ctx)
	}
	if c.size == 1 {
		return h, release, nil
	}
	if c.opTimeout > 0 {
		// Under mu, so that a later abort's notice deadline is not undone.
		dl := time.Now().Add(c.opTimeout)
		c.mu.Lock()
		if c.err == nil {
			c.prev.SetReadDeadline(dl)
			c.next.SetWriteDeadline(dl)
		}
		c.mu.Unlock()
	}
	if ctx.Done() == nil {
		return h, release, nil
	}
	stop := context.AfterFunc(ctx, func() {
		c.abort(fmt.Errorf("rank %d abandoned %v seq %d: %w", c.rank, op, h.seq, ctx.Err()), false)
	})
	return h, func() { stop(); release() }, nil
}

// fail returns the sticky error, making sure it also matches ctx's error when
// ctx ended.
func (c *TCPComm) fail(ctx context.Context) error {
	err := c.Aborted()
	if ce := ctx.Err(); ce != nil && !errors.Is(err, ce) {
		err = fmt.Errorf("%w: %w", ce, err)
	}
	return err
}

// localMismatch aborts for arguments this rank alone can see are wrong: the
// peers cannot agree on skipping the collective, so the ring fails loudly
// instead of waiting for OpTimeout.
func (c *TCPComm) localMismatch(format string, args ...any) error {
	c.abort(fmt.Errorf("%w: rank %d: "+format, append([]any{ErrMismatch, c.rank}, args...)...), false)
	return c.Aborted()
}

// chunkBounds returns chunk k of l elements split into n near-equal chunks.
func chunkBounds(l, n, k int) (lo, hi int) {
	per, rem := l/n, l%n
	lo = k*per + min(k, rem)
	hi = lo + per
	if k < rem {
		hi++
	}
	return lo, hi
}

// AllReduceSum sums buf across ranks in place with a ring reduce-scatter
// then all-gather. Chunk k is accumulated along the ring starting at rank k
// (x_k + x_{k+1} + ... + x_{k-1}) and is computed once, by rank k-1, which
// all-gathers it bit for bit: every rank ends with identical bits.
func (c *TCPComm) AllReduceSum(ctx context.Context, buf []float32) error {
	h, end, err := c.begin(ctx, opAllReduceSum)
	if err != nil {
		return err
	}
	defer end()
	if c.size == 1 {
		return nil
	}
	if uint64(len(buf)) > math.MaxUint32 {
		return c.localMismatch("AllReduceSum of %d elements is too large", len(buf))
	}
	n, r, l := c.size, c.rank, len(buf)
	h.total = uint32(l)
	for s := range n - 1 {
		slo, shi := chunkBounds(l, n, (r-s+n)%n)
		rlo, rhi := chunkBounds(l, n, (r-s-1+2*n)%n)
		h.step = uint32(s)
		if err := c.exchange(h, buf[slo:shi], buf[rlo:rhi], true); err != nil {
			return c.fail(ctx)
		}
	}
	for s := range n - 1 {
		slo, shi := chunkBounds(l, n, (r+1-s+n)%n)
		rlo, rhi := chunkBounds(l, n, (r-s+n)%n)
		h.step = uint32(n - 1 + s)
		if err := c.exchange(h, buf[slo:shi], buf[rlo:rhi], false); err != nil {
			return c.fail(ctx)
		}
	}
	return nil
}

// AllGather concatenates every rank's send into recv, in rank order, passing
// blocks around the ring.
func (c *TCPComm) AllGather(ctx context.Context, send, recv []float32) error {
	h, end, err := c.begin(ctx, opAllGather)
	if err != nil {
		return err
	}
	defer end()
	n, r, l := c.size, c.rank, len(send)
	if len(recv) != n*l {
		if n == 1 {
			return fmt.Errorf("%w: AllGather: rank 0 has len(recv)=%d, want 1·%d", ErrMismatch, len(recv), l)
		}
		return c.localMismatch("AllGather: len(recv)=%d, want %d·%d", len(recv), n, l)
	}
	copy(recv[r*l:(r+1)*l], send)
	if n == 1 {
		return nil
	}
	if uint64(l) > math.MaxUint32 {
		return c.localMismatch("AllGather of %d elements is too large", l)
	}
	h.total = uint32(l)
	for s := range n - 1 {
		sb, rb := (r-s+n)%n, (r-s-1+2*n)%n
		h.step = uint32(s)
		if err := c.exchange(h, recv[sb*l:(sb+1)*l], recv[rb*l:(rb+1)*l], false); err != nil {
			return c.fail(ctx)
		}
	}
	return nil
}

// Broadcast copies root's buf into every rank's buf: it flows down the ring
// from root in pipelined segments, each rank forwarding a segment while it
// receives the next; the last rank then acknowledges to root.
func (c *TCPComm) Broadcast(ctx context.Context, buf []float32, root int) error {
	h, end, err := c.begin(ctx, opBroadcast)
	if err != nil {
		return err
	}
	defer end()
	n, l := c.size, len(buf)
	if root < 0 || root >= n {
		if n == 1 {
			return fmt.Errorf("%w: Broadcast: root %d out of range [0,1)", ErrMismatch, root)
		}
		return c.localMismatch("Broadcast: root %d out of range [0,%d)", root, n)
	}
	if n == 1 {
		return nil
	}
	if uint64(l) > math.MaxUint32 {
		return c.localMismatch("Broadcast of %d elements is too large", l)
	}
	h.total, h.root = uint32(l), uint32(root)
	pos := (c.rank - root + n) % n // 0: root, n-1: end of the chain
	segs := max(1, (l+pieceFloats-1)/pieceFloats)
	pending := false // a segment is with the writer
	for i := range segs {
		seg := buf[min(i*pieceFloats, l):min((i+1)*pieceFloats, l)]
		h.step = uint32(i)
		if pos != 0 {
			if err := c.recvFrame(h, seg, false); err != nil {
				if pending {
					c.waitSend(h)
				}
				return c.fail(ctx)
			}
		}
		if pos != n-1 {
			if pending {
				pending = false
				if err := c.waitSend(h); err != nil {
					return c.fail(ctx)
				}
			}
			if pending, err = c.post(h, seg); err != nil {
				return c.fail(ctx)
			}
		}
	}
	// Close the loop: the end of the chain acknowledges to root (its next),
	// so root too returns only once every rank agreed on the collective.
	h.step = uint32(segs)
	switch pos {
	case n - 1:
		if _, err := c.post(h, nil); err != nil {
			return c.fail(ctx)
		}
	case 0:
		if err := c.recvFrame(h, nil, false); err != nil {
			if pending {
				c.waitSend(h)
			}
			return c.fail(ctx)
		}
	}
	if pending {
		if err := c.waitSend(h); err != nil {
			return c.fail(ctx)
		}
	}
	return nil
}
