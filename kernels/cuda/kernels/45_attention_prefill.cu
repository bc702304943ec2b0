// Prefill attention on tensor cores over the paged KV cache (flash-attention
// style: tiles of queries against tiles of keys, online softmax, nothing of
// size positions² in memory). The Go side (attention_prefill.go) uses it,
// behind COHORT_CUDA_FLASH=1, for sequences that bring many rows in one
// step; kv_write_f32 (40_attention.cu) has already stored their k and v.
//
// GQA packing: for KV head kvh with G = H/KV query heads, a sequence of len
// rows has len·G "M-rows" u = token·G + j (query head kvh·G + j of row
// token), which all read the same keys and values. A block takes FA_BM
// consecutive M-rows of one sequence and one KV head, so every key/value
// tile it stages in shared memory serves FA_BM query vectors whatever G is.
// Warp w owns M-rows [16w, 16w+16) of the block as the A operand of
// mma.sync m16n8k16 (bf16 inputs, float32 accumulation).
//
// Per key tile of BN positions (positions 0 .. the block's last row's
// position, read through the sequence's page list): the 256 threads copy the
// next tile's K and V (float32) into a shared staging buffer with cp.async
// while the current tile is computed, so the cache reads overlap the math.
// For the current tile they convert K and V from the staging buffer to bf16
// tiles, then each warp computes S = Q·Kᵀ (16 × BN) in registers, masks
// positions after each M-row's own (causal), updates its running row
// maximum and sum in float32 (base-2 exponent of S·scale·log2 e), rescales
// its output accumulator and adds P·V, with P rounded to bf16 as the A
// operand and V read transposed by ldmatrix. The output is divided by the
// row sum and multiplied by sigmoid(gate), as attention_f32 does.
//
// Shared-memory rows (Q, K, V all [row][head dim] bf16) are swizzled: the
// 16-byte chunk c of row r is stored at chunk c ^ (r & 7), so the fragment
// loads of 8 rows at one column and ldmatrix's 8 row reads hit distinct
// banks. This needs at least 8 chunks (head dim 64) per row. The shared
// memory is dynamic (flashSmem in attention_prefill.go; head dim 256: Q 64 KiB, the bf16 K and
// V tiles 8 KiB each, two float32 staging stages of K and V 64 KiB), one
// block an SM.
//
// Split keys (attention_prefill_split_hd*, flash-decoding style): when the
// tiles × KV heads alone would leave most SMs idle (a short chunk after a
// long cached context), the host cuts each tile's key range [0, kvEnd) into
// slices of whole key tiles and gives every slice a block. A block of a
// tile with one slice ends as above; a block of a sliced tile stores its
// unnormalized output accumulator and its running maximum (base 2) and sum
// per M-row in a partial slot, and attention_prefill_combine merges the
// slots of each tile in slice order (so the result does not depend on which
// block ran first), divides by the merged sum and applies the gate. A slice
// may lie wholly after some M-rows' positions: those keep maximum -inf, sum
// 0 and output 0, and the combine gives them weight 0 (slice 0 holds
// position 0, never masked, so the merged maximum is finite).

#define FA_WARPS 8
#define FA_THREADS (FA_WARPS * 32)
#define FA_BM (FA_WARPS * 16)
// Key tiles of the bf16-cache entries (no float32 staging, so larger tiles
// fit in shared memory: flashKeyTileKV in attention_prefill.go). At head
// dim 256 and 64 keys ptxas (NVRTC 11.8, sm_90) needs 255 registers and
// spills about 64 bytes; 32 keys fit in 217 without spilling. The LDM
// twins (ldmatrix fragments, fa_prefill) need 254 without spilling, and
// 255 with 16 bytes of spill for the split one.
#define FA_BN_KV256 64
#define FA_BN_KV128 64

// fa_pack_bf16x2 rounds lo and hi to bf16 (nearest even) and packs them,
// lo in the low half.
__device__ __forceinline__ unsigned fa_pack_bf16x2(float lo, float hi) {
	unsigned r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

// fa_mma accumulates d += a·b for one m16n8k16 bf16 tile.
__device__ __forceinline__ void fa_mma(float d[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		: "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		: "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// fa_ldmatrix_x4_trans loads four 8×8 bf16 matrices transposed; lane l
// gives the shared-memory address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void fa_ldmatrix_x4_trans(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
		: "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// fa_ldmatrix_x4 loads four 8×8 bf16 matrices as they are (thread t gets
// row t/4, columns 2(t%4) and 2(t%4)+1 of each: the layout of an mma
// fragment); lane l gives the shared-memory address of row l % 8 of matrix
// l / 8.
__device__ __forceinline__ void fa_ldmatrix_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
		: "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// fa_word is the index of 32-bit word w of row r in a swizzled bf16 tile of
// HD columns (HD/2 words a row).
template <int HD>
__device__ __forceinline__ int fa_word(int r, int w) { return r * (HD / 2) + (w ^ ((r & 7) << 2)); }

// fa_store4 converts four float32 values to bf16 and stores them at
// columns 4c..4c+3 of row r of a swizzled tile.
template <int HD>
__device__ __forceinline__ void fa_store4(unsigned *tile, int r, int c, float4 x) {
	*(uint2 *)&tile[fa_word<HD>(r, 2 * c)] = make_uint2(fa_pack_bf16x2(x.x, x.y), fa_pack_bf16x2(x.z, x.w));
}

// fa_stage issues the cp.async copies of the K and V rows of positions
// kv0 .. kv0+BN-1 (zeros from kvEnd on) into the float32 staging tiles
// stK, stV [BN][HD], and commits them as one group.
template <int HD, int BN>
__device__ __forceinline__ void fa_stage(float *stK, float *stV, const float *kb, const float *vb, const int *pg,
		int kv0, int kvEnd, int pageSize, long long kvw) {
	constexpr int C4 = HD / 4;
#pragma unroll
	for (int i = threadIdx.x; i < BN * C4; i += FA_THREADS) {
		int r = i / C4, c = i % C4, p = kv0 + r;
		bool live = p < kvEnd;
		long long off = live ? ((long long)pg[p / pageSize] * pageSize + p % pageSize) * kvw + 4 * c : 0;
		cp_async16(stK + r * HD + 4 * c, kb + off, live);
		cp_async16(stV + r * HD + 4 * c, vb + off, live);
	}
	cp_async_commit();
}

// fa_stage_bf16 is fa_stage for a bf16 cache: the copies go straight to
// the swizzled bf16 tiles tK, tV [BN][HD] (16 bytes = one 8-column chunk).
template <int HD, int BN>
__device__ __forceinline__ void fa_stage_bf16(unsigned *tK, unsigned *tV, const unsigned short *kb, const unsigned short *vb,
		const int *pg, int kv0, int kvEnd, int pageSize, long long kvw) {
	constexpr int C8 = HD / 8;
#pragma unroll
	for (int i = threadIdx.x; i < BN * C8; i += FA_THREADS) {
		int r = i / C8, c = i % C8, p = kv0 + r;
		bool live = p < kvEnd;
		long long off = live ? ((long long)pg[p / pageSize] * pageSize + p % pageSize) * kvw + 8 * c : 0;
		int w = fa_word<HD>(r, 4 * c);
		cp_async16(tK + w, kb + off, live);
		cp_async16(tV + w, vb + off, live);
	}
	cp_async_commit();
}

// fa_softmax_scores takes one key tile's scores s (the m16n8 accumulator
// layout: rows gq and gq+8 of the warp's 16, columns 2tq and 2tq+1 of
// each n8 block) at key positions kv0..: it scales them to base 2, masks
// (when mask) the positions after each row's own (posA, posB), updates the
// running maxima mA, mB and this thread's partial sums lA, lB, leaves
// exp2(s - max) in s and returns in cA, cB the factors that bring an
// output accumulator of the old maxima to the new (fa_rescale).
template <int BN>
__device__ __forceinline__ void fa_softmax_scores(float (&s)[BN / 8][4], float &mA, float &mB, float &lA, float &lB, float &cA,
		float &cB, int kv0, int tq, int posA, int posB, bool mask, float sl2) {
	float xA = NEG_INF, xB = NEG_INF;
#pragma unroll
	for (int n = 0; n < BN / 8; n++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int p = kv0 + n * 8 + 2 * tq + (e & 1);
			float v = s[n][e] * sl2;
			if (mask && p > (e < 2 ? posA : posB)) v = NEG_INF;
			s[n][e] = v;
		}
		xA = fmaxf(xA, fmaxf(s[n][0], s[n][1]));
		xB = fmaxf(xB, fmaxf(s[n][2], s[n][3]));
	}
	xA = fmaxf(xA, __shfl_xor_sync(0xffffffffu, xA, 1));
	xA = fmaxf(xA, __shfl_xor_sync(0xffffffffu, xA, 2));
	xB = fmaxf(xB, __shfl_xor_sync(0xffffffffu, xB, 1));
	xB = fmaxf(xB, __shfl_xor_sync(0xffffffffu, xB, 2));
	const float nA = fmaxf(mA, xA), nB = fmaxf(mB, xB);
	// Position 0 is never masked, so the maxima are finite after the
	// first tile; the guards only keep -inf - -inf out of exp2 (and,
	// in a slice after position 0, keep M-rows whose positions are all
	// before the tile at maximum -inf, sum 0 and output 0).
	const float bA = nA == NEG_INF ? 0.0f : nA, bB = nB == NEG_INF ? 0.0f : nB;
	cA = exp2f(mA - bA);
	cB = exp2f(mB - bB);
	mA = nA;
	mB = nB;
	float sA = 0.0f, sB = 0.0f;
#pragma unroll
	for (int n = 0; n < BN / 8; n++) {
		s[n][0] = exp2f(s[n][0] - bA);
		s[n][1] = exp2f(s[n][1] - bA);
		s[n][2] = exp2f(s[n][2] - bB);
		s[n][3] = exp2f(s[n][3] - bB);
		sA += s[n][0] + s[n][1];
		sB += s[n][2] + s[n][3];
	}
	lA = lA * cA + sA; // this thread's columns; the quad's sum is taken at the end
	lB = lB * cB + sB;
}

// fa_rescale multiplies the output accumulator's rows gq by cA and gq+8 by cB.
template <int HD>
__device__ __forceinline__ void fa_rescale(float (&o)[HD / 8][4], float cA, float cB) {
#pragma unroll
	for (int n = 0; n < HD / 8; n++) {
		o[n][0] *= cA;
		o[n][1] *= cA;
		o[n][2] *= cB;
		o[n][3] *= cB;
	}
}

// fa_online_softmax is fa_softmax_scores followed by fa_rescale of o.
template <int BN, int HD>
__device__ __forceinline__ void fa_online_softmax(float (&s)[BN / 8][4], float (&o)[HD / 8][4], float &mA, float &mB, float &lA,
		float &lB, int kv0, int tq, int posA, int posB, bool mask, float sl2) {
	float cA, cB;
	fa_softmax_scores<BN>(s, mA, mB, lA, lB, cA, cB, kv0, tq, posA, posB, mask, sl2);
	fa_rescale<HD>(o, cA, cB);
}

// fa_finish ends a block's work on its tile: it sums lA, lB over the quad,
// then either (SPLIT, slot >= 0) stores the accumulator, maximum and sum of
// the thread's two M-rows (warp·16 + gq and + 8) in partial slot slot, or
// stores o / l · sigmoid(gate) for them in out. M-rows from nM on are
// padding and store nothing.
template <int HD, bool SPLIT>
__device__ __forceinline__ void fa_finish(const float (&o)[HD / 8][4], float mA, float mB, float lA, float lB, float *out,
		const float *gate, float *part, float *ml, int slot, int H, int KV, int kvh, int row0, int u0, int nM, int warp, int gq, int tq) {
	lA += __shfl_xor_sync(0xffffffffu, lA, 1);
	lA += __shfl_xor_sync(0xffffffffu, lA, 2);
	lB += __shfl_xor_sync(0xffffffffu, lB, 1);
	lB += __shfl_xor_sync(0xffffffffu, lB, 2);
	if (SPLIT && slot >= 0) {
		// A partial slot: the accumulator as it is, the maximum and the sum.
		const long long pb = ((long long)slot * KV + kvh) * FA_BM;
#pragma unroll
		for (int half = 0; half < 2; half++) {
			const int r = warp * 16 + gq + 8 * half;
			if (u0 + r >= nM) continue;
			float *po = part + (pb + r) * HD;
#pragma unroll
			for (int n = 0; n < HD / 8; n++)
				*(float2 *)(po + n * 8 + 2 * tq) = make_float2(o[n][2 * half], o[n][2 * half + 1]);
			if (tq == 0) *(float2 *)(ml + (pb + r) * 2) = half ? make_float2(mB, lB) : make_float2(mA, lA);
		}
		return;
	}
	const int G = H / KV;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int u = u0 + warp * 16 + gq + 8 * half;
		if (u >= nM) continue;
		const float inv = 1.0f / (half ? lB : lA);
		const long long base = ((long long)(row0 + u / G) * H + kvh * G + u % G) * HD;
#pragma unroll
		for (int n = 0; n < HD / 8; n++) {
			const int d = n * 8 + 2 * tq;
			const float2 gv = *(const float2 *)(gate + base + d);
			float2 r;
			r.x = o[n][2 * half] * inv * sigmoid_ref(gv.x);
			r.y = o[n][2 * half + 1] * inv * sigmoid_ref(gv.y);
			*(float2 *)(out + base + d) = r;
		}
	}
}

// FaTile is what one block of the flash entries works on (fa_prefill's
// tiles and items below): KV head kvh (G query heads each) of the tile's
// sequence, its rows row0 .. row0+len-1 at positions cached.., M-rows
// u0 .. u0+FA_BM-1 of its nM, their page list pg, the key positions
// [kLo, kvEnd) it walks, its partial slot (-1: none), and the cache's
// elements a position (kvw) and offset of the layer and KV head.
struct FaTile {
	int kvh, G, row0, len, u0, nM, cached, kLo, kvEnd, slot;
	const int *pg;
	long long kvw, layerOff;

	// posOf is the position of M-row u; padding M-rows take the last.
	__device__ __forceinline__ int posOf(int u) const { return cached + min(u / G, len - 1); }
};

// fa_tile reads block blockIdx.x's FaTile from tiles (SPLIT: items, as
// fa_prefill says) for head dim hd.
template <bool SPLIT>
__device__ __forceinline__ FaTile fa_tile(const int4 *tiles, const int *pos, const int *pageOff, const int *pages, int H, int KV,
		int hd, int pageSize, int numPages, int layer) {
	FaTile t;
	const int4 tl = tiles[SPLIT ? 2 * (blockIdx.x / KV) : blockIdx.x / KV];
	t.kvh = blockIdx.x % KV;
	t.G = H / KV;
	t.row0 = tl.x;
	t.len = tl.y;
	t.u0 = tl.z;
	t.nM = t.len * t.G;
	t.cached = pos[t.row0];
	t.pg = pages + pageOff[t.row0];
	t.kLo = 0;
	t.kvEnd = t.posOf(t.u0 + FA_BM - 1) + 1; // positions [kLo, kvEnd)
	t.slot = -1;
	if (SPLIT) {
		const int4 sl = tiles[2 * (blockIdx.x / KV) + 1];
		t.kLo = tl.w;
		t.kvEnd = sl.x;
		t.slot = sl.y;
	}
	t.kvw = (long long)KV * hd;
	t.layerOff = (long long)layer * numPages * pageSize * t.kvw + (long long)t.kvh * hd;
	return t;
}

// fa_prefill is the body of attention_prefill_hd<HD>. tiles[i] =
// {first row of the sequence, its length, first M-row of the tile, positions
// it sees (unused here)}; block x works on tile x / KV and KV head x % KV.
// pos, pageOff, pages, the cache layout and the output are as for
// attention_f32; the rows of a tile's sequence have consecutive positions
// pos[row0], pos[row0]+1, ...
//
// With SPLIT (attention_prefill_split_hd<HD>) item i is tiles[2i],
// tiles[2i+1] = {row0, len, u0, kLo}, {kHi, slot, 0, 0}: the block walks
// positions [kLo, kHi) only (kLo a multiple of BN; kHi one too, or the
// tile's kvEnd) and, when slot >= 0, stores its accumulator, maximum and sum
// in partial slot (slot, KV head): part[((slot·KV + kvh)·FA_BM + r)·HD + d]
// and ml[((slot·KV + kvh)·FA_BM + r)·2 + {0: max, 1: sum}] for M-row r of
// the tile; slot -1 (the tile's only slice) ends as without SPLIT.
//
// KT is the cache's element type. With bf16 (unsigned short) there is no
// float32 staging: the shared memory after Q holds two stages of the bf16
// K and V tiles ([2][K | V][BN][HD], flashSmemKV), the next tile copied into
// one while the other is computed, one barrier a tile (after it the
// current tile has landed and every warp is done with the other stage).
// The products see the same bf16 values as with a float32 cache (both
// round to nearest even), so the results are the same.
//
// LDM (the *_ldm entries, COHORT_CUDA_FLASH_LDM) changes only how the
// fragments reach the registers: S = Q·Kᵀ takes its Q (A) fragments with
// one ldmatrix.x4 per k16 step instead of four 32-bit loads and its K (B)
// fragments of two n-tiles with one ldmatrix.x4 instead of four, and every
// ldmatrix address (Q, K, V) is a per-thread base plus one of four
// swizzled chunk offsets and a constant; the Q tile is read with eight
// loads in flight a thread. The values, the mma instructions and their
// order per accumulator are those of the other path, so the results are
// the same bits. Lane l addresses row (l & 7) + 8·((l >> 3) & 1) of its
// 16-row group at chunk 2k + (l >> 4) of k16 step k, which XOR (l & 7)
// swizzles: matrices 0..3 are then rows 0-7 | 8-15 of the low half, rows
// 0-7 | 8-15 of the high half (a0..a3 of Q; b0 of n-tiles n, n+1 and b1
// of n, n+1 for K; V as before).
template <int HD, int BN, bool SPLIT = false, typename KT = float, bool LDM = false>
__device__ __forceinline__ void fa_prefill(float *out, const float *q, const float *gate, const KT *kc, const KT *vc,
		const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale, float *part = nullptr, float *ml = nullptr) {
	extern __shared__ __align__(16) unsigned fa_smem[];
	unsigned *sQ = fa_smem, *sK = sQ + FA_BM * HD / 2, *sV = sK + BN * HD / 2;
	float *stage = (float *)(sV + BN * HD / 2); // [2][K | V][BN][HD]
	constexpr bool KB16 = sizeof(KT) == 2;
	constexpr int C4 = HD / 4; // float4 per row
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
	const FaTile t = fa_tile<SPLIT>(tiles, pos, pageOff, pages, H, KV, HD, pageSize, numPages, layer);
	const int kvh = t.kvh, G = t.G, row0 = t.row0, u0 = t.u0, nM = t.nM;
	const int *pg = t.pg;
	const int kLo = t.kLo, kvEnd = t.kvEnd, slot = t.slot;
	const long long kvw = t.kvw;
	const KT *kb = kc + t.layerOff, *vb = vc + t.layerOff;
	if constexpr (KB16) fa_stage_bf16<HD, BN>(sK, sV, kb, vb, pg, kLo, kvEnd, pageSize, kvw);
	else fa_stage<HD, BN>(stage, stage + BN * HD, kb, vb, pg, kLo, kvEnd, pageSize, kvw);

	// The Q tile (M-rows past the sequence are zero and never stored).
	if constexpr (LDM) {
#pragma unroll 8
		for (int i = tid; i < FA_BM * C4; i += FA_THREADS) {
			int r = i / C4, c = i % C4, u = u0 + r;
			float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			if (u < nM) x = *(const float4 *)(q + ((long long)(row0 + u / G) * H + kvh * G + u % G) * HD + 4 * c);
			fa_store4<HD>(sQ, r, c, x);
		}
	} else {
		for (int i = tid; i < FA_BM * C4; i += FA_THREADS) {
			int r = i / C4, c = i % C4, u = u0 + r;
			float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			if (u < nM) x = *(const float4 *)(q + ((long long)(row0 + u / G) * H + kvh * G + u % G) * HD + 4 * c);
			fa_store4<HD>(sQ, r, c, x);
		}
	}

	// This thread's two M-rows (gq and gq+8 of the warp) and their positions;
	// padding M-rows take the last position (their results are dropped).
	const int ua = u0 + warp * 16 + gq, ub = ua + 8;
	const int posA = t.posOf(ua), posB = t.posOf(ub);
	const int warpLo = t.posOf(u0 + warp * 16);      // first position of the warp's rows
	const int warpHi = t.posOf(u0 + warp * 16 + 15); // last
	const float sl2 = scale * 1.4426950408889634f;
	const unsigned sVaddr = (unsigned)__cvta_generic_to_shared(sV);
	// LDM: this lane's row in a 16-row group and its four swizzled chunk
	// offsets in bytes (k16 step k at 128·(k >> 2) + xo(k & 3)).
	const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
	const unsigned lsw = (unsigned)(lane & 7), lhi = (unsigned)(lane >> 4);
	const unsigned sQrow = (unsigned)__cvta_generic_to_shared(sQ) + (unsigned)((warp * 16 + lrow) * HD * 2);
	const unsigned sKrow = (unsigned)__cvta_generic_to_shared(sK) + (unsigned)(lrow * HD * 2);

	float o[HD / 8][4];
#pragma unroll
	for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	float mA = NEG_INF, mB = NEG_INF, lA = 0.0f, lB = 0.0f;

	for (int kv0 = kLo, it = 0; kv0 < kvEnd; kv0 += BN, it++) {
		const unsigned *tK = sK;
		unsigned tVaddr = sVaddr, tKrow = sKrow;
		if constexpr (KB16) {
			cp_async_wait<0>();
			__syncthreads(); // this tile's copies landed; every warp is done with the other stage
			const int cs = (it & 1) * BN * HD, ns = ((it + 1) & 1) * BN * HD; // words
			if (kv0 + BN < kvEnd) fa_stage_bf16<HD, BN>(sK + ns, sV + ns, kb, vb, pg, kv0 + BN, kvEnd, pageSize, kvw);
			tK = sK + cs;
			tVaddr = sVaddr + 4u * (unsigned)cs;
			tKrow = sKrow + 4u * (unsigned)cs;
		} else {
			// The next tile's copies go to the other stage, which the previous
			// iteration finished converting before its second barrier (an empty
			// group past the end keeps wait_group 1 meaning "this tile").
			float *cur = stage + (it & 1) * 2 * BN * HD, *nxt = stage + ((it + 1) & 1) * 2 * BN * HD;
			if (kv0 + BN < kvEnd) fa_stage<HD, BN>(nxt, nxt + BN * HD, kb, vb, pg, kv0 + BN, kvEnd, pageSize, kvw);
			else cp_async_commit();
			cp_async_wait<1>();
			__syncthreads(); // this tile's copies landed; every warp is done with the previous bf16 tiles
#pragma unroll
			for (int i = tid; i < BN * C4; i += FA_THREADS) {
				int r = i / C4, c = i % C4;
				fa_store4<HD>(sK, r, c, *(const float4 *)(cur + r * HD + 4 * c));
				fa_store4<HD>(sV, r, c, *(const float4 *)(cur + BN * HD + r * HD + 4 * c));
			}
			__syncthreads();
		}
		if (kv0 > warpHi) continue; // every position of the tile is after the warp's rows

		// S = Q·Kᵀ for the warp's 16 M-rows and the tile's BN positions.
		float s[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
		const int ra = warp * 16 + gq, rb = ra + 8;
		if constexpr (LDM) {
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				const unsigned xo = 128u * (unsigned)(kk >> 2) + ((((unsigned)(2 * (kk & 3)) + lhi) ^ lsw) << 4);
				unsigned a0, a1, a2, a3;
				fa_ldmatrix_x4(sQrow + xo, a0, a1, a2, a3);
#pragma unroll
				for (int n = 0; n < BN / 8; n += 2) {
					unsigned b0, b1, b2, b3; // b0 of n-tiles n, n+1; b1 of n, n+1
					fa_ldmatrix_x4(tKrow + (unsigned)(n * 8 * HD * 2) + xo, b0, b1, b2, b3);
					fa_mma(s[n], a0, a1, a2, a3, b0, b2);
					fa_mma(s[n + 1], a0, a1, a2, a3, b1, b3);
				}
			}
		} else {
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				const int w = kk * 8 + tq;
				unsigned a0 = sQ[fa_word<HD>(ra, w)], a1 = sQ[fa_word<HD>(rb, w)];
				unsigned a2 = sQ[fa_word<HD>(ra, w + 4)], a3 = sQ[fa_word<HD>(rb, w + 4)];
#pragma unroll
				for (int n = 0; n < BN / 8; n++) {
					const int kr = n * 8 + gq;
					fa_mma(s[n], a0, a1, a2, a3, tK[fa_word<HD>(kr, w)], tK[fa_word<HD>(kr, w + 4)]);
				}
			}
		}

		fa_online_softmax<BN, HD>(s, o, mA, mB, lA, lB, kv0, tq, posA, posB, kv0 + BN - 1 > warpLo, sl2);

		// O += P·V: P's accumulator layout is the A operand's, V comes
		// transposed from ldmatrix (rows kk·16 + 0..15, columns d0 + 0..15).
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
			const unsigned a0 = fa_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), a1 = fa_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
			const unsigned a2 = fa_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]), a3 = fa_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
			const int vr = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
			for (int np = 0; np < HD / 16; np++) {
				const int chunk = np * 2 + (lane >> 4);
				unsigned b0, b1, b2, b3;
				if constexpr (LDM)
					fa_ldmatrix_x4_trans(tVaddr + (unsigned)((kk * 16 + lrow) * HD * 2) + 128u * (unsigned)(np >> 2) +
							((((unsigned)(2 * (np & 3)) + lhi) ^ lsw) << 4), b0, b1, b2, b3);
				else
					fa_ldmatrix_x4_trans(tVaddr + 4u * (unsigned)(vr * (HD / 2) + ((chunk ^ (vr & 7)) << 2)), b0, b1, b2, b3);
				fa_mma(o[2 * np], a0, a1, a2, a3, b0, b1);
				fa_mma(o[2 * np + 1], a0, a1, a2, a3, b2, b3);
			}
		}
	}

	fa_finish<HD, SPLIT>(o, mA, mB, lA, lB, out, gate, part, ml, slot, H, KV, kvh, row0, u0, nM, warp, gq, tq);
}

// attention_prefill_hd64, _hd128, _hd256: fa_prefill for one head dim, one
// block of FA_THREADS threads per (tile, KV head): grid tiles·KV. (Written
// out, not by a macro, so that the PDL source check sees each entry.)
extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_hd64(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<64, 64>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_hd128(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<128, 32>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_hd256(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<256, 16>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

// attention_prefill_split_hd64, _hd128, _hd256: fa_prefill over one slice
// of a tile's keys (see SPLIT above), one block per (item, KV head): grid
// items·KV; the same dynamic shared memory as attention_prefill_hd<HD>.
// (The explicit minimum of one block an SM lets ptxas keep hd64 and hd128
// without spills, at about 160 registers: NVRTC 11.8 for sm_90.)
extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_split_hd64(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages, const int4 *items,
		float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<64, 64, true>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_split_hd128(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages, const int4 *items,
		float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<128, 32, true>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_split_hd256(float *out, const float *q, const float *gate,
		const float *kc, const float *vc, const int *pos, const int *pageOff, const int *pages, const int4 *items,
		float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<256, 16, true>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

// attention_prefill_kvbf16_hd64, _hd128, _hd256 and
// attention_prefill_split_kvbf16_hd64, _hd128, _hd256: the entries above
// over a bf16 cache (less dynamic shared memory: flashSmemKV). hd64 has
// an explicit minimum of one block an SM: without it ptxas keeps 128
// registers and spills 24 bytes (162 with it; NVRTC 11.8, sm_90).
extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_kvbf16_hd64(float *out, const float *q, const float *gate,
		const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<64, 64, false, unsigned short>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_kvbf16_hd128(float *out, const float *q, const float *gate,
		const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<128, FA_BN_KV128, false, unsigned short>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_kvbf16_hd256(float *out, const float *q, const float *gate,
		const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<256, FA_BN_KV256, false, unsigned short>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_split_kvbf16_hd64(float *out, const float *q,
		const float *gate, const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages,
		const int4 *items, float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<64, 64, true, unsigned short>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_split_kvbf16_hd128(float *out, const float *q,
		const float *gate, const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages,
		const int4 *items, float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<128, FA_BN_KV128, true, unsigned short>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_split_kvbf16_hd256(float *out, const float *q,
		const float *gate, const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages,
		const int4 *items, float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<256, FA_BN_KV256, true, unsigned short>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

// attention_prefill_kvbf16_hd256_ldm and attention_prefill_split_kvbf16_hd256_ldm:
// the two entries above with LDM (ldmatrix fragments for S = Q·Kᵀ; the same
// results bit for bit), which attentionFlash takes unless
// COHORT_CUDA_FLASH_LDM=0.
extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_kvbf16_hd256_ldm(float *out, const float *q, const float *gate,
		const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<256, FA_BN_KV256, false, unsigned short, true>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer, scale);
}

extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_split_kvbf16_hd256_ldm(float *out, const float *q,
		const float *gate, const unsigned short *kc, const unsigned short *vc, const int *pos, const int *pageOff, const int *pages,
		const int4 *items, float *part, float *ml, int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
	fa_prefill<256, FA_BN_KV256, true, unsigned short, true>(out, q, gate, kc, vc, pos, pageOff, pages, items, H, KV, pageSize, numPages, layer, scale, part, ml);
}

// attention_prefill_combine merges the partial slots of the sliced tiles:
// comb[2j], comb[2j+1] = {row0, len, u0, first slot}, {slices, 0, 0, 0}
// (slice k of tile j in slot first + k). A block of FA_THREADS threads takes
// R = 4·FA_THREADS/HD M-rows of one tile and KV head, HD/4 threads an M-row
// and four columns a thread: grid tiles·KV·(FA_BM/R), block x on tile
// x / (KV·FA_BM/R), KV head (x / (FA_BM/R)) % KV, M-rows R·(x % (FA_BM/R))
// on. With M the largest slice maximum and w_k = 2^(m_k − M) (0 for a
// slice that saw none of the M-row's positions), the output is
// Σ w_k·o_k / Σ w_k·l_k · sigmoid(gate), summed in slice order.
extern "C" __global__ void __launch_bounds__(FA_THREADS) attention_prefill_combine(float *out, const float *gate,
		const float *part, const float *ml, const int4 *comb, int H, int KV, int HD) {
	PDL_LAUNCH();
	PDL_WAIT();
	const int tpr = HD / 4, R = FA_THREADS / tpr, groups = FA_BM / R;
	const int j = blockIdx.x / (KV * groups), kvh = (blockIdx.x / groups) % KV;
	const int r = (blockIdx.x % groups) * R + threadIdx.x / tpr, c = threadIdx.x % tpr;
	const int4 a = comb[2 * j];
	const int ns = comb[2 * j + 1].x, G = H / KV, u = a.z + r;
	if (u >= a.y * G) return;
	const long long stride = (long long)KV * FA_BM; // M-rows between one slot and the next
	const long long r0 = ((long long)a.w * KV + kvh) * FA_BM + r;
	float M = NEG_INF;
	for (int k = 0; k < ns; k++) M = fmaxf(M, ml[(r0 + k * stride) * 2]);
	float den = 0.0f;
	float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int k = 0; k < ns; k++) {
		const long long rk = r0 + k * stride;
		const float2 m = *(const float2 *)(ml + rk * 2);
		const float w = m.x == NEG_INF ? 0.0f : exp2f(m.x - M);
		const float4 o = *(const float4 *)(part + rk * HD + 4 * c);
		den += w * m.y;
		acc.x += w * o.x;
		acc.y += w * o.y;
		acc.z += w * o.z;
		acc.w += w * o.w;
	}
	const float inv = 1.0f / den;
	const long long base = ((long long)(a.x + u / G) * H + kvh * G + u % G) * HD + 4 * c;
	const float4 gv = *(const float4 *)(gate + base);
	float4 res;
	res.x = acc.x * inv * sigmoid_ref(gv.x);
	res.y = acc.y * inv * sigmoid_ref(gv.y);
	res.z = acc.z * inv * sigmoid_ref(gv.z);
	res.w = acc.w * inv * sigmoid_ref(gv.w);
	*(float4 *)(out + base) = res;
}
