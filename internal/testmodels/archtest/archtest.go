// Package archtest holds the checks that every architecture's tests run on
// the CPU oracle: prefill then decode, chunked prefill and batched sequences
// against one prefill (consistency.go), tensor parallelism over in-process
// CPU ranks against one rank (tp.go), the Hugging Face references (hf.go)
// and config.json refusals (config.go). An architecture's test file picks
// its checkpoint and calls them.
package archtest

import (
	"math"
	"testing"

	"cohort/internal/testmodels/modelgen"
	"cohort/kernels/cpu"
	"cohort/model"
	"cohort/model/sample"
)

// WritePreset writes the modelgen preset to a temporary directory.
func WritePreset(t testing.TB, preset string) string {
	t.Helper()
	dir := t.TempDir()
	if err := modelgen.Write(dir, modelgen.Presets[preset]); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Open writes the modelgen preset to a temporary directory and opens it; the
// checkpoint is closed when the test ends.
func Open(t testing.TB, preset string) *model.Checkpoint {
	t.Helper()
	return OpenDir(t, WritePreset(t, preset))
}

// OpenDir opens the checkpoint in dir; it is closed when the test ends.
func OpenDir(t testing.TB, dir string) *model.Checkpoint {
	t.Helper()
	ck, err := model.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// Load loads ck on one CPU rank.
func Load(t testing.TB, ck *model.Checkpoint) (*cpu.Backend, model.Model) {
	t.Helper()
	be := cpu.New(cpu.Options{})
	m, err := ck.Load(be, model.Single)
	if err != nil {
		t.Fatal(err)
	}
	return be, m
}

// Prompt returns n pseudo-random ids below vocab, the same for a seed.
func Prompt(n, vocab int, seed int) []int32 {
	ids := make([]int32, n)
	x := uint32(seed*7919 + 1)
	for i := range ids {
		x = x*1664525 + 1013904223
		ids[i] = int32(x>>8) % int32(vocab)
	}
	return ids
}

// MaxAbsDiff returns max|a-b| over a's length.
func MaxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// Greedy runs ids through a fresh session and continues greedily for n
// tokens, one decode step each.
func Greedy(t testing.TB, be *cpu.Backend, m model.Model, ids []int32, n int) []int32 {
	t.Helper()
	s := model.NewSession(be, m, len(ids)+n)
	logits, err := s.Step(ids, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for len(out) < n {
		id := int32(sample.Argmax(logits))
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
