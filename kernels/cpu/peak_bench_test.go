package cpu

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What is "peak" for this kernel?
//
// Matmul is pure Go: the compiler emits scalar SSE (one MULSS and one ADDSS
// per multiply-add; with the default GOAMD64=v1 it does not even fuse them
// into an FMA) and never vectorizes. So the honest ceiling for it is the
// machine's scalar float32 rate, which we measure: scalarPeakKernel is the
// matmul micro-kernel (kernel2x3: 6 independent multiply-add chains) with
// its operands held in registers, so there are no loads or stores and the
// only loop-carried dependency is each accumulator on itself. Six chains
// hide the add latency; more do not fit Go's register allocator (8 or 10
// chains spill to the stack and run 1.5-3x slower, measured). That
// per-core rate times the cores Matmul uses is the scalar peak.
//
// Each rate is the best of 5 trials: on a shared VM the slow trials measure
// the neighbours, not the core.
//
// For context only, the theoretical SIMD peak is derived from /proc/cpuinfo:
// 2 FMA pipes per core × lanes × 2 flops × cores × the listed clock
// (AVX2: 8 float32 lanes, AVX-512: 16, assuming full-width 512-bit FMA
// units as on Zen 5 and Intel server cores; Zen 4 (family 25) runs AVX-512
// at the AVX2 rate). It is theoretical: Go cannot reach it without
// assembly, and the clock listed inside a VM is the nominal one, not boost.

// scalarPeakKernel does iters rounds of 6 multiply-adds (12 flops) in
// independent register chains. It returns the sum so nothing is dead code.
func scalarPeakKernel(iters int, x0, x1, w0, w1, w2 float32) float32 {
	var c00, c01, c02, c10, c11, c12 float32
	for i := 0; i < iters; i++ {
		c00 += x0 * w0
		c01 += x0 * w1
		c02 += x0 * w2
		c10 += x1 * w0
		c11 += x1 * w1
		c12 += x1 * w2
	}
	return c00 + c01 + c02 + c10 + c11 + c12
}

var peakSink float32

// scalarGFLOPS runs scalarPeakKernel on `workers` goroutines at once and
// returns the best per-worker rate of a few trials.
func scalarGFLOPS(workers int) float64 {
	const iters = 20_000_000 // 240 MFLOP per worker per trial
	best := 0.0
	for range 5 {
		var wg sync.WaitGroup
		sums := make([]float32, workers)
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				sums[w] = scalarPeakKernel(iters, 1e-3, 2e-3, 0.5, 0.25, 0.125)
			})
		}
		wg.Wait()
		el := time.Since(start).Seconds()
		for _, s := range sums {
			peakSink += s
		}
		best = max(best, 12*iters/el/1e9)
	}
	return best
}

// cpuInfo is what /proc/cpuinfo says about the first CPU.
type cpuInfo struct {
	model          string
	family         int
	mhz            float64
	avx2, avx512   bool // with FMA
	ok             bool
	logicalCPUs    int
	threadsPerCore int
}

func readCPUInfo() cpuInfo {
	var ci cpuInfo
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ci
	}
	defer f.Close()
	siblings, cores := 0, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "processor":
			ci.logicalCPUs++
		}
		if ci.logicalCPUs > 1 {
			continue // the first CPU describes them all
		}
		switch key {
		case "model name":
			ci.model = val
		case "cpu family":
			ci.family, _ = strconv.Atoi(val)
		case "cpu MHz":
			ci.mhz, _ = strconv.ParseFloat(val, 64)
		case "siblings":
			siblings, _ = strconv.Atoi(val)
		case "cpu cores":
			cores, _ = strconv.Atoi(val)
		case "flags":
			flags := map[string]bool{}
			for _, fl := range strings.Fields(val) {
				flags[fl] = true
			}
			ci.avx2 = flags["avx2"] && flags["fma"]
			ci.avx512 = flags["avx512f"] && flags["fma"]
		}
	}
	ci.threadsPerCore = 1
	if cores > 0 && siblings >= cores {
		ci.threadsPerCore = siblings / cores
	}
	ci.ok = ci.mhz > 0
	return ci
}

// theoreticalGFLOPS returns the float32 FMA peak of `cores` cores for the
// given vector width at the listed clock: 2 FMA pipes × lanes × 2 flops.
func (ci cpuInfo) theoreticalGFLOPS(lanes, cores int) float64 {
	return 2 * float64(lanes) * 2 * ci.mhz / 1e3 * float64(cores)
}

// BenchmarkMatmulVsPeak measures Matmul at a prefill shape (128 tokens through
// a 1024→3584 projection, the small preset's MLP) on all GOMAXPROCS threads
// and reports it as a fraction of the scalar peak (measured on one core, times
// the threads), of the scalar rate measured on all threads at once, and of
// the theoretical SIMD peak.
func BenchmarkMatmulVsPeak(b *testing.B) {
	const T, in, out = 128, 1024, 3584
	threads := runtime.GOMAXPROCS(0)

	perCore := scalarGFLOPS(1)
	// The same kernel on every thread at once: lower than perCore × threads
	// when the "cores" share a physical core (SMT siblings, a busy VM host)
	// or the clock drops with more cores busy. Reported next to the nominal
	// peak so the fraction is not flattered either way.
	allCores := scalarGFLOPS(threads) * float64(threads)
	scalarPeak := perCore * float64(threads)

	r := newRand(7)
	x, w := randSlice(r, T*in, 1), randSlice(r, out*in, 1)
	dst := make([]float32, T*out)
	Matmul(dst, x, w, T, in, out, threads) // warm caches and the scheduler
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Matmul(dst, x, w, T, in, out, threads)
	}
	gflops := 2 * float64(T*in*out) * float64(b.N) / b.Elapsed().Seconds() / 1e9

	b.ReportMetric(gflops, "GFLOP/s")
	b.ReportMetric(scalarPeak, "scalar_peak_GFLOP/s")
	b.ReportMetric(gflops/scalarPeak, "frac_scalar_peak")
	b.ReportMetric(gflops/allCores, "frac_scalar_allcores")
	// Without FMA fusion a scalar multiply-add is 2 instructions. AMD Zen
	// cores issue them to separate pipes (2 multiply/FMA + 2 add), so 4
	// flops/cycle is the best case there and perCore/4 is a lower bound on
	// the clock the core really ran at (Intel cores share 2 ports: 2/cycle).
	b.Logf("threads=%d; scalar multiply-add rate: %.2f GFLOP/s on one core (≥ %.2f GHz at 4 flops/cycle); %.2f GFLOP/s in all with %d running at once",
		threads, perCore, perCore/4, allCores, threads)

	ci := readCPUInfo()
	if !ci.ok {
		b.Logf("no /proc/cpuinfo clock: theoretical SIMD peak not reported")
		return
	}
	avx2 := ci.theoreticalGFLOPS(8, threads)
	avx512 := ci.theoreticalGFLOPS(16, threads)
	if ci.family == 25 { // Zen 4 splits 512-bit FMAs into two 256-bit halves
		avx512 = avx2
	}
	b.Logf("cpu %q family %d, %.0f MHz listed, %d logical CPUs, %d thread(s)/core; theoretical (not reachable from pure Go) at %d threads: AVX2 FMA %.0f GFLOP/s, AVX-512 FMA %.0f GFLOP/s",
		ci.model, ci.family, ci.mhz, ci.logicalCPUs, ci.threadsPerCore, threads, avx2, avx512)
	simd := 0.0
	switch {
	case ci.avx512:
		simd = avx512
	case ci.avx2:
		simd = avx2
	}
	if simd > 0 {
		b.ReportMetric(simd, "simd_peak_GFLOP/s")
		b.ReportMetric(gflops/simd, "frac_simd_peak")
	}
}
