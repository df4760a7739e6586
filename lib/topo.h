/* Where a rank runs: its GPU, NUMA node, CPUs and nearest network device,
 * from hwloc (lib/topo_hwloc.c; without hwloc nothing is bound). */
#ifndef TOPO_H
#define TOPO_H
#include <stddef.h>
#include "boot.h"

struct topo {
	int gpu, ngpus;          /* CUDA device chosen, devices CUDA sees; -1, 0 on the CPU */
	char bus[20];            /* the GPU's PCI bus id */
	int numa;                /* -1: unknown */
	char cpus[96];           /* CPUs the rank is bound to, as a list */
	char nic[32];            /* nearest network device, "-" if none */
	char how[48];            /* how the binding was chosen */
};

/* gpu: pick this rank's GPU (its local rank among the devices CUDA sees,
 * which honours CUDA_VISIBLE_DEVICES), make it current and bind near it;
 * else bind the rank to its share of its node's cores.  -1 and a message
 * (no device, say) in err. */
int topo_setup(const struct boot *b, int gpu, struct topo *t, char *err, size_t errlen);
/* Collective: rank 0 prints one line per rank on stderr. */
int topo_report(struct boot *b, const struct topo *t, char *err, size_t errlen);

/* lib/topo_hwloc.c, or the fallback in lib/topo.c: fills numa, cpus, nic,
 * how, and binds. */
int topo_bind(const struct boot *b, struct topo *t, char *err, size_t errlen);

#endif
