/* Block-sparse patterns: a block body (q and k boundaries, one bitmap per
 * KV head).  Each query-block row keeps round(ratio * key blocks) random
 * key blocks, at least one, so no query row is left without keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hist.h"
#include "pattern.h"
#include "util.h"

/* The arguments both patterns take, with their defaults. */
static int sparse_args(const struct pattern_args *a, const char *name, double *r, int *h,
                       char *err, size_t errlen)
{
	*r = a->ratio < 0 ? 0.5 : a->ratio;
	if (!(*r > 0 && *r <= 1)) {
		snprintf(err, errlen, "%s: ratio %g is outside (0, 1]", name, *r);
		return -1;
	}
	*h = a->heads == 0 ? 8 : a->heads;
	if (*h < 1 || *h > 1024) {
		snprintf(err, errlen, "%s: heads %d is outside [1, 1024]", name, *h);
		return -1;
	}
	return 0;
}

/* The bit layout of mask.h, without mask_setblock's checks per call. */
static inline void setbit(uint8_t *bits, uint64_t n)
{
	bits[n / 8] |= (uint8_t)(1u << (n % 8));
}

/* Uniform in [0,n) from 32 bits (Lemire, with rejection, so unbiased):
 * two draws per 64-bit output halve the generator's share of the time. */
struct gen {
	struct rng r;         /* a local copy stays in registers; stores through
	                         perm and bits could otherwise alias it */
	uint64_t spare;
	int nspare;
};

static inline uint32_t next32(struct gen *g)
{
	if (g->nspare == 0) {
		g->spare = rng_next(&g->r);
		g->nspare = 2;
	}
	return (uint32_t)(g->spare >> (32 * --g->nspare));
}

static inline uint32_t below32(struct gen *g, uint32_t n)
{
	uint64_t m = (uint64_t)next32(g) * n;

	if ((uint32_t)m < n) {
		uint32_t t = (uint32_t)(-n) % n;

		while ((uint32_t)m < t)
			m = (uint64_t)next32(g) * n;
	}
	return (uint32_t)(m >> 32);
}

/* Random words, then random bits flipped until exactly keep are set: each
 * step treats every position alike, so the kept set is a uniform k-subset,
 * at n/64 + |n/2 - keep| + O(sqrt n) draws instead of min(keep, n - keep). */
static void keep_bits(struct mask *m, struct gen *g, uint64_t base, uint64_t *w, int64_t n, int64_t keep)
{
	int64_t nw = (n + 63) / 64, set = 0;

	for (int64_t x = 0; x < nw; x++) {
		w[x] = rng_next(&g->r);
		if (x == nw - 1 && n % 64)
			w[x] &= ((uint64_t)1 << (n % 64)) - 1;
		set += __builtin_popcountll(w[x]);
	}
	while (set != keep) {
		uint32_t j = below32(g, (uint32_t)n);
		uint64_t bit = (uint64_t)1 << (j % 64);

		if (set > keep && (w[j / 64] & bit)) {
			w[j / 64] &= ~bit;
			set--;
		} else if (set < keep && !(w[j / 64] & bit)) {
			w[j / 64] |= bit;
			set++;
		}
	}
	if (base % 8 == 0) {
		uint8_t *p = m->bits + base / 8;

		for (int64_t y = 0; y < (n + 7) / 8; y++)
			p[y] |= (uint8_t)(w[y / 8] >> (8 * (y % 8)));
		return;
	}
	for (int64_t x = 0; x < nw; x++)
		for (uint64_t v = w[x]; v; v &= v - 1)
			setbit(m->bits, base + (uint64_t)(x * 64 + __builtin_ctzll(v)));
}

/* Partial Fisher-Yates on a permutation that is never reset: any
 * permutation is as good a start as the identity. */
static void keep_row(struct mask *m, struct gen *g, int h, int64_t i, int64_t *perm, uint64_t *w,
                     int64_t n, int64_t keep)
{
	uint64_t base = ((uint64_t)h * (uint64_t)m->nqb + (uint64_t)i) * (uint64_t)n;
	int64_t fy = keep < n - keep ? keep : n - keep, dist = keep > n / 2 ? keep - n / 2 : n / 2 - keep;

	if (n / 64 + dist + 4 * (int64_t)sqrt((double)n) < fy) {
		keep_bits(m, g, base, w, n, keep);
		return;
	}
	int drop = keep > n / 2;
	int64_t pick = drop ? n - keep : keep, t, j;

	for (int64_t x = 0; x < pick; x++) {
		j = x + (int64_t)below32(g, (uint32_t)(n - x));
		t = perm[x];
		perm[x] = perm[j];
		perm[j] = t;
	}
	if (!drop) {
		for (int64_t x = 0; x < pick; x++)
			setbit(m->bits, base + (uint64_t)perm[x]);
	} else {
		for (int64_t x = pick; x < n; x++)
			setbit(m->bits, base + (uint64_t)perm[x]);
	}
}

static void fill(struct mask *m, const struct pattern_args *a, double ratio)
{
	int64_t keep = llround(ratio * (double)m->nkb), *perm;
	uint64_t *w = xmalloc((size_t)(m->nkb + 63) / 64 * sizeof *w);
	struct gen g;

	if (keep < 1)
		keep = 1;
	perm = xmalloc((size_t)m->nkb * sizeof *perm);
	for (int64_t j = 0; j < m->nkb; j++)
		perm[j] = j;
	g = (struct gen){ *a->rng, 0, 0 };

	for (int h = 0; h < m->heads; h++)
		for (int64_t i = 0; i < m->nqb; i++)
			keep_row(m, &g, h, i, perm, w, m->nkb, keep);
	*a->rng = g.r;
	free(perm);
	free(w);
}

int pat_block_sparse_uniform(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t B = a->block == PAT_UNSET ? 64 : a->block, n, *bd;
	double ratio;
	int heads;
	char params[MASK_PARAMS];

	if (sparse_args(a, "block_sparse_uniform", &ratio, &heads, err, errlen) == -1)
		return -1;
	if (B < 1 || B > a->s) {
		snprintf(err, errlen, "block_sparse_uniform: block %lld is outside [1, %lld]", (long long)B, (long long)a->s);
		return -1;
	}
	n = (a->s + B - 1) / B;
	bd = xmalloc((size_t)(n + 1) * sizeof *bd);
	for (int64_t i = 0; i < n; i++)
		bd[i] = i * B;
	bd[n] = a->s;
	snprintf(params, sizeof params, "block=%lld ratio=%g heads=%d seed=%llu", (long long)B, ratio, heads,
	    (unsigned long long)a->seed);
	if (mask_init_blocks(m, a->s, a->s, heads, n, bd, n, bd, "block_sparse_uniform", params) == -1) {
		free(bd);
		snprintf(err, errlen, "block_sparse_uniform: %lld x %lld blocks x %d heads: out of memory",
		    (long long)n, (long long)n, heads);
		return -1;
	}
	free(bd);
	fill(m, a, ratio);
	return pat_finish(m, err, errlen);
}

/* Sizes uniform in [min, 2*avg - min] (mean avg); a rest shorter than min
 * joins the last block. */
static int64_t *partition(struct rng *r, int64_t s, int64_t minb, int64_t avg, int64_t *nb)
{
	struct lens l = { 0 };
	int64_t at = 0;

	lens_push(&l, 0);
	while (at < s) {
		int64_t x = rng_range(r, minb, 2 * avg - minb);

		if (s - at - x < minb)
			x = s - at;
		at += x;
		lens_push(&l, at);
	}
	*nb = (int64_t)l.n - 1;
	return l.v;
}

int pat_block_sparse_variable(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t minb = a->minblock == PAT_UNSET ? 128 : a->minblock;
	int64_t avg = a->avgblock == PAT_UNSET ? 512 : a->avgblock, nq, nk, *qb, *kb;
	double ratio;
	int heads, r;
	char params[MASK_PARAMS];

	if (sparse_args(a, "block_sparse_variable", &ratio, &heads, err, errlen) == -1)
		return -1;
	if (minb < 1 || avg < minb || avg > a->s) {
		snprintf(err, errlen, "block_sparse_variable: want 1 <= min block (%lld) <= average (%lld) <= seqlen (%lld)",
		    (long long)minb, (long long)avg, (long long)a->s);
		return -1;
	}
	qb = partition(a->rng, a->s, minb, avg, &nq);
	kb = partition(a->rng, a->s, minb, avg, &nk);
	snprintf(params, sizeof params, "minblock=%lld avgblock=%lld ratio=%g heads=%d seed=%llu",
	    (long long)minb, (long long)avg, ratio, heads, (unsigned long long)a->seed);
	r = mask_init_blocks(m, a->s, a->s, heads, nq, qb, nk, kb, "block_sparse_variable", params);
	free(qb);
	free(kb);
	if (r == -1) {
		snprintf(err, errlen, "block_sparse_variable: out of memory");
		return -1;
	}
	fill(m, a, ratio);
	return pat_finish(m, err, errlen);
}
