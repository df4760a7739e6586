/* naive: the baseline that materialises the scores, as the reference's
 * naive and SDPA-math baselines do.  Per batch and q-head: S = scale Q K^T
 * (cuBLAS, fp32 out), P = masked softmax(S) in the dtype, O = P V.
 * Backward: P again from S and lse, dV = P^T dO, dP = dO V^T,
 * dS = P o (dP - D), dQ = scale dS K, dK = scale dS^T Q.  The S x S
 * buffers of every head are allocated at once in init (fp32 S, dtype P:
 * 6 bytes a pair), so long sequences are an out-of-memory result, which is
 * the point of the baseline.  The mask is evaluated through the plan. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "dev.h"
#include "kernel.h"
#include "plan.h"
}

#define TILE 64
#define NT 512             /* threads per row in the softmax kernels */
#define ESZ 2              /* bytes of a bf16 or fp16 element */

struct naive {
	struct attn_shape s;
	int mheads, nqt;
	int32_t *row;              /* device copy of the plan */
	struct plan_ent *ent;
	struct plan_cut *cut;
	float *S;                  /* [batch*hq][sq][sk]: scores, then dP */
	void *P;                   /* [batch*hq][sq][sk]: P, then dS (dtype) */
	float *D;                  /* [batch][hq][sq] */
	float *dkf, *dvf;          /* [batch][sk][hkv][hd]: GQA sums in fp32 */
	cublasHandle_t blas;
};

static __device__ __forceinline__ float ld(const void *p, size_t i, int dt)
{
	return dt == DT_FP16 ? __half2float(((const __half *)p)[i])
	                     : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

static __device__ __forceinline__ void st(void *p, size_t i, float x, int dt)
{
	if (dt == DT_FP16)
		((__half *)p)[i] = __float2half_rn(x);
	else
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
}

static __device__ __forceinline__ int cut_allows(const struct plan_cut *c, long long q, long long k)
{
	if (q < c->q0 || q >= c->q1 || k < c->k0 || k >= c->k1)
		return 0;
	switch (c->kind) {
	case MASK_CAUSAL:    return k - q <= (long long)c->k1 - c->q1;
	case MASK_INVCAUSAL: return k - q >= (long long)c->k0 - c->q0;
	case MASK_BICAUSAL:  return k - q <= (long long)c->k1 - c->q1 && k - q >= (long long)c->k0 - c->q0;
	default:             return 1;
	}
}

static __device__ __forceinline__ int ent_allows(const struct plan_ent *e, const struct plan_cut *cut,
    long long q, long long k)
{
	for (int c = 0; c < e->ncut; c++)
		if (cut_allows(&cut[e->cut0 + c], q, k))
			return 1;
	return e->ncut == 0;
}

/* Block-wide (max, sum) merge of the online softmax statistics. */
static __device__ void reduce_ml(float &m, float &l)
{
	__shared__ float sm[NT / 32], sl[NT / 32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;

	for (int o = 16; o > 0; o >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
		float mx = fmaxf(m, m2);
		l = (mx == -INFINITY) ? 0.f : l * __expf(m - mx) + l2 * __expf(m2 - mx);
		m = mx;
	}
	if (lane == 0) {
		sm[w] = m;
		sl[w] = l;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		float M = -INFINITY, L = 0;
		for (int i = 0; i < NT / 32; i++) {
			float mx = fmaxf(M, sm[i]);
			L = (mx == -INFINITY) ? 0.f : L * __expf(M - mx) + sl[i] * __expf(sm[i] - mx);
			M = mx;
		}
		sm[0] = M;
		sl[0] = L;
	}
	__syncthreads();
	m = sm[0];
	l = sl[0];
	__syncthreads();
}

/* One block per (batch*hq, q row).  mode 0 (fwd): softmax of S into P and
 * lse.  mode 1 (bwd): P = exp(S - lse) from the given lse. */
__global__ void k_softmax(const float *S, void *P, float *lse, struct naive n, int mode)
{
	const struct attn_shape &s = n.s;
	long long bh = blockIdx.y, q = blockIdx.x;
	int h = (int)(bh % s.hq), mh = h / (s.hq / n.mheads);
	int r = mh * n.nqt + (int)(q / TILE);
	const float *srow = S + (bh * s.sq + q) * s.sk;
	size_t prow = (size_t)(bh * s.sq + q) * s.sk;
	float m = -INFINITY, l = 0, L;

	for (long long k = threadIdx.x; k < s.sk; k += NT)
		st(P, prow + k, 0.f, s.dtype);
	if (mode == 0) {
		for (int e = n.row[r]; e < n.row[r + 1]; e++) {
			const struct plan_ent *en = &n.ent[e];
			long long k0 = (long long)en->t0 * TILE, k1 = min((long long)en->t1 * TILE, (long long)s.sk);
			for (long long k = k0 + threadIdx.x; k < k1; k += NT) {
				float x;
				if (!ent_allows(en, n.cut, q, k))
					continue;
				x = srow[k];
				if (x > m) {
					l = l * __expf(m - x) + 1.f;
					m = x;
				} else {
					l += __expf(x - m);
				}
			}
		}
		reduce_ml(m, l);
		L = l > 0 ? m + logf(l) : -INFINITY;
		if (threadIdx.x == 0)
			lse[bh * s.sq + q] = L;
	} else {
		L = lse[bh * s.sq + q];
		__syncthreads();
	}
	__syncthreads();
	if (L == -INFINITY)
		return;
	for (int e = n.row[r]; e < n.row[r + 1]; e++) {
		const struct plan_ent *en = &n.ent[e];
		long long k0 = (long long)en->t0 * TILE, k1 = min((long long)en->t1 * TILE, (long long)s.sk);
		for (long long k = k0 + threadIdx.x; k < k1; k += NT)
			if (ent_allows(en, n.cut, q, k))
				st(P, prow + k, __expf(srow[k] - L), s.dtype);
	}
}

/* dS = P o (dP - D), in place over P. */
__global__ void k_ds(void *P, const float *dP, const float *D, struct naive n)
{
	const struct attn_shape &s = n.s;
	long long bh = blockIdx.y, q = blockIdx.x;
	size_t row = (size_t)(bh * s.sq + q) * s.sk;
	float d = D[bh * s.sq + q];

	for (long long k = threadIdx.x; k < s.sk; k += NT) {
		float p = ld(P, row + k, s.dtype);
		st(P, row + k, p * (dP[row + k] - d), s.dtype);
	}
}

/* D = rowsum(dO o O): one warp per (batch, q, head) row. */
__global__ void k_rowdot(const void *o, const void *dout, float *D, struct naive n)
{
	const struct attn_shape &s = n.s;
	long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	int lane = threadIdx.x & 31;
	long long nrows = (long long)s.batch * s.sq * s.hq;
	float acc = 0;

	if (w >= nrows)
		return;
	for (int d = lane; d < s.hd; d += 32)
		acc += ld(o, w * s.hd + d, s.dtype) * ld(dout, w * s.hd + d, s.dtype);
	for (int x = 16; x > 0; x >>= 1)
		acc += __shfl_xor_sync(0xffffffffu, acc, x);
	if (lane == 0) {
		/* w = (b*sq + q)*hq + h  ->  D[b][h][q] */
		long long h = w % s.hq, q = w / s.hq % s.sq, b = w / s.hq / s.sq;
		D[(b * s.hq + h) * s.sq + q] = acc;
	}
}

__global__ void k_narrow(void *dst, const float *src, size_t count, float scale, int dt)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		st(dst, i, src[i] * scale, dt);
}

static void naive_fini(void *st);

static const char *naive_check(const struct attn_shape *s, const struct mask *m, int pass)
{
	(void)pass;
	if (s->hq % s->hkv != 0 || s->hq % m->heads != 0)
		return "heads do not divide";
	if (s->sq >= INT32_MAX || s->sk >= INT32_MAX)
		return "seqlen of 2^31 or more";
	if (s->sq > 65535 * 1024L || (long long)s->batch * s->hq > 65535)
		return "grid too large";
	return NULL;
}

static int up(void **d, const void *h, size_t n)
{
	if (dev_alloc(d, n ? n : 1) != 0)
		return KERN_OOM;
	if (n == 0)
		return KERN_OK;        /* an empty mask: nothing to copy */
	return cudaMemcpy(*d, h, n, cudaMemcpyHostToDevice) == cudaSuccess ? KERN_OK : KERN_ERR;
}

static int naive_init(void **stp, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct naive *n = (struct naive *)calloc(1, sizeof *n);
	struct plan p;
	size_t pairs = (size_t)s->batch * s->hq * s->sq * s->sk;
	size_t kvn = (size_t)s->batch * s->sk * s->hkv * s->hd;
	int rc;

	*stp = NULL;
	if (n == NULL)
		return KERN_OOM;
	n->s = *s;
	n->mheads = m->heads;
	if (plan_build(&p, m, TILE, TILE, err, errlen) != 0) {
		free(n);
		return KERN_ERR;
	}
	n->nqt = p.nqt;
	if ((rc = up((void **)&n->row, p.row, (p.nrows + 1) * sizeof *p.row)) != KERN_OK ||
	    (rc = up((void **)&n->ent, p.ent, p.nent * sizeof *p.ent)) != KERN_OK ||
	    (rc = up((void **)&n->cut, p.cut, p.ncut * sizeof *p.cut)) != KERN_OK)
		goto fail;
	rc = KERN_OOM;
	if (dev_alloc((void **)&n->S, pairs * sizeof(float)) != 0 ||
	    dev_alloc(&n->P, pairs * ESZ) != 0 ||
	    dev_alloc((void **)&n->D, (size_t)s->batch * s->hq * s->sq * sizeof(float)) != 0 ||
	    dev_alloc((void **)&n->dkf, kvn * sizeof(float)) != 0 ||
	    dev_alloc((void **)&n->dvf, kvn * sizeof(float)) != 0)
		goto fail;
	if (cublasCreate(&n->blas) != CUBLAS_STATUS_SUCCESS) {
		n->blas = NULL;
		snprintf(err, errlen, "cublasCreate failed");
		rc = KERN_OOM;
		goto fail;
	}
	plan_free(&p);
	*stp = n;
	return KERN_OK;
fail:
	if (rc == KERN_ERR)
		snprintf(err, errlen, "plan upload: %s", cudaGetErrorString(cudaGetLastError()));
	plan_free(&p);
	naive_fini(n);
	return rc;
}

static void naive_fini(void *stp)
{
	struct naive *n = (struct naive *)stp;

	if (n == NULL)
		return;
	if (n->blas != NULL)
		cublasDestroy(n->blas);
	dev_free(n->row);
	dev_free(n->ent);
	dev_free(n->cut);
	dev_free(n->S);
	dev_free(n->P);
	dev_free(n->D);
	dev_free(n->dkf);
	dev_free(n->dvf);
	free(n);
}

static cudaDataType_t ctype(const struct naive *n)
{
	return n->s.dtype == DT_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* One strided batched GEMM per member g of a GQA group, batched over the kv
 * heads: q-head h = j*group + g reads kv-head j, so every pointer in the
 * batch has a constant stride.  A is the kv-side matrix (ld hkv*hd, stride
 * hd), B the q-side (ld hq*hd, stride group*hd), C the per-head S x S
 * buffer (stride group*sq*sk) or a kv-side output.  Column-major, as
 * cuBLAS sees our row-major arrays. */
struct gemm {
	cublasOperation_t ta, tb;
	int m, nn, k;
	float alpha, beta;
	const void *A; cudaDataType_t at; int lda; long long sa;
	const void *B; cudaDataType_t bt; int ldb; long long sb;
	void *C; cudaDataType_t ct; int ldc; long long sc;
	int count;
};

static int gemm(const struct naive *n, const struct gemm *g)
{
	cublasStatus_t e = cublasGemmStridedBatchedEx(n->blas, g->ta, g->tb, g->m, g->nn, g->k,
	    &g->alpha, g->A, g->at, g->lda, g->sa, g->B, g->bt, g->ldb, g->sb,
	    &g->beta, g->C, g->ct, g->ldc, g->sc, g->count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return e == CUBLAS_STATUS_SUCCESS ? KERN_OK : KERN_ERR;
}

/* S (or dP) = alpha X Y^T for q-side X = Q or dO and kv-side Y = K or V. */
static int scores(const struct naive *n, int b, int g, const void *x, const void *y, float *out, float alpha)
{
	const struct attn_shape &s = n->s;
	int group = s.hq / s.hkv;
	struct gemm G;

	G.ta = CUBLAS_OP_T; G.tb = CUBLAS_OP_N;
	G.m = (int)s.sk; G.nn = (int)s.sq; G.k = s.hd;
	G.alpha = alpha; G.beta = 0;
	G.A = (const char *)y + ((size_t)b * s.sk * s.hkv * s.hd) * ESZ;
	G.at = ctype(n); G.lda = s.hkv * s.hd; G.sa = s.hd;
	G.B = (const char *)x + ((size_t)b * s.sq * s.hq * s.hd + (size_t)g * s.hd) * ESZ;
	G.bt = ctype(n); G.ldb = s.hq * s.hd; G.sb = (long long)group * s.hd;
	G.C = out + ((size_t)b * s.hq + g) * s.sq * s.sk;
	G.ct = CUDA_R_32F; G.ldc = (int)s.sk; G.sc = (long long)group * s.sq * s.sk;
	G.count = s.hkv;
	return gemm(n, &G);
}

/* out(q-side) = alpha M Y, M the dtype S x S buffer (P or dS), Y = V or K. */
static int rowmul(const struct naive *n, int b, int g, const void *y, void *out, float alpha)
{
	const struct attn_shape &s = n->s;
	int group = s.hq / s.hkv;
	struct gemm G;

	G.ta = CUBLAS_OP_N; G.tb = CUBLAS_OP_N;
	G.m = s.hd; G.nn = (int)s.sq; G.k = (int)s.sk;
	G.alpha = alpha; G.beta = 0;
	G.A = (const char *)y + ((size_t)b * s.sk * s.hkv * s.hd) * ESZ;
	G.at = ctype(n); G.lda = s.hkv * s.hd; G.sa = s.hd;
	G.B = (const char *)n->P + ((size_t)b * s.hq + g) * s.sq * s.sk * ESZ;
	G.bt = ctype(n); G.ldb = (int)s.sk; G.sb = (long long)group * s.sq * s.sk;
	G.C = (char *)out + ((size_t)b * s.sq * s.hq * s.hd + (size_t)g * s.hd) * ESZ;
	G.ct = ctype(n); G.ldc = s.hq * s.hd; G.sc = (long long)group * s.hd;
	G.count = s.hkv;
	return gemm(n, &G);
}

/* out(kv-side, fp32) (+)= alpha M^T X, X = dO or Q: the group sum. */
static int colmul(const struct naive *n, int b, int g, const void *x, float *out, float alpha)
{
	const struct attn_shape &s = n->s;
	int group = s.hq / s.hkv;
	struct gemm G;

	G.ta = CUBLAS_OP_N; G.tb = CUBLAS_OP_T;
	G.m = s.hd; G.nn = (int)s.sk; G.k = (int)s.sq;
	G.alpha = alpha; G.beta = g > 0 ? 1.f : 0.f;
	G.A = (const char *)x + ((size_t)b * s.sq * s.hq * s.hd + (size_t)g * s.hd) * ESZ;
	G.at = ctype(n); G.lda = s.hq * s.hd; G.sa = (long long)group * s.hd;
	G.B = (const char *)n->P + ((size_t)b * s.hq + g) * s.sq * s.sk * ESZ;
	G.bt = ctype(n); G.ldb = (int)s.sk; G.sb = (long long)group * s.sq * s.sk;
	G.C = out + (size_t)b * s.sk * s.hkv * s.hd;
	G.ct = CUDA_R_32F; G.ldc = s.hkv * s.hd; G.sc = s.hd;
	G.count = s.hkv;
	return gemm(n, &G);
}

static int done(void)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaErrorMemoryAllocation)
		return KERN_OOM;
	return e == cudaSuccess ? KERN_OK : KERN_ERR;
}

static int naive_fwd(void *stp, const struct attn_io *io)
{
	struct naive *n = (struct naive *)stp;
	const struct attn_shape &s = n->s;
	cudaStream_t str = (cudaStream_t)io->stream;
	int group = s.hq / s.hkv, rc;
	dim3 grid((unsigned)s.sq, (unsigned)(s.batch * s.hq));

	cublasSetStream(n->blas, str);
	for (int b = 0; b < s.batch; b++)
		for (int g = 0; g < group; g++)
			if ((rc = scores(n, b, g, io->q, io->k, n->S, (float)s.scale)) != KERN_OK)
				return rc;
	k_softmax<<<grid, NT, 0, str>>>(n->S, n->P, io->lse, *n, 0);
	for (int b = 0; b < s.batch; b++)
		for (int g = 0; g < group; g++)
			if ((rc = rowmul(n, b, g, io->v, io->o, 1.f)) != KERN_OK)
				return rc;
	return done();
}

static int naive_bwd(void *stp, const struct attn_io *io)
{
	struct naive *n = (struct naive *)stp;
	const struct attn_shape &s = n->s;
	cudaStream_t str = (cudaStream_t)io->stream;
	int group = s.hq / s.hkv, rc;
	size_t kvn = (size_t)s.batch * s.sk * s.hkv * s.hd;
	long long rows = (long long)s.batch * s.sq * s.hq;
	dim3 grid((unsigned)s.sq, (unsigned)(s.batch * s.hq));

	cublasSetStream(n->blas, str);
	for (int b = 0; b < s.batch; b++)
		for (int g = 0; g < group; g++)
			if ((rc = scores(n, b, g, io->q, io->k, n->S, (float)s.scale)) != KERN_OK)
				return rc;
	k_softmax<<<grid, NT, 0, str>>>(n->S, n->P, io->lse, *n, 1);
	k_rowdot<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, str>>>(io->o, io->dout, n->D, *n);
	for (int b = 0; b < s.batch; b++)
		for (int g = 0; g < group; g++) {
			if ((rc = colmul(n, b, g, io->dout, n->dvf, 1.f)) != KERN_OK ||
			    (rc = scores(n, b, g, io->dout, io->v, n->S, 1.f)) != KERN_OK)
				return rc;
		}
	k_ds<<<grid, NT, 0, str>>>(n->P, n->S, n->D, *n);
	for (int b = 0; b < s.batch; b++)
		for (int g = 0; g < group; g++) {
			if ((rc = rowmul(n, b, g, io->k, io->dq, (float)s.scale)) != KERN_OK ||
			    (rc = colmul(n, b, g, io->q, n->dkf, (float)s.scale)) != KERN_OK)
				return rc;
		}
	k_narrow<<<1024, 256, 0, str>>>(io->dk, n->dkf, kvn, 1.f, s.dtype);
	k_narrow<<<1024, 256, 0, str>>>(io->dv, n->dvf, kvn, 1.f, s.dtype);
	return done();
}

extern "C" const struct kern_ops kern_naive;
const struct kern_ops kern_naive = {
	"naive",
	"cuBLAS GEMMs and a masked softmax over materialised SxS scores (6 B a pair, all heads)",
	KC_GPU | KC_FWD | KC_BWD | KC_BF16 | KC_FP16 | KC_GQA | KC_SLICES | KC_BLOCKS,
	NULL,
	naive_check,
	naive_init,
	naive_fwd,
	naive_bwd,
	naive_fini,
};
