/* The CP building blocks on the host: the zigzag layout partitions the
 * sequence, mask pieces agree with the global mask pair by pair, and the
 * buffer operations (LSE merge, accumulate, casts, 2-D copies) match a
 * direct computation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp/cp_impl.h"
#include "half.h"
#include "rng.h"
#include "tap.h"

static void layout(void)
{
	int64_t S = 96;
	int shapes[][2] = { { 1, 1 }, { 1, 4 }, { 2, 1 }, { 4, 1 }, { 2, 2 }, { 3, 2 }, { 2, 4 }, { 4, 3 } };

	for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
		int R = shapes[t][0], U = shapes[t][1], good = 1;
		char *seen = calloc(S, 1);

		for (int rk = 0; rk < R * U; rk++) {
			int64_t rg[2][2], n = 0;
			int nr = cp_ranges(S, R, U, rk, rg);
			for (int i = 0; i < nr; i++)
				for (int64_t s = rg[i][0]; s < rg[i][1]; s++, n++)
					good &= s >= 0 && s < S && !seen[s]++;
			good &= n == S / (R * U);
		}
		for (int64_t s = 0; s < S; s++)
			good &= seen[s] == 1;
		ok(good, "layout R=%d U=%d: every token on exactly one rank, S/(R*U) each", R, U);
		free(seen);
	}
	{
		int64_t rg[2][2];
		int n = cp_member(16, 4, 1, rg);
		ok(n == 2 && rg[0][0] == 2 && rg[0][1] == 4 && rg[1][0] == 12 && rg[1][1] == 14,
		   "zigzag: member 1 of 4 holds chunks 1 and 6 of 8");
		n = cp_member(16, 4, 3, rg);
		ok(n == 1 && rg[0][0] == 6 && rg[0][1] == 10, "zigzag: the middle member's chunks merge");
	}
}

/* Piece p of m, queries qr x keys kr, allows (q,k) iff m allows the pair
 * it stands for, on every head. */
static int agrees(const struct mask *m, const struct mask *p, int64_t qr[][2], int nq,
                  int64_t kr[][2], int nk)
{
	int good = 1;

	for (int h = 0; h < m->heads && good; h++)
		for (int q = 0, qo = 0; q < nq; qo += qr[q][1] - qr[q][0], q++)
			for (int64_t i = qr[q][0]; i < qr[q][1]; i++)
				for (int k = 0, ko = 0; k < nk; ko += kr[k][1] - kr[k][0], k++)
					for (int64_t j = kr[k][0]; j < kr[k][1]; j++)
						good &= mask_allows(p, h, qo + i - qr[q][0], ko + j - kr[k][0]) ==
						        mask_allows(m, h, i, j);
	return good;
}

static void pieces(void)
{
	struct mask m, p;
	char err[160] = "";
	int64_t qr[2][2] = { { 8, 20 }, { 50, 64 } }, kr[3][2] = { { 0, 10 }, { 30, 52 }, { 60, 64 } };
	int good = 1;

	mask_init(&m, 64, 64, "causal_document", "");
	mask_add(&m, 0, 13, 0, 13, MASK_CAUSAL);
	mask_add(&m, 13, 51, 13, 51, MASK_CAUSAL);
	mask_add(&m, 51, 64, 51, 64, MASK_CAUSAL);
	ok(mask_finish(&m, err, sizeof err) == 0, "document mask builds");
	ok(cp_piece(&m, qr, 2, kr, 3, &p, err, sizeof err) == 0, "piece of 2 x 3 ranges: %s", err);
	good = p.sq == 26 && p.sk == 36;
	good &= agrees(&m, &p, qr, 2, kr, 3);
	ok(good, "piece allows (q,k) iff the global mask allows the pair it stands for");
	{
		uint64_t area = 0;
		for (int64_t i = 0; i < p.sq; i++)
			for (int64_t j = 0; j < p.sk; j++)
				area += mask_allows(&p, 0, i, j);
		ok(area == p.area && area > 0, "piece area %llu is exact", (unsigned long long)p.area);
	}
	mask_free(&p);
	mask_free(&m);
}

/* Block-sparse bodies: pieces cut blocks and keep every head's pattern. */
static void block_pieces(void)
{
	struct mask m, p;
	struct rng g;
	char err[160] = "";
	int64_t qb[] = { 0, 16, 40, 64 }, kb[] = { 0, 8, 32, 48, 64 };
	int64_t qr[2][2] = { { 10, 20 }, { 44, 60 } }, kr[2][2] = { { 4, 30 }, { 50, 64 } };
	int good = 1;

	rng_seed(&g, 3);
	ok(mask_init_blocks(&m, 64, 64, 2, 3, qb, 4, kb, "block_sparse_uniform", "") == 0, "block mask");
	for (int h = 0; h < 2; h++)
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 4; j++)
				if (rng_below(&g, 2))
					mask_setblock(&m, h, i, j);
	ok(mask_finish(&m, err, sizeof err) == 0, "block mask finishes: %s", err);
	ok(cp_piece(&m, qr, 2, kr, 2, &p, err, sizeof err) == 0, "block piece of 2 x 2 ranges: %s", err);
	good = p.sq == 26 && p.sk == 40 && p.heads == 2;
	good &= agrees(&m, &p, qr, 2, kr, 2);
	ok(good, "block piece allows what the global mask allows, per head");
	mask_free(&p);
	mask_free(&m);
}

static float bf(float x) { return half_from_bf16(half_to_bf16(x)); }

static void buffers(void)
{
	struct ops x;
	char err[160];
	struct rng g;
	enum { B = 2, SQ = 5, H = 3, D = 7 };
	size_t no = B * SQ * H * D, nl = B * H * SQ;
	float *o = malloc(no * 4), *l = malloc(nl * 4), *o1 = malloc(no * 4), *l1 = malloc(nl * 4),
	      *o2 = malloc(no * 4), *l2 = malloc(nl * 4);
	uint16_t *p2 = malloc(no * 2);
	double worst = 0;

	ok(ops_init(&x, 0, err, sizeof err) == 0, "host ops");
	rng_seed(&g, 7);
	for (size_t i = 0; i < no; i++) {
		o1[i] = (float)(rng_double(&g) * 2 - 1);
		o2[i] = bf((float)(rng_double(&g) * 2 - 1));
		p2[i] = half_to_bf16(o2[i]);
	}
	for (size_t i = 0; i < nl; i++) {
		l1[i] = (float)(rng_double(&g) * 8 - 4);
		l2[i] = i % 5 == 0 ? -INFINITY : (float)(rng_double(&g) * 8 - 4);
	}
	l1[1] = -INFINITY;
	memcpy(o, o1, no * 4);
	memcpy(l, l1, nl * 4);
	ops_merge(&x, o, l, p2, l2, CT_BF16, B, SQ, H, D, 0);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int q = 0; q < SQ; q++) {
				size_t li = ((size_t)b * H + h) * SQ + q;
				double a = l1[li], c = l2[li], m = a > c ? a : c;
				double L = m == -INFINITY ? -INFINITY : m + log(exp(a - m) + exp(c - m));
				double e = fabs(l[li] - L);
				if (L == -INFINITY)
					e = l[li] == -INFINITY ? 0 : 1;
				worst = e > worst ? e : worst;
				for (int d = 0; d < D; d++) {
					size_t oi = (((size_t)b * SQ + q) * H + h) * D + d;
					double want = (a == -INFINITY ? 0 : o1[oi] * exp(a - L)) +
					              (c == -INFINITY ? 0 : o2[oi] * exp(c - L));
					e = fabs(o[oi] - want);
					worst = e > worst || isnan(e) ? (isnan(e) ? 1 : e) : worst;
				}
			}
	ok(worst < 1e-5, "LSE merge matches the two-way softmax (worst %.2g), -inf sides ignored", worst);

	/* acc2d on a strided window, then cast back. */
	memset(o, 0, no * 4);
	ops_acc2d(&x, o + 1, 10, p2 + 2, CT_BF16, 9, 4, 3, 0);
	int good = 1;
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < 10; i++)
			good &= o[1 + r * 10 + i] == (i < 4 ? o2[2 + r * 9 + i] : 0);
	ok(good, "strided accumulate touches exactly its window");
	ops_cast(&x, p2, CT_FP16, o + 1, 4, 0);
	ok(half_from_fp16(p2[0]) == half_from_fp16(half_to_fp16(o[1])), "cast to fp16 rounds like half.h");

	{
		char src[6][8], dst[4][5];
		for (int i = 0; i < 48; i++)
			((char *)src)[i] = (char)i;
		memset(dst, 0x55, sizeof dst);
		ops_copy2d(&x, dst, 5, &src[1][2], 8, 3, 4, 0);
		good = 1;
		for (int r = 0; r < 4; r++)
			for (int i = 0; i < 5; i++)
				good &= dst[r][i] == (i < 3 ? src[1 + r][2 + i] : 0x55);
		ok(good, "2-D copy: rows of width bytes, pitches respected");
	}
	{
		/* runs of 3-element tokens: dst tokens 4-5 and 0 from src tokens
		 * 0-1 and 2, summed in fp32, rounded once; tokens 1-3 untouched */
		const int64_t runs[] = { 4, 0, 2, 0, 2, 1 };
		uint16_t d[18], sr[9], d0[18];
		for (int i = 0; i < 18; i++)
			d0[i] = d[i] = half_to_bf16((float)(rng_double(&g) * 2 - 1));
		for (int i = 0; i < 9; i++)
			sr[i] = half_to_bf16((float)(rng_double(&g) * 2 - 1));
		ops_addruns(&x, d, CT_BF16, sr, runs, 2, 3, 0);
		good = 1;
		for (int t = 0; t < 6; t++)
			for (int e = 0; e < 3; e++) {
				int u = t >= 4 ? t - 4 : t == 0 ? 2 : -1, i = t * 3 + e;
				uint16_t want = u < 0 ? d0[i] :
				    half_to_bf16(half_from_bf16(d0[i]) + half_from_bf16(sr[u * 3 + e]));
				good &= d[i] == want;
			}
		ok(good, "runs add into exactly their tokens, rounded once");
	}
	{
		void *a = ops_alloc(&x, 1000), *b;
		ops_peak_reset(&x);
		b = ops_alloc(&x, 3000);
		ops_free(&x, b);
		ok(ops_peak(&x) == 3000, "host peak counts what came after the reset (%zu)", ops_peak(&x));
		ops_free(&x, a);
		ok(x.inuse == 0, "host blocks all returned");
	}
	ops_fini(&x);
	free(o); free(l); free(o1); free(l1); free(o2); free(l2); free(p2);
}

int main(void)
{
	layout();
	pieces();
	block_pieces();
	buffers();
	return tap_done();
}
