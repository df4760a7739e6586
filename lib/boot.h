/* Where a rank stands: from PMIx (srun --mpi=pmix, Open MPI's mpirun), or a
 * lone process.  boot_init refuses to run as a lone rank 0 when the launcher
 * says there are several tasks (SLURM_NTASKS > 1, OMPI_COMM_WORLD_SIZE > 1,
 * PMIX_RANK set) but PMIx cannot be reached: N silent copies are worse than
 * an error. */
#ifndef BOOT_H
#define BOOT_H
#include <stddef.h>

struct boot {
	int rank, size;
	int local_rank, local_size;
	int node, nnodes;            /* node id of this rank, number of nodes */
	int *node_of;                /* node id of every rank (size entries) */
	char host[64];
	int pmix;                    /* 1 when PMIx is up */
};

int  boot_init(struct boot *b, char *err, size_t errlen);
/* Rank root's n bytes reach every rank (PMIx put, fence, get).  The NCCL
 * unique id travels this way. */
int  boot_bcast(struct boot *b, const char *key, void *buf, size_t n, int root, char *err, size_t errlen);
/* Every rank's n bytes, in rank order, on every rank (PMIx put/fence/get). */
int  boot_allgather(struct boot *b, const char *key, const void *mine, void *all, size_t n, char *err, size_t errlen);
/* Ends the whole job (PMIx_Abort), naming this rank; never returns.  msg
 * NULL: the caller has already said why. */
void boot_abort(struct boot *b, int status, const char *msg) __attribute__((noreturn));
void boot_fini(struct boot *b);

/* For lib/ itself: the lone-process fallback (refuses when the launcher
 * says there are several tasks), and a bounded exit for a failing job. */
int  boot_lone(struct boot *b, char *err, size_t errlen);
void boot_die(int status) __attribute__((noreturn));

#endif
