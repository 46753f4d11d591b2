// SPDX-License-Identifier: MIT
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

#ifdef __cplusplus
#include <vector>

/* Items 1..n one at a time: put(i) writes item i, then the host spins until *ack reaches i and
 * waits delay_ns more (0: none) before the next. The round trips after the first `warm` go
 * into v (put to the answer seen, without the delay). */
template <class Put>
static void ping_pong(Put put, const volatile uint64_t *ack, unsigned n, unsigned warm,
                      uint64_t delay_ns, std::vector<uint64_t> &v)
{
	for (unsigned i = 1; i <= n; i++) {
		const uint64_t t0 = now_ns();
		put(i);
		while (__atomic_load_n(ack, __ATOMIC_ACQUIRE) < i) {
		}
		const uint64_t t1 = now_ns();
		if (i > warm)
			v.push_back(t1 - t0);
		while (now_ns() - t1 < delay_ns) {
		}
	}
}
#endif

#endif /* TDM_PROBE_H */
