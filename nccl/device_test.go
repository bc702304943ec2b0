package nccl

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wrapped decorates a communicator the way the engine's fault injection does.
type wrapped struct{ Communicator }

func (w wrapped) Unwrap() Communicator { return w.Communicator }

// fakeDevice is a DeviceCommunicator without a GPU.
type fakeDevice struct{ Communicator }

func (fakeDevice) Device() int                                    { return 0 }
func (fakeDevice) Init(context.Context) error                     { return nil }
func (fakeDevice) AllReduceSumDevice(uintptr, int, uintptr) error { return nil }
func (fakeDevice) AllGatherDevice(uintptr, uintptr, int, uintptr) error {
	return nil
}

func TestAsDevice(t *testing.T) {
	g := mustGroup(t, 1)
	if _, ok := AsDevice(g.Comm(0)); ok {
		t.Fatal("an in-process communicator is not a device communicator")
	}
	if _, ok := AsDevice(nil); ok {
		t.Fatal("nil is not a device communicator")
	}
	d := fakeDevice{g.Comm(0)}
	if got, ok := AsDevice(wrapped{wrapped{d}}); !ok || got != DeviceCommunicator(d) {
		t.Fatalf("AsDevice through two wrappers = %v, %v", got, ok)
	}
}

func TestCheckDevices(t *testing.T) {
	for _, bad := range [][]int{nil, {-1}, {0, 1, 0}} {
		if err := checkDevices(bad); err == nil {
			t.Errorf("checkDevices(%v) accepted", bad)
		}
	}
	if err := checkDevices([]int{3, 0, 7, 1}); err != nil {
		t.Errorf("checkDevices: %v", err)
	}
}

func TestLocalExchange(t *testing.T) {
	const n, rounds = 4, 50
	g := newLocalGroup(n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := range n {
		wg.Go(func() {
			for k := range rounds {
				got, err := g.exchange(context.Background(), r, uint64(1000*k+r))
				if err != nil {
					errs <- err
					return
				}
				for p, v := range got {
					if v != uint64(1000*k+p) {
						errs <- errors.New("exchange mixed up rounds or ranks")
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestLocalAbortReleasesExchangeAndRunsHooks(t *testing.T) {
	g := newLocalGroup(2)
	var hooks atomic.Int32
	g.onAbort(func() { hooks.Add(1) })
	done := make(chan error, 1)
	go func() {
		_, err := g.exchange(context.Background(), 0, 1) // rank 1 never comes
		done <- err
	}()
	reason := errors.New("rank 1 died")
	if !g.abort(reason) || g.abort(errors.New("second")) {
		t.Fatal("the first abort must win, the second must be a no-op")
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrAborted) || !errors.Is(err, reason) {
			t.Fatalf("exchange after abort: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("abort did not release the exchange")
	}
	g.onAbort(func() { hooks.Add(1) }) // late hooks run at once
	if hooks.Load() != 2 {
		t.Fatalf("%d hooks ran, want 2", hooks.Load())
	}
	if _, err := g.exchange(context.Background(), 1, 0); !errors.Is(err, ErrAborted) {
		t.Fatalf("exchange on an aborted group: %v", err)
	}
}

func TestLocalExchangeContext(t *testing.T) {
	g := newLocalGroup(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.exchange(ctx, 0, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("exchange with a cancelled context: %v", err)
	}
}
