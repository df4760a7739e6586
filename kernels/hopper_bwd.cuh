/* hopper's bwd pass (namespace hb): FlashAttention-3 style, sm_90a.
 *
 * D = rowsum(dO*O) first, with L = LSE/scale (hd 64: LSE*log2e) beside it
 * in padded rows of a multiple of 64 (+inf where a row allows nothing or
 * lies past sq, so that P = exp2((S - L)*scale*log2e) is 0 there without
 * a mask).  The main kernel runs one CTA per (k-tile of 128 keys,
 * kv-head, batch) item, k-tiles fastest and heaviest first, a k-tile every
 * query sees split among several CTAs that add their dK/dV to an fp32
 * slot (tile.cuh's walk_items); on long causal and full masks a CTA per
 * (k-tile, q-head), or per stretch of a full row, q-head by q-head, so
 * that the CTAs in flight share one q-head's tiles in L2 (head_items); on
 * causal documents and buckets k-tiles in order, each walking down its
 * q-tiles with every q-head at a q-tile before the next, so that a
 * document's k-tiles add to its dQ lines in step (hb_qm); on 64-token
 * block masks on 64-key k-tiles, each consumer a q-tile of its own
 * (bwd64, hopper_bwd64.cuh, which shares this file's steps).  Three
 * warpgroups: a producer (setmaxnreg 24) whose one thread issues the TMA
 * loads and whose second warp issues the dQ reductions, and two consumers
 * (setmaxnreg 240) of 64 keys each.  K and
 * V of the tile stay in shared memory (TMA, 128-byte swizzle) while the
 * CTA walks the transposed plan over every q-head of the GQA group, Q,
 * dO, L and D of each q-tile of 64 rows arriving through a three-stage ring
 * of mbarriers (full: TMA bytes; empty: every consumer warp done), the
 * next tiles loading while this one runs.  S^T and dP^T are separate
 * wgmma groups: P^T and the dV product go out while dP^T still runs.
 * Per q-tile and warpgroup, all by wgmma:
 *   S^T - L = K Q^T - L and dP^T - D = V dO^T - D (both operands in
 *   shared memory; the accumulators start at -L and -D: ai);
 *   P^T = exp2((S^T - L)*sl), dS^T = P^T (dP^T - D), in registers in exactly
 *   the A-operand layout the next products need;
 *   dV += P^T dO and dK += dS^T Q (A from registers, B = dO, Q read
 *   transposed from the same shared tiles);
 *   dS^T to shared memory, then dQ = dS K, staged in shared memory (while
 *   the dK product runs, which itself runs on under the next tile's S^T
 *   and dP^T) and added to an fp32 workspace by the producer's TMA
 *   reduce-adds, one per box (converted, scale folded in, by a last
 *   kernel): a bulk reduction costs the L2 far less than per-thread
 *   atomics, which bounded the kernel before.  Deterministic (kbench
 *   --deterministic): one CTA per k-tile, none split, and the k-tiles add
 *   to each dQ tile in descending order, a counter per tile in device
 *   memory ordering them.
 * dK/dV of a kv-head sum over its q-heads in registers: no atomics.  Only
 * the plan's partial tiles mask elements (cut bits, as flash does, or a
 * bitmask made in init for tiles of many cuts); K and V
 * rows past sk arrive as zeros from TMA and are masked on the last k-tile
 * alone, so that no inf can reach dQ.
 *
 * Shared tiles are TMA boxes of 64 columns (128 bytes) with the 128-byte
 * swizzle: element (r, c) of a box at r*128 + ((c/8 ^ r%8)*16) + c%8*2,
 * every box 1024-byte aligned, as the wgmma descriptors require. */
#include <limits.h>
#include <math.h>

namespace hb {

#define HB_LOG2E 1.4426950408889634f

/* HB_NST: stages of the Q, dO, L, D ring.  3 fits at hd 128 (232000 of
 * 232448 bytes) and starts each tile's load a whole tile earlier than 2:
 * H100, round 5, full 128K +5.8%, 32K +1-2%, hd 64 +2-3%, causal level. */
#ifndef HB_NST
#define HB_NST 3
#endif

/* MANY: partial tiles with more cuts than this read a bitmask made in init
 * instead of testing every cut (random_eviction: one cut per evicted key). */
enum { BK = 128, BQ = 64, NT = 256, MANY = 8, NST = HB_NST };

/* PH: a CTA per (k-tile, q-head) on causal and full masks whose longest
 * row has PH q-tiles, PH/2 when rows differ in length (head_items). */
enum { PH = 256 };
/* hb_split's most parts, and the shared memory its few-SM kernels ask
 * for only so that no SM takes two of their blocks */
enum { SPLITMAX = 8, OSMEM = 120 * 1024, OSNT = 1024 };

/* Registers of the producer warpgroup and of each consumer after
 * setmaxnreg (the launch gives 168 to each of 384 threads). */
/* Measurement only: HB_NR leaves the dQ reduction out (dQ wrong);
 * HB_EVL asks L2 to keep the dQ lines (evict_last). */
#ifndef HB_NR
#define HB_NR 0
#endif
#ifndef HB_EVL
#define HB_EVL 0
#endif
#ifndef HB_PREG
#define HB_PREG "24"
#define HB_CREG "240"
#endif

template <typename T> using dt = w16<T>;

/* ---- PTX ---------------------------------------------------------------- */

static __device__ __forceinline__ void sts32(uint32_t a, uint32_t v)
{
	asm volatile("st.shared.b32 [%0], %1;" :: "r"(a), "r"(v) : "memory");
}

static __device__ __forceinline__ void bulk(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
	    :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/* Keeps the compiler from moving accumulator reads or writes across the
 * asynchronous wgmma that owns them. */
template <int N> static __device__ __forceinline__ void reg_fence(float (&d)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(d[i]) :: "memory");
}

/* wgmma m64nNk16, fp32 accumulators; ssN: A and B from shared memory
 * (TA/TB: 0 K-major, 1 M/N-major), rsN: A from registers.  acc == 0
 * overwrites d.  The first argument picks the element type. */
/* ssN and rsN for element type T (PTX name TY), N columns in NR
 * accumulators listed by DL and named by RL; the operand numbers after the
 * accumulators: SP/RP the acc flag, SAB/RAB the A and B operands, ST/RT the
 * transpose immediates. */
#define HB_WG(T, TY, N, NR, DL, RL, SP, SAB, ST, RP, RAB, RT) \
template <int TA, int TB> static __device__ __forceinline__ void ss##N(T *, float (&d)[NR], uint64_t a, uint64_t b, int acc) \
{ \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SP ", 0;\n" \
	    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " RL "}, " SAB ", p, 1, 1, " ST ";\n}\n" \
	    : DL : "l"(a), "l"(b), "r"(acc), "n"(TA), "n"(TB)); \
} \
template <int TB> static __device__ __forceinline__ void rs##N(T *, float (&d)[NR], const uint32_t (&a)[4], uint64_t b, int acc) \
{ \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RP ", 0;\n" \
	    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " RL "}, " RAB ", p, 1, 1, " RT ";\n}\n" \
	    : DL : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB)); \
}
HB_WG(__nv_bfloat16, "bf16", 32, 16, WG_D16, WG_R16, "%18", "%16, %17", "%19, %20", "%21", "{%16,%17,%18,%19}, %20", "%22")
HB_WG(__half, "f16", 32, 16, WG_D16, WG_R16, "%18", "%16, %17", "%19, %20", "%21", "{%16,%17,%18,%19}, %20", "%22")
HB_WG(__nv_bfloat16, "bf16", 64, 32, WG_D32, WG_R32, "%34", "%32, %33", "%35, %36", "%37", "{%32,%33,%34,%35}, %36", "%38")
HB_WG(__half, "f16", 64, 32, WG_D32, WG_R32, "%34", "%32, %33", "%35, %36", "%37", "{%32,%33,%34,%35}, %36", "%38")
HB_WG(__nv_bfloat16, "bf16", 128, 64, WG_D64, WG_R64, "%66", "%64, %65", "%67, %68", "%69", "{%64,%65,%66,%67}, %68", "%70")
HB_WG(__half, "f16", 128, 64, WG_D64, WG_R64, "%66", "%64, %65", "%67, %68", "%69", "{%64,%65,%66,%67}, %68", "%70")
#undef HB_WG

/* ---- masks ---------------------------------------------------------------- */

/* The 32 scores a thread holds of its warp's 16 x 64 block of S^T:
 * element b = 4j + x at key kb + 8(x>>1), query qb + 8j + (x&1), with
 * kb = key row g of the warp, qb = 2t of the q-tile (the wgmma
 * accumulator layout), the layout tile.cuh's cut_bits reads:
 * rectangles cost a compare or two per distinct row and column, only
 * diagonal cuts test every element. */
struct lay {
	enum { NQ = 16, NK = 2 };
	static __host__ __device__ constexpr int qoff(int u) { return (u >> 1) * 8 + (u & 1); }
	static __host__ __device__ constexpr int koff(int u) { return u * 8; }
	static __host__ __device__ constexpr int qi(int b) { return (b >> 2) * 2 + (b & 1); }
	static __host__ __device__ constexpr int ki(int b) { return (b & 3) >> 1; }
};

/* The same 32 bits from a tile's bitmask: key rows kr and kr + 8, queries
 * 2t + 8j and 2t + 8j + 1 of each. */
static __device__ __forceinline__ uint32_t bm_bits(const uint2 *bm, int kr, int t4)
{
	const uint2 r0 = bm[kr], r1 = bm[kr + 8];
	const uint64_t w0 = ((uint64_t)r0.y << 32 | r0.x) >> 2 * t4, w1 = ((uint64_t)r1.y << 32 | r1.x) >> 2 * t4;
	uint32_t ok = 0;
#pragma unroll
	for (int j = 0; j < 8; j++)
		ok |= (uint32_t)(w0 >> 8 * j & 3) << 4 * j | (uint32_t)(w1 >> 8 * j & 3) << (4 * j + 2);
	return ok;
}

/* The same 32 bits where each key allows one interval of queries: keys kb
 * and kb + 8 with intervals v0 and v1, queries qb + 8j + e (e 0 or 1),
 * bit 4j + 2 (key) + e.  Per key and e the allowed j are a run, bits a
 * nibble apart: a few shifts where a cut takes a compare a query column
 * and a diagonal cut one an element. */
static __device__ __forceinline__ uint32_t nib(int n)
{
	return 0x11111111u & (n >= 8 ? ~0u : (1u << 4 * n) - 1);
}

static __device__ __forceinline__ uint32_t iv_bits(const int2 *qiv, int kb, int qb)
{
	const int2 v[2] = { qiv[kb], qiv[kb + 8] };
	uint32_t ok = 0;
#pragma unroll
	for (int kk = 0; kk < 2; kk++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int ja = min(8, (max(v[kk].x - qb - e, 0) + 7) >> 3);
			const int jb = min(8, (max(v[kk].y - qb - e, 0) + 7) >> 3);
			ok |= (nib(jb) & ~nib(ja)) << (2 * kk + e);
		}
	return ok;
}

/* ---- small kernels --------------------------------------------------------- */

/* ai<HD>::on: the accumulators of S^T and dP^T start at -L and -D (prep
 * stores L = lse/scale and both negated) instead of 0, so that nothing is
 * loaded or subtracted between the products' wait and the exponentials
 * (round 18: hd 128 +3-6 % on both devices, pile causal documents +6 %).
 * hd 64 keeps zeros (L = lse*log2e read beside the wait): its shorter
 * products do not cover the loads before them (H100: -2 to -4 %). */
template <int HD> struct ai { static constexpr bool on = HD == 128; };

/* prep's shape: a lane takes PV 16-byte pieces of a row, all loaded
 * before any is used, PL lanes a row, PR rows a warp, 8 warps a block
 * (32 in hb_split's few-SM blocks).
 * Round 30 (short documents, ncu, H200): a warp a row moved 512 bytes a
 * round trip at 1.35 TB/s; four rows a lane in flight, 1.56 TB/s, issue
 * bound on the rows' index arithmetic (a division each); a row a lane
 * with its 64 bytes of O and of dO spends that arithmetic once. */
template <int HD> struct pshape {
	static constexpr int PV = 4, PL = HD / 8 / PV, PR = 32 / PL, ROWS = PR * 8;
};

/* A load and a store that stream past L2 where CS, plain ones elsewhere */
template <bool CS, typename V> static __device__ __forceinline__ V ld_cs(const V *p)
{
	if constexpr (CS)
		return __ldcs(p);
	else
		return *p;
}

template <bool CS, typename V> static __device__ __forceinline__ void st_cs(V *p, V v)
{
	if constexpr (CS)
		__stcs(p, v);
	else
		*p = v;
}

/* D[b][h][q] = sum_d dO*O and L[b][h][q] = lse*log2e, or (ai) -D and
 * -lse/scale, rows padded to sqp: PL lanes per (b, q, h) row, q < sqp and
 * h0 <= h < h0 + nh (one part's q-heads, or all); a
 * row past sq or with lse = -inf gets L = +inf (P = 0) and D = 0.  With
 * a padded plan (qtile) q is the padded row, read from its real one; rows
 * in gaps are rows past sq.
 * dqa non-NULL: the real row's fp32 dQ zeroed too (gaps only move rows, so
 * every real row is one lane group's), in the pass that reads O and dO, instead
 * of a memset of its own (on 1K documents the O(S) kernels are a quarter of
 * the bwd: bench/NOTES.md, "hopper bwd on 1K documents, profiled").
 * dq non-NULL (fuse, solo): the row's dQ written as zeros where no k-tile
 * adds to its q-tile (tgt 0), since no CTA converts or writes that tile;
 * cnt non-NULL (fuse): a q-tile's first row sets the tile's count in cnt
 * to its target, which the k-tiles' adds count down. */
template <typename T, int HD, bool CS>
__global__ void prep(const T *o, const T *dout, const float *lse, float *D, float *L, float rscale,
    int sq, int sqp, int hq, const int2 *qtile, float *dqa,
    T *dq, const int32_t *tgt, int mgroup, int *cnt, int h0, int nh)
{
	typedef pshape<HD> P;
	const int lane = threadIdx.x & 31, pc = lane % P::PL * 8;
	const int rows = (int)(blockDim.x >> 5) * P::PR, nbx = (sqp * nh + rows - 1) / rows;
	const int64_t b = blockIdx.y;
	/* rows (q, h), h fastest, so that a block reads one stretch of O and
	 * dO; (q, h) by one 32-bit division (64-bit ones made this pass
	 * issue-bound: ncu, round 9).  CS (split): fewer blocks than rows,
	 * each taking one stretch after another on an SM of its own, beside
	 * the main kernel of another part; what it reads and writes is not
	 * read again until that part runs, so it streams past L2 */
	for (int bx = blockIdx.x; bx < nbx; bx += gridDim.x) {
		const int rb = bx * rows + (int)(threadIdx.x >> 5) * P::PR + lane / P::PL;
		const int q = rb / nh, h = h0 + rb - q * nh;
		const bool in = rb < sqp * nh;
		int r = in && q < sq ? q : -1;
		if (qtile != NULL && in) {
			const int2 t = qtile[q / BQ];
			r = q % BQ < t.y ? t.x + q % BQ : -1;
		}
		const int64_t src = r >= 0 ? ((b * sq + r) * hq + h) * HD + pc : 0;
		uint4 x[P::PV], y[P::PV];
		float l = -INFINITY;
		if (r >= 0) {
#pragma unroll
			for (int v = 0; v < P::PV; v++) {
				x[v] = ld_cs<CS>((const uint4 *)(o + src + v * P::PL * 8));
				y[v] = ld_cs<CS>((const uint4 *)(dout + src + v * P::PL * 8));
			}
			l = lse[(b * hq + h) * sq + r];
		} else {
#pragma unroll
			for (int v = 0; v < P::PV; v++)
				x[v] = y[v] = make_uint4(0, 0, 0, 0);
		}
		float sum = 0;
#pragma unroll
		for (int v = 0; v < P::PV; v++) {
			const uint32_t xa[4] = {x[v].x, x[v].y, x[v].z, x[v].w}, ya[4] = {y[v].x, y[v].y, y[v].z, y[v].w};
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const float2 a2 = dt<T>::unpack(xa[i]), c2 = dt<T>::unpack(ya[i]);
				sum += a2.x * c2.x + a2.y * c2.y;
			}
		}
#pragma unroll
		for (int off = P::PL / 2; off > 0; off >>= 1)
			sum += __shfl_xor_sync(0xffffffffu, sum, off);
		if (!in)
			continue;
		const int tg = tgt != NULL ? tgt[(h / mgroup) * (sqp / BQ) + q / BQ] : 1;
		if (r >= 0) {
#pragma unroll
			for (int v = 0; v < P::PV; v++) {
				if (dqa != NULL) {
					float4 *z = (float4 *)(dqa + src + v * P::PL * 8);
					st_cs<CS>(z, make_float4(0.f, 0.f, 0.f, 0.f));
					st_cs<CS>(z + 1, make_float4(0.f, 0.f, 0.f, 0.f));
				}
				if (dq != NULL && tg == 0)
					*(uint4 *)(dq + src + v * P::PL * 8) = make_uint4(0, 0, 0, 0);
			}
		}
		if (pc == 0) {
			if (cnt != NULL && q % BQ == 0)
				cnt[(b * hq + h) * (sqp / BQ) + q / BQ] = tg;
			const int64_t dst = (b * hq + h) * sqp + q;
			if constexpr (ai<HD>::on) {
				D[dst] = -sum;
				L[dst] = l == -INFINITY ? -INFINITY : -l * rscale;
			} else {
				D[dst] = sum;
				L[dst] = l == -INFINITY ? INFINITY : l * HB_LOG2E;
			}
		}
	}
}

/* split: one part's fp32 dQ into dq, the scale folded in.  acc and dq
 * point at the part's first q-head in row 0; a row's w4 float4 are the
 * part's q-heads, ld elements from the next row's.  UN float4 a thread
 * in flight, streamed past L2, since this runs on a few SMs beside the
 * next part's main kernel and nothing reads them again (rows * w4 <
 * 2^32: run_t splits only then). */
template <typename T>
__global__ void dq_part(const float *acc, T *dq, uint32_t rows, uint32_t w4, int64_t ld, float scale)
{
	constexpr int UN = 8;
	const uint64_t n = (uint64_t)rows * w4, step = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += UN * step) {
		float4 x[UN];
		int64_t at[UN];
#pragma unroll
		for (int u = 0; u < UN; u++) {
			const uint32_t i = (uint32_t)(e + u * step), r = i / w4;
			at[u] = e + u * step < n ? r * ld + (int64_t)(i - r * w4) * 4 : -1;
			if (at[u] >= 0)
				x[u] = __ldcs((const float4 *)(acc + at[u]));
		}
#pragma unroll
		for (int u = 0; u < UN; u++)
			if (at[u] >= 0)
				__stcs((uint2 *)(dq + at[u]), dq_pack<T>(x[u], scale));
	}
}

/* ---- the main kernel -------------------------------------------------------- */

struct args {
	const float *L, *D;        /* padded rows [b][hq][sqp] */
	float *dqa;
	void *dk, *dv;
	float *wsk, *wsv;          /* fp32 dK, dV of split k-tiles, [slot][b][hkv][BK][hd] */
	const int32_t *row;
	const int4 *item;          /* per CTA: k-tile, first tile of its walk, tiles, slot */
	const plan_ent *ent;
	const plan_cut *cut;
	/* per entry: bit h whether keys 64h.. of the k-tile see some of it
	 * (halves), its bitmask's index above (where ncut > MANY) */
	const int32_t *einf;
	const uint2 *bm;           /* per bitmask BK key rows of BQ query bits */
	const int2 *qiv;           /* per key its one interval of queries, or NULL */
	/* deterministic: per q-tile row of the (untransposed) plan its k-tile
	 * runs (first k-tile, k-tiles before it in the row), and per (b, hq,
	 * q-tile) how many k-tiles have added their dQ */
	const int32_t *frow;
	const int2 *frank;
	int *sem;
	int sq, sk, sqp, hq, hkv, nkt, nqt, group, mgroup, batch;
	/* a padded plan (tile.cuh's pad_plan): per q-tile and k-tile {first
	 * real row, real rows}, NULL: tile t starts at t * its size; skv is
	 * the padded sk, which the cuts and edges are in (sk, else) */
	const int2 *qtile, *ktile;
	int skv;
	int rev;                   /* head_items' walks from the last q-tile down */
	int hk0;                   /* the kv-head of grid y 0 (a split's part) */
	/* fuse (bit 0: the converted workspace lines discarded from L2; bit
	 * 1: written as zeros, so that prep need not zero them; 4 and 8:
	 * fin_run's timing switches; 0: off): the count that completes a dQ
	 * tile queues it, and the converting CTAs write it into dq (no dq_out
	 * pass); per (b, hq, q-tile) the CTAs still to add (prep sets them) */
	int fuse;
	int *cnt;
	void *dq;
	/* fuse: the completed tiles ((b * hq + h) * nqt + t, plus 1) in the
	 * order their counts completed; qn[0] the next slot to fill, qn[1] the
	 * next to convert; qtotal tiles in all */
	int *q, *qn;
	int qtotal, fconv;         /* fconv: the converting CTAs */
	float sl, scale;
};

/* q-tile t's first real row and real rows (real_q: the first alone);
 * k-tile t's first real key and real keys. */
static __device__ __forceinline__ int2 real_qt(const args &a, int t)
{
	return a.qtile != NULL ? a.qtile[t] : make_int2(t * BQ, min(BQ, a.sq - t * BQ));
}

static __device__ __forceinline__ int real_q(const args &a, int t)
{
	return a.qtile != NULL ? a.qtile[t].x : t * BQ;
}

template <int BKT = BK> static __device__ __forceinline__ int2 real_k(const args &a, int t)
{
	return a.ktile != NULL ? a.ktile[t] : make_int2(t * BKT, min(BKT, a.sk - t * BKT));
}

/* A CTA's walk: bwalk's, or with rev (head_items only: a CTA is one row of
 * one q-head, first = gi * len) the same row from its last q-tile down, or
 * with qm (hb_qm: one-head masks, walk_items, every q-head on row kt) the
 * row from its last q-tile down, every q-head of the group at a q-tile
 * before the next, k-tile kt's from q-head kt % group on, so that the
 * k-tiles of a document that walk in step do not add to one dQ line at
 * once (without it, 1K documents lost 14 %: NOTES round 12). */
template <bool QM, class A> static __device__ __forceinline__ bool hb_start(bwalk &w, const A &a, int hk, int kt, int4 item)
{
	if (QM) {
		int pos = item.y / a.group;
		w.gi = (item.y + kt) % a.group;
		w.e1 = a.row[kt];
		for (w.e = a.row[kt + 1] - 1; w.e >= w.e1; w.e--) {
			const int n = a.ent[w.e].t1 - a.ent[w.e].t0;
			if (pos < n) {
				w.t = a.ent[w.e].t1 - 1 - pos;
				return true;
			}
			pos -= n;
		}
		return false;
	}
	if (!a.rev)
		return bwalk_seek(w, a, hk, kt, item.y);
	w.gi = item.y / item.z;
	const int r = ((hk * a.group + w.gi) / a.mgroup) * a.nkt + kt;
	w.e1 = a.row[r];
	w.e = a.row[r + 1] - 1;
	w.t = a.ent[w.e].t1 - 1;
	return true;
}

/* E: entry w.e (bwalk_next's) */
template <bool QM, class A> static __device__ __forceinline__ bool hb_next(bwalk &w, const A &a, int hk, int kt, const plan_ent &E)
{
	if (QM) {
		w.gi = w.gi + 1 < a.group ? w.gi + 1 : 0;
		if (w.gi != kt % a.group)
			return true;
	}
	if (!a.rev && !QM)
		return bwalk_next(w, a, hk, kt, E);
	if (--w.t >= E.t0)
		return true;
	if (--w.e < w.e1)
		return false;
	w.t = a.ent[w.e].t1 - 1;
	return true;
}

template <bool QM, class A> static __device__ __forceinline__ bool hb_next(bwalk &w, const A &a, int hk, int kt)
{
	return hb_next<QM>(w, a, hk, kt, a.ent[w.e]);
}

/* Shared memory: K, V [HD/64][BK][64]; Q, dO [NST stages][HD/64][BQ][64];
 * dS^T [2][BK][BQ]; dQ [HD / 32 boxes][BQ][32] fp32 (HD 128: consumer w's
 * columns in boxes 2w, 2w + 1); L, D [NST][BQ]; mbarriers: K/V,
 * full[NST], empty[NST]; fuse: at CV the items whose adds are released to
 * the counting warp. */
template <int HD> struct lay_smem {
	static_assert(8 + 16 * NST <= 64, "mbarriers past BAR's 64 bytes");
	enum {
		KB = BK * HD * 2, QB = BQ * HD * 2, SB = BK * BQ * 2,
		K = 0, V = KB, Q = 2 * KB, O = 2 * KB + NST * QB, S = 2 * KB + 2 * NST * QB,
		DQ = S + 2 * SB,        /* [4 boxes][BQ][32] fp32, 128-byte swizzle (HD 64: 2 used) */
		L = DQ + 4 * BQ * 128, D = L + NST * BQ * 4, BAR = D + NST * BQ * 4,
		CV = BAR + 64,
		TOTAL = CV + 16 + 1024      /* + alignment of the base to 1024 */
	};
};

static __device__ __forceinline__ void bar_arrive(uint32_t bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

/* Named barriers: 1 both consumers (dS^T); DQF + w: consumer w's dQ is
 * staged; DQE + w: its staging boxes are free again (the reducing warp
 * and the 128 threads of consumer w).  HD 64: one consumer a tile stages
 * the whole dQ, in turns, through DQF and DQE (barrier 1 orders the
 * turns, so no generation mixes the two consumers). */
enum { DQF = 2, DQE = 4, NDQ = 128 + 32 };

/* fuse: the reducing warp releases its adds every FB items. */
enum { FB = 8 };

static __device__ __forceinline__ void nbar_sync(int id, int n)
{
	asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}

static __device__ __forceinline__ void nbar_arrive(int id, int n)
{
	asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}

template <int N> static __device__ __forceinline__ void reg_fence(uint32_t (&r)[N][4])
{
#pragma unroll
	for (int i = 0; i < N; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			asm volatile("" : "+r"(r[i][j]) :: "memory");
}

/* The producer's load of a stage: q-tile rows qg.. of q-head h (CB boxes
 * of 64 columns of Q and dO, each BQ rows of 128 bytes) into q
 * and o, and its padded rows' L and D (from q0) into l and d, all
 * completing on bar. */
template <int CB>
static __device__ __forceinline__ void stage_load(const CUtensorMap *tq, const CUtensorMap *tdo, const args &a,
    uint32_t q, uint32_t o, uint32_t l, uint32_t d, int h, int qg, int q0, int b, uint32_t bar)
{
#pragma unroll
	for (int c = 0; c < CB; c++) {
		tma4(q + c * BQ * 128, tq, c * 64, h, qg, b, bar);
		tma4(o + c * BQ * 128, tdo, c * 64, h, qg, b, bar);
	}
	const int64_t off = ((int64_t)b * a.hq + h) * a.sqp + q0;
	bulk(l, a.L + off, BQ * 4, bar);
	bulk(d, a.D + off, BQ * 4, bar);
}

/* ---- a consumer's steps, shared by bwd and bwd64 ------------------------- */

/* ai: the accumulators of S^T and dP^T at -L and -D of the stage's rows (a
 * thread's columns 8j + 2t4 and + 1, both of its key rows). */
static __device__ __forceinline__ void acc_ld(float (&s)[32], float (&dp)[32], const float *cL, const float *cD, int t4)
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		const float2 l = *(const float2 *)(cL + 8 * j + 2 * t4), d = *(const float2 *)(cD + 8 * j + 2 * t4);
		s[4 * j] = s[4 * j + 2] = l.x;
		s[4 * j + 1] = s[4 * j + 3] = l.y;
		dp[4 * j] = dp[4 * j + 2] = d.x;
		dp[4 * j + 1] = dp[4 * j + 3] = d.y;
	}
}

/* S^T = K Q^T and dP^T = V dO^T over KS k-steps of 16 columns, two
 * groups: K's and V's boxes of 64 columns KX bytes apart, Q's and dO's QX;
 * ONE: every step accumulates (ai), else the first overwrites. */
template <int KS, uint32_t KX, uint32_t QX, bool ONE, typename T>
static __device__ __forceinline__ void sdp_issue(T *tag, float (&s)[32], float (&dp)[32], uint32_t k_d, uint32_t q_d,
    uint32_t v_d, uint32_t o_d)
{
	wg_fence();
#pragma unroll
	for (int ks = 0; ks < KS; ks++)
		ss64<0, 0>(tag, s, dsc(k_d, (ks >> 2) * KX + (ks & 3) * 32), dsc(q_d, (ks >> 2) * QX + (ks & 3) * 32), ONE ? 1 : ks);
	wg_commit();
#pragma unroll
	for (int ks = 0; ks < KS; ks++)
		ss64<0, 0>(tag, dp, dsc(v_d, (ks >> 2) * KX + (ks & 3) * 32), dsc(o_d, (ks >> 2) * QX + (ks & 3) * 32), ONE ? 1 : ks);
	wg_commit();
}

/* P^T = exp2((S^T - L) a.sl) (ai), or exp2(S^T a.sl - L) with L in lv, zero
 * where ok's bit is clear, packed as the A fragments of dV's product. */
template <typename T, bool AI>
static __device__ __forceinline__ void p_pack(float (&s)[32], uint32_t (&pa)[4][4], uint32_t ok, const args &a, const float2 (&lv)[8])
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
#pragma unroll
		for (int x = 0; x < 4; x++) {
			float v;
			if constexpr (AI)
				v = ex2(s[4 * j + x] * a.sl);
			else
				v = ex2(fmaf(s[4 * j + x], a.sl, x & 1 ? -lv[j].y : -lv[j].x));
			s[4 * j + x] = (ok >> (4 * j + x)) & 1 ? v : 0.f;
		}
		pa[j >> 1][(j & 1) * 2] = dt<T>::pack(s[4 * j], s[4 * j + 1]);
		pa[j >> 1][(j & 1) * 2 + 1] = dt<T>::pack(s[4 * j + 2], s[4 * j + 3]);
	}
}

/* dS^T = P^T dP^T (ai: dP^T - D already), or P^T (dP^T - D) with D in dd:
 * registers for dK's product, and key rows kr + g and + 8 of the dS^T
 * tile at sS (BQ columns, 128-byte swizzle) for dQ's. */
template <typename T, bool AI>
static __device__ __forceinline__ void ds_pack(const float (&s)[32], const float (&dp)[32], uint32_t (&da)[4][4],
    const float2 (&dd)[8], uint32_t sS, int kr, int g, int t4)
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		float ds[4];
#pragma unroll
		for (int x = 0; x < 4; x++)
			if constexpr (AI)
				ds[x] = s[4 * j + x] * dp[4 * j + x];
			else
				ds[x] = s[4 * j + x] * (dp[4 * j + x] - (x & 1 ? dd[j].y : dd[j].x));
		da[j >> 1][(j & 1) * 2] = dt<T>::pack(ds[0], ds[1]);
		da[j >> 1][(j & 1) * 2 + 1] = dt<T>::pack(ds[2], ds[3]);
		sts32(sS + (kr + g) * 128 + ((j ^ g) << 4) + t4 * 4, da[j >> 1][(j & 1) * 2]);
		sts32(sS + (kr + g + 8) * 128 + ((j ^ g) << 4) + t4 * 4, da[j >> 1][(j & 1) * 2 + 1]);
	}
}

/* acc += A B over the q-tile's BQ rows, A from registers (P^T or dS^T),
 * B the stage's dO or Q read N-major: dV's and dK's products, a group. */
template <int HD, typename T>
static __device__ __forceinline__ void rs_issue(T *tag, float (&acc)[HD / 2], const uint32_t (&fr)[4][4], uint32_t base)
{
	wg_fence();
#pragma unroll
	for (int kk = 0; kk < BQ / 16; kk++) {
		if constexpr (HD == 128)
			rs128<1>(tag, acc, fr[kk], dsc(dlo(base, BQ * 128), kk * 2048), 1);
		else
			rs64<1>(tag, acc, fr[kk], dsc(dlo(base, BQ * 128), kk * 2048), 1);
	}
	wg_commit();
}

/* The bits of a thread's scores (key rows k0 + kr + g and + 8) whose keys
 * lie before skv: keys past it arrive as zeros from TMA and only a k-tile
 * of BKT keys that ends past it has any. */
template <int BKT> static __device__ __forceinline__ uint32_t keys_valid(const args &a, int k0, int kr, int g)
{
	uint32_t ok = ~0u;
	if (k0 + BKT > a.skv)
		ok = rect_bits<lay>(0, k0 + kr + g, 0, 1 << 30, 0, a.skv);
	return ok;
}

/* dq's column groups of 8 (N / 4 of them) into fp32 boxes of 32 columns
 * from sq0 on (BQ rows of 128 bytes, 128-byte swizzle), rows wi*16 + g
 * and + 8 (odd: g & 1).  The swizzle puts rows g and g^1 of one column
 * group on the same banks, and a 64-bit store serves 16 lanes (rows
 * g..g+3) at a time: odd rows store group j^2 where even ones store j, so
 * that each
 * half-warp hits 32 distinct banks (ncu: 2 wavefronts a half-warp
 * before). */
template <int N> static __device__ __forceinline__ void dq_stage(uint32_t sq0, const float (&dq)[N], int wi, int g, int t4,
    int odd)
{
#pragma unroll
	for (int j = 0; j < N / 4; j++)
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			const int r = wi * 16 + g + rr * 8, je = j ^ (odd << 1);
			const uint32_t ad = sq0 + (j >> 2) * BQ * 128 + r * 128 +
			    (((2 * (je & 3) + (t4 >> 1)) ^ g) << 4) + (t4 & 1) * 8;
			const float v0 = odd ? dq[4 * (j ^ 2) + 2 * rr] : dq[4 * j + 2 * rr];
			const float v1 = odd ? dq[4 * (j ^ 2) + 2 * rr + 1] : dq[4 * j + 2 * rr + 1];
			asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(ad), "f"(v0), "f"(v1) : "memory");
		}
}

/* solo (hb_solo: each q-tile's dQ comes from one step of one CTA): a
 * consumer's dQ columns c0.. of q-tile w.t written, scaled, straight into
 * dq up to the tile's real rows (a TMA store of the whole box would write
 * over the next document's rows, past a gap), with no workspace to zero,
 * add to or convert.  The reducing warp doing it from the staged boxes
 * instead was 19 % slower (one warp on the consumers' path). */
template <typename T, int HD, int N>
static __device__ __forceinline__ void dq_solo(const args &a, const bwalk &w, int hk, int b, const float (&dq)[N], int c0,
    int wi, int g, int t4)
{
	const int h = hk * a.group + w.gi;
	const int2 qt = real_qt(a, w.t);
	const int64_t ld = (int64_t)a.hq * HD;
	T *o = (T *)a.dq + ((int64_t)b * a.sq + qt.x) * ld + (int64_t)h * HD + c0 + 2 * t4;
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		const int r = wi * 16 + g + rr * 8;
		if (r < qt.y) {
#pragma unroll
			for (int j = 0; j < N / 4; j++)
				*(uint32_t *)(o + r * ld + 8 * j) = dt<T>::pack(dq[4 * j + 2 * rr] * a.scale,
				    dq[4 * j + 2 * rr + 1] * a.scale);
		}
	}
}

/* dK (scaled) and dV of key rows kr + g and + 8 of k-tile kt (BKT keys):
 * added to the tile's fp32 slot where its walk is split (item.w), else
 * written, up to the keys the tile holds (read here, not kept through the
 * loop: it spilled). */
template <typename T, int HD, int BKT>
static __device__ __forceinline__ void kv_store(const args &a, int4 item, int b, int hk, int kt, const float (&dk)[HD / 2],
    const float (&dv)[HD / 2], int kr, int g, int t4)
{
	const int64_t kbase = ((int64_t)b * a.sk * a.hkv + hk) * HD;
	if (item.w >= 0) {
		const int64_t so = (((int64_t)item.w * a.batch + b) * a.hkv + hk) * BKT * HD;
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			const int row = kr + g + rr * 8;
			float *pk = a.wsk + so + row * HD + t4 * 2, *pv = a.wsv + so + row * HD + t4 * 2;
#pragma unroll
			for (int j = 0; j < HD / 8; j++) {
				atomicAdd((float2 *)(pk + j * 8), make_float2(dk[4 * j + 2 * rr] * a.scale, dk[4 * j + 2 * rr + 1] * a.scale));
				atomicAdd((float2 *)(pv + j * 8), make_float2(dv[4 * j + 2 * rr], dv[4 * j + 2 * rr + 1]));
			}
		}
		return;
	}
	T *DK = (T *)a.dk + kbase, *DV = (T *)a.dv + kbase;
	const int64_t ldk = (int64_t)a.hkv * HD;
	const int2 K = real_k<BKT>(a, kt);
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		const int kk = kr + g + rr * 8;
		if (kk >= K.y)
			continue;
		const int64_t off = (int64_t)(K.x + kk) * ldk + t4 * 2;
#pragma unroll
		for (int j = 0; j < HD / 8; j++) {
			*(uint32_t *)(DK + off + j * 8) = dt<T>::pack(dk[4 * j + 2 * rr] * a.scale, dk[4 * j + 2 * rr + 1] * a.scale);
			*(uint32_t *)(DV + off + j * 8) = dt<T>::pack(dv[4 * j + 2 * rr], dv[4 * j + 2 * rr + 1]);
		}
	}
}

/* Deterministic dQ: the k-tiles add to a q-tile in descending order (a
 * later k-tile's walk reaches a q-tile first on causal-like masks, so
 * that a CTA seldom waits).  rank: how many k-tiles of q-tile t's row
 * (mask head hm) come after kt. */
template <class A> static __device__ __forceinline__ int dq_rank(const A &a, int hm, int t, int kt)
{
	const int r = hm * a.nqt + t;
	int lo = a.frow[r], hi = a.frow[r + 1] - 1;
	while (lo < hi) {           /* the first run ending after kt */
		const int mid = (lo + hi) >> 1;
		if (a.frank[mid].x > kt)
			hi = mid;
		else
			lo = mid + 1;
	}
	const int2 f = a.frank[lo];
	return f.y + f.x - 1 - kt;
}

static __device__ __forceinline__ void sem_wait(const int *p, int v)
{
	int x;
	for (;;) {
		asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(x) : "l"(p) : "memory");
		if (x >= v)
			break;
		__nanosleep(64);
	}
	asm volatile("fence.proxy.async.global;" ::: "memory");
}

static __device__ __forceinline__ void sem_post(int *p)
{
	asm volatile("fence.proxy.async.global;" ::: "memory");
	asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(p) : "memory");
}

/* fuse, the reducing warp (lane 0): the adds of the first n items, all
 * issued, complete (wait_group 0: the staging boxes are free already, so
 * no consumer waits on it), then released to the counting warp. */
static __device__ __forceinline__ void fin_release(uint32_t cv, int n)
{
	asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
	asm volatile("fence.proxy.async.global;" ::: "memory");
	asm volatile("st.release.cta.shared.b32 [%0], %1;" :: "r"(cv), "r"(n) : "memory");
}

/* fuse, the counting warp (the producer's third): walks the CTA's items
 * as the reducing warp releases them (FB at a time), counts each
 * (q-head, q-tile) down once, 32 at a time, with relaxed atomics after
 * one acquire fence a batch, and queues the tiles it completes for the
 * converting CTAs.  Round 13's fuse paid a fence and a dependent atomic
 * an item in the reducing warp (-7 to -43 %); round 15's first counted
 * once a CTA, at its end, by when the lines had left L2 (-0 to -10 %);
 * its second converted in this warp, whose 24 registers made it too
 * slow to keep up (-17 to -38 %). */
template <bool QM, class A> static __device__ __forceinline__ void fin_run(const A &a, int4 item, int hk, int kt,
    int b, uint32_t cv)
{
	const int lane = threadIdx.x & 31;
	int *cnt = a.cnt + (int64_t)b * a.hq * a.nqt;
	bwalk w = {0, 0, 0, 0};
	int left = item.z, pos = 0;
	/* a.fuse 8: no counts, 4: none queued (timing only, dq wrong) */
	bool more = left > 0 && !(a.fuse & 8) && hb_start<QM>(w, a, hk, kt, item);

	while (more) {
		int rel;
		for (;;) {
			asm volatile("ld.acquire.cta.shared.b32 %0, [%1];" : "=r"(rel) : "r"(cv) : "memory");
			if (rel > pos)
				break;
			__nanosleep(200);
		}
		asm volatile("fence.acq_rel.gpu;" ::: "memory");
		while (more && pos < rel) {
			int mine = -1, old = 0;
			for (int j = 0; j < 32 && more && pos < rel; j++, pos++) {
				if (j == lane)
					mine = (hk * a.group + w.gi) * a.nqt + w.t;
				more = --left > 0 && hb_next<QM>(w, a, hk, kt);
			}
			if (mine >= 0)
				asm volatile("atom.relaxed.gpu.global.add.s32 %0, [%1], -1;" : "=r"(old) : "l"(cnt + mine) : "memory");
			if (__any_sync(0xffffffffu, old == 1))
				asm volatile("fence.acq_rel.gpu;" ::: "memory");
			if (old == 1 && !(a.fuse & 4)) {
				const int slot = atomicAdd(a.qn, 1);
				asm volatile("st.release.gpu.global.b32 [%0], %1;"
				    :: "l"(a.q + slot), "r"(b * a.hq * a.nqt + mine + 1) : "memory");
			}
		}
	}
}

/* fuse, the first fconv CTAs (a.fconv): each warp takes the
 * queued tiles in turn, waits for one to be queued, and writes its real
 * rows of the fp32 workspace, scaled, into dq (U float4 loads a lane in
 * flight, from L2: the tile's last add came microseconds before); then
 * discards the lines from L2 (fuse 1: prep zeroes them again, so they
 * need never reach DRAM) or zeroes them (fuse 2: the workspace stays zero
 * between passes).  These CTAs hold their SMs for the whole pass, so that
 * the conversion runs beside the k-tiles' CTAs on the others; all their
 * warps convert. */
template <typename T, int HD, class A> static __device__ __forceinline__ void fin_conv(const A &a)
{
	constexpr int C4 = HD / 4, RW = 32 / C4, U = 16;     /* float4 a row, rows a warp-wide load */
	const int lane = threadIdx.x & 31, c = lane % C4 * 4;
	const int64_t ld = (int64_t)a.hq * HD;

	if (a.fuse & 12)
		return;
	for (;;) {
		int i = 0, x;
		if (lane == 0)
			i = atomicAdd(a.qn + 1, 1);
		i = __shfl_sync(0xffffffffu, i, 0);
		if (i >= a.qtotal)
			return;
		for (;;) {
			asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(x) : "l"(a.q + i) : "memory");
			if (x != 0)
				break;
			__nanosleep(100);
		}
		x--;
		const int t = x % a.nqt, h = x / a.nqt % a.hq, b = x / a.nqt / a.hq;
		const int2 qt = real_qt(a, t);
		const int64_t base = ((int64_t)b * a.sq + qt.x) * ld + (int64_t)h * HD + c;
		for (int r = lane / C4; r < qt.y; r += U * RW) {
			float4 v[U];
#pragma unroll
			for (int j = 0; j < U; j++)
				if (r + j * RW < qt.y)
					v[j] = __ldcg((const float4 *)(a.dqa + base + (r + j * RW) * ld));
#pragma unroll
			for (int j = 0; j < U; j++)
				if (r + j * RW < qt.y) {
					const int64_t o = base + (r + j * RW) * ld;
					*(uint2 *)((T *)a.dq + o) = dq_pack<T>(v[j], a.scale);
					if (a.fuse & 2)
						*(float4 *)(a.dqa + o) = make_float4(0.f, 0.f, 0.f, 0.f);
				}
			if (!(a.fuse & 2)) {
				/* every lane's loads have returned (their values are
				 * stored): the first lane of each 128-byte line drops it */
				__syncwarp();
#pragma unroll
				for (int j = 0; j < U; j++)
					if (lane % 8 == 0 && r + j * RW < qt.y)
						asm volatile("discard.global.L2 [%0], 128;"
						    :: "l"(a.dqa + base + (r + j * RW) * ld) : "memory");
			}
		}
	}
}

/* The last warpgroup (NT..NT+127) is the producer: one thread loads the
 * tiles, one warp adds the staged dQ to the workspace; the two consumers
 * get its registers.  X: bit 0 q-major walks (hb_qm), bit 1 fuse, bit 2
 * solo (hb_solo: no reducing warp, the consumers write dQ), each
 * its own instantiation: with both as runtime branches in the one kernel,
 * full 128K bwd took 11 % longer (H100, round 13), though neither ran. */
template <typename T, int HD, bool DET, bool HALF, int X>
__global__ void __launch_bounds__(NT + 128, 1) bwd(const __grid_constant__ CUtensorMap tq,
    const __grid_constant__ CUtensorMap tdo, const __grid_constant__ CUtensorMap tk,
    const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdq, const args a)
{
	constexpr bool QM = X & 1, FUSE = !DET && (X & 2), SOLO = !DET && !FUSE && (X & 4);
	typedef lay_smem<HD> M;
	/* ONE: one consumer a tile computes and stages the whole dQ; NCQ
	 * consumers stage a tile's dQ, BPX boxes of 32 columns each */
	constexpr bool ONE = HD == 64;
	constexpr int CB = HD / 64, KS = HD / 16, NCQ = ONE ? 1 : 2, BPX = HD / 32 / NCQ;
	constexpr uint32_t KBOX = BK * 128, QBOX = BQ * 128;    /* bytes of one 64-column box */
	extern __shared__ unsigned char smraw[];
	const uint32_t s0 = (smaddr(smraw) + 1023) & ~1023u;
	unsigned char *sm = smraw + (s0 - smaddr(smraw));
	/* barkv; full[s] at barq + 8s; empty[s] at bare + 8s */
	const uint32_t barkv = s0 + M::BAR, barq = s0 + M::BAR + 8, bare = barq + 8 * NST;
	const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
	const int g = lane >> 2, t4 = lane & 3;
	constexpr bool AI = ai<HD>::on;
	if (FUSE && (int)blockIdx.x < a.fconv) {
		if (blockIdx.y == 0 && blockIdx.z == 0)
			fin_conv<T, HD>(a);
		return;
	}
	const int4 item = a.item[blockIdx.x - (FUSE ? a.fconv : 0)];
	const int hk = blockIdx.y + a.hk0, kt = item.x, b = blockIdx.z;
	const int k0 = kt * BK, kr = wg * 64 + wi * 16;
	T *tag = nullptr;

	if (tid == 0) {
		bar_init(barkv, 1);
		for (int i = 0; i < NST; i++) {
			bar_init(barq + 8 * i, 1);
			bar_init(bare + 8 * i, NT / 32);
		}
		if (FUSE)
			sts32(s0 + M::CV, 0);
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	}
	__syncthreads();

	bwalk w = {0, 0, 0, 0};
	int left = item.z;
	bool more = left > 0 && hb_start<QM>(w, a, hk, kt, item);

	if (wg == 2) {
		/* (fuse's counting warp too: with the consumers at 224 or 232
		 * registers, they ran 11-18 % slower; NOTES round 15) */
		asm volatile("setmaxnreg.dec.sync.aligned.u32 " HB_PREG ";");
		if (wi == 0 && lane == 0) {
			/* K, V once; Q, dO, L, D of each q-tile into the stage its
			 * tile before last has freed */
			const int kg = real_k(a, kt).x;
			bar_expect(barkv, 2 * M::KB);
#pragma unroll
			for (int c = 0; c < CB; c++) {
				tma4(s0 + M::K + c * KBOX, &tk, c * 64, hk, kg, b, barkv);
				tma4(s0 + M::V + c * KBOX, &tv, c * 64, hk, kg, b, barkv);
			}
			for (int it = 0; more; it++) {
				const int st = it % NST, h = hk * a.group + w.gi, q0 = w.t * BQ, qg = real_q(a, w.t);
				const uint32_t bar = barq + 8 * st;
				if (it >= NST)
					bar_wait(bare + 8 * st, ((it - NST) / NST) & 1);
				bar_expect(bar, 2 * M::QB + 2 * BQ * 4);
				stage_load<CB>(&tq, &tdo, a, s0 + M::Q + st * M::QB, s0 + M::O + st * M::QB,
				    s0 + M::L + st * BQ * 4, s0 + M::D + st * BQ * 4, h, qg, q0, b, bar);
				more = --left > 0 && hb_next<QM>(w, a, hk, kt);
			}
		} else if (wi == 1 && !SOLO) {
			/* dQ: the staged boxes of 32 columns added to the workspace
			 * by TMA, consumer by consumer (HD 128: its 64 columns; HD
			 * 64: one consumer's, all 64); the boxes are free once the
			 * reduction has read them.
			 * Deterministic: after the k-tiles before this one, and
			 * published once the adds are complete. */
#if HB_EVL
			uint64_t pol;
			asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
			for (int x = 0; x < NCQ; x++)
				nbar_arrive(DQE + x, NDQ);
			int nit = 0;                        /* fuse: items done */
			for (; more; more = --left > 0 && hb_next<QM>(w, a, hk, kt)) {
				/* the rows of a q-tile past a gap add zeros (their scores
				 * are all masked) */
				const int h = hk * a.group + w.gi, q0 = real_q(a, w.t);
				int *sem = nullptr;
				if (DET && lane == 0) {
					sem = a.sem + ((int64_t)b * a.hq + h) * a.nqt + w.t;
					sem_wait(sem, dq_rank(a, h / a.mgroup, w.t, kt));
				}
				__syncwarp();
#pragma unroll
				for (int x = 0; x < NCQ; x++) {
					nbar_sync(DQF + x, NDQ);
					if (lane == 0) {
#pragma unroll
						for (int y = BPX * x; y < BPX * (x + 1) && !HB_NR; y++)
#if HB_EVL
							asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group.L2::cache_hint"
							    " [%0, {%2, %3, %4, %5}], [%1], %6;"
							    :: "l"(&tdq), "r"(s0 + M::DQ + y * BQ * 128), "r"(32 * y), "r"(h), "r"(q0), "r"(b), "l"(pol)
							    : "memory");
#else
							asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
							    " [%0, {%2, %3, %4, %5}], [%1];"
							    :: "l"(&tdq), "r"(s0 + M::DQ + y * BQ * 128), "r"(32 * y), "r"(h), "r"(q0), "r"(b)
							    : "memory");
#endif
						asm volatile("cp.async.bulk.commit_group;" ::: "memory");
					}
					__syncwarp();
				}
				if (lane == 0) {
					if (DET) {
						asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
						sem_post(sem);
					} else {
						asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
					}
				}
				__syncwarp();
				for (int x = 0; x < NCQ; x++)
					nbar_arrive(DQE + x, NDQ);
				if (FUSE && ++nit % FB == 0 && lane == 0 && !(a.fuse & 8))
					fin_release(s0 + M::CV, nit);
			}
			if (lane == 0)
				asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
			if (FUSE && lane == 0 && nit % FB != 0)
				fin_release(s0 + M::CV, nit);
		} else if (wi == 2 && FUSE) {
			fin_run<QM>(a, item, hk, kt, b, s0 + M::CV);
		}
		return;
	}
	asm volatile("setmaxnreg.inc.sync.aligned.u32 " HB_CREG ";");

	float dk[HD / 2], dv[HD / 2];
#pragma unroll
	for (int i = 0; i < HD / 2; i++)
		dk[i] = dv[i] = 0;

	const uint32_t kvalid = keys_valid<BK>(a, k0, kr, g);
	const float *sL = (const float *)(sm + M::L), *sD = (const float *)(sm + M::D);

	float s[32], dp[32];
	/* the descriptors' low words of this warpgroup's keys: K and V K-major
	 * (S^T, dP^T), K N-major (dQ).  wgu, not wg: taking wg itself through
	 * the shuffle spilled 24 bytes (the kernel's other uses of it). */
	const int wgu = warp_uniform(wg);
	const uint32_t k_d = dlo(s0 + M::K + wgu * 64 * 128, 16), v_d = dlo(s0 + M::V + wgu * 64 * 128, 16);
	const uint32_t kq_d = dlo(s0 + M::K + (ONE ? 0 : wgu * KBOX), 0);
	/* S^T = K Q^T and dP^T = V dO^T of the tile in stage st: two groups. */
	auto issue_sdp = [&](int st) {
		const uint32_t q_d = dlo(s0 + M::Q + st * M::QB, 16), o_d = dlo(s0 + M::O + st * M::QB, 16);
		/* ai: the accumulators start at -L and -D, the products then
		 * deliver S^T - L and dP^T - D (ncu, round 17: the exp2's FFMAs
		 * waited on L's shared loads, issued just before the wait, and
		 * those on an S2R of the lane's offset).  Here the loads run under
		 * the last tile's dK product. */
		if constexpr (AI) {
			acc_ld(s, dp, sL + st * BQ, sD + st * BQ, t4);
		} else {
#pragma unroll
			for (int i = 0; i < 32; i++)
				s[i] = dp[i] = 0;
		}
		reg_fence(s);
		reg_fence(dp);
		sdp_issue<KS, KBOX, QBOX, AI>(tag, s, dp, k_d, q_d, v_d, o_d);
	};

	bar_wait(barkv, 0);
	uint32_t pa[4][4], da[4][4];
	for (int it = 0; more; it++) {
		const int st = it % NST, ds = it & 1;
		const bwalk cur = w;
		const int q0 = cur.t * BQ;
		const plan_ent E = a.ent[cur.e];
		const int live = HALF ? warp_uniform(a.einf[cur.e] & 3) : 3;
		/* the walk's next step (more) once the products are issued:
		 * before them, its compare waited on E's load from L2 (ncu: 5 %
		 * of the consumers' stall samples).  HALF's branch waits on
		 * einf's load anyway, and there the later step spilled more. */
		if (HALF)
			more = --left > 0 && hb_next<QM>(w, a, hk, kt);
		const uint32_t sQ = s0 + M::Q + st * M::QB, sO = s0 + M::O + st * M::QB;
		const uint32_t sS = s0 + M::S + ds * M::SB;
		/* waited for even where this warpgroup's keys see nothing of the
		 * tile: it keeps the ring's phases in step */
		bar_wait(barq + 8 * st, (it / NST) & 1);
		if (HALF && !(live >> wgu & 1)) {
			/* This warpgroup's 64 keys see nothing of the tile (a causal
			 * diagonal, a block-sparse or window edge): no S^T, dP^T,
			 * dV or dK; it still sums dQ over the other half (HD 128). */
			wg_wait<0>();
			reg_fence(dk);
			reg_fence(da);
			__syncwarp();
			if (it > 0 && lane == 0)
				bar_arrive(bare + 8 * (st == 0 ? NST - 1 : st - 1));
			nbar_sync(1, NT);
		} else {
			issue_sdp(st);
			if (!HALF)
				more = --left > 0 && hb_next<QM>(w, a, hk, kt, E);

			/* Partial tiles: the allowed scores, while the products run. */
			uint32_t ok = kvalid;
			if (E.ncut > 0 && a.qiv != NULL)
				ok &= iv_bits(a.qiv, k0 + kr + g, q0 + 2 * t4);
			else if (E.ncut > MANY)
				ok &= bm_bits(a.bm + (int64_t)(a.einf[cur.e] >> 2) * BK, kr + g, t4);
			else if (E.ncut > 0)
				ok &= cut_bits<lay>(a.cut + E.cut0, E.ncut, q0 + 2 * t4, k0 + kr + g, q0, q0 + BQ, k0 + kr, k0 + kr + 16);
			const float *cL = sL + st * BQ, *cD = sD + st * BQ;

			/* P^T = exp2(S^T sl - L), or (ai) exp2((S^T - L) sl), while
			 * dP^T is still running; dV += P^T dO goes out before dS^T is
			 * known.  Without ai L is read before the wait: read after it,
			 * under the products' shared-memory traffic, its latency
			 * stalled the first exponentials (ncu). */
			float2 lv[8];
			if constexpr (!AI) {
#pragma unroll
				for (int j = 0; j < 8; j++)
					lv[j] = *(const float2 *)(cL + 8 * j + 2 * t4);
			}
			wg_wait<1>();
			reg_fence(s);
			/* The last tile's dK product (left running under this
			 * tile's S^T and dP^T) is done: its stage is free. */
			reg_fence(dk);
			reg_fence(da);
			__syncwarp();
			if (it > 0 && lane == 0)
				bar_arrive(bare + 8 * (st == 0 ? NST - 1 : st - 1));
			p_pack<T, AI>(s, pa, ok, a, lv);
			rs_issue<HD>(tag, dv, pa, sO);

			/* dS^T = P^T (dP^T - D): registers for dK, shared memory for
			 * dQ (D, too, read before the wait). */
			float2 dd[8];
			if constexpr (!AI) {
#pragma unroll
				for (int j = 0; j < 8; j++)
					dd[j] = *(const float2 *)(cD + 8 * j + 2 * t4);
			}
			wg_wait<1>();
			reg_fence(dp);
			ds_pack<T, AI>(s, dp, da, dd, sS, kr, g, t4);
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			/* dS^T of both warpgroups in shared memory */
			nbar_sync(1, NT);
		}

		/* dQ = dS K: A = dS^T read M-major, B = K N-major, over the keys
		 * of the halves that see the tile.  HD 128: consumer wg takes
		 * columns 64wg..; HD 64: one consumer a tile, in turns, all 64
		 * columns over all 128 keys, so that L2 adds each dQ tile once,
		 * not once a consumer (NCQ). */
		const bool mine = !ONE || (it & 1) == wg;
		const int kk0 = HALF && live == 2 ? 4 : 0;
		float dq[ONE ? HD / 2 : 32];
		/* zeroed by the first k-step (scale-d 0), not by moves: the
		 * zeros only keep the compiler's accounts (HD 128: on both
		 * consumers; defined on one path only, an m64n128 dq's
		 * registers stayed live around the loop: 580 bytes of spill,
		 * NOTES round 17).  HD 64 makes them where mine only: zeros on
		 * the other path, merged with the product, made ptxas
		 * serialise every wgmma (C7515; none since, no spill).  The
		 * live halves: both, or one, each a
		 * group of its own from fence to commit (a branch inside one
		 * group made ptxas fence it again twice: C7519) */
		auto dq_step = [&](int kk, int acc) {
			ss64<1, 1>(tag, dq, dsc(dlo(sS, 0), kk * 2048), dsc(kq_d, kk * 2048), acc);
		};
		auto issue_dq = [&]() {
			if (!HALF || live == 3) {
				wg_fence();
#pragma unroll
				for (int kk = 0; kk < 8; kk++)
					dq_step(kk, kk > 0);
				wg_commit();
			} else {
				wg_fence();
#pragma unroll
				for (int kk = 0; kk < 4; kk++)
					dq_step(kk0 + kk, kk > 0);
				wg_commit();
			}
		};
		/* dK += dS^T Q (A: dS^T from registers, B: Q read N-major) */
		auto issue_dk = [&]() {
			rs_issue<HD>(tag, dk, da, sQ);
		};
		/* dK after dQ, so that it runs while dQ is staged and on under
		 * the next tile's S^T and dP^T */
		if (mine) {
#pragma unroll
			for (int i = 0; i < (ONE ? HD / 2 : 32); i++)
				dq[i] = 0;
			reg_fence(dq);
			issue_dq();
		}
		if (!HALF || live >> wgu & 1) {
			issue_dk();
			wg_wait<1>();
		} else {
			wg_wait<0>();
		}
		/* dV, which read P^T from pa, is retired by now */
		reg_fence(pa);
		/* dQ to the staging boxes once the reducing warp has read them;
		 * it adds them to the fp32 workspace (rows past sq are clipped by
		 * TMA) */
		if (SOLO) {
			/* after dK's product too: arithmetic on dQ while it ran
			 * made ptxas serialise every wgmma of the kernel (C7515;
			 * the wait: full documents under a tile +12 %, H200,
			 * round 30) */
			wg_wait<0>();
			reg_fence(dk);
			if (mine) {
				reg_fence(dq);
				dq_solo<T, HD>(a, cur, hk, b, dq, ONE ? 0 : wg * 64, wi, g, t4);
			}
		} else if (mine) {
			const int x = ONE ? 0 : wg;
			const uint32_t sq0 = s0 + M::DQ + x * 2 * BQ * 128;
			const int odd = g & 1;
			reg_fence(dq);
			nbar_sync(DQE + x, NDQ);
			dq_stage(sq0, dq, wi, g, t4, odd);
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			nbar_arrive(DQF + x, NDQ);
		}
		reg_fence(dv);
	}
	wg_wait<0>();
	reg_fence(dk);
	reg_fence(da);
	kv_store<T, HD, BK>(a, item, b, hk, kt, dk, dv, kr, g, t4);
}

#include "hopper_bwd64.cuh"

/* ---- host ------------------------------------------------------------------ */

struct state {
	struct attn_shape s;
	int mheads, sqp, nkt;
	int32_t *row, *slotkt;
	plan_ent *ent;
	plan_cut *cut;
	int32_t *einf;
	uint2 *bm;
	int2 *qiv;                 /* upload_intervals(), or NULL */
	int4 *item;
	int nitems, nslots;
	float *dqa, *L, *D, *ws;
	int rev, qm;               /* args' */
	int det, nqt;              /* deterministic: frow, frank, sem */
	int32_t *frow;
	int2 *frank;
	int *sem;
	int2 *qtile, *ktile;       /* a padded plan's tiles (args), or NULL */
	int half;                  /* bwd<..., HALF> (entinfo) */
	int bk;                    /* the plan's k-tiles: BK (bwd) or BK64 (bwd64) */
	int prepzero;              /* dQ's workspace zeroed by prep, not by a memset */
	int fuse;                  /* args' fuse (fuse_targets): tgt [mheads][nqt]; sem counts down */
	int32_t *tgt;
	int *q, qtotal, fconv;     /* args' (fuse_targets), with its two counters after q */
	int dqz;                   /* fuse 2: the workspace is zero (the first run zeroes it) */
	int solo;                  /* hb_solo: tgt as fuse's; no workspace, no dq_out */
	int skv;                   /* its sk, or 0 */
	/* hb_split: the pass in split parts of the kv-heads, each part's prep
	 * and dQ conversion on osb SMs of the high-priority stream sh beside
	 * another part's main kernel (parts in turn on the caller's stream
	 * and sb); ev: the fork, each part's prep and main, the two joins */
	int split, osb, nsm;       /* nsm: the last conversion's blocks, one an SM */
	int sprep;                 /* every part's prep at once, first */
	cudaStream_t sh, sb;
	cudaEvent_t ev[2 * SPLITMAX + 3];
};

static const char *check(const struct attn_shape *s, const struct mask *m)
{
	if (s->hd != 64 && s->hd != 128)
		return "head_dim must be 64 or 128";
	if (s->dtype != DT_BF16 && s->dtype != DT_FP16)
		return "dtype must be bf16 or fp16";
	if (s->hkv < 1 || s->hq % s->hkv != 0 || m->heads < 1 || s->hq % m->heads != 0)
		return "heads_q must be a multiple of heads_kv and of the mask heads";
	if (s->sq >= INT32_MAX - 256 || s->sk >= INT32_MAX - 256)
		return "sequence longer than 2^31";
	if (s->batch > 65535 || s->hkv > 65535)
		return "grid too large";
	return NULL;
}

static void fini(void *st)
{
	struct state *f = (struct state *)st;
	if (f == NULL)
		return;
	dev_free(f->row);
	dev_free(f->slotkt);
	dev_free(f->ent);
	dev_free(f->cut);
	dev_free(f->einf);
	dev_free(f->qiv);
	dev_free(f->bm);
	dev_free(f->item);
	dev_free(f->dqa);
	dev_free(f->L);
	dev_free(f->D);
	dev_free(f->ws);
	dev_free(f->frow);
	dev_free(f->frank);
	dev_free(f->sem);
	dev_free(f->qtile);
	dev_free(f->ktile);
	dev_free(f->tgt);
	dev_free(f->q);
	for (int i = 0; i < 2 * SPLITMAX + 3; i++)
		if (f->ev[i] != NULL)
			cudaEventDestroy(f->ev[i]);
	if (f->sh != NULL)
		cudaStreamDestroy(f->sh);
	if (f->sb != NULL)
		cudaStreamDestroy(f->sb);
	free(f);
}

/* LONGATTN_HOPPER_BWD, for A/B runs: a comma-separated list of asc and
 * desc (head_items' walks from the first q-tile up, or from the last
 * down, whatever the rows' lengths), ph1 (head_items at
 * any length, so that short checks take it), phall (head_items on any
 * one-head mask whatever its rows' length), noph (head_items never), seg,
 * seg128, seg256, noseg, whole (hb_seg), hwhole, hseg512 and hseg4
 * (head_items' ascending walks whole, or in stretches of 512 or, for
 * checks, 4 q-tiles), half and nohalf (entinfo), nopad
 * and pad (init), memset (run_t: dQ's workspace zeroed by a memset, not by
 * prep), qm and noqm (hb_qm), fuse and fusez
 * (fuse_targets), nosolo (hb_solo), split2, split4, split8, nosplit, os8, os16, os24,
 * os48, os64 and sprep (hb_split), why (a line on stderr: the tiles and walks init chose). */
static int hb_env(const char *w)
{
	return env_has("LONGATTN_HOPPER_BWD", w);
}

/* Per entry of the transposed plan (a row is a k-tile, its entries
 * q-tiles): which 64-key halves of the k-tile see some of it (bits 0, 1)
 * and, above them, the index of its bitmask where it has more than MANY
 * cuts: bit q of key row k is whether some cut allows (q0 + q, k0 + k)
 * with q0 + q < sq, k0 + k < sk.  The kernel skips a half that sees
 * nothing (bwd<..., HALF>) where at least a quarter of the tiles have
 * one: the branches cost full and causal 5 % (round 22, with live
 * warp-uniform: before, ptxas serialised the products and it was 18 %),
 * are level near the quarter (causal_document, hash_sparse 0.13-0.16)
 * and gain 7-11 % at 64-token blocks, ratio 0.1.
 * LONGATTN_HOPPER_BWD=half and nohalf force it on and off, for A/B runs
 * and checks. */
static int entinfo(struct state *f, const struct plan *p, int bk)
{
	int32_t *inf = (int32_t *)malloc((p->nent ? p->nent : 1) * sizeof *inf);
	uint64_t *bm = NULL;
	int64_t tiles = 0, halves = 0;
	int nbm = 0, rc;

	if (inf == NULL)
		return KERN_ERR;
	for (int e = 0; e < p->nent; e++)
		inf[e] = p->ent[e].ncut > MANY ? nbm++ << 2 : 0;
	if (nbm > 0 && (bm = (uint64_t *)calloc((size_t)nbm * bk, sizeof *bm)) == NULL) {
		free(inf);
		return KERN_ERR;
	}
	for (int r = 0; r < p->nrows; r++) {
		const int64_t k0 = (int64_t)(r % p->nkt) * bk, k1 = k0 + bk < p->sk ? k0 + bk : p->sk;
		for (int e = p->row[r]; e < p->row[r + 1]; e++) {
			const struct plan_ent *E = &p->ent[e];
			const int64_t q0 = (int64_t)E->t0 * BQ, q1 = (int64_t)E->t1 * BQ < p->sq ? (int64_t)E->t1 * BQ : p->sq;
			inf[e] |= plan_halves(p, E, q0, q1, k0, k1);
			tiles += E->t1 - E->t0;
			halves += (inf[e] & 3) != 3 ? E->t1 - E->t0 : 0;
			if (E->ncut <= MANY)
				continue;
			uint64_t *b = bm + (size_t)(inf[e] >> 2) * bk;
			for (int c = E->cut0; c < E->cut0 + E->ncut; c++) {
				const struct plan_cut *C = &p->cut[c];
				for (int64_t k = C->k0 > k0 ? C->k0 : k0; k < C->k1 && k < k1; k++) {
					int64_t lo, hi;
					plan_cut_line(C, 1, k, q0, q1, &lo, &hi);
					if (lo < hi)
						b[k - k0] |= (hi - lo == 64 ? ~0ull : ((1ull << (hi - lo)) - 1)) << (lo - q0);
				}
			}
		}
	}
	f->half = !hb_env("nohalf") && (hb_env("half") || 4 * halves >= tiles);
	rc = upload((void **)&f->einf, inf, (size_t)p->nent * sizeof *inf);
	if (rc == KERN_OK)
		rc = upload((void **)&f->bm, bm, (size_t)nbm * bk * sizeof *bm);
	free(inf);
	free(bm);
	return rc;
}

static int head_by_len(const void *x, const void *y)
{
	const int4 *i = (const int4 *)x, *j = (const int4 *)y;
	if (i->z != j->z)
		return i->z > j->z ? -1 : 1;
	return i->x > j->x ? 1 : i->x < j->x ? -1 : 0;
}

/* tile.cuh's walk_items cut into stretches of this many tiles, listed
 * stretch by stretch, or 0: heaviest first, a walk cut only past its cap
 * (-1, whole: never).  Stretches where
 * the walks drift apart: masks with several heads (the CTAs in flight
 * each read their own q-tiles) and scattered rows (more
 * than SCATTER runs a k-tile's row).  bwd: 128 tiles for walks of
 * under 1024, else 256 (H100, round 5, 32K-64K: block_sparse_uniform
 * 64-blocks +14 to +43 %, block_sparse_variable +44 %; on one-head masks
 * stretches, or only their order, lost up to 20 % (hash_sparse) or did
 * nothing); bwd64: by the rows' density, below.  LONGATTN_HOPPER_BWD=seg,
 * seg128, seg256, noseg or whole forces 64, 128, 256, 0 or -1 for A/B
 * runs. */
enum { SCATTER = 16, SPAN = 640 };

enum { FASTBW = 4000 };   /* GB/s: an H200's 4.8 TB/s, not an H100's 3.35 */

/* The device's DRAM bandwidth in GB/s from its memory clock and bus (DDR:
 * two transfers a clock), or 0 where it does not say. */
static int dram_gbs(void)
{
	int dev, clk, bus;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess)
		return 0;
	return (int)((int64_t)clk * bus / 4000000);
}

/* hb_qm's stretches (its walks are a k-tile's row of 64-row q-tiles times
 * the group): QMSEG tiles, or half that where walks past two stretches
 * hold a third of the tiles or more, the longest walk is at most 1.6 times
 * a tile's walk (2/3 of the longest where documents are all alike), that
 * walk is at most 1024, there are more k-tiles than twice the SMs, and
 * DRAM is slower than FASTBW: hash buckets past 33K on an H100.  64
 * against 128, rounds 27 and 28, H100: hash_sparse 40K / 48K / 56K / 64K /
 * 96K +5 / +7 / +8 / +12 / +22 %, 11 buckets 36K / 44K / 56K +0.5 / +1 /
 * +4.5 %.  Where it does not apply, H100: hash_sparse 16K / 32K -3 / -5 %,
 * 11 buckets 32K -1 % (fewer k-tiles); causal documents 32K / 44K / 48K -2
 * / -2.5 / -4 %, pile documents 32K / 36K / 42K -3 / -4 / -1.5 %,
 * prefix-LM documents 48K -2 % (documents that differ).  H200, two calls:
 * 16 buckets 40K / 64K / 96K +1 and -2.5 / +2.5 and -3.5 / +2.4 and +2 %,
 * 11 buckets 36K 0 and -2.5 %: nothing to have. */
enum { QMSEG = 128 };

static int qm_seg(const struct plan *p, int group)
{
	int64_t long2 = 0, tiles = 0, walks = 0, most = 0;
	double sq = 0;

	for (int r = 0; r < p->nrows; r++) {
		int64_t w = 0;
		for (int e = p->row[r]; e < p->row[r + 1]; e++)
			w += p->ent[e].t1 - p->ent[e].t0;
		w *= group;
		walks += w > 0;
		long2 += w > 2 * QMSEG ? w : 0;
		most = w > most ? w : most;
		tiles += w;
		sq += (double)w * w;
	}
	const double mean = tiles ? sq / tiles : 0;
	if (hb_env("why"))
		warnx("hopper: bwd: q-major walks on %lld k-tiles: %.3f of their tiles in walks past %d, "
		    "a tile's walk %.0f, the longest %lld", (long long)walks, tiles ? (double)long2 / tiles : 0.0,
		    2 * QMSEG, mean, (long long)most);
	return 3 * long2 >= tiles && most <= 1.6 * mean && mean <= 8 * QMSEG &&
	    walks > 2 * sm_count() && dram_gbs() < FASTBW ? QMSEG / 2 : QMSEG;
}

static int hb_seg(const struct state *f, const struct plan *p)
{
	static const struct { const char *w; int n; } force[] = {
		{ "seg", 64 }, { "seg128", 128 }, { "seg256", 256 }, { "noseg", 0 }, { "whole", -1 } };
	const int group = f->s.hq / f->s.hkv;
	int64_t rows = 0, runs = 0, tiles = 0;

	for (size_t i = 0; i < sizeof force / sizeof force[0]; i++)
		if (hb_env(force[i].w))
			return force[i].n;
	if (f->qm)
		return qm_seg(p, group);
	if (f->mheads < 2)
		return 0;
	for (int r = 0; r < p->nrows; r++) {
		rows += p->row[r] < p->row[r + 1];
		runs += p->row[r + 1] - p->row[r];
		for (int e = p->row[r]; e < p->row[r + 1]; e++)
			tiles += p->ent[e].t1 - p->ent[e].t0;
	}
	if (rows == 0 || runs <= SCATTER * rows)
		return 0;
	if (f->bk == BK64) {
		/* bwd64: a stretch of n tiles spans n / d q-tiles of one q-head
		 * (d the rows' density), whose Q, dO and dQ lines (64 KB a
		 * q-tile) the CTAs in flight share in L2: the longest stretch
		 * of 64-256 that spans at most SPAN q-tiles (40 MB of the 50).
		 * H100, 64-token block masks, against the walk-length rule:
		 * ratio 0.3 +14 / +9 / +1 % at 32K / 64K / 128K (128, not
		 * 256), ratio 0.5 level (256), ratio 0.1 +10 % at 32K (64,
		 * not 128; bwd64 does not run there). */
		const int64_t n = SPAN * tiles / (rows * p->nqt);
		int seg = 64;
		while (seg < 256 && 2 * seg <= n)
			seg *= 2;
		return seg;
	}
	return tiles * group < 1024 * rows ? 128 : 256;
}

/* Other one-head masks (documents, windows, one-head block masks): where
 * the rows a tile is in average PHW q-tiles or more (sum of len^2 over
 * sum of len), and rows of PHW or more hold half of the tiles.  H100,
 * round 10, against walk_items: --long documents at 32K (188 causal, 281
 * full) +3 %, one-head block_sparse_uniform (384) +4 %; pile documents
 * (35, 53) -8 and -14 %, 1K documents (11, 16) -25 %, the window (18)
 * -12 %; full and causal 8K's one run (128, 86) -2 and -3 % (that rule is
 * the one above).  share_question at 32K (233, but 43 % of its tiles in
 * long rows: the first document's keys, which every later one sees) ran
 * at 266 TFLOP/s here and at 327 on walk_items (H100, 2026-11-26, fifth
 * session): its short rows paid a K/V load, a prologue and a slot add a
 * q-head. */
enum { PHW = 160 };

/* head_items' ascending walks in stretches of at most HSEG q-tiles, each a
 * CTA of its own (its dK/dV added to the k-tile's slot like the other
 * q-heads'), listed stretch by stretch: the CTAs in flight then read and
 * reduce into one stretch's Q/dO and dQ tiles (HSEG x 64 KB at hd 128, 16
 * MB) whatever the drift between them, where a q-head's whole row (128
 * MB at 128K) left L2 once the CTAs' starts had spread apart (H200,
 * round 18: full 128K 492 against 562 at 32K; stretches: 567).  256
 * rather than 512: H100 full 64K +2 %, H200 within 0.5 % of it. */
enum { HSEG = 256 };

/* head_items' CTAs at most: they go on the grid's x (2^31 - 1).  65535,
 * walk_items' limit for flash's grid y, had doubled full 128K's stretches
 * to 512 (1024 k-tiles x 8 q-heads x 8 stretches is 65536) and left
 * 256K and longer rows whole. */
enum { HMAX = 1 << 24 };

/* hb_start's q-major walks, listed in k-tile order (stretches: qm_seg):
 * one-head masks where at least a quarter of the rows end where the row
 * before ends, short of the last q-tile, and start elsewhere (in the
 * plan as init pads it, at 32K: causal documents 0.80, buckets 0.88,
 * prefix-LM documents 0.36-0.57, whose prefix keys' rows share start and
 * end (+3 % at 32K on the H100, 2026-11-26, fifth session); full
 * documents 0, the other patterns under 0.1).  Not causal, full or
 * causal_blockwise, whose rows all run to the end (their order is tuned,
 * round 9; causal_blockwise lost 3 %), nor
 * full documents, whose k-tiles walk the same rows and so already go in
 * step (1K documents -1 % on the H100, -4 % on the H200).  The k-tiles of
 * a causal document then run side by side, in step down its q-tiles, and
 * its dQ lines take their adds while in L2.  Bwd against walks q-head by
 * q-head, 2026-11-26: causal documents of 1K tokens at 32K +41 % (H100) and
 * +4 % (H200), pile documents +22 % and +2 %, hash_sparse 16K +40 % and
 * +13 % (32K, H100: +18 %), the other patterns level.  Q-head by q-head,
 * k-tile j's shorter row runs ahead of j-1's onto the next q-head, and a
 * document's dQ lines leave L2 between its k-tiles' adds (round 9: 2.06
 * TB/s of DRAM on 1K documents).  A window's rows end 2 q-tiles apart, and
 * there it lost 47 % (a Q/dO tile's next reader comes 8x later).
 * LONGATTN_HOPPER_BWD=qm and noqm force it on and off. */
static int hb_qm(const struct state *f, const struct plan *p)
{
	int rows = 0, shared = 0, end = -1, start = -1;

	if (hb_env("noqm") || f->mheads != 1)
		return 0;
	if (hb_env("qm"))
		return 1;
	if (f->s.hq == f->s.hkv)
		return 0;
	for (int kt = 0; kt < p->nrows; kt++) {
		const int e0 = p->row[kt], e1 = p->row[kt + 1];
		if (e0 == e1)
			continue;
		shared += p->ent[e1 - 1].t1 == end && end < p->nqt && p->ent[e0].t0 != start;
		end = p->ent[e1 - 1].t1;
		start = p->ent[e0].t0;
		rows++;
	}
	return rows > 0 && 4 * shared >= rows;
}

/* Long rows of a one-head mask whose every row is one run of q-tiles to
 * the last (causal, full, prefix-LM), or (PHW) of any other: a CTA per
 * (k-tile, q-head), every k-tile adding its dK/dV to an fp32 slot, listed
 * q-head by q-head and in each the longest row first.  A walk over the
 * whole group meets the q-heads one after the other, and causal rows
 * differ in length, so CTAs of different k-tiles change q-head at
 * different times and those in flight spread over several q-heads' Q/dO
 * and dQ tiles, which then leave L2; one q-head a CTA keeps them on one
 * (H100, round 4: causal 8K-128K +2.6-6%, full 16K-128K +0-1.3%; on equal
 * rows of 128 q-tiles, full 8K, -1.5%, of 32, 2K, -3..-5%: a K/V load, a
 * prologue and a slot add a short walk); f->rev, the way its walks go;
 * upward walks longer than HSEG q-tiles a CTA a stretch.
 * 1 if it made the list, 0 when the plan does not qualify, -1 out of
 * memory. */
static int head_items(struct state *f, const struct plan *p, int4 **itemp, int *nitems,
    int32_t **slotktp, int *nslots)
{
	const int n = p->nkt, group = f->s.hq / f->s.hkv;
	int4 *item;
	int32_t *slotkt;
	int ni = 0, lmax = 0, lmin = INT_MAX, m = 0;
	int one = 1;                /* every row one run to the last q-tile */
	double s1 = 0, s2 = 0;      /* sums of row lengths and their squares */
	double sl = 0;              /* of the lengths of rows of PHW or more */

	if (f->mheads != 1 || group < 2 || p->nrows != n || hb_env("noph"))
		return 0;
	for (int kt = 0; kt < n; kt++) {
		const int e0 = p->row[kt], e1 = p->row[kt + 1];
		if (e0 == e1)
			continue;
		for (int e = e0 + 1; e < e1; e++)
			one &= p->ent[e].t0 == p->ent[e - 1].t1;
		one &= p->ent[e1 - 1].t1 == p->nqt;
		const int len = (int)plan_row_tiles(p, kt);
		lmax = len > lmax ? len : lmax;
		lmin = len < lmin ? len : lmin;
		s1 += len;
		s2 += (double)len * len;
		sl += len >= PHW ? len : 0;
		ni++;
	}
	if ((int64_t)ni * group > HMAX)
		return 0;
	if (one ? lmax < (lmin < lmax ? PH / 2 : PH) && !hb_env("ph1") :
	    (s2 < PHW * s1 || 2 * sl < s1) && !hb_env("phall"))
		return 0;
	/* rows of different lengths (causal) from the last q-tile down: a
	 * first wave of one q-head's CTAs reads one Q/dO tile and reduces
	 * into one dQ tile at a time (causal 8K +1-5 % on both devices,
	 * longer causal +0.2-0.9 %: NOTES rounds 5 and 9); rows all alike
	 * (full) from the first up (H100, full 128K +5.5 %, the L2 keeping
	 * more of the dQ workspace: round 17) */
	f->rev = hb_env("desc") || (lmin < lmax && !hb_env("asc"));
	/* a descending walk starts at its row's end: whole rows only */
	int hs = f->rev || hb_env("hwhole") ? lmax : hb_env("hseg512") ? 512 :
	    hb_env("hseg4") ? 4 : HSEG;
	while ((int64_t)ni * group * ((lmax + hs - 1) / hs) > HMAX)
		hs *= 2;
	if (hb_env("why"))
		warnx("hopper: bwd: %s walks, stretches of %d q-tiles", f->rev ? "descending" : "ascending", hs);
	const int nseg = (lmax + hs - 1) / hs;
	int4 *rows = (int4 *)malloc((size_t)ni * sizeof *rows);
	item = (int4 *)malloc((size_t)ni * group * nseg * sizeof *item);
	slotkt = (int32_t *)malloc((size_t)n * sizeof *slotkt);
	if (rows == NULL || item == NULL || slotkt == NULL) {
		free(rows);
		free(item);
		free(slotkt);
		return -1;
	}
	for (int kt = 0; kt < n; kt++) {
		const int len = (int)plan_row_tiles(p, kt);
		slotkt[kt] = kt;
		if (len > 0)
			rows[m++] = make_int4(kt, 0, len, kt);
	}
	qsort(rows, m, sizeof *rows, head_by_len);
	ni = 0;
	for (int gi = 0; gi < group; gi++)
		for (int sg = 0; sg < nseg; sg++)
			for (int i = 0; i < m; i++) {
				const int len = rows[i].z, t0 = sg * hs;
				if (t0 < len)
					item[ni++] = make_int4(rows[i].x, gi * len + t0, len - t0 < hs ? len - t0 : hs, rows[i].x);
			}
	free(rows);
	*itemp = item;
	*nitems = ni;
	*slotktp = slotkt;
	*nslots = n;
	return 1;
}

/* The CTAs (head_items, or tile.cuh's walk_items), on the device. */
static int items(struct state *f, const struct plan *p)
{
	int4 *item;
	int32_t *slotkt;
	int rc = head_items(f, p, &item, &f->nitems, &slotkt, &f->nslots);

	if (rc < 0)
		return KERN_ERR;
	if (rc == 0) {
		f->qm = hb_qm(f, p);
		const int seg = hb_seg(f, p);
		rc = walk_items(p, &f->s, f->mheads, seg, &item, &f->nitems, &slotkt, &f->nslots);
		if (rc == KERN_OK && hb_env("why"))
			warnx("hopper: bwd: %d-key tiles, %s walks %s%.0d: %d CTAs a kv-head", f->bk,
			    f->qm ? "q-major" : "head-major", seg > 0 ? "in stretches of " : seg < 0 || f->nslots == 0 ?
			    "whole, heaviest first" : "heaviest first, cut at a cap", seg > 0 ? seg : 0, f->nitems);
	} else {
		if (hb_env("why"))
			warnx("hopper: bwd: %d-key tiles, a CTA a k-tile and q-head: %d CTAs a kv-head", f->bk,
			    f->nitems);
		rc = KERN_OK;
	}
	if (rc != KERN_OK)
		return rc;
	if ((rc = upload((void **)&f->item, item, (size_t)f->nitems * sizeof *item)) == KERN_OK)
		rc = upload((void **)&f->slotkt, slotkt, (size_t)f->nslots * sizeof *slotkt);
	free(item);
	free(slotkt);
	return rc;
}

/* Per row of the (untransposed, padded) plan p, the k-tiles that add to
 * its q-tile: every (k-tile, q-tile, q-head) is one CTA's once, whatever
 * the walks' cuts; *live the rows with some, *most the largest count.
 * NULL: out of host memory. */
static int32_t *row_targets(const struct plan *p, int *live, int *most)
{
	int32_t *tgt = (int32_t *)calloc(p->nrows ? p->nrows : 1, sizeof *tgt);

	*live = *most = 0;
	for (int r = 0; tgt != NULL && r < p->nrows; r++) {
		for (int e = p->row[r]; e < p->row[r + 1]; e++)
			tgt[r] += p->ent[e].t1 - p->ent[e].t0;
		*live += tgt[r] > 0;
		*most = tgt[r] > *most ? tgt[r] : *most;
	}
	return tgt;
}

/* LONGATTN_HOPPER_BWD=fuse (fusez: the workspace left zero by the
 * conversion, not zeroed by prep): the CTA whose count completes a dQ
 * tile queues it (fin_run), converting CTAs write it into dq (fin_conv),
 * and there is no dq_out pass, which read the whole fp32 workspace back
 * from DRAM (1.6 GB and 0.56 ms of a 5.4 ms pass on pile
 * causal documents at 32K, whose main kernel took 4.0 ms: H100, ncu,
 * 2026-11-26, sixth session).  tgt: row_targets. */
static int fuse_targets(struct state *f, const struct plan *p, int mode)
{
	int most, rc;
	int32_t *tgt = row_targets(p, &f->qtotal, &most);

	if (tgt == NULL)
		return KERN_ERR;
	f->qtotal *= f->s.batch * (f->s.hq / f->mheads);
	if (dev_alloc((void **)&f->q, ((size_t)f->qtotal + 2) * sizeof(int)) != 0) {
		free(tgt);
		return KERN_OOM;
	}
	f->fuse = mode;
	/* converting CTAs: 16 (H100, 1K causal documents: 4 ran at 0.42x
	 * dq_out's pass, 8 at 0.72x, 16 at 1.03x, 32 at 0.97x);
	 * LONGATTN_HOPPER_BWD=conv4, conv8, conv32 for A/B runs */
	f->fconv = hb_env("conv4") ? 4 : hb_env("conv8") ? 8 : hb_env("conv32") ? 32 : 16;
	f->nqt = p->nqt;
	rc = upload((void **)&f->tgt, tgt, (size_t)p->nrows * sizeof *tgt);
	free(tgt);
	return rc;
}

/* Solo: where no q-tile has dQ from more than one k-tile (documents
 * under a tile on a padded plan: each its own k-tile and one or two
 * q-tiles), the consumers write dQ into dq themselves (dq_solo), and the
 * fp32 workspace is neither zeroed by prep, added to, nor read back by
 * dq_out: on 48-127-token documents at 32K those were 2.7 of the pass's
 * 4.4 GB and 1.4 of its 3.0 ms (H100, ncu, round 30).  prep writes the
 * zeros of q-tiles that no k-tile sees (tgt).  f->solo stays 0 where
 * some q-tile has more, or with LONGATTN_HOPPER_BWD=nosolo.  KERN_OK,
 * KERN_ERR or KERN_OOM. */
static int hb_solo(struct state *f, const struct plan *p)
{
	int live, most, rc;
	int32_t *tgt;

	if (f->det || f->fuse || f->bk != BK || hb_env("nosolo"))
		return KERN_OK;
	if ((tgt = row_targets(p, &live, &most)) == NULL)
		return KERN_ERR;
	if (most > 1) {
		free(tgt);
		return KERN_OK;
	}
	if ((rc = upload((void **)&f->tgt, tgt, (size_t)p->nrows * sizeof *tgt)) == KERN_OK)
		f->solo = 1;
	free(tgt);
	return rc;
}

/* Deterministic: one CTA per k-tile, k-tiles descending, none split (a
 * CTA waits only for CTAs launched before it, and no dK/dV slot is added
 * to in a racing order); per q-tile row of the plan p (not transposed)
 * each run's end and how many k-tiles come after it in the row. */
static int det_items(struct state *f, const struct plan *p, const struct plan *pt)
{
	const int group = f->s.hq / f->s.hkv, mgroup = f->s.hq / f->mheads;
	int4 *item = (int4 *)calloc(pt->nkt ? pt->nkt : 1, sizeof *item);
	int2 *fr = (int2 *)calloc(p->nent ? p->nent : 1, sizeof *fr);
	int32_t zero = 0;
	int rc;

	if (item == NULL || fr == NULL) {
		free(item);
		free(fr);
		return KERN_ERR;
	}
	for (int kt = 0; kt < pt->nkt; kt++) {
		int lmax = 0;
		for (int hk = 0; hk < f->s.hkv; hk++) {
			int len = 0;
			for (int gi = 0; gi < group; gi++) {
				const int r = ((hk * group + gi) / mgroup) * pt->nkt + kt;
				for (int e = pt->row[r]; e < pt->row[r + 1]; e++)
					len += pt->ent[e].t1 - pt->ent[e].t0;
			}
			lmax = len > lmax ? len : lmax;
		}
		item[pt->nkt - 1 - kt] = make_int4(kt, 0, lmax, -1);
	}
	for (int r = 0; r < p->nrows; r++)
		for (int e = p->row[r + 1] - 1, n = 0; e >= p->row[r]; n += p->ent[e].t1 - p->ent[e].t0, e--)
			fr[e] = make_int2(p->ent[e].t1, n);
	f->nitems = pt->nkt;
	f->nslots = 0;
	f->nqt = p->nqt;
	if ((rc = upload((void **)&f->item, item, (size_t)pt->nkt * sizeof *item)) == KERN_OK &&
	    (rc = upload((void **)&f->slotkt, &zero, sizeof zero)) == KERN_OK &&
	    (rc = upload((void **)&f->frow, p->row, (size_t)(p->nrows + 1) * sizeof *p->row)) == KERN_OK)
		rc = upload((void **)&f->frank, fr, (size_t)p->nent * sizeof *fr);
	free(item);
	free(fr);
	return rc;
}

/* The instantiations a run picks from (bwd's X: QM | FUSE, or QM |
 * SOLO; DET has none). */
template <typename T, int HD, bool DET, bool HALF> static void *bwd_fn(int x)
{
	if constexpr (DET)
		return (void *)bwd<T, HD, DET, HALF, 0>;
	else switch (x) {
	case 1: return (void *)bwd<T, HD, DET, HALF, 1>;
	case 2: return (void *)bwd<T, HD, DET, HALF, 2>;
	case 3: return (void *)bwd<T, HD, DET, HALF, 3>;
	case 4: return (void *)bwd<T, HD, DET, HALF, 4>;
	case 5: return (void *)bwd<T, HD, DET, HALF, 5>;
	default: return (void *)bwd<T, HD, DET, HALF, 0>;
	}
}

template <typename T, int HD> static cudaError_t set_smem(void)
{
	cudaError_t e = cudaSuccess;
	void *fn[13];

	for (int x = 0; x < 6; x++) {
		fn[x] = bwd_fn<T, HD, false, false>(x);
		fn[6 + x] = bwd_fn<T, HD, false, true>(x);
	}
	fn[12] = bwd_fn<T, HD, true, false>(0);
	for (int i = 0; i < 13 && e == cudaSuccess; i++)
		e = cudaFuncSetAttribute(fn[i], cudaFuncAttributeMaxDynamicSharedMemorySize, lay_smem<HD>::TOTAL);
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(prep<T, HD, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, OSMEM);
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(dq_part<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, OSMEM);
	if constexpr (HD == 128) {
		if (e == cudaSuccess)
			e = cudaFuncSetAttribute(bwd64<T, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, lay64::TOTAL);
		if (e == cudaSuccess)
			e = cudaFuncSetAttribute(bwd64<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, lay64::TOTAL);
	}
	return e;
}

/* bwd64 where its plan (64 x 64 tiles) visits less than B64_PCT % of the
 * 64 x 128 plan's area and at least one tile in B64_DEN of its grid, on a
 * device whose DRAM moves FASTBW GB/s or more (an H200's 4.8 TB/s) or
 * on rows longer than B64_LONG tokens: hd 128, not deterministic.  Its
 * rival is bwd with the halves that see nothing skipped (HALF), which
 * visits the same 64 x 64 pieces: on such plans HALF is on (a quarter of
 * the area saved needs half the tiles with a dead half).  64-token block
 * masks, 16K/32K/64K (round 22, against HALF with its live halves
 * warp-uniform): H200, ratio 0.5 +4/+6/+9 %, 0.3 +3/+1/-2 %, 0.1
 * -7/-8/-10 %; H100, -1 to -15 % at every ratio (bwd64 reads Q/dO and
 * adds dQ twice as often a FLOP, which the H100's DRAM pays for).  At
 * 128K HALF flattens (220 TFLOP/s on an H100 at ratios 0.5 and 0.3):
 * bwd64 +14 % and -8 % there, and on the H200 +31 % and +4 %, so long
 * rows on fast DRAM go down to one tile in B64_LONGDEN.  bwd64 on full
 * 32K: 444 against 560 (H200), so nowhere near full.
 * LONGATTN_HOPPER_BWD=b64 and no64 force it on and off, for A/B runs and
 * checks.  On success p is the plan to run and f->bk its k-tiles. */
enum { B64_PCT = 75, B64_DEN = 3, B64_LONGDEN = 5, B64_LONG = 65536 };

static int pick_bk(struct state *f, const struct mask *m, struct plan *p, char *err, size_t errlen)
{
	struct plan p6;

	f->bk = BK;
	if (f->s.hd != 128 || f->det || hb_env("no64"))
		return 0;
	if (plan_build(&p6, m, BQ, BK64, err, errlen) != 0)
		return -1;
	const int64_t s6 = plan_steps(&p6, 0);
	/* at least one tile in den of the grid; 0: never */
	const int fast = dram_gbs() >= FASTBW, lng = f->s.sq > B64_LONG;
	const int den = fast && lng ? B64_LONGDEN : fast || lng ? B64_DEN : 0;
	if (hb_env("b64") || (s6 * 100 < (int64_t)B64_PCT * 2 * plan_steps(p, 0) &&
	    s6 * den >= (int64_t)p6.nrows * p6.nkt)) {
		plan_free(p);
		*p = p6;
		f->bk = BK64;
	} else {
		plan_free(&p6);
	}
	return 0;
}

/* The pass in parts of the kv-heads, each part's prep and dQ conversion
 * beside another part's tiles.  prep's reads of O and dO and zeroing of
 * the fp32 dQ, and dQ's conversion, move 3.7 GB at 32K, 64:8 whatever
 * the mask: a fifth of causal documents' bwd when they run before and
 * after the tiles (round 34).  A DRAM-bound kernel needs far fewer than
 * 132 SMs for most of DRAM's rate, so each part's prep and conversion
 * run on osb SMs from a stream of higher priority, while another part's
 * tiles take the rest; only the first part's prep and the last part's
 * conversion run alone.  H100, bwd, 8 parts on 32 SMs (round 35): 1K
 * and pile causal documents at 32K +4/+5 %, 1K full documents +5 %,
 * hash_sparse and the window at 16K +5/+6 %; full 8K and causal 32K
 * level, all plans of 6-13 tiles a q-tile row, the others 64 and more;
 * the default against nosplit at 32K/16K: pile documents +6 %, buckets
 * +3 %, the window +5 %, and at hd 64 +13/+12/+7 %.  So by default where
 * the plan visits SPLITTPQ tiles a q-tile row or fewer (the O(S) bytes
 * are then a tenth of the pass or more), from SPLITLEN rows, in 8, 4 or
 * 2 parts.
 * Not deterministic (its waits), fuse (its one queue) nor parts of more
 * than 2^32 float4 of dQ (dq_part).  LONGATTN_HOPPER_BWD=split2, split4,
 * split8 force it, nosplit keeps it off; os8, os16, os24, os48, os64 set
 * the SMs beside the tiles (32), sprep runs every part's prep first on
 * the whole GPU, for A/B runs.  dQ's conversion by cp.async.bulk into
 * shared memory (three 32 KB stages) lost 1.5-6 % on the H100 beside 32
 * SMs' tiles and 28-38 % on 16 SMs (round 36), and went. */
enum { SPLITTPQ = 32, SPLITLEN = 8192, SPLITOS = 32 };

static int hb_split(struct state *f, const struct plan *p)
{
	const struct attn_shape *s = &f->s;
	/* the plan's tiles a q-tile row, 64-key ones (bwd64) counted in 128-key ones */
	const double tpq = (double)(p->ntiles_full + p->ntiles_partial) * f->bk / BK /
	    ((double)p->heads * (p->nqt > 0 ? p->nqt : 1));
	int n = hb_env("split2") ? 2 : hb_env("split4") ? 4 : hb_env("split8") ? 8 : 0, lo, hi;

	if (n == 0 && !hb_env("nosplit") && s->sq >= SPLITLEN && tpq <= SPLITTPQ)
		n = s->hkv % 8 == 0 ? 8 : s->hkv % 4 == 0 ? 4 : 2;
	if (n < 2 || f->det || f->fuse || s->hkv % n != 0 ||
	    (uint64_t)s->batch * s->sq * (s->hq / n) * s->hd / 4 >= (1ull << 32))
		return KERN_OK;
	f->osb = hb_env("os8") ? 8 : hb_env("os16") ? 16 : hb_env("os24") ? 24 : hb_env("os48") ? 48 :
	    hb_env("os64") ? 64 : SPLITOS;
	if (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess ||
	    cudaStreamCreateWithPriority(&f->sh, cudaStreamNonBlocking, hi) != cudaSuccess ||
	    cudaStreamCreateWithPriority(&f->sb, cudaStreamNonBlocking, lo) != cudaSuccess)
		return launched("hopper bwd", "split streams");
	for (int i = 0; i < 2 * n + 3; i++)
		if (cudaEventCreateWithFlags(&f->ev[i], cudaEventDisableTiming) != cudaSuccess)
			return launched("hopper bwd", "split events");
	f->split = n;
	f->nsm = sm_count();
	f->sprep = hb_env("sprep");
	if (hb_env("why"))
		warnx("hopper: bwd: %d parts of %d kv-heads, their O(S) kernels on %d SMs beside the tiles",
		    n, s->hkv / n, f->osb);
	return KERN_OK;
}

static int init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct state *f = (struct state *)calloc(1, sizeof *f);
	struct plan p, pt;
	int rc;
	cudaError_t ce;

	*st = NULL;
	if (f == NULL) {
		snprintf(err, errlen, "out of host memory");
		return KERN_ERR;
	}
	f->s = *s;
	f->mheads = m->heads;
	f->sqp = (int)((s->sq + BQ - 1) / BQ * BQ);
	f->det = (s->flags & ATTN_DETERMINISTIC) != 0;
	f->prepzero = !hb_env("memset");
	if (s->dtype == DT_BF16)
		ce = s->hd == 64 ? set_smem<__nv_bfloat16, 64>() : set_smem<__nv_bfloat16, 128>();
	else
		ce = s->hd == 64 ? set_smem<__half, 64>() : set_smem<__half, 128>();
	if (ce != cudaSuccess || tmap_encoder() == NULL) {
		snprintf(err, errlen, "hopper bwd setup: %s", ce != cudaSuccess ? cudaGetErrorString(ce) :
		    "no cuTensorMapEncodeTiled in the driver");
		free(f);
		return KERN_ERR;
	}
	if (plan_build(&p, m, BQ, BK, err, errlen) != 0) {
		free(f);
		return KERN_ERR;
	}
	if (pick_bk(f, m, &p, err, errlen) != 0) {
		plan_free(&p);
		free(f);
		return KERN_ERR;
	}
	/* documents on tile edges (tile.cuh's pad_plan), not where the bwd is
	 * deterministic (a gap's rows add zeros to the next tile's dQ, out of
	 * its order).  LONGATTN_HOPPER_BWD=nopad keeps the plan, =pad pads
	 * wherever there are gaps, for A/B runs and checks. */
	if (!f->det && !hb_env("nopad") &&
	    (rc = pad_plan(m, BQ, f->bk, 0, hb_env("pad"), &p, &f->qtile, &f->ktile, &f->skv, err, errlen)) != KERN_OK) {
		plan_free(&p);
		fini(f);
		return rc;
	}
	if (f->skv > 0)
		f->sqp = p.nqt * BQ;
	if (plan_transpose(&pt, &p, err, errlen) != 0) {
		plan_free(&p);
		fini(f);
		return KERN_ERR;
	}
	f->nkt = pt.nkt;
	if ((rc = upload((void **)&f->row, pt.row, (size_t)(pt.nrows + 1) * sizeof *pt.row)) == KERN_OK &&
	    (rc = upload((void **)&f->ent, pt.ent, (size_t)pt.nent * sizeof *pt.ent)) == KERN_OK &&
	    (rc = upload((void **)&f->cut, pt.cut, (size_t)pt.ncut * sizeof *pt.cut)) == KERN_OK &&
	    (rc = entinfo(f, &pt, f->bk)) == KERN_OK &&
	    /* partial tiles masked from each key's one interval of queries
	     * where the mask has them (full, causal, documents, windows,
	     * prefix-LM, share_question, random_eviction): iv_bits, not
	     * the cuts or bitmasks (H100, round 33: random_eviction +8 %,
	     * hash_sparse +4 %, windows and documents +2-3 %); cuts keeps
	     * them, for A/B runs and checks.  An
	     * interval may span a padded plan's gap rows: prep gives them
	     * L = +inf, so P = 0 and they add nothing (share_question's
	     * samples on tile edges are one interval a key only so). */
	    (hb_env("cuts") || (rc = upload_intervals(&f->qiv, &pt, f->qtile, pt.nqt, hb_env("why") ?
	    "hopper: bwd: partial tiles masked from each key's one interval of queries" : NULL)) == KERN_OK))
		rc = f->det ? det_items(f, &p, &pt) : items(f, &pt);
	if (rc == KERN_OK && !f->det && f->bk == BK && (hb_env("fuse") || hb_env("fusez")))
		rc = fuse_targets(f, &p, (hb_env("fusez") ? 2 : 1) | (hb_env("fusenc") ? 4 : 0) |
		    (hb_env("fusenone") ? 8 : 0));
	if (rc == KERN_OK && (rc = hb_solo(f, &p)) == KERN_OK && f->solo && hb_env("why"))
		warnx("hopper: bwd: solo: every q-tile's dQ from one k-tile, written by its consumers");
	if (rc == KERN_OK)
		rc = hb_split(f, &p);
	plan_free(&p);
	plan_free(&pt);
	if (rc != KERN_OK) {
		snprintf(err, errlen, rc == KERN_OOM ? "out of device memory for the plan" :
		    "plan upload failed (or more than 65535 CTAs of k-tiles)");
		fini(f);
		return rc;
	}
	*st = f;
	return KERN_OK;
}

template <typename T, int HD> static int run_t(struct state *f, const struct attn_io *io)
{
	const struct attn_shape *s = &f->s;
	cudaStream_t st = (cudaStream_t)io->stream;
	const int64_t nq = (int64_t)s->batch * s->sq * s->hq * HD;
	const int64_t npad = (int64_t)s->batch * s->hq * f->sqp;
	const int64_t nws = (int64_t)f->nslots * s->batch * s->hkv * f->bk * HD;
	const int64_t nsem = f->det || f->fuse ? (int64_t)s->batch * s->hq * f->nqt : 0;
	CUtensorMap tq, tdo, tk, tv, tdq;
	int rc;

	/* The workspace is made on first use: a forward-only run needs none,
	 * nor does solo its dQ. */
	if (f->L == NULL && ((!f->solo && dev_alloc((void **)&f->dqa, (size_t)nq * sizeof(float)) != 0) ||
	    dev_alloc((void **)&f->L, (size_t)npad * sizeof(float)) != 0 ||
	    dev_alloc((void **)&f->D, (size_t)npad * sizeof(float)) != 0 ||
	    (nws > 0 && dev_alloc((void **)&f->ws, 2 * (size_t)nws * sizeof(float)) != 0) ||
	    (nsem > 0 && dev_alloc((void **)&f->sem, (size_t)nsem * sizeof(int)) != 0)))
		return KERN_OOM;
	if ((rc = tmap(&tq, io->q, s->dtype, s->sq, s->hq, HD, s->batch, BQ)) != KERN_OK ||
	    (rc = tmap(&tdo, io->dout, s->dtype, s->sq, s->hq, HD, s->batch, BQ)) != KERN_OK ||
	    (rc = tmap(&tk, io->k, s->dtype, s->sk, s->hkv, HD, s->batch, f->bk)) != KERN_OK ||
	    (rc = tmap(&tv, io->v, s->dtype, s->sk, s->hkv, HD, s->batch, f->bk)) != KERN_OK ||
	    (rc = f->solo ? tmap(&tdq, io->dq, s->dtype, s->sq, s->hq, HD, s->batch, BQ) :   /* unused */
	    tmap(&tdq, f->dqa, s->dtype, s->sq, s->hq, HD, s->batch, BQ, true)) != KERN_OK)
		return rc;
	/* prep zeroes dQ's rows as it reads O and dO: a memset wrote every
	 * line once more (H100, 2026-11-26: 1K causal documents +0.6-1.2 %,
	 * pile and --long documents +0.6-1.5 %, full and causal level) */
	const bool pz = f->prepzero && !(f->fuse & 2) && !f->solo, dqz = f->dqz;
	f->dqz = 0;             /* until this pass has left it zero again */
	if ((!f->solo && (!f->prepzero || ((f->fuse & 2) && !dqz)) && cudaMemsetAsync(f->dqa, 0, (size_t)nq * sizeof(float), st) != cudaSuccess) ||
	    (nws > 0 && cudaMemsetAsync(f->ws, 0, 2 * (size_t)nws * sizeof(float), st) != cudaSuccess) ||
	    (f->det && cudaMemsetAsync(f->sem, 0, (size_t)nsem * sizeof(int), st) != cudaSuccess) ||
	    (f->fuse && cudaMemsetAsync(f->q, 0, ((size_t)f->qtotal + 2) * sizeof(int), st) != cudaSuccess))
		return launched("hopper bwd", "memset");
	/* split: the fork; every part's prep on sh in turn, the first on the
	 * whole GPU, the others on osb SMs beside the tiles */
	const int np = f->split > 1 ? f->split : 1, nkp = s->hkv / np, nhp = s->hq / np;
	cudaStream_t sh = np > 1 ? f->sh : st;
	if (np > 1 && (cudaEventRecord(f->ev[0], st) != cudaSuccess ||
	    cudaStreamWaitEvent(f->sh, f->ev[0], 0) != cudaSuccess ||
	    cudaStreamWaitEvent(f->sb, f->ev[0], 0) != cudaSuccess))
		return launched("hopper bwd", "fork");
	for (int p = 0; p < np; p++) {
		const int pr = pshape<HD>::ROWS;
		const int64_t rows = (int64_t)f->sqp * (f->sprep ? s->hq : nhp);
		if (p == 0)
			prep<T, HD, false><<<dim3((unsigned)((rows + pr - 1) / pr), s->batch), 256, 0, sh>>>(
			    (const T *)io->o, (const T *)io->dout, io->lse, f->D, f->L, (float)(1 / s->scale),
			    (int)s->sq, f->sqp, s->hq, f->qtile, pz ? f->dqa : NULL,
			    f->fuse || f->solo ? (T *)io->dq : NULL, f->tgt, s->hq / f->mheads, f->fuse ? f->sem : NULL,
			    0, f->sprep ? s->hq : nhp);
		else if (!f->sprep)
			prep<T, HD, true><<<dim3((unsigned)((f->osb + s->batch - 1) / s->batch), s->batch), OSNT, OSMEM, sh>>>(
			    (const T *)io->o, (const T *)io->dout, io->lse, f->D, f->L, (float)(1 / s->scale),
			    (int)s->sq, f->sqp, s->hq, f->qtile, pz ? f->dqa : NULL,
			    f->solo ? (T *)io->dq : NULL, f->tgt, s->hq / f->mheads, NULL, p * nhp, nhp);
		if ((rc = launched("hopper bwd", "prep")) != KERN_OK)
			return rc;
		if (np > 1 && cudaEventRecord(f->ev[1 + p], sh) != cudaSuccess)
			return launched("hopper bwd", "prep's event");
	}

	args a;
	a.L = f->L; a.D = f->D; a.dqa = f->dqa; a.dk = io->dk; a.dv = io->dv;
	a.wsk = f->ws; a.wsv = f->ws + nws;
	a.row = f->row; a.item = f->item; a.ent = f->ent; a.cut = f->cut;
	a.einf = f->einf; a.bm = f->bm; a.qiv = f->qiv;
	a.frow = f->frow; a.frank = f->frank; a.sem = f->sem; a.nqt = f->nqt;
	a.sq = (int)s->sq; a.sk = (int)s->sk; a.sqp = f->sqp; a.hq = s->hq; a.hkv = s->hkv;
	a.nkt = f->nkt; a.group = s->hq / s->hkv; a.mgroup = s->hq / f->mheads; a.batch = s->batch;
	a.rev = f->rev;
	a.fuse = f->fuse;
	a.q = f->q;
	a.qn = f->q + f->qtotal;
	a.qtotal = f->qtotal;
	a.fconv = f->fconv;
	a.cnt = f->sem;         /* the deterministic pass's counters, unused there */
	a.dq = io->dq;
	a.qtile = f->qtile; a.ktile = f->ktile; a.skv = f->skv > 0 ? f->skv : (int)s->sk;
	a.sl = (float)s->scale * HB_LOG2E;
	a.scale = (float)s->scale;
	/* k-tiles fastest: the CTAs in flight walk the q-heads of one kv-head,
	 * so that they share the Q, dO tiles and dQ lines in L2 (+5% on full
	 * at 32K against kv-heads fastest). */
	/* fuse: its converting CTAs first */
	dim3 grid(f->nitems + (f->fuse ? f->fconv : 0), nkp, s->batch);
	const int x = (f->qm ? 1 : 0) | (f->fuse ? 2 : 0) | (f->solo ? 4 : 0);
	void *fn = f->det ? bwd_fn<T, HD, true, false>(0) : f->half ? bwd_fn<T, HD, false, true>(x) :
	    bwd_fn<T, HD, false, false>(x);
	int smem = lay_smem<HD>::TOTAL;
	if constexpr (HD == 128) {
		if (f->bk == BK64) {
			fn = f->qm ? (void *)bwd64<T, 1> : (void *)bwd64<T, 0>;
			smem = lay64::TOTAL;
		}
	}
	void *av[] = {&tq, &tdo, &tk, &tv, &tdq, &a};
	/* split: the parts' tiles on the caller's stream and sb in turn, so
	 * that one part's CTAs fill the last wave of the one before */
	for (int p = 0; p < np; p++) {
		cudaStream_t sm = p & 1 ? f->sb : st;
		a.hk0 = p * nkp;
		if (np > 1 && cudaStreamWaitEvent(sm, f->ev[1 + p], 0) != cudaSuccess)
			return launched("hopper bwd", "main's wait");
		/* a launch error is the last error, which launched reads */
		(void)cudaLaunchKernel(fn, grid, dim3(NT + 128), av, smem, sm);
		if ((rc = launched("hopper bwd", "main")) != KERN_OK)
			return rc;
		if (np > 1 && cudaEventRecord(f->ev[1 + np + p], sm) != cudaSuccess)
			return launched("hopper bwd", "main's event");
	}
	/* split: each part's dQ converted on sh once its tiles are done, the
	 * last on the whole GPU; then the join */
	if (np > 1) {
		for (int p = 0; p < np; p++) {
			if (cudaStreamWaitEvent(sh, f->ev[1 + np + p], 0) != cudaSuccess)
				return launched("hopper bwd", "dq's wait");
			if (f->solo)
				continue;
			const float *acc = f->dqa + (int64_t)p * nhp * HD;
			T *dq = (T *)io->dq + (int64_t)p * nhp * HD;
			const uint32_t rows = (uint32_t)(s->batch * s->sq), w4 = (uint32_t)(nhp * HD / 4);
			const unsigned nb = p < np - 1 ? f->osb : f->nsm;
			dq_part<T><<<nb, OSNT, OSMEM, sh>>>(acc, dq, rows, w4, (int64_t)s->hq * HD, (float)s->scale);
			if ((rc = launched("hopper bwd", "dq")) != KERN_OK)
				return rc;
		}
		if (cudaEventRecord(f->ev[2 * np + 1], sh) != cudaSuccess ||
		    cudaEventRecord(f->ev[2 * np + 2], f->sb) != cudaSuccess ||
		    cudaStreamWaitEvent(st, f->ev[2 * np + 1], 0) != cudaSuccess ||
		    cudaStreamWaitEvent(st, f->ev[2 * np + 2], 0) != cudaSuccess)
			return launched("hopper bwd", "join");
	}
	if (nws > 0) {
		const unsigned nb = (unsigned)((nws / 4 + 255) / 256);
		if (f->bk == BK64)
			kv_out<T, HD, BK64><<<nb, 256, 0, st>>>(f->ws, f->ws + nws,
			    f->slotkt, (T *)io->dk, (T *)io->dv, nws, s->batch, s->hkv, (int)s->sk, f->ktile);
		else
			kv_out<T, HD, BK><<<nb, 256, 0, st>>>(f->ws, f->ws + nws,
			    f->slotkt, (T *)io->dk, (T *)io->dv, nws, s->batch, s->hkv, (int)s->sk, f->ktile);
		if ((rc = launched("hopper bwd", "dk/dv")) != KERN_OK)
			return rc;
	}
	if (f->fuse) {
		f->dqz = (f->fuse & 2) != 0;
		return KERN_OK;
	}
	if (f->solo || np > 1)
		return KERN_OK;
	dq_out<T><<<132 * 16, 256, 0, st>>>(f->dqa, (T *)io->dq, nq, (float)s->scale);
	return launched("hopper bwd", "dq");
}

static int run(void *st, const struct attn_io *io)
{
	struct state *f = (struct state *)st;
	if (f->s.dtype == DT_BF16)
		return f->s.hd == 64 ? run_t<__nv_bfloat16, 64>(f, io) : run_t<__nv_bfloat16, 128>(f, io);
	return f->s.hd == 64 ? run_t<__half, 64>(f, io) : run_t<__half, 128>(f, io);
}

}
