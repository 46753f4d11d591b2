// SPDX-License-Identifier: MIT
/*
 * Device-side edges between streams (tdm_stream_wait_event): work after an edge runs after the
 * work its event captured, across streams and devices, without a host wait; what an edge adds
 * nothing to; how failures cross an edge; bad arguments. On sim everywhere, on cuda where a
 * device exists.
 */
#include "common.h"
#include "gpu_env.h"

#define SPIN_NS 50000000u /* holds the first stream long enough for the second to run first */

/* A task on two leases: a (on device da) and b (on device db). */
struct edge_state {
	tdm_gpu *gpu;
	int da, db;
	bool edge;        /* make the edge (false: show what happens without it) */
	bool fault_a;     /* sim: the copy on a fails (an injected fault) */
	uint32_t spin_ns; /* a's kernel */
	tdm_stream *a, *b;
	tdm_event *e;
	int *x, *y; /* x on da, y on db */
	int *p;     /* pinned host memory: the hand-over between the devices */
	int *out;   /* pinned host memory: what b read back */
	int result_a, result_b;
	struct seen sn;
};

/* a: a long kernel, then x -> p, then record e. b: (the edge), p -> y, y -> out. Await both. */
static int edge_task(tdm_task *t, void *arg)
{
	struct edge_state *c = arg;
	TDM_BEGIN(t);
	SEE(&c->sn, tdm_stream_lease(c->gpu, c->da, TDM_STREAM_EXCLUSIVE, &c->a));
	SEE(&c->sn, tdm_stream_lease(c->gpu, c->db, TDM_STREAM_EXCLUSIVE, &c->b));
	if (c->sn.rc != 0)
		return 0;
	SEE(&c->sn, tdm_launch_spin(c->a, c->spin_ns));
	if (c->fault_a)
		SEE(&c->sn, tdm_sim_inject(c->a, TDM_SIM_FAULT_OP));
	SEE(&c->sn, tdm_memcpy_async(c->a, c->p, c->x, LEN * sizeof(int), TDM_COPY_D2H));
	SEE(&c->sn, tdm_event_record(c->e, c->a));
	if (c->edge)
		SEE(&c->sn, tdm_stream_wait_event(c->b, c->e));
	SEE(&c->sn, tdm_memcpy_async(c->b, c->y, c->p, LEN * sizeof(int), TDM_COPY_H2D));
	SEE(&c->sn, tdm_memcpy_async(c->b, c->out, c->y, LEN * sizeof(int), TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->b));
	c->result_b = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_stream(t, c->a));
	c->result_a = tdm_task_result(t);
	tdm_stream_release(c->a);
	tdm_stream_release(c->b);
	TDM_END(t);
}

struct fill_state {
	tdm_gpu *gpu;
	int dev;
	int *dst;
	const int *src;
	tdm_stream *s;
	int result;
	struct seen sn;
};

static int fill_task(tdm_task *t, void *arg)
{
	struct fill_state *f = arg;
	TDM_BEGIN(t);
	SEE(&f->sn, tdm_stream_lease(f->gpu, f->dev, 0, &f->s));
	if (f->sn.rc != 0)
		return 0;
	SEE(&f->sn, tdm_memcpy_async(f->s, f->dst, f->src, LEN * sizeof(int), TDM_COPY_H2D));
	TDM_AWAIT(t, tdm_await_stream(t, f->s));
	f->result = tdm_task_result(t);
	tdm_stream_release(f->s);
	TDM_END(t);
}

/* x (on da) holds 1..LEN, p and out hold -1, y (on db) 0; the event is on da. */
static void edge_setup(struct env *e, struct edge_state *c, int da, int db)
{
	*c = (struct edge_state){
	    .gpu = e->gpu, .da = da, .db = db, .spin_ns = SPIN_NS, .result_a = 1, .result_b = 1};
	cr_assert_eq(tdm_device_alloc(e->gpu, da, LEN * sizeof(int), (void **)&c->x), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, db, LEN * sizeof(int), (void **)&c->y), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, LEN * sizeof(int), (void **)&c->p), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, LEN * sizeof(int), (void **)&c->out), 0);
	cr_assert_eq(tdm_event_get(e->gpu, da, &c->e), 0);
	int *host;
	cr_assert_eq(tdm_pinned_alloc(e->gpu, LEN * sizeof(int), (void **)&host), 0);
	for (int i = 0; i < LEN; i++)
		host[i] = i + 1;
	struct fill_state f = {.gpu = e->gpu, .dev = da, .dst = c->x, .src = host, .result = 1};
	cr_assert_eq(run_one(e, fill_task, &f), 0);
	ASSERT_SEEN(&f.sn);
	cr_assert_eq(f.result, 0);
	memset(host, 0, LEN * sizeof(int));
	f = (struct fill_state){.gpu = e->gpu, .dev = db, .dst = c->y, .src = host, .result = 1};
	cr_assert_eq(run_one(e, fill_task, &f), 0);
	ASSERT_SEEN(&f.sn);
	cr_assert_eq(f.result, 0);
	cr_assert_eq(tdm_pinned_free(e->gpu, host), 0);
	for (int i = 0; i < LEN; i++)
		c->p[i] = c->out[i] = -1;
}

static void edge_teardown(struct env *e, struct edge_state *c)
{
	cr_assert_eq(tdm_event_put(c->e), 0);
	cr_assert_eq(tdm_pinned_free(e->gpu, c->p), 0);
	cr_assert_eq(tdm_pinned_free(e->gpu, c->out), 0);
	cr_assert_eq(tdm_device_free(e->gpu, c->da, c->x), 0);
	cr_assert_eq(tdm_device_free(e->gpu, c->db, c->y), 0);
}

/* How many ints b read back as x's (the rest it read before a's copy wrote them). */
static int read_after_a(const struct edge_state *c)
{
	int n = 0;
	for (int i = 0; i < LEN; i++)
		n += c->out[i] == i + 1;
	return n;
}

static void edge_orders(struct env *e, int da, int db)
{
	struct edge_state c;
	edge_setup(e, &c, da, db);
	c.edge = true;
	cr_assert_eq(run_one(e, edge_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result_a, 0);
	cr_assert_eq(c.result_b, 0);
	cr_assert_eq(read_after_a(&c), LEN, "b read %d of %d ints after a's copy", read_after_a(&c),
	             LEN);
	edge_teardown(e, &c);
}

#define EDGE_TESTS(suite, be)                                                                      \
	TDM_TEST_SUITE(suite);                                                                     \
	Test(suite, work_after_an_edge_runs_after_the_events_work,                                 \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		edge_orders(&e, 0, 0);                                                             \
		close_usable(&e);                                                                  \
	}                                                                                          \
	Test(suite, an_edge_orders_work_across_devices, .timeout = TDM_TEST_TIMEOUT(60))           \
	{                                                                                          \
		struct env e;                                                                      \
		tdm_gpu_config g;                                                                  \
		tdm_gpu_config_init(&g);                                                           \
		g.backend = be;                                                                    \
		g.sim_devices = 2;                                                                 \
		if (!env_open_cfg(&e, 2, &g))                                                      \
			cr_skip_test("no device for this backend");                                \
		if (tdm_gpu_device_count(e.gpu) < 2) {                                             \
			env_close(&e);                                                             \
			cr_skip_test("one device");                                                \
		}                                                                                  \
		edge_orders(&e, 0, 1);                                                             \
		close_usable(&e);                                                                  \
	}

EDGE_TESTS(edges_sim, TDM_BACKEND_SIM)
#ifndef TANDEM_TEST_NO_CUDA
EDGE_TESTS(edges_cuda, TDM_BACKEND_CUDA)
#endif

TDM_TEST_SUITE(edges);

/* The check above can fail: without the edge, b reads before a's copy has written. a's kernel
 * runs a second here, so that only a stream thread starved that long could make b read late. */
Test(edges, without_the_edge_the_second_stream_does_not_wait, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct edge_state c;
	edge_setup(&e, &c, 0, 0);
	c.edge = false;
	c.spin_ns = 1000000000u;
	cr_assert_eq(run_one(&e, edge_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result_b, 0);
	cr_assert_lt(read_after_a(&c), LEN, "b waited for a with no edge");
	edge_teardown(&e, &c);
	close_usable(&e);
}

/* A failed operation before the record fails what runs after the edge; both streams go on. */
Test(edges, a_failure_before_the_record_fails_the_work_after_the_edge,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct edge_state c;
	edge_setup(&e, &c, 0, 0);
	c.edge = true;
	c.fault_a = true;
	cr_assert_eq(run_one(&e, edge_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	/* (a's own await says 0: the record, a completion point, took the failure.) */
	cr_assert_eq(c.result_b, -EIO, "the work after the edge: %d", c.result_b);
	edge_teardown(&e, &c);
	close_usable(&e); /* the device was never failed */
}

/* An edge from an event whose device dies before the record runs ends its wait and fails, rather
 * than waiting for ever; the other device goes on. */
Test(edges, an_edge_from_a_dead_device_fails_instead_of_waiting, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	env_open_sim2(&e, 2);
	struct edge_state c;
	edge_setup(&e, &c, 0, 1);
	tdm_stream *a, *b;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 1, TDM_STREAM_EXCLUSIVE, &b), 0);
	cr_assert_eq(tdm_launch_spin(a, SPIN_NS), 0);
	cr_assert_eq(tdm_event_record(c.e, a), 0);
	cr_assert_eq(tdm_stream_wait_event(b, c.e), 0);
	cr_assert_eq(tdm_memcpy_async(b, c.out, c.y, LEN * sizeof(int), TDM_COPY_D2H), 0);
	kill_device(&e, 0); /* while a's kernel still runs: the record never will */
	cr_assert_eq(tdm_test_await_stream(e.ex, b), -EIO);
	/* Device 1 was not failed: work after its next completion point goes on. */
	cr_assert_eq(tdm_memcpy_async(b, c.out, c.y, LEN * sizeof(int), TDM_COPY_D2H), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, b), 0);
	tdm_stream_release(a);
	tdm_stream_release(b);
	cr_assert_eq(tdm_event_put(c.e), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, c.p), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, c.out), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 1, c.y), 0);
	/* A dead device's memory is still freed (a dead CUDA context's goes with it). */
	int rc = tdm_device_free(e.gpu, 0, c.x);
	cr_assert(rc == 0 || rc == -EIO, "%d", rc);
	env_close(&e);
}

/* An event never recorded, or last recorded on the waiting stream itself, adds no edge. */
Test(edges, an_edge_with_nothing_to_wait_for_enqueues_nothing, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	tdm_stream *a;
	tdm_event *ev;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	cr_assert_eq(tdm_stream_wait_event(a, ev), 0, "never recorded");
	cr_assert_eq(tdm_launch_spin(a, SPIN_NS), 0);
	cr_assert_eq(tdm_event_record(ev, a), 0);
	cr_assert_eq(tdm_stream_wait_event(a, ev), 0, "recorded on the same stream");
	cr_assert_eq(tdm_test_await_stream(e.ex, a), 0);
	tdm_stream_release(a);
	cr_assert_eq(tdm_event_put(ev), 0);
	close_usable(&e);
}

Test(edges, bad_arguments_are_einval, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e, other;
	env_open_sim2(&e, 2);
	env_open_sim2(&other, 1);
	tdm_stream *a, *released;
	tdm_event *ev, *put, *foreign;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 1, TDM_STREAM_EXCLUSIVE, &released), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &put), 0);
	cr_assert_eq(tdm_event_get(other.gpu, 0, &foreign), 0);
	cr_assert_eq(tdm_event_record(ev, a), 0);
	cr_assert_eq(tdm_event_put(put), 0);
	cr_assert_eq(tdm_stream_release(released), 0);
	cr_assert_eq(tdm_stream_wait_event(NULL, ev), -EINVAL);
	cr_assert_eq(tdm_stream_wait_event(a, NULL), -EINVAL);
	cr_assert_eq(tdm_stream_wait_event(released, ev), -EINVAL, "a released lease");
	cr_assert_eq(tdm_stream_wait_event(a, put), -EINVAL, "an event put back");
	cr_assert_eq(tdm_stream_wait_event(a, foreign), -EINVAL, "another layer's event");
	cr_assert_eq(tdm_event_put(foreign), 0);
	tdm_stream_release(a);
	cr_assert_eq(tdm_event_put(ev), 0);
	close_usable(&e);
	env_close(&other);
}
