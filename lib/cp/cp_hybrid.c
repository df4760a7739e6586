/* Ulysses x double ring: the engine behind ulysses, ring_p2p, usp and
 * loongtrain, which differ only in their degrees.
 *
 * U ranks (a node's worth, consecutive world ranks) swap sequence shards
 * for head shards by all-to-all; the R ring members of each head shard then
 * run ring attention over the zigzag layout (cp_impl.h).  The ring is a
 * double ring (LoongTrain): an inner ring over windows of W members, an
 * outer ring of Ro = R/W windows; K/V for the next outer step travel while
 * the inner ring computes.  W = R is the plain ring, R = 1 plain Ulysses.
 *
 * Forward: partial (o, lse) of each visiting K/V merge by LSE into fp32.
 * Backward: dK/dV accumulate in fp32 and travel with their K/V around the
 * inner ring and home; window totals travel the outer ring likewise.
 *
 * Streams: 0 computes and does the all-to-alls, 1 carries the inner ring,
 * 2 the outer ring; events order a buffer's reuse across them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_impl.h"
#include "util.h"

enum { EV_C = 2, EV_I, EV_D, EV_F, EV_J1, EV_J2 };

struct hyb {
	int W, Ro;                      /* U and R are the cp_run's */
	int u, j, wi, wo;
	struct comm *uc, *ic, *oc;
	int hql, hkl, repl;
	int64_t Sl;                     /* tokens per ring member, U*c */
	size_t nql, nkl, nll;           /* elements: q-like, one of K/V, lse */
	int own;                        /* local tensors are ours (U > 1) */
	void *ql, *kvl, *ol, *doutl, *dql, *dkvl;
	float *lsel;
	void *sb, *rb;                  /* all-to-all staging */
	float *ftmp;                    /* replicated KV heads' gradients, summed */
	void *ib[2], *ob[2];            /* inner and outer K/V receive buffers */
	void *otmp, *dqtmp, *dkvtmp;
	float *ltmp, *oacc, *lacc, *dqacc, *di[2], *dob[2];
	struct mask *piece;
	void **kst;
};

/* The first kv head that Ulysses rank i's q heads read. */
static int kvh0(const struct cp_run *r, const struct hyb *h, int i)
{
	return i * h->hql / (r->hq / r->hkv);
}

/* Sequence shards [t][b][c][H][d] -> head shards [t][b][Sl][Hl][d]. */
static void a2a_in(struct cp_run *r, struct hyb *h, const void *x, int H, int Hl, int kv,
                   int nt, void *out)
{
	size_t es = r->es, c = r->c, d = r->d, b = r->b;
	size_t blk = b * c * Hl * d, ns = b * c * H * d, nl = b * h->Sl * Hl * d;

	/* With one sequence, what arrives is already [Sl][Hl][d]: receive in
	 * place, a tensor at a time. */
	if (b == 1 && nt > 1) {
		for (int t = 0; t < nt; t++)
			a2a_in(r, h, (const char *)x + t * ns * es, H, Hl, kv, 1, (char *)out + t * nl * es);
		return;
	}
	for (int i = 0; i < r->U; i++) {
		int h0 = kv ? kvh0(r, h, i) : i * Hl;
		for (int t = 0; t < nt; t++)
			ops_copy2d(&r->x, (char *)h->sb + ((size_t)i * nt + t) * blk * es, Hl * d * es,
			           (const char *)x + (t * ns + h0 * d) * es, H * d * es, Hl * d * es, b * c, 0);
	}
	if (comm_alltoall(h->uc, h->sb, b == 1 ? out : h->rb, nt * blk, r->type, r->x.stream[0]) < 0)
		cp_commfail(r, "all-to-all");
	if (b == 1)
		return;
	for (int j = 0; j < r->U; j++)
		for (int t = 0; t < nt; t++)
			ops_copy2d(&r->x, (char *)out + (t * nl + j * c * Hl * d) * es, h->Sl * Hl * d * es,
			           (const char *)h->rb + ((size_t)j * nt + t) * blk * es, c * Hl * d * es,
			           c * Hl * d * es, b, 0);
}

/* Head shards back to sequence shards; replicated KV heads' gradients
 * (several ranks computed the same head) are summed in fp32. */
static void a2a_out(struct cp_run *r, struct hyb *h, const void *in, int H, int Hl, int kv,
                    int nt, void *out)
{
	size_t es = r->es, c = r->c, d = r->d, b = r->b;
	size_t blk = b * c * Hl * d, ns = b * c * H * d, nl = b * h->Sl * Hl * d;
	const void *sb = in;

	if (b == 1 && nt > 1 && !(kv && h->repl)) {
		for (int t = 0; t < nt; t++)
			a2a_out(r, h, (const char *)in + t * nl * es, H, Hl, kv, 1, (char *)out + t * ns * es);
		return;
	}
	/* One sequence: [Sl][Hl][d] is already in blocks by destination. */
	if (b > 1 || nt > 1) {
		sb = h->sb;
		for (int j = 0; j < r->U; j++)
			for (int t = 0; t < nt; t++)
				ops_copy2d(&r->x, (char *)h->sb + ((size_t)j * nt + t) * blk * es, c * Hl * d * es,
				           (const char *)in + (t * nl + j * c * Hl * d) * es, h->Sl * Hl * d * es,
				           c * Hl * d * es, b, 0);
	}
	if (comm_alltoall(h->uc, sb, h->rb, nt * blk, r->type, r->x.stream[0]) < 0)
		cp_commfail(r, "all-to-all");
	if (kv && h->repl) {
		ops_zero(&r->x, h->ftmp, nt * ns * sizeof(float), 0);
		for (int i = 0; i < r->U; i++)
			for (int t = 0; t < nt; t++)
				ops_acc2d(&r->x, h->ftmp + t * ns + kvh0(r, h, i) * d, H * d,
				          (const char *)h->rb + ((size_t)i * nt + t) * blk * es, r->type,
				          Hl * d, Hl * d, b * c, 0);
		ops_cast(&r->x, out, r->type, h->ftmp, nt * ns, 0);
		return;
	}
	for (int i = 0; i < r->U; i++) {
		int h0 = kv ? kvh0(r, h, i) : i * Hl;
		for (int t = 0; t < nt; t++)
			ops_copy2d(&r->x, (char *)out + (t * ns + h0 * d) * es, H * d * es,
			           (const char *)h->rb + ((size_t)i * nt + t) * blk * es, Hl * d * es,
			           Hl * d * es, b * c, 0);
	}
}

/* lse [b][hql][Sl] -> [b][hq][c]. */
static void lse_out(struct cp_run *r, struct hyb *h)
{
	size_t c = r->c, b = r->b, hl = h->hql, blk = b * hl * c;

	for (int j = 0; j < r->U; j++)
		ops_copy2d(&r->x, (float *)h->sb + j * blk, c * 4, h->lsel + j * c, h->Sl * 4, c * 4, b * hl, 0);
	if (comm_alltoall(h->uc, h->sb, h->rb, blk, CT_F32, r->x.stream[0]) < 0)
		cp_commfail(r, "all-to-all");
	for (int i = 0; i < r->U; i++)
		ops_copy2d(&r->x, r->lse + i * hl * c, r->hq * c * 4, (float *)h->rb + i * blk,
		           hl * c * 4, hl * c * 4, b, 0);
}

/* This member's queries against visiting K/V (V follows K). */
static struct attn_io kv_io(const struct cp_run *r, const struct hyb *h, const void *kv)
{
	struct attn_io io = { 0 };

	io.q = h->ql;
	io.k = (void *)kv;
	io.v = (char *)kv + h->nkl * r->es;
	io.stream = r->x.stream[0];
	return io;
}

static int kfwd(struct cp_run *r, struct hyb *h, int src, const void *kv, void *o, float *lse)
{
	struct attn_io io = kv_io(r, h, kv);

	io.o = o;
	io.lse = lse;
	return cp_kern_rc(r, r->env->kern->fwd(h->kst[src], &io), "forward");
}

static int kbwd(struct cp_run *r, struct hyb *h, int src, const void *kv, void *dq, void *dkv)
{
	struct attn_io io = kv_io(r, h, kv);

	io.o = h->ol;
	io.lse = h->lsel;
	io.dout = h->doutl;
	io.dq = dq;
	io.dk = dkv;
	io.dv = (char *)dkv + h->nkl * r->es;
	return cp_kern_rc(r, r->env->kern->bwd(h->kst[src], &io), "backward");
}

/* Streams 1 and 2 start after what stream 0 did before the pass ... */
static void fork3(struct ops *x)
{
	ops_record(x, EV_F, 0);
	ops_wait(x, 1, EV_F);
	ops_wait(x, 2, EV_F);
}

/* ... and stream 0 ends after them, so the pass's timing covers them. */
static void join3(struct ops *x)
{
	ops_record(x, EV_J1, 1);
	ops_record(x, EV_J2, 2);
	ops_wait(x, 0, EV_J1);
	ops_wait(x, 0, EV_J2);
}

static int src_of(const struct hyb *h, int t, int s)
{
	return (h->wo - t + h->Ro) % h->Ro * h->W + (h->wi - s + h->W) % h->W;
}

static void send_kv(struct cp_run *r, struct comm *c, int n, int me, const void *cur, void *next,
                    int stream, struct comm_req **req)
{
	struct hyb *h = r->self;

	if (comm_isendrecv(c, cur, (me + 1) % n, next, (me - 1 + n) % n, 2 * h->nkl, r->type,
	                   r->x.stream[stream], req) < 0)
		cp_commfail(r, "ring send/receive");
}

static void wait_req(struct cp_run *r, struct comm_req *q)
{
	if (comm_wait(q, r->x.stream[0]) < 0)
		cp_commfail(r, "ring wait");
}

/* Inner step s passes the K/V it reads on to the next member while it
 * computes (the window's last step has none to pass) ... */
static struct comm_req *inner_send(struct cp_run *r, struct hyb *h, int s, const void *cur)
{
	struct comm_req *q = NULL;

	if (s < h->W - 1) {
		ops_wait(&r->x, 1, EV_C);
		send_kv(r, h->ic, h->W, h->wi, cur, h->ib[s % 2], 1, &q);
	}
	return q;
}

/* ... and once it has computed, the next step reads what came. */
static void *inner_next(struct cp_run *r, struct hyb *h, int s, struct comm_req *q, void *cur)
{
	ops_record(&r->x, EV_C, 0);
	if (q == NULL)
		return cur;
	wait_req(r, q);
	return h->ib[s % 2];
}

/* The same for outer step t, around a whole inner ring. */
static struct comm_req *outer_send(struct cp_run *r, struct hyb *h, int t, const void *cur)
{
	struct comm_req *q = NULL;

	if (t < h->Ro - 1)
		send_kv(r, h->oc, h->Ro, h->wo, cur, h->ob[t % 2], 2, &q);
	return q;
}

/* After the outer K/V have arrived: every stream may use them, and the
 * outer stream may overwrite what this step read. */
static void *outer_next(struct cp_run *r, struct hyb *h, int t, struct comm_req *q, void *cur)
{
	struct ops *x = &r->x;

	ops_record(x, EV_I, 1);
	if (q == NULL)
		return cur;
	wait_req(r, q);
	ops_record(x, EV_C, 0);
	ops_wait(x, 1, EV_C);
	ops_wait(x, 2, EV_C);
	ops_wait(x, 2, EV_I);
	return h->ob[t % 2];
}

static int ring_fwd(struct cp_run *r, struct hyb *h)
{
	struct ops *x = &r->x;
	void *ocur = h->kvl;
	int rc = 0;

	if (r->R == 1) {
		if (h->kst[0])
			return kfwd(r, h, 0, h->kvl, h->ol, h->lsel);
		ops_zero(x, h->ol, h->nql * r->es, 0);
		ops_fill(x, h->lsel, -INFINITY, h->nll, 0);
		return 0;
	}
	fork3(x);
	ops_zero(x, h->oacc, h->nql * sizeof(float), 0);
	ops_fill(x, h->lacc, -INFINITY, h->nll, 0);
	for (int t = 0; t < h->Ro; t++) {
		struct comm_req *oreq = outer_send(r, h, t, ocur);
		void *icur = ocur;

		for (int s = 0; s < h->W; s++) {
			struct comm_req *ireq = inner_send(r, h, s, icur);
			int src = src_of(h, t, s);

			if (h->kst[src]) {
				rc |= kfwd(r, h, src, icur, h->otmp, h->ltmp);
				ops_merge(x, h->oacc, h->lacc, h->otmp, h->ltmp, r->type, r->b, h->Sl,
				          h->hql, r->d, 0);
			}
			icur = inner_next(r, h, s, ireq, icur);
		}
		ocur = outer_next(r, h, t, oreq, ocur);
	}
	ops_cast(x, h->ol, r->type, h->oacc, h->nql, 0);
	ops_copy(x, h->lsel, h->lacc, h->nll * sizeof(float), 0);
	join3(x);
	return rc;
}

static int ring_bwd(struct cp_run *r, struct hyb *h)
{
	struct ops *x = &r->x;
	size_t n2 = 2 * h->nkl;
	void *ocur = h->kvl;
	float *dtot = NULL;
	struct comm_req *doreq = NULL;
	int rc = 0;

	if (r->R == 1) {
		if (h->kst[0])
			return kbwd(r, h, 0, h->kvl, h->dql, h->dkvl);
		ops_zero(x, h->dql, h->nql * r->es, 0);
		ops_zero(x, h->dkvl, n2 * r->es, 0);
		return 0;
	}
	fork3(x);
	ops_zero(x, h->dqacc, h->nql * sizeof(float), 0);
	for (int t = 0; t < h->Ro; t++) {
		struct comm_req *oreq = outer_send(r, h, t, ocur), *dreq = NULL;
		void *icur = ocur;
		int dc = 0;
		float *dcur = h->di[0];

		ops_zero(x, dcur, n2 * sizeof(float), 0);
		for (int s = 0; s < h->W; s++) {
			struct comm_req *ireq = inner_send(r, h, s, icur);
			int src = src_of(h, t, s);

			if (h->kst[src]) {
				rc |= kbwd(r, h, src, icur, h->dqtmp, h->dkvtmp);
				ops_acc2d(x, h->dqacc, 0, h->dqtmp, r->type, 0, h->nql, 1, 0);
			}
			/* The dK/dV of these K/V, from the ring neighbour. */
			if (dreq) {
				wait_req(r, dreq);
				dreq = NULL;
			}
			if (h->kst[src])
				ops_acc2d(x, dcur, 0, h->dkvtmp, r->type, 0, n2, 1, 0);
			if (h->W > 1) {
				ops_record(x, EV_D, 0);
				ops_wait(x, 1, EV_D);
				if (comm_isendrecv(h->ic, dcur, (h->wi + 1) % h->W, h->di[dc ^ 1],
				                   (h->wi - 1 + h->W) % h->W, n2, CT_F32, x->stream[1], &dreq) < 0)
					cp_commfail(r, "ring send/receive");
				dc ^= 1;
				dcur = h->di[dc];
			}
			icur = inner_next(r, h, s, ireq, icur);
		}
		if (dreq)
			wait_req(r, dreq);
		/* dcur: this window's part of the gradient of outer K/V t. */
		if (h->Ro > 1) {
			float *T = h->dob[t % 2];
			if (t == 0) {
				ops_copy(x, T, dcur, n2 * sizeof(float), 0);
			} else {
				wait_req(r, doreq);
				ops_acc2d(x, T, 0, dcur, CT_F32, 0, n2, 1, 0);
			}
			ops_record(x, EV_D, 0);
			ops_wait(x, 2, EV_D);
			if (comm_isendrecv(h->oc, T, (h->wo + 1) % h->Ro, h->dob[(t + 1) % 2],
			                   (h->wo - 1 + h->Ro) % h->Ro, n2, CT_F32, x->stream[2], &doreq) < 0)
				cp_commfail(r, "ring send/receive");
			dtot = h->dob[(t + 1) % 2];
		} else {
			dtot = dcur;
		}
		ocur = outer_next(r, h, t, oreq, ocur);
	}
	if (doreq)
		wait_req(r, doreq);
	ops_cast(x, h->dkvl, r->type, dtot, n2, 0);
	ops_cast(x, h->dql, r->type, h->dqacc, h->nql, 0);
	join3(x);
	return rc;
}

static int hyb_fwd(struct cp_run *r)
{
	struct hyb *h = r->self;
	int rc;

	if (h->own) {
		a2a_in(r, h, r->q, r->hq, h->hql, 0, 1, h->ql);
		a2a_in(r, h, r->k, r->hkv, h->hkl, 1, 2, h->kvl);
	}
	rc = ring_fwd(r, h);
	if (h->own) {
		a2a_out(r, h, h->ol, r->hq, h->hql, 0, 1, r->o);
		lse_out(r, h);
	}
	return rc;
}

static int hyb_bwd(struct cp_run *r)
{
	struct hyb *h = r->self;
	int rc;

	if (h->own)
		a2a_in(r, h, r->dout, r->hq, h->hql, 0, 1, h->doutl);
	rc = ring_bwd(r, h);
	if (h->own) {
		a2a_out(r, h, h->dql, r->hq, h->hql, 0, 1, r->dq);
		a2a_out(r, h, h->dkvl, r->hkv, h->hkl, 1, 2, r->dk);
	}
	return rc;
}

static int hyb_setup(struct cp_run *r)
{
	struct hyb *h = r->self;
	struct comm *w = r->env->world;
	int me = comm_rank(w), bad = 0, bwd = r->job->pass == PASS_BWD;
	size_t es = r->es, big;
	struct attn_shape ls;

	h->j = me / r->U;
	h->u = me % r->U;
	h->wo = h->j / h->W;
	h->wi = h->j % h->W;
	/* Ulysses groups are consecutive ranks (one node); inner windows are
	 * consecutive ring members, hence as close as the ranks allow. */
	if (r->U > 1 && comm_split(w, h->j, h->u, &h->uc) < 0)
		cp_commfail(r, "split (ulysses)");
	if (h->W > 1 && comm_split(w, h->u * h->Ro + h->wo, h->wi, &h->ic) < 0)
		cp_commfail(r, "split (inner ring)");
	if (h->Ro > 1 && comm_split(w, h->u * h->W + h->wi, h->wo, &h->oc) < 0)
		cp_commfail(r, "split (outer ring)");

	h->hql = r->hq / r->U;
	h->repl = r->hkv < r->U;
	h->hkl = h->repl ? 1 : r->hkv / r->U;
	h->Sl = r->c * r->U;
	h->nql = (size_t)r->b * h->Sl * h->hql * r->d;
	h->nkl = (size_t)r->b * h->Sl * h->hkl * r->d;
	h->nll = (size_t)r->b * h->hql * h->Sl;
	h->own = r->U > 1;
	if (h->own) {
		h->ql = cp_alloc(r, h->nql * es, &bad);
		h->kvl = cp_alloc(r, 2 * h->nkl * es, &bad);
		h->ol = cp_alloc(r, h->nql * es, &bad);
		h->lsel = cp_alloc(r, h->nll * sizeof(float), &bad);
		big = (size_t)r->b * r->c * r->hq * r->d * es;
		if (2 * (size_t)r->U * r->b * r->c * h->hkl * r->d * es > big)
			big = 2 * (size_t)r->U * r->b * r->c * h->hkl * r->d * es;
		h->sb = cp_alloc(r, big, &bad);
		h->rb = cp_alloc(r, big, &bad);
		if (bwd) {
			h->doutl = cp_alloc(r, h->nql * es, &bad);
			h->dql = cp_alloc(r, h->nql * es, &bad);
			h->dkvl = cp_alloc(r, 2 * h->nkl * es, &bad);
			if (h->repl)
				h->ftmp = cp_alloc(r, 2 * (size_t)r->b * r->c * r->hkv * r->d * sizeof(float), &bad);
		}
	} else {
		h->ql = r->q;
		h->kvl = r->k;
		h->ol = r->o;
		h->lsel = r->lse;
		h->doutl = r->dout;
		h->dql = r->dq;
		h->dkvl = r->dk;
	}
	if (r->R > 1) {
		for (int i = 0; i < 2; i++) {
			if (h->W > 1)
				h->ib[i] = cp_alloc(r, 2 * h->nkl * es, &bad);
			if (h->Ro > 1)
				h->ob[i] = cp_alloc(r, 2 * h->nkl * es, &bad);
		}
		h->otmp = cp_alloc(r, h->nql * es, &bad);
		h->ltmp = cp_alloc(r, h->nll * sizeof(float), &bad);
		h->oacc = cp_alloc(r, h->nql * sizeof(float), &bad);
		h->lacc = cp_alloc(r, h->nll * sizeof(float), &bad);
		if (bwd) {
			h->dqtmp = cp_alloc(r, h->nql * es, &bad);
			h->dkvtmp = cp_alloc(r, 2 * h->nkl * es, &bad);
			h->dqacc = cp_alloc(r, h->nql * sizeof(float), &bad);
			for (int i = 0; i < 2; i++) {
				if (i == 0 || h->W > 1)
					h->di[i] = cp_alloc(r, 2 * h->nkl * sizeof(float), &bad);
				if (h->Ro > 1)
					h->dob[i] = cp_alloc(r, 2 * h->nkl * sizeof(float), &bad);
			}
		}
	}
	if (bad) {
		cp_fail(r, "out of memory for %s buffers", r->R > 1 ? "ring" : "all-to-all");
		return CP_OOM;
	}

	/* One piece of the mask, and one kernel plan, per visiting member:
	 * this member's queries x its keys, both zigzag pairs. */
	h->piece = xcalloc(r->R, sizeof *h->piece);
	h->kst = xcalloc(r->R, sizeof *h->kst);
	ls = cp_local_shape(r, h->Sl, h->Sl, h->hql, h->hkl);
	for (int src = 0; src < r->R; src++) {
		int64_t qr[2][2], kr[2][2];
		int nq = cp_member(r->S, r->R, h->j, qr), nk = cp_member(r->S, r->R, src, kr);
		int st = cp_plan(r, qr, nq, kr, nk, &ls, &h->piece[src], &h->kst[src]);

		if (st != CP_OK)
			return st;
		r->work += (double)h->piece[src].area / h->piece[src].heads * h->hql;
	}
	return CP_OK;
}

static void hyb_fini(struct cp_run *r)
{
	struct hyb *h = r->self;
	void *bufs[] = { h->sb, h->rb, h->ftmp, h->ib[0], h->ib[1], h->ob[0], h->ob[1],
	                 h->otmp, h->dqtmp, h->dkvtmp, h->ltmp, h->oacc, h->lacc, h->dqacc,
	                 h->di[0], h->di[1], h->dob[0], h->dob[1] };

	ops_sync(&r->x);
	for (int i = 0; h->kst && i < r->R; i++)
		if (h->kst[i])
			r->env->kern->fini(h->kst[i]);
	for (int i = 0; h->piece && i < r->R; i++)
		mask_free(&h->piece[i]);
	free(h->kst);
	free(h->piece);
	/* Without Ulysses the local tensors are cp_drive's shards. */
	if (h->own)
		cp_free(r, (void *[]){ h->ql, h->kvl, h->ol, h->lsel, h->doutl, h->dql, h->dkvl }, 7);
	cp_free(r, bufs, sizeof bufs / sizeof bufs[0]);
	if (h->uc)
		comm_free(h->uc);
	if (h->ic)
		comm_free(h->ic);
	if (h->oc)
		comm_free(h->oc);
	free(h);
	r->self = NULL;
}

/* The jobs the hybrid cannot run on w ranks: CP_OK, or CP_UNSUPPORTED with
 * why.  run and sched both ask it. */
static int refuse(const struct cp_job *job, int w, int U, int R, int W, char *why, size_t n)
{
	const struct attn_shape *s = &job->shape;
	int64_t S = s->sq;

	if (U < 1 || R < 1 || U * R != w)
		snprintf(why, n, "ulysses %d x ring %d is not the world size %d", U, R, w);
	else if (W < 1 || R % W)
		snprintf(why, n, "window %d does not divide the ring %d", W, R);
	else if (s->hq % U)
		snprintf(why, n, "%d query heads do not split over ulysses %d", s->hq, U);
	else if (s->hkv % U && U % s->hkv)
		snprintf(why, n, "%d kv heads neither split over nor divide ulysses %d", s->hkv, U);
	else if (R > 1 ? S % (2 * (int64_t)R * U) : S % U)
		snprintf(why, n, "seqlen %lld is not a multiple of %lld",
		         (long long)S, (long long)(R > 1 ? 2 * R * U : U));
	else if (job->mask->heads > 1 && U > 1)
		snprintf(why, n, "per-head masks with ulysses > 1");
	else if (s->sq != s->sk || s->sq != job->mask->sq || s->sk != job->mask->sk)
		snprintf(why, n, "shape and mask seqlens differ");
	else
		return CP_OK;
	return CP_UNSUPPORTED;
}

int cp_hybrid(const struct cp_env *env, const struct cp_job *job, struct cp_result *res,
              int U, int R, int W)
{
	struct hyb *h;

	memset(res, 0, sizeof *res);
	res->ulysses = U;
	res->ring = R;
	if (refuse(job, comm_size(env->world), U, R, W, res->why, sizeof res->why) != CP_OK)
		return res->status = CP_UNSUPPORTED;

	h = xcalloc(1, sizeof *h);
	h->W = W;
	h->Ro = R / W;
	return cp_drive(&(struct cp_run){ .env = env, .job = job, .res = res, .U = U, .R = R,
	                                  .self = h, .setup = hyb_setup, .fwd = hyb_fwd,
	                                  .bwd = hyb_bwd, .fini = hyb_fini });
}

/* ---- the schedule (cpbench --predict): the steps above, in their order ---- */

struct hs {
	struct cp_sched *s;
	const struct cp_job *job;
	int U, R, W, Ro, *ai;
	double es, b, c, d, nql, nkl, nll, nqs;
	int hql, hkl, repl;
};

/* Ulysses rank u of ring member m. */
static int hrank(const struct hs *z, int m, int u)
{
	return m * z->U + u;
}

/* One all-to-all of rank me's Ulysses group: blk bytes to each other member. */
static void hs_a2a(const struct hs *z, struct cp_xfer *x, int me, double blk)
{
	int j = me / z->U;

	for (int i = 0; i < z->U; i++)
		if (hrank(z, j, i) != me)
			cps_xfer(z->s, x, CPX_A2A, me, hrank(z, j, i), blk);
	x->group = j;
	x->nops++;
}

/* A ring send of bytes from member j to member to (receiving from member
 * from), Ulysses rank u. */
static void hs_p2p(const struct hs *z, struct cp_xfer *x, int u, int j, int to, int from, double bytes)
{
	cps_xfer(z->s, x, CPX_P2P, hrank(z, j, u), hrank(z, to, u), bytes);
	x->to = hrank(z, to, u);
	x->from = hrank(z, from, u);
	x->nops++;
}

/* The piece of member j's queries x member src's keys (setup's kst[src]):
 * its index, -1 when empty (no kernel runs), -2 on failure. */
static int hs_attn(struct hs *z, int j, int src)
{
	int *a = &z->ai[j * z->R + src];

	if (*a == -3) {
		int64_t qr[2][2], kr[2][2];
		int nq = cp_member(z->job->shape.sq, z->R, j, qr);
		int nk = cp_member(z->job->shape.sq, z->R, src, kr);

		*a = cps_attn(z->s, z->job->mask, qr, nq, kr, nk, z->hql, z->hkl);
		if (*a < 0)
			*a = -2;
		else if (z->s->attn[*a].m.area == 0)
			*a = -1;
	}
	return *a;
}

/* a2a_in of nt tensors of H heads per token, Hl per rank after. */
static void hs_in(const struct hs *z, struct cp_step *p, int me, int Hl, int nt)
{
	double blk = z->b * z->c * Hl * z->d * z->es;

	for (int t = 0; t < nt; t++) {
		hs_a2a(z, &p->xs, me, blk);
		p->mem += 2 * blk * z->U * (z->b > 1 ? 2 : 1);
		p->nmem += z->U * (z->b > 1 ? 2 : 1);
	}
}

/* a2a_out of head shards back: nt tensors (kv: the K|V pair). */
static void hs_out(const struct hs *z, struct cp_step *p, int me, int Hl, int nt, int kv)
{
	double blk = z->b * z->c * Hl * z->d * z->es, ns = z->b * z->c * z->job->shape.hkv * z->d;

	if (z->b == 1 && nt > 1 && !(kv && z->repl)) {
		for (int t = 0; t < nt; t++)
			hs_out(z, p, me, Hl, 1, kv);
		return;
	}
	hs_a2a(z, &p->xs, me, nt * blk);
	if (z->b > 1 || nt > 1) {
		p->mem += 2 * nt * blk * z->U;
		p->nmem += nt * z->U;
	}
	if (kv && z->repl) {
		p->mem += nt * ns * 4 + nt * blk * z->U / z->es * (z->es + 8) + nt * ns * (4 + z->es);
		p->nmem += 2 + nt * z->U;
	} else {
		p->mem += 2 * nt * blk * z->U;
		p->nmem += nt * z->U;
	}
}

static int hs_ring(struct hs *z, int me, int k0)
{
	struct cp_sched *s = z->s;
	int j = me / z->U, u = me % z->U, W = z->W, Ro = z->Ro, wo = j / W, wi = j % W;
	int bwd = z->job->pass == PASS_BWD, k = k0;
	int in = wo * W + (wi + 1) % W, ip = wo * W + (wi - 1 + W) % W;
	int on = (wo + 1) % Ro * W + wi, op = (wo - 1 + Ro) % Ro * W + wi;
	double es = z->es, nql = z->nql, nll = z->nll, kv = 2 * z->nkl * es, n2 = 2 * z->nkl;

	if (z->R == 1) {
		struct cp_step *p = cps_at(s, me, k++);
		if ((p->attn = hs_attn(z, j, 0)) == -2)
			return -1;
		if (p->attn < 0) {
			p->mem = bwd ? nql * es + n2 * es : nql * es + nll * 4;
			p->nmem = 2;
		}
		return k;
	}
	for (int t = 0; t < Ro; t++) {
		for (int sx = 0; sx < W; sx++) {
			struct cp_step *p = cps_at(s, me, k++);
			/* src_of */
			int src = (wo - t + Ro) % Ro * W + (wi - sx + W) % W;

			if ((p->attn = hs_attn(z, j, src)) == -2)
				return -1;
			if (t == 0 && sx == 0) {
				p->mem += bwd ? nql * 4 : nql * 4 + nll * 4;
				p->nmem += bwd ? 1 : 2;
			}
			if (bwd && sx == 0) {
				p->mem += n2 * 4;
				p->nmem++;
			}
			if (p->attn >= 0) {
				p->mem += bwd ? nql * (es + 8) + n2 * (es + 8) : nql * (8 + es) + nll * 16;
				p->nmem += bwd ? 2 : 1;
			}
			if (sx < W - 1)
				hs_p2p(z, &p->x, u, j, in, ip, kv);
			if (bwd && sx > 0)
				hs_p2p(z, &p->x, u, j, in, ip, n2 * 4);
			if (sx == 0 && t < Ro - 1)
				hs_p2p(z, &p->x2, u, j, on, op, kv);
			if (bwd && sx == 0 && t > 0)
				hs_p2p(z, &p->x2, u, j, on, op, n2 * 4);
			p->join2 = sx == W - 1 && Ro > 1 && !(bwd && W > 1);
			if (bwd && W == 1 && Ro > 1) {
				p->mem += t == 0 ? n2 * 8 : n2 * 12;
				p->nmem++;
			}
		}
		if (bwd && W > 1) {
			/* the last step's dK/dV, waited after the inner ring */
			struct cp_step *p = cps_at(s, me, k++);
			hs_p2p(z, &p->xs, u, j, in, ip, n2 * 4);
			p->join2 = Ro > 1;
			if (Ro > 1) {
				p->mem = t == 0 ? n2 * 8 : n2 * 12;
				p->nmem = 1;
			}
		}
	}
	{
		struct cp_step *p = cps_at(s, me, k++);
		if (bwd && Ro > 1)
			hs_p2p(z, &p->xs, u, j, on, op, n2 * 4);
		p->mem = bwd ? n2 * (4 + es) + nql * (4 + es) : nql * (4 + es) + nll * 8;
		p->nmem = 2;
	}
	return k;
}

int cp_hybrid_sched(const struct cp_job *job, int w, int ns, int U, int R, int W, struct cp_sched *s)
{
	const struct attn_shape *sh = &job->shape;
	int bwd = job->pass == PASS_BWD, own = U > 1, st, nring, rc = CP_OK;
	struct hs z = { .s = s, .job = job, .U = U, .R = R, .W = W, .es = 2 };

	s->ulysses = U;
	s->ring = R;
	if ((st = refuse(job, w, U, R, W, s->why, sizeof s->why)) != CP_OK)
		return st;
	z.Ro = R / W;
	z.b = sh->batch;
	z.d = sh->hd;
	z.c = (double)(sh->sq / ((int64_t)R * U));
	z.hql = sh->hq / U;
	z.repl = sh->hkv < U;
	z.hkl = z.repl ? 1 : sh->hkv / U;
	z.nql = z.b * z.c * U * z.hql * z.d;
	z.nkl = z.b * z.c * U * z.hkl * z.d;
	z.nll = z.b * z.hql * z.c * U;
	z.nqs = z.b * z.c * sh->hq * z.d;
	nring = R == 1 ? 1 : bwd ? z.Ro * (W + (W > 1)) + 1 : z.Ro * W + 1;
	if (cps_init(s, w, ns, nring + 2 * own, U, R) < 0)
		return CP_ERROR;
	z.ai = xmalloc((size_t)R * R * sizeof *z.ai);
	for (int i = 0; i < R * R; i++)
		z.ai[i] = -3;
	for (int me = 0; me < w && rc == CP_OK; me++) {
		int k = 0;

		if (own) {
			struct cp_step *p = cps_at(s, me, k++);
			if (bwd) {
				hs_in(&z, p, me, z.hql, 1);
			} else {
				hs_in(&z, p, me, z.hql, 1);
				hs_in(&z, p, me, z.hkl, 2);
			}
		}
		if ((k = hs_ring(&z, me, k)) < 0) {
			rc = CP_ERROR;
			break;
		}
		if (own) {
			struct cp_step *p = cps_at(s, me, k++);
			hs_out(&z, p, me, z.hql, 1, 0);
			if (bwd) {
				hs_out(&z, p, me, z.hkl, 2, 1);
			} else {
				/* lse_out: floats, packed and unpacked */
				double blk = z.b * z.hql * z.c * 4;
				hs_a2a(&z, &p->xs, me, blk);
				p->mem += 4 * blk * U;
				p->nmem += 2 * U;
			}
		}
	}
	free(z.ai);
	return rc;
}
