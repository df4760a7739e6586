/* The comm layer against known answers, on 4 ranks.  Run alone it starts
 * itself under mpirun (Open MPI's PMIx server): once to check every
 * operation on the MPI backend, once with a rank that kills itself, which
 * must end the whole job, non-zero, within the watchdog's bound.  On a GPU
 * host `mpirun -n 2 build/tests/comm nccl` checks the NCCL backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm.h"
#include "topo.h"
#include "tap.h"

static int nccl;

static void *dalloc(size_t n)
{
#ifdef HAVE_CUDA
	if (nccl) {
		void *p = NULL;
		cudaMalloc(&p, n);
		return p;
	}
#endif
	return calloc(1, n);
}

static void put(void *d, const void *h, size_t n)
{
#ifdef HAVE_CUDA
	if (nccl) {
		cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
		return;
	}
#endif
	memcpy(d, h, n);
}

static void get(void *h, const void *d, size_t n)
{
#ifdef HAVE_CUDA
	if (nccl) {
		cudaDeviceSynchronize();
		cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
		return;
	}
#endif
	memcpy(h, d, n);
}

/* Each rank's verdicts reach rank 0, which prints them */
static int bad;
static void expect(int cond)
{
	bad += !cond;
}

static void report(struct comm *w, const char *name)
{
	double b = bad;

	comm_barrier(w);
	{
		double *d = dalloc(sizeof b);
		put(d, &b, sizeof b);
		comm_allreduce(w, d, 1, CT_F64, "sum", NULL);
		get(&b, d, sizeof b);
	}
	if (comm_rank(w) == 0)
		ok(b == 0, "comm %s %s (%g bad values)", nccl ? "nccl" : "mpi", name, b);
	bad = 0;
}

static int ranks(void)
{
	struct boot b;
	struct topo t;
	struct comm *w, *g;
	struct comm_req *req;
	char e[256];
	int r, n, i, j, c = 5;
	float *h, *d, *d2;
	double *hd, *dd;

	if (boot_init(&b, e, sizeof e) == -1 ||
	    (nccl && topo_setup(&b, 1, &t, e, sizeof e) == -1) ||
	    comm_init(&w, nccl ? COMM_NCCL : COMM_MPI, &b, e, sizeof e) == -1) {
		fprintf(stderr, "comm test: %s\n", e);
		return 2;
	}
	r = comm_rank(w);
	n = comm_size(w);
	h = calloc(n * c * 2, sizeof *h);
	d = dalloc(n * c * sizeof *d);
	d2 = dalloc(n * c * sizeof *d2);

	for (i = 0; i < n * c; i++)
		h[i] = 1000 * r + i;             /* block i/c goes to rank i/c */
	put(d, h, n * c * sizeof *h);
	comm_alltoall(w, d, d2, c, CT_F32, NULL);
	get(h, d2, n * c * sizeof *h);
	for (i = 0; i < n; i++)
		for (j = 0; j < c; j++)
			expect(h[i * c + j] == 1000 * i + r * c + j);
	report(w, "alltoall");

	for (j = 0; j < c; j++)
		h[j] = r * 10 + j;
	put(d, h, c * sizeof *h);
	comm_allgather(w, d, d2, c, CT_F32, NULL);
	get(h, d2, n * c * sizeof *h);
	for (i = 0; i < n; i++)
		for (j = 0; j < c; j++)
			expect(h[i * c + j] == i * 10 + j);
	report(w, "allgather");

	for (i = 0; i < n * c; i++)
		h[i] = r + 0.5f * i;
	put(d, h, n * c * sizeof *h);
	comm_reducescatter(w, d, d2, c, CT_F32, NULL);
	get(h, d2, c * sizeof *h);
	for (j = 0; j < c; j++)
		expect(h[j] == n * (n - 1) / 2 + n * 0.5f * (r * c + j));
	report(w, "reducescatter");

	hd = calloc(c, sizeof *hd);
	dd = dalloc(c * sizeof *dd);
	for (j = 0; j < c; j++)
		hd[j] = r == j % n ? 100 + j : -j;
	put(dd, hd, c * sizeof *hd);
	comm_allreduce(w, dd, c, CT_F64, "max", NULL);
	get(hd, dd, c * sizeof *hd);
	for (j = 0; j < c; j++)
		expect(hd[j] == 100 + j);
	report(w, "allreduce max");

	/* A ring exchange in bf16-sized elements: bytes move untouched */
	{
		unsigned short s[8], rr[8];
		void *ds = dalloc(sizeof s), *dr = dalloc(sizeof rr);
		for (j = 0; j < 8; j++)
			s[j] = (unsigned short)(r * 100 + j);
		put(ds, s, sizeof s);
		if (comm_isendrecv(w, ds, (r + 1) % n, dr, (r + n - 1) % n, 8, CT_BF16, NULL, &req) == -1 ||
		    comm_wait(req, NULL) == -1)
			expect(0);
		get(rr, dr, sizeof rr);
		for (j = 0; j < 8; j++)
			expect(rr[j] == ((r + n - 1) % n) * 100 + j);
		report(w, "sendrecv ring");
	}

	/* Uneven exchange: rank r sends r+1 and 3 elements to r+1 in two
	 * segments, received in two places; the counter sees the payload. */
	{
		int p = (r + n - 1) % n, ns = r + 1, nr = p + 1;
		float *s = calloc(ns + 3, sizeof *s), *rr = calloc(nr + 4, sizeof *rr);
		char *ds = dalloc((ns + 3) * sizeof *s), *dr = dalloc((nr + 4) * sizeof *rr);
		struct comm_seg sv[2] = { { ds, ns }, { ds + ns * sizeof *s, 3 } };
		/* ... landing apart, one element of gap between them */
		struct comm_seg rv[2] = { { dr, nr }, { dr + (nr + 1) * sizeof *rr, 3 } };

		for (j = 0; j < ns + 3; j++)
			s[j] = r * 100 + j;
		put(ds, s, (ns + 3) * sizeof *s);
		comm_sent_reset();
		if (comm_iexchange(w, sv, 2, (r + 1) % n, rv, 2, p, CT_F32, NULL, &req) == -1 ||
		    comm_wait(req, NULL) == -1)
			expect(0);
		expect(comm_sent() == (ns + 3) * sizeof(float));
		get(rr, dr, (nr + 4) * sizeof *rr);
		for (j = 0; j < nr; j++)
			expect(rr[j] == p * 100 + j);
		for (j = 0; j < 3; j++)
			expect(rr[nr + 1 + j] == p * 100 + nr + j);
		comm_sent_reset();
		comm_allgather(w, d, d2, 1, CT_F32, NULL);
		expect(comm_sent() == (n - 1) * sizeof(float));
		free(s);
		free(rr);
		report(w, "exchange of uneven segments, bytes counted");
	}

	/* Groups: odd and even ranks, reversed order inside */
	if (comm_split(w, r % 2, -r, &g) == -1 || g == NULL) {
		expect(0);
	} else {
		int gn = comm_size(g), gr = comm_rank(g);
		expect(gn == (n + 1 - r % 2) / 2);
		expect(gr == gn - 1 - r / 2);
		h[0] = r;
		put(d, h, sizeof *h);
		comm_allgather(g, d, d2, 1, CT_F32, NULL);
		get(h, d2, gn * sizeof *h);
		for (i = 0; i < gn; i++)
			expect(h[i] == r % 2 + 2 * (gn - 1 - i));
		comm_free(g);
	}
	report(w, "split");

	if (getenv("LONGATTN_DIE_RANK") != NULL) {
		/* Keep talking until the dying rank has died */
		for (i = 0; i < 1000000; i++)
			comm_allreduce(w, dd, 1, CT_F64, "sum", NULL);
	}
	comm_free(w);
	boot_fini(&b);
	return tap_done();
}

/* Run this binary under mpirun; returns its exit status, seconds in *secs */
static int launch(const char *self, const char *die, double *secs)
{
	struct timespec t0, t1;
	pid_t pid;
	int st;

	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if ((pid = fork()) == 0) {
		setenv("LONGATTN_COMM_CHILD", "1", 1);
		if (die != NULL) {
			setenv("LONGATTN_DIE_RANK", die, 1);
			setenv("LONGATTN_DIE_AFTER", "20", 1);
			setenv("LONGATTN_TIMEOUT", "10", 1);
			if (freopen("/dev/null", "w", stdout) == NULL)
				_exit(127);
		}
		execlp("mpirun", "mpirun", "--oversubscribe", "--allow-run-as-root",
		    "--mca", "btl", "self,vader,tcp", "-n", "4", self, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*secs = t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	double secs;
	int rc;

	nccl = argc > 1 && strcmp(argv[1], "nccl") == 0;
	if (nccl || getenv("LONGATTN_COMM_CHILD") != NULL || getenv("PMIX_RANK") != NULL)
		return ranks();
#ifndef HAVE_MPI
	printf("ok comm # SKIP no MPI in this build\n");
	return getenv("CI") && strcmp(getenv("CI"), "true") == 0;
#else
	if (system("command -v mpirun >/dev/null") != 0) {
		if (getenv("CI") && strcmp(getenv("CI"), "true") == 0) {
			printf("not ok comm: no mpirun, cannot run in CI\n");
			return 1;
		}
		printf("ok comm # SKIP no mpirun\n");
		return 0;
	}
	fflush(stdout);
	rc = launch(argv[0], NULL, &secs);
	ok(rc == 0, "comm mpi: 4 ranks under mpirun exit 0 (got %d)", rc);
	rc = launch(argv[0], "2", &secs);
	ok(rc != 0 && secs < 60, "comm mpi: rank 2 killed mid-run ends the job: exit %d after %.1f s", rc, secs);
	return tap_done();
#endif
}
