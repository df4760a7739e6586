/* balanced: the sequence in chunks, the chunks dealt to ranks by the work
 * their rows do under the mask at hand (not by their tokens), only the key
 * blocks each rank's rows read moved (inside a node first), and every row
 * computed once, in stages that start as their keys arrive, so that no
 * partial output is ever merged.  The plan (cp_impl.h) is a pure function
 * of the mask, the world, the node size and the shape.
 *
 * Work is counted as the kernel sees it: tiles of T x T visited (a partial
 * tile costs what a full one does) plus ROWCOST per row of tiles (loading
 * Q, the epilogue), so a diagonal or a short document is not credited with
 * half a tile.  Chunks go to nodes and then to ranks in two ways: by
 * longest work first, ties (within TOL of the lightest) to the bin whose
 * chunks read or are read by the chunk most; or as runs of neighbours.
 * Either way swaps follow while the heaviest bin gets lighter.  Of the
 * chunk counts and deals that balance within IMBTOL of the best, the one
 * with the least estimated time (work, and received blocks at alpha tiles
 * each) wins.  The backward pass is one stage; see stages().
 *
 * Streams: 0 computes; the comm layer's side stream carries the exchanges
 * of the world communicator, which comm_wait orders before the stages that
 * read them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_impl.h"
#include "ipc.h"
#include "plan.h"
#include "util.h"

enum {
	MAXPER = 64,         /* chunks per rank tried: 1, 2, 4 ... */
	MAXCHUNK = 1024,     /* chunks in all */
	MAXMSG = 3,          /* messages a step's blocks are cut into, about */
	MAXRUN = 4,          /* stages of a forward pass, at most */
	MAXTILE = 16384,     /* tiles in the sequence */
};
#define ROWCOST 0.5      /* a row of tiles' fixed cost, in tiles */
#define TOL 0.02         /* of the mean bin load: ties for affinity */
#define IMBTOL 0.05      /* a chunking within this of the best balance may win on traffic */
#define RUNMIN 16        /* a stage carries at least 1/RUNMIN of the rank's work */
/* For the choice of chunk size only: flop/s of the local kernel and bytes/s
 * of a link inside and across nodes (H200: about 400 TFLOP/s, NVLink
 * 350 GB/s, 50 GB/s of InfiniBand per GPU) */
#define RATE 400e12
#define LINK 350e9
#define XLINK 50e9

/* ---- bitsets of tiles ------------------------------------------------------ */

static int bget(const uint64_t *b, int64_t i)
{
	return b[i >> 6] >> (i & 63) & 1;
}

static void bset(uint64_t *b, int64_t i)
{
	b[i >> 6] |= (uint64_t)1 << (i & 63);
}

/* Set bits of b in [lo, hi). */
static int bcount(const uint64_t *b, int64_t lo, int64_t hi)
{
	int n = 0;

	while (lo < hi && (lo & 63))
		n += bget(b, lo++);
	for (; lo + 64 <= hi; lo += 64)
		n += __builtin_popcountll(b[lo >> 6]);
	while (lo < hi)
		n += bget(b, lo++);
	return n;
}

/* ---- the plan -------------------------------------------------------------- */

struct pctx {
	const struct mask *m;
	int W, G;
	int64_t S, T, nt;     /* tokens, tile, tiles */
	int nw;               /* words of a bitset of nt */
	double *tcost;        /* [nt] work of row of tiles qt */
	uint64_t *need;       /* [nt][nw] key tiles that row reads (any mask head) */
	/* one candidate chunking */
	int per, n;
	int64_t C, bpc;       /* chunk tokens, tiles per chunk */
	double *ccost;        /* [n] */
	uint64_t *cneed;      /* [n][nw] key tiles chunk i's rows read */
	int *tr;              /* [n][n] key tiles of chunk j that chunk i's rows read */
	int *owner;           /* [n] */
	double alpha[2];      /* a key block's transfer in tiles of work: inside, across nodes */
	double imb;           /* assign's cost max/mean */
	int runs;             /* deal: in runs of neighbours (1) or longest first (0) */
};

int cp_bpeer(const struct cp_bplan *p, int r, int s, int to)
{
	int G = p->node_size, N = p->world / G, nd = r / G, l = r % G, u, t;

	/* Steps 0 .. G-2 shift inside the node; then, node shift u = 1 ..
	 * N-1, local shifts t = 0 .. G-1.  Sending to (nd+u, l+t) and
	 * receiving from (nd-u, l-t) pairs every sender with its receiver
	 * at the same step. */
	if (s < G - 1) {
		u = 0;
		t = s + 1;
	} else {
		u = 1 + (s - (G - 1)) / G;
		t = (s - (G - 1)) % G;
	}
	if (to)
		return (nd + u) % N * G + (l + t) % G;
	return (nd - u + N) % N * G + (l - t + G) % G;
}

static int tiles(struct pctx *x, char *err, size_t errlen)
{
	struct plan pl;

	if (plan_build(&pl, x->m, (int)x->T, (int)x->T, err, errlen) != 0)
		return -1;
	x->tcost = xcalloc(x->nt, sizeof *x->tcost);
	x->need = xcalloc((size_t)x->nt * x->nw, sizeof *x->need);
	for (int32_t rr = 0; rr < pl.nrows; rr++) {
		int64_t qt = rr % pl.nqt;
		uint64_t *nd = x->need + qt * x->nw;

		if (pl.row[rr + 1] > pl.row[rr])
			x->tcost[qt] += ROWCOST;
		for (int32_t e = pl.row[rr]; e < pl.row[rr + 1]; e++) {
			const struct plan_ent *en = &pl.ent[e];
			x->tcost[qt] += en->ncut ? 1 : en->t1 - en->t0;
			for (int32_t t = en->t0; t < en->t1; t++)
				bset(nd, t);
		}
	}
	plan_free(&pl);
	return 0;
}

static void chunking(struct pctx *x, int per)
{
	uint64_t *cn;

	x->per = per;
	x->n = x->W * per;
	x->C = x->S / x->n;
	x->bpc = x->C / x->T;
	x->ccost = xcalloc(x->n, sizeof *x->ccost);
	x->tr = xcalloc((size_t)x->n * x->n, sizeof *x->tr);
	x->owner = xcalloc(x->n, sizeof *x->owner);
	x->cneed = xcalloc((size_t)x->n * x->nw, sizeof *x->cneed);
	for (int i = 0; i < x->n; i++) {
		cn = x->cneed + (size_t)i * x->nw;
		for (int64_t qt = i * x->bpc; qt < (i + 1) * x->bpc; qt++) {
			x->ccost[i] += x->tcost[qt];
			for (int w = 0; w < x->nw; w++)
				cn[w] |= x->need[qt * x->nw + w];
		}
		for (int j = 0; j < x->n; j++)
			x->tr[(size_t)i * x->n + j] = bcount(cn, j * x->bpc, (j + 1) * x->bpc);
	}
}

static void unchunk(struct pctx *x)
{
	free(x->ccost);
	free(x->cneed);
	free(x->tr);
	free(x->owner);
	x->ccost = NULL;
	x->cneed = NULL;
	x->tr = NULL;
	x->owner = NULL;
}

static const double *bycost_c;

static int bycost(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;

	if (bycost_c[i] != bycost_c[j])
		return bycost_c[i] > bycost_c[j] ? -1 : 1;
	return i - j;
}

/* Chunks it[0..ni) into nb bins of cap chunks each; bin[k] gets the bin
 * of it[k].  x->runs: the bins start as runs of neighbours in it's
 * order, and swaps alone balance them; else longest first, ties to
 * affinity.  Where chunks cost about alike, longest first alternates
 * (each fills a bin past the tie's tolerance), so every chunk reads its
 * neighbours from another rank; runs keep them home. */
static void deal(const struct pctx *x, const int *it, int ni, int nb, int cap, int *bin)
{
	int *ord = xmalloc(ni * sizeof *ord), *cnt = xcalloc(nb, sizeof *cnt);
	double *load = xcalloc(nb, sizeof *load), *aff = xcalloc((size_t)ni * nb, sizeof *aff);
	double tot = 0;
	int n = x->n;

	for (int k = 0; k < ni; k++) {
		ord[k] = k;
		tot += x->ccost[it[k]];
	}
	/* qsort's comparison sees positions; costs by position */
	{
		double *c = xmalloc(ni * sizeof *c);
		for (int k = 0; k < ni; k++)
			c[k] = x->ccost[it[k]];
		bycost_c = c;
		qsort(ord, ni, sizeof *ord, bycost);
		free(c);
	}
	for (int o = 0; o < ni && x->runs; o++) {
		bin[o] = o / cap;
		cnt[o / cap]++;
		load[o / cap] += x->ccost[it[o]];
	}
	for (int o = 0; o < ni && !x->runs; o++) {
		int k = ord[o], best = -1;
		double lo = INFINITY;

		for (int b = 0; b < nb; b++)
			if (cnt[b] < cap && load[b] < lo)
				lo = load[b];
		for (int b = 0; b < nb; b++) {
			if (cnt[b] >= cap || load[b] > lo + TOL * tot / nb)
				continue;
			if (best < 0 || aff[(size_t)k * nb + b] > aff[(size_t)k * nb + best] ||
			    (aff[(size_t)k * nb + b] == aff[(size_t)k * nb + best] && load[b] < load[best]))
				best = b;
		}
		bin[k] = best;
		cnt[best]++;
		load[best] += x->ccost[it[k]];
		for (int j = 0; j < ni; j++)
			aff[(size_t)j * nb + best] += x->tr[(size_t)it[j] * n + it[k]] +
			                              x->tr[(size_t)it[k] * n + it[j]];
	}
	/* Swaps that make the heaviest bin lighter without another passing it */
	for (int iter = 0; iter < 8 * ni; iter++) {
		int hb = 0, bi = -1, bj = -1;
		double bestmax;

		for (int b = 1; b < nb; b++)
			if (load[b] > load[hb])
				hb = b;
		bestmax = load[hb] * (1 - 1e-9);
		for (int i = 0; i < ni; i++) {
			if (bin[i] != hb)
				continue;
			for (int j = 0; j < ni; j++) {
				double ci = x->ccost[it[i]], cj = x->ccost[it[j]], a, b;
				if (bin[j] == hb || ci <= cj)
					continue;
				a = load[hb] - ci + cj;
				b = load[bin[j]] - cj + ci;
				if ((a > b ? a : b) < bestmax) {
					bestmax = a > b ? a : b;
					bi = i;
					bj = j;
				}
			}
		}
		if (bi < 0)
			break;
		load[hb] += x->ccost[it[bj]] - x->ccost[it[bi]];
		load[bin[bj]] += x->ccost[it[bi]] - x->ccost[it[bj]];
		bin[bi] = bin[bj];
		bin[bj] = hb;
	}
	free(ord);
	free(cnt);
	free(load);
	free(aff);
}

/* Owners of the chunks: nodes first (most traffic stays inside one), then
 * the ranks of each node.  Returns the slowest rank's estimated time, in
 * tiles: its work plus its received blocks at alpha each, as though no
 * transfer were hidden. */
static double assign(struct pctx *x)
{
	int N = x->W / x->G, n = x->n, *it = xmalloc(n * sizeof *it), *bin = xmalloc(n * sizeof *bin);
	int *node = xmalloc(n * sizeof *node);
	double *load = xcalloc(x->W, sizeof *load), mx = 0, tot = 0;

	for (int i = 0; i < n; i++)
		it[i] = i;
	if (N > 1)
		deal(x, it, n, N, x->G * x->per, node);
	else
		memset(node, 0, n * sizeof *node);
	for (int nd = 0; nd < N; nd++) {
		int ni = 0;
		for (int i = 0; i < n; i++)
			if (node[i] == nd)
				it[ni++] = i;
		deal(x, it, ni, x->G, x->per, bin);
		for (int k = 0; k < ni; k++)
			x->owner[it[k]] = nd * x->G + bin[k];
	}
	for (int i = 0; i < n; i++) {
		load[x->owner[i]] += x->ccost[i];
		tot += x->ccost[i];
	}
	for (int r = 0; r < x->W; r++)
		if (load[r] > mx)
			mx = load[r];
	x->imb = tot > 0 ? mx / (tot / x->W) : 1;
	mx = 0;
	{
		uint64_t *rn = xmalloc(x->nw * sizeof *rn);
		for (int r = 0; r < x->W; r++) {
			memset(rn, 0, x->nw * sizeof *rn);
			for (int i = 0; i < n; i++)
				if (x->owner[i] == r)
					for (int w = 0; w < x->nw; w++)
						rn[w] |= x->cneed[(size_t)i * x->nw + w];
			for (int j = 0; j < n; j++)
				if (x->owner[j] != r)
					load[r] += x->alpha[x->owner[j] / x->G != r / x->G] *
					           bcount(rn, j * x->bpc, (j + 1) * x->bpc);
		}
		free(rn);
	}
	for (int r = 0; r < x->W; r++)
		if (load[r] > mx)
			mx = load[r];
	free(it);
	free(bin);
	free(node);
	free(load);
	return mx;
}

/* ---- per rank: messages, shard order, stages -------------------------------- */

struct run {
	int64_t t0, t1;      /* shard tiles */
	int ready;           /* messages needed, -1: none */
	double work;
};

static int byready(const void *a, const void *b)
{
	const struct run *x = a, *y = b;

	if (x->ready != y->ready)
		return x->ready - y->ready;
	return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* Runs of equal readiness over the shard's tiles, small ones merged into a
 * neighbour (the one whose merge delays the least work). */
static int runs(const int *ready, const double *work, int64_t nt, struct run **out)
{
	struct run *v = xcalloc(nt, sizeof *v);
	int n = 0;
	double tot = 0;

	for (int64_t t = 0; t < nt; t++) {
		tot += work[t];
		if (n > 0 && v[n - 1].ready == ready[t]) {
			v[n - 1].t1 = t + 1;
			v[n - 1].work += work[t];
			continue;
		}
		v[n++] = (struct run){ t, t + 1, ready[t], work[t] };
	}
	while (n > 1) {
		int k = 0, o;
		double dl, dr;

		for (int i = 1; i < n; i++)
			if (v[i].work < v[k].work)
				k = i;
		if (v[k].work >= tot / RUNMIN && n <= MAXRUN)
			break;
		/* Merging k with o delays the earlier one's work */
		dl = k > 0 ? (v[k - 1].ready < v[k].ready ? v[k - 1].work :
		              v[k - 1].ready > v[k].ready ? v[k].work : 0) : INFINITY;
		dr = k < n - 1 ? (v[k + 1].ready < v[k].ready ? v[k + 1].work :
		                  v[k + 1].ready > v[k].ready ? v[k].work : 0) : INFINITY;
		o = dl <= dr ? k - 1 : k + 1;
		if (o < k) {
			int t = o;
			o = k;
			k = t;
		}
		/* k < o, adjacent: o into k */
		v[k].t1 = v[o].t1;
		v[k].ready = v[k].ready > v[o].ready ? v[k].ready : v[o].ready;
		v[k].work += v[o].work;
		memmove(&v[o], &v[o + 1], (n - o - 1) * sizeof *v);
		n--;
		/* and its neighbours, if now alike */
		for (int i = k > 0 ? k - 1 : 0; i + 1 < n && i <= k; )
			if (v[i].ready == v[i + 1].ready) {
				v[i].t1 = v[i + 1].t1;
				v[i].work += v[i + 1].work;
				memmove(&v[i + 1], &v[i + 2], (n - i - 2) * sizeof *v);
				n--;
			} else {
				i++;
			}
	}
	*out = v;
	return n;
}

static struct cp_bstage stage_of(const struct cp_bplan *p, const struct cp_brank *rk,
                                 const struct run *u)
{
	struct cp_bstage st;
	int64_t c = p->per * p->C;

	st.q0 = u->t0 * p->T;
	st.q1 = u->t1 * p->T;
	st.wait = u->ready + 1;
	st.kv = c + (u->ready >= 0 ? (rk->msg[u->ready].b0 + rk->msg[u->ready].nb) * p->T : 0);
	st.work = u->work;
	st.kv0 = 0;
	return st;
}

/* Messages that no stage waits for on their own join the next one of
 * their step: a message is a group of NCCL calls, and its latency is paid
 * for nothing. */
static void coalesce(struct cp_brank *rk)
{
	int *cut = xcalloc(rk->nmsg + 1, sizeof *cut), *to = xcalloc(rk->nmsg + 1, sizeof *to), n = 0;

	for (int i = 0; i < rk->nfwd; i++)
		if (rk->fwd[i].wait > 0)
			cut[rk->fwd[i].wait - 1] = 1;
	for (int i = 0; i < rk->nmsg; i++) {
		if (n > 0 && rk->msg[n - 1].step == rk->msg[i].step && !cut[i - 1])
			rk->msg[n - 1].nb += rk->msg[i].nb;
		else
			rk->msg[n++] = rk->msg[i];
		to[i] = n - 1;
	}
	for (int i = 0; i < rk->nfwd; i++)
		if (rk->fwd[i].wait > 0)
			rk->fwd[i].wait = to[rk->fwd[i].wait - 1] + 1;
	for (int i = 0; i < rk->nbwd; i++)
		if (rk->bwd[i].wait > 0)
			rk->bwd[i].wait = to[rk->bwd[i].wait - 1] + 1;
	rk->nmsg = n;
	free(cut);
	free(to);
}

/* Whether rank r reads key blocks of rank q. */
static int reads(const struct cp_bplan *p, int r, int q)
{
	for (int i = 0; i < p->rank[r].nmsg; i++)
		if (p->rank[r].msg[i].peer == q)
			return 1;
	return 0;
}

/* Whether rank rk sends key blocks in a forward pass. */
static int sends(const struct cp_bplan *p, const struct cp_brank *rk)
{
	for (int r = 0; r < p->world; r++)
		if (reads(p, r, (int)(rk - p->rank)))
			return 1;
	return 0;
}

/* The first run v[0], where blocks are still on their way while it runs
 * (to it, or from it if it needs none), cut after its first `tiles`
 * of work, where some is left: for A/B runs (cpbench(1)).  A stage's
 * persistent CTAs hold every SM until it ends, and NCCL's kernel for the
 * transfers in flight gets none before (bench/NOTES.md, round 10); a
 * short first launch gives them back early.  Returns the runs' count. */
static int lead(struct run *v, int n, const double *work, double tiles)
{
	double w = 0;
	int64_t t = v[0].t0;

	while (t < v[0].t1 && w < tiles)
		w += work[t++];
	if (t == v[0].t1)
		return n;
	memmove(&v[1], &v[0], n * sizeof *v);
	v[0].t1 = t;
	v[0].work = w;
	v[1].t0 = t;
	v[1].work -= w;
	return n + 1;
}

/* The stages of rank rk from each shard tile's readiness: forward, the
 * local-only runs (by position) and then the rest (by readiness).  The
 * backward pass is one stage over every row and the whole key buffer: the
 * fetch and the partials' way home are exposed, but dK and dV are written
 * once, where several stages would sum them in fp32 over the key buffer
 * (on cheap masks, more than the transfers cost).  LONGATTN_BALANCED_BSPLIT
 * (A/B runs) splits it by keys instead: dK and dV are still written once,
 * and only the dQ of the rows that read received blocks is summed. */
static void stages(const struct cp_bplan *p, struct cp_brank *rk, const int *ready,
                   const double *work, int64_t nt)
{
	struct run *v, all = { 0, nt, rk->nmsg - 1, 0 };
	int n = runs(ready, work, nt, &v);

	qsort(v, n, sizeof *v, byready);
	if (p->lead > 0 && (v[0].ready < rk->nmsg - 1 || (v[0].ready < 0 && sends(p, rk))))
		n = lead(v, n, work, p->lead);
	rk->fwd = xcalloc(n, sizeof *rk->fwd);
	for (int i = 0; i < n; i++) {
		rk->fwd[i] = stage_of(p, rk, &v[i]);
		all.work += v[i].work;
	}
	rk->nfwd = n;
	rk->bwd = xcalloc(2, sizeof *rk->bwd);
	rk->bwd[0] = stage_of(p, rk, &all);
	rk->nbwd = 1;
	if (p->bsplit && rk->nmsg > 0) {
		/* Own keys under every row while the blocks travel, then the
		 * received keys under the rows that read them, their dQ added */
		int64_t t0 = nt, t1 = 0;

		for (int i = 0; i < n; i++)
			if (v[i].ready >= 0) {
				t0 = v[i].t0 < t0 ? v[i].t0 : t0;
				t1 = v[i].t1 > t1 ? v[i].t1 : t1;
			}
		rk->bwd[0].kv = p->per * p->C;
		rk->bwd[0].wait = 0;
		rk->bwd[1] = stage_of(p, rk, &(struct run){ t0, t1, rk->nmsg - 1, 0 });
		rk->bwd[1].kv0 = p->per * p->C;
		rk->nbwd = 2;
	}
	rk->bret = 1;
	free(v);
	coalesce(rk);
}

/* Rank order of positions: pos[i] of chunk i in its owner's shard. */
static int *sort_key_chunk;
static int bykey(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;

	if (sort_key_chunk[i] != sort_key_chunk[j])
		return sort_key_chunk[i] - sort_key_chunk[j];
	return i - j;
}

static int64_t *sort_blk_pos;
static int byblkpos(const void *a, const void *b)
{
	int64_t x = sort_blk_pos[*(const int64_t *)a], y = sort_blk_pos[*(const int64_t *)b];

	return x < y ? -1 : x > y;
}

struct rowc {
	int cnt;             /* blocks of this step it reads */
	int64_t qt;
};

static int byrowc(const void *a, const void *b)
{
	const struct rowc *x = a, *y = b;

	if (x->cnt != y->cnt)
		return x->cnt - y->cnt;
	return x->qt < y->qt ? -1 : x->qt > y->qt;
}

/* The set bits of a & ~b (b may be NULL), word by word. */
#define FOR_BITS(t, a, b, nw) \
	for (int w_ = 0; w_ < (nw); w_++) \
		for (uint64_t v_ = (a)[w_] & ((b) ? ~(b)[w_] : ~(uint64_t)0); v_; v_ &= v_ - 1) \
			for (int64_t t = (int64_t)w_ * 64 + __builtin_ctzll(v_), o_ = 1; o_; o_ = 0)

static void ranks(struct pctx *x, struct cp_bplan *p)
{
	int W = x->W, n = x->n, nstep = W - 1, nw = x->nw;
	int64_t nt = x->nt, bpc = x->bpc, nq = x->per * bpc;
	int *stepof = xmalloc((size_t)W * sizeof *stepof), *msgof = xmalloc(nt * sizeof *msgof);
	int *last = xmalloc(nt * sizeof *last), **ready = xcalloc(W, sizeof *ready);
	int *key = xmalloc(n * sizeof *key), *pos = xmalloc(n * sizeof *pos);
	uint64_t *own = xcalloc((size_t)W * nw, sizeof *own), *U = xmalloc(nw * sizeof *U);
	uint64_t *X = xmalloc(nw * sizeof *X), *placed = xmalloc(nw * sizeof *placed);
	int64_t *blk = xmalloc(nt * sizeof *blk), *tpos = xmalloc(nt * sizeof *tpos);
	int64_t **mblk = xcalloc(W, sizeof *mblk);
	struct rowc *rows = xmalloc(nq * sizeof *rows);

	for (int64_t t = 0; t < nt; t++)
		bset(own + (size_t)x->owner[t / bpc] * nw, t);
	for (int r = 0; r < W; r++) {
		struct cp_brank *rk = &p->rank[r];
		const uint64_t *mine = own + (size_t)r * nw;
		int nc = 0, cap = 4, nb = 0;

		rk->chunk = xmalloc(x->per * sizeof *rk->chunk);
		for (int i = 0; i < n; i++)
			if (x->owner[i] == r) {
				rk->chunk[nc++] = i;
				rk->work += x->ccost[i];
			}
		for (int s = 0; s < nstep; s++)
			stepof[cp_bpeer(p, r, s, 0)] = s;
		/* What its rows read elsewhere; the last step each row waits for */
		memset(U, 0, nw * sizeof *U);
		for (int c = 0; c < nc; c++)
			for (int64_t qt = rk->chunk[c] * bpc; qt < (rk->chunk[c] + 1) * bpc; qt++) {
				const uint64_t *nd = x->need + qt * nw;
				last[qt] = -1;
				for (int w = 0; w < nw; w++)
					U[w] |= nd[w] & ~mine[w];
				FOR_BITS(t, nd, mine, nw)
					if (stepof[x->owner[t / bpc]] > last[qt])
						last[qt] = stepof[x->owner[t / bpc]];
			}
		/* Messages: per step, the blocks that the rows finishing at that
		 * step read, the rows that read fewest first, cut into about
		 * MAXMSG messages; blocks only later rows read go last */
		rk->msg = xcalloc(cap, sizeof *rk->msg);
		mblk[r] = xmalloc(nt * sizeof *mblk[r]);
		for (int64_t t = 0; t < nt; t++)
			msgof[t] = -1;
		for (int s = 0; s < nstep; s++) {
			int from = cp_bpeer(p, r, s, 0), nx = 0, ncur = 0, nrow = 0, thr;

			for (int w = 0; w < nw; w++) {
				X[w] = U[w] & own[(size_t)from * nw + w];
				nx += __builtin_popcountll(X[w]);
			}
			if (nx == 0)
				continue;
			memset(placed, 0, nw * sizeof *placed);
			thr = (nx + MAXMSG - 1) / MAXMSG;
			for (int c = 0; c < nc; c++)
				for (int64_t qt = rk->chunk[c] * bpc; qt < (rk->chunk[c] + 1) * bpc; qt++) {
					if (last[qt] != s)
						continue;
					rows[nrow] = (struct rowc){ 0, qt };
					for (int w = 0; w < nw; w++)
						rows[nrow].cnt += __builtin_popcountll(x->need[qt * nw + w] & X[w]);
					nrow++;
				}
			qsort(rows, nrow, sizeof *rows, byrowc);
			for (int i = 0; i <= nrow; i++) {
				for (int w = 0; w < nw; w++) {
					uint64_t v = X[w] & ~placed[w] & (i < nrow ? x->need[rows[i].qt * nw + w] : ~(uint64_t)0);
					placed[w] |= v;
					for (; v; v &= v - 1)
						blk[ncur++] = (int64_t)w * 64 + __builtin_ctzll(v);
				}
				if (ncur >= thr || (i == nrow && ncur > 0)) {
					if (rk->nmsg == cap)
						rk->msg = xrealloc(rk->msg, (cap *= 2) * sizeof *rk->msg);
					rk->msg[rk->nmsg] = (struct cp_bmsg){ s, from, nb, ncur };
					for (int j = 0; j < ncur; j++) {
						mblk[r][nb + j] = blk[j];
						msgof[blk[j]] = rk->nmsg;
					}
					nb += ncur;
					rk->nmsg++;
					ncur = 0;
				}
			}
		}
		rk->nblk = nb;
		/* Each row of tiles is ready after its last message; the shard
		 * holds chunks by the latest readiness of their rows */
		ready[r] = xmalloc(nt * sizeof *ready[r]);
		for (int c = 0; c < nc; c++) {
			int mx = -1;
			for (int64_t qt = rk->chunk[c] * bpc; qt < (rk->chunk[c] + 1) * bpc; qt++) {
				ready[r][qt] = -1;
				FOR_BITS(t, x->need + qt * nw, mine, nw)
					if (msgof[t] > ready[r][qt])
						ready[r][qt] = msgof[t];
				if (ready[r][qt] > mx)
					mx = ready[r][qt];
			}
			key[rk->chunk[c]] = mx;
		}
		sort_key_chunk = key;
		qsort(rk->chunk, nc, sizeof *rk->chunk, bykey);
		for (int c = 0; c < nc; c++)
			pos[rk->chunk[c]] = c;
	}
	/* Blocks inside a message in the sender's shard order, so that both
	 * ends cut the same runs; then the stages */
	for (int64_t t = 0; t < nt; t++)
		tpos[t] = pos[t / bpc] * bpc + t % bpc;
	sort_blk_pos = tpos;
	for (int r = 0; r < W; r++) {
		struct cp_brank *rk = &p->rank[r];
		int *rd = xmalloc(nq * sizeof *rd);
		double *wk = xmalloc(nq * sizeof *wk);

		for (int i = 0; i < rk->nmsg; i++)
			qsort(mblk[r] + rk->msg[i].b0, rk->msg[i].nb, sizeof *mblk[r], byblkpos);
		rk->blk = xmalloc((rk->nblk ? rk->nblk : 1) * sizeof *rk->blk);
		memcpy(rk->blk, mblk[r], rk->nblk * sizeof *rk->blk);
		for (int c = 0; c < x->per; c++)
			for (int64_t i = 0; i < bpc; i++) {
				rd[c * bpc + i] = ready[r][rk->chunk[c] * bpc + i];
				wk[c * bpc + i] = x->tcost[rk->chunk[c] * bpc + i];
			}
		stages(p, rk, rd, wk, nq);
		free(rd);
		free(wk);
		for (int i = 0; i < rk->nmsg; i++)
			p->rank[rk->msg[i].peer].sendblk += rk->msg[i].nb;
	}
	for (int r = 0; r < W; r++) {
		free(ready[r]);
		free(mblk[r]);
	}
	free(ready);
	free(mblk);
	free(stepof);
	free(msgof);
	free(last);
	free(key);
	free(pos);
	free(own);
	free(U);
	free(X);
	free(placed);
	free(blk);
	free(tpos);
	free(rows);
}

void cp_balanced_free(struct cp_bplan *p)
{
	for (int r = 0; p->rank && r < p->world; r++) {
		free(p->rank[r].chunk);
		free(p->rank[r].blk);
		free(p->rank[r].msg);
		free(p->rank[r].fwd);
		free(p->rank[r].bwd);
	}
	free(p->rank);
	free(p->owner);
	free(p->cost);
	memset(p, 0, sizeof *p);
}

/* An A/B switch of the environment: its number, or dflt where unset. */
static double envnum(const char *name, double dflt)
{
	const char *v = getenv(name);

	return v != NULL ? atof(v) : dflt;
}

int cp_balanced_plan(const struct mask *m, int world, int node_size, const struct attn_shape *s,
                     struct cp_bplan *p, char *err, size_t errlen)
{
	struct pctx x = { 0 };
	int64_t c;
	double best = INFINITY, *score, *imb;
	int nper = 0, per = 0, *pers;

	memset(p, 0, sizeof *p);
	if (world < 1 || node_size < 1 || world % node_size) {
		snprintf(err, errlen, "balanced: node size %d does not divide %d ranks", node_size, world);
		return -1;
	}
	if (m->sq != m->sk || s->sq != m->sq || s->sk != m->sk) {
		snprintf(err, errlen, "balanced: shape and mask seqlens differ");
		return -1;
	}
	if (m->sq % world) {
		snprintf(err, errlen, "balanced: seqlen %lld is not a multiple of %d",
		         (long long)m->sq, world);
		return -1;
	}
	x.m = m;
	x.W = world;
	x.G = node_size;
	x.S = m->sq;
	c = x.S / world;
	/* The tile: the GPU kernels' 128, or less for short shards, so that a
	 * shard holds at least 4 */
	for (x.T = 128; x.T > 1 && (c % x.T || c / x.T < 4); x.T /= 2)
		;
	x.nt = x.S / x.T;
	/* bitsets of nt x nt */
	if (x.nt > MAXTILE) {
		snprintf(err, errlen, "balanced: %lld tokens per rank in tiles of %lld: more than %d tiles "
		         "(make it a multiple of 128)", (long long)c, (long long)x.T, MAXTILE);
		return -1;
	}
	x.nw = (int)((x.nt + 63) / 64);
	if (tiles(&x, err, errlen) < 0)
		return -1;

	/* A key block (K and V) against a tile of work: 4*T*T*hd flops per q
	 * head at RATE against 2*T*hkv*hd elements at LINK */
	for (int i = 0; i < 2; i++)
		x.alpha[i] = (double)s->hkv * (i ? RATE / XLINK : RATE / LINK) * 2 /
		             ((double)x.T * s->hq / m->heads * 2);
	/* Chunks per rank: the fastest estimate among the chunkings that
	 * balance the work within IMBTOL of the best one */
	pers = xcalloc(16, sizeof *pers);     /* 2 * chunks per rank + runs */
	score = xcalloc(16, sizeof *score);
	imb = xcalloc(16, sizeof *imb);
	for (int q = 1; q <= MAXPER && (int64_t)world * q <= MAXCHUNK; q *= 2) {
		if (c % q || (c / q) % x.T)
			continue;
		for (x.runs = 0; x.runs < 2; x.runs++) {
			chunking(&x, q);
			pers[nper] = 2 * q + x.runs;
			score[nper] = assign(&x);
			imb[nper] = x.imb;
			if (x.imb < best)
				best = x.imb;
			nper++;
			unchunk(&x);
		}
	}
	for (int i = 0, pick = -1; i < nper; i++)
		if (imb[i] <= best + IMBTOL && (pick < 0 || score[i] < score[pick] * 0.999)) {
			pick = i;
			per = pers[i] / 2;
			x.runs = pers[i] % 2;
		}
	free(pers);
	free(score);
	free(imb);

	chunking(&x, per);
	assign(&x);
	p->world = world;
	p->node_size = node_size;
	p->per = per;
	p->nchunk = x.n;
	p->S = x.S;
	p->C = x.C;
	p->T = x.T;
	p->owner = xmalloc(x.n * sizeof *p->owner);
	memcpy(p->owner, x.owner, x.n * sizeof *p->owner);
	p->cost = xmalloc(x.n * sizeof *p->cost);
	memcpy(p->cost, x.ccost, x.n * sizeof *p->cost);
	p->kv_bytes = 2.0 * x.T * s->hkv * s->hd * 2;
	p->lead = envnum("LONGATTN_BALANCED_LEAD", 0);
	p->bsplit = envnum("LONGATTN_BALANCED_BSPLIT", 0) != 0;
	p->rank = xcalloc(world, sizeof *p->rank);
	ranks(&x, p);
	{
		double amax = 0, asum = 0, wmax = 0, wsum = 0;
		for (int i = 0; i < x.n; i++) {
			struct mask piece;
			if (mask_restrict(m, i * x.C, (i + 1) * x.C, 0, x.S, &piece, err, errlen) < 0) {
				unchunk(&x);
				free(x.tcost);
				free(x.need);
				cp_balanced_free(p);
				return -1;
			}
			p->rank[x.owner[i]].area += (double)piece.area;
			mask_free(&piece);
		}
		for (int r = 0; r < world; r++) {
			struct cp_brank *rk = &p->rank[r];
			amax = rk->area > amax ? rk->area : amax;
			asum += rk->area;
			wmax = rk->work > wmax ? rk->work : wmax;
			wsum += rk->work;
		}
		p->imbalance = asum > 0 ? amax / (asum / world) : 1;
		p->cost_imbalance = wsum > 0 ? wmax / (wsum / world) : 1;
	}
	unchunk(&x);
	free(x.tcost);
	free(x.need);
	return 0;
}

/* ---- the strategy ------------------------------------------------------------ */

/* ops events: 0, 1 time the pass; with copy engines, stream 2 starts at
 * EV_CE, has pulled stage i's blocks at EV_STG + i, the partials at
 * EV_RET, and is done at EV_END */
enum { EV_PASS = 2, EV_CE, EV_RET, EV_END, EV_JOIN, EV_STG };
/* Flags of peer memory (ipc.h): a sender's K/V are ready, its reader has
 * read them; a reader's partials are written, their owner has read them */
enum { F_READY, F_DONE, F_PART, F_BACK, NFLAG };

struct kstate {                 /* a stage's kernel: shard rows x keys [kv0, kv) of the buffer */
	int64_t q0, q1, kv0, kv;
	struct mask piece;
	void *kst;
};

/* The key buffer is cp_drive's k and v with kpad tokens of room: the
 * shard, then the received blocks; dk and dv likewise. */
struct bal {
	struct cp_bplan p;
	const struct cp_brank *rk;
	int me, *pos;               /* pos[chunk]: its place in its owner's shard */
	int64_t c, nkey, E;         /* shard tokens, key buffer tokens, elements of K per token */
	float *ltmp;                /* stages' lse [hq][rows], forward stage i's from loff[i] */
	int64_t *loff;
	int conc;                   /* stages on streams 0 and 1 (LONGATTN_BALANCED_CONC=0: one) */
	void *ret;                  /* backward: partials of own blocks that came home, per step */
	void *dqtmp;                /* backward in two stages: the second's dQ */
	int64_t *retoff;            /* [world] elements into ret: step s's dK | dV from retoff[s] to [s+1] */
	int64_t *runs;              /* ops buffer: per step, {own token, ret token, tokens}; then dQ's */
	int nrun;                   /* runs of the steps; the one of dqtmp follows them */
	int *run0;                  /* [world]: step s's runs are [run0[s], run0[s+1]) */
	struct kstate *ks;
	int nks, *fks, *bks;        /* stage -> kstate */
	struct comm_req **rin, **rout, **rret;
	int nout;
	struct comm_seg *sv, *rv;
	int64_t *so, *ko, *len;     /* runs of a message */
	int ce;                     /* copy engines inside the node (LONGATTN_BALANCED_CE=0: NCCL) */
	struct ipc ipc;             /* ... every rank's k (and dk) mapped */
	uint32_t epoch;             /* passes so far, the flags' value */
};

/* Runs of message i of rank rr (the receiver): token offsets in the
 * sender's shard and in rr's key buffer, and lengths; blocks adjacent in
 * the sender's shard merge, which both ends work out alike. */
static int msg_runs(const struct bal *b, int rr, int i)
{
	const struct cp_bplan *p = &b->p;
	const struct cp_bmsg *g = &p->rank[rr].msg[i];
	int64_t bpc = p->C / p->T;
	int n = 0;

	for (int j = 0; j < g->nb; j++) {
		int64_t t = p->rank[rr].blk[g->b0 + j];
		int64_t so = b->pos[t / bpc] * p->C + t % bpc * p->T;

		if (n > 0 && b->so[n - 1] + b->len[n - 1] == so) {
			b->len[n - 1] += p->T;
			continue;
		}
		b->so[n] = so;
		b->ko[n] = b->c + (g->b0 + j) * p->T;
		b->len[n] = p->T;
		n++;
	}
	return n;
}

/* Messages of rank rr at step s: first index, count (they are consecutive). */
static int step_msgs(const struct cp_brank *rk, int s, int *first)
{
	int n = 0;

	*first = 0;
	for (int i = 0; i < rk->nmsg; i++)
		if (rk->msg[i].step == s && n++ == 0)
			*first = i;
	return n;
}

static void *at(const void *base, int64_t tok, int64_t E, size_t es)
{
	return (char *)base + (size_t)(tok * E) * es;
}

/* Every K/V transfer of the pass, started now on the comm's side stream in
 * the plan's order: per step, message m out paired with message m in,
 * straight from the sender's shard into the receiver's key buffer.  They
 * follow stream 1, which follows what stream 0 did before the pass and not
 * what it was given since. */
static void fetch(struct cp_run *r, struct bal *b)
{
	int W = b->p.world, me = b->me;
	size_t es = r->es;

	b->nout = 0;
	for (int s = 0; s < W - 1; s++) {
		int to = cp_bpeer(&b->p, me, s, 1), from = cp_bpeer(&b->p, me, s, 0), fo, fi;
		int no = step_msgs(&b->p.rank[to], s, &fo), ni = step_msgs(b->rk, s, &fi);

		for (int m = 0; m < no || m < ni; m++) {
			int ns = 0, nr = 0, k;
			struct comm_req *q;

			if (m < no) {
				k = msg_runs(b, to, fo + m);
				for (int j = 0; j < k; j++)
					b->sv[ns++] = (struct comm_seg){ at(r->k, b->so[j], b->E, es), b->len[j] * b->E };
				for (int j = 0; j < k; j++)
					b->sv[ns++] = (struct comm_seg){ at(r->v, b->so[j], b->E, es), b->len[j] * b->E };
			}
			if (m < ni) {
				k = msg_runs(b, me, fi + m);
				for (int j = 0; j < k; j++)
					b->rv[nr++] = (struct comm_seg){ at(r->k, b->ko[j], b->E, es), b->len[j] * b->E };
				for (int j = 0; j < k; j++)
					b->rv[nr++] = (struct comm_seg){ at(r->v, b->ko[j], b->E, es), b->len[j] * b->E };
			}
			if (comm_iexchange(r->env->world, b->sv, ns, m < no ? to : -1, b->rv, nr,
			                   m < ni ? from : -1, r->type, r->x.stream[1], &q) < 0)
				cp_commfail(r, "exchange");
			if (m < ni)
				b->rin[fi + m] = q;
			else
				b->rout[b->nout++] = q;
		}
	}
}

/* Stream 0 goes on once messages [0, upto) have arrived. */
static void arrived(struct cp_run *r, struct bal *b, int upto)
{
	for (int i = 0; i < upto; i++)
		if (b->rin[i]) {
			if (comm_wait(b->rin[i], r->x.stream[0]) < 0)
				cp_commfail(r, "exchange wait");
			b->rin[i] = NULL;
		}
}

static void settle(struct cp_run *r, struct bal *b)
{
	arrived(r, b, b->rk->nmsg);
	for (int i = 0; i < b->nout; i++)
		if (comm_wait(b->rout[i], r->x.stream[0]) < 0)
			cp_commfail(r, "exchange wait");
	b->nout = 0;
}

/* Backward: the dK/dV partials of the blocks received at step s go back to
 * their sender as the kernel wrote them, and those of own blocks come from
 * whoever read them, into ret. */
static void give_back(struct cp_run *r, struct bal *b)
{
	int W = b->p.world, me = b->me;
	int64_t T = b->p.T, E = b->E;

	for (int s = 0; s < W - 1; s++) {
		int to = cp_bpeer(&b->p, me, s, 0), from = cp_bpeer(&b->p, me, s, 1), fi;
		int ni = step_msgs(b->rk, s, &fi);
		int64_t mine = 0, half = (b->retoff[s + 1] - b->retoff[s]) / 2;
		struct comm_seg sv[2], rv[2];

		if (ni > 0)
			mine = b->rk->msg[fi + ni - 1].b0 + b->rk->msg[fi + ni - 1].nb - b->rk->msg[fi].b0;
		b->rret[s] = NULL;
		if (mine == 0 && half == 0)
			continue;
		if (mine > 0) {
			int64_t k0 = b->c + b->rk->msg[fi].b0 * T;
			sv[0] = (struct comm_seg){ at(r->dk, k0, E, r->es), mine * T * E };
			sv[1] = (struct comm_seg){ at(r->dv, k0, E, r->es), mine * T * E };
		}
		rv[0] = (struct comm_seg){ at(b->ret, b->retoff[s], 1, r->es), half };
		rv[1] = (struct comm_seg){ at(b->ret, b->retoff[s] + half, 1, r->es), half };
		if (comm_iexchange(r->env->world, sv, mine ? 2 : 0, mine ? to : -1, rv, half ? 2 : 0,
		                   half ? from : -1, r->type, r->x.stream[0], &b->rret[s]) < 0)
			cp_commfail(r, "exchange");
	}
}

/* Step s's partials, in ret, into own dK/dV: one launch each, the sum in
 * fp32 and rounded once, as if the partial had never been rounded on the
 * way. */
static void sum_back(struct cp_run *r, struct bal *b, int s)
{
	int n = b->run0[s + 1] - b->run0[s];
	int64_t half = (b->retoff[s + 1] - b->retoff[s]) / 2;

	if (n == 0)
		return;
	ops_addruns(&r->x, r->dk, r->type, at(b->ret, b->retoff[s], 1, r->es),
	            b->runs + 3 * b->run0[s], n, b->E, 0);
	ops_addruns(&r->x, r->dv, r->type, at(b->ret, b->retoff[s] + half, 1, r->es),
	            b->runs + 3 * b->run0[s], n, b->E, 0);
}

/* ... and once they are here, summed. */
static void take_back(struct cp_run *r, struct bal *b)
{
	for (int s = 0; s < b->p.world - 1; s++) {
		if (b->rret[s] == NULL)
			continue;
		if (comm_wait(b->rret[s], r->x.stream[0]) < 0)
			cp_commfail(r, "exchange wait");
		b->rret[s] = NULL;
		sum_back(r, b, s);
	}
}

/* ---- copy engines inside the node (LONGATTN_BALANCED_CE, ipc.h) ------------
 * The same transfers, pulled by their receiver on stream 2 with
 * cudaMemcpyAsync from the sender's mapped buffers: no SM and no NCCL
 * kernel, which a stage's persistent CTAs keep from starting.  Flags in
 * peer memory order each pull after its sender's pass start, and each
 * sender's next use of its buffers after the pulls. */

/* Bytes from rank q's k to its v (and dk to dv): cp_drive's layout, with
 * q's room for received blocks. */
static int64_t voff(const struct cp_run *r, const struct bal *b, int q)
{
	return (int64_t)r->b * (b->c + b->p.rank[q].nblk * b->p.T) * b->E * (int64_t)r->es;
}

/* Own K and V ready for whoever reads them; then stream 2 pulls every
 * message from its sender's shard, in the plan's order, marking where
 * each of the nst stages has all its blocks (EV_STG + g) and where the
 * pulls end (EV_END). */
static void ce_fetch(struct cp_run *r, struct bal *b, const struct cp_bstage *st, int nst)
{
	int W = b->p.world, me = b->me;
	uint32_t e = ++b->epoch;
	int64_t E = b->E;
	size_t es = r->es;

	for (int q = 0; q < W; q++)
		if (q != me && reads(&b->p, q, me))
			ipc_post(&b->ipc, r, 0, q, F_READY, e);
	ops_record(&r->x, EV_CE, 0);
	ops_wait(&r->x, 2, EV_CE);
	for (int i = 0; i < b->rk->nmsg; i++) {
		int q = b->rk->msg[i].peer, k = msg_runs(b, me, i), first = 1, last = 1;
		const char *qk = ipc_buf(&b->ipc, q, 0), *qv = qk + voff(r, b, q);

		for (int j = 0; j < b->rk->nmsg; j++)
			if (b->rk->msg[j].peer == q) {
				first &= j >= i;
				last &= j <= i;
			}
		if (first)
			ipc_wait(&b->ipc, r, 2, q, F_READY, e);
		for (int j = 0; j < k; j++) {
			ops_copy(&r->x, at(r->k, b->ko[j], E, es), at(qk, b->so[j], E, es), b->len[j] * E * es, 2);
			ops_copy(&r->x, at(r->v, b->ko[j], E, es), at(qv, b->so[j], E, es), b->len[j] * E * es, 2);
		}
		if (last)
			ipc_post(&b->ipc, r, 2, q, F_DONE, e);
		for (int g = 0; g < nst; g++)
			if (st[g].wait == i + 1)
				ops_record(&r->x, EV_STG + g, 2);
	}
	ops_record(&r->x, EV_END, 2);
}

/* Stream s goes on once stage g's blocks are here. */
static void ce_arrived(struct cp_run *r, const struct cp_bstage *st, int g, int s)
{
	if (st[g].wait > 0)
		ops_wait(&r->x, s, EV_STG + g);
}

/* The pass ends when stream 2 has, and when every reader of own K/V (and,
 * backward, every owner of partials written here) has read them. */
static void ce_settle(struct cp_run *r, struct bal *b, int bwd)
{
	ops_wait(&r->x, 0, EV_END);
	for (int q = 0; q < b->p.world; q++) {
		if (q == b->me)
			continue;
		if (reads(&b->p, q, b->me))
			ipc_wait(&b->ipc, r, 0, q, F_DONE, b->epoch);
		if (bwd && reads(&b->p, b->me, q))
			ipc_wait(&b->ipc, r, 0, q, F_BACK, b->epoch);
	}
}

/* Backward, after the kernel: own partials of received blocks are
 * written, for their owners to pull; those of own blocks pulled from
 * whoever read them into ret (give_back's layout), then summed. */
static void ce_return(struct cp_run *r, struct bal *b)
{
	int W = b->p.world, me = b->me;
	uint32_t e = b->epoch;
	int64_t T = b->p.T, E = b->E;
	size_t es = r->es;

	for (int q = 0; q < W; q++)
		if (q != me && reads(&b->p, me, q))
			ipc_post(&b->ipc, r, 0, q, F_PART, e);
	/* Stream 2 pulls as soon as each reader is done, own kernel running
	 * or not: copy engines take no SM from it */
	for (int s = 0; s < W - 1; s++) {
		int q = cp_bpeer(&b->p, me, s, 1), fi;
		int64_t half = (b->retoff[s + 1] - b->retoff[s]) / 2;
		const char *qk, *qv;

		if (half == 0 || step_msgs(&b->p.rank[q], s, &fi) == 0)
			continue;
		qk = at(ipc_buf(&b->ipc, q, 1), b->c + b->p.rank[q].msg[fi].b0 * T, E, es);
		qv = qk + voff(r, b, q);
		ipc_wait(&b->ipc, r, 2, q, F_PART, e);
		ops_copy(&r->x, at(b->ret, b->retoff[s], 1, es), qk, half * es, 2);
		ops_copy(&r->x, at(b->ret, b->retoff[s] + half, 1, es), qv, half * es, 2);
		ipc_post(&b->ipc, r, 2, q, F_BACK, e);
	}
	ops_record(&r->x, EV_RET, 2);
	ops_wait(&r->x, 0, EV_RET);
	for (int s = 0; s < W - 1; s++)
		sum_back(r, b, s);
}

/* Forward stage i on stream s: its rows' O, and their LSE through its
 * own room in ltmp where it has not every row. */
static int stage_fwd(struct cp_run *r, struct bal *b, int i, int s)
{
	const struct cp_bstage *g = &b->rk->fwd[i];
	const struct kstate *k = &b->ks[b->fks[i]];
	int64_t rows = g->q1 - g->q0, qe = (int64_t)r->hq * r->d;
	int full = rows == b->c;
	float *lse = full ? r->lse : b->ltmp + b->loff[i];
	void *o = at(r->o, g->q0, qe, r->es);
	int rc = 0;

	if (k->kst == NULL) {
		ops_zero(&r->x, o, rows * qe * r->es, s);
		ops_fill(&r->x, lse, -INFINITY, rows * r->hq, s);
	} else {
		struct attn_io io = { 0 };
		io.q = at(r->q, g->q0, qe, r->es);
		io.k = r->k;
		io.v = r->v;
		io.o = o;
		io.lse = lse;
		io.stream = r->x.stream[s];
		rc = cp_kern_rc(r, r->env->kern->fwd(k->kst, &io), "forward");
	}
	if (!full)
		ops_copy2d(&r->x, r->lse + g->q0, b->c * 4, lse, rows * 4, rows * 4, r->hq, s);
	return rc;
}

/* Stream 1 starts after what stream 0 did before the pass. */
static void fork1(struct cp_run *r)
{
	ops_record(&r->x, EV_PASS, 0);
	ops_wait(&r->x, 1, EV_PASS);
}

static int bal_fwd(struct cp_run *r)
{
	struct bal *b = r->self;
	int rc = 0;

	fork1(r);
	if (b->ce) {
		ce_fetch(r, b, b->rk->fwd, b->rk->nfwd);
		ops_mark(&r->x, 0, "fetch");
		/* conc: stages alternate between streams 0
		 * and 1, each after its blocks alone, so that one's CTAs take
		 * the SMs its predecessor's tail leaves (rows, O and LSE rooms
		 * of stages are disjoint) */
		for (int i = 0; i < b->rk->nfwd; i++) {
			int s = b->conc ? i % 2 : 0;
			ce_arrived(r, b->rk->fwd, i, s);
			ops_mark(&r->x, s, "wait");
			rc |= stage_fwd(r, b, i, s);
			ops_mark(&r->x, s, "stage");
		}
		if (b->conc) {
			ops_record(&r->x, EV_JOIN, 1);
			ops_wait(&r->x, 0, EV_JOIN);
		}
		ce_settle(r, b, 0);
		ops_mark(&r->x, 0, "settle");
		return rc;
	}
	/* The transfers first, though NCCL's group calls take tens of
	 * microseconds of host time: a kernel launched before them holds
	 * every SM (persistent CTAs do until it ends), and the transfers'
	 * CTAs would wait for it.  Launched after, they still often do
	 * (LONGATTN_CP_TRACE shows the first stage's end, then the blocks):
	 * NCCL's kernel wants 24 CTAs here (bench/NOTES.md, round 10) */
	fetch(r, b);
	ops_mark(&r->x, 0, "fetch");
	for (int i = 0; i < b->rk->nfwd; i++) {
		arrived(r, b, b->rk->fwd[i].wait);
		ops_mark(&r->x, 0, "wait");
		rc |= stage_fwd(r, b, i, 0);
		ops_mark(&r->x, 0, "stage");
	}
	settle(r, b);
	ops_mark(&r->x, 0, "settle");
	return rc;
}

/* Backward stage g: its rows against keys [kv0, kv) of the buffer, dK and
 * dV written where they stay (own tokens) or leave from (received blocks),
 * dQ of its rows to dq. */
static int stage_bwd(struct cp_run *r, struct bal *b, const struct cp_bstage *g, const struct kstate *k,
                     void *dq, int s)
{
	int64_t rows = g->q1 - g->q0, qe = (int64_t)r->hq * r->d, nk = g->kv - g->kv0;
	void *dk = at(r->dk, g->kv0, b->E, r->es), *dv = at(r->dv, g->kv0, b->E, r->es);
	float *lse = r->lse;

	if (k->kst == NULL) {
		ops_zero(&r->x, dq, rows * qe * r->es, s);
		ops_zero(&r->x, dk, nk * b->E * r->es, s);
		ops_zero(&r->x, dv, nk * b->E * r->es, s);
		return 0;
	}
	if (rows < b->c) {
		ops_copy2d(&r->x, b->ltmp, rows * 4, r->lse + g->q0, b->c * 4, rows * 4, r->hq, s);
		lse = b->ltmp;
	}
	struct attn_io io = { at(r->q, g->q0, qe, r->es), at(r->k, g->kv0, b->E, r->es),
	                      at(r->v, g->kv0, b->E, r->es), at(r->o, g->q0, qe, r->es), lse,
	                      at(r->dout, g->q0, qe, r->es), dq, dk, dv, r->x.stream[s] };
	return cp_kern_rc(r, r->env->kern->bwd(k->kst, &io), "backward");
}

/* One stage (cp_bplan): every row against the whole key buffer.  Or two
 * (LONGATTN_BALANCED_BSPLIT): own keys under every row while the blocks
 * travel, then the received ones under the rows that read them, whose
 * dQ is added to the first's. */
static int bal_bwd(struct cp_run *r)
{
	struct bal *b = r->self;
	const struct cp_brank *rk = b->rk;
	/* With conc (and BSPLIT) the second stage runs on stream 1 as
	 * soon as its blocks are in, beside the first (their dQ, dK and dV
	 * rooms are disjoint) */
	int rc = 0, last = rk->nbwd - 1, s = last > 0 && b->conc;

	fork1(r);
	if (b->ce)
		ce_fetch(r, b, rk->bwd, rk->nbwd);
	else
		fetch(r, b);
	ops_mark(&r->x, 0, "fetch");
	if (last > 0) {
		rc |= stage_bwd(r, b, &rk->bwd[0], &b->ks[b->bks[0]], r->dq, 0);
		ops_mark(&r->x, 0, "own");
	}
	if (b->ce)
		ce_arrived(r, rk->bwd, last, s);
	else
		settle(r, b);
	ops_mark(&r->x, s, "settle");
	if (last > 0) {
		const struct cp_bstage *g = &rk->bwd[last];
		rc |= stage_bwd(r, b, g, &b->ks[b->bks[last]], b->dqtmp, s);
		if (s) {
			ops_record(&r->x, EV_JOIN, 1);
			ops_wait(&r->x, 0, EV_JOIN);
		}
		ops_addruns(&r->x, r->dq, r->type, b->dqtmp, b->runs + 3 * b->nrun, 1,
		            (int64_t)r->hq * r->d, 0);
	} else {
		rc |= stage_bwd(r, b, &rk->bwd[0], &b->ks[b->bks[0]], r->dq, 0);
	}
	ops_mark(&r->x, 0, "kernel");
	if (b->ce) {
		ops_mark(&r->x, 0, "give");
		ce_return(r, b);
		ce_settle(r, b, 1);
	} else {
		give_back(r, b);
		ops_mark(&r->x, 0, "give");
		take_back(r, b);
	}
	ops_mark(&r->x, 0, "take");
	return rc;
}

/* Global token ranges of shard rows [q0, q1) of rank rr, adjacent merged. */
static int shard_ranges(const struct cp_bplan *p, int rr, int64_t q0, int64_t q1, int64_t (*rg)[2])
{
	int n = 0;

	for (int k = 0; k < p->per; k++) {
		int64_t a = k * p->C, e = a + p->C, g = p->rank[rr].chunk[k] * p->C - a;
		if (a < q0)
			a = q0;
		if (e > q1)
			e = q1;
		if (a >= e)
			continue;
		if (n > 0 && rg[n - 1][1] == g + a) {
			rg[n - 1][1] = g + e;
			continue;
		}
		rg[n][0] = g + a;
		rg[n][1] = g + e;
		n++;
	}
	return n;
}

/* Global token ranges of tokens [kv0, kv) of rank rr's key buffer: its
 * shard, then the blocks it received in arrival order; kv0 is 0 or the
 * shard's end. */
static int key_ranges(const struct cp_bplan *p, int rr, int64_t kv0, int64_t kv, int64_t (*kr)[2])
{
	int64_t c = p->per * p->C;
	int nk = kv0 > 0 ? 0 : shard_ranges(p, rr, 0, c, kr);

	for (int j = kv0 > 0 ? (kv0 - c) / p->T : 0; j < (kv - c) / p->T; j++) {
		int64_t t0 = p->rank[rr].blk[j] * p->T;
		if (nk > 0 && kr[nk - 1][1] == t0) {
			kr[nk - 1][1] = t0 + p->T;
		} else {
			kr[nk][0] = t0;
			kr[nk][1] = t0 + p->T;
			nk++;
		}
	}
	return nk;
}

static int layout(const struct cp_run *r, int rank, int64_t (*rg)[2])
{
	const struct bal *b = r->self;

	return shard_ranges(&b->p, rank, 0, b->p.per * b->p.C, rg);
}

/* The kernel state of rows [q0, q1) x keys [kv0, kv), made once. */
static int kstate(struct cp_run *r, struct bal *b, const struct cp_bstage *g, int *idx)
{
	const struct cp_bplan *p = &b->p;
	int64_t (*qr)[2], (*kr)[2];
	int nq, nk, st;
	struct kstate *k;
	struct attn_shape ls;

	for (int i = 0; i < b->nks; i++)
		if (b->ks[i].q0 == g->q0 && b->ks[i].q1 == g->q1 && b->ks[i].kv0 == g->kv0 &&
		    b->ks[i].kv == g->kv) {
			*idx = i;
			return CP_OK;
		}
	qr = xcalloc(p->per, sizeof *qr);
	kr = xcalloc(p->per + b->rk->nblk, sizeof *kr);
	nq = shard_ranges(p, b->me, g->q0, g->q1, qr);
	nk = key_ranges(p, b->me, g->kv0, g->kv, kr);
	k = &b->ks[b->nks];
	*k = (struct kstate){ g->q0, g->q1, g->kv0, g->kv, { 0 }, NULL };
	*idx = b->nks++;
	ls = cp_local_shape(r, g->q1 - g->q0, g->kv - g->kv0, r->hq, r->hkv);
	st = cp_plan(r, qr, nq, kr, nk, &ls, &k->piece, &k->kst);
	free(qr);
	free(kr);
	return st;
}

/* take_back's runs, made once: per step, where each returned partial's
 * tokens sit in own shard, and where in ret. */
static int return_runs(struct cp_run *r, struct bal *b)
{
	const struct cp_bplan *p = &b->p;
	int64_t *h = NULL;
	int n = 0, bad = 0;

	for (int s = 0; s < p->world - 1; s++) {
		int from = cp_bpeer(p, b->me, s, 1), fo, no = step_msgs(&p->rank[from], s, &fo);
		int64_t off = 0;

		b->run0[s] = n;
		for (int i = 0; i < no; i++) {
			int k = msg_runs(b, from, fo + i);

			h = xrealloc(h, 3 * (n + k) * sizeof *h);
			for (int j = 0; j < k; j++, n++) {
				h[3 * n] = b->so[j];
				h[3 * n + 1] = off;
				h[3 * n + 2] = b->len[j];
				off += b->len[j];
			}
		}
	}
	b->run0[p->world - 1] = n;
	b->nrun = n;
	if (b->rk->nbwd > 1) {
		const struct cp_bstage *g = &b->rk->bwd[b->rk->nbwd - 1];
		h = xrealloc(h, 3 * (n + 1) * sizeof *h);
		h[3 * n] = g->q0;
		h[3 * n + 1] = 0;
		h[3 * n + 2] = g->q1 - g->q0;
		n++;
	}
	b->runs = cp_alloc(r, (3 * n + 1) * sizeof *h, &bad);
	if (bad) {
		free(h);
		cp_fail(r, "out of memory for the transfers");
		return CP_OOM;
	}
	if (n > 0)
		ops_upload(&r->x, b->runs, h, 3 * n * sizeof *h);
	free(h);
	return CP_OK;
}

static int bal_setup(struct cp_run *r)
{
	struct bal *b = r->self;
	const struct cp_bplan *p = &b->p;
	/* nst: the most stages of any rank's pass, the backward's two at least */
	int bad = 0, bwd = r->job->pass == PASS_BWD, st, maxnb = 1, nst = 2;
	int64_t maxrows = 0;

	b->me = comm_rank(r->env->world);
	b->rk = &p->rank[b->me];
	b->c = r->c;
	b->E = (int64_t)r->hkv * r->d;
	b->nkey = b->c + b->rk->nblk * p->T;
	/* First, before any rank can fail alone: it is collective */
	/* Copy engines wherever every rank shares a node: the first stage
	 * then overlaps its blocks' transfer (NCCL's kernel gets no SM while
	 * a stage's persistent CTAs run; bench/NOTES.md, round 11) */
	for (int q = 0; q < p->world; q++)
		nst = p->rank[q].nfwd > nst ? p->rank[q].nfwd : nst;
	if (ipc_usable(r) && envnum("LONGATTN_BALANCED_CE", 1) != 0 &&
	    EV_STG + nst <= OPS_NEVENT) {
		void *bufs[2] = { r->k, bwd ? r->dk : NULL };

		/* fini's barrier then runs on every rank, a failed one too */
		b->ce = 1;
		st = ipc_init(&b->ipc, r, bufs, 2, NFLAG);
		if (st == CP_UNSUPPORTED) {
			/* Every rank alike: NCCL moves the blocks */
			b->ce = 0;
			if (b->me == 0)
				fprintf(stderr, "%s: balanced: no peer memory (%s): key blocks by NCCL\n",
				        program_invocation_short_name, b->ipc.why);
		} else if (st != CP_OK) {
			return st;
		}
	}
	/* two streams by default: 2 H200s, 8K a GPU, 2026-11-26: the
	 * window's forward -3.9 %, causal documents' -1.4 %, the rest level */
	b->conc = b->ce && envnum("LONGATTN_BALANCED_CONC", 1) != 0;
	if (b->ce && voff(r, b, b->me) != (char *)r->v - (char *)r->k) {
		cp_fail(r, "copy engines: a key buffer not laid out as cp_drive's");
		return CP_ERROR;
	}
	for (int rr = 0; rr < p->world; rr++)
		for (int i = 0; i < p->rank[rr].nmsg; i++)
			if (p->rank[rr].msg[i].nb > maxnb)
				maxnb = p->rank[rr].msg[i].nb;
	b->sv = xcalloc(2 * maxnb, sizeof *b->sv);
	b->rv = xcalloc(2 * maxnb, sizeof *b->rv);
	b->so = xcalloc(maxnb, sizeof *b->so);
	b->ko = xcalloc(maxnb, sizeof *b->ko);
	b->len = xcalloc(maxnb, sizeof *b->len);
	b->rin = xcalloc(b->rk->nmsg + 1, sizeof *b->rin);
	b->rout = xcalloc((size_t)p->world * (maxnb + 1), sizeof *b->rout);
	b->rret = xcalloc(p->world, sizeof *b->rret);
	b->retoff = xcalloc(p->world, sizeof *b->retoff);
	b->run0 = xcalloc(p->world + 1, sizeof *b->run0);
	/* ltmp: a room per partial forward stage (they may run at once),
	 * the backward's partial stage's after them */
	b->loff = xcalloc(b->rk->nfwd + 1, sizeof *b->loff);
	for (int i = 0; i < b->rk->nfwd + (bwd ? b->rk->nbwd : 0); i++) {
		const struct cp_bstage *g = i < b->rk->nfwd ? &b->rk->fwd[i] : &b->rk->bwd[i - b->rk->nfwd];
		if (i < b->rk->nfwd)
			b->loff[i] = maxrows * r->hq;
		if (g->q1 - g->q0 < b->c)
			maxrows += g->q1 - g->q0;
	}
	if (maxrows > 0)
		b->ltmp = cp_alloc(r, maxrows * r->hq * sizeof(float), &bad);
	if (bwd && b->rk->nbwd > 1) {
		const struct cp_bstage *g = &b->rk->bwd[b->rk->nbwd - 1];
		b->dqtmp = cp_alloc(r, (g->q1 - g->q0) * r->hq * r->d * r->es, &bad);
	}
	if (bwd) {
		int64_t nret = 0;
		for (int s = 0; s < p->world - 1; s++) {
			int from = cp_bpeer(p, b->me, s, 1), fo, no = step_msgs(&p->rank[from], s, &fo);
			b->retoff[s] = nret;
			for (int i = 0; i < no; i++)
				nret += 2 * p->rank[from].msg[fo + i].nb * p->T * b->E;
		}
		b->retoff[p->world - 1] = nret;
		b->ret = cp_alloc(r, (nret + 1) * r->es, &bad);
	}
	if (bad) {
		cp_fail(r, "out of memory for the transfers");
		return CP_OOM;
	}
	b->pos = xcalloc(p->nchunk, sizeof *b->pos);
	for (int rr = 0; rr < p->world; rr++)
		for (int k = 0; k < p->per; k++)
			b->pos[p->rank[rr].chunk[k]] = k;
	if (bwd && (st = return_runs(r, b)) != CP_OK)
		return st;
	b->ks = xcalloc(b->rk->nfwd + b->rk->nbwd, sizeof *b->ks);
	b->fks = xcalloc(b->rk->nfwd + 1, sizeof *b->fks);
	b->bks = xcalloc(b->rk->nbwd + 1, sizeof *b->bks);
	for (int i = 0; i < b->rk->nfwd; i++) {
		int n0 = b->nks;
		if ((st = kstate(r, b, &b->rk->fwd[i], &b->fks[i])) != CP_OK)
			return st;
		if (b->nks > n0 && b->ks[n0].piece.heads > 0)
			r->work += (double)b->ks[n0].piece.area / b->ks[n0].piece.heads * r->hq;
	}
	for (int i = 0; bwd && i < b->rk->nbwd; i++)
		if ((st = kstate(r, b, &b->rk->bwd[i], &b->bks[i])) != CP_OK)
			return st;
	return CP_OK;
}

static void bal_fini(struct cp_run *r)
{
	struct bal *b = r->self;

	if (b->ce)
		ipc_fini(&b->ipc, r);
	ops_sync(&r->x);
	for (int i = 0; i < b->nks; i++) {
		if (b->ks[i].kst)
			r->env->kern->fini(b->ks[i].kst);
		mask_free(&b->ks[i].piece);
	}
	cp_free(r, (void *[]){ b->ltmp, b->ret, b->runs, b->dqtmp }, 4);
	free(b->loff);
	free(b->ks);
	free(b->fks);
	free(b->bks);
	free(b->pos);
	free(b->sv);
	free(b->rv);
	free(b->so);
	free(b->ko);
	free(b->len);
	free(b->rin);
	free(b->rout);
	free(b->rret);
	free(b->retoff);
	free(b->run0);
}

static int run(const struct cp_env *env, const struct cp_job *job, struct cp_result *res)
{
	const struct attn_shape *s = &job->shape;
	int W = comm_size(env->world), G = env->node_size > 0 ? env->node_size : W, st;
	struct bal *b;
	char e[160];

	memset(res, 0, sizeof *res);
	res->ulysses = 1;
	res->ring = W;
	if (s->batch != 1)
		return cp_refuse(res, "balanced: batch %d (one sequence only)", s->batch);
	if (W % G)
		G = W;
	b = xcalloc(1, sizeof *b);
	if (cp_balanced_plan(job->mask, W, G, s, &b->p, e, sizeof e) < 0) {
		free(b);
		return cp_refuse(res, "%s", e);
	}
	st = cp_drive(&(struct cp_run){ .env = env, .job = job, .res = res, .U = 1, .R = W,
	                                .layout = layout, .nrg = b->p.per,
	                                .kpad = b->p.rank[comm_rank(env->world)].nblk * b->p.T,
	                                .self = b, .setup = bal_setup, .fwd = bal_fwd,
	                                .bwd = bal_bwd, .fini = bal_fini });
	cp_balanced_free(&b->p);
	free(b);
	return st;
}

/* A stage's piece in the schedule: its index, -1 for an empty one, -2 on
 * error (s->why). */
static int sched_piece(struct cp_sched *s, const struct cp_job *job, const struct cp_bplan *p,
                       int rr, const struct cp_bstage *g)
{
	int64_t (*qr)[2] = xcalloc(p->per, sizeof *qr);
	int64_t (*kr)[2] = xcalloc(p->per + p->rank[rr].nblk, sizeof *kr);
	int nq = shard_ranges(p, rr, g->q0, g->q1, qr), nk = key_ranges(p, rr, g->kv0, g->kv, kr);
	int ai = cps_attn(s, job->mask, qr, nq, kr, nk, job->shape.hq, job->shape.hkv);

	free(qr);
	free(kr);
	if (ai < 0)
		return -2;
	return s->attn[ai].m.area > 0 ? ai : -1;
}

/* The schedule of bal_fwd and bal_bwd.  Forward: every send (fetch
 * enqueues them all at once, before any stage) with the local-only stage
 * under it, then a step per stage.  Backward: the fetch, one step over
 * every row, then the fp32 dK/dV partials of the received blocks go home.  Sends are counted at
 * the sender as one exchange with several peers (CPX_A2A, one group). */
static int sched(const struct cp_job *job, int W, int ns, struct cp_sched *s)
{
	const struct attn_shape *sh = &job->shape;
	int G = ns > 0 ? ns : W, bwd = job->pass == PASS_BWD, nst = 0, rc = CP_OK;
	struct cp_bplan p;

	s->ulysses = 1;
	s->ring = W;
	if (sh->batch != 1) {
		snprintf(s->why, sizeof s->why, "balanced: batch %d (one sequence only)", sh->batch);
		return CP_UNSUPPORTED;
	}
	if (W % G)
		G = W;
	if (cp_balanced_plan(job->mask, W, G, sh, &p, s->why, sizeof s->why) < 0)
		return CP_UNSUPPORTED;
	for (int r = 0; r < W; r++)
		if (p.rank[r].nfwd > nst)
			nst = p.rank[r].nfwd;
	if (cps_init(s, W, G, bwd ? 3 : nst + 1, 1, W) < 0) {
		cp_balanced_free(&p);
		return CP_ERROR;
	}
	for (int me = 0; me < W && rc == CP_OK; me++) {
		const struct cp_brank *rk = &p.rank[me];
		struct cp_step *first = cps_at(s, me, 0);
		int k0 = !bwd && rk->nfwd > 0 && rk->fwd[0].wait == 0 ? 0 : 1, ai;

		for (int st = 0; st < W - 1; st++) {
			int to = cp_bpeer(&p, me, st, 1), fo, no = step_msgs(&p.rank[to], st, &fo);
			double nb = 0;
			for (int m = 0; m < no; m++)
				nb += p.rank[to].msg[fo + m].nb;
			if (nb > 0) {
				cps_xfer(s, &first->x, CPX_A2A, me, to, nb * p.kv_bytes);
				first->x.nops++;
			}
			/* backward: what this rank read of to's blocks goes back */
			if (bwd) {
				int from = cp_bpeer(&p, me, st, 0), fi, ni = step_msgs(rk, st, &fi);
				double back = 0;
				for (int m = 0; m < ni; m++)
					back += rk->msg[fi + m].nb;
				if (back > 0) {
					struct cp_step *last = cps_at(s, me, 2);
					cps_xfer(s, &last->x, CPX_A2A, me, from, back * p.kv_bytes);
					last->x.nops++;
				}
			}
		}
		if (bwd) {
			struct cp_bstage all = { 0, p.per * p.C, p.per * p.C + rk->nblk * p.T, 0, 0, 0 };
			if ((ai = sched_piece(s, job, &p, me, rk->nbwd == 1 ? &rk->bwd[0] : &all)) < -1)
				rc = CP_ERROR;
			cps_at(s, me, 1)->attn = ai;
			/* the partials added to own dK/dV: both read, one written */
			cps_at(s, me, 2)->mem += rk->nblk * p.kv_bytes * 3;
			cps_at(s, me, 2)->nmem += 2;
			continue;
		}
		for (int i = 0; i < rk->nfwd && rc == CP_OK; i++) {
			if ((ai = sched_piece(s, job, &p, me, &rk->fwd[i])) < -1)
				rc = CP_ERROR;
			cps_at(s, me, k0 + i)->attn = ai;
		}
	}
	cp_balanced_free(&p);
	return rc;
}

const struct cp_ops cp_balanced = {
	"balanced", "chunks dealt by mask work, only the key blocks read move, row stages overlap them", run,
	sched
};
