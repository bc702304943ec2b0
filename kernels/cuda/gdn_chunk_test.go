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
// prep from one of the new scan) and the CUDA-core inverse prep.
var gdnVariants = []struct {
	name string
	k    gdnKernelPair
}{
	{"new", gdnKernelsNew},
	{"old", gdnKernelsOld},
	{"mmascan", gdnKernelsMMAScan},
	{"newprep+oldscan", gdnKernelPair{prep: gdnKernelsNew.prep, scan: gdnKernelsOld.scan}},
	{"oldprep+newscan", gdnKernelPair{prep: gdnKernelsOld.prep, scan: gdnKernelsNew.scan}},
	{"invprep+newscan", gdnKernelPair{prep: gdnPrepInv, scan: gdnKernelsNew.scan}},
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
// short pieces (1, 2, 5, on the recurrent kernel) through GatedDeltaRule of
// both backends, step after step on the same slots (so every piece continues
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
			t.Run(v.name, func(t *testing.T) { withGDNKernels(v.k, func() { testGDNChunkedMatchesCPU(t, p, bf16) }) })
		}
	})
}

func testGDNChunkedMatchesCPU(t *testing.T, p pair, bf16 bool) {
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
				checkClose(t, fmt.Sprintf("step %d %v output", si, lens), og, oc, gdnTol(1e-4, bf16))
				for _, s := range slots {
					checkClose(t, fmt.Sprintf("step %d slot %d state", si, s),
						pg.(*StatePool).Snapshot(s), pc.(*cpu.StatePool).Snapshot(s), gdnTol(1e-4, bf16))
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

// gdnBenchBackend is a backend for BenchmarkGDNPrefill that, unlike the
// test backend, does not synchronize after every launch.
var gdnBenchBackend *Backend

// BenchmarkGDNPrefill times one GatedDeltaRule op (one layer) for a single
// prefill sequence of 1,024 and 8,192 tokens with the 4b model's GDN heads
// (16 key heads, 32 value heads, dk = dv = 128): the chunked form with the
// new (default) entries, the previous ones and the other mixes (gdnVariants),
// and the recurrent form, in ms per layer, with old/new.
func BenchmarkGDNPrefill(b *testing.B) {
	gpu(b)
	if gdnBenchBackend == nil {
		be, err := New(Options{Weights: "f32"})
		if err != nil {
			b.Fatal(err)
		}
		gdnBenchBackend = be
	}
	g := gdnBenchBackend
	if err := g.Bind(); err != nil {
		b.Fatal(err)
	}
	cfg := gdn4b
	nv := cfg.ValueHeads
	for _, T := range []int{1024, 8192} {
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
			b.ReportMetric(ms(recurrent), "recurrent_ms/layer")
			b.Logf("T=%d: chunked new %.3f ms/layer, old %.3f ms/layer (old/new %.2fx); recurrent %.3f ms/layer (recurrent/new %.1fx)",
				T, ms(newT), ms(oldT), oldT.Seconds()/newT.Seconds(), ms(recurrent), recurrent.Seconds()/newT.Seconds())
			for i, v := range gdnVariants[2:] {
				b.Logf("T=%d: chunked %s (%s, %s) %.3f ms/layer", T, v.name, v.k.prep, v.k.scan, ms(times[2+i]))
			}
		})
	}
}
