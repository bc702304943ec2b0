package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/nccl"
)

// The remote tests' GPU workers: worker processes whose ranks take the GPU
// path of the protocol (a device per rank, the NCCL unique id, the join)
// with CPU backends and a fake NCCL, so that they run without a GPU. The
// fake has no collectives: the tests serve the echo model, which calls
// none.

// workerGPUEnv makes a test worker host fake GPU ranks (fakeGPURanks).
const workerGPUEnv = "COHORT_TEST_WORKER_GPU"

// fakeGPURanks is the GPU configuration of a test worker: two "GPUs", CPU
// backends, and fakeNCCL communicators that print what they joined.
func fakeGPURanks() *GPURanks {
	return &GPURanks{Devices: []int{0, 1},
		NewBackend: func(int) actors.BackendFactory { return cpuBackends(1) },
		Join: func(id []byte, rank, size, device int) (nccl.Communicator, error) {
			fmt.Printf("joined rank=%d size=%d device=%d id=%x\n", rank, size, device, id[:8])
			return &fakeNCCL{id: id, rank: rank, size: size}, nil
		}}
}

var errFakeNCCL = errors.New("fake NCCL: no collectives (serve the echo model)")

// fakeNCCL is a test GPU worker's communicator; it prints its abort.
type fakeNCCL struct {
	id         []byte
	rank, size int
	abortOnce  sync.Once
}

func (c *fakeNCCL) Rank() int                                             { return c.rank }
func (c *fakeNCCL) Size() int                                             { return c.size }
func (c *fakeNCCL) AllReduceSum(context.Context, []float32) error         { return errFakeNCCL }
func (c *fakeNCCL) AllGather(context.Context, []float32, []float32) error { return errFakeNCCL }
func (c *fakeNCCL) Broadcast(context.Context, []float32, int) error       { return errFakeNCCL }
func (c *fakeNCCL) AsyncError() error                                     { return nil }

func (c *fakeNCCL) Abort(reason error) {
	c.abortOnce.Do(func() { fmt.Printf("aborted rank=%d id=%x: %v\n", c.rank, c.id[:8], reason) })
}

// lineLog collects a worker process's output lines.
type lineLog struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every line
}

func newLineLog() *lineLog { return &lineLog{changed: make(chan struct{})} }

func (l *lineLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns the first line that starts with prefix, waiting for it up to
// timeout.
func (l *lineLog) wait(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		for _, s := range l.lines {
			if strings.HasPrefix(s, prefix) {
				l.mu.Unlock()
				return s
			}
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no line %q… within %v", prefix, timeout)
		}
	}
}

// TestRemoteGPUGroups: GPU ranks in worker processes (fake NCCL): every
// generation gets a fresh NCCL unique id from the engine, every rank of
// the generation joins with that id, its rank index, the group's size and
// the GPU of its place on its worker; the old generation's communicators
// are aborted when it is torn down.
func TestRemoteGPUGroups(t *testing.T) {
	tm := presetModel(t, "echo")
	cases := []struct {
		name    string
		workers int
		devices []int // by rank
	}{
		{"two workers", 2, []int{0, 0}},
		{"one worker, two GPUs", 1, []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if isolate(t) {
				return
			}
			procs := make([]*workerProc, c.workers)
			addrs := make([]string, c.workers)
			for i := range procs {
				procs[i] = startWorkerProc(t, "127.0.0.1:0", nil, workerGPUEnv+"=1")
				addrs[i] = procs[i].addr
			}
			src := &fakeIDs{}
			failures := newFailureLog()
			e := remoteEngine(t, tm, 2, addrs, func(rc *Config) { rc.NCCL, rc.RanksPerWorker = src, 2 },
				func(c *actors.Config) { c.Faults = true; failures.hook(c) })
			req := actors.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 4, IgnoreEOS: true}
			checkJoined := func(gen int) []byte {
				t.Helper()
				if ids, _, _ := collect(t, mustSubmit(t, e, req)); len(ids) != req.MaxTokens {
					t.Fatalf("generation %d: %d tokens, want %d", gen, len(ids), req.MaxTokens)
				}
				ids := src.ids()
				if len(ids) != gen {
					t.Fatalf("%d ids made for %d generations", len(ids), gen)
				}
				id := ids[gen-1]
				for r, dev := range c.devices {
					procs[r%c.workers].out.wait(t, fmt.Sprintf("joined rank=%d size=2 device=%d id=%x", r, dev, id[:8]), time.Minute)
				}
				return id
			}
			first := checkJoined(1)
			if err := e.InjectFault(context.Background(), actors.Fault{Kind: actors.FaultStop, Rank: 1}); err != nil {
				t.Fatal(err)
			}
			failures.first(t, time.Minute) // the rebuild follows it
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			checkJoined(2)
			for r := range c.devices {
				line := procs[r%c.workers].out.wait(t, fmt.Sprintf("aborted rank=%d id=%x", r, first[:8]), time.Minute)
				t.Logf("generation 1: %s", line)
			}
		})
	}
}
