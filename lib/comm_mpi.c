/* The comm layer over MPI, on host buffers: the CPU backend that CI runs
 * under Slurm.  Every call blocks until done, except isendrecv. */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm_be.h"
#include "util.h"

struct mreq {
	int n;
	MPI_Request r[];
};

static MPI_Comm mc(const struct comm *c)
{
	return *(MPI_Comm *)c->impl;
}

static MPI_Datatype mtype(int type)
{
	switch (type) {
	case CT_BF16: case CT_FP16: return MPI_UINT16_T;   /* moved, never summed */
	case CT_F32: return MPI_FLOAT;
	case CT_F64: return MPI_DOUBLE;
	default: return MPI_BYTE;
	}
}

/* An MPI call's return code: 0, or -1 once this rank has said what
 * failed. */
static int fail(const struct comm *c, const char *op, int rc)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;

	if (rc == MPI_SUCCESS)
		return 0;
	MPI_Error_string(rc, s, &n);
	fprintf(stderr, "%s: rank %d: MPI %s: %s\n", program_invocation_short_name,
	    c->world->rank, op, s);
	return -1;
}

static int count_ok(const struct comm *c, const char *op, size_t count)
{
	if (count > INT_MAX) {
		fprintf(stderr, "%s: rank %d: MPI %s: %zu elements is more than MPI counts\n",
		    program_invocation_short_name, c->world->rank, op, count);
		return 0;
	}
	return 1;
}

static int m_init(struct comm *w, char *err, size_t errlen)
{
	int inited = 0, got, rc;
	MPI_Comm *mcw = xmalloc(sizeof *mcw);

	MPI_Initialized(&inited);
	/* Open MPI's crash handler would replace the caller's (crash_report),
	 * which names the rank and step; a user's setting wins */
	setenv("OMPI_MCA_opal_signal", "", 0);
	/* The watchdog thread may call MPI_Abort while this thread is blocked */
	if (!inited && (rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &got)) != MPI_SUCCESS) {
		snprintf(err, errlen, "MPI_Init_thread failed (%d)", rc);
		free(mcw);
		return -1;
	}
	/* Open MPI 4.1's TCP transport hands a peer's first fragment to the
	 * PML's receive callback even while this rank's MPI_Init has not
	 * registered it, and calls a null pointer (bench/NOTES.md, the
	 * twenty-fifth session): no rank sends before every rank is out of
	 * MPI_Init.  PMIx's fence needs no MPI. */
	if (!inited) {
		char one = 1, *all = xcalloc(w->boot->size, 1);

		rc = boot_allgather(w->boot, "mpi-up", &one, all, 1, err, errlen);
		free(all);
		if (rc == -1) {
			free(mcw);
			return -1;
		}
	}
	MPI_Comm_dup(MPI_COMM_WORLD, mcw);
	/* Errors come back as codes, so a failure names its rank before the abort */
	MPI_Comm_set_errhandler(*mcw, MPI_ERRORS_RETURN);
	w->impl = mcw;
	MPI_Comm_rank(*mcw, &w->rank);
	MPI_Comm_size(*mcw, &w->size);
	if (w->size != w->boot->size || w->rank != w->boot->rank) {
		snprintf(err, errlen, "MPI says rank %d of %d, PMIx rank %d of %d",
		    w->rank, w->size, w->boot->rank, w->boot->size);
		return -1;
	}
	return 0;
}

static int m_split(struct comm *c, int color, int key, struct comm *out)
{
	MPI_Comm n;

	if (fail(c, "Comm_split", MPI_Comm_split(mc(c), color < 0 ? MPI_UNDEFINED : color, key, &n)))
		return -1;
	if (n == MPI_COMM_NULL)
		return 0;
	MPI_Comm_set_errhandler(n, MPI_ERRORS_RETURN);
	out->impl = xmalloc(sizeof(MPI_Comm));
	*(MPI_Comm *)out->impl = n;
	MPI_Comm_rank(n, &out->rank);
	MPI_Comm_size(n, &out->size);
	return 0;
}

static int m_isendrecv(struct comm *c, const void *sbuf, int dst, void *rbuf, int src,
    size_t count, int type, void *stream, struct comm_req *req)
{
	struct mreq *m;

	(void)stream;
	if (!count_ok(c, "sendrecv", count))
		return -1;
	m = xmalloc(sizeof *m + 2 * sizeof m->r[0]);
	m->n = 2;
	m->r[0] = m->r[1] = MPI_REQUEST_NULL;
	if ((src >= 0 && fail(c, "Irecv", MPI_Irecv(rbuf, (int)count, mtype(type), src, 7, mc(c), &m->r[0]))) ||
	    (dst >= 0 && fail(c, "Isend", MPI_Isend(sbuf, (int)count, mtype(type), dst, 7, mc(c), &m->r[1])))) {
		free(m);
		return -1;
	}
	req->impl = m;
	return 0;
}

/* Segments travel as messages of their own under one tag: MPI keeps the
 * order of one sender's messages, so they match one for one. */
static int m_exchange(struct comm *c, const struct comm_seg *sv, int ns, int dst,
    const struct comm_seg *rv, int nr, int src, int type, void *stream, struct comm_req *req)
{
	struct mreq *m;
	int i, k = 0;

	(void)stream;
	for (i = 0; i < ns; i++)
		if (!count_ok(c, "exchange", sv[i].count))
			return -1;
	for (i = 0; i < nr; i++)
		if (!count_ok(c, "exchange", rv[i].count))
			return -1;
	m = xmalloc(sizeof *m + (size_t)(ns + nr + 1) * sizeof m->r[0]);
	for (i = 0; i < nr; i++)
		if (rv[i].count > 0 && fail(c, "Irecv", MPI_Irecv(rv[i].buf, (int)rv[i].count,
		    mtype(type), src, 8, mc(c), &m->r[k++])))
			goto bad;
	for (i = 0; i < ns; i++)
		if (sv[i].count > 0 && fail(c, "Isend", MPI_Isend(sv[i].buf, (int)sv[i].count,
		    mtype(type), dst, 8, mc(c), &m->r[k++])))
			goto bad;
	m->n = k;
	req->impl = m;
	return 0;
bad:
	free(m);
	return -1;
}

static int m_wait(struct comm_req *req, void *stream)
{
	struct mreq *m = req->impl;
	int rc;

	(void)stream;
	rc = MPI_Waitall(m->n, m->r, MPI_STATUSES_IGNORE);
	free(m);
	return fail(req->c, "Waitall", rc);
}

static int m_alltoall(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	(void)stream;
	if (!count_ok(c, "alltoall", count))
		return -1;
	return fail(c, "Alltoall", MPI_Alltoall(sbuf, (int)count, mtype(type), rbuf, (int)count, mtype(type), mc(c)));
}

static int m_allgather(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	(void)stream;
	if (!count_ok(c, "allgather", count))
		return -1;
	return fail(c, "Allgather", MPI_Allgather(sbuf, (int)count, mtype(type), rbuf, (int)count, mtype(type), mc(c)));
}

static int m_reducescatter(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	(void)stream;
	if (!count_ok(c, "reducescatter", count))
		return -1;
	return fail(c, "Reduce_scatter_block", MPI_Reduce_scatter_block(sbuf, rbuf, (int)count, mtype(type), MPI_SUM, mc(c)));
}

static int m_allreduce(struct comm *c, void *buf, size_t count, int type, int op, void *stream)
{
	(void)stream;
	if (!count_ok(c, "allreduce", count))
		return -1;
	return fail(c, "Allreduce", MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mtype(type),
	    op == COMM_MAX ? MPI_MAX : MPI_SUM, mc(c)));
}

static int m_barrier(struct comm *c)
{
	return fail(c, "Barrier", MPI_Barrier(mc(c)));
}

static void m_abort(struct comm *c)
{
	if (c == c->world)
		MPI_Abort(MPI_COMM_WORLD, 1);
}

static void m_free(struct comm *c)
{
	MPI_Comm_free(c->impl);
	free(c->impl);
	if (c == c->world)
		MPI_Finalize();
}

const struct comm_be comm_mpi_be = {
	.name = "mpi",
	.init = m_init,
	.split = m_split,
	.isendrecv = m_isendrecv,
	.wait = m_wait,
	.exchange = m_exchange,
	.alltoall = m_alltoall,
	.allgather = m_allgather,
	.reducescatter = m_reducescatter,
	.allreduce = m_allreduce,
	.barrier = m_barrier,
	.abort = m_abort,
	.free = m_free,
};
