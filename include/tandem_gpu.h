// SPDX-License-Identifier: MIT
/*
 * tandem's GPU layer: await GPU work without blocking a worker.
 *
 * This header owns the public GPU API. A tdm_gpu attaches a poller thread, stream sets and pools
 * to an executor; a resumable task (tandem.h) enqueues work on a leased stream and awaits it,
 * its worker runs other tasks meanwhile, and the poller hands the task back when the GPU is done.
 * Backends: `cuda`, and `sim`, an in-process simulator on which the same poller, pools and awaits
 * run. Every call returns 0 or a negative errno (tdm_strerror); tdm_await_* return TDM_SUSPENDED
 * or, when the task can go on at once, its result. The reasons and measurements behind the
 * defaults are in docs/design/ (gpu-streams.md, poller.md, memory.md, pipeline.md, topology.md).
 *
 * Handles (since 0.6.0): a tdm_gpu, a tdm_event, and tandem_graph.h's tdm_graph and tdm_dag and
 * tandem_dsched.h's tdm_dsched are handles, not addresses: each carries a generation, and every
 * call checks it, as CUDA checks its own (docs/design/handles.md). A call with a handle of a
 * destroyed object is refused (-EINVAL; a GPU layer's: -ESHUTDOWN), and so is a second destroy
 * (-EINVAL), a call racing the destroy (the errno, or it completes as if it came first), NULL, a
 * handle of another type, and a value that was never a handle (-EINVAL, but for a value made up
 * to look like a live handle, at odds of about 1 in 2^40): none reads freed memory. A lease's
 * tdm_stream is refused once released, its layer destroyed or not (tdm_stream_lease).
 */
#ifndef TANDEM_GPU_H
#define TANDEM_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE: tdm_metrics_print */

#include "tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is what it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct tdm_gpu tdm_gpu;
typedef struct tdm_stream tdm_stream;
typedef struct tdm_event tdm_event;

typedef enum tdm_backend {
	TDM_BACKEND_AUTO = 0, /* TANDEM_GPU (cuda, sim or none) if set; else cuda */
	TDM_BACKEND_CUDA = 1,
	TDM_BACKEND_SIM = 2,
	TDM_BACKEND_NONE = 3, /* no device: the poller serves deadlines; GPU calls say -ENODEV */
} tdm_backend;

/* How the poller learns that GPU work finished (docs/design/poller.md). */
typedef enum tdm_completion {
	/* TANDEM_COMPLETION (word, event or adaptive) if set; else adaptive where the device can
	 * write completion words (cuStreamWriteValue64), else events. */
	TDM_COMPLETION_AUTO = 0,
	TDM_COMPLETION_WORD = 1,  /* each await enqueues a word write, which the poller reads */
	TDM_COMPLETION_EVENT = 2, /* each await records a pooled event, which the poller queries */
	/* Per stream: words while its awaits complete within stall_us of reaching the head of its
	 * queue, events otherwise and for its first await. */
	TDM_COMPLETION_ADAPTIVE = 3,
} tdm_completion;

typedef struct tdm_gpu_config {
	tdm_backend backend;
	tdm_completion completion;
	/* Streams per device and priority class, shared by all workers. 0: the device's hardware
	 * work queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default), or one per worker where there
	 * are more workers (at most 32); a MIG instance gets its share. */
	unsigned streams_per_device;
	/* Threads that may launch on one device at once. 0: 16 on a whole device, fewer on a MIG
	 * instance (tdm_device_info.launch_limit says how many, and why). */
	unsigned launch_limit;
	/* The poller spins this long after the last completion, then sleeps in short steps while
	 * awaits are outstanding. 0: 200 us. */
	unsigned poll_spin_us;
	/* An await at the head of its stream longer than this waits on long work: its stream is
	 * looked at less often, and adaptive completion moves it to events. 0: 50 us. */
	unsigned stall_us;
	unsigned sim_devices; /* sim backend: simulated devices (0: 1) */
	/* Pinned host pool: each chunk pinned at once (0: 64 MiB), and the most pinned in all (0:
	 * no cap; else at least 64 KiB, the pool's page); past the cap allocations fail with
	 * -ENOMEM. A block of up to 256 KiB freed on a worker stays in that worker's cache, with
	 * the run of pages it came from, until that worker reaches the cap or the tdm_gpu is
	 * destroyed, and counts in no one's bytes_in_use: leave the caches room in a cap. */
	size_t pinned_chunk_bytes;
	size_t pinned_cap_bytes;
	int pageable;   /* copies from or to pageable host memory: TDM_PAGEABLE_STAGE or _REFUSE */
	int placement;  /* where a lease for TDM_DEVICE_ANY goes: a tdm_placement */
	int pin_poller; /* nonzero: the poller runs on device 0's pin_cpus, where known */
	/* What tdm_gpu_prepare sets CUDA_DEVICE_MAX_CONNECTIONS to: TDM_CONNECTIONS_AUTO (0, the
	 * default) the stream set's size where it is above 8 (at most 32), 1..32 that value,
	 * TDM_CONNECTIONS_KEEP (-1) nothing. A value named here, like one set by hand, is also the
	 * base of the stream set (streams_per_device); one AUTO set changes no decision.
	 * tdm_gpu_create never sets it. Other values: -EINVAL. */
	int connections;
	/* tdm_graph_run's cache (tandem_graph.h): graphs kept per layer (0: 256), and runs of a key
	 * that call its step directly before it is captured (0: 2; TDM_GRAPH_CAPTURE_FIRST (-1)
	 * captures on the first run). */
	unsigned graph_cache;
	int graph_capture_after;
	/* sim backend: SMs each simulated device reports (0: 132, an H200's; at most 1024), for
	 * what tandem sizes by them (a MIG instance's 16, say). Since 0.5.0. */
	unsigned sim_sm_count;
} tdm_gpu_config;

enum {
	TDM_GRAPH_CAPTURE_FIRST = -1,
};

enum {
	TDM_CONNECTIONS_AUTO = 0,
	TDM_CONNECTIONS_KEEP = -1,
};

/* Where a lease for TDM_DEVICE_ANY goes, among the devices that have not failed. */
typedef enum tdm_placement {
	TDM_PLACE_ROUND_ROBIN = 0,  /* the default */
	TDM_PLACE_LEAST_LOADED = 1, /* the device with the fewest stream leases held */
	TDM_PLACE_NEAREST = 2,      /* a device whose CPUs include the caller's; else round robin */
} tdm_placement;

#define TDM_DEVICE_ANY (-1)

enum {
	/* The default: staged through the pinned pool, the host side copied on the host (when:
	 * tdm_memcpy_async); async and correct, at memcpy speed. */
	TDM_PAGEABLE_STAGE = 0,
	TDM_PAGEABLE_REFUSE = 1, /* -EFAULT: for programs that never copy from pageable memory */
};

/* Fills *cfg with the defaults (all zero); does nothing when cfg is NULL. */
void tdm_gpu_config_init(tdm_gpu_config *cfg);

/*
 * Gives each stream of a device's set a hardware queue of its own, for a program that will make
 * its GPU layer with cfg (NULL: defaults) on an executor of `workers` workers (0: one per CPU the
 * process may run on): sets CUDA_DEVICE_MAX_CONNECTIONS, which CUDA reads once as it starts, where
 * it is unset and CUDA has not started in this process. Streams sharing a queue run one kernel at
 * a time between them (docs/design/gpu-streams.md). setenv(3) races every other thread's getenv
 * and setenv: call it first in main, before any thread that may touch the environment starts.
 * Returns the value set (1..32), or 0 where nothing needs setting (at most 8 streams in the set,
 * CUDA_VISIBLE_DEVICES names a MIG instance, TDM_CONNECTIONS_KEEP, the sim or no backend, a
 * build without CUDA).
 * Unlike other calls, a value set is positive.
 * -EINVAL: a field of cfg that tdm_gpu_create refuses (its list below, but for the environment
 * switches other than TANDEM_GPU), or TANDEM_GPU not cuda, sim or none.  -ENOMEM: setenv(3) had no
 * memory.  -EEXIST: the variable is set already (kept; it is the base of the stream set).
 * -EALREADY: CUDA started in this process already; nothing set, and tdm_device_info.why_streams
 * says so.
 */
int tdm_gpu_prepare(const tdm_gpu_config *cfg, unsigned workers);

/*
 * Starts the GPU layer for ex: backend, poller thread, pools. cfg may be NULL for the defaults.
 * -EINVAL: out or ex is NULL; backend, completion, placement or pageable not one of its values;
 * streams_per_device or launch_limit above 1024; connections below -1 or above 32; sim_devices
 * above 1024 (sim); sim_sm_count above 1024; pinned_chunk_bytes above 64 GiB; pinned_cap_bytes from
 * 1 to 64 KiB - 1; graph_capture_after below -1 (TDM_GRAPH_CAPTURE_FIRST); graph_cache above
 * 2^20 (1048576); TANDEM_GPU (with TDM_BACKEND_AUTO) other than cuda, sim or none;
 * TANDEM_COMPLETION (with TDM_COMPLETION_AUTO) other than word, event or adaptive; TANDEM_NVML
 * other than 0, off, 1, on. -ENODEV: the backend asked for (cuda by default) has no device or is
 * not built in. -ENOTSUP: word or adaptive completion asked for (cfg or TANDEM_COMPLETION) on a
 * device that cannot write completion words.  -ENOMEM, -EAGAIN: no memory, no thread.  -EIO: the
 * driver failed while the devices were set up (cuda).
 * Each refused field or variable, and the -ENOTSUP, is named with its value on stderr and in
 * tdm_error_detail (tandem.h): "tandem: TANDEM_GPU=bogus: not one of cuda, sim, none
 * (tdm_gpu_create returns -EINVAL)". -ENODEV from the default backend (TDM_BACKEND_AUTO, cuda) says
 * why there is no GPU, and that TANDEM_GPU=sim runs tandem's GPU simulator. Each text once per
 * process (docs/guide/errors.md). tdm_gpu_prepare says its refusals alike.
 */
int tdm_gpu_create(tdm_gpu **out, tdm_executor *ex, const tdm_gpu_config *cfg);

/*
 * Waits until every outstanding GPU await has completed and its task was handed back, resumes
 * tasks awaiting deadlines with -ECANCELED, stops the poller, waits until every stream lease was
 * released and every device scheduler destroyed (tandem_dsched.h), destroys the graphs and DAGs
 * left (tandem_graph.h), and frees streams, events and the pools' memory. Every call with gpu
 * made once it began, and every one after it returned, is refused with -ESHUTDOWN (a second
 * destroy: -EINVAL); a call already in progress is waited for (a lease: and then its release).
 * Tasks and other threads may go on calling while it runs: a task that releases its last lease
 * and leases again gets -ESHUTDOWN, never freed memory (the handles above). Events not put back
 * go with it: their handles are refused from then on. Either order of tdm_gpu_destroy and
 * tdm_executor_destroy works.
 * A lease never released, or a scheduler never destroyed, makes it wait for ever: once it has
 * waited a second for them it says on stderr which, a line each, and again every 10 s while it
 * waits: "tandem: tdm_gpu_destroy waits for a stream lease not released (1 s so far): device 0,
 * stream normal 3, exclusive, taken by task NAME" (NAME: tdm_resumable_name's, else the task
 * function's symbol; "a thread outside any task" for a lease taken outside one), and "... waits
 * for a device scheduler not destroyed (1 s so far): device 0, made by ...". It goes on waiting.
 * -EINVAL: gpu is NULL or not a GPU layer's handle, or its destroy began already (a second
 * destroy, or one racing the first).  -EDEADLK: called from a worker of the executor.
 */
int tdm_gpu_destroy(tdm_gpu *gpu);

/* "cuda", "sim" or "none" ("none" also for a NULL gpu, one that is no GPU layer's handle, or a
 * layer being or already destroyed). */
const char *tdm_gpu_backend_name(const tdm_gpu *gpu);
/* Every call below that takes a gpu also says -EINVAL when gpu is NULL or no GPU layer's handle,
 * and -ESHUTDOWN when the layer is being destroyed, or was (tdm_gpu_destroy). */

/* Devices the backend sees (0 for TDM_BACKEND_NONE). -EINVAL, -ESHUTDOWN: gpu (above). */
int tdm_gpu_device_count(const tdm_gpu *gpu);
/* The completion in use on a device: TDM_COMPLETION_WORD, _EVENT or _ADAPTIVE. -EINVAL: gpu is
 * NULL or device out of range (any device, on a GPU layer without devices).  -ESHUTDOWN. */
int tdm_gpu_completion(const tdm_gpu *gpu, int device);

/* Counts since tdm_gpu_create, read with relaxed loads (a snapshot, not a consistent cut). */
typedef struct tdm_gpu_stats {
	uint64_t awaits_word;  /* stream awaits that enqueued a completion-word write */
	uint64_t awaits_event; /* stream awaits that recorded a pooled event */
	uint64_t switches;     /* adaptive: times a stream changed mechanism */
	uint64_t event_polls;  /* event queries of stream awaits (driver calls on cuda) */
	uint64_t sweeps;       /* the poller's passes over the busy streams */
	uint64_t sleeps;       /* times the poller slept (back-off steps and idle waits) */
	uint64_t due_spins;    /* times it spun instead of sleeping because an await was due */
	uint64_t prewakes;     /* due spins that first woke a parked worker to take the task */
	uint64_t direct;       /* word awaits their own worker saw complete (also awaits_word) */
} tdm_gpu_stats;
/* -EINVAL: gpu or out is NULL.  -ESHUTDOWN. */
int tdm_gpu_stats_get(const tdm_gpu *gpu, tdm_gpu_stats *out);

/* ---- streams (docs/design/gpu-streams.md) ---- */

enum {
	TDM_STREAM_SHARED = 0,         /* may carry other tasks' work too (the default) */
	TDM_STREAM_EXCLUSIVE = 1 << 0, /* no other lease until released */
	TDM_STREAM_HIGH_PRIORITY = 1 << 1,
};

/*
 * Leases a stream of `device` from its bounded set; for TDM_DEVICE_ANY, of the device the
 * placement picks, then of the others that have not failed. A task keeps its device across
 * awaits by keeping its lease (tdm_stream_device says which). Shared leases never wait.
 * -EINVAL: gpu or out is NULL (or gpu no GPU layer's handle), device out of range (and not
 * TDM_DEVICE_ANY), an unknown flag.
 * -ENODEV: the device failed, or there is none (TDM_DEVICE_ANY: every device failed). A device
 * that died with nothing awaited since (a trapping kernel, a handler's trap) is found by the
 * leases after it: on sim the next one, on cuda within a millisecond (a lease queries the
 * driver at most once a millisecond per device).
 * -EBUSY: exclusive, and every stream of the set is in use; shared, and every one is held
 * exclusively (tdm_pipeline_run leaves one to shared leases; your own exclusive leases can take
 * them all); TDM_DEVICE_ANY: no device had a stream to give.  -ESHUTDOWN: the GPU layer is being
 * destroyed, or was.  -ENOMEM, -EAGAIN, -EIO: the stream, made on its first lease, could not be (no
 * memory, no thread for it on sim, or the driver failed); -ENOMEM also: no memory for the
 * lease's handle.
 * *out is this lease's own handle: two leases of one stream are two handles. Once released, a
 * handle is refused by every call that takes a stream (-EINVAL, nothing enqueued) until a later
 * lease gets it again: handles are reused, oldest first, and a stale one then names that lease.
 * A handle kept past its layer's destroy reads as released (lease handles are never freed).
 */
int tdm_stream_lease(tdm_gpu *gpu, int device, unsigned flags, tdm_stream **out);
/* Gives a lease back, after the last await on it. A graph capture begun on s (tandem_graph.h) is
 * ended and discarded first. -EINVAL: s is NULL or holds no lease (released already: nothing
 * changes, other holders of the stream keep theirs).  -EBUSY: s joined another stream's capture
 * (its root must end it first), or its capture was begun by another thread; s stays leased. */
int tdm_stream_release(tdm_stream *s);
/* The backend's stream: a cudaStream_t on cuda, NULL on sim (and for a NULL or released s). */
void *tdm_stream_native(const tdm_stream *s);
/* The device of s. -EINVAL: s is NULL or released. */
int tdm_stream_device(const tdm_stream *s);

/*
 * Bound the threads launching on s's device at once (tdm_gpu_config.launch_limit): wrap your own
 * launches in these (tandem's own launches and copies are). Begin and end on one thread, with no
 * await between. Brackets nest on a thread up to TDM_LAUNCH_NEST_MAX deep: only the outermost
 * counts against its device's limit (and is the span traces and metrics see), so a thread never
 * waits for itself. tdm_launch_begin: 0; -EINVAL: s is NULL or released; -EBUSY: this thread has
 * TDM_LAUNCH_NEST_MAX brackets open already (nothing taken: call no end for it).
 * tdm_launch_end closes this thread's innermost bracket: 0; -EINVAL: s is NULL, or this thread
 * has none open. Both returned nothing before 0.6.0.
 */
#define TDM_LAUNCH_NEST_MAX 16
int tdm_launch_begin(tdm_stream *s);
int tdm_launch_end(tdm_stream *s);

/* ---- work on a stream ---- */

typedef enum tdm_copy_kind {
	TDM_COPY_H2D = 1,
	TDM_COPY_D2H = 2,
	TDM_COPY_D2D = 3,
} tdm_copy_kind;

/*
 * Async copy. Host memory from tdm_host_alloc, tdm_pinned_alloc or tdm_host_register is copied
 * directly; pageable host memory is staged or refused (tdm_gpu_config.pageable). A staged copy to
 * the device reads its source during the call, except where a staged copy from the device still
 * pending on the same stream writes into that source: then in stream order, after it (the source
 * must stay until the copy is done). A staged copy's pinned block goes back to the pool when the
 * copy is done, or when its device fails first.
 * -EINVAL: a NULL or released stream, a NULL pointer, an unknown kind, or a device side (dst for
 * H2D, src for D2H, both for D2D) not within one live allocation, as the driver refuses it (nothing
 * enqueued).  -EIO: the device failed, or the driver refused the copy.  -EFAULT: pageable memory
 * and TDM_PAGEABLE_REFUSE. Staging adds -ENOMEM (the pinned pool at its cap) and -ENOTSUP (a
 * backend without host functions).
 */
int tdm_memcpy_async(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind);
/*
 * Sets `bytes` bytes of device memory from dst to (unsigned char)value, in stream order
 * (cudaMemsetAsync); a graph capture records it. Zero bytes: 0, nothing enqueued.
 * -EINVAL: a NULL or released stream, dst NULL, or [dst, dst + bytes) not within one live
 * allocation, as the driver refuses it (nothing enqueued).  -EIO: the device failed, or the driver
 * refused.  -ENOMEM: no memory to queue it (sim).  -ENOTSUP: a backend without memsets.
 */
int tdm_memset_async(tdm_stream *s, void *dst, int value, size_t bytes);
/* A kernel: y[i] = a * x[i] for i < n, device pointers. Reaching past an allocation is an illegal
 * address when it runs: the device fails for good and its awaits resume with -EIO.
 * -EINVAL: s, y or x is NULL, or s is released (nothing enqueued).  -EIO: s's device failed (a
 * trapping kernel, say), or the launch did.  -ENOMEM: no memory to queue it (sim). */
int tdm_launch_scale(tdm_stream *s, float *y, const float *x, float a, size_t n);

/* ---- memory (docs/design/memory.md) ---- */

/*
 * Device memory (cudaMalloc), and host memory pinned anew by each call (cudaHostAlloc, slow for
 * large sizes): on hot paths prefer tdm_device_alloc_async and tdm_pinned_alloc. Freeing NULL
 * is 0.
 * tdm_device_alloc: -EINVAL: gpu or out is NULL, zero bytes, device out of range.  -ENODEV: no
 * devices.  -ENOMEM: more than the device has free.  -EIO: the device failed (cuda).
 * tdm_device_free: -EINVAL: gpu is NULL, device out of range (any device, on a layer without
 * devices), or p is not live memory of `device` (never allocated, freed already, another
 * device's); nothing is freed then. A failed device's memory is freed (on cuda, with the
 * device's context): 0.
 * tdm_host_alloc: -EINVAL: gpu or out is NULL, zero bytes.  -ENODEV: no backend
 * (TDM_BACKEND_NONE).  -ENOMEM.  -EIO from the driver.
 * tdm_host_free: -EINVAL: gpu is NULL, or p is not a live block of tdm_host_alloc (never
 * allocated, freed already, or tdm_pinned_alloc's).  -ENODEV: no backend.
 * Each: -ESHUTDOWN: the layer is being destroyed, or was (a destroyed layer's memory went with
 * it).
 */
int tdm_device_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out);
int tdm_device_free(tdm_gpu *gpu, int device, void *p);
int tdm_host_alloc(tdm_gpu *gpu, size_t bytes, void **out);
int tdm_host_free(tdm_gpu *gpu, void *p);

/* The pinned host pool: blocks carved from chunks pinned once (grown on demand up to the cap),
 * with a cache per worker; they count as pinned for copies; any thread may free any block.
 * -ENOMEM: past the cap (never a fallback to pageable memory).  -EINVAL: a NULL argument, a zero
 * size, or a pointer not from the pool.  -ENODEV: a layer without devices (TDM_BACKEND_NONE).
 * -ESHUTDOWN: the layer is being destroyed, or was. */
int tdm_pinned_alloc(tdm_gpu *gpu, size_t bytes, void **out);
int tdm_pinned_free(tdm_gpu *gpu, void *p);

typedef struct tdm_pinned_stats {
	uint64_t bytes_pinned; /* chunks pinned from the driver */
	uint64_t bytes_in_use; /* handed out, by size class */
	uint64_t high_water;   /* largest bytes_in_use seen */
	uint64_t chunks;
} tdm_pinned_stats;

/* -EINVAL: gpu or out is NULL.  -ENODEV: a layer without a backend (TDM_BACKEND_NONE).
 * -ESHUTDOWN. */
int tdm_pinned_stats_get(tdm_gpu *gpu, tdm_pinned_stats *out);

/* Page-locks (and unlocks) a buffer the caller owns, so that copies from it are async.
 * -EINVAL: a NULL pointer, zero bytes, or unregistering memory not registered.  -EEXIST: the
 * range overlaps one registered.  -ENODEV: no devices.  -ENOTSUP: the backend cannot.
 * -ENOMEM, -EIO from the driver.  -ESHUTDOWN: the layer is being destroyed, or was. */
int tdm_host_register(tdm_gpu *gpu, void *p, size_t bytes);
int tdm_host_unregister(tdm_gpu *gpu, void *p);

/*
 * Stream-ordered device memory: the allocation is ordered on s and usable by work enqueued on s
 * after the call; the free happens after all work enqueued on s before it, so freeing right after
 * the last use needs no host synchronisation, and work enqueued after it may not name p. Freed
 * memory stays in the device's pool for reuse. Freeing NULL is 0.
 * -EINVAL: a NULL or released stream, a NULL pointer, zero bytes; for the free, p is not live
 * device memory (never allocated, or freed or its free queued already).  -ENOMEM.  -EIO: the device
 * failed. -ENOTSUP: the device has no stream-ordered memory pools (use tdm_device_alloc).
 */
int tdm_device_alloc_async(tdm_stream *s, size_t bytes, void **out);
int tdm_device_free_async(tdm_stream *s, void *p);

typedef enum tdm_mem_advice {
	TDM_ADVISE_READ_MOSTLY = 1,
	TDM_ADVISE_PREFERRED_LOCATION = 2, /* device, or the host with device < 0 */
	TDM_ADVISE_ACCESSED_BY = 3,
} tdm_mem_advice;

/*
 * Managed (unified) memory, only on request. Prefetch is ordered on s; device < 0 is the host.
 * -ENOMEM: bytes exceed the device's free memory (asking for more can hang the GPU); on CUDA, as
 * the driver reports it, where memory the stream-ordered pool keeps counts as used.  -EINVAL: a
 * NULL pointer, a released s, zero bytes, a device out of range, an unknown advice, or for
 * tdm_managed_free a p that is not live device memory (never allocated, or freed already; any
 * device memory is taken, as cudaFree takes it).  -ENODEV: no devices.  -ENOTSUP: the backend has
 * no managed memory. -EIO from the driver.  tdm_managed_alloc, _free, tdm_mem_advise: -ESHUTDOWN:
 * the layer is being destroyed, or was.
 */
int tdm_managed_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out);
int tdm_managed_free(tdm_gpu *gpu, void *p);
int tdm_mem_prefetch(tdm_stream *s, const void *p, size_t bytes, int device);
int tdm_mem_advise(tdm_gpu *gpu, const void *p, size_t bytes, tdm_mem_advice advice, int device);

/* Copy between two devices' memory, ordered on s (a stream of either device). -EINVAL: a NULL
 * argument, a released s, a device out of range, or s on neither device.  -EIO: s's device failed.
 * -ENOTSUP: the backend cannot. */
int tdm_memcpy_peer_async(tdm_stream *s, void *dst, int dst_device, const void *src, int src_device,
                          size_t bytes);

/* ---- events (pooled, timing disabled) ---- */

/* An event of `device` from its pool (made when the pool has none), under a handle of its own:
 * the handles of its earlier owners stay refused. -EINVAL: gpu or out is NULL, device out of
 * range.  -ENODEV: no devices.  -ENOMEM, -EIO: a new event could not be made (no memory; the
 * device or driver failed).  -ESHUTDOWN: the layer is being destroyed, or was. */
int tdm_event_get(tdm_gpu *gpu, int device, tdm_event **out);
/* Gives e back to its pool, once, after its last await; its handle is refused from then on.
 * -EINVAL: e is NULL or no event's handle, put back already (a second put changes nothing), or of
 * a destroyed GPU layer (its events went with it). A put while the layer is destroyed is 0: the
 * destroy takes the event back. */
int tdm_event_put(tdm_event *e);
/* Captures the work enqueued on s so far. -EINVAL: e or s is NULL, s is released, their devices
 * differ, or e is put back or of a destroyed layer (its handle is refused, also once the event is
 * taken again).  -EIO: the device failed, or the driver refused.  -ENOMEM: no memory to queue it
 * (sim). */
int tdm_event_record(tdm_event *e, tdm_stream *s);
/*
 * A dependency on the device, with no host thread waiting: work enqueued on s after this call
 * runs after the work e captured at its latest tdm_event_record, on any device of the layer
 * (cudaStreamWaitEvent). An event never recorded, or last recorded on s's own stream, has
 * nothing to add: 0, nothing enqueued. If the captured work failed, the work after the edge fails
 * too: the await that covers it resumes with -EIO. docs/design/graphs.md.
 * -EINVAL: s or e is NULL, s is released, e is put back, or of another GPU layer.
 * -EIO: s's device failed, or the driver refused.  -ENOMEM: no memory to queue it (sim).
 * -ENOTSUP: a backend without edges.
 */
int tdm_stream_wait_event(tdm_stream *s, tdm_event *e);

/* ---- awaits ---- */

/* Each await below fails at once, setting the task's result to the same errno, with -EINVAL: t
 * is NULL or not the task running on the calling thread, or its stream, event or gpu is NULL, no
 * handle of its type, or of a GPU layer of another executor, or its stream's lease was released,
 * or its event was put back (or went with its layer); -ESHUTDOWN: the GPU layer is being
 * destroyed (tdm_await_deadline: or was). */

/* Resumes t once all work enqueued on s so far has finished; result 0 or -EIO. At once also
 * -EIO: s's device failed, or the completion could not be enqueued; -ENOMEM: no memory for it. */
int tdm_await_stream(tdm_task *t, tdm_stream *s);
/* Resumes t once the work captured by e has finished; result 0 or -EIO. At once: 0 when that
 * work is done already (or e was never recorded), -EIO when it or the device failed. */
int tdm_await_event(tdm_task *t, tdm_event *e);
/* Resumes t at `deadline_ns` on CLOCK_MONOTONIC (0 at once if passed; -ECANCELED if the GPU
 * layer is destroyed first; -ENOMEM if the poller had no memory to keep the deadline). */
int tdm_await_deadline(tdm_task *t, tdm_gpu *gpu, uint64_t deadline_ns);

/* ---- pipelines (docs/design/pipeline.md) ---- */

/*
 * A pipeline runs batches through prepare (host), copy in, compute (GPU), copy out and consume
 * (host). in_flight batches run at once, each in a slot with its own pinned and device buffers:
 * while the GPU computes batch N, batch N+1 is copied in and N-1 copied out. A slot enqueues a
 * batch's copy in, compute and copy out on its stream and awaits them once, as a resumable task,
 * and prepares its next batch only after its last was consumed: at most in_flight batches are
 * between prepare and the end of consume.
 * Streams: batch i runs on stream i % `streams` of cfg.device, each batch's work in one piece and
 * the batches in index order. Two overlap a batch's copies with its neighbours' work; more let
 * kernels too small to fill the device run at once. in_flight beyond `streams` queues batches
 * ahead on the streams, so that the device never waits for the host. The pipeline leases its
 * streams exclusively while that leaves at least one stream of the device's set to other tasks'
 * shared leases, shared past that, and takes fewer when no more can be had. With more workers than
 * hardware work queues the set is larger than the queues (one stream per worker, see
 * tdm_gpu_config.streams_per_device), and an exclusive stream would share a queue with another
 * stream's work unless the program called tdm_gpu_prepare (or set CUDA_DEVICE_MAX_CONNECTIONS to at
 * least the set's size). Buffers come from tdm_pinned_alloc and from tdm_device_alloc_async
 * (tdm_device_alloc where the backend has no stream-ordered memory), taken before the first batch
 * and given back before tdm_pipeline_run returns. CPU: while a pipeline runs, one worker stays
 * awake between tasks, so that each batch's completion is taken up at once rather than after a
 * sleeping thread is woken; that costs a core, as a thread in cudaStreamSynchronize does under
 * CUDA's default scheduling. no_spin saves it.
 */
typedef struct tdm_batch {
	uint64_t index;     /* 0, 1, 2, ... in the order batches were prepared */
	void *host_in;      /* pinned, in_bytes */
	void *host_out;     /* pinned, out_bytes */
	void *dev_in;       /* in_bytes */
	void *dev_out;      /* out_bytes; dev_in itself when compute is NULL */
	size_t in_len;      /* bytes to copy in; prepare may lower it (starts at in_bytes) */
	size_t out_len;     /* bytes to copy out; compute may lower it (starts at out_bytes) */
	tdm_stream *stream; /* set before prepare; compute enqueues here; no other batch enqueues
	                       on it until this one's work is enqueued */
	int status;         /* 0, or the error that stopped this batch */
	void *slot_user;    /* the slot's own, kept across the batches it carries (starts NULL) */
} tdm_batch;

#define TDM_PIPELINE_END 1 /* from prepare: the input is over, this slot carries no batch */
#define TDM_PIPELINE_MAX_IN_FLIGHT 64

typedef struct tdm_pipeline_config {
	int device;
	unsigned in_flight;         /* batches at once, 1..TDM_PIPELINE_MAX_IN_FLIGHT; 0: 8 */
	size_t in_bytes, out_bytes; /* buffer sizes of a slot, both nonzero */
	int ordered;                /* nonzero: consume runs in batch order */
	/* Required. Host: fill host_in (lower in_len for a shorter batch). 0, TDM_PIPELINE_END or
	 * -errno (the batch fails; other values: -EINVAL). Serialised, in batch order, none after
	 * TDM_PIPELINE_END. Each slot's first batch is normally prepared and enqueued on the
	 * caller of tdm_pipeline_run (on a worker where the slot got no pooled event); the rest on
	 * workers. */
	int (*prepare)(tdm_batch *b, void *user);
	/* Enqueue kernels on b->stream from dev_in to dev_out (lower out_len if less comes out). 0
	 * or -errno. Runs where prepare ran, maybe beside other slots' compute. NULL: copy only,
	 * dev_in is copied back out (out_len lowered to in_len if larger). */
	int (*compute)(tdm_batch *b, void *user);
	/* Host: use host_out. 0 or -errno (the batch fails). Not called for a batch failed
	 * upstream. Ordered: one call at a time, in batch order, a failed batch passing its turn
	 * on; unordered: batches may be consumed at once on different workers. On a worker, except
	 * when a slot's task could not be started (tdm_spawn failed): then the caller of
	 * tdm_pipeline_run finishes that slot's batch, and in ordered mode may consume the parked
	 * batches after it. NULL: the output is dropped. */
	int (*consume)(tdm_batch *b, void *user);
	void *user;
	/* The streams batches take turns on, 1..in_flight (more: -EINVAL); 0: min(in_flight, 2).
	 * Since 0.3.0. */
	unsigned streams;
	int no_spin; /* nonzero: no worker stays awake for this pipeline (CPU above). Since 0.3.0 */
} tdm_pipeline_config;

typedef struct tdm_pipeline_stats {
	uint64_t batches;   /* consumed */
	uint64_t failed;    /* stopped by an error in some stage; their later stages did not run */
	uint64_t cancelled; /* prepared, then stopped by executor shutdown (neither of the above) */
	int first_error;    /* of the failed batch with the lowest index, 0 if none */
	uint64_t bytes_in, bytes_out; /* in_len and out_len of the consumed batches */
	double seconds;               /* from the first prepare to the end of the last batch */
	/* The same moments on tdm_now_ns's clock; 0 when no batch finished. Since 0.2.0. */
	uint64_t start_ns, end_ns;
} tdm_pipeline_stats;

/*
 * Runs a pipeline until prepare returns TDM_PIPELINE_END and every batch is through; blocks the
 * caller. A failed batch does not stop the others; after a sticky device error the rest fail at
 * once. stats may be NULL; it is zeroed first and filled in whenever the pipeline ran. Returns 0
 * when every batch succeeded, else the first batch error (stats says which and how many), or:
 * -ECANCELED: the executor's shutdown (TDM_SHUTDOWN_CANCEL) cancelled the pipeline's tasks,
 * whatever else failed.  -EINVAL: a bad config (streams beyond in_flight among them; the field
 * and its value are named on stderr and in tdm_error_detail, tandem.h).
 * -EDEADLK: called from a worker of gpu's executor.  -ENODEV: no device, or it failed before the
 * run could lease its streams.  -EBUSY: no stream of the device could be leased.  -EAGAIN: a
 * stream could not be made (sim: its thread did not start).  -ENOMEM: no buffers could be had;
 * -EIO: none because the device failed.  -ESHUTDOWN: the executor or the GPU layer is being
 * destroyed (the layer: or was; a destroy that begins during the run fails the batches left and
 * waits for the run to return).  -EINVAL also: gpu is no GPU layer's handle.
 */
int tdm_pipeline_run(tdm_gpu *gpu, const tdm_pipeline_config *cfg, tdm_pipeline_stats *stats);

/* ---- devices (docs/design/topology.md) ---- */

/* MIG mode of a physical GPU, as NVML reports it. */
typedef enum tdm_mig_mode {
	TDM_MIG_UNKNOWN = -1, /* NVML not available: CUDA alone cannot tell */
	TDM_MIG_DISABLED = 0,
	TDM_MIG_ENABLED = 1,
} tdm_mig_mode;

/*
 * What tandem found out about a device (CUDA; NVML where libnvidia-ml.so.1 loads; sysfs) and what
 * it decided for it, each decision with a line that says why. Strings are NUL-terminated, ""
 * when unknown; counts and sizes 0 when unknown. A MIG instance is a device of its own (own
 * streams and memory pool); its bus id, NUMA node and CPUs are its physical GPU's. On sim, the
 * facts are the simulator's.
 */
typedef struct tdm_device_info {
	int index; /* the device number of tandem's calls (the CUDA ordinal) */
	char name[96];
	char uuid[96]; /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, or MIG-... */
	int sm_count;
	uint64_t memory_bytes;
	char pci_bus_id[32];                /* dddd:bb:dd.f, lower case */
	int numa_node;                      /* -1: unknown */
	char cpus[512];                     /* the CPUs nearest the device, as a list ("0-55") */
	int copy_engines;                   /* async copy engines */
	int mig_mode;                       /* tdm_mig_mode of the physical GPU */
	int is_mig;                         /* 1: a MIG instance */
	char mig_profile[32];               /* "1g.10gb" */
	int gpu_instance, compute_instance; /* MIG instance ids; -1 unless is_mig */
	int mig_instances;                  /* MIG instances NVML shows on the physical GPU */
	char parent_uuid[96];               /* the physical GPU: the device itself unless is_mig */
	int parent_index;                   /* its NVML index; -1: unknown */
	int nvml; /* 1: NVML supplied the MIG facts; 0: CUDA alone (nvml_note says why) */
	char nvml_note[160];

	unsigned streams;            /* streams per priority class (the bounded set) */
	unsigned launch_limit;       /* threads that may launch on the device at once */
	uint64_t pool_release_bytes; /* device memory pool release threshold; 0: default */
	int pin_numa_node;           /* NUMA node to run the device's workers near; -1: none */
	char pin_cpus[512];          /* CPUs to run them on; "": not pinned */
	char why_streams[192];
	char why_launch[192];
	char why_pool[192];
	char why_pin[192];
	char why_mig[192];
	/* A device scheduler's default share (tandem_dsched.h, tdm_dsched_config.blocks): blocks,
	 * an SM each, and why. Since 0.5.0. */
	unsigned dsched_blocks;
	char why_dsched[192];
} tdm_device_info;

/*
 * The facts and decisions for `device`, gathered once by tdm_gpu_create; any thread may ask.
 * -EINVAL: bad gpu, device or out.  -ENODEV: no device (backend none).  -ESHUTDOWN: the layer
 * is being destroyed, or was.
 */
int tdm_gpu_device_info(const tdm_gpu *gpu, int device, tdm_device_info *out);

/* ---- metrics (docs/design/observe.md, "Metrics") ---- */

/*
 * What the devices did over a window, measured from the same device-side stamps as the trace's
 * GPU spans (each launch, copy, memset and graph replay made through the launch gate, timed by
 * the device on its stream), and how long the layer's awaits took. Figures are for the window
 * from tdm_gpu_metrics_start to tdm_gpu_metrics_stop (to the tdm_gpu_metrics_get while it runs).
 * Spans are cut at the window's edges; a span still running at the get is not counted yet. While
 * metrics are on, each launch costs a timer record on its stream (two on one launch in 16), which
 * a thread of the layer resolves every millisecond: every launch is timed (a trace alone times
 * at most TANDEM_STAMPS_RATE a second), which on an H200 costs a launch-bound run of 1 us
 * kernels a third of its rate; off, one relaxed load per launch and per await. Work enqueued
 * outside the launch gate (your launches not wrapped in tdm_launch_begin/ end) is not seen.
 */

#define TDM_METRICS_MAX_DEVICES 16 /* devices reported: the layer's first 16 */
#define TDM_METRICS_MAX_STREAMS 64 /* streams reported per device: those with work, first 64 */

/* One stream of a device's set, over the window. */
typedef struct tdm_stream_metrics {
	int high;         /* 1: of the high-priority class (TDM_STREAM_HIGH_PRIORITY) */
	unsigned index;   /* its slot in its class, as in "tandem dev 0 normal 2" */
	uint64_t spans;   /* spans of any kind that ran on it */
	uint64_t busy_ns; /* their lengths added up (one stream runs its work one at a time) */
	uint64_t idle_ns; /* from the end of each span to the start of the next one on the stream;
	                     not before its first span in the window, nor after its last */
} tdm_stream_metrics;

/* One device, over the window. Rates are in GB/s (1e9 bytes a second). */
typedef struct tdm_device_metrics {
	int device;
	uint64_t window_ns;
	/* The union of kernel and graph spans on all its streams: time when at least one ran
	 * (kernels overlapping on two streams count once), and its share of window_ns. Not the SMs'
	 * occupancy: one small kernel makes the device busy. Works on a MIG instance, where NVML
	 * reports no utilisation. */
	uint64_t busy_ns;
	double busy_fraction;
	/* Spans of each kind (copies: every direction). */
	uint64_t kernels, graphs, copies, memsets;
	/* Copies host to device and device to host: bytes (a span cut by the window's edge counts
	 * the bytes of its part inside, pro rata), the union of that direction's copy spans, its
	 * share of the window, the rate while copying (bytes / h2d_ns) and over the window (bytes /
	 * window_ns). */
	uint64_t h2d_bytes, h2d_ns;
	double h2d_fraction, h2d_gbps, h2d_gbps_window;
	uint64_t d2h_bytes, d2h_ns;
	double d2h_fraction, d2h_gbps, d2h_gbps_window;
	uint64_t d2d_bytes, memset_bytes; /* device to device (peer copies too), memsets */
	/* The peak rates tdm_gpu_metrics_peak set (0: unknown), and the window's rate as a share
	 * of them: how much of the link the window used; -1 where the peak is unknown. */
	double h2d_peak_gbps, d2h_peak_gbps;
	double h2d_share, d2h_share;
	/* Span time that could not be placed: a device keeps 4096 separate busy intervals per kind
	 * (kernels, H2D, D2H) before it folds the older half into a sum, and a span that reaches
	 * the metrics after its time was folded counts only from the fold on. busy_ns, h2d_ns and
	 * d2h_ns may be short by up to this; 0 unless spans come very late. */
	uint64_t unplaced_ns;
	unsigned nstreams;     /* entries in streams[]: the streams with spans, in slot order */
	unsigned streams_over; /* streams with spans past TDM_METRICS_MAX_STREAMS, left out */
	tdm_stream_metrics streams[TDM_METRICS_MAX_STREAMS];
} tdm_device_metrics;

/* Round trips of the layer's awaits that suspended their task (tdm_await_stream,
 * tdm_await_event): from the await call to the moment the poller, or the worker watching it,
 * saw it complete. Awaits that return at once (an error, an event done already) and deadlines are
 * not counted. p50 and p99 are read from a histogram of buckets 1/16 of a power of two wide,
 * as the bucket's midpoint: within 3.2% of the true value (exact below 32 ns); max is exact. */
typedef struct tdm_await_metrics {
	uint64_t count;
	uint64_t p50_ns, p99_ns, max_ns, mean_ns;
	/* Made while on but not timed: the table that holds their start times was full (it holds
	 * 12288, spread by hash: only with thousands outstanding at once). */
	uint64_t untimed;
} tdm_await_metrics;

/* About 36 KiB: keep one in static or heap memory rather than on a small thread stack. */
typedef struct tdm_gpu_metrics {
	int running; /* 1: not stopped; the window ends at the get */
	/* Launches in the window whose spans are missing from the figures: not stamped (a
	 * stream had 4096 stamps out), or their device failed before their times could be read.
	 * 0 unless the device fails or the layer's stamps thread falls far behind. */
	uint64_t spans_lost;
	uint64_t start_ns, end_ns; /* the window, on tdm_now_ns's clock */
	int ndevices;              /* entries in devices[]: the layer's, at most 16 */
	tdm_await_metrics awaits;
	tdm_device_metrics devices[TDM_METRICS_MAX_DEVICES];
} tdm_gpu_metrics;

/*
 * Starts the window now and turns the stamps on for this layer; on a layer whose metrics run,
 * starts it over (every figure back to zero). Peaks set stay.
 * -EINVAL: gpu is NULL.  -ESHUTDOWN: the layer is being destroyed, or was.  -ENOMEM: no memory
 * for the metrics' state (taken at the first start).
 */
int tdm_gpu_metrics_start(tdm_gpu *gpu);
/* Ends the window now and turns the stamps off; the figures stay readable until the next start.
 * -EINVAL: gpu is NULL.  -EALREADY: not running (never started, or stopped).  -ESHUTDOWN. */
int tdm_gpu_metrics_stop(tdm_gpu *gpu);
/* The figures of the current or last window, into *out (no allocation): stamps that have run are
 * resolved first. -EINVAL: gpu or out is NULL.  -ENOENT: never started on this layer.
 * -ESHUTDOWN. */
int tdm_gpu_metrics_get(tdm_gpu *gpu, tdm_gpu_metrics *out);
/* The device's peak copy rates, GB/s, for the shares: measured by the caller (a large copy from
 * pinned memory, say); tandem does not measure them itself, since that would take the device's
 * copy engines away from the program. 0: unknown (the default). Kept across windows.
 * -EINVAL: gpu is NULL, device out of range or past TDM_METRICS_MAX_DEVICES, a rate negative or
 * not finite.  -ESHUTDOWN. */
int tdm_gpu_metrics_peak(tdm_gpu *gpu, int device, double h2d_gbps, double d2h_gbps);
/* A table of m for a human, on f. -EINVAL: m or f is NULL.  -EIO: a write failed. */
int tdm_metrics_print(const tdm_gpu_metrics *m, FILE *f);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_GPU_H */
