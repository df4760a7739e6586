/* The CPU kernel: the fp64 reference (lib/ref.c) behind the dtype buffers
 * of kernel.h.  Inputs are widened to double, the reference runs threaded
 * over the plan, outputs are rounded back; so the math exists once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "half.h"
#include "ref.h"
#include "util.h"

/* Larger head dims are unsupported by design, as in every GPU kernel here;
 * it also gives the tests an `unsupported` row that needs no GPU. */
#define CPU_MAXHD 256

struct cpu {
	struct ref ref;
	struct attn_shape s;
	size_t nq, nk, nl;         /* elements of q-side, kv-side, lse */
	double *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
	size_t bytes;
	double fault;              /* LONGATTN_FAULT=cpu: scale outputs by this */
};

static const char *cpu_check(const struct attn_shape *s, const struct mask *m, int pass)
{
	(void)pass;
	if (s->hd > CPU_MAXHD)
		return "head dim above 256";
	if (s->sq >= INT32_MAX || s->sk >= INT32_MAX)
		return "seqlen of 2^31 or more";
	return ref_check(s, m);
}

static void cpu_fini(void *st);

static int cpu_init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct cpu *c = calloc(1, sizeof *c);
	const char *f = getenv("LONGATTN_FAULT");

	if (c == NULL)
		return KERN_OOM;
	*st = NULL;
	if (ref_init(&c->ref, m, err, errlen) != 0) {
		free(c);
		return KERN_ERR;
	}
	c->s = *s;
	c->nq = (size_t)s->batch * s->sq * s->hq * s->hd;
	c->nk = (size_t)s->batch * s->sk * s->hkv * s->hd;
	c->nl = (size_t)s->batch * s->hq * s->sq;
	c->q = malloc(c->nq * sizeof(double));
	c->o = malloc(c->nq * sizeof(double));
	c->dout = malloc(c->nq * sizeof(double));
	c->dq = malloc(c->nq * sizeof(double));
	c->k = malloc(c->nk * sizeof(double));
	c->v = malloc(c->nk * sizeof(double));
	c->dk = malloc(c->nk * sizeof(double));
	c->dv = malloc(c->nk * sizeof(double));
	c->lse = malloc(c->nl * sizeof(double));
	c->bytes = (4 * c->nq + 4 * c->nk + c->nl) * sizeof(double);
	c->fault = f != NULL && strcmp(f, "cpu") == 0 ? 1.05 : 1.0;
	if (!c->q || !c->o || !c->dout || !c->dq || !c->k || !c->v || !c->dk || !c->dv || !c->lse) {
		cpu_fini(c);
		return KERN_OOM;
	}
	*st = c;
	return KERN_OK;
}

static void lse_load(double *d, const float *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		d[i] = s[i];
}

static void store(const struct cpu *c, void *dst, double *src, size_t n)
{
	if (c->fault != 1.0)
		for (size_t i = 0; i < n; i++)
			src[i] *= c->fault;
	half_store(c->s.dtype, dst, src, n);
}

static int cpu_fwd(void *st, const struct attn_io *io)
{
	struct cpu *c = st;

	half_load(c->s.dtype, io->q, c->q, c->nq);
	half_load(c->s.dtype, io->k, c->k, c->nk);
	half_load(c->s.dtype, io->v, c->v, c->nk);
	ref_fwd(&c->ref, &c->s, c->q, c->k, c->v, c->o, c->lse);
	store(c, io->o, c->o, c->nq);
	for (size_t i = 0; i < c->nl; i++)
		io->lse[i] = (float)c->lse[i];
	return KERN_OK;
}

static int cpu_bwd(void *st, const struct attn_io *io)
{
	struct cpu *c = st;

	half_load(c->s.dtype, io->q, c->q, c->nq);
	half_load(c->s.dtype, io->k, c->k, c->nk);
	half_load(c->s.dtype, io->v, c->v, c->nk);
	half_load(c->s.dtype, io->o, c->o, c->nq);
	half_load(c->s.dtype, io->dout, c->dout, c->nq);
	lse_load(c->lse, io->lse, c->nl);
	ref_bwd(&c->ref, &c->s, c->q, c->k, c->v, c->o, c->lse, c->dout, c->dq, c->dk, c->dv);
	store(c, io->dq, c->dq, c->nq);
	store(c, io->dk, c->dk, c->nk);
	store(c, io->dv, c->dv, c->nk);
	return KERN_OK;
}

static void cpu_fini(void *st)
{
	struct cpu *c = st;

	if (c == NULL)
		return;
	ref_free(&c->ref);
	free(c->q); free(c->k); free(c->v); free(c->o); free(c->lse);
	free(c->dout); free(c->dq); free(c->dk); free(c->dv);
	free(c);
}

size_t cpu_workspace(const void *st)
{
	return st != NULL ? ((const struct cpu *)st)->bytes : 0;
}

const struct kern_ops kern_cpu = {
	.name = "cpu",
	.about = "fp64 reference over the plan, online softmax, pthreads ($LONGATTN_THREADS)",
	.caps = KC_FWD | KC_BWD | KC_BF16 | KC_FP16 | KC_GQA | KC_SLICES | KC_BLOCKS,
	.check = cpu_check,
	.init = cpu_init,
	.fwd = cpu_fwd,
	.bwd = cpu_bwd,
	.fini = cpu_fini,
};
