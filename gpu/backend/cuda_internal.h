// SPDX-License-Identifier: MIT
/*
 * The cuda backend's private header (cuda.c, cuda_memory.c, cuda_graph.c): its state, CUDA's
 * errors as errnos, and the calling thread's current device. Only with TANDEM_HAVE_CUDA.
 */
#ifndef TDM_GPU_BACKEND_CUDA_INTERNAL_H
#define TDM_GPU_BACKEND_CUDA_INTERNAL_H

#include <errno.h>
#include <stddef.h>

#include "backend.h"

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

static inline int tdm__cuda_errno(cudaError_t e)
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
static inline int tdm__cuda_fail(cudaError_t e)
{
	(void)cudaGetLastError();
	return tdm__cuda_errno(e);
}

static inline int tdm__cu_errno(CUresult r)
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
extern _Thread_local int tdm__cuda_cur __attribute__((visibility("hidden")));

static inline cudaError_t tdm__cuda_set(int dev)
{
	cudaError_t e = cudaSetDevice(dev);

	tdm__cuda_cur = e == cudaSuccess ? dev : -1;
	return e;
}

static inline cudaError_t tdm__cuda_use(int dev)
{
	if (tdm__cuda_cur == dev)
		return cudaSuccess;
	return tdm__cuda_set(dev);
}

/* Asks the runtime, not the cache: for calls that create or allocate on "the current device". */
static inline cudaError_t tdm__cuda_use_exact(int dev)
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
static inline cudaError_t tdm__cuda_enter(int dev, int *prev)
{
	if (cudaGetDevice(prev) != cudaSuccess)
		*prev = -1;
	return tdm__cuda_use_exact(dev);
}

static inline void tdm__cuda_leave(int dev, int prev)
{
	if (prev >= 0 && prev != dev)
		(void)tdm__cuda_set(prev);
}

/*
 * After a hot-path call for `dev` failed with an error a wrong current device produces (a launch
 * into a stream of another device is cudaErrorInvalidResourceHandle): true when the cache had
 * lied, the device is now really current, and the call, which enqueued nothing, may be retried.
 */
static inline bool tdm__cuda_stale(int dev)
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
static inline bool tdm__cuda_retry(int dev, cudaError_t e, int tries)
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

static inline bool tdm__cuda_bad_dev(const struct tdm__backend *b, int dev)
{
	return dev < 0 || dev >= b->ndev;
}

/* ---- cuda_memory.c: the memory ops, host functions and peer copies ---- */

int tdm__cuda_host_alloc(struct tdm__backend *b, size_t bytes, void **out);
int tdm__cuda_host_free(struct tdm__backend *b, void *p);
int tdm__cuda_device_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out);
int tdm__cuda_device_free(struct tdm__backend *b, int dev, void *p);
int tdm__cuda_malloc_async(struct tdm__backend *b, void *stream, size_t bytes, void **out);
int tdm__cuda_free_async(struct tdm__backend *b, void *stream, void *p);
int tdm__cuda_host_register(struct tdm__backend *b, void *p, size_t bytes);
int tdm__cuda_host_unregister(struct tdm__backend *b, void *p);
int tdm__cuda_is_pinned(struct tdm__backend *b, const void *p);
int tdm__cuda_managed_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out);
int tdm__cuda_managed_free(struct tdm__backend *b, void *p);
int tdm__cuda_prefetch(struct tdm__backend *b, void *stream, const void *p, size_t bytes, int dev);
int tdm__cuda_advise(struct tdm__backend *b, const void *p, size_t bytes, tdm_mem_advice advice,
                     int dev);
int tdm__cuda_mem_info(struct tdm__backend *b, int dev, size_t *free_bytes, size_t *total_bytes);
int tdm__cuda_host_fn(struct tdm__backend *b, void *stream, void (*fn)(void *), void *arg);
int tdm__cuda_memcpy_peer_async(struct tdm__backend *b, void *stream, void *dst, int dst_dev,
                                const void *src, int src_dev, size_t bytes);

/* ---- cuda_graph.c: stream capture and CUDA graphs (backend.h, "graphs") ---- */

int tdm__cuda_capture_begin(struct tdm__backend *b, void *stream);
int tdm__cuda_capture_end(struct tdm__backend *b, void *stream, void **graph);
int tdm__cuda_graph_instantiate(struct tdm__backend *b, void *graph, void **exec);
int tdm__cuda_graph_update(struct tdm__backend *b, void *exec, void *graph);
int tdm__cuda_graph_launch(struct tdm__backend *b, void *exec, void *stream);
void tdm__cuda_graph_free(struct tdm__backend *b, void *graph);
void tdm__cuda_graph_exec_free(struct tdm__backend *b, void *exec);

#endif /* TDM_GPU_BACKEND_CUDA_INTERNAL_H */
