/* kbench's logic below its options: one row's job, its inputs, its check
 * against lib/ref, its timing.  lib/kb.c is the host side; lib/kb_cuda.c
 * (CUDA builds only) runs KC_GPU kernels. */
#ifndef KB_H
#define KB_H
#include <stddef.h>
#include <stdint.h>
#include "kernel.h"
#include "mask.h"

enum { KB_OK, KB_OOM, KB_UNSUPPORTED, KB_WRONG, KB_ERROR };
extern const char *const kb_status[];      /* "ok", "oom", ... by KB_* */

#define KB_TOL 1e-2                         /* relative error that passes */

struct kb_job {
	const struct kern_ops *kern;
	const struct mask *mask;
	struct attn_shape shape;
	int pass;                   /* PASS_FWD or PASS_BWD */
	int warmup, iters;
	int check;
	uint64_t seed;
	double qscale;              /* Q's values times this (1: standard normals) */
};

enum { KB_O, KB_LSE, KB_DQ, KB_DK, KB_DV, KB_NERR };
extern const char *const kb_errname[];      /* "o", "lse", ... */

struct kb_result {
	int status;
	char why[256];              /* for unsupported, error, wrong */
	double ms_median, ms_min, ms_max;
	double mem_bytes;
	double err[KB_NERR];        /* relative errors; < 0 when not checked */
	int same;                   /* bwd --check: a second run gave the same bits (1), not (0); -1 */
};

/* Inputs in the dtype from the seed, standard normals (q times qscale):
 * q, k, v, dout.  The last set is kept (kb_data_free does not free it),
 * so rows of one shape share it. */
struct kb_data {
	void *q, *k, *v, *dout;
	size_t nq, nk, nl;          /* elements: q-side, kv-side, lse */
};
void kb_inputs(struct kb_data *d, const struct attn_shape *s, uint64_t seed, double qscale);
void kb_data_free(struct kb_data *d);

/* NULL if the kernel can run the job, else why (caps, then its check). */
const char *kb_unsupported(const struct kb_job *j);

/* Compare the kernel's outputs (host copies) with lib/ref on the same
 * inputs: fwd o and lse, bwd dq, dk, dv (o, lse, the bwd ones NULL).
 * Fills r->err and sets KB_WRONG (with why) when one is above KB_TOL or
 * NaN.  The reference of the last (mask, shape, seed) is kept, so several
 * kernels and both passes pay for it once. */
void kb_verify(const struct kb_job *j, const struct kb_data *d, const void *o, const float *lse,
               const void *dq, const void *dk, const void *dv, struct kb_result *r);

/* Median, min, max of n times in ms (sorts ms). */
void kb_stats(double *ms, int n, struct kb_result *r);

void kb_run_host(const struct kb_job *j, struct kb_result *r);
const char *kb_cpu_name(void);              /* "cpu:<model name>" */

/* lib/kb_cuda.c */
int  kb_gpu_count(void);
/* Selects the device, names it, and sets up the L2 flush buffer; -1 and a
 * message if it cannot. */
int  kb_gpu_open(int dev, char *name, size_t len, char *err, size_t errlen);
void kb_run_gpu(const struct kb_job *j, struct kb_result *r);
/* lib/kb_fill.cu: n standard normals times scale in the dtype on the
 * device, tensor `which` (0 q, 1 k, 2 v, 3 dout) of the seed; -1 if the
 * launch failed. */
int  kb_fill_dev(void *p, size_t n, int dtype, uint64_t seed, int which, double scale, void *stream);

#endif
