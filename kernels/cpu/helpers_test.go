package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"cohort/kernels"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randSlice returns n values uniform in [-scale, scale).
func randSlice(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = (2*r.Float32() - 1) * scale
	}
	return s
}

// relDiff returns max|got−want| / max|want| (the magnitude, at least 1e-3).
func relDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range got {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = max(m, math.Abs(float64(want[i])))
	}
	return d / max(1e-3, m)
}

func relDiff64(got []float32, want []float64) float64 {
	w := make([]float32, len(want))
	for i, v := range want {
		w[i] = float32(v)
	}
	return relDiff(got, w)
}

func checkClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if d := relDiff(got, want); !(d <= tol) {
		t.Errorf("%s: relative difference %.3g > %.3g", what, d, tol)
	}
}

func data(x kernels.Tensor) []float32 { return x.(*Tensor).Data() }

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// batchOf builds a batch of sequences with the given lengths and cached
// counts laid out in order; pages are assigned by the caller.
func batchOf(lens, cached, slots []int, pages [][]int32) *kernels.Batch {
	b := &kernels.Batch{}
	start := 0
	for i, n := range lens {
		s := kernels.Seq{Slot: slots[i], Start: start, Len: n, Cached: cached[i]}
		if pages != nil {
			s.Pages = pages[i]
		}
		b.Seqs = append(b.Seqs, s)
		for j := range n {
			b.Positions = append(b.Positions, int32(cached[i]+j))
		}
		start += n
	}
	return b
}
