// SPDX-License-Identifier: MIT
/*
 * perf/raw_cuda.h: the plain-CUDA baselines of the GPU benchmarks (raw_cuda.cu, compiled by nvcc
 * only in CUDA builds, TANDEM_HAVE_CUDA), as C entry points for bench_gpu.c. Nothing here names a
 * CUDA type, so the C driver stays free of CUDA headers; it calls these only under
 * TANDEM_HAVE_CUDA.
 *
 * Everything runs on device 0 with the runtime's primary context, the context tandem's cuda
 * backend uses too. Every call returns 0 or a negative errno (-ENODEV: no device, -ENOTSUP: the
 * device lacks what the baseline needs, -ENOMEM, -EIO: any other CUDA error), and on failure
 * leaves a message for raw_cuda_error().
 */
#ifndef TANDEM_PERF_RAW_CUDA_H
#define TANDEM_PERF_RAW_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the host learns that an empty kernel finished, one round trip at a time. */
enum raw_cuda_floor {
	RAW_CUDA_EVENT = 0,    /* cudaEventRecord, then spin on cudaEventQuery */
	RAW_CUDA_WORD = 1,     /* cuStreamWriteValue64 of a counter to mapped pinned memory, spin */
	RAW_CUDA_SYNC = 2,     /* cudaStreamSynchronize */
	RAW_CUDA_HOSTFUNC = 3, /* cudaLaunchHostFunc sets an atomic flag, spin on it */
	RAW_CUDA_NFLOORS = 4,
};

/* What the calling thread's last failed call said; "" when none failed. */
const char *raw_cuda_error(void);

/* The name of device 0 into buf (cut to len - 1 bytes). -ENODEV without one. */
int raw_cuda_device_name(char *buf, size_t len);

/*
 * Round trips of one empty kernel (1x1) on a non-blocking stream of default priority created for
 * the call: launch, then learn of its completion `how`. ns[i] gets the host time from just before
 * the launch to just after the completion was seen (CLOCK_MONOTONIC), for the n round trips that
 * follow `warmup` untimed ones. With bg_streams > 0, that many other streams each run a 1x1
 * kernel that spins until the call ends, followed by bg_pending completion writes
 * (cuStreamWriteValue64) and then bg_events event records queued behind it, so the GPU carries
 * the same background work as tandem's gpu-latency with awaits outstanding, each of which holds
 * one write or one event record, whichever its await used (but no host-side awaits);
 * -ETIMEDOUT if the kernels ended before the last sample. Streams, events and kernels are
 * created and torn down inside the call.
 */
int raw_cuda_latency(enum raw_cuda_floor how, unsigned bg_streams, unsigned bg_pending,
                     unsigned bg_events, uint64_t warmup, uint64_t n, uint64_t *ns);

/* The throughput baselines. */
enum raw_cuda_tp_kind {
	/* `workers` threads, each with a stream of its own, each looping launch +
	 * cudaStreamSynchronize over its share of the n tasks. */
	RAW_CUDA_TP_SYNC = 0,
	/* `workers` threads and a queue (mutex + condition variable) of continuations; `window`
	 * task slots over `workers` streams (slot % workers). A task launches its kernel and then a
	 * cudaLaunchHostFunc whose callback (no CUDA call in it) queues the slot; a worker that
	 * takes the slot counts the task done and launches the next task in that slot. */
	RAW_CUDA_TP_HOSTFUNC = 1,
};

struct raw_cuda_tp;

/* Creates the streams and threads of a baseline, outside any timed region. */
int raw_cuda_tp_create(struct raw_cuda_tp **out, enum raw_cuda_tp_kind kind, unsigned workers,
                       unsigned window);
/*
 * Runs n tasks of one kernel each, `kernel_ns` long (0: the empty kernel), and returns in
 * *elapsed_ns the wall time from the start signal to the last task's completion being seen.
 */
int raw_cuda_tp_run(struct raw_cuda_tp *tp, uint64_t n, uint32_t kernel_ns, uint64_t *elapsed_ns);
/* Joins the threads, waits for the streams and destroys them. NULL is a no-op. */
void raw_cuda_tp_destroy(struct raw_cuda_tp *tp);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PERF_RAW_CUDA_H */
