/* Questions about a mask: what a slice allows, in closed form. */
#include <stdint.h>
#include <string.h>

#include "mask.h"
#include "mask_priv.h"

static const char *const kind_names[MASK_NKINDS] = {
	"full", "causal", "invcausal", "bicausal",
};

const char *mask_kind_name(int kind)
{
	if (kind < 0 || kind >= MASK_NKINDS)
		return "?";
	return kind_names[kind];
}

int mask_kind_parse(const char *s)
{
	for (int i = 0; i < MASK_NKINDS; i++)
		if (strcmp(s, kind_names[i]) == 0)
			return i;
	return -1;
}

/* Rows allowing something, from the row bounds: a causal slice wider than
 * tall starts empty rows at the top, an invcausal one at the bottom. */
void mask_slice_rows(const struct mask_slice *s, int64_t *ra, int64_t *rb)
{
	int64_t a = s->q0, b = s->q1, c = s->k1 - s->q1, d = s->k0 - s->q0;

	if (s->q0 >= s->q1 || s->k0 >= s->k1) {
		*ra = *rb = s->q0;
		return;
	}
	switch (s->kind) {
	case MASK_CAUSAL:
		if (s->k0 - c > a)
			a = s->k0 - c;
		break;
	case MASK_INVCAUSAL:
		if (s->k1 - d < b)
			b = s->k1 - d;
		break;
	case MASK_BICAUSAL:
		if (c < d)
			b = a;
		break;
	}
	if (a >= b)
		a = b = s->q0;
	*ra = a;
	*rb = b;
}

uint64_t mask_slice_area(const struct mask_slice *s)
{
	uint64_t n, w, m;

	if (s->q1 <= s->q0 || s->k1 <= s->k0)
		return 0;
	n = (uint64_t)(s->q1 - s->q0);
	w = (uint64_t)(s->k1 - s->k0);
	switch (s->kind) {
	case MASK_FULL:
		return n * w;
	case MASK_CAUSAL:
	case MASK_INVCAUSAL:
		/* rows of w, w-1, ... down to w-m+1 pairs */
		m = n < w ? n : w;
		return m * w - m * (m - 1) / 2;
	case MASK_BICAUSAL:
		return w >= n ? n * (w - n + 1) : 0;
	}
	return 0;
}

/* A word of cells at a time: block-sparse rows run to 10^5 cells. */
static uint64_t blocks_area(const struct mask *m, int h)
{
	uint64_t a = 0, nbits, n;
	int64_t w, nk = m->nkb;
	int uniform = 1;

	if (m->bits == NULL)           /* freed, or never made */
		return 0;
	/* equal k blocks (but the last): a row's width is a popcount */
	w = m->kb[1] - m->kb[0];
	for (int64_t j = 1; j + 1 < nk && uniform; j++)
		uniform = m->kb[j + 1] - m->kb[j] == w;
	nbits = (uint64_t)m->heads * (uint64_t)m->nqb * (uint64_t)nk;
	n = (uint64_t)h * (uint64_t)m->nqb * (uint64_t)nk;
	for (int64_t i = 0; i < m->nqb; i++, n += (uint64_t)nk) {
		uint64_t rowk = 0;
		for (int64_t j = 0; j < nk; j += 64) {
			uint64_t x = mask_bits64(m->bits, nbits, n + (uint64_t)j);
			if (nk - j < 64)
				x &= ((uint64_t)1 << (nk - j)) - 1;
			if (uniform) {
				rowk += (uint64_t)__builtin_popcountll(x) * (uint64_t)w;
				continue;
			}
			while (x) {
				int b = __builtin_ctzll(x);
				rowk += (uint64_t)(m->kb[j + b + 1] - m->kb[j + b]);
				x &= x - 1;
			}
		}
		/* the last block may be narrower */
		if (uniform && nk > 1 && mask_getblock(m, h, i, nk - 1))
			rowk -= (uint64_t)(w - (m->kb[nk] - m->kb[nk - 1]));
		if (uniform && nk == 1)
			rowk = mask_getblock(m, h, i, 0) ? (uint64_t)m->kb[1] : 0;
		a += rowk * (uint64_t)(m->qb[i + 1] - m->qb[i]);
	}
	return a;
}

uint64_t mask_head_area(const struct mask *m, int head)
{
	uint64_t a = 0;

	if (head < 0 || head >= m->heads)
		return 0;
	if (m->body == MASK_BODY_BLOCKS)
		return blocks_area(m, head);
	for (size_t i = 0; i < m->nslices; i++)
		a += mask_slice_area(&m->slices[i]);
	return a;
}

int mask_allows(const struct mask *m, int head, int64_t q, int64_t k)
{
	size_t lo, hi;

	if (q < 0 || q >= m->sq || k < 0 || k >= m->sk || head < 0 || head >= m->heads)
		return 0;
	if (m->body == MASK_BODY_BLOCKS)
		return mask_getblock(m, head, mask_block_of(m->qb, m->nqb, q),
		    mask_block_of(m->kb, m->nkb, k));
	/* Slices are sorted by q0, but a tall one may start long before q. */
	lo = 0;
	hi = m->nslices;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->slices[mid].q0 <= q)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo-- > 0) {
		const struct mask_slice *s = &m->slices[lo];
		if (q < s->q1 && k >= s->k0 && k < s->k1 &&
		    k >= mask_row_lo(s, q) && k < mask_row_hi(s, q))
			return 1;
	}
	return 0;
}

static struct mask_slice piece(int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind)
{
	struct mask_slice s = { q0, q1, k0, k1, kind };
	return s;
}

#define FAR ((int64_t)1 << 62)
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* Rows of the clipped slice fall into four regimes: the left edge is the
 * clip's (row q+d <= ka) or the diagonal's, and the right edge likewise.
 * Each regime is one slice whose rectangle keeps the original diagonal
 * constants, so k1-q1 and k0-q0 mean what they meant before. */
int mask_clip(const struct mask_slice *s, int64_t Q0, int64_t Q1, int64_t K0, int64_t K1,
              struct mask_slice out[3])
{
	int64_t qa = MAX(s->q0, Q0), qb = MIN(s->q1, Q1);
	int64_t ka = MAX(s->k0, K0), kb = MIN(s->k1, K1);
	int64_t c = s->k1 - s->q1, d = s->k0 - s->q0, A, B, r0, r1;
	int lod = s->kind == MASK_INVCAUSAL || s->kind == MASK_BICAUSAL;
	int hid = s->kind == MASK_CAUSAL || s->kind == MASK_BICAUSAL;
	struct mask_slice p[4];
	int n = 0, np = 0;

	if (qa >= qb || ka >= kb)
		return 0;
	if (s->kind == MASK_FULL) {
		out[0] = piece(qa, qb, ka, kb, MASK_FULL);
		return 1;
	}
	A = lod ? ka - d : FAR;          /* rows q <= A: left edge is ka */
	B = hid ? kb - c - 1 : -FAR;     /* rows q >= B: right edge is kb */
	/* left diagonal only */
	r0 = qa; r1 = MIN(qb, MIN(A + 1, B));
	if (r0 < r1)
		p[np++] = piece(r0, r1, ka, r1 + c, MASK_CAUSAL);
	r0 = MAX(qa, B); r1 = MIN(qb, A + 1);
	if (r0 < r1)
		p[np++] = piece(r0, r1, ka, kb, MASK_FULL);
	r0 = MAX(qa, A + 1); r1 = MIN(qb, B);
	if (r0 < r1)
		p[np++] = piece(r0, r1, r0 + d, r1 + c, MASK_BICAUSAL);
	r0 = MAX(qa, MAX(A + 1, B)); r1 = qb;
	if (r0 < r1)
		p[np++] = piece(r0, r1, r0 + d, kb, MASK_INVCAUSAL);
	for (int i = 0; i < np; i++)
		if (p[i].k0 < p[i].k1 && mask_slice_area(&p[i]) > 0)
			out[n++] = p[i];
	return n;
}

uint64_t mask_clip_area(const struct mask_slice *s, int64_t Q0, int64_t Q1, int64_t K0, int64_t K1)
{
	struct mask_slice p[3];
	uint64_t a = 0;
	int n = mask_clip(s, Q0, Q1, K0, K1, p);

	for (int i = 0; i < n; i++)
		a += mask_slice_area(&p[i]);
	return a;
}

/* lo(q) and hi(q) as slope*q + t over the rows that allow something */
static void edges(const struct mask_slice *s, int64_t *ls, int64_t *lt, int64_t *hs, int64_t *ht)
{
	if (s->kind == MASK_INVCAUSAL || s->kind == MASK_BICAUSAL)
		*ls = 1, *lt = s->k0 - s->q0;
	else
		*ls = 0, *lt = s->k0;
	if (s->kind == MASK_CAUSAL || s->kind == MASK_BICAUSAL)
		*hs = 1, *ht = s->k1 - s->q1 + 1;
	else
		*hs = 0, *ht = s->k1;
}

/* Narrow [*a,*b] to the q with slope*q + t > 0, slope in {-1,0,1}. */
static void positive(int64_t slope, int64_t t, int64_t *a, int64_t *b)
{
	if (slope == 0) {
		if (t <= 0)
			*b = *a - 1;
	} else if (slope > 0) {
		*a = MAX(*a, 1 - t);
	} else {
		*b = MIN(*b, t - 1);
	}
}

int mask_slices_meet(const struct mask_slice *x, const struct mask_slice *y)
{
	int64_t xa, xb, ya, yb, a, b;
	int64_t xls, xlt, xhs, xht, yls, ylt, yhs, yht;

	mask_slice_rows(x, &xa, &xb);
	mask_slice_rows(y, &ya, &yb);
	a = MAX(xa, ya);
	b = MIN(xb, yb) - 1;
	if (a > b)
		return 0;
	edges(x, &xls, &xlt, &xhs, &xht);
	edges(y, &yls, &ylt, &yhs, &yht);
	/* row q meets iff lo_x < hi_y and lo_y < hi_x */
	positive(yhs - xls, yht - xlt, &a, &b);
	positive(xhs - yls, xht - ylt, &a, &b);
	return a <= b;
}

int mask_slice_cmp(const void *pa, const void *pb)
{
	const struct mask_slice *a = pa, *b = pb;

	if (a->q0 != b->q0) return a->q0 < b->q0 ? -1 : 1;
	if (a->k0 != b->k0) return a->k0 < b->k0 ? -1 : 1;
	if (a->q1 != b->q1) return a->q1 < b->q1 ? -1 : 1;
	if (a->k1 != b->k1) return a->k1 < b->k1 ? -1 : 1;
	if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
	return 0;
}
