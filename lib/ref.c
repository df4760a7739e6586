#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref.h"
#include "util.h"

#define T REF_TILE

/* Everything a work item needs; the pointers that a pass does not use are
 * NULL. */
struct job {
	const struct ref *r;
	const struct attn_shape *s;
	const double *q, *k, *v, *o, *lse, *dout;
	double *O, *LSE, *dq, *dk, *dv, *D;
	int hdp;          /* hd rounded up to 8: the d loops run in blocks of 8 */
};

/* Per-thread workspace, in doubles. */
enum { W_QA, W_DA, W_KT, W_KR, W_VT, W_VR, W_ACC, W_ACC2, W_NTILES };

struct ws {
	double *t[W_NTILES];   /* T x hdp (or hdp x T) tiles */
	double *s, *p;         /* T x T */
	double *m, *l, *lse, *dd;
};

typedef void item_fn(const struct job *, int64_t, struct ws *);

struct pool {
	const struct job *j;
	item_fn *fn;
	int64_t n;
	atomic_llong next;
};

int ref_threads(void)
{
	const char *e = getenv("LONGATTN_THREADS");
	long n;

	if (e != NULL && (n = strtol(e, NULL, 10)) >= 1)
		return n > 1024 ? 1024 : (int)n;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

static void ws_alloc(struct ws *w, int hdp)
{
	size_t tile = (size_t)T * hdp;
	double *b = xmalloc((W_NTILES * tile + 2 * T * T + 4 * T) * sizeof *b);

	for (int i = 0; i < W_NTILES; i++, b += tile)
		w->t[i] = b;
	w->s = b; b += T * T;
	w->p = b; b += T * T;
	w->m = b; b += T;
	w->l = b; b += T;
	w->lse = b; b += T;
	w->dd = b;
}

static void *worker(void *arg)
{
	struct pool *p = arg;
	struct ws w;
	int64_t i;

	ws_alloc(&w, p->j->hdp);
	while ((i = atomic_fetch_add(&p->next, 1)) < p->n)
		p->fn(p->j, i, &w);
	free(w.t[0]);
	return NULL;
}

/* Items are claimed one at a time: tiles of a causal or document mask
 * differ in cost by orders of magnitude, so static splits would idle. */
static void pfor(const struct job *j, item_fn *fn, int64_t n)
{
	struct pool p = { j, fn, n, 0 };
	int nt = j->r->threads;

	run_threads(nt > n ? (int)n : nt, worker, &p);
}

int ref_init(struct ref *r, const struct mask *m, char *err, size_t errlen)
{
	memset(r, 0, sizeof *r);
	if (plan_build(&r->fw, m, T, T, err, errlen) != 0)
		return -1;
	if (plan_transpose(&r->bw, &r->fw, err, errlen) != 0) {
		plan_free(&r->fw);
		return -1;
	}
	r->threads = ref_threads();
	return 0;
}

void ref_free(struct ref *r)
{
	plan_free(&r->fw);
	plan_free(&r->bw);
}

const char *ref_check(const struct attn_shape *s, const struct mask *m)
{
	if (s->batch < 1 || s->hq < 1 || s->hkv < 1 || s->hd < 1)
		return "batch, heads and head dim must be positive";
	if (s->hq % s->hkv != 0)
		return "heads_kv does not divide heads_q";
	if (m->heads < 1 || s->hq % m->heads != 0)
		return "mask heads do not divide heads_q";
	if (s->sq != m->sq || s->sk != m->sk)
		return "sequence lengths differ from the mask's";
	return NULL;
}

/* ---- tiles ------------------------------------------------------------------ */

/* dst[i][d] = src[(r0+i)*stride + d]: n rows, zero rows and columns beyond
 * (padding must be finite: it is multiplied by zeros). */
static void load_rows(double *dst, const double *src, int64_t r0, int n, int64_t stride,
    int hd, int hdp)
{
	memset(dst, 0, (size_t)T * hdp * sizeof *dst);
	for (int i = 0; i < n; i++)
		memcpy(dst + (size_t)i * hdp, src + (r0 + i) * stride, hd * sizeof *dst);
}

/* dst[d][j] = src[(r0+j)*stride + d] */
static void load_cols(double *dst, const double *src, int64_t r0, int n, int64_t stride,
    int hd)
{
	memset(dst, 0, (size_t)T * hd * sizeof *dst);
	for (int j = 0; j < n; j++) {
		const double *x = src + (r0 + j) * stride;
		for (int d = 0; d < hd; d++)
			dst[(size_t)d * T + j] = x[d];
	}
}

/* s[i][j] = scale * a_i . b_j with bT [hd][T]: the j loop has a constant
 * trip count and restrict pointers so that it vectorises at -O2 (whose
 * cost model allows neither an epilogue nor alias checks), and each sum
 * runs in a fixed d order, so results do not depend on the thread count. */
static void dots(double *restrict s, const double *restrict a, int n,
    const double *restrict bT, int hd, int hdp, double scale)
{
	for (int i = 0; i < n; i++) {
		double *si = s + (size_t)i * T;
		const double *ai = a + (size_t)i * hdp;
		for (int j = 0; j < T; j++)
			si[j] = 0;
		for (int d = 0; d < hd; d++) {
			double x = ai[d];
			const double *b = bT + (size_t)d * T;
			for (int j = 0; j < T; j++)
				si[j] += x * b[j];
		}
		for (int j = 0; j < T; j++)
			si[j] *= scale;
	}
}

/* y += a * x over hdp values, hdp a multiple of 8. */
static void axpy(double *restrict y, double a, const double *restrict x, int hdp)
{
	for (int d = 0; d < hdp; d += 8)
		for (int e = 0; e < 8; e++)
			y[d + e] += a * x[d + e];
}

/* Set the disallowed scores of the tile at (q0,k0) to -inf. */
static void apply_mask(double *s, int nq, int nk, int64_t q0, int64_t k0,
    const struct plan *p, const struct plan_ent *e)
{
	for (int i = 0; i < nq; i++) {
		double *si = s + (size_t)i * T;
		for (int j = nk; j < T; j++)
			si[j] = -INFINITY;
		if (e->ncut == 0)
			continue;
		for (int j = 0; j < nk; j++) {
			int ok = 0;
			for (int c = 0; c < e->ncut && !ok; c++)
				ok = plan_cut_allows(&p->cut[e->cut0 + c], q0 + i, k0 + j);
			if (!ok)
				si[j] = -INFINITY;
		}
	}
}

/* Rows of the tile at x0 in a sequence of n: T, or what is left at the end. */
static int tile_len(int64_t n, int64_t x0)
{
	return (int)(n - x0 < T ? n - x0 : T);
}

/* A q-tile item of the forward plan (fwd and dq): q-head h of batch b at
 * rows q0..q0+nq, row its plan row, kb and vb its kv-head's k and v. */
struct qitem {
	int64_t b, h, q0, qoff, qstride, kstride;
	int nq;
	int32_t row;
	const double *kb, *vb;
};

static struct qitem qitem(const struct job *j, int64_t it)
{
	const struct attn_shape *s = j->s;
	const struct plan *p = &j->r->fw;
	int64_t qt = it % p->nqt, h = it / p->nqt % s->hq, b = it / p->nqt / s->hq;
	int64_t kv = (b * s->sk * s->hkv + h / (s->hq / s->hkv)) * s->hd;
	struct qitem x = {
		.b = b, .h = h, .q0 = qt * p->bq, .qoff = (b * s->sq * s->hq + h) * s->hd,
		.qstride = (int64_t)s->hq * s->hd, .kstride = (int64_t)s->hkv * s->hd,
		.nq = tile_len(s->sq, qt * p->bq),
		.row = (int32_t)(h / (s->hq / p->heads) * p->nqt + qt),
		.kb = j->k + kv, .vb = j->v + kv,
	};
	return x;
}

/* ---- forward ------------------------------------------------------------- */

/* Fold one k-tile's scores (w->s, nk columns; v rows in W_VR) into the
 * running max m, sum l and unnormalised output W_ACC of nq rows. */
static void softmax_step(struct ws *w, int nq, int nk, int hdp)
{
	const double *vr = w->t[W_VR];

	for (int i = 0; i < nq; i++) {
		double *si = w->s + (size_t)i * T, mx = w->m[i], alpha;
		double *ai = w->t[W_ACC] + (size_t)i * hdp;
		for (int jj = 0; jj < nk; jj++)
			if (si[jj] > mx)
				mx = si[jj];
		if (mx == -INFINITY)
			continue;
		alpha = exp(w->m[i] - mx);
		w->l[i] *= alpha;
		for (int d = 0; d < hdp; d++)
			ai[d] *= alpha;
		for (int jj = 0; jj < nk; jj++) {
			double pr;
			if (si[jj] == -INFINITY)
				continue;
			pr = exp(si[jj] - mx);
			w->l[i] += pr;
			axpy(ai, pr, vr + (size_t)jj * hdp, hdp);
		}
		w->m[i] = mx;
	}
}

static void fwd_item(const struct job *j, int64_t it, struct ws *w)
{
	const struct attn_shape *s = j->s;
	const struct plan *p = &j->r->fw;
	const struct qitem x = qitem(j, it);
	int hd = s->hd, hdp = j->hdp;
	double *acc = w->t[W_ACC];

	load_rows(w->t[W_QA], j->q + x.qoff, x.q0, x.nq, x.qstride, hd, hdp);
	memset(acc, 0, (size_t)T * hdp * sizeof *acc);
	for (int i = 0; i < x.nq; i++) {
		w->m[i] = -INFINITY;
		w->l[i] = 0;
	}
	for (int32_t e = p->row[x.row]; e < p->row[x.row + 1]; e++) {
		const struct plan_ent *en = &p->ent[e];
		for (int32_t kt = en->t0; kt < en->t1; kt++) {
			int64_t k0 = (int64_t)kt * p->bk;
			int nk = tile_len(s->sk, k0);
			load_cols(w->t[W_KT], x.kb, k0, nk, x.kstride, hd);
			load_rows(w->t[W_VR], x.vb, k0, nk, x.kstride, hd, hdp);
			dots(w->s, w->t[W_QA], x.nq, w->t[W_KT], hd, hdp, s->scale);
			apply_mask(w->s, x.nq, nk, x.q0, k0, p, en);
			softmax_step(w, x.nq, nk, hdp);
		}
	}
	for (int i = 0; i < x.nq; i++) {
		double *oi = j->O + x.qoff + (x.q0 + i) * x.qstride;
		double l = w->l[i];
		j->LSE[(x.b * s->hq + x.h) * s->sq + x.q0 + i] = l > 0 ? w->m[i] + log(l) : -INFINITY;
		for (int d = 0; d < hd; d++)
			oi[d] = l > 0 ? acc[(size_t)i * hdp + d] / l : 0;
	}
}

static int hdpad(int hd) { return (hd + 7) / 8 * 8; }

void ref_fwd(const struct ref *r, const struct attn_shape *s,
    const double *q, const double *k, const double *v, double *o, double *lse)
{
	struct job j = { .r = r, .s = s, .q = q, .k = k, .v = v, .O = o, .LSE = lse,
	                 .hdp = hdpad(s->hd) };

	pfor(&j, fwd_item, (int64_t)s->batch * s->hq * r->fw.nqt);
}

/* ---- backward ------------------------------------------------------------ */

/* D = rowsum(dO o O), per (batch, q-head) item. */
static void d_item(const struct job *j, int64_t it, struct ws *w)
{
	const struct attn_shape *s = j->s;
	int64_t h = it % s->hq, b = it / s->hq, stride = (int64_t)s->hq * s->hd;

	(void)w;
	for (int64_t i = 0; i < s->sq; i++) {
		const double *o = j->o + (b * s->sq + i) * stride + h * s->hd;
		const double *g = j->dout + (b * s->sq + i) * stride + h * s->hd;
		double d = 0;
		for (int x = 0; x < s->hd; x++)
			d += o[x] * g[x];
		j->D[it * s->sq + i] = d;
	}
}

/* P, dP and dS of one tile: p = exp(s - lse), ds = p * (dp - D), zero
 * where masked or where the row allows nothing (lse = -inf). */
static void tile_grad(const struct job *j, struct ws *w, int nq, int nk, int64_t q0, int64_t k0,
    const struct plan *p, const struct plan_ent *e)
{
	const struct attn_shape *s = j->s;

	dots(w->s, w->t[W_QA], nq, w->t[W_KT], s->hd, j->hdp, s->scale);
	apply_mask(w->s, nq, nk, q0, k0, p, e);
	dots(w->p, w->t[W_DA], nq, w->t[W_VT], s->hd, j->hdp, 1.0);
	for (int i = 0; i < nq; i++) {
		double *si = w->s + (size_t)i * T, *pi = w->p + (size_t)i * T;
		double lse = w->lse[i], dd = w->dd[i];
		for (int jj = 0; jj < T; jj++) {
			double pr = lse == -INFINITY || si[jj] == -INFINITY ? 0 : exp(si[jj] - lse);
			pi[jj] = pr * (pi[jj] - dd);   /* dS */
			si[jj] = pr;                     /* P */
		}
	}
}

/* Q-side rows of (b, h) at q0: q, dout, lse, D. */
static void load_qside(const struct job *j, struct ws *w, int64_t b, int64_t h, int64_t q0, int nq)
{
	const struct attn_shape *s = j->s;
	int64_t stride = (int64_t)s->hq * s->hd, base = b * s->sq * stride + h * s->hd;

	load_rows(w->t[W_QA], j->q + base, q0, nq, stride, s->hd, j->hdp);
	load_rows(w->t[W_DA], j->dout + base, q0, nq, stride, s->hd, j->hdp);
	for (int i = 0; i < nq; i++) {
		w->lse[i] = j->lse[(b * s->hq + h) * s->sq + q0 + i];
		w->dd[i] = j->D[(b * s->hq + h) * s->sq + q0 + i];
	}
}

static void dq_item(const struct job *j, int64_t it, struct ws *w)
{
	const struct attn_shape *s = j->s;
	const struct plan *p = &j->r->fw;
	const struct qitem x = qitem(j, it);
	int hd = s->hd, hdp = j->hdp;
	double *acc = w->t[W_ACC];

	load_qside(j, w, x.b, x.h, x.q0, x.nq);
	memset(acc, 0, (size_t)T * hdp * sizeof *acc);
	for (int32_t e = p->row[x.row]; e < p->row[x.row + 1]; e++) {
		const struct plan_ent *en = &p->ent[e];
		for (int32_t kt = en->t0; kt < en->t1; kt++) {
			int64_t k0 = (int64_t)kt * p->bk;
			int nk = tile_len(s->sk, k0);
			load_cols(w->t[W_KT], x.kb, k0, nk, x.kstride, hd);
			load_cols(w->t[W_VT], x.vb, k0, nk, x.kstride, hd);
			load_rows(w->t[W_KR], x.kb, k0, nk, x.kstride, hd, hdp);
			tile_grad(j, w, x.nq, nk, x.q0, k0, p, en);
			for (int i = 0; i < x.nq; i++)
				for (int jj = 0; jj < nk; jj++) {
					double ds = w->p[(size_t)i * T + jj];
					if (ds != 0)
						axpy(acc + (size_t)i * hdp, ds, w->t[W_KR] + (size_t)jj * hdp, hdp);
				}
		}
	}
	for (int i = 0; i < x.nq; i++) {
		double *g = j->dq + x.qoff + (x.q0 + i) * x.qstride;
		for (int d = 0; d < hd; d++)
			g[d] = s->scale * acc[(size_t)i * hdp + d];
	}
}

/* dV += P^T dO and dK += dS^T Q (unscaled) of one q-tile, into W_ACC2
 * and W_ACC. */
static void dkv_step(struct ws *w, int nq, int nk, int hdp)
{
	double *dka = w->t[W_ACC], *dva = w->t[W_ACC2];

	for (int jj = 0; jj < nk; jj++)
		for (int i = 0; i < nq; i++) {
			double pr = w->s[(size_t)i * T + jj];
			double ds = w->p[(size_t)i * T + jj];
			if (pr != 0)
				axpy(dva + (size_t)jj * hdp, pr, w->t[W_DA] + (size_t)i * hdp, hdp);
			if (ds != 0)
				axpy(dka + (size_t)jj * hdp, ds, w->t[W_QA] + (size_t)i * hdp, hdp);
		}
}

/* dK and dV of one kv-head's k-tile: every q-head of its group, through the
 * transposed plan, so no two items write the same rows. */
static void dkv_item(const struct job *j, int64_t it, struct ws *w)
{
	const struct attn_shape *s = j->s;
	const struct plan *p = &j->r->bw, *fw = &j->r->fw;
	int hd = s->hd, hdp = j->hdp, group = s->hq / s->hkv;
	int64_t kt = it % p->nkt, kvh = it / p->nkt % s->hkv, b = it / p->nkt / s->hkv;
	int64_t k0 = kt * p->bk, kstride = (int64_t)s->hkv * hd, kv = (b * s->sk * s->hkv + kvh) * hd;
	int nk = tile_len(s->sk, k0);
	double *dka = w->t[W_ACC], *dva = w->t[W_ACC2];

	load_cols(w->t[W_KT], j->k + kv, k0, nk, kstride, hd);
	load_cols(w->t[W_VT], j->v + kv, k0, nk, kstride, hd);
	memset(dka, 0, (size_t)T * hdp * sizeof *dka);
	memset(dva, 0, (size_t)T * hdp * sizeof *dva);
	for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
		int32_t r = (int32_t)(h / (s->hq / p->heads) * p->nkt + kt);
		for (int32_t e = p->row[r]; e < p->row[r + 1]; e++) {
			const struct plan_ent *en = &p->ent[e];
			for (int32_t qt = en->t0; qt < en->t1; qt++) {
				int64_t q0 = (int64_t)qt * fw->bq;
				int nq = tile_len(s->sq, q0);
				load_qside(j, w, b, h, q0, nq);
				tile_grad(j, w, nq, nk, q0, k0, p, en);
				dkv_step(w, nq, nk, hdp);
			}
		}
	}
	for (int jj = 0; jj < nk; jj++) {
		int64_t off = kv + (k0 + jj) * kstride;
		for (int d = 0; d < hd; d++) {
			j->dk[off + d] = s->scale * dka[(size_t)jj * hdp + d];
			j->dv[off + d] = dva[(size_t)jj * hdp + d];
		}
	}
}

void ref_bwd(const struct ref *r, const struct attn_shape *s,
    const double *q, const double *k, const double *v,
    const double *o, const double *lse, const double *dout,
    double *dq, double *dk, double *dv)
{
	struct job j = { .r = r, .s = s, .q = q, .k = k, .v = v, .o = o, .lse = lse,
	                 .dout = dout, .dq = dq, .dk = dk, .dv = dv, .hdp = hdpad(s->hd) };

	j.D = xmalloc((size_t)s->batch * s->hq * s->sq * sizeof *j.D);
	pfor(&j, d_item, (int64_t)s->batch * s->hq);
	pfor(&j, dq_item, (int64_t)s->batch * s->hq * r->fw.nqt);
	pfor(&j, dkv_item, (int64_t)s->batch * s->hkv * r->bw.nkt);
	free(j.D);
}

/* ---- inputs and errors ------------------------------------------------------ */

void ref_sizes(const struct attn_shape *s, size_t *nq, size_t *nk, size_t *nl)
{
	*nq = (size_t)s->batch * s->sq * s->hq * s->hd;
	*nk = (size_t)s->batch * s->sk * s->hkv * s->hd;
	*nl = (size_t)s->batch * s->hq * s->sq;
}

/* malloc, not xmalloc: the cpu kernel reports running out as an oom row. */
int ref_bufs_alloc(struct ref_bufs *x, const struct attn_shape *s)
{
	/* four q-side buffers, four kv-side, lse */
	double **p[] = { &x->q, &x->o, &x->dout, &x->dq, &x->k, &x->v, &x->dk, &x->dv, &x->lse };

	memset(x, 0, sizeof *x);
	ref_sizes(s, &x->nq, &x->nk, &x->nl);
	for (int i = 0; i < 9; i++) {
		size_t n = i < 4 ? x->nq : i < 8 ? x->nk : x->nl;
		if ((*p[i] = malloc(n * sizeof(double))) == NULL) {
			ref_bufs_free(x);
			return -1;
		}
	}
	return 0;
}

void ref_bufs_free(struct ref_bufs *x)
{
	free(x->q); free(x->k); free(x->v); free(x->o); free(x->lse);
	free(x->dout); free(x->dq); free(x->dk); free(x->dv);
	memset(x, 0, sizeof *x);
}

void ref_randn(struct rng *g, double *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		/* Irwin-Hall(4) from the four 16-bit quarters of one draw,
		 * centred, unit variance: bounded, and cheap enough for the
		 * hundreds of millions of values of a 32K-token benchmark. */
		uint64_t r = rng_next(g);
		double u = (double)(r & 0xffff) + (double)(r >> 16 & 0xffff) +
		    (double)(r >> 32 & 0xffff) + (double)(r >> 48);
		double y = (u / 65536.0 - 2) * 1.7320508075688772;
		if (fabs(y) < 1.0 / 64)
			y = y < 0 ? -1.0 / 64 : 1.0 / 64;
		x[i] = y;
	}
}

double ref_relerr(const double *x, const double *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double a = x[i], b = ref[i];
		if (isnan(a) || isnan(b))
			return NAN;
		if (isinf(a) || isinf(b)) {
			if (a != b)
				return INFINITY;
			continue;
		}
		num += (a - b) * (a - b);
		den += b * b;
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}
