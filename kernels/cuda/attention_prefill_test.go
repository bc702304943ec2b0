//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"regexp"
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

// runAttnSteps runs the steps through both backends (layer 1 of the
// caches), carrying each sequence's cached count from step to step, and
// compares every output within tol.
func runAttnSteps(t *testing.T, p pair, cfg kernels.AttnConfig, ac attnCaches, steps []attnStep, tol float64, seed uint64) {
	t.Helper()
	const layer = 1
	cached := make([]int, len(ac.pages))
	r := newRand(seed)
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	for si, st := range steps {
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
		checkClose(t, fmt.Sprintf("step %d (lens %v, cached %v)", si, lens, cs), got, want, tol)
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
// an order where the attention_f32 rows come in several runs.
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

func newPrefill4B(g *Backend, T int) prefill4B {
	cfg := kernels.AttnConfig{Heads: 16, KVHeads: 4, HeadDim: 256, RotaryDim: 64, Theta: 1e7}
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	r := newRand(uint64(T))
	pages := (T + flashPageSize - 1) / flashPageSize
	pg := make([]int32, pages)
	for i, j := range r.Perm(pages) {
		pg[i] = int32(j)
	}
	return prefill4B{
		cfg: cfg,
		q:   g.Upload(randSlice(r, T*qw, 1), T, qw), k: g.Upload(randSlice(r, T*kw, 1), T, kw),
		v: g.Upload(randSlice(r, T*kw, 1), T, kw), gate: g.Upload(randSlice(r, T*qw, 2), T, qw),
		cache: g.NewKVCache(1, pages, flashPageSize, cfg.KVHeads, cfg.HeadDim),
		bt:    batchOf([]int{T}, []int{0}, []int{0}, [][]int32{pg}),
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
			checkClose(t, "flash vs attention_f32", got, ref, flashTol)
			if T <= 1024 {
				c := func(x kernels.Tensor) kernels.Tensor { return p.c.Upload(g.Download(x), x.Shape()...) }
				cc := p.c.NewKVCache(1, len(pf.bt.Seqs[0].Pages), flashPageSize, pf.cfg.KVHeads, pf.cfg.HeadDim)
				want := p.c.Download(p.c.Attention(c(pf.q), c(pf.k), c(pf.v), c(pf.gate), cc, 0, pf.bt, pf.cfg))
				checkClose(t, "flash vs CPU", got, want, flashTol)
				checkClose(t, "attention_f32 vs CPU", ref, want, 1e-3)
			}
			g.ResetScratch()
			reps := max(1, 8192/T)
			tf, t32 := pf.time(t, g, true, reps), pf.time(t, g, false, reps)
			t.Logf("%d rows, one layer: flash %.3f ms, attention_f32 %.3f ms (%.1f×)",
				T, tf.Seconds()*1e3, t32.Seconds()*1e3, t32.Seconds()/tf.Seconds())
		})
	}
}

// BenchmarkAttentionPrefill times one 4b-shape attention layer (16 query
// heads, 4 KV heads, head dim 256, kv_write_f32 included) over a 1,024-
// and an 8,192-row prefill, the tensor-core kernel beside attention_f32:
// flash_ms and f32_ms per layer, and their ratio.
func BenchmarkAttentionPrefill(b *testing.B) {
	gpu(b)
	withFlash(b, 16)
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
		if flashSmem(hd) > 227<<10 {
			t.Errorf("head dim %d: %d bytes of shared memory, more than an H100/H200 block may have", hd, flashSmem(hd))
		}
	}
}
