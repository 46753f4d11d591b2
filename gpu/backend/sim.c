// SPDX-License-Identifier: MIT
/*
 * The `sim` backend: an in-process GPU for machines without one. It owns the simulated devices,
 * their streams (each an in-order queue drained by a thread of its own, "tdm-sim<N>"), their
 * events, and the record of injected faults. "Device" memory is host memory, so copies and
 * kernels are plain loads and stores done by the stream's thread.
 *
 * It mirrors CUDA where the two overlap, because the poller, pools and awaits above it are the
 * ones that run on CUDA: work on a stream runs in order; an event never recorded counts as done
 * and re-recording resets it; destroying a stream waits for its work; destroying an event with a
 * record still queued is allowed (it goes when the record has run); and once a device failed
 * every later operation on it is skipped and every enqueue fails at once with -EIO.
 *
 * Faults (tdm_sim_inject) arm a stream; the next work operation enqueued on it (a copy, a memset
 * or a kernel) takes the fault. Completion points (write_value, event records) never do: a skipped
 * completion word would hang its await instead of failing it. TDM_SIM_FAULT_OP: the operation
 * does nothing, and the next completion point that runs on the stream reports -EIO (word_status
 * for that value, or event_query) while the stream goes on. TDM_SIM_FAULT_STICKY: the operation
 * kills the device, as a trapping kernel does.
 *
 * Memory: each device simulates 80 GiB. Its memory (device_alloc, malloc_async, managed_alloc)
 * is host memory, recorded with its device and size in the memory table (sim_memory.h), beside
 * the pinned host ranges (host_alloc blocks and registered buffers; nothing is actually locked).
 * A free takes its block off the table, so a pointer never allocated, freed twice, or (for
 * device_free) named with another device is refused with -EINVAL, as cudaFree refuses it. A
 * free_async is an operation of the stream: the memory stays valid for the work enqueued before
 * it. Copies and memsets check their device sides when enqueued, and refuse a range that leaves
 * its allocation with -EINVAL, as cudaMemcpyAsync does; when a copy, a memset or a kernel runs,
 * every device range it reads or writes is checked again, and one that is not (or no longer)
 * allocated fails the device, as an illegal address does on a GPU: the host process never
 * touches it.
 *
 * A busy kernel (launch_busy) fills the whole device, so it runs on its stream's thread under
 * the device's busy lock, held for the kernel's length: busy kernels on a device's streams run one
 * after another, as on a saturated GPU, while other work (spin kernels, copies) runs beside them.
 *
 * Graphs (sim_graph.c): a capturing stream records its work into the capture instead of queueing
 * it; a replay of an executable graph is one operation of the launching stream's queue, which
 * runs the graph's nodes in capture order after the graph's previous replay.
 *
 * Lock rules: b->lock guards the lists of live streams and events; s->lock guards a stream's
 * queue, `stop` and `armed`; s->err_lock guards its erred values; b->mem's lock guards the
 * memory table, and a stream thread holds it for reading while a copy or a kernel runs; d->busy
 * is held by a stream thread while it runs a busy kernel; b->graph_lock guards the captures and
 * the capture fields of streams and events. No thread holds two at once, but for one order: an
 * executable graph's lock is held by graph_launch across its enqueue, which takes s->lock (and
 * b->graph_lock, on a capturing stream), so that replays of one graph take their places in the
 * graph's order and in the streams' queues in one order.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "base/say.h"
#include "sim_internal.h"

#define SIM_MAX_DEVICES 1024

/* ---- devices ---- */

static int sim_open(struct tdm__backend **out, const tdm_gpu_config *cfg)
{
	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	unsigned n = cfg != NULL && cfg->sim_devices != 0 ? cfg->sim_devices : 1;
	if (n > SIM_MAX_DEVICES)
		return tdm__refuse(-EINVAL, "tdm_gpu_config.sim_devices=%u: above %u", n,
		                   SIM_MAX_DEVICES);
	struct tdm__backend *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	b->devs = calloc(n, sizeof(*b->devs));
	if (b->devs == NULL || tdm__sim_mem_init(&b->mem, (int)n) != 0) {
		free(b->devs);
		free(b);
		return -ENOMEM;
	}
	b->ndev = (int)n;
	b->sm_count = cfg != NULL && cfg->sim_sm_count != 0 ? (int)cfg->sim_sm_count : 132;
	for (unsigned i = 0; i < n; i++)
		pthread_mutex_init(&b->devs[i].busy, NULL);
	pthread_mutex_init(&b->lock, NULL);
	list_init(&b->streams);
	list_init(&b->events);
	pthread_mutex_init(&b->graph_lock, NULL);
	list_init(&b->captures);
	b->next_capture = 1;
	*out = b;
	return 0;
}

static void sim_event_destroy(struct tdm__backend *b, void *ev);

static void sim_close(struct tdm__backend *b)
{
	if (b == NULL)
		return;
	/* Streams first: draining them lets go of the events their queued records hold. */
	while (b->streams.next != &b->streams)
		tdm__sim_stream_destroy(b, b->streams.next);
	while (b->events.next != &b->events)
		sim_event_destroy(b, b->events.next);
	tdm__sim_capture_fini(b); /* captures never ended; their streams left them above */
	pthread_mutex_destroy(&b->graph_lock);
	/* The stream threads that take a device's busy lock are gone. */
	for (int i = 0; i < b->ndev; i++)
		pthread_mutex_destroy(&b->devs[i].busy);
	pthread_mutex_destroy(&b->lock);
	tdm__sim_mem_fini(&b->mem);
	free(b->devs);
	free(b);
}

static int sim_device_count(struct tdm__backend *b)
{
	return b != NULL ? b->ndev : -EINVAL;
}

/* Dead from the moment its sticky error happened (a trap, a handler's fault, a bad address),
 * whether or not the work still writing memory (dead_status) is over. */
static bool sim_device_dead(struct tdm__backend *b, int dev)
{
	return dev_dead(&b->devs[dev]);
}

static int sim_device_info(struct tdm__backend *b, int dev, struct tdm__device_info *out)
{
	if (b == NULL || out == NULL || !dev_ok(b, dev))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "tandem sim device %d", dev);
	out->sm_count = b->sm_count;
	out->prio_least = 0;
	out->prio_greatest = -5;
	out->can_write_value64 = true;
	out->async_engines = 3;
	out->maps_host = true; /* its "device" runs on the host */
	return 0;
}

/* ---- memory: sim_memory.h ---- */

static int sim_host_alloc(struct tdm__backend *b, size_t bytes, void **out)
{
	if (b == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	return tdm__sim_mem_alloc(&b->mem, SIM_MEM_HOST, -1, bytes, out);
}

/* Only what host_alloc gave and is not freed yet: anything else (a registered buffer, foreign
 * memory, a block freed already) is -EINVAL, as cudaFreeHost refuses it, and stays untouched. */
static int sim_host_free(struct tdm__backend *b, void *p)
{
	if (b == NULL)
		return -EINVAL;
	return p != NULL ? tdm__sim_mem_free(&b->mem, p, SIM_MEM_HOST, -1, false) : 0;
}

static int sim_host_register(struct tdm__backend *b, void *p, size_t bytes)
{
	if (b == NULL || p == NULL || bytes == 0)
		return -EINVAL;
	return tdm__sim_mem_register(&b->mem, p, bytes);
}

/* p must be the address that was registered. */
static int sim_host_unregister(struct tdm__backend *b, void *p)
{
	if (b == NULL || p == NULL)
		return -EINVAL;
	return tdm__sim_mem_unregister(&b->mem, p);
}

static int sim_is_pinned(struct tdm__backend *b, const void *p)
{
	if (b == NULL || p == NULL)
		return 0;
	return tdm__sim_mem_is_pinned(&b->mem, p);
}

static int sim_device_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	if (b == NULL || out == NULL || bytes == 0 || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO; /* as cudaMalloc after a sticky error */
	return tdm__sim_mem_alloc(&b->mem, SIM_MEM_DEVICE, dev, bytes, out);
}

/* Memory of any of the three allocators, if it is dev's: cudaFree would take another device's
 * too, which tandem refuses on both backends. A dead device's memory is freed all the same. */
static int sim_device_free(struct tdm__backend *b, int dev, void *p)
{
	if (b == NULL || !dev_ok(b, dev))
		return -EINVAL;
	return p != NULL ? tdm__sim_mem_free(&b->mem, p, SIM_MEM_DEVICE, dev, false) : 0;
}

/* Managed memory is device memory here: it counts against the device it was asked for. */
static int sim_managed_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	return sim_device_alloc(b, dev, bytes, out);
}

/* Like cudaFree, it takes any device memory, of any device. */
static int sim_managed_free(struct tdm__backend *b, void *p)
{
	if (b == NULL)
		return -EINVAL;
	return p != NULL ? tdm__sim_mem_free(&b->mem, p, SIM_MEM_DEVICE, -1, false) : 0;
}

static int sim_advise(struct tdm__backend *b, const void *p, size_t bytes, tdm_mem_advice advice,
                      int dev)
{
	(void)bytes;
	if (b == NULL || p == NULL || advice < TDM_ADVISE_READ_MOSTLY ||
	    advice > TDM_ADVISE_ACCESSED_BY || dev >= b->ndev)
		return -EINVAL;
	return 0; /* a hint about where pages should live; all of them live in host memory */
}

/* Like cudaMemGetInfo, it fails on a dead device. */
static int sim_mem_info(struct tdm__backend *b, int dev, size_t *free_bytes, size_t *total_bytes)
{
	if (b == NULL || free_bytes == NULL || total_bytes == NULL || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO;
	*free_bytes = (size_t)tdm__sim_mem_free_bytes(&b->mem, dev);
	*total_bytes = (size_t)TDM__SIM_DEV_TOTAL;
	return 0;
}

/* ---- events ---- */

static int sim_event_create(struct tdm__backend *b, int dev, void **out)
{
	if (b == NULL || out == NULL || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO;
	struct sim_event *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	e->dev = &b->devs[dev];
	atomic_init(&e->refs, 1);
	pthread_mutex_lock(&b->lock);
	list_add(&b->events, &e->link);
	pthread_mutex_unlock(&b->lock);
	*out = e;
	return 0;
}

static void sim_event_destroy(struct tdm__backend *b, void *ev)
{
	struct sim_event *e = ev;
	if (b == NULL || e == NULL)
		return;
	pthread_mutex_lock(&b->lock);
	list_del(&e->link);
	pthread_mutex_unlock(&b->lock);
	event_unref(e);
}

static int sim_event_record(struct tdm__backend *b, void *ev, void *stream)
{
	struct sim_event *e = ev;
	struct sim_stream *s = stream;
	if (b == NULL || e == NULL || s == NULL || e->dev != s->dev)
		return -EINVAL;
	if (dev_dead(s->dev))
		return -EIO;
	/* A capture point on a capturing stream; a real record forgets an earlier capture point.
	 * Relaxed, `captured`: as tdm__sim_capturing's note. */
	if (tdm__sim_capturing(s) || atomic_load_explicit(&e->captured, memory_order_relaxed)) {
		int rc = tdm__sim_capture_record(b, e, s);
		if (rc <= 0)
			return rc;
	}
	/* Relaxed: the caller holds the owner's reference, so the count cannot reach 0 here. */
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
	int rc = tdm__sim_submit(s, (struct sim_op){.kind = SIM_MARK, .u.mark.ev = e});
	if (rc != 0)
		event_unref(e);
	return rc;
}

static int sim_event_query(struct tdm__backend *b, void *ev)
{
	struct sim_event *e = ev;
	if (b == NULL || e == NULL)
		return -EINVAL;
	if (dev_dead(e->dev))
		return dead_status(e->dev);
	/* Relaxed: as tdm__sim_capturing's note. */
	if (atomic_load_explicit(&e->captured, memory_order_relaxed)) {
		int rc = tdm__sim_capture_event_query(b, e);
		if (rc <= 0)
			return rc;
	}
	/* Relaxed: see tdm__sim_submit(); a record made by this thread, or handed to it, is seen.
	 */
	uint64_t rec = atomic_load_explicit(&e->recorded, memory_order_relaxed);
	if (rec == 0)
		return 0;
	/* Acquire: pairs with the release CAS in mark_event. */
	uint64_t done = atomic_load_explicit(&e->done, memory_order_acquire);
	if ((done >> 1) < rec)
		return -EAGAIN;
	return (done & 1) != 0 ? -EIO : 0;
}

/* An edge: what the stream runs after it waits for the event's latest record to have run. A
 * never recorded event has nothing to wait for (as with CUDA). The event is kept alive by a
 * reference until the wait has run. */
static int sim_stream_wait_event(struct tdm__backend *b, void *stream, void *ev)
{
	struct sim_event *e = ev;
	struct sim_stream *s = stream;
	if (b == NULL || e == NULL || s == NULL)
		return -EINVAL;
	/* A wait inside a capture, or a join of one (relaxed, `captured`: as tdm__sim_capturing's
	 * note). */
	if (tdm__sim_capturing(s) || atomic_load_explicit(&e->captured, memory_order_relaxed)) {
		int rc = tdm__sim_capture_wait(b, s, e);
		if (rc <= 0)
			return rc;
	}
	/* Relaxed: as in sim_event_query, a record made by this thread, or handed to it, is seen.
	 */
	uint64_t rec = atomic_load_explicit(&e->recorded, memory_order_relaxed);
	if (rec == 0)
		return 0;
	/* Relaxed: the caller holds the owner's reference, so the count cannot reach 0 here. */
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
	int rc = tdm__sim_submit(s, (struct sim_op){.kind = SIM_WAIT, .u.mark = {e, rec}});
	if (rc != 0)
		event_unref(e);
	return rc;
}

/* The error of the last record goes; its generation stays, so that a record still pending is
 * still waited for. Relaxed: the new owner got the event through the pool's lock. */
static void sim_event_reset(struct tdm__backend *b, void *ev)
{
	(void)b;
	struct sim_event *e = ev;
	atomic_fetch_and_explicit(&e->done, ~(uint64_t)1, memory_order_relaxed);
}

/* ---- stamps ---- */

/* A sim event stamps every record it runs (mark_event): a timer is an event; its time. */
static int sim_timer_time(struct tdm__backend *b, void *timer, uint64_t *ns)
{
	struct sim_event *e = timer;
	if (b == NULL || e == NULL || ns == NULL)
		return -EINVAL;
	/* Relaxed: as in sim_event_query. */
	uint64_t rec = atomic_load_explicit(&e->recorded, memory_order_relaxed);
	if (rec == 0)
		return -EINVAL;
	if (dev_dead(e->dev))
		return dead_status(e->dev);
	/* Acquire: pairs with the release CAS in mark_event, which follows the stamp's store. */
	uint64_t done = atomic_load_explicit(&e->done, memory_order_acquire);
	if ((done >> 1) < rec)
		return -EAGAIN;
	*ns = atomic_load_explicit(&e->stamp_ns, memory_order_relaxed);
	return 0;
}

static int sim_timer_elapsed(struct tdm__backend *b, void *from, void *to, int64_t *ns)
{
	uint64_t t0 = 0, t1 = 0;
	int rc = sim_timer_time(b, from, &t0);
	if (rc == 0)
		rc = sim_timer_time(b, to, &t1);
	if (rc != 0)
		return rc;
	if (ns == NULL || ((struct sim_event *)from)->dev != ((struct sim_event *)to)->dev)
		return -EINVAL;
	*ns = (int64_t)(t1 - t0);
	return 0;
}

/* ---- work ---- */

static int sim_write_value(struct tdm__backend *b, void *stream, uint64_t *word, uint64_t value)
{
	/* cuStreamWriteValue64 wants an 8-byte aligned address. */
	if (b == NULL || stream == NULL || word == NULL || ((uintptr_t)word & 7u) != 0)
		return -EINVAL;
	return tdm__sim_submit(stream,
	                       (struct sim_op){.kind = SIM_WRITE, .u.write = {word, value}});
}

/*
 * A copy whose device sides lie within live allocations (device blocks, or pinned host memory,
 * which a device reaches too): -EINVAL otherwise, as cudaMemcpyAsync refuses a range past the
 * end of an allocation. A dead device says -EIO first, as a CUDA call returns the sticky error.
 */
static int submit_copy(struct tdm__backend *b, struct sim_stream *s, void *dst, bool dst_dev,
                       const void *src, bool src_dev, size_t bytes)
{
	if (dev_dead(s->dev))
		return -EIO;
	tdm__sim_mem_read_begin(&b->mem);
	bool ok = (!dst_dev || tdm__sim_mem_reaches(&b->mem, dst, bytes, false)) &&
	          (!src_dev || tdm__sim_mem_reaches(&b->mem, src, bytes, false));
	tdm__sim_mem_read_end(&b->mem);
	if (!ok)
		return -EINVAL;
	return tdm__sim_submit(
	    s, (struct sim_op){.kind = SIM_COPY, .u.copy = {dst, src, bytes, dst_dev, src_dev}});
}

static int sim_memcpy_async(struct tdm__backend *b, void *stream, void *dst, const void *src,
                            size_t bytes, tdm_copy_kind kind)
{
	if (b == NULL || stream == NULL || dst == NULL || src == NULL || kind < TDM_COPY_H2D ||
	    kind > TDM_COPY_D2D)
		return -EINVAL;
	return submit_copy(b, stream, dst, kind != TDM_COPY_D2H, src, kind != TDM_COPY_H2D, bytes);
}

/* Device memory set in stream order, its range checked at the call as a copy's device side is
 * (-EINVAL, nothing queued) and again when it runs. Zero bytes enqueue nothing, as with CUDA. */
static int sim_memset_async(struct tdm__backend *b, void *stream, void *dst, int value,
                            size_t bytes)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || dst == NULL)
		return -EINVAL;
	if (dev_dead(s->dev))
		return -EIO;
	if (bytes == 0)
		return 0;
	tdm__sim_mem_read_begin(&b->mem);
	bool ok = tdm__sim_mem_reaches(&b->mem, dst, bytes, false);
	tdm__sim_mem_read_end(&b->mem);
	if (!ok)
		return -EINVAL;
	return tdm__sim_submit(
	    s, (struct sim_op){.kind = SIM_MEMSET, .u.memset = {dst, value, bytes}});
}

static int sim_launch_spin(struct tdm__backend *b, void *stream, uint32_t ns)
{
	if (b == NULL || stream == NULL)
		return -EINVAL;
	return tdm__sim_submit(stream, (struct sim_op){.kind = SIM_SPIN, .u.ns = ns});
}

static int sim_launch_busy(struct tdm__backend *b, void *stream, uint32_t ns)
{
	if (b == NULL || stream == NULL)
		return -EINVAL;
	return tdm__sim_submit(stream, (struct sim_op){.kind = SIM_BUSY, .u.ns = ns});
}

static int sim_launch_scale(struct tdm__backend *b, void *stream, float *y, const float *x, float a,
                            size_t n)
{
	if (b == NULL || stream == NULL || y == NULL || x == NULL)
		return -EINVAL;
	return tdm__sim_submit(stream, (struct sim_op){.kind = SIM_SCALE, .u.scale = {y, x, a, n}});
}

static int sim_launch_fault(struct tdm__backend *b, void *stream)
{
	if (b == NULL || stream == NULL)
		return -EINVAL;
	return tdm__sim_submit(stream, (struct sim_op){.kind = SIM_TRAP});
}

/* Allocates at once: the memory is valid for the stream's later work, as cudaMallocAsync
 * promises, and already before. */
static int sim_malloc_async(struct tdm__backend *b, void *stream, size_t bytes, void **out)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (dev_dead(s->dev))
		return -EIO;
	if (tdm__sim_capturing(s)) {
		int rc = tdm__sim_capture_refuse(s); /* no allocation in a capture (sim) */
		if (rc != 0)
			return rc;
	}
	return tdm__sim_mem_alloc(&b->mem, SIM_MEM_DEVICE, (int)(s->dev - b->devs), bytes, out);
}

/*
 * The free runs when the stream reaches it; from the call on, the block is freeing, so a second
 * free of it is -EINVAL, as is a pointer that is not device memory (cudaFreeAsync's
 * cudaErrorInvalidValue). A refused free (-EIO, -ENOMEM) leaves p with the caller, live.
 */
static int sim_free_async(struct tdm__backend *b, void *stream, void *p)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	if (p == NULL)
		return 0;
	if (dev_dead(s->dev))
		return -EIO;
	if (tdm__sim_capturing(s)) {
		int rc = tdm__sim_capture_refuse(s); /* before the block is marked freeing */
		if (rc != 0)
			return rc;
	}
	int rc = tdm__sim_mem_set_freeing(&b->mem, p, true);
	if (rc != 0)
		return rc;
	rc = tdm__sim_submit(s, (struct sim_op){.kind = SIM_FREE, .u.block = p});
	if (rc != 0)
		(void)tdm__sim_mem_set_freeing(&b->mem, p, false);
	return rc;
}

static int sim_prefetch(struct tdm__backend *b, void *stream, const void *p, size_t bytes, int dev)
{
	if (b == NULL || stream == NULL || p == NULL || dev >= b->ndev)
		return -EINVAL;
	if (bytes == 0)
		return 0;
	if (tdm__sim_capturing(stream)) {
		int rc = tdm__sim_capture_refuse(stream);
		if (rc != 0)
			return rc;
	}
	return tdm__sim_submit(stream, (struct sim_op){.kind = SIM_PREFETCH});
}

/* fn runs on the stream's thread, after the work before it and before the work after it. */
static int sim_host_fn(struct tdm__backend *b, void *stream, void (*fn)(void *), void *arg)
{
	if (b == NULL || stream == NULL || fn == NULL)
		return -EINVAL;
	return tdm__sim_submit(stream,
	                       (struct sim_op){.kind = SIM_HOST_FN, .u.host_fn = {fn, arg}});
}

/* A copy like any other (it may take an armed fault), refused if either side's device is dead. */
static int sim_memcpy_peer_async(struct tdm__backend *b, void *stream, void *dst, int dst_dev,
                                 const void *src, int src_dev, size_t bytes)
{
	if (b == NULL || stream == NULL || dst == NULL || src == NULL || !dev_ok(b, dst_dev) ||
	    !dev_ok(b, src_dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dst_dev]) || dev_dead(&b->devs[src_dev]))
		return -EIO;
	return submit_copy(b, stream, dst, true, src, true, bytes);
}

static int sim_inject(struct tdm__backend *b, void *stream, tdm_sim_fault fault)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || (fault != TDM_SIM_FAULT_OP && fault != TDM_SIM_FAULT_STICKY))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if ((int)fault > s->armed) /* a sticky fault outranks an armed one-shot */
		s->armed = (int)fault;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

const struct tdm__backend_ops tdm__backend_sim = {
    .name = "sim",
    .open = sim_open,
    .close = sim_close,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .stream_create = tdm__sim_stream_create,
    .stream_destroy = tdm__sim_stream_destroy,
    .stream_query = tdm__sim_stream_query,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .stream_wait_event = sim_stream_wait_event,
    .event_query = sim_event_query,
    .timer_create = sim_event_create,
    .timer_elapsed = sim_timer_elapsed,
    .event_reset = sim_event_reset,
    .write_value = sim_write_value,
    .word_status = tdm__sim_word_status,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .device_alloc = sim_device_alloc,
    .device_free = sim_device_free,
    .memcpy_async = sim_memcpy_async,
    .launch_spin = sim_launch_spin,
    .launch_scale = sim_launch_scale,
    .launch_fault = sim_launch_fault,
    .stream_native = tdm__sim_stream_native,
    .sim_inject = sim_inject,
    .malloc_async = sim_malloc_async,
    .free_async = sim_free_async,
    .host_register = sim_host_register,
    .host_unregister = sim_host_unregister,
    .is_pinned = sim_is_pinned,
    .managed_alloc = sim_managed_alloc,
    .managed_free = sim_managed_free,
    .prefetch = sim_prefetch,
    .advise = sim_advise,
    .mem_info = sim_mem_info,
    .host_fn = sim_host_fn,
    .memcpy_peer_async = sim_memcpy_peer_async,
    .launch_busy = sim_launch_busy,
    .capture_begin = tdm__sim_capture_begin,
    .capture_end = tdm__sim_capture_end,
    .graph_instantiate = tdm__sim_graph_instantiate,
    .graph_update = tdm__sim_graph_update,
    .graph_launch = tdm__sim_graph_launch,
    .graph_free = tdm__sim_graph_free,
    .graph_exec_free = tdm__sim_graph_exec_free,
    .memset_async = sim_memset_async,
    .dsched_start = tdm__sim_dsched_start,
    .dsched_join = tdm__sim_dsched_join,
    .dsched_kick = tdm__sim_dsched_kick,
    .device_dead = sim_device_dead,
};
