/* The CP buffer operations: host code for the MPI backend, and the front
 * that hands device buffers to lib/cp/ops_cuda.cu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "dev.h"
#include "half.h"
#include "ops.h"

/* Host blocks carry their size in front, for the peak. */
#define HDR 64

/* A device buffer's operation is the CUDA side's, and the function ends
 * there; a host buffer's is the code after. */
#ifdef HAVE_CUDA
#define ON_GPU(call) do { if (x->gpu) { call; return; } } while (0)
#else
#define ON_GPU(call) (void)x
#endif

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int ops_init(struct ops *x, int gpu, char *err, size_t errlen)
{
	memset(x, 0, sizeof *x);
	x->gpu = gpu;
	if (!gpu)
		return 0;
#ifdef HAVE_CUDA
	return opsg_init(x, err, errlen);
#else
	snprintf(err, errlen, "device buffers: this build has no CUDA");
	return -1;
#endif
}

void ops_fini(struct ops *x)
{
	ON_GPU(opsg_fini(x));
}

const char *ops_failed(const struct ops *x)
{
	return x->why[0] ? x->why : NULL;
}

void ops_unfail(struct ops *x, const char *was)
{
	snprintf(x->why, sizeof x->why, "%s", was);
	ON_GPU(opsg_unfail(x));
}

void *ops_alloc(struct ops *x, size_t n)
{
	char *p;

	if (x->gpu) {
		void *d;
		/* Never hand out a zero-byte block: NULL means OOM here. */
		if (dev_alloc(&d, n ? n : 16) != 0)
			return NULL;
		return d;
	}
	if ((p = malloc(n + HDR)) == NULL)
		return NULL;
	memcpy(p, &n, sizeof n);
	x->inuse += n;
	if (x->inuse > x->peak)
		x->peak = x->inuse;
	return p + HDR;
}

void ops_free(struct ops *x, void *p)
{
	size_t n;

	if (p == NULL)
		return;
	if (x->gpu) {
		dev_free(p);
		return;
	}
	memcpy(&n, (char *)p - HDR, sizeof n);
	x->inuse -= n;
	free((char *)p - HDR);
}

void ops_peak_reset(struct ops *x)
{
	if (x->gpu) {
		dev_peak_reset();
		x->base = dev_inuse();
	} else {
		x->peak = x->inuse;
		x->base = x->inuse;
	}
}

size_t ops_peak(const struct ops *x)
{
	size_t p = x->gpu ? dev_peak() : x->peak;

	return p > x->base ? p - x->base : 0;
}

void ops_upload(struct ops *x, void *dst, const void *hsrc, size_t n)
{
	ON_GPU(opsg_upload(x, dst, hsrc, n));
	memcpy(dst, hsrc, n);
}

void ops_download(struct ops *x, void *hdst, const void *src, size_t n)
{
	ON_GPU(opsg_download(x, hdst, src, n));
	memcpy(hdst, src, n);
}

void ops_copy(struct ops *x, void *dst, const void *src, size_t n, int s)
{
	ops_copy2d(x, dst, n, src, n, n, 1, s);
}

void ops_copy2d(struct ops *x, void *dst, size_t dpitch, const void *src, size_t spitch,
                size_t width, size_t rows, int s)
{
	if (width == 0 || rows == 0 || dst == src)
		return;
	ON_GPU(opsg_copy2d(x, dst, dpitch, src, spitch, width, rows, s));
	(void)s;
	for (size_t r = 0; r < rows; r++)
		memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void set(struct ops *x, void *dst, int byte, size_t n, int s)
{
	ON_GPU(opsg_memset(x, dst, byte, n, s));
	(void)s;
	memset(dst, byte, n);
}

void ops_poison(struct ops *x, void *dst, size_t n, int s)
{
	set(x, dst, 0xff, n, s);
}

void ops_zero(struct ops *x, void *dst, size_t n, int s)
{
	set(x, dst, 0, n, s);
}

void ops_fill(struct ops *x, float *dst, float v, size_t n, int s)
{
	ON_GPU(opsg_fill(x, dst, v, n, s));
	(void)s;
	for (size_t i = 0; i < n; i++)
		dst[i] = v;
}

static inline float load(const void *p, int type, size_t i)
{
	switch (type) {
	case CT_F32:  return ((const float *)p)[i];
	case CT_FP16: return half_from_fp16(((const uint16_t *)p)[i]);
	default:      return half_from_bf16(((const uint16_t *)p)[i]);
	}
}

static inline void store(void *p, int type, size_t i, float v)
{
	switch (type) {
	case CT_F32:  ((float *)p)[i] = v; break;
	case CT_FP16: ((uint16_t *)p)[i] = half_to_fp16(v); break;
	default:      ((uint16_t *)p)[i] = half_to_bf16(v); break;
	}
}

void ops_acc2d(struct ops *x, float *dst, size_t dpitch, const void *src, int type,
               size_t spitch, size_t width, size_t rows, int s)
{
	ON_GPU(opsg_acc2d(x, dst, dpitch, src, type, spitch, width, rows, s));
	(void)s;
	for (size_t r = 0; r < rows; r++)
		for (size_t i = 0; i < width; i++)
			dst[r * dpitch + i] += load(src, type, r * spitch + i);
}

void ops_cast(struct ops *x, void *dst, int type, const float *src, size_t n, int s)
{
	ON_GPU(opsg_cast(x, dst, type, src, n, s));
	(void)s;
	if (type == CT_F32) {
		memmove(dst, src, n * sizeof(float));
		return;
	}
	for (size_t i = 0; i < n; i++)
		store(dst, type, i, src[i]);
}

void ops_addruns(struct ops *x, void *dst, int type, const void *src, const int64_t *runs,
                 int n, int64_t E, int s)
{
	ON_GPU(opsg_addruns(x, dst, type, src, runs, n, E, s));
	(void)s;
	for (int i = 0; i < n; i++) {
		const int64_t *r = runs + 3 * i;

		for (int64_t j = 0; j < r[2] * E; j++)
			store(dst, type, r[0] * E + j, load(dst, type, r[0] * E + j) + load(src, type, r[1] * E + j));
	}
}

void ops_merge(struct ops *x, float *o, float *lse, const void *op, const float *lsep,
               int type, int b, int64_t sq, int h, int d, int s)
{
	ON_GPU(opsg_merge(x, o, lse, op, lsep, type, b, sq, h, d, s));
	(void)s;
	for (int bi = 0; bi < b; bi++)
		for (int hi = 0; hi < h; hi++)
			for (int64_t qi = 0; qi < sq; qi++) {
				size_t li = ((size_t)bi * h + hi) * sq + qi;
				size_t oi = (((size_t)bi * sq + qi) * h + hi) * d;
				float l1 = lse[li], l2 = lsep[li], m, l, w1, w2;

				if (l2 == -INFINITY)
					continue;
				m = l1 > l2 ? l1 : l2;
				l = m + logf(expf(l1 - m) + expf(l2 - m));
				w1 = expf(l1 - l);
				w2 = expf(l2 - l);
				for (int i = 0; i < d; i++)
					o[oi + i] = o[oi + i] * w1 + load(op, type, oi + i) * w2;
				lse[li] = l;
			}
}

void ops_record(struct ops *x, int ev, int s)
{
	ON_GPU(opsg_record(x, ev, s));
	(void)ev; (void)s;
}

void ops_wait(struct ops *x, int t, int ev)
{
	ON_GPU(opsg_wait(x, t, ev));
	(void)t; (void)ev;
}

void ops_sync(struct ops *x)
{
	ON_GPU(opsg_sync(x));
}

void ops_flush(struct ops *x)
{
	ON_GPU(opsg_flush(x));
}

void ops_tstart(struct ops *x)
{
	x->nmark = 0;
#ifdef HAVE_CUDA
	if (x->gpu)
		opsg_tstart(x);
#endif
	x->t0 = now_ms();
}

double ops_tstop(struct ops *x)
{
#ifdef HAVE_CUDA
	if (x->gpu) {
		opsg_record(x, 1, 0);
		opsg_sync(x);
		return opsg_elapsed(x, 0, 1);
	}
#else
	(void)x;
#endif
	return now_ms() - x->t0;
}

void ops_mark(struct ops *x, int s, const char *what)
{
	if (!x->trace || x->nmark == OPS_NMARK)
		return;
#ifdef HAVE_CUDA
	if (x->gpu)
		opsg_mark(x, x->nmark, s);
#else
	(void)s;
#endif
	x->mwhat[x->nmark] = what;
	x->mhost[x->nmark++] = now_ms() - x->t0;
}

/* On the CPU backend every operation has ended when it returns, so the
 * host's time is the stream's. */
void ops_marks(struct ops *x, double *gpu, double *host)
{
	for (int i = 0; i < x->nmark; i++) {
		host[i] = x->mhost[i];
		gpu[i] = x->mhost[i];
#ifdef HAVE_CUDA
		if (x->gpu)
			gpu[i] = opsg_markms(x, i);
#endif
	}
}

/* CUDA IPC and stream memory operations exist on the GPU only: the CPU
 * backend's callers do not call them, and a build without CUDA says so. */
static int gpu_only(struct ops *x, const char *what)
{
	if (!x->why[0])
		snprintf(x->why, sizeof x->why, "%s: device buffers only", what);
	return -1;
}

int ops_ipc_get(struct ops *x, const void *buf, void *handle)
{
#ifdef HAVE_CUDA
	if (x->gpu)
		return opsg_ipc_get(x, buf, handle);
#endif
	(void)buf;
	(void)handle;
	return gpu_only(x, "ipc");
}

void *ops_ipc_open(struct ops *x, const void *handle)
{
#ifdef HAVE_CUDA
	if (x->gpu)
		return opsg_ipc_open(x, handle);
#endif
	(void)handle;
	gpu_only(x, "ipc");
	return NULL;
}

void ops_ipc_close(struct ops *x, void *p)
{
	ON_GPU(opsg_ipc_close(x, p));
	(void)p;
}

void ops_wait32(struct ops *x, int s, const void *addr, uint32_t v)
{
	ON_GPU(opsg_wait32(x, s, addr, v));
	(void)s, (void)addr, (void)v;
	gpu_only(x, "stream wait");
}

void ops_write32(struct ops *x, int s, void *addr, uint32_t v)
{
	ON_GPU(opsg_write32(x, s, addr, v));
	(void)s, (void)addr, (void)v;
	gpu_only(x, "stream write");
}
