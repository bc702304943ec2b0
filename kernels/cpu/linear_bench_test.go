package cpu

import (
	"fmt"
	"runtime"
	"testing"
)

// naiveMatmul is the plain triple loop dst = x·wᵀ: the correctness oracle
// and the benchmark baseline.
func naiveMatmul(dst, x, w []float32, T, in, out int) {
	for i := range T {
		for j := range out {
			var s float32
			for k := range in {
				s += x[i*in+k] * w[j*in+k]
			}
			dst[i*out+j] = s
		}
	}
}

var matmulShapes = []struct {
	name       string
	T, in, out int
}{
	{"decode_1x1024x3584", 1, 1024, 3584},
	{"prefill_128x1024x3584", 128, 1024, 3584},
}

func benchMatmul(b *testing.B, mm func(dst, x, w []float32, T, in, out int)) {
	for _, s := range matmulShapes {
		b.Run(s.name, func(b *testing.B) {
			r := newRand(1)
			x, w := randSlice(r, s.T*s.in, 1), randSlice(r, s.out*s.in, 1)
			dst := make([]float32, s.T*s.out)
			b.ResetTimer()
			for b.Loop() {
				mm(dst, x, w, s.T, s.in, s.out)
			}
			flops := 2 * float64(s.T) * float64(s.in) * float64(s.out) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkMatmul measures the tiled parallel kernel (all cores).
func BenchmarkMatmul(b *testing.B) {
	threads := runtime.GOMAXPROCS(0)
	b.Logf("threads=%d", threads)
	benchMatmul(b, func(dst, x, w []float32, T, in, out int) { Matmul(dst, x, w, T, in, out, threads) })
}

// BenchmarkMatmulSingleThread measures the kernel on one core.
func BenchmarkMatmulSingleThread(b *testing.B) {
	benchMatmul(b, func(dst, x, w []float32, T, in, out int) { Matmul(dst, x, w, T, in, out, 1) })
}

// BenchmarkMatmulNaive is the single-threaded triple-loop baseline.
func BenchmarkMatmulNaive(b *testing.B) {
	benchMatmul(b, naiveMatmul)
}

func TestMatmulAgainstNaive(t *testing.T) {
	shapes := []struct{ T, in, out int }{
		{1, 1, 1}, {3, 7, 5}, {17, 33, 65}, {1, 1024, 100}, {2, 1100, 7}, {130, 20, 3}, {5, 600, 97}, {0, 4, 4},
	}
	for _, s := range shapes {
		for _, threads := range []int{1, 2, 5} {
			t.Run(fmt.Sprintf("%dx%dx%d/threads%d", s.T, s.in, s.out, threads), func(t *testing.T) {
				r := newRand(uint64(s.T*1000 + s.in + s.out))
				x, w := randSlice(r, s.T*s.in, 1), randSlice(r, s.out*s.in, 1)
				got, want := make([]float32, s.T*s.out), make([]float32, s.T*s.out)
				for i := range got {
					got[i] = 42 // must be overwritten
				}
				Matmul(got, x, w, s.T, s.in, s.out, threads)
				naiveMatmul(want, x, w, s.T, s.in, s.out)
				checkClose(t, "Matmul", got, want, 1e-5)
			})
		}
	}
}
