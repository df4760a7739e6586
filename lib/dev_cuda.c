/* The device memory tracker of dev.h: cudaMalloc with a record of each
 * block's size, so kbench can report a pass's peak and tell an out of
 * memory from a crash. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "dev.h"
#include "util.h"

struct blk { void *p; size_t n; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct blk *blks;
static size_t nblks, capblks, inuse, peak;

int dev_alloc(void **p, size_t n)
{
	cudaError_t e;

	*p = NULL;
	e = cudaMalloc(p, n ? n : 1);
	if (e != cudaSuccess) {
		/* Clear the error so the next CUDA call does not report it. */
		(void)cudaGetLastError();
		*p = NULL;
		return -1;
	}
	pthread_mutex_lock(&mu);
	if (nblks == capblks) {
		capblks = capblks ? 2 * capblks : 64;
		blks = xrealloc(blks, capblks * sizeof *blks);
	}
	blks[nblks].p = *p;
	blks[nblks++].n = n;
	inuse += n;
	if (inuse > peak)
		peak = inuse;
	pthread_mutex_unlock(&mu);
	return 0;
}

void dev_free(void *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&mu);
	for (size_t i = nblks; i-- > 0; )
		if (blks[i].p == p) {
			inuse -= blks[i].n;
			blks[i] = blks[--nblks];
			break;
		}
	pthread_mutex_unlock(&mu);
	cudaFree(p);
}

size_t dev_inuse(void)
{
	size_t n;

	pthread_mutex_lock(&mu);
	n = inuse;
	pthread_mutex_unlock(&mu);
	return n;
}

size_t dev_peak(void)
{
	size_t n;

	pthread_mutex_lock(&mu);
	n = peak;
	pthread_mutex_unlock(&mu);
	return n;
}

int dev_cc(int dev, int *major, int *minor)
{
	*major = *minor = 0;
	if (cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		*major = *minor = 0;
		return -1;
	}
	return 0;
}

void dev_peak_reset(void)
{
	pthread_mutex_lock(&mu);
	peak = inuse;
	pthread_mutex_unlock(&mu);
}
