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

// BenchmarkLinearBF16 times the bf16 Linear of the 4b-shape decode GEMMs
// at decode batch sizes, the tensor-core GEMV beside what main ran before
// it (the CUDA-core GEMV up to 8 rows, cuBLASLt beyond), in one process:
// it reports each path's weight bandwidth, its share of peakDRAM, and the
// speed-up of the tensor-core path over the old one.
func BenchmarkLinearBF16(b *testing.B) {
	g := bf16Backend(b)
	shapes := []struct {
		name string
		K, N int
	}{
		{"gate", 2560, 9216}, {"down", 9216, 2560}, {"gdn_in", 2560, 12288}, {"attn_o", 4096, 2560}, {"lm_head", 2560, 248320},
	}
	for _, sh := range shapes {
		w := g.UploadWeight(make([]float32, sh.K*sh.N), sh.N, sh.K)
		for _, T := range []int{1, 4, 8, 16, 32} {
			b.Run(fmt.Sprintf("%s_K%d_N%d_T%d", sh.name, sh.K, sh.N, T), func(b *testing.B) {
				g := bf16Backend(b)
				x := g.Upload(randSlice(newRand(uint64(T)), T*sh.K, 1), T, sh.K)
				bytes := float64(sh.K) * float64(sh.N) * 2
				mma := timeLinear(b, g, x, w, mmaMaxRowsDefault)
				old := timeLinear(b, g, x, w, 0)
				b.ReportMetric(bytes/mma.Seconds()/1e9, "mma_GB/s")
				b.ReportMetric(100*bytes/mma.Seconds()/peakDRAM, "mma_%peak")
				b.ReportMetric(bytes/old.Seconds()/1e9, "old_GB/s")
				b.ReportMetric(old.Seconds()/mma.Seconds(), "speedup")
				b.ReportMetric(float64(mma.Microseconds()), "mma_us")
			})
		}
		g.Free(w)
	}
}

// timeLinear returns the mean time of one Linear with the tensor-core GEMV
// serving up to mmaRows rows (0: off), over b.N·20 launches after a warm-up.
func timeLinear(b *testing.B, g *Backend, x, w kernels.Tensor, mmaRows int) time.Duration {
	b.Helper()
	saved := g.mmaRows
	defer func() { g.mmaRows = saved }()
	g.mmaRows = mmaRows
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
