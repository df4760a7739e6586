/* Without CUDA there is no device memory: every allocation fails and nothing
 * is in use, so code that picks host or device at run time links and runs
 * the same way in a CPU-only build (lib/dev_cuda.c is the real tracker). */
#ifndef HAVE_CUDA
#include "dev.h"

int dev_alloc(void **p, size_t n)
{
	(void)n;
	*p = NULL;
	return -1;
}

void dev_free(void *p)
{
	(void)p;
}

size_t dev_inuse(void) { return 0; }
size_t dev_peak(void) { return 0; }
void dev_peak_reset(void) {}

int dev_cc(int dev, int *major, int *minor)
{
	(void)dev;
	*major = *minor = 0;
	return -1;
}
#else
typedef int dev_c_is_empty_with_cuda;   /* ISO C wants a declaration */
#endif
