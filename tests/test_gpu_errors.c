// SPDX-License-Identifier: MIT
/*
 * The GPU layer's documented errors: each call refuses NULL, out-of-range and foreign arguments
 * and each bad config field (and environment switch) with its error, and leaves the layer usable;
 * the none backend has no devices; tdm_gpu_destroy refuses a worker, cancels far deadlines and
 * waits for a lease in progress, while leases and awaits during it say -ESHUTDOWN; a failed
 * device refuses new work while another goes on. On the simulator.
 */
#include "gpu_env.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "gpu_internal.h" /* struct tdm__gdev: the lock a lease in progress takes */

TDM_TEST_SUITE(gpu_errors);

Test(gpu_errors, bad_arguments_get_their_documented_errors)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_stream *s;
	cr_assert_eq(tdm_gpu_create(NULL, e.ex, NULL), -EINVAL);
	cr_assert_eq(tdm_stream_lease(e.gpu, 5, 0, &s), -EINVAL);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 1u << 7, &s), -EINVAL);
	cr_assert_eq(tdm_stream_lease(NULL, 0, 0, &s), -EINVAL);
	cr_assert_eq(tdm_stream_release(NULL), -EINVAL);
	cr_assert_eq(tdm_launch_spin(NULL, 0), -EINVAL);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 0, (void **)&s), -EINVAL);
	cr_assert_eq(tdm_await_stream(NULL, NULL), -EINVAL, "not from a running task");
	cr_assert_eq(tdm_sim_inject(NULL, TDM_SIM_FAULT_OP), -EINVAL);
	tdm_gpu_stats st;
	cr_assert_eq(tdm_gpu_stats_get(NULL, &st), -EINVAL);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, NULL), -EINVAL);
	tdm_gpu *g2;
	tdm_gpu_config bad;
	tdm_gpu_config_init(&bad);
	bad.backend = TDM_BACKEND_SIM;
	bad.completion = (tdm_completion)(TDM_COMPLETION_ADAPTIVE + 1);
	cr_assert_eq(tdm_gpu_create(&g2, e.ex, &bad), -EINVAL);
	/* Still usable afterwards. */
	struct copy_state c = {.gpu = e.gpu};
	cr_assert_eq(tdm_host_alloc(e.gpu, LEN * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&c.dev), 0);
	cr_assert_eq(run_one(&e, copy_task, &c), 0);
	cr_assert_eq(c.steps, 2);
	tdm_device_free(e.gpu, 0, c.dev);
	tdm_host_free(e.gpu, c.host);
	env_close(&e);
}

Test(gpu_errors, none_backend_has_no_devices)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	tdm_gpu_config g;
	cr_assert_eq(tdm_executor_create(&ex, NULL), 0);
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_NONE;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), 0);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(gpu, 0, 0, &s), -ENODEV);
	cr_assert_str_eq(tdm_gpu_backend_name(gpu), "none");
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

struct cancel_state {
	tdm_gpu *gpu;
	atomic_int registered;
	int rc;
};

/* Tells the test thread once the await is registered (or refused). */
static int await_far_deadline(tdm_task *t, struct cancel_state *c)
{
	int rc = tdm_await_deadline(t, c->gpu, tdm_now_ns() + 3600ull * 1000000000ull);
	atomic_store(&c->registered, 1);
	return rc;
}

static int far_deadline_task(tdm_task *t, void *arg)
{
	struct cancel_state *c = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, await_far_deadline(t, c));
	c->rc = tdm_task_result(t);
	TDM_END(t);
}

Test(gpu_errors, destroy_cancels_far_deadlines, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_NONE, TDM_COMPLETION_AUTO, 1));
	struct cancel_state c = {.gpu = e.gpu, .rc = 1};
	atomic_init(&c.registered, 0);
	tdm_group g;
	tdm_group_init(&g, e.ex);
	cr_assert_eq(tdm_spawn(e.ex, far_deadline_task, &c, &g), 0);
	while (!atomic_load(&c.registered))
		sched_yield();
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
	cr_assert_eq(tdm_group_wait(&g), 0, "the task was resumed, not lost");
	cr_assert_eq(c.rc, -ECANCELED);
	cr_assert_eq(tdm_executor_destroy(e.ex), 0);
}

/* tdm_gpu_create with cfg on ex must fail with `expected`. */
static void assert_gpu_create_fails(tdm_executor *ex, const tdm_gpu_config *cfg, int expected,
                                    const char *what)
{
	tdm_gpu *gpu = NULL;
	int rc = tdm_gpu_create(&gpu, ex, cfg);
	cr_assert_eq(rc, expected, "%s: %d (%s), expected %d", what, rc, tdm_strerror(rc),
	             expected);
}

Test(gpu_errors, create_refuses_each_bad_config_field, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_gpu_config g;
	tdm_gpu *gpu = NULL;
	tdm_gpu_config_init(NULL); /* does nothing */
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	cr_assert_eq(tdm_gpu_create(&gpu, NULL, &g), -EINVAL, "no executor");
#define BAD_FIELD(field, value)                                                                    \
	do {                                                                                       \
		tdm_gpu_config_init(&g);                                                           \
		g.backend = TDM_BACKEND_SIM;                                                       \
		g.field = value;                                                                   \
		assert_gpu_create_fails(e.ex, &g, -EINVAL, #field " = " #value);                   \
	} while (0)
	BAD_FIELD(backend, (tdm_backend)(TDM_BACKEND_NONE + 1));
	BAD_FIELD(pageable, TDM_PAGEABLE_REFUSE + 1);
	BAD_FIELD(streams_per_device, 1025);
	BAD_FIELD(launch_limit, 1025);
	BAD_FIELD(sim_devices, 1025);
	BAD_FIELD(sim_sm_count, 1025);
	BAD_FIELD(graph_capture_after, TDM_GRAPH_CAPTURE_FIRST - 1);
	BAD_FIELD(graph_cache, (1u << 20) + 1);
#undef BAD_FIELD
	/* The bounds themselves are taken. */
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.graph_capture_after = TDM_GRAPH_CAPTURE_FIRST;
	g.graph_cache = 1u << 20;
	cr_assert_eq(tdm_gpu_create(&gpu, e.ex, &g), 0, "graph_capture_after -1, graph_cache 2^20");
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	/* TDM_BACKEND_AUTO reads TANDEM_GPU: a value it does not know is refused, not taken for
	 * cuda (which, without a device, would say -ENODEV). */
	tdm_gpu_config_init(&g);
	cr_assert_eq(setenv("TANDEM_GPU", "simulator", 1), 0);
	assert_gpu_create_fails(e.ex, &g, -EINVAL, "TANDEM_GPU=simulator");
	cr_assert_eq(unsetenv("TANDEM_GPU"), 0);
	/* TDM_COMPLETION_AUTO reads TANDEM_COMPLETION: a typo is refused, not ignored. */
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	cr_assert_eq(setenv("TANDEM_COMPLETION", "words", 1), 0);
	assert_gpu_create_fails(e.ex, &g, -EINVAL, "TANDEM_COMPLETION=words");
	cr_assert_eq(setenv("TANDEM_COMPLETION", "word", 1), 0);
	cr_assert_eq(tdm_gpu_create(&gpu, e.ex, &g), 0, "TANDEM_COMPLETION=word");
	cr_assert_eq(tdm_gpu_completion(gpu, 0), TDM_COMPLETION_WORD);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	cr_assert_eq(unsetenv("TANDEM_COMPLETION"), 0);
	cr_assert_eq(setenv("TANDEM_NVML", "no", 1), 0); /* 0, off, 1 or on */
	assert_gpu_create_fails(e.ex, &g, -EINVAL, "TANDEM_NVML=no");
	cr_assert_eq(unsetenv("TANDEM_NVML"), 0);
	/* Each accepted value still opens: the unset default, and an explicit one of each. */
	cr_assert_eq(setenv("TANDEM_GPU", "sim", 1), 0);
	cr_assert_eq(setenv("TANDEM_COMPLETION", "event", 1), 0);
	cr_assert_eq(setenv("TANDEM_NVML", "off", 1), 0);
	tdm_gpu_config_init(&g); /* backend and completion automatic: both read from the env */
	cr_assert_eq(tdm_gpu_create(&gpu, e.ex, &g), 0, "every switch set to a value it knows");
	cr_assert_eq(tdm_gpu_completion(gpu, 0), TDM_COMPLETION_EVENT);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	cr_assert_eq(unsetenv("TANDEM_GPU"), 0);
	cr_assert_eq(unsetenv("TANDEM_COMPLETION"), 0);
	cr_assert_eq(unsetenv("TANDEM_NVML"), 0);
	close_usable(&e);
}

/* The diagnostic switches (tandem_sim.h) refuse a value they do not know. */
Test(gpu_errors, debug_switches_refuse_unknown_values, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	cr_assert_eq(tdm_gpu_debug(NULL, NULL, NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_debug(e.gpu, "sometimes", NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_debug(e.gpu, NULL, "off"), -EINVAL);
	cr_assert_eq(tdm_gpu_debug(e.gpu, "never", "0"), 0);
	cr_assert_eq(tdm_gpu_debug(e.gpu, NULL, NULL), 0);
	env_close(&e);
}

Test(gpu_errors, queries_and_leases_refuse_null_and_out_of_range_arguments,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 1));
	cr_assert_eq(tdm_gpu_device_count(NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_device_count(e.gpu), 1);
	cr_assert_eq(tdm_gpu_completion(NULL, 0), -EINVAL);
	cr_assert_eq(tdm_gpu_completion(e.gpu, -1), -EINVAL);
	cr_assert_eq(tdm_gpu_completion(e.gpu, 1), -EINVAL);
	cr_assert_eq(tdm_gpu_completion(e.gpu, 0), TDM_COMPLETION_WORD);
	cr_assert_str_eq(tdm_gpu_backend_name(NULL), "none");
	cr_assert_str_eq(tdm_gpu_backend_name(e.gpu), "sim");
	cr_assert_eq(tdm_stream_device(NULL), -EINVAL);
	cr_assert_null(tdm_stream_native(NULL));
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, NULL), -EINVAL);
	cr_assert_eq(tdm_stream_lease(e.gpu, -2, 0, &s), -EINVAL, "negative, not TDM_DEVICE_ANY");
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_stream_device(s), 0);
	cr_assert_null(tdm_stream_native(s), "the sim has no native stream");
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_stream_release(s), -EINVAL, "its lease was given back already");
	close_usable(&e);
}

Test(gpu_errors, kernels_events_and_faults_refuse_bad_arguments, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 1);
	tdm_stream *s;
	float *y, *x;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 16 * sizeof(float), (void **)&y), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 16 * sizeof(float), (void **)&x), 0);
	cr_assert_eq(tdm_launch_busy(NULL, 0), -EINVAL);
	cr_assert_eq(tdm_launch_fault(NULL), -EINVAL);
	cr_assert_eq(tdm_launch_scale(NULL, y, x, 2.0f, 16), -EINVAL);
	cr_assert_eq(tdm_launch_scale(s, NULL, x, 2.0f, 16), -EINVAL);
	cr_assert_eq(tdm_launch_scale(s, y, NULL, 2.0f, 16), -EINVAL);
	tdm_event *ev, *ev1;
	cr_assert_eq(tdm_event_get(NULL, 0, &ev), -EINVAL);
	cr_assert_eq(tdm_event_get(e.gpu, -1, &ev), -EINVAL);
	cr_assert_eq(tdm_event_get(e.gpu, 2, &ev), -EINVAL);
	cr_assert_eq(tdm_event_get(e.gpu, 0, NULL), -EINVAL);
	cr_assert_eq(tdm_event_put(NULL), -EINVAL);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 1, &ev1), 0);
	cr_assert_eq(tdm_event_record(NULL, s), -EINVAL);
	cr_assert_eq(tdm_event_record(ev, NULL), -EINVAL);
	cr_assert_eq(tdm_event_record(ev1, s), -EINVAL,
	             "an event of device 1, a stream of device 0");
	cr_assert_eq(tdm_sim_inject(s, (tdm_sim_fault)0), -EINVAL);
	cr_assert_eq(tdm_sim_inject(s, (tdm_sim_fault)(TDM_SIM_FAULT_STICKY + 1)), -EINVAL);
	/* None of it queued or armed anything: the stream's next work runs, and succeeds. */
	for (int i = 0; i < 16; i++)
		x[i] = (float)i; /* sim device memory is host memory */
	cr_assert_eq(tdm_launch_scale(s, y, x, 2.0f, 16), 0);
	cr_assert_eq(tdm_event_record(ev, s), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(y[i], 2.0f * (float)i, "y[%d]", i);
	cr_assert_eq(tdm_event_put(ev), 0);
	cr_assert_eq(tdm_event_put(ev1), 0);
	/* A second put is refused, and the pool still hands out distinct events (a list holding
	 * ev twice would give it to two owners). */
	cr_assert_eq(tdm_event_put(ev), -EINVAL, "a second put");
	/* So is a record of a put event: the pool's next owner (or a stream await) would have
	 * its capture moved. */
	cr_assert_eq(tdm_event_record(ev, s), -EINVAL, "a record after the put");
	tdm_event *p1, *p2;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &p1), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &p2), 0);
	cr_assert_neq(p1, p2, "one event handed out twice");
	cr_assert_eq(tdm_event_put(p1), 0);
	cr_assert_eq(tdm_event_put(p2), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, y), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, x), 0);
	close_usable(&e);
}

struct other_launch {
	tdm_gpu *gpu;
	int rc;
};

/* Another thread's launch through the gate: it waits only while this one's slot is held. */
static void *launch_beside(void *arg)
{
	struct other_launch *o = arg;
	tdm_stream *s;
	o->rc = tdm_stream_lease(o->gpu, 0, TDM_STREAM_EXCLUSIVE, &s);
	if (o->rc == 0) {
		o->rc = tdm_launch_begin(s);
		if (o->rc == 0)
			o->rc = tdm_launch_spin(s, 0);
		(void)tdm_launch_end(s);
		(void)tdm_stream_release(s);
	}
	return NULL;
}

/* Launch brackets nest on a thread, TDM_LAUNCH_NEST_MAX deep, on a device that lets one thread
 * launch at a time: only the outermost takes the device's slot, so none waits for its own
 * thread (the second begin hung); past the limit -EBUSY, never a hang; an end with none open
 * -EINVAL; and the slot is given back once the outermost ends. */
Test(gpu_errors, launch_brackets_nest_to_a_limit_and_never_hang, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.launch_limit = 1;
	struct env e;
	cr_assert(env_open_cfg(&e, 1, &g));
	tdm_stream *s, *s2;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s2), 0);
	cr_assert_eq(tdm_launch_begin(NULL), -EINVAL);
	cr_assert_eq(tdm_launch_end(s), -EINVAL, "no bracket open");
	for (int i = 0; i < TDM_LAUNCH_NEST_MAX; i++) {
		cr_assert_eq(tdm_launch_begin(i % 2 ? s2 : s), 0, "begin %d", i + 1);
		cr_assert_eq(tdm_launch_spin(s, 0), 0, "tandem's own launch at depth %d", i + 1);
	}
	cr_assert_eq(tdm_launch_begin(s), -EBUSY, "one past TDM_LAUNCH_NEST_MAX");
	for (int i = 0; i < TDM_LAUNCH_NEST_MAX; i++)
		cr_assert_eq(tdm_launch_end(s), 0, "end %d", i + 1);
	cr_assert_eq(tdm_launch_end(s), -EINVAL, "every bracket closed");
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_launch_begin(s), -EINVAL, "a released lease");
	cr_assert_eq(tdm_stream_release(s2), 0);
	/* The device's one slot is free again: another thread launches. */
	struct other_launch o = {.gpu = e.gpu, .rc = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, launch_beside, &o), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(o.rc, 0, "%s", tdm_strerror(o.rc));
	close_usable(&e);
}

Test(gpu_errors, device_and_host_memory_calls_refuse_bad_arguments, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *p = NULL;
	cr_assert_eq(tdm_device_alloc(NULL, 0, 64, &p), -EINVAL);
	cr_assert_eq(tdm_device_alloc(e.gpu, -1, 64, &p), -EINVAL);
	cr_assert_eq(tdm_device_alloc(e.gpu, 1, 64, &p), -EINVAL);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, NULL), -EINVAL);
	/* One byte more than all of the device is refused, and so is a size that would wrap
	 * around if it were rounded up to the device's alignment. */
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(e.gpu, 0, &info), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, (size_t)info.memory_bytes + 1, &p), -ENOMEM);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, SIZE_MAX, &p), -ENOMEM);
	cr_assert_null(p, "a refused allocation handed out memory");
	cr_assert_eq(tdm_device_free(NULL, 0, NULL), -EINVAL);
	cr_assert_eq(tdm_device_free(e.gpu, -1, NULL), -EINVAL);
	cr_assert_eq(tdm_device_free(e.gpu, 1, NULL), -EINVAL);
	cr_assert_eq(tdm_device_free(e.gpu, 0, NULL), 0, "freeing NULL");
	cr_assert_eq(tdm_host_alloc(NULL, 64, &p), -EINVAL);
	cr_assert_eq(tdm_host_alloc(e.gpu, 0, &p), -EINVAL);
	cr_assert_eq(tdm_host_alloc(e.gpu, 64, NULL), -EINVAL);
	cr_assert_null(p, "a refused allocation handed out memory");
	cr_assert_eq(tdm_host_free(NULL, NULL), -EINVAL);
	cr_assert_eq(tdm_host_free(e.gpu, NULL), 0, "freeing NULL");
	close_usable(&e);
}

Test(gpu_errors, none_backend_refuses_device_calls, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_NONE, TDM_COMPLETION_AUTO, 1));
	void *p = NULL;
	tdm_event *ev;
	tdm_stream *s;
	cr_assert_eq(tdm_gpu_device_count(e.gpu), 0);
	cr_assert_eq(tdm_gpu_completion(e.gpu, 0), -EINVAL, "no device 0");
	cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), -ENODEV);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, &p), -ENODEV);
	cr_assert_eq(tdm_device_free(e.gpu, 0, NULL), -EINVAL, "no device 0");
	cr_assert_eq(tdm_host_alloc(e.gpu, 64, &p), -ENODEV);
	cr_assert_eq(tdm_host_free(e.gpu, NULL), -ENODEV);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), -ENODEV);
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, 64, &p), -ENODEV);
	int host = 0;
	cr_assert_eq(tdm_mem_advise(e.gpu, &host, sizeof host, TDM_ADVISE_READ_MOSTLY, 0), -ENODEV,
	             "no devices, device 0");
	tdm_pinned_stats ps;
	cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), -ENODEV);
	cr_assert_null(p);
	await_deadline(&e); /* what the layer does without devices still works */
	tdm_test_assert_usable(e.ex);
	env_close(&e);
}

struct destroy_try {
	tdm_gpu *gpu;
	atomic_int rc;
};

static void destroy_gpu_from_a_worker(void *arg)
{
	struct destroy_try *d = arg;
	atomic_store(&d->rc, tdm_gpu_destroy(d->gpu));
}

Test(gpu_errors, destroy_refuses_null_and_the_executors_own_workers,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	cr_assert_eq(tdm_gpu_destroy(NULL), -EINVAL);
	struct destroy_try d = {.gpu = e.gpu};
	atomic_init(&d.rc, 1);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, destroy_gpu_from_a_worker, &d), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&d.rc), -EDEADLK, "tdm_gpu_destroy on a worker: %d",
	             atomic_load(&d.rc));
	close_usable(&e);
}

/* Awaits of this executor's task on NULL objects and on another executor's GPU layer. Between
 * them a passed deadline sets the result back to 0, so each result is the await's own. */
struct bad_gpu_awaits {
	tdm_gpu *gpu;
	tdm_stream *fs; /* a stream of the other executor's GPU layer */
	tdm_event *fe;  /* an event of it */
	tdm_gpu *foreign;
	tdm_event *put; /* an event of this layer, put back */
	int rc[7], res[7];
};

static int bad_gpu_await_task(tdm_task *t, void *arg)
{
	struct bad_gpu_awaits *b = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, b->rc[0] = tdm_await_stream(t, NULL));
	b->res[0] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[1] = tdm_await_event(t, NULL));
	b->res[1] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[2] = tdm_await_deadline(t, NULL, tdm_now_ns() + 1000000));
	b->res[2] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[3] = tdm_await_stream(t, b->fs));
	b->res[3] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[4] = tdm_await_event(t, b->fe));
	b->res[4] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[5] = tdm_await_deadline(t, b->foreign, tdm_now_ns() + 1000000));
	b->res[5] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[6] = tdm_await_event(t, b->put));
	b->res[6] = tdm_task_result(t);
	TDM_END(t);
}

Test(gpu_errors, awaits_on_null_or_foreign_objects_fail_at_once_with_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e, other;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	cr_assert(env_open(&other, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	struct bad_gpu_awaits b = {.gpu = e.gpu, .foreign = other.gpu};
	cr_assert_eq(tdm_stream_lease(other.gpu, 0, 0, &b.fs), 0);
	cr_assert_eq(tdm_event_get(other.gpu, 0, &b.fe), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &b.put), 0);
	cr_assert_eq(tdm_event_put(b.put), 0);
	cr_assert_eq(run_one(&e, bad_gpu_await_task, &b), 0);
	for (int i = 0; i < 7; i++) {
		cr_assert_eq(b.rc[i], -EINVAL, "await %d returned %d", i, b.rc[i]);
		cr_assert_eq(b.res[i], -EINVAL, "await %d left the result %d", i, b.res[i]);
	}
	cr_assert_eq(tdm_event_put(b.fe), 0);
	cr_assert_eq(tdm_stream_release(b.fs), 0);
	await_stream_sees_work_done(&e);
	await_stream_sees_work_done(&other);
	tdm_test_assert_usable(e.ex);
	env_close(&other);
	env_close(&e);
}

struct gpu_destroyer {
	tdm_gpu *gpu;
	int rc;
};

static void *destroy_gpu_thread(void *arg)
{
	struct gpu_destroyer *d = arg;
	d->rc = tdm_gpu_destroy(d->gpu);
	return NULL;
}

/* Awaits made while the GPU layer is destroyed (it waits for the test's lease); between them a
 * passed deadline sets the result back to 0. */
struct late_awaits {
	tdm_gpu *gpu;
	tdm_stream *s;
	tdm_event *ev;
	int rc[3], res[3];
};

static int late_await_task(tdm_task *t, void *arg)
{
	struct late_awaits *b = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, b->rc[0] = tdm_await_deadline(t, b->gpu, tdm_now_ns() + 3600000000000ull));
	b->res[0] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[1] = tdm_await_stream(t, b->s));
	b->res[1] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_deadline(t, b->gpu, 1));
	TDM_AWAIT(t, b->rc[2] = tdm_await_event(t, b->ev));
	b->res[2] = tdm_task_result(t);
	TDM_END(t);
}

Test(gpu_errors, leases_and_awaits_during_destroy_fail_with_eshutdown,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct late_awaits b = {.gpu = e.gpu};
	/* Held until the end: tdm_gpu_destroy waits for it, so the layer stays while it stops. */
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &b.s), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &b.ev), 0);
	/* A second of work keeps the event pending, so its await gets as far as registering. */
	cr_assert_eq(tdm_launch_spin(b.s, 1000000000u), 0);
	cr_assert_eq(tdm_event_record(b.ev, b.s), 0);
	struct gpu_destroyer d = {.gpu = e.gpu, .rc = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, destroy_gpu_thread, &d), 0);
	tdm_stream *s2;
	int rc;
	while ((rc = tdm_stream_lease(e.gpu, 0, 0, &s2)) == 0) {
		cr_assert_eq(tdm_stream_release(s2), 0);
		sched_yield();
	}
	cr_assert_eq(rc, -ESHUTDOWN, "a shared lease: %d", rc);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s2), -ESHUTDOWN);
	cr_assert_eq(run_one(&e, late_await_task, &b), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(b.rc[i], -ESHUTDOWN, "await %d returned %d", i, b.rc[i]);
		cr_assert_eq(b.res[i], -ESHUTDOWN, "await %d left the result %d", i, b.res[i]);
	}
	cr_assert_eq(tdm_event_put(b.ev), 0);
	cr_assert_eq(tdm_stream_release(b.s), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(d.rc, 0);
	tdm_test_assert_usable(e.ex);
	tdm_test_destroy(e.ex);
}

/*
 * A lease that began before tdm_gpu_destroy is waited for (and then its release), not freed
 * under: the test holds the lease inside, on its device's lock, under which the first lease of a
 * stream creates it. Without the wait, destroy frees the device and its lock under the lease.
 */
struct lease_in_progress {
	tdm_gpu *gpu;
	atomic_int step; /* 1: about to lease, 2: leased (or refused) and released */
	int rc, release_rc;
};

static void lease_in_progress_fn(void *arg)
{
	struct lease_in_progress *l = arg;
	tdm_stream *s;
	atomic_store(&l->step, 1);
	l->rc = tdm_stream_lease(l->gpu, 0, 0, &s);
	if (l->rc == 0)
		l->release_rc = tdm_stream_release(s);
	atomic_store(&l->step, 2);
}

Test(gpu_errors, destroy_waits_for_a_lease_in_progress, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	static struct lease_in_progress l;
	l.gpu = e.gpu;
	struct tdm__gdev *d = &tdm__gpu_find(e.gpu)->devs[0];
	for (unsigned k = 0; k < d->nstreams; k++)
		cr_assert_null(atomic_load(&d->streams[0][k]), "stream %u made before a lease", k);
	pthread_mutex_lock(&d->lock);
	cr_assert_eq(tdm_submit(e.ex, lease_in_progress_fn, &l), 0);
	while (atomic_load(&l.step) == 0)
		sched_yield();
	/* Pauses, not timing assertions: time for the lease to reach the lock (one that has not
	 * by then is refused with -ESHUTDOWN, also right), then for destroy to get as far as it
	 * goes. */
	tdm_test_sleep_us(20000);
	struct gpu_destroyer dd = {.gpu = e.gpu, .rc = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, destroy_gpu_thread, &dd), 0);
	tdm_test_sleep_us(20000);
	/* Returned already only if it had not yet begun when destroy did: then refused. */
	cr_assert(atomic_load(&l.step) == 1 || l.rc == -ESHUTDOWN,
	          "the lease returned %d while the test held the lock", l.rc);
	pthread_mutex_unlock(&d->lock);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(dd.rc, 0);
	cr_assert_eq(atomic_load(&l.step), 2, "destroy returned before the lease did");
	cr_assert(l.rc == 0 || l.rc == -ESHUTDOWN, "the lease: %d (%s)", l.rc, tdm_strerror(l.rc));
	if (l.rc == 0)
		cr_assert_eq(l.release_rc, 0);
	tdm_test_assert_usable(e.ex);
	tdm_test_destroy(e.ex);
}

/* Awaits on a dead device's stream and event. */
struct dead_awaits {
	tdm_stream *s;
	tdm_event *ev;
	int rc[2], res[2];
};

static int dead_await_task(tdm_task *t, void *arg)
{
	struct dead_awaits *b = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, b->rc[0] = tdm_await_stream(t, b->s));
	b->res[0] = tdm_task_result(t);
	TDM_AWAIT(t, b->rc[1] = tdm_await_event(t, b->ev));
	b->res[1] = tdm_task_result(t);
	TDM_END(t);
}

Test(gpu_errors, a_failed_device_refuses_new_work_while_another_goes_on,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	struct dead_awaits b = {0};
	float *y, *x;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &b.s), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &b.ev), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 16 * sizeof(float), (void **)&y), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 16 * sizeof(float), (void **)&x), 0);
	cr_assert_eq(tdm_launch_fault(b.s), 0);
	/* The trap kills the device when the stream reaches it; from then on, launches fail. */
	int rc;
	while ((rc = tdm_launch_spin(b.s, 0)) == 0)
		sched_yield();
	cr_assert_eq(rc, -EIO, "a launch on the dead device: %d", rc);
	cr_assert_eq(tdm_launch_spin(b.s, 0), -EIO);
	cr_assert_eq(tdm_launch_busy(b.s, 0), -EIO);
	cr_assert_eq(tdm_launch_scale(b.s, y, x, 2.0f, 16), -EIO);
	cr_assert_eq(tdm_launch_fault(b.s), -EIO);
	cr_assert_eq(tdm_event_record(b.ev, b.s), -EIO);
	tdm_stream *s2;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &s2), -ENODEV);
	cr_assert_eq(run_one(&e, dead_await_task, &b), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(b.rc[i], -EIO, "await %d returned %d", i, b.rc[i]);
		cr_assert_eq(b.res[i], -EIO, "await %d left the result %d", i, b.res[i]);
	}
	cr_assert_eq(tdm_event_put(b.ev), 0);
	cr_assert_eq(tdm_stream_release(b.s), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, y), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, x), 0);
	/* Device 1 goes on. */
	struct tdm_test_await a = {.rc = 1, .result = 1};
	cr_assert_eq(tdm_stream_lease(e.gpu, 1, 0, &a.s), 0);
	cr_assert_eq(tdm_launch_spin(a.s, 1000), 0);
	tdm_test_run_one(e.ex, tdm_test_await_task, &a);
	cr_assert_eq(a.rc, TDM_SUSPENDED);
	cr_assert_eq(a.result, 0);
	cr_assert_eq(tdm_stream_release(a.s), 0);
	tdm_test_assert_usable(e.ex);
	env_close(&e);
}
