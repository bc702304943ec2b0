// Helpers shared by the kernels. The Go side concatenates every .cu file of
// this directory in name order into one NVRTC program, so this file comes
// first. Everything is float32; reductions that the CPU oracle (kernels/cpu)
// carries out in float64 are done in double here too, and the transcendental
// functions the oracle evaluates in float64 are evaluated in double, so both
// backends agree to a few float32 ulps.

#define NEG_INF __int_as_float(0xff800000)

// Programmatic dependent launch (sm_90 and later; the backend launches
// kernels so as COHORT_CUDA_PDL says, the GEMVs by default): a kernel may
// start while the one before it in the stream drains. PDL_LAUNCH lets the
// next kernel start once every block of this one has called it (or
// exited); PDL_WAIT blocks until the kernel before has finished and its
// writes are visible. Every kernel calls PDL_WAIT before it reads what an
// earlier kernel wrote or writes anything (kernels/cuda's
// TestKernelsWaitForPredecessor checks the source); the GEMVs first issue
// their weight loads, which depend on no kernel.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_LAUNCH()
#define PDL_WAIT()
#endif

// l2_prefetch_share asks L2 for this block's share of the bytes [p, p +
// bytes) (the grid's blocks split its 128-byte lines in order, the block's
// threads its share): a kernel that leaves DRAM idle fetches the weights of
// the projection after it (kernels/cuda's l2Next). Nothing when p is null.
__device__ __forceinline__ void l2_prefetch_share(const char *p, long long bytes) {
	if (p == nullptr || bytes <= 0) return;
	long long lines = (bytes + 127) >> 7;
	long long blocks = (long long)gridDim.x * gridDim.y * gridDim.z;
	long long b = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
	long long per = (lines + blocks - 1) / blocks, l0 = b * per, l1 = min(l0 + per, lines);
	int nt = blockDim.x * blockDim.y * blockDim.z, tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	for (long long l = l0 + tid; l < l1; l += nt) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + (l << 7)));
}

// cp.async (sm_80 and later): cp_async16 copies 16 bytes (both addresses
// 16-byte aligned) from global src to shared dst, bypassing L1, or
// zero-fills dst when !ok (src is then not read but must be a valid
// address). A thread's copies form groups (cp_async_commit);
// cp_async_wait<N> waits until at most the newest N groups are in flight,
// after which the thread (and, after a barrier, the block) sees the rest.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok) {
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ float sigmoid_ref(float x) { return 1.0f / (1.0f + (float)exp(-(double)x)); }

__device__ __forceinline__ float silu_ref(float x) { return x * sigmoid_ref(x); }

// softplus_ref is torch's softplus (beta 1, threshold 20).
__device__ __forceinline__ float softplus_ref(float x) {
	return x > 20.0f ? x : (float)log1p(exp((double)x));
}

__device__ __forceinline__ double warp_sum_d(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// block_sum_d returns the sum of v over the block to every thread.
// blockDim.x must be a multiple of 32 and every thread must call it.
__device__ double block_sum_d(double v) {
	__shared__ double part[32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum_d(v);
	__syncthreads(); // part may still be read by a previous call
	if (lane == 0) part[warp] = v;
	__syncthreads();
	double s = 0;
	for (int i = 0; i < nw; i++) s += part[i];
	return s;
}

// inv_rms returns 1/sqrt(mean(x^2) + eps) the way the CPU oracle does:
// the sum of squares in double, the mean and eps in float.
__device__ __forceinline__ float inv_rms(double ss, int n, float eps) {
	float ms = (float)ss / (float)n;
	return 1.0f / (float)sqrt((double)(ms + eps));
}

// f32_to_bf16_bits rounds to nearest even (NaN stays a quiet NaN).
__device__ __forceinline__ unsigned short f32_to_bf16_bits(float f) {
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}

// A kernel whose output a bf16 GEMM reads next also writes the output's
// bf16 copy (its "twin", rounded as f32_to_bf16 rounds) when the twin
// pointer is set, so that the GEMM needs no conversion launch of its own.
__device__ __forceinline__ void twin1(unsigned short *yb, long long i, float v) {
	if (yb) yb[i] = f32_to_bf16_bits(v);
}

// out1 and out4 store a float32 output unless the caller left it out (y
// null: only its bf16 twin is read, see kernels/cuda's linearOnly).
__device__ __forceinline__ void out1(float *y, long long i, float v) {
	if (y) y[i] = v;
}

__device__ __forceinline__ void out4(float *y, long long i, float4 v) {
	if (y) *(float4 *)(y + i) = v;
}

// twin4 stores four consecutive values at yb + i (i a multiple of 4).
__device__ __forceinline__ void twin4(unsigned short *yb, long long i, float4 v) {
	if (yb)
		*(uint2 *)(yb + i) = make_uint2(f32_to_bf16_bits(v.x) | ((unsigned)f32_to_bf16_bits(v.y) << 16),
		                                f32_to_bf16_bits(v.z) | ((unsigned)f32_to_bf16_bits(v.w) << 16));
}
