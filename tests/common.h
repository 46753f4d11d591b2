// SPDX-License-Identifier: MIT
/*
 * Helpers shared by the tandem tests: stress sizes that shrink under the sanitizers (and under
 * valgrind), executor set-up and tear-down that assert success, sleeping, and summed worker
 * statistics. Every helper that asserts must be called from the test's own thread, never from a
 * task: Criterion's assertions are not safe on other threads, so tasks record what they saw in
 * atomics and the test thread asserts on those.
 */
#ifndef TDM_TESTS_COMMON_H
#define TDM_TESTS_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>

#include "tandem.h"
#include "tandem_sim.h" /* the test hooks: tandem_testing */

#if defined(__SANITIZE_THREAD__)
#define TDM_TEST_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TDM_TEST_ASAN 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(TDM_TEST_TSAN)
#define TDM_TEST_TSAN 1
#endif
#if __has_feature(address_sanitizer) && !defined(TDM_TEST_ASAN)
#define TDM_TEST_ASAN 1
#endif
#endif
#if defined(TDM_TEST_TSAN) || defined(TDM_TEST_ASAN)
#define TDM_TEST_SANITIZED 1
#else
#define TDM_TEST_SANITIZED 0
#endif

/* A per-test Criterion timeout, which only a hang should reach (tests wait on conditions, never
 * on a clock): `s` seconds as the test runs on an idle machine, times 3 for a loaded one (a build
 * beside it on 2 cores: scripts/test-under-load.sh), and times 15 where every memory access is
 * instrumented as well. CMakeLists.txt's TANDEM_TEST_TIMEOUT bounds each program as a whole. */
#define TDM_TEST_TIMEOUT(s) ((s) * (TDM_TEST_SANITIZED ? 15 : 3))

/* Each test program starts with tandem's own switches unset, whatever the shell exports: a test
 * that wants one sets it itself. (CUDA_VISIBLE_DEVICES stays: it picks the machine's GPUs; so
 * does TANDEM_TOPO_PRINT, which only prints.) */
__attribute__((constructor)) static void tdm_test_clear_switches(void)
{
	static const char *const vars[] = {"TANDEM_GPU", "TANDEM_COMPLETION", "TANDEM_NVML"};
	for (unsigned i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

/*
 * TANDEM_TEST_NO_CUDA: defined (CMakeLists.txt) for the test programs of a build without CUDA.
 * The suites that run on the cuda backend are left out there: they could only skip.
 */

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TDM_TEST_UNDER_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef TDM_TEST_UNDER_VALGRIND
#define TDM_TEST_UNDER_VALGRIND() 0
#endif

/*
 * Criterion under AddressSanitizer. This header is included by exactly one translation unit per
 * test program (each tests/test_*.c is a program), so the definition below is made once.
 */
#if defined(TDM_TEST_ASAN)
#include <sanitizer/lsan_interface.h>
#include <stdlib.h>
/*
 * Leaks are checked per test, in the test's own process, right after the test (the suite's
 * fini, see TDM_TEST_SUITE): LeakSanitizer's check at exit would only print in a test process
 * (Criterion has already recorded the result) and, in Criterion's parent process, reports
 * Criterion's own allocations when tests run in parallel, which fails every program.
 */
const char *__lsan_default_options(void)
{
	return "leak_check_at_exit=0";
}

static inline void tdm_test_check_leaks(void)
{
	if (__lsan_do_recoverable_leak_check() != 0) {
		cr_log_error("memory leaked: see the LeakSanitizer report above");
		abort(); /* a failed assertion in fini does not fail the test; a crash does */
	}
}
#define TDM_TEST_SUITE(name) TestSuite(name, .fini = tdm_test_check_leaks)
#else
#define TDM_TEST_SUITE(name) TestSuite(name)
#endif

/*
 * A stress size: `full` in a plain build, `small` where every memory access is instrumented
 * (ThreadSanitizer is about ten times slower, ASan two to three, valgrind more).
 */
static inline size_t tdm_test_size(size_t full, size_t small)
{
	return (TDM_TEST_SANITIZED || TDM_TEST_UNDER_VALGRIND()) ? small : full;
}

static inline void tdm_test_sleep_us(unsigned long us)
{
	struct timespec ts = {.tv_sec = (time_t)(us / 1000000UL),
	                      .tv_nsec = (long)(us % 1000000UL) * 1000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* CPUs this process may run on, as tdm_config.workers = 0 counts them. */
static inline int tdm_test_affinity_cpus(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0, "sched_getaffinity failed");
	return CPU_COUNT(&set);
}

static inline tdm_executor *tdm_test_create_cfg(const tdm_config *cfg)
{
	tdm_executor *ex = NULL;
	int rc = tdm_executor_create(&ex, cfg);
	cr_assert_eq(rc, 0, "tdm_executor_create: %d (%s)", rc, tdm_strerror(rc));
	cr_assert_not_null(ex, "tdm_executor_create returned 0 but no executor");
	return ex;
}

static inline tdm_executor *tdm_test_create(unsigned workers)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = workers;
	return tdm_test_create_cfg(&cfg);
}

static inline void tdm_test_destroy(tdm_executor *ex)
{
	int rc = tdm_executor_destroy(ex);
	cr_assert_eq(rc, 0, "tdm_executor_destroy: %d (%s)", rc, tdm_strerror(rc));
}

/* Spawns fn(arg) as a resumable task on ex and waits for it from this (outside) thread. */
static inline void tdm_test_run_one(tdm_executor *ex, tdm_resume_fn fn, void *arg)
{
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_spawn(ex, fn, arg, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
}

struct tdm_test_await {
	tdm_stream *s;
	int rc, result;
};

static inline int tdm_test_await_task(tdm_task *t, void *arg)
{
	struct tdm_test_await *a = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, a->rc = tdm_await_stream(t, a->s));
	a->result = tdm_task_result(t);
	TDM_END(t);
}

/* What an await on s, by a task of ex, resumed with (or its error at once). */
static inline int tdm_test_await_stream(tdm_executor *ex, tdm_stream *s)
{
	struct tdm_test_await a = {.s = s, .rc = 1, .result = 1};
	tdm_test_run_one(ex, tdm_test_await_task, &a);
	return a.rc == TDM_SUSPENDED ? a.result : a.rc;
}

/* Every worker's counters added up. */
/* A new empty file /tmp/PREFIX-XXXXXX, its path in out (len >= strlen(prefix) + 13). */
static inline void tdm_test_temp_path(const char *prefix, char *out, size_t len)
{
	snprintf(out, len, "/tmp/%s-XXXXXX", prefix);
	int fd = mkstemp(out);
	cr_assert_geq(fd, 0, "mkstemp %s", out);
	close(fd);
}

static inline tdm_worker_stats tdm_test_stats_total(const tdm_executor *ex)
{
	tdm_worker_stats total = {0};
	int n = tdm_executor_workers(ex);
	cr_assert_gt(n, 0, "tdm_executor_workers: %d", n);
	for (unsigned w = 0; w < (unsigned)n; w++) {
		tdm_worker_stats s;
		int rc = tdm_executor_stats(ex, w, &s);
		cr_assert_eq(rc, 0, "tdm_executor_stats(%u): %d (%s)", w, rc, tdm_strerror(rc));
		total.tasks_run += s.tasks_run;
		total.tasks_cancelled += s.tasks_cancelled;
		total.steals_tried += s.steals_tried;
		total.steals_won += s.steals_won;
		total.injected += s.injected;
		total.inbox += s.inbox;
		total.parks += s.parks;
		total.parks_last += s.parks_last;
		total.wakeups += s.wakeups;
	}
	return total;
}

/*
 * Waits until *counter reaches target. There is no deadline here on purpose: a count that never
 * arrives is a hang, and the test's .timeout turns it into a failure.
 */
static inline void tdm_test_wait_count(atomic_size_t *counter, size_t target)
{
	while (atomic_load_explicit(counter, memory_order_acquire) < target)
		tdm_test_sleep_us(200);
}

/* Waits until `cond` holds, looking again every 100 us; as tdm_test_wait_count, with no deadline:
 * a condition that never comes is a hang, which the test's .timeout fails. */
#define TDM_TEST_WAIT_UNTIL(cond)                                                                  \
	do {                                                                                       \
		while (!(cond))                                                                    \
			tdm_test_sleep_us(100);                                                    \
	} while (0)

/* Small deterministic generator for varied delays and burst sizes (xorshift64). */
static inline uint64_t tdm_test_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return x;
}

/* A little work that the compiler cannot remove; keeps a task busy for roughly n steps. */
static inline void tdm_test_spin(unsigned n)
{
	volatile unsigned sink = 0;
	for (unsigned i = 0; i < n; i++)
		sink += i;
	(void)sink;
}

/* The task every "executor is still usable" check submits. */
static inline void tdm_test_set_flag(void *arg)
{
	atomic_store_explicit((atomic_int *)arg, 1, memory_order_release);
}

/* Asserts that ex still runs a task to completion, through a group waited on here. */
static inline void tdm_test_assert_usable(tdm_executor *ex)
{
	atomic_int ran = 0;
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0, "tdm_group_init failed on a usable executor");
	cr_assert_eq(tdm_group_spawn(&g, tdm_test_set_flag, &ran), 0, "tdm_group_spawn failed");
	cr_assert_eq(tdm_group_wait(&g), 0, "tdm_group_wait failed");
	cr_assert_eq(atomic_load(&ran), 1, "the task did not run before tdm_group_wait returned");
}

/*
 * What a task saw, for the test thread to assert (Criterion's assertions are not safe on worker
 * threads): SEE records the first failing call's result and line in any struct with `int rc,
 * line` members, SEE_TRUE a condition that must hold (-EPROTO when it did not), and ASSERT_SEEN
 * asserts, on the test thread once the wait for the task returned, that nothing failed.
 */
#define SEE(sn, call)                                                                              \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_ != 0 && (sn)->rc == 0) {                                                   \
			(sn)->rc = rc_;                                                            \
			(sn)->line = __LINE__;                                                     \
		}                                                                                  \
	} while (0)
#define SEE_TRUE(sn, cond) SEE(sn, (cond) ? 0 : -EPROTO)
#define ASSERT_SEEN(sn)                                                                            \
	cr_assert_eq((sn)->rc, 0, "a task's call at line %d returned %d (%s)", (sn)->line,         \
	             (sn)->rc, tdm_strerror((sn)->rc))

#endif /* TDM_TESTS_COMMON_H */
