/* Random masks for the mask and plan tests, and a brute-force predicate
 * written from the FFA definitions (not from lib/). */
#ifndef MASK_GEN_H
#define MASK_GEN_H
#include <stdint.h>
#include <stdlib.h>
#include "mask.h"
#include "rng.h"

struct gslice { int64_t q0, q1, k0, k1; int kind; };

struct gmask {
	int64_t sq, sk;
	int n;
	struct gslice s[4096];
};

static inline int g_allows(const struct gslice *s, int64_t q, int64_t k)
{
	if (q < s->q0 || q >= s->q1 || k < s->k0 || k >= s->k1)
		return 0;
	if ((s->kind == MASK_CAUSAL || s->kind == MASK_BICAUSAL) && k - q > s->k1 - s->q1)
		return 0;
	if ((s->kind == MASK_INVCAUSAL || s->kind == MASK_BICAUSAL) && k - q < s->k0 - s->q0)
		return 0;
	return 1;
}

static inline int g_count(const struct gmask *g, int64_t q, int64_t k)
{
	int c = 0;

	for (int i = 0; i < g->n; i++)
		c += g_allows(&g->s[i], q, k);
	return c;
}

static inline void g_add(struct gmask *g, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind)
{
	if (q0 >= q1 || k0 >= k1 || g->n >= 4096)
		return;
	g->s[g->n++] = (struct gslice){ q0, q1, k0, k1, kind };
}

/* One grid cell: nothing, one slice of any kind, a causal/invcausal pair
 * whose rectangles overlap, or a band with both sides (overlapping
 * rectangles again, disjoint sets). */
static inline void g_cell(struct gmask *g, struct rng *r, int64_t Q0, int64_t Q1, int64_t K0, int64_t K1)
{
	int64_t n = Q1 - Q0, w = K1 - K0, c, d;

	switch (rng_below(r, 7)) {
	case 0:
		break;
	case 1: case 2: case 3: case 4:
		g_add(g, Q0, Q1, K0, K1, (int)rng_below(r, MASK_NKINDS));
		break;
	case 5:
		if (w + 1 < n) {
			g_add(g, Q0, Q1, K0, K1, MASK_CAUSAL);
			break;
		}
		c = K1 - Q1;
		g_add(g, Q0, Q1, K0, K1, MASK_CAUSAL);
		g_add(g, Q0, Q1, Q0 + c + 1, K1, MASK_INVCAUSAL);
		break;
	case 6:
		if (w < n) {
			g_add(g, Q0, Q1, K0, K1, MASK_INVCAUSAL);
			break;
		}
		d = rng_range(r, K0 - Q0, K1 - Q1);
		c = rng_range(r, d, K1 - Q1);
		if (rng_below(r, 2))
			g_add(g, Q0, Q1, K0, Q1 + d - 1, MASK_CAUSAL);
		g_add(g, Q0, Q1, Q0 + d, Q1 + c, MASK_BICAUSAL);
		if (rng_below(r, 2))
			g_add(g, Q0, Q1, Q0 + c + 1, K1, MASK_INVCAUSAL);
		break;
	}
}

static inline int64_t *g_cuts(struct rng *r, int64_t s, int *n, int max)
{
	int64_t *b = malloc((size_t)(max + 2) * sizeof *b);
	int k = 1;

	b[0] = 0;
	while (k < max && b[k - 1] < s) {
		int64_t step = 1 + (int64_t)rng_below(r, (uint64_t)(rng_below(r, 2) ? s : 1 + s / 4));
		if (b[k - 1] + step >= s)
			break;
		b[k] = b[k - 1] + step;
		k++;
	}
	b[k] = s;
	*n = k;
	return b;
}

/* A random grid partition, or a document mask (square cells on the
 * diagonal), sometimes with a full or causal background split in bands. */
static inline void g_random(struct gmask *g, struct rng *r, int64_t sq, int64_t sk)
{
	int nq, nk, style = (int)rng_below(r, 4);
	int64_t *qb, *kb;

	g->sq = sq;
	g->sk = sk;
	g->n = 0;
	qb = g_cuts(r, sq, &nq, 1 + (int)rng_below(r, 12));
	if (style == 0 && sq == sk) {
		/* documents */
		for (int i = 0; i < nq; i++) {
			int kind = rng_below(r, 3) ? MASK_CAUSAL : MASK_FULL;
			g_add(g, qb[i], qb[i + 1], qb[i], qb[i + 1], kind);
		}
		free(qb);
		return;
	}
	if (style == 1) {
		/* whole mask one kind, in row bands: tests merging of full tiles */
		int kind = (int)rng_below(r, MASK_NKINDS);
		int64_t c = sk - sq;
		for (int i = 0; i < nq; i++) {
			/* rows [a,b) of one slice over everything, same diagonals */
			int64_t a = qb[i], b = qb[i + 1];
			switch (kind) {
			case MASK_FULL:      g_add(g, a, b, 0, sk, kind); break;
			case MASK_CAUSAL:    g_add(g, a, b, 0, b + c, kind); break;
			case MASK_INVCAUSAL: g_add(g, a, b, a, sk, kind); break;
			case MASK_BICAUSAL:  if (c >= 0) g_add(g, a, b, a, b + c, kind); break;
			}
		}
		free(qb);
		return;
	}
	kb = g_cuts(r, sk, &nk, 1 + (int)rng_below(r, 12));
	for (int i = 0; i < nq; i++)
		for (int j = 0; j < nk; j++)
			g_cell(g, r, qb[i], qb[i + 1], kb[j], kb[j + 1]);
	free(qb);
	free(kb);
}

static inline int g_tomask(const struct gmask *g, struct mask *m, char *err, size_t errlen)
{
	mask_init(m, g->sq, g->sk, "test", "seed=1");
	for (int i = 0; i < g->n; i++)
		if (mask_add(m, g->s[i].q0, g->s[i].q1, g->s[i].k0, g->s[i].k1, g->s[i].kind) != 0)
			return -1;
	return mask_finish(m, err, errlen);
}

#endif
