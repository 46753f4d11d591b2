// SPDX-License-Identifier: MIT
/*
 * Specification of argument checking and of the defaults: each bad argument gets the error the
 * header documents, and a call that fails has no effect, so the executor it was given still runs
 * tasks afterwards. tdm_strerror() has a message for every code.
 */
#include "common.h"

#include <limits.h>
#include <string.h>

TDM_TEST_SUITE(errors);

/* ---- tdm_config_init and tdm_executor_create --------------------------------------------- */

Test(errors, config_init_fills_the_documented_defaults)
{
	tdm_config cfg;
	memset(&cfg, 0xA5, sizeof cfg);
	tdm_config_init(&cfg);
	cr_assert_eq(cfg.workers, 0);
	cr_assert_eq(cfg.pin_workers, 0);
	cr_assert_null(cfg.thread_name_prefix);
	cr_assert_eq(cfg.max_searching, 0);
	cr_assert_eq(cfg.shutdown, TDM_SHUTDOWN_DRAIN);
	cr_assert_null((void *)(uintptr_t)cfg.on_cancel);
	cr_assert_null(cfg.on_cancel_user);
}

Test(errors, config_init_with_null_does_nothing, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_config_init(NULL); /* documented to do nothing: it must not write through NULL */
	tdm_executor *ex = tdm_test_create(1);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, zero_workers_means_one_per_cpu_of_the_affinity_mask, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	cr_assert_eq(tdm_executor_workers(ex), tdm_test_affinity_cpus());
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, create_with_null_config_uses_the_defaults, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create_cfg(NULL);
	cr_assert_eq(tdm_executor_workers(ex), tdm_test_affinity_cpus());
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, create_with_null_out_returns_einval)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 1;
	cr_assert_eq(tdm_executor_create(NULL, &cfg), -EINVAL);
	cr_assert_eq(tdm_executor_create(NULL, NULL), -EINVAL);
}

static void assert_create_fails(const tdm_config *cfg, int expected)
{
	tdm_executor *ex = NULL;
	int rc = tdm_executor_create(&ex, cfg);
	cr_assert_eq(rc, expected, "create returned %d (%s), expected %d", rc, tdm_strerror(rc),
	             expected);
	cr_assert_null(ex, "a failed create handed out an executor");
}

Test(errors, create_with_more_than_max_workers_returns_einval)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = TDM_MAX_WORKERS + 1;
	assert_create_fails(&cfg, -EINVAL);
	cfg.workers = UINT_MAX;
	assert_create_fails(&cfg, -EINVAL);
}

Test(errors, create_with_max_searching_above_workers_returns_einval)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 2;
	cfg.max_searching = 3;
	assert_create_fails(&cfg, -EINVAL);
}

Test(errors, create_accepts_max_searching_equal_to_workers, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 2;
	cfg.max_searching = 2;
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, create_with_unknown_shutdown_mode_returns_einval)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 1;
	cfg.shutdown = (tdm_shutdown_mode)7;
	assert_create_fails(&cfg, -EINVAL);
	cfg.shutdown = (tdm_shutdown_mode)2;
	assert_create_fails(&cfg, -EINVAL);
}

/* ---- calls on a live executor ------------------------------------------------------------ */

static void noop(void *arg)
{
	(void)arg;
}

Test(errors, submit_with_null_executor_returns_einval)
{
	cr_assert_eq(tdm_submit(NULL, noop, NULL), -EINVAL);
}

Test(errors, submit_with_null_function_returns_einval_and_executor_stays_usable,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	cr_assert_eq(tdm_submit(ex, NULL, NULL), -EINVAL);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, group_init_with_null_group_or_executor_returns_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_group g;
	cr_assert_eq(tdm_group_init(NULL, ex), -EINVAL);
	cr_assert_eq(tdm_group_init(&g, NULL), -EINVAL);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, group_spawn_on_an_uninitialised_group_returns_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_group g;
	memset(&g, 0, sizeof g);
	atomic_int ran = 0;
	cr_assert_eq(tdm_group_spawn(&g, tdm_test_set_flag, &ran), -EINVAL);
	cr_assert_eq(tdm_group_spawn(NULL, tdm_test_set_flag, &ran), -EINVAL);
	tdm_test_assert_usable(ex);
	cr_assert_eq(atomic_load(&ran), 0, "a refused spawn ran its task anyway");
	tdm_test_destroy(ex);
}

Test(errors, group_spawn_with_null_function_returns_einval_and_counts_nothing,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, NULL, NULL), -EINVAL);
	/* Had the refused spawn been counted, this wait would never return. */
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, group_wait_on_null_or_uninitialised_group_returns_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_group g;
	memset(&g, 0, sizeof g);
	cr_assert_eq(tdm_group_wait(NULL), -EINVAL);
	cr_assert_eq(tdm_group_wait(&g), -EINVAL);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, stats_with_bad_arguments_returns_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_worker_stats st;
	cr_assert_eq(tdm_executor_stats(ex, 2, &st), -EINVAL);
	cr_assert_eq(tdm_executor_stats(ex, UINT_MAX, &st), -EINVAL);
	cr_assert_eq(tdm_executor_stats(ex, 0, NULL), -EINVAL);
	cr_assert_eq(tdm_executor_stats(NULL, 0, &st), -EINVAL);
	cr_assert_eq(tdm_executor_stats(ex, 1, &st), 0, "the last worker's stats are in range");
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(errors, destroy_with_null_executor_returns_einval)
{
	cr_assert_eq(tdm_executor_destroy(NULL), -EINVAL);
}

Test(errors, workers_with_null_executor_returns_einval)
{
	cr_assert_eq(tdm_executor_workers(NULL), -EINVAL);
}

Test(errors, workers_returns_the_configured_count, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(3);
	cr_assert_eq(tdm_executor_workers(ex), 3);
	tdm_test_destroy(ex);
}

/* ---- tdm_strerror ------------------------------------------------------------------------ */

Test(errors, strerror_gives_a_distinct_message_for_each_code)
{
	const int codes[] = {0, -EINVAL, -ENOMEM, -ESHUTDOWN, -ECANCELED, -EDEADLK, -EAGAIN};
	const size_t n = sizeof codes / sizeof codes[0];
	for (size_t i = 0; i < n; i++) {
		const char *m = tdm_strerror(codes[i]);
		cr_assert_not_null(m, "no message for %d", codes[i]);
		cr_assert_gt(strlen(m), 0, "empty message for %d", codes[i]);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(m, tdm_strerror(codes[j]), "%d and %d share \"%s\"",
			                  codes[i], codes[j], m);
	}
}

/* Every code any public call documents (tandem.h, tandem_gpu.h, tandem_graph.h, tandem_dsched.h,
 * tandem_mpi.h; fopen's codes that tdm_trace_stop hands on) has a message of its own, not the one
 * for codes tandem never returns. */
Test(errors, strerror_names_every_documented_code)
{
	const int codes[] = {0,          -EINVAL,   -ENOMEM,          -EAGAIN,   -ESHUTDOWN,
	                     -ECANCELED, -EDEADLK,  -EBUSY,           -ENODEV,   -EIO,
	                     -ENOTSUP,   -EEXIST,   -EFAULT,          -EALREADY, -EMSGSIZE,
	                     -ENOSPC,    -ENOTCONN, -EPROTONOSUPPORT, -ENOENT,   -EACCES};
	const size_t n = sizeof codes / sizeof codes[0];
	const char *unknown = tdm_strerror(-12345);
	cr_assert_not_null(unknown);
	for (size_t i = 0; i < n; i++) {
		const char *m = tdm_strerror(codes[i]);
		cr_assert_not_null(m, "no message for %d", codes[i]);
		cr_assert_str_neq(m, unknown, "%d has only the message of an unknown code",
		                  codes[i]);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(m, tdm_strerror(codes[j]), "%d and %d share \"%s\"",
			                  codes[i], codes[j], m);
	}
}

Test(errors, strerror_never_returns_null)
{
	const int codes[] = {-12345, 12345, 1, -1, INT_MIN, INT_MAX};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		cr_assert_not_null(tdm_strerror(codes[i]), "NULL for %d", codes[i]);
}

Test(errors, malformed_or_foreign_cpu_lists_are_refused)
{
	static const char *bad[] = {"",     "x",  "3-1", "1,,2", "-1", "0-",   "99999", "0\nbogus",
	                            "0\n1", " 0", "\t0", "+0",   "-0", "0- 0", "0-+0"};
	tdm_config cfg;
	tdm_executor *ex = NULL;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tdm_config_init(&cfg);
		cfg.cpus = bad[i];
		cr_assert_eq(tdm_executor_create(&ex, &cfg), -EINVAL, "cpus \"%s\"", bad[i]);
	}
	/* A CPU outside the affinity mask: the highest the kernel could name. */
	tdm_config_init(&cfg);
	cfg.cpus = "1023";
	cpu_set_t set;
	CPU_ZERO(&set);
	sched_getaffinity(0, sizeof set, &set);
	if (!CPU_ISSET(1023, &set))
		cr_assert_eq(tdm_executor_create(&ex, &cfg), -EINVAL);
}
