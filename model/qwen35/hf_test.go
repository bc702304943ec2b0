package qwen35_test

import (
	"fmt"
	"slices"
	"testing"

	"cohort/internal/testmodels/hffixture"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
)

const fixtureRoot = "../../testdata/hf"

// fixtures opens every committed HF fixture.
func fixtures(t *testing.T) []*hffixture.Fixture { return hffixture.OpenAll(t, fixtureRoot, 3) }

// TestMatchesHuggingFace compares the CPU forward pass (f32) with
// transformers' Qwen3_5ForCausalLM in f32 on every committed fixture: max
// |Δlogit| ≤ 2e-3 × the logit std, the same top-1 everywhere, and the same
// greedy continuation through prefill then token-by-token decode.
func TestMatchesHuggingFace(t *testing.T) {
	for _, fx := range fixtures(t) {
		t.Run(fx.Name, func(t *testing.T) {
			ck, err := model.Open(fx.Dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			be := cpu.New(cpu.Options{})
			m, err := ck.Load(be, model.Single)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range fx.Lengths() {
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					ids := fx.Prompts[n]
					wantF, err := fx.Logits(n)
					if err != nil {
						t.Fatal(err)
					}
					got, err := model.NewSession(be, m, n).Step(ids, true)
					if err != nil {
						t.Fatal(err)
					}
					compareLogits(t, got, wantF, ck.Config.VocabSize)
					greedy := fx.Greedy[n]
					if g := greedyContinue(t, be, m, ids, len(greedy)); !slices.Equal(g, greedy) {
						t.Errorf("greedy continuation\n got %v\nwant %v", g, greedy)
					}
				})
			}
		})
	}
}

func compareLogits(t *testing.T, got, want []float32, vocab int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d logits, want %d", len(got), len(want))
	}
	maxDiff, std := hffixture.LogitError(got, want)
	t.Logf("max |Δlogit| = %.3g (%.2g × logit std %.3g)", maxDiff, maxDiff/std, std)
	if maxDiff > 2e-3*std {
		t.Errorf("max |Δlogit| = %.3g > 2e-3 × std %.3g", maxDiff, std)
	}
	for p := 0; p < len(want)/vocab; p++ {
		if a, b := argmax(got[p*vocab:(p+1)*vocab]), argmax(want[p*vocab:(p+1)*vocab]); a != b {
			t.Errorf("position %d: top-1 %d, HF %d", p, a, b)
		}
	}
}

func greedyContinue(t *testing.T, be *cpu.Backend, m model.Model, ids []int32, n int) []int32 {
	t.Helper()
	s := model.NewSession(be, m, len(ids)+n)
	logits, err := s.Step(ids, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for len(out) < n {
		id := int32(argmax(logits))
		out = append(out, id)
		if len(out) == n {
			break
		}
		if logits, err = s.Step([]int32{id}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func argmax(xs []float32) int { return sample.Argmax(xs) }
