//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
)

// TestAddNormLinears: the GEMVs that normalize their own input equal the
// CPU oracle's AddRMSNorm followed by Linears (or SwiGLU of two Linears),
// and the sum they write equals residual + delta exactly; on the fused path
// (up to 8 rows, split tiles included) and the fallback (more rows).
func TestAddNormLinears(t *testing.T) {
	bf16Backend(t)
	c := cpu.New(cpu.Options{})
	for _, tc := range []struct {
		T, K int
		Ns   []int
	}{
		{1, 2560, []int{8192, 4096, 32, 32}}, {3, 2560, []int{2560}}, {8, 512, []int{100, 200}},
		{1, 9216, []int{2560}}, {5, 4096, []int{2560, 48}}, // split tiles
		{12, 256, []int{64, 64}}, // beyond the fused rows
	} {
		t.Run(fmt.Sprintf("T%d_K%d_%v", tc.T, tc.K, tc.Ns), func(t *testing.T) {
			g := bf16Backend(t)
			defer func(on bool) { g.normFuse = on }(g.normFuse)
			g.normFuse = true
			r := newRand(uint64(tc.T*31 + tc.K))
			res, delta, norm := randSlice(r, tc.T*tc.K, 1), randSlice(r, tc.T*tc.K, 1), randSlice(r, tc.K, 0.5)
			gr, gd, gn := g.Upload(res, tc.T, tc.K), g.Upload(delta, tc.T, tc.K), g.Upload(norm, tc.K)
			csum, cx := c.AddRMSNorm(c.Upload(res, tc.T, tc.K), c.Upload(delta, tc.T, tc.K), c.Upload(norm, tc.K), 1e-6)
			// The fallback's Linears see the activations as Linear does.
			cx = c.Upload(oracleActivations(g, c.Download(cx), tc.T, tc.K), tc.T, tc.K)
			var gws, cws []kernels.Tensor
			for _, n := range tc.Ns {
				w := roundBF16(randSlice(r, n*tc.K, 0.1))
				gws, cws = append(gws, g.UploadWeight(w, n, tc.K)), append(cws, c.Upload(w, n, tc.K))
			}
			sum, ys := g.AddNormLinears(gr, gd, gn, 1e-6, gws...)
			if got, want := g.Download(sum), c.Download(csum); !slices.Equal(got, want) {
				t.Errorf("AddNormLinears sum differs from residual + delta (relative %.3g)", relDiff(got, want))
			}
			for i, y := range ys {
				checkClose(t, fmt.Sprintf("AddNormLinears[%d]", i), g.Download(y), c.Download(c.Linear(cx, cws[i])), 2e-5)
			}
			n := tc.Ns[0]
			gate, up := roundBF16(randSlice(r, n*tc.K, 0.1)), roundBF16(randSlice(r, n*tc.K, 0.1))
			sum, y := g.AddNormSwiGLULinear(gr, gd, gn, 1e-6, g.UploadWeight(gate, n, tc.K), g.UploadWeight(up, n, tc.K))
			if got, want := g.Download(sum), c.Download(csum); !slices.Equal(got, want) {
				t.Errorf("AddNormSwiGLULinear sum differs from residual + delta (relative %.3g)", relDiff(got, want))
			}
			want := c.Download(c.SwiGLU(c.Linear(cx, c.Upload(gate, n, tc.K)), c.Linear(cx, c.Upload(up, n, tc.K))))
			checkClose(t, "AddNormSwiGLULinear", g.Download(y), want, 2e-5)
			g.ResetScratch()
		})
	}
}

// TestGEMVOccupancy logs, for each tensor-core GEMV entry, the blocks per
// SM the driver reports at 4, 8 and 16 warps (what a launch plan can count
// on), and fails if an entry cannot hold one block of 4 warps.
func TestGEMVOccupancy(t *testing.T) {
	g := bf16Backend(t)
	for _, name := range kernelNames {
		if len(name) < 8 || name[:8] != "gemv_mma" {
			continue
		}
		var occ []string
		for _, w := range []int{4, 8, 16} {
			if strings.Contains(name, "_o") && w > 4 {
				continue
			}
			n, err := g.funcs[name].MaxActiveBlocksPerMultiProcessor(32*w, 0)
			if err != nil {
				t.Fatalf("%s: occupancy at %d warps: %v", name, w, err)
			}
			if w == 4 && n < 1 {
				t.Errorf("%s holds no block of 4 warps", name)
			}
			occ = append(occ, fmt.Sprintf("w%d: %d blocks/SM", w, n))
		}
		t.Logf("%s: %v", name, occ)
	}
}
