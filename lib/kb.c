#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "half.h"
#include "kb.h"
#include "ref.h"
#include "rng.h"
#include "util.h"

const char *const kb_status[] = { "ok", "oom", "unsupported", "wrong", "error" };
const char *const kb_errname[] = { "o", "lse", "dq", "dk", "dv" };

/* A tensor of n values in blocks of FILLBLK, each block its own stream
 * (seeded from the tensor's seed and the block), made on every core: one
 * stream of the 2.3G values of a 128K-token input took a kbench process
 * ten seconds. */
enum { FILLBLK = 1 << 16 };

struct filljob {
	uint16_t *x;
	uint64_t seed;
	double scale;
	int dtype;
};

static void fill_blocks(void *arg, int64_t i0, int64_t i1)
{
	struct filljob *f = arg;
	uint64_t z = f->seed + (uint64_t)(i0 / FILLBLK) * 0xd1b54a32d192ed03ULL;
	double *tmp = xmalloc((size_t)(i1 - i0) * sizeof *tmp);
	struct rng g;

	rng_seed(&g, rng_splitmix(&z));
	ref_randn(&g, tmp, (size_t)(i1 - i0));
	for (int64_t i = i0; i < i1; i++)
		f->x[i] = half_to(f->dtype, (float)(f->scale * tmp[i - i0]));
	free(tmp);
}

static void *fill(uint64_t seed, int t, int dtype, double scale, size_t n)
{
	struct filljob f = { .x = xmalloc((n ? n : 1) * sizeof *f.x), .scale = scale, .dtype = dtype };
	uint64_t z = seed ^ (uint64_t)(t + 1) * 0x9e3779b97f4a7c15ULL;

	f.seed = rng_splitmix(&z);
	par_ranges(ref_threads(), (int64_t)n, FILLBLK, fill_blocks, &f);
	return f.x;
}

/* The inputs of the last shape, seed and scale: every kernel and pass of
 * a mask (and every mask of one length) sees the same tensors, made once. */
static struct {
	struct attn_shape s;
	uint64_t seed;
	double qscale;
	struct kb_data d;
	int have;
} in;

static int same_shape(const struct attn_shape *a, const struct attn_shape *b);

void kb_inputs(struct kb_data *d, const struct attn_shape *s, uint64_t seed, double qscale)
{
	if (in.have && same_shape(&in.s, s) && in.seed == seed && in.qscale == qscale) {
		*d = in.d;
		return;
	}
	if (in.have) {
		free(in.d.q); free(in.d.k); free(in.d.v); free(in.d.dout);
		in.have = 0;
	}
	ref_sizes(s, &d->nq, &d->nk, &d->nl);
	d->q = fill(seed, 0, s->dtype, qscale, d->nq);
	d->k = fill(seed, 1, s->dtype, 1, d->nk);
	d->v = fill(seed, 2, s->dtype, 1, d->nk);
	d->dout = fill(seed, 3, s->dtype, 1, d->nq);
	in.s = *s;
	in.seed = seed;
	in.qscale = qscale;
	in.d = *d;
	in.have = 1;
}

/* The data stays cached for the next row; this only forgets the copy. */
void kb_data_free(struct kb_data *d)
{
	memset(d, 0, sizeof *d);
}

const char *kb_unsupported(const struct kb_job *j)
{
	const struct kern_ops *k = j->kern;
	const struct attn_shape *s = &j->shape;

	if (k->disabled != NULL)
		return k->disabled;
	if (!(k->caps & (j->pass == PASS_FWD ? KC_FWD : KC_BWD)))
		return j->pass == PASS_FWD ? "no forward pass" : "no backward pass";
	if (!(k->caps & (s->dtype == DT_FP16 ? KC_FP16 : KC_BF16)))
		return s->dtype == DT_FP16 ? "no fp16" : "no bf16";
	if (s->hq != s->hkv && !(k->caps & KC_GQA))
		return "no GQA";
	if ((s->flags & ATTN_DETERMINISTIC) && !(k->caps & KC_DET))
		return "no deterministic backward";
	if (!(k->caps & (j->mask->body == MASK_BODY_BLOCKS ? KC_BLOCKS : KC_SLICES)))
		return j->mask->body == MASK_BODY_BLOCKS ? "no block-sparse masks" : "no slice masks";
	return k->check != NULL ? k->check(s, j->mask, j->pass) : NULL;
}

/* ---- the reference, kept for the last (mask, shape, seed, scale) ------------ */

static struct {
	const struct mask *m;
	struct attn_shape s;
	uint64_t seed;
	double qscale;
	int have;                       /* PASS_FWD | PASS_BWD computed */
	double *o, *lse, *dq, *dk, *dv;
} cache;

static void cache_drop(void)
{
	free(cache.o); free(cache.lse); free(cache.dq); free(cache.dk); free(cache.dv);
	memset(&cache, 0, sizeof cache);
}

static int same_shape(const struct attn_shape *a, const struct attn_shape *b)
{
	return a->sq == b->sq && a->sk == b->sk && a->batch == b->batch && a->hq == b->hq &&
	    a->hkv == b->hkv && a->hd == b->hd && a->dtype == b->dtype && a->scale == b->scale;
}

/* Dtype values as the reference and the error see them; the caller frees. */
static double *widen(int dtype, const void *x, size_t n)
{
	double *t = xmalloc(n * sizeof *t);

	half_load(dtype, x, t, n);
	return t;
}

/* The reference outputs for the job's pass: it sees the dtype-rounded
 * inputs as doubles, exactly what the kernel saw. */
static int reference(const struct kb_job *j, const struct kb_data *d, char *err, size_t errlen)
{
	const struct attn_shape *s = &j->shape;
	struct ref r;
	double *q, *k, *v, *g;

	if (cache.m != j->mask || !same_shape(&cache.s, s) || cache.seed != j->seed || cache.qscale != j->qscale)
		cache_drop();
	if (cache.have & j->pass)
		return 0;
	if (ref_init(&r, j->mask, err, errlen) != 0)
		return -1;
	cache.m = j->mask;
	cache.s = *s;
	cache.seed = j->seed;
	cache.qscale = j->qscale;
	q = widen(s->dtype, d->q, d->nq);
	k = widen(s->dtype, d->k, d->nk);
	v = widen(s->dtype, d->v, d->nk);
	if (!(cache.have & PASS_FWD)) {
		cache.o = xmalloc(d->nq * sizeof *cache.o);
		cache.lse = xmalloc(d->nl * sizeof *cache.lse);
		ref_fwd(&r, s, q, k, v, cache.o, cache.lse);
		cache.have |= PASS_FWD;
	}
	if (j->pass == PASS_BWD) {
		g = widen(s->dtype, d->dout, d->nq);
		cache.dq = xmalloc(d->nq * sizeof *cache.dq);
		cache.dk = xmalloc(d->nk * sizeof *cache.dk);
		cache.dv = xmalloc(d->nk * sizeof *cache.dv);
		ref_bwd(&r, s, q, k, v, cache.o, cache.lse, g, cache.dq, cache.dk, cache.dv);
		cache.have |= PASS_BWD;
		free(g);
	}
	free(q); free(k); free(v);
	ref_free(&r);
	return 0;
}

static double relerr_dt(int dtype, const void *x, const double *ref, size_t n)
{
	double *t = widen(dtype, x, n), e = ref_relerr(t, ref, n);

	free(t);
	return e;
}

void kb_verify(const struct kb_job *j, const struct kb_data *d, const void *o, const float *lse,
    const void *dq, const void *dk, const void *dv, struct kb_result *r)
{
	int dt = j->shape.dtype;
	char err[200] = "", *p = r->why;

	if (reference(j, d, err, sizeof err) != 0) {
		r->status = KB_ERROR;
		snprintf(r->why, sizeof r->why, "reference: %s", err);
		return;
	}
	if (j->pass == PASS_FWD) {
		double *t = xmalloc(d->nl * sizeof *t);
		for (size_t i = 0; i < d->nl; i++)
			t[i] = lse[i];
		r->err[KB_O] = relerr_dt(dt, o, cache.o, d->nq);
		r->err[KB_LSE] = ref_relerr(t, cache.lse, d->nl);
		free(t);
	} else {
		r->err[KB_DQ] = relerr_dt(dt, dq, cache.dq, d->nq);
		r->err[KB_DK] = relerr_dt(dt, dk, cache.dk, d->nk);
		r->err[KB_DV] = relerr_dt(dt, dv, cache.dv, d->nk);
	}
	for (int i = 0; i < KB_NERR; i++) {
		/* !(e <= tol) so that NaN fails */
		if (r->err[i] < 0 || r->err[i] <= KB_TOL)
			continue;
		if (r->status != KB_WRONG) {
			r->status = KB_WRONG;
			p += snprintf(p, sizeof r->why, "relative error");
		}
		if (p < r->why + sizeof r->why - 32)
			p += sprintf(p, " %s %.3g", kb_errname[i], r->err[i]);
	}
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void kb_stats(double *ms, int n, struct kb_result *r)
{
	qsort(ms, n, sizeof *ms, cmpd);
	r->ms_min = ms[0];
	r->ms_max = ms[n - 1];
	r->ms_median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

/* ---- host kernels -------------------------------------------------------------- */

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void poison(void *p, size_t bytes)
{
	/* 0xffff is a NaN in bf16 and fp16, 0xffffffff in fp32 */
	memset(p, 0xff, bytes);
}

static int pass(const struct kb_job *j, void *st, const struct attn_io *io, int which)
{
	return which == PASS_FWD ? j->kern->fwd(st, io) : j->kern->bwd(st, io);
}

static int failed(struct kb_result *r, int rc, const char *what)
{
	if (rc == KERN_OK)
		return 0;
	r->status = rc == KERN_OOM ? KB_OOM : KB_ERROR;
	snprintf(r->why, sizeof r->why, "%s failed", what);
	return 1;
}

void kb_run_host(const struct kb_job *j, struct kb_result *r)
{
	const struct attn_shape *s = &j->shape;
	struct kb_data d;
	struct attn_io io = { 0 };
	void *st = NULL;
	double *ms = xmalloc(j->iters * sizeof *ms), t0;
	char err[200] = "";
	size_t bytes;
	int rc;

	memset(r, 0, sizeof *r);
	for (int i = 0; i < KB_NERR; i++)
		r->err[i] = -1;
	r->same = -1;
	kb_inputs(&d, s, j->seed, j->qscale);
	rc = j->kern->init(&st, s, j->mask, err, sizeof err);
	if (rc != KERN_OK) {
		r->status = rc == KERN_OOM ? KB_OOM : KB_ERROR;
		snprintf(r->why, sizeof r->why, "init: %s", err[0] ? err : "failed");
		goto out;
	}
	io.q = d.q; io.k = d.k; io.v = d.v; io.dout = d.dout;
	io.o = xmalloc(d.nq * 2);
	io.lse = xmalloc(d.nl * sizeof *io.lse);
	io.dq = xmalloc(d.nq * 2);
	io.dk = xmalloc(d.nk * 2);
	io.dv = xmalloc(d.nk * 2);
	bytes = (4 * d.nq + 4 * d.nk) * 2 + d.nl * sizeof *io.lse;
	poison(io.o, d.nq * 2);
	poison(io.lse, d.nl * sizeof *io.lse);
	if (j->pass == PASS_BWD && failed(r, j->kern->fwd(st, &io), "forward"))
		goto out;
	if (j->check) {
		/* after the forward of a bwd row, so that it cannot pass for the bwd */
		poison(io.dq, d.nq * 2);
		poison(io.dk, d.nk * 2);
		poison(io.dv, d.nk * 2);
		if (failed(r, pass(j, st, &io, j->pass), "pass"))
			goto out;
		if (j->pass == PASS_FWD)
			kb_verify(j, &d, io.o, io.lse, NULL, NULL, NULL, r);
		else
			kb_verify(j, &d, NULL, NULL, io.dq, io.dk, io.dv, r);
		if (r->status != KB_OK)
			goto out;
	}
	for (int i = 0; i < j->warmup; i++)
		if (failed(r, pass(j, st, &io, j->pass), "pass"))
			goto out;
	for (int i = 0; i < j->iters; i++) {
		t0 = now_ms();
		if (failed(r, pass(j, st, &io, j->pass), "pass"))
			goto out;
		ms[i] = now_ms() - t0;
	}
	kb_stats(ms, j->iters, r);
	r->mem_bytes = bytes + (j->kern == &kern_cpu ? cpu_workspace(st) : 0);
out:
	if (st != NULL)
		j->kern->fini(st);
	free(io.o); free(io.lse); free(io.dq); free(io.dk); free(io.dv);
	kb_data_free(&d);
	free(ms);
}

const char *kb_cpu_name(void)
{
	static char name[160];
	char line[512], *p;
	FILE *fp;

	if (name[0] != '\0')
		return name;
	strcpy(name, "cpu:unknown");
	if ((fp = fopen("/proc/cpuinfo", "r")) == NULL)
		return name;
	while (fgets(line, sizeof line, fp) != NULL)
		if (strncmp(line, "model name", 10) == 0 && (p = strchr(line, ':')) != NULL) {
			for (p++; *p == ' '; p++)
				;
			p[strcspn(p, "\n")] = '\0';
			snprintf(name, sizeof name, "cpu:%s", p);
			break;
		}
	fclose(fp);
	return name;
}
