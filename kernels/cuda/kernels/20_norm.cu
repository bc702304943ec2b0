// RMSNorm kernels: one block per group of g columns (a row, or a head).

// rmsnorm_group normalizes the block's group: x / rms(x) * (1 + w) in the
// zero-centered form (ZC), else x / rms(x) * w.
template <bool ZC>
__device__ __forceinline__ void rmsnorm_group(float *y, const float *x, const float *w, int g, float eps) {
	PDL_WAIT();
	const float *xs = x + (long long)blockIdx.x * g;
	float *ys = y + (long long)blockIdx.x * g;
	double ss = 0;
	for (int j = threadIdx.x; j < g; j += blockDim.x) ss += (double)xs[j] * (double)xs[j];
	float inv = inv_rms(block_sum_d(ss), g, eps);
	for (int j = threadIdx.x; j < g; j += blockDim.x) ys[j] = xs[j] * inv * (ZC ? 1.0f + w[j] : w[j]);
}

// rmsnorm_f32 is the zero-centered form x / rms(x) * (1 + w).
extern "C" __global__ void rmsnorm_f32(float *y, const float *x, const float *w, int g, float eps) {
	PDL_LAUNCH();
	rmsnorm_group<true>(y, x, w, g, eps);
}

// plain_rmsnorm_f32 is x / rms(x) * w, the weight applied as it is (Llama,
// dense Qwen3).
extern "C" __global__ void plain_rmsnorm_f32(float *y, const float *x, const float *w, int g, float eps) {
	PDL_LAUNCH();
	rmsnorm_group<false>(y, x, w, g, eps);
}

#define ARN_KEEP 4

// add_rmsnorm_f32 writes sum = r + d and y, the zero-centered RMSNorm of
// sum (and y's bf16 twin when yb is set; y is left out when null).
// When g is a multiple of 4 and every pointer is 16-byte aligned it moves
// float4s and keeps up to ARN_KEEP of its sums in registers (the launch
// sizes the block to about g/4 threads, up to 1024), so a single wide row
// (batch-1 decode) is one round of loads, one block reduction and one round
// of stores.
extern "C" __global__ void __launch_bounds__(1024) add_rmsnorm_f32(float *sum, float *y, unsigned short *yb, const float *r, const float *d, const float *w, int g, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	long long off = (long long)blockIdx.x * g;
	double ss = 0;
	unsigned long long align = (unsigned long long)sum | (unsigned long long)y | (unsigned long long)r |
		(unsigned long long)d | (unsigned long long)w;
	if ((g & 3) == 0 && (align & 15) == 0) {
		int g4 = g >> 2;
		const float4 *r4 = (const float4 *)(r + off), *d4 = (const float4 *)(d + off), *w4 = (const float4 *)w;
		float4 *s4 = (float4 *)(sum + off);
		float4 keep[ARN_KEEP], wkeep[ARN_KEEP];
#pragma unroll
		for (int k = 0; k < ARN_KEEP; k++) {
			int j = threadIdx.x + k * blockDim.x;
			if (j < g4) {
				wkeep[k] = __ldg(w4 + j); // in flight with r and d, used after the reduction
				float4 a = r4[j], b = d4[j];
				float4 s = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
				s4[j] = s;
				keep[k] = s;
				ss += (double)s.x * (double)s.x + (double)s.y * (double)s.y + (double)s.z * (double)s.z + (double)s.w * (double)s.w;
			}
		}
		for (int j = threadIdx.x + ARN_KEEP * blockDim.x; j < g4; j += blockDim.x) {
			float4 a = r4[j], b = d4[j];
			float4 s = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
			s4[j] = s;
			ss += (double)s.x * (double)s.x + (double)s.y * (double)s.y + (double)s.z * (double)s.z + (double)s.w * (double)s.w;
		}
		float inv = inv_rms(block_sum_d(ss), g, eps);
#pragma unroll
		for (int k = 0; k < ARN_KEEP; k++) {
			int j = threadIdx.x + k * blockDim.x;
			if (j < g4) {
				float4 s = keep[k], wv = wkeep[k];
				float4 v = make_float4(s.x * inv * (1.0f + wv.x), s.y * inv * (1.0f + wv.y),
					s.z * inv * (1.0f + wv.z), s.w * inv * (1.0f + wv.w));
				out4(y, off + 4LL * j, v);
				twin4(yb, off + 4LL * j, v);
			}
		}
		// Each thread reads back only the sums it wrote itself.
		for (int j = threadIdx.x + ARN_KEEP * blockDim.x; j < g4; j += blockDim.x) {
			float4 s = s4[j], wv = w4[j];
			float4 v = make_float4(s.x * inv * (1.0f + wv.x), s.y * inv * (1.0f + wv.y),
				s.z * inv * (1.0f + wv.z), s.w * inv * (1.0f + wv.w));
			out4(y, off + 4LL * j, v);
			twin4(yb, off + 4LL * j, v);
		}
		return;
	}
	for (int j = threadIdx.x; j < g; j += blockDim.x) {
		float s = r[off + j] + d[off + j];
		sum[off + j] = s;
		ss += (double)s * (double)s;
	}
	float inv = inv_rms(block_sum_d(ss), g, eps);
	// Each thread reads back only the sums it wrote itself.
	for (int j = threadIdx.x; j < g; j += blockDim.x) {
		float v = sum[off + j] * inv * (1.0f + w[j]);
		out1(y, off + j, v);
		twin1(yb, off + j, v);
	}
}

// gated_rmsnorm_f32 is x / rms(x) * w * silu(z) with the plain weight w
// (and its bf16 twin when yb is set; y is left out when null).
extern "C" __global__ void gated_rmsnorm_f32(float *y, unsigned short *yb, const float *x, const float *z, const float *w, int g, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	long long off = (long long)blockIdx.x * g;
	if (g <= blockDim.x) {
		// One value a thread (a head of up to 256): its x, z and w are
		// loaded together and the gate is computed during the reduction.
		int j = threadIdx.x;
		bool in = j < g;
		float xv = in ? x[off + j] : 0.0f, wv = in ? w[j] : 0.0f, sz = in ? silu_ref(z[off + j]) : 0.0f;
		float inv = inv_rms(block_sum_d((double)xv * (double)xv), g, eps);
		if (in) {
			float v = xv * inv * wv * sz;
			out1(y, off + j, v);
			twin1(yb, off + j, v);
		}
		return;
	}
	double ss = 0;
	for (int j = threadIdx.x; j < g; j += blockDim.x) ss += (double)x[off + j] * (double)x[off + j];
	float inv = inv_rms(block_sum_d(ss), g, eps);
	for (int j = threadIdx.x; j < g; j += blockDim.x) {
		float v = x[off + j] * inv * w[j] * silu_ref(z[off + j]);
		out1(y, off + j, v);
		twin1(yb, off + j, v);
	}
}

// Warp-per-group forms of add_rmsnorm_f32 and gated_rmsnorm_f32 for steps
// of many rows (prefill): warp w of block b takes group W b + w (W warps a
// block, at most 8: ops.go sizes the blocks so that the grid spreads over
// the SMs), each lane moves float4s (lane l: chunks l, l + 32, ...), and
// the sum of squares is summed per lane in double and then across the warp
// by shuffles, so no block barrier is waited on. They need g % 4 == 0 and
// 16-byte aligned pointers (ops.go checks).
#define ARW_KEEP 20 // float4s a lane keeps in registers (a row of 2,560)

__device__ __forceinline__ double sq4(float4 s) {
	return (double)s.x * (double)s.x + (double)s.y * (double)s.y + (double)s.z * (double)s.z + (double)s.w * (double)s.w;
}

// arw_rows is the body of add_rmsnorm_rows_f32 (ADD: sum = r + d, stored)
// and of rmsnorm_rows_f32 (r is the sum already, d and sum unused: the
// prefill GEMM added the residual in its epilogue, linearnorm.go's
// linearAddNormLt), the same sums of squares and outputs either way.
template <bool ADD>
__device__ __forceinline__ void arw_rows(float *__restrict__ sum, float *__restrict__ y, unsigned short *__restrict__ yb,
		const float *__restrict__ r, const float *__restrict__ d, const float *__restrict__ w, int g, int rows, float eps) {
	const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
	if (row >= rows) return; // the whole warp
	const long long off = (long long)row * g;
	const int g4 = g >> 2;
	const float4 *r4 = (const float4 *)(r + off), *d4 = (const float4 *)(d + (ADD ? off : 0)), *w4 = (const float4 *)w;
	float4 *s4 = (float4 *)(sum + (ADD ? off : 0));
	float4 keep[ARW_KEEP];
	double ss = 0;
#pragma unroll
	for (int k = 0; k < ARW_KEEP; k++) {
		const int j = lane + 32 * k;
		if (j < g4) {
			float4 a = r4[j];
			if constexpr (ADD) {
				float4 b = d4[j];
				a = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
			}
			keep[k] = a;
		}
	}
#pragma unroll
	for (int k = 0; k < ARW_KEEP; k++) {
		const int j = lane + 32 * k;
		if (j < g4) {
			if constexpr (ADD) s4[j] = keep[k];
			ss += sq4(keep[k]);
		}
	}
	for (int j = lane + 32 * ARW_KEEP; j < g4; j += 32) {
		float4 s = r4[j];
		if constexpr (ADD) {
			float4 b = d4[j];
			s = make_float4(s.x + b.x, s.y + b.y, s.z + b.z, s.w + b.w);
			s4[j] = s;
		}
		ss += sq4(s);
	}
	const float inv = inv_rms(warp_sum_d(ss), g, eps);
#pragma unroll
	for (int k = 0; k < ARW_KEEP; k++) {
		const int j = lane + 32 * k;
		if (j < g4) {
			float4 s = keep[k], wv = __ldg(w4 + j);
			float4 v = make_float4(s.x * inv * (1.0f + wv.x), s.y * inv * (1.0f + wv.y), s.z * inv * (1.0f + wv.z), s.w * inv * (1.0f + wv.w));
			out4(y, off + 4LL * j, v);
			twin4(yb, off + 4LL * j, v);
		}
	}
	// Each lane reads back only the sums it wrote itself.
	for (int j = lane + 32 * ARW_KEEP; j < g4; j += 32) {
		float4 s = ADD ? s4[j] : r4[j], wv = __ldg(w4 + j);
		float4 v = make_float4(s.x * inv * (1.0f + wv.x), s.y * inv * (1.0f + wv.y), s.z * inv * (1.0f + wv.z), s.w * inv * (1.0f + wv.w));
		out4(y, off + 4LL * j, v);
		twin4(yb, off + 4LL * j, v);
	}
}

extern "C" __global__ void __launch_bounds__(256) add_rmsnorm_rows_f32(float *__restrict__ sum, float *__restrict__ y,
		unsigned short *__restrict__ yb, const float *__restrict__ r, const float *__restrict__ d, const float *__restrict__ w,
		int g, int rows, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	arw_rows<true>(sum, y, yb, r, d, w, g, rows, eps);
}

// rmsnorm_rows_f32: add_rmsnorm_rows_f32's norm of s, which already holds
// the sum.
extern "C" __global__ void __launch_bounds__(256) rmsnorm_rows_f32(float *__restrict__ y, unsigned short *__restrict__ yb,
		const float *__restrict__ s, const float *__restrict__ w, int g, int rows, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	arw_rows<false>(nullptr, y, yb, s, nullptr, w, g, rows, eps);
}

#define GRW_KEEP 2 // float4s a lane holds: groups of up to 256

// gated_rmsnorm_rows_f32 is gated_rmsnorm_f32 for groups of at most 256
// (g % 4 == 0), a warp a group.
extern "C" __global__ void __launch_bounds__(256) gated_rmsnorm_rows_f32(float *__restrict__ y, unsigned short *__restrict__ yb,
		const float *__restrict__ x, const float *__restrict__ z, const float *__restrict__ w, int g, int groups, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	const int grp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
	if (grp >= groups) return;
	const long long off = (long long)grp * g;
	const int g4 = g >> 2;
	const float4 *x4 = (const float4 *)(x + off), *z4 = (const float4 *)(z + off), *w4 = (const float4 *)w;
	float4 xv[GRW_KEEP], zv[GRW_KEEP];
	double ss = 0;
#pragma unroll
	for (int k = 0; k < GRW_KEEP; k++) {
		const int j = lane + 32 * k;
		if (j < g4) {
			xv[k] = x4[j];
			zv[k] = z4[j];
			ss += sq4(xv[k]);
		}
	}
	const float inv = inv_rms(warp_sum_d(ss), g, eps);
#pragma unroll
	for (int k = 0; k < GRW_KEEP; k++) {
		const int j = lane + 32 * k;
		if (j < g4) {
			float4 a = xv[k], b = zv[k], wv = __ldg(w4 + j);
			float4 v = make_float4(a.x * inv * wv.x * silu_ref(b.x), a.y * inv * wv.y * silu_ref(b.y),
				a.z * inv * wv.z * silu_ref(b.z), a.w * inv * wv.w * silu_ref(b.w));
			out4(y, off + 4LL * j, v);
			twin4(yb, off + 4LL * j, v);
		}
	}
}
