/* Writes the fuzzer's seed corpus: small valid mask files of every slice
 * kind, overlapping rectangles with disjoint pairs, and block bodies with
 * 1 and 3 heads.  Usage: mkseeds DIR */
#include <stdio.h>
#include <stdlib.h>

#include "mask.h"
#include "rng.h"

static int nfile;

static void put(const char *dir, struct mask *m)
{
	char path[512], err[256];

	if (mask_finish(m, err, sizeof err) != 0) {
		fprintf(stderr, "mkseeds: %s\n", err);
		exit(1);
	}
	snprintf(path, sizeof path, "%s/seed%03d.amask", dir, nfile++);
	if (mask_write(path, m, err, sizeof err) != 0) {
		fprintf(stderr, "mkseeds: %s: %s\n", path, err);
		exit(1);
	}
	mask_free(m);
}

int main(int argc, char *argv[])
{
	struct mask m;
	struct rng r;

	if (argc != 2) {
		fprintf(stderr, "usage: mkseeds dir\n");
		return 2;
	}
	for (int k = 0; k < MASK_NKINDS; k++) {
		mask_init(&m, 37, 41, "one", "k=1");
		mask_add(&m, 3, 30, 2, 40, k);
		put(argv[1], &m);
	}
	/* a causal square and its complement above the diagonal */
	mask_init(&m, 20, 20, "halves", "");
	mask_add(&m, 0, 20, 0, 20, MASK_CAUSAL);
	mask_add(&m, 0, 19, 1, 20, MASK_INVCAUSAL);
	put(argv[1], &m);
	/* a sliding window: band with both sides */
	mask_init(&m, 64, 64, "window", "w=4");
	mask_add(&m, 0, 64, 0, 64, MASK_BICAUSAL);
	put(argv[1], &m);
	mask_init(&m, 64, 64, "window2", "w=4");
	mask_add(&m, 0, 60, 0, 64, MASK_BICAUSAL);
	mask_add(&m, 0, 64, 0, 3, MASK_CAUSAL);
	put(argv[1], &m);
	/* documents */
	rng_seed(&r, 5);
	for (int t = 0; t < 4; t++) {
		int64_t s = 50 + 40 * t, q = 0;
		mask_init(&m, s, s, "causal_document", "seed=5");
		while (q < s) {
			int64_t len = rng_range(&r, 1, 30);
			if (len > s - q)
				len = s - q;
			mask_add(&m, q, q + len, q, q + len, t % 2 ? MASK_FULL : MASK_CAUSAL);
			q += len;
		}
		put(argv[1], &m);
	}
	/* big sizes, few slices */
	mask_init(&m, ((int64_t)1 << 32) - 1, 3, "big", "");
	mask_add(&m, 5, ((int64_t)1 << 32) - 1, 0, 3, MASK_FULL);
	put(argv[1], &m);
	mask_init(&m, 1 << 20, 1 << 20, "causal", "");
	mask_add(&m, 0, 1 << 20, 0, 1 << 20, MASK_CAUSAL);
	put(argv[1], &m);
	/* blocks */
	for (int heads = 1; heads <= 3; heads += 2) {
		int64_t qb[] = { 0, 5, 9, 30 }, kb[] = { 0, 1, 8, 16, 17, 40 };
		mask_init_blocks(&m, 30, 40, heads, 3, qb, 5, kb, "blocks", "ratio=0.5");
		for (int h = 0; h < heads; h++)
			for (int i = 0; i < 3; i++)
				for (int j = 0; j < 5; j++)
					if (rng_below(&r, 2))
						mask_setblock(&m, h, i, j);
		put(argv[1], &m);
	}
	/* a checkerboard of 600 one-token block rows: a big tile gets 600 cuts */
	{
		static int64_t qb[601];
		int64_t kb[] = { 0, 1, 2 };
		for (int i = 0; i <= 600; i++)
			qb[i] = i;
		mask_init_blocks(&m, 600, 2, 1, 600, qb, 2, kb, "checker", "");
		for (int i = 0; i < 600; i++)
			mask_setblock(&m, 0, i, i % 2);
		put(argv[1], &m);
	}
	return 0;
}
