/* The plan: a mask compiled for a tile shape bq x bk.  Kernels (CPU and GPU)
 * never read slices; they walk a plan.  Flat arrays of 32-bit integers so a
 * GPU kernel can take them as they are after one copy. */
#ifndef PLAN_H
#define PLAN_H
#include <stdint.h>
#include "mask.h"

/* A slice in absolute coordinates, as a partial tile's predicate needs it.
 * kind is MASK_FULL..MASK_BICAUSAL with the same rules as mask_slice. */
struct plan_cut {
	int32_t q0, q1, k0, k1, kind;
};

/* One entry of a row: tiles t0..t1-1 of the other axis.
 *   ncut == 0: every tile in the run is fully allowed (no element masking);
 *   ncut  > 0: t1 == t0 + 1, a partial tile: (q,k) in it is allowed iff one
 *              of cut[cut0 .. cut0+ncut-1] allows it (cuts are disjoint). */
struct plan_ent {
	int32_t t0, t1;
	int32_t cut0, ncut;
};

struct plan {
	int32_t bq, bk;
	int32_t sq, sk;
	int32_t nqt, nkt;              /* ceil(sq/bq), ceil(sk/bk) */
	int32_t heads;                 /* mask heads */
	int32_t transposed;            /* 0: rows are q-tiles, entries k-tiles;
	                                  1: rows are k-tiles, entries q-tiles */
	int32_t nrows;                 /* heads * (transposed ? nkt : nqt) */
	int32_t *row;                  /* nrows + 1 offsets into ent; row r = h*ntiles + tile */
	struct plan_ent *ent;
	int32_t nent;
	struct plan_cut *cut;
	int32_t ncut;
	int64_t ntiles_full, ntiles_partial;   /* visited tiles, for reports */
	uint64_t area;                 /* == mask area */
};

/* Entries of a row are in ascending tile order; a row that visits nothing
 * has no entries.  No visited tile is empty.  Returns 0, or -1 with a
 * message (seqlen >= 2^31 or out of memory). */
int  plan_build(struct plan *p, const struct mask *m, int bq, int bk, char *err, size_t errlen);
/* Per k-tile the q-tiles, for backward passes; shares nothing with p. */
int  plan_transpose(struct plan *t, const struct plan *p, char *err, size_t errlen);
void plan_free(struct plan *p);

/* The predicate of a partial tile's cut, for CPU code and tests. */
static inline int plan_cut_allows(const struct plan_cut *c, int64_t q, int64_t k)
{
	if (q < c->q0 || q >= c->q1 || k < c->k0 || k >= c->k1)
		return 0;
	switch (c->kind) {
	case MASK_CAUSAL:    return k - q <= (int64_t)c->k1 - c->q1;
	case MASK_INVCAUSAL: return k - q >= (int64_t)c->k0 - c->q0;
	case MASK_BICAUSAL:  return k - q <= (int64_t)c->k1 - c->q1 && k - q >= (int64_t)c->k0 - c->q0;
	default:             return 1;
	}
}

/* Whether the cut allows some pair of [q0,q1) x [k0,k1): k - q spans one
 * interval over a rectangle, which must meet the cut's diagonal bounds
 * (a kernel skips the parts of a partial tile that allow nothing). */
static inline int plan_cut_any(const struct plan_cut *c, int64_t q0, int64_t q1, int64_t k0, int64_t k1)
{
	int64_t qa = q0 > c->q0 ? q0 : c->q0, qb = q1 < c->q1 ? q1 : c->q1;
	int64_t ka = k0 > c->k0 ? k0 : c->k0, kb = k1 < c->k1 ? k1 : c->k1;

	if (qa >= qb || ka >= kb)
		return 0;
	if ((c->kind == MASK_CAUSAL || c->kind == MASK_BICAUSAL) && ka - (qb - 1) > (int64_t)c->k1 - c->q1)
		return 0;
	if ((c->kind == MASK_INVCAUSAL || c->kind == MASK_BICAUSAL) && (kb - 1) - qa < (int64_t)c->k0 - c->q0)
		return 0;
	return 1;
}

/* Which 64-key halves of keys [k0, k1) (at most 128) see some (q, k) of
 * entry E with q in [q0, q1): bit h for keys k0 + 64 h on.  Each pass
 * then skips a half that sees nothing (the bwd's HALF, fwdp's half
 * tiles, maskgen -i's half_bound). */
static inline int plan_halves(const struct plan *p, const struct plan_ent *E, int64_t q0, int64_t q1, int64_t k0,
    int64_t k1)
{
	int bits = 0;

	for (int h = 0; h < 2; h++) {
		const int64_t h0 = k0 + 64 * h, h1 = h0 + 64 < k1 ? h0 + 64 : k1;
		int any = h0 < k1 && E->ncut == 0;
		for (int c = E->cut0; c < E->cut0 + E->ncut && !any && h0 < k1; c++)
			any = plan_cut_any(&p->cut[c], q0, q1, h0, h1);
		bits |= any << h;
	}
	return bits;
}

/* The half (1 or 2) that entry e of row r of an untransposed plan on
 * 128-key tiles sees alone, where the entry is one tile; else 0. */
static inline int plan_ent_half(const struct plan *p, int r, int e)
{
	const struct plan_ent *E = &p->ent[e];
	const int64_t q0 = (int64_t)(r % p->nqt) * p->bq, q1 = q0 + p->bq < p->sq ? q0 + p->bq : p->sq;
	const int64_t k0 = (int64_t)E->t0 * p->bk, k1 = k0 + p->bk < p->sk ? k0 + p->bk : p->sk;
	int b;

	if (E->t1 != E->t0 + 1)
		return 0;
	b = plan_halves(p, E, q0, q1, k0, k1);
	return b == 1 || b == 2 ? b : 0;
}

/* The tiles row r visits. */
static inline int64_t plan_row_tiles(const struct plan *p, int r)
{
	int64_t n = 0;

	for (int e = p->row[r]; e < p->row[r + 1]; e++)
		n += p->ent[e].t1 - p->ent[e].t0;
	return n;
}

/* What c allows on one line, within [o0, o1) of the other axis: a query
 * row l's keys, or (by_key) key l's queries, as [*lo, *hi) (empty where
 * *lo >= *hi).  k - q runs over [dlo, dhi] on the cut's diagonals. */
static inline void plan_cut_line(const struct plan_cut *c, int by_key, int64_t l, int64_t o0, int64_t o1,
    int64_t *lo, int64_t *hi)
{
	const int64_t far = INT64_MAX / 4;
	const int64_t dlo = c->kind == MASK_INVCAUSAL || c->kind == MASK_BICAUSAL ? (int64_t)c->k0 - c->q0 : -far;
	const int64_t dhi = c->kind == MASK_CAUSAL || c->kind == MASK_BICAUSAL ? (int64_t)c->k1 - c->q1 : far;
	const int64_t a0 = by_key ? c->q0 : c->k0, a1 = by_key ? c->q1 : c->k1;
	const int64_t d0 = by_key ? l - dhi : l + dlo, d1 = by_key ? l - dlo : l + dhi;

	*lo = a0 > o0 ? a0 : o0;
	*lo = d0 > *lo ? d0 : *lo;
	*hi = a1 < o1 ? a1 : o1;
	*hi = d1 + 1 < *hi ? d1 + 1 : *hi;
}

/* Where every line of a one-head plan allows one interval (a plan's query
 * rows their keys; a transposed plan's keys their queries): 1, with
 * iv[i] = {first, end} for each of the nqt * bq rows (transposed: nkt *
 * bk keys), {0, 0} where a line allows nothing.  0 where some line's set
 * is not found to be one interval (iv then undefined), -1 for a plan of
 * several mask heads.  Kernels mask partial tiles from these two numbers
 * a line instead of the tile's cuts.  gap, where not NULL: per tile of
 * the other axis {first real, real count} (mask_pad_tiles), and an
 * interval may then span the positions past a tile's count, for a kernel
 * to which those lines add nothing (the bwd's gap rows, whose P is 0). */
int plan_intervals(const struct plan *p, const int32_t (*gap)[2], int32_t (*iv)[2]);

#endif
