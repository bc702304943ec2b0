//go:build cuda

package cuda

import (
	"fmt"
	"testing"
	"time"

	"cohort/kernels"
)

// peakDRAM is the bandwidth the decode floor assumes (docs/gpu.md): 4.3 TB/s
// usable of the H200's 4.8 nominal.
const peakDRAM = 4.3e12

// gemvVariant is one way to run a bf16 Linear, for BenchmarkLinearBF16.
type gemvVariant struct {
	name    string
	mmaRows int
	tune    gemvTuning
}

// BenchmarkLinearBF16 times the bf16 Linear of the 4b-shape decode GEMMs at
// decode batch sizes, side by side in one process: the tensor-core GEMV's
// variants (warps per block w, blocks per tile s, 0 = automatic), the
// CUDA-core GEMV main used
// up to 8 rows, and cuBLASLt. It reports each one's weight bandwidth in GB/s
// (peakDRAM is 4300), and the default path's speed-up over cuBLASLt.
func BenchmarkLinearBF16(b *testing.B) {
	g := bf16Backend(b)
	shapes := []struct {
		name string
		K, N int
	}{
		{"gate", 2560, 9216}, {"down", 9216, 2560}, {"gdn_in", 2560, 12288}, {"attn_o", 4096, 2560}, {"lm_head", 2560, 248320},
	}
	variants := []gemvVariant{{name: "default", mmaRows: mmaMaxRowsDefault, tune: gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles}},
		{name: "o6", mmaRows: mmaMaxRowsDefault, tune: gemvTuning{variant: "o6_", occ: true}},
		{name: "base", mmaRows: mmaMaxRowsDefault},
		{name: "bulk", mmaRows: mmaMaxRowsDefault, tune: gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles, bulk: true}}}
	for _, v := range []string{"", "u2_", "o6_", "o7_", "o8_"} {
		variants = append(variants, gemvVariant{name: v + "occ", mmaRows: mmaMaxRowsDefault, tune: gemvTuning{variant: v, occ: true}})
	}
	variants = append(variants, gemvVariant{name: "w8occ", mmaRows: mmaMaxRowsDefault, tune: gemvTuning{warps: 8, occ: true}})
	// The tensor-core GEMV beyond 8 rows (cuBLASLt serves them by default).
	variants = append(variants, gemvVariant{name: "r32_occ", mmaRows: 32, tune: gemvTuning{occ: true}})
	variants = append(variants, gemvVariant{name: "cudacore", tune: gemvTuning{rows: 8}}, gemvVariant{name: "cublaslt", tune: gemvTuning{rows: -1}})
	for _, sh := range shapes {
		w := g.UploadWeight(make([]float32, sh.K*sh.N), sh.N, sh.K)
		for _, T := range gemvBenchRows {
			b.Run(fmt.Sprintf("%s_K%d_N%d_T%d", sh.name, sh.K, sh.N, T), func(b *testing.B) {
				g := bf16Backend(b)
				x := g.Upload(randSlice(newRand(uint64(T)), T*sh.K, 1), T, sh.K)
				bytes := float64(sh.K) * float64(sh.N) * 2
				times := map[string]time.Duration{}
				for _, v := range variants {
					if v.name == "cudacore" && T > 8 {
						continue
					}
					times[v.name] = timeLinear(b, g, x, w, v)
					b.ReportMetric(bytes/times[v.name].Seconds()/1e9, v.name+"_GB/s")
				}
				b.ReportMetric(times["cublaslt"].Seconds()/times["default"].Seconds(), "default_vs_cublaslt")
			})
		}
		g.Free(w)
	}
}

// gemvBenchRows are the row counts BenchmarkLinearBF16 runs.
var gemvBenchRows = []int{1, 8, 16, 32}

// timeLinear returns the mean time of one Linear run as v says, over
// b.N·20 launches after a warm-up.
func timeLinear(b *testing.B, g *Backend, x, w kernels.Tensor, v gemvVariant) time.Duration {
	b.Helper()
	rows, tune := g.mmaRows, g.gemvTune
	defer func() { g.mmaRows, g.gemvTune = rows, tune }()
	g.mmaRows, g.gemvTune = v.mmaRows, v.tune
	run := func(n int) {
		for range n {
			g.Linear(x, w)
		}
		if err := g.Synchronize(); err != nil {
			b.Fatal(err)
		}
		g.ResetScratch()
	}
	run(3)
	const reps = 20
	start := time.Now()
	for range b.N {
		run(reps)
	}
	return time.Since(start) / time.Duration(b.N*reps)
}
