/* kbench on the GPU: device buffers through the tracker of dev.h, CUDA
 * events around each iteration, the L2 flushed between iterations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dev.h"
#include "kb.h"
#include "util.h"

static void *flushbuf;
static size_t flushlen;
static cudaStream_t stream;

int kb_gpu_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

int kb_gpu_open(int dev, char *name, size_t len, char *err, size_t errlen)
{
	struct cudaDeviceProp p;
	cudaError_t e;

	if ((e = cudaSetDevice(dev)) != cudaSuccess ||
	    (e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess ||
	    (e = cudaStreamCreate(&stream)) != cudaSuccess) {
		snprintf(err, errlen, "device %d: %s", dev, cudaGetErrorString(e));
		return -1;
	}
	snprintf(name, len, "%s", p.name);
	/* Twice the L2, outside the tracker: it is not the kernel's memory. */
	flushlen = 2 * (size_t)(p.l2CacheSize > 0 ? p.l2CacheSize : 64 << 20);
	if ((e = cudaMalloc(&flushbuf, flushlen)) != cudaSuccess) {
		snprintf(err, errlen, "device %d: L2 flush buffer: %s", dev, cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

static int cuda_failed(struct kb_result *r, const char *what)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess)
		e = cudaStreamSynchronize(stream);
	if (e == cudaSuccess)
		return 0;
	r->status = e == cudaErrorMemoryAllocation ? KB_OOM : KB_ERROR;
	snprintf(r->why, sizeof r->why, "%s: %s", what, cudaGetErrorString(e));
	return 1;
}

static int failed(struct kb_result *r, int rc, const char *what)
{
	if (rc == KERN_OK)
		return cuda_failed(r, what);
	r->status = rc == KERN_OOM ? KB_OOM : KB_ERROR;
	snprintf(r->why, sizeof r->why, "%s failed", what);
	return 1;
}

static int pass(const struct kb_job *j, void *st, const struct attn_io *io, int which)
{
	return which == PASS_FWD ? j->kern->fwd(st, io) : j->kern->bwd(st, io);
}

static void *down(const void *dp, size_t n)
{
	void *h = xmalloc(n);

	if (cudaMemcpy(h, dp, n, cudaMemcpyDeviceToHost) != cudaSuccess)
		memset(h, 0xff, n);    /* NaN: a failed copy must not pass */
	return h;
}

void kb_run_gpu(const struct kb_job *j, struct kb_result *r)
{
	const struct attn_shape *s = &j->shape;
	struct kb_data d;
	struct attn_io io = { 0 };
	void *st = NULL;
	double *ms = xmalloc(j->iters * sizeof *ms);
	cudaEvent_t e0 = NULL, e1 = NULL;
	char err[200] = "";
	size_t base, nq2, nk2, nl4;
	float t;
	int rc;

	memset(r, 0, sizeof *r);
	for (int i = 0; i < KB_NERR; i++)
		r->err[i] = -1;
	r->same = -1;
	memset(&d, 0, sizeof d);
	nq2 = (size_t)s->batch * s->sq * s->hq * s->hd * 2;
	nk2 = (size_t)s->batch * s->sk * s->hkv * s->hd * 2;
	nl4 = (size_t)s->batch * s->hq * s->sq * sizeof(float);
	io.stream = stream;
	/* Everything the row allocates counts: plans, workspace, tensors. */
	base = dev_inuse();
	dev_peak_reset();
	rc = j->kern->init(&st, s, j->mask, err, sizeof err);
	if (rc != KERN_OK) {
		st = NULL;
		r->status = rc == KERN_OOM ? KB_OOM : KB_ERROR;
		snprintf(r->why, sizeof r->why, "init: %s", err[0] ? err : "failed");
		(void)cudaGetLastError();
		goto out;
	}
	if (dev_alloc(&io.q, nq2) || dev_alloc(&io.k, nk2) || dev_alloc(&io.v, nk2) ||
	    dev_alloc(&io.o, nq2) || dev_alloc((void **)&io.lse, nl4) ||
	    (j->pass == PASS_BWD && (dev_alloc(&io.dout, nq2) || dev_alloc(&io.dq, nq2) ||
	     dev_alloc(&io.dk, nk2) || dev_alloc(&io.dv, nk2)))) {
		r->status = KB_OOM;
		snprintf(r->why, sizeof r->why, "tensors");
		goto out;
	}
	/* After the allocations: an oom row should not wait for inputs.  Only
	 * --check needs the host copies; timed rows make theirs on the device
	 * (the host fill of a million tokens takes minutes). */
	if (j->check) {
		kb_inputs(&d, s, j->seed, j->qscale);
		cudaMemcpy(io.q, d.q, nq2, cudaMemcpyHostToDevice);
		cudaMemcpy(io.k, d.k, nk2, cudaMemcpyHostToDevice);
		cudaMemcpy(io.v, d.v, nk2, cudaMemcpyHostToDevice);
		if (j->pass == PASS_BWD)
			cudaMemcpy(io.dout, d.dout, nq2, cudaMemcpyHostToDevice);
	} else if (kb_fill_dev(io.q, nq2 / 2, s->dtype, j->seed, 0, j->qscale, stream) ||
	    kb_fill_dev(io.k, nk2 / 2, s->dtype, j->seed, 1, 1, stream) ||
	    kb_fill_dev(io.v, nk2 / 2, s->dtype, j->seed, 2, 1, stream) ||
	    (j->pass == PASS_BWD && kb_fill_dev(io.dout, nq2 / 2, s->dtype, j->seed, 3, 1, stream))) {
		cuda_failed(r, "input fill");
		goto out;
	}
	cudaStreamSynchronize(stream);
	cudaMemset(io.o, 0xff, nq2);
	cudaMemset(io.lse, 0xff, nl4);
	if (j->pass == PASS_BWD) {
		cudaMemset(io.dq, 0xff, nq2);
		cudaMemset(io.dk, 0xff, nk2);
		cudaMemset(io.dv, 0xff, nk2);
	}
	if (cuda_failed(r, "upload"))
		goto out;
	if (j->pass == PASS_BWD && failed(r, j->kern->fwd(st, &io), "forward"))
		goto out;
	if (j->check) {
		void *o = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
		float *lse = NULL;
		if (j->pass == PASS_FWD) {
			cudaMemsetAsync(io.o, 0xff, nq2, stream);
			cudaMemsetAsync(io.lse, 0xff, nl4, stream);
		} else {
			cudaMemsetAsync(io.dq, 0xff, nq2, stream);
			cudaMemsetAsync(io.dk, 0xff, nk2, stream);
			cudaMemsetAsync(io.dv, 0xff, nk2, stream);
		}
		if (failed(r, pass(j, st, &io, j->pass), "pass"))
			goto out;
		if (j->pass == PASS_FWD) {
			o = down(io.o, nq2);
			lse = down(io.lse, nl4);
		} else {
			dq = down(io.dq, nq2);
			dk = down(io.dk, nk2);
			dv = down(io.dv, nk2);
		}
		kb_verify(j, &d, o, lse, dq, dk, dv, r);
		/* bwd: the same bits again?  Required with ATTN_DETERMINISTIC. */
		if (r->status == KB_OK && j->pass == PASS_BWD) {
			void *dq2, *dk2, *dv2;
			cudaMemsetAsync(io.dq, 0xff, nq2, stream);
			cudaMemsetAsync(io.dk, 0xff, nk2, stream);
			cudaMemsetAsync(io.dv, 0xff, nk2, stream);
			if (failed(r, pass(j, st, &io, j->pass), "pass")) {
				free(dq); free(dk); free(dv);
				goto out;
			}
			dq2 = down(io.dq, nq2);
			dk2 = down(io.dk, nk2);
			dv2 = down(io.dv, nk2);
			r->same = memcmp(dq, dq2, nq2) == 0 && memcmp(dk, dk2, nk2) == 0 &&
			    memcmp(dv, dv2, nk2) == 0;
			if (!r->same && (s->flags & ATTN_DETERMINISTIC)) {
				r->status = KB_WRONG;
				snprintf(r->why, sizeof r->why, "deterministic, but a second run gave other bits");
			} else if (!r->same) {
				/* a kernel may leave state for its next pass (hopper's
				 * fusez: the dQ workspace left zero), so the second pass
				 * must be right too */
				struct kb_result r2 = *r;
				r2.status = KB_OK;
				r2.why[0] = '\0';
				kb_verify(j, &d, NULL, NULL, dq2, dk2, dv2, &r2);
				if (r2.status != KB_OK) {
					r->status = r2.status;
					snprintf(r->why, sizeof r->why, "second run: %.100s", r2.why);
				}
			}
			free(dq2); free(dk2); free(dv2);
		}
		free(o); free(lse); free(dq); free(dk); free(dv);
		if (r->status != KB_OK)
			goto out;
	}
	for (int i = 0; i < j->warmup; i++)
		if (failed(r, pass(j, st, &io, j->pass), "warm-up"))
			goto out;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (int i = 0; i < j->iters; i++) {
		cudaMemsetAsync(flushbuf, i & 0xff, flushlen, stream);
		cudaEventRecord(e0, stream);
		rc = pass(j, st, &io, j->pass);
		cudaEventRecord(e1, stream);
		if (failed(r, rc, "pass"))
			goto out;
		cudaEventElapsedTime(&t, e0, e1);
		ms[i] = t;
	}
	kb_stats(ms, j->iters, r);
	r->mem_bytes = (double)(dev_peak() - base);
out:
	if (e0 != NULL)
		cudaEventDestroy(e0);
	if (e1 != NULL)
		cudaEventDestroy(e1);
	if (st != NULL)
		j->kern->fini(st);
	dev_free(io.q); dev_free(io.k); dev_free(io.v); dev_free(io.o); dev_free(io.lse);
	dev_free(io.dout); dev_free(io.dq); dev_free(io.dk); dev_free(io.dv);
	kb_data_free(&d);
	free(ms);
}
