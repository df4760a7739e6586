/* Minimal TAP-like output for C unit tests: tests/run.sh counts the lines. */
#ifndef TAP_H
#define TAP_H
#include <stdarg.h>
#include <stdio.h>

static int tap_failed;

static void ok(int cond, const char *fmt, ...)
{
	va_list ap;

	printf(cond ? "ok " : "not ok ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	if (!cond)
		tap_failed++;
}

static int tap_done(void)
{
	return tap_failed ? 1 : 0;
}

#endif
