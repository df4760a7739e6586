/* The FlashMask extras (arXiv 2410.01359 and its benchmark code): causal
 * masks with holes.  qk_sparse and hash_sparse are O(spans) and
 * O(buckets) slices; random_eviction is one slice per evicted key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"
#include "util.h"

/* Rows [r0,r1) that see every key up to themselves. */
static void causal_rows(struct mask *m, int64_t r0, int64_t r1)
{
	mask_add(m, r0, r1, 0, r0, MASK_FULL);
	mask_add(m, r0, r1, r0, r1, MASK_CAUSAL);
}

/* FlashMask's generate_qk_sparse_mask: for each span [o, o+len), key
 * column k in it is masked on rows [k, o+len).  So the span's queries see
 * only keys before o, and the span's keys are seen only after the span. */
int pat_qk_sparse(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	static const int64_t def[][2] = { { 1024, 538 }, { 2358, 1700 } };
	int64_t off[64], len[64], prev = 0, s = a->s;
	char text[MASK_PARAMS] = "", *p;
	int n = 0;

	if (a->spans == NULL) {
		for (size_t i = 0; i < sizeof def / sizeof def[0]; i++) {
			/* the reference scales its 8K spans to S; spans that vanish at small S are dropped */
			off[n] = (int64_t)((double)def[i][0] * (double)s / 8192.0);
			len[n] = (int64_t)((double)def[i][1] * (double)s / 8192.0);
			if (off[n] >= 1 && len[n] >= 1 && off[n] > (n ? off[n - 1] + len[n - 1] : 0))
				n++;
		}
	} else {
		char *copy = strdup(a->spans), *save, *tok, *end;

		if (copy == NULL)
			errx(EXIT_BADINPUT, "out of memory");
		for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
			long long o, l;

			if (n == 64 || (o = strtoll(tok, &end, 10), *end != ':') ||
			    (l = strtoll(end + 1, &end, 10), *end != '\0') || end == tok) {
				snprintf(err, errlen, "qk_sparse: spans '%s': want up to 64 OFFSET:LENGTH pairs", a->spans);
				free(copy);
				return -1;
			}
			off[n] = o;
			len[n++] = l;
		}
		free(copy);
		for (int i = 0; i < n; i++) {
			if (off[i] < 1 || len[i] < 1 || off[i] > s - len[i] ||
			    (i > 0 && off[i] <= off[i - 1] + len[i - 1])) {
				snprintf(err, errlen, "qk_sparse: span %lld:%lld: want 1 <= offset, length >= 1, "
				    "spans in order with gaps, inside the sequence (%lld)", (long long)off[i],
				    (long long)len[i], (long long)s);
				return -1;
			}
		}
	}
	mask_init(m, s, s, "qk_sparse", "");
	for (int i = 0; i < n; i++) {
		causal_rows(m, prev, off[i]);
		mask_add(m, off[i], off[i] + len[i], 0, off[i], MASK_FULL);
		prev = off[i] + len[i];
	}
	causal_rows(m, prev, s);
	p = text;
	for (int i = 0; i < n; i++)
		p += snprintf(p, sizeof text - (size_t)(p - text), "%s%lld:%lld", i ? "," : "",
		    (long long)off[i], (long long)len[i]);
	pat_param(m, "spans=%s", n ? text : "none");
	return pat_finish(m, err, errlen);
}

/* Reformer-style LSH with shared QK: every token falls in a uniformly
 * random bucket and the sequence is taken in bucket-sorted order (a stable
 * sort, as the kernels see it), so bucket b is a contiguous run and causal
 * within the run is causal in the original order. */
int pat_hash_sparse(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t nb = a->buckets == PAT_UNSET ? 16 : a->buckets, *count, at = 0;

	if (nb < 1 || nb > a->s) {
		snprintf(err, errlen, "hash_sparse: %lld buckets: want 1 to seqlen (%lld)", (long long)nb, (long long)a->s);
		return -1;
	}
	count = xcalloc((size_t)nb, sizeof *count);
	for (int64_t t = 0; t < a->s; t++)
		count[rng_below(a->rng, (uint64_t)nb)]++;
	mask_init(m, a->s, a->s, "hash_sparse", "");
	pat_param(m, "buckets=%lld seed=%llu", (long long)nb, (unsigned long long)a->seed);
	for (int64_t b = 0; b < nb; at += count[b++])
		mask_add(m, at, at + count[b], at, at + count[b], MASK_CAUSAL);
	free(count);
	return pat_finish(m, err, errlen);
}

/* FlashMask's generate_random_eviction_mask: S - r distinct keys are drawn
 * from 0..S-2; the i-th drawn is set against row r + i, and the keys that
 * come before their row minus one (k < r + i - 1) move to the front, order
 * kept; then the keys in that order are evicted from rows r, r+1, ..., S-1.
 * Other keys are never evicted (e = S).  Allowed iff k <= q < e(k). */
int pat_random_eviction(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t s = a->s, r = a->startrow == PAT_UNSET ? (s > 1 ? s / 2 : 1) : a->startrow, *e, run = 0, early = 0;
	uint32_t *pool;

	if (r < 1 || r > s) {
		snprintf(err, errlen, "random_eviction: start row %lld is outside [1, %lld]", (long long)r, (long long)s);
		return -1;
	}
	e = xmalloc((size_t)s * sizeof *e);
	pool = xmalloc((size_t)(s > 1 ? s - 1 : 1) * sizeof *pool);
	for (int64_t k = 0; k < s; k++)
		e[k] = s;
	for (int64_t k = 0; k + 1 < s; k++)
		pool[k] = (uint32_t)k;
	for (int64_t i = 0; i < s - r; i++) {
		int64_t j = i + (int64_t)rng_below(a->rng, (uint64_t)(s - 1 - i));
		uint32_t t = pool[j];

		pool[j] = pool[i];
		pool[i] = t;
	}
	for (int64_t i = 0; i < s - r; i++)
		if (pool[i] < r + i - 1)
			e[pool[i]] = r + early++;
	for (int64_t i = 0, n = early; i < s - r; i++)
		if (e[pool[i]] == s)
			e[pool[i]] = r + n++;
	free(pool);
	mask_init(m, s, s, "random_eviction", "");
	pat_param(m, "startrow=%lld seed=%llu", (long long)r, (unsigned long long)a->seed);
	for (int64_t k = 0; k <= s; k++) {
		if (k < s && e[k] == s)
			continue;
		/* keys [run, k) are never evicted: the causal run and all rows below it */
		mask_add(m, run, k, run, k, MASK_CAUSAL);
		mask_add(m, k, s, run, k, MASK_FULL);
		if (k < s && e[k] > k)
			mask_add(m, k, e[k], k, k + 1, MASK_FULL);
		run = k + 1;
	}
	free(e);
	return pat_finish(m, err, errlen);
}
