//go:build cuda

package cuda

import (
	"fmt"
	"strings"
	"testing"

	"cohort/kernels"
	"cohort/kernels/cpu"
)

// TestSkinnyLinear: with COHORT_CUDA_SKINNY=1, bf16 Linears of 9 to 64
// rows run on gemv_mmab (the launch is checked) and match the CPU oracle
// on their bf16-rounded input, split tiles included (K 9216), and repeat
// their bits; Linears (several weights on one input) and 65 rows (beyond
// it: cuBLASLt) too.
func TestSkinnyLinear(t *testing.T) {
	g := bf16Backend(t)
	c := cpu.New(cpu.Options{})
	defer func(v bool) { skinnyOn = v }(skinnyOn)
	skinnyOn = true
	for _, tc := range []struct{ T, K, N int }{
		{9, 256, 96}, {16, 512, 200}, {17, 2560, 2560}, {32, 9216, 2560}, {40, 2560, 9216}, {64, 4096, 160}, {65, 256, 96},
	} {
		t.Run(fmt.Sprintf("T%d_K%d_N%d", tc.T, tc.K, tc.N), func(t *testing.T) {
			g := bf16Backend(t)
			testLinearBF16(t, g, c, tc.T, tc.K, tc.N)
			gw := g.UploadWeight(roundBF16(randSlice(newRand(5), tc.N*tc.K, 0.1)), tc.N, tc.K)
			g.Linear(g.Upload(randSlice(newRand(6), tc.T*tc.K, 1), tc.T, tc.K), gw)
			if on := strings.HasPrefix(g.lastLaunch, "gemv_mmab_nt"); on != g.skinnyFits(tc.T, tc.K) {
				t.Errorf("the Linear's last launch was %q; gemv_mmab wanted: %v", g.lastLaunch, g.skinnyFits(tc.T, tc.K))
			}
			g.Free(gw)
			g.ResetScratch()
		})
	}
	// Linears: one bf16 copy of x, each weight on gemv_mmab.
	const T, K = 24, 2560
	r := newRand(9)
	x := randSlice(r, T*K, 1)
	gx, cx := g.Upload(x, T, K), c.Upload(oracleActivations(g, x, T, K), T, K)
	var gws, cws []kernels.Tensor
	for _, n := range []int{4096, 32, 32} {
		w := roundBF16(randSlice(r, n*K, 0.1))
		gws, cws = append(gws, g.UploadWeight(w, n, K)), append(cws, c.Upload(w, n, K))
	}
	for i, y := range g.Linears(gx, gws...) {
		checkClose(t, fmt.Sprintf("Linears[%d]", i), g.Download(y), c.Download(c.Linear(cx, cws[i])), 2e-5)
	}
	for _, w := range gws {
		g.Free(w)
	}
	g.ResetScratch()
}

// BenchmarkSkinnyLinear times the bf16 Linears of the 4b shape's decode
// GEMMs at 16, 32 and 64 rows on cuBLASLt (the default) and on gemv_mmab
// (COHORT_CUDA_SKINNY=1), side by side: each one's weight bandwidth in
// GB/s and gemv_mmab's speed-up.
func BenchmarkSkinnyLinear(b *testing.B) {
	g := bf16Backend(b)
	defer func(v bool) { skinnyOn = v }(skinnyOn)
	for _, sh := range []struct {
		name string
		K, N int
	}{{"gate", 2560, 9216}, {"down", 9216, 2560}, {"gdn_in", 2560, 12288}, {"attn_o", 4096, 2560}} {
		w := g.UploadWeight(make([]float32, sh.K*sh.N), sh.N, sh.K)
		for _, T := range []int{16, 32, 64} {
			b.Run(fmt.Sprintf("%s_K%d_N%d_T%d", sh.name, sh.K, sh.N, T), func(b *testing.B) {
				g := bf16Backend(b)
				x := g.Upload(randSlice(newRand(uint64(T)), T*sh.K, 1), T, sh.K)
				bytes := float64(sh.K) * float64(sh.N) * 2
				v := gemvVariant{name: "default", mmaRows: g.mmaRows, tune: g.gemvTune}
				skinnyOn = false
				lt := timeLinear(b, g, x, w, v)
				skinnyOn = true
				sk := timeLinear(b, g, x, w, v)
				b.ReportMetric(bytes/lt.Seconds()/1e9, "cublaslt_GB/s")
				b.ReportMetric(bytes/sk.Seconds()/1e9, "skinny_GB/s")
				b.ReportMetric(lt.Seconds()/sk.Seconds(), "skinny_speedup")
				g.Free(x)
			})
		}
		g.Free(w)
	}
}

func TestNTiles(t *testing.T) {
	for _, tc := range []struct{ T, lo, hi, want int }{
		{1, 1, 4, 1}, {8, 1, 4, 1}, {9, 1, 4, 2}, {16, 1, 4, 2}, {17, 1, 4, 4}, {32, 1, 4, 4}, {33, 1, 4, 4},
		{9, 2, 8, 2}, {16, 2, 8, 2}, {17, 2, 8, 4}, {33, 2, 8, 8}, {64, 2, 8, 8},
	} {
		if got := nTiles(tc.T, tc.lo, tc.hi); got != tc.want {
			t.Errorf("nTiles(%d, %d, %d) = %d, want %d", tc.T, tc.lo, tc.hi, got, tc.want)
		}
	}
}
