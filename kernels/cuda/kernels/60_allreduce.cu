// Collectives on device memory: the one-shot all-reduce over peer-mapped
// buffers (NVLink P2P) for decode-sized messages, and the column gather that
// turns an NCCL all-gather ([rank][T][n]) into [T][rank·n].
//
// One-shot all-reduce protocol (every rank of the group runs the same kernel
// with the same grid on its own stream; see p2p.go):
//
// Each rank owns a region in its device memory, mapped by its peers (CUDA
// peer access), laid out as
//   float data[2][cap]              two buffers, used alternately
//   u32   flags[size][gridDim.x]    flags[p][b]: the last sequence number
//                                   rank p's block b has published to us
//   u32   counters[gridDim.x]       our blocks' sequence numbers
// Every call, block b of every rank takes the next sequence number s from
// its counter (on the device, so a CUDA graph replays correctly), copies
// its slice of x into data[s & 1], and publishes s into flags[rank][b] of
// every peer with a system-scope release store. It then waits, with
// system-scope acquire loads, until every peer's block b has published s,
// and sums the slice over all ranks' data[s & 1] in rank order (so every
// rank gets bit-identical results) back into x.
//
// Reuse is safe with two buffers: a rank starts call s+2 (overwriting
// data[s & 1]) only after its block b saw every peer's block b publish s+1,
// and a peer's kernel of call s+1 runs only after its whole kernel of call s
// (which read data[s & 1]) has finished: kernels on one stream do not
// overlap. This needs every call to use every block, so the grid is fixed.
//
// Abort: the waiting loop polls a flag in mapped host memory that the
// group's abort sets; an aborted call returns without touching x.

__device__ __forceinline__ void ar_store_release_sys(unsigned int *p, unsigned int v) {
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned int ar_load_acquire_sys(const unsigned int *p) {
	unsigned int v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ unsigned int ar_load_volatile(const unsigned int *p) {
	unsigned int v;
	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

// allreduce_oneshot_f32 sums x [n] across the ranks in place. peers holds
// every rank's region base, cap is the float capacity of one data buffer
// (n <= cap), abort_flag the group's abort flag (device view of mapped host
// memory). Launch with the same grid on every rank, blockDim.x >= size.
extern "C" __global__ void allreduce_oneshot_f32(float *x, long long n, const unsigned long long *peers,
		int size, int rank, long long cap, const unsigned int *abort_flag) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ unsigned int seq;
	__shared__ int aborted;
	const int nb = gridDim.x, b = blockIdx.x;
	unsigned int *own_flags = (unsigned int *)((float *)peers[rank] + 2 * cap);
	unsigned int *counters = own_flags + size * nb;
	if (threadIdx.x == 0) {
		seq = counters[b] + 1u;
		counters[b] = seq;
		aborted = 0;
	}
	__syncthreads();
	const unsigned int s = seq;
	const long long par = (long long)(s & 1u) * cap;

	// The block's slice [lo, hi): chunks of a multiple of 4 floats.
	long long chunk = (n + nb - 1) / nb;
	chunk = (chunk + 3) & ~3LL;
	long long lo = (long long)b * chunk;
	if (lo > n) lo = n;
	long long hi = lo + chunk;
	if (hi > n) hi = n;
	const bool vec = (n & 3) == 0 && (((unsigned long long)x) & 15) == 0;

	float *mine = (float *)peers[rank] + par;
	if (vec) {
		for (long long i = lo / 4 + threadIdx.x; i < hi / 4; i += blockDim.x)
			((float4 *)mine)[i] = ((const float4 *)x)[i];
	} else {
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = x[i];
	}
	__syncthreads();

	const int p = threadIdx.x;
	if (p < size && p != rank) {
		unsigned int *theirs = (unsigned int *)((float *)peers[p] + 2 * cap) + rank * nb + b;
		__threadfence_system();
		ar_store_release_sys(theirs, s);
		const unsigned int *wait = own_flags + p * nb + b;
		unsigned int spins = 0;
		while ((int)(ar_load_acquire_sys(wait) - s) < 0) {
			if ((++spins & 255u) == 0 && ar_load_volatile(abort_flag) != 0) {
				aborted = 1;
				break;
			}
		}
	}
	__syncthreads();
	if (aborted) return;

	if (vec) {
		for (long long i = lo / 4 + threadIdx.x; i < hi / 4; i += blockDim.x) {
			float4 acc = __ldcg((const float4 *)((const float *)peers[0] + par) + i);
			for (int q = 1; q < size; q++) {
				float4 v = __ldcg((const float4 *)((const float *)peers[q] + par) + i);
				acc.x += v.x;
				acc.y += v.y;
				acc.z += v.z;
				acc.w += v.w;
			}
			((float4 *)x)[i] = acc;
		}
	} else {
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
			float acc = __ldcg((const float *)peers[0] + par + i);
			for (int q = 1; q < size; q++) acc += __ldcg((const float *)peers[q] + par + i);
			x[i] = acc;
		}
	}
}

// gather_cols_f32: y [T, size·n] from g [size, T, n] (an all-gather of
// every rank's [T, n]): y[t][r·n + i] = g[r][t][i].
extern "C" __global__ void gather_cols_f32(float *y, const float *g, int size, long long T, long long n) {
	PDL_LAUNCH();
	PDL_WAIT();
	long long total = (long long)size * T * n;
	for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total; k += (long long)gridDim.x * blockDim.x) {
		long long i = k % n;
		long long t = (k / n) % T;
		long long r = k / (n * T);
		y[t * size * n + r * n + i] = g[k];
	}
}
