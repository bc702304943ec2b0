//go:build cuda

package cuda

import (
	"os"

	"cohort/kernels"
)

// addNormOn turns on the fused end of a residual block for decode rows
// (COHORT_CUDA_ADDNORM=1; off by default: measured slower through the
// engine on the H200, docs/gpu.md phase 12).
var addNormOn = os.Getenv("COHORT_CUDA_ADDNORM") == "1"

// LinearAddRMSNormFor returns sum = residual + x·wᵀ and normed, sum's
// zero-centered RMSNorm with norm (kernels.LinearNormer). For decode rows
// that the tensor-core GEMV serves (addNormFits) one launch computes both
// (gemv_mma_addnorm: the block that writes the last output tile adds and
// normalizes the rows); otherwise it is Linear and then AddRMSNorm, whose
// normed output only the Linears of readers read (AddRMSNormFor). Prefill
// rows take linearAddNormLt where it applies.
func (b *Backend) LinearAddRMSNormFor(readers []kernels.Tensor, x, w, residual, norm kernels.Tensor, eps float32) (sum, normed kernels.Tensor) {
	const op = "LinearAddRMSNorm"
	if s, n, ok := b.linearAddNormLt(op, readers, x, w, residual, norm, eps); ok {
		return s, n
	}
	if !b.addNormFits(op, x, w, residual, norm) {
		return b.addRMSNorm("AddRMSNorm", residual, b.Linear(x, w), norm, eps, readers)
	}
	xt, wt, rt, nt := b.tensor(op, x), b.weight(op, w), b.tensor(op, residual), b.tensor(op, norm)
	T, K := xt.dims()
	N := wt.shape[0]
	y, s, n := b.newTensor(op, T, N), b.newTensor(op, T, N), b.newTensor(op, T, N)
	// Linear's plan (grid and split), so y gets Linear's bits: the fused
	// entry holds fewer registers and might otherwise split K differently.
	p := b.mmaLaunch("gemv_mma", T, (N+15)/16, K)
	ws, cnt := b.mmaWorkspace(op, p, 1)
	name := b.mmaEntry("gemv_mma_addnorm", p.nt, p.block[0]/32, p.variant)
	b.launch(op, name, p.grid, p.block, 0, y.ptr, wt.ptr, N, xt.ptr, T, K, ws, cnt, s.ptr, n.ptr, rt.ptr, nt.ptr, eps, b.addNormDone())
	return s, n
}

// addNormFits reports whether LinearAddRMSNormFor runs as one launch: on
// (addNormOn), fused kernels and not deterministic mode, at most 8 rows of
// x [T, K] that the tensor-core GEMV serves, a bf16 w [N, K], residual
// [T, N] and one norm group a row (norm [N]).
func (b *Backend) addNormFits(op string, x, w, residual, norm kernels.Tensor) bool {
	if !addNormOn || !b.fuse || b.det {
		return false
	}
	xt, wt, rt, nt := b.linearInput(op, x), b.weight(op, w), b.linearInput(op, residual), b.linearInput(op, norm)
	if len(xt.shape) != 2 || len(wt.shape) != 2 || !wt.bf16 || len(rt.shape) != 2 || xt.linearOnly {
		return false
	}
	T, K := xt.dims()
	N := wt.shape[0]
	return T <= 8 && b.mmaFits(T, K) && wt.shape[1] == K && rt.shape[0] == T && rt.shape[1] == N && nt.n == N
}

// addNormDone is gemv_mma_addnorm's tile counter: the one after the split
// tiles' counters (initMMA allocates mmaCounters + 1).
func (b *Backend) addNormDone() devptr { return b.mmaCnt + mmaCounters*4 }

// gemmResidualOn turns on linearAddNormLt (COHORT_CUDA_GEMM_RESIDUAL=1). Off
// by default: on an H100 (sixteenth session, alternated, three rounds) the
// 1k prefill took 21.7, 21.8 and 22.2 ms with it against 21.6, 21.8 and
// 21.8 without, the 8k 166.3, 169.4 and 166.1 against 168.6, 167.8 and
// 169.2: no gain beyond the runs' spread (the norm saves about 8 bytes an
// element, the GEMM's epilogue reads 4 more).
var gemmResidualOn = os.Getenv("COHORT_CUDA_GEMM_RESIDUAL") == "1"

// linearAddNormLt is LinearAddRMSNormFor for rows that cuBLASLt serves
// (prefill): the GEMM adds the residual in its epilogue (ltGemmAdd; the
// sum rounded once, as Linear's output added by a kernel is) and
// rmsnorm_rows_f32 normalizes the sum, so the norm reads the stream once
// instead of reading the residual and the projection and writing their
// sum. ok is false where it does not apply: off, deterministic mode, rows
// for the GEMVs or gemv_mmab, float32 weights, or a step too short or
// unaligned for the warp-per-row norm (useRowNorm).
func (b *Backend) linearAddNormLt(op string, readers []kernels.Tensor, x, w, residual, norm kernels.Tensor, eps float32) (sum, normed kernels.Tensor, ok bool) {
	if !gemmResidualOn || b.det {
		return nil, nil, false
	}
	xt := b.linearInput(op, x)
	if !b.ltFits(op, xt, []kernels.Tensor{w}) {
		return nil, nil, false
	}
	T, K := xt.dims()
	wt, rt, nt := b.weight(op, w), b.tensor(op, residual), b.tensor(op, norm)
	N := wt.shape[0]
	if b.skinnyFits(T, K) || len(rt.shape) != 2 || rt.shape[0] != T || rt.shape[1] != N || nt.n != N ||
		!b.useRowNorm(T, N, rt.ptr, nt.ptr) {
		return nil, nil, false
	}
	s, n := b.newTensor(op, T, N), b.newTensor(op, T, N) // scratch: arenaAlign-aligned, as useRowNorm wants
	xb := b.rowsBF16(op, xt, T, K)
	b.ltGemmAdd(op, ltLinearKey(T, K, N), wt.ptr, xb, rt.ptr, s.ptr)
	grid, block := b.normRowsGrid(T)
	y, yb := b.outputs(op, n, readers)
	b.launch(op, "rmsnorm_rows_f32", grid, block, 0, y, yb, s.ptr, nt.ptr, N, T, eps)
	return s, n, true
}
