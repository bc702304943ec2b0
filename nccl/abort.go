package nccl

import (
	"fmt"
	"sync"
)

// stickyAbort is a group's abort state: the first abort reason, kept under
// mu (which the group uses for the rest of its state too).
type stickyAbort struct {
	mu       sync.Mutex
	abortErr error // sticky, wraps ErrAborted
}

// lockLive locks mu, or returns the abort error (mu not held) when the
// group is aborted.
func (s *stickyAbort) lockLive() error {
	s.mu.Lock()
	if s.abortErr != nil {
		err := s.abortErr
		s.mu.Unlock()
		return err
	}
	return nil
}

// setAbortLocked makes reason, wrapped with ErrAborted, the abort error
// unless there is one, and reports whether it did; mu must be held.
func (s *stickyAbort) setAbortLocked(reason error) bool {
	if s.abortErr != nil {
		return false
	}
	s.abortErr = ErrAborted
	if reason != nil {
		s.abortErr = fmt.Errorf("%w: %w", ErrAborted, reason)
	}
	return true
}

// abortError returns the abort error, or nil.
func (s *stickyAbort) abortError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abortErr
}
