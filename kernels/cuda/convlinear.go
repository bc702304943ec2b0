//go:build cuda

package cuda

import "cohort/kernels"

// ConvLinears returns x·wᵢᵀ for every w with the first output passed
// through the causal conv (kernels.ConvLinear). For a decode batch that the
// tensor-core GEMV serves (one token a sequence, up to 8 rows) the conv
// runs in the GEMV's epilogue: the block that writes a tile of q|k|v
// channels convolves them with their state and shifts the new inputs in,
// so each channel's state has one writer. Otherwise it is Linears and
// CausalConv1d.
func (b *Backend) ConvLinears(x, conv kernels.Tensor, states kernels.StatePool, layer int, bt *kernels.Batch, ws ...kernels.Tensor) []kernels.Tensor {
	const op = "ConvLinears"
	xt := b.linearInput(op, x)
	p := asStatePool(op, states)
	if !b.convFits(op, xt, p, bt, ws) {
		out := b.Linears(x, ws...)
		out[0] = b.CausalConv1d(out[0], conv, states, layer, bt)
		return out
	}
	needF32(op, xt)
	T, K := xt.dims()
	C, cK := p.cfg.ConvDim(), p.cfg.ConvKernel
	wt := b.tensor(op, conv)
	// The conv's input is the first projection's output, [T, convDim].
	check(op, kernels.CheckConv1d([]int{T, C}, wt.shape, p.cfg))
	check(op, kernels.CheckBatch(bt, T, true))
	_, _, slot := b.seqMeta(op, p, layer, bt)
	args, out, tiles := b.mmaSegments(op, T, ws)
	pl := b.mmaLaunch("gemv_mma_conv", T, tiles, K)
	part, cnt := b.mmaWorkspace(op, pl, 1)
	b.launch(op, pl.name, pl.grid, pl.block, 0,
		append(args[:], xt.ptr, T, K, part, cnt, wt.ptr, p.conv, slot, cK, p.slots, layer)...)
	return out
}

// convFits reports whether ConvLinears can run the conv in the GEMV: fused
// kernels on and not deterministic mode, a decode batch of at most 8 rows the tensor-core GEMV
// serves, up to four bf16 weights, the first of them the conv's width.
func (b *Backend) convFits(op string, xt *Tensor, p *StatePool, bt *kernels.Batch, ws []kernels.Tensor) bool {
	if !b.fuse || b.det || len(ws) == 0 || len(ws) > 4 || len(xt.shape) != 2 || !allDecode(bt) {
		return false
	}
	T, K := xt.dims()
	return T <= 8 && b.mmaFits(T, K) && allBF16(b, op, K, ws) && b.weight(op, ws[0]).shape[0] == p.cfg.ConvDim()
}
