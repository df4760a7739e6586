/* What flash.cu and hopper.cu share about the plan.  On the device: which
 * of the scores a thread holds a partial tile's cuts allow (L is the
 * kernel's fragment layout: NQ, NK, qoff, koff, qi, ki), the walk of a
 * transposed plan over the q-heads of a GQA group (A is the kernel's
 * argument struct: group, mgroup, nkt, row, ent), and the backward passes'
 * conversions out of fp32; every device function is inlined.  On the
 * host: launch errors, the plan's upload and how the backward CTAs share
 * the walks. */
#ifndef TILE_CUH
#define TILE_CUH
#include <cuda_bf16.h>
#include <err.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A pair of bf16 or fp16 values as the 32-bit word a fragment holds. */
template <typename T> struct w16;
template <> struct w16<__nv_bfloat16> {
	static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
		__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
		return *reinterpret_cast<uint32_t *>(&v);
	}
	static __device__ __forceinline__ float2 unpack(uint32_t u) {
		return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u));
	}
};
template <> struct w16<__half> {
	static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
		__half2 v = __floats2half2_rn(lo, hi);
		return *reinterpret_cast<uint32_t *>(&v);
	}
	static __device__ __forceinline__ float2 unpack(uint32_t u) {
		return __half22float2(*reinterpret_cast<__half2 *>(&u));
	}
};

/* A cut as bounds on q, k and k - q, as plan_cut_allows reads it (every
 * coordinate is below 2^31 - 256, so k - q fits an int). */
struct dcut {
	int q0, q1, k0, k1, lo, hi;
	__device__ __forceinline__ dcut(const plan_cut &c) {
		q0 = c.q0; q1 = c.q1; k0 = c.k0; k1 = c.k1;
		lo = c.kind == MASK_INVCAUSAL || c.kind == MASK_BICAUSAL ? c.k0 - c.q0 : INT_MIN;
		hi = c.kind == MASK_CAUSAL || c.kind == MASK_BICAUSAL ? c.k1 - c.q1 : INT_MAX;
	}
};

/* The 32 score elements a thread holds in a warp's sub-tile: element b
 * has q = qb + L::qoff(L::qi(b)) and k = kb + L::koff(L::ki(b)), the
 * offsets compile-time constants.  cut_bits returns the set of elements
 * some cut allows.  Rectangles cost a compare or two per distinct row and
 * column (masks whose cuts are single columns, as random_eviction's, have
 * dozens of cuts per tile); only diagonal cuts test every element. */
template <class L> static __host__ __device__ constexpr uint32_t qbits(int u)
{
	uint32_t m = 0;
	for (int b = 0; b < 32; b++)
		if (L::qi(b) == u)
			m |= 1u << b;
	return m;
}

template <class L> static __host__ __device__ constexpr uint32_t kbits(int u)
{
	uint32_t m = 0;
	for (int b = 0; b < 32; b++)
		if (L::ki(b) == u)
			m |= 1u << b;
	return m;
}

/* The elements with q in [q0,q1) and k in [k0,k1). */
template <class L>
static __device__ __forceinline__ uint32_t rect_bits(int qb, int kb, int q0, int q1, int k0, int k1)
{
	uint32_t qm = 0, km = 0;
	const int a0 = qb - q0, a1 = qb - q1, b0 = kb - k0, b1 = kb - k1;
#pragma unroll
	for (int u = 0; u < L::NQ; u++)
		qm |= a0 >= -L::qoff(u) && a1 < -L::qoff(u) ? qbits<L>(u) : 0;
#pragma unroll
	for (int u = 0; u < L::NK; u++)
		km |= b0 >= -L::koff(u) && b1 < -L::koff(u) ? kbits<L>(u) : 0;
	return qm & km;
}

/* [rq0,rq1) x [rk0,rk1) is the warp's region: cuts outside it are skipped
 * by the whole warp at once. */
template <class L>
static __device__ __forceinline__ uint32_t cut_bits(const plan_cut *cut, int n, int qb, int kb,
    int rq0, int rq1, int rk0, int rk1)
{
	uint32_t ok = 0;
	for (int c = 0; c < n; c++) {
		const plan_cut P = cut[c];
		if (P.q1 <= rq0 || P.q0 >= rq1 || P.k1 <= rk0 || P.k0 >= rk1)
			continue;
		uint32_t in = rect_bits<L>(qb, kb, P.q0, P.q1, P.k0, P.k1);
		if (P.kind != MASK_FULL && in) {
			const dcut C(P);
			const int d = kb - qb;
#pragma unroll
			for (int b = 0; b < 32; b++) {
				const int o = L::koff(L::ki(b)) - L::qoff(L::qi(b));
				if (d + o < C.lo || d + o > C.hi)
					in &= ~(1u << b);
			}
		}
		ok |= in;
	}
	return ok;
}

/* Where a CTA's walk stands: q-head gi of the group, entry e (of e1) of
 * that head's row, q-tile t.  Advance to the next tile; false at the end. */
struct bwalk {
	int gi, e, e1, t;
};

template <class A>
static __device__ __forceinline__ bool bwalk_row(bwalk &w, const A &a, int hk, int kt)
{
	for (; w.gi < a.group; w.gi++) {
		int h = hk * a.group + w.gi, r = (h / a.mgroup) * a.nkt + kt;
		w.e = a.row[r];
		w.e1 = a.row[r + 1];
		if (w.e < w.e1) {
			w.t = a.ent[w.e].t0;
			return true;
		}
	}
	return false;
}

/* Skip the first pos tiles of the walk. */
template <class A>
static __device__ __forceinline__ bool bwalk_seek(bwalk &w, const A &a, int hk, int kt, int pos)
{
	while (bwalk_row(w, a, hk, kt)) {
		for (; w.e < w.e1; w.e++) {
			const int n = a.ent[w.e].t1 - a.ent[w.e].t0;
			if (pos < n) {
				w.t = a.ent[w.e].t0 + pos;
				return true;
			}
			pos -= n;
		}
		w.gi++;
	}
	return false;
}

/* E: entry w.e, where the caller has it loaded already (hopper's bwd:
 * a load here put an L2 round trip before its next products) */
template <class A>
static __device__ __forceinline__ bool bwalk_next(bwalk &w, const A &a, int hk, int kt, const plan_ent &E)
{
	if (++w.t < E.t1)
		return true;
	if (++w.e < w.e1) {
		w.t = a.ent[w.e].t0;
		return true;
	}
	w.gi++;
	return bwalk_row(w, a, hk, kt);
}

template <class A>
static __device__ __forceinline__ bool bwalk_next(bwalk &w, const A &a, int hk, int kt)
{
	return bwalk_next(w, a, hk, kt, a.ent[w.e]);
}

/* Four fp32 accumulator values, scaled, as four 16-bit ones. */
template <typename T>
static __device__ __forceinline__ uint2 dq_pack(float4 x, float scale)
{
	return make_uint2(w16<T>::pack(x.x * scale, x.y * scale), w16<T>::pack(x.z * scale, x.w * scale));
}

/* The fp32 dQ accumulator into dq, the scale folded in: 4 elements a
 * thread. */
template <typename T>
__global__ void dq_out(const float *acc, T *dq, int64_t n, float scale)
{
	for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n;
	    i += (int64_t)gridDim.x * blockDim.x * 4)
		*(uint2 *)(dq + i) = dq_pack<T>(*(const float4 *)(acc + i), scale);
}

/* The fp32 slots of k-tiles (of BKT keys) split among several CTAs into dk
 * and dv: 4 elements a thread.  ktile: a padded plan's k-tiles (pad_plan),
 * or NULL. */
template <typename T, int HD, int BKT>
__global__ void kv_out(const float *wsk, const float *wsv, const int32_t *slotkt, T *dk, T *dv,
    int64_t n, int batch, int hkv, int sk, const int2 *ktile)
{
	for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n;
	    i += (int64_t)gridDim.x * blockDim.x * 4) {
		const int col = (int)(i % HD);
		int64_t r = i / HD;
		const int row = (int)(r % BKT);
		r /= BKT;
		const int hk = (int)(r % hkv);
		r /= hkv;
		const int b = (int)(r % batch);
		const int kt = slotkt[r / batch];
		const int64_t k = ktile != NULL ? (row < ktile[kt].y ? ktile[kt].x + row : sk) : (int64_t)kt * BKT + row;
		if (k >= sk)
			continue;
		const int64_t o = ((b * (int64_t)sk + k) * hkv + hk) * HD + col;
		float4 x = *(const float4 *)(wsk + i), y = *(const float4 *)(wsv + i);
		uint2 u, v;
		u.x = w16<T>::pack(x.x, x.y);
		u.y = w16<T>::pack(x.z, x.w);
		v.x = w16<T>::pack(y.x, y.y);
		v.y = w16<T>::pack(y.z, y.w);
		*(uint2 *)(dk + o) = u;
		*(uint2 *)(dv + o) = v;
	}
}

/* ---- host: plans to the device, the backward CTAs over a transposed plan --- */

/* After a launch: KERN_OK, or KERN_ERR with "who: what: the error" on
 * stderr. */
static int launched(const char *who, const char *what)
{
	cudaError_t e = cudaGetLastError();
	if (e == cudaSuccess)
		return KERN_OK;
	warnx("%s: %s: %s", who, what, cudaGetErrorString(e));
	return KERN_ERR;
}

/* Never a zero-byte allocation: a plan with no cut still gets a pointer. */
static int upload(void **dst, const void *src, size_t n)
{
	if (dev_alloc(dst, n ? n : 16) != 0)
		return KERN_OOM;
	if (n && cudaMemcpy(*dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess)
		return KERN_ERR;
	return KERN_OK;
}

/* Whether the comma-separated list in the environment variable v has the
 * word w (the kernels' A/B switches). */
static inline int env_has(const char *v, const char *w)
{
	const char *e = getenv(v);
	const size_t n = strlen(w);

	for (const char *p = e; p != NULL && *p != '\0'; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, w, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return 1;
	return 0;
}

/* plan_intervals of p (a query row's keys, or a transposed plan's key's
 * queries) to *dst on the device where every line is one interval; else
 * *dst stays NULL.  gap: the padded tiles of the other axis on the device
 * (pad_plan's, ngap of them), whose gaps an interval may span, or NULL.
 * say: a line for stderr where they are. */
static inline int upload_intervals(int2 **dst, const struct plan *p, const int2 *gap, int64_t ngap,
    const char *say)
{
	const int64_t n = p->transposed ? (int64_t)p->nkt * p->bk : (int64_t)p->nqt * p->bq;
	int32_t (*iv)[2] = (int32_t (*)[2])malloc((size_t)(n ? n : 1) * sizeof *iv);
	int32_t (*g)[2] = gap != NULL ? (int32_t (*)[2])malloc((size_t)(ngap ? ngap : 1) * sizeof *g) : NULL;
	int rc = KERN_OK;

	if (iv == NULL || (gap != NULL && g == NULL)) {
		free(iv);
		free(g);
		return KERN_ERR;
	}
	if (gap != NULL && cudaMemcpy(g, gap, (size_t)ngap * sizeof *g, cudaMemcpyDeviceToHost) != cudaSuccess)
		rc = KERN_ERR;
	else if (plan_intervals(p, g, iv) == 1) {
		rc = upload((void **)dst, iv, (size_t)n * sizeof *iv);
		if (say != NULL)
			warnx("%s", say);
	}
	free(iv);
	free(g);
	return rc;
}

/* A padded plan tried by pad_plan. */
struct padded {
	struct plan p;
	struct mask_pads pd;
	int64_t steps;           /* plan_steps */
	int sk;
};

/* The steps a kernel takes over plan p: its tiles, or (gather: two tiles
 * a step, anywhere in a row) half a row's tiles rounded up. */
static inline int64_t plan_steps(const struct plan *p, int gather)
{
	int64_t n = 0;

	for (int r = 0; r < p->nrows; r++) {
		const int64_t t = plan_row_tiles(p, r);
		n += gather ? (t + 1) / 2 : t;
	}
	return n;
}

/* 1 with *c made, 0 where m has no gaps at these minima, -1 on error. */
static inline int pad_try(const struct mask *m, int bq, int bk, int minq, int mink, int gather, struct padded *c,
    char *err, size_t errlen)
{
	struct mask v;
	int rc;

	if ((rc = mask_pad(m, bq, bk, minq, mink, &v, &c->pd, err, errlen)) <= 0)
		return rc;
	c->sk = (int)v.sk;
	rc = plan_build(&c->p, &v, bq, bk, err, errlen);
	mask_free(&v);
	if (rc != 0) {
		mask_pads_free(&c->pd);
		return -1;
	}
	c->steps = plan_steps(&c->p, gather);
	return 1;
}

static inline void pad_free(struct padded *c)
{
	plan_free(&c->p);
	mask_pads_free(&c->pd);
}

/* A plan of m with gaps (mask_pad: documents start on tile edges, as in
 * cuDNN's ragged layout) for bq x bk tiles, where the kernel takes no more
 * steps over it than over p (plan_steps; gather: 64-key tiles two a
 * step): the new plan replaces p, and per tile of each axis {first real
 * position, real positions} goes to the device (*qtile, *ktile); a kernel
 * reads tile t from there and writes only its real rows, while its cuts
 * and edges stay in the padded positions (*skv keys; 0 where p stays).
 * Two plans are tried: documents of a tile or more on edges, and every
 * document on edges (documents shorter than a tile each get their own,
 * which visits less where they are longer than about half a tile); force
 * takes the second wherever it has gaps.  KERN_OK, or KERN_ERR or
 * KERN_OOM with a message. */
static inline int pad_plan(const struct mask *m, int bq, int bk, int gather, int force, struct plan *p, int2 **qtile,
    int2 **ktile, int *skv, char *err, size_t errlen)
{
	struct padded c[2];
	int32_t (*qt)[2] = NULL, (*kt)[2] = NULL;
	int64_t nq, nk;
	int ok[2], best = -1, rc = KERN_OK;

	*skv = 0;
	if ((ok[0] = pad_try(m, bq, bk, bq, bk, gather, &c[0], err, errlen)) < 0)
		return KERN_ERR;
	if ((ok[1] = pad_try(m, bq, bk, 1, 1, gather, &c[1], err, errlen)) < 0) {
		if (ok[0])
			pad_free(&c[0]);
		return KERN_ERR;
	}
	for (int i = 0; i < 2; i++)
		if (ok[i] && (best < 0 || c[i].steps < c[best].steps || (force && i == 1)))
			best = i;
	/* gathered 64-key tiles must save a tenth of the steps: on documents
	 * under a tile nearly every q-tile ends at a gap, and its rows are
	 * stored one by one (H100, round 6: 48-127-token causal documents,
	 * steps level, -10 %; full ones, 36 % fewer steps, +28 %) */
	if (best >= 0 && !force &&
	    (gather ? c[best].steps * 10 > plan_steps(p, gather) * 9 : c[best].steps > plan_steps(p, gather)))
		best = -1;
	if (best >= 0) {
		struct padded *b = &c[best];
		if (mask_pad_tiles(b->pd.q, b->pd.nq, m->sq, bq, &qt, &nq) != 0 ||
		    mask_pad_tiles(b->pd.k, b->pd.nk, m->sk, bk, &kt, &nk) != 0 || nq != b->p.nqt || nk != b->p.nkt ||
		    (rc = upload((void **)qtile, qt, (size_t)nq * sizeof *qt)) != KERN_OK ||
		    (rc = upload((void **)ktile, kt, (size_t)nk * sizeof *kt)) != KERN_OK) {
			snprintf(err, errlen, "padded plan: %s", rc == KERN_OOM ? "out of device memory" : "its tiles");
			rc = rc == KERN_OK ? KERN_ERR : rc;
		} else {
			plan_free(p);
			*p = b->p;
			memset(&b->p, 0, sizeof b->p);
			*skv = b->sk;
		}
	}
	for (int i = 0; i < 2; i++)
		if (ok[i])
			pad_free(&c[i]);
	free(qt);
	free(kt);
	return rc;
}

static int walk_by_count(const void *x, const void *y)
{
	const int4 *i = (const int4 *)x, *j = (const int4 *)y;
	if (i->z != j->z)
		return i->z > j->z ? -1 : 1;
	return i->x > j->x ? -1 : i->x < j->x;
}

static int walk_by_stretch(const void *x, const void *y)
{
	const int4 *i = (const int4 *)x, *j = (const int4 *)y;
	if (i->y != j->y)
		return i->y < j->y ? -1 : 1;
	return i->x < j->x ? -1 : i->x > j->x;
}

/* How long a pass of small walks takes, in tiles, if no walk is longer
 * than cap: the CTAs as the grid dispatches them (each copy, a kv-head of
 * a batch entry, its pieces heaviest first) to the SM that frees first,
 * a CTA costing its tiles plus OV for its K/V load and pipeline fill, one
 * more where it adds to a slot. */
enum { OV = 2 };

static int span_by_len(const void *x, const void *y)
{
	const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
	return a > b ? -1 : a < b;
}

/* The device's SMs, or an H100's 132 where it does not say. */
static int sm_count(void)
{
	int dev, n;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
		return 132;
	return n;
}

/* The CTAs a walk of l tiles is cut into when none may pass cap. */
static inline int walk_cuts(int64_t l, int64_t cap)
{
	return l > cap ? (int)((l + cap - 1) / cap) : 1;
}

static int64_t walk_span(const int64_t *lmax, int n, int copies, int nsm, int64_t cap)
{
	int64_t *sm = (int64_t *)calloc(nsm, sizeof *sm), *piece = NULL, span = 0;
	int np = 0;

	for (int kt = 0; kt < n; kt++)
		np += walk_cuts(lmax[kt], cap);
	if (sm == NULL || (piece = (int64_t *)malloc((size_t)(np ? np : 1) * sizeof *piece)) == NULL) {
		free(sm);
		return INT64_MAX;
	}
	np = 0;
	for (int kt = 0; kt < n; kt++) {
		const int nch = walk_cuts(lmax[kt], cap);
		for (int i = 0; i < nch; i++)
			piece[np++] = (lmax[kt] + nch - 1) / nch + OV + (nch > 1);
	}
	qsort(piece, np, sizeof *piece, span_by_len);
	for (int c = 0; c < copies; c++)
		for (int i = 0; i < np; i++) {
			int m = 0;
			for (int k = 1; k < nsm; k++)
				if (sm[k] < sm[m])
					m = k;
			sm[m] += piece[i];
			span = sm[m] > span ? sm[m] : span;
		}
	free(sm);
	free(piece);
	return span;
}

/* The bwd CTAs, heaviest walk first.  A k-tile's walk is every q-tile of
 * every q-head of the GQA group; one longer than an eighth of an SM's fair
 * share of the whole pass is cut into stretches, each its own CTA adding
 * its dK/dV to an fp32 slot, so that the keys every query sees do not run
 * alone at the end.  Walks stay whole where walk_span says the pass ends
 * no later (full masks at 2K-8K).  *item: (k-tile, first position in the
 * walk, length, slot or -1); *slotkt: the k-tile of each slot.  The caller frees
 * both.  KERN_OK, or KERN_ERR (out of host memory, or more than 65535
 * CTAs).
 * seg > 0: every walk longer than seg tiles is cut into stretches of seg
 * (more where 65535 CTAs would not do), listed stretch by stretch: the
 * CTAs in flight then read Q, dO and dQ near the same place in the walk.
 * A whole walk a CTA lets CTAs that start late (second wave) read the
 * walk's start while the first are at its end: on scattered masks, where
 * walks differ in length, the CTAs in flight soon spread over every
 * q-head's Q/dO/dQ (64 MB a q-head at 64K), and L2 misses (ncu,
 * block_sparse_uniform 64K: 45 % L2 hits, DRAM 62 % busy; full: 98 %).
 * A pass of at most eight walks of 64 tiles an SM takes the cap that
 * walk_span says ends soonest.  seg < 0: no walk is cut (an A/B of the
 * cap: bench/NOTES.md, "The 8K bwd rows and the wave tail"). */
static int walk_items(const struct plan *p, const struct attn_shape *s, int mheads, int seg,
    int4 **itemp, int *nitems, int32_t **slotktp, int *nslots)
{
	const int n = p->nkt, group = s->hq / s->hkv, mgroup = s->hq / mheads;
	int64_t *lmax = (int64_t *)calloc(n ? n : 1, sizeof *lmax), total = 0, cap;
	int32_t *slotkt = (int32_t *)calloc(n ? n : 1, sizeof *slotkt);
	int4 *item = NULL;
	const int nsm = sm_count();
	int ni = 0, ns = 0;

	if (lmax == NULL || slotkt == NULL)
		goto fail;
	for (int kt = 0; kt < n; kt++)
		for (int hk = 0; hk < s->hkv; hk++) {
			int64_t len = 0;
			for (int gi = 0; gi < group; gi++) {
				const int r = ((hk * group + gi) / mgroup) * n + kt;
				for (int e = p->row[r]; e < p->row[r + 1]; e++)
					len += p->ent[e].t1 - p->ent[e].t0;
			}
			total += len;
			if (len > lmax[kt])
				lmax[kt] = len;
		}
	if (seg < 0) {
		cap = INT64_MAX;
	} else if (seg > 0) {
		int64_t sum = 0;
		for (int kt = 0; kt < n; kt++)
			sum += lmax[kt];
		cap = sum / 60000 + 1 > seg ? sum / 60000 + 1 : seg;
	} else {
		cap = total * s->batch / ((int64_t)nsm * 8) + 1;
		if (cap < 64)
			cap = 64;
		/* A pass of a few tiles an SM (causal 1K: 96 CTAs of up to 64
		 * tiles on 132 SMs) is as long as its longest CTA: a finer cut
		 * where the dispatch, simulated, ends sooner. */
		const int copies = s->hkv * s->batch;
		int64_t best = walk_span(lmax, n, copies, nsm, cap);
		if (total * s->batch <= (int64_t)nsm * 8 * 64)
			for (int64_t c = cap - 8; c >= 8; c -= 8) {
				const int64_t t = walk_span(lmax, n, copies, nsm, c);
				if (t < best) {
					best = t;
					cap = c;
				}
			}
		/* Whole walks where they end no later: a cut walk pays a K/V
		 * load, a fill and a slot add a piece (full 4K: 1280 CTAs of
		 * 103 tiles or 256 of 512, both ten waves' worth; whole +5 %,
		 * H100, round 32) */
		if (walk_span(lmax, n, copies, nsm, INT64_MAX) <= best)
			cap = INT64_MAX;
	}
	for (int kt = 0; kt < n; kt++)
		ni += walk_cuts(lmax[kt], cap);
	if (ni > 65535 || (item = (int4 *)calloc(ni ? ni : 1, sizeof *item)) == NULL)
		goto fail;
	ni = 0;
	for (int kt = 0; kt < n; kt++) {
		if (lmax[kt] <= cap) {
			item[ni++] = make_int4(kt, 0, (int)lmax[kt], -1);
			continue;
		}
		const int nch = (int)((lmax[kt] + cap - 1) / cap);
		const int c = (int)((lmax[kt] + nch - 1) / nch);
		for (int i = 0; i < nch; i++)
			item[ni++] = make_int4(kt, i * c, c, ns);
		slotkt[ns++] = kt;
	}
	qsort(item, ni, sizeof *item, seg > 0 ? walk_by_stretch : walk_by_count);
	free(lmax);
	*itemp = item;
	*nitems = ni;
	*slotktp = slotkt;
	*nslots = ns;
	return KERN_OK;
fail:
	free(lmax);
	free(slotkt);
	free(item);
	return KERN_ERR;
}

#endif
