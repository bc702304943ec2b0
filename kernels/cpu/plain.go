package cpu

import (
	"math"
	"slices"

	"cohort/kernels"
)

// PlainRMSNorm is x / rms(x) · w, per group of len(w) columns, with the
// weight applied as it is.
func (b *Backend) PlainRMSNorm(x, w kernels.Tensor, eps float32) kernels.Tensor {
	xt, wt := asTensor("PlainRMSNorm", x), asTensor("PlainRMSNorm", w)
	check("PlainRMSNorm", kernels.CheckGroups(xt.shape, wt.shape))
	y := &Tensor{shape: slices.Clone(xt.shape), data: make([]float32, len(xt.data))}
	b.rmsNorm(y.data, xt.data, wt.data, eps, false)
	return y
}

// UngatedAttention is Attention with a gate of +Inf: sigmoid(+Inf) is
// exactly 1, so the attention result comes out unchanged.
func (b *Backend) UngatedAttention(q, k, v kernels.Tensor, cache kernels.KVCache, layer int, bt *kernels.Batch, cfg kernels.AttnConfig) kernels.Tensor {
	qt := asTensor("UngatedAttention", q)
	gate := &Tensor{shape: slices.Clone(qt.shape), data: make([]float32, len(qt.data))}
	for i := range gate.data {
		gate.data[i] = float32(math.Inf(1))
	}
	return b.Attention(q, k, v, gate, cache, layer, bt, cfg)
}
