// SPDX-License-Identifier: MIT
/*
 * Memory: device and pinned host allocations, stream-ordered allocation, managed memory on
 * request, peer copies, host registration, and what a copy does with pageable host memory (staged
 * through the pinned pool, or refused).
 *
 * Staging: the pageable side of a copy is copied on the host, in stream order. Host to device:
 * the caller's thread copies into a pinned block at once (the source may change as soon as the
 * call returns, as with cudaMemcpyAsync from pageable memory), the device copies from the
 * block, and a host function on the stream gives the block back. Device to host: the device
 * copies into the block, then a host function copies the block into the destination and gives
 * it back. Host functions run on a driver thread that must not call CUDA: giving a block back to
 * the pool is pure CPU work.
 *
 * One exception keeps stream order: a copy to the device whose source overlaps the destination
 * of a device-to-host copy still pending on the same stream (data going round through one host
 * buffer) reads its source in a host function queued before its device copy, after the pending
 * one wrote it. Copied at the call, it would send what the buffer held before.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

/* Head of a staging block: what the host function needs besides its ticket (struct tdm__stage,
 * which knows the device). 256 bytes keep the data aligned. */
struct staging {
	void *dst; /* device to host: the pageable destination */
	size_t bytes;
	char pad[256 - 2 * sizeof(void *)];
};

_Static_assert(sizeof(struct staging) == 256, "the data after the head stays 256-aligned");

int tdm__is_pinned(struct tdm__gpu *gpu, const void *p)
{
	if (tdm__pinned_owns(gpu, p))
		return 1;
	/* A backend that cannot tell gets the copy as it is, as a plain cudaMemcpyAsync would. */
	return gpu->ops->is_pinned == NULL || gpu->ops->is_pinned(gpu->b, p) == 1;
}

/*
 * A staged copy's ticket, the host function's argument: on its device's list until the host
 * function runs (or the enqueue fails). When the device fails first, tdm__staging_orphan gives
 * the block back and leaves the ticket, blockless, for a host function that may still run (it
 * then does nothing) or for destroy.
 */
struct tdm__stage {
	struct tdm__gdev *d;
	struct staging *st; /* NULL once the device's failure took the block back */
	struct tdm__stage *prev, *next;
	/* Device to host: the stream and the destination range, [lo, hi), while listed. */
	const struct tdm__stream *s;
	uintptr_t lo, hi;
	/* Under stage_lock. A host function is copying through the block, outside the lock (a
	 * copy of megabytes must not hold up the list, nor tdm__device_fail on the poller): the
	 * block is not tdm__staging_orphan's to give back meanwhile. The ticket stays listed, so
	 * that a copy to the device from a destination being written keeps stream order. */
	bool busy;
	/* Host to device read in stream order (staging_copy_in), under stage_lock: */
	const void *src;
	bool copied;    /* the source was read into the block */
	bool abandoned; /* the device copy could not be queued: copy_in gives the block back */
};

static void stage_link(struct tdm__stage *n)
{
	struct tdm__gdev *d = n->d;
	pthread_mutex_lock(&d->stage_lock);
	n->prev = NULL;
	n->next = d->staged;
	if (n->next != NULL)
		n->next->prev = n;
	d->staged = n;
	pthread_mutex_unlock(&d->stage_lock);
}

/* Takes n off its list and frees it; returns its block, NULL if the device took it back. */
static struct staging *stage_unlink(struct tdm__stage *n)
{
	struct tdm__gdev *d = n->d;
	pthread_mutex_lock(&d->stage_lock);
	if (n->prev != NULL)
		n->prev->next = n->next;
	else
		d->staged = n->next;
	if (n->next != NULL)
		n->next->prev = n->prev;
	struct staging *st = n->st;
	pthread_mutex_unlock(&d->stage_lock);
	free(n);
	return st;
}

void tdm__staging_orphan(struct tdm__gdev *d)
{
	pthread_mutex_lock(&d->stage_lock);
	for (struct tdm__stage *n = d->staged; n != NULL; n = n->next)
		if (n->st != NULL && !n->busy) {
			tdm__pinned_free(d->gpu, n->st);
			n->st = NULL;
		}
	pthread_mutex_unlock(&d->stage_lock);
}

void tdm__staging_fini(struct tdm__gdev *d)
{
	while (d->staged != NULL) {
		struct staging *st = stage_unlink(d->staged);
		if (st != NULL)
			tdm__pinned_free(d->gpu, st);
	}
}

static void staging_release(void *arg)
{
	struct tdm__stage *n = arg;
	struct tdm__gpu *gpu = n->d->gpu;
	struct staging *st = stage_unlink(n);
	if (st != NULL)
		tdm__pinned_free(gpu, st);
}

/* Whether a device-to-host copy still pending on s writes into [p, p + bytes). */
static bool pending_write_overlaps(struct tdm__gdev *d, const struct tdm__stream *s, const void *p,
                                   size_t bytes)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
	bool hit = false;
	pthread_mutex_lock(&d->stage_lock);
	for (struct tdm__stage *n = d->staged; n != NULL && !hit; n = n->next)
		hit = n->s == s && n->lo < hi && lo < n->hi;
	pthread_mutex_unlock(&d->stage_lock);
	return hit;
}

/* The block of n for a host function to copy through, marked busy; NULL when there is none to
 * copy through (the device's failure took it back, or, for copy_in, the copy was abandoned). */
static struct staging *stage_busy(struct tdm__stage *n, bool unless_abandoned)
{
	pthread_mutex_lock(&n->d->stage_lock);
	struct staging *st = unless_abandoned && n->abandoned ? NULL : n->st;
	n->busy = st != NULL;
	pthread_mutex_unlock(&n->d->stage_lock);
	return st;
}

/* Host to device in stream order: the source into the block, which the device copy queued after
 * this then reads. */
static void staging_copy_in(void *arg)
{
	struct tdm__stage *n = arg;
	struct tdm__gdev *d = n->d;
	struct staging *st = stage_busy(n, true);
	if (st != NULL)
		memcpy(st + 1, n->src, st->bytes);
	pthread_mutex_lock(&d->stage_lock);
	n->busy = false;
	n->copied = true;
	bool drop = n->abandoned;
	/* The device failed during the copy: tdm__staging_orphan left the block to this, and the
	 * release after the device copy will not run (a dead device runs no host function). The
	 * ticket stays, blockless, for destroy. stage_lock orders this against the orphaning:
	 * tdm__device_fail sets failed before it takes the lock for tdm__staging_orphan, so an
	 * orphaning that skipped this busy ticket is seen here, and one still to come finds the
	 * ticket not busy (or blockless) and takes what is left. (Acquire: the release in
	 * tdm__device_fail, for the plain reading.) */
	bool dead = !drop && st != NULL && atomic_load_explicit(&d->failed, memory_order_acquire);
	if (dead)
		n->st = NULL;
	pthread_mutex_unlock(&d->stage_lock);
	if (drop) {
		struct staging *back = stage_unlink(n);
		if (back != NULL)
			tdm__pinned_free(d->gpu, back);
	} else if (dead) {
		tdm__pinned_free(d->gpu, st);
	}
}

static void staging_copy_out(void *arg)
{
	struct tdm__stage *n = arg;
	struct tdm__gpu *gpu = n->d->gpu;
	/* Listed until the write is over: a copy to the device from the destination, made
	 * meanwhile, must find it pending and read it in stream order, after this. */
	struct staging *st = stage_busy(n, false);
	if (st != NULL)
		memcpy(st->dst, st + 1, st->bytes);
	st = stage_unlink(n);
	if (st != NULL)
		tdm__pinned_free(gpu, st);
}

int tdm__memcpy_staged(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind)
{
	struct tdm__gpu *gpu = s->dev->gpu;
	const struct tdm__backend_ops *ops = gpu->ops;
	if (gpu->cfg.pageable == TDM_PAGEABLE_REFUSE)
		return -EFAULT;
	if (s->cap != NULL)
		return tdm__capture_refuse(
		    s); /* a replay would copy what the host held at capture */
	if (ops->host_fn == NULL)
		return -ENOTSUP;
	struct staging *st;
	if (bytes > SIZE_MAX - sizeof(*st))
		return -ENOMEM; /* the block's size would wrap, and the memcpy overrun it */
	int rc = tdm__pinned_alloc(gpu, sizeof(*st) + bytes, (void **)&st);
	if (rc != 0)
		return rc;
	struct tdm__stage *n = malloc(sizeof(*n));
	if (n == NULL) {
		tdm__pinned_free(gpu, st);
		return -ENOMEM;
	}
	memset(n, 0, sizeof(*n));
	n->d = s->dev;
	n->st = st;
	st->bytes = bytes;
	bool in_order = false;
	if (kind == TDM_COPY_H2D) {
		in_order = pending_write_overlaps(s->dev, s->st, src, bytes);
		if (in_order)
			n->src = src;
		else
			memcpy(st + 1, src, bytes);
	} else {
		st->dst = dst;
		n->s = s->st;
		n->lo = (uintptr_t)dst;
		n->hi = n->lo + bytes;
	}
	stage_link(n);
	bool queued;
	if (kind == TDM_COPY_H2D) {
		if (in_order && (rc = ops->host_fn(gpu->b, s->bs, staging_copy_in, n)) != 0) {
			queued = false; /* nothing of this copy was queued */
		} else {
			rc = ops->memcpy_async(gpu->b, s->bs, dst, st + 1, bytes, kind);
			queued = rc == 0;
			if (!queued && in_order) {
				/* The queued copy_in reads into the block: it gives it back when it
				 * runs, or this does when it ran already. */
				pthread_mutex_lock(&s->dev->stage_lock);
				bool ran = n->copied;
				n->abandoned = true;
				pthread_mutex_unlock(&s->dev->stage_lock);
				if (!ran)
					return rc;
			}
		}
		if (queued)
			rc = ops->host_fn(gpu->b, s->bs, staging_release, n);
	} else {
		rc = ops->memcpy_async(gpu->b, s->bs, st + 1, src, bytes, kind);
		queued = rc == 0;
		if (queued)
			rc = ops->host_fn(gpu->b, s->bs, staging_copy_out, n);
	}
	/* Once the host function is queued it owns the ticket (and n may be gone already). A
	 * failed enqueue of the copy leaves the block with us. A failed host function after a
	 * queued copy (a dead device, or no memory for the host function) does not: the copy may
	 * still read or write the block, so the ticket stays listed, and the device's failure or
	 * tdm_gpu_destroy gives the block back. The device's failure may have taken it already. */
	if (rc != 0 && !queued) {
		struct staging *back = stage_unlink(n);
		if (back != NULL)
			tdm__pinned_free(gpu, back);
	}
	return rc;
}

/* Backends fill the memory ops as they gain them; a missing one is -ENOTSUP, not a crash. */
#define NEED(gpu, op)                                                                              \
	do {                                                                                       \
		if ((gpu)->ops == NULL)                                                            \
			return -ENODEV;                                                            \
		if ((gpu)->ops->op == NULL)                                                        \
			return -ENOTSUP;                                                           \
	} while (0)

static bool dev_ok(struct tdm__gpu *gpu, int device)
{
	return gpu != NULL && device >= 0 && device < gpu->ndev;
}

int tdm__device_alloc(struct tdm__gpu *gpu, int device, size_t bytes, void **out)
{
	if (gpu == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	if (device < 0 || device >= gpu->ndev)
		return -EINVAL;
	return gpu->ops->device_alloc(gpu->b, device, bytes, out);
}

int tdm__device_free(struct tdm__gpu *gpu, int device, void *p)
{
	if (gpu == NULL || device < 0 || device >= gpu->ndev)
		return -EINVAL;
	if (p == NULL)
		return 0;
	/* -EINVAL from the backend for what is not live memory of `device`: each checks the
	 * device, since cudaFree alone would free another device's memory. */
	return gpu->ops->device_free(gpu->b, device, p);
}

static int host_alloc(struct tdm__gpu *gpu, size_t bytes, void **out)
{
	if (gpu == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	return gpu->ops->host_alloc(gpu->b, bytes, out);
}

static int host_free(struct tdm__gpu *gpu, void *p)
{
	if (gpu == NULL)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	if (p == NULL)
		return 0;
	/* A block of the pinned pool may start its chunk, which the backend would free from
	 * under the pool. */
	if (tdm__pinned_owns(gpu, p))
		return -EINVAL;
	return gpu->ops->host_free(gpu->b, p);
}

int tdm_device_alloc_async(tdm_stream *s, size_t bytes, void **out)
{
	if (s == NULL || !tdm__lease_held(s) || out == NULL || bytes == 0)
		return -EINVAL;
	struct tdm__gpu *gpu = s->dev->gpu;
	NEED(gpu, malloc_async);
	if (s->cap != NULL)
		return tdm__capture_refuse(s);
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	return tdm__enqueued(s, gpu->ops->malloc_async(gpu->b, s->bs, bytes, out));
}

int tdm_device_free_async(tdm_stream *s, void *p)
{
	if (s == NULL || !tdm__lease_held(s))
		return -EINVAL;
	if (p == NULL)
		return 0;
	struct tdm__gpu *gpu = s->dev->gpu;
	NEED(gpu, free_async);
	if (s->cap != NULL)
		return tdm__capture_refuse(s);
	return tdm__enqueued(s, gpu->ops->free_async(gpu->b, s->bs, p));
}

static int managed_alloc(struct tdm__gpu *gpu, int device, size_t bytes, void **out)
{
	if (out == NULL || bytes == 0)
		return -EINVAL;
	if (gpu != NULL && gpu->ndev == 0)
		return -ENODEV;
	if (!dev_ok(gpu, device))
		return -EINVAL;
	NEED(gpu, mem_info);
	NEED(gpu, managed_alloc);
	size_t free_bytes, total;
	int rc = gpu->ops->mem_info(gpu->b, device, &free_bytes, &total);
	if (rc != 0)
		return rc;
	/* Oversubscribing managed memory can hang the GPU, not just fail: refuse up front. */
	if (bytes > free_bytes)
		return -ENOMEM;
	return gpu->ops->managed_alloc(gpu->b, device, bytes, out);
}

static int managed_free(struct tdm__gpu *gpu, void *p)
{
	if (gpu == NULL)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	NEED(gpu, managed_free);
	if (p == NULL)
		return 0;
	return gpu->ops->managed_free(gpu->b, p);
}

int tdm_mem_prefetch(tdm_stream *s, const void *p, size_t bytes, int device)
{
	if (s == NULL || !tdm__lease_held(s) || p == NULL || bytes == 0)
		return -EINVAL;
	struct tdm__gpu *gpu = s->dev->gpu;
	if (device >= gpu->ndev)
		return -EINVAL;
	NEED(gpu, prefetch);
	if (s->cap != NULL)
		return tdm__capture_refuse(s);
	return tdm__enqueued(s,
	                     gpu->ops->prefetch(gpu->b, s->bs, p, bytes, device < 0 ? -1 : device));
}

static int mem_advise(struct tdm__gpu *gpu, const void *p, size_t bytes, tdm_mem_advice advice,
                      int device)
{
	if (gpu == NULL || p == NULL || bytes == 0 || advice < TDM_ADVISE_READ_MOSTLY ||
	    advice > TDM_ADVISE_ACCESSED_BY)
		return -EINVAL;
	if (gpu->ndev == 0) /* before the range: on a layer without devices every device is out */
		return -ENODEV;
	if (device >= gpu->ndev)
		return -EINVAL;
	NEED(gpu, advise);
	return gpu->ops->advise(gpu->b, p, bytes, advice, device < 0 ? -1 : device);
}

int tdm_memcpy_peer_async(tdm_stream *s, void *dst, int dst_device, const void *src, int src_device,
                          size_t bytes)
{
	if (s == NULL || !tdm__lease_held(s) || dst == NULL || src == NULL)
		return -EINVAL;
	struct tdm__gpu *gpu = s->dev->gpu;
	if (!dev_ok(gpu, dst_device) || !dev_ok(gpu, src_device) ||
	    (s->dev->index != dst_device && s->dev->index != src_device))
		return -EINVAL;
	NEED(gpu, memcpy_peer_async);
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	return tdm__enqueued(
	    s, gpu->ops->memcpy_peer_async(gpu->b, s->bs, dst, dst_device, src, src_device, bytes));
}

static int host_register(struct tdm__gpu *gpu, void *p, size_t bytes)
{
	if (gpu == NULL || p == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	if (gpu->ops->host_register == NULL)
		return -ENOTSUP;
	return gpu->ops->host_register(gpu->b, p, bytes);
}

static int host_unregister(struct tdm__gpu *gpu, void *p)
{
	if (gpu == NULL || p == NULL)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	if (gpu->ops->host_unregister == NULL)
		return -ENOTSUP;
	return gpu->ops->host_unregister(gpu->b, p);
}

/* The API's entries: each through the layer's gate (gpu_internal.h, TDM__GPU_CALL). */

int tdm_device_alloc(tdm_gpu *h, int device, size_t bytes, void **out)
{
	TDM__GPU_CALL(h, tdm__device_alloc(gpu, device, bytes, out));
}

int tdm_device_free(tdm_gpu *h, int device, void *p)
{
	TDM__GPU_CALL(h, tdm__device_free(gpu, device, p));
}

int tdm_host_alloc(tdm_gpu *h, size_t bytes, void **out)
{
	TDM__GPU_CALL(h, host_alloc(gpu, bytes, out));
}

int tdm_host_free(tdm_gpu *h, void *p)
{
	TDM__GPU_CALL(h, host_free(gpu, p));
}

int tdm_managed_alloc(tdm_gpu *h, int device, size_t bytes, void **out)
{
	TDM__GPU_CALL(h, managed_alloc(gpu, device, bytes, out));
}

int tdm_managed_free(tdm_gpu *h, void *p)
{
	TDM__GPU_CALL(h, managed_free(gpu, p));
}

int tdm_mem_advise(tdm_gpu *h, const void *p, size_t bytes, tdm_mem_advice advice, int device)
{
	TDM__GPU_CALL(h, mem_advise(gpu, p, bytes, advice, device));
}

int tdm_host_register(tdm_gpu *h, void *p, size_t bytes)
{
	TDM__GPU_CALL(h, host_register(gpu, p, bytes));
}

int tdm_host_unregister(tdm_gpu *h, void *p)
{
	TDM__GPU_CALL(h, host_unregister(gpu, p));
}
