#include <stdlib.h>

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
