/* Sliding windows and prefix LM: bands built from causal, bicausal and
 * invcausal slices (pat_band), never per token. */
#include <stdio.h>

#include "pattern.h"

static int window_ok(const char *name, int64_t w, int64_t s, char *err, size_t errlen)
{
	if (w >= 0 && w <= s)
		return 0;
	snprintf(err, errlen, "%s: window %lld is larger than the sequence (%lld)", name,
	    (long long)w, (long long)s);
	return -1;
}

/* -w <= k - q <= w, or only its causal half -w <= k - q <= 0. */
static int sliding(struct mask *m, const struct pattern_args *a, const char *name, int causal,
                   char *err, size_t errlen)
{
	int64_t w = a->window;

	if (w == PAT_UNSET)
		w = a->s > 1024 ? 1024 : a->s - 1;
	if (window_ok(name, w, a->s, err, errlen) == -1)
		return -1;
	mask_init(m, a->s, a->s, name, "");
	pat_param(m, "w=%lld", (long long)w);
	pat_band(m, 0, a->s, -w, causal ? 0 : w);
	return pat_finish(m, err, errlen);
}

int pat_sliding_window(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	return sliding(m, a, "sliding_window", 0, err, errlen);
}

int pat_sliding_window_causal(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	return sliding(m, a, "sliding_window_causal", 1, err, errlen);
}

/* |q-k| <= w or q < g or k < g, exactly (the FlashMask and Flex definition).
 * Defaults as the reference's Flex version: w uniform in [1, S/3-1], g = 2w. */
int pat_global_sliding_window(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t w = a->window, g = a->global, s = a->s;
	int randomw = w == PAT_UNSET;

	if (randomw)
		w = rng_range(a->rng, 1, s / 3 - 1 > 1 ? s / 3 - 1 : 1);
	if (g == PAT_UNSET)
		g = 2 * w < s ? 2 * w : s;
	if (window_ok("global_sliding_window", w, s, err, errlen) == -1)
		return -1;
	if (g < 0 || g > s) {
		snprintf(err, errlen, "global_sliding_window: %lld global tokens exceed the sequence (%lld)",
		    (long long)g, (long long)s);
		return -1;
	}
	mask_init(m, s, s, "global_sliding_window", "");
	pat_param(m, "w=%lld g=%lld", (long long)w, (long long)g);
	if (randomw)
		pat_param(m, "seed=%llu", (unsigned long long)a->seed);
	mask_add(m, 0, g, 0, s, MASK_FULL);
	mask_add(m, g, s, 0, g, MASK_FULL);
	pat_band(m, g, s - g, -w, w);
	return pat_finish(m, err, errlen);
}

/* k < p or k <= q; the reference draws p in [1, S]. */
int pat_prefix_lm_causal(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t p = a->prefix, s = a->s;
	int randomp = p == PAT_UNSET;

	if (randomp)
		p = rng_range(a->rng, 1, s);
	if (p < 1 || p > s) {
		snprintf(err, errlen, "prefix_lm_causal: prefix %lld is outside [1, %lld]", (long long)p, (long long)s);
		return -1;
	}
	mask_init(m, s, s, "prefix_lm_causal", "");
	pat_param(m, "p=%lld", (long long)p);
	if (randomp)
		pat_param(m, "seed=%llu", (unsigned long long)a->seed);
	mask_add(m, 0, s, 0, p, MASK_FULL);
	mask_add(m, p, s, p, s, MASK_CAUSAL);
	return pat_finish(m, err, errlen);
}
