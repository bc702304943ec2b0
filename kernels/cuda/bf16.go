//go:build cuda

package cuda

import (
	"fmt"
	"log"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"cohort/kernels"
)

// weightType resolves Options.Weights.
func weightType(opt string) (string, error) {
	if opt == "" {
		opt = os.Getenv("COHORT_CUDA_WEIGHTS")
	}
	switch opt {
	case "", "bf16":
		return "bf16", nil
	case "f32":
		return "f32", nil
	}
	return "", fmt.Errorf("cuda: weight type %q: want bf16 or f32 (Options.Weights, COHORT_CUDA_WEIGHTS)", opt)
}

// bf16MinDim is the smallest dimension of a matrix stored as bf16: smaller
// 2-D weights (a flattened conv1d kernel [channels, 4]) stay float32.
const bf16MinDim = 16

// UploadWeight stores a checkpoint tensor. With bf16 weights (the default)
// every matrix, 2-D with both dimensions at least bf16MinDim, is stored as
// bfloat16 (rounded to nearest even), read only by Linear and Embedding;
// everything else, and every weight under "f32" or without cuBLASLt, is
// stored as Upload stores it.
func (b *Backend) UploadWeight(data []float32, shape ...int) kernels.Tensor {
	if b.weights != "bf16" || b.gemm != "cublaslt" || len(shape) != 2 || min(shape[0], shape[1]) < bf16MinDim {
		return b.Upload(data, shape...)
	}
	n := numel("UploadWeight", shape)
	if n != len(data) {
		panic(fmt.Sprintf("cuda: UploadWeight: %d values for shape %v", len(data), shape))
	}
	host := toBF16(data)
	t := &Tensor{shape: slices.Clone(shape), n: n, bf16: true, ptr: b.allocPermanent("UploadWeight", int64(n)*2)}
	if err := memcpyHtoD(t.ptr, unsafe.Pointer(&host[0]), int64(n)*2); err != nil {
		panic(fmt.Sprintf("cuda: UploadWeight %v: %v", shape, err))
	}
	return t
}

// toBF16 rounds data to bfloat16, in parallel for large weights.
func toBF16(data []float32) []uint16 {
	out := make([]uint16, len(data))
	const part = 1 << 20
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < len(data); lo += part {
		hi := min(lo+part, len(data))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for i, v := range data[lo:hi] {
				out[lo+i] = bf16Bits(v)
			}
		})
	}
	wg.Wait()
	return out
}

// bf16Bits rounds v to bfloat16, nearest even (as torch's .to(bfloat16)).
func bf16Bits(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// downloadBF16 copies a bf16 tensor to the host as float32.
func (b *Backend) downloadBF16(t *Tensor) []float32 {
	out := make([]float32, t.n)
	if t.n == 0 {
		return out
	}
	host := make([]uint16, t.n)
	if err := memcpyDtoH(unsafe.Pointer(&host[0]), t.ptr, int64(t.n)*2); err != nil {
		panic(fmt.Sprintf("cuda: Download %v: %v", t.shape, err))
	}
	for i, h := range host {
		out[i] = math.Float32frombits(uint32(h) << 16)
	}
	return out
}

// gemvMaxRows is GEMV_MAX_ROWS of kernels/35_bf16.cu: the most activation
// rows the CUDA-core bf16 GEMV serves (for K not a multiple of 64).
const gemvMaxRows = 8

// gemvWarps is the warps (output columns) of one gemv_bf16 block.
const gemvWarps = 8

// mmaMaxWarps is MMA_MAX_WARPS of kernels/36_gemv_mma.cu: the most warps
// of one gemv_mma block, which split K between them.
const mmaMaxWarps = 16

// mmaMaxRowsDefault is the most rows the tensor-core GEMV serves unless
// COHORT_CUDA_MMA_ROWS says otherwise; beyond it cuBLASLt runs. Measured
// on the H200 (BenchmarkLinearBF16, 4b-shape GEMMs): up to 8 rows the GEMV
// reads the weights about as fast as cuBLASLt or faster (and keeps 16
// mantissa bits of the activations); at 16 and 32 rows its activation
// loads hold it to a half or a third of cuBLASLt's bandwidth.
const mmaMaxRowsDefault = 8

// mmaRowsFromEnv reads COHORT_CUDA_MMA_ROWS (0 turns the tensor-core GEMV
// off; at most 32).
func mmaRowsFromEnv() (int, error) {
	v := os.Getenv("COHORT_CUDA_MMA_ROWS")
	if v == "" {
		return mmaMaxRowsDefault, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 32 {
		return 0, fmt.Errorf("cuda: COHORT_CUDA_MMA_ROWS=%q: want an integer in [0, 32]", v)
	}
	return n, nil
}

// gemvTuning picks the tensor-core GEMV's variant; zero values mean the
// defaults (tests and benchmarks set them to compare variants).
type gemvTuning struct {
	warps   int    // warps per block (1..mmaMaxWarps; default 4)
	split   int    // blocks per 16-row tile (default: enough warps to fill the device)
	rows    int    // most rows of the CUDA-core GEMV when the tensor-core one does not fit (default gemvMaxRows; -1: none)
	variant string // entry variant where the module has one ("u2_", "o6_", "o7_", "o8_"; default none)
	// baseTiles: launches of at most this many 16-row tiles take the
	// unbounded entries instead of variant (0: none), or the entries of
	// fewVariant with fewWarps warps a block where those are set.
	baseTiles  int
	fewVariant string
	fewWarps   int
	bulk       bool // one-row Linears take gemv_bulk_nt1 (gemv_bulk.go)
	occ        bool // split by the entry's occupancy: one wave, the fewest chunks per warp
}

// gemvTuningFromEnv reads COHORT_CUDA_GEMV: empty (or "few") for the
// default, the o6_ entries split by occupancy with the unbounded entries
// where a launch has at most mmaBaseTiles tiles; "o6" for o6_ everywhere
// (the default before 2026-12-03), "base" for the unbounded entries and the
// warps-per-SM split, "occ" for the unbounded entries split by occupancy,
// or a variant (u2, o6, o7, o8) split by occupancy; "fewu2" and "feww8"
// are the default with the u2_ entries or blocks of 8 warps for the
// launches of few tiles, "bulk" the default with one-row Linears on
// gemv_bulk_nt1 (A/B runs). Measured on the H200
// (cohort bench, 4b-shape, one run): batch 1 3.91 ms/token with o6, 4.00
// o7, 4.10 o8, 4.27 base; batch 8 4.92, 5.09, 5.32, 5.40. The unbounded
// entries get 77+ registers a thread, 5 blocks of 4 warps an SM, so a
// 768-tile GEMV took two waves.
func gemvTuningFromEnv() (gemvTuning, error) {
	switch v := os.Getenv("COHORT_CUDA_GEMV"); v {
	case "", "few":
		return gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles}, nil
	case "fewu2":
		return gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles, fewVariant: "u2_"}, nil
	case "feww8":
		return gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles, fewWarps: 8}, nil
	case "bulk":
		return gemvTuning{variant: "o6_", occ: true, baseTiles: mmaBaseTiles, bulk: true}, nil
	case "base":
		return gemvTuning{}, nil
	case "occ":
		return gemvTuning{occ: true}, nil
	case "u2", "o6", "o7", "o8":
		return gemvTuning{variant: v + "_", occ: true}, nil
	default:
		return gemvTuning{}, fmt.Errorf("cuda: COHORT_CUDA_GEMV=%q: want base, occ, few, fewu2, feww8, bulk, u2, o6, o7 or o8", v)
	}
}

// mmaCounters is the size of the tile counters of split tiles (one per tile,
// two for SwiGLULinear): launches with more tiles do not split.
const mmaCounters = 1 << 14

// mmaWarpsTarget is the warps per SM a launch aims for: enough loads in
// flight to keep HBM busy. Measured on the H200 (BenchmarkLinearBF16): 4
// warps per block and about this many warps per SM read 47 MB matrices at
// 3.0–3.2 TB/s; 160 tiles of 8 warps (N = 2560) only reached 2.2 TB/s.
const mmaWarpsTarget = 24

// mmaBaseTiles is gemvTuning.baseTiles by default: GEMVs of few tiles (the
// 4b shape's N = 2560 projections, 160 tiles, split over K) take the
// unbounded entries, the rest o6_. Through cohort bench on the H200
// (4b-shape, 2026-12-03, twelfth session, alternated with o6_ everywhere
// twice): batch 1 3.234 and 3.208 ms/token against 3.305 and 3.238, batch
// 8 3.890 and 3.824 against 3.999 and 3.912, batch 32 6.172 and 6.064
// against 6.434 and 6.236. Measured side by side on the H200
// (BenchmarkLinearBF16, 2026-12-03, eleventh session), the unbounded
// entries split by occupancy against o6_ at 1 and 8 rows: the down
// projection (K 9216) 2,838 and 2,403 GB/s against 2,494 and 2,109, the
// attention output projection (K 4096) 2,246 and 1,895 against 1,988 and
// 1,660; but the GDN in-projection (768 tiles) 2,649 against 3,421, and the
// gate (576 tiles) level (3,150 against 3,127).
const mmaBaseTiles = 256

// mmaPlan is one tensor-core GEMV launch: its entry, grid and block, and
// the blocks per tile (split).
type mmaPlan struct {
	name        string
	grid, block [3]int
	split       int
	nt          int    // n-tiles of 8 rows: 1, 2 or 4
	variant     string // the entries' variant (mmaEntry)
}

// mmaLaunch plans the tensor-core GEMV of T rows over tiles 16-row tiles of
// K columns: the n-tile count 8·NT ≥ T, the warps per block and the split.
func (b *Backend) mmaLaunch(prefix string, T, tiles, K int) mmaPlan {
	nt := nTiles(T, 1, 4)
	w := b.gemvTune.warps
	if w <= 0 || w > mmaMaxWarps {
		w = 4
	}
	v := b.gemvTune.variant
	if tiles <= b.gemvTune.baseTiles {
		v = b.gemvTune.fewVariant
		if b.gemvTune.fewWarps > 0 {
			w = b.gemvTune.fewWarps
		}
	}
	name := b.mmaEntry(prefix, nt, w, v)
	split := b.gemvTune.split
	switch {
	case split > 0:
	case b.gemvTune.occ:
		// Deterministic mode splits K as a one-row launch does, whatever
		// T: the sum of a row's products then has one order.
		occName := name
		if b.det {
			occName = b.mmaEntry(prefix, 1, w, v)
		}
		split = mmaSplit(tiles, K/64, w, b.occupancy(occName, 32*w)*b.sms)
	default:
		split = (b.sms*mmaWarpsTarget + tiles*w/2) / (tiles * w)
	}
	p := newMMAPlan(name, tiles, split, K, w, nt)
	p.variant = v
	return p
}

// newMMAPlan is the launch of a tensor-core GEMV entry over tiles 16-row
// tiles of K columns with blocks of w warps: the split over K wanted, kept
// to at least two chunks a warp, and none when the tiles are too many for
// the split tiles' counters.
func newMMAPlan(name string, tiles, split, K, w, nt int) mmaPlan {
	split = max(1, min(split, K/64/(2*w)))
	if 2*tiles > mmaCounters {
		split = 1
	}
	return mmaPlan{name: name, grid: [3]int{tiles, split, 1}, block: [3]int{32 * w, 1, 1}, split: split, nt: nt}
}

// nTiles returns the n-tiles of 8 rows a GEMV entry holds for T rows: the
// smallest power of two from lo that covers them, at most hi.
func nTiles(T, lo, hi int) int {
	nt := lo
	for nt < hi && 8*nt < T {
		nt *= 2
	}
	return nt
}

// mmaGroups plans the tensor-core GEMV of T rows (mmaLaunch; parts weights
// per tile share the workspace) and calls launch for each of rowGroups'
// ranges with its plan and the split tiles' workspace and counters, which
// the ranges' launches take in turn.
func (b *Backend) mmaGroups(op, prefix string, T, tiles, K, parts int, launch func(p mmaPlan, t0, n int, ws, cnt devptr)) {
	p := b.mmaLaunch(prefix, min(T, detGroupRows), tiles, K)
	ws, cnt := b.mmaWorkspace(op, p, parts)
	b.rowGroups(T, detGroupRows, func(t0, n int) {
		if n != min(T, detGroupRows) { // the last range of a deterministic launch
			p = b.mmaLaunch(prefix, n, tiles, K)
		}
		launch(p, t0, n, ws, cnt)
	})
}

// mmaEntry returns the entry of a GEMV family (prefix) at nt n-tiles and w
// warps per block, in variant v where the module has one (the o6_ to o8_
// entries hold at most 4 warps).
func (b *Backend) mmaEntry(prefix string, nt, w int, v string) string {
	base := fmt.Sprintf("%s_nt%d", prefix, nt)
	if v == "" || v[0] == 'o' && w > 4 {
		return base
	}
	name := fmt.Sprintf("%s_%snt%d", prefix, v, nt)
	if _, ok := b.funcs[name]; !ok {
		return base
	}
	return name
}

// mmaSplit returns the blocks per tile that keep tiles·split blocks within
// one wave of resident blocks and give each warp the fewest chunks (the
// smallest such split): 1 when the tiles alone fill a wave.
func mmaSplit(tiles, chunks, w, resident int) int {
	best, span := 1, (chunks+w-1)/w
	for s := 2; s*tiles <= resident && 2*s*w <= chunks; s++ {
		if c := (chunks + s*w - 1) / (s * w); c < span {
			best, span = s, c
		}
	}
	return best
}

// occupancy returns how many blocks of threads threads of kernel name one
// SM holds (at least 1), asked of the driver once per pair.
func (b *Backend) occupancy(name string, threads int) int {
	key := fmt.Sprintf("%s/%d", name, threads)
	if n, ok := b.occ[key]; ok {
		return n
	}
	n, err := b.funcs[name].MaxActiveBlocksPerMultiProcessor(threads, 0)
	if err != nil || n < 1 {
		n = 1
	}
	if b.occ == nil {
		b.occ = map[string]int{}
	}
	b.occ[key] = n
	return n
}

// initMMA allocates the zeroed tile counters (before any step, so never
// inside a graph capture).
func (b *Backend) initMMA() error {
	const n = mmaCounters + 1 // and gemv_mma_addnorm's (addNormDone)
	p, err := memAlloc(n * 4)
	if err != nil {
		return fmt.Errorf("cuda: GEMV tile counters: %w", err)
	}
	b.permanent[p] = n * 4
	b.mmaCnt = p
	if err := memsetD32(p, 0, n); err != nil {
		return fmt.Errorf("cuda: GEMV tile counters: %w", err)
	}
	return nil
}

// mmaWorkspace returns the partial-sum workspace and tile counters of a
// split launch (parts: 1, or 2 for SwiGLULinear), or zeros when it does not
// split.
func (b *Backend) mmaWorkspace(op string, p mmaPlan, parts int) (ws, cnt devptr) {
	if p.split == 1 {
		return 0, 0
	}
	return b.allocScratch(op, int64(parts*p.grid[0]*p.split*p.nt*128*4)), b.mmaCnt
}

// mmaFits reports whether the tensor-core GEMV serves T rows of K columns.
// In deterministic mode it serves any T (in launches of detGroupRows).
func (b *Backend) mmaFits(T, K int) bool {
	return T >= 1 && (T <= b.mmaRows || b.det && b.mmaRows > 0) && K%64 == 0
}

// gemvFits reports whether the CUDA-core GEMV serves T rows of K columns.
func (b *Backend) gemvFits(T, K int) bool {
	rows := b.gemvTune.rows
	if rows == 0 {
		rows = gemvMaxRows
	}
	return (T <= rows || b.det) && K%8 == 0
}

// linearBF16 computes y[T, N] = x[T, K]·w[N, K]ᵀ with bf16 w: a
// bandwidth-bound tensor-core GEMV for decode-sized T (a CUDA-core GEMV
// when K is not a multiple of 64), else x rounded to bf16 and a bf16
// cuBLASLt GEMM with fp32 accumulation and output.
func (b *Backend) linearBF16(op string, y, x, w *Tensor, T, K, N int) {
	switch {
	case b.bulkFits(T, K):
		needF32(op, x)
		b.gemvBulk(op, y, x, w, K, N)
	case b.mmaFits(T, K):
		needF32(op, x)
		b.mmaGroups(op, "gemv_mma", T, (N+15)/16, K, 1, func(p mmaPlan, t0, n int, ws, cnt devptr) {
			b.launch(op, p.name, p.grid, p.block, 0, rowPtr(y.ptr, t0, N), w.ptr, N, devptr(0), devptr(0), 0,
				devptr(0), devptr(0), 0, devptr(0), devptr(0), 0, rowPtr(x.ptr, t0, K), n, K, ws, cnt)
		})
	case b.gemvFits(T, K):
		needF32(op, x)
		b.rowGroups(T, gemvMaxRows, func(t0, n int) {
			b.launch(op, "gemv_bf16", [3]int{(N + gemvWarps - 1) / gemvWarps, 1, 1}, [3]int{32, gemvWarps, 1}, 0,
				rowPtr(y.ptr, t0, N), rowPtr(x.ptr, t0, K), w.ptr, n, K, N)
		})
	default:
		b.ltGemmBF16(op, y, b.rowsBF16(op, x, T, K), w, T, K, N)
	}
}

// rowsBF16 returns x [T, K] rounded to bf16 in scratch: cuBLASLt's B
// operand for the bf16 weights (x's twin when its producer wrote one).
func (b *Backend) rowsBF16(op string, x *Tensor, T, K int) devptr {
	if x.twin != 0 && bf16Twins {
		return x.twin
	}
	needF32(op, x)
	n := int64(T) * int64(K)
	xb := b.allocScratch(op, n*2)
	b.launch(op, "f32_to_bf16", [3]int{b.grid1(n, 256), 1, 1}, [3]int{256, 1, 1}, 0, xb, x.ptr, n)
	return xb
}

// ltGemmBF16 is y[T, N] = xb[T, K]·w[N, K]ᵀ on cuBLASLt, xb from rowsBF16
// (or on gemv_mmab where skinnyFits).
func (b *Backend) ltGemmBF16(op string, y *Tensor, xb devptr, w *Tensor, T, K, N int) {
	if b.skinnyFits(T, K) {
		b.linearSkinny(op, y, xb, w, T, K, N)
		return
	}
	b.ltGemm(op, ltLinearKey(T, K, N), w.ptr, xb, y.ptr)
}

// ltLinearKey is the cuBLASLt plan of a bf16 Linear: y [T, N] = xb [T, K] ·
// w [N, K]ᵀ, column-major as cuBLASLt sees it.
func ltLinearKey(T, K, N int) ltKey {
	return ltKey{bf16: true, transA: true, m: N, n: T, k: K, lda: K, ldb: K, ldd: N}
}

// twinFor gives t, a producer's new [rows, cols] output, a bf16 twin for
// the kernel to fill when a Linear would read t on cuBLASLt (too many rows
// for the GEMVs), and returns it (0: none, and the kernel writes none).
// Outputs with twins are never changed in place after their kernel.
// COHORT_CUDA_TWINS=0 turns them off.
func (b *Backend) twinFor(op string, t *Tensor) devptr {
	if !bf16Twins || b.weights != "bf16" || len(t.shape) != 2 {
		return 0
	}
	if T, K := t.dims(); T == 0 || K == 0 || b.mmaFits(T, K) || b.gemvFits(T, K) {
		return 0
	}
	t.twin = b.allocScratch(op, int64(t.n)*2)
	return t.twin
}

// bf16Twins turns twinFor on (COHORT_CUDA_TWINS=0: off, for side-by-side
// runs).
var bf16Twins = os.Getenv("COHORT_CUDA_TWINS") != "0"

// ltFits reports whether Linear of x [T, K] and bf16 weights ws runs on
// cuBLASLt (rows too many for the GEMVs), so that several weights read
// against the same x can share its one bf16 copy.
func (b *Backend) ltFits(op string, xt *Tensor, ws []kernels.Tensor) bool {
	T, K := xt.dims()
	return len(xt.shape) == 2 && T > 0 && K > 0 && !b.mmaFits(T, K) && !b.gemvFits(T, K) && allBF16(b, op, K, ws)
}

// linearsLt is Linears on cuBLASLt: x is rounded to bf16 once for all ws.
func (b *Backend) linearsLt(op string, xt *Tensor, ws []kernels.Tensor) []kernels.Tensor {
	T, K := xt.dims()
	xb := b.rowsBF16(op, xt, T, K)
	out := make([]kernels.Tensor, len(ws))
	for i, w := range ws {
		wt := b.weight(op, w)
		y := b.newTensor(op, T, wt.shape[0])
		b.ltGemmBF16(op, y, xb, wt, T, K, wt.shape[0])
		out[i] = y
	}
	return out
}

// Linears returns x·wᵢᵀ for every w (kernels.FusedLinear). Up to four bf16
// weights that the tensor-core GEMV serves share one launch; otherwise each
// is a Linear.
func (b *Backend) Linears(x kernels.Tensor, ws ...kernels.Tensor) []kernels.Tensor {
	const op = "Linears"
	xt := b.linearInput(op, x)
	T, K := xt.dims()
	if b.ltFits(op, xt, ws) {
		return b.linearsLt(op, xt, ws)
	}
	if len(ws) > 4 || len(xt.shape) != 2 || !b.mmaFits(T, K) || !allBF16(b, op, K, ws) {
		out := make([]kernels.Tensor, len(ws))
		for i, w := range ws {
			out[i] = b.Linear(x, w)
		}
		return out
	}
	needF32(op, xt)
	args, out, tiles := b.mmaSegments(op, T, ws)
	b.mmaGroups(op, "gemv_mma", T, tiles, K, 1, func(p mmaPlan, t0, n int, part, cnt devptr) {
		b.launch(op, p.name, p.grid, p.block, 0, append(segmentRows(args, t0), rowPtr(xt.ptr, t0, K), n, K, part, cnt)...)
	})
	return out
}

// segmentRows returns mmaSegments' arguments with each output advanced to
// row t0.
func segmentRows(args [12]any, t0 int) []any {
	for i := 0; i < 12; i += 3 {
		if y := args[i].(devptr); y != 0 {
			args[i] = rowPtr(y, t0, args[i+2].(int))
		}
	}
	return args[:]
}

// mmaSegments returns the (y, w, N) arguments of up to four weights read in
// one GEMV launch (zeros for the unused ones), their new outputs [T, N],
// and the 16-row tiles of them all.
func (b *Backend) mmaSegments(op string, T int, ws []kernels.Tensor) (args [12]any, out []kernels.Tensor, tiles int) {
	out = make([]kernels.Tensor, len(ws))
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
	return args, out, tiles
}

// allBF16 reports whether every w is a bf16 matrix [N, K] with N > 0.
func allBF16(b *Backend, op string, K int, ws []kernels.Tensor) bool {
	for _, w := range ws {
		wt := b.weight(op, w)
		if !wt.bf16 || len(wt.shape) != 2 || wt.shape[1] != K || wt.shape[0] == 0 {
			return false
		}
	}
	return true
}

// SwiGLULinear returns silu(x·gateᵀ) ⊙ (x·upᵀ) (kernels.FusedLinear): one
// tensor-core pass over both weights for decode-sized x, else SwiGLU of two
// Linears.
func (b *Backend) SwiGLULinear(x, gate, up kernels.Tensor) kernels.Tensor {
	return b.swiGLULinear("SwiGLULinear", x, gate, up, nil)
}

// swiGLULinear is SwiGLULinear; readers: the Linears that alone read its
// output (outputs), or nil.
func (b *Backend) swiGLULinear(op string, x, gate, up kernels.Tensor, readers []kernels.Tensor) kernels.Tensor {
	xt, gt, ut := b.linearInput(op, x), b.weight(op, gate), b.weight(op, up)
	T, K := xt.dims()
	if pair := []kernels.Tensor{gate, up}; gt.shape[0] == ut.shape[0] && b.ltFits(op, xt, pair) {
		if swigluBF16 {
			return b.swiGLULtBF16(op, xt, gt, ut, readers)
		}
		gu := b.linearsLt(op, xt, pair)
		return b.swiGLU(op, gu[0], gu[1], readers)
	}
	if len(xt.shape) != 2 || !b.mmaFits(T, K) || !allBF16(b, op, K, []kernels.Tensor{gate, up}) || gt.shape[0] != ut.shape[0] {
		return b.swiGLU(op, b.Linear(x, gate), b.Linear(x, up), readers)
	}
	needF32(op, xt)
	N := gt.shape[0]
	y := b.newTensor(op, T, N)
	b.mmaGroups(op, "gemv_mma_swiglu", T, (N+15)/16, K, 2, func(p mmaPlan, t0, n int, ws, cnt devptr) {
		b.launch(op, p.name, p.grid, p.block, 0, rowPtr(y.ptr, t0, N), gt.ptr, ut.ptr, N, rowPtr(xt.ptr, t0, K), n, K, ws, cnt)
	})
	return y
}

// swigluBF16 makes SwiGLULinear on cuBLASLt write the gate and up
// products in bf16 (float32 accumulation, rounded once at the end, as a
// bf16 GEMM in torch does) and SwiGLU read them: half the bytes of the
// widest activations of a prefill step, written and read again. On by
// default: on an H100 (cohort bench, 4b-shape, alternated, 2026-12-06) a
// 1k prefill took 24.0 against 25.4 ms and an 8k one 194.8 against 200.9,
// and the distance to HF f32 (mean top-8 |Δlogprob|) went from 0.133 and
// 0.120 to 0.153 and 0.154 at 128 and 1,024 tokens, within HF bf16's own
// (about 0.28). COHORT_CUDA_SWIGLU_BF16=0 keeps float32 products.
var swigluBF16 = os.Getenv("COHORT_CUDA_SWIGLU_BF16") != "0"

// swiglu8On lets swiGLULtBF16 write a bf16-only output with swiglu8_bf16in
// (16-byte loads and stores a thread) instead of swiglu4_bf16in (8-byte),
// with COHORT_CUDA_SWIGLU8=1: the same bits, not yet run on a GPU, so off
// by default (tests set it directly).
var swiglu8On = os.Getenv("COHORT_CUDA_SWIGLU8") == "1"

// swiGLULtBF16 is SwiGLULinear of x [T, K] on cuBLASLt with the gate and
// up products [T, N] in bf16 scratch, and SwiGLU (swiglu4_bf16in) reading
// them into the float32 output and its twin (readers as in swiGLULinear).
func (b *Backend) swiGLULtBF16(op string, xt, gt, ut *Tensor, readers []kernels.Tensor) kernels.Tensor {
	T, K := xt.dims()
	N := gt.shape[0]
	n := int64(T) * int64(N)
	if n%4 != 0 {
		panic(fmt.Sprintf("cuda: %s: SwiGLU of bf16 products needs a multiple of 4 elements, not %d", op, n))
	}
	xb := b.rowsBF16(op, xt, T, K)
	g, u := b.allocScratch(op, n*2), b.allocScratch(op, n*2)
	for _, p := range [2]struct {
		w *Tensor
		d devptr
	}{{gt, g}, {ut, u}} {
		b.ltGemm(op, ltKey{bf16: true, outBF16: true, transA: true, m: N, n: T, k: K, lda: K, ldb: K, ldd: N}, p.w.ptr, xb, p.d)
	}
	y := b.newTensor(op, T, N)
	yp, yb := b.outputs(op, y, readers)
	if yp == 0 && n%8 == 0 && swiglu8On { // only the twin: 16-byte accesses
		b.launch(op, "swiglu8_bf16in", [3]int{b.grid1(n/8, 256), 1, 1}, [3]int{256, 1, 1}, 0, yb, g, u, n/8)
		return y
	}
	b.launch(op, "swiglu4_bf16in", [3]int{b.grid1(n/4, 256), 1, 1}, [3]int{256, 1, 1}, 0, yp, yb, g, u, n/4)
	return y
}

// ltTune turns on timing cuBLASLt's candidate algorithms and keeping the
// fastest, once per shape and bucket of rows (ltBucket): a new shape whose
// bucket has a timed algorithm adopts it where cuBLASLt accepts it. On by
// default; COHORT_CUDA_LT_TUNE=0 keeps the heuristic's first. Measured on
// the H200 (cohort bench, 4b-shape, medians; 2026-12-03, eleventh session,
// side by side): a 1k prefill 24.6 against 25.3 ms, the 1k TTFT 25.4
// against 26.9, an 8k prefill 201.2 against 202.7, the first 8k run 233.8
// against 204.2 (its timing).
var ltTune = os.Getenv("COHORT_CUDA_LT_TUNE") != "0"

// tuneLt picks plan p's algorithm when ltTune is on and not in
// deterministic mode (where the algorithm must not depend on timing): its
// bucket's timed algorithm if there is one and cuBLASLt accepts it, else,
// outside graph capture, the fastest candidate timed on the GEMM's own
// operands (its output is written again by the run that follows), which
// the bucket then keeps.
func (b *Backend) tuneLt(op string, key ltKey, p ltPlan, a, bm, d devptr) {
	if !ltTune || b.det {
		return
	}
	bk := ltBucket(key)
	if al, ok := b.ltTuned[bk]; ok && p.adopt(b.lt, al) {
		b.ltAdopted++
		return
	}
	if b.graph.mode != graphOff {
		return
	}
	best, of, err := p.tune(b.lt, a, bm, d, b.ws, 3)
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: GEMM %+v: %v", op, key, err))
	}
	if b.ltTuned == nil {
		b.ltTuned = map[ltKey]ltAlgo{}
	}
	b.ltTuned[bk] = p.algo()
	log.Printf("cuda: GEMM m=%d n=%d k=%d: cuBLASLt candidate %d of %d is the fastest (kept for n up to %d)", key.m, key.n, key.k, best, of, bk.n)
}

// ltBucket is key with its rows (n) rounded up to a power of two, at least
// 16 (with ltQuarterBuckets, up to the next quarter of that octave: 640,
// 768, 896 or 1024 for rows 513 to 1024): the GEMMs that share a timed
// algorithm.
func ltBucket(key ltKey) ltKey {
	n := 16
	for n < key.n {
		n *= 2
	}
	if ltQuarterBuckets && n > 16 {
		b, q := n/2, n/8
		for b < key.n {
			b += q
		}
		n = b
	}
	key.n = n
	return key
}

// ltQuarterBuckets splits each octave of rows into four buckets of timed
// cuBLASLt algorithms (the default; COHORT_CUDA_LT_BUCKETS=octave keeps one
// bucket an octave). Why: on an H100 (2026-12-06) a 1k prefill took 27.1 ms
// after decode batches of 8 to 256 in the same engine and 25.7 ms in one
// that had run only 1k prompts. Both engines timed the bucket of up to
// 1,024 rows on a step of 896 or 897 rows (their logs), and chose
// different algorithms there (candidate 0 against 7 for the 8,192-wide
// projections), which the 1k prefills then adopted. A mixed step's 144
// rows likewise take what the first step of 129 to 256 rows timed.
// Measured on an H100 in the sixteenth session (cohort bench, decode
// batches 8 and 32 and then the 1k prefill in one engine, alternated, two
// rounds; docs/gpu.md phase 17): the 1k prefill 21.9 and 21.7 ms against
// 22.2 and 21.9, batch 32 6.439 and 6.389 ms/token against 6.549 and
// 6.476, batch 8 and the 1k TTFT within 0.1.
var ltQuarterBuckets = os.Getenv("COHORT_CUDA_LT_BUCKETS") != "octave"

// ltGemm runs a cuBLASLt matmul, preparing and caching its plan on first use.
func (b *Backend) ltGemm(op string, key ltKey, a, bm, d devptr) { b.ltGemmAdd(op, key, a, bm, 0, d) }

// ltGemmAdd is ltGemm with c (d's layout) added to the product in the
// GEMM's epilogue when c is not 0: d = a·bm + c. The plan, and so the
// algorithm, is ltGemm's for key, and the sum is rounded once, as
// ltGemm's output added to c by a kernel would be.
func (b *Backend) ltGemmAdd(op string, key ltKey, a, bm, c, d devptr) {
	p, ok := b.plans[key]
	if !ok {
		var err error
		if p, err = newLtPlan(b.lt, key, b.wsSize); err != nil {
			panic(fmt.Sprintf("cuda: %s: GEMM plan %+v: %v", op, key, err))
		}
		b.plans[key] = p
		b.tuneLt(op, key, p, a, bm, d)
	}
	b.lastLaunch = ""
	if b.graph.skip(op, "cublasLtMatmul", uint64(a), uint64(bm), uint64(c), uint64(d)) {
		return
	}
	var err error
	if c != 0 {
		err = p.runAdd(b.lt, a, bm, c, d, b.ws)
	} else {
		err = p.run(b.lt, a, bm, d, b.ws)
	}
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: GEMM %+v: %v", op, key, err))
	}
	if b.syncLaunch && b.graph.mode == graphOff {
		if err := ctxSynchronize(); err != nil {
			panic(fmt.Sprintf("cuda: %s: GEMM: %v", op, err))
		}
	}
}
