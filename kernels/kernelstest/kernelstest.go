// Package kernelstest holds helpers shared by the backends' differential
// tests (kernels/cpu against float64 references, kernels/cuda against the
// CPU oracle).
package kernelstest

import (
	"math"
	"math/rand/v2"

	"cohort/kernels"
)

// RandSlice returns n values uniform in [-scale, scale).
func RandSlice(r *rand.Rand, n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = (2*r.Float32() - 1) * scale
	}
	return s
}

// RelDiff returns max|got−want| / max|want| (the magnitude, at least 1e-3);
// NaN anywhere, or different lengths, give +Inf.
func RelDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsNaN(w) {
			return math.Inf(1)
		}
		d = max(d, math.Abs(g-w))
		m = max(m, math.Abs(w))
	}
	return d / max(1e-3, m)
}

// BatchOf builds a batch of sequences with the given lengths, cached counts
// and slots laid out in order, with their positions; pages (nil: none) are
// the caller's.
func BatchOf(lens, cached, slots []int, pages [][]int32) *kernels.Batch {
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
