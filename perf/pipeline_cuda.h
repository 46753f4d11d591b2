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

/* What the calling thread's last failed call said; "" when none failed. */
const char *pipe_cuda_error(void);

/*
 * Enqueues on `stream` (a cudaStream_t, such as tdm_stream_native gives) a kernel that fills the
 * device: as many 1024-thread blocks as its SMs hold at once, every thread spinning `ns`
 * nanoseconds on %globaltimer. Two of them never run side by side, whatever streams they are on,
 * as with real kernels that use the whole GPU (a 1x1 spin kernel would let every stream's kernel
 * run at once and hide nothing). With out non-NULL, one block then copies PIPE_CUDA_STAMP_BYTES
 * from in to out (device pointers) as its last act.
 */
int pipe_cuda_busy(void *stream, uint32_t ns, void *out, const void *in);

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
 * first prepare to the last consume.
 */
struct pipe_cuda_db;

int pipe_cuda_db_create(struct pipe_cuda_db **out, const struct pipe_cuda_work *w);
int pipe_cuda_db_run(struct pipe_cuda_db *db, uint64_t batches, uint64_t *elapsed_ns);
/* Waits for the streams and frees everything. NULL is a no-op. */
void pipe_cuda_db_destroy(struct pipe_cuda_db *db);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PERF_PIPELINE_CUDA_H */
