//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/hffixture"
	"cohort/kernels/cpu"
	"cohort/model"
)

// TestModelKVBF16 is TestModelMatchesCPUAndHF's comparison with bf16 KV
// caches (COHORT_CUDA_KV=bf16): it logs the max |Δlogit| of every position
// against the CPU oracle and transformers, the top-1 disagreements, and how
// many tokens of the greedy continuation match, and requires none of them
// (the fidelity of the bf16 cache is what it measures); it fails only on a
// non-finite logit.
func TestModelKVBF16(t *testing.T) {
	be := gpu(t)
	old := be.kvBF16
	defer func() { be.kvBF16 = old }()
	be.kvBF16 = true
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
					for i, v := range got {
						if v != v || v-v != 0 {
							t.Fatalf("logit %d is %g", i, v)
						}
					}
					want := step(t, cb, model.NewSession(cb, mc, n), ids, true)
					d, std := hffixture.LogitError(got, want)
					t.Logf("bf16 KV vs CPU: max |Δlogit| = %.3g (%.2g × logit std %.3g)", d, d/std, std)
					if hf, err := fx.Logits(n); err == nil {
						d, std := hffixture.LogitError(got, hf)
						t.Logf("bf16 KV vs HF:  max |Δlogit| = %.3g (%.2g × logit std %.3g)", d, d/std, std)
					}
					flips := 0
					for pos := 0; pos < len(want)/vocab; pos++ {
						if argmax(got[pos*vocab:(pos+1)*vocab]) != argmax(want[pos*vocab:(pos+1)*vocab]) {
							flips++
						}
					}
					t.Logf("bf16 KV: top-1 differs from the CPU's at %d of %d positions", flips, len(want)/vocab)
					wantGreedy := fx.Greedy[n]
					if len(wantGreedy) == 0 {
						wantGreedy = greedy(t, cb, mc, ids, 32)
					}
					g := greedy(t, be, mg, ids, len(wantGreedy))
					same := 0
					for same < len(g) && g[same] == wantGreedy[same] {
						same++
					}
					t.Logf("bf16 KV: greedy continuation matches for %d of %d tokens", same, len(wantGreedy))
				})
			}
		})
	}
	be.ResetScratch()
}
