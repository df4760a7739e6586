/* Ring attention by all-gather (Llama 3's context parallelism): K/V of
 * every rank gathered, the rank's queries (zigzag pair) against all keys in
 * one kernel call per head group; backward reduce-scatters dK/dV in fp32.
 *
 * Head groups: the KV heads go in G groups so that the gather of group g+1
 * (stream 2) overlaps the attention of group g (stream 0), and only two
 * groups' gathered K/V are ever held.  G = 2 when the KV heads split
 * evenly: the overlap, at the price of packing the group's heads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_impl.h"
#include "util.h"

enum { EV_G0 = 2, EV_G1, EV_U, EV_F, EV_J };

struct rag {
	int G, hqg, hkg;                /* groups, heads per group (the ring, r->R, is the world) */
	size_t nqg, nkg, nlg, nK;       /* elements: per group q-like, own k, lse; gathered k */
	void *gk[2], *gv[2];            /* gathered, [R][b][c][hkg][d] */
	void *kf, *vf;                  /* [b][S][hkg][d] (batch > 1) */
	void *sk, *sv;                  /* own group's K, V packed (G > 1) */
	void *qg, *og, *doutg, *dqg;    /* (G > 1) */
	float *lseg;
	void *dkf, *dkg;                /* full-length dK|dV of a group; own part, dtype */
	float *rss, *rsr;               /* reduce-scatter, [R][2][b][c][hkg][d] and [2][...] */
	struct mask piece;
	void *kst;
};

/* Group g's heads of a [rows][H][d] tensor into [rows][Hg][d], and back. */
static void pick(struct cp_run *r, void *dst, const void *src, int H, int Hg, int g, size_t rows, int s)
{
	size_t d = r->d, es = r->es;

	ops_copy2d(&r->x, dst, Hg * d * es, (const char *)src + (size_t)g * Hg * d * es, H * d * es,
	           Hg * d * es, rows, s);
}

static void put(struct cp_run *r, void *dst, const void *src, int H, int Hg, int g, size_t rows, int s)
{
	size_t d = r->d, es = r->es;

	ops_copy2d(&r->x, (char *)dst + (size_t)g * Hg * d * es, H * d * es, src, Hg * d * es,
	           Hg * d * es, rows, s);
}

static void gather(struct cp_run *r, struct rag *a, int g)
{
	const void *k = r->k, *v = r->v;

	if (a->G > 1) {
		pick(r, a->sk, r->k, r->hkv, a->hkg, g, (size_t)r->b * r->c, 2);
		pick(r, a->sv, r->v, r->hkv, a->hkg, g, (size_t)r->b * r->c, 2);
		k = a->sk;
		v = a->sv;
	}
	if (comm_allgather(r->env->world, k, a->gk[g % 2], a->nkg, r->type, r->x.stream[2]) < 0 ||
	    comm_allgather(r->env->world, v, a->gv[g % 2], a->nkg, r->type, r->x.stream[2]) < 0)
		cp_commfail(r, "all-gather");
	ops_record(&r->x, EV_G0 + g % 2, 2);
}

/* Group g's turn: the gather of group g+1 starts (into the buffer group
 * g-1 used, once done with), and the kernel gets group g's gathered K, V in
 * [b][S][hkg][d], as they came for batch 1. */
static struct attn_io gathered(struct cp_run *r, struct rag *a, int g)
{
	size_t c = r->c, hd = (size_t)a->hkg * r->d * r->es;
	struct attn_io io = { 0 };

	if (g + 1 < a->G) {
		ops_wait(&r->x, 2, EV_U);
		gather(r, a, g + 1);
	}
	ops_wait(&r->x, 0, EV_G0 + g % 2);
	io.stream = r->x.stream[0];
	if (r->b == 1) {
		io.k = a->gk[g % 2];
		io.v = a->gv[g % 2];
		return io;
	}
	for (int i = 0; i < r->R; i++) {
		size_t off = (size_t)i * r->b * c * hd;
		ops_copy2d(&r->x, (char *)a->kf + i * c * hd, r->S * hd, (char *)a->gk[g % 2] + off,
		           c * hd, c * hd, r->b, 0);
		ops_copy2d(&r->x, (char *)a->vf + i * c * hd, r->S * hd, (char *)a->gv[g % 2] + off,
		           c * hd, c * hd, r->b, 0);
	}
	io.k = a->kf;
	io.v = a->vf;
	return io;
}

/* ... and the query side: whole tensors with one group, else group g's
 * heads picked into buffers of their own (o, dout and lse are inputs only
 * to the backward pass). */
static struct attn_io group_io(struct cp_run *r, struct rag *a, int g, int bwd)
{
	struct attn_io io = gathered(r, a, g);
	size_t c = r->c, rows = (size_t)r->b * c;

	io.q = r->q;
	io.o = r->o;
	io.lse = r->lse;
	if (bwd) {
		io.dout = r->dout;
		io.dq = r->dq;
	}
	if (a->G == 1)
		return io;
	pick(r, a->qg, r->q, r->hq, a->hqg, g, rows, 0);
	io.q = a->qg;
	io.o = a->og;
	io.lse = a->lseg;
	if (bwd) {
		pick(r, a->og, r->o, r->hq, a->hqg, g, rows, 0);
		pick(r, a->doutg, r->dout, r->hq, a->hqg, g, rows, 0);
		ops_copy2d(&r->x, a->lseg, a->hqg * c * 4, r->lse + (size_t)g * a->hqg * c,
		           r->hq * c * 4, a->hqg * c * 4, r->b, 0);
		io.dout = a->doutg;
		io.dq = a->dqg;
	}
	return io;
}

static void fork2(struct ops *x)
{
	ops_record(x, EV_F, 0);
	ops_wait(x, 2, EV_F);
}

static void join2(struct ops *x)
{
	ops_record(x, EV_J, 2);
	ops_wait(x, 0, EV_J);
}

static int rag_fwd(struct cp_run *r)
{
	struct rag *a = r->self;
	int rc = 0;

	fork2(&r->x);
	gather(r, a, 0);
	for (int g = 0; g < a->G; g++) {
		struct attn_io io = group_io(r, a, g, 0);
		size_t rows = (size_t)r->b * r->c;

		if (a->kst == NULL) {
			ops_zero(&r->x, io.o, a->nqg * r->es, 0);
			ops_fill(&r->x, io.lse, -INFINITY, a->nlg, 0);
		} else {
			rc |= cp_kern_rc(r, r->env->kern->fwd(a->kst, &io), "forward");
		}
		ops_record(&r->x, EV_U, 0);
		if (a->G > 1) {
			put(r, r->o, a->og, r->hq, a->hqg, g, rows, 0);
			/* lse [b][hq][c]: group g is a block of rows per batch. */
			ops_copy2d(&r->x, r->lse + (size_t)g * a->hqg * r->c, r->hq * r->c * 4, a->lseg,
			           a->hqg * r->c * 4, a->hqg * r->c * 4, r->b, 0);
		}
	}
	join2(&r->x);
	return rc;
}

static int rag_bwd(struct cp_run *r)
{
	struct rag *a = r->self;
	size_t c = r->c, rows = (size_t)r->b * c, seg = c * a->hkg * r->d, nk = a->nkg;
	int rc = 0;

	fork2(&r->x);
	gather(r, a, 0);
	for (int g = 0; g < a->G; g++) {
		struct attn_io io = group_io(r, a, g, 1);

		io.dk = a->dkf;
		io.dv = (char *)a->dkf + a->nK * r->es;
		if (a->kst == NULL) {
			ops_zero(&r->x, io.dq, a->nqg * r->es, 0);
			ops_zero(&r->x, a->dkf, 2 * a->nK * r->es, 0);
		} else {
			rc |= cp_kern_rc(r, r->env->kern->bwd(a->kst, &io), "backward");
		}
		ops_record(&r->x, EV_U, 0);
		if (a->G > 1)
			put(r, r->dq, a->dqg, r->hq, a->hqg, g, rows, 0);
		/* To fp32, blocked by owner rank, then each rank sums its own. */
		ops_zero(&r->x, a->rss, 2 * nk * r->R * sizeof(float), 0);
		for (int i = 0; i < r->R; i++)
			for (int t = 0; t < 2; t++)
				ops_acc2d(&r->x, a->rss + ((size_t)i * 2 + t) * nk, seg,
				          (char *)a->dkf + (t * a->nK + i * seg) * r->es, r->type,
				          r->S * a->hkg * r->d, seg, r->b, 0);
		if (comm_reducescatter(r->env->world, a->rss, a->rsr, 2 * nk, CT_F32, r->x.stream[0]) < 0)
			cp_commfail(r, "reduce-scatter");
		if (a->G == 1) {
			ops_cast(&r->x, r->dk, r->type, a->rsr, 2 * nk, 0);
		} else {
			ops_cast(&r->x, a->dkg, r->type, a->rsr, 2 * nk, 0);
			put(r, r->dk, a->dkg, r->hkv, a->hkg, g, rows, 0);
			put(r, r->dv, (char *)a->dkg + nk * r->es, r->hkv, a->hkg, g, rows, 0);
		}
	}
	join2(&r->x);
	return rc;
}

/* Every member's tokens in member order (the gathered K/V), adjacent
 * ranges merged: kr gets at most 2R of them. */
static int all_keys(int64_t S, int R, int64_t (*kr)[2])
{
	int nk = 0;

	for (int i = 0; i < R; i++) {
		int64_t g[2][2];
		int n = cp_member(S, R, i, g);
		for (int j = 0; j < n; j++) {
			if (nk > 0 && kr[nk - 1][1] == g[j][0]) {
				kr[nk - 1][1] = g[j][1];
			} else {
				kr[nk][0] = g[j][0];
				kr[nk][1] = g[j][1];
				nk++;
			}
		}
	}
	return nk;
}

static int rag_setup(struct cp_run *r)
{
	struct rag *a = r->self;
	int bad = 0, bwd = r->job->pass == PASS_BWD, nk = 0, st;
	int64_t qr[2][2], (*kr)[2] = xcalloc(2 * (size_t)r->R, sizeof *kr);
	size_t es = r->es;
	struct attn_shape ls;

	a->hqg = r->hq / a->G;
	a->hkg = r->hkv / a->G;
	a->nqg = (size_t)r->b * r->c * a->hqg * r->d;
	a->nkg = (size_t)r->b * r->c * a->hkg * r->d;
	a->nlg = (size_t)r->b * a->hqg * r->c;
	a->nK = a->nkg * r->R;
	for (int i = 0; i < 2; i++) {
		a->gk[i] = cp_alloc(r, a->nK * es, &bad);
		a->gv[i] = cp_alloc(r, a->nK * es, &bad);
	}
	if (r->b > 1) {
		a->kf = cp_alloc(r, a->nK * es, &bad);
		a->vf = cp_alloc(r, a->nK * es, &bad);
	}
	if (a->G > 1) {
		a->sk = cp_alloc(r, a->nkg * es, &bad);
		a->sv = cp_alloc(r, a->nkg * es, &bad);
		a->qg = cp_alloc(r, a->nqg * es, &bad);
		a->og = cp_alloc(r, a->nqg * es, &bad);
		a->lseg = cp_alloc(r, a->nlg * sizeof(float), &bad);
	}
	if (bwd) {
		a->dkf = cp_alloc(r, 2 * a->nK * es, &bad);
		a->rss = cp_alloc(r, 2 * a->nK * sizeof(float), &bad);
		a->rsr = cp_alloc(r, 2 * a->nkg * sizeof(float), &bad);
		if (a->G > 1) {
			a->doutg = cp_alloc(r, a->nqg * es, &bad);
			a->dqg = cp_alloc(r, a->nqg * es, &bad);
			a->dkg = cp_alloc(r, 2 * a->nkg * es, &bad);
		}
	}
	if (bad) {
		free(kr);
		cp_fail(r, "out of memory for the gathered K/V");
		return CP_OOM;
	}

	/* Own queries x every rank's keys, in rank order (as gathered). */
	int nq = cp_member(r->S, r->R, comm_rank(r->env->world), qr);
	nk = all_keys(r->S, r->R, kr);
	ls = cp_local_shape(r, r->c, r->S, a->hqg, a->hkg);
	st = cp_plan(r, qr, nq, kr, nk, &ls, &a->piece, &a->kst);
	free(kr);
	if (a->piece.heads > 0)
		r->work = (double)a->piece.area / a->piece.heads * r->hq;
	return st;
}

static void rag_fini(struct cp_run *r)
{
	struct rag *a = r->self;
	void *bufs[] = { a->gk[0], a->gk[1], a->gv[0], a->gv[1], a->kf, a->vf, a->sk, a->sv,
	                 a->qg, a->og, a->doutg, a->dqg, a->lseg, a->dkf, a->dkg, a->rss, a->rsr };

	ops_sync(&r->x);
	if (a->kst)
		r->env->kern->fini(a->kst);
	mask_free(&a->piece);
	cp_free(r, bufs, sizeof bufs / sizeof bufs[0]);
	free(a);
	r->self = NULL;
}

/* What run refuses on N ranks: CP_OK or CP_UNSUPPORTED with why. */
static int refuse(const struct cp_job *job, int N, char *why, size_t n)
{
	const struct attn_shape *s = &job->shape;

	if (N > 1 && s->sq % (2 * (int64_t)N))
		snprintf(why, n, "seqlen %lld is not a multiple of %d", (long long)s->sq, 2 * N);
	else if (s->sq != s->sk || s->sq != job->mask->sq || s->sk != job->mask->sk)
		snprintf(why, n, "shape and mask seqlens differ");
	else
		return CP_OK;
	return CP_UNSUPPORTED;
}

static int groups(const struct cp_job *job)
{
	return job->shape.hkv % 2 == 0 && job->mask->heads == 1 ? 2 : 1;
}

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	int N = comm_size(env->world);
	struct rag *a;

	memset(res, 0, sizeof *res);
	res->ulysses = 1;
	res->ring = N;
	if (refuse(job, N, res->why, sizeof res->why) != CP_OK)
		return res->status = CP_UNSUPPORTED;
	a = xcalloc(1, sizeof *a);
	a->G = groups(job);
	return cp_drive(&(struct cp_run){ .env = env, .job = job, .res = res, .U = 1, .R = N,
	                                  .self = a, .setup = rag_setup, .fwd = rag_fwd,
	                                  .bwd = rag_bwd, .fini = rag_fini });
}

/* The schedule of rag_fwd and rag_bwd: the gather of group 0 alone, then
 * a step per group, the next group's gather under it; backward, each
 * group's reduce-scatter after its attention.  Collective bytes are what
 * a rank sends in NCCL's ring algorithm, (N-1) blocks. */
static int sched(const struct cp_job *job, int N, int ns, struct cp_sched *s)
{
	const struct attn_shape *sh = &job->shape;
	int G = groups(job), bwd = job->pass == PASS_BWD, st, ai, nk = 0;
	double es = 2, b = sh->batch, d = sh->hd, c, nqg, nkg, nlg, nK;
	int64_t qr[2][2], (*kr)[2];

	s->ulysses = 1;
	s->ring = N;
	if ((st = refuse(job, N, s->why, sizeof s->why)) != CP_OK)
		return st;
	if (cps_init(s, N, ns, 1 + G, 1, N) < 0)
		return CP_ERROR;
	c = (double)(sh->sq / N);
	nqg = b * c * (sh->hq / G) * d;
	nkg = b * c * (sh->hkv / G) * d;
	nlg = b * (sh->hq / G) * c;
	nK = nkg * N;
	kr = xcalloc(2 * (size_t)N, sizeof *kr);
	for (int me = 0; me < N; me++) {
		int nq = cp_member(sh->sq, N, me, qr);

		/* rag_setup's ranges: own queries x every rank's keys in rank order */
		nk = all_keys(sh->sq, N, kr);
		if ((ai = cps_attn(s, job->mask, qr, nq, kr, nk, sh->hq / G, sh->hkv / G)) < 0) {
			free(kr);
			return CP_ERROR;
		}
		if (s->attn[ai].m.area == 0)
			ai = -1;
		for (int k = 0; k <= G; k++) {
			struct cp_step *p = cps_at(s, me, k);
			struct cp_xfer *x = k == 0 ? &p->xs : &p->x;

			if (k < G) {
				/* group k's gather: K and V, packed first (G > 1) */
				for (int i = 0; i < N; i++)
					if (i != me)
						cps_xfer(s, x, CPX_GATHER, me, i, 2 * nkg * es);
				x->nops = 2;
				p->mem += G > 1 ? 4 * nkg * es : 0;
				p->nmem += G > 1 ? 2 : 0;
			}
			if (k == 0)
				continue;
			p->attn = ai;
			if (b > 1) {
				p->mem += 4 * nK * es;
				p->nmem += 2 * N;
			}
			if (ai < 0) {
				p->mem += bwd ? nqg * es + 2 * nK * es : nqg * es + nlg * 4;
				p->nmem += 2;
			}
			if (G > 1) {
				p->mem += bwd ? 8 * nqg * es + 2 * nlg * 4 : 4 * nqg * es + 2 * nlg * 4;
				p->nmem += bwd ? 5 : 3;
			}
			if (!bwd)
				continue;
			/* fp32 blocks by owner, the reduce-scatter, the cast */
			p->mem += 2 * nK * 4 + 2 * nK * (es + 8) + 2 * nkg * (4 + es) + (G > 1 ? 4 * nkg * es : 0);
			p->nmem += 1 + 2 * N + 1 + (G > 1 ? 2 : 0);
			for (int i = 0; i < N; i++)
				if (i != me)
					cps_xfer(s, &p->xs, CPX_RSCATTER, me, i, 2 * nkg * 4);
			p->xs.nops = 1;
		}
	}
	free(kr);
	return CP_OK;
}

const struct cp_ops cp_ring_allgather = {
	"ring_allgather", "all-gather K/V in head groups, local attention, reduce-scatter dK/dV", run,
	sched
};
