//go:build cuda

package remote

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/actors"
	"cohort/cmd/cohort/gpuranks"
	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/servetest"
	"cohort/kernels/cuda"
	"cohort/model"
	"cohort/model/sample"
	"cohort/nccl"
	"cohort/supervision"
)

// GPU ranks in worker processes over real NCCL (build tag cuda; the tests
// skip without two GPUs). Each worker is the test binary re-executed with
// COHORT_TEST_WORKER_CUDA=<its GPU>, hosting ranks the way `cohort worker
// --device cuda --devices <its GPU>` does (gpuranks.OnDevice, nccl.JoinGroup);
// its communicators print their join and abort, as the fake NCCL's do.
// tools/cuda/tp-test.sh (step workers) runs them on the GPU machine.

func init() {
	cudaWorkerGPU = func(list string) (*GPURanks, error) {
		var devices []int
		for f := range strings.SplitSeq(list, ",") {
			d, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %w", workerCUDAEnv, list, err)
			}
			devices = append(devices, d)
		}
		join := func(id []byte, rank, size, device int) (nccl.Communicator, error) {
			c, err := nccl.JoinGroup(id, rank, size, device)
			if err != nil {
				return nil, err
			}
			fmt.Printf("joined rank=%d size=%d device=%d id=%x\n", rank, size, device, id[:8])
			return &loggedComm{DeviceCommunicator: c, id: id}, nil
		}
		return &GPURanks{Devices: devices, NewBackend: gpuranks.OnDevice, Join: join}, nil
	}
}

// loggedComm is a test worker's NCCL communicator: it prints its abort and
// when ncclCommAbort returned. It stays a device communicator, so the
// backend runs its collectives on the device as in `cohort worker`.
type loggedComm struct {
	nccl.DeviceCommunicator
	id   []byte
	once sync.Once
}

func (c *loggedComm) Abort(reason error) {
	c.once.Do(func() {
		fmt.Printf("aborted rank=%d id=%x: %v\n", c.Rank(), c.id[:8], reason)
		start := time.Now()
		c.DeviceCommunicator.Abort(reason)
		fmt.Printf("abort returned rank=%d id=%x after %v\n", c.Rank(), c.id[:8], time.Since(start).Round(time.Microsecond))
	})
}

// needGPUs skips without 2 CUDA devices; with them NCCL must load.
func needGPUs(t *testing.T) {
	t.Helper()
	n, err := nccl.CUDADeviceCount()
	if err != nil || n < 2 {
		t.Skipf("needs 2 CUDA devices (GPU ranks in two worker processes over NCCL): %d (%v)", n, err)
	}
	if _, _, err := nccl.Version(); err != nil {
		t.Fatalf("%d GPUs but NCCL does not load: %v", n, err)
	}
}

// ncclIDs is the engine's NCCL unique-id source (ncclGetUniqueId, as `serve
// --device cuda --workers`), recording the ids it made.
type ncclIDs struct {
	mu   sync.Mutex
	made [][]byte
}

func (s *ncclIDs) NewUniqueID() ([]byte, error) {
	id, err := nccl.NewUniqueID()
	if err == nil {
		s.mu.Lock()
		s.made = append(s.made, id)
		s.mu.Unlock()
	}
	return id, err
}

func (s *ncclIDs) ids() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.made)
}

// gpuModel is the small preset (Qwen3.5 shape, TP=2 divides it) with f32
// weights on the GPUs (COHORT_CUDA_WEIGHTS=f32, which the workers inherit),
// and the engine capacity its GPU ranks use.
func gpuModel(t *testing.T) (testModel, model.CapacityInput) {
	t.Setenv("COHORT_CUDA_WEIGHTS", "f32")
	kv, err := cuda.KVElemBytes(cuda.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tm := fromServe(servetest.OpenDir(t, archtest.WritePreset(t, "small")))
	return tm, model.CapacityInput{Budget: 512 << 20, ElemBytes: kv, PageSize: 16, MaxSeqs: 32, MaxModelLen: 512}
}

// inProcessGPU starts an engine whose TP=2 ranks run in this process on
// GPUs 0 and 1, in one NCCL group (as `serve --device cuda --tp 2`).
func inProcessGPU(t *testing.T, tm testModel, capacity model.CapacityInput, mutate func(*actors.Config)) *actors.Engine {
	devices := []int{0, 1}
	return startEngine(t, tm, 2, func(c *actors.Config) {
		c.NewBackend, c.LockThread, c.NewComms = gpuranks.Factory(devices), true, gpuranks.Comms(devices)
		c.Capacity = capacity
		if mutate != nil {
			mutate(c)
		}
	})
}

// workersGPU starts two worker processes on 127.0.0.1, one GPU each (rank
// 0 on GPU 0, rank 1 on GPU 1), and an engine placing TP=2 on them with an
// NCCL unique id per generation (as `serve --device cuda --workers`).
func workersGPU(t *testing.T, tm testModel, capacity model.CapacityInput, src UniqueIDSource,
	mutateRemote func(*Config), mutate func(*actors.Config)) ([]*workerProc, *actors.Engine) {
	procs := make([]*workerProc, 2)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i] = startWorkerProc(t, "127.0.0.1:0", nil, fmt.Sprintf("%s=%d", workerCUDAEnv, i)) })
	}
	wg.Wait()
	e := remoteEngine(t, tm, 2, []string{procs[0].addr, procs[1].addr}, func(rc *Config) {
		rc.NCCL = src
		if mutateRemote != nil {
			mutateRemote(rc)
		}
	}, func(c *actors.Config) {
		c.Capacity = capacity
		if mutate != nil {
			mutate(c)
		}
	})
	return procs, e
}

// gpuRequests are the comparison's requests: prompts of 2 to 90 tokens,
// greedy and one seeded, with the prompt's logprobs (the prefill's logits)
// and the top 20 of every generated token (the decode steps').
func gpuRequests(vocab int) []actors.Request {
	var reqs []actors.Request
	for i, n := range []int{2, 17, 40, 90} {
		r := actors.Request{Prompt: archtest.Prompt(n, vocab-16, i+1), MaxTokens: 8, IgnoreEOS: true,
			TopLogprobs: actors.MaxTopLogprobs, PromptLogprobs: true}
		if i == 3 {
			r.Params = sample.Params{Temperature: 0.8, TopK: 40, Seed: 7}
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// positions are a request's scored positions: the prompt's (tokens 1..n-1)
// then each generated token's, as results.
func positions(t testing.TB, e *actors.Engine, r actors.Request) []sample.Result {
	t.Helper()
	evs := streamEvents(t, mustSubmit(t, e, r))
	if len(evs) != r.MaxTokens {
		t.Fatalf("%d tokens, want %d", len(evs), r.MaxTokens)
	}
	out := slices.Clone(evs[0].PromptLogprobs)
	if len(out) != len(r.Prompt)-1 {
		t.Fatalf("%d prompt logprobs for a prompt of %d tokens", len(out), len(r.Prompt))
	}
	for _, ev := range evs {
		out = append(out, sample.Result{Token: sample.TokenLogprob{ID: ev.Token, Logprob: ev.Logprob}, Top: ev.Top})
	}
	return out
}

// logitStd is the standard deviation of the model's logits over a prompt's
// positions (CPU oracle): the scale of the comparison's tolerance.
func logitStd(t testing.TB, tm testModel, prompt []int32) float64 {
	t.Helper()
	logits, err := model.NewSession(tm.sm.Backend, tm.sm.Model, len(prompt)).Step(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	var sum, sq float64
	for _, v := range logits {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(len(logits))
	return math.Sqrt(sq/n - (sum/n)*(sum/n))
}

// compareScored checks one request's positions against the reference's:
// the same tokens, every logprob (the token's and its top 20's, matched by
// id) within tol, and the same top-20 sets except for ids within tol of the
// reference's 20th logprob (near-ties at the cut). It returns max |Δ|.
func compareScored(t *testing.T, got, want []sample.Result, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d positions, want %d", len(got), len(want))
	}
	var worst float64
	for p := range got {
		g, w := got[p], want[p]
		if g.Token.ID != w.Token.ID {
			t.Fatalf("position %d: token %d, want %d", p, g.Token.ID, w.Token.ID)
		}
		worst = max(worst, math.Abs(g.Token.Logprob-w.Token.Logprob))
		ref := map[int32]float64{}
		for _, a := range w.Top {
			ref[a.ID] = a.Logprob
		}
		cut := w.Top[len(w.Top)-1].Logprob
		for _, a := range g.Top {
			lp, ok := ref[a.ID]
			switch {
			case ok:
				worst = max(worst, math.Abs(a.Logprob-lp))
			case a.Logprob > cut+tol:
				t.Fatalf("position %d: id %d (logprob %.6g) is in the top 20 but not in the reference's (cut %.6g)", p, a.ID, a.Logprob, cut)
			}
		}
	}
	if worst > tol {
		t.Errorf("max |Δ logprob| %.3g > tolerance %.3g", worst, tol)
	}
	return worst
}

// TestRemoteGPUMatchesInProcess: TP=2 with each rank in its own worker
// process (one GPU each, NCCL across the processes) gives the tokens (greedy
// and seeded) of in-process TP=2 on the same GPUs, and the same logprobs —
// every prompt position (the prefill) and 8 decode steps, the token's and
// its top 20 — within 1e-4 × the logits' standard deviation, f32 weights.
// The in-process references: the default all-reduce (one-shot P2P for small
// tensors, NCCL above) and NCCL only (COHORT_ALLREDUCE=nccl), which is what
// the workers use. Requests run one at a time so that both engines batch
// the same way; the prefix cache is off (its chunk cuts change the prefill).
func TestRemoteGPUMatchesInProcess(t *testing.T) {
	needGPUs(t)
	tm, capacity := gpuModel(t)
	reqs := gpuRequests(tm.tok.VocabSize())
	tol := 1e-4 * logitStd(t, tm, reqs[len(reqs)-1].Prompt)
	noCache := func(c *actors.Config) { c.DisablePrefixCache = true }

	modes := []string{"auto", "nccl"}
	refs := map[string][][]sample.Result{}
	for _, mode := range modes {
		t.Run("in-process/"+mode, func(t *testing.T) {
			t.Setenv("COHORT_ALLREDUCE", mode)
			e := inProcessGPU(t, tm, capacity, noCache)
			for _, r := range reqs {
				refs[mode] = append(refs[mode], positions(t, e, r))
			}
		})
	}
	if t.Failed() {
		return
	}
	src := &ncclIDs{}
	start := time.Now()
	_, e := workersGPU(t, tm, capacity, src, nil, noCache)
	t.Logf("two GPU workers and the engine ready in %v", time.Since(start).Round(time.Millisecond))
	got := make([][]sample.Result, len(reqs))
	for i, r := range reqs {
		got[i] = positions(t, e, r)
	}
	if n := len(src.ids()); n != 1 {
		t.Errorf("%d NCCL ids made for one generation", n)
	}
	for _, mode := range modes {
		t.Run("workers-vs-"+mode, func(t *testing.T) {
			var worst float64
			npos := 0
			for i := range reqs {
				worst = max(worst, compareScored(t, got[i], refs[mode][i], tol))
				npos += len(got[i])
			}
			t.Logf("TP=2 in 2 worker processes vs in-process TP=2 (COHORT_ALLREDUCE=%s): max |Δ logprob| %.3g over %d positions (tolerance 1e-4 × logit std = %.3g)",
				mode, worst, npos, tol)
		})
	}
}

// TestRemoteGPUKillWorker: kill -9 of one of two GPU workers (rank 1's)
// while 16 clients stream. The engine must detect it within 2 s; the
// surviving worker's rank (blocked in, or about to enter, an all-reduce with
// the dead peer) is freed by the engine's AbortComm: its ncclCommAbort is
// called and returns. With the worker restarted the group rebuilds with a
// fresh NCCL id on the same GPUs and every request completes with its
// fault-free tokens (each request alone on the same workers, before the
// kill; f32 weights, greedy).
func TestRemoteGPUKillWorker(t *testing.T) {
	needGPUs(t)
	tm, capacity := gpuModel(t)
	reqs := make([]actors.Request, 16)
	for i := range reqs {
		reqs[i] = actors.Request{Prompt: archtest.Prompt(8+5*i, tm.tok.VocabSize()-16, 100+i), MaxTokens: 40 + i, IgnoreEOS: true}
	}
	src := &ncclIDs{}
	failures := newFailureLog()
	procs, e := workersGPU(t, tm, capacity, src,
		func(rc *Config) { rc.SpawnTimeout = 2 * chaosDeadline },
		func(c *actors.Config) {
			c.Replay, c.StepDeadline, c.RecoveryTimeout = true, 5*time.Second, time.Minute
			failures.hook(c)
		})
	alone := make([][]int32, len(reqs))
	for i, r := range reqs {
		if alone[i], _, _ = collect(t, mustSubmit(t, e, r)); len(alone[i]) != r.MaxTokens {
			t.Fatalf("fault-free request %d: %d tokens, want %d", i, len(alone[i]), r.MaxTokens)
		}
	}
	first := src.ids()[0]
	// The same 16 requests at once without a fault: GPU batches of other
	// shapes may round differently, which would show here first (logged:
	// the check below stays strict).
	var differ []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, r := range reqs {
		s := mustSubmit(t, e, r)
		wg.Go(func() {
			if got, _, _ := collect(t, s); !slices.Equal(got, alone[i]) {
				mu.Lock()
				differ = append(differ, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("fault-free, 16 at once: requests %v differ from their tokens alone", differ)

	streams := make([]*actors.Stream, len(reqs))
	for i, r := range reqs {
		streams[i] = mustSubmit(t, e, r)
	}
	waitTokens(t, streams[0], 3)
	killed := time.Now()
	procs[1].kill()
	f := failures.first(t, 10*time.Second)
	detect := f.at.Sub(killed)
	t.Logf("kill -9 → detected in %v: %v (cause %s)", detect.Round(time.Millisecond), f.f, f.f.Cause)
	if detect > 2*time.Second {
		t.Errorf("detected after %v, want within 2 s", detect)
	}
	switch f.f.Cause {
	case supervision.CauseTerminated, supervision.CauseError, supervision.CauseComm:
	default:
		t.Errorf("cause %s, want terminated, error or comm", f.f.Cause)
	}
	if !strings.Contains(f.f.Error(), "rank 1") {
		t.Errorf("the failure does not name rank 1: %v", f.f)
	}
	aborted := procs[0].out.wait(t, fmt.Sprintf("aborted rank=0 id=%x", first[:8]), 30*time.Second)
	returned := procs[0].out.wait(t, fmt.Sprintf("abort returned rank=0 id=%x", first[:8]), 30*time.Second)
	t.Logf("surviving worker: %s; %s", aborted, returned)

	procs[1].restart()
	checkStreamsGive(t, streams, alone)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatalf("not ready after the worker came back: %v", err)
	}
	ids := src.ids()
	last := ids[len(ids)-1]
	if string(last) == string(first) {
		t.Fatal("the rebuilt group has no fresh NCCL id")
	}
	for r, p := range procs {
		p.out.wait(t, fmt.Sprintf("joined rank=%d size=2 device=%d id=%x", r, r, last[:8]), time.Minute)
	}
	st, err := e.SupervisionStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failures %v, rebuilds %d, replayed %d, recovery detect → ready %v, %d NCCL ids",
		st.Failures, st.Rebuilds, st.Replayed, st.Recovery, len(ids))
}
