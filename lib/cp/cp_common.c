/* The harness every CP strategy runs in: inputs from the seed, shards in
 * the strategy's layout, the timing loop, agreement across ranks, and the
 * --check against lib/ref's fp64 attention. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_impl.h"
#include "half.h"
#include "ref.h"
#include "rng.h"
#include "util.h"

enum { T_Q, T_K, T_V, T_DOUT };

#define WHYLEN 160

int cp_refuse(struct cp_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(res->why, sizeof res->why, fmt, ap);
	va_end(ap);
	return res->status = CP_UNSUPPORTED;
}

int cp_fail(struct cp_run *r, const char *fmt, ...)
{
	va_list ap;

	if (r->why[0] == 0) {
		va_start(ap, fmt);
		vsnprintf(r->why, sizeof r->why, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int cp_kern_rc(struct cp_run *r, int rc, const char *pass)
{
	if (rc == KERN_OK)
		return 0;
	if (rc == KERN_OOM)
		r->oom = 1;
	return cp_fail(r, "kernel %s: %s %s", r->env->kern->name, pass,
	               rc == KERN_OOM ? "ran out of memory" : "failed");
}

void cp_commfail(struct cp_run *r, const char *what)
{
	char msg[200];

	snprintf(msg, sizeof msg, "cp: %s failed", what);
	comm_abort(r->env->world, msg);
}

void *cp_alloc(struct cp_run *r, size_t n, int *bad)
{
	void *p = ops_alloc(&r->x, n);

	if (p == NULL)
		*bad = 1;
	return p;
}

void cp_free(struct cp_run *r, void *const *bufs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ops_free(&r->x, bufs[i]);
}

int cp_member(int64_t S, int R, int j, int64_t rg[2][2])
{
	return cp_ranges(S, R, 1, j, rg);
}

int cp_ranges(int64_t S, int R, int U, int rank, int64_t rg[2][2])
{
	int64_t h = S / (2 * R), c = S / ((int64_t)R * U);
	int j = rank / U, u = rank % U, n = 0;
	int64_t a = (int64_t)u * c, e = a + c;

	if (R == 1) {
		rg[0][0] = a;
		rg[0][1] = e;
		return 1;
	}

	if (a < h) {
		rg[n][0] = (int64_t)j * h + a;
		rg[n][1] = (int64_t)j * h + (e < h ? e : h);
		n++;
	}
	if (e > h) {
		int64_t b0 = (int64_t)(2 * R - 1 - j) * h;
		rg[n][0] = b0 + (a > h ? a - h : 0);
		rg[n][1] = b0 + e - h;
		if (n == 1 && rg[0][1] == rg[1][0])
			rg[0][1] = rg[1][1];
		else
			n++;
	}
	return n;
}

/* Block bodies: the restricted pieces' block boundaries, side by side, and
 * their cells copied to where the pieces landed. */
static int piece_blocks(const struct mask *m, int64_t qr[][2], int nq, int64_t kr[][2], int nk,
                        struct mask *out, char *err, size_t errlen)
{
	struct mask *p = xcalloc((size_t)nq * nk, sizeof *p);
	int64_t nqb = 0, nkb = 0, sq = 0, sk = 0, *qb, *kb, qo = 0, ko = 0;
	int n = 0, rc = -1;

	for (; n < nq * nk; n++)
		if (mask_restrict(m, qr[n / nk][0], qr[n / nk][1], kr[n % nk][0], kr[n % nk][1],
		                  &p[n], err, errlen) < 0)
			goto out;
	for (int i = 0; i < nq; i++)
		nqb += p[i * nk].nqb;
	for (int j = 0; j < nk; j++)
		nkb += p[j].nkb;
	qb = xcalloc(nqb + 1, sizeof *qb);
	kb = xcalloc(nkb + 1, sizeof *kb);
	for (int i = 0, a = 0; i < nq; sq += p[i * nk].sq, i++)
		for (int64_t x = 0; x < p[i * nk].nqb; x++)
			qb[++a] = sq + p[i * nk].qb[x + 1];
	for (int j = 0, a = 0; j < nk; sk += p[j].sk, j++)
		for (int64_t x = 0; x < p[j].nkb; x++)
			kb[++a] = sk + p[j].kb[x + 1];
	rc = mask_init_blocks(out, sq, sk, m->heads, nqb, qb, nkb, kb, m->pattern, m->params);
	free(qb);
	free(kb);
	if (rc < 0) {
		snprintf(err, errlen, "mask piece: out of memory");
		goto out;
	}
	for (int i = 0; i < nq; qo += p[i * nk].nqb, i++) {
		ko = 0;
		for (int j = 0; j < nk; ko += p[j].nkb, j++) {
			const struct mask *c = &p[i * nk + j];
			for (int h = 0; h < m->heads; h++)
				for (int64_t a = 0; a < c->nqb; a++)
					for (int64_t b = 0; b < c->nkb; b++)
						if (mask_getblock(c, h, a, b))
							mask_setblock(out, h, qo + a, ko + b);
		}
	}
	if ((rc = mask_finish(out, err, errlen)) < 0)
		mask_free(out);
out:
	while (n-- > 0)
		mask_free(&p[n]);
	free(p);
	return rc;
}

int cp_piece(const struct mask *m, int64_t qr[][2], int nq, int64_t kr[][2], int nk,
             struct mask *out, char *err, size_t errlen)
{
	int64_t sq = 0, sk = 0, qo = 0, ko;
	struct mask t;

	if (nq == 1 && nk == 1)
		return mask_restrict(m, qr[0][0], qr[0][1], kr[0][0], kr[0][1], out, err, errlen);
	if (m->body == MASK_BODY_BLOCKS)
		return piece_blocks(m, qr, nq, kr, nk, out, err, errlen);
	for (int i = 0; i < nq; i++)
		sq += qr[i][1] - qr[i][0];
	for (int i = 0; i < nk; i++)
		sk += kr[i][1] - kr[i][0];
	mask_init(out, sq, sk, m->pattern, m->params);
	for (int i = 0; i < nq; i++) {
		ko = 0;
		for (int j = 0; j < nk; j++) {
			if (mask_restrict(m, qr[i][0], qr[i][1], kr[j][0], kr[j][1], &t, err, errlen) < 0)
				goto bad;
			for (size_t s = 0; s < t.nslices; s++) {
				const struct mask_slice *p = &t.slices[s];
				if (mask_add(out, p->q0 + qo, p->q1 + qo, p->k0 + ko, p->k1 + ko, p->kind) < 0) {
					snprintf(err, errlen, "mask piece: cannot add a slice");
					mask_free(&t);
					goto bad;
				}
			}
			mask_free(&t);
			ko += kr[j][1] - kr[j][0];
		}
		qo += qr[i][1] - qr[i][0];
	}
	if (mask_finish(out, err, errlen) < 0)
		goto bad;
	return 0;
bad:
	mask_free(out);
	return -1;
}

struct attn_shape cp_local_shape(const struct cp_run *r, int64_t sq, int64_t sk, int hq, int hkv)
{
	struct attn_shape s = r->job->shape;

	s.sq = sq;
	s.sk = sk;
	s.hq = hq;
	s.hkv = hkv;
	return s;
}

/* The kernel's verdict on a local shape: NULL or why it cannot. */
static const char *kern_check(const struct cp_run *r, const struct attn_shape *s, const struct mask *m)
{
	const struct kern_ops *k = r->env->kern;
	int gpu = r->env->backend == COMM_NCCL;

	if (k->disabled)
		return k->disabled;
	if (!!(k->caps & KC_GPU) != gpu)
		return gpu ? "the nccl backend needs a GPU kernel" : "the mpi backend needs a host kernel (cpu)";
	if (!(k->caps & KC_FWD) || (r->job->pass == PASS_BWD && !(k->caps & KC_BWD)))
		return "the kernel lacks this pass";
	if (s->hq != s->hkv && !(k->caps & KC_GQA))
		return "the kernel does not do GQA";
	if (k->check)
		return k->check(s, m, r->job->pass == PASS_BWD ? PASS_BWD : PASS_FWD);
	return NULL;
}

int cp_plan(struct cp_run *r, int64_t qr[][2], int nq, int64_t kr[][2], int nk,
            const struct attn_shape *ls, struct mask *piece, void **kst)
{
	const struct kern_ops *k = r->env->kern;
	const char *why;
	char e[160];
	int rc;

	*kst = NULL;
	if (cp_piece(r->job->mask, qr, nq, kr, nk, piece, e, sizeof e) < 0) {
		cp_fail(r, "%s", e);
		return CP_UNSUPPORTED;
	}
	if (piece->area == 0)
		return CP_OK;
	if ((why = kern_check(r, ls, piece)) != NULL) {
		cp_fail(r, "kernel %s: %s", k->name, why);
		return CP_UNSUPPORTED;
	}
	if ((rc = k->init(kst, ls, piece, e, sizeof e)) != KERN_OK) {
		*kst = NULL;
		cp_fail(r, "kernel %s: %s", k->name, e);
		return rc == KERN_OOM ? CP_OOM : CP_ERROR;
	}
	return CP_OK;
}

/* ---- inputs ----------------------------------------------------------- */

/* Rank rk's token ranges in shard order; rg holds max(2, r->nrg). */
static int ranges_of(const struct cp_run *r, int rk, int64_t (*rg)[2])
{
	return r->layout ? r->layout(r, rk, rg) : cp_ranges(r->S, r->R, r->U, rk, rg);
}

static int64_t (*ranges_alloc(const struct cp_run *r))[2]
{
	return xcalloc(r->nrg > 2 ? r->nrg : 2, sizeof(int64_t[2]));
}

/* Element i of tensor t, the same on every rank and in the reference: a
 * hash of (seed, t, i), so a rank makes its shard without the whole tensor.
 * Roughly normal (sum of four uniforms), never zero after rounding. */
static float gen(uint64_t seed, int t, uint64_t i)
{
	uint64_t s = seed ^ ((uint64_t)(t + 1) * 0x9e3779b97f4a7c15ULL);
	uint64_t z = rng_splitmix(&s) + i * 0xd1b54a32d192ed03ULL;
	uint64_t h = rng_splitmix(&z);
	double x = 0;

	for (int k = 0; k < 4; k++)
		x += (double)((h >> (16 * k)) & 0xffff) / 65536.0;
	x = (x - 2) * 1.7320508;
	if (fabs(x) < 1.0 / 64)
		x = x < 0 ? -1.0 / 64 : 1.0 / 64;
	return (float)x;
}

/* The tensor [b][S][H][d] restricted to the token ranges rg, as dtype,
 * on every core: a 32K-token shard of 64 heads is hundreds of millions of
 * hashes, which one thread makes in seconds for every strategy and pass. */
struct genjob {
	const struct cp_run *r;
	int t, H;
	int64_t (*rg)[2];
	uint16_t *out;
	int64_t per;                /* rows in one batch */
};

enum { GENROWS = 64 };

static void gen_rows(void *arg, int64_t j0, int64_t j1)
{
	struct genjob *g = arg;
	const struct cp_run *r = g->r;
	uint64_t hd = (uint64_t)g->H * r->d;
	int dt = r->job->shape.dtype;

	for (int64_t j = j0; j < j1; j++) {
		int64_t bi = j / g->per, s = j % g->per;
		int i = 0;
		uint16_t *o = g->out + j * hd;
		uint64_t base;

		for (; s >= g->rg[i][1] - g->rg[i][0]; i++)
			s -= g->rg[i][1] - g->rg[i][0];
		base = ((uint64_t)bi * r->S + g->rg[i][0] + s) * hd;
		for (uint64_t e = 0; e < hd; e++)
			o[e] = half_to(dt, gen(r->job->seed, g->t, base + e));
	}
}

static void gen_shard(const struct cp_run *r, int t, int H, int64_t rg[][2], int n, uint16_t *out)
{
	struct genjob g = { .r = r, .t = t, .H = H, .rg = rg, .out = out };

	for (int i = 0; i < n; i++)
		g.per += rg[i][1] - rg[i][0];
	par_ranges(ref_threads(), g.per * r->b, GENROWS, gen_rows, &g);
}

static void gen_global(const struct cp_run *r, int t, int H, double *out)
{
	int dt = r->job->shape.dtype;
	size_t n = (size_t)r->b * r->S * H * r->d;

	for (size_t i = 0; i < n; i++)
		out[i] = half_from(dt, half_to(dt, gen(r->job->seed, t, i)));
}

/* ---- agreement ---------------------------------------------------------- */

struct scratch {
	void *dev;          /* backend memory for small collectives */
	size_t n;
};

/* n bytes from every rank, in rank order, on every rank (host memory). */
static void host_allgather(struct cp_run *r, struct scratch *sc, const void *mine, void *all, size_t n)
{
	int w = comm_size(r->env->world);

	if (r->env->backend != COMM_NCCL) {
		if (comm_allgather(r->env->world, mine, all, n, CT_BYTE, NULL) < 0)
			cp_commfail(r, "allgather");
		return;
	}
	if (n * (w + 1) > sc->n)
		cp_commfail(r, "scratch too small for allgather");
	ops_upload(&r->x, sc->dev, mine, n);
	if (comm_allgather(r->env->world, sc->dev, (char *)sc->dev + n, n, CT_BYTE, r->x.stream[0]) < 0)
		cp_commfail(r, "allgather");
	ops_download(&r->x, all, (char *)sc->dev + n, n * w);
}

static void host_allreduce(struct cp_run *r, struct scratch *sc, double *v, size_t n, const char *op)
{
	if (r->env->backend != COMM_NCCL) {
		if (comm_allreduce(r->env->world, v, n, CT_F64, op, NULL) < 0)
			cp_commfail(r, "allreduce");
		return;
	}
	if (n * sizeof *v > sc->n)
		cp_commfail(r, "scratch too small for allreduce");
	ops_upload(&r->x, sc->dev, v, n * sizeof *v);
	if (comm_allreduce(r->env->world, sc->dev, n, CT_F64, op, r->x.stream[0]) < 0)
		cp_commfail(r, "allreduce");
	ops_download(&r->x, v, sc->dev, n * sizeof *v);
}

/* Every rank's status; the worst wins, with the first such rank's why. */
static int agree(struct cp_run *r, struct scratch *sc, int st)
{
	int w = comm_size(r->env->world), best = CP_OK, who = -1;
	char mine[4 + WHYLEN], *all = xmalloc((size_t)w * sizeof mine);
	const char *f = ops_failed(&r->x);

	if (st == CP_OK && (r->why[0] || f)) {
		st = CP_ERROR;
		if (!r->why[0])
			snprintf(r->why, sizeof r->why, "%s", f);
	}
	memcpy(mine, &st, 4);
	memcpy(mine + 4, r->why, WHYLEN);
	host_allgather(r, sc, mine, all, sizeof mine);
	for (int i = 0; i < w; i++) {
		int s;
		memcpy(&s, all + i * sizeof mine, 4);
		if (s > best) {
			best = s;
			who = i;
		}
	}
	if (best != CP_OK) {
		char *msg = all + who * sizeof mine + 4;
		msg[WHYLEN - 1] = 0;
		if (best == CP_ERROR || best == CP_OOM)
			snprintf(r->res->why, sizeof r->res->why, "rank %d: %s", who, msg);
		else
			snprintf(r->res->why, sizeof r->res->why, "%s", msg);
	}
	free(all);
	return best;
}

/* ---- timing --------------------------------------------------------------- */

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Warm-up, then iters timed; each iteration fenced by a barrier, its time
 * the slowest rank's (per-iteration max), the row the median of those. */
static void timed(struct cp_run *r, struct scratch *sc, int (*pass)(struct cp_run *),
                  void **outs, size_t *nouts, int nout, double *t)
{
	int n = r->job->warmup + r->job->iters;
	double sent = 0, mg[OPS_NMARK] = { 0 }, mh[OPS_NMARK] = { 0 };

	for (int it = 0; it < n; it++) {
		for (int i = 0; i < nout; i++)
			ops_poison(&r->x, outs[i], nouts[i], 0);
		ops_sync(&r->x);
		if (comm_barrier(r->env->world) < 0)
			cp_commfail(r, "barrier");
		ops_flush(&r->x);
		/* The GPUs start together: the host barrier's ranks leave it
		 * tens of microseconds apart (each polls its stream), and a rank
		 * that starts early would count the wait for a late peer's first
		 * transfer as its own time */
		if (r->env->backend == COMM_NCCL &&
		    comm_allreduce(r->env->world, sc->dev, 1, CT_F64, "max", r->x.stream[0]) < 0)
			cp_commfail(r, "allreduce");
		comm_sent_reset();
		ops_tstart(&r->x);
		pass(r);        /* a failure is in r->why, for agree() */
		double ms = ops_tstop(&r->x);
		sent = comm_sent();
		if (it >= r->job->warmup)
			t[it - r->job->warmup] = ms;
		if (it >= r->job->warmup && r->x.trace) {
			double g[OPS_NMARK], h[OPS_NMARK];
			ops_marks(&r->x, g, h);
			for (int i = 0; i < r->x.nmark; i++) {
				mg[i] += g[i] / r->job->iters;
				mh[i] += h[i] / r->job->iters;
			}
		}
	}
	if (r->x.trace && r->x.nmark > 0) {
		/* One write a rank, so that ranks' lines do not interleave */
		char line[2048];
		int k = snprintf(line, sizeof line, "cpbench: trace: rank %d %s:", comm_rank(r->env->world),
		                 pass == r->fwd ? "fwd" : "bwd");
		for (int i = 0; i < r->x.nmark && k < (int)sizeof line - 40; i++)
			k += snprintf(line + k, sizeof line - k, " %s %.3f/%.3f", r->x.mwhat[i], mg[i], mh[i]);
		fprintf(stderr, "%s\n", line);
	}
	if (r->job->iters > 0)
		host_allreduce(r, sc, t, r->job->iters, "max");
	host_allreduce(r, sc, &sent, 1, "max");
	r->res->sent_bytes = sent;
}

/* ---- the check ------------------------------------------------------------- */

/* Rank rk's shard (as gather describes it) to its tokens' global places. */
static void place(const struct cp_run *r, int rk, const char *src, int H, int lse, size_t es,
                  double *out)
{
	int64_t (*rg)[2] = ranges_alloc(r);
	int n = ranges_of(r, rk, rg);
	size_t o = 0;

	for (int bi = 0; bi < r->b; bi++) {
		if (lse) {
			for (int h = 0; h < H; h++)
				for (int i = 0; i < n; i++)
					for (int64_t s = rg[i][0]; s < rg[i][1]; s++, o++) {
						float f;
						memcpy(&f, src + o * es, 4);
						out[((size_t)bi * H + h) * r->S + s] = f;
					}
			continue;
		}
		for (int i = 0; i < n; i++)
			for (int64_t s = rg[i][0]; s < rg[i][1]; s++) {
				size_t g = (((size_t)bi * r->S + s) * H) * r->d;
				for (size_t e = 0; e < (size_t)H * r->d; e++, o++) {
					uint16_t u;
					memcpy(&u, src + o * es, 2);
					out[g + e] = half_from(r->job->shape.dtype, u);
				}
			}
	}
	free(rg);
}

/* Gather a shard of H heads per token ([b][c][H][d], elem bytes each, or
 * lse [b][H][c] when lse) from every rank and put it in global order on
 * rank 0, as doubles. */
static int gather(struct cp_run *r, struct scratch *sc, const void *shard, int H, int lse, int type, double *out)
{
	int w = comm_size(r->env->world), me = comm_rank(r->env->world);
	size_t es = comm_type_size(type), per = (size_t)r->b * r->c * H * (lse ? 1 : r->d);
	char *all = NULL, *dall = NULL;

	if (r->env->backend == COMM_NCCL) {
		double bad;

		dall = ops_alloc(&r->x, per * es * w);
		bad = dall == NULL;
		/* Every rank learns whether any could not allocate, so none
		 * waits in the allgather for it. */
		host_allreduce(r, sc, &bad, 1, "max");
		if (bad) {
			ops_free(&r->x, dall);
			return cp_fail(r, "check: out of device memory for the gather");
		}
		if (comm_allgather(r->env->world, shard, dall, per * es, CT_BYTE, r->x.stream[0]) < 0)
			cp_commfail(r, "allgather");
		if (me == 0) {
			all = xmalloc(per * es * w);
			ops_download(&r->x, all, dall, per * es * w);
		}
		ops_sync(&r->x);
		ops_free(&r->x, dall);
	} else {
		all = xmalloc(per * es * w);
		if (comm_allgather(r->env->world, shard, all, per * es, CT_BYTE, NULL) < 0)
			cp_commfail(r, "allgather");
	}
	for (int rk = 0; me == 0 && rk < w; rk++)
		place(r, rk, all + per * es * rk, H, lse, es, out);
	free(all);
	return 0;
}

static void check(struct cp_run *r, struct scratch *sc, int bwd)
{
	const struct attn_shape *s = &r->job->shape;
	size_t nq = (size_t)r->b * r->S * r->hq * r->d, nk = (size_t)r->b * r->S * r->hkv * r->d;
	size_t nl = (size_t)r->b * r->hq * r->S;
	int me = comm_rank(r->env->world);
	double *go = NULL, *gl = NULL, *gdq = NULL, *gdk = NULL, *gdv = NULL;
	double err[5] = { 0, 0, 0, 0, 0 };
	char e[160];

	if (me == 0) {
		go = xmalloc(nq * sizeof *go);
		gl = xmalloc(nl * sizeof *gl);
		if (bwd) {
			gdq = xmalloc(nq * sizeof *gdq);
			gdk = xmalloc(nk * sizeof *gdk);
			gdv = xmalloc(nk * sizeof *gdv);
		}
	}
	gather(r, sc, r->o, r->hq, 0, r->type, go);
	gather(r, sc, r->lse, r->hq, 1, CT_F32, gl);
	if (bwd) {
		gather(r, sc, r->dq, r->hq, 0, r->type, gdq);
		gather(r, sc, r->dk, r->hkv, 0, r->type, gdk);
		gather(r, sc, r->dv, r->hkv, 0, r->type, gdv);
	}
	if (me == 0) {
		struct ref ref;
		double *q = xmalloc(nq * sizeof *q), *k = xmalloc(nk * sizeof *k), *v = xmalloc(nk * sizeof *v);
		double *o = xmalloc(nq * sizeof *o), *l = xmalloc(nl * sizeof *l);

		gen_global(r, T_Q, r->hq, q);
		gen_global(r, T_K, r->hkv, k);
		gen_global(r, T_V, r->hkv, v);
		if (ref_init(&ref, r->job->mask, e, sizeof e) < 0) {
			cp_fail(r, "check: reference: %s", e);
		} else {
			ref_fwd(&ref, s, q, k, v, o, l);
			err[0] = ref_relerr(go, o, nq);
			err[1] = ref_relerr(gl, l, nl);
			if (bwd) {
				double *dout = xmalloc(nq * sizeof *dout), *dq = xmalloc(nq * sizeof *dq);
				double *dk = xmalloc(nk * sizeof *dk), *dv = xmalloc(nk * sizeof *dv);
				gen_global(r, T_DOUT, r->hq, dout);
				ref_bwd(&ref, s, q, k, v, o, l, dout, dq, dk, dv);
				err[2] = ref_relerr(gdq, dq, nq);
				err[3] = ref_relerr(gdk, dk, nk);
				err[4] = ref_relerr(gdv, dv, nk);
				free(dout); free(dq); free(dk); free(dv);
			}
			ref_free(&ref);
		}
		free(q); free(k); free(v); free(o); free(l);
		free(go); free(gl); free(gdq); free(gdk); free(gdv);
	}
	/* Rank 0 has them, the others add zeros (a NaN survives the sum). */
	host_allreduce(r, sc, err, 5, "sum");
	memcpy(r->res->err, err, sizeof err);
}

/* ---- the driver ------------------------------------------------------------ */

int cp_drive(struct cp_run *r)
{
	const struct cp_job *job = r->job;
	struct cp_result *res = r->res;
	int me = comm_rank(r->env->world), w = comm_size(r->env->world), st = CP_OK, bwd = job->pass == PASS_BWD;
	int64_t (*rg)[2] = ranges_alloc(r);
	int nr;
	size_t nq, nk, nl, nkp;
	double *t = NULL, peak;
	struct scratch sc = { NULL, 0 };
	char e[160];

	r->type = job->shape.dtype == DT_FP16 ? CT_FP16 : CT_BF16;
	r->es = 2;
	r->b = job->shape.batch;
	r->hq = job->shape.hq;
	r->hkv = job->shape.hkv;
	r->d = job->shape.hd;
	r->S = job->shape.sq;
	r->c = r->S / ((int64_t)r->R * r->U);
	res->ulysses = r->U;
	res->ring = r->R;
	nr = ranges_of(r, me, rg);
	nq = (size_t)r->b * r->c * r->hq * r->d;
	nk = (size_t)r->b * r->c * r->hkv * r->d;
	nl = (size_t)r->b * r->hq * r->c;

	if (ops_init(&r->x, r->env->backend == COMM_NCCL, e, sizeof e) < 0) {
		/* The backend is the same everywhere, so every rank fails alike. */
		res->status = CP_ERROR;
		snprintf(res->why, sizeof res->why, "%s", e);
		free(rg);
		return res->status;
	}
	{
		const char *tr = getenv("LONGATTN_CP_TRACE");
		r->x.trace = tr != NULL && *tr != '\0' && strcmp(tr, "0") != 0;
	}
	sc.n = (size_t)(w + 1) * (4 + WHYLEN) + (size_t)(job->iters + 8) * sizeof(double);
	if (r->x.gpu && (sc.dev = ops_alloc(&r->x, sc.n)) == NULL)
		cp_commfail(r, "scratch allocation");
	ops_peak_reset(&r->x);

	r->q = ops_alloc(&r->x, nq * r->es);
	/* nkp: one of K, V, dK, dV with the strategy's room after it */
	nkp = nk + (size_t)r->b * r->kpad * r->hkv * r->d;
	r->k = ops_alloc(&r->x, 2 * nkp * r->es);
	r->o = ops_alloc(&r->x, nq * r->es);
	r->lse = ops_alloc(&r->x, nl * sizeof(float));
	if (bwd) {
		r->dout = ops_alloc(&r->x, nq * r->es);
		r->dq = ops_alloc(&r->x, nq * r->es);
		r->dk = ops_alloc(&r->x, 2 * nkp * r->es);
	}
	if (!r->q || !r->k || !r->o || !r->lse || (bwd && (!r->dout || !r->dq || !r->dk))) {
		st = CP_OOM;
		cp_fail(r, "out of memory for the shards");
	} else {
		uint16_t *h = xmalloc((nq > 2 * nk ? nq : 2 * nk) * r->es);
		r->v = (char *)r->k + nkp * r->es;
		if (bwd)
			r->dv = (char *)r->dk + nkp * r->es;
		gen_shard(r, T_Q, r->hq, rg, nr, h);
		ops_upload(&r->x, r->q, h, nq * r->es);
		gen_shard(r, T_K, r->hkv, rg, nr, h);
		gen_shard(r, T_V, r->hkv, rg, nr, h + nk);
		ops_upload(&r->x, r->k, h, nk * r->es);
		ops_upload(&r->x, r->v, h + nk, nk * r->es);
		if (bwd) {
			gen_shard(r, T_DOUT, r->hq, rg, nr, h);
			ops_upload(&r->x, r->dout, h, nq * r->es);
		}
		free(h);
	}
	/* Setup splits groups, collectively: every rank must get there. */
	if ((st = agree(r, &sc, st)) != CP_OK)
		goto out;
	st = r->setup(r);
	ops_sync(&r->x);
	if ((st = agree(r, &sc, st)) != CP_OK)
		goto out;
	{
		double wk[2] = { r->work, r->work };

		host_allreduce(r, &sc, &wk[0], 1, "max");
		host_allreduce(r, &sc, &wk[1], 1, "sum");
		res->imbalance = wk[1] > 0 ? wk[0] / (wk[1] / w) : 0;
	}

	t = xcalloc(job->iters + 1, sizeof *t);
	{
		void *fo[2] = { r->o, r->lse }, *bo[2] = { r->dq, r->dk };
		size_t fn[2] = { nq * r->es, nl * sizeof(float) }, bn[2] = { nq * r->es, 2 * nkp * r->es };

		if (!bwd) {
			timed(r, &sc, r->fwd, fo, fn, 2, t);
		} else {
			/* The backward pass takes the merged o and lse of a
			 * forward pass, as training does. */
			for (int i = 0; i < 2; i++)
				ops_poison(&r->x, fo[i], fn[i], 0);
			r->fwd(r);
			ops_sync(&r->x);
			timed(r, &sc, r->bwd, bo, bn, 2, t);
		}
	}
	ops_sync(&r->x);
	st = agree(r, &sc, r->oom ? CP_OOM : CP_OK);
	if (st != CP_OK)
		goto out;
	if (job->iters > 0) {
		qsort(t, job->iters, sizeof *t, cmpd);
		res->ms_min = t[0];
		res->ms_max = t[job->iters - 1];
		res->ms_median = job->iters % 2 ? t[job->iters / 2]
		                 : (t[job->iters / 2 - 1] + t[job->iters / 2]) / 2;
	}
	peak = (double)ops_peak(&r->x);
	host_allreduce(r, &sc, &peak, 1, "max");
	res->mem_bytes = peak;

	if (job->check) {
		check(r, &sc, bwd);
		st = agree(r, &sc, CP_OK);
		if (st == CP_OK) {
			int bad = 0;
			for (int i = 0; i < (bwd ? 5 : 2); i++)
				if (!(res->err[i] <= 1e-2))
					bad = 1;
			if (bad) {
				st = CP_WRONG;
				snprintf(res->why, sizeof res->why,
				         "relative errors o %.3g lse %.3g dq %.3g dk %.3g dv %.3g",
				         res->err[0], res->err[1], res->err[2], res->err[3], res->err[4]);
			}
		}
	}
out:
	res->status = st;
	if (r->fini)
		r->fini(r);
	cp_free(r, (void *[]){ r->q, r->k, r->o, r->lse, r->dout, r->dq, r->dk, sc.dev }, 8);
	ops_fini(&r->x);
	free(t);
	free(rg);
	return st;
}
