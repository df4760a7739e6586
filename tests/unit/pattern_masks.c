/* Every pattern against a brute-force predicate written here from
 * masks.md (and FlashMask's generators for the last three): on every
 * (q,k) and head, mask_allows must agree, and the header area must equal
 * the brute-force count.  Several sizes, seeds and parameters each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mask.h"
#include "pattern.h"
#include "rng.h"
#include "tap.h"

/* The case being checked, as the predicate sees it. */
struct tc {
	const char *name;
	int64_t s;
	int64_t *lens, nl;        /* documents (NULL: none) */
	int64_t *start;           /* start[d], start[nl] = s */
	int64_t w, g, p, B, r, buckets;
	int64_t spans[8][2];
	int nspans;
	int64_t *bucket;          /* hash_sparse: bucket of token */
	int64_t *evict;           /* random_eviction: e(k) */
	const struct mask *m;     /* block bodies: the kept blocks are the random output */
};

static int64_t doc(const struct tc *t, int64_t i)
{
	int64_t d = 0;

	while (t->start[d + 1] <= i)
		d++;
	return d;
}

static int64_t param(const struct mask *m, const char *key)
{
	const char *p = strstr(m->params, key);

	return p == NULL ? -1 : atoll(p + strlen(key));
}

/* The kept block of (q,k), found from the boundaries by a linear walk. */
static int block_kept(const struct mask *m, int h, int64_t q, int64_t k)
{
	int64_t i = 0, j = 0;

	while (m->qb[i + 1] <= q)
		i++;
	while (m->kb[j + 1] <= k)
		j++;
	return (m->bits[((h * m->nqb + i) * m->nkb + j) / 8] >> (((h * m->nqb + i) * m->nkb + j) % 8)) & 1;
}

static int truth(const struct tc *t, int h, int64_t q, int64_t k)
{
	const char *n = t->name;
	int64_t dq, dk, last;

	if (!strcmp(n, "full"))
		return 1;
	if (!strcmp(n, "causal"))
		return k <= q;
	if (!strcmp(n, "sliding_window"))
		return llabs(q - k) <= t->w;
	if (!strcmp(n, "sliding_window_causal"))
		return q - k >= 0 && q - k <= t->w;
	if (!strcmp(n, "global_sliding_window"))
		return llabs(q - k) <= t->w || q < t->g || k < t->g;
	if (!strcmp(n, "prefix_lm_causal"))
		return k < t->p || k <= q;
	if (!strcmp(n, "block_sparse_uniform") || !strcmp(n, "block_sparse_variable"))
		return block_kept(t->m, h, q, k);
	if (!strcmp(n, "qk_sparse")) {
		if (k > q)
			return 0;
		for (int i = 0; i < t->nspans; i++)
			if (t->spans[i][0] <= k && k <= q && q < t->spans[i][0] + t->spans[i][1])
				return 0;
		return 1;
	}
	if (!strcmp(n, "hash_sparse"))
		return t->bucket[q] == t->bucket[k] && k <= q;
	if (!strcmp(n, "random_eviction"))
		return k <= q && q < t->evict[k];
	dq = doc(t, q);
	dk = doc(t, k);
	last = t->nl - 1;
	if (!strcmp(n, "full_document"))
		return dq == dk;
	if (!strcmp(n, "causal_document"))
		return dq == dk && k <= q;
	if (!strcmp(n, "share_question"))
		return (dk == dq && k <= q) || (dq > 0 && dk == 0);
	if (!strcmp(n, "causal_blockwise"))
		return (dk == dq && k <= q) || (dq == last && k <= q);
	if (!strcmp(n, "prefix_lm_document"))
		return dq == dk && (k - t->start[dq] < t->p || k <= q);
	if (!strcmp(n, "block_causal_document"))
		return dq == dk && k < t->start[dq] + ((q - t->start[dq]) / t->B + 1) * t->B;
	abort();
}

static void set_docs(struct tc *t, const int64_t *lens, int64_t nl)
{
	t->nl = nl;
	t->lens = malloc((size_t)nl * sizeof *t->lens);
	t->start = malloc((size_t)(nl + 1) * sizeof *t->start);
	memcpy(t->lens, lens, (size_t)nl * sizeof *lens);
	t->start[0] = 0;
	for (int64_t d = 0; d < nl; d++)
		t->start[d + 1] = t->start[d] + lens[d];
}

/* Builds through the table and checks every pair of every head. */
static void run(struct tc *t, struct pattern_args *a, const char *label)
{
	const struct pattern *pat = pattern_find(t->name);
	struct mask m;
	struct rng r;
	char err[512];
	uint64_t area = 0;
	int64_t bad = 0, bq = -1, bk = -1;

	rng_seed(&r, a->seed);
	a->rng = &r;
	a->s = t->s;
	if (pat == NULL || pat->build(&m, a, err, sizeof err) == -1) {
		ok(0, "%s %s: build: %s", t->name, label, pat ? err : "not in the table");
		return;
	}
	/* Random parameters the builder drew are in the header text. */
	if (t->w < 0) t->w = param(&m, "w=");
	if (t->g < 0) t->g = param(&m, "g=");
	if (t->p < 0) t->p = param(&m, "p=");
	t->m = &m;
	for (int h = 0; h < m.heads; h++)
		for (int64_t q = 0; q < t->s; q++)
			for (int64_t k = 0; k < t->s; k++) {
				int want = truth(t, h, q, k), got = mask_allows(&m, h, q, k);

				area += (uint64_t)want;
				if (want != got && bad++ == 0) {
					bq = q;
					bk = k;
				}
			}
	ok(bad == 0, "%s %s: mask_allows agrees on %lld pairs x %d heads%s", t->name, label,
	    (long long)(t->s * t->s), m.heads, bad ? "" : "");
	if (bad)
		printf("# first disagreement at q=%lld k=%lld (%lld in all) params '%s'\n", (long long)bq,
		    (long long)bk, (long long)bad, m.params);
	ok(m.area == area, "%s %s: area %llu == brute force %llu", t->name, label,
	    (unsigned long long)m.area, (unsigned long long)area);
	ok(strcmp(m.pattern, t->name) == 0, "%s %s: pattern name in the header", t->name, label);
	mask_free(&m);
}

static struct pattern_args defaults(uint64_t seed)
{
	struct pattern_args a = {
		.seed = seed, .window = PAT_UNSET, .global = PAT_UNSET, .prefix = PAT_UNSET,
		.block = PAT_UNSET, .minblock = PAT_UNSET, .avgblock = PAT_UNSET,
		.buckets = PAT_UNSET, .startrow = PAT_UNSET, .ratio = -1,
	};
	return a;
}

static struct tc blank(const char *name, int64_t s)
{
	struct tc t = { .name = name, .s = s, .w = -1, .g = -1, .p = -1, .B = -1 };
	return t;
}

static void freetc(struct tc *t)
{
	free(t->lens);
	free(t->start);
	free(t->bucket);
	free(t->evict);
}

/* Random document lengths, a few of length 1, summing to s. */
static int64_t randdocs(struct rng *r, int64_t s, int64_t *lens, int64_t maxlen)
{
	int64_t n = 0;

	while (s > 0) {
		int64_t x = rng_below(r, 4) == 0 ? 1 : rng_range(r, 1, maxlen);

		if (x > s)
			x = s;
		lens[n++] = x;
		s -= x;
	}
	return n;
}

int main(void)
{
	static const char *const docpats[] = {
		"full_document", "causal_document", "share_question", "causal_blockwise", "prefix_lm_document",
		"block_causal_document",
	};
	static const int64_t sizes[] = { 1, 2, 7, 33, 100 };
	struct rng r;
	int64_t lens[512];
	char label[128];

	rng_seed(&r, 12345);
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		int64_t s = sizes[si];

		for (uint64_t seed = 1; seed <= 3; seed++) {
			struct pattern_args a;
			struct tc t;

			snprintf(label, sizeof label, "S=%lld seed=%llu", (long long)s, (unsigned long long)seed);
			t = blank("full", s); a = defaults(seed); run(&t, &a, label); freetc(&t);
			t = blank("causal", s); a = defaults(seed); run(&t, &a, label); freetc(&t);

			/* documents: lengths as -L gives them */
			for (size_t d = 0; d < sizeof docpats / sizeof docpats[0]; d++) {
				int64_t nl = randdocs(&r, s, lens, s < 10 ? 3 : s / 3);

				t = blank(docpats[d], s);
				a = defaults(seed);
				set_docs(&t, lens, nl);
				a.lens = lens;
				a.nlens = (size_t)nl;
				a.docsrc = "test";
				if (!strcmp(docpats[d], "prefix_lm_document") && seed == 2)
					a.prefix = t.p = rng_range(&r, 1, s + 2);
				if (!strcmp(docpats[d], "block_causal_document"))
					a.block = t.B = rng_range(&r, 1, 8);
				run(&t, &a, label);
				freetc(&t);
			}

			/* windows: defaults (capped at S-1 for short S), explicit, 0 and S */
			for (int v = 0; v < 4; v++) {
				int64_t w = v == 0 ? PAT_UNSET : v == 1 ? rng_range(&r, 0, s) : v == 2 ? 0 : s;

				t = blank("sliding_window", s); a = defaults(seed);
				a.window = w; t.w = w == PAT_UNSET ? (s > 1024 ? 1024 : s - 1) : w;
				run(&t, &a, label); freetc(&t);
				t = blank("sliding_window_causal", s); a = defaults(seed);
				a.window = w; t.w = w == PAT_UNSET ? (s > 1024 ? 1024 : s - 1) : w;
				run(&t, &a, label); freetc(&t);
				t = blank("global_sliding_window", s); a = defaults(seed);
				if (v > 0) {
					a.window = t.w = w;
					a.global = t.g = rng_range(&r, 0, s);
				}
				run(&t, &a, label); freetc(&t);
			}
			t = blank("prefix_lm_causal", s); a = defaults(seed); run(&t, &a, label); freetc(&t);
			t = blank("prefix_lm_causal", s); a = defaults(seed);
			a.prefix = t.p = rng_range(&r, 1, s); run(&t, &a, label); freetc(&t);

			/* block sparse: the kept blocks are checked through the bitmap, the
			 * structure below */
			t = blank("block_sparse_uniform", s); a = defaults(seed);
			a.block = rng_range(&r, 1, s); a.heads = (int)rng_range(&r, 1, 3);
			a.ratio = (double)rng_range(&r, 1, 10) / 10;
			run(&t, &a, label); freetc(&t);
			t = blank("block_sparse_variable", s); a = defaults(seed);
			a.minblock = rng_range(&r, 1, s); a.avgblock = rng_range(&r, a.minblock, s);
			a.heads = 2; a.ratio = 0.3;
			run(&t, &a, label); freetc(&t);

			/* qk_sparse: explicit spans (gaps >= 1), and the default */
			if (s >= 8) {
				char spans[96];

				t = blank("qk_sparse", s); a = defaults(seed);
				t.nspans = 2;
				t.spans[0][0] = rng_range(&r, 1, s / 4); t.spans[0][1] = rng_range(&r, 1, s / 4);
				t.spans[1][0] = t.spans[0][0] + t.spans[0][1] + rng_range(&r, 1, s / 4);
				t.spans[1][1] = rng_range(&r, 1, s - t.spans[1][0]);
				snprintf(spans, sizeof spans, "%lld:%lld,%lld:%lld", (long long)t.spans[0][0],
				    (long long)t.spans[0][1], (long long)t.spans[1][0], (long long)t.spans[1][1]);
				a.spans = spans;
				run(&t, &a, label); freetc(&t);
			}
			t = blank("qk_sparse", s); a = defaults(seed);
			{
				/* FlashMask's 8K spans (1024,538), (2358,1700), scaled to S */
				int64_t o1 = 1024 * s / 8192, l1 = 538 * s / 8192, o2 = 2358 * s / 8192, l2 = 1700 * s / 8192;

				if (o1 >= 1 && l1 >= 1) {
					t.spans[t.nspans][0] = o1; t.spans[t.nspans++][1] = l1;
				}
				if (o2 >= 1 && l2 >= 1 && o2 > (t.nspans ? o1 + l1 : 0)) {
					t.spans[t.nspans][0] = o2; t.spans[t.nspans++][1] = l2;
				}
			}
			run(&t, &a, label); freetc(&t);

			/* hash_sparse: every token draws its bucket in order; the
			 * sequence is taken bucket-sorted */
			for (int64_t nb = 1; nb <= (s < 5 ? s : 5); nb += 2) {
				struct rng rr;
				int64_t cnt[8] = { 0 }, at = 0;

				t = blank("hash_sparse", s); a = defaults(seed); a.buckets = nb;
				rng_seed(&rr, seed);
				for (int64_t i = 0; i < s; i++)
					cnt[rng_below(&rr, (uint64_t)nb)]++;
				t.bucket = malloc((size_t)s * sizeof *t.bucket);
				for (int64_t b = 0; b < nb; b++)
					for (int64_t i = 0; i < cnt[b]; i++)
						t.bucket[at++] = b;
				run(&t, &a, label); freetc(&t);
			}

			/* random_eviction, as FlashMask writes it: mask_pos = S - r draws from
			 * 0..S-2, index = r..S-1, mask_pos reordered to
			 * [mask_pos < index - 1] ++ [mask_pos >= index - 1], e[mask_pos] = index */
			for (int v = 0; v < 2; v++) {
				struct rng rr;
				int64_t rs = v == 0 ? (s / 2 > 0 ? s / 2 : 1) : rng_range(&r, 1, s), *pool;

				t = blank("random_eviction", s); a = defaults(seed);
				if (v)
					a.startrow = rs;
				rng_seed(&rr, seed);
				t.evict = malloc((size_t)s * sizeof *t.evict);
				pool = malloc((size_t)s * sizeof *pool);
				for (int64_t k = 0; k < s; k++) {
					t.evict[k] = s;
					pool[k] = k;
				}
				for (int64_t i = 0; i < s - rs; i++) {
					int64_t j = i + (int64_t)rng_below(&rr, (uint64_t)(s - 1 - i)), x = pool[j];

					pool[j] = pool[i];
					pool[i] = x;
				}
				{
					int64_t *order = malloc((size_t)s * sizeof *order), no = 0;

					for (int64_t i = 0; i < s - rs; i++)
						if (pool[i] < rs + i - 1)
							order[no++] = pool[i];
					for (int64_t i = 0; i < s - rs; i++)
						if (!(pool[i] < rs + i - 1))
							order[no++] = pool[i];
					for (int64_t j = 0; j < no; j++)
						t.evict[order[j]] = rs + j;
					free(order);
				}
				free(pool);
				run(&t, &a, label); freetc(&t);
			}
		}
	}

	/* block_causal_document sampling its own documents: 1..8 blocks each */
	for (uint64_t seed = 1; seed <= 3; seed++) {
		struct pattern_args a = defaults(seed);
		struct tc t = blank("block_causal_document", 96);
		struct rng rr;
		int64_t nl = 0, left = 96 / 4;

		a.block = t.B = 4;
		rng_seed(&rr, seed);
		while (left > 0) {
			int64_t nb = rng_range(&rr, 1, 8);

			nb = nb > left ? left : nb;
			lens[nl++] = nb * 4;
			left -= nb;
		}
		set_docs(&t, lens, nl);
		snprintf(label, sizeof label, "S=96 B=4 sampled seed=%llu", (unsigned long long)seed);
		run(&t, &a, label);
		freetc(&t);
	}

	/* block-sparse structure: boundaries and the number kept per row */
	for (uint64_t seed = 1; seed <= 3; seed++) {
		struct pattern_args a = defaults(seed);
		struct mask m;
		struct rng rr;
		char err[256];
		int good = 1;
		int64_t keep;

		rng_seed(&rr, seed);
		a.rng = &rr;
		a.s = 1000;
		a.block = 64;
		a.ratio = 0.3;
		a.heads = 3;
		if (pattern_find("block_sparse_uniform")->build(&m, &a, err, sizeof err) == -1) {
			ok(0, "block_sparse_uniform 1000: %s", err);
			continue;
		}
		keep = llround(0.3 * (double)m.nkb);
		for (int64_t i = 0; i <= m.nqb; i++)
			good &= m.qb[i] == (i < m.nqb ? i * 64 : 1000) && m.kb[i] == m.qb[i];
		for (int h = 0; h < m.heads; h++)
			for (int64_t i = 0; i < m.nqb; i++) {
				int64_t n = 0;

				for (int64_t j = 0; j < m.nkb; j++)
					n += mask_getblock(&m, h, i, j);
				good &= n == keep;
			}
		ok(good && m.heads == 3 && m.nqb == 16, "block_sparse_uniform seed=%llu: blocks of 64, %lld kept per row",
		    (unsigned long long)seed, (long long)keep);
		mask_free(&m);

		rng_seed(&rr, seed);
		a.block = PAT_UNSET;
		a.minblock = 20;
		a.avgblock = 50;
		a.ratio = 0.5;
		if (pattern_find("block_sparse_variable")->build(&m, &a, err, sizeof err) == -1) {
			ok(0, "block_sparse_variable 1000: %s", err);
			continue;
		}
		good = m.qb[0] == 0 && m.qb[m.nqb] == 1000 && m.kb[0] == 0 && m.kb[m.nkb] == 1000;
		for (int64_t i = 0; i < m.nqb; i++)
			good &= m.qb[i + 1] - m.qb[i] >= 20;
		for (int64_t j = 0; j < m.nkb; j++)
			good &= m.kb[j + 1] - m.kb[j] >= 20;
		ok(good && m.nqb > 10 && m.nqb < 40, "block_sparse_variable seed=%llu: %lld x %lld blocks, none under 20",
		    (unsigned long long)seed, (long long)m.nqb, (long long)m.nkb);
		mask_free(&m);
	}

	/* Many key blocks: both ways of drawing a row (random words fixed up,
	 * partial Fisher-Yates) keep exactly round(ratio * n) per row, and
	 * every column is kept about ratio of the time (6 sigma). */
	for (int v = 0; v < 2; v++) {
		double ratio = v == 0 ? 0.5 : 0.3;
		struct pattern_args a = defaults(5);
		struct mask m;
		struct rng rr;
		char err[256];
		int good = 1;
		int64_t keep, *col;
		double sd;

		rng_seed(&rr, 5);
		a.rng = &rr;
		a.s = 4096;
		a.block = 4;
		a.ratio = ratio;
		a.heads = 2;
		if (pattern_find("block_sparse_uniform")->build(&m, &a, err, sizeof err) == -1) {
			ok(0, "block_sparse_uniform 1024 blocks: %s", err);
			continue;
		}
		keep = llround(ratio * 1024);
		col = calloc(1024, sizeof *col);
		for (int h = 0; h < 2; h++)
			for (int64_t i = 0; i < m.nqb; i++) {
				int64_t n = 0;

				for (int64_t j = 0; j < m.nkb; j++) {
					n += mask_getblock(&m, h, i, j);
					col[j] += mask_getblock(&m, h, i, j);
				}
				good &= n == keep;
			}
		sd = sqrt(2048 * ratio * (1 - ratio));
		for (int64_t j = 0; j < 1024; j++)
			good &= fabs((double)col[j] - 2048 * ratio) < 6 * sd;
		ok(good, "block_sparse_uniform 1024 x 1024 blocks, ratio %.1f: %lld per row, columns uniform", ratio,
		    (long long)keep);
		free(col);
		mask_free(&m);
	}

	/* custom: a slice list against the FFA definitions */
	{
		char path[] = "/tmp/pattern_custom.XXXXXX";
		int fd = mkstemp(path);
		FILE *fp = fdopen(fd, "w");
		struct pattern_args a = defaults(0);
		struct mask m;
		struct rng rr;
		char err[256];
		int64_t bad = 0;
		uint64_t area = 0;

		fprintf(fp, "# a comment\n0 10 0 10 causal\n10 20 0 10 full\n\n10 20 10 30 bicausal\n"
		    "20 30 15 30 invcausal\n");
		fclose(fp);
		rng_seed(&rr, 0);
		a.rng = &rr;
		a.s = 30;
		a.file = path;
		if (pattern_find("custom")->build(&m, &a, err, sizeof err) == -1) {
			ok(0, "custom: %s", err);
		} else {
			for (int64_t q = 0; q < 30; q++)
				for (int64_t k = 0; k < 30; k++) {
					int want = (q < 10 && k <= q) || (q >= 10 && q < 20 && k < 10) ||
					    (q >= 10 && q < 20 && k >= 10 && k - q >= 0 && k - q <= 10) ||
					    (q >= 20 && k >= 15 && k - q >= -5);
					area += (uint64_t)want;
					bad += want != mask_allows(&m, 0, q, k);
				}
			ok(bad == 0 && m.area == area, "custom: four kinds agree with the FFA definitions, area %llu",
			    (unsigned long long)area);
			mask_free(&m);
		}
		fp = fopen(path, "w");
		fprintf(fp, "0 10 0 10 full\n5 15 5 15 full\n");
		fclose(fp);
		ok(pattern_find("custom")->build(&m, &a, err, sizeof err) == -1 && strstr(err, path) != NULL,
		    "custom: overlapping slices refused: %s", err);
		mask_free(&m);
		fp = fopen(path, "w");
		fprintf(fp, "10 5 0 10 full\n");
		fclose(fp);
		ok(pattern_find("custom")->build(&m, &a, err, sizeof err) == -1 && strstr(err, ":1:") != NULL,
		    "custom: q1 < q0 refused: %s", err);
		mask_free(&m);
		unlink(path);
	}
	return tap_done();
}
