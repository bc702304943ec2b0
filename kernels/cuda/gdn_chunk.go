//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"cohort/kernels"
)

// The chunked gated delta rule for prefill (kernels/55_gdn_chunk.cu): the
// WY form over chunks of gdnChunkLen tokens, in two launches per op, for the
// batch's sequences of more than gdnChunkMin tokens. The other sequences
// (decode rows, short pieces) keep the token-by-token kernel of
// kernels/50_gdn.cu.

// gdnChunkLen is GDN_CH of kernels/55_gdn_chunk.cu, the chunk length.
const gdnChunkLen = 64

// gdnChunkDKMax is GDN_DK_MAX of kernels/55_gdn_chunk.cu: the largest key
// dim the chunked kernels take (larger ones stay on the recurrent kernel).
const gdnChunkDKMax = 128

// gdnChunkThreads is GDN_THREADS and gdnChunkCols GDN_CT of
// kernels/55_gdn_chunk.cu: the block size of both chunked kernels and the
// state columns per block of the scan.
const (
	gdnChunkThreads = 256
	gdnChunkCols    = 16
)

// gdnScanRingBytes is the dynamic shared memory of gdn_chunk_scan_mma_f32:
// GDN_STAGES (4) tiles of GDN_TILE (64·2·32) floats.
const gdnScanRingBytes = 4 * gdnChunkLen * 2 * 32 * 4

// gdnChunkMin is the length above which a sequence of a GatedDeltaRule
// batch takes the chunked kernels. Below it the recurrent kernel's one
// launch costs less than the chunked form's setup. A variable so that tests
// and benchmarks can force either path (0: every non-empty sequence
// chunked; a huge value: none).
var gdnChunkMin = 16

// gdnChunked reports whether a sequence of length n takes the chunked path
// under cfg. The chunked kernels copy 16 bytes at a time, so both head
// dims must be multiples of 4.
func gdnChunked(n int, cfg kernels.GDNConfig) bool {
	return n > gdnChunkMin && n > 0 && cfg.KeyDim > 0 && cfg.KeyDim <= gdnChunkDKMax && cfg.KeyDim%4 == 0 &&
		cfg.ValueDim > 0 && cfg.ValueDim%4 == 0
}

// gdnAnyChunked reports whether any sequence of bt takes the chunked path.
func gdnAnyChunked(bt *kernels.Batch, cfg kernels.GDNConfig) bool {
	for _, s := range bt.Seqs {
		if gdnChunked(s.Len, cfg) {
			return true
		}
	}
	return false
}

// gatedDeltaChunked runs the chunked gated delta rule for the sequences of
// bt that gdnChunked selects, writing their rows of out [T, nv·dv] and their
// final states, from the op's prepared inputs: l2-normalized (and, for q,
// scaled) qh and kh [T, nk·dk], mixed [T, convDim] (for v), and the per
// (row, v head) log-decay g and write strength bs [T, nv]. It returns the
// metadata of the remaining sequences (starts, lengths and slots on the
// device, and their count) for the recurrent kernel; the count may be 0.
func (b *Backend) gatedDeltaChunked(op string, out, qh, kh, mixed, g, bs *Tensor, p *StatePool, layer int,
	bt *kernels.Batch, cfg kernels.GDNConfig) (start, length, slot devptr, nRest int) {
	nk, nv, dk, dv := cfg.KeyHeads, cfg.ValueHeads, cfg.KeyDim, cfg.ValueDim
	T, convDim := mixed.dims()
	if dk > gdnChunkDKMax || out.n != T*nv*dv || qh.n != T*nk*dk || kh.n != T*nk*dk || g.n != T*nv || bs.n != T*nv {
		panic(fmt.Sprintf("cuda: %s (chunked): out %v qh %v kh %v mixed %v g %v beta %v, cfg %+v (key dim at most %d)",
			op, out.shape, qh.shape, kh.shape, mixed.shape, g.shape, bs.shape, cfg, gdnChunkDKMax))
	}
	// Chunk table and per-sequence tables of the chunked sequences, and the
	// start/length/slot of the rest, in one upload:
	// [chunkRow | chunkLen | seqChunk0 | seqChunks | seqSlot | rest start | rest len | rest slot].
	var chunkRow, chunkLen, seqChunk0, seqChunks, seqSlot, rStart, rLen, rSlot []int32
	for _, s := range bt.Seqs {
		p.checkSeq(layer, s)
		if !gdnChunked(s.Len, cfg) {
			rStart, rLen, rSlot = append(rStart, int32(s.Start)), append(rLen, int32(s.Len)), append(rSlot, int32(s.Slot))
			continue
		}
		seqChunk0 = append(seqChunk0, int32(len(chunkRow)))
		for t0 := 0; t0 < s.Len; t0 += gdnChunkLen {
			chunkRow = append(chunkRow, int32(s.Start+t0))
			chunkLen = append(chunkLen, int32(min(gdnChunkLen, s.Len-t0)))
		}
		seqChunks = append(seqChunks, int32(len(chunkRow))-seqChunk0[len(seqChunk0)-1])
		seqSlot = append(seqSlot, int32(s.Slot))
	}
	nChunks, nSeq := len(chunkRow), len(seqSlot)
	nRest = len(rSlot)
	var all []int32
	offs := make([]int, 0, 8)
	for _, part := range [][]int32{chunkRow, chunkLen, seqChunk0, seqChunks, seqSlot, rStart, rLen, rSlot} {
		offs = append(offs, len(all))
		all = append(all, part...)
	}
	meta := b.sharedMeta(metaKey{kind: "gdnChunkMeta", src: unsafe.Pointer(bt), n: len(all)},
		func() devptr { return b.uploadInts(op, all, nil) })
	at := func(i int) devptr { return meta + devptr(4*offs[i]) }
	if nRest > 0 {
		start, length, slot = at(5), at(6), at(7)
	}
	if nSeq == 0 {
		return start, length, slot, nRest
	}

	// Intermediates by batch row (rows of other sequences stay unused):
	// W [T, nv, dk], U [T, nv, dv], gamma [T, nv], P [chunks, nv, 64, 64],
	// and for the split scan the chunks' start states H [chunks, nv, dk, dv].
	entries := b.gdnChunk()
	split := gdnSplitScan(entries.scan)
	sizes := []int64{int64(T) * int64(nv) * int64(dk), int64(T) * int64(nv) * int64(dv), int64(T) * int64(nv),
		int64(nChunks) * int64(nv) * gdnChunkLen * gdnChunkLen, 0}
	if split {
		sizes[4] = int64(nChunks) * int64(nv) * int64(dk) * int64(dv)
	}
	var total int64
	for _, n := range sizes {
		total += (n*4 + 255) &^ 255
	}
	base := b.gdnWorkspace(op, total)
	var parts [5]devptr
	for i, n := range sizes {
		parts[i] = base
		base += devptr((n*4 + 255) &^ 255)
	}
	w, u, gamma, pm, hc := parts[0], parts[1], parts[2], parts[3], parts[4]
	prepSmem := 0
	if entries.prep == gdnPrepPipe || entries.prep == gdnPrepPipeTF32 {
		prepSmem = gdnPrepPipeSmemBytes
		b.allowSmem(op, entries.prep, prepSmem)
	}
	b.launch(op, entries.prep, [3]int{nChunks, nv, 1}, [3]int{gdnChunkThreads, 1, 1}, prepSmem,
		w, u, gamma, pm, qh.ptr, kh.ptr, mixed.ptr, g.ptr, bs.ptr,
		at(0), at(1), nk, nv, dk, dv, convDim)
	scanSmem, scan := 0, p.kernel(entries.scan) // the scan reads and writes the state: the pool's entry
	if split {
		// The state pass writes H and Vn (over U); the outputs follow for
		// every chunk at once.
		cols, smem := gdnStateLaunch(entries.scan)
		b.allowSmem(op, scan, smem)
		b.launch(op, scan, [3]int{nSeq, nv, (dv + cols - 1) / cols}, [3]int{gdnChunkThreads, 1, 1}, smem,
			hc, p.rec, w, u, gamma, kh.ptr, at(0), at(1), at(2), at(3), at(4), nk, nv, dk, dv, p.slots, layer)
		b.allowSmem(op, entries.out, gdnOutSmemBytes)
		b.launch(op, entries.out, [3]int{nChunks, nv, (dv + gdnOutCols - 1) / gdnOutCols}, [3]int{gdnChunkThreads, 1, 1}, gdnOutSmemBytes,
			out.ptr, hc, u, gamma, pm, qh.ptr, at(0), at(1), nk, nv, dk, dv)
		return start, length, slot, nRest
	}
	if entries.scan == gdnKernelsMMAScan.scan {
		scanSmem = gdnScanRingBytes
		b.allowSmem(op, scan, scanSmem)
	}
	b.launch(op, scan, [3]int{nSeq, nv, (dv + gdnChunkCols - 1) / gdnChunkCols}, [3]int{gdnChunkThreads, 1, 1}, scanSmem,
		out.ptr, p.rec, w, u, gamma, pm, qh.ptr, kh.ptr,
		at(0), at(1), at(2), at(3), at(4), nk, nv, dk, dv, p.slots, layer)
	return start, length, slot, nRest
}

// gdnKernels are the entries of the chunked rule: by default the
// tensor-core prep (gdnPrepDefault: gdn_chunk_prep_pipe_f32, or
// gdn_chunk_prep_mma_f32 with COHORT_CUDA_GDN_PREP=old; blockwise inverse)
// and the split scan (the sequential state pass, then the outputs of every
// chunk in parallel), in the precision Backend.gdnChunk picks for the
// weights (gdnScanAuto: TF32 with bf16 weights, 3xTF32 with float32 ones).
// COHORT_CUDA_GDN_CHUNK picks others for side-by-side runs: "exact" and
// "tf32" the split scan's state pass in 3xTF32 (gdnScanSplit) or one TF32
// mma a product (gdnScanSplitTF32) whatever the weights, the rest in
// 3xTF32 (gdn_chunk_prep_pipe_f32, gdn_chunk_out_mma_f32), "tf32out" both
// the state pass and the outputs (gdnOutTF32) in TF32, "tf32all" the prep's
// products too (gdnPrepPipeTF32; its inverse stays float32), "mmascan" the
// one-pass tensor-core scan (gdn_chunk_scan_mma_f32, an earlier default),
// "old" the first pair (gdn_chunk_prep_f32, gdn_chunk_scan_f32), "oldprep"
// or "oldscan" one of them, "invprep" the blockwise-inverse prep on CUDA
// cores (gdn_chunk_prep_inv_f32). Tests and BenchmarkGDNPrefill switch it
// in process (gdnKernelsNew is the split pair in 3xTF32).
var gdnKernels = gdnKernelsFromEnv(os.Getenv("COHORT_CUDA_GDN_CHUNK"))

// gdnKernelPair names the chunked rule's entries: the prep, the scan, and
// for the split scan the outputs' entry ("" for gdnOutKernel).
type gdnKernelPair struct{ prep, scan, out string }

// The split scan's entries and launch sizes: GDN_OC (gdnOutCols) state
// columns per output block, and GDN_OUT_SMEM floats of dynamic shared
// memory (Q, H_c, P and Vn of a chunk, padded rows) in
// kernels/55_gdn_chunk.cu.
const (
	gdnScanSplit = "gdn_chunk_state_mma_f32"
	// gdnScanSplitTF32 is the state pass with one TF32 mma a product
	// instead of three: the pass measured issue-bound under ncu on the
	// H200 (4b shape, 1,024 rows: 98.8 M instructions, 0.66 issued a cycle
	// a scheduler, 16 warps an SM).
	gdnScanSplitTF32 = "gdn_chunk_state_tf32_f32"
	// gdnScanAuto is the default: every product in TF32 with bf16 weights,
	// in 3xTF32 in the exact mode (float32 weights), as Backend.gdnChunk
	// says.
	gdnScanAuto     = "auto"
	gdnOutKernel    = "gdn_chunk_out_mma_f32"
	gdnOutTF32      = "gdn_chunk_out_tf32_f32" // its products in one TF32 mma each (COHORT_CUDA_GDN_CHUNK=tf32out)
	gdnOutCols      = 64
	gdnOutSmemBytes = 4 * (gdnChunkLen*(gdnChunkDKMax+4) + gdnChunkDKMax*(gdnOutCols+8) +
		gdnChunkLen*(gdnChunkLen+4) + gdnChunkLen*(gdnOutCols+8))
)

// The tensor-core preps: gdn_chunk_prep_pipe_f32 (the default) computes
// gdn_chunk_prep_mma_f32's outputs bit for bit with four blocks an SM (64
// registers, gdnPrepPipeSmemBytes of dynamic shared memory: GDN_PREP_PIPE_SMEM
// floats, three [64][72] buffers and four [64] vectors) where
// gdn_chunk_prep_mma_f32 fits three (80 registers, 37 KiB static), its
// global loads by cp.async through two buffers overlapping the compute
// and the warps' tensor-core tiles balanced (both preps now share the
// inverse without bank conflicts, gdn_prep_invert). Measured with ncu on
// the H200 (4b shape, 1,024 rows: 512 blocks), gdn_chunk_prep_mma_f32 took
// 133-168 µs a launch before that: 1.29 waves, 0.72 eligible warps a
// scheduler, 45 % excess shared wavefronts (the inverse's phase 2c then
// read T1 eight ways conflicted).
// COHORT_CUDA_GDN_PREP=old keeps gdn_chunk_prep_mma_f32 (A/B runs); tests
// and BenchmarkGDNPrefill switch the entries in process.
const (
	gdnPrepPipe          = "gdn_chunk_prep_pipe_f32"
	gdnPrepPipeTF32      = "gdn_chunk_prep_pipe_tf32_f32" // its products in one TF32 mma each (COHORT_CUDA_GDN_CHUNK=tf32all)
	gdnPrepMMA           = "gdn_chunk_prep_mma_f32"
	gdnPrepPipeSmemBytes = 4 * (3*gdnChunkLen*(gdnChunkLen+8) + 4*gdnChunkLen)
)

var gdnPrepDefault = gdnPrepFromEnv(os.Getenv("COHORT_CUDA_GDN_PREP"))

func gdnPrepFromEnv(v string) string {
	if v == "old" {
		return gdnPrepMMA
	}
	return gdnPrepPipe
}

var (
	gdnKernelsNew     = gdnKernelPair{prep: gdnPrepDefault, scan: gdnScanSplit}
	gdnKernelsMMAScan = gdnKernelPair{prep: gdnPrepDefault, scan: "gdn_chunk_scan_mma_f32"}
	gdnKernelsOld     = gdnKernelPair{prep: "gdn_chunk_prep_f32", scan: "gdn_chunk_scan_f32"}
	gdnPrepInv        = "gdn_chunk_prep_inv_f32"
)

func gdnKernelsFromEnv(v string) gdnKernelPair {
	k := gdnKernelPair{prep: gdnPrepDefault, scan: gdnScanAuto}
	switch v {
	case "exact":
		k.scan = gdnScanSplit
	case "tf32":
		k.scan = gdnScanSplitTF32
	case "tf32out":
		k.scan, k.out = gdnScanSplitTF32, gdnOutTF32
	case "tf32all":
		k = gdnKernelPair{prep: gdnPrepPipeTF32, scan: gdnScanSplitTF32, out: gdnOutTF32}
	case "mmascan":
		k = gdnKernelsMMAScan
	case "old":
		k = gdnKernelsOld
	case "oldprep":
		k.prep = gdnKernelsOld.prep
	case "oldscan":
		k.scan = gdnKernelsOld.scan
	case "invprep":
		k.prep = gdnPrepInv
	}
	return k
}

// gdnChunk returns the entries of a chunked op: gdnKernels' own, or for
// gdnScanAuto every product in one TF32 mma with bf16 weights (the prep's
// gdnPrepPipeTF32, its inverse float32; the state pass gdnScanSplitTF32's
// wide twin, gdnStateWide; the outputs gdnOutTF32) and in 3xTF32 in the
// exact mode (float32 weights, which keeps its 1e-4 agreement with HF
// f32; the state pass gdnScanSplit's wide twin). Measured on the
// H200 (4b-shape, cohort bench):
//   - the state pass alone in TF32 (2026-12-03, eleventh session): an 8k
//     prefill 186.7 against 206.3 ms in 3xTF32, the distance to HF f32
//     (mean top-8 |Δlogprob|) 0.128, 0.133, 0.132 at 128, 1,024 and
//     8,192 tokens against 0.135, 0.130, 0.132;
//   - all three in TF32 (twelfth session, one machine, side by side): a 1k
//     prefill 22.5 against 27.1 ms with the state pass alone in TF32, 1k
//     TTFT 23.6 against 27.4, 8k 183.1 against 196.8; BenchmarkGDNPrefill
//     0.245 against 0.284 ms a layer at 1,024 tokens; the distance to HF
//     f32 0.133, 0.120, 0.132 against 0.128, 0.133, 0.132 (HF bf16's own:
//     0.278, 0.292, 0.277).
func (b *Backend) gdnChunk() gdnKernelPair {
	k := gdnKernels
	switch {
	case k.scan != gdnScanAuto:
	case b.weights == "f32":
		k.scan = gdnWideScan(gdnScanSplit, gdnStateWide)
	default:
		k.scan = gdnWideScan(gdnScanSplitTF32, gdnStateWide)
		if k.prep == gdnPrepPipe {
			k.prep = gdnPrepPipeTF32
		}
		if k.out == "" {
			k.out = gdnOutTF32
		}
	}
	if k.out == "" {
		k.out = gdnOutKernel
	}
	return k
}

// gdnStateWide is the state columns a block of the default state pass
// takes (gdnScanAuto; COHORT_CUDA_GDN_STATE_COLS: 32, the default, or 64;
// 16 keeps the 16-column pass, which COHORT_CUDA_GDN_CHUNK's explicit
// choices name too): gdn_chunk_state_w<CT>_* in kernels/55_gdn_chunk.cu, the same
// outputs bit for bit with two barriers a chunk instead of eight and a
// head's W and K tiles staged by 4 or 2 blocks instead of 8. Measured on
// an H100 (4b-shape, cohort bench, alternated, two rounds; docs/gpu.md
// phase 17): the 8k prefill 165.9 and 167.3 ms with 32 columns, 169.5 and
// 172.9 with 64, 179.8 and 180.1 with 16; the 1k prefill 21.4 and 21.5
// against 22.8 and 23.3.
var gdnStateWide = gdnStateColsFromEnv(os.Getenv("COHORT_CUDA_GDN_STATE_COLS"))

// gdnStateColsFromEnv parses COHORT_CUDA_GDN_STATE_COLS: 16 (0, the
// 16-column pass), 64, or 32 for anything else.
func gdnStateColsFromEnv(v string) int {
	switch v {
	case "16":
		return 0
	case "64":
		return 64
	}
	return 32
}

// gdnWideScan is the wide twin (cols 32 or 64) of a split state pass
// entry, or scan itself (cols 0, or another scan).
func gdnWideScan(scan string, cols int) string {
	if cols == 0 || (scan != gdnScanSplit && scan != gdnScanSplitTF32) {
		return scan
	}
	return fmt.Sprintf("gdn_chunk_state_w%d_%s", cols, strings.TrimPrefix(scan, "gdn_chunk_state_"))
}

// gdnSplitScan reports whether scan is a state pass of the split scan
// (16-column or wide), which the output kernel follows.
func gdnSplitScan(scan string) bool { return strings.HasPrefix(scan, "gdn_chunk_state_") }

// gdnStateLaunch is a state pass entry's columns a block and dynamic shared
// memory: gdn_wide<CT>::SMEM floats for the wide ones (two stages of a
// chunk's W and K, the state's and Vn's rounded copies with rows of CT + 8,
// the decays), the ring of the 16-column one.
func gdnStateLaunch(scan string) (cols, smem int) {
	for _, ct := range []int{32, 64} {
		if strings.HasPrefix(scan, fmt.Sprintf("gdn_chunk_state_w%d_", ct)) {
			return ct, 4 * (2*2*gdnChunkLen*gdnChunkDKMax + (gdnChunkDKMax+gdnChunkLen)*(ct+8) + 2*gdnChunkLen + 2)
		}
	}
	return gdnChunkCols, gdnScanRingBytes
}

// gdnWork holds each backend's workspace for the chunked rule's
// intermediates (W, U, gamma, P: 40 MiB per 1,024 rows for the 4b heads).
// They live only within one op and a backend's ops are ordered on its
// stream, so every GatedDeltaRule call of a step reuses the same buffer
// instead of taking a fresh one from the per-step scratch arena for every
// layer. A backend's ranks run on their own threads, hence the lock.
var gdnWork struct {
	sync.Mutex
	bufs map[*Backend]gdnBuf
}

type gdnBuf struct {
	ptr   devptr
	bytes int64
}

// gdnWorkspace returns at least bytes of device memory for the chunked
// rule's intermediates of one op: the backend's workspace, grown (after the
// device is idle, since queued work may still read the old one) to the
// largest request seen. While a CUDA graph is recorded or replayed it takes
// scratch instead, which the graph machinery keeps stable.
func (b *Backend) gdnWorkspace(op string, bytes int64) devptr {
	if b.graph.mode != graphOff {
		return b.allocScratch(op, bytes)
	}
	gdnWork.Lock()
	defer gdnWork.Unlock()
	if gdnWork.bufs == nil {
		gdnWork.bufs = map[*Backend]gdnBuf{}
	}
	cur, ok := gdnWork.bufs[b]
	if _, live := b.permanent[cur.ptr]; ok && live && cur.bytes >= bytes {
		return cur.ptr
	}
	if ok && cur.ptr != 0 {
		if _, live := b.permanent[cur.ptr]; live {
			if err := ctxSynchronize(); err != nil {
				panic(fmt.Sprintf("cuda: %s: growing the chunked-rule workspace to %d bytes: %v", op, bytes, err))
			}
			b.freePermanent(cur.ptr)
		}
	}
	// Round up so that slowly growing prompts do not regrow it every step.
	size := max(bytes, cur.bytes*5/4)
	p := b.allocPermanent(op+" (chunked-rule workspace)", size)
	gdnWork.bufs[b] = gdnBuf{ptr: p, bytes: size}
	return p
}
