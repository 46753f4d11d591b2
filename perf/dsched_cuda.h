// SPDX-License-Identifier: MIT
/*
 * perf/dsched_cuda.h: the CUDA side of `tandem-bench gpu-dsched` (dsched_cuda.cu, compiled by
 * nvcc only in CUDA builds, TANDEM_HAVE_CUDA), as C entry points for bench_gpu_dsched.c:
 *
 *   bench_dsched_steps         the benchmark's handler table (tandem_dsched.cuh): handler 0
 *                              spins for its argument's nanoseconds (%globaltimer; its host twin
 *                              on the clock), as tdm_launch_spin's kernel does.
 *   dsched_floor_pingpong      the round-trip floor: a persistent 1-thread kernel polling a
 *                              word of pinned memory that the host stores a sequence number
 *                              into, storing an acknowledgement the host spins on (the H200's
 *                              figure: ../shared/docs/gpu-facts.md). reps round trips after
 *                              1000 untimed; p50, p99 and min of the rest.
 *   dsched_floor_ring          the rate floor: a persistent kernel of `warps` warps taking items
 *                              from a ring of pinned memory (a claim counter in device memory,
 *                              a sequence word per slot), spinning ns each, writing a completion
 *                              word per item; `threads` host threads each push and reap their
 *                              share of `items` (thread k: items k, k + threads, ...), spinning.
 *                              Items per second from the first push to the last reap.
 *   dsched_work_ms             a compute-bound kernel: a fixed amount of arithmetic over many
 *                              blocks (waves over every SM), timed on the device; its time
 *                              grows as SMs are taken from it. Median of `reps`.
 *   dsched_probe               one CUDA call that may wait for every kernel of the device,
 *                              timed (cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost, ...).
 *
 * Device 0, the runtime's primary context (the one tandem's cuda backend uses). Each returns 0 or
 * a negative errno (-ENODEV: no device; -ENOMEM; -EIO: another CUDA error; -ENOENT: an unknown
 * probe) and leaves a message for dsched_cuda_error() on failure. Nothing here asserts a timing.
 */
#ifndef TANDEM_PERF_DSCHED_CUDA_H
#define TANDEM_PERF_DSCHED_CUDA_H

#include <stdint.h>

#include "tandem_dsched.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const tdm_dsched_handlers bench_dsched_steps;

struct dsched_floor_rtt {
	uint64_t n;
	double p50_us, p99_us, min_us;
};

int dsched_floor_pingpong(uint64_t reps, struct dsched_floor_rtt *out);
int dsched_floor_ring(unsigned warps, unsigned threads, uint32_t ns, uint64_t items, double *per_s);
int dsched_work_ms(unsigned reps, double *median_ms);
/* The probes' names, NULL-terminated, in the order `--parts beside` runs them. */
extern const char *const dsched_probes[];
int dsched_probe(const char *name, double *us);
const char *dsched_cuda_error(void);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PERF_DSCHED_CUDA_H */
