/* The lone-process side of boot.h: the fallback when the build has no PMIx
 * or PMIx cannot be reached.  It refuses when the launcher says there are
 * several tasks: N copies each believing it is rank 0 would each write rows
 * and agree on nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot.h"
#include "util.h"

static int env_more_than_one(const char *name)
{
	const char *s = getenv(name);

	return s != NULL && atoi(s) > 1;
}

int boot_lone(struct boot *b, char *err, size_t errlen)
{
	const char *why = NULL;

	if (env_more_than_one("SLURM_NTASKS"))
		why = "SLURM_NTASKS";
	else if (env_more_than_one("SLURM_STEP_NUM_TASKS"))
		why = "SLURM_STEP_NUM_TASKS";
	else if (env_more_than_one("OMPI_COMM_WORLD_SIZE"))
		why = "OMPI_COMM_WORLD_SIZE";
	else if (getenv("PMIX_RANK") != NULL)
		why = "PMIX_RANK";
	if (why != NULL) {
		snprintf(err, errlen, "%s=%s says this is one of several tasks, but PMIx "
		    "cannot be reached%s", why, getenv(why),
#ifdef HAVE_PMIX
		    " (launch with srun --mpi=pmix or mpirun)"
#else
		    " (this build has no PMIx)"
#endif
		    );
		return -1;
	}
	memset(b, 0, sizeof *b);
	b->size = b->local_size = b->nnodes = 1;
	b->node_of = xcalloc(1, sizeof *b->node_of);
	snprintf(b->host, sizeof b->host, "%s", host_name());
	return 0;
}

/* Called with the job already failing: bounded, so a wedged launcher cannot
 * keep the process alive. */
void boot_die(int status)
{
	fflush(stdout);
	fflush(stderr);
	_exit(status ? status : 1);
}

#ifndef HAVE_PMIX
int boot_init(struct boot *b, char *err, size_t errlen)
{
	return boot_lone(b, err, errlen);
}

int boot_bcast(struct boot *b, const char *key, void *buf, size_t n, int root,
    char *err, size_t errlen)
{
	(void)b, (void)key, (void)buf, (void)n, (void)root, (void)err, (void)errlen;
	return 0;
}

int boot_allgather(struct boot *b, const char *key, const void *mine, void *all,
    size_t n, char *err, size_t errlen)
{
	(void)b, (void)key, (void)err, (void)errlen;
	memcpy(all, mine, n);
	return 0;
}

void boot_abort(struct boot *b, int status, const char *msg)
{
	if (msg != NULL)
		fprintf(stderr, "%s: rank %d: %s\n", program_invocation_short_name, b ? b->rank : 0, msg);
	boot_die(status);
}

void boot_fini(struct boot *b)
{
	free(b->node_of);
	b->node_of = NULL;
}
#endif
