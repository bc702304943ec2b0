//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels"
)

// TestLinearAddRMSNormFused: the one-launch end of a residual block
// (addNormOn) gives the sum of Linear and AddRMSNorm bit for bit and their
// normed output to rounding, at 1 to 8 rows, with split and whole tiles,
// and again on a second run (its tile counter is reset); beyond 8 rows it
// is the two ops; in each of fusedGEMVVariants.
func TestLinearAddRMSNormFused(t *testing.T) {
	bf16Backend(t)
	defer func(old bool) { addNormOn = old }(addNormOn)
	for i, v := range fusedGEMVVariants {
		for _, tc := range []struct{ T, K, N int }{{1, 9216, 2560}, {3, 4096, 2560}, {8, 2560, 2560}, {1, 512, 200}, {9, 512, 256}} {
			t.Run(fmt.Sprintf("%d/T%d_K%d_N%d", i, tc.T, tc.K, tc.N), func(t *testing.T) {
				g := bf16Backend(t)
				defer g.tune(v)()
				r := newRand(uint64(tc.T*7 + tc.K))
				x := g.Upload(randSlice(r, tc.T*tc.K, 1), tc.T, tc.K)
				w := g.UploadWeight(roundBF16(randSlice(r, tc.N*tc.K, 0.05)), tc.N, tc.K)
				res := g.Upload(randSlice(r, tc.T*tc.N, 1), tc.T, tc.N)
				norm := g.Upload(randSlice(r, tc.N, 0.1), tc.N)
				addNormOn = false
				sum, normed := g.LinearAddRMSNormFor(nil, x, w, res, norm, 1e-6)
				want, wantN := g.Download(sum), g.Download(normed)
				addNormOn = true
				if fits := g.addNormFits("test", x, w, res, norm); fits != (tc.T <= 8) {
					t.Fatalf("addNormFits = %v at %d rows", fits, tc.T)
				}
				for run := range 2 {
					s, n := g.LinearAddRMSNormFor(nil, x, w, res, norm, 1e-6)
					bitEqual(t, fmt.Sprintf("run %d: sum", run), g.Download(s), want)
					checkClose(t, fmt.Sprintf("run %d: normed", run), g.Download(n), wantN, 1e-6)
				}
				for _, v := range []kernels.Tensor{x, w, res, norm} {
					g.Free(v)
				}
				g.ResetScratch()
			})
		}
	}
}
