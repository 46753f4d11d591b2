// SPDX-License-Identifier: MIT
/*
 * NVTX reaches a tool: with NVTX_INJECTION64_PATH naming the suite's own tool (nvtx_inject.c,
 * loaded by NVTX as Nsight Systems' is), every task run is one range of the "tandem" domain,
 * named by its function and ended on the thread that began it, nested where a task waits for a
 * group on its worker, one per run of a resumable task; workers and the poller are named; a
 * device's failure is one mark; streams with a native handle are named. ctest sets the variable
 * (CMakeLists.txt); test_nvtx_off.c is the same run without it.
 */
#include "gpu_env.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "base/observe.h" /* tdm__observing, tdm__observe_stream */
#include "nvtx_inject.h"

TDM_TEST_SUITE(nvtx);

/* The tool NVTX loaded: the module of NVTX_INJECTION64_PATH, already in the process once tandem
 * made its first call (tdm_executor_create). */
static struct nvtx_inject *tool(void)
{
	const char *path = getenv("NVTX_INJECTION64_PATH");
	cr_assert(path != NULL && path[0] != '\0', "ctest sets NVTX_INJECTION64_PATH");
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(h, "NVTX loaded %s", path);
	void *sym = dlsym(h, "nvtx_inject_state");
	cr_assert_not_null(sym);
	struct nvtx_inject *(*get)(void);
	memcpy(&get, &sym, sizeof(get));
	dlclose(h); /* NVTX keeps its own reference */
	return get();
}

static unsigned long count(atomic_ulong *c)
{
	return atomic_load(c);
}

/* How many ranges the registered string `name` named (0 if it was never registered). */
static unsigned long uses_of(struct nvtx_inject *s, const char *name)
{
	unsigned long n = 0;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nstrings; i++)
		if (strcmp(s->string[i], name) == 0)
			n = atomic_load(&s->string_uses[i]);
	pthread_mutex_unlock(&s->lock);
	return n;
}

static void assert_clean(struct nvtx_inject *s)
{
	cr_assert_eq(count(&s->bad_ends), 0, "every end is of a range begun once");
	cr_assert_eq(count(&s->misnested), 0, "every end closes its thread's innermost range");
	cr_assert_eq(count(&s->foreign), 0, "everything is in the tandem domain");
	cr_assert_eq(count(&s->unnamed), 0, "every range has a name");
	cr_assert_eq(count(&s->domains), 1, "the domain is made once");
}

/* Exported (the program links with -rdynamic): its range carries its symbol. */
void nvtx_named_task(void *arg);
void nvtx_named_task(void *arg)
{
	atomic_fetch_add((atomic_size_t *)arg, 1);
}

/* Not in the dynamic symbol table: named from the program's .symtab (base/symtab.c). */
static void nvtx_hidden_task(void *arg)
{
	atomic_fetch_add((atomic_size_t *)arg, 1);
}

Test(nvtx, one_range_per_task_run, .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t n = tdm_test_size(20000, 2000);
	tdm_executor *ex = tdm_test_create(4);
	cr_assert(tdm__observing(), "a tool named by NVTX_INJECTION64_PATH turns NVTX on");
	struct nvtx_inject *s = tool();
	unsigned long starts = count(&s->range_starts), ends = count(&s->range_ends);
	atomic_size_t ran = 0;
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(tdm_group_spawn(&g, i % 2 ? nvtx_hidden_task : nvtx_named_task, &ran),
		             0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_destroy(ex);
	cr_assert_eq(atomic_load(&ran), n);
	cr_assert_eq(count(&s->range_starts) - starts, n, "one range per task");
	cr_assert_eq(count(&s->range_ends) - ends, n, "every range ended");
	assert_clean(s);
	cr_assert_eq(uses_of(s, "nvtx_named_task"), n / 2, "named by the task's symbol");
	cr_assert_eq(uses_of(s, "nvtx_hidden_task"), n / 2, "a static one by its .symtab name");
}

/* ---- nesting: a task waits for a group on its worker ---- */

struct nest {
	tdm_executor *ex;
	size_t children;
	atomic_size_t ran;
	int rc;
};

static void nest_child(void *arg)
{
	atomic_fetch_add(&((struct nest *)arg)->ran, 1);
}

static void nest_parent(void *arg)
{
	struct nest *p = arg;
	tdm_group inner;
	p->rc = tdm_group_init(&inner, p->ex);
	for (size_t i = 0; i < p->children && p->rc == 0; i++)
		p->rc = tdm_group_spawn(&inner, nest_child, p);
	if (p->rc == 0)
		p->rc = tdm_group_wait(&inner); /* runs the children here, inside this run */
}

Test(nvtx, runs_nested_by_a_group_wait_nest_their_ranges, .timeout = TDM_TEST_TIMEOUT(60))
{
	/* One worker: the children can only run inside the parent's wait. */
	struct nest p = {.ex = tdm_test_create(1), .children = 50};
	struct nvtx_inject *s = tool();
	unsigned long starts = count(&s->range_starts), ends = count(&s->range_ends);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, p.ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, nest_parent, &p), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_destroy(p.ex);
	cr_assert_eq(p.rc, 0);
	cr_assert_eq(atomic_load(&p.ran), p.children);
	cr_assert_eq(count(&s->range_starts) - starts, p.children + 1);
	cr_assert_eq(count(&s->range_ends) - ends, p.children + 1);
	cr_assert_geq(count(&s->max_depth), 2, "the children's ranges sat inside the parent's");
	assert_clean(s);
}

/* ---- a resumable task: one range per run ---- */

struct waiter {
	tdm_notify n;
	int rc;
};

static int nvtx_await_once(tdm_task *t, void *arg)
{
	struct waiter *w = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, w->rc = tdm_await_notify(t, &w->n));
	TDM_END(t);
}

Test(nvtx, a_task_that_awaits_once_runs_twice, .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_executor *ex = tdm_test_create(2);
	struct nvtx_inject *s = tool();
	unsigned long starts = count(&s->range_starts), ends = count(&s->range_ends);
	struct waiter w = {.rc = 1};
	cr_assert_eq(tdm_notify_init(&w.n, ex), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_spawn(ex, nvtx_await_once, &w, &g), 0);
	/* The first run's range ends only once the task parked: fired after that, the task
	 * runs again (fired earlier, it would go on inside its first run). */
	uint64_t give_up = tdm_now_ns() + 10000000000ull;
	while (count(&s->range_ends) - ends < 1 && tdm_now_ns() < give_up)
		tdm_test_sleep_us(100);
	cr_assert_eq(count(&s->range_ends) - ends, 1, "the first run ended (it parked)");
	cr_assert_eq(count(&s->range_starts) - starts, 1);
	cr_assert_eq(tdm_notify_fire(&w.n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_destroy(ex);
	cr_assert_eq(w.rc, TDM_SUSPENDED);
	cr_assert_eq(count(&s->range_starts) - starts, 2, "a range per run");
	cr_assert_eq(count(&s->range_ends) - ends, 2);
	assert_clean(s);
	cr_assert_eq(uses_of(s, "nvtx_await_once"), 2, "both runs named by the .symtab");
}

/* ---- names and marks ---- */

static unsigned names_starting(struct nvtx_inject *s, const char *prefix)
{
	unsigned n = 0;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nthreads; i++)
		n += strncmp(s->threads[i], prefix, strlen(prefix)) == 0;
	pthread_mutex_unlock(&s->lock);
	return n;
}

Test(nvtx, workers_and_the_poller_are_named, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 3));
	struct nvtx_inject *s = tool();
	env_close(&e); /* joins the threads: every name is in */
	cr_assert_eq(count(&s->thread_names), 4, "3 workers and the poller");
	cr_assert_eq(names_starting(s, "tandem worker "), 3);
	cr_assert_eq(names_starting(s, "tandem poller"), 1);
	pthread_mutex_lock(&s->lock);
	for (unsigned w = 0; w < 3; w++) {
		char want[32];
		snprintf(want, sizeof(want), "tandem worker %u", w);
		bool found = false;
		for (unsigned i = 0; i < s->nthreads; i++)
			found |= strcmp(s->threads[i], want) == 0;
		cr_assert(found, "a thread named \"%s\"", want);
	}
	pthread_mutex_unlock(&s->lock);
}

Test(nvtx, a_device_failure_is_one_mark, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	env_open_sim2(&e, 2);
	struct nvtx_inject *s = tool();
	cr_assert_eq(count(&s->marks), 0, "nothing failed yet");
	kill_device(&e, 1);
	env_close(&e); /* the poller, which may have seen the failure, is joined */
	cr_assert_eq(count(&s->marks), 1);
	cr_assert_str_eq(s->last_mark, "tandem: device 1 failed");
}

Test(nvtx, streams_with_a_native_handle_are_named, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct nvtx_inject *s = tool();
	/* The simulator's streams have no native handle: nothing to name. */
	tdm_stream *st;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &st), 0);
	cr_assert_eq(tdm_stream_release(st), 0);
	env_close(&e);
	cr_assert_eq(count(&s->stream_names), 0);
	/* A native handle is named through NVTX's CUDA runtime module, in builds with CUDA. */
	int fake;
	tdm__observe_stream(&fake, 1, true, 2);
#ifdef TANDEM_TEST_NO_CUDA
	cr_assert_eq(count(&s->stream_names), 0, "no CUDA, no CUDA stream to name");
#else
	cr_assert_eq(count(&s->stream_names), 1);
	cr_assert_str_eq(s->last_stream, "tandem dev 1 high 2");
	/* And a CUDA stream as the layer makes it, where there is a device. */
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		return;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &st), 0);
	cr_assert_eq(tdm_stream_release(st), 0);
	env_close(&e);
	cr_assert_eq(count(&s->stream_names), 2);
	cr_assert_eq(strncmp(s->last_stream, "tandem dev 0 normal ", 20), 0, "named \"%s\"",
	             s->last_stream);
#endif
}
