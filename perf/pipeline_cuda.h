// SPDX-License-Identifier: MIT
/*
 * perf/pipeline_cuda.h: the plain-CUDA side of `tandem-bench pipeline` (pipeline_cuda.cu, compiled
 * by nvcc only in CUDA builds, TANDEM_HAVE_CUDA), as C entry points for bench_pipeline.c: the
 * device-filling kernel of the compute-bound load, and the hand-written double-buffered pipeline
 * that tandem's is compared with. Nothing here names a CUDA type.
 *
 * Everything runs on device 0 with the runtime's primary context, the context tandem's cuda
 * backend uses too. Every call returns 0 or a negative errno (-ENODEV: no device, -ENOMEM, -EIO:
 * any other CUDA error), and on failure leaves a message for pipe_cuda_error().
 */
#ifndef TANDEM_PERF_PIPELINE_CUDA_H
#define TANDEM_PERF_PIPELINE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a batch the compute-bound kernel step copies from dev_in to dev_out (the stamp). */
#define PIPE_CUDA_STAMP_BYTES 64

/* The copy-bound load's trivial kernel: y = 2x over this many bytes at the start of the batch
 * (the stamp among them). A kernel over the whole 64 MiB batch takes ~50 us on an H200, 4% of a
 * batch's copies: no longer trivial, and on the critical path of every implementation. */
#define PIPE_CUDA_TRIVIAL_BYTES 65536

/* --trace: a wait between kernels longer than this counts as the device idle. Back-to-back
 * device-filling kernels on one stream are ~2 us apart on the H200 (perf/README.md). */
#define PIPE_CUDA_IDLE_NS 5000

/* What the calling thread's last failed call said; "" when none failed. */
const char *pipe_cuda_error(void);

/*
 * Enqueues on `stream` (a cudaStream_t, such as tdm_stream_native gives) a kernel that fills the
 * device: as many 1024-thread blocks as its SMs hold at once, every thread spinning `ns`
 * nanoseconds on %globaltimer. Two of them never run side by side, whatever streams they are on,
 * as with real kernels that use the whole GPU (a 1x1 spin kernel would let every stream's kernel
 * run at once and hide nothing). With out non-NULL, one block then copies PIPE_CUDA_STAMP_BYTES
 * from in to out (device pointers) as its last act. `index` is the batch's, for the trace (below);
 * negative: not traced.
 */
int pipe_cuda_busy(void *stream, uint32_t ns, void *out, const void *in, int64_t index);

/*
 * --trace: the device-clock span of each batch's busy kernel (its first block's start to its
 * last block's end), for batches [0, batches). begin resets the record (synchronously, before a
 * run); read, after the run, sums it up. Kernels are taken in the order they started.
 */
struct pipe_cuda_trace {
	uint64_t span_ns;      /* first kernel's start to the last one's end */
	uint64_t kernels_ns;   /* sum of the kernels' own spans */
	int64_t gap_sum_ns;    /* sum over neighbours (by start) of next start - this end; < 0:
	                          they overlapped */
	int64_t gap_max_ns;    /* the largest such difference (negative when all overlapped) */
	uint64_t idle_gaps;    /* kernels that started more than PIPE_CUDA_IDLE_NS after every
	                          earlier one had ended: the device had waited for work */
	uint64_t out_of_order; /* places where the start order steps back to a lower batch */
	/* Lined up with the run's host-clock start and end (CLOCK_MONOTONIC): the first kernel's
	 * start minus the run's start, and the run's end minus the last kernel's end. The clocks
	 * are matched to within clock_window_ns (see clock_offset in pipeline_cuda.cu). */
	int64_t lead_ns, tail_ns;
	uint64_t clock_window_ns;
};

int pipe_cuda_trace_begin(uint64_t batches);
int pipe_cuda_trace_read(uint64_t batches, uint64_t host_start_ns, uint64_t host_end_ns,
                         struct pipe_cuda_trace *out);

/* One batch's work, the same as tandem's side of the benchmark does. */
struct pipe_cuda_work {
	size_t bytes; /* copied in and copied out per batch */
	/* 0: y = 2x over its first PIPE_CUDA_TRIVIAL_BYTES (the copy-bound load); else
	 * pipe_cuda_busy(ns) and a copy of the first PIPE_CUDA_STAMP_BYTES from dev_in to
	 * dev_out. */
	uint32_t busy_ns;
	/* busy_ns > 0: the busy kernel copies the stamp itself (no device copy after it). */
	int stamp_in_kernel;
	void (*prepare)(void *host_in, uint64_t index, void *user);
	void (*consume)(const void *host_out, uint64_t index, void *user);
	void *user;
};

/*
 * The hand-written double-buffered pipeline: two non-blocking streams, two sets of pinned and
 * device buffers. Batch i uses set i % 2: cudaStreamSynchronize on its stream (batch i-2 done),
 * consume batch i-2, prepare batch i, then copy in, compute and copy out enqueued on that stream.
 * create allocates everything (outside any timed region); run times `batches` batches from the
 * first prepare to the last consume, as two moments on CLOCK_MONOTONIC (tdm_now_ns's clock).
 */
struct pipe_cuda_db;

int pipe_cuda_db_create(struct pipe_cuda_db **out, const struct pipe_cuda_work *w);
int pipe_cuda_db_run(struct pipe_cuda_db *db, uint64_t batches, uint64_t *start_ns,
                     uint64_t *end_ns);
/* --trace: when the last run's batch 0 had its copy in enqueued and its kernel launched (the
 * calls' returns, CLOCK_MONOTONIC): the host's part of the lead. */
void pipe_cuda_db_first_issue(const struct pipe_cuda_db *db, uint64_t *copied_ns,
                              uint64_t *launched_ns);
/* Waits for the streams and frees everything. NULL is a no-op. */
void pipe_cuda_db_destroy(struct pipe_cuda_db *db);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PERF_PIPELINE_CUDA_H */
