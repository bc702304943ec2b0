// Chunked gated delta rule (prefill). For every chunk of at most GDN_CH
// tokens of one sequence and v head, with the state S [dk, dv] at the
// chunk's start, local index i = 0..n-1 and the inclusive cumulative
// log-decay gamma_i = g_0 + ... + g_i of the chunk:
//
//   A_ij = beta_i (k_i . k_j) e^(gamma_i - gamma_j)       for j < i, else 0
//   W = (I + A)^-1 [beta_i e^gamma_i k_i],  U = (I + A)^-1 [beta_i v_i]
//   Vn = U - W S
//   O_i = e^gamma_i (q_i . S) + sum_{j <= i} (q_i . k_j) e^(gamma_i - gamma_j) Vn_j
//   S <- e^gamma_last S + sum_i e^(gamma_last - gamma_i) k_i Vn_i^T
//
// which equals the token-by-token recurrence of 50_gdn.cu (the WY
// representation; kernels/cpu/deltarule.go has the same algebra). Only
// gamma_i, gamma_i - gamma_j (j <= i) and gamma_last - gamma_i are
// exponentiated, so no exponent is positive. A partial last chunk is padded
// with zero rows (k = v = beta = 0), which is exact.
//
// Two kernels per op (kernels/cuda/gdn_chunk.go picks the entries):
//   gdn_chunk_prep_mma_f32  every (chunk, v head) in parallel: gamma, A, the
//                       inverse T = (I + A)^-1 by 16x16 blocks, W and U as
//                       T times the right-hand sides, and the masked
//                       decayed Q K^T of the chunk (P), into scratch (the
//                       products K K^T, Q K^T and T R on tensor cores,
//                       3xTF32; the inverse in float32 on CUDA cores);
//   gdn_chunk_scan_mma_f32  every (sequence, v head, 16 state columns): the
//                       sequential pass over the sequence's chunks, with
//                       the state tile in shared memory and the chunks'
//                       W, Q, P and K streamed through a double-buffered
//                       cp.async pipeline: Vn, the outputs and the state
//                       update, the products on tensor cores (3xTF32, about
//                       float32's precision, float32 state).
// gdn_chunk_prep_pipe_f32 (the default prep) computes gdn_chunk_prep_mma_f32's
// outputs bit for bit, four blocks an SM, its loads by cp.async overlapping
// the compute (COHORT_CUDA_GDN_PREP=old keeps gdn_chunk_prep_mma_f32).
// The previous entries, gdn_chunk_prep_f32 (forward substitution, one
// column a thread) and gdn_chunk_scan_f32 (CUDA cores), and
// gdn_chunk_prep_inv_f32 (the inverse prep on CUDA cores) compute the same
// up to rounding and stay for A/B runs (COHORT_CUDA_GDN_CHUNK).
// Both need dk and dv multiples of 4 (16-byte copies and float4 accesses).
// Chunk table (built by kernels/cuda/gdn_chunk.go): chunk c covers batch rows
// chunkRow[c] .. chunkRow[c] + chunkLen[c] - 1 of one sequence; sequence x of
// the chunked set owns chunks seqChunk0[x] .. seqChunk0[x] + seqChunks[x] - 1
// in order and its state lives in slot seqSlot[x].
//
// Scratch layouts: W [T][nv][dk], U [T][nv][dv], G (gamma) [T][nv], all by
// batch row; P [chunk][nv][GDN_CH][GDN_CH].

#define GDN_CH 64     // chunk length
#define GDN_DK_MAX 128 // largest key dim of the chunked kernels
#define GDN_DQ 32     // key dims staged in shared memory at a time (prep)
#define GDN_CT 16     // state columns per block of gdn_chunk_scan_f32
#define GDN_THREADS 256 // threads per block of both kernels (the tilings assume it)
#define GDN_STRIDE_T (GDN_CH + 4) // row stride of the prep's transposed [d][i] tiles (16-byte rows, few bank conflicts)
#define GDN_STRIDE_M (GDN_CH + 8) // the same for gdn_chunk_prep_mma_f32 (fragments of 4 rows x 8 hit 32 banks)
#define GDN_SK (GDN_DQ + 4)       // row stride of gdn_chunk_prep_mma_f32's [i][d] K and Q slices

// Tensor-core helpers (sm_80 and later): mma.sync m16n8k8 with tf32 inputs
// and f32 accumulation, used in the 3xTF32 form a b ~ a_hi b_hi + a_hi b_lo
// + a_lo b_hi, x_hi = tf32(x), x_lo = tf32(x - x_hi) (round to nearest),
// which keeps about float32's precision. Fragments (PTX ISA, lane =
// 4 g + t): A 16x8 a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
// B 8x8 b0 (t, g), b1 (t + 4, g); C 16x8 c0, c1 (g, 2t, 2t + 1), c2, c3
// (g + 8, 2t, 2t + 1).
__device__ __forceinline__ unsigned gdn_tf32(float x) {
	unsigned r;
	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
	return r;
}

__device__ __forceinline__ void gdn_split(float x, unsigned &hi, unsigned &lo) {
	hi = gdn_tf32(x);
	lo = gdn_tf32(x - __uint_as_float(hi));
}

__device__ __forceinline__ void gdn_mma_tf32(float d[4], const unsigned a[4], const unsigned b[2]) {
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// gdn_mma3s adds a b to d in the 3xTF32 form (A and B fragments given split
// as ah + al and bh + bl), the small terms first; gdn_mma3 splits a itself.
__device__ __forceinline__ void gdn_mma3s(float d[4], const unsigned ah[4], const unsigned al[4], const unsigned bh[2], const unsigned bl[2]) {
	gdn_mma_tf32(d, al, bh);
	gdn_mma_tf32(d, ah, bl);
	gdn_mma_tf32(d, ah, bh);
}

__device__ __forceinline__ void gdn_mma3(float d[4], const float a[4], const unsigned bh[2], const unsigned bl[2]) {
	unsigned ah[4], al[4];
#pragma unroll
	for (int q = 0; q < 4; q++) gdn_split(a[q], ah[q], al[q]);
	gdn_mma3s(d, ah, al, bh, bl);
}

// gdn_bfrag and gdn_mmaps are the fragment rounding and the product of a
// kernel templated on its precision P: 3 is 3xTF32 (gdn_split,
// gdn_mma3s), 1 one TF32 mma of the inputs rounded to TF32 (lo unused), a
// third of the tensor-core work and of the rounding instructions, at about
// 11 bits of each input's mantissa (bf16 keeps 8). gdn_mmap rounds the A
// fragment itself, as gdn_mma3 does.
template <int P>
__device__ __forceinline__ void gdn_bfrag(float x, unsigned &hi, unsigned &lo) {
	if constexpr (P == 3)
		gdn_split(x, hi, lo);
	else
		hi = gdn_tf32(x);
}

template <int P>
__device__ __forceinline__ void gdn_mmaps(float d[4], const unsigned ah[4], const unsigned al[4], const unsigned bh[2], const unsigned bl[2]) {
	if constexpr (P == 3)
		gdn_mma3s(d, ah, al, bh, bl);
	else
		gdn_mma_tf32(d, ah, bh);
}

template <int P>
__device__ __forceinline__ void gdn_mmap(float d[4], const float a[4], const unsigned bh[2], const unsigned bl[2]) {
	unsigned ah[4], al[4];
#pragma unroll
	for (int q = 0; q < 4; q++) gdn_bfrag<P>(a[q], ah[q], al[q]);
	gdn_mmaps<P>(d, ah, al, bh, bl);
}

// gdn_prep_kq (phase 1 of the CUDA-core preps): thread (ty, tx) = (tid/16,
// tid%16) sums its 4x4 tiles a = K K^T and p = Q K^T (rows 4ty.., columns
// 4tx..; zero rows past n) over the key dims, staged GDN_DQ at a time as
// the transposed slices sKT, sQT [GDN_DQ][GDN_STRIDE_T].
__device__ __forceinline__ void gdn_prep_kq(float (&a)[4][4], float (&p)[4][4], float *sKT, float *sQT,
		const float *qh, const float *kh, int row0, int n, int kHead, int dk, int qk) {
	const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
#pragma unroll
	for (int r = 0; r < 4; r++)
#pragma unroll
		for (int s = 0; s < 4; s++) a[r][s] = p[r][s] = 0.0f;
	for (int d0 = 0; d0 < dk; d0 += GDN_DQ) {
		__syncthreads(); // the previous slice is consumed
#pragma unroll
		for (int e = tid; e < GDN_CH * GDN_DQ; e += GDN_THREADS) {
			int i = e / GDN_DQ, dl = e % GDN_DQ, d = d0 + dl;
			bool ok = i < n && d < dk;
			long long off = (long long)(row0 + i) * qk + (long long)kHead * dk + d;
			sKT[dl * GDN_STRIDE_T + i] = ok ? kh[off] : 0.0f;
			sQT[dl * GDN_STRIDE_T + i] = ok ? qh[off] : 0.0f;
		}
		__syncthreads();
		int dn = min(GDN_DQ, dk - d0);
		for (int dl = 0; dl < dn; dl++) {
			float4 ki = *(const float4 *)&sKT[dl * GDN_STRIDE_T + 4 * ty];
			float4 qi = *(const float4 *)&sQT[dl * GDN_STRIDE_T + 4 * ty];
			float4 kj = *(const float4 *)&sKT[dl * GDN_STRIDE_T + 4 * tx];
			float kr[4] = {ki.x, ki.y, ki.z, ki.w}, qr[4] = {qi.x, qi.y, qi.z, qi.w};
			float kc[4] = {kj.x, kj.y, kj.z, kj.w};
#pragma unroll
			for (int r = 0; r < 4; r++)
#pragma unroll
				for (int s = 0; s < 4; s++) {
					a[r][s] += kr[r] * kc[s];
					p[r][s] += qr[r] * kc[s];
				}
		}
	}
}

// gdn_chunk_prep_f32: block (chunk c, v head h), 256 threads. Writes
// W, U and G for the chunk's rows and P for (c, h).
//
// Phase 1: A and P as 4x4 register tiles per thread (thread (ty, tx) =
// (tid/16, tid%16) owns rows 4ty.. and columns 4tx..), summed over key dims
// staged GDN_DQ at a time as transposed tiles K^T, Q^T [d][i].
// Phase 2: one thread per column of [beta e^gamma K | beta V] runs the
// forward substitution x_i = r_i - sum_{j<i} A_ij x_j with its column in
// registers (the chunk length is fixed at GDN_CH by padding, so the loops
// unroll and A is read by broadcast from shared memory).
//
// The previous default (240 registers, one block an SM), kept for A/B runs
// against gdn_chunk_prep_inv_f32 (kernels/cuda/gdn_chunk.go).
extern "C" __global__ void __launch_bounds__(GDN_THREADS) gdn_chunk_prep_f32(float *W, float *U, float *G, float *P,
		const float *qh, const float *kh, const float *mixed, const float *g, const float *beta,
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ float sG[GDN_CH], sB[GDN_CH], sEg[GDN_CH];
	__shared__ __align__(16) float sKT[GDN_DQ * GDN_STRIDE_T];
	__shared__ __align__(16) float sQT[GDN_DQ * GDN_STRIDE_T];
	__shared__ __align__(16) float sA[GDN_CH][GDN_CH + 4]; // 16-byte rows: the substitution reads 4 at a time
	const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
	const int row0 = chunkRow[c], n = chunkLen[c];
	const int kHead = h / (nv / nk), qk = nk * dk;
	if (tid == 0) {
		// Sequential float32 cumsum, in the CPU oracle's order. Padded
		// rows repeat gamma_{n-1}; they are masked everywhere.
		float acc = 0.0f;
		for (int i = 0; i < GDN_CH; i++) {
			if (i < n) acc += g[(long long)(row0 + i) * nv + h];
			sG[i] = acc;
		}
	}
	__syncthreads();
	if (tid < GDN_CH) {
		bool live = tid < n;
		sB[tid] = live ? beta[(long long)(row0 + tid) * nv + h] : 0.0f;
		sEg[tid] = live ? (float)exp((double)sG[tid]) : 0.0f;
		if (live) G[(long long)(row0 + tid) * nv + h] = sG[tid];
	}

	// Phase 1: a = K K^T, p = Q K^T over the chunk (zero rows past n).
	const int ty = tid / 16, tx = tid % 16;
	float a[4][4], p[4][4];
	gdn_prep_kq(a, p, sKT, sQT, qh, kh, row0, n, kHead, dk, qk);
	{
		float *Pc = P + ((long long)c * nv + h) * GDN_CH * GDN_CH;
#pragma unroll
		for (int r = 0; r < 4; r++) {
			int i = 4 * ty + r;
			float prow[4];
#pragma unroll
			for (int s = 0; s < 4; s++) {
				int j = 4 * tx + s;
				float dec = (j <= i && i < n) ? (float)exp((double)(sG[i] - sG[j])) : 0.0f;
				sA[i][j] = j < i ? sB[i] * a[r][s] * dec : 0.0f;
				prow[s] = j <= i ? p[r][s] * dec : 0.0f;
			}
			*(float4 *)&Pc[i * GDN_CH + 4 * tx] = make_float4(prow[0], prow[1], prow[2], prow[3]);
		}
	}
	__syncthreads();

	// Phase 2: forward substitution, one column of [W | U] per thread.
	for (int col = tid; col < dk + dv; col += GDN_THREADS) {
		const bool isW = col < dk;
		float x[GDN_CH];
#pragma unroll
		for (int i = 0; i < GDN_CH; i++) {
			float r = 0.0f;
			if (i < n) {
				long long row = row0 + i;
				if (isW) r = (sB[i] * sEg[i]) * kh[row * qk + (long long)kHead * dk + col];
				else r = sB[i] * mixed[row * convDim + 2LL * qk + (long long)h * dv + (col - dk)];
			}
			x[i] = r;
		}
#pragma unroll
		for (int i = 1; i < GDN_CH; i++) {
			float acc = x[i];
#pragma unroll
			for (int j = 0; j < i; j++) acc -= sA[i][j] * x[j];
			x[i] = acc;
		}
#pragma unroll
		for (int i = 0; i < GDN_CH; i++) {
			if (i < n) {
				long long row = row0 + i;
				if (isW) W[(row * nv + h) * dk + col] = x[i];
				else U[(row * nv + h) * dv + (col - dk)] = x[i];
			}
		}
	}
}

// gdn_prep_gamma (phase 0 of both preps): beta, gamma (the gates loaded in
// parallel into shared memory, then summed by thread 0 from registers in
// index order: the CPU oracle's f32 order; padded rows add 0, which repeats
// gamma_{n-1} exactly) and e^gamma for the chunk's rows, and gamma to G.
// Ends with sG and sB visible to the block; sEg after the next barrier.
__device__ __forceinline__ void gdn_prep_gamma(float *sG, float *sB, float *sEg, float *G, const float *g, const float *beta,
		int row0, int n, int nv, int h) {
	const int tid = threadIdx.x;
	if (tid < GDN_CH) {
		bool live = tid < n;
		sG[tid] = live ? g[(long long)(row0 + tid) * nv + h] : 0.0f;
		sB[tid] = live ? beta[(long long)(row0 + tid) * nv + h] : 0.0f;
	}
	__syncthreads();
	if (tid == 0) {
		float acc = 0.0f;
#pragma unroll
		for (int i0 = 0; i0 < GDN_CH; i0 += 16) {
			float4 v4[4];
#pragma unroll
			for (int q = 0; q < 4; q++) v4[q] = *(const float4 *)&sG[i0 + 4 * q];
#pragma unroll
			for (int q = 0; q < 4; q++) {
				float v[4] = {v4[q].x, v4[q].y, v4[q].z, v4[q].w};
#pragma unroll
				for (int s = 0; s < 4; s++) {
					acc += v[s];
					v[s] = acc;
				}
				*(float4 *)&sG[i0 + 4 * q] = make_float4(v[0], v[1], v[2], v[3]);
			}
		}
	}
	__syncthreads();
	if (tid < GDN_CH) {
		bool live = tid < n;
		sEg[tid] = live ? (float)exp((double)sG[tid]) : 0.0f;
		if (live) G[(long long)(row0 + tid) * nv + h] = sG[tid];
	}
}

// gdn_prep_invert (phase 2 of the preps) turns M = A^T ([GDN_CH][ST],
// M[j][i] = A_ij, zero for j >= i) into T^T in place, T = (I + A)^-1
// (lower unit triangular), with sR (at least 32 * 36 floats) as
// scratch, by recursive doubling on 16x16 blocks: the four diagonal blocks
// by forward substitution on the identity (64 threads, 16 rows each), then
// for L = [[T1, 0], [A21, T2]] the off-diagonal block -T2 (A21 T1): first
// both 32x32 diagonal blocks (16x16 off-diagonal blocks), then the whole
// 64x64 (a 32x32 one). The upper triangle of M is A's zeros, which are T's.
// Starts after a barrier that makes M visible; T^T is visible after the
// next one.
// Its shared accesses do not conflict: phase 2b's thread (il, jl) is
// (tid % 16, the warp's pair {jl, jl + 2}) and its X is stored [jl][il]
// with rows of 24; phase 2c's thread (il, q) is (lane, warp), so T1 and X
// are read by broadcast and A21, T2 and the result by 32 consecutive words
// (an earlier mapping read T1 eight ways conflicted in phase 2c, about
// half of the prep's shared wavefronts; the sums and their order are the
// same, so T^T is the same bit for bit).
template <int ST>
__device__ __forceinline__ void gdn_prep_invert(float *sM, float *sX) {
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
	// Phase 2a: the diagonal 16x16 blocks of T, thread (block b, column jl):
	// x_il = delta_il,jl - sum_{k < il} A_il,k x_k (x_k = 0 for k < jl, so
	// the full sums add exact zeros only).
	{
		float x[16];
		const int b = tid / 16, jl = tid % 16, base = 16 * b;
		if (tid < GDN_CH) {
#pragma unroll
			for (int il = 0; il < 16; il++) {
				float acc = il == jl ? 1.0f : 0.0f;
#pragma unroll
				for (int k = 0; k < il; k++) acc -= sM[(base + k) * ST + base + il] * x[k];
				x[il] = acc;
			}
		}
		__syncthreads();
		if (tid < GDN_CH) {
#pragma unroll
			for (int il = 0; il < 16; il += 4)
				*(float4 *)&sM[(base + jl) * ST + base + il] = make_float4(x[il], x[il + 1], x[il + 2], x[il + 3]);
		}
		__syncthreads();
	}
	// Phase 2b: X = A21 T1, then T21 = -T2 X, for the 32x32 diagonal blocks
	// p = 0, 1.
	{
		const int il = lane % 16, jl = 4 * (warp / 2) + warp % 2 + 2 * (lane / 16);
#pragma unroll
		for (int p = 0; p < 2; p++) {
			const int o = 32 * p;
			float acc = 0.0f;
#pragma unroll
			for (int k = 0; k < 16; k++)
				acc += sM[(o + k) * ST + o + 16 + il] * sM[(o + jl) * ST + o + k];
			sX[p * 384 + jl * 24 + il] = acc;
		}
		__syncthreads();
#pragma unroll
		for (int p = 0; p < 2; p++) {
			const int o = 32 * p;
			float acc = 0.0f;
#pragma unroll
			for (int k = 0; k < 16; k++)
				acc += sM[(o + 16 + k) * ST + o + 16 + il] * sX[p * 384 + jl * 24 + k];
			sM[(o + jl) * ST + o + 16 + il] = -acc;
		}
		__syncthreads();
	}
	// Phase 2c: the whole 64x64, thread row il = lane, columns 4 q ..,
	// q = warp.
	{
		const int il = lane, q = warp;
		float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
		for (int k = 0; k < 32; k++) {
			float a = sM[k * ST + 32 + il];
#pragma unroll
			for (int s = 0; s < 4; s++) acc[s] += a * sM[(4 * q + s) * ST + k];
		}
		*(float4 *)&sX[il * 36 + 4 * q] = make_float4(acc[0], acc[1], acc[2], acc[3]);
		__syncthreads();
#pragma unroll
		for (int s = 0; s < 4; s++) acc[s] = 0.0f;
#pragma unroll 8
		for (int k = 0; k < 32; k++) {
			float t = sM[(32 + k) * ST + 32 + il];
			float4 x4 = *(const float4 *)&sX[k * 36 + 4 * q];
			acc[0] += t * x4.x; acc[1] += t * x4.y; acc[2] += t * x4.z; acc[3] += t * x4.w;
		}
#pragma unroll
		for (int s = 0; s < 4; s++) sM[(4 * q + s) * ST + 32 + il] = -acc[s];
	}
}

template <int ST>
__device__ __forceinline__ void gdn_prep_rhs(float *sR, const float *sB, const float *sEg, const float *kRow, const float *vRow,
		int col0, int row0, int n, int dk, int dv, int qk, int convDim) {
	const int tid = threadIdx.x;
#pragma unroll
	for (int e = tid; e < GDN_CH * GDN_CH; e += GDN_THREADS) {
		int j = e / GDN_CH, col = col0 + e % GDN_CH;
		float r = 0.0f;
		if (j < n && col < dk + dv) {
			long long row = row0 + j;
			r = col < dk ? (sB[j] * sEg[j]) * kRow[row * qk + col] : sB[j] * vRow[row * convDim + (col - dk)];
		}
		sR[j * ST + e % GDN_CH] = r;
	}
}

// gdn_chunk_prep_inv_f32: block (chunk c, v head h), 256 threads, same
// outputs as gdn_chunk_prep_f32 (up to rounding: W and U come from the
// inverse instead of the substitution), on CUDA cores.
//
// Phase 0: gdn_prep_gamma.
// Phase 1: A and P as in gdn_chunk_prep_f32, but A is stored transposed,
// M[j][i] = A_ij (M is then turned into T^T in place).
// Phase 2: T = (I + A)^-1 (gdn_prep_invert).
// Phase 3: [W | U] = T [beta e^gamma K | beta V], 64 columns at a time
// staged in shared memory, thread (ty, tx) a 4x4 tile of rows 4ty..,
// columns 4tx.., the sum over j <= 4ty + 3 only (T_ij = 0 for j > i).
extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_prep_inv_f32(float *W, float *U, float *G, float *P,
		const float *qh, const float *kh, const float *mixed, const float *g, const float *beta,
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ __align__(16) float sG[GDN_CH];
	__shared__ float sB[GDN_CH], sEg[GDN_CH];
	// Phase 1: K^T and Q^T slices [GDN_DQ][GDN_STRIDE_T] each; phase 2: X
	// temporaries; phase 3: the staged right-hand sides [GDN_CH][GDN_STRIDE_T].
	__shared__ __align__(16) float sR[GDN_CH * GDN_STRIDE_T];
	__shared__ __align__(16) float sM[GDN_CH * GDN_STRIDE_T]; // A^T, then T^T
	const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
	const int row0 = chunkRow[c], n = chunkLen[c];
	const int kHead = h / (nv / nk), qk = nk * dk;
	gdn_prep_gamma(sG, sB, sEg, G, g, beta, row0, n, nv, h);

	// Phase 1: a = K K^T, p = Q K^T over the chunk (zero rows past n).
	float *sKT = sR, *sQT = sR + GDN_DQ * GDN_STRIDE_T;
	const int ty = tid / 16, tx = tid % 16;
	{
		float a[4][4], p[4][4];
		gdn_prep_kq(a, p, sKT, sQT, qh, kh, row0, n, kHead, dk, qk);
		float *Pc = P + ((long long)c * nv + h) * GDN_CH * GDN_CH;
		float at[4][4]; // at[s][r] = A_ij, i = 4ty + r, j = 4tx + s
#pragma unroll
		for (int r = 0; r < 4; r++) {
			int i = 4 * ty + r;
			float prow[4];
#pragma unroll
			for (int s = 0; s < 4; s++) {
				int j = 4 * tx + s;
				float dec = (j <= i && i < n) ? (float)exp((double)(sG[i] - sG[j])) : 0.0f;
				at[s][r] = j < i ? sB[i] * a[r][s] * dec : 0.0f;
				prow[s] = j <= i ? p[r][s] * dec : 0.0f;
			}
			*(float4 *)&Pc[i * GDN_CH + 4 * tx] = make_float4(prow[0], prow[1], prow[2], prow[3]);
		}
#pragma unroll
		for (int s = 0; s < 4; s++)
			*(float4 *)&sM[(4 * tx + s) * GDN_STRIDE_T + 4 * ty] = make_float4(at[s][0], at[s][1], at[s][2], at[s][3]);
	}
	__syncthreads();

	gdn_prep_invert<GDN_STRIDE_T>(sM, sR);

	// Phase 3: [W | U] = T R, 64 columns of R = [beta e^gamma K | beta V] at a time.
	const float *kRow = kh + (long long)kHead * dk, *vRow = mixed + 2LL * qk + (long long)h * dv;
	for (int col0 = 0; col0 < dk + dv; col0 += GDN_CH) {
		__syncthreads(); // T is complete; the previous slice is consumed
		gdn_prep_rhs<GDN_STRIDE_T>(sR, sB, sEg, kRow, vRow, col0, row0, n, dk, dv, qk, convDim);
		__syncthreads();
		float acc[4][4];
#pragma unroll
		for (int r = 0; r < 4; r++)
#pragma unroll
			for (int s = 0; s < 4; s++) acc[r][s] = 0.0f;
		const int jEnd = 4 * ty + 4;
#pragma unroll 4
		for (int j = 0; j < jEnd; j++) {
			float4 t4 = *(const float4 *)&sM[j * GDN_STRIDE_T + 4 * ty];
			float4 r4 = *(const float4 *)&sR[j * GDN_STRIDE_T + 4 * tx];
			float tr[4] = {t4.x, t4.y, t4.z, t4.w}, rr[4] = {r4.x, r4.y, r4.z, r4.w};
#pragma unroll
			for (int r = 0; r < 4; r++)
#pragma unroll
				for (int s = 0; s < 4; s++) acc[r][s] += tr[r] * rr[s];
		}
		const int col = col0 + 4 * tx; // dk % 4 == 0: the 4 columns are all W or all U
		if (col < dk + dv) {
#pragma unroll
			for (int r = 0; r < 4; r++) {
				int i = 4 * ty + r;
				if (i >= n) continue;
				long long row = row0 + i;
				float4 v = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
				if (col < dk) *(float4 *)&W[(row * nv + h) * dk + col] = v;
				else *(float4 *)&U[(row * nv + h) * dv + (col - dk)] = v;
			}
		}
	}
}

// gdn_chunk_prep_mma_f32: the default chunk preparation; block (chunk c,
// v head h), 256 threads (8 warps), the outputs of gdn_chunk_prep_inv_f32
// with phases 1 and 3 on tensor cores (3xTF32, see gdn_mma3s; lane =
// 4 g + t, warp w, m-tile mt = w / 2, n-tiles nb = 4 (w % 2) .. nb + 3):
// Phase 0: gdn_prep_gamma.
// Phase 1: A = K K^T and P = Q K^T, warp w the C tiles of rows 16 mt ..
// and columns 8 nb .. 8 nb + 31 of both (tiles wholly above the diagonal
// stay zero), over key dims staged GDN_DQ at a time as [i][d] slices;
// then the decay and mask, P to global memory and M[j][i] = A_ij.
// Phase 2: T = (I + A)^-1 (gdn_prep_invert).
// Phase 3: [W | U] = T R, R = [beta e^gamma K | beta V] staged 64 columns
// at a time, warp w the C tiles of rows 16 mt .. and slice columns
// 8 nb .. 8 nb + 31, the sum over rows j < 16 mt + 16 only (T_ij = 0 for
// j > i).
// Three blocks an SM (80 registers, 37 KiB of shared memory each).
extern "C" __global__ void __launch_bounds__(GDN_THREADS, 3) gdn_chunk_prep_mma_f32(float *W, float *U, float *G, float *P,
		const float *qh, const float *kh, const float *mixed, const float *g, const float *beta,
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ __align__(16) float sG[GDN_CH];
	__shared__ float sB[GDN_CH], sEg[GDN_CH];
	// Phase 1: K and Q slices [GDN_CH][GDN_SK] each; phase 2: X
	// temporaries; phase 3: the staged right-hand sides [GDN_CH][GDN_STRIDE_M].
	__shared__ __align__(16) float sR[GDN_CH * GDN_STRIDE_M];
	__shared__ __align__(16) float sM[GDN_CH * GDN_STRIDE_M]; // A^T, then T^T
	const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
	const int row0 = chunkRow[c], n = chunkLen[c];
	const int kHead = h / (nv / nk), qk = nk * dk;
	const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
	const int mt = warp / 2, nb = 4 * (warp % 2);
	const int r0 = 16 * mt + gq, r1 = r0 + 8; // this lane's C rows
	gdn_prep_gamma(sG, sB, sEg, G, g, beta, row0, n, nv, h);

	// Phase 1.
	{
		float *sK = sR, *sQ = sR + GDN_CH * GDN_SK;
		float ca[4][4], cp[4][4];
#pragma unroll
		for (int q = 0; q < 4; q++)
#pragma unroll
			for (int z = 0; z < 4; z++) ca[q][z] = cp[q][z] = 0.0f;
		for (int d0 = 0; d0 < dk; d0 += GDN_DQ) {
			__syncthreads(); // the previous slice is consumed
#pragma unroll
			for (int e = tid; e < GDN_CH * GDN_DQ; e += GDN_THREADS) {
				int i = e / GDN_DQ, dl = e % GDN_DQ, d = d0 + dl;
				bool ok = i < n && d < dk;
				long long off = (long long)(row0 + i) * qk + (long long)kHead * dk + d;
				sK[i * GDN_SK + dl] = ok ? kh[off] : 0.0f;
				sQ[i * GDN_SK + dl] = ok ? qh[off] : 0.0f;
			}
			__syncthreads();
#pragma unroll
			for (int ks = 0; ks < GDN_DQ / 8; ks++) {
				const int k0 = 8 * ks + tq;
				const float ak[4] = {sK[r0 * GDN_SK + k0], sK[r1 * GDN_SK + k0], sK[r0 * GDN_SK + k0 + 4], sK[r1 * GDN_SK + k0 + 4]};
				const float aq[4] = {sQ[r0 * GDN_SK + k0], sQ[r1 * GDN_SK + k0], sQ[r0 * GDN_SK + k0 + 4], sQ[r1 * GDN_SK + k0 + 4]};
				unsigned akh[4], akl[4], aqh[4], aql[4];
#pragma unroll
				for (int z = 0; z < 4; z++) {
					gdn_split(ak[z], akh[z], akl[z]);
					gdn_split(aq[z], aqh[z], aql[z]);
				}
#pragma unroll
				for (int q = 0; q < 4; q++) {
					const int nt = nb + q;
					if (nt > 2 * mt + 1) continue; // wholly above the diagonal (warp-uniform)
					const int jr = 8 * nt + gq;
					unsigned bh[2], bl[2];
					gdn_split(sK[jr * GDN_SK + k0], bh[0], bl[0]);
					gdn_split(sK[jr * GDN_SK + k0 + 4], bh[1], bl[1]);
					gdn_mma3s(ca[q], akh, akl, bh, bl);
					gdn_mma3s(cp[q], aqh, aql, bh, bl);
				}
			}
		}
		float *Pc = P + ((long long)c * nv + h) * GDN_CH * GDN_CH;
#pragma unroll
		for (int q = 0; q < 4; q++) {
			const int j0 = 8 * (nb + q) + 2 * tq;
#pragma unroll
			for (int hr = 0; hr < 2; hr++) {
				const int i = hr ? r1 : r0;
				float pv[2], av[2];
#pragma unroll
				for (int z = 0; z < 2; z++) {
					const int j = j0 + z;
					float dec = (j <= i && i < n) ? (float)exp((double)(sG[i] - sG[j])) : 0.0f;
					av[z] = j < i ? sB[i] * ca[q][2 * hr + z] * dec : 0.0f;
					pv[z] = j <= i ? cp[q][2 * hr + z] * dec : 0.0f;
				}
				*(float2 *)&Pc[i * GDN_CH + j0] = make_float2(pv[0], pv[1]);
				sM[j0 * GDN_STRIDE_M + i] = av[0];
				sM[(j0 + 1) * GDN_STRIDE_M + i] = av[1];
			}
		}
	}
	__syncthreads();

	gdn_prep_invert<GDN_STRIDE_M>(sM, sR);

	// Phase 3.
	const float *kRow = kh + (long long)kHead * dk, *vRow = mixed + 2LL * qk + (long long)h * dv;
	const int kEnd = 2 * mt + 2; // k-steps of 8 rows j < 16 mt + 16
	for (int col0 = 0; col0 < dk + dv; col0 += GDN_CH) {
		__syncthreads(); // T is complete; the previous slice is consumed
		gdn_prep_rhs<GDN_STRIDE_M>(sR, sB, sEg, kRow, vRow, col0, row0, n, dk, dv, qk, convDim);
		__syncthreads();
		float co[4][4];
#pragma unroll
		for (int q = 0; q < 4; q++)
#pragma unroll
			for (int z = 0; z < 4; z++) co[q][z] = 0.0f;
#pragma unroll 2
		for (int ks = 0; ks < kEnd; ks++) {
			const int j = 8 * ks + tq;
			const float at[4] = {sM[j * GDN_STRIDE_M + r0], sM[j * GDN_STRIDE_M + r1], sM[(j + 4) * GDN_STRIDE_M + r0], sM[(j + 4) * GDN_STRIDE_M + r1]};
			unsigned ah[4], al[4];
#pragma unroll
			for (int z = 0; z < 4; z++) gdn_split(at[z], ah[z], al[z]);
#pragma unroll
			for (int q = 0; q < 4; q++) {
				const int cc = 8 * (nb + q) + gq;
				unsigned bh[2], bl[2];
				gdn_split(sR[j * GDN_STRIDE_M + cc], bh[0], bl[0]);
				gdn_split(sR[(j + 4) * GDN_STRIDE_M + cc], bh[1], bl[1]);
				gdn_mma3s(co[q], ah, al, bh, bl);
			}
		}
#pragma unroll
		for (int q = 0; q < 4; q++) {
			const int col = col0 + 8 * (nb + q) + 2 * tq; // even, dk % 4 == 0: both columns W or both U
			if (col >= dk + dv) continue;
#pragma unroll
			for (int hr = 0; hr < 2; hr++) {
				const int i = hr ? r1 : r0;
				if (i >= n) continue;
				long long row = row0 + i;
				float2 v = make_float2(co[q][2 * hr], co[q][2 * hr + 1]);
				if (col < dk) *(float2 *)&W[(row * nv + h) * dk + col] = v;
				else *(float2 *)&U[(row * nv + h) * dv + (col - dk)] = v;
			}
		}
	}
}

// gdn_cp4 copies 4 bytes from global src to shared dst as cp_async16 does
// 16 (00_common.cu), or zero-fills dst when !ok.
__device__ __forceinline__ void gdn_cp4(float *dst, const float *src, bool ok) {
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0) : "memory");
}

// gdn_chunk_prep_pipe_f32: gdn_chunk_prep_mma_f32's outputs bit for bit
// (the same products, sums and roundings in the same order), restructured
// for four blocks an SM (at most 64 registers; GDN_PREP_PIPE_SMEM floats of
// dynamic shared memory, about 55 KiB, which kernels/cuda/gdn_chunk.go opts
// the entry in to) and overlapped memory traffic:
//   - every global input of phases 1 and 3 (the K and Q slices of phase 1,
//     the right-hand-side slices of phase 3) arrives by 16-byte cp.async
//     through two buffers, the copies of stage u + 2 issued as soon as
//     stage u is consumed (the first two before phase 0, the first R slice
//     during phase 1, so that phase 2 runs while it lands); the R slices
//     land raw and are scaled by beta e^gamma (K columns) or beta (V
//     columns) where the tensor-core fragments are read, the same float
//     products as gdn_prep_rhs's;
//   - phase 2 is gdn_prep_invert, whose threads are mapped so that no shared
//     access conflicts (its earlier mapping's phase 2c read T1 eight ways
//     conflicted, about half of the old kernel's shared wavefronts).
// Stages: u < n1 = ceil(dk / GDN_DQ) the K and Q slices of phase 1 ([i][d]
// rows of GDN_SK, K then Q), then n3 = ceil((dk + dv) / GDN_CH) R slices
// ([j][c] rows of GDN_STRIDE_M); stage u in buffer u % 2; the buffer of
// stage n1 - 1 is phase 2's scratch, so stage n1 + 1 is issued after it.
#define GDN_PP_BUF (GDN_CH * GDN_STRIDE_M) // floats of a stage buffer (>= 2 GDN_CH GDN_SK)
#define GDN_PREP_PIPE_SMEM (3 * GDN_PP_BUF + 4 * GDN_CH)


// gdn_pp_ctaid reads blockIdx through volatile asm, which the compiler
// does not merge: gdn_chunk_prep_pipe_f32 recomputes what it derives from
// the block index (and reloads the chunk's row and length, which every
// barrier forces) where it needs them, instead of holding them in
// registers across phase 1 (the 64-register budget of four blocks an SM).
__device__ __forceinline__ int gdn_pp_ctaid_x() {
	int r;
	asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(r));
	return r;
}

__device__ __forceinline__ int gdn_pp_ctaid_y() {
	int r;
	asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(r));
	return r;
}

// gdn_pp_issue starts this thread's copies of stage u into buf (zero past
// the chunk's n rows, past dk key dims, past dk + dv columns).
__device__ __forceinline__ void gdn_pp_issue(float *buf, int u, const float *qh, const float *kh, const float *mixed,
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim) {
	const int tid = threadIdx.x, c = gdn_pp_ctaid_x(), h = gdn_pp_ctaid_y();
	const int row0 = chunkRow[c], n = chunkLen[c], kHead = h / (nv / nk), qk = nk * dk, n1 = (dk + GDN_DQ - 1) / GDN_DQ;
	if (u < n1) {
		const int d0 = GDN_DQ * u;
#pragma unroll
		for (int m = 0; m < GDN_CH * GDN_DQ / 4 / GDN_THREADS; m++) {
			const int e = tid + m * GDN_THREADS, i = e / (GDN_DQ / 4), d = d0 + 4 * (e % (GDN_DQ / 4));
			const bool ok = i < n && d < dk;
			const long long off = (long long)(row0 + (ok ? i : 0)) * qk + (long long)kHead * dk + (ok ? d : 0);
			float *dst = buf + i * GDN_SK + (d - d0);
			cp_async16(dst, kh + off, ok);
			cp_async16(dst + GDN_CH * GDN_SK, qh + off, ok);
		}
	} else {
		const int col0 = GDN_CH * (u - n1);
		const float *kRow = kh + (long long)kHead * dk, *vRow = mixed + 2LL * qk + (long long)h * dv;
#pragma unroll
		for (int m = 0; m < GDN_CH * GDN_CH / 4 / GDN_THREADS; m++) {
			const int e = tid + m * GDN_THREADS, j = e / (GDN_CH / 4), cl = 4 * (e % (GDN_CH / 4)), col = col0 + cl;
			const bool ok = j < n && col < dk + dv;
			const long long row = row0 + (ok ? j : 0);
			const float *src = !ok ? kRow + row * qk : col < dk ? kRow + row * qk + col : vRow + row * convDim + (col - dk);
			cp_async16(buf + j * GDN_STRIDE_M + cl, src, ok);
		}
	}
}

#define GDN_PP_ISSUE(buf, u) gdn_pp_issue(buf, u, qh, kh, mixed, chunkRow, chunkLen, nk, nv, dk, dv, convDim)

// The warps' tiles (lane = 4 gq + tq, C tiles of 16 rows x 8 columns):
// phase 1 computes the lower triangle and diagonal of A and P, m-tile mt
// having the 2 mt + 2 n-tiles nt <= 2 mt + 1 (20 in all): warps 0-3 the
// tiles of A (K K^T), warps 4-7 those of P (Q K^T), five tiles each, warp
// w % 4 = v the cA n-tiles ntA0 .. of m-tile mtA and then the rest of its
// five from ntB0 .. of m-tile mtB (GDN_PP_P1, 16 bits a v: mtA | ntA0 << 2
// | cA << 5 | mtB << 8 | ntB0 << 10), 20 accumulators where
// gdn_chunk_prep_mma_f32 gives every warp 32 (A and P, 4 n-tiles, two warps
// none); phase 3 (T R, m-tile mt summing 2 mt + 2 k-steps) gives warp w
// the m-tiles pa = w % 2 and 3 - pa and the n-tiles 2 (w / 2), 2 (w / 2) +
// 1: 20 k-steps of two n-tiles per warp where gdn_chunk_prep_mma_f32's
// warps of m-tile 3 run 8 of four (32). Every C tile is still the same
// sequence of gdn_mma3s calls on the same fragments, so the same bits.
//   v:     0          1                2                3
//   mtA:   3 nt 0-4   3 nt 5-7         2 nt 2-5         1 nt 1-3
//   mtB:   -          2 nt 0-1         1 nt 0           0 nt 0-1
#define GDN_PP_E(mtA, ntA0, cA, mtB, ntB0) ((unsigned long long)((mtA) | (ntA0) << 2 | (cA) << 5 | (mtB) << 8 | (ntB0) << 10))
#define GDN_PP_P1 (GDN_PP_E(3, 0, 5, 3, 0) | GDN_PP_E(3, 5, 3, 2, 0) << 16 | GDN_PP_E(2, 2, 4, 1, 0) << 32 | GDN_PP_E(1, 1, 3, 0, 0) << 48)

#define GDN_PP_ARGS float *W, float *U, float *G, float *P, const float *qh, const float *kh, const float *mixed, \
		const float *g, const float *beta, const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim

// gdn_chunk_prep_pipe: the entries' body, its products (phases 1 and 3) in
// precision PR (gdn_mmap's P: 3xTF32 or TF32; the inverse stays float32).
template <int PR>
__device__ __forceinline__ void gdn_chunk_prep_pipe(GDN_PP_ARGS) {
	extern __shared__ __align__(16) float gdn_pp[];
	float *const sM = gdn_pp + 2 * GDN_PP_BUF; // the decays, then A^T, then T^T
	float *const sG = sM + GDN_PP_BUF, *const sB = sG + GDN_CH, *const sEg = sB + GDN_CH, *const sScK = sEg + GDN_CH;
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
	const int n1 = (dk + GDN_DQ - 1) / GDN_DQ, total = n1 + (dk + dv + GDN_CH - 1) / GDN_CH;
	GDN_PP_ISSUE(gdn_pp, 0);
	cp_async_commit();
	GDN_PP_ISSUE(gdn_pp + GDN_PP_BUF, 1); // total >= 2
	cp_async_commit();
	const int c = blockIdx.x, h = blockIdx.y;
	const int row0 = chunkRow[c], n = chunkLen[c];
	float *Pc = P + ((long long)c * nv + h) * GDN_CH * GDN_CH;
	// P's tiles that phase 1 does not compute, wholly above the diagonal
	// (row i, columns j >= 16 (i / 16) + 16), are zero.
	for (int e = tid; e < GDN_CH * GDN_CH / 4; e += GDN_THREADS) {
		const int i = e / (GDN_CH / 4), j = 4 * (e % (GDN_CH / 4));
		if (j >= 16 * (i / 16) + 16) *(float4 *)&Pc[i * GDN_CH + j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	}
	gdn_prep_gamma(sG, sB, sEg, G, g, beta, row0, n, nv, h);
	if (tid < GDN_CH) sScK[tid] = sB[tid] * sEg[tid]; // gdn_prep_rhs's beta e^gamma (0 past n)
	// The decays e^(gamma_i - gamma_j), j <= i (0 for i >= n), the float64
	// exps of gdn_chunk_prep_mma_f32's epilogue, each computed once, into
	// sM[i][j] while the first slices land: the 2,080 (i, j) as rows p and
	// 63 - p of 65 entries together.
	for (int e = tid; e < (GDN_CH / 2) * (GDN_CH + 1); e += GDN_THREADS) {
		const int pr = e / (GDN_CH + 1), r = e % (GDN_CH + 1);
		const int i = r <= pr ? pr : GDN_CH - 1 - pr, j = r <= pr ? r : r - pr - 1;
		sM[i * GDN_STRIDE_M + j] = i < n ? (float)exp((double)(sG[i] - sG[j])) : 0.0f;
	}

	// Phase 1: slice s from buffer s % 2.
	{
		const bool isP = warp >= 4;
		const unsigned ent = (unsigned)(GDN_PP_P1 >> (16 * (warp % 4))) & 0xffff;
		const int mtA = ent & 3, ntA0 = (ent >> 2) & 7, cA = (ent >> 5) & 7, mtB = (ent >> 8) & 3, ntB0 = (ent >> 10) & 7;
		float acc[5][4];
#pragma unroll
		for (int t = 0; t < 5; t++)
#pragma unroll
			for (int z = 0; z < 4; z++) acc[t][z] = 0.0f;
		for (int s = 0; s < n1; s++) {
			cp_async_wait<1>(); // stage s has landed (s + 1 may be in flight)
			__syncthreads();
			const float *sK = gdn_pp + (s & 1) * GDN_PP_BUF, *sX = isP ? sK + GDN_CH * GDN_SK : sK;
#pragma unroll
			for (int ks = 0; ks < GDN_DQ / 8; ks++) {
				const int k0 = 8 * ks + tq;
#pragma unroll
				for (int part = 0; part < 2; part++) {
					if (part == 1 && cA == 5) continue; // warp-uniform
					const int r0 = 16 * (part ? mtB : mtA) + gq, r1 = r0 + 8;
					unsigned ah[4], al[4];
					gdn_bfrag<PR>(sX[r0 * GDN_SK + k0], ah[0], al[0]);
					gdn_bfrag<PR>(sX[r1 * GDN_SK + k0], ah[1], al[1]);
					gdn_bfrag<PR>(sX[r0 * GDN_SK + k0 + 4], ah[2], al[2]);
					gdn_bfrag<PR>(sX[r1 * GDN_SK + k0 + 4], ah[3], al[3]);
#pragma unroll
					for (int t = 0; t < 5; t++) {
						if ((t < cA) == (part == 1)) continue; // warp-uniform
						const int jr = 8 * (part ? ntB0 + t - cA : ntA0 + t) + gq;
						unsigned bh[2], bl[2];
						gdn_bfrag<PR>(sK[jr * GDN_SK + k0], bh[0], bl[0]);
						gdn_bfrag<PR>(sK[jr * GDN_SK + k0 + 4], bh[1], bl[1]);
						gdn_mmaps<PR>(acc[t], ah, al, bh, bl);
					}
				}
			}
			__syncthreads(); // buffer s % 2 is consumed
			if (s + 1 < n1) {
				// Stage s + 2 (the buffer of stage n1 - 1 is phase 2's
				// scratch: its next stage waits for phase 2).
				if (s + 2 < total) GDN_PP_ISSUE(gdn_pp + (s & 1) * GDN_PP_BUF, s + 2);
				cp_async_commit();
			}
		}
		// The decay and mask as gdn_chunk_prep_mma_f32's: P (warps 4-7) to
		// global memory; A (warps 0-3) kept, and written as M[j][i] = A_ij
		// once every warp has read its decays from sM.
		float *Pc = P + ((long long)gdn_pp_ctaid_x() * nv + gdn_pp_ctaid_y()) * GDN_CH * GDN_CH;
#pragma unroll
		for (int t = 0; t < 5; t++) {
			const int mt = t < cA ? mtA : mtB, j0 = 8 * (t < cA ? ntA0 + t : ntB0 + t - cA) + 2 * tq;
#pragma unroll
			for (int hr = 0; hr < 2; hr++) {
				const int i = 16 * mt + gq + 8 * hr;
#pragma unroll
				for (int z = 0; z < 2; z++) {
					const int j = j0 + z;
					const float dec = j <= i ? sM[i * GDN_STRIDE_M + j] : 0.0f;
					float &v = acc[t][2 * hr + z];
					if (isP) v = j <= i ? v * dec : 0.0f;
					else v = j < i ? sB[i] * v * dec : 0.0f;
				}
				if (isP) *(float2 *)&Pc[i * GDN_CH + j0] = make_float2(acc[t][2 * hr], acc[t][2 * hr + 1]);
			}
		}
		__syncthreads(); // the decays are read
		if (!isP) {
#pragma unroll
			for (int t = 0; t < 5; t++) {
				const int mt = t < cA ? mtA : mtB, j0 = 8 * (t < cA ? ntA0 + t : ntB0 + t - cA) + 2 * tq;
#pragma unroll
				for (int hr = 0; hr < 2; hr++) {
					const int i = 16 * mt + gq + 8 * hr;
					sM[j0 * GDN_STRIDE_M + i] = acc[t][2 * hr];
					sM[(j0 + 1) * GDN_STRIDE_M + i] = acc[t][2 * hr + 1];
				}
			}
		}
		// M's entries that phase 1 does not compute (row j, columns
		// i < 16 (j / 16): A_ij with i wholly before j's 16-block) are zero.
		for (int e = tid; e < GDN_CH * GDN_CH / 4; e += GDN_THREADS) {
			const int j = e / (GDN_CH / 4), i = 4 * (e % (GDN_CH / 4));
			if (i < 16 * (j / 16)) *(float4 *)&sM[j * GDN_STRIDE_M + i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
	}
	__syncthreads();

	gdn_prep_invert<GDN_STRIDE_M>(sM, gdn_pp + ((n1 - 1) & 1) * GDN_PP_BUF);
	__syncthreads(); // T^T is complete; the scratch buffer is free
	if (n1 + 1 < total) GDN_PP_ISSUE(gdn_pp + ((n1 + 1) & 1) * GDN_PP_BUF, n1 + 1);
	cp_async_commit();

	// Phase 3: [W | U] = T R, R slice u - n1 from buffer u % 2; this warp's
	// m-tiles mA = pa (2 pa + 2 k-steps) and mB = 3 - pa (8 - 2 pa), n-tiles
	// nc .. nc + 1.
	const int pa = warp % 2, nc = 2 * (warp / 2);
	const int rA = 16 * pa + gq, rB = 16 * (3 - pa) + gq; // rows rA, rA + 8, rB, rB + 8
	const int kA = 2 * pa + 2, kB = 8 - 2 * pa;
	for (int u = n1; u < total; u++) {
		const int col0 = GDN_CH * (u - n1);
		cp_async_wait<1>();
		__syncthreads();
		const float *sR = gdn_pp + (u & 1) * GDN_PP_BUF;
		// This lane's B columns and their scales (beta e^gamma for K
		// columns, beta for V columns): sB + so[q] is sScK or sB.
		int so[2];
#pragma unroll
		for (int q = 0; q < 2; q++) so[q] = col0 + 8 * (nc + q) + gq < dk ? 2 * GDN_CH : 0;
		float cA[2][4], cB[2][4];
#pragma unroll
		for (int q = 0; q < 2; q++)
#pragma unroll
			for (int z = 0; z < 4; z++) cA[q][z] = cB[q][z] = 0.0f;
#pragma unroll 1 // (unrolled, 64 registers do not hold it without spills)
		for (int ks = 0; ks < kB; ks++) {
			const int j = 8 * ks + tq;
			unsigned bh[2][2], bl[2][2];
#pragma unroll
			for (int q = 0; q < 2; q++) {
				const int cc = 8 * (nc + q) + gq;
				gdn_bfrag<PR>(sB[so[q] + j] * sR[j * GDN_STRIDE_M + cc], bh[q][0], bl[q][0]);
				gdn_bfrag<PR>(sB[so[q] + j + 4] * sR[(j + 4) * GDN_STRIDE_M + cc], bh[q][1], bl[q][1]);
			}
			{
				const float at[4] = {sM[j * GDN_STRIDE_M + rB], sM[j * GDN_STRIDE_M + rB + 8], sM[(j + 4) * GDN_STRIDE_M + rB], sM[(j + 4) * GDN_STRIDE_M + rB + 8]};
				unsigned ah[4], al[4];
#pragma unroll
				for (int z = 0; z < 4; z++) gdn_bfrag<PR>(at[z], ah[z], al[z]);
#pragma unroll
				for (int q = 0; q < 2; q++) gdn_mmaps<PR>(cB[q], ah, al, bh[q], bl[q]);
			}
			if (ks < kA) { // warp-uniform
				const float at[4] = {sM[j * GDN_STRIDE_M + rA], sM[j * GDN_STRIDE_M + rA + 8], sM[(j + 4) * GDN_STRIDE_M + rA], sM[(j + 4) * GDN_STRIDE_M + rA + 8]};
				unsigned ah[4], al[4];
#pragma unroll
				for (int z = 0; z < 4; z++) gdn_bfrag<PR>(at[z], ah[z], al[z]);
#pragma unroll
				for (int q = 0; q < 2; q++) gdn_mmaps<PR>(cA[q], ah, al, bh[q], bl[q]);
			}
		}
		__syncthreads(); // buffer u % 2 is consumed
		if (u + 2 < total) GDN_PP_ISSUE(gdn_pp + (u & 1) * GDN_PP_BUF, u + 2);
		cp_async_commit();
		const int c = gdn_pp_ctaid_x(), h = gdn_pp_ctaid_y(), row0 = chunkRow[c], n = chunkLen[c];
#pragma unroll
		for (int q = 0; q < 2; q++) {
			const int col = col0 + 8 * (nc + q) + 2 * tq; // even, dk % 4 == 0: both columns W or both U
			if (col >= dk + dv) continue;
#pragma unroll
			for (int m = 0; m < 4; m++) {
				const int i = (m < 2 ? rA : rB) + 8 * (m & 1);
				if (i >= n) continue;
				const float *cv = m < 2 ? cA[q] : cB[q];
				long long row = row0 + i;
				float2 v = make_float2(cv[2 * (m & 1)], cv[2 * (m & 1) + 1]);
				if (col < dk) *(float2 *)&W[(row * nv + h) * dk + col] = v;
				else *(float2 *)&U[(row * nv + h) * dv + (col - dk)] = v;
			}
		}
	}
	cp_async_wait<0>();
}

// gdn_chunk_prep_pipe_<prec>f32: the prep in 3xTF32 (no infix; the exact
// mode's) or with its products in one TF32 mma each (tf32_, the default
// with bf16 weights, Backend.gdnChunk).
#define GDN_PP_ENTRY(PREC, PR) \
	extern "C" __global__ void __launch_bounds__(GDN_THREADS, 4) gdn_chunk_prep_pipe_##PREC##f32(GDN_PP_ARGS) { \
		PDL_LAUNCH(); \
		PDL_WAIT(); \
		gdn_chunk_prep_pipe<PR>(W, U, G, P, qh, kh, mixed, g, beta, chunkRow, chunkLen, nk, nv, dk, dv, convDim); \
	}

GDN_PP_ENTRY(, 3)
GDN_PP_ENTRY(tf32_, 1)

// The scan streams every chunk through shared memory as nq + 3 tiles of
// GDN_TILE floats (nq = ceil(dk / GDN_SQ)), double-buffered so that the
// copies of tile t + 1 run while tile t is consumed:
//   tk < nq    W and Q, key dims GDN_SQ tk.. of all GDN_CH rows, [64][32]
//              each (Q at + GDN_CH * GDN_SQ), float4 slot c4 of row i
//              stored at c4 ^ (i & 7) (8 rows read together hit 8 banks);
//   tk == nq   P of the chunk, [64][64], slots swizzled the same way;
//   tk > nq    K rows 32 (tk - nq - 1).. of the chunk, [32][GDN_DK_MAX].
// Rows past the chunk's n and key dims past dk are zero-filled.
#define GDN_SQ 32
#define GDN_TILE (GDN_CH * 2 * GDN_SQ)
#define GDN_KR (GDN_TILE / GDN_DK_MAX) // K rows per tile

// With SWK (gdn_chunk_scan_mma_f32) float4 slot c4 of K row r is stored at
// c4 ^ (2 (r & 3)), so that the tensor-core fragments of K^T (4 rows, 8 key
// dims a load) hit 32 banks.
// gdn_scan_issue starts this thread's copies of tile tk of chunk cidx
// (batch rows row0 .. row0 + n - 1) into buf, and with tile 0 the chunk's
// gamma into sGam. Thread tid copies float4 e = tid + GDN_THREADS m of the
// tile (gdn_scan_scale_k relies on that).
template <bool SWK = false>
__device__ __forceinline__ void gdn_scan_issue(float *buf, float *sGam, int tk, int nq, int cidx, int row0, int n,
		const float *W, const float *G, const float *P, const float *qh, const float *kh,
		int h, int kHead, int nv, int dk, int qk) {
	const int tid = threadIdx.x;
	if (tk < nq) {
#pragma unroll
		for (int m = 0; m < GDN_CH * GDN_SQ / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, i = e / (GDN_SQ / 4), c4 = e % (GDN_SQ / 4), d = tk * GDN_SQ + 4 * c4;
			bool ok = i < n && d < dk;
			long long row = row0 + (ok ? i : 0);
			int dd = ok ? d : 0;
			float *dst = buf + i * GDN_SQ + 4 * (c4 ^ (i & 7));
			cp_async16(dst, W + (row * nv + h) * dk + dd, ok);
			cp_async16(dst + GDN_CH * GDN_SQ, qh + row * qk + (long long)kHead * dk + dd, ok);
		}
	} else if (tk == nq) {
		const float *Pc = P + ((long long)cidx * nv + h) * GDN_CH * GDN_CH;
#pragma unroll
		for (int m = 0; m < GDN_TILE / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, i = e / (GDN_CH / 4), c4 = e % (GDN_CH / 4);
			cp_async16(buf + i * GDN_CH + 4 * (c4 ^ (i & 7)), Pc + 4 * e, true);
		}
	} else {
		const int i0 = (tk - nq - 1) * GDN_KR;
#pragma unroll
		for (int m = 0; m < GDN_TILE / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, r = e / (GDN_DK_MAX / 4), d = 4 * (e % (GDN_DK_MAX / 4));
			bool ok = i0 + r < n && d < dk;
			long long row = row0 + (ok ? i0 + r : 0);
			float *dst = SWK ? buf + r * GDN_DK_MAX + 4 * ((d / 4) ^ (2 * (r & 3))) : buf + 4 * e;
			cp_async16(dst, kh + row * qk + (long long)kHead * dk + (ok ? d : 0), ok);
		}
	}
	if (tk == 0 && tid < GDN_CH) {
		bool ok = tid < n;
		gdn_cp4(&sGam[tid], G + (long long)(row0 + (ok ? tid : 0)) * nv + h, ok);
	}
}

// gdn_scan_scale_k multiplies this thread's float4s of the K tile rows
// i0.. by e^(gamma_last - gamma_i) (sEl), once its copies have landed.
__device__ __forceinline__ void gdn_scan_scale_k(float *buf, const float *sEl, int i0) {
#pragma unroll
	for (int m = 0; m < GDN_TILE / 4 / GDN_THREADS; m++) {
		int e = threadIdx.x + m * GDN_THREADS;
		float el = sEl[i0 + e / (GDN_DK_MAX / 4)];
		float4 *p = (float4 *)buf + e;
		float4 k = *p;
		*p = make_float4(el * k.x, el * k.y, el * k.z, el * k.w);
	}
}

// gdn_scan_wq adds the tile's W S and Q S over its GDN_SQ key dims (state
// rows sSd ..) to accW and accQ for row mi, columns mc .. mc + 3.
__device__ __forceinline__ void gdn_scan_wq(float accW[4], float accQ[4], const float *buf, const float *sSd, int mi, int mc) {
	const float *bw = buf + mi * GDN_SQ, *bq = buf + GDN_CH * GDN_SQ + mi * GDN_SQ;
#pragma unroll
	for (int c4 = 0; c4 < GDN_SQ / 4; c4++) {
		const int slot = 4 * (c4 ^ (mi & 7));
		float4 w4 = *(const float4 *)&bw[slot], q4 = *(const float4 *)&bq[slot];
		float wr[4] = {w4.x, w4.y, w4.z, w4.w}, qr[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
		for (int a = 0; a < 4; a++) {
			float4 s4 = *(const float4 *)&sSd[(4 * c4 + a) * GDN_CT + mc];
			accW[0] += wr[a] * s4.x; accW[1] += wr[a] * s4.y; accW[2] += wr[a] * s4.z; accW[3] += wr[a] * s4.w;
			accQ[0] += qr[a] * s4.x; accQ[1] += qr[a] * s4.y; accQ[2] += qr[a] * s4.z; accQ[3] += qr[a] * s4.w;
		}
	}
}

// gdn_scan_out sets o = eg QS + sum_j P_ij Vn_j for row mi, columns
// mc .. mc + 3, from the P tile in buf, j in order.
__device__ __forceinline__ void gdn_scan_out(float o[4], const float accQ[4], float eg, const float *buf, const float *sV, int mi, int mc) {
#pragma unroll
	for (int s = 0; s < 4; s++) o[s] = eg * accQ[s];
	const float *bp = buf + mi * GDN_CH;
#pragma unroll
	for (int j4 = 0; j4 < GDN_CH / 4; j4++) {
		float4 p4 = *(const float4 *)&bp[4 * (j4 ^ (mi & 7))];
		float pr[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
		for (int a = 0; a < 4; a++) {
			float4 v4 = *(const float4 *)&sV[(4 * j4 + a) * GDN_CT + mc];
			o[0] += pr[a] * v4.x; o[1] += pr[a] * v4.y; o[2] += pr[a] * v4.z; o[3] += pr[a] * v4.w;
		}
	}
}

// gdn_scan_kv adds sum_r k_r[kd .. kd + 3] Vn_r[kc, kc + 1] over the K
// tile's GDN_KR rows (already decayed; Vn rows sVh ..) to accS.
__device__ __forceinline__ void gdn_scan_kv(float accS[4][2], const float *buf, const float *sVh, int kd, int kc) {
#pragma unroll 8
	for (int r = 0; r < GDN_KR; r++) {
		float4 k4 = *(const float4 *)&buf[r * GDN_DK_MAX + kd];
		float2 v2 = *(const float2 *)&sVh[r * GDN_CT + kc];
		float kr[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
		for (int a = 0; a < 4; a++) {
			accS[a][0] += kr[a] * v2.x;
			accS[a][1] += kr[a] * v2.y;
		}
	}
}

// gdn_chunk_scan_f32: block (chunked sequence x, v head h, column tile z),
// 256 threads, owns state columns z*GDN_CT .. z*GDN_CT + GDN_CT - 1 of the
// head (the columns of S evolve independently given W, U, Q, K and gamma)
// and walks the sequence's chunks in order with that [dk, GDN_CT] tile in
// shared memory (rows past dk zero), streaming each chunk's tiles (see
// gdn_scan_issue). Per chunk:
//   tiles tk < nq: W S and Q S, thread (i, 4 columns) = (tid/4, 4*(tid%4)),
//      in registers over the key dims in order; after the last one
//      Vn = U - W S into shared memory;
//   tile P: O_i = e^gamma_i QS_i + sum_j P_ij Vn_j, same threads;
//   K tiles: S <- e^gamma_last S + sum_i (e^(gamma_last - gamma_i) k_i) Vn_i^T,
//      thread (4 key dims, 2 columns) = (4*(tid/8), 2*(tid%8)), the sum in
//      registers over both tiles, then the state tile is updated.
// Padded rows (i >= n) have W = K = P = Vn = 0, so summing over all GDN_CH
// rows adds exact zeros only. Reads the state from and writes it back to
// rec [layer][slot][nv][dk][dv]. Needs dk and dv multiples of 4 (16-byte
// copies; kernels/cuda/gdn_chunk.go checks). The state is stored as ST
// (float, or bf16 bits for the _sbf16 entry: gdn_sld, gdn_sst of
// 50_gdn.cu) and held in float in shared memory from the sequence's first
// chunk to its last (rounded once a launch). The entries declare the
// shared arrays (their names in the PTX stay the entries') and pass them.
#define GDN_SCAN_ARGS(ST) float *out, ST *rec, const float *W, const float *U, const float *G, const float *P, const float *qh, \
		const float *kh, const int *chunkRow, const int *chunkLen, const int *seqChunk0, const int *seqChunks, const int *seqSlot, \
		int nk, int nv, int dk, int dv, int slots, int layer
#define GDN_SCAN_PASS out, rec, W, U, G, P, qh, kh, chunkRow, chunkLen, seqChunk0, seqChunks, seqSlot, nk, nv, dk, dv, slots, layer

template <typename ST>
__device__ __forceinline__ void gdn_chunk_scan(float *sS, float *sV, float (*sT)[GDN_TILE], float *sGam, float *sEg, float *sEl,
		float &sEgl, GDN_SCAN_ARGS(ST)) {
	const int x = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * GDN_CT;
	const int tid = threadIdx.x;
	const int kHead = h / (nv / nk), qk = nk * dk;
	ST *S = rec + (((long long)layer * slots + seqSlot[x]) * nv + h) * (long long)dk * dv;
	for (int e = tid; e < GDN_DK_MAX * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, c = cBase + e % GDN_CT;
		sS[e] = d < dk && c < dv ? gdn_sld(S, (long long)d * dv + c) : 0.0f;
	}
	const int mi = tid / 4, mc = 4 * (tid % 4);       // W S, Q S and outputs
	const int kd = 4 * (tid / 8), kc = 2 * (tid % 8); // state update
	const bool colOK = cBase + mc < dv;               // dv % 4 == 0: all 4 or none
	const int c0 = seqChunk0[x], nChunks = seqChunks[x];
	const int nq = (dk + GDN_SQ - 1) / GDN_SQ, nt = nq + 1 + GDN_CH / GDN_KR, total = nChunks * nt;
	float accW[4] = {}, accQ[4] = {}, accS[4][2] = {};
	float4 u4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	gdn_scan_issue(sT[0], sGam, 0, nq, c0, chunkRow[c0], chunkLen[c0], W, G, P, qh, kh, h, kHead, nv, dk, qk);
	cp_async_commit();
	for (int t = 0; t < total; t++) {
		const int ci = t / nt, tk = t - ci * nt, cidx = c0 + ci;
		const int row0 = chunkRow[cidx], n = chunkLen[cidx];
		if (t + 1 < total) {
			const int ci1 = (t + 1) / nt, tk1 = t + 1 - ci1 * nt, cidx1 = c0 + ci1;
			gdn_scan_issue(sT[(t + 1) & 1], sGam, tk1, nq, cidx1, chunkRow[cidx1], chunkLen[cidx1],
				W, G, P, qh, kh, h, kHead, nv, dk, qk);
		}
		cp_async_commit(); // possibly empty: one group per iteration
		cp_async_wait<1>();  // tile t (and with tile 0 sGam) has landed
		float *buf = sT[t & 1];
		if (tk > nq) gdn_scan_scale_k(buf, sEl, (tk - nq - 1) * GDN_KR); // sEl is from tile 0's step
		__syncthreads();
		if (tk < nq) {
			if (tk == 0) {
				// sGam is stable until tile 0 of the next chunk is issued (at
				// this chunk's last tile); sEg, sEl, sEgl are read from tile 1 on.
				if (tid < GDN_CH) {
					float gl = sGam[n - 1], gi = sGam[tid];
					bool live = tid < n;
					sEg[tid] = live ? (float)exp((double)gi) : 0.0f;
					sEl[tid] = live ? (float)exp((double)(gl - gi)) : 0.0f;
					if (tid == 0) sEgl = (float)exp((double)gl);
				}
#pragma unroll
				for (int s = 0; s < 4; s++) accW[s] = accQ[s] = 0.0f;
				u4 = mi < n && colOK ? *(const float4 *)&U[((long long)(row0 + mi) * nv + h) * dv + cBase + mc]
						     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			}
			gdn_scan_wq(accW, accQ, buf, sS + tk * GDN_SQ * GDN_CT, mi, mc);
			if (tk == nq - 1) {
				bool ok = mi < n && colOK;
				*(float4 *)&sV[mi * GDN_CT + mc] = ok ? make_float4(u4.x - accW[0], u4.y - accW[1], u4.z - accW[2], u4.w - accW[3])
								       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			}
		} else if (tk == nq) {
			float o[4];
			gdn_scan_out(o, accQ, sEg[mi], buf, sV, mi, mc);
			if (mi < n && colOK)
				*(float4 *)&out[(long long)(row0 + mi) * nv * dv + (long long)h * dv + cBase + mc] = make_float4(o[0], o[1], o[2], o[3]);
		} else {
			const int half = tk - nq - 1;
			if (half == 0) {
#pragma unroll
				for (int a = 0; a < 4; a++) accS[a][0] = accS[a][1] = 0.0f;
			}
			gdn_scan_kv(accS, buf, sV + half * GDN_KR * GDN_CT, kd, kc);
			if (half == GDN_CH / GDN_KR - 1) {
				const float egl = sEgl;
#pragma unroll
				for (int a = 0; a < 4; a++) {
					float2 *sp = (float2 *)&sS[(kd + a) * GDN_CT + kc];
					float2 s2 = *sp;
					*sp = make_float2(egl * s2.x + accS[a][0], egl * s2.y + accS[a][1]);
				}
			}
		}
		__syncthreads(); // buf is consumed before iteration t + 1 refills it; sV, sS are complete
	}
	cp_async_wait<0>();
	for (int e = tid; e < dk * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, c = cBase + e % GDN_CT;
		if (c < dv) gdn_sst(S, (long long)d * dv + c, sS[e]);
	}
}

#define GDN_SCAN_SHARED \
	__shared__ __align__(16) float sS[GDN_DK_MAX * GDN_CT]; \
	__shared__ __align__(16) float sV[GDN_CH * GDN_CT]; \
	__shared__ __align__(16) float sT[2][GDN_TILE]; \
	__shared__ float sGam[GDN_CH], sEg[GDN_CH], sEl[GDN_CH]; \
	__shared__ float sEgl;

extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_scan_f32(GDN_SCAN_ARGS(float)) {
	PDL_LAUNCH();
	PDL_WAIT();
	GDN_SCAN_SHARED
	gdn_chunk_scan<float>(sS, sV, sT, sGam, sEg, sEl, sEgl, GDN_SCAN_PASS);
}

extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_scan_f32_sbf16(GDN_SCAN_ARGS(unsigned short)) {
	PDL_LAUNCH();
	PDL_WAIT();
	GDN_SCAN_SHARED
	gdn_chunk_scan<unsigned short>(sS, sV, sT, sGam, sEg, sEl, sEgl, GDN_SCAN_PASS);
}

// ---------------------------------------------------------------------------
// gdn_chunk_scan_mma_f32: the default scan. Same blocks and tiles as
// gdn_chunk_scan_f32 (K tiles swizzled, see gdn_scan_issue), a deeper
// pipeline (GDN_STAGES) and the
// four per-chunk products on tensor cores (3xTF32, see gdn_mma3s).
// Warp w (8 warps):
//   W S, Q S and the outputs: rows 16 (w / 2) .., state columns 8 (w % 2) ..
//      (one C tile each of W S and Q S, over the key dims in order);
//   the state update: key dims 16 w .., both 8-column halves, the sum
//      over the chunk's rows in order, e^(gamma_last - gamma_j) applied to
//      Vn_j as the B fragment is loaded (instead of to k_j).
// The state tile and Vn are stored [row][GDN_CT] with column c at
// c ^ 8 ((row >> 1) & 1) (gdn_sidx) so that B fragments hit 32 banks.
// The tiles are streamed through a ring of GDN_STAGES slots in dynamic
// shared memory (GDN_STAGES * GDN_TILE floats, 64 KiB; gdn_chunk.go opts
// the entry in), so that three tiles are in flight while one is consumed.
#define GDN_STAGES 4

__device__ __forceinline__ int gdn_sidx(int r, int c) { return r * GDN_CT + (c ^ ((r & 2) << 2)); }

// The state storage as for gdn_chunk_scan (ST float or bf16 bits; the
// entries declare the shared arrays).
template <typename ST>
__device__ __forceinline__ void gdn_chunk_scan_mma(float *sS, float *sV, float *gdn_ring, float (*sGam)[GDN_CH], float *sEg, float *sEl,
		float &sEgl, GDN_SCAN_ARGS(ST)) {
	const int x = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * GDN_CT;
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	const int kHead = h / (nv / nk), qk = nk * dk;
	ST *S = rec + (((long long)layer * slots + seqSlot[x]) * nv + h) * (long long)dk * dv;
	for (int e = tid; e < GDN_DK_MAX * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, cl = e % GDN_CT, c = cBase + cl;
		sS[gdn_sidx(d, cl)] = d < dk && c < dv ? gdn_sld(S, (long long)d * dv + c) : 0.0f;
	}
	const int m0 = 16 * (warp / 2), n0 = 8 * (warp % 2); // W S, Q S, outputs
	const int i0 = m0 + g, i1 = i0 + 8, cq = n0 + 2 * t;  // this lane's C rows and first column
	const bool colOK = cBase + cq < dv;                   // dv % 4 == 0, cq even: both columns or none
	const int d0s = 16 * warp;                            // state update: key dims d0s ..
	const int c0 = seqChunk0[x], nChunks = seqChunks[x];
	const int nq = (dk + GDN_SQ - 1) / GDN_SQ, nt = nq + 1 + GDN_CH / GDN_KR, total = nChunks * nt;
	float accW[4] = {}, accQ[4] = {}, accS[2][4] = {};
	float2 u0 = make_float2(0.0f, 0.0f), u1 = u0;
	// Tile u goes to ring slot u % GDN_STAGES, issued GDN_STAGES - 1
	// iterations before it is consumed; one commit group per tile (possibly
	// empty), so waiting until GDN_STAGES - 1 groups remain in flight
	// leaves tile it (and, with a tile 0, the chunk's gamma) landed.
#pragma unroll
	for (int u = 0; u < GDN_STAGES - 1; u++) {
		if (u < total) {
			const int cu = u / nt, cidxu = c0 + cu;
			gdn_scan_issue<true>(gdn_ring + u * GDN_TILE, sGam[cu & 1], u - cu * nt, nq, cidxu, chunkRow[cidxu], chunkLen[cidxu],
				W, G, P, qh, kh, h, kHead, nv, dk, qk);
		}
		cp_async_commit();
	}
	for (int it = 0; it < total; it++) {
		const int ci = it / nt, tk = it - ci * nt, cidx = c0 + ci;
		const int row0 = chunkRow[cidx], n = chunkLen[cidx];
		const int u = it + GDN_STAGES - 1;
		if (u < total) {
			// Slot u % GDN_STAGES was consumed at iteration it - 1. A chunk's
			// gamma is read only at its tile 0, and tile 0 of chunk cu is
			// issued after chunk cu - 2's (same parity) tile 0 was consumed.
			const int cu = u / nt, cidxu = c0 + cu;
			gdn_scan_issue<true>(gdn_ring + (u % GDN_STAGES) * GDN_TILE, sGam[cu & 1], u - cu * nt, nq, cidxu,
				chunkRow[cidxu], chunkLen[cidxu], W, G, P, qh, kh, h, kHead, nv, dk, qk);
		}
		cp_async_commit();
		cp_async_wait<GDN_STAGES - 1>();
		__syncthreads();
		const float *buf = gdn_ring + (it % GDN_STAGES) * GDN_TILE;
		if (tk < nq) {
			if (tk == 0) {
				// sGam[ci & 1] is not refilled before chunk ci + 2's tile 0 is
				// issued; sEg, sEl, sEgl are read from tile 1 on.
				if (tid < GDN_CH) {
					float gl = sGam[ci & 1][n - 1], gi = sGam[ci & 1][tid];
					bool live = tid < n;
					sEg[tid] = live ? (float)exp((double)gi) : 0.0f;
					sEl[tid] = live ? (float)exp((double)(gl - gi)) : 0.0f;
					if (tid == 0) sEgl = (float)exp((double)gl);
				}
#pragma unroll
				for (int q = 0; q < 4; q++) accW[q] = accQ[q] = 0.0f;
				const float *Ub = U + (long long)h * dv + cBase + cq;
				u0 = i0 < n && colOK ? *(const float2 *)&Ub[(long long)(row0 + i0) * nv * dv] : make_float2(0.0f, 0.0f);
				u1 = i1 < n && colOK ? *(const float2 *)&Ub[(long long)(row0 + i1) * nv * dv] : make_float2(0.0f, 0.0f);
			}
			// W S and Q S over key dims tk GDN_SQ .. (W and Q tiles [64][32],
			// float4 slot c4 of row i at c4 ^ (i & 7); (i0 & 7) == (i1 & 7) == g).
			const float *bw = buf, *bq = buf + GDN_CH * GDN_SQ;
#pragma unroll
			for (int ks = 0; ks < GDN_SQ / 8; ks++) {
				const int s0 = 4 * ((2 * ks) ^ g) + t, s1 = 4 * ((2 * ks + 1) ^ g) + t;
				const float aw[4] = {bw[i0 * GDN_SQ + s0], bw[i1 * GDN_SQ + s0], bw[i0 * GDN_SQ + s1], bw[i1 * GDN_SQ + s1]};
				const float aq[4] = {bq[i0 * GDN_SQ + s0], bq[i1 * GDN_SQ + s0], bq[i0 * GDN_SQ + s1], bq[i1 * GDN_SQ + s1]};
				const int d = tk * GDN_SQ + 8 * ks + t;
				unsigned bh[2], bl[2];
				gdn_split(sS[gdn_sidx(d, n0 + g)], bh[0], bl[0]);
				gdn_split(sS[gdn_sidx(d + 4, n0 + g)], bh[1], bl[1]);
				gdn_mma3(accW, aw, bh, bl);
				gdn_mma3(accQ, aq, bh, bl);
			}
			if (tk == nq - 1) {
				// Vn = U - W S (zero for padded rows and columns past dv).
				const bool ok0 = i0 < n && colOK, ok1 = i1 < n && colOK;
				*(float2 *)&sV[gdn_sidx(i0, cq)] = ok0 ? make_float2(u0.x - accW[0], u0.y - accW[1]) : make_float2(0.0f, 0.0f);
				*(float2 *)&sV[gdn_sidx(i1, cq)] = ok1 ? make_float2(u1.x - accW[2], u1.y - accW[3]) : make_float2(0.0f, 0.0f);
			}
		} else if (tk == nq) {
			// O = e^gamma Q S + P Vn (P [64][64], slots swizzled as W's).
			float o[4] = {sEg[i0] * accQ[0], sEg[i0] * accQ[1], sEg[i1] * accQ[2], sEg[i1] * accQ[3]};
#pragma unroll 2
			for (int ks = 0; ks < GDN_CH / 8; ks++) {
				const int s0 = 4 * ((2 * ks) ^ g) + t, s1 = 4 * ((2 * ks + 1) ^ g) + t;
				const float ap[4] = {buf[i0 * GDN_CH + s0], buf[i1 * GDN_CH + s0], buf[i0 * GDN_CH + s1], buf[i1 * GDN_CH + s1]};
				const int j = 8 * ks + t;
				unsigned bh[2], bl[2];
				gdn_split(sV[gdn_sidx(j, n0 + g)], bh[0], bl[0]);
				gdn_split(sV[gdn_sidx(j + 4, n0 + g)], bh[1], bl[1]);
				gdn_mma3(o, ap, bh, bl);
			}
			float *ob = out + (long long)h * dv + cBase + cq;
			if (i0 < n && colOK) *(float2 *)&ob[(long long)(row0 + i0) * nv * dv] = make_float2(o[0], o[1]);
			if (i1 < n && colOK) *(float2 *)&ob[(long long)(row0 + i1) * nv * dv] = make_float2(o[2], o[3]);
		} else {
			// S <- e^gamma_last S + sum_j k_j (e^(gamma_last - gamma_j) Vn_j)^T
			// over this K tile's rows j = GDN_KR half ...
			const int half = tk - nq - 1, j0 = half * GDN_KR;
			if (half == 0) {
#pragma unroll
				for (int q = 0; q < 4; q++) accS[0][q] = accS[1][q] = 0.0f;
			}
#pragma unroll
			for (int ks = 0; ks < GDN_KR / 8; ks++) {
				const int r0 = 8 * ks + t, r1 = r0 + 4; // (r0 & 3) == (r1 & 3) == t
				const int da = ((d0s + g) / 4) ^ (2 * t), db = ((d0s + g + 8) / 4) ^ (2 * t), dl = g & 3;
				const float ak[4] = {buf[r0 * GDN_DK_MAX + 4 * da + dl], buf[r0 * GDN_DK_MAX + 4 * db + dl],
						     buf[r1 * GDN_DK_MAX + 4 * da + dl], buf[r1 * GDN_DK_MAX + 4 * db + dl]};
				const float el0 = sEl[j0 + r0], el1 = sEl[j0 + r1];
#pragma unroll
				for (int hc = 0; hc < 2; hc++) {
					unsigned bh[2], bl[2];
					gdn_split(el0 * sV[gdn_sidx(j0 + r0, 8 * hc + g)], bh[0], bl[0]);
					gdn_split(el1 * sV[gdn_sidx(j0 + r1, 8 * hc + g)], bh[1], bl[1]);
					gdn_mma3(accS[hc], ak, bh, bl);
				}
			}
			if (half == GDN_CH / GDN_KR - 1) {
				const float egl = sEgl;
#pragma unroll
				for (int hc = 0; hc < 2; hc++) {
					const int c = 8 * hc + 2 * t;
					float2 *p0 = (float2 *)&sS[gdn_sidx(d0s + g, c)], *p1 = (float2 *)&sS[gdn_sidx(d0s + g + 8, c)];
					float2 s0 = *p0, s1 = *p1;
					*p0 = make_float2(egl * s0.x + accS[hc][0], egl * s0.y + accS[hc][1]);
					*p1 = make_float2(egl * s1.x + accS[hc][2], egl * s1.y + accS[hc][3]);
				}
			}
		}
		__syncthreads(); // buf is consumed before iteration it + 1 refills its slot; sV, sS are complete
	}
	cp_async_wait<0>();
	for (int e = tid; e < dk * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, cl = e % GDN_CT, c = cBase + cl;
		if (c < dv) gdn_sst(S, (long long)d * dv + c, sS[gdn_sidx(d, cl)]);
	}
}

#define GDN_SCAN_MMA_SHARED \
	__shared__ __align__(16) float sS[GDN_DK_MAX * GDN_CT]; \
	__shared__ __align__(16) float sV[GDN_CH * GDN_CT]; \
	extern __shared__ __align__(16) float gdn_ring[]; /* GDN_STAGES tiles of GDN_TILE floats */ \
	__shared__ float sGam[2][GDN_CH], sEg[GDN_CH], sEl[GDN_CH]; /* sGam by chunk parity */ \
	__shared__ float sEgl;

extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_scan_mma_f32(GDN_SCAN_ARGS(float)) {
	PDL_LAUNCH();
	PDL_WAIT();
	GDN_SCAN_MMA_SHARED
	gdn_chunk_scan_mma<float>(sS, sV, gdn_ring, sGam, sEg, sEl, sEgl, GDN_SCAN_PASS);
}

extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_scan_mma_f32_sbf16(GDN_SCAN_ARGS(unsigned short)) {
	PDL_LAUNCH();
	PDL_WAIT();
	GDN_SCAN_MMA_SHARED
	gdn_chunk_scan_mma<unsigned short>(sS, sV, gdn_ring, sGam, sEg, sEl, sEgl, GDN_SCAN_PASS);
}

// The split scan (the default): the sequential pass over a sequence's
// chunks keeps only what the next chunk needs, and the outputs, which no
// later chunk needs, are computed afterwards for every chunk in parallel.
//   gdn_chunk_state_mma_f32  block (chunked sequence x, v head h, column tile
//                       z of GDN_CT state columns), as gdn_chunk_scan_mma_f32
//                       but per chunk only: store the state at the chunk's
//                       start into H [chunk][nv][dk][dv] (float32 whatever
//                       the state's storage), Vn = U - W S written over U,
//                       and the state update. Each chunk streams GDN_SW
//                       (nw) W tiles of [64][64] and two K tiles, against
//                       the old scan's four W and Q tiles, one P tile and
//                       two K tiles.
//   gdn_chunk_out_mma_f32   block (chunk c, v head h, column tile of GDN_OC
//                       state columns): O = e^gamma Q H_c + P Vn for the
//                       chunk's rows, the same products (3xTF32) in the same
//                       order as the old scan.
#define GDN_SW 64 // key dims of a W tile of the state pass (GDN_TILE floats: [64][64])

// gdn_state_issue starts this thread's copies of tile tk of chunk cidx for
// the state pass: tk < nw W key dims GDN_SW tk .. of all GDN_CH rows
// (float4 slot c4 of row i at c4 ^ (i & 7)); then the two K tiles as
// gdn_scan_issue's (swizzled); with tile 0 the chunk's gamma into sGam.
__device__ __forceinline__ void gdn_state_issue(float *buf, float *sGam, int tk, int nw, int row0, int n,
		const float *W, const float *G, const float *kh, int h, int kHead, int nv, int dk, int qk) {
	const int tid = threadIdx.x;
	if (tk < nw) {
#pragma unroll
		for (int m = 0; m < GDN_CH * GDN_SW / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, i = e / (GDN_SW / 4), c4 = e % (GDN_SW / 4), d = tk * GDN_SW + 4 * c4;
			bool ok = i < n && d < dk;
			long long row = row0 + (ok ? i : 0);
			cp_async16(buf + i * GDN_SW + 4 * (c4 ^ (i & 7)), W + (row * nv + h) * dk + (ok ? d : 0), ok);
		}
	} else {
		const int i0 = (tk - nw) * GDN_KR;
#pragma unroll
		for (int m = 0; m < GDN_TILE / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, r = e / (GDN_DK_MAX / 4), d = 4 * (e % (GDN_DK_MAX / 4));
			bool ok = i0 + r < n && d < dk;
			long long row = row0 + (ok ? i0 + r : 0);
			cp_async16(buf + r * GDN_DK_MAX + 4 * ((d / 4) ^ (2 * (r & 3))), kh + row * qk + (long long)kHead * dk + (ok ? d : 0), ok);
		}
	}
	if (tk == 0 && tid < GDN_CH) {
		bool ok = tid < n;
		gdn_cp4(&sGam[tid], G + (long long)(row0 + (ok ? tid : 0)) * nv + h, ok);
	}
}

#define GDN_STATE_ARGS(ST) float *H, ST *rec, const float *W, float *U, const float *G, const float *kh, \
		const int *chunkRow, const int *chunkLen, const int *seqChunk0, const int *seqChunks, const int *seqSlot, \
		int nk, int nv, int dk, int dv, int slots, int layer
#define GDN_STATE_PASS H, rec, W, U, G, kh, chunkRow, chunkLen, seqChunk0, seqChunks, seqSlot, nk, nv, dk, dv, slots, layer

// gdn_chunk_state_mma: the warps' roles, the state tile's layout and the
// ring are gdn_chunk_scan_mma's.
template <typename ST, int P>
__device__ __forceinline__ void gdn_chunk_state_mma(float *sS, float *sV, float *gdn_ring, float (*sGam)[GDN_CH], float *sEl,
		float &sEgl, GDN_STATE_ARGS(ST)) {
	const int x = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * GDN_CT;
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	const int kHead = h / (nv / nk), qk = nk * dk;
	ST *S = rec + (((long long)layer * slots + seqSlot[x]) * nv + h) * (long long)dk * dv;
	for (int e = tid; e < GDN_DK_MAX * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, cl = e % GDN_CT, c = cBase + cl;
		sS[gdn_sidx(d, cl)] = d < dk && c < dv ? gdn_sld(S, (long long)d * dv + c) : 0.0f;
	}
	const int m0 = 16 * (warp / 2), n0 = 8 * (warp % 2); // W S
	const int i0 = m0 + g, i1 = i0 + 8, cq = n0 + 2 * t;  // this lane's C rows and first column
	const bool colOK = cBase + cq < dv;                   // dv % 4 == 0, cq even: both columns or none
	const int d0s = 16 * warp;                            // state update: key dims d0s ..
	const int c0 = seqChunk0[x], nChunks = seqChunks[x];
	const int nw = (dk + GDN_SW - 1) / GDN_SW, nt = nw + GDN_CH / GDN_KR, total = nChunks * nt;
	float accW[4] = {}, accS[2][4] = {};
	float2 u0 = make_float2(0.0f, 0.0f), u1 = u0;
#pragma unroll
	for (int u = 0; u < GDN_STAGES - 1; u++) {
		if (u < total) {
			const int cu = u / nt, cidxu = c0 + cu;
			gdn_state_issue(gdn_ring + u * GDN_TILE, sGam[cu & 1], u - cu * nt, nw, chunkRow[cidxu], chunkLen[cidxu],
				W, G, kh, h, kHead, nv, dk, qk);
		}
		cp_async_commit();
	}
	for (int it = 0; it < total; it++) {
		const int ci = it / nt, tk = it - ci * nt, cidx = c0 + ci;
		const int row0 = chunkRow[cidx], n = chunkLen[cidx];
		const int u = it + GDN_STAGES - 1;
		if (u < total) {
			// As in gdn_chunk_scan_mma: slot u % GDN_STAGES was consumed at
			// iteration it - 1, and sGam[cu & 1] at chunk cu - 2's tile 0.
			const int cu = u / nt, cidxu = c0 + cu;
			gdn_state_issue(gdn_ring + (u % GDN_STAGES) * GDN_TILE, sGam[cu & 1], u - cu * nt, nw,
				chunkRow[cidxu], chunkLen[cidxu], W, G, kh, h, kHead, nv, dk, qk);
		}
		cp_async_commit();
		cp_async_wait<GDN_STAGES - 1>();
		__syncthreads();
		const float *buf = gdn_ring + (it % GDN_STAGES) * GDN_TILE;
		if (tk < nw) {
			if (tk == 0) {
				if (tid < GDN_CH) {
					float gl = sGam[ci & 1][n - 1], gi = sGam[ci & 1][tid];
					sEl[tid] = tid < n ? (float)exp((double)(gl - gi)) : 0.0f;
					if (tid == 0) sEgl = (float)exp((double)gl);
				}
				// The state at the chunk's start, for the output kernel
				// (sS is not written before the chunk's last K tile).
				float *Hc = H + ((long long)cidx * nv + h) * (long long)dk * dv + cBase;
				for (int e = tid; e < dk * (GDN_CT / 4); e += GDN_THREADS) {
					int d = e / (GDN_CT / 4), c = 4 * (e % (GDN_CT / 4));
					if (cBase + c < dv) *(float4 *)&Hc[(long long)d * dv + c] = *(const float4 *)&sS[gdn_sidx(d, c)];
				}
#pragma unroll
				for (int q = 0; q < 4; q++) accW[q] = 0.0f;
				const float *Ub = U + (long long)h * dv + cBase + cq;
				u0 = i0 < n && colOK ? *(const float2 *)&Ub[(long long)(row0 + i0) * nv * dv] : make_float2(0.0f, 0.0f);
				u1 = i1 < n && colOK ? *(const float2 *)&Ub[(long long)(row0 + i1) * nv * dv] : make_float2(0.0f, 0.0f);
			}
			// W S over key dims tk GDN_SW .. ((i0 & 7) == (i1 & 7) == g).
#pragma unroll 4
			for (int ks = 0; ks < GDN_SW / 8; ks++) {
				const int s0 = 4 * ((2 * ks) ^ g) + t, s1 = 4 * ((2 * ks + 1) ^ g) + t;
				const float aw[4] = {buf[i0 * GDN_SW + s0], buf[i1 * GDN_SW + s0], buf[i0 * GDN_SW + s1], buf[i1 * GDN_SW + s1]};
				const int d = tk * GDN_SW + 8 * ks + t;
				unsigned bh[2], bl[2];
				gdn_bfrag<P>(sS[gdn_sidx(d, n0 + g)], bh[0], bl[0]);
				gdn_bfrag<P>(sS[gdn_sidx(d + 4, n0 + g)], bh[1], bl[1]);
				gdn_mmap<P>(accW, aw, bh, bl);
			}
			if (tk == nw - 1) {
				// Vn = U - W S (zero for padded rows and columns past dv),
				// into sV and over U for the output kernel.
				const bool ok0 = i0 < n && colOK, ok1 = i1 < n && colOK;
				const float2 v0 = ok0 ? make_float2(u0.x - accW[0], u0.y - accW[1]) : make_float2(0.0f, 0.0f);
				const float2 v1 = ok1 ? make_float2(u1.x - accW[2], u1.y - accW[3]) : make_float2(0.0f, 0.0f);
				*(float2 *)&sV[gdn_sidx(i0, cq)] = v0;
				*(float2 *)&sV[gdn_sidx(i1, cq)] = v1;
				float *Ub = U + (long long)h * dv + cBase + cq;
				if (ok0) *(float2 *)&Ub[(long long)(row0 + i0) * nv * dv] = v0;
				if (ok1) *(float2 *)&Ub[(long long)(row0 + i1) * nv * dv] = v1;
			}
		} else {
			// The state update, as gdn_chunk_scan_mma's.
			const int half = tk - nw, j0 = half * GDN_KR;
			if (half == 0) {
#pragma unroll
				for (int q = 0; q < 4; q++) accS[0][q] = accS[1][q] = 0.0f;
			}
#pragma unroll
			for (int ks = 0; ks < GDN_KR / 8; ks++) {
				const int r0 = 8 * ks + t, r1 = r0 + 4;
				const int da = ((d0s + g) / 4) ^ (2 * t), db = ((d0s + g + 8) / 4) ^ (2 * t), dl = g & 3;
				const float ak[4] = {buf[r0 * GDN_DK_MAX + 4 * da + dl], buf[r0 * GDN_DK_MAX + 4 * db + dl],
						     buf[r1 * GDN_DK_MAX + 4 * da + dl], buf[r1 * GDN_DK_MAX + 4 * db + dl]};
				const float el0 = sEl[j0 + r0], el1 = sEl[j0 + r1];
#pragma unroll
				for (int hc = 0; hc < 2; hc++) {
					unsigned bh[2], bl[2];
					gdn_bfrag<P>(el0 * sV[gdn_sidx(j0 + r0, 8 * hc + g)], bh[0], bl[0]);
					gdn_bfrag<P>(el1 * sV[gdn_sidx(j0 + r1, 8 * hc + g)], bh[1], bl[1]);
					gdn_mmap<P>(accS[hc], ak, bh, bl);
				}
			}
			if (half == GDN_CH / GDN_KR - 1) {
				const float egl = sEgl;
#pragma unroll
				for (int hc = 0; hc < 2; hc++) {
					const int c = 8 * hc + 2 * t;
					float2 *p0 = (float2 *)&sS[gdn_sidx(d0s + g, c)], *p1 = (float2 *)&sS[gdn_sidx(d0s + g + 8, c)];
					float2 s0 = *p0, s1 = *p1;
					*p0 = make_float2(egl * s0.x + accS[hc][0], egl * s0.y + accS[hc][1]);
					*p1 = make_float2(egl * s1.x + accS[hc][2], egl * s1.y + accS[hc][3]);
				}
			}
		}
		__syncthreads(); // buf is consumed before iteration it + 1 refills its slot; sV, sS are complete
	}
	cp_async_wait<0>();
	for (int e = tid; e < dk * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, cl = e % GDN_CT, c = cBase + cl;
		if (c < dv) gdn_sst(S, (long long)d * dv + c, sS[gdn_sidx(d, cl)]);
	}
}

#define GDN_STATE_MMA_SHARED \
	__shared__ __align__(16) float sS[GDN_DK_MAX * GDN_CT]; \
	__shared__ __align__(16) float sV[GDN_CH * GDN_CT]; \
	extern __shared__ __align__(16) float gdn_ring[]; /* GDN_STAGES tiles of GDN_TILE floats */ \
	__shared__ float sGam[2][GDN_CH], sEl[GDN_CH]; /* sGam by chunk parity */ \
	__shared__ float sEgl;

// gdn_chunk_state_<prec>_f32[_sbf16]: the state pass in 3xTF32 (mma, the
// exact mode's) or one TF32 mma a product (tf32, the default with bf16
// weights, Backend.gdnChunk), over a float32 or bf16 (_sbf16) state.
#define GDN_STATE_ENTRY(PREC, SUF, ST, P) \
	extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_state_##PREC##_f32##SUF(GDN_STATE_ARGS(ST)) { \
		PDL_LAUNCH(); \
		PDL_WAIT(); \
		GDN_STATE_MMA_SHARED \
		gdn_chunk_state_mma<ST, P>(sS, sV, gdn_ring, sGam, sEl, sEgl, GDN_STATE_PASS); \
	}

GDN_STATE_ENTRY(mma, , float, 3)
GDN_STATE_ENTRY(mma, _sbf16, unsigned short, 3)
GDN_STATE_ENTRY(tf32, , float, 1)
GDN_STATE_ENTRY(tf32, _sbf16, unsigned short, 1)

// ---------------------------------------------------------------------------
// gdn_chunk_state_w<CT>_<prec>_f32[_sbf16] (CT 32 or 64): the split scan's
// state pass with gdn_chunk_state_mma_f32's outputs bit for bit (H, Vn over
// U and the final state: the same products, roundings and sums in the same
// order), restructured for a short chain per chunk. The old pass is bound
// by what every one of a head's 8 blocks repeats for its 16 columns (the W
// and K fragments, their loads from L2, eight barriers a chunk); here a
// block takes CT columns (a head has 2 or 4 blocks), one stage holds a whole
// chunk's W and K ([64][128] each, W's float4 slot c4 of row i at c4 ^ (i & 7),
// K's at c4 ^ 2 (i & 3), as the old tiles), and a chunk costs two barriers:
//   B1  the chunk's stage has landed (issued a chunk ahead) and the state's
//       rounded copy sS is complete; the next chunk's copies are issued;
//   W S warp w: rows 16 (w / 2) + g (+ 8), columns (w % 2) CT / 2 + 8 j + 2 t
//       (+ 1), j < CT / 16, over the key dims in order; Vn = U - W S (U read
//       into registers a chunk ahead) goes to U and, times e^(gamma_last -
//       gamma_i) and rounded as the B operand, to sV;
//   B2  sV is complete and every W S read of sS is done;
//   update warp w: key dims 16 w + g (+ 8), columns 8 j + 2 t (+ 1), j < CT
//       / 8: the state, held in registers as C fragments, becomes e^gamma_last
//       S + K^T (e Vn), and its rounded copy goes to sS.
// The next chunk's decays (e^(gamma_last - gamma_i), e^gamma_last; double
// exp as the old pass) are computed during the update from gammas loaded at
// B1, into sEl, sEgl by chunk parity. sS and sV rows are CT + 8 floats, so
// that B fragments (8 rows t, t + 4 by 8 columns g) hit 32 banks. With P = 1
// sS and sV hold the values already rounded to TF32 (cvt.rna of a rounded
// value is the value), with P = 3 the floats, split as they are loaded.
// Dynamic shared memory: gdn_wide<CT>::SMEM floats (gdn_chunk.go opts in).
#define GDN_WSTAGE (2 * GDN_CH * GDN_DK_MAX) // floats of a stage: W, then K

template <int CT>
struct gdn_wide {
	static constexpr int SS = CT + 8;  // row stride of sS and sV
	static constexpr int NW = CT / 16; // W S n-tiles a warp
	static constexpr int NU = CT / 8;  // update n-tiles a warp
	static constexpr int SMEM = 2 * GDN_WSTAGE + GDN_DK_MAX * SS + GDN_CH * SS + 2 * GDN_CH + 2;
};

// gdn_round and gdn_bload: a value as sS and sV store it for precision P,
// and the B fragment of such a value.
template <int P>
__device__ __forceinline__ float gdn_round(float x) {
	if constexpr (P == 3) return x;
	else return __uint_as_float(gdn_tf32(x));
}

template <int P>
__device__ __forceinline__ void gdn_bload(float x, unsigned &hi, unsigned &lo) {
	if constexpr (P == 3) gdn_split(x, hi, lo);
	else hi = __float_as_uint(x);
}

// gdn_wide_issue starts this thread's copies of a chunk's W and K rows
// (zero past the chunk's n rows and dk) into stage st, as one group.
__device__ __forceinline__ void gdn_wide_issue(float *st, int row0, int n, const float *W, const float *kh, int h, int kHead,
		int nv, int dk, int qk) {
	const int tid = threadIdx.x;
	float *sW = st, *sK = st + GDN_CH * GDN_DK_MAX;
#pragma unroll
	for (int m = 0; m < GDN_CH * GDN_DK_MAX / 4 / GDN_THREADS; m++) {
		int e = tid + m * GDN_THREADS, i = e / (GDN_DK_MAX / 4), c4 = e % (GDN_DK_MAX / 4), d = 4 * c4;
		bool ok = i < n && d < dk;
		long long row = row0 + (ok ? i : 0);
		int dd = ok ? d : 0;
		cp_async16(sW + i * GDN_DK_MAX + 4 * (c4 ^ (i & 7)), W + (row * nv + h) * dk + dd, ok);
		cp_async16(sK + i * GDN_DK_MAX + 4 * (c4 ^ (2 * (i & 3))), kh + row * qk + (long long)kHead * dk + dd, ok);
	}
	cp_async_commit();
}

// gdn_wide_u reads this lane's U values of a chunk (rows i0, i0 + 8; columns
// cb + 8 j, + 1), zero past its rows and dv.
template <int NW>
__device__ __forceinline__ void gdn_wide_u(float2 (&u)[NW][2], const float *U, int row0, int n, int i0, int h, int nv, int dv, int cb) {
#pragma unroll
	for (int j = 0; j < NW; j++) {
		const int c = cb + 8 * j;
		const float *Ub = U + (long long)h * dv + c;
		u[j][0] = i0 < n && c < dv ? *(const float2 *)&Ub[(long long)(row0 + i0) * nv * dv] : make_float2(0.0f, 0.0f);
		u[j][1] = i0 + 8 < n && c < dv ? *(const float2 *)&Ub[(long long)(row0 + i0 + 8) * nv * dv] : make_float2(0.0f, 0.0f);
	}
}

// gdn_wide_decay stores a chunk's decays into el [GDN_CH] and *egl from
// threads tid < GDN_CH's gamma gi (its row's) and gl (the last row's).
__device__ __forceinline__ void gdn_wide_decay(float *el, float *egl, float gi, float gl, int n) {
	const int tid = threadIdx.x;
	if (tid < GDN_CH) {
		el[tid] = tid < n ? (float)exp((double)(gl - gi)) : 0.0f;
		if (tid == 0) *egl = (float)exp((double)gl);
	}
}

template <typename ST, int P, int CT>
__device__ __forceinline__ void gdn_chunk_state_wide(float *smem, GDN_STATE_ARGS(ST)) {
	using Wd = gdn_wide<CT>;
	constexpr int SS = Wd::SS, NW = Wd::NW, NU = Wd::NU;
	float *ring = smem, *sS = ring + 2 * GDN_WSTAGE, *sV = sS + GDN_DK_MAX * SS, *sEl = sV + GDN_CH * SS, *sEgl = sEl + 2 * GDN_CH;
	const int x = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * CT;
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	const int kHead = h / (nv / nk), qk = nk * dk;
	ST *S = rec + (((long long)layer * slots + seqSlot[x]) * nv + h) * (long long)dk * dv;
	const int c0 = seqChunk0[x], nChunks = seqChunks[x];
	const int i0 = 16 * (warp / 2) + g, i1 = i0 + 8, cw = (warp % 2) * (CT / 2); // W S
	const int d0 = 16 * warp + g, d1 = d0 + 8;                                   // update
	if (nChunks > 0) gdn_wide_issue(ring, chunkRow[c0], chunkLen[c0], W, kh, h, kHead, nv, dk, qk);

	// The state as the update's C fragments, its rounded copy in sS.
	float s[NU][4];
#pragma unroll
	for (int j = 0; j < NU; j++) {
		const int c = 8 * j + 2 * t, col = cBase + c;
		const bool ok = col < dv;
		s[j][0] = ok && d0 < dk ? gdn_sld(S, (long long)d0 * dv + col) : 0.0f;
		s[j][1] = ok && d0 < dk ? gdn_sld(S, (long long)d0 * dv + col + 1) : 0.0f;
		s[j][2] = ok && d1 < dk ? gdn_sld(S, (long long)d1 * dv + col) : 0.0f;
		s[j][3] = ok && d1 < dk ? gdn_sld(S, (long long)d1 * dv + col + 1) : 0.0f;
		*(float2 *)&sS[d0 * SS + c] = make_float2(gdn_round<P>(s[j][0]), gdn_round<P>(s[j][1]));
		*(float2 *)&sS[d1 * SS + c] = make_float2(gdn_round<P>(s[j][2]), gdn_round<P>(s[j][3]));
	}
	float2 u[NW][2];
	if (nChunks > 0) {
		const int row0 = chunkRow[c0], n = chunkLen[c0];
		gdn_wide_u<NW>(u, U, row0, n, i0, h, nv, dv, cBase + cw + 2 * t);
		float gi = 0.0f, gl = 0.0f;
		if (tid < GDN_CH) {
			gi = tid < n ? G[(long long)(row0 + tid) * nv + h] : 0.0f;
			gl = G[(long long)(row0 + n - 1) * nv + h];
		}
		gdn_wide_decay(sEl, sEgl, gi, gl, n);
	}

	for (int ci = 0; ci < nChunks; ci++) {
		const int cidx = c0 + ci, row0 = chunkRow[cidx], n = chunkLen[cidx], par = ci & 1;
		const float *sW = ring + par * GDN_WSTAGE, *sK = sW + GDN_CH * GDN_DK_MAX;
		cp_async_wait<0>();
		__syncthreads(); // B1
		const bool more = ci + 1 < nChunks;
		int row1 = 0, n1 = 0;
		float gi1 = 0.0f, gl1 = 0.0f;
		if (more) {
			row1 = chunkRow[cidx + 1];
			n1 = chunkLen[cidx + 1];
			gdn_wide_issue(ring + (par ^ 1) * GDN_WSTAGE, row1, n1, W, kh, h, kHead, nv, dk, qk);
			if (tid < GDN_CH) {
				gi1 = tid < n1 ? G[(long long)(row1 + tid) * nv + h] : 0.0f;
				gl1 = G[(long long)(row1 + n1 - 1) * nv + h];
			}
		}
		// H: the state at the chunk's start, for the output kernel.
		float *Hc = H + ((long long)cidx * nv + h) * (long long)dk * dv + cBase;
#pragma unroll
		for (int j = 0; j < NU; j++) {
			const int c = 8 * j + 2 * t;
			if (cBase + c < dv) {
				if (d0 < dk) *(float2 *)&Hc[(long long)d0 * dv + c] = make_float2(s[j][0], s[j][1]);
				if (d1 < dk) *(float2 *)&Hc[(long long)d1 * dv + c] = make_float2(s[j][2], s[j][3]);
			}
		}

		// W S over the key dims in order.
		float acc[NW][4];
#pragma unroll
		for (int j = 0; j < NW; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 4
		for (int ks = 0; ks < GDN_DK_MAX / 8; ks++) {
			const int s0 = 4 * ((2 * ks) ^ g) + t, s1 = 4 * ((2 * ks + 1) ^ g) + t;
			const float aw[4] = {sW[i0 * GDN_DK_MAX + s0], sW[i1 * GDN_DK_MAX + s0], sW[i0 * GDN_DK_MAX + s1], sW[i1 * GDN_DK_MAX + s1]};
			unsigned ah[4], al[4];
#pragma unroll
			for (int q = 0; q < 4; q++) gdn_bfrag<P>(aw[q], ah[q], al[q]);
			const int d = 8 * ks + t;
#pragma unroll
			for (int j = 0; j < NW; j++) {
				const int col = cw + 8 * j + g;
				unsigned bh[2], bl[2];
				gdn_bload<P>(sS[d * SS + col], bh[0], bl[0]);
				gdn_bload<P>(sS[(d + 4) * SS + col], bh[1], bl[1]);
				gdn_mmaps<P>(acc[j], ah, al, bh, bl);
			}
		}
		// Vn = U - W S (zero past the chunk's rows and dv): to U, and times
		// the decay to sV.
		const float el0 = sEl[par * GDN_CH + i0], el1 = sEl[par * GDN_CH + i1];
#pragma unroll
		for (int j = 0; j < NW; j++) {
			const int c = cw + 8 * j + 2 * t;
			const bool cok = cBase + c < dv, ok0 = i0 < n && cok, ok1 = i1 < n && cok;
			const float2 v0 = ok0 ? make_float2(u[j][0].x - acc[j][0], u[j][0].y - acc[j][1]) : make_float2(0.0f, 0.0f);
			const float2 v1 = ok1 ? make_float2(u[j][1].x - acc[j][2], u[j][1].y - acc[j][3]) : make_float2(0.0f, 0.0f);
			float *Ub = U + (long long)h * dv + cBase + c;
			if (ok0) *(float2 *)&Ub[(long long)(row0 + i0) * nv * dv] = v0;
			if (ok1) *(float2 *)&Ub[(long long)(row0 + i1) * nv * dv] = v1;
			*(float2 *)&sV[i0 * SS + c] = make_float2(gdn_round<P>(el0 * v0.x), gdn_round<P>(el0 * v0.y));
			*(float2 *)&sV[i1 * SS + c] = make_float2(gdn_round<P>(el1 * v1.x), gdn_round<P>(el1 * v1.y));
		}
		if (more) gdn_wide_u<NW>(u, U, row1, n1, i0, h, nv, dv, cBase + cw + 2 * t);
		__syncthreads(); // B2

		// The update over the chunk's rows in order.
		float accS[NU][4];
#pragma unroll
		for (int j = 0; j < NU; j++) accS[j][0] = accS[j][1] = accS[j][2] = accS[j][3] = 0.0f;
#pragma unroll 2
		for (int ks = 0; ks < GDN_CH / 8; ks++) {
			const int r0 = 8 * ks + t, r1 = r0 + 4;
			const int da = (d0 / 4) ^ (2 * t), db = (d1 / 4) ^ (2 * t), dl = g & 3;
			const float ak[4] = {sK[r0 * GDN_DK_MAX + 4 * da + dl], sK[r0 * GDN_DK_MAX + 4 * db + dl], sK[r1 * GDN_DK_MAX + 4 * da + dl],
					     sK[r1 * GDN_DK_MAX + 4 * db + dl]};
			unsigned ah[4], al[4];
#pragma unroll
			for (int q = 0; q < 4; q++) gdn_bfrag<P>(ak[q], ah[q], al[q]);
#pragma unroll
			for (int j = 0; j < NU; j++) {
				unsigned bh[2], bl[2];
				gdn_bload<P>(sV[r0 * SS + 8 * j + g], bh[0], bl[0]);
				gdn_bload<P>(sV[r1 * SS + 8 * j + g], bh[1], bl[1]);
				gdn_mmaps<P>(accS[j], ah, al, bh, bl);
			}
		}
		const float egl = sEgl[par];
#pragma unroll
		for (int j = 0; j < NU; j++) {
			const int c = 8 * j + 2 * t;
			s[j][0] = egl * s[j][0] + accS[j][0];
			s[j][1] = egl * s[j][1] + accS[j][1];
			s[j][2] = egl * s[j][2] + accS[j][2];
			s[j][3] = egl * s[j][3] + accS[j][3];
			*(float2 *)&sS[d0 * SS + c] = make_float2(gdn_round<P>(s[j][0]), gdn_round<P>(s[j][1]));
			*(float2 *)&sS[d1 * SS + c] = make_float2(gdn_round<P>(s[j][2]), gdn_round<P>(s[j][3]));
		}
		if (more) gdn_wide_decay(sEl + (par ^ 1) * GDN_CH, sEgl + (par ^ 1), gi1, gl1, n1);
	}
	cp_async_wait<0>();
#pragma unroll
	for (int j = 0; j < NU; j++) {
		const long long col = cBase + 8 * j + 2 * t;
		if (col >= dv) continue;
		if (d0 < dk) {
			gdn_sst(S, d0 * dv + col, s[j][0]);
			gdn_sst(S, d0 * dv + col + 1, s[j][1]);
		}
		if (d1 < dk) {
			gdn_sst(S, d1 * dv + col, s[j][2]);
			gdn_sst(S, d1 * dv + col + 1, s[j][3]);
		}
	}
}

#define GDN_WIDE_ENTRY(CT, PREC, SUF, ST, P) \
	extern "C" __global__ void __launch_bounds__(GDN_THREADS, 1) gdn_chunk_state_w##CT##_##PREC##_f32##SUF(GDN_STATE_ARGS(ST)) { \
		PDL_LAUNCH(); \
		PDL_WAIT(); \
		extern __shared__ __align__(16) float gdn_wsm[]; \
		gdn_chunk_state_wide<ST, P, CT>(gdn_wsm, GDN_STATE_PASS); \
	}

GDN_WIDE_ENTRY(64, mma, , float, 3)
GDN_WIDE_ENTRY(64, mma, _sbf16, unsigned short, 3)
GDN_WIDE_ENTRY(64, tf32, , float, 1)
GDN_WIDE_ENTRY(64, tf32, _sbf16, unsigned short, 1)
GDN_WIDE_ENTRY(32, mma, , float, 3)
GDN_WIDE_ENTRY(32, mma, _sbf16, unsigned short, 3)
GDN_WIDE_ENTRY(32, tf32, , float, 1)
GDN_WIDE_ENTRY(32, tf32, _sbf16, unsigned short, 1)

// gdn_chunk_out_mma_f32: block (chunk c, v head h, column tile z of GDN_OC
// columns), 256 threads. Copies the chunk's Q [64][dk], H_c [dk][GDN_OC], P
// [64][64] and Vn [64][GDN_OC] (zero past the chunk's rows, dk and dv) into
// padded shared arrays (strides chosen so that every fragment load hits 32
// banks) and computes O = e^gamma (Q H_c) + P Vn. Warp w owns rows 16 (w /
// 2) .. and columns 32 (w % 2) .. (four 8-column C tiles). The dynamic
// shared memory is GDN_OUT_SMEM floats (gdn_chunk.go opts the entry in).
#define GDN_OC 64
#define GDN_OQ (GDN_DK_MAX + 4) // row stride of Q
#define GDN_OH (GDN_OC + 8)     // row stride of H_c and Vn
#define GDN_OP (GDN_CH + 4)     // row stride of P
#define GDN_OUT_SMEM (GDN_CH * GDN_OQ + GDN_DK_MAX * GDN_OH + GDN_CH * GDN_OP + GDN_CH * GDN_OH)

#define GDN_OUT_ARGS float *out, const float *H, const float *Vn, const float *G, const float *P, const float *qh, \
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv

// gdn_chunk_out in precision PR (gdn_mmap's P: 3xTF32 or TF32).
template <int PR>
__device__ __forceinline__ void gdn_chunk_out(float *gdn_osm, GDN_OUT_ARGS) {
	float *sQ = gdn_osm, *sH = sQ + GDN_CH * GDN_OQ, *sP = sH + GDN_DK_MAX * GDN_OH, *sVn = sP + GDN_CH * GDN_OP;
	const int c = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * GDN_OC;
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
	const int kHead = h / (nv / nk), qk = nk * dk;
	const int row0 = chunkRow[c], n = chunkLen[c];
	// Q and H_c first (one group), then P and Vn, read after the Q products.
	for (int e = tid; e < GDN_CH * (GDN_DK_MAX / 4); e += GDN_THREADS) {
		int i = e / (GDN_DK_MAX / 4), d = 4 * (e % (GDN_DK_MAX / 4));
		bool ok = i < n && d < dk;
		cp_async16(sQ + i * GDN_OQ + d, qh + (long long)(row0 + (ok ? i : 0)) * qk + (long long)kHead * dk + (ok ? d : 0), ok);
	}
	const float *Hc = H + ((long long)c * nv + h) * (long long)dk * dv;
	for (int e = tid; e < GDN_DK_MAX * (GDN_OC / 4); e += GDN_THREADS) {
		int d = e / (GDN_OC / 4), cl = 4 * (e % (GDN_OC / 4));
		bool ok = d < dk && cBase + cl < dv;
		cp_async16(sH + d * GDN_OH + cl, Hc + (ok ? (long long)d * dv + cBase + cl : 0), ok);
	}
	cp_async_commit();
	const float *Pc = P + ((long long)c * nv + h) * GDN_CH * GDN_CH;
	for (int e = tid; e < GDN_CH * (GDN_CH / 4); e += GDN_THREADS) {
		int i = e / (GDN_CH / 4), j = 4 * (e % (GDN_CH / 4));
		cp_async16(sP + i * GDN_OP + j, Pc + i * GDN_CH + j, true);
	}
	for (int e = tid; e < GDN_CH * (GDN_OC / 4); e += GDN_THREADS) {
		int j = e / (GDN_OC / 4), cl = 4 * (e % (GDN_OC / 4));
		bool ok = j < n && cBase + cl < dv;
		cp_async16(sVn + j * GDN_OH + cl, Vn + (ok ? ((long long)(row0 + j) * nv + h) * dv + cBase + cl : 0), ok);
	}
	cp_async_commit();
	const int m0 = 16 * (warp / 2), nb = 32 * (warp % 2);
	const int i0 = m0 + g, i1 = i0 + 8;
	float acc[4][4] = {};
	cp_async_wait<1>();
	__syncthreads();
	for (int ks = 0; ks < (dk + 7) / 8; ks++) {
		const int k = 8 * ks + t;
		const float aq[4] = {sQ[i0 * GDN_OQ + k], sQ[i1 * GDN_OQ + k], sQ[i0 * GDN_OQ + k + 4], sQ[i1 * GDN_OQ + k + 4]};
		unsigned ah[4], al[4];
#pragma unroll
		for (int z = 0; z < 4; z++) gdn_bfrag<PR>(aq[z], ah[z], al[z]);
#pragma unroll
		for (int q = 0; q < 4; q++) {
			unsigned bh[2], bl[2];
			gdn_bfrag<PR>(sH[k * GDN_OH + nb + 8 * q + g], bh[0], bl[0]);
			gdn_bfrag<PR>(sH[(k + 4) * GDN_OH + nb + 8 * q + g], bh[1], bl[1]);
			gdn_mmaps<PR>(acc[q], ah, al, bh, bl);
		}
	}
	const float eg0 = i0 < n ? (float)exp((double)G[(long long)(row0 + i0) * nv + h]) : 0.0f;
	const float eg1 = i1 < n ? (float)exp((double)G[(long long)(row0 + i1) * nv + h]) : 0.0f;
#pragma unroll
	for (int q = 0; q < 4; q++) {
		acc[q][0] *= eg0;
		acc[q][1] *= eg0;
		acc[q][2] *= eg1;
		acc[q][3] *= eg1;
	}
	cp_async_wait<0>();
	__syncthreads();
#pragma unroll 2
	for (int ks = 0; ks < GDN_CH / 8; ks++) {
		const int j = 8 * ks + t;
		const float ap[4] = {sP[i0 * GDN_OP + j], sP[i1 * GDN_OP + j], sP[i0 * GDN_OP + j + 4], sP[i1 * GDN_OP + j + 4]};
		unsigned ah[4], al[4];
#pragma unroll
		for (int z = 0; z < 4; z++) gdn_bfrag<PR>(ap[z], ah[z], al[z]);
#pragma unroll
		for (int q = 0; q < 4; q++) {
			unsigned bh[2], bl[2];
			gdn_bfrag<PR>(sVn[j * GDN_OH + nb + 8 * q + g], bh[0], bl[0]);
			gdn_bfrag<PR>(sVn[(j + 4) * GDN_OH + nb + 8 * q + g], bh[1], bl[1]);
			gdn_mmaps<PR>(acc[q], ah, al, bh, bl);
		}
	}
#pragma unroll
	for (int q = 0; q < 4; q++) {
		const int col = cBase + nb + 8 * q + 2 * t; // even, dv % 4 == 0: both columns or none
		if (col >= dv) continue;
		float *ob = out + (long long)h * dv + col;
		if (i0 < n) *(float2 *)&ob[(long long)(row0 + i0) * nv * dv] = make_float2(acc[q][0], acc[q][1]);
		if (i1 < n) *(float2 *)&ob[(long long)(row0 + i1) * nv * dv] = make_float2(acc[q][2], acc[q][3]);
	}
}

// gdn_chunk_out_<prec>_f32: the outputs in 3xTF32 (mma, the exact mode's)
// or one TF32 mma a product (tf32, the default with bf16 weights,
// Backend.gdnChunk).
#define GDN_OUT_ENTRY(PREC, PR) \
	extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_out_##PREC##_f32(GDN_OUT_ARGS) { \
		PDL_LAUNCH(); \
		PDL_WAIT(); \
		extern __shared__ __align__(16) float gdn_osm[]; \
		gdn_chunk_out<PR>(gdn_osm, out, H, Vn, G, P, qh, chunkRow, chunkLen, nk, nv, dk, dv); \
	}

GDN_OUT_ENTRY(mma, 3)
GDN_OUT_ENTRY(tf32, 1)
