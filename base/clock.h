// SPDX-License-Identifier: MIT
/*
 * The one clock: CLOCK_MONOTONIC in nanoseconds (tdm_now_ns, deadlines, the poller's timing and
 * the simulator's kernels all read it), and a sleep on it.
 */
#ifndef TDM_BASE_CLOCK_H
#define TDM_BASE_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t tdm__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps ns nanoseconds, through signals. */
static inline void tdm__sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
	                      .tv_nsec = (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

#endif /* TDM_BASE_CLOCK_H */
