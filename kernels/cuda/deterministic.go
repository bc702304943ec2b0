//go:build cuda

package cuda

import "os"

// Deterministic mode (Options.Deterministic, COHORT_CUDA_DETERMINISTIC=1)
// makes every token's numbers independent of the step it runs in: of the
// other rows of its batch, of where its prompt was cut into chunks, and of
// whether it was prefilled or decoded. A request then gets the same logits,
// bit for bit, alone or batched, with or without the prefix cache (which
// resumes a prompt after its cached part). The fast kernels choose their
// arithmetic by the step's shape; in this mode every op takes one
// per-row form whatever the batch:
//
//   - bf16 Linears: the tensor-core GEMV for any number of rows, in launches
//     of at most detGroupRows rows, with the split of K that a one-row
//     launch has (never cuBLASLt, whose algorithm depends on the shape);
//     for K not a multiple of 64 the CUDA-core GEMV in launches of 8 rows,
//     and for K not a multiple of 8 still cuBLASLt (no Qwen3.5 shape);
//     f32 Linears: gemm_nt_f32, one dot product per output;
//   - the causal conv: conv1d_f32 (not in the in-projection's epilogue);
//   - the gated delta rule: the recurrent column-split kernel after the
//     separate q/k norms and gates, for prefill rows too (not the chunked
//     form, the fused decode kernel or the wide kernel);
//   - attention: attention_f32 for every row (not the flash kernel).
//
// Decode at batch 1 runs the same kernels as the fast mode but for the
// fused decode kernels; larger batches and prefill are slower (docs/gpu.md,
// "Deterministic mode").

// detGroupRows is the most rows of one tensor-core GEMV launch in
// deterministic mode (its widest entries, four n-tiles of 8 rows).
const detGroupRows = 32

// deterministicFromEnv reports whether COHORT_CUDA_DETERMINISTIC asks for
// deterministic mode.
func deterministicFromEnv() bool { return os.Getenv("COHORT_CUDA_DETERMINISTIC") == "1" }

// rowGroups calls launch for consecutive row ranges [t0, t0+n) of T rows:
// one range of all T rows, except in deterministic mode, where ranges hold
// at most group rows (the most one launch of the kernel serves).
func (b *Backend) rowGroups(T, group int, launch func(t0, n int)) {
	if !b.det || T <= group {
		launch(0, T)
		return
	}
	for t0 := 0; t0 < T; t0 += group {
		launch(t0, min(group, T-t0))
	}
}

// rowPtr is the address of row t of a float32 matrix at p with cols columns.
func rowPtr(p devptr, t, cols int) devptr { return p + devptr(int64(t)*int64(cols)*4) }
