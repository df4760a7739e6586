/* Plans (and transposed plans) of random slice and block masks cover exactly
 * the allowed pairs, checked pair by pair against brute force. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "plan.h"
#include "rng.h"
#include "tap.h"
#include "mask_gen.h"
#include "mask_check.h"

static struct gmask g;
static const int tiles[] = { 1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 64, 128 };

static int pick_tile(struct rng *r)
{
	return tiles[rng_below(r, sizeof tiles / sizeof tiles[0])];
}

/* plan and transposed plan of m against truth; counts failures */
static void check_both(const struct mask *m, const unsigned char *truth, struct rng *r,
                       int *bad, int *badt, char *first, size_t flen)
{
	struct plan p, t;
	char err[256], why[512];
	int bq = pick_tile(r), bk = pick_tile(r);

	if (plan_build(&p, m, bq, bk, err, sizeof err) != 0) {
		if (!(*bad)++)
			snprintf(first, flen, "plan_build %dx%d: %s", bq, bk, err);
		return;
	}
	if (check_plan(&p, truth, m->sq, m->sk, m->heads, why, sizeof why) != 0 && !(*bad)++)
		snprintf(first, flen, "plan %dx%d of %lldx%lld: %s", bq, bk, (long long)m->sq,
		    (long long)m->sk, why);
	if (plan_transpose(&t, &p, err, sizeof err) != 0) {
		if (!(*badt)++)
			snprintf(first, flen, "plan_transpose: %s", err);
	} else {
		if ((t.transposed != 1 ||
		    check_plan(&t, truth, m->sq, m->sk, m->heads, why, sizeof why) != 0) && !(*badt)++)
			snprintf(first, flen, "transposed %dx%d of %lldx%lld: %s", bq, bk,
			    (long long)m->sq, (long long)m->sk, why);
		plan_free(&t);
	}
	plan_free(&p);
}

/* restrict m to a random rectangle: the result allows exactly the shifted
 * truth, passes mask_finish (mask_restrict calls it; re-check here), and its
 * plans are exact too */
static unsigned char *sub;

static void check_restrict(const struct mask *m, const unsigned char *truth, struct rng *r,
                           int *bad, int *badp, char *first, size_t flen)
{
	struct mask o;
	char err[256];
	int64_t q0 = rng_below(r, (uint64_t)m->sq), q1 = rng_range(r, q0 + 1, m->sq);
	int64_t k0 = rng_below(r, (uint64_t)m->sk), k1 = rng_range(r, k0 + 1, m->sk);
	int64_t nq = q1 - q0, nk = k1 - k0;
	uint64_t cnt = 0;
	int wrong = 0, dummy = 0;

	if (mask_restrict(m, q0, q1, k0, k1, &o, err, sizeof err) != 0) {
		if (!(*bad)++)
			snprintf(first, flen, "restrict: %s", err);
		return;
	}
	for (int h = 0; h < m->heads; h++)
		for (int64_t q = 0; q < nq; q++)
			for (int64_t k = 0; k < nk; k++) {
				int t = truth[(h * m->sq + q + q0) * m->sk + k + k0];
				sub[(h * nq + q) * nk + k] = (unsigned char)t;
				cnt += (uint64_t)t;
				wrong += mask_allows(&o, h, q, k) != t;
			}
	if (o.sq != nq || o.sk != nk || o.heads != m->heads || o.body != m->body ||
	    strcmp(o.pattern, m->pattern) != 0 || strcmp(o.params, m->params) != 0 ||
	    o.area != cnt || wrong) {
		if (!(*bad)++)
			snprintf(first, flen, "restrict [%lld,%lld)x[%lld,%lld): %d pairs wrong, area %llu want %llu",
			    (long long)q0, (long long)q1, (long long)k0, (long long)k1, wrong,
			    (unsigned long long)o.area, (unsigned long long)cnt);
	} else if (o.body == MASK_BODY_SLICES) {
		/* the pieces obey the FFA rules on their own: brute force per slice */
		for (size_t i = 0; i < o.nslices; i++) {
			const struct mask_slice *x = &o.slices[i];
			struct gslice y = { x->q0, x->q1, x->k0, x->k1, x->kind };
			uint64_t c = 0;
			for (int64_t q = x->q0; q < x->q1; q++)
				for (int64_t k = x->k0; k < x->k1; k++)
					c += (uint64_t)g_allows(&y, q, k);
			if (c != mask_slice_area(x) || c == 0) {
				if (!(*bad)++)
					snprintf(first, flen, "restrict: piece %zu area", i);
				break;
			}
		}
	}
	check_both(&o, sub, r, badp, &dummy, first, flen);
	*badp += dummy;
	mask_free(&o);
}

/* uniform blocks of size bs (the last one shorter): 0, bs, 2bs, ..., s */
static int64_t *uniform(int64_t s, int64_t bs, int *n)
{
	int64_t *b = malloc((size_t)(s / bs + 2) * sizeof *b);
	int k = 0;

	for (int64_t x = 0; x < s; x += bs)
		b[k++] = x;
	b[k] = s;
	*n = k;
	return b;
}

/* random boundaries, or (one time in three) uniform ones that the tile sizes
 * often divide, which plan_build takes by its no-sweep path */
static void block_mask(struct mask *m, struct rng *r, int64_t sq, int64_t sk, int heads)
{
	int nq, nk, uni = rng_below(r, 3) == 0;
	int64_t bs = (int64_t)1 << rng_below(r, 5);
	int64_t *qb = uni ? uniform(sq, bs, &nq) : g_cuts(r, sq, &nq, 1 + (int)rng_below(r, 10));
	int64_t *kb = uni ? uniform(sk, bs, &nk) : g_cuts(r, sk, &nk, 1 + (int)rng_below(r, 10));
	double dens = rng_double(r);
	char err[256];

	if (mask_init_blocks(m, sq, sk, heads, nq, qb, nk, kb, "blocks", "") != 0)
		abort();
	for (int h = 0; h < heads; h++)
		for (int i = 0; i < nq; i++)
			for (int j = 0; j < nk; j++)
				if (rng_double(r) < dens)
					mask_setblock(m, h, i, j);
	if (mask_finish(m, err, sizeof err) != 0) {
		fprintf(stderr, "block mask: %s\n", err);
		abort();
	}
	free(qb);
	free(kb);
}

int main(void)
{
	struct rng r;
	int bad = 0, badt = 0, bbad = 0, bbadt = 0, nb = 0, ns = 0, barea = 0, ballow = 0;
	int rbad = 0, rbadp = 0, rbbad = 0, rbbadp = 0;
	char first[600] = "", err[256];
	unsigned char *truth = malloc(4 * 200 * 200);

	sub = malloc(4 * 200 * 200);

	rng_seed(&r, 7);
	for (int it = 0; it < 800; it++) {
		struct mask m;
		int64_t sq = rng_range(&r, 1, it < 200 ? 16 : 150);
		int64_t sk = rng_below(&r, 3) ? sq : rng_range(&r, 1, 150);

		g_random(&g, &r, sq, sk);
		if (g_tomask(&g, &m, err, sizeof err) != 0) {
			fprintf(stderr, "mask: %s\n", err);
			return 1;
		}
		for (int64_t q = 0; q < sq; q++)
			for (int64_t k = 0; k < sk; k++)
				truth[q * sk + k] = (unsigned char)g_count(&g, q, k);
		for (int j = 0; j < 3; j++)
			check_both(&m, truth, &r, &bad, &badt, first, sizeof first);
		for (int j = 0; j < 3; j++)
			check_restrict(&m, truth, &r, &rbad, &rbadp, first, sizeof first);
		ns++;
		mask_free(&m);
	}
	for (int it = 0; it < 300; it++) {
		struct mask m;
		int heads = rng_below(&r, 2) ? 1 : 4;
		int64_t sq = rng_range(&r, 1, 120), sk = rng_range(&r, 1, 120);
		uint64_t cnt = 0;

		block_mask(&m, &r, sq, sk, heads);
		for (int h = 0; h < heads; h++)
			for (int64_t q = 0; q < sq; q++)
				for (int64_t k = 0; k < sk; k++) {
					int i = 0, j = 0, v;
					while (m.qb[i + 1] <= q) i++;
					while (m.kb[j + 1] <= k) j++;
					/* the bitmap layout of mask.h, read by hand */
					uint64_t n = ((uint64_t)h * (uint64_t)m.nqb + (uint64_t)i) * (uint64_t)m.nkb + (uint64_t)j;
					v = (m.bits[n / 8] >> (n % 8)) & 1;
					truth[(h * sq + q) * sk + k] = (unsigned char)v;
					cnt += (uint64_t)v;
					if (mask_allows(&m, h, q, k) != v)
						ballow++;
				}
		if (m.area != cnt)
			barea++;
		{
			uint64_t sum = 0;
			for (int h = 0; h < heads; h++)
				sum += mask_head_area(&m, h);
			if (sum != cnt)
				barea++;
		}
		for (int j = 0; j < 3; j++)
			check_both(&m, truth, &r, &bbad, &bbadt, first, sizeof first);
		for (int j = 0; j < 2; j++)
			check_restrict(&m, truth, &r, &rbbad, &rbbadp, first, sizeof first);
		nb++;
		mask_free(&m);
	}
	if (first[0])
		fprintf(stderr, "first problem: %s\n", first);
	ok(bad == 0, "plans of %d random slice masks cover exactly the allowed pairs (%d wrong)", ns, bad);
	ok(badt == 0, "transposed plans of the same (%d wrong)", badt);
	ok(ballow == 0 && barea == 0, "block masks (heads 1 and 4): allows and area == brute force");
	ok(bbad == 0, "plans of %d random block masks (%d wrong)", nb, bbad);
	ok(bbadt == 0, "transposed plans of block masks (%d wrong)", bbadt);
	ok(rbad == 0, "mask_restrict of slice masks to random rectangles is exact (%d wrong)", rbad);
	ok(rbadp == 0, "plans and transposed plans of restricted slice masks (%d wrong)", rbadp);
	ok(rbbad == 0, "mask_restrict of block masks (%d wrong)", rbbad);
	ok(rbbadp == 0, "plans of restricted block masks (%d wrong)", rbbadp);
	{
		struct mask m, o;
		mask_init(&m, 10, 10, "t", "");
		mask_add(&m, 0, 10, 0, 10, MASK_CAUSAL);
		mask_finish(&m, err, sizeof err);
		ok(mask_restrict(&m, 3, 3, 0, 10, &o, err, sizeof err) != 0 &&
		    mask_restrict(&m, 0, 11, 0, 10, &o, err, sizeof err) != 0,
		    "restrict refuses empty and outside ranges: %s", err);
		/* the split the FFA rules need: rows 4..9 of a causal square cut to
		 * keys 2..5 are a causal corner and a full block */
		ok(mask_restrict(&m, 4, 10, 2, 6, &o, err, sizeof err) == 0 && o.nslices == 2 &&
		    o.slices[0].kind == MASK_CAUSAL && o.slices[1].kind == MASK_FULL &&
		    o.slices[0].k1 - o.slices[0].q1 == 2 && o.area == 3 + 20,
		    "causal clipped: causal corner keeps k1-q1, then a full block");
		mask_free(&o);
		mask_free(&m);
	}

	/* one tile cut by a thousand slices (eviction columns): the cut array
	 * grows by more than doubling at once */
	{
		struct mask m;
		int64_t S = 1000;
		int bad1 = 0, dummy = 0;
		mask_init(&m, 8, S, "columns", "");
		g.sq = 8;
		g.sk = S;
		g.n = 0;
		for (int64_t k = 0; k < S; k++) {
			int64_t a = rng_below(&r, 8), b = rng_range(&r, a + 1, 8);
			mask_add(&m, a, b, k, k + 1, MASK_FULL);
			g_add(&g, a, b, k, k + 1, MASK_FULL);
		}
		mask_finish(&m, err, sizeof err);
		for (int64_t q = 0; q < 8; q++)
			for (int64_t k = 0; k < S; k++)
				truth[q * S + k] = (unsigned char)g_count(&g, q, k);
		{
			struct plan p;
			char why[300];
			if (plan_build(&p, &m, 8, 1024, err, sizeof err) != 0 ||
			    check_plan(&p, truth, 8, S, 1, why, sizeof why) != 0 || p.ncut < 900)
				bad1++;
			plan_free(&p);
		}
		for (int j = 0; j < 4; j++)
			check_both(&m, truth, &r, &bad1, &dummy, first, sizeof first);
		ok(bad1 == 0 && dummy == 0, "a tile with 1000 cuts, and other tiles of the same mask");
		mask_free(&m);
	}

	/* shapes that must stay small: one entry per row for full, runs for causal */
	{
		struct mask m;
		struct plan p;
		mask_init(&m, 1 << 20, 1 << 20, "full", "");
		mask_add(&m, 0, 1 << 20, 0, 1 << 20, MASK_FULL);
		mask_finish(&m, err, sizeof err);
		ok(plan_build(&p, &m, 128, 128, err, sizeof err) == 0 && p.nent == p.nrows &&
		    p.ncut == 0 && p.area == m.area, "1M full mask: one entry per row");
		plan_free(&p);
		mask_free(&m);
		mask_init(&m, 1 << 20, 1 << 20, "causal", "");
		mask_add(&m, 0, 1 << 20, 0, 1 << 20, MASK_CAUSAL);
		mask_finish(&m, err, sizeof err);
		{
			int rc = plan_build(&p, &m, 128, 64, err, sizeof err);
			ok(rc == 0 && p.nent <= 3 * p.nrows && p.area == m.area,
			    "1M causal mask: a run and the diagonal per row (%d entries, %d rows)",
			    p.nent, p.nrows);
		}
		plan_free(&p);
		mask_free(&m);
		mask_init(&m, (int64_t)1 << 31, 10, "big", "");
		ok(plan_build(&p, &m, 128, 128, err, sizeof err) != 0 && strstr(err, "2^31"),
		    "plan refuses seqlen 2^31: %s", err);
		mask_free(&m);
	}
	free(truth);
	free(sub);
	return tap_done();
}
