/* boot.h over PMIx: srun --mpi=pmix and Open MPI's mpirun both run a PMIx
 * server beside each task.  Data moves by put, commit, fence (collecting
 * the data), get: slow, but only the NCCL id and a few bytes per rank go
 * this way. */
#include <errno.h>
#include <pmix.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot.h"
#include "util.h"

static pmix_proc_t me;
static int seq;                 /* keys are never reused: a get may see an older put */

static int get_u32(const pmix_proc_t *p, const char *key, uint32_t *out)
{
	pmix_value_t *v = NULL;
	pmix_info_t info;
	bool t = true;
	int rc = -1;

	/* Job and node facts are in the local store: do not ask the server */
	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &t, PMIX_BOOL);
	if (PMIx_Get(p, key, &info, 1, &v) == PMIX_SUCCESS && v != NULL) {
		switch (v->type) {
		case PMIX_UINT32: *out = v->data.uint32; rc = 0; break;
		case PMIX_UINT16: *out = v->data.uint16; rc = 0; break;
		case PMIX_INT:    *out = (uint32_t)v->data.integer; rc = 0; break;
		case PMIX_PROC_RANK: *out = v->data.rank; rc = 0; break;
		default: break;
		}
		PMIX_VALUE_RELEASE(v);
	}
	PMIX_INFO_DESTRUCT(&info);
	return rc;
}

static int get_str(const pmix_proc_t *p, const char *key, char *out, size_t n)
{
	pmix_value_t *v = NULL;
	int rc = -1;

	if (PMIx_Get(p, key, NULL, 0, &v) == PMIX_SUCCESS && v != NULL) {
		if (v->type == PMIX_STRING && v->data.string != NULL) {
			snprintf(out, n, "%s", v->data.string);
			rc = 0;
		}
		PMIX_VALUE_RELEASE(v);
	}
	return rc;
}

/* Node ids from each rank's PMIX_NODEID; launchers that do not publish it
 * for other ranks (Slurm's plugin gives only our own) fall back to an
 * all-gather of host names, numbered in order of first appearance. */
static int node_ids(struct boot *b, char *err, size_t errlen)
{
	pmix_proc_t p;
	uint32_t id;
	char (*names)[64];
	int r, i, ok = 1;

	for (r = 0; r < b->size && ok; r++) {
		PMIX_PROC_LOAD(&p, me.nspace, (pmix_rank_t)r);
		if (get_u32(&p, PMIX_NODEID, &id) == 0)
			b->node_of[r] = (int)id;
		else
			ok = 0;
	}
	if (!ok) {
		names = xcalloc(b->size, sizeof *names);
		if (boot_allgather(b, "host", b->host, names, sizeof *names, err, errlen) == -1) {
			free(names);
			return -1;
		}
		for (r = 0; r < b->size; r++) {
			for (i = 0; i < r && strcmp(names[i], names[r]) != 0; i++)
				;
			b->node_of[r] = i;
		}
		free(names);
	}
	/* Dense ids 0..nnodes-1 in order of the first rank on each node */
	{
		int *map = xmalloc(b->size * sizeof *map), n = 0, *first = xmalloc(b->size * sizeof *first);

		for (r = 0; r < b->size; r++) {
			for (i = 0; i < n && first[i] != b->node_of[r]; i++)
				;
			if (i == n)
				first[n++] = b->node_of[r];
			map[r] = i;
		}
		memcpy(b->node_of, map, b->size * sizeof *map);
		b->nnodes = n;
		free(map);
		free(first);
	}
	b->node = b->node_of[b->rank];
	return 0;
}

int boot_init(struct boot *b, char *err, size_t errlen)
{
	pmix_proc_t wild;
	uint32_t u;
	int r;

	/* Without a server PMIx 4 would start a singleton; ask only when a
	 * launcher left us its address, and let boot_lone judge otherwise. */
	if (getenv("PMIX_NAMESPACE") == NULL && getenv("PMIX_RANK") == NULL)
		return boot_lone(b, err, errlen);
	if ((r = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
		if (boot_lone(b, err, errlen) == 0)
			return 0;
		snprintf(err, errlen, "PMIx_Init: %s, while the launcher says this is "
		    "one of several tasks", PMIx_Error_string(r));
		return -1;
	}
	memset(b, 0, sizeof *b);
	b->pmix = 1;
	b->rank = (int)me.rank;
	PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
	if (get_u32(&wild, PMIX_JOB_SIZE, &u) == -1) {
		snprintf(err, errlen, "PMIx: no %s", PMIX_JOB_SIZE);
		return -1;
	}
	b->size = (int)u;
	b->local_rank = get_u32(&me, PMIX_LOCAL_RANK, &u) == 0 ? (int)u : 0;
	b->local_size = get_u32(&wild, PMIX_LOCAL_SIZE, &u) == 0 ? (int)u : 1;
	/* Slurm publishes its node name here: two slurmd on one host (the CI
	 * cluster) are two nodes although gethostname agrees. */
	if (get_str(&me, PMIX_HOSTNAME, b->host, sizeof b->host) == -1) {
		const char *s = getenv("SLURMD_NODENAME");

		snprintf(b->host, sizeof b->host, "%s", s ? s : host_name());
	}
	b->node_of = xcalloc(b->size, sizeof *b->node_of);
	return node_ids(b, err, errlen);
}

static int put_fence(struct boot *b, const char *key, const void *buf, size_t n,
    int put, char *err, size_t errlen)
{
	pmix_value_t v;
	pmix_info_t info;
	pmix_proc_t wild;
	bool t = true;
	int rc;

	if (put) {
		PMIX_VALUE_CONSTRUCT(&v);
		v.type = PMIX_BYTE_OBJECT;
		v.data.bo.bytes = (char *)buf;
		v.data.bo.size = n;
		if ((rc = PMIx_Put(PMIX_GLOBAL, key, &v)) != PMIX_SUCCESS) {
			snprintf(err, errlen, "rank %d: PMIx_Put %s: %s", b->rank, key, PMIx_Error_string(rc));
			return -1;
		}
	}
	if ((rc = PMIx_Commit()) != PMIX_SUCCESS) {
		snprintf(err, errlen, "rank %d: PMIx_Commit: %s", b->rank, PMIx_Error_string(rc));
		return -1;
	}
	PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &t, PMIX_BOOL);
	rc = PMIx_Fence(&wild, 1, &info, 1);
	PMIX_INFO_DESTRUCT(&info);
	if (rc != PMIX_SUCCESS) {
		snprintf(err, errlen, "rank %d: PMIx_Fence: %s", b->rank, PMIx_Error_string(rc));
		return -1;
	}
	return 0;
}

static int get_bytes(struct boot *b, const char *key, int r, void *buf, size_t n,
    char *err, size_t errlen)
{
	pmix_proc_t p;
	pmix_value_t *v = NULL;
	int rc;

	PMIX_PROC_LOAD(&p, me.nspace, (pmix_rank_t)r);
	if ((rc = PMIx_Get(&p, key, NULL, 0, &v)) != PMIX_SUCCESS || v == NULL) {
		snprintf(err, errlen, "rank %d: PMIx_Get %s from rank %d: %s", b->rank, key, r,
		    PMIx_Error_string(rc));
		return -1;
	}
	rc = v->type == PMIX_BYTE_OBJECT && v->data.bo.size == n;
	if (rc)
		memcpy(buf, v->data.bo.bytes, n);
	else
		snprintf(err, errlen, "rank %d: PMIx_Get %s from rank %d: wrong size", b->rank, key, r);
	PMIX_VALUE_RELEASE(v);
	return rc ? 0 : -1;
}

int boot_bcast(struct boot *b, const char *key, void *buf, size_t n, int root,
    char *err, size_t errlen)
{
	char k[PMIX_MAX_KEYLEN + 1];

	if (!b->pmix)
		return 0;
	snprintf(k, sizeof k, "la.%d.%s", seq++, key);
	if (put_fence(b, k, buf, n, b->rank == root, err, errlen) == -1)
		return -1;
	return b->rank == root ? 0 : get_bytes(b, k, root, buf, n, err, errlen);
}

int boot_allgather(struct boot *b, const char *key, const void *mine, void *all,
    size_t n, char *err, size_t errlen)
{
	char k[PMIX_MAX_KEYLEN + 1];
	int r;

	if (!b->pmix) {
		memcpy(all, mine, n);
		return 0;
	}
	snprintf(k, sizeof k, "la.%d.%s", seq++, key);
	if (put_fence(b, k, mine, n, 1, err, errlen) == -1)
		return -1;
	for (r = 0; r < b->size; r++) {
		if (r == b->rank)
			memcpy((char *)all + r * n, mine, n);
		else if (get_bytes(b, k, r, (char *)all + r * n, n, err, errlen) == -1)
			return -1;
	}
	return 0;
}

void boot_abort(struct boot *b, int status, const char *msg)
{
	char m[512];

	snprintf(m, sizeof m, "%s: rank %d (%s): %s", program_invocation_short_name,
	    b ? b->rank : -1, b ? b->host : "?", msg ? msg : "aborting");
	if (msg != NULL)
		fprintf(stderr, "%s\n", m);
	fflush(stderr);
	if (b != NULL && b->pmix) {
		pmix_proc_t wild;

		/* PMIx_Abort waits for the launcher to kill us; a dead launcher
		 * must not keep us here. */
		signal(SIGALRM, SIG_DFL);
		alarm(10);
		PMIX_PROC_LOAD(&wild, me.nspace, PMIX_RANK_WILDCARD);
		PMIx_Abort(status ? status : 1, m, &wild, 1);
	}
	boot_die(status);
}

void boot_fini(struct boot *b)
{
	if (b->pmix)
		PMIx_Finalize(NULL, 0);
	b->pmix = 0;
	free(b->node_of);
	b->node_of = NULL;
}
