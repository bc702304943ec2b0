// Sampling on the device: only the chosen ids cross to the host.

// argmax_key orders a logit and its index so that the largest value wins
// and, among equal values, the lowest index (as sample.Argmax). NaN gives
// 0, below every number, so it never wins over one.
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
	unsigned u = __float_as_uint(v);
	if (v != v) return 0ull;
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return ((unsigned long long)u << 32) | (unsigned)(~i);
}

// argmax_rows: best[r] = max over the row's keys, for rows of n logits.
// Grid (blocks per row, rows); best must be zeroed first. A block reduces
// its stride of the row and adds its winner with one atomicMax.
extern "C" __global__ void argmax_rows(unsigned long long *best, const float *logits, int n) {
	PDL_LAUNCH();
	PDL_WAIT();
	const float *row = logits + (long long)blockIdx.y * n;
	unsigned long long k = 0ull;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		unsigned long long c = argmax_key(__ldg(row + i), i);
		k = c > k ? c : k;
	}
	for (int o = 16; o > 0; o >>= 1) {
		unsigned long long c = __shfl_xor_sync(0xffffffffu, k, o);
		k = c > k ? c : k;
	}
	__shared__ unsigned long long part[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) part[warp] = k;
	__syncthreads();
	if (warp == 0) {
		k = lane < (int)(blockDim.x >> 5) ? part[lane] : 0ull;
		for (int o = 16; o > 0; o >>= 1) {
			unsigned long long c = __shfl_xor_sync(0xffffffffu, k, o);
			k = c > k ? c : k;
		}
		if (lane == 0) atomicMax(best + blockIdx.y, k);
	}
}

// argmax_ids turns the keys into ids. As sample.Argmax, which compares
// every logit with the best so far starting from the first, a row whose
// first logit is NaN (or whose logits are all NaN) gives 0.
extern "C" __global__ void argmax_ids(int *ids, const unsigned long long *best, const float *logits, int n, int rows) {
	PDL_LAUNCH();
	PDL_WAIT();
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r < rows) {
		unsigned long long k = best[r];
		float first = logits[(long long)r * n];
		ids[r] = (k == 0ull || first != first) ? 0 : (int)(~(unsigned)(k & 0xffffffffull));
	}
}
