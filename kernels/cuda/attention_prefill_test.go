//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cohort/kernels"
)

// flashTol is the tolerance of the tensor-core prefill attention against
// the float32 CPU oracle: q, k, v and the softmax weights are rounded to
// bf16 (8 significant bits) before their products, which are summed in
// float32.
const flashTol = 1e-2

// withFlash turns the tensor-core prefill attention on for the test, for
// sequences of at least minRows rows, and restores the settings after it.
func withFlash(t testing.TB, minRows int) {
	t.Helper()
	on, rows, f32 := flashAttention, flashMinRows, flashF32Weights
	flashAttention, flashMinRows, flashF32Weights = true, minRows, true
	t.Cleanup(func() { flashAttention, flashMinRows, flashF32Weights = on, rows, f32 })
}

// flashConfigs are the head shapes of the differential tests: GQA ratios
// 1, 2 and 4 at head dims 64, 128 and 256, a ratio of 3 (tiles of 64
// M-rows then split a row's heads), and the 4b model's heads.
var flashConfigs = []kernels.AttnConfig{
	{Heads: 2, KVHeads: 2, HeadDim: 64},
	{Heads: 4, KVHeads: 2, HeadDim: 64},
	{Heads: 8, KVHeads: 2, HeadDim: 64},
	{Heads: 2, KVHeads: 2, HeadDim: 128},
	{Heads: 4, KVHeads: 2, HeadDim: 128},
	{Heads: 8, KVHeads: 2, HeadDim: 128},
	{Heads: 6, KVHeads: 2, HeadDim: 128},
	{Heads: 3, KVHeads: 3, HeadDim: 256},
	{Heads: 4, KVHeads: 2, HeadDim: 256},
	{Heads: 16, KVHeads: 4, HeadDim: 256},
}

func flashName(cfg kernels.AttnConfig) string {
	return fmt.Sprintf("H%d/KV%d/hd%d", cfg.Heads, cfg.KVHeads, cfg.HeadDim)
}

// attnCaches holds the same paged cache on both backends and the page list
// of every sequence (shuffled, so no sequence's pages are contiguous).
type attnCaches struct {
	c, g  kernels.KVCache
	pages [][]int32
}

const flashPageSize = 16

// newAttnCaches makes caches of one layer more than layer for nSeq
// sequences of up to maxLen positions each.
func newAttnCaches(p pair, cfg kernels.AttnConfig, layer, nSeq, maxLen int, seed uint64) attnCaches {
	per := (maxLen + flashPageSize - 1) / flashPageSize
	n := nSeq * per
	perm := newRand(seed).Perm(n)
	ac := attnCaches{
		c: p.c.NewKVCache(layer+1, n, flashPageSize, cfg.KVHeads, cfg.HeadDim),
		g: p.g.NewKVCache(layer+1, n, flashPageSize, cfg.KVHeads, cfg.HeadDim),
	}
	for s := range nSeq {
		pg := make([]int32, per)
		for i := range pg {
			pg[i] = int32(perm[s*per+i])
		}
		ac.pages = append(ac.pages, pg)
	}
	return ac
}

// attnStep is one step of a differential test: the sequences (indices
// into the caches' page lists) in batch order and their new rows.
type attnStep struct{ seqs, lens []int }

// withSplit sets flashSplit and flashSplitForce for the test and restores
// them after it.
func withSplit(t testing.TB, on bool, force int) {
	t.Helper()
	s, f := flashSplit, flashSplitForce
	flashSplit, flashSplitForce = on, force
	t.Cleanup(func() { flashSplit, flashSplitForce = s, f })
}

// runAttnSteps runs the steps through both backends (layer 1 of the
// caches), carrying each sequence's cached count from step to step, and
// compares every output within tol. before, if given, runs before each
// step with its index.
func runAttnSteps(t *testing.T, p pair, cfg kernels.AttnConfig, ac attnCaches, steps []attnStep, tol float64, seed uint64, before ...func(step int)) {
	t.Helper()
	const layer = 1
	cached := make([]int, len(ac.pages))
	r := newRand(seed)
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	for si, st := range steps {
		for _, f := range before {
			f(si)
		}
		var pg [][]int32
		var lens, cs, slots []int
		for i, s := range st.seqs {
			lens, cs, slots = append(lens, st.lens[i]), append(cs, cached[s]), append(slots, s)
			pg = append(pg, ac.pages[s])
		}
		b := batchOf(lens, cs, slots, pg)
		T := b.Rows()
		qc, qg := p.up(randSlice(r, T*qw, 1), T, qw)
		kc, kg := p.up(randSlice(r, T*kw, 1), T, kw)
		vc, vg := p.up(randSlice(r, T*kw, 1), T, kw)
		gc, gg := p.up(randSlice(r, T*qw, 2), T, qw)
		want := p.c.Download(p.c.Attention(qc, kc, vc, gc, ac.c, layer, b, cfg))
		got := p.g.Download(p.g.Attention(qg, kg, vg, gg, ac.g, layer, b, cfg))
		checkClose(t, fmt.Sprintf("step %d (lens %v, cached %v)", si, lens, cs), got, want, attnTol(tol))
		for i, s := range st.seqs {
			cached[s] += st.lens[i]
		}
		p.g.Free(qg, kg, vg, gg)
		p.g.ResetScratch()
	}
}

// TestAttentionPrefillSingle: one sequence of 1 to 300 rows (every length
// on the tensor-core kernel, tile edges at 63/64/65 and 128/130 M-rows
// among them) from an empty cache, for every head shape.
func TestAttentionPrefillSingle(t *testing.T) {
	p := newPair(t)
	withFlash(t, 1)
	lens := []int{1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 130, 200, 255, 256, 300}
	for _, cfg := range flashConfigs {
		t.Run(flashName(cfg), func(t *testing.T) {
			gpu(t)
			ac := newAttnCaches(p, cfg, 1, 1, 300, uint64(cfg.HeadDim))
			for _, n := range lens {
				// A fresh sequence each time: cached is 0 at every step.
				runAttnSteps(t, p, cfg, ac, []attnStep{{seqs: []int{0}, lens: []int{n}}}, flashTol, uint64(n))
			}
		})
	}
}

// TestAttentionPrefillChunks: sequences prefilled in chunks, each chunk's
// rows attending to the earlier chunks' pages (Cached > 0), with chunks
// below flashMinRows (attention_f32) and decode rows in between.
func TestAttentionPrefillChunks(t *testing.T) {
	p := newPair(t)
	withFlash(t, 16)
	for _, cfg := range flashConfigs {
		t.Run(flashName(cfg), func(t *testing.T) {
			gpu(t)
			ac := newAttnCaches(p, cfg, 1, 2, 600, uint64(cfg.Heads))
			steps := []attnStep{
				{[]int{0}, []int{37}},
				{[]int{0}, []int{64}},  // starts mid-page, ends mid-page
				{[]int{0}, []int{1}},   // a decode row
				{[]int{0}, []int{130}}, // M-rows over several tiles
				{[]int{0, 1}, []int{16, 65}},
				{[]int{1, 0}, []int{3, 65}}, // a short chunk (attention_f32) beside a long one
				{[]int{0, 1}, []int{200, 150}},
			}
			runAttnSteps(t, p, cfg, ac, steps, flashTol, 7)
		})
	}
}

// TestAttentionPrefillMixed: one batch of several sequences of different
// lengths and cached counts, mixed with decode rows and short pieces, in
// an order where the rows the flash kernel leaves (on the decode kernels,
// flashRestDecode) come in several runs.
func TestAttentionPrefillMixed(t *testing.T) {
	p := newPair(t)
	withFlash(t, 16)
	for _, cfg := range flashConfigs {
		t.Run(flashName(cfg), func(t *testing.T) {
			gpu(t)
			ac := newAttnCaches(p, cfg, 1, 6, 400, 11)
			steps := []attnStep{
				{[]int{0, 1, 2, 3, 4, 5}, []int{20, 5, 70, 1, 40, 17}},  // prefills of several lengths
				{[]int{3, 0, 1, 2, 4, 5}, []int{1, 1, 90, 1, 1, 130}},   // decodes between chunks
				{[]int{5, 4, 3, 2, 1, 0}, []int{1, 66, 2, 33, 1, 100}},  // reordered
				{[]int{0, 1, 2, 3, 4, 5}, []int{1, 1, 1, 1, 1, 1}},      // decodes only (attention_f32)
				{[]int{2, 0, 5, 1, 3, 4}, []int{128, 1, 15, 64, 16, 1}}, // at the threshold
			}
			runAttnSteps(t, p, cfg, ac, steps, flashTol, 13)
		})
	}
}

// prefill4B is the input of one 4b-shape attention layer for a prefill of
// T rows of one sequence, on the GPU alone: q, k, v, gate and a cache of
// one layer with the sequence's (shuffled) pages.
type prefill4B struct {
	cfg           kernels.AttnConfig
	q, k, v, gate kernels.Tensor
	cache         kernels.KVCache
	bt            *kernels.Batch
}

func newPrefill4B(g *Backend, T int) prefill4B { return newPrefill4BAt(g, 0, T) }

// newPrefill4BAt is newPrefill4B for T rows after cached positions: the
// cache holds cached+T positions, the first cached of them filled (random
// k and v, through one Attention call on the GPU).
func newPrefill4BAt(g *Backend, cached, T int) prefill4B {
	cfg := kernels.AttnConfig{Heads: 16, KVHeads: 4, HeadDim: 256, RotaryDim: 64, Theta: 1e7}
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	r := newRand(uint64(T + 7919*cached))
	pages := (cached + T + flashPageSize - 1) / flashPageSize
	pg := make([]int32, pages)
	for i, j := range r.Perm(pages) {
		pg[i] = int32(j)
	}
	cache := g.NewKVCache(1, pages, flashPageSize, cfg.KVHeads, cfg.HeadDim)
	if cached > 0 {
		q, k := g.Upload(randSlice(r, cached*qw, 1), cached, qw), g.Upload(randSlice(r, cached*kw, 1), cached, kw)
		v, gate := g.Upload(randSlice(r, cached*kw, 1), cached, kw), g.Upload(randSlice(r, cached*qw, 2), cached, qw)
		g.Attention(q, k, v, gate, cache, 0, batchOf([]int{cached}, []int{0}, []int{0}, [][]int32{pg}), cfg)
		if err := g.Synchronize(); err != nil {
			panic(err)
		}
		g.Free(q, k, v, gate)
		g.ResetScratch()
	}
	return prefill4B{
		cfg: cfg,
		q:   g.Upload(randSlice(r, T*qw, 1), T, qw), k: g.Upload(randSlice(r, T*kw, 1), T, kw),
		v: g.Upload(randSlice(r, T*kw, 1), T, kw), gate: g.Upload(randSlice(r, T*qw, 2), T, qw),
		cache: cache,
		bt:    batchOf([]int{T}, []int{cached}, []int{0}, [][]int32{pg}),
	}
}

func (pf prefill4B) free(g *Backend) { g.Free(pf.q, pf.k, pf.v, pf.gate) }

// run returns the output of one Attention call, flash on or off.
func (pf prefill4B) run(g *Backend, flash bool) kernels.Tensor {
	on, f32 := flashAttention, flashF32Weights
	flashAttention, flashF32Weights = flash, true
	defer func() { flashAttention, flashF32Weights = on, f32 }()
	return g.Attention(pf.q, pf.k, pf.v, pf.gate, pf.cache, 0, pf.bt, pf.cfg)
}

// flashMode picks the prefill attention kernel of a timed or compared
// call: attention_f32, the single-pass tensor-core kernel, or the
// split-keys one where planFlashSplit takes it.
type flashMode int

const (
	modeF32 flashMode = iota
	modeSingle
	modeSplit
)

func (m flashMode) String() string {
	return [...]string{"attention_f32", "flash single pass", "flash split"}[m]
}

// runMode returns the output of one Attention call in mode m.
func (pf prefill4B) runMode(g *Backend, m flashMode) kernels.Tensor {
	s := flashSplit
	flashSplit = m == modeSplit
	defer func() { flashSplit = s }()
	return pf.run(g, m != modeF32)
}

// timeStep returns the mean wall time of one Attention call in mode m over
// reps calls inside one step (BeginStep/EndStep, no graph key: as the
// attention layers of a step, they share the uploaded metadata and the
// split's partial slots), measured on a second pass after a first that
// grows the scratch arena to its size.
func (pf prefill4B) timeStep(tb testing.TB, g *Backend, m flashMode, reps int) time.Duration {
	tb.Helper()
	syncLaunch := g.syncLaunch
	g.syncLaunch = false
	defer func() { g.syncLaunch = syncLaunch }()
	var d time.Duration
	for range 2 {
		g.BeginStep("", kernels.StepInputs{Batch: pf.bt})
		pf.runMode(g, m)
		if err := g.Synchronize(); err != nil {
			tb.Fatal(err)
		}
		start := time.Now()
		for range reps {
			pf.runMode(g, m)
		}
		if err := g.Synchronize(); err != nil {
			tb.Fatal(err)
		}
		d = time.Since(start) / time.Duration(reps)
		g.EndStep(nil)
		g.ResetScratch()
	}
	return d
}

// time returns the mean wall time of one Attention call (kv_write_f32
// included) over reps calls after a warm-up, launched without the test
// backend's per-launch synchronization.
func (pf prefill4B) time(tb testing.TB, g *Backend, flash bool, reps int) time.Duration {
	tb.Helper()
	syncLaunch := g.syncLaunch
	g.syncLaunch = false
	defer func() { g.syncLaunch = syncLaunch }()
	pf.run(g, flash)
	if err := g.Synchronize(); err != nil {
		tb.Fatal(err)
	}
	g.ResetScratch()
	start := time.Now()
	for range reps {
		pf.run(g, flash)
	}
	if err := g.Synchronize(); err != nil {
		tb.Fatal(err)
	}
	d := time.Since(start) / time.Duration(reps)
	g.ResetScratch()
	return d
}

// TestAttentionPrefill4B: the 4b model's heads (16 query, 4 KV, head dim
// 256) over one sequence of 1,024 rows (against the CPU oracle and
// attention_f32) and 8,192 rows (against attention_f32), logging the time
// of both kernels.
func TestAttentionPrefill4B(t *testing.T) {
	p := newPair(t)
	withFlash(t, 16)
	for _, T := range []int{1024, 8192} {
		t.Run(fmt.Sprint(T), func(t *testing.T) {
			g := gpu(t)
			if T > 1024 && testing.Short() {
				t.Skip("8,192 rows in -short")
			}
			pf := newPrefill4B(g, T)
			defer pf.free(g)
			ref := g.Download(pf.run(g, false))
			got := g.Download(pf.run(g, true))
			checkClose(t, "flash vs attention_f32", got, ref, attnTol(flashTol))
			if T <= 1024 {
				c := func(x kernels.Tensor) kernels.Tensor { return p.c.Upload(g.Download(x), x.Shape()...) }
				cc := p.c.NewKVCache(1, len(pf.bt.Seqs[0].Pages), flashPageSize, pf.cfg.KVHeads, pf.cfg.HeadDim)
				want := p.c.Download(p.c.Attention(c(pf.q), c(pf.k), c(pf.v), c(pf.gate), cc, 0, pf.bt, pf.cfg))
				checkClose(t, "flash vs CPU", got, want, attnTol(flashTol))
				checkClose(t, "attention_f32 vs CPU", ref, want, attnTol(1e-3))
			}
			g.ResetScratch()
			reps := max(1, 8192/T)
			tf, t32 := pf.time(t, g, true, reps), pf.time(t, g, false, reps)
			t.Logf("%d rows, one layer: flash %.3f ms, attention_f32 %.3f ms (%.1f×)",
				T, tf.Seconds()*1e3, t32.Seconds()*1e3, t32.Seconds()/tf.Seconds())
		})
	}
}

// TestAttentionPrefillSplit: short chunks (16, 100, 128 rows) after a
// cached context of 3,000 positions, beside a decode row and a chunk of a
// second sequence, on the split-keys path (flashSplitForce 0: as
// planFlashSplit chooses; 1: slices of one key tile, so that many slices
// lie after some M-rows' positions), against the CPU oracle, for every
// head shape.
func TestAttentionPrefillSplit(t *testing.T) {
	p := newPair(t)
	withFlash(t, 16)
	for _, force := range []int{0, 1} {
		for _, cfg := range flashConfigs {
			t.Run(fmt.Sprintf("force%d/%s", force, flashName(cfg)), func(t *testing.T) {
				gpu(t)
				if testing.Short() && cfg.Heads*cfg.HeadDim > 1024 {
					t.Skip("a 3,000-position context of many heads on the CPU oracle in -short")
				}
				ac := newAttnCaches(p, cfg, 1, 2, 3500, uint64(cfg.Heads+cfg.HeadDim))
				steps := []attnStep{
					{[]int{0, 1}, []int{3000, 40}}, // the context (split only where planFlashSplit takes it)
					{[]int{0}, []int{16}},
					{[]int{0}, []int{100}},
					{[]int{1, 0}, []int{1, 128}},   // a decode row (attention_f32) beside a chunk
					{[]int{0, 1}, []int{100, 130}}, // two split sequences of different contexts
				}
				runs := flashSplitRuns.Load()
				runAttnSteps(t, p, cfg, ac, steps, flashTol, 17, func(step int) {
					f := force
					if step == 0 {
						f = 0 // slices of one key tile over 3,000 fresh rows: too many slots
					}
					withSplit(t, true, f)
				})
				if flashSplitRuns.Load()-runs < int64(len(steps)-1) {
					t.Errorf("the split ran in %d of the %d chunk steps", flashSplitRuns.Load()-runs, len(steps)-1)
				}
			})
		}
	}
}

// checkSplitPlan checks a plan of planFlashSplit for tiles (flashTiles'
// list) with key tiles of bn positions: every tile either has one item
// with slot -1 over [0, its positions) or slices that cover that range in
// order, in consecutive slots, all but the last ending on a key tile edge,
// with a combine entry that names them; the slots are all used once.
func checkSplitPlan(tiles []int32, bn int, p flashSplitPlan) error {
	type sl struct{ lo, hi, slot int }
	byTile := map[[3]int32][]sl{}
	for i := 0; i < len(p.items); i += 8 {
		k := [3]int32{p.items[i], p.items[i+1], p.items[i+2]}
		byTile[k] = append(byTile[k], sl{int(p.items[i+3]), int(p.items[i+4]), int(p.items[i+5])})
	}
	comb := map[[3]int32][2]int{}
	for i := 0; i < len(p.comb); i += 8 {
		comb[[3]int32{p.comb[i], p.comb[i+1], p.comb[i+2]}] = [2]int{int(p.comb[i+3]), int(p.comb[i+4])}
	}
	used := make([]bool, p.slots)
	for i := 0; i < len(tiles); i += 4 {
		k, end := [3]int32{tiles[i], tiles[i+1], tiles[i+2]}, int(tiles[i+3])
		ss := byTile[k]
		slices.SortFunc(ss, func(a, b sl) int { return a.lo - b.lo })
		if len(ss) == 0 {
			return fmt.Errorf("tile %v has no item", k)
		}
		if len(ss) == 1 && ss[0].slot == -1 {
			if ss[0].lo != 0 || ss[0].hi != end {
				return fmt.Errorf("tile %v: one item over [%d, %d), want [0, %d)", k, ss[0].lo, ss[0].hi, end)
			}
			if _, ok := comb[k]; ok {
				return fmt.Errorf("tile %v: one slice, yet a combine entry", k)
			}
			continue
		}
		c, ok := comb[k]
		if !ok || c[1] != len(ss) {
			return fmt.Errorf("tile %v: %d slices, combine entry %v", k, len(ss), c)
		}
		for j, x := range ss {
			want := 0
			if j > 0 {
				want = ss[j-1].hi
			}
			if x.lo != want || x.hi <= x.lo || x.lo%bn != 0 || (x.hi != end && x.hi%bn != 0) || x.slot != c[0]+j {
				return fmt.Errorf("tile %v (positions %d): slice %d is [%d, %d) in slot %d (first slot %d)", k, end, j, x.lo, x.hi, x.slot, c[0])
			}
			if x.slot < 0 || x.slot >= p.slots || used[x.slot] {
				return fmt.Errorf("tile %v: slot %d out of range or used twice", k, x.slot)
			}
			used[x.slot] = true
		}
		if ss[len(ss)-1].hi != end {
			return fmt.Errorf("tile %v: slices end at %d, want %d", k, ss[len(ss)-1].hi, end)
		}
	}
	for i, u := range used {
		if !u {
			return fmt.Errorf("slot %d unused", i)
		}
	}
	return nil
}

// TestPlanFlashSplit (host only): the plan's items and combine entries
// for random batches of prefill chunks and forced slice lengths, and its
// choices for the 4b heads on 132 SMs: a 16- or 128-row chunk after 8,064
// cached positions splits into one to three waves of blocks; a 2,048-row
// chunk after 6,144 and an 8,192-row prompt keep the single pass.
func TestPlanFlashSplit(t *testing.T) {
	r := newRand(5)
	for it := range 300 {
		hd := []int{64, 128, 256}[it%3]
		kv, g := 1+r.IntN(4), 1+r.IntN(4)
		var lens, cached, slots []int
		var pg [][]int32
		for s := range 1 + r.IntN(4) {
			n, c := 1+r.IntN(300), r.IntN(9000)
			lens, cached, slots = append(lens, n), append(cached, c), append(slots, s)
			pg = append(pg, make([]int32, (n+c+flashPageSize-1)/flashPageSize))
		}
		tiles, _ := flashTiles(batchOf(lens, cached, slots, pg), g)
		force := []int{0, 0, 1, 3, 50}[r.IntN(5)]
		for _, bal := range []bool{false, true} {
			for _, bn := range []int{flashKeyTile(hd), flashKeyTileKV(hd, true)} {
				p, ok := planFlashSplit(tiles, bn, hd, kv, 132, 132, force, bal)
				if !ok {
					continue
				}
				if err := checkSplitPlan(tiles, bn, p); err != nil {
					t.Fatalf("hd %d, bn %d, kv %d, g %d, lens %v, cached %v, force %d, balance %v: %v", hd, bn, kv, g, lens, cached, force, bal, err)
				}
			}
		}
	}
	for _, c := range []struct {
		rows, cached int
		split        bool
	}{{128, 8064, true}, {16, 8176, true}, {100, 3000, true}, {2048, 6144, false}, {8192, 0, false}, {1024, 0, false}} {
		tiles, _ := flashTiles(batchOf([]int{c.rows}, []int{c.cached}, []int{0}, [][]int32{make([]int32, (c.rows+c.cached+15)/16)}), 4)
		p, ok := planFlashSplit(tiles, 16, 256, 4, 132, 132, 0, false)
		if ok != c.split {
			t.Errorf("%d rows after %d: split %v, want %v", c.rows, c.cached, ok, c.split)
			continue
		}
		if ok {
			if blocks := len(p.items) / 8 * 4; blocks < 132 || blocks > 3*132 {
				t.Errorf("%d rows after %d: %d blocks on 132 SMs", c.rows, c.cached, blocks)
			}
			if err := checkSplitPlan(tiles, 16, p); err != nil {
				t.Errorf("%d rows after %d: %v", c.rows, c.cached, err)
			}
		}
		t.Logf("%d rows after %d: %d tiles, split %v: %d items, %d sliced tiles, %d slots (%.1f MiB of partials)",
			c.rows, c.cached, len(tiles)/4, ok, len(p.items)/8, len(p.comb)/8, p.slots, float64(p.slots*4*4*flashSlotFloats(256))/(1<<20))
	}
}

// planTiles returns flashTiles' list for a 4b-heads prefill (4 query
// heads a KV head) of rows after cached positions.
func planTiles(rows, cached int) []int32 {
	tiles, _ := flashTiles(batchOf([]int{rows}, []int{cached}, []int{0}, [][]int32{make([]int32, (rows+cached+15)/16)}), 4)
	return tiles
}

// planEstimate is planFlashBalanced's estimate of plan p (items in grid
// order) for key tiles of bn positions, head dim hd and kv KV heads on
// lanes lanes, and that of the single pass over tiles.
func planEstimate(tiles []int32, p flashSplitPlan, bn, hd, kv, lanes int) (single, split float64) {
	fixed, perSlot := flashBlockCost(hd, bn)
	var c0, c1 []float64
	for i := 0; i < len(tiles); i += 4 {
		c0 = append(c0, float64((int(tiles[i+3])+bn-1)/bn)+fixed)
	}
	for i := 0; i < len(p.items); i += 8 {
		c1 = append(c1, float64((int(p.items[i+4])-int(p.items[i+3])+bn-1)/bn)+fixed)
	}
	comb := flashCombineFixed + perSlot*float64((p.slots+2*len(p.comb)/8)*kv)/float64(lanes)
	return flashMakespan(c0, kv, lanes), flashMakespan(c1, kv, lanes) + comb
}

// TestPlanFlashBalanced (host only): planFlashSplit's decisions for the
// 4b heads over a bf16 cache (key tiles of 64, head dim 256, 4 KV heads, 4
// query heads each) on 132 SMs, with the fixed slice length
// (COHORT_CUDA_FLASH_BALANCE=0) and with the makespan search: causal
// prompts whose 128 or fewer blocks finish unevenly (1,024 and 512 rows
// after 0) split only with the search; 2,048-row chunks after 0 to 6,144
// and an 8,192-row prompt (already even in the longest-first order) keep
// the single pass with both; short chunks after a long context split with
// both. Every plan covers each tile's positions once, in consecutive slots
// in slice order (checkSplitPlan), stays within the block and slot bounds,
// goes out the longest slices first, is estimated under
// flashBalanceGain of the single pass, and is the same when planned again.
func TestPlanFlashBalanced(t *testing.T) {
	const bn, hd, kv, lanes = flashKVTile256, 256, 4, 132
	for _, c := range []struct {
		rows, cached   int
		fixed, balance bool
	}{
		{1024, 0, false, true}, {512, 0, false, true}, {300, 0, false, true},
		{2048, 0, false, false}, {2048, 2048, false, false}, {2048, 4096, false, false}, {2048, 6144, false, false},
		{8192, 0, false, false}, {4096, 4096, false, false}, {1024, 1024, false, false},
		{128, 3000, true, true}, {100, 3000, true, true}, {16, 3000, true, true}, {128, 8064, true, true}, {16, 8176, true, true},
	} {
		tiles := planTiles(c.rows, c.cached)
		for _, bal := range []bool{false, true} {
			want := c.fixed
			if bal {
				want = c.balance
			}
			p, ok := planFlashSplit(tiles, bn, hd, kv, lanes, lanes, 0, bal)
			name := fmt.Sprintf("%d rows after %d, balance %v", c.rows, c.cached, bal)
			if ok != want {
				t.Errorf("%s: split %v, want %v", name, ok, want)
			}
			if !ok {
				continue
			}
			if err := checkSplitPlan(tiles, bn, p); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			again, _ := planFlashSplit(tiles, bn, hd, kv, lanes, lanes, 0, bal)
			if !slices.Equal(again.items, p.items) || !slices.Equal(again.comb, p.comb) || again.slots != p.slots {
				t.Errorf("%s: a second plan differs", name)
			}
			t0, t1 := planEstimate(tiles, p, bn, hd, kv, lanes)
			longest := 0
			for i := 0; i < len(p.items); i += 8 {
				longest = max(longest, (int(p.items[i+4])-int(p.items[i+3])+bn-1)/bn)
			}
			if bal {
				if blocks := len(p.items) / 8 * kv; blocks > flashBalanceMaxWaves*lanes || p.slots*kv > flashBalanceMaxSlots*lanes {
					t.Errorf("%s: %d blocks, %d slots", name, blocks, p.slots)
				}
				if !(t1 < flashBalanceGain*t0) {
					t.Errorf("%s: estimated %.2f against the single pass's %.2f", name, t1, t0)
				}
				prev := math.MaxInt
				for i := 0; i < len(p.items); i += 8 {
					k := (int(p.items[i+4]) - int(p.items[i+3]) + bn - 1) / bn
					if k > prev {
						t.Errorf("%s: item %d walks %d key tiles, after one of %d", name, i/8, k, prev)
						break
					}
					prev = k
				}
			}
			t.Logf("%s: %d tiles, %d items, %d sliced tiles, %d slots (%.1f MiB of partials), longest %d key tiles; estimate %.2f against %.2f",
				name, len(tiles)/4, len(p.items)/8, len(p.comb)/8, p.slots, float64(p.slots*kv*4*flashSlotFloats(hd))/(1<<20), longest, t1, t0)
		}
	}
}

// TestAttentionPrefillSplitLong: the 4b heads, chunks of 16, 100 and 128
// rows after 3,000 and 8,064 cached positions (and 2,048 rows after 6,144,
// where planFlashSplit keeps the single pass): the split against
// attention_f32 and against the single pass, logging the three times.
func TestAttentionPrefillSplitLong(t *testing.T) {
	gpu(t)
	withFlash(t, 16)
	withSplit(t, true, 0)
	for _, c := range []struct{ rows, cached int }{{16, 3000}, {100, 3000}, {128, 3000}, {16, 8064}, {100, 8064}, {128, 8064}, {2048, 6144}} {
		t.Run(fmt.Sprintf("%d after %d", c.rows, c.cached), func(t *testing.T) {
			g := gpu(t)
			pf := newPrefill4BAt(g, c.cached, c.rows)
			defer pf.free(g)
			ref := g.Download(pf.runMode(g, modeF32))
			single := g.Download(pf.runMode(g, modeSingle))
			runs := flashSplitRuns.Load()
			got := g.Download(pf.runMode(g, modeSplit))
			split := flashSplitRuns.Load() > runs
			if want := c.rows < 1024; split != want {
				t.Errorf("split taken %v, want %v", split, want)
			}
			checkClose(t, "split vs attention_f32", got, ref, attnTol(flashTol))
			checkClose(t, "single pass vs attention_f32", single, ref, attnTol(flashTol))
			checkClose(t, "split vs single pass", got, single, attnTol(flashTol))
			again := g.Download(pf.runMode(g, modeSplit))
			if d := relDiff(again, got); d != 0 {
				t.Errorf("a second split run differs (relative %.3g)", d)
			}
			g.ResetScratch()
			reps := max(2, 2048/c.rows)
			var d [3]time.Duration
			for _, m := range []flashMode{modeSplit, modeSingle, modeF32} {
				d[m] = pf.timeStep(t, g, m, reps)
			}
			t.Logf("%d rows after %d, one layer: split %.3f ms, single pass %.3f ms (%.2f×), attention_f32 %.3f ms (%.2f×)",
				c.rows, c.cached, d[modeSplit].Seconds()*1e3, d[modeSingle].Seconds()*1e3, d[modeSingle].Seconds()/d[modeSplit].Seconds(),
				d[modeF32].Seconds()*1e3, d[modeF32].Seconds()/d[modeSplit].Seconds())
		})
	}
}

// BenchmarkAttentionPrefill times one 4b-shape attention layer (16 query
// heads, 4 KV heads, head dim 256, kv_write_f32 included) over a 1,024-
// and an 8,192-row prefill, the tensor-core kernel beside attention_f32:
// flash_ms and f32_ms per layer, and their ratio; then chunks after a long
// cached context ("128 new rows after 8064 cached" and others), where the
// split-keys path runs: split_ms, single_ms (COHORT_CUDA_FLASH_SPLIT=0's
// single pass) and f32_ms, single_ms/split_ms and f32_ms/split_ms.
func BenchmarkAttentionPrefill(b *testing.B) {
	gpu(b)
	withFlash(b, 16)
	withSplit(b, true, 0)
	for _, c := range []struct{ rows, cached int }{{128, 8064}, {16, 8176}, {128, 3000}, {2048, 6144}} {
		b.Run(fmt.Sprintf("%d new rows after %d cached", c.rows, c.cached), func(b *testing.B) {
			g := gpu(b)
			pf := newPrefill4BAt(g, c.cached, c.rows)
			defer pf.free(g)
			reps := max(2, 4096/c.rows)
			var t [3]time.Duration
			runs := flashSplitRuns.Load()
			for range b.N {
				for _, m := range []flashMode{modeSplit, modeSingle, modeF32} {
					t[m] += pf.timeStep(b, g, m, reps)
				}
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
			b.ReportMetric(ms(t[modeSplit]), "split_ms")
			b.ReportMetric(ms(t[modeSingle]), "single_ms")
			b.ReportMetric(ms(t[modeF32]), "f32_ms")
			b.ReportMetric(t[modeSingle].Seconds()/t[modeSplit].Seconds(), "single/split")
			b.ReportMetric(t[modeF32].Seconds()/t[modeSplit].Seconds(), "f32/split")
			b.ReportMetric(float64(flashSplitRuns.Load()-runs)/float64(b.N*2*(reps+1)), "split_taken")
		})
	}
	for _, T := range []int{1024, 8192} {
		b.Run(fmt.Sprint(T), func(b *testing.B) {
			g := gpu(b)
			pf := newPrefill4B(g, T)
			defer pf.free(g)
			reps := max(1, 4096/T)
			var tf, t32 time.Duration
			for range b.N {
				tf += pf.time(b, g, true, reps)
				t32 += pf.time(b, g, false, reps)
			}
			b.ReportMetric(tf.Seconds()*1e3/float64(b.N), "flash_ms")
			b.ReportMetric(t32.Seconds()*1e3/float64(b.N), "f32_ms")
			b.ReportMetric(t32.Seconds()/tf.Seconds(), "speedup")
		})
	}
}

// newPrefill4BKV is newPrefill4BAt over a bf16 cache on the test's
// backend, freed when the test (or sub-benchmark) ends.
func newPrefill4BKV(tb testing.TB, cached, rows int) (*Backend, prefill4B) {
	g := gpu(tb)
	useKVBF16(tb, g)
	pf := newPrefill4BAt(g, cached, rows)
	tb.Cleanup(func() {
		pf.free(g)
		g.FreeKVCache(pf.cache)
	})
	return g, pf
}

// useKVBF16 makes g's new caches bf16 for the test or benchmark (a
// sub-benchmark's, when tb is one) and restores the setting after it.
func useKVBF16(tb testing.TB, g *Backend) {
	old := g.kvBF16
	g.kvBF16 = true
	tb.Cleanup(func() { g.kvBF16 = old })
}

// withSwitches sets flashBalance and flashLDM for the test or benchmark,
// turns flashWG off (the tests and benchmarks of the _ldm entries compare
// them with the plain ones, and their occupancy to the planner's), and
// restores all three after it.
func withSwitches(t testing.TB, balance, ldm bool) {
	t.Helper()
	b, l, w := flashBalance, flashLDM, flashWG
	flashBalance, flashLDM, flashWG = balance, ldm, ""
	t.Cleanup(func() { flashBalance, flashLDM, flashWG = b, l, w })
}

// switchCases are the 4b-heads prefills of TestAttentionPrefillSwitches
// and BenchmarkAttentionPrefillSwitches: rows after cached positions.
var switchCases = []struct{ rows, cached int }{{1024, 0}, {2048, 0}, {2048, 6144}, {128, 3000}, {512, 0}, {2048, 2048}}

// TestAttentionPrefillSwitches: the 4b heads over a bf16 cache (the
// attention_prefill_*kvbf16_hd256 entries and their _ldm twins), with
// each setting of COHORT_CUDA_FLASH_BALANCE and COHORT_CUDA_FLASH_LDM,
// split path on: every output against attention_f32 (attention_kvbf16
// over the same cache) within flashTol; the split taken where
// planFlashSplit chooses it; with LDM the same bits as without, single
// pass and split alike (the same plan); and the balanced plans of 1,024
// and 512 rows after 0 split on 132 SMs.
func TestAttentionPrefillSwitches(t *testing.T) {
	withFlash(t, 16)
	withSplit(t, true, 0)
	withSwitches(t, flashBalance, flashLDM)
	for _, c := range switchCases {
		t.Run(fmt.Sprintf("%d after %d", c.rows, c.cached), func(t *testing.T) {
			g, pf := newPrefill4BKV(t, c.cached, c.rows)
			ref := g.Download(pf.runMode(g, modeF32))
			tiles, _ := flashTiles(pf.bt, 4)
			for _, bal := range []bool{false, true} {
				var outs [2][2][]float32 // [ldm][single, split]
				for li, ldm := range []bool{false, true} {
					flashBalance, flashLDM = bal, ldm
					outs[li][0] = g.Download(pf.runMode(g, modeSingle))
					runs := flashSplitRuns.Load()
					outs[li][1] = g.Download(pf.runMode(g, modeSplit))
					taken := flashSplitRuns.Load() > runs
					split, single := flashLDMEntry("attention_prefill_split_kvbf16_hd256"), flashLDMEntry("attention_prefill_kvbf16_hd256")
					smem := flashSmemKV(256, true)
					lanes0, lanes := g.flashLanes(single, smem), g.flashLanes(split, smem)
					_, want := planFlashSplit(tiles, flashKVTile256, 256, 4, lanes0, lanes, 0, bal)
					name := fmt.Sprintf("balance %v, ldm %v", bal, ldm)
					if taken != want {
						t.Errorf("%s: split taken %v, planFlashSplit %v", name, taken, want)
					}
					if bal && lanes == 132 && c.cached == 0 && c.rows <= 1024 && !want {
						t.Errorf("%s: no split on 132 SMs", name)
					}
					checkClose(t, name+": single pass vs attention_f32", outs[li][0], ref, attnTol(flashTol))
					checkClose(t, name+": split vs attention_f32", outs[li][1], ref, attnTol(flashTol))
					t.Logf("%s: split %v (lanes %d, %d)", name, taken, lanes0, lanes)
					g.ResetScratch()
				}
				for k, what := range []string{"single pass", "split"} {
					if d := relDiff(outs[1][k], outs[0][k]); d != 0 {
						t.Errorf("balance %v, %s: the ldm entry differs from the other (relative %.3g)", bal, what, d)
					}
				}
			}
		})
	}
}

// BenchmarkAttentionPrefillSwitches times one 4b-shape attention layer
// over a bf16 cache (kv_write_bf16 included, split path on, inside a
// step as timeStep does) for each prefill of switchCases under the four
// settings of COHORT_CUDA_FLASH_BALANCE and COHORT_CUDA_FLASH_LDM:
// base_ms (both off: the fixed planner, the entries without ldmatrix),
// bal_ms, ldm_ms and both_ms, the speedups base/bal, base/ldm and
// base/both, and bal_split (1 where the balanced planner splits).
func BenchmarkAttentionPrefillSwitches(b *testing.B) {
	gpu(b)
	withFlash(b, 16)
	withSplit(b, true, 0)
	withSwitches(b, flashBalance, flashLDM)
	for _, c := range switchCases {
		b.Run(fmt.Sprintf("%d new rows after %d cached", c.rows, c.cached), func(b *testing.B) {
			g, pf := newPrefill4BKV(b, c.cached, c.rows)
			reps := max(4, 4096/c.rows)
			var t [2][2]time.Duration // [balance][ldm]
			for range b.N {
				for bi, bal := range []bool{false, true} {
					for li, ldm := range []bool{false, true} {
						flashBalance, flashLDM = bal, ldm
						t[bi][li] += pf.timeStep(b, g, modeSplit, reps)
					}
				}
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
			b.ReportMetric(ms(t[0][0]), "base_ms")
			b.ReportMetric(ms(t[1][0]), "bal_ms")
			b.ReportMetric(ms(t[0][1]), "ldm_ms")
			b.ReportMetric(ms(t[1][1]), "both_ms")
			b.ReportMetric(t[0][0].Seconds()/t[1][0].Seconds(), "base/bal")
			b.ReportMetric(t[0][0].Seconds()/t[0][1].Seconds(), "base/ldm")
			b.ReportMetric(t[0][0].Seconds()/t[1][1].Seconds(), "base/both")
			tiles, _ := flashTiles(pf.bt, 4)
			lanes := max(g.sms, 1)
			split := 0.0
			if _, ok := planFlashSplit(tiles, flashKVTile256, 256, 4, lanes, lanes, 0, true); ok {
				split = 1
			}
			b.ReportMetric(split, "bal_split")
		})
	}
}

// TestFlashConstantsMatchSource: the Go side sizes the flash kernel's tiles,
// threads and shared memory from constants that the CUDA source defines on
// its own; this reads the source and checks that both agree.
func TestFlashConstantsMatchSource(t *testing.T) {
	src, err := os.ReadFile("kernels/45_attention_prefill.cu")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define FA_WARPS (\d+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no FA_WARPS in the source")
	}
	warps, _ := strconv.Atoi(string(m[1]))
	if flashThreads != 32*warps || flashTileRows != 16*warps {
		t.Errorf("FA_WARPS %d: flashThreads %d, flashTileRows %d", warps, flashThreads, flashTileRows)
	}
	for _, hd := range []int{64, 128, 256} {
		want := fmt.Sprintf("fa_prefill<%d, %d>", hd, flashKeyTile(hd))
		if !strings.Contains(string(src), want) {
			t.Errorf("head dim %d: the source has no %s", hd, want)
		}
		bn := fmt.Sprint(flashKeyTileKV(hd, true))
		if hd != 64 {
			m := regexp.MustCompile(fmt.Sprintf(`#define FA_BN_KV%d (\d+)`, hd)).FindSubmatch(src)
			if m == nil || string(m[1]) != bn {
				t.Errorf("head dim %d: the source's FA_BN_KV%d is %q, flashKeyTileKV %s", hd, hd, m, bn)
			}
			bn = fmt.Sprintf("FA_BN_KV%d", hd)
		}
		for _, split := range []string{"false", "true"} {
			if want := fmt.Sprintf("fa_prefill<%d, %s, %s, unsigned short>", hd, bn, split); !strings.Contains(string(src), want) {
				t.Errorf("head dim %d: the source has no %s", hd, want)
			}
		}
		for _, bf16 := range []bool{false, true} {
			if n := flashSmemKV(hd, bf16); n > 227<<10 {
				t.Errorf("head dim %d (bf16 cache %v): %d bytes of shared memory, more than an H100/H200 block may have", hd, bf16, n)
			}
		}
	}
}

// TestAttentionPrefillKVBF16Tiles: the flash kernels over a bf16 cache
// against the same kernels over a float32 one, single pass
// (COHORT_CUDA_FLASH_SPLIT=0) and split (forced slices of 4 key tiles:
// planFlashSplit's own choice depends on the kernels' occupancy, which
// differs between the two), 4b heads; and the time of each. Both see the
// same bf16 keys and values (kv_write_bf16 rounds k and v to nearest even
// as the float32 path's tile conversion does), but the bf16 entries walk
// larger key tiles (flashKeyTileKV), so their online softmax rescales at
// other points and rounds other P values to bf16: the outputs agree within
// flashTol, not bit for bit.
func TestAttentionPrefillKVBF16Tiles(t *testing.T) {
	withFlash(t, 16)
	split, force := flashSplit, flashSplitForce
	defer func() { flashSplit, flashSplitForce = split, force }()
	for _, c := range []struct {
		cached, T int
		split     bool
	}{{0, 1024, false}, {3000, 128, false}, {3000, 128, true}, {0, 8192, false}} {
		flashSplit, flashSplitForce = c.split, 0
		if c.split {
			flashSplitForce = 4
		}
		t.Run(fmt.Sprintf("%d+%d/split=%v", c.cached, c.T, c.split), func(t *testing.T) {
			g := gpu(t)
			if c.T > 1024 && testing.Short() {
				t.Skip("8,192 rows in -short")
			}
			old := g.kvBF16
			defer func() { g.kvBF16 = old }()
			var outs [2][]float32
			var times [2]time.Duration
			for i, bf := range []bool{false, true} {
				g.kvBF16 = bf
				pf := newPrefill4BAt(g, c.cached, c.T)
				outs[i] = g.Download(pf.run(g, true))
				g.ResetScratch()
				times[i] = pf.time(t, g, true, max(1, 8192/c.T))
				pf.free(g)
				g.FreeKVCache(pf.cache)
				g.ResetScratch()
			}
			checkClose(t, "bf16 cache against float32 cache", outs[1], outs[0], flashTol)
			t.Logf("%d rows after %d, one layer: flash over a float32 cache %.3f ms (key tile %d), bf16 %.3f ms (key tile %d; %.2fx; split runs so far %d)",
				c.T, c.cached, times[0].Seconds()*1e3, flashKeyTileKV(256, false), times[1].Seconds()*1e3, flashKeyTileKV(256, true),
				times[0].Seconds()/times[1].Seconds(), flashSplitRuns.Load())
		})
	}
}
