/* libFuzzer harness for the histogram reader (seqsample -d FILE, maskgen
 * -d FILE): a histogram that reads must be what its text says, and drawing
 * and packing from it must end, land in its bins and sum exactly. */
#include <math.h>

#include "fuzz.h"
#include "hist.h"

/* whether length x can come from a bin of positive weight */
static int drawable(const struct hist *h, int64_t x)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->cum[i] > (i ? h->cum[i - 1] : 0) && x >= (h->lo[i] < 1 ? 1 : h->lo[i]) && x < h->hi[i])
			return 1;
	return 0;
}

static void pack(const struct hist *h, struct rng *r, int64_t total, int islong)
{
	struct lens l = { 0 };
	int64_t sum = 0;

	if (islong)
		hist_pack_long(h, r, total, &l);
	else
		hist_pack(h, r, total, &l);
	for (size_t i = 0; i < l.n; i++) {
		fz_assert(l.v[i] >= 1, "packed a length %lld", (long long)l.v[i]);
		sum += l.v[i];
	}
	fz_assert(sum == total, "packed %lld tokens, want %lld", (long long)sum, (long long)total);
	/* only the last of the histogram's part is cut; long packs are shuffled */
	if (!islong)
		for (size_t i = 0; i + 1 < l.n; i++)
			fz_assert(drawable(h, l.v[i]), "packed length %lld from no bin", (long long)l.v[i]);
	free(l.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hist h;
	struct rng r;
	char err[512];
	FILE *fp = fz_open(data, size);
	uint64_t seed = size;

	if (fp == NULL)
		return 0;
	if (hist_parse(&h, fp, "fuzz.tsv", err, sizeof err) != 0) {
		fclose(fp);
		fz_refusal(err);
		fz_assert(strncmp(err, "fuzz.tsv", 8) == 0, "message does not name the input: %s", err);
		return 0;
	}
	fclose(fp);
	fz_assert(h.n > 0 && strcmp(h.name, "fuzz.tsv") == 0, "empty histogram or its name");
	for (size_t i = 0; i < h.n; i++) {
		fz_assert(h.lo[i] >= 0 && h.lo[i] < h.hi[i] && h.hi[i] > 1 && h.hi[i] <= HIST_MAXLEN,
		    "bin %zu [%lld, %lld)", i, (long long)h.lo[i], (long long)h.hi[i]);
		fz_assert(isfinite(h.cum[i]) && h.cum[i] >= (i ? h.cum[i - 1] : 0), "weights at bin %zu", i);
	}
	fz_assert(h.cum[h.n - 1] > 0, "weights sum to %g", h.cum[h.n - 1]);
	for (size_t i = 0; i < size && i < 32; i++)
		seed = fz_mix(seed ^ data[i]);
	rng_seed(&r, seed);
	for (int i = 0; i < 32; i++) {
		int64_t x = hist_draw(&h, &r);
		fz_assert(drawable(&h, x), "drew %lld from no bin", (long long)x);
	}
	pack(&h, &r, 1 + (int64_t)(seed % 4096), 0);
	pack(&h, &r, 1 + (int64_t)(seed >> 16) % 4096, 1);
	hist_free(&h);
	return 0;
}
