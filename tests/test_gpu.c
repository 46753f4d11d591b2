/*
 * The GPU await path, specified on every backend: each suite runs on the simulator, with
 * completion words and with events, and on CUDA where a device exists (skipped elsewhere).
 */
#include "common.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h" /* tdm__look_step */
#include "tandem.h"
#include "tandem_gpu.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MANY 2000
#else
#define MANY 10000
#endif

struct env {
	tdm_executor *ex;
	tdm_gpu *gpu;
};

/* Starts an executor of `workers` and a GPU layer with config g; false when g's backend has no
 * device. */
static bool env_open_cfg(struct env *e, unsigned workers, const tdm_gpu_config *g)
{
	e->ex = tdm_test_create(workers);
	int rc = tdm_gpu_create(&e->gpu, e->ex, g);
	if (rc == -ENODEV || rc == -ENOTSUP) {
		tdm_test_destroy(e->ex);
		return false;
	}
	cr_assert_eq(rc, 0, "tdm_gpu_create: %s", tdm_strerror(rc));
	return true;
}

/* Starts an executor and a GPU layer on the backend; false when that backend has no device. */
static bool env_open(struct env *e, tdm_backend backend, tdm_completion completion,
                     unsigned workers)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = backend;
	g.completion = completion;
	return env_open_cfg(e, workers, &g);
}

/* The simulator with two devices (device 1 for the checks that need a second one). */
static void env_open_sim2(struct env *e, unsigned workers)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.sim_devices = 2;
	cr_assert(env_open_cfg(e, workers, &g));
}

static void env_close(struct env *e)
{
	tdm_test_destroy(e->ex);
	cr_assert_eq(tdm_gpu_destroy(e->gpu), 0);
}

/* Spawns fn(arg) as a resumable task and waits for it from this (outside) thread. */
static int run_one(struct env *e, tdm_resume_fn fn, void *arg)
{
	tdm_group g;
	tdm_group_init(&g, e->ex);
	int rc = tdm_spawn(e->ex, fn, arg, &g);
	cr_assert_eq(rc, 0);
	return tdm_group_wait(&g);
}

/* What a task saw (SEE, common.h). */
struct seen {
	int rc;
	int line;
};

/* In a task whose state c has gpu, s and sn: leases a stream of device 0 into c->s, or records
 * why not and ends the task (nothing else of it can run without the stream). */
#define LEASE_OR_END(c, flags)                                                                     \
	do {                                                                                       \
		SEE(&(c)->sn, tdm_stream_lease((c)->gpu, 0, (flags), &(c)->s));                    \
		if ((c)->sn.rc != 0)                                                               \
			return 0;                                                                  \
	} while (0)

/* ---- the behaviours, each written once ---- */

#define LEN 4096

struct copy_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *dev;
	int results[4];
	int steps;
	struct seen sn;
};

/* Copies in, doubles through a round trip, copies out; each step awaited. */
static int copy_task(tdm_task *t, void *arg)
{
	struct copy_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	SEE(&c->sn, tdm_memcpy_async(c->s, c->dev, c->host, LEN * sizeof(int), TDM_COPY_H2D));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->results[c->steps++] = tdm_task_result(t);
	memset(c->host, 0, LEN * sizeof(int));
	SEE(&c->sn, tdm_memcpy_async(c->s, c->host, c->dev, LEN * sizeof(int), TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->results[c->steps++] = tdm_task_result(t);
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void await_stream_sees_work_done(struct env *e)
{
	struct copy_state c = {.gpu = e->gpu};
	cr_assert_eq(tdm_host_alloc(e->gpu, LEN * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, LEN * sizeof(int), (void **)&c.dev), 0);
	for (int i = 0; i < LEN; i++)
		c.host[i] = i * 7;
	cr_assert_eq(run_one(e, copy_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.steps, 2, "the task ran to its end, past both awaits");
	cr_assert_eq(c.results[0], 0);
	cr_assert_eq(c.results[1], 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[i], i * 7, "data at %d came back", i);
	tdm_device_free(e->gpu, 0, c.dev);
	tdm_host_free(e->gpu, c.host);
}

/* After a test's bad calls: the layer still moves data through a stream, and the executor
 * still runs tasks; then both are closed. */
static void close_usable(struct env *e)
{
	await_stream_sees_work_done(e);
	tdm_test_assert_usable(e->ex);
	env_close(e);
}

struct chain_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int i;
	int *host, *dev;
	int seen[32];
	struct seen sn;
};

/* Each step copies a new value through the device; after each await the copy is visible. */
static int chain_task(tdm_task *t, void *arg)
{
	struct chain_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	for (c->i = 0; c->i < 32; c->i++) {
		c->host[0] = c->i + 100;
		SEE(&c->sn, tdm_memcpy_async(c->s, c->dev, c->host, sizeof(int), TDM_COPY_H2D));
		SEE(&c->sn, tdm_launch_spin(c->s, 20000));
		SEE(&c->sn, tdm_memcpy_async(c->s, c->host + 1, c->dev, sizeof(int), TDM_COPY_D2H));
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		c->seen[c->i] = c->host[1];
	}
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void resumes_in_order_after_each_await(struct env *e)
{
	struct chain_state c = {.gpu = e->gpu};
	cr_assert_eq(tdm_host_alloc(e->gpu, 2 * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, sizeof(int), (void **)&c.dev), 0);
	cr_assert_eq(run_one(e, chain_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	for (int i = 0; i < 32; i++)
		cr_assert_eq(c.seen[i], i + 100, "step %d resumed after its own copy", i);
	tdm_device_free(e->gpu, 0, c.dev);
	tdm_host_free(e->gpu, c.host);
}

struct event_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	tdm_event *ev;
	int first, second, result;
	struct seen sn;
};

static int event_task(tdm_task *t, void *arg)
{
	struct event_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	SEE(&c->sn, tdm_event_get(c->gpu, 0, &c->ev));
	if (c->sn.rc != 0) {
		tdm_stream_release(c->s);
		return 0;
	}
	/* Never recorded: already complete, the await continues at once. */
	c->first = tdm_await_event(t, c->ev);
	SEE(&c->sn, tdm_launch_spin(c->s, 2000000));
	SEE(&c->sn, tdm_event_record(c->ev, c->s));
	TDM_AWAIT(t, c->second = tdm_await_event(t, c->ev));
	c->result = tdm_task_result(t);
	tdm_event_put(c->ev);
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void await_event(struct env *e)
{
	struct event_state c = {.gpu = e->gpu, .result = 1};
	cr_assert_eq(run_one(e, event_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, 0, "the recorded event's work succeeded");
	cr_assert_eq(c.first, 0, "a completed event does not suspend");
	cr_assert_eq(c.second, TDM_SUSPENDED, "a pending event suspends");
}

struct deadline_state {
	tdm_gpu *gpu;
	uint64_t deadline, resumed;
	int rc, past;
};

static int deadline_task(tdm_task *t, void *arg)
{
	struct deadline_state *c = arg;
	TDM_BEGIN(t);
	c->past = tdm_await_deadline(t, c->gpu, 1); /* long past: continues at once */
	c->deadline = tdm_now_ns() + 5000000;
	TDM_AWAIT(t, tdm_await_deadline(t, c->gpu, c->deadline));
	c->resumed = tdm_now_ns();
	c->rc = tdm_task_result(t);
	TDM_END(t);
}

static void await_deadline(struct env *e)
{
	struct deadline_state c = {.gpu = e->gpu};
	cr_assert_eq(run_one(e, deadline_task, &c), 0);
	cr_assert_eq(c.past, 0);
	cr_assert_eq(c.rc, 0);
	cr_assert_geq(c.resumed, c.deadline, "not resumed before its deadline");
}

static atomic_int many_done, many_bad;

struct many_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	struct seen sn;
};

static int many_task(tdm_task *t, void *arg)
{
	struct many_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	SEE(&c->sn, tdm_launch_spin(c->s, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	if (tdm_task_result(t) != 0)
		atomic_fetch_add(&many_bad, 1);
	tdm_stream_release(c->s);
	atomic_fetch_add(&many_done, 1);
	TDM_END(t);
}

static void many_awaits_outstanding(struct env *e)
{
	struct many_state *st = calloc(MANY, sizeof(*st));
	cr_assert_not_null(st);
	atomic_store(&many_done, 0);
	atomic_store(&many_bad, 0);
	/* A long kernel first, on every stream the tasks will share, so that they all pile up
	 * behind it: MANY awaits outstanding at once. */
	tdm_stream *blockers[64];
	int nb = 0;
	while (nb < 64 && tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &blockers[nb]) == 0) {
		tdm_launch_spin(blockers[nb], 50000000);
		nb++;
	}
	for (int i = 0; i < nb; i++)
		tdm_stream_release(blockers[i]);
	tdm_group g;
	tdm_group_init(&g, e->ex);
	for (int i = 0; i < MANY; i++) {
		st[i].gpu = e->gpu;
		cr_assert_eq(tdm_spawn(e->ex, many_task, &st[i], &g), 0);
	}
	cr_assert_eq(tdm_group_wait(&g), 0);
	for (int i = 0; i < MANY; i++)
		ASSERT_SEEN(&st[i].sn);
	cr_assert_eq(atomic_load(&many_done), MANY);
	cr_assert_eq(atomic_load(&many_bad), 0);
	free(st);
}

struct fault_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int inject; /* 0 none, else a tdm_sim_fault, or -1 for a trapping kernel */
	int rc, after;
	struct seen sn; /* the calls up to the first await */
};

static int fault_task(tdm_task *t, void *arg)
{
	struct fault_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	if (c->inject > 0)
		SEE(&c->sn, tdm_sim_inject(c->s, (tdm_sim_fault)c->inject));
	if (c->inject < 0)
		SEE(&c->sn, tdm_launch_fault(c->s));
	else
		SEE(&c->sn, tdm_launch_spin(c->s, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->rc = tdm_task_result(t);
	/* The stream goes on after an operation's error, not after a device's (a dead device
	 * refuses this launch: `after` says which, so its result is not recorded). */
	(void)tdm_launch_spin(c->s, 1000);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->after = tdm_task_result(t);
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void fault_reaches_the_right_task(struct env *e, int inject, bool sticky)
{
	struct fault_state bad = {.gpu = e->gpu, .inject = inject};
	struct fault_state good = {.gpu = e->gpu};
	if (!sticky) {
		/* The bystander runs first: a sticky fault would fail it too, by design. */
		cr_assert_eq(run_one(e, fault_task, &good), 0);
		ASSERT_SEEN(&good.sn);
		cr_assert_eq(good.rc, 0);
	}
	cr_assert_eq(run_one(e, fault_task, &bad), 0);
	ASSERT_SEEN(&bad.sn);
	cr_assert_eq(bad.rc, -EIO, "the faulting task resumed with the error");
	if (sticky) {
		cr_assert_eq(bad.after, -EIO, "a failed device fails new awaits at once");
		tdm_stream *s;
		cr_assert_eq(tdm_stream_lease(e->gpu, 0, 0, &s), -ENODEV);
	} else {
		cr_assert_eq(bad.after, 0, "the stream works again after an operation's error");
		struct fault_state again = {.gpu = e->gpu};
		cr_assert_eq(run_one(e, fault_task, &again), 0);
		ASSERT_SEEN(&again.sn);
		cr_assert_eq(again.rc, 0);
	}
}

/* A long device-to-host copy into registered host memory, and its last byte when its await
 * ended. */
#define DYING_COPY (128u << 20)
struct dying_copy {
	tdm_gpu *gpu;
	unsigned char *src; /* sim device memory: host memory the test may write */
	unsigned char *dst; /* malloc'd and registered: the test's own, after the GPU layer too */
	tdm_stream *s;
	int rc;
	unsigned char last_at_resume;
	struct seen sn;
};

static int dying_copy_task(tdm_task *t, void *arg)
{
	struct dying_copy *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	SEE(&c->sn, tdm_memcpy_async(c->s, c->dst, c->src, DYING_COPY, TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->rc = tdm_task_result(t);
	c->last_at_resume = c->dst[DYING_COPY - 1];
	tdm_stream_release(c->s);
	TDM_END(t);
}

/*
 * The device dies (a sticky fault on another stream) while a long copy may be running: its task
 * resumes with -EIO only once the copy no longer writes (the sim cannot stop a memcpy midway;
 * CUDA stops everything). So the destination's last byte, written last (glibc's memcpy copies
 * forward; were it not, the test would pass without testing, never fail falsely), is the same when
 * the task resumes as after the GPU layer is gone (all done, or the copy never ran). Before, the
 * poller failed every await of the dead device at once, and the task resumed mid-copy; with
 * events, the event's query said -EIO at once.
 */
static void copy_running_when_the_device_dies(tdm_completion completion)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, completion, 2));
	struct dying_copy c = {.gpu = e.gpu, .rc = 1};
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, DYING_COPY, (void **)&c.src), 0);
	c.dst = calloc(DYING_COPY, 1);
	cr_assert_not_null(c.dst);
	cr_assert_eq(tdm_host_register(e.gpu, c.dst, DYING_COPY), 0);
	memset(c.src, 0xab, DYING_COPY);
	tdm_group grp;
	tdm_group_init(&grp, e.ex);
	cr_assert_eq(tdm_spawn(e.ex, dying_copy_task, &c, &grp), 0);
	/* The copy is enqueued once its await is counted (taken in by the poller, or handed to it
	 * by the worker that watched it first). */
	tdm_gpu_stats st = {0};
	while (st.awaits_word + st.awaits_event == 0) {
		sched_yield();
		cr_assert_eq(tdm_gpu_stats_get(e.gpu, &st), 0);
	}
	struct fault_state bad = {.gpu = e.gpu, .inject = TDM_SIM_FAULT_STICKY};
	cr_assert_eq(tdm_spawn(e.ex, fault_task, &bad, &grp), 0);
	cr_assert_eq(tdm_group_wait(&grp), 0);
	ASSERT_SEEN(&c.sn);
	ASSERT_SEEN(&bad.sn);
	cr_assert_eq(bad.rc, -EIO);
	cr_assert(c.rc == -EIO || c.rc == 0, "the copy's await: %d", c.rc);
	(void)tdm_host_unregister(e.gpu, c.dst); /* the dead device may refuse */
	(void)tdm_device_free(e.gpu, 0, c.src);  /* likewise: destroy frees it */
	env_close(&e); /* the simulator's stream threads are joined: no copy runs after this */
	cr_assert_eq(c.dst[DYING_COPY - 1], c.last_at_resume,
	             "the copy's task resumed (%d) while the copy still wrote", c.rc);
	free(c.dst);
}

Test(gpu_sim_words, a_copy_running_when_the_device_dies_ends_before_its_task_resumes, .timeout = 60)
{
	copy_running_when_the_device_dies(TDM_COMPLETION_WORD);
}

Test(gpu_sim_events, a_copy_running_when_the_device_dies_ends_before_its_task_resumes,
     .timeout = 60)
{
	copy_running_when_the_device_dies(TDM_COMPLETION_EVENT);
}

static atomic_int shut_done, shut_ok, shut_started;

static int shut_task(tdm_task *t, void *arg)
{
	struct many_state *c = arg;
	TDM_BEGIN(t);
	atomic_fetch_add(&shut_started, 1);
	/* With the GPU layer destroyed first, a late task finds it stopping: that is reported,
	 * and the task still runs to its end. */
	if (tdm_stream_lease(c->gpu, 0, 0, &c->s) != 0) {
		atomic_fetch_add(&shut_done, 1);
		return 0;
	}
	tdm_launch_spin(c->s, 20000000);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	if (tdm_task_result(t) == 0)
		atomic_fetch_add(&shut_ok, 1);
	tdm_stream_release(c->s);
	atomic_fetch_add(&shut_done, 1);
	TDM_END(t);
}

/* Both orders of destruction, with GPU awaits outstanding: every task runs to its end. */
static void shutdown_with_awaits_outstanding(tdm_backend backend, tdm_completion completion,
                                             bool gpu_first)
{
	struct env e;
	if (!env_open(&e, backend, completion, 2))
		cr_skip_test("no device for this backend");
	atomic_store(&shut_done, 0);
	atomic_store(&shut_ok, 0);
	atomic_store(&shut_started, 0);
	struct many_state st[64];
	for (int i = 0; i < 64; i++) {
		st[i].gpu = e.gpu;
		cr_assert_eq(tdm_spawn(e.ex, shut_task, &st[i], NULL), 0);
	}
	if (gpu_first) {
		/* Once they are running, pull the GPU layer out from under them. */
		while (atomic_load(&shut_started) < 64)
			sched_yield();
		cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
		cr_assert_eq(tdm_executor_destroy(e.ex), 0);
	} else {
		cr_assert_eq(tdm_executor_destroy(e.ex), 0);
		cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
	}
	cr_assert_eq(atomic_load(&shut_done), 64, "every task ran to its end");
	if (!gpu_first)
		cr_assert_eq(atomic_load(&shut_ok), 64);
}

/* ---- suites: one per backend and completion mechanism ---- */

#define GPU_TESTS(suite, backend, completion)                                                      \
	Test(suite, await_stream_sees_work_done, .timeout = 60)                                    \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		await_stream_sees_work_done(&e);                                                   \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, resumes_in_order_after_each_await, .timeout = 60)                              \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		resumes_in_order_after_each_await(&e);                                             \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, await_event, .timeout = 60)                                                    \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		await_event(&e);                                                                   \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, await_deadline, .timeout = 60)                                                 \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		await_deadline(&e);                                                                \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, many_awaits_outstanding, .timeout = 120)                                       \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 4))                                         \
			cr_skip_test("no device for this backend");                                \
		many_awaits_outstanding(&e);                                                       \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, shutdown_executor_first_with_awaits_outstanding, .timeout = 60)                \
	{                                                                                          \
		shutdown_with_awaits_outstanding(backend, completion, false);                      \
	}                                                                                          \
	Test(suite, shutdown_gpu_first_with_awaits_outstanding, .timeout = 60)                     \
	{                                                                                          \
		shutdown_with_awaits_outstanding(backend, completion, true);                       \
	}

GPU_TESTS(gpu_sim_words, TDM_BACKEND_SIM, TDM_COMPLETION_WORD)
GPU_TESTS(gpu_sim_events, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT)
GPU_TESTS(gpu_sim_adaptive, TDM_BACKEND_SIM, TDM_COMPLETION_ADAPTIVE)
#ifndef TANDEM_TEST_NO_CUDA
GPU_TESTS(gpu_cuda, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO)
GPU_TESTS(gpu_cuda_words, TDM_BACKEND_CUDA, TDM_COMPLETION_WORD)
GPU_TESTS(gpu_cuda_events, TDM_BACKEND_CUDA, TDM_COMPLETION_EVENT)
#endif

/* ---- faults ---- */

Test(gpu_sim_words, operation_fault_reaches_only_its_task, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_OP, false);
	env_close(&e);
}

Test(gpu_sim_events, operation_fault_reaches_only_its_task, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_OP, false);
	env_close(&e);
}

Test(gpu_sim_words, sticky_fault_fails_the_device, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_STICKY, true);
	env_close(&e);
}

Test(gpu_sim_events, sticky_fault_fails_the_device, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_STICKY, true);
	env_close(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
/* Criterion runs each test in its own process: the dead context does not outlive it. */
Test(gpu_cuda, trapping_kernel_fails_the_device, .timeout = 60)
{
	struct env e;
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		cr_skip_test("no CUDA device");
	fault_reaches_the_right_task(&e, -1, true);
	env_close(&e);
}
#endif

/* ---- bad input ---- */

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

Test(gpu_errors, destroy_cancels_far_deadlines, .timeout = 30)
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

Test(gpu_errors, create_refuses_each_bad_config_field, .timeout = 30)
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
#undef BAD_FIELD
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
Test(gpu_errors, debug_switches_refuse_unknown_values, .timeout = 30)
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

Test(gpu_errors, queries_and_leases_refuse_null_and_out_of_range_arguments, .timeout = 30)
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

struct await_state {
	tdm_stream *s;
	int rc, result;
};

static int await_stream_task(tdm_task *t, void *arg)
{
	struct await_state *a = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, a->rc = tdm_await_stream(t, a->s));
	a->result = tdm_task_result(t);
	TDM_END(t);
}

Test(gpu_errors, kernels_events_and_faults_refuse_bad_arguments, .timeout = 30)
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
	struct await_state a = {.s = s, .rc = 1, .result = 1};
	cr_assert_eq(run_one(&e, await_stream_task, &a), 0);
	cr_assert_eq(a.result, 0);
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

Test(gpu_errors, device_and_host_memory_calls_refuse_bad_arguments, .timeout = 30)
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

Test(gpu_errors, none_backend_refuses_device_calls, .timeout = 30)
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

Test(gpu_errors, destroy_refuses_null_and_the_executors_own_workers, .timeout = 30)
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

Test(gpu_errors, awaits_on_null_or_foreign_objects_fail_at_once_with_einval, .timeout = 30)
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

Test(gpu_errors, leases_and_awaits_during_destroy_fail_with_eshutdown, .timeout = 60)
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

Test(gpu_errors, destroy_waits_for_a_lease_in_progress, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	static struct lease_in_progress l;
	l.gpu = e.gpu;
	struct tdm__gdev *d = &e.gpu->devs[0];
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

Test(gpu_errors, a_failed_device_refuses_new_work_while_another_goes_on, .timeout = 30)
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
	struct await_state a = {.rc = 1, .result = 1};
	cr_assert_eq(tdm_stream_lease(e.gpu, 1, 0, &a.s), 0);
	cr_assert_eq(tdm_launch_spin(a.s, 1000), 0);
	cr_assert_eq(run_one(&e, await_stream_task, &a), 0);
	cr_assert_eq(a.rc, TDM_SUSPENDED);
	cr_assert_eq(a.result, 0);
	cr_assert_eq(tdm_stream_release(a.s), 0);
	tdm_test_assert_usable(e.ex);
	env_close(&e);
}

/* ---- placement and memory across devices (sim, two devices) ---- */

static void open_two(struct env *e, int placement)
{
	e->ex = tdm_test_create(2);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.sim_devices = 2;
	g.placement = placement;
	cr_assert_eq(tdm_gpu_create(&e->gpu, e->ex, &g), 0);
	cr_assert_eq(tdm_gpu_device_count(e->gpu), 2);
}

/* Kills device `dev` of e with a sticky fault and waits until it refuses work. */
static void kill_device(struct env *e, int dev)
{
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e->gpu, dev, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_launch_fault(s), 0);
	while (tdm_launch_spin(s, 0) == 0)
		sched_yield();
	tdm_stream_release(s);
}

/* A lease for any device goes to one that has not failed, whatever the policy (least loaded
 * picked the failed device every time: its leases were all released), and -ENODEV once every
 * device failed. */
Test(gpu_placement, any_device_skips_a_failed_one, .timeout = 30)
{
	static const int policies[] = {TDM_PLACE_ROUND_ROBIN, TDM_PLACE_LEAST_LOADED,
	                               TDM_PLACE_NEAREST};
	for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
		struct env e;
		open_two(&e, policies[p]);
		kill_device(&e, 0);
		tdm_stream *held[20];
		for (int i = 0; i < 20; i++) {
			cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &held[i]), 0,
			             "policy %d, lease %d", policies[p], i);
			cr_assert_eq(tdm_stream_device(held[i]), 1);
		}
		for (int i = 0; i < 20; i++)
			cr_assert_eq(tdm_stream_release(held[i]), 0);
		kill_device(&e, 1);
		tdm_stream *s;
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), -ENODEV);
		env_close(&e);
	}
}

/* A lease for any device that finds the placement's pick full takes a stream of another device,
 * whatever the policy (it said -EBUSY while the other device had streams free), and says -EBUSY
 * only when every device is full; it leases again once a stream comes back. */
Test(gpu_placement, any_device_falls_over_to_a_device_with_room, .timeout = 30)
{
	static const int policies[] = {TDM_PLACE_ROUND_ROBIN, TDM_PLACE_LEAST_LOADED,
	                               TDM_PLACE_NEAREST};
	enum { MAX_HELD = 256 };
	for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
		struct env e;
		open_two(&e, policies[p]);
		tdm_stream *held[MAX_HELD], *s;
		int n0 = 0, n;
		/* Device 0 full: every stream of its set held exclusively. */
		while (tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s) == 0) {
			cr_assert_lt(n0, MAX_HELD / 2 - 1);
			held[n0++] = s;
		}
		cr_assert_gt(n0, 0);
		/* Shared leases for any device go to device 1 (round robin picks device 0 for one
		 * of every two; least loaded picks it while device 1 holds more leases, as here).
		 */
		tdm_stream *load[MAX_HELD / 2];
		for (int i = 0; i <= n0; i++)
			cr_assert_eq(tdm_stream_lease(e.gpu, 1, 0, &load[i]), 0);
		for (int i = 0; i < 4; i++) {
			cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), 0,
			             "policy %d, shared lease %d", policies[p], i);
			cr_assert_eq(tdm_stream_device(s), 1);
			cr_assert_eq(tdm_stream_release(s), 0);
		}
		for (int i = 0; i <= n0; i++)
			cr_assert_eq(tdm_stream_release(load[i]), 0);
		/* Exclusive ones too, until device 1 is full as well (its set is as large). */
		for (n = n0; n < 2 * n0; n++) {
			cr_assert_eq(
			    tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, TDM_STREAM_EXCLUSIVE, &held[n]),
			    0, "policy %d, exclusive lease %d", policies[p], n - n0);
			cr_assert_eq(tdm_stream_device(held[n]), 1);
		}
		/* Both full: -EBUSY, for an exclusive lease and for a shared one. */
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, TDM_STREAM_EXCLUSIVE, &s),
		             -EBUSY);
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), -EBUSY);
		/* One of device 1's streams back: leases for any device take it again. */
		cr_assert_eq(tdm_stream_release(held[--n]), 0);
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), 0);
			cr_assert_eq(tdm_stream_device(s), 1);
			cr_assert_eq(tdm_stream_release(s), 0);
		}
		while (n > 0)
			cr_assert_eq(tdm_stream_release(held[--n]), 0);
		env_close(&e);
	}
}

Test(gpu_placement, round_robin_spreads_leases_over_devices)
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	tdm_stream *s[4];
	int seen[2] = {0, 0};
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s[i]), 0);
		seen[tdm_stream_device(s[i])]++;
	}
	cr_assert_eq(seen[0], 2);
	cr_assert_eq(seen[1], 2);
	for (int i = 0; i < 4; i++)
		tdm_stream_release(s[i]);
	env_close(&e);
}

Test(gpu_placement, least_loaded_picks_the_device_with_fewer_leases)
{
	struct env e;
	open_two(&e, TDM_PLACE_LEAST_LOADED);
	tdm_stream *held[3], *s;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &held[i]), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), 0);
		cr_assert_eq(tdm_stream_device(s), 1, "device 0 holds more leases");
		tdm_stream_release(s);
	}
	for (int i = 0; i < 3; i++)
		tdm_stream_release(held[i]);
	env_close(&e);
}

/* A worker's shared leases, held at once: its own stream alone without the two choices. */
#define BALANCE_LEASES 10
static tdm_stream *balance_held[BALANCE_LEASES];
static int balance_rc;

static int balance_task(tdm_task *t, void *arg)
{
	tdm_gpu *gpu = arg;
	(void)t;
	for (int i = 0; i < BALANCE_LEASES; i++)
		if ((balance_rc = tdm_stream_lease(gpu, 0, TDM_STREAM_SHARED, &balance_held[i])) !=
		    0)
			return balance_rc;
	return 0;
}

/*
 * Two streams made (by two leases from this thread, which take the set's slots in turn), one
 * of them still leased: a worker's shared leases then go where clearly fewer leases are held,
 * not all to the worker's own stream.
 */
Test(gpu_placement, shared_leases_balance_over_the_stream_set)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = 2;
	cr_assert(env_open_cfg(&e, 1, &g));
	tdm_stream *a, *b;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &b), 0);
	const void *sa = tdm_lease_stream(a), *sb = tdm_lease_stream(b);
	cr_assert_neq(sa, sb, "two leases from outside the workers take the two slots in turn");
	cr_assert_eq(tdm_stream_release(b), 0);
	cr_assert_eq(run_one(&e, balance_task, e.gpu), 0);
	cr_assert_eq(balance_rc, 0);
	int on_a = 1, on_b = 0; /* a's own lease counts */
	for (int i = 0; i < BALANCE_LEASES; i++) {
		const void *si = tdm_lease_stream(balance_held[i]);
		cr_assert(si == sa || si == sb);
		on_a += si == sa;
		on_b += si == sb;
	}
	/* A stream is left for one with at least 3 fewer leases (at these counts). */
	cr_assert_leq(abs(on_a - on_b), 3, "leases: %d on one stream, %d on the other", on_a, on_b);
	for (int i = 0; i < BALANCE_LEASES; i++)
		cr_assert_eq(tdm_stream_release(balance_held[i]), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	env_close(&e);
}

Test(gpu_placement, bad_placement_is_refused)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	tdm_gpu_config g;
	cr_assert_eq(tdm_executor_create(&ex, NULL), 0);
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.placement = 9;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

struct peer_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *d0, *d1;
	int rc_in, rc_peer, rc_out, result;
	struct seen sn;
};

static int peer_task(tdm_task *t, void *arg)
{
	struct peer_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	c->rc_in = tdm_memcpy_async(c->s, c->d0, c->host, LEN * sizeof(int), TDM_COPY_H2D);
	c->rc_peer = tdm_memcpy_peer_async(c->s, c->d1, 1, c->d0, 0, LEN * sizeof(int));
	memset(c->host + LEN, 0, LEN * sizeof(int));
	c->rc_out = tdm_memcpy_async(c->s, c->host + LEN, c->d1, LEN * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

Test(gpu_memory, peer_copy_moves_data_between_devices)
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	struct peer_state c = {.gpu = e.gpu, .rc_in = 1, .rc_peer = 1, .rc_out = 1, .result = 1};
	cr_assert_eq(tdm_host_alloc(e.gpu, 2 * LEN * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&c.d0), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 1, LEN * sizeof(int), (void **)&c.d1), 0);
	for (int i = 0; i < LEN; i++)
		c.host[i] = 3 * i + 1;
	cr_assert_eq(run_one(&e, peer_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc_in, 0, "copy to device 0: %s", tdm_strerror(c.rc_in));
	cr_assert_eq(c.rc_peer, 0, "peer copy to device 1: %s", tdm_strerror(c.rc_peer));
	cr_assert_eq(c.rc_out, 0, "copy from device 1: %s", tdm_strerror(c.rc_out));
	cr_assert_eq(c.result, 0, "the await: %s", tdm_strerror(c.result));
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], 3 * i + 1);
	tdm_device_free(e.gpu, 0, c.d0);
	tdm_device_free(e.gpu, 1, c.d1);
	tdm_host_free(e.gpu, c.host);
	env_close(&e);
}

struct pageable_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *in, *out, *dev; /* in and out: plain malloc, pageable */
	int rc_in, rc_out, res, after;
	struct seen sn;
};

static int pageable_task(tdm_task *t, void *arg)
{
	struct pageable_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	c->rc_in = tdm_memcpy_async(c->s, c->dev, c->in, LEN * sizeof(int), TDM_COPY_H2D);
	c->rc_out = tdm_memcpy_async(c->s, c->out, c->dev, LEN * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void pageable_copies(tdm_backend backend, int policy)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = backend;
	g.pageable = policy;
	if (!env_open_cfg(&e, 2, &g)) {
		cr_assert_neq(backend, TDM_BACKEND_SIM, "the simulator always opens");
		cr_skip_test("no device for this backend");
	}
	struct pageable_state st = {.gpu = e.gpu, .rc_in = 1, .rc_out = 1};
	st.in = malloc(LEN * sizeof(int));
	st.out = calloc(LEN, sizeof(int));
	cr_assert_not_null(st.in);
	cr_assert_not_null(st.out);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&st.dev), 0);
	for (int i = 0; i < LEN; i++)
		st.in[i] = i ^ 0x5a5a;
	cr_assert_eq(run_one(&e, pageable_task, &st), 0);
	ASSERT_SEEN(&st.sn);
	if (policy == TDM_PAGEABLE_STAGE) {
		cr_assert_eq(st.rc_in, 0);
		cr_assert_eq(st.rc_out, 0);
		for (int i = 0; i < LEN; i++)
			cr_assert_eq(st.out[i], i ^ 0x5a5a, "staged round trip at %d", i);
		tdm_pinned_stats ps;
		cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), 0);
		cr_assert_eq(ps.bytes_in_use, 0, "staging blocks went back to the pool");
	} else {
		cr_assert_eq(st.rc_in, -EFAULT);
		cr_assert_eq(st.rc_out, -EFAULT);
	}
	tdm_device_free(e.gpu, 0, st.dev);
	free(st.in);
	free(st.out);
	env_close(&e);
}

Test(gpu_memory, pageable_copies_are_staged_through_the_pinned_pool, .timeout = 30)
{
	pageable_copies(TDM_BACKEND_SIM, TDM_PAGEABLE_STAGE);
}

Test(gpu_memory, pageable_copies_are_refused_when_asked, .timeout = 30)
{
	pageable_copies(TDM_BACKEND_SIM, TDM_PAGEABLE_REFUSE);
}

/*
 * Data going round through one pageable host buffer on one stream: src to device buffer a, a to
 * h, the last `tail` ints of h to device buffer b, b to back; one await. Staged, the copy into h
 * happens in a host function on the stream, and the copy from h must read h after it. It read h
 * at the call before, and sent what h held then: zeros.
 *   - queued: the copies queue behind 2 ms of work (h is still to be written at the call);
 *   - mid-write: 32 MiB, and the copy from h is made once a quarter of h has changed (the host
 *     function is writing it: its ticket was taken off the list before it wrote, so the copy
 *     found nothing pending). Not under ThreadSanitizer: it reads h during the write, on
 *     purpose. Not glibc's first bytes either: its memcpy stores them last.
 *   - dead: a sticky fault ahead of the copies; the staged blocks, the in-order one among them,
 *     go back to the pool with the device's failure.
 */
enum round_kind { ROUND_QUEUED, ROUND_MID_WRITE, ROUND_DEAD };

struct round_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	enum round_kind kind;
	size_t n, tail;
	int *src, *a, *h, *b, *back;
	int rc[4], result, saw_write;
	struct seen sn;
};

static int round_task(tdm_task *t, void *arg)
{
	struct round_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	c->rc[0] = tdm_memcpy_async(c->s, c->a, c->src, c->n * sizeof(int), TDM_COPY_H2D);
	if (c->kind != ROUND_MID_WRITE)
		SEE(&c->sn, tdm_launch_spin(c->s, 2000000));
	if (c->kind == ROUND_DEAD)
		SEE(&c->sn, tdm_sim_inject(c->s, TDM_SIM_FAULT_STICKY));
	c->rc[1] = tdm_memcpy_async(c->s, c->h, c->a, c->n * sizeof(int), TDM_COPY_D2H);
	/* Until the host function's write has reached a quarter of h, 10 s at most. */
	for (uint64_t until = tdm_now_ns() + 10000000000ull;
	     c->kind == ROUND_MID_WRITE && !c->saw_write && tdm_now_ns() < until;)
		c->saw_write = __atomic_load_n(&c->h[c->n / 4], __ATOMIC_RELAXED) != 0;
	c->rc[2] = tdm_memcpy_async(c->s, c->b, c->h + (c->n - c->tail), c->tail * sizeof(int),
	                            TDM_COPY_H2D);
	c->rc[3] = tdm_memcpy_async(c->s, c->back, c->b, c->tail * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	(void)tdm_stream_release(c->s); /* a dead device may refuse */
	TDM_END(t);
}

static void pageable_round_trip(tdm_backend backend, enum round_kind kind, size_t n, size_t tail)
{
	struct env e;
	if (!env_open(&e, backend, TDM_COMPLETION_AUTO, 2)) {
		cr_assert_neq(backend, TDM_BACKEND_SIM, "the simulator always opens");
		cr_skip_test("no device for this backend");
	}
	struct round_state c = {
	    .gpu = e.gpu, .kind = kind, .n = n, .tail = tail, .rc = {1, 1, 1, 1}, .result = 1};
	c.src = malloc(n * sizeof(int));
	c.h = calloc(n, sizeof(int));
	c.back = calloc(tail, sizeof(int));
	cr_assert(c.src != NULL && c.h != NULL && c.back != NULL);
	for (size_t i = 0; i < n; i++)
		c.src[i] = (int)i + 1;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, n * sizeof(int), (void **)&c.a), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, tail * sizeof(int), (void **)&c.b), 0);
	cr_assert_eq(run_one(&e, round_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	tdm_pinned_stats ps;
	cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), 0);
	cr_assert_eq(ps.bytes_in_use, 0, "staging blocks went back to the pool");
	if (kind == ROUND_DEAD) {
		cr_assert_eq(c.result, -EIO, "the await: %s", tdm_strerror(c.result));
	} else {
		for (int k = 0; k < 4; k++)
			cr_assert_eq(c.rc[k], 0, "copy %d: %s", k, tdm_strerror(c.rc[k]));
		cr_assert_eq(c.result, 0, "the await: %s", tdm_strerror(c.result));
		cr_assert(kind != ROUND_MID_WRITE || c.saw_write, "the write into h was seen");
		size_t wrong = 0;
		for (size_t i = 0; i < tail; i++)
			wrong += c.back[i] != c.src[n - tail + i];
		cr_assert_eq(wrong, 0, "%zu of %zu ints sent before the pending write reached them",
		             wrong, tail);
	}
	tdm_device_free(e.gpu, 0, c.a);
	tdm_device_free(e.gpu, 0, c.b);
	free(c.src);
	free(c.h);
	free(c.back);
	env_close(&e);
}

Test(gpu_memory, pageable_round_trip_through_one_buffer_keeps_stream_order, .timeout = 30)
{
	pageable_round_trip(TDM_BACKEND_SIM, ROUND_QUEUED, LEN, LEN);
}

Test(gpu_memory, a_copy_from_a_buffer_being_written_waits_for_the_write, .timeout = 60)
{
#ifdef TDM_TEST_TSAN
	cr_skip_test("reads the buffer while the host function writes it, on purpose");
#endif
	pageable_round_trip(TDM_BACKEND_SIM, ROUND_MID_WRITE, (size_t)8 << 20, (size_t)256 << 10);
}

Test(gpu_memory, a_dead_devices_round_trip_gives_its_blocks_back, .timeout = 30)
{
	pageable_round_trip(TDM_BACKEND_SIM, ROUND_DEAD, LEN, LEN);
}

#ifndef TANDEM_TEST_NO_CUDA
Test(gpu_memory, pageable_round_trip_through_one_buffer_keeps_stream_order_cuda, .timeout = 30)
{
	pageable_round_trip(TDM_BACKEND_CUDA, ROUND_QUEUED, LEN, LEN);
}

/* On CUDA, pageable is what cudaPointerGetAttributes calls unregistered host memory, and the
 * staged copy's pinned blocks come back through host functions (cudaLaunchHostFunc). */
Test(gpu_memory, pageable_copies_are_staged_through_the_pinned_pool_cuda, .timeout = 30)
{
	pageable_copies(TDM_BACKEND_CUDA, TDM_PAGEABLE_STAGE);
}

Test(gpu_memory, pageable_copies_are_refused_when_asked_cuda, .timeout = 30)
{
	pageable_copies(TDM_BACKEND_CUDA, TDM_PAGEABLE_REFUSE);
}
#endif

/*
 * A device that dies with staged copies queued skips their host functions, as CUDA does after a
 * context error, so nothing else would give their pinned blocks back: the device's failure does,
 * and the pool (its cap shared by every device) has them again.
 */
static int dead_staging_task(tdm_task *t, void *arg)
{
	struct pageable_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	/* 200 ms of work ahead: the copies and their host functions wait in the queue (a task
	 * held off its CPU longer than that sees its second copy refused, and still checks that
	 * the first one's block came back). */
	SEE(&c->sn, tdm_launch_spin(c->s, 200000000));
	SEE(&c->sn, tdm_sim_inject(c->s, TDM_SIM_FAULT_STICKY));
	c->rc_in = tdm_memcpy_async(c->s, c->dev, c->in, LEN * sizeof(int), TDM_COPY_H2D);
	c->rc_out = tdm_memcpy_async(c->s, c->out, c->dev, LEN * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->res = tdm_task_result(t);
	/* Refused by the dead device, whoever noticed the death first. */
	c->after = tdm_launch_spin(c->s, 1000);
	tdm_stream_release(c->s);
	TDM_END(t);
}

Test(gpu_memory, a_dead_devices_staged_copies_give_their_blocks_back, .timeout = 30)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct pageable_state st = {.gpu = e.gpu, .rc_in = 1, .rc_out = 1, .res = 1};
	st.in = calloc(LEN, sizeof(int));
	st.out = calloc(LEN, sizeof(int));
	cr_assert_not_null(st.in);
	cr_assert_not_null(st.out);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&st.dev), 0);
	cr_assert_eq(run_one(&e, dead_staging_task, &st), 0);
	ASSERT_SEEN(&st.sn);
	cr_assert(st.rc_in == 0 || st.rc_in == -EIO, "the first copy: %d", st.rc_in);
	cr_assert(st.rc_out == 0 || st.rc_out == -EIO, "the second copy: %d", st.rc_out);
	cr_assert_eq(st.res, -EIO);
	cr_assert_eq(st.after, -EIO);
	tdm_pinned_stats ps;
	cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), 0);
	cr_assert_eq(ps.bytes_in_use, 0, "%llu bytes of staging kept by the dead device",
	             (unsigned long long)ps.bytes_in_use);
	(void)tdm_device_free(e.gpu, 0, st.dev); /* the dead device may refuse: destroy frees it */
	free(st.in);
	free(st.out);
	env_close(&e);
}

/*
 * In event completion a stream await records a pooled event; after an operation's fault that
 * record failed. The event goes back to the pool, and its next owner's await, made before any
 * record of its own, is complete with 0 (as tdm_await_event says), not the old -EIO. The pool
 * hands the newest event out first, so the owner gets that very event.
 */
struct stale_event {
	tdm_gpu *gpu;
	tdm_stream *s;
	tdm_event *ev;
	int faulted, rc;
	struct seen sn;
};

static int stale_event_task(tdm_task *t, void *arg)
{
	struct stale_event *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	SEE(&c->sn, tdm_sim_inject(c->s, TDM_SIM_FAULT_OP));
	SEE(&c->sn, tdm_launch_spin(c->s, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->faulted = tdm_task_result(t);
	tdm_stream_release(c->s);
	SEE(&c->sn, tdm_event_get(c->gpu, 0, &c->ev));
	if (c->sn.rc != 0)
		return 0;
	TDM_AWAIT(t, tdm_await_event(t, c->ev));
	c->rc = tdm_task_result(t);
	TDM_END(t);
}

Test(gpu_sim_events, a_pooled_event_forgets_a_failed_record_for_its_next_owner, .timeout = 30)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT, 1));
	struct stale_event c = {.gpu = e.gpu, .faulted = 1, .rc = 1};
	cr_assert_eq(run_one(&e, stale_event_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.faulted, -EIO, "the faulted operation's await");
	cr_assert_eq(c.rc, 0, "a new owner's event, never recorded: %d", c.rc);
	cr_assert_eq(tdm_event_put(c.ev), 0);
	close_usable(&e);
}

struct ordered_free_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *dev;
	int rc_alloc, rc_free;
	struct seen sn; /* the lease, and the uses between the two */
};

/* Allocates on the stream, uses the memory, frees it right after the last use, then awaits. */
static int ordered_free_task(tdm_task *t, void *arg)
{
	struct ordered_free_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	c->rc_alloc = tdm_device_alloc_async(c->s, LEN * sizeof(int), (void **)&c->dev);
	if (c->rc_alloc == 0) {
		SEE(&c->sn,
		    tdm_memcpy_async(c->s, c->dev, c->host, LEN * sizeof(int), TDM_COPY_H2D));
		/* the free must wait for this and the copy */
		SEE(&c->sn, tdm_launch_spin(c->s, 5000000));
		SEE(&c->sn,
		    tdm_memcpy_async(c->s, c->host + LEN, c->dev, LEN * sizeof(int), TDM_COPY_D2H));
		c->rc_free = tdm_device_free_async(c->s, c->dev);
	}
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void stream_ordered_free_after_last_use(struct env *e)
{
	struct ordered_free_state c = {.gpu = e->gpu, .rc_alloc = 1, .rc_free = 1};
	cr_assert_eq(tdm_host_alloc(e->gpu, 2 * LEN * sizeof(int), (void **)&c.host), 0);
	for (int i = 0; i < LEN; i++) {
		c.host[i] = 7 * i;
		c.host[LEN + i] = -1;
	}
	cr_assert_eq(run_one(e, ordered_free_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc_alloc, 0);
	cr_assert_eq(c.rc_free, 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], 7 * i, "read back before the free ran, at %d", i);
	tdm_host_free(e->gpu, c.host);
}

Test(gpu_memory, stream_ordered_free_after_last_use_sim, .timeout = 30)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	stream_ordered_free_after_last_use(&e);
	env_close(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
Test(gpu_memory, stream_ordered_free_after_last_use_cuda, .timeout = 30)
{
	struct env e;
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		cr_skip_test("no CUDA device");
	stream_ordered_free_after_last_use(&e);
	env_close(&e);
}
#endif

Test(gpu_memory, managed_memory_past_free_memory_is_refused)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *p;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, (size_t)1 << 50, &p), -ENOMEM);
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, 1 << 20, &p), 0);
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	env_close(&e);
}

/*
 * The refusal is against the device's free memory, exact at the boundary: with all of the
 * simulated device but 1 MiB held (device memory in 1 GiB blocks, which the host reserves but
 * never touches), 1 MiB + 1 is refused, 1 MiB granted, and that managed block counts against the
 * device. (The test above cannot fail: the host's allocator refuses 1 PiB as well.) Skipped under
 * the sanitizers and valgrind, whose allocators touch shadow memory for every reserved byte.
 */
#define HOLD_BLOCK ((size_t)1 << 30)
#define HOLD_MIB ((size_t)1 << 20)

Test(gpu_memory, managed_memory_one_byte_past_free_memory_is_refused, .timeout = 60)
{
	if (TDM_TEST_SANITIZED || TDM_TEST_UNDER_VALGRIND())
		cr_skip_test("reserves the simulated device's 80 GiB of address space");
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(e.gpu, 0, &info), 0);
	cr_assert_gt(info.memory_bytes, 2 * HOLD_MIB, "the device's memory: %llu bytes",
	             (unsigned long long)info.memory_bytes);
	size_t hold = (size_t)info.memory_bytes - HOLD_MIB, nblocks = 0;
	void *blocks[256];
	while (hold > 0) {
		cr_assert_lt(nblocks, sizeof(blocks) / sizeof(blocks[0]), "a device of %llu bytes",
		             (unsigned long long)info.memory_bytes);
		size_t n = hold < HOLD_BLOCK ? hold : HOLD_BLOCK;
		int rc = tdm_device_alloc(e.gpu, 0, n, &blocks[nblocks]);
		if (rc == -ENOMEM && nblocks > 0) { /* the host would not reserve more */
			while (nblocks > 0)
				tdm_device_free(e.gpu, 0, blocks[--nblocks]);
			env_close(&e);
			cr_skip_test("the host reserved only %llu bytes of address space",
			             (unsigned long long)(info.memory_bytes - HOLD_MIB - hold));
		}
		cr_assert_eq(rc, 0, "holding device memory: %s", tdm_strerror(rc));
		nblocks++;
		hold -= n;
	}
	void *p = NULL, *q = NULL;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, HOLD_MIB + 1, &p), -ENOMEM,
	             "one byte past free memory");
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, HOLD_MIB, &p), 0, "all of free memory");
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, 1, &q), -ENOMEM,
	             "the managed block counts against the device");
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, HOLD_MIB, &p), 0, "freed, it is free again");
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	while (nblocks > 0)
		tdm_device_free(e.gpu, 0, blocks[--nblocks]);
	env_close(&e);
}

struct managed_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *managed;
	int peer; /* the device the memory visits between device 0 and the host */
	int rc_to_dev, rc_to_peer, rc_to_host, result;
	struct seen sn;
};

/* Managed memory moved about by prefetches ordered between copies on one stream: to device 0,
 * filled from the host, to the peer device, back to the host (device < 0), copied out; awaited
 * once. */
static int managed_task(tdm_task *t, void *arg)
{
	struct managed_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	c->rc_to_dev = tdm_mem_prefetch(c->s, c->managed, LEN * sizeof(int), 0);
	SEE(&c->sn, tdm_memcpy_async(c->s, c->managed, c->host, LEN * sizeof(int), TDM_COPY_H2D));
	c->rc_to_peer = tdm_mem_prefetch(c->s, c->managed, LEN * sizeof(int), c->peer);
	c->rc_to_host = tdm_mem_prefetch(c->s, c->managed, LEN * sizeof(int), -1);
	SEE(&c->sn,
	    tdm_memcpy_async(c->s, c->host + LEN, c->managed, LEN * sizeof(int), TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

/* Advice of each kind, for a device and for the host, then prefetches to device 0, to the peer
 * and to the host between copies: all accepted, and the data goes through. */
static void managed_memory_is_prefetched_and_advised(struct env *e, int peer)
{
	const size_t bytes = LEN * sizeof(int);
	struct managed_state c = {.gpu = e->gpu,
	                          .peer = peer,
	                          .rc_to_dev = 1,
	                          .rc_to_peer = 1,
	                          .rc_to_host = 1,
	                          .result = 1};
	cr_assert_eq(tdm_managed_alloc(e->gpu, 0, bytes, (void **)&c.managed), 0);
	cr_assert_eq(tdm_host_alloc(e->gpu, 2 * bytes, (void **)&c.host), 0);
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_READ_MOSTLY, 0), 0);
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_PREFERRED_LOCATION, peer),
	             0);
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_PREFERRED_LOCATION, -1), 0,
	             "device < 0 is the host");
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_ACCESSED_BY, peer), 0);
	for (int i = 0; i < LEN; i++) {
		c.host[i] = 5 * i + 3;
		c.host[LEN + i] = -1;
	}
	cr_assert_eq(run_one(e, managed_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc_to_dev, 0, "prefetch to device 0: %s", tdm_strerror(c.rc_to_dev));
	cr_assert_eq(c.rc_to_peer, 0, "prefetch to device %d: %s", peer,
	             tdm_strerror(c.rc_to_peer));
	cr_assert_eq(c.rc_to_host, 0, "prefetch to the host: %s", tdm_strerror(c.rc_to_host));
	cr_assert_eq(c.result, 0, "the await: %s", tdm_strerror(c.result));
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], 5 * i + 3, "managed memory round trip at %d", i);
	cr_assert_eq(tdm_managed_free(e->gpu, c.managed), 0);
	tdm_host_free(e->gpu, c.host);
}

Test(gpu_memory, managed_memory_is_prefetched_and_advised, .timeout = 30)
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	managed_memory_is_prefetched_and_advised(&e, 1);
	env_close(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
/*
 * The same on CUDA (cudaMallocManaged, cudaMemAdvise, cudaMemPrefetchAsync under the calls),
 * with the second device as the peer where there is one. Before it, the refusal: CUDA itself
 * grants managed memory past the device's size (it oversubscribes; on the H200 with CUDA 13.0,
 * cudaMallocManaged of the device's size + 1 byte returned success), so the -ENOMEM is tandem's
 * check alone; the refused call allocates nothing.
 */
Test(gpu_memory, managed_memory_on_cuda, .timeout = 60)
{
	struct env e;
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		cr_skip_test("no CUDA device");
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(e.gpu, 0, &info), 0);
	void *p = NULL;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, (size_t)info.memory_bytes + 1, &p), -ENOMEM,
	             "one byte past the device's %llu bytes",
	             (unsigned long long)info.memory_bytes);
	cr_assert_null(p);
	int n = tdm_gpu_device_count(e.gpu);
	cr_assert_eq(tdm_mem_advise(e.gpu, &info, sizeof info, TDM_ADVISE_READ_MOSTLY, n), -EINVAL,
	             "device %d of %d", n, n);
	managed_memory_is_prefetched_and_advised(&e, n > 1 ? 1 : 0);
	tdm_test_assert_usable(e.ex);
	env_close(&e);
}
#endif

/*
 * The documented -EINVAL of each argument (memory.c checks them before the backend, which
 * accepts a zero-sized prefetch and ignores an advice's size), and the layer goes on working:
 * the same managed memory, prefetched again, carries a copy's round trip. The sim takes any
 * memory for prefetch and advice, managed or not, so that is not refused here.
 */
Test(gpu_memory, prefetch_and_advise_refuse_bad_arguments, .timeout = 30)
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	const size_t bytes = LEN * sizeof(int);
	void *p;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, bytes, &p), 0);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);

	cr_assert_eq(tdm_mem_prefetch(NULL, p, bytes, 0), -EINVAL, "no stream");
	cr_assert_eq(tdm_mem_prefetch(s, NULL, bytes, 0), -EINVAL, "no memory");
	cr_assert_eq(tdm_mem_prefetch(s, p, 0, 0), -EINVAL, "zero bytes");
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 2), -EINVAL, "device 2 of 2");
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 1000), -EINVAL, "device 1000 of 2");

	cr_assert_eq(tdm_mem_advise(NULL, p, bytes, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL, "no gpu");
	cr_assert_eq(tdm_mem_advise(e.gpu, NULL, bytes, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL,
	             "no memory");
	cr_assert_eq(tdm_mem_advise(e.gpu, p, 0, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL, "zero bytes");
	cr_assert_eq(tdm_mem_advise(e.gpu, p, bytes, (tdm_mem_advice)0, 0), -EINVAL,
	             "advice below the range");
	cr_assert_eq(
	    tdm_mem_advise(e.gpu, p, bytes, (tdm_mem_advice)(TDM_ADVISE_ACCESSED_BY + 1), 0),
	    -EINVAL, "advice above the range");
	cr_assert_eq(tdm_mem_advise(e.gpu, p, bytes, TDM_ADVISE_ACCESSED_BY, 2), -EINVAL,
	             "device 2 of 2");

	/* Still usable: the refused calls left the stream and the memory as they were. */
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 0), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	struct copy_state c = {.gpu = e.gpu, .dev = p};
	cr_assert_eq(tdm_host_alloc(e.gpu, bytes, (void **)&c.host), 0);
	for (int i = 0; i < LEN; i++)
		c.host[i] = i ^ 0x3c3c;
	cr_assert_eq(run_one(&e, copy_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.steps, 2);
	cr_assert_eq(c.results[0], 0);
	cr_assert_eq(c.results[1], 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[i], i ^ 0x3c3c, "data at %d came back through managed memory",
		             i);
	tdm_test_assert_usable(e.ex);
	tdm_host_free(e.gpu, c.host);
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	env_close(&e);
}

/* A prefetch is an operation of its stream: once the device has failed (a sticky fault on
 * another stream), it is refused at once with -EIO, as every enqueue is. */
Test(gpu_memory, prefetch_on_a_failed_device_is_refused, .timeout = 30)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	const size_t bytes = LEN * sizeof(int);
	void *p;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, bytes, &p), 0);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 0), 0, "the device still works");
	struct fault_state bad = {.gpu = e.gpu, .inject = TDM_SIM_FAULT_STICKY};
	cr_assert_eq(run_one(&e, fault_task, &bad), 0);
	ASSERT_SEEN(&bad.sn);
	cr_assert_eq(bad.rc, -EIO);
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 0), -EIO);
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, -1), -EIO);
	(void)tdm_stream_release(s); /* the dead device may refuse */
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	env_close(&e);
}

/* ---- many tasks awaiting one shared stream ---- */

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SHARED_ROUNDS 40
#else
#define SHARED_ROUNDS 150
#endif

static atomic_int shared_done;
static tdm_stream *shared_stream;

static int shared_task(tdm_task *t, void *arg)
{
	(void)arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_stream(t, shared_stream));
	atomic_fetch_add(&shared_done, 1);
	TDM_END(t);
}

/*
 * Awaits of several workers on one stream, queued behind a kernel so that their completion
 * writes run back to back: the writes must land in the order of the awaits' numbers, or the word
 * can end below an await's number and that await never resumes (the test then times out).
 */
static void concurrent_awaits_on_one_shared_stream(tdm_completion completion)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.completion = completion;
	cr_assert(env_open_cfg(&e, 4, &g));
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &shared_stream), 0);
	atomic_store(&shared_done, 0);
	for (int r = 0; r < SHARED_ROUNDS; r++) {
		tdm_group grp;
		tdm_group_init(&grp, e.ex);
		tdm_launch_spin(shared_stream, 200000);
		for (int i = 0; i < 64; i++)
			cr_assert_eq(tdm_spawn(e.ex, shared_task, NULL, &grp), 0);
		cr_assert_eq(tdm_group_wait(&grp), 0);
	}
	cr_assert_eq(atomic_load(&shared_done), 64 * SHARED_ROUNDS);
	tdm_stream_release(shared_stream);
	env_close(&e);
}

Test(gpu_sim_words, concurrent_awaits_on_one_shared_stream_all_resume, .timeout = 120)
{
	concurrent_awaits_on_one_shared_stream(TDM_COMPLETION_WORD);
}

/* Adaptive: words and events mixed in one stream's queue (the 200 us kernel stalls the stream
 * past the default 50 us, so awaits switch between the two); every await must still resume. */
Test(gpu_sim_adaptive, concurrent_awaits_on_one_shared_stream_all_resume, .timeout = 120)
{
	concurrent_awaits_on_one_shared_stream(TDM_COMPLETION_ADAPTIVE);
}

/* ---- adaptive completion: which mechanism each await uses ---- */

struct adapt_state {
	tdm_stream *s;
	uint32_t ns[16]; /* kernel length of each step */
	int nsteps, step;
	int rc;
	tdm_gpu *gpu;
	tdm_gpu_stats before[16]; /* the counts before each step's await */
	tdm_gpu_stats last;
	struct seen sn;
};

/* An executor of `workers` and a sim GPU layer with adaptive completion, whose awaits count as
 * stalled past stall_us. */
static void env_open_adaptive(struct env *e, unsigned workers, unsigned stall_us)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.completion = TDM_COMPLETION_ADAPTIVE;
	g.stall_us = stall_us;
	cr_assert(env_open_cfg(e, workers, &g));
}

/* One kernel and one await per step, with the counts taken before each await. */
static int adapt_task(tdm_task *t, void *arg)
{
	struct adapt_state *a = arg;
	TDM_BEGIN(t);
	for (a->step = 0; a->step < a->nsteps; a->step++) {
		SEE(&a->sn, tdm_launch_spin(a->s, a->ns[a->step]));
		SEE(&a->sn, tdm_gpu_stats_get(a->gpu, &a->before[a->step]));
		TDM_AWAIT(t, tdm_await_stream(t, a->s));
		if (tdm_task_result(t) != 0)
			a->rc = tdm_task_result(t);
	}
	TDM_END(t);
}

/*
 * A stream starts on events; awaits that complete soon after reaching the head switch it to
 * words; one that waits past stall_us switches it back to events, until a quick one again.
 * stall_us is 200 ms here so that only the 600 ms kernel counts as long, however slow the
 * build (sanitizers) runs the short ones. The counts are the poller's, taken at intake, so
 * each step's mechanism shows in the counts before the next step.
 */
Test(gpu_sim_adaptive, mechanism_follows_how_long_awaits_wait, .timeout = 60)
{
	struct env e;
	env_open_adaptive(&e, 1, 200000);
	cr_assert_eq(tdm_gpu_completion(e.gpu, 0), TDM_COMPLETION_ADAPTIVE);
	struct adapt_state a = {
	    .gpu = e.gpu, .nsteps = 6, .ns = {1000, 1000, 1000, 600000000, 1000, 1000}};
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
	cr_assert_eq(run_one(&e, adapt_task, &a), 0);
	ASSERT_SEEN(&a.sn);
	cr_assert_eq(a.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
	/* The mechanism of step k: what changed between before[k] and before[k+1] (or last). */
	char got[8] = {0};
	for (int k = 0; k < a.nsteps; k++) {
		const tdm_gpu_stats *x = &a.before[k],
		                    *y = k + 1 < a.nsteps ? &a.before[k + 1] : &a.last;
		cr_assert_eq((y->awaits_word - x->awaits_word) +
		                 (y->awaits_event - x->awaits_event),
		             1, "one await per step");
		got[k] = y->awaits_word > x->awaits_word ? 'w' : 'e';
	}
	/* fresh stream: event; quick: words, the long one included (its stall is seen only
	 * later); after the long one: event; then quick again: word. */
	cr_assert_str_eq(got, "ewwwew");
	cr_assert_eq(a.last.switches, 3, "to words, to events, to words");
	tdm_stream_release(a.s);
	env_close(&e);
}

/*
 * The same two streams, but the worker's own one has turned quick first (adaptive completion:
 * an await that completed soon after reaching the head): its worker sets the stream's pace, so
 * its shared leases stay on it, however many it holds. Lease balance "always" (tdm_gpu_debug)
 * balances them still, as a stream that is not quick; =never keeps them, as the default does here.
 */
static void quick_stream_leases(const char *balance, int *on_a, int *on_b)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = 2;
	g.completion = TDM_COMPLETION_ADAPTIVE;
	g.stall_us = 200000; /* only a stall of 200 ms counts: sanitized builds run slowly */
	cr_assert(env_open_cfg(&e, 1, &g));
	cr_assert_eq(tdm_gpu_debug(e.gpu, balance, NULL), 0); /* NULL: the default */
	tdm_stream *a, *b;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &b), 0);
	const void *sa = tdm_lease_stream(a), *sb = tdm_lease_stream(b);
	cr_assert_neq(sa, sb);
	cr_assert_eq(tdm_stream_release(b), 0);
	/* Two short awaits on a, the worker's own stream: the first turns it quick. */
	struct adapt_state q = {.gpu = e.gpu, .s = a, .nsteps = 2, .ns = {1000, 1000}};
	cr_assert_eq(run_one(&e, adapt_task, &q), 0);
	ASSERT_SEEN(&q.sn);
	cr_assert_eq(q.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &q.last), 0);
	cr_assert_eq(q.last.switches, 1, "a turned quick");
	cr_assert_eq(run_one(&e, balance_task, e.gpu), 0);
	cr_assert_eq(balance_rc, 0);
	*on_a = 1; /* a's own lease counts */
	*on_b = 0;
	for (int i = 0; i < BALANCE_LEASES; i++) {
		const void *si = tdm_lease_stream(balance_held[i]);
		cr_assert(si == sa || si == sb);
		*on_a += si == sa;
		*on_b += si == sb;
	}
	for (int i = 0; i < BALANCE_LEASES; i++)
		cr_assert_eq(tdm_stream_release(balance_held[i]), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	env_close(&e);
}

Test(gpu_placement, a_quick_stream_keeps_its_workers_shared_leases, .timeout = 60)
{
	int on_a, on_b;
	quick_stream_leases(NULL, &on_a, &on_b);
	cr_assert_eq(on_a, BALANCE_LEASES + 1, "leases: %d on the quick stream, %d on the other",
	             on_a, on_b);
	quick_stream_leases("always", &on_a, &on_b);
	cr_assert_leq(abs(on_a - on_b), 3, "always: %d on the quick stream, %d on the other", on_a,
	              on_b);
	quick_stream_leases("never", &on_a, &on_b);
	cr_assert_eq(on_a, BALANCE_LEASES + 1, "never: %d on the own stream, %d on the other", on_a,
	             on_b);
}

/*
 * Awaits of equal length, one after another on one stream: from the second on, the poller knows
 * when the next is due and spins through it rather than finding it at the end of a sleep step.
 * 20 ms kernels: far longer than the poller's spin window, so without the estimate every one of
 * them is found by a sleep step. At least one of 15 (a loaded machine's simulator finishes its
 * kernels milliseconds early or late at times, which the estimate cannot foresee).
 */
static void poller_spins_when_an_await_is_due(tdm_completion completion)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, completion, 1));
	struct adapt_state a = {.gpu = e.gpu, .nsteps = 16};
	for (int k = 0; k < a.nsteps; k++)
		a.ns[k] = 20000000u;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
	cr_assert_eq(run_one(&e, adapt_task, &a), 0);
	ASSERT_SEEN(&a.sn);
	cr_assert_eq(a.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
	cr_assert_geq(a.last.due_spins, 1, "due spins: %llu, sleeps: %llu",
	              (unsigned long long)a.last.due_spins, (unsigned long long)a.last.sleeps);
	/* The one worker spins 100 us after each await, then parks for the rest of the 20 ms: a
	 * due spin wakes it first, so that it is spinning when the task comes back. */
	cr_assert_geq(a.last.prewakes, 1, "prewakes: %llu of %llu due spins",
	              (unsigned long long)a.last.prewakes, (unsigned long long)a.last.due_spins);
	cr_assert_leq(a.last.prewakes, a.last.due_spins);
	tdm_stream_release(a.s);
	env_close(&e);
}

/*
 * When the poller looks again at a stalled stream whose oldest await is on an event. Far from
 * the time the await is due, after 1/32 of its wait (at most 1 ms); inside the due window, on
 * every sweep; near the window, after a quarter of the distance to the due time, so that a
 * completion a little earlier or later than expected is seen soon; never later than the stalled
 * streams' share of looks allows.
 */
Test(gpu_poller, look_step_tightens_near_the_due_time)
{
	const uint64_t us = 1000, ms = 1000000;
	const uint64_t typ = 16 * ms, lead = 10 * us, late = 250 * us, due = typ;
	const unsigned many = 1000; /* stalled streams: a share (20 ms) that limits nothing */
	/* Nothing known: the relative rule, capped at 1 ms. */
	cr_assert_eq(tdm__look_step(3200 * us, 0, 0, lead, late, many), 100 * us);
	cr_assert_eq(tdm__look_step(100 * ms, 0, 0, lead, late, many), 1 * ms);
	/* Far from due: still the relative rule (1/32 of 2 ms). */
	cr_assert_eq(tdm__look_step(2 * ms, 0, typ, lead, late, many), 2 * ms / 32);
	/* Inside the window, from lead before to late after: every sweep. */
	cr_assert_eq(tdm__look_step(due - lead, 0, typ, lead, late, many), 0);
	cr_assert_eq(tdm__look_step(due, 0, typ, lead, late, many), 0);
	cr_assert_eq(tdm__look_step(due + late, 0, typ, lead, late, many), 0);
	/* 400 us before due: a quarter of that (the relative rule alone would say 487 us). */
	cr_assert_eq(tdm__look_step(due - 400 * us, 0, typ, lead, late, many), 100 * us);
	/* Never past the start of the window (a lead of 100 us: it starts in 20 us, a quarter of
	 * the distance would be 30 us). */
	cr_assert_eq(tdm__look_step(due - 120 * us, 0, typ, 100 * us, late, many), 20 * us);
	/* Past the window: a quarter of how far past (the relative rule would say 512 us). */
	cr_assert_eq(tdm__look_step(due + 400 * us, 0, typ, lead, late, many), 100 * us);
	/* Right beside the window with no lead: at least 2 us between looks. */
	cr_assert_eq(tdm__look_step(due - 4 * us, 0, typ, 0, late, many), 2 * us);
	/* The times are absolute: the same answers for a wait that began later. */
	cr_assert_eq(tdm__look_step(5 * ms + due - 400 * us, 5 * ms, typ, lead, late, many),
	             100 * us);
	/* The share: with 1 (or no count yet) stalled stream, within a back-off step (20 us) of
	 * any look, however far from due; with 8, within 8 steps. */
	cr_assert_eq(tdm__look_step(100 * ms, 0, 0, lead, late, 1), 20 * us);
	cr_assert_eq(tdm__look_step(100 * ms, 0, 0, lead, late, 0), 20 * us);
	cr_assert_eq(tdm__look_step(due - 4 * ms, 0, typ, lead, late, 1), 20 * us);
	cr_assert_eq(tdm__look_step(due + 4 * ms, 0, typ, lead, late, 8), 160 * us);
	/* A step already shorter than the share stays. */
	cr_assert_eq(tdm__look_step(due - 40 * us, 0, typ, lead, late, 8), 10 * us);
	cr_assert_eq(tdm__look_step(due, 0, typ, lead, late, 1), 0);
}

/* ---- word awaits that a worker watches itself (tdm__task_hold) ---- */

/* 16 short awaits, one after another, by the only task of one worker, with the worker watch
 * switch (tdm_gpu_debug) as given (NULL: the default); their stats. */
static tdm_gpu_stats short_awaits_alone(const char *watch)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 1));
	cr_assert_eq(tdm_gpu_debug(e.gpu, NULL, watch), 0); /* NULL: the default */
	struct adapt_state a = {.gpu = e.gpu, .nsteps = 16};
	for (int k = 0; k < a.nsteps; k++)
		a.ns[k] = 1000;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
	cr_assert_eq(run_one(&e, adapt_task, &a), 0);
	ASSERT_SEEN(&a.sn);
	cr_assert_eq(a.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
	tdm_stream_release(a.s);
	env_close(&e);
	cr_assert_eq(a.last.awaits_word, 16, "every await counted once");
	return a.last;
}

/* The worker has nothing else to run and sees each word itself; the poller never takes those
 * awaits in. Usually all 16; at least one is asked for, since a simulator thread that runs late
 * on a loaded machine leaves an await to the poller after the worker's 100 us spin (without the
 * workers' watching: none). */
Test(gpu_sim_words, idle_worker_resumes_its_own_word_awaits, .timeout = 60)
{
	tdm_gpu_stats st = short_awaits_alone(NULL);
	cr_assert_geq(st.direct, 1, "direct: %llu of 16", (unsigned long long)st.direct);
}

/* The diagnostic switch: every await goes to the poller. */
Test(gpu_sim_words, worker_watch_switch_off_sends_every_await_to_the_poller, .timeout = 60)
{
	tdm_gpu_stats st = short_awaits_alone("0");
	cr_assert_eq(st.direct, 0);
}

/*
 * The executor's side of holding, with a stand-in awaitable: the first look at the held await
 * queues other work on the worker (a plain task), and the await is over only once it was
 * handed off. The worker must hand it off before it runs that task: a worker that kept the
 * await while it ran other work would leave it with nobody watching.
 */
struct hold_state {
	tdm_executor *ex;
	atomic_int looks, handed_off, other_saw_handoff;
	int result;
	struct seen sn; /* written on the one worker only */
};

static struct hold_state *hold_st; /* the stand-in's callbacks get only the task */

static void hold_other(void *arg)
{
	struct hold_state *h = arg;
	atomic_store(&h->other_saw_handoff, atomic_load(&h->handed_off) + 1);
}

static int hold_poll(struct tdm__task *t, int *rc)
{
	(void)t;
	(void)rc;
	/* From the worker's spin: tdm_submit from a worker queues on its own deque. */
	if (atomic_fetch_add(&hold_st->looks, 1) == 0)
		SEE(&hold_st->sn, tdm_submit(hold_st->ex, hold_other, hold_st));
	return 0; /* over only through the handoff */
}

static void hold_handoff(struct tdm__task *t)
{
	atomic_store(&hold_st->handed_off, 1);
	tdm__task_wake(t, 7);
}

static int hold_await(tdm_task *pub)
{
	struct tdm__task *t = tdm__task_cast(pub);
	SEE_TRUE(&hold_st->sn, t != NULL);
	if (t == NULL)
		return -EINVAL; /* not suspended: the task goes on, and the test sees the record */
	tdm__task_suspend(t);
	bool held = tdm__task_hold(t, hold_poll, hold_handoff);
	SEE_TRUE(&hold_st->sn, held); /* nothing else queued: held */
	if (!held)
		tdm__task_wake(t, 0); /* its own waker, or it would never resume */
	return TDM_SUSPENDED;
}

static int hold_task(tdm_task *t, void *arg)
{
	struct hold_state *h = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, hold_await(t));
	h->result = tdm_task_result(t);
	TDM_END(t);
}

/* Runs fn(h) as the only task of a one-worker executor, to its end. */
static void hold_run(struct hold_state *h, tdm_resume_fn fn)
{
	h->result = -1;
	h->sn = (struct seen){0};
	atomic_init(&h->looks, 0);
	atomic_init(&h->handed_off, 0);
	atomic_init(&h->other_saw_handoff, 0);
	h->ex = tdm_test_create(1);
	hold_st = h;
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, h->ex), 0);
	cr_assert_eq(tdm_spawn(h->ex, fn, h, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_destroy(h->ex);
	ASSERT_SEEN(&h->sn);
}

Test(executor_hold, held_await_is_handed_off_before_other_work, .timeout = 30)
{
	struct hold_state h;
	hold_run(&h, hold_task);
	cr_assert_eq(h.result, 7, "resumed through the handoff's wake");
	cr_assert_geq(atomic_load(&h.looks), 1);
	cr_assert_eq(atomic_load(&h.other_saw_handoff), 2, "the other task ran after the handoff");
}

static void noop(void *arg)
{
	(void)arg;
}

/* With its own work queued the worker would only hand the await off at once: not held. */
static int refused_await(tdm_task *pub, struct hold_state *h)
{
	struct tdm__task *t = tdm__task_cast(pub);
	SEE_TRUE(&h->sn, t != NULL);
	if (t == NULL)
		return -EINVAL; /* not suspended: the task goes on, and the test sees the record */
	SEE(&h->sn, tdm_submit(h->ex, noop, NULL)); /* onto this worker's deque */
	tdm__task_suspend(t);
	h->result = tdm__task_hold(t, hold_poll, hold_handoff) ? 1 : 0;
	if (h->result == 0)
		tdm__task_wake(t, 0); /* not held: its own waker, at once */
	return TDM_SUSPENDED;
}

static int hold_refused_task(tdm_task *t, void *arg)
{
	struct hold_state *h = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, refused_await(t, h));
	TDM_END(t);
}

Test(executor_hold, not_held_with_work_queued, .timeout = 30)
{
	struct hold_state h;
	hold_run(&h, hold_refused_task);
	cr_assert_eq(h.result, 0, "held although work was queued");
}

struct nested_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	tdm_executor *ex;
	int rc;
	struct seen sn; /* the child's calls, then the parent's */
};

static int nested_child(tdm_task *t, void *arg)
{
	struct nested_state *n = arg;
	TDM_BEGIN(t);
	SEE(&n->sn, tdm_launch_spin(n->s, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, n->s));
	n->rc = tdm_task_result(t);
	TDM_END(t);
}

/* A plain task that waits for a group from inside the worker: the child's await runs in the
 * wait's loop, which watches no held await. */
static void nested_parent(void *arg)
{
	struct nested_state *n = arg;
	tdm_group g;
	SEE(&n->sn, tdm_group_init(&g, n->ex));
	if (n->sn.rc != 0)
		return;
	SEE(&n->sn, tdm_spawn(n->ex, nested_child, n, &g));
	/* The child's writes are ordered before the wait's return; the parent's after it. */
	SEE(&n->sn, tdm_group_wait(&g));
}

/* The child's word await must go to the poller: held by the worker, whose loop is busy in the
 * group wait, it would never complete. */
Test(gpu_sim_words, await_inside_a_group_wait_is_not_held, .timeout = 30)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 1));
	struct nested_state n = {.gpu = e.gpu, .ex = e.ex, .rc = -1};
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &n.s), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, nested_parent, &n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	ASSERT_SEEN(&n.sn);
	cr_assert_eq(n.rc, 0);
	tdm_gpu_stats st;
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &st), 0);
	cr_assert_eq(st.direct, 0);
	tdm_stream_release(n.s);
	env_close(&e);
}

Test(gpu_sim_words, poller_spins_when_an_await_is_due, .timeout = 60)
{
	poller_spins_when_an_await_is_due(TDM_COMPLETION_WORD);
}

/* Adaptive: 20 ms awaits wait on events, which the poller must ask while they are due. */
Test(gpu_sim_adaptive, poller_spins_when_an_await_is_due, .timeout = 60)
{
	poller_spins_when_an_await_is_due(TDM_COMPLETION_ADAPTIVE);
}

Test(gpu_sim_words, forced_mechanisms_never_mix, .timeout = 60)
{
	for (int m = 0; m < 2; m++) {
		struct env e;
		cr_assert(env_open(&e, TDM_BACKEND_SIM,
		                   m == 0 ? TDM_COMPLETION_WORD : TDM_COMPLETION_EVENT, 1));
		struct adapt_state a = {.gpu = e.gpu, .nsteps = 3, .ns = {1000, 1000, 1000}};
		cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
		cr_assert_eq(run_one(&e, adapt_task, &a), 0);
		ASSERT_SEEN(&a.sn);
		ASSERT_SEEN(&a.sn);
		cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
		cr_assert_eq(m == 0 ? a.last.awaits_word : a.last.awaits_event, 3);
		cr_assert_eq(m == 0 ? a.last.awaits_event : a.last.awaits_word, 0);
		cr_assert_eq(a.last.switches, 0);
		/* Events are asked at least once each; words never are. */
		if (m == 0)
			cr_assert_eq(a.last.event_polls, 0);
		else
			cr_assert_geq(a.last.event_polls, 3);
		tdm_stream_release(a.s);
		env_close(&e);
	}
}

Test(gpu_sim_adaptive, operation_fault_reaches_only_its_task, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_ADAPTIVE, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_OP, false);
	env_close(&e);
}

Test(gpu_sim_adaptive, sticky_fault_fails_the_device, .timeout = 60)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_ADAPTIVE, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_STICKY, true);
	env_close(&e);
}

/* ---- an error behind a later word: the event await still reports it ---- */

static tdm_stream *mixed_stream;
static int mixed_first, mixed_second, mixed_faulted;
static struct seen mixed_quick_seen, mixed_faulted_seen; /* one per task: they run at once */

/* Awaits twice: an event (the stream is new), then, the first having completed quickly, a word
 * numbered after the faulted task's event. */
static int mixed_quick_task(tdm_task *t, void *arg)
{
	(void)arg;
	TDM_BEGIN(t);
	SEE(&mixed_quick_seen, tdm_launch_spin(mixed_stream, 200000000));
	TDM_AWAIT(t, tdm_await_stream(t, mixed_stream));
	mixed_first = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_stream(t, mixed_stream));
	mixed_second = tdm_task_result(t);
	TDM_END(t);
}

/* A long kernel, then a faulted operation, then an await on an event: the event's record is the
 * completion point that carries the fault. */
static int mixed_faulted_task(tdm_task *t, void *arg)
{
	(void)arg;
	TDM_BEGIN(t);
	SEE(&mixed_faulted_seen, tdm_launch_spin(mixed_stream, 600000000));
	SEE(&mixed_faulted_seen, tdm_sim_inject(mixed_stream, TDM_SIM_FAULT_OP));
	SEE(&mixed_faulted_seen, tdm_launch_spin(mixed_stream, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, mixed_stream));
	mixed_faulted = tdm_task_result(t);
	TDM_END(t);
}

/*
 * The word written after the faulted event's record shows the event's work as done before the
 * poller looks at the event; the poller must still ask the event, which alone knows of the fault.
 * stall_us is 2 s so that the 200 ms kernel counts as quick however slow the build runs.
 */
Test(gpu_sim_adaptive, an_error_behind_a_later_word_reaches_its_task, .timeout = 60)
{
	struct env e;
	env_open_adaptive(&e, 2, 2000000);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &mixed_stream), 0);
	mixed_first = mixed_second = mixed_faulted = 1;
	mixed_quick_seen = mixed_faulted_seen = (struct seen){0};
	tdm_group grp;
	tdm_group_init(&grp, e.ex);
	cr_assert_eq(tdm_spawn(e.ex, mixed_quick_task, NULL, &grp), 0);
	/* The faulted task's work goes in only once the first await is with the poller. */
	tdm_gpu_stats st = {0};
	while (st.awaits_event == 0) {
		sched_yield();
		cr_assert_eq(tdm_gpu_stats_get(e.gpu, &st), 0);
	}
	cr_assert_eq(tdm_spawn(e.ex, mixed_faulted_task, NULL, &grp), 0);
	cr_assert_eq(tdm_group_wait(&grp), 0);
	ASSERT_SEEN(&mixed_quick_seen);
	ASSERT_SEEN(&mixed_faulted_seen);
	cr_assert_eq(mixed_first, 0);
	cr_assert_eq(mixed_second, 0,
	             "the word after the fault is not the fault's completion point");
	cr_assert_eq(mixed_faulted, -EIO, "the fault reached the event await behind it");
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &st), 0);
	cr_assert_eq(st.awaits_event, 2, "the new stream's first await and the faulted one");
	cr_assert_eq(st.awaits_word, 1, "the second await, after a quick first one");
	tdm_stream_release(mixed_stream);
	env_close(&e);
}
