package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/nccl"
	"cohort/supervision"
)

// The remote tests' GPU workers: worker processes whose ranks take the GPU
// path of the protocol (a device per rank, the NCCL unique id, the join)
// with CPU backends and a fake NCCL, so that they run without a GPU. The
// fake has no collectives: the tests serve the echo model, which calls
// none.

// workerGPUEnv makes a test worker host fake GPU ranks (fakeGPURanks).
const workerGPUEnv = "COHORT_TEST_WORKER_GPU"

// workerCUDAEnv makes a test worker host real GPU ranks on the listed GPUs
// ("1": one GPU, ordinal 1), joined by NCCL (a binary built with -tags
// cuda: gpucuda_test.go).
const workerCUDAEnv = "COHORT_TEST_WORKER_CUDA"

// cudaWorkerGPU is the GPU configuration of a test worker with real GPU
// ranks on the listed GPUs; gpucuda_test.go sets it in a cuda build.
var cudaWorkerGPU = func(devices string) (*GPURanks, error) {
	return nil, errors.New("test worker: real GPU ranks need a test binary built with -tags cuda")
}

// fakeGPURanks is the GPU configuration of a test worker: two "GPUs", CPU
// backends, and fakeNCCL communicators that print what they joined.
func fakeGPURanks() *GPURanks {
	return &GPURanks{Devices: []int{0, 1},
		NewBackend: func(int) actors.BackendFactory { return cpuBackends(1) },
		Join: func(id []byte, rank, size, device int) (nccl.Communicator, error) {
			fmt.Printf("joined rank=%d size=%d device=%d id=%x\n", rank, size, device, id[:8])
			c := &fakeNCCL{id: id, rank: rank, size: size}
			fakeComms.add(c)
			return c, nil
		}}
}

// fakeComms are the fakeNCCL communicators a test GPU worker made.
var fakeComms fakeRegistry

type fakeRegistry struct {
	mu    sync.Mutex
	comms []*fakeNCCL
}

func (f *fakeRegistry) add(c *fakeNCCL) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.comms = append(f.comms, c)
}

// fail makes every communicator not aborted yet report err as its
// asynchronous error.
func (f *fakeRegistry) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.comms {
		c.fail(err)
	}
}

// obeyStdin runs the test's commands to a GPU worker, one a line, until
// stdin closes: "async-error" makes the worker's communicators report an
// asynchronous error.
func obeyStdin() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "async-error" {
			fakeComms.fail(errors.New("injected: ncclRemoteError"))
		}
	}
}

var errFakeNCCL = errors.New("fake NCCL: no collectives (serve the echo model)")

// fakeNCCL is a test GPU worker's communicator: it prints its abort and
// reports the asynchronous error it is given until then (as NCCL, it
// reports none once aborted).
type fakeNCCL struct {
	id         []byte
	rank, size int
	abortOnce  sync.Once

	mu      sync.Mutex
	async   error
	aborted bool
}

func (c *fakeNCCL) Rank() int                                             { return c.rank }
func (c *fakeNCCL) Size() int                                             { return c.size }
func (c *fakeNCCL) AllReduceSum(context.Context, []float32) error         { return errFakeNCCL }
func (c *fakeNCCL) AllGather(context.Context, []float32, []float32) error { return errFakeNCCL }
func (c *fakeNCCL) Broadcast(context.Context, []float32, int) error       { return errFakeNCCL }

func (c *fakeNCCL) AsyncError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.async
}

func (c *fakeNCCL) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.aborted {
		c.async = err
	}
}

func (c *fakeNCCL) Abort(reason error) {
	c.abortOnce.Do(func() {
		c.mu.Lock()
		c.aborted, c.async = true, nil
		c.mu.Unlock()
		fmt.Printf("aborted rank=%d id=%x: %v\n", c.rank, c.id[:8], reason)
	})
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

// TestRemoteGPUFailures: GPU ranks in two worker processes (fake NCCL).
// When rank 1's communicator reports an asynchronous error (told through
// its worker's stdin), the worker's poll reports it and the engine takes it
// as that rank's communicator failure; when rank 1's worker is killed with
// SIGKILL, the engine sees the rank terminate. Either way the surviving
// workers' communicators of the generation are aborted (a peer blocked in
// a collective returns) and the group is rebuilt with a fresh NCCL unique
// id. The test waits on the engine's failure hook and the workers' output.
func TestRemoteGPUFailures(t *testing.T) {
	tm := presetModel(t, "echo")
	cases := []struct {
		name    string
		fault   func(t *testing.T, w *workerProc)
		cause   supervision.Cause
		says    string
		aborted []int // ranks whose workers live on and print the abort
	}{
		{"async error", func(t *testing.T, w *workerProc) {
			if _, err := fmt.Fprintln(w.stdin, "async-error"); err != nil {
				t.Fatal(err)
			}
		}, supervision.CauseComm, "nccl: asynchronous error: injected: ncclRemoteError", []int{0, 1}},
		{"kill -9", func(t *testing.T, w *workerProc) { w.kill(); w.restart() }, supervision.CauseTerminated, "rank 1", []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if isolate(t) {
				return
			}
			procs := []*workerProc{startWorkerProc(t, "127.0.0.1:0", nil, workerGPUEnv+"=1"), startWorkerProc(t, "127.0.0.1:0", nil, workerGPUEnv+"=1")}
			src := &fakeIDs{}
			failures := newFailureLog()
			rc := func(rc *Config) { rc.NCCL, rc.SpawnTimeout = src, 2*chaosDeadline }
			e := remoteEngine(t, tm, 2, []string{procs[0].addr, procs[1].addr}, rc, failures.hook)
			req := actors.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 4, IgnoreEOS: true}
			if ids, _, _ := collect(t, mustSubmit(t, e, req)); len(ids) != req.MaxTokens {
				t.Fatalf("%d tokens, want %d", len(ids), req.MaxTokens)
			}
			first := src.ids()[0]
			at := time.Now()
			c.fault(t, procs[1])
			f := failures.first(t, time.Minute).f
			t.Logf("detected in %v: %v", time.Since(at).Round(time.Millisecond), f)
			if f.Cause != c.cause || f.Rank != 1 || f.Generation != 1 || !strings.Contains(f.Error(), c.says) {
				t.Fatalf("failure %v (cause %s, rank %d), want a %s failure of rank 1 in generation 1 saying %q", f, f.Cause, f.Rank, c.cause, c.says)
			}
			for _, r := range c.aborted {
				procs[r].out.wait(t, fmt.Sprintf("aborted rank=%d id=%x", r, first[:8]), time.Minute)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			ids := src.ids()
			last := ids[len(ids)-1]
			if len(ids) < 2 || string(last) == string(first) {
				t.Fatalf("ids %x…: the rebuilt group has no fresh id", ids)
			}
			for r, p := range procs {
				p.out.wait(t, fmt.Sprintf("joined rank=%d size=2 device=0 id=%x", r, last[:8]), time.Minute)
			}
		})
	}
}
