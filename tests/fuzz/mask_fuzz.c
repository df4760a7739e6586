/* libFuzzer harness for the mask reader.  Bytes go to mask_read through
 * stdin; a file that reads must then plan, transpose and restrict without
 * error, and the plan and the restriction must agree with the mask. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

/* mostly small tiles, sometimes big ones (tiles with many cuts), but never
 * more than 256 tile rows or columns */
static int tile(int64_t s, uint64_t h)
{
	int64_t t = h % 8 == 0 ? (int64_t)64 << (h / 8 % 6) : 1 + (int64_t)(h % 17);
	if (s / t > 256)
		t = (s + 255) / 256;
	return (int)t;
}

static void check_plan(const struct mask *m, uint64_t h)
{
	struct plan p, t;
	char err[256];

	if (m->sq >= ((int64_t)1 << 31) || m->sk >= ((int64_t)1 << 31)) {
		if (plan_build(&p, m, 128, 128, err, sizeof err) == 0)
			abort();        /* must refuse */
		return;
	}
	if ((int64_t)m->heads * 256 > (1 << 16))
		return;
	if (plan_build(&p, m, tile(m->sq, h), tile(m->sk, h >> 8), err, sizeof err) != 0) {
		fprintf(stderr, "plan_build: %s\n", err);
		abort();
	}
	if (p.area != m->area)
		abort();
	if (plan_transpose(&t, &p, err, sizeof err) != 0) {
		fprintf(stderr, "plan_transpose: %s\n", err);
		abort();
	}
	if (t.area != p.area || t.ntiles_full != p.ntiles_full || t.ntiles_partial != p.ntiles_partial)
		abort();
	plan_free(&t);
	plan_free(&p);
}

/* Read, and on success check everything that follows from a valid mask. */
static void one(const uint8_t *data, size_t size)
{
	struct mask m, r;
	char err[256];
	FILE *fp, *old = stdin;
	uint64_t h = size;
	int rc;

	fp = size > 0 ? fmemopen((void *)data, size, "rb") : fopen("/dev/null", "rb");
	if (fp == NULL)
		return;
	stdin = fp;
	rc = mask_read("-", &m, err, sizeof err);
	stdin = old;
	fclose(fp);
	if (rc != 0) {
		if (err[0] == '\0' || strchr(err, '\n') != NULL)
			abort();        /* every refusal says why, on one line */
		return;
	}
	for (size_t i = 0; i < size && i < 64; i++)
		h = mix(h ^ data[size - 1 - i]);
	check_plan(&m, h);
	{
		int64_t q0 = (int64_t)(mix(h + 1) % (uint64_t)m.sq);
		int64_t q1 = q0 + 1 + (int64_t)(mix(h + 2) % (uint64_t)(m.sq - q0));
		int64_t k0 = (int64_t)(mix(h + 3) % (uint64_t)m.sk);
		int64_t k1 = k0 + 1 + (int64_t)(mix(h + 4) % (uint64_t)(m.sk - k0));
		if (mask_restrict(&m, q0, q1, k0, k1, &r, err, sizeof err) != 0) {
			fprintf(stderr, "mask_restrict: %s\n", err);
			abort();
		}
		/* a few pairs must agree with the original */
		for (int i = 0; i < 32; i++) {
			int64_t q = (int64_t)(mix(h + 10 + (uint64_t)i) % (uint64_t)(q1 - q0));
			int64_t k = (int64_t)(mix(h + 50 + (uint64_t)i) % (uint64_t)(k1 - k0));
			int hd = (int)(mix(h + 90 + (uint64_t)i) % (uint64_t)m.heads);
			if (mask_allows(&r, hd, q, k) != mask_allows(&m, hd, q + q0, k + k0))
				abort();
		}
		if (r.area > m.area)
			abort();
		check_plan(&r, mix(h + 5));
		mask_free(&r);
	}
	mask_free(&m);
}

/* Mutations nearly always break the checksum, which would hide everything
 * behind it; so each input is also tried with its checksum made right. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *b;
	uint64_t h = 0xcbf29ce484222325ULL;

	one(data, size);
	if (size < 8 || (b = malloc(size)) == NULL)
		return 0;
	memcpy(b, data, size);
	for (size_t i = 0; i < size - 8; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	for (int i = 0; i < 8; i++)
		b[size - 8 + (size_t)i] = (uint8_t)(h >> 8 * i);
	one(b, size);
	free(b);
	return 0;
}
