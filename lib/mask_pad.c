/* Gaps that put documents on tile edges.  A plan tiles the sequence from 0,
 * so a document that starts mid-tile shares its first and last tiles with
 * its neighbours: both are partial, and a 64x128 plan of 700-token to
 * 8K documents visits 2-17 % more area than tiles laid from each
 * document's start (cuDNN's ragged layout).  Moving the positions right, so that each
 * document starts on a tile edge, gives the plan those tiles; the gaps
 * allow nothing, so the area and every allowed pair stay, translated.  A
 * kernel reads tile t of the padded mask from the real position the gaps
 * give it, and stores only its real rows. */
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "mask_priv.h"

static const struct mask_slice *cmp_base;

static int by_k0(const void *x, const void *y)
{
	const struct mask_slice *a = &cmp_base[*(const size_t *)x], *b = &cmp_base[*(const size_t *)y];

	return a->k0 < b->k0 ? -1 : a->k0 > b->k0;
}

/* Gaps for one axis (q: the q axis, else k): the positions p no slice
 * straddles (every slice ends at or before p, or starts at or after it)
 * that start a segment of at least min positions, each moved to the next
 * multiple of a.  idx lists the slices in order of their start on this
 * axis; each group of them starts at such a position. */
static int gaps(const struct mask *m, const size_t *idx, int q, int64_t len, int a, int64_t min, int64_t **g,
    size_t *ng, int64_t *vlen)
{
	size_t cap = 0, n = 0, i = 0;
	int64_t end = 0, shift = 0;

	*g = NULL;
	while (i < m->nslices) {
		const struct mask_slice *s = &m->slices[idx[i]];
		const int64_t p = q ? s->q0 : s->k0;
		int64_t next = len, e = end;
		size_t j = i;
		/* the slices starting at p, then where the segment ends: at the
		 * next start that no slice so far straddles */
		for (; j < m->nslices; j++) {
			const struct mask_slice *t = &m->slices[idx[j]];
			const int64_t t0 = q ? t->q0 : t->k0, t1 = q ? t->q1 : t->k1;
			if (t0 >= e && t0 > p) {
				next = t0;
				break;
			}
			if (t1 > e)
				e = t1;
		}
		if (p > 0 && next - p >= min && (p + shift) % a != 0) {
			if (mask_grow(g, &cap, n + 1, 2 * sizeof **g) != 0) {
				free(*g);
				*g = NULL;
				return -1;
			}
			(*g)[2 * n] = p;
			(*g)[2 * n + 1] = a - (p + shift) % a;
			shift += (*g)[2 * n + 1];
			n++;
		}
		end = e;
		i = j;
	}
	*ng = n;
	*vlen = len + shift;
	return 0;
}

/* The position of real position x, gaps g[0..n) in order. */
static int64_t moved(const int64_t *g, size_t n, int64_t x)
{
	int64_t sh = 0;

	for (size_t i = 0; i < n && g[2 * i] <= x; i++)
		sh += g[2 * i + 1];
	return x + sh;
}

int mask_pad(const struct mask *m, int aq, int ak, int64_t minq, int64_t mink, struct mask *v,
    struct mask_pads *pd, char *err, size_t errlen)
{
	size_t *idx = NULL;
	int64_t vq, vk;

	memset(pd, 0, sizeof *pd);
	if (m->body != MASK_BODY_SLICES || m->nslices == 0 || aq < 1 || ak < 1)
		return 0;
	if ((idx = malloc(m->nslices * sizeof *idx)) == NULL)
		return mask_fail(err, errlen, "out of memory");
	for (size_t i = 0; i < m->nslices; i++)
		idx[i] = i;
	/* slices are in q0 order already */
	if (gaps(m, idx, 1, m->sq, aq, minq, &pd->q, &pd->nq, &vq) != 0)
		goto oom;
	cmp_base = m->slices;
	qsort(idx, m->nslices, sizeof *idx, by_k0);
	if (gaps(m, idx, 0, m->sk, ak, mink, &pd->k, &pd->nk, &vk) != 0)
		goto oom;
	free(idx);
	idx = NULL;
	if (pd->nq == 0 && pd->nk == 0) {
		mask_pads_free(pd);
		return 0;
	}
	if (vq >= MASK_MAXSEQ || vk >= MASK_MAXSEQ) {
		mask_pads_free(pd);
		return 0;
	}
	mask_init(v, vq, vk, m->pattern, m->params);
	for (size_t i = 0; i < m->nslices; i++) {
		const struct mask_slice *s = &m->slices[i];
		/* no gap falls inside a slice: both ends move by the same shift */
		const int64_t dq = moved(pd->q, pd->nq, s->q0) - s->q0, dk = moved(pd->k, pd->nk, s->k0) - s->k0;
		if (mask_add(v, s->q0 + dq, s->q1 + dq, s->k0 + dk, s->k1 + dk, s->kind) != 0) {
			mask_free(v);
			goto oom;
		}
	}
	if (mask_finish(v, err, errlen) != 0 || v->area != m->area) {
		if (v->area != m->area)
			mask_fail(err, errlen, "padded area %llu != mask area %llu",
			    (unsigned long long)v->area, (unsigned long long)m->area);
		mask_free(v);
		mask_pads_free(pd);
		return -1;
	}
	return 1;
oom:
	free(idx);
	mask_pads_free(pd);
	return mask_fail(err, errlen, "out of memory");
}

void mask_pads_free(struct mask_pads *pd)
{
	free(pd->q);
	free(pd->k);
	memset(pd, 0, sizeof *pd);
}

/* Tile t of t-wide tiles over the padded axis: its first real position
 * and how many real positions follow it in the tile, up to the next gap. */
int mask_pad_tiles(const int64_t *g, size_t n, int64_t len, int t, int32_t (**tile)[2], int64_t *ntile)
{
	int64_t vlen = len, nt;
	size_t gi = 0;
	int64_t sh = 0;

	for (size_t i = 0; i < n; i++)
		vlen += g[2 * i + 1];
	nt = (vlen + t - 1) / t;
	if ((*tile = malloc((size_t)(nt ? nt : 1) * sizeof **tile)) == NULL)
		return -1;
	for (int64_t i = 0; i < nt; i++) {
		const int64_t v = i * t;
		int64_t r, cnt;
		/* gaps wholly before v: the real position of their end <= v */
		while (gi < n && g[2 * gi] + sh + g[2 * gi + 1] <= v) {
			sh += g[2 * gi + 1];
			gi++;
		}
		if (gi < n && g[2 * gi] + sh <= v) {
			/* inside gap gi, which must end on a tile edge */
			if ((g[2 * gi] + sh + g[2 * gi + 1]) % t != 0) {
				free(*tile);
				*tile = NULL;
				return -1;
			}
			r = g[2 * gi];
			cnt = 0;
		} else {
			r = v - sh;
			cnt = (gi < n ? g[2 * gi] : len) - r;
			if (cnt > t)
				cnt = t;
		}
		(*tile)[i][0] = (int32_t)r;
		(*tile)[i][1] = (int32_t)(cnt < 0 ? 0 : cnt);
	}
	*ntile = nt;
	return 0;
}
