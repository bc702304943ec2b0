// Gated DeltaNet kernels. Per-sequence metadata: seqStart, seqLen, seqSlot.
// State layouts (as in the CPU oracle): conv [layer][slot][K-1][convDim],
// recurrent [layer][slot][vHeads][dk][dv].

#define CONV_MAX_K 8

// The recurrent state is stored as float (the default) or as bf16 bits
// (unsigned short, COHORT_CUDA_GDN_STATE=bf16: the entries named *_sbf16,
// the same templates instantiated over the storage type ST). Every kernel
// computes in float either way: gdn_sld widens an element of S to float,
// gdn_sst rounds a float back into it (bf16: to nearest even, as
// f32_to_bf16_bits), and the _cs forms stream (__ldcs, __stcs). The conv
// state stays float.
__device__ __forceinline__ float gdn_sld(const float *S, long long i) { return S[i]; }
__device__ __forceinline__ float gdn_sld(const unsigned short *S, long long i) { return __uint_as_float((unsigned)S[i] << 16); }
__device__ __forceinline__ void gdn_sst(float *S, long long i, float v) { S[i] = v; }
__device__ __forceinline__ void gdn_sst(unsigned short *S, long long i, float v) { S[i] = f32_to_bf16_bits(v); }
__device__ __forceinline__ float gdn_sld_cs(const float *p) { return __ldcs(p); }
__device__ __forceinline__ float gdn_sld_cs(const unsigned short *p) { return __uint_as_float((unsigned)__ldcs(p) << 16); }
__device__ __forceinline__ void gdn_sst_cs(float *p, float v) { __stcs(p, v); }
__device__ __forceinline__ void gdn_sst_cs(unsigned short *p, float v) { __stcs(p, f32_to_bf16_bits(v)); }

// conv_in returns raw input p of a sequence (p < 0: the conv state's
// entry hist + p, the inputs before this step).
__device__ __forceinline__ float conv_in(const float *x, const float *st, int start, int hist, int C, int c, int p) {
	return p >= 0 ? x[(long long)(start + p) * C + c] : st[(long long)(hist + p) * C + c];
}

// conv1d_rows writes the conv plus SiLU of the tokens threadIdx.y,
// threadIdx.y + blockDim.y, … of channel c, the terms in the order of the
// recurrent form (oldest tap first, the new input last). KC is K when known
// at compile time (the taps stay in registers), else 0.
template <int KC>
__device__ __forceinline__ void conv1d_rows(float *y, const float *x, const float *w, const float *st, int start, int len, int C, int c, int k) {
	const int K = KC > 0 ? KC : k, hist = K - 1;
	float wk[KC > 0 ? KC : CONV_MAX_K];
#pragma unroll
	for (int j = 0; j < K; j++) wk[j] = w[(long long)c * K + j];
	for (int t = threadIdx.y; t < len; t += blockDim.y) {
		float acc = 0.0f;
#pragma unroll
		for (int j = 0; j < hist; j++) acc += wk[j] * conv_in(x, st, start, hist, C, c, t - hist + j);
		acc += wk[hist] * x[(long long)(start + t) * C + c];
		y[(long long)(start + t) * C + c] = silu_ref(acc);
	}
}

// conv1d_f32: block (blockDim.x channels, blockDim.y token lanes) runs the
// depthwise causal conv plus SiLU over one sequence's rows, every token on
// its own (the taps before the step come from the conv state), then leaves
// the last K-1 raw inputs in the state once every lane has read it. Grid
// (ceil(C/blockDim.x), seqs); K ≤ CONV_MAX_K.
extern "C" __global__ void conv1d_f32(float *y, const float *x, const float *w, float *convState,
		const int *seqStart, const int *seqLen, const int *seqSlot, int C, int K, int slots, int layer) {
	PDL_LAUNCH();
	PDL_WAIT();
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	int s = blockIdx.y, hist = K - 1;
	float *st = convState + ((long long)layer * slots + seqSlot[s]) * hist * C;
	int start = seqStart[s], len = seqLen[s];
	if (c < C) {
		switch (K) {
		case 2: conv1d_rows<2>(y, x, w, st, start, len, C, c, K); break;
		case 3: conv1d_rows<3>(y, x, w, st, start, len, C, c, K); break;
		case 4: conv1d_rows<4>(y, x, w, st, start, len, C, c, K); break;
		default: conv1d_rows<0>(y, x, w, st, start, len, C, c, K);
		}
	}
	__syncthreads();
	if (c >= C || threadIdx.y != 0 || len == 0) return;
	// Ascending j reads state entries (j + len) before they are written.
	for (int j = 0; j < hist; j++) st[(long long)j * C + c] = conv_in(x, st, start, hist, C, c, len - hist + j);
}

// CONV_TILE is the tokens a thread of conv1d_tile8_f32 runs (at least
// CONV_MAX_K - 1, so that only a sequence's first tile reads the conv state).
#define CONV_TILE 8

// conv4_taps loads the K taps of channels c .. c+3 (w [C, K]) as
// wk[e*K + j]: channel e's tap j.
template <int K>
__device__ __forceinline__ void conv4_taps(float (&wk)[4 * K], const float *w, int c) {
#pragma unroll
	for (int i = 0; i < K; i++) {
		float4 v = __ldg((const float4 *)(w + (long long)c * K) + i);
		wk[4 * i] = v.x, wk[4 * i + 1] = v.y, wk[4 * i + 2] = v.z, wk[4 * i + 3] = v.w;
	}
}

// conv4_out is the conv plus SiLU of 4 channels at the token whose inputs
// are win[0 .. K-1] (oldest first), each channel summed in conv1d_rows'
// order: oldest tap first, the new input last.
template <int K>
__device__ __forceinline__ float4 conv4_out(const float (&wk)[4 * K], const float4 *win) {
	constexpr int hist = K - 1;
	float ax = 0.0f, ay = 0.0f, az = 0.0f, aw = 0.0f;
#pragma unroll
	for (int j = 0; j < hist; j++) {
		ax += wk[j] * win[j].x;
		ay += wk[K + j] * win[j].y;
		az += wk[2 * K + j] * win[j].z;
		aw += wk[3 * K + j] * win[j].w;
	}
	ax += wk[hist] * win[hist].x;
	ay += wk[K + hist] * win[hist].y;
	az += wk[2 * K + hist] * win[hist].z;
	aw += wk[3 * K + hist] * win[hist].w;
	return make_float4(silu_ref(ax), silu_ref(ay), silu_ref(az), silu_ref(aw));
}

// conv1d_vec runs the conv plus SiLU of the 4 channels c .. c+3 of tokens
// t0 .. t0+R-1 of one sequence: the R + K-1 raw inputs the tile needs are
// loaded as float4s up front (the taps before the sequence from the conv
// state st), then every output is summed in the order of conv1d_rows
// (oldest tap first, the new input last), each channel on its own. The
// thread of the first tile (t0 = 0), the only one that reads the state for
// its channels, then leaves the last K-1 raw inputs in it. x, y, st and w
// must be 16-byte aligned and C a multiple of 4. Requires R >= K-1 when a
// sequence has more than one tile.
template <int K, int R>
__device__ __forceinline__ void conv1d_vec(float *y, const float *x, const float *w, float *st, int start, int len, int C, int c, int t0) {
	constexpr int hist = K - 1;
	float4 win[R + hist];
#pragma unroll
	for (int i = 0; i < R + hist; i++) {
		int p = t0 - hist + i;
		float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (p < len) {
			if (p >= 0) v = __ldg((const float4 *)(x + (long long)(start + p) * C + c));
			else v = *(const float4 *)(st + (long long)(hist + p) * C + c);
		}
		win[i] = v;
	}
	float wk[4 * K];
	conv4_taps<K>(wk, w, c);
#pragma unroll
	for (int r = 0; r < R; r++) {
		if (t0 + r < len) *(float4 *)(y + (long long)(start + t0 + r) * C + c) = conv4_out<K>(wk, win + r);
	}
	if (t0 != 0) return;
	// Ascending j reads state entries (j + len) before they are written; the
	// window above read every entry this thread overwrites.
#pragma unroll
	for (int j = 0; j < hist; j++) {
		int p = len - hist + j;
		float4 v = p >= 0 ? __ldg((const float4 *)(x + (long long)(start + p) * C + c)) : *(const float4 *)(st + (long long)(hist + p) * C + c);
		*(float4 *)(st + (long long)j * C + c) = v;
	}
}

// conv1d_tiles runs the block's tile: blockIdx.x picks the sequence and its
// tile of R tokens, blockIdx.y*blockDim.x + threadIdx.x the channel quad.
// With flat = 0 every sequence has one tile (at most R tokens), block x is
// sequence x. With flat = 1 sequence s's tiles are the blocks from
// s + seqStart[s]/R on (disjoint, since the sequences tile the rows in
// order; a block past a sequence's last tile exits), found by a binary
// search over the starts; the grid has nSeq + ceil(T/R) blocks in x.
template <int R>
__device__ __forceinline__ void conv1d_tiles(float *y, const float *x, const float *w, float *convState,
		const int *seqStart, const int *seqLen, const int *seqSlot, int C, int K, int slots, int layer, int nSeq, int flat) {
	int g = blockIdx.x, s = g, tile = 0;
	if (flat) {
		int lo = 0, hi = nSeq - 1;
		while (lo < hi) {
			int mid = (lo + hi + 1) >> 1;
			if (mid + seqStart[mid] / R <= g) lo = mid;
			else hi = mid - 1;
		}
		s = lo, tile = g - (s + seqStart[s] / R);
	}
	int start = seqStart[s], len = seqLen[s], t0 = tile * R;
	int c = (blockIdx.y * blockDim.x + threadIdx.x) * 4;
	if (t0 >= len || c >= C) return;
	float *st = convState + ((long long)layer * slots + seqSlot[s]) * (K - 1) * C;
	switch (K) {
	case 2: conv1d_vec<2, R>(y, x, w, st, start, len, C, c, t0); break;
	case 3: conv1d_vec<3, R>(y, x, w, st, start, len, C, c, t0); break;
	default: conv1d_vec<4, R>(y, x, w, st, start, len, C, c, t0); break;
	}
}

// conv1d_tile8_f32 is conv1d_f32 with a thread for 4 channels of CONV_TILE
// tokens of a sequence (conv1d_tiles), every input loaded once by the tile
// and K-1 more for its halo, the results those of conv1d_f32 bit for bit.
// K in 2..4, C a multiple of 4, x, y, w and the conv state 16-byte aligned.
extern "C" __global__ void __launch_bounds__(128) conv1d_tile8_f32(float *y, const float *x, const float *w, float *convState,
		const int *seqStart, const int *seqLen, const int *seqSlot, int C, int K, int slots, int layer, int nSeq, int flat) {
	PDL_LAUNCH();
	PDL_WAIT();
	conv1d_tiles<CONV_TILE>(y, x, w, convState, seqStart, seqLen, seqSlot, C, K, slots, layer, nSeq, flat);
}

// conv1d_tile1_f32 is conv1d_tile8_f32 with tiles of one token, for decode
// rows (every sequence at most one token, flat = 0): fewer registers.
extern "C" __global__ void __launch_bounds__(128) conv1d_tile1_f32(float *y, const float *x, const float *w, float *convState,
		const int *seqStart, const int *seqLen, const int *seqSlot, int C, int K, int slots, int layer, int nSeq, int flat) {
	PDL_LAUNCH();
	PDL_WAIT();
	conv1d_tiles<1>(y, x, w, convState, seqStart, seqLen, seqSlot, C, K, slots, layer, nSeq, flat);
}

// conv1d_run is conv1d_vec streamed: the thread runs the 4 channels c .. c+3
// of tokens t0 .. t0+run-1 in groups of S, keeping the last K-1 raw inputs
// in registers (the halo is loaded once, K-1 rows, for the whole run) and
// issuing the loads of group g+1 before the conv and SiLU of group g, so
// that the float64 exp of silu_ref (the costly part) overlaps the memory
// traffic. Every output is summed as in conv1d_vec (oldest tap first, the
// new input last, the same expression), so the results are its bit for
// bit; the conv state is left as conv1d_vec leaves it (only the first run
// of a sequence, t0 = 0, reads or writes it). Requires S >= K-1 and
// run >= K-1 (a last group past the run's end computes nothing there).
template <int K, int S>
__device__ __forceinline__ void conv1d_run(float *y, const float *x, const float *w, float *st, int start, int len, int C, int c,
		int t0, int run) {
	constexpr int hist = K - 1;
	static_assert(S >= hist, "conv1d_run: S >= K-1");
	const float *xc = x + (long long)start * C + c;
	float *yc = y + (long long)start * C + c;
	float4 win[hist + S]; // inputs t - hist .. t + S - 1 of the group at t
#pragma unroll
	for (int i = 0; i < hist; i++) {
		int p = t0 - hist + i; // < t0 < len
		win[i] = p >= 0 ? __ldg((const float4 *)(xc + (long long)p * C)) : *(const float4 *)(st + (long long)(hist + p) * C + c);
	}
	const int tEnd = min(len, t0 + run);
	float4 nx[S];
#pragma unroll
	for (int i = 0; i < S; i++) {
		int p = t0 + i;
		nx[i] = p < tEnd ? __ldg((const float4 *)(xc + (long long)p * C)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	}
	float wk[4 * K];
	conv4_taps<K>(wk, w, c);
#pragma unroll 1
	for (int t = t0; t < tEnd; t += S) {
#pragma unroll
		for (int i = 0; i < S; i++) win[hist + i] = nx[i];
		if (t + S < tEnd) {
#pragma unroll
			for (int i = 0; i < S; i++) {
				int p = t + S + i;
				nx[i] = p < tEnd ? __ldg((const float4 *)(xc + (long long)p * C)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			}
		}
#pragma unroll
		for (int r = 0; r < S; r++) {
			if (t + r < tEnd) *(float4 *)(yc + (long long)(t + r) * C) = conv4_out<K>(wk, win + r);
		}
#pragma unroll
		for (int i = 0; i < hist; i++) win[i] = win[S + i];
	}
	if (t0 != 0) return;
	// As in conv1d_vec: ascending j reads state entries (j + len) before
	// they are written, and this thread read every entry it overwrites.
#pragma unroll
	for (int j = 0; j < hist; j++) {
		int p = len - hist + j;
		float4 v = p >= 0 ? __ldg((const float4 *)(xc + (long long)p * C)) : *(const float4 *)(st + (long long)(hist + p) * C + c);
		*(float4 *)(st + (long long)j * C + c) = v;
	}
}

// conv1d_pipe_f32: conv1d_tile8_f32's results bit for bit (K in 2..4, C a
// multiple of 4, 16-byte aligned pointers), with a thread streaming 4
// channels of a run of `run` tokens (conv1d_run, groups of max(K-1, 2)
// tokens: 3 for K = 4, which keeps the thread within 80 registers, 6
// blocks of 128 threads an SM). The block numbering is conv1d_tiles' with
// tiles of `run` tokens (run >= K-1; flat = 0: block x is sequence x, every
// sequence at most run tokens; flat = 1: nSeq + ceil(T/run) blocks in x).
// kernels/cuda/gdn.go picks run so that the grid fits one wave: every
// resident thread streams one long run (COHORT_CUDA_CONV).
extern "C" __global__ void __launch_bounds__(128, 6) conv1d_pipe_f32(float *y, const float *x, const float *w, float *convState,
		const int *seqStart, const int *seqLen, const int *seqSlot, int C, int K, int slots, int layer, int nSeq, int flat, int run) {
	PDL_LAUNCH();
	PDL_WAIT();
	int g = blockIdx.x, s = g, tile = 0;
	if (flat) {
		int lo = 0, hi = nSeq - 1;
		while (lo < hi) {
			int mid = (lo + hi + 1) >> 1;
			if (mid + seqStart[mid] / run <= g) lo = mid;
			else hi = mid - 1;
		}
		s = lo, tile = g - (s + seqStart[s] / run);
	}
	int start = seqStart[s], len = seqLen[s], t0 = tile * run;
	int c = (blockIdx.y * blockDim.x + threadIdx.x) * 4;
	if (t0 >= len || c >= C) return;
	float *st = convState + ((long long)layer * slots + seqSlot[s]) * (K - 1) * C;
	switch (K) {
	case 2: conv1d_run<2, 2>(y, x, w, st, start, len, C, c, t0, run); break;
	case 3: conv1d_run<3, 2>(y, x, w, st, start, len, C, c, t0, run); break;
	default: conv1d_run<4, 3>(y, x, w, st, start, len, C, c, t0, run); break;
	}
}

// gdn_qk_norm_f32: block (row r, head y) l2-normalizes head y of the q
// heads (y < nk, also scaled by `scale`) or of the k heads (y >= nk) of
// mixed's row r into qh or kh [T, nk*dk].
extern "C" __global__ void gdn_qk_norm_f32(float *qh, float *kh, const float *mixed, int convDim, int nk, int dk, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	int r = blockIdx.x, y = blockIdx.y;
	const float *src = mixed + (long long)r * convDim + (long long)y * dk;
	bool isQ = y < nk;
	float *dst = (isQ ? qh : kh) + (long long)r * nk * dk + (long long)(isQ ? y : y - nk) * dk;
	float sc = isQ ? scale : 1.0f;
	double ss = 0;
	for (int i = threadIdx.x; i < dk; i += blockDim.x) ss += (double)src[i] * (double)src[i];
	ss = block_sum_d(ss);
	float inv = 1.0f / (float)sqrt((double)((float)ss + 1e-6f));
	for (int i = threadIdx.x; i < dk; i += blockDim.x) dst[i] = src[i] * inv * sc;
}

// gdn_qk_norm_rows_f32 is gdn_qk_norm_f32 with a warp per (row, head):
// warp w of block b (W warps a block) takes head (W b + w) % (2 nk) of row
// (W b + w) / (2 nk), lanes moving float4s (dk % 4 == 0, dk <= 256,
// 16-byte aligned rows), the sum of squares in double per lane and then
// across the warp.
extern "C" __global__ void __launch_bounds__(256) gdn_qk_norm_rows_f32(float *__restrict__ qh, float *__restrict__ kh,
		const float *__restrict__ mixed, int convDim, int nk, int dk, float scale, int T) {
	PDL_LAUNCH();
	PDL_WAIT();
	const int gi = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
	if (gi >= T * 2 * nk) return; // the whole warp
	const int r = gi / (2 * nk), y = gi % (2 * nk);
	const float4 *src = (const float4 *)(mixed + (long long)r * convDim + (long long)y * dk);
	const bool isQ = y < nk;
	float4 *dst = (float4 *)((isQ ? qh : kh) + (long long)r * nk * dk + (long long)(isQ ? y : y - nk) * dk);
	const float sc = isQ ? scale : 1.0f;
	const int d4 = dk >> 2;
	float4 v[2];
	double ss = 0;
#pragma unroll
	for (int k = 0; k < 2; k++) {
		const int j = lane + 32 * k;
		if (j < d4) {
			v[k] = src[j];
			ss += (double)v[k].x * (double)v[k].x + (double)v[k].y * (double)v[k].y + (double)v[k].z * (double)v[k].z +
			      (double)v[k].w * (double)v[k].w;
		}
	}
	ss = warp_sum_d(ss);
	const float inv = 1.0f / (float)sqrt((double)((float)ss + 1e-6f));
#pragma unroll
	for (int k = 0; k < 2; k++) {
		const int j = lane + 32 * k;
		if (j < d4) dst[j] = make_float4(v[k].x * inv * sc, v[k].y * inv * sc, v[k].z * inv * sc, v[k].w * inv * sc);
	}
}

// gdn_gates_f32: per (row, v head) beta = sigmoid(b) and the log-decay
// g = -exp(aLog) * softplus(a + dtBias).
extern "C" __global__ void gdn_gates_f32(float *g, float *beta, const float *b, const float *a,
		const float *aLog, const float *dtBias, long long n, int nv) {
	PDL_LAUNCH();
	PDL_WAIT();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		int h = (int)(i % nv);
		beta[i] = sigmoid_ref(b[i]);
		g[i] = -(float)exp((double)aLog[h]) * softplus_ref(a[i] + dtBias[h]);
	}
}

// gdn_recurrent_f32: block (sequence s, v head h) runs the gated delta rule
// token by token on the sequence's recurrent state in place:
//   S <- e^g S;  u = S^T k;  delta = beta (v - u);  S <- S + k delta^T;  o = S^T q.
// Thread j owns state column j (and j + blockDim, ...), so no two threads
// touch the same state element. Dynamic shared memory: 2*dk floats. With a
// bf16 state (ST = unsigned short) the decayed state is not stored between
// the two passes (the second recomputes it, the same float product), so
// the state is rounded once a token, as the other kernels round it once a
// launch.
template <typename ST>
__device__ __forceinline__ void gdn_recurrent(float *sm, float *out, const float *qh, const float *kh, const float *mixed,
		const float *g, const float *beta, ST *rec, const int *seqStart, const int *seqLen, const int *seqSlot,
		int nk, int nv, int dk, int dv, int convDim, int slots, int layer) {
	constexpr bool BF = sizeof(ST) == 2;
	float *sq = sm, *sk = sm + dk;
	int s = blockIdx.x, h = blockIdx.y;
	int start = seqStart[s], len = seqLen[s];
	int kHead = h / (nv / nk);
	int qk = nk * dk, vOff = 2 * qk;
	ST *S = rec + (((long long)layer * slots + seqSlot[s]) * nv + h) * (long long)dk * dv;
	for (int t = 0; t < len; t++) {
		long long r = start + t;
		__syncthreads(); // the previous token is done with sq and sk
		for (int i = threadIdx.x; i < dk; i += blockDim.x) {
			sq[i] = qh[r * qk + (long long)kHead * dk + i];
			sk[i] = kh[r * qk + (long long)kHead * dk + i];
		}
		__syncthreads();
		float decay = (float)exp((double)g[r * nv + h]);
		float bt = beta[r * nv + h];
		const float *v = mixed + r * convDim + vOff + (long long)h * dv;
		for (int j = threadIdx.x; j < dv; j += blockDim.x) {
			float u = 0.0f;
			for (int d = 0; d < dk; d++) {
				float sv;
				if constexpr (BF) {
					sv = __fmul_rn(gdn_sld(S, (long long)d * dv + j), decay);
				} else {
					sv = gdn_sld(S, (long long)d * dv + j) * decay;
					gdn_sst(S, (long long)d * dv + j, sv);
				}
				u += sk[d] * sv;
			}
			float delta = bt * (v[j] - u);
			float o = 0.0f;
			for (int d = 0; d < dk; d++) {
				float sv;
				if constexpr (BF) sv = __fmul_rn(gdn_sld(S, (long long)d * dv + j), decay) + sk[d] * delta;
				else sv = gdn_sld(S, (long long)d * dv + j) + sk[d] * delta;
				gdn_sst(S, (long long)d * dv + j, sv);
				o += sq[d] * sv;
			}
			out[r * nv * dv + (long long)h * dv + j] = o;
		}
	}
}

#define GDN_REC_ARGS(ST) float *out, const float *qh, const float *kh, const float *mixed, const float *g, const float *beta, \
		ST *rec, const int *seqStart, const int *seqLen, const int *seqSlot, int nk, int nv, int dk, int dv, int convDim, int slots, int layer
#define GDN_REC_PASS out, qh, kh, mixed, g, beta, rec, seqStart, seqLen, seqSlot, nk, nv, dk, dv, convDim, slots, layer

extern "C" __global__ void gdn_recurrent_f32(GDN_REC_ARGS(float)) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent<float>(sm, GDN_REC_PASS);
}

extern "C" __global__ void gdn_recurrent_f32_sbf16(GDN_REC_ARGS(unsigned short)) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent<unsigned short>(sm, GDN_REC_PASS);
}

#define GDN_ROWS_MAX 16
#define GDN_ROWS_WIDE 32

// gdn_cols_at is a thread's place in the column-split GDN kernels: block
// (sequence s of len tokens from row start, v head h, column chunk
// blockIdx.z), lane = state column c, warp w of nw holds the state rows w,
// w + nw, ...; S is the block's head state [dk][dv] in rec, sq and sk the
// token's normalized q and k and redU, redO the warps' partial sums in
// shared memory sm.
template <typename ST>
struct gdn_cols_at {
	int s, h, lane, w, nw, tid, nt, c, kHead, qk, vOff, start, len;
	bool col;
	ST *S;
	float *sq, *sk, *redU, *redO;
};

template <typename ST>
__device__ __forceinline__ gdn_cols_at<ST> gdn_cols_place(float *sm, ST *rec, const int *seqStart, const int *seqLen, const int *seqSlot,
		int nk, int nv, int dk, int dv, int slots, int layer) {
	gdn_cols_at<ST> p;
	p.s = blockIdx.x, p.h = blockIdx.y;
	p.lane = threadIdx.x, p.w = threadIdx.y, p.nw = blockDim.y;
	p.tid = p.w * 32 + p.lane, p.nt = 32 * p.nw;
	p.c = blockIdx.z * 32 + p.lane;
	p.col = p.c < dv;
	p.kHead = p.h / (nv / nk);
	p.qk = nk * dk, p.vOff = 2 * p.qk;
	p.start = seqStart[p.s], p.len = seqLen[p.s];
	p.S = rec + (((long long)layer * slots + seqSlot[p.s]) * nv + p.h) * (long long)dk * dv;
	p.sq = sm, p.sk = sm + dk, p.redU = sm + 2 * dk, p.redO = p.redU + 32 * p.nw;
	return p;
}

// gdn_cols_load reads, and gdn_cols_store writes back, the state rows
// w, w + nw, ... (at most ROWS of them) of column c of S [dk][dv] that a
// lane holds in st.
template <int ROWS, typename ST>
__device__ __forceinline__ void gdn_cols_load(float st[ROWS], const ST *S, int dk, int dv, int c, bool col, int w, int nw) {
#pragma unroll
	for (int i = 0; i < ROWS; i++) {
		int d = w + i * nw;
		st[i] = (col && d < dk) ? gdn_sld(S, (long long)d * dv + c) : 0.0f;
	}
}

template <int ROWS, typename ST>
__device__ __forceinline__ void gdn_cols_store(const float st[ROWS], ST *S, int dk, int dv, int c, bool col, int w, int nw) {
#pragma unroll
	for (int i = 0; i < ROWS; i++) {
		int d = w + i * nw;
		if (col && d < dk) gdn_sst(S, (long long)d * dv + c, st[i]);
	}
}

// gdn_cols_token advances a lane's state column by one token (sq and sk in
// shared memory): decay, u = Sᵀk summed over the warps, the delta rule with
// the column's value vj, and o = Sᵀq, which warp 0 stores to *out when out
// is set. Every thread of the block calls it.
template <int ROWS>
__device__ __forceinline__ void gdn_cols_token(float st[ROWS], const float *sq, const float *sk, float *redU, float *redO,
		int dk, int w, int nw, int lane, float decay, float bt, float vj, float *out) {
	float u = 0.0f;
#pragma unroll
	for (int i = 0; i < ROWS; i++) {
		int d = w + i * nw;
		if (d < dk) {
			st[i] = st[i] * decay;
			u += sk[d] * st[i];
		}
	}
	redU[w * 32 + lane] = u;
	__syncthreads();
	u = 0.0f;
	for (int k = 0; k < nw; k++) u += redU[k * 32 + lane];
	float delta = bt * (vj - u);
	float o = 0.0f;
#pragma unroll
	for (int i = 0; i < ROWS; i++) {
		int d = w + i * nw;
		if (d < dk) {
			st[i] = st[i] + sk[d] * delta;
			o += sq[d] * st[i];
		}
	}
	redO[w * 32 + lane] = o;
	__syncthreads();
	if (w == 0 && out) {
		o = 0.0f;
		for (int k = 0; k < nw; k++) o += redO[k * 32 + lane];
		*out = o;
	}
}

// gdn_recurrent_cols_f32 is gdn_recurrent_f32 with each head's dv columns
// split over blocks: block (sequence s, v head h, column chunk z) owns the
// 32 state columns z*32 .. z*32+31, and its blockDim.y warps split the dk
// rows (warp w holds rows w, w + blockDim.y, ..., at most GDN_ROWS_MAX of
// them, in registers for the whole sequence). Lane = column, so every state
// load and store of a warp is one coalesced 128-byte line. The columns
// evolve independently given q, k, beta and g; u = S^T k and o = S^T q are
// summed per warp and then over the warps through shared memory.
// Dynamic shared memory: (2*dk + 2*32*blockDim.y) floats. The launch bound
// keeps the register count low enough for a block of up to 1024 threads.
template <int ROWS, typename ST>
__device__ __forceinline__ void gdn_recurrent_cols(float *sm, float *out, const float *qh, const float *kh, const float *mixed,
		const float *g, const float *beta, ST *rec, const int *seqStart, const int *seqLen, const int *seqSlot,
		int nk, int nv, int dk, int dv, int convDim, int slots, int layer) {
	gdn_cols_at<ST> p = gdn_cols_place<ST>(sm, rec, seqStart, seqLen, seqSlot, nk, nv, dk, dv, slots, layer);
	if (p.len <= 0) return;
	float st[ROWS];
	gdn_cols_load<ROWS, ST>(st, p.S, dk, dv, p.c, p.col, p.w, p.nw);
	for (int t = 0; t < p.len; t++) {
		long long r = p.start + t;
		__syncthreads(); // the previous token is done with sq, sk and redU
		for (int i = p.tid; i < dk; i += p.nt) {
			p.sq[i] = qh[r * p.qk + (long long)p.kHead * dk + i];
			p.sk[i] = kh[r * p.qk + (long long)p.kHead * dk + i];
		}
		__syncthreads();
		float decay = (float)exp((double)g[r * nv + p.h]);
		float bt = beta[r * nv + p.h];
		float vj = p.col ? mixed[r * convDim + p.vOff + (long long)p.h * dv + p.c] : 0.0f;
		gdn_cols_token<ROWS>(st, p.sq, p.sk, p.redU, p.redO, dk, p.w, p.nw, p.lane, decay, bt, vj, p.col ? out + r * nv * dv + (long long)p.h * dv + p.c : nullptr);
	}
	gdn_cols_store<ROWS, ST>(st, p.S, dk, dv, p.c, p.col, p.w, p.nw);
}

extern "C" __global__ void __launch_bounds__(1024) gdn_recurrent_cols_f32(GDN_REC_ARGS(float)) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent_cols<GDN_ROWS_MAX, float>(sm, GDN_REC_PASS);
}

// The bf16-state entries of the two column-split kernels: launch bounds of
// 512 threads (at most 16 warps, the host's contract; gdn.go) and
// (128, 3), where the f32 entries' 1024 and (128, 5) made ptxas spill the
// bf16 forms (8 and 12 bytes; (128, 4) still spilled 12). NVRTC 11.8,
// sm_90: 128 and 137 registers, no spills.
extern "C" __global__ void __launch_bounds__(512) gdn_recurrent_cols_f32_sbf16(GDN_REC_ARGS(unsigned short)) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent_cols<GDN_ROWS_MAX, unsigned short>(sm, GDN_REC_PASS);
}

// gdn_recurrent_cols_wide_f32 is gdn_recurrent_cols_f32 with up to
// GDN_ROWS_WIDE state rows a thread: a block of few warps (dk/32 for decode
// batches), so each thread has more loads in flight and the sums cross fewer
// warps. At most 4 warps, held to 96 registers by its launch bounds (5 blocks an SM; ptxas: no spills
// for dk = 128 on sm_90).
extern "C" __global__ void __launch_bounds__(128, 5) gdn_recurrent_cols_wide_f32(GDN_REC_ARGS(float)) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent_cols<GDN_ROWS_WIDE, float>(sm, GDN_REC_PASS);
}

extern "C" __global__ void __launch_bounds__(128, 3) gdn_recurrent_cols_wide_f32_sbf16(GDN_REC_ARGS(unsigned short)) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent_cols<GDN_ROWS_WIDE, unsigned short>(sm, GDN_REC_PASS);
}

// GDN_PIPE_WARPS is the warps of a gdn_recurrent_cols_pipe_f32 block.
#define GDN_PIPE_WARPS 4

// gdn_pipe_meta is a work item's sequence (start row, length, slot) in
// gdn_recurrent_cols_pipe_f32; an item past the last has length 0.
struct gdn_pipe_meta {
	int start, len, slot;
};

__device__ __forceinline__ gdn_pipe_meta gdn_pipe_meta_load(int it, int items, int per, const int *seqStart, const int *seqLen, const int *seqSlot) {
	gdn_pipe_meta m = {0, 0, 0};
	if (it < items) {
		int s = it / per;
		m.start = seqStart[s], m.len = seqLen[s], m.slot = seqSlot[s];
	}
	return m;
}

// gdn_pipe_item is what a thread holds of a work item it (sequence, v
// head h, column chunk) of gdn_recurrent_cols_pipe_f32: its sequence m, its
// state rows (those of gdn_cols_load), the first token's q and k element
// tid, g, beta and the column's value, loaded one item ahead of its use.
template <int ROWS>
struct gdn_pipe_item {
	float st[ROWS];
	float q, k, g, b, v;
	gdn_pipe_meta m;
};

// gdn_pipe_at is an item's head h, column c and state base S.
template <typename ST>
struct gdn_pipe_at {
	int h, c;
	ST *S;
};

template <typename ST>
__device__ __forceinline__ gdn_pipe_at<ST> gdn_pipe_place(int it, int slot, ST *rec, int nv, int nz, int dk, int dv, int slots, int layer, int lane) {
	gdn_pipe_at<ST> a;
	int rem = it % (nv * nz);
	a.h = rem / nz, a.c = (rem % nz) * 32 + lane;
	a.S = rec + (((long long)layer * slots + slot) * nv + a.h) * (long long)dk * dv;
	return a;
}

// gdn_pipe_fill issues the loads of item it (of sequence m): the state
// streamed (read once), the rest through the caches.
template <int ROWS, typename ST>
__device__ __forceinline__ void gdn_pipe_fill(gdn_pipe_item<ROWS> &x, int it, const gdn_pipe_meta &m, const float *qh, const float *kh,
		const float *mixed, const float *g, const float *beta, ST *rec, int nk, int nv, int nz, int dk, int dv, int convDim,
		int slots, int layer, int lane, int w, int nw, int tid) {
	x.m = m;
	gdn_pipe_at<ST> a = gdn_pipe_place<ST>(it, m.slot, rec, nv, nz, dk, dv, slots, layer, lane);
	bool on = m.len > 0;
	const ST *p = a.S + (long long)w * dv + a.c;
	const long long step = (long long)nw * dv;
	if (on) {
#pragma unroll
		for (int i = 0; i < ROWS; i++) x.st[i] = gdn_sld_cs(p + i * step);
		long long r = m.start;
		int qk = nk * dk, kHead = a.h / (nv / nk);
		x.q = qh[r * qk + (long long)kHead * dk + tid];
		x.k = kh[r * qk + (long long)kHead * dk + tid];
		x.g = g[r * nv + a.h];
		x.b = beta[r * nv + a.h];
		x.v = mixed[r * convDim + 2 * qk + (long long)a.h * dv + a.c];
	}
}

// gdn_pipe_token is gdn_cols_token for blocks whose every row is a state
// row (no predicates), the same operations in the same order.
template <int ROWS, int NW>
__device__ __forceinline__ void gdn_pipe_token(float st[ROWS], const float *sq, const float *sk, float *redU, float *redO,
		int w, int lane, float decay, float bt, float vj, float *out) {
	float u = 0.0f;
#pragma unroll
	for (int i = 0; i < ROWS; i++) {
		int d = w + i * NW;
		st[i] = st[i] * decay;
		u += sk[d] * st[i];
	}
	redU[w * 32 + lane] = u;
	__syncthreads();
	u = 0.0f;
#pragma unroll
	for (int k = 0; k < NW; k++) u += redU[k * 32 + lane];
	float delta = bt * (vj - u);
	float o = 0.0f;
#pragma unroll
	for (int i = 0; i < ROWS; i++) {
		int d = w + i * NW;
		st[i] = st[i] + sk[d] * delta;
		o += sq[d] * st[i];
	}
	redO[w * 32 + lane] = o;
	__syncthreads();
	if (w == 0) {
		o = 0.0f;
#pragma unroll
		for (int k = 0; k < NW; k++) o += redO[k * 32 + lane];
		*out = o;
	}
}

// gdn_pipe_run runs item x, number it (every thread of the block, which
// all hold the same item): its one token as gdn_recurrent_cols does, from
// the values gdn_pipe_fill loaded, then stores the state (streamed). An item
// of more than one token traps: the kernel is for decode rows.
template <int ROWS, typename ST>
__device__ __forceinline__ void gdn_pipe_run(gdn_pipe_item<ROWS> &x, int it, float *sq, float *sk, float *redU, float *redO, float *out,
		ST *rec, int nv, int nz, int dk, int dv, int slots, int layer, int lane, int w, int nw, int tid) {
	if (x.m.len <= 0) return;
	if (x.m.len > 1) __trap(); // decode rows only (the host's contract)
	gdn_pipe_at<ST> a = gdn_pipe_place<ST>(it, x.m.slot, rec, nv, nz, dk, dv, slots, layer, lane);
	__syncthreads(); // the previous item is done with sq, sk and redU
	sq[tid] = x.q;
	sk[tid] = x.k;
	__syncthreads();
	long long r = x.m.start;
	float decay = (float)exp((double)x.g);
	gdn_pipe_token<ROWS, GDN_PIPE_WARPS>(x.st, sq, sk, redU, redO, w, lane, decay, x.b, x.v, out + r * nv * dv + (long long)a.h * dv + a.c);
	ST *p = a.S + (long long)w * dv + a.c;
	const long long step = (long long)nw * dv;
#pragma unroll
	for (int i = 0; i < ROWS; i++) gdn_sst_cs(p + i * step, x.st[i]);
}

// gdn_recurrent_cols_pipe_f32 is gdn_recurrent_cols_wide_f32 (the same
// threads, rows and arithmetic, so the same results bit for bit) with each
// block running work items blockIdx.x, blockIdx.x + gridDim.x, ... (item =
// (sequence, v head, column chunk), the chunk fastest; nSeq·nv·ceil(dv/32)
// of them) and loading the next item (state, q, k, gates, value) before it
// runs the current one, the sequence metadata two items ahead, so a block
// always has a state tile in flight. Two items' state rows live in
// registers (A and B in turn: no copies that would wait on the loads).
// Blocks of GDN_PIPE_WARPS warps (a compile-time count: the rows' shared
// memory offsets become constants) for dk = 32·GDN_PIPE_WARPS = 128 (every
// row of every warp is a state row, thread tid holds q and k element tid)
// and dv a multiple of 32 (every lane a column): no predicates.
template <typename ST>
__device__ __forceinline__ void gdn_recurrent_cols_pipe(float *sm, float *out, const float *qh, const float *kh, const float *mixed,
		const float *g, const float *beta, ST *rec, const int *seqStart, const int *seqLen, const int *seqSlot,
		int nk, int nv, int dk, int dv, int convDim, int slots, int layer, int nSeq) {
	const int lane = threadIdx.x, w = threadIdx.y, nw = GDN_PIPE_WARPS, tid = w * 32 + lane;
	const int nz = (dv + 31) / 32, per = nv * nz, items = nSeq * per, G = gridDim.x;
	float *sq = sm, *sk = sm + dk, *redU = sm + 2 * dk, *redO = redU + 32 * nw;
	int it = blockIdx.x;
	if (it >= items) return;
#define GDN_PIPE_FILL(X, IT, M) gdn_pipe_fill<GDN_ROWS_WIDE, ST>(X, IT, M, qh, kh, mixed, g, beta, rec, nk, nv, nz, dk, dv, convDim, slots, layer, lane, w, nw, tid)
#define GDN_PIPE_RUN(X, IT) gdn_pipe_run<GDN_ROWS_WIDE, ST>(X, IT, sq, sk, redU, redO, out, rec, nv, nz, dk, dv, slots, layer, lane, w, nw, tid)
	gdn_pipe_item<GDN_ROWS_WIDE> A, B;
	gdn_pipe_meta P = gdn_pipe_meta_load(it + G, items, per, seqStart, seqLen, seqSlot), Q;
	GDN_PIPE_FILL(A, it, gdn_pipe_meta_load(it, items, per, seqStart, seqLen, seqSlot));
	for (;;) {
		// A holds item it, P the metadata of it + G.
		Q = gdn_pipe_meta_load(it + 2 * G, items, per, seqStart, seqLen, seqSlot);
		GDN_PIPE_FILL(B, it + G, P);
		GDN_PIPE_RUN(A, it);
		if ((it += G) >= items) break;
		// B holds item it, Q the metadata of it + G.
		P = gdn_pipe_meta_load(it + 2 * G, items, per, seqStart, seqLen, seqSlot);
		GDN_PIPE_FILL(A, it + G, Q);
		GDN_PIPE_RUN(B, it);
		if ((it += G) >= items) break;
	}
#undef GDN_PIPE_FILL
#undef GDN_PIPE_RUN
}

extern "C" __global__ void __launch_bounds__(128, 4) gdn_recurrent_cols_pipe_f32(GDN_REC_ARGS(float), int nSeq) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent_cols_pipe<float>(sm, GDN_REC_PASS, nSeq);
}

extern "C" __global__ void __launch_bounds__(128, 4) gdn_recurrent_cols_pipe_f32_sbf16(GDN_REC_ARGS(unsigned short), int nSeq) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ float sm[];
	gdn_recurrent_cols_pipe<unsigned short>(sm, GDN_REC_PASS, nSeq);
}

// block_sum2_d returns the sums of a and b over a block of (32, nw) threads
// to every thread; part has 2*nw doubles. Every thread must call it.
__device__ __forceinline__ void block_sum2_d(double &a, double &b, double *part, int lane, int w, int nw) {
	a = warp_sum_d(a);
	b = warp_sum_d(b);
	__syncthreads(); // part may still be read by a previous call
	if (lane == 0) {
		part[w] = a;
		part[nw + w] = b;
	}
	__syncthreads();
	a = 0;
	b = 0;
	for (int i = 0; i < nw; i++) {
		a += part[i];
		b += part[nw + i];
	}
}

// gdn_onorm is the gated RMSNorm (gated_rmsnorm_f32) that the decode
// kernels' _norm entries apply to their output: y = o / rms(o) · w ·
// silu(z) per v head of dv columns (y left out when null, its bf16 twin
// yb when set). A head's column blocks each add the squares of their
// columns of a token into ws[(row·nv + h)·gridDim.z + blockIdx.z]; the
// last of them to finish (cnt[seq·nv + h] counts them and is reset by it)
// sums the parts in block order and writes the head's y.
struct gdn_onorm {
	float *y;
	unsigned short *yb;
	const float *z, *w;
	double *ws;
	int *cnt;
	float eps;
	const char *pf; // the next projection's weights, asked into L2 (l2_prefetch_share; null: none)
	long long pfBytes;
};

// gdn_onorm_part stores the squares of column c's output o of token row r
// (warp 0 of the block, which holds the columns; every lane calls it).
__device__ __forceinline__ void gdn_onorm_part(const gdn_onorm &n, long long r, int nv, int h, float o, int lane) {
	double s = warp_sum_d((double)o * (double)o);
	if (lane == 0) n.ws[(r * nv + h) * gridDim.z + blockIdx.z] = s;
}

// gdn_onorm_finish: after the block's tokens, the last of head h's column
// blocks normalizes the head's outputs out of tokens start..start+len−1.
__device__ __forceinline__ void gdn_onorm_finish(const gdn_onorm &n, const float *out, int s, int h, int nv, int dv,
		long long start, int len, int tid, int nt) {
	__shared__ int last;
	__threadfence();
	__syncthreads();
	if (tid == 0) {
		last = atomicAdd(n.cnt + s * nv + h, 1) == (int)gridDim.z - 1;
		if (last) n.cnt[s * nv + h] = 0;
	}
	__syncthreads();
	if (!last) return;
	__threadfence();
	for (int t = 0; t < len; t++) {
		long long r = start + t;
		double ss = 0;
		for (int b = 0; b < (int)gridDim.z; b++) ss += __ldcg(n.ws + (r * nv + h) * gridDim.z + b);
		float inv = inv_rms(ss, dv, n.eps);
		long long off = (r * nv + h) * dv;
		for (int j = tid; j < dv; j += nt) {
			float v = __ldcg(out + off + j) * inv * n.w[j] * silu_ref(n.z[off + j]);
			out1(n.y, off + j, v);
			twin1(n.yb, off + j, v);
		}
	}
}

// gdn_decode_cols_f32 is gdn_qk_norm_f32, gdn_gates_f32 and
// gdn_recurrent_cols_f32 in one kernel, for decode steps: each block
// l2-normalizes its k head's q and k from the conv output and computes its
// v head's gates itself (the same expressions, in the same precision), so a
// GDN layer's decode needs two launches fewer. At most 16 warps (dk up to
// 128), so that the state rows stay in registers. Dynamic shared memory:
// (2*dk + 2*32*blockDim.y) floats and 2*blockDim.y doubles. The state is
// loaded before PDL_WAIT: no kernel of the step writes it before this one.
// With NORM the block also applies the gated RMSNorm (gdn_onorm), so the
// layer's output projection follows it directly.
template <int ROWS, typename ST, bool NORM>
__device__ __forceinline__ void gdn_decode_cols(float *sm, float *out, const float *mixed,
		const float *braw, const float *araw, const float *aLog, const float *dtBias, ST *rec,
		const int *seqStart, const int *seqLen, const int *seqSlot,
		int nk, int nv, int dk, int dv, int convDim, int slots, int layer, float scale, const gdn_onorm &nrm) {
	gdn_cols_at<ST> p = gdn_cols_place<ST>(sm, rec, seqStart, seqLen, seqSlot, nk, nv, dk, dv, slots, layer);
	if (p.len <= 0) return;
	float st[ROWS];
	double *part = (double *)(p.redO + 32 * p.nw);
	gdn_cols_load<ROWS, ST>(st, p.S, dk, dv, p.c, p.col, p.w, p.nw);
	PDL_WAIT(); // mixed and the gates are the previous kernel's outputs
	if (NORM) l2_prefetch_share(nrm.pf, nrm.pfBytes);
	float gdecay = -(float)exp((double)aLog[p.h]), bias = dtBias[p.h];
	for (int t = 0; t < p.len; t++) {
		long long r = p.start + t;
		__syncthreads(); // the previous token is done with sq, sk and redU
		const float *row = mixed + r * convDim;
		// The token's gates and value are loaded (and the gates computed)
		// with q and k, not after the reduction's barriers.
		const float bt = sigmoid_ref(braw[r * nv + p.h]);
		const float decay = (float)exp((double)(gdecay * softplus_ref(araw[r * nv + p.h] + bias)));
		const float vj = p.col ? row[p.vOff + (long long)p.h * dv + p.c] : 0.0f;
		double ssq = 0, ssk = 0;
		for (int i = p.tid; i < dk; i += p.nt) {
			float q = row[(long long)p.kHead * dk + i], k = row[p.qk + (long long)p.kHead * dk + i];
			p.sq[i] = q;
			p.sk[i] = k;
			ssq += (double)q * (double)q;
			ssk += (double)k * (double)k;
		}
		block_sum2_d(ssq, ssk, part, p.lane, p.w, p.nw);
		float invq = 1.0f / (float)sqrt((double)((float)ssq + 1e-6f));
		float invk = 1.0f / (float)sqrt((double)((float)ssk + 1e-6f));
		for (int i = p.tid; i < dk; i += p.nt) {
			p.sq[i] = p.sq[i] * invq * scale;
			p.sk[i] = p.sk[i] * invk;
		}
		__syncthreads();
		float *o = p.col ? out + r * nv * dv + (long long)p.h * dv + p.c : nullptr;
		gdn_cols_token<ROWS>(st, p.sq, p.sk, p.redU, p.redO, dk, p.w, p.nw, p.lane, decay, bt, vj, o);
		if (NORM && p.w == 0) gdn_onorm_part(nrm, r, nv, p.h, o ? *o : 0.0f, p.lane);
	}
	gdn_cols_store<ROWS, ST>(st, p.S, dk, dv, p.c, p.col, p.w, p.nw);
	if (NORM) gdn_onorm_finish(nrm, out, p.s, p.h, nv, dv, p.start, p.len, p.tid, p.nt);
}

#define GDN_DECODE_ARGS(ST) float *out, const float *mixed, const float *braw, const float *araw, const float *aLog, \
		const float *dtBias, ST *rec, const int *seqStart, const int *seqLen, const int *seqSlot, int nk, int nv, \
		int dk, int dv, int convDim, int slots, int layer, float scale
#define GDN_DECODE_PASS out, mixed, braw, araw, aLog, dtBias, rec, seqStart, seqLen, seqSlot, nk, nv, dk, dv, convDim, slots, layer, scale
#define GDN_ONORM_ARGS float *y, unsigned short *yb, const float *z, const float *w, double *ws, int *cnt, float eps, \
		const char *pf, long long pfBytes

extern "C" __global__ void __launch_bounds__(512) gdn_decode_cols_f32(GDN_DECODE_ARGS(float)) {
	PDL_LAUNCH();
	extern __shared__ float sm[];
	gdn_decode_cols<GDN_ROWS_MAX, float, false>(sm, GDN_DECODE_PASS, gdn_onorm{});
}

extern "C" __global__ void __launch_bounds__(512) gdn_decode_cols_f32_sbf16(GDN_DECODE_ARGS(unsigned short)) {
	PDL_LAUNCH();
	extern __shared__ float sm[];
	gdn_decode_cols<GDN_ROWS_MAX, unsigned short, false>(sm, GDN_DECODE_PASS, gdn_onorm{});
}

// gdn_decode_norm_cols_f32 is gdn_decode_cols_f32 followed by the gated
// RMSNorm of its output (gdn_onorm) in the same launch.
extern "C" __global__ void __launch_bounds__(512) gdn_decode_norm_cols_f32(GDN_DECODE_ARGS(float), GDN_ONORM_ARGS) {
	PDL_LAUNCH();
	extern __shared__ float sm[];
	gdn_decode_cols<GDN_ROWS_MAX, float, true>(sm, GDN_DECODE_PASS, gdn_onorm{y, yb, z, w, ws, cnt, eps, pf, pfBytes});
}

extern "C" __global__ void __launch_bounds__(512) gdn_decode_norm_cols_f32_sbf16(GDN_DECODE_ARGS(unsigned short), GDN_ONORM_ARGS) {
	PDL_LAUNCH();
	extern __shared__ float sm[];
	gdn_decode_cols<GDN_ROWS_MAX, unsigned short, true>(sm, GDN_DECODE_PASS, gdn_onorm{y, yb, z, w, ws, cnt, eps, pf, pfBytes});
}

// gdn_decode_cols_wide_f32 is gdn_decode_cols_f32 with the blocks of
// gdn_recurrent_cols_wide_f32 (at most 4 warps, GDN_ROWS_WIDE rows a
// thread), for decode batches whose grid takes more than one wave.
extern "C" __global__ void __launch_bounds__(128, 4) gdn_decode_cols_wide_f32(GDN_DECODE_ARGS(float)) {
	PDL_LAUNCH();
	extern __shared__ float sm[];
	gdn_decode_cols<GDN_ROWS_WIDE, float, false>(sm, GDN_DECODE_PASS, gdn_onorm{});
}

extern "C" __global__ void __launch_bounds__(128, 4) gdn_decode_cols_wide_f32_sbf16(GDN_DECODE_ARGS(unsigned short)) {
	PDL_LAUNCH();
	extern __shared__ float sm[];
	gdn_decode_cols<GDN_ROWS_WIDE, unsigned short, false>(sm, GDN_DECODE_PASS, gdn_onorm{});
}
