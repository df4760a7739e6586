/* lib/half.h: every bf16 and fp16 value survives a round trip, and float
 * rounding is to nearest, ties to even, checked against a brute-force
 * nearest search in double. */
#include <math.h>
#include <string.h>

#include "half.h"
#include "rng.h"
#include "tap.h"

/* The nearest of the representable values, by search: fl(x) in the format
 * whose values are given by from(). */
static uint16_t nearest(float x, float (*from)(uint16_t), uint16_t maxfinite)
{
	uint16_t lo = 0, hi = maxfinite, sign = signbit(x) ? 0x8000 : 0;
	double a = fabs((double)x), dl, dh;

	if (a > from(maxfinite)) {
		/* beyond the largest finite: halfway to the next power rounds up */
		double top = from(maxfinite), ulp = top - from(maxfinite - 1);
		return a >= top + ulp / 2 ? sign | (uint16_t)(maxfinite + 1) : sign | maxfinite;
	}
	while (hi - lo > 1) {           /* positive values are ordered by bits */
		uint16_t mid = (uint16_t)((lo + hi) / 2);
		if (from(mid) <= a) lo = mid; else hi = mid;
	}
	dl = a - from(lo);
	dh = from(hi) - a;
	if (dl < dh || (dl == dh && !(lo & 1)))
		return sign | lo;
	return sign | hi;
}

int main(void)
{
	struct rng g;
	int bad16 = 0, badbf = 0, rne16 = 0, rnebf = 0;

	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t x = (uint16_t)h;
		float f = half_from_fp16(x), b = half_from_bf16(x);
		if (isnan(f) ? !isnan(half_from_fp16(half_to_fp16(f))) : half_to_fp16(f) != x)
			bad16++;
		if (isnan(b) ? !isnan(half_from_bf16(half_to_bf16(b))) : half_to_bf16(b) != x)
			badbf++;
	}
	ok(bad16 == 0, "every fp16 value round-trips (%d bad)", bad16);
	ok(badbf == 0, "every bf16 value round-trips (%d bad)", badbf);

	rng_seed(&g, 1);
	for (int i = 0; i < 200000; i++) {
		/* random bits over all exponents, plus exact ties */
		uint32_t u = (uint32_t)rng_next(&g);
		float f;
		memcpy(&f, &u, 4);
		if (i % 4 == 1)
			f = (float)ldexp(rng_double(&g) * 2 - 1, (int)rng_range(&g, -28, 17));
		if (i % 4 == 2) {  /* a tie between two fp16 neighbours */
			uint16_t h = (uint16_t)rng_range(&g, 0, 0x7bfe);
			f = (float)(((double)half_from_fp16(h) + half_from_fp16((uint16_t)(h + 1))) / 2);
		}
		if (i % 4 == 3) {  /* a tie between two bf16 neighbours */
			uint16_t h = (uint16_t)rng_range(&g, 0, 0x7f7e);
			f = (float)(((double)half_from_bf16(h) + half_from_bf16((uint16_t)(h + 1))) / 2);
		}
		if (isnan(f))
			continue;
		if (fabsf(f) < 65536.0f * 2 && half_to_fp16(f) != nearest(f, half_from_fp16, 0x7bff))
			rne16++;
		if (!isinf(f) && half_to_bf16(f) != nearest(f, half_from_bf16, 0x7f7f))
			rnebf++;
	}
	ok(rne16 == 0, "float -> fp16 rounds to nearest even (%d bad)", rne16);
	ok(rnebf == 0, "float -> bf16 rounds to nearest even (%d bad)", rnebf);

	/* Hand-picked ties and edges. */
	ok(half_to_bf16(1.00390625f) == 0x3f80, "bf16 tie 1+2^-8 goes to even 1.0");
	ok(half_to_bf16(1.01171875f) == 0x3f82, "bf16 tie 1+3*2^-8 goes to even");
	ok(half_to_fp16(65520.0f) == 0x7c00 && half_to_fp16(65519.0f) == 0x7bff, "fp16 overflow at 65520");
	ok(half_to_fp16(0x1p-25f) == 0 && half_to_fp16(0x1.8p-25f) == 1, "fp16 smallest subnormal ties");
	ok(half_to_fp16(-0.0f) == 0x8000 && half_to_bf16(-0.0f) == 0x8000, "negative zero keeps its sign");
	ok(isnan(half_from_bf16(half_to_bf16(NAN))) && isnan(half_from_fp16(half_to_fp16(NAN))), "NaN stays NaN");
	return tap_done();
}
