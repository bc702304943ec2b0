// bf16 weights. Matrix weights may be stored as bfloat16 (the upper half of
// a float32, rounded to nearest even); activations stay float32 and every
// product is accumulated in float32.

__device__ __forceinline__ float bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// f32_to_bf16: y[i] = bf16(x[i]) for n elements.
extern "C" __global__ void f32_to_bf16(unsigned short *y, const float *x, long long n) {
	PDL_LAUNCH();
	PDL_WAIT();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		y[i] = f32_to_bf16_bits(x[i]);
}

// embedding_bf16: one block per id; rows outside [0, rows) give zeros.
extern "C" __global__ void embedding_bf16(float *y, const unsigned short *table, const int *ids, int H, int rows, int vocabStart) {
	PDL_LAUNCH();
	embedding_rows(y, table, ids, H, rows, vocabStart);
}

#define GEMV_MAX_ROWS 8
#define GEMV_UNROLL 4

// gemv_acc adds the dot products of 8 weights (one uint4 of bf16 pairs) with
// x[t][k..k+8) for every row t < T.
__device__ __forceinline__ void gemv_acc(float acc[GEMV_MAX_ROWS], uint4 w, const float *x, long long K, int k, int T) {
	float w0 = bf16_lo(w.x), w1 = bf16_hi(w.x), w2 = bf16_lo(w.y), w3 = bf16_hi(w.y);
	float w4 = bf16_lo(w.z), w5 = bf16_hi(w.z), w6 = bf16_lo(w.w), w7 = bf16_hi(w.w);
#pragma unroll
	for (int t = 0; t < GEMV_MAX_ROWS; t++) {
		if (t < T) {
			const float4 *xp = (const float4 *)(x + t * K + k);
			float4 a = __ldg(xp), b = __ldg(xp + 1);
			acc[t] += w0 * a.x + w1 * a.y + w2 * a.z + w3 * a.w + w4 * b.x + w5 * b.y + w6 * b.z + w7 * b.w;
		}
	}
}

// gemv_bf16: y[T, N] = x[T, K] · w[N, K]^T for T <= GEMV_MAX_ROWS, with w in
// bf16 and K a multiple of 8. One warp per output column n (a row of w),
// streaming the row in 16-byte loads, GEMV_UNROLL of them in flight per lane.
// Block (32, warps), grid ceil(N / warps).
extern "C" __global__ void gemv_bf16(float *y, const float *x, const unsigned short *w, int T, int K, int N) {
	PDL_LAUNCH();
	PDL_WAIT();
	int lane = threadIdx.x, n = blockIdx.x * blockDim.y + threadIdx.y;
	if (n >= N) return;
	const uint4 *row = (const uint4 *)(w + (long long)n * K);
	int chunks = K >> 3;
	float acc[GEMV_MAX_ROWS];
#pragma unroll
	for (int t = 0; t < GEMV_MAX_ROWS; t++) acc[t] = 0.0f;
	int c = lane;
	for (; c + 32 * (GEMV_UNROLL - 1) < chunks; c += 32 * GEMV_UNROLL) {
		uint4 v[GEMV_UNROLL];
#pragma unroll
		for (int u = 0; u < GEMV_UNROLL; u++) v[u] = __ldg(row + c + 32 * u);
#pragma unroll
		for (int u = 0; u < GEMV_UNROLL; u++) gemv_acc(acc, v[u], x, K, (c + 32 * u) << 3, T);
	}
	for (; c < chunks; c += 32) gemv_acc(acc, __ldg(row + c), x, K, c << 3, T);
#pragma unroll
	for (int t = 0; t < GEMV_MAX_ROWS; t++) {
		if (t < T) {
			float s = warp_sum_f(acc[t]);
			if (lane == 0) y[(long long)t * N + n] = s;
		}
	}
}
