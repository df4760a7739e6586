/* Inside the comm layer: what a backend provides (lib/comm_mpi.c,
 * lib/comm_nccl.c) and what lib/comm.c wraps around every call (argument
 * checks, the watchdog that turns a hang into an abort, fault injection).
 * Not for strategies: they see lib/comm.h alone. */
#ifndef COMM_BE_H
#define COMM_BE_H
#include <stddef.h>
#include "comm.h"

enum { COMM_SUM, COMM_MAX };

struct comm {
	const struct comm_be *be;
	int backend, rank, size;
	struct boot *boot;
	struct comm *world;        /* itself for the world */
	struct comm *next;         /* every live comm, for comm_abort */
	void *impl;
};

struct comm_req {
	struct comm *c;
	void *impl;
};

struct comm_be {
	const char *name;
	int  (*init)(struct comm *w, char *err, size_t errlen);
	int  (*split)(struct comm *c, int color, int key, struct comm *out);
	int  (*isendrecv)(struct comm *c, const void *sbuf, int dst, void *rbuf, int src,
	                  size_t count, int type, void *stream, struct comm_req *req);
	int  (*wait)(struct comm_req *req, void *stream);
	int  (*exchange)(struct comm *c, const struct comm_seg *sv, int ns, int dst,
	                 const struct comm_seg *rv, int nr, int src, int type, void *stream,
	                 struct comm_req *req);
	int  (*alltoall)(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream);
	int  (*allgather)(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream);
	int  (*reducescatter)(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream);
	int  (*allreduce)(struct comm *c, void *buf, size_t count, int type, int op, void *stream);
	int  (*barrier)(struct comm *c);
	/* After an enqueue on stream: note it, so the watchdog can see it
	 * finish (NULL for backends whose calls block). */
	void (*track)(struct comm *c, void *stream, const char *what);
	/* From the watchdog: 0, or -1 with why filled when an operation failed
	 * or has been pending longer than timeout seconds. */
	int  (*poll)(struct comm *w, double timeout, char *why, size_t n);
	void (*abort)(struct comm *c);     /* best effort, bounded by the caller */
	void (*free)(struct comm *c);
};

extern const struct comm_be comm_mpi_be, comm_nccl_be;

double comm_now(void);          /* monotonic seconds */
double comm_timeout(void);      /* LONGATTN_TIMEOUT, default 60 */

#endif
