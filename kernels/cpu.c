/* The CPU kernel: the fp64 reference (lib/ref.c) behind the dtype buffers
 * of kernel.h.  Inputs are widened to double, the reference runs threaded
 * over the plan, outputs are rounded back; so the math exists once. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "half.h"
#include "ref.h"

/* Larger head dims are unsupported by design, as in every GPU kernel here;
 * it also gives the tests an `unsupported` row that needs no GPU. */
#define CPU_MAXHD 256

struct cpu {
	struct ref ref;
	struct attn_shape s;
	struct ref_bufs x;
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
	c->fault = f != NULL && strcmp(f, "cpu") == 0 ? 1.05 : 1.0;
	if (ref_bufs_alloc(&c->x, s) != 0) {
		cpu_fini(c);
		return KERN_OOM;
	}
	*st = c;
	return KERN_OK;
}

static void load_qkv(struct cpu *c, const struct attn_io *io)
{
	half_load(c->s.dtype, io->q, c->x.q, c->x.nq);
	half_load(c->s.dtype, io->k, c->x.k, c->x.nk);
	half_load(c->s.dtype, io->v, c->x.v, c->x.nk);
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
	struct ref_bufs *x = &c->x;

	load_qkv(c, io);
	ref_fwd(&c->ref, &c->s, x->q, x->k, x->v, x->o, x->lse);
	store(c, io->o, x->o, x->nq);
	for (size_t i = 0; i < x->nl; i++)
		io->lse[i] = (float)x->lse[i];
	return KERN_OK;
}

static int cpu_bwd(void *st, const struct attn_io *io)
{
	struct cpu *c = st;
	struct ref_bufs *x = &c->x;

	load_qkv(c, io);
	half_load(c->s.dtype, io->o, x->o, x->nq);
	half_load(c->s.dtype, io->dout, x->dout, x->nq);
	for (size_t i = 0; i < x->nl; i++)
		x->lse[i] = io->lse[i];
	ref_bwd(&c->ref, &c->s, x->q, x->k, x->v, x->o, x->lse, x->dout, x->dq, x->dk, x->dv);
	store(c, io->dq, x->dq, x->nq);
	store(c, io->dk, x->dk, x->nk);
	store(c, io->dv, x->dv, x->nk);
	return KERN_OK;
}

static void cpu_fini(void *st)
{
	struct cpu *c = st;

	if (c == NULL)
		return;
	ref_free(&c->ref);
	ref_bufs_free(&c->x);
	free(c);
}

size_t cpu_workspace(const void *st)
{
	const struct cpu *c = st;

	return c != NULL ? (4 * c->x.nq + 4 * c->x.nk + c->x.nl) * sizeof(double) : 0;
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
