// SPDX-License-Identifier: MIT
/*
 * What tandem says on stderr, and tdm_error_detail: a refused TANDEM_GPU and config field name
 * the variable or field and its value, once per cause; the default backend without a GPU says
 * -ENODEV with the TANDEM_GPU=sim hint; tdm_gpu_destroy waiting on a lease held (or a device
 * scheduler alive) names the device, the stream and the task, and keeps waiting until it is
 * released. stderr goes into a pipe for the test to read: a refusal's line is there when the
 * call returns; the destroy's is read as it comes, with no timer deciding anything.
 */
#include "gpu_env.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tandem_dsched.h"

TDM_TEST_SUITE(messages);

/* stderr into a pipe, from begin to end; what was written is read back with read_line/all. */
struct capture {
	int saved; /* the real stderr */
	int rd;    /* the pipe's read end */
	char buf[16384];
	size_t len;
};

static void capture_begin(struct capture *c)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	fflush(stderr);
	c->saved = dup(STDERR_FILENO);
	cr_assert_geq(c->saved, 0);
	cr_assert_geq(dup2(p[1], STDERR_FILENO), 0);
	close(p[1]);
	c->rd = p[0];
	c->len = 0;
	c->buf[0] = '\0';
}

/* Back to the real stderr: the pipe's last write end closes, so reads meet its end. */
static void capture_end(struct capture *c)
{
	fflush(stderr);
	cr_assert_geq(dup2(c->saved, STDERR_FILENO), 0);
	close(c->saved);
}

/* Reads until `needle` is in what came so far (blocking: waits for the writer), or the pipe
 * ends; whether it came. */
static bool read_until(struct capture *c, const char *needle)
{
	while (strstr(c->buf, needle) == NULL) {
		if (c->len + 1 >= sizeof(c->buf))
			return false;
		ssize_t n = read(c->rd, c->buf + c->len, sizeof(c->buf) - 1 - c->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		c->len += (size_t)n;
		c->buf[c->len] = '\0';
	}
	return true;
}

/* Everything written between begin and end (after capture_end). */
static const char *read_all(struct capture *c)
{
	(void)read_until(c, "\1never\1");
	close(c->rd);
	return c->buf;
}

static unsigned count_of(const char *hay, const char *needle)
{
	unsigned n = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* The one line of `out` that starts "tandem: " and holds `needle`, without its prefix and end. */
static void line_of(const char *out, const char *needle, char *line, size_t len)
{
	const char *at = strstr(out, needle);
	cr_assert_not_null(at, "no line with \"%s\" in:\n%s", needle, out);
	const char *start = at;
	while (start > out && start[-1] != '\n')
		start--;
	cr_assert_eq(strncmp(start, "tandem: ", 8), 0, "a line of its own: %s", out);
	start += 8;
	const char *end = strchr(start, '\n');
	cr_assert_not_null(end, "the line ends: %s", out);
	snprintf(line, len, "%.*s", (int)(end - start), start);
}

static void *detail_elsewhere(void *arg)
{
	*(bool *)arg = tdm_error_detail()[0] == '\0';
	return NULL;
}

Test(messages, bad_tandem_gpu_names_the_variable_and_its_values_once)
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_gpu *gpu = NULL;
	cr_assert_str_eq(tdm_error_detail(), "", "nothing refused yet");
	cr_assert_eq(setenv("TANDEM_GPU", "bogus", 1), 0);
	struct capture c;
	capture_begin(&c);
	int first = tdm_gpu_create(&gpu, ex, NULL);
	char detail[512];
	snprintf(detail, sizeof(detail), "%s", tdm_error_detail());
	/* The same cause, by the same call or another: no second line, the detail all the same. */
	int again = tdm_gpu_create(&gpu, ex, NULL);
	int prepared = tdm_gpu_prepare(NULL, 1);
	char prepare_detail[512];
	snprintf(prepare_detail, sizeof(prepare_detail), "%s", tdm_error_detail());
	int last = tdm_gpu_create(&gpu, ex, NULL);
	capture_end(&c);
	const char *out = read_all(&c);
	cr_assert_eq(first, -EINVAL);
	cr_assert_eq(again, -EINVAL);
	cr_assert_eq(prepared, -EINVAL);
	cr_assert_eq(last, -EINVAL);
	cr_assert_str_eq(prepare_detail, "TANDEM_GPU=bogus: not one of cuda, sim, none "
	                                 "(tdm_gpu_prepare returns -EINVAL)");
	const char *want = "TANDEM_GPU=bogus: not one of cuda, sim, none "
	                   "(tdm_gpu_create returns -EINVAL)";
	cr_assert_str_eq(detail, want);
	cr_assert_str_eq(tdm_error_detail(), want, "the second refusal sets it again");
	char line[512];
	line_of(out, "TANDEM_GPU=bogus", line, sizeof(line));
	cr_assert_str_eq(line, want, "stderr says what the detail says");
	cr_assert_eq(count_of(out, "TANDEM_GPU=bogus"), 1, "once per cause:\n%s", out);
	bool empty_there = false;
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, detail_elsewhere, &empty_there), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert(empty_there, "the detail is the calling thread's own");
	/* The runtime is usable, and a call that succeeds begins with an empty detail. */
	cr_assert_eq(setenv("TANDEM_GPU", "sim", 1), 0);
	cr_assert_eq(tdm_gpu_create(&gpu, ex, NULL), 0);
	cr_assert_str_eq(tdm_error_detail(), "");
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	cr_assert_eq(unsetenv("TANDEM_GPU"), 0);
	tdm_test_destroy(ex);
}

Test(messages, config_fields_and_other_variables_are_named_with_their_values)
{
	tdm_executor *ex;
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 5000;
	struct capture c;
	capture_begin(&c);
	cr_assert_eq(tdm_executor_create(&ex, &cfg), -EINVAL);
	cr_assert_str_eq(tdm_error_detail(),
	                 "tdm_config.workers=5000: above TDM_MAX_WORKERS (1024) "
	                 "(tdm_executor_create returns -EINVAL)");
	tdm_config_init(&cfg);
	cfg.cpus = "0-";
	cr_assert_eq(tdm_executor_create(&ex, &cfg), -EINVAL);
	cr_assert_not_null(strstr(tdm_error_detail(), "tdm_config.cpus=\"0-\": not a CPU list"));
	ex = tdm_test_create(1);
	tdm_gpu *gpu;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = 5000;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	cr_assert_str_eq(tdm_error_detail(), "tdm_gpu_config.streams_per_device=5000: above 1024 "
	                                     "(tdm_gpu_create returns -EINVAL)");
	g.streams_per_device = 0;
	g.sim_devices = 2000;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	cr_assert_str_eq(tdm_error_detail(), "tdm_gpu_config.sim_devices=2000: above 1024 "
	                                     "(tdm_gpu_create returns -EINVAL)");
	g.sim_devices = 0;
	cr_assert_eq(setenv("TANDEM_COMPLETION", "words", 1), 0);
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	cr_assert_str_eq(tdm_error_detail(), "TANDEM_COMPLETION=words: not one of word, event, "
	                                     "adaptive (tdm_gpu_create returns -EINVAL)");
	cr_assert_eq(unsetenv("TANDEM_COMPLETION"), 0);
	cr_assert_eq(setenv("TANDEM_TRACE_EVENTS", "lots", 1), 0);
	cr_assert_eq(tdm_trace_start(ex, "/dev/null"), -EINVAL);
	cr_assert_str_eq(tdm_error_detail(), "TANDEM_TRACE_EVENTS=lots: not a number from 1 to "
	                                     "67108864 (tdm_trace_start returns -EINVAL)");
	cr_assert_eq(unsetenv("TANDEM_TRACE_EVENTS"), 0);
	/* A NULL argument is not a configuration: -EINVAL with the detail cleared. */
	cr_assert_eq(tdm_gpu_create(NULL, ex, NULL), -EINVAL);
	cr_assert_str_eq(tdm_error_detail(), "");
	capture_end(&c);
	const char *out = read_all(&c);
	static const char *const said[] = {"tdm_config.workers=5000",
	                                   "tdm_config.cpus=\"0-\"",
	                                   "tdm_gpu_config.streams_per_device=5000",
	                                   "tdm_gpu_config.sim_devices=2000",
	                                   "TANDEM_COMPLETION=words",
	                                   "TANDEM_TRACE_EVENTS=lots"};
	for (unsigned i = 0; i < sizeof(said) / sizeof(said[0]); i++)
		cr_assert_eq(count_of(out, said[i]), 1, "one line for %s:\n%s", said[i], out);
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(messages, no_gpu_for_the_default_backend_hints_at_the_simulator)
{
	/* No device for CUDA even on a machine with one: CUDA reads this as it starts, and
	 * nothing started it in this test's process. Without CUDA built in, the default backend
	 * has no device anyway. */
	cr_assert_eq(setenv("CUDA_VISIBLE_DEVICES", "-1", 1), 0);
	tdm_executor *ex = tdm_test_create(1);
	tdm_gpu *gpu = NULL;
	struct capture c;
	capture_begin(&c);
	int rc = tdm_gpu_create(&gpu, ex, NULL);
	capture_end(&c);
	const char *out = read_all(&c);
	cr_assert_eq(rc, -ENODEV, "%s", tdm_strerror(rc));
	char line[512];
	line_of(out, "no GPU", line, sizeof(line));
	cr_assert_str_eq(line, tdm_error_detail());
	cr_assert_eq(strncmp(line, "no GPU for the default backend, cuda (", 38), 0, "%s", line);
	cr_assert_not_null(strstr(line, "); TANDEM_GPU=sim runs tandem's GPU simulator instead "
	                                "(tdm_gpu_create returns -ENODEV)"),
	                   "%s", line);
	/* What it says works. */
	cr_assert_eq(setenv("TANDEM_GPU", "sim", 1), 0);
	cr_assert_eq(tdm_gpu_create(&gpu, ex, NULL), 0);
	cr_assert_str_eq(tdm_gpu_backend_name(gpu), "sim");
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	cr_assert_eq(unsetenv("TANDEM_GPU"), 0);
	tdm_test_destroy(ex);
}

/* A task that leases a stream and ends without giving it back (a leak); the test releases it. */
struct holder {
	tdm_gpu *gpu;
	tdm_stream *s;
	int rc;
};

static int holder_task(tdm_task *t, void *arg)
{
	struct holder *h = arg;
	(void)t;
	h->rc = tdm_stream_lease(h->gpu, 1, TDM_STREAM_EXCLUSIVE, &h->s);
	return 0;
}

struct destroyer {
	tdm_gpu *gpu;
	int rc;
	atomic_bool done;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	d->rc = tdm_gpu_destroy(d->gpu);
	atomic_store(&d->done, true);
	return NULL;
}

Test(messages, destroy_names_the_lease_it_waits_for, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	env_open_sim2(&e, 2);
	cr_assert_eq(tdm_resumable_name(holder_task, "leaky holder"), 0);
	struct holder h = {.gpu = e.gpu, .rc = 1};
	tdm_test_run_one(e.ex, holder_task, &h);
	cr_assert_eq(h.rc, 0);
	struct capture c;
	capture_begin(&c);
	struct destroyer d = {.gpu = e.gpu};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, destroy_thread, &d), 0);
	/* The line comes after a second of waiting; until it does, destroy must not return. */
	bool said = read_until(&c, "taken by task leaky holder\n");
	bool done_before = atomic_load(&d.done);
	cr_assert_eq(tdm_stream_release(h.s), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	capture_end(&c);
	const char *out = read_all(&c);
	cr_assert(said, "the destroy named the lease:\n%s", out);
	cr_assert_not(done_before, "the destroy waited for the lease");
	cr_assert_eq(d.rc, 0);
	char line[512];
	line_of(out, "leaky holder", line, sizeof(line));
	cr_assert_eq(strncmp(line, "tdm_gpu_destroy waits for a stream lease not released (", 55),
	             0, "%s", line);
	cr_assert_not_null(strstr(line, " s so far): device 1, stream normal "), "%s", line);
	cr_assert_not_null(strstr(line, ", exclusive, taken by task leaky holder"), "%s", line);
	cr_assert_not_null(strstr(out, "tdm_gpu_destroy keeps waiting until each is released"),
	                   "%s", out);
	tdm_test_destroy(e.ex);
}

static void h_nothing(void *args, unsigned size)
{
	(void)args;
	(void)size;
}

TDM_DSCHED_HOST_TABLE(nothing_table, h_nothing);

Test(messages, destroy_names_the_device_scheduler_it_waits_for, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	env_open_sim2(&e, 2);
	tdm_dsched_config dc;
	tdm_dsched_config_init(&dc);
	dc.handlers = &nothing_table;
	dc.warps = 1;
	tdm_dsched *ds;
	cr_assert_eq(tdm_dsched_create(e.gpu, 0, &dc, &ds), 0);
	struct capture c;
	capture_begin(&c);
	struct destroyer d = {.gpu = e.gpu};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, destroy_thread, &d), 0);
	bool said = read_until(&c, "made by a thread outside any task\n");
	bool done_before = atomic_load(&d.done);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	capture_end(&c);
	const char *out = read_all(&c);
	cr_assert(said, "the destroy named the scheduler:\n%s", out);
	cr_assert_not(done_before, "the destroy waited for the scheduler");
	cr_assert_eq(d.rc, 0);
	cr_assert_not_null(strstr(out, "tdm_gpu_destroy waits for a device scheduler not "
	                               "destroyed ("),
	                   "%s", out);
	cr_assert_not_null(strstr(out, " s so far): device 0, made by a thread outside any task"),
	                   "%s", out);
	tdm_test_destroy(e.ex);
}
