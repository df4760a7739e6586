/* Inside the mask library: the row geometry of a slice and the exact
 * clipping that restrict, the plan and the checks share.  Not for tools. */
#ifndef MASK_PRIV_H
#define MASK_PRIV_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "mask.h"

/* Row q of slice s (q0 <= q < q1) allows k in [mask_row_lo, mask_row_hi);
 * empty when lo >= hi.  Both move by 0 or 1 per row. */
static inline int64_t mask_row_lo(const struct mask_slice *s, int64_t q)
{
	if (s->kind == MASK_INVCAUSAL || s->kind == MASK_BICAUSAL)
		return q + s->k0 - s->q0;
	return s->k0;
}

static inline int64_t mask_row_hi(const struct mask_slice *s, int64_t q)
{
	if (s->kind == MASK_CAUSAL || s->kind == MASK_BICAUSAL)
		return q + s->k1 - s->q1 + 1;
	return s->k1;
}

/* The rows [*ra,*rb) of s that allow something; *ra == *rb if none. */
void mask_slice_rows(const struct mask_slice *s, int64_t *ra, int64_t *rb);

/* The part of s inside [Q0,Q1) x [K0,K1) as at most 3 slices in the same
 * coordinates, each obeying the FFA rules, none empty.  Returns the count. */
int mask_clip(const struct mask_slice *s, int64_t Q0, int64_t Q1, int64_t K0, int64_t K1,
              struct mask_slice out[3]);
/* Allowed pairs of s inside the rectangle, in closed form. */
uint64_t mask_clip_area(const struct mask_slice *s, int64_t Q0, int64_t Q1, int64_t K0, int64_t K1);

/* The block i with b[i] <= x < b[i+1], for boundaries b[0] = 0 <= x < b[n]. */
static inline int64_t mask_block_of(const int64_t *b, int64_t n, int64_t x)
{
	int64_t lo = 0, hi = n;

	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;
		if (b[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Whether a and b allow a common pair (exact). */
int mask_slices_meet(const struct mask_slice *a, const struct mask_slice *b);

/* Validate a finished body and compute m->area.  sorted: the slices must
 * already be in order (a file); otherwise they are sorted first. */
int mask_check(struct mask *m, int sorted, char *err, size_t errlen);

/* The bits n .. n+63 of a block bitmap of nbits bits (those past the end
 * read as 0): rows of cells start at any bit, so words are unaligned. */
static inline uint64_t mask_bits64(const uint8_t *bits, uint64_t nbits, uint64_t n)
{
	uint64_t w = 0, nbytes = (nbits + 7) / 8, i = n / 8;
	unsigned sh = (unsigned)(n % 8);

	for (unsigned b = 0; b < 9 && i + b < nbytes; b++) {
		uint64_t v = bits[i + b];
		if (b == 0)
			w |= v >> sh;
		else if (8 * b - sh < 64)
			w |= v << (8 * b - sh);
	}
	if (n >= nbits)
		return 0;
	if (nbits - n < 64)
		w &= ((uint64_t)1 << (nbits - n)) - 1;
	return w;
}

/* Grows the array *pp (capacity *cap items of size sz, doubling) to hold
 * at least n+1 items: 0, or -1 with *pp untouched when memory or size_t
 * runs out. */
static inline int mask_grow(void *pp, size_t *cap, size_t n, size_t sz)
{
	void **p = pp, *q;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? *cap : 256;
	while (c <= n) {
		if (c > SIZE_MAX / 4)
			return -1;
		c *= 2;
	}
	if (c > SIZE_MAX / sz || (q = realloc(*p, c * sz)) == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* Formats a message into err (when there is room) and returns -1, so that
 * a check fails in one statement. */
int mask_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Order of slices: q0, k0, then the rest, so the order is total. */
int mask_slice_cmp(const void *a, const void *b);

#endif
