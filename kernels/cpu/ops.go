package cpu

import (
	"fmt"
	"math"
	"slices"

	"cohort/kernels"
)

// Embedding gathers rows of table [rows, H] for ids; table holds vocab rows
// [vocabStart, vocabStart+rows), and ids outside that range give zero rows.
func (b *Backend) Embedding(table kernels.Tensor, ids []int32, vocabStart int) kernels.Tensor {
	tt := asTensor("Embedding", table)
	check("Embedding", kernels.CheckEmbedding(tt.shape))
	rows, h := tt.shape[0], tt.shape[1]
	y := newTensor(len(ids), h)
	for i, id := range ids {
		r := int(id) - vocabStart
		if r >= 0 && r < rows {
			copy(y.data[i*h:(i+1)*h], tt.data[r*h:(r+1)*h])
		}
	}
	return y
}

// RMSNorm is the zero-centered form x / rms(x) · (1 + w), per group of len(w)
// columns.
func (b *Backend) RMSNorm(x, w kernels.Tensor, eps float32) kernels.Tensor {
	xt, wt := asTensor("RMSNorm", x), asTensor("RMSNorm", w)
	check("RMSNorm", kernels.CheckGroups(xt.shape, wt.shape))
	y := &Tensor{shape: slices.Clone(xt.shape), data: make([]float32, len(xt.data))}
	b.rmsNorm(y.data, xt.data, wt.data, eps, true)
	return y
}

// AddRMSNorm returns sum = residual + delta and RMSNorm(sum, w).
func (b *Backend) AddRMSNorm(residual, delta, w kernels.Tensor, eps float32) (sum, normed kernels.Tensor) {
	rt, dt, wt := asTensor("AddRMSNorm", residual), asTensor("AddRMSNorm", delta), asTensor("AddRMSNorm", w)
	check("AddRMSNorm", kernels.CheckSame(rt.shape, dt.shape))
	check("AddRMSNorm", kernels.CheckGroups(rt.shape, wt.shape))
	s := &Tensor{shape: slices.Clone(rt.shape), data: make([]float32, len(rt.data))}
	for i := range s.data {
		s.data[i] = rt.data[i] + dt.data[i]
	}
	n := &Tensor{shape: slices.Clone(rt.shape), data: make([]float32, len(rt.data))}
	b.rmsNorm(n.data, s.data, wt.data, eps, true)
	return s, n
}

// rmsNorm writes the RMSNorm of every len(w) group of x to y: x / rms(x) ·
// (1 + w) when zeroCentered, else x / rms(x) · w.
func (b *Backend) rmsNorm(y, x, w []float32, eps float32, zeroCentered bool) {
	g := len(w)
	groups := len(x) / g
	parallelFor(b.threads, groups, grainFor(b.threads, groups, 64), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xs, ys := x[i*g:(i+1)*g], y[i*g:(i+1)*g]
			inv := invRMS(xs, eps)
			for j, v := range xs {
				if zeroCentered {
					ys[j] = v * inv * (1 + w[j])
				} else {
					ys[j] = v * inv * w[j]
				}
			}
		}
	})
}

// invRMS returns 1/sqrt(mean(x²) + eps) in float32. The sum of squares is
// accumulated in float64 so it is close to torch's pairwise float32 sum.
func invRMS(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	ms := float32(ss) / float32(len(x))
	return 1 / float32(math.Sqrt(float64(ms+eps)))
}

// GatedRMSNorm normalizes x per head of len(w) columns with the plain weight
// w and multiplies by silu(z).
func (b *Backend) GatedRMSNorm(x, z, w kernels.Tensor, eps float32) kernels.Tensor {
	xt, zt, wt := asTensor("GatedRMSNorm", x), asTensor("GatedRMSNorm", z), asTensor("GatedRMSNorm", w)
	check("GatedRMSNorm", kernels.CheckSame(xt.shape, zt.shape))
	check("GatedRMSNorm", kernels.CheckGroups(xt.shape, wt.shape))
	y := &Tensor{shape: slices.Clone(xt.shape), data: make([]float32, len(xt.data))}
	g := len(wt.data)
	groups := len(xt.data) / g
	parallelFor(b.threads, groups, grainFor(b.threads, groups, 64), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xs, zs, ys := xt.data[i*g:(i+1)*g], zt.data[i*g:(i+1)*g], y.data[i*g:(i+1)*g]
			inv := invRMS(xs, eps)
			for j, v := range xs {
				ys[j] = v * inv * wt.data[j] * silu(zs[j])
			}
		}
	})
	return y
}

// Add returns a + b.
func (b *Backend) Add(x, y kernels.Tensor) kernels.Tensor {
	xt, yt := asTensor("Add", x), asTensor("Add", y)
	check("Add", kernels.CheckSame(xt.shape, yt.shape))
	s := &Tensor{shape: slices.Clone(xt.shape), data: make([]float32, len(xt.data))}
	for i := range s.data {
		s.data[i] = xt.data[i] + yt.data[i]
	}
	return s
}

// SwiGLU returns silu(gate) ⊙ up.
func (b *Backend) SwiGLU(gate, up kernels.Tensor) kernels.Tensor {
	gt, ut := asTensor("SwiGLU", gate), asTensor("SwiGLU", up)
	check("SwiGLU", kernels.CheckSame(gt.shape, ut.shape))
	y := &Tensor{shape: slices.Clone(gt.shape), data: make([]float32, len(gt.data))}
	n := len(y.data)
	parallelFor(b.threads, n, grainFor(b.threads, n, 4096), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y.data[i] = silu(gt.data[i]) * ut.data[i]
		}
	})
	return y
}

// SplitQueryGate splits q_proj's per-head interleaved output
// [T, heads·2·headDim] = [q_0 | g_0 | q_1 | g_1 | …] into q and gate
// [T, heads·headDim].
func (b *Backend) SplitQueryGate(qg kernels.Tensor, heads, headDim int) (q, gate kernels.Tensor) {
	t := asTensor("SplitQueryGate", qg)
	check("SplitQueryGate", kernels.CheckSplitQueryGate(t.shape, heads, headDim))
	T, cols := t.dims()
	w := heads * headDim
	qt, gt := newTensor(T, w), newTensor(T, w)
	for r := range T {
		for h := range heads {
			src := t.data[r*cols+h*2*headDim:]
			copy(qt.data[r*w+h*headDim:r*w+(h+1)*headDim], src[:headDim])
			copy(gt.data[r*w+h*headDim:r*w+(h+1)*headDim], src[headDim:2*headDim])
		}
	}
	return qt, gt
}

// SelectRows gathers rows of x.
func (b *Backend) SelectRows(x kernels.Tensor, rows []int) kernels.Tensor {
	xt := asTensor("SelectRows", x)
	check("SelectRows", kernels.CheckRows(xt.shape, rows))
	_, cols := xt.dims()
	y := newTensor(len(rows), cols)
	for i, r := range rows {
		copy(y.data[i*cols:(i+1)*cols], xt.data[r*cols:(r+1)*cols])
	}
	return y
}

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

func silu(x float32) float32 { return x * sigmoid(x) }

// softplus is torch's softplus (beta 1, threshold 20).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// check panics with err, prefixed with the backend and the op, unless err is
// nil: a call that breaks the kernels contract is a bug of its caller.
func check(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("cpu: %s: %v", op, err))
	}
}
