// Paged KV cache and gated attention. The cache of each of k and v is laid
// out [layer][page][pageSize][kvHeads][headDim]. Per-row metadata: pos[r]
// (absolute position) and pageOff[r] (where row r's sequence's page list
// starts in pages).

// kv_write_f32: block r stores row r's k and v [KV*hd] at its position.
extern "C" __global__ void kv_write_f32(float *kc, float *vc, const float *k, const float *v,
		const int *pos, const int *pageOff, const int *pages, int kvw, int pageSize, int numPages, int layer) {
	PDL_LAUNCH();
	PDL_WAIT();
	int r = blockIdx.x;
	int p = pos[r];
	int page = pages[pageOff[r] + p / pageSize];
	long long off = (((long long)layer * numPages + page) * pageSize + p % pageSize) * kvw;
	for (int i = threadIdx.x; i < kvw; i += blockDim.x) {
		kc[off + i] = k[(long long)r * kvw + i];
		vc[off + i] = v[(long long)r * kvw + i];
	}
}

#define ATTN_WARPS 4
#define ATTN_MAX_PER_LANE 8 // head dims up to 256

// attention_f32: block (row r, head h), 4 warps. Warp w visits positions
// w, w+4, ... <= pos[r] with an online softmax in float32; lane l holds head
// dims l, l+32, ... The warps' partial results are merged at the end and
// multiplied by sigmoid(gate).
extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_f32(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages,
		int H, int KV, int hd, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
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
			if (d < hd) s += qr[i] * kc[off + d];
		}
		s = warp_sum_f(s) * scale;
		float mn = fmaxf(m, s);
		float corr = expf(m - mn), e = expf(s - mn);
		l = l * corr + e;
#pragma unroll
		for (int i = 0; i < ATTN_MAX_PER_LANE; i++) {
			int d = i * 32 + lane;
			if (d < hd) acc[i] = acc[i] * corr + e * vc[off + d];
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
