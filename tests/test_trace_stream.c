// SPDX-License-Identifier: MIT
/*
 * The trace written as the run goes (base/trace.c): a traced program killed with SIGKILL leaves
 * a file that reads back as the viewers read it (the JSON array, unterminated) with the spans
 * written before the kill; tdm_trace_flush writes what ran, and its errors; a thread that gets
 * too far ahead of the writer drops what comes after, counted in the file and on stderr; task
 * functions named from the program's symbol table, static ones too (this program and the
 * victim are linked without -rdynamic). scripts/trace-check reads the files as a viewer would.
 */
#include "common.h"

#include "base/observe.h" /* tdm__trace_writer_hold */

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

TDM_TEST_SUITE(trace_stream);

extern char **environ;

#define temp_path(out, len) tdm_test_temp_path("tandem-stream", (out), (len))

/* Lines of the file at path that hold both a and b (b NULL: a alone); -1: no file. */
static long count_lines(const char *path, const char *a, const char *b)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	char line[2048];
	long n = 0;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, a) != NULL && (b == NULL || strstr(line, b) != NULL);
	fclose(f);
	return n;
}

/* scripts/trace-check's exit status on path (0: it reads and passes). */
static int trace_check(const char *path)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "python3 %s/scripts/trace-check %s", TANDEM_SOURCE_DIR, path);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void plain_task(void *arg)
{
	(void)arg;
}

/* Static: dladdr cannot name it; the program's .symtab does. */
static void stream_static_task(void *arg)
{
	(void)arg;
}

static void run_tasks(tdm_executor *ex, tdm_fn fn, int n)
{
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	for (int i = 0; i < n; i++)
		cr_assert_eq(tdm_group_spawn(&g, fn, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
}

#define SEEN 100 /* the victim's task spans the file holds before the kill */

Test(trace_stream, killed_program_leaves_a_readable_trace, .timeout = TDM_TEST_TIMEOUT(60))
{
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(setenv("TANDEM_TRACE", path, 1), 0);
	pid_t pid;
	char *argv[] = {TRACE_VICTIM, NULL};
	cr_assert_eq(posix_spawn(&pid, TRACE_VICTIM, NULL, NULL, argv, environ), 0);
	cr_assert_eq(unsetenv("TANDEM_TRACE"), 0);
	/* Until the writer has put SEEN of its task spans in the file, as the victim runs. */
	long seen;
	int status;
	while ((seen = count_lines(path, "\"ph\":\"E\"", "\"name\":\"victim_task\"")) < SEEN) {
		cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the victim still runs");
		tdm_test_sleep_us(1000);
	}
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_eq(fgetc(f), '[', "the array form, never ended by a stop");
	fclose(f);
	cr_assert_geq(count_lines(path, "\"ph\":\"E\"", "\"name\":\"victim_task\""), seen,
	              "what was written before the kill is all there");
	cr_assert_eq(count_lines(path, "victim+0x", NULL), 0, "the static function is named");
	cr_assert_eq(trace_check(path), 0, "it reads back as a viewer reads it");
	unlink(path);
}

Test(trace_stream, flush_writes_what_ran, .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_executor *ex = tdm_test_create(2);
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	tdm__trace_writer_hold(true); /* the flush alone writes */
	run_tasks(ex, plain_task, 50);
	run_tasks(ex, stream_static_task, 5);
	cr_assert_eq(tdm_trace_flush(ex), 0);
	/* Each run's begin was recorded before the group's wait returned. */
	cr_assert_eq(count_lines(path, "\"ph\":\"B\"", "\"name\":\"plain_task\""), 50);
	cr_assert_eq(count_lines(path, "\"ph\":\"B\"", "\"name\":\"stream_static_task\""), 5,
	             "a static function named from the program's symbol table");
	cr_assert_eq(trace_check(path), 0, "the unterminated file reads back");
	tdm__trace_writer_hold(false);
	cr_assert_eq(tdm_trace_stop(ex), 0);
	cr_assert_eq(trace_check(path), 0, "and the finished one");
	cr_assert_eq(count_lines(path, "{\"traceEvents\":[", NULL), 1, "the object form");
	tdm_test_destroy(ex);
	unlink(path);
}

Test(trace_stream, flush_errors, .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_executor *other = tdm_test_create(1);
	cr_assert_eq(tdm_trace_flush(NULL), -EINVAL);
	cr_assert_eq(tdm_trace_flush(ex), -EINVAL, "no trace runs");
	cr_assert_eq(tdm_trace_start(ex, "/dev/full"), -ENOSPC, "the file's error, at the start");
	cr_assert_eq(tdm_trace_flush(ex), -EINVAL, "none started");

	/* A file that may not grow past 4 KiB: the first write is the first line, and what ran
	 * after does not fit. */
	char path[64];
	temp_path(path, sizeof(path));
	struct rlimit was;
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
	struct rlimit small = {4096, was.rlim_max};
	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	cr_assert_eq(tdm_trace_flush(other), -EINVAL, "not its trace");
	run_tasks(ex, plain_task, 200);
	cr_assert_eq(tdm_trace_flush(ex), -EFBIG, "the file's error");
	cr_assert_eq(tdm_trace_stop(ex), -EFBIG, "the stop says it too");
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
	cr_assert_eq(tdm_trace_flush(ex), -EINVAL, "stopped");

	cr_assert_eq(tdm_trace_start(ex, path), 0, "usable again");
	run_tasks(ex, plain_task, 10);
	cr_assert_eq(tdm_trace_flush(ex), 0);
	cr_assert_eq(tdm_trace_stop(ex), 0);
	cr_assert_eq(count_lines(path, "\"ph\":\"B\"", "\"name\":\"plain_task\""), 10);
	tdm_test_destroy(other);
	tdm_test_destroy(ex);
	unlink(path);
}

/* Tiny chunks and a writer that makes no pass: each thread drops what comes after its
 * WAITING_MAX + 1 chunks of 16 events; counted in the file and on stderr, and what is written
 * is well formed. */
Test(trace_stream, drops_are_counted, .timeout = TDM_TEST_TIMEOUT(60))
{
	cr_assert_eq(setenv("TANDEM_TRACE_EVENTS", "16", 1), 0);
	char err[64];
	temp_path(err, sizeof(err));
	cr_assert_not_null(freopen(err, "w", stderr));
	tdm_executor *ex = tdm_test_create(1);
	char path[64];
	temp_path(path, sizeof(path));
	tdm__trace_writer_hold(true);
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	cr_assert_eq(unsetenv("TANDEM_TRACE_EVENTS"), 0);
	run_tasks(ex, plain_task, 500);
	cr_assert_eq(tdm_trace_stop(ex), 0);
	tdm__trace_writer_hold(false);
	fflush(stderr);
	cr_assert_eq(trace_check(path), 0, "a truncated thread is still well formed");
	cr_assert_eq(count_lines(path, "\"dropped\":0,", NULL), 0, "drops counted in the file");
	cr_assert_eq(count_lines(path, "\"otherData\":{", "\"dropped\":"), 1);
	/* 500 runs of 2 events and 500 spawns: at most 9 chunks of 16 written for each of the two
	 * threads that record them (the worker's runs, the caller's spawns: how they share the
	 * lines depends on the schedule), against 1,000 or more lines without drops. */
	cr_assert_leq(count_lines(path, "\"name\":\"plain_task\"", NULL), 2 * 9 * 16);
	cr_assert_gt(count_lines(err, "events dropped", NULL), 0, "drops reported on stderr");
	tdm_test_destroy(ex);
	unlink(path);
	unlink(err);
}
