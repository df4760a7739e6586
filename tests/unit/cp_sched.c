/* The strategies' schedules (cp_ops.sched, for cpbench --predict) against
 * brute force on small masks: per rank and step, the attention piece (its
 * queries and keys as token sets, its area by enumerating the pairs with
 * the FFA predicate of mask_gen.h) and the bytes sent inside and across
 * nodes, by counting the elements of what the step moves: the zigzag
 * members' tokens found token by token, the K/V buffers followed around
 * the double ring as they pass, head shards from the head ranges.  Every
 * strategy, worlds 1-8, several node sizes, GQA with and without
 * replicated KV heads, both passes.  Also: every (query, key, head) pair
 * is computed exactly once over the ranks. */
#include <stdlib.h>
#include <string.h>

#include "cp/cp_impl.h"
#include "mask_gen.h"
#include "tap.h"

enum { S = 96, HD = 4, ES = 2 };

struct bf {
	const struct mask *m;
	const struct gmask *g;       /* NULL: blocks body, use mask_allows */
	int w, ns, U, R, W, hq, hkv, bwd;
};

/* Ring member of token t: zigzag chunks j and 2R-1-j of 2R. */
static int member(int R, int64_t t)
{
	int ch = (int)(t / (S / (2 * R)));

	return R == 1 ? 0 : ch < R ? ch : 2 * R - 1 - ch;
}

/* Position of token t among its member's tokens (in increasing order). */
static int64_t pos(int R, int64_t t)
{
	int64_t n = 0;

	for (int64_t x = 0; x < t; x++)
		n += member(R, x) == member(R, t);
	return n;
}

/* Token t is in the shard of Ulysses rank u of its member. */
static int in_shard(const struct bf *z, int64_t t, int u)
{
	int64_t c = S / (z->R * z->U);

	return pos(z->R, t) / c == u;
}

static uint64_t allows(const struct bf *z, int64_t q, int64_t k)
{
	uint64_t n = 0;

	if (z->g)
		return g_count(z->g, q, k);
	for (int h = 0; h < z->m->heads; h++)
		n += mask_allows(z->m, h, q, k);
	return n;
}

/* KV heads that Ulysses rank u's query heads read. */
static int kvheads(const struct bf *z, int u)
{
	int hql = z->hq / z->U, g = z->hq / z->hkv, n = 0, last = -1;

	for (int h = u * hql; h < (u + 1) * hql; h++)
		if (h / g != last) {
			last = h / g;
			n++;
		}
	return n;
}

/* The tokens of a piece's ranges, as a set. */
static void tokens(int64_t (*rg)[2], int n, char *set)
{
	memset(set, 0, S);
	for (int i = 0; i < n; i++)
		for (int64_t t = rg[i][0]; t < rg[i][1]; t++)
			set[t]++;
}

struct expect {
	int qm, km;                  /* members of the piece (-1: none; km -2: all keys) */
	double bytes[2];             /* sent, inside and across nodes */
};

static int node(const struct bf *z, int r)
{
	return r / z->ns;
}

/* Elements of the K/V buffer of member src held by Ulysses rank u,
 * counted token by token. */
static double kvbuf(const struct bf *z, int src, int u)
{
	double n = 0;

	for (int64_t t = 0; t < S; t++)
		n += member(z->R, t) == src;
	return n * kvheads(z, u) * HD;
}

static void send(const struct bf *z, struct expect *e, int me, int to, double bytes)
{
	e->bytes[node(z, me) != node(z, to)] += bytes;
}

/* All-to-alls of the Ulysses group: what rank (j,u) sends to each i. */
static void a2a(const struct bf *z, struct expect *e, int j, int u, int in)
{
	int me = j * z->U + u;

	for (int i = 0; i < z->U; i++) {
		double own = 0, theirs = 0;
		if (i == u)
			continue;
		for (int64_t t = 0; t < S; t++) {
			own += member(z->R, t) == j && in_shard(z, t, u);
			theirs += member(z->R, t) == j && in_shard(z, t, i);
		}
		if (in && !z->bwd)          /* q, k, v of own tokens, i's heads */
			send(z, e, me, j * z->U + i, own * HD * ES * (z->hq / z->U + 2 * kvheads(z, i)));
		else if (in)                /* dout */
			send(z, e, me, j * z->U + i, own * HD * ES * (z->hq / z->U));
		else if (!z->bwd)           /* o and lse of i's tokens, own heads */
			send(z, e, me, j * z->U + i, theirs * (z->hq / z->U) * (HD * ES + 4));
		else                        /* dq, dk, dv */
			send(z, e, me, j * z->U + i, theirs * HD * ES * (z->hq / z->U + 2 * kvheads(z, u)));
	}
}

/* The hybrid's steps for rank (j,u): the K/V buffers followed around the
 * double ring. */
static int hybrid_expect(const struct bf *z, int me, struct expect *e)
{
	int j = me / z->U, u = me % z->U, W = z->W, Ro = z->R / W, k = 0;
	int *ob = malloc(z->R * sizeof *ob), *ib = malloc(z->R * sizeof *ib), *t2 = malloc(z->R * sizeof *t2);
	int wo = j / W, wi = j % W, in = wo * W + (wi + 1) % W, on = (wo + 1) % Ro * W + wi;

	memset(e, 0, 64 * sizeof *e);
	for (int i = 0; i < 64; i++)
		e[i].qm = e[i].km = -1;
	if (z->U > 1)
		a2a(z, &e[k++], j, u, 1);
	for (int m = 0; m < z->R; m++)
		ob[m] = m;
	if (z->R == 1) {
		e[k].qm = j;
		e[k++].km = 0;
	}
	for (int t = 0; z->R > 1 && t < Ro; t++) {
		int first = k;
		memcpy(ib, ob, z->R * sizeof *ib);
		for (int s = 0; s < W; s++, k++) {
			e[k].qm = j;
			e[k].km = ib[j];
			if (s < W - 1)
				send(z, &e[k], me, in * z->U + u, 2 * ES * kvbuf(z, ib[j], u));
			if (z->bwd && s > 0)   /* dK/dV of the last step's buffer, fp32 */
				send(z, &e[k], me, in * z->U + u, 2 * 4 * kvbuf(z, e[k - 1].km, u));
			/* pass the buffers on */
			for (int m = 0; m < z->R; m++)
				t2[m] = ib[(m / W) * W + (m % W - 1 + W) % W];
			memcpy(ib, t2, z->R * sizeof *ib);
		}
		if (t < Ro - 1)
			send(z, &e[first], me, on * z->U + u, 2 * ES * kvbuf(z, ob[j], u));
		if (z->bwd && W > 1) {
			send(z, &e[k], me, in * z->U + u, 2 * 4 * kvbuf(z, e[k - 1].km, u));
			k++;
		}
		/* the window's dK/dV total goes around the outer ring with the
		 * next window (or in the last step): it is for the K/V this
		 * member held at the window's start */
		if (z->bwd && Ro > 1)
			send(z, &e[k], me, on * z->U + u, 2 * 4 * kvbuf(z, ob[j], u));
		for (int m = 0; m < z->R; m++)
			t2[m] = ob[(m / W - 1 + Ro) % Ro * W + m % W];
		memcpy(ob, t2, z->R * sizeof *ob);
	}
	if (z->R > 1)
		k++;
	if (z->U > 1)
		a2a(z, &e[k++], j, u, 0);
	free(ob);
	free(ib);
	free(t2);
	return k;
}

static int allgather_expect(const struct bf *z, int me, struct expect *e, int G)
{
	double own = 0;

	memset(e, 0, 64 * sizeof *e);
	for (int64_t t = 0; t < S; t++)
		own += member(z->R, t) == me;
	for (int k = 0; k <= G; k++) {
		e[k].qm = k ? me : -1;
		e[k].km = k ? -2 : -1;
		for (int i = 0; i < z->w; i++) {
			if (i == me)
				continue;
			if (k < G)
				send(z, &e[k], me, i, own * (z->hkv / G) * HD * ES * 2);
			if (k > 0 && z->bwd)
				send(z, &e[k], me, i, own * (z->hkv / G) * HD * 4 * 2);
		}
	}
	return G + 1;
}

/* One strategy on one job: every rank's every step against brute force;
 * 1 when all agree (else a few lines say where). */
static int check(const struct cp_ops *op, const struct bf *z0, struct cp_job *job, const char *what)
{
	struct cp_sched s = { 0 };
	struct bf z = *z0;
	struct expect e[64];
	char qs[S], ks[S];
	int st = op->sched(job, z.w, z.ns, &s), good = 1, nbad = 0;
	double total = 0;

	if (st != CP_OK) {
		printf("# %s %s: sched %d: %s\n", op->name, what, st, s.why);
		return 0;
	}
	z.U = s.ulysses;
	z.R = s.ring;
	for (int me = 0; me < z.w; me++) {
		int n = strcmp(op->name, "ring_allgather") == 0
		        ? allgather_expect(&z, me, e, s.nsteps - 1) : hybrid_expect(&z, me, e);

		if (n != s.nsteps) {
			good = 0;
			if (nbad++ < 3)
				printf("# %s %s: rank %d: %d steps, brute force %d\n", op->name, what, me,
				       s.nsteps, n);
			continue;
		}
		for (int k = 0; k < n; k++) {
			const struct cp_step *p = cps_at(&s, me, k);
			double b[2];
			uint64_t area = 0;
			int hq = 0, pgood = 1;

			/* the piece: token sets, then the area pair by pair */
			if (e[k].qm >= 0) {
				for (int64_t q = 0; q < S; q++)
					for (int64_t kk = 0; kk < S; kk++)
						if (member(z.R, q) == e[k].qm &&
						    (e[k].km == -2 || member(z.R, kk) == e[k].km))
							area += allows(&z, q, kk);
			}
			if (p->attn >= 0) {
				const struct cp_attn *a = &s.attn[p->attn];
				tokens(a->qr, a->nq, qs);
				tokens(a->kr, a->nk, ks);
				for (int64_t t = 0; t < S; t++) {
					pgood &= qs[t] == (e[k].qm >= 0 && member(z.R, t) == e[k].qm);
					pgood &= ks[t] == (e[k].km == -2 || (e[k].km >= 0 && member(z.R, t) == e[k].km));
				}
				pgood &= a->m.area == area && area > 0;
				hq = a->hq;
				total += (double)a->m.area * a->hq / z.m->heads;
			} else {
				pgood &= area == 0;
			}
			for (int c = 0; c < 2; c++)
				b[c] = p->x.bytes[c] + p->xs.bytes[c] + p->x2.bytes[c];
			pgood &= b[0] == e[k].bytes[0] && b[1] == e[k].bytes[1];
			if (!pgood) {
				good = 0;
				if (nbad++ < 3)
					printf("# %s %s: rank %d step %d: piece %d (hq %d) area %llu, brute %llu; "
					       "bytes %.0f/%.0f, brute %.0f/%.0f\n", op->name, what, me, k, p->attn, hq,
					       p->attn >= 0 ? (unsigned long long)s.attn[p->attn].m.area : 0ULL,
					       (unsigned long long)area, b[0], b[1], e[k].bytes[0], e[k].bytes[1]);
			}
		}
	}
	/* every pair on every query head once */
	if (total != (double)z.m->area / z.m->heads * z.hq) {
		good = 0;
		printf("# %s %s: pairs not covered once\n", op->name, what);
	}
	cp_sched_free(&s);
	return good;
}

/* loongtrain's documented default window: the members a node holds. */
static int window(int ns, int U, int R)
{
	int W = ns / U;

	if (W < 1)
		W = 1;
	while (W > 1 && R % W)
		W--;
	return W;
}

static void masks(struct mask *m, struct gmask *g, int *nm)
{
	struct rng r;
	char err[160];
	int n = 0;

	g[n] = (struct gmask){ .sq = S, .sk = S };
	g_add(&g[n], 0, S, 0, S, MASK_FULL);
	n++;
	g[n] = (struct gmask){ .sq = S, .sk = S };
	g_add(&g[n], 0, S, 0, S, MASK_CAUSAL);
	n++;
	/* documents, a window band, and random grids */
	g[n] = (struct gmask){ .sq = S, .sk = S };
	g_add(&g[n], 0, 7, 0, 7, MASK_CAUSAL);
	g_add(&g[n], 7, 60, 7, 60, MASK_CAUSAL);
	g_add(&g[n], 60, 61, 60, 61, MASK_FULL);
	g_add(&g[n], 61, S, 61, S, MASK_FULL);
	n++;
	g[n] = (struct gmask){ .sq = S, .sk = S };
	g_add(&g[n], 0, 10, 0, 10, MASK_CAUSAL);
	g_add(&g[n], 10, S, 0, S, MASK_BICAUSAL);
	n++;
	rng_seed(&r, 16);
	for (int i = 0; i < 3; i++, n++)
		g_random(&g[n], &r, S, S);
	for (int i = 0; i < n; i++)
		if (g_tomask(&g[i], &m[i], err, sizeof err) < 0)
			printf("# mask %d: %s\n", i, err);
	*nm = n;
}

int main(void)
{
	static struct gmask g[8];
	struct mask m[9];
	int nm, worlds[] = { 1, 2, 3, 4, 6, 8 };
	extern const struct cp_ops cp_ulysses, cp_ring_p2p, cp_ring_allgather, cp_usp, cp_loongtrain;

	masks(m, g, &nm);
	{
		/* a block-sparse body, two mask heads (no Ulysses for it) */
		int64_t qb[] = { 0, 16, 40, 96 }, kb[] = { 0, 8, 32, 48, 96 };
		struct rng r;
		char err[160];

		rng_seed(&r, 5);
		mask_init_blocks(&m[nm], S, S, 2, 3, qb, 4, kb, "block_sparse_uniform", "");
		for (int h = 0; h < 2; h++)
			for (int i = 0; i < 3; i++)
				for (int j = 0; j < 4; j++)
					if (rng_below(&r, 2))
						mask_setblock(&m[nm], h, i, j);
		if (mask_finish(&m[nm], err, sizeof err) < 0)
			printf("# block mask: %s\n", err);
	}

	for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++) {
		int w = worlds[wi];
		for (int ns = 1; ns <= w; ns++) {
			const struct cp_ops *ops[] = { &cp_ulysses, &cp_ring_p2p, &cp_ring_allgather,
			                               &cp_usp, &cp_loongtrain };
			if (w % ns || (ns != 1 && ns != 2 && ns != 4 && ns != w))
				continue;
			for (int o = 0; o < 5; o++) {
				int good = 1, refusals = 1, nrun = 0, U = 1, R = 1;
				for (int mi = 0; mi <= nm; mi++)
					for (int hi = 0; hi < 3; hi++)
						for (int bwd = 0; bwd < 2; bwd++) {
							int hkv = (int[]){ 8, 2, 1 }[hi], st;
							struct cp_job job = { .mask = &m[mi], .pass = bwd ? PASS_BWD : PASS_FWD,
								.shape = { .sq = S, .sk = S, .batch = 1, .hq = 8, .hkv = hkv,
								           .hd = HD, .dtype = DT_BF16, .scale = 0.5 } };
							struct bf z = { .m = &m[mi], .g = mi < nm ? &g[mi] : NULL, .w = w,
							                .ns = ns, .hq = 8, .hkv = hkv, .bwd = bwd };
							struct cp_sched s = { 0 };
							char what[96];

							snprintf(what, sizeof what, "w %d node %d mask %d kv %d %s", w, ns,
							         mi, hkv, bwd ? "bwd" : "fwd");
							st = ops[o]->sched(&job, w, ns, &s);
							U = s.ulysses > 0 ? s.ulysses : 1;
							R = s.ring;
							cp_sched_free(&s);
							/* refusals: heads or per-head masks that do not split */
							if (st == CP_UNSUPPORTED) {
								refusals &= 8 % U || (hkv % U && U % hkv) ||
								            (m[mi].heads > 1 && U > 1);
								continue;
							}
							z.W = o == 4 ? window(ns, U, w / U) : w / U;
							good &= check(ops[o], &z, &job, what);
							nrun++;
						}
				ok(good && refusals, "%s on %d ranks, %d a node (U %d x R %d): %d jobs, pieces, "
				   "areas and bytes of every rank and step as brute force counts them%s",
				   ops[o]->name, w, ns, U, R, nrun, refusals ? "" : "; unsupported where heads split");
			}
		}
	}
	/* degrees asked for: usp 2 x 4, loongtrain ring 4 in windows of 2 */
	{
		struct cp_job job = { .mask = &m[2], .pass = PASS_BWD, .ulysses = 2,
			.shape = { .sq = S, .sk = S, .batch = 1, .hq = 8, .hkv = 2, .hd = HD,
			           .dtype = DT_BF16, .scale = 0.5 } };
		struct bf z = { .m = &m[2], .g = &g[2], .w = 8, .ns = 4, .hq = 8, .hkv = 2, .bwd = 1, .W = 4 };

		ok(check(&cp_usp, &z, &job, "w 8 node 4 --ulysses 2"), "usp --ulysses 2 on 8 ranks");
		job.ulysses = 0;
		job.ring = 4;
		job.window = 2;
		z.W = 2;
		ok(check(&cp_loongtrain, &z, &job, "w 8 node 4 --ring 4 window 2 bwd") &&
		   (job.pass = PASS_FWD, z.bwd = 0, check(&cp_loongtrain, &z, &job, "ring 4 window 2 fwd")),
		   "loongtrain --ring 4 in windows of 2 on 8 ranks");
	}
	/* balanced: its own plan decides the layout, so the brute force is of
	 * what the plan says: every pair once, and each rank sends exactly the
	 * key blocks its peers receive from it (forward), and partials of them
	 * back in the same dtype (backward) */
	{
		extern const struct cp_ops cp_balanced;
		int good = 1, nrun = 0;

		for (int mi = 0; mi <= nm; mi++)
			for (int w = 1; w <= 4; w *= 2)
				for (int bwd = 0; bwd < 2; bwd++) {
					struct cp_job job = { .mask = &m[mi], .pass = bwd ? PASS_BWD : PASS_FWD,
						.shape = { .sq = S, .sk = S, .batch = 1, .hq = 8, .hkv = 2, .hd = HD,
						           .dtype = DT_BF16, .scale = 0.5 } };
					struct cp_sched s = { 0 };
					struct cp_bplan p;
					char err[160];
					double total = 0, bytes = 0, want = 0;

					if (cp_balanced_plan(&m[mi], w, w > 1 ? w / 2 : 1, &job.shape, &p, err,
					                     sizeof err) < 0) {
						printf("# balanced plan: %s\n", err);
						good = 0;
						continue;
					}
					for (int r = 0; r < w; r++)
						want += p.rank[r].nblk * p.kv_bytes * (bwd ? 2 : 1);
					cp_balanced_free(&p);
					if (cp_balanced.sched(&job, w, w > 1 ? w / 2 : 1, &s) != CP_OK) {
						printf("# balanced sched: %s\n", s.why);
						good = 0;
						continue;
					}
					for (int me = 0; me < w; me++)
						for (int k = 0; k < s.nsteps; k++) {
							const struct cp_step *st = cps_at(&s, me, k);
							if (st->attn >= 0)
								total += (double)s.attn[st->attn].m.area * s.attn[st->attn].hq /
								         m[mi].heads;
							bytes += st->x.bytes[0] + st->x.bytes[1];
						}
					if (total != (double)m[mi].area / m[mi].heads * 8 || bytes != want) {
						printf("# balanced mask %d w %d %s: pairs %.0f want %.0f, bytes %.0f want %.0f\n",
						       mi, w, bwd ? "bwd" : "fwd", total,
						       (double)m[mi].area / m[mi].heads * 8, bytes, want);
						good = 0;
					}
					cp_sched_free(&s);
					nrun++;
				}
		ok(good, "balanced on 1, 2, 4 ranks: %d jobs, every pair once, the plan's blocks sent", nrun);
	}
	for (int i = 0; i <= nm; i++)
		mask_free(&m[i]);
	return tap_done();
}
