package httpapi

import (
	"net"
	"sync"
	"time"
)

// A non-streamed completion writes nothing until it has finished, so a
// client that went away is not noticed by a failed write the way a stream's
// is. While such a request is queued or generating, its connection is
// watched instead (watchPeer): fasthttp has read the whole request, and
// nothing reads the socket until the handler returns, so the watcher waits
// for the socket to turn readable through the runtime's poller and peeks at
// it (MSG_PEEK, nothing is consumed):
//
//   - end of file or a reset: the client closed the connection (or shut
//     down its sending side, which net/http treats the same way): the
//     request's engine streams are cancelled at once;
//   - bytes: the client pipelined its next request; they stay in the socket
//     for fasthttp, and the watch ends (the connection cannot be watched
//     further without reading it).
//
// Stopping the watch wakes the poller with a read deadline in the past,
// set through fasthttp's RequestCtx.SetReadDeadline, which fasthttp clears
// once the handler returns and before it reads the connection again.

// peerWatch is one connection's watch; stop ends it and waits for it.
type peerWatch struct {
	stopped  chan struct{}
	done     chan struct{}
	once     sync.Once
	deadline func(time.Time) error
}

// watchPeer watches conn for its client's disconnect and calls onGone, at
// most once, when it sees one. setDeadline sets conn's read deadline (used
// to end the watch). It returns nil when conn cannot be watched (not a
// socket, or an unsupported platform).
func watchPeer(conn net.Conn, setDeadline func(time.Time) error, onGone func()) *peerWatch {
	for {
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		conn = u.NetConn()
	}
	w := &peerWatch{stopped: make(chan struct{}), done: make(chan struct{}), deadline: setDeadline}
	wait := peekWaiter(conn)
	if wait == nil {
		return nil
	}
	go func() {
		defer close(w.done)
		if gone := wait(); gone {
			select {
			case <-w.stopped:
			default:
				onGone()
			}
		}
	}()
	return w
}

// stop ends the watch and returns once its goroutine has: the connection
// is fasthttp's again. It is idempotent and safe on a nil watch.
func (w *peerWatch) stop() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		close(w.stopped)
		// A deadline that cannot be set means the connection is closed,
		// which wakes the waiter as well.
		_ = w.deadline(time.Unix(1, 0))
		<-w.done
	})
}
