package supervision

import (
	"context"
	"errors"
	"testing"
	"time"

	"cohort/nccl"
)

func TestPoisonIsSticky(t *testing.T) {
	var p Poison
	if p.Err() != nil {
		t.Fatal("new poison is set")
	}
	first, second := errors.New("first"), errors.New("second")
	if !p.Set(first) || p.Set(second) || p.Set(nil) {
		t.Fatal("Set did not report the first reason only")
	}
	if p.Err() != first {
		t.Fatalf("Err = %v, want the first reason", p.Err())
	}
}

func TestIntensity(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name    string
		offsets []time.Duration
		failAt  int // index of the first Allow that fails, -1 for none
	}{
		{"within limit", []time.Duration{0, time.Second, 2 * time.Second}, -1},
		{"fourth in window", []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, 3},
		{"old ones expire", []time.Duration{0, time.Second, 2 * time.Second, 11 * time.Second, 12 * time.Second}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Intensity{Max: 3, Window: 10 * time.Second}
			for i, off := range tt.offsets {
				err := in.Allow(t0.Add(off))
				if (err != nil) != (i == tt.failAt) {
					t.Fatalf("Allow #%d = %v", i, err)
				}
				if err != nil && !errors.Is(err, ErrIntensity) {
					t.Fatalf("error %v does not wrap ErrIntensity", err)
				}
			}
		})
	}
}

// stuckComm's Abort never returns until released.
type stuckComm struct {
	nccl.Communicator
	release chan struct{}
}

func (s stuckComm) Abort(error) { <-s.release }

func TestAbortAllUnblocksCollectives(t *testing.T) {
	g, err := nccl.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error)
	go func() { blocked <- g.Comm(0).AllReduceSum(context.Background(), make([]float32, 4)) }()
	release := make(chan struct{})
	defer close(release)
	comms := []nccl.Communicator{g.Comm(0), stuckComm{g.Comm(1), release}}
	stuck := AbortAll(context.Background(), comms, errors.New("rank 1 died"), 200*time.Millisecond)
	if len(stuck) != 1 || stuck[0] != 1 {
		t.Fatalf("stuck = %v, want [1]", stuck)
	}
	if err := <-blocked; !errors.Is(err, nccl.ErrAborted) {
		t.Fatalf("blocked all-reduce returned %v", err)
	}
}

func TestHealthWaitReady(t *testing.T) {
	h := NewHealth("loading")
	if ok, why := h.Ready(); ok || why != "loading" {
		t.Fatalf("Ready = %v %q", ok, why)
	}
	done := make(chan error)
	go func() { done <- h.WaitReady(context.Background()) }()
	h.SetReady(true, "")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.SetReady(false, "rebuilding")
	go func() { done <- h.WaitReady(context.Background()) }()
	h.SetDead("intensity")
	var dead *DeadError
	if err := <-done; !errors.As(err, &dead) || dead.Reason != "intensity" {
		t.Fatalf("WaitReady after death = %v", err)
	}
	if live, _ := h.Live(); live {
		t.Fatal("still live")
	}
	h.SetReady(true, "")
	if ok, _ := h.Ready(); ok {
		t.Fatal("a dead engine became ready")
	}
}
