/* Standalone GPU check of kernels/cudnn.c, independent of kbench: builds
 * masks by hand, runs fwd and bwd against an fp64 host reference computed
 * from its own mask predicate (not from the slices), then times full and
 * causal at long lengths.  Built and run by tests/gpu/cudnn.sh.
 *
 *   cudnn_try check        correctness matrix, exit 1 on any failure
 *   cudnn_try time S...    fwd/bwd timings, heads 64:8, hd 128, bf16
 */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "half.h"
#include "kernel.h"
#include "mask.h"

extern const struct kern_ops kern_cudnn;

enum { M_FULL, M_CAUSAL, M_SW, M_SWC, M_FDOC, M_CDOC, M_CPBAND };
static const char *mname[] = { "full", "causal", "sliding_window", "sliding_window_causal",
	"full_document", "causal_document", "cp_band" };
#define W 40
static const int64_t docs[] = { 0, 100, 128, 200 };   /* + sq at the end */

static int64_t qoff;       /* M_CPBAND: global offset of the q range */

static int
allowed(int kind, int64_t sq, int64_t q, int64_t k)
{
	int64_t dq = -1, dk = -1;
	size_t i;

	switch (kind) {
	case M_FULL: return 1;
	case M_CAUSAL: return k <= q;
	case M_SW: return llabs(q - k) <= W;
	case M_SWC: return q - k >= 0 && q - k <= W;
	case M_CPBAND: return k <= q + qoff;
	default:
		for (i = 0; i < sizeof docs / sizeof docs[0]; i++) {
			if (q >= docs[i])
				dq = (int64_t)i;
			if (k >= docs[i])
				dk = (int64_t)i;
		}
		(void)sq;
		return dq == dk && (kind == M_FDOC || k <= q);
	}
}

static void
add(struct mask *m, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int kind)
{
	if (m->nslices == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->slices = realloc(m->slices, m->cap * sizeof *m->slices);
	}
	m->slices[m->nslices++] = (struct mask_slice){ q0, q1, k0, k1, kind };
}

static void
build(struct mask *m, int kind, int64_t sq, int64_t sk)
{
	int64_t q, k, n = sizeof docs / sizeof docs[0];
	size_t i;

	memset(m, 0, sizeof *m);
	m->sq = sq;
	m->sk = sk;
	m->body = MASK_BODY_SLICES;
	m->heads = 1;
	snprintf(m->pattern, sizeof m->pattern, "%s", mname[kind]);
	switch (kind) {
	case M_FULL: add(m, 0, sq, 0, sk, MASK_FULL); break;
	case M_CAUSAL: case M_CPBAND: add(m, 0, sq, 0, sk, MASK_CAUSAL); break;
	case M_SW:
		for (q = 0; q < sq; q++)
			add(m, q, q + 1, q - W > 0 ? q - W : 0, q + W + 1 < sk ? q + W + 1 : sk, MASK_FULL);
		break;
	case M_SWC:
		for (q = 0; q < sq; q++)
			add(m, q, q + 1, q - W > 0 ? q - W : 0, q + 1, MASK_FULL);
		break;
	default:
		for (i = 0; i < (size_t)n; i++) {
			int64_t a = docs[i], b = i + 1 < (size_t)n ? docs[i + 1] : sq;
			add(m, a, b, a, b, kind == M_FDOC ? MASK_FULL : MASK_CAUSAL);
		}
	}
	m->area = 0;
	for (q = 0; q < sq; q++)
		for (k = 0; k < sk; k++)
			m->area += (uint64_t)allowed(kind, sq, q, k);
}

static float
rnd(void)
{
	return (float)rand() / RAND_MAX * 3.4f - 1.7f;
}

static uint16_t
tohalf(int dt, float f)
{
	return dt == DT_BF16 ? half_to_bf16(f) : half_to_fp16(f);
}

static double
fromhalf(int dt, uint16_t h)
{
	return dt == DT_BF16 ? half_from_bf16(h) : half_from_fp16(h);
}

static void *
dput(const void *h, size_t n)
{
	void *d;

	if (dev_alloc(&d, n) != 0 || cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) {
		fprintf(stderr, "cudnn_try: device upload failed\n");
		exit(2);
	}
	return d;
}

static void *
dpoison(size_t n)
{
	void *d;

	if (dev_alloc(&d, n) != 0) {
		fprintf(stderr, "cudnn_try: out of device memory\n");
		exit(2);
	}
	cudaMemset(d, 0xff, n);    /* NaN in bf16, fp16 and fp32 */
	return d;
}

/* max |x - ref| / max |ref|; NaN fails */
static double
relerr(int dt, const uint16_t *x, const float *xf, const double *ref, size_t n)
{
	double e = 0, r = 0, v;
	size_t i;

	for (i = 0; i < n; i++) {
		v = x ? fromhalf(dt, x[i]) : xf[i];
		if (isnan(v))
			return INFINITY;
		if (fabs(v - ref[i]) > e)
			e = fabs(v - ref[i]);
		if (fabs(ref[i]) > r)
			r = fabs(ref[i]);
	}
	return r > 0 ? e / r : e;
}

static int
one(int kind, int dt, int B, int H, int G, int D, int64_t sq, int64_t sk)
{
	struct attn_shape s = { sq, sk, B, H, G, D, dt, 1.0 / sqrt((double)D), 0 };
	struct mask m;
	struct attn_io io = { 0 };
	size_t nq = (size_t)B * sq * H * D, nk = (size_t)B * sk * G * D, nl = (size_t)B * H * sq;
	uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *dout = malloc(nq * 2);
	uint16_t *o = malloc(nq * 2), *dq = malloc(nq * 2), *dk = malloc(nk * 2), *dv = malloc(nk * 2);
	float *lse = malloc(nl * 4);
	double *ro = calloc(nq, 8), *rl = calloc(nl, 8), *rdq = calloc(nq, 8), *rdk = calloc(nk, 8), *rdv = calloc(nk, 8);
	double *p = malloc((size_t)sk * 8), *dp = malloc((size_t)sk * 8);
	double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *dod = malloc(nq * 8);
	const char *why;
	char err[512] = "";
	void *st;
	size_t i;
	int b, h, rc, ok;
	int64_t qi, ki, d;
	double e[8];

	build(&m, kind, sq, sk);
	for (i = 0; i < nq; i++) { q[i] = tohalf(dt, rnd()); dout[i] = tohalf(dt, rnd()); }
	for (i = 0; i < nk; i++) { k[i] = tohalf(dt, rnd()); v[i] = tohalf(dt, rnd()); }
	for (i = 0; i < nq; i++) { qd[i] = fromhalf(dt, q[i]); dod[i] = fromhalf(dt, dout[i]); }
	for (i = 0; i < nk; i++) { kd[i] = fromhalf(dt, k[i]); vd[i] = fromhalf(dt, v[i]); }

	/* fp64 reference, straight from the predicate */
	for (b = 0; b < B; b++)
		for (h = 0; h < H; h++) {
			int g = h / (H / G);
			for (qi = 0; qi < sq; qi++) {
				const double *qr = qd + (((size_t)b * sq + qi) * H + h) * D;
				const double *dor = dod + (((size_t)b * sq + qi) * H + h) * D;
				double mx = -INFINITY, sum = 0, lse_, dsum = 0;
				for (ki = 0; ki < sk; ki++) {
					const double *kr = kd + (((size_t)b * sk + ki) * G + g) * D;
					double x = 0;
					if (!allowed(kind, sq, qi, ki)) { p[ki] = -INFINITY; continue; }
					for (d = 0; d < D; d++)
						x += qr[d] * kr[d];
					p[ki] = x * s.scale;
					if (p[ki] > mx)
						mx = p[ki];
				}
				for (ki = 0; ki < sk; ki++)
					sum += p[ki] == -INFINITY ? 0 : exp(p[ki] - mx);
				lse_ = mx + log(sum);
				rl[((size_t)b * H + h) * sq + qi] = lse_;
				for (ki = 0; ki < sk; ki++)
					p[ki] = p[ki] == -INFINITY ? 0 : exp(p[ki] - lse_);
				double *orow = ro + (((size_t)b * sq + qi) * H + h) * D;
				for (ki = 0; ki < sk; ki++) {
					const double *vr = vd + (((size_t)b * sk + ki) * G + g) * D;
					if (p[ki] == 0) { dp[ki] = 0; continue; }
					double x = 0;
					for (d = 0; d < D; d++) {
						orow[d] += p[ki] * vr[d];
						x += dor[d] * vr[d];
					}
					dp[ki] = x;
				}
				for (d = 0; d < D; d++)
					dsum += dor[d] * orow[d];
				double *dqr = rdq + (((size_t)b * sq + qi) * H + h) * D;
				for (ki = 0; ki < sk; ki++) {
					double ds;
					if (p[ki] == 0)
						continue;
					ds = p[ki] * (dp[ki] - dsum) * s.scale;
					const double *kr = kd + (((size_t)b * sk + ki) * G + g) * D;
					double *dkr = rdk + (((size_t)b * sk + ki) * G + g) * D;
					double *dvr = rdv + (((size_t)b * sk + ki) * G + g) * D;
					for (d = 0; d < D; d++) {
						dqr[d] += ds * kr[d];
						dkr[d] += ds * qr[d];
						dvr[d] += p[ki] * dor[d];
					}
				}
			}
		}

	if ((why = kern_cudnn.check(&s, &m, PASS_FWD | PASS_BWD)) != NULL) {
		printf("unsupported %s %s B%d %d:%d hd%d sq%lld sk%lld: %s\n", mname[kind],
		    dt == DT_BF16 ? "bf16" : "fp16", B, H, G, D, (long long)sq, (long long)sk, why);
		ok = 1;
		goto out;
	}
	io.q = dput(q, nq * 2); io.k = dput(k, nk * 2); io.v = dput(v, nk * 2);
	io.dout = dput(dout, nq * 2);
	io.o = dpoison(nq * 2); io.lse = dpoison(nl * 4);
	io.dq = dpoison(nq * 2); io.dk = dpoison(nk * 2); io.dv = dpoison(nk * 2);
	rc = kern_cudnn.init(&st, &s, &m, err, sizeof err);
	if (rc != KERN_OK) {
		printf("FAIL %s: init: %s\n", mname[kind], err);
		ok = 0;
		goto free_dev;
	}
	rc = kern_cudnn.fwd(st, &io);
	if (rc == KERN_OK)
		rc = kern_cudnn.bwd(st, &io);
	if (cudaDeviceSynchronize() != cudaSuccess)
		rc = KERN_ERR;
	kern_cudnn.fini(st);
	if (rc != KERN_OK) {
		printf("FAIL %s: run rc %d\n", mname[kind], rc);
		ok = 0;
		goto free_dev;
	}
	cudaMemcpy(o, io.o, nq * 2, cudaMemcpyDeviceToHost);
	cudaMemcpy(lse, io.lse, nl * 4, cudaMemcpyDeviceToHost);
	cudaMemcpy(dq, io.dq, nq * 2, cudaMemcpyDeviceToHost);
	cudaMemcpy(dk, io.dk, nk * 2, cudaMemcpyDeviceToHost);
	cudaMemcpy(dv, io.dv, nk * 2, cudaMemcpyDeviceToHost);
	e[0] = relerr(dt, o, NULL, ro, nq);
	e[1] = relerr(dt, NULL, lse, rl, nl);
	e[2] = relerr(dt, dq, NULL, rdq, nq);
	e[3] = relerr(dt, dk, NULL, rdk, nk);
	e[4] = relerr(dt, dv, NULL, rdv, nk);
	ok = e[0] <= 1e-2 && e[1] <= 1e-2 && e[2] <= 1e-2 && e[3] <= 1e-2 && e[4] <= 1e-2;
	printf("%s %s %s B%d %d:%d hd%d sq%lld sk%lld  o %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
	    ok ? "ok  " : "FAIL", mname[kind], dt == DT_BF16 ? "bf16" : "fp16", B, H, G, D,
	    (long long)sq, (long long)sk, e[0], e[1], e[2], e[3], e[4]);
free_dev:
	dev_free(io.q); dev_free(io.k); dev_free(io.v); dev_free(io.dout); dev_free(io.o);
	dev_free(io.lse); dev_free(io.dq); dev_free(io.dk); dev_free(io.dv);
out:
	free(q); free(k); free(v); free(dout); free(o); free(dq); free(dk); free(dv); free(lse);
	free(ro); free(rl); free(rdq); free(rdk); free(rdv); free(p); free(dp); free(qd); free(kd); free(vd); free(dod);
	free(m.slices);
	return ok;
}

static int
cmpf(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static void
timeit(int kind, int64_t S)
{
	struct attn_shape s = { S, S, 1, 64, 8, 128, DT_BF16, 1.0 / sqrt(128.0), 0 };
	struct mask m = { 0 };
	struct attn_io io = { 0 };
	size_t nq = (size_t)S * 64 * 128, nk = (size_t)S * 8 * 128, nl = (size_t)64 * S;
	double area = kind == M_FULL ? (double)S * S : (double)S * (S + 1) / 2, fl;
	char err[512] = "";
	cudaEvent_t e0, e1;
	void *st, *flush;
	float t[2][20];
	int pass, it, rc;

	m.sq = m.sk = S;
	m.body = MASK_BODY_SLICES;
	m.heads = 1;
	m.area = (uint64_t)area;
	add(&m, 0, S, 0, S, kind == M_FULL ? MASK_FULL : MASK_CAUSAL);
	io.q = dpoison(nq * 2); io.k = dpoison(nk * 2); io.v = dpoison(nk * 2);
	io.o = dpoison(nq * 2); io.lse = dpoison(nl * 4); io.dout = dpoison(nq * 2);
	io.dq = dpoison(nq * 2); io.dk = dpoison(nk * 2); io.dv = dpoison(nk * 2);
	/* small values, not NaN, for timing */
	cudaMemset(io.q, 0x3c, nq * 2); cudaMemset(io.k, 0x3c, nk * 2);
	cudaMemset(io.v, 0x3c, nk * 2); cudaMemset(io.dout, 0x3c, nq * 2);
	flush = dpoison(256 << 20);
	rc = kern_cudnn.init(&st, &s, &m, err, sizeof err);
	if (rc != KERN_OK) {
		printf("time %s %lld: init: %s\n", mname[kind], (long long)S, err);
		goto out;
	}
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (it = -3; it < 20; it++)
		for (pass = 0; pass < 2; pass++) {
			cudaMemset(flush, it & 0xff, 256 << 20);
			cudaEventRecord(e0, 0);
			rc = pass ? kern_cudnn.bwd(st, &io) : kern_cudnn.fwd(st, &io);
			cudaEventRecord(e1, 0);
			cudaEventSynchronize(e1);
			if (rc != KERN_OK) {
				printf("time %s %lld: run failed\n", mname[kind], (long long)S);
				goto fini;
			}
			if (it >= 0)
				cudaEventElapsedTime(&t[pass][it], e0, e1);
		}
	for (pass = 0; pass < 2; pass++) {
		qsort(t[pass], 20, sizeof t[pass][0], cmpf);
		fl = 4.0 * area * 64 * 128 * (pass ? 2.5 : 1.0);
		printf("cudnn-c\t%s\t%lld\t%s\t%.3f\t%.1f\n", mname[kind], (long long)S,
		    pass ? "bwd" : "fwd", t[pass][10], fl / (t[pass][10] * 1e-3) / 1e12);
	}
fini:
	kern_cudnn.fini(st);
out:
	dev_free(io.q); dev_free(io.k); dev_free(io.v); dev_free(io.o); dev_free(io.lse);
	dev_free(io.dout); dev_free(io.dq); dev_free(io.dk); dev_free(io.dv); dev_free(flush);
	free(m.slices);
}

int
main(int argc, char **argv)
{
	static const int kinds[] = { M_FULL, M_CAUSAL, M_SW, M_SWC, M_FDOC, M_CDOC };
	int nfail = 0, ntot = 0, dt, hd, gqa;
	size_t i;

	printf("cuDNN %zu (built with %d)\n", cudnnGetVersion(), CUDNN_VERSION);
	if (argc >= 2 && strcmp(argv[1], "time") == 0) {
		for (int a = 2; a < argc; a++) {
			timeit(M_FULL, atoll(argv[a]));
			timeit(M_CAUSAL, atoll(argv[a]));
		}
		return 0;
	}
	srand(7);
	for (dt = 0; dt < 2; dt++)
		for (hd = 64; hd <= 128; hd += 64)
			for (gqa = 0; gqa < 2; gqa++)
				for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
					ntot++;
					nfail += !one(kinds[i], dt ? DT_FP16 : DT_BF16, 2,
					    gqa ? 8 : 2, gqa ? 1 : 2, hd, 256, 256);
				}
	/* odd lengths, a CP piece with sq != sk */
	ntot += 3;
	nfail += !one(M_FULL, DT_BF16, 1, 8, 1, 128, 384, 384);
	nfail += !one(M_CAUSAL, DT_BF16, 1, 8, 1, 128, 200, 200);
	qoff = 256;
	nfail += !one(M_CPBAND, DT_BF16, 1, 8, 1, 128, 256, 512);
	printf("%d of %d cases failed\n", nfail, ntot);
	return nfail != 0;
}
