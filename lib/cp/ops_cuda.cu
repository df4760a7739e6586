/* The device side of lib/cp/ops.h: streams, events, and the few elementwise
 * kernels a strategy needs between attention calls (accumulate, cast, LSE
 * merge).  They are memory-bound; one grid-stride loop each is enough. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "comm.h"
#include "ops.h"
}

#define S(x, i) ((cudaStream_t)(x)->stream[i])
#define E(x, i) ((cudaEvent_t)(x)->ev[i])

static void fail(struct ops *x, const char *what, cudaError_t e)
{
	if (e != cudaSuccess && !x->why[0])
		snprintf(x->why, sizeof x->why, "%s: %s", what, cudaGetErrorString(e));
}

static unsigned blocks(size_t n)
{
	size_t b = (n + 255) / 256;

	return b > 65535 ? 65535 : b < 1 ? 1 : (unsigned)b;
}

__device__ static inline float ld(const void *p, int type, size_t i)
{
	if (type == CT_F32)
		return ((const float *)p)[i];
	if (type == CT_FP16)
		return __half2float(((const __half *)p)[i]);
	return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

__device__ static inline void st(void *p, int type, size_t i, float v)
{
	if (type == CT_F32)
		((float *)p)[i] = v;
	else if (type == CT_FP16)
		((__half *)p)[i] = __float2half_rn(v);
	else
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
}

__global__ static void k_fill(float *d, float v, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		d[i] = v;
}

__global__ static void k_acc2d(float *d, size_t dp, const void *s, int type, size_t sp,
                               size_t w, size_t rows)
{
	size_t n = w * rows;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / w, c = i % w;
		d[r * dp + c] += ld(s, type, r * sp + c);
	}
}

__global__ static void k_cast(void *d, int type, const float *s, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st(d, type, i, s[i]);
}

/* The same, 8 elements a thread in 16-byte words, where tokens are whole
 * words (E % 8 == 0, aligned buffers): the scalar loop ran at a fraction
 * of the memory's rate, and a full mask's backward pass returns 64 MB. */
template <typename T>
__global__ static void k_addruns8(T *d, const T *s, const int64_t *runs, int64_t E)
{
	const int64_t *r = runs + 3 * blockIdx.y;
	size_t n = r[2] * E / 8;
	uint4 *dv = (uint4 *)(d + r[0] * E);
	const uint4 *sv = (const uint4 *)(s + r[1] * E);

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		uint4 a = dv[i], b = sv[i];
		T *x = (T *)&a;
		const T *y = (const T *)&b;
#pragma unroll
		for (int j = 0; j < 8; j++)
			x[j] = (T)((float)x[j] + (float)y[j]);
		dv[i] = a;
	}
}

/* Block row y adds run y; the runs are a few, their tokens many. */
__global__ static void k_addruns(void *d, int type, const void *s, const int64_t *runs, int64_t E)
{
	const int64_t *r = runs + 3 * blockIdx.y;
	size_t n = r[2] * E, d0 = r[0] * E, s0 = r[1] * E;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st(d, type, d0 + i, ld(d, type, d0 + i) + ld(s, type, s0 + i));
}

/* One warp per (b, q, h) row: the weights once, then the d elements. */
__global__ static void k_merge(float *o, float *lse, const void *op, const float *lsep,
                               int type, int b, int64_t sq, int h, int d)
{
	size_t rows = (size_t)b * sq * h;
	size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
	size_t nwarp = (size_t)gridDim.x * blockDim.x / 32;
	int lane = threadIdx.x % 32;

	for (size_t r = warp; r < rows; r += nwarp) {
		size_t hi = r % h, qi = (r / h) % sq, bi = r / h / sq;
		size_t li = (bi * h + hi) * sq + qi, oi = r * d;
		float l1 = lse[li], l2 = lsep[li], m, l, w1, w2;

		if (l2 == -INFINITY)
			continue;
		m = fmaxf(l1, l2);
		l = m + logf(expf(l1 - m) + expf(l2 - m));
		w1 = expf(l1 - l);
		w2 = expf(l2 - l);
		for (int i = lane; i < d; i += 32)
			o[oi + i] = o[oi + i] * w1 + ld(op, type, oi + i) * w2;
		__syncwarp();
		if (lane == 0)
			lse[li] = l;
	}
}

extern "C" {

int opsg_init(struct ops *x, char *err, size_t errlen)
{
	cudaError_t e = cudaSuccess;

	for (int i = 0; i < OPS_NSTREAM && e == cudaSuccess; i++)
		e = cudaStreamCreateWithFlags((cudaStream_t *)&x->stream[i], cudaStreamNonBlocking);
	for (int i = 0; i < OPS_NEVENT && e == cudaSuccess; i++)
		/* Only ev 0 and 1 time; the others just order streams. */
		e = cudaEventCreateWithFlags((cudaEvent_t *)&x->ev[i], i < 2 ? cudaEventDefault : cudaEventDisableTiming);
	if (e != cudaSuccess) {
		snprintf(err, errlen, "streams: %s", cudaGetErrorString(e));
		return -1;
	}
	/* As kbench's: outside the tracker, not the strategy's memory */
	int dev = 0, l2 = 0;
	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
	x->flushlen = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
	if ((e = cudaMalloc(&x->flush, x->flushlen)) != cudaSuccess) {
		snprintf(err, errlen, "L2 flush buffer: %s", cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

void opsg_fini(struct ops *x)
{
	cudaDeviceSynchronize();
	for (int i = 0; i < OPS_NEVENT; i++)
		if (x->ev[i])
			cudaEventDestroy(E(x, i));
	for (int i = 0; i < OPS_NMARK; i++)
		if (x->mev[i])
			cudaEventDestroy((cudaEvent_t)x->mev[i]);
	for (int i = 0; i < OPS_NSTREAM; i++)
		if (x->stream[i])
			cudaStreamDestroy(S(x, i));
	cudaFree(x->flush);
}

void opsg_check(struct ops *x, const char *what)
{
	fail(x, what, cudaGetLastError());
}

/* On stream 0 and waited for: the streams are non-blocking, so a plain
 * cudaMemcpy (legacy stream) would not be ordered with their work. */
void opsg_upload(struct ops *x, void *dst, const void *hsrc, size_t n)
{
	opsg_sync(x);
	fail(x, "upload", cudaMemcpyAsync(dst, hsrc, n, cudaMemcpyHostToDevice, S(x, 0)));
	fail(x, "upload", cudaStreamSynchronize(S(x, 0)));
}

void opsg_download(struct ops *x, void *hdst, const void *src, size_t n)
{
	opsg_sync(x);
	fail(x, "download", cudaMemcpyAsync(hdst, src, n, cudaMemcpyDeviceToHost, S(x, 0)));
	fail(x, "download", cudaStreamSynchronize(S(x, 0)));
}

void opsg_copy2d(struct ops *x, void *dst, size_t dpitch, const void *src, size_t spitch,
                 size_t width, size_t rows, int s)
{
	fail(x, "copy", cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
	                                  cudaMemcpyDefault, S(x, s)));
}

void opsg_memset(struct ops *x, void *dst, int byte, size_t n, int s)
{
	fail(x, "memset", cudaMemsetAsync(dst, byte, n, S(x, s)));
}

void opsg_fill(struct ops *x, float *dst, float v, size_t n, int s)
{
	if (n == 0)
		return;
	k_fill<<<blocks(n), 256, 0, S(x, s)>>>(dst, v, n);
	opsg_check(x, "fill");
}

void opsg_acc2d(struct ops *x, float *dst, size_t dpitch, const void *src, int type,
                size_t spitch, size_t width, size_t rows, int s)
{
	if (width * rows == 0)
		return;
	k_acc2d<<<blocks(width * rows), 256, 0, S(x, s)>>>(dst, dpitch, src, type, spitch, width, rows);
	opsg_check(x, "accumulate");
}

void opsg_cast(struct ops *x, void *dst, int type, const float *src, size_t n, int s)
{
	if (n == 0)
		return;
	k_cast<<<blocks(n), 256, 0, S(x, s)>>>(dst, type, src, n);
	opsg_check(x, "cast");
}

void opsg_addruns(struct ops *x, void *dst, int type, const void *src, const int64_t *runs,
                  int n, int64_t E, int s)
{
	/* About 2048 blocks a launch (enough for a run of every token of a
	 * shard), at least 8 a run; at most 65535 runs a launch */
	int wide = E % 8 == 0 && type != CT_F32 && ((uintptr_t)dst | (uintptr_t)src) % 16 == 0;

	for (int i = 0; i < n; i += 65535) {
		int m = n - i < 65535 ? n - i : 65535;
		dim3 g(m < 256 ? 2048 / m : 8, m);

		if (wide && type == CT_FP16)
			k_addruns8<<<g, 256, 0, S(x, s)>>>((__half *)dst, (const __half *)src, runs + 3 * i, E);
		else if (wide)
			k_addruns8<<<g, 256, 0, S(x, s)>>>((__nv_bfloat16 *)dst, (const __nv_bfloat16 *)src,
			                                   runs + 3 * i, E);
		else
			k_addruns<<<g, 256, 0, S(x, s)>>>(dst, type, src, runs + 3 * i, E);
	}
	opsg_check(x, "add");
}

void opsg_merge(struct ops *x, float *o, float *lse, const void *op, const float *lsep,
                int type, int b, int64_t sq, int h, int d, int s)
{
	size_t rows = (size_t)b * sq * h;

	if (rows == 0)
		return;
	k_merge<<<blocks(rows * 32), 256, 0, S(x, s)>>>(o, lse, op, lsep, type, b, sq, h, d);
	opsg_check(x, "merge");
}

void opsg_record(struct ops *x, int ev, int s)
{
	fail(x, "event", cudaEventRecord(E(x, ev), S(x, s)));
}

void opsg_wait(struct ops *x, int t, int ev)
{
	fail(x, "event wait", cudaStreamWaitEvent(S(x, t), E(x, ev), 0));
}

/* The whole device: kernels' init may have used the legacy stream, and
 * the comm layer its own side streams. */
void opsg_sync(struct ops *x)
{
	for (int i = 0; i < OPS_NSTREAM; i++)
		fail(x, "stream", cudaStreamSynchronize(S(x, i)));
	fail(x, "device", cudaDeviceSynchronize());
}

void opsg_unfail(struct ops *x)
{
	(void)x;
	(void)cudaGetLastError();
}

void opsg_flush(struct ops *x)
{
	fail(x, "flush", cudaMemsetAsync(x->flush, 0, x->flushlen, S(x, 0)));
}

void opsg_tstart(struct ops *x)
{
	opsg_record(x, 0, 0);
}

void opsg_mark(struct ops *x, int i, int s)
{
	if (x->mev[i] == NULL)
		fail(x, "event", cudaEventCreate((cudaEvent_t *)&x->mev[i]));
	if (x->mev[i] != NULL)
		fail(x, "event", cudaEventRecord((cudaEvent_t)x->mev[i], S(x, s)));
}

double opsg_markms(struct ops *x, int i)
{
	float ms = 0;

	fail(x, "elapsed", cudaEventElapsedTime(&ms, E(x, 0), (cudaEvent_t)x->mev[i]));
	return ms;
}

int opsg_ipc_get(struct ops *x, const void *buf, void *handle)
{
	cudaIpcMemHandle_t h;
	cudaError_t e = cudaIpcGetMemHandle(&h, (void *)buf);

	fail(x, "ipc handle", e);
	memcpy(handle, &h, sizeof h < (size_t)OPS_IPC ? sizeof h : (size_t)OPS_IPC);
	return e == cudaSuccess ? 0 : -1;
}

void *opsg_ipc_open(struct ops *x, const void *handle)
{
	cudaIpcMemHandle_t h;
	void *p = NULL;

	memcpy(&h, handle, sizeof h < (size_t)OPS_IPC ? sizeof h : (size_t)OPS_IPC);
	fail(x, "ipc open", cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
	return p;
}

void opsg_ipc_close(struct ops *x, void *p)
{
	if (p != NULL)
		fail(x, "ipc close", cudaIpcCloseMemHandle(p));
}

/* From the driver the runtime has loaded, so the build needs no -lcuda */
typedef CUresult (*memop_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static memop_fn memop(const char *name)
{
	cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		return NULL;
	return (memop_fn)fn;
}

static void memop_call(struct ops *x, const char *name, memop_fn *fn, int s, const void *addr,
                       uint32_t v, unsigned flags)
{
	if (*fn == NULL)
		*fn = memop(name);
	if (*fn == NULL) {
		fail(x, name, cudaErrorNotSupported);
		return;
	}
	if ((*fn)((CUstream)S(x, s), (CUdeviceptr)(uintptr_t)addr, v, flags) != CUDA_SUCCESS)
		fail(x, name, cudaErrorNotSupported);
}

void opsg_wait32(struct ops *x, int s, const void *addr, uint32_t v)
{
	static memop_fn fn;

	memop_call(x, "cuStreamWaitValue32", &fn, s, addr, v, CU_STREAM_WAIT_VALUE_GEQ);
}

void opsg_write32(struct ops *x, int s, void *addr, uint32_t v)
{
	static memop_fn fn;

	memop_call(x, "cuStreamWriteValue32", &fn, s, addr, v, CU_STREAM_WRITE_VALUE_DEFAULT);
}

double opsg_elapsed(struct ops *x, int e0, int e1)
{
	float ms = 0;

	fail(x, "elapsed", cudaEventElapsedTime(&ms, E(x, e0), E(x, e1)));
	return ms;
}

}
