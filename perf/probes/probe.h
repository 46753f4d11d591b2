/*
 * perf/probes/probe.h: what the plain-CUDA probes share (they are built by hand with nvcc, not
 * by CMake; see each probe's header): a check that stops at the first failed CUDA call, and the
 * clock tandem's figures use (CLOCK_MONOTONIC, as tdm_now_ns).
 */
#ifndef TDM_PROBE_H
#define TDM_PROBE_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static inline uint64_t now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* TDM_PROBE_H */
