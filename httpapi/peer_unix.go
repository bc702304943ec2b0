//go:build unix

package httpapi

import (
	"errors"
	"net"
	"syscall"
)

// peekWaiter returns a function that blocks until conn's socket is readable
// and reports whether its peer is gone (end of file or an error other than
// the deadline that ends the watch), or nil when conn is not a socket.
func peekWaiter(conn net.Conn) func() bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func() bool {
		var buf [1]byte
		gone := false
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
			switch {
			case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
				return false // not readable yet: wait in the poller
			case err != nil:
				gone = true // a reset or another socket error
			case n == 0:
				gone = true // end of file
			}
			return true // n > 0: a pipelined request, left for fasthttp
		})
		// rc.Read fails when the deadline ends the watch (not a disconnect)
		// or when the connection was closed under it (by the server).
		return gone && err == nil
	}
}
