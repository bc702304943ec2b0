package httpapi

import (
	"bufio"
	"bytes"
	"io"
	"sync"
	"time"
)

// keepAliveComment is the SSE comment line written to a stream that has
// been silent for Options.KeepAlive: clients ignore comment lines, but the
// bytes keep proxies, load balancers and client read timeouts from taking a
// stream that waits (a long prefill, a recovery, a queue) for a dead one.
const keepAliveComment = ": keep-alive\n\n"

// defaultKeepAlive is Options.KeepAlive's default.
const defaultKeepAlive = 2 * time.Second

// ticker is the clock of the keep-alives (injected in tests).
type ticker interface {
	C() <-chan time.Time
	Stop()
}

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

func newRealTicker(d time.Duration) ticker { return realTicker{time.NewTicker(d)} }

// withKeepAlive runs stream, a writer of SSE events, on its own buffered
// writer over out and, on every tick of the ticker that finds the stream
// silent since the previous tick and between two events, writes an SSE
// comment line and flushes. Writes are serialized; nothing is written after
// stream returns. An error writing the comment means the client is gone:
// gone (if set) is told at once, so that a stream waiting on a silent
// engine request ends instead of waiting for an event that only then finds
// the client gone; stream also finds the error on its next flush.
func withKeepAlive(out *bufio.Writer, t ticker, stream func(*bufio.Writer), gone func()) {
	kw := &keepAliveWriter{out: out, boundary: true, gone: gone}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-t.C():
				kw.tick()
			}
		}
	}()
	w := bufio.NewWriterSize(kw, 64<<10)
	stream(w)
	w.Flush()
	close(done)
	wg.Wait()
	t.Stop()
}

// keepAliveWriter forwards the stream's bytes to out, flushing each write,
// and remembers whether the stream is between events.
type keepAliveWriter struct {
	mu       sync.Mutex
	out      *bufio.Writer
	wrote    bool // since the last tick
	boundary bool // the last byte written ends an event ("\n\n")
	failed   bool
	gone     func() // told once when a keep-alive comment cannot be written
}

func (k *keepAliveWriter) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, err := k.out.Write(p)
	if err == nil {
		err = k.out.Flush()
	}
	if err != nil {
		k.failed = true
		return n, err
	}
	if len(p) > 0 {
		k.wrote = true
		k.boundary = bytes.HasSuffix(p, []byte("\n\n"))
	}
	return n, nil
}

// tick writes the comment line if the stream was silent since the
// previous tick and sits between events.
func (k *keepAliveWriter) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.wrote || !k.boundary || k.failed {
		k.wrote = false
		return
	}
	if _, err := io.WriteString(k.out, keepAliveComment); err != nil || k.out.Flush() != nil {
		k.failed = true
		if k.gone != nil {
			k.gone()
		}
	}
}
