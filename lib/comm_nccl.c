/* The comm layer over NCCL, on device buffers.  Communicators are
 * blocking by default: a nonblocking group call leaves its work to a host
 * thread of NCCL's and is polled here until it settles, about 70 us of
 * host time per exchange (round 8), which a short pass pays at its start.
 * A dead peer is found either way: comm.c's watchdog times every call,
 * blocking or not, and the events recorded after each enqueue;
 * ncclCommAbort then stops the kernels that wait for it.
 * LONGATTN_NCCL_BLOCKING=0 makes them nonblocking (config.blocking = 0),
 * every call settled by polling ncclCommGetAsyncError against a deadline.
 * Paired exchanges run on a side stream per communicator so that they
 * overlap the caller's compute. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_be.h"
#include "util.h"

struct ncomm {
	ncclComm_t nc;
	cudaStream_t side;
	cudaEvent_t ready;
	float *one;               /* the barrier's all-reduce */
};

struct nreq {
	cudaEvent_t done;
};

/* What the watchdog watches: events recorded after each enqueue, oldest
 * first, and every live communicator's async error. */
#define NTRACK 256
#define NCOMMS 64
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static cudaEvent_t tev[NTRACK];
static double tt[NTRACK];
static const char *twhat[NTRACK];
static int thead, tn, tdev = -1, tready;
static ncclComm_t comms[NCOMMS];

static struct ncomm *nc(const struct comm *c)
{
	return c->impl;
}

static ncclDataType_t ntype(int type)
{
	switch (type) {
	case CT_BF16: return ncclBfloat16;
	case CT_FP16: return ncclFloat16;
	case CT_F32: return ncclFloat32;
	case CT_F64: return ncclFloat64;
	default: return ncclUint8;
	}
}

static int say(const struct comm *c, const char *op, const char *what)
{
	fprintf(stderr, "%s: rank %d: nccl %s: %s\n", program_invocation_short_name,
	    c->world->rank, op, what);
	return -1;
}

static int blocking(void)
{
	const char *s = getenv("LONGATTN_NCCL_BLOCKING");

	return s == NULL || strcmp(s, "0") != 0;
}

/* A nonblocking call is done when the async state leaves ncclInProgress. */
static int settle(const struct comm *c, ncclComm_t comm, ncclResult_t r, const char *op)
{
	double end = comm_now() + comm_timeout();
	ncclResult_t st = r;

	if (r != ncclSuccess && r != ncclInProgress)
		return say(c, op, ncclGetErrorString(r));
	do {
		if (ncclCommGetAsyncError(comm, &st) != ncclSuccess)
			return say(c, op, "ncclCommGetAsyncError failed");
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress)
			return say(c, op, ncclGetErrorString(st));
		if (comm_now() > end)
			return say(c, op, "did not settle in time (LONGATTN_TIMEOUT)");
		sched_yield();
	} while (1);
}

static int cuda_ok(const struct comm *c, const char *op, cudaError_t e)
{
	return e == cudaSuccess ? 0 : say(c, op, cudaGetErrorString(e));
}

static void remember(ncclComm_t comm, int add)
{
	int i;

	pthread_mutex_lock(&mu);
	for (i = 0; i < NCOMMS; i++)
		if (add ? comms[i] == NULL : comms[i] == comm) {
			comms[i] = add ? comm : NULL;
			break;
		}
	pthread_mutex_unlock(&mu);
}

static int newcomm(struct comm *c, struct ncomm *n)
{
	int lo = 0, hi = 0;

	/* The highest priority: a transfer's CTAs take the first SM that a
	 * kernel of the caller's streams frees, not the last */
	cudaDeviceGetStreamPriorityRange(&lo, &hi);
	if (cuda_ok(c, "init", cudaStreamCreateWithPriority(&n->side, cudaStreamNonBlocking, hi)) ||
	    cuda_ok(c, "init", cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming)) ||
	    cuda_ok(c, "init", cudaMalloc((void **)&n->one, sizeof(float))))
		return -1;
	remember(n->nc, 1);
	c->impl = n;
	return 0;
}

static int n_init(struct comm *w, char *err, size_t errlen)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclUniqueId id;
	struct ncomm *n;
	ncclResult_t r;
	int i;

	/* Multicast can take a shared host's GPUs out of service */
	setenv("NCCL_NVLS_ENABLE", "0", 0);
	w->rank = w->boot->rank;
	w->size = w->boot->size;
	if (cudaGetDevice(&tdev) != cudaSuccess) {
		snprintf(err, errlen, "nccl: no CUDA device");
		return -1;
	}
	pthread_mutex_lock(&mu);
	for (i = 0; i < NTRACK; i++)
		if (cudaEventCreateWithFlags(&tev[i], cudaEventDisableTiming) != cudaSuccess) {
			pthread_mutex_unlock(&mu);
			snprintf(err, errlen, "nccl: cudaEventCreate failed");
			return -1;
		}
	tready = 1;
	pthread_mutex_unlock(&mu);
	if (w->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
		snprintf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
		return -1;
	}
	if (boot_bcast(w->boot, "ncclid", &id, sizeof id, 0, err, errlen) == -1)
		return -1;
	n = xcalloc(1, sizeof *n);
	cfg.blocking = blocking();
	r = ncclCommInitRankConfig(&n->nc, w->size, id, w->rank, &cfg);
	if (settle(w, n->nc, r, "ncclCommInitRank") == -1 || newcomm(w, n) == -1) {
		snprintf(err, errlen, "rank %d: NCCL init failed", w->rank);
		if (n->nc != NULL)
			ncclCommAbort(n->nc);
		free(n);
		return -1;
	}
	return 0;
}

static int n_split(struct comm *c, int color, int key, struct comm *out)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	struct ncomm *n = xcalloc(1, sizeof *n);
	ncclResult_t r;
	int rank, size;

	cfg.blocking = blocking();
	r = ncclCommSplit(nc(c)->nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &n->nc, &cfg);
	/* The parent settles the split; the child may then be NULL (no color) */
	if (settle(c, nc(c)->nc, r, "ncclCommSplit") == -1 ||
	    (n->nc != NULL && settle(c, n->nc, ncclInProgress, "ncclCommSplit") == -1)) {
		free(n);
		return -1;
	}
	if (n->nc == NULL) {
		free(n);
		return 0;
	}
	if (ncclCommUserRank(n->nc, &rank) != ncclSuccess || ncclCommCount(n->nc, &size) != ncclSuccess ||
	    newcomm(out, n) == -1) {
		free(n);
		return -1;
	}
	out->rank = rank;
	out->size = size;
	return 0;
}

static void track(struct comm *c, void *stream, const char *what)
{
	(void)c;
	pthread_mutex_lock(&mu);
	if (tready && tn < NTRACK) {
		int i = (thead + tn) % NTRACK;

		if (cudaEventRecord(tev[i], (cudaStream_t)stream) == cudaSuccess) {
			tt[i] = comm_now();
			twhat[i] = what;
			tn++;
		}
	}
	pthread_mutex_unlock(&mu);
}

static int n_isendrecv(struct comm *c, const void *sbuf, int dst, void *rbuf, int src,
    size_t count, int type, void *stream, struct comm_req *req)
{
	struct ncomm *n = nc(c);
	struct nreq *q = xcalloc(1, sizeof *q);
	ncclResult_t r = ncclSuccess;

	/* The side stream starts when the caller's stream has written sbuf */
	if (cuda_ok(c, "sendrecv", cudaEventRecord(n->ready, (cudaStream_t)stream)) ||
	    cuda_ok(c, "sendrecv", cudaStreamWaitEvent(n->side, n->ready, 0)) ||
	    cuda_ok(c, "sendrecv", cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming))) {
		free(q);
		return -1;
	}
	ncclGroupStart();
	if (src >= 0)
		r = ncclRecv(rbuf, count, ntype(type), src, n->nc, n->side);
	if (dst >= 0 && (r == ncclSuccess || r == ncclInProgress))
		r = ncclSend(sbuf, count, ntype(type), dst, n->nc, n->side);
	if (r == ncclSuccess || r == ncclInProgress)
		r = ncclGroupEnd();
	else
		ncclGroupEnd();
	if (settle(c, n->nc, r, "send/recv") == -1 ||
	    cuda_ok(c, "sendrecv", cudaEventRecord(q->done, n->side))) {
		cudaEventDestroy(q->done);
		free(q);
		return -1;
	}
	track(c, n->side, "send/recv");
	req->impl = q;
	return 0;
}

static int n_exchange(struct comm *c, const struct comm_seg *sv, int ns, int dst,
    const struct comm_seg *rv, int nr, int src, int type, void *stream, struct comm_req *req)
{
	struct ncomm *n = nc(c);
	struct nreq *q = xcalloc(1, sizeof *q);
	ncclResult_t r = ncclSuccess;
	int i;

	if (cuda_ok(c, "exchange", cudaEventRecord(n->ready, (cudaStream_t)stream)) ||
	    cuda_ok(c, "exchange", cudaStreamWaitEvent(n->side, n->ready, 0)) ||
	    cuda_ok(c, "exchange", cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming))) {
		free(q);
		return -1;
	}
	/* Sends and receives of one peer match in the order they are posted */
	ncclGroupStart();
	for (i = 0; i < nr && (r == ncclSuccess || r == ncclInProgress); i++)
		if (rv[i].count > 0)
			r = ncclRecv(rv[i].buf, rv[i].count, ntype(type), src, n->nc, n->side);
	for (i = 0; i < ns && (r == ncclSuccess || r == ncclInProgress); i++)
		if (sv[i].count > 0)
			r = ncclSend(sv[i].buf, sv[i].count, ntype(type), dst, n->nc, n->side);
	if (r == ncclSuccess || r == ncclInProgress)
		r = ncclGroupEnd();
	else
		ncclGroupEnd();
	if (settle(c, n->nc, r, "exchange") == -1 ||
	    cuda_ok(c, "exchange", cudaEventRecord(q->done, n->side))) {
		cudaEventDestroy(q->done);
		free(q);
		return -1;
	}
	track(c, n->side, "exchange");
	req->impl = q;
	return 0;
}

static int n_wait(struct comm_req *req, void *stream)
{
	struct nreq *q = req->impl;
	int rc = cuda_ok(req->c, "wait", cudaStreamWaitEvent((cudaStream_t)stream, q->done, 0));

	cudaEventDestroy(q->done);
	free(q);
	return rc;
}

static int n_alltoall(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	size_t bytes = count * comm_type_size(type);
	ncclResult_t r = ncclSuccess;
	int i;

	ncclGroupStart();
	for (i = 0; i < c->size && (r == ncclSuccess || r == ncclInProgress); i++) {
		r = ncclSend((const char *)sbuf + i * bytes, count, ntype(type), i, nc(c)->nc, (cudaStream_t)stream);
		if (r == ncclSuccess || r == ncclInProgress)
			r = ncclRecv((char *)rbuf + i * bytes, count, ntype(type), i, nc(c)->nc, (cudaStream_t)stream);
	}
	if (r == ncclSuccess || r == ncclInProgress)
		r = ncclGroupEnd();
	else
		ncclGroupEnd();
	return settle(c, nc(c)->nc, r, "all-to-all");
}

static int n_allgather(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	return settle(c, nc(c)->nc, ncclAllGather(sbuf, rbuf, count, ntype(type), nc(c)->nc,
	    (cudaStream_t)stream), "ncclAllGather");
}

static int n_reducescatter(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	return settle(c, nc(c)->nc, ncclReduceScatter(sbuf, rbuf, count, ntype(type), ncclSum,
	    nc(c)->nc, (cudaStream_t)stream), "ncclReduceScatter");
}

static int n_allreduce(struct comm *c, void *buf, size_t count, int type, int op, void *stream)
{
	return settle(c, nc(c)->nc, ncclAllReduce(buf, buf, count, ntype(type),
	    op == COMM_MAX ? ncclMax : ncclSum, nc(c)->nc, (cudaStream_t)stream), "ncclAllReduce");
}

static int n_barrier(struct comm *c)
{
	struct ncomm *n = nc(c);
	double end = comm_now() + comm_timeout();
	cudaError_t e;

	if (cuda_ok(c, "barrier", cudaDeviceSynchronize()) ||
	    settle(c, n->nc, ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, n->nc, n->side),
	    "barrier") == -1)
		return -1;
	while ((e = cudaStreamQuery(n->side)) == cudaErrorNotReady) {
		if (comm_now() > end)
			return say(c, "barrier", "did not finish in time (LONGATTN_TIMEOUT)");
		usleep(50);
	}
	return cuda_ok(c, "barrier", e);
}

static int n_poll(struct comm *w, double timeout, char *why, size_t len)
{
	static int devset;
	ncclResult_t st;
	cudaError_t e;
	int i, rc = 0;

	(void)w;
	pthread_mutex_lock(&mu);
	if (!devset && tdev >= 0)
		devset = cudaSetDevice(tdev) == cudaSuccess;
	while (tn > 0) {
		e = cudaEventQuery(tev[thead]);
		if (e == cudaSuccess) {
			thead = (thead + 1) % NTRACK;
			tn--;
			continue;
		}
		if (e != cudaErrorNotReady) {
			snprintf(why, len, "CUDA: %s", cudaGetErrorString(e));
			rc = -1;
		} else if (comm_now() - tt[thead] > timeout) {
			snprintf(why, len, "nccl %s has not finished %g s after it was enqueued "
			    "(a rank died or hangs; LONGATTN_TIMEOUT)", twhat[thead], timeout);
			rc = -1;
		}
		break;
	}
	for (i = 0; i < NCOMMS && rc == 0; i++)
		if (comms[i] != NULL && ncclCommGetAsyncError(comms[i], &st) == ncclSuccess &&
		    st != ncclSuccess && st != ncclInProgress) {
			snprintf(why, len, "nccl: %s", ncclGetErrorString(st));
			rc = -1;
		}
	pthread_mutex_unlock(&mu);
	return rc;
}

static void n_abort(struct comm *c)
{
	/* Stops NCCL kernels that wait for a dead peer */
	if (nc(c) != NULL && nc(c)->nc != NULL)
		ncclCommAbort(nc(c)->nc);
}

static void n_free(struct comm *c)
{
	struct ncomm *n = nc(c);

	cudaStreamSynchronize(n->side);
	remember(n->nc, 0);
	if (settle(c, n->nc, ncclCommFinalize(n->nc), "ncclCommFinalize") == 0)
		ncclCommDestroy(n->nc);
	else
		ncclCommAbort(n->nc);
	cudaEventDestroy(n->ready);
	cudaStreamDestroy(n->side);
	cudaFree(n->one);
	free(n);
}

const struct comm_be comm_nccl_be = {
	.name = "nccl",
	.init = n_init,
	.split = n_split,
	.isendrecv = n_isendrecv,
	.wait = n_wait,
	.exchange = n_exchange,
	.alltoall = n_alltoall,
	.allgather = n_allgather,
	.reducescatter = n_reducescatter,
	.allreduce = n_allreduce,
	.barrier = n_barrier,
	.track = track,
	.poll = n_poll,
	.abort = n_abort,
	.free = n_free,
};
