// Paged KV cache and gated attention. The cache of each of k and v is laid
// out [layer][page][pageSize][kvHeads][headDim]. Per-row metadata: pos[r]
// (absolute position) and pageOff[r] (where row r's sequence's page list
// starts in pages).
//
// The cache's elements are float32, or bf16 (COHORT_CUDA_KV=bf16: the
// upper half of the float32, rounded to nearest even by kv_write_bf16) for
// the *_kvbf16 entries, which load bf16 and widen it to float32 (exact) and
// otherwise compute as their float32 twins.

// kv_load1 and kv_load4 read one cache element, or the four elements
// 4j..4j+3 from p (16-byte aligned for float32, 8 for bf16), as float32.
__device__ __forceinline__ float kv_load1(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float kv_load1(const unsigned short *p, long long i) { return __uint_as_float((unsigned)p[i] << 16); }
__device__ __forceinline__ float4 kv_load4(const float *p, int j) { return ((const float4 *)p)[j]; }
__device__ __forceinline__ float4 kv_load4(const unsigned short *p, int j) {
	uint2 u = ((const uint2 *)p)[j];
	return make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
}

// kv_store converts a float32 k or v value to the cache's element type:
// float32 as is, bf16 rounded to nearest even (f32_to_bf16_bits, as
// f32_to_bf16 rounds weights).
__device__ __forceinline__ void kv_store(float *dst, float v) { *dst = v; }
__device__ __forceinline__ void kv_store(unsigned short *dst, float v) { *dst = f32_to_bf16_bits(v); }

// kv_write: block r stores row r's k and v [KV*hd] at its position.
template <typename T>
__device__ __forceinline__ void kv_write(T *kc, T *vc, const float *k, const float *v,
		const int *pos, const int *pageOff, const int *pages, int kvw, int pageSize, int numPages, int layer) {
	PDL_LAUNCH();
	PDL_WAIT();
	int r = blockIdx.x;
	int p = pos[r];
	int page = pages[pageOff[r] + p / pageSize];
	long long off = (((long long)layer * numPages + page) * pageSize + p % pageSize) * kvw;
	for (int i = threadIdx.x; i < kvw; i += blockDim.x) {
		kv_store(&kc[off + i], k[(long long)r * kvw + i]);
		kv_store(&vc[off + i], v[(long long)r * kvw + i]);
	}
}

// kv_write_f32 and kv_write_bf16: kv_write into a float32 or a bf16 cache.
extern "C" __global__ void kv_write_f32(float *kc, float *vc, const float *k, const float *v,
		const int *pos, const int *pageOff, const int *pages, int kvw, int pageSize, int numPages, int layer) {
	kv_write(kc, vc, k, v, pos, pageOff, pages, kvw, pageSize, numPages, layer);
}

extern "C" __global__ void kv_write_bf16(unsigned short *kc, unsigned short *vc, const float *k, const float *v,
		const int *pos, const int *pageOff, const int *pages, int kvw, int pageSize, int numPages, int layer) {
	kv_write(kc, vc, k, v, pos, pageOff, pages, kvw, pageSize, numPages, layer);
}

#define ATTN_WARPS 4
#define ATTN_MAX_PER_LANE 8 // head dims up to 256

// attention_f32: block (row r, head h), 4 warps. Warp w visits positions
// w, w+4, ... <= pos[r] with an online softmax in float32; lane l holds head
// dims l, l+32, ... The warps' partial results are merged at the end and
// multiplied by sigmoid(gate).
// (attn_rows is its body, KT the cache's element type.)
template <typename KT>
__device__ __forceinline__ void attn_rows(float *out, const float *q, const float *gate,
		const KT *kc, const KT *vc, const int *pos, const int *pageOff, const int *pages,
		int H, int KV, int hd, int pageSize, int numPages, int layer, float scale) {
	__shared__ float sm_m[ATTN_WARPS], sm_l[ATTN_WARPS];
	__shared__ float sm_acc[ATTN_WARPS][ATTN_MAX_PER_LANE * 32];
	int r = blockIdx.x, h = blockIdx.y;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int p = pos[r];
	const int *pg = pages + pageOff[r];
	int kvh = h / (H / KV);
	const float *qh = q + ((long long)r * H + h) * hd;
	float qr[ATTN_MAX_PER_LANE], acc[ATTN_MAX_PER_LANE];
#pragma unroll
	for (int i = 0; i < ATTN_MAX_PER_LANE; i++) {
		int d = i * 32 + lane;
		qr[i] = d < hd ? qh[d] : 0.0f;
		acc[i] = 0.0f;
	}
	float m = NEG_INF, l = 0.0f;
	for (int t = warp; t <= p; t += ATTN_WARPS) {
		long long off = (((long long)layer * numPages + pg[t / pageSize]) * pageSize + t % pageSize) * (long long)KV * hd + (long long)kvh * hd;
		float s = 0.0f;
#pragma unroll
		for (int i = 0; i < ATTN_MAX_PER_LANE; i++) {
			int d = i * 32 + lane;
			if (d < hd) s += qr[i] * kv_load1(kc, off + d);
		}
		s = warp_sum_f(s) * scale;
		float mn = fmaxf(m, s);
		float corr = expf(m - mn), e = expf(s - mn);
		l = l * corr + e;
#pragma unroll
		for (int i = 0; i < ATTN_MAX_PER_LANE; i++) {
			int d = i * 32 + lane;
			if (d < hd) acc[i] = acc[i] * corr + e * kv_load1(vc, off + d);
		}
		m = mn;
	}
	if (lane == 0) {
		sm_m[warp] = m;
		sm_l[warp] = l;
	}
#pragma unroll
	for (int i = 0; i < ATTN_MAX_PER_LANE; i++) {
		int d = i * 32 + lane;
		if (d < hd) sm_acc[warp][d] = acc[i];
	}
	__syncthreads();
	float M = NEG_INF;
	for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, sm_m[w]);
	float L = 0.0f, f[ATTN_WARPS];
	for (int w = 0; w < ATTN_WARPS; w++) {
		f[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - M) : 0.0f;
		L += sm_l[w] * f[w];
	}
	const float *gh = gate + ((long long)r * H + h) * hd;
	float *oh = out + ((long long)r * H + h) * hd;
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float o = 0.0f;
		for (int w = 0; w < ATTN_WARPS; w++) o += sm_acc[w][d] * f[w];
		oh[d] = o / L * sigmoid_ref(gh[d]);
	}
}

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_f32(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages,
		int H, int KV, int hd, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	attn_rows(out, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale);
}

// attention_kvbf16: attention_f32 over a bf16 cache.
extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_kvbf16(float *out, const float *q, const float *gate,
		const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages,
		int H, int KV, int hd, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	attn_rows(out, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale);
}

// Decode attention, GQA-aware and split over keys (flash-decoding). Block
// (row r = blockIdx.x, y = blockIdx.y, slice s = blockIdx.z) takes KV head
// kvh = y / HG and its query heads h0 = kvh*G + (y % HG)*GM, ... (at most
// GM of them, G = H/KV, HG = ceil(G/GM)) over slice s of the row's
// positions: with n = pos[r]+1 and c = ceil(n/S) rounded up to a multiple
// of 2*DA_WARPS, at least DA_MIN_SLICE, positions [s*c, min((s+1)*c, n)).
// So one read of a key or value serves every query head of the block, and
// the grid (which depends only on the batch's shape, never its positions:
// CUDA graphs replay it) fills the SMs with few rows. A short row fills
// only its first ceil(n/c) slices; the block of an empty slice (never slice
// 0) writes only its ml entries, as empty (maximum -inf, sum 0), and leaves
// its part unwritten, which attention_decode_combine never reads.
// Warp w takes positions lo+2w, lo+2w+1, then 8 further on, with an online
// softmax in float32 per head (lane l holds dims 4l..4l+3, 128+4l..; the
// scores in log2 units, scale·log2(e), for exp2f); the warps merge in
// order. With S = 1 the block writes the gated output, else its slice's
// maximum (log2 units) and sum (ml, 2 floats per (row, head, slice)) and its
// unnormalized output (part, hd floats each), which attention_decode_combine
// merges in a fixed order: the result depends only on the batch's shape
// and positions. Needs hd % 4 == 0 and hd <= 256 (16-byte loads).
// DA_MIN_SLICE (a multiple of 2*DA_WARPS) keeps a short row to few partials
// (at most ceil(n/DA_MIN_SLICE) slices: 9 at 144 positions, where S = 128
// alone gives 18 of 8), and stays small: each further 2*DA_WARPS positions
// of a slice add an iteration, a round trip to memory, to every warp's
// serial loop, while a further slice costs the combine one more hd-float
// read, by up to decodeCombineGroups groups of its threads in parallel.
#define DA_WARPS 4
#define DA_V4 2 // float4 chunks per lane: head dims up to 256
#define DA_MIN_SLICE 16

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// attn_store_gated writes the four output dims 4j.. of a head whose row
// starts at off: the unnormalized sum o over the softmax's sum L, times
// sigmoid(gate).
__device__ __forceinline__ void attn_store_gated(float *out, const float *gate, long long off, int j, float4 o, float L) {
	float4 gt = ((const float4 *)(gate + off))[j];
	float4 y;
	y.x = o.x / L * sigmoid_ref(gt.x);
	y.y = o.y / L * sigmoid_ref(gt.y);
	y.z = o.z / L * sigmoid_ref(gt.z);
	y.w = o.w / L * sigmoid_ref(gt.w);
	((float4 *)(out + off))[j] = y;
}

// attn_decode_store writes row r's new key and value of KV head kvh
// (knew, vnew [rows][KV·hd]) into the cache at its position p, as
// kv_write does, for the block whose slice holds p: it alone reads p, after
// the barrier. For decode rows only (a row of a prefill chunk would read
// positions that other rows' blocks write).
template <typename KT>
__device__ __forceinline__ void attn_decode_store(KT *kc, KT *vc, const float *knew, const float *vnew, const int *pg,
		int r, int p, long long kvw, long long hoff, long long base, int hd, int pageSize) {
	long long off = ((base + pg[p / pageSize]) * pageSize + p % pageSize) * kvw + hoff;
	for (int i = threadIdx.x; i < hd; i += blockDim.x) {
		kv_store(&kc[off + i], knew[r * kvw + hoff + i]);
		kv_store(&vc[off + i], vnew[r * kvw + hoff + i]);
	}
	__syncthreads();
}

template <int GM, typename KT>
__device__ __forceinline__ void attn_decode(float *out, float *part, float *ml, const float *q, const float *gate,
		KT *kc, KT *vc, const int *pos, const int *pageOff, const int *pages,
		int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S, const float *knew, const float *vnew) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ float4 sm_acc[DA_WARPS][GM][DA_V4 * 32];
	__shared__ float sm_m[DA_WARPS][GM], sm_l[DA_WARPS][GM];
	int r = blockIdx.x, s = blockIdx.z;
	int G = H / KV, HG = (G + GM - 1) / GM;
	int kvh = blockIdx.y / HG, c0 = (blockIdx.y % HG) * GM;
	int h0 = kvh * G + c0, gn = min(GM, G - c0);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int hd4 = hd >> 2;
	int n = pos[r] + 1;
	int chunk = (n + S - 1) / S;
	chunk = max((chunk + 2 * DA_WARPS - 1) / (2 * DA_WARPS) * (2 * DA_WARPS), DA_MIN_SLICE);
	int lo = min(s * chunk, n), hi = min(lo + chunk, n);
	if (lo == hi) { // an empty slice (S > 1: slice 0 holds position 0)
		for (int g = threadIdx.x; g < gn; g += blockDim.x) {
			long long slot = ((long long)r * H + h0 + g) * S + s;
			ml[2 * slot] = NEG_INF;
			ml[2 * slot + 1] = 0.0f;
		}
		return;
	}
	const int *pg = pages + pageOff[r];
	long long kvw = (long long)KV * hd, base = (long long)layer * numPages, hoff = (long long)kvh * hd;
	if (knew && n - 1 >= lo && n - 1 < hi) attn_decode_store(kc, vc, knew, vnew, pg, r, n - 1, kvw, hoff, base, hd, pageSize);
	float4 qr[GM][DA_V4], acc[GM][DA_V4];
	float m[GM], l[GM];
#pragma unroll
	for (int g = 0; g < GM; g++) {
		const float4 *qh = (const float4 *)(q + ((long long)r * H + h0 + min(g, gn - 1)) * hd);
#pragma unroll
		for (int i = 0; i < DA_V4; i++) {
			int j = i * 32 + lane;
			qr[g][i] = j < hd4 && g < gn ? qh[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			acc[g][i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
		m[g] = NEG_INF;
		l[g] = 0.0f;
	}
	float scale2 = scale * 1.4426950408889634f; // scores in log2 units: exp2f
	// t0's page-list entry tq and place tr in the page, and the pages pa of
	// t0 and pb of t0+1, loaded an iteration ahead (no divisions in the loop).
	int t0 = lo + 2 * warp;
	int tq = t0 / pageSize, tr = t0 - tq * pageSize, pa = 0, pb = 0;
	if (t0 < hi) {
		pa = pg[tq];
		pb = tr + 1 < pageSize ? pa : t0 + 1 < hi ? pg[tq + 1] : pa;
	}
	for (; t0 < hi; t0 += 2 * DA_WARPS) {
		bool has1 = t0 + 1 < hi;
		long long off0 = ((base + pa) * pageSize + tr) * kvw + hoff;
		long long off1 = has1 ? ((base + pb) * pageSize + (tr + 1 < pageSize ? tr + 1 : 0)) * kvw + hoff : off0;
		int tn = t0 + 2 * DA_WARPS;
		for (tr += 2 * DA_WARPS; tr >= pageSize; tr -= pageSize) tq++;
		if (tn < hi) {
			pa = pg[tq];
			pb = tr + 1 < pageSize ? pa : tn + 1 < hi ? pg[tq + 1] : pa;
		}
		const KT *k0 = kc + off0, *k1 = kc + off1, *v0 = vc + off0, *v1 = vc + off1;
		float4 kr0[DA_V4], kr1[DA_V4], vr0[DA_V4], vr1[DA_V4];
#pragma unroll
		for (int i = 0; i < DA_V4; i++) {
			int j = i * 32 + lane;
			float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			kr0[i] = j < hd4 ? kv_load4(k0, j) : z;
			kr1[i] = j < hd4 ? kv_load4(k1, j) : z;
			vr0[i] = j < hd4 ? kv_load4(v0, j) : z;
			vr1[i] = j < hd4 && has1 ? kv_load4(v1, j) : z;
		}
		float s0[GM], s1[GM];
#pragma unroll
		for (int g = 0; g < GM; g++) {
			s0[g] = 0.0f;
			s1[g] = 0.0f;
#pragma unroll
			for (int i = 0; i < DA_V4; i++) {
				s0[g] += dot4(qr[g][i], kr0[i]);
				s1[g] += dot4(qr[g][i], kr1[i]);
			}
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
			for (int g = 0; g < GM; g++) {
				s0[g] += __shfl_xor_sync(0xffffffffu, s0[g], o);
				s1[g] += __shfl_xor_sync(0xffffffffu, s1[g], o);
			}
		}
#pragma unroll
		for (int g = 0; g < GM; g++) {
			float a = s0[g] * scale2, b = has1 ? s1[g] * scale2 : NEG_INF;
			float mn = fmaxf(m[g], fmaxf(a, b));
			float corr = exp2f(m[g] - mn), e0 = exp2f(a - mn), e1 = exp2f(b - mn);
			l[g] = l[g] * corr + e0 + e1;
#pragma unroll
			for (int i = 0; i < DA_V4; i++) {
				float4 x = acc[g][i];
				x.x = x.x * corr + e0 * vr0[i].x + e1 * vr1[i].x;
				x.y = x.y * corr + e0 * vr0[i].y + e1 * vr1[i].y;
				x.z = x.z * corr + e0 * vr0[i].z + e1 * vr1[i].z;
				x.w = x.w * corr + e0 * vr0[i].w + e1 * vr1[i].w;
				acc[g][i] = x;
			}
			m[g] = mn;
		}
	}
#pragma unroll
	for (int g = 0; g < GM; g++) {
		if (lane == 0) {
			sm_m[warp][g] = m[g];
			sm_l[warp][g] = l[g];
		}
#pragma unroll
		for (int i = 0; i < DA_V4; i++) sm_acc[warp][g][i * 32 + lane] = acc[g][i];
	}
	__syncthreads();
	for (int idx = threadIdx.x; idx < gn * hd4; idx += blockDim.x) {
		int g = idx / hd4, j = idx % hd4;
		float M = NEG_INF;
		for (int w = 0; w < DA_WARPS; w++) M = fmaxf(M, sm_m[w][g]);
		float L = 0.0f;
		float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		for (int w = 0; w < DA_WARPS; w++) {
			float f = sm_l[w][g] > 0.0f ? exp2f(sm_m[w][g] - M) : 0.0f;
			L += sm_l[w][g] * f;
			float4 a = sm_acc[w][g][j];
			o.x += a.x * f;
			o.y += a.y * f;
			o.z += a.z * f;
			o.w += a.w * f;
		}
		long long head = (long long)r * H + h0 + g;
		if (S == 1) {
			attn_store_gated(out, gate, head * hd, j, o, L);
		} else {
			long long slot = head * S + s;
			((float4 *)(part + slot * hd))[j] = o;
			if (j == 0) {
				ml[2 * slot] = M;
				ml[2 * slot + 1] = L;
			}
		}
	}
}

// The entries: GM = 1, 2, 4 query heads a block.
extern "C" __global__ void __launch_bounds__(DA_WARPS * 32) attention_decode_g1(float *out, float *part, float *ml,
		const float *q, const float *gate, float *kc, float *vc, const int *pos, const int *pageOff,
		const int *pages, int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S,
		const float *knew, const float *vnew) {
	attn_decode<1, float>(out, part, ml, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale, S, knew, vnew);
}
extern "C" __global__ void __launch_bounds__(DA_WARPS * 32) attention_decode_g2(float *out, float *part, float *ml,
		const float *q, const float *gate, float *kc, float *vc, const int *pos, const int *pageOff,
		const int *pages, int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S,
		const float *knew, const float *vnew) {
	attn_decode<2, float>(out, part, ml, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale, S, knew, vnew);
}
extern "C" __global__ void __launch_bounds__(DA_WARPS * 32) attention_decode_g4(float *out, float *part, float *ml,
		const float *q, const float *gate, float *kc, float *vc, const int *pos, const int *pageOff,
		const int *pages, int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S,
		const float *knew, const float *vnew) {
	attn_decode<4, float>(out, part, ml, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale, S, knew, vnew);
}

// attention_decode_kvbf16_g1, _g2, _g4: attention_decode_g* over a bf16 cache
// (g4 with a minimum of one block an SM: 137 registers, where ptxas would
// otherwise keep 128 and spill 4 bytes; NVRTC 11.8, sm_90).
extern "C" __global__ void __launch_bounds__(DA_WARPS * 32) attention_decode_kvbf16_g1(float *out, float *part, float *ml,
		const float *q, const float *gate, unsigned short *kc, unsigned short *vc, const int *pos, const int *pageOff,
		const int *pages, int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S,
		const float *knew, const float *vnew) {
	attn_decode<1, unsigned short>(out, part, ml, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale, S, knew, vnew);
}
extern "C" __global__ void __launch_bounds__(DA_WARPS * 32) attention_decode_kvbf16_g2(float *out, float *part, float *ml,
		const float *q, const float *gate, unsigned short *kc, unsigned short *vc, const int *pos, const int *pageOff,
		const int *pages, int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S,
		const float *knew, const float *vnew) {
	attn_decode<2, unsigned short>(out, part, ml, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale, S, knew, vnew);
}
extern "C" __global__ void __launch_bounds__(DA_WARPS * 32, 1) attention_decode_kvbf16_g4(float *out, float *part, float *ml,
		const float *q, const float *gate, unsigned short *kc, unsigned short *vc, const int *pos, const int *pageOff,
		const int *pages, int H, int KV, int hd, int pageSize, int numPages, int layer, float scale, int S,
		const float *knew, const float *vnew) {
	attn_decode<4, unsigned short>(out, part, ml, q, gate, kc, vc, pos, pageOff, pages, H, KV, hd, pageSize, numPages, layer, scale, S, knew, vnew);
}

// attention_decode_combine: block (row r, head h) merges the S slices
// (S <= DC_MAX_SLICES) of attention_decode_g* and multiplies by
// sigmoid(gate). Slice s weighs w_s = exp2(m_s - M), M the largest
// maximum, or 0 if its sum l_s is 0 (an empty slice; slice 0 never is).
// The empty slices of a row are its last ones: the block reads the ml
// entries of all S, then only the slices before ne, one past the last of a
// nonzero sum (never an empty slice's part, which is left unwritten). The
// output's 4-dim chunk j and the sum of l_s·w_s are summed over the slices
// in SG = blockDim.x/hd4 groups (thread (group g, chunk j = tid % hd4):
// slices g, g+SG, ... < ne, in order), then the groups in order. The block
// (at most DC_THREADS threads, whole warps) is chosen by attentionDecode
// from S and the head dim alone, so the result depends only on S, the head
// dim and the slices' contents.
#define DC_THREADS 1024
#define DC_MAX_SLICES 1024

extern "C" __global__ void __launch_bounds__(DC_THREADS) attention_decode_combine(float *out, const float *gate,
		const float *part, const float *ml, int H, int hd, int S) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ float sm_w[DC_MAX_SLICES], sm_lw[DC_MAX_SLICES];
	__shared__ float sm_red[DC_THREADS / 32], sm_L[DC_THREADS];
	__shared__ int sm_ne[DC_THREADS / 32];
	__shared__ float4 sm_o[DC_THREADS];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nt = blockDim.x;
	long long head = (long long)blockIdx.x * H + blockIdx.y;
	const float2 *mh = (const float2 *)(ml + head * S * 2);
	float M = NEG_INF;
	int ne = 0;
	for (int s = tid; s < S; s += nt) {
		float2 x = mh[s];
		M = fmaxf(M, x.x);
		if (x.y > 0.0f) ne = s + 1;
	}
	for (int o = 16; o > 0; o >>= 1) {
		M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
		ne = max(ne, __shfl_xor_sync(0xffffffffu, ne, o));
	}
	if (lane == 0) {
		sm_red[warp] = M;
		sm_ne[warp] = ne;
	}
	__syncthreads();
	M = NEG_INF;
	ne = 0;
	for (int w = 0; w < nt / 32; w++) {
		M = fmaxf(M, sm_red[w]);
		ne = max(ne, sm_ne[w]);
	}
	for (int s = tid; s < ne; s += nt) {
		float2 x = mh[s];
		float w = x.y > 0.0f ? exp2f(x.x - M) : 0.0f;
		sm_w[s] = w;
		sm_lw[s] = x.y * w;
	}
	__syncthreads();
	int hd4 = hd >> 2, SG = nt / hd4;
	int j = tid % hd4, g = tid / hd4;
	const float4 *pj = (const float4 *)(part + head * S * hd) + j;
	if (g < SG) {
		float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		float L = 0.0f;
#pragma unroll 4
		for (int s = g; s < ne; s += SG) {
			float w = sm_w[s];
			float4 a = pj[(long long)s * hd4];
			o.x += a.x * w;
			o.y += a.y * w;
			o.z += a.z * w;
			o.w += a.w * w;
			L += sm_lw[s];
		}
		sm_o[tid] = o;
		if (j == 0) sm_L[g] = L;
	}
	__syncthreads();
	if (g == 0) {
		float L = sm_L[0];
		float4 o = sm_o[j];
		for (int k = 1; k < SG; k++) {
			float4 a = sm_o[k * hd4 + j];
			o.x += a.x;
			o.y += a.y;
			o.z += a.z;
			o.w += a.w;
			L += sm_L[k];
		}
		attn_store_gated(out, gate, head * hd, j, o, L);
	}
}

#define ATTN_PREP_MAX_HD 256

// attn_prep_f32 is SplitQueryGate, the per-head q and k RMSNorms and RoPE
// of both in one kernel: block (row r, head y) takes query head y (y < H;
// its gate half is copied out) or key head y-H of row r, normalizes it
// (zero-centered weight), rotates its first rd dims at the row's position
// (rotate-half pairs), and writes it out. The expressions and their order
// are those of rmsnorm_f32 and rope_f32.
extern "C" __global__ void attn_prep_f32(float *q, float *gate, float *kout, const float *qg, const float *k,
		const float *qw, const float *kw, const int *pos, const float *invf, int H, int KV, int hd, int rd, float eps) {
	PDL_LAUNCH();
	PDL_WAIT();
	__shared__ float v[ATTN_PREP_MAX_HD];
	int r = blockIdx.x, y = blockIdx.y;
	const float *src, *w;
	float *dst;
	if (y < H) {
		long long head = (long long)r * H + y;
		src = qg + head * 2 * hd;
		dst = q + head * hd;
		w = qw;
		for (int j = threadIdx.x; j < hd; j += blockDim.x) gate[head * hd + j] = src[hd + j];
	} else {
		long long head = (long long)r * KV + (y - H);
		src = k + head * hd;
		dst = kout + head * hd;
		w = kw;
	}
	double ss = 0;
	for (int j = threadIdx.x; j < hd; j += blockDim.x) ss += (double)src[j] * (double)src[j];
	float inv = inv_rms(block_sum_d(ss), hd, eps);
	for (int j = threadIdx.x; j < hd; j += blockDim.x) v[j] = src[j] * inv * (1.0f + w[j]);
	__syncthreads();
	int half = rd / 2;
	float p = (float)pos[r];
	for (int j = threadIdx.x; j < hd; j += blockDim.x) {
		float o = v[j];
		if (j < rd) {
			int i = j < half ? j : j - half;
			float ang = p * invf[i];
			float c = (float)cos((double)ang), s = (float)sin((double)ang);
			o = j < half ? v[j] * c - v[j + half] * s : v[j] * c + v[j - half] * s;
		}
		dst[j] = o;
	}
}

// attn_prep_rows_f32 is attn_prep_f32 with a warp per (row, head) for steps
// of many rows: warp w of block b (W warps a block) takes head slot
// (W b + w) % (H + KV) of row (W b + w) / (H + KV); lane l holds the float4
// chunks l and l + 32 of the head, the sum of squares is summed per lane in
// double and then across the warp, and a rotated dim's rotate-half partner
// (j +- rd/2) comes from another lane by shuffles. Needs hd % 4 == 0,
// hd <= 256, rd % 8 == 0, rd <= 128 (every rotated dim in chunk 0) and
// 16-byte aligned rows (attn_prep.go checks). The expressions are
// attn_prep_f32's.
extern "C" __global__ void __launch_bounds__(256) attn_prep_rows_f32(float *__restrict__ q, float *__restrict__ gate,
		float *__restrict__ kout, const float *__restrict__ qg, const float *__restrict__ k, const float *__restrict__ qw,
		const float *__restrict__ kw, const int *__restrict__ pos, const float *__restrict__ invf, int H, int KV, int hd, int rd,
		float eps, int T) {
	PDL_LAUNCH();
	PDL_WAIT();
	const int gi = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
	if (gi >= T * (H + KV)) return; // the whole warp
	const int r = gi / (H + KV), y = gi % (H + KV), hd4 = hd >> 2;
	const float4 *src, *w;
	float4 *dst;
	if (y < H) {
		long long head = (long long)r * H + y;
		src = (const float4 *)(qg + head * 2 * hd);
		dst = (float4 *)(q + head * hd);
		w = (const float4 *)qw;
		float4 *gt = (float4 *)(gate + head * hd);
		for (int j = lane; j < hd4; j += 32) gt[j] = src[hd4 + j];
	} else {
		long long head = (long long)r * KV + (y - H);
		src = (const float4 *)(k + head * hd);
		dst = (float4 *)(kout + head * hd);
		w = (const float4 *)kw;
	}
	float4 v[2];
	double ss = 0;
#pragma unroll
	for (int c = 0; c < 2; c++) {
		const int j = lane + 32 * c;
		v[c] = j < hd4 ? src[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		ss += (double)v[c].x * (double)v[c].x + (double)v[c].y * (double)v[c].y + (double)v[c].z * (double)v[c].z +
		      (double)v[c].w * (double)v[c].w;
	}
	const float inv = inv_rms(warp_sum_d(ss), hd, eps);
#pragma unroll
	for (int c = 0; c < 2; c++) {
		const int j = lane + 32 * c;
		if (j < hd4) {
			float4 wv = __ldg(w + j);
			v[c] = make_float4(v[c].x * inv * (1.0f + wv.x), v[c].y * inv * (1.0f + wv.y), v[c].z * inv * (1.0f + wv.z),
				v[c].w * inv * (1.0f + wv.w));
		}
	}
	// Chunk 0 holds every rotated dim: lane l's dims 4l .. 4l + 3 pair with
	// lane l +- h4's (h4 = rd / 8 lanes a half).
	const int half = rd / 2, h4 = half / 4;
	const int src_lane = lane < h4 ? lane + h4 : (lane < 2 * h4 ? lane - h4 : lane);
	float pv[4] = {__shfl_sync(0xffffffffu, v[0].x, src_lane), __shfl_sync(0xffffffffu, v[0].y, src_lane),
		__shfl_sync(0xffffffffu, v[0].z, src_lane), __shfl_sync(0xffffffffu, v[0].w, src_lane)};
	if (lane < 2 * h4) {
		const float p = (float)pos[r];
		float o[4] = {v[0].x, v[0].y, v[0].z, v[0].w};
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int j = 4 * lane + e, i = j < half ? j : j - half;
			const float ang = p * invf[i];
			const float c = (float)cos((double)ang), sn = (float)sin((double)ang);
			o[e] = j < half ? o[e] * c - pv[e] * sn : o[e] * c + pv[e] * sn;
		}
		v[0] = make_float4(o[0], o[1], o[2], o[3]);
	}
#pragma unroll
	for (int c = 0; c < 2; c++) {
		const int j = lane + 32 * c;
		if (j < hd4) dst[j] = v[c];
	}
}
