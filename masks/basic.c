/* full and causal: one slice each. */
#include "pattern.h"

int pat_full(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	mask_init(m, a->s, a->s, "full", "");
	mask_add(m, 0, a->s, 0, a->s, MASK_FULL);
	return pat_finish(m, err, errlen);
}

int pat_causal(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	mask_init(m, a->s, a->s, "causal", "");
	mask_add(m, 0, a->s, 0, a->s, MASK_CAUSAL);
	return pat_finish(m, err, errlen);
}
