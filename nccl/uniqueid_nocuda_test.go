//go:build !cuda

package nccl

import (
	"errors"
	"testing"
)

// TestNoCUDAUniqueIDs: without -tags cuda there is no NCCL to make or join
// a group across processes, and the error says so.
func TestNoCUDAUniqueIDs(t *testing.T) {
	if _, err := NewUniqueID(); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("NewUniqueID: %v, want ErrNoCUDA", err)
	}
	if _, err := JoinGroup(make([]byte, UniqueIDBytes), 0, 2, 0); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("JoinGroup: %v, want ErrNoCUDA", err)
	}
	if _, err := JoinGroup(nil, 0, 2, 0); err == nil || errors.Is(err, ErrNoCUDA) {
		t.Errorf("JoinGroup without an id: %v, want the argument's error", err)
	}
}
