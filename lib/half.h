/* float <-> bf16 / fp16 on the host, round to nearest even, so inputs made on
 * the host are bit-identical to what __float2bfloat16_rn / __float2half_rn
 * would give on the device.  NaN stays NaN (quiet), overflow goes to inf,
 * fp16 keeps its subnormals.  dtype is DT_BF16 or DT_FP16 (kernel.h). */
#ifndef HALF_H
#define HALF_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernel.h"

static inline uint32_t half_fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float half_bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t half_to_bf16(float f)
{
	uint32_t u = half_fbits(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	/* Adding 0x7fff plus the kept lsb rounds ties to even; a carry into
	 * the exponent is the correct next binade (or inf). */
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static inline float half_from_bf16(uint16_t h)
{
	return half_bitsf((uint32_t)h << 16);
}

static inline uint16_t half_to_fp16(float f)
{
	uint32_t u = half_fbits(f);
	uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffff, r, rem, tie;
	int e;

	if (a > 0x7f800000)
		return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
	if (a >= 0x477ff000)            /* 65520 and up round to inf */
		return (uint16_t)(sign | 0x7c00);
	if (a >= 0x38800000) {          /* normal: rebias 127 -> 15 */
		a -= 0x38000000;
		r = a >> 13;
		rem = a & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	e = (int)(a >> 23);
	if (e < 102)                    /* below 2^-25: rounds to zero */
		return (uint16_t)sign;
	/* subnormal: units of 2^-24; m * 2^(e-150) / 2^-24 = m >> (126-e) */
	a = (a & 0x7fffff) | 0x800000;
	e = 126 - e;
	r = a >> e;
	rem = a & ((1u << e) - 1);
	tie = 1u << (e - 1);
	if (rem > tie || (rem == tie && (r & 1)))
		r++;
	return (uint16_t)(sign | r);
}

static inline float half_from_fp16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float f;

	if (e == 0) {
		f = (float)m * 0x1p-24f;
		return sign ? -f : f;
	}
	if (e == 31)
		return half_bitsf(sign | 0x7f800000 | (m << 13));
	return half_bitsf(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t half_to(int dtype, float f)
{
	return dtype == DT_FP16 ? half_to_fp16(f) : half_to_bf16(f);
}

static inline float half_from(int dtype, uint16_t h)
{
	return dtype == DT_FP16 ? half_from_fp16(h) : half_from_bf16(h);
}

/* Whole arrays: n elements of a dtype buffer to/from doubles.  A double is
 * first rounded to float, then to the dtype (exact for every value that
 * came from the dtype). */
static inline void half_load(int dtype, const void *src, double *dst, size_t n)
{
	const uint16_t *s = src;

	for (size_t i = 0; i < n; i++)
		dst[i] = half_from(dtype, s[i]);
}

static inline void half_store(int dtype, void *dst, const double *src, size_t n)
{
	uint16_t *d = dst;

	for (size_t i = 0; i < n; i++)
		d[i] = half_to(dtype, (float)src[i]);
}

#endif
