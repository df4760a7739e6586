/* mask_pad and mask_pad_tiles on random slice masks, against brute force:
 * the padded mask allows exactly the real pairs moved by the gaps and
 * nothing in a gap; every gap sits where no slice straddles, before a
 * segment at least the minimum long, and ends on a multiple of the
 * alignment; the tiles of each axis hold every real position once, as a
 * prefix of the tile at its moved position; and the padded mask's plan is
 * exact (what the hopper kernel walks). */
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
static const int aligns[] = { 1, 2, 4, 8, 16, 32, 64 };

/* real position -> padded position, gaps pairs (position, length) */
static int64_t moved(const int64_t *gp, size_t n, int64_t x)
{
	int64_t sh = 0;

	for (size_t i = 0; i < n && gp[2 * i] <= x; i++)
		sh += gp[2 * i + 1];
	return x + sh;
}

/* Whether some slice of g straddles position p on the axis (q: 1). */
static int straddled(int q, int64_t p)
{
	for (int i = 0; i < g.n; i++) {
		const int64_t a = q ? g.s[i].q0 : g.s[i].k0, b = q ? g.s[i].q1 : g.s[i].k1;
		if (a < p && p < b)
			return 1;
	}
	return 0;
}

/* The gaps of one axis obey their rules; "" or the first broken one. */
static const char *gaps_ok(int q, const int64_t *gp, size_t n, int64_t len, int a, int64_t min)
{
	int64_t sh = 0;

	for (size_t i = 0; i < n; i++) {
		const int64_t p = gp[2 * i], l = gp[2 * i + 1];
		int64_t next = len;
		if (p <= 0 || p >= len || (i > 0 && p <= gp[2 * i - 2]))
			return "gap position out of order or range";
		if (l < 1 || l >= a)
			return "gap length not in [1, align)";
		if (straddled(q, p))
			return "a slice straddles a gap";
		if ((p + sh + l) % a != 0)
			return "a gap does not end on the alignment";
		/* the segment after p: to the next position nothing straddles
		 * where a slice starts */
		for (int j = 0; j < g.n; j++) {
			const int64_t s0 = q ? g.s[j].q0 : g.s[j].k0;
			if (s0 > p && s0 < next && !straddled(q, s0))
				next = s0;
		}
		if (next - p < min)
			return "a gap before a segment shorter than the minimum";
		sh += l;
	}
	return "";
}

/* Tiles of t over the padded axis hold each real position once. */
static const char *tiles_ok(const int64_t *gp, size_t n, int64_t len, int t)
{
	int32_t (*tl)[2];
	int64_t nt, seen = 0;
	const char *why = "";

	if (mask_pad_tiles(gp, n, len, t, &tl, &nt) != 0)
		return "mask_pad_tiles failed";
	for (int64_t i = 0; i < nt && !*why; i++) {
		if (tl[i][1] < 0 || tl[i][1] > t)
			why = "tile count out of range";
		for (int32_t j = 0; j < tl[i][1] && !*why; j++) {
			if (moved(gp, n, tl[i][0] + j) != i * t + j)
				why = "a tile's real position is not at its padded place";
			seen++;
		}
	}
	if (!*why && seen != len)
		why = "tiles do not hold every real position once";
	free(tl);
	return why;
}

int main(void)
{
	struct rng r;
	char err[256], first[600] = "", why[512];
	int n = 0, npad = 0, bad = 0, badg = 0, badt = 0, badp = 0;
	unsigned char *truth = malloc(200 * 200), *vt = NULL;

	rng_seed(&r, 11);
	for (int it = 0; it < 600; it++) {
		struct mask m, v;
		struct mask_pads pd;
		int64_t s = rng_range(&r, 1, it < 100 ? 24 : 200);
		int aq = aligns[rng_below(&r, 7)], ak = aligns[rng_below(&r, 7)];
		int64_t minq = rng_below(&r, 2) ? 1 : aq, mink = rng_below(&r, 2) ? 1 : ak;
		int rc;

		g_random(&g, &r, s, s);
		if (g_tomask(&g, &m, err, sizeof err) != 0) {
			fprintf(stderr, "mask: %s\n", err);
			return 1;
		}
		n++;
		rc = mask_pad(&m, aq, ak, minq, mink, &v, &pd, err, sizeof err);
		if (rc < 0) {
			if (!bad++)
				snprintf(first, sizeof first, "mask_pad: %s", err);
			mask_free(&m);
			continue;
		}
		if (rc == 0) {
			if (pd.nq != 0 || pd.nk != 0)
				bad++;
			mask_free(&m);
			continue;
		}
		npad++;
		for (int64_t q = 0; q < s; q++)
			for (int64_t k = 0; k < s; k++)
				truth[q * s + k] = (unsigned char)g_count(&g, q, k);
		/* every padded pair: allowed iff it is a moved real pair allowed */
		if ((vt = realloc(vt, (size_t)(v.sq * v.sk))) == NULL) {
			fprintf(stderr, "out of memory\n");
			return 1;
		} else {
			memset(vt, 0, (size_t)(v.sq * v.sk));
			for (int64_t q = 0; q < s; q++)
				for (int64_t k = 0; k < s; k++)
					vt[moved(pd.q, pd.nq, q) * v.sk + moved(pd.k, pd.nk, k)] = truth[q * s + k];
			for (int64_t q = 0; q < v.sq; q++)
				for (int64_t k = 0; k < v.sk; k++)
					if (mask_allows(&v, 0, q, k) != (vt[q * v.sk + k] != 0) && !bad++)
						snprintf(first, sizeof first, "padded mask wrong at (%lld,%lld), %lldx%lld",
						    (long long)q, (long long)k, (long long)s, (long long)s);
			if (v.area != m.area)
				bad++;
		}
		{
			const char *w = gaps_ok(1, pd.q, pd.nq, s, aq, minq);
			if (!*w)
				w = gaps_ok(0, pd.k, pd.nk, s, ak, mink);
			if (*w && !badg++)
				snprintf(first, sizeof first, "%s (%lld, align %d/%d)", w, (long long)s, aq, ak);
			w = tiles_ok(pd.q, pd.nq, s, aq);
			if (!*w)
				w = tiles_ok(pd.k, pd.nk, s, ak);
			if (*w && !badt++)
				snprintf(first, sizeof first, "%s (%lld, align %d/%d)", w, (long long)s, aq, ak);
		}
		{
			struct plan p;
			if (plan_build(&p, &v, aq, ak, err, sizeof err) != 0 ||
			    check_plan(&p, vt, v.sq, v.sk, 1, why, sizeof why) != 0) {
				if (!badp++)
					snprintf(first, sizeof first, "plan of the padded mask: %s", why);
			} else {
				plan_free(&p);
			}
		}
		mask_pads_free(&pd);
		mask_free(&v);
		mask_free(&m);
	}
	/* block bodies and masks with nothing to move: no gaps */
	{
		struct mask m, v;
		struct mask_pads pd;
		mask_init(&m, 100, 100, "t", "");
		mask_add(&m, 0, 100, 0, 100, MASK_CAUSAL);
		mask_finish(&m, err, sizeof err);
		ok(mask_pad(&m, 64, 128, 1, 1, &v, &pd, err, sizeof err) == 0 && pd.nq == 0,
		    "a causal mask has nothing to move");
		mask_free(&m);
		/* documents of 100 and 60: the second starts at 100, moved to 128 */
		mask_init(&m, 160, 160, "t", "");
		mask_add(&m, 0, 100, 0, 100, MASK_CAUSAL);
		mask_add(&m, 100, 160, 100, 160, MASK_FULL);
		mask_finish(&m, err, sizeof err);
		ok(mask_pad(&m, 64, 128, 1, 1, &v, &pd, err, sizeof err) == 1 && pd.nq == 1 && pd.q[0] == 100 &&
		    pd.q[1] == 28 && pd.nk == 1 && pd.k[1] == 28 && v.sq == 188 && v.sk == 188 &&
		    mask_allows(&v, 0, 128, 128) && !mask_allows(&v, 0, 110, 110),
		    "two documents: the second moves to 128 on both axes");
		mask_pads_free(&pd);
		mask_free(&v);
		ok(mask_pad(&m, 64, 128, 64, 128, &v, &pd, err, sizeof err) == 0,
		    "a document shorter than the minimum does not move");
		mask_free(&m);
	}
	if (first[0])
		fprintf(stderr, "first problem: %s\n", first);
	ok(npad > 100, "%d of %d random slice masks had gaps", npad, n);
	ok(bad == 0, "padded masks allow exactly the moved real pairs, same area (%d wrong)", bad);
	ok(badg == 0, "gaps only where no slice straddles, before long enough segments, ending aligned (%d wrong)",
	    badg);
	ok(badt == 0, "tiles hold every real position once, at its moved place (%d wrong)", badt);
	ok(badp == 0, "plans of padded masks are exact (%d wrong)", badp);
	free(truth);
	free(vt);
	return tap_done();
}
