/* Buffer operations a CP strategy needs, the same calls on both backends:
 * device memory and CUDA streams (COMM_NCCL), or host memory where streams
 * and events are no-ops (COMM_MPI).  Element types are comm.h's CT_*; the
 * dtype of attention tensors is CT_BF16 or CT_FP16.
 *
 * Streams: 0 computes; 1 and 2 carry ring traffic so that it overlaps with
 * stream 0.  Work on one stream completes in order; across streams only
 * ops_record/ops_wait order it.  Errors (a failed CUDA call) are sticky:
 * ops_failed reports the first one. */
#ifndef CP_OPS_H
#define CP_OPS_H
#include <stddef.h>
#include <stdint.h>

enum { OPS_NSTREAM = 3, OPS_NEVENT = 16, OPS_NMARK = 24, OPS_IPC = 64 };

struct ops {
	int gpu;
	void *flush;                    /* GPU: twice the L2, emptied before a timed pass */
	size_t flushlen;
	void *stream[OPS_NSTREAM];      /* cudaStream_t */
	void *ev[OPS_NEVENT];           /* cudaEvent_t; ev[0], ev[1] time a pass */
	size_t inuse, peak, base;       /* host bytes (CPU backend) */
	double t0;                      /* ops_tstart on the host, ms */
	/* LONGATTN_CP_TRACE: points of a pass, on a stream and on the host */
	int trace, nmark;
	void *mev[OPS_NMARK];           /* cudaEvent_t */
	const char *mwhat[OPS_NMARK];
	double mhost[OPS_NMARK];        /* ms since ops_tstart */
	char why[160];                  /* the first failure */
};

/* gpu: device buffers (needs CUDA in this build). */
int   ops_init(struct ops *x, int gpu, char *err, size_t errlen);
void  ops_fini(struct ops *x);
const char *ops_failed(const struct ops *x);
/* The first failure back to was (what ops_failed said before a step whose
 * failures the caller handles), CUDA's last error cleared. */
void ops_unfail(struct ops *x, const char *was);

/* NULL when out of memory (no message: the caller reports OOM). */
void *ops_alloc(struct ops *x, size_t n);
void  ops_free(struct ops *x, void *p);
/* Peak bytes allocated since ops_peak_reset, above what was in use then. */
void   ops_peak_reset(struct ops *x);
size_t ops_peak(const struct ops *x);

/* Host <-> buffer, synchronous. */
void ops_upload(struct ops *x, void *dst, const void *hsrc, size_t n);
void ops_download(struct ops *x, void *hdst, const void *src, size_t n);

/* Buffer to buffer on stream s.  copy2d: rows of width bytes. */
void ops_copy(struct ops *x, void *dst, const void *src, size_t n, int s);
void ops_copy2d(struct ops *x, void *dst, size_t dpitch, const void *src, size_t spitch,
                size_t width, size_t rows, int s);
/* All bits set: NaN in bf16, fp16 and f32. */
void ops_poison(struct ops *x, void *dst, size_t n, int s);
void ops_zero(struct ops *x, void *dst, size_t n, int s);
void ops_fill(struct ops *x, float *dst, float v, size_t n, int s);

/* dst[r*dpitch + i] += src[r*spitch + i] for i < width, r < rows (pitches
 * in elements); src of type CT_F32, CT_BF16 or CT_FP16. */
void ops_acc2d(struct ops *x, float *dst, size_t dpitch, const void *src, int type,
               size_t spitch, size_t width, size_t rows, int s);
/* fp32 -> type (CT_BF16, CT_FP16 or CT_F32), round to nearest even. */
void ops_cast(struct ops *x, void *dst, int type, const float *src, size_t n, int s);
/* Runs of E-element tokens, both of type: for each {dst token, src token,
 * tokens} of runs[0..n) (an ops buffer: device memory on the GPU),
 * dst[t] = dst[t] + src[u], summed in fp32 and rounded once. */
void ops_addruns(struct ops *x, void *dst, int type, const void *src, const int64_t *runs,
                 int n, int64_t E, int s);

/* The LSE merge of a partial result into an fp32 accumulator:
 *   o  float [b][sq][h][d], lse float [b][h][sq]   (accumulator)
 *   op type  [b][sq][h][d], lsep float [b][h][sq]  (one piece's result)
 * lse' = log(e^lse + e^lsep), o' = o e^(lse-lse') + op e^(lsep-lse');
 * a -INFINITY on either side contributes nothing. */
void ops_merge(struct ops *x, float *o, float *lse, const void *op, const float *lsep,
               int type, int b, int64_t sq, int h, int d, int s);

/* Another process's device memory on this node (CUDA IPC; GPU only, -1 or
 * NULL with x->why elsewhere): the handle, OPS_IPC bytes, of the
 * allocation buf starts (an ops_alloc'd pointer), and that allocation
 * mapped here from a handle; close unmaps it. */
int   ops_ipc_get(struct ops *x, const void *buf, void *handle);
void *ops_ipc_open(struct ops *x, const void *handle);
void  ops_ipc_close(struct ops *x, void *p);
/* Stream memory operations (GPU only): stream s waits until the 32-bit
 * word at addr, this device's, reaches v (counted modulo 2^32, as CUDA's
 * GEQ compares); or writes v at addr, this device's or a peer's mapped by
 * ops_ipc_open, once the stream's work so far is done and visible. */
void  ops_wait32(struct ops *x, int s, const void *addr, uint32_t v);
void  ops_write32(struct ops *x, int s, void *addr, uint32_t v);

/* Ordering across streams: ev i recorded on stream s, then stream t waits
 * for it. */
void ops_record(struct ops *x, int ev, int s);
void ops_wait(struct ops *x, int t, int ev);
void ops_sync(struct ops *x);                 /* every stream done */

/* Timing a pass: flush, start before, stop after (stream 0 must have
 * waited for the other streams' work); stop returns milliseconds.  On the
 * GPU flush writes twice the L2 on stream 0, as kbench does before each
 * pass: the pass starts with a cold cache, and its first launches are
 * enqueued while the write runs, so both tools charge host time alike. */
void   ops_flush(struct ops *x);
void   ops_tstart(struct ops *x);
double ops_tstop(struct ops *x);
/* With x->trace set: the moment stream s reaches this point, and the
 * moment the host enqueued it, both from ops_tstart; ops_marks after
 * ops_tstop gives them in ms (gpu and host, x->nmark entries).  Where
 * the host time is the later, the GPU waited for the host. */
void   ops_mark(struct ops *x, int s, const char *what);
void   ops_marks(struct ops *x, double *gpu, double *host);

#ifdef HAVE_CUDA
/* The device side (lib/cp/ops_cuda.cu), called by ops_cpu.c when x->gpu. */
int   opsg_init(struct ops *x, char *err, size_t errlen);
void  opsg_fini(struct ops *x);
void  opsg_check(struct ops *x, const char *what);
void  opsg_upload(struct ops *x, void *dst, const void *hsrc, size_t n);
void  opsg_download(struct ops *x, void *hdst, const void *src, size_t n);
void  opsg_copy2d(struct ops *x, void *dst, size_t dpitch, const void *src, size_t spitch,
                  size_t width, size_t rows, int s);
void  opsg_memset(struct ops *x, void *dst, int byte, size_t n, int s);
void  opsg_fill(struct ops *x, float *dst, float v, size_t n, int s);
void  opsg_acc2d(struct ops *x, float *dst, size_t dpitch, const void *src, int type,
                 size_t spitch, size_t width, size_t rows, int s);
void  opsg_cast(struct ops *x, void *dst, int type, const float *src, size_t n, int s);
void  opsg_addruns(struct ops *x, void *dst, int type, const void *src, const int64_t *runs,
                   int n, int64_t E, int s);
void  opsg_flush(struct ops *x);
void  opsg_unfail(struct ops *x);
void  opsg_tstart(struct ops *x);
void  opsg_merge(struct ops *x, float *o, float *lse, const void *op, const float *lsep,
                 int type, int b, int64_t sq, int h, int d, int s);
void  opsg_record(struct ops *x, int ev, int s);
void  opsg_wait(struct ops *x, int t, int ev);
void  opsg_sync(struct ops *x);
double opsg_elapsed(struct ops *x, int e0, int e1);
void  opsg_mark(struct ops *x, int i, int s);
int   opsg_ipc_get(struct ops *x, const void *buf, void *handle);
void *opsg_ipc_open(struct ops *x, const void *handle);
void  opsg_ipc_close(struct ops *x, void *p);
void  opsg_wait32(struct ops *x, int s, const void *addr, uint32_t v);
void  opsg_write32(struct ops *x, int s, void *addr, uint32_t v);
double opsg_markms(struct ops *x, int i);
#endif

#endif
