/* lib/ref against a dense brute-force attention written here (mask_allows
 * per pair, two-pass softmax, explicit P), on every pattern at small sizes,
 * fwd and bwd, MHA and GQA; a finite-difference check of the gradients;
 * the cpu kernel against lib/ref; and thread-count independence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"
#include "half.h"
#include "pattern.h"
#include "ref.h"
#include "tap.h"
#include "util.h"

/* Fresh inputs from the seed; outputs start as NaN: whatever is not
 * written fails. */
static void io_alloc(struct ref_bufs *x, const struct attn_shape *s, uint64_t seed)
{
	struct rng g;

	if (ref_bufs_alloc(x, s) != 0)
		errx(1, "no memory for the buffers");
	rng_seed(&g, seed);
	ref_randn(&g, x->q, x->nq);
	ref_randn(&g, x->k, x->nk);
	ref_randn(&g, x->v, x->nk);
	ref_randn(&g, x->dout, x->nq);
	for (size_t i = 0; i < x->nq; i++)
		x->o[i] = x->dq[i] = NAN;
	for (size_t i = 0; i < x->nk; i++)
		x->dk[i] = x->dv[i] = NAN;
	for (size_t i = 0; i < x->nl; i++)
		x->lse[i] = NAN;
}

#define QI(s, b, i, h) ((((size_t)(b) * (s)->sq + (i)) * (s)->hq + (h)) * (s)->hd)
#define KI(s, b, j, h) ((((size_t)(b) * (s)->sk + (j)) * (s)->hkv + (h)) * (s)->hd)

static double dot(const double *a, const double *b, int n)
{
	double d = 0;
	for (int i = 0; i < n; i++)
		d += a[i] * b[i];
	return d;
}

/* The textbook definition, one row at a time. */
static void dense(const struct mask *m, const struct attn_shape *s, struct ref_bufs *x, int bwd)
{
	double *sc = xmalloc(s->sk * sizeof *sc);
	int group = s->hq / s->hkv, mg = s->hq / m->heads;

	if (bwd) {
		memset(x->dk, 0, x->nk * sizeof(double));
		memset(x->dv, 0, x->nk * sizeof(double));
	}
	for (int b = 0; b < s->batch; b++)
		for (int h = 0; h < s->hq; h++)
			for (int64_t i = 0; i < s->sq; i++) {
				const double *qi = x->q + QI(s, b, i, h);
				double mx = -INFINITY, l = 0, *lse = &x->lse[((size_t)b * s->hq + h) * s->sq + i];
				int kvh = h / group;
				for (int64_t j = 0; j < s->sk; j++) {
					sc[j] = mask_allows(m, h / mg, i, j) ?
					    s->scale * dot(qi, x->k + KI(s, b, j, kvh), s->hd) : -INFINITY;
					if (sc[j] > mx)
						mx = sc[j];
				}
				if (!bwd) {
					double *oi = x->o + QI(s, b, i, h);
					for (int d = 0; d < s->hd; d++)
						oi[d] = 0;
					for (int64_t j = 0; j < s->sk; j++)
						if (sc[j] > -INFINITY)
							l += exp(sc[j] - mx);
					*lse = l > 0 ? mx + log(l) : -INFINITY;
					for (int64_t j = 0; l > 0 && j < s->sk; j++)
						if (sc[j] > -INFINITY)
							for (int d = 0; d < s->hd; d++)
								oi[d] += exp(sc[j] - *lse) * x->v[KI(s, b, j, kvh) + d];
				} else {
					const double *go = x->dout + QI(s, b, i, h);
					double D = dot(go, x->o + QI(s, b, i, h), s->hd), *dqi = x->dq + QI(s, b, i, h);
					for (int d = 0; d < s->hd; d++)
						dqi[d] = 0;
					for (int64_t j = 0; j < s->sk; j++) {
						double p, ds;
						if (sc[j] == -INFINITY || *lse == -INFINITY)
							continue;
						p = exp(sc[j] - *lse);
						ds = p * (dot(go, x->v + KI(s, b, j, kvh), s->hd) - D);
						for (int d = 0; d < s->hd; d++) {
							dqi[d] += s->scale * ds * x->k[KI(s, b, j, kvh) + d];
							x->dk[KI(s, b, j, kvh) + d] += s->scale * ds * qi[d];
							x->dv[KI(s, b, j, kvh) + d] += p * go[d];
						}
					}
				}
			}
	free(sc);
}

static int close_to(const double *a, const double *b, size_t n, double tol, double *worst)
{
	double e = ref_relerr(a, b, n);
	if (!(e <= *worst))
		*worst = e;
	return e <= tol;
}

/* ref vs dense on one mask and shape: fwd, then bwd from the same o, lse. */
static void against_dense(const char *name, const struct mask *m, struct attn_shape s)
{
	struct ref_bufs a, b;
	struct ref r;
	char err[256];
	double worst = 0;
	int okf, okb;

	s.scale = 1.0 / sqrt(s.hd);
	if (ref_init(&r, m, err, sizeof err) != 0) {
		ok(0, "%s: ref_init: %s", name, err);
		return;
	}
	io_alloc(&a, &s, 42);
	io_alloc(&b, &s, 42);
	ref_fwd(&r, &s, a.q, a.k, a.v, a.o, a.lse);
	dense(m, &s, &b, 0);
	okf = close_to(a.o, b.o, a.nq, 1e-12, &worst) & close_to(a.lse, b.lse, a.nl, 1e-12, &worst);
	memcpy(a.o, b.o, a.nq * sizeof(double));
	memcpy(a.lse, b.lse, a.nl * sizeof(double));
	ref_bwd(&r, &s, a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv);
	dense(m, &s, &b, 1);
	okb = close_to(a.dq, b.dq, a.nq, 1e-12, &worst) & close_to(a.dk, b.dk, a.nk, 1e-12, &worst) &
	    close_to(a.dv, b.dv, a.nk, 1e-12, &worst);
	ok(okf && okb, "ref = dense: %s sq=%lld sk=%lld b=%d h=%d:%d d=%d mask heads %d (worst rel err %.2g)",
	    name, (long long)s.sq, (long long)s.sk, s.batch, s.hq, s.hkv, s.hd, m->heads, worst);
	ref_bufs_free(&a);
	ref_bufs_free(&b);
	ref_free(&r);
}

static int build(const struct pattern *p, int64_t S, struct mask *m, char *err, size_t errlen)
{
	static const int64_t lens[] = { 37, 64, 1, 50, 48 };     /* sums to 200 */
	struct pattern_args a;
	struct rng g;
	char path[] = "/tmp/ref_attn.XXXXXX";
	int rc, fd = -1;

	memset(&a, 0, sizeof a);
	rng_seed(&g, 7);
	a.s = S;
	a.seed = 7;
	a.rng = &g;
	a.window = a.global = a.prefix = a.block = a.minblock = a.avgblock = PAT_UNSET;
	a.buckets = a.startrow = PAT_UNSET;
	a.ratio = -1;
	if (p->needs & PAT_DOCS) {
		a.lens = lens;
		a.nlens = sizeof lens / sizeof lens[0];
		a.docsrc = "test";
	}
	a.window = 17;
	a.global = 5;
	a.block = 20;
	a.minblock = 16;
	a.avgblock = 40;
	a.buckets = 4;
	a.startrow = 60;
	a.heads = 2;
	if (strcmp(p->name, "sliding_window") != 0 && strcmp(p->name, "sliding_window_causal") != 0 &&
	    strcmp(p->name, "global_sliding_window") != 0)
		a.window = PAT_UNSET;
	if (strcmp(p->name, "block_causal_document") == 0)
		a.lens = NULL, a.nlens = 0;
	if (strcmp(p->name, "qk_sparse") == 0)
		a.spans = "30:20,120:33";
	if (strcmp(p->name, "custom") == 0) {
		FILE *fp;
		if ((fd = mkstemp(path)) == -1 || (fp = fdopen(fd, "w")) == NULL)
			return -1;
		fprintf(fp, "0 50 0 50 causal\n50 120 0 30 full\n60 190 40 170 bicausal\n190 200 100 150 invcausal\n");
		fclose(fp);
		a.file = path;
	}
	rc = p->build(m, &a, err, errlen);
	if (fd != -1)
		unlink(path);
	return rc;
}

/* d(sum dout.o)/dx by central differences, against dq, dk, dv. */
static void finite_diff(const struct mask *m)
{
	struct attn_shape s = { .sq = m->sq, .sk = m->sk, .batch = 1, .hq = 4, .hkv = 2, .hd = 8 };
	struct ref_bufs x;
	struct ref r;
	char err[256];
	double *o2 = NULL, *l2 = NULL, h = 1e-5, worst = 0;
	double *arrs[3];
	const double *grads[3];
	size_t n[3];
	int good = 1;

	s.scale = 1.0 / sqrt(s.hd);
	ref_init(&r, m, err, sizeof err);
	io_alloc(&x, &s, 9);
	ref_fwd(&r, &s, x.q, x.k, x.v, x.o, x.lse);
	ref_bwd(&r, &s, x.q, x.k, x.v, x.o, x.lse, x.dout, x.dq, x.dk, x.dv);
	o2 = xmalloc(x.nq * sizeof *o2);
	l2 = xmalloc(x.nl * sizeof *l2);
	arrs[0] = x.q; arrs[1] = x.k; arrs[2] = x.v;
	grads[0] = x.dq; grads[1] = x.dk; grads[2] = x.dv;
	n[0] = x.nq; n[1] = x.nk; n[2] = x.nk;
	for (int t = 0; t < 3; t++)
		for (int trial = 0; trial < 5; trial++) {
			size_t i = (size_t)(trial * 7919 + 13) % n[t];
			double keep = arrs[t][i], lp, lm, fd;
			arrs[t][i] = keep + h;
			ref_fwd(&r, &s, x.q, x.k, x.v, o2, l2);
			lp = dot(o2, x.dout, (int)x.nq);
			arrs[t][i] = keep - h;
			ref_fwd(&r, &s, x.q, x.k, x.v, o2, l2);
			lm = dot(o2, x.dout, (int)x.nq);
			arrs[t][i] = keep;
			fd = (lp - lm) / (2 * h);
			if (fabs(fd - grads[t][i]) > 1e-6 * (1 + fabs(fd)))
				good = 0;
			if (fabs(fd - grads[t][i]) > worst)
				worst = fabs(fd - grads[t][i]);
		}
	ok(good, "finite differences match dq, dk, dv (%s, worst abs diff %.2g)", m->pattern, worst);
	free(o2);
	free(l2);
	ref_bufs_free(&x);
	ref_free(&r);
}

/* The cpu kernel on dtype buffers against ref on the rounded inputs. */
static void cpu_kernel(const struct mask *m, int dtype)
{
	struct attn_shape s = { .sq = m->sq, .sk = m->sk, .batch = 2, .hq = 4, .hkv = 1, .hd = 32,
	                        .dtype = dtype };
	struct ref_bufs x;
	struct ref r;
	struct attn_io io = { 0 };
	void *st = NULL;
	char err[256];
	double *t, eo, el, eq, ek, ev;
	uint16_t *hq, *hk, *hv, *hdo, *ho, *hdq, *hdk, *hdv;
	float *lse;

	s.scale = 1.0 / sqrt(s.hd);
	io_alloc(&x, &s, 5);
	hq = xmalloc(x.nq * 2); hdo = xmalloc(x.nq * 2); ho = xmalloc(x.nq * 2); hdq = xmalloc(x.nq * 2);
	hk = xmalloc(x.nk * 2); hv = xmalloc(x.nk * 2); hdk = xmalloc(x.nk * 2); hdv = xmalloc(x.nk * 2);
	lse = xmalloc(x.nl * sizeof *lse);
	t = xmalloc((x.nq > x.nk ? x.nq : x.nk) * sizeof *t);
	half_store(dtype, hq, x.q, x.nq); half_load(dtype, hq, x.q, x.nq);
	half_store(dtype, hk, x.k, x.nk); half_load(dtype, hk, x.k, x.nk);
	half_store(dtype, hv, x.v, x.nk); half_load(dtype, hv, x.v, x.nk);
	half_store(dtype, hdo, x.dout, x.nq); half_load(dtype, hdo, x.dout, x.nq);
	memset(ho, 0xff, x.nq * 2); memset(hdq, 0xff, x.nq * 2);
	memset(hdk, 0xff, x.nk * 2); memset(hdv, 0xff, x.nk * 2);
	memset(lse, 0xff, x.nl * sizeof *lse);
	io.q = hq; io.k = hk; io.v = hv; io.o = ho; io.lse = lse;
	io.dout = hdo; io.dq = hdq; io.dk = hdk; io.dv = hdv;
	if (kern_cpu.init(&st, &s, m, err, sizeof err) != KERN_OK) {
		ok(0, "cpu init: %s", err);
		return;
	}
	ok(kern_cpu.fwd(st, &io) == KERN_OK && kern_cpu.bwd(st, &io) == KERN_OK, "cpu fwd and bwd run");
	ref_init(&r, m, err, sizeof err);
	ref_fwd(&r, &s, x.q, x.k, x.v, x.o, x.lse);
	ref_bwd(&r, &s, x.q, x.k, x.v, x.o, x.lse, x.dout, x.dq, x.dk, x.dv);
	half_load(dtype, ho, t, x.nq); eo = ref_relerr(t, x.o, x.nq);
	for (size_t i = 0; i < x.nl; i++)
		t[i] = lse[i];
	el = ref_relerr(t, x.lse, x.nl);
	half_load(dtype, hdq, t, x.nq); eq = ref_relerr(t, x.dq, x.nq);
	half_load(dtype, hdk, t, x.nk); ek = ref_relerr(t, x.dk, x.nk);
	half_load(dtype, hdv, t, x.nk); ev = ref_relerr(t, x.dv, x.nk);
	ok(eo < 1e-2 && el < 1e-6 && eq < 1e-2 && ek < 1e-2 && ev < 1e-2,
	    "cpu kernel %s = ref on %s (o %.2g lse %.2g dq %.2g dk %.2g dv %.2g)",
	    dtype == DT_FP16 ? "fp16" : "bf16", m->pattern, eo, el, eq, ek, ev);
	/* the rounding is the only difference: bf16 carries 8 bits */
	ok(eo > 0 && eo < (dtype == DT_FP16 ? 2e-3 : 1e-2), "cpu error is rounding-sized (%.2g)", eo);
	kern_cpu.fini(st);
	ref_free(&r);
	ref_bufs_free(&x);
	free(hq); free(hk); free(hv); free(hdo); free(ho); free(hdq); free(hdk); free(hdv);
	free(lse); free(t);
}

/* Results must not depend on the thread count (no races, no reordering). */
static void threads(const struct mask *m)
{
	struct attn_shape s = { .sq = m->sq, .sk = m->sk, .batch = 1, .hq = 6, .hkv = 3, .hd = 16 };
	struct ref_bufs a, b;
	struct ref r;
	char err[256];

	s.scale = 0.25;
	ref_init(&r, m, err, sizeof err);
	io_alloc(&a, &s, 3);
	io_alloc(&b, &s, 3);
	r.threads = 1;
	ref_fwd(&r, &s, a.q, a.k, a.v, a.o, a.lse);
	ref_bwd(&r, &s, a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv);
	r.threads = 7;
	ref_fwd(&r, &s, b.q, b.k, b.v, b.o, b.lse);
	ref_bwd(&r, &s, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv);
	ok(memcmp(a.o, b.o, a.nq * 8) == 0 && memcmp(a.dq, b.dq, a.nq * 8) == 0 &&
	    memcmp(a.dk, b.dk, a.nk * 8) == 0 && memcmp(a.dv, b.dv, a.nk * 8) == 0,
	    "1 and 7 threads give identical bits");
	ref_bufs_free(&a);
	ref_bufs_free(&b);
	ref_free(&r);
}

int main(void)
{
	struct mask m, cross;
	char err[512];
	int n = 0;
	const struct attn_shape mha = { .batch = 1, .hq = 2, .hkv = 2, .hd = 12 };
	const struct attn_shape gqa = { .batch = 2, .hq = 4, .hkv = 2, .hd = 8 };

	for (const struct pattern *p = pattern_table; p->name != NULL; p++, n++) {
		struct attn_shape s;
		if (build(p, 200, &m, err, sizeof err) != 0) {
			ok(0, "build %s: %s", p->name, err);
			continue;
		}
		s = mha; s.sq = s.sk = m.sq;
		if (s.hq % m.heads == 0)
			against_dense(p->name, &m, s);
		s = gqa; s.sq = s.sk = m.sq;
		against_dense(p->name, &m, s);
		if (strcmp(p->name, "causal_document") == 0) {
			finite_diff(&m);
			threads(&m);
			cpu_kernel(&m, DT_BF16);
			cpu_kernel(&m, DT_FP16);
		}
		mask_free(&m);
	}
	ok(n >= 18, "every pattern of the table was tried (%d)", n);

	/* Cross attention with rows that see nothing: lse -inf, o and dq 0. */
	mask_init(&cross, 130, 77, "cross", "");
	mask_add(&cross, 0, 40, 0, 77, MASK_FULL);
	mask_add(&cross, 70, 130, 10, 70, MASK_BICAUSAL);
	if (mask_finish(&cross, err, sizeof err) != 0) {
		ok(0, "cross mask: %s", err);
	} else {
		struct attn_shape s = gqa;
		struct ref_bufs x;
		struct ref r;
		int empty = 1;
		s.sq = 130; s.sk = 77; s.scale = 1.0 / sqrt(s.hd);
		against_dense("cross", &cross, s);
		ref_init(&r, &cross, err, sizeof err);
		io_alloc(&x, &s, 1);
		ref_fwd(&r, &s, x.q, x.k, x.v, x.o, x.lse);
		ref_bwd(&r, &s, x.q, x.k, x.v, x.o, x.lse, x.dout, x.dq, x.dk, x.dv);
		for (int i = 40; i < 70; i++)
			for (int d = 0; d < s.hd; d++)
				empty &= x.lse[i] == -INFINITY && x.o[QI(&s, 0, i, 0) + d] == 0 &&
				    x.dq[QI(&s, 1, i, 3) + d] == 0;
		ok(empty, "rows that allow nothing: lse -inf, o = 0, dq = 0");
		ref_bufs_free(&x);
		ref_free(&r);
		mask_free(&cross);
	}
	{
		double a[3] = { 1, NAN, 2 }, b[3] = { 1, 1, 2 };
		ok(isnan(ref_relerr(a, b, 3)), "a NaN output never passes");
	}
	return tap_done();
}
