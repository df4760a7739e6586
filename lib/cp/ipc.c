/* lib/cp/ipc.h: handles swapped once through the world communicator,
 * flags written by peers into this rank's memory and waited for here (a
 * wait on local memory, a write across NVLink). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "comm.h"
#include "ipc.h"
#include "ops.h"
#include "util.h"

int ipc_usable(const struct cp_run *r)
{
	const struct boot *bt = r->env->boot;

	return r->x.gpu && bt != NULL && bt->nnodes == 1 && (bt->pmix || bt->size == 1);
}

/* Every peer mapping made so far undone, the flags freed. */
static void unmap(struct ipc *p, struct cp_run *r)
{
	for (int q = 0; q < p->world; q++) {
		if (q == p->me)
			continue;
		for (int i = 0; i < p->nbuf; i++)
			ops_ipc_close(&r->x, p->peer[(size_t)q * p->nbuf + i]);
		ops_ipc_close(&r->x, p->pflags[q]);
	}
	cp_free(r, (void *[]){ p->flags }, 1);
	free(p->peer);
	free(p->pflags);
}

int ipc_init(struct ipc *p, struct cp_run *r, void *const *bufs, int nbuf, int nflag)
{
	static int calls;
	int W = comm_size(r->env->world), me = comm_rank(r->env->world), bad = 0, rc = CP_OK;
	/* a rank's record: 1 if its handles are good (0 if not, 2 if out of
	 * memory), then nbuf + 1 handles */
	size_t rec = (size_t)(nbuf + 1) * OPS_IPC + 1;
	unsigned char *mine = xcalloc(1, rec), *all = xcalloc(W, rec);
	char key[32], err[160], was[sizeof r->x.why];
	const char *f = getenv("LONGATTN_FAULT");

	memcpy(was, r->x.why, sizeof was);
	*p = (struct ipc){ W, me, nbuf, nflag, NULL, NULL, NULL, "" };
	p->peer = xcalloc((size_t)W * nbuf, sizeof *p->peer);
	p->pflags = xcalloc(W, sizeof *p->pflags);
	p->flags = cp_alloc(r, (size_t)nflag * W * sizeof *p->flags, &bad);
	if (!bad) {
		ops_zero(&r->x, p->flags, (size_t)nflag * W * sizeof *p->flags, 0);
		mine[0] = ops_ipc_get(&r->x, p->flags, mine + 1 + (size_t)nbuf * OPS_IPC) == 0;
		for (int i = 0; i < nbuf; i++)
			if (bufs[i] != NULL && ops_ipc_get(&r->x, bufs[i], mine + 1 + (size_t)i * OPS_IPC) < 0)
				mine[0] = 0;
	}
	if (bad)
		mine[0] = 2;
	/* Through PMIx in host memory, so that every rank takes the same
	 * way, a rank out of memory included, and all see who failed */
	snprintf(key, sizeof key, "cp-ipc-%d", calls++);
	if (boot_allgather(r->env->boot, key, mine, all, rec, err, sizeof err) < 0)
		cp_commfail(r, "handle allgather");
	for (int q = 0; q < W; q++)
		if (all[q * rec] == 2)
			rc = CP_OOM;
	for (int q = 0; q < W && rc == CP_OK; q++)
		if (all[q * rec] == 0) {
			rc = CP_UNSUPPORTED;
			snprintf(p->why, sizeof p->why, "rank %d has no handle for its memory", q);
		}
	for (int q = 0; q < W && rc == CP_OK; q++) {
		const unsigned char *h = all + q * rec + 1;

		if (q == me) {
			for (int i = 0; i < nbuf; i++)
				p->peer[(size_t)q * nbuf + i] = bufs[i];
			p->pflags[q] = p->flags;
			continue;
		}
		for (int i = 0; i < nbuf && rc == CP_OK; i++)
			if (bufs[i] != NULL && (p->peer[(size_t)q * nbuf + i] = ops_ipc_open(&r->x, h + (size_t)i * OPS_IPC)) == NULL)
				rc = CP_UNSUPPORTED;
		if (rc == CP_OK && (p->pflags[q] = ops_ipc_open(&r->x, h + (size_t)nbuf * OPS_IPC)) == NULL)
			rc = CP_UNSUPPORTED;
	}
	/* For tests: the last rank cannot map its peers */
	if (f != NULL && strcmp(f, "ipc") == 0 && me == W - 1 && rc == CP_OK)
		rc = CP_UNSUPPORTED;
	/* Whether every rank mapped every peer: then all use the mappings */
	if (rc != CP_OOM) {
		unsigned char ok = rc == CP_OK, *oks = xcalloc(W, 1);

		snprintf(key, sizeof key, "cp-ipc-ok-%d", calls - 1);
		if (boot_allgather(r->env->boot, key, &ok, oks, 1, err, sizeof err) < 0)
			cp_commfail(r, "ipc allgather");
		for (int q = 0; q < W; q++)
			if (!oks[q]) {
				rc = CP_UNSUPPORTED;
				if (!p->why[0])
					snprintf(p->why, sizeof p->why, "rank %d: %.90s", q,
					         q == me && r->x.why[0] && !was[0] ? r->x.why : "cannot map a peer's memory");
			}
		free(oks);
	}
	if (rc == CP_OOM)
		cp_fail(r, "out of memory for the peer flags");
	/* No peer writes a flag before every rank has zeroed its own, nor
	 * unmaps before every rank knows the outcome */
	ops_sync(&r->x);
	if (comm_barrier(r->env->world) < 0)
		cp_commfail(r, "barrier");
	if (rc == CP_UNSUPPORTED) {
		unmap(p, r);
		ops_sync(&r->x);
		ops_unfail(&r->x, was);
		p->peer = NULL;
		p->pflags = NULL;
		p->flags = NULL;
	}
	free(mine);
	free(all);
	return rc;
}

void ipc_fini(struct ipc *p, struct cp_run *r)
{
	/* Nobody unmaps or frees while a peer's copies may still read */
	ops_sync(&r->x);
	if (comm_barrier(r->env->world) < 0)
		cp_commfail(r, "barrier");
	if (p->peer != NULL)
		unmap(p, r);
	*p = (struct ipc){ 0 };
}

void *ipc_buf(const struct ipc *p, int rank, int i)
{
	return p->peer[(size_t)rank * p->nbuf + i];
}

void ipc_post(const struct ipc *p, struct cp_run *r, int s, int to, int f, uint32_t v)
{
	ops_write32(&r->x, s, (uint32_t *)p->pflags[to] + (size_t)f * p->world + p->me, v);
}

void ipc_wait(const struct ipc *p, struct cp_run *r, int s, int from, int f, uint32_t v)
{
	ops_wait32(&r->x, s, p->flags + (size_t)f * p->world + from, v);
	comm_track(r->env->world, r->x.stream[s], "peer flag");
}
