/* The transposed plan: per k-tile the q-tiles.  Walking the q-tile rows in
 * order, a k-tile's run of full q-tiles opens where the row's full runs
 * start covering it and closes where they stop, so the work is the
 * difference between consecutive rows' full runs, never tiles squared. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "mask_priv.h"

struct tent {
	int32_t row;     /* transposed row */
	struct plan_ent e;
};

struct tp {
	struct tent *t;
	size_t n, cap;
	int oom;
};

static void put(struct tp *w, int32_t row, int32_t t0, int32_t t1, int32_t cut0, int32_t ncut)
{
	if (mask_grow(&w->t, &w->cap, w->n, sizeof *w->t) != 0) {
		w->oom = 1;
		return;
	}
	w->t[w->n++] = (struct tent){ row, { t0, t1, cut0, ncut } };
}

/* k-tiles of the full runs of entries [e0,e1) that are not in [f0,f1):
 * call fn for each.  Both lists are ascending and disjoint. */
static void minus(const struct plan_ent *ent, int32_t e0, int32_t e1, int32_t f0, int32_t f1,
                  void (*fn)(void *, int32_t), void *arg)
{
	int32_t f = f0;

	for (int32_t e = e0; e < e1; e++) {
		int32_t x;
		if (ent[e].ncut > 0)
			continue;
		x = ent[e].t0;
		while (x < ent[e].t1) {
			while (f < f1 && (ent[f].ncut > 0 || ent[f].t1 <= x))
				f++;
			if (f < f1 && ent[f].t0 <= x) {
				x = ent[f].t1;      /* covered by the other row */
				continue;
			}
			int32_t end = f < f1 && ent[f].t0 < ent[e].t1 ? ent[f].t0 : ent[e].t1;
			for (; x < end; x++)
				fn(arg, x);
		}
	}
}

struct walk {
	struct tp *w;
	int32_t *open;      /* per k-tile: first q-tile of its open full run, or -1 */
	int32_t base;       /* h * nkt */
	int32_t r;          /* current q-tile */
};

static void close_run(void *a, int32_t k)
{
	struct walk *x = a;

	put(x->w, x->base + k, x->open[k], x->r, 0, 0);
	x->open[k] = -1;
}

static void open_run(void *a, int32_t k)
{
	struct walk *x = a;

	x->open[k] = x->r;
}

static int tent_cmp(const void *pa, const void *pb)
{
	const struct tent *a = pa, *b = pb;

	if (a->row != b->row) return a->row < b->row ? -1 : 1;
	return a->e.t0 < b->e.t0 ? -1 : a->e.t0 > b->e.t0;
}

int plan_transpose(struct plan *t, const struct plan *p, char *err, size_t errlen)
{
	struct tp w = { NULL, 0, 0, 0 };
	struct walk x;
	int32_t nq, nk;

	memset(t, 0, sizeof *t);
	if (p->transposed)
		return mask_fail(err, errlen, "plan is already transposed");
	nq = p->nqt;
	nk = p->nkt;
	if ((int64_t)p->heads * nk >= INT32_MAX)
		return mask_fail(err, errlen, "too many k-tiles for a plan");
	*t = *p;
	t->transposed = 1;
	t->nrows = p->heads * nk;
	t->row = calloc((size_t)t->nrows + 1, sizeof *t->row);
	t->cut = malloc(((size_t)p->ncut + 1) * sizeof *t->cut);
	t->ent = NULL;
	x.open = malloc(((size_t)nk + 1) * sizeof *x.open);
	x.w = &w;
	if (t->row == NULL || t->cut == NULL || x.open == NULL) {
		w.oom = 1;
		goto done;
	}
	if (p->ncut > 0)
		memcpy(t->cut, p->cut, (size_t)p->ncut * sizeof *p->cut);
	for (int32_t h = 0; h < p->heads && !w.oom; h++) {
		int32_t pe0 = 0, pe1 = 0;          /* previous row's entries */
		for (int32_t k = 0; k < nk; k++)
			x.open[k] = -1;
		x.base = h * nk;
		for (int32_t r = 0; r <= nq; r++) {
			int32_t e0 = r < nq ? p->row[h * nq + r] : 0;
			int32_t e1 = r < nq ? p->row[h * nq + r + 1] : 0;
			x.r = r;
			/* runs end before this row's partials, so order holds */
			minus(p->ent, pe0, pe1, e0, e1, close_run, &x);
			minus(p->ent, e0, e1, pe0, pe1, open_run, &x);
			for (int32_t e = e0; e < e1; e++)
				if (p->ent[e].ncut > 0)
					put(&w, x.base + p->ent[e].t0, r, r + 1, p->ent[e].cut0, p->ent[e].ncut);
			pe0 = e0;
			pe1 = e1;
		}
	}
	if (w.oom || w.n >= INT32_MAX) {
		w.oom = 1;
		goto done;
	}
	/* stable by (row, t0): entries of one row were made in ascending order */
	if (w.n > 1)
		qsort(w.t, w.n, sizeof *w.t, tent_cmp);
	t->ent = malloc((w.n + 1) * sizeof *t->ent);
	if (t->ent == NULL) {
		w.oom = 1;
		goto done;
	}
	t->nent = (int32_t)w.n;
	for (size_t i = 0; i < w.n; i++) {
		t->ent[i] = w.t[i].e;
		t->row[w.t[i].row + 1]++;
	}
	for (int32_t r = 0; r < t->nrows; r++)
		t->row[r + 1] += t->row[r];
done:
	free(w.t);
	free(x.open);
	if (w.oom) {
		plan_free(t);
		return mask_fail(err, errlen, "out of memory (or more than 2^31 plan entries)");
	}
	return 0;
}
