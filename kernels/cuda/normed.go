//go:build cuda

package cuda

import "cohort/kernels"

// mmaNormRows is MMA_NORM_ROWS of kernels/36_gemv_mma.cu: the most rows of
// a GEMV that normalizes its own input.
const mmaNormRows = 8

// normFits reports whether the GEMV that normalizes its input serves the
// residual add and RMSNorm of residual, delta [T, K] with weight norm [K]
// ahead of the bf16 weights ws.
func (b *Backend) normFits(op string, rt, dt, nt *Tensor, ws []kernels.Tensor) bool {
	if !b.normFuse || len(rt.shape) != 2 {
		return false
	}
	T, K := rt.dims()
	return T <= mmaNormRows && b.mmaFits(T, K) && nt.n == K && allBF16(b, op, K, ws)
}

// AddNormLinears returns residual + delta and the projections of its
// RMSNorm (kernels.NormedLinear). For decode-sized rows one GEMV launch
// normalizes its input in each block's prologue (while its first weight
// loads are in flight) and block (0, 0) writes the sum; otherwise it is
// AddRMSNorm and Linears.
func (b *Backend) AddNormLinears(residual, delta, norm kernels.Tensor, eps float32, ws ...kernels.Tensor) (kernels.Tensor, []kernels.Tensor) {
	const op = "AddNormLinears"
	rt, dt, nt := b.tensor(op, residual), b.tensor(op, delta), b.tensor(op, norm)
	checkSame(op, rt, dt)
	if len(ws) > 4 || !b.normFits(op, rt, dt, nt, ws) {
		sum, x := b.AddRMSNorm(residual, delta, norm, eps)
		return sum, b.Linears(x, ws...)
	}
	T, K := rt.dims()
	sum := b.newTensor(op, T, K)
	out := make([]kernels.Tensor, len(ws))
	var args [12]any
	tiles := 0
	for i := range 4 {
		args[3*i], args[3*i+1], args[3*i+2] = devptr(0), devptr(0), 0
		if i < len(ws) {
			wt := b.weight(op, ws[i])
			N := wt.shape[0]
			y := b.newTensor(op, T, N)
			out[i] = y
			args[3*i], args[3*i+1], args[3*i+2] = y.ptr, wt.ptr, N
			tiles += (N + 15) / 16
		}
	}
	p := b.mmaLaunch("gemv_mma_norm", T, tiles, K)
	part, cnt := b.mmaWorkspace(op, p, 1)
	b.launch(op, p.name, p.grid, p.block, 0, append(args[:], rt.ptr, dt.ptr, nt.ptr, sum.ptr, eps, T, K, part, cnt)...)
	return sum, out
}

// AddNormSwiGLULinear returns residual + delta and SwiGLU(x·gateᵀ, x·upᵀ)
// of its RMSNorm x (kernels.NormedLinear), in one launch for decode-sized
// rows as AddNormLinears.
func (b *Backend) AddNormSwiGLULinear(residual, delta, norm kernels.Tensor, eps float32, gate, up kernels.Tensor) (kernels.Tensor, kernels.Tensor) {
	const op = "AddNormSwiGLULinear"
	rt, dt, nt := b.tensor(op, residual), b.tensor(op, delta), b.tensor(op, norm)
	checkSame(op, rt, dt)
	gt, ut := b.weight(op, gate), b.weight(op, up)
	if !b.normFits(op, rt, dt, nt, []kernels.Tensor{gate, up}) || gt.shape[0] != ut.shape[0] {
		sum, x := b.AddRMSNorm(residual, delta, norm, eps)
		return sum, b.SwiGLULinear(x, gate, up)
	}
	T, K := rt.dims()
	N := gt.shape[0]
	sum, y := b.newTensor(op, T, K), b.newTensor(op, T, N)
	p := b.mmaLaunch("gemv_mma_swiglu_norm", T, (N+15)/16, K)
	ws, cnt := b.mmaWorkspace(op, p, 2)
	b.launch(op, p.name, p.grid, p.block, 0, y.ptr, gt.ptr, ut.ptr, N, rt.ptr, dt.ptr, nt.ptr, sum.ptr, eps, T, K, ws, cnt)
	return sum, y
}
