/* libFuzzer harness for custom slice lists (maskgen -p custom -n S -f -).
 * The first two bytes pick S (small, or one of the sizes near 2^31 and
 * 2^32); the rest is the list, read from stdin.  A list that builds must
 * allow exactly the pairs of its lines, each once (checked by brute force
 * from the FFA definitions when S is small); a refusal says why on one
 * line, and a list refused for overlapping slices must have two that share
 * a pair. */
#include "fuzz.h"
#include "mask.h"
#include "pattern.h"
#include "mask_gen.h"        /* g_allows: the FFA predicate, written apart */

enum { MAXS = 200 };

/* The lines that parse as slices inside S, in order, brute-forced: pairs
 * covered, and whether one is covered twice; -1 if S is too big. */
static int brute(const uint8_t *text, size_t n, int64_t s, uint64_t *area, int *twice)
{
	static unsigned char cnt[MAXS * MAXS];
	char *buf, *line, *save, *save2;

	if (s > MAXS)
		return -1;
	memset(cnt, 0, (size_t)(s * s));
	*area = 0;
	*twice = 0;
	buf = malloc(n + 1);
	memcpy(buf, text, n);
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		long long v[4];
		char kind[16], extra;
		struct gslice g;
		int k;

		if ((save2 = strchr(line, '#')) != NULL)
			*save2 = '\0';
		if (sscanf(line, "%lld %lld %lld %lld %15s %c", &v[0], &v[1], &v[2], &v[3], kind, &extra) != 5 ||
		    (k = mask_kind_parse(kind)) < 0 || v[0] < 0 || v[2] < 0 || v[1] > s || v[3] > s ||
		    v[0] >= v[1] || v[2] >= v[3])
			continue;
		g = (struct gslice){ v[0], v[1], v[2], v[3], k };
		for (int64_t q = g.q0; q < g.q1; q++)
			for (int64_t x = g.k0; x < g.k1; x++)
				if (g_allows(&g, q, x)) {
					*twice |= cnt[q * s + x]++ > 0;
					*area += cnt[q * s + x] == 1;
				}
	}
	free(buf);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t big[] = { ((int64_t)1 << 31) - 1, (int64_t)1 << 31, ((int64_t)1 << 32) - 1 };
	struct fz f = { data, size, 0 };
	struct pattern_args a;
	struct mask m;
	char err[512];
	FILE *fp, *old = stdin;
	unsigned h = fz_u16(&f);
	int64_t s = h & 0x8000 ? big[(h >> 8 & 0x7f) % 3] : 1 + (h & 0x7fff) % 1024;
	const uint8_t *text = data + f.i;
	size_t ntext = size - f.i;
	uint64_t area;
	int rc, twice, clean;

	/* brute force reads the text as a C string */
	clean = memchr(text, '\0', ntext) == NULL;
	memset(&a, 0, sizeof a);
	a.s = s;
	a.file = "-";
	if ((fp = fz_open(text, ntext)) == NULL)
		return 0;
	stdin = fp;
	rc = pattern_find("custom")->build(&m, &a, err, sizeof err);
	stdin = old;
	fclose(fp);
	if (rc != 0) {
		fz_refusal(err);
		fz_assert(strncmp(err, "stdin", 5) == 0, "message does not name the input: %s", err);
		if (clean && strncmp(err, "stdin: slices ", 14) == 0 && strstr(err, " overlap (") != NULL && brute(text, ntext, s, &area, &twice) == 0)
			fz_assert(twice, "refused for an overlap that is not there: %s", err);
		return 0;
	}
	fz_assert(m.sq == s && m.sk == s && m.nslices > 0, "custom mask's shape");
	if (clean && brute(text, ntext, s, &area, &twice) == 0) {
		fz_assert(!twice, "took slices that share a pair");
		fz_assert(m.area == area, "area %llu, brute force %llu", (unsigned long long)m.area,
		    (unsigned long long)area);
		for (int64_t q = 0; q < s; q++)
			for (int64_t k = 0; k < s; k++) {
				int want = 0;
				for (size_t i = 0; i < m.nslices; i++) {
					const struct mask_slice *x = &m.slices[i];
					struct gslice g = { x->q0, x->q1, x->k0, x->k1, x->kind };
					want += g_allows(&g, q, k);
				}
				fz_assert(want <= 1 && mask_allows(&m, 0, q, k) == want, "pair (%lld, %lld)",
				    (long long)q, (long long)k);
			}
	}
	mask_free(&m);
	return 0;
}
