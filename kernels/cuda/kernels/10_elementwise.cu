// Elementwise and row-copy kernels. Sizes are element counts; grids are
// 1-D over elements (grid-stride loops) or one block per row.

extern "C" __global__ void add_f32(float *y, const float *a, const float *b, long long n) {
	PDL_LAUNCH();
	PDL_WAIT();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
		y[i] = a[i] + b[i];
}

// swiglu_f32: y = silu(gate) ⊙ up, and y's bf16 twin when yb is set (y is
// left out when null).
extern "C" __global__ void swiglu_f32(float *y, unsigned short *yb, const float *gate, const float *up, long long n) {
	PDL_LAUNCH();
	PDL_WAIT();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float v = silu_ref(gate[i]) * up[i];
		out1(y, i, v);
		twin1(yb, i, v);
	}
}

// swiglu4_in loads four gate or up values as float32: a float4, or four
// bf16 (a uint2, the first value in the low half).
__device__ __forceinline__ float4 swiglu4_in(const float4 *__restrict__ p, long long i) { return p[i]; }
__device__ __forceinline__ float4 swiglu4_in(const uint2 *__restrict__ p, long long i) {
	uint2 v = p[i];
	return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
	                   __uint_as_float(v.y & 0xffff0000u));
}

// swiglu4 is swiglu_f32 four values a thread (n4 groups of 4) over gate
// and up in float32 (In float4) or bf16 (In uint2).
template <typename In>
__device__ __forceinline__ void swiglu4(float4 *__restrict__ y, unsigned short *__restrict__ yb, const In *__restrict__ gate,
		const In *__restrict__ up, long long n4) {
	PDL_LAUNCH();
	PDL_WAIT();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
		float4 a = swiglu4_in(gate, i), b = swiglu4_in(up, i);
		float4 v = make_float4(silu_ref(a.x) * b.x, silu_ref(a.y) * b.y, silu_ref(a.z) * b.z, silu_ref(a.w) * b.w);
		if (y) y[i] = v;
		twin4(yb, 4 * i, v);
	}
}

// swiglu4_f32 is swiglu_f32 over float4s (every pointer 16-byte aligned;
// ops.go checks).
extern "C" __global__ void swiglu4_f32(float4 *__restrict__ y, unsigned short *__restrict__ yb, const float4 *__restrict__ gate,
		const float4 *__restrict__ up, long long n4) {
	swiglu4(y, yb, gate, up, n4);
}

// swiglu4_bf16in is swiglu4_f32 of bf16 gate and up (the pointers 8-byte
// aligned): the products of SwiGLULinear on cuBLASLt (COHORT_CUDA_SWIGLU_BF16).
extern "C" __global__ void swiglu4_bf16in(float4 *__restrict__ y, unsigned short *__restrict__ yb, const uint2 *__restrict__ gate,
		const uint2 *__restrict__ up, long long n4) {
	swiglu4(y, yb, gate, up, n4);
}

// swiglu8_bf16in is swiglu4_bf16in for a bf16 output only (y left out),
// eight values a thread (n8 groups of 8; the pointers 16-byte aligned):
// each thread's loads and store are 16 bytes, twice swiglu4's, so twice the
// bytes are in flight (swiglu4_bf16in moved 2.1 of an H100's 3.35 TB/s).
// The same bits as swiglu4_bf16in's twin.
extern "C" __global__ void swiglu8_bf16in(uint4 *__restrict__ yb, const uint4 *__restrict__ gate, const uint4 *__restrict__ up,
		long long n8) {
	PDL_LAUNCH();
	PDL_WAIT();
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
		const uint4 g = gate[i], u = up[i];
		const unsigned gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
		unsigned r[4];
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const float lo = silu_ref(__uint_as_float(gw[k] << 16)) * __uint_as_float(uw[k] << 16);
			const float hi = silu_ref(__uint_as_float(gw[k] & 0xffff0000u)) * __uint_as_float(uw[k] & 0xffff0000u);
			r[k] = f32_to_bf16_bits(lo) | ((unsigned)f32_to_bf16_bits(hi) << 16);
		}
		yb[i] = make_uint4(r[0], r[1], r[2], r[3]);
	}
}

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(unsigned short v) { return __uint_as_float((unsigned)v << 16); } // bf16 bits

// embedding_rows gathers the block's row of table (float32 or bf16 bits)
// as float32; ids outside [vocabStart, vocabStart + rows) give zeros.
template <typename E>
__device__ __forceinline__ void embedding_rows(float *y, const E *table, const int *ids, int H, int rows, int vocabStart) {
	PDL_WAIT();
	int i = blockIdx.x;
	int r = ids[i] - vocabStart;
	bool ok = r >= 0 && r < rows;
	float *dst = y + (long long)i * H;
	const E *src = table + (long long)(ok ? r : 0) * H;
	for (int c = threadIdx.x; c < H; c += blockDim.x) dst[c] = ok ? to_f32(src[c]) : 0.0f;
}

// embedding_f32: one block per id; rows outside [0, rows) give zeros.
extern "C" __global__ void embedding_f32(float *y, const float *table, const int *ids, int H, int rows, int vocabStart) {
	PDL_LAUNCH();
	embedding_rows(y, table, ids, H, rows, vocabStart);
}

// select_rows_f32: one block per output row.
extern "C" __global__ void select_rows_f32(float *y, const float *x, const int *rows, int cols) {
	PDL_LAUNCH();
	PDL_WAIT();
	int i = blockIdx.x;
	const float *src = x + (long long)rows[i] * cols;
	float *dst = y + (long long)i * cols;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

// split_query_gate_f32: block (row, head) copies q_h and g_h out of the
// per-head interleaved [q_0 | g_0 | q_1 | g_1 | ...] row.
extern "C" __global__ void split_query_gate_f32(float *q, float *g, const float *qg, int heads, int hd) {
	PDL_LAUNCH();
	PDL_WAIT();
	int r = blockIdx.x, h = blockIdx.y;
	const float *src = qg + (long long)r * heads * 2 * hd + (long long)h * 2 * hd;
	float *dq = q + (long long)r * heads * hd + (long long)h * hd;
	float *dg = g + (long long)r * heads * hd + (long long)h * hd;
	for (int i = threadIdx.x; i < hd; i += blockDim.x) {
		dq[i] = src[i];
		dg[i] = src[hd + i];
	}
}

// rope_f32 rotates the first rd dims of every head of row blockIdx.x in
// place (rotate-half pairs (i, i+rd/2)); invf holds the rd/2 inverse
// frequencies computed on the host exactly as the CPU oracle does.
extern "C" __global__ void rope_f32(float *x, const int *pos, const float *invf, int cols, int hd, int rd) {
	PDL_LAUNCH();
	PDL_WAIT();
	int r = blockIdx.x;
	int half = rd / 2, heads = cols / hd;
	float p = (float)pos[r];
	float *row = x + (long long)r * cols;
	for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
		int h = t / half, i = t % half;
		float ang = p * invf[i];
		float c = (float)cos((double)ang), s = (float)sin((double)ang);
		float *v = row + h * hd;
		float x0 = v[i], x1 = v[i + half];
		v[i] = x0 * c - x1 * s;
		v[i + half] = x1 * c + x0 * s;
	}
}
