/* Compiling a mask into a tile plan.  Per q-tile row (a band of bq query
 * rows) every piece that touches the band is reduced to a run of k-tiles it
 * covers wholly on its rows plus a few edge tiles whose share is the exact
 * clipped area; a sweep over those events then sums the shares per tile, so
 * a tile is full iff the shares add up to its area.  Work is O(pieces per
 * band + output): a full or causal mask costs one run per row. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "mask_priv.h"

enum { EV_END, EV_START, EV_TILE };

struct ev {
	int64_t tile;
	int type;
	int32_t pi;            /* piece */
	uint64_t amount;       /* EV_TILE: pairs; runs: rows */
};

struct pb {
	struct plan *p;
	const struct mask *m;
	int64_t bk;              /* p->bk, widened for tile arithmetic */
	/* the pieces of the band */
	struct mask_slice *pc;
	size_t npc, cappc;
	struct ev *ev;
	size_t nev, capev;
	/* the runs alive during the sweep */
	int32_t *act;
	size_t nact;
	int32_t *ids;            /* cut set being built */
	int32_t *lastids;        /* cut set of the last partial entry of the row */
	size_t nlast;
	int32_t rowstart;        /* first entry of the current row */
	size_t capent, capcut, capids;
	struct ev *tmp;          /* counting sort */
	size_t captmp, *count, capcount;
	int oom;
};

static void add_piece(struct pb *b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind)
{
	if (mask_grow(&b->pc, &b->cappc, b->npc, sizeof *b->pc) != 0) {
		b->oom = 1;
		return;
	}
	b->pc[b->npc++] = (struct mask_slice){ q0, q1, k0, k1, kind };
}

static void add_ev(struct pb *b, int64_t tile, int type, int32_t pi, uint64_t amount)
{
	if (mask_grow(&b->ev, &b->capev, b->nev, sizeof *b->ev) != 0) {
		b->oom = 1;
		return;
	}
	b->ev[b->nev++] = (struct ev){ tile, type, pi, amount };
}

static int ev_cmp(const void *pa, const void *pb)
{
	const struct ev *a = pa, *b = pb;

	if (a->tile != b->tile) return a->tile < b->tile ? -1 : 1;
	if (a->type != b->type) return a->type < b->type ? -1 : 1;
	return a->pi < b->pi ? -1 : a->pi > b->pi;
}

/* Events by (tile, type).  Few events against many tiles (documents):
 * qsort; many (block-sparse rows): a counting sort over the tiles. */
static void sort_events(struct pb *b)
{
	size_t nk = (size_t)b->p->nkt + 1, nkeys = 3 * nk, i;
	struct ev *tmp;

	for (i = 1; i < b->nev; i++)
		if (ev_cmp(&b->ev[i - 1], &b->ev[i]) > 0)
			break;
	if (i >= b->nev)
		return;

	if (b->nev < 16 || b->nev * 8 < nk) {
		if (b->nev > 1)
			qsort(b->ev, b->nev, sizeof *b->ev, ev_cmp);
		return;
	}
	if (b->capcount < nkeys + 1) {
		size_t *c = realloc(b->count, (nkeys + 1) * sizeof *c);
		if (c == NULL) {
			b->oom = 1;
			return;
		}
		b->count = c;
		b->capcount = nkeys + 1;
	}
	if (b->captmp < b->nev) {
		tmp = realloc(b->tmp, b->capev * sizeof *tmp);
		if (tmp == NULL) {
			b->oom = 1;
			return;
		}
		b->tmp = tmp;
		b->captmp = b->capev;
	}
	memset(b->count, 0, (nkeys + 1) * sizeof *b->count);
	for (size_t i = 0; i < b->nev; i++)
		b->count[(size_t)b->ev[i].tile * 3 + (size_t)b->ev[i].type + 1]++;
	for (size_t k = 0; k < nkeys; k++)
		b->count[k + 1] += b->count[k];
	for (size_t i = 0; i < b->nev; i++)
		b->tmp[b->count[(size_t)b->ev[i].tile * 3 + (size_t)b->ev[i].type]++] = b->ev[i];
	tmp = b->ev;
	b->ev = b->tmp;
	b->tmp = tmp;
	{
		size_t c = b->capev;
		b->capev = b->captmp;
		b->captmp = c;
	}
}

static int id_cmp(const void *pa, const void *pb)
{
	int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
	return a < b ? -1 : a > b;
}

static int64_t kwidth(const struct pb *b, int64_t t)
{
	int64_t e = (t + 1) * b->bk;
	return (e < b->m->sk ? e : b->m->sk) - t * b->bk;
}

static struct plan_ent *new_ent(struct pb *b)
{
	struct plan *p = b->p;

	if (p->nent == INT32_MAX ||
	    mask_grow(&p->ent, &b->capent, (size_t)p->nent, sizeof *p->ent) != 0) {
		b->oom = 1;
		return NULL;
	}
	return &p->ent[p->nent++];
}

static void emit_full(struct pb *b, int64_t t0, int64_t t1, int64_t rows)
{
	struct plan *p = b->p;
	struct plan_ent *e;

	p->ntiles_full += t1 - t0;
	p->area += (uint64_t)rows * (uint64_t)(kwidth(b, t1 - 1) + (t1 - 1 - t0) * b->bk);
	if (p->nent > b->rowstart) {
		e = &p->ent[p->nent - 1];
		if (e->ncut == 0 && e->t1 == t0) {
			e->t1 = (int32_t)t1;
			return;
		}
	}
	if ((e = new_ent(b)) != NULL)
		*e = (struct plan_ent){ (int32_t)t0, (int32_t)t1, 0, 0 };
}

/* A partial tile whose cuts are the pieces ids[0..n); a run of tiles with
 * the same pieces shares one copy of the cuts. */
static void emit_partial(struct pb *b, int64_t t, size_t n, uint64_t area)
{
	struct plan *p = b->p;
	struct plan_ent *e;
	int32_t cut0;

	p->ntiles_partial++;
	p->area += area;
	if (n > 16)
		qsort(b->ids, n, sizeof *b->ids, id_cmp);
	else
		for (size_t i = 1; i < n; i++)
			for (size_t j = i; j > 0 && b->ids[j - 1] > b->ids[j]; j--) {
				int32_t x = b->ids[j];
				b->ids[j] = b->ids[j - 1];
				b->ids[j - 1] = x;
			}
	if (p->nent > b->rowstart && p->ent[p->nent - 1].ncut > 0 && b->nlast == n &&
	    memcmp(b->lastids, b->ids, n * sizeof *b->ids) == 0) {
		cut0 = p->ent[p->nent - 1].cut0;
	} else {
		if ((size_t)p->ncut + n > INT32_MAX ||
		    mask_grow(&p->cut, &b->capcut, (size_t)p->ncut + n, sizeof *p->cut) != 0) {
			b->oom = 1;
			return;
		}
		cut0 = p->ncut;
		for (size_t i = 0; i < n; i++) {
			const struct mask_slice *s = &b->pc[b->ids[i]];
			p->cut[p->ncut++] = (struct plan_cut){ (int32_t)s->q0, (int32_t)s->q1,
			    (int32_t)s->k0, (int32_t)s->k1, s->kind };
		}
		memcpy(b->lastids, b->ids, n * sizeof *b->ids);
		b->nlast = n;
	}
	if ((e = new_ent(b)) != NULL)
		*e = (struct plan_ent){ (int32_t)t, (int32_t)t + 1, cut0, (int32_t)n };
}

/* tiles [x,y) touched by the live runs alone */
static void stretch(struct pb *b, int64_t x, int64_t y, uint64_t sumrows, int64_t bandrows)
{
	if (x >= y || b->nact == 0)
		return;
	if (sumrows == (uint64_t)bandrows) {
		emit_full(b, x, y, bandrows);
		return;
	}
	for (int64_t t = x; t < y && !b->oom; t++) {
		memcpy(b->ids, b->act, b->nact * sizeof *b->ids);
		emit_partial(b, t, b->nact, sumrows * (uint64_t)kwidth(b, t));
	}
}

static void band(struct pb *b, int64_t Q0, int64_t Q1)
{
	int64_t bk = b->bk, sk = b->m->sk, nkt = b->p->nkt, bandrows = Q1 - Q0;
	uint64_t sumrows = 0;
	int64_t prev = 0;

	b->nev = 0;
	for (size_t i = 0; i < b->npc; i++) {
		const struct mask_slice *s = &b->pc[i];
		int64_t ra, rb, u0, u1, i0, i1, ta, tb, ia, ib;
		mask_slice_rows(s, &ra, &rb);
		if (ra < Q0) ra = Q0;
		if (rb > Q1) rb = Q1;
		if (ra >= rb)
			continue;
		/* edges move right as rows go down */
		u0 = mask_row_lo(s, ra);
		u1 = mask_row_hi(s, rb - 1);
		i0 = mask_row_lo(s, rb - 1);
		i1 = mask_row_hi(s, ra);
		ta = u0 / bk;
		tb = (u1 - 1) / bk + 1;
		ia = (i0 + bk - 1) / bk;
		ib = i1 >= sk ? nkt : i1 / bk;
		if (i0 >= i1 || ia >= ib)
			ia = ib = tb;
		/* in tile order, so pieces that come in k order (a block row)
		 * need no sorting */
		for (int64_t t = ta; t < tb; t++) {
			uint64_t a;
			if (t == ia) {
				add_ev(b, ia, EV_START, (int32_t)i, (uint64_t)(rb - ra));
				add_ev(b, ib, EV_END, (int32_t)i, (uint64_t)(rb - ra));
				t = ib - 1;
				continue;
			}
			a = mask_clip_area(s, Q0, Q1, t * bk, t * bk + kwidth(b, t));
			if (a > 0)
				add_ev(b, t, EV_TILE, (int32_t)i, a);
		}
	}
	if (b->npc >= b->capids) {
		size_t c = b->npc + 1 > 2 * b->capids ? b->npc + 1 : 2 * b->capids;
		int32_t *x = realloc(b->act, c * sizeof *x), *y, *z;
		if (x != NULL)
			b->act = x;
		y = realloc(b->ids, c * sizeof *y);
		if (y != NULL)
			b->ids = y;
		z = realloc(b->lastids, c * sizeof *z);
		if (z != NULL)
			b->lastids = z;
		if (x == NULL || y == NULL || z == NULL)
			b->oom = 1;
		else
			b->capids = c;
	}
	if (b->oom)
		return;
	sort_events(b);
	b->nact = 0;
	b->nlast = 0;
	for (size_t e = 0; e < b->nev && !b->oom;) {
		int64_t t = b->ev[e].tile;
		stretch(b, prev, t, sumrows, bandrows);
		for (; e < b->nev && b->ev[e].tile == t && b->ev[e].type == EV_END; e++) {
			for (size_t j = 0; j < b->nact; j++)
				if (b->act[j] == b->ev[e].pi) {
					b->act[j] = b->act[--b->nact];
					break;
				}
			sumrows -= b->ev[e].amount;
		}
		for (; e < b->nev && b->ev[e].tile == t && b->ev[e].type == EV_START; e++) {
			b->act[b->nact++] = b->ev[e].pi;
			sumrows += b->ev[e].amount;
		}
		prev = t;
		if (e < b->nev && b->ev[e].tile == t) {
			uint64_t area = sumrows * (uint64_t)kwidth(b, t);
			size_t n = b->nact;
			memcpy(b->ids, b->act, n * sizeof *b->ids);
			for (; e < b->nev && b->ev[e].tile == t; e++) {
				b->ids[n++] = b->ev[e].pi;
				area += b->ev[e].amount;
			}
			if (area == (uint64_t)bandrows * (uint64_t)kwidth(b, t))
				emit_full(b, t, t + 1, bandrows);
			else if (area > 0)
				emit_partial(b, t, n, area);
			prev = t + 1;
		}
	}
}

/* The runs of kept cells [j0,j1) of block row i of head h, in k order. */
static void block_runs(struct pb *b, int h, int64_t i, void (*fn)(struct pb *, int64_t, int64_t, int64_t),
                       int64_t arg)
{
	const struct mask *m = b->m;
	int64_t nk = m->nkb, j0 = -1;
	uint64_t nbits = (uint64_t)m->heads * (uint64_t)m->nqb * (uint64_t)nk;
	uint64_t base = ((uint64_t)h * (uint64_t)m->nqb + (uint64_t)i) * (uint64_t)nk;

	for (int64_t j = 0; j < nk; j += 64) {
		uint64_t x = mask_bits64(m->bits, nbits, base + (uint64_t)j);
		int64_t lim = nk - j < 64 ? nk - j : 64;
		int pos = 0;
		if (lim < 64)
			x &= ((uint64_t)1 << lim) - 1;
		/* walk the runs of ones and zeros of this word */
		while (pos < lim) {
			uint64_t y = pos < 64 ? x >> pos : 0;
			int len;
			if (j0 >= 0) {        /* in a run: count ones */
				len = ~y == 0 ? 64 - pos : __builtin_ctzll(~y);
				if (len > lim - pos)
					len = (int)(lim - pos);
				pos += len;
				if (pos < lim) {
					fn(b, arg, j0, j + pos);
					j0 = -1;
				}
			} else {              /* between runs: count zeros */
				len = y == 0 ? (int)(lim - pos) : __builtin_ctzll(y);
				pos += len;
				if (pos < lim)
					j0 = j + pos;
			}
		}
	}
	if (j0 >= 0)
		fn(b, arg, j0, nk);
}

/* a run as one full piece of block row i */
static void run_piece(struct pb *b, int64_t i, int64_t j0, int64_t j1)
{
	const struct mask *m = b->m;

	add_piece(b, m->qb[i], m->qb[i + 1], m->kb[j0], m->kb[j1], MASK_FULL);
}

/* a run as full tiles of a band of `rows` rows, when tiles never straddle cells */
static void run_tiles(struct pb *b, int64_t rows, int64_t j0, int64_t j1)
{
	const struct mask *m = b->m;

	emit_full(b, m->kb[j0] / b->bk, (m->kb[j1] + b->bk - 1) / b->bk, rows);
}

/* Whether every cell boundary (but the last) is a tile boundary: then each
 * tile lies in one cell, so it is full or empty, and a row of the plan is
 * the runs of its block row, with no sweep. */
static int aligned(const struct mask *m, int64_t bq, int64_t bk)
{
	if (m->body != MASK_BODY_BLOCKS)
		return 0;
	for (int64_t i = 0; i < m->nqb; i++)
		if (m->qb[i] % bq != 0)
			return 0;
	for (int64_t j = 0; j < m->nkb; j++)
		if (m->kb[j] % bk != 0)
			return 0;
	return 1;
}

void plan_free(struct plan *p)
{
	free(p->row);
	free(p->ent);
	free(p->cut);
	memset(p, 0, sizeof *p);
}

int plan_build(struct plan *p, const struct mask *m, int bq, int bk, char *err, size_t errlen)
{
	struct pb b;
	int64_t nqt, nkt, nrows;
	size_t nx = 0;
	int rc = 0, fast;

	memset(p, 0, sizeof *p);
	if (bq < 1 || bk < 1)
		return mask_fail(err, errlen, "tile %d x %d: must be at least 1 x 1", bq, bk);
	if (m->sq >= ((int64_t)1 << 31) || m->sk >= ((int64_t)1 << 31))
		return mask_fail(err, errlen, "seqlen %lld x %lld: a plan needs seqlen below 2^31",
		    (long long)m->sq, (long long)m->sk);
	if (m->sq < 1 || m->sk < 1 || m->heads < 1)
		return mask_fail(err, errlen, "empty mask");
	nqt = (m->sq + bq - 1) / bq;
	nkt = (m->sk + bk - 1) / bk;
	nrows = nqt * m->heads;
	if (nrows >= INT32_MAX)
		return mask_fail(err, errlen, "%d heads x %lld q-tiles: too many rows for a plan",
		    m->heads, (long long)nqt);
	memset(&b, 0, sizeof b);
	b.p = p;
	b.m = m;
	b.bk = bk;
	p->bq = bq;
	p->bk = bk;
	p->sq = (int32_t)m->sq;
	p->sk = (int32_t)m->sk;
	p->nqt = (int32_t)nqt;
	p->nkt = (int32_t)nkt;
	p->heads = m->heads;
	p->nrows = (int32_t)nrows;
	p->row = malloc((size_t)(nrows + 1) * sizeof *p->row);
	if (p->row == NULL)
		b.oom = 1;
	fast = aligned(m, bq, bk);
	for (int h = 0; h < m->heads && !b.oom; h++) {
		int64_t bi = 0;      /* first block row that may touch the band */
		size_t live = 0;     /* slices kept in b.pc from earlier bands */
		nx = 0;
		b.npc = 0;
		for (int64_t r = 0; r < nqt && !b.oom; r++) {
			int64_t Q0 = r * bq, Q1 = Q0 + bq < m->sq ? Q0 + bq : m->sq;
			p->row[h * nqt + r] = p->nent;
			b.rowstart = p->nent;
			if (m->body == MASK_BODY_SLICES) {
				/* keep the slices still alive, then take the new ones */
				size_t k = 0;
				for (size_t i = 0; i < live; i++)
					if (b.pc[i].q1 > Q0)
						b.pc[k++] = b.pc[i];
				b.npc = k;
				for (; nx < m->nslices && m->slices[nx].q0 < Q1; nx++) {
					const struct mask_slice *s = &m->slices[nx];
					add_piece(&b, s->q0, s->q1, s->k0, s->k1, s->kind);
				}
				live = b.npc;
			} else {
				b.npc = 0;
				while (m->qb[bi + 1] <= Q0)
					bi++;
				if (fast) {
					block_runs(&b, h, bi, run_tiles, Q1 - Q0);
					continue;
				}
				for (int64_t i = bi; i < m->nqb && m->qb[i] < Q1; i++)
					block_runs(&b, h, i, run_piece, i);
			}
			if (!b.oom)
				band(&b, Q0, Q1);
		}
	}
	if (!b.oom)
		p->row[nrows] = p->nent;
	if (b.oom) {
		plan_free(p);
		rc = mask_fail(err, errlen, "out of memory (or more than 2^31 plan entries)");
	} else if (p->area != m->area) {
		rc = mask_fail(err, errlen, "plan area %llu != mask area %llu",
		    (unsigned long long)p->area, (unsigned long long)m->area);
		plan_free(p);
	}
	free(b.pc);
	free(b.ev);
	free(b.tmp);
	free(b.count);
	free(b.act);
	free(b.ids);
	free(b.lastids);
	return rc;
}
