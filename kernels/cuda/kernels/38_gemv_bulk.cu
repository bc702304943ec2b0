// A one-row bf16 GEMV whose weights the copy engine streams into shared
// memory (sm_90 bulk copies, COHORT_CUDA_GEMV=bulk; an experiment beside
// the register-staged tensor-core GEMV of 36_gemv_mma.cu):
// y[1, N] = x[1, K] · w[N, K]^T, float32 x and accumulation.
//
// Block (tile, part) takes the GB_ROWS weight rows of tile and the part-th
// share of K's stages of GB_KS columns. One thread asks the copy engine for
// a stage (GB_ROWS bulk copies of GB_KS·2 bytes, one a row) into a ring of
// GB_STAGES shared-memory slots, each with an mbarrier that counts the
// bytes in; the first GB_STAGES stages are asked for before PDL_WAIT (the
// weights depend on no kernel). The block's threads wait for a slot, add
// its products, and after a barrier the slot is asked for again, so up to
// GB_STAGES·GB_ROWS·GB_KS·2 bytes of a block are in flight without a
// register holding them. Thread t takes row t / 8 and, in each 64-column
// group of a stage, the 8 columns (t % 8)·8..: eight consecutive threads
// read 128 consecutive bytes of shared memory (no bank conflicts). With
// several parts a tile's blocks write their partial sums to ws and the last
// to arrive (cnt counts them, and is reset by it) adds them in part order.
// Needs K % GB_KS == 0 and 16-byte aligned rows.

#define GB_ROWS 16
#define GB_KS 256
#define GB_STAGES 5
#define GB_THREADS 128

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
#define GB_BULK 1
#endif

#ifdef GB_BULK
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// mbar_expect arrives on bar (its one arrival a phase) and adds bytes to
// the transfer count the phase waits for.
__device__ __forceinline__ void mbar_expect(unsigned long long *bar, unsigned bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// mbar_wait returns once bar's phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
	unsigned done;
	do {
		asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
		             : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
	} while (!done);
}

// bulk_load copies bytes (a multiple of 16) from global src to shared dst,
// completing them on bar.
__device__ __forceinline__ void bulk_load(void *dst, const void *src, unsigned bytes, unsigned long long *bar) {
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
	             ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// gb_issue asks for stage st (of the block's K range from stage s0) of the
// tile's rows from m0 into slot st % GB_STAGES.
__device__ __forceinline__ void gb_issue(unsigned short (*buf)[GB_ROWS * GB_KS], unsigned long long *full,
                                         const unsigned short *w, int N, int K, int m0, int s0, int st) {
	int slot = st % GB_STAGES;
	mbar_expect(&full[slot], GB_ROWS * GB_KS * 2);
	long long k0 = (long long)(s0 + st) * GB_KS;
	for (int r = 0; r < GB_ROWS; r++)
		bulk_load(&buf[slot][r * GB_KS], w + (long long)min(m0 + r, N - 1) * K + k0, GB_KS * 2, &full[slot]);
}
#endif

extern "C" __global__ void __launch_bounds__(GB_THREADS) gemv_bulk_nt1(float *y, const unsigned short *w, int N, const float *x,
                                                                      int K, float *ws, int *cnt) {
#ifdef GB_BULK
	__shared__ __align__(128) unsigned short buf[GB_STAGES][GB_ROWS * GB_KS];
	__shared__ __align__(8) unsigned long long full[GB_STAGES];
	__shared__ int last;
	int tid = threadIdx.x, row = tid >> 3, sub = tid & 7;
	int m0 = blockIdx.x * GB_ROWS, parts = gridDim.y, part = blockIdx.y;
	int stages = K / GB_KS, s0 = part * stages / parts, n = (part + 1) * stages / parts - s0;
	if (tid == 0) {
		for (int i = 0; i < GB_STAGES; i++) mbar_init(&full[i], 1);
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();
	if (tid == 0)
		for (int st = 0; st < min(n, GB_STAGES); st++) gb_issue(buf, full, w, N, K, m0, s0, st);
	PDL_WAIT(); // x is the previous kernel's output; the weights are not
	float acc = 0.0f;
	for (int st = 0; st < n; st++) {
		int slot = st % GB_STAGES;
		mbar_wait(&full[slot], (st / GB_STAGES) & 1);
		const float *xs = x + (long long)(s0 + st) * GB_KS + sub * 8;
		const unsigned short *wp = &buf[slot][row * GB_KS + sub * 8];
#pragma unroll
		for (int g = 0; g < GB_KS / 64; g++) {
			uint4 wv = *(const uint4 *)(wp + g * 64);
			float4 xa = __ldg((const float4 *)(xs + g * 64)), xb = __ldg((const float4 *)(xs + g * 64 + 4));
			acc += bf16_lo(wv.x) * xa.x + bf16_hi(wv.x) * xa.y + bf16_lo(wv.y) * xa.z + bf16_hi(wv.y) * xa.w;
			acc += bf16_lo(wv.z) * xb.x + bf16_hi(wv.z) * xb.y + bf16_lo(wv.w) * xb.z + bf16_hi(wv.w) * xb.w;
		}
		__syncthreads(); // every thread is done with the slot
		if (tid == 0 && st + GB_STAGES < n) gb_issue(buf, full, w, N, K, m0, s0, st + GB_STAGES);
	}
	PDL_LAUNCH();
	for (int o = 4; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
	int m = m0 + row;
	if (parts == 1) {
		if (sub == 0 && m < N) y[m] = acc;
		return;
	}
	if (sub == 0) ws[((long long)blockIdx.x * parts + part) * GB_ROWS + row] = acc;
	__threadfence();
	__syncthreads();
	if (tid == 0) {
		last = atomicAdd(cnt + blockIdx.x, 1) == parts - 1;
		if (last) cnt[blockIdx.x] = 0;
	}
	__syncthreads();
	if (!last) return;
	__threadfence();
	if (tid < GB_ROWS && m0 + tid < N) {
		float s = 0.0f;
		for (int p = 0; p < parts; p++) s += __ldcg(ws + ((long long)blockIdx.x * parts + p) * GB_ROWS + tid);
		y[m0 + tid] = s;
	}
#else
	PDL_WAIT();
	__trap(); // the backend launches it only on sm_90 with NVRTC 12 or later
#endif
}
