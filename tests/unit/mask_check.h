/* Checks shared by the mask and plan tests: a plan against a truth table. */
#ifndef MASK_CHECK_H
#define MASK_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan.h"

/* truth[(h*sq + q)*sk + k]: whether the pair is allowed. 0 if the plan
 * covers exactly the allowed pairs, else -1 with why. */
static inline int check_plan(const struct plan *p, const unsigned char *truth, int64_t sq, int64_t sk,
                      int heads, char *why, size_t whylen)
{
	int64_t nqt = (sq + p->bq - 1) / p->bq, nkt = (sk + p->bk - 1) / p->bk;
	int64_t nrt = p->transposed ? nkt : nqt, nft = 0, npt = 0;
	unsigned char *seen;
	uint64_t area = 0, want = 0;
	int rc = -1;

	if (p->sq != sq || p->sk != sk || p->nqt != nqt || p->nkt != nkt || p->heads != heads ||
	    p->nrows != heads * nrt) {
		snprintf(why, whylen, "plan shape");
		return -1;
	}
	if (p->row[0] != 0 || p->row[p->nrows] != p->nent) {
		snprintf(why, whylen, "row offsets");
		return -1;
	}
	seen = calloc((size_t)(heads * nqt * nkt), 1);
	for (int64_t r = 0; r < p->nrows; r++) {
		int64_t h = r / nrt, rt = r % nrt, last = -1;
		if (p->row[r + 1] < p->row[r]) {
			snprintf(why, whylen, "row %lld offsets decrease", (long long)r);
			goto out;
		}
		for (int32_t e = p->row[r]; e < p->row[r + 1]; e++) {
			const struct plan_ent *en = &p->ent[e];
			if (en->t0 < 0 || en->t0 >= en->t1 || en->t0 < last ||
			    en->t1 > (p->transposed ? nqt : nkt)) {
				snprintf(why, whylen, "row %lld entry %d: tiles [%d,%d) bad order",
				    (long long)r, e, en->t0, en->t1);
				goto out;
			}
			if (en->ncut > 0 && (en->t1 != en->t0 + 1 || en->cut0 < 0 ||
			    en->cut0 + en->ncut > p->ncut)) {
				snprintf(why, whylen, "row %lld entry %d: bad cuts", (long long)r, e);
				goto out;
			}
			last = en->t1;
			for (int64_t t = en->t0; t < en->t1; t++) {
				int64_t qt = p->transposed ? t : rt, kt = p->transposed ? rt : t;
				int64_t q0 = qt * p->bq, q1 = q0 + p->bq < sq ? q0 + p->bq : sq;
				int64_t k0 = kt * p->bk, k1 = k0 + p->bk < sk ? k0 + p->bk : sk;
				int any = 0;
				if (en->ncut == 0) nft++; else npt++;
				if (seen[(h * nqt + qt) * nkt + kt]++) {
					snprintf(why, whylen, "tile (%lld,%lld,%lld) twice",
					    (long long)h, (long long)qt, (long long)kt);
					goto out;
				}
				for (int64_t q = q0; q < q1; q++)
					for (int64_t k = k0; k < k1; k++) {
						int tr = truth[(h * sq + q) * sk + k], pl = 1;
						if (en->ncut > 0) {
							pl = 0;
							for (int c = 0; c < en->ncut; c++)
								pl += plan_cut_allows(&p->cut[en->cut0 + c], q, k);
							if (pl > 1) {
								snprintf(why, whylen, "cuts overlap at (%lld,%lld)",
								    (long long)q, (long long)k);
								goto out;
							}
						}
						if (pl != tr) {
							snprintf(why, whylen, "%s tile (%lld,%lld,%lld): pair (%lld,%lld) plan %d truth %d",
							    en->ncut ? "partial" : "full", (long long)h,
							    (long long)qt, (long long)kt, (long long)q,
							    (long long)k, pl, tr);
							goto out;
						}
						any |= tr;
						area += (uint64_t)tr;
					}
				if (!any) {
					snprintf(why, whylen, "empty tile (%lld,%lld,%lld) visited",
					    (long long)h, (long long)qt, (long long)kt);
					goto out;
				}
				/* plan_cut_any on the tile's quadrants, as a kernel
				 * asks which part of a partial tile to skip */
				for (int x = 0; x < 4 && en->ncut > 0; x++) {
					int64_t qm = (q0 + q1) / 2, km = (k0 + k1) / 2;
					int64_t a0 = x & 1 ? qm : q0, a1 = x & 1 ? q1 : qm;
					int64_t b0 = x & 2 ? km : k0, b1 = x & 2 ? k1 : km;
					int tr = 0, pl = 0;
					for (int64_t q = a0; q < a1; q++)
						for (int64_t k = b0; k < b1; k++)
							tr |= truth[(h * sq + q) * sk + k];
					for (int c = 0; c < en->ncut; c++)
						pl |= plan_cut_any(&p->cut[en->cut0 + c], a0, a1, b0, b1);
					if (pl != tr) {
						snprintf(why, whylen, "tile (%lld,%lld,%lld) part [%lld,%lld)x[%lld,%lld): plan_cut_any %d truth %d",
						    (long long)h, (long long)qt, (long long)kt, (long long)a0,
						    (long long)a1, (long long)b0, (long long)b1, pl, tr);
						goto out;
					}
				}
			}
		}
	}
	for (int64_t i = 0; i < heads * sq * sk; i++)
		want += truth[i];
	if (area != want || p->area != want) {
		snprintf(why, whylen, "plan covers %llu pairs, header %llu, truth %llu",
		    (unsigned long long)area, (unsigned long long)p->area, (unsigned long long)want);
		goto out;
	}
	if (nft != p->ntiles_full || npt != p->ntiles_partial) {
		snprintf(why, whylen, "tile counts %lld/%lld, plan says %lld/%lld", (long long)nft,
		    (long long)npt, (long long)p->ntiles_full, (long long)p->ntiles_partial);
		goto out;
	}
	rc = 0;
out:
	free(seen);
	return rc;
}

#endif
