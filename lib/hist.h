/* Document-length histograms (`lo hi weight`, half-open bins) and the
 * packing of sampled lengths to an exact total, shared by seqsample and the
 * document patterns of maskgen.  Errors: -1 and a one-line message in err
 * that names the input ("FILE:LINE: ..."), no tool name, no newline. */
#ifndef HIST_H
#define HIST_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "rng.h"

#define HIST_MAXLEN ((int64_t)1 << 32)   /* lengths stay below 2^32, bins end at most there */
#define HIST_MAXBINS ((int64_t)1 << 20)  /* bins hist_make makes at most */

struct hist {
	size_t n;
	int64_t *lo, *hi;
	double *cum;          /* cumulative weights, cum[n-1] = total */
	char name[64];        /* built-in name, or the path's last part */
};

/* NAME is a built-in (pile, prolong64k, prolong512k: looked up as NAME.tsv in
 * $LONGATTN_DATA, DATADIR/dists, SRCDIR/masks/dists) or a file path. */
int  hist_load(struct hist *h, const char *name, char *err, size_t errlen);
int  hist_parse(struct hist *h, FILE *fp, const char *path, char *err, size_t errlen);
void hist_free(struct hist *h);
/* The reference's choice by total: <= 12K pile, <= 64K prolong64k, else prolong512k. */
const char *hist_default(int64_t total);

/* One length: a bin by weight, then uniform in [max(lo,1), hi). */
int64_t hist_draw(const struct hist *h, struct rng *r);

/* A growing list of lengths. */
struct lens {
	int64_t *v;
	size_t n, cap;
};
void lens_push(struct lens *l, int64_t x);

/* Appends lengths summing exactly to total (the last one truncated). */
void hist_pack(const struct hist *h, struct rng *r, int64_t total, struct lens *out);
/* The reference's *_document_long: 40% of the tokens from h, 60% from
 * documents uniform in [8K, 30K], shuffled; exact total. */
void hist_pack_long(const struct hist *h, struct rng *r, int64_t total, struct lens *out);

/* Reads lengths, one positive integer per line, optional header line "len".
 * Returns 0 or -1 (bad line, no lengths). */
int hist_read_lengths(FILE *fp, const char *path, struct lens *out, char *err, size_t errlen);

/* The histogram of lengths l (each in [1, 2^32)): bins of `width` tokens,
 * or [2^b, 2^(b+1)) for width 0, from the shortest length's bin to the
 * longest's, empty ones included, the last cut at 2^32; h->cum counts
 * lengths.  -1 with a message when that is more than HIST_MAXBINS bins. */
int hist_make(struct hist *h, const struct lens *l, int64_t width, char *err, size_t errlen);
/* Prints h as hist_parse reads it, the weights as fractions of the total. */
void hist_write(FILE *fp, const struct hist *h);

#endif
