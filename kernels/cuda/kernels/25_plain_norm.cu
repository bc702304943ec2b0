// The plain RMSNorm (Llama, dense Qwen3): one block per group of g columns.

// plain_rmsnorm_f32 is x / rms(x) * w, the weight applied as it is.
extern "C" __global__ void plain_rmsnorm_f32(float *y, const float *x, const float *w, int g, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	const float *xs = x + (long long)blockIdx.x * g;
	float *ys = y + (long long)blockIdx.x * g;
	double ss = 0;
	for (int j = threadIdx.x; j < g; j += blockDim.x) ss += (double)xs[j] * (double)xs[j];
	float inv = inv_rms(block_sum_d(ss), g, eps);
	for (int j = threadIdx.x; j < g; j += blockDim.x) ys[j] = xs[j] * inv * w[j];
}
