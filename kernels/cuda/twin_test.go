//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"testing"

	"cohort/kernels"
)

// TestBF16Twins: a Linear on cuBLASLt that reads the bf16 twin its input's
// producer wrote (AddRMSNorm, GatedRMSNorm, SwiGLU) gives the bits of the
// same Linear after a separate f32_to_bf16 conversion, at 1, 40 and 129
// rows; outputs that the GEMVs read (few rows) get no twin.
func TestBF16Twins(t *testing.T) {
	g := bf16Backend(t)
	r := newRand(31)
	const K, N = 256, 96
	w := g.UploadWeight(roundBF16(randSlice(r, N*K, 0.1)), N, K)
	nw := g.Upload(randSlice(r, K, 0.5), K)
	hw := g.Upload(randSlice(r, 64, 0.5), 64)
	producers := map[string]func(a, c kernels.Tensor) kernels.Tensor{
		"AddRMSNorm":   func(a, c kernels.Tensor) kernels.Tensor { _, n := g.AddRMSNorm(a, c, nw, 1e-6); return n },
		"GatedRMSNorm": func(a, c kernels.Tensor) kernels.Tensor { return g.GatedRMSNorm(a, c, hw, 1e-6) },
		"SwiGLU":       func(a, c kernels.Tensor) kernels.Tensor { return g.SwiGLU(a, c) },
	}
	for name, produce := range producers {
		for _, T := range []int{1, 40, 129} {
			t.Run(fmt.Sprintf("%s/T%d", name, T), func(t *testing.T) {
				g := bf16Backend(t)
				a := g.Upload(randSlice(r, T*K, 1), T, K)
				c := g.Upload(randSlice(r, T*K, 1), T, K)
				x := produce(a, c)
				if want := !g.mmaFits(T, K) && !g.gemvFits(T, K); (x.(*Tensor).twin != 0) != want {
					t.Fatalf("twin %v, want one: %v", x.(*Tensor).twin != 0, want)
				}
				got := g.Download(g.Linear(x, w))
				bf16Twins = false
				defer func() { bf16Twins = true }()
				want := g.Download(g.Linear(produce(a, c), w))
				if !slices.Equal(got, want) {
					t.Fatalf("Linear of the twin differs (relative %.3g)", relDiff(got, want))
				}
				g.ResetScratch()
			})
		}
	}
}
