/* Building a mask in memory and checking that it means one thing. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "mask_priv.h"

int mask_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static void start(struct mask *m, int64_t sq, int64_t sk, int body, int heads,
                  const char *pattern, const char *params)
{
	memset(m, 0, sizeof *m);
	m->sq = sq;
	m->sk = sk;
	m->body = body;
	m->heads = heads;
	/* the text's tail stays zeroed, so the bytes on disk are canonical */
	if (pattern != NULL)
		strncpy(m->pattern, pattern, sizeof m->pattern - 1);
	if (params != NULL)
		strncpy(m->params, params, sizeof m->params - 1);
}

void mask_init(struct mask *m, int64_t sq, int64_t sk, const char *pattern, const char *params)
{
	start(m, sq, sk, MASK_BODY_SLICES, 1, pattern, params);
}

int mask_add(struct mask *m, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind)
{
	if (m->body != MASK_BODY_SLICES)
		return -1;
	if (q0 == q1 || k0 == k1)
		return 0;
	if (mask_grow(&m->slices, &m->cap, m->nslices, sizeof *m->slices) != 0)
		return -1;
	m->slices[m->nslices++] = (struct mask_slice){ q0, q1, k0, k1, kind };
	return 0;
}

int mask_init_blocks(struct mask *m, int64_t sq, int64_t sk, int heads,
                     int64_t nqb, const int64_t *qb, int64_t nkb, const int64_t *kb,
                     const char *pattern, const char *params)
{
	uint64_t cells;

	start(m, sq, sk, MASK_BODY_BLOCKS, heads, pattern, params);
	if (heads < 1 || nqb < 1 || nkb < 1 || nqb >= MASK_MAXSEQ || nkb >= MASK_MAXSEQ)
		return -1;
	cells = (uint64_t)nqb * (uint64_t)nkb;
	if (cells > (SIZE_MAX / 2) / (uint64_t)heads)
		return -1;
	cells *= (uint64_t)heads;
	m->nqb = nqb;
	m->nkb = nkb;
	m->qb = malloc((size_t)(nqb + 1) * sizeof *m->qb);
	m->kb = malloc((size_t)(nkb + 1) * sizeof *m->kb);
	m->bits = calloc((size_t)((cells + 7) / 8), 1);
	if (m->qb == NULL || m->kb == NULL || m->bits == NULL) {
		mask_free(m);
		return -1;
	}
	memcpy(m->qb, qb, (size_t)(nqb + 1) * sizeof *qb);
	memcpy(m->kb, kb, (size_t)(nkb + 1) * sizeof *kb);
	return 0;
}

/* The bit of cell (head,i,j) in *n; 0 for a cell outside the mask. */
static int cell(const struct mask *m, int head, int64_t i, int64_t j, uint64_t *n)
{
	if (head < 0 || head >= m->heads || i < 0 || i >= m->nqb || j < 0 || j >= m->nkb)
		return 0;
	*n = ((uint64_t)head * (uint64_t)m->nqb + (uint64_t)i) * (uint64_t)m->nkb + (uint64_t)j;
	return 1;
}

void mask_setblock(struct mask *m, int head, int64_t i, int64_t j)
{
	uint64_t n;

	if (cell(m, head, i, j, &n))
		m->bits[n / 8] |= (uint8_t)(1u << (n % 8));
}

int mask_getblock(const struct mask *m, int head, int64_t i, int64_t j)
{
	uint64_t n;

	if (m->bits == NULL || !cell(m, head, i, j, &n))
		return 0;
	return (m->bits[n / 8] >> (n % 8)) & 1;
}

void mask_free(struct mask *m)
{
	free(m->slices);
	free(m->qb);
	free(m->kb);
	free(m->bits);
	m->slices = NULL;
	m->qb = m->kb = NULL;
	m->bits = NULL;
	m->nslices = m->cap = 0;
	m->nqb = m->nkb = 0;
}

int mask_finish(struct mask *m, char *err, size_t errlen)
{
	return mask_check(m, m->body == MASK_BODY_BLOCKS, err, errlen);
}

/* ---- the disjointness sweep ------------------------------------------------
 * Rows top to bottom; the slices alive on the current row are kept ordered by
 * their left edge.  Edges move by 0 or 1 per row and every row interval is
 * nonempty, so two disjoint slices can never swap places without meeting:
 * the first pair to meet was adjacent in that order at some event, and every
 * newly adjacent pair is tested exactly over its whole common life
 * (Shamos-Hoey with moving intervals). */

/* The live slices, in order: a list of chunks, so an insertion moves at most
 * a chunk, not the whole set (thousands of live columns in eviction masks). */
#define CHUNK 512

struct chunk {
	size_t n;
	size_t v[CHUNK];
};

struct sweep {
	const struct mask_slice *s;
	struct chunk **c;
	size_t nc, capc;
};

struct pos { size_t c, i; };

static int64_t key(const struct sweep *w, size_t x, int64_t q)
{
	return mask_row_lo(&w->s[x], q);
}

/* first position whose left edge on row q is >= x (maybe one past the end) */
static struct pos find(const struct sweep *w, int64_t q, int64_t x)
{
	size_t lo = 0, hi = w->nc, l = 0;
	struct chunk *c;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		c = w->c[mid];
		if (key(w, c->v[c->n - 1], q) < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == w->nc)
		return w->nc == 0 ? (struct pos){ 0, 0 } : (struct pos){ w->nc - 1, w->c[w->nc - 1]->n };
	c = w->c[lo];
	hi = c->n;
	while (l < hi) {
		size_t mid = l + (hi - l) / 2;
		if (key(w, c->v[mid], q) < x)
			l = mid + 1;
		else
			hi = mid;
	}
	return (struct pos){ lo, l };
}

/* the element at p, or at the start of the next chunk; 0 if none */
static int at(const struct sweep *w, struct pos p, size_t *x)
{
	if (p.c < w->nc && p.i < w->c[p.c]->n) {
		*x = w->c[p.c]->v[p.i];
		return 1;
	}
	if (p.c + 1 < w->nc && p.i >= w->c[p.c]->n) {
		*x = w->c[p.c + 1]->v[0];
		return 1;
	}
	return 0;
}

static int before(const struct sweep *w, struct pos p, size_t *x)
{
	if (p.c < w->nc && p.i > 0 && p.i <= w->c[p.c]->n) {
		*x = w->c[p.c]->v[p.i - 1];
		return 1;
	}
	if (p.i == 0 && p.c > 0 && p.c <= w->nc) {
		*x = w->c[p.c - 1]->v[w->c[p.c - 1]->n - 1];
		return 1;
	}
	return 0;
}

static int insert(struct sweep *w, struct pos p, size_t x)
{
	struct chunk *c, *d;

	if (w->nc == w->capc) {
		size_t cap = w->capc ? 2 * w->capc : 16;
		struct chunk **t = realloc(w->c, cap * sizeof *t);
		if (t == NULL)
			return -1;
		w->c = t;
		w->capc = cap;
	}
	if (w->nc == 0) {
		if ((w->c[0] = malloc(sizeof *w->c[0])) == NULL)
			return -1;
		w->c[0]->n = 0;
		w->nc = 1;
		p = (struct pos){ 0, 0 };
	}
	c = w->c[p.c];
	if (c->n == CHUNK) {
		if ((d = malloc(sizeof *d)) == NULL)
			return -1;
		d->n = CHUNK / 2;
		memcpy(d->v, c->v + CHUNK / 2, (CHUNK / 2) * sizeof *d->v);
		c->n = CHUNK / 2;
		memmove(w->c + p.c + 2, w->c + p.c + 1, (w->nc - p.c - 1) * sizeof *w->c);
		w->c[p.c + 1] = d;
		w->nc++;
		if (p.i > CHUNK / 2) {
			p.c++;
			p.i -= CHUNK / 2;
			c = d;
		}
	}
	memmove(c->v + p.i + 1, c->v + p.i, (c->n - p.i) * sizeof *c->v);
	c->v[p.i] = x;
	c->n++;
	return 0;
}

/* remove the element at p; p then names what followed it */
static struct pos erase(struct sweep *w, struct pos p)
{
	struct chunk *c = w->c[p.c];

	memmove(c->v + p.i, c->v + p.i + 1, (c->n - p.i - 1) * sizeof *c->v);
	if (--c->n == 0) {
		free(c);
		memmove(w->c + p.c, w->c + p.c + 1, (w->nc - p.c - 1) * sizeof *w->c);
		w->nc--;
		p.i = 0;
	}
	return p;
}

struct ev { int64_t row; size_t i; };

static int ev_cmp(const void *pa, const void *pb)
{
	const struct ev *a = pa, *b = pb;

	if (a->row != b->row) return a->row < b->row ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

static int meet(const struct sweep *w, size_t x, size_t y, char *err, size_t errlen)
{
	if (!mask_slices_meet(&w->s[x], &w->s[y]))
		return 0;
	if (x > y) {
		size_t t = x;
		x = y;
		y = t;
	}
	return mask_fail(err, errlen, "slices %zu and %zu overlap (%lld %lld %lld %lld %s, %lld %lld %lld %lld %s)",
	    x, y, (long long)w->s[x].q0, (long long)w->s[x].q1, (long long)w->s[x].k0,
	    (long long)w->s[x].k1, mask_kind_name(w->s[x].kind), (long long)w->s[y].q0,
	    (long long)w->s[y].q1, (long long)w->s[y].k0, (long long)w->s[y].k1,
	    mask_kind_name(w->s[y].kind));
}

static int disjoint(const struct mask *m, char *err, size_t errlen)
{
	size_t n = m->nslices, nin = 0, nout = 0, a = 0, b = 0, u, v;
	struct ev *in, *out;
	struct sweep w = { m->slices, NULL, 0, 0 };
	int rc = 0;

	in = malloc((n + 1) * sizeof *in);
	out = malloc((n + 1) * sizeof *out);
	if (in == NULL || out == NULL) {
		rc = mask_fail(err, errlen, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t ra, rb;
		mask_slice_rows(&m->slices[i], &ra, &rb);
		if (ra < rb) {
			in[nin++] = (struct ev){ ra, i };
			out[nout++] = (struct ev){ rb, i };
		}
	}
	if (nin > 1) {
		qsort(in, nin, sizeof *in, ev_cmp);
		qsort(out, nout, sizeof *out, ev_cmp);
	}
	while (a < nin || b < nout) {
		int64_t r = b < nout && (a >= nin || out[b].row <= in[a].row) ? out[b].row : in[a].row;
		for (; b < nout && out[b].row == r; b++) {
			size_t x = out[b].i;
			struct pos p = find(&w, r - 1, key(&w, x, r - 1));
			if (!at(&w, p, &u) || u != x) {       /* cannot happen while disjoint */
				rc = mask_fail(err, errlen, "slice %zu: sweep lost it", x);
				goto done;
			}
			if (p.i >= w.c[p.c]->n)
				p = (struct pos){ p.c + 1, 0 };
			p = erase(&w, p);
			if (before(&w, p, &u) && at(&w, p, &v) && (rc = meet(&w, u, v, err, errlen)) != 0)
				goto done;
		}
		for (; a < nin && in[a].row == r; a++) {
			size_t x = in[a].i;
			struct pos p = find(&w, r, key(&w, x, r));
			if (before(&w, p, &u) && (rc = meet(&w, u, x, err, errlen)) != 0)
				goto done;
			if (at(&w, p, &v) && (rc = meet(&w, x, v, err, errlen)) != 0)
				goto done;
			if (insert(&w, p, x) != 0) {
				rc = mask_fail(err, errlen, "out of memory");
				goto done;
			}
		}
	}
done:
	free(in);
	free(out);
	for (size_t i = 0; i < w.nc; i++)
		free(w.c[i]);
	free(w.c);
	return rc;
}

static int check_slices(struct mask *m, int sorted, char *err, size_t errlen)
{
	uint64_t area = 0;

	if (m->heads != 1)
		return mask_fail(err, errlen, "a slice body has 1 mask head, not %d", m->heads);
	for (size_t i = 0; i < m->nslices; i++) {
		const struct mask_slice *s = &m->slices[i];
		if (s->kind < 0 || s->kind >= MASK_NKINDS)
			return mask_fail(err, errlen, "slice %zu: unknown kind %d", i, (int)s->kind);
		if (s->q1 <= s->q0)
			return mask_fail(err, errlen, "slice %zu: q1 %lld <= q0 %lld", i,
			    (long long)s->q1, (long long)s->q0);
		if (s->k1 <= s->k0)
			return mask_fail(err, errlen, "slice %zu: k1 %lld <= k0 %lld", i,
			    (long long)s->k1, (long long)s->k0);
		if (s->q0 < 0 || s->q1 > m->sq)
			return mask_fail(err, errlen, "slice %zu: q range [%lld,%lld) outside [0,%lld)", i,
			    (long long)s->q0, (long long)s->q1, (long long)m->sq);
		if (s->k0 < 0 || s->k1 > m->sk)
			return mask_fail(err, errlen, "slice %zu: k range [%lld,%lld) outside [0,%lld)", i,
			    (long long)s->k0, (long long)s->k1, (long long)m->sk);
	}
	if (!sorted) {
		if (m->nslices > 1)
			qsort(m->slices, m->nslices, sizeof *m->slices, mask_slice_cmp);
	} else
		for (size_t i = 1; i < m->nslices; i++)
			if (mask_slice_cmp(&m->slices[i - 1], &m->slices[i]) >= 0)
				return mask_fail(err, errlen, "slices %zu and %zu out of order", i - 1, i);
	if (disjoint(m, err, errlen) != 0)
		return -1;
	/* disjoint inside sq x sk < 2^64 pairs: the sum cannot wrap */
	for (size_t i = 0; i < m->nslices; i++)
		area += mask_slice_area(&m->slices[i]);
	m->area = area;
	return 0;
}

static int check_bounds(const int64_t *b, int64_t n, int64_t s, const char *what,
                        char *err, size_t errlen)
{
	if (n < 1 || n > s)
		return mask_fail(err, errlen, "%lld %s blocks for %lld tokens", (long long)n, what, (long long)s);
	if (b[0] != 0)
		return mask_fail(err, errlen, "first %s block boundary %lld, not 0", what, (long long)b[0]);
	for (int64_t i = 1; i <= n; i++)
		if (b[i] <= b[i - 1])
			return mask_fail(err, errlen, "%s block boundaries %lld and %lld not increasing",
			    what, (long long)(i - 1), (long long)i);
	if (b[n] != s)
		return mask_fail(err, errlen, "last %s block boundary %lld, not %lld", what,
		    (long long)b[n], (long long)s);
	return 0;
}

static int check_blocks(struct mask *m, char *err, size_t errlen)
{
	uint64_t area = 0;

	if (m->heads < 1)
		return mask_fail(err, errlen, "%d mask heads", m->heads);
	if (check_bounds(m->qb, m->nqb, m->sq, "q", err, errlen) != 0 ||
	    check_bounds(m->kb, m->nkb, m->sk, "k", err, errlen) != 0)
		return -1;
	/* one head has fewer than 2^64 pairs; only the sum can wrap */
	for (int h = 0; h < m->heads; h++)
		if (__builtin_add_overflow(area, mask_head_area(m, h), &area))
			return mask_fail(err, errlen, "area over all heads overflows 64 bits");
	m->area = area;
	return 0;
}

int mask_check(struct mask *m, int sorted, char *err, size_t errlen)
{
	if (m->sq < 1 || m->sk < 1)
		return mask_fail(err, errlen, "seqlen %lld x %lld: must be at least 1",
		    (long long)m->sq, (long long)m->sk);
	if (m->sq >= MASK_MAXSEQ || m->sk >= MASK_MAXSEQ)
		return mask_fail(err, errlen, "seqlen %lld x %lld: must be below 2^32",
		    (long long)m->sq, (long long)m->sk);
	if (m->body == MASK_BODY_SLICES)
		return check_slices(m, sorted, err, errlen);
	if (m->body == MASK_BODY_BLOCKS)
		return check_blocks(m, err, errlen);
	return mask_fail(err, errlen, "unknown body kind %d", (int)m->body);
}
