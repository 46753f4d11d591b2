// SPDX-License-Identifier: MIT
/*
 * Handles checked as CUDA checks its own (base/handle.h): a call with the handle of a destroyed
 * GPU layer, DAG, graph, device scheduler or event, a second destroy, a handle of another kind or
 * of another layer, and a value that is no handle at all, each gets its documented errno and
 * leaves the runtime usable, never reading freed memory (the asan build is where a read of freed
 * memory would show). A task that releases its last lease and leases again while tdm_gpu_destroy
 * runs gets -ESHUTDOWN, a thousand times in a row. On the simulator.
 */
#include "gpu_env.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tandem_dsched.h"
#include "tandem_graph.h"

TDM_TEST_SUITE(handles);

static void h_nothing(void *args, unsigned size)
{
	(void)args;
	(void)size;
}

TDM_DSCHED_HOST_TABLE(nothing_table, h_nothing);

static tdm_dsched *dsched_open(tdm_gpu *gpu)
{
	tdm_dsched_config cfg;
	tdm_dsched_config_init(&cfg);
	cfg.handlers = &nothing_table;
	cfg.warps = 1;
	tdm_dsched *ds = NULL;
	cr_assert_eq(tdm_dsched_create(gpu, 0, &cfg, &ds), 0);
	return ds;
}

/* A graph of one memset, captured on an exclusive lease of gpu's device 0. */
static tdm_graph *graph_open(tdm_gpu *gpu, void **dev)
{
	tdm_stream *s;
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_device_alloc(gpu, 0, 256, dev), 0);
	cr_assert_eq(tdm_stream_lease(gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_memset_async(s, *dev, 0, 256), 0);
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(tdm_stream_release(s), 0);
	return g;
}

/* Values that are no handle: NULL, an address of another type, a misaligned one, all ones, and
 * numbers that look like handles of no kind. */
static void *garbage(unsigned i)
{
	static int on_heap_like;
	switch (i) {
	case 0:
		return NULL;
	case 1:
		return &on_heap_like;
	case 2:
		return (char *)&on_heap_like + 1;
	case 3:
		return (void *)UINTPTR_MAX;
	case 4:
		return (void *)(uintptr_t)0x1234567;
	default:
		return (void *)(uintptr_t)0x00000001ffffff11ull; /* a layer's tag, index too far */
	}
}
#define NGARBAGE 6

/* ---- DAGs ---- */

struct dag_run_state {
	tdm_gpu *gpu;
	tdm_dag *d;
	tdm_stream *s;
	int rc, res;
};

static int dag_run_task(tdm_task *t, void *arg)
{
	struct dag_run_state *c = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, c->rc = tdm_dag_run(t, c->s, c->d));
	c->res = tdm_task_result(t);
	TDM_END(t);
}

static int node_memset(tdm_stream *s, void *arg)
{
	return tdm_memset_async(s, arg, 1, 64);
}

Test(handles, dag_destroy_twice_is_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_dag *d;
	cr_assert_eq(tdm_dag_create(e.gpu, &d), 0);
	cr_assert_eq(tdm_dag_destroy(d), 0);
	cr_assert_eq(tdm_dag_destroy(d), -EINVAL);
	/* The slot is reused by the next DAG: the stale handle still names none. */
	tdm_dag *d2;
	cr_assert_eq(tdm_dag_create(e.gpu, &d2), 0);
	cr_assert_eq(tdm_dag_destroy(d), -EINVAL);
	cr_assert_eq(tdm_dag_kernel(d, node_memset, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_destroy(d2), 0);
	close_usable(&e);
}

Test(handles, dag_calls_after_destroy_are_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *dev;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 64, &dev), 0);
	tdm_dag *d;
	cr_assert_eq(tdm_dag_create(e.gpu, &d), 0);
	cr_assert_eq(tdm_dag_kernel(d, node_memset, dev, NULL, 0), 0);
	cr_assert_eq(tdm_dag_destroy(d), 0);
	struct dag_run_state c = {.gpu = e.gpu, .d = d};
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &c.s), 0);
	cr_assert_eq(run_one(&e, dag_run_task, &c), 0);
	cr_assert_eq(c.rc, -EINVAL, "tdm_dag_run after destroy: %d", c.rc);
	cr_assert_eq(c.res, -EINVAL);
	tdm_dag_stats st;
	int z = 0;
	cr_assert_eq(tdm_dag_stats_get(d, &st), -EINVAL);
	cr_assert_eq(tdm_dag_kernel(d, node_memset, dev, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_copy(d, dev, &z, sizeof(z), TDM_COPY_H2D, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_memset(d, dev, 0, 4, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_dag_set_kernel_arg(d, 0, dev), -EINVAL);
	cr_assert_eq(tdm_dag_set_memset(d, 0, dev, 0, 4), -EINVAL);
	cr_assert_eq(tdm_dag_set_copy(d, 0, dev, &z, 4), -EINVAL);
	cr_assert_eq(tdm_stream_release(c.s), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	close_usable(&e);
}

/* A callback that calls its own DAG: the DAG is running, so -EBUSY. */
struct reenter {
	tdm_dag *d;
	int rc_kernel, rc_destroy;
};

static int node_reenter(tdm_stream *s, void *arg)
{
	struct reenter *r = arg;
	(void)s;
	r->rc_kernel = tdm_dag_kernel(r->d, node_memset, NULL, NULL, 0);
	r->rc_destroy = tdm_dag_destroy(r->d);
	return 0;
}

Test(handles, a_dag_held_by_a_run_refuses_its_callbacks_with_ebusy)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	struct reenter r = {0};
	cr_assert_eq(tdm_dag_create(e.gpu, &r.d), 0);
	cr_assert_eq(tdm_dag_kernel(r.d, node_reenter, &r, NULL, 0), 0);
	struct dag_run_state c = {.gpu = e.gpu, .d = r.d};
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &c.s), 0);
	cr_assert_eq(run_one(&e, dag_run_task, &c), 0);
	cr_assert_eq(c.res, 0, "the run: %d", c.res);
	cr_assert_eq(r.rc_kernel, -EBUSY);
	cr_assert_eq(r.rc_destroy, -EBUSY);
	tdm_dag_stats st;
	cr_assert_eq(tdm_dag_stats_get(r.d, &st), 0);
	cr_assert_eq(st.nodes, 1, "the callback added nothing");
	cr_assert_eq(tdm_stream_release(c.s), 0);
	cr_assert_eq(tdm_dag_destroy(r.d), 0);
	close_usable(&e);
}

Test(handles, dags_left_at_the_layers_destroy_are_destroyed_there)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_dag *d;
	cr_assert_eq(tdm_dag_create(e.gpu, &d), 0);
	cr_assert_eq(tdm_dag_memset(d, (void *)(uintptr_t)64, 0, 4, NULL, 0), 0);
	env_close(&e);
	cr_assert_eq(tdm_dag_destroy(d), -EINVAL);
	cr_assert_eq(tdm_dag_kernel(d, node_memset, NULL, NULL, 0), -EINVAL);
}

/* ---- device schedulers ---- */

Test(handles, dsched_destroy_twice_is_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_dsched *ds = dsched_open(e.gpu);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), 0);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_CANCEL, NULL), -EINVAL);
	close_usable(&e);
}

struct dsched_await_state {
	tdm_dsched *ds;
	uint64_t ticket;
	int rc, res;
};

static int dsched_await_task(tdm_task *t, void *arg)
{
	struct dsched_await_state *c = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, c->rc = tdm_await_dsched(t, c->ds, c->ticket));
	c->res = tdm_task_result(t);
	TDM_END(t);
}

Test(handles, dsched_calls_after_destroy_are_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_dsched *ds = dsched_open(e.gpu);
	uint64_t ticket = 0;
	cr_assert_eq(tdm_dsched_submit(ds, 0, NULL, 0, &ticket), 0);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), 0);
	cr_assert_eq(tdm_dsched_submit(ds, 0, NULL, 0, &ticket), -EINVAL);
	tdm_dsched_item it = {0, 0, NULL};
	cr_assert_eq(tdm_dsched_submit_batch(ds, &it, 1, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_query(ds, ticket), -EINVAL);
	tdm_dsched_stats st;
	cr_assert_eq(tdm_dsched_stats_get(ds, &st), -EINVAL);
	struct dsched_await_state c = {.ds = ds, .ticket = ticket};
	cr_assert_eq(run_one(&e, dsched_await_task, &c), 0);
	cr_assert_eq(c.rc, -EINVAL);
	cr_assert_eq(c.res, -EINVAL);
	/* A new scheduler may take the old one's slot: the stale handle names neither. */
	tdm_dsched *ds2 = dsched_open(e.gpu);
	cr_assert_eq(tdm_dsched_submit(ds, 0, NULL, 0, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_submit(ds2, 0, NULL, 0, NULL), 0);
	cr_assert_eq(tdm_dsched_destroy(ds2, TDM_DSCHED_DRAIN, NULL), 0);
	close_usable(&e);
}

/* Submits from another thread while the scheduler is destroyed: each one is taken (0) or
 * refused (-ESHUTDOWN while the destroy runs, -EINVAL once it is over), never a crash. */
struct submitter {
	tdm_dsched *ds;
	atomic_int started;
	int last;
	unsigned ok;
};

static void *submit_until_refused(void *arg)
{
	struct submitter *s = arg;
	int rc;
	while ((rc = tdm_dsched_submit(s->ds, 0, NULL, 0, NULL)) == 0 || rc == -EAGAIN) {
		s->ok += rc == 0;
		atomic_store(&s->started, 1);
	}
	s->last = rc;
	atomic_store(&s->started, 1);
	return NULL;
}

Test(handles, a_submit_racing_the_destroy_is_taken_or_refused)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	for (int round = 0; round < 20; round++) {
		struct submitter s = {.ds = dsched_open(e.gpu)};
		pthread_t th;
		cr_assert_eq(pthread_create(&th, NULL, submit_until_refused, &s), 0);
		while (!atomic_load(&s.started))
			sched_yield();
		tdm_dsched_stats st;
		cr_assert_eq(tdm_dsched_destroy(s.ds, TDM_DSCHED_CANCEL, &st), 0);
		cr_assert_eq(pthread_join(th, NULL), 0);
		cr_assert(s.last == -ESHUTDOWN || s.last == -EINVAL, "round %d: %d", round, s.last);
		cr_assert_eq(st.submitted, s.ok);
	}
	close_usable(&e);
}

/* ---- graphs ---- */

Test(handles, graph_destroy_after_the_layers_destroy_is_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *dev, *dev2;
	tdm_graph *g = graph_open(e.gpu, &dev);
	tdm_graph *g2 = graph_open(e.gpu, &dev2);
	cr_assert_eq(tdm_graph_destroy(g2), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev2), 0);
	env_close(&e); /* g is left: destroyed there */
	cr_assert_eq(tdm_graph_destroy(g), -EINVAL);
	cr_assert_eq(tdm_graph_destroy(g2), -EINVAL);
}

Test(handles, graph_destroy_twice_and_launch_after_destroy_are_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *dev;
	tdm_graph *g = graph_open(e.gpu, &dev);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_graph_destroy(g), -EINVAL);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_graph_launch(s, g), -EINVAL);
	/* A capture end into a destroyed graph: refused, nothing changes. */
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_memset_async(s, dev, 0, 8), 0);
	tdm_graph *stale = g;
	cr_assert_eq(tdm_graph_capture_end(s, &stale), -EINVAL);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	close_usable(&e);
}

/* ---- GPU layers and events ---- */

Test(handles, calls_on_a_destroyed_layer_say_eshutdown)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_gpu *gpu = e.gpu;
	tdm_event *ev;
	tdm_stream *old;
	cr_assert_eq(tdm_event_get(gpu, 0, &ev), 0);
	cr_assert_eq(tdm_stream_lease(gpu, 0, 0, &old), 0);
	cr_assert_eq(tdm_stream_release(old), 0);
	env_close(&e);
	/* A lease handle kept past its layer: released, and refused as such. */
	cr_assert_eq(tdm_stream_release(old), -EINVAL);
	cr_assert_eq(tdm_stream_device(old), -EINVAL);
	cr_assert_eq(tdm_memset_async(old, (void *)(uintptr_t)64, 0, 8), -EINVAL);
	cr_assert_eq(tdm_gpu_destroy(gpu), -EINVAL, "a second destroy");
	tdm_stream *s;
	void *p;
	tdm_dag *d;
	tdm_dsched *ds;
	tdm_gpu_stats st;
	tdm_dsched_config cfg;
	tdm_dsched_config_init(&cfg);
	cfg.handlers = &nothing_table;
	cr_assert_eq(tdm_stream_lease(gpu, 0, 0, &s), -ESHUTDOWN);
	cr_assert_eq(tdm_gpu_device_count(gpu), -ESHUTDOWN);
	cr_assert_eq(tdm_gpu_stats_get(gpu, &st), -ESHUTDOWN);
	cr_assert_eq(tdm_pinned_alloc(gpu, 64, &p), -ESHUTDOWN);
	cr_assert_eq(tdm_device_alloc(gpu, 0, 64, &p), -ESHUTDOWN);
	cr_assert_eq(tdm_event_get(gpu, 0, &ev), -ESHUTDOWN);
	cr_assert_eq(tdm_dag_create(gpu, &d), -ESHUTDOWN);
	cr_assert_eq(tdm_dsched_create(gpu, 0, &cfg, &ds), -ESHUTDOWN);
	cr_assert_eq(tdm_graph_forget(gpu, 1), -ESHUTDOWN);
	cr_assert_str_eq(tdm_gpu_backend_name(gpu), "none");
	/* The event the program never put back went with its layer. */
	cr_assert_eq(tdm_event_put(ev), -EINVAL);
}

Test(handles, a_stale_event_handle_is_refused_after_its_put)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_event *ev, *again;
	tdm_stream *s;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	cr_assert_eq(tdm_event_put(ev), 0);
	cr_assert_eq(tdm_event_put(ev), -EINVAL);
	/* Taken again from the pool, the event has a new handle: the old one stays refused. */
	cr_assert_eq(tdm_event_get(e.gpu, 0, &again), 0);
	cr_assert_neq(again, ev);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &s), 0);
	cr_assert_eq(tdm_event_record(ev, s), -EINVAL);
	cr_assert_eq(tdm_stream_wait_event(s, ev), -EINVAL);
	cr_assert_eq(tdm_event_put(ev), -EINVAL);
	cr_assert_eq(tdm_event_record(again, s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_event_put(again), 0);
	close_usable(&e);
}

/* ---- handles of another kind, another layer, and no handle at all ---- */

Test(handles, handles_of_another_kind_and_garbage_are_einval)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *dev;
	tdm_graph *g = graph_open(e.gpu, &dev);
	tdm_dag *d;
	cr_assert_eq(tdm_dag_create(e.gpu, &d), 0);
	tdm_dsched *ds = dsched_open(e.gpu);
	tdm_event *ev;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	void *others[] = {e.gpu, g, d, ds, ev};
	for (unsigned i = 0; i < 5 + NGARBAGE; i++) {
		void *x = i < 5 ? others[i] : garbage(i - 5);
		tdm_dag_stats dst;
		tdm_dsched_stats sst;
		void *p;
		if (x != (void *)e.gpu) {
			cr_assert_eq(tdm_stream_lease(x, 0, 0, &s), -EINVAL, "lease, value %u", i);
			cr_assert_eq(tdm_pinned_alloc(x, 64, &p), -EINVAL, "pinned, value %u", i);
			cr_assert_eq(tdm_gpu_destroy(x), -EINVAL, "gpu destroy, value %u", i);
		}
		if (x != (void *)g) {
			cr_assert_eq(tdm_graph_launch(s, x), -EINVAL, "graph launch, value %u", i);
			cr_assert_eq(tdm_graph_destroy(x), -EINVAL, "graph destroy, value %u", i);
		}
		if (x != (void *)d) {
			cr_assert_eq(tdm_dag_stats_get(x, &dst), -EINVAL, "dag stats, value %u", i);
			cr_assert_eq(tdm_dag_destroy(x), -EINVAL, "dag destroy, value %u", i);
		}
		if (x != (void *)ds) {
			cr_assert_eq(tdm_dsched_submit(x, 0, NULL, 0, NULL), -EINVAL, "submit %u",
			             i);
			cr_assert_eq(tdm_dsched_stats_get(x, &sst), -EINVAL, "ds stats %u", i);
			cr_assert_eq(tdm_dsched_destroy(x, TDM_DSCHED_DRAIN, NULL), -EINVAL,
			             "dsched destroy, value %u", i);
		}
		if (x != (void *)ev) {
			cr_assert_eq(tdm_event_record(x, s), -EINVAL, "record, value %u", i);
			cr_assert_eq(tdm_event_put(x), -EINVAL, "put, value %u", i);
		}
	}
	/* Each still works. */
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	cr_assert_eq(tdm_event_record(ev, s), 0);
	cr_assert_eq(tdm_dsched_submit(ds, 0, NULL, 0, NULL), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_event_put(ev), 0);
	cr_assert_eq(tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, NULL), 0);
	cr_assert_eq(tdm_dag_destroy(d), 0);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	close_usable(&e);
}

struct foreign_state {
	tdm_stream *s;
	tdm_dag *d;
	tdm_dsched *ds;
	tdm_event *ev;
	int rc[3];
};

static int foreign_task(tdm_task *t, void *arg)
{
	struct foreign_state *c = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, c->rc[0] = tdm_dag_run(t, c->s, c->d));
	TDM_AWAIT(t, c->rc[1] = tdm_await_dsched(t, c->ds, 1));
	TDM_AWAIT(t, c->rc[2] = tdm_await_event(t, c->ev));
	TDM_END(t);
}

Test(handles, handles_of_another_layer_are_einval)
{
	struct env e, other;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	cr_assert(env_open(&other, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	void *dev;
	tdm_graph *g = graph_open(other.gpu, &dev);
	struct foreign_state c = {0};
	cr_assert_eq(tdm_dag_create(other.gpu, &c.d), 0);
	cr_assert_eq(tdm_dag_memset(c.d, dev, 0, 8, NULL, 0), 0);
	c.ds = dsched_open(other.gpu);
	cr_assert_eq(tdm_dsched_submit(c.ds, 0, NULL, 0, NULL), 0);
	cr_assert_eq(tdm_event_get(other.gpu, 0, &c.ev), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &c.s), 0);
	cr_assert_eq(tdm_graph_launch(c.s, g), -EINVAL);
	cr_assert_eq(tdm_stream_wait_event(c.s, c.ev), -EINVAL);
	cr_assert_eq(tdm_event_record(c.ev, c.s), -EINVAL);
	cr_assert_eq(run_one(&e, foreign_task, &c), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(c.rc[i], -EINVAL, "await %d: %d", i, c.rc[i]);
	cr_assert_eq(tdm_stream_release(c.s), 0);
	cr_assert_eq(tdm_event_put(c.ev), 0);
	cr_assert_eq(tdm_dsched_destroy(c.ds, TDM_DSCHED_DRAIN, NULL), 0);
	cr_assert_eq(tdm_dag_destroy(c.d), 0);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_device_free(other.gpu, 0, dev), 0);
	close_usable(&other);
	close_usable(&e);
}

/* ---- repro: a lease racing tdm_gpu_destroy ---- */

struct releaser {
	tdm_gpu *gpu;
	atomic_int leasing;
	int rc, release_rc;
	unsigned leases;
};

/* Releases its last lease and leases again, until the layer's destroy refuses it. */
static int release_and_lease_task(tdm_task *t, void *arg)
{
	struct releaser *r = arg;
	(void)t;
	tdm_stream *s;
	int rc;
	while ((rc = tdm_stream_lease(r->gpu, 0, 0, &s)) == 0) {
		atomic_store(&r->leasing, 1);
		r->leases++;
		int rrc = tdm_stream_release(s);
		if (rrc != 0)
			r->release_rc = rrc;
	}
	r->rc = rc;
	atomic_store(&r->leasing, 1);
	return 0;
}

Test(handles, repro_release_and_lease_during_the_destroy_is_eshutdown,
     .timeout = TDM_TEST_TIMEOUT(300))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.backend = TDM_BACKEND_SIM;
	for (int i = 0; i < 1000; i++) {
		struct releaser r = {0};
		cr_assert_eq(tdm_gpu_create(&r.gpu, ex, &cfg), 0);
		tdm_group g;
		tdm_group_init(&g, ex);
		cr_assert_eq(tdm_spawn(ex, release_and_lease_task, &r, &g), 0);
		while (!atomic_load(&r.leasing))
			sched_yield();
		cr_assert_eq(tdm_gpu_destroy(r.gpu), 0);
		cr_assert_eq(tdm_group_wait(&g), 0);
		cr_assert_eq(r.rc, -ESHUTDOWN, "round %d: %d after %u leases", i, r.rc, r.leases);
		cr_assert_eq(r.release_rc, 0, "round %d", i);
	}
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}
