/* hopper: attention for sm_90a alone (TMA, wgmma, warp specialisation),
 * driven by the same mask plan as flash.  The forward pass lives in
 * hopper_fwd.cuh (namespace hf), the backward pass in hopper_bwd.cuh and
 * hopper_bwd64.cuh (namespace hb): kernels that share the plan and the few
 * PTX wrappers below, kept in one translation unit so the kernel is still
 * one table entry built for one architecture. */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <err.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
extern "C" {
#include "kernel.h"
#include "plan.h"
#include "dev.h"
}

#include <cuda.h>
#include <cudaTypedefs.h>
#include "tile.cuh"

/* ---- what both passes use: mbarriers, TMA, wgmma groups, tensor maps (the
 * plan upload and the bwd CTAs are tile.cuh's, shared with flash) */

static __device__ __forceinline__ uint32_t smaddr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void bar_init(uint32_t bar, int n)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(n) : "memory");
}

/* Arrive and add the bytes a TMA copy will complete on the barrier. */
static __device__ __forceinline__ void bar_expect(uint32_t bar, uint32_t bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

/* %= makes the label unique per inlined copy. */
static __device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity)
{
	asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
	    "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
	    "@!p bra WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

/* One box of a 4-d tensor map (element, head, row, batch) into shared
 * memory, completing on mbarrier bar. */
static __device__ __forceinline__ void tma4(uint32_t dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, uint32_t bar)
{
	asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
	    " [%0], [%1, {%2, %3, %4, %5}], [%6];"
	    :: "r"(dst), "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}

static __device__ __forceinline__ void wg_fence(void)
{
	asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

static __device__ __forceinline__ void wg_commit(void)
{
	asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N> static __device__ __forceinline__ void wg_wait(void)
{
	asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

/* The operand lists of a wgmma's fp32 accumulators d[]: the C++ side
 * (WG_Dn) and the PTX side (WG_Rn, the opening brace and n registers; the
 * caller closes it). */
#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
	"+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D16 WG_D8(0), WG_D8(8)
#define WG_D32 WG_D16, WG_D8(16), WG_D8(24)
#define WG_D64 WG_D32, WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
#define WG_D88 WG_D64, WG_D8(64), WG_D8(72), WG_D8(80)
/* the same, written only: a product's first k-step with scale-d 0, so that
 * the old values are dead before it */
#define WG_O8(i) "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), \
	"=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), "=f"(d[i + 7])
#define WG_O32 WG_O8(0), WG_O8(8), WG_O8(16), WG_O8(24)
#define WG_O64 WG_O32, WG_O8(32), WG_O8(40), WG_O8(48), WG_O8(56)
#define WG_R16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define WG_R32 WG_R16 ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_R64 WG_R32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47" \
	",%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_R88 WG_R64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79" \
	",%80,%81,%82,%83,%84,%85,%86,%87"

/* A shared-memory matrix descriptor (128-byte swizzle, groups of 8 rows
 * 1024 bytes apart) as its low word: the address's low 18 bits in 16-byte
 * units (bits 0-13; in a cluster the CTA's rank sits above them) and lbo,
 * the bytes between 64-element blocks of an MN-major operand (bits 16-29;
 * K-major operands ignore it).  A k-step's descriptor is its tile's low
 * word plus the step's offset / 16: a CTA's shared memory is under 256
 * KB, so the add never carries out of the address field, and with the
 * tile's word in a uniform register a wgmma costs one add.  (Masking and
 * shifting each k-step's address cost about eight instructions a wgmma,
 * vector and uniform: NOTES, round 16.) */
static __device__ __forceinline__ uint32_t dlo(uint32_t addr, uint32_t lbo)
{
	return (addr & 0x3ffff) >> 4 | lbo >> 4 << 16;
}

static __device__ __forceinline__ uint64_t dsc(uint32_t lo, uint32_t bytes)
{
	return (uint64_t)(1u << 30 | 1024 >> 4) << 32 | (lo + (bytes >> 4));
}

/* v as lane 0 has it: the compiler then knows it is warp-uniform (a
 * warpgroup's index from threadIdx.x), and what is built from it (the
 * descriptors) stays in uniform registers. */
static __device__ __forceinline__ int warp_uniform(int v)
{
	return __shfl_sync(~0u, v, 0);
}

/* ex2.approx: exp2(-inf) = +0, which is what masked scores need. */
static __device__ __forceinline__ float ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/* cuTensorMapEncodeTiled from the driver the runtime has loaded, so the
 * build needs no -lcuda; NULL if the driver lacks it. */
static PFN_cuTensorMapEncodeTiled_v12000 tmap_encoder(void)
{
	static PFN_cuTensorMapEncodeTiled_v12000 encode;
	cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (encode == NULL && cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
	    cudaEnableDefault, &q) == cudaSuccess && q == cudaDriverEntryPointSuccess)
		encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
	return encode;
}

/* [batch][seq][heads][hd] as a 4-d tensor map of 128-byte-wide boxes (64
 * columns of the dtype, or 32 of fp32) of `rows` rows, 128-byte swizzle;
 * TMA zero-fills reads past seq and drops writes past it. */
static int tmap(CUtensorMap *m, const void *base, int dtype, int64_t seq, int heads, int hd, int batch,
    int rows, bool fp32 = false)
{
	PFN_cuTensorMapEncodeTiled_v12000 encode = tmap_encoder();
	const cuuint64_t es = fp32 ? 4 : 2;
	const cuuint64_t dim[4] = { (cuuint64_t)hd, (cuuint64_t)heads, (cuuint64_t)seq, (cuuint64_t)batch };
	const cuuint64_t str[3] = { hd * es, heads * hd * es, seq * heads * hd * es };
	const cuuint32_t box[4] = { fp32 ? 32u : 64u, 1, (cuuint32_t)rows, 1 }, one[4] = { 1, 1, 1, 1 };
	CUresult r;

	if (encode == NULL)
		return KERN_ERR;
	r = encode(m, fp32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : dtype == DT_BF16 ?
	    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
	    4, (void *)base, dim, str, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
	    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS) {
		warnx("hopper: cuTensorMapEncodeTiled: error %d", (int)r);
		return KERN_ERR;
	}
	return KERN_OK;
}

#include "hopper_fwd.cuh"
#include "hopper_bwd.cuh"

struct hstate {
	void *f, *b;               /* a pass's state, NULL where it cannot run */
};

/* The kernels are built for sm_90a alone: on any other device they would
 * fail at launch, so say so before. */
static const char *hp_device(void)
{
	int dev, major = 0, minor = 0;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return "no CUDA device";
	}
	return major == 9 && minor == 0 ? NULL : "needs compute capability 9.0 (sm_90a)";
}

static const char *hp_check(const struct attn_shape *s, const struct mask *m, int pass)
{
	const char *why = hp_device();

	if (why != NULL)
		return why;
	return pass == PASS_FWD ? hf::check(s, m) : hb::check(s, m);
}

static void hp_fini(void *st)
{
	struct hstate *h = (struct hstate *)st;

	if (h == NULL)
		return;
	if (h->f != NULL)
		hf::fini(h->f);
	if (h->b != NULL)
		hb::fini(h->b);
	free(h);
}

/* Each pass is prepared only where it can run, so a shape that one pass
 * refuses still runs the other. */
static int hp_init(void **st, const struct attn_shape *s, const struct mask *m, char *err, size_t errlen)
{
	struct hstate *h = (struct hstate *)calloc(1, sizeof *h);
	int rc = KERN_OK;

	*st = NULL;
	if (h == NULL) {
		snprintf(err, errlen, "out of host memory");
		return KERN_ERR;
	}
	if (hf::check(s, m) == NULL)
		rc = hf::init(&h->f, s, m, err, errlen);
	if (rc == KERN_OK && hb::check(s, m) == NULL)
		rc = hb::init(&h->b, s, m, err, errlen);
	if (rc != KERN_OK) {
		hp_fini(h);
		return rc;
	}
	*st = h;
	return KERN_OK;
}

static int hp_fwd(void *st, const struct attn_io *io)
{
	struct hstate *h = (struct hstate *)st;

	return h->f != NULL ? hf::run(h->f, io) : KERN_ERR;
}

static int hp_bwd(void *st, const struct attn_io *io)
{
	struct hstate *h = (struct hstate *)st;

	return h->b != NULL ? hb::run(h->b, io) : KERN_ERR;
}

extern "C" const struct kern_ops kern_hopper = {
	"hopper",
	"sm_90a attention: TMA, wgmma, warp-specialised, plan-driven (any mask, GQA), fwd+bwd",
	KC_GPU | KC_FWD | KC_BWD | KC_BF16 | KC_FP16 | KC_GQA | KC_SLICES | KC_BLOCKS | KC_DET,
	NULL,
	hp_check,
	hp_init,
	hp_fwd,
	hp_bwd,
	hp_fini,
};
