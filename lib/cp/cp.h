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

/* A strategy's schedule, for cpbench --predict (lib/cp/predict.c): what
 * each rank does, step by step, derived from the layout code its run uses,
 * so that it is exact and needs no GPU.  Every rank has the same number of
 * steps; step k of every rank starts once step k-1 of that rank ended
 * (every stream of it).  A step holds local attention, a transfer, local
 * memory traffic, or attention with a transfer under it. */
enum { CPX_NONE, CPX_P2P, CPX_A2A, CPX_GATHER, CPX_RSCATTER };  /* how bytes move */
enum { CPX_INTRA, CPX_INTER };                   /* within a node, across nodes */

struct cp_xfer {
	int how;                     /* CPX_*; NONE: no transfer */
	double bytes[2];             /* this rank sends, to ranks in its node and in others */
	int nops;                    /* calls (each pays the latency) */
	int to, from;                /* CPX_P2P: the peers */
	int group;                   /* collectives: ranks of one call share it */
};

struct cp_attn {                 /* local attention: queries qr x keys kr (global tokens) */
	int nq, nk;
	int64_t (*qr)[2], (*kr)[2];
	int hq, hkv;                 /* heads the local kernel runs */
	struct mask m;               /* the piece (cp_piece), as the kernel gets it */
};

/* A rank's step: first its stream 0 work (attention, then mem bytes of
 * local memory traffic in nmem calls: packs, merges, casts) with x under
 * it, then xs; x2 starts with the step and must be done by the end of the
 * next step marked join2 (the outer ring's stream). */
struct cp_step {
	int attn;                    /* index into cp_sched.attn, -1 for none */
	double mem;
	int nmem;
	struct cp_xfer x, xs, x2;
	int join2;
};

struct cp_sched {
	int world, node_size, nsteps;
	int ulysses, ring;           /* degrees, as cp_result has them */
	struct cp_step *step;        /* [world][nsteps] */
	struct cp_attn *attn;
	int nattn, cap;
	char why[160];               /* CP_UNSUPPORTED, CP_ERROR */
};

struct cp_ops {
	const char *name;
	const char *about;
	/* Collective: every rank calls it with the same job and gets the same
	 * result. */
	int (*run)(const struct cp_env *env, const struct cp_job *job, struct cp_result *res);
	/* The schedule of run on world ranks, node_size a node: CP_OK, or
	 * CP_UNSUPPORTED (what run would say) with s->why.  No GPU, no comm.
	 * NULL: --predict writes an unsupported row.  Build it with
	 * cp_impl.h's cps_init, then per rank and step cps_at, cps_attn (the
	 * piece, by the same ranges run gives cp_plan) and cps_xfer (bytes
	 * counted at the sender; a stage that fetches from several ranks is
	 * CPX_A2A with one group), from the same layout code run uses;
	 * tests/unit/cp_sched.c checks that every pair is computed once. */
	int (*sched)(const struct cp_job *job, int world, int node_size, struct cp_sched *s);
};

/* Schedules (lib/cp/predict.c). */
void cp_sched_free(struct cp_sched *s);

extern const struct cp_ops *const cp_table[];   /* NULL-terminated, lib/cp/table.c */
const struct cp_ops *cp_find(const char *name);

#endif
