//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"cohort/kernels"
)

// KVCache is a paged key/value cache in device memory, laid out
// [layer][page][pageSize][kvHeads][headDim] for k and for v (as in the CPU
// oracle), of float32 elements, or bf16 ones when bf16 (kvtype.go).
type KVCache struct {
	layers, pages, pageSize, kvHeads, headDim int // pages: all of them, the pad page included
	visible                                   int // the pages requests may take (Pages); a pad page follows them when pages > visible
	k, v                                      devptr
	bf16                                      bool
}

var _ kernels.KVCache = (*KVCache)(nil)

// PageSize returns the number of positions per page.
func (c *KVCache) PageSize() int { return c.pageSize }

// Pages returns the number of pages per layer requests may take.
func (c *KVCache) Pages() int { return c.visible }

// PadPage returns the page of pad rows (kernels.PadPager), -1 without one.
func (c *KVCache) PadPage() int32 {
	if c.pages > c.visible {
		return int32(c.visible)
	}
	return -1
}

// shape returns the cache's geometry for the kernels contract's checks.
func (c *KVCache) shape() kernels.CacheShape {
	return kernels.CacheShape{Layers: c.layers, Pages: c.pages, PageSize: c.pageSize, KVHeads: c.kvHeads, HeadDim: c.headDim}
}

// NewKVCache allocates a zeroed paged KV cache (a permanent allocation) of
// the backend's element type (b.kvBF16: COHORT_CUDA_KV, Options.KV). A bf16
// cache takes 2 bytes an element; the capacity plan (model/) still counts 4,
// so with bf16 it reserves twice the cache's memory (safe; the pages it
// could add are not used yet).
func (b *Backend) NewKVCache(layers, pages, pageSize, kvHeads, headDim int) kernels.KVCache {
	const op = "NewKVCache"
	all := pages + b.padPlaces()
	n := int64(numel(op, []int{layers, all, pageSize, kvHeads, headDim}))
	eb := kvElemBytes(b.kvBF16)
	bytes := (n*eb + 3) / 4 * 4 // whole 32-bit words for the memset
	c := &KVCache{layers: layers, pages: all, visible: pages, pageSize: pageSize, kvHeads: kvHeads, headDim: headDim, bf16: b.kvBF16,
		k: b.allocPermanent(op, bytes), v: b.allocPermanent(op, bytes)}
	for _, p := range []devptr{c.k, c.v} {
		if err := memsetD32(p, 0, bytes/4); err != nil {
			panic(fmt.Sprintf("cuda: %s: %v", op, err))
		}
	}
	return c
}

// attnMaxHeadDim is the largest head dim the attention kernel supports
// (8 values per lane of a warp).
const attnMaxHeadDim = 256

// Attention stores k and v of every row in the cache at its position, then
// computes causal GQA attention of each row's query over positions [0, p] of
// its sequence, scaled by 1/sqrt(headDim), softmax in float32, and multiplies
// by sigmoid(gate). Output [T, Heads·HeadDim]. With COHORT_CUDA_FLASH=1,
// sequences of many rows take the tensor-core kernel of
// attention_prefill.go (bf16 products, float32 softmax).
func (b *Backend) Attention(q, k, v, gate kernels.Tensor, cache kernels.KVCache, layer int, bt *kernels.Batch, cfg kernels.AttnConfig) kernels.Tensor {
	const op = "Attention"
	qt, kt, vt, gt := b.tensor(op, q), b.tensor(op, k), b.tensor(op, v), b.tensor(op, gate)
	c, ok := cache.(*KVCache)
	if !ok {
		panic(fmt.Sprintf("cuda: Attention: cache %T is not a *cuda.KVCache", cache))
	}
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	T := bt.Rows()
	check(op, kernels.CheckAttention(qt.shape, kt.shape, vt.shape, gt.shape, T, cfg, c.shape(), layer))
	if hd > attnMaxHeadDim {
		panic(fmt.Sprintf("cuda: Attention: head dim %d, at most %d", hd, attnMaxHeadDim))
	}
	check(op, kernels.CheckBatch(bt, T, false))
	out := b.newTensor(op, T, H*hd)
	if T == 0 {
		return out
	}

	dpos, dpageOff, dpages := b.attentionMeta(op, bt, c)
	scale := 1 / float32(math.Sqrt(float64(hd)))
	flash := b.useFlash(bt, cfg)
	if !flash && b.useDecodeAttn(cfg) && decodeKVFused && allDecode(bt) {
		// The decode kernel stores each row's k and v itself (attn_decode_store).
		b.attentionDecode(op, out.ptr, qt.ptr, gt.ptr, c, dpos, dpageOff, dpages, layer, T, cfg, scale, kt.ptr, vt.ptr)
		return out
	}
	kvw := KV * hd
	b.launch(op, kvEntry("kv_write_f32", c.bf16), [3]int{T, 1, 1}, [3]int{min(256, (kvw+31)/32*32), 1, 1}, 0,
		c.k, c.v, kt.ptr, vt.ptr, dpos, dpageOff, dpages, kvw, c.pageSize, c.pages, layer)
	if flash { // long sequences on tensor cores (attention_prefill.go)
		b.attentionFlash(op, out, qt, gt, c, dpos, dpageOff, dpages, layer, bt, cfg, scale)
		return out
	}
	if b.useDecodeAttn(cfg) {
		b.attentionDecode(op, out.ptr, qt.ptr, gt.ptr, c, dpos, dpageOff, dpages, layer, T, cfg, scale, 0, 0)
		return out
	}
	b.launch(op, kvEntry("attention_f32", c.bf16), [3]int{T, H, 1}, [3]int{128, 1, 1}, 0,
		out.ptr, qt.ptr, gt.ptr, c.k, c.v, dpos, dpageOff, dpages, H, KV, hd, c.pageSize, c.pages, layer, scale)
	return out
}

// Decode attention (attention_decode_g* and attention_decode_combine of
// kernels/40_attention.cu) takes the rows that attention_f32 took in
// Attention (every row of a batch that does not go to attentionFlash:
// decode steps, CUDA-graph steps, float32 weights, COHORT_CUDA_FLASH=0):
// a block per (row, KV head, group of up to 4 of its query heads, key
// slice), so each key and value read serves the group's query heads, and
// the keys of a row split into S slices so that a few rows of long
// contexts still fill the SMs. S depends only on the number of rows and
// the heads (decodeAttnSlices), never on the positions, so a CUDA graph
// captured at one context replays at any other; each block derives its
// slice's bounds from the row's position: about n/S of the row's n
// positions, at least decodeAttnMinSlice, so a short row fills its first few
// slices and leaves the rest empty. With S = 1 the blocks write the gated
// output; otherwise they write partial results (maximum, sum, unnormalized
// output; an empty slice only its maximum and sum, as empty) to scratch,
// one buffer a step that every attention layer reuses, and
// attention_decode_combine merges the slices in a fixed order, reading no
// output of an empty slice. The result depends only on the batch's shape
// and inputs (positions included). Deterministic mode keeps attention_f32
// (its rows must not depend on the batch), and so does
// COHORT_CUDA_DECODE_ATTN=0 (A/B runs).

// decodeAttn enables the decode attention kernel: unless
// COHORT_CUDA_DECODE_ATTN=0 at start-up; tests and benchmarks set it
// directly.
var decodeAttn = os.Getenv("COHORT_CUDA_DECODE_ATTN") != "0"

// decodeAttnForce, when positive, is the number of key slices of every
// decode attention launch (tests: many slices, empty ones); 0 leaves it to
// decodeAttnSlices.
var decodeAttnForce = 0

const (
	// decodeAttnThreads is DA_WARPS*32 of kernels/40_attention.cu.
	decodeAttnThreads = 128
	// decodeAttnWaves is how many waves (the blocks the device holds at
	// once) the grid may fill: more than one, so that rows of different
	// lengths even out.
	decodeAttnWaves = 2
	// decodeAttnMaxSlices caps S (a row of a few positions then has many
	// empty slices, and the partials grow with S).
	decodeAttnMaxSlices = 128
	// decodeAttnMinSlice is DA_MIN_SLICE of kernels/40_attention.cu: the
	// fewest positions a slice takes (the last one of a row excepted).
	decodeAttnMinSlice = 16
	// decodeCombineThreads and decodeCombineMaxSlices are DC_THREADS (the
	// most threads of a block) and DC_MAX_SLICES of
	// kernels/40_attention.cu.
	decodeCombineThreads   = 1024
	decodeCombineMaxSlices = 1024
	// decodeCombineGroups is how many groups of slices a combine block
	// sums in parallel at most (decodeCombineBlock).
	decodeCombineGroups = 16
)

// decodeCombineBlock returns the threads of an attention_decode_combine
// block for head dim hd and S slices: hd/4 a group of slices, as many
// groups as slices up to decodeCombineGroups, in whole warps, at most
// decodeCombineThreads (16 groups of 64 threads at the 4b heads' hd 256).
// It depends on hd and S alone, as the combine's order of sums does.
func decodeCombineBlock(hd, S int) int {
	t := hd / 4 * min(max(S, 1), decodeCombineGroups)
	return min((t+31)/32*32, decodeCombineThreads)
}

// decodeAttnGroup returns the query heads a block takes (GM of the kernel:
// 1, 2 or 4) for g query heads per KV head, and its entry.
func decodeAttnGroup(g int) (gm int, name string) {
	switch {
	case g <= 1:
		gm = 1
	case g == 2:
		gm = 2
	default:
		gm = 4
	}
	return gm, fmt.Sprintf("attention_decode_g%d", gm)
}

// decodeAttnSlices returns S for rows rows of blocks blocks each (KV heads
// times head groups) on lanes blocks at once: the most slices that keep
// the grid within decodeAttnWaves full waves (a last wave mostly idle would
// cost as much as a full one), at least 1, at most decodeAttnMaxSlices;
// force > 0 overrides it.
func decodeAttnSlices(rows, blocks, lanes, force int) int {
	if force > 0 {
		return force
	}
	n := rows * blocks
	if n <= 0 {
		return 1
	}
	return min(max(decodeAttnWaves*max(lanes, 1)/n, 1), decodeAttnMaxSlices)
}

// useDecodeAttn reports whether Attention's rows that attentionFlash does
// not take go to the decode attention kernel (not attention_f32).
func (b *Backend) useDecodeAttn(cfg kernels.AttnConfig) bool {
	return decodeAttn && !b.det && cfg.KVHeads > 0 && cfg.Heads%cfg.KVHeads == 0 &&
		cfg.HeadDim%4 == 0 && cfg.HeadDim <= attnMaxHeadDim
}

// decodeKVFused has the decode attention kernel store a decode step's k and
// v (COHORT_CUDA_KV_FUSE=1: one launch fewer in each attention layer).
// Off by default: on the H200 (cohort bench, 4b-shape, one run each,
// 2026-12-03) the steady decode step took 3.073, 3.670 and 5.212 ms at
// batch 1, 8 and 32 with it against 3.083, 3.655 and 5.111 without.
var decodeKVFused = os.Getenv("COHORT_CUDA_KV_FUSE") == "1"

// attentionDecode computes Attention's output out for its T rows after
// kv_write_f32 has stored the step's k and v (see the comment above), or,
// for decode rows, storing them itself from knew and vnew (0: stored).
func (b *Backend) attentionDecode(op string, out, q, gate devptr, c *KVCache, dpos, dpageOff, dpages devptr,
	layer, T int, cfg kernels.AttnConfig, scale float32, knew, vnew devptr) {
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	g := H / KV
	gm, name := decodeAttnGroup(g)
	name = kvEntry(name, c.bf16)
	hg := (g + gm - 1) / gm
	S := decodeAttnSlices(T, KV*hg, b.occupancy(name, decodeAttnThreads)*max(b.sms, 1), decodeAttnForce)
	if S > decodeCombineMaxSlices {
		panic(fmt.Sprintf("cuda: %s: %d key slices, at most %d", op, S, decodeCombineMaxSlices))
	}
	var part, ml devptr
	if S > 1 {
		bytes := int64(T) * int64(H) * int64(S) * int64(hd+2) * 4
		part = b.sharedMeta(metaKey{kind: "decodeAttnPartials", n: int(bytes)},
			func() devptr { return b.allocScratch(op+" (decode partials)", bytes) })
		ml = part + devptr(int64(T)*int64(H)*int64(S)*int64(hd)*4)
	}
	b.launch(op, name, [3]int{T, KV * hg, S}, [3]int{decodeAttnThreads, 1, 1}, 0,
		out, part, ml, q, gate, c.k, c.v, dpos, dpageOff, dpages, H, KV, hd, c.pageSize, c.pages, layer, scale, S, knew, vnew)
	if S > 1 {
		b.launch(op, "attention_decode_combine", [3]int{T, H, 1}, [3]int{decodeCombineBlock(hd, S), 1, 1}, 0,
			out, gate, part, ml, H, hd, S)
	}
}

// attentionMeta uploads, once per step, the rows' positions, where each
// row's sequence starts in the flattened page lists, and the page lists
// (in a buffer of the cache's page count, so a graph step's pages may grow).
func (b *Backend) attentionMeta(op string, bt *kernels.Batch, c *KVCache) (pos, pageOff, pages devptr) {
	off, all := pageLayout(bt, c)
	key := func(kind string) metaKey { return metaKey{kind: kind, src: unsafe.Pointer(bt), n: c.pages} }
	pos = b.positionsMeta(op, bt.Positions)
	offGen := b.stepBatch(bt, func(in *kernels.StepInputs) []int32 { off, _ := pageLayout(in.Batch, c); return off })
	allGen := b.stepBatch(bt, func(in *kernels.StepInputs) []int32 { _, all := pageLayout(in.Batch, c); return all })
	pageOff = b.sharedMeta(key("pageOff"), func() devptr { return b.uploadInts(op, off, offGen) })
	pages = b.sharedMeta(key("pages"), func() devptr { return b.uploadIntsCap(op, all, c.pages+decodeMaxPads, allGen) })
	return pos, pageOff, pages
}

// pageLayout flattens the sequences' page lists (all) and gives each row
// the offset of its sequence's list in it (off), checking every page and
// position against the cache.
func pageLayout(bt *kernels.Batch, c *KVCache) (off, all []int32) {
	check("Attention", kernels.CheckPages(bt, c.shape()))
	off = make([]int32, bt.Rows())
	for _, s := range bt.Seqs {
		first := int32(len(all))
		all = append(all, s.Pages...)
		for r := s.Start; r < s.End(); r++ {
			off[r] = first
		}
	}
	return off, all
}
