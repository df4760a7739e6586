/* The mask file in memory: a list of slices (MagiAttention FFA semantics) or a
 * block-sparse body, plus the exact area.  See amask(5) for the bytes on disk. */
#ifndef MASK_H
#define MASK_H
#include <stddef.h>
#include <stdint.h>

/* Slice kinds.  Ranges are half open: q in [q0,q1), k in [k0,k1).
 *   MASK_FULL       every pair of the rectangle
 *   MASK_CAUSAL     bottom-right aligned: k - q <= k1 - q1
 *   MASK_INVCAUSAL  top-left aligned:     k - q >= k0 - q0
 *   MASK_BICAUSAL   both (a band) */
enum { MASK_FULL, MASK_CAUSAL, MASK_INVCAUSAL, MASK_BICAUSAL, MASK_NKINDS };
enum { MASK_BODY_SLICES = 1, MASK_BODY_BLOCKS = 2 };

#define MASK_MAXSEQ   ((int64_t)1 << 32)   /* seqlen must be < this */
#define MASK_PATTERN  32                   /* bytes for the pattern name, NUL included */
#define MASK_PARAMS   256                  /* bytes for the parameter text, NUL included */

struct mask_slice {
	int64_t q0, q1, k0, k1;
	int32_t kind;
};

struct mask {
	int64_t sq, sk;
	int32_t body;                 /* MASK_BODY_* */
	int32_t heads;                /* mask heads; 1 = shared by every attention head */
	uint64_t area;                /* allowed pairs, summed over mask heads (mask_finish) */
	char pattern[MASK_PATTERN];
	char params[MASK_PARAMS];     /* "key=value key=value", e.g. "w=1024 seed=7" */

	/* MASK_BODY_SLICES: one sorted, disjoint list; heads == 1 */
	size_t nslices, cap;
	struct mask_slice *slices;

	/* MASK_BODY_BLOCKS: boundaries qb[0]=0 < ... < qb[nqb]=sq (same for k);
	 * cell (h,i,j) kept iff bit ((h*nqb + i)*nkb + j) of bits is set,
	 * bit n at bits[n/8] & (1 << n%8). */
	int64_t nqb, nkb;
	int64_t *qb, *kb;
	uint8_t *bits;
};

/* Building.  mask_init starts an empty slice body; mask_add appends a slice
 * (empty ranges are dropped); mask_finish sorts, validates (bounds, kinds,
 * disjointness) and computes the area.  Errors: -1 and a message in err
 * (no tool name, no newline). */
void mask_init(struct mask *m, int64_t sq, int64_t sk, const char *pattern, const char *params);
int  mask_add(struct mask *m, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind);
int  mask_init_blocks(struct mask *m, int64_t sq, int64_t sk, int heads,
                      int64_t nqb, const int64_t *qb, int64_t nkb, const int64_t *kb,
                      const char *pattern, const char *params);
void mask_setblock(struct mask *m, int head, int64_t i, int64_t j);
int  mask_getblock(const struct mask *m, int head, int64_t i, int64_t j);
int  mask_finish(struct mask *m, char *err, size_t errlen);
void mask_free(struct mask *m);

/* File I/O.  path "-" is stdin/stdout.  mask_read validates every field
 * (magic, version, sizes against the file length, bounds, order,
 * disjointness, area, checksum).  mask_write writes a temp file beside path
 * and renames it, so no partial file is ever left. */
int mask_read(const char *path, struct mask *m, char *err, size_t errlen);
int mask_write(const char *path, const struct mask *m, char *err, size_t errlen);

/* Queries. */
int      mask_allows(const struct mask *m, int head, int64_t q, int64_t k);
uint64_t mask_slice_area(const struct mask_slice *s);     /* closed form */
uint64_t mask_head_area(const struct mask *m, int head);
const char *mask_kind_name(int kind);                      /* "full", ... */
int      mask_kind_parse(const char *s);                   /* -1 if unknown */

/* CP: the part of m inside [q0,q1) x [k0,k1), in coordinates relative to
 * (q0,k0), as a new mask of sq = q1-q0, sk = k1-k0 (same body kind, same
 * heads, same pattern and params).  Exact: the result allows (q,k) iff m
 * allows (q+q0, k+k0).  Clipped diagonal slices are split into full and
 * diagonal pieces so that the FFA alignment rules still hold. */
int mask_restrict(const struct mask *m, int64_t q0, int64_t q1, int64_t k0, int64_t k1,
                  struct mask *out, char *err, size_t errlen);

/* Gaps that start documents on tile edges (see mask_pad.c).  A segment
 * start is a position no slice straddles; each one that starts a segment of
 * at least minq (mink) positions moves right to the next multiple of aq
 * (ak), and so does all that follows.  v is m with the gaps, which allow
 * nothing (same area, same pairs translated); pd lists the gaps of each
 * axis as pairs (real position, length of the gap before it).  Returns 1,
 * or 0 where no gap is needed (v and pd untouched, pd empty), or -1 with
 * a message.  Slice bodies only (block bodies return 0). */
struct mask_pads {
	size_t nq, nk;
	int64_t *q, *k;
};
int  mask_pad(const struct mask *m, int aq, int ak, int64_t minq, int64_t mink, struct mask *v,
              struct mask_pads *pd, char *err, size_t errlen);
void mask_pads_free(struct mask_pads *pd);
/* Per t-wide tile of the padded axis (len real positions, gaps g[0..n)):
 * {first real position, real positions in the tile}, the real ones a
 * prefix of the tile; *ntile tiles.  -1: out of memory, or a gap that does
 * not end on a tile edge (t must divide the alignment). */
int  mask_pad_tiles(const int64_t *g, size_t n, int64_t len, int t, int32_t (**tile)[2], int64_t *ntile);

#endif
