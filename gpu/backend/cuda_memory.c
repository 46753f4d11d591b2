// SPDX-License-Identifier: MIT
/*
 * The cuda backend's memory ops: pinned host memory, device and managed memory, stream-ordered
 * allocation, host registration, prefetches and advice, memory info, host functions and peer
 * copies. Compiled only with TANDEM_HAVE_CUDA.
 */
#include <stdbool.h>
#include <stdint.h>

#include "cuda_internal.h"

/* ---- memory ------------------------------------------------------------------------------ */

/*
 * Portable: usable by every device's context, whichever is current here. Mapped:
 * cuStreamWriteValue64 needs a device address for the completion words.
 */
int tdm__cuda_host_alloc(struct tdm__backend *b, size_t bytes, void **out)
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

int tdm__cuda_host_free(struct tdm__backend *b, void *p)
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

int tdm__cuda_device_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	return tdm__cuda_alloc(b, dev, bytes, false, out);
}

/*
 * cudaFree takes any device's memory whichever device is named, so the pointer's own device is
 * asked first, and memory of another device, or not device memory at all, is refused. A pointer
 * the driver does not know (never allocated, or freed already) is cudaMemoryTypeUnregistered.
 */
int tdm__cuda_device_free(struct tdm__backend *b, int dev, void *p)
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

/* ---- stream-ordered and managed memory --------------------------------------------------- */

int tdm__cuda_malloc_async(struct tdm__backend *b, void *stream, size_t bytes, void **out)
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
int tdm__cuda_free_async(struct tdm__backend *b, void *stream, void *p)
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
int tdm__cuda_host_register(struct tdm__backend *b, void *p, size_t bytes)
{
	cudaError_t e;

	(void)b;
	if (p == NULL || bytes == 0)
		return -EINVAL;
	e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
	return e == cudaSuccess ? 0 : tdm__cuda_fail(e);
}

/* p must be the address that was registered: -EINVAL otherwise. */
int tdm__cuda_host_unregister(struct tdm__backend *b, void *p)
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
int tdm__cuda_is_pinned(struct tdm__backend *b, const void *p)
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
int tdm__cuda_managed_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	return tdm__cuda_alloc(b, dev, bytes, true, out);
}

/* Like cudaFree, any device memory of any device. */
int tdm__cuda_managed_free(struct tdm__backend *b, void *p)
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

int tdm__cuda_prefetch(struct tdm__backend *b, void *stream, const void *p, size_t bytes, int dev)
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
int tdm__cuda_advise(struct tdm__backend *b, const void *p, size_t bytes, tdm_mem_advice advice,
                     int dev)
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
int tdm__cuda_mem_info(struct tdm__backend *b, int dev, size_t *free_bytes, size_t *total_bytes)
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
int tdm__cuda_host_fn(struct tdm__backend *b, void *stream, void (*fn)(void *), void *arg)
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
int tdm__cuda_memcpy_peer_async(struct tdm__backend *b, void *stream, void *dst, int dst_dev,
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
