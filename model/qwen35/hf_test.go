package qwen35_test

import (
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/hffixture"
)

const fixtureRoot = "../../testdata/hf"

// fixtures opens every committed HF fixture.
func fixtures(t *testing.T) []*hffixture.Fixture { return hffixture.OpenAll(t, fixtureRoot, 3) }

// TestMatchesHuggingFace compares the CPU forward pass (f32) with
// transformers' Qwen3_5ForCausalLM in f32 on every committed fixture.
func TestMatchesHuggingFace(t *testing.T) {
	for _, fx := range fixtures(t) {
		t.Run(fx.Name, func(t *testing.T) { archtest.MatchesHF(t, fx) })
	}
}
