package qwen3_test

import (
	"math"
	"testing"

	"cohort/internal/testmodels/modelgen"
	"cohort/kernels"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
)

// openTiny writes the qwen3-tiny preset and opens it.
func openTiny(t testing.TB) *model.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets["qwen3-tiny"]); err != nil {
		t.Fatal(err)
	}
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// tinyModel loads the qwen3-tiny preset on one CPU rank.
func tinyModel(t testing.TB) (kernels.Backend, model.Model, *model.Config) {
	t.Helper()
	ck := openTiny(t)
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	return be, m, ck.Config
}

// prompt returns n pseudo-random ids below vocab.
func prompt(n, vocab int, seed int) []int32 {
	ids := make([]int32, n)
	x := uint32(seed*7919 + 1)
	for i := range ids {
		x = x*1664525 + 1013904223
		ids[i] = int32(x>>8) % int32(vocab)
	}
	return ids
}

// maxRelDiff returns max|a-b| / max|b|.
func maxRelDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, scale float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
		scale = math.Max(scale, math.Abs(float64(b[i])))
	}
	return d / scale
}

func argmax(xs []float32) int { return sample.Argmax(xs) }

// greedy runs ids through a fresh session and continues greedily for n
// tokens, one decode step each.
func greedy(t *testing.T, be kernels.Backend, m model.Model, ids []int32, n int) []int32 {
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
