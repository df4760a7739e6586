/* A rectangle of a mask as a mask of its own, for context parallelism. */
#include <stdlib.h>
#include <string.h>

#include "mask.h"
#include "mask_priv.h"

/* the boundaries of b that fall inside [x0,x1), shifted to start at 0 */
static int64_t *cut_bounds(const int64_t *b, int64_t n, int64_t x0, int64_t x1,
                           int64_t *first, int64_t *nb)
{
	int64_t i0 = mask_block_of(b, n, x0), i1 = mask_block_of(b, n, x1 - 1), *o;

	*first = i0;
	*nb = i1 - i0 + 1;
	if ((o = malloc((size_t)(*nb + 1) * sizeof *o)) == NULL)
		return NULL;
	o[0] = 0;
	for (int64_t i = 1; i < *nb; i++)
		o[i] = b[i0 + i] - x0;
	o[*nb] = x1 - x0;
	return o;
}

static int restrict_blocks(const struct mask *m, int64_t q0, int64_t q1, int64_t k0, int64_t k1,
                           struct mask *out, char *err, size_t errlen)
{
	int64_t fi, fj, nq, nk, *qb, *kb;
	int rc;

	qb = cut_bounds(m->qb, m->nqb, q0, q1, &fi, &nq);
	kb = cut_bounds(m->kb, m->nkb, k0, k1, &fj, &nk);
	rc = qb == NULL || kb == NULL ? -1 :
	    mask_init_blocks(out, q1 - q0, k1 - k0, m->heads, nq, qb, nk, kb, m->pattern, m->params);
	free(qb);
	free(kb);
	if (rc != 0)
		return mask_fail(err, errlen, "out of memory");
	for (int h = 0; h < m->heads; h++)
		for (int64_t i = 0; i < nq; i++)
			for (int64_t j = 0; j < nk; j++)
				if (mask_getblock(m, h, fi + i, fj + j))
					mask_setblock(out, h, i, j);
	return mask_finish(out, err, errlen);
}

int mask_restrict(const struct mask *m, int64_t q0, int64_t q1, int64_t k0, int64_t k1,
                  struct mask *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (q0 < 0 || q1 > m->sq || q0 >= q1 || k0 < 0 || k1 > m->sk || k0 >= k1)
		return mask_fail(err, errlen, "range [%lld,%lld) x [%lld,%lld) is empty or outside %lld x %lld",
		    (long long)q0, (long long)q1, (long long)k0, (long long)k1,
		    (long long)m->sq, (long long)m->sk);
	if (m->body == MASK_BODY_BLOCKS)
		return restrict_blocks(m, q0, q1, k0, k1, out, err, errlen);
	mask_init(out, q1 - q0, k1 - k0, m->pattern, m->params);
	for (size_t i = 0; i < m->nslices && m->slices[i].q0 < q1; i++) {
		struct mask_slice p[3];
		int n = mask_clip(&m->slices[i], q0, q1, k0, k1, p);
		for (int j = 0; j < n; j++)
			if (mask_add(out, p[j].q0 - q0, p[j].q1 - q0, p[j].k0 - k0, p[j].k1 - k0,
			    p[j].kind) != 0) {
				mask_free(out);
				return mask_fail(err, errlen, "out of memory");
			}
	}
	if (mask_finish(out, err, errlen) != 0) {
		mask_free(out);
		return -1;
	}
	return 0;
}
