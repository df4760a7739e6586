/* kbench's "cudnn" kernel: NVIDIA cuDNN's fused flash attention, driven
 * through the backend (graph) API from C, without the C++ frontend.
 *
 * The graph is the composite one the frontend lowers SDPA to (matmul, scale,
 * masks built from index generators, softmax with stats, matmul, and the
 * matching backward); cuDNN's runtime fusion engine recognises it as flash
 * attention and runs its fused kernels (the same engines PyTorch's cuDNN
 * SDPA gets).  The single SDPA operation of cuDNN >= 9.13 takes no mask
 * before 9.21 and has no backward before 9.17, so it is only tried on
 * request (LONGATTN_CUDNN_OP=sdpa) for the full mask; on H200 with 9.19 its
 * backward graph does not finalize (CUDNN_STATUS_BAD_PARAM), and init says
 * so rather than substitute anything.
 *
 * Masks cuDNN can express exactly:
 *   a diagonal band  -lo <= k - q <= hi  (full, causal, sliding windows, and
 *       their CP pieces): a right bound and/or a left bound on the scores;
 *   documents: diagonal blocks, all full or all causal, tiling the sequence:
 *       every document becomes a batch entry of a ragged (packed) layout
 *       with a padding mask, so no work is spent off the blocks.
 * Everything else is `unsupported`. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "kernel.h"
#include "mask.h"

/* Deprecated in the 9.19 headers, still what 9.14 reads; by number so the
 * deprecation does not trip -Werror. */
#define ATTR_OPGRAPH_HANDLE ((cudnnBackendAttributeName_t)800)
#define ATTR_PLAN_HANDLE    ((cudnnBackendAttributeName_t)400)

enum { LAY_BAND, LAY_DOCS };

struct layout {
	int kind;
	int64_t lo, hi;          /* band: allowed iff -lo <= k - q <= hi */
	int right, left;         /* band: the bound excludes something */
	int causal;              /* docs: causal inside each document */
	int64_t ndocs, maxlen;
	int64_t *start;          /* docs: ndocs + 1 boundaries */
};

/* Band area over sq x sk, every row checked for a key on the way. */
static int
band_area(int64_t sq, int64_t sk, int64_t lo, int64_t hi, uint64_t *area)
{
	uint64_t a = 0;
	int64_t q, k0, k1;

	for (q = 0; q < sq; q++) {
		k0 = q - lo > 0 ? q - lo : 0;
		k1 = q + hi < sk - 1 ? q + hi : sk - 1;
		if (k1 < k0)
			return -1;
		a += (uint64_t)(k1 - k0 + 1);
	}
	*area = a;
	return 0;
}

/* Bounds of k - q over a slice's pairs: never narrower than the truth, so a
 * slice found inside a band is inside it. */
static void
slice_diag(const struct mask_slice *s, int64_t *dmin, int64_t *dmax)
{
	switch (s->kind) {
	case MASK_FULL:
		*dmin = s->k0 - (s->q1 - 1);
		*dmax = s->k1 - 1 - s->q0;
		break;
	case MASK_CAUSAL:
		*dmin = s->k0 - (s->q1 - 1);
		*dmax = s->k1 - s->q1;
		break;
	case MASK_INVCAUSAL:
		*dmin = s->k0 - s->q0;
		*dmax = s->k1 - 1 - s->q0;
		break;
	default:
		*dmin = s->k0 - s->q0;
		*dmax = s->k1 - s->q1;
		break;
	}
}

static int
is_docs(const struct mask *m, struct layout *l)
{
	size_t i;
	int kind;

	if (m->sq != m->sk || m->nslices < 2)
		return 0;
	kind = m->slices[0].kind;
	if (kind != MASK_FULL && kind != MASK_CAUSAL)
		return 0;
	for (i = 0; i < m->nslices; i++) {
		const struct mask_slice *s = &m->slices[i];
		int64_t at = i ? m->slices[i - 1].q1 : 0;
		if (s->kind != kind || s->q0 != at || s->k0 != at || s->q1 != s->k1)
			return 0;
	}
	if (m->slices[m->nslices - 1].q1 != m->sq)
		return 0;
	l->kind = LAY_DOCS;
	l->causal = kind == MASK_CAUSAL;
	l->ndocs = (int64_t)m->nslices;
	l->start = malloc((m->nslices + 1) * sizeof *l->start);
	if (l->start == NULL)
		return -1;
	l->maxlen = 0;
	for (i = 0; i < m->nslices; i++) {
		l->start[i] = m->slices[i].q0;
		if (m->slices[i].q1 - m->slices[i].q0 > l->maxlen)
			l->maxlen = m->slices[i].q1 - m->slices[i].q0;
	}
	l->start[m->nslices] = m->sq;
	return 1;
}

/* NULL if the mask is a layout cuDNN runs exactly (filled in), else why not. */
static const char *
analyse(const struct attn_shape *s, const struct mask *m, struct layout *l)
{
	int64_t dmin, dmax, a, b;
	uint64_t area;
	size_t i;
	int r;

	memset(l, 0, sizeof *l);
	if (m->body != MASK_BODY_SLICES)
		return "block-sparse masks are not expressible in cuDNN SDPA";
	if (m->nslices == 0)
		return "empty mask";
	if (m->sq != s->sq || m->sk != s->sk)
		return "mask and shape disagree";
	if ((r = is_docs(m, l)) < 0)
		return "out of memory";
	if (r > 0) {
		/* ragged offsets are int32 elements */
		if ((int64_t)s->batch * s->sq * s->hq * s->hd > INT32_MAX)
			return "documents: packed offsets beyond int32";
		if (cudnnGetVersion() < 91000)
			return "documents need cuDNN >= 9.10 (ragged dQ accumulator, padding with stats)";
		return NULL;
	}
	slice_diag(&m->slices[0], &dmin, &dmax);
	for (i = 1; i < m->nslices; i++) {
		slice_diag(&m->slices[i], &a, &b);
		if (a < dmin)
			dmin = a;
		if (b > dmax)
			dmax = b;
	}
	l->kind = LAY_BAND;
	l->lo = -dmin;
	l->hi = dmax;
	if (l->lo < -(s->sk - 1) || l->hi < 0 || l->lo + l->hi < 0 ||
	    band_area(s->sq, s->sk, l->lo, l->hi, &area) < 0)
		return "mask has rows without keys";
	if (area != m->area)
		return "mask is neither a diagonal band nor documents";
	l->right = l->hi < s->sk - 1;
	l->left = l->lo < s->sq - 1;
	if (l->left) {
		if (cudnnGetVersion() < 91002 && !l->right)
			return "sliding window without a right bound needs cuDNN >= 9.10.2";
		if (s->sq > s->sk)
			return "sliding window needs seqlen_q <= seqlen_k";
		/* cudnn-frontend's support surface: wrong results on 9.14.0 */
		if (cudnnGetVersion() == 91400 && s->sk > 1024 && l->hi != 0)
			return "cuDNN 9.14.0: non-causal sliding window with s_kv > 1024 is a known bug";
	}
	if ((l->left || l->hi != 0) && l->right && cudnnGetVersion() < 90600)
		return "shifted diagonal bands need cuDNN >= 9.6";
	return NULL;
}

static const char *
cudnn_check(const struct attn_shape *s, const struct mask *m, int pass)
{
	struct layout l;
	const char *why;

	(void)pass;
	if (s->dtype != DT_BF16 && s->dtype != DT_FP16)
		return "dtype";
	if (s->hd % 8 != 0 || s->hd > 256)
		return "head_dim must be a multiple of 8, at most 256";
	if (s->hkv <= 0 || s->hq % s->hkv != 0)
		return "heads_q must be a multiple of heads_kv";
	if (m->heads != 1)
		return "per-head masks";
	why = analyse(s, m, &l);
	free(l.start);
	return why;
}

/* ---- graph building ------------------------------------------------------ */

#define MAXD   512
#define MAXVP  40

/* Unique ids of the tensors that the variant pack binds. */
enum {
	U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV,
	U_SCALE, U_ONE, U_LOWEST, U_SWA, U_RIGHT, U_LEFT,
	U_SEQQ, U_SEQKV, U_ROFF_Q, U_ROFF_K, U_ROFF_S,
	U_SUM, U_DQACC, U_VIRT = 100
};

struct gb {
	cudnnHandle_t h;
	cudnnBackendDescriptor_t d[MAXD];
	int nd;
	cudnnBackendDescriptor_t ops[64];
	int nops;
	int64_t vuid;
	cudnnDataType_t io;
	const char *fail;          /* first failing call, NULL while fine */
	cudnnStatus_t st;
};

static cudnnBackendDescriptor_t
mk(struct gb *g, cudnnBackendDescriptorType_t t)
{
	cudnnBackendDescriptor_t d = NULL;
	cudnnStatus_t st;

	if (g->fail)
		return NULL;
	if (g->nd == MAXD) {
		g->fail = "too many descriptors";
		g->st = CUDNN_STATUS_INTERNAL_ERROR;
		return NULL;
	}
	if ((st = cudnnBackendCreateDescriptor(t, &d)) != CUDNN_STATUS_SUCCESS) {
		g->fail = "cudnnBackendCreateDescriptor";
		g->st = st;
		return NULL;
	}
	return g->d[g->nd++] = d;
}

static void
set(struct gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
    cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what)
{
	cudnnStatus_t st;

	if (g->fail)
		return;
	if ((st = cudnnBackendSetAttribute(d, a, t, n, v)) != CUDNN_STATUS_SUCCESS) {
		g->fail = what;
		g->st = st;
	}
}

static void
fin(struct gb *g, cudnnBackendDescriptor_t d, const char *what)
{
	cudnnStatus_t st;

	if (g->fail)
		return;
	if ((st = cudnnBackendFinalize(d)) != CUDNN_STATUS_SUCCESS) {
		g->fail = what;
		g->st = st;
	}
}

static void
setd(struct gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
     cudnnBackendDescriptor_t v, const char *what)
{
	set(g, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
}

/* A tensor; uid 0 makes a virtual one with a fresh id. */
static cudnnBackendDescriptor_t
tens(struct gb *g, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
     const int64_t str[4], int byval, cudnnBackendDescriptor_t ragged)
{
	cudnnBackendDescriptor_t t = mk(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t align = 16;
	bool virt = uid == 0, bv = byval != 0;

	if (virt)
		uid = g->vuid++;
	set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
	set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor dtype");
	set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dims");
	set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
	set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
	set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
	if (bv)
		set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv, "tensor by value");
	if (ragged)
		setd(g, t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged, "tensor ragged offset");
	fin(g, t, "cudnnBackendFinalize(tensor)");
	return t;
}

static cudnnBackendDescriptor_t
scalar(struct gb *g, int64_t uid, cudnnDataType_t dt)
{
	static const int64_t one[4] = { 1, 1, 1, 1 };

	return tens(g, uid, dt, one, one, 1, NULL);
}

/* A virtual tensor shaped like another, of type dt. */
static cudnnBackendDescriptor_t
like(struct gb *g, cudnnDataType_t dt, const int64_t dim[4], const int64_t str[4])
{
	return tens(g, 0, dt, dim, str, 0, NULL);
}

static void
addop(struct gb *g, cudnnBackendDescriptor_t op)
{
	if (g->fail)
		return;
	if (g->nops == (int)(sizeof g->ops / sizeof g->ops[0])) {
		g->fail = "too many operations";
		g->st = CUDNN_STATUS_INTERNAL_ERROR;
		return;
	}
	g->ops[g->nops++] = op;
}

/* y = mode(x, b, t); b, t may be NULL; axis < 0 for none. */
static void
pw(struct gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
   cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t p = mk(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
	cudnnBackendDescriptor_t op;

	set(g, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
	set(g, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
	if (axis >= 0)
		set(g, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
	fin(g, p, "cudnnBackendFinalize(pointwise)");
	op = mk(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	setd(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p, "pointwise op");
	setd(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
	if (b)
		setd(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
	if (t)
		setd(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
	setd(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
	fin(g, op, "cudnnBackendFinalize(pointwise operation)");
	addop(g, op);
}

/* c = a @ b, with per-batch m/n/k overrides (padding) where given. */
static void
mm(struct gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
   cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t mo,
   cudnnBackendDescriptor_t no, cudnnBackendDescriptor_t ko)
{
	cudnnBackendDescriptor_t md = mk(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
	cudnnBackendDescriptor_t op;
	cudnnDataType_t f = CUDNN_DATA_FLOAT;

	set(g, md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul compute type");
	fin(g, md, "cudnnBackendFinalize(matmul)");
	op = mk(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
	setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
	setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
	setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
	setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md, "matmul desc");
	if (mo)
		setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, mo, "matmul m override");
	if (no)
		setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, no, "matmul n override");
	if (ko)
		setd(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, ko, "matmul k override");
	fin(g, op, "cudnnBackendFinalize(matmul operation)");
	addop(g, op);
}

static void
red(struct gb *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
    cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t rd = mk(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
	cudnnBackendDescriptor_t op;
	cudnnDataType_t f = CUDNN_DATA_FLOAT;

	set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, "reduction operator");
	set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "reduction compute type");
	fin(g, rd, "cudnnBackendFinalize(reduction)");
	op = mk(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
	setd(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
	setd(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
	setd(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, "reduction desc");
	fin(g, op, "cudnnBackendFinalize(reduction operation)");
	addop(g, op);
}

static void
reshape(struct gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t op = mk(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);

	setd(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
	setd(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
	fin(g, op, "cudnnBackendFinalize(reshape operation)");
	addop(g, op);
}

/* ---- the kernel's state ---------------------------------------------------- */

struct plan {
	cudnnBackendDescriptor_t plan;
	void *ws;
	int64_t wsize;
	int64_t uid[MAXVP];
	int nuid;
};

struct st {
	cudnnHandle_t h;
	struct attn_shape s;
	struct layout l;
	int pad;                 /* padding mask with per-entry lengths */
	int sdpa_op;             /* the single fused SDPA operations */
	int64_t B, Sq, Sk;       /* cuDNN's batch and (maximum) lengths */
	float scale, one, lowest, swa, left;
	int32_t right;
	int32_t *seqq, *seqkv, *roff_q, *roff_k, *roff_s;   /* device */
	float *sum, *dqacc;      /* bwd workspace tensors (device) */
	struct gb g[2];
	struct plan p[2];
};

static void
tensor_dims(const struct st *S, int64_t seq, int64_t heads, int tr,
	    int64_t dim[4], int64_t str[4])
{
	int64_t D = S->s.hd;

	/* BSHD: cuDNN's dims are always [b, h, s, d]; tr gives [b, h, d, s] */
	dim[0] = S->B;
	dim[1] = heads;
	str[0] = seq * heads * D;
	str[1] = D;
	if (!tr) {
		dim[2] = seq;  dim[3] = D;
		str[2] = heads * D;  str[3] = 1;
	} else {
		dim[2] = D;  dim[3] = seq;
		str[2] = 1;  str[3] = heads * D;
	}
}

static void
rows(const struct st *S, int64_t dim[4], int64_t str[4])
{
	int64_t H = S->s.hq;

	dim[0] = S->B; dim[1] = H; dim[2] = S->Sq; dim[3] = 1;
	if (S->l.kind == LAY_DOCS) {
		/* kernel.h's [batch][hq][sq] seen through per-document offsets */
		str[0] = H * S->s.sq; str[1] = S->s.sq;
	} else {
		str[0] = H * S->Sq; str[1] = S->Sq;
	}
	str[2] = 1; str[3] = 1;
}

static void
scores(const struct st *S, int64_t dim[4], int64_t str[4])
{
	int64_t H = S->s.hq;

	dim[0] = S->B; dim[1] = H; dim[2] = S->Sq; dim[3] = S->Sk;
	str[0] = H * S->Sq * S->Sk; str[1] = S->Sq * S->Sk; str[2] = S->Sk; str[3] = 1;
}

/* The masks on the scores x, as the frontend builds them; returns the
 * masked scores. */
static cudnnBackendDescriptor_t
masks(struct gb *g, struct st *S, cudnnBackendDescriptor_t x,
      cudnnBackendDescriptor_t seqq, cudnnBackendDescriptor_t seqkv)
{
	int64_t dim[4], str[4];
	cudnnDataType_t F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, BO = CUDNN_DATA_BOOLEAN;
	cudnnBackendDescriptor_t r, c, a, b, y, lowest = NULL;
	int right = 0, left = 0;

	scores(S, dim, str);
	if (S->pad || (S->l.kind == LAY_BAND && S->l.right) ||
	    (S->l.kind == LAY_DOCS && S->l.causal))
		lowest = scalar(g, U_LOWEST, F);
	if (S->pad) {
		r = like(g, I, dim, str);
		c = like(g, I, dim, str);
		pw(g, CUDNN_POINTWISE_GEN_INDEX, I, 2, x, NULL, NULL, r);
		pw(g, CUDNN_POINTWISE_GEN_INDEX, I, 3, x, NULL, NULL, c);
		a = like(g, BO, dim, str);
		b = like(g, BO, dim, str);
		pw(g, CUDNN_POINTWISE_CMP_LT, BO, -1, r, seqq, NULL, a);
		pw(g, CUDNN_POINTWISE_CMP_LT, BO, -1, c, seqkv, NULL, b);
		y = like(g, BO, dim, str);
		pw(g, CUDNN_POINTWISE_LOGICAL_AND, BO, -1, a, b, NULL, y);
		a = like(g, F, dim, str);
		pw(g, CUDNN_POINTWISE_BINARY_SELECT, F, -1, x, lowest, y, a);
		x = a;
	}
	if (S->l.kind == LAY_DOCS) {
		right = S->l.causal;
	} else {
		right = S->l.right;
		left = S->l.left;
	}
	if (right) {
		r = like(g, I, dim, str);
		c = like(g, I, dim, str);
		pw(g, CUDNN_POINTWISE_GEN_INDEX, F, 2, x, NULL, NULL, r);
		pw(g, CUDNN_POINTWISE_GEN_INDEX, F, 3, x, NULL, NULL, c);
		if (S->l.kind == LAY_BAND && S->l.hi != 0) {
			a = like(g, I, dim, str);
			pw(g, CUDNN_POINTWISE_ADD, I, -1, r, scalar(g, U_RIGHT, I), NULL, a);
			r = a;
		}
		b = like(g, BO, dim, str);
		pw(g, CUDNN_POINTWISE_CMP_GE, BO, -1, r, c, NULL, b);
		a = like(g, F, dim, str);
		pw(g, CUDNN_POINTWISE_BINARY_SELECT, F, -1, x, lowest, b, a);
		x = a;
	}
	if (left) {
		r = like(g, F, dim, str);
		c = like(g, F, dim, str);
		pw(g, CUDNN_POINTWISE_GEN_INDEX, F, 2, x, NULL, NULL, r);
		pw(g, CUDNN_POINTWISE_GEN_INDEX, F, 3, x, NULL, NULL, c);
		a = like(g, F, dim, str);
		pw(g, CUDNN_POINTWISE_ADD, F, 3, c, scalar(g, U_LEFT, F), NULL, a);
		b = like(g, BO, dim, str);
		pw(g, CUDNN_POINTWISE_CMP_GT, BO, -1, a, r, NULL, b);
		a = like(g, F, dim, str);
		pw(g, CUDNN_POINTWISE_BINARY_SELECT, F, -1, x, scalar(g, U_SWA, F), b, a);
		x = a;
	}
	return x;
}

/* The tensors every graph shares; r* are the ragged offsets (or NULL). */
struct io_t {
	cudnnBackendDescriptor_t roq, rok, ros, seqq, seqkv, scale;
};

static void
common(struct gb *g, struct st *S, struct io_t *t)
{
	static const int64_t d1[4] = { 1, 1, 1, 1 };
	int64_t dim[4] = { S->B + 1, 1, 1, 1 }, sd[4] = { S->B, 1, 1, 1 };

	memset(t, 0, sizeof *t);
	if (S->l.kind == LAY_DOCS) {
		t->roq = tens(g, U_ROFF_Q, CUDNN_DATA_INT32, dim, d1, 0, NULL);
		t->rok = tens(g, U_ROFF_K, CUDNN_DATA_INT32, dim, d1, 0, NULL);
		t->ros = tens(g, U_ROFF_S, CUDNN_DATA_INT32, dim, d1, 0, NULL);
	}
	if (S->pad) {
		t->seqq = tens(g, U_SEQQ, CUDNN_DATA_INT32, sd, d1, 0, NULL);
		t->seqkv = tens(g, U_SEQKV, CUDNN_DATA_INT32, sd, d1, 0, NULL);
	}
	t->scale = scalar(g, U_SCALE, CUDNN_DATA_FLOAT);
}

static void
graph_fwd(struct gb *g, struct st *S)
{
	int64_t H = S->s.hq, G = S->s.hkv;
	int64_t dim[4], str[4], sdim[4], sstr[4], rdim[4], rstr[4];
	cudnnDataType_t F = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t q, kt, v, o, stats, s, x, m, e, sum, lg, p;
	struct io_t t;

	common(g, S, &t);
	tensor_dims(S, S->Sq, H, 0, dim, str);
	q = tens(g, U_Q, g->io, dim, str, 0, t.roq);
	o = tens(g, U_O, g->io, dim, str, 0, t.roq);
	tensor_dims(S, S->Sk, G, 1, dim, str);
	kt = tens(g, U_K, g->io, dim, str, 0, t.rok);
	tensor_dims(S, S->Sk, G, 0, dim, str);
	v = tens(g, U_V, g->io, dim, str, 0, t.rok);
	rows(S, rdim, rstr);
	stats = tens(g, U_STATS, F, rdim, rstr, 0, t.ros);

	scores(S, sdim, sstr);
	s = like(g, F, sdim, sstr);
	mm(g, q, kt, s, t.seqq, t.seqkv, NULL);
	x = like(g, F, sdim, sstr);
	pw(g, CUDNN_POINTWISE_MUL, F, -1, s, t.scale, NULL, x);
	x = masks(g, S, x, t.seqq, t.seqkv);

	/* softmax with stats: max, exp(x - max), sum, max + log(sum), divide */
	rstr[0] = H * S->Sq; rstr[1] = S->Sq;
	m = like(g, F, rdim, rstr);
	red(g, CUDNN_REDUCE_TENSOR_MAX, x, m);
	s = like(g, F, sdim, sstr);
	pw(g, CUDNN_POINTWISE_SUB, F, -1, x, m, NULL, s);
	e = like(g, F, sdim, sstr);
	pw(g, CUDNN_POINTWISE_EXP, F, -1, s, NULL, NULL, e);
	sum = like(g, F, rdim, rstr);
	red(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
	lg = like(g, F, rdim, rstr);
	pw(g, CUDNN_POINTWISE_LOG, F, -1, sum, NULL, NULL, lg);
	pw(g, CUDNN_POINTWISE_ADD, F, -1, m, lg, NULL, stats);
	p = like(g, g->io, sdim, sstr);
	pw(g, CUDNN_POINTWISE_DIV, F, -1, e, sum, NULL, p);
	mm(g, p, v, o, t.seqq, NULL, t.seqkv);
}

static void
graph_bwd(struct gb *g, struct st *S)
{
	int64_t H = S->s.hq, G = S->s.hkv, D = S->s.hd;
	int64_t dim[4], str[4], sdim[4], sstr[4], rdim[4], rstr[4];
	cudnnDataType_t F = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t q, kt, vt, o, dO, dq, dk, dv, stats, sum, dqacc;
	cudnnBackendDescriptor_t x, y, e, pt, dP, dS, dSt, k, full;
	struct io_t t;

	common(g, S, &t);
	tensor_dims(S, S->Sq, H, 0, dim, str);
	q = tens(g, U_Q, g->io, dim, str, 0, t.roq);
	o = tens(g, U_O, g->io, dim, str, 0, t.roq);
	dO = tens(g, U_DO, g->io, dim, str, 0, t.roq);
	dq = tens(g, U_DQ, g->io, dim, str, 0, t.roq);
	if (S->l.kind == LAY_DOCS) {
		/* packed like dQ: no padding in the fp32 accumulator */
		dqacc = tens(g, U_DQACC, F, dim, str, 0, t.roq);
	} else {
		int64_t ad[4] = { S->B, H, S->Sq, D };
		int64_t as[4] = { H * S->Sq * D, S->Sq * D, D, 1 };
		dqacc = tens(g, U_DQACC, F, ad, as, 0, NULL);
	}
	tensor_dims(S, S->Sk, G, 1, dim, str);
	kt = tens(g, U_K, g->io, dim, str, 0, t.rok);
	vt = tens(g, U_V, g->io, dim, str, 0, t.rok);
	tensor_dims(S, S->Sk, G, 0, dim, str);
	dk = tens(g, U_DK, g->io, dim, str, 0, t.rok);
	dv = tens(g, U_DV, g->io, dim, str, 0, t.rok);
	k = tens(g, 0, g->io, dim, str, 0, t.rok);
	rows(S, rdim, rstr);
	stats = tens(g, U_STATS, F, rdim, rstr, 0, t.ros);
	sum = tens(g, U_SUM, F, rdim, rstr, 0, t.ros);
	scores(S, sdim, sstr);

	/* softmax_sum = rowsum(dO * O) */
	{
		int64_t md[4] = { S->B, H, S->Sq, D };
		int64_t ms[4] = { H * S->Sq * D, S->Sq * D, H * D, 1 };
		int64_t vs[4] = { H * S->Sq, S->Sq, 1, 1 };
		x = like(g, F, md, ms);
		pw(g, CUDNN_POINTWISE_MUL, F, -1, dO, o, NULL, x);
		y = like(g, F, rdim, vs);
		red(g, CUDNN_REDUCE_TENSOR_ADD, x, y);
		pw(g, CUDNN_POINTWISE_MUL, F, -1, y, scalar(g, U_ONE, F), NULL, sum);
	}

	/* P = exp(scale * Q K^T - stats), masked */
	x = like(g, F, sdim, sstr);
	mm(g, q, kt, x, t.seqq, t.seqkv, NULL);
	y = like(g, F, sdim, sstr);
	pw(g, CUDNN_POINTWISE_MUL, F, -1, x, t.scale, NULL, y);
	x = like(g, F, sdim, sstr);
	pw(g, CUDNN_POINTWISE_SUB, F, -1, y, stats, NULL, x);
	x = masks(g, S, x, t.seqq, t.seqkv);
	e = like(g, F, sdim, sstr);
	pw(g, CUDNN_POINTWISE_EXP, F, -1, x, NULL, NULL, e);

	/* dV = P^T dO, summed over the query heads of a group */
	{
		int64_t td[4] = { S->B, H, S->Sk, S->Sq };
		int64_t ts[4] = { H * S->Sq * S->Sk, S->Sq * S->Sk, 1, S->Sk };
		int64_t fd[4] = { S->B, H, S->Sk, D };
		int64_t fs[4] = { H * S->Sk * D, S->Sk * D, D, 1 };

		pt = like(g, g->io, td, ts);
		reshape(g, e, pt);
		if (H == G) {
			mm(g, pt, dO, dv, t.seqkv, NULL, t.seqq);
		} else {
			full = like(g, g->io, fd, fs);
			mm(g, pt, dO, full, t.seqkv, NULL, t.seqq);
			red(g, CUDNN_REDUCE_TENSOR_ADD, full, dv);
		}

		/* dS = scale * P * (dO V^T - softmax_sum) */
		dP = like(g, F, sdim, sstr);
		mm(g, dO, vt, dP, t.seqq, t.seqkv, NULL);
		x = like(g, F, sdim, sstr);
		pw(g, CUDNN_POINTWISE_SUB, F, -1, dP, sum, NULL, x);
		y = like(g, F, sdim, sstr);
		pw(g, CUDNN_POINTWISE_MUL, F, -1, x, e, NULL, y);
		dS = like(g, F, sdim, sstr);
		pw(g, CUDNN_POINTWISE_MUL, F, -1, y, t.scale, NULL, dS);

		/* dK = dS^T Q, summed over the group */
		dSt = like(g, g->io, td, ts);
		reshape(g, dS, dSt);
		if (H == G) {
			mm(g, dSt, q, dk, t.seqkv, NULL, t.seqq);
		} else {
			full = like(g, g->io, fd, fs);
			mm(g, dSt, q, full, t.seqkv, NULL, t.seqq);
			red(g, CUDNN_REDUCE_TENSOR_ADD, full, dk);
		}
	}

	/* dQ = dS K, accumulated in fp32 */
	reshape(g, kt, k);
	mm(g, dS, k, dqacc, t.seqq, NULL, t.seqkv);
	pw(g, CUDNN_POINTWISE_IDENTITY, F, -1, dqacc, NULL, NULL, dq);
}

#if CUDNN_VERSION >= 91301
static void
graph_sdpa_fwd(struct gb *g, struct st *S)
{
	int64_t dim[4], str[4], rdim[4], rstr[4];
	cudnnBackendDescriptor_t q, k, v, o, stats, sc, op;

	tensor_dims(S, S->Sq, S->s.hq, 0, dim, str);
	q = tens(g, U_Q, g->io, dim, str, 0, NULL);
	o = tens(g, U_O, g->io, dim, str, 0, NULL);
	tensor_dims(S, S->Sk, S->s.hkv, 0, dim, str);
	k = tens(g, U_K, g->io, dim, str, 0, NULL);
	v = tens(g, U_V, g->io, dim, str, 0, NULL);
	rows(S, rdim, rstr);
	stats = tens(g, U_STATS, CUDNN_DATA_FLOAT, rdim, rstr, 0, NULL);
	sc = scalar(g, U_SCALE, CUDNN_DATA_FLOAT);
	op = mk(g, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q, "sdpa fwd q");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k, "sdpa fwd k");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v, "sdpa fwd v");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o, "sdpa fwd o");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, stats, "sdpa fwd stats");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, sc, "sdpa fwd scale");
	fin(g, op, "cudnnBackendFinalize(SDPA_FWD operation)");
	addop(g, op);
}
#endif

#if CUDNN_VERSION >= 91700
static void
graph_sdpa_bwd(struct gb *g, struct st *S)
{
	int64_t dim[4], str[4], rdim[4], rstr[4];
	cudnnBackendDescriptor_t t[10], op;

	tensor_dims(S, S->Sq, S->s.hq, 0, dim, str);
	t[0] = tens(g, U_Q, g->io, dim, str, 0, NULL);
	t[1] = tens(g, U_O, g->io, dim, str, 0, NULL);
	t[2] = tens(g, U_DO, g->io, dim, str, 0, NULL);
	t[3] = tens(g, U_DQ, g->io, dim, str, 0, NULL);
	tensor_dims(S, S->Sk, S->s.hkv, 0, dim, str);
	t[4] = tens(g, U_K, g->io, dim, str, 0, NULL);
	t[5] = tens(g, U_V, g->io, dim, str, 0, NULL);
	t[6] = tens(g, U_DK, g->io, dim, str, 0, NULL);
	t[7] = tens(g, U_DV, g->io, dim, str, 0, NULL);
	rows(S, rdim, rstr);
	t[8] = tens(g, U_STATS, CUDNN_DATA_FLOAT, rdim, rstr, 0, NULL);
	t[9] = scalar(g, U_SCALE, CUDNN_DATA_FLOAT);
	op = mk(g, CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR);
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, t[0], "sdpa bwd q");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, t[1], "sdpa bwd o");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, t[2], "sdpa bwd do");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, t[3], "sdpa bwd dq");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, t[4], "sdpa bwd k");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, t[5], "sdpa bwd v");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, t[6], "sdpa bwd dk");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, t[7], "sdpa bwd dv");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, t[8], "sdpa bwd stats");
	setd(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, t[9], "sdpa bwd scale");
	fin(g, op, "cudnnBackendFinalize(SDPA_BWD operation)");
	addop(g, op);
}
#endif

/* Operation graph -> heuristics (mode A) -> the first engine config whose
 * plan finalizes. */
static void
make_plan(struct gb *g, struct plan *p)
{
	cudnnBackendDescriptor_t og, heur, cfg[16];
	cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
	int64_t n = 0, i;
	cudnnStatus_t st = CUDNN_STATUS_SUCCESS;

	og = mk(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	set(g, og, ATTR_OPGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->h, "graph handle");
	set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops, "graph ops");
	fin(g, og, "cudnnBackendFinalize(operation graph)");
	heur = mk(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	setd(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og, "heuristics graph");
	set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
	fin(g, heur, "cudnnBackendFinalize(heuristics, mode A)");
	if (g->fail)
		return;
	for (i = 0; i < 16; i++)
		cfg[i] = mk(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	if (g->fail)
		return;
	st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
	    CUDNN_TYPE_BACKEND_DESCRIPTOR, 16, &n, cfg);
	if (st != CUDNN_STATUS_SUCCESS) {
		g->fail = "cudnnBackendGetAttribute(heuristics results)";
		g->st = st;
		return;
	}
	if (n == 0) {
		g->fail = "heuristics (mode A) returned no engine";
		g->st = CUDNN_STATUS_NOT_SUPPORTED;
		return;
	}
	for (i = 0; i < n && i < 16; i++) {
		cudnnBackendDescriptor_t pl;

		if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &pl) != CUDNN_STATUS_SUCCESS)
			break;
		st = cudnnBackendSetAttribute(pl, ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->h);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendSetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
			    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
		if (st == CUDNN_STATUS_SUCCESS)
			st = cudnnBackendFinalize(pl);
		if (st == CUDNN_STATUS_SUCCESS) {
			int64_t got = 0;

			st = cudnnBackendGetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
			    CUDNN_TYPE_INT64, 1, &got, &p->wsize);
			if (st == CUDNN_STATUS_SUCCESS) {
				p->plan = pl;
				return;
			}
		}
		cudnnBackendDestroyDescriptor(pl);
	}
	g->fail = "cudnnBackendFinalize(execution plan) for every engine config";
	g->st = st;
}

static void
gb_free(struct gb *g)
{
	while (g->nd > 0)
		cudnnBackendDestroyDescriptor(g->d[--g->nd]);
}

static void
cudnn_fini(void *vs)
{
	struct st *S = vs;
	int i;

	if (S == NULL)
		return;
	for (i = 0; i < 2; i++) {
		if (S->p[i].plan)
			cudnnBackendDestroyDescriptor(S->p[i].plan);
		dev_free(S->p[i].ws);
		gb_free(&S->g[i]);
	}
	dev_free(S->seqq);
	dev_free(S->seqkv);
	dev_free(S->roff_q);
	dev_free(S->roff_k);
	dev_free(S->roff_s);
	dev_free(S->sum);
	dev_free(S->dqacc);
	if (S->h)
		cudnnDestroy(S->h);
	free(S->l.start);
	free(S);
}

static int
upload(void **dst, const void *src, size_t n)
{
	if (dev_alloc(dst, n) != 0)
		return KERN_OOM;
	return cudaMemcpy(*dst, src, n, cudaMemcpyHostToDevice) == cudaSuccess ? KERN_OK : KERN_ERR;
}

/* The device tables of the ragged layout: per-entry lengths and offsets. */
static int
tables(struct st *S)
{
	int64_t B = S->B, nd = S->l.kind == LAY_DOCS ? S->l.ndocs : 1;
	int32_t *sq = calloc((size_t)B, sizeof *sq), *sk = calloc((size_t)B, sizeof *sk);
	int32_t *oq = calloc((size_t)B + 1, sizeof *oq), *ok = calloc((size_t)B + 1, sizeof *ok);
	int32_t *os = calloc((size_t)B + 1, sizeof *os);
	int64_t b, i, e;
	int rc = KERN_OOM;

	if (!sq || !sk || !oq || !ok || !os)
		goto out;
	for (b = 0; b < S->s.batch; b++)
		for (i = 0; i < nd; i++) {
			e = b * nd + i;
			if (S->l.kind == LAY_DOCS) {
				int64_t t0 = S->l.start[i], len = S->l.start[i + 1] - t0;
				sq[e] = sk[e] = (int32_t)len;
				oq[e] = (int32_t)((b * S->s.sq + t0) * S->s.hq * S->s.hd);
				ok[e] = (int32_t)((b * S->s.sk + t0) * S->s.hkv * S->s.hd);
				os[e] = (int32_t)(b * S->s.hq * S->s.sq + t0);
			} else {
				sq[e] = (int32_t)S->Sq;
				sk[e] = (int32_t)S->Sk;
			}
		}
	oq[B] = (int32_t)(S->s.batch * S->s.sq * S->s.hq * S->s.hd);
	ok[B] = (int32_t)(S->s.batch * S->s.sk * S->s.hkv * S->s.hd);
	os[B] = (int32_t)(S->s.batch * S->s.hq * S->s.sq);
	if (S->pad) {
		if ((rc = upload((void **)&S->seqq, sq, (size_t)B * 4)) ||
		    (rc = upload((void **)&S->seqkv, sk, (size_t)B * 4)))
			goto out;
	}
	if (S->l.kind == LAY_DOCS) {
		if ((rc = upload((void **)&S->roff_q, oq, (size_t)(B + 1) * 4)) ||
		    (rc = upload((void **)&S->roff_k, ok, (size_t)(B + 1) * 4)) ||
		    (rc = upload((void **)&S->roff_s, os, (size_t)(B + 1) * 4)))
			goto out;
	}
	rc = KERN_OK;
out:
	free(sq); free(sk); free(oq); free(ok); free(os);
	return rc;
}

static void
binds(struct st *S, struct plan *p, int bwd)
{
	int64_t u[] = { U_Q, U_K, U_V, U_O, U_STATS, U_SCALE };
	size_t i;

	p->nuid = 0;
	for (i = 0; i < sizeof u / sizeof u[0]; i++)
		p->uid[p->nuid++] = u[i];
	if (bwd) {
		p->uid[p->nuid++] = U_DO;
		p->uid[p->nuid++] = U_DQ;
		p->uid[p->nuid++] = U_DK;
		p->uid[p->nuid++] = U_DV;
		if (!S->sdpa_op) {
			p->uid[p->nuid++] = U_SUM;
			p->uid[p->nuid++] = U_DQACC;
			p->uid[p->nuid++] = U_ONE;
		}
	}
	if (S->sdpa_op)
		return;
	if (S->pad) {
		p->uid[p->nuid++] = U_SEQQ;
		p->uid[p->nuid++] = U_SEQKV;
	}
	if (S->l.kind == LAY_DOCS) {
		p->uid[p->nuid++] = U_ROFF_Q;
		p->uid[p->nuid++] = U_ROFF_K;
		p->uid[p->nuid++] = U_ROFF_S;
	}
	if (S->pad || (S->l.kind == LAY_BAND && S->l.right) ||
	    (S->l.kind == LAY_DOCS && S->l.causal))
		p->uid[p->nuid++] = U_LOWEST;
	if (S->l.kind == LAY_BAND && S->l.right && S->l.hi != 0)
		p->uid[p->nuid++] = U_RIGHT;
	if (S->l.kind == LAY_BAND && S->l.left) {
		p->uid[p->nuid++] = U_LEFT;
		p->uid[p->nuid++] = U_SWA;
	}
}

static int
cudnn_init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct st *S;
	const char *why, *op;
	int i, rc;

	*st = NULL;
	if ((why = cudnn_check(s, m, PASS_FWD | PASS_BWD)) != NULL) {
		snprintf(err, errlen, "%s", why);
		return KERN_ERR;
	}
	if ((S = calloc(1, sizeof *S)) == NULL)
		return KERN_OOM;
	S->s = *s;
	analyse(s, m, &S->l);
	if (cudnnCreate(&S->h) != CUDNN_STATUS_SUCCESS) {
		snprintf(err, errlen, "cudnnCreate failed (no GPU?)");
		free(S->l.start);
		free(S);
		return KERN_ERR;
	}
	S->scale = (float)s->scale;
	S->one = 1.0f;
	S->lowest = -FLT_MAX;
	S->swa = -1024.0f * 1024.0f * 1024.0f;
	if (S->l.kind == LAY_DOCS) {
		S->B = (int64_t)s->batch * S->l.ndocs;
		S->Sq = S->Sk = S->l.maxlen;
		S->pad = 1;
	} else {
		S->B = s->batch;
		S->Sq = s->sq;
		S->Sk = s->sk;
		S->right = (int32_t)S->l.hi;
		S->left = (float)(S->l.lo + 1);
		/* cudnn-frontend pads the bwd of s_kv % 128 != 0 up to 9.15 */
		S->pad = s->sk % 128 != 0 && cudnnGetVersion() <= 91500;
	}
	op = getenv("LONGATTN_CUDNN_OP");
	S->sdpa_op = op && strcmp(op, "sdpa") == 0;
	if (S->sdpa_op && (S->l.kind != LAY_BAND || S->l.left || S->l.right || S->pad)) {
		snprintf(err, errlen, "LONGATTN_CUDNN_OP=sdpa: the SDPA operation takes no mask before cuDNN 9.21");
		rc = KERN_ERR;
		goto bad;
	}
	if ((rc = tables(S)) != KERN_OK) {
		snprintf(err, errlen, "cannot upload the length tables");
		goto bad;
	}
	for (i = 0; i < 2; i++) {
		struct gb *g = &S->g[i];

		g->h = S->h;
		g->vuid = U_VIRT;
		g->io = s->dtype == DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
		if (S->sdpa_op) {
			g->fail = "SDPA operation not in this cuDNN (fwd >= 9.13.1, bwd >= 9.17)";
			g->st = CUDNN_STATUS_NOT_SUPPORTED;
#if CUDNN_VERSION >= 91301
			if (i == 0 && cudnnGetVersion() >= 91301) {
				g->fail = NULL;
				graph_sdpa_fwd(g, S);
			}
#endif
#if CUDNN_VERSION >= 91700
			if (i == 1 && cudnnGetVersion() >= 91700) {
				g->fail = NULL;
				graph_sdpa_bwd(g, S);
			}
#endif
		} else if (i == 0) {
			graph_fwd(g, S);
		} else {
			graph_bwd(g, S);
		}
		make_plan(g, &S->p[i]);
		if (g->fail) {
			char last[256] = "";

			cudnnGetLastErrorString(last, sizeof last);
			snprintf(err, errlen, "cuDNN %zu, %s graph: %s: %s%s%s", cudnnGetVersion(),
			    i ? "bwd" : "fwd", g->fail, cudnnGetErrorString(g->st),
			    last[0] ? ": " : "", last);
			rc = KERN_ERR;
			goto bad;
		}
		binds(S, &S->p[i], i);
	}
	/* The backward's buffers wait for the first backward, so a forward
	 * row does not carry them. */
	if (S->p[0].wsize > 0 && dev_alloc(&S->p[0].ws, (size_t)S->p[0].wsize) != 0) {
		rc = KERN_OOM;
		goto bad;
	}
	*st = S;
	return KERN_OK;
bad:
	cudnn_fini(S);
	return rc;
}

static void *
ptr_of(struct st *S, int64_t uid, const struct attn_io *io)
{
	switch (uid) {
	case U_Q: return io->q;
	case U_K: return io->k;
	case U_V: return io->v;
	case U_O: return io->o;
	case U_STATS: return io->lse;
	case U_DO: return io->dout;
	case U_DQ: return io->dq;
	case U_DK: return io->dk;
	case U_DV: return io->dv;
	case U_SCALE: return &S->scale;
	case U_ONE: return &S->one;
	case U_LOWEST: return &S->lowest;
	case U_SWA: return &S->swa;
	case U_RIGHT: return &S->right;
	case U_LEFT: return &S->left;
	case U_SEQQ: return S->seqq;
	case U_SEQKV: return S->seqkv;
	case U_ROFF_Q: return S->roff_q;
	case U_ROFF_K: return S->roff_k;
	case U_ROFF_S: return S->roff_s;
	case U_SUM: return S->sum;
	case U_DQACC: return S->dqacc;
	}
	return NULL;
}

static int
run(struct st *S, struct plan *p, const struct attn_io *io)
{
	cudnnBackendDescriptor_t vp;
	void *ptr[MAXVP];
	cudnnStatus_t st;
	int i;

	for (i = 0; i < p->nuid; i++)
		ptr[i] = ptr_of(S, p->uid[i], io);
	if (cudnnSetStream(S->h, (cudaStream_t)io->stream) != CUDNN_STATUS_SUCCESS)
		return KERN_ERR;
	if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp) != CUDNN_STATUS_SUCCESS)
		return KERN_ERR;
	st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, p->nuid, p->uid);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, p->nuid, ptr);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &p->ws);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendFinalize(vp);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnBackendExecute(S->h, p->plan, vp);
	cudnnBackendDestroyDescriptor(vp);
	if (st != CUDNN_STATUS_SUCCESS) {
		fprintf(stderr, "cudnn: cudnnBackendExecute: %s\n", cudnnGetErrorString(st));
		return KERN_ERR;
	}
	return KERN_OK;
}

static int
cudnn_fwd(void *st, const struct attn_io *io)
{
	return run(st, &((struct st *)st)->p[0], io);
}

/* The backward's workspace, its fp32 dQ accumulator and row sums. */
static int
bwd_buffers(struct st *S)
{
	const struct attn_shape *s = &S->s;
	size_t rowsz, accsz;

	if (S->p[1].wsize > 0 && S->p[1].ws == NULL &&
	    dev_alloc(&S->p[1].ws, (size_t)S->p[1].wsize) != 0)
		return KERN_OOM;
	if (S->sdpa_op || S->dqacc != NULL)
		return KERN_OK;
	if (S->l.kind == LAY_DOCS) {
		rowsz = (size_t)s->batch * s->hq * s->sq;
		accsz = (size_t)s->batch * s->sq * s->hq * s->hd;
	} else {
		rowsz = (size_t)S->B * s->hq * S->Sq;
		accsz = rowsz * s->hd;
	}
	if (dev_alloc((void **)&S->sum, rowsz * 4) != 0)
		return KERN_OOM;
	if (dev_alloc((void **)&S->dqacc, accsz * 4) != 0) {
		dev_free(S->sum);
		S->sum = NULL;
		return KERN_OOM;
	}
	return KERN_OK;
}

static int
cudnn_bwd(void *st, const struct attn_io *io)
{
	struct st *S = st;
	int rc;

	if ((rc = bwd_buffers(S)) != KERN_OK)
		return rc;
	return run(S, &S->p[1], io);
}

const struct kern_ops kern_cudnn = {
	.name = "cudnn",
	.about = "NVIDIA cuDNN fused flash attention (backend graph API)",
	.caps = KC_GPU | KC_FWD | KC_BWD | KC_BF16 | KC_FP16 | KC_GQA | KC_SLICES,
	.check = cudnn_check,
	.init = cudnn_init,
	.fwd = cudnn_fwd,
	.bwd = cudnn_bwd,
	.fini = cudnn_fini,
};
