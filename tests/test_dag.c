// SPDX-License-Identifier: MIT
/*
 * DAGs of GPU steps (tandem_graph.h, "DAGs"), and tdm_memset_async under them: a diamond of
 * copies, kernels and a memset whose result is right only if its order is kept, run lowered,
 * captured, replayed and updated in place; its branches spread over other streams while the
 * device has some to spare, and none leaks; a node added re-instantiates; a capture refused falls
 * back to lowering; failures, callback errors and bad arguments; a destroy with work in flight.
 * On sim everywhere, on cuda where a device exists. Tasks record what they saw; the test thread
 * asserts (common.h).
 */
#include "gpu_env.h"

#include <stdlib.h>
#include <string.h>

#include "tandem_graph.h"

#define N 1024
#define MAXRUNS 8
/* Holds a producer long enough for a consumer that did not wait to run first. */
#define SPIN_NS 5000000u

/* ---- nodes ---- */

struct kargs {
	float *y;
	const float *x;
	float a;
	size_t n;
	uint32_t spin_ns; /* a spin kernel first: the scale comes late */
	atomic_int calls;
};

static int scale_node(tdm_stream *s, void *arg)
{
	struct kargs *k = arg;
	atomic_fetch_add_explicit(&k->calls, 1, memory_order_relaxed);
	if (k->spin_ns != 0) {
		int rc = tdm_launch_spin(s, k->spin_ns);
		if (rc != 0)
			return rc;
	}
	return tdm_launch_scale(s, k->y, k->x, k->a, k->n);
}

/* ---- a task that runs a DAG `runs` times on an exclusive lease ---- */

struct runner {
	tdm_gpu *gpu;
	tdm_dag *d;
	tdm_stream *s;
	int runs, i;
	int rc[MAXRUNS], result[MAXRUNS], how[MAXRUNS], bad[MAXRUNS];
	unsigned streams[MAXRUNS];
	void (*before)(struct runner *r, int run); /* host side, before run `run` */
	int (*check)(struct runner *r, int run);   /* after it: mismatches */
	void *user;
	struct seen sn;
};

static int runner_task(tdm_task *t, void *arg)
{
	struct runner *r = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(r, TDM_STREAM_EXCLUSIVE);
	for (r->i = 0; r->i < r->runs; r->i++) {
		if (r->before != NULL)
			r->before(r, r->i);
		TDM_AWAIT(t, r->rc[r->i] = tdm_dag_run(t, r->s, r->d));
		r->result[r->i] = tdm_task_result(t);
		tdm_dag_stats st;
		SEE(&r->sn, tdm_dag_stats_get(r->d, &st));
		r->how[r->i] = st.last;
		r->streams[r->i] = st.streams;
		if (r->check != NULL)
			r->bad[r->i] = r->check(r, r->i);
	}
	SEE(&r->sn, tdm_stream_release(r->s));
	TDM_END(t);
}

static void run_runner(struct env *e, struct runner *r)
{
	r->gpu = e->gpu;
	cr_assert_eq(run_one(e, runner_task, r), 0);
	ASSERT_SEEN(&r->sn);
	for (int i = 0; i < r->runs; i++) {
		cr_assert(r->rc[i] == TDM_SUSPENDED || r->rc[i] == 0, "run %d: %d (%s)", i,
		          r->rc[i], tdm_strerror(r->rc[i]));
		cr_assert_eq(r->result[i], 0, "run %d resumed with %d (%s)", i, r->result[i],
		             tdm_strerror(r->result[i]));
		cr_assert_eq(r->bad[i], 0, "run %d: %d values wrong", i, r->bad[i]);
	}
}

/* ---- the diamond ---- */

/*
 * n0: a <- h_in                       (copy H2D)
 * n1: b = 2a, after a spin            (kernel, after n0)
 * n2: c = 3a                          (kernel, after n0: a branch of its own)
 * n3: out = 0                         (memset, no dependency: another branch)
 * n4: out[0, N) <- b                  (copy D2D, after n1 and n3)
 * n5: out[N, 2N) <- c                 (copy D2D, after n2 and n3)
 * n6: h_out <- out                    (copy D2H, after n4 and n5)
 * h_out is 2x, 3x of this run's input only if every edge held.
 */
struct diamond {
	float *h_in, *h_out;      /* pinned: N, 2N */
	float *a, *b, *c, *out;   /* device: N, N, N, 2N */
	struct kargs k1, k2, k1b; /* k1b: n1 with factor 5, for tdm_dag_set_kernel_arg */
	int n[7];
	float f1; /* n1's factor this run */
	tdm_dag *d;
};

static void diamond_open(struct env *e, struct diamond *m)
{
	memset(m, 0, sizeof(*m));
	cr_assert_eq(tdm_pinned_alloc(e->gpu, N * sizeof(float), (void **)&m->h_in), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, 2 * N * sizeof(float), (void **)&m->h_out), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, N * sizeof(float), (void **)&m->a), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, N * sizeof(float), (void **)&m->b), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, N * sizeof(float), (void **)&m->c), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, 2 * N * sizeof(float), (void **)&m->out), 0);
	m->k1 = (struct kargs){.y = m->b, .x = m->a, .a = 2, .n = N, .spin_ns = SPIN_NS};
	m->k1b = (struct kargs){.y = m->b, .x = m->a, .a = 5, .n = N, .spin_ns = SPIN_NS};
	m->k2 = (struct kargs){.y = m->c, .x = m->a, .a = 3, .n = N};
	m->f1 = 2;
	cr_assert_eq(tdm_dag_create(e->gpu, &m->d), 0);
	tdm_dag *d = m->d;
	m->n[0] = tdm_dag_copy(d, m->a, m->h_in, N * sizeof(float), TDM_COPY_H2D, NULL, 0);
	m->n[1] = tdm_dag_kernel(d, scale_node, &m->k1, &m->n[0], 1);
	m->n[2] = tdm_dag_kernel(d, scale_node, &m->k2, &m->n[0], 1);
	m->n[3] = tdm_dag_memset(d, m->out, 0, 2 * N * sizeof(float), NULL, 0);
	int d4[] = {m->n[1], m->n[3]}, d5[] = {m->n[2], m->n[3]};
	m->n[4] = tdm_dag_copy(d, m->out, m->b, N * sizeof(float), TDM_COPY_D2D, d4, 2);
	m->n[5] = tdm_dag_copy(d, m->out + N, m->c, N * sizeof(float), TDM_COPY_D2D, d5, 2);
	int d6[] = {m->n[4], m->n[5]};
	m->n[6] = tdm_dag_copy(d, m->h_out, m->out, 2 * N * sizeof(float), TDM_COPY_D2H, d6, 2);
	for (int i = 0; i < 7; i++)
		cr_assert_eq(m->n[i], i, "node %d got id %d", i, m->n[i]);
}

static void diamond_close(struct env *e, struct diamond *m)
{
	cr_assert_eq(tdm_dag_destroy(m->d), 0);
	cr_assert_eq(tdm_pinned_free(e->gpu, m->h_in), 0);
	cr_assert_eq(tdm_pinned_free(e->gpu, m->h_out), 0);
	cr_assert_eq(tdm_device_free(e->gpu, 0, m->a), 0);
	cr_assert_eq(tdm_device_free(e->gpu, 0, m->b), 0);
	cr_assert_eq(tdm_device_free(e->gpu, 0, m->c), 0);
	cr_assert_eq(tdm_device_free(e->gpu, 0, m->out), 0);
}

/* This run's input: (i + 1) * (run + 1); h_out to -1. */
static void diamond_before(struct runner *r, int run)
{
	struct diamond *m = r->user;
	for (int i = 0; i < N; i++)
		m->h_in[i] = (float)((i + 1) * (run + 1));
	for (int i = 0; i < 2 * N; i++)
		m->h_out[i] = -1;
}

static int diamond_check(struct runner *r, int run)
{
	struct diamond *m = r->user;
	int bad = 0;
	for (int i = 0; i < N; i++) {
		float x = (float)((i + 1) * (run + 1));
		bad += m->h_out[i] != m->f1 * x;
		bad += m->h_out[N + i] != 3 * x;
	}
	return bad;
}

static void diamond_runner(struct runner *r, struct diamond *m, int runs)
{
	memset(r, 0, sizeof(*r));
	r->d = m->d;
	r->runs = runs;
	r->before = diamond_before;
	r->check = diamond_check;
	r->user = m;
}

/* Lowered twice (tdm_gpu_config.graph_capture_after's default), captured on the third run,
 * replayed after: right every time, with each run's own input. */
static void diamond_runs(struct env *e)
{
	struct diamond m;
	diamond_open(e, &m);
	struct runner r;
	diamond_runner(&r, &m, 5);
	run_runner(e, &r);
	cr_assert_eq(r.how[0], TDM_GRAPH_DIRECT);
	cr_assert_eq(r.how[1], TDM_GRAPH_DIRECT);
	cr_assert_eq(r.how[2], TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(r.how[3], TDM_GRAPH_REPLAYED);
	cr_assert_eq(r.how[4], TDM_GRAPH_REPLAYED);
	/* Callbacks run for the lowerings and the capture, never for a replay. */
	cr_assert_eq(atomic_load(&m.k1.calls), 3);
	tdm_dag_stats st;
	cr_assert_eq(tdm_dag_stats_get(m.d, &st), 0);
	cr_assert_eq(st.nodes, 7);
	cr_assert_eq(st.width, 3, "lanes: a, c's branch, the memset's");
	cr_assert_eq(st.runs, 5);
	cr_assert_eq(st.lowered, 2);
	cr_assert_eq(st.captured, 1);
	cr_assert_eq(st.replayed, 2);
	cr_assert_eq(st.updated, 0);
	diamond_close(e, &m);
}

/* After a replay, n1's argument changes: the next run captures again and updates the graph in
 * place, and its result has the new factor; the run after replays that. */
static void switch_to_k1b(struct runner *r, int run)
{
	struct diamond *m = r->user;
	diamond_before(r, run);
	if (run == 3) {
		int rc = tdm_dag_set_kernel_arg(m->d, m->n[1], &m->k1b);
		if (rc != 0 && r->sn.rc == 0)
			r->sn.rc = rc;
		m->f1 = 5;
	}
}

static void diamond_update(struct env *e)
{
	struct diamond m;
	diamond_open(e, &m);
	struct runner r;
	diamond_runner(&r, &m, 5);
	r.before = switch_to_k1b;
	run_runner(e, &r);
	cr_assert_eq(r.how[2], TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(r.how[3], TDM_GRAPH_UPDATED, "run 4: %d", r.how[3]);
	cr_assert_eq(r.how[4], TDM_GRAPH_REPLAYED);
	cr_assert_eq(atomic_load(&m.k1b.calls), 1, "captured once, then replayed");
	diamond_close(e, &m);
}

/* A node added after the capture: lowered twice again, then a new instantiation behind the same
 * graph; the new node's work is in the result. */
struct grown {
	struct diamond *m;
	float *h_more; /* pinned: N, what n7 copies back of c */
	int n7;
};

static void grow_at_3(struct runner *r, int run)
{
	struct grown *g = r->user;
	r->user = g->m;
	diamond_before(r, run);
	r->user = g;
	for (int i = 0; i < N; i++)
		g->h_more[i] = -1;
	if (run == 3) {
		int dep = g->m->n[2];
		g->n7 = tdm_dag_copy(g->m->d, g->h_more, g->m->c, N * sizeof(float), TDM_COPY_D2H,
		                     &dep, 1);
	}
}

static int grown_check(struct runner *r, int run)
{
	struct grown *g = r->user;
	r->user = g->m;
	int bad = diamond_check(r, run);
	r->user = g;
	for (int i = 0; run >= 3 && i < N; i++)
		bad += g->h_more[i] != (float)(3 * (i + 1) * (run + 1));
	return bad;
}

static void diamond_grows(struct env *e)
{
	struct diamond m;
	diamond_open(e, &m);
	struct grown g = {.m = &m};
	cr_assert_eq(tdm_pinned_alloc(e->gpu, N * sizeof(float), (void **)&g.h_more), 0);
	struct runner r;
	diamond_runner(&r, &m, 7);
	r.before = grow_at_3;
	r.check = grown_check;
	r.user = &g;
	run_runner(e, &r);
	cr_assert_eq(g.n7, 7);
	int want[] = {TDM_GRAPH_DIRECT,  TDM_GRAPH_DIRECT, TDM_GRAPH_INSTANTIATED,
	              TDM_GRAPH_DIRECT,  TDM_GRAPH_DIRECT, TDM_GRAPH_INSTANTIATED,
	              TDM_GRAPH_REPLAYED};
	for (int i = 0; i < 7; i++)
		cr_assert_eq(r.how[i], want[i], "run %d: %d, not %d", i, r.how[i], want[i]);
	tdm_dag_stats st;
	cr_assert_eq(tdm_dag_stats_get(m.d, &st), 0);
	cr_assert_eq(st.nodes, 8);
	cr_assert_eq(st.captured, 2);
	cr_assert_eq(tdm_pinned_free(e->gpu, g.h_more), 0);
	diamond_close(e, &m);
}

/* ---- memsets ---- */

struct memset_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	unsigned char *dev, *host;
	int result;
	int bad_range, bad_dst, zero, null_stream;
	struct seen sn;
};

static int memset_task(tdm_task *t, void *arg)
{
	struct memset_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	SEE(&c->sn, tdm_memset_async(c->s, c->dev, 0x5a, 4096));
	SEE(&c->sn, tdm_memset_async(c->s, c->dev + 1000, 0x17, 24));
	c->zero = tdm_memset_async(c->s, c->dev, 0x33, 0);
	c->bad_range = tdm_memset_async(c->s, c->dev + 4000, 0, 200);
	c->bad_dst = tdm_memset_async(c->s, NULL, 0, 16);
	c->null_stream = tdm_memset_async(NULL, c->dev, 0, 16);
	SEE(&c->sn, tdm_memcpy_async(c->s, c->host, c->dev, 4096, TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

static void memset_sets_bytes(struct env *e)
{
	struct memset_state c = {.gpu = e->gpu, .result = 1};
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, 4096, (void **)&c.dev), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, 4096, (void **)&c.host), 0);
	memset(c.host, 0, 4096);
	cr_assert_eq(run_one(e, memset_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, 0);
	cr_assert_eq(c.zero, 0);
	cr_assert_eq(c.bad_range, -EINVAL, "a range past the allocation: %d", c.bad_range);
	cr_assert_eq(c.bad_dst, -EINVAL);
	cr_assert_eq(c.null_stream, -EINVAL);
	for (int i = 0; i < 4096; i++)
		cr_assert_eq(c.host[i], i >= 1000 && i < 1024 ? 0x17 : 0x5a, "byte %d: %#x", i,
		             c.host[i]);
	cr_assert_eq(tdm_pinned_free(e->gpu, c.host), 0);
	cr_assert_eq(tdm_device_free(e->gpu, 0, c.dev), 0);
}

/* A memset node whose value changes after the capture: updated in place, the new value set. */
struct mset {
	tdm_dag *d;
	unsigned char *dev, *host;
	int node;
	int value;
};

static void mset_before(struct runner *r, int run)
{
	struct mset *m = r->user;
	memset(m->host, 0, 256);
	if (run == 3) {
		m->value = 0x42;
		int rc = tdm_dag_set_memset(m->d, m->node, m->dev, m->value, 256);
		if (rc != 0 && r->sn.rc == 0)
			r->sn.rc = rc;
	}
}

static int mset_check(struct runner *r, int run)
{
	(void)run;
	struct mset *m = r->user;
	int bad = 0;
	for (int i = 0; i < 256; i++)
		bad += m->host[i] != m->value;
	return bad;
}

static void memset_node_updates(struct env *e)
{
	struct mset m = {.value = 0x24};
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, 256, (void **)&m.dev), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, 256, (void **)&m.host), 0);
	cr_assert_eq(tdm_dag_create(e->gpu, &m.d), 0);
	m.node = tdm_dag_memset(m.d, m.dev, m.value, 256, NULL, 0);
	cr_assert_eq(m.node, 0);
	cr_assert_eq(tdm_dag_copy(m.d, m.host, m.dev, 256, TDM_COPY_D2H, &m.node, 1), 1);
	struct runner r = {
	    .d = m.d, .runs = 5, .before = mset_before, .check = mset_check, .user = &m};
	run_runner(e, &r);
	cr_assert_eq(r.how[2], TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(r.how[3], TDM_GRAPH_UPDATED);
	cr_assert_eq(r.how[4], TDM_GRAPH_REPLAYED);
	cr_assert_eq(tdm_dag_destroy(m.d), 0);
	cr_assert_eq(tdm_pinned_free(e->gpu, m.host), 0);
	cr_assert_eq(tdm_device_free(e->gpu, 0, m.dev), 0);
}

/* ---- a failing node ---- */

struct fault_args {
	int mode; /* 0: a spin; 1: an operation fault (sim) then a spin; 2: a trapping kernel */
	int only_run;
	atomic_int calls;
};

static int fault_node(tdm_stream *s, void *arg)
{
	struct fault_args *f = arg;
	int call = atomic_fetch_add_explicit(&f->calls, 1, memory_order_relaxed);
	if (call == f->only_run && f->mode == 1) {
		int rc = tdm_sim_inject(s, TDM_SIM_FAULT_OP);
		if (rc != 0)
			return rc;
	}
	if (call == f->only_run && f->mode == 2)
		return tdm_launch_fault(s);
	return tdm_launch_spin(s, 1000);
}

struct fault_dag {
	tdm_gpu *gpu;
	tdm_dag *d;
	tdm_stream *s;
	int rc, result, after;
	struct seen sn;
};

static int fault_dag_task(tdm_task *t, void *arg)
{
	struct fault_dag *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	TDM_AWAIT(t, c->rc = tdm_dag_run(t, c->s, c->d));
	c->result = c->rc == TDM_SUSPENDED ? tdm_task_result(t) : c->rc;
	TDM_AWAIT(t, tdm_dag_run(t, c->s, c->d));
	c->after = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

/* n0: a spin on s; n1: the failing node, a branch of its own (another stream); n2: after both. */
static void failing_node(struct env *e, int mode)
{
	struct fault_args f = {.mode = mode, .only_run = 0};
	struct fault_args spin = {.mode = 0};
	struct fault_dag c = {.gpu = e->gpu, .result = 1, .after = 1};
	cr_assert_eq(tdm_dag_create(e->gpu, &c.d), 0);
	int n0 = tdm_dag_kernel(c.d, fault_node, &spin, NULL, 0);
	int n1 = tdm_dag_kernel(c.d, fault_node, &f, NULL, 0);
	int deps[] = {n0, n1};
	cr_assert_eq(tdm_dag_kernel(c.d, fault_node, &spin, deps, 2), 2);
	cr_assert_eq(run_one(e, fault_dag_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, -EIO, "the run with the failing node resumed with %d", c.result);
	if (mode == 1)
		cr_assert_eq(c.after, 0, "the next run, with nothing failing: %d", c.after);
	else
		cr_assert_eq(c.after, -EIO, "a failed device fails the next run: %d", c.after);
	tdm_dag_stats st;
	cr_assert_eq(tdm_dag_stats_get(c.d, &st), 0);
	if (mode == 1)
		cr_assert_geq(st.streams, 2, "the failing node ran on a stream of its own");
	cr_assert_eq(tdm_dag_destroy(c.d), 0);
}

/* ---- the suites, on sim and on cuda ---- */

#define DAG_TESTS(suite, be)                                                                       \
	TDM_TEST_SUITE(suite);                                                                     \
	Test(suite, a_diamond_is_right_lowered_captured_and_replayed,                              \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		diamond_runs(&e);                                                                  \
		close_usable(&e);                                                                  \
	}                                                                                          \
	Test(suite, a_kernel_argument_changed_updates_the_graph_in_place,                          \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		diamond_update(&e);                                                                \
		close_usable(&e);                                                                  \
	}                                                                                          \
	Test(suite, a_node_added_lowers_again_then_reinstantiates,                                 \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		diamond_grows(&e);                                                                 \
		close_usable(&e);                                                                  \
	}                                                                                          \
	Test(suite, memset_sets_bytes_in_stream_order, .timeout = TDM_TEST_TIMEOUT(60))            \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		memset_sets_bytes(&e);                                                             \
		close_usable(&e);                                                                  \
	}                                                                                          \
	Test(suite, a_memset_node_changed_updates_the_graph, .timeout = TDM_TEST_TIMEOUT(60))      \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		memset_node_updates(&e);                                                           \
		close_usable(&e);                                                                  \
	}                                                                                          \
	Test(suite, a_trapping_node_resumes_the_run_with_eio, .timeout = TDM_TEST_TIMEOUT(60))     \
	{                                                                                          \
		struct env e;                                                                      \
		if (!env_open(&e, be, TDM_COMPLETION_AUTO, 2))                                     \
			cr_skip_test("no device for this backend");                                \
		failing_node(&e, 2);                                                               \
		env_close(&e);                                                                     \
	}

DAG_TESTS(dag_sim, TDM_BACKEND_SIM)
#ifndef TANDEM_TEST_NO_CUDA
DAG_TESTS(dag_cuda, TDM_BACKEND_CUDA)
#endif

TDM_TEST_SUITE(dag);

/* An operation's fault on a branch crosses the edge into s: the run resumes with -EIO, and the
 * device goes on (the next run is fine). */
Test(dag, a_failed_branch_fails_the_run_and_the_next_goes_on, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	failing_node(&e, 1);
	close_usable(&e);
}

/* ---- streams: as many as the width, one left to shared leases, none leaked ---- */

static void open_four(struct env *e)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = 4;
	cr_assert(env_open_cfg(e, 2, &g));
}

/* Leases `n` streams of device 0 exclusively into x (the test's thread). */
static void hold(struct env *e, tdm_stream **x, int n)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &x[i]), 0,
		             "lease %d", i);
}

static void unhold(tdm_stream **x, int n)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(tdm_stream_release(x[i]), 0);
}

/* The diamond's three lanes on four streams: s and two more, leaving one to shared leases; with
 * one held elsewhere, s and one more; with all three held, s alone, as right as ever. */
Test(dag, branches_take_the_streams_the_device_can_spare, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	open_four(&e);
	struct diamond m;
	diamond_open(&e, &m);
	unsigned want[] = {3, 2, 1};
	for (int held = 0; held < 3; held++) {
		tdm_stream *x[3];
		hold(&e, x, held);
		struct runner r;
		diamond_runner(&r, &m, 2);
		run_runner(&e, &r);
		for (int i = 0; i < 2; i++)
			cr_assert_eq(r.streams[i], want[held],
			             "%d streams held elsewhere: run %d used %u streams", held, i,
			             r.streams[i]);
		unhold(x, held);
		/* Lowered only: a new DAG each time, so that no capture comes in between. */
		diamond_close(&e, &m);
		diamond_open(&e, &m);
	}
	diamond_close(&e, &m);
	close_usable(&e);
}

/* After lowered, captured and replayed runs, every stream of the device can be leased
 * exclusively again: the run's other leases went back. */
Test(dag, no_lease_is_left_behind, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	open_four(&e);
	struct diamond m;
	diamond_open(&e, &m);
	struct runner r;
	diamond_runner(&r, &m, 4);
	run_runner(&e, &r);
	cr_assert_eq(r.how[2], TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(r.streams[0], 3);
	cr_assert_eq(r.streams[2], 3, "the capture forked onto other streams too");
	tdm_stream *x[4];
	hold(&e, x, 4);
	unhold(x, 4);
	diamond_close(&e, &m);
	close_usable(&e);
}

/* ---- captures refused, callbacks failing ---- */

/* A copy from pageable memory is staged, which a capture refuses: the capture run lowers instead,
 * and the DAG stays lowered, right every time. */
struct pageable {
	float *host; /* malloc: pageable */
	float *dev;
	float *h_out; /* pinned */
};

static void pageable_before(struct runner *r, int run)
{
	struct pageable *p = r->user;
	for (int i = 0; i < N; i++) {
		p->host[i] = (float)(i * (run + 2));
		p->h_out[i] = -1;
	}
}

static int pageable_check(struct runner *r, int run)
{
	struct pageable *p = r->user;
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += p->h_out[i] != (float)(i * (run + 2));
	return bad;
}

Test(dag, a_dag_its_capture_refuses_stays_lowered, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct pageable p;
	p.host = malloc(N * sizeof(float));
	cr_assert_not_null(p.host);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, N * sizeof(float), (void **)&p.dev), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, N * sizeof(float), (void **)&p.h_out), 0);
	tdm_dag *d;
	cr_assert_eq(tdm_dag_create(e.gpu, &d), 0);
	int n0 = tdm_dag_copy(d, p.dev, p.host, N * sizeof(float), TDM_COPY_H2D, NULL, 0);
	cr_assert_eq(tdm_dag_copy(d, p.h_out, p.dev, N * sizeof(float), TDM_COPY_D2H, &n0, 1), 1);
	struct runner r = {
	    .d = d, .runs = 5, .before = pageable_before, .check = pageable_check, .user = &p};
	run_runner(&e, &r);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(r.how[i], TDM_GRAPH_DIRECT, "run %d: %d", i, r.how[i]);
	tdm_graph_stats gs;
	cr_assert_eq(tdm_graph_stats_get(e.gpu, &gs), 0);
	cr_assert_eq(gs.abandoned, 1, "one capture tried: %llu", (unsigned long long)gs.abandoned);
	cr_assert_eq(tdm_dag_destroy(d), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, p.h_out), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, p.dev), 0);
	free(p.host);
	close_usable(&e);
}

static int failing_callback(tdm_stream *s, void *arg)
{
	(void)s;
	(void)arg;
	return -EPERM;
}

/* A spin, then a memset of 4096 bytes of arg to 0x44: a branch that ends late. */
static int slow_memset_node(tdm_stream *s, void *arg)
{
	int rc = tdm_launch_spin(s, SPIN_NS);
	return rc != 0 ? rc : tdm_memset_async(s, arg, 0x44, 4096);
}

struct err_state {
	tdm_gpu *gpu;
	tdm_dag *d;
	tdm_stream *s;
	unsigned char *dev, *host;
	int rc, result, after;
	struct seen sn;
};

static int err_task(tdm_task *t, void *arg)
{
	struct err_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	c->rc = tdm_dag_run(t, c->s, c->d);
	c->result = tdm_task_result(t);
	/* What was enqueued before the failing callback was joined into s: this copy reads what
	 * the branch wrote. */
	SEE(&c->sn, tdm_memcpy_async(c->s, c->host, c->dev, 4096, TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->after = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

/* A callback's error comes back at once, as the task's result too; the nodes enqueued before it
 * (a slow branch on another stream) are covered by an await of s. */
Test(dag, a_callbacks_error_comes_back_at_once, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	void *other;
	struct err_state c = {.gpu = e.gpu, .rc = 1, .result = 1, .after = 1};
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, (void **)&c.dev), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &other), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4096, (void **)&c.host), 0);
	memset(c.host, 0, 4096);
	cr_assert_eq(tdm_dag_create(e.gpu, &c.d), 0);
	int n0 = tdm_dag_memset(c.d, other, 0x11, 4096, NULL, 0);               /* on s */
	cr_assert_eq(tdm_dag_kernel(c.d, slow_memset_node, c.dev, NULL, 0), 1); /* a branch */
	cr_assert_eq(tdm_dag_kernel(c.d, failing_callback, NULL, &n0, 1), 2);   /* on s */
	cr_assert_eq(run_one(&e, err_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc, -EPERM);
	cr_assert_eq(c.result, -EPERM, "the task's result is the error too");
	cr_assert_eq(c.after, 0);
	for (int i = 0; i < 4096; i++)
		cr_assert_eq(c.host[i], 0x44, "byte %d: %#x, read before the branch wrote it", i,
		             c.host[i]);
	tdm_dag_stats st;
	cr_assert_eq(tdm_dag_stats_get(c.d, &st), 0);
	cr_assert_eq(st.last, 0);
	cr_assert_eq(st.runs, 0);
	cr_assert_eq(st.streams, 2, "the branch ran on a stream of its own");
	cr_assert_eq(tdm_dag_destroy(c.d), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, c.host), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, c.dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, other), 0);
	close_usable(&e);
}

/* A callback that calls its own DAG: each call's result, then its own enqueue. */
struct meddler {
	tdm_dag *d;
	tdm_task *t;
	void *dev, *from, *to; /* the memsets', the copy's */
	int destroy, kernel, copy, memset, set_arg, set_copy, set_memset, run, stats;
	atomic_int calls;
};

static int nothing_node(tdm_stream *s, void *arg)
{
	(void)arg;
	return tdm_launch_spin(s, 0);
}

static int meddling_node(tdm_stream *s, void *arg)
{
	struct meddler *m = arg;
	atomic_fetch_add_explicit(&m->calls, 1, memory_order_relaxed);
	m->destroy = tdm_dag_destroy(m->d);
	m->kernel = tdm_dag_kernel(m->d, nothing_node, NULL, NULL, 0);
	m->copy = tdm_dag_copy(m->d, m->to, m->from, 64, TDM_COPY_D2D, NULL, 0);
	m->memset = tdm_dag_memset(m->d, m->dev, 0, 64, NULL, 0);
	m->set_arg = tdm_dag_set_kernel_arg(m->d, 0, m);
	m->set_copy = tdm_dag_set_copy(m->d, 1, m->from, m->to, 64);
	m->set_memset = tdm_dag_set_memset(m->d, 2, m->dev, 1, 64);
	m->run = tdm_dag_run(m->t, s, m->d);
	tdm_dag_stats st;
	m->stats = tdm_dag_stats_get(m->d, &st);
	return tdm_memset_async(s, m->dev, 0x5a, 64);
}

struct meddle_run {
	tdm_gpu *gpu;
	tdm_stream *s;
	struct meddler *m;
	int rc, result;
	struct seen sn;
};

static int meddle_task(tdm_task *t, void *arg)
{
	struct meddle_run *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	c->m->t = t;
	TDM_AWAIT(t, tdm_dag_run(t, c->s, c->m->d));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

/* A callback that destroys its DAG, adds or changes a node, runs it or asks its stats gets
 * -EBUSY (its run holds the DAG) and changes nothing: the run goes on with its callback's own
 * enqueue, the DAG keeps its four nodes and runs again. Before, a destroy there freed the DAG
 * under its run and an added node overran the run's plan. */
Test(dag, a_callback_that_calls_its_dag_gets_ebusy, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct meddler m = {.destroy = 1};
	unsigned char *host;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, &m.dev), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, &m.from), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, &m.to), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 64, (void **)&host), 0);
	cr_assert_eq(tdm_dag_create(e.gpu, &m.d), 0);
	cr_assert_eq(tdm_dag_kernel(m.d, nothing_node, NULL, NULL, 0), 0);
	cr_assert_eq(tdm_dag_copy(m.d, m.to, m.from, 64, TDM_COPY_D2D, NULL, 0), 1);
	int two = tdm_dag_memset(m.d, m.dev, 0, 64, NULL, 0);
	cr_assert_eq(two, 2);
	cr_assert_eq(tdm_dag_kernel(m.d, meddling_node, &m, &two, 1), 3);
	for (int run = 0; run < 2; run++) {
		struct meddle_run c = {.gpu = e.gpu, .m = &m, .rc = 1, .result = 1};
		cr_assert_eq(run_one(&e, meddle_task, &c), 0);
		ASSERT_SEEN(&c.sn);
		cr_assert_eq(c.result, 0, "run %d: %s", run, tdm_strerror(c.result));
		cr_assert_eq(atomic_load(&m.calls), run + 1, "the callback ran");
		cr_assert_eq(m.destroy, -EBUSY, "destroy in a callback");
		cr_assert_eq(m.kernel, -EBUSY, "a kernel node added in a callback");
		cr_assert_eq(m.copy, -EBUSY);
		cr_assert_eq(m.memset, -EBUSY);
		cr_assert_eq(m.set_arg, -EBUSY);
		cr_assert_eq(m.set_copy, -EBUSY);
		cr_assert_eq(m.set_memset, -EBUSY);
		cr_assert_eq(m.run, -EBUSY, "a run of its DAG in a callback");
		cr_assert_eq(m.stats, -EBUSY, "stats in a callback: the run holds the DAG");
		tdm_dag_stats st;
		cr_assert_eq(tdm_dag_stats_get(m.d, &st), 0);
		cr_assert_eq(st.nodes, 4, "nothing added");
		cr_assert_eq(st.last, TDM_GRAPH_DIRECT, "run %d lowered: callbacks called", run);
	}
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_memcpy_async(s, host, m.dev, 64, TDM_COPY_D2H), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(host[i], 0x5a, "byte %d: the callback's own memset ran last", i);
	cr_assert_eq(tdm_dag_destroy(m.d), 0, "once not running");
	cr_assert_eq(tdm_pinned_free(e.gpu, host), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.from), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.to), 0);
	close_usable(&e);
}

/* The work enqueued on s before the run comes first, for the nodes on other streams too: a
 * branch's copy reads what a slow memset on s wrote. */
struct after_s {
	tdm_gpu *gpu;
	tdm_dag *d;
	tdm_stream *s;
	unsigned char *dev;
	int result;
	unsigned streams;
	struct seen sn;
};

static int after_s_task(tdm_task *t, void *arg)
{
	struct after_s *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	SEE(&c->sn, tdm_launch_spin(c->s, SPIN_NS));
	SEE(&c->sn, tdm_memset_async(c->s, c->dev, 0x33, 4096));
	TDM_AWAIT(t, tdm_dag_run(t, c->s, c->d));
	c->result = tdm_task_result(t);
	tdm_dag_stats st;
	SEE(&c->sn, tdm_dag_stats_get(c->d, &st));
	c->streams = st.streams;
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

Test(dag, a_run_follows_the_work_enqueued_on_s_before_it, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct after_s c = {.gpu = e.gpu, .result = 1};
	unsigned char *other, *host;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, (void **)&c.dev), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, (void **)&other), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4096, (void **)&host), 0);
	memset(host, 0, 4096);
	cr_assert_eq(tdm_dag_create(e.gpu, &c.d), 0);
	cr_assert_eq(tdm_dag_memset(c.d, other, 1, 4096, NULL, 0), 0);                /* on s */
	cr_assert_eq(tdm_dag_copy(c.d, host, c.dev, 4096, TDM_COPY_D2H, NULL, 0), 1); /* a branch */
	cr_assert_eq(run_one(&e, after_s_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, 0);
	cr_assert_eq(c.streams, 2, "the copy ran on a stream of its own");
	for (int i = 0; i < 4096; i++)
		cr_assert_eq(host[i], 0x33, "byte %d: %#x, read before the memset on s", i,
		             host[i]);
	cr_assert_eq(tdm_dag_destroy(c.d), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, host), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, other), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, c.dev), 0);
	close_usable(&e);
}

/* ---- bad arguments ---- */

struct bad_run {
	tdm_gpu *gpu;
	tdm_dag *d;
	tdm_stream *s, *x;
	int shared, shared_result, null_dag, null_stream, capturing, capture_end;
	struct seen sn;
};

static int bad_run_task(tdm_task *t, void *arg)
{
	struct bad_run *c = arg;
	TDM_BEGIN(t);
	SEE(&c->sn, tdm_stream_lease(c->gpu, 0, 0, &c->s));
	SEE(&c->sn, tdm_stream_lease(c->gpu, 0, TDM_STREAM_EXCLUSIVE, &c->x));
	if (c->sn.rc != 0)
		return 0;
	c->shared = tdm_dag_run(t, c->s, c->d);
	c->shared_result = tdm_task_result(t);
	c->null_dag = tdm_dag_run(t, c->x, NULL);
	c->null_stream = tdm_dag_run(t, NULL, c->d);
	SEE(&c->sn, tdm_graph_capture_begin(c->x));
	c->capturing = tdm_dag_run(t, c->x, c->d);
	tdm_graph *g = NULL;
	c->capture_end = tdm_graph_capture_end(c->x, &g);
	SEE(&c->sn, tdm_stream_release(c->s));
	SEE(&c->sn, tdm_stream_release(c->x));
	TDM_END(t);
}

Test(dag, bad_arguments_are_refused, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	tdm_dag *d;
	int buf;
	void *dev;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, &dev), 0);
	cr_assert_eq(tdm_dag_create(NULL, &d), -EINVAL);
	cr_assert_eq(tdm_dag_create(e.gpu, NULL), -EINVAL);
	cr_assert_eq(tdm_dag_create(e.gpu, &d), 0);
	cr_assert_eq(tdm_dag_kernel(NULL, failing_callback, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_kernel(d, NULL, NULL, NULL, 0), -EINVAL);
	int self = 0, neg = -1;
	cr_assert_eq(tdm_dag_kernel(d, failing_callback, NULL, &self, 1), -EINVAL,
	             "a node cannot depend on itself (no cycle)");
	cr_assert_eq(tdm_dag_memset(d, dev, 0, 64, NULL, 0), 0);
	cr_assert_eq(tdm_dag_kernel(d, failing_callback, NULL, NULL, 2), -EINVAL, "deps NULL");
	cr_assert_eq(tdm_dag_kernel(d, failing_callback, NULL, &neg, 1), -EINVAL);
	int later = 1;
	cr_assert_eq(tdm_dag_kernel(d, failing_callback, NULL, &later, 1), -EINVAL,
	             "a later id (it would be a cycle)");
	cr_assert_eq(tdm_dag_copy(d, NULL, &buf, 4, TDM_COPY_H2D, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_copy(d, dev, NULL, 4, TDM_COPY_H2D, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_copy(d, dev, &buf, 4, (tdm_copy_kind)9, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_memset(d, NULL, 0, 4, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_memset(NULL, dev, 0, 4, NULL, 0), -EINVAL);
	/* The parameter changes: a node of that kind only. */
	cr_assert_eq(tdm_dag_set_kernel_arg(d, 0, NULL), -EINVAL, "node 0 is a memset");
	cr_assert_eq(tdm_dag_set_copy(d, 0, dev, &buf, 4), -EINVAL);
	cr_assert_eq(tdm_dag_set_memset(d, 1, dev, 0, 4), -EINVAL, "no node 1");
	cr_assert_eq(tdm_dag_set_memset(d, -1, dev, 0, 4), -EINVAL);
	cr_assert_eq(tdm_dag_set_memset(d, 0, NULL, 0, 4), -EINVAL);
	cr_assert_eq(tdm_dag_set_memset(NULL, 0, dev, 0, 4), -EINVAL);
	cr_assert_eq(tdm_dag_set_memset(d, 0, dev, 7, 64), 0);
	tdm_dag_stats st;
	cr_assert_eq(tdm_dag_stats_get(NULL, &st), -EINVAL);
	cr_assert_eq(tdm_dag_stats_get(d, NULL), -EINVAL);
	cr_assert_eq(tdm_dag_stats_get(d, &st), 0);
	cr_assert_eq(st.nodes, 1, "refused nodes were not added");
	/* Runs: a shared lease, NULLs, a capturing stream; not from a task. */
	struct bad_run c = {.gpu = e.gpu, .d = d};
	cr_assert_eq(run_one(&e, bad_run_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.shared, -EINVAL, "a shared lease would sweep other tasks' work in");
	cr_assert_eq(c.shared_result, -EINVAL);
	cr_assert_eq(c.null_dag, -EINVAL);
	cr_assert_eq(c.null_stream, -EINVAL);
	cr_assert_eq(c.capturing, -EBUSY);
	cr_assert_eq(c.capture_end, -ECANCELED, "the capture was abandoned");
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_dag_run(NULL, s, d), -EINVAL, "not from a task");
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_dag_stats_get(d, &st), 0);
	cr_assert_eq(st.runs, 0);
	cr_assert_eq(tdm_dag_destroy(NULL), -EINVAL);
	cr_assert_eq(tdm_dag_destroy(d), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	close_usable(&e);
}

/* ---- destroy ---- */

/* An empty DAG, and one never run: destroyed at once. An empty DAG's run is an await of s. */
static int empty_task(tdm_task *t, void *arg)
{
	struct err_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	TDM_AWAIT(t, c->rc = tdm_dag_run(t, c->s, c->d));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

Test(dag, destroy_with_nothing_in_flight, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct err_state c = {.gpu = e.gpu, .result = 1};
	cr_assert_eq(tdm_dag_create(e.gpu, &c.d), 0);
	cr_assert_eq(run_one(&e, empty_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, 0);
	cr_assert_eq(tdm_dag_destroy(c.d), 0);
	struct diamond m;
	diamond_open(&e, &m);
	diamond_close(&e, &m); /* never run */
	close_usable(&e);
}

/* Destroyed right after its run was enqueued, with a slow branch still to run: the work runs to
 * its end (the DAG's events and graph outlive it as long as it needs them), right. */
struct inflight {
	struct runner r;
	int destroyed;
};

static int destroy_after_run(tdm_task *t, tdm_stream *s, struct inflight *f)
{
	int rc = tdm_dag_run(t, s, f->r.d);
	f->destroyed = tdm_dag_destroy(f->r.d);
	return rc;
}

static int inflight_task(tdm_task *t, void *arg)
{
	struct inflight *f = arg;
	struct runner *r = &f->r;
	TDM_BEGIN(t);
	LEASE_OR_END(r, TDM_STREAM_EXCLUSIVE);
	for (r->i = 0; r->i < r->runs; r->i++) {
		r->before(r, r->i);
		if (r->i + 1 < r->runs) {
			TDM_AWAIT(t, r->rc[r->i] = tdm_dag_run(t, r->s, r->d));
		} else {
			TDM_AWAIT(t, r->rc[r->i] = destroy_after_run(t, r->s, f));
		}
		r->result[r->i] = tdm_task_result(t);
		r->bad[r->i] = r->check(r, r->i);
	}
	SEE(&r->sn, tdm_stream_release(r->s));
	TDM_END(t);
}

static void destroy_in_flight(int runs)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct diamond m;
	diamond_open(&e, &m);
	struct inflight f = {.destroyed = 1};
	diamond_runner(&f.r, &m, runs);
	f.r.gpu = e.gpu;
	cr_assert_eq(run_one(&e, inflight_task, &f), 0);
	ASSERT_SEEN(&f.r.sn);
	cr_assert_eq(f.destroyed, 0);
	for (int i = 0; i < runs; i++) {
		cr_assert_eq(f.r.result[i], 0, "run %d: %d", i, f.r.result[i]);
		cr_assert_eq(f.r.bad[i], 0, "run %d: %d values wrong", i, f.r.bad[i]);
	}
	m.d = NULL;
	cr_assert_eq(tdm_pinned_free(e.gpu, m.h_in), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, m.h_out), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.a), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.b), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.c), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, m.out), 0);
	close_usable(&e);
}

Test(dag, destroy_with_a_lowered_run_in_flight, .timeout = TDM_TEST_TIMEOUT(60))
{
	destroy_in_flight(1);
}

Test(dag, destroy_with_a_replay_in_flight, .timeout = TDM_TEST_TIMEOUT(60))
{
	destroy_in_flight(4);
}
