/* Context-parallel strategies: one file each under lib/cp/, one line each in
 * lib/cp/table.c.  cpbench parses options and writes rows; a strategy's run
 * does everything between: its own data layout, sharding, local attention
 * through a kernel (kernels/kernel.h), communication through lib/comm.h,
 * timing, and the --check against the fp64 reference. */
#ifndef CP_H
#define CP_H
#include <stdint.h>
#include "boot.h"
#include "comm.h"
#include "kernel.h"
#include "mask.h"

enum { CP_OK, CP_OOM, CP_UNSUPPORTED, CP_WRONG, CP_ERROR };

struct cp_env {
	struct comm *world;          /* every rank */
	struct boot *boot;           /* rank, node ids */
	int backend;                 /* COMM_MPI: host buffers, kernel "cpu"; COMM_NCCL: device buffers */
	const struct kern_ops *kern; /* the local attention kernel */
	int node_size;               /* ranks per node: from PMIx node ids, or --node-size */
	int verbose;
};

struct cp_job {
	const struct mask *mask;     /* the global mask, identical on every rank */
	struct attn_shape shape;     /* global shape: sq = sk = S */
	int pass;                    /* PASS_FWD or PASS_BWD (bwd times the backward pass alone) */
	int ulysses, ring;           /* degrees asked, 0 = the strategy's default */
	int warmup, iters;
	int check;                   /* compare with the fp64 single-device reference */
	uint64_t seed;
	int window;                  /* loongtrain's inner ring, in ring members; 0 = its default */
};

struct cp_result {
	int status;                  /* CP_* */
	char why[160];               /* for unsupported/error/wrong */
	int ulysses, ring;           /* degrees used (world = ulysses * ring) */
	double ms_median, ms_min, ms_max;   /* of the slowest rank, the same on every rank */
	double mem_bytes;            /* peak over ranks */
	double sent_bytes;           /* comm_sent of one timed pass, max over ranks */
	double imbalance;            /* allowed pairs x q heads computed per rank, max/mean; 0 if none */
	double err[5];               /* --check: relative errors of o, lse, dq, dk, dv */
};

struct cp_ops {
	const char *name;
	const char *about;
	/* Collective: every rank calls it with the same job and gets the same
	 * result. */
	int (*run)(const struct cp_env *env, const struct cp_job *job, struct cp_result *res);
};

extern const struct cp_ops *const cp_table[];   /* NULL-terminated, lib/cp/table.c */
const struct cp_ops *cp_find(const char *name);

#endif
