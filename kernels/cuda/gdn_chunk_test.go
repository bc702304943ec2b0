//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"cohort/kernels"
	"cohort/kernels/cpu"
)

// gdnChunkCfgs are the head shapes of the chunked-rule tests: GVA 2:1 with
// dims that are not multiples of the kernels' tiles, the 4b model's head
// dims, and tiny heads.
var gdnChunkCfgs = []kernels.GDNConfig{
	{KeyHeads: 2, ValueHeads: 4, KeyDim: 32, ValueDim: 48, ConvKernel: 4},
	{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 128, ConvKernel: 4},
	{KeyHeads: 3, ValueHeads: 3, KeyDim: 16, ValueDim: 8, ConvKernel: 2},
	{KeyHeads: 2, ValueHeads: 6, KeyDim: 72, ValueDim: 40, ConvKernel: 4},
}

// gdnInputs are one step's raw GatedDeltaRule inputs on the host.
type gdnInputs struct {
	mixed, beta, a []float32
	T              int
}

// randGDNInputs draws a step's inputs for T rows (the scales of
// TestGDNMatchesCPU: strong and weak gates and decays both occur).
func randGDNInputs(r *rand.Rand, T int, cfg kernels.GDNConfig) gdnInputs {
	nv := cfg.ValueHeads
	return gdnInputs{mixed: randSlice(r, T*cfg.ConvDim(), 1), beta: randSlice(r, T*nv, 3), a: randSlice(r, T*nv, 3), T: T}
}

// gdnRun runs GatedDeltaRule on be with the step's inputs and returns the
// output on the host.
func gdnRun(be kernels.Backend, in gdnInputs, aLog, dtBias kernels.Tensor, pool kernels.StatePool, layer int, b *kernels.Batch, cfg kernels.GDNConfig) []float32 {
	nv := cfg.ValueHeads
	m := be.Upload(in.mixed, in.T, cfg.ConvDim())
	bt := be.Upload(in.beta, in.T, nv)
	a := be.Upload(in.a, in.T, nv)
	return be.Download(be.GatedDeltaRule(m, bt, a, aLog, dtBias, pool, layer, b, cfg))
}

// gdnVariants are the chunked-rule entry pairs the tests run: the default
// (new) pair, the first one, the one-pass tensor-core scan (the default
// before the split scan), the two mixes (which tell a fault of the new
// prep from one of the new scan), the CUDA-core inverse prep and the
// previous tensor-core prep (gdn_chunk_prep_mma_f32, COHORT_CUDA_GDN_PREP=old)
// with the split scan, and the split scan with its state pass (its outputs,
// the prep's products) in one TF32 mma a product (COHORT_CUDA_GDN_CHUNK=tf32,
// tf32out, tf32all).
var gdnVariants = []struct {
	name string
	k    gdnKernelPair
	tol  float64 // TestGDNChunkedMatchesCPU's bound
}{
	{"new", gdnKernelsNew, 1e-4},
	{"old", gdnKernelsOld, 1e-4},
	{"mmascan", gdnKernelsMMAScan, 1e-4},
	{"newprep+oldscan", gdnKernelPair{prep: gdnKernelsNew.prep, scan: gdnKernelsOld.scan}, 1e-4},
	{"oldprep+newscan", gdnKernelPair{prep: gdnKernelsOld.prep, scan: gdnKernelsNew.scan}, 1e-4},
	{"invprep+newscan", gdnKernelPair{prep: gdnPrepInv, scan: gdnKernelsNew.scan}, 1e-4},
	{"mmaprep+newscan", gdnKernelPair{prep: gdnPrepMMA, scan: gdnKernelsNew.scan}, 1e-4},
	// One TF32 mma a product in the state pass: inputs keep 11 mantissa
	// bits, not float32's (on the H200 the largest difference was 7.4e-4).
	{"tf32state", gdnKernelPair{prep: gdnKernelsNew.prep, scan: gdnScanSplitTF32}, 4e-3},
	// The outputs' products in TF32 too (passed on the H200, 2026-12-03).
	{"tf32out", gdnKernelPair{prep: gdnKernelsNew.prep, scan: gdnScanSplitTF32, out: gdnOutTF32}, 4e-3},
	// And the prep's products: the default with bf16 weights (passed on the
	// H200, 2026-12-03).
	{"tf32all", gdnKernelPair{prep: gdnPrepPipeTF32, scan: gdnScanSplitTF32, out: gdnOutTF32}, 4e-3},
	// The wide state passes (COHORT_CUDA_GDN_STATE_COLS), exact and in TF32.
	{"w32exact", gdnKernelPair{prep: gdnKernelsNew.prep, scan: gdnWideScan(gdnScanSplit, 32)}, 1e-4},
	{"w64exact", gdnKernelPair{prep: gdnKernelsNew.prep, scan: gdnWideScan(gdnScanSplit, 64)}, 1e-4},
	{"w64tf32all", gdnKernelPair{prep: gdnPrepPipeTF32, scan: gdnWideScan(gdnScanSplitTF32, 64), out: gdnOutTF32}, 4e-3},
	// The default with bf16 weights since phase 17.
	{"w32tf32all", gdnKernelPair{prep: gdnPrepPipeTF32, scan: gdnWideScan(gdnScanSplitTF32, 32), out: gdnOutTF32}, 4e-3},
}

// TestGDNStateWideMatches: the wide state passes (32 and 64 columns a
// block, 3xTF32 and TF32, either state) give the 16-column pass's outputs
// and states bit for bit, over multi-chunk pieces, partial last chunks and
// decode rows beside them, step after step on the same slots.
func TestGDNStateWideMatches(t *testing.T) {
	be := gpu(t)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, scan := range []string{gdnScanSplit, gdnScanSplitTF32} {
			for _, cols := range []int{32, 64} {
				wide := gdnWideScan(scan, cols)
				t.Run(wide, func(t *testing.T) {
					for _, cfg := range gdnChunkCfgs {
						t.Run(fmt.Sprintf("dk%d/dv%d", cfg.KeyDim, cfg.ValueDim), func(t *testing.T) {
							gpu(t) // subtests run on their own goroutines: lock and bind
							gdnTwoForms(t, be, cfg, uint64(cfg.KeyDim*7+cfg.ValueDim+cols), 5, []int{4, 1, 0},
								[][]int{{130, 1, 64}, {257, 63, 2}, {65, 0, 200}},
								func(f func()) { withGDNKernels(gdnKernelPair{prep: gdnKernelsNew.prep, scan: scan}, f) },
								func(f func()) { withGDNKernels(gdnKernelPair{prep: gdnKernelsNew.prep, scan: wide}, f) }, 0)
						})
					}
				})
			}
		}
	})
}

// TestGDNWideScan: COHORT_CUDA_GDN_STATE_COLS names the wide twin of either split
// state pass and nothing else, and each entry's launch takes its columns.
func TestGDNWideScan(t *testing.T) {
	names := map[string]bool{}
	for _, n := range kernelNames {
		names[n] = true
	}
	for _, tc := range []struct {
		scan string
		cols int
		want string
	}{
		{gdnScanSplit, 64, "gdn_chunk_state_w64_mma_f32"},
		{gdnScanSplitTF32, 32, "gdn_chunk_state_w32_tf32_f32"},
		{gdnScanSplitTF32, 0, gdnScanSplitTF32},
		{gdnKernelsMMAScan.scan, 64, gdnKernelsMMAScan.scan},
	} {
		got := gdnWideScan(tc.scan, tc.cols)
		if got != tc.want || !names[got] || !names[gdnStateKernel(got, true)] {
			t.Errorf("gdnWideScan(%s, %d) = %s, want %s (a listed kernel, with its bf16 twin)", tc.scan, tc.cols, got, tc.want)
		}
		if cols, _ := gdnStateLaunch(got); gdnSplitScan(got) && cols != max(tc.cols, gdnChunkCols) {
			t.Errorf("gdnStateLaunch(%s) columns %d, want %d", got, cols, max(tc.cols, gdnChunkCols))
		}
	}
	if _, smem := gdnStateLaunch("gdn_chunk_state_w64_tf32_f32"); smem != 186888 || smem > 227<<10 {
		t.Errorf("the 64-column pass's shared memory %d bytes, want 186888 (gdn_wide<64>::SMEM floats)", smem)
	}
	for v, want := range map[string]int{"": 32, "32": 32, "64": 64, "16": 0, "0": 32, "wide": 32} {
		if got := gdnStateColsFromEnv(v); got != want {
			t.Errorf("COHORT_CUDA_GDN_STATE_COLS=%q: %d, want %d", v, got, want)
		}
	}
}

// withGDNKernels runs f with the chunked rule's entries set to k.
func withGDNKernels(k gdnKernelPair, f func()) {
	old := gdnKernels
	gdnKernels = k
	defer func() { gdnKernels = old }()
	f()
}

// withChunkMin runs f with gdnChunkMin set to v.
func withChunkMin(v int, f func()) {
	old := gdnChunkMin
	gdnChunkMin = v
	defer func() { gdnChunkMin = old }()
	f()
}

// TestGDNChunkedMatchesCPU runs batches of pieces around the chunk length
// (63, 64, 65, 128, 130), odd lengths (17, 33, 99, 201) and decode rows and
// short pieces (1, 2, 5, on the recurrent kernel; steps 2 and 4, whose
// unchunked pieces are all decode rows, on the decode-row kernels as a
// mixed step's: restDecode) through GatedDeltaRule of both backends, step after step on the same slots (so every piece continues
// from the state the previous step left), and compares the outputs and the
// full state of every slot after every step. The CPU oracle runs its
// chunked form for pieces of more than one token.
//
// Every entry pair of gdnVariants runs it (subtests new, old, the mixes)
// with the f32 state, the new and old pairs with the bf16 state (the CPU's
// state rounded as the GPU's after every step: gdn_bf16_test.go).
func TestGDNChunkedMatchesCPU(t *testing.T) {
	p := newPair(t)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		vs := gdnVariants
		if bf16 {
			vs = vs[:2]
		}
		for _, v := range vs {
			t.Run(v.name, func(t *testing.T) { withGDNKernels(v.k, func() { testGDNChunkedMatchesCPU(t, p, bf16, v.tol) }) })
		}
	})
}

func testGDNChunkedMatchesCPU(t *testing.T, p pair, bf16 bool, tol float64) {
	for _, cfg := range gdnChunkCfgs {
		t.Run(fmt.Sprintf("nk%d/nv%d/dk%d/dv%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim), func(t *testing.T) {
			gpu(t)
			const layers, slotCount, layer = 2, 6, 1
			pc := p.c.NewStatePool(layers, slotCount, cfg)
			pg := p.g.NewStatePool(layers, slotCount, cfg)
			nv := cfg.ValueHeads
			r := newRand(uint64(cfg.KeyDim*131 + cfg.ValueDim))
			alc, alg := p.up(randSlice(r, nv, 1), nv)
			dtc, dtg := p.up(randSlice(r, nv, 1), nv)
			slots := []int{3, 0, 5, 1}
			steps := [][]int{
				{63, 1, 64, 2},    // below, at the chunk length; decode; short piece
				{65, 128, 1, 130}, // one past, two chunks, two chunks and 2
				{1, 17, 99, 5},    // decode, just chunked, odd
				{33, 1, 201, 1},   // odd lengths beside decodes
				{1, 1, 1, 1},      // decodes only (recurrent kernel)
				{0, 64, 0, 70},    // empty pieces beside chunked ones
			}
			for si, lens := range steps {
				b := batchOf(lens, make([]int, len(lens)), slots, nil)
				in := randGDNInputs(r, b.Rows(), cfg)
				oc := gdnRun(p.c, in, alc, dtc, pc, layer, b, cfg)
				og := gdnRun(p.g, in, alg, dtg, pg, layer, b, cfg)
				checkClose(t, fmt.Sprintf("step %d %v output", si, lens), og, oc, gdnTol(tol, bf16))
				for _, s := range slots {
					checkClose(t, fmt.Sprintf("step %d slot %d state", si, s),
						pg.(*StatePool).Snapshot(s), pc.(*cpu.StatePool).Snapshot(s), gdnTol(tol, bf16))
				}
				gdnRoundRef(pc.(*cpu.StatePool), slots, cfg, bf16)
			}
		})
	}
}

// TestGDNChunkedMatchesRecurrent compares the GPU's two forms directly: the
// same batches run once with the chunked kernels (gdnChunkMin 0, so even a
// two-token piece is chunked) and once with the recurrent kernel alone, on
// two state pools that start equal and nonzero.
// The default and the previous entry pairs both run it, with either state
// (bf16: both pools round once a step, at the same points, from states
// that start bf16-exact and equal).
func TestGDNChunkedMatchesRecurrent(t *testing.T) {
	be := gpu(t)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, v := range gdnVariants[:2] {
			t.Run(v.name, func(t *testing.T) { withGDNKernels(v.k, func() { testGDNChunkedMatchesRecurrent(t, be, bf16) }) })
		}
	})
}

func testGDNChunkedMatchesRecurrent(t *testing.T, be *Backend, bf16 bool) {
	for _, cfg := range gdnChunkCfgs {
		t.Run(fmt.Sprintf("nk%d/nv%d/dk%d/dv%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim), func(t *testing.T) {
			gpu(t)
			gdnTwoForms(t, be, cfg, uint64(cfg.KeyDim*17+cfg.ValueDim), 4, []int{2, 0, 3}, [][]int{{2, 1, 130}, {64, 65, 3}, {1, 257, 63}},
				func(f func()) { withChunkMin(0, f) }, func(f func()) { withChunkMin(math.MaxInt32, f) }, gdnTol(1e-4, bf16))
		})
	}
}

// gdnTwoForms runs steps (each a batch of pieces on slots) through
// GatedDeltaRule on be twice, inside formA and inside formB, on two state
// pools of slotCount slots (one layer) that start equal and nonzero, and
// compares the two forms' outputs and the slots' states after every step
// within tol. seed draws the states, the gate parameters and the inputs.
func gdnTwoForms(t *testing.T, be *Backend, cfg kernels.GDNConfig, seed uint64, slotCount int, slots []int, steps [][]int,
	formA, formB func(func()), tol float64) {
	t.Helper()
	const layers, layer = 1, 0
	pa := be.NewStatePool(layers, slotCount, cfg).(*StatePool)
	pb := be.NewStatePool(layers, slotCount, cfg).(*StatePool)
	nv := cfg.ValueHeads
	r := newRand(seed)
	for s := range slotCount {
		init := randSlice(r, len(pa.Snapshot(s)), 0.5)
		pa.SetSlot(s, init)
		pb.SetSlot(s, init)
	}
	aLog, dtBias := be.Upload(randSlice(r, nv, 1), nv), be.Upload(randSlice(r, nv, 1), nv)
	defer be.Free(aLog, dtBias)
	for si, lens := range steps {
		b := batchOf(lens, make([]int, len(lens)), slots, nil)
		in := randGDNInputs(r, b.Rows(), cfg)
		var oa, ob []float32
		formA(func() { oa = gdnRun(be, in, aLog, dtBias, pa, layer, b, cfg) })
		formB(func() { ob = gdnRun(be, in, aLog, dtBias, pb, layer, b, cfg) })
		checkClose(t, fmt.Sprintf("step %d %v output", si, lens), oa, ob, tol)
		for _, s := range slots {
			checkClose(t, fmt.Sprintf("step %d slot %d state", si, s), pa.Snapshot(s), pb.Snapshot(s), tol)
		}
	}
}

// TestGDNChunkedPrefillThenDecode prefills one prompt in two engine steps
// (100 then 70 tokens, both chunked) and decodes three tokens, and compares
// every output and the final state with the CPU oracle fed the same 173
// tokens one at a time (its exact recurrent form): the state carried between
// steps through the slot, chunked to chunked and chunked to recurrent.
//
// With the bf16 state the oracle stays f32 (fed token by token, it cannot
// round where the GPU's pieces end): the GPU rounds its state once a piece
// (5 times), and the tolerance is the accumulation bound of
// gdn_bf16_test.go, the deviation logged.
func TestGDNChunkedPrefillThenDecode(t *testing.T) {
	forGDNStates(t, testGDNChunkedPrefillThenDecode)
}

func testGDNChunkedPrefillThenDecode(t *testing.T, bf16 bool) {
	p := newPair(t)
	cfg := kernels.GDNConfig{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128, ConvKernel: 4}
	const layers, slotCount, layer, slot = 3, 2, 2, 1
	pc := p.c.NewStatePool(layers, slotCount, cfg)
	pg := p.g.NewStatePool(layers, slotCount, cfg)
	nv, C := cfg.ValueHeads, cfg.ConvDim()
	r := newRand(173)
	alc, alg := p.up(randSlice(r, nv, 1), nv)
	dtc, dtg := p.up(randSlice(r, nv, 1), nv)
	pieces := []int{100, 70, 1, 1, 1}
	total := 0
	for _, n := range pieces {
		total += n
	}
	all := randGDNInputs(r, total, cfg)
	var want, got []float32
	for tok := range total {
		b := batchOf([]int{1}, []int{tok}, []int{slot}, nil)
		in := gdnInputs{mixed: all.mixed[tok*C : (tok+1)*C], beta: all.beta[tok*nv : (tok+1)*nv], a: all.a[tok*nv : (tok+1)*nv], T: 1}
		want = append(want, gdnRun(p.c, in, alc, dtc, pc, layer, b, cfg)...)
	}
	off := 0
	for _, n := range pieces {
		b := batchOf([]int{n}, []int{off}, []int{slot}, nil)
		in := gdnInputs{mixed: all.mixed[off*C : (off+n)*C], beta: all.beta[off*nv : (off+n)*nv], a: all.a[off*nv : (off+n)*nv], T: n}
		got = append(got, gdnRun(p.g, in, alg, dtg, pg, layer, b, cfg)...)
		off += n
	}
	tol := 1e-4
	if bf16 {
		tol += float64(len(pieces)) * gdnBF16Step
	}
	checkClose(t, "outputs", got, want, tol)
	checkClose(t, "final state", pg.(*StatePool).Snapshot(slot), pc.(*cpu.StatePool).Snapshot(slot), tol)
}

// TestGDNSplitScanMatchesMMAScan runs the same steps through the split scan
// (the state pass, then the outputs of every chunk) and the one-pass
// tensor-core scan, on two state pools that start equal and nonzero: both
// compute the same products in the same order, so outputs and states must
// agree bit for bit, with either state storage, for the 4b heads and for
// dims that are not multiples of the tiles, at chunk boundaries and odd
// lengths, and with state carried across steps.
func TestGDNSplitScanMatchesMMAScan(t *testing.T) {
	be := gpu(t)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, cfg := range []kernels.GDNConfig{gdn4b, gdnChunkCfgs[0], gdnChunkCfgs[3]} {
			t.Run(fmt.Sprintf("nk%d/nv%d/dk%d/dv%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim), func(t *testing.T) {
				gpu(t)
				gdnTwoForms(t, be, cfg, uint64(cfg.KeyDim*7+cfg.ValueDim), 3, []int{2, 0, 1}, [][]int{{300, 1, 64}, {17, 129, 1}, {1, 65, 257}},
					func(f func()) { withGDNKernels(gdnKernelsNew, f) }, func(f func()) { withGDNKernels(gdnKernelsMMAScan, f) }, 0)
			})
		}
	})
}

// gdn4b is the GDN head shape of the 4b model on one rank.
var gdn4b = kernels.GDNConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128, ConvKernel: 4}

// TestGDNChunkedLarge runs a 1,024-token prefill with the 4b model's head
// counts beside a decode row, from a nonzero state, against the CPU oracle,
// and logs the GPU op's time (the test backend synchronizes after every
// launch; BenchmarkGDNPrefill times it without).
// The default and the previous entry pairs both run it.
func TestGDNChunkedLarge(t *testing.T) {
	p := newPair(t)
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, v := range gdnVariants[:2] {
			t.Run(v.name, func(t *testing.T) { withGDNKernels(v.k, func() { testGDNChunkedLarge(t, p, bf16) }) })
		}
	})
}

func testGDNChunkedLarge(t *testing.T, p pair, bf16 bool) {
	gpu(t)
	cfg := gdn4b
	const layers, slotCount, layer = 1, 2, 0
	pc := p.c.NewStatePool(layers, slotCount, cfg)
	pg := p.g.NewStatePool(layers, slotCount, cfg)
	nv := cfg.ValueHeads
	r := newRand(1024)
	alc, alg := p.up(randSlice(r, nv, 1), nv)
	dtc, dtg := p.up(randSlice(r, nv, 1), nv)
	slots := []int{1, 0}
	for si, lens := range [][]int{{7, 1}, {1024, 1}} {
		b := batchOf(lens, make([]int, len(lens)), slots, nil)
		in := randGDNInputs(r, b.Rows(), cfg)
		start := time.Now()
		oc := gdnRun(p.c, in, alc, dtc, pc, layer, b, cfg)
		cpuTime := time.Since(start)
		m := p.g.Upload(in.mixed, in.T, cfg.ConvDim())
		bt := p.g.Upload(in.beta, in.T, nv)
		a := p.g.Upload(in.a, in.T, nv)
		if err := p.g.Synchronize(); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		out := p.g.GatedDeltaRule(m, bt, a, alg, dtg, pg, layer, b, cfg)
		if err := p.g.Synchronize(); err != nil {
			t.Fatal(err)
		}
		gpuTime := time.Since(start)
		t.Logf("step %d %v: GPU %.3f ms, CPU %.1f ms", si, lens, gpuTime.Seconds()*1e3, cpuTime.Seconds()*1e3)
		checkClose(t, fmt.Sprintf("step %d output", si), p.g.Download(out), oc, gdnTol(1e-4, bf16))
		for _, s := range slots {
			checkClose(t, fmt.Sprintf("step %d slot %d state", si, s),
				pg.(*StatePool).Snapshot(s), pc.(*cpu.StatePool).Snapshot(s), gdnTol(1e-4, bf16))
		}
		gdnRoundRef(pc.(*cpu.StatePool), slots, cfg, bf16)
		p.g.Free(m, bt, a)
	}
}

// BenchmarkGDNPrefill times one GatedDeltaRule op (one layer) for a single
// prefill sequence of 1,024, 2,048 and 8,192 tokens with the 4b model's GDN heads
// (16 key heads, 32 value heads, dk = dv = 128): the chunked form with the
// new (default) entries, the previous ones and the other mixes (gdnVariants),
// and the recurrent form, in ms per layer, with old/new; mmaprep/new is the
// op with gdn_chunk_prep_mma_f32 (COHORT_CUDA_GDN_PREP=old) against the
// default gdn_chunk_prep_pipe_f32, the rest equal (BenchmarkGDNPrep times
// the two preps alone).
func BenchmarkGDNPrefill(b *testing.B) {
	g := gdnBench(b)
	cfg := gdn4b
	nv := cfg.ValueHeads
	for _, T := range []int{1024, 2048, 8192} {
		b.Run(fmt.Sprintf("T%d", T), func(b *testing.B) {
			gpu(b) // sub-benchmarks run on their own goroutines: lock and bind
			if err := g.Bind(); err != nil {
				b.Fatal(err)
			}
			r := newRand(uint64(T))
			pool := g.NewStatePool(1, 1, cfg)
			in := randGDNInputs(r, T, cfg)
			m := g.Upload(in.mixed, T, cfg.ConvDim())
			bt := g.Upload(in.beta, T, nv)
			a := g.Upload(in.a, T, nv)
			aLog, dtBias := g.Upload(randSlice(r, nv, 1), nv), g.Upload(randSlice(r, nv, 1), nv)
			defer g.Free(m, bt, a, aLog, dtBias)
			batch := batchOf([]int{T}, []int{0}, []int{0}, nil)
			timeOp := func(k gdnKernelPair, chunkMin, reps int) time.Duration {
				var d time.Duration
				withGDNKernels(k, func() {
					withChunkMin(chunkMin, func() {
						run := func(n int) {
							for range n {
								g.GatedDeltaRule(m, bt, a, aLog, dtBias, pool, 0, batch, cfg)
							}
							if err := g.Synchronize(); err != nil {
								b.Fatal(err)
							}
							g.ResetScratch()
						}
						run(1)
						start := time.Now()
						for range b.N {
							run(reps)
						}
						d = time.Since(start) / time.Duration(b.N*reps)
					})
				})
				return d
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
			var times []time.Duration
			for _, v := range gdnVariants {
				times = append(times, timeOp(v.k, gdnChunkMin, 20))
			}
			recurrent := timeOp(gdnKernels, math.MaxInt32, max(1, 8192/T))
			newT, oldT := times[0], times[1]
			b.ReportMetric(ms(newT), "new_ms/layer")
			b.ReportMetric(ms(oldT), "old_ms/layer")
			b.ReportMetric(oldT.Seconds()/newT.Seconds(), "old/new")
			b.ReportMetric(times[2].Seconds()/newT.Seconds(), "mmascan/new")
			b.ReportMetric(ms(times[6]), "mmaprep_ms/layer")
			b.ReportMetric(times[6].Seconds()/newT.Seconds(), "mmaprep/new")
			b.ReportMetric(times[7].Seconds()/newT.Seconds(), "tf32state/new")
			b.ReportMetric(times[8].Seconds()/newT.Seconds(), "tf32out/new")
			b.ReportMetric(times[9].Seconds()/newT.Seconds(), "tf32all/new")
			b.ReportMetric(times[10].Seconds()/newT.Seconds(), "w32exact/new")
			b.ReportMetric(times[11].Seconds()/newT.Seconds(), "w64exact/new")
			b.ReportMetric(ms(times[12]), "w64tf32all_ms/layer")
			b.ReportMetric(times[12].Seconds()/times[9].Seconds(), "w64tf32all/tf32all")
			b.ReportMetric(ms(times[13]), "w32tf32all_ms/layer")
			b.ReportMetric(times[13].Seconds()/times[9].Seconds(), "w32tf32all/tf32all")
			b.ReportMetric(ms(recurrent), "recurrent_ms/layer")
			b.Logf("T=%d: chunked new %.3f ms/layer, old %.3f ms/layer (old/new %.2fx); recurrent %.3f ms/layer (recurrent/new %.1fx)",
				T, ms(newT), ms(oldT), oldT.Seconds()/newT.Seconds(), ms(recurrent), recurrent.Seconds()/newT.Seconds())
			for i, v := range gdnVariants[2:] {
				b.Logf("T=%d: chunked %s (%s, %s) %.3f ms/layer", T, v.name, v.k.prep, v.k.scan, ms(times[2+i]))
			}
		})
	}
}

// gdnPrepCase is one set of inputs of the chunk preps on the device: the
// op's prepared inputs (l2-normalized qh and kh, mixed for v, decays g < 0
// and write strengths beta in (0, 1)), the chunk table of the sequences
// (as gatedDeltaChunked builds it) and its size.
type gdnPrepCase struct {
	cfg                    kernels.GDNConfig
	T, nChunks             int
	qh, kh, mixed, g, beta kernels.Tensor
	chunkRow, chunkLen     devptr
}

func newGDNPrepCase(be *Backend, r *rand.Rand, cfg kernels.GDNConfig, lens []int) *gdnPrepCase {
	nk, nv, dk := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim
	var rows, clen []int32
	T := 0
	for _, n := range lens {
		for t0 := 0; t0 < n; t0 += gdnChunkLen {
			rows, clen = append(rows, int32(T+t0)), append(clen, int32(min(gdnChunkLen, n-t0)))
		}
		T += n
	}
	norm := func(x []float32, scale float32) []float32 {
		for h := 0; h < len(x); h += dk {
			var ss float64
			for _, v := range x[h : h+dk] {
				ss += float64(v) * float64(v)
			}
			inv := scale / float32(math.Sqrt(ss+1e-6))
			for i := range x[h : h+dk] {
				x[h+i] *= inv
			}
		}
		return x
	}
	g, beta := randSlice(r, T*nv, 1), randSlice(r, T*nv, 1)
	for i := range g {
		g[i] = -0.4 * float32(math.Abs(float64(g[i])))
		beta[i] = 1 / (1 + float32(math.Exp(-3*float64(beta[i]))))
	}
	return &gdnPrepCase{cfg: cfg, T: T, nChunks: len(rows),
		qh: be.Upload(norm(randSlice(r, T*nk*dk, 1), float32(1/math.Sqrt(float64(dk)))), T, nk*dk),
		kh: be.Upload(norm(randSlice(r, T*nk*dk, 1), 1), T, nk*dk), mixed: be.Upload(randSlice(r, T*cfg.ConvDim(), 1), T, cfg.ConvDim()),
		g: be.Upload(g, T, nv), beta: be.Upload(beta, T, nv),
		chunkRow: be.uploadInts("gdnPrepCase", rows, nil), chunkLen: be.uploadInts("gdnPrepCase", clen, nil)}
}

func (pc *gdnPrepCase) free(be *Backend) { be.Free(pc.qh, pc.kh, pc.mixed, pc.g, pc.beta) }

// outputs returns W, U, G and P tensors of the case's sizes, every value
// set to fill (rows a prep does not write keep it).
func (pc *gdnPrepCase) outputs(be *Backend, fill float32) [4]kernels.Tensor {
	nv, dk, dv := pc.cfg.ValueHeads, pc.cfg.KeyDim, pc.cfg.ValueDim
	var out [4]kernels.Tensor
	for i, n := range []int{pc.T * nv * dk, pc.T * nv * dv, pc.T * nv, pc.nChunks * nv * gdnChunkLen * gdnChunkLen} {
		v := make([]float32, n)
		for j := range v {
			v[j] = fill
		}
		out[i] = be.Upload(v, n)
	}
	return out
}

// launch runs prep entry name on the case into out.
func (pc *gdnPrepCase) launch(be *Backend, name string, out [4]kernels.Tensor) {
	const op = "gdnPrepCase"
	cfg := pc.cfg
	smem := 0
	if name == gdnPrepPipe {
		smem = gdnPrepPipeSmemBytes
		be.allowSmem(op, name, smem)
	}
	ptr := func(t kernels.Tensor) devptr { return be.tensor(op, t).ptr }
	be.launch(op, name, [3]int{pc.nChunks, cfg.ValueHeads, 1}, [3]int{gdnChunkThreads, 1, 1}, smem,
		ptr(out[0]), ptr(out[1]), ptr(out[2]), ptr(out[3]), ptr(pc.qh), ptr(pc.kh), ptr(pc.mixed), ptr(pc.g), ptr(pc.beta),
		pc.chunkRow, pc.chunkLen, cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim, cfg.ConvDim())
}

// TestGDNPrepPipeMatchesMMA runs gdn_chunk_prep_pipe_f32 (the default prep)
// and gdn_chunk_prep_mma_f32 (COHORT_CUDA_GDN_PREP=old) on the same inputs
// and wants W, U, gamma and P equal bit for bit (the pipe computes the same
// products, sums and roundings in the same order): the 4b heads and the
// chunked-rule test shapes (key dims of one to four slices, dk + dv not a
// multiple of the 64-column slices, GVA and not), sequences of full and
// partial chunks (1, 17, 63, 64, 65, 300 tokens). The outputs start filled
// with NaN so that an entry only one kernel writes shows. It also checks
// that the whole op (with the split scan) gives the same bits with either.
func TestGDNPrepPipeMatchesMMA(t *testing.T) {
	be := gpu(t)
	for _, cfg := range append([]kernels.GDNConfig{gdn4b}, gdnChunkCfgs...) {
		t.Run(fmt.Sprintf("nk%d/nv%d/dk%d/dv%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim), func(t *testing.T) {
			be := gpu(t)
			r := newRand(uint64(cfg.KeyDim*977 + cfg.ValueDim*31 + cfg.ValueHeads))
			pc := newGDNPrepCase(be, r, cfg, []int{300, 1, 64, 17, 65, 63})
			defer pc.free(be)
			nan := float32(math.NaN())
			a, b := pc.outputs(be, nan), pc.outputs(be, nan)
			defer be.Free(a[:]...)
			defer be.Free(b[:]...)
			pc.launch(be, gdnPrepMMA, a)
			pc.launch(be, gdnPrepPipe, b)
			for i, name := range []string{"W", "U", "G", "P"} {
				bitEqual(t, name, be.Download(b[i]), be.Download(a[i]))
			}
		})
	}
	forGDNStates(t, func(t *testing.T, bf16 bool) {
		for _, cfg := range []kernels.GDNConfig{gdn4b, gdnChunkCfgs[0], gdnChunkCfgs[3]} {
			t.Run(fmt.Sprintf("op/nk%d/nv%d/dk%d/dv%d", cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim), func(t *testing.T) {
				gpu(t)
				gdnTwoForms(t, be, cfg, uint64(cfg.KeyDim*5+cfg.ValueDim), 3, []int{2, 0, 1}, [][]int{{300, 1, 64}, {17, 129, 1}, {1, 65, 257}},
					func(f func()) { withGDNKernels(gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanSplit}, f) },
					func(f func()) { withGDNKernels(gdnKernelPair{prep: gdnPrepMMA, scan: gdnScanSplit}, f) }, 0)
			})
		}
	})
}

// BenchmarkGDNPrep times the chunk preps alone on the 4b heads (16 key
// heads, 32 value heads, dk = dv = 128) for one prefill sequence of 1,024,
// 2,048 and 8,192 tokens (512, 1,024 and 4,096 blocks): sub-benchmarks
// T<n>/mma (gdn_chunk_prep_mma_f32, COHORT_CUDA_GDN_PREP=old) and
// T<n>/pipe (gdn_chunk_prep_pipe_f32, the default), in µs a launch.
func BenchmarkGDNPrep(b *testing.B) {
	g := gdnBench(b)
	for _, T := range []int{1024, 2048, 8192} {
		for _, name := range []string{gdnPrepMMA, gdnPrepPipe} {
			short := map[string]string{gdnPrepMMA: "mma", gdnPrepPipe: "pipe"}[name]
			b.Run(fmt.Sprintf("T%d/%s", T, short), func(b *testing.B) {
				gpu(b) // sub-benchmarks run on their own goroutines: lock and bind
				if err := g.Bind(); err != nil {
					b.Fatal(err)
				}
				pc := newGDNPrepCase(g, newRand(uint64(T)), gdn4b, []int{T})
				defer pc.free(g)
				out := pc.outputs(g, 0)
				defer g.Free(out[:]...)
				const reps = 50
				pc.launch(g, name, out)
				if err := g.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					for range reps {
						pc.launch(g, name, out)
					}
					if err := g.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
				d := time.Since(start) / time.Duration(b.N*reps)
				b.ReportMetric(float64(d.Nanoseconds())/1e3, "us/launch")
				g.ResetScratch()
			})
		}
	}
}

// TestGDNChunkByWeights: the default entries (gdnScanAuto) take TF32
// products everywhere with bf16 weights and 3xTF32 in the exact mode; an
// explicit choice holds whatever the weights.
func TestGDNChunkByWeights(t *testing.T) {
	exact := gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanSplit, out: gdnOutKernel}
	exactAuto := gdnKernelPair{prep: gdnPrepPipe, scan: gdnWideScan(gdnScanSplit, gdnStateWide), out: gdnOutKernel}
	tf32 := gdnKernelPair{prep: gdnPrepPipeTF32, scan: gdnWideScan(gdnScanSplitTF32, gdnStateWide), out: gdnOutTF32}
	for _, tc := range []struct {
		set     gdnKernelPair
		weights string
		want    gdnKernelPair
	}{
		{gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanAuto}, "bf16", tf32},
		{gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanAuto}, "f32", exactAuto},
		{gdnKernelPair{prep: gdnPrepMMA, scan: gdnScanAuto}, "bf16", gdnKernelPair{prep: gdnPrepMMA, scan: tf32.scan, out: gdnOutTF32}},
		{gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanSplit}, "bf16", exact},
		{gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanSplitTF32}, "f32", gdnKernelPair{prep: gdnPrepPipe, scan: gdnScanSplitTF32, out: gdnOutKernel}},
		{gdnKernelsMMAScan, "bf16", gdnKernelPair{prep: gdnKernelsMMAScan.prep, scan: gdnKernelsMMAScan.scan, out: gdnOutKernel}},
	} {
		withGDNKernels(tc.set, func() {
			if got := (&Backend{weights: tc.weights}).gdnChunk(); got != tc.want {
				t.Errorf("%+v, %s weights: got %+v, want %+v", tc.set, tc.weights, got, tc.want)
			}
		})
	}
	if k := gdnKernelsFromEnv(""); k.scan != gdnScanAuto {
		t.Errorf("the default pair's scan is %s, want %s", k.scan, gdnScanAuto)
	}
	for v, want := range map[string]gdnKernelPair{
		"exact":   {prep: gdnPrepDefault, scan: gdnScanSplit},
		"tf32":    {prep: gdnPrepDefault, scan: gdnScanSplitTF32},
		"tf32out": {prep: gdnPrepDefault, scan: gdnScanSplitTF32, out: gdnOutTF32},
		"tf32all": {prep: gdnPrepPipeTF32, scan: gdnScanSplitTF32, out: gdnOutTF32},
	} {
		if k := gdnKernelsFromEnv(v); k != want {
			t.Errorf("COHORT_CUDA_GDN_CHUNK=%s: %+v, want %+v", v, k, want)
		}
	}
}
