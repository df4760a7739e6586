/* The fp64 reference attention: the checks of kbench and cpbench, the tests,
 * and the math behind the cpu kernel (kernels/cpu.c converts its dtype
 * buffers and calls this).  Exact over any mask through the plan, O(S)
 * memory (online softmax), threaded over (batch, head, tile).
 *
 * Layouts and conventions are kernel.h's, with double elements:
 *   q, o, dout, dq [batch][sq][hq][hd]; k, v, dk, dv [batch][sk][hkv][hd];
 *   lse [batch][hq][sq], natural log, -INFINITY for a row that allows no key
 *   (its o and dq rows are zero).  GQA: q-head h uses kv-head h/(hq/hkv);
 *   mask head of q-head h is h/(hq/mask heads).  s->dtype is ignored. */
#ifndef REF_H
#define REF_H
#include <stddef.h>
#include <stdint.h>
#include "kernel.h"
#include "mask.h"
#include "plan.h"
#include "rng.h"

#define REF_TILE 64

struct ref {
	struct plan fw;     /* rows = q-tiles: o, lse, dq */
	struct plan bw;     /* rows = k-tiles: dk, dv (no atomics) */
	int threads;
};

/* Plans for m; -1 and a message on failure (seqlen >= 2^31, no memory). */
int  ref_init(struct ref *r, const struct mask *m, char *err, size_t errlen);
void ref_free(struct ref *r);

/* Shape checks the reference relies on (hkv divides hq, mask heads divide
 * hq, positive sizes, seqlens match the mask): NULL or the reason. */
const char *ref_check(const struct attn_shape *s, const struct mask *m);

void ref_fwd(const struct ref *r, const struct attn_shape *s,
             const double *q, const double *k, const double *v,
             double *o, double *lse);
/* o and lse as given (they need not come from ref_fwd). */
void ref_bwd(const struct ref *r, const struct attn_shape *s,
             const double *q, const double *k, const double *v,
             const double *o, const double *lse, const double *dout,
             double *dq, double *dk, double *dv);

/* The double buffers of one forward and backward pass of a shape. */
struct ref_bufs {
	size_t nq, nk, nl;          /* elements: q-side, kv-side, lse */
	double *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
};
void ref_sizes(const struct attn_shape *s, size_t *nq, size_t *nk, size_t *nl);
/* -1 if memory runs out, with nothing left allocated. */
int  ref_bufs_alloc(struct ref_bufs *x, const struct attn_shape *s);
void ref_bufs_free(struct ref_bufs *x);

/* Worker threads: $LONGATTN_THREADS if set (>= 1), else the online CPUs. */
int ref_threads(void);

/* Test inputs: n values, roughly normal (sum of uniforms), |x| >= 1/64 so
 * that no input is zero even after rounding to bf16/fp16. */
void ref_randn(struct rng *g, double *x, size_t n);

/* ||x - ref|| / ||ref|| over n values (x - ref when ref is all zero);
 * NaN if any x is NaN (so a poisoned output never passes), where x and ref
 * are both -inf (an empty lse row) the pair counts as equal. */
double ref_relerr(const double *x, const double *ref, size_t n);

#endif
