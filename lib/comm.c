/* The comm layer's common half: dispatch to the backend, argument checks,
 * and the watchdog.  A rank that dies leaves its peers blocked in a receive
 * forever (MPI) or spinning in a kernel (NCCL); neither library notices on
 * one host.  So every operation is timed: one that has not finished after
 * LONGATTN_TIMEOUT seconds (default 60) aborts the whole job, naming this
 * rank and the operation.  LONGATTN_DIE_RANK=r (with LONGATTN_DIE_AFTER=n,
 * default 3; 0: in init) makes rank r kill itself at its n-th operation, to
 * test that; with LONGATTN_DIE_HOW=hang it stops there instead, which only
 * the watchdog can end, and with =segv it raises SIGSEGV.  With
 * LONGATTN_DIE_ONCE=file only the run that creates the file dies. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_be.h"
#include "util.h"

static struct comm *live;                 /* every comm, newest first */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct comm *wd_world;
static pthread_t wd_thread;
static atomic_int wd_stop;
static _Atomic double wd_since;           /* 0: no blocking call under way */
static const char *_Atomic wd_what;
static atomic_int aborting;
static int die_rank = -1, die_after = 3, nops;
static _Atomic unsigned long long sent;   /* comm_sent */

#ifndef HAVE_MPI
const struct comm_be comm_mpi_be = { .name = "mpi" };
#endif
#ifndef HAVE_NCCL
const struct comm_be comm_nccl_be = { .name = "nccl" };
#endif

size_t comm_type_size(int type)
{
	switch (type) {
	case CT_BF16: case CT_FP16: return 2;
	case CT_F32: return 4;
	case CT_F64: return 8;
	case CT_BYTE: return 1;
	}
	return 0;
}

double comm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double comm_timeout(void)
{
	const char *s = getenv("LONGATTN_TIMEOUT");
	double t = s ? atof(s) : 0;

	return t > 0 ? t : 60;
}

static void *watchdog(void *arg)
{
	struct comm *w = arg;
	double t = comm_timeout(), since;
	char why[256];

	while (!atomic_load(&wd_stop)) {
		usleep(100000);
		since = atomic_load(&wd_since);
		if (since > 0 && comm_now() - since > t) {
			snprintf(why, sizeof why, "comm %s did not finish in %g s "
			    "(a rank died or hangs; LONGATTN_TIMEOUT)", atomic_load(&wd_what), t);
			comm_abort(w, why);
		}
		if (w->be->poll != NULL && w->be->poll(w, t, why, sizeof why) == -1)
			comm_abort(w, why);
	}
	return NULL;
}

static void wd_end(void)
{
	atomic_store(&wd_stop, 1);
	pthread_join(wd_thread, NULL);
	wd_world = NULL;
}

static void die_here(const char *what)
{
	const char *how = getenv("LONGATTN_DIE_HOW"), *once = getenv("LONGATTN_DIE_ONCE");
	const int segv = how != NULL && strcmp(how, "segv") == 0,
	    hang = how != NULL && strcmp(how, "hang") == 0;
	int fd;

	/* Only the first run that creates the file dies: a retry lives */
	if (once != NULL && *once != '\0') {
		if ((fd = open(once, O_WRONLY | O_CREAT | O_EXCL, 0644)) == -1)
			return;
		close(fd);
	}
	fprintf(stderr, "%s: rank %d: LONGATTN_DIE_RANK: %s in %s\n", program_invocation_short_name,
	    die_rank, segv ? "a segfault" : hang ? "hanging" : "killing myself", what);
	while (hang)
		pause();
	raise(segv ? SIGSEGV : SIGKILL);
}

static void arm(struct comm *c, const char *what)
{
	atomic_store(&wd_what, what);
	atomic_store(&wd_since, comm_now());
	if (die_rank >= 0 && c->world->rank == die_rank && ++nops == die_after)
		die_here(what);
}

/* stream: where the operation was enqueued, for the backends whose calls
 * return before the work is done; NOSTREAM when there is nothing to see. */
#define NOSTREAM ((void *)-1)
static int disarm(struct comm *c, void *stream, const char *what, int rc)
{
	atomic_store(&wd_since, 0.0);
	if (rc == 0 && stream != NOSTREAM && c->be->track != NULL)
		c->be->track(c, stream, what);
	return rc;
}

void comm_track(struct comm *c, void *stream, const char *what)
{
	if (c->be->track != NULL)
		c->be->track(c, stream, what);
}

static void add_live(struct comm *c)
{
	pthread_mutex_lock(&live_mu);
	c->next = live;
	live = c;
	pthread_mutex_unlock(&live_mu);
}

int comm_init(struct comm **world, int backend, struct boot *b, char *err, size_t errlen)
{
	const struct comm_be *be = backend == COMM_NCCL ? &comm_nccl_be : &comm_mpi_be;
	struct comm *w;
	const char *s;

	*world = NULL;
	if (be->init == NULL) {
		snprintf(err, errlen, "backend %s: not in this build (no %s)", be->name,
		    backend == COMM_NCCL ? "NCCL" : "MPI");
		return -1;
	}
	w = xcalloc(1, sizeof *w);
	w->be = be;
	w->backend = backend;
	w->boot = b;
	w->world = w;
	if ((s = getenv("LONGATTN_DIE_RANK")) != NULL)
		die_rank = atoi(s);
	if ((s = getenv("LONGATTN_DIE_AFTER")) != NULL && atoi(s) >= 0)
		die_after = atoi(s);
	/* 0: in the MPI or NCCL library's own init, where the tests cannot
	 * otherwise reach */
	if (die_rank >= 0 && b->rank == die_rank && die_after == 0)
		die_here("init");
	/* The watchdog guards init too: NCCL's bootstrap waits for every rank */
	wd_world = w;
	atomic_store(&wd_stop, 0);
	atomic_store(&wd_what, "init");
	atomic_store(&wd_since, comm_now());
	if (pthread_create(&wd_thread, NULL, watchdog, w) != 0) {
		snprintf(err, errlen, "pthread_create: %s", strerror(errno));
		free(w);
		return -1;
	}
	if (be->init(w, err, errlen) == -1) {
		atomic_store(&wd_since, 0.0);
		wd_end();
		free(w);
		return -1;
	}
	atomic_store(&wd_since, 0.0);
	add_live(w);
	*world = w;
	return 0;
}

int comm_split(struct comm *c, int color, int key, struct comm **out)
{
	struct comm *n = xcalloc(1, sizeof *n);
	int rc;

	*n = *c;
	n->impl = NULL;
	n->next = NULL;
	arm(c, "split");
	rc = c->be->split(c, color, key, n);
	disarm(c, NOSTREAM, "split", 0);
	if (rc == -1 || n->impl == NULL) {
		free(n);
		*out = NULL;
		return rc;
	}
	add_live(n);
	*out = n;
	return 0;
}

int comm_rank(const struct comm *c) { return c->rank; }
int comm_size(const struct comm *c) { return c->size; }
int comm_backend(const struct comm *c) { return c->backend; }

static int bad(const struct comm *c, const char *op, const char *why)
{
	fprintf(stderr, "%s: rank %d: comm %s: %s\n", program_invocation_short_name,
	    c->world->rank, op, why);
	return -1;
}

static int bad_type(const struct comm *c, const char *op, int type, int sum)
{
	if (comm_type_size(type) == 0)
		return bad(c, op, "unknown element type");
	if (sum && type != CT_F32 && type != CT_F64)
		return bad(c, op, "sums only f32 and f64");
	return 0;
}

void comm_sent_reset(void)
{
	atomic_store(&sent, 0);
}

double comm_sent(void)
{
	return (double)atomic_load(&sent);
}

/* n elements of type counted as sent, times num/den (the collectives) */
static void count_sent(size_t n, int type, size_t num, size_t den)
{
	atomic_fetch_add(&sent, (unsigned long long)(n * comm_type_size(type) * num / den));
}

int comm_isendrecv(struct comm *c, const void *sbuf, int dst, void *rbuf, int src,
    size_t count, int type, void *stream, struct comm_req **req)
{
	struct comm_req *r;
	int rc;

	*req = NULL;
	if (bad_type(c, "sendrecv", type, 0))
		return -1;
	if (dst >= c->size || src >= c->size)
		return bad(c, "sendrecv", "peer out of range");
	r = xcalloc(1, sizeof *r);
	r->c = c;
	arm(c, "sendrecv");
	rc = disarm(c, NOSTREAM, "sendrecv",
	    c->be->isendrecv(c, sbuf, dst, rbuf, src, count, type, stream, r));
	if (rc == -1) {
		free(r);
		return -1;
	}
	if (dst >= 0 && dst != c->rank)
		count_sent(count, type, 1, 1);
	*req = r;
	return 0;
}

int comm_iexchange(struct comm *c, const struct comm_seg *sv, int ns, int dst,
    const struct comm_seg *rv, int nr, int src, int type, void *stream, struct comm_req **req)
{
	struct comm_req *r;
	size_t n = 0;
	int rc, i;

	*req = NULL;
	if (bad_type(c, "exchange", type, 0))
		return -1;
	if (dst >= c->size || src >= c->size)
		return bad(c, "exchange", "peer out of range");
	if (c->be->exchange == NULL)
		return bad(c, "exchange", "not in this backend");
	if (dst < 0)
		ns = 0;
	if (src < 0)
		nr = 0;
	r = xcalloc(1, sizeof *r);
	r->c = c;
	arm(c, "exchange");
	rc = disarm(c, NOSTREAM, "exchange",
	    c->be->exchange(c, sv, ns, dst, rv, nr, src, type, stream, r));
	if (rc == -1) {
		free(r);
		return -1;
	}
	for (i = 0; i < ns; i++)
		n += sv[i].count;
	if (dst >= 0 && dst != c->rank)
		count_sent(n, type, 1, 1);
	*req = r;
	return 0;
}

int comm_wait(struct comm_req *req, void *stream)
{
	struct comm *c;
	int rc;

	if (req == NULL)
		return 0;
	c = req->c;
	arm(c, "wait");
	rc = disarm(c, stream, "wait", c->be->wait(req, stream));
	free(req);
	return rc;
}

int comm_alltoall(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	if (bad_type(c, "alltoall", type, 0))
		return -1;
	arm(c, "alltoall");
	count_sent(count, type, c->size - 1, 1);
	return disarm(c, stream, "alltoall", c->be->alltoall(c, sbuf, rbuf, count, type, stream));
}

int comm_allgather(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	if (bad_type(c, "allgather", type, 0))
		return -1;
	arm(c, "allgather");
	count_sent(count, type, c->size - 1, 1);
	return disarm(c, stream, "allgather", c->be->allgather(c, sbuf, rbuf, count, type, stream));
}

int comm_reducescatter(struct comm *c, const void *sbuf, void *rbuf, size_t count, int type, void *stream)
{
	if (bad_type(c, "reducescatter", type, 1))
		return -1;
	arm(c, "reducescatter");
	count_sent(count, type, c->size - 1, 1);
	return disarm(c, stream, "reducescatter",
	    c->be->reducescatter(c, sbuf, rbuf, count, type, stream));
}

int comm_allreduce(struct comm *c, void *buf, size_t count, int type, const char *op, void *stream)
{
	int o;

	if (bad_type(c, "allreduce", type, 1))
		return -1;
	if (strcmp(op, "sum") == 0)
		o = COMM_SUM;
	else if (strcmp(op, "max") == 0)
		o = COMM_MAX;
	else
		return bad(c, "allreduce", "op is not sum or max");
	arm(c, "allreduce");
	count_sent(count, type, 2 * (c->size - 1), c->size);
	return disarm(c, stream, "allreduce", c->be->allreduce(c, buf, count, type, o, stream));
}

int comm_barrier(struct comm *c)
{
	arm(c, "barrier");
	return disarm(c, NOSTREAM, "barrier", c->be->barrier(c));
}

void comm_abort(struct comm *c, const char *why)
{
	struct comm *p;
	struct boot *b = c ? c->boot : NULL;

	/* The first caller (main thread or watchdog) ends the job; the other
	 * waits here for the exit. */
	if (atomic_exchange(&aborting, 1)) {
		for (;;)
			pause();
	}
	/* Every step below may block on a dead peer: bound them all */
	signal(SIGALRM, SIG_DFL);
	alarm(15);
	fprintf(stderr, "%s: rank %d (%s): %s: aborting the job\n", program_invocation_short_name,
	    b ? b->rank : -1, b ? b->host : "?", why);
	fflush(stderr);
	for (p = live; p != NULL; p = p->next)
		if (p->be->abort != NULL)
			p->be->abort(p);
	if (b != NULL)
		boot_abort(b, 1, NULL);
	boot_die(1);
}

void comm_free(struct comm *c)
{
	struct comm **pp;

	if (c == NULL)
		return;
	pthread_mutex_lock(&live_mu);
	for (pp = &live; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&live_mu);
	if (c == wd_world)
		wd_end();
	c->be->free(c);
	free(c);
}
