//go:build cuda

package cuda

import (
	"fmt"
	"os"

	"cohort/kernels"
)

// Outputs that only a Linear reads (kernels.LinearFeeder). In a prefill
// step the Linears run on cuBLASLt and read the bf16 twin that the norm or
// SwiGLU kernel writes beside its float32 output (twinFor); when the model
// says that nothing else reads the output, the kernel leaves the float32
// elements out (a null y), and the tensor is marked linearOnly: the Linear
// family takes it (linearInput) where it reads the twin, every other op
// and Download refuse it (tensor, needF32). COHORT_CUDA_LINEARONLY=0 keeps
// every float32 output (side-by-side runs).
var linearOnlyOn = os.Getenv("COHORT_CUDA_LINEARONLY") != "0"

// AddRMSNormFor is AddRMSNorm whose normed output only Linears of readers
// read.
func (b *Backend) AddRMSNormFor(readers []kernels.Tensor, residual, delta, w kernels.Tensor, eps float32) (sum, normed kernels.Tensor) {
	return b.addRMSNorm("AddRMSNorm", residual, delta, w, eps, readers)
}

// GatedRMSNormFor is GatedRMSNorm whose output only Linears of readers read.
func (b *Backend) GatedRMSNormFor(readers []kernels.Tensor, x, z, w kernels.Tensor, eps float32) kernels.Tensor {
	return b.gatedRMSNorm("GatedRMSNorm", x, z, w, eps, readers)
}

// SwiGLULinearFor is SwiGLULinear whose output only Linears of readers read.
func (b *Backend) SwiGLULinearFor(readers []kernels.Tensor, x, gate, up kernels.Tensor) kernels.Tensor {
	return b.swiGLULinear("SwiGLULinear", x, gate, up, readers)
}

// outputs returns the float32 and bf16 pointers a producing kernel writes
// t [T, K] through: the bf16 twin where a Linear would read one, and no
// float32 pointer (t becomes linearOnly) when there is a twin and every
// reader is a bf16 matrix [N, K], which the twin's rows send to cuBLASLt
// (linearOnlyOn; readers nil: the float32 elements are kept).
func (b *Backend) outputs(op string, t *Tensor, readers []kernels.Tensor) (y, yb devptr) {
	yb = b.twinFor(op, t)
	if _, K := t.dims(); yb != 0 && linearOnlyOn && len(readers) > 0 && allBF16(b, op, K, readers) {
		t.linearOnly = true
		return 0, yb
	}
	return t.ptr, yb
}

// linearInput unwraps the x of a Linear-family op: as tensor does, but a
// linearOnly tensor is accepted (the op reads its twin, or calls needF32).
func (b *Backend) linearInput(op string, t kernels.Tensor) *Tensor {
	ct := b.weight(op, t)
	if ct.bf16 {
		panic(fmt.Sprintf("cuda: %s: tensor %v is bf16; only Linear and Embedding read bf16 weights", op, ct.shape))
	}
	return ct
}

// needF32 panics when t's float32 elements were left out: for the paths of
// the Linear family that read them (the GEMVs, float32 weights).
func needF32(op string, t *Tensor) {
	if t.linearOnly {
		panic(fmt.Sprintf("cuda: %s: tensor %v holds only its bf16 twin (made for a cuBLASLt Linear), not float32 elements", op, t.shape))
	}
}
