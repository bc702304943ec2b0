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
// Two kernels, both float32 on CUDA cores:
//   gdn_chunk_prep_f32  every (chunk, v head) in parallel: gamma, A, the
//                       forward substitution for W and U, and the masked
//                       decayed Q K^T of the chunk (P), into scratch;
//   gdn_chunk_scan_f32  every (sequence, v head, 16 state columns): the
//                       sequential pass over the sequence's chunks, with
//                       the state tile in shared memory and the chunks'
//                       W, Q, P and K streamed through a double-buffered
//                       cp.async pipeline: Vn, the outputs and the state
//                       update.
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
// Two entries share the body: gdn_chunk_prep_f32 (240 registers, one block
// an SM) and gdn_chunk_prep2_f32 (two blocks an SM, 128 registers and some
// of the substitution's column spilled to local memory).
__device__ __forceinline__ void gdn_chunk_prep(float *W, float *U, float *G, float *P,
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
		{
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

extern "C" __global__ void __launch_bounds__(GDN_THREADS) gdn_chunk_prep_f32(float *W, float *U, float *G, float *P,
		const float *qh, const float *kh, const float *mixed, const float *g, const float *beta,
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim) {
	gdn_chunk_prep(W, U, G, P, qh, kh, mixed, g, beta, chunkRow, chunkLen, nk, nv, dk, dv, convDim);
}

extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_prep2_f32(float *W, float *U, float *G, float *P,
		const float *qh, const float *kh, const float *mixed, const float *g, const float *beta,
		const int *chunkRow, const int *chunkLen, int nk, int nv, int dk, int dv, int convDim) {
	gdn_chunk_prep(W, U, G, P, qh, kh, mixed, g, beta, chunkRow, chunkLen, nk, nv, dk, dv, convDim);
}

// cp.async helpers of the scan (sm_80 and later). gdn_cp16 copies 16 bytes
// (both addresses 16-byte aligned) and gdn_cp4 4 bytes from global src to
// shared dst, or zero-fill dst when !ok; src is then not read but must still
// be a valid address. The copies of one thread form groups (gdn_cp_commit);
// gdn_cp_wait1 waits until at most the newest group is still in flight,
// after which the thread (and, after a barrier, the block) sees the rest.
__device__ __forceinline__ void gdn_cp16(float *dst, const float *src, bool ok) {
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}

__device__ __forceinline__ void gdn_cp4(float *dst, const float *src, bool ok) {
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0) : "memory");
}

__device__ __forceinline__ void gdn_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ void gdn_cp_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

__device__ __forceinline__ void gdn_cp_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

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

// gdn_scan_issue starts this thread's copies of tile tk of chunk cidx
// (batch rows row0 .. row0 + n - 1) into buf, and with tile 0 the chunk's
// gamma into sGam. Thread tid copies float4 e = tid + GDN_THREADS m of the
// tile (gdn_scan_scale_k relies on that).
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
			gdn_cp16(dst, W + (row * nv + h) * dk + dd, ok);
			gdn_cp16(dst + GDN_CH * GDN_SQ, qh + row * qk + (long long)kHead * dk + dd, ok);
		}
	} else if (tk == nq) {
		const float *Pc = P + ((long long)cidx * nv + h) * GDN_CH * GDN_CH;
#pragma unroll
		for (int m = 0; m < GDN_TILE / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, i = e / (GDN_CH / 4), c4 = e % (GDN_CH / 4);
			gdn_cp16(buf + i * GDN_CH + 4 * (c4 ^ (i & 7)), Pc + 4 * e, true);
		}
	} else {
		const int i0 = (tk - nq - 1) * GDN_KR;
#pragma unroll
		for (int m = 0; m < GDN_TILE / 4 / GDN_THREADS; m++) {
			int e = tid + m * GDN_THREADS, r = e / (GDN_DK_MAX / 4), d = 4 * (e % (GDN_DK_MAX / 4));
			bool ok = i0 + r < n && d < dk;
			long long row = row0 + (ok ? i0 + r : 0);
			gdn_cp16(buf + 4 * e, kh + row * qk + (long long)kHead * dk + (ok ? d : 0), ok);
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
// copies; kernels/cuda/gdn_chunk.go checks).
extern "C" __global__ void __launch_bounds__(GDN_THREADS, 2) gdn_chunk_scan_f32(float *out, float *rec,
		const float *W, const float *U, const float *G, const float *P, const float *qh, const float *kh,
		const int *chunkRow, const int *chunkLen, const int *seqChunk0, const int *seqChunks, const int *seqSlot,
		int nk, int nv, int dk, int dv, int slots, int layer) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ __align__(16) float sS[GDN_DK_MAX * GDN_CT];
	__shared__ __align__(16) float sV[GDN_CH * GDN_CT];
	__shared__ __align__(16) float sT[2][GDN_TILE];
	__shared__ float sGam[GDN_CH], sEg[GDN_CH], sEl[GDN_CH];
	__shared__ float sEgl;
	const int x = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * GDN_CT;
	const int tid = threadIdx.x;
	const int kHead = h / (nv / nk), qk = nk * dk;
	float *S = rec + (((long long)layer * slots + seqSlot[x]) * nv + h) * (long long)dk * dv;
	for (int e = tid; e < GDN_DK_MAX * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, c = cBase + e % GDN_CT;
		sS[e] = d < dk && c < dv ? S[(long long)d * dv + c] : 0.0f;
	}
	const int mi = tid / 4, mc = 4 * (tid % 4);       // W S, Q S and outputs
	const int kd = 4 * (tid / 8), kc = 2 * (tid % 8); // state update
	const bool colOK = cBase + mc < dv;               // dv % 4 == 0: all 4 or none
	const int c0 = seqChunk0[x], nChunks = seqChunks[x];
	const int nq = (dk + GDN_SQ - 1) / GDN_SQ, nt = nq + 1 + GDN_CH / GDN_KR, total = nChunks * nt;
	float accW[4] = {}, accQ[4] = {}, accS[4][2] = {};
	float4 u4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	gdn_scan_issue(sT[0], sGam, 0, nq, c0, chunkRow[c0], chunkLen[c0], W, G, P, qh, kh, h, kHead, nv, dk, qk);
	gdn_cp_commit();
	for (int t = 0; t < total; t++) {
		const int ci = t / nt, tk = t - ci * nt, cidx = c0 + ci;
		const int row0 = chunkRow[cidx], n = chunkLen[cidx];
		if (t + 1 < total) {
			const int ci1 = (t + 1) / nt, tk1 = t + 1 - ci1 * nt, cidx1 = c0 + ci1;
			gdn_scan_issue(sT[(t + 1) & 1], sGam, tk1, nq, cidx1, chunkRow[cidx1], chunkLen[cidx1],
				W, G, P, qh, kh, h, kHead, nv, dk, qk);
		}
		gdn_cp_commit(); // possibly empty: one group per iteration
		gdn_cp_wait1();  // tile t (and with tile 0 sGam) has landed
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
	gdn_cp_wait0();
	for (int e = tid; e < dk * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, c = cBase + e % GDN_CT;
		if (c < dv) S[(long long)d * dv + c] = sS[e];
	}
}
