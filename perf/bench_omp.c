// SPDX-License-Identifier: MIT
/*
 * perf/bench_omp.c: the OpenMP task baselines. Without TANDEM_HAVE_OMP it only says "not built in".
 * Built into tandem-bench with the compiler's runtime (gcc: libgomp), and by clang into
 * tandem-bench-libomp (bench_libomp.c) with LLVM's; TANDEM_OMP_NAME names the runtime.
 *
 * Every computation is one `parallel num_threads(threads)` region whose `single` thread starts the
 * work; the team is created by the warm-up run, so later regions reuse its threads.
 */
#include "bench.h"

#include <stddef.h>

#if defined(TANDEM_HAVE_OMP) && TANDEM_HAVE_OMP

#ifndef _OPENMP
#error "TANDEM_HAVE_OMP is set but the compiler was not given -fopenmp"
#endif

/* The team size travels in the pointer itself: there is nothing else to keep. */
static void *omp_setup(unsigned threads)
{
	return (void *)(uintptr_t)threads;
}

static void omp_teardown(void *ctx)
{
	(void)ctx;
}

static int team(void *ctx)
{
	return (int)(uintptr_t)ctx;
}

static uint64_t fib(int n)
{
	uint64_t x = 0, y;

	if (n < 2)
		return (uint64_t)n;
#pragma omp task shared(x)
	x = fib(n - 1);
	y = fib(n - 2);
#pragma omp taskwait
	return x + y;
}

static uint64_t omp_fib(void *ctx, int n)
{
	uint64_t r = 0;

#pragma omp parallel num_threads(team(ctx))
#pragma omp single
	r = fib(n);
	return r;
}

static uint64_t skynet(uint64_t num, uint64_t size)
{
	uint64_t part[10], step = size / 10, sum = 0;

	if (size == 1)
		return num;
	for (uint64_t i = 0; i < 10; i++) {
#pragma omp task shared(part) firstprivate(i)
		part[i] = skynet(num + i * step, step);
	}
#pragma omp taskwait
	for (int i = 0; i < 10; i++)
		sum += part[i];
	return sum;
}

static uint64_t omp_skynet(void *ctx, int depth)
{
	uint64_t size = 1, r = 0;

	for (int i = 0; i < depth; i++)
		size *= 10;
#pragma omp parallel num_threads(team(ctx))
#pragma omp single
	r = skynet(0, size);
	return r;
}

/*
 * OpenMP has no submission from outside a team: the producer is the `single` thread, which is one
 * of the `threads` team members. The barrier that ends `single` waits for every task.
 */
static void omp_spawn(void *ctx, uint64_t n)
{
#pragma omp parallel num_threads(team(ctx))
#pragma omp single
	for (uint64_t i = 0; i < n; i++) {
		/* gcc drops a task whose body is empty; the asm keeps each one a real task. */
#pragma omp task
		__asm__ volatile("" ::: "memory");
	}
}

#ifndef TANDEM_OMP_NAME
#define TANDEM_OMP_NAME "omp"
#endif

static const struct bench_impl impl = {
    TANDEM_OMP_NAME, omp_setup, omp_teardown, omp_fib, omp_skynet, omp_spawn, NULL,
};

const struct bench_impl *bench_omp(void)
{
	return &impl;
}

#else

const struct bench_impl *bench_omp(void)
{
	return NULL;
}

#endif
