#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "util.h"

void lens_push(struct lens *l, int64_t x)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 256;
		l->v = xrealloc(l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n++] = x;
}

int64_t hist_draw(const struct hist *h, struct rng *r)
{
	double u;
	size_t a = 0, b = h->n - 1, m;
	int64_t lo;

	/* Zero-weight bins can never be picked: u < cum[i] strictly. */
	do
		u = rng_double(r) * h->cum[h->n - 1];
	while (u >= h->cum[h->n - 1]);
	while (a < b) {
		m = a + (b - a) / 2;
		if (u < h->cum[m])
			b = m;
		else
			a = m + 1;
	}
	lo = h->lo[a] < 1 ? 1 : h->lo[a];
	return lo + (int64_t)rng_below(r, (uint64_t)(h->hi[a] - lo));
}

/* Appends x, cut to what is left to fill; returns what is left then. */
static int64_t take(struct lens *out, int64_t x, int64_t left)
{
	if (x > left)
		x = left;
	lens_push(out, x);
	return left - x;
}

void hist_pack(const struct hist *h, struct rng *r, int64_t total, struct lens *out)
{
	while (total > 0)
		total = take(out, hist_draw(h, r), total);
}

void hist_pack_long(const struct hist *h, struct rng *r, int64_t total, struct lens *out)
{
	int64_t shortpart = (total * 2 + 2) / 5, longpart = total - shortpart;
	size_t first = out->n, i;

	hist_pack(h, r, shortpart, out);
	while (longpart > 0)
		longpart = take(out, rng_range(r, 8 * 1024, 30 * 1024), longpart);
	for (i = out->n - 1; i > first; i--) {
		size_t j = first + (size_t)rng_below(r, i - first + 1);
		int64_t t = out->v[i];

		out->v[i] = out->v[j];
		out->v[j] = t;
	}
}

/* The bin of length v: fixed width, or [2^b, 2^(b+1)) without one. */
static int64_t bin_of(int64_t v, int64_t width)
{
	int64_t b = 0;

	if (width > 0)
		return v / width;
	while (((int64_t)2 << b) <= v)
		b++;
	return b;
}

int hist_make(struct hist *h, const struct lens *l, int64_t width, char *err, size_t errlen)
{
	int64_t minv = INT64_MAX, maxv = 0, b0, nb;
	size_t i;

	memset(h, 0, sizeof *h);
	for (i = 0; i < l->n; i++) {
		if (l->v[i] < minv)
			minv = l->v[i];
		if (l->v[i] > maxv)
			maxv = l->v[i];
	}
	if (l->n == 0) {
		snprintf(err, errlen, "no lengths");
		return -1;
	}
	b0 = bin_of(minv, width);
	nb = bin_of(maxv, width) - b0 + 1;
	/* one line per bin, empty ones too: -w 1 over lengths up to 2^32 would
	 * be 4G lines (and a count per bin in memory) */
	if (nb > HIST_MAXBINS) {
		snprintf(err, errlen, "lengths %lld to %lld make %lld bins of width %lld, more than %lld",
		    (long long)minv, (long long)maxv, (long long)nb, (long long)width, (long long)HIST_MAXBINS);
		return -1;
	}
	h->n = (size_t)nb;
	h->lo = xcalloc(h->n, sizeof *h->lo);
	h->hi = xcalloc(h->n, sizeof *h->hi);
	h->cum = xcalloc(h->n, sizeof *h->cum);
	for (i = 0; i < h->n; i++) {
		int64_t b = b0 + (int64_t)i;
		h->lo[i] = width > 0 ? b * width : (int64_t)1 << b;
		h->hi[i] = width > 0 ? h->lo[i] + width : (int64_t)2 << b;
		if (h->hi[i] > HIST_MAXLEN)
			h->hi[i] = HIST_MAXLEN;
	}
	for (i = 0; i < l->n; i++)
		h->cum[bin_of(l->v[i], width) - b0]++;
	for (i = 1; i < h->n; i++)
		h->cum[i] += h->cum[i - 1];
	return 0;
}

void hist_write(FILE *fp, const struct hist *h)
{
	double prev = 0, total = h->cum[h->n - 1];

	fprintf(fp, "lo\thi\tweight\n");
	/* counts below 2^53 are exact in a double: the differences are too */
	for (size_t i = 0; i < h->n; i++) {
		fprintf(fp, "%lld\t%lld\t%.9g\n", (long long)h->lo[i], (long long)h->hi[i],
		    (h->cum[i] - prev) / total);
		prev = h->cum[i];
	}
}
