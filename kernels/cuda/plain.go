//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"cohort/kernels"
)

// The ops of architectures without Qwen3.5's zero-centered norms and
// attention output gate (dense Qwen3). Their kernel is in
// kernels/20_norm.cu.

// PlainRMSNorm is x / rms(x) · w, per group of len(w) columns, with the
// weight applied as it is.
func (b *Backend) PlainRMSNorm(x, w kernels.Tensor, eps float32) kernels.Tensor {
	return b.groupNorm("PlainRMSNorm", "plain_rmsnorm_f32", x, w, eps)
}

// UngatedAttention is Attention with a gate of +Inf, filled on the device:
// sigmoid_ref(+Inf) = 1 / (1 + exp(-Inf)) is exactly 1, so the attention
// result comes out unchanged. It costs one memset of q's size per layer;
// a gate-free kernel variant would save it.
func (b *Backend) UngatedAttention(q, k, v kernels.Tensor, cache kernels.KVCache, layer int, bt *kernels.Batch, cfg kernels.AttnConfig) kernels.Tensor {
	const op = "UngatedAttention"
	qt := b.tensor(op, q)
	gate := b.newTensor(op, qt.shape...)
	b.fill(op, gate, math.Float32bits(float32(math.Inf(1))))
	return b.Attention(q, k, v, gate, cache, layer, bt, cfg)
}

// fill sets every element of t to the float32 whose bits are bits.
func (b *Backend) fill(op string, t *Tensor, bits uint32) {
	if b.graph.skip(op, "memset", uint64(t.ptr), uint64(t.n), uint64(bits)) {
		return
	}
	if err := memsetD32(t.ptr, bits, int64(t.n)); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}
