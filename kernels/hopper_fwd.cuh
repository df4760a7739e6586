/* hopper's fwd pass (namespace hf): FlashAttention-3 style on sm_90a.
 *
 * CTA = (q-head, q-tile of 128 rows, batch), 384 threads in three
 * warpgroups.  Warpgroup 0 is the producer: one thread issues TMA copies
 * (cp.async.bulk.tensor, 128-byte swizzle, zero fill past the sequence
 * ends) of the Q tile once and of K and V tiles of 128 keys into a ring of
 * three shared-memory stages (225 KB at hd 128; of 176 keys, two stages,
 * where the mask wastes nothing on them: KW below), each guarded by mbarriers
 * (full: the copy landed, with its byte count; empty: both consumers are
 * done with it).  K and V have barriers of their own: a K stage is given
 * back as soon as S is computed, so K runs two tiles ahead of the
 * consumers (one barrier for both left every K load exposed: 420 TFLOP/s
 * instead of 600 at hd 128).  The producer gives most of its registers
 * away (setmaxnreg.dec) to warpgroups 1 and 2, the consumers, 64 q-rows
 * each (setmaxnreg.inc).
 *
 * A consumer computes S = Q K^T with wgmma (both operands in shared
 * memory, K-major descriptors), masks S only on the plan's partial tiles
 * and on the ragged last k-tile, runs the online softmax in the log2 domain
 * (ex2.approx) and turns P into the A fragment of O += P V in registers (the
 * accumulator layout of a 16-key slab is that fragment's layout), V read
 * from shared memory through an N-major (transposed) descriptor.
 *
 * Within a warpgroup the GEMMs overlap the softmax: S(j+1) = Q K(j+1)^T and
 * O += P(j) V(j) are issued together, the softmax of S(j+1) runs as soon as
 * the first completes, while the tensor cores still do the second.  The
 * two consumers take turns to issue (ping-pong on named barriers).
 *
 * The plan (tiles 128 x 128) drives the walk exactly as in flash.cu: full
 * tiles are never masked, partial ones are masked from their cuts (a few
 * compares per cut and row: a cut allows one interval of keys on a row,
 * which is a run of a thread's score bits), partial tiles with many cuts
 * from a bitmask made in init, and q-tiles run heaviest first, the
 * q-heads of one kv-head side by side (K and V shared in L2).  O leaves
 * through shared memory and a TMA store.
 *
 * Three launches of this (choose() picks one from the plan): fwd, a CTA a
 * row; fwd in 2-CTA clusters, the two q-heads of a pair sharing each K
 * and V tile by TMA multicast (long rows); fwdp, persistent CTAs that run
 * the tiles of many rows as one stream, so that a row's first S overlaps
 * the last P V and epilogue of the row before (rows of a few tiles), its
 * items one q-head's 128 rows or (pairs) two q-heads' 64 rows, on 128- or
 * (pairs) 64-key tiles.  The first two split a short last wave's q-tiles
 * along their keys (split(), combine()), and each of their CTAs
 * prefetches into L2 the Q tile of the CTA a wave on. */
#include <limits.h>
#include <math.h>

namespace hf {

/* KW: the wide k-tile (hd 128, fwd and its CTA pairs), whose rows then
 * pay the per-tile costs (the row max, O's rescale, the barriers) on 176
 * keys instead of 128, FlashAttention-3's choice at hd 128; two stages
 * then fill shared memory.  Where its plan visits at most KW_AREA of
 * 10000 parts of the 128-key plan's area and no tile has more than MANY cuts
 * (full; causal from 8K; prefix-LM, the global window, qk_sparse,
 * long full documents).  H100 (bench/NOTES.md, round 23): full 8K / 16K /
 * 32K / 64K +2.6 / +3.4 / +3.5 / +3.8 %, 4K level; causal 16K / 32K +10 /
 * +1.7 %, prefix_lm_causal 32K +2-3 %.  H200: full 8K / 32K +1.8 / +3.0
 * %, causal 16K / 32K +3.2 / +2.5 %, the global window, qk_sparse and
 * prefix_lm_causal at 32K +2-3 %, --long full documents +1.8 %.  What
 * visits more gains nothing or loses: the window (8 %) and
 * causal_blockwise (7 %) level, --long causal documents (2.00 %) -3 %,
 * level in round 25.  Causal 8K (1.94 %) gains +0.5-0.7 % on the H200 and
 * +0.6-1.1 % on the H100 (rounds 25, 26): the bound lies between them. */
enum { BQ = 128, BK = 128, KW = 176, KW_AREA = 10195, NT = 384 };

static const float LOG2E = 1.4426950408889634f;
static const float LN2 = 0.6931471805599453f;

/* KT: BK, or KW (two stages); P: fwd's loop, whose Q is NQH halves of 64
 * rows (three where two 176-key stages leave room) */
template <int HD, int KT = BK, int P = 0> struct cfg {
	enum {
		STAGES = KT > BK ? 2 : 3,
		QB = BQ * HD * 2,                  /* bytes of the Q tile */
		KB = KT * HD * 2,                  /* bytes of one K (or V) tile */
		NQH = P && KT > BK ? 3 : 2,
		QA = NQH * QB / 2,                 /* bytes of Q's buffers */
		/* Q, then per stage K and V; mbarriers after (the loop's NQH
		 * full and empty, and its NQH items, 32 bytes each, 16-byte
		 * aligned); 1 KB for alignment */
		BAR = QA + 2 * STAGES * KB,
		SMEM = BAR + 8 * (1 + 4 * STAGES + 2 * NQH) + 16 + 32 * NQH + 1024,
	};
	static_assert(SMEM <= 227 * 1024, "fwd's shared memory");
};

/* A partial tile with more cuts than this (random_eviction: one a key)
 * has its mask made in init, a bit a score, so that no thread walks
 * dozens of cuts per tile. */
enum { MANY = 8 };

struct args {
	const int32_t *row, *order;
	const plan_ent *ent;
	const plan_cut *cut;
	const uint4 *bm;           /* per bitmask BQ rows of BK bits; an entry with
	                            * more than MANY cuts has its index in cut0 */
	const int2 *iv;            /* per row its one interval of keys, or NULL */
	const uint8_t *half;       /* fwdp's half tiles: per entry its half, or NULL */
	void *o;
	float *lse;
	int sq, sk, hq, nqt, group, mgroup;
	float sl;                  /* scale * log2(e) */
	const int4 *item;          /* fwdp: (q-head, q-tile, batch, plan row) */
	/* a plan of the mask with gaps (tile.cuh's pad_plan): per q-tile
	 * {first real row, real rows}, per k-tile {first real key, -}; NULL:
	 * tile t starts at t * its size.  sk is then the padded one, which the
	 * cuts and edges are in. */
	const int2 *qtile, *ktile;
	int nitem;
	unsigned *next, base;      /* fwdp: item counter, its value at launch */
	/* fwd's split tail (split() below): in the last batch, blocks from
	 * whole to hq * nqt exit, and those past hq * nqt run tail[i] = (the
	 * block it is a part of, its plan row, its slot in ws) */
	const int4 *tail;
	int whole;
	float *ws;
	/* fwd's loop (P): batches; its items are the batches' blocks of
	 * whole rows, then the tail's, nitem of them, taken from next (CL 1)
	 * or a wave at a time (CL 2) */
	int batch;
	int nqh;                   /* the loop's Q halves in use: 2, or 3 (KW) */
	/* fwd: the CTAs the machine holds, whose block this far on has its Q
	 * tile prefetched into L2 (0: none) */
	int ahead;
};

/* ---- PTX wrappers ------------------------------------------------------ */

static __device__ __forceinline__ void bar_arrive(uint32_t b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory");
}

/* ---- 2-CTA clusters: K and V tiles multicast to both CTAs ---------------- */

static __device__ __forceinline__ uint32_t cl_rank(void)
{
	uint32_t r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}

/* Every thread of both CTAs: the barriers are initialised before the other
 * CTA may copy into this one or arrive on its barriers. */
static __device__ __forceinline__ void cl_sync(void)
{
	asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
	    "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* Arrive on the barrier at the same offset in CTA rank of the cluster.
 * The default (CTA-scope) release, as CUTLASS's cluster barriers: the
 * stage's readers, wgmma, have completed (wait_group) before the arrive;
 * .release.cluster made every arrive a MEMBAR and the kernel half as fast
 * (round 3, call 1). */
static __device__ __forceinline__ void bar_arrive_cl(uint32_t b, uint32_t rank)
{
	asm volatile("{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, %0, %1;\n\t"
	    "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}" :: "r"(b), "r"(rank) : "memory");
}

/* tma4 into the same offset of every CTA in mask, each completing on its
 * own barrier at offset bar. */
static __device__ __forceinline__ void tma4mc(uint32_t dst, const CUtensorMap *m, int c0, int c1, int c2, int c3,
    uint32_t bar, uint16_t mask)
{
	asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
	    ".multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;"
	    :: "r"(dst), "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask) : "memory");
}

/* A tile into L2 only, for a CTA that starts later. */
static __device__ __forceinline__ void tma4_l2(const CUtensorMap *m, int c0, int c1, int c2, int c3)
{
	asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];"
	    :: "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}

/* Keeps the compiler from moving accumulator reads or writes across the
 * asynchronous wgmma that owns them. */
template <int N> static __device__ __forceinline__ void pin(float *d)
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(d[i]) :: "memory");
}

template <int N> static __device__ __forceinline__ void pin(uint32_t (*p)[4])
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+r"(p[i][0]), "+r"(p[i][1]), "+r"(p[i][2]), "+r"(p[i][3]) :: "memory");
}

/* d = A B^T (scale-d 0), m64n128k16 and m64n64k16, d written only. */
#define HF_SS0(TY) \
	asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_R64 "}, %64, %65, 0, 1, 1, 0, 0;" \
	    : WG_O64 : "l"(da), "l"(db))
#define HF_SS64_0(TY) \
	asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_R32 "}, %32, %33, 0, 1, 1, 0, 0;" \
	    : WG_O32 : "l"(da), "l"(db))
/* d[64] (+)= A B^T, m64n128k16, A and B K-major in shared memory. */
#define HF_SS(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}" \
	    : WG_D64 : "l"(da), "l"(db), "r"(acc))
/* d[88] (+)= A B^T, m64n176k16: S of a 176-key tile. */
#define HF_SS176(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %90, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n176k16.f32." TY "." TY " " WG_R88 "}, %88, %89, p, 1, 1, 0, 0;\n}" \
	    : WG_D88 : "l"(da), "l"(db), "r"(acc))
/* d[64] += A B, m64n128k16, A in registers, B N-major in shared memory. */
/* d[32] (+)= A B^T, m64n64k16: S of a 64-key tile. */
#define HF_SS64(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_R32 "}, %32, %33, p, 1, 1, 0, 0;\n}" \
	    : WG_D32 : "l"(da), "l"(db), "r"(acc))
#define HF_RS128(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_R64 "}" \
	    ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}" \
	    : WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
/* the same, d = A B where acc is 0: an item's first P V in fwdp, which
 * would otherwise zero O with 64 multiplies a thread */
#define HF_RS128Z(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_R64 "}" \
	    ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}" \
	    : WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc))
#define HF_RS64Z(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_R32 "}" \
	    ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}" \
	    : WG_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc))
#define HF_RS64(TY) \
	asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t" \
	    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_R32 "}" \
	    ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}" \
	    : WG_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))

template <typename T> struct ty;
template <> struct ty<__nv_bfloat16> : w16<__nv_bfloat16> {
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc) { HF_SS("bf16"); }
	static __device__ __forceinline__ void ss0(float *d, uint64_t da, uint64_t db) { HF_SS0("bf16"); }
	static __device__ __forceinline__ void ss64_0(float *d, uint64_t da, uint64_t db) { HF_SS64_0("bf16"); }
	static __device__ __forceinline__ void ss64(float *d, uint64_t da, uint64_t db, int acc) { HF_SS64("bf16"); }
	static __device__ __forceinline__ void ss176(float *d, uint64_t da, uint64_t db, int acc) { HF_SS176("bf16"); }
	static __device__ __forceinline__ void rs128(float *d, const uint32_t *a, uint64_t db) { HF_RS128("bf16"); }
	static __device__ __forceinline__ void rs64(float *d, const uint32_t *a, uint64_t db) { HF_RS64("bf16"); }
	static __device__ __forceinline__ void rs128z(float *d, const uint32_t *a, uint64_t db, int acc) { HF_RS128Z("bf16"); }
	static __device__ __forceinline__ void rs64z(float *d, const uint32_t *a, uint64_t db, int acc) { HF_RS64Z("bf16"); }
};
template <> struct ty<__half> : w16<__half> {
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc) { HF_SS("f16"); }
	static __device__ __forceinline__ void ss0(float *d, uint64_t da, uint64_t db) { HF_SS0("f16"); }
	static __device__ __forceinline__ void ss64_0(float *d, uint64_t da, uint64_t db) { HF_SS64_0("f16"); }
	static __device__ __forceinline__ void ss64(float *d, uint64_t da, uint64_t db, int acc) { HF_SS64("f16"); }
	static __device__ __forceinline__ void ss176(float *d, uint64_t da, uint64_t db, int acc) { HF_SS176("f16"); }
	static __device__ __forceinline__ void rs128(float *d, const uint32_t *a, uint64_t db) { HF_RS128("f16"); }
	static __device__ __forceinline__ void rs64(float *d, const uint32_t *a, uint64_t db) { HF_RS64("f16"); }
	static __device__ __forceinline__ void rs128z(float *d, const uint32_t *a, uint64_t db, int acc) { HF_RS128Z("f16"); }
	static __device__ __forceinline__ void rs64z(float *d, const uint32_t *a, uint64_t db, int acc) { HF_RS64Z("f16"); }
};
#undef HF_SS
#undef HF_SS0
#undef HF_SS64_0
#undef HF_SS64
#undef HF_SS176
#undef HF_RS128
#undef HF_RS64
#undef HF_RS128Z
#undef HF_RS64Z

/* ---- masks of partial tiles ---------------------------------------------- */

/* A thread holds, per row, the KT / 4 scores u = 2j + x of keys kb + 8j + x
 * (kb = tile start + 2 * (lane & 3)): the offsets grow with u, so the keys
 * of an interval are a run of bits, of a word of bits<KT>.  cnt(x) is
 * the number of offsets below x. */
template <int KT> struct bitw { typedef uint32_t T; };
template <> struct bitw<KW> { typedef uint64_t T; };
template <int KT> using bits = typename bitw<KT>::T;

template <int KT> static __device__ __forceinline__ int cnt(int x)
{
	return x <= 0 ? 0 : x >= KT ? KT / 4 : 2 * (x >> 3) + min(x & 7, 2);
}

template <typename B> static __device__ __forceinline__ B low(int n)
{
	return n >= (int)(8 * sizeof(B)) ? ~(B)0 : ((B)1 << n) - 1;
}

/* the scores with key in [a, b), both relative to kb */
template <int KT> static __device__ __forceinline__ bits<KT> span(int a, int b)
{
	return low<bits<KT>>(cnt<KT>(b)) & ~low<bits<KT>>(cnt<KT>(a));
}

/* Allowed scores of rows q[0], q[1] in the tile at k0: keys below sk that
 * one of the cuts allows (ncut == 0: a full tile at the ragged end).  A cut
 * allows, on one row, one interval of keys (plan_cut_allows). */
template <int KT>
static __device__ __forceinline__ void allowed(bits<KT> *ok, const plan_cut *cut, int ncut, const int *q,
    int kb, int sk)
{
	const bits<KT> edge = span<KT>(-kb, sk - kb);
	if (ncut == 0) {
		ok[0] = ok[1] = edge;
		return;
	}
	ok[0] = ok[1] = 0;
	for (int c = 0; c < ncut; c++) {
		const plan_cut P = cut[c];
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			if (q[rr] < P.q0 || q[rr] >= P.q1)
				continue;
			int lo = P.k0, hi = P.k1;
			if (P.kind == MASK_CAUSAL || P.kind == MASK_BICAUSAL)
				hi = min(hi, q[rr] + (P.k1 - P.q1) + 1);
			if (P.kind == MASK_INVCAUSAL || P.kind == MASK_BICAUSAL)
				lo = max(lo, q[rr] + (P.k0 - P.q0));
			ok[rr] |= span<KT>(lo - kb, hi - kb);
		}
	}
	ok[0] &= edge;
	ok[1] &= edge;
}

/* allowed() where each row allows one interval of keys (plan_intervals): two
 * compares a row, where the cuts take four and two shifts a cut; the
 * intervals stop at sk.  v: the rows' intervals, rows_iv()'s. */
template <int KT>
static __device__ __forceinline__ void allowed_iv(bits<KT> *ok, const int2 *v, int kb)
{
#pragma unroll
	for (int rr = 0; rr < 2; rr++)
		ok[rr] = span<KT>(v[rr].x - kb, v[rr].y - kb);
}

/* Rows qr's intervals, once a work item: loaded at each tile they came
 * after S's wait (the barriers' memory clobbers keep the compiler from
 * hoisting them), 1 % of fwdp's samples on full_document (ncu, round 36) */
static __device__ __forceinline__ void rows_iv(int2 *v, const args &a, const int *qr)
{
	if (a.iv != NULL) {
		v[0] = a.iv[qr[0]];
		v[1] = a.iv[qr[1]];
	}
}

/* The row's tiles in plan order. */
struct walk {
	const plan_ent *ent;
	int e, e1, t;
	plan_ent E;
	__device__ __forceinline__ walk(const plan_ent *en, int e0, int e_1) : ent(en), e(e0), e1(e_1) {
		if (e < e1) {
			E = ent[e];
			t = E.t0;
		}
	}
	__device__ __forceinline__ bool more(void) const { return e < e1; }
	__device__ __forceinline__ void next(void) {
		if (++t >= E.t1 && ++e < e1) {
			E = ent[e];
			t = E.t0;
		}
	}
};

/* ---- the kernel ------------------------------------------------------------ */

/* S = Q K^T for one consumer: HD/16 k-steps; each 64-column block of Q and K
 * is its own TMA box (128 bytes a row, Q's QS bytes apart; K's LB keys of
 * 128 bytes, which a half tile's KT = 64 keys lie in), a k-step 32 bytes
 * into it. */
template <typename T, int HD, int KT = BK, int QS = BQ * 128, int LB = KT, bool W0 = false>
static __device__ __forceinline__ void qk(float *s, uint32_t sq, uint32_t sk)
{
	const uint32_t q_d = dlo(sq, 16), k_d = dlo(sk, 16);
#pragma unroll
	for (int ks = 0; ks < HD / 16; ks++) {
		const uint32_t off = (ks & 3) * 32;
		const uint64_t da = dsc(q_d, (ks >> 2) * QS + off), db = dsc(k_d, (ks >> 2) * LB * 128 + off);
		if (W0 && ks == 0 && KT == 128)
			ty<T>::ss0(s, da, db);
		else if (W0 && ks == 0 && KT == 64)
			ty<T>::ss64_0(s, da, db);
		else if (KT == 128)
			ty<T>::ss(s, da, db, ks > 0);
		else if (KT == 64)
			ty<T>::ss64(s, da, db, ks > 0);
		else
			ty<T>::ss176(s, da, db, ks > 0);
	}
}

/* O += P V: KT/16 k-steps of 16 keys (2 KB of each V box); the HD columns
 * span HD/64 boxes of LB keys, LB * 128 bytes apart. */
template <typename T, int HD, int KT = BK, bool Z = false, int LB = KT>
static __device__ __forceinline__ void pv(float *o, const uint32_t (*p)[4], uint32_t sv, int acc = 1)
{
	const uint32_t v_d = dlo(sv, LB * 128);
#pragma unroll
	for (int kk = 0; kk < KT / 16; kk++) {
		const uint64_t db = dsc(v_d, kk * 16 * 128);
		if (Z && kk == 0 && HD == 128)
			ty<T>::rs128z(o, p[kk], db, acc);
		else if (Z && kk == 0)
			ty<T>::rs64z(o, p[kk], db, acc);
		else if (HD == 128)
			ty<T>::rs128(o, p[kk], db);
		else
			ty<T>::rs64(o, p[kk], db);
	}
}

/* Scores whose bit in ok (two a column pair, rows qr[0] and qr[1]) is
 * clear become -inf. */
template <int KT>
static __device__ __forceinline__ void kill_scores(float *s, const bits<KT> *ok)
{
#pragma unroll
	for (int j = 0; j < KT / 8; j++)
#pragma unroll
		for (int rr = 0; rr < 2; rr++)
#pragma unroll
			for (int x = 0; x < 2; x++)
				if (!((ok[rr] >> (2 * j + x)) & 1))
					s[4 * j + 2 * rr + x] = -INFINITY;
}

/* A row of a bitmask is four words laid out in the quads' order
 * (bitmasks()): thread c = lane & 3 of a quad finds its KT / 4 bits, in
 * allowed()'s order, as a run from bit c * KT / 4, and decodes nothing. */
template <int KT> static __device__ __forceinline__ uint32_t bm_word(const args &a, int32_t b, int row, int kq)
{
	return reinterpret_cast<const uint32_t *>(a.bm + (int64_t)b * BQ)[4 * row + ((kq / 2 * (KT / 4)) >> 5)];
}

template <int KT> static __device__ __forceinline__ bits<KT> bm_bits(uint32_t w, int kq)
{
	return (bits<KT>)(w >> ((kq / 2 * (KT / 4)) & 31)) & low<bits<KT>>(KT / 4);
}

/* This thread's words of the tile's bitmask, where it has one: fwd loads
 * them once the tile's GEMMs are issued, so that their trip to DRAM (the
 * bitmasks of random_eviction at 32K are 50 MB) runs beside S's GEMM
 * instead of before the softmax. */
template <int KT = BK>
static __device__ __forceinline__ void bm_rows(uint32_t *v, const args &a, const walk &w, const int *qr, int kq,
    int q0)
{
	if (KT <= BK && a.iv == NULL && w.E.ncut > MANY) {
		v[0] = bm_word<KT>(a, w.E.cut0, qr[0] - q0, kq);
		v[1] = bm_word<KT>(a, w.E.cut0, qr[1] - q0, kq);
	}
}

/* Partial tiles and the ragged last k-tile: scores no cut allows, or of
 * keys past sk, become -inf.  Rows past sq are never stored.  pre: the
 * words bm_rows() loaded, or NULL. */
template <int KT = BK>
static __device__ __forceinline__ void mask_tile(float *s, const args &a, const walk &w, const int *qr,
    const int2 *ivr, int kq, int q0, const uint32_t *pre = NULL)
{
	const int k0 = w.t * KT;
	if (w.E.ncut == 0 && k0 + KT <= a.sk)
		return;
	bits<KT> ok[2];
	if (a.iv != NULL) {
		allowed_iv<KT>(ok, ivr, k0 + kq);
	} else if (KT <= BK && w.E.ncut > MANY) {
		/* wide tiles run plans of at most MANY cuts a tile (init): dead
		 * there */
#pragma unroll
		for (int rr = 0; rr < 2; rr++)
			ok[rr] = bm_bits<KT>(pre != NULL ? pre[rr] : bm_word<KT>(a, w.E.cut0, qr[rr] - q0, kq), kq);
	} else {
		allowed<KT>(ok, a.cut + w.E.cut0, w.E.ncut, qr, k0 + kq, a.sk);
	}
	kill_scores<KT>(s, ok);
}

/* fwdp's walk with gathered stages: the plan's tiles are 64 keys, a stage
 * of 128 keys holds two of them, a and b, wherever they lie (two TMA boxes
 * each for K and V), so that S stays m64n128 while the plan skips 64-key
 * tiles.  tb < 0: the row had an odd number of tiles; the stage's second
 * half holds a's keys again, all masked. */
struct gwalk {
	walk w;
	bool has;
	int ta, tb;
	plan_ent A, B;
	__device__ __forceinline__ gwalk(const plan_ent *en, int e0, int e_1) : w(en, e0, e_1) { fill(); }
	__device__ __forceinline__ void fill(void) {
		has = w.more();
		if (!has)
			return;
		ta = w.t;
		A = w.E;
		w.next();
		tb = -1;
		if (w.more()) {
			tb = w.t;
			B = w.E;
			w.next();
		}
	}
	__device__ __forceinline__ bool more(void) const { return has; }
	__device__ __forceinline__ void next(void) { fill(); }
};

/* The allowed scores of rows qr of one 64-key half, tile t of entry E, as
 * 16 bits a row. */
static __device__ __forceinline__ void half_ok(uint32_t *ok, const args &a, const plan_ent &E, int t,
    const int *qr, const int2 *ivr, int kq, int q0)
{
	if (a.iv != NULL) {
		allowed_iv<64>(ok, ivr, t * 64 + kq);
	} else if (E.ncut > MANY) {
#pragma unroll
		for (int rr = 0; rr < 2; rr++)
			ok[rr] = bm_bits<64>(bm_word<64>(a, E.cut0, qr[rr] - q0, kq), kq);
	} else {
		allowed<64>(ok, a.cut + E.cut0, E.ncut, qr, t * 64 + kq, a.sk);
	}
}

template <int KT = BK>
static __device__ __forceinline__ void mask_tile(float *s, const args &a, const gwalk &g, const int *qr,
    const int2 *ivr, int kq, int q0)
{
	if (g.A.ncut == 0 && g.ta * 64 + 64 <= a.sk && g.tb >= 0 && g.B.ncut == 0 && g.tb * 64 + 64 <= a.sk)
		return;
	uint32_t ok[2], ob[2] = { 0, 0 };
	half_ok(ok, a, g.A, g.ta, qr, ivr, kq, q0);
	if (g.tb >= 0)
		half_ok(ob, a, g.B, g.tb, qr, ivr, kq, q0);
	ok[0] |= ob[0] << 16;
	ok[1] |= ob[1] << 16;
	kill_scores<BK>(s, ok);
}

/* Half tiles (fwdp<..., G = 2>, head pairs on 64 x 128 tiles): a tile
 * whose allowed keys all lie in one 64-key half h (1: keys 0-63, 2:
 * 64-127; 0: the whole tile), as at a window's or a document's edge, runs
 * that half alone: S as m64n64 and P V over 64 keys, the stage still
 * loaded whole.  That takes the plan's MMA work from the 64 x 128 tiles'
 * bound to the 64 x 64 tiles' (windows 0.890 to 0.942) without 64-key
 * stages.  init's halves() marks the entries; the producer puts a stage's
 * half in shared memory before its K barrier's arrive, so the consumers
 * have it with K instead of loading the entry ahead of S's GEMM. */
/* S of a tile, or (H) of its half h, as a group of its own from fence to
 * commit; then P V of a tile or its half h (warp-uniform), each arm a
 * group of its own.  H is the caller's: the whole run from S's issue to
 * the softmax is one straight copy per shape, since a branch on the half
 * anywhere between S's wgmma and its wait (S's own, or the softmax's) made
 * ptxas serialise every wgmma of the kernel (C7511); a branch inside one
 * group makes it fence again (C7519; the bwd's HALF met both, NOTES
 * round 22). */
template <typename T, int HD, int KT, bool H>
static __device__ __forceinline__ void qk_g(float *s, uint32_t sq, uint32_t sk, int h)
{
	wg_fence();
	if constexpr (H)
		qk<T, HD, 64, BQ * 128, 128, true>(s, sq, sk + (h - 1) * 64 * 128);
	else
		qk<T, HD, KT, BQ * 128, KT, true>(s, sq, sk);
	wg_commit();
}

template <typename T, int HD, int KT>
static __device__ __forceinline__ void pv_h(float *o, const uint32_t (*p)[4], uint32_t sv, int acc, int h)
{
	if (KT == 128 && h != 0) {
		wg_fence();
		pv<T, HD, 64, true, 128>(o, p, sv + (h - 1) * 64 * 128, acc);
		wg_commit();
	} else {
		wg_fence();
		pv<T, HD, KT, true>(o, p, sv, acc);
		wg_commit();
	}
}

/* mask_tile() of half h of a walk's tile: halves() marks no bitmask tile */
template <class W>
static __device__ __forceinline__ void mask_half(float *s, const args &a, const W &w, const int *qr,
    const int2 *ivr, int kq, int h)
{
	const int kb = w.t * BK + (h - 1) * 64 + kq;
	uint32_t ok[2];
	if (a.iv != NULL)
		allowed_iv<64>(ok, ivr, kb);
	else
		allowed<64>(ok, a.cut + w.E.cut0, w.E.ncut, qr, kb, a.sk);
	kill_scores<64>(s, ok);
}

/* q-tile t of qt rows: its first real row and how many real rows it has
 * (a tile cut by a gap, or the last one, has fewer). */
static __device__ __forceinline__ int2 real_rows(const args &a, int t, int qt)
{
	return a.qtile != NULL ? a.qtile[t] : make_int2(t * qt, min(qt, a.sq - t * qt));
}

/* The first key of a walk's tile (a gathered walk: of its two 64-key
 * tiles), kt a padded plan's k-tiles or NULL. */
template <int KT> static __device__ __forceinline__ int2 key0(const walk &w, const int2 *kt)
{
	return make_int2(kt != NULL ? kt[w.t].x : w.t * KT, 0);
}

template <int KT> static __device__ __forceinline__ int2 key0(const gwalk &w, const int2 *kt)
{
	const int tb = w.tb >= 0 ? w.tb : w.ta;
	return kt != NULL ? make_int2(kt[w.ta].x, kt[tb].x) : make_int2(w.ta * 64, tb * 64);
}

/* fwdp's walks: G 0 plain, 1 gathered, 2 plain with half tiles */
template <int G> struct wsel { typedef walk W; };
template <> struct wsel<1> { typedef gwalk W; };

/* Online softmax in the log2 domain: s becomes P, alpha the factor of the
 * old O and l.  The offset m moves only where a row's maximum passes it
 * by more than 2^LAZY (FlashAttention-4's lazy rescale): P then stays
 * under 2^LAZY, which neither fp32's l and O nor bf16/fp16's P mind, and
 * O's rescale, a multiply a register a tile, is skipped on every tile but
 * the few where some row's offset moved (rescale() below).  At hd 64
 * (lazy() false) the offset is the maximum, as before: there the test cost
 * 2-4 % (H100, bench/NOTES.md "round 29").  A row with nothing allowed so
 * far keeps m = -inf and offset 0: no inf - inf (LAZY's test on inf - inf
 * is a NaN, which fails it).  l stays this thread's partial sum (the quad
 * adds up at the end). */
static constexpr float LAZY = 8.f;

static constexpr __host__ __device__ bool lazy(int hd)
{
	return hd == 128;
}

template <int KT = BK, bool LZ = false>
static __device__ __forceinline__ void softmax(float *s, float *m, float *l, float *alpha, float sl)
{
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		float mx = m[rr];
#pragma unroll
		for (int j = 0; j < KT / 8; j++)
			mx = fmaxf(mx, fmaxf(s[4 * j + 2 * rr], s[4 * j + 2 * rr + 1]));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		float off;
		if (!LZ) {
			off = mx == -INFINITY ? 0.f : mx * sl;
			alpha[rr] = mx != m[rr] ? ex2(m[rr] * sl - off) : 1.f;
			m[rr] = mx;
		} else {
			if ((mx - m[rr]) * sl > LAZY) {
				alpha[rr] = ex2((m[rr] - mx) * sl);
				m[rr] = mx;
			} else {
				alpha[rr] = 1.f;
			}
			off = m[rr] == -INFINITY ? 0.f : m[rr] * sl;
		}
		float sum = 0;
#pragma unroll
		for (int j = 0; j < KT / 8; j++) {
			const float p0 = ex2(fmaf(s[4 * j + 2 * rr], sl, -off));
			const float p1 = ex2(fmaf(s[4 * j + 2 * rr + 1], sl, -off));
			s[4 * j + 2 * rr] = p0;
			s[4 * j + 2 * rr + 1] = p1;
			sum += p0 + p1;
		}
		l[rr] = l[rr] * alpha[rr] + sum;
	}
}

/* The accumulator of a 16-key slab is the A fragment of m64nNk16. */
template <typename T, int KT = BK> static __device__ __forceinline__ void to_p(uint32_t (*p)[4], const float *s)
{
#pragma unroll
	for (int kk = 0; kk < KT / 16; kk++) {
		p[kk][0] = ty<T>::pack(s[8 * kk], s[8 * kk + 1]);
		p[kk][1] = ty<T>::pack(s[8 * kk + 2], s[8 * kk + 3]);
		p[kk][2] = ty<T>::pack(s[8 * kk + 4], s[8 * kk + 5]);
		p[kk][3] = ty<T>::pack(s[8 * kk + 6], s[8 * kk + 7]);
	}
}

/* to_p() of a tile or its half h (half tiles) */
template <typename T, int KT> static __device__ __forceinline__ void to_p_h(uint32_t (*p)[4], const float *s, int h)
{
	if (KT == 128 && h != 0)
		to_p<T, 64>(p, s);
	else
		to_p<T, KT>(p, s);
}

/* Ping-pong: the consumers take turns to issue their GEMMs (named
 * barrier 1 + w is warpgroup w's turn), so that one's softmax runs while
 * the other's GEMMs keep the tensor cores busy. */
static __device__ __forceinline__ void named_arrive(int id)
{
	asm volatile("bar.arrive %0, 256;" :: "r"(id) : "memory");
}

static __device__ __forceinline__ void pp_sync(int cw)
{
	asm volatile("bar.sync %0, 256;" :: "r"(1 + cw) : "memory");
}

static __device__ __forceinline__ void pp_arrive(int cw)
{
	named_arrive(2 - cw);
}

/* A consumer's turn at the tensor cores once V's stage (bv, phase ph)
 * has come, O and P pinned first so that ptxas keeps them where the
 * wgmma that follows reads them. */
template <int NO, int NP, bool F = true>
static __device__ __forceinline__ void turn(uint32_t bv, uint32_t ph, float *o, uint32_t (*p)[4], int cw)
{
	bar_wait(bv, ph);
	pin<NO>(o);
	pin<NP>(p);
	pp_sync(cw);
	if (F)
		wg_fence();
}

/* O's rows rescaled as their offsets moved (thread's two rows: alpha),
 * where the offsets are lazy skipped by the warp where none of its rows'
 * did (softmax()). */
template <int HD> static __device__ __forceinline__ void rescale(float *o, const float *alpha)
{
	if (lazy(HD) && !__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
		return;
#pragma unroll
	for (int j = 0; j < HD / 8; j++) {
		o[4 * j] *= alpha[0];
		o[4 * j + 1] *= alpha[0];
		o[4 * j + 2] *= alpha[1];
		o[4 * j + 3] *= alpha[1];
	}
}

/* A row's l: each of the quad's four threads holds a part. */
static __device__ __forceinline__ float quad_sum(float x)
{
	x += __shfl_xor_sync(0xffffffffu, x, 1);
	return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* O through shared memory (this warpgroup's 64 rows of Q, whose last S is
 * done) and one TMA store, which clips the rows past sq: a thread's direct
 * stores are 4 bytes in 16 KB-strided rows, half a sector each, and hold
 * the CTA's exit on short rows.  The layout is Q's: 64-column boxes,
 * 128-byte rows, 16-byte chunks swizzled by the row's low 3 bits.  The
 * store is committed, not waited for: the caller waits (wait_group.read)
 * before the rows are written again or the CTA exits.  QS: the bytes
 * from one of Q's column boxes to the next. */
template <typename T, int HD, int QS = BQ * 128>
static __device__ __forceinline__ void epilogue(const float *o, const float *l, const float *m, int h, int qs, int nv,
    int b, uint32_t sQw, const args &a, const CUtensorMap *to, int cw, int ct)
{
	const int lane = ct & 31, warp = (ct >> 5) & 3;
	float *L = a.lse + ((int64_t)b * a.hq + h) * a.sq;
	float inv[2];
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		const float sum = quad_sum(l[rr]);
		const int rw = warp * 16 + (lane >> 2) + 8 * rr;
		inv[rr] = sum > 0 ? 1.f / sum : 0.f;
		if ((lane & 3) == 0 && rw < nv)
			L[qs + rw] = sum > 0 ? (m[rr] * a.sl + log2f(sum)) * LN2 : -INFINITY;
	}
	/* a stmatrix a pair of 16-byte chunks: lane t gives the address of
	 * row t & 7 of matrix t >> 3, which is (rows + 8 * (t >> 3 & 1),
	 * chunk j + (t >> 4)) of the accumulator's fragments; the chunk's
	 * swizzle (j ^ row) & 7 with j even is (j & 7) ^ y */
	const int y = ((lane >> 4) & 1) ^ (lane & 7);
	const uint32_t rb = sQw + (warp * 16 + (lane & 15)) * 128;
#pragma unroll
	for (int j = 0; j < HD / 8; j += 2) {
		uint32_t v[4];
#pragma unroll
		for (int x = 0; x < 4; x++)
			v[x] = ty<T>::pack(o[4 * (j + x / 2) + 2 * (x & 1)] * inv[x & 1],
			    o[4 * (j + x / 2) + 2 * (x & 1) + 1] * inv[x & 1]);
		const uint32_t ad = rb + (j >> 3) * QS + (((j & 7) ^ y) << 4);
		asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
		    :: "r"(ad), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]) : "memory");
	}
	if (nv < 64 && qs + nv < a.sq) {
		/* a tile cut by a gap: the rows past it are another tile's, which
		 * a TMA store would overwrite; 16 bytes a thread from the
		 * swizzled rows */
		asm volatile("bar.sync %0, 128;" :: "r"(3 + cw) : "memory");
		for (int x = ct & 127; x < nv * HD / 8; x += 128) {
			const int rw = x / (HD / 8), c = x % (HD / 8);
			uint4 v;
			asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
			    : "r"(sQw + (c >> 3) * QS + rw * 128 + (((c & 7) ^ (rw & 7)) << 4)) : "memory");
			*(uint4 *)((T *)a.o + (((int64_t)b * a.sq + qs + rw) * a.hq + h) * HD + c * 8) = v;
		}
		/* the Q buffer goes back once every thread has read it */
		asm volatile("bar.sync %0, 128;" :: "r"(3 + cw) : "memory");
		if ((ct & 127) == 0)
			asm volatile("cp.async.bulk.commit_group;" ::: "memory");
		return;
	}
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	asm volatile("bar.sync %0, 128;" :: "r"(3 + cw) : "memory");
	if ((ct & 127) == 0) {
#pragma unroll
		for (int c = 0; c < HD / 64; c++)
			asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];"
			    :: "l"((uint64_t)to), "r"(c * 64), "r"(h), "r"(qs), "r"(b),
			    "r"(sQw + c * QS) : "memory");
		asm volatile("cp.async.bulk.commit_group;" ::: "memory");
	}
}

/* A part of a split q-tile (split() below): O / l in fp32 and each row's
 * m * sl + log2 l, -inf where nothing was allowed, to its workspace slot
 * (BQ x HD, then BQ), which combine() merges. */
template <int HD>
static __device__ __forceinline__ void partial(const float *o, const float *l, const float *m, float *W, int cw,
    int ct, int kq, float sl)
{
	const int lane = ct & 31, warp = (ct >> 5) & 3;
#pragma unroll
	for (int rr = 0; rr < 2; rr++) {
		const float sum = quad_sum(l[rr]), inv = sum > 0 ? 1.f / sum : 0.f;
		const int rw = cw * 64 + warp * 16 + (lane >> 2) + 8 * rr;
#pragma unroll
		for (int j = 0; j < HD / 8; j++)
			*(float2 *)(W + rw * HD + 8 * j + kq) = make_float2(o[4 * j + 2 * rr] * inv,
			    o[4 * j + 2 * rr + 1] * inv);
		if ((lane & 3) == 0)
			W[BQ * HD + rw] = sum > 0 ? m[rr] * sl + log2f(sum) : -INFINITY;
	}
}

/* The parts of split q-tiles merged, as one walk over all of a q-tile's
 * k-tiles would have left O and the LSE (rows that no part allowed
 * anything: O = 0, LSE = -inf).  A CTA CR rows of a q-tile (tile: q-head,
 * first row, batch, rows), a thread 4 columns, so that the tail's few
 * q-tiles are read by many SMs. */
enum { CR = 8 };

template <typename T, int HD>
__global__ void __launch_bounds__(CR * HD / 4) combine(const float *ws, const int4 *tile, int np, T *o, float *lse,
    int sq, int hq)
{
	const int4 I = tile[blockIdx.x];
	const int SL = BQ * HD + BQ;
	const float *W = ws + (size_t)blockIdx.x * np * SL;
	const int rw = blockIdx.y * CR + threadIdx.x / (HD / 4), c = threadIdx.x % (HD / 4) * 4;
	if (rw < I.w) {
		float mx = -INFINITY, sw = 0;
		float4 acc = make_float4(0, 0, 0, 0);
		for (int p = 0; p < np; p++)
			mx = fmaxf(mx, W[p * SL + BQ * HD + rw]);
		for (int p = 0; p < np && mx > -INFINITY; p++) {
			const float w = exp2f(W[p * SL + BQ * HD + rw] - mx);
			const float4 v = *(const float4 *)(W + p * SL + rw * HD + c);
			sw += w;
			acc.x += w * v.x;
			acc.y += w * v.y;
			acc.z += w * v.z;
			acc.w += w * v.w;
		}
		const float inv = sw > 0 ? 1.f / sw : 0.f;
		*(uint2 *)(o + (((int64_t)I.z * sq + I.y + rw) * hq + I.x) * HD + c) =
		    make_uint2(ty<T>::pack(acc.x * inv, acc.y * inv), ty<T>::pack(acc.z * inv, acc.w * inv));
		if (c == 0)
			lse[((int64_t)I.z * hq + I.x) * sq + I.y + rw] = sw > 0 ? (mx + log2f(sw)) * LN2 : -INFINITY;
	}
}

/* A stage given back: by lane 0 of each consumer warp, to its own CTA's
 * barrier, or with CL == 2 to both CTAs' (either producer fills half of
 * both CTAs' stage). */
template <int CL> static __device__ __forceinline__ void release(uint32_t b, uint32_t peer)
{
	bar_arrive(b);
	if (CL == 2)
		bar_arrive_cl(b, peer);
}

/* Block i of a batch's grid, its first row's plan row rp (-1: the
 * mask's), and its slot in ws (-1: none): the q-heads of one kv-head
 * fastest, then q-tiles in plan order, then kv-heads, so that the CTAs on
 * the machine at a time share one kv-head's K and V (16 MB at 32K), which
 * then stays in L2 (heads fastest, they read all kv-heads' K and V: 128 MB
 * at 32K).  In the last batch, blocks from whole run the tail's parts. */
struct block {
	int h, qt, r, b, slot;
};

static __device__ __forceinline__ block block_of(const args &a, int gi, int b, int rp, int slot)
{
	block B;
	const int hh = gi % a.group, qi = gi / a.group % a.nqt;
	B.h = gi / (a.group * a.nqt) * a.group + hh;
	B.qt = a.order[qi];
	B.r = rp >= 0 ? rp : (B.h / a.mgroup) * a.nqt + B.qt;
	B.b = b;
	B.slot = slot;
	return B;
}

/* The loop's item j (< a.nitem): whole rows batch by batch, then the
 * tail's parts. */
static __device__ __forceinline__ block item_block(const args &a, int j)
{
	const int per = a.hq * a.nqt, full = (a.batch - 1) * per + a.whole;
	if (j < full)
		return block_of(a, j % per, j / per, -1, -1);
	const int4 tl = a.tail[j - full];
	return block_of(a, tl.x, a.batch - 1, tl.y, tl.z);
}

/* The Q tile of block N into L2, for the CTA that takes it a wave on
 * (which would otherwise read it from DRAM as it starts, with its whole
 * wave's: a CTA's start and end cost about 2 tiles at 8K, bench/NOTES.md,
 * round 24), in the NB boxes of rows that Q's tensor map holds. */
template <int HD, int NB>
static __device__ __forceinline__ void prefetch_q(const CUtensorMap *tq, const args &a, const block &N)
{
	const int n0 = real_rows(a, N.qt, BQ).x;
#pragma unroll
	for (int c = 0; c < HD / 64; c++)
#pragma unroll
		for (int x = 0; x < NB; x++)
			tma4_l2(tq, c * 64, N.h, n0 + x * (BQ / NB), N.b);
}

/* CL == 2: the CTA pairs of a cluster are two q-heads of one kv-head on the
 * same q-tile and mask row, so they walk the same k-tiles; each producer
 * loads half of every K and V tile (KT / 2 keys) into both CTAs, halving
 * what the SMs read from L2.  A stage is refilled once the consumers of
 * both CTAs gave it back (empty barriers count 16 warps).  The last S
 * tiles are never given back: no copy waits for them, and so every arrival
 * on the other CTA's barriers is waited for there before it can exit.
 *
 * P: the loop.  A CTA an SM takes blocks (items) one after another, from
 * a counter (CL 1) or a wave at a time (CL 2, the pair's items side by
 * side), with fwd's mainloop unchanged: a CTA's start and end cost
 * about 2 tiles at 8K (bench/NOTES.md, round 24).  The K/V ring runs on
 * across items.  Q has no second buffer (Q and three 128-key stages fill
 * shared memory), so each consumer's 64 rows of Q are a half with its own
 * barriers: the producer issues an item's first S tiles, then each half of
 * its Q as soon as that consumer's store of the item before has read it,
 * and the first consumer starts on the next item while the second still
 * finishes this one.  Two 176-key stages leave room for a third half: the
 * halves are then a ring, the t-th (t = 2 x item + consumer) in half t mod
 * 3, and the first consumer's next Q comes while it still runs this item
 * (it is loaded into the half the second consumer stored its item before
 * through; causal 8K +0.2 %, full level, round 26).  The producer
 * leaves each half's item in shared memory, published by the arrive on
 * its full barrier.  Warpgroup 2's last turn of an item opens warpgroup
 * 1's first of the next.  With CL 2 every stage is given back and both
 * CTAs meet at a cluster barrier before they exit. */
template <typename T, int HD, int CL, int KT, int P = 0>
__global__ void __launch_bounds__(NT, 1) fwd(const __grid_constant__ CUtensorMap tq,
    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
    const __grid_constant__ CUtensorMap to, const args a)
{
	typedef cfg<HD, KT, P> C;
	/* QS: P's halves are whole buffers, their column boxes 64 rows apart */
	constexpr int S = C::STAGES, NO = HD / 2, NQH = C::NQH, QS = P ? 64 * 128 : BQ * 128;
	/* the halves in use (LONGATTN_HOPPER_FWD=q2: two of three, for A/B) */
	const int nq = NQH > 2 ? a.nqh : 2;
	extern __shared__ unsigned char smraw[];
	const uint32_t base = (smaddr(smraw) + 1023) & ~1023u;
	const uint32_t sQ = base, sK = base + C::QA, sV = sK + S * C::KB;
	/* mbarriers: Q full, then per stage K full, V full, K empty, V empty;
	 * P: each Q half's full and empty, and its item */
	const uint32_t bQ = base + C::BAR, bK = bQ + 8, bV = bK + 8 * S, bEK = bV + 8 * S, bEV = bEK + 8 * S;
	const uint32_t bQF = bEV + 8 * S, bQE = bQF + 8 * NQH, sI = (bQE + 8 * NQH + 15) & ~15u;
	const int tid = threadIdx.x, wg = tid >> 7;
	block B = {};
	int e0 = 0, e1 = 0;
	if constexpr (!P) {
		int gi = blockIdx.x, rp = -1, slot = -1;
		if (blockIdx.z + 1 == gridDim.z && gi >= a.whole) {
			if (gi < a.hq * a.nqt)
				return;    /* the q-tiles whose parts run below */
			const int4 tl = a.tail[gi - a.hq * a.nqt];
			gi = tl.x;
			rp = tl.y;
			slot = tl.z;
		} else if (gi >= a.hq * a.nqt) {
			return;
		}
		B = block_of(a, gi, blockIdx.z, rp, slot);
		e0 = a.row[B.r];
		e1 = a.row[B.r + 1];
	}

	if (tid == 0) {
		bar_init(bQ, 1);
		for (int i = 0; i < S; i++) {
			bar_init(bK + 8 * i, 1);
			bar_init(bV + 8 * i, 1);
			bar_init(bEK + 8 * i, 8 * CL); /* lane 0 of each consumer warp */
			bar_init(bEV + 8 * i, 8 * CL);
		}
		for (int i = 0; P && i < NQH; i++) {
			bar_init(bQF + 8 * i, 1);
			bar_init(bQE + 8 * i, 4);      /* lane 0 of each warp of a consumer */
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	if (CL == 1)
		__syncthreads();
	else
		cl_sync();

	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
		/* this CTA's rows of a tile, and their offset in a stage */
		const int rk = CL == 1 ? 0 : (int)cl_rank() * (KT / 2);
		const uint32_t ro = rk * 128;
		/* tile it (of the ring) of a walk, at key kp, kv-head hk */
		auto load = [&](int it, int kp, int hk, int b) {
			const int st = it % S;
			const uint32_t ph = (it / S) & 1;
			bar_wait(bEK + 8 * st, ph ^ 1);
			bar_expect(bK + 8 * st, C::KB);
#pragma unroll
			for (int c = 0; c < HD / 64; c++)
				if (CL == 1)
					tma4(sK + st * C::KB + c * KT * 128, &tk, c * 64, hk, kp, b, bK + 8 * st);
				else
					tma4mc(sK + st * C::KB + c * KT * 128 + ro, &tk, c * 64, hk, kp + rk, b,
					    bK + 8 * st, 3);
			bar_wait(bEV + 8 * st, ph ^ 1);
			bar_expect(bV + 8 * st, C::KB);
#pragma unroll
			for (int c = 0; c < HD / 64; c++)
				if (CL == 1)
					tma4(sV + st * C::KB + c * KT * 128, &tv, c * 64, hk, kp, b, bV + 8 * st);
				else
					tma4mc(sV + st * C::KB + c * KT * 128 + ro, &tv, c * 64, hk, kp + rk, b,
					    bV + 8 * st, 3);
		};
		if constexpr (P) {
			if (tid == 0) {
				/* it: the ring's tiles, t: Q's halves, so far */
				int it = 0, k = 0, t = 0;
				for (;; k++) {
					const int j = CL == 1 ? (int)(atomicAdd(a.next, 1u) - a.base) :
					    k * (int)gridDim.x + (int)(k & 1 ? gridDim.x - 2 - (blockIdx.x & ~1u) +
					    (blockIdx.x & 1) : blockIdx.x);
					if (j >= a.nitem)
						break;
					const block I = item_block(a, j);
					const int e0 = a.row[I.r], e1 = a.row[I.r + 1], hk = I.h / a.group;
					const int q0 = real_rows(a, I.qt, BQ).x;
					if (const int g = j + (int)gridDim.x; a.ahead > 0 && g < a.nitem)
						prefetch_q<HD, 2>(&tq, a, item_block(a, g));
					walk w(a.ent, e0, e1);
					for (int n = 0; n < S && w.more(); n++, w.next(), it++)
						load(it, key0<KT>(w, a.ktile).x, hk, I.b);
					for (int x = 0; x < 2; x++, t++) {
						const int hs = t % nq;
						const uint32_t full = bQF + 8 * hs, si = sI + 32 * hs;
						bar_wait(bQE + 8 * hs, ((t / nq) & 1) ^ 1);
						asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(si), "r"(I.h),
						    "r"(I.qt), "r"(I.b), "r"(I.slot) : "memory");
						asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(si + 16), "r"(e0),
						    "r"(e1) : "memory");
						if (e0 == e1) {
							bar_arrive(full);
							continue;
						}
						bar_expect(full, C::QB / 2);
#pragma unroll
						for (int c = 0; c < HD / 64; c++)
							tma4(sQ + hs * (C::QB / 2) + c * QS, &tq, c * 64, I.h, q0 + 64 * x, I.b,
							    full);
					}
					for (; w.more(); w.next(), it++)
						load(it, key0<KT>(w, a.ktile).x, hk, I.b);
				}
				for (int x = 0; x < 2; x++, t++) {
					const int hs = t % nq;
					bar_wait(bQE + 8 * hs, ((t / nq) & 1) ^ 1);
					asm volatile("st.shared.u32 [%0], %1;" :: "r"(sI + 32 * hs), "r"(-1) : "memory");
					bar_arrive(bQF + 8 * hs);
				}
			}
			if (CL == 2) {
				__syncwarp();
				cl_sync();
			}
			return;
		} else {
			if (tid != 0)
				return;
			const int hk = B.h / a.group;
			/* no copy may be left in flight when the consumers return */
			if (e0 == e1)
				return;
			bar_expect(bQ, C::QB);
#pragma unroll
			for (int c = 0; c < HD / 64; c++)
				tma4(sQ + c * BQ * 128, &tq, c * 64, B.h, real_rows(a, B.qt, BQ).x, B.b, bQ);
			if (const int g = blockIdx.x + a.ahead; a.ahead > 0 &&
			    g < (blockIdx.z + 1 == gridDim.z ? a.whole : a.hq * a.nqt))
				prefetch_q<HD, 1>(&tq, a, block_of(a, g, B.b, -1, -1));
			int it = 0;
			for (walk w(a.ent, e0, e1); w.more(); w.next(), it++)
				load(it, key0<KT>(w, a.ktile).x, hk, B.b);
			return;
		}
	}

	asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
	const int ct = tid - 128, cw = warp_uniform(ct >> 7), lane = tid & 31, warp = (ct >> 5) & 3;
	const int kq = 2 * (lane & 3);
	uint32_t sQw = sQ + cw * 64 * 128;
	const uint32_t peer = CL == 2 ? cl_rank() ^ 1 : 0;
	/* it: the ring's tiles so far; t, hs: this consumer's Q half, its
	 * count among Q's halves and its buffer (P); any: some item had a
	 * tile (P) */
	int it = 0, t = cw, hs = 0;
	bool any = false;
	for (;; t += 2) {
		if constexpr (P) {
			hs = t % nq;
			sQw = sQ + hs * (C::QB / 2);
			const uint32_t si = sI + 32 * hs;
			bar_wait(bQF + 8 * hs, (t / nq) & 1);
			asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(B.h), "=r"(B.qt), "=r"(B.b),
			    "=r"(B.slot) : "r"(si) : "memory");
			if (B.h < 0)
				break;
			asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(e0), "=r"(e1) : "r"(si + 16) : "memory");
		}
		const int q0 = B.qt * BQ;
		/* this thread's two rows and its first key offset in a tile */
		int qr[2];
		qr[0] = q0 + cw * 64 + warp * 16 + (lane >> 2);
		qr[1] = qr[0] + 8;
		int2 ivr[2];
		rows_iv(ivr, a, qr);

		float o[NO], s[KT / 2], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0, 0 };
		uint32_t p[KT / 16][4];
#pragma unroll
		for (int i = 0; i < NO; i++)
			o[i] = 0;

		/* The first tile alone, so that every wgmma the loop issues is
		 * waited for on every path (ptxas serialises them otherwise).  K
		 * stages are given back as soon as S is done, V stages once O +=
		 * P V is: the producer then fetches K two tiles ahead. */
		walk w(a.ent, e0, e1);
		const int it0 = it;
		int pst = 0, nrel = 0;
		uint32_t pph = 0;
		if (CL == 2 && !P) {
			for (int e = e0; e < e1; e++)
				nrel += a.ent[e].t1 - a.ent[e].t0;
			nrel -= S;
		}
		/* tile it's S is in: its K stage back, then the mask and the
		 * softmax (alpha: O's rescale) */
		uint32_t bv[2];
		auto scored = [&](int st, float *alpha) {
			pin<KT / 2>(s);
			if (lane == 0 && (CL == 1 || P || it < nrel))
				release<CL>(bEK + 8 * st, peer);
			mask_tile<KT>(s, a, w, qr, ivr, kq, q0, bv);
			softmax<KT, lazy(HD)>(s, m, l, alpha, a.sl);
		};
		if (w.more()) {
			const int st = it % S;
			const uint32_t ph = (it / S) & 1;
			if (cw == 1 && !any)
				named_arrive(1);
			if (!P)
				bar_wait(bQ, 0);
			bar_wait(bK + 8 * st, ph);
			pp_sync(cw);
			wg_fence();
			qk<T, HD, KT, QS>(s, sQw, sK + st * C::KB);
			wg_commit();
			pp_arrive(cw);
			bm_rows<KT>(bv, a, w, qr, kq, q0);
			wg_wait<0>();
			float alpha[2];
			scored(st, alpha);
			to_p<T, KT>(p, s);
			w.next();
			pst = st;
			pph = ph;
			it++;
		}
		for (; w.more(); w.next(), it++) {
			const int st = it % S;
			const uint32_t ph = (it / S) & 1;
			bar_wait(bK + 8 * st, ph);
			turn<NO, KT / 16>(bV + 8 * pst, pph, o, p, cw);
			qk<T, HD, KT, QS>(s, sQw, sK + st * C::KB);
			wg_commit();
			pv<T, HD, KT>(o, p, sV + pst * C::KB);
			wg_commit();
			pp_arrive(cw);
			bm_rows<KT>(bv, a, w, qr, kq, q0);
			wg_wait<1>();
			float alpha[2];
			scored(st, alpha);
			wg_wait<0>();
			pin<NO>(o);
			pin<KT / 16>(p);
			if (lane == 0 && (CL == 1 || P || it - 1 < nrel))
				release<CL>(bEV + 8 * pst, peer);
			rescale<HD>(o, alpha);
			to_p<T, KT>(p, s);
			pst = st;
			pph = ph;
		}
		if (it > it0) {
			turn<NO, KT / 16>(bV + 8 * pst, pph, o, p, cw);
			pv<T, HD, KT>(o, p, sV + pst * C::KB);
			wg_commit();
			/* the last turn: nobody waits for warpgroup 2's, but the
			 * next item's first */
			if (cw == 0 || P)
				pp_arrive(cw);
			wg_wait<0>();
			pin<NO>(o);
			if (lane == 0 && (CL == 1 || P))
				release<CL>(bEV + 8 * pst, peer);
			any = true;
		}

		if (B.slot >= 0) {
			partial<HD>(o, l, m, a.ws + (size_t)B.slot * (BQ * HD + BQ), cw, ct, kq, a.sl);
			if (!P)
				return;
		} else {
			const int2 R = real_rows(a, B.qt, BQ);
			epilogue<T, HD, QS>(o, l, m, B.h, R.x + cw * 64, R.y - cw * 64, B.b, sQw, a, &to, cw, ct);
		}
		if ((ct & 127) == 0)
			/* shared memory must stay until the copy has read it */
			asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
		if (!P)
			return;
		/* Q's half may take the next item's */
		asm volatile("bar.sync %0, 128;" :: "r"(3 + cw) : "memory");
		if (lane == 0)
			bar_arrive(bQE + 8 * hs);
	}
	/* warpgroup 2's last arrive, which no item's first turn took */
	if (cw == 0 && any)
		pp_sync(cw);
	if (CL == 2)
		cl_sync();
}


/* ---- persistent CTAs, one stream of tiles across items ------------------- */

/* fwdp: one CTA an SM, taking items (q-head, q-tile, batch) in the grid
 * order above (rows with no tile left out) from a counter, and the tiles
 * of its items one stream: the first S of an item is issued with the last
 * P V of the one before, and that item's epilogue runs under the next
 * one's GEMMs (the other consumer's turn), so a row of a few tiles no
 * longer pays the pipeline's fill and drain, nor a CTA's start.  Q has
 * three buffers: O leaves through its item's Q buffer, which goes back to
 * the producer once the TMA store has read it, a tile or more later, and
 * the next item's Q is loaded while this one runs (with two, an item of
 * one tile would wait for its Q).  Shared memory: 3 Q + STAGES x (K, V),
 * 225 KB at hd 128 with two stages.
 *
 * PR == 1, head pairs: an item is (q-heads h and h + 1 of one kv-head and
 * one mask head, a q-tile of 64 rows), consumer w taking head h + w, so
 * that the plan's q-tiles are 64 rows (less of a partial tile is wasted on
 * documents and 64-token block masks) while both consumers still read the
 * same K and V tiles: the bytes a FLOP stay those of 128-row tiles. */
/* One 128-byte column box of a stage: KT keys from key kp, or (G) the two
 * 64-key halves of a gathered stage. */
template <int G, int KT>
static __device__ __forceinline__ void copy(uint32_t dst, const CUtensorMap *m, int c0, int hk, const walk &, int2 kp,
    int b, uint32_t bar)
{
	tma4(dst, m, c0, hk, kp.x, b, bar);
}

template <int G, int KT>
static __device__ __forceinline__ void copy(uint32_t dst, const CUtensorMap *m, int c0, int hk, const gwalk &, int2 kp,
    int b, uint32_t bar)
{
	tma4(dst, m, c0, hk, kp.x, b, bar);
	tma4(dst + 64 * 128, m, c0, hk, kp.y, b, bar);
}

template <int HD, int KT> struct pcfg {
	enum {
		STAGES = HD == 128 ? (KT == 64 ? 4 : 2) : 3,
		NQ = 3,
		QB = BQ * HD * 2,
		KB = KT * HD * 2,
		BAR = NQ * QB + 2 * STAGES * KB,
		/* the barriers, then per Q buffer its item (IB bytes, 16-byte
		 * aligned), then per stage its half (G 2) */
		IB = 32,
		SMEM = BAR + 8 * (2 * NQ + 4 * STAGES) + 16 + IB * NQ + 4 * STAGES + 1024,
	};
};

/* The half of a walk's tile (half tiles), from init's marks; a gathered
 * walk has none. */
static __device__ __forceinline__ int ent_half(const args &a, const walk &w)
{
	return a.half != NULL ? a.half[w.e] : 0;
}

static __device__ __forceinline__ int ent_half(const args &, const gwalk &)
{
	return 0;
}

/* f(std::true_type) for a half tile (h != 0 under HV), else
 * f(std::false_type): one straight copy of f per shape of S */
template <bool HV, class F> static __device__ __forceinline__ void by_half(int h, F &&f)
{
	if constexpr (HV) {
		if (h != 0)
			f(std::true_type());
		else
			f(std::false_type());
	} else {
		f(std::false_type());
	}
}

/* A stage's half (half tiles), as the producer left it at sh. */
static __device__ __forceinline__ int half_of(uint32_t sh)
{
	int h;
	asm volatile("ld.shared.u32 %0, [%1];" : "=r"(h) : "r"(sh) : "memory");
	return h;
}

/* fwdp's item in a Q buffer's slot at si, as the producer left it: its
 * index (returned, -1 for none: I and e then stay), the item and its plan
 * row's entries [e.x, e.y). */
static __device__ __forceinline__ int item_of(uint32_t si, int4 &I, int2 &e)
{
	int i;
	asm volatile("ld.shared.u32 %0, [%1];" : "=r"(i) : "r"(si) : "memory");
	if (i < 0)
		return i;
	asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(e.x), "=r"(e.y) : "r"(si + 8) : "memory");
	asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(I.x), "=r"(I.y), "=r"(I.z), "=r"(I.w)
	    : "r"(si + 16) : "memory");
	return i;
}

template <typename T, int HD, int PR, int KT, int G>
__global__ void __launch_bounds__(NT, 1) fwdp(const __grid_constant__ CUtensorMap tq,
    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
    const __grid_constant__ CUtensorMap to, const args a)
{
	typedef pcfg<HD, KT> C;
	/* QT: an item's q-rows */
	constexpr int S = C::STAGES, NO = HD / 2, QT = PR ? 64 : BQ;
	typedef typename wsel<G>::W W;
	extern __shared__ unsigned char smraw[];
	const uint32_t base = (smaddr(smraw) + 1023) & ~1023u;
	const uint32_t sQ = base, sK = base + C::NQ * C::QB, sV = sK + S * C::KB;
	/* mbarriers: Q full x NQ, Q empty x NQ, then per stage K full, V full,
	 * K empty, V empty */
	const uint32_t bQ = base + C::BAR, bQE = bQ + 8 * C::NQ, bK = bQE + 8 * C::NQ, bV = bK + 8 * S,
	    bEK = bV + 8 * S, bEV = bEK + 8 * S, sI = (bEV + 8 * S + 15) & ~15u, sH = sI + C::IB * C::NQ;
	const int tid = threadIdx.x, wg = tid >> 7;
	constexpr bool HV = G == 2;

	if (tid == 0) {
		for (int i = 0; i < C::NQ; i++) {
			bar_init(bQ + 8 * i, 1);
			bar_init(bQE + 8 * i, 2);      /* the storing thread of each consumer */
		}
		for (int i = 0; i < S; i++) {
			bar_init(bK + 8 * i, 1);
			bar_init(bV + 8 * i, 1);
			bar_init(bEK + 8 * i, 8);
			bar_init(bEV + 8 * i, 8);
		}
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	__syncthreads();

	if (wg == 0) {
		asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
		if (tid != 0)
			return;
		/* Each CTA takes items until the counter passes nitem: a launch
		 * takes nitem + gridDim.x values from it (the host's base). The
		 * item goes with its Q buffer (index, -1: no more; the bounds of
		 * its plan row's entries; the item), published by the arrive on the
		 * buffer's full barrier, so that the consumers meet the next item
		 * in shared memory, not at the end of three dependent loads from
		 * L2 (item, row, entry). */
		int it = 0;
		for (int k = 0;; k++) {
			const int qb = k % C::NQ;
			bar_wait(bQE + 8 * qb, ((k / C::NQ) & 1) ^ 1);
			const unsigned n = atomicAdd(a.next, 1u) - a.base;
			const int i = n < (unsigned)a.nitem ? (int)n : -1;
			const uint32_t si = sI + C::IB * qb;
			asm volatile("st.shared.u32 [%0], %1;" :: "r"(si), "r"(i) : "memory");
			if (i < 0) {
				bar_arrive(bQ + 8 * qb);
				break;
			}
			const int4 I = a.item[i];
			const int e0 = a.row[I.w], e1 = a.row[I.w + 1];
			asm volatile("st.shared.v2.u32 [%0], {%1, %2};" :: "r"(si + 8), "r"(e0), "r"(e1) : "memory");
			asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(si + 16), "r"(I.x), "r"(I.y), "r"(I.z),
			    "r"(I.w) : "memory");
			const int hk = I.x / a.group, q0 = real_rows(a, I.y, QT).x;
			bar_expect(bQ + 8 * qb, C::QB);
#pragma unroll
			for (int c = 0; c < HD / 64; c++)
#pragma unroll
				for (int x = 0; x < 1 + PR; x++)
					tma4(sQ + qb * C::QB + c * BQ * 128 + x * 64 * 128, &tq, c * 64, I.x + x, q0,
					    I.z, bQ + 8 * qb);
			for (W w(a.ent, e0, e1); w.more(); w.next(), it++) {
				const int st = it % S;
				const int2 kp = key0<KT>(w, a.ktile);
				const uint32_t ph = (it / S) & 1;
				/* loaded before the wait, which hides it */
				const int h = HV ? ent_half(a, w) : 0;
				bar_wait(bEK + 8 * st, ph ^ 1);
				if (HV)
					asm volatile("st.shared.u32 [%0], %1;" :: "r"(sH + 4 * st), "r"(h) : "memory");
				bar_expect(bK + 8 * st, C::KB);
#pragma unroll
				for (int c = 0; c < HD / 64; c++)
					copy<G, KT>(sK + st * C::KB + c * KT * 128, &tk, c * 64, hk, w, kp, I.z, bK + 8 * st);
				bar_wait(bEV + 8 * st, ph ^ 1);
				bar_expect(bV + 8 * st, C::KB);
#pragma unroll
				for (int c = 0; c < HD / 64; c++)
					copy<G, KT>(sV + st * C::KB + c * KT * 128, &tv, c * 64, hk, w, kp, I.z, bV + 8 * st);
			}
		}
		return;
	}

	asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
	const int ct = tid - 128, cw = warp_uniform(ct >> 7), lane = tid & 31, warp = (ct >> 5) & 3;
	const int rw0 = (PR ? 0 : cw * 64) + warp * 16 + (lane >> 2), kq = 2 * (lane & 3);
	/* this consumer's q-head and first row in an item */
	const int hw = PR ? cw : 0, rs = PR ? 0 : cw * 64;
	const bool storer = (ct & 127) == 0;
	float o[NO], s[KT / 2], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0, 0 }, pm[2], pl[2], alpha[2];
	uint32_t p[KT / 16][4];
#pragma unroll
	for (int i = 0; i < NO; i++)
		o[i] = 0;

	int i, k = 0, kb = 0;      /* kb = k % NQ */
	int4 I;
	int2 ee;
	bar_wait(bQ, 0);
	if ((i = item_of(sI, I, ee)) < 0)
		return;
	int4 P = I;
	int qr[2];
	qr[0] = I.y * QT + rw0;
	qr[1] = qr[0] + 8;
	int2 ivr[2];
	rows_iv(ivr, a, qr);
	W w(a.ent, ee.x, ee.y);
	int it = 0, pst = 0, pend = -1;   /* pend: the Q buffer of a store not yet waited for */
	uint32_t pph = 0;
	bool nb = false;
	int acc = 1;                      /* 0: the P V to come is its item's first */

	/* the stream's first tile alone */
	if (cw == 1)
		named_arrive(1);
	bar_wait(bK, 0);
	int hn = HV ? warp_uniform(half_of(sH)) : 0, hp;   /* the halves of this tile and the one before */
	pp_sync(cw);
	auto first = [&](auto half) {
		constexpr bool H = decltype(half)::value;
		qk_g<T, HD, KT, H>(s, sQ + cw * 64 * 128, sK, hn);
		pp_arrive(cw);
		wg_wait<0>();
		pin<H ? 32 : KT / 2>(s);
		if (lane == 0)
			bar_arrive(bEK);
		if constexpr (H)
			mask_half(s, a, w, qr, ivr, kq, hn);
		else
			mask_tile<KT>(s, a, w, qr, ivr, kq, I.y * QT);
		softmax<H ? 64 : KT, lazy(HD)>(s, m, l, alpha, a.sl);
		to_p<T, H ? 64 : KT>(p, s);
	};
	by_half<HV>(hn, first);
	hp = hn;
	it = 1;
	for (;;) {
		/* the next tile of the stream: the item's, or the next item's first */
		w.next();
		nb = false;
		if (!w.more()) {
			k++;
			kb = kb + 1 == C::NQ ? 0 : kb + 1;
			bar_wait(bQ + 8 * kb, (k / C::NQ) & 1);
			P = I;
			if ((i = item_of(sI + C::IB * kb, I, ee)) < 0) {
				k--;
				kb = kb == 0 ? C::NQ - 1 : kb - 1;
				break;
			}
			qr[0] = I.y * QT + rw0;
			qr[1] = qr[0] + 8;
			rows_iv(ivr, a, qr);
			w = W(a.ent, ee.x, ee.y);
			nb = true;
		}
		/* the store of the item before has read its Q buffer: give it back
		 * before waiting on anything (the producer may need it for the
		 * next Q) */
		if (storer && pend >= 0) {
			asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
			bar_arrive(bQE + 8 * pend);
			pend = -1;
		}
		const int st = it % S;
		const uint32_t ph = (it / S) & 1;
		bar_wait(bK + 8 * st, ph);
		if (HV)
			hn = warp_uniform(half_of(sH + 4 * st));
		/* from the GEMMs' issue to their wait, one straight copy per
		 * shape of S (qk_g) */
		auto step = [&](auto half) {
			constexpr bool H = decltype(half)::value;
			if constexpr (HV) {
				turn<NO, KT / 16, false>(bV + 8 * pst, pph, o, p, cw);
				qk_g<T, HD, KT, H>(s, sQ + kb * C::QB + cw * 64 * 128, sK + st * C::KB, hn);
				pv_h<T, HD, KT>(o, p, sV + pst * C::KB, acc, hp);
			} else {
				turn<NO, KT / 16>(bV + 8 * pst, pph, o, p, cw);
				qk<T, HD, KT>(s, sQ + kb * C::QB + cw * 64 * 128, sK + st * C::KB);
				wg_commit();
				pv<T, HD, KT, true>(o, p, sV + pst * C::KB, acc);
				wg_commit();
			}
			pp_arrive(cw);
			wg_wait<1>();
			pin<H ? 32 : KT / 2>(s);
			if (lane == 0)
				bar_arrive(bEK + 8 * st);
			if constexpr (H)
				mask_half(s, a, w, qr, ivr, kq, hn);
			else
				mask_tile<KT>(s, a, w, qr, ivr, kq, I.y * QT);
			if (nb) {
				pm[0] = m[0];
				pm[1] = m[1];
				pl[0] = l[0];
				pl[1] = l[1];
				m[0] = m[1] = -INFINITY;
				l[0] = l[1] = 0;
			}
			softmax<H ? 64 : KT, lazy(HD)>(s, m, l, alpha, a.sl);
			wg_wait<0>();
			pin<NO>(o);
			pin<KT / 16>(p);
		};
		by_half<HV>(hn, step);
		if (lane == 0)
			bar_arrive(bEV + 8 * pst);
		if (nb) {
			const int pb = kb == 0 ? C::NQ - 1 : kb - 1;
			const int2 R = real_rows(a, P.y, QT);
			epilogue<T, HD>(o, pl, pm, P.x + hw, R.x + rs, R.y - rs, P.z, sQ + pb * C::QB + cw * 64 * 128, a,
			    &to, cw, ct);
			pend = pb;
		}
		/* a new item's O starts at its first P V (acc 0), not from 64
		 * multiplies by 0 */
		acc = !nb;
		if (!nb)
			rescale<HD>(o, alpha);
		to_p_h<T, KT>(p, s, hn);
		hp = hn;
		pst = st;
		pph = ph;
		it++;
	}
	if constexpr (HV) {
		turn<NO, KT / 16, false>(bV + 8 * pst, pph, o, p, cw);
		pv_h<T, HD, KT>(o, p, sV + pst * C::KB, acc, hp);
	} else {
		turn<NO, KT / 16>(bV + 8 * pst, pph, o, p, cw);
		pv<T, HD, KT, true>(o, p, sV + pst * C::KB, acc);
		wg_commit();
	}
	/* the last turn: nobody waits for warpgroup 2's */
	if (cw == 0)
		pp_arrive(cw);
	wg_wait<0>();
	pin<NO>(o);
	const int2 R = real_rows(a, I.y, QT);
	epilogue<T, HD>(o, l, m, I.x + hw, R.x + rs, R.y - rs, I.z, sQ + kb * C::QB + cw * 64 * 128, a, &to, cw, ct);
	if (storer)
		asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* Rows with no tile: O = 0, LSE = -inf, a CTA an item of qt rows and nh
 * q-heads. */
template <typename T, int HD>
__global__ void fill_empty(const int4 *item, T *o, float *lse, const args a, int qt, int nh)
{
	const int4 I = item[blockIdx.x];
	const int2 R = real_rows(a, I.y, qt);
	const int sq = a.sq, hq = a.hq;
	for (int x = threadIdx.x; x < nh * qt * HD / 8; x += blockDim.x) {
		const int i = x / (HD / 8) % qt, h = I.x + x / (qt * HD / 8);
		if (i < R.y)
			*(uint4 *)(o + (((int64_t)I.z * sq + R.x + i) * hq + h) * HD + x % (HD / 8) * 8) =
			    make_uint4(0, 0, 0, 0);
	}
	for (int x = threadIdx.x; x < nh * qt; x += blockDim.x)
		if (x % qt < R.y)
			lse[((int64_t)I.z * hq + I.x + x / qt) * sq + R.x + x % qt] = -INFINITY;
}

/* ---- host ------------------------------------------------------------------- */

struct state {
	struct attn_shape s;
	int mheads, nqt;
	int cl;                    /* CTAs a cluster: 1, or 2 (K/V multicast) */
	int pers;                  /* fwdp: persistent CTAs over items */
	int pair;                  /* fwdp's items are head pairs of 64 rows */
	int bk;                    /* keys a k-tile: 128, or 64 (fwdp pairs) */
	int gather;                /* fwdp pairs: 64-key tiles two a stage */
	int nitem, nempty, nsm;
	int4 *item, *empty;        /* fwdp's items, and the rows with no tile */
	unsigned *next, launches;  /* fwdp's item counter, never reset */
	int32_t *row, *order;
	plan_ent *ent;
	plan_cut *cut;
	uint4 *bm;
	int2 *iv;                  /* upload_intervals(), or NULL */
	uint8_t *half;             /* halves(), or NULL */
	int2 *qtile, *ktile;       /* a padded plan's tiles (args), or NULL */
	int skv;                   /* a padded plan's sk */
	int ntail, np;             /* fwd's split tail: q-tiles, parts each */
	int held, ahead;           /* fwd: CTAs the machine holds; args' ahead */
	int loop;                  /* fwd's loop (P); 2: on 6 CTAs (checks) */
	int nqh;                   /* args' nqh */
	int4 *tail, *ttile;        /* args' tail; combine()'s tiles */
	float *ws;                 /* the parts' slots */
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
	if ((s->sq + BQ - 1) / BQ * (int64_t)s->hq > INT32_MAX || s->batch > 65535)
		return "grid too large";
	return NULL;
}

static void fini(void *st)
{
	struct state *f = (struct state *)st;
	if (f == NULL)
		return;
	dev_free(f->row);
	dev_free(f->order);
	dev_free(f->ent);
	dev_free(f->cut);
	dev_free(f->bm);
	dev_free(f->iv);
	dev_free(f->half);
	dev_free(f->item);
	dev_free(f->empty);
	dev_free(f->next);
	dev_free(f->qtile);
	dev_free(f->ktile);
	dev_free(f->tail);
	dev_free(f->ttile);
	dev_free(f->ws);
	free(f);
}

/* fwdp's items in the grid's order (batch, kv-head, q-tile heaviest
 * first, q-head; with pairs every other q-head), the rows with no tile
 * apart. */
static int items(struct state *f, const struct plan *p, const int32_t *ord)
{
	const struct attn_shape *s = &f->s;
	const int n = p->nqt, group = s->hq / s->hkv, mgroup = s->hq / f->mheads;
	const int64_t tot = (int64_t)s->batch * s->hq * n;
	int4 *it = (int4 *)calloc(tot ? tot : 1, sizeof *it), *em = (int4 *)calloc(tot ? tot : 1, sizeof *em);
	int ni = 0, ne = 0, rc = KERN_ERR;

	if (it != NULL && em != NULL) {
		for (int b = 0; b < s->batch; b++)
			for (int hk = 0; hk < s->hkv; hk++)
				for (int qi = 0; qi < n; qi++)
					for (int hh = 0; hh < group; hh += 1 + f->pair) {
						const int h = hk * group + hh, qt = ord[qi], r = (h / mgroup) * n + qt;
						if (p->row[r] < p->row[r + 1])
							it[ni++] = make_int4(h, qt, b, r);
						else
							em[ne++] = make_int4(h, qt, b, r);
					}
		f->nitem = ni;
		f->nempty = ne;
		unsigned zero = 0;
		if ((rc = upload((void **)&f->item, it, (size_t)ni * sizeof *it)) == KERN_OK &&
		    (rc = upload((void **)&f->empty, em, (size_t)ne * sizeof *em)) == KERN_OK)
			rc = upload((void **)&f->next, &zero, sizeof zero);
	}
	free(it);
	free(em);
	return rc;
}

/* The plan's entries, and the bitmasks of the tiles with more than MANY
 * cuts: BQ rows of BK bits each, whatever the plan's tile, a bit for
 * (q0 + q, k0 + k) set where some cut allows it and k0 + k < sk, each row
 * made in key order and then laid out as bm_word() reads it.  Such an
 * entry goes up with its bitmask's index in cut0, which the kernel then
 * reads with the entry instead of from a table after it. */
static int bitmasks(struct state *f, const struct plan *p)
{
	plan_ent *pe = (plan_ent *)malloc((p->nent ? p->nent : 1) * sizeof *pe);
	uint32_t *bm = NULL;
	int nbm = 0, rc;

	if (pe == NULL)
		return KERN_ERR;
	for (int e = 0; e < p->nent; e++) {
		pe[e] = p->ent[e];
		if (pe[e].ncut > MANY)
			pe[e].cut0 = nbm++;
	}
	if (nbm > 0 && (bm = (uint32_t *)calloc((size_t)nbm * BQ * 4, sizeof *bm)) == NULL) {
		free(pe);
		return KERN_ERR;
	}
	for (int r = 0; r < p->nrows; r++) {
		const int64_t q0 = (int64_t)(r % p->nqt) * p->bq, q1 = q0 + p->bq < p->sq ? q0 + p->bq : p->sq;
		for (int e = p->row[r]; e < p->row[r + 1]; e++) {
			if (p->ent[e].ncut <= MANY)
				continue;
			const int64_t k0 = (int64_t)p->ent[e].t0 * p->bk, k1 = k0 + p->bk < p->sk ? k0 + p->bk : p->sk;
			uint32_t *b = bm + (size_t)pe[e].cut0 * BQ * 4;
			for (int c = p->ent[e].cut0; c < p->ent[e].cut0 + p->ent[e].ncut; c++) {
				const struct plan_cut *C = &p->cut[c];
				for (int64_t q = C->q0 > q0 ? C->q0 : q0; q < C->q1 && q < q1; q++) {
					int64_t lo, hi;
					plan_cut_line(C, 0, q, k0, k1, &lo, &hi);
					for (int wd = 0; wd < 4 && lo < hi; wd++) {
						const int64_t a0 = k0 + 32 * wd, a1 = a0 + 32;
						const int64_t x0 = lo > a0 ? lo : a0, x1 = hi < a1 ? hi : a1;
						if (x0 < x1)
							b[(q - q0) * 4 + wd] |= (uint32_t)(((1ull << (x1 - x0)) - 1) << (x0 - a0));
					}
				}
			}
		}
	}
	/* each row from key order to the quads' (bm_word()) */
	for (int64_t r = 0; r < (int64_t)nbm * BQ; r++) {
		uint32_t *w = bm + 4 * r, in[4] = { w[0], w[1], w[2], w[3] };
		w[0] = w[1] = w[2] = w[3] = 0;
		for (int c = 0; c < 4; c++)
			for (int j = 0; j < p->bk / 8; j++) {
				const int b = c * (p->bk / 4) + 2 * j;
				w[b >> 5] |= (in[j >> 2] >> (8 * (j & 3) + 2 * c) & 3u) << (b & 31);
			}
	}
	rc = upload((void **)&f->ent, pe, (size_t)p->nent * sizeof *pe);
	if (rc == KERN_OK)
		rc = upload((void **)&f->bm, bm, (size_t)nbm * BQ * 4 * sizeof *bm);
	free(pe);
	free(bm);
	return rc;
}

/* fwdp's half tiles (fwdp<..., 2>, head pairs on 64 x 128 tiles): per
 * entry the one 64-key half its tile's allowed keys lie in (1: keys 0-63,
 * 2: 64-127), else 0; bitmask tiles (more than MANY cuts) are left whole.
 * LONGATTN_HOPPER_FWD=half and nohalf force it on and off, for A/B runs
 * and checks.  HALF_AUTO: on by default where at least HALF_PCT % of the
 * visited tiles are halves (the branches cost where there are none); 0
 * until kern.sh check has passed it on a GPU and an A/B has timed it
 * (bench/NOTES.md, round 37: written in a session that had no GPU). */
enum { HALF_PCT = 6, HALF_AUTO = 0 };

static int halves(struct state *f, const struct plan *p)
{
	uint8_t *h = (uint8_t *)calloc(p->nent ? p->nent : 1, 1);
	int64_t tiles = 0, nh = 0;
	int rc = KERN_OK;

	if (h == NULL)
		return KERN_ERR;
	for (int r = 0; r < p->nrows; r++) {
		tiles += plan_row_tiles(p, r);
		for (int e = p->row[r]; e < p->row[r + 1]; e++) {
			h[e] = p->ent[e].ncut > MANY ? 0 : plan_ent_half(p, r, e);
			nh += h[e] != 0;
		}
	}
	if (env_has("LONGATTN_HOPPER_FWD", "why"))
		warnx("hopper: fwd: %lld of %lld tiles are half tiles", (long long)nh, (long long)tiles);
	if (!env_has("LONGATTN_HOPPER_FWD", "nohalf") && (env_has("LONGATTN_HOPPER_FWD", "half") ||
	    (HALF_AUTO && nh * 100 >= tiles * HALF_PCT)))
		rc = upload((void **)&f->half, h, (size_t)p->nent);
	free(h);
	return rc;
}

/* Which kernel, from the plan's mean tiles a row (hd 128; at hd 64 fwd
 * alone, the others unmeasured or slower there): fwdp below STREAM_TILES
 * (documents, hash_sparse, share_question, 1K-2K causal: a CTA's fill
 * and drain weigh on rows of a few tiles), fwd in 2-CTA clusters from
 * CL_TILES where the q-heads h and h + 1 share a kv-head and a mask head
 * (half the K/V bytes from L2; on short rows the pairs' joint start
 * idles SMs), plain fwd between (bench/NOTES.md, "hopper fwd, round 3";
 * STREAM_TILES 24, not 16, since round 18: H200, full_document 4K and 8K
 * +4 and +5 %, causal 4K +2 %, full 2K +0.7 %, 16K documents level).
 * fwdp runs head pairs on 64-row q-tiles wherever it runs and pairs exist,
 * and on long rows too where that plan visits much less (64-token block
 * masks); 64-key tiles only where they visit much less again: they cost
 * 10-18 % elsewhere (bench/NOTES.md, "round 4").  LONGATTN_HOPPER_FWD=grid,
 * cluster, stream, pair, pair64 or gather forces one, st16 or st32 moves
 * the threshold, for A/B runs. */
enum { STREAM_TILES = 24, CL_TILES = 48 };

static int64_t visited(const struct plan *p, int64_t *rows)
{
	int64_t tiles = 0;

	*rows = 0;
	for (int r = 0; r < p->nrows; r++) {
		for (int x = p->row[r]; x < p->row[r + 1]; x++)
			tiles += p->ent[x].t1 - p->ent[x].t0;
		*rows += p->row[r] < p->row[r + 1];
	}
	return tiles;
}

/* Returns 1 where fwdp's head pairs are to run if their plan (64-row
 * q-tiles) visits less than PAIR_AREA_PCT % of p's area, 2 where they are
 * to run whatever it visits, 3 where they run with 64-key tiles, 0 where
 * not at all.  Where pairs can run, 64-key tiles do if their plan visits
 * less than PAIR_AREA_PCT % of the 64x128 plan's area, two of them
 * gathered into one 128-key stage (plain 64-key stages, pair64, halve
 * the MMA's N and lose 2x on 64-token block masks: bench/NOTES.md,
 * "round 5"). */
enum { PAIR_AREA_PCT = 80 };

static int choose(struct state *f, const struct plan *p)
{
	const struct attn_shape *s = &f->s;
	const bool pairs = (s->hq / s->hkv) % 2 == 0 && (s->hq / f->mheads) % 2 == 0;
	int64_t rows, tiles = visited(p, &rows);
	int pr;
	/* st16, st32: the threshold itself, for A/B runs */
	const int stream = env_has("LONGATTN_HOPPER_FWD", "st16") ? 16 :
	    env_has("LONGATTN_HOPPER_FWD", "st32") ? 32 : STREAM_TILES;

	f->pers = s->hd == 128 && tiles < (int64_t)stream * rows;
	f->cl = s->hd == 128 && pairs && tiles >= (int64_t)CL_TILES * rows ? 2 : 1;
	pr = s->hd == 128 && pairs ? (f->pers ? 2 : 1) : 0;
	if (env_has("LONGATTN_HOPPER_FWD", "grid")) {
		f->pers = 0;
		f->cl = 1;
		pr = 0;
	} else if (env_has("LONGATTN_HOPPER_FWD", "cluster")) {
		f->pers = 0;
		f->cl = pairs ? 2 : 1;
		pr = 0;
	} else if (env_has("LONGATTN_HOPPER_FWD", "stream")) {
		f->pers = 1;
		pr = 0;
	} else if (env_has("LONGATTN_HOPPER_FWD", "pair")) {
		f->pers = 1;
		pr = pairs ? 2 : 0;
	} else if (env_has("LONGATTN_HOPPER_FWD", "pair64")) {
		f->pers = 1;
		pr = pairs ? 3 : 0;
	} else if (env_has("LONGATTN_HOPPER_FWD", "gather")) {
		f->pers = 1;
		pr = pairs ? 3 : 0;
		f->gather = pairs;
	}
	if (f->pers)
		f->cl = 1;             /* fwdp loads whole tiles */
	return pr;
}

/* A launch of grid in 2-CTA clusters (at: its one attribute). */
static cudaLaunchConfig_t pair_launch(cudaLaunchAttribute *at, dim3 grid, int smem, cudaStream_t st)
{
	cudaLaunchConfig_t lc = {};
	at->id = cudaLaunchAttributeClusterDimension;
	at->val.clusterDim.x = 2;
	at->val.clusterDim.y = 1;
	at->val.clusterDim.z = 1;
	lc.gridDim = grid;
	lc.blockDim = dim3(NT);
	lc.dynamicSmemBytes = smem;
	lc.stream = st;
	lc.attrs = at;
	lc.numAttrs = 1;
	return lc;
}

/* CTAs of fwd<T, HD, cl, KT> the machine holds at once. */
template <typename T, int HD, int KT> static int held(int cl, int nsm)
{
	int n = 0;
	if (cl == 1)
		return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fwd<T, HD, 1, KT>, NT, cfg<HD, KT>::SMEM) ==
		    cudaSuccess ? n * nsm : 0;
	cudaLaunchAttribute at;
	const cudaLaunchConfig_t lc = pair_launch(&at, dim3(2 * nsm), cfg<HD, KT>::SMEM, 0);
	return cudaOccupancyMaxActiveClusters(&n, fwd<T, HD, 2, KT>, &lc) == cudaSuccess ? 2 * n : 0;
}

template <typename T> static int held(const struct state *f)
{
	if (f->s.hd == 64)
		return held<T, 64, BK>(f->cl, f->nsm);
	return f->bk == KW ? held<T, 128, KW>(f->cl, f->nsm) : held<T, 128, BK>(f->cl, f->nsm);
}

/* fwd's tail (not fwdp's): a grid of equal rows runs in waves of as many
 * CTAs as the machine holds, and a last wave of a few leaves the other
 * SMs idle for a whole row (full 8K, 64:8: 2048 CTA pairs in 66 slots,
 * the 32nd wave 2 pairs).  Those last q-tiles (the last batch's) run
 * instead as np parts each, on contiguous stretches of their k-tiles, into
 * fp32 slots that combine() merges: the np that makes the tail shortest,
 * its waves times a part's tiles plus SPLIT_FIX tiles of fixed costs (a
 * CTA's start, Q, the pipeline's fill, the epilogue), if that saves more
 * than SPLIT_FIX tiles.  Not on padded plans nor with bitmask tiles
 * (bitmasks() knows a row's q-tile from its index).
 * LONGATTN_HOPPER_FWD=nosplit keeps whole rows; split splits the tail of
 * any mask in three (a whole grid under one wave), for checks.  lo, hi:
 * the fewest and the most tiles a row of p visits (row_span()). */
enum { SPLIT_FIX = 6, SPLIT_MAX = 16 };

/* The fewest and the most tiles a row of p visits. */
static void row_span(const struct plan *p, int *lo, int *hi)
{
	*lo = INT_MAX;
	*hi = 0;
	for (int q = 0; q < p->nrows; q++) {
		int nt = 0;
		for (int e = p->row[q]; e < p->row[q + 1]; e++)
			nt += p->ent[e].t1 - p->ent[e].t0;
		*lo = nt < *lo ? nt : *lo;
		*hi = nt > *hi ? nt : *hi;
	}
}

static int split(struct state *f, struct plan *p, const int32_t *ord, int lo, int hi)
{
	const struct attn_shape *s = &f->s;
	const int n = p->nqt, N = s->hq * n, cl = f->cl, group = s->hq / s->hkv, mgroup = s->hq / f->mheads;
	const int force = env_has("LONGATTN_HOPPER_FWD", "split");
	int np = 1, r;

	if (f->pers || f->qtile != NULL || env_has("LONGATTN_HOPPER_FWD", "nosplit"))
		return KERN_OK;
	for (int e = 0; e < p->nent; e++)
		if (p->ent[e].ncut > MANY)
			return KERN_OK;
	const int C = f->held / cl;
	const int64_t U = (int64_t)s->batch * N / cl;
	r = C > 0 ? (int)(U % C) : 0;
	if (C <= 0 || hi < 2 || (!force && lo != hi)) {
		np = 1;     /* unequal rows run heaviest first, not in waves */
	} else if (force) {
		r = r > 0 ? r : C;
		np = hi < 3 ? hi : 3;
	} else {
		int64_t best = hi + SPLIT_FIX;
		for (int P = 2; P <= SPLIT_MAX && P <= hi; P++) {
			const int64_t t = ((int64_t)r * P + C - 1) / C * ((hi + P - 1) / P + SPLIT_FIX);
			if (t < best) {
				best = t;
				np = P;
			}
		}
		if (best >= hi)
			np = 1;
	}
	if (env_has("LONGATTN_HOPPER_FWD", "why"))
		warnx("hopper: fwd: rows of %d-%d %d-key tiles, %lld launch units of %d CTAs, %d at a time: "
		    "the last %d q-tiles in %d part%s each", lo, hi, f->bk, (long long)U, cl, C, r * cl, np,
		    np > 1 ? "s" : "");
	if (r == 0 || np < 2 || (int64_t)r * cl > N)
		return KERN_OK;

	const int nt = r * cl, nr = p->nrows, ne = p->nent;
	int maxe = 0;
	for (int q = 0; q < nr; q++)
		maxe = p->row[q + 1] - p->row[q] > maxe ? p->row[q + 1] - p->row[q] : maxe;
	int32_t *row = (int32_t *)realloc(p->row, ((size_t)nr + nt * np + 1) * sizeof *row);
	if (row != NULL)
		p->row = row;
	plan_ent *ent = row == NULL ? NULL :
	    (plan_ent *)realloc(p->ent, ((size_t)ne + (size_t)nt * np * maxe + 1) * sizeof *ent);
	int4 *tail = (int4 *)calloc((size_t)nt * np, sizeof *tail), *tt = (int4 *)calloc(nt, sizeof *tt);
	int rc = KERN_ERR;
	if (ent != NULL)
		p->ent = ent;
	if (ent != NULL && tail != NULL && tt != NULL) {
		int x = ne;
		for (int k = 0; k < nt; k++) {
			const int gi = N - nt + k, hh = gi % group, qt = ord[gi / group % n];
			const int h = gi / (group * n) * group + hh, q = (h / mgroup) * n + qt;
			int tot = 0;
			for (int e = row[q]; e < row[q + 1]; e++)
				tot += ent[e].t1 - ent[e].t0;
			tt[k] = make_int4(h, qt * BQ, s->batch - 1, s->sq - qt * BQ < BQ ? (int)s->sq - qt * BQ : BQ);
			for (int pp = 0; pp < np; pp++) {
				const int j0 = (int)((int64_t)tot * pp / np), j1 = (int)((int64_t)tot * (pp + 1) / np);
				const int rr = nr + k * np + pp;
				row[rr] = x;
				for (int e = row[q], pos = 0; e < row[q + 1]; pos += ent[e].t1 - ent[e].t0, e++) {
					const int a0 = pos > j0 ? pos : j0, a1 = pos + ent[e].t1 - ent[e].t0 < j1 ?
					    pos + ent[e].t1 - ent[e].t0 : j1;
					if (a0 < a1) {
						ent[x] = ent[e];
						ent[x].t0 = ent[e].t0 + a0 - pos;
						ent[x].t1 = ent[e].t0 + a1 - pos;
						x++;
					}
				}
				tail[((k / cl) * np + pp) * cl + k % cl] = make_int4(gi, rr, k * np + pp, 0);
			}
		}
		row[nr + nt * np] = x;
		p->nrows = nr + nt * np;
		p->nent = x;
		f->ntail = nt;
		f->np = np;
		if ((rc = upload((void **)&f->tail, tail, (size_t)nt * np * sizeof *tail)) == KERN_OK &&
		    (rc = upload((void **)&f->ttile, tt, (size_t)nt * sizeof *tt)) == KERN_OK &&
		    dev_alloc((void **)&f->ws, (size_t)nt * np * (BQ * s->hd + BQ) * sizeof(float)) != 0)
			rc = KERN_OOM;
	}
	free(tail);
	free(tt);
	return rc;
}

static const int64_t *work_key;

static int by_work(const void *x, const void *y)
{
	const int32_t i = *(const int32_t *)x, j = *(const int32_t *)y;
	if (work_key[i] != work_key[j])
		return work_key[i] > work_key[j] ? -1 : 1;
	return i > j ? -1 : i < j;
}

template <class K> static cudaError_t smem(K *k, int bytes)
{
	return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <typename T, int HD> static cudaError_t set_smem(void)
{
	cudaError_t e;

	if constexpr (HD == 128)
		if ((e = smem(fwd<T, HD, 1, KW>, cfg<HD, KW>::SMEM)) != cudaSuccess ||
		    (e = smem(fwd<T, HD, 2, KW>, cfg<HD, KW>::SMEM)) != cudaSuccess)
			return e;
	if constexpr (HD == 128)
		if ((e = smem(fwd<T, HD, 1, KW, 1>, cfg<HD, KW, 1>::SMEM)) != cudaSuccess ||
		    (e = smem(fwd<T, HD, 2, KW, 1>, cfg<HD, KW, 1>::SMEM)) != cudaSuccess ||
		    (e = smem(fwd<T, HD, 1, BK, 1>, cfg<HD, BK, 1>::SMEM)) != cudaSuccess ||
		    (e = smem(fwd<T, HD, 2, BK, 1>, cfg<HD, BK, 1>::SMEM)) != cudaSuccess)
			return e;
	if ((e = smem(fwd<T, HD, 1, BK>, cfg<HD>::SMEM)) != cudaSuccess ||
	    (e = smem(fwd<T, HD, 2, BK>, cfg<HD>::SMEM)) != cudaSuccess ||
	    (e = smem(fwdp<T, HD, 0, 128, 0>, pcfg<HD, 128>::SMEM)) != cudaSuccess ||
	    (e = smem(fwdp<T, HD, 1, 128, 0>, pcfg<HD, 128>::SMEM)) != cudaSuccess ||
	    (e = smem(fwdp<T, HD, 1, 128, 2>, pcfg<HD, 128>::SMEM)) != cudaSuccess ||
	    (e = smem(fwdp<T, HD, 1, 64, 0>, pcfg<HD, 64>::SMEM)) != cudaSuccess)
		return e;
	return smem(fwdp<T, HD, 1, 128, 1>, pcfg<HD, 128>::SMEM);
}

static int init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct state *f = (struct state *)calloc(1, sizeof *f);
	struct plan p;
	int32_t *ord = NULL;
	int64_t *work = NULL;
	int rc = KERN_ERR, n;
	cudaError_t ce;

	*st = NULL;
	if (f == NULL) {
		snprintf(err, errlen, "out of host memory");
		return KERN_ERR;
	}
	f->s = *s;
	f->mheads = m->heads;
	f->nsm = sm_count();
	if (tmap_encoder() == NULL) {
		snprintf(err, errlen, "no cuTensorMapEncodeTiled in the driver");
		free(f);
		return KERN_ERR;
	}
	if (s->dtype == DT_BF16)
		ce = s->hd == 64 ? set_smem<__nv_bfloat16, 64>() : set_smem<__nv_bfloat16, 128>();
	else
		ce = s->hd == 64 ? set_smem<__half, 64>() : set_smem<__half, 128>();
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "cudaFuncSetAttribute: %s", cudaGetErrorString(ce));
		free(f);
		return KERN_ERR;
	}
	if (plan_build(&p, m, BQ, BK, err, errlen) != 0) {
		free(f);
		return KERN_ERR;
	}
	f->bk = BK;
	if ((n = choose(f, &p)) > 0) {
		struct plan p2, p3;
		int64_t r, v2, v3;
		if (plan_build(&p2, m, 64, BK, err, errlen) != 0) {
			plan_free(&p);
			free(f);
			return KERN_ERR;
		}
		if (plan_build(&p3, m, 64, 64, err, errlen) != 0) {
			plan_free(&p2);
			plan_free(&p);
			free(f);
			return KERN_ERR;
		}
		v2 = visited(&p2, &r) * 64 * BK;
		v3 = visited(&p3, &r) * 64 * 64;
		/* 64-key tiles are judged against the 64x128 plan whether or not
		 * that one beats the 128x128 plan: on 64-token block masks the
		 * first step saves exactly 20 % and the second a third more */
		if (n == 3 || v3 * 100 < v2 * PAIR_AREA_PCT) {
			plan_free(&p);
			plan_free(&p2);
			p = p3;
			f->bk = 64;
			f->gather |= n != 3;
			f->pair = f->pers = f->cl = 1;
		} else if (n >= 2 || v2 * 100 < visited(&p, &r) * BQ * BK * PAIR_AREA_PCT) {
			plan_free(&p);
			plan_free(&p3);
			p = p2;
			f->pair = f->pers = f->cl = 1;
		} else {
			plan_free(&p2);
			plan_free(&p3);
		}
	}
	/* KW-key tiles (above); LONGATTN_HOPPER_FWD=k128 keeps 128, k176
	 * takes KW whatever the area, for A/B runs */
	if (!f->pers && s->hd == 128 && !env_has("LONGATTN_HOPPER_FWD", "k128")) {
		struct plan pw;
		int64_t r;
		int few = 1;
		if (plan_build(&pw, m, BQ, KW, err, errlen) != 0) {
			plan_free(&p);
			free(f);
			return KERN_ERR;
		}
		for (int e = 0; e < pw.nent; e++)
			few &= pw.ent[e].ncut <= MANY;
		if (env_has("LONGATTN_HOPPER_FWD", "why"))
			warnx("hopper: fwd: %d-key tiles visit %.4f x the keys of %d-key tiles%s", KW,
			    (double)(visited(&pw, &r) * KW) / (double)(visited(&p, &r) * BK), BK,
			    few ? "" : ", with more than MANY cuts");
		if (few && (visited(&pw, &r) * KW * 10000 <= visited(&p, &r) * BK * KW_AREA ||
		    env_has("LONGATTN_HOPPER_FWD", "k176"))) {
			plan_free(&p);
			p = pw;
			f->bk = KW;
		} else {
			plan_free(&pw);
		}
	}
	/* documents on tile edges (tile.cuh's pad_plan): 1K-8K documents
	 * +2-17 % on 64x128 tiles (H100, round 6), documents under a tile on
	 * the 64-key tiles of the gathered plan (48-127 tokens: full +26 %;
	 * causal -12 % where tiles were counted, not steps).
	 * LONGATTN_HOPPER_FWD=nopad keeps the plan, =pad pads wherever there
	 * are gaps, for A/B runs and checks. */
	if (f->bk != KW && !env_has("LONGATTN_HOPPER_FWD", "nopad")) {
		const int pr = pad_plan(m, f->pair ? 64 : BQ, f->bk, f->gather, env_has("LONGATTN_HOPPER_FWD", "pad"),
		    &p, &f->qtile, &f->ktile, &f->skv, err, errlen);
		if (pr != KERN_OK) {
			plan_free(&p);
			fini(f);
			return pr;
		}
	}
	if (env_has("LONGATTN_HOPPER_FWD", "why"))
		warnx("hopper: fwd: %s on %dx%d tiles%s%s", f->pers ? "fwdp, CTAs that stay," : "fwd", p.bq, f->bk,
		    f->gather ? ", 64-key tiles gathered in pairs" : "",
		    f->qtile != NULL ? ", documents padded to tile edges" : "");
	/* heaviest q-tiles first, so the long rows of causal and document
	 * masks do not start last and leave the machine idle at the tail */
	n = p.nqt;
	f->nqt = n;
	ord = (int32_t *)calloc(n ? n : 1, sizeof *ord);
	work = (int64_t *)calloc(n ? n : 1, sizeof *work);
	if (ord != NULL && work != NULL) {
		for (int r = 0; r < p.nrows; r++)
			for (int e = p.row[r]; e < p.row[r + 1]; e++)
				work[r % n] += p.ent[e].t1 - p.ent[e].t0;
		for (int i = 0; i < n; i++)
			ord[i] = i;
		work_key = work;
		qsort(ord, n, sizeof *ord, by_work);
		int lo, hi;
		row_span(&p, &lo, &hi);
		if (!f->pers) {
			f->held = s->dtype == DT_BF16 ? held<__nv_bfloat16>(f) : held<__half>(f);
			f->ahead = env_has("LONGATTN_HOPPER_FWD", "noqpf") ? 0 : f->held;
			f->nqh = env_has("LONGATTN_HOPPER_FWD", "q2") ? 2 : 3;
			/* CTA pairs take their items a wave at a time, which on
			 * rows that differ leaves SMs idle where the grid's
			 * heaviest-first order does not (causal 8K forced into
			 * pairs: -19 %; causal 64K-128K -1 to -5 % against
			 * cuDNN, round 25).  Pairs that took two items at a time
			 * from a counter instead lost where they were to win, on
			 * the H100 (causal 8K -3 %; full 8K / 32K and causal 32K
			 * level to -0.8 %: round 28), and went. */
			f->loop = s->hd != 128 || f->qtile != NULL || f->held <= 0 ? 0 :
			    env_has("LONGATTN_HOPPER_FWD", "loopfew") ? 2 :
			    env_has("LONGATTN_HOPPER_FWD", "noloop") || (f->cl == 2 && lo != hi) ? 0 : 1;
			if (f->loop && env_has("LONGATTN_HOPPER_FWD", "why"))
				warnx("hopper: fwd: the loop on %d CTAs, %s", f->loop == 2 ? 6 : f->held,
				    f->cl == 1 ? "a block each from a counter" : "in pairs, a wave at a time");
		}
		const unsigned zero = 0;
		if ((rc = split(f, &p, ord, lo, hi)) ||
		    (f->loop && f->cl == 1 && (rc = upload((void **)&f->next, &zero, sizeof zero))) ||
		    (rc = upload((void **)&f->row, p.row, (size_t)(p.nrows + 1) * sizeof *p.row)) ||
		    (rc = upload((void **)&f->order, ord, (size_t)n * sizeof *ord)) ||
		    (rc = upload((void **)&f->cut, p.cut, (size_t)p.ncut * sizeof *p.cut)) ||
		    (rc = bitmasks(f, &p)) ||
		    /* partial tiles masked from each row's one interval of
		     * keys where the mask has them (full, causal, documents,
		     * windows, prefix-LM): fwdp on documents under a tile
		     * spent a quarter of its stall samples in the cut tests
		     * (NOTES round 31; without them, H100 round 33: causal
		     * ones +4.7 %, pile full documents +3 %); cuts keeps them,
		     * for A/B runs and checks.  No gaps spanned: a gap's keys
		     * would count in the row's sum. */
		    (!env_has("LONGATTN_HOPPER_FWD", "cuts") && (rc = upload_intervals(&f->iv, &p, NULL, 0,
		    env_has("LONGATTN_HOPPER_FWD", "why") ?
		    "hopper: fwd: partial tiles masked from each row's one interval of keys" : NULL))) ||
		    (f->pers && (rc = items(f, &p, ord))) ||
		    (f->pers && f->pair && f->bk == BK && !f->gather && (rc = halves(f, &p))))
			;
	}
	free(ord);
	free(work);
	plan_free(&p);
	if (rc != KERN_OK) {
		snprintf(err, errlen, rc == KERN_OOM ? "out of device memory for the plan" : "plan upload failed");
		fini(f);
		return rc;
	}
	*st = f;
	return KERN_OK;
}

/* fwd on KT-key tiles: a CTA a q-tile, or (cl 2) CTA pairs; P: the loop,
 * grid the CTAs the machine holds. */
template <typename T, int HD, int KT, int P>
static cudaError_t fwd_grid(const struct state *f, dim3 grid, const CUtensorMap &tq, const CUtensorMap &tk,
    const CUtensorMap &tv, const CUtensorMap &to, const args &a, const struct attn_io *io)
{
	if (f->cl == 1) {
		fwd<T, HD, 1, KT, P><<<grid, NT, cfg<HD, KT, P>::SMEM, (cudaStream_t)io->stream>>>(tq, tk, tv, to, a);
		return cudaSuccess;
	}
	cudaLaunchAttribute at;
	const cudaLaunchConfig_t lc = pair_launch(&at, grid, cfg<HD, KT, P>::SMEM, (cudaStream_t)io->stream);
	return cudaLaunchKernelEx(&lc, fwd<T, HD, 2, KT, P>, tq, tk, tv, to, a);
}

/* fwd_grid on the state's tiles (hd 128: KW or BK keys). */
template <typename T, int HD, int P>
static cudaError_t fwd_tiles(const struct state *f, dim3 grid, const CUtensorMap &tq, const CUtensorMap &tk,
    const CUtensorMap &tv, const CUtensorMap &to, const args &a, const struct attn_io *io)
{
	return f->bk == KW ? fwd_grid<T, HD, KW, P>(f, grid, tq, tk, tv, to, a, io) :
	    fwd_grid<T, HD, BK, P>(f, grid, tq, tk, tv, to, a, io);
}

template <typename T, int HD> static int launch(struct state *f, const struct attn_io *io)
{
	const struct attn_shape *s = &f->s;
	CUtensorMap tq, tk, tv, to;
	args a;
	cudaError_t e;

	if (tmap(&tq, io->q, s->dtype, s->sq, s->hq, HD, s->batch, f->pair || f->loop ? 64 : BQ) ||
	    tmap(&tk, io->k, s->dtype, s->sk, s->hkv, HD, s->batch, f->bk / f->cl) ||
	    tmap(&tv, io->v, s->dtype, s->sk, s->hkv, HD, s->batch, f->bk / f->cl) ||
	    tmap(&to, io->o, s->dtype, s->sq, s->hq, HD, s->batch, 64)) {
		return KERN_ERR;
	}
	a.row = f->row; a.order = f->order; a.ent = f->ent; a.cut = f->cut;
	a.bm = f->bm; a.iv = f->iv; a.half = f->half;
	a.o = io->o; a.lse = io->lse;
	a.sq = (int)s->sq; a.sk = f->skv > 0 ? f->skv : (int)s->sk; a.hq = s->hq; a.nqt = f->nqt;
	a.qtile = f->qtile; a.ktile = f->ktile;
	a.group = s->hq / s->hkv; a.mgroup = s->hq / f->mheads;
	a.sl = (float)s->scale * LOG2E;
	const int G = f->nitem < f->nsm ? f->nitem : f->nsm;
	a.item = f->item;
	a.nitem = f->nitem;
	a.next = f->next;
	/* each launch takes nitem + G values of the counter */
	a.base = f->launches * (unsigned)(f->nitem + G);
	a.tail = f->tail;
	a.whole = s->hq * f->nqt - f->ntail;
	a.ws = f->ws;
	a.ahead = f->ahead;
	a.batch = s->batch;
	a.nqh = f->nqh;
	dim3 grid(s->hq * f->nqt + f->ntail * f->np, 1, s->batch);
	if (f->loop) {
		/* a launch takes nitem + the grid's values of the counter (CL 1) */
		a.nitem = (s->batch - 1) * s->hq * f->nqt + a.whole + f->ntail * f->np;
		const int ctas = f->loop == 2 ? 6 : f->held;
		grid = dim3(a.nitem < ctas ? (a.nitem + f->cl - 1) / f->cl * f->cl : ctas);
		a.base = f->launches * (unsigned)(a.nitem + grid.x);
		f->launches += f->cl == 1;
	}
	if (f->pers) {
		if (f->nempty > 0)
			fill_empty<T, HD><<<f->nempty, 256, 0, (cudaStream_t)io->stream>>>(f->empty, (T *)io->o, io->lse,
			    a, f->pair ? 64 : BQ, 1 + f->pair);
		if (f->nitem > 0 && f->pair && f->bk == 64 && f->gather) {
			fwdp<T, HD, 1, 128, 1><<<G, NT, pcfg<HD, 128>::SMEM, (cudaStream_t)io->stream>>>(tq, tk, tv, to, a);
			f->launches++;
		} else if (f->nitem > 0 && f->pair && f->bk == 64) {
			fwdp<T, HD, 1, 64, 0><<<G, NT, pcfg<HD, 64>::SMEM, (cudaStream_t)io->stream>>>(tq, tk, tv, to, a);
			f->launches++;
		} else if (f->nitem > 0 && f->pair && f->half != NULL) {
			fwdp<T, HD, 1, 128, 2><<<G, NT, pcfg<HD, 128>::SMEM, (cudaStream_t)io->stream>>>(tq, tk, tv, to, a);
			f->launches++;
		} else if (f->nitem > 0 && f->pair) {
			fwdp<T, HD, 1, 128, 0><<<G, NT, pcfg<HD, 128>::SMEM, (cudaStream_t)io->stream>>>(tq, tk, tv, to, a);
			f->launches++;
		} else if (f->nitem > 0) {
			fwdp<T, HD, 0, 128, 0><<<G, NT, pcfg<HD, 128>::SMEM, (cudaStream_t)io->stream>>>(tq, tk, tv, to, a);
			f->launches++;
		}
	} else {
		if constexpr (HD == 128)
			e = f->loop ? fwd_tiles<T, HD, 1>(f, grid, tq, tk, tv, to, a, io) :
			    fwd_tiles<T, HD, 0>(f, grid, tq, tk, tv, to, a, io);
		else
			e = fwd_grid<T, HD, BK, 0>(f, grid, tq, tk, tv, to, a, io);
		if (e != cudaSuccess) {
			warnx("hopper: fwd: %s", cudaGetErrorString(e));
			return KERN_ERR;
		}
		if (f->ntail > 0)
			combine<T, HD><<<dim3(f->ntail, BQ / CR), CR * HD / 4, 0, (cudaStream_t)io->stream>>>(f->ws,
			    f->ttile, f->np, (T *)io->o, io->lse, a.sq, a.hq);
	}
	if ((e = cudaGetLastError()) != cudaSuccess) {
		warnx("hopper: fwd: %s", cudaGetErrorString(e));
		return KERN_ERR;
	}
	return KERN_OK;
}

static int run(void *st, const struct attn_io *io)
{
	struct state *f = (struct state *)st;
	if (f->nqt == 0)
		return KERN_OK;
	if (f->s.dtype == DT_BF16)
		return f->s.hd == 64 ? launch<__nv_bfloat16, 64>(f, io) : launch<__nv_bfloat16, 128>(f, io);
	return f->s.hd == 64 ? launch<__half, 64>(f, io) : launch<__half, 128>(f, io);
}

}
