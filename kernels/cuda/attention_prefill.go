//go:build cuda

package cuda

import (
	"cmp"
	"container/heap"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"cohort/kernels"
)

// Prefill attention on tensor cores (kernels/45_attention_prefill.cu): for
// the sequences of an Attention batch that bring at least flashMinRows
// rows, a flash-attention kernel (tiles of queries × keys in shared memory,
// online softmax, bf16 mma.sync with float32 accumulation) over the paged
// cache; the other rows (decode rows, short pieces) keep attention_f32.
//
// It is on by default (COHORT_CUDA_FLASH=0 turns it off) since its tests
// passed on the H200 (2026-12-01; 8.6x the float32 kernel at 8,192 rows,
// 12.2 against 104.7 ms a layer, and Cohort's distance to HF f32 at an
// 8,192-token prompt unchanged at 0.13). Attention never takes it with
// float32 weights (COHORT_CUDA_WEIGHTS=f32 is the exact mode: its bf16
// tiles would cost that mode its 1e-4 agreement with HF f32), while a CUDA
// graph is recorded or replayed, or for head dims other than 64, 128 and
// 256.
//
// Split keys: the grid is tiles × KV heads, so a short chunk after a long
// cached context (128 rows after 8,064 positions, 4b heads: 4 tiles × 4 KV
// heads = 16 blocks on 132 SMs, each walking 8k keys) leaves most of the
// GPU idle. planFlashSplit then cuts the tiles' key ranges into slices
// (about two waves of blocks in all); attention_prefill_split_hd* computes
// each slice's partial output, maximum and sum into scratch, and
// attention_prefill_combine merges them in slice order and applies the gate
// (deterministic: the same batch gives the same bits). Batches whose tiles
// already fill the SMs (a 2,048-row chunk, a whole prompt) keep the single
// pass, as does COHORT_CUDA_FLASH_SPLIT=0. The partials take at most about
// 4·SMs·(head dim + 2)·512 bytes of scratch a step (34 MiB in the example),
// one buffer that every attention layer of the step reuses. The slicing
// has a fixed length by default; COHORT_CUDA_FLASH_BALANCE=1 takes
// planFlashBalanced's makespan search (flashBalance) instead, which also
// splits causal prompts whose few tiles finish unevenly (1,024 rows after
// 0). Measured on the H200 (BenchmarkAttentionPrefillSwitches, one layer
// of 4b heads, 2026-12-02, one run) it lost on the causal prompts it
// splits where the fixed planner does not: 1,024 rows after 0 0.180
// against 0.176 ms, 512 after 0 0.121 against 0.101; it was equal where
// neither splits (2,048 rows after 0 to 6,144), and ahead where both split,
// differently, a short chunk after a long context: 0.079 against 0.083 ms
// for 128 rows after 3,000.
//
// At head dim 256 over a bf16 cache the entries have _ldm twins (S = Q·Kᵀ's
// fragments through ldmatrix, the same bits), taken unless
// COHORT_CUDA_FLASH_LDM=0 (flashLDM), and _wg twins (both products on
// Hopper's warpgroup MMA, kernels/46_attention_prefill_wg.cu, with _wgp,
// _wgt and _wgc twins that schedule the same work differently), taken
// before them on an sm_90a image as COHORT_CUDA_FLASH_WG
// says (flashWG).

// flashAttention enables the tensor-core prefill attention kernel: unless
// COHORT_CUDA_FLASH=0 at start-up; tests and benchmarks set it directly.
var flashAttention = os.Getenv("COHORT_CUDA_FLASH") != "0"

// flashF32Weights lets the kernel run on a backend with float32 weights
// too: the differential tests, which use one, set it.
var flashF32Weights = false

// flashMinRows is the length from which a sequence of an Attention batch
// takes the tensor-core kernel (a tile holds flashTileRows query vectors, so
// a few rows would waste most of it). A variable so that tests can send
// every sequence there.
var flashMinRows = 16

// flashSplit lets attentionFlash split the key range of its tiles across
// blocks (attention_prefill_split_hd*, then attention_prefill_combine) when
// the tiles alone would leave the SMs mostly idle: unless
// COHORT_CUDA_FLASH_SPLIT=0 at start-up (the single-pass kernel for every
// batch, for A/B runs); tests and benchmarks set it directly.
var flashSplit = os.Getenv("COHORT_CUDA_FLASH_SPLIT") != "0"

// flashLDM picks the *_ldm twins of the head dim 256 entries over a bf16
// cache (attention_prefill_kvbf16_hd256_ldm, attention_prefill_split_
// kvbf16_hd256_ldm: S = Q·Kᵀ's fragments through ldmatrix, the same
// products in the same order, so the same bits): unless
// COHORT_CUDA_FLASH_LDM=0 at start-up (the entries without, for A/B runs);
// tests and benchmarks set it directly.
var flashLDM = os.Getenv("COHORT_CUDA_FLASH_LDM") != "0"

// flashLDMEntry returns entry's *_ldm twin when flashLDM and there is one
// (entry as kvEntry names it), else entry.
func flashLDMEntry(entry string) string {
	if flashLDM && flashHasTwins(entry) {
		return entry + "_ldm"
	}
	return entry
}

// flashHasTwins reports whether entry (as kvEntry names it) has _ldm and
// _wg twins: the head dim 256 entries over a bf16 cache.
func flashHasTwins(entry string) bool {
	return entry == "attention_prefill_kvbf16_hd256" || entry == "attention_prefill_split_kvbf16_hd256"
}

// flashWG picks the wgmma twins of the head dim 256 entries over a bf16
// cache (kernels/46_attention_prefill_wg.cu: the products on Hopper's
// warpgroup MMA, straight from shared memory) on a backend that loaded an
// sm_90a image, as COHORT_CUDA_FLASH_WG says at start-up: unset or 1 the
// *_wg entries (the default), pipe the *_wgp ones (each tile's softmax
// overlapping the previous tile's P·V), turns the *_wgt ones (the block's
// two warpgroups taking turns at the tensor cores), copies the *_wgc ones
// (_wg with the next tile's copies issued while the tensor cores compute
// S; not yet run on a GPU), 0 none (the _ldm entries). All give the _ldm
// entries' bits; on an H100 (docs/gpu.md, phase 19) _wg ran an 8k
// prompt's attention 1.30× as fast as _ldm, _wgt 1.13× and _wgp 0.99×
// (before its reordering against ptxas's serialization, not yet run).
// Tests and benchmarks set it directly ("" is off).
var flashWG = flashWGSuffix(os.Getenv("COHORT_CUDA_FLASH_WG"))

// flashWGSuffix maps a COHORT_CUDA_FLASH_WG value to the entries' suffix
// ("" for none).
func flashWGSuffix(v string) string {
	switch v {
	case "0":
		return ""
	case "pipe":
		return "_wgp"
	case "turns":
		return "_wgt"
	case "copies":
		return "_wgc"
	}
	return "_wg"
}

// flashEntry returns the entry that runs entry (as kvEntry names it) on
// b: its wgmma twin (flashWG on an sm_90a image), else flashLDMEntry's.
func (b *Backend) flashEntry(entry string) string {
	if flashWG != "" && b.wgmma && flashHasTwins(entry) {
		return entry + flashWG
	}
	return flashLDMEntry(entry)
}

// flashSmemFor is the dynamic shared memory of flash entry name for head
// dim hd over a bf16 cache when bf16: flashSmemKV's, and for a wgmma entry
// 1,024 bytes more, from which the kernel aligns its tiles to the
// 128-byte swizzle's 1,024-byte pattern.
func flashSmemFor(name string, hd int, bf16 bool) int {
	if strings.Contains(name, "_wg") { // _wg, _wgp, _wgt, _wgc
		return flashSmemKV(hd, bf16) + 1024
	}
	return flashSmemKV(hd, bf16)
}

// flashSplitForce, when positive, makes every tile longer than that many key
// tiles split into slices of that many (tests: many slices, slices past
// some M-rows' positions); 0 leaves the choice to flashSplitPlan.
var flashSplitForce = 0

// flashSplitRuns counts the attentionFlash calls that took the split path
// (tests check that they exercised it).
var flashSplitRuns atomic.Int64

const (
	// flashSplitWaves is how many blocks an SM (times the blocks it holds
	// at once) the split aims at: enough that the slices even out.
	flashSplitWaves = 2
	// flashSplitMinKeys is the shortest slice in key tiles: below it a
	// block's fixed cost (its Q tile, its partial slot) outweighs its keys.
	flashSplitMinKeys = 8
	// flashSplitGain is the estimated time, relative to the single pass,
	// under which the split is taken.
	flashSplitGain = 0.9
)

// flashTileRows is FA_BM of kernels/45_attention_prefill.cu: the (row,
// query head) pairs, all of one KV head, that one block works on.
const flashTileRows = 128

// flashThreads is FA_THREADS of kernels/45_attention_prefill.cu.
const flashThreads = 256

// flashKernel returns the kernel for head dim hd, or "" if there is none.
func flashKernel(hd int) string {
	switch hd {
	case 64, 128, 256:
		return fmt.Sprintf("attention_prefill_hd%d", hd)
	}
	return ""
}

// flashKeyTile is BN of the kernel for head dim hd over a float32 cache:
// the key positions of one shared-memory tile.
func flashKeyTile(hd int) int { return 4096 / hd }

// flashKeyTileKV is BN of the kernel for head dim hd over a cache of bf16
// elements when bf16 (FA_BN_KV<hd> of the source; head dim 64 keeps 64):
// without the float32 staging the larger tiles fit, and each tile's fixed
// costs (a barrier, the softmax's row maxima, rescaling the output
// accumulator) are shared by more keys.
func flashKeyTileKV(hd int, bf16 bool) int {
	if !bf16 {
		return flashKeyTile(hd)
	}
	switch hd {
	case 128:
		return flashKVTile128
	case 256:
		return flashKVTile256
	}
	return flashKeyTile(hd)
}

// The bf16 cache's key tiles (FA_BN_KV128, FA_BN_KV256 of the source;
// TestFlashConstantsMatchSource checks that they agree).
const (
	flashKVTile128 = 64
	flashKVTile256 = 64
)

// flashSmem is the kernel's dynamic shared memory for head dim hd: the bf16
// Q tile and K and V tiles, and two float32 staging stages of K and V.
func flashSmem(hd int) int {
	bn := flashKeyTile(hd)
	return (flashTileRows*hd+2*bn*hd)*2 + 4*bn*hd*4
}

// flashSmemKV is flashSmem for a cache of bf16 elements when bf16: the Q
// tile and two stages of the bf16 K and V tiles, no float32 staging.
func flashSmemKV(hd int, bf16 bool) int {
	if !bf16 {
		return flashSmem(hd)
	}
	bn := flashKeyTileKV(hd, true)
	return (flashTileRows*hd + 4*bn*hd) * 2
}

// flashTakes reports whether sequence s of bt goes to the tensor-core
// kernel: long enough, and its rows at consecutive positions from Cached
// (the kernel derives every row's position from the first).
func flashTakes(s kernels.Seq, bt *kernels.Batch) bool {
	if s.Len < max(flashMinRows, 1) {
		return false
	}
	for i := range s.Len {
		if int(bt.Positions[s.Start+i]) != s.Cached+i {
			return false
		}
	}
	return true
}

// useFlash reports whether Attention should run this batch through
// attentionFlash (never in deterministic mode, where every row takes
// attention_f32).
func (b *Backend) useFlash(bt *kernels.Batch, cfg kernels.AttnConfig) bool {
	if !flashAttention || b.det || (b.weights != "bf16" && !flashF32Weights) || b.graph.mode != graphOff || flashKernel(cfg.HeadDim) == "" || cfg.KVHeads <= 0 {
		return false
	}
	return slices.ContainsFunc(bt.Seqs, func(s kernels.Seq) bool { return flashTakes(s, bt) })
}

// flashTiles lists the kernel's tiles for the sequences that flashTakes,
// as {first row, length, first M-row, positions it sees} (the kernel
// ignores the last; M-row u of a sequence is query
// head u % g of its row u / g, g = query heads per KV head), the tiles that
// see the most positions first so that the long ones do not trail. rest
// holds the [start, end) row ranges left to attention_f32, merged where
// adjacent.
func flashTiles(bt *kernels.Batch, g int) (tiles []int32, rest [][2]int) {
	type tile struct{ row0, n, u0, work int }
	var ts []tile
	for _, s := range bt.Seqs {
		if !flashTakes(s, bt) {
			if k := len(rest); k > 0 && rest[k-1][1] == s.Start {
				rest[k-1][1] = s.End()
			} else if s.Len > 0 {
				rest = append(rest, [2]int{s.Start, s.End()})
			}
			continue
		}
		for u0 := 0; u0 < s.Len*g; u0 += flashTileRows {
			last := min(s.Len-1, (u0+flashTileRows-1)/g)
			ts = append(ts, tile{s.Start, s.Len, u0, s.Cached + last + 1})
		}
	}
	slices.SortStableFunc(ts, func(a, b tile) int { return b.work - a.work })
	tiles = make([]int32, 0, 4*len(ts))
	for _, t := range ts {
		tiles = append(tiles, int32(t.row0), int32(t.n), int32(t.u0), int32(t.work))
	}
	return tiles, rest
}

// attentionFlash computes Attention's output out for bt after kv_write_f32
// has stored the step's k and v: the tensor-core kernel for the sequences
// that flashTakes (keys split across blocks where attentionFlashSplit
// takes them), and for each run of the other rows (a mixed step's decode
// rows) the decode kernels (flashRestDecode) or attention_f32, their
// per-row arguments offset to the run's first row.
func (b *Backend) attentionFlash(op string, out, qt, gt *Tensor, c *KVCache, dpos, dpageOff, dpages devptr,
	layer int, bt *kernels.Batch, cfg kernels.AttnConfig, scale float32) {
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	name := flashKernel(hd)
	if name != "" {
		name = b.flashEntry(kvEntry(name, c.bf16))
	}
	smem := flashSmemFor(name, hd, c.bf16)
	if name == "" || KV <= 0 || H%KV != 0 || out.n != bt.Rows()*H*hd {
		panic(fmt.Sprintf("cuda: %s (flash): out %v, %d rows, cfg %+v (head dim 64, 128 or 256)", op, out.shape, bt.Rows(), cfg))
	}
	tiles, rest := flashTiles(bt, H/KV)
	if n := len(tiles) / 4; n > 0 && !b.attentionFlashSplit(op, out, qt, gt, c, dpos, dpageOff, dpages, layer, bt, cfg, scale, tiles) {
		dt := b.sharedMeta(metaKey{kind: "flashTiles", src: unsafe.Pointer(bt), n: H / KV},
			func() devptr { return b.uploadInts(op, tiles, nil) })
		b.allowSmem(op, name, smem)
		b.launch(op, name, [3]int{n * KV, 1, 1}, [3]int{flashThreads, 1, 1}, smem,
			out.ptr, qt.ptr, gt.ptr, c.k, c.v, dpos, dpageOff, dpages, dt, H, KV, c.pageSize, c.pages, layer, scale)
	}
	rowBytes := devptr(4 * H * hd)
	for _, r := range rest {
		off := devptr(r[0])
		if flashRestDecode && b.useDecodeAttn(cfg) {
			// Each row on its own, as a decode step's (keys split across
			// blocks, query heads of a KV head together).
			b.attentionDecode(op, out.ptr+off*rowBytes, qt.ptr+off*rowBytes, gt.ptr+off*rowBytes, c, dpos+4*off, dpageOff+4*off, dpages,
				layer, r[1]-r[0], cfg, scale, 0, 0)
			continue
		}
		b.launch(op, kvEntry("attention_f32", c.bf16), [3]int{r[1] - r[0], H, 1}, [3]int{128, 1, 1}, 0,
			out.ptr+off*rowBytes, qt.ptr+off*rowBytes, gt.ptr+off*rowBytes, c.k, c.v, dpos+4*off, dpageOff+4*off, dpages,
			H, KV, hd, c.pageSize, c.pages, layer, scale)
	}
}

// flashRestDecode sends the rows that the flash kernel leaves to the decode
// attention (attentionDecode), as a decode step's rows
// (COHORT_CUDA_FLASH_REST=f32: attention_f32, one block a row and head).
var flashRestDecode = os.Getenv("COHORT_CUDA_FLASH_REST") != "f32"

// flashSplitKernel returns the split-keys kernel for head dim hd (one that
// flashKernel has).
func flashSplitKernel(hd int) string { return fmt.Sprintf("attention_prefill_split_hd%d", hd) }

// flashCombineRows is R of attention_prefill_combine: the M-rows of one of
// its blocks for head dim hd.
func flashCombineRows(hd int) int { return 4 * flashThreads / hd }

// flashSlotFloats is the float32 values of one partial slot of one KV head:
// the accumulator and the maximum and sum of each of its M-rows.
func flashSlotFloats(hd int) int { return flashTileRows * (hd + 2) }

// flashSplitPlan is the work of a split: items for
// attention_prefill_split_hd* (8 values each: {row0, len, u0, kLo},
// {kHi, slot, 0, 0}, slot -1 for a tile's only slice), comb for
// attention_prefill_combine (8 values a sliced tile: {row0, len, u0, first
// slot}, {slices, 0, 0, 0}) and the partial slots the items fill.
type flashSplitPlan struct {
	items, comb []int32
	slots       int
}

// planFlashSplit decides whether to split tiles (flashTiles' list: the
// fourth value of each is the positions it sees, the largest first) for a
// kernel of key tiles of bn positions, head dim hd and kv KV heads, on
// lanes blocks at once (SMs × blocks an SM; lanes0 for the single-pass
// kernel, lanes for the split one), and how. force > 0 is flashSplitForce
// (slices of force key tiles wherever a tile is longer). balance picks the
// planner: the fixed slice length below or, with
// COHORT_CUDA_FLASH_BALANCE=1, flashBalance's makespan search
// (planFlashBalanced).
//
// Fixed slice length: tile i sees w_i key tiles; the single pass runs kv
// blocks of each. The slice length L (key tiles, the same for every tile)
// is the total work over flashSplitWaves·lanes slices, at least
// flashSplitMinKeys; tile i then has ⌈w_i/L⌉ slices, the last the
// shorter, all but the last ending on a key tile edge. With every tile in
// one slice there is nothing to split. Otherwise both schedules are
// estimated (blocks taken in order by whichever lane frees first, each
// costing its key tiles plus its fixed work: Q tile, partial slot, and the
// combine's traffic spread over the lanes) and the split is kept if it is
// under flashSplitGain of the single pass.
//
// Either way the items go out the most expensive first; the slots of a
// tile are consecutive, in slice order, and the combine merges them in
// that order (the same batch gives the same bits).
func planFlashSplit(tiles []int32, bn, hd, kv, lanes0, lanes, force int, balance bool) (flashSplitPlan, bool) {
	n := len(tiles) / 4
	if n == 0 || kv <= 0 {
		return flashSplitPlan{}, false
	}
	lanes0, lanes = max(lanes0, 1), max(lanes, 1)
	w := make([]int, n)
	total, most := 0, 0
	for i := range n {
		w[i] = (int(tiles[4*i+3]) + bn - 1) / bn
		total += kv * w[i]
		most = max(most, w[i])
	}
	if force <= 0 && balance {
		return planFlashBalanced(tiles, w, bn, hd, kv, lanes0, lanes)
	}
	L := force
	if L <= 0 {
		L = max(flashSplitMinKeys, (total+flashSplitWaves*lanes-1)/(flashSplitWaves*lanes))
	}
	if L >= most {
		return flashSplitPlan{}, false
	}
	// Fixed work of a block in key tiles (a key tile moves bn·hd·8 bytes;
	// a Q tile or a partial slot flashTileRows·hd·4).
	fixed := flashTileRows*hd*4/(bn*hd*8) + 2
	var its []flashItem
	var p flashSplitPlan
	for i := range n {
		ns := (w[i] + L - 1) / L
		if ns == 1 {
			its = append(its, flashItem{i, 0, int(tiles[4*i+3]), -1, float64(w[i] + fixed)})
			continue
		}
		p.comb = append(p.comb, tiles[4*i], tiles[4*i+1], tiles[4*i+2], int32(p.slots), int32(ns), 0, 0, 0)
		for k := range ns {
			lo, hi := k*L*bn, min((k+1)*L*bn, int(tiles[4*i+3]))
			its = append(its, flashItem{i, lo, hi, p.slots + k, float64((hi-lo+bn-1)/bn + 2*fixed - 2)})
		}
		p.slots += ns
	}
	if force <= 0 {
		single := make([]float64, n)
		for i := range n {
			single[i] = float64(w[i] + fixed)
		}
		split := make([]float64, len(its))
		for i, it := range its {
			split[i] = it.cost
		}
		slices.SortStableFunc(split, func(a, b float64) int { return cmp.Compare(b, a) })
		combine := 2 + p.slots*kv*flashTileRows*hd*4*2/(lanes*bn*hd*8)
		if t0, t1 := flashMakespan(single, kv, lanes0), flashMakespan(split, kv, lanes)+float64(combine); t1 >= flashSplitGain*t0 {
			return flashSplitPlan{}, false
		}
	}
	p.items = flashItems(tiles, its)
	return p, true
}

// flashItem is one block's work of a split plan (for each KV head): tile
// t's positions [lo, hi) into partial slot slot (-1: the tile's only
// slice, which ends as the single pass does), at the estimated cost.
type flashItem struct {
	t, lo, hi, slot int
	cost            float64
}

// flashItems sorts its by cost, the largest first (stably), and writes
// them out as planFlashSplit's items.
func flashItems(tiles []int32, its []flashItem) []int32 {
	slices.SortStableFunc(its, func(a, b flashItem) int { return cmp.Compare(b.cost, a.cost) })
	items := make([]int32, 0, 8*len(its))
	for _, it := range its {
		items = append(items, tiles[4*it.t], tiles[4*it.t+1], tiles[4*it.t+2], int32(it.lo), int32(it.hi), int32(it.slot), 0, 0)
	}
	return items
}

const (
	// flashBalanceGain is the estimated time, relative to the single
	// pass, under which planFlashBalanced takes a split (its estimate
	// counts the split's extra costs itself, so the margin is for the
	// model's error only).
	flashBalanceGain = 0.95
	// flashBalanceMaxWaves bounds the blocks of a balanced split plan, in
	// lanes (the search stops before a plan past it).
	flashBalanceMaxWaves = 6
	// flashBalanceMaxSlots bounds its partial slots times KV heads, in
	// lanes: the scratch stays under flashBalanceMaxSlots·lanes·(head dim
	// + 2)·512 bytes, the fixed planner's bound (66 MiB at head dim 256 on
	// 132 SMs).
	flashBalanceMaxSlots = 4
)

// flashBalance lets planFlashSplit search the slicing that minimizes the
// estimated makespan (planFlashBalanced), so that causal prefills whose
// tiles alone would finish unevenly (1,024 rows after 0: 128 blocks on 132
// SMs, the last walking 16 key tiles, the first one) can split too: with
// COHORT_CUDA_FLASH_BALANCE=1 at start-up (off by default: it measured
// slower on the causal prompts it alone splits, see the top of this
// file); tests and benchmarks set it directly.
var flashBalance = os.Getenv("COHORT_CUDA_FLASH_BALANCE") == "1"

// flashBalanceBit is flashBalance as 1 or 0 (a part of the split
// metadata's key: the two planners' plans differ).
func flashBalanceBit() int {
	if flashBalance {
		return 1
	}
	return 0
}

// flashBlockCost is the cost model of planFlashBalanced for head dim hd
// and key tiles of bn positions, in the time one block takes over one key
// tile (its K and V copied in, S = Q·Kᵀ and O += P·V for 128 M-rows: the
// unit, taken as the time of bn·hd·8 bytes of traffic). fixed is what a
// block costs besides its key tiles: 1 for its start (the launch, the
// first tile's copy that no math hides, the epilogue) plus its Q tile in
// and its output (or its partial slot) out, q = flashTileRows·hd·4 bytes
// each; 3 for head dim 256 over bf16 tiles of 64 keys. perSlot (q) is the
// combine's cost for one partial slot of one KV head.
func flashBlockCost(hd, bn int) (fixed, perSlot float64) {
	q := float64(flashTileRows*hd*4) / float64(bn*hd*8)
	return 1 + 2*q, q
}

// flashCombineFixed is the combine's fixed cost in key tiles: its launch,
// and the split kernel's tail that it waits for.
const flashCombineFixed = 2

// planFlashBalanced is planFlashSplit's makespan search (flashBalance)
// over tiles of w key tiles (w[i] for tile i, kv blocks each, the largest
// first).
//
// Cost model (units of one block over one key tile; flashBlockCost): a
// block costs its key tiles plus fixed; blocks start in grid order on
// whichever of the lanes frees first (flashMakespan: the grid goes out
// the most expensive first, so this is the longest-first list schedule),
// the single pass on lanes0, the split on lanes, which the combine then
// follows at flashCombineFixed + perSlot·(slots + 2·sliced tiles)·kv/lanes
// (it reads every slot, and the gate, and writes the output of each
// sliced tile). The single pass's estimate is t0.
//
// The search: a split cannot beat its work spread evenly over the lanes
// plus the combine's fixed cost, so when that bound is not under
// flashBalanceGain·t0 (tiles that already fill the lanes evenly: 8,192
// rows after 0, 2,048 after 0 to 6,144, where the longest-first order
// pairs each long tile with a short one within a few percent of the
// bound) nothing is searched. Otherwise, from one slice a tile, it adds a
// slice to the tile whose slices are the longest (the first of those),
// the tile's key tiles cut as evenly as they go (whole key tiles, the
// first slices the longer), estimates each plan so reached, and stops
// when the plan passes flashBalanceMaxWaves·lanes blocks or
// flashBalanceMaxSlots·lanes slots × kv, when its slices are one key tile
// long, or when the bound (its work over the lanes plus the combine) no
// longer beats the best estimate so far; the best plan is kept if it is
// under flashBalanceGain·t0. At the 4b heads over a bf16 cache (bn 64,
// fixed 3) on 132 SMs: 1,024 rows after 0 (32 tiles of 1 to 16 key
// tiles) has t0 = 19 and splits its 8 longest tiles in two (about 18,
// combine included); 512 after 0, 11 against about 9.3; 128 rows after
// 8,064 cached, 131 against about 22.
func planFlashBalanced(tiles []int32, w []int, bn, hd, kv, lanes0, lanes int) (flashSplitPlan, bool) {
	n := len(w)
	fixed, perSlot := flashBlockCost(hd, bn)
	single := make([]float64, n)
	work, most := 0.0, 0 // the key tiles of all blocks, the longest tile's
	for i := range n {
		single[i] = float64(w[i]) + fixed
		work += float64(kv * w[i])
		most = max(most, w[i])
	}
	t0 := flashMakespan(single, kv, lanes0)
	best := flashBalanceGain * t0
	if (work+float64(kv*n)*fixed)/float64(lanes)+flashCombineFixed >= best {
		return flashSplitPlan{}, false
	}
	ns := make([]int, n) // slices of each tile
	for i := range ns {
		ns[i] = 1
	}
	var bestNs []int
	items, slots, sliced := n, 0, 0
	count := make([]int, most+1) // slices by key tiles
	costs := make([]float64, 0, n)
	for {
		j := 0
		for i := range n {
			if (w[i]+ns[i]-1)/ns[i] > (w[j]+ns[j]-1)/ns[j] {
				j = i
			}
		}
		if (w[j]+ns[j]-1)/ns[j] <= 1 {
			break
		}
		if ns[j] == 1 {
			slots, sliced = slots+1, sliced+1
		}
		ns[j]++
		items, slots = items+1, slots+1
		if kv*items > flashBalanceMaxWaves*lanes || kv*slots > flashBalanceMaxSlots*lanes {
			break
		}
		comb := flashCombineFixed + perSlot*float64((slots+2*sliced)*kv)/float64(lanes)
		if (work+float64(kv*items)*fixed)/float64(lanes)+comb >= best {
			break // every later plan has more blocks and slots
		}
		clear(count)
		for i, x := range w {
			count[x/ns[i]] += ns[i] - x%ns[i]
			if x%ns[i] > 0 {
				count[x/ns[i]+1] += x % ns[i]
			}
		}
		costs = costs[:0]
		for k := most; k >= 1; k-- {
			for range count[k] {
				costs = append(costs, float64(k)+fixed)
			}
		}
		if t1 := flashMakespan(costs, kv, lanes) + comb; t1 < best {
			best, bestNs = t1, slices.Clone(ns)
		}
	}
	if bestNs == nil {
		return flashSplitPlan{}, false
	}
	var its []flashItem
	var p flashSplitPlan
	for i, x := range w {
		end := int(tiles[4*i+3])
		if bestNs[i] == 1 {
			its = append(its, flashItem{i, 0, end, -1, float64(x) + fixed})
			continue
		}
		m := bestNs[i]
		p.comb = append(p.comb, tiles[4*i], tiles[4*i+1], tiles[4*i+2], int32(p.slots), int32(m), 0, 0, 0)
		k0 := 0 // first key tile of slice k
		for k := range m {
			nk := x / m
			if k < x%m {
				nk++
			}
			its = append(its, flashItem{i, k0 * bn, min((k0+nk)*bn, end), p.slots + k, float64(nk) + fixed})
			k0 += nk
		}
		p.slots += m
	}
	p.items = flashItems(tiles, its)
	return p, true
}

// flashMakespan estimates the time of a grid of kv blocks for each cost
// (in order) on lanes blocks at once: each block goes to the lane that
// frees first.
func flashMakespan(costs []float64, kv, lanes int) float64 {
	if kv > 1 && lanes%kv == 0 {
		// The kv blocks of a cost go to kv lanes of equal load: kv groups
		// of lanes/kv lanes that stay alike.
		kv, lanes = 1, lanes/kv
	}
	h := make(laneLoads, 0, max(lanes, 1))
	for _, c := range costs {
		for range kv {
			if len(h) < cap(h) {
				heap.Push(&h, c)
			} else {
				h[0] += c
				heap.Fix(&h, 0)
			}
		}
	}
	end := 0.0
	for _, l := range h {
		end = max(end, l)
	}
	return end
}

// laneLoads is a min-heap of the lanes' busy times.
type laneLoads []float64

func (h laneLoads) Len() int           { return len(h) }
func (h laneLoads) Less(i, j int) bool { return h[i] < h[j] }
func (h laneLoads) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *laneLoads) Push(x any)        { *h = append(*h, x.(float64)) }
func (h *laneLoads) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// flashLanes returns how many blocks of kernel name (flashThreads threads,
// smem bytes of dynamic shared memory, which allowSmem has allowed) the
// device runs at once.
func (b *Backend) flashLanes(name string, smem int) int {
	key := fmt.Sprintf("%s/%d/smem%d", name, flashThreads, smem)
	n, ok := b.occ[key]
	if !ok {
		var err error
		if n, err = b.funcs[name].MaxActiveBlocksPerMultiProcessor(flashThreads, int64(smem)); err != nil || n < 1 {
			n = 1
		}
		if b.occ == nil {
			b.occ = map[string]int{}
		}
		b.occ[key] = n
	}
	return n * max(b.sms, 1)
}

// attentionFlashSplit runs the flash tiles (flashTiles' list) with their
// keys split across blocks if flashSplit is on and planFlashSplit finds it
// worth it, and reports whether it did. The partial slots take one scratch
// buffer a step (sharedMeta: every attention layer of a step has the same
// plan and runs after the last one's combine).
func (b *Backend) attentionFlashSplit(op string, out, qt, gt *Tensor, c *KVCache, dpos, dpageOff, dpages devptr,
	layer int, bt *kernels.Batch, cfg kernels.AttnConfig, scale float32, tiles []int32) bool {
	if !flashSplit {
		return false
	}
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	name, single := b.flashEntry(kvEntry(flashSplitKernel(hd), c.bf16)), b.flashEntry(kvEntry(flashKernel(hd), c.bf16))
	smem := flashSmemFor(name, hd, c.bf16)
	b.allowSmem(op, name, smem)
	b.allowSmem(op, single, smem)
	p, ok := planFlashSplit(tiles, flashKeyTileKV(hd, c.bf16), hd, KV, b.flashLanes(single, smem), b.flashLanes(name, smem), flashSplitForce, flashBalance)
	if !ok {
		return false
	}
	flashSplitRuns.Add(1)
	meta := slices.Concat(p.items, p.comb)
	dm := b.sharedMeta(metaKey{kind: "flashSplit", src: unsafe.Pointer(bt), n: H/KV | hd<<8 | flashSplitForce<<20 | flashBalanceBit()<<40},
		func() devptr { return b.uploadInts(op, meta, nil) })
	dcomb := dm + devptr(4*len(p.items))
	slotBytes := int64(4 * flashSlotFloats(hd) * KV)
	work := b.sharedMeta(metaKey{kind: "flashSplitSlots", n: p.slots * int(slotBytes)},
		func() devptr { return b.allocScratch(op+" (flash split)", int64(p.slots)*slotBytes) })
	part := work
	ml := work + devptr(int64(p.slots)*int64(KV)*int64(flashTileRows*hd)*4)
	b.launch(op, name, [3]int{len(p.items) / 8 * KV, 1, 1}, [3]int{flashThreads, 1, 1}, smem,
		out.ptr, qt.ptr, gt.ptr, c.k, c.v, dpos, dpageOff, dpages, dm, part, ml, H, KV, c.pageSize, c.pages, layer, scale)
	groups := flashTileRows / flashCombineRows(hd)
	b.launch(op, "attention_prefill_combine", [3]int{len(p.comb) / 8 * KV * groups, 1, 1}, [3]int{flashThreads, 1, 1}, 0,
		out.ptr, gt.ptr, part, ml, dcomb, H, KV, hd)
	return true
}
