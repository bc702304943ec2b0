//go:build cuda

package cuda

import "os"

// skinnyOn routes the bf16 Linears of 9 to skinnyMaxRows rows that would
// run on cuBLASLt (decode batches of 16 to 64, small mixed steps) to
// gemv_mmab, the tensor-core GEMV over their bf16 input: it reads each
// weight once whatever the rows, where cuBLASLt's skinny tiles read the
// weights at about half the GEMVs' bandwidth (docs/gpu-profile.md, the
// mixed step). Off: correct (TestSkinnyLinear) but no faster, measured on
// an H100 (BenchmarkSkinnyLinear, 2026-12-06: 0.94–1.06 of cuBLASLt's speed
// at 16 rows, 0.83–0.96 at 32, 0.36–0.55 at 64: every warp reads its
// n-tiles' activations from L1 and L2, which at 8 n-tiles costs more than
// the weights). COHORT_CUDA_SKINNY=1 turns it on. Deterministic mode keeps
// its own GEMVs.
var skinnyOn = os.Getenv("COHORT_CUDA_SKINNY") == "1"

// skinnyMaxRows is the most rows gemv_mmab takes (8 n-tiles of 8).
const skinnyMaxRows = 64

// skinnyWarps is gemv_mmab's block (MMAB_WARPS in 36_gemv_mma.cu).
const skinnyWarps = 4

// skinnyFits reports whether a bf16 Linear of T rows of K columns on its
// way to cuBLASLt runs on gemv_mmab instead.
func (b *Backend) skinnyFits(T, K int) bool {
	return skinnyOn && !b.det && T > b.mmaRows && T <= skinnyMaxRows && K%64 == 0
}

// skinnyPlan plans gemv_mmab for T rows over tiles 16-row tiles of K
// columns: the n-tiles (2, 4 or 8) and the split over K by occupancy, as
// mmaLaunch's default does.
func (b *Backend) skinnyPlan(T, tiles, K int) mmaPlan {
	nt := nTiles(T, 2, 8)
	name := b.mmaEntry("gemv_mmab", nt, skinnyWarps, "")
	split := mmaSplit(tiles, K/64, skinnyWarps, b.occupancy(name, 32*skinnyWarps)*b.sms)
	return newMMAPlan(name, tiles, split, K, skinnyWarps, nt)
}

// linearSkinny is y[T, N] = xb[T, K]·w[N, K]ᵀ on gemv_mmab (xb bf16, from
// rowsBF16).
func (b *Backend) linearSkinny(op string, y *Tensor, xb devptr, w *Tensor, T, K, N int) {
	p := b.skinnyPlan(T, (N+15)/16, K)
	ws, cnt := b.mmaWorkspace(op, p, 1)
	b.launch(op, p.name, p.grid, p.block, 0, y.ptr, w.ptr, N, xb, T, K, ws, cnt)
}
