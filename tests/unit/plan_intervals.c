/* plan_intervals: where it says every line of a plan is one interval (a
 * query row's keys; a transposed plan's key's queries), the intervals are
 * exactly the mask's allowed pairs, over every pattern, tile shape and
 * padded plans; and the patterns the hopper kernel counts on (full,
 * causal, documents, windows, prefix-LM; share_question and
 * random_eviction by key) do get intervals; and random slice masks of
 * every kind, square or not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "pattern.h"
#include "plan.h"
#include "rng.h"
#include "tap.h"
#include "mask_gen.h"

static const int shapes[][2] = { { 128, 128 }, { 128, 64 }, { 64, 128 }, { 64, 64 }, { 128, 176 }, { 7, 5 } };

/* Whether o is past its tile's real prefix (gap: per tile of the other
 * axis, mask_pad_tiles; NULL: none is). */
static int in_gap(const int32_t (*gap)[2], int64_t b, int64_t o)
{
	return gap != NULL && o % b >= gap[o / b][1];
}

/* plan_intervals of p against truth (sq x sk bytes), any answer at gap
 * positions of the other axis; 1 where it found intervals, 0 where not,
 * -1 on a wrong one (why filled) */
static int check(const struct plan *p, const int32_t (*gap)[2], const unsigned char *truth, int64_t sq, int64_t sk,
    char *why, size_t n)
{
	const int t = p->transposed;
	const int64_t lines = t ? (int64_t)p->nkt * p->bk : (int64_t)p->nqt * p->bq, real = t ? sk : sq;
	int32_t (*iv)[2] = malloc((size_t)lines * sizeof *iv);
	int rc;

	if (iv == NULL)
		abort();
	/* poisoned: a line it never writes shows */
	memset(iv, 0x5a, (size_t)lines * sizeof *iv);
	if ((rc = plan_intervals(p, gap, iv)) != 1) {
		free(iv);
		return 0;
	}
	for (int64_t l = 0; l < lines && rc == 1; l++) {
		const int64_t other = t ? sq : sk;
		for (int64_t o = 0; o < other; o++) {
			const int want = l < real && (t ? truth[o * sk + l] : truth[l * sk + o]);
			const int got = o >= iv[l][0] && o < iv[l][1];
			if (want != got && !in_gap(gap, t ? p->bq : p->bk, o)) {
				snprintf(why, n, "%s %lld, %s %lld: interval [%d, %d), mask %d", t ? "key" : "row",
				    (long long)l, t ? "query" : "key", (long long)o, iv[l][0], iv[l][1], want);
				rc = -1;
				break;
			}
		}
	}
	free(iv);
	return rc;
}

/* every shape, both orientations; returns which orientations had
 * intervals everywhere (bit 0 rows, bit 1 keys), or -1 */
static int shapes_of(const struct mask *m, const unsigned char *truth, const char *label)
{
	char err[256], why[256];
	int all = 3;

	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		struct plan p, t;
		if (plan_build(&p, m, shapes[i][0], shapes[i][1], err, sizeof err) != 0 ||
		    plan_transpose(&t, &p, err, sizeof err) != 0) {
			ok(0, "%s: plan %dx%d: %s", label, shapes[i][0], shapes[i][1], err);
			return -1;
		}
		const int r = check(&p, NULL, truth, m->sq, m->sk, why, sizeof why);
		const int k = check(&t, NULL, truth, m->sq, m->sk, why, sizeof why);
		plan_free(&p);
		plan_free(&t);
		if (r < 0 || k < 0) {
			ok(0, "%s %dx%d: %s", label, shapes[i][0], shapes[i][1], why);
			return -1;
		}
		all &= r | k << 1;
	}
	return all;
}

static unsigned char *truth_of(const struct mask *m);

/* m padded for the bwd's 64 x 128 tiles (documents of at least mn on
 * tile edges): the transposed plan's intervals with the gap rows
 * spanned, exact on every real row; want: assert it finds them. */
static void gapped(const struct mask *m, int64_t mn, const char *label, int want)
{
	struct mask v;
	struct mask_pads pd;
	struct plan p, t;
	int32_t (*qt)[2] = NULL, (*kt)[2] = NULL;
	int64_t nq, nk;
	char err[256], why[256];

	if (mask_pad(m, 64, 128, mn, mn == 1 ? 1 : 128, &v, &pd, err, sizeof err) != 1)
		return;
	unsigned char *tv = truth_of(&v);
	if (mask_pad_tiles(pd.q, pd.nq, m->sq, 64, &qt, &nq) != 0 || mask_pad_tiles(pd.k, pd.nk, m->sk, 128, &kt, &nk) != 0 ||
	    plan_build(&p, &v, 64, 128, err, sizeof err) != 0 || plan_transpose(&t, &p, err, sizeof err) != 0) {
		ok(0, "%s padded (%lld): %s", label, (long long)mn, err);
		exit(1);
	}
	const int r = check(&t, (const int32_t (*)[2])qt, tv, v.sq, v.sk, why, sizeof why);
	ok(r >= 0, "%s padded (documents of %lld on edges), gap rows spanned: keys' intervals exact on real rows%s%s",
	    label, (long long)mn, r < 0 ? ": " : "", r < 0 ? why : "");
	if (want)
		ok(r == 1, "%s padded (documents of %lld on edges), gap rows spanned: every key one interval", label,
		    (long long)mn);
	plan_free(&p);
	plan_free(&t);
	free(qt);
	free(kt);
	free(tv);
	mask_free(&v);
	mask_pads_free(&pd);
}

static unsigned char *truth_of(const struct mask *m)
{
	unsigned char *t = malloc((size_t)(m->sq * m->sk));

	if (t == NULL)
		abort();
	for (int64_t q = 0; q < m->sq; q++)
		for (int64_t k = 0; k < m->sk; k++)
			t[q * m->sk + k] = (unsigned char)mask_allows(m, 0, q, k);
	return t;
}

/* rows: the patterns whose every row allows one interval of keys; keys:
 * whose every key is seen by one interval of queries */
static const char *const rows[] = { "full", "causal", "full_document", "causal_document", "prefix_lm_causal",
    "prefix_lm_document", "sliding_window", "sliding_window_causal", NULL };
static const char *const keys[] = { "full", "causal", "full_document", "causal_document", "prefix_lm_causal",
    "prefix_lm_document", "sliding_window", "sliding_window_causal", "share_question", "random_eviction", NULL };

static int listed(const char *const *l, const char *name)
{
	for (; *l != NULL; l++)
		if (strcmp(*l, name) == 0)
			return 1;
	return 0;
}

int main(void)
{
	static const int64_t sizes[] = { 1000, 777 };
	int64_t lens[1024];

	for (const struct pattern *pat = pattern_table; pat->name != NULL; pat++) {
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			const int64_t s = sizes[si];
			struct pattern_args a = {
				.s = s, .seed = 11 + si, .window = PAT_UNSET, .global = PAT_UNSET,
				.prefix = PAT_UNSET, .block = PAT_UNSET, .minblock = PAT_UNSET,
				.avgblock = PAT_UNSET, .buckets = PAT_UNSET, .startrow = PAT_UNSET, .ratio = -1,
			};
			struct rng r;
			struct mask m;
			char err[256], label[96];
			size_t nl = 0;

			if (strcmp(pat->name, "custom") == 0)
				continue;
			if (strcmp(pat->name, "block_causal_document") == 0)
				a.block = si ? 111 : 125;
			rng_seed(&r, a.seed);
			a.rng = &r;
			if (pat->needs & PAT_DOCS) {
				/* documents under a tile and longer, some of one token */
				for (int64_t left = s; left > 0; nl++) {
					int64_t x = rng_below(&r, 5) == 0 ? 1 : rng_range(&r, 1, si ? 300 : 100);
					lens[nl] = x < left ? x : left;
					left -= lens[nl];
				}
				a.lens = lens;
				a.nlens = nl;
			}
			snprintf(label, sizeof label, "%s %lld", pat->name, (long long)s);
			if (pat->build(&m, &a, err, sizeof err) != 0) {
				ok(0, "%s: build: %s", label, err);
				continue;
			}
			if (m.heads != 1 || m.body != MASK_BODY_SLICES) {
				mask_free(&m);
				continue;
			}
			unsigned char *truth = truth_of(&m);
			const int got = shapes_of(&m, truth, label);
			if (got >= 0) {
				ok(1, "%s: every interval plan_intervals gives is exact (6 tile shapes, rows and keys)", label);
				if (listed(rows, pat->name))
					ok(got & 1, "%s: every row's keys one interval at every tile shape", label);
				if (listed(keys, pat->name))
					ok(got >> 1 & 1, "%s: every key's queries one interval at every tile shape", label);
			}
			/* documents moved to tile edges (mask_pad), as the kernels
			 * plan them: the intervals in the padded positions */
			if (pat->needs & PAT_DOCS) {
				struct mask v;
				struct mask_pads pd;
				if (mask_pad(&m, 128, 128, 1, 1, &v, &pd, err, sizeof err) == 1) {
					unsigned char *tv = truth_of(&v);
					ok(shapes_of(&v, tv, label) >= 0, "%s padded to 128-token edges: intervals exact", label);
					free(tv);
					mask_free(&v);
					mask_pads_free(&pd);
				}
			}
			/* the bwd's padded plans (64 x 128, documents of a tile or
			 * more on edges, or all): keys' intervals spanning gap
			 * rows, exact on every real row */
			for (int64_t mn = 1; mn <= 64; mn += 63)
				gapped(&m, mn, label, listed(keys, pat->name) || strcmp(pat->name, "share_question") == 0);
			free(truth);
			mask_free(&m);
		}
	}
	/* random slice masks of every kind (mask_gen.h), square or not:
	 * exact wherever intervals come back, and some do */
	static struct gmask g;
	struct rng r;
	int bad = 0, found = 0;

	rng_seed(&r, 5);
	for (int it = 0; it < 600; it++) {
		const int64_t sq = rng_range(&r, 1, it < 150 ? 16 : 150);
		const int64_t sk = rng_below(&r, 3) ? sq : rng_range(&r, 1, 150);
		struct mask m;
		char err[256];

		g_random(&g, &r, sq, sk);
		if (g_tomask(&g, &m, err, sizeof err) != 0) {
			ok(0, "random mask %d: %s", it, err);
			return tap_done();
		}
		unsigned char *truth = truth_of(&m);
		const int got = shapes_of(&m, truth, "random");
		bad += got < 0;
		found += got > 0;
		free(truth);
		mask_free(&m);
	}
	ok(bad == 0, "600 random masks: every interval plan_intervals gives is exact");
	ok(found >= 100, "random masks with intervals at every tile shape: %d of 600", found);
	return tap_done();
}
