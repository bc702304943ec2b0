//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLinear(t *testing.T) {
	p := newPair(t)
	modes := []string{"tiled"}
	if p.g.lt != 0 {
		modes = append(modes, "cublaslt")
	} else {
		t.Logf("cuBLASLt not available: %s", p.g.gemmNote)
	}
	saved := p.g.gemm
	defer func() { p.g.gemm = saved }()
	r := newRand(1)
	for _, mode := range modes {
		p.g.gemm = mode
		for _, s := range [][3]int{{1, 64, 48}, {7, 130, 33}, {64, 256, 320}, {300, 512, 1000}, {1, 2560, 9216}} {
			T, in, out := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/%dx%dx%d", mode, T, in, out), func(t *testing.T) {
				gpu(t) // each subtest runs on its own goroutine: lock and bind it
				xc, xg := p.up(randSlice(r, T*in, 1), T, in)
				wc, wg := p.up(randSlice(r, out*in, 0.1), out, in)
				y := p.g.Linear(xg, wg)
				if !slices.Equal(y.Shape(), []int{T, out}) {
					t.Fatalf("shape %v", y.Shape())
				}
				checkClose(t, "y", p.g.Download(y), p.c.Download(p.c.Linear(xc, wc)), 1e-4)
			})
		}
	}
	// A 3-D x keeps its leading dims.
	xc, xg := p.up(randSlice(r, 2*3*16, 1), 2, 3, 16)
	wc, wg := p.up(randSlice(r, 5*16, 1), 5, 16)
	y := p.g.Linear(xg, wg)
	if !slices.Equal(y.Shape(), []int{2, 3, 5}) {
		t.Fatalf("3-D shape %v", y.Shape())
	}
	checkClose(t, "3-D", p.g.Download(y), p.c.Download(p.c.Linear(xc, wc)), 1e-4)
}

func TestEmbedding(t *testing.T) {
	p := newPair(t)
	r := newRand(2)
	const rows, h, start = 50, 96, 100
	tc, tg := p.up(randSlice(r, rows*h, 1), rows, h)
	ids := []int32{100, 149, 99, 150, 120, 0, 7, 125, 100}
	want := p.c.Download(p.c.Embedding(tc, ids, start))
	got := p.g.Download(p.g.Embedding(tg, ids, start))
	if !slices.Equal(got, want) {
		t.Fatalf("embedding differs from the CPU oracle")
	}
}

func TestNorms(t *testing.T) {
	p := newPair(t)
	r := newRand(3)
	// Rows of at least normRowsMin take the warp-per-group kernels (a 4b
	// prefill's 2,560-wide rows, wider ones past the registers kept, heads
	// of 128); fewer, or groups not a multiple of 4, the block kernels.
	// Every shape runs with the default threshold and with 1 (every shape
	// whose groups allow it on the warp kernels).
	defer func(v int) { normRowsMin = v }(normRowsMin)
	for _, s := range [][4]int{{5, 64, 64}, {9, 8 * 256, 256}, {3, 2560, 2560}, {17, 6 * 32, 32}, {4, 100, 50},
		{300, 2560, 2560}, {9, 4096, 4096}, {33, 4 * 128, 128}, {12, 3 * 100, 100}, {10, 2 * 50, 50}, {1, 2560, 2560}} {
		for _, min := range []int{normRowsDefault, 1} {
			s[3] = min
			testNorms(t, p, r, s)
		}
	}
}

// testNorms checks the norms on T rows of cols columns in groups of g
// (s[0..2]) with normRowsMin = s[3] against the CPU oracle.
func testNorms(t *testing.T, p pair, r *rand.Rand, s [4]int) {
	const eps = 1e-6
	T, cols, g := s[0], s[1], s[2]
	t.Run(fmt.Sprintf("%dx%d/g%d/min%d", T, cols, g, s[3]), func(t *testing.T) {
		normRowsMin = s[3]
		gpu(t) // each subtest runs on its own goroutine: lock and bind it
		xc, xg := p.up(randSlice(r, T*cols, 3), T, cols)
		dc, dg := p.up(randSlice(r, T*cols, 1), T, cols)
		zc, zg := p.up(randSlice(r, T*cols, 4), T, cols)
		wc, wg := p.up(randSlice(r, g, 0.5), g)
		checkClose(t, "RMSNorm", p.g.Download(p.g.RMSNorm(xg, wg, eps)), p.c.Download(p.c.RMSNorm(xc, wc, eps)), 1e-5)
		sc, nc := p.c.AddRMSNorm(xc, dc, wc, eps)
		sg, ng := p.g.AddRMSNorm(xg, dg, wg, eps)
		checkClose(t, "AddRMSNorm sum", p.g.Download(sg), p.c.Download(sc), 1e-6)
		checkClose(t, "AddRMSNorm normed", p.g.Download(ng), p.c.Download(nc), 1e-5)
		checkClose(t, "GatedRMSNorm", p.g.Download(p.g.GatedRMSNorm(xg, zg, wg, eps)), p.c.Download(p.c.GatedRMSNorm(xc, zc, wc, eps)), 1e-5)
	})
}

func TestNormRowsFromEnv(t *testing.T) {
	for v, want := range map[string]int{"": normRowsDefault, "1": 1, "64": 64, "0": normRowsDefault, "-3": normRowsDefault, "x": normRowsDefault} {
		if got := normRowsFromEnv(v); got != want {
			t.Errorf("normRowsFromEnv(%q) = %d, want %d", v, got, want)
		}
	}
}

func TestElementwise(t *testing.T) {
	p := newPair(t)
	r := newRand(4)
	for _, n := range []int{1, 1000, 3 * 9216} {
		ac, ag := p.up(randSlice(r, n, 8), 1, n)
		bc, bg := p.up(randSlice(r, n, 8), 1, n)
		checkClose(t, fmt.Sprintf("Add %d", n), p.g.Download(p.g.Add(ag, bg)), p.c.Download(p.c.Add(ac, bc)), 1e-6)
		checkClose(t, fmt.Sprintf("SwiGLU %d", n), p.g.Download(p.g.SwiGLU(ag, bg)), p.c.Download(p.c.SwiGLU(ac, bc)), 1e-5)
	}
}

func TestSplitQueryGateAndSelectRows(t *testing.T) {
	p := newPair(t)
	r := newRand(5)
	const T, heads, hd = 6, 3, 40
	qgc, qgg := p.up(randSlice(r, T*heads*2*hd, 1), T, heads*2*hd)
	qc, gc := p.c.SplitQueryGate(qgc, heads, hd)
	qg, gg := p.g.SplitQueryGate(qgg, heads, hd)
	if !slices.Equal(p.g.Download(qg), p.c.Download(qc)) || !slices.Equal(p.g.Download(gg), p.c.Download(gc)) {
		t.Fatalf("SplitQueryGate differs from the CPU oracle")
	}
	rows := []int{5, 0, 3, 3}
	if !slices.Equal(p.g.Download(p.g.SelectRows(qgg, rows)), p.c.Download(p.c.SelectRows(qgc, rows))) {
		t.Fatalf("SelectRows differs from the CPU oracle")
	}
}

func TestRoPE(t *testing.T) {
	p := newPair(t)
	r := newRand(6)
	for _, c := range []struct {
		heads, hd, rd int
		theta         float64
	}{{4, 64, 16, 1e7}, {2, 256, 64, 1e7}, {3, 8, 8, 1e4}} {
		t.Run(fmt.Sprintf("h%d/hd%d/rd%d", c.heads, c.hd, c.rd), func(t *testing.T) {
			gpu(t) // each subtest runs on its own goroutine: lock and bind it
			const T = 37
			pos := make([]int32, T)
			for i := range pos {
				pos[i] = int32(r.IntN(9000))
			}
			pos[0] = 0
			xc, xg := p.up(randSlice(r, T*c.heads*c.hd, 2), T, c.heads*c.hd)
			p.c.RoPE(xc, pos, c.hd, c.rd, c.theta)
			p.g.RoPE(xg, pos, c.hd, c.rd, c.theta)
			checkClose(t, "RoPE", p.g.Download(xg), p.c.Download(xc), 1e-5)
		})
	}
}

func TestScratchReset(t *testing.T) {
	be := gpu(t)
	x := be.Upload([]float32{1, 2, 3}, 1, 3)
	y := be.Add(x, x)
	if got := be.Download(y); !slices.Equal(got, []float32{2, 4, 6}) {
		t.Fatalf("Add = %v", got)
	}
	be.ResetScratch()
	if used, _ := be.ScratchBytes(); used != 0 {
		t.Fatalf("%d scratch bytes in use after ResetScratch", used)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("using a scratch tensor after ResetScratch did not panic")
			}
		}()
		be.Download(y)
	}()
	// Weights survive the reset.
	if got := be.Download(be.Add(x, x)); !slices.Equal(got, []float32{2, 4, 6}) {
		t.Fatalf("Add after reset = %v", got)
	}
	// Growth past one chunk, then a reset folds the chunks into one.
	big := be.Upload(make([]float32, 20<<20), 20<<20) // 80 MiB
	for range 3 {
		be.Add(big, big)
	}
	if _, capacity := be.ScratchBytes(); capacity < 240<<20 {
		t.Fatalf("scratch capacity %d after 240 MiB of outputs", capacity)
	}
	be.ResetScratch()
	if n := len(be.scratch.chunks); n != 1 {
		t.Fatalf("%d chunks after reset, want 1", n)
	}
	be.Free(big)
	be.ResetScratch()
}
