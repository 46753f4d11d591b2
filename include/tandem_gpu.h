/*
 * tandem's GPU layer: await GPU work without blocking a worker.
 *
 * A tdm_gpu attaches a poller thread, stream pools and event pools to an executor. A resumable
 * task (tandem.h) enqueues work on a leased stream and awaits it; its worker runs other tasks
 * meanwhile, and the poller hands the task back when the GPU is done. Backends: `cuda` (the
 * real GPU) and `sim` (an in-process simulator for machines without one; the same poller, pools
 * and await code run on it).
 *
 * Every call returns 0 or a negative errno (tdm_strerror); tdm_await_* return TDM_SUSPENDED or,
 * when the task can go on at once, its result.
 */
#ifndef TANDEM_GPU_H
#define TANDEM_GPU_H

#include <stddef.h>
#include <stdint.h>

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
	/* TANDEM_GPU from the environment (cuda, sim or none) if set; else cuda. */
	TDM_BACKEND_AUTO = 0,
	TDM_BACKEND_CUDA = 1,
	TDM_BACKEND_SIM = 2,
	/* No device: the poller serves deadlines only; GPU calls return -ENODEV. */
	TDM_BACKEND_NONE = 3,
} tdm_backend;

/* How the poller learns that GPU work finished. */
typedef enum tdm_completion {
	/* TANDEM_COMPLETION=word|event|adaptive from the environment if set; else adaptive where
	 * the device can write completion words (cuStreamWriteValue64), else events. */
	TDM_COMPLETION_AUTO = 0,
	/* Each await enqueues a write of a per-stream sequence number into pinned host memory;
	 * the poller reads memory instead of calling the driver. */
	TDM_COMPLETION_WORD = 1,
	/* Each await records a pooled event (timing disabled); the poller queries it. */
	TDM_COMPLETION_EVENT = 2,
	/*
	 * Per stream: completion words while the stream's awaits complete soon after they reach
	 * the head of its queue (within stall_us, 50 us by default), events otherwise (and for a
	 * stream's first await). Why: a completion write waiting behind long GPU work stalls its
	 * hardware queue's front end and slows every other round trip on the device (on the H200,
	 * with one such write pending on each of 20 streams: a word round trip 8.2 -> 16.6 us, an
	 * event round trip 11.4 -> 12.9 us), while a pending event record costs nothing; and a word
	 * is the cheaper of the two to poll. With 10,000 awaits outstanding behind long kernels it
	 * measured 8.7 us per round trip where words measured 17.5. The default (AUTO) where words
	 * can be written; perf/README.md has the measurements.
	 */
	TDM_COMPLETION_ADAPTIVE = 3,
} tdm_completion;

typedef struct tdm_gpu_config {
	tdm_backend backend;
	tdm_completion completion;
	/* Streams per device and priority that all workers share. 0: derived from the device
	 * (CUDA_DEVICE_MAX_CONNECTIONS, default 8 hardware work queues), or one per worker when
	 * the executor has more workers than that (at most 32; a MIG instance keeps its share). */
	unsigned streams_per_device;
	/* Threads that may launch on one device at the same moment. 0: 16 on a whole device (the
	 * fastest measured, perf/README.md), fewer on a MIG instance (tdm_device_info.launch_limit
	 * says how many, and why). */
	unsigned launch_limit;
	/* The poller spins this long after the last completion before it backs off to short
	 * sleeps, while awaits are outstanding. 0: 200 us. (It also spins through a completion it
	 * expects from how long the stream's awaits have been taking: at most 250 us before and
	 * 250 us after; tdm_gpu_stats.due_spins.) */
	unsigned poll_spin_us;
	/* An await at the head of its stream for longer than this waits on long work: while the
	 * poller spins it looks at such a stream on one sweep in 16 (a word) or after 1/32 of the
	 * time it has waited, at most 1 ms (an event: a driver call), and in adaptive completion
	 * the stream switches to events. 0: 50 us. */
	unsigned stall_us;
	/* Sim backend: simulated devices (0: 1). */
	unsigned sim_devices;
	/* Pinned host pool: size of each chunk pinned at once (0: 64 MiB), and the most it may
	 * pin in all (0: no cap; else at least 64 KiB, the pool's page, or tdm_gpu_create says
	 * -EINVAL). Past the cap, allocations fail with -ENOMEM. Leave room in a
	 * cap for the workers' caches: a block of up to 256 KiB freed on a worker stays in that
	 * worker's cache, and keeps the run of 64 KiB pages it was carved from, until that worker
	 * reaches the cap itself (then it empties its cache) or the tdm_gpu is destroyed. Such
	 * blocks count in no one's bytes_in_use, so another thread can get -ENOMEM with
	 * bytes_in_use well under the cap. */
	size_t pinned_chunk_bytes;
	size_t pinned_cap_bytes;
	/* Copies from or to pageable host memory: TDM_PAGEABLE_STAGE or _REFUSE. */
	int pageable;
	/* Where a lease for TDM_DEVICE_ANY goes: a tdm_placement. */
	int placement;
	/* Nonzero: run the poller on the CPUs nearest device 0 (tdm_device_info.pin_cpus), where
	 * those are known. Off by default: not yet measured on a machine of several NUMA nodes. */
	int pin_poller;
	/*
	 * CUDA_DEVICE_MAX_CONNECTIONS, the hardware work queues CUDA gives each device (8 unless
	 * set; CUDA reads it once per process, when it starts). Streams beyond the queues share
	 * them, and a completion mark behind one stream's kernel then holds back the other's: 16
	 * workers running 100 us kernels on an H200 ran 58k-61k tasks/s on 16 streams over 8
	 * queues, 149k-151k over 16 (perf/README.md).
	 * 0 (TDM_CONNECTIONS_AUTO, the default): where the cuda backend's stream set has more than
	 * 8 streams (its size: streams_per_device, else one per worker), tdm_gpu_create sets the
	 * variable to that size (at most 32), so that each stream has a queue of its own; not for a
	 * MIG instance named in CUDA_VISIBLE_DEVICES (its set is a share of 8). 1..32: set it to
	 * this instead. -1 (TDM_CONNECTIONS_KEEP): never set it. Other values: -EINVAL.
	 * Either way tandem sets it only where it is unset, with the cuda backend, before CUDA has
	 * started in the process, and gives it back if the backend then does not open. A value
	 * AUTO set gives the streams queues and changes none of tandem's decisions: the stream
	 * set is the one CUDA's default would give. A value named here (1..32), like one you set
	 * yourself, is the base of the set instead (streams_per_device above).
	 * tdm_device_info.why_streams says what happened. setenv(3) must not race another
	 * thread's getenv or setenv: while a tdm_gpu_create that may set it runs, no other thread
	 * (tasks on the executor's workers, another tdm_gpu_create) may read or change the
	 * environment; else set the variable yourself or say TDM_CONNECTIONS_KEEP.
	 */
	int connections;
} tdm_gpu_config;

enum {
	TDM_CONNECTIONS_AUTO = 0,
	TDM_CONNECTIONS_KEEP = -1,
};

/* Placement of tasks that do not name a device (tdm_stream_lease with TDM_DEVICE_ANY), among the
 * devices that have not failed (-ENODEV once every one has). */
typedef enum tdm_placement {
	TDM_PLACE_ROUND_ROBIN = 0,  /* the default */
	TDM_PLACE_LEAST_LOADED = 1, /* the device with the fewest stream leases held */
	TDM_PLACE_NEAREST = 2,      /* a device whose CPUs include the caller's; else round robin */
} tdm_placement;

#define TDM_DEVICE_ANY (-1)

enum {
	/* Staged through the pinned pool: the caller's side of the copy happens on the host
	 * (when, tdm_memcpy_async says); async and correct, at memcpy speed. The default. */
	TDM_PAGEABLE_STAGE = 0,
	/* Refused with -EFAULT: for programs that must never copy from pageable memory. */
	TDM_PAGEABLE_REFUSE = 1,
};

/* Fills *cfg with the defaults (all zero); does nothing when cfg is NULL. */
void tdm_gpu_config_init(tdm_gpu_config *cfg);

/*
 * Starts the GPU layer for ex: backend, poller thread, pools. cfg may be NULL for defaults.
 * -EINVAL: out or ex is NULL; backend, completion, placement or pageable is not one of its
 * values; streams_per_device or launch_limit above 1024; connections below -1 or above 32;
 * sim_devices above 1024 (sim); pinned_chunk_bytes above 64 GiB; pinned_cap_bytes from 1 to 64 KiB
 * - 1; with TDM_BACKEND_AUTO, TANDEM_GPU set to something other than cuda, sim or none; with
 * TDM_COMPLETION_AUTO, TANDEM_COMPLETION set to something other than word, event or adaptive;
 * or TANDEM_NVML set to something other than 0, off, 1 or on (README.md,
 * "Async/await on the GPU"). -ENODEV: the backend asked for (or cuda by default) has no device or
 * is not built in.  -ENOTSUP: TDM_COMPLETION_WORD or _ADAPTIVE asked for (in cfg or by
 * TANDEM_COMPLETION) on a device that cannot write completion words.  -ENOMEM, -EAGAIN: resources.
 * -EIO: the driver failed while the devices were set up (cuda).
 */
int tdm_gpu_create(tdm_gpu **out, tdm_executor *ex, const tdm_gpu_config *cfg);

/*
 * Waits until every outstanding GPU await has completed and its task was handed back, resumes
 * tasks awaiting deadlines with -ECANCELED, stops the poller, waits until every stream lease was
 * released, and frees streams, events and the pools' memory. Leases and awaits after the call
 * began fail with -ESHUTDOWN; a lease already in progress is waited for, and then its release.
 * Tasks and other threads may go on leasing and awaiting while it runs: it frees gpu only after
 * every lease and await call that reached gpu has returned, refused ones included. It cannot
 * wait for a call it never saw: none may begin once the destroy may have returned, so a caller
 * that leases or awaits while a destroy runs must be done with that call before something the
 * destroy waits for is over (a lease still held, its own or another's; an await outstanding).
 * A task that releases its last lease and then leases or awaits again, say, may find gpu freed.
 * Other calls on gpu (device, managed and pinned memory, events) must not race it: make them
 * before it begins, or while holding a lease (it frees nothing before every lease is released).
 * Either order of tdm_gpu_destroy and tdm_executor_destroy works.
 * -EINVAL: gpu is NULL.  -EDEADLK: called from a worker of the executor.
 */
int tdm_gpu_destroy(tdm_gpu *gpu);

/* "cuda", "sim" or "none" ("none" also for a NULL gpu). */
const char *tdm_gpu_backend_name(const tdm_gpu *gpu);
/* Devices the backend sees (0 for TDM_BACKEND_NONE). -EINVAL: gpu is NULL. */
int tdm_gpu_device_count(const tdm_gpu *gpu);
/* The completion mechanism in use on a device: TDM_COMPLETION_WORD, _EVENT or _ADAPTIVE.
 * -EINVAL: gpu is NULL or device is out of range (any device, on a GPU layer without devices). */
int tdm_gpu_completion(const tdm_gpu *gpu, int device);

/* Counts since tdm_gpu_create, read with relaxed loads (a snapshot, not a consistent cut). */
typedef struct tdm_gpu_stats {
	uint64_t awaits_word;  /* stream awaits that enqueued a completion-word write */
	uint64_t awaits_event; /* stream awaits that recorded a pooled event */
	/* What the poller did, for tuning and for reading benchmarks (counted by the poller, but
	 * `direct`, which the workers count): */
	uint64_t switches;    /* adaptive: times a stream changed mechanism (0 otherwise) */
	uint64_t event_polls; /* event queries of stream awaits (driver calls on cuda) */
	uint64_t sweeps;      /* passes over the busy streams */
	uint64_t sleeps;      /* times it slept (back-off steps and idle waits) */
	uint64_t due_spins;   /* times it spun instead of sleeping because a stream's await was
	                         due (from how long that stream's awaits have been taking) */
	uint64_t prewakes;    /* due spins that woke a parked worker ahead of the completion, so
	                         that a spinning worker resumes the task (awaits that wait longer
	                         than a worker spins before it parks, 100 us) */
	uint64_t direct;      /* word awaits whose worker, with nothing else to run, saw the word
	                         itself and resumed the task with no round trip through the
	                         poller (counted in awaits_word too) */
} tdm_gpu_stats;
/* -EINVAL: gpu or out is NULL. */
int tdm_gpu_stats_get(const tdm_gpu *gpu, tdm_gpu_stats *out);

/* ---- streams ---- */

enum {
	TDM_STREAM_SHARED = 0,         /* may carry other tasks' work too (the default) */
	TDM_STREAM_EXCLUSIVE = 1 << 0, /* no other lease until released */
	TDM_STREAM_HIGH_PRIORITY = 1 << 1,
};

/*
 * Leases a stream of `device` (or of the device the placement policy picks, for TDM_DEVICE_ANY)
 * from the calling worker's slice of the device's bounded set. A task keeps its device across
 * its awaits by keeping its lease; tdm_stream_device() says which device it got. For
 * TDM_DEVICE_ANY the placement's pick is tried first, then the other devices that have not
 * failed: -EBUSY then says that none of them had a stream to give, -ENODEV that all failed.
 * Shared leases never wait. -EINVAL: gpu or out is NULL, device out of range (and not
 * TDM_DEVICE_ANY), or an unknown flag.  -ENODEV: device failed or no device.  -EBUSY: an
 * exclusive lease was asked for and every stream of the set is in use, or a shared one and
 * every stream of the set is held exclusively (tdm_pipeline_run leaves one of the set to
 * shared leases; exclusive leases of your own can take them all).  -ESHUTDOWN: the GPU
 * layer is being destroyed.  -ENOMEM, -EAGAIN, -EIO: the stream (made on its first lease) could
 * not be created: no memory, no thread for it (sim), or the driver failed; -ENOMEM also: no
 * memory for the lease's handle.
 *
 * *out is this lease's own handle: two leases of one stream are two handles, and each names its
 * holder. Once released, a handle is refused by every call that takes a stream (-EINVAL, and
 * nothing is enqueued), until a later lease gets it again: handles are reused, oldest first,
 * and a stale one then names that lease.
 */
int tdm_stream_lease(tdm_gpu *gpu, int device, unsigned flags, tdm_stream **out);
/* Gives a lease back; call it after the last await on the stream. -EINVAL: s is NULL or holds
 * no lease (released already: nothing changes, other holders of the stream keep theirs). */
int tdm_stream_release(tdm_stream *s);
/* The backend's stream: a cudaStream_t on cuda, NULL on sim (and for a NULL or released s). */
void *tdm_stream_native(const tdm_stream *s);
/* The device of s. -EINVAL: s is NULL or released. */
int tdm_stream_device(const tdm_stream *s);

/*
 * Bounds the threads launching on a stream's device at once (tdm_gpu_config.launch_limit).
 * Wrap your own launches in these; tandem's own launch and copy calls do it already. s must be
 * a leased stream, never NULL: these return nothing, so they cannot refuse one.
 */
void tdm_launch_begin(tdm_stream *s);
void tdm_launch_end(tdm_stream *s);

/* ---- work on a stream (both backends) ---- */

typedef enum tdm_copy_kind {
	TDM_COPY_H2D = 1,
	TDM_COPY_D2H = 2,
	TDM_COPY_D2D = 3,
} tdm_copy_kind;

/*
 * Async copy. Host memory from tdm_host_alloc, tdm_pinned_alloc or tdm_host_register is copied
 * directly; pageable host memory is staged or refused (tdm_gpu_config.pageable; -EFAULT).
 * -EINVAL: a NULL or released stream, a NULL pointer, or an unknown kind, or a device side (dst
 * for H2D, src for D2H, both for D2D) that is not within one live allocation, as the driver
 * refuses it (nothing is enqueued); -EIO: the
 * device failed, or the driver refused
 * the copy otherwise; staging adds -ENOMEM (the pinned pool at its cap) and -ENOTSUP (a
 * backend without host functions). A staged copy's pinned block goes back to the pool when the
 * copy is done, or when its device fails first (a dead device runs no more host functions).
 * A staged copy to the device reads its source during the call (it may change once the call
 * returns), except where a staged copy from the device, still pending on the same stream,
 * writes into that source: then it reads it in stream order, after that copy, so the source
 * must stay until the copy is done.
 */
int tdm_memcpy_async(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind);
/*
 * A kernel: y[i] = a * x[i] for i < n, device pointers.  -EINVAL: s, y or x is NULL, or s is
 * released (nothing is enqueued).  -EIO: s's
 * device failed (a trapping kernel, say), or the launch did.  -ENOMEM: no memory to queue it
 * (sim). Reaching past an allocation is an illegal address when the kernel runs: the device
 * fails for good and its awaits resume with -EIO.
 */
int tdm_launch_scale(tdm_stream *s, float *y, const float *x, float a, size_t n);

/*
 * Device memory (cudaMalloc) and pinned host memory pinned anew on each call (cudaHostAlloc:
 * milliseconds for large sizes); prefer tdm_pinned_alloc and tdm_device_alloc_async on hot paths.
 * tdm_device_alloc: -EINVAL: gpu or out is NULL, zero bytes, device out of range; -ENODEV: no
 * devices; -ENOMEM: more than the device has free; -EIO: the device failed (cuda).
 * tdm_device_free: -EINVAL: gpu is NULL, device out of range (any device, on a GPU layer
 * without devices), or p is not live memory of `device` (never allocated, freed already, or
 * another device's); nothing is freed then. A failed device's memory is freed (cuda: it goes
 * with the device's context): 0. tdm_host_alloc: -EINVAL: gpu or out is NULL, zero bytes;
 * -ENODEV: no backend (TDM_BACKEND_NONE); -ENOMEM; -EIO from the driver. tdm_host_free:
 * -EINVAL: gpu is NULL, or p is not a live block of tdm_host_alloc (never allocated, freed
 * already, or from tdm_pinned_alloc); -ENODEV: no backend. Freeing NULL is 0.
 */
int tdm_device_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out);
int tdm_device_free(tdm_gpu *gpu, int device, void *p);
int tdm_host_alloc(tdm_gpu *gpu, size_t bytes, void **out);
int tdm_host_free(tdm_gpu *gpu, void *p);

/* ---- pinned host memory pool ---- */

/*
 * Pinned host memory in microseconds: chunks pinned once (grown on demand up to the cap) are
 * carved by size class, with a cache per worker thread. Memory from the pool counts as pinned
 * for copies. Any thread may free any block. -ENOMEM past the cap (never a silent fallback to
 * pageable memory); -EINVAL for a zero size or a pointer not from the pool; -ENODEV on a GPU
 * layer without devices (TDM_BACKEND_NONE).
 */
int tdm_pinned_alloc(tdm_gpu *gpu, size_t bytes, void **out);
int tdm_pinned_free(tdm_gpu *gpu, void *p);

typedef struct tdm_pinned_stats {
	uint64_t bytes_pinned; /* chunks pinned from the driver */
	uint64_t bytes_in_use; /* handed out, by size class */
	uint64_t high_water;   /* largest bytes_in_use seen */
	uint64_t chunks;
} tdm_pinned_stats;

/* -EINVAL: gpu or out is NULL; -ENODEV: a GPU layer without a backend (TDM_BACKEND_NONE). */
int tdm_pinned_stats_get(tdm_gpu *gpu, tdm_pinned_stats *out);

/* Page-locks (and unlocks) a buffer the caller owns, so copies from it are async. -EINVAL: a
 * NULL pointer, zero bytes, or unregistering memory that was not registered; -EEXIST: the range
 * overlaps one already registered; -ENODEV: no devices; -ENOTSUP: the backend cannot; -ENOMEM,
 * -EIO from the driver. */
int tdm_host_register(tdm_gpu *gpu, void *p, size_t bytes);
int tdm_host_unregister(tdm_gpu *gpu, void *p);

/* ---- device memory ---- */

/*
 * Stream-ordered device memory: the allocation is ordered on s and may be used by work enqueued
 * on s after the call; the free happens after all work enqueued on s before it, so freeing right
 * after the last use is safe without a host synchronization. Freed memory stays in the device's
 * pool for reuse. -ENOMEM; -EIO (the device failed); -EINVAL (a NULL or released stream, a NULL
 * pointer, zero bytes; for the free, p is not live device memory: never allocated, or freed or
 * its free queued already); -ENOTSUP: the device has no stream-ordered memory pools (use
 * tdm_device_alloc). Freeing NULL is 0. Work enqueued after the free may not name p.
 */
int tdm_device_alloc_async(tdm_stream *s, size_t bytes, void **out);
int tdm_device_free_async(tdm_stream *s, void *p);

typedef enum tdm_mem_advice {
	TDM_ADVISE_READ_MOSTLY = 1,
	TDM_ADVISE_PREFERRED_LOCATION = 2, /* device, or the host with device < 0 */
	TDM_ADVISE_ACCESSED_BY = 3,
} tdm_mem_advice;

/*
 * Managed (unified) memory, only on request: -ENOMEM when bytes exceed the device's free
 * memory (asking for more can hang the GPU). On CUDA, free memory is what the driver reports:
 * memory the stream-ordered pool keeps for reuse (up to half the device) counts as used. Prefetch
 * is ordered on s; device < 0 is the host. -EINVAL: a NULL pointer, a released s, zero bytes, a
 * device out of range, an unknown advice, or for tdm_managed_free a p that is not live device
 * memory (never allocated, or freed already; as cudaFree, any device memory is taken); -ENODEV: no
 * devices; -ENOTSUP: the backend has no managed memory; -EIO from the driver.
 */
int tdm_managed_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out);
int tdm_managed_free(tdm_gpu *gpu, void *p);
int tdm_mem_prefetch(tdm_stream *s, const void *p, size_t bytes, int device);
int tdm_mem_advise(tdm_gpu *gpu, const void *p, size_t bytes, tdm_mem_advice advice, int device);

/* Copy between two devices' memory, ordered on s (a stream of either device). -EINVAL: a NULL
 * argument, a released s, a device out of range, or s on neither device; -EIO: s's device failed;
 * -ENOTSUP: the backend cannot. */
int tdm_memcpy_peer_async(tdm_stream *s, void *dst, int dst_device, const void *src, int src_device,
                          size_t bytes);

/* ---- events (pooled, timing disabled) ---- */

/* An event of `device` from its pool (made when the pool has none). -EINVAL: gpu or out is NULL,
 * device out of range.  -ENODEV: no devices.  -ENOMEM, -EIO: a new event could not be made (no
 * memory; the device or driver failed). */
int tdm_event_get(tdm_gpu *gpu, int device, tdm_event **out);
/* Gives e back to its pool; once, after its last await. -EINVAL: e is NULL, or back in the pool
 * already (a second put, refused: the pool stays as it was). */
int tdm_event_put(tdm_event *e);
/* Captures the work enqueued on s so far. -EINVAL: e or s is NULL, s is released, their devices
 * differ, or e
 * was put back (while it is in the pool; once taken again, by another owner or by a stream
 * await, a stale handle is not caught).
 * -EIO: the device failed, or the driver refused the record.  -ENOMEM: no memory to queue it
 * (sim). */
int tdm_event_record(tdm_event *e, tdm_stream *s);

/* ---- awaits ---- */

/*
 * Each await below fails at once, setting the task's result to the same errno, with -EINVAL: t
 * is NULL or not the task running on the calling thread, or its stream, event or gpu is NULL or
 * belongs to a GPU layer of another executor, or its stream's lease was released, or its event
 * was put back (tdm_event_record says how far that is caught); -ESHUTDOWN: the GPU layer is being
 * destroyed.
 */
/* Resumes t once all work enqueued on s so far has finished; result 0 or -EIO. At once also
 * -EIO: s's device failed, or the completion could not be enqueued; -ENOMEM: no memory for
 * it. */
int tdm_await_stream(tdm_task *t, tdm_stream *s);
/* Resumes t once the work captured by e has finished; result 0 or -EIO. At once: 0 when that
 * work is done already (or e was never recorded), -EIO when it or the device failed. */
int tdm_await_event(tdm_task *t, tdm_event *e);
/* Resumes t at `deadline_ns` on CLOCK_MONOTONIC (0 at once if passed; -ECANCELED if the GPU
 * layer is destroyed first; -ENOMEM if the poller had no memory to keep the deadline). */
int tdm_await_deadline(tdm_task *t, tdm_gpu *gpu, uint64_t deadline_ns);

/* ---- pipelines ---- */

/*
 * A pipeline runs batches through five stages: prepare (host), copy in, compute (GPU), copy out,
 * consume (host). `in_flight` batches run at once, each in a slot with its own pinned and device
 * buffers, so that while the GPU computes batch N, batch N+1 is prepared and copied in and batch
 * N-1 is copied out. A slot enqueues copy in, compute and copy out back to back on its batch's
 * stream and awaits them once, as a resumable task, so no worker waits for the GPU;
 * buffers are recycled from batch to batch; a slot prepares its next batch only after its last
 * one was consumed (back-pressure: a slow consumer slows preparation, memory stays bounded, and
 * at most in_flight batches are between prepare and the end of consume at any moment).
 *
 * Streams: the batches take turns on `streams` streams of cfg.device (batch i on stream
 * i % streams; 0: two, or one when in_flight is 1), each batch's work in one piece and the
 * batches in index order. Two are enough to overlap a batch's copies with its neighbours' work
 * and keep the device fed; more let the kernels of several batches run at once (kernels too
 * small to fill the device), and with device-filling kernels they interleave and cost a little
 * (perf/README.md, pipeline). in_flight beyond `streams` queues batches ahead on the streams, so
 * that the device never waits for the host. The pipeline leases its streams exclusively while
 * that leaves at least one stream of the device's set to other tasks' shared leases, shared past
 * that, and takes fewer when no more can be had. With more workers than hardware work queues the
 * set is larger than the queues (one stream per worker, see tdm_gpu_config.streams_per_device),
 * and an exclusive stream would share a queue with another stream's work, but for the queues
 * tdm_gpu_create gives the set by default (tdm_gpu_config.connections). Where it could not (CUDA
 * started first, or TDM_CONNECTIONS_KEEP), set CUDA_DEVICE_MAX_CONNECTIONS to at least the set's
 * size yourself when a pipeline shares the device with other work.
 * Buffers come from tdm_pinned_alloc and from tdm_device_alloc_async (tdm_device_alloc where the
 * backend has no stream-ordered memory), taken before the first batch and given back before
 * tdm_pipeline_run returns.
 * CPU: while a pipeline runs, one worker of the executor stays awake between tasks (it looks for
 * work instead of sleeping), so that each batch's completion is taken up at once rather than
 * after waking a sleeping thread, which takes 50-300 us on some virtual machines. That costs a
 * core while the pipeline runs, as a thread waiting in cudaStreamSynchronize does under CUDA's
 * default scheduling; no_spin saves it.
 */
typedef struct tdm_batch {
	uint64_t index;     /* 0, 1, 2, ... in the order batches were prepared */
	void *host_in;      /* pinned, in_bytes */
	void *host_out;     /* pinned, out_bytes */
	void *dev_in;       /* in_bytes */
	void *dev_out;      /* out_bytes; dev_in itself when compute is NULL */
	size_t in_len;      /* bytes to copy in; prepare may lower it (starts at in_bytes) */
	size_t out_len;     /* bytes to copy out; compute may lower it (starts at out_bytes) */
	tdm_stream *stream; /* the batch's stream, set before prepare; no other batch enqueues on
	                       it until this one's work is enqueued. compute enqueues here */
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
	/*
	 * Host: fill host_in (and lower in_len if the batch is shorter). 0, TDM_PIPELINE_END, or
	 * -errno (this batch fails; any other value is -EINVAL). Calls are serialised and in batch
	 * order; after TDM_PIPELINE_END there are none. The first batch of each slot (batch 0 among
	 * them) is normally prepared, and its copy in, compute and copy out enqueued, on the
	 * thread that called tdm_pipeline_run (it set the pipeline up, and its first CUDA calls
	 * are the quickest); the other batches on workers. Without a pooled event for it, a slot's
	 * first batch is a worker's too. Required.
	 */
	int (*prepare)(tdm_batch *b, void *user);
	/*
	 * Enqueue kernels on b->stream from dev_in to dev_out (and lower out_len if less comes
	 * out). 0 or -errno. Runs where prepare ran (see above), possibly beside other slots'
	 * compute. May be NULL:
	 * copy only, dev_in is copied back out (out_len is lowered to in_len if larger).
	 */
	int (*compute)(tdm_batch *b, void *user);
	/*
	 * Host: use host_out. 0 or -errno (this batch fails). Not called for a batch that failed
	 * upstream. Ordered: one call at a time, in batch order, a failed batch passing its turn
	 * on. Unordered: calls for different batches may run at once on different workers. Runs on
	 * a worker, except when a slot's task could not be started (tdm_spawn failed: no memory,
	 * or the executor shutting down): then the thread that called tdm_pipeline_run finishes
	 * that slot's batch, and in ordered mode may consume the parked batches after it. May be
	 * NULL (the output is dropped).
	 */
	int (*consume)(tdm_batch *b, void *user);
	void *user;
	/* The streams the batches take turns on, 1..in_flight (more: -EINVAL); 0: min(in_flight,
	 * 2). See above. (Since 0.3.0.) */
	unsigned streams;
	/* Nonzero: no worker stays awake for this pipeline (see CPU above): every worker may sleep
	 * while its batches are on the GPU, and a completion may wait for one to wake. (Since
	 * 0.3.0.) */
	int no_spin;
} tdm_pipeline_config;

typedef struct tdm_pipeline_stats {
	uint64_t batches;   /* consumed */
	uint64_t failed;    /* stopped by an error in some stage; their later stages did not run */
	uint64_t cancelled; /* prepared, then stopped by executor shutdown (neither of the above) */
	int first_error;    /* of the failed batch with the lowest index, 0 if none */
	uint64_t bytes_in, bytes_out; /* in_len and out_len of the consumed batches */
	double seconds;               /* from the first prepare to the end of the last batch */
	/* The same two moments on tdm_now_ns's clock, to line a run up with other timelines; both
	 * 0, like seconds, when no batch finished. (Since 0.2.0.) */
	uint64_t start_ns, end_ns;
} tdm_pipeline_stats;

/*
 * Runs a pipeline until prepare returns TDM_PIPELINE_END and every batch is through; blocks the
 * caller, which must not be a worker of gpu's executor (-EDEADLK). A batch that fails does not
 * stop the others; after a sticky device error the remaining batches fail at once. stats may be
 * NULL; it is zeroed first and filled in whenever the pipeline ran. Returns 0 when every batch
 * succeeded, else the first batch error (stats says which and how many); -ECANCELED when the
 * executor's shutdown (TDM_SHUTDOWN_CANCEL) cancelled the pipeline's tasks, whatever else failed;
 * -EINVAL for a bad config (streams beyond in_flight among them); -ENODEV: no device, or the
 * device failed before the run could lease its streams; -EAGAIN: a stream could not be made (the
 * simulator's stream thread did not start); -ENOMEM when
 * buffers cannot be had; -EIO when they cannot be had because the device failed; -ESHUTDOWN: the
 * executor or the GPU layer is being destroyed; -EBUSY: no stream of the device could be leased.
 */
int tdm_pipeline_run(tdm_gpu *gpu, const tdm_pipeline_config *cfg, tdm_pipeline_stats *stats);

/* ---- devices ---- */

/* MIG mode of a physical GPU, as NVML reports it. */
typedef enum tdm_mig_mode {
	TDM_MIG_UNKNOWN = -1, /* NVML not available: CUDA alone cannot tell */
	TDM_MIG_DISABLED = 0,
	TDM_MIG_ENABLED = 1,
} tdm_mig_mode;

/*
 * What tandem found out about a device (from the CUDA runtime, NVML when libnvidia-ml.so.1 is
 * there, and sysfs) and what it decided for it, each decision with a line that says why.
 * Strings are NUL-terminated, "" when unknown; counts and sizes are 0 when unknown. A MIG
 * instance is a device of its own, with its own streams and memory pool; its bus id, NUMA node
 * and CPUs are its physical GPU's. On the sim backend the facts are the simulator's.
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
} tdm_device_info;

/*
 * The facts and decisions for `device`, gathered once by tdm_gpu_create; any thread may ask.
 * -EINVAL: bad gpu, device or out.  -ENODEV: no device (backend none).
 */
int tdm_gpu_device_info(const tdm_gpu *gpu, int device, tdm_device_info *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_GPU_H */
