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

static void block_mask(struct mask *m, struct rng *r, int64_t sq, int64_t sk, int heads)
{
	int nq, nk;
	int64_t *qb = g_cuts(r, sq, &nq, 1 + (int)rng_below(r, 10));
	int64_t *kb = g_cuts(r, sk, &nk, 1 + (int)rng_below(r, 10));
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
	char first[600] = "", err[256];
	unsigned char *truth = malloc(4 * 200 * 200);

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
		mask_init(&m, (int64_t)1 << 31, 10, "big", "");
		ok(plan_build(&p, &m, 128, 128, err, sizeof err) != 0 && strstr(err, "2^31"),
		    "plan refuses seqlen 2^31: %s", err);
		mask_free(&m);
	}
	free(truth);
	return tap_done();
}
