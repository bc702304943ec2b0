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

// TestLinearAddRMSNormLt: for prefill rows (cuBLASLt) the GEMM that adds the
// residual in its epilogue and rmsnorm_rows_f32 (gemmResidualOn) give
// Linear and AddRMSNorm's sum and normed output bit for bit, with the norm's
// float32 output and with its bf16 twin alone (readers: Linears); rows the
// GEMVs or gemv_mmab serve, and steps below the warp-per-row norm's rows,
// keep the two ops.
func TestLinearAddRMSNormLt(t *testing.T) {
	bf16Backend(t)
	defer func(old bool) { gemmResidualOn = old }(gemmResidualOn)
	for _, tc := range []struct {
		T, K, N int
		fused   bool
	}{{1024, 4096, 2560, true}, {600, 1024, 512, true}, {normRowsMin, 512, 256, true}, {300, 512, 256, false}, {4, 512, 256, false}} {
		t.Run(fmt.Sprintf("T%d_K%d_N%d", tc.T, tc.K, tc.N), func(t *testing.T) {
			g := bf16Backend(t)
			r := newRand(uint64(tc.T*5 + tc.N))
			x := g.Upload(randSlice(r, tc.T*tc.K, 1), tc.T, tc.K)
			w := g.UploadWeight(roundBF16(randSlice(r, tc.N*tc.K, 0.05)), tc.N, tc.K)
			w2 := g.UploadWeight(roundBF16(randSlice(r, 64*tc.N, 0.05)), 64, tc.N) // a reader of normed
			res := g.Upload(randSlice(r, tc.T*tc.N, 1), tc.T, tc.N)
			norm := g.Upload(randSlice(r, tc.N, 0.1), tc.N)
			defer func() {
				for _, v := range []kernels.Tensor{x, w, w2, res, norm} {
					g.Free(v)
				}
				g.ResetScratch()
			}()
			for _, readers := range [][]kernels.Tensor{nil, {w2}} {
				gemmResidualOn = false
				sum, normed := g.LinearAddRMSNormFor(readers, x, w, res, norm, 1e-6)
				want, wantN := g.Download(sum), g.Download(g.Linear(normed, w2))
				gemmResidualOn = true
				_, _, ok := g.linearAddNormLt("test", readers, x, w, res, norm, 1e-6)
				if ok != tc.fused {
					t.Fatalf("readers %d: linearAddNormLt applies = %v, want %v", len(readers), ok, tc.fused)
				}
				s, n := g.LinearAddRMSNormFor(readers, x, w, res, norm, 1e-6)
				bitEqual(t, fmt.Sprintf("readers %d: sum", len(readers)), g.Download(s), want)
				bitEqual(t, fmt.Sprintf("readers %d: normed, projected", len(readers)), g.Download(g.Linear(n, w2)), wantN)
				if readers == nil {
					gemmResidualOn = false
					_, n0 := g.LinearAddRMSNormFor(nil, x, w, res, norm, 1e-6)
					bitEqual(t, "normed", g.Download(n), g.Download(n0))
				}
			}
		})
	}
}
