package nccl

// The ring's setup: listening, dialing and the handshake.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"
)

// DialRing forms the ring: it listens on Addrs[Rank] (or uses Listener),
// connects to rank Rank+1 and accepts rank Rank-1, all within DialTimeout.
// The handshake exchanges magic, protocol version, group token, rank and
// size. A connection presenting another group token (a stale generation) or
// not speaking the protocol is refused and DialRing keeps waiting for the
// right one; any other mismatch fails DialRing with an error wrapping
// ErrHandshake on both sides. With Size 1 there is no network at all.
func DialRing(ctx context.Context, cfg TCPConfig) (*TCPComm, error) {
	if err := cfg.check(); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = defaultOpTimeout
	}
	n := cfg.Size
	c := &TCPComm{
		rank:      cfg.Rank,
		size:      n,
		prevRank:  (cfg.Rank - 1 + n) % n,
		nextRank:  (cfg.Rank + 1) % n,
		opTimeout: cfg.OpTimeout,
		done:      make(chan struct{}),
	}
	if n == 1 {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return c, nil
	}

	ln := cfg.Listener
	if ln == nil {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addrs[cfg.Rank])
		if err != nil {
			return nil, fmt.Errorf("nccl: tcp rank %d: listen on %s: %w", cfg.Rank, cfg.Addrs[cfg.Rank], err)
		}
	}
	defer ln.Close()
	sctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(sctx, func() { ln.Close() })
	defer stop()

	type result struct {
		conn net.Conn
		err  error
	}
	accepted, dialed := make(chan result, 1), make(chan result, 1)
	go func() {
		conn, err := acceptPrev(sctx, ln, cfg)
		accepted <- result{conn, err}
	}()
	go func() {
		conn, err := dialNext(sctx, cfg)
		dialed <- result{conn, err}
	}()
	var prev, next net.Conn
	var firstErr error
	for range 2 {
		var r result
		select {
		case r = <-accepted:
			prev = r.conn
		case r = <-dialed:
			next = r.conn
		}
		if r.err != nil && firstErr == nil {
			firstErr = r.err // the root cause; the other side then fails with a cancellation
			cancel()
		}
	}
	if firstErr != nil {
		for _, conn := range []net.Conn{prev, next} {
			if conn != nil {
				conn.Close()
			}
		}
		return nil, firstErr
	}

	for _, conn := range []net.Conn{prev, next} {
		tuneConn(conn)
	}
	c.prev, c.next = prev, next
	c.br = bufio.NewReaderSize(prev, pieceBytes)
	c.rbuf = make([]float32, pieceFloats)
	c.wbuf = make([]byte, frameHdrLen+pieceBytes)
	c.sendq = make(chan sendReq, 1)
	c.sent = make(chan error, 1)
	c.writerDone = make(chan struct{})
	c.monitorDone = make(chan struct{})
	c.wg.Add(2)
	go c.writer()
	go c.monitor()
	return c, nil
}

func (cfg *TCPConfig) check() error {
	switch {
	case cfg.Size < 1:
		return fmt.Errorf("nccl: tcp: group size %d, want ≥ 1", cfg.Size)
	case cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return fmt.Errorf("nccl: tcp: rank %d out of range [0,%d)", cfg.Rank, cfg.Size)
	case cfg.Size > 1 && len(cfg.Addrs) != cfg.Size:
		return fmt.Errorf("nccl: tcp: %d addresses for %d ranks", len(cfg.Addrs), cfg.Size)
	case cfg.Size > math.MaxUint32:
		return fmt.Errorf("nccl: tcp: group size %d too large", cfg.Size)
	case len(cfg.Group) > maxHelloString:
		return fmt.Errorf("nccl: tcp: group token of %d bytes, want ≤ %d", len(cfg.Group), maxHelloString)
	}
	return nil
}

var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

func tuneConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAliveConfig(keepAlive)
	}
}

const (
	helloMagic     = 0x4f4c4843 // "CHLO", little-endian
	tcpVersion     = 1
	helloLen       = 20
	maxHelloString = 4096

	helloRequest uint8 = 1
	helloAccept  uint8 = 2
	helloRefuse  uint8 = 3
)

// hello is a handshake message: the dialer's request, or the acceptor's
// answer (msg says why it refused).
type hello struct {
	kind       uint8
	version    uint16
	rank, size uint32
	token, msg string
}

var errNotRing = errors.New("not a cohort ring handshake")

func writeHello(w io.Writer, h hello) error {
	if len(h.msg) > maxHelloString {
		h.msg = h.msg[:maxHelloString]
	}
	b := make([]byte, helloLen, helloLen+len(h.token)+len(h.msg))
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	binary.LittleEndian.PutUint16(b[4:], h.version)
	b[6] = h.kind
	binary.LittleEndian.PutUint32(b[8:], h.rank)
	binary.LittleEndian.PutUint32(b[12:], h.size)
	binary.LittleEndian.PutUint16(b[16:], uint16(len(h.token)))
	binary.LittleEndian.PutUint16(b[18:], uint16(len(h.msg)))
	b = append(b, h.token...)
	b = append(b, h.msg...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (hello, error) {
	var b [helloLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return hello{}, err
	}
	if binary.LittleEndian.Uint32(b[0:]) != helloMagic {
		return hello{}, errNotRing
	}
	h := hello{
		version: binary.LittleEndian.Uint16(b[4:]),
		kind:    b[6],
		rank:    binary.LittleEndian.Uint32(b[8:]),
		size:    binary.LittleEndian.Uint32(b[12:]),
	}
	tl, ml := int(binary.LittleEndian.Uint16(b[16:])), int(binary.LittleEndian.Uint16(b[18:]))
	if tl > maxHelloString || ml > maxHelloString {
		return hello{}, errNotRing
	}
	s := make([]byte, tl+ml)
	if _, err := io.ReadFull(r, s); err != nil {
		return hello{}, err
	}
	h.token, h.msg = string(s[:tl]), string(s[tl:])
	return h, nil
}

// candidate is the outcome of one accepted connection's handshake.
type candidate struct {
	conn  net.Conn
	err   error
	fatal bool // the right peer with a wrong configuration: give up
}

// acceptPrev accepts connections until one from rank Rank-1 passes the
// handshake, a fatal mismatch occurs, or ctx ends (ctx's end closes ln).
func acceptPrev(ctx context.Context, ln net.Listener, cfg TCPConfig) (net.Conn, error) {
	want := (cfg.Rank - 1 + cfg.Size) % cfg.Size
	cands := make(chan candidate)
	quit := make(chan struct{})
	defer close(quit)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			go func() {
				cd := handshakeAccept(ctx, conn, cfg, want)
				select {
				case cands <- cd:
				case <-quit:
					if cd.conn != nil {
						cd.conn.Close()
					}
				}
			}()
		}
	}()
	var refused error
	for {
		select {
		case cd := <-cands:
			if cd.err == nil {
				return cd.conn, nil
			}
			if cd.fatal {
				return nil, cd.err
			}
			refused = cd.err
		case err := <-acceptErr:
			if ctx.Err() == nil {
				return nil, fmt.Errorf("nccl: tcp rank %d: accept: %w", cfg.Rank, err)
			}
			err = fmt.Errorf("nccl: tcp rank %d: rank %d did not connect (DialTimeout %v): %w", cfg.Rank, want, cfg.DialTimeout, ctx.Err())
			if refused != nil {
				err = fmt.Errorf("%w (last refused connection: %w)", err, refused)
			}
			return nil, err
		}
	}
}

func handshakeAccept(ctx context.Context, conn net.Conn, cfg TCPConfig, want int) candidate {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(err error, fatal bool) candidate {
		stop()
		conn.Close()
		return candidate{err: err, fatal: fatal}
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	from := conn.RemoteAddr()
	h, err := readHello(conn)
	if err != nil {
		return fail(fmt.Errorf("nccl: tcp rank %d: handshake with %v: %w", cfg.Rank, from, err), false)
	}
	me := hello{version: tcpVersion, rank: uint32(cfg.Rank), size: uint32(cfg.Size), token: cfg.Group}
	refuse := func(fatal bool, format string, args ...any) candidate {
		msg := fmt.Sprintf(format, args...)
		r := me
		r.kind, r.msg = helloRefuse, msg
		writeHello(conn, r)
		return fail(fmt.Errorf("%w: rank %d refused rank %d at %v: %s", ErrHandshake, cfg.Rank, h.rank, from, msg), fatal)
	}
	switch {
	case h.kind != helloRequest:
		return refuse(false, "unexpected handshake message kind %d", h.kind)
	case h.token != cfg.Group:
		return refuse(false, "group token mismatch: rank %d has %q, rank %d has %q (stale generation?)",
			h.rank, h.token, cfg.Rank, cfg.Group)
	case h.version != tcpVersion:
		return refuse(true, "protocol version mismatch: rank %d speaks %d, rank %d speaks %d", h.rank, h.version, cfg.Rank, tcpVersion)
	case int(h.size) != cfg.Size:
		return refuse(true, "group size mismatch: rank %d has size %d, rank %d has size %d", h.rank, h.size, cfg.Rank, cfg.Size)
	case int(h.rank) != want:
		return refuse(true, "rank %d connected to rank %d, whose ring predecessor is rank %d (check Addrs)", h.rank, cfg.Rank, want)
	}
	acc := me
	acc.kind = helloAccept
	if err := writeHello(conn, acc); err != nil {
		return fail(fmt.Errorf("nccl: tcp rank %d: handshake with rank %d at %v: %w", cfg.Rank, h.rank, from, err), false)
	}
	if !stop() {
		conn.Close()
		return candidate{err: ctx.Err()}
	}
	conn.SetDeadline(time.Time{})
	return candidate{conn: conn}
}

// dialNext connects to rank Rank+1, retrying connection failures until ctx
// ends; a refused handshake is final.
func dialNext(ctx context.Context, cfg TCPConfig) (net.Conn, error) {
	to := (cfg.Rank + 1) % cfg.Size
	addr := cfg.Addrs[to]
	d := net.Dialer{KeepAliveConfig: keepAlive}
	backoff := 5 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var fatal bool
			conn, err, fatal = handshakeDial(ctx, conn, cfg, to, addr)
			if err == nil {
				return conn, nil
			}
			if fatal {
				return nil, err
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("nccl: tcp rank %d: cannot connect to rank %d at %s (DialTimeout %v): %w (last error: %v)",
				cfg.Rank, to, addr, cfg.DialTimeout, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

func handshakeDial(ctx context.Context, conn net.Conn, cfg TCPConfig, to int, addr string) (net.Conn, error, bool) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(err error, fatal bool) (net.Conn, error, bool) {
		stop()
		conn.Close()
		return nil, err, fatal
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	me := hello{kind: helloRequest, version: tcpVersion, rank: uint32(cfg.Rank), size: uint32(cfg.Size), token: cfg.Group}
	if err := writeHello(conn, me); err != nil {
		return fail(err, false)
	}
	h, err := readHello(conn)
	if err != nil {
		return fail(fmt.Errorf("handshake with rank %d at %s: %w", to, addr, err), false)
	}
	bad := func(format string, args ...any) (net.Conn, error, bool) {
		return fail(fmt.Errorf("%w: rank %d: rank %d at %s: %s", ErrHandshake, cfg.Rank, to, addr, fmt.Sprintf(format, args...)), true)
	}
	switch {
	case h.kind == helloRefuse:
		return bad("refused the connection: %s", h.msg)
	case h.kind != helloAccept:
		return bad("unexpected handshake message kind %d", h.kind)
	case h.token != cfg.Group:
		return bad("group token mismatch: %q, want %q", h.token, cfg.Group)
	case h.version != tcpVersion:
		return bad("protocol version %d, want %d", h.version, tcpVersion)
	case int(h.size) != cfg.Size:
		return bad("group size %d, want %d", h.size, cfg.Size)
	case int(h.rank) != to:
		return bad("answered as rank %d", h.rank)
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err(), false
	}
	conn.SetDeadline(time.Time{})
	return conn, nil, false
}
