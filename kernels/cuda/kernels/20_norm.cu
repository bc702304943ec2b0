// RMSNorm kernels: one block per group of g columns (a row, or a head).

// rmsnorm_f32 is the zero-centered form x / rms(x) * (1 + w).
extern "C" __global__ void rmsnorm_f32(float *y, const float *x, const float *w, int g, float eps) {
	const float *xs = x + (long long)blockIdx.x * g;
	float *ys = y + (long long)blockIdx.x * g;
	double ss = 0;
	for (int j = threadIdx.x; j < g; j += blockDim.x) ss += (double)xs[j] * (double)xs[j];
	float inv = inv_rms(block_sum_d(ss), g, eps);
	for (int j = threadIdx.x; j < g; j += blockDim.x) ys[j] = xs[j] * inv * (1.0f + w[j]);
}

// add_rmsnorm_f32 writes sum = r + d and the zero-centered RMSNorm of sum.
extern "C" __global__ void add_rmsnorm_f32(float *sum, float *y, const float *r, const float *d, const float *w, int g, float eps) {
	long long off = (long long)blockIdx.x * g;
	double ss = 0;
	for (int j = threadIdx.x; j < g; j += blockDim.x) {
		float s = r[off + j] + d[off + j];
		sum[off + j] = s;
		ss += (double)s * (double)s;
	}
	float inv = inv_rms(block_sum_d(ss), g, eps);
	// Each thread reads back only the sums it wrote itself.
	for (int j = threadIdx.x; j < g; j += blockDim.x) y[off + j] = sum[off + j] * inv * (1.0f + w[j]);
}

// gated_rmsnorm_f32 is x / rms(x) * w * silu(z) with the plain weight w.
extern "C" __global__ void gated_rmsnorm_f32(float *y, const float *x, const float *z, const float *w, int g, float eps) {
	long long off = (long long)blockIdx.x * g;
	double ss = 0;
	for (int j = threadIdx.x; j < g; j += blockDim.x) ss += (double)x[off + j] * (double)x[off + j];
	float inv = inv_rms(block_sum_d(ss), g, eps);
	for (int j = threadIdx.x; j < g; j += blockDim.x) y[off + j] = x[off + j] * inv * w[j] * silu_ref(z[off + j]);
}
