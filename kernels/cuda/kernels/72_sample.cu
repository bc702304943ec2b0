// Sampling on the device (Backend.Sample): temperature, top-k, min-p, top-p,
// penalties, logit bias, stop bans and logprobs, so that only the chosen ids
// and the logprobs asked for cross to the host. model/sample's draw is the
// specification. Three kernels run per call:
//
//   sample_prep  (blocks per row × rows): copies each row's logits into its
//                float64 work row, applies the row's sparse adjustments in
//                the host's float32 order, and reduces its chunk's argmax
//                of the adjusted logits and maximum of the raw ones.
//   sample_exp   (blocks per row × rows): turns the work row into the
//                unnormalized probabilities exp((v − max)/T), counts those at
//                or above min-p, and sums exp(raw − raw max) for logprobs.
//   sample_rows  (one block per row): top-k, min-p, top-p and the draw as
//                selections in the order "probability descending, ties by
//                lower id", then the logprobs and the top-N.
//
// A selection finds the element where a running count or mass over that
// order crosses a threshold without sorting the row: a radix descent over
// the element's 64-bit key, 4 bits per pass, with per-thread private
// histograms in shared memory summed in a fixed order (so a draw is the
// same at every run), until the bin that holds the crossing has at most
// SAMPLE_CAP elements; those are gathered into shared memory, sorted, and
// one thread walks them with the host's own sequential sums. When the
// candidates the host sums fit in SAMPLE_CAP (a top-k or min-p set of at
// most 2048, with or without top-p after it; a vocabulary of at most 2048)
// the walk is the host's arithmetic, sum for sum. Otherwise the total and
// the masses before the gathered bin are tree sums, which may differ from
// the host's sequential ones in the last bits.
//
// The probability key is the float64 bit pattern of p (≥ 0, so its order is
// p's), shifted left by 2 (p ≤ 1 leaves the top two bits zero), so the order
// of keys is the host's order of probabilities and ties of p (distinct
// logits that round to one p) fall to the lower id as on the host. The top-N
// key is the order-preserving map of the float64 logprob.

#define SAMPLE_PREP_THREADS 256
#define SAMPLE_THREADS 512 // 16 warps: one per radix bin in the reduction
#define SAMPLE_BINS 16
#define SAMPLE_CAP 2048 // elements gathered and sorted in shared memory
#define SAMPLE_UNROLL 8 // keys a thread loads at once
#define SAMPLE_TOPN 20  // kernels.MaxSampleTopN
#define SAMPLE_NO_ID 0x7fffffff
#define NEG_INF_D __longlong_as_double((long long)0xfff0000000000000ull)

// SampleRowArgs.flags
#define SAMPLE_GREEDY 1  // the argmax of the adjusted logits
#define SAMPLE_SCORE 2   // the logprob of target (a prompt token), no draw
#define SAMPLE_LOGPROB 4 // report the token's logprob (and top_n alternatives)

// SampleAdjust.ops, in the order they apply
#define SAMPLE_REPEAT 1   // divide a positive logit by scale, multiply any other
#define SAMPLE_PENALIZE 2 // subtract sub
#define SAMPLE_BIAS 4     // add bias
#define SAMPLE_BAN 8      // -Inf

// SampleRowArgs is one row's draw (kernels.SampleRow), 64 bytes, as the Go
// side writes it.
struct SampleRowArgs {
	double temperature, top_p, min_p, u;
	int top_k, top_n, flags, target;
	int adj_start, adj_count; // the row's entries of the adjustment array
	int pslot;                // its work row, or -1 (score rows, plain greedy rows)
	int pad;
};

// SampleAdjust is one token's adjustment (kernels.LogitAdjust), 20 bytes.
struct SampleAdjust {
	int id, ops;
	float scale, sub, bias;
};

// SamplePart is what one block of sample_prep and sample_exp reduces from
// its chunk of a row.
struct SamplePart {
	double best; // the largest adjusted logit
	int best_id; // its lowest id
	float raw_max;
	double raw_sum; // Σ exp(raw − raw max), for logprobs
	int min_p_count; // probabilities ≥ min_p
	int pad;
};

// SampleOut is one row's result, 256 bytes, as the Go side reads it.
struct SampleOut {
	int id, n_top;
	double logprob;
	int top_id[SAMPLE_TOPN];
	double top_logprob[SAMPLE_TOPN];
};

// sample_adjust applies a to logit v, each operation rounded to float32
// on its own (no contraction), as model/sample's Adjustment.Apply.
__device__ __forceinline__ float sample_adjust(float v, const SampleAdjust &a) {
	if (a.ops & SAMPLE_REPEAT) v = v > 0.0f ? __fdiv_rn(v, a.scale) : __fmul_rn(v, a.scale);
	if (a.ops & SAMPLE_PENALIZE) v = __fsub_rn(v, a.sub);
	if (a.ops & SAMPLE_BIAS) v = __fadd_rn(v, a.bias);
	if (a.ops & SAMPLE_BAN) v = NEG_INF;
	return v;
}

// better_argmax reports whether (v, i) beats (bv, bi): larger, or equal
// (−0 equals +0, as the host compares) at a lower id.
__device__ __forceinline__ bool better_argmax(double v, int i, double bv, int bi) {
	return v > bv || (v == bv && i < bi);
}

// block_argmax reduces (v, i) over the block (blockDim.x a multiple of 32,
// at most 1024) and returns the winner to every thread.
__device__ void block_argmax(double &v, int &i) {
	__shared__ double pv[32];
	__shared__ int pi[32];
	for (int o = 16; o > 0; o >>= 1) {
		double v2 = __shfl_xor_sync(0xffffffffu, v, o);
		int i2 = __shfl_xor_sync(0xffffffffu, i, o);
		if (better_argmax(v2, i2, v, i)) v = v2, i = i2;
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	__syncthreads(); // pv may still be read by a previous call
	if (lane == 0) pv[warp] = v, pi[warp] = i;
	__syncthreads();
	v = pv[0], i = pi[0];
	for (int w = 1; w < nw; w++)
		if (better_argmax(pv[w], pi[w], v, i)) v = pv[w], i = pi[w];
}

// block_max_f returns the largest v over the block to every thread.
__device__ float block_max_f(float v) {
	__shared__ float part[32];
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	__syncthreads();
	if (lane == 0) part[warp] = v;
	__syncthreads();
	v = part[0];
	for (int w = 1; w < nw; w++) v = fmaxf(v, part[w]);
	return v;
}

// block_sum_i returns the sum of v over the block to every thread.
__device__ int block_sum_i(int v) {
	__shared__ int part[32];
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	__syncthreads();
	if (lane == 0) part[warp] = v;
	__syncthreads();
	int s = 0;
	for (int w = 0; w < nw; w++) s += part[w];
	return s;
}

// sample_prep: grid (blocks per row, rows). Block b of row r takes ids
// [b·chunk, (b+1)·chunk): it copies the raw logits into the row's work row
// (when it has one), applies the row's adjustments that fall in the chunk
// (sorted by id), and writes the chunk's adjusted argmax and raw maximum.
extern "C" __global__ void __launch_bounds__(SAMPLE_PREP_THREADS)
sample_prep(double *work, SamplePart *part, const float *logits, int n, int chunk, const SampleRowArgs *rows,
            const SampleAdjust *adj) {
	PDL_LAUNCH();
	PDL_WAIT();
	const SampleRowArgs &a = rows[blockIdx.y];
	const float *raw = logits + (long long)blockIdx.y * n;
	double *w = a.pslot >= 0 ? work + (long long)a.pslot * n : nullptr;
	int start = blockIdx.x * chunk, end = min(n, start + chunk);
	float raw_max = NEG_INF;
#pragma unroll 4
	for (int i = start + threadIdx.x; i < end; i += blockDim.x) {
		float v = __ldg(raw + i);
		raw_max = fmaxf(raw_max, v);
		if (w) w[i] = v;
	}
	if (w && a.adj_count > 0) {
		__syncthreads(); // the chunk is copied before any adjustment lands
		int lo = a.adj_start, hi = a.adj_start + a.adj_count;
		while (lo < hi) { // the first adjustment at or after start
			int mid = (lo + hi) >> 1;
			if (adj[mid].id < start) lo = mid + 1;
			else hi = mid;
		}
		for (int e = lo + threadIdx.x; e < a.adj_start + a.adj_count; e += blockDim.x) {
			SampleAdjust j = adj[e];
			if (j.id >= end) break;
			w[j.id] = sample_adjust(__ldg(raw + j.id), j);
		}
		__syncthreads();
	}
	double best = NEG_INF_D;
	int best_id = SAMPLE_NO_ID;
#pragma unroll 4
	for (int i = start + threadIdx.x; i < end; i += blockDim.x) {
		double v = w ? w[i] : (double)__ldg(raw + i);
		if (better_argmax(v, i, best, best_id)) best = v, best_id = i;
	}
	block_argmax(best, best_id);
	raw_max = block_max_f(raw_max);
	if (threadIdx.x == 0) {
		SamplePart &p = part[(long long)blockIdx.y * gridDim.x + blockIdx.x];
		p.best = best, p.best_id = best_id, p.raw_max = raw_max;
	}
}

// SampleRowMax is what the blocks of a row found, merged in block order.
struct SampleRowMax {
	double best;
	int best_id;
	float raw_max;
};

__device__ SampleRowMax sample_row_max(const SamplePart *part, int spb) {
	SampleRowMax m = {NEG_INF_D, SAMPLE_NO_ID, NEG_INF};
	for (int b = 0; b < spb; b++) {
		const SamplePart &p = part[b];
		if (better_argmax(p.best, p.best_id, m.best, m.best_id)) m.best = p.best, m.best_id = p.best_id;
		m.raw_max = fmaxf(m.raw_max, p.raw_max);
	}
	return m;
}

// sample_exp: grid (blocks per row, rows), the chunks of sample_prep. For a
// row that draws at a temperature, the work row becomes its unnormalized
// probabilities exp((v − max)/T) (the most likely is exactly 1), and the
// chunk counts those at or above min_p; for a row that reports logprobs,
// the chunk sums exp(raw − raw max).
extern "C" __global__ void __launch_bounds__(SAMPLE_PREP_THREADS)
sample_exp(double *work, SamplePart *part, const float *logits, int n, int chunk, const SampleRowArgs *rows) {
	PDL_LAUNCH();
	PDL_WAIT();
	const SampleRowArgs &a = rows[blockIdx.y];
	bool draws = a.pslot >= 0 && !(a.flags & (SAMPLE_GREEDY | SAMPLE_SCORE));
	bool logprobs = a.flags & SAMPLE_LOGPROB;
	if (!draws && !logprobs) return;
	SamplePart *row_part = part + (long long)blockIdx.y * gridDim.x;
	SampleRowMax m = sample_row_max(row_part, gridDim.x);
	const float *raw = logits + (long long)blockIdx.y * n;
	double *w = work + (long long)max(a.pslot, 0) * n;
	int start = blockIdx.x * chunk, end = min(n, start + chunk);
	double sum = 0;
	int count = 0;
#pragma unroll 4
	for (int i = start + threadIdx.x; i < end; i += blockDim.x) {
		if (draws) {
			double p = exp(__ddiv_rn(__dsub_rn(w[i], m.best), a.temperature));
			w[i] = p;
			count += a.min_p > 0 && p >= a.min_p;
		}
		if (logprobs) sum += exp((double)__ldg(raw + i) - (double)m.raw_max);
	}
	sum = block_sum_d(sum);
	count = block_sum_i(count);
	if (threadIdx.x == 0) row_part[blockIdx.x].raw_sum = sum, row_part[blockIdx.x].min_p_count = count;
}

// ---- selections (sample_rows) ----

// A SampleBound is a prefix of the order (key descending, id ascending):
// the elements at or before (key, id).
struct SampleBound {
	unsigned long long key;
	int id;
};

__device__ __forceinline__ bool sample_in(SampleBound b, unsigned long long k, int i) {
	return k > b.key || (k == b.key && i <= b.id);
}

// sample_before reports whether (ka, ia) comes before (kb, ib) in the order.
__device__ __forceinline__ bool sample_before(unsigned long long ka, int ia, unsigned long long kb, int ib) {
	return ka > kb || (ka == kb && ia < ib);
}

// SampleProbs keys a work row of probabilities (its mass is the probability).
struct SampleProbs {
	const double *p;
	__device__ __forceinline__ unsigned long long key(int i) const {
		return (unsigned long long)__double_as_longlong(__ldg(p + i)) << 2;
	}
	__device__ static __forceinline__ double mass(unsigned long long k) {
		return __longlong_as_double((long long)(k >> 2));
	}
};

// sample_prob_key is the key of probability p.
__device__ __forceinline__ unsigned long long sample_prob_key(double p) {
	return (unsigned long long)__double_as_longlong(p) << 2;
}

// SampleLogprobs keys a raw row by its logprobs (raw − lse), for the top-N;
// only counts are selected on it.
struct SampleLogprobs {
	const float *raw;
	double lse;
	__device__ __forceinline__ unsigned long long key(int i) const {
		unsigned long long u = (unsigned long long)__double_as_longlong((double)__ldg(raw + i) - lse);
		return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
	}
	__device__ static __forceinline__ double mass(unsigned long long) { return 0; }
};

// What a selection looks for: the count-th element, the first element
// where the running mass reaches x (top-p: the host's `for acc < x`), or the
// first where x less the running mass falls below zero (the draw: the
// host's `u -= p; if u < 0`).
#define SEL_COUNT 0
#define SEL_REACH 1
#define SEL_DRAW 2

// SampleSel is a selection's state: the threshold, the running sum before
// the active elements (SEL_REACH: the mass; SEL_DRAW: x less the mass) and
// the number of elements before them.
struct SampleSel {
	int mode;
	int count;     // SEL_COUNT: the rank sought (1-based)
	double factor; // x = factor·(mass of the bound), when x_of_mass
	bool x_of_mass;
	bool id_order; // that mass is summed in id order (the host's unsorted sum)
	double x;
	double run;
	int before;
};

// SamplePick is a selection's result.
struct SamplePick {
	unsigned long long key;
	int id;
	int rank;      // its place in the order within the bound (1-based)
	double mass;   // SEL_REACH: the running mass through it
	bool gathered; // the shared arrays hold the whole bound, sorted
};

__device__ __forceinline__ void sel_start(SampleSel &s, double mass) {
	if (s.x_of_mass) s.x = __dmul_rn(s.factor, mass);
	s.run = s.mode == SEL_DRAW ? s.x : 0.0;
}

// sel_crosses reports whether the crossing lies among c elements of mass m
// that follow the running state.
__device__ __forceinline__ bool sel_crosses(const SampleSel &s, int c, double m) {
	switch (s.mode) {
	case SEL_COUNT: return s.before + c >= s.count;
	case SEL_REACH: return s.run + m >= s.x;
	default: return s.run - m < 0;
	}
}

__device__ __forceinline__ void sel_pass(SampleSel &s, int c, double m) {
	s.before += c;
	if (s.mode == SEL_REACH) s.run += m;
	else if (s.mode == SEL_DRAW) s.run -= m;
}

// sample_load loads the keys of elements i0, i0 + SAMPLE_THREADS, … (a
// thread's next SAMPLE_UNROLL elements) at once, so that a block of one row
// keeps enough loads in flight; those past n get 0.
template <class Src>
__device__ __forceinline__ void sample_load(const Src &src, int n, int i0, unsigned long long (&k)[SAMPLE_UNROLL]) {
#pragma unroll
	for (int u = 0; u < SAMPLE_UNROLL; u++) {
		int i = i0 + u * SAMPLE_THREADS;
		k[u] = i < n ? src.key(i) : 0;
	}
}

// SampleShared is sample_rows' shared memory besides the histograms.
struct SampleShared {
	double bin_mass[SAMPLE_BINS];
	int bin_count[SAMPLE_BINS];
	int warp_count[SAMPLE_THREADS / 32];
	int gathered;
	int tie_id;
	SamplePick pick;
};

// sample_hist counts (and weighs) the elements of bound b whose key
// matches prefix under mask by their 4 bits at shift, into sh's bins:
// every thread into its own column of hc/hm, then one warp per bin sums
// the columns in a fixed order.
template <class Src>
__device__ void sample_hist(const Src &src, int n, SampleBound b, unsigned long long prefix, unsigned long long mask,
                            int shift, bool weigh, int *hc, double *hm, SampleShared &sh) {
	__syncthreads(); // the histogram columns alias the gathered elements
	for (int d = 0; d < SAMPLE_BINS; d++) hc[d * SAMPLE_THREADS + threadIdx.x] = 0, hm[d * SAMPLE_THREADS + threadIdx.x] = 0;
	for (int i0 = threadIdx.x; i0 < n; i0 += SAMPLE_THREADS * SAMPLE_UNROLL) {
		unsigned long long k[SAMPLE_UNROLL];
		sample_load(src, n, i0, k);
#pragma unroll
		for (int u = 0; u < SAMPLE_UNROLL; u++) {
			int i = i0 + u * SAMPLE_THREADS;
			if (i >= n || (k[u] & mask) != prefix || !sample_in(b, k[u], i)) continue;
			int d = (int)(k[u] >> shift) & (SAMPLE_BINS - 1);
			hc[d * SAMPLE_THREADS + threadIdx.x]++;
			if (weigh) hm[d * SAMPLE_THREADS + threadIdx.x] += Src::mass(k[u]);
		}
	}
	__syncthreads();
	int d = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int c = 0;
	double m = 0;
	for (int j = lane; j < SAMPLE_THREADS; j += 32) c += hc[d * SAMPLE_THREADS + j], m += hm[d * SAMPLE_THREADS + j];
	for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
	m = warp_sum_d(m);
	if (lane == 0) sh.bin_count[d] = c, sh.bin_mass[d] = m;
	__syncthreads();
}

// sample_gather copies the elements of bound b whose key matches prefix
// under mask (at most SAMPLE_CAP) into gk/gi: in id order when in_order
// (the whole row, which then fits), else in any order. It returns their
// number to every thread.
template <class Src>
__device__ int sample_gather(const Src &src, int n, SampleBound b, unsigned long long prefix, unsigned long long mask,
                             bool in_order, unsigned long long *gk, int *gi, SampleShared &sh) {
	__syncthreads(); // the arrays alias the histogram columns
	if (in_order) {
		for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS) gk[i] = src.key(i), gi[i] = i;
		__syncthreads();
		return n;
	}
	if (threadIdx.x == 0) sh.gathered = 0;
	__syncthreads();
	int lane = threadIdx.x & 31;
	for (int i0 = threadIdx.x; i0 - threadIdx.x < n; i0 += SAMPLE_THREADS * SAMPLE_UNROLL) {
		unsigned long long k[SAMPLE_UNROLL];
		sample_load(src, n, i0, k);
#pragma unroll
		for (int u = 0; u < SAMPLE_UNROLL; u++) {
			int i = i0 + u * SAMPLE_THREADS;
			bool take = i < n && (k[u] & mask) == prefix && sample_in(b, k[u], i);
			unsigned ballot = __ballot_sync(0xffffffffu, take);
			int at = 0;
			if (lane == 0 && ballot) at = atomicAdd(&sh.gathered, __popc(ballot));
			at = __shfl_sync(0xffffffffu, at, 0) + __popc(ballot & ((1u << lane) - 1));
			if (take && at < SAMPLE_CAP) gk[at] = k[u], gi[at] = i;
		}
	}
	__syncthreads();
	return min(sh.gathered, SAMPLE_CAP);
}

// sample_sort sorts the c gathered elements into the order (bitonic,
// padded to a power of two with elements that come last).
__device__ void sample_sort(int c, unsigned long long *gk, int *gi) {
	int size = 1;
	while (size < c) size <<= 1;
	for (int i = c + threadIdx.x; i < size; i += SAMPLE_THREADS) gk[i] = 0, gi[i] = SAMPLE_NO_ID;
	for (int k = 2; k <= size; k <<= 1) {
		for (int j = k >> 1; j > 0; j >>= 1) {
			__syncthreads();
			for (int t = threadIdx.x; t < size / 2; t += SAMPLE_THREADS) {
				int lo = 2 * t - (t & (j - 1)), hi = lo + j;
				bool hi_first = sample_before(gk[hi], gi[hi], gk[lo], gi[lo]);
				if (hi_first == ((lo & k) == 0)) {
					unsigned long long tk = gk[lo];
					int ti = gi[lo];
					gk[lo] = gk[hi], gi[lo] = gi[hi], gk[hi] = tk, gi[hi] = ti;
				}
			}
		}
	}
	__syncthreads();
}

// sample_walk (thread 0) finds the selection's element among the c sorted
// gathered elements with the host's sequential sums; past the last element
// it takes the last, as the host does.
template <class Src>
__device__ SamplePick sample_walk(const SampleSel &s, int c, const unsigned long long *gk, const int *gi) {
	if (c <= 0) {
		SamplePick none = {0, 0, s.before + 1, s.run, false};
		return none;
	}
	int j = c - 1;
	double run = s.run;
	if (s.mode == SEL_COUNT) {
		j = min(max(s.count - s.before - 1, 0), c - 1);
	} else {
		for (int t = 0; t < c; t++) {
			double p = Src::mass(gk[t]);
			if (s.mode == SEL_REACH) {
				run += p;
				if (run >= s.x) { j = t; break; }
			} else {
				run -= p;
				if (run < 0) { j = t; break; }
			}
		}
	}
	SamplePick pk = {gk[j], gi[j], s.before + j + 1, run, false};
	return pk;
}

// sample_tie_id returns, to every thread, the id of the j-th element (id
// order, 1-based) of bound b whose key is k.
template <class Src>
__device__ int sample_tie_id(const Src &src, int n, SampleBound b, unsigned long long k, int j, SampleShared &sh) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (threadIdx.x == 0) sh.tie_id = SAMPLE_NO_ID;
	int seen = 0;
	for (int base = 0; base < n && seen < j; base += SAMPLE_THREADS) {
		int i = base + threadIdx.x;
		bool hit = i < n && src.key(i) == k && sample_in(b, k, i);
		unsigned ballot = __ballot_sync(0xffffffffu, hit);
		__syncthreads(); // warp_count may still be read
		if (lane == 0) sh.warp_count[warp] = __popc(ballot);
		__syncthreads();
		int off = seen, total = 0;
		for (int w = 0; w < SAMPLE_THREADS / 32; w++) {
			if (w < warp) off += sh.warp_count[w];
			total += sh.warp_count[w];
		}
		if (hit && off + __popc(ballot & ((1u << lane) - 1)) + 1 == j) sh.tie_id = i;
		seen += total;
	}
	__syncthreads();
	return sh.tie_id;
}

// sample_tie resolves a crossing inside c elements of one key k (more than
// fit in shared memory): the j-th of them in id order, j from the count or
// from their equal masses.
template <class Src>
__device__ SamplePick sample_tie(const Src &src, int n, SampleBound b, const SampleSel &s, unsigned long long k, int c,
                                 SampleShared &sh) {
	double q = Src::mass(k);
	int j = c;
	if (s.mode == SEL_COUNT) {
		j = min(max(s.count - s.before, 1), c);
	} else if (q > 0) {
		// The host adds (or subtracts) the q's one by one; j·q is that sum
		// up to rounding. Step to the first j that crosses.
		double need = s.mode == SEL_REACH ? (s.x - s.run) / q : s.run / q;
		j = (int)fmin(fmax(ceil(need), 1.0), (double)c);
		auto crossed = [&](int t) {
			double m = __dmul_rn((double)t, q);
			return s.mode == SEL_REACH ? __dadd_rn(s.run, m) >= s.x : __dsub_rn(s.run, m) < 0;
		};
		while (j > 1 && crossed(j - 1)) j--;
		while (j < c && !crossed(j)) j++;
	}
	SamplePick pk = {k, sample_tie_id(src, n, b, k, j, sh), s.before + j, __dadd_rn(s.run, __dmul_rn((double)j, q)), false};
	return pk;
}

// sample_select finds the selection's element within bound b, which holds
// nb elements: a radix descent over the keys until the bin of the crossing
// fits in shared memory, then a sorted walk (see the top of the file).
template <class Src>
__device__ SamplePick sample_select(const Src &src, int n, SampleBound b, int nb, SampleSel s, int *hc, double *hm,
                                    unsigned long long *gk, int *gi, SampleShared &sh) {
	unsigned long long prefix = 0, mask = 0;
	int active = nb;
	bool started = !s.x_of_mass;
	if (started) sel_start(s, 0);
	for (int shift = 60; active > SAMPLE_CAP && shift >= 0; shift -= 4) {
		sample_hist(src, n, b, prefix, mask, shift, s.mode != SEL_COUNT, hc, hm, sh);
		if (!started) {
			double mass = 0;
			for (int d = SAMPLE_BINS - 1; d >= 0; d--) mass += sh.bin_mass[d];
			sel_start(s, mass);
			started = true;
		}
		int last = 0;
		while (last < SAMPLE_BINS && sh.bin_count[last] == 0) last++; // the lowest bin holding any: the order's end
		if (last == SAMPLE_BINS) { // nothing in the bound (the caller's count was wrong): take the first
			active = 0;
			break;
		}
		int d = SAMPLE_BINS - 1;
		for (;; d--) {
			if (sh.bin_count[d] == 0) continue;
			if (d == last || sel_crosses(s, sh.bin_count[d], sh.bin_mass[d])) break;
			sel_pass(s, sh.bin_count[d], sh.bin_mass[d]);
		}
		prefix |= (unsigned long long)d << shift;
		mask |= (unsigned long long)(SAMPLE_BINS - 1) << shift;
		active = sh.bin_count[d];
	}
	if (active > SAMPLE_CAP) return sample_tie(src, n, b, s, prefix, active, sh);
	bool whole = mask == 0;
	int c = sample_gather(src, n, b, prefix, mask, whole && nb == n && s.id_order, gk, gi, sh);
	if (!started && s.id_order) { // the host's unsorted sum, in id order
		if (threadIdx.x == 0) {
			double mass = 0;
			for (int t = 0; t < c; t++) mass += Src::mass(gk[t]);
			sh.bin_mass[0] = mass;
		}
		__syncthreads();
		sel_start(s, sh.bin_mass[0]);
		started = true;
	}
	sample_sort(c, gk, gi);
	if (threadIdx.x == 0) {
		if (!started) { // the host's sum over the sorted candidates
			double mass = 0;
			for (int t = 0; t < c; t++) mass += Src::mass(gk[t]);
			sel_start(s, mass);
		}
		sh.pick = sample_walk<Src>(s, c, gk, gi);
		sh.pick.gathered = whole;
	}
	__syncthreads();
	SamplePick pk = sh.pick;
	__syncthreads(); // sh.pick is written again by the next selection
	return pk;
}

// sample_draw is model/sample's draw over the row's probabilities: top-k,
// then min-p, then top-p, then the uniform u. It returns the token.
__device__ int sample_draw(const SampleRowArgs &a, const double *p, int n, int min_p_count, int *hc, double *hm,
                           unsigned long long *gk, int *gi, SampleShared &sh) {
	SampleProbs src = {p};
	SampleBound b = {0, SAMPLE_NO_ID}; // everything
	int nb = n;
	bool cut = a.top_k > 0 && a.top_k < n; // a top-k of the whole vocabulary cuts nothing
	bool filtered = cut || a.min_p > 0;     // the host sums the kept candidates in order
	if (cut) {
		SampleSel s = {SEL_COUNT, a.top_k};
		SamplePick pk = sample_select(src, n, b, nb, s, hc, hm, gk, gi, sh);
		b = {pk.key, pk.id}, nb = a.top_k;
	}
	if (a.min_p > 0) {
		// The most likely has p = 1, so min-p keeps p ≥ min_p: a prefix
		// of the order, as the top-k is; the shorter one is their meet.
		SampleBound m = {sample_prob_key(a.min_p), SAMPLE_NO_ID};
		if (m.key > b.key || (m.key == b.key && b.id == SAMPLE_NO_ID)) b = m, nb = min_p_count;
	}
	if (a.top_p > 0 && a.top_p < 1) {
		SampleSel s = {SEL_REACH, 0, a.top_p, true, !filtered};
		SamplePick pk = sample_select(src, n, b, nb, s, hc, hm, gk, gi, sh);
		SampleSel d = {SEL_DRAW, 0, 0, false, false, __dmul_rn(a.u, pk.mass)};
		SampleBound kept = {pk.key, pk.id};
		if (pk.gathered) { // the sorted kept candidates are the arrays' prefix
			if (threadIdx.x == 0) {
				sel_start(d, 0);
				sh.pick = sample_walk<SampleProbs>(d, pk.rank, gk, gi);
			}
			__syncthreads();
			int id = sh.pick.id;
			__syncthreads();
			return id;
		}
		return sample_select(src, n, kept, pk.rank, d, hc, hm, gk, gi, sh).id;
	}
	SampleSel s = {SEL_DRAW, 0, a.u, true, !filtered};
	return sample_select(src, n, b, nb, s, hc, hm, gk, gi, sh).id;
}

// sample_rows: one block per row. It merges the chunks' reductions, draws
// (or takes the argmax, or the scored target), and writes the token with
// its logprob and the top_n most likely tokens of the raw logits (ties:
// lower id), as model/sample's PickWithHistory and Score.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
sample_rows(SampleOut *out, const double *work, const SamplePart *part, const float *logits, int n, int spb,
            const SampleRowArgs *rows) {
	PDL_LAUNCH();
	PDL_WAIT();
	extern __shared__ __align__(16) unsigned char sample_smem[];
	double *hm = (double *)sample_smem;                        // [SAMPLE_BINS][SAMPLE_THREADS]
	int *hc = (int *)(hm + SAMPLE_BINS * SAMPLE_THREADS);      // [SAMPLE_BINS][SAMPLE_THREADS]
	unsigned long long *gk = (unsigned long long *)sample_smem; // [SAMPLE_CAP], over the histograms
	int *gi = (int *)(gk + SAMPLE_CAP);                        // [SAMPLE_CAP]
	__shared__ SampleShared sh;
	const SampleRowArgs a = rows[blockIdx.x];
	const SamplePart *row_part = part + (long long)blockIdx.x * spb;
	const float *raw = logits + (long long)blockIdx.x * n;
	SampleRowMax m = sample_row_max(row_part, spb);
	int id;
	if (a.flags & SAMPLE_SCORE) {
		id = a.target;
	} else if (a.flags & SAMPLE_GREEDY) {
		id = m.best_id;
	} else {
		int min_p_count = 0;
		for (int b = 0; b < spb; b++) min_p_count += row_part[b].min_p_count;
		id = sample_draw(a, work + (long long)a.pslot * n, n, min_p_count, hc, hm, gk, gi, sh);
	}
	SampleOut &o = out[blockIdx.x];
	if (!(a.flags & SAMPLE_LOGPROB)) {
		if (threadIdx.x == 0) o.id = id, o.n_top = 0, o.logprob = 0;
		return;
	}
	double sum = 0;
	for (int b = 0; b < spb; b++) sum += row_part[b].raw_sum;
	double lse = (double)m.raw_max + log(sum);
	int top = min(a.top_n, n);
	if (top > 0) {
		SampleLogprobs src = {raw, lse};
		SampleBound all = {0, SAMPLE_NO_ID};
		SampleSel s = {SEL_COUNT, top};
		SamplePick pk = sample_select(src, n, all, n, s, hc, hm, gk, gi, sh);
		SampleBound b = {pk.key, pk.id};
		int c = sample_gather(src, n, b, 0, 0, false, gk, gi, sh);
		sample_sort(c, gk, gi);
		for (int t = threadIdx.x; t < c; t += SAMPLE_THREADS) {
			o.top_id[t] = gi[t];
			o.top_logprob[t] = (double)__ldg(raw + gi[t]) - lse;
		}
	}
	if (threadIdx.x == 0) o.id = id, o.n_top = top, o.logprob = (double)__ldg(raw + id) - lse;
}
