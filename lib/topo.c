/* The GPU of a rank and the report; the binding itself is hwloc's
 * (lib/topo_hwloc.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "topo.h"
#include "util.h"

int topo_setup(const struct boot *b, int gpu, struct topo *t, char *err, size_t errlen)
{
	memset(t, 0, sizeof *t);
	t->gpu = -1;
	t->numa = -1;
	strcpy(t->nic, "-");
	if (gpu) {
#ifdef HAVE_CUDA
		cudaError_t e;

		if ((e = cudaGetDeviceCount(&t->ngpus)) != cudaSuccess || t->ngpus == 0) {
			snprintf(err, errlen, "no CUDA device (%s)",
			    e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
			return -1;
		}
		/* Slurm may give each task its own single visible GPU; then
		 * every local rank takes device 0 */
		t->gpu = b->local_rank % t->ngpus;
		if ((e = cudaSetDevice(t->gpu)) != cudaSuccess) {
			snprintf(err, errlen, "cudaSetDevice %d: %s", t->gpu,
			    cudaGetErrorString(e));
			return -1;
		}
		if (cudaDeviceGetPCIBusId(t->bus, sizeof t->bus, t->gpu) != cudaSuccess)
			strcpy(t->bus, "?");
#else
		snprintf(err, errlen, "no CUDA in this build");
		return -1;
#endif
	}
	return topo_bind(b, t, err, errlen);
}

#ifndef HAVE_HWLOC
int topo_bind(const struct boot *b, struct topo *t, char *err, size_t errlen)
{
	(void)b, (void)err, (void)errlen;
	strcpy(t->cpus, "all");
	strcpy(t->how, "unbound (no hwloc)");
	return 0;
}
#endif

int topo_report(struct boot *b, const struct topo *t, char *err, size_t errlen)
{
	char line[512], dev[64] = "cpu", *all;
	int r;

	if (t->gpu >= 0)
		snprintf(dev, sizeof dev, "gpu %d of %d (%s)", t->gpu, t->ngpus, t->bus);
	snprintf(line, sizeof line, "rank %d/%d on %s (node %d, local %d/%d): %s, numa %d, "
	    "cpus %s (%s), nic %s", b->rank, b->size, b->host, b->node, b->local_rank,
	    b->local_size, dev, t->numa, t->cpus, t->how, t->nic);
	all = xcalloc(b->size, sizeof line);
	if (boot_allgather(b, "topo", line, all, sizeof line, err, errlen) == -1) {
		free(all);
		return -1;
	}
	if (b->rank == 0)
		for (r = 0; r < b->size; r++)
			fprintf(stderr, "%s: %s\n", program_invocation_short_name, all + r * sizeof line);
	free(all);
	return 0;
}
