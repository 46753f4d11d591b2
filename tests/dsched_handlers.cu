// SPDX-License-Identifier: MIT
/*
 * The device scheduler's test handlers as a program writes them (tandem_dsched.cuh): each both a
 * device function and its host twin, in one table (tests/dsched_steps.h has what each does).
 * Only in CUDA builds; test_dsched.c runs it on cuda, and on sim through its host twins.
 */
#include <time.h>

#include "tandem_dsched.cuh"
#include "dsched_steps.h"

TDM_DSCHED_HANDLER(record)
{
	const struct record_args *a = (const struct record_args *)args;
	(void)size;
	a->counts[a->index] += 1;
	/* The counts are pinned host memory: seen at the await with TDM_DSCHED_SCOPE_DEVICE too. */
	tdm_dsched_fence_system();
}

TDM_DSCHED_HANDLER(append)
{
	const struct append_args *a = (const struct append_args *)args;
	(void)size;
	a->log[*a->n] = a->value;
	*a->n += 1;
}

TDM_DSCHED_HANDLER(spin)
{
	const struct spin_args *a = (const struct spin_args *)args;
	(void)size;
#ifdef __CUDA_ARCH__
	const uint64_t t0 = tdm__dsched_clock();
	while (tdm__dsched_clock() - t0 < a->ns) {
	}
#else
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	const uint64_t t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0 >= a->ns)
			break;
	}
#endif
}

TDM_DSCHED_HANDLER(nothing)
{
	(void)args;
	(void)size;
}

TDM_DSCHED_HANDLER(big)
{
	const struct big_args *a = (const struct big_args *)args;
	uint64_t sum = size;
	for (int i = 0; i < BIG_VALS; i++)
		sum += a->vals[i];
	*BIG_OUT(a) = sum;
}

TDM_DSCHED_HANDLER(hold)
{
	const struct hold_args *a = (const struct hold_args *)args;
	(void)size;
#ifdef __CUDA_ARCH__
	*(volatile uint32_t *)a->entered = 1;
	__threadfence_system();
	while (*(volatile uint32_t *)a->release == 0)
		__nanosleep(1000);
#else
	__atomic_store_n(a->entered, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(a->release, __ATOMIC_ACQUIRE) == 0) {
	}
#endif
}

TDM_DSCHED_HANDLER(trap)
{
	(void)args;
	(void)size;
#ifdef __CUDA_ARCH__
	__trap();
#endif
}

TDM_DSCHED_TABLE(test_dsched_steps, record, append, spin, nothing, big, hold, trap);
