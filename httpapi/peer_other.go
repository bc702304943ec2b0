//go:build !unix

package httpapi

import "net"

// peekWaiter is not available here: non-streamed requests are not watched.
func peekWaiter(net.Conn) func() bool { return nil }
