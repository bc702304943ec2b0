//go:build cuda

package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"cohort/internal/testmodels/modelgen"
	"cohort/model"
	"cohort/nccl"
)

// Tensor parallelism across GPUs over NCCL (and the one-shot P2P
// all-reduce). These tests need two or more GPUs and NCCL; they skip
// otherwise. tools/cuda/tp-test.sh runs them on the GPU machine.

// multiGPU returns the device count, skipping with fewer than n devices;
// with enough devices NCCL must load.
func multiGPU(t testing.TB, n int) int {
	t.Helper()
	have, err := deviceCount()
	if err != nil || have < n {
		t.Skipf("%d GPUs (%v); the test needs %d", have, err, n)
	}
	v, path, err := nccl.Version()
	if err != nil {
		t.Fatalf("%d GPUs but NCCL does not load: %v", have, err)
	}
	t.Logf("%d GPUs, NCCL %d (%s)", have, v, path)
	return have
}

// devRank is a rank's device thread on one GPU, owning a backend with f32
// weights (the differential TP tests compare against f32 references).
type devRank struct {
	be   *Backend
	jobs chan func()
}

func startDevRank(t testing.TB, device int, comm nccl.Communicator) *devRank {
	t.Helper()
	w := &devRank{jobs: make(chan func())}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		be, err := New(Options{Device: device, Comm: comm, Weights: "f32"})
		w.be = be
		ready <- err
		if err != nil {
			return
		}
		for job := range w.jobs {
			job()
		}
		be.Close()
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(w.jobs) })
	return w
}

func (w *devRank) do(f func(be *Backend)) {
	done := make(chan struct{})
	w.jobs <- func() {
		defer close(done)
		f(w.be)
	}
	<-done
}

// onRanks runs f on every rank concurrently and returns the first error.
func onRanks(ranks []*devRank, f func(r int, be *Backend) error) error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, w := range ranks {
		wg.Go(func() {
			w.do(func(be *Backend) {
				defer func() {
					if p := recover(); p != nil {
						errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
					}
				}()
				if err := f(r, be); err != nil {
					errs[r] = fmt.Errorf("rank %d: %w", r, err)
				}
			})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ncclRanks starts size ranks on devices (rank r on devices[r]) sharing an
// NCCL group, with their collectives initialised.
func ncclRanks(t testing.TB, devices []int) ([]*devRank, *nccl.DeviceGroup) {
	t.Helper()
	g, err := nccl.NewDeviceGroup(devices)
	if err != nil {
		t.Fatal(err)
	}
	ranks := make([]*devRank, len(devices))
	for r, d := range devices {
		ranks[r] = startDevRank(t, d, g.Comm(r))
	}
	t.Cleanup(func() { g.Abort(errors.New("test done")) }) // runs before the ranks close
	start := time.Now()
	if err := onRanks(ranks, func(r int, be *Backend) error { return be.InitCollectives(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ranks on devices %v: collectives ready in %v; rank 0: %s", len(devices), devices, time.Since(start), ranks[0].be.CollectivesInfo())
	return ranks, g
}

// logSoftmax returns the log-probabilities of one row of logits.
func logSoftmax(row []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(row))
	lse := m + math.Log(s)
	for i, v := range row {
		out[i] = float64(v) - lse
	}
	return out
}

// top8Delta returns, over every row, the |Δ logprob| of got's top-8 tokens
// against want's logprobs of the same tokens: the mean and the maximum.
func top8Delta(got, want []float32, vocab int) (mean, maxd float64) {
	n := 0
	for off := 0; off+vocab <= len(got); off += vocab {
		g, w := logSoftmax(got[off:off+vocab]), logSoftmax(want[off:off+vocab])
		idx := make([]int, vocab)
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return g[idx[a]] > g[idx[b]] })
		for _, i := range idx[:min(8, vocab)] {
			d := math.Abs(g[i] - w[i])
			mean += d
			maxd = max(maxd, d)
			n++
		}
	}
	return mean / float64(max(n, 1)), maxd
}

// TestTensorParallelMatchesSingleGPU: a generated model's logits (prefill of
// a 40-token prompt, every position, then 8 teacher-forced decode steps) at
// TP=2 over NCCL — with the one-shot all-reduce and with NCCL only — and at
// TP=4 when the host has 4 GPUs, against TP=1 on one GPU: the top-8 logprob
// |Δ| mean must stay within 0.01.
func TestTensorParallelMatchesSingleGPU(t *testing.T) {
	have := multiGPU(t, 2)
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets["small"]); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	vocab := ck.Config.VocabSize
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 13) % vocab)
	}
	const decode = 8

	// run feeds the prompt then decode tokens chosen by next (teacher
	// forcing), on every rank; it returns rank 0's logits of every position.
	run := func(ranks []*devRank, size int, next []int32) ([]float32, []int32, error) {
		var out []float32
		var chosen []int32
		err := onRanks(ranks, func(r int, be *Backend) error {
			m, err := ck.Load(be, model.Shard{Rank: r, Size: size})
			if err != nil {
				return err
			}
			s := model.NewSession(be, m, len(prompt)+decode+1)
			logits, err := s.Step(prompt, true)
			be.ResetScratch()
			if err != nil {
				return err
			}
			all := slices.Clone(logits)
			last := logits[len(logits)-vocab:]
			var picks []int32
			for k := range decode {
				id := int32(argmax(last))
				if next != nil {
					id = next[k]
				}
				picks = append(picks, id)
				if last, err = s.Step([]int32{id}, false); err != nil {
					return err
				}
				be.ResetScratch()
				all = append(all, last...)
			}
			if r == 0 {
				out, chosen = all, picks
			}
			return nil
		})
		return out, chosen, err
	}

	ref := []*devRank{startDevRank(t, 0, nil)}
	want, picks, err := run(ref, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	type config struct {
		size int
		mode string
	}
	configs := []config{{2, "auto"}, {2, "nccl"}}
	if have >= 4 {
		configs = append(configs, config{4, "auto"})
	}
	for _, c := range configs {
		t.Run(fmt.Sprintf("tp=%d/%s", c.size, c.mode), func(t *testing.T) {
			t.Setenv("COHORT_ALLREDUCE", c.mode)
			devices := make([]int, c.size)
			for i := range devices {
				devices[i] = (i + 1) % c.size // rank 0 is not on device 0
			}
			ranks, _ := ncclRanks(t, devices)
			got, _, err := run(ranks, c.size, picks)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			mean, maxd := top8Delta(got, want, vocab)
			t.Logf("TP=%d (%s) vs TP=1: top-8 logprob |Δ| mean %.3g, max %.3g over %d positions; %s",
				c.size, c.mode, mean, maxd, len(got)/vocab, ranks[0].be.CollectivesInfo())
			if !(mean <= 0.01) {
				t.Errorf("top-8 logprob |Δ| mean %.3g > 0.01", mean)
			}
		})
	}
}

// TestOneShotAllReduce checks the one-shot kernel against exact sums (small
// integers) for sizes around its float4 and block boundaries, repeated (the
// buffers alternate), NCCL for the same data, and the kernel replayed from
// a CUDA graph.
func TestOneShotAllReduce(t *testing.T) {
	have := multiGPU(t, 2)
	for _, size := range slices.Compact([]int{2, min(have, 8)}) {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			devices := make([]int, size)
			for i := range devices {
				devices[i] = i
			}
			ranks, _ := ncclRanks(t, devices)
			if ranks[0].be.collectives.p2p == nil {
				t.Skipf("one-shot all-reduce unavailable: %s", ranks[0].be.CollectivesInfo())
			}
			val := func(rank, i, k int) float32 { return float32((rank+1)*((i+k)%13) - rank) }
			for _, n := range []int{1, 3, 4, 129, 1003, 4096, 1 << 16} {
				for _, path := range []string{"oneshot", "nccl"} {
					err := onRanks(ranks, func(r int, be *Backend) error {
						c := &be.collectives
						for k := range 3 {
							host := make([]float32, n)
							for i := range host {
								host[i] = val(r, i, k)
							}
							x := be.tensor("test", be.Upload(host, n))
							if path == "oneshot" {
								c.p2p.allReduce(be, x)
							} else if err := be.ncclAllReduce(c.dev, x); err != nil {
								return err
							}
							got := be.Download(x)
							for i := range n {
								var want float32
								for p := range size {
									want += val(p, i, k)
								}
								if got[i] != want {
									return fmt.Errorf("%s n=%d call %d: [%d] = %v, want %v", path, n, k, i, got[i], want)
								}
							}
							be.Free(x)
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			// Graph: three one-shot all-reduces of ones, replayed twice: each
			// replay multiplies by size³.
			err := onRanks(ranks, func(r int, be *Backend) error {
				c := &be.collectives
				const n = 1000
				ones := make([]float32, n)
				for i := range ones {
					ones[i] = 1
				}
				x := be.tensor("test", be.Upload(ones, n))
				if err := streamSynchronize(); err != nil {
					return err
				}
				if err := beginCapture(); err != nil {
					return err
				}
				for range 3 {
					c.p2p.allReduce(be, x)
				}
				exec, _, err := endCapture()
				if err != nil {
					return err
				}
				defer graphDestroy(exec)
				want := float32(1)
				for range 2 {
					if err := graphLaunch(exec); err != nil {
						return err
					}
					want *= float32(size * size * size)
				}
				got := be.Download(x)
				for i := range n {
					if got[i] != want {
						return fmt.Errorf("graph: [%d] = %v, want %v", i, got[i], want)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOneShotAbort: rank 0 runs a one-shot all-reduce that rank 1 never
// joins; aborting the group releases its kernel.
func TestOneShotAbort(t *testing.T) {
	multiGPU(t, 2)
	ranks, g := ncclRanks(t, []int{0, 1})
	if ranks[0].be.collectives.p2p == nil {
		t.Skipf("one-shot all-reduce unavailable: %s", ranks[0].be.CollectivesInfo())
	}
	done, launched := make(chan error, 1), make(chan struct{})
	go ranks[0].do(func(be *Backend) {
		x := be.tensor("test", be.Upload(make([]float32, 256), 256))
		be.collectives.p2p.allReduce(be, x)
		close(launched)
		done <- streamSynchronize()
	})
	// The kernel is queued and cannot finish without its peer: nothing may
	// have come back yet (no waiting on time to say so).
	<-launched
	select {
	case err := <-done:
		t.Fatalf("the all-reduce returned without its peer: %v", err)
	default:
	}
	start := time.Now()
	g.Abort(errors.New("rank 1 was killed"))
	select {
	case err := <-done:
		t.Logf("released %v after the abort (stream: %v)", time.Since(start), err)
	case <-time.After(30 * time.Second):
		t.Fatal("the one-shot kernel is still spinning 30 s after the abort")
	}
}

// TestAllReduceLatency prints the all-reduce time per call of NCCL and the
// one-shot kernel for 4 KiB…256 KiB, eager (back-to-back launches) and
// replayed from a CUDA graph (the decode path). It measures, it does not
// judge: the table is the output.
func TestAllReduceLatency(t *testing.T) {
	multiGPU(t, 2)
	ranks, _ := ncclRanks(t, []int{0, 1})
	hasP2P := ranks[0].be.collectives.p2p != nil
	const eagerIters, graphCalls, graphLaunches = 200, 64, 20
	type row struct {
		bytes                      int
		ncclEager, ncclGraph       float64
		oneshotEager, oneshotGraph float64
	}
	var rows []row
	for _, bytes := range []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10} {
		n := bytes / 4
		rw := row{bytes: bytes}
		for _, path := range []string{"nccl", "oneshot"} {
			if path == "oneshot" && !hasP2P {
				continue
			}
			var mu sync.Mutex
			var eager, graph float64
			err := onRanks(ranks, func(r int, be *Backend) error {
				c := &be.collectives
				x := be.tensor("bench", be.Upload(make([]float32, n), n))
				defer be.Free(x)
				call := func() error {
					if path == "oneshot" {
						c.p2p.allReduce(be, x)
						return nil
					}
					return be.ncclAllReduce(c.dev, x)
				}
				for range 20 {
					if err := call(); err != nil {
						return err
					}
				}
				if err := streamSynchronize(); err != nil {
					return err
				}
				start := time.Now()
				for range eagerIters {
					if err := call(); err != nil {
						return err
					}
				}
				if err := streamSynchronize(); err != nil {
					return err
				}
				e := float64(time.Since(start).Microseconds()) / eagerIters
				if err := beginCapture(); err != nil {
					return err
				}
				for range graphCalls {
					if err := call(); err != nil {
						endCapture()
						return err
					}
				}
				exec, _, err := endCapture()
				if err != nil {
					return err
				}
				defer graphDestroy(exec)
				if err := graphLaunch(exec); err != nil {
					return err
				}
				if err := streamSynchronize(); err != nil {
					return err
				}
				start = time.Now()
				for range graphLaunches {
					if err := graphLaunch(exec); err != nil {
						return err
					}
				}
				if err := streamSynchronize(); err != nil {
					return err
				}
				gr := float64(time.Since(start).Microseconds()) / (graphCalls * graphLaunches)
				mu.Lock()
				eager, graph = max(eager, e), max(graph, gr)
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Fatalf("%s %d bytes: %v", path, bytes, err)
			}
			if path == "nccl" {
				rw.ncclEager, rw.ncclGraph = eager, graph
			} else {
				rw.oneshotEager, rw.oneshotGraph = eager, graph
			}
		}
		rows = append(rows, rw)
	}
	t.Logf("all-reduce of float32 across 2 GPUs, µs per call (slowest rank; eager: %d back-to-back calls; graph: %d calls per graph, %d replays)",
		eagerIters, graphCalls, graphLaunches)
	t.Logf("%8s %12s %12s %14s %14s", "bytes", "NCCL eager", "NCCL graph", "one-shot eager", "one-shot graph")
	for _, r := range rows {
		t.Logf("%8d %12.2f %12.2f %14.2f %14.2f", r.bytes, r.ncclEager, r.ncclGraph, r.oneshotEager, r.oneshotGraph)
	}
}
