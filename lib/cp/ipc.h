/* Peer memory inside a node, for CP strategies on the GPU: each rank's
 * buffers mapped in every other rank (CUDA IPC), and in each rank's memory
 * a word per (flag, peer) that the peer raises with a stream memory
 * operation.  Copy engines then move data between GPUs with no SM and no
 * NCCL kernel, which a running attention kernel would keep waiting
 * (bench/NOTES.md, round 10).  A flag holds a pass number (epoch), so that
 * a wait for this pass is never met by an earlier one. */
#ifndef CP_IPC_H
#define CP_IPC_H
#include <stdint.h>

#include "cp_impl.h"

struct ipc {
	int world, me, nbuf, nflag;
	void **peer;            /* [world][nbuf]: rank r's buffer i, mapped here (own: as given) */
	uint32_t *flags;        /* own device words, [nflag][world] */
	void **pflags;          /* [world]: rank r's flags, mapped here */
	char why[120];          /* ipc_init's CP_UNSUPPORTED: which rank could not map, and why */
};

/* Whether every rank of the job shares this rank's node (and GPUs). */
int   ipc_usable(const struct cp_run *r);
/* Collective: maps the nbuf buffers of every rank (each an ops_alloc'd
 * pointer, NULL for none) in every other, and nflag flags per peer, all
 * zero when it returns on any rank.  CP_OK; CP_UNSUPPORTED on every rank
 * where one could not map them (p->why says which and why; nothing is
 * left mapped or failed, and the caller may go on without); else a
 * status with r->why.  LONGATTN_FAULT=ipc: the last rank cannot. */
int   ipc_init(struct ipc *p, struct cp_run *r, void *const *bufs, int nbuf, int nflag);
void  ipc_fini(struct ipc *p, struct cp_run *r);
void *ipc_buf(const struct ipc *p, int rank, int i);
/* Stream s, after its work so far: raise flag f that rank `to` keeps for
 * this rank to v; or wait until rank `from` has raised this rank's flag f
 * for it to v (the comm watchdog watches the wait). */
void  ipc_post(const struct ipc *p, struct cp_run *r, int s, int to, int f, uint32_t v);
void  ipc_wait(const struct ipc *p, struct cp_run *r, int s, int from, int f, uint32_t v);

#endif
