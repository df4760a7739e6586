/* libFuzzer harness for length lists, the input of seqsample -H and of
 * maskgen -L.  A list that reads holds lengths in [1, 2^32); seqsample -H's
 * histogram of it (powers of two and a fixed width) counts every length
 * once and reads back through hist_parse as printed; and when the lengths
 * sum to a small S, the document patterns that maskgen -L builds from them
 * allow exactly the pairs their definitions say, checked pair by pair. */
#include <math.h>

#include "fuzz.h"
#include "hist.h"
#include "mask.h"
#include "pattern.h"
#include "mask_gen.h"        /* g_allows: the FFA predicate, written apart */

enum { MAXS = 256, MAXCHECKBINS = 1 << 12 };

static int64_t bin_count(const struct lens *l, int64_t lo, int64_t hi)
{
	int64_t c = 0;

	for (size_t i = 0; i < l->n; i++)
		c += l->v[i] >= lo && l->v[i] < hi;
	return c;
}

/* seqsample -H [-w width]: the histogram, printed and read back */
static void histogram(const struct lens *l, int64_t width, int64_t minv, int64_t maxv)
{
	struct hist h, back;
	char err[512], *buf = NULL;
	size_t len = 0;
	int64_t nb, total = 0;
	FILE *fp;

	if (width > 0)
		nb = maxv / width - minv / width + 1;
	else
		nb = (int64_t)(63 - __builtin_clzll((uint64_t)maxv)) - (63 - __builtin_clzll((uint64_t)minv)) + 1;
	if (hist_make(&h, l, width, err, sizeof err) != 0) {
		fz_refusal(err);
		fz_assert(nb > HIST_MAXBINS, "hist_make refused %lld bins: %s", (long long)nb, err);
		return;
	}
	fz_assert(nb <= HIST_MAXBINS && (int64_t)h.n == nb, "%zu bins, want %lld", h.n, (long long)nb);
	for (size_t i = 0; i < h.n; i++) {
		int64_t c = (int64_t)h.cum[i] - (i ? (int64_t)h.cum[i - 1] : 0);
		fz_assert(i == 0 || h.lo[i] == h.hi[i - 1], "bins %zu and %zu not adjacent", i - 1, i);
		fz_assert(c == bin_count(l, h.lo[i], h.hi[i]), "bin [%lld, %lld) counts %lld",
		    (long long)h.lo[i], (long long)h.hi[i], (long long)c);
		total += c;
	}
	fz_assert(total == (int64_t)l->n && h.lo[0] <= minv && h.hi[h.n - 1] > maxv, "bins miss lengths");
	fp = open_memstream(&buf, &len);
	hist_write(fp, &h);
	fclose(fp);
	fp = fmemopen(buf, len, "rb");
	fz_assert(hist_parse(&back, fp, "hist.tsv", err, sizeof err) == 0,
	    "seqsample -H printed what -d refuses: %s", err);
	fclose(fp);
	fz_assert(back.n == h.n, "read back %zu bins of %zu", back.n, h.n);
	for (size_t i = 0; i < h.n; i++) {
		double w = h.cum[i] - (i ? h.cum[i - 1] : 0), wb = back.cum[i] - (i ? back.cum[i - 1] : 0);
		fz_assert(back.lo[i] == h.lo[i] && back.hi[i] == h.hi[i], "bin %zu read back", i);
		fz_assert(fabs(wb - w / (double)l->n) <= 1e-8 * (w / (double)l->n) + 1e-12,
		    "bin %zu weight %.17g read back %.17g", i, w / (double)l->n, wb);
	}
	hist_free(&back);
	hist_free(&h);
	free(buf);
}

/* pattern NAME's definition at (q,k); doc[x] is x's document, st[d] its start */
static int defined(const char *name, const int64_t *doc, const int64_t *st, int64_t ndoc,
                   int64_t p, int64_t B, int64_t q, int64_t k)
{
	int64_t dq = doc[q], dk = doc[k], s = st[dq];

	if (strcmp(name, "full_document") == 0)
		return dq == dk;
	if (strcmp(name, "causal_document") == 0)
		return dq == dk && k <= q;
	if (strcmp(name, "share_question") == 0)
		return (dq == dk && k <= q) || (dk == 0 && dq != 0);
	if (strcmp(name, "causal_blockwise") == 0)
		return (dq == dk && k <= q) || (dq == ndoc - 1 && dk != ndoc - 1);
	if (strcmp(name, "prefix_lm_document") == 0)
		return dq == dk && (k - s < p || k <= q);
	if (strcmp(name, "block_causal_document") == 0)
		return dq == dk && (k - s) / B <= (q - s) / B;
	abort();
}

/* the slices' pairs, each counted once per slice that allows it */
static void paint(const struct mask *m, unsigned char *t)
{
	memset(t, 0, (size_t)(m->sq * m->sk));
	for (size_t i = 0; i < m->nslices; i++) {
		const struct mask_slice *x = &m->slices[i];
		struct gslice g = { x->q0, x->q1, x->k0, x->k1, x->kind };
		for (int64_t q = g.q0; q < g.q1; q++)
			for (int64_t k = g.k0; k < g.k1; k++)
				t[q * m->sk + k] += (unsigned char)g_allows(&g, q, k);
	}
}

/* maskgen -p NAME -n S -L lengths, for the patterns that take documents */
static void documents(const struct lens *l, int64_t s, uint64_t seed)
{
	static const char *names[] = { "full_document", "causal_document", "share_question",
	    "causal_blockwise", "prefix_lm_document", "block_causal_document" };
	static unsigned char got[MAXS * MAXS];
	int64_t doc[MAXS], st[MAXS], x = 0;

	for (size_t d = 0; d < l->n; d++) {
		st[d] = x;
		for (int64_t i = 0; i < l->v[d]; i++)
			doc[x++] = (int64_t)d;
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const struct pattern *pat = pattern_find(names[i]);
		struct pattern_args a = {
			.s = s, .seed = seed, .lens = l->v, .nlens = l->n,
			.window = PAT_UNSET, .global = PAT_UNSET, .prefix = 1 + (int64_t)(seed % 300),
			.block = 1 + (int64_t)(seed >> 12) % 40, .minblock = PAT_UNSET, .avgblock = PAT_UNSET,
			.buckets = PAT_UNSET, .startrow = PAT_UNSET, .ratio = -1,
		};
		struct rng r;
		struct mask m;
		char err[512];
		uint64_t area = 0;

		rng_seed(&r, seed);
		a.rng = &r;
		fz_assert(pat != NULL && (pat->needs & (PAT_DOCS | PAT_OWNDOCS)), "%s takes no lengths", names[i]);
		fz_assert(pat->build(&m, &a, err, sizeof err) == 0, "%s refused valid lengths: %s", names[i], err);
		paint(&m, got);
		for (int64_t q = 0; q < s; q++)
			for (int64_t k = 0; k < s; k++) {
				int want = defined(names[i], doc, st, (int64_t)l->n, a.prefix, a.block, q, k);
				fz_assert(got[q * s + k] == want, "%s at (%lld, %lld): %d slices, want %d",
				    names[i], (long long)q, (long long)k, got[q * s + k], want);
				area += (uint64_t)want;
			}
		/* mask_allows scans back over the slices: a sample */
		for (int j = 0; j < 16; j++) {
			uint64_t x = fz_mix(seed + (uint64_t)j);
			int64_t q = (int64_t)(x % (uint64_t)s), k = (int64_t)(x >> 32) % s;
			fz_assert(mask_allows(&m, 0, q, k) == got[q * s + k], "mask_allows(%lld, %lld)",
			    (long long)q, (long long)k);
		}
		fz_assert(m.area == area, "%s area %llu, want %llu", names[i],
		    (unsigned long long)m.area, (unsigned long long)area);
		mask_free(&m);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lens l = { 0 };
	char err[512];
	FILE *fp = fz_open(data, size);
	int64_t minv = INT64_MAX, maxv = 0, sum = 0, w;
	uint64_t seed = size;

	if (fp == NULL)
		return 0;
	if (hist_read_lengths(fp, "lens.tsv", &l, err, sizeof err) != 0) {
		fclose(fp);
		free(l.v);
		fz_refusal(err);
		fz_assert(strncmp(err, "lens.tsv", 8) == 0, "message does not name the input: %s", err);
		return 0;
	}
	fclose(fp);
	fz_assert(l.n > 0, "no lengths, no refusal");
	for (size_t i = 0; i < l.n; i++) {
		fz_assert(l.v[i] >= 1 && l.v[i] < HIST_MAXLEN, "length %lld", (long long)l.v[i]);
		minv = l.v[i] < minv ? l.v[i] : minv;
		maxv = l.v[i] > maxv ? l.v[i] : maxv;
		if (sum <= MAXS)
			sum += l.v[i];
		seed = fz_mix(seed ^ (uint64_t)l.v[i]);
	}
	histogram(&l, 0, minv, maxv);
	/* a width that makes a checkable number of bins, or far too many */
	w = 1 + (int64_t)(seed % 64);
	if (seed >> 60 == 0)
		w = 1 + (maxv - minv) / HIST_MAXBINS / 2;
	if (maxv / w - minv / w < MAXCHECKBINS || maxv / w - minv / w >= HIST_MAXBINS)
		histogram(&l, w, minv, maxv);
	if (sum <= MAXS)
		documents(&l, sum, seed);
	free(l.v);
	return 0;
}
