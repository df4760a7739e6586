/* flash: tiled, IO-aware attention on tensor cores (mma.sync m16n8k16,
 * ldmatrix, cp.async), sm_80 and up, driven by the mask plan.
 *
 * fwd: one CTA per (q-head, q-tile of 128, batch), 4 warps of 32 rows each
 * (two m16 blocks per warp, so every K/V fragment read from shared memory
 * feeds two mma: shared-memory bandwidth, not the tensor cores, is what
 * limits a 16-row warp on Hopper).  K and V tiles of 64 keys, double
 * buffered: tile j+1 loads while tile j computes, one barrier a tile.
 * q-tiles run heaviest first (plan work), so causal and document tails
 * do not start last.
 *
 * bwd: D = rowsum(dO*O) first; then one CTA per (kv-head, k-tile of 128,
 * batch), 8 warps, walking the transposed plan (q-tiles of 64) for every
 * q-head of the GQA group, so dK/dV sum in registers without atomics.  Per
 * q-tile the warps compute S^T and dP^T in 32 x 32 blocks, put P^T and
 * dS^T in shared memory, then dV, dK (32 keys x HD/2 a warp) and dQ (32
 * queries x HD/4 a warp, added to an fp32 workspace with atomics and
 * converted at the end): the warp tiles that reuse ldmatrix fragments
 * most (see flash_bwd).  A k-tile that every query visits (a question, a
 * prefix) is split among several CTAs that add dK/dV to an fp32 slot.
 *
 * Partial tiles are masked with one bit per score a thread holds: from the
 * plan's cuts, or, for tiles of many cuts (random_eviction), from words
 * precomputed on the host (dplan_masks).  A warp whose part of a tile no
 * cut reaches skips it.
 *
 * Shared-memory tiles are rows of 16-byte chunks, chunk c of row r stored
 * at c ^ (r & 7): the 8 rows an ldmatrix phase reads hit 8 distinct bank
 * groups, and cp.async writes whole chunks. */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <err.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "kernel.h"
#include "plan.h"
#include "dev.h"
}
#include "tile.cuh"

#define LOG2E 1.4426950408889634f
#define LN2   0.6931471805599453f

/* ---- device primitives ----------------------------------------------- */

template <typename T> struct dt;
template <> struct dt<__nv_bfloat16> : w16<__nv_bfloat16> {
	static __device__ __forceinline__ void mma(float *c, const uint32_t *a, const uint32_t *b) {
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
	}
	static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};
template <> struct dt<__half> : w16<__half> {
	static __device__ __forceinline__ void mma(float *c, const uint32_t *a, const uint32_t *b) {
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
	}
	static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
};

static __device__ __forceinline__ uint32_t smaddr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void ldsm4(uint32_t *r, uint32_t a)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

static __device__ __forceinline__ void ldsm4t(uint32_t *r, uint32_t a)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* 16 bytes global -> shared; a false predicate zero-fills (rows past the
 * sequence end), the source address must still be valid. */
static __device__ __forceinline__ void sts32(uint32_t a, uint32_t v)
{
	asm volatile("st.shared.b32 [%0], %1;" :: "r"(a), "r"(v));
}

static __device__ __forceinline__ void cp16(void *s, const void *g, bool pred)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
	    :: "r"(smaddr(s)), "l"(g), "r"(pred ? 16 : 0));
}

static __device__ __forceinline__ void cp4(void *s, const void *g, bool pred)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
	    :: "r"(smaddr(s)), "l"(g), "r"(pred ? 4 : 0));
}

static __device__ __forceinline__ void cp_commit(void)
{
	asm volatile("cp.async.commit_group;");
}

template <int N> static __device__ __forceinline__ void cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;" :: "n"(N));
}

/* ex2.approx: exp2(-inf) = +0, which is what masked scores need. */
static __device__ __forceinline__ float ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/* Element offset of (row r, column c) in a swizzled tile of W columns. */
template <int W> static __device__ __forceinline__ int swz(int r, int c)
{
	return r * W + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
}

/* A thread's ldmatrix addresses in a swizzled tile of W columns.  Every
 * ldmatrix row a lane supplies is row0 + lane-row with row0 a multiple of
 * 8, so row & 7 is fixed per lane; column 16*kc + 8*cl has its chunk
 * 2kc+cl swizzled only in the low three bits.  Four base addresses (kc & 3)
 * then cover a whole tile with immediate offsets: without this the
 * compiler keeps one address register per unrolled ldmatrix and spills. */
template <int W> struct swa {
	uint32_t a[4];
	/* cb shifts every kc by a run-time number of 16-column steps */
	__device__ __forceinline__ swa(const void *base, int row, int cl, int cb = 0) {
		const uint32_t b = smaddr(base) + row * W * 2;
#pragma unroll
		for (int u = 0; u < 4; u++)
			a[u] = b + ((((2 * (u + cb) + cl) ^ (row & 7))) << 4);
	}
	/* row0 (multiple of 8) and kc are compile-time constants at every use */
	__device__ __forceinline__ uint32_t at(int row0, int kc) const {
		return a[kc & 3] + row0 * W * 2 + (kc >> 2) * 128;
	}
};

/* R rows of HD elements from g (row stride ld elements) into a swizzled
 * tile; rows at or past nvalid are zero. */
template <typename T, int R, int HD, int NT>
static __device__ __forceinline__ void load_tile(T *s, const T *g, int64_t ld, int nvalid, int tid)
{
	constexpr int CH = HD / 8;
	static_assert(R * CH % NT == 0, "tile not a multiple of the threads");
#pragma unroll
	for (int it = 0; it < R * CH / NT; it++) {
		int i = it * NT + tid, r = i / CH, c = (i % CH) * 8;
		bool p = r < nvalid;
		cp16(s + swz<HD>(r, c), p ? g + (int64_t)r * ld + c : g, p);
	}
}

/* R rows of K and of V into their swizzled tiles, for the fwd loop's
 * next-tile loads: a thread's rows differ by NT/CH (a multiple of 8), so
 * its swizzled chunk is the same in every row, its shared offsets are
 * immediates and one global pointer a tensor steps through the rows.  Two
 * load_tile calls kept an address per unrolled row there and spilled 64
 * bytes at HD = 128. */
template <typename T, int R, int HD, int NT>
static __device__ __forceinline__ void load_kv(T *sk, T *sv, const T *gk, const T *gv, int64_t ld,
    int nvalid, int tid)
{
	constexpr int CH = HD / 8, RS = NT / CH;
	static_assert(R % RS == 0 && RS % 8 == 0, "rows per step must keep the swizzle");
	const int lr = tid / CH, c = tid % CH;
	const int so = lr * HD + ((c ^ (lr & 7)) << 3);
	const T *pk = gk + (int64_t)lr * ld + c * 8, *pv = gv + (int64_t)lr * ld + c * 8;
	const int64_t step = (int64_t)RS * ld;
#pragma unroll
	for (int it = 0; it < R / RS; it++) {
		const bool p = it * RS + lr < nvalid;
		cp16(sk + so + it * RS * HD, p ? pk : gk, p);
		cp16(sv + so + it * RS * HD, p ? pv : gv, p);
		pk += step;
		pv += step;
	}
}

/* ---- forward ------------------------------------------------------------ */

struct fwd_args {
	const void *q, *k, *v;
	void *o;
	float *lse;
	const int32_t *row, *order;
	const plan_ent *ent;
	const plan_cut *cut;
	const int32_t *bmi;        /* per entry: its mask words in bm, or -1 (cuts) */
	const uint32_t *bm;
	int sq, sk, hq, hkv, nqt, group, mgroup;
	float sl;                  /* scale * log2(e) */
};

enum { FBQ = 128, FBK = 64, FNT = 128, FSUB = 32 };
/* 32-bit mask words of one partial fwd tile: 4 warps x 2 halves x 32 lanes */
enum { FBM = 256 };

/* fwd scores s[i][j][x] of a 32-key half: bit (4i + j)*4 + x, row
 * 16i + 8(x>>1) + g, key 8j + 2t + (x&1). */
struct fwd_lay {
	enum { NQ = 4, NK = 8 };
	static __host__ __device__ constexpr int qoff(int u) { return (u >> 1) * 16 + (u & 1) * 8; }
	static __host__ __device__ constexpr int koff(int u) { return (u >> 1) * 8 + (u & 1); }
	static __host__ __device__ constexpr int qi(int b) { return (b >> 4) * 2 + ((b & 3) >> 1); }
	static __host__ __device__ constexpr int ki(int b) { return ((b >> 2) & 3) * 2 + (b & 1); }
};

template <int HD> constexpr int fwd_smem() { return (FBQ + 4 * FBK) * HD * 2; }

template <typename T, int HD>
__global__ void __launch_bounds__(FNT, 2) flash_fwd(fwd_args a)
{
	/* Scores in 32-key halves of the 64-key tile: 32 fewer live registers
	 * than a whole tile, which is what keeps HD = 128 out of spills. */
	constexpr int MI = 2, NB = FSUB / 8, ND = HD / 8, KS = HD / 16;
	constexpr uint32_t KVB = FBK * HD * 2;     /* bytes of one K or V buffer */
	extern __shared__ __align__(128) unsigned char smem[];
	T *sQ = (T *)smem, *sK = sQ + FBQ * HD;    /* sK[2], then sV[2] */
	T *sV = sK + 2 * FBK * HD;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int h = blockIdx.x, qt = a.order[blockIdx.y], b = blockIdx.z;
	const int q0 = qt * FBQ, hk = h / a.group, r = (h / a.mgroup) * a.nqt + qt;
	const int e1 = a.row[r + 1];
	const int64_t ldq = (int64_t)a.hq * HD, ldk = (int64_t)a.hkv * HD;
	const T *Q = (const T *)a.q + ((int64_t)b * a.sq * a.hq + h) * HD;
	const T *K = (const T *)a.k + ((int64_t)b * a.sk * a.hkv + hk) * HD;
	const T *V = (const T *)a.v + ((int64_t)b * a.sk * a.hkv + hk) * HD;

	int e = a.row[r], t = e < e1 ? a.ent[e].t0 : 0;
	load_tile<T, FBQ, HD, FNT>(sQ, Q + (int64_t)q0 * ldq, ldq, a.sq - q0, tid);
	if (e < e1) {
		load_tile<T, FBK, HD, FNT>(sK, K + (int64_t)t * FBK * ldk, ldk, a.sk - t * FBK, tid);
		load_tile<T, FBK, HD, FNT>(sV, V + (int64_t)t * FBK * ldk, ldk, a.sk - t * FBK, tid);
	}
	cp_commit();

	float acc[MI][ND][4], m[MI][2], l[MI][2];
#pragma unroll
	for (int i = 0; i < MI; i++) {
#pragma unroll
		for (int j = 0; j < ND; j++)
			acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0;
		m[i][0] = m[i][1] = -INFINITY;
		l[i][0] = l[i][1] = 0;
	}

	const swa<HD> aQ(sQ, warp * 32 + (lane & 15), lane >> 4);
	const swa<HD> aK(sK, (lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1);
	const swa<HD> aV(sV, ((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4);
	for (int buf = 0; e < e1; buf ^= 1) {
		const plan_ent E = a.ent[e];
		int ne = e, nt = t + 1;
		if (nt >= E.t1) {
			ne = e + 1;
			nt = ne < e1 ? a.ent[ne].t0 : 0;
		}
		const int k0 = t * FBK;
		cp_wait<0>();
		__syncthreads();        /* tile t landed; every warp is done with t-1 */
		if (ne < e1) {
			const int64_t off = (int64_t)nt * FBK * ldk;
			load_kv<T, FBK, HD, FNT>(sK + (buf ^ 1) * FBK * HD, sV + (buf ^ 1) * FBK * HD, K + off, V + off,
			    ldk, a.sk - nt * FBK, tid);
			cp_commit();
		}
		const uint32_t boff = buf * KVB;
		const bool need = E.ncut > 0 || k0 + FBK > a.sk;
		const int bi = E.ncut > 0 ? a.bmi[e] : -1;

#pragma unroll
		for (int hf = 0; hf < FBK / FSUB; hf++) {
			/* Partial tiles: which scores are allowed, first, so that a
			 * warp whose 32 rows see nothing here (block-sparse masks,
			 * document edges) skips the half altogether. */
			uint32_t ok = ~0u;
			if (need) {
				const int kb0 = k0 + hf * FSUB, qw = q0 + warp * 32;
				const int qb = qw + (lane >> 2), kb = kb0 + (lane & 3) * 2;
				if (bi >= 0) {
					ok = a.bm[(int64_t)bi * FBM + (warp * 2 + hf) * 32 + lane];
				} else {
					ok = rect_bits<fwd_lay>(qb, kb, 0, INT_MAX, 0, a.sk);
					if (E.ncut > 0)
						ok &= cut_bits<fwd_lay>(a.cut + E.cut0, E.ncut, qb, kb, qw, qw + 32, kb0, kb0 + FSUB);
				}
				if (!__any_sync(0xffffffffu, ok))
					continue;
			}
			float s[MI][NB][4];
#pragma unroll
			for (int i = 0; i < MI; i++)
#pragma unroll
				for (int j = 0; j < NB; j++)
					s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0;
#pragma unroll
			for (int ks = 0; ks < KS; ks++) {
				uint32_t qa[MI][4];
#pragma unroll
				for (int i = 0; i < MI; i++)
					ldsm4(qa[i], aQ.at(i * 16, ks));
#pragma unroll
				for (int j = 0; j < NB / 2; j++) {
					uint32_t kb[4];
					ldsm4(kb, aK.at(hf * FSUB + j * 16, ks) + boff);
#pragma unroll
					for (int i = 0; i < MI; i++) {
						dt<T>::mma(s[i][2 * j], qa[i], kb);
						dt<T>::mma(s[i][2 * j + 1], qa[i], kb + 2);
					}
				}
			}

			/* Full tiles skip this; partial ones and the ragged last
			 * k-tile mask exactly.  Rows past sq are never stored. */
			if (need) {
#pragma unroll
				for (int i = 0; i < MI; i++)
#pragma unroll
					for (int j = 0; j < NB; j++)
#pragma unroll
						for (int x = 0; x < 4; x++)
							if (!((ok >> ((i * NB + j) * 4 + x)) & 1))
								s[i][j][x] = -INFINITY;
			}

			/* Online softmax in the log2 domain.  A row with nothing
			 * allowed so far keeps m = -inf; its offset is 0, so no
			 * inf - inf.  Once a row's maximum settles, most halves
			 * leave it unchanged: the O rescale (128 multiplies a
			 * thread at HD = 128) is skipped when no row of the warp
			 * moved. */
			float alpha[MI][2];
			bool moved = false;
#pragma unroll
			for (int i = 0; i < MI; i++)
#pragma unroll
				for (int rr = 0; rr < 2; rr++) {
					float mx = m[i][rr];
#pragma unroll
					for (int j = 0; j < NB; j++)
						mx = fmaxf(mx, fmaxf(s[i][j][2 * rr], s[i][j][2 * rr + 1]));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
					mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
					const float off = mx == -INFINITY ? 0.f : mx * a.sl;
					moved |= mx != m[i][rr];
					alpha[i][rr] = mx != m[i][rr] ? ex2(m[i][rr] * a.sl - off) : 1.f;
					m[i][rr] = mx;
					float sum = 0;
#pragma unroll
					for (int j = 0; j < NB; j++) {
						float p0 = ex2(fmaf(s[i][j][2 * rr], a.sl, -off));
						float p1 = ex2(fmaf(s[i][j][2 * rr + 1], a.sl, -off));
						s[i][j][2 * rr] = p0;
						s[i][j][2 * rr + 1] = p1;
						sum += p0 + p1;
					}
					l[i][rr] = l[i][rr] * alpha[i][rr] + sum;
				}
			if (__any_sync(0xffffffffu, moved))
#pragma unroll
				for (int i = 0; i < MI; i++)
#pragma unroll
					for (int j = 0; j < ND; j++) {
						acc[i][j][0] *= alpha[i][0];
						acc[i][j][1] *= alpha[i][0];
						acc[i][j][2] *= alpha[i][1];
						acc[i][j][3] *= alpha[i][1];
					}

#pragma unroll
			for (int kk = 0; kk < FSUB / 16; kk++) {
				uint32_t pa[MI][4];
#pragma unroll
				for (int i = 0; i < MI; i++) {
					pa[i][0] = dt<T>::pack(s[i][2 * kk][0], s[i][2 * kk][1]);
					pa[i][1] = dt<T>::pack(s[i][2 * kk][2], s[i][2 * kk][3]);
					pa[i][2] = dt<T>::pack(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
					pa[i][3] = dt<T>::pack(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
				}
#pragma unroll
				for (int j = 0; j < ND / 2; j++) {
					uint32_t vb[4];
					ldsm4t(vb, aV.at(hf * FSUB + kk * 16, j) + boff);
#pragma unroll
					for (int i = 0; i < MI; i++) {
						dt<T>::mma(acc[i][2 * j], pa[i], vb);
						dt<T>::mma(acc[i][2 * j + 1], pa[i], vb + 2);
					}
				}
			}
		}
		e = ne;
		t = nt;
	}
	cp_wait<0>();

	T *O = (T *)a.o + ((int64_t)b * a.sq * a.hq + h) * HD;
	float *L = a.lse + ((int64_t)b * a.hq + h) * a.sq;
#pragma unroll
	for (int i = 0; i < MI; i++)
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			float sum = l[i][rr];
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			sum += __shfl_xor_sync(0xffffffffu, sum, 2);
			const int qq = q0 + warp * 32 + i * 16 + (lane >> 2) + rr * 8;
			if (qq >= a.sq)
				continue;
			const float inv = sum > 0 ? 1.f / sum : 0.f;
			T *orow = O + (int64_t)qq * ldq + (lane & 3) * 2;
#pragma unroll
			for (int j = 0; j < ND; j++)
				*(uint32_t *)(orow + j * 8) = dt<T>::pack(acc[i][j][2 * rr] * inv, acc[i][j][2 * rr + 1] * inv);
			if ((lane & 3) == 0)
				L[qq] = sum > 0 ? (m[i][rr] * a.sl + log2f(sum)) * LN2 : -INFINITY;
		}
}

/* ---- backward ----------------------------------------------------------- */

/* D[b][h][q] = sum_d dO*O, one warp per (b, q, h) row. */
template <typename T, int HD>
__global__ void flash_bwd_dot(const T *o, const T *dout, float *D, int64_t nrows, int sq, int hq)
{
	constexpr int PER = HD / 32;
	int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	if (row >= nrows)
		return;
	const T *po = o + row * HD + lane * PER, *pd = dout + row * HD + lane * PER;
	float sum = 0;
#pragma unroll
	for (int i = 0; i < PER; i += 2) {
		float2 x = dt<T>::unpack(*(const uint32_t *)(po + i));
		float2 y = dt<T>::unpack(*(const uint32_t *)(pd + i));
		sum += x.x * y.x + x.y * y.y;
	}
#pragma unroll
	for (int off = 16; off > 0; off >>= 1)
		sum += __shfl_xor_sync(0xffffffffu, sum, off);
	if (lane == 0) {
		int h = (int)(row % hq);
		int64_t bq = row / hq;
		int q = (int)(bq % sq);
		int64_t b = bq / sq;
		D[(b * hq + h) * sq + q] = sum;
	}
}

struct bwd_args {
	const void *q, *k, *v, *dout;
	const float *lse, *D;
	float *dqa;
	void *dk, *dv;
	float *wsk, *wsv;          /* fp32 dK, dV of split k-tiles, [slot][b][hkv][BBK][hd] */
	const int32_t *row;
	const int4 *item;          /* per CTA: k-tile, first tile of its walk, tiles, slot */
	const plan_ent *ent;
	const plan_cut *cut;
	const int32_t *bmi;        /* per entry: its mask words in bm, or -1 (cuts) */
	const uint32_t *bm;
	int sq, sk, hq, hkv, nkt, group, mgroup, batch;
	float sl, scale;
};

enum { BBK = 128, BBQ = 64, BNT = 256 };
/* 32-bit mask words of one partial bwd tile: 8 warps x 32 lanes */
enum { BBM = 256 };

/* ---- backward: warp tiles of 32 x 32 --------------------------------------
 * FA2's division of the work.  When every warp owned 16 keys throughout
 * (this kernel until v2, bench/NOTES.md), each read the whole Q and dO tile
 * twice (for S^T and dP^T, then for dV and dK): 184 ldmatrix.x4 per warp
 * and q-tile for 320 mma, 8 % slower.  Here each step takes the warp tile
 * that reuses its fragments most:
 *   S^T, dP^T  32 keys x 32 queries (warp w: keys 32(w&3), queries 32(w>>2));
 *   P^T, dS^T  to shared memory (bf16, 2 x 16 KB);
 *   dV, dK     32 keys x HD/2 (keys 32(w&3), half w>>2 of HD), A operands
 *              from shared memory;
 *   dQ         32 queries x HD/4 (queries 32(w&1), quarter w>>1 of HD).
 * 64 + 48 + 32 = 144 ldmatrix.x4 per warp and q-tile for the same 320 mma,
 * and still two barriers per q-tile. */

/* bwd scores s[i][j][x] of S^T: bit (4i + j)*4 + x, key kr + 16i + g +
 * 8(x>>1), query qc + 8j + 2t + (x&1). */
struct bwd_lay {
	enum { NQ = 8, NK = 4 };
	static __host__ __device__ constexpr int qoff(int u) { return (u >> 1) * 8 + (u & 1); }
	static __host__ __device__ constexpr int koff(int u) { return (u >> 1) * 16 + (u & 1) * 8; }
	static __host__ __device__ constexpr int qi(int b) { return ((b >> 2) & 3) * 2 + (b & 1); }
	static __host__ __device__ constexpr int ki(int b) { return (b >> 4) * 2 + ((b & 3) >> 1); }
};

template <int HD> constexpr int bwd_smem()
{
	return (2 * BBK * HD + 4 * BBQ * HD + 2 * BBK * BBQ) * 2 + 4 * BBQ * 4;
}

template <typename T, int HD>
__global__ void __launch_bounds__(BNT, 1) flash_bwd(bwd_args a)
{
	constexpr int KS = HD / 16, NH = HD / 16, NQD = HD / 32;
	extern __shared__ __align__(128) unsigned char smem[];
	T *sK = (T *)smem, *sV = sK + BBK * HD, *sQ = sV + BBK * HD;   /* sQ[2], sdO[2] */
	T *sdO = sQ + 2 * BBQ * HD, *sP = sdO + 2 * BBQ * HD, *sdS = sP + BBK * BBQ;
	float *sL = (float *)(sdS + BBK * BBQ), *sD = sL + 2 * BBQ;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int4 item = a.item[blockIdx.y];
	const int hk = blockIdx.x, kt = item.x, b = blockIdx.z;
	const int k0 = kt * BBK, kr = (warp & 3) * 32, qc = (warp >> 2) * 32;
	const int64_t ldq = (int64_t)a.hq * HD, ldk = (int64_t)a.hkv * HD;
	const int64_t qbase = (int64_t)b * a.sq * a.hq, kbase = ((int64_t)b * a.sk * a.hkv + hk) * HD;

	load_tile<T, BBK, HD, BNT>(sK, (const T *)a.k + kbase + (int64_t)k0 * ldk, ldk, a.sk - k0, tid);
	load_tile<T, BBK, HD, BNT>(sV, (const T *)a.v + kbase + (int64_t)k0 * ldk, ldk, a.sk - k0, tid);

	auto load_q = [&](const bwalk &w, int s) {
		const int h = hk * a.group + w.gi, q0 = w.t * BBQ;
		const int64_t off = (qbase + (int64_t)q0 * a.hq + h) * HD;
		load_tile<T, BBQ, HD, BNT>(sQ + s * BBQ * HD, (const T *)a.q + off, ldq, a.sq - q0, tid);
		load_tile<T, BBQ, HD, BNT>(sdO + s * BBQ * HD, (const T *)a.dout + off, ldq, a.sq - q0, tid);
		if (tid < 2 * BBQ) {
			const int i = tid & (BBQ - 1);
			const float *src = (tid < BBQ ? a.lse : a.D) + ((int64_t)b * a.hq + h) * a.sq;
			const bool p = q0 + i < a.sq;
			cp4((tid < BBQ ? sL : sD) + s * BBQ + i, p ? src + q0 + i : src, p);
		}
	};

	bwalk w = {0, 0, 0, 0};
	int left = item.z;
	bool more = left > 0 && bwalk_seek(w, a, hk, kt, item.y);
	if (more)
		load_q(w, 0);
	cp_commit();

	float dk[2][NH][4], dv[2][NH][4];
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < NH; j++)
			dk[i][j][0] = dk[i][j][1] = dk[i][j][2] = dk[i][j][3] =
			    dv[i][j][0] = dv[i][j][1] = dv[i][j][2] = dv[i][j][3] = 0;

	/* Fixed distances: sV from sK, sdO and the second buffers from sQ,
	 * sdS from sP. */
	constexpr uint32_t VOFF = BBK * HD * 2, OOFF = 2 * BBQ * HD * 2, SOFF = BBK * BBQ * 2;
	const swa<HD> aKV(sK, kr + (lane & 15), lane >> 4);
	const swa<HD> aQn(sQ, qc + (lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1);
	const swa<HD> aQt(sQ, ((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4, (warp >> 2) * (HD / 32));
	const swa<BBQ> aP(sP, kr + (lane & 15), lane >> 4);
	const swa<BBQ> aW0(sP, kr + (lane >> 2), 0, qc / 16), aW1(sP, kr + (lane >> 2), 1, qc / 16);
	const swa<BBQ> aS(sdS, (lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1, (warp & 1) * 2);
	const swa<HD> aKt(sK, ((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4, (warp >> 1) * (HD / 64));
	for (int buf = 0; more; buf ^= 1) {
		const bwalk cur = w;
		const int h = hk * a.group + cur.gi, q0 = cur.t * BBQ;
		const plan_ent E = a.ent[cur.e];
		more = --left > 0 && bwalk_next(w, a, hk, kt);
		cp_wait<0>();
		__syncthreads();        /* this tile landed; the last dK/dV/dQ step is done */
		if (more)
			load_q(w, buf ^ 1);
		cp_commit();
		const uint32_t boff = buf * BBQ * HD * 2;
		const float *cL = sL + buf * BBQ, *cD = sD + buf * BBQ;

		/* Partial tiles: the allowed scores first; a warp whose 32 x 32
		 * block sees none of them leaves zeros for P^T and dS^T. */
		const bool need = E.ncut > 0 || q0 + BBQ > a.sq || k0 + BBK > a.sk;
		uint32_t ok = ~0u;
		const int bi = E.ncut > 0 ? a.bmi[cur.e] : -1;
		if (bi >= 0) {
			ok = a.bm[(int64_t)bi * BBM + warp * 32 + lane];
		} else if (need) {
			const int qb = q0 + qc + (lane & 3) * 2, kb = k0 + kr + (lane >> 2);
			ok = rect_bits<bwd_lay>(qb, kb, 0, a.sq, 0, a.sk);
			if (E.ncut > 0)
				ok &= cut_bits<bwd_lay>(a.cut + E.cut0, E.ncut, qb, kb, q0 + qc, q0 + qc + 32,
				    k0 + kr, k0 + kr + 32);
		}
		if (__any_sync(0xffffffffu, ok)) {
			float s[2][4][4], dp[2][4][4];
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
#pragma unroll
					for (int x = 0; x < 4; x++)
						s[i][j][x] = dp[i][j][x] = 0;
#pragma unroll
			for (int ks = 0; ks < KS; ks++) {
				uint32_t ka[2][4], va[2][4];
#pragma unroll
				for (int i = 0; i < 2; i++) {
					ldsm4(ka[i], aKV.at(16 * i, ks));
					ldsm4(va[i], aKV.at(16 * i, ks) + VOFF);
				}
#pragma unroll
				for (int j = 0; j < 2; j++) {
					uint32_t qb[4], ob[4];
					ldsm4(qb, aQn.at(j * 16, ks) + boff);
					ldsm4(ob, aQn.at(j * 16, ks) + boff + OOFF);
#pragma unroll
					for (int i = 0; i < 2; i++) {
						dt<T>::mma(s[i][2 * j], ka[i], qb);
						dt<T>::mma(s[i][2 * j + 1], ka[i], qb + 2);
						dt<T>::mma(dp[i][2 * j], va[i], ob);
						dt<T>::mma(dp[i][2 * j + 1], va[i], ob + 2);
					}
				}
			}

			/* P^T = exp(S^T*scale - lse), dS^T = P^T (dP^T - D); masked and
			 * out-of-range pairs get P = 0 (lse may be -inf there). */
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int xx = 0; xx < 2; xx++) {
					const int c = qc + j * 8 + (lane & 3) * 2 + xx;
					const float lc = cL[c] * LOG2E, dc = cD[c];
#pragma unroll
					for (int i = 0; i < 2; i++)
#pragma unroll
						for (int hh = 0; hh < 2; hh++) {
							const int x = hh * 2 + xx;
							float p = ex2(fmaf(s[i][j][x], a.sl, -lc));
							p = (ok >> ((i * 4 + j) * 4 + x)) & 1 ? p : 0.f;
							s[i][j][x] = p;
							dp[i][j][x] = p * (dp[i][j][x] - dc);
						}
				}
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
#pragma unroll
					for (int hh = 0; hh < 2; hh++) {
						const uint32_t ad = (j & 1 ? aW1 : aW0).at(16 * i + 8 * hh, j >> 1) + (lane & 3) * 4;
						sts32(ad, dt<T>::pack(s[i][j][2 * hh], s[i][j][2 * hh + 1]));
						sts32(ad + SOFF, dt<T>::pack(dp[i][j][2 * hh], dp[i][j][2 * hh + 1]));
					}
		} else {
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
#pragma unroll
					for (int hh = 0; hh < 2; hh++) {
						const uint32_t ad = (j & 1 ? aW1 : aW0).at(16 * i + 8 * hh, j >> 1) + (lane & 3) * 4;
						sts32(ad, 0);
						sts32(ad + SOFF, 0);
					}
		}
		__syncthreads();        /* P^T and dS^T complete */

		/* dV += P^T dO, dK += dS^T Q: 32 keys x HD/2 a warp. */
#pragma unroll
		for (int kk = 0; kk < BBQ / 16; kk++) {
			uint32_t pa[2][4], da[2][4];
#pragma unroll
			for (int i = 0; i < 2; i++) {
				ldsm4(pa[i], aP.at(16 * i, kk));
				ldsm4(da[i], aP.at(16 * i, kk) + SOFF);
			}
#pragma unroll
			for (int j = 0; j < NH / 2; j++) {
				uint32_t ob[4], qb[4];
				ldsm4t(ob, aQt.at(kk * 16, j) + boff + OOFF);
				ldsm4t(qb, aQt.at(kk * 16, j) + boff);
#pragma unroll
				for (int i = 0; i < 2; i++) {
					dt<T>::mma(dv[i][2 * j], pa[i], ob);
					dt<T>::mma(dv[i][2 * j + 1], pa[i], ob + 2);
					dt<T>::mma(dk[i][2 * j], da[i], qb);
					dt<T>::mma(dk[i][2 * j + 1], da[i], qb + 2);
				}
			}
		}

		/* dQ[64 q][HD] += dS K: 32 queries x HD/4 a warp. */
		{
			const int mq = (warp & 1) * 32, nq = (warp >> 1) * (HD / 4);
			float dq[2][NQD][4];
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < NQD; j++)
					dq[i][j][0] = dq[i][j][1] = dq[i][j][2] = dq[i][j][3] = 0;
#pragma unroll
			for (int kk = 0; kk < BBK / 16; kk++) {
				uint32_t da[2][4];
#pragma unroll
				for (int i = 0; i < 2; i++)
					ldsm4t(da[i], aS.at(kk * 16, i));
#pragma unroll
				for (int j = 0; j < NQD / 2; j++) {
					uint32_t kb[4];
					ldsm4t(kb, aKt.at(kk * 16, j));
#pragma unroll
					for (int i = 0; i < 2; i++) {
						dt<T>::mma(dq[i][2 * j], da[i], kb);
						dt<T>::mma(dq[i][2 * j + 1], da[i], kb + 2);
					}
				}
			}
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int rr = 0; rr < 2; rr++) {
					const int qq = q0 + mq + 16 * i + (lane >> 2) + rr * 8;
					if (qq >= a.sq)
						continue;
					float *dst = a.dqa + (qbase + (int64_t)qq * a.hq + h) * HD + nq + (lane & 3) * 2;
#pragma unroll
					for (int j = 0; j < NQD; j++) {
#if __CUDA_ARCH__ >= 900
						atomicAdd((float2 *)(dst + j * 8), make_float2(dq[i][j][2 * rr], dq[i][j][2 * rr + 1]));
#else
						atomicAdd(dst + j * 8, dq[i][j][2 * rr]);
						atomicAdd(dst + j * 8 + 1, dq[i][j][2 * rr + 1]);
#endif
					}
				}
		}
	}
	cp_wait<0>();

	const int dh = (warp >> 2) * (HD / 2);
	if (item.w >= 0) {
		const int64_t so = (((int64_t)item.w * a.batch + b) * a.hkv + hk) * BBK * HD;
#pragma unroll
		for (int i = 0; i < 2; i++)
#pragma unroll
			for (int rr = 0; rr < 2; rr++) {
				const int row = kr + 16 * i + (lane >> 2) + rr * 8;
				float *pk = a.wsk + so + row * HD + dh + (lane & 3) * 2;
				float *pv = a.wsv + so + row * HD + dh + (lane & 3) * 2;
#pragma unroll
				for (int j = 0; j < NH; j++) {
#if __CUDA_ARCH__ >= 900
					atomicAdd((float2 *)(pk + j * 8), make_float2(dk[i][j][2 * rr] * a.scale, dk[i][j][2 * rr + 1] * a.scale));
					atomicAdd((float2 *)(pv + j * 8), make_float2(dv[i][j][2 * rr], dv[i][j][2 * rr + 1]));
#else
					atomicAdd(pk + j * 8, dk[i][j][2 * rr] * a.scale);
					atomicAdd(pk + j * 8 + 1, dk[i][j][2 * rr + 1] * a.scale);
					atomicAdd(pv + j * 8, dv[i][j][2 * rr]);
					atomicAdd(pv + j * 8 + 1, dv[i][j][2 * rr + 1]);
#endif
				}
			}
		return;
	}
	T *DK = (T *)a.dk + kbase, *DV = (T *)a.dv + kbase;
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int rr = 0; rr < 2; rr++) {
			const int kk = k0 + kr + 16 * i + (lane >> 2) + rr * 8;
			if (kk >= a.sk)
				continue;
			const int64_t off = (int64_t)kk * ldk + dh + (lane & 3) * 2;
#pragma unroll
			for (int j = 0; j < NH; j++) {
				*(uint32_t *)(DK + off + j * 8) = dt<T>::pack(dk[i][j][2 * rr] * a.scale, dk[i][j][2 * rr + 1] * a.scale);
				*(uint32_t *)(DV + off + j * 8) = dt<T>::pack(dv[i][j][2 * rr], dv[i][j][2 * rr + 1]);
			}
		}
}

/* ---- host ----------------------------------------------------------------- */

/* A plan on the device, with the order its rows' tiles run in (fwd), or
 * the CTAs' stretches of the walks (bwd: item, and the k-tile of each
 * fp32 slot of a k-tile split among several CTAs). */
struct dplan {
	int32_t *row, *order;
	plan_ent *ent;
	plan_cut *cut;
	int32_t *bmi;
	uint32_t *bm;
	int ntiles;
	int4 *item;
	int32_t *slotkt;
	int nitems, nslots;
};

struct fstate {
	struct attn_shape s;
	int mheads;
	struct dplan f, b;
	float *dqa, *D, *ws;
};

static void dplan_free(struct dplan *d)
{
	dev_free(d->row);
	dev_free(d->order);
	dev_free(d->ent);
	dev_free(d->cut);
	dev_free(d->bmi);
	dev_free(d->bm);
	dev_free(d->item);
	dev_free(d->slotkt);
	memset(d, 0, sizeof *d);
}

static int64_t *work_key;

static int by_work(const void *x, const void *y)
{
	int32_t i = *(const int32_t *)x, j = *(const int32_t *)y;
	if (work_key[i] != work_key[j])
		return work_key[i] > work_key[j] ? -1 : 1;
	return i > j ? -1 : i < j;
}

/* Heaviest tile rows first, so the long rows of causal and document masks
 * do not start last and leave the machine idle at the tail. */
static int dplan_make(struct dplan *d, const struct plan *p)
{
	int n = p->transposed ? p->nkt : p->nqt, rc;
	int32_t *ord = (int32_t *)calloc(n ? n : 1, sizeof *ord);
	int64_t *work = (int64_t *)calloc(n ? n : 1, sizeof *work);
	if (ord == NULL || work == NULL) {
		free(ord);
		free(work);
		return KERN_ERR;
	}
	for (int r = 0; r < p->nrows; r++)
		for (int e = p->row[r]; e < p->row[r + 1]; e++)
			work[r % n] += p->ent[e].t1 - p->ent[e].t0;
	for (int i = 0; i < n; i++)
		ord[i] = i;
	work_key = work;
	qsort(ord, n, sizeof *ord, by_work);
	d->ntiles = n;
	if ((rc = upload((void **)&d->row, p->row, (size_t)(p->nrows + 1) * sizeof *p->row)) ||
	    (rc = upload((void **)&d->order, ord, (size_t)n * sizeof *ord)) ||
	    (rc = upload((void **)&d->ent, p->ent, (size_t)p->nent * sizeof *p->ent)) ||
	    (rc = upload((void **)&d->cut, p->cut, (size_t)p->ncut * sizeof *p->cut)))
		;
	free(ord);
	free(work);
	return rc;
}

/* Partial tiles with many cuts (random_eviction: one per evicted key, 28
 * a fwd tile on average, 55 a bwd tile) get their mask precomputed here,
 * one 32-bit word per thread in the bit order of its scores: the kernel
 * reads one word instead of testing every cut.  Tiles with fewer cuts stay
 * on the cut test, which needs no memory and no load latency.  bwd words
 * follow flash_bwd's warp tiles.  At most BM_CAP words a plan: past that,
 * cuts again. */
enum { BM_CAP = 64 << 20 };

/* The word and bit of the score at (r, c) = (q - q0, k - k0) of a tile. */
static void bm_pos_fwd(int r, int c, int *word, int *bit)
{
	const int rw = r & 31, cw = c & 31;
	*bit = (((rw >> 4) * 4 + (cw >> 3)) * 4) + ((rw >> 3) & 1) * 2 + (cw & 1);
	*word = ((r >> 5) * 2 + (c >> 5)) * 32 + (rw & 7) * 4 + ((cw >> 1) & 3);
}

static void bm_pos_bwd(int qq, int kk, int *word, int *bit)
{
	const int ki = kk & 31, qi = qq & 31;
	*bit = (((ki >> 4) * 4 + (qi >> 3)) * 4) + ((ki >> 3) & 1) * 2 + (qi & 1);
	*word = ((kk >> 5) + 4 * (qq >> 5)) * 32 + (ki & 7) * 4 + ((qi >> 1) & 3);
}

static int dplan_masks(struct dplan *d, const struct plan *p, int mincut)
{
	const int n = p->transposed ? p->nkt : p->nqt, bq = p->bq, bk = p->bk;
	int32_t *bmi = (int32_t *)malloc((size_t)(p->nent ? p->nent : 1) * sizeof *bmi);
	uint32_t *bm = NULL;
	int64_t nb = 0;
	int rc;

	if (bmi == NULL)
		return KERN_ERR;
	for (int e = 0; e < p->nent; e++) {
		bmi[e] = -1;
		if (mincut > 0 && p->ent[e].ncut >= mincut && (nb + 1) * 256 <= BM_CAP)
			bmi[e] = (int32_t)nb++;
	}
	if (nb > 0 && (bm = (uint32_t *)calloc((size_t)nb * 256, sizeof *bm)) == NULL) {
		free(bmi);
		return KERN_ERR;
	}
	for (int r = 0; nb > 0 && r < p->nrows; r++)
		for (int e = p->row[r]; e < p->row[r + 1]; e++) {
			if (bmi[e] < 0)
				continue;
			const plan_ent *E = &p->ent[e];
			const int64_t q0 = (int64_t)(p->transposed ? E->t0 : r % n) * bq;
			const int64_t k0 = (int64_t)(p->transposed ? r % n : E->t0) * bk;
			uint32_t *w = bm + (int64_t)bmi[e] * 256;
			for (int c = E->cut0; c < E->cut0 + E->ncut; c++) {
				const struct plan_cut *C = &p->cut[c];
				const int64_t qa = C->q0 > q0 ? C->q0 : q0, qz = C->q1 < q0 + bq ? C->q1 : q0 + bq;
				const int64_t ka = C->k0 > k0 ? C->k0 : k0, kz = C->k1 < k0 + bk ? C->k1 : k0 + bk;
				for (int64_t q = qa; q < qz; q++)
					for (int64_t k = ka; k < kz; k++) {
						int word, bit;
						if (!plan_cut_allows(C, q, k))
							continue;
						if (p->transposed)
							bm_pos_bwd((int)(q - q0), (int)(k - k0), &word, &bit);
						else
							bm_pos_fwd((int)(q - q0), (int)(k - k0), &word, &bit);
						w[word] |= 1u << bit;
					}
			}
		}
	if ((rc = upload((void **)&d->bmi, bmi, (size_t)p->nent * sizeof *bmi)) == KERN_OK)
		rc = upload((void **)&d->bm, bm, (size_t)nb * 256 * sizeof *bm);
	free(bmi);
	free(bm);
	return rc;
}

/* The bwd CTAs (tile.cuh's walk_items), on the device. */
static int bplan_items(struct dplan *d, const struct plan *p, const struct attn_shape *s, int mheads)
{
	int4 *item;
	int32_t *slotkt;
	int rc = walk_items(p, s, mheads, 0, &item, &d->nitems, &slotkt, &d->nslots);

	if (rc != KERN_OK)
		return rc;
	if ((rc = upload((void **)&d->item, item, (size_t)d->nitems * sizeof *item)) == KERN_OK)
		rc = upload((void **)&d->slotkt, slotkt, (size_t)d->nslots * sizeof *slotkt);
	free(item);
	free(slotkt);
	return rc;
}

static const char *fl_check(const struct attn_shape *s, const struct mask *m, int pass)
{
	(void)pass;
	if (s->hd != 64 && s->hd != 128)
		return "head_dim must be 64 or 128";
	if (s->dtype != DT_BF16 && s->dtype != DT_FP16)
		return "dtype must be bf16 or fp16";
	if (s->hkv < 1 || s->hq % s->hkv != 0 || m->heads < 1 || s->hq % m->heads != 0)
		return "heads_q must be a multiple of heads_kv and of the mask heads";
	if (s->sq >= INT32_MAX - 256 || s->sk >= INT32_MAX - 256)
		return "sequence longer than 2^31";
	if ((s->sq + FBQ - 1) / FBQ > 65535 || (s->sk + BBK - 1) / BBK > 16384 ||
	    s->batch > 65535 || s->hq > 65535)
		return "grid too large";
	return NULL;
}

static void fl_fini(void *st)
{
	struct fstate *f = (struct fstate *)st;
	if (f == NULL)
		return;
	dplan_free(&f->f);
	dplan_free(&f->b);
	dev_free(f->dqa);
	dev_free(f->D);
	dev_free(f->ws);
	free(f);
}

template <typename T, int HD> static cudaError_t set_smem(void)
{
	cudaError_t e = cudaFuncSetAttribute(flash_fwd<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, fwd_smem<HD>());
	if (e == cudaSuccess)
		e = cudaFuncSetAttribute(flash_bwd<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd_smem<HD>());
	return e;
}

static int fl_init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct fstate *f = (struct fstate *)calloc(1, sizeof *f);
	struct plan p, pb, pt;
	int rc, mincut = 4;
	cudaError_t ce;

	*st = NULL;
	if (f == NULL) {
		snprintf(err, errlen, "out of host memory");
		return KERN_ERR;
	}
	f->s = *s;
	f->mheads = m->heads;
	/* the bitmaps' threshold, for A/B timings (0: cuts only) */
	if (getenv("FLASH_BM_MINCUT") != NULL)
		mincut = atoi(getenv("FLASH_BM_MINCUT"));
	if (s->dtype == DT_BF16)
		ce = s->hd == 64 ? set_smem<__nv_bfloat16, 64>() : set_smem<__nv_bfloat16, 128>();
	else
		ce = s->hd == 64 ? set_smem<__half, 64>() : set_smem<__half, 128>();
	if (ce != cudaSuccess) {
		snprintf(err, errlen, "cudaFuncSetAttribute: %s", cudaGetErrorString(ce));
		free(f);
		return KERN_ERR;
	}
	if (plan_build(&p, m, FBQ, FBK, err, errlen) != 0) {
		free(f);
		return KERN_ERR;
	}
	rc = dplan_make(&f->f, &p);
	if (rc == KERN_OK)
		rc = dplan_masks(&f->f, &p, mincut);
	plan_free(&p);
	if (rc == KERN_OK) {
		if (plan_build(&pb, m, BBQ, BBK, err, errlen) != 0) {
			fl_fini(f);
			return KERN_ERR;
		}
		if (plan_transpose(&pt, &pb, err, errlen) != 0) {
			plan_free(&pb);
			fl_fini(f);
			return KERN_ERR;
		}
		plan_free(&pb);
		rc = dplan_make(&f->b, &pt);
		if (rc == KERN_OK)
			rc = dplan_masks(&f->b, &pt, mincut);
		if (rc == KERN_OK)
			rc = bplan_items(&f->b, &pt, s, m->heads);
		plan_free(&pt);
	}
	if (rc != KERN_OK) {
		snprintf(err, errlen, rc == KERN_OOM ? "out of device memory for the plan" :
		    "plan upload failed");
		fl_fini(f);
		return rc;
	}
	*st = f;
	return KERN_OK;
}

template <typename T, int HD> static int run_fwd(struct fstate *f, const struct attn_io *io)
{
	const struct attn_shape *s = &f->s;
	fwd_args a;
	a.q = io->q; a.k = io->k; a.v = io->v; a.o = io->o; a.lse = io->lse;
	a.row = f->f.row; a.order = f->f.order; a.ent = f->f.ent; a.cut = f->f.cut;
	a.bmi = f->f.bmi; a.bm = f->f.bm;
	a.sq = (int)s->sq; a.sk = (int)s->sk; a.hq = s->hq; a.hkv = s->hkv;
	a.nqt = f->f.ntiles; a.group = s->hq / s->hkv; a.mgroup = s->hq / f->mheads;
	a.sl = (float)s->scale * LOG2E;
	dim3 grid(s->hq, f->f.ntiles, s->batch);
	flash_fwd<T, HD><<<grid, FNT, fwd_smem<HD>(), (cudaStream_t)io->stream>>>(a);
	return launched("flash", "fwd");
}

template <typename T, int HD> static int run_bwd(struct fstate *f, const struct attn_io *io)
{
	const struct attn_shape *s = &f->s;
	cudaStream_t st = (cudaStream_t)io->stream;
	const int64_t nrow = (int64_t)s->batch * s->sq * s->hq, nq = nrow * HD;
	const int64_t nws = (int64_t)f->b.nslots * s->batch * s->hkv * BBK * HD;
	int rc;

	/* The workspace is made on first use: a forward-only run needs none. */
	if (f->dqa == NULL && (dev_alloc((void **)&f->dqa, (size_t)nq * sizeof(float)) != 0 ||
	    dev_alloc((void **)&f->D, (size_t)nrow * sizeof(float)) != 0 ||
	    (nws > 0 && dev_alloc((void **)&f->ws, 2 * (size_t)nws * sizeof(float)) != 0)))
		return KERN_OOM;
	if (cudaMemsetAsync(f->dqa, 0, (size_t)nq * sizeof(float), st) != cudaSuccess ||
	    (nws > 0 && cudaMemsetAsync(f->ws, 0, 2 * (size_t)nws * sizeof(float), st) != cudaSuccess))
		return launched("flash", "memset");
	flash_bwd_dot<T, HD><<<(unsigned)((nrow + 7) / 8), 256, 0, st>>>((const T *)io->o,
	    (const T *)io->dout, f->D, nrow, (int)s->sq, s->hq);
	if ((rc = launched("flash", "bwd D")) != KERN_OK)
		return rc;

	bwd_args a;
	a.q = io->q; a.k = io->k; a.v = io->v; a.dout = io->dout;
	a.lse = io->lse; a.D = f->D; a.dqa = f->dqa; a.dk = io->dk; a.dv = io->dv;
	a.wsk = f->ws; a.wsv = f->ws + nws;
	a.row = f->b.row; a.item = f->b.item; a.ent = f->b.ent; a.cut = f->b.cut;
	a.bmi = f->b.bmi; a.bm = f->b.bm;
	a.sq = (int)s->sq; a.sk = (int)s->sk; a.hq = s->hq; a.hkv = s->hkv;
	a.nkt = f->b.ntiles; a.group = s->hq / s->hkv; a.mgroup = s->hq / f->mheads;
	a.batch = s->batch;
	a.sl = (float)s->scale * LOG2E;
	a.scale = (float)s->scale;
	dim3 grid(s->hkv, f->b.nitems, s->batch);
	flash_bwd<T, HD><<<grid, BNT, bwd_smem<HD>(), st>>>(a);
	if ((rc = launched("flash", "bwd")) != KERN_OK)
		return rc;
	if (nws > 0) {
		kv_out<T, HD, BBK><<<(unsigned)((nws / 4 + 255) / 256), 256, 0, st>>>(f->ws, f->ws + nws,
		    f->b.slotkt, (T *)io->dk, (T *)io->dv, nws, s->batch, s->hkv, (int)s->sk, NULL);
		if ((rc = launched("flash", "bwd dk/dv")) != KERN_OK)
			return rc;
	}
	dq_out<T><<<132 * 16, 256, 0, st>>>(f->dqa, (T *)io->dq, nq, (float)s->scale);
	return launched("flash", "bwd dq");
}

static int fl_fwd(void *st, const struct attn_io *io)
{
	struct fstate *f = (struct fstate *)st;
	if (f->s.dtype == DT_BF16)
		return f->s.hd == 64 ? run_fwd<__nv_bfloat16, 64>(f, io) : run_fwd<__nv_bfloat16, 128>(f, io);
	return f->s.hd == 64 ? run_fwd<__half, 64>(f, io) : run_fwd<__half, 128>(f, io);
}

static int fl_bwd(void *st, const struct attn_io *io)
{
	struct fstate *f = (struct fstate *)st;
	if (f->s.dtype == DT_BF16)
		return f->s.hd == 64 ? run_bwd<__nv_bfloat16, 64>(f, io) : run_bwd<__nv_bfloat16, 128>(f, io);
	return f->s.hd == 64 ? run_bwd<__half, 64>(f, io) : run_bwd<__half, 128>(f, io);
}

extern "C" const struct kern_ops kern_flash = {
	"flash",
	"tiled flash attention, mma.sync + cp.async, plan-driven (any mask, block-sparse, GQA), fwd+bwd",
	KC_GPU | KC_FWD | KC_BWD | KC_BF16 | KC_FP16 | KC_GQA | KC_SLICES | KC_BLOCKS,
	NULL,
	fl_check,
	fl_init,
	fl_fwd,
	fl_bwd,
	fl_fini,
};
