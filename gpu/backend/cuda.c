// SPDX-License-Identifier: MIT
/*
 * The `cuda` backend: tdm__backend_cuda over the CUDA runtime, with the kernels of kernels.cu.
 * It owns the device selection of the threads that call it, the stream and event wrappers that
 * remember their device, the driver entry points it needs (cuStreamWriteValue64 and the device
 * queries that decide whether completion words are possible), and the release threshold of each
 * device's default memory pool, which it raises at open so that stream-ordered frees keep their
 * memory for the next allocation.
 *
 * Present in every build. Without TANDEM_HAVE_CUDA only open() (-ENODEV) and why_none exist.
 * With it, the library links the static CUDA runtime and never libcuda itself: driver functions
 * come through cudaGetDriverEntryPointByVersion, so a binary still loads, and open() fails with
 * -ENODEV, on a machine without a driver (libcuda.so.1 absent). open() prints nothing: whether
 * that is worth a line is tdm_gpu_create's to say (gpu/layer.c), with why_none's words.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>

#include "backend.h"

#ifndef TANDEM_HAVE_CUDA

static int tdm__cuda_open(struct tdm__backend **out, const tdm_gpu_config *cfg)
{
	(void)out;
	(void)cfg;
	return -ENODEV;
}

static void tdm__cuda_why_none(char *out, size_t len)
{
	snprintf(out, len, "this libtandem was built without CUDA");
}

const struct tdm__backend_ops tdm__backend_cuda = {
    .name = "cuda",
    .open = tdm__cuda_open,
    .why_none = tdm__cuda_why_none,
};

#else /* TANDEM_HAVE_CUDA */

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "kernels.h"

/* The device this thread last made current through us (cuda_internal.h). */
_Thread_local int tdm__cuda_cur = -1;

/* ---- driver entry points ----------------------------------------------------------------- */

/*
 * Looks up a driver function through the runtime (which has loaded libcuda.so.1 itself). fnp
 * points to a function pointer of `size` bytes; it is left NULL when the driver lacks the symbol.
 * The copy through a void * avoids converting an object pointer to a function pointer, which ISO
 * C does not define; POSIX guarantees the representations agree.
 */
static void tdm__cuda_sym(const char *name, void *fnp, size_t size)
{
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	void *p = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &p, TDM__CUDA_ABI, cudaEnableDefault, &q) !=
	        cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		p = NULL;
	if (p == NULL)
		(void)cudaGetLastError();
	memcpy(fnp, &p, size);
}

/* ---- open, close, devices ---------------------------------------------------------------- */

/*
 * The default pool's release threshold is 0: at every synchronization it hands its free memory
 * back to the driver, and the next cudaMallocAsync must get it from the driver again, at the
 * cost of a cudaMalloc (docs/design/memory.md). Keep all of it at open: memory freed by
 * free_async stays in the pool for the next malloc_async; the GPU layer then lowers the threshold
 * to its plan for the device (pool_release, half the device's memory by default). The price is
 * that cudaMemGetInfo counts retained memory as used. cudaMallocAsync allocates from the device's
 * current pool, which is this one unless the application set another (cudaDeviceSetMemPool);
 * then that pool's settings apply. Best effort: without it allocations work, only slower.
 */
static cudaError_t tdm__cuda_pool_threshold(int dev, uint64_t bytes)
{
	cudaMemPool_t pool;
	cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, dev);

	if (e == cudaSuccess)
		e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes);
	return e;
}

static void tdm__cuda_retain_pool(int dev)
{
	if (tdm__cuda_pool_threshold(dev, UINT64_MAX) != cudaSuccess)
		(void)cudaGetLastError();
}

static int tdm__cuda_pool_release(struct tdm__backend *b, int dev, uint64_t bytes)
{
	if (b == NULL || dev < 0 || dev >= b->ndev)
		return -EINVAL;
	if (tdm__cuda_pool_threshold(dev, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		return -ENOTSUP;
	}
	return 0;
}

/*
 * Blocks of the busy kernel that fit on the device at once: per SM, what the kernel's launch
 * bounds allow (its registers fit TDM__BUSY_BLOCKS_PER_SM blocks), cut to the SM's thread and
 * block limits. More would run in a second wave and double the kernel's length; fewer would
 * leave SMs to a concurrent kernel, which then would not wait for this one.
 */
static unsigned tdm__cuda_busy_blocks(int dev, int sm_count)
{
	unsigned per_sm = TDM__BUSY_BLOCKS_PER_SM;
	int threads = 0, blocks = 0;

	if (cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev) ==
	        cudaSuccess &&
	    threads > 0 && (unsigned)threads / TDM__BUSY_BLOCK < per_sm)
		per_sm = (unsigned)threads / TDM__BUSY_BLOCK;
	if (cudaDeviceGetAttribute(&blocks, cudaDevAttrMaxBlocksPerMultiprocessor, dev) ==
	        cudaSuccess &&
	    blocks > 0 && (unsigned)blocks < per_sm)
		per_sm = (unsigned)blocks;
	if (per_sm == 0)
		per_sm = 1;
	return (unsigned)(sm_count > 0 ? sm_count : 1) * per_sm;
}

/* What the calling thread's last open got from cudaGetDeviceCount (tdm__cuda_why_none). */
static _Thread_local cudaError_t open_err;

static void tdm__cuda_why_none(char *out, size_t len)
{
	if (open_err == cudaSuccess) {
		snprintf(out, len, "CUDA sees no device");
		return;
	}
	/* The runtime says "driver version is insufficient" also where there is no driver at all:
	 * tell that apart, it is what a machine without a GPU has. */
	if (open_err == cudaErrorInsufficientDriver) {
		void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
		if (lib == NULL) {
			snprintf(out, len, "no CUDA driver: libcuda.so.1 not found");
			return;
		}
		dlclose(lib);
	}
	snprintf(out, len, "cudaGetDeviceCount: %s", cudaGetErrorString(open_err));
}

static int tdm__cuda_open(struct tdm__backend **out, const tdm_gpu_config *cfg)
{
	PFN_cuDeviceGet_v2000 device_get = NULL;
	PFN_cuDeviceGetAttribute_v2000 device_attr = NULL;
	struct tdm__backend *b;
	int n = 0;

	_Static_assert(sizeof(void *) == sizeof(PFN_cuStreamWriteValue64_v11070),
	               "driver entry points must fit a void *");
	(void)cfg;
	if (out == NULL)
		return -EINVAL;
	/* No driver (libcuda.so.1 absent), a driver too old, or no device: all are "no device";
	 * why_none tells them apart for tdm_gpu_create's message. */
	if ((open_err = cudaGetDeviceCount(&n)) != cudaSuccess || n <= 0) {
		(void)cudaGetLastError();
		return -ENODEV;
	}

	b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	b->devs = calloc((size_t)n, sizeof(*b->devs));
	if (b->devs == NULL) {
		free(b);
		return -ENOMEM;
	}
	b->ndev = n;

	tdm__cuda_sym("cuStreamWriteValue64", &b->write_value64, sizeof(b->write_value64));
	tdm__cuda_sym("cuDeviceGet", &device_get, sizeof(device_get));
	tdm__cuda_sym("cuDeviceGetAttribute", &device_attr, sizeof(device_attr));

	/* Attribute queries need no context. The pool set-up and the kernel preload initialize
	 * each device's primary context, which the stream pools created right after open() need
	 * anyway; open() leaves the calling thread's current device as it was. */
	b->all_map_host = true;
	for (int i = 0; i < n; i++) {
		struct tdm__cuda_dev *d = &b->devs[i];
		int v = 0;
		CUdevice cud;

		if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, i) == cudaSuccess)
			d->sm_count = v;
		d->busy_blocks = tdm__cuda_busy_blocks(i, d->sm_count);
		v = 0;
		(void)cudaDeviceGetAttribute(&v, cudaDevAttrUnifiedAddressing, i);
		d->uva = v != 0;
		v = 0;
		(void)cudaDeviceGetAttribute(&v, cudaDevAttrCanMapHostMemory, i);
		d->map_host = v != 0;
		b->all_map_host = b->all_map_host && d->map_host;
		/* A driver attribute without a runtime twin; the runtime ordinal i names the same
		 * device as the driver ordinal i (both see CUDA_VISIBLE_DEVICES). */
		v = 0;
		if (device_get != NULL && device_attr != NULL &&
		    device_get(&cud, i) == CUDA_SUCCESS &&
		    device_attr(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, cud) ==
		        CUDA_SUCCESS)
			d->memops64 = v != 0;
		v = 0;
		(void)cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, i);
		d->managed = v != 0;
		v = 0;
		(void)cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, i);
		d->pools = v != 0;
		if (d->pools)
			tdm__cuda_retain_pool(i);
		/* Best effort: a kernel not loaded now loads at its first launch. */
		(void)tdm__kernels_load(i);
	}
	(void)cudaGetLastError();
	*out = b;
	return 0;
}

/* Leaves the contexts alone: the application may use the same primary contexts. */
static void tdm__cuda_close(struct tdm__backend *b)
{
	if (b == NULL)
		return;
	free(b->devs);
	free(b);
}

static int tdm__cuda_device_count(struct tdm__backend *b)
{
	return b->ndev;
}

static int tdm__cuda_device_info(struct tdm__backend *b, int dev, struct tdm__device_info *out)
{
	const struct tdm__cuda_dev *d;
	struct cudaDeviceProp prop;
	int v = 0, prev = -1;
	cudaError_t e;

	if (out == NULL || tdm__cuda_bad_dev(b, dev))
		return -EINVAL;
	d = &b->devs[dev];
	*out = (struct tdm__device_info){0};
	e = cudaGetDeviceProperties(&prop, dev);
	if (e != cudaSuccess)
		return tdm__cuda_fail(e);
	/* The runtime allows 256 bytes; ours keeps 95, cut if need be. */
	snprintf(out->name, sizeof(out->name), "%.*s", (int)sizeof(out->name) - 1, prop.name);
	out->sm_count = d->sm_count;
	if (cudaDeviceGetAttribute(&v, cudaDevAttrAsyncEngineCount, dev) == cudaSuccess)
		out->async_engines = v;
	/* Completion words need the driver call, the device's 64-bit memory operations, and pinned
	 * host memory the device can write (mapped by host_alloc). */
	out->can_write_value64 = b->write_value64 != NULL && d->memops64 && b->all_map_host;
	/* A device scheduler's queue: pinned memory mapped, at its host address (unified
	 * addressing). */
	out->maps_host = b->all_map_host && d->uva;

	/* The priority range is asked of "the current device": make dev current for the query
	 * and give the caller (often the application's own thread) its device back. */
	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	e = tdm__cuda_use_exact(dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetStreamPriorityRange(&out->prio_least, &out->prio_greatest);
	if (prev >= 0 && prev != dev)
		(void)tdm__cuda_set(prev);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* ---- streams ----------------------------------------------------------------------------- */

static int tdm__cuda_stream_create(struct tdm__backend *b, int dev, int priority, void **out)
{
	struct tdm__cuda_stream *st;
	cudaError_t e;
	int prev;

	if (out == NULL || tdm__cuda_bad_dev(b, dev))
		return -EINVAL;
	st = malloc(sizeof(*st));
	if (st == NULL)
		return -ENOMEM;
	/* The runtime clamps a priority outside the device's range; the caller stays within it. */
	e = tdm__cuda_enter(dev, &prev);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithPriority(&st->s, cudaStreamNonBlocking, priority);
	tdm__cuda_leave(dev, prev);
	if (e != cudaSuccess) {
		free(st);
		return tdm__cuda_fail(e);
	}
	st->dev = dev;
	*out = st;
	return 0;
}

/* After a sticky error both calls fail; the handle is released all the same. */
static void tdm__cuda_stream_destroy(struct tdm__backend *b, void *stream)
{
	struct tdm__cuda_stream *st = stream;

	int prev;

	(void)b;
	if (st == NULL)
		return;
	(void)tdm__cuda_enter(st->dev, &prev);
	(void)cudaStreamSynchronize(st->s);
	(void)cudaStreamDestroy(st->s);
	(void)cudaGetLastError();
	tdm__cuda_leave(st->dev, prev);
	free(st);
}

/* What a stream or event query said: 0 done, -EAGAIN not yet, -EIO for a sticky error
 * (cudaErrorLaunchFailure, IllegalAddress, IllegalInstruction, Assert) or any other failure:
 * the work did not complete. */
static int tdm__cuda_query_result(cudaError_t e)
{
	if (e == cudaSuccess)
		return 0;
	if (e == cudaErrorNotReady)
		return -EAGAIN;
	(void)cudaGetLastError();
	return -EIO;
}

/*
 * The poller's hot path, over streams of every device: no cudaSetDevice, since cudaStreamQuery
 * (like cudaEventQuery) works with any device current (CUDA programming guide, "Stream and Event
 * Behavior"), and switching devices on each query would cost more than the query.
 */
static int tdm__cuda_stream_query(struct tdm__backend *b, void *stream)
{
	const struct tdm__cuda_stream *st = stream;

	(void)b;
	return tdm__cuda_query_result(cudaStreamQuery(st->s));
}

static void *tdm__cuda_stream_native(struct tdm__backend *b, void *stream)
{
	const struct tdm__cuda_stream *st = stream;

	(void)b;
	return st == NULL ? NULL : (void *)st->s;
}

/* ---- events ------------------------------------------------------------------------------ */

/* An event of dev with `flags`: timing disabled for the pools' events (cheaper to record),
 * cudaEventDefault for the stamps' timers. */
static int tdm__cuda_event_make(struct tdm__backend *b, int dev, unsigned flags, void **out)
{
	struct tdm__cuda_event *ev;
	cudaError_t e;
	int prev;

	if (out == NULL || tdm__cuda_bad_dev(b, dev))
		return -EINVAL;
	ev = malloc(sizeof(*ev));
	if (ev == NULL)
		return -ENOMEM;
	e = tdm__cuda_enter(dev, &prev);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&ev->e, flags);
	tdm__cuda_leave(dev, prev);
	if (e != cudaSuccess) {
		free(ev);
		return tdm__cuda_fail(e);
	}
	ev->dev = dev;
	*out = ev;
	return 0;
}

static int tdm__cuda_event_create(struct tdm__backend *b, int dev, void **out)
{
	return tdm__cuda_event_make(b, dev, cudaEventDisableTiming, out);
}

static void tdm__cuda_event_destroy(struct tdm__backend *b, void *event)
{
	struct tdm__cuda_event *ev = event;

	int prev;

	(void)b;
	if (ev == NULL)
		return;
	(void)tdm__cuda_enter(ev->dev, &prev);
	(void)cudaEventDestroy(ev->e);
	(void)cudaGetLastError();
	tdm__cuda_leave(ev->dev, prev);
	free(ev);
}

static int tdm__cuda_event_record(struct tdm__backend *b, void *event, void *stream)
{
	const struct tdm__cuda_event *ev = event;
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	(void)b;
	if (ev == NULL || st == NULL || ev->dev != st->dev)
		return -EINVAL;
	e = tdm__cuda_use(st->dev);
	if (e == cudaSuccess)
		e = cudaEventRecord(ev->e, st->s);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* cudaStreamWaitEvent takes an event of any device; the stream's device is made current as for
 * every call that enqueues on it. */
static int tdm__cuda_stream_wait_event(struct tdm__backend *b, void *stream, void *event)
{
	const struct tdm__cuda_event *ev = event;
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	(void)b;
	if (ev == NULL || st == NULL)
		return -EINVAL;
	e = tdm__cuda_use(st->dev);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(st->s, ev->e, 0);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* Polled like stream_query, without a device switch. */
static int tdm__cuda_event_query(struct tdm__backend *b, void *event)
{
	const struct tdm__cuda_event *ev = event;

	(void)b;
	return tdm__cuda_query_result(cudaEventQuery(ev->e));
}

/* ---- timers (device-side stamps) --------------------------------------------------------- */

static int tdm__cuda_timer_create(struct tdm__backend *b, int dev, void **out)
{
	return tdm__cuda_event_make(b, dev, cudaEventDefault, out);
}

/* A timers' read that failed for a reason other than "not yet": said once per process, with
 * CUDA's own name for it (the stamps then count the span lost). */
static int tdm__cuda_timer_error(cudaError_t e, const char *what)
{
	static atomic_int said;
	int rc = tdm__cuda_query_result(e);
	if (rc != 0 && rc != -EAGAIN && atomic_exchange(&said, 1) == 0)
		fprintf(stderr, "tandem: %s: %s (%s)\n", what, cudaGetErrorName(e),
		        cudaGetErrorString(e));
	return rc;
}

static int tdm__cuda_timer_elapsed(struct tdm__backend *b, void *from, void *to, int64_t *ns)
{
	const struct tdm__cuda_event *e0 = from, *e1 = to;
	float ms = 0;
	(void)b;
	if (e0 == NULL || e1 == NULL || ns == NULL || e0->dev != e1->dev)
		return -EINVAL;
	int rc = tdm__cuda_timer_error(cudaEventElapsedTime(&ms, e0->e, e1->e), "a timers' read");
	if (rc == 0)
		*ns = (int64_t)((double)ms * 1e6 + (ms >= 0 ? 0.5 : -0.5));
	return rc;
}

/* ---- completion words -------------------------------------------------------------------- */

static int tdm__cuda_write_value(struct tdm__backend *b, void *stream, uint64_t *word,
                                 uint64_t value)
{
	const struct tdm__cuda_stream *st = stream;
	void *dptr = word;
	cudaError_t e;
	CUresult r;

	if (st == NULL || word == NULL || ((uintptr_t)word & 7u) != 0)
		return -EINVAL;
	if (b->write_value64 == NULL)
		return -ENOTSUP;
	for (int tries = 0;; tries++) {
		e = tdm__cuda_use(st->dev);
		if (e != cudaSuccess)
			return tdm__cuda_fail(e);
		/* With unified addressing (every 64-bit Linux system) the mapped host pointer is
		 * the device pointer; otherwise ask, on the stream's device, since it differs per
		 * device. */
		if (!b->devs[st->dev].uva) {
			e = cudaHostGetDevicePointer(&dptr, word, 0);
			if (e != cudaSuccess)
				return tdm__cuda_fail(e);
		}
		/* DEFAULT, not NO_MEMORY_BARRIER: the write is ordered after all earlier work on
		 * the stream and fenced, so a reader who sees `value` sees that work's results. */
		r = b->write_value64((CUstream)st->s, (CUdeviceptr)(uintptr_t)dptr,
		                     (cuuint64_t)value, CU_STREAM_WRITE_VALUE_DEFAULT);
		if (r == CUDA_SUCCESS)
			return 0;
		if (tries > 0 ||
		    (r != CUDA_ERROR_INVALID_HANDLE && r != CUDA_ERROR_INVALID_CONTEXT) ||
		    !tdm__cuda_stale(st->dev))
			return tdm__cu_errno(r);
	}
}
/* ---- work on a stream -------------------------------------------------------------------- */

static int tdm__cuda_memcpy_async(struct tdm__backend *b, void *stream, void *dst, const void *src,
                                  size_t bytes, tdm_copy_kind kind)
{
	const struct tdm__cuda_stream *st = stream;
	enum cudaMemcpyKind k;
	cudaError_t e;

	(void)b;
	switch (kind) {
	case TDM_COPY_H2D:
		k = cudaMemcpyHostToDevice;
		break;
	case TDM_COPY_D2H:
		k = cudaMemcpyDeviceToHost;
		break;
	case TDM_COPY_D2D:
		k = cudaMemcpyDeviceToDevice;
		break;
	default:
		return -EINVAL;
	}
	if (st == NULL || (bytes > 0 && (dst == NULL || src == NULL)))
		return -EINVAL;
	if (bytes == 0)
		return 0;
	/* A copy works whichever device is current (unlike a launch), so a stale cache cannot
	 * make it fail. */
	e = tdm__cuda_use(st->dev);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(dst, src, bytes, k, st->s);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* cudaMemsetAsync, made with the stream's device current (one retry if the cached device was
 * stale, as for a launch). An address the driver does not know is -EINVAL. */
static int tdm__cuda_memset_async(struct tdm__backend *b, void *stream, void *dst, int value,
                                  size_t bytes)
{
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	(void)b;
	if (st == NULL || dst == NULL)
		return -EINVAL;
	if (bytes == 0)
		return 0;
	TDM__CUDA_ON_STREAM(e, st, cudaMemsetAsync(dst, value, bytes, st->s));
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

enum tdm__cuda_kernel { TDM__K_EMPTY, TDM__K_SPIN, TDM__K_BUSY, TDM__K_SCALE, TDM__K_FAULT };

struct tdm__cuda_launch {
	enum tdm__cuda_kernel k;
	uint32_t ns;
	unsigned blocks;
	float *y;
	const float *x;
	float a;
	size_t n;
};

static cudaError_t tdm__cuda_kernel(const struct tdm__cuda_stream *st,
                                    const struct tdm__cuda_launch *l)
{
	switch (l->k) {
	case TDM__K_EMPTY:
		return tdm__kernel_empty(st->s);
	case TDM__K_SPIN:
		return tdm__kernel_spin(st->s, l->ns);
	case TDM__K_BUSY:
		return tdm__kernel_busy(st->s, l->blocks, l->ns);
	case TDM__K_SCALE:
		return tdm__kernel_scale(st->s, l->blocks, l->y, l->x, l->a, l->n);
	case TDM__K_FAULT:
		return tdm__kernel_fault(st->s);
	}
	return cudaErrorInvalidValue;
}

/*
 * Every launch goes through here: the stream's device made current (a kernel launch, unlike a
 * copy or a query, fails on a stream of another device), one retry if the cached device was
 * stale, and -EIO for any launch error (nothing was enqueued).
 */
static int tdm__cuda_launch(const struct tdm__cuda_stream *st, const struct tdm__cuda_launch *l)
{
	cudaError_t e;

	TDM__CUDA_ON_STREAM(e, st, tdm__cuda_kernel(st, l));
	if (e == cudaSuccess)
		return 0;
	(void)cudaGetLastError();
	return -EIO;
}

static int tdm__cuda_launch_spin(struct tdm__backend *b, void *stream, uint32_t ns)
{
	struct tdm__cuda_launch l = {.k = ns == 0 ? TDM__K_EMPTY : TDM__K_SPIN, .ns = ns};

	(void)b;
	if (stream == NULL)
		return -EINVAL;
	return tdm__cuda_launch(stream, &l);
}

static int tdm__cuda_launch_busy(struct tdm__backend *b, void *stream, uint32_t ns)
{
	const struct tdm__cuda_stream *st = stream;
	struct tdm__cuda_launch l = {.k = TDM__K_BUSY, .ns = ns};

	if (st == NULL)
		return -EINVAL;
	l.blocks = b->devs[st->dev].busy_blocks;
	return tdm__cuda_launch(st, &l);
}

static int tdm__cuda_launch_scale(struct tdm__backend *b, void *stream, float *y, const float *x,
                                  float a, size_t n)
{
	const struct tdm__cuda_stream *st = stream;
	struct tdm__cuda_launch l = {.k = TDM__K_SCALE, .y = y, .x = x, .a = a, .n = n};
	size_t blocks, cap;

	if (st == NULL || (n > 0 && (y == NULL || x == NULL)))
		return -EINVAL;
	if (n == 0)
		return 0;
	/* Enough blocks to fill the device several times over, and no more: the grid-stride loop
	 * covers the rest, and a bounded grid keeps the launch cheap for any n. */
	cap = (size_t)(b->devs[st->dev].sm_count > 0 ? b->devs[st->dev].sm_count : 1) * 8;
	blocks = (n + TDM__SCALE_BLOCK - 1) / TDM__SCALE_BLOCK;
	l.blocks = (unsigned)(blocks < cap ? blocks : cap);
	return tdm__cuda_launch(st, &l);
}

/* The trap kills the device's context (sticky): every later call on the device fails. */
static int tdm__cuda_launch_fault(struct tdm__backend *b, void *stream)
{
	struct tdm__cuda_launch l = {.k = TDM__K_FAULT};

	(void)b;
	if (stream == NULL)
		return -EINVAL;
	return tdm__cuda_launch(stream, &l);
}
/* ---- the device scheduler ------------------------------------------------------------------ */

/*
 * The kernel is the program's (tandem_dsched.cuh), compiled into its own module with its
 * handlers, and launched by the table's launcher, which may run in another copy of the CUDA
 * runtime (a program linking libtandem.so, which carries its own): a stream is the driver's
 * handle in both, and both use the device's primary context. The launcher sets its runtime's
 * device itself; this one's is set too, for a launcher of the same runtime.
 */
static int tdm__cuda_dsched_start(struct tdm__backend *b, void *stream,
                                  const struct tdm__dsched_run *r, void **engine)
{
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;
	int prev;

	(void)b;
	if (st == NULL || r == NULL || engine == NULL)
		return -EINVAL;
	if (r->handlers->launch == NULL)
		return -ENOTSUP;
	tdm_dsched_launch l = {.stream = st->s,
	                       .device = st->dev,
	                       .blocks = r->blocks,
	                       .threads = (r->warps + 1u) * 32u, /* and the fetcher */
	                       .queue = r->queue};
	e = tdm__cuda_enter(st->dev, &prev);
	if (e == cudaSuccess)
		e = (cudaError_t)r->handlers->launch(&l);
	tdm__cuda_leave(st->dev, prev);
	*engine = NULL;
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* The kernel ends once it read its stop word (or the context died): its stream then drains. */
static void tdm__cuda_dsched_join(struct tdm__backend *b, void *stream, void *engine)
{
	const struct tdm__cuda_stream *st = stream;
	int prev;

	(void)b;
	(void)engine;
	(void)tdm__cuda_enter(st->dev, &prev);
	(void)cudaStreamSynchronize(st->s);
	(void)cudaGetLastError();
	tdm__cuda_leave(st->dev, prev);
}

/*
 * CUDA reads CUDA_DEVICE_MAX_CONNECTIONS once, as it starts. It has not started while libcuda is
 * not loaded in the process, or while the loaded one says CUDA_ERROR_NOT_INITIALIZED (any driver
 * call before cuInit does; cuDeviceGetCount changes nothing). Asking that through cudart would
 * start it, so libcuda is looked up without loading it.
 */
static int tdm__cuda_set_connections(unsigned n)
{
	static const char var[] = "CUDA_DEVICE_MAX_CONNECTIONS";
	if (getenv(var) != NULL)
		return -EEXIST;
	void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
	if (lib != NULL) {
		CUresult (*count)(int *) = NULL;
		*(void **)&count = dlsym(lib, "cuDeviceGetCount");
		int k = 0;
		bool started = count == NULL || count(&k) != CUDA_ERROR_NOT_INITIALIZED;
		dlclose(lib);
		if (started)
			return -EALREADY;
	}
	char v[16];
	snprintf(v, sizeof(v), "%u", n);
	return setenv(var, v, 0) == 0 ? 0 : -ENOMEM;
}

const struct tdm__backend_ops tdm__backend_cuda = {
    .name = "cuda",
    .open = tdm__cuda_open,
    .why_none = tdm__cuda_why_none,
    .close = tdm__cuda_close,
    .device_count = tdm__cuda_device_count,
    .device_info = tdm__cuda_device_info,
    .stream_create = tdm__cuda_stream_create,
    .stream_destroy = tdm__cuda_stream_destroy,
    .stream_query = tdm__cuda_stream_query,
    .event_create = tdm__cuda_event_create,
    .event_destroy = tdm__cuda_event_destroy,
    .event_record = tdm__cuda_event_record,
    .stream_wait_event = tdm__cuda_stream_wait_event,
    .event_query = tdm__cuda_event_query,
    .timer_create = tdm__cuda_timer_create,
    .timer_elapsed = tdm__cuda_timer_elapsed,
    .write_value = tdm__cuda_write_value,
    /* NULL, so the poller makes no call per completion: cuda reports a failed operation at its
     * launch (non-sticky) or as a sticky error that stream_query sees; nothing can fail
     * silently between the two. */
    .word_status = NULL,
    .host_alloc = tdm__cuda_host_alloc,
    .host_free = tdm__cuda_host_free,
    .device_alloc = tdm__cuda_device_alloc,
    .device_free = tdm__cuda_device_free,
    .memcpy_async = tdm__cuda_memcpy_async,
    .launch_spin = tdm__cuda_launch_spin,
    .launch_scale = tdm__cuda_launch_scale,
    .launch_fault = tdm__cuda_launch_fault,
    .stream_native = tdm__cuda_stream_native,
    .sim_inject = NULL,
    .malloc_async = tdm__cuda_malloc_async,
    .free_async = tdm__cuda_free_async,
    .host_register = tdm__cuda_host_register,
    .host_unregister = tdm__cuda_host_unregister,
    .is_pinned = tdm__cuda_is_pinned,
    .managed_alloc = tdm__cuda_managed_alloc,
    .managed_free = tdm__cuda_managed_free,
    .prefetch = tdm__cuda_prefetch,
    .advise = tdm__cuda_advise,
    .mem_info = tdm__cuda_mem_info,
    .host_fn = tdm__cuda_host_fn,
    .memcpy_peer_async = tdm__cuda_memcpy_peer_async,
    .pool_release = tdm__cuda_pool_release,
    .launch_busy = tdm__cuda_launch_busy,
    .set_connections = tdm__cuda_set_connections,
    /* cuda_graph.c */
    .capture_begin = tdm__cuda_capture_begin,
    .capture_end = tdm__cuda_capture_end,
    .graph_instantiate = tdm__cuda_graph_instantiate,
    .graph_update = tdm__cuda_graph_update,
    .graph_launch = tdm__cuda_graph_launch,
    .graph_free = tdm__cuda_graph_free,
    .graph_exec_free = tdm__cuda_graph_exec_free,
    .memset_async = tdm__cuda_memset_async,
    .dsched_start = tdm__cuda_dsched_start,
    .dsched_join = tdm__cuda_dsched_join,
};

#endif /* TANDEM_HAVE_CUDA */
