package qwen3_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"cohort/internal/testmodels/archtest"
	"cohort/internal/testmodels/hffixture"
	"cohort/internal/testmodels/modelgen"
)

// fixtureDir holds the qwen3-tiny checkpoint; tools/hfref/make_fixtures.py
// --qwen3 adds transformers' references (ref.json, ref.safetensors) to it.
const fixtureDir = "../../testdata/hf-qwen3/qwen3-tiny"

// TestFixtureIsTinyPreset: the committed fixture checkpoint is exactly what
// modelgen writes for qwen3-tiny, so the HF references are of the preset
// that the other tests and `cohort serve` use.
func TestFixtureIsTinyPreset(t *testing.T) {
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets["qwen3-tiny"]); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from the qwen3-tiny preset: regenerate it with `cohort make-model --preset qwen3-tiny --out testdata/hf-qwen3/qwen3-tiny`, then its references on the GPU machine", fixtureDir, name)
		}
	}
}

// TestMatchesHuggingFace compares the CPU forward pass (f32) with
// transformers' Qwen3ForCausalLM in f32 on the fixture: max |Δlogit| ≤
// 2e-3 × the logit std, the same top-1 everywhere, and the same greedy
// continuation through prefill then token-by-token decode.
func TestMatchesHuggingFace(t *testing.T) {
	dirs, err := hffixture.Find(filepath.Dir(fixtureDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Skipf("no Qwen3 HF references (ref.json) under %s: make them on the GPU machine with "+
			"`python3 tools/hfref/make_fixtures.py --qwen3 testdata/hf-qwen3/qwen3-tiny`", filepath.Dir(fixtureDir))
	}
	for _, dir := range dirs {
		fx, err := hffixture.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer fx.Close()
		t.Run(fx.Name, func(t *testing.T) { archtest.MatchesHF(t, fx) })
	}
}
