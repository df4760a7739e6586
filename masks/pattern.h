/* Mask patterns: one file per family, registered in masks/table.c.  A
 * builder turns resolved arguments into a finished mask (mask_finish done)
 * or returns -1 with a one-line message (no tool name). */
#ifndef PATTERN_H
#define PATTERN_H
#include <stddef.h>
#include <stdint.h>
#include "mask.h"
#include "rng.h"

/* What a pattern needs from the caller, beyond S. */
enum {
	PAT_DOCS = 1 << 0,     /* document lengths (from -L, or sampled) */
	PAT_RANDOM = 1 << 1,   /* draws from the seed */
	PAT_OWNDOCS = 1 << 2,  /* takes -L lengths, else makes its own (lens NULL) */
};

#define PAT_UNSET (-1)

struct pattern_args {
	int64_t s;                  /* seqlen_q = seqlen_k */
	uint64_t seed;
	struct rng *rng;            /* seeded from seed; builders draw from it */
	const int64_t *lens;        /* documents, summing to s (PAT_DOCS) */
	size_t nlens;
	const char *docsrc;         /* where lens came from, for params: "pile", "file" */
	int64_t window, global, prefix;     /* PAT_UNSET = the pattern's default */
	int64_t block, minblock, avgblock, buckets, startrow;
	double ratio;               /* < 0: default */
	int heads;                  /* 0: default */
	const char *spans;          /* qk_sparse: "OFF:LEN,OFF:LEN" */
	const char *file;           /* custom: the slice list; "-" is stdin */
};

struct pattern {
	const char *name;
	const char *desc;
	unsigned needs;
	int (*build)(struct mask *m, const struct pattern_args *a, char *err, size_t errlen);
};

extern const struct pattern pattern_table[];   /* ends with a NULL name */
const struct pattern *pattern_find(const char *name);

/* Helpers shared by the builders (masks/band.c). */
/* The band lo <= k - q <= hi (lo <= 0 <= hi) on the square [off, off+n)^2,
 * as at most three slices (causal, bicausal or full, invcausal). */
int  pat_band(struct mask *m, int64_t off, int64_t n, int64_t lo, int64_t hi);
/* Appends " key=value" to m->params, or fails if it no longer fits. */
void pat_param(struct mask *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finishes m and turns a failure into the builder's error. */
int  pat_finish(struct mask *m, char *err, size_t errlen);

#endif
