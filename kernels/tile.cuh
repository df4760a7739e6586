/* The device side of the plan, shared by flash.cu and hopper.cu: which of
 * the scores a thread holds a partial tile's cuts allow, and the walk of a
 * transposed plan over the q-heads of a GQA group.  Every function is
 * inlined into its kernel; L is the kernel's fragment layout (NQ, NK,
 * qoff, koff, qi, ki), A its argument struct (group, mgroup, nkt, row,
 * ent). */
#ifndef TILE_CUH
#define TILE_CUH
#include <limits.h>
#include <stdint.h>

/* A cut as bounds on q, k and k - q, as plan_cut_allows reads it (every
 * coordinate is below 2^31 - 256, so k - q fits an int). */
struct dcut {
	int q0, q1, k0, k1, lo, hi;
	__device__ __forceinline__ dcut(const plan_cut &c) {
		q0 = c.q0; q1 = c.q1; k0 = c.k0; k1 = c.k1;
		lo = c.kind == MASK_INVCAUSAL || c.kind == MASK_BICAUSAL ? c.k0 - c.q0 : INT_MIN;
		hi = c.kind == MASK_CAUSAL || c.kind == MASK_BICAUSAL ? c.k1 - c.q1 : INT_MAX;
	}
};

/* The 32 score elements a thread holds in a warp's sub-tile: element b
 * has q = qb + L::qoff(L::qi(b)) and k = kb + L::koff(L::ki(b)), the
 * offsets compile-time constants.  cut_bits returns the set of elements
 * some cut allows.  Rectangles cost a compare or two per distinct row and
 * column (masks whose cuts are single columns, as random_eviction's, have
 * dozens of cuts per tile); only diagonal cuts test every element. */
template <class L> static __host__ __device__ constexpr uint32_t qbits(int u)
{
	uint32_t m = 0;
	for (int b = 0; b < 32; b++)
		if (L::qi(b) == u)
			m |= 1u << b;
	return m;
}

template <class L> static __host__ __device__ constexpr uint32_t kbits(int u)
{
	uint32_t m = 0;
	for (int b = 0; b < 32; b++)
		if (L::ki(b) == u)
			m |= 1u << b;
	return m;
}

/* The elements with q in [q0,q1) and k in [k0,k1). */
template <class L>
static __device__ __forceinline__ uint32_t rect_bits(int qb, int kb, int q0, int q1, int k0, int k1)
{
	uint32_t qm = 0, km = 0;
	const int a0 = qb - q0, a1 = qb - q1, b0 = kb - k0, b1 = kb - k1;
#pragma unroll
	for (int u = 0; u < L::NQ; u++)
		qm |= a0 >= -L::qoff(u) && a1 < -L::qoff(u) ? qbits<L>(u) : 0;
#pragma unroll
	for (int u = 0; u < L::NK; u++)
		km |= b0 >= -L::koff(u) && b1 < -L::koff(u) ? kbits<L>(u) : 0;
	return qm & km;
}

/* [rq0,rq1) x [rk0,rk1) is the warp's region: cuts outside it are skipped
 * by the whole warp at once. */
template <class L>
static __device__ __forceinline__ uint32_t cut_bits(const plan_cut *cut, int n, int qb, int kb,
    int rq0, int rq1, int rk0, int rk1)
{
	uint32_t ok = 0;
	for (int c = 0; c < n; c++) {
		const plan_cut P = cut[c];
		if (P.q1 <= rq0 || P.q0 >= rq1 || P.k1 <= rk0 || P.k0 >= rk1)
			continue;
		uint32_t in = rect_bits<L>(qb, kb, P.q0, P.q1, P.k0, P.k1);
		if (P.kind != MASK_FULL && in) {
			const dcut C(P);
			const int d = kb - qb;
#pragma unroll
			for (int b = 0; b < 32; b++) {
				const int o = L::koff(L::ki(b)) - L::qoff(L::qi(b));
				if (d + o < C.lo || d + o > C.hi)
					in &= ~(1u << b);
			}
		}
		ok |= in;
	}
	return ok;
}

/* Where a CTA's walk stands: q-head gi of the group, entry e (of e1) of
 * that head's row, q-tile t.  Advance to the next tile; false at the end. */
struct bwalk {
	int gi, e, e1, t;
};

template <class A>
static __device__ __forceinline__ bool bwalk_row(bwalk &w, const A &a, int hk, int kt)
{
	for (; w.gi < a.group; w.gi++) {
		int h = hk * a.group + w.gi, r = (h / a.mgroup) * a.nkt + kt;
		w.e = a.row[r];
		w.e1 = a.row[r + 1];
		if (w.e < w.e1) {
			w.t = a.ent[w.e].t0;
			return true;
		}
	}
	return false;
}

/* Skip the first pos tiles of the walk. */
template <class A>
static __device__ __forceinline__ bool bwalk_seek(bwalk &w, const A &a, int hk, int kt, int pos)
{
	while (bwalk_row(w, a, hk, kt)) {
		for (; w.e < w.e1; w.e++) {
			const int n = a.ent[w.e].t1 - a.ent[w.e].t0;
			if (pos < n) {
				w.t = a.ent[w.e].t0 + pos;
				return true;
			}
			pos -= n;
		}
		w.gi++;
	}
	return false;
}

template <class A>
static __device__ __forceinline__ bool bwalk_next(bwalk &w, const A &a, int hk, int kt)
{
	if (++w.t < a.ent[w.e].t1)
		return true;
	if (++w.e < w.e1) {
		w.t = a.ent[w.e].t0;
		return true;
	}
	w.gi++;
	return bwalk_row(w, a, hk, kt);
}

#endif
