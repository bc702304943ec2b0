package cpu

import (
	"cohort/kernels/kernelstest"
	"math"
	"math/rand/v2"
	"testing"

	"cohort/kernels"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randSlice and relDiff are the shared kernelstest helpers.
var (
	randSlice = kernelstest.RandSlice
	relDiff   = kernelstest.RelDiff
	batchOf   = kernelstest.BatchOf
)

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
