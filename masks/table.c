/* The pattern table: adding a pattern is one file and one line here. */
#include <string.h>

#include "pattern.h"

#define B(name) int pat_##name(struct mask *, const struct pattern_args *, char *, size_t);
B(full) B(causal) B(full_document) B(causal_document) B(share_question) B(causal_blockwise)
B(prefix_lm_causal) B(prefix_lm_document) B(sliding_window) B(sliding_window_causal)
B(global_sliding_window) B(block_causal_document) B(block_sparse_uniform) B(block_sparse_variable)
B(qk_sparse) B(hash_sparse) B(random_eviction) B(custom)
#undef B

const struct pattern pattern_table[] = {
	{ "full", "every query sees every key", 0, pat_full },
	{ "causal", "k <= q", 0, pat_causal },
	{ "full_document", "same document", PAT_DOCS, pat_full_document },
	{ "causal_document", "same document and k <= q", PAT_DOCS, pat_causal_document },
	{ "share_question", "document 0 causal, later documents see it all and themselves causally", PAT_DOCS, pat_share_question },
	{ "causal_blockwise", "documents causal, the last one sees everything before it", PAT_DOCS, pat_causal_blockwise },
	{ "prefix_lm_causal", "k < p or k <= q", PAT_RANDOM, pat_prefix_lm_causal },
	{ "prefix_lm_document", "per document: k - start < p or k <= q", PAT_DOCS | PAT_RANDOM, pat_prefix_lm_document },
	{ "sliding_window", "|q - k| <= w", 0, pat_sliding_window },
	{ "sliding_window_causal", "0 <= q - k <= w", 0, pat_sliding_window_causal },
	{ "global_sliding_window", "|q - k| <= w or q < g or k < g", PAT_RANDOM, pat_global_sliding_window },
	{ "block_causal_document", "per document, block row i sees blocks 0..i", PAT_RANDOM | PAT_OWNDOCS, pat_block_causal_document },
	{ "block_sparse_uniform", "random key blocks per query-block row, one pattern per KV head", PAT_RANDOM, pat_block_sparse_uniform },
	{ "block_sparse_variable", "as block_sparse_uniform on random variable-size blocks", PAT_RANDOM, pat_block_sparse_variable },
	{ "qk_sparse", "causal minus query-row and key-column spans (FlashMask)", 0, pat_qk_sparse },
	{ "hash_sparse", "causal within the same LSH bucket, bucket-sorted (FlashMask)", PAT_RANDOM, pat_hash_sparse },
	{ "random_eviction", "causal, key k evicted from row e(k) on (FlashMask)", PAT_RANDOM, pat_random_eviction },
	{ "custom", "a plain-text slice list: q0 q1 k0 k1 kind per line", 0, pat_custom },
	{ NULL, NULL, 0, NULL }
};

const struct pattern *pattern_find(const char *name)
{
	for (const struct pattern *p = pattern_table; p->name != NULL; p++)
		if (strcmp(p->name, name) == 0)
			return p;
	return NULL;
}
