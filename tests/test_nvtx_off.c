// SPDX-License-Identifier: MIT
/*
 * NVTX costs nothing without a tool: with NVTX_INJECTION64_PATH unset, tandem makes no NVTX call
 * at all, not even the first one that would look for a tool. The proof needs a tool that would
 * have counted them, so this program links the suite's tool in as a static injection
 * (nvtx_inject.c with NVTX_INJECT_STATIC), which NVTX attaches without the variable: tandem runs
 * tasks, resumes one, starts a poller and fails a device, the tool counts nothing, and then this
 * program's own NVTX call shows the tool was there all along.
 */
#include "gpu_env.h"

#include <nvtx3/nvToolsExt.h>

#include "base/observe.h" /* tdm__observing */
#include "nvtx_inject.h"

TDM_TEST_SUITE(nvtx_off);

/* Off, whatever the shell exports (ctest unsets it too). */
__attribute__((constructor)) static void no_tool_path(void)
{
	unsetenv("NVTX_INJECTION64_PATH");
}

struct waiter {
	tdm_notify n;
	int rc;
};

static int await_once(tdm_task *t, void *arg)
{
	struct waiter *w = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, w->rc = tdm_await_notify(t, &w->n));
	TDM_END(t);
}

static void count_task(void *arg)
{
	atomic_fetch_add((atomic_size_t *)arg, 1);
}

Test(nvtx_off, no_nvtx_call_without_a_tool_path, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct nvtx_inject *s = nvtx_inject_state();
	struct env e;
	env_open_sim2(&e, 3);
	cr_assert(!tdm__observing(), "no observer without NVTX_INJECTION64_PATH");
	atomic_size_t ran = 0;
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(tdm_group_spawn(&g, count_task, &ran), 0);
	struct waiter w = {.rc = 1};
	cr_assert_eq(tdm_notify_init(&w.n, e.ex), 0);
	cr_assert_eq(tdm_spawn(e.ex, await_once, &w, &g), 0);
	tdm_test_sleep_us(10000);
	cr_assert_eq(tdm_notify_fire(&w.n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&ran), 100);
	kill_device(&e, 1);
	env_close(&e);

	cr_assert_eq(atomic_load(&s->domains), 0, "NVTX was never started");
	cr_assert_eq(atomic_load(&s->range_starts) + atomic_load(&s->range_ends), 0);
	cr_assert_eq(atomic_load(&s->thread_names), 0);
	cr_assert_eq(atomic_load(&s->marks), 0);
	cr_assert_eq(atomic_load(&s->strings) + atomic_load(&s->stream_names), 0);
	cr_assert(!tdm__observing());

	/* The tool was attachable all along: NVTX hands it this program's own call. */
	nvtxMarkA("probe");
	cr_assert_eq(atomic_load(&s->other_marks), 1);
}
