/* Drawing a mask: exact allowed-pair counts per picture cell.  Every
 * rectangle of constant count is added to a 2D difference array in O(1);
 * only cells that a diagonal edge crosses are counted one by one. */
#include <stdlib.h>
#include <string.h>

#include "render.h"

struct grid {
	int64_t h, w, ch, cw;
	int64_t *d;               /* (h+1) x (w+1) difference array */
};

static void add(struct grid *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t v)
{
	int64_t W = g->w + 1;

	if (i0 >= i1 || j0 >= j1 || v == 0)
		return;
	g->d[i0 * W + j0] += v;
	g->d[i0 * W + j1] -= v;
	g->d[i1 * W + j0] -= v;
	g->d[i1 * W + j1] += v;
}

/* The cells [x0,x1) cover in classes of equal overlap: first, middle, last. */
struct span { int64_t c0[3], c1[3], len[3]; int n; };

static void spans(int64_t x0, int64_t x1, int64_t cs, struct span *s)
{
	int64_t a = x0 / cs, b = (x1 - 1) / cs;

	if (a == b) {
		s->n = 1;
		s->c0[0] = a; s->c1[0] = a + 1; s->len[0] = x1 - x0;
		return;
	}
	s->n = 0;
	s->c0[s->n] = a; s->c1[s->n] = a + 1; s->len[s->n++] = (a + 1) * cs - x0;
	if (b > a + 1) {
		s->c0[s->n] = a + 1; s->c1[s->n] = b; s->len[s->n++] = cs;
	}
	s->c0[s->n] = b; s->c1[s->n] = b + 1; s->len[s->n++] = x1 - b * cs;
}

static void add_full(struct grid *g, int64_t q0, int64_t q1, int64_t k0, int64_t k1)
{
	struct span r, c;

	if (q0 >= q1 || k0 >= k1)
		return;
	spans(q0, q1, g->ch, &r);
	spans(k0, k1, g->cw, &c);
	for (int i = 0; i < r.n; i++)
		for (int j = 0; j < c.n; j++)
			add(g, r.c0[i], r.c1[i], c.c0[j], c.c1[j], r.len[i] * c.len[j]);
}

/* Pairs of [a,b) x [c,d) with k - q <= t. */
static int64_t below(int64_t a, int64_t b, int64_t c, int64_t d, int64_t t)
{
	int64_t n = 0, e1 = a + t + 1 < d ? a + t + 1 : d, lo, hi;

	if (e1 > c)
		n += (e1 - c) * (b - a);
	lo = c > a + t + 1 ? c : a + t + 1;
	hi = d < b + t ? d : b + t;
	if (hi > lo)
		n += (hi - lo) * ((b + t - lo) + (b + t - (hi - 1))) / 2;
	return n;
}

static int64_t count(int64_t a, int64_t b, int64_t c, int64_t d, int hasLo, int64_t Lo, int hasHi, int64_t Hi)
{
	int64_t n = hasHi ? below(a, b, c, d, Hi) : (b - a) * (d - c);

	if (hasLo)
		n -= below(a, b, c, d, Lo - 1);
	return n;
}

static void add_diag(struct grid *g, const struct mask_slice *s)
{
	int hasLo = s->kind == MASK_INVCAUSAL || s->kind == MASK_BICAUSAL;
	int hasHi = s->kind == MASK_CAUSAL || s->kind == MASK_BICAUSAL;
	int64_t Lo = s->k0 - s->q0, Hi = s->k1 - s->q1;

	for (int64_t i = s->q0 / g->ch; i * g->ch < s->q1; i++) {
		int64_t a = s->q0 > i * g->ch ? s->q0 : i * g->ch;
		int64_t b = s->q1 < (i + 1) * g->ch ? s->q1 : (i + 1) * g->ch;
		int64_t kmin = s->k0, kmax = s->k1 - 1, z[2][2], nz = 0, j, jA, jB;

		if (hasLo && a + Lo > kmin)
			kmin = a + Lo;
		if (hasHi && b - 1 + Hi < kmax)
			kmax = b - 1 + Hi;
		if (kmin > kmax)
			continue;
		jA = kmin / g->cw;
		jB = kmax / g->cw;
		/* cells a diagonal edge crosses, as sorted cell ranges */
		if (hasLo) {
			int64_t x0 = a + Lo > s->k0 ? a + Lo : s->k0, x1 = b - 1 + Lo < kmax ? b - 1 + Lo : kmax;
			if (x0 <= x1) {
				z[nz][0] = x0 / g->cw; z[nz++][1] = x1 / g->cw;
			}
		}
		if (hasHi) {
			int64_t x0 = a + Hi > kmin ? a + Hi : kmin, x1 = kmax;
			if (x0 <= x1) {
				z[nz][0] = x0 / g->cw; z[nz++][1] = x1 / g->cw;
			}
		}
		for (j = jA; j <= jB;) {
			int special = j == jA || j == jB;
			int64_t next = jB;

			for (int t = 0; t < nz; t++) {
				if (j >= z[t][0] && j <= z[t][1])
					special = 1;
				else if (z[t][0] > j && z[t][0] < next)
					next = z[t][0];
			}
			if (special) {
				int64_t c = j * g->cw > s->k0 ? j * g->cw : s->k0;
				int64_t d = (j + 1) * g->cw < s->k1 ? (j + 1) * g->cw : s->k1;

				add(g, i, i + 1, j, j + 1, count(a, b, c, d, hasLo, Lo, hasHi, Hi));
				j++;
			} else {
				add(g, i, i + 1, j, next, (b - a) * g->cw);
				j = next;
			}
		}
	}
}

int render_mask(const struct mask *m, int head, int size, struct picture *pic, char *err, size_t errlen)
{
	struct grid g;
	int64_t W;

	memset(pic, 0, sizeof *pic);
	if (head < 0 || head >= m->heads) {
		snprintf(err, errlen, "head %d: the mask has %d", head, m->heads);
		return -1;
	}
	g.ch = (m->sq + size - 1) / size;
	g.cw = (m->sk + size - 1) / size;
	g.h = (m->sq + g.ch - 1) / g.ch;
	g.w = (m->sk + g.cw - 1) / g.cw;
	W = g.w + 1;
	if ((g.d = calloc((size_t)((g.h + 1) * W), sizeof *g.d)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (m->body == MASK_BODY_BLOCKS) {
		for (int64_t i = 0; i < m->nqb; i++)
			for (int64_t j = 0; j < m->nkb; j++)
				if (mask_getblock(m, head, i, j))
					add_full(&g, m->qb[i], m->qb[i + 1], m->kb[j], m->kb[j + 1]);
	} else {
		for (size_t n = 0; n < m->nslices; n++) {
			const struct mask_slice *s = &m->slices[n];

			if (s->kind == MASK_FULL)
				add_full(&g, s->q0, s->q1, s->k0, s->k1);
			else
				add_diag(&g, s);
		}
	}
	/* prefix sums turn the differences into counts */
	for (int64_t i = 0; i <= g.h; i++)
		for (int64_t j = 1; j <= g.w; j++)
			g.d[i * W + j] += g.d[i * W + j - 1];
	for (int64_t i = 1; i <= g.h; i++)
		for (int64_t j = 0; j <= g.w; j++)
			g.d[i * W + j] += g.d[(i - 1) * W + j];
	pic->w = g.w;
	pic->h = g.h;
	pic->cw = g.cw;
	pic->ch = g.ch;
	if ((pic->px = malloc((size_t)(g.h * g.w))) == NULL) {
		free(g.d);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int64_t i = 0; i < g.h; i++) {
		int64_t rows = (i + 1) * g.ch < m->sq ? g.ch : m->sq - i * g.ch;

		for (int64_t j = 0; j < g.w; j++) {
			int64_t cols = (j + 1) * g.cw < m->sk ? g.cw : m->sk - j * g.cw;
			double f = (double)g.d[i * W + j] / (double)(rows * cols);

			pic->px[i * g.w + j] = (uint8_t)(255.0 - 255.0 * f + 0.5);
		}
	}
	free(g.d);
	return 0;
}

void render_free(struct picture *pic)
{
	free(pic->px);
	memset(pic, 0, sizeof *pic);
}
