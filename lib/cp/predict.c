/* cpbench --predict: a strategy's run timed without running it.  The
 * strategy's sched op gives, rank by rank and step by step, the local
 * attention pieces (exact masks), the bytes each transfer moves inside and
 * across nodes, and local memory traffic; this file times them:
 *
 *   attention  a + (b hq/mh hd) (cF F + cP P + cR Rw) ms, F, P the full and
 *              partial tiles of the piece's plan for the kernel's tile
 *              shape, Rw its rows of tiles (q-tiles forward, q- and k-tiles
 *              backward: every one costs a CTA or a pass over its rows,
 *              allowed pairs or not), hq the kernel's query heads, mh the
 *              mask heads; a, cF, cP, cR fitted to kbench rows of the
 *              kernel (least squares on relative error, none negative).
 *              So TFLOP/s = FLOPs / time falls with tile efficiency (area
 *              / visited tile area) and with the empty rows of sparse
 *              pieces, as measured.
 *   transfer   nops * latency + bytes / bandwidth, per scope (intra, inter
 *              node) and kind (p2p, all-to-all, all-gather); a collective
 *              that spans nodes moves all its bytes at the inter rate
 *              (NCCL's ring), an all-to-all the two parts side by side; on
 *              MPI an all-gather's latency scales with its log2 g rounds
 *              from the probe's.
 *   memory     nmem * launch + bytes / copy bandwidth.
 *
 * A step of a rank starts when its previous step ended; a transfer starts
 * when its peers (p2p: the ranks it sends to and receives from; a
 * collective: its group) are all ready.  On a GPU kernel, x runs under the
 * attention and x2 under the steps up to join2, and a call's latency is
 * the host's time issuing it: it delays the device only when the device
 * has caught up with the host (simulate).  On the CPU every stream is the
 * calling thread, so all of it adds up, but x2, MPI's nonblocking
 * exchange, moves while the rank works (simulate_cpu); ranks that share
 * cores scale the attention (--cores).  The pass takes the slowest rank's
 * end.
 *
 * --probe-links measures the links with the comm layer on the machine at
 * hand and writes the TSV that --links reads. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_impl.h"
#include "plan.h"
#include "predict.h"
#include "tsv.h"
#include "util.h"

/* ---- schedules ------------------------------------------------------------ */

int cps_init(struct cp_sched *s, int world, int node_size, int nsteps, int U, int R)
{
	s->world = world;
	s->node_size = node_size > 0 ? node_size : world;
	s->nsteps = nsteps;
	s->ulysses = U;
	s->ring = R;
	s->step = calloc((size_t)world * nsteps, sizeof *s->step);
	if (s->step == NULL) {
		snprintf(s->why, sizeof s->why, "schedule: out of memory");
		return -1;
	}
	for (size_t i = 0; i < (size_t)world * nsteps; i++)
		s->step[i].attn = -1;
	return 0;
}

struct cp_step *cps_at(struct cp_sched *s, int rank, int k)
{
	return &s->step[(size_t)rank * s->nsteps + k];
}

int cps_attn(struct cp_sched *s, const struct mask *m, int64_t qr[][2], int nq,
             int64_t kr[][2], int nk, int hq, int hkv)
{
	struct cp_attn *a;

	if (s->nattn == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->attn = xrealloc(s->attn, (size_t)s->cap * sizeof *s->attn);
	}
	a = &s->attn[s->nattn];
	memset(a, 0, sizeof *a);
	if (cp_piece(m, qr, nq, kr, nk, &a->m, s->why, sizeof s->why) < 0)
		return -1;
	a->nq = nq;
	a->nk = nk;
	a->qr = xmalloc((size_t)nq * sizeof *a->qr);
	a->kr = xmalloc((size_t)nk * sizeof *a->kr);
	memcpy(a->qr, qr, (size_t)nq * sizeof *a->qr);
	memcpy(a->kr, kr, (size_t)nk * sizeof *a->kr);
	a->hq = hq;
	a->hkv = hkv;
	return s->nattn++;
}

void cps_xfer(const struct cp_sched *s, struct cp_xfer *x, int how, int me, int peer, double bytes)
{
	x->how = how;
	x->bytes[me / s->node_size == peer / s->node_size ? CPX_INTRA : CPX_INTER] += bytes;
}

void cp_sched_free(struct cp_sched *s)
{
	for (int i = 0; i < s->nattn; i++) {
		mask_free(&s->attn[i].m);
		free(s->attn[i].qr);
		free(s->attn[i].kr);
	}
	free(s->attn);
	free(s->step);
	memset(s, 0, sizeof *s);
}

/* ---- the local kernel's work ---------------------------------------------- */

/* Tile shapes of the kernels (their sources: kernels/hopper_fwd.cuh BQ x BK,
 * hopper_bwd.cuh, flash.cu FBQ x FBK and BBQ x BBK, lib/ref.h REF_TILE,
 * naive.cu TILE); cudnn's are unknown, 128 x 128 stands in.  gpu: streams
 * overlap. */
static const struct ktile {
	const char *name;
	int fq, fk, bq, bk, gpu;
} ktiles[] = {
	{ "hopper", 128, 128, 64, 128, 1 },
	{ "flash", 128, 64, 64, 128, 1 },
	{ "cudnn", 128, 128, 128, 128, 1 },
	{ "naive", 64, 64, 64, 64, 1 },
	{ "cpu", 64, 64, 64, 64, 0 },
	{ NULL, 0, 0, 0, 0, 0 }
};

struct work {
	double full, part, rows;     /* over the mask heads; rows: tiles of the grid */
};

/* The plan of m for pass on kernel k: its full and partial tiles, and the
 * rows of tiles the kernel walks. */
static int work_of(const struct mask *m, const struct ktile *k, int bwd, struct work *w,
                   char *err, size_t n)
{
	struct plan p;
	int bq = bwd ? k->bq : k->fq, bk = bwd ? k->bk : k->fk;

	memset(w, 0, sizeof *w);
	if (m->area == 0)
		return 0;
	if (plan_build(&p, m, bq, bk, err, n) != 0)
		return -1;
	w->full = (double)p.ntiles_full;
	w->part = (double)p.ntiles_partial;
	/* every q-tile's CTA writes its rows, visited or not; backward, the
	 * k-tiles' CTAs and the passes over every query row (D, dQ) */
	w->rows = (double)p.heads * (p.nqt + (bwd ? p.nkt : 0));
	plan_free(&p);
	return 0;
}

/* ---- calibration ------------------------------------------------------------ */

enum { NCOEF = 4 };

struct fit {
	int n;                       /* rows used */
	double c[NCOEF];             /* a (ms), cF, cP, cR (ms per unit) */
	double err_med, err_max;     /* of the fit on its own rows */
	char device[128];
};

/* Features of a piece of hq query heads, batch b, head dim hd. */
static void features(const struct work *w, int mh, double b, int hq, int hd, double *x)
{
	double u = b * hq / (double)mh * hd;

	x[0] = 1;
	x[1] = u * w->full;
	x[2] = u * w->part;
	x[3] = u * w->rows;
}

static double model(const struct fit *f, const double *x)
{
	double t = 0;

	for (int i = 0; i < NCOEF; i++)
		t += f->c[i] * x[i];
	return t;
}

/* Least squares of relative error, coefficients >= 0: columns that would
 * go negative are dropped, one at a time, and the rest refitted. */
static int solve(double (*X)[NCOEF], const double *y, int n, double *c)
{
	int on[NCOEF];

	for (int j = 0; j < NCOEF; j++) {
		on[j] = 0;
		for (int i = 0; i < n; i++)
			on[j] |= X[i][j] != 0;
	}
	for (;;) {
		double A[NCOEF][NCOEF + 1] = { { 0 } };
		int idx[NCOEF], m = 0, worst = -1;

		for (int j = 0; j < NCOEF; j++)
			if (on[j])
				idx[m++] = j;
		if (m == 0)
			return -1;
		for (int i = 0; i < n; i++) {
			double wgt = 1 / (y[i] * y[i]);
			for (int a = 0; a < m; a++) {
				for (int b = 0; b < m; b++)
					A[a][b] += wgt * X[i][idx[a]] * X[i][idx[b]];
				A[a][m] += wgt * X[i][idx[a]] * y[i];
			}
		}
		/* Gauss-Jordan with partial pivoting */
		for (int a = 0; a < m; a++) {
			int p = a;
			for (int r = a + 1; r < m; r++)
				if (fabs(A[r][a]) > fabs(A[p][a]))
					p = r;
			if (fabs(A[p][a]) < 1e-300) {
				on[idx[a]] = 0;
				goto again;
			}
			for (int k = 0; k <= m; k++) {
				double t = A[a][k];
				A[a][k] = A[p][k];
				A[p][k] = t;
			}
			for (int r = 0; r < m; r++) {
				double f = A[r][a] / A[a][a];
				if (r == a)
					continue;
				for (int k = a; k <= m; k++)
					A[r][k] -= f * A[a][k];
			}
		}
		for (int j = 0; j < NCOEF; j++)
			c[j] = 0;
		for (int a = 0; a < m; a++) {
			c[idx[a]] = A[a][m] / A[a][a];
			if (c[idx[a]] < 0 && (worst < 0 || c[idx[a]] < c[worst]))
				worst = idx[a];
		}
		if (worst < 0)
			return 0;
		on[worst] = 0;
again:	;
	}
}

/* Split a TSV line in place. */
static int fields(char *line, char **f, int max)
{
	int n = 0;

	line[strcspn(line, "\r\n")] = 0;
	for (char *p = line; n < max; ) {
		f[n++] = p;
		if ((p = strchr(p, '\t')) == NULL)
			break;
		*p++ = 0;
	}
	return n;
}

/* The mask a kbench row ran: one of the masks given with the same pattern,
 * seqlens and area, or full and causal, which need no file. */
static const struct mask *row_mask(const struct mask *ms, int nm, const char *pat, int64_t sq,
                                   int64_t sk, double area, struct mask *tmp)
{
	char e[160];

	for (int i = 0; i < nm; i++)
		if (strcmp(ms[i].pattern, pat) == 0 && ms[i].sq == sq && ms[i].sk == sk &&
		    fabs((double)ms[i].area / ms[i].heads - area) < 1)
			return &ms[i];
	if (strcmp(pat, "full") != 0 && strcmp(pat, "causal") != 0)
		return NULL;
	mask_init(tmp, sq, sk, pat, "");
	if (mask_add(tmp, 0, sq, 0, sk, pat[0] == 'f' ? MASK_FULL : MASK_CAUSAL) < 0 ||
	    mask_finish(tmp, e, sizeof e) < 0 || fabs((double)tmp->area - area) >= 1) {
		mask_free(tmp);
		return NULL;
	}
	return tmp;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Fit the kernel kern's rows of pass bwd in path. */
static void calibrate(const char *path, const char *tcol, const char *kern, const struct ktile *kt,
                      int bwd, const struct mask *masks, int nm, int verbose, struct fit *f)
{
	enum { C_TOOL, C_KERN, C_MASK, C_SQ, C_SK, C_AREA, C_BATCH, C_HQ, C_HD, C_PASS, C_ST, C_MS,
	       C_DEV, NC };
	const char *want[NC] = { "tool", "kernel", "mask", "seqlen_q", "seqlen_k", "area",
	                         "batch", "heads_q", "head_dim", "pass", "status", tcol, "device" };
	FILE *fp = fopen(path, "r");
	char line[4096], *fl[64], emsg[160];
	int col[NC], have = 0, cap = 0, nf;
	double (*X)[NCOEF] = NULL, *y = NULL, *eff = NULL;
	char (*lab)[64] = NULL;
	long ln = 0;

	if (fp == NULL)
		err(EXIT_BADINPUT, "--calibrate: %s", path);
	memset(f, 0, sizeof *f);
	while (fgets(line, sizeof line, fp) != NULL) {
		ln++;
		nf = fields(line, fl, 64);
		if (strcmp(fl[0], "tool") == 0) {
			for (int c = 0; c < NC; c++) {
				col[c] = -1;
				for (int i = 0; i < nf; i++)
					if (strcmp(fl[i], want[c]) == 0)
						col[c] = i;
				if (col[c] < 0)
					errx(EXIT_BADINPUT, "--calibrate: %s: line %ld: header lacks column %s",
					     path, ln, want[c]);
			}
			have = nf;
			continue;
		}
		if (nf <= 1 && fl[0][0] == 0)
			continue;
		if (!have)
			errx(EXIT_BADINPUT, "--calibrate: %s: line %ld: rows before a header line", path, ln);
		if (nf != have)
			errx(EXIT_BADINPUT, "--calibrate: %s: line %ld: %d fields, want %d", path, ln, nf, have);
		if (strcmp(fl[col[C_TOOL]], "kbench") != 0 || strcmp(fl[col[C_KERN]], kern) != 0 ||
		    strcmp(fl[col[C_PASS]], bwd ? "bwd" : "fwd") != 0 || strcmp(fl[col[C_ST]], "ok") != 0)
			continue;

		int64_t sq = atoll(fl[col[C_SQ]]), sk = atoll(fl[col[C_SK]]);
		double area = atof(fl[col[C_AREA]]), ms = atof(fl[col[C_MS]]);
		struct mask tmp = { 0 };
		const struct mask *m = row_mask(masks, nm, fl[col[C_MASK]], sq, sk, area, &tmp);
		struct work w;

		if (m == NULL || !(ms > 0)) {
			if (verbose)
				fprintf(stderr, "cpbench: --calibrate: %s: line %ld: no mask file for %s %lld, "
				        "row left out\n", path, ln, fl[col[C_MASK]], (long long)sq);
			continue;
		}
		if (work_of(m, kt, bwd, &w, emsg, sizeof emsg) < 0)
			errx(EXIT_BADINPUT, "--calibrate: %s: line %ld: %s", path, ln, emsg);
		if (f->n == cap) {
			cap = cap ? 2 * cap : 32;
			X = xrealloc(X, (size_t)cap * sizeof *X);
			y = xrealloc(y, (size_t)cap * sizeof *y);
			eff = xrealloc(eff, (size_t)cap * sizeof *eff);
			lab = xrealloc(lab, (size_t)cap * sizeof *lab);
		}
		features(&w, m->heads, atof(fl[col[C_BATCH]]), atoi(fl[col[C_HQ]]), atoi(fl[col[C_HD]]),
		         X[f->n]);
		eff[f->n] = (double)m->area / ((w.full + w.part) * (bwd ? kt->bq * kt->bk : kt->fq * kt->fk));
		snprintf(lab[f->n], sizeof lab[0], "%s %lld %sh", m->pattern, (long long)sq, fl[col[C_HQ]]);
		y[f->n++] = ms;
		if (f->device[0] == 0)
			snprintf(f->device, sizeof f->device, "%s", fl[col[C_DEV]]);
		if (m == &tmp)
			mask_free(&tmp);
	}
	fclose(fp);
	if (f->n == 0)
		errx(EXIT_BADINPUT, "--calibrate: %s: no ok kbench rows of kernel %s, pass %s on a mask "
		     "given (or full, causal)", path, kern, bwd ? "bwd" : "fwd");
	if (solve(X, y, f->n, f->c) < 0)
		errx(EXIT_BADINPUT, "--calibrate: %s: kernel %s %s: the rows fit no model", path, kern,
		     bwd ? "bwd" : "fwd");
	{
		double *e = xmalloc((size_t)f->n * sizeof *e);
		for (int i = 0; i < f->n; i++)
			e[i] = fabs(model(f, X[i]) / y[i] - 1);
		qsort(e, f->n, sizeof *e, cmpd);
		f->err_med = f->n % 2 ? e[f->n / 2] : (e[f->n / 2 - 1] + e[f->n / 2]) / 2;
		f->err_max = e[f->n - 1];
		free(e);
	}
	if (verbose)
		fprintf(stderr, "cpbench: calibration %s %s: %d rows, a %.4g ms, full %.4g, partial %.4g, "
		        "row %.4g ns per tile-head-dim; fit error median %.1f%% max %.1f%%\n", kern,
		        bwd ? "bwd" : "fwd", f->n, f->c[0], f->c[1] * 1e6, f->c[2] * 1e6, f->c[3] * 1e6,
		        100 * f->err_med, 100 * f->err_max);
	/* -v -v: the rows, their tile efficiency, measured and fitted */
	for (int i = 0; verbose > 1 && i < f->n; i++)
		fprintf(stderr, "cpbench: calibration %s %s: %-28s tile eff %.3f  %9.4f ms, fit %9.4f (%+.1f%%)\n",
		        kern, bwd ? "bwd" : "fwd", lab[i], eff[i], y[i], model(f, X[i]),
		        100 * (model(f, X[i]) / y[i] - 1));
	free(X);
	free(y);
	free(eff);
	free(lab);
}

/* ---- links ------------------------------------------------------------------- */

enum { OP_P2P, OP_A2A, OP_GATHER, NOP };
static const char *const opname[NOP] = { "p2p", "a2a", "gather" };

struct link {
	double gbps, usec;           /* GB/s (1e9 bytes), microseconds */
	int ranks;                   /* of the probe's call; 0: not known */
};

struct links {
	struct link l[2][NOP];       /* [CPX_INTRA or CPX_INTER][OP_*] */
	struct link copy;            /* local memory, bytes read + written */
};

static void link_arg(const char *s, const char *what, struct link *l)
{
	char *e;

	l->ranks = 0;
	l->gbps = strtod(s, &e);
	if (e == s || *e != ',' || !(l->gbps > 0))
		errx(EXIT_BADINPUT, "%s: '%s' is not GBPS,USEC", what, s);
	s = e + 1;
	l->usec = strtod(s, &e);
	if (e == s || *e != 0 || !(l->usec >= 0))
		errx(EXIT_BADINPUT, "%s: '%s' is not GBPS,USEC", what, s);
}

static void links_read(const char *path, struct links *L)
{
	FILE *fp = fopen(path, "r");
	char line[1024], *f[16];
	long ln = 0;
	int n;

	if (fp == NULL)
		err(EXIT_BADINPUT, "--links: %s", path);
	while (fgets(line, sizeof line, fp) != NULL) {
		struct link l;
		char *e1, *e2;
		int sc, op;

		ln++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if ((n = fields(line, f, 16)) < 4)
			errx(EXIT_BADINPUT, "--links: %s: line %ld: want scope, op, gbps, usec", path, ln);
		if (strcmp(f[0], "scope") == 0)
			continue;
		l.gbps = strtod(f[2], &e1);
		l.usec = strtod(f[3], &e2);
		if (*e1 || *e2 || !(l.gbps > 0) || !(l.usec >= 0))
			errx(EXIT_BADINPUT, "--links: %s: line %ld: bad numbers '%s' '%s'", path, ln, f[2], f[3]);
		l.ranks = 0;
		if (n >= 5 && ((l.ranks = (int)strtol(f[4], &e1, 10)) < 1 || *e1))
			errx(EXIT_BADINPUT, "--links: %s: line %ld: bad ranks '%s'", path, ln, f[4]);
		if (strcmp(f[0], "local") == 0 && strcmp(f[1], "copy") == 0) {
			L->copy = l;
			continue;
		}
		sc = strcmp(f[0], "intra") == 0 ? CPX_INTRA : strcmp(f[0], "inter") == 0 ? CPX_INTER : -1;
		for (op = 0; op < NOP && strcmp(f[1], opname[op]) != 0; op++)
			;
		if (sc >= 0 && op < NOP)
			L->l[sc][op] = l;
		else
			errx(EXIT_BADINPUT, "--links: %s: line %ld: unknown link '%s %s'", path, ln, f[0], f[1]);
	}
	if (ferror(fp))
		err(EXIT_BADINPUT, "--links: %s", path);
	fclose(fp);
}

/* ---- the simulation ------------------------------------------------------------ */

struct sim {
	const struct cp_sched *s;
	const struct links *L;
	const double *ta;            /* ms per attention piece */
	int trace, gpu;
	int *x2k;                    /* simulate_cpu, a rank's x2 under way: its step, -1 none */
	double *x2s, *x2e;           /* its start (-1: peers not there yet) and end */
	double *S, *E, *P2, *rdy, *gm, *st;
};

/* The ranks of x's call: x is one of the schedule's steps' transfers;
 * the ranks whose same transfer of that step has its group. */
static int xranks(const struct sim *z, const struct cp_xfer *x)
{
	const struct cp_sched *s = z->s;
	size_t i = (size_t)((const char *)x - (const char *)s->step) / sizeof *s->step;
	size_t off = (size_t)((const char *)x - (const char *)&s->step[i]);
	int k = (int)(i % s->nsteps), n = 0;

	for (int g = 0; g < s->world; g++) {
		const struct cp_xfer *y = (const void *)((const char *)&s->step[(size_t)g * s->nsteps + k] + off);
		n += y->how == x->how && y->group == x->group;
	}
	return n;
}

/* A transfer's latency: its calls' (nops) share of xcost.  On MPI an
 * all-gather or reduce-scatter of g ranks is ceil(log2 g) messages one
 * after the other (Open MPI's recursive doubling below 32 ranks,
 * coll/tuned's fixed decision), so the probe's call among ranks ranks
 * stands for log2 ranks of them; all-to-all and p2p send to every peer at
 * once.  On a GPU the probed latency is the host's time in the call
 * (simulate), which does not grow with NCCL's ring. */
static double xlat(const struct sim *z, const struct cp_xfer *x)
{
	int op = x->how == CPX_P2P ? OP_P2P : x->how == CPX_A2A ? OP_A2A : OP_GATHER;
	int sc = x->bytes[CPX_INTER] > 0 ? CPX_INTER : CPX_INTRA;
	const struct link *l = &z->L->l[sc][op];
	double f = 1;

	if (x->how == CPX_NONE)
		return 0;
	if (op == OP_GATHER && l->ranks > 1 && !z->gpu)
		f = ceil(log2(xranks(z, x))) / ceil(log2(l->ranks));
	return x->nops * l->usec * 1e-3 * f;
}

static double xcost(const struct sim *z, const struct cp_xfer *x)
{
	const struct links *L = z->L;
	int op = x->how == CPX_P2P ? OP_P2P : x->how == CPX_A2A ? OP_A2A : OP_GATHER;
	int sc = x->bytes[CPX_INTER] > 0 ? CPX_INTER : CPX_INTRA;
	double t, ti, te;

	if (x->how == CPX_NONE)
		return 0;
	t = xlat(z, x);
	ti = x->bytes[CPX_INTRA] / (L->l[CPX_INTRA][op].gbps * 1e6);
	te = x->bytes[CPX_INTER] / (L->l[CPX_INTER][op].gbps * 1e6);
	if (op == OP_GATHER && sc == CPX_INTER)
		return t + (x->bytes[CPX_INTRA] + x->bytes[CPX_INTER]) / (L->l[CPX_INTER][op].gbps * 1e6);
	return t + (ti > te ? ti : te);
}

/* Start times of slot x of step k when rank r is ready at rdy[r]: the
 * latest of its peers (p2p) or group (collectives). */
static void rendezvous(struct sim *z, int k, int slot)
{
	const struct cp_sched *s = z->s;
	int w = s->world;

	for (int g = 0; g < w; g++)
		z->gm[g] = 0;
	for (int r = 0; r < w; r++) {
		const struct cp_step *p = &s->step[(size_t)r * s->nsteps + k];
		const struct cp_xfer *x = slot == 0 ? &p->x : slot == 1 ? &p->xs : &p->x2;
		if (x->how != CPX_NONE && x->how != CPX_P2P && z->rdy[r] > z->gm[x->group])
			z->gm[x->group] = z->rdy[r];
	}
	for (int r = 0; r < w; r++) {
		const struct cp_step *p = &s->step[(size_t)r * s->nsteps + k];
		const struct cp_xfer *x = slot == 0 ? &p->x : slot == 1 ? &p->xs : &p->x2;
		double t = z->rdy[r];

		if (x->how == CPX_P2P) {
			if (z->rdy[x->to] > t)
				t = z->rdy[x->to];
			if (z->rdy[x->from] > t)
				t = z->rdy[x->from];
		} else if (x->how != CPX_NONE) {
			t = z->gm[x->group];
		}
		z->st[r] = t;
	}
}

/* The pass: ms of the slowest rank. */
/* On a GPU the host issues a rank's calls in program order (per step: x2,
 * x, the attention, xs) and the device runs them when the host has issued
 * them and their stream is free.  A transfer's latency is the host's time
 * in its calls (--probe-links times calls back to back: the launch, not
 * the wire, for small messages), so it stalls the stream only when the
 * device has caught up with the host; the bandwidth part runs on the
 * device.  Returns, for transfer x, the time its first call is issued
 * (*first) and the time its last one is (*done), from host clock *h. */
static void issue(const struct sim *z, const struct cp_xfer *x, double *h, double *first,
                  double *done)
{
	double l = xlat(z, x);

	*first = *h + (x->nops > 0 ? l / x->nops : 0);
	*h += l;
	*done = *h;
}

static double simulate(struct sim *z)
{
	const struct cp_sched *s = z->s;
	const struct links *L = z->L;
	int w = s->world;
	double *xe = xcalloc(w, sizeof *xe), *s0 = xcalloc(w, sizeof *s0), end = 0;
	double *hc = xcalloc(w, sizeof *hc), (*is)[7] = xcalloc(w, sizeof *is);

	for (int r = 0; r < w; r++)
		z->E[r] = z->P2[r] = 0;
	for (int k = 0; k < s->nsteps; k++) {
		for (int r = 0; r < w; r++) {
			const struct cp_step *p = &s->step[(size_t)r * s->nsteps + k];
			double a = z->S[r] = z->E[r];

			/* is[r]: x2 first, done; x first, done; attention; xs first, done */
			issue(z, &p->x2, &hc[r], &is[r][0], &is[r][1]);
			issue(z, &p->x, &hc[r], &is[r][2], &is[r][3]);
			is[r][4] = hc[r];
			issue(z, &p->xs, &hc[r], &is[r][5], &is[r][6]);
			if (p->attn >= 0 || p->mem > 0)
				a = fmax(a, is[r][4]);
			s0[r] = a + (p->attn >= 0 ? z->ta[p->attn] : 0) +
			        p->nmem * L->copy.usec * 1e-3 + p->mem / (L->copy.gbps * 1e6);
		}
		/* x: under the attention */
		for (int r = 0; r < w; r++)
			z->rdy[r] = fmax(z->S[r], is[r][2]);
		rendezvous(z, k, 0);
		for (int r = 0; r < w; r++) {
			const struct cp_step *p = &s->step[(size_t)r * s->nsteps + k];
			xe[r] = p->x.how ? fmax(z->st[r] + xcost(z, &p->x) - xlat(z, &p->x), is[r][3]) : z->S[r];
		}
		/* xs: after the stream 0 work */
		for (int r = 0; r < w; r++)
			z->rdy[r] = s->step[(size_t)r * s->nsteps + k].xs.how ? fmax(s0[r], is[r][5]) : s0[r];
		rendezvous(z, k, 1);
		for (int r = 0; r < w; r++) {
			const struct cp_step *p = &s->step[(size_t)r * s->nsteps + k];
			if (p->xs.how)
				s0[r] = fmax(z->st[r] + xcost(z, &p->xs) - xlat(z, &p->xs), is[r][6]);
		}
		/* x2: its own stream, in order */
		for (int r = 0; r < w; r++)
			z->rdy[r] = fmax(fmax(z->S[r], z->P2[r]), is[r][0]);
		rendezvous(z, k, 2);
		for (int r = 0; r < w; r++) {
			const struct cp_step *p = &s->step[(size_t)r * s->nsteps + k];
			if (p->x2.how)
				z->P2[r] = fmax(z->st[r] + xcost(z, &p->x2) - xlat(z, &p->x2), is[r][1]);
			z->E[r] = s0[r] > xe[r] ? s0[r] : xe[r];
			if (p->join2 && z->P2[r] > z->E[r])
				z->E[r] = z->P2[r];
			if (z->trace)
				fprintf(stderr, "cpbench: trace rank %d step %d: start %.4f attn %.4f (%s) "
				        "mem %.4f x %.4f xs %.4f x2 %.4f end %.4f ms, issued by %.4f\n", r, k,
				        z->S[r], p->attn >= 0 ? z->ta[p->attn] : 0, p->attn >= 0 ? "piece" : "-",
				        p->nmem * L->copy.usec * 1e-3 + p->mem / (L->copy.gbps * 1e6),
				        xcost(z, &p->x), xcost(z, &p->xs), xcost(z, &p->x2), z->E[r], hc[r]);
		}
	}
	for (int r = 0; r < w; r++)
		if (z->E[r] > end)
			end = z->E[r];
	free(xe);
	free(s0);
	free(hc);
	free(is);
	return end;
}

/* The schedule on the CPU backend: every thing a rank does (attention,
 * memory traffic, transfers) runs on its one thread, in that order, except
 * x2: MPI_Isend/Irecv, progressed by the MPI calls in between once both
 * sides posted it, and waited for at join2.  Events in time order: a phase
 * ends, a rank reaches a transfer whose peers (p2p: to and from;
 * collectives: the group) all reached it, or an x2 whose peers posted
 * theirs starts.
 *
 * Ranks that share cores (--cores) each get cores/ranks of a core whether
 * they compute or wait: MPI's waits spin (yield_when_idle), and a yield
 * gives way only within the yielder's scheduling group (measured: a
 * spinner of another autogroup halves a worker's speed on a core, one of
 * the same group costs it nothing), while the kernel spreads each group's
 * ranks (a node's, one launcher step) over the cores, next to the other
 * groups' ranks.  So the attention time is the calibration's scaled by the
 * ranks a core here over the ranks a core there (z->ta, pred_main). */
enum { PH_CMP, PH_X, PH_XS, PH_X2, NPH };
enum { RS_CMP, RS_WAIT, RS_XFER, RS_J2, RS_DONE };

static const struct cp_xfer *slotx(const struct cp_step *p, int ph)
{
	return ph == PH_X ? &p->x : ph == PH_XS ? &p->xs : &p->x2;
}

/* Every peer of rank r's transfer ph of step k (p2p: to and from;
 * collectives: its group) has reached position at. */
static int peers_at(const struct sim *z, const int *pos, int r, int k, int ph, int at)
{
	const struct cp_sched *s = z->s;
	const struct cp_xfer *x = slotx(&s->step[(size_t)r * s->nsteps + k], ph);

	if (x->how == CPX_P2P)
		return pos[x->to] >= at && pos[x->from] >= at;
	for (int g = 0; g < s->world; g++) {
		const struct cp_xfer *y = slotx(&s->step[(size_t)g * s->nsteps + k], ph);
		if (y->how != CPX_NONE && y->how != CPX_P2P && y->group == x->group && pos[g] < at)
			return 0;
	}
	return 1;
}

/* Rank r's transfer at pos[r] can start; its x2 of step k can move (its
 * peers posted theirs). */
static int ready(const struct sim *z, const int *pos, int r)
{
	return peers_at(z, pos, r, pos[r] / NPH, pos[r] % NPH, pos[r]);
}

static int x2ready(const struct sim *z, const int *pos, int r, int k)
{
	return peers_at(z, pos, r, k, PH_X2, k * NPH);
}

/* Rank r enters position pos[r] at time now: skips what is empty. */
static void enter(struct sim *z, int *pos, int *st, double *rem, int r, double now)
{
	const struct cp_sched *s = z->s;
	const struct links *L = z->L;

	for (;; pos[r]++) {
		int k = pos[r] / NPH, ph = pos[r] % NPH;
		const struct cp_step *p;

		if (k == s->nsteps) {
			st[r] = RS_DONE;
			z->E[r] = now;
			return;
		}
		p = &s->step[(size_t)r * s->nsteps + k];
		if (ph == PH_CMP && p->x2.how != CPX_NONE) {
			z->x2k[r] = k;
			z->x2s[r] = -1;
		}
		if (ph == PH_X2) {
			if (p->join2 && z->x2k[r] >= 0) {
				st[r] = RS_J2;
				return;
			}
			continue;
		}
		if (ph == PH_CMP) {
			const double ta = p->attn >= 0 ? z->ta[p->attn] : 0;
			const double mem = p->nmem * L->copy.usec * 1e-3 + p->mem / (L->copy.gbps * 1e6);
			if (z->trace)
				fprintf(stderr, "cpbench: trace rank %d step %d: start %.4f attn %.4f (%s) "
				        "mem %.4f x %.4f xs %.4f x2 %.4f ms\n", r, k, now, ta,
				        p->attn >= 0 ? "piece" : "-", mem, xcost(z, &p->x), xcost(z, &p->xs),
				        xcost(z, &p->x2));
			rem[r] = ta + mem;
			if (rem[r] > 0) {
				st[r] = RS_CMP;
				return;
			}
		} else if (slotx(p, ph)->how != CPX_NONE) {
			st[r] = RS_WAIT;
			return;
		}
	}
}

/* The pass: ms of the slowest rank, or -1 if the schedule deadlocks. */
static double simulate_cpu(struct sim *z)
{
	const struct cp_sched *s = z->s;
	int w = s->world, *pos = xcalloc(w, sizeof *pos), *st = xcalloc(w, sizeof *st);
	double *rem = xcalloc(w, sizeof *rem), *tend = xcalloc(w, sizeof *tend), now = 0, end = 0;

	z->x2k = xmalloc(w * sizeof *z->x2k);
	z->x2s = xcalloc(w, sizeof *z->x2s);
	z->x2e = xcalloc(w, sizeof *z->x2e);
	for (int r = 0; r < w; r++)
		z->x2k[r] = -1;
	for (int r = 0; r < w; r++)
		enter(z, pos, st, rem, r, 0);
	for (;;) {
		int moved = 1, left = 0;
		double dt = HUGE_VAL;

		/* what ends now, and the transfers whose peers are all there */
		while (moved) {
			moved = 0;
			for (int r = 0; r < w; r++) {
				if ((st[r] == RS_CMP && rem[r] <= 0) || (st[r] == RS_XFER && tend[r] <= now + 1e-9)) {
					pos[r]++;
					enter(z, pos, st, rem, r, now);
					moved = 1;
				} else if (st[r] == RS_J2 && z->x2k[r] < 0) {
					pos[r]++;
					enter(z, pos, st, rem, r, now);
					moved = 1;
				} else if (st[r] == RS_WAIT && ready(z, pos, r)) {
					const struct cp_step *p = &s->step[(size_t)r * s->nsteps + pos[r] / NPH];
					tend[r] = now + xcost(z, slotx(p, pos[r] % NPH));
					st[r] = RS_XFER;
					moved = 1;
				}
				/* x2: MPI progresses it in the background once posted
				 * on both sides; the rank waits for it at join2 */
				if (z->x2k[r] >= 0 && z->x2s[r] < 0 && x2ready(z, pos, r, z->x2k[r])) {
					z->x2s[r] = now;
					z->x2e[r] = now + xcost(z, &s->step[(size_t)r * s->nsteps + z->x2k[r]].x2);
					moved = 1;
				}
				if (z->x2k[r] >= 0 && z->x2s[r] >= 0 && z->x2e[r] <= now + 1e-9) {
					z->x2k[r] = -1;
					moved = 1;
				}
			}
		}
		for (int r = 0; r < w; r++)
			left += st[r] != RS_DONE;
		if (!left)
			break;
		for (int r = 0; r < w; r++) {
			double t = st[r] == RS_XFER ? tend[r] - now : st[r] == RS_CMP ? rem[r] : HUGE_VAL;
			if (t < dt)
				dt = t;
			if (z->x2k[r] >= 0 && z->x2s[r] >= 0 && z->x2e[r] - now < dt)
				dt = z->x2e[r] - now;
		}
		if (dt == HUGE_VAL) {
			end = -1;
			break;
		}
		for (int r = 0; r < w; r++)
			if (st[r] == RS_CMP)
				rem[r] = rem[r] <= dt ? 0 : rem[r] - dt;
		now += dt;
	}
	for (int r = 0; r < w && end >= 0; r++)
		if (z->E[r] > end)
			end = z->E[r];
	free(pos);
	free(st);
	free(z->x2k);
	free(z->x2s);
	free(z->x2e);
	free(rem);
	free(tend);
	return end;
}

/* ---- --predict ------------------------------------------------------------------ */

static const char *const cpst[] = { "ok", "oom", "unsupported", "wrong", "error" };

int pred_main(const struct pred_opts *o, char *const *paths, int nmask)
{
	const struct ktile *kt;
	const char *kern = o->kernel;
	struct mask *ms = xcalloc(nmask, sizeof *ms);
	struct fit fit[2];
	struct links L;
	int nodes, gpus, world, rc = 0, need[2] = { 0, 0 };
	double slow = 1;
	char emsg[512], dev[256], *e;

	nodes = (int)strtol(o->cluster, &e, 10);
	if (e == o->cluster || (*e != 'x' && *e != 'X') || nodes < 1 ||
	    (gpus = (int)strtol(e + 1, &e, 10)) < 1 || *e || nodes > 1 << 16 || gpus > 1 << 10)
		errx(EXIT_BADINPUT, "--predict: '%s' is not NODESxGPUS", o->cluster);
	world = nodes * gpus;
	if (o->calibrate == NULL)
		errx(EXIT_BADINPUT, "--predict: needs --calibrate FILE (kbench rows of the local kernel)");
	if (kern == NULL) {
		/* the one kernel of the calibration rows */
		FILE *fp = fopen(o->calibrate, "r");
		char line[4096], *f[64];
		static char one[64];
		int kc = -1, tc = -1;

		if (fp == NULL)
			err(EXIT_BADINPUT, "--calibrate: %s", o->calibrate);
		while (fgets(line, sizeof line, fp) != NULL) {
			int n = fields(line, f, 64);
			if (strcmp(f[0], "tool") == 0) {
				for (int i = 0; i < n; i++) {
					if (strcmp(f[i], "kernel") == 0)
						kc = i;
					if (strcmp(f[i], "tool") == 0)
						tc = i;
				}
			} else if (kc >= 0 && kc < n && strcmp(f[tc], "kbench") == 0) {
				if (one[0] && strcmp(one, f[kc]) != 0)
					errx(EXIT_BADINPUT, "--calibrate: %s: rows of kernels %s and %s: "
					     "say which with -k", o->calibrate, one, f[kc]);
				snprintf(one, sizeof one, "%s", f[kc]);
			}
		}
		fclose(fp);
		if (!one[0])
			errx(EXIT_BADINPUT, "--calibrate: %s: no kbench rows", o->calibrate);
		kern = one;
	}
	for (kt = ktiles; kt->name && strcmp(kt->name, kern) != 0; kt++)
		;
	if (kt->name == NULL)
		errx(EXIT_BADINPUT, "-k: kernel '%s': its tile shape is not known to --predict", kern);

	/* links: defaults (NVLink inside a node, 400 Gb/s per GPU between
	 * nodes, HBM copies), then the probe's file, then the flags */
	for (int op = 0; op < NOP; op++) {
		L.l[CPX_INTRA][op] = (struct link){ 300, 10, 0 };
		L.l[CPX_INTER][op] = (struct link){ 50, 10, 0 };
	}
	L.copy = (struct link){ 3000, 5, 0 };
	if (o->links)
		links_read(o->links, &L);
	if (o->intra) {
		struct link l;
		link_arg(o->intra, "--link-intra", &l);
		for (int op = 0; op < NOP; op++)
			L.l[CPX_INTRA][op] = l;
	}
	if (o->inter) {
		struct link l;
		link_arg(o->inter, "--link-inter", &l);
		for (int op = 0; op < NOP; op++)
			L.l[CPX_INTER][op] = l;
	}

	/* ranks that share cores: the attention takes the calibration's time
	 * times the ranks a core here over the ranks a core there */
	if (o->cores) {
		double c = strtod(o->cores, &e);
		int calr = gpus;

		if (*e == ',' && ((calr = (int)strtol(e + 1, &e, 10)) < 1 || calr > 1 << 20))
			e = (char *)"?";
		if (e == o->cores || *e || !(c >= 0.01) || c > 1 << 20)
			errx(EXIT_BADINPUT, "--cores: '%s' is not CORES[,RANKS]", o->cores);
		if (kt->gpu)
			errx(EXIT_BADINPUT, "--cores: kernel %s runs on GPUs; cores are for the cpu kernel",
			     kern);
		slow = fmax(1, gpus / c) / fmax(1, calr / c);
	}
	for (int i = 0; i < nmask; i++) {
		if (mask_read(paths[i], &ms[i], emsg, sizeof emsg) == -1)
			errx(EXIT_BADINPUT, "%s", emsg);
		if (ms[i].sq != ms[i].sk)
			errx(EXIT_BADINPUT, "%s: seqlen_q %lld != seqlen_k %lld: CP needs self-attention",
			     paths[i], (long long)ms[i].sq, (long long)ms[i].sk);
		if (o->job.shape.hq % ms[i].heads != 0)
			errx(EXIT_BADINPUT, "%s: %d mask heads do not divide %d query heads", paths[i],
			     ms[i].heads, o->job.shape.hq);
	}
	for (int j = 0; j < o->npass; j++)
		need[o->passes[j] == PASS_BWD] = 1;
	for (int b = 0; b < 2; b++)
		if (need[b])
			calibrate(o->calibrate, o->calcol ? o->calcol : "ms_median", kern, kt, b, ms,
			          nmask, o->verbose, &fit[b]);
	snprintf(dev, sizeof dev, "%dx%d %s", nodes, gpus, fit[need[1] && !need[0]].device);

	tsv_header(stdout);
	for (int i = 0; i < nmask; i++)
		for (int si = 0; si < o->nstrat; si++)
			for (int j = 0; j < o->npass; j++) {
				const struct cp_ops *st = o->strat[si];
				struct cp_job job = o->job;
				struct cp_sched s = { 0 };
				int bwd = o->passes[j] == PASS_BWD, status;
				double ms_pred = 0;

				job.mask = &ms[i];
				job.shape.sq = job.shape.sk = ms[i].sq;
				job.pass = o->passes[j];
				status = st->sched ? st->sched(&job, world, gpus, &s) : CP_UNSUPPORTED;
				if (st->sched == NULL)
					snprintf(s.why, sizeof s.why, "no schedule for --predict");
				if (status == CP_OK) {
					double *ta = xcalloc(s.nattn + 1, sizeof *ta);
					struct sim z = { .s = &s, .L = &L, .ta = ta, .gpu = kt->gpu,
					                 .trace = o->verbose > 2 };

					for (int a = 0; a < s.nattn; a++) {
						struct work w;
						double x[NCOEF];
						if (s.attn[a].m.area == 0)
							continue;
						if (work_of(&s.attn[a].m, kt, bwd, &w, emsg, sizeof emsg) < 0) {
							status = CP_ERROR;
							snprintf(s.why, sizeof s.why, "%.150s", emsg);
							break;
						}
						features(&w, s.attn[a].m.heads, job.shape.batch, s.attn[a].hq,
						         job.shape.hd, x);
						ta[a] = model(&fit[bwd], x) * slow;
					}
					if (status == CP_OK) {
						z.S = xcalloc(world, sizeof *z.S);
						z.E = xcalloc(world, sizeof *z.E);
						z.P2 = xcalloc(world, sizeof *z.P2);
						z.rdy = xcalloc(world, sizeof *z.rdy);
						z.gm = xcalloc(world, sizeof *z.gm);
						z.st = xcalloc(world, sizeof *z.st);
						ms_pred = kt->gpu ? simulate(&z) : simulate_cpu(&z);
						if (ms_pred < 0) {
							status = CP_ERROR;
							ms_pred = 0;
							snprintf(s.why, sizeof s.why, "the schedule deadlocks");
						}
						free(z.S); free(z.E); free(z.P2); free(z.rdy); free(z.gm); free(z.st);
					}
					free(ta);
				}
				if (status != CP_OK && (o->verbose || status != CP_UNSUPPORTED))
					fprintf(stderr, "cpbench: %s %s %s: %s: %s\n", st->name, ms[i].pattern,
					        bwd ? "bwd" : "fwd", cpst[status], s.why);
				if (status == CP_ERROR)
					rc = EXIT_WRONG;

				struct row row = {
					.tool = "cpbench", .kernel = st->name, .mask = ms[i].pattern,
					.sq = ms[i].sq, .sk = ms[i].sq, .area = (double)ms[i].area / ms[i].heads,
					.batch = job.shape.batch, .hq = job.shape.hq, .hkv = job.shape.hkv,
					.hd = job.shape.hd, .dtype = job.shape.dtype == DT_FP16 ? "fp16" : "bf16",
					.pass = bwd ? "bwd" : "fwd", .world = world, .ulysses = s.ulysses,
					.ring = s.ring, .status = status == CP_OK ? "predicted" : cpst[status],
					.iters = 0, .ms_median = ms_pred, .ms_min = ms_pred, .ms_max = ms_pred,
					.device = dev, .host = "predict", .commit = build_commit(), .seed = 0,
					.nodes = nodes,
				};
				if (ms_pred > 0)
					row.tflops = tsv_flops(row.area, row.hq, row.hd, row.batch, bwd) / world /
					             (ms_pred * 1e-3) / 1e12;
				tsv_row(stdout, &row);
				cp_sched_free(&s);
			}
	for (int i = 0; i < nmask; i++)
		mask_free(&ms[i]);
	free(ms);
	close_stdout();
	return rc;
}

/* ---- --probe-links -------------------------------------------------------------- */

struct probe {
	const struct cp_env *env;
	struct ops x;
	void *sb, *rb, *db;          /* backend buffers; db: scratch for one double */
	size_t n;
};

/* Slowest rank's time of one call (ms): median of iterations, each fenced,
 * each BATCH calls back to back: a pass enqueues its calls so, and one call
 * timed alone from the host would count the host's launch and wait too
 * (100 us and more on a GPU) as the link's latency. */
static double ptime(struct probe *p, struct comm *c, int op, size_t bytes)
{
	enum { WARM = 2, IT = 7, BATCH = 8 };
	double t[IT];
	int g = c ? comm_size(c) : 1, me = c ? comm_rank(c) : 0;
	void *stream = p->x.stream[0];

	for (int it = 0; it < WARM + IT; it++) {
		double v;
		int bad = 0;

		ops_sync(&p->x);
		if (comm_barrier(p->env->world) < 0)
			comm_abort(p->env->world, "probe: barrier failed");
		ops_flush(&p->x);
		ops_tstart(&p->x);
		for (int b = 0; b < BATCH && !bad; b++) {
			struct comm_req *q = NULL;
			if (c != NULL && op == OP_P2P)
				bad = comm_isendrecv(c, p->sb, (me + 1) % g, p->rb, (me - 1 + g) % g, bytes,
				                     CT_BYTE, stream, &q) < 0 || comm_wait(q, stream) < 0;
			else if (c != NULL && op == OP_A2A)
				bad = comm_alltoall(c, p->sb, p->rb, bytes / g, CT_BYTE, stream) < 0;
			else if (c != NULL && op == OP_GATHER)
				bad = comm_allgather(c, p->sb, p->rb, bytes / g, CT_BYTE, stream) < 0;
			else if (c == NULL)
				ops_copy(&p->x, p->rb, p->sb, bytes, 0);
		}
		if (bad)
			comm_abort(p->env->world, "probe: a transfer failed");
		v = ops_tstop(&p->x) / BATCH;
		if (p->env->backend == COMM_NCCL) {
			ops_upload(&p->x, p->db, &v, sizeof v);
			if (comm_allreduce(p->env->world, p->db, 1, CT_F64, "max", stream) < 0)
				comm_abort(p->env->world, "probe: allreduce failed");
			ops_download(&p->x, &v, p->db, sizeof v);
		} else if (comm_allreduce(p->env->world, &v, 1, CT_F64, "max", NULL) < 0) {
			comm_abort(p->env->world, "probe: allreduce failed");
		}
		if (it >= WARM)
			t[it - WARM] = v;
	}
	qsort(t, IT, sizeof *t, cmpd);
	return t[IT / 2];
}

/* Bandwidth from two sizes, latency what is left of the small one.  Bytes
 * are what a rank sends: p2p the message, collectives (g-1)/g of the
 * buffer; copies read and write. */
static void pmeasure(struct probe *p, struct comm *c, int op, const char *scope, const char *name)
{
	int g = c ? comm_size(c) : 2;
	size_t small = 4096 * (size_t)g, big = p->n;
	double f = c == NULL ? 2 : op == OP_P2P ? 1 : (double)(g - 1) / g;
	double ts = ptime(p, c, op, small), tb = ptime(p, c, op, big);
	double bw = f * (double)(big - small) / ((tb - ts) * 1e-3), lat = ts * 1e-3 - f * small / bw;

	if (!(tb > ts))
		bw = f * (double)big / (tb * 1e-3), lat = 0;
	if (lat < 0)
		lat = 0;
	if (comm_rank(p->env->world) == 0)
		printf("%s\t%s\t%.2f\t%.2f\t%d\n", scope, name, bw / 1e9, lat * 1e6, c ? g : 1);
}

int pred_probe(const struct cp_env *env, const char *device)
{
	struct probe p = { .env = env };
	struct comm *w = env->world, *node = NULL, *across = NULL;
	int me = comm_rank(w), n = comm_size(w), G = env->node_size > 0 ? env->node_size : n;
	char e[160];

	if (ops_init(&p.x, env->backend == COMM_NCCL, e, sizeof e) < 0)
		comm_abort(w, e);
	/* big enough that the latency is a small part: 64 MiB on GPUs */
	p.n = env->backend == COMM_NCCL ? (size_t)64 << 20 : (size_t)8 << 20;
	p.n -= p.n % ((size_t)n * 4096);
	p.sb = ops_alloc(&p.x, p.n);
	p.rb = ops_alloc(&p.x, p.n);
	p.db = ops_alloc(&p.x, sizeof(double));
	if (p.sb == NULL || p.rb == NULL || p.db == NULL)
		comm_abort(w, "probe: out of memory for the buffers");
	ops_zero(&p.x, p.sb, p.n, 0);
	if (comm_split(w, me / G, me % G, &node) < 0 || comm_split(w, me % G, me / G, &across) < 0)
		comm_abort(w, "probe: split failed");
	if (me == 0) {
		printf("# cpbench --probe-links: %d ranks, %d a node, %s, %s backend\n", n, G, device,
		       env->backend == COMM_NCCL ? "nccl" : "mpi");
		printf("scope\top\tgbps\tusec\tranks\n");
	}
	for (int op = 0; op < NOP; op++) {
		if (G > 1)
			pmeasure(&p, node, op, "intra", opname[op]);
		if (n / G > 1)
			pmeasure(&p, across, op, "inter", opname[op]);
	}
	pmeasure(&p, NULL, 0, "local", "copy");
	ops_sync(&p.x);
	comm_free(node);
	comm_free(across);
	ops_free(&p.x, p.sb);
	ops_free(&p.x, p.rb);
	ops_free(&p.x, p.db);
	ops_fini(&p.x);
	fflush(stdout);
	return 0;
}
