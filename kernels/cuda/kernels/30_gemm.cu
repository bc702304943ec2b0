// gemm_nt_f32 is the fallback GEMM (used when cuBLASLt cannot be loaded, or
// when COHORT_CUDA_GEMM=tiled): y[T, N] = x[T, K] * w[N, K]^T, fp32, with
// 16x16 shared-memory tiles. Block (16, 16), grid (ceil(N/16), ceil(T/16)).
#define GEMM_TILE 16

extern "C" __global__ void gemm_nt_f32(float *y, const float *x, const float *w, int T, int K, int N) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ float xs[GEMM_TILE][GEMM_TILE + 1];
	__shared__ float ws[GEMM_TILE][GEMM_TILE + 1];
	int tx = threadIdx.x, ty = threadIdx.y;
	int row = blockIdx.y * GEMM_TILE + ty; // row of x and y
	int col = blockIdx.x * GEMM_TILE + tx; // row of w, column of y
	int wrow = blockIdx.x * GEMM_TILE + ty;
	float acc = 0.0f;
	for (int k0 = 0; k0 < K; k0 += GEMM_TILE) {
		xs[ty][tx] = (row < T && k0 + tx < K) ? x[(long long)row * K + k0 + tx] : 0.0f;
		ws[ty][tx] = (wrow < N && k0 + tx < K) ? w[(long long)wrow * K + k0 + tx] : 0.0f;
		__syncthreads();
		for (int k = 0; k < GEMM_TILE; k++) acc += xs[ty][k] * ws[tx][k];
		__syncthreads();
	}
	if (row < T && col < N) y[(long long)row * N + col] = acc;
}
