// Decode-sized bf16 GEMMs on tensor cores: y[T, N] = x[T, K] · w[N, K]^T for
// T <= 8·NT rows, w in bf16, x in float32 (rounded to bf16 in registers),
// float32 accumulation. The weights are read once whatever T is, so a step
// of 16 rows costs about what a step of one row costs.
//
// Layout. A warp owns one tile of 16 weight rows (the mma's M) and walks its
// share of K in chunks of 64. In each chunk a lane loads 16 consecutive bf16
// of row g and of row g+8 (g = lane/4, so four lanes read one 128-byte line
// of each row) and the same 16 positions of activation row g of every
// n-tile. A dot product does not depend on the order of its terms, so these
// 16 physical positions are fed to four m16n8k16 mmas as the four k-slots a
// lane holds in each ({2·tig, 2·tig+1, 2·tig+8, 2·tig+9}): weights and
// activations get the same permutation and the sum is the GEMM's.
//
// The warps of a block (up to MMA_MAX_WARPS) split K between them and add
// their tiles in shared memory; a grid has gridDim.y blocks per 16-row tile
// of all its segments (up to four weights read against the same x in one
// launch). When several blocks share a tile (few, long rows: N = 2560,
// K = 9216), each writes its sum to a workspace and the last to finish adds
// them in block order, so the result does not depend on timing.
// Each warp streams its chunks through two register stages of U chunks: the
// loads of the next stage are in flight while the current one is computed.
//
// Activations are split into two bf16 parts, hi = bf16(x) and lo =
// bf16(x − hi), and both are multiplied (two mmas): hi + lo carries 16
// mantissa bits, so decode rows keep nearly float32 activations while the
// weights are read at bf16 cost. The extra tensor-core work is free at these
// row counts (the kernel is bound by the weight reads).

#define MMA_MAX_WARPS 16

// pack_bf16x2 rounds lo and hi to bf16 (nearest even) into one register,
// lo in the low half (the first element of an mma operand pair).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
	unsigned r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

// ld_stream loads 16 bytes of a weight through the non-coherent path
// without keeping them in L1 (each is read once per step).
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
	uint4 v;
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
	    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}

__device__ __forceinline__ void mma_16816(float d[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// split_bf16x2 splits (v0, v1) into hi = bf16(v) and lo = bf16(v − hi).
__device__ __forceinline__ void split_bf16x2(float v0, float v1, unsigned &hi, unsigned &lo) {
	hi = pack_bf16x2(v0, v1);
	lo = pack_bf16x2(v0 - __uint_as_float(hi << 16), v1 - __uint_as_float(hi & 0xffff0000u));
}

// MMA_WFRAG(r) arranges the lane's 16 bf16 of weight rows g (r[0], r[1])
// and g+8 (r[2], r[3]) as the A operands of the four mmas of a chunk.
#define MMA_WFRAG(r)                                                                                                       \
	{                                                                                                                  \
		{r[0].x, r[2].x, r[0].y, r[2].y}, {r[0].z, r[2].z, r[0].w, r[2].w}, {r[1].x, r[3].x, r[1].y, r[3].y},           \
		    {r[1].z, r[3].z, r[1].w, r[3].w},                                                                          \
	}

// mma_chunk adds one 64-wide K chunk: r0 and r1 hold the lane's 16 bf16 of
// weight rows g and g+8 at position k, x is read at the same positions.
template <int NT>
__device__ __forceinline__ void mma_chunk(float acc[NT][4], const uint4 r[4], const float *x, long long K, int T, int k, int g) {
	const unsigned a[4][4] = MMA_WFRAG(r);
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
		int t = nt * 8 + g;
		unsigned hi[8], lo[8];
		if (t < T) {
			const float4 *xp = (const float4 *)(x + t * K + k);
#pragma unroll
			for (int q = 0; q < 4; q++) {
				float4 v = __ldg(xp + q);
				split_bf16x2(v.x, v.y, hi[2 * q], lo[2 * q]);
				split_bf16x2(v.z, v.w, hi[2 * q + 1], lo[2 * q + 1]);
			}
		} else {
#pragma unroll
			for (int q = 0; q < 8; q++) hi[q] = lo[q] = 0u;
		}
#pragma unroll
		for (int j = 0; j < 4; j++) {
			mma_16816(acc[nt], a[j][0], a[j][1], a[j][2], a[j][3], hi[2 * j], hi[2 * j + 1]);
			mma_16816(acc[nt], a[j][0], a[j][1], a[j][2], a[j][3], lo[2 * j], lo[2 * j + 1]);
		}
	}
}

// mma_chunk of activations already in bf16 (xb [T, K]; the gemv_mmab
// entries): the lane's 16 consecutive values of row g of every n-tile are
// two 16-byte loads, fed as they are (8 bf16 pairs, the first value in the
// low half, as pack_bf16x2 packs them), one mma per k-slot group.
template <int NT>
__device__ __forceinline__ void mma_chunk(float acc[NT][4], const uint4 r[4], const unsigned short *xb, long long K, int T, int k,
                                          int g) {
	const unsigned a[4][4] = MMA_WFRAG(r);
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
		int t = nt * 8 + g;
		uint4 p0 = make_uint4(0u, 0u, 0u, 0u), p1 = p0;
		if (t < T) {
			const uint4 *xp = (const uint4 *)(xb + t * K + k);
			p0 = __ldg(xp);
			p1 = __ldg(xp + 1);
		}
		const unsigned h[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
		for (int j = 0; j < 4; j++) mma_16816(acc[nt], a[j][0], a[j][1], a[j][2], a[j][3], h[2 * j], h[2 * j + 1]);
	}
}

// mma_stage_load issues the loads of the U chunks c, c+nw, … (those below
// chunks) of rows p0 and p1.
template <int U>
__device__ __forceinline__ void mma_stage_load(uint4 v[U][4], const uint4 *p0, const uint4 *p1, int c, int nw, int chunks) {
#pragma unroll
	for (int u = 0; u < U; u++) {
		int cc = c + u * nw;
		if (cc < chunks) {
			v[u][0] = ld_stream(p0 + cc * 8);
			v[u][1] = ld_stream(p0 + cc * 8 + 1);
			v[u][2] = ld_stream(p1 + cc * 8);
			v[u][3] = ld_stream(p1 + cc * 8 + 1);
		}
	}
}

// mma_stage_mma adds the U chunks c, c+nw, … (those below chunks) held in
// v, against x in float32 or in bf16 (X: mma_chunk's two forms).
template <int NT, int U, typename X>
__device__ __forceinline__ void mma_stage_mma(float acc[NT][4], const uint4 v[U][4], const X *x, int K, int T, int c, int nw,
                                              int chunks, int tig, int g) {
#pragma unroll
	for (int u = 0; u < U; u++)
		if (c + u * nw < chunks) mma_chunk<NT>(acc, v[u], x, K, T, (c + u * nw) * 64 + tig * 16, g);
}

// mma_tile accumulates the warp's share of K (chunks warp, warp+nw, …) for
// the 16 rows from m0 of w [N, K], two stages of U chunks in flight. Every
// block lets the next kernel launch (PDL_LAUNCH) once its weights are read:
// that kernel's blocks then take the SMs this launch leaves, not the ones
// its main loop needs. (Taking the two stages in turn, so that one is in
// flight while the other is waited for, measured no faster on the H200:
// BenchmarkLinearBF16 and cohort bench, 2026-12-03. Streaming the weights
// through a ring of 3 or 4 shared-memory slots a warp by cp.async instead,
// 8 or 6 blocks an SM, measured far slower: 1.2–1.8 TB/s against 1.7–3.4
// for these register stages at 1 and 8 rows, and batch 1 at 5.4 ms/token
// against 3.24, 2026-12-03, eleventh session.)
template <int NT, int U, typename X>
__device__ __forceinline__ void mma_tile(float acc[NT][4], const unsigned short *w, int N, int K, int m0,
                                         const X *x, int T, int warp, int nw) {
	int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
	const uint4 *p0 = (const uint4 *)(w + (long long)min(m0 + g, N - 1) * K) + tig * 2;
	const uint4 *p1 = (const uint4 *)(w + (long long)min(m0 + g + 8, N - 1) * K) + tig * 2;
	int chunks = K >> 6, step = U * nw;
	uint4 cur[U][4], nxt[U][4];
	mma_stage_load<U>(cur, p0, p1, warp, nw, chunks);
	PDL_WAIT(); // x is the previous kernel's output; the weights are not
	for (int c = warp; c < chunks; c += step) {
		if (c + step < chunks) mma_stage_load<U>(nxt, p0, p1, c + step, nw, chunks);
		mma_stage_mma<NT, U>(acc, cur, x, K, T, c, nw, chunks, tig, g);
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int i = 0; i < 4; i++) cur[u][i] = nxt[u][i];
	}
	PDL_LAUNCH();
}

// mma_reduce adds the warps' tiles: red[t·16 + m] (t < 8·NT, m < 16) is the
// sum over warps of D[m][t] for every thread after it returns. red has
// MMA_MAX_WARPS·NT·128 floats.
template <int NT>
__device__ __forceinline__ void mma_reduce(float acc[NT][4], float *red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5, g = lane >> 2, tig = lane & 3;
	float *mine = red + warp * NT * 128;
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
		int t = nt * 8 + 2 * tig;
		mine[t * 16 + g] = acc[nt][0];
		mine[(t + 1) * 16 + g] = acc[nt][1];
		mine[t * 16 + g + 8] = acc[nt][2];
		mine[(t + 1) * 16 + g + 8] = acc[nt][3];
	}
	__syncthreads();
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
		float s = 0.0f;
		for (int v = 0; v < nw; v++) s += red[v * NT * 128 + i];
		red[i] = s; // only warp 0's slice is overwritten, after it was read
	}
	__syncthreads();
}


// mma_seg is the segment of tile blockIdx.x: up to four weights, each with
// its own output, share one launch.
struct mma_seg {
	float *y;
	const unsigned short *w;
	int N;
	int m0;
};

__device__ __forceinline__ mma_seg mma_pick(float *y0, const unsigned short *w0, int n0, float *y1, const unsigned short *w1, int n1,
                                            float *y2, const unsigned short *w2, int n2, float *y3, const unsigned short *w3, int n3) {
	int tile = blockIdx.x, t;
	t = (n0 + 15) >> 4;
	if (tile < t) return {y0, w0, n0, tile * 16};
	tile -= t;
	t = (n1 + 15) >> 4;
	if (tile < t) return {y1, w1, n1, tile * 16};
	tile -= t;
	t = (n2 + 15) >> 4;
	if (tile < t) return {y2, w2, n2, tile * 16};
	tile -= t;
	return {y3, w3, n3, tile * 16};
}

// mma_combine returns, in red, the sum of the gridDim.y partial tiles of
// tile blockIdx.x, and whether this block is the one that writes it (the
// last to arrive). ws holds gridDim.x·gridDim.y·NT·128 floats; cnt has a
// zero counter per tile, reset here for the next launch.
template <int NT>
__device__ __forceinline__ bool mma_combine(float *red, float *ws, int *cnt) {
	int S = gridDim.y;
	if (S == 1) return true;
	__shared__ int last;
	float *part = ws + ((long long)blockIdx.x * S) * NT * 128;
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) part[blockIdx.y * NT * 128 + i] = red[i];
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) {
		last = atomicAdd(cnt + blockIdx.x, 1) == S - 1;
		if (last) cnt[blockIdx.x] = 0;
	}
	__syncthreads();
	if (!last) return false;
	__threadfence();
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
		float v = 0.0f;
		for (int b = 0; b < S; b++) v += __ldcg(part + b * NT * 128 + i);
		red[i] = v;
	}
	__syncthreads();
	return true;
}

// gemv_mma_block accumulates this block's share of a tile's K (warp
// blockIdx.y·nw + warp of gridDim.y·nw) and leaves the tile's total in red
// when it returns true.
template <int NT, int U>
__device__ __forceinline__ bool gemv_mma_block(float acc[NT][4], float *red, const unsigned short *w, int N, int K, int m0,
                                               const float *x, int T, float *ws, int *cnt) {
	int nw = blockDim.x >> 5;
	mma_tile<NT, U>(acc, w, N, K, m0, x, T, blockIdx.y * nw + (threadIdx.x >> 5), gridDim.y * nw);
	mma_reduce<NT>(acc, red);
	return mma_combine<NT>(red, ws, cnt);
}

// mma_conv is the depthwise causal conv + SiLU that the conv GEMVs run on
// their first segment's outputs (a GDN layer's q|k|v projection) in decode
// steps: row t is sequence t's one new token, its conv state in slot[t]
// (state [layers][slots][K−1][C], weight [C, K], as conv1d_f32).
struct mma_conv {
	const float *w;
	float *state;
	const int *slot;
	int K, slots, layer;
};

// mma_conv_apply returns silu(conv) of channel m of row t given its new
// input u, in conv1d_f32's order of terms, and shifts u into the state.
__device__ __forceinline__ float mma_conv_apply(const mma_conv &cv, int C, int t, int m, float u) {
	int hist = cv.K - 1;
	float *st = cv.state + ((long long)cv.layer * cv.slots + cv.slot[t]) * hist * C + m;
	const float *w = cv.w + (long long)m * cv.K;
	float acc = 0.0f;
	for (int j = 0; j < hist; j++) acc += w[j] * st[(long long)j * C];
	acc += w[hist] * u;
	for (int j = 0; j + 1 < hist; j++) st[(long long)j * C] = st[(long long)(j + 1) * C];
	if (hist > 0) st[(long long)(hist - 1) * C] = u;
	return silu_ref(acc);
}

template <int NT, int U, bool CONV>
__device__ __forceinline__ void gemv_mma(float *y0, const unsigned short *w0, int n0, float *y1, const unsigned short *w1, int n1,
                                         float *y2, const unsigned short *w2, int n2, float *y3, const unsigned short *w3, int n3,
                                         const float *x, int T, int K, float *ws, int *cnt, const mma_conv &cv) {
	__shared__ float red[MMA_MAX_WARPS * NT * 128];
	mma_seg s = mma_pick(y0, w0, n0, y1, w1, n1, y2, w2, n2, y3, w3, n3);
	float acc[NT][4] = {};
	if (!gemv_mma_block<NT, U>(acc, red, s.w, s.N, K, s.m0, x, T, ws, cnt)) return;
	bool conv = CONV && s.y == y0;
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
		int t = i >> 4, m = s.m0 + (i & 15);
		if (t < T && m < s.N) s.y[(long long)t * s.N + m] = conv ? mma_conv_apply(cv, s.N, t, m, red[i]) : red[i];
	}
}

// gemv_mma_swiglu: y[T, N] = silu(x·gᵀ) ⊙ (x·uᵀ) for the gate and up
// projections g, u [N, K] of an MLP, in one pass over both (the gate's
// tiles are 0..tiles-1 of the workspace, the up's tiles..2·tiles-1).
template <int NT, int U>
__device__ __forceinline__ void gemv_mma_swiglu(float *y, const unsigned short *wg, const unsigned short *wu, int N,
                                                const float *x, int T, int K, float *ws, int *cnt) {
	__shared__ float red[MMA_MAX_WARPS * NT * 128];
	__shared__ float gsum[NT * 128];
	int m0 = blockIdx.x * 16;
	float ag[NT][4] = {}, au[NT][4] = {};
	long long off = (long long)gridDim.x * gridDim.y * NT * 128;
	bool mine = gemv_mma_block<NT, U>(ag, red, wg, N, K, m0, x, T, ws, cnt);
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) gsum[i] = red[i];
	__syncthreads();
	// The up projection's partials and counters follow the gate's, so the
	// block that writes is the last for both.
	bool up = gemv_mma_block<NT, U>(au, red, wu, N, K, m0, x, T, ws + off, cnt + gridDim.x);
	if (!up) return;
	if (!mine && gridDim.y > 1) {
		// The gate's total was written by another block: read it back.
		for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
			float v = 0.0f;
			for (int b = 0; b < (int)gridDim.y; b++) v += __ldcg(ws + ((long long)blockIdx.x * gridDim.y + b) * NT * 128 + i);
			gsum[i] = v;
		}
		__syncthreads();
	}
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
		int t = i >> 4, m = m0 + (i & 15);
		if (t < T && m < N) y[(long long)t * N + m] = silu_ref(gsum[i]) * red[i];
	}
}

// gemv_mma_addnorm: y[T, N] = x·wᵀ for decode rows (T ≤ 8), and then, in
// the block that writes the last of the gridDim.x tiles (done counts them
// and is reset by that block), sum = r + y and normed = sum / rms(sum) ·
// (1 + nw) for each row, as add_rmsnorm_f32 computes them (the sum of
// squares in double), so that a residual block's end costs one launch.
template <int U>
__device__ __forceinline__ void gemv_mma_addnorm(float *y, const unsigned short *w, int N, const float *x, int T, int K,
                                                 float *ws, int *cnt, float *sum, float *normed, const float *r,
                                                 const float *nw, float eps, int *done) {
	__shared__ float red[MMA_MAX_WARPS * 128];
	__shared__ int last;
	int m0 = blockIdx.x * 16;
	float acc[1][4] = {};
	if (!gemv_mma_block<1, U>(acc, red, w, N, K, m0, x, T, ws, cnt)) return;
	for (int i = threadIdx.x; i < 128; i += blockDim.x) {
		int t = i >> 4, m = m0 + (i & 15);
		if (t < T && m < N) y[(long long)t * N + m] = red[i];
	}
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) {
		last = atomicAdd(done, 1) == (int)gridDim.x - 1;
		if (last) *done = 0;
	}
	__syncthreads();
	if (!last) return;
	__threadfence();
	for (int t = 0; t < T; t++) {
		long long off = (long long)t * N;
		double ss = 0;
		for (int j = threadIdx.x; j < N; j += blockDim.x) {
			float v = r[off + j] + __ldcg(y + off + j);
			sum[off + j] = v;
			ss += (double)v * (double)v;
		}
		float inv = inv_rms(block_sum_d(ss), N, eps);
		// Each thread reads back only the sums it wrote itself.
		for (int j = threadIdx.x; j < N; j += blockDim.x) normed[off + j] = sum[off + j] * inv * (1.0f + nw[j]);
	}
}

// gemv_mmab: y[T, N] = xb·wᵀ with the activations already in bf16 (xb
// [T, K], a cuBLASLt Linear's input: the twin its producer wrote, or
// f32_to_bf16's copy) for 9 to 64 rows, where splitting float32 rows into
// two bf16 parts in every warp (gemv_mma) would cost more than the weights'
// reads. COHORT_CUDA_SKINNY=1 routes such Linears here instead of to
// cuBLASLt (skinny.go). Blocks of MMAB_WARPS warps; the tiles, the split
// over K and the in-order sum of split tiles are gemv_mma's.
#define MMAB_WARPS 4

template <int NT>
__device__ __forceinline__ void gemv_mmab(float *y, const unsigned short *w, int N, const unsigned short *xb, int T, int K,
                                          float *ws, int *cnt) {
	__shared__ float red[MMAB_WARPS * NT * 128];
	int m0 = blockIdx.x * 16, nw = blockDim.x >> 5;
	float acc[NT][4] = {};
	mma_tile<NT, 1>(acc, w, N, K, m0, xb, T, blockIdx.y * nw + (threadIdx.x >> 5), gridDim.y * nw);
	mma_reduce<NT>(acc, red);
	if (!mma_combine<NT>(red, ws, cnt)) return;
	for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
		int t = i >> 4, m = m0 + (i & 15);
		if (t < T && m < N) y[(long long)t * N + m] = red[i];
	}
}

#define GEMV_MMAB_ENTRY(NT)                                                                                                \
	extern "C" __global__ void __launch_bounds__(MMAB_WARPS * 32) gemv_mmab_nt##NT(                                      \
	    float *y, const unsigned short *w, int N, const unsigned short *xb, int T, int K, float *ws, int *cnt) {       \
		gemv_mmab<NT>(y, w, N, xb, T, K, ws, cnt);                                                                      \
	}

GEMV_MMAB_ENTRY(2)
GEMV_MMAB_ENTRY(4)
GEMV_MMAB_ENTRY(8)

#define GEMV_MMA_ARGS                                                                                                     \
	float *y0, const unsigned short *w0, int n0, float *y1, const unsigned short *w1, int n1, float *y2,                 \
	    const unsigned short *w2, int n2, float *y3, const unsigned short *w3, int n3
#define GEMV_MMA_PASS y0, w0, n0, y1, w1, n1, y2, w2, n2, y3, w3, n3

// gemv_mma_<variant>nt<NT>: the GEMV of x against up to four weights, U
// chunks per register stage, launch bounds (threads, blocks per SM).
#define GEMV_MMA_ENTRY(VAR, NT, U, THREADS, MINB)                                                                          \
	extern "C" __global__ void __launch_bounds__(THREADS, MINB) gemv_mma_##VAR##nt##NT(                                  \
	    GEMV_MMA_ARGS, const float *x, int T, int K, float *ws, int *cnt) {                                            \
		gemv_mma<NT, U, false>(GEMV_MMA_PASS, x, T, K, ws, cnt, mma_conv{});                                           \
	}

// gemv_mma_conv_<variant>nt1: the GEMV whose first segment's outputs go
// through the causal conv (mma_conv), for decode rows.
#define GEMV_MMA_CONV_ENTRY(VAR, THREADS, MINB)                                                                            \
	extern "C" __global__ void __launch_bounds__(THREADS, MINB) gemv_mma_conv_##VAR##nt1(                                \
	    GEMV_MMA_ARGS, const float *x, int T, int K, float *ws, int *cnt, const float *cw, float *cstate,             \
	    const int *cslot, int cK, int cslots, int clayer) {                                                             \
		gemv_mma<1, 1, true>(GEMV_MMA_PASS, x, T, K, ws, cnt, mma_conv{cw, cstate, cslot, cK, cslots, clayer});        \
	}

#define GEMV_MMA_SWIGLU_ENTRY(VAR, NT, THREADS, MINB)                                                                      \
	extern "C" __global__ void __launch_bounds__(THREADS, MINB) gemv_mma_swiglu_##VAR##nt##NT(                           \
	    float *y, const unsigned short *wg, const unsigned short *wu, int N, const float *x, int T, int K, float *ws,  \
	    int *cnt) {                                                                                                    \
		gemv_mma_swiglu<NT, 1>(y, wg, wu, N, x, T, K, ws, cnt);                                                        \
	}

GEMV_MMA_ENTRY(, 1, 1, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_ENTRY(, 2, 1, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_ENTRY(, 4, 1, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_SWIGLU_ENTRY(, 1, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_SWIGLU_ENTRY(, 2, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_SWIGLU_ENTRY(, 4, MMA_MAX_WARPS * 32, 1)
// Variants that BenchmarkLinearBF16 and COHORT_CUDA_GEMV compare with the
// default: two chunks per register stage; blocks of at most 4 warps held
// to 6, 7 or 8 blocks per SM (fewer registers a thread).
GEMV_MMA_ENTRY(u2_, 1, 2, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_ENTRY(o6_, 1, 1, 128, 6)
GEMV_MMA_ENTRY(o7_, 1, 1, 128, 7)
GEMV_MMA_ENTRY(o8_, 1, 1, 128, 8)
GEMV_MMA_SWIGLU_ENTRY(o6_, 1, 128, 6)
GEMV_MMA_SWIGLU_ENTRY(o7_, 1, 128, 7)
GEMV_MMA_SWIGLU_ENTRY(o8_, 1, 128, 8)
GEMV_MMA_CONV_ENTRY(, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_CONV_ENTRY(o6_, 128, 6)

// gemv_mma_addnorm_<variant>nt1 (COHORT_CUDA_ADDNORM=1, linearnorm.go).
#define GEMV_MMA_ADDNORM_ENTRY(VAR, THREADS, MINB)                                                                         \
	extern "C" __global__ void __launch_bounds__(THREADS, MINB) gemv_mma_addnorm_##VAR##nt1(                             \
	    float *y, const unsigned short *w, int N, const float *x, int T, int K, float *ws, int *cnt, float *sum,       \
	    float *normed, const float *r, const float *nw, float eps, int *done) {                                         \
		gemv_mma_addnorm<1>(y, w, N, x, T, K, ws, cnt, sum, normed, r, nw, eps, done);                                  \
	}

GEMV_MMA_ADDNORM_ENTRY(, MMA_MAX_WARPS * 32, 1)
GEMV_MMA_ADDNORM_ENTRY(o6_, 128, 6)
