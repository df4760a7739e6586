/* What the CP strategies share (lib/cp/cp_common.c): the shards every rank
 * holds, the timing loop, agreement on a status, the --check, mask pieces.
 * A strategy fills a cp_run with its layout and its passes and calls
 * cp_drive. */
#ifndef CP_IMPL_H
#define CP_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "cp.h"
#include "ops.h"

/* The layout: ring member j (of R) holds the zigzag chunks j and 2R-1-j of
 * 2R equal chunks (the causal work balances, and document masks nearly);
 * its tokens, in that order, are split into U equal parts, one per Ulysses
 * rank u.  World rank = j*U + u.  R = 1 is a plain contiguous split.
 *
 * Each rank holds its tokens (c = S/(R*U) of them) of every tensor:
 *   q, o, dout, dq  [b][c][hq][d]      k, v, dk, dv  [b][c][hkv][d]
 *   lse             float [b][hq][c]
 * v follows k in one allocation (v = k + b*c*hkv*d elements), dv follows
 * dk, so K and V move as one buffer; unless the strategy asks for kpad
 * tokens of room after each of k, v, dk and dv (v = k + b*(c+kpad)*hkv*d):
 * its key buffer, shard first, with no copy. */
struct cp_run {
	const struct cp_env *env;
	const struct cp_job *job;
	struct cp_result *res;
	struct ops x;
	int type;                    /* CT_BF16 or CT_FP16 */
	size_t es;                   /* its size */
	int b, hq, hkv, d;
	int64_t S, c;
	int U, R;
	/* Another layout than the one above: rank's token ranges in shard
	 * order, at most nrg of them (c tokens in all); NULL for cp_ranges. */
	int (*layout)(const struct cp_run *r, int rank, int64_t (*rg)[2]);
	int nrg;
	int64_t kpad;                /* room after k, v, dk, dv (tokens) */
	double work;                 /* set by setup: allowed pairs x q heads this rank computes */
	void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
	float *lse;
	char why[160];               /* a failure on this rank; first one wins */
	int oom;                     /* ... and it was the kernel running out of memory */

	void *self;
	/* Not timed: buffers, groups, plans.  CP_OK, or a status with why. */
	int  (*setup)(struct cp_run *r);
	/* One pass over the shards: 0, or -1 with why.  A failing rank still
	 * does every communication, so that no peer hangs. */
	int  (*fwd)(struct cp_run *r);
	int  (*bwd)(struct cp_run *r);
	void (*fini)(struct cp_run *r);
};

/* Runs the job: shards, setup, warm-up and timed iterations, the check;
 * fills res identically on every rank.  Returns res->status. */
int cp_drive(struct cp_run *r);

/* Ulysses over U ranks x a double ring of R members in windows of W
 * (lib/cp/cp_hybrid.c): ulysses, ring_p2p, usp and loongtrain. */
int cp_hybrid(const struct cp_env *env, const struct cp_job *job, struct cp_result *res,
              int U, int R, int W);

/* Its schedule (cpbench --predict): CP_OK, CP_UNSUPPORTED (as cp_hybrid
 * would refuse) or CP_ERROR, with s->why. */
int cp_hybrid_sched(const struct cp_job *job, int world, int node_size, int U, int R, int W,
                    struct cp_sched *s);

/* The global token ranges of a rank in the layout above, adjacent ones
 * merged: 1 or 2 ranges.  cp_member gives those of ring member j. */
int cp_ranges(int64_t S, int R, int U, int rank, int64_t rg[2][2]);
int cp_member(int64_t S, int R, int j, int64_t rg[2][2]);

/* The mask for queries qr[0..nq) concatenated x keys kr[0..nk)
 * concatenated: pieces of mask_restrict, moved next to each other.  Slice
 * bodies only when there is more than one range on a side. */
int cp_piece(const struct mask *m, int64_t qr[][2], int nq, int64_t kr[][2], int nk,
             struct mask *out, char *err, size_t errlen);

/* A job the strategy cannot run: res gets CP_UNSUPPORTED and why, which it
 * returns. */
int cp_refuse(struct cp_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Set why (once) and return -1. */
int cp_fail(struct cp_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A kernel pass returned rc (KERN_*): 0, or -1 with why. */
int cp_kern_rc(struct cp_run *r, int rc, const char *pass);
/* A comm call failed: every rank ends (comm.h's rule: never a hang). */
void cp_commfail(struct cp_run *r, const char *what) __attribute__((noreturn));

/* Setup allocates many buffers and reports out of memory once: *bad is set
 * when one fails.  cp_free frees n buffers, NULL ones included. */
void *cp_alloc(struct cp_run *r, size_t n, int *bad);
void  cp_free(struct cp_run *r, void *const *bufs, size_t n);

struct attn_shape cp_local_shape(const struct cp_run *r, int64_t sq, int64_t sk, int hq, int hkv);
/* The mask piece of queries qr x keys kr (cp_piece) and, unless it is
 * empty, the kernel's plan for it on the local shape ls: CP_OK (*kst NULL
 * for an empty piece), or a status with why.  *piece is for mask_free
 * either way. */
int cp_plan(struct cp_run *r, int64_t qr[][2], int nq, int64_t kr[][2], int nk,
            const struct attn_shape *ls, struct mask *piece, void **kst);

/* Building a schedule (lib/cp/predict.c).  cps_init: world x nsteps empty
 * steps; the degrees go in s.  cps_at: rank's step k.  cps_attn: a local
 * attention piece (cp_piece of the job's mask), its index, or -1 with
 * s->why.  cps_xfer: count bytes from rank me to rank peer (intra or inter
 * by node_size) in x. */
int  cps_init(struct cp_sched *s, int world, int node_size, int nsteps, int U, int R);
struct cp_step *cps_at(struct cp_sched *s, int rank, int k);
int  cps_attn(struct cp_sched *s, const struct mask *m, int64_t qr[][2], int nq,
              int64_t kr[][2], int nk, int hq, int hkv);
void cps_xfer(const struct cp_sched *s, struct cp_xfer *x, int how, int me, int peer, double bytes);

/* ---- balanced (lib/cp/balanced.c) -------------------------------------
 * Its plan is a pure function of (mask, world, node size, shape), so that a
 * cost model can lay out every rank's schedule without running it.
 *
 * The sequence is cut into nchunk = world * per chunks of C tokens; rank r
 * holds per of them, rank[r].chunk[] in shard order (its tokens, in that
 * order, are its shard).  Tiles of T tokens are both the cost model's unit
 * (tiles the kernel visits, plus ROWCOST per row of tiles) and the unit of
 * transfer: key block b is tokens [b*T, (b+1)*T).  Rank r receives exactly
 * the blocks of other ranks that its rows read, rank[r].blk[] in arrival
 * order, in messages rank[r].msg[]; its key buffer is its shard followed by
 * those blocks.  Exchange step s (0 .. world-2) has rank r send to
 * cp_bpeer(p, r, s, 1) and receive from cp_bpeer(p, r, s, 0): the steps
 * inside a node come first.  What r sends at step s is what that peer
 * receives at step s (its messages of that step, in order).
 *
 * A stage runs shard rows [q0, q1) against the first kv tokens of the key
 * buffer once messages 0 .. wait-1 have arrived.  Every row is in exactly
 * one stage of a pass, so nothing is merged: the forward pass runs the
 * local-only stages first (they hide the transfers), the backward pass
 * half of them first and half after the dK/dV partials of received blocks
 * have gone home (before stage bret), summed in fp32 by their owners. */
struct cp_bmsg {
	int step, peer;             /* exchange step; the sending rank */
	int b0, nb;                 /* blk[b0 .. b0+nb) of the receiver */
};

struct cp_bstage {
	int64_t q0, q1;             /* shard rows */
	int64_t kv;                 /* key buffer tokens it reads: a prefix */
	int wait;                   /* messages that must have arrived first */
	double work;                /* the cost model's, in tiles */
	int64_t kv0;                /* where its keys start in the key buffer (0, or the received blocks') */
};

struct cp_brank {
	int *chunk;                 /* [per] global chunk ids, shard order */
	int64_t *blk;               /* [nblk] key blocks received, arrival order */
	int nblk;
	struct cp_bmsg *msg;        /* [nmsg] incoming messages, arrival order */
	int nmsg;
	struct cp_bstage *fwd, *bwd;
	int nfwd, nbwd;
	int bret;                   /* backward: partials go home before stage bret */
	double work;                /* its chunks' cost */
	double area;                /* allowed pairs of its rows, summed over mask heads */
	double sendblk;             /* key blocks it sends in a pass (forward) */
};

struct cp_bplan {
	int world, node_size, per, nchunk;
	int64_t S, C, T;            /* tokens; chunk; tile = key block */
	int *owner;                 /* [nchunk] the rank holding chunk i */
	double *cost;               /* [nchunk] work of the chunk's rows, in tiles */
	struct cp_brank *rank;      /* [world] */
	double imbalance;           /* per-rank area, max/mean */
	double cost_imbalance;      /* per-rank cost, max/mean */
	double kv_bytes;            /* bytes of K and V of one key block (shape's heads_kv, head_dim, dtype) */
	double lead;                /* LONGATTN_BALANCED_LEAD: work of a first piece, in tiles (0: none) */
	int bsplit;                 /* LONGATTN_BALANCED_BSPLIT: backward in two stages, own keys first */
};

/* 0, or -1 with a message (the shape or the world does not fit). */
int  cp_balanced_plan(const struct mask *m, int world, int node_size, const struct attn_shape *s,
                      struct cp_bplan *p, char *err, size_t errlen);
void cp_balanced_free(struct cp_bplan *p);
/* Step s's peer of rank r: the rank it sends to (to = 1) or receives from. */
int  cp_bpeer(const struct cp_bplan *p, int r, int s, int to);

#endif
