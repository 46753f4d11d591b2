/*
 * The `cuda` backend: tdm__backend_cuda over the CUDA runtime, with the kernels of kernels.cu.
 * It owns the device selection of the threads that call it, the stream and event wrappers that
 * remember their device, the driver entry points it needs (cuStreamWriteValue64 and the device
 * queries that decide whether completion words are possible), and the release threshold of each
 * device's default memory pool, which it raises at open so that stream-ordered frees keep their
 * memory for the next allocation.
 *
 * Present in every build. Without TANDEM_HAVE_CUDA only open() exists, and says -ENODEV. With it,
 * the library links the static CUDA runtime and never libcuda itself: driver functions come
 * through cudaGetDriverEntryPointByVersion, so a binary still loads, and open() fails quietly
 * with -ENODEV, on a machine without a driver (libcuda.so.1 absent).
 */
#include <errno.h>
#include <stddef.h>

#include "backend.h"

#ifndef TANDEM_HAVE_CUDA

static int tdm__cuda_open(struct tdm__backend **out, const tdm_gpu_config *cfg)
{
	(void)out;
	(void)cfg;
	return -ENODEV;
}

const struct tdm__backend_ops tdm__backend_cuda = {
    .name = "cuda",
    .open = tdm__cuda_open,
};

#else /* TANDEM_HAVE_CUDA */

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* driver types and enums only: no cu* function is linked */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "kernels.h"

/*
 * The driver ABI we ask for. A fixed version, not CUDA_VERSION, so that each pointer has exactly
 * the signature of the versioned PFN typedef below whatever toolkit builds this file; 12.0 is
 * below the 12.5 that cudaGetDriverEntryPointByVersion needs anyway.
 */
#define TDM__CUDA_ABI 12000

/*
 * CUDA 13 gave cudaMemPrefetchAsync and cudaMemAdvise the cudaMemLocation signatures that 12.2
 * introduced as their _v2 variants; the older forms are gone. The file needs 12.5 anyway.
 */
#if CUDART_VERSION >= 13000
#define TDM__CUDA_PREFETCH cudaMemPrefetchAsync
#define TDM__CUDA_ADVISE cudaMemAdvise
#else
#define TDM__CUDA_PREFETCH cudaMemPrefetchAsync_v2
#define TDM__CUDA_ADVISE cudaMemAdvise_v2
#endif

struct tdm__cuda_dev {
	int sm_count;
	/* The grid of tdm__kernel_busy: as many blocks as are resident on the device at once. */
	unsigned busy_blocks;
	bool uva;      /* host pointers of mapped memory are device pointers too */
	bool map_host; /* can map pinned host memory */
	bool memops64; /* CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS */
	bool pools;    /* cudaMallocAsync and memory pools */
	bool managed;  /* concurrent managed access: prefetching managed memory is possible */
};

/* Immutable after open(): every op reads it from any thread without a lock. */
struct tdm__backend {
	int ndev;
	bool all_map_host;                             /* host_alloc may ask for mapped memory */
	PFN_cuStreamWriteValue64_v11070 write_value64; /* NULL: completion words impossible */
	struct tdm__cuda_dev *devs;
};

/* A stream or event remembers its device: launches must happen with that device current. */
struct tdm__cuda_stream {
	cudaStream_t s;
	int dev;
};

struct tdm__cuda_event {
	cudaEvent_t e;
	int dev;
};

/* ---- errors ------------------------------------------------------------------------------ */

static int tdm__cuda_errno(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevicePointer: /* older drivers' cudaFree of an unknown pointer */
	case cudaErrorInvalidDevice:
	case cudaErrorHostMemoryNotRegistered: /* cudaHostUnregister of an unknown pointer */
		return -EINVAL;
	case cudaErrorHostMemoryAlreadyRegistered: /* a range overlapping a registered one */
		return -EEXIST;
	case cudaErrorNotReady:
		return -EAGAIN;
	case cudaErrorNotSupported:
		return -ENOTSUP; /* not a device failure: the device is fine */
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorStubLibrary:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorDevicesUnavailable:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/*
 * For a call that failed: the runtime also keeps a non-sticky error as the thread's "last error",
 * where user code on the same thread (a task on a worker) would find it with cudaGetLastError()
 * and blame its own launch. Ours was reported through our return value, so take it back.
 */
static int tdm__cuda_fail(cudaError_t e)
{
	(void)cudaGetLastError();
	return tdm__cuda_errno(e);
}

static int tdm__cu_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
		return -EINVAL;
	case CUDA_ERROR_NOT_READY:
		return -EAGAIN;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP; /* not a device failure: the device is fine */
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_STUB_LIBRARY:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/* ---- the calling thread's current device ------------------------------------------------- */

/*
 * The device this thread last made current through us; -1: unknown. It saves a cudaSetDevice
 * on each hot-path call (launch, copy, write, record). It can go stale: a task running on this
 * worker may call cudaSetDevice itself. Hot paths therefore trust it and recover through
 * tdm__cuda_stale() when a call fails the way a wrong current device makes it fail; slow paths
 * that would silently act on the wrong device (create, alloc) use tdm__cuda_use_exact().
 */
static _Thread_local int tdm__cuda_cur = -1;

static cudaError_t tdm__cuda_set(int dev)
{
	cudaError_t e = cudaSetDevice(dev);

	tdm__cuda_cur = e == cudaSuccess ? dev : -1;
	return e;
}

static cudaError_t tdm__cuda_use(int dev)
{
	if (tdm__cuda_cur == dev)
		return cudaSuccess;
	return tdm__cuda_set(dev);
}

/* Asks the runtime, not the cache: for calls that create or allocate on "the current device". */
static cudaError_t tdm__cuda_use_exact(int dev)
{
	int cur;

	if (cudaGetDevice(&cur) == cudaSuccess && cur == dev) {
		tdm__cuda_cur = dev;
		return cudaSuccess;
	}
	return tdm__cuda_set(dev);
}

/*
 * For the calls that act on "the current device" and are not on a hot path (create, destroy,
 * allocate, free, memory info): dev exactly current for the call, and the caller's own device
 * given back after it. The caller is often the application's thread, whose later cudaMalloc or
 * launch must not land on a device tandem chose. Workers pay one more cudaSetDevice at their
 * next launch; the hot paths keep the cache (tdm__cuda_use).
 */
static cudaError_t tdm__cuda_enter(int dev, int *prev)
{
	if (cudaGetDevice(prev) != cudaSuccess)
		*prev = -1;
	return tdm__cuda_use_exact(dev);
}

static void tdm__cuda_leave(int dev, int prev)
{
	if (prev >= 0 && prev != dev)
		(void)tdm__cuda_set(prev);
}

/*
 * After a hot-path call for `dev` failed with an error a wrong current device produces (a launch
 * into a stream of another device is cudaErrorInvalidResourceHandle): true when the cache had
 * lied, the device is now really current, and the call, which enqueued nothing, may be retried.
 */
static bool tdm__cuda_stale(int dev)
{
	int cur;

	if (cudaGetDevice(&cur) != cudaSuccess || cur == dev)
		return false; /* the device was right: a genuine error */
	(void)cudaGetLastError();
	return tdm__cuda_set(dev) == cudaSuccess;
}

/*
 * Whether a hot-path call for `dev` that failed with e may be tried again: on the first try only,
 * and only when the failure is the one a wrong current device produces and the cache had lied.
 * Calls that take a stream mostly act on the stream's own context whichever device is current;
 * this covers those that do not, at no cost when nothing fails.
 */
static bool tdm__cuda_retry(int dev, cudaError_t e, int tries)
{
	return tries == 0 && e == cudaErrorInvalidResourceHandle && tdm__cuda_stale(dev);
}

/*
 * Sets e to the result of `call`, a runtime call on stream st made with st's device current, and
 * makes it a second time if the first failed only because the cached device was stale. A macro
 * so that each op keeps its own call and arguments.
 */
#define TDM__CUDA_ON_STREAM(e, st, call)                                                           \
	for (int tries_ = 0;; tries_++) {                                                          \
		(e) = tdm__cuda_use((st)->dev);                                                    \
		if ((e) == cudaSuccess)                                                            \
			(e) = (call);                                                              \
		if ((e) == cudaSuccess || !tdm__cuda_retry((st)->dev, (e), tries_))                \
			break;                                                                     \
	}

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
 * back to the driver, and the next cudaMallocAsync must get it from the driver again (on an H200,
 * cudaMalloc + cudaFree cost 107 us; cudaMallocAsync + cudaFreeAsync from a retained pool,
 * 1.37 us). Keep all of it at open: memory freed by free_async stays in the pool for the next
 * malloc_async; the GPU layer then lowers the threshold to its plan for the device
 * (pool_release, half the device's memory by default). The price is that cudaMemGetInfo counts
 * retained memory as used. cudaMallocAsync allocates from the device's current pool, which is this
 * one unless the application set another (cudaDeviceSetMemPool); then that pool's settings apply.
 * Best effort: without it allocations work, only slower.
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
	/* No driver (libcuda.so.1 absent), a driver too old, or no device: all are "no device", and
	 * none of them prints anything, so that AUTO can fall back quietly. */
	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
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

static bool tdm__cuda_bad_dev(const struct tdm__backend *b, int dev)
{
	return dev < 0 || dev >= b->ndev;
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

static int tdm__cuda_event_create(struct tdm__backend *b, int dev, void **out)
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
		e = cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming);
	tdm__cuda_leave(dev, prev);
	if (e != cudaSuccess) {
		free(ev);
		return tdm__cuda_fail(e);
	}
	ev->dev = dev;
	*out = ev;
	return 0;
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

/* Polled like stream_query, without a device switch. */
static int tdm__cuda_event_query(struct tdm__backend *b, void *event)
{
	const struct tdm__cuda_event *ev = event;

	(void)b;
	return tdm__cuda_query_result(cudaEventQuery(ev->e));
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

/* ---- memory ------------------------------------------------------------------------------ */

/*
 * Portable: usable by every device's context, whichever is current here. Mapped:
 * cuStreamWriteValue64 needs a device address for the completion words.
 */
static int tdm__cuda_host_alloc(struct tdm__backend *b, size_t bytes, void **out)
{
	unsigned flags = cudaHostAllocPortable;
	void *p = NULL;
	cudaError_t e;

	if (out == NULL || bytes == 0)
		return -EINVAL;
	if (b->all_map_host)
		flags |= cudaHostAllocMapped;
	e = cudaHostAlloc(&p, bytes, flags);
	if (e != cudaSuccess)
		return tdm__cuda_fail(e);
	*out = p;
	return 0;
}

/*
 * For a free that failed: -EINVAL when the driver did not know the pointer (never allocated, or
 * freed already); any other error is a failed context, whose memory goes with it, so there is
 * nothing left to free: 0.
 */
static int tdm__cuda_free_status(cudaError_t e)
{
	if (e == cudaSuccess)
		return 0;
	(void)cudaGetLastError();
	return e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer ? -EINVAL : 0;
}

static int tdm__cuda_host_free(struct tdm__backend *b, void *p)
{
	(void)b;
	if (p == NULL)
		return 0;
	return tdm__cuda_free_status(cudaFreeHost(p));
}

/* Device memory, or with `managed` managed memory attached globally (any stream of any device
 * may use it), allocated with dev exactly current: both allocate on "the current device". */
static int tdm__cuda_alloc(struct tdm__backend *b, int dev, size_t bytes, bool managed, void **out)
{
	void *p = NULL;
	cudaError_t e;
	int prev;

	if (out == NULL || bytes == 0 || tdm__cuda_bad_dev(b, dev))
		return -EINVAL;
	e = tdm__cuda_enter(dev, &prev);
	if (e == cudaSuccess)
		e = managed ? cudaMallocManaged(&p, bytes, cudaMemAttachGlobal)
		            : cudaMalloc(&p, bytes);
	tdm__cuda_leave(dev, prev);
	if (e != cudaSuccess)
		return tdm__cuda_fail(e);
	*out = p;
	return 0;
}

static int tdm__cuda_device_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	return tdm__cuda_alloc(b, dev, bytes, false, out);
}

/*
 * cudaFree takes any device's memory whichever device is named, so the pointer's own device is
 * asked first, and memory of another device, or not device memory at all, is refused. A pointer
 * the driver does not know (never allocated, or freed already) is cudaMemoryTypeUnregistered.
 */
static int tdm__cuda_device_free(struct tdm__backend *b, int dev, void *p)
{
	struct cudaPointerAttributes a;
	cudaError_t e;
	int prev;

	if (tdm__cuda_bad_dev(b, dev))
		return -EINVAL;
	if (p == NULL)
		return 0;
	e = cudaPointerGetAttributes(&a, p);
	if (e == cudaSuccess &&
	    ((a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) ||
	     a.device != dev))
		return -EINVAL;
	if (e != cudaSuccess)
		(void)cudaGetLastError(); /* cudaFree says what is wrong */
	e = tdm__cuda_enter(dev, &prev);
	if (e == cudaSuccess)
		e = cudaFree(p);
	tdm__cuda_leave(dev, prev);
	return tdm__cuda_free_status(e);
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

/* ---- stream-ordered and managed memory --------------------------------------------------- */

static int tdm__cuda_malloc_async(struct tdm__backend *b, void *stream, size_t bytes, void **out)
{
	const struct tdm__cuda_stream *st = stream;
	void *p = NULL;
	cudaError_t e;

	if (st == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (!b->devs[st->dev].pools)
		return -ENOTSUP;
	TDM__CUDA_ON_STREAM(e, st, cudaMallocAsync(&p, bytes, st->s));
	if (e != cudaSuccess)
		return tdm__cuda_fail(e);
	*out = p;
	return 0;
}

/* The memory goes back to its pool once the work enqueued on the stream before it is done. */
static int tdm__cuda_free_async(struct tdm__backend *b, void *stream, void *p)
{
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	(void)b;
	if (st == NULL)
		return -EINVAL;
	if (p == NULL)
		return 0;
	TDM__CUDA_ON_STREAM(e, st, cudaFreeAsync(p, st->s));
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* Portable, like host_alloc: the pages are locked for every device's context, not only for the
 * one current here. */
static int tdm__cuda_host_register(struct tdm__backend *b, void *p, size_t bytes)
{
	cudaError_t e;

	(void)b;
	if (p == NULL || bytes == 0)
		return -EINVAL;
	e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* p must be the address that was registered: -EINVAL otherwise. */
static int tdm__cuda_host_unregister(struct tdm__backend *b, void *p)
{
	cudaError_t e;

	(void)b;
	if (p == NULL)
		return -EINVAL;
	e = cudaHostUnregister(p);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/*
 * Asked on every copy of host memory, so it must never leave an error behind: since CUDA 11 a
 * pointer the driver does not know is cudaSuccess with cudaMemoryTypeUnregistered, but older
 * drivers said cudaErrorInvalidValue, and either way the runtime's last error is taken back.
 * cudaMemoryTypeHost covers cudaHostAlloc and cudaHostRegister memory alike (any address inside
 * the range); managed memory is pageable on the host side, so it is not pinned.
 */
static int tdm__cuda_is_pinned(struct tdm__backend *b, const void *p)
{
	struct cudaPointerAttributes a;

	(void)b;
	if (p == NULL)
		return 0;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeHost ? 1 : 0;
}

/* The caller (memory.c) has refused sizes above the device's free memory: oversubscribed managed
 * memory can hang the GPU. */
static int tdm__cuda_managed_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	return tdm__cuda_alloc(b, dev, bytes, true, out);
}

/* Like cudaFree, any device memory of any device. */
static int tdm__cuda_managed_free(struct tdm__backend *b, void *p)
{
	(void)b;
	if (p == NULL)
		return 0;
	return tdm__cuda_free_status(cudaFree(p));
}

/* dev < 0: the host (its id is ignored). */
static struct cudaMemLocation tdm__cuda_location(int dev)
{
	struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = dev};

	if (dev < 0) {
		loc.type = cudaMemLocationTypeHost;
		loc.id = 0;
	}
	return loc;
}

static int tdm__cuda_prefetch(struct tdm__backend *b, void *stream, const void *p, size_t bytes,
                              int dev)
{
	const struct tdm__cuda_stream *st = stream;
	struct cudaMemLocation loc = tdm__cuda_location(dev);
	cudaError_t e;

	if (st == NULL || p == NULL || dev >= b->ndev)
		return -EINVAL;
	if (bytes == 0)
		return 0;
	/* Both the target device and the stream's device need concurrent managed access; without
	 * it the runtime says cudaErrorInvalidDevice, which is no bad argument of the caller's. */
	if (!b->devs[st->dev].managed || (dev >= 0 && !b->devs[dev].managed))
		return -ENOTSUP;
	TDM__CUDA_ON_STREAM(e, st, TDM__CUDA_PREFETCH(p, bytes, loc, 0, st->s));
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* A hint about a range, not stream-ordered: no device needs to be current. */
static int tdm__cuda_advise(struct tdm__backend *b, const void *p, size_t bytes,
                            tdm_mem_advice advice, int dev)
{
	enum cudaMemoryAdvise a;
	cudaError_t e;

	if (p == NULL || dev >= b->ndev)
		return -EINVAL;
	switch (advice) {
	case TDM_ADVISE_READ_MOSTLY: /* the location is ignored */
		a = cudaMemAdviseSetReadMostly;
		break;
	case TDM_ADVISE_PREFERRED_LOCATION:
		a = cudaMemAdviseSetPreferredLocation;
		break;
	case TDM_ADVISE_ACCESSED_BY:
		a = cudaMemAdviseSetAccessedBy;
		break;
	default:
		return -EINVAL;
	}
	if (bytes == 0)
		return 0;
	e = TDM__CUDA_ADVISE(p, bytes, a, tdm__cuda_location(dev));
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* Asked of "the current device". Memory retained by the pool (see tdm__cuda_retain_pool) counts
 * as used. */
static int tdm__cuda_mem_info(struct tdm__backend *b, int dev, size_t *free_bytes,
                              size_t *total_bytes)
{
	size_t f = 0, t = 0;
	cudaError_t e;
	int prev;

	if (free_bytes == NULL || total_bytes == NULL || tdm__cuda_bad_dev(b, dev))
		return -EINVAL;
	e = tdm__cuda_enter(dev, &prev);
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&f, &t);
	tdm__cuda_leave(dev, prev);
	if (e != cudaSuccess)
		return tdm__cuda_fail(e);
	*free_bytes = f;
	*total_bytes = t;
	return 0;
}

/* ---- host functions and peer copies ------------------------------------------------------ */

/*
 * fn runs on a driver thread, which must not call CUDA (cudaLaunchHostFunc). Unlike a stream
 * callback it is not called at all once the context has failed: whatever fn was to release stays
 * with it then.
 */
static int tdm__cuda_host_fn(struct tdm__backend *b, void *stream, void (*fn)(void *), void *arg)
{
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	(void)b;
	if (st == NULL || fn == NULL)
		return -EINVAL;
	TDM__CUDA_ON_STREAM(e, st, cudaLaunchHostFunc(st->s, fn, arg));
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* Works without peer access enabled (the driver stages through the host then), from a stream of
 * either device. */
static int tdm__cuda_memcpy_peer_async(struct tdm__backend *b, void *stream, void *dst, int dst_dev,
                                       const void *src, int src_dev, size_t bytes)
{
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	if (st == NULL || (bytes > 0 && (dst == NULL || src == NULL)) ||
	    tdm__cuda_bad_dev(b, dst_dev) || tdm__cuda_bad_dev(b, src_dev))
		return -EINVAL;
	if (bytes == 0)
		return 0;
	TDM__CUDA_ON_STREAM(e, st, cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, st->s));
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
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
    .close = tdm__cuda_close,
    .device_count = tdm__cuda_device_count,
    .device_info = tdm__cuda_device_info,
    .stream_create = tdm__cuda_stream_create,
    .stream_destroy = tdm__cuda_stream_destroy,
    .stream_query = tdm__cuda_stream_query,
    .event_create = tdm__cuda_event_create,
    .event_destroy = tdm__cuda_event_destroy,
    .event_record = tdm__cuda_event_record,
    .event_query = tdm__cuda_event_query,
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
};

#endif /* TANDEM_HAVE_CUDA */
