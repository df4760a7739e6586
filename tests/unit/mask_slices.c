/* Slice masks: mask_allows, the closed-form areas and the disjointness check
 * against brute force on random masks of all four kinds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "rng.h"
#include "tap.h"
#include "mask_gen.h"

static struct gmask g;

int main(void)
{
	struct rng r;
	int nmask = 0, bad_finish = 0, bad_allows = 0, bad_area = 0, bad_slice = 0, bad_sorted = 0;
	int overl = 0, nover = 0, bad_over = 0, nsep = 0;
	char err[256], first[512] = "";

	rng_seed(&r, 20261121);
	for (int it = 0; it < 1500; it++) {
		struct mask m;
		int64_t sq = rng_range(&r, 1, it < 300 ? 12 : 90);
		int64_t sk = rng_below(&r, 3) ? sq : rng_range(&r, 1, 90);
		uint64_t cnt = 0;

		g_random(&g, &r, sq, sk);
		nmask++;
		if (g_tomask(&g, &m, err, sizeof err) != 0) {
			if (!bad_finish++)
				snprintf(first, sizeof first, "finish on a disjoint mask: %s", err);
			mask_free(&m);
			continue;
		}
		for (size_t i = 1; i < m.nslices; i++) {
			const struct mask_slice *a = &m.slices[i - 1], *b = &m.slices[i];
			if (a->q0 > b->q0 || (a->q0 == b->q0 && a->k0 > b->k0))
				bad_sorted++;
		}
		for (int64_t q = 0; q < sq; q++)
			for (int64_t k = 0; k < sk; k++) {
				int c = g_count(&g, q, k);
				if (c > 1) {
					fprintf(stderr, "generator overlaps at %lld %lld\n", (long long)q, (long long)k);
					return 1;
				}
				cnt += (uint64_t)c;
				if (mask_allows(&m, 0, q, k) != c && !bad_allows++)
					snprintf(first, sizeof first, "allows(%lld,%lld) != %d",
					    (long long)q, (long long)k, c);
			}
		/* outside the mask nothing is allowed */
		if (mask_allows(&m, 0, -1, 0) || mask_allows(&m, 0, 0, sk) || mask_allows(&m, 0, sq, 0))
			bad_allows++;
		if (m.area != cnt || mask_head_area(&m, 0) != cnt)
			bad_area++;
		for (int i = 0; i < g.n; i++) {
			struct mask_slice s = { g.s[i].q0, g.s[i].q1, g.s[i].k0, g.s[i].k1, g.s[i].kind };
			uint64_t c = 0;
			for (int64_t q = s.q0; q < s.q1; q++)
				for (int64_t k = s.k0; k < s.k1; k++)
					c += (uint64_t)g_allows(&g.s[i], q, k);
			if (mask_slice_area(&s) != c)
				bad_slice++;
		}
		/* one more random slice: finish must fail iff it meets an allowed pair */
		{
			struct gslice x;
			int meets = 0, rc;
			x.q0 = rng_below(&r, (uint64_t)sq);
			x.q1 = rng_range(&r, x.q0 + 1, sq);
			x.k0 = rng_below(&r, (uint64_t)sk);
			x.k1 = rng_range(&r, x.k0 + 1, sk);
			x.kind = (int)rng_below(&r, MASK_NKINDS);
			for (int64_t q = x.q0; q < x.q1 && !meets; q++)
				for (int64_t k = x.k0; k < x.k1; k++)
					if (g_allows(&x, q, k) && g_count(&g, q, k)) {
						meets = 1;
						break;
					}
			mask_add(&m, x.q0, x.q1, x.k0, x.k1, x.kind);
			rc = mask_finish(&m, err, sizeof err);
			if (meets) {
				nover++;
				if (rc == 0 || strstr(err, "overlap") == NULL) {
					if (!bad_over++)
						snprintf(first, sizeof first, "missed overlap of %lld %lld %lld %lld %s",
						    (long long)x.q0, (long long)x.q1, (long long)x.k0,
						    (long long)x.k1, mask_kind_name(x.kind));
				}
			} else {
				nsep++;
				if (rc != 0 && !bad_over++)
					snprintf(first, sizeof first, "false overlap: %s", err);
			}
			overl++;
		}
		mask_free(&m);
	}
	if (first[0])
		fprintf(stderr, "first problem: %s\n", first);
	ok(bad_finish == 0, "mask_finish accepts %d random disjoint masks (%d refused)", nmask, bad_finish);
	ok(bad_sorted == 0, "slices sorted by q0, k0 after mask_finish");
	ok(bad_allows == 0, "mask_allows == brute force on every pair (%d wrong)", bad_allows);
	ok(bad_area == 0, "header area == brute-force count (%d wrong)", bad_area);
	ok(bad_slice == 0, "mask_slice_area == brute force per slice (%d wrong)", bad_slice);
	ok(bad_over == 0 && nover > 50 && nsep > 50,
	    "overlap found iff a pair is covered twice (%d overlapping, %d not, %d wrong)",
	    nover, nsep, bad_over);

	/* thousands of live slices at once (eviction-style columns), so the
	 * sweep's ordered set splits and merges its chunks; plus one random
	 * slice that may or may not meet them; truth by painting pairs */
	{
		int64_t S = 1500;
		unsigned char *paint = malloc((size_t)(S * S));
		int wrong = 0, nmeet = 0;
		for (int it = 0; it < 40; it++) {
			struct mask m;
			int twice = 0, rc;
			memset(paint, 0, (size_t)(S * S));
			mask_init(&m, S, S, "columns", "");
			for (int64_t k = 0; k < S; k++) {
				int64_t a = rng_below(&r, (uint64_t)S), b = rng_range(&r, a + 1, S);
				if (rng_below(&r, 8) == 0)
					continue;
				mask_add(&m, a, b, k, k + 1, MASK_FULL);
				for (int64_t q = a; q < b; q++)
					paint[q * S + k]++;
			}
			{
				struct gslice x;
				x.q0 = rng_below(&r, (uint64_t)S);
				x.q1 = rng_range(&r, x.q0 + 1, it % 2 ? S : x.q0 + 3);
				x.k0 = rng_below(&r, (uint64_t)S);
				x.k1 = rng_range(&r, x.k0 + 1, it % 4 < 2 ? S : x.k0 + 2);
				x.kind = (int)rng_below(&r, MASK_NKINDS);
				mask_add(&m, x.q0, x.q1, x.k0, x.k1, x.kind);
				for (int64_t q = x.q0; q < x.q1; q++)
					for (int64_t k = x.k0; k < x.k1; k++)
						if (g_allows(&x, q, k) && paint[q * S + k]++)
							twice = 1;
			}
			rc = mask_finish(&m, err, sizeof err);
			nmeet += twice;
			if ((rc != 0) != twice)
				wrong++;
			mask_free(&m);
		}
		free(paint);
		ok(wrong == 0 && nmeet > 3 && nmeet < 37,
		    "1500 live column slices: overlap found iff a pair is covered twice (%d of 40 overlap, %d wrong)",
		    nmeet, wrong);
	}

	/* named errors */
	{
		struct mask m;
		static const struct { int64_t q0, q1, k0, k1; int kind; const char *want; } cases[] = {
			{ 5, 3, 0, 4, MASK_FULL, "q1" },
			{ 0, 4, 6, 2, MASK_FULL, "k1" },
			{ 0, 11, 0, 4, MASK_FULL, "outside" },
			{ -1, 4, 0, 4, MASK_FULL, "outside" },
			{ 0, 4, 0, 12, MASK_FULL, "outside" },
			{ 0, 4, 0, 4, 7, "kind" },
		};
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			mask_init(&m, 10, 10, "t", "");
			mask_add(&m, cases[i].q0, cases[i].q1, cases[i].k0, cases[i].k1, cases[i].kind);
			ok(mask_finish(&m, err, sizeof err) != 0 && strstr(err, cases[i].want) != NULL,
			    "finish refuses slice %d: %s", (int)i, err);
			mask_free(&m);
		}
		mask_init(&m, 0, 10, "t", "");
		ok(mask_finish(&m, err, sizeof err) != 0, "finish refuses seqlen 0: %s", err);
		mask_free(&m);
		mask_init(&m, MASK_MAXSEQ, 10, "t", "");
		ok(mask_finish(&m, err, sizeof err) != 0, "finish refuses seqlen 2^32: %s", err);
		mask_free(&m);
		/* empty ranges are dropped, not errors */
		mask_init(&m, 10, 10, "t", "");
		mask_add(&m, 3, 3, 0, 4, MASK_FULL);
		mask_add(&m, 0, 4, 2, 2, MASK_FULL);
		ok(m.nslices == 0 && mask_finish(&m, err, sizeof err) == 0 && m.area == 0,
		    "empty ranges dropped");
		mask_free(&m);
		/* causal and invcausal halves of one rectangle do not overlap, shifted they do */
		mask_init(&m, 10, 10, "t", "");
		mask_add(&m, 0, 10, 0, 10, MASK_CAUSAL);
		mask_add(&m, 0, 9, 1, 10, MASK_INVCAUSAL);
		ok(mask_finish(&m, err, sizeof err) == 0 && m.area == 100,
		    "causal + invcausal complement is the full square");
		mask_free(&m);
		mask_init(&m, 10, 10, "t", "");
		mask_add(&m, 0, 10, 0, 10, MASK_CAUSAL);
		mask_add(&m, 0, 10, 0, 10, MASK_INVCAUSAL);
		ok(mask_finish(&m, err, sizeof err) != 0, "causal + invcausal of one square share the diagonal: %s", err);
		mask_free(&m);
		/* the largest areas do not wrap */
		{
			struct mask_slice s = { 0, MASK_MAXSEQ - 1, 0, MASK_MAXSEQ - 1, MASK_FULL };
			uint64_t n = (uint64_t)MASK_MAXSEQ - 1;
			ok(mask_slice_area(&s) == n * n, "full area at 2^32-1");
			s.kind = MASK_CAUSAL;
			ok(mask_slice_area(&s) == n * (n + 1) / 2, "causal area at 2^32-1");
			s.kind = MASK_BICAUSAL;
			ok(mask_slice_area(&s) == n, "bicausal square area is its diagonal");
		}
		ok(mask_kind_parse("bicausal") == MASK_BICAUSAL && mask_kind_parse("x") == -1 &&
		    strcmp(mask_kind_name(MASK_INVCAUSAL), "invcausal") == 0, "kind names");
	}
	return tap_done();
}
