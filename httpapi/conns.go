package httpapi

import (
	"container/list"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Connection limits (Options.MaxConns, Options.MaxConnsPerIP) are kept by
// connLimiter, which wraps the listener and sees every connection's state
// through fasthttp's ConnState hook:
//
//   - Over MaxConns open connections, the oldest idle one (accepted and
//     waiting for its first request, or kept alive between requests) is
//     closed to make room; when none is idle the new connection is closed
//     instead. Idle connections therefore never lock out a client that sends
//     a request.
//   - Over MaxConnsPerIP connections from one address, the new connection is
//     closed.
//   - When accept fails for lack of file descriptors (EMFILE, ENFILE) or
//     memory, the listener frees a reserved descriptor, accepts the waiting
//     connection and closes it (so the client sees a refusal instead of a
//     hang in the backlog), takes the reserve back and backs off briefly;
//     the server keeps serving instead of exiting.

// connLimiter tracks the open connections of one listener.
type connLimiter struct {
	net.Listener
	maxConns, maxPerIP int
	writeTimeout       time.Duration // per write (0: none)
	logf               func(string, ...any)

	mu     sync.Mutex
	open   int
	perIP  map[string]int
	idle   *list.List // of *limitedConn, oldest first
	spare  *os.File   // a reserved descriptor, released to shed under EMFILE
	closed chan struct{}
	once   sync.Once

	shed    int // connections closed by a limit, for tests and logs
	lastLog time.Time
}

// limitedConn is a connection counted by its limiter.
type limitedConn struct {
	net.Conn
	l        *connLimiter
	ip       string
	idleElem *list.Element // non-nil while idle
	gone     bool          // counted out (l.mu)
	once     sync.Once
}

func newConnLimiter(ln net.Listener, maxConns, maxPerIP int, writeTimeout time.Duration, logf func(string, ...any)) *connLimiter {
	l := &connLimiter{Listener: ln, maxConns: maxConns, maxPerIP: maxPerIP, writeTimeout: writeTimeout, logf: logf,
		perIP: map[string]int{}, idle: list.New(), closed: make(chan struct{})}
	l.spare, _ = os.Open(os.DevNull)
	return l
}

// Accept returns the next connection within the limits.
func (l *connLimiter) Accept() (net.Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !resourceError(err) {
				return nil, err
			}
			l.shedUnderPressure(err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return nil, net.ErrClosed
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// Close closes the listener.
func (l *connLimiter) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.mu.Lock()
		if l.spare != nil {
			l.spare.Close()
			l.spare = nil
		}
		l.mu.Unlock()
	})
	return l.Listener.Close()
}

// resourceError reports whether an accept error is a lack of descriptors,
// buffers or memory: transient, so the server must not stop on it.
func resourceError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// shedUnderPressure frees the reserved descriptor, accepts one waiting
// connection and closes it, then takes the reserve back.
func (l *connLimiter) shedUnderPressure(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logShed("accept failed (%v): shedding connections", cause)
	if l.spare == nil {
		return
	}
	l.spare.Close()
	l.spare = nil
	if tl, ok := l.Listener.(*net.TCPListener); ok {
		_ = tl.SetDeadline(time.Now().Add(time.Millisecond))
		if c, err := tl.Accept(); err == nil {
			c.Close()
			l.shed++
		}
		_ = tl.SetDeadline(time.Time{})
	}
	l.spare, _ = os.Open(os.DevNull)
}

// admit counts c in, closing an idle connection or c itself to stay within
// the limits; it returns nil when c was closed.
func (l *connLimiter) admit(c net.Conn) net.Conn {
	ip := ""
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	l.mu.Lock()
	if l.maxPerIP > 0 && l.perIP[ip] >= l.maxPerIP {
		l.shed++
		l.logShed("%s has %d connections (limit %d): closing the new one", ip, l.perIP[ip], l.maxPerIP)
		l.mu.Unlock()
		c.Close()
		return nil
	}
	var evict *limitedConn
	if l.maxConns > 0 && l.open >= l.maxConns {
		if e := l.idle.Front(); e != nil {
			evict = e.Value.(*limitedConn)
			l.idle.Remove(e)
			evict.idleElem = nil
		} else {
			l.shed++
			l.logShed("%d connections open (limit %d), none idle: closing the new one", l.open, l.maxConns)
			l.mu.Unlock()
			c.Close()
			return nil
		}
	}
	lc := &limitedConn{Conn: c, l: l, ip: ip}
	l.open++
	l.perIP[ip]++
	lc.idleElem = l.idle.PushBack(lc) // idle until its first request
	if evict != nil {
		l.shed++
		l.logShed("%d connections open (limit %d): closing the oldest idle one", l.open, l.maxConns)
	}
	l.mu.Unlock()
	if evict != nil {
		evict.Close()
	}
	return lc
}

// logShed logs at most once a second; l.mu is held.
func (l *connLimiter) logShed(format string, args ...any) {
	if now := time.Now(); now.Sub(l.lastLog) >= time.Second {
		l.lastLog = now
		l.logf("httpapi: "+format, args...)
	}
}

// connState is fasthttp's ConnState hook: it keeps the idle list.
func (l *connLimiter) connState(c net.Conn, st fasthttp.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case fasthttp.StateActive, fasthttp.StateHijacked, fasthttp.StateClosed:
		if lc.idleElem != nil {
			l.idle.Remove(lc.idleElem)
			lc.idleElem = nil
		}
	case fasthttp.StateIdle:
		if lc.idleElem == nil && !lc.gone {
			lc.idleElem = l.idle.PushBack(lc)
		}
	}
}

// stats returns the open and shed connection counts.
func (l *connLimiter) stats() (open, shed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.shed
}

// Write refreshes the write deadline before every write, so a client that
// stops reading is cut off after the write timeout while a long stream to
// a reading client is not.
func (lc *limitedConn) Write(b []byte) (int, error) {
	if d := lc.l.writeTimeout; d > 0 {
		if err := lc.Conn.SetWriteDeadline(time.Now().Add(d)); err != nil {
			return 0, err
		}
	}
	return lc.Conn.Write(b)
}

// NetConn returns the wrapped connection (watchPeer reaches the socket
// through it).
func (lc *limitedConn) NetConn() net.Conn { return lc.Conn }

// Close closes the connection and counts it out (once).
func (lc *limitedConn) Close() error {
	lc.once.Do(func() {
		l := lc.l
		l.mu.Lock()
		if lc.idleElem != nil {
			l.idle.Remove(lc.idleElem)
			lc.idleElem = nil
		}
		l.open--
		if l.perIP[lc.ip]--; l.perIP[lc.ip] <= 0 {
			delete(l.perIP, lc.ip)
		}
		lc.gone = true
		l.mu.Unlock()
	})
	return lc.Conn.Close()
}

// fdLimit returns the process's soft limit on open files (0 if unknown).
func fdLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}

// defaultMaxConns leaves a reserve of descriptors for everything that is
// not a client connection (the checkpoint, actor-remote links, logs).
func defaultMaxConns() int {
	n := fdLimit()
	if n == 0 {
		return 10000
	}
	return max(16, n-max(64, n/8))
}
