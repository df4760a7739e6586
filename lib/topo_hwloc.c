/* Binding by hwloc: near the rank's GPU (its locality CPU set, from
 * hwloc/cudart.h), or on the CPU backend to the rank's share of its node's
 * cores.  A launcher that already bound the task (srun --cpu-bind, mpirun
 * --bind-to) knows the allocation better than we do: its binding stays. */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <string.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <hwloc/cudart.h>
#endif

#include "topo.h"

/* The network device nearest to obj: the one sharing the deepest ancestor,
 * OpenFabrics (RDMA) before plain network interfaces. */
static void nearest_nic(hwloc_topology_t topo, hwloc_obj_t near, hwloc_const_cpuset_t set, struct topo *t)
{
	hwloc_obj_t o = NULL, best = NULL;
	int bestscore = -1, score;

	while ((o = hwloc_get_next_osdev(topo, o)) != NULL) {
		hwloc_obj_t anc;

		if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS &&
		    o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK)
			continue;
		if (o->parent == NULL || o->parent->type != HWLOC_OBJ_PCI_DEVICE)
			continue;            /* virtual: lo, bridges, tunnels */
		anc = hwloc_get_non_io_ancestor_obj(topo, o);
		score = 0;
		if (near != NULL) {
			hwloc_obj_t c = hwloc_get_common_ancestor_obj(topo, near, o->parent);
			score = c ? (int)c->depth + 100 : 0;
		}
		if (anc != NULL && anc->cpuset != NULL && hwloc_bitmap_intersects(anc->cpuset, set))
			score += 50;
		score = 2 * score + (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS);
		if (score > bestscore) {
			bestscore = score;
			best = o;
		}
	}
	if (best != NULL)
		snprintf(t->nic, sizeof t->nic, "%s", best->name);
}

int topo_bind(const struct boot *b, struct topo *t, char *err, size_t errlen)
{
	hwloc_topology_t topo;
	hwloc_bitmap_t set = hwloc_bitmap_alloc(), cur = hwloc_bitmap_alloc();
	hwloc_const_cpuset_t allowed;
	hwloc_obj_t near = NULL, numa = NULL;
	int rc = -1;

	if (hwloc_topology_init(&topo) == -1) {
		snprintf(err, errlen, "hwloc_topology_init: %s", strerror(errno));
		goto out_nt;
	}
	hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (hwloc_topology_load(topo) == -1) {
		snprintf(err, errlen, "hwloc_topology_load: %s", strerror(errno));
		goto out;
	}
	allowed = hwloc_topology_get_allowed_cpuset(topo);
	if (hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) == -1)
		hwloc_bitmap_copy(cur, allowed);
	if (t->gpu >= 0) {
#ifdef HAVE_CUDA
		if (hwloc_cudart_get_device_cpuset(topo, t->gpu, set) == -1 || hwloc_bitmap_iszero(set))
			hwloc_bitmap_copy(set, allowed);
		near = hwloc_cudart_get_device_pcidev(topo, t->gpu);
		hwloc_bitmap_and(set, set, allowed);
		strcpy(t->how, "near the GPU");
#endif
		/* The launcher's binding wins when it lies inside the GPU's
		 * locality: it has split that locality between tasks already */
		if (!hwloc_bitmap_isequal(cur, allowed) && hwloc_bitmap_isincluded(cur, set)) {
			hwloc_bitmap_copy(set, cur);
			strcpy(t->how, "launcher's, near the GPU");
		}
	} else if (!hwloc_bitmap_isequal(cur, allowed)) {
		hwloc_bitmap_copy(set, cur);
		strcpy(t->how, "launcher's");
	} else {
		int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE);
		int lr = b->local_rank, ls = b->local_size > 0 ? b->local_size : 1, i, lo, hi;

		if (n <= 0)
			n = 1;
		if (ls <= n) {
			lo = lr * n / ls;
			hi = (lr + 1) * n / ls;
		} else {
			/* more ranks than cores: oversubscribed, spread round robin */
			lo = lr % n;
			hi = lo + 1;
		}
		hwloc_bitmap_zero(set);
		for (i = lo; i < hi; i++) {
			hwloc_obj_t c = hwloc_get_obj_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE, i);
			if (c != NULL)
				hwloc_bitmap_or(set, set, c->cpuset);
		}
		if (hwloc_bitmap_iszero(set))
			hwloc_bitmap_copy(set, allowed);
		snprintf(t->how, sizeof t->how, "share %d/%d of %d cores", lr, ls, n);
	}
	if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == -1) {
		snprintf(err, errlen, "hwloc_set_cpubind: %s", strerror(errno));
		goto out;
	}
	hwloc_bitmap_list_snprintf(t->cpus, sizeof t->cpus, set);
	numa = hwloc_get_next_obj_covering_cpuset_by_type(topo, set, HWLOC_OBJ_NUMANODE, NULL);
	if (numa == NULL) {
		/* NUMA nodes hang beside the CPUs in hwloc 2: ask the memory side */
		hwloc_obj_t o = NULL;
		while ((o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o)) != NULL)
			if (hwloc_bitmap_intersects(o->cpuset, set)) {
				numa = o;
				break;
			}
	}
	t->numa = numa ? (int)numa->os_index : -1;
	nearest_nic(topo, near, set, t);
	rc = 0;
out:
	hwloc_topology_destroy(topo);
out_nt:
	hwloc_bitmap_free(set);
	hwloc_bitmap_free(cur);
	return rc;
}
