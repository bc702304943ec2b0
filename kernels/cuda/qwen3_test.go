//go:build cuda

package cuda

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"cohort/internal/testmodels/hffixture"
	"cohort/internal/testmodels/modelgen"
	"cohort/kernels/cpu"
	"cohort/model"
	_ "cohort/model/qwen3" // registers Qwen3ForCausalLM
)

// The dense Qwen3 architecture on the GPU: the qwen3-tiny preset (the
// checkpoint of testdata/hf-qwen3/qwen3-tiny) against the CPU oracle and,
// once tools/hfref has made them, transformers' references.

const qwen3FixtureDir = "../../testdata/hf-qwen3/qwen3-tiny"

// qwen3Tiny opens the qwen3-tiny checkpoint and its HF references (nil
// when they have not been made).
func qwen3Tiny(t *testing.T) (*model.Checkpoint, *hffixture.Fixture) {
	t.Helper()
	var fx *hffixture.Fixture
	if dirs, err := hffixture.Find(filepath.Dir(qwen3FixtureDir)); err == nil && len(dirs) > 0 {
		if fx, err = hffixture.Open(dirs[0]); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fx.Close() })
	} else {
		t.Logf("no Qwen3 HF references under %s: comparing with the CPU oracle only", filepath.Dir(qwen3FixtureDir))
	}
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets["qwen3-tiny"]); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck, fx
}

// qwen3Prompts are the HF fixture's prompts, or generated ones of the same
// kind of lengths.
func qwen3Prompts(fx *hffixture.Fixture, vocab int) map[int][]int32 {
	if fx != nil {
		return fx.Prompts
	}
	out := map[int][]int32{}
	for _, n := range []int{1, 65, 300} {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32((i*7919 + 13*n) % (vocab - 3))
		}
		out[n] = ids
	}
	return out
}

// TestQwen3MatchesCPUAndHF: with f32 weights the GPU logits of every
// position are within 2e-3 × logit std of the CPU oracle's (and of
// transformers' when the references exist), with the same top-1, and the
// 32-token greedy continuation equals the CPU's (and transformers').
func TestQwen3MatchesCPUAndHF(t *testing.T) {
	be := gpu(t)
	ck, fx := qwen3Tiny(t)
	cb := cpu.New(cpu.Options{})
	mc, mg := loadOn(t, ck, cb), loadOn(t, ck, be)
	vocab := ck.Config.VocabSize
	prompts := qwen3Prompts(fx, vocab)
	lens := make([]int, 0, len(prompts))
	for n := range prompts {
		lens = append(lens, n)
	}
	slices.Sort(lens)
	for _, n := range lens {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			be := gpu(t)
			ids := prompts[n]
			got := step(t, be, model.NewSession(be, mg, n), ids, true)
			want := step(t, cb, model.NewSession(cb, mc, n), ids, true)
			refs := map[string][]float32{"CPU": want}
			if fx != nil {
				hf, err := fx.Logits(n)
				if err != nil {
					t.Fatal(err)
				}
				refs["HF"] = hf
			}
			for name, ref := range refs {
				d, std := hffixture.LogitError(got, ref)
				t.Logf("vs %s: max |Δlogit| = %.3g (%.2g × logit std %.3g)", name, d, d/std, std)
				if d > 2e-3*std {
					t.Errorf("vs %s: max |Δlogit| = %.3g > 2e-3 × std %.3g", name, d, std)
				}
			}
			for pos := 0; pos < len(want)/vocab; pos++ {
				if a, b := argmax(got[pos*vocab:(pos+1)*vocab]), argmax(want[pos*vocab:(pos+1)*vocab]); a != b {
					t.Errorf("position %d: top-1 %d, CPU %d", pos, a, b)
				}
			}
			wantGreedy := greedy(t, cb, mc, ids, 32)
			if fx != nil && !slices.Equal(wantGreedy, fx.Greedy[n]) {
				t.Errorf("CPU greedy %v differs from HF %v", wantGreedy, fx.Greedy[n])
			}
			if g := greedy(t, be, mg, ids, 32); !slices.Equal(g, wantGreedy) {
				t.Errorf("greedy continuation\n got %v\nwant %v", g, wantGreedy)
			}
		})
	}
}

// TestQwen3GraphReplayMatchesEager: Qwen3's decode steps, recorded and
// replayed as CUDA graphs (bf16 weights, the default backend), give
// bit-identical logits to the same steps run eagerly.
func TestQwen3GraphReplayMatchesEager(t *testing.T) {
	be := bf16Backend(t)
	defer func(v bool) { decodeBuckets = v }(decodeBuckets)
	decodeBuckets = false // batch 3 as batch 3 in both runs
	ck, _ := qwen3Tiny(t)
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	vocab := ck.Config.VocabSize
	p := qwen3Prompts(nil, vocab)
	prompts := [][]int32{p[65], p[1], p[300][:130]}
	const steps = 24
	be.graph.enabled = false
	eager := decodeRun(t, be, m, vocab, prompts, steps)
	be.graph.enabled = true
	c0, r0 := be.GraphStats()
	graphed := decodeRun(t, be, m, vocab, prompts, steps)
	c1, r1 := be.GraphStats()
	t.Logf("graphs captured %d, steps replayed %d", c1-c0, r1-r0)
	if c1 == c0 || r1 == r0 {
		t.Errorf("captured %d graphs and replayed %d steps; want some of each", c1-c0, r1-r0)
	}
	for i := range eager {
		if !slices.Equal(eager[i], graphed[i]) {
			t.Errorf("step %d: graph logits differ from eager (relative %.3g)", i, relDiff(graphed[i], eager[i]))
		}
	}
}

// TestQwen3TensorParallelGPU: qwen3-tiny at TP=2 (and TP=4 with 4 GPUs)
// over NCCL gives rank 0 logits of a prefill and 8 greedy decode steps
// within 1e-3 (relative) of one GPU's, and the same greedy tokens.
func TestQwen3TensorParallelGPU(t *testing.T) {
	have := multiGPU(t, 2)
	ck, _ := qwen3Tiny(t)
	ids := qwen3Prompts(nil, ck.Config.VocabSize)[65]
	run := func(ranks []*devRank, size int) ([]float32, []int32) {
		var out []float32
		var picks []int32
		err := onRanks(ranks, func(r int, be *Backend) error {
			m, err := ck.Load(be, model.Shard{Rank: r, Size: size})
			if err != nil {
				return err
			}
			s := model.NewSession(be, m, len(ids)+9)
			last, err := s.Step(ids, false)
			be.ResetScratch()
			all := slices.Clone(last)
			var chosen []int32
			for range 8 {
				if err != nil {
					return err
				}
				id := int32(argmax(last))
				chosen = append(chosen, id)
				last, err = s.Step([]int32{id}, false)
				be.ResetScratch()
				all = append(all, last...)
			}
			if r == 0 {
				out, picks = all, chosen
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out, picks
	}
	want, wantPicks := run([]*devRank{startDevRank(t, 0, nil)}, 1)
	sizes := []int{2}
	if have >= 4 {
		sizes = append(sizes, 4)
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("tp=%d", size), func(t *testing.T) {
			devices := make([]int, size)
			for i := range devices {
				devices[i] = i
			}
			ranks, _ := ncclRanks(t, devices)
			got, picks := run(ranks, size)
			if d := relDiff(got, want); !(d <= 1e-3) {
				t.Errorf("TP=%d vs TP=1: relative difference %.3g > 1e-3", size, d)
			}
			if !slices.Equal(picks, wantPicks) {
				t.Errorf("greedy: TP=%d %v, TP=1 %v", size, picks, wantPicks)
			}
		})
	}
}
