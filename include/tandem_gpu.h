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
	/* Completion words where the device can write them (cuStreamWriteValue64), else events. */
	TDM_COMPLETION_AUTO = 0,
	/* Each await enqueues a write of a per-stream sequence number into pinned host memory;
	 * the poller reads memory instead of calling the driver. */
	TDM_COMPLETION_WORD = 1,
	/* Each await records a pooled event (timing disabled); the poller queries it. */
	TDM_COMPLETION_EVENT = 2,
} tdm_completion;

typedef struct tdm_gpu_config {
	tdm_backend backend;
	tdm_completion completion;
	/* Streams per device and priority that all workers share. 0: derived from the device
	 * (CUDA_DEVICE_MAX_CONNECTIONS, default 8 hardware work queues). */
	unsigned streams_per_device;
	/* Threads that may launch on one device at the same moment. 0: 4 (launch throughput
	 * falls past about 4 concurrent launchers on an H200). */
	unsigned launch_limit;
	/* The poller spins this long after the last completion before it backs off to short
	 * sleeps, while awaits are outstanding. 0: 200 us. */
	unsigned poll_spin_us;
	/* Sim backend: simulated devices (0: 1). */
	unsigned sim_devices;
	/* Pinned host pool: size of each chunk pinned at once (0: 64 MiB), and the most it may
	 * pin in all (0: no cap). Past the cap, allocations fail with -ENOMEM. */
	size_t pinned_chunk_bytes;
	size_t pinned_cap_bytes;
	/* Copies from or to pageable host memory: TDM_PAGEABLE_STAGE or _REFUSE. */
	int pageable;
} tdm_gpu_config;

enum {
	/* Staged through the pinned pool: the caller's side of the copy happens on the host,
	 * ordered on the stream; async and correct, at memcpy speed. The default. */
	TDM_PAGEABLE_STAGE = 0,
	/* Refused with -EFAULT: for programs that must never copy from pageable memory. */
	TDM_PAGEABLE_REFUSE = 1,
};

void tdm_gpu_config_init(tdm_gpu_config *cfg);

/*
 * Starts the GPU layer for ex: backend, poller thread, pools. cfg may be NULL for defaults.
 * -EINVAL: bad argument.  -ENODEV: the backend asked for (or cuda by default) has no device or
 * is not built in.  -ENOMEM, -EAGAIN: resources.
 */
int tdm_gpu_create(tdm_gpu **out, tdm_executor *ex, const tdm_gpu_config *cfg);

/*
 * Waits until every outstanding GPU await has completed and its task was handed back, resumes
 * tasks awaiting deadlines with -ECANCELED, stops the poller, waits until every stream lease was
 * released, and frees streams, events and the pools' memory. Leases and awaits after the call
 * began fail with -ESHUTDOWN. Either order of tdm_gpu_destroy and tdm_executor_destroy works.
 * -EINVAL: gpu is NULL.  -EDEADLK: called from a worker of the executor.
 */
int tdm_gpu_destroy(tdm_gpu *gpu);

/* "cuda", "sim" or "none". */
const char *tdm_gpu_backend_name(const tdm_gpu *gpu);
/* Devices the backend sees, or a negative errno. */
int tdm_gpu_device_count(const tdm_gpu *gpu);
/* The completion mechanism in use on a device: TDM_COMPLETION_WORD or _EVENT, or -EINVAL. */
int tdm_gpu_completion(const tdm_gpu *gpu, int device);

/* ---- streams ---- */

enum {
	TDM_STREAM_SHARED = 0,         /* may carry other tasks' work too (the default) */
	TDM_STREAM_EXCLUSIVE = 1 << 0, /* no other lease until released */
	TDM_STREAM_HIGH_PRIORITY = 1 << 1,
};

/*
 * Leases a stream of `device` from the calling worker's cache over the device's bounded set.
 * Shared leases never wait. -EINVAL: bad gpu, device or flags.  -ENODEV: device failed or no
 * device.  -EBUSY: an exclusive lease was asked for and every stream of the set is in use.
 * -ESHUTDOWN: the GPU layer is being destroyed.
 */
int tdm_stream_lease(tdm_gpu *gpu, int device, unsigned flags, tdm_stream **out);
/* Gives a lease back; call it after the last await on the stream. -EINVAL: bad stream. */
int tdm_stream_release(tdm_stream *s);
/* The backend's stream: a cudaStream_t on cuda, NULL on sim. */
void *tdm_stream_native(const tdm_stream *s);
int tdm_stream_device(const tdm_stream *s);

/*
 * Bounds the threads launching on a stream's device at once (tdm_gpu_config.launch_limit).
 * Wrap your own launches in these; tandem's own launch and copy calls do it already.
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
 */
int tdm_memcpy_async(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind);
/* A kernel that runs about `ns` nanoseconds (0: an empty kernel). */
int tdm_launch_spin(tdm_stream *s, uint32_t ns);
/* y[i] = a * x[i] for i < n, device pointers. */
int tdm_launch_scale(tdm_stream *s, float *y, const float *x, float a, size_t n);
/* A kernel that traps: a sticky device error, for tests of error handling. */
int tdm_launch_fault(tdm_stream *s);

/* Device and pinned host memory (plain, not pooled yet). -ENOMEM, -ENODEV, -EINVAL. */
int tdm_device_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out);
int tdm_device_free(tdm_gpu *gpu, int device, void *p);
int tdm_host_alloc(tdm_gpu *gpu, size_t bytes, void **out);
int tdm_host_free(tdm_gpu *gpu, void *p);

/* ---- pinned host memory pool ---- */

/*
 * Pinned host memory in microseconds: chunks pinned once (grown on demand up to the cap) are
 * carved by size class, with a cache per worker thread. Memory from the pool counts as pinned
 * for copies. Any thread may free any block. -ENOMEM past the cap (never a silent fallback to
 * pageable memory); -EINVAL for a zero size or a pointer not from the pool.
 */
int tdm_pinned_alloc(tdm_gpu *gpu, size_t bytes, void **out);
int tdm_pinned_free(tdm_gpu *gpu, void *p);

typedef struct tdm_pinned_stats {
	uint64_t bytes_pinned; /* chunks pinned from the driver */
	uint64_t bytes_in_use; /* handed out, by size class */
	uint64_t high_water;   /* largest bytes_in_use seen */
	uint64_t chunks;
} tdm_pinned_stats;

int tdm_pinned_stats_get(tdm_gpu *gpu, tdm_pinned_stats *out);

/* Page-locks (and unlocks) a buffer the caller owns, so copies from it are async. */
int tdm_host_register(tdm_gpu *gpu, void *p, size_t bytes);
int tdm_host_unregister(tdm_gpu *gpu, void *p);

/* ---- device memory ---- */

/*
 * Stream-ordered device memory: the allocation is ordered on s and may be used by work enqueued
 * on s after the call; the free happens after all work enqueued on s before it, so freeing right
 * after the last use is safe without a host synchronization. Freed memory stays in the device's
 * pool for reuse. -ENOMEM, -EIO, -EINVAL.
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
 * memory (asking for more can hang the GPU). Prefetch is ordered on s; device < 0 is the host.
 */
int tdm_managed_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out);
int tdm_managed_free(tdm_gpu *gpu, void *p);
int tdm_mem_prefetch(tdm_stream *s, const void *p, size_t bytes, int device);
int tdm_mem_advise(tdm_gpu *gpu, const void *p, size_t bytes, tdm_mem_advice advice, int device);

/* Copy between two devices' memory, ordered on s (a stream of either device). */
int tdm_memcpy_peer_async(tdm_stream *s, void *dst, int dst_device, const void *src, int src_device,
                          size_t bytes);

/* ---- events (pooled, timing disabled) ---- */

int tdm_event_get(tdm_gpu *gpu, int device, tdm_event **out);
int tdm_event_put(tdm_event *e);
/* Captures the work enqueued on s so far. -EINVAL: bad args or devices differ. */
int tdm_event_record(tdm_event *e, tdm_stream *s);

/* ---- awaits ---- */

/* Resumes t once all work enqueued on s so far has finished; result 0 or -EIO. */
int tdm_await_stream(tdm_task *t, tdm_stream *s);
/* Resumes t once the work captured by e has finished; result 0 or -EIO. */
int tdm_await_event(tdm_task *t, tdm_event *e);
/* Resumes t at `deadline_ns` on CLOCK_MONOTONIC (0 at once if passed; -ECANCELED if the GPU
 * layer is destroyed first). */
int tdm_await_deadline(tdm_task *t, tdm_gpu *gpu, uint64_t deadline_ns);
/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t tdm_now_ns(void);

/* ---- the simulator ---- */

typedef enum tdm_sim_fault {
	/* The next operation enqueued on the stream fails; the await covering it resumes with
	 * -EIO; the stream and the device go on working. */
	TDM_SIM_FAULT_OP = 1,
	/* The next operation enqueued on the stream faults the device for good (like a kernel
	 * that traps): every await on the device resumes with -EIO, new ones fail at once. */
	TDM_SIM_FAULT_STICKY = 2,
} tdm_sim_fault;

/* -EINVAL: s is not a sim stream or fault is unknown. */
int tdm_sim_inject(tdm_stream *s, tdm_sim_fault fault);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_GPU_H */
