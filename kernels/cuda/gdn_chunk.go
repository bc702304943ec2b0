//go:build cuda

package cuda

import (
	"fmt"
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

// gdnChunkMin is the length above which a sequence of a GatedDeltaRule
// batch takes the chunked kernels. Below it the recurrent kernel's one
// launch costs less than the chunked form's setup. A variable so that tests
// and benchmarks can force either path (0: every non-empty sequence
// chunked; a huge value: none).
var gdnChunkMin = 16

// gdnChunked reports whether a sequence of length n takes the chunked path
// under cfg.
func gdnChunked(n int, cfg kernels.GDNConfig) bool {
	return n > gdnChunkMin && n > 0 && cfg.KeyDim > 0 && cfg.KeyDim <= gdnChunkDKMax && cfg.ValueDim > 0
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
		p.check(layer, s.Slot)
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
		func() devptr { return b.uploadInts(op, all) })
	at := func(i int) devptr { return meta + devptr(4*offs[i]) }
	if nRest > 0 {
		start, length, slot = at(5), at(6), at(7)
	}
	if nSeq == 0 {
		return start, length, slot, nRest
	}

	// Scratch by batch row (rows of other sequences stay unused).
	w := b.newTensor(op, T, nv, dk)
	u := b.newTensor(op, T, nv, dv)
	gamma := b.newTensor(op, T, nv)
	pm := b.newTensor(op, nChunks, nv, gdnChunkLen, gdnChunkLen)
	b.launch(op, "gdn_chunk_prep_f32", [3]int{nChunks, nv, 1}, [3]int{gdnChunkThreads, 1, 1}, 0,
		w.ptr, u.ptr, gamma.ptr, pm.ptr, qh.ptr, kh.ptr, mixed.ptr, g.ptr, bs.ptr,
		at(0), at(1), nk, nv, dk, dv, convDim)
	b.launch(op, "gdn_chunk_scan_f32", [3]int{nSeq, nv, (dv + gdnChunkCols - 1) / gdnChunkCols}, [3]int{gdnChunkThreads, 1, 1}, 0,
		out.ptr, p.rec, w.ptr, u.ptr, gamma.ptr, pm.ptr, qh.ptr, kh.ptr,
		at(0), at(1), at(2), at(3), at(4), nk, nv, dk, dv, p.slots, layer)
	return start, length, slot, nRest
}
