package archtest

import (
	"fmt"
	"slices"
	"testing"

	"cohort/internal/testmodels/hffixture"
	"cohort/model/sample"
)

// MatchesHF compares the CPU forward pass (f32) of the fixture's checkpoint
// with its transformers references (f32): max |Δlogit| ≤ 2e-3 × the logit
// std, the same top-1 at every position, and the same greedy continuation
// through prefill then token-by-token decode, for every prompt length
// (under the race detector, the lengths up to raceMaxLen).
func MatchesHF(t *testing.T, fx *hffixture.Fixture) {
	ck := OpenDir(t, fx.Dir)
	be, m := Load(t, ck)
	lens := fx.Lengths()
	for _, n := range lens {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if RaceEnabled && n > raceMaxLen && n != lens[0] {
				t.Skipf("%d tokens: the unit pass compares it; under -race the prompts up to %d run the same kernels", n, raceMaxLen)
			}
			ids := fx.Prompts[n]
			want, err := fx.Logits(n)
			if err != nil {
				t.Fatal(err)
			}
			got := prefill(t, be, m, ids)
			CompareLogits(t, got, want, ck.Config.VocabSize)
			if g := Greedy(t, be, m, ids, len(fx.Greedy[n])); !slices.Equal(g, fx.Greedy[n]) {
				t.Errorf("greedy continuation\n got %v\nwant %v", g, fx.Greedy[n])
			}
		})
	}
}

// raceMaxLen is the longest prompt the race pass runs through a model: it
// spans two of the delta rule's 64-row chunks and splits every kernel over
// the backend's threads, as the longer prompts do.
const raceMaxLen = 65

// CompareLogits checks got against HF's logits want (positions × vocab):
// max |Δlogit| ≤ 2e-3 × the logit std and the same top-1 at every position.
func CompareLogits(t testing.TB, got, want []float32, vocab int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d logits, want %d", len(got), len(want))
	}
	maxDiff, std := hffixture.LogitError(got, want)
	t.Logf("max |Δlogit| = %.3g (%.2g × logit std %.3g)", maxDiff, maxDiff/std, std)
	if maxDiff > 2e-3*std {
		t.Errorf("max |Δlogit| = %.3g > 2e-3 × std %.3g", maxDiff, std)
	}
	for p := range len(want) / vocab {
		if a, b := sample.Argmax(got[p*vocab:(p+1)*vocab]), sample.Argmax(want[p*vocab:(p+1)*vocab]); a != b {
			t.Errorf("position %d: top-1 %d, HF %d", p, a, b)
		}
	}
}
