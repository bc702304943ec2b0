//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"cohort/kernels/cpu"
)

// TestGEMVBulk: with COHORT_CUDA_GEMV=bulk a one-row bf16 Linear runs
// gemv_bulk_nt1 and matches the CPU oracle (and gives the same bits
// twice), for one part and for tiles split over K, partial last tiles and
// a single stage; rows beyond one take the tensor-core GEMV.
func TestGEMVBulk(t *testing.T) {
	g := bf16Backend(t)
	if !g.bulkCopies {
		t.Skip("gemv_bulk_nt1 needs sm_90 and NVRTC 12 or later")
	}
	defer g.tune(gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles, bulk: true})()
	c := cpu.New(cpu.Options{})
	for _, tc := range []struct{ T, K, N int }{
		{1, 9216, 2560}, {1, 4096, 2560}, {1, 2560, 9216}, {1, 512, 1000}, {1, 256, 37}, {2, 4096, 2560},
	} {
		t.Run(fmt.Sprintf("T%d_K%d_N%d", tc.T, tc.K, tc.N), func(t *testing.T) {
			gpu(t)
			testLinearBF16(t, g, c, tc.T, tc.K, tc.N)
			if bulk := g.lastLaunch == "gemv_bulk_nt1"; bulk != (tc.T == 1) {
				t.Errorf("last launch %s: want gemv_bulk_nt1 only for one row", g.lastLaunch)
			}
		})
	}
}
