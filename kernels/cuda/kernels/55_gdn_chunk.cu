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
//                       the state tile in shared memory: Vn, the outputs
//                       and the state update.
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
#define GDN_SDQ 64    // key dims staged in shared memory at a time (scan)
#define GDN_CT 16     // state columns per block of gdn_chunk_scan_f32
#define GDN_THREADS 256 // threads per block of both kernels (the tilings assume it)
#define GDN_STRIDE_T (GDN_CH + 4) // row stride of transposed [d][i] tiles (16-byte rows, few bank conflicts)

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

// gdn_chunk_scan_f32: block (chunked sequence x, v head h, column tile z),
// 256 threads, owns state columns z*GDN_CT .. z*GDN_CT + GDN_CT - 1 of the
// head (the columns of S evolve independently given W, U, Q, K and gamma)
// and walks the sequence's chunks in order with that [dk, GDN_CT] tile in
// shared memory. Per chunk:
//   1. Vn = U - W S and QS = Q S: thread (i, 4 columns) = (tid/4, 4*(tid%4)),
//      key dims staged GDN_SDQ at a time as W^T, Q^T [d][i];
//   2. O_i = e^gamma_i QS_i + sum_j P_ij Vn_j (P staged in shared memory);
//   3. S <- e^gamma_last S + sum_i (e^(gamma_last - gamma_i) k_i) Vn_i^T:
//      thread (d, 4 columns) = (tid/4, 4*(tid%4)) per slice of GDN_SDQ key dims.
// Reads the state from and writes it back to rec [layer][slot][nv][dk][dv].
extern "C" __global__ void __launch_bounds__(GDN_THREADS) gdn_chunk_scan_f32(float *out, float *rec,
		const float *W, const float *U, const float *G, const float *P, const float *qh, const float *kh,
		const int *chunkRow, const int *chunkLen, const int *seqChunk0, const int *seqChunks, const int *seqSlot,
		int nk, int nv, int dk, int dv, int slots, int layer) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ __align__(16) float sS[GDN_DK_MAX * GDN_CT];
	__shared__ __align__(16) float sV[GDN_CH * GDN_CT];
	// Union: W^T and Q^T slices (2 x GDN_SDQ x GDN_STRIDE_T), P (GDN_CH x
	// (GDN_CH + 1)), or a decayed K slice (GDN_CH x (GDN_SDQ + 1)).
	__shared__ __align__(16) float sBuf[2 * GDN_SDQ * GDN_STRIDE_T];
	__shared__ float sEg[GDN_CH], sEl[GDN_CH];
	__shared__ float sEgl;
	const int x = blockIdx.x, h = blockIdx.y, cBase = blockIdx.z * GDN_CT;
	const int tid = threadIdx.x;
	const int kHead = h / (nv / nk), qk = nk * dk;
	float *S = rec + (((long long)layer * slots + seqSlot[x]) * nv + h) * (long long)dk * dv;
	for (int e = tid; e < dk * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, c = cBase + e % GDN_CT;
		sS[e] = c < dv ? S[(long long)d * dv + c] : 0.0f;
	}
	float *sWT = sBuf, *sQT = sBuf + GDN_SDQ * GDN_STRIDE_T;
	float *sP = sBuf; // [GDN_CH][GDN_CH + 1]
	float *sK = sBuf; // [GDN_CH][GDN_SDQ + 1]
	// Step 1 and 2 ownership.
	const int mi = tid / 4, mc = 4 * (tid % 4);
	// Step 3 ownership.
	const int ud = tid / 4, uc = 4 * (tid % 4);
	const int c0 = seqChunk0[x], nChunks = seqChunks[x];
	for (int ci = 0; ci < nChunks; ci++) {
		const int cidx = c0 + ci;
		const int row0 = chunkRow[cidx], n = chunkLen[cidx];
		__syncthreads(); // the previous chunk is done with every shared buffer
		if (tid < GDN_CH) {
			float gl = G[(long long)(row0 + n - 1) * nv + h];
			bool live = tid < n;
			float gi = live ? G[(long long)(row0 + tid) * nv + h] : 0.0f;
			sEg[tid] = live ? (float)exp((double)gi) : 0.0f;
			sEl[tid] = live ? (float)exp((double)(gl - gi)) : 0.0f;
			if (tid == 0) sEgl = (float)exp((double)gl);
		}

		// 1. W S and Q S.
		float accW[4] = {0.0f, 0.0f, 0.0f, 0.0f}, accQ[4] = {0.0f, 0.0f, 0.0f, 0.0f};
		for (int d0 = 0; d0 < dk; d0 += GDN_SDQ) {
			__syncthreads();
#pragma unroll
			for (int e = tid; e < GDN_CH * GDN_SDQ; e += GDN_THREADS) {
				int i = e / GDN_SDQ, dl = e % GDN_SDQ, d = d0 + dl;
				bool ok = i < n && d < dk;
				long long row = row0 + i;
				sWT[dl * GDN_STRIDE_T + i] = ok ? W[(row * nv + h) * dk + d] : 0.0f;
				sQT[dl * GDN_STRIDE_T + i] = ok ? qh[row * qk + (long long)kHead * dk + d] : 0.0f;
			}
			__syncthreads();
			{
				int dn = min(GDN_SDQ, dk - d0);
				for (int dl = 0; dl < dn; dl++) {
					float w = sWT[dl * GDN_STRIDE_T + mi], q = sQT[dl * GDN_STRIDE_T + mi];
					float4 s4 = *(const float4 *)&sS[(d0 + dl) * GDN_CT + mc];
					accW[0] += w * s4.x; accW[1] += w * s4.y; accW[2] += w * s4.z; accW[3] += w * s4.w;
					accQ[0] += q * s4.x; accQ[1] += q * s4.y; accQ[2] += q * s4.z; accQ[3] += q * s4.w;
				}
			}
		}
		__syncthreads(); // W^T and Q^T consumed: sBuf becomes P
		{
#pragma unroll
			for (int s = 0; s < 4; s++) {
				int c = cBase + mc + s;
				float u = (mi < n && c < dv) ? U[((long long)(row0 + mi) * nv + h) * dv + c] : 0.0f;
				sV[mi * GDN_CT + mc + s] = (mi < n && c < dv) ? u - accW[s] : 0.0f;
			}
		}
		const float *Pc = P + ((long long)cidx * nv + h) * GDN_CH * GDN_CH;
#pragma unroll
		for (int e = tid; e < GDN_CH * GDN_CH; e += GDN_THREADS) {
			int i = e / GDN_CH, j = e % GDN_CH;
			sP[i * (GDN_CH + 1) + j] = Pc[e];
		}
		__syncthreads();

		// 2. Outputs.
		if (mi < n) {
			float eg = sEg[mi];
			float o[4] = {eg * accQ[0], eg * accQ[1], eg * accQ[2], eg * accQ[3]};
			for (int j = 0; j < n; j++) {
				float pij = sP[mi * (GDN_CH + 1) + j];
				float4 v4 = *(const float4 *)&sV[j * GDN_CT + mc];
				o[0] += pij * v4.x; o[1] += pij * v4.y; o[2] += pij * v4.z; o[3] += pij * v4.w;
			}
			float *orow = out + (long long)(row0 + mi) * nv * dv + (long long)h * dv;
#pragma unroll
			for (int s = 0; s < 4; s++) {
				int c = cBase + mc + s;
				if (c < dv) orow[c] = o[s];
			}
		}

		// 3. State update, GDN_SDQ key dims at a time.
		const float egl = sEgl;
		for (int d0 = 0; d0 < dk; d0 += GDN_SDQ) {
			__syncthreads(); // sBuf (P or the previous K slice) consumed
#pragma unroll
			for (int e = tid; e < GDN_CH * GDN_SDQ; e += GDN_THREADS) {
				int i = e / GDN_SDQ, dl = e % GDN_SDQ, d = d0 + dl;
				bool ok = i < n && d < dk;
				sK[i * (GDN_SDQ + 1) + dl] = ok ? sEl[i] * kh[(long long)(row0 + i) * qk + (long long)kHead * dk + d] : 0.0f;
			}
			__syncthreads();
			int d = d0 + ud;
			if (d < dk) {
				float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
				for (int i = 0; i < n; i++) {
					float kd = sK[i * (GDN_SDQ + 1) + ud];
					float4 v4 = *(const float4 *)&sV[i * GDN_CT + uc];
					acc[0] += kd * v4.x; acc[1] += kd * v4.y; acc[2] += kd * v4.z; acc[3] += kd * v4.w;
				}
				float4 *sp = (float4 *)&sS[d * GDN_CT + uc];
				float4 s4 = *sp;
				*sp = make_float4(egl * s4.x + acc[0], egl * s4.y + acc[1], egl * s4.z + acc[2], egl * s4.w + acc[3]);
			}
		}
	}
	__syncthreads();
	for (int e = tid; e < dk * GDN_CT; e += GDN_THREADS) {
		int d = e / GDN_CT, c = cBase + e % GDN_CT;
		if (c < dv) S[(long long)d * dv + c] = sS[e];
	}
}
