/* Block-sparse patterns: a block body (q and k boundaries, one bitmap per
 * KV head).  Each query-block row keeps round(ratio * key blocks) random
 * key blocks, at least one, so no query row is left without keys. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hist.h"
#include "pattern.h"
#include "util.h"

static int ratio_arg(const struct pattern_args *a, const char *name, double *r, char *err, size_t errlen)
{
	*r = a->ratio < 0 ? 0.5 : a->ratio;
	if (!(*r > 0 && *r <= 1)) {
		snprintf(err, errlen, "%s: ratio %g is outside (0, 1]", name, *r);
		return -1;
	}
	return 0;
}

/* The bit layout of mask.h, without mask_setblock's checks per call. */
static inline void setbit(uint8_t *bits, uint64_t n)
{
	bits[n / 8] |= (uint8_t)(1u << (n % 8));
}

/* Partial Fisher-Yates on a permutation that is never reset: any
 * permutation is as good a start as the identity. */
static void keep_row(struct mask *m, struct rng *r, int h, int64_t i, int64_t *perm, int64_t n, int64_t keep)
{
	uint64_t base = ((uint64_t)h * (uint64_t)m->nqb + (uint64_t)i) * (uint64_t)n;
	int drop = keep > n / 2;
	int64_t pick = drop ? n - keep : keep, t, j;

	for (int64_t x = 0; x < pick; x++) {
		j = x + (int64_t)rng_below(r, (uint64_t)(n - x));
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

static int fill(struct mask *m, const struct pattern_args *a, int heads, double ratio)
{
	int64_t keep = llround(ratio * (double)m->nkb), *perm;

	if (keep < 1)
		keep = 1;
	perm = xmalloc((size_t)m->nkb * sizeof *perm);
	for (int64_t j = 0; j < m->nkb; j++)
		perm[j] = j;
	/* a local copy keeps the generator in registers: the stores through
	 * perm and bits could otherwise alias it */
	struct rng r = *a->rng;

	for (int h = 0; h < heads; h++)
		for (int64_t i = 0; i < m->nqb; i++)
			keep_row(m, &r, h, i, perm, m->nkb, keep);
	*a->rng = r;
	free(perm);
	return 0;
}

static int heads_arg(const struct pattern_args *a, const char *name, int *h, char *err, size_t errlen)
{
	*h = a->heads == 0 ? 8 : a->heads;
	if (*h < 1 || *h > 1024) {
		snprintf(err, errlen, "%s: heads %d is outside [1, 1024]", name, *h);
		return -1;
	}
	return 0;
}

int pat_block_sparse_uniform(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t B = a->block == PAT_UNSET ? 64 : a->block, n, *bd;
	double ratio;
	int heads;
	char params[MASK_PARAMS];

	if (ratio_arg(a, "block_sparse_uniform", &ratio, err, errlen) == -1 ||
	    heads_arg(a, "block_sparse_uniform", &heads, err, errlen) == -1)
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
	fill(m, a, heads, ratio);
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

	if (ratio_arg(a, "block_sparse_variable", &ratio, err, errlen) == -1 ||
	    heads_arg(a, "block_sparse_variable", &heads, err, errlen) == -1)
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
	fill(m, a, heads, ratio);
	return pat_finish(m, err, errlen);
}
