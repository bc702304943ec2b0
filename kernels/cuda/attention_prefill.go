//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"slices"
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

// flashKeyTile is BN of the kernel for head dim hd: the key positions of
// one shared-memory tile.
func flashKeyTile(hd int) int { return 4096 / hd }

// flashSmem is the kernel's dynamic shared memory for head dim hd: the bf16
// Q tile and K and V tiles, and two float32 staging stages of K and V.
func flashSmem(hd int) int {
	bn := flashKeyTile(hd)
	return (flashTileRows*hd+2*bn*hd)*2 + 4*bn*hd*4
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
// as {first row, length, first M-row, 0} (M-row u of a sequence is query
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
		tiles = append(tiles, int32(t.row0), int32(t.n), int32(t.u0), 0)
	}
	return tiles, rest
}

// attentionFlash computes Attention's output out for bt after kv_write_f32
// has stored the step's k and v: the tensor-core kernel for the sequences
// that flashTakes, attention_f32 for each run of the other rows (its
// per-row arguments offset to the run's first row).
func (b *Backend) attentionFlash(op string, out, qt, gt *Tensor, c *KVCache, dpos, dpageOff, dpages devptr,
	layer int, bt *kernels.Batch, cfg kernels.AttnConfig, scale float32) {
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	name := flashKernel(hd)
	if name == "" || KV <= 0 || H%KV != 0 || out.n != bt.Rows()*H*hd {
		panic(fmt.Sprintf("cuda: %s (flash): out %v, %d rows, cfg %+v (head dim 64, 128 or 256)", op, out.shape, bt.Rows(), cfg))
	}
	tiles, rest := flashTiles(bt, H/KV)
	if n := len(tiles) / 4; n > 0 {
		dt := b.sharedMeta(metaKey{kind: "flashTiles", src: unsafe.Pointer(bt), n: H / KV},
			func() devptr { return b.uploadInts(op, tiles, nil) })
		b.allowSmem(op, name, flashSmem(hd))
		b.launch(op, name, [3]int{n * KV, 1, 1}, [3]int{flashThreads, 1, 1}, flashSmem(hd),
			out.ptr, qt.ptr, gt.ptr, c.k, c.v, dpos, dpageOff, dpages, dt, H, KV, c.pageSize, c.pages, layer, scale)
	}
	rowBytes := devptr(4 * H * hd)
	for _, r := range rest {
		off := devptr(r[0])
		b.launch(op, "attention_f32", [3]int{r[1] - r[0], H, 1}, [3]int{128, 1, 1}, 0,
			out.ptr+off*rowBytes, qt.ptr+off*rowBytes, gt.ptr+off*rowBytes, c.k, c.v, dpos+4*off, dpageOff+4*off, dpages,
			H, KV, hd, c.pageSize, c.pages, layer, scale)
	}
}
