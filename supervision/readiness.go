package supervision

import (
	"context"
	"sync"
)

// Health is the process's liveness and readiness, with a way to wait for a
// change. Readiness says whether new requests are taken; liveness goes false
// only when the process is about to exit (an orchestrator should restart it).
type Health struct {
	mu      sync.Mutex
	ready   bool
	live    bool
	reason  string
	changed chan struct{}
}

// NewHealth starts live and not ready.
func NewHealth(reason string) *Health {
	return &Health{live: true, reason: reason, changed: make(chan struct{})}
}

// SetReady marks the engine ready (reason "") or not ready with a reason.
func (h *Health) SetReady(ready bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ready {
		reason = ""
	}
	h.ready, h.reason = ready && h.live, reason
	h.notify()
}

// SetDead flips liveness off for good.
func (h *Health) SetDead(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live, h.ready, h.reason = false, false, reason
	h.notify()
}

func (h *Health) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// Ready reports readiness and, when not ready, why.
func (h *Health) Ready() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready, h.reason
}

// Watch reports readiness and its reason with a channel that is closed at
// the next change of either, so a caller can wait for a change without
// missing one.
func (h *Health) Watch() (ready bool, reason string, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready, h.reason, h.changed
}

// Live reports liveness and, when dead, why.
func (h *Health) Live() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live {
		return true, ""
	}
	return false, h.reason
}

// WaitReady blocks until the engine is ready, dead, or ctx ends.
func (h *Health) WaitReady(ctx context.Context) error {
	for {
		h.mu.Lock()
		ready, live, ch, reason := h.ready, h.live, h.changed, h.reason
		h.mu.Unlock()
		if ready {
			return nil
		}
		if !live {
			return &DeadError{Reason: reason}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// DeadError is returned by WaitReady once liveness is off.
type DeadError struct{ Reason string }

func (e *DeadError) Error() string { return "supervision: engine is dead: " + e.Reason }
