/* Big masks: read + plan of a 3M-token causal document mask and of a 128K
 * block-sparse mask with 8 heads.  Correctness is asserted (areas agree,
 * entries stay O(rows)); the times are printed for the record, not judged,
 * since a loaded CI machine is no benchmark. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mask.h"
#include "plan.h"
#include "rng.h"
#include "tap.h"

static double now(void)
{
	struct timespec ts;
	/* CPU time: the suite shares the machine with parallel builds */
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(void)
{
	struct mask m, x;
	struct plan p, t;
	struct rng r;
	char err[256], path[64];
	int64_t s = 3 << 20, q = 0, ndoc = 0;
	uint64_t want = 0;
	double t0, t1, t2;
	int rc;

	snprintf(path, sizeof path, "%s/plan_speed.%d.amask",
	    access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
	rng_seed(&r, 1);
	mask_init(&m, s, s, "causal_document", "seed=1");
	while (q < s) {
		int64_t len = rng_range(&r, 1, 2047);
		if (len > s - q)
			len = s - q;
		mask_add(&m, q, q + len, q, q + len, MASK_CAUSAL);
		want += (uint64_t)len * (uint64_t)(len + 1) / 2;
		q += len;
		ndoc++;
	}
	rc = mask_finish(&m, err, sizeof err);
	ok(rc == 0 && m.area == want, "3M causal_document: %lld documents, area %llu",
	    (long long)ndoc, (unsigned long long)m.area);
	ok(mask_write(path, &m, err, sizeof err) == 0, "written");
	t0 = now();
	rc = mask_read(path, &x, err, sizeof err);
	t1 = now();
	rc |= plan_build(&p, &x, 128, 128, err, sizeof err);
	t2 = now();
	ok(rc == 0 && p.area == want && p.nent <= 4 * p.nrows,
	    "read + plan 128x128: %d entries for %d rows", p.nent, p.nrows);
	printf("# 3M causal_document (%lld slices): read %.1f ms, plan %.1f ms, total %.1f ms cpu\n",
	    (long long)ndoc, t1 - t0, t2 - t1, t2 - t0);
	t0 = now();
	rc = plan_transpose(&t, &p, err, sizeof err);
	t1 = now();
	ok(rc == 0 && t.area == want && t.nent <= 4 * t.nrows, "transposed: %d entries", t.nent);
	printf("# transpose %.1f ms cpu\n", t1 - t0);
	plan_free(&t);
	plan_free(&p);
	mask_free(&x);
	mask_free(&m);

	/* full and causal at 3M: one run (and a diagonal) per row */
	mask_init(&m, s, s, "causal", "");
	mask_add(&m, 0, s, 0, s, MASK_CAUSAL);
	mask_finish(&m, err, sizeof err);
	t0 = now();
	rc = plan_build(&p, &m, 128, 128, err, sizeof err);
	t1 = now();
	ok(rc == 0 && p.area == m.area && p.nent <= 2 * p.nrows, "3M causal: %d entries, %.1f ms cpu", p.nent, t1 - t0);
	plan_free(&p);
	mask_free(&m);

	/* 128K block-sparse, 64-token blocks, half kept, 8 heads */
	{
		int64_t n = 128 << 10, nb = n / 64, *b = malloc((size_t)(nb + 1) * sizeof *b);
		for (int64_t i = 0; i <= nb; i++)
			b[i] = i * 64;
		mask_init_blocks(&m, n, n, 8, nb, b, nb, b, "block_sparse_uniform", "ratio=0.5");
		for (int h = 0; h < 8; h++)
			for (int64_t i = 0; i < nb; i++)
				for (int64_t j = 0; j < nb; j++)
					if (rng_below(&r, 2))
						mask_setblock(&m, h, i, j);
		t0 = now();
		rc = mask_finish(&m, err, sizeof err);
		t1 = now();
		rc |= mask_write(path, &m, err, sizeof err);
		printf("# 128K block sparse: finish %.1f ms cpu\n", t1 - t0);
		t0 = now();
		rc |= mask_read(path, &x, err, sizeof err);
		t1 = now();
		rc |= plan_build(&p, &x, 128, 128, err, sizeof err);
		t2 = now();
		ok(rc == 0 && p.area == m.area && p.heads == 8, "128K block sparse, 8 heads: read + plan, %d entries %d cuts",
		    p.nent, p.ncut);
		printf("# 128K block sparse: read %.1f ms, plan 128x128 %.1f ms cpu\n", t1 - t0, t2 - t1);
		plan_free(&p);
		t0 = now();
		rc = plan_build(&p, &x, 64, 64, err, sizeof err);
		t1 = now();
		ok(rc == 0 && p.area == m.area && p.ncut == 0 && p.ntiles_partial == 0,
		    "128K block sparse, 64x64 tiles: only full tiles, %d entries", p.nent);
		printf("# 128K block sparse: plan 64x64 %.1f ms cpu\n", t1 - t0);
		plan_free(&p);
		mask_free(&x);
		mask_free(&m);
		free(b);
	}
	unlink(path);
	return tap_done();
}
