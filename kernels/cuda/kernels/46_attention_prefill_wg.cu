// Prefill attention with Hopper's warpgroup MMA (wgmma, sm_90a only): the
// work of fa_prefill (45_attention_prefill.cu) over a bf16 cache at head dim
// 256, the same tiles (FA_BM M-rows of one KV head a block, GQA packing),
// the same cp.async staging of the paged keys and values (two stages) and
// the same online softmax (fa_softmax_scores) and ending (fa_finish), but
// the products run on the tensor cores a warpgroup at a time, straight
// from shared memory: warpgroup g (warps 4g..4g+3) owns M-rows 64g..64g+63.
//
// Per key tile of BN positions: S = Q·Kᵀ is HD/16 wgmma m64n{BN}k16, A = the
// warpgroup's 64 Q rows and B = the BN key rows, both K-major; then the
// softmax in registers (the accumulator holds, per warp, the m16n8 layout
// that mma.sync gives: rows gq and gq+8, columns 2tq, 2tq+1 of each n8
// block); then O += P·V is BN/16 wgmma m64n256k16 with A = P from registers
// (rounded to bf16, in the A fragment layout, which is the accumulator's)
// and B = the value rows read transposed (N-major: head dims contiguous).
// In the _wg entries each group is waited for before its results are
// read, and the block's barrier at every tile keeps the two warpgroups in
// step; the _wgp entries (FA_WG_PIPE) overlap a tile's softmax with the
// previous tile's P·V within a warpgroup. Both give the bits of the _ldm
// entries (measured on an H100: wgmma sums a k16 step's products as
// mma.sync does); _wg is 1.30× as fast as _ldm at 8k rows and the default,
// _wgp was no faster before its reordering against ptxas's serialization
// (docs/gpu.md, phases 18 and 19; the reordered one not yet run on a GPU). The _wgt entries
// (FA_WG_TURNS) make the two warpgroups take turns at the tensor cores, so
// that each one's softmax runs under the other's products (1.13×). The
// _wgc entries (FA_WG_COPIES) are _wg with the next tile's copies issued
// after S instead of before it (not yet run on a GPU).
//
// Shared memory (dynamic, aligned here to 1,024 bytes): the Q tile and two
// stages of K and V tiles, each stored as HD/64 column blocks of 64 bf16
// (128 bytes a row), rows at 128 bytes, the 16-byte chunk c of row r at
// chunk c ^ (r & 7): the 128-byte swizzle that the descriptors name
// (wg_desc). K-major operands (Q, K): 8-row groups 1,024 bytes apart (the
// stride dimension), a k16 step 32 bytes further in the row, the next
// column block a whole block further. V (N-major): 64 head dims a 128-byte
// row, the next 64 a column block further (the leading dimension), 8-key
// groups 1,024 bytes apart. flashSmemFor in attention_prefill.go.
//
// The entries exist in every build; only an sm_90a image has their bodies
// (the backend takes them only when it loaded one: Backend.wgmma).

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_WG 1
#endif

#define FA_WG_BN 64

// The schedules of fa_prefill_wg (its SCHED): each group waited for before
// its results are read; a tile's softmax overlapping the previous tile's
// P·V within a warpgroup; the two warpgroups taking turns at the tensor
// cores; FA_WG_PLAIN with the next tile's copies issued after S (while the
// tensor cores compute it) instead of before.
#define FA_WG_PLAIN 0
#define FA_WG_PIPE 1
#define FA_WG_TURNS 2
#define FA_WG_COPIES 3

#ifdef FA_WG
// wg_desc is the shared memory matrix descriptor of an operand at shared
// address addr with the 128-byte swizzle: leading and stride dimension
// byte offsets lbo and sbo (multiples of 16).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
	return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (unsigned long long)(lbo >> 4) << 16 |
	       (unsigned long long)(sbo >> 4) << 32 | 1ull << 62;
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// fence_proxy_async orders this thread's generic-proxy writes to shared
// memory (st.shared, cp.async) before the async proxy's reads (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// wg_turn_wait and wg_turn_pass order the two warpgroups of a block at
// named barrier id (1 or 2; 0 is __syncthreads): warpgroup 1 waits there
// until warpgroup 0 has passed it (each barrier completes with the 128
// threads of each).
__device__ __forceinline__ void wg_turn_wait(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void wg_turn_pass(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// wg_keep pins the registers of d at this point of the program: the
// compiler may not move their reads or writes across it (wgmma writes them
// asynchronously, so they are read only after wg_wait0 and a wg_keep).
template <int R>
__device__ __forceinline__ void wg_keep(float (&d)[R][4]) {
#pragma unroll
	for (int n = 0; n < R; n++)
		asm volatile("" : "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])::"memory");
}

// WG_D4(n) names the four accumulator registers of n8 block n of d as
// read-write asm operands.
#define WG_D4(n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])

// wg_keep_u is wg_keep for packed registers.
template <int R>
__device__ __forceinline__ void wg_keep_u(unsigned (&d)[R][4]) {
#pragma unroll
	for (int n = 0; n < R; n++)
		asm volatile("" : "+r"(d[n][0]), "+r"(d[n][1]), "+r"(d[n][2]), "+r"(d[n][3])::"memory");
}

// wg_mma_qk: d (m64n64, float32) = (ACC 0) or += (ACC 1) A·Bᵀ, A and B
// bf16 K-major in shared memory (descriptors a, b). The immediate ACC lets
// ptxas see that the first product of a group does not read d.
template <int ACC>
__device__ __forceinline__ void wg_mma_qk(float (&d)[8][4], unsigned long long a, unsigned long long b) {
	asm volatile("{\n"
		"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
		"}, %32, %33, %34, 1, 1, 0, 0;\n}\n"
		: WG_D4(0), WG_D4(1), WG_D4(2), WG_D4(3), WG_D4(4), WG_D4(5), WG_D4(6), WG_D4(7)
		: "l"(a), "l"(b), "n"(ACC));
}

// wg_mma_pv: d (m64n256, float32) += A·B, A bf16 in registers (p0..p3, the
// A fragment layout), B bf16 N-major in shared memory (descriptor b).
__device__ __forceinline__ void wg_mma_pv(float (&d)[32][4], unsigned p0, unsigned p1, unsigned p2, unsigned p3, unsigned long long b) {
	asm volatile("{\n"
		"wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
		"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
		"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
		"%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
		"%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
		"%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
		"%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
		"%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
		"%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
		"}, {%128, %129, %130, %131}, %132, 1, 1, 1, 1;\n}\n"
		: WG_D4(0), WG_D4(1), WG_D4(2), WG_D4(3), WG_D4(4), WG_D4(5), WG_D4(6), WG_D4(7),
		  WG_D4(8), WG_D4(9), WG_D4(10), WG_D4(11), WG_D4(12), WG_D4(13), WG_D4(14), WG_D4(15),
		  WG_D4(16), WG_D4(17), WG_D4(18), WG_D4(19), WG_D4(20), WG_D4(21), WG_D4(22), WG_D4(23),
		  WG_D4(24), WG_D4(25), WG_D4(26), WG_D4(27), WG_D4(28), WG_D4(29), WG_D4(30), WG_D4(31)
		: "r"(p0), "r"(p1), "r"(p2), "r"(p3), "l"(b));
}

// wg_off is the byte offset of 16-byte chunk c (columns 8c..8c+7) of row r
// in a swizzled tile of ROWS rows (column blocks of 64 columns).
template <int ROWS>
__device__ __forceinline__ unsigned wg_off(int r, int c) {
	return (unsigned)((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// fa_wg_row returns the element offset in the cache (before the layer and
// head offsets) of position p's row: its page from the page list pg, then
// its slot in the page (a shift and a mask when pageSize is a power of two,
// pageShift its log2, else -1).
__device__ __forceinline__ long long fa_wg_row(const int *pg, int p, int pageSize, int pageShift, long long kvw) {
	const int page = pageShift >= 0 ? p >> pageShift : p / pageSize;
	const int in = pageShift >= 0 ? p & (pageSize - 1) : p % pageSize;
	return ((long long)pg[page] * pageSize + in) * kvw;
}

// fa_stage_wg copies (cp.async, one group) the key rows of positions
// kK..kK+BN-1 into the swizzled tile tK and the value rows of kV..kV+BN-1
// into tV (zeros from kvEnd on; a tile that starts at or past kvEnd is
// not copied at all). When kK == kV a row's cache offset serves both.
template <int HD, int BN>
__device__ __forceinline__ void fa_stage_wg(unsigned char *tK, int kK, unsigned char *tV, int kV, const unsigned short *kb,
		const unsigned short *vb, const int *pg, int kvEnd, int pageSize, long long kvw) {
	constexpr int C8 = HD / 8;
	const int pageShift = (pageSize & (pageSize - 1)) == 0 ? __ffs(pageSize) - 1 : -1;
	const bool same = kK == kV;
#pragma unroll
	for (int i = threadIdx.x; i < BN * C8; i += FA_THREADS) {
		const int r = i / C8, c = i % C8;
		const unsigned b = wg_off<BN>(r, c);
		const int pK = kK + r, pV = kV + r;
		const bool liveK = pK < kvEnd, liveV = pV < kvEnd;
		const long long offK = liveK ? fa_wg_row(pg, pK, pageSize, pageShift, kvw) + 8 * c : 0;
		if (kK < kvEnd) cp_async16(tK + b, kb + offK, liveK);
		if (kV < kvEnd) {
			const long long offV = same ? offK : liveV ? fa_wg_row(pg, pV, pageSize, pageShift, kvw) + 8 * c : 0;
			cp_async16(tV + b, vb + offV, liveV);
		}
	}
	cp_async_commit();
}

// FaWG is what a block of the wgmma entries works on: its FaTile, the
// cache of its KV head and layer from kb and vb, and its shared memory:
// the Q tile at sQ, the key tile of stage st at sKV + 2·KB·st and its
// value tile KB after it (KB the bytes of one).
template <int HD, int BN>
struct FaWG : FaTile {
	static constexpr int KB = BN * HD * 2;
	unsigned char *sQ, *sKV;
	const unsigned short *kb, *vb;

	__device__ __forceinline__ unsigned char *k(int st) const { return sKV + 2 * KB * st; }
	__device__ __forceinline__ unsigned char *v(int st) const { return sKV + 2 * KB * st + KB; }
};

// fa_wg_begin sets up block blockIdx.x's FaWG (SPLIT as fa_prefill), issues
// the copies of its first key tile and, unless SCHED is FA_WG_PIPE, its
// first value tile (stage 0), and stores its Q tile (bf16, swizzled;
// M-rows past the sequence zero).
template <int HD, int BN, bool SPLIT, int SCHED>
__device__ __forceinline__ FaWG<HD, BN> fa_wg_begin(const float *q, const unsigned short *kc, const unsigned short *vc, const int *pos,
		const int *pageOff, const int *pages, const int4 *tiles, int H, int KV, int pageSize, int numPages, int layer) {
	extern __shared__ __align__(16) unsigned char fa_wg_smem[];
	FaWG<HD, BN> f;
	static_cast<FaTile &>(f) = fa_tile<SPLIT>(tiles, pos, pageOff, pages, H, KV, HD, pageSize, numPages, layer);
	const unsigned raw = (unsigned)__cvta_generic_to_shared(fa_wg_smem);
	f.sQ = fa_wg_smem + ((1024u - (raw & 1023u)) & 1023u);
	f.sKV = f.sQ + FA_BM * HD * 2;
	f.kb = kc + f.layerOff;
	f.vb = vc + f.layerOff;
	fa_stage_wg<HD, BN>(f.k(0), f.kLo, f.v(0), SCHED == FA_WG_PIPE ? f.kvEnd : f.kLo, f.kb, f.vb, f.pg, f.kvEnd, pageSize, f.kvw);
	const int G = f.G;
	constexpr int C4 = HD / 4;
#pragma unroll 8
	for (int i = threadIdx.x; i < FA_BM * C4; i += FA_THREADS) {
		int r = i / C4, c = i % C4, u = f.u0 + r;
		float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (u < f.nM) x = *(const float4 *)(q + ((long long)(f.row0 + u / G) * H + f.kvh * G + u % G) * HD + 4 * c);
		*(uint2 *)(f.sQ + wg_off<FA_BM>(r, c >> 1) + 8 * (c & 1)) = make_uint2(fa_pack_bf16x2(x.x, x.y), fa_pack_bf16x2(x.z, x.w));
	}
	return f;
}

// wg_desc_at is descriptor d (of wg_desc) moved bytes further: the start
// address is the low 14 bits' field of 16-byte units, and a shared address
// (under 2^18) plus the offsets of a tile stays below its top, so the sum
// carries into no other field.
__device__ __forceinline__ unsigned long long wg_desc_at(unsigned long long d, unsigned bytes) { return d + (bytes >> 4); }

// fa_wg_scores issues S = Q·Kᵀ for warpgroup wg's 64 M-rows (Q tile at
// shared address qAddr, the warpgroup's rows) and the key tile at kAddr,
// into s, as one committed group.
template <int HD, int BN>
__device__ __forceinline__ void fa_wg_scores(float (&s)[BN / 8][4], unsigned qAddr, unsigned kAddr) {
	const unsigned long long dq = wg_desc(qAddr, 16, 1024), dk = wg_desc(kAddr, 16, 1024);
	wg_fence();
	wg_mma_qk<0>(s, dq, dk);
#pragma unroll
	for (int kk = 1; kk < HD / 16; kk++)
		wg_mma_qk<1>(s, wg_desc_at(dq, (kk >> 2) * (FA_BM * 128) + (kk & 3) * 32),
				wg_desc_at(dk, (kk >> 2) * (BN * 128) + (kk & 3) * 32));
	wg_commit();
}

// fa_wg_pack rounds the softmax weights s to bf16 in the A fragment layout
// of the k16 steps of O += P·V.
template <int BN>
__device__ __forceinline__ void fa_wg_pack(const float (&s)[BN / 8][4], unsigned (&pa)[BN / 16][4]) {
#pragma unroll
	for (int kk = 0; kk < BN / 16; kk++) {
		pa[kk][0] = fa_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
		pa[kk][1] = fa_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
		pa[kk][2] = fa_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
		pa[kk][3] = fa_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
	}
}

// fa_wg_vdesc fills dv with the descriptors of the k16 steps of O += P·V
// over the value tile at vAddr and pins them (see fa_wg_values).
template <int BN>
__device__ __forceinline__ void fa_wg_vdesc(unsigned long long (&dv)[BN / 16], unsigned vAddr) {
	const unsigned long long d = wg_desc(vAddr, BN * 128, 1024);
#pragma unroll
	for (int kk = 0; kk < BN / 16; kk++) {
		dv[kk] = wg_desc_at(d, kk * 16 * 128);
		asm volatile("" : "+l"(dv[kk])::"memory");
	}
}

// fa_wg_values issues O += P·V (the descriptors dv of fa_wg_vdesc) as one
// committed group. The caller pins o and pa (wg_keep) and makes dv after
// it last wrote them and before any wgmma group still open when this one
// is issued: ptxas serializes the wgmma instructions (C7513) when anything
// defines their input registers while a group is open.
template <int HD, int BN>
__device__ __forceinline__ void fa_wg_values(float (&o)[HD / 8][4], const unsigned (&pa)[BN / 16][4],
		const unsigned long long (&dv)[BN / 16]) {
	wg_fence();
#pragma unroll
	for (int kk = 0; kk < BN / 16; kk++) wg_mma_pv(o, pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], dv[kk]);
	wg_commit();
}

// fa_wg_rescale is fa_rescale, skipped by a warp none of whose rows'
// maxima moved (factors exactly 1, so the same bits): once a row has seen
// its largest scores most key tiles leave it alone, and the rescale is
// HD/2 multiplications a thread against BN/2 exponentials.
template <int HD>
__device__ __forceinline__ void fa_wg_rescale(float (&o)[HD / 8][4], float cA, float cB) {
	if (__any_sync(0xffffffffu, cA != 1.0f || cB != 1.0f)) fa_rescale<HD>(o, cA, cB);
}

// fa_prefill_wg is the body of the wgmma entries: fa_prefill's arguments
// and tiles (SPLIT as there), over a bf16 cache. With FA_WG_PLAIN and
// FA_WG_TURNS, per key tile: the copies of the next tile go out, then S,
// the softmax, and O += P·V, each group waited for before its results are
// read (FA_WG_TURNS orders the two warpgroups' groups, see the loop).
//
// With FA_WG_PIPE (the *_wgp entries) a warpgroup overlaps one tile's softmax
// with the previous tile's O += P·V. Step t (t = 0 .. tiles, the last only
// finishing the one before) issues S for tile t and waits for it, then
// issues O += P·V for tile t - 1 (its weights kept packed in registers),
// computes tile t's weights while the tensor cores add tile t - 1's values,
// then waits for those, rescales O and packs the new weights. S is waited
// for before P·V goes out because ptxas serializes the wgmma instructions
// (C7514) when the softmax reads S's accumulator while another group is
// open, even with S retired by wait_group 1. So the keys run a tile ahead of the values: the copies issued at the start of step t are
// the keys of tile t + 1 (into the stage of tile t - 1's keys, whose S is
// done) and the values of tile t (into the stage of tile t - 2's values,
// whose O += P·V is done); the key and value tiles of a stage belong to
// different steps.
template <int HD, int BN, bool SPLIT, int SCHED>
__device__ __forceinline__ void fa_prefill_wg(float *out, const float *q, const float *gate, const unsigned short *kc,
		const unsigned short *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles, int H, int KV,
		int pageSize, int numPages, int layer, float scale, float *part, float *ml) {
	const FaWG<HD, BN> f = fa_wg_begin<HD, BN, SPLIT, SCHED>(q, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer);
	const int tid = threadIdx.x, warp = tid >> 5, wg = warp >> 2, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
	const int ua = f.u0 + warp * 16 + gq, ub = ua + 8;
	const int posA = f.posOf(ua), posB = f.posOf(ub);
	const int warpLo = f.posOf(f.u0 + warp * 16);
	const int wgHi = f.posOf(f.u0 + wg * 64 + 63); // the warpgroup's last position
	const float sl2 = scale * 1.4426950408889634f;
	const unsigned qAddr = (unsigned)__cvta_generic_to_shared(f.sQ) + (unsigned)(wg * 64 * 128);
	const unsigned kvAddr = (unsigned)__cvta_generic_to_shared(f.sKV);
	constexpr unsigned KB = FaWG<HD, BN>::KB;

	float o[HD / 8][4];
#pragma unroll
	for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	float mA = NEG_INF, mB = NEG_INF, lA = 0.0f, lB = 0.0f, cA, cB;
	float s[BN / 8][4];
	unsigned pa[BN / 16][4];
	// Defined before the loop: ptxas serializes the wgmma instructions
	// (C7513) when their input registers may be undefined on entry.
#pragma unroll
	for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
	for (int n = 0; n < BN / 16; n++) pa[n][0] = pa[n][1] = pa[n][2] = pa[n][3] = 0u;
	if constexpr (SCHED != FA_WG_PIPE) {
		// FA_WG_TURNS: warpgroup 1 issues its S only after warpgroup 0 has
		// issued its own (named barrier 1), and its P·V only after
		// warpgroup 0's (barrier 2), so the tensor cores run S0, S1, P·V0,
		// P·V1 back to back while warpgroup 0's softmax runs under S1 and
		// warpgroup 1's under P·V0. Both warpgroups pass both barriers at
		// every tile, also where one of them skips the tile.
		constexpr bool turns = SCHED == FA_WG_TURNS, late = SCHED == FA_WG_COPIES;
		for (int kv0 = f.kLo, it = 0; kv0 < f.kvEnd; kv0 += BN, it++) {
			cp_async_wait<0>();
			fence_proxy_async();
			__syncthreads(); // this tile landed (and the Q tile); both warpgroups are done with the other stage
			const int cs = it & 1;
			const auto stageNext = [&] {
				if (kv0 + BN < f.kvEnd)
					fa_stage_wg<HD, BN>(f.k(cs ^ 1), kv0 + BN, f.v(cs ^ 1), kv0 + BN, f.kb, f.vb, f.pg, f.kvEnd, pageSize, f.kvw);
			};
			if (!late) stageNext();
			const bool cur = kv0 <= wgHi; // some position of the tile is at or before the warpgroup's last
			const unsigned kAddr = kvAddr + 2u * KB * (unsigned)cs;
			unsigned long long dv[BN / 16];
			fa_wg_vdesc<BN>(dv, kAddr + KB);
			if (turns && wg == 1) wg_turn_wait(1);
			if (cur) fa_wg_scores<HD, BN>(s, qAddr, kAddr);
			if (turns && wg == 0) wg_turn_pass(1);
			if (late) stageNext(); // while the tensor cores compute S
			if (cur) {
				wg_wait0();
				wg_keep(s);
				fa_softmax_scores<BN>(s, mA, mB, lA, lB, cA, cB, kv0, tq, posA, posB, kv0 + BN - 1 > warpLo, sl2);
				fa_wg_rescale<HD>(o, cA, cB);
				fa_wg_pack<BN>(s, pa);
				wg_keep(o);
				wg_keep_u(pa);
			}
			if (turns && wg == 1) wg_turn_wait(2);
			if (cur) fa_wg_values<HD, BN>(o, pa, dv);
			if (turns && wg == 0) wg_turn_pass(2);
			if (cur) {
				wg_wait0();
				wg_keep(o);
			}
		}
	} else {
		bool prev = false; // the warpgroup has tile t - 1's weights in pa
		for (int kv0 = f.kLo, it = 0; kv0 < f.kvEnd + BN; kv0 += BN, it++) {
			cp_async_wait<0>();
			fence_proxy_async();
			__syncthreads(); // tile t's keys and tile t - 1's values landed; both warpgroups are done with what the copies overwrite
			const int cs = it & 1;
			fa_stage_wg<HD, BN>(f.k(cs ^ 1), kv0 + BN, f.v(cs), kv0, f.kb, f.vb, f.pg, f.kvEnd, pageSize, f.kvw);
			const bool cur = kv0 < f.kvEnd && kv0 <= wgHi;
			unsigned long long dv[BN / 16];
			fa_wg_vdesc<BN>(dv, kvAddr + 2u * KB * (unsigned)(cs ^ 1) + KB);
			if (cur) {
				fa_wg_scores<HD, BN>(s, qAddr, kvAddr + 2u * KB * (unsigned)cs);
				wg_wait0();
				wg_keep(s);
			}
			if (prev) fa_wg_values<HD, BN>(o, pa, dv);
			if (cur) {
				fa_softmax_scores<BN>(s, mA, mB, lA, lB, cA, cB, kv0, tq, posA, posB, kv0 + BN - 1 > warpLo, sl2);
			}
			wg_wait0();
			wg_keep(o);
			if (cur) {
				fa_wg_rescale<HD>(o, cA, cB);
				fa_wg_pack<BN>(s, pa);
			}
			wg_keep(o);
			wg_keep_u(pa);
			prev = cur;
		}
	}
	fa_finish<HD, SPLIT>(o, mA, mB, lA, lB, out, gate, part, ml, f.slot, H, KV, f.kvh, f.row0, f.u0, f.nM, warp, gq, tq);
}
#endif

// fa_wg_entry is the body of the entries below: fa_prefill_wg at head dim
// 256 on an sm_90a image, a trap elsewhere.
template <bool SPLIT, int SCHED>
__device__ __forceinline__ void fa_wg_entry(float *out, const float *q, const float *gate, const unsigned short *kc,
		const unsigned short *vc, const int *pos, const int *pageOff, const int *pages, const int4 *tiles, float *part, float *ml,
		int H, int KV, int pageSize, int numPages, int layer, float scale) {
	PDL_LAUNCH();
	PDL_WAIT();
#ifdef FA_WG
	fa_prefill_wg<256, FA_WG_BN, SPLIT, SCHED>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, H, KV, pageSize, numPages, layer,
			scale, part, ml);
#else
	__trap();
#endif
}

// attention_prefill_kvbf16_hd256<SUF> and attention_prefill_split_kvbf16_hd256<SUF>
// for SUF _wg (FA_WG_PLAIN), _wgp (FA_WG_PIPE), _wgt (FA_WG_TURNS) and _wgc
// (FA_WG_COPIES):
// attention_prefill_kvbf16_hd256 and its split twin on wgmma (sm_90a
// images; elsewhere they trap), which attentionFlash takes on such an
// image as COHORT_CUDA_FLASH_WG says (flashWG).
#define FA_WG_ENTRIES(SUF, SCHED)                                                                                       \
	extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_kvbf16_hd256##SUF(float *out,        \
	    const float *q, const float *gate, const unsigned short *kc, const unsigned short *vc, const int *pos,           \
	    const int *pageOff, const int *pages, const int4 *tiles, int H, int KV, int pageSize, int numPages, int layer,   \
	    float scale) {                                                                                                   \
		fa_wg_entry<false, SCHED>(out, q, gate, kc, vc, pos, pageOff, pages, tiles, nullptr, nullptr, H, KV, pageSize, \
		    numPages, layer, scale);                                                                                     \
	}                                                                                                                    \
	extern "C" __global__ void __launch_bounds__(FA_THREADS, 1) attention_prefill_split_kvbf16_hd256##SUF(float *out,  \
	    const float *q, const float *gate, const unsigned short *kc, const unsigned short *vc, const int *pos,           \
	    const int *pageOff, const int *pages, const int4 *items, float *part, float *ml, int H, int KV, int pageSize,    \
	    int numPages, int layer, float scale) {                                                                          \
		fa_wg_entry<true, SCHED>(out, q, gate, kc, vc, pos, pageOff, pages, items, part, ml, H, KV, pageSize, numPages,  \
		    layer, scale);                                                                                               \
	}

FA_WG_ENTRIES(_wg, FA_WG_PLAIN)
FA_WG_ENTRIES(_wgp, FA_WG_PIPE)
FA_WG_ENTRIES(_wgt, FA_WG_TURNS)
FA_WG_ENTRIES(_wgc, FA_WG_COPIES)
