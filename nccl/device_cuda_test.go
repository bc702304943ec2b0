//go:build cuda

package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// gpus returns the number of CUDA devices, skipping the test with fewer
// than min. NCCL must load on a host that has the GPUs.
func gpus(t *testing.T, min int) int {
	t.Helper()
	n, err := CUDADeviceCount()
	if err != nil {
		t.Skipf("no CUDA: %v", err)
	}
	if n < min {
		t.Skipf("%d CUDA devices, the test needs %d", n, min)
	}
	v, path, err := Version()
	if err != nil {
		t.Fatalf("%d GPUs but NCCL does not load: %v", n, err)
	}
	t.Logf("%d GPUs, NCCL %d from %s", n, v, path)
	return n
}

// gpuRank is a rank's device thread: a goroutine locked to its OS thread
// with the device's primary context current.
type gpuRank struct {
	jobs chan func()
}

func startGPURank(t *testing.T, device int) *gpuRank {
	t.Helper()
	r := &gpuRank{jobs: make(chan func())}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ready <- setDevice(device)
		for job := range r.jobs {
			job()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(r.jobs) })
	return r
}

// do runs f on the rank's thread and waits for it.
func (r *gpuRank) do(f func()) {
	done := make(chan struct{})
	r.jobs <- func() { defer close(done); f() }
	<-done
}

// onRanks runs f on every rank concurrently and returns the errors.
func onRanks(ranks []*gpuRank, f func(rank int) error) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() { r.do(func() { errs[i] = f(i) }) })
	}
	wg.Wait()
	return errs
}

func firstErr(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// waitStream polls s until it is idle, up to an explicit deadline.
func waitStream(s uintptr, timeout time.Duration) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for {
		done, err := streamDone(s)
		if err != nil || done {
			return err
		}
		select {
		case <-deadline:
			return fmt.Errorf("stream still busy after %v", timeout)
		case <-tick.C:
		}
	}
}

func newGroup(t *testing.T, devices []int) *DeviceGroup {
	t.Helper()
	g, err := NewDeviceGroup(devices)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Abort(errors.New("test done")) })
	return g
}

// TestDeviceCollectives runs all-reduce and all-gather on device memory
// (on a stream, as the CUDA backend does) and through the host-slice
// methods, on 2 GPUs and on every GPU of the host. The values are small
// integers, so every sum is exact.
func TestDeviceCollectives(t *testing.T) {
	n := gpus(t, 2)
	sizes := []int{2}
	if n > 2 {
		sizes = append(sizes, min(n, 8))
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			devices := make([]int, size)
			for i := range devices {
				devices[i] = size - 1 - i // reversed: rank r is not device r
			}
			g := newGroup(t, devices)
			ranks := make([]*gpuRank, size)
			for r := range ranks {
				ranks[r] = startGPURank(t, devices[r])
			}
			start := time.Now()
			firstErr(t, onRanks(ranks, func(r int) error { return g.Comm(r).Init(context.Background()) }))
			t.Logf("Init of %d ranks: %v", size, time.Since(start))

			const count = 1003 // not a multiple of 4
			val := func(rank, i int) float32 { return float32((rank+1)*(i%17) - 3*rank) }
			sum := func(i int) float32 { // element i of the all-reduce
				var want float32
				for p := range size {
					want += val(p, i)
				}
				return want
			}
			firstErr(t, onRanks(ranks, func(r int) error {
				c := g.Comm(r)
				host := make([]float32, count)
				for i := range host {
					host[i] = val(r, i)
				}
				s, err := streamCreate()
				if err != nil {
					return err
				}
				defer streamDestroy(s)
				buf, err := devAlloc(count * 4 * (size + 1))
				if err != nil {
					return err
				}
				defer devFree(buf)
				if err := htodAsync(buf, host, uintptr(s)); err != nil {
					return err
				}
				if err := c.AllReduceSumDevice(uintptr(buf), count, s); err != nil {
					return err
				}
				// gather the (reduced) buffer of every rank after it
				if err := c.AllGatherDevice(uintptr(buf), uintptr(buf+count*4), count, s); err != nil {
					return err
				}
				if err := waitStream(s, 30*time.Second); err != nil {
					return err
				}
				out := make([]float32, count*(size+1))
				if err := dtoh(out, buf); err != nil {
					return err
				}
				for i := range count {
					want := sum(i)
					if out[i] != want {
						return fmt.Errorf("AllReduceSumDevice[%d] = %v, want %v", i, out[i], want)
					}
					for p := range size {
						if got := out[count*(p+1)+i]; got != want {
							return fmt.Errorf("AllGatherDevice part %d [%d] = %v, want %v", p, i, got, want)
						}
					}
				}
				// The host-slice methods stage through device memory.
				if err := c.AllReduceSum(context.Background(), host); err != nil {
					return err
				}
				for i := range count {
					if want := sum(i); host[i] != want {
						return fmt.Errorf("AllReduceSum[%d] = %v, want %v", i, host[i], want)
					}
				}
				send := []float32{float32(r), float32(10 * r)}
				recv := make([]float32, 2*size)
				if err := c.AllGather(context.Background(), send, recv); err != nil {
					return err
				}
				for p := range size {
					if recv[2*p] != float32(p) || recv[2*p+1] != float32(10*p) {
						return fmt.Errorf("AllGather = %v", recv)
					}
				}
				bc := []float32{float32(r), 7}
				if err := c.Broadcast(context.Background(), bc, size-1); err != nil {
					return err
				}
				if bc[0] != float32(size-1) || bc[1] != 7 {
					return fmt.Errorf("Broadcast = %v", bc)
				}
				return c.AsyncError()
			}))
		})
	}
}

// TestDeviceAbortStuckPeer: rank 0 enters an all-reduce that rank 1 never
// joins (its kernel spins on the GPU, and the host-slice variant blocks);
// aborting the group from another goroutine makes both return.
func TestDeviceAbortStuckPeer(t *testing.T) {
	gpus(t, 2)
	for _, hostPath := range []bool{false, true} {
		t.Run(fmt.Sprintf("host=%v", hostPath), func(t *testing.T) {
			g := newGroup(t, []int{0, 1})
			ranks := []*gpuRank{startGPURank(t, 0), startGPURank(t, 1)}
			firstErr(t, onRanks(ranks, func(r int) error { return g.Comm(r).Init(context.Background()) }))
			// One collective both join, so the connections exist.
			firstErr(t, onRanks(ranks, func(r int) error {
				return g.Comm(r).AllReduceSum(context.Background(), []float32{1, 2, 3})
			}))

			stuck := make(chan error, 1)
			go ranks[0].do(func() {
				c := g.Comm(0)
				if hostPath {
					stuck <- c.AllReduceSum(context.Background(), make([]float32, 4096))
					return
				}
				s, err := streamCreate()
				if err != nil {
					stuck <- err
					return
				}
				buf, err := devAlloc(4096 * 4)
				if err != nil {
					stuck <- err
					return
				}
				if err := c.AllReduceSumDevice(uintptr(buf), 4096, s); err != nil {
					stuck <- err
					return
				}
				// The kernel waits for rank 1 forever; only the abort ends it.
				stuck <- waitStream(s, 60*time.Second)
			})
			select {
			case err := <-stuck:
				t.Fatalf("rank 0 returned before the abort: %v", err)
			case <-time.After(500 * time.Millisecond):
			}
			reason := errors.New("rank 1 was killed")
			start := time.Now()
			g.Abort(reason)
			aborted := time.Since(start)
			select {
			case err := <-stuck:
				t.Logf("Abort took %v; rank 0 returned %v after %v", aborted, err, time.Since(start))
				if hostPath && !errors.Is(err, ErrAborted) {
					t.Errorf("host-path all-reduce after abort: %v, want ErrAborted", err)
				}
				if !hostPath && err != nil {
					t.Errorf("the stuck stream did not drain after the abort: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("rank 0 is still stuck 30 s after the abort")
			}
			if err := g.Comm(1).AsyncError(); err != nil {
				t.Errorf("AsyncError after abort = %v, want nil", err)
			}
			ranks[1].do(func() {
				if err := g.Comm(1).AllReduceSumDevice(0, 1, 0); !errors.Is(err, ErrAborted) || !errors.Is(err, reason) {
					t.Errorf("collective after abort: %v, want ErrAborted wrapping the reason", err)
				}
			})
		})
	}
}

// TestDeviceInitChecks: Init refuses a thread whose context is on another
// device, and an aborted group refuses Init.
func TestDeviceInitChecks(t *testing.T) {
	gpus(t, 2)
	g := newGroup(t, []int{0, 1})
	r := startGPURank(t, 1)
	r.do(func() {
		if err := g.Comm(0).Init(context.Background()); err == nil {
			t.Error("Init of device 0's rank on device 1 succeeded")
		}
	})
	g2 := newGroup(t, []int{0, 1})
	g2.Abort(errors.New("early"))
	r.do(func() {
		if err := g2.Comm(1).Init(context.Background()); !errors.Is(err, ErrAborted) {
			t.Errorf("Init after abort: %v", err)
		}
	})
	if _, err := NewDeviceGroup([]int{0, 0}); err == nil {
		t.Error("a group with a repeated device was made")
	}
}
