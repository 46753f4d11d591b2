// SPDX-License-Identifier: MIT
/*
 * perf/bench_run.c: how one configuration of a CPU benchmark is timed, shared by tandem-bench and
 * the OpenMP programs it runs as children (perf/bench_libomp.c), so that a baseline measured in
 * another process is measured by the same code.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static uint64_t fib_serial(uint64_t n)
{
	uint64_t a = 0, b = 1;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t t = a + b;

		a = b;
		b = t;
	}
	return a;
}

static uint64_t expected(enum bench_kind b, uint64_t param)
{
	uint64_t leaves = 1;

	if (b == BENCH_FIB)
		return fib_serial(param);
	for (uint64_t i = 0; i < param; i++)
		leaves *= 10;
	return leaves * (leaves - 1) / 2; /* the leaves are numbered 0..leaves-1 */
}

static void check(const struct bench_impl *im, enum bench_kind b, uint64_t param, uint64_t got)
{
	uint64_t want = expected(b, param);

	if (got == want)
		return;
	fprintf(stderr, "tandem-bench: WRONG RESULT: %s %s(%llu) = %llu, expected %llu\n", im->name,
	        b == BENCH_FIB ? "fib" : "skynet", (unsigned long long)param,
	        (unsigned long long)got, (unsigned long long)want);
	abort();
}

/* Wall milliseconds of one run of fib, skynet or spawn; only the computation is inside. */
static double time_once(const struct bench_impl *im, void *ctx, enum bench_kind b, uint64_t param)
{
	double t0, t1;
	uint64_t got = 0;

	t0 = now_ms(CLOCK_MONOTONIC);
	if (b == BENCH_FIB)
		got = im->fib(ctx, (int)param);
	else if (b == BENCH_SKYNET)
		got = im->skynet(ctx, (int)param);
	else
		im->spawn(ctx, param);
	t1 = now_ms(CLOCK_MONOTONIC);
	if (b != BENCH_SPAWN)
		check(im, b, param, got);
	return t1 - t0;
}

/*
 * Process CPU milliseconds burnt while the main thread sleeps `seconds`. Before the window every
 * thread of the implementation is woken by a small fork-join run and then given 100 ms, so the
 * window sees the steady idle state after activity rather than start-up or the tail of a spin.
 */
static double idle_once(const struct bench_impl *im, void *ctx, uint64_t seconds, double *percent)
{
	double w0, c0, w1, c1;

	check(im, BENCH_FIB, 18, im->fib(ctx, 18));
	sleep_ms(100);
	w0 = now_ms(CLOCK_MONOTONIC);
	c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
	sleep_ms(seconds * 1000);
	c1 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
	w1 = now_ms(CLOCK_MONOTONIC);
	*percent = (c1 - c0) / (w1 - w0) * 100.0;
	return c1 - c0;
}

void bench_measure(const struct bench_impl *im, void *ctx, enum bench_kind b, uint64_t param,
                   int reps, double *ms, double *pct)
{
	if (b == BENCH_IDLE) {
		for (int i = 0; i < reps; i++)
			ms[i] = idle_once(im, ctx, param, &pct[i]);
		return;
	}
	/* Warm-up: thread start-up, first-touch of pools and caches. */
	time_once(im, ctx, b, param);
	for (int i = 0; i < reps; i++) {
		ms[i] = time_once(im, ctx, b, param);
		pct[i] = 0;
	}
}

int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	/* strtoull would accept a sign and leading blanks; a count must be plain digits. */
	if (s[0] < '0' || s[0] > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}
