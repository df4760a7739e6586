/* The comm layer: one interface, two backends.  Every CP strategy is written
 * once against it.
 *   COMM_NCCL: device buffers; operations are enqueued on `stream`
 *              (cudaStream_t) and complete in stream order.
 *   COMM_MPI:  host buffers; operations complete before they return, except
 *              comm_isendrecv, which completes at comm_wait.
 * Counts are elements of `type`.  All calls return 0, or -1 after printing
 * a message naming the rank; a failed or timed-out operation should lead to
 * comm_abort, which ends every rank of the job (never a hang). */
#ifndef COMM_H
#define COMM_H
#include <stddef.h>
#include "boot.h"

enum { COMM_MPI, COMM_NCCL };
enum { CT_BF16, CT_FP16, CT_F32, CT_F64, CT_BYTE };

struct comm;
struct comm_req;

size_t comm_type_size(int type);

int  comm_init(struct comm **world, int backend, struct boot *b, char *err, size_t errlen);
/* Ranks with the same color form a group, ordered by key (as MPI_Comm_split
 * and ncclCommSplit).  Collective over c. */
int  comm_split(struct comm *c, int color, int key, struct comm **out);
int  comm_rank(const struct comm *c);
int  comm_size(const struct comm *c);
int  comm_backend(const struct comm *c);

/* Paired exchange: send count elements to dst and receive count from src,
 * started now, finished by comm_wait (for NCCL, comm_wait makes `stream`
 * wait for it; for MPI, it blocks).  dst or src may be -1 for none. */
int  comm_isendrecv(struct comm *c, const void *sbuf, int dst, void *rbuf, int src,
                    size_t count, int type, void *stream, struct comm_req **req);
int  comm_wait(struct comm_req *req, void *stream);

/* The general paired exchange: the ns segments of sv, in order, to dst and
 * the nr segments of rv from src, as one operation (comm_isendrecv's rules;
 * the two sides' counts may differ).  The receiver's segments must match
 * the sender's one for one in count; zero-count segments are skipped on
 * both sides.  Several exchanges in flight between two ranks match in the
 * order they were started. */
struct comm_seg {
	void *buf;
	size_t count;
};
int  comm_iexchange(struct comm *c, const struct comm_seg *sv, int ns, int dst,
                    const struct comm_seg *rv, int nr, int src, int type, void *stream,
                    struct comm_req **req);

/* count is per rank: sbuf holds size*count elements, block i going to rank i. */
int  comm_alltoall(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream);
/* rbuf holds size*count: block i from rank i. */
int  comm_allgather(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream);
/* Sum: sbuf holds size*count, rank r gets the sum of every rank's block r.
 * Types CT_F32, CT_F64. */
int  comm_reducescatter(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream);
/* In place; op is "sum" or "max".  Types CT_F32, CT_F64. */
int  comm_allreduce(struct comm *c, void *buf, size_t count, int type, const char *op, void *stream);
int  comm_barrier(struct comm *c);
/* Work enqueued on stream that waits for peers outside the comm layer
 * (stream memory operations on a peer's flags): the watchdog ends the job
 * if it has not finished within LONGATTN_TIMEOUT, as for comm's own. */
void comm_track(struct comm *c, void *stream, const char *what);

/* Payload bytes this rank has sent since comm_sent_reset, every comm of the
 * process together: point-to-point sends to another rank, and for the
 * collectives what their usual algorithms (ring, pairwise) move from each
 * rank: all-to-all, all-gather and reduce-scatter (size-1) blocks,
 * all-reduce 2(size-1)/size of the buffer.  Barriers count nothing. */
void   comm_sent_reset(void);
double comm_sent(void);

void comm_abort(struct comm *c, const char *why) __attribute__((noreturn));
void comm_free(struct comm *c);

#endif
