/* The document family: every pattern whose pieces follow the documents of
 * a packed sequence.  O(documents) slices each. */
#include <stdio.h>
#include <stdlib.h>

#include "hist.h"
#include "pattern.h"

static void doc_params(struct mask *m, const struct pattern_args *a)
{
	pat_param(m, "docs=%zu", a->nlens);
	if (a->docsrc != NULL)
		pat_param(m, "dist=%s seed=%llu", a->docsrc, (unsigned long long)a->seed);
	else
		pat_param(m, "dist=file");
}

/* Starts m as one slice of the given kind per document: the diagonal that
 * the simple document patterns share before what they add under it. */
static void diagonal(struct mask *m, const struct pattern_args *a, const char *name, int kind)
{
	int64_t s = 0;

	mask_init(m, a->s, a->s, name, "");
	doc_params(m, a);
	for (size_t d = 0; d < a->nlens; s += a->lens[d++])
		mask_add(m, s, s + a->lens[d], s, s + a->lens[d], kind);
}

int pat_full_document(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	diagonal(m, a, "full_document", MASK_FULL);
	return pat_finish(m, err, errlen);
}

int pat_causal_document(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	diagonal(m, a, "causal_document", MASK_CAUSAL);
	return pat_finish(m, err, errlen);
}

/* Every later document sees all of document 0: one full slice under it. */
int pat_share_question(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t q = a->lens[0];

	diagonal(m, a, "share_question", MASK_CAUSAL);
	mask_add(m, q, a->s, 0, q, MASK_FULL);
	return pat_finish(m, err, errlen);
}

int pat_causal_blockwise(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t last = a->s - a->lens[a->nlens - 1];

	diagonal(m, a, "causal_blockwise", MASK_CAUSAL);
	mask_add(m, last, a->s, 0, last, MASK_FULL);
	return pat_finish(m, err, errlen);
}

/* Every document gets the same prefix p (cut to its length): the reference
 * draws p in [1, len(doc 0)]. */
int pat_prefix_lm_document(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t s = 0, p = a->prefix;

	if (p == PAT_UNSET)
		p = rng_range(a->rng, 1, a->lens[0]);
	if (p < 1) {
		snprintf(err, errlen, "prefix_lm_document: prefix %lld is not positive", (long long)p);
		return -1;
	}
	mask_init(m, a->s, a->s, "prefix_lm_document", "");
	pat_param(m, "p=%lld", (long long)p);
	doc_params(m, a);
	for (size_t d = 0; d < a->nlens; s += a->lens[d++]) {
		int64_t e = s + a->lens[d], pd = p < a->lens[d] ? p : a->lens[d];

		mask_add(m, s, e, s, s + pd, MASK_FULL);
		mask_add(m, s + pd, e, s + pd, e, MASK_CAUSAL);
	}
	return pat_finish(m, err, errlen);
}

/* Block row i of a document sees its blocks 0..i: one full slice per block
 * row.  Lengths from -L may end in a partial block. */
int pat_block_causal_document(struct mask *m, const struct pattern_args *a, char *err, size_t errlen)
{
	int64_t s = 0, B = a->block == PAT_UNSET ? 1024 : a->block;
	struct lens own = { 0 };
	const int64_t *lens = a->lens;
	size_t nlens = a->nlens;

	if (B < 1) {
		snprintf(err, errlen, "block_causal_document: block %lld is not positive", (long long)B);
		return -1;
	}
	mask_init(m, a->s, a->s, "block_causal_document", "");
	pat_param(m, "block=%lld", (long long)B);
	if (lens == NULL) {
		/* The reference: documents of 1..8 whole blocks, the last one cut. */
		if (a->s % B != 0) {
			snprintf(err, errlen, "block_causal_document: seqlen %lld is not a multiple of the block %lld",
			    (long long)a->s, (long long)B);
			return -1;
		}
		for (int64_t left = a->s / B; left > 0;) {
			int64_t nb = rng_range(a->rng, 1, 8);

			if (nb > left)
				nb = left;
			lens_push(&own, nb * B);
			left -= nb;
		}
		lens = own.v;
		nlens = own.n;
		pat_param(m, "docs=%zu dist=blocks1-8 seed=%llu", nlens, (unsigned long long)a->seed);
	} else {
		doc_params(m, a);
	}
	for (size_t d = 0; d < nlens; s += lens[d++]) {
		int64_t e = s + lens[d];

		for (int64_t r = s; r < e; r += B) {
			int64_t r1 = r + B < e ? r + B : e;

			mask_add(m, r, r1, s, r1, MASK_FULL);
		}
	}
	free(own.v);
	return pat_finish(m, err, errlen);
}
