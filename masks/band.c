/* Helpers every pattern family uses: the band as FFA slices, the params
 * text, finishing with the library's checks. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pattern.h"
#include "util.h"

/* Rows split where the clipping at k = off and k = off+n changes: rows
 * [0,x) reach only the upper edge (causal), rows in the middle reach both
 * (bicausal) or neither (full), the last rows only the lower edge
 * (invcausal).  Each piece keeps the FFA alignment rules exact. */
int pat_band(struct mask *m, int64_t off, int64_t n, int64_t lo, int64_t hi)
{
	int64_t L = -lo, R = hi;
	int64_t a = L < n ? L : n, b = n - R > 0 ? n - R : 0;
	int64_t x = a < b ? a : b, c = a > b ? a : b;
	int r = 0;

	if (x > 0)
		r |= mask_add(m, off, off + x, off, off + x + R, MASK_CAUSAL);
	if (a <= b)
		r |= mask_add(m, off + a, off + b, off + a - L, off + b + R, MASK_BICAUSAL);
	else
		r |= mask_add(m, off + b, off + a, off, off + n, MASK_FULL);
	if (c < n)
		r |= mask_add(m, off + c, off + n, off + c - L, off + n, MASK_INVCAUSAL);
	return r;
}

void pat_param(struct mask *m, const char *fmt, ...)
{
	size_t len = strlen(m->params);
	va_list ap;
	int n;

	if (len > 0 && len + 1 < sizeof m->params)
		m->params[len++] = ' ';
	va_start(ap, fmt);
	n = vsnprintf(m->params + len, sizeof m->params - len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof m->params - len)
		errx(EXIT_BADINPUT, "parameters do not fit in %zu bytes", sizeof m->params - 1);
}

int pat_finish(struct mask *m, char *err, size_t errlen)
{
	char why[256];

	if (mask_finish(m, why, sizeof why) == -1) {
		snprintf(err, errlen, "%s: %s", m->pattern, why);
		return -1;
	}
	return 0;
}
