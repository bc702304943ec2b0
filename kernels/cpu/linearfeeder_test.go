package cpu

import (
	"slices"
	"testing"

	"cohort/kernels"
)

// TestLinearFeederFallback: the CPU backend is no kernels.LinearFeeder, so
// the For helpers return the plain ops' values, bit for bit.
func TestLinearFeederFallback(t *testing.T) {
	be := New(Options{})
	if _, ok := kernels.Backend(be).(kernels.LinearFeeder); ok {
		t.Fatal("the CPU backend implements LinearFeeder: this test no longer covers the fallbacks")
	}
	r := newRand(9)
	const T, K, N = 5, 16, 24
	up := func(n ...int) kernels.Tensor {
		size := 1
		for _, d := range n {
			size *= d
		}
		return be.Upload(randSlice(r, size, 1), n...)
	}
	res, delta, norm, z, gnorm := up(T, K), up(T, K), up(K), up(T, K), up(K/4)
	gate, upw, down := up(N, K), up(N, K), up(K, N)
	readers := []kernels.Tensor{gate, upw}

	sum, normed := be.AddRMSNorm(res, delta, norm, 1e-6)
	sumF, normedF := kernels.AddRMSNormFor(be, readers, res, delta, norm, 1e-6)
	equal(t, "AddRMSNormFor sum", sumF, sum)
	equal(t, "AddRMSNormFor normed", normedF, normed)
	equal(t, "GatedRMSNormFor", kernels.GatedRMSNormFor(be, []kernels.Tensor{down}, normed, z, gnorm, 1e-6), be.GatedRMSNorm(normed, z, gnorm, 1e-6))
	equal(t, "SwiGLULinearFor", kernels.SwiGLULinearFor(be, []kernels.Tensor{down}, normed, gate, upw), kernels.SwiGLULinear(be, normed, gate, upw))
}

// equal fails t unless got and want hold the same bits.
func equal(t *testing.T, what string, got, want kernels.Tensor) {
	t.Helper()
	if !slices.Equal(data(got), data(want)) {
		t.Errorf("%s differs (relative %.3g)", what, relDiff(data(got), data(want)))
	}
}
