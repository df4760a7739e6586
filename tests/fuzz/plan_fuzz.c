/* libFuzzer harness for the plan: the input bytes build a valid mask (slices
 * of every kind, pieces whose rectangles overlap but whose pairs do not,
 * documents, or block bitmaps with several heads), small enough to check by
 * brute force; then plan_build for the kernels' tile shapes and one drawn
 * from the input, plan_transpose and mask_restrict must agree pair by pair
 * with a truth table computed from the FFA definitions, not from lib/.
 * A flag lets pieces overlap: mask_finish must then refuse exactly when two
 * pieces share a pair. */
#include "fuzz.h"
#include "mask.h"
#include "plan.h"
#include "mask_gen.h"        /* g_allows: the FFA predicate, written apart */
#include "mask_check.h"      /* check_plan: a plan against a truth table */

enum { MAXS = 256, MAXHEADS = 3, MAXPIECES = 96, MAXBLOCKS = 24 };

/* flash fwd 128x64, flash and hopper bwd 64x128, hopper fwd 128x128,
 * naive and the CPU reference 64x64 */
static const int shapes[][2] = { { 128, 64 }, { 64, 128 }, { 128, 128 }, { 64, 64 } };

struct gen {
	struct fz f;
	int64_t sq, sk, grid;
	int heads, overlap;
	unsigned char *truth;      /* pairs per (h,q,k); > 1 only when overlapping */
	int twice;                 /* some pair is in two pieces */
	struct mask m;
};

/* A coordinate in [0,S], on the grid when there is one. */
static int64_t coord(struct gen *g, int64_t s)
{
	int64_t v = (int64_t)(fz_u16(&g->f) % (unsigned)(s + 1));

	if (g->grid > 1)
		v = (v + g->grid / 2) / g->grid * g->grid;
	return v < s ? v : s;
}

/* A piece that fits the mask, unless it would share a pair with an earlier
 * one (and overlaps are not wanted): then it is dropped. */
static void piece(struct gen *g, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind)
{
	struct gslice s = { q0, q1, k0, k1, kind };

	if (q0 < 0 || q1 > g->sq || q0 >= q1 || k0 < 0 || k1 > g->sk || k0 >= k1 ||
	    g->m.nslices >= MAXPIECES)
		return;
	if (!g->overlap)
		for (int64_t q = q0; q < q1; q++)
			for (int64_t k = k0; k < k1; k++)
				if (g_allows(&s, q, k) && g->truth[q * g->sk + k])
					return;
	for (int64_t q = q0; q < q1; q++)
		for (int64_t k = k0; k < k1; k++)
			if (g_allows(&s, q, k) && g->truth[q * g->sk + k]++)
				g->twice = 1;
	fz_assert(mask_add(&g->m, q0, q1, k0, k1, kind) == 0, "mask_add");
}

static void rect(struct gen *g, int64_t *q0, int64_t *q1, int64_t *k0, int64_t *k1)
{
	int64_t t;

	*q0 = coord(g, g->sq);
	*q1 = coord(g, g->sq);
	*k0 = coord(g, g->sk);
	*k1 = coord(g, g->sk);
	if (*q0 > *q1) { t = *q0; *q0 = *q1; *q1 = t; }
	if (*k0 > *k1) { t = *k0; *k0 = *k1; *k1 = t; }
}

/* what the slice list masks are made of, each drawn from the bytes */
static void slices(struct gen *g)
{
	int64_t q0, q1, k0, k1, c, d, q;

	while (g->f.i < g->f.n && g->m.nslices < MAXPIECES) {
		unsigned op = fz_u8(&g->f);
		switch (op % 5) {
		case 0: case 1:     /* one slice of any kind */
			rect(g, &q0, &q1, &k0, &k1);
			piece(g, q0, q1, k0, k1, (int)(op / 5 % MASK_NKINDS));
			break;
		case 2:             /* a band split in three: causal, bicausal, invcausal */
			rect(g, &q0, &q1, &k0, &k1);
			if (q1 - q0 < 1 || k1 - q1 < k0 - q0)
				break;
			d = k0 - q0 + (int64_t)(fz_u16(&g->f) % (unsigned)(k1 - q1 - (k0 - q0) + 1));
			c = d + (int64_t)(fz_u16(&g->f) % (unsigned)(k1 - q1 - d + 1));
			if (op & 8)
				piece(g, q0, q1, k0, q1 + d - 1, MASK_CAUSAL);
			piece(g, q0, q1, q0 + d, q1 + c, MASK_BICAUSAL);
			if (op & 16)
				piece(g, q0, q1, q0 + c + 1, k1, MASK_INVCAUSAL);
			break;
		case 3:             /* a causal slice and its complement in the rectangle */
			rect(g, &q0, &q1, &k0, &k1);
			piece(g, q0, q1, k0, k1, MASK_CAUSAL);
			piece(g, q0, q1, q0 + (k1 - q1) + 1, k1, MASK_INVCAUSAL);
			break;
		case 4:             /* documents down the diagonal, causal or full */
			q = coord(g, g->sq);
			for (int n = 1 + (int)(op / 5 % 8); n > 0 && q < g->sq && q < g->sk; n--) {
				int64_t len = 1 + (int64_t)(fz_u8(&g->f) % 64);
				piece(g, q, q + len, q, q + len, op & 128 ? MASK_FULL : MASK_CAUSAL);
				q += len;
			}
			break;
		}
	}
}

/* block boundaries 0 < ... < s, at most MAXBLOCKS blocks, on the grid */
static int64_t bounds(struct gen *g, int64_t s, int64_t *b)
{
	int64_t n = 1, want = 1 + fz_u8(&g->f) % MAXBLOCKS;

	b[0] = 0;
	for (int64_t i = 1; i < want; i++) {
		int64_t x = coord(g, s), j;
		for (j = n; j > 0 && b[j - 1] > x; j--)
			;
		if (x == 0 || x == s || b[j - 1] == x)
			continue;
		memmove(b + j + 1, b + j, (size_t)(n - j) * sizeof *b);
		b[j] = x;
		n++;
	}
	b[n] = s;
	return n;
}

static void blocks(struct gen *g)
{
	int64_t qb[MAXBLOCKS + 1], kb[MAXBLOCKS + 1], nq, nk;

	nq = bounds(g, g->sq, qb);
	nk = bounds(g, g->sk, kb);
	fz_assert(mask_init_blocks(&g->m, g->sq, g->sk, g->heads, nq, qb, nk, kb, "fuzz", "") == 0,
	    "mask_init_blocks");
	for (int h = 0; h < g->heads; h++)
		for (int64_t i = 0; i < nq; i++)
			for (int64_t j = 0; j < nk; j += 8) {
				unsigned x = fz_u8(&g->f);
				for (int64_t jj = j; jj < j + 8 && jj < nk; jj++)
					if (x >> (jj - j) & 1) {
						mask_setblock(&g->m, h, i, jj);
						for (int64_t q = qb[i]; q < qb[i + 1]; q++)
							memset(g->truth + ((size_t)h * g->sq + q) * g->sk + kb[jj], 1,
							    (size_t)(kb[jj + 1] - kb[jj]));
					}
			}
}

static uint64_t count(const unsigned char *t, size_t n)
{
	uint64_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += t[i];
	return c;
}

/* plan and transposed plan of m for bq x bk, against truth */
static void plans(const struct mask *m, const unsigned char *truth, int bq, int bk)
{
	struct plan p, t;
	char err[256], why[512];

	fz_assert(plan_build(&p, m, bq, bk, err, sizeof err) == 0, "plan_build %dx%d: %s", bq, bk, err);
	fz_assert(check_plan(&p, truth, m->sq, m->sk, m->heads, why, sizeof why) == 0,
	    "plan %dx%d of %lldx%lld: %s", bq, bk, (long long)m->sq, (long long)m->sk, why);
	fz_assert(plan_transpose(&t, &p, err, sizeof err) == 0, "plan_transpose: %s", err);
	fz_assert(t.transposed == 1 && check_plan(&t, truth, m->sq, m->sk, m->heads, why, sizeof why) == 0,
	    "transposed plan %dx%d of %lldx%lld: %s", bq, bk, (long long)m->sq, (long long)m->sk, why);
	fz_assert(t.area == p.area && t.ntiles_full == p.ntiles_full && t.ntiles_partial == p.ntiles_partial,
	    "transposed plan counts");
	plan_free(&t);
	plan_free(&p);
}

/* the restriction's pairs, from its own slices or blocks */
static void truth_of(const struct mask *r, unsigned char *t)
{
	size_t n = (size_t)r->heads * (size_t)r->sq * (size_t)r->sk;

	memset(t, 0, n);
	if (r->body == MASK_BODY_SLICES) {
		for (size_t i = 0; i < r->nslices; i++) {
			const struct mask_slice *s = &r->slices[i];
			struct gslice x = { s->q0, s->q1, s->k0, s->k1, s->kind };
			for (int64_t q = s->q0; q < s->q1; q++)
				for (int64_t k = s->k0; k < s->k1; k++)
					t[q * r->sk + k] += (unsigned char)g_allows(&x, q, k);
		}
		return;
	}
	for (int h = 0; h < r->heads; h++)
		for (int64_t i = 0; i < r->nqb; i++)
			for (int64_t j = 0; j < r->nkb; j++)
				if (mask_getblock(r, h, i, j))
					for (int64_t q = r->qb[i]; q < r->qb[i + 1]; q++)
						memset(t + ((size_t)h * r->sq + q) * r->sk + r->kb[j], 1,
						    (size_t)(r->kb[j + 1] - r->kb[j]));
}

static void restrict_check(struct gen *g, int bq, int bk)
{
	const struct mask *m = &g->m;
	struct mask r;
	char err[256];
	int64_t q0 = coord(g, m->sq - 1), q1 = q0 + 1 + (int64_t)(fz_u16(&g->f) % (unsigned)(m->sq - q0));
	int64_t k0 = coord(g, m->sk - 1), k1 = k0 + 1 + (int64_t)(fz_u16(&g->f) % (unsigned)(m->sk - k0));
	int64_t nq = q1 - q0, nk = k1 - k0;
	unsigned char *sub, *got;
	uint64_t area = 0;

	fz_assert(mask_restrict(m, q0, q1, k0, k1, &r, err, sizeof err) == 0, "mask_restrict: %s", err);
	fz_assert(r.sq == nq && r.sk == nk && r.heads == m->heads && r.body == m->body,
	    "restriction's shape");
	sub = malloc((size_t)m->heads * (size_t)(nq * nk));
	got = malloc((size_t)m->heads * (size_t)(nq * nk));
	for (int h = 0; h < m->heads; h++)
		for (int64_t q = 0; q < nq; q++)
			for (int64_t k = 0; k < nk; k++) {
				unsigned char x = g->truth[((size_t)h * m->sq + q + q0) * m->sk + k + k0];
				sub[((size_t)h * nq + q) * nk + k] = x;
				area += x;
			}
	truth_of(&r, got);
	fz_assert(memcmp(sub, got, (size_t)m->heads * (size_t)(nq * nk)) == 0,
	    "restriction [%lld,%lld)x[%lld,%lld) differs from the mask", (long long)q0, (long long)q1,
	    (long long)k0, (long long)k1);
	fz_assert(r.area == area, "restriction area %llu, brute force %llu",
	    (unsigned long long)r.area, (unsigned long long)area);
	plans(&r, sub, bq, bk);
	free(sub);
	free(got);
	mask_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t grids[] = { 1, 1, 16, 64 };
	struct gen g;
	char err[256];
	unsigned h0, h1;
	size_t npairs;
	int bq, bk, rc;

	memset(&g, 0, sizeof g);
	g.f = (struct fz){ data, size, 0 };
	h0 = fz_u8(&g.f);
	h1 = fz_u8(&g.f);
	g.grid = grids[h0 >> 1 & 3];
	g.overlap = h0 >> 3 & 1;
	g.sq = 1 + fz_u16(&g.f) % MAXS;
	g.sk = h0 & 32 ? g.sq : 1 + fz_u16(&g.f) % MAXS;
	g.heads = h0 & 1 ? 1 + (int)(h1 % MAXHEADS) : 1;
	/* a tile of any width from 1, or a power of two from 64 */
	bq = h1 & 64 ? 64 << (h1 >> 2 & 1) : 1 + (int)(h1 >> 2 & 15);
	bk = h1 & 128 ? 64 << (h1 >> 3 & 1) : 1 + (int)(h1 >> 3 & 15);
	npairs = (size_t)g.heads * (size_t)g.sq * (size_t)g.sk;
	g.truth = calloc(npairs, 1);
	if (h0 & 1) {
		blocks(&g);
	} else {
		mask_init(&g.m, g.sq, g.sk, "fuzz", "");
		slices(&g);
	}
	rc = mask_finish(&g.m, err, sizeof err);
	if (g.twice) {
		fz_assert(rc != 0, "mask_finish took slices that share a pair");
		fz_refusal(err);
		goto out;
	}
	fz_assert(rc == 0, "mask_finish refused a valid mask: %s", err);
	fz_assert(g.m.area == count(g.truth, npairs), "mask area %llu, brute force %llu",
	    (unsigned long long)g.m.area, (unsigned long long)count(g.truth, npairs));
	for (int i = 0; i < 64; i++) {
		uint64_t x = fz_mix((uint64_t)i ^ (uint64_t)size << 8 ^ h0 << 20);
		int hd = (int)(x % (uint64_t)g.heads);
		int64_t q = (int64_t)(x >> 8) % g.sq, k = (int64_t)(x >> 32) % g.sk;
		fz_assert(mask_allows(&g.m, hd, q, k) == (g.truth[((size_t)hd * g.sq + q) * g.sk + k] != 0),
		    "mask_allows(%d, %lld, %lld)", hd, (long long)q, (long long)k);
	}
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		plans(&g.m, g.truth, shapes[i][0], shapes[i][1]);
	plans(&g.m, g.truth, bq, bk);
	restrict_check(&g, bq, bk);
out:
	mask_free(&g.m);
	free(g.truth);
	return 0;
}
