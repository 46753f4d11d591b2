// SPDX-License-Identifier: MIT
/*
 * Stream leases misused, on the simulator: each lease is its own handle, so a second release of
 * it is -EINVAL and leaves every other holder's lease alone, and work or an await on a handle
 * already released is -EINVAL and enqueues nothing. Leases and awaits that race
 * tdm_gpu_destroy are refused with -ESHUTDOWN, and the destroy frees nothing they still touch.
 */
#include "common.h"
#include "gpu_env.h"

#include <stdatomic.h>
#include <string.h>

#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_graph.h"

TDM_TEST_SUITE(lease_errors);

/* One sim device; streams_per_device 0 leaves the set's size to the topology. */
static tdm_gpu *open_gpu(tdm_executor *ex, unsigned streams)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = streams;
	tdm_gpu *gpu = NULL;
	int rc = tdm_gpu_create(&gpu, ex, &g);
	cr_assert_eq(rc, 0, "tdm_gpu_create: %s", tdm_strerror(rc));
	return gpu;
}

/* ---- leases and awaits racing the destroy ---- */

/*
 * Tasks lease and release in a loop (one awaits deadlines, one makes the graph calls that take
 * no lease: graph stats, forget, a DAG made and destroyed) while the test thread
 * destroys the GPU layer, each until its first refusal. A task holding a lease when the destroy
 * begins keeps it from finishing until every other task was refused, so each refusal is over
 * before the free; the destroy must order the refusals' accesses (its gate, `stopping`,
 * `active`) before that free itself. The refused tasks tell the holder with a relaxed counter on
 * purpose: an acquire there would give ThreadSanitizer the order that the destroy has to
 * provide. (ThreadSanitizer reported the refusals against the free until the destroy waited
 * for every call inside its gate, and every await's count, before freeing.)
 */
enum {
	RACE_LEASERS = 2,
	RACE_AWAITERS = 1,
	RACE_GRAPHERS = 1,
	RACE_REFUSERS = RACE_LEASERS + RACE_AWAITERS + RACE_GRAPHERS
};

static struct {
	tdm_gpu *gpu;
	atomic_int held;
	atomic_int refused; /* relaxed only: see above */
	atomic_size_t accepted;
	int rc[RACE_REFUSERS];
	int lease_rc, release_rc; /* the holder's */
} race;

static void race_holder(void *arg)
{
	(void)arg;
	tdm_stream *s;
	race.lease_rc = tdm_stream_lease(race.gpu, 0, TDM_STREAM_SHARED, &s);
	atomic_store_explicit(&race.held, 1, memory_order_release);
	if (race.lease_rc != 0)
		return;
	while (atomic_load_explicit(&race.refused, memory_order_relaxed) < RACE_REFUSERS)
		sched_yield();
	race.release_rc = tdm_stream_release(s);
}

static void race_leaser(void *arg)
{
	int *rc = arg;
	tdm_stream *s;
	/* A pause between leases: most refusals come after the destroy's first look at its gate,
	 * which would otherwise have ordered them by chance. */
	while ((*rc = tdm_stream_lease(race.gpu, 0, TDM_STREAM_SHARED, &s)) == 0) {
		*rc = tdm_stream_release(s);
		if (*rc != 0)
			break;
		atomic_fetch_add(&race.accepted, 1);
		tdm_test_sleep_us(20);
	}
	atomic_fetch_add_explicit(&race.refused, 1, memory_order_relaxed);
}

/* The graph calls that take the layer but no lease (tandem_graph.h), until one is refused. */
static void race_grapher(void *arg)
{
	int *rc = arg;
	tdm_graph_stats st;
	tdm_dag *d;
	for (;;) {
		if ((*rc = tdm_graph_stats_get(race.gpu, &st)) != 0)
			break;
		if ((*rc = tdm_graph_forget(race.gpu, 1)) != -ENOENT)
			break;
		if ((*rc = tdm_dag_create(race.gpu, &d)) != 0)
			break;
		tdm_dag_destroy(d);
		atomic_fetch_add(&race.accepted, 1);
		tdm_test_sleep_us(20);
	}
	atomic_fetch_add_explicit(&race.refused, 1, memory_order_relaxed);
}

/* Deadlines 20 us ahead, one after the other, until one is refused at once. */
static int race_awaiter(tdm_task *t, void *arg)
{
	int *rc = arg;
	TDM_BEGIN(t);
	for (;;) {
		TDM_AWAIT(t, *rc = tdm_await_deadline(t, race.gpu, tdm_now_ns() + 20000));
		/* Suspended: 0, or -ECANCELED by the destroy; 0 at once: the deadline had passed
		 * (a preempted task). */
		if (*rc == TDM_SUSPENDED)
			*rc = tdm_task_result(t);
		if (*rc != 0 && *rc != -ECANCELED)
			break;
		atomic_fetch_add(&race.accepted, 1);
	}
	atomic_fetch_add_explicit(&race.refused, 1, memory_order_relaxed);
	TDM_END(t);
}

Test(lease_errors, leases_and_awaits_racing_the_destroy_touch_no_freed_memory,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t rounds = tdm_test_size(40, 8);
	tdm_executor *ex = tdm_test_create(1 + RACE_REFUSERS);
	for (size_t round = 0; round < rounds; round++) {
		race.gpu = open_gpu(ex, 0);
		atomic_store(&race.held, 0);
		atomic_store(&race.refused, 0);
		atomic_store(&race.accepted, 0);
		race.lease_rc = race.release_rc = 12345;
		tdm_group g;
		cr_assert_eq(tdm_group_init(&g, ex), 0);
		cr_assert_eq(tdm_group_spawn(&g, race_holder, NULL), 0);
		while (!atomic_load_explicit(&race.held, memory_order_acquire))
			sched_yield();
		cr_assert_eq(race.lease_rc, 0, "the holder's lease: %d", race.lease_rc);
		for (int i = 0; i < RACE_REFUSERS; i++) {
			race.rc[i] = 12345;
			if (i < RACE_LEASERS)
				cr_assert_eq(tdm_group_spawn(&g, race_leaser, &race.rc[i]), 0);
			else if (i < RACE_LEASERS + RACE_AWAITERS)
				cr_assert_eq(tdm_spawn(ex, race_awaiter, &race.rc[i], &g), 0);
			else
				cr_assert_eq(tdm_group_spawn(&g, race_grapher, &race.rc[i]), 0);
		}
		while (atomic_load(&race.accepted) < RACE_REFUSERS)
			sched_yield();
		cr_assert_eq(tdm_gpu_destroy(race.gpu), 0);
		cr_assert_eq(tdm_group_wait(&g), 0);
		for (int i = 0; i < RACE_REFUSERS; i++)
			cr_assert_eq(race.rc[i], -ESHUTDOWN, "round %zu: task %d got %d (%s)",
			             round, i, race.rc[i], tdm_strerror(race.rc[i]));
		cr_assert_eq(race.release_rc, 0, "round %zu: the holder's release: %d", round,
		             race.release_rc);
	}
	tdm_test_destroy(ex);
}

/* ---- releases ---- */

/* An executor of `workers` and one sim device with a set of `streams` streams. */
static void open_streams(struct env *e, unsigned workers, unsigned streams)
{
	e->ex = tdm_test_create(workers);
	e->gpu = open_gpu(e->ex, streams);
}

/*
 * Two shared leases of the only stream of the set: releasing one of them twice is refused, and
 * the other is still held (an exclusive lease finds no stream free), still usable, and released
 * once.
 */
Test(lease_errors, a_second_release_of_a_shared_lease_is_einval_and_keeps_the_other,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	open_streams(&e, 1, 1);
	tdm_stream *a, *b, *x;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &b), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	cr_assert_eq(tdm_stream_release(a), -EINVAL, "a's lease was released already");
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &x), -EBUSY,
	             "b still holds the stream");
	cr_assert_eq(tdm_launch_spin(b, 0), 0, "b's lease is still b's");
	cr_assert_eq(tdm_stream_release(b), 0);
	cr_assert_eq(tdm_stream_release(b), -EINVAL);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &x), 0, "nobody holds it");
	cr_assert_eq(tdm_stream_release(x), 0);
	env_close(&e);
}

/* An exclusive lease released twice: the second is refused, and the stream is free once. */
Test(lease_errors, a_second_release_of_an_exclusive_lease_is_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	open_streams(&e, 1, 1);
	tdm_stream *x, *y, *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &x), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &s), -EBUSY);
	cr_assert_eq(tdm_stream_release(x), 0);
	cr_assert_eq(tdm_stream_release(x), -EINVAL);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &s), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &y), -EBUSY,
	             "s holds the stream");
	/* Handles are reused oldest first: x, just released, is not s's. */
	cr_assert_neq(s, x);
	cr_assert_eq(tdm_stream_release(x), -EINVAL, "x was released, and s holds the stream");
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	env_close(&e);
}

/*
 * Tasks on two workers, each with two shared leases of the only stream, release the first twice:
 * the second release is refused every time, and the task's other lease still works; at the end
 * no lease is left.
 */
struct sharer {
	tdm_gpu *gpu;
	atomic_int *again; /* second releases that were accepted */
	struct seen sn;
};

static int sharer_task(tdm_task *t, void *arg)
{
	struct sharer *sh = arg;
	tdm_stream *a, *b;
	(void)t;
	SEE(&sh->sn, tdm_stream_lease(sh->gpu, 0, TDM_STREAM_SHARED, &a));
	if (sh->sn.rc != 0)
		return 0;
	SEE(&sh->sn, tdm_stream_lease(sh->gpu, 0, TDM_STREAM_SHARED, &b));
	if (sh->sn.rc != 0) {
		tdm_stream_release(a);
		return 0;
	}
	SEE(&sh->sn, tdm_launch_spin(a, 0));
	SEE(&sh->sn, tdm_stream_release(a));
	if (tdm_stream_release(a) != -EINVAL)
		atomic_fetch_add(sh->again, 1);
	SEE(&sh->sn, tdm_launch_spin(b, 0));
	SEE(&sh->sn, tdm_stream_release(b));
	return 0;
}

Test(lease_errors, tasks_sharing_a_stream_each_release_only_their_own_lease,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	open_streams(&e, 2, 1);
	enum { N = 64 };
	static struct sharer sh[N];
	atomic_int again = 0;
	size_t rounds = tdm_test_size(20, 4);
	for (size_t round = 0; round < rounds; round++) {
		tdm_group g;
		cr_assert_eq(tdm_group_init(&g, e.ex), 0);
		for (int i = 0; i < N; i++) {
			sh[i] = (struct sharer){.gpu = e.gpu, .again = &again};
			cr_assert_eq(tdm_spawn(e.ex, sharer_task, &sh[i], &g), 0);
		}
		cr_assert_eq(tdm_group_wait(&g), 0);
		for (int i = 0; i < N; i++)
			ASSERT_SEEN(&sh[i].sn);
		cr_assert_eq(atomic_load(&again), 0, "second releases accepted");
	}
	tdm_stream *x;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &x), 0, "no lease is left");
	cr_assert_eq(tdm_stream_release(x), 0);
	env_close(&e);
}

/* ---- work on a released lease ---- */

/* Device buffer dev (LEN floats) copied to host, through a lease of its own. */
static void read_back(struct env *e, float *host, const float *dev)
{
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e->gpu, 0, TDM_STREAM_SHARED, &s), 0);
	cr_assert_eq(tdm_memcpy_async(s, host, dev, LEN * sizeof(float), TDM_COPY_D2H), 0);
	cr_assert_eq(tdm_test_await_stream(e->ex, s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
}

Test(lease_errors, work_on_a_released_lease_is_einval_and_enqueues_nothing,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	open_streams(&e, 1, 1);
	float *host, *x, *y;
	cr_assert_eq(tdm_host_alloc(e.gpu, 2 * LEN * sizeof(float), (void **)&host), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(float), (void **)&x), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(float), (void **)&y), 0);
	for (int i = 0; i < LEN; i++) {
		host[i] = (float)i;
		host[LEN + i] = -1.0f;
	}
	tdm_stream *s, *other;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &s), 0);
	cr_assert_eq(tdm_memcpy_async(s, x, host, LEN * sizeof(float), TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_memcpy_async(s, y, host + LEN, LEN * sizeof(float), TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0);
	/* Another holder of the same stream: the stream itself stays leased. */
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &other), 0);
	cr_assert_eq(tdm_stream_release(s), 0);

	cr_assert_eq(tdm_launch_scale(s, y, x, 2.0f, LEN), -EINVAL, "a kernel");
	cr_assert_eq(tdm_memcpy_async(s, x, host + LEN, LEN * sizeof(float), TDM_COPY_H2D), -EINVAL,
	             "a copy");
	cr_assert_eq(tdm_launch_spin(s, 0), -EINVAL, "a test kernel");
	cr_assert_eq(tdm_memcpy_peer_async(s, x, 0, y, 0, LEN * sizeof(float)), -EINVAL,
	             "a peer copy");
	cr_assert_eq(tdm_device_free_async(s, y), -EINVAL, "a stream-ordered free");
	void *more;
	cr_assert_eq(tdm_device_alloc_async(s, 64, &more), -EINVAL, "a stream-ordered alloc");
	cr_assert_eq(tdm_mem_prefetch(s, x, LEN * sizeof(float), 0), -EINVAL, "a prefetch");
	tdm_event *ev;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	cr_assert_eq(tdm_event_record(ev, s), -EINVAL, "a record");
	cr_assert_eq(tdm_event_put(ev), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), -EINVAL, "an await");
	cr_assert_eq(tdm_stream_device(s), -EINVAL);
	cr_assert_eq(tdm_stream_release(other), 0);

	/* Nothing ran: x still holds 0..LEN-1, y still -1 (and is still allocated). */
	read_back(&e, host, x);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(host[i], (float)i, "x[%d] was written", i);
	read_back(&e, host, y);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(host[i], -1.0f, "y[%d] was written", i);
	cr_assert_eq(tdm_device_free(e.gpu, 0, x), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, y), 0);
	cr_assert_eq(tdm_host_free(e.gpu, host), 0);
	env_close(&e);
}
