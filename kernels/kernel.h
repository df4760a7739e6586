/* The attention kernels' one interface.  A kernel is one file that defines a
 * `const struct kern_ops kern_NAME` and one line in kernels/table.c.
 *
 * Layouts (row-major, contiguous; dtype elements unless noted):
 *   q, o, dout, dq   [batch][sq][hq][hd]
 *   k, v, dk, dv     [batch][sk][hkv][hd]
 *   lse              float [batch][hq][sq]: natural log of sum over allowed k
 *                    of exp(scale * q.k); -INFINITY for a row that allows no
 *                    key, whose o row is all zeros (and whose dq row is zero).
 * GQA: q-head h reads kv-head h / (hq/hkv); dk/dv sum over that group.
 * Mask head of q-head h: h / (hq / mask->heads) (mask->heads divides hq).
 * scale is 1/sqrt(hd).  Buffers are device memory for KC_GPU kernels (the
 * stream in attn_io orders the work), host memory otherwise. */
#ifndef KERNEL_H
#define KERNEL_H
#include <stddef.h>
#include <stdint.h>
#include "mask.h"

enum { DT_BF16, DT_FP16 };
enum { PASS_FWD = 1, PASS_BWD = 2 };

enum {
	KC_GPU    = 1 << 0,    /* buffers in device memory */
	KC_FWD    = 1 << 1,
	KC_BWD    = 1 << 2,
	KC_BF16   = 1 << 3,
	KC_FP16   = 1 << 4,
	KC_GQA    = 1 << 5,    /* hq != hkv without repeating K/V */
	KC_SLICES = 1 << 6,    /* any slice mask */
	KC_BLOCKS = 1 << 7,    /* block-sparse bodies */
	KC_DET    = 1 << 8,    /* a deterministic bwd when asked (ATTN_DETERMINISTIC) */
};

/* attn_shape.flags */
enum { ATTN_DETERMINISTIC = 1 };   /* bwd: the same bits on every run */

/* Return codes of init/fwd/bwd. */
enum { KERN_OK = 0, KERN_OOM = 1, KERN_ERR = 2 };

struct attn_shape {
	int64_t sq, sk;
	int batch, hq, hkv, hd;
	int dtype;                 /* DT_* */
	double scale;              /* 1/sqrt(hd) */
	unsigned flags;            /* ATTN_* */
};

struct attn_io {
	void *q, *k, *v, *o;
	float *lse;
	void *dout, *dq, *dk, *dv;
	void *stream;              /* cudaStream_t for KC_GPU kernels; NULL = default */
};

struct kern_ops {
	const char *name;
	const char *about;         /* one line for kbench -l */
	unsigned caps;             /* KC_* */
	const char *disabled;      /* non-NULL: not in this build, and why ("no CUDA") */
	/* NULL if the kernel can run this shape, mask and pass (PASS_*), else
	 * a short reason; kbench then writes an `unsupported` row. May be NULL
	 * (caps decide). */
	const char *(*check)(const struct attn_shape *s, const struct mask *m, int pass);
	/* Everything that is not the pass itself: plans, their upload, workspace.
	 * Not timed.  KERN_OOM when memory runs out. */
	int  (*init)(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen);
	/* fwd: q,k,v -> o, lse.  bwd: q,k,v,o,lse,dout -> dq,dk,dv (lse and o as
	 * given, so a CP strategy may pass the merged global ones).  They must
	 * not allocate except through dev.h, and write every output element. */
	int  (*fwd)(void *st, const struct attn_io *io);
	int  (*bwd)(void *st, const struct attn_io *io);
	void (*fini)(void *st);
};

extern const struct kern_ops *const kern_table[];     /* NULL-terminated, kernels/table.c */
const struct kern_ops *kern_find(const char *name);    /* NULL if unknown */

/* The choice of kernels for a device of compute capability major.minor
 * (have_gpu 0: none), in one place for every tool.  kern_default: the
 * fastest this build has for it, hopper on 9.0, else flash (naive if flash
 * is not built), and cpu without a GPU.  kern_all: every kernel this build
 * and the device run (hopper only on 9.0), or cpu alone without a GPU;
 * fills out[0..max-1] in table order and returns the count. */
const struct kern_ops *kern_default(int cc_major, int cc_minor, int have_gpu);
int kern_all(int cc_major, int cc_minor, int have_gpu, const struct kern_ops **out, int max);

#endif
