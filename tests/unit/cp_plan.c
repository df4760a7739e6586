/* balanced's plan (cp_balanced_plan) on small masks, against brute force
 * over every pair: the shards partition the sequence; each rank receives
 * exactly the key blocks of others that its rows read, from the peer that
 * holds them at that peer's step, inside the node first; every allowed
 * pair is computed exactly once by the forward stages and once by the
 * backward ones (dK and dV written once where the backward splits); the
 * plan is a pure function; and the work is balanced. */
#include <stdlib.h>
#include <string.h>

#include "cp/cp_impl.h"
#include "pattern.h"
#include "rng.h"
#include "tap.h"

static struct attn_shape shape(int64_t S)
{
	return (struct attn_shape){ S, S, 1, 8, 4, 32, DT_BF16, 0.1767767, 0 };
}

/* The global token of shard row q of rank r. */
static int64_t tok(const struct cp_bplan *p, int r, int64_t q)
{
	return p->rank[r].chunk[q / p->C] * p->C + q % p->C;
}

/* The global token of key buffer row k of rank r. */
static int64_t ktok(const struct cp_bplan *p, int r, int64_t k)
{
	int64_t c = p->per * p->C;

	return k < c ? tok(p, r, k) : p->rank[r].blk[(k - c) / p->T] * p->T + (k - c) % p->T;
}

/* Any mask head */
static int allows(const struct mask *m, int64_t q, int64_t k)
{
	for (int h = 0; h < m->heads; h++)
		if (mask_allows(m, h, q, k))
			return 1;
	return 0;
}

/* Pairs of the stages st[0..n) of rank r that the mask allows, with every
 * row in exactly one stage and every allowed pair of those rows inside the
 * stage's key prefix; -1 if not. */
/* The backward stages st[0..n) of rank r: key ranges [kv0, kv) that tile
 * the key buffer (dK and dV written once), and every allowed pair of
 * r's rows in exactly one stage (rows may repeat: their dQ is summed).
 * The allowed pairs, or -1. */
static int64_t bpairs(const struct mask *m, const struct cp_bplan *p, int r,
                      const struct cp_bstage *st, int n, int64_t S)
{
	int64_t c = p->per * p->C, nkey = c + p->rank[r].nblk * p->T, tot = 0, at = 0;
	int64_t *kat = malloc(S * sizeof *kat);

	for (int64_t k = 0; k < S; k++)
		kat[k] = -1;
	for (int64_t k = 0; k < nkey; k++) {
		if (kat[ktok(p, r, k)] >= 0)
			goto bad;
		kat[ktok(p, r, k)] = k;
	}
	for (int i = 0; i < n; i++) {
		if (st[i].kv0 != at || st[i].kv <= st[i].kv0)
			goto bad;
		at = st[i].kv;
	}
	if (at != nkey)
		goto bad;
	for (int64_t q = 0; q < c; q++)
		for (int64_t k = 0; k < S; k++) {
			int a = 0, in = 0;
			for (int h = 0; h < m->heads; h++)
				a += mask_allows(m, h, tok(p, r, q), k);
			if (a == 0)
				continue;
			for (int i = 0; i < n; i++)
				in += q >= st[i].q0 && q < st[i].q1 && kat[k] >= st[i].kv0 && kat[k] < st[i].kv;
			if (in != 1)
				goto bad;
			tot += a;
		}
	free(kat);
	return tot;
bad:
	free(kat);
	return -1;
}

static int64_t pairs(const struct mask *m, const struct cp_bplan *p, int r,
                     const struct cp_bstage *st, int n, int64_t S)
{
	int64_t c = p->per * p->C, tot = 0;
	char *row = calloc(c, 1), *kin = malloc(S);

	for (int i = 0; i < n; i++) {
		memset(kin, 0, S);
		for (int64_t k = 0; k < st[i].kv; k++)
			if (kin[ktok(p, r, k)]++)
				goto bad;      /* a key twice in the buffer */
		for (int64_t q = st[i].q0; q < st[i].q1; q++) {
			if (row[q]++)
				goto bad;
			for (int64_t k = 0; k < S; k++) {
				int a = 0;
				for (int h = 0; h < m->heads; h++)
					a += mask_allows(m, h, tok(p, r, q), k);
				if (a > 0 && !kin[k])
					goto bad;
				tot += a;
			}
		}
	}
	for (int64_t q = 0; q < c; q++)
		if (!row[q])
			goto bad;
	free(row);
	free(kin);
	return tot;
bad:
	free(row);
	free(kin);
	return -1;
}

static void check(const char *name, const struct mask *m, int W, int G)
{
	struct attn_shape s = shape(m->sq);
	struct cp_bplan p, p2;
	char err[160] = "";
	int64_t S = m->sq, c = S / W, nfp = 0, nbp = 0;
	int good = 1, exact = 1, peers = 1, order = 1, same = 1;
	char *seen = calloc(S, 1);

	if (cp_balanced_plan(m, W, G, &s, &p, err, sizeof err) != 0) {
		ok(0, "%s W=%d G=%d: plan: %s", name, W, G, err);
		free(seen);
		return;
	}
	/* Shards: per chunks each, together the sequence once */
	for (int r = 0; r < W; r++)
		for (int64_t q = 0; q < c; q++)
			good &= !seen[tok(&p, r, q)]++;
	for (int64_t t = 0; t < S; t++)
		good &= seen[t] == 1;
	for (int i = 0; i < p.nchunk; i++) {
		int in = 0;
		for (int k = 0; k < p.per; k++)
			in += p.rank[p.owner[i]].chunk[k] == i;
		good &= in == 1;
	}
	ok(good && p.per * p.C == c && p.C % p.T == 0,
	   "%s W=%d G=%d: %d chunks of %lld per rank partition the sequence", name, W, G, p.per,
	   (long long)p.C);

	for (int r = 0; r < W; r++) {
		const struct cp_brank *rk = &p.rank[r];
		int64_t nb = S / p.T;
		char *got = calloc(nb, 1), *want = calloc(nb, 1);
		int lastintra = -1, firstinter = 1 << 30;

		/* Blocks its rows read, held elsewhere */
		for (int64_t q = 0; q < c; q++)
			for (int64_t k = 0; k < S; k++)
				if (allows(m, tok(&p, r, q), k) && p.owner[k / p.C] != r)
					want[k / p.T] = 1;
		for (int i = 0; i < rk->nmsg; i++) {
			const struct cp_bmsg *g = &rk->msg[i];
			peers &= g->peer == cp_bpeer(&p, r, g->step, 0);
			peers &= cp_bpeer(&p, cp_bpeer(&p, r, g->step, 0), g->step, 1) == r;
			peers &= i == 0 || (g->b0 == rk->msg[i - 1].b0 + rk->msg[i - 1].nb &&
			                    g->step >= rk->msg[i - 1].step);
			for (int j = g->b0; j < g->b0 + g->nb; j++) {
				int64_t t = rk->blk[j];
				peers &= p.owner[t * p.T / p.C] == g->peer;
				exact &= !got[t]++;
			}
			if (g->peer / G == r / G)
				lastintra = i;
			else if (i < firstinter)
				firstinter = i;
		}
		order &= lastintra < firstinter;
		for (int64_t t = 0; t < nb; t++)
			exact &= got[t] == want[t];
		free(got);
		free(want);
		{
			int64_t f = pairs(m, &p, r, rk->fwd, rk->nfwd, S);
			int64_t b = bpairs(m, &p, r, rk->bwd, rk->nbwd, S);
			nfp = f < 0 || nfp < 0 ? -1 : nfp + f;
			nbp = b < 0 || nbp < 0 ? -1 : nbp + b;
		}
	}
	ok(exact, "%s W=%d G=%d: each rank receives exactly the blocks its rows read, once", name, W, G);
	ok(peers, "%s W=%d G=%d: from their holders, at paired steps", name, W, G);
	ok(order, "%s W=%d G=%d: blocks from inside the node arrive first", name, W, G);
	ok(nfp == (int64_t)m->area && nbp == (int64_t)m->area,
	   "%s W=%d G=%d: every allowed pair once, forward %lld and backward %lld of %llu", name, W, G,
	   (long long)nfp, (long long)nbp, (unsigned long long)m->area);

	/* A pure function: the same plan again */
	if (cp_balanced_plan(m, W, G, &s, &p2, err, sizeof err) == 0) {
		same = p2.per == p.per && memcmp(p2.owner, p.owner, p.nchunk * sizeof *p.owner) == 0;
		for (int r = 0; same && r < W; r++)
			same = p2.rank[r].nblk == p.rank[r].nblk && p2.rank[r].nmsg == p.rank[r].nmsg &&
			       p2.rank[r].nfwd == p.rank[r].nfwd &&
			       memcmp(p2.rank[r].chunk, p.rank[r].chunk, p.per * sizeof(int)) == 0 &&
			       memcmp(p2.rank[r].blk, p.rank[r].blk, p.rank[r].nblk * sizeof(int64_t)) == 0 &&
			       memcmp(p2.rank[r].fwd, p.rank[r].fwd, p.rank[r].nfwd * sizeof *p.rank[r].fwd) == 0;
		cp_balanced_free(&p2);
	} else {
		same = 0;
	}
	ok(same, "%s W=%d G=%d: the same inputs give the same plan", name, W, G);
	cp_balanced_free(&p);
	free(seen);
}

static void slices(struct mask *m, int64_t S, const char *name, const int64_t (*sl)[5], int n)
{
	char err[160];

	mask_init(m, S, S, name, "");
	for (int i = 0; i < n; i++)
		mask_add(m, sl[i][0], sl[i][1], sl[i][2], sl[i][3], (int)sl[i][4]);
	if (mask_finish(m, err, sizeof err) != 0)
		ok(0, "%s: %s", name, err);
}

/* prefix LM with a prefix of 100, and a row range that reads nothing at all */
static const int64_t prefix_holes[][5] = {
	{ 0, 100, 0, 100, MASK_FULL }, { 100, 300, 0, 100, MASK_FULL },
	{ 100, 300, 100, 300, MASK_CAUSAL }, { 400, 512, 0, 512, MASK_CAUSAL }
};

int main(void)
{
	struct mask m;
	struct rng g;
	char err[160];
	int64_t S = 512;

	{
		const int64_t sl[][5] = { { 0, 512, 0, 512, MASK_CAUSAL } };
		slices(&m, S, "causal", sl, 1);
		check("causal", &m, 4, 2);
		check("causal", &m, 2, 2);
		check("causal", &m, 4, 1);
		mask_free(&m);
	}
	{
		/* documents of 40, 200, 100, 172 tokens */
		const int64_t sl[][5] = { { 0, 40, 0, 40, MASK_CAUSAL }, { 40, 240, 40, 240, MASK_CAUSAL },
		                          { 240, 340, 240, 340, MASK_CAUSAL }, { 340, 512, 340, 512, MASK_CAUSAL } };
		slices(&m, S, "causal_document", sl, 4);
		check("causal_document", &m, 4, 2);
		check("causal_document", &m, 8, 4);
		mask_free(&m);
	}
	{
		/* a band: |q - k| <= 50 as a bicausal slice plus its clipped ends */
		const int64_t sl[][5] = { { 0, 462, 0, 512, MASK_BICAUSAL } };
		slices(&m, S, "band", sl, 1);
		check("band", &m, 4, 2);
		mask_free(&m);
	}
	{
		slices(&m, S, "prefix_holes", prefix_holes, 4);
		check("prefix_holes", &m, 4, 2);
		mask_free(&m);
	}
	{
		/* three ranks, a shard of 192 (tiles of 32) */
		const int64_t sl[][5] = { { 0, 200, 0, 200, MASK_CAUSAL }, { 200, 576, 150, 576, MASK_CAUSAL } };
		slices(&m, 576, "overlap_docs", sl, 2);
		check("overlap_docs", &m, 3, 3);
		check("overlap_docs", &m, 3, 1);
		mask_free(&m);
	}
	{
		/* block-sparse, two mask heads, uneven blocks */
		int64_t qb[] = { 0, 64, 96, 200, 256, 384, 512 }, kb[] = { 0, 32, 128, 300, 320, 512 };
		rng_seed(&g, 11);
		if (mask_init_blocks(&m, S, S, 2, 6, qb, 5, kb, "block_sparse", "") == 0) {
			for (int h = 0; h < 2; h++)
				for (int i = 0; i < 6; i++)
					for (int j = 0; j < 5; j++)
						if (rng_below(&g, 3) == 0)
							mask_setblock(&m, h, i, j);
			if (mask_finish(&m, err, sizeof err) == 0) {
				check("block_sparse", &m, 4, 2);
				check("block_sparse", &m, 2, 1);
			} else {
				ok(0, "block mask: %s", err);
			}
			mask_free(&m);
		}
	}
	/* The backward in two stages (LONGATTN_BALANCED_BSPLIT): the same
	 * checks, bpairs's among them */
	setenv("LONGATTN_BALANCED_BSPLIT", "1", 1);
	{
		const int64_t sl[][5] = { { 0, 462, 0, 512, MASK_BICAUSAL } };
		struct attn_shape sh = shape(S);
		struct cp_bplan p;
		int two = 0;

		slices(&m, S, "band, split backward", sl, 1);
		check("band, split backward", &m, 4, 2);
		if (cp_balanced_plan(&m, 4, 2, &sh, &p, err, sizeof err) == 0) {
			for (int r = 0; r < 4; r++)
				two += p.rank[r].nbwd == 2 && p.rank[r].bwd[1].kv0 == p.per * p.C;
			cp_balanced_free(&p);
		}
		ok(two >= 3, "band, split backward: %d of 4 ranks split their backward at their own keys' end", two);
		mask_free(&m);
	}
	{
		slices(&m, S, "prefix_holes, split backward", prefix_holes, 4);
		check("prefix_holes, split backward", &m, 4, 2);
		mask_free(&m);
	}
	unsetenv("LONGATTN_BALANCED_BSPLIT");
	/* A causal window of 1024 on 16K, 2 ranks: every row but the first
	 * 1024 does the same work, so longest first deals alternately and
	 * every chunk reads its neighbours remotely; the runs deal shares the
	 * window's opening with few blocks moved (bench/NOTES.md, round 11) */
	{
		struct pattern_args a = { .s = 16384, .window = 1024 };
		struct attn_shape s = shape(16384);
		struct cp_bplan p;

		if (pattern_find("sliding_window_causal")->build(&m, &a, err, sizeof err) != 0)
			ok(0, "window mask: %s", err);
		else if (cp_balanced_plan(&m, 2, 2, &s, &p, err, sizeof err) == 0) {
			ok(p.cost_imbalance < 1.02 && p.rank[0].nblk + p.rank[1].nblk <= 24,
			   "window 16K on 2 ranks: work max/mean %.4f, blocks received %d + %d",
			   p.cost_imbalance, p.rank[0].nblk, p.rank[1].nblk);
			cp_balanced_free(&p);
		} else {
			ok(0, "window 16K plan: %s", err);
		}
		mask_free(&m);
	}
	/* Balance: a causal mask long enough for 128-token tiles */
	{
		const int64_t sl[][5] = { { 0, 8192, 0, 8192, MASK_CAUSAL } };
		struct attn_shape s = shape(8192);
		struct cp_bplan p;

		slices(&m, 8192, "causal", sl, 1);
		if (cp_balanced_plan(&m, 4, 2, &s, &p, err, sizeof err) == 0) {
			ok(p.T == 128 && p.cost_imbalance < 1.02 && p.imbalance < 1.02,
			   "causal 8K on 4 ranks: tile %lld, work max/mean %.3f, area %.3f", (long long)p.T,
			   p.cost_imbalance, p.imbalance);
			cp_balanced_free(&p);
		} else {
			ok(0, "causal 8K plan: %s", err);
		}
		/* and a world that does not divide the sequence is refused */
		ok(cp_balanced_plan(&m, 3, 3, &s, &p, err, sizeof err) != 0 && strstr(err, "multiple"),
		   "8192 tokens on 3 ranks: refused (%s)", err);
		mask_free(&m);
	}
	return tap_done();
}
