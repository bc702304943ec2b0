//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"cohort/kernels"
)

// Embedding gathers rows of table [rows, H] for ids; table holds vocab rows
// [vocabStart, vocabStart+rows), and ids outside that range give zero rows.
func (b *Backend) Embedding(table kernels.Tensor, ids []int32, vocabStart int) kernels.Tensor {
	const op = "Embedding"
	tt := b.weight(op, table)
	check(op, kernels.CheckEmbedding(tt.shape))
	rows, h := tt.shape[0], tt.shape[1]
	y := b.newTensor(op, len(ids), h)
	if len(ids) == 0 || h == 0 {
		return y
	}
	var gen inputGen
	if sameInts(ids, b.stepIn.Tokens) {
		gen = func(in *kernels.StepInputs) []int32 { return in.Tokens }
	}
	b.profile.step(len(ids))
	dids := b.uploadInts(op, ids, gen)
	kernel := "embedding_f32"
	if tt.bf16 {
		kernel = "embedding_bf16"
	}
	b.launch(op, kernel, [3]int{len(ids), 1, 1}, [3]int{min(256, (h+31)/32*32), 1, 1}, 0,
		y.ptr, tt.ptr, dids, h, rows, vocabStart)
	return y
}

// Linear returns x·wᵀ for x [T, in] and w [out, in].
//
// Row-major y[T, out] = x[T, in]·w[out, in]ᵀ is, read column-major,
// Y[out, T] = Wᵀ·X with W = w as a column-major [in, out] matrix (ld in) and
// X = x as a column-major [in, T] matrix (ld in): so cuBLASLt computes
// D[m=out, n=T] = op(A)·op(B) with A = w (transposed, stored [in, out]),
// B = x (not transposed, stored [in, T]) and k = in.
func (b *Backend) Linear(x, w kernels.Tensor) kernels.Tensor {
	const op = "Linear"
	xt, wt := b.linearInput(op, x), b.weight(op, w)
	check(op, kernels.CheckLinear(xt.shape, wt.shape))
	T, in := xt.dims()
	out := wt.shape[0]
	shape := append(slices.Clone(xt.shape[:len(xt.shape)-1]), out)
	y := b.newTensor(op, shape...)
	if y.n == 0 {
		return y
	}
	if in == 0 {
		b.zero(op, y)
		return y
	}
	if wt.bf16 {
		b.linearBF16(op, y, xt, wt, T, in, out)
		return y
	}
	needF32(op, xt)
	b.gemmNT(op, y.ptr, xt.ptr, wt.ptr, T, in, out)
	return y
}

// gemmNT computes y[T, N] = x[T, K]·w[N, K]ᵀ (all row-major, fp32).
func (b *Backend) gemmNT(op string, y, x, w devptr, T, K, N int) {
	if b.gemm == "cublaslt" && !b.det {
		b.ltGemm(op, ltKey{transA: true, m: N, n: T, k: K, lda: K, ldb: K, ldd: N}, w, x, y)
		return
	}
	const tile = 16
	b.launch(op, "gemm_nt_f32", [3]int{(N + tile - 1) / tile, (T + tile - 1) / tile, 1}, [3]int{tile, tile, 1}, 0,
		y, x, w, T, K, N)
}

// zero fills t with zeros.
func (b *Backend) zero(op string, t *Tensor) {
	if b.graph.skip(op, "memset", uint64(t.ptr), uint64(t.n)) {
		return
	}
	if err := memsetD32(t.ptr, 0, int64(t.n)); err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// check panics with err, prefixed with the backend and the op, unless err is
// nil: a call that breaks the kernels contract is a bug of its caller.
func check(op string, err error) {
	if err != nil {
		panic(fmt.Sprintf("cuda: %s: %v", op, err))
	}
}

// RMSNorm is the zero-centered form x / rms(x) · (1 + w), per group of len(w)
// columns.
func (b *Backend) RMSNorm(x, w kernels.Tensor, eps float32) kernels.Tensor {
	return b.groupNorm("RMSNorm", "rmsnorm_f32", x, w, eps)
}

// groupNorm runs a norm kernel with one block per group of len(w) columns.
func (b *Backend) groupNorm(op, kernel string, x, w kernels.Tensor, eps float32) kernels.Tensor {
	xt, wt := b.tensor(op, x), b.tensor(op, w)
	check(op, kernels.CheckGroups(xt.shape, wt.shape))
	y := b.newTensor(op, xt.shape...)
	g := wt.n
	b.launch(op, kernel, [3]int{xt.n / g, 1, 1}, [3]int{blockFor(g), 1, 1}, 0, y.ptr, xt.ptr, wt.ptr, g, eps)
	return y
}

// AddRMSNorm returns sum = residual + delta and RMSNorm(sum, w).
func (b *Backend) AddRMSNorm(residual, delta, w kernels.Tensor, eps float32) (sum, normed kernels.Tensor) {
	return b.addRMSNorm("AddRMSNorm", residual, delta, w, eps, nil)
}

// addRMSNorm is AddRMSNorm; readers: the Linears that alone read normed
// (outputs), or nil.
func (b *Backend) addRMSNorm(op string, residual, delta, w kernels.Tensor, eps float32, readers []kernels.Tensor) (sum, normed kernels.Tensor) {
	rt, dt, wt := b.tensor(op, residual), b.tensor(op, delta), b.tensor(op, w)
	check(op, kernels.CheckSame(rt.shape, dt.shape))
	check(op, kernels.CheckGroups(rt.shape, wt.shape))
	s, n := b.newTensor(op, rt.shape...), b.newTensor(op, rt.shape...)
	g := wt.n
	// One block per row; the kernel moves float4s when g%4 == 0, so size
	// the block to about g/4 threads (up to 1024) for one wide row.
	block := blockFor(g)
	if g%4 == 0 {
		block = min(max((g/4+31)/32*32, 32), 1024)
	}
	if rows := rt.n / g; b.useRowNorm(rows, g, s.ptr, n.ptr, rt.ptr, dt.ptr, wt.ptr) {
		grid, block := b.normRowsGrid(rows)
		y, yb := b.outputs(op, n, readers)
		b.launch(op, "add_rmsnorm_rows_f32", grid, block, 0, s.ptr, y, yb, rt.ptr, dt.ptr, wt.ptr, g, rows, eps)
		return s, n
	}
	y, yb := b.outputs(op, n, readers)
	b.launch(op, "add_rmsnorm_f32", [3]int{rt.n / g, 1, 1}, [3]int{block, 1, 1}, 0, s.ptr, y, yb, rt.ptr, dt.ptr, wt.ptr, g, eps)
	return s, n
}

// The warp-per-group norms (add_rmsnorm_rows_f32, gated_rmsnorm_rows_f32,
// gdn_qk_norm_rows_f32) take steps of at least normRowsMin rows: a warp a
// group, float4s, no block barrier. Fewer rows (decode) keep the
// block-per-group kernels: measured on the H200 (4b shape), the warp
// kernels made decode steps of 8 and 32 rows 0.74 ms slower and batch 1
// 0.69 ms slower, while a 1k prefill gained (the q/k norm 1.0 -> 0.26 ms a
// step, the gated norm 1.0 -> 0.49, add+norm 1.33 -> 1.13), and batch 256
// ran 0.8 ms a step slower with the threshold at 256 than the session
// before (not side by side), hence 512. COHORT_CUDA_NORM_ROWS sets the
// threshold (1: every step; a huge value: never) for side-by-side runs.
var normRowsMin = normRowsFromEnv(os.Getenv("COHORT_CUDA_NORM_ROWS"))

const (
	normRowsDefault = 512
	normMaxWarps    = 8 // warps a block of the warp-per-group norms
)

// normRowsFromEnv parses COHORT_CUDA_NORM_ROWS: a positive row count,
// normRowsDefault when unset or not one.
func normRowsFromEnv(v string) int {
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return normRowsDefault
}

// normRowsGrid sizes a warp-per-group norm launch over groups groups: as
// many warps a block (1 to normMaxWarps) as keep at least one block an SM.
func (b *Backend) normRowsGrid(groups int) (grid, block [3]int) {
	w := min(max(groups/max(b.sms, 1), 1), normMaxWarps)
	return [3]int{(groups + w - 1) / w, 1, 1}, [3]int{32 * w, 1, 1}
}

// useRowNorm reports whether a norm over rows groups of g columns takes
// the warp-per-group kernel: enough rows, g a multiple of 4 and every
// pointer 16-byte aligned, and not in deterministic mode (a row's bits
// must not depend on how many rows its step has, and the two kernels sum
// in different orders).
func (b *Backend) useRowNorm(rows, g int, ptrs ...devptr) bool {
	if b.det || rows < normRowsMin || g%4 != 0 {
		return false
	}
	return aligned16(ptrs...)
}

// aligned16 reports whether every pointer is 16-byte aligned.
func aligned16(ptrs ...devptr) bool {
	var or devptr
	for _, p := range ptrs {
		or |= p
	}
	return or&15 == 0
}

// GatedRMSNorm normalizes x per head of len(w) columns with the plain weight
// w and multiplies by silu(z).
func (b *Backend) GatedRMSNorm(x, z, w kernels.Tensor, eps float32) kernels.Tensor {
	return b.gatedRMSNorm("GatedRMSNorm", x, z, w, eps, nil)
}

// gatedRMSNorm is GatedRMSNorm; readers: the Linears that alone read y
// (outputs), or nil.
func (b *Backend) gatedRMSNorm(op string, x, z, w kernels.Tensor, eps float32, readers []kernels.Tensor) kernels.Tensor {
	xt, zt, wt := b.tensor(op, x), b.tensor(op, z), b.tensor(op, w)
	check(op, kernels.CheckSame(xt.shape, zt.shape))
	check(op, kernels.CheckGroups(xt.shape, wt.shape))
	y := b.newTensor(op, xt.shape...)
	g := wt.n
	// gated_rmsnorm_rows_f32 holds groups of up to 256 (two float4s a lane).
	// Its threshold counts rows of x (tokens), not groups.
	rows, groups := xt.n/max(xt.shape[len(xt.shape)-1], 1), xt.n/g
	if g <= 256 && b.useRowNorm(rows, g, y.ptr, xt.ptr, zt.ptr, wt.ptr) {
		grid, block := b.normRowsGrid(groups)
		yp, yb := b.outputs(op, y, readers)
		b.launch(op, "gated_rmsnorm_rows_f32", grid, block, 0, yp, yb, xt.ptr, zt.ptr, wt.ptr, g, groups, eps)
		return y
	}
	yp, yb := b.outputs(op, y, readers)
	b.launch(op, "gated_rmsnorm_f32", [3]int{xt.n / g, 1, 1}, [3]int{blockFor(g), 1, 1}, 0, yp, yb, xt.ptr, zt.ptr, wt.ptr, g, eps)
	return y
}

// Add returns a + b.
func (b *Backend) Add(x, y kernels.Tensor) kernels.Tensor {
	return b.elementwise("Add", "add_f32", x, y)
}

// SwiGLU returns silu(gate) ⊙ up.
func (b *Backend) SwiGLU(gate, up kernels.Tensor) kernels.Tensor {
	return b.swiGLU("SwiGLU", gate, up, nil)
}

// swiGLU is SwiGLU; readers: the Linears that alone read y (outputs), or
// nil.
func (b *Backend) swiGLU(op string, gate, up kernels.Tensor, readers []kernels.Tensor) kernels.Tensor {
	gt, ut := b.tensor(op, gate), b.tensor(op, up)
	check(op, kernels.CheckSame(gt.shape, ut.shape))
	y := b.newTensor(op, gt.shape...)
	yp, yb := b.outputs(op, y, readers)
	if y.n%4 == 0 && aligned16(y.ptr, yb, gt.ptr, ut.ptr) {
		n4 := int64(y.n / 4)
		b.launch(op, "swiglu4_f32", [3]int{b.grid1(n4, 256), 1, 1}, [3]int{256, 1, 1}, 0, yp, yb, gt.ptr, ut.ptr, n4)
		return y
	}
	b.launch(op, "swiglu_f32", [3]int{b.grid1(int64(y.n), 256), 1, 1}, [3]int{256, 1, 1}, 0,
		yp, yb, gt.ptr, ut.ptr, int64(y.n))
	return y
}

// elementwise runs a kernel of two same-shaped inputs and one output.
func (b *Backend) elementwise(op, kernel string, x, y kernels.Tensor) kernels.Tensor {
	xt, yt := b.tensor(op, x), b.tensor(op, y)
	check(op, kernels.CheckSame(xt.shape, yt.shape))
	out := b.newTensor(op, xt.shape...)
	b.launch(op, kernel, [3]int{b.grid1(int64(out.n), 256), 1, 1}, [3]int{256, 1, 1}, 0, out.ptr, xt.ptr, yt.ptr, int64(out.n))
	return out
}

// SplitQueryGate splits q_proj's per-head interleaved output
// [T, heads·2·headDim] = [q_0 | g_0 | q_1 | g_1 | …] into q and gate
// [T, heads·headDim].
func (b *Backend) SplitQueryGate(qg kernels.Tensor, heads, headDim int) (q, gate kernels.Tensor) {
	const op = "SplitQueryGate"
	t := b.tensor(op, qg)
	check(op, kernels.CheckSplitQueryGate(t.shape, heads, headDim))
	T, _ := t.dims()
	qt, gt := b.newTensor(op, T, heads*headDim), b.newTensor(op, T, heads*headDim)
	b.launch(op, "split_query_gate_f32", [3]int{T, heads, 1}, [3]int{min(256, (headDim+31)/32*32), 1, 1}, 0,
		qt.ptr, gt.ptr, t.ptr, heads, headDim)
	return qt, gt
}

// ropeFreqs returns RoPE's inverse frequencies on the device, uploaded once
// per (rotaryDim, theta).
func (b *Backend) ropeFreqs(op string, rotaryDim int, theta float64) devptr {
	key := ropeKey{rotaryDim, theta}
	inv, ok := b.invFreq[key]
	if !ok {
		inv = b.uploadConstFloats(op, kernels.RoPEInvFreq(rotaryDim, theta))
		b.invFreq[key] = inv
	}
	return inv
}

// RoPE rotates the first rotaryDim dims of every head of x [T, heads·headDim]
// in place, rotate-half style, with angle float32(pos)·inv_freq[i].
func (b *Backend) RoPE(x kernels.Tensor, positions []int32, headDim, rotaryDim int, theta float64) {
	const op = "RoPE"
	xt := b.tensor(op, x)
	check(op, kernels.CheckRoPE(xt.shape, len(positions), headDim, rotaryDim))
	T, cols := xt.dims()
	if T == 0 || rotaryDim == 0 {
		return
	}
	inv := b.ropeFreqs(op, rotaryDim, theta)
	pos := b.positionsMeta(op, positions)
	pairs := cols / headDim * rotaryDim / 2
	b.launch(op, "rope_f32", [3]int{T, 1, 1}, [3]int{min(256, (pairs+31)/32*32), 1, 1}, 0,
		xt.ptr, pos, inv, cols, headDim, rotaryDim)
}

// SelectRows gathers rows of x.
func (b *Backend) SelectRows(x kernels.Tensor, rows []int) kernels.Tensor {
	const op = "SelectRows"
	xt := b.tensor(op, x)
	_, cols := xt.dims()
	idx := rowIndex(rows, xt.shape)
	y := b.newTensor(op, len(rows), cols)
	if len(rows) == 0 || cols == 0 {
		return y
	}
	var gen inputGen
	if len(rows) > 0 && len(rows) == len(b.stepIn.Rows) && &rows[0] == &b.stepIn.Rows[0] {
		gen = func(in *kernels.StepInputs) []int32 { return rowIndex(in.Rows, xt.shape) }
	}
	b.launch(op, "select_rows_f32", [3]int{len(rows), 1, 1}, [3]int{min(256, (cols+31)/32*32), 1, 1}, 0,
		y.ptr, xt.ptr, b.uploadInts(op, idx, gen), cols)
	return y
}

// rowIndex returns rows as int32 indices into the rows of a tensor of shape.
func rowIndex(rows []int, shape []int) []int32 {
	check("SelectRows", kernels.CheckRows(shape, rows))
	idx := make([]int32, len(rows))
	for i, r := range rows {
		idx[i] = int32(r)
	}
	return idx
}
