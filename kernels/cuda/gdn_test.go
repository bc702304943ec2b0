//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"cohort/kernels"
	"cohort/kernels/cpu"
)

// TestGDNMatchesCPU feeds several sequences in pieces (mixed lengths,
// including empty pieces and decodes, non-trivial slots) through the conv
// and the gated delta rule of both backends, starting from a nonzero state
// made by a first step, and compares outputs and the full state after every
// step. The CPU oracle uses the chunked form for prefills; the GPU uses its
// chunked form for pieces of more than gdnChunkMin tokens (70, 130, 64 and
// 65 here) and the recurrent form for the rest.
func TestGDNMatchesCPU(t *testing.T) {
	// Decode batches of more than a wave take the pipelined wide recurrent
	// kernel (dk = 128; gdn_recurrent_cols_wide_f32 for other dk) after
	// separate norms and gates, or (wide-fused) the fused wide one; the
	// conv takes the tiled kernels (TestConvTilesMatchLanes compares them
	// with conv1d_f32 bit for bit).
	// With the bf16 state the CPU's state is rounded as the GPU's after
	// every step (gdnRoundRef; tolerances in gdn_bf16_test.go).
	defer func(v bool) { gdnWideFused = v }(gdnWideFused)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, fused := range []bool{false, true} {
			gdnWideFused = fused
			t.Run(fmt.Sprintf("wide-fused=%v", fused), func(t *testing.T) { testGDNMatchesCPU(t, bf16) })
		}
	})
}

func testGDNMatchesCPU(t *testing.T, bf16 bool) {
	p := newPair(t)
	for _, cfg := range []kernels.GDNConfig{
		{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 48, ConvKernel: 4},
		{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 128, ConvKernel: 4},
		{KeyHeads: 3, ValueHeads: 3, KeyDim: 16, ValueDim: 8, ConvKernel: 2},
		{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}, // the 4b shape (decode steps run the fused kernel)
	} {
		t.Run(fmt.Sprintf("nk%d/nv%d/dk%d/dv%d/K%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim, cfg.ConvKernel), func(t *testing.T) {
			gpu(t) // each subtest runs on its own goroutine: lock and bind it
			const layers, slotCount, layer = 2, 5, 1
			pc := p.c.NewStatePool(layers, slotCount, cfg)
			pg := p.g.NewStatePool(layers, slotCount, cfg)
			C, K, nv := cfg.ConvDim(), cfg.ConvKernel, cfg.ValueHeads
			r := newRand(uint64(cfg.KeyDim*7 + cfg.ValueDim))
			wc, wg := p.up(randSlice(r, C*K, 0.5), C, 1, K)
			alc, alg := p.up(randSlice(r, nv, 1), nv)
			dtc, dtg := p.up(randSlice(r, nv, 1), nv)
			slots := []int{3, 0, 4}
			steps := [][]int{
				{5, 1, 3},   // warm-up: makes the state nonzero
				{1, 70, 1},  // decode, long prefill, decode
				{0, 1, 130}, // empty piece, decode, longer prefill
				{1, 1, 1},   // decodes
				{64, 2, 65}, // chunk-boundary lengths
			}
			for si, lens := range steps {
				b := batchOf(lens, make([]int, len(lens)), slots, nil)
				T := b.Rows()
				xc, xg := p.up(randSlice(r, T*C, 1), T, C)
				bc, bg := p.up(randSlice(r, T*nv, 3), T, nv)
				ac, ag := p.up(randSlice(r, T*nv, 3), T, nv)
				mc := p.c.CausalConv1d(xc, wc, pc, layer, b)
				mg := p.g.CausalConv1d(xg, wg, pg, layer, b)
				checkClose(t, fmt.Sprintf("step %d conv", si), p.g.Download(mg), p.c.Download(mc), 1e-5)
				// Feed both rules the CPU's conv output so each comparison
				// isolates one op.
				mg2 := p.g.Upload(p.c.Download(mc), T, C)
				oc := p.c.GatedDeltaRule(mc, bc, ac, alc, dtc, pc, layer, b, cfg)
				og := p.g.GatedDeltaRule(mg2, bg, ag, alg, dtg, pg, layer, b, cfg)
				checkClose(t, fmt.Sprintf("step %d delta rule", si), p.g.Download(og), p.c.Download(oc), gdnTol(1e-3, bf16))
				for _, s := range slots {
					checkClose(t, fmt.Sprintf("step %d slot %d state", si, s),
						pg.(*StatePool).Snapshot(s), pc.(*cpu.StatePool).Snapshot(s), gdnTol(1e-3, bf16))
				}
				gdnRoundRef(pc.(*cpu.StatePool), slots, cfg, bf16)
			}
			// Reset zeroes one slot in every layer and leaves the others.
			before := pg.(*StatePool).Snapshot(0)
			pg.Reset(3)
			if slices.ContainsFunc(pg.(*StatePool).Snapshot(3), func(v float32) bool { return v != 0 }) {
				t.Errorf("slot 3 not zero after Reset")
			}
			if !slices.Equal(pg.(*StatePool).Snapshot(0), before) {
				t.Errorf("slot 0 changed by Reset(3)")
			}
		})
	}
}

// TestSetSlotRoundTrip checks that SetSlot writes back what Snapshot read
// (with the bf16 state: the recurrent values rounded to nearest even, the
// conv state as given).
func TestSetSlotRoundTrip(t *testing.T) {
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		be := gpu(t)
		cfg := kernels.GDNConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 3, ConvKernel: 4}
		pool := be.NewStatePool(2, 3, cfg).(*StatePool)
		defer be.FreeStatePool(pool)
		set := randSlice(newRand(9), len(pool.Snapshot(1)), 1)
		want := slices.Clone(set)
		if bf16 {
			roundRecBF16(want, cfg)
			if slices.Equal(want, set) {
				t.Fatalf("rounding changed nothing: the test would not see a missing rounding")
			}
		}
		pool.SetSlot(1, set)
		bitEqual(t, "Snapshot after SetSlot", pool.Snapshot(1), want)
		if slices.ContainsFunc(pool.Snapshot(2), func(v float32) bool { return v != 0 }) {
			t.Fatalf("SetSlot(1) touched slot 2")
		}
		pool.Reset(1)
		if slices.ContainsFunc(pool.Snapshot(1), func(v float32) bool { return v != 0 }) {
			t.Fatalf("slot 1 not zero after Reset")
		}
	})
}

// TestConvTilesMatchLanes runs CausalConv1d with the tiled kernels
// (conv1d_tile1_f32 for decode rows, else conv1d_pipe_f32, the default,
// or conv1d_tile8_f32, COHORT_CUDA_CONV=tile8) and with conv1d_f32
// (COHORT_CUDA_CONV=lanes) from the same conv state, and wants the outputs
// and the states equal bit for bit after every step: decodes, sequences
// shorter than K-1, empty ones, lengths at and around the tile, and a long
// prefill beside decodes (the flat tile numbering). The subtests are the
// tiled forms: tile8, pipe (its run sized for the device) and pipe with
// forced runs of K-1, 4 and 7 tokens (many runs a sequence, runs that end
// inside a group of the stream).
func TestConvTilesMatchLanes(t *testing.T) {
	gpu(t)
	defer func(v bool, p bool, r int) { convTiled, convPipe, convPipeRun = v, p, r }(convTiled, convPipe, convPipeRun)
	for _, m := range []struct {
		name string
		pipe bool
		run  int
	}{{"tile8", false, 0}, {"pipe", true, 0}, {"pipe/runK-1", true, 1}, {"pipe/run4", true, 4}, {"pipe/run7", true, 7}} {
		t.Run(m.name, func(t *testing.T) {
			convPipe, convPipeRun = m.pipe, m.run
			testConvTilesMatchLanes(t)
		})
	}
}

func testConvTilesMatchLanes(t *testing.T) {
	for _, cfg := range []kernels.GDNConfig{
		{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 48, ConvKernel: 4},
		{KeyHeads: 3, ValueHeads: 3, KeyDim: 16, ValueDim: 8, ConvKernel: 2},
		{KeyHeads: 1, ValueHeads: 1, KeyDim: 20, ValueDim: 24, ConvKernel: 3},
		gdnConv4b,
	} {
		t.Run(fmt.Sprintf("C%d/K%d", cfg.ConvDim(), cfg.ConvKernel), func(t *testing.T) {
			be := gpu(t)
			const layers, slotCount, layer = 2, 5, 1
			C, K := cfg.ConvDim(), cfg.ConvKernel
			r := newRand(uint64(C*10 + K))
			pa := be.NewStatePool(layers, slotCount, cfg).(*StatePool)
			pb := be.NewStatePool(layers, slotCount, cfg).(*StatePool)
			for s := range slotCount {
				st := randSlice(r, len(pa.Snapshot(s)), 1)
				pa.SetSlot(s, st)
				pb.SetSlot(s, st)
			}
			w := be.Upload(randSlice(r, C*K, 0.5), C, 1, K)
			slots := []int{3, 0, 4, 1}
			steps := [][]int{
				{5, 1, 2, 3},    // prefill beside decode and short pieces
				{1, 1, 1, 1},    // decodes (conv1d_tile1_f32)
				{0, 2, 9, 1},    // empty piece; 9 tokens: two tiles
				{8, 1, 0, 7},    // one tile each (flat = 0)
				{17, 1, 2, 16},  // tile boundaries
				{1, 1000, 1, 3}, // a long prefill among decodes
				{2, 1, 1, 1},
				{1, 1, 1, 1},
			}
			for si, lens := range steps {
				bt := batchOf(lens, make([]int, len(lens)), slots, nil)
				T := bt.Rows()
				x := be.Upload(randSlice(r, T*C, 1), T, C)
				convTiled = false
				ya := be.CausalConv1d(x, w, pa, layer, bt)
				convTiled = true
				yb := be.CausalConv1d(x, w, pb, layer, bt)
				if _, _, _, _, ok := convTiles(bt, C, K, 0); !ok {
					t.Fatalf("step %d: the tiled conv does not take C=%d K=%d", si, C, K)
				}
				bitEqual(t, fmt.Sprintf("step %d %v conv", si, lens), be.Download(yb), be.Download(ya))
				for _, s := range slots {
					bitEqual(t, fmt.Sprintf("step %d %v slot %d state", si, lens, s), pb.Snapshot(s), pa.Snapshot(s))
				}
				be.Free(x)
			}
		})
	}
}

// gdnConv4b is the 4b shape's GDN (convDim 8192, K 4).
var gdnConv4b = kernels.GDNConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}

// bitEqual fails t unless got and want hold the same float32 bits.
func bitEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	n, first := 0, -1
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if n == 0 {
				first = i
			}
			n++
		}
	}
	if n > 0 {
		t.Errorf("%s: %d of %d values differ, first at %d: %v, want %v", what, n, len(got), first, got[first], want[first])
	}
}

// gdnBenchBe is the backend of this file's benchmarks (without the test
// backend's synchronization after every launch).
var gdnBenchBe *Backend

// gdnBench returns gdnBenchBe, made on first use and bound to the calling
// thread.
func gdnBench(b *testing.B) *Backend {
	gpu(b)
	if gdnBenchBe == nil {
		be, err := New(Options{Weights: "f32"})
		if err != nil {
			b.Fatal(err)
		}
		gdnBenchBe = be
	}
	if err := gdnBenchBe.Bind(); err != nil {
		b.Fatal(err)
	}
	return gdnBenchBe
}

// timeGDNOp returns the mean time of op over b.N·reps calls after a
// warm-up, synchronizing and resetting the scratch after every reps.
func timeGDNOp(b *testing.B, g *Backend, reps int, op func()) time.Duration {
	b.Helper()
	run := func(n int) {
		for range n {
			op()
		}
		if err := g.Synchronize(); err != nil {
			b.Fatal(err)
		}
		g.ResetScratch()
	}
	run(2)
	start := time.Now()
	for range b.N {
		run(reps)
	}
	return time.Since(start) / time.Duration(b.N*reps)
}

// BenchmarkGDNConv times one CausalConv1d (one layer, the 4b shape: 8192
// channels, K 4) with the tiled kernels (the default: conv1d_pipe_f32 for
// prefill, conv1d_tile1_f32 for decode) beside conv1d_tile8_f32
// (COHORT_CUDA_CONV=tile8) and conv1d_f32 (COHORT_CUDA_CONV=lanes) in the
// same run: one prefill sequence of 1,024, 2,048 and 8,192 tokens, and a
// decode step of 128 rows. It reports them in ms, the ratios and GB/s.
func BenchmarkGDNConv(b *testing.B) {
	gdnBench(b)
	cfg := gdnConv4b
	C, K := cfg.ConvDim(), cfg.ConvKernel
	for _, c := range []struct {
		name      string
		seqs, len int
	}{{"T1024", 1, 1024}, {"T2048", 1, 2048}, {"T8192", 1, 8192}, {"decode128", 128, 1}} {
		b.Run(c.name, func(b *testing.B) {
			g := gdnBench(b) // sub-benchmarks run on their own goroutines: lock and bind
			defer func(v bool) { convTiled = v }(convTiled)
			r := newRand(uint64(c.seqs*c.len + 1))
			pool := g.NewStatePool(1, c.seqs, cfg)
			defer g.FreeStatePool(pool)
			lens, slots := make([]int, c.seqs), make([]int, c.seqs)
			for i := range lens {
				lens[i], slots[i] = c.len, i
			}
			bt := batchOf(lens, make([]int, c.seqs), slots, nil)
			T := bt.Rows()
			x := g.Upload(randSlice(r, T*C, 1), T, C)
			w := g.Upload(randSlice(r, C*K, 0.5), C, 1, K)
			defer g.Free(x, w)
			defer func(v bool) { convPipe = v }(convPipe)
			var times [3]time.Duration // lanes, tile8, pipe (the default)
			for i, m := range []struct{ tiled, pipe bool }{{false, false}, {true, false}, {true, true}} {
				convTiled, convPipe = m.tiled, m.pipe
				times[i] = timeGDNOp(b, g, 20, func() { g.CausalConv1d(x, w, pool, 0, bt) })
			}
			old, tile8, cur := times[0], times[1], times[2]
			gbs := func(d time.Duration) float64 { return float64(2*T*C*4) / d.Seconds() / 1e9 }
			b.ReportMetric(old.Seconds()*1e3, "lanes_ms")
			b.ReportMetric(tile8.Seconds()*1e3, "tile8_ms")
			b.ReportMetric(cur.Seconds()*1e3, "tiled_ms")
			b.ReportMetric(old.Seconds()/cur.Seconds(), "lanes/tiled")
			b.ReportMetric(tile8.Seconds()/cur.Seconds(), "tile8/tiled")
			b.ReportMetric(gbs(cur), "tiled_GB/s")
			b.ReportMetric(gbs(tile8), "tile8_GB/s")
			b.Logf("%s: conv1d_f32 %.4f ms, tile8 %.4f ms (%.0f GB/s), tiled (default: pipe unless decode) %.4f ms (%.2fx lanes, %.2fx tile8, %.0f GB/s)",
				c.name, old.Seconds()*1e3, tile8.Seconds()*1e3, gbs(tile8), cur.Seconds()*1e3,
				old.Seconds()/cur.Seconds(), tile8.Seconds()/cur.Seconds(), gbs(cur))
		})
	}
}

// TestGDNPipeMatchesWide runs decode steps of many sequences (more work
// items than resident blocks, so every block of gdn_recurrent_cols_pipe_f32
// runs several, with slots out of order) through GatedDeltaRule with the
// pipelined kernel (the default) and with gdn_recurrent_cols_wide_f32
// (COHORT_CUDA_GDN_WIDE=nopipe) from the same recurrent state, and wants
// the outputs and the whole state equal bit for bit after every step; the
// first step is also checked against the CPU backend.
// With the bf16 state both kernels round the same float32 values: still bit
// for bit (the start state is drawn bf16-exact, so the CPU starts equal).
func TestGDNPipeMatchesWide(t *testing.T) {
	forGDNStates(t, testGDNPipeMatchesWide)
}

func testGDNPipeMatchesWide(t *testing.T, bf16 bool) {
	gpu(t)
	defer func(p, f bool) { gdnWidePipe, gdnWideFused = p, f }(gdnWidePipe, gdnWideFused)
	gdnWideFused = false
	for _, c := range []struct {
		cfg  kernels.GDNConfig
		seqs int
	}{
		{gdnConv4b, 140},
		{gdnConv4b, 4}, // 512 items: one a block on an H200 (528 resident)
		{kernels.GDNConfig{KeyHeads: 2, ValueHeads: 6, KeyDim: 128, ValueDim: 96, ConvKernel: 4}, 300},
	} {
		cfg := c.cfg
		t.Run(fmt.Sprintf("nv%d/dv%d/seqs%d", cfg.ValueHeads, cfg.ValueDim, c.seqs), func(t *testing.T) {
			be := gpu(t)
			p := newPair(t)
			const layers, layer = 2, 1
			slotCount := c.seqs + 3
			if slotCount%7 == 0 {
				slotCount++ // the slots below step by 7: keep them distinct
			}
			C, nv := cfg.ConvDim(), cfg.ValueHeads
			r := newRand(uint64(c.seqs*1000 + cfg.ValueDim))
			pa := be.NewStatePool(layers, slotCount, cfg).(*StatePool)
			pb := be.NewStatePool(layers, slotCount, cfg).(*StatePool)
			defer be.FreeStatePool(pa)
			defer be.FreeStatePool(pb)
			nRec := int64(layers) * int64(pa.slots) * pa.recSize() // the pool's layout: its slots and any pad slot
			rec := randSlice(r, int(nRec), 0.5)
			var bits []uint16
			if bf16 {
				bits = toBF16(rec)
				rec = widenBF16(bits)
			}
			for _, q := range []*StatePool{pa, pb} {
				src, bytes := unsafe.Pointer(&rec[0]), nRec*4
				if bf16 {
					src, bytes = unsafe.Pointer(&bits[0]), nRec*2
				}
				if err := memcpyHtoD(q.rec, src, bytes); err != nil {
					t.Fatal(err)
				}
			}
			allRec := func(q *StatePool) []float32 {
				if bf16 {
					return widenBF16(q.downloadBits(q.rec, nRec))
				}
				return q.download(q.rec, nRec)
			}
			slots := make([]int, c.seqs)
			for i := range slots {
				slots[i] = (i*7 + 2) % slotCount // distinct: 7 and slotCount share no factor below
			}
			lens := make([]int, c.seqs)
			for i := range lens {
				lens[i] = 1
			}
			bt := batchOf(lens, make([]int, c.seqs), slots, nil)
			alog, dtb := randSlice(r, nv, 1), randSlice(r, nv, 1)
			alg, dtg := be.Upload(alog, nv), be.Upload(dtb, nv)
			for step := range 2 {
				T := bt.Rows()
				mixed, beta, a := randSlice(r, T*C, 1), randSlice(r, T*nv, 3), randSlice(r, T*nv, 3)
				mg, bg, ag := be.Upload(mixed, T, C), be.Upload(beta, T, nv), be.Upload(a, T, nv)
				gdnWidePipe = false
				oa := be.Download(be.GatedDeltaRule(mg, bg, ag, alg, dtg, pa, layer, bt, cfg))
				gdnWidePipe = true
				ob := be.Download(be.GatedDeltaRule(mg, bg, ag, alg, dtg, pb, layer, bt, cfg))
				bitEqual(t, fmt.Sprintf("step %d out", step), ob, oa)
				bitEqual(t, fmt.Sprintf("step %d state", step), allRec(pb), allRec(pa))
				if step == 0 && c.seqs <= 4 {
					// Against the CPU oracle from the same state (slot by slot).
					pc := p.c.NewStatePool(layers, slotCount, cfg).(*cpu.StatePool)
					for s := range slotCount {
						pc.SetSlot(s, stateAt(rec, pa, layers, s))
					}
					mc, bc, ac := p.c.Upload(mixed, T, C), p.c.Upload(beta, T, nv), p.c.Upload(a, T, nv)
					oc := p.c.Download(p.c.GatedDeltaRule(mc, bc, ac, p.c.Upload(alog, nv), p.c.Upload(dtb, nv), pc, layer, bt, cfg))
					checkClose(t, "step 0 out vs CPU", ob, oc, 1e-3) // the same start state: the outputs precede the rounding
					for _, s := range slots {
						checkClose(t, fmt.Sprintf("step 0 slot %d state vs CPU", s), pb.Snapshot(s), pc.Snapshot(s), gdnTol(1e-3, bf16))
					}
				}
				be.Free(mg, bg, ag)
				be.ResetScratch()
			}
			be.Free(alg, dtg)
		})
	}
}

// stateAt returns slot s of a pool whose recurrent state is rec (all
// layers and slots, the pool's layout) and whose conv state is zero, in
// Snapshot's format.
func stateAt(rec []float32, p *StatePool, layers, s int) []float32 {
	var out []float32
	for l := range layers {
		out = append(out, make([]float32, p.convSize())...)
		i := int64(l*p.slots+s) * p.recSize()
		out = append(out, rec[i:i+p.recSize()]...)
	}
	return out
}

// BenchmarkGDNDecode times the recurrent kernel of a decode step alone (one
// layer, the 4b shape: 32 value heads, dk = dv = 128) at batch 128 and 256:
// gdn_recurrent_cols_pipe_f32 beside gdn_recurrent_cols_wide_f32 in the
// same run, on the same inputs and state. It reports both in ms, old/new,
// and the pipelined kernel's state traffic (read and written) in GB/s.
func BenchmarkGDNDecode(b *testing.B) {
	gdnBench(b)
	cfg := gdnConv4b
	nk, nv, dk, dv := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim
	for _, seqs := range []int{128, 256} {
		b.Run(fmt.Sprintf("B%d", seqs), func(b *testing.B) {
			g := gdnBench(b)
			const op = "BenchmarkGDNDecode"
			r := newRand(uint64(seqs))
			pool := g.NewStatePool(1, seqs, cfg).(*StatePool)
			defer g.FreeStatePool(pool)
			lens, slots := make([]int, seqs), make([]int, seqs)
			for i := range lens {
				lens[i], slots[i] = 1, i
			}
			bt := batchOf(lens, make([]int, seqs), slots, nil)
			C, qk := cfg.ConvDim(), nk*dk
			mt := g.Upload(randSlice(r, seqs*C, 1), seqs, C)
			qh, kh := g.Upload(randSlice(r, seqs*qk, 0.1), seqs, qk), g.Upload(randSlice(r, seqs*qk, 0.1), seqs, qk)
			gs := make([]float32, seqs*nv)
			for i := range gs {
				gs[i] = -0.01 // a decay just below 1: the state stays bounded over the runs
			}
			gt, bs := g.Upload(gs, seqs, nv), g.Upload(randSlice(r, seqs*nv, 0.5), seqs, nv)
			out := g.Upload(make([]float32, seqs*nv*dv), seqs, nv*dv)
			defer g.Free(mt, qh, kh, gt, bs, out)
			tens := func(t kernels.Tensor) devptr { return t.(*Tensor).ptr }
			// The sequence metadata in memory of its own, uploaded once (no
			// copies among the timed launches).
			st, ln, sl := seqLayout(pool, 0, bt)
			var meta [3]devptr
			for i, v := range [3][]int32{st, ln, sl} {
				p, err := memAlloc(int64(len(v)) * 4)
				if err != nil {
					b.Fatal(err)
				}
				defer memFree(p)
				if err := memcpyHtoD(p, unsafe.Pointer(&v[0]), int64(len(v))*4); err != nil {
					b.Fatal(err)
				}
				meta[i] = p
			}
			start, length, slot := meta[0], meta[1], meta[2]
			run := func(pipe bool) func() {
				return func() {
					args := []any{tens(out), tens(qh), tens(kh), tens(mt), tens(gt), tens(bs), pool.rec, start, length, slot,
						nk, nv, dk, dv, C, pool.slots, 0}
					shm := (2*dk + 2*32*gdnPipeWarps) * 4
					if pipe {
						name := pool.kernel("gdn_recurrent_cols_pipe_f32")
						g.launch(op, name, [3]int{g.gdnPipeBlocks(name, seqs*nv*(dv/32)), 1, 1}, [3]int{32, gdnPipeWarps, 1}, shm,
							append(args, seqs)...)
					} else {
						g.launch(op, pool.kernel("gdn_recurrent_cols_wide_f32"), [3]int{seqs, nv, dv / 32}, [3]int{32, gdnPipeWarps, 1}, shm, args...)
					}
				}
			}
			old := timeGDNOp(b, g, 20, run(false))
			cur := timeGDNOp(b, g, 20, run(true))
			gbs := float64(2*int64(seqs)*pool.recSize()*pool.recElem()) / cur.Seconds() / 1e9
			b.ReportMetric(old.Seconds()*1e3, "wide_ms")
			b.ReportMetric(cur.Seconds()*1e3, "pipe_ms")
			b.ReportMetric(old.Seconds()/cur.Seconds(), "wide/pipe")
			b.ReportMetric(gbs, "pipe_GB/s")
			b.Logf("batch %d: wide %.4f ms, pipe %.4f ms (%.2fx; pipe moves the state at %.0f GB/s, wide at %.0f)", seqs,
				old.Seconds()*1e3, cur.Seconds()*1e3, old.Seconds()/cur.Seconds(), gbs, gbs*cur.Seconds()/old.Seconds())
		})
	}
}
