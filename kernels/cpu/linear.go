package cpu

import (
	"fmt"

	"cohort/kernels"
)

// Linear returns x·wᵀ for x [T, in] and w [out, in].
func (b *Backend) Linear(x, w kernels.Tensor) kernels.Tensor {
	xt, wt := asTensor("Linear", x), asTensor("Linear", w)
	check("Linear", kernels.CheckLinear(xt.shape, wt.shape))
	T, in := xt.dims()
	out := wt.shape[0]
	shape := append(append([]int(nil), xt.shape[:len(xt.shape)-1]...), out)
	y := newTensor(shape...)
	Matmul(y.data, xt.data, wt.data, T, in, out, b.threads)
	return y
}

// Matmul tiling. Go compiles float32 arithmetic to scalar SSE and has 15
// usable vector registers, so the micro-kernel is the largest register tile
// that does not spill: 2 rows of x times 3 rows of w (6 accumulators, 5
// loads per 12 flops). Spilling an accumulator puts a store-to-load round
// trip on the loop-carried chain and costs about 3x (measured: 4x4 and 2x4
// tiles run at ~4 GFLOP/s per core, 2x3 at ~12).
const (
	mmRowBlock = 32  // rows of x per task (even)
	mmColBlock = 48  // rows of w (output columns) per task (multiple of 3)
	mmKBlock   = 256 // slice of the `in` dim kept hot in L1/L2
)

// Matmul computes dst[T, out] = x[T, in] · w[out, in]ᵀ (both operands are
// read along their contiguous `in` dim) using up to `threads` goroutines.
// Work is split into (row block, column block) tasks, so decode (T = 1) is
// parallel over output columns and a narrow prefill (small out) over rows.
func Matmul(dst, x, w []float32, T, in, out int, threads int) {
	if len(dst) < T*out || len(x) < T*in || len(w) < out*in {
		panic(fmt.Sprintf("cpu: Matmul: len(dst)=%d len(x)=%d len(w)=%d for T=%d in=%d out=%d",
			len(dst), len(x), len(w), T, in, out))
	}
	if T == 0 || out == 0 {
		return
	}
	threads = max(threads, 1)
	rb, cb := min(mmRowBlock, T+T%2), mmColBlock
	// Shrink blocks when there would be too few tasks to feed every thread.
	for ((T+rb-1)/rb)*((out+cb-1)/cb) < 2*threads && (rb > 2 || cb > 3) {
		if cb > 3 && (cb >= rb || rb <= 2) {
			cb /= 2
			cb -= cb % 3
			cb = max(cb, 3)
		} else {
			rb = max(rb/2, 2)
		}
	}
	rowTasks, colTasks := (T+rb-1)/rb, (out+cb-1)/cb
	parallelFor(threads, rowTasks*colTasks, 1, func(lo, hi int) {
		for task := lo; task < hi; task++ {
			r0 := (task / colTasks) * rb
			c0 := (task % colTasks) * cb
			matmulTile(dst, x, w, in, out, r0, min(r0+rb, T), c0, min(c0+cb, out))
		}
	})
}

// matmulTile computes dst[r0:r1, c0:c1] (overwriting it).
func matmulTile(dst, x, w []float32, in, out, r0, r1, c0, c1 int) {
	for i := r0; i < r1; i++ {
		clear(dst[i*out+c0 : i*out+c1])
	}
	for k0 := 0; k0 < in; k0 += mmKBlock {
		k1 := min(k0+mmKBlock, in)
		xrow := func(i int) []float32 { return x[i*in+k0 : i*in+k1] }
		wrow := func(j int) []float32 { return w[j*in+k0 : j*in+k1] }
		j := c0
		for ; j+3 <= c1; j += 3 {
			w0, w1, w2 := wrow(j), wrow(j+1), wrow(j+2)
			i := r0
			for ; i+2 <= r1; i += 2 {
				c00, c01, c02, c10, c11, c12 := kernel2x3(xrow(i), xrow(i+1), w0, w1, w2)
				d0, d1 := dst[i*out+j:i*out+j+3], dst[(i+1)*out+j:(i+1)*out+j+3]
				d0[0] += c00
				d0[1] += c01
				d0[2] += c02
				d1[0] += c10
				d1[1] += c11
				d1[2] += c12
			}
			if i < r1 {
				c0, c1, c2 := kernel1x3(xrow(i), w0, w1, w2)
				d := dst[i*out+j : i*out+j+3]
				d[0] += c0
				d[1] += c1
				d[2] += c2
			}
		}
		for ; j < c1; j++ {
			w0 := wrow(j)
			i := r0
			for ; i+2 <= r1; i += 2 {
				s0, s1 := kernel2x1(xrow(i), xrow(i+1), w0)
				dst[i*out+j] += s0
				dst[(i+1)*out+j] += s1
			}
			if i < r1 {
				dst[i*out+j] += dot(xrow(i), w0)
			}
		}
	}
}

// kernel2x3 returns the 6 dot products of rows x0, x1 with rows w0, w1, w2.
func kernel2x3(x0, x1, w0, w1, w2 []float32) (c00, c01, c02, c10, c11, c12 float32) {
	n := len(x0)
	x1, w0, w1, w2 = x1[:n], w0[:n], w1[:n], w2[:n] // bounds-check hints
	for k := 0; k < n; k++ {
		a0, a1 := x0[k], x1[k]
		b0, b1, b2 := w0[k], w1[k], w2[k]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
	}
	return
}

// kernel1x3 returns the dot products of row x0 with rows w0, w1, w2.
func kernel1x3(x0, w0, w1, w2 []float32) (c0, c1, c2 float32) {
	n := len(x0)
	w0, w1, w2 = w0[:n], w1[:n], w2[:n]
	for k := 0; k < n; k++ {
		a := x0[k]
		c0 += a * w0[k]
		c1 += a * w1[k]
		c2 += a * w2[k]
	}
	return
}

// kernel2x1 returns the dot products of rows x0, x1 with row w0.
func kernel2x1(x0, x1, w0 []float32) (c0, c1 float32) {
	n := len(x0)
	x1, w0 = x1[:n], w0[:n]
	for k := 0; k < n; k++ {
		b := w0[k]
		c0 += x0[k] * b
		c1 += x1[k] * b
	}
	return
}

// dot returns Σ a[i]·b[i] over len(a), with 4 independent partial sums.
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	k := 0
	for ; k+4 <= n; k += 4 {
		s0 += a[k] * b[k]
		s1 += a[k+1] * b[k+1]
		s2 += a[k+2] * b[k+2]
		s3 += a[k+3] * b[k+3]
	}
	for ; k < n; k++ {
		s0 += a[k] * b[k]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy computes y += alpha·x over len(y).
func axpy(alpha float32, x, y []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += alpha * x[i]
	}
}
