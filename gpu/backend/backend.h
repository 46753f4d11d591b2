// SPDX-License-Identifier: MIT
/*
 * The backend interface of the GPU layer: what the poller, the pools and the work helpers need
 * from a device, implemented by `cuda` (cuda.c, cuda_memory.c, kernels.cu) and `sim` (sim.c,
 * sim_stream.c, sim_memory.c). Everything above this line (poller, pools, awaits) is shared by both
 * backends.
 *
 * Threading: every function may be called from any thread at once, except open/close. Streams
 * and events are opaque pointers owned by the backend. All functions return 0 or -errno unless
 * said otherwise; -EIO means a device error, -EAGAIN "not yet".
 */
#ifndef TDM_GPU_BACKEND_H
#define TDM_GPU_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem_dsched.h" /* the device scheduler's queue and tables */
#include "tandem_gpu.h"
#include "sim_fault.h" /* tdm_sim_fault: the test operations below */

struct tdm__backend; /* a backend instance, one per tdm_gpu */

struct tdm__device_info {
	char name[96];
	int sm_count;
	int prio_least, prio_greatest; /* stream priority range: numerically least and greatest */
	bool can_write_value64;        /* completion words possible */
	int async_engines;
	/* Device code reaches host_alloc memory at its host address (mapped, unified addressing):
	 * a device scheduler's queue lives there. */
	bool maps_host;
};

/* What a device scheduler's kernel is started with (gpu/dsched.c). */
struct tdm__dsched_run {
	const tdm_dsched_handlers *handlers;
	struct tdm__dsched_queue queue; /* pinned host memory, and device memory for q.dev */
	int device;
	unsigned blocks, warps;
};

struct tdm__backend_ops {
	const char *name;
	/* -ENODEV when the backend has no device (or, for cuda, was not built in). */
	int (*open)(struct tdm__backend **out, const tdm_gpu_config *cfg);
	/* Why the calling thread's last open said -ENODEV, in words for a message ("no driver",
	 * the driver's own words); NULL: the backend has nothing to add. */
	void (*why_none)(char *out, size_t len);
	/* Every stream and event was destroyed and all memory freed before. */
	void (*close)(struct tdm__backend *b);
	int (*device_count)(struct tdm__backend *b);
	int (*device_info)(struct tdm__backend *b, int dev, struct tdm__device_info *out);

	/* Non-blocking streams; priority within [prio_greatest, prio_least] (cuda convention:
	 * lower is higher priority). */
	int (*stream_create)(struct tdm__backend *b, int dev, int priority, void **out);
	/* Waits for the stream's work, then destroys it. */
	void (*stream_destroy)(struct tdm__backend *b, void *stream);
	/* 0: all work done; -EAGAIN: busy; -EIO: the device failed (sticky). On a failed device
	 * -EAGAIN too while an operation that began before the failure still writes memory (sim):
	 * a caller that must see -EIO asks again later (the poller's status check does). */
	int (*stream_query)(struct tdm__backend *b, void *stream);

	/* Timing disabled. */
	int (*event_create)(struct tdm__backend *b, int dev, void **out);
	void (*event_destroy)(struct tdm__backend *b, void *ev);
	int (*event_record)(struct tdm__backend *b, void *ev, void *stream);
	/* 0: done; -EAGAIN: pending (on a failed device too, as stream_query); -EIO: the captured
	 * work failed, or the device did. */
	int (*event_query)(struct tdm__backend *b, void *ev);
	/* Optional: forget the error of the event's last record, for a new owner (the sim keeps
	 * one per event; a CUDA event has none). NULL: nothing to forget. */
	void (*event_reset)(struct tdm__backend *b, void *ev);
	/* Work enqueued on stream after this waits on the device for the event's latest record
	 * (of any device of the backend); no host wait. A record that failed (sim: an injected
	 * fault) fails what waits on it: -EIO at the stream's next completion point. */
	int (*stream_wait_event)(struct tdm__backend *b, void *stream, void *ev);

	/* Enqueues, after all earlier work on the stream, a store of `value` to `word`, which
	 * lives in memory from host_alloc. Only where can_write_value64. */
	int (*write_value)(struct tdm__backend *b, void *stream, uint64_t *word, uint64_t value);
	/*
	 * Called once per await, by the poller or by the worker that watched the await (await.c
	 * held_poll), from any thread, when the word of `stream` reached `value`: 0, or -EIO if
	 * work enqueued before that write_value failed without failing the device (the sim's
	 * TDM_SIM_FAULT_OP). NULL where no such failure exists, as in cuda, which reports it at
	 * launch: the poller then makes no call per completion.
	 */
	int (*word_status)(struct tdm__backend *b, void *stream, uint64_t value);

	/* Pinned host memory (cudaHostAlloc, portable + mapped where available). The frees below
	 * take NULL (0); host_free: -EINVAL, freeing nothing, when p is not a live host_alloc
	 * block. */
	int (*host_alloc)(struct tdm__backend *b, size_t bytes, void **out);
	int (*host_free)(struct tdm__backend *b, void *p);
	/* device_free: -EINVAL, freeing nothing, when p is not live device memory of dev. */
	int (*device_alloc)(struct tdm__backend *b, int dev, size_t bytes, void **out);
	int (*device_free)(struct tdm__backend *b, int dev, void *p);

	int (*memcpy_async)(struct tdm__backend *b, void *stream, void *dst, const void *src,
	                    size_t bytes, tdm_copy_kind kind);
	/* A kernel that runs about ns nanoseconds; 0: empty kernel. */
	int (*launch_spin)(struct tdm__backend *b, void *stream, uint32_t ns);
	int (*launch_scale)(struct tdm__backend *b, void *stream, float *y, const float *x, float a,
	                    size_t n);
	/* A kernel that traps: a sticky device error. */
	int (*launch_fault)(struct tdm__backend *b, void *stream);
	/* The backend's native stream for users (cudaStream_t), or NULL. */
	void *(*stream_native)(struct tdm__backend *b, void *stream);
	/* sim only (NULL elsewhere): see tdm_sim_inject (testing/tandem_sim.h). */
	int (*sim_inject)(struct tdm__backend *b, void *stream, tdm_sim_fault fault);

	/* ---- memory ---- */
	/* Stream-ordered device memory from the device's pool, whose release threshold is kept
	 * high at open so freed memory is reused, not returned to the driver (cudaMallocAsync /
	 * cudaFreeAsync). The sim allocates at once and frees when the stream reaches the free.
	 * free_async: -EINVAL when p is not live device memory (never allocated, or its free is
	 * queued already). */
	int (*malloc_async)(struct tdm__backend *b, void *stream, size_t bytes, void **out);
	int (*free_async)(struct tdm__backend *b, void *stream, void *p);
	/* Page-locks a caller's buffer for async copies (cudaHostRegister, portable). */
	int (*host_register)(struct tdm__backend *b, void *p, size_t bytes);
	int (*host_unregister)(struct tdm__backend *b, void *p);
	/* 1: p is in pinned host memory (host_alloc or registered), 0: pageable or unknown. */
	int (*is_pinned)(struct tdm__backend *b, const void *p);
	/* Managed (unified) memory; prefetch to a device, or to the host with dev < 0.
	 * managed_free: -EINVAL, freeing nothing, when p is not live device memory. */
	int (*managed_alloc)(struct tdm__backend *b, int dev, size_t bytes, void **out);
	int (*managed_free)(struct tdm__backend *b, void *p);
	int (*prefetch)(struct tdm__backend *b, void *stream, const void *p, size_t bytes, int dev);
	int (*advise)(struct tdm__backend *b, const void *p, size_t bytes, tdm_mem_advice advice,
	              int dev);
	/* Free and total memory of a device. */
	int (*mem_info)(struct tdm__backend *b, int dev, size_t *free_bytes, size_t *total_bytes);
	/* Runs fn(arg) on a host thread once the stream's earlier work is done, before its later
	 * work starts (cudaLaunchHostFunc). fn must not call the backend. */
	int (*host_fn)(struct tdm__backend *b, void *stream, void (*fn)(void *), void *arg);
	/* Copy between devices (cudaMemcpyPeerAsync), ordered on stream. */
	int (*memcpy_peer_async)(struct tdm__backend *b, void *stream, void *dst, int dst_dev,
	                         const void *src, int src_dev, size_t bytes);
	/*
	 * A kernel that keeps every SM of the device busy for about ns nanoseconds: kernels of this
	 * kind serialise on a device, so a device runs 1e9/ns of them per second (a compute-bound
	 * task). cuda: as many blocks as fit on the device at once, each spinning for ns from its
	 * own start; sim: the stream's thread holds the device's busy lock for ns.
	 */
	int (*launch_busy)(struct tdm__backend *b, void *stream, uint32_t ns);
	/* Sets how much freed memory the device's stream-ordered pool keeps for reuse (the release
	 * threshold); the topology's plan sizes it per device. May be NULL. */
	int (*pool_release)(struct tdm__backend *b, int dev, uint64_t bytes);
	/* Called before open, with no instance: sets CUDA_DEVICE_MAX_CONNECTIONS to n while it is
	 * unset and the backend's runtime has not started in the process. 0: set; -EEXIST: set
	 * already; -EALREADY: started already, so it would be read too late; -ENOMEM. May be NULL
	 * (nothing to set). */
	int (*set_connections)(unsigned n);

	/* ---- graphs (docs/design/graphs.md); all NULL in a backend without them ---- */
	/* Starts capturing `stream`, thread-local (cudaStreamCaptureModeThreadLocal): the work
	 * enqueued on it from now on, and on a stream that joins by stream_wait_event on an event
	 * recorded in the capture, is recorded into a graph, not run. -EBUSY: capturing already
	 * (or joined to a capture). -EIO: the device failed. */
	int (*capture_begin)(struct tdm__backend *b, void *stream);
	/* Ends the capture begun on `stream`, on the thread that began it: *graph is its source
	 * graph (freed with graph_free). -ECANCELED: the capture was invalidated (a stream joined
	 * to it was not joined back, or a call illegal in a capture reached the backend), *graph
	 * NULL. -EIO: the device failed. Whatever else it returns, neither the stream nor a stream
	 * that joined is capturing afterwards. -EINVAL, *graph NULL and the capture going on:
	 * `stream` is not capturing, is a stream joined to a capture begun on another, or this
	 * thread did not begin the capture (cudaErrorStreamCaptureWrongThread). A call illegal in a
	 * capture (sim: stream_query of a capturing stream, event_query of an event recorded in a
	 * capture, malloc_async, free_async, prefetch, graph_launch on a capturing stream,
	 * stream_wait_event on an event recorded outside the capture or in another one) says -EBUSY
	 * and invalidates the capture, and so does every later enqueue on its streams until the
	 * end. A capture takes no armed sim fault. */
	int (*capture_end)(struct tdm__backend *b, void *stream, void **graph);
	/* An executable graph from a source graph (which stays the caller's). -EIO, -ENOMEM. */
	int (*graph_instantiate)(struct tdm__backend *b, void *graph, void **exec);
	/* Updates exec in place to graph's work (cudaGraphExecUpdate): 0, or -ESTALE when the
	 * topology differs (exec unchanged: instantiate anew). -EIO. */
	int (*graph_update)(struct tdm__backend *b, void *exec, void *graph);
	/* Enqueues a replay of exec on stream, ordered after exec's previous replay. -EIO,
	 * -ENOMEM. */
	int (*graph_launch)(struct tdm__backend *b, void *exec, void *stream);
	/* Frees a source graph. */
	void (*graph_free)(struct tdm__backend *b, void *graph);
	/* Frees an executable graph; replays in flight run to their end first (asynchronously:
	 * never blocks). */
	void (*graph_exec_free)(struct tdm__backend *b, void *exec);

	/* ---- memsets ---- */
	/* Sets `bytes` bytes from dst, device memory, to (unsigned char)value, ordered on stream
	 * (cudaMemsetAsync); a capture records it as a node. -EINVAL: [dst, dst + bytes) is not
	 * within one live allocation a device reaches (nothing enqueued). Zero bytes: 0, nothing
	 * enqueued. -EIO: the device failed. May be NULL (tdm_memset_async says -ENOTSUP). */
	int (*memset_async)(struct tdm__backend *b, void *stream, void *dst, int value,
	                    size_t bytes);

	/* ---- device-side stamps (gpu/stamps.c); NULL in a backend without them ---- */
	/* An event that takes the device's time where it is recorded (cudaEventDefault); recorded,
	 * queried and destroyed as any event. */
	int (*timer_create)(struct tdm__backend *b, int dev, void **out);
	/* Nanoseconds from the latest record of `from` to that of `to` (negative where `to` ran
	 * first), two timers of one device, both run: exact to the device's timer resolution
	 * (about 0.5 us on CUDA; a float of milliseconds, so keep the two within seconds). 0;
	 * -EAGAIN: not yet; -EINVAL: one never recorded; -EIO. A device's timers have no clock
	 * of the host's: the stamps read them against one of them (gpu/stamps.c). */
	int (*timer_elapsed)(struct tdm__backend *b, void *from, void *to, int64_t *ns);

	/* ---- the device scheduler (gpu/dsched.c); NULL in a backend without one ---- */
	/* Starts r's kernel on `stream`, a stream made for it alone, after the work enqueued on it
	 * before (the zeroing of q.dev); *engine is for dsched_join. cuda: the table's launcher,
	 * blocks x (warps x 32) threads; sim: host threads standing in for its warps (at most 8),
	 * running the table's host twins. -ENOTSUP: the table has nothing for this
	 * backend. -EAGAIN (sim: no thread), -ENOMEM, -EIO (the launch failed; the device may
	 * live on). */
	int (*dsched_start)(struct tdm__backend *b, void *stream, const struct tdm__dsched_run *r,
	                    void **engine);
	/* Waits until the kernel ended (its queue's stop word told it to, or the device died) and
	 * frees engine. */
	void (*dsched_join)(struct tdm__backend *b, void *stream, void *engine);
	/* Items were published in engine's queue: wakes its threads where they sleep on an empty
	 * queue (sim). NULL where the device polls the queue itself (cuda). */
	void (*dsched_kick)(struct tdm__backend *b, void *engine);

	/* Whether device dev is dead (a sticky error), with no driver call: every lease asks
	 * (streams.c). NULL where only a stream's query can tell (cuda): the lease then queries
	 * one at most once per check interval. */
	bool (*device_dead)(struct tdm__backend *b, int dev);
};

extern const struct tdm__backend_ops tdm__backend_sim;
/* Present in every build; its open returns -ENODEV when CUDA was not built in. */
extern const struct tdm__backend_ops tdm__backend_cuda;

#endif /* TDM_GPU_BACKEND_H */
