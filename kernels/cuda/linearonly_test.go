//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
)

// TestLinearOnlyOutputs: the For forms of AddRMSNorm, GatedRMSNorm and
// SwiGLULinear give Linears the same bits as the plain forms, at prefill
// rows (the float32 elements left out, the tensor refused by other ops and
// Download) and at decode rows (a plain tensor); a float32 reader (a matrix
// too small for bf16) keeps the float32 elements.
func TestLinearOnlyOutputs(t *testing.T) {
	bf16Backend(t)
	const K, N, heads = 256, 96, 4
	for _, T := range []int{1, 8, 64, 600} { // 600: add_rmsnorm_rows_f32
		t.Run(fmt.Sprintf("T%d", T), func(t *testing.T) {
			g := bf16Backend(t)
			r := newRand(uint64(T))
			up := func(n, k int) kernels.Tensor { return g.Upload(randSlice(r, n*k, 1), n, k) }
			weight := func(n, k int) kernels.Tensor { return g.UploadWeight(roundBF16(randSlice(r, n*k, 0.1)), n, k) }
			res, delta, norm := up(T, K), up(T, K), g.Upload(randSlice(r, K, 0.1), K)
			z, gnorm := up(T, K), g.Upload(randSlice(r, K/heads, 0.1), K/heads)
			w, gate, upw := weight(N, K), weight(2*K, K), weight(2*K, K)
			prefill := !g.mmaFits(T, K) && !g.gemvFits(T, K) && linearOnlyOn

			sum, normed := g.AddRMSNorm(res, delta, norm, 1e-6)
			sumL, normedL := g.AddRMSNormFor([]kernels.Tensor{w, gate, upw}, res, delta, norm, 1e-6)
			bitEqual(t, "AddRMSNorm sum", g.Download(sumL), g.Download(sum))
			bitEqual(t, "Linear(normed)", g.Download(g.Linear(normedL, w)), g.Download(g.Linear(normed, w)))
			bitEqual(t, "Linears(normed)", g.Download(kernels.Linears(g, normedL, w, w)[1]), g.Download(kernels.Linears(g, normed, w, w)[1]))
			act := g.SwiGLULinear(normed, gate, upw)
			down := weight(N, 2*K)
			actL := g.SwiGLULinearFor([]kernels.Tensor{down}, normedL, gate, upw)
			bitEqual(t, "Linear(SwiGLULinear)", g.Download(g.Linear(actL, down)), g.Download(g.Linear(act, down)))
			gated := g.GatedRMSNorm(normed, z, gnorm, 1e-6)
			gatedL := g.GatedRMSNormFor([]kernels.Tensor{w}, normed, z, gnorm, 1e-6)
			bitEqual(t, "Linear(GatedRMSNorm)", g.Download(g.Linear(gatedL, w)), g.Download(g.Linear(gated, w)))

			for _, tc := range []struct {
				name string
				t    kernels.Tensor
			}{{"normed", normedL}, {"SwiGLULinear", actL}, {"GatedRMSNorm", gatedL}} {
				if got := asTensor("test", tc.t).linearOnly; got != prefill {
					t.Fatalf("%s: linearOnly = %v at %d rows, want %v", tc.name, got, T, prefill)
				}
				if prefill {
					mustPanic(t, tc.name+" Download", func() { g.Download(tc.t) })
					mustPanic(t, tc.name+" Add", func() { g.Add(tc.t, tc.t) })
				} else {
					g.Download(tc.t) // a plain tensor at decode rows
				}
			}
			small := weight(8, K) // below bf16MinDim: float32
			_, kept := g.AddRMSNormFor([]kernels.Tensor{w, small}, res, delta, norm, 1e-6)
			bitEqual(t, "AddRMSNorm with a float32 reader", g.Download(kept), g.Download(normed))
			for _, x := range []kernels.Tensor{w, gate, upw, down, small, norm, gnorm, res, delta, z} {
				g.Free(x)
			}
			g.ResetScratch()
		})
	}
}

// mustPanic fails t unless f panics.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}
