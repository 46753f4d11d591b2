// SPDX-License-Identifier: MIT
/*
 * The GPU await path, specified on every backend: tdm_await_stream, tdm_await_event and
 * tdm_await_deadline resume their task after the work, in order, with thousands outstanding and
 * with either object destroyed first; each behaviour runs on the simulator with completion words,
 * with events and adaptive, and on CUDA where a device exists (skipped elsewhere, left out of
 * builds without CUDA). Tasks record what they saw; the test thread asserts.
 */
#include "gpu_env.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MANY 2000
#else
#define MANY 10000
#endif

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
	/* 5 ms: the 64 kernels, 320 ms in all, queue on the few streams the tasks share, so that
	 * awaits are outstanding when the test destroys either object. */
	tdm_launch_spin(c->s, 5000000);
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

#define AWAIT_TESTS(suite, backend, completion)                                                    \
	TDM_TEST_SUITE(suite);                                                                     \
	Test(suite, await_stream_sees_work_done, .timeout = TDM_TEST_TIMEOUT(60))                  \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		await_stream_sees_work_done(&e);                                                   \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, resumes_in_order_after_each_await, .timeout = TDM_TEST_TIMEOUT(60))            \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		resumes_in_order_after_each_await(&e);                                             \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, await_event, .timeout = TDM_TEST_TIMEOUT(60))                                  \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		await_event(&e);                                                                   \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, await_deadline, .timeout = TDM_TEST_TIMEOUT(60))                               \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 2))                                         \
			cr_skip_test("no device for this backend");                                \
		await_deadline(&e);                                                                \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, many_awaits_outstanding, .timeout = TDM_TEST_TIMEOUT(60))                      \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, backend, completion, 4))                                         \
			cr_skip_test("no device for this backend");                                \
		many_awaits_outstanding(&e);                                                       \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, shutdown_executor_first_with_awaits_outstanding,                               \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		shutdown_with_awaits_outstanding(backend, completion, false);                      \
	}                                                                                          \
	Test(suite, shutdown_gpu_first_with_awaits_outstanding, .timeout = TDM_TEST_TIMEOUT(60))   \
	{                                                                                          \
		shutdown_with_awaits_outstanding(backend, completion, true);                       \
	}

AWAIT_TESTS(await_sim_words, TDM_BACKEND_SIM, TDM_COMPLETION_WORD)
AWAIT_TESTS(await_sim_events, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT)
AWAIT_TESTS(await_sim_adaptive, TDM_BACKEND_SIM, TDM_COMPLETION_ADAPTIVE)
#ifndef TANDEM_TEST_NO_CUDA
AWAIT_TESTS(await_cuda, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO)
AWAIT_TESTS(await_cuda_words, TDM_BACKEND_CUDA, TDM_COMPLETION_WORD)
AWAIT_TESTS(await_cuda_events, TDM_BACKEND_CUDA, TDM_COMPLETION_EVENT)
#endif

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

Test(await_sim_words, concurrent_awaits_on_one_shared_stream_all_resume,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	concurrent_awaits_on_one_shared_stream(TDM_COMPLETION_WORD);
}

/* Adaptive: words and events mixed in one stream's queue (the 200 us kernel stalls the stream
 * past the default 50 us, so awaits switch between the two); every await must still resume. */
Test(await_sim_adaptive, concurrent_awaits_on_one_shared_stream_all_resume,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	concurrent_awaits_on_one_shared_stream(TDM_COMPLETION_ADAPTIVE);
}
