package kernelstest

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestRelDiff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []float32
		diff      float64
	}{
		{"equal", []float32{1, -2}, []float32{1, -2}, 0},
		{"relative to the largest", []float32{1.5, -2}, []float32{1, -2}, 0.25},
		{"tiny want uses 1e-3", []float32{1e-4}, []float32{0}, 0.1},
		{"NaN", []float32{float32(math.NaN())}, []float32{1}, math.Inf(1)},
		{"lengths differ", []float32{1}, []float32{1, 2}, math.Inf(1)},
	} {
		if d := RelDiff(tc.got, tc.want); math.Abs(d-tc.diff) > 1e-6 && d != tc.diff {
			t.Errorf("%s: RelDiff = %g, want %g", tc.name, d, tc.diff)
		}
	}
}

func TestRandSlice(t *testing.T) {
	s := RandSlice(rand.New(rand.NewPCG(1, 2)), 1000, 0.5)
	for _, v := range s {
		if v < -0.5 || v >= 0.5 {
			t.Fatalf("value %g outside [-0.5, 0.5)", v)
		}
	}
}
