//go:build cuda

package cuda

import (
	"fmt"

	"cohort/kernels"
)

// attnPrepMaxHeadDim is ATTN_PREP_MAX_HD of kernels/40_attention.cu.
const attnPrepMaxHeadDim = 256

// PrepareQK returns a gated attention layer's rotated, normalized query,
// its gate and its rotated, normalized key from q_proj's interleaved output
// qg [T, heads·2·headDim] and k [T, kvHeads·headDim], in one launch
// (kernels.QKPreparer); it equals SplitQueryGate, RMSNorm of q and k and
// RoPE of both. Without the fused kernels (COHORT_CUDA_FUSE=0), or for
// head dims above 256, it runs those ops.
func (b *Backend) PrepareQK(qg, k, qNorm, kNorm kernels.Tensor, positions []int32, cfg kernels.AttnConfig, eps float32) (q, gate, kOut kernels.Tensor) {
	const op = "PrepareQK"
	hd, H, KV := cfg.HeadDim, cfg.Heads, cfg.KVHeads
	if !b.fuse || hd > attnPrepMaxHeadDim {
		return kernels.PrepareQKOps(b, qg, k, qNorm, kNorm, positions, cfg, eps)
	}
	qt, kt, qw, kw := b.tensor(op, qg), b.tensor(op, k), b.tensor(op, qNorm), b.tensor(op, kNorm)
	T, qCols := qt.dims()
	kRows, kCols := kt.dims()
	if qCols != H*2*hd || kRows != T || kCols != KV*hd || qw.n != hd || kw.n != hd || len(positions) != T ||
		cfg.RotaryDim > hd || cfg.RotaryDim%2 != 0 {
		panic(fmt.Sprintf("cuda: %s: qg %v k %v qNorm %v kNorm %v, %d positions, cfg %+v", op, qt.shape, kt.shape, qw.shape, kw.shape, len(positions), cfg))
	}
	qo, gt, ko := b.newTensor(op, T, H*hd), b.newTensor(op, T, H*hd), b.newTensor(op, T, KV*hd)
	if T == 0 {
		return qo, gt, ko
	}
	inv := b.ropeFreqs(op, cfg.RotaryDim, cfg.Theta)
	if rd := cfg.RotaryDim; rd%8 == 0 && rd <= 128 &&
		b.useRowNorm(T, hd, qo.ptr, gt.ptr, ko.ptr, qt.ptr, kt.ptr, qw.ptr, kw.ptr) {
		// A warp a head (attn_prep_rows_f32) for steps of many rows.
		grid, block := b.normRowsGrid(T * (H + KV))
		b.launch(op, "attn_prep_rows_f32", grid, block, 0,
			qo.ptr, gt.ptr, ko.ptr, qt.ptr, kt.ptr, qw.ptr, kw.ptr, b.positionsMeta(op, positions), inv, H, KV, hd, rd, eps, T)
		return qo, gt, ko
	}
	b.launch(op, "attn_prep_f32", [3]int{T, H + KV, 1}, [3]int{blockFor(hd), 1, 1}, 0,
		qo.ptr, gt.ptr, ko.ptr, qt.ptr, kt.ptr, qw.ptr, kw.ptr, b.positionsMeta(op, positions), inv, H, KV, hd, cfg.RotaryDim, eps)
	return qo, gt, ko
}
