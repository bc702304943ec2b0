//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/hffixture"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	_ "cohort/model/qwen35" // registers the Qwen3.5 architectures
	"cohort/nccl"
)

// The whole-model tests load the Hugging Face fixtures of testdata/hf
// (made by tools/hfref) on the GPU and compare with the CPU oracle and with
// transformers' logits and greedy continuations.

const fixtureRoot = "../../testdata/hf"

// fixtures opens every committed HF fixture.
func fixtures(t *testing.T) []*hffixture.Fixture { return hffixture.OpenAll(t, fixtureRoot, 1) }

func argmax(xs []float32) int {
	best := 0
	for i, v := range xs {
		if v > xs[best] {
			best = i
		}
	}
	return best
}

// step runs one Session step and resets the GPU scratch arena afterwards
// (the session downloads the logits inside Step).
func step(t *testing.T, be kernels.Backend, s *model.Session, ids []int32, all bool) []float32 {
	t.Helper()
	logits, err := s.Step(ids, all)
	if g, ok := be.(*Backend); ok {
		g.ResetScratch()
	}
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

func greedy(t *testing.T, be kernels.Backend, m model.Model, ids []int32, n int) []int32 {
	t.Helper()
	s := model.NewSession(be, m, len(ids)+n)
	logits := step(t, be, s, ids, false)
	var out []int32
	for len(out) < n {
		id := int32(argmax(logits))
		out = append(out, id)
		if len(out) == n {
			break
		}
		logits = step(t, be, s, []int32{id}, false)
	}
	return out
}

// TestModelMatchesCPUAndHF: for every fixture and prompt length, the GPU
// logits of every position are within 2e-3 × logit std of the CPU oracle's
// and of transformers', with the same top-1, and the 32-token greedy
// continuation (prefill, then decode token by token) equals transformers'.
func TestModelMatchesCPUAndHF(t *testing.T) {
	be := gpu(t)
	for _, fx := range fixtures(t) {
		t.Run(fx.Name, func(t *testing.T) {
			be := gpu(t)
			ck := archtest.OpenDir(t, fx.Dir)
			cb := cpu.New(cpu.Options{})
			mc, mg := loadOn(t, ck, cb), loadOn(t, ck, be)
			vocab := ck.Config.VocabSize
			for _, n := range fx.Lengths() {
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					be := gpu(t)
					ids := fx.Prompts[n]
					got := step(t, be, model.NewSession(be, mg, n), ids, true)
					want := step(t, cb, model.NewSession(cb, mc, n), ids, true)
					d, std := hffixture.LogitError(got, want)
					t.Logf("vs CPU: max |Δlogit| = %.3g (%.2g × logit std %.3g)", d, d/std, std)
					if d > 2e-3*std {
						t.Errorf("vs CPU: max |Δlogit| = %.3g > 2e-3 × std %.3g", d, std)
					}
					if hf, err := fx.Logits(n); err != nil {
						t.Fatal(err)
					} else {
						d, std := hffixture.LogitError(got, hf)
						t.Logf("vs HF:  max |Δlogit| = %.3g (%.2g × logit std %.3g)", d, d/std, std)
						if d > 2e-3*std {
							t.Errorf("vs HF: max |Δlogit| = %.3g > 2e-3 × std %.3g", d, std)
						}
					}
					for pos := 0; pos < len(want)/vocab; pos++ {
						if a, b := argmax(got[pos*vocab:(pos+1)*vocab]), argmax(want[pos*vocab:(pos+1)*vocab]); a != b {
							t.Errorf("position %d: top-1 %d, CPU %d", pos, a, b)
						}
					}
					wantGreedy := fx.Greedy[n]
					if len(wantGreedy) == 0 {
						wantGreedy = greedy(t, cb, mc, ids, 32)
					}
					if g := greedy(t, be, mg, ids, len(wantGreedy)); !slices.Equal(g, wantGreedy) {
						t.Errorf("greedy continuation\n got %v\nwant %v", g, wantGreedy)
					} else {
						t.Logf("greedy continuation of %d tokens matches", len(g))
					}
				})
			}
		})
	}
	be.ResetScratch()
}

// rankWorker is a stand-in for a rank's device executor (devRank, in
// tp_test.go) on GPU 0 with f32 weights.
type rankWorker = devRank

func startRank(t *testing.T, comm nccl.Communicator) *rankWorker { return startDevRank(t, 0, comm) }

// onAll runs f on every rank concurrently (they meet in the collectives).
func onAll(ranks []*rankWorker, f func(rank int, be *Backend)) {
	var wg sync.WaitGroup
	for r, w := range ranks {
		wg.Go(func() { w.do(func(be *Backend) { f(r, be) }) })
	}
	wg.Wait()
}

// TestCollectives checks AllReduce and AllGatherCols through the host
// copy path with two ranks on one GPU.
func TestCollectives(t *testing.T) {
	gpu(t) // skips without a GPU
	g, err := nccl.NewGroup(2)
	if err != nil {
		t.Fatal(err)
	}
	ranks := []*rankWorker{startRank(t, g.Comm(0)), startRank(t, g.Comm(1))}
	const T, n = 3, 5
	inputs := [][]float32{randSlice(newRand(10), T*n, 1), randSlice(newRand(11), T*n, 1)}
	sums := make([][]float32, 2)
	gathers := make([][]float32, 2)
	errs := make([]error, 4)
	onAll(ranks, func(r int, be *Backend) {
		x := be.Upload(inputs[r], T, n)
		errs[r] = be.AllReduce(x)
		sums[r] = be.Download(x)
		y, err := be.AllGatherCols(be.Upload(inputs[r], T, n))
		if errs[2+r] = err; err == nil {
			if !slices.Equal(y.Shape(), []int{T, 2 * n}) {
				errs[2+r] = fmt.Errorf("AllGatherCols shape %v", y.Shape())
			}
			gathers[r] = be.Download(y)
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r := range 2 {
		for i := range T * n {
			if want := inputs[0][i] + inputs[1][i]; sums[r][i] != want {
				t.Fatalf("rank %d: AllReduce[%d] = %v, want %v", r, i, sums[r][i], want)
			}
		}
		for row := range T {
			for k := range 2 {
				got := gathers[r][row*2*n+k*n : row*2*n+(k+1)*n]
				if !slices.Equal(got, inputs[k][row*n:(row+1)*n]) {
					t.Fatalf("rank %d: AllGatherCols row %d part %d = %v", r, row, k, got)
				}
			}
		}
	}
}

// TestModelTensorParallel runs TP=2 (two backends on one GPU, meeting in
// the in-process communicator) on the fixtures and compares its logits with
// the CPU oracle's TP=1 and its greedy continuation with transformers'.
func TestModelTensorParallel(t *testing.T) {
	gpu(t)
	for _, fx := range fixtures(t) {
		t.Run(fx.Name, func(t *testing.T) {
			ck, err := model.Open(fx.Dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			const size = 2
			g, err := nccl.NewGroup(size)
			if err != nil {
				t.Fatal(err)
			}
			ranks := make([]*rankWorker, size)
			models := make([]model.Model, size)
			states := make([]model.State, size)
			loadErrs := make([]error, size)
			for r := range ranks {
				ranks[r] = startRank(t, g.Comm(r))
			}
			onAll(ranks, func(r int, be *Backend) {
				models[r], loadErrs[r] = ck.Load(be, model.Shard{Rank: r, Size: size})
				if loadErrs[r] == nil {
					states[r] = models[r].NewState(be, 1, 32, 16)
				}
			})
			for _, err := range loadErrs {
				if err != nil {
					t.Skipf("TP=%d does not fit this fixture: %v", size, err)
				}
			}
			cb := cpu.New(cpu.Options{})
			mc := loadOn(t, ck, cb)
			cached := 0
			run := func(ids []int32, all bool) [][]float32 {
				n := len(ids)
				b := &kernels.Batch{Positions: make([]int32, n)}
				for i := range b.Positions {
					b.Positions[i] = int32(cached + i)
				}
				pages := make([]int32, (cached+n+15)/16)
				for i := range pages {
					pages[i] = int32((i*7 + 3) % 32) // a fixed non-contiguous permutation of the 32 pages
				}
				b.Seqs = []kernels.Seq{{Len: n, Cached: cached, Pages: pages}}
				rows := []int{n - 1}
				if all {
					rows = make([]int, n)
					for i := range rows {
						rows[i] = i
					}
				}
				out := make([][]float32, size)
				errs := make([]error, size)
				onAll(ranks, func(r int, be *Backend) {
					logits, err := models[r].Forward(be, states[r], ids, b, rows)
					if errs[r] = err; err == nil {
						out[r] = be.Download(logits)
					}
					be.ResetScratch()
				})
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				cached += n
				return out
			}
			ids := fx.Prompts[130]
			got := run(ids, true)
			want := step(t, cb, model.NewSession(cb, mc, len(ids)), ids, true)
			for r := range got {
				d, std := hffixture.LogitError(got[r], want)
				t.Logf("rank %d vs CPU TP=1: max |Δlogit| = %.3g (%.2g × logit std)", r, d, d/std)
				if d > 2e-3*std {
					t.Errorf("rank %d: max |Δlogit| = %.3g > 2e-3 × std %.3g", r, d, std)
				}
			}
			wantGreedy := fx.Greedy[130]
			vocab := ck.Config.VocabSize
			last := got[0][len(got[0])-vocab:]
			var gen []int32
			for len(gen) < len(wantGreedy) {
				id := int32(argmax(last))
				gen = append(gen, id)
				if len(gen) == len(wantGreedy) {
					break
				}
				last = run([]int32{id}, false)[0]
			}
			if !slices.Equal(gen, wantGreedy) {
				t.Errorf("TP=%d greedy\n got %v\nwant %v", size, gen, wantGreedy)
			} else {
				t.Logf("TP=%d greedy continuation of %d tokens matches HF", size, len(gen))
			}
		})
	}
}
