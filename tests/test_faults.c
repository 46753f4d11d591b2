// SPDX-License-Identifier: MIT
/*
 * Faults reach exactly the tasks they concern: an operation's error resumes its own task with
 * -EIO and the stream goes on; a sticky fault (or a trapping kernel on CUDA) fails the device,
 * every await on it, and new leases; a copy still running when its device dies ends before its
 * task resumes; a pooled event forgets a failed record; an error behind a later completion word
 * still reaches its event await. On the simulator with each completion mechanism, and the trap on
 * CUDA where a device exists. Tasks record what they saw; the test thread asserts.
 */
#include "gpu_env.h"

#include <stdlib.h>
#include <string.h>

TDM_TEST_SUITE(faults_sim_words);
TDM_TEST_SUITE(faults_sim_events);
TDM_TEST_SUITE(faults_sim_adaptive);
#ifndef TANDEM_TEST_NO_CUDA
TDM_TEST_SUITE(faults_cuda);
#endif

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

/* ---- an operation's fault, and the device's ---- */

Test(faults_sim_words, operation_fault_reaches_only_its_task, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_OP, false);
	env_close(&e);
}

Test(faults_sim_events, operation_fault_reaches_only_its_task, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_OP, false);
	env_close(&e);
}

Test(faults_sim_words, sticky_fault_fails_the_device, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_STICKY, true);
	env_close(&e);
}

Test(faults_sim_events, sticky_fault_fails_the_device, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_EVENT, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_STICKY, true);
	env_close(&e);
}

Test(faults_sim_adaptive, operation_fault_reaches_only_its_task, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_ADAPTIVE, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_OP, false);
	env_close(&e);
}

Test(faults_sim_adaptive, sticky_fault_fails_the_device, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_ADAPTIVE, 2));
	fault_reaches_the_right_task(&e, TDM_SIM_FAULT_STICKY, true);
	env_close(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
/* Criterion runs each test in its own process: the dead context does not outlive it. */
Test(faults_cuda, trapping_kernel_fails_the_device, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		cr_skip_test("no CUDA device");
	fault_reaches_the_right_task(&e, -1, true);
	env_close(&e);
}
#endif

/* ---- a copy that the death of its device interrupts ---- */

/* A long device-to-host copy into registered host memory, and its last byte when its await
 * ended. Long enough to be running when the device dies: 128 MiB, or 32 MiB where every byte
 * copied is instrumented (as long a copy, or longer). */
struct dying_copy {
	tdm_gpu *gpu;
	size_t bytes;
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
	SEE(&c->sn, tdm_memcpy_async(c->s, c->dst, c->src, c->bytes, TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->rc = tdm_task_result(t);
	c->last_at_resume = c->dst[c->bytes - 1];
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
	struct dying_copy c = {
	    .gpu = e.gpu, .bytes = tdm_test_size((size_t)128 << 20, (size_t)32 << 20), .rc = 1};
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, c.bytes, (void **)&c.src), 0);
	c.dst = calloc(c.bytes, 1);
	cr_assert_not_null(c.dst);
	cr_assert_eq(tdm_host_register(e.gpu, c.dst, c.bytes), 0);
	memset(c.src, 0xab, c.bytes);
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
	cr_assert_eq(c.dst[c.bytes - 1], c.last_at_resume,
	             "the copy's task resumed (%d) while the copy still wrote", c.rc);
	free(c.dst);
}

Test(faults_sim_words, a_copy_running_when_the_device_dies_ends_before_its_task_resumes,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	copy_running_when_the_device_dies(TDM_COMPLETION_WORD);
}

Test(faults_sim_events, a_copy_running_when_the_device_dies_ends_before_its_task_resumes,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	copy_running_when_the_device_dies(TDM_COMPLETION_EVENT);
}

/* ---- a pooled event after a failed record ---- */

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

Test(faults_sim_events, a_pooled_event_forgets_a_failed_record_for_its_next_owner,
     .timeout = TDM_TEST_TIMEOUT(30))
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
Test(faults_sim_adaptive, an_error_behind_a_later_word_reaches_its_task,
     .timeout = TDM_TEST_TIMEOUT(60))
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

/* ---- a device found dead without an await: leases, and a scheduler's handler still running */

/* A trap with nothing awaited after it: the next leases find the device dead (sim: once the
 * kernel ran; cuda: within the check interval), not only the next launch. */
static void a_trap_is_found_by_the_next_lease(tdm_completion completion)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, completion, 2));
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &s), 0);
	cr_assert_eq(tdm_launch_fault(s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	int rc;
	while ((rc = tdm_stream_lease(e.gpu, 0, 0, &s)) == 0) {
		cr_assert_eq(tdm_stream_release(s), 0);
		sched_yield();
	}
	cr_assert_eq(rc, -ENODEV, "%s", tdm_strerror(rc));
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), -ENODEV);
	cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), -ENODEV);
	env_close(&e);
}

Test(faults_sim_words, a_trap_is_found_by_the_next_lease, .timeout = TDM_TEST_TIMEOUT(60))
{
	a_trap_is_found_by_the_next_lease(TDM_COMPLETION_WORD);
}

Test(faults_sim_events, a_trap_is_found_by_the_next_lease, .timeout = TDM_TEST_TIMEOUT(60))
{
	a_trap_is_found_by_the_next_lease(TDM_COMPLETION_EVENT);
}

/* A handler that waits for the host: it says it entered, and returns once released. */
struct wait_args {
	atomic_int *entered, *release;
};

static void h_wait_for_host(void *args, unsigned size)
{
	const struct wait_args *a = args;
	(void)size;
	atomic_store_explicit(a->entered, 1, memory_order_release);
	while (!atomic_load_explicit(a->release, memory_order_acquire))
		sched_yield();
}

static void h_none(void *args, unsigned size)
{
	(void)args;
	(void)size;
}

TDM_DSCHED_HOST_TABLE(fault_steps, h_wait_for_host, h_none);

/* A scheduler of 2 x 2 warps on device 0, running a handler that waits for the host. */
static tdm_dsched *busy_dsched(struct env *e, atomic_int *entered, atomic_int *release)
{
	tdm_dsched_config c;
	tdm_dsched_config_init(&c);
	c.handlers = &fault_steps;
	c.blocks = 2;
	c.warps = 2;
	c.capacity = 64;
	tdm_dsched *ds = NULL;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), 0);
	struct wait_args a = {entered, release};
	uint64_t t;
	cr_assert_eq(tdm_dsched_submit(ds, 0, &a, sizeof(a), &t), 0);
	while (!atomic_load_explicit(entered, memory_order_acquire))
		sched_yield();
	return ds;
}

/* The device dies (a handler's fault) while another handler still runs: leases say -ENODEV,
 * never 0 nor -EIO, without waiting for that handler. */
Test(faults_sim_words, a_lease_beside_a_busy_scheduler_finds_the_device_dead,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 2));
	atomic_int entered = 0, release = 0;
	tdm_dsched *ds = busy_dsched(&e, &entered, &release);
	cr_assert_eq(tdm_dsched_sim_inject(ds, TDM_SIM_FAULT_STICKY), 0);
	uint64_t t;
	cr_assert_eq(tdm_dsched_submit(ds, 1, NULL, 0, &t), 0); /* takes the fault */
	tdm_stream *s;
	int rc;
	while ((rc = tdm_stream_lease(e.gpu, 0, 0, &s)) == 0) {
		cr_assert_eq(tdm_stream_release(s), 0);
		sched_yield();
	}
	cr_assert_eq(rc, -ENODEV, "%s", tdm_strerror(rc));
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), -ENODEV);
	cr_assert_eq(tdm_dsched_query(ds, t), -EAGAIN,
	             "its items wait for the handler still running");
	atomic_store_explicit(&release, 1, memory_order_release);
	tdm_dsched_stats st;
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, &st), 0);
	env_close(&e);
}

struct trap_await {
	tdm_gpu *gpu;
	tdm_stream *s;
	int rc;
	struct seen sn;
};

static int trap_await_task(tdm_task *t, void *arg)
{
	struct trap_await *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	SEE(&c->sn, tdm_launch_fault(c->s));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->rc = tdm_task_result(t);
	tdm_stream_release(c->s);
	TDM_END(t);
}

/* A kernel traps while a scheduler's handler on its device waits for the host: the task that
 * awaits the trapping stream resumes with -EIO at once, as on CUDA, where the dead context
 * ends the handler too; it does not wait for the handler. */
Test(faults_sim_words, a_trap_beside_a_waiting_handler_fails_its_await,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 2));
	atomic_int entered = 0, release = 0;
	tdm_dsched *ds = busy_dsched(&e, &entered, &release);
	struct trap_await c = {.gpu = e.gpu, .rc = 1};
	cr_assert_eq(run_one(&e, trap_await_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc, -EIO, "%s", tdm_strerror(c.rc));
	atomic_store_explicit(&release, 1, memory_order_release);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), 0);
	env_close(&e);
}
