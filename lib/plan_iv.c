/* One interval of keys a query row, or of queries a key: plan_intervals. */
#include <stdint.h>

#include "plan.h"

/* Whether [x, y) is all gaps: positions past a tile's real prefix
 * (gap[t] = {first real, real count} per b-wide tile; none where NULL). */
static int gaps(const int32_t (*gap)[2], int64_t b, int64_t x, int64_t y)
{
	for (; gap != NULL && x < y; x = (x / b + 1) * b)
		if (x % b < gap[x / b][1])
			return 0;
	return x >= y;
}

/* [lo, hi) into v, the line's interval so far ({0, 0}: none): 0 where the
 * two are apart by more than gaps.  The cuts of a plan are disjoint, so
 * merging only what touches keeps the union exact but for the gaps. */
static int add(int32_t *v, int64_t lo, int64_t hi, const int32_t (*gap)[2], int64_t b)
{
	if (lo >= hi)
		return 1;
	if (v[1] > v[0] && (lo > v[1] || hi < v[0]) &&
	    !(lo > v[1] ? gaps(gap, b, v[1], lo) : gaps(gap, b, hi, v[0])))
		return 0;
	if (v[1] <= v[0] || lo < v[0])
		v[0] = (int32_t)lo;
	if (v[1] <= v[0] || hi > v[1])
		v[1] = (int32_t)hi;
	return 1;
}

int plan_intervals(const struct plan *p, const int32_t (*gap)[2], int32_t (*iv)[2])
{
	const int t = p->transposed;
	/* a row's tiles are lines of size a along this axis; its entries
	 * tiles of size b along the other, which ends at end */
	const int64_t a = t ? p->bk : p->bq, b = t ? p->bq : p->bk, n = t ? p->nkt : p->nqt;
	const int64_t lend = t ? p->sk : p->sq, end = t ? p->sq : p->sk;

	if (p->heads != 1)
		return -1;
	for (int64_t i = 0; i < n * a; i++)
		iv[i][0] = iv[i][1] = 0;
	for (int64_t r = 0; r < n; r++) {
		const int64_t l0 = r * a, l1 = l0 + a < lend ? l0 + a : lend;
		for (int32_t e = p->row[r]; e < p->row[r + 1]; e++) {
			const struct plan_ent *E = &p->ent[e];
			const int64_t o0 = (int64_t)E->t0 * b, o1 = (int64_t)E->t1 * b < end ? (int64_t)E->t1 * b : end;
			for (int64_t l = l0; E->ncut == 0 && l < l1; l++)
				if (!add(iv[l], o0, o1, gap, b))
					return 0;
			for (int32_t c = E->cut0; c < E->cut0 + E->ncut; c++) {
				const struct plan_cut *C = &p->cut[c];
				const int64_t c0 = t ? C->k0 : C->q0, c1 = t ? C->k1 : C->q1;
				for (int64_t l = c0 > l0 ? c0 : l0; l < c1 && l < l1; l++) {
					int64_t lo, hi;
					plan_cut_line(C, t, l, o0, o1, &lo, &hi);
					if (!add(iv[l], lo, hi, gap, b))
						return 0;
				}
			}
		}
	}
	return 1;
}
