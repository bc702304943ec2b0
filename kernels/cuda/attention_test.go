//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"cohort/kernels"
)

// TestAttentionMatchesCPU runs several steps of mixed batches (prefills,
// chunks, decodes, reordered sequences) with non-contiguous interleaved
// pages through both backends and compares every output, on attention_f32
// and on the decode kernel (its own choice of key slices, and 3).
func TestAttentionMatchesCPU(t *testing.T) {
	p := newPair(t)
	// This checks the float32 kernels (decode rows, short chunks) at their
	// own tolerance; the tensor-core prefill kernel has its tests
	// (attention_prefill_test.go).
	on := flashAttention
	flashAttention = false
	defer func() { flashAttention = on }()
	modes := []struct {
		name  string
		on    bool
		force int
	}{{"attention_f32", false, 0}, {"decode", true, 0}, {"decode3", true, 3}}
	for _, mode := range modes {
		for _, cfg := range []kernels.AttnConfig{
			{Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 4, Theta: 1e4},
			{Heads: 8, KVHeads: 2, HeadDim: 256, RotaryDim: 64, Theta: 1e7},
			{Heads: 6, KVHeads: 6, HeadDim: 72, RotaryDim: 16, Theta: 1e7},
		} {
			t.Run(fmt.Sprintf("%s/H%d/KV%d/hd%d", mode.name, cfg.Heads, cfg.KVHeads, cfg.HeadDim), func(t *testing.T) {
				gpu(t) // each subtest runs on its own goroutine: lock and bind it
				withDecodeAttn(mode.on, mode.force, func() { attentionMatchesCPU(t, p, cfg) })
			})
		}
	}
}

// attentionMatchesCPU is one head shape of TestAttentionMatchesCPU.
func attentionMatchesCPU(t *testing.T, p pair, cfg kernels.AttnConfig) {
	const pageSize, numPages, layers, layer = 16, 64, 2, 1
	cc := p.c.NewKVCache(layers, numPages, pageSize, cfg.KVHeads, cfg.HeadDim)
	cg := p.g.NewKVCache(layers, numPages, pageSize, cfg.KVHeads, cfg.HeadDim)
	// Three sequences with interleaved, non-contiguous pages.
	pages := [][]int32{
		{7, 2, 9, 0, 13, 21, 40, 41, 3, 60},
		{1, 15, 30, 22, 4, 5, 50, 51, 52, 53},
		{20, 6, 11, 8, 10, 12, 33, 34, 35, 63},
	}
	cached := []int{0, 0, 0}
	r := newRand(uint64(cfg.HeadDim))
	steps := []struct{ seqs, lens []int }{
		{[]int{0, 1, 2}, []int{6, 1, 40}},  // prefills
		{[]int{0, 1, 2}, []int{1, 17, 1}},  // decode, chunk, decode
		{[]int{2, 0}, []int{70, 1}},        // reordered sequences
		{[]int{1}, []int{1}},               // one decode
		{[]int{0, 1, 2}, []int{100, 1, 1}}, // long chunk across pages
		{[]int{2, 1, 0}, []int{1, 1, 1}},   // decodes
	}
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	for si, st := range steps {
		var lens, cach, slots []int
		var pg [][]int32
		for i, s := range st.seqs {
			lens = append(lens, st.lens[i])
			cach = append(cach, cached[s])
			slots = append(slots, s)
			pg = append(pg, pages[s])
		}
		b := batchOf(lens, cach, slots, pg)
		T := b.Rows()
		qc, qg := p.up(randSlice(r, T*qw, 1), T, qw)
		kc, kg := p.up(randSlice(r, T*kw, 1), T, kw)
		vc, vg := p.up(randSlice(r, T*kw, 1), T, kw)
		gc, gg := p.up(randSlice(r, T*qw, 2), T, qw)
		want := p.c.Download(p.c.Attention(qc, kc, vc, gc, cc, layer, b, cfg))
		got := p.g.Download(p.g.Attention(qg, kg, vg, gg, cg, layer, b, cfg))
		checkClose(t, fmt.Sprintf("step %d", si), got, want, attnTol(1e-3))
		for i, s := range st.seqs {
			cached[s] += st.lens[i]
		}
	}
	// Layer 0 of the cache was never written.
	kc := cg.(*KVCache)
	n := int64(numPages*pageSize*cfg.KVHeads*cfg.HeadDim) * kvElemBytes(kc.bf16) / 4 // 32-bit words
	for _, base := range []devptr{kc.k, kc.v} {
		tmp := &Tensor{shape: []int{int(n)}, n: int(n), ptr: base}
		for _, v := range p.g.Download(tmp) {
			if v != 0 {
				t.Fatalf("layer 0 of the cache was written")
			}
		}
	}
}

// Decode attention (attention_decode_g*, attentionDecode) against a
// float64 oracle and attention_f32 over long contexts, and under CUDA graph
// replay.

// decodePageSize is the page size of the decode attention tests' caches.
const decodePageSize = 16

// decodeConfigs are the head shapes of the decode attention tests: the 4b
// model's heads (16 query, 4 KV, head dim 256), a small shape, no GQA at a
// head dim that is no multiple of 32, a GQA ratio of 3 (a block's group of
// 4 heads only partly used) and of 8 (two groups a KV head).
var decodeConfigs = []kernels.AttnConfig{
	{Heads: 16, KVHeads: 4, HeadDim: 256},
	{Heads: 4, KVHeads: 2, HeadDim: 8},
	{Heads: 6, KVHeads: 6, HeadDim: 72},
	{Heads: 6, KVHeads: 2, HeadDim: 128},
	{Heads: 8, KVHeads: 1, HeadDim: 64},
}

// decodeFix is a paged cache of one layer on a GPU backend, filled with
// random keys and values, and its host copy ([page][pageSize][KV][hd] for
// each of k and v), which write keeps equal to the device's.
type decodeFix struct {
	cfg    kernels.AttnConfig
	g      *Backend
	cache  *KVCache
	hk, hv []float32
	r      *rand.Rand
}

func newDecodeFix(t testing.TB, g *Backend, cfg kernels.AttnConfig, pool int, seed uint64) *decodeFix {
	t.Helper()
	c := g.NewKVCache(1, pool, decodePageSize, cfg.KVHeads, cfg.HeadDim).(*KVCache)
	r := newRand(seed)
	n := pool * decodePageSize * cfg.KVHeads * cfg.HeadDim
	f := &decodeFix{cfg: cfg, g: g, cache: c, hk: randSlice(r, n, 1), hv: randSlice(r, n, 1), r: r}
	for _, x := range []struct {
		dst devptr
		src []float32
	}{{c.k, f.hk}, {c.v, f.hv}} {
		if err := uploadCache(c, x.dst, x.src); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// uploadCache copies src into the cache buffer dst of c: as it is, or, for
// a bf16 cache, rounded to bf16 (src too, so that the host copy stays the
// device's).
func uploadCache(c *KVCache, dst devptr, src []float32) error {
	if !c.bf16 {
		return memcpyHtoD(dst, unsafe.Pointer(&src[0]), int64(len(src))*4)
	}
	bits := make([]uint16, len(src))
	for i, v := range src {
		bits[i] = bf16Bits(v)
		src[i] = math.Float32frombits(uint32(bits[i]) << 16)
	}
	return memcpyHtoD(dst, unsafe.Pointer(&bits[0]), int64(len(bits))*2)
}

// kvTolFloor is the least tolerance of the attention tests against their
// float32 references while TestAttentionKVBF16 runs them over bf16 caches.
var kvTolFloor = 0.0

// attnTol is an attention test's tolerance tol, at least kvTolFloor.
func attnTol(tol float64) float64 { return max(tol, kvTolFloor) }

// kvBF16Tol is the tolerance with a bf16 cache. Rounding k and v to bf16
// changes each by at most 2^-8 relative (8 significant bits, nearest
// even: half a unit in the last place). With the tests' values (|q|, |k|,
// |v| <= 1, independent signs) a score q·k/sqrt(hd) moves by about
// 2^-8·(1/3) ≈ 1.3e-3 (one standard deviation; the worst case, every term
// of one sign, is 2^-8·sqrt(hd)), which moves each softmax weight by about
// twice that relative, and v's own rounding adds at most 2^-8 of |v|:
// outputs move by several 1e-3 relative at most in practice, so 2e-2
// leaves a margin without hiding a wrong element (a misread position or
// head is O(1)). It is also above flashTol, whose bf16 products already
// round k and v the same way.
const kvBF16Tol = 2e-2

// TestAttentionKVBF16 runs the attention tests over bf16 KV caches
// (COHORT_CUDA_KV=bf16) against the same float32 references, at kvBF16Tol.
func TestAttentionKVBF16(t *testing.T) {
	g := gpu(t)
	defer func(old bool, tol float64) { g.kvBF16, kvTolFloor = old, tol }(g.kvBF16, kvTolFloor)
	g.kvBF16, kvTolFloor = true, kvBF16Tol
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"MatchesCPU", TestAttentionMatchesCPU},
		{"Decode", TestAttentionDecode},
		{"DecodeGraphReplay", TestAttentionDecodeGraphReplay},
		{"DecodeSliceBounds", TestAttentionDecodeSliceBounds},
		{"PrefillSingle", TestAttentionPrefillSingle},
		{"PrefillChunks", TestAttentionPrefillChunks},
		{"PrefillMixed", TestAttentionPrefillMixed},
		{"Prefill4B", TestAttentionPrefill4B},
		{"PrefillSplit", TestAttentionPrefillSplit},
		{"PrefillSplitLong", TestAttentionPrefillSplitLong},
	} {
		t.Run(c.name, func(t *testing.T) {
			gpu(t)
			c.fn(t)
		})
	}
}

// newDecodeBench is newDecodeFix without the host copy (for timing only):
// the cache holds a block of random values over and over.
func newDecodeBench(t testing.TB, g *Backend, cfg kernels.AttnConfig, pool int, seed uint64) *decodeFix {
	t.Helper()
	c := g.NewKVCache(1, pool, decodePageSize, cfg.KVHeads, cfg.HeadDim).(*KVCache)
	r := newRand(seed)
	n := int64(pool) * decodePageSize * int64(cfg.KVHeads*cfg.HeadDim)
	blk := randSlice(r, 1<<22, 1)
	src, eb := unsafe.Pointer(&blk[0]), kvElemBytes(c.bf16)
	if c.bf16 {
		bits := toBF16(blk)
		src = unsafe.Pointer(&bits[0])
	}
	for _, dst := range []devptr{c.k, c.v} {
		for off := int64(0); off < n; off += int64(len(blk)) {
			if err := memcpyHtoD(dst+devptr(eb*off), src, eb*min(int64(len(blk)), n-off)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &decodeFix{cfg: cfg, g: g, cache: c, r: r}
}

func (f *decodeFix) free() { f.g.FreeKVCache(f.cache) }

// decodeStep is one decode step: a row for each of its sequences.
type decodeStep struct {
	bt            *kernels.Batch
	q, k, v, gate []float32
	ctxs          []int
}

// decodeContexts returns B contexts (positions a row attends to, its own
// included): ctx for the first row, down to about ctx/2 for the last.
func decodeContexts(B, ctx int) []int {
	out := make([]int, B)
	for i := range out {
		out[i] = max(1, ctx-i*ctx/(2*B))
	}
	return out
}

// step makes a decode step of one row for each context of ctxs, with
// random inputs. Sequence i writes its row into page i (its own) and reads
// pages drawn at random from the others (shared between sequences and
// repeated within one: the kernels do not care), or, with distinct, pages
// of its own (the pool must hold them all).
func (f *decodeFix) step(ctxs []int, distinct bool) decodeStep {
	B := len(ctxs)
	lens, cached, slots := make([]int, B), make([]int, B), make([]int, B)
	pages := make([][]int32, B)
	var perm []int
	if distinct {
		perm = f.r.Perm(f.cache.visible - B)
	}
	next := 0
	for i, n := range ctxs {
		p := n - 1
		pg := make([]int32, p/decodePageSize+1)
		for j := range pg {
			if distinct {
				pg[j] = int32(B + perm[next])
				next++
			} else {
				pg[j] = int32(B + f.r.IntN(f.cache.visible-B))
			}
		}
		pg[p/decodePageSize] = int32(i)
		lens[i], cached[i], slots[i], pages[i] = 1, p, i, pg
	}
	cfg := f.cfg
	qw, kw := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	return decodeStep{bt: batchOf(lens, cached, slots, pages), ctxs: ctxs,
		q: randSlice(f.r, B*qw, 1), k: randSlice(f.r, B*kw, 1), v: randSlice(f.r, B*kw, 1), gate: randSlice(f.r, B*qw, 2)}
}

// write stores the step's k and v in the host copy, as kv_write_f32 does
// on the device.
func (f *decodeFix) write(st decodeStep) {
	kw := f.cfg.KVHeads * f.cfg.HeadDim
	for i, s := range st.bt.Seqs {
		p := int(st.bt.Positions[s.Start])
		off := (int(s.Pages[p/decodePageSize])*decodePageSize + p%decodePageSize) * kw
		copy(f.hk[off:off+kw], st.k[i*kw:(i+1)*kw])
		copy(f.hv[off:off+kw], st.v[i*kw:(i+1)*kw])
	}
}

// want is the step's attention output in float64 from the host copy
// (after write).
func (f *decodeFix) want(st decodeStep) []float32 {
	cfg := f.cfg
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	kw := KV * hd
	scale := float64(1 / float32(math.Sqrt(float64(hd))))
	out := make([]float32, st.bt.Rows()*H*hd)
	var wg sync.WaitGroup
	for i, s := range st.bt.Seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int(st.bt.Positions[s.Start]) + 1
			sc := make([]float64, n)
			o := make([]float64, hd)
			for h := range H {
				kvh := h / (H / KV)
				qh := st.q[(i*H+h)*hd : (i*H+h+1)*hd]
				m := math.Inf(-1)
				for t := range n {
					off := (int(s.Pages[t/decodePageSize])*decodePageSize+t%decodePageSize)*kw + kvh*hd
					d := 0.0
					for j, x := range qh {
						d += float64(x) * float64(f.hk[off+j])
					}
					sc[t] = d * scale
					m = max(m, sc[t])
				}
				clear(o)
				l := 0.0
				for t := range n {
					off := (int(s.Pages[t/decodePageSize])*decodePageSize+t%decodePageSize)*kw + kvh*hd
					w := math.Exp(sc[t] - m)
					l += w
					for j := range o {
						o[j] += w * float64(f.hv[off+j])
					}
				}
				for j := range o {
					gt := float64(st.gate[(i*H+h)*hd+j])
					out[(i*H+h)*hd+j] = float32(o[j] / l / (1 + math.Exp(-gt)))
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// withDecodeAttn sets decodeAttn and decodeAttnForce for the call of fn.
func withDecodeAttn(on bool, force int, fn func()) {
	d, f := decodeAttn, decodeAttnForce
	decodeAttn, decodeAttnForce = on, force
	defer func() { decodeAttn, decodeAttnForce = d, f }()
	fn()
}

// tensors uploads the step's inputs.
func (f *decodeFix) tensors(st decodeStep) (q, k, v, gate kernels.Tensor) {
	T, qw, kw := st.bt.Rows(), f.cfg.Heads*f.cfg.HeadDim, f.cfg.KVHeads*f.cfg.HeadDim
	return f.g.Upload(st.q, T, qw), f.g.Upload(st.k, T, kw), f.g.Upload(st.v, T, kw), f.g.Upload(st.gate, T, qw)
}

// run returns the step's Attention output with the decode kernel on or
// off (attention_f32) and force slices (0: decodeAttnSlices' choice).
func (f *decodeFix) run(st decodeStep, on bool, force int) []float32 {
	var out []float32
	withDecodeAttn(on, force, func() {
		q, k, v, gate := f.tensors(st)
		out = f.g.Download(f.g.Attention(q, k, v, gate, f.cache, 0, st.bt, f.cfg))
		f.g.Free(q, k, v, gate)
		f.g.ResetScratch()
	})
	return out
}

// decodeSlicesFor is S of attentionDecode for rows rows of cfg on g.
func decodeSlicesFor(g *Backend, cfg kernels.AttnConfig, rows int) int {
	gm, name := decodeAttnGroup(cfg.Heads / cfg.KVHeads)
	hg := (cfg.Heads/cfg.KVHeads + gm - 1) / gm
	return decodeAttnSlices(rows, cfg.KVHeads*hg, g.occupancy(name, decodeAttnThreads)*max(g.sms, 1), 0)
}

// TestAttentionDecode: decode steps of 1, 3 and 32 rows at contexts of 1,
// 17, 300, 3,000 and 8,000 positions (the rows of a step at contexts from
// that down to about half of it), for every decode head shape, the decode
// kernel (its own choice of slices, one slice, 5 and 200 slices: many
// empty) and attention_f32 against a float64 oracle; the decode kernel run
// twice gives the same bits.
func TestAttentionDecode(t *testing.T) {
	for _, cfg := range decodeConfigs {
		t.Run(flashName(cfg), func(t *testing.T) {
			g := gpu(t)
			f := newDecodeFix(t, g, cfg, 4096, uint64(cfg.Heads*1000+cfg.HeadDim))
			defer f.free()
			for _, B := range []int{1, 3, 32} {
				for _, ctx := range []int{1, 17, 300, 3000, 8000} {
					if testing.Short() && B*ctx > 3*3000 && cfg.Heads*cfg.HeadDim > 1024 {
						continue
					}
					st := f.step(decodeContexts(B, ctx), false)
					what := fmt.Sprintf("%d rows at %d (S %d)", B, ctx, decodeSlicesFor(g, cfg, B))
					got, ref, want := f.checkDecode(t, st, what)
					for _, force := range []int{1, 5, 200} {
						checkClose(t, fmt.Sprintf("%s: decode, %d slices, vs oracle", what, force), f.run(st, true, force), want, attnTol(1e-3))
					}
					if B == 32 && ctx == 3000 {
						t.Logf("%s: decode %.3g, attention_f32 %.3g from the oracle", what, relDiff(got, want), relDiff(ref, want))
					}
				}
			}
		})
	}
}

// decodeSliceLen is the positions a key slice of attn_decode takes in a
// row of n positions split into S slices (the last filled one may take
// fewer), and decodeFilled the slices that hold any.
func decodeSliceLen(n, S int) int {
	c := (n + S - 1) / S
	return max((c+7)/8*8, decodeAttnMinSlice) // 8 = 2*DA_WARPS
}

func decodeFilled(n, S int) int { return (n + decodeSliceLen(n, S) - 1) / decodeSliceLen(n, S) }

// runPoisoned is run of the decode kernel (force slices) with its partials
// buffer filled with NaN first: Attention runs twice in one step (the
// second call reuses the first's buffer), NaN written over the buffer in
// between, and the second output is returned. A partial output of an empty
// slice (left unwritten) that the combine read would show as NaN.
// checkDecode writes step st's keys and values, runs it on attention_f32
// and on the decode kernel (its own slices), checks both against the
// float64 oracle and each other and that a second decode run gives the
// same bits, and returns the decode output, attention_f32's and the
// oracle's.
func (f *decodeFix) checkDecode(t *testing.T, st decodeStep, what string) (got, ref, want []float32) {
	t.Helper()
	f.write(st)
	want = f.want(st)
	ref = f.run(st, false, 0)
	checkClose(t, what+": attention_f32 vs oracle", ref, want, attnTol(1e-3))
	got = f.run(st, true, 0)
	checkClose(t, what+": decode vs oracle", got, want, attnTol(1e-3))
	checkClose(t, what+": decode vs attention_f32", got, ref, attnTol(1e-3))
	if again := f.run(st, true, 0); !slices.Equal(again, got) {
		t.Errorf("%s: a second run differs (relative %.3g)", what, relDiff(again, got))
	}
	return got, ref, want
}

func (f *decodeFix) runPoisoned(t *testing.T, st decodeStep, force int) []float32 {
	t.Helper()
	g := f.g
	var out []float32
	withDecodeAttn(true, force, func() {
		q, k, v, gate := f.tensors(st)
		defer g.Free(q, k, v, gate)
		g.BeginStep("", kernels.StepInputs{Batch: st.bt})
		g.Attention(q, k, v, gate, f.cache, 0, st.bt, f.cfg)
		poisoned := false
		for key, p := range g.meta {
			if key.kind == "decodeAttnPartials" {
				if err := memsetD32(p, 0x7fc00000, int64(key.n)/4); err != nil {
					t.Fatal(err)
				}
				poisoned = true
			}
		}
		res := g.Attention(q, k, v, gate, f.cache, 0, st.bt, f.cfg)
		out = g.Download(res)
		g.EndStep(nil)
		g.ResetScratch()
		S := force
		if S <= 0 {
			S = decodeSlicesFor(g, f.cfg, st.bt.Rows())
		}
		if !poisoned && S > 1 {
			t.Fatalf("%d slices: no decode partials to poison", S)
		}
	})
	return out
}

// TestAttentionDecodeSliceBounds: decode steps of 1 and 3 rows at short
// contexts (1 to 144 positions, around the multiples of the minimum slice
// length and of 2*DA_WARPS) and long ones (1,000 to 3,000, across the
// context, 16·128, where the minimum stops binding at S = 128), for every
// decode head shape: the decode kernel with its own S (at short contexts
// mostly empty slices) and with forced S (2 to 1,024, DC_MAX_SLICES: more
// slices than positions) against the float64 oracle and attention_f32;
// the same bits on a second run and with the partials buffer filled with
// NaN beforehand (the combine reads no partial output of an empty slice).
func TestAttentionDecodeSliceBounds(t *testing.T) {
	for _, cfg := range decodeConfigs {
		t.Run(flashName(cfg), func(t *testing.T) {
			g := gpu(t)
			f := newDecodeFix(t, g, cfg, 1024, uint64(cfg.Heads*7000+cfg.HeadDim))
			defer f.free()
			for _, B := range []int{1, 3} {
				S := decodeSlicesFor(g, cfg, B)
				for _, ctx := range []int{1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 144, 1000, 2047, 2048, 2049, 3000} {
					st := f.step(decodeContexts(B, ctx), false)
					what := fmt.Sprintf("%d rows at %d (S %d, %d filled)", B, ctx, S, decodeFilled(ctx, S))
					got, _, want := f.checkDecode(t, st, what)
					if p := f.runPoisoned(t, st, 0); !slices.Equal(p, got) {
						t.Errorf("%s: differs with NaN partials (relative %.3g)", what, relDiff(p, got))
					}
					for _, force := range []int{2, 3, 9, 64, 128, 200, decodeCombineMaxSlices} {
						fw := fmt.Sprintf("%s: %d slices (%d filled)", what, force, decodeFilled(ctx, force))
						fg := f.run(st, true, force)
						checkClose(t, fw+": decode vs oracle", fg, want, attnTol(1e-3))
						if p := f.runPoisoned(t, st, force); !slices.Equal(p, fg) {
							t.Errorf("%s: differs with NaN partials (relative %.3g)", fw, relDiff(p, fg))
						}
					}
				}
			}
		})
	}
}

// decodeGraphRuns numbers TestAttentionDecodeGraphReplay's runs.
var decodeGraphRuns atomic.Int64

// TestAttentionDecodeGraphReplay: steps of 3 decode rows captured into a
// CUDA graph at short contexts and replayed at longer ones (3,000 and
// 8,000 positions, a row back at 1) give the bits of the same steps run
// eagerly, within the oracle's tolerance.
func TestAttentionDecodeGraphReplay(t *testing.T) {
	be := bf16Backend(t)
	if !be.graph.enabled {
		t.Skip("CUDA graphs are off")
	}
	cfg := decodeConfigs[0]
	f := newDecodeFix(t, be, cfg, 4096, 3)
	defer f.free()
	ctxs := [][]int{{40, 17, 300}, {41, 18, 301}, {42, 19, 302}, {43, 20, 303}, {3000, 2000, 1500}, {8000, 1, 5000}, {8001, 2, 5001}}
	// Fixed input buffers (permanent), refilled before each step: a
	// replayed graph reads the addresses it was captured with.
	st0 := f.step(ctxs[0], true)
	q, k, v, gate := f.tensors(st0)
	defer be.Free(q, k, v, gate)
	fill := func(st decodeStep) {
		for _, x := range []struct {
			t   kernels.Tensor
			src []float32
		}{{q, st.q}, {k, st.k}, {v, st.v}, {gate, st.gate}} {
			if err := memcpyHtoD(x.t.(*Tensor).ptr, unsafe.Pointer(&x.src[0]), int64(len(x.src))*4); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A key of this run's own (a graph of an earlier run, -count, would
	// have other caches' addresses), dropped at the end.
	key := fmt.Sprintf("decode-attention-test-%d", decodeGraphRuns.Add(1))
	defer be.dropGraph(key)
	c0, r0 := be.GraphStats()
	defer func() { be.graph.enabled = true }()
	for i, cs := range ctxs {
		st := f.step(cs, true)
		f.write(st)
		fill(st)
		var graphed, eager []float32
		withDecodeAttn(true, 0, func() {
			be.graph.enabled = true
			be.BeginStep(key, kernels.StepInputs{Batch: st.bt})
			out := be.Attention(q, k, v, gate, f.cache, 0, st.bt, cfg)
			be.EndStep(out)
			graphed = be.Download(out)
			be.ResetScratch()
			be.graph.enabled = false
			eager = be.Download(be.Attention(q, k, v, gate, f.cache, 0, st.bt, cfg))
			be.ResetScratch()
		})
		if !slices.Equal(graphed, eager) {
			t.Errorf("step %d (contexts %v): graph output differs from eager (relative %.3g)", i, cs, relDiff(graphed, eager))
		}
		tol := attnTol(1e-3)
		if be.kvBF16 { // the default backend's cache (the oracle reads float32 k and v)
			tol = kvBF16Tol
		}
		checkClose(t, fmt.Sprintf("step %d (contexts %v): graph vs oracle", i, cs), graphed, f.want(st), tol)
	}
	c1, r1 := be.GraphStats()
	if c1-c0 != 1 || r1-r0 != len(ctxs)-2 {
		t.Errorf("captured %d graphs and replayed %d steps; want 1 and %d", c1-c0, r1-r0, len(ctxs)-2)
	}
}

// TestDecodeAttnSlices (host only): S from the batch's shape alone, the
// most that keep the grid within decodeAttnWaves waves, within [1,
// decodeAttnMaxSlices].
func TestDecodeAttnSlices(t *testing.T) {
	const lanes = 4 * 132 // the 4b heads' kernel on an H200
	for _, c := range []struct{ rows, blocks, want int }{
		{1, 4, decodeAttnMaxSlices}, {3, 4, 88}, {32, 4, 8}, {128, 4, 2}, {200, 4, 1}, {256, 4, 1}, {2111, 4, 1}, {0, 4, 1},
	} {
		if got := decodeAttnSlices(c.rows, c.blocks, lanes, 0); got != c.want {
			t.Errorf("%d rows of %d blocks: S %d, want %d", c.rows, c.blocks, got, c.want)
		}
	}
	for rows := 1; rows <= 4096; rows++ {
		for _, blocks := range []int{1, 2, 4, 8, 16} {
			s := decodeAttnSlices(rows, blocks, lanes, 0)
			if s < 1 || s > decodeAttnMaxSlices {
				t.Fatalf("%d rows of %d blocks: S %d", rows, blocks, s)
			}
			if s > 1 && rows*blocks*s > decodeAttnWaves*lanes {
				t.Fatalf("%d rows of %d blocks: S %d gives %d blocks, over %d waves of %d", rows, blocks, s, rows*blocks*s, decodeAttnWaves, lanes)
			}
			if s < decodeAttnMaxSlices && rows*blocks*(s+1) <= decodeAttnWaves*lanes {
				t.Fatalf("%d rows of %d blocks: S %d, one more would fit", rows, blocks, s)
			}
		}
	}
	if got := decodeAttnSlices(32, 4, lanes, 7); got != 7 {
		t.Errorf("forced 7 slices: %d", got)
	}
	// The combine's block: whole warps, at most DC_THREADS, at least one
	// group of hd/4 threads, and hd/4 threads for each of up to
	// decodeCombineGroups slices, rounded up to a warp.
	for hd := 4; hd <= attnMaxHeadDim; hd += 4 {
		for S := 2; S <= decodeCombineMaxSlices; S++ {
			n, hd4 := decodeCombineBlock(hd, S), hd/4
			if n%32 != 0 || n > decodeCombineThreads || n < hd4 || n >= hd4*min(S, decodeCombineGroups)+32 {
				t.Fatalf("hd %d, %d slices: combine block of %d threads", hd, S, n)
			}
		}
	}
	if n := decodeCombineBlock(256, decodeAttnMaxSlices); n != 1024 {
		t.Errorf("hd 256: combine block of %d threads, want 1024", n)
	}
	for g, want := range map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 8: 4} {
		if gm, _ := decodeAttnGroup(g); gm != want {
			t.Errorf("%d heads a KV head: groups of %d, want %d", g, gm, want)
		}
	}
}

// BenchmarkAttentionDecode times one 4b-shape attention layer (kv_write_f32
// included) of decode steps of 1 row at 144, 1,000 and 3,000 positions of
// context and 32 and 128 rows at 3,000 (every sequence on pages of its
// own), the decode kernel beside attention_f32: decode_ms and f32_ms per
// layer, their ratio, and the decode kernel's key slices (and how many a
// row fills).
func BenchmarkAttentionDecode(b *testing.B) {
	gpu(b)
	cfg := decodeConfigs[0]
	for _, c := range []struct{ B, ctx int }{{1, 144}, {1, 1000}, {1, 3000}, {32, 3000}, {128, 3000}} {
		B, ctx := c.B, c.ctx
		// One cache and step for every run of the sub-benchmark (the
		// framework calls it more than once).
		var f *decodeFix
		var st decodeStep
		b.Run(fmt.Sprintf("%d rows at %d", B, ctx), func(b *testing.B) {
			g := gpu(b)
			if f == nil {
				f = newDecodeBench(b, g, cfg, B*((ctx+decodePageSize-1)/decodePageSize)+B, uint64(B))
				st = f.step(slices.Repeat([]int{ctx}, B), true)
			}
			reps := 20
			var td, tf time.Duration
			for range b.N {
				td += f.timeStep(b, st, true, reps)
				tf += f.timeStep(b, st, false, reps)
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
			b.ReportMetric(ms(td), "decode_ms")
			b.ReportMetric(ms(tf), "f32_ms")
			b.ReportMetric(tf.Seconds()/td.Seconds(), "f32/decode")
			b.ReportMetric(float64(decodeSlicesFor(g, cfg, B)), "slices")
			b.ReportMetric(float64(decodeFilled(ctx, decodeSlicesFor(g, cfg, B))), "filled")
		})
		if f != nil {
			f.free()
		}
	}
}

// timeStep returns the mean wall time of one Attention call of st (decode
// kernel on or off) over reps calls inside one step (as the attention
// layers of a step, they share the metadata and the partials), measured on
// a second pass after a first that grows the scratch arena to its size.
func (f *decodeFix) timeStep(tb testing.TB, st decodeStep, on bool, reps int) time.Duration {
	tb.Helper()
	g := f.g
	syncLaunch := g.syncLaunch
	g.syncLaunch = false
	defer func() { g.syncLaunch = syncLaunch }()
	var d time.Duration
	withDecodeAttn(on, 0, func() {
		q, k, v, gate := f.tensors(st)
		defer g.Free(q, k, v, gate)
		for range 2 {
			g.BeginStep("", kernels.StepInputs{Batch: st.bt})
			g.Attention(q, k, v, gate, f.cache, 0, st.bt, f.cfg)
			if err := g.Synchronize(); err != nil {
				tb.Fatal(err)
			}
			start := time.Now()
			for range reps {
				g.Attention(q, k, v, gate, f.cache, 0, st.bt, f.cfg)
			}
			if err := g.Synchronize(); err != nil {
				tb.Fatal(err)
			}
			d = time.Since(start) / time.Duration(reps)
			g.EndStep(nil)
			g.ResetScratch()
		}
	})
	return d
}

// TestDecodeAttnConstantsMatchSource (host only): the Go side's block sizes
// and slice limit of the decode attention kernels are the source's.
func TestDecodeAttnConstantsMatchSource(t *testing.T) {
	src, err := os.ReadFile("kernels/40_attention.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"DA_WARPS": decodeAttnThreads / 32, "DA_MIN_SLICE": decodeAttnMinSlice,
		"DC_THREADS": decodeCombineThreads, "DC_MAX_SLICES": decodeCombineMaxSlices} {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Errorf("no %s in the source", name)
			continue
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("%s is %d in the source, %d in Go", name, got, want)
		}
	}
	if decodeAttnMaxSlices > decodeCombineMaxSlices {
		t.Errorf("decodeAttnMaxSlices %d > DC_MAX_SLICES %d", decodeAttnMaxSlices, decodeCombineMaxSlices)
	}
	if w := 2 * decodeAttnThreads / 32; decodeAttnMinSlice < w || decodeAttnMinSlice%w != 0 {
		t.Errorf("DA_MIN_SLICE %d is no multiple of 2*DA_WARPS (%d)", decodeAttnMinSlice, w)
	}
	// decodeSliceLen's slices cover a row's positions, in order, each
	// filled one of at least decodeAttnMinSlice but the last.
	for _, S := range []int{1, 2, 3, 7, 128, 1024} {
		for n := 1; n <= 5000; n++ {
			c, k := decodeSliceLen(n, S), decodeFilled(n, S)
			if k > S || (k-1)*c >= n || k*c < n || (k > 1 && c < decodeAttnMinSlice) {
				t.Fatalf("%d positions in %d slices: slices of %d, %d filled", n, S, c, k)
			}
		}
	}
}
