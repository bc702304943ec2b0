//go:build cuda

package cuda

// The constants of kernels/38_gemv_bulk.cu.
const (
	bulkRows    = 16  // GB_ROWS: weight rows a block
	bulkCols    = 256 // GB_KS: columns a stage
	bulkThreads = 128 // GB_THREADS
)

// bulkFits reports whether a Linear of T rows over K columns takes
// gemv_bulk_nt1: with COHORT_CUDA_GEMV=bulk, one row, whole stages, on a
// device and NVRTC that compile the bulk copies.
func (b *Backend) bulkFits(T, K int) bool {
	return b.gemvTune.bulk && b.bulkCopies && !b.det && T == 1 && K%bulkCols == 0
}

// gemvBulk launches gemv_bulk_nt1 for y[1, N] = x[1, K]·w[N, K]ᵀ: a block
// per 16-row tile and part of K, as many parts as keep the grid within one
// wave of resident blocks (bulkParts).
func (b *Backend) gemvBulk(op string, y, x, w *Tensor, K, N int) {
	const name = "gemv_bulk_nt1"
	tiles := (N + bulkRows - 1) / bulkRows
	parts := bulkParts(tiles, K/bulkCols, b.occupancy(name, bulkThreads)*b.sms)
	if 2*tiles > mmaCounters {
		parts = 1
	}
	var ws, cnt devptr
	if parts > 1 {
		ws, cnt = b.allocScratch(op, int64(tiles*parts*bulkRows*4)), b.mmaCnt
	}
	b.launch(op, name, [3]int{tiles, parts, 1}, [3]int{bulkThreads, 1, 1}, 0, y.ptr, w.ptr, N, x.ptr, K, ws, cnt)
}

// bulkParts returns how many blocks share a tile's stages: the most that
// keep tiles·parts within resident blocks, each with at least two stages.
func bulkParts(tiles, stages, resident int) int {
	return max(1, min(resident/max(tiles, 1), stages/2))
}
