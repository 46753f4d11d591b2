// SPDX-License-Identifier: MIT
/*
 * GPU graphs through the public API (tandem_graph.h): a capture records work without running it,
 * a launch replays it (awaited from a task as any work), capture ends update a graph in place or
 * re-instantiate it behind the same handle, forks across leases join a capture through event
 * edges, calls a capture refuses abandon it, hostile arguments are refused, and tdm_graph_run's
 * cache (direct runs, capture, replays without the step, recapture, eviction, forget, errors).
 * Results come from scale kernels (y = a x) and copies into pinned memory, so that what a graph
 * ran, in which order and with which factor shows in the numbers. On sim (suite graph) and on
 * cuda where a device exists (graph_cuda). The backend's own graph tests are in
 * test_sim_backend.c. As everywhere, tasks record what they saw; the test thread asserts.
 */
#include "common.h"
#include "gpu_env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tandem_graph.h"

#define N 4096
#define BYTES (N * sizeof(float))
#define LONG_NS 200000000u /* a kernel long enough to be running when the test acts */

TDM_TEST_SUITE(graph);
#ifndef TANDEM_TEST_NO_CUDA
TDM_TEST_SUITE(graph_cuda);
#endif

/* ---- set-up ---------------------------------------------------------------------------------- */

/* Device buffers x, y, z on device 0; pinned in (1..N), out and out2 (-1 until written). */
struct bufs {
	tdm_gpu *gpu;
	float *x, *y, *z;
	float *in, *out, *out2, *zero;
};

static bool open_be(struct env *e, tdm_backend be, const tdm_gpu_config *base)
{
	tdm_gpu_config g;
	if (base != NULL)
		g = *base;
	else
		tdm_gpu_config_init(&g);
	g.backend = be;
	return env_open_cfg(e, 2, &g);
}

static tdm_stream *lease(struct env *e, int device, unsigned flags)
{
	tdm_stream *s = NULL;
	int rc = tdm_stream_lease(e->gpu, device, flags, &s);
	cr_assert_eq(rc, 0, "tdm_stream_lease: %s", tdm_strerror(rc));
	return s;
}

static void await_ok(struct env *e, tdm_stream *s)
{
	int rc = tdm_test_await_stream(e->ex, s);
	cr_assert_eq(rc, 0, "the await resumed with %d (%s)", rc, tdm_strerror(rc));
}

static void fill(float *p, float v)
{
	for (int i = 0; i < N; i++)
		p[i] = v;
}

static bool all_are(const float *p, float v)
{
	for (int i = 0; i < N; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* p[i] == f * (i + 1) for every i. */
static bool scaled(const float *p, float f)
{
	for (int i = 0; i < N; i++)
		if (p[i] != f * (float)(i + 1))
			return false;
	return true;
}

static void assert_scaled(const float *p, float f, const char *what)
{
	for (int i = 0; i < N; i++)
		cr_assert(p[i] == f * (float)(i + 1), "%s: [%d] is %g, expected %g", what, i,
		          (double)p[i], (double)(f * (float)(i + 1)));
}

static void bufs_open(struct env *e, struct bufs *b)
{
	*b = (struct bufs){.gpu = e->gpu};
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, BYTES, (void **)&b->x), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, BYTES, (void **)&b->y), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, BYTES, (void **)&b->z), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, BYTES, (void **)&b->in), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, BYTES, (void **)&b->out), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, BYTES, (void **)&b->out2), 0);
	cr_assert_eq(tdm_pinned_alloc(e->gpu, BYTES, (void **)&b->zero), 0);
	for (int i = 0; i < N; i++)
		b->in[i] = (float)(i + 1);
	fill(b->out, -1.0f);
	fill(b->out2, -1.0f);
	fill(b->zero, 0.0f);
	tdm_stream *s = lease(e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_memcpy_async(s, b->x, b->zero, BYTES, TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_memcpy_async(s, b->y, b->zero, BYTES, TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_memcpy_async(s, b->z, b->zero, BYTES, TDM_COPY_H2D), 0);
	await_ok(e, s);
	cr_assert_eq(tdm_stream_release(s), 0);
}

/* `strict`: the device is alive, every free must succeed (a dead one's may say -EIO). */
static void bufs_close(struct bufs *b, bool strict)
{
	float *dev[] = {b->x, b->y, b->z};
	for (int i = 0; i < 3; i++) {
		int rc = tdm_device_free(b->gpu, 0, dev[i]);
		cr_assert(rc == 0 || (!strict && rc == -EIO), "tdm_device_free: %d", rc);
	}
	float *pin[] = {b->in, b->out, b->out2, b->zero};
	for (int i = 0; i < 4; i++)
		cr_assert_eq(tdm_pinned_free(b->gpu, pin[i]), 0);
}

/*
 * A step: in -> x, y = a x, then `extra` times y = 3 y, then y -> out: out = a 3^extra (i + 1).
 * Counts its calls. `fail`: returns -EPROTO at once, after the first kernel, or after all of its
 * work. `refuse`: also copies from pageable memory (refused in a capture; ignored here, as a step
 * that does not look at every result would).
 */
enum { FAIL_NONE, FAIL_FIRST, FAIL_MIDWAY, FAIL_LAST };

struct job {
	struct bufs *b;
	float a;
	int extra;
	int calls;
	int fail;
	bool refuse;
	float *pageable;
};

static int job_step(tdm_stream *s, void *arg)
{
	struct job *j = arg;
	struct bufs *b = j->b;
	j->calls++;
	if (j->fail == FAIL_FIRST)
		return -EPROTO;
	int rc = tdm_memcpy_async(s, b->x, b->in, BYTES, TDM_COPY_H2D);
	if (rc == 0)
		rc = tdm_launch_scale(s, b->y, b->x, j->a, N);
	if (j->fail == FAIL_MIDWAY)
		return rc != 0 ? rc : -EPROTO;
	for (int k = 0; rc == 0 && k < j->extra; k++)
		rc = tdm_launch_scale(s, b->y, b->y, 3.0f, N);
	if (rc == 0 && j->refuse)
		(void)tdm_memcpy_async(s, b->z, j->pageable, BYTES, TDM_COPY_H2D);
	if (rc == 0)
		rc = tdm_memcpy_async(s, b->out, b->y, BYTES, TDM_COPY_D2H);
	if (rc == 0 && j->fail == FAIL_LAST)
		return -EPROTO;
	return rc;
}

/* What out holds after j: a 3^extra. */
static float job_factor(const struct job *j)
{
	float f = j->a;
	for (int k = 0; k < j->extra; k++)
		f *= 3.0f;
	return f;
}

/* Captures j on s into *g: what tdm_graph_capture_end said. */
static int capture_job(tdm_stream *s, struct job *j, tdm_graph **g)
{
	int rc = tdm_graph_capture_begin(s);
	cr_assert_eq(rc, 0, "tdm_graph_capture_begin: %s", tdm_strerror(rc));
	rc = job_step(s, j);
	cr_assert_eq(rc, 0, "the step in a capture: %s", tdm_strerror(rc));
	return tdm_graph_capture_end(s, g);
}

/* Launches g on s with out reset, awaits it from a task: out must be f (i + 1). */
static void replay_gives(struct env *e, struct bufs *b, tdm_stream *s, tdm_graph *g, float f)
{
	fill(b->out, -1.0f);
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	await_ok(e, s);
	assert_scaled(b->out, f, "a replay's result");
}

/* The job run directly on s (no capture): the stream works. */
static void direct_gives(struct env *e, struct bufs *b, tdm_stream *s, float a)
{
	struct job j = {.b = b, .a = a};
	fill(b->out, -1.0f);
	cr_assert_eq(job_step(s, &j), 0);
	await_ok(e, s);
	assert_scaled(b->out, a, "direct work's result");
}

static tdm_graph_stats stats(struct env *e)
{
	tdm_graph_stats st;
	cr_assert_eq(tdm_graph_stats_get(e->gpu, &st), 0);
	return st;
}

/*
 * Each test is a function of the backend: false when it has no device. GRAPH_TEST registers it in
 * suite graph on sim and, in a CUDA build, in graph_cuda on cuda (skipped without a device).
 */
#define SIM_TEST(name, secs)                                                                       \
	Test(graph, name, .timeout = TDM_TEST_TIMEOUT(secs))                                       \
	{                                                                                          \
		cr_assert(name(TDM_BACKEND_SIM), "the sim has a device");                          \
	}
#ifndef TANDEM_TEST_NO_CUDA
#define GRAPH_TEST(name, secs)                                                                     \
	SIM_TEST(name, secs)                                                                       \
	Test(graph_cuda, name, .timeout = TDM_TEST_TIMEOUT(secs))                                  \
	{                                                                                          \
		if (!name(TDM_BACKEND_CUDA))                                                       \
			cr_skip_test("no CUDA device");                                            \
	}
#else
#define GRAPH_TEST(name, secs) SIM_TEST(name, secs)
#endif

/* ---- capture, launch, replay ----------------------------------------------------------------- */

/* The usage of tandem_graph.h's head, in a task: x *= 2 and x -> out captured, then replayed
 * twice. */
struct first_state {
	tdm_gpu *gpu;
	struct bufs *b;
	tdm_stream *s;
	tdm_graph *g;
	int end_rc;
	bool out_untouched; /* after the capture: the graph's copy did not run */
	bool x_untouched;   /* ... nor its kernel (x copied out by ordinary work) */
	int r_plain, r1, r2;
	bool ok1, ok2;
	struct seen sn;
};

static int first_task(tdm_task *t, void *arg)
{
	struct first_state *c = arg;
	struct bufs *b = c->b;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	SEE(&c->sn, tdm_memcpy_async(c->s, b->x, b->in, BYTES, TDM_COPY_H2D));
	SEE(&c->sn, tdm_graph_capture_begin(c->s));
	SEE(&c->sn, tdm_launch_scale(c->s, b->x, b->x, 2.0f, N));
	SEE(&c->sn, tdm_memcpy_async(c->s, b->out, b->x, BYTES, TDM_COPY_D2H));
	c->end_rc = tdm_graph_capture_end(c->s, &c->g);
	/* Ordinary work after the capture: x as it is. */
	SEE(&c->sn, tdm_memcpy_async(c->s, b->out2, b->x, BYTES, TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->r_plain = tdm_task_result(t);
	c->out_untouched = all_are(b->out, -1.0f);
	c->x_untouched = scaled(b->out2, 1.0f);
	if (c->g == NULL)
		goto out;
	SEE(&c->sn, tdm_graph_launch(c->s, c->g));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->r1 = tdm_task_result(t);
	c->ok1 = scaled(b->out, 2.0f);
	fill(b->out, -1.0f);
	SEE(&c->sn, tdm_graph_launch(c->s, c->g));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->r2 = tdm_task_result(t);
	c->ok2 = scaled(b->out, 4.0f);
	SEE(&c->sn, tdm_graph_destroy(c->g));
out:
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

static bool a_capture_records_and_a_launch_replays_from_a_task(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	struct first_state c = {.gpu = e.gpu, .b = &b, .r_plain = 1, .r1 = 1, .r2 = 1};
	cr_assert_eq(run_one(&e, first_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.end_rc, TDM_GRAPH_INSTANTIATED, "capture end: %d", c.end_rc);
	cr_assert_not_null(c.g);
	cr_assert_eq(c.r_plain, 0);
	cr_assert(c.out_untouched, "the captured copy ran at capture");
	cr_assert(c.x_untouched, "the captured kernel ran at capture");
	cr_assert_eq(c.r1, 0, "the replay's await: %d", c.r1);
	cr_assert(c.ok1, "the first replay gave x = 2 (i + 1)");
	cr_assert_eq(c.r2, 0, "the second replay's await: %d", c.r2);
	cr_assert(c.ok2, "the second replay scaled x again (4 (i + 1))");
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.instantiated, 1);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_capture_records_and_a_launch_replays_from_a_task, 60)

/* in -> x, y = 2 x, x = 3 y, y = 5 x, y -> out: 30 (i + 1) only in capture order. Replayed
 * twice, and twice back to back with one await. */
static bool a_chain_of_kernels_replays_in_order(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_memcpy_async(s, b.x, b.in, BYTES, TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_launch_scale(s, b.y, b.x, 2.0f, N), 0);
	cr_assert_eq(tdm_launch_scale(s, b.x, b.y, 3.0f, N), 0);
	cr_assert_eq(tdm_launch_scale(s, b.y, b.x, 5.0f, N), 0);
	cr_assert_eq(tdm_memcpy_async(s, b.out, b.y, BYTES, TDM_COPY_D2H), 0);
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert(all_are(b.out, -1.0f), "nothing ran at capture");
	replay_gives(&e, &b, s, g, 30.0f);
	replay_gives(&e, &b, s, g, 30.0f);
	fill(b.out, -1.0f);
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	await_ok(&e, s);
	assert_scaled(b.out, 30.0f, "two replays back to back");
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_chain_of_kernels_replays_in_order, 60)

/* A capture ended into a graph: another factor updates it in place, more kernels re-instantiate
 * it, both behind the same handle; the next replay runs the new work. */
static bool a_capture_into_a_graph_updates_or_reinstantiates_it(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = NULL;
	struct job j = {.b = &b, .a = 2.0f};
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_INSTANTIATED);
	tdm_graph *first = g;
	replay_gives(&e, &b, s, g, 2.0f);

	j.a = 5.0f;
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_UPDATED, "same topology, another factor");
	cr_assert_eq(g, first, "updated behind the same handle");
	replay_gives(&e, &b, s, g, 5.0f);

	j.extra = 1; /* one more kernel: 15 */
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_INSTANTIATED, "another topology");
	cr_assert_eq(g, first, "re-instantiated behind the same handle");
	replay_gives(&e, &b, s, g, 15.0f);

	j.a = 7.0f; /* the new topology is the one updates compare with now: 21 */
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_UPDATED);
	cr_assert_eq(g, first);
	replay_gives(&e, &b, s, g, 21.0f);

	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.instantiated, 2);
	cr_assert_eq(st.updated, 2);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_capture_into_a_graph_updates_or_reinstantiates_it, 60)

/* ---- forks across leases --------------------------------------------------------------------- */

/* a: in -> x, record e1; b (forked by e1): y = 3 x, record e2; a: z = 2 x, waits e2 (joined
 * back), y -> out, z -> out2. */
static void capture_fork(struct bufs *bf, tdm_stream *a, tdm_stream *b, tdm_event *e1,
                         tdm_event *e2, bool join)
{
	cr_assert_eq(tdm_graph_capture_begin(a), 0);
	cr_assert_eq(tdm_memcpy_async(a, bf->x, bf->in, BYTES, TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_event_record(e1, a), 0);
	cr_assert_eq(tdm_stream_wait_event(b, e1), 0, "the fork");
	cr_assert_eq(tdm_launch_scale(b, bf->y, bf->x, 3.0f, N), 0);
	cr_assert_eq(tdm_launch_scale(a, bf->z, bf->x, 2.0f, N), 0);
	if (join) {
		cr_assert_eq(tdm_event_record(e2, b), 0);
		cr_assert_eq(tdm_stream_wait_event(a, e2), 0, "the join");
	}
	cr_assert_eq(tdm_memcpy_async(a, bf->out, bf->y, BYTES, TDM_COPY_D2H), 0);
	cr_assert_eq(tdm_memcpy_async(a, bf->out2, bf->z, BYTES, TDM_COPY_D2H), 0);
}

static bool a_fork_joined_back_is_captured_and_replayed(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs bf;
	bufs_open(&e, &bf);
	tdm_stream *a = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_stream *b = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_event *e1, *e2;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &e1), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &e2), 0);
	tdm_graph *g = NULL;
	capture_fork(&bf, a, b, e1, e2, true);
	cr_assert_eq(tdm_graph_capture_end(a, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert(all_are(bf.out, -1.0f) && all_are(bf.out2, -1.0f), "nothing ran at capture");
	for (int rep = 0; rep < 2; rep++) {
		fill(bf.out, -1.0f);
		fill(bf.out2, -1.0f);
		cr_assert_eq(tdm_graph_launch(a, g), 0);
		await_ok(&e, a);
		assert_scaled(bf.out, 3.0f, "the forked branch's result");
		assert_scaled(bf.out2, 2.0f, "the root's branch's result");
	}
	/* Both streams are out of the capture: b's own work runs, on b. */
	direct_gives(&e, &bf, b, 4.0f);
	cr_assert_eq(tdm_graph_capture_begin(b), 0, "b captures again on its own");
	cr_assert_eq(tdm_launch_spin(b, 0), 0);
	tdm_graph *gb = NULL;
	cr_assert_eq(tdm_graph_capture_end(b, &gb), TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(tdm_graph_destroy(gb), 0);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_event_put(e1), 0);
	cr_assert_eq(tdm_event_put(e2), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	cr_assert_eq(tdm_stream_release(b), 0);
	bufs_close(&bf, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_fork_joined_back_is_captured_and_replayed, 60)

static bool an_unjoined_fork_cancels_the_capture(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs bf;
	bufs_open(&e, &bf);
	tdm_stream *a = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_stream *b = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_event *e1, *e2;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &e1), 0);
	cr_assert_eq(tdm_event_get(e.gpu, 0, &e2), 0);
	tdm_graph *g = NULL;
	capture_fork(&bf, a, b, e1, e2, false);
	cr_assert_eq(tdm_graph_capture_end(a, &g), -ECANCELED);
	cr_assert_null(g, "no graph from a cancelled capture");
	cr_assert_eq(stats(&e).abandoned, 1);
	/* Both streams work again, and nothing of the capture ran. */
	cr_assert(all_are(bf.out, -1.0f) && all_are(bf.out2, -1.0f));
	direct_gives(&e, &bf, a, 2.0f);
	direct_gives(&e, &bf, b, 3.0f);
	cr_assert_eq(tdm_event_put(e1), 0);
	cr_assert_eq(tdm_event_put(e2), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	cr_assert_eq(tdm_stream_release(b), 0);
	bufs_close(&bf, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(an_unjoined_fork_cancels_the_capture, 60)

/* ---- what a capture refuses ------------------------------------------------------------------ */

/* In a task: begin, a kernel, an await (refused: -EBUSY), end (-ECANCELED); then the stream
 * carries ordinary work and its await again. */
struct await_in_capture {
	tdm_gpu *gpu;
	struct bufs *b;
	tdm_stream *s;
	tdm_graph *g;
	int await_rc, end_rc, after;
	bool ok;
	struct seen sn;
};

static int await_in_capture_task(tdm_task *t, void *arg)
{
	struct await_in_capture *c = arg;
	struct bufs *b = c->b;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	SEE(&c->sn, tdm_graph_capture_begin(c->s));
	SEE(&c->sn, tdm_memcpy_async(c->s, b->x, b->in, BYTES, TDM_COPY_H2D));
	TDM_AWAIT(t, c->await_rc = tdm_await_stream(t, c->s)); /* refused: no suspension */
	c->end_rc = tdm_graph_capture_end(c->s, &c->g);
	SEE(&c->sn, tdm_memcpy_async(c->s, b->x, b->in, BYTES, TDM_COPY_H2D));
	SEE(&c->sn, tdm_launch_scale(c->s, b->y, b->x, 6.0f, N));
	SEE(&c->sn, tdm_memcpy_async(c->s, b->out, b->y, BYTES, TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->after = tdm_task_result(t);
	c->ok = scaled(b->out, 6.0f);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

static bool an_await_in_a_capture_is_refused_and_abandons_it(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	struct await_in_capture c = {.gpu = e.gpu, .b = &b, .after = 1};
	cr_assert_eq(run_one(&e, await_in_capture_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.await_rc, -EBUSY, "the await in a capture: %d", c.await_rc);
	cr_assert_eq(c.end_rc, -ECANCELED, "the end of the abandoned capture: %d", c.end_rc);
	cr_assert_null(c.g);
	cr_assert_eq(c.after, 0, "the stream's next await: %d", c.after);
	cr_assert(c.ok, "the stream's next work ran");
	cr_assert_eq(stats(&e).abandoned, 1);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(an_await_in_a_capture_is_refused_and_abandons_it, 60)

/* A pageable copy, a stream-ordered allocation and a graph launch in a capture: each -EBUSY, the
 * end -ECANCELED with the graph it was ending into unchanged, and the stream usable. */
static bool calls_a_capture_refuses_abandon_it(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	float *pageable = malloc(BYTES);
	cr_assert_not_null(pageable);
	fill(pageable, 9.0f);
	tdm_graph *g = NULL;
	struct job j = {.b = &b, .a = 2.0f};
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_INSTANTIATED);
	tdm_graph *kept = g;

	for (int call = 0; call < 3; call++) {
		struct job other = {.b = &b, .a = 5.0f};
		cr_assert_eq(tdm_graph_capture_begin(s), 0);
		cr_assert_eq(job_step(s, &other), 0);
		void *mem = NULL;
		switch (call) {
		case 0:
			cr_assert_eq(tdm_memcpy_async(s, b.z, pageable, BYTES, TDM_COPY_H2D),
			             -EBUSY, "a pageable copy");
			break;
		case 1:
			cr_assert_eq(tdm_device_alloc_async(s, BYTES, &mem), -EBUSY,
			             "a stream-ordered allocation");
			cr_assert_null(mem);
			break;
		default:
			cr_assert_eq(tdm_graph_launch(s, g), -EBUSY, "a graph launch");
			break;
		}
		cr_assert_eq(tdm_graph_capture_end(s, &g), -ECANCELED, "call %d", call);
		cr_assert_eq(g, kept, "nothing changes in *g");
		cr_assert(all_are(b.out, -1.0f), "nothing of the capture ran");
		replay_gives(&e, &b, s, g, 2.0f); /* the graph still holds its own work */
		direct_gives(&e, &b, s, 3.0f);
		fill(b.out, -1.0f);
	}
	cr_assert_eq(stats(&e).abandoned, 3);
	cr_assert_eq(stats(&e).updated, 0);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	free(pageable);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(calls_a_capture_refuses_abandon_it, 60)

static bool a_capture_needs_an_exclusive_lease_and_is_one_at_a_time(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	tdm_stream *shared = lease(&e, 0, TDM_STREAM_SHARED);
	cr_assert_eq(tdm_graph_capture_begin(shared), -EINVAL, "a shared lease");
	cr_assert_eq(tdm_stream_release(shared), 0);
	cr_assert_eq(tdm_graph_capture_begin(shared), -EINVAL, "a released lease");

	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_end(s, &g), -EINVAL, "not capturing");
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	cr_assert_eq(tdm_graph_capture_begin(s), -EBUSY, "capturing already");
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED,
	             "a second begin did not abandon the first capture");
	cr_assert_eq(tdm_graph_capture_end(s, &g), -EINVAL, "ended already");
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	await_ok(&e, s);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_capture_needs_an_exclusive_lease_and_is_one_at_a_time, 60)

struct other_end {
	tdm_stream *s;
	tdm_graph *g;
	int rc;
};

static void *other_end_thread(void *arg)
{
	struct other_end *o = arg;
	o->rc = tdm_graph_capture_end(o->s, &o->g);
	return NULL;
}

/* The end from another thread is refused and the capture goes on: what the owner enqueues after
 * is in the graph too. */
static bool a_capture_ends_only_on_its_thread(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_memcpy_async(s, b.x, b.in, BYTES, TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_launch_scale(s, b.y, b.x, 2.0f, N), 0);
	struct other_end o = {.s = s, .rc = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, other_end_thread, &o), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(o.rc, -EINVAL, "the end on another thread: %d", o.rc);
	cr_assert_null(o.g);
	cr_assert_eq(tdm_memcpy_async(s, b.out, b.y, BYTES, TDM_COPY_D2H), 0);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert(all_are(b.out, -1.0f), "the capture went on: nothing ran");
	replay_gives(&e, &b, s, g, 2.0f);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_capture_ends_only_on_its_thread, 60)

/* ---- hostile arguments ----------------------------------------------------------------------- */

static tdm_graph *spin_graph(tdm_stream *s, uint32_t ns)
{
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, ns), 0);
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	return g;
}

static int noop_step(tdm_stream *s, void *arg)
{
	(void)arg;
	return tdm_launch_spin(s, 0);
}

static bool bad_arguments_are_refused(tdm_backend be)
{
	struct env e, other;
	if (!open_be(&e, be, NULL))
		return false;
	cr_assert(open_be(&other, be, NULL));
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_stream *os = lease(&other, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = spin_graph(s, 0);
	tdm_graph *foreign = spin_graph(os, 0);
	tdm_graph_stats st;

	cr_assert_eq(tdm_graph_capture_begin(NULL), -EINVAL);
	cr_assert_eq(tdm_graph_capture_end(NULL, &g), -EINVAL);
	cr_assert_eq(tdm_graph_launch(NULL, g), -EINVAL);
	cr_assert_eq(tdm_graph_launch(s, NULL), -EINVAL);
	cr_assert_eq(tdm_graph_destroy(NULL), -EINVAL);
	cr_assert_eq(tdm_graph_run(NULL, 1, noop_step, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_graph_run(s, 1, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_graph_forget(NULL, 1), -EINVAL);
	cr_assert_eq(tdm_graph_stats_get(NULL, &st), -EINVAL);
	cr_assert_eq(tdm_graph_stats_get(e.gpu, NULL), -EINVAL);

	/* Another layer's graph: not launched here, nor ended into. */
	cr_assert_eq(tdm_graph_launch(s, foreign), -EINVAL, "another layer's graph");
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	tdm_graph *into = foreign;
	cr_assert_eq(tdm_graph_capture_end(s, &into), -EINVAL, "ended into another layer's graph");
	cr_assert_eq(into, foreign);
	cr_assert_eq(tdm_graph_capture_begin(s), 0, "that end ended the capture all the same");
	cr_assert_eq(tdm_graph_capture_end(s, &into), -EINVAL);
	cr_assert_eq(tdm_graph_launch(os, foreign), 0, "the other layer's graph is unharmed");
	await_ok(&other, os);

	/* A destroyed graph: a second destroy, a launch, an end into it. */
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	await_ok(&e, s);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_graph_destroy(g), -EINVAL, "destroyed twice");
	cr_assert_eq(tdm_graph_launch(s, g), -EINVAL, "a destroyed graph's launch");
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	tdm_graph *dead = g;
	cr_assert_eq(tdm_graph_capture_end(s, &dead), -EINVAL, "ended into a destroyed graph");
	cr_assert_eq(tdm_graph_destroy(g), -EINVAL, "still destroyed");

	/* A released lease. */
	tdm_graph *g2 = spin_graph(s, 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_graph_launch(s, g2), -EINVAL, "a released lease");
	cr_assert_eq(tdm_graph_capture_begin(s), -EINVAL);
	cr_assert_eq(tdm_graph_capture_end(s, &g2), -EINVAL);
	cr_assert_eq(tdm_graph_run(s, 1, noop_step, NULL, 0), -EINVAL);
	cr_assert_eq(tdm_graph_destroy(g2), 0);

	cr_assert_eq(tdm_graph_destroy(foreign), 0);
	cr_assert_eq(tdm_stream_release(os), 0);
	close_usable(&e);
	close_usable(&other);
	return true;
}
GRAPH_TEST(bad_arguments_are_refused, 60)

/* An end with nowhere to put the graph is -EINVAL, and ends the capture all the same (the
 * header's "whatever it returns"): s begins again, and its work runs when not captured. */
static bool an_end_into_null_ends_the_capture(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	cr_assert_eq(tdm_graph_capture_end(s, NULL), -EINVAL);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_end(s, &g), -EINVAL, "not capturing any more");
	cr_assert_null(g);
	direct_gives(&e, &b, s, 3.0f);
	cr_assert_eq(tdm_graph_capture_begin(s), 0, "s captures again");
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(an_end_into_null_ends_the_capture, 60)

/* A graph of device 0 on a stream of device 1: -EINVAL (two simulated devices). */
static bool a_graph_of_another_device_is_refused(tdm_backend be)
{
	struct env e;
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.sim_devices = 2;
	if (!open_be(&e, be, &cfg))
		return false;
	if (tdm_gpu_device_count(e.gpu) < 2) {
		env_close(&e);
		return false;
	}
	tdm_stream *s0 = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_stream *s1 = lease(&e, 1, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = spin_graph(s0, 0);
	cr_assert_eq(tdm_graph_launch(s1, g), -EINVAL, "another device's stream");
	cr_assert_eq(tdm_graph_capture_begin(s1), 0);
	cr_assert_eq(tdm_launch_spin(s1, 0), 0);
	tdm_graph *into = g;
	cr_assert_eq(tdm_graph_capture_end(s1, &into), -EINVAL,
	             "ended into another device's graph");
	cr_assert_eq(tdm_graph_launch(s0, g), 0);
	await_ok(&e, s0);
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s0), 0);
	cr_assert_eq(tdm_stream_release(s1), 0);
	close_usable(&e);
	return true;
}
Test(graph, a_graph_of_another_device_is_refused, .timeout = TDM_TEST_TIMEOUT(60))
{
	cr_assert(a_graph_of_another_device_is_refused(TDM_BACKEND_SIM));
}
#ifndef TANDEM_TEST_NO_CUDA
Test(graph_cuda, a_graph_of_another_device_is_refused, .timeout = TDM_TEST_TIMEOUT(60))
{
	if (!a_graph_of_another_device_is_refused(TDM_BACKEND_CUDA))
		cr_skip_test("fewer than two CUDA devices");
}
#endif

/* Releasing the root of a capture ends it (discarded): the stream is free, not capturing. */
static bool releasing_a_capturing_root_ends_its_capture(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	struct job j = {.b = &b, .a = 2.0f};
	cr_assert_eq(job_step(s, &j), 0);
	cr_assert_eq(tdm_stream_release(s), 0, "the release of a capturing root");
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_end(s, &g), -EINVAL, "released");
	cr_assert_null(g);
	cr_assert_eq(stats(&e).abandoned, 1);
	cr_assert(all_are(b.out, -1.0f), "nothing of the capture ran");
	/* Every stream of the device can be leased exclusively and works (the one released
	 * among them), none of them capturing. */
	int nstreams = 0;
	tdm_stream *all[1024];
	while (nstreams < 1024 &&
	       tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &all[nstreams]) == 0)
		nstreams++;
	cr_assert_gt(nstreams, 0);
	for (int i = 0; i < nstreams; i++) {
		direct_gives(&e, &b, all[i], 2.0f);
		cr_assert_eq(tdm_graph_capture_begin(all[i]), 0);
		cr_assert_eq(tdm_launch_spin(all[i], 0), 0);
		cr_assert_eq(tdm_graph_capture_end(all[i], &g), TDM_GRAPH_INSTANTIATED);
		cr_assert_eq(tdm_graph_destroy(g), 0);
		g = NULL;
		cr_assert_eq(tdm_stream_release(all[i]), 0);
	}
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(releasing_a_capturing_root_ends_its_capture, 60)

/* Graphs never destroyed (captured, cached, one replaying still) go with the layer: nothing
 * leaks (ASan, valgrind), nothing hangs. */
static bool the_layer_frees_graphs_left_to_it(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = NULL;
	struct job j = {.b = &b, .a = 2.0f};
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_INSTANTIATED);
	j.a = 3.0f;
	cr_assert_eq(capture_job(s, &j, &g), TDM_GRAPH_UPDATED); /* an old source freed */
	tdm_graph *g2 = NULL;
	cr_assert_eq(capture_job(s, &j, &g2), TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(tdm_graph_destroy(g2), 0); /* a free handle too */
	for (int i = 0; i < 4; i++)
		cr_assert_gt(tdm_graph_run(s, 1, job_step, &j, 0), 0);
	cr_assert_gt(tdm_graph_run(s, 2, job_step, &j, 0), 0); /* counted, not captured */
	await_ok(&e, s);
	bufs_close(&b, true);
	tdm_graph *spin = spin_graph(s, LONG_NS);
	cr_assert_eq(tdm_graph_launch(s, spin), 0); /* never awaited */
	cr_assert_eq(tdm_stream_release(s), 0);
	env_close(&e);
	return true;
}
GRAPH_TEST(the_layer_frees_graphs_left_to_it, 60)

/* A thread holds a capture (with a stream forked into it and not joined back) while the layer's
 * destroy begins; the destroy waits for its leases, the thread's release ends the capture, and
 * the destroy completes. */
struct holder {
	tdm_gpu *gpu;
	atomic_int ready;
	int begin_rc, fork_rc, saw_shutdown, release_root, release_b;
};

static void *holder_thread(void *arg)
{
	struct holder *h = arg;
	tdm_stream *a = NULL, *b = NULL;
	tdm_event *ev = NULL;
	if (tdm_stream_lease(h->gpu, 0, TDM_STREAM_EXCLUSIVE, &a) != 0 ||
	    tdm_stream_lease(h->gpu, 0, TDM_STREAM_EXCLUSIVE, &b) != 0 ||
	    tdm_event_get(h->gpu, 0, &ev) != 0) {
		h->begin_rc = -EPROTO;
		atomic_store(&h->ready, 1);
		return NULL;
	}
	h->begin_rc = tdm_graph_capture_begin(a);
	int rc = tdm_launch_spin(a, 0);
	if (rc == 0)
		rc = tdm_event_record(ev, a);
	if (rc == 0)
		rc = tdm_stream_wait_event(b, ev);
	if (rc == 0)
		rc = tdm_launch_spin(b, 0);
	h->fork_rc = rc;
	atomic_store(&h->ready, 1);
	/* Until the destroy has begun: it refuses new leases then (ours keep it waiting). */
	for (;;) {
		tdm_stream *t;
		rc = tdm_stream_lease(h->gpu, 0, TDM_STREAM_SHARED, &t);
		if (rc == -ESHUTDOWN)
			break;
		if (rc == 0)
			tdm_stream_release(t);
		tdm_test_sleep_us(1000);
	}
	h->saw_shutdown = 1;
	h->release_root = tdm_stream_release(a);
	tdm_event_put(ev); /* while b is still held: the layer is not freed yet */
	h->release_b = tdm_stream_release(b);
	return NULL;
}

static bool a_capture_open_when_the_layer_goes(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct holder h = {
	    .gpu = e.gpu, .begin_rc = 1, .fork_rc = 1, .release_root = 1, .release_b = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, holder_thread, &h), 0);
	while (!atomic_load(&h.ready))
		tdm_test_sleep_us(200);
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(h.begin_rc, 0);
	cr_assert_eq(h.fork_rc, 0);
	cr_assert(h.saw_shutdown);
	cr_assert_eq(h.release_root, 0, "the release of the capturing root: %d", h.release_root);
	cr_assert_eq(h.release_b, 0, "the forked stream's release, after: %d", h.release_b);
	tdm_test_destroy(e.ex);
	return true;
}
GRAPH_TEST(a_capture_open_when_the_layer_goes, 60)

/* ---- tdm_graph_run --------------------------------------------------------------------------- */

/* One tdm_graph_run of j under key with out reset, awaited: it must say `want`, and out hold j's
 * result then. */
static void run_gives(struct env *e, tdm_stream *s, struct job *j, uint64_t key, unsigned flags,
                      int want, float f)
{
	fill(j->b->out, -1.0f);
	int rc = tdm_graph_run(s, key, job_step, j, flags);
	cr_assert_eq(rc, want, "tdm_graph_run(key %llu): %d, expected %d", (unsigned long long)key,
	             rc, want);
	await_ok(e, s);
	assert_scaled(j->b->out, f, "tdm_graph_run's result");
}

static bool graph_run_captures_the_third_run_and_replays_without_the_step(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct job j = {.b = &b, .a = 2.0f};
	run_gives(&e, s, &j, 42, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j, 42, 0, TDM_GRAPH_DIRECT, 2.0f);
	cr_assert_eq(j.calls, 2);
	run_gives(&e, s, &j, 42, 0, TDM_GRAPH_INSTANTIATED, 2.0f);
	cr_assert_eq(j.calls, 3, "the capture called the step");
	run_gives(&e, s, &j, 42, 0, TDM_GRAPH_REPLAYED, 2.0f);
	run_gives(&e, s, &j, 42, 0, TDM_GRAPH_REPLAYED, 2.0f);
	cr_assert_eq(j.calls, 3, "a replay called the step");
	/* What replays is the captured work: the step's parameters now are not looked at. */
	j.a = 7.0f;
	run_gives(&e, s, &j, 42, 0, TDM_GRAPH_REPLAYED, 2.0f);
	cr_assert_eq(j.calls, 3);
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.direct, 2);
	cr_assert_eq(st.instantiated, 1);
	cr_assert_eq(st.replayed, 3);
	cr_assert_eq(st.updated, 0);
	cr_assert_eq(st.cached, 1);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_captures_the_third_run_and_replays_without_the_step, 60)

static bool graph_run_recapture_updates_the_cached_graph(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct job j = {.b = &b, .a = 2.0f};
	for (int i = 0; i < 3; i++)
		cr_assert_gt(tdm_graph_run(s, 5, job_step, &j, 0), 0);
	await_ok(&e, s);
	j.a = 7.0f;
	run_gives(&e, s, &j, 5, TDM_GRAPH_RECAPTURE, TDM_GRAPH_UPDATED, 7.0f);
	cr_assert_eq(j.calls, 4);
	run_gives(&e, s, &j, 5, 0, TDM_GRAPH_REPLAYED, 7.0f);
	j.extra = 1;
	run_gives(&e, s, &j, 5, TDM_GRAPH_RECAPTURE, TDM_GRAPH_INSTANTIATED, 21.0f);
	run_gives(&e, s, &j, 5, 0, TDM_GRAPH_REPLAYED, 21.0f);
	cr_assert_eq(j.calls, 5);
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.updated, 1);
	cr_assert_eq(st.instantiated, 2);
	cr_assert_eq(st.cached, 1);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_recapture_updates_the_cached_graph, 60)

/* TDM_GRAPH_CAPTURE_FIRST; and a cache of two graphs with three keys. */
static bool graph_run_capture_first_and_a_full_cache(tdm_backend be)
{
	struct env e;
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.graph_capture_after = TDM_GRAPH_CAPTURE_FIRST;
	cfg.graph_cache = 2;
	if (!open_be(&e, be, &cfg))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct job j1 = {.b = &b, .a = 2.0f}, j2 = {.b = &b, .a = 3.0f}, j3 = {.b = &b, .a = 5.0f};
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_INSTANTIATED, 2.0f);
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_REPLAYED, 2.0f);
	run_gives(&e, s, &j2, 2, 0, TDM_GRAPH_INSTANTIATED, 3.0f);
	cr_assert_eq(stats(&e).evicted, 0);
	cr_assert_eq(stats(&e).cached, 2);
	run_gives(&e, s, &j3, 3, 0, TDM_GRAPH_INSTANTIATED, 5.0f); /* key 1 goes */
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.evicted, 1);
	cr_assert_eq(st.cached, 2);
	run_gives(&e, s, &j3, 3, 0, TDM_GRAPH_REPLAYED, 5.0f);
	run_gives(&e, s, &j2, 2, 0, TDM_GRAPH_REPLAYED, 3.0f);
	cr_assert_eq(j1.calls, 1);
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_INSTANTIATED, 2.0f); /* evicted: captured anew */
	cr_assert_eq(j1.calls, 2);
	run_gives(&e, s, &j2, 2, 0, TDM_GRAPH_REPLAYED, 3.0f); /* key 3 went, the least recent */
	run_gives(&e, s, &j3, 3, 0, TDM_GRAPH_INSTANTIATED, 5.0f);
	cr_assert_eq(stats(&e).evicted, 3);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_capture_first_and_a_full_cache, 60)

/* graph_cache = 2, the default two direct runs: an evicted key runs directly again. */
static bool graph_run_evicted_key_runs_directly_again(tdm_backend be)
{
	struct env e;
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.graph_cache = 2;
	if (!open_be(&e, be, &cfg))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct job j1 = {.b = &b, .a = 2.0f}, j2 = {.b = &b, .a = 3.0f}, j3 = {.b = &b, .a = 5.0f};
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_INSTANTIATED, 2.0f);
	run_gives(&e, s, &j2, 2, 0, TDM_GRAPH_DIRECT, 3.0f);
	cr_assert_eq(stats(&e).evicted, 0);
	run_gives(&e, s, &j3, 3, 0, TDM_GRAPH_DIRECT, 5.0f); /* key 1, the least recent, goes */
	cr_assert_eq(stats(&e).evicted, 1);
	run_gives(&e, s, &j1, 1, 0, TDM_GRAPH_DIRECT, 2.0f);
	cr_assert_eq(j1.calls, 4, "the evicted key's step ran again");
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_evicted_key_runs_directly_again, 60)

static bool graph_forget_drops_a_key(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_graph_forget(e.gpu, 99), -ENOENT, "an unknown key");
	struct job j = {.b = &b, .a = 2.0f};
	for (int i = 0; i < 3; i++)
		cr_assert_gt(tdm_graph_run(s, 7, job_step, &j, 0), 0);
	await_ok(&e, s);
	run_gives(&e, s, &j, 7, 0, TDM_GRAPH_REPLAYED, 2.0f);
	cr_assert_eq(tdm_graph_forget(e.gpu, 7), 0);
	cr_assert_eq(tdm_graph_forget(e.gpu, 7), -ENOENT, "forgotten already");
	run_gives(&e, s, &j, 7, 0, TDM_GRAPH_DIRECT, 2.0f);
	/* A key only counted is forgotten too: its count starts over. */
	cr_assert_eq(tdm_graph_forget(e.gpu, 7), 0);
	run_gives(&e, s, &j, 7, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j, 7, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j, 7, 0, TDM_GRAPH_INSTANTIATED, 2.0f);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_forget_drops_a_key, 60)

/* A step's error is tdm_graph_run's, whether it ran directly or in the capture; nothing is
 * cached: the key starts over. */
static bool graph_run_step_error_caches_nothing(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct job j = {.b = &b, .a = 2.0f, .fail = FAIL_FIRST};
	cr_assert_eq(tdm_graph_run(s, 3, job_step, &j, 0), -EPROTO, "a direct run's error");
	j.fail = FAIL_NONE;
	run_gives(&e, s, &j, 3, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j, 3, 0, TDM_GRAPH_DIRECT, 2.0f);
	for (int fail = FAIL_FIRST; fail <= FAIL_LAST; fail++) {
		j.fail = fail;
		cr_assert_eq(tdm_graph_run(s, 3, job_step, &j, 0), -EPROTO,
		             "the step failed in the capture (%d)", fail);
		await_ok(&e, s);
		j.fail = FAIL_NONE;
		/* Nothing cached: the key counts its direct runs again. */
		run_gives(&e, s, &j, 3, 0, TDM_GRAPH_DIRECT, 2.0f);
		run_gives(&e, s, &j, 3, 0, TDM_GRAPH_DIRECT, 2.0f);
	}
	run_gives(&e, s, &j, 3, 0, TDM_GRAPH_INSTANTIATED, 2.0f);
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.instantiated, 1, "a failed step's capture was instantiated");
	cr_assert_eq(st.replayed, 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_step_error_caches_nothing, 60)

/* A step that fails in a recapture leaves the cached graph as it was: its partial work (another
 * topology) or its finished work (the same topology, another factor) is not kept. */
static bool graph_run_failed_recapture_keeps_the_cached_graph(tdm_backend be)
{
	struct env e;
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.graph_capture_after = TDM_GRAPH_CAPTURE_FIRST;
	if (!open_be(&e, be, &cfg))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct job j = {.b = &b, .a = 2.0f};
	run_gives(&e, s, &j, 4, 0, TDM_GRAPH_INSTANTIATED, 2.0f);
	for (int fail = FAIL_FIRST; fail <= FAIL_LAST; fail++) {
		struct job bad = {.b = &b, .a = 9.0f, .fail = fail};
		cr_assert_eq(tdm_graph_run(s, 4, job_step, &bad, TDM_GRAPH_RECAPTURE), -EPROTO);
		await_ok(&e, s);
		run_gives(&e, s, &j, 4, 0, TDM_GRAPH_REPLAYED, 2.0f);
	}
	cr_assert_eq(j.calls, 1);
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.updated, 0, "a failed step's capture updated the graph");
	cr_assert_eq(st.instantiated, 1, "a failed step's capture was instantiated");
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_failed_recapture_keeps_the_cached_graph, 60)

/* A step that makes a call a capture refuses (and does not look at its result): -ECANCELED,
 * nothing cached; its direct runs work (the pageable copy is staged there). */
static bool graph_run_refused_call_in_the_step_is_ecanceled(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	float *pageable = malloc(BYTES);
	cr_assert_not_null(pageable);
	fill(pageable, 1.0f);
	struct job j = {.b = &b, .a = 2.0f, .refuse = true, .pageable = pageable};
	run_gives(&e, s, &j, 8, 0, TDM_GRAPH_DIRECT, 2.0f);
	run_gives(&e, s, &j, 8, 0, TDM_GRAPH_DIRECT, 2.0f);
	fill(b.out, -1.0f);
	cr_assert_eq(tdm_graph_run(s, 8, job_step, &j, 0), -ECANCELED);
	await_ok(&e, s);
	cr_assert(all_are(b.out, -1.0f), "nothing of the abandoned capture ran");
	run_gives(&e, s, &j, 8, 0, TDM_GRAPH_DIRECT, 2.0f); /* the key starts over */
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.instantiated, 0);
	cr_assert_eq(st.abandoned, 1);
	cr_assert_eq(tdm_stream_release(s), 0);
	free(pageable);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_refused_call_in_the_step_is_ecanceled, 60)

static bool graph_run_bad_arguments(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	int calls = 0;
	tdm_stream *shared = lease(&e, 0, TDM_STREAM_SHARED);
	cr_assert_eq(tdm_graph_run(shared, 1, noop_step, &calls, 0), -EINVAL, "a shared lease");
	cr_assert_eq(tdm_stream_release(shared), 0);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_graph_run(s, 1, noop_step, &calls, 1u << 7), -EINVAL, "an unknown flag");
	cr_assert_eq(tdm_graph_run(s, 1, noop_step, &calls, TDM_GRAPH_RECAPTURE | (1u << 1)),
	             -EINVAL);
	/* On a capturing stream: -EBUSY, and the capture is abandoned. */
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_graph_run(s, 1, noop_step, &calls, 0), -EBUSY);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_end(s, &g), -ECANCELED);
	tdm_graph_stats st = stats(&e);
	cr_assert_eq(st.direct + st.instantiated + st.replayed, 0, "a refused run counted");
	cr_assert_eq(tdm_graph_run(s, 1, noop_step, &calls, 0), TDM_GRAPH_DIRECT);
	await_ok(&e, s);
	cr_assert_eq(tdm_stream_release(s), 0);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_bad_arguments, 60)

/* Tasks on four streams run two keys each through a cache of four graphs, while the test's
 * thread forgets the keys over and over: each run gives its own key's result (the graph of its
 * key and stream), whether it ran directly, captured or replayed. For the sanitizers. */
#define CRUN_TASKS 4

struct crun {
	tdm_gpu *gpu;
	tdm_stream *s;
	struct bufs b;
	struct job j[2];
	int i, iters, rc;
	atomic_int *done;
	struct seen sn;
};

static int crun_task(tdm_task *t, void *arg)
{
	struct crun *c = arg;
	TDM_BEGIN(t);
	SEE(&c->sn, tdm_stream_lease(c->gpu, 0, TDM_STREAM_EXCLUSIVE, &c->s));
	if (c->sn.rc != 0) {
		atomic_fetch_add(c->done, 1);
		return 0;
	}
	for (c->i = 0; c->i < c->iters; c->i++) {
		fill(c->b.out, -1.0f);
		c->rc = tdm_graph_run(c->s, 1 + (uint64_t)(c->i % 2), job_step, &c->j[c->i % 2], 0);
		if (c->rc <= 0) {
			SEE(&c->sn, c->rc != 0 ? c->rc : -EPROTO);
			break;
		}
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		SEE(&c->sn, tdm_task_result(t));
		SEE_TRUE(&c->sn, scaled(c->b.out, job_factor(&c->j[c->i % 2])));
	}
	SEE(&c->sn, tdm_stream_release(c->s));
	atomic_fetch_add(c->done, 1);
	TDM_END(t);
}

static bool graph_run_from_tasks_while_keys_are_forgotten(tdm_backend be)
{
	struct env e;
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.graph_cache = CRUN_TASKS;
	if (!open_be(&e, be, &cfg))
		return false;
	static struct crun c[CRUN_TASKS];
	atomic_int done = 0;
	for (int k = 0; k < CRUN_TASKS; k++) {
		c[k] = (struct crun){
		    .gpu = e.gpu, .iters = (int)tdm_test_size(200, 40), .done = &done};
		bufs_open(&e, &c[k].b);
		c[k].j[0] = (struct job){.b = &c[k].b, .a = 2.0f};
		c[k].j[1] = (struct job){.b = &c[k].b, .a = 3.0f, .extra = 1}; /* 9 (i + 1) */
	}
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	for (int k = 0; k < CRUN_TASKS; k++)
		cr_assert_eq(tdm_spawn(e.ex, crun_task, &c[k], &g), 0);
	unsigned forgets = 0;
	while (atomic_load(&done) < CRUN_TASKS) {
		int rc = tdm_graph_forget(e.gpu, 1 + forgets % 2);
		cr_assert(rc == 0 || rc == -ENOENT, "tdm_graph_forget: %d", rc);
		forgets++;
		tdm_test_sleep_us(50);
	}
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_graph_stats st = stats(&e);
	for (int k = 0; k < CRUN_TASKS; k++) {
		ASSERT_SEEN(&c[k].sn);
		cr_assert_eq(c[k].i, c[k].iters, "task %d ran %d of its runs", k, c[k].i);
		bufs_close(&c[k].b, true);
	}
	cr_assert_leq(st.cached, CRUN_TASKS);
	cr_assert_gt(st.direct, 0);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_from_tasks_while_keys_are_forgotten, 120)

/* ---- failures -------------------------------------------------------------------------------- */

static bool a_failed_device_refuses_graphs(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = spin_graph(s, 0);
	cr_assert_eq(tdm_launch_fault(s), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), -EIO, "the trap failed the device");
	cr_assert_eq(tdm_graph_launch(s, g), -EIO, "a graph launch on a failed device");
	cr_assert_eq(tdm_graph_capture_begin(s), -EIO, "a capture on a failed device");
	int calls = 0;
	cr_assert_eq(tdm_graph_run(s, 1, noop_step, &calls, 0), -EIO);
	cr_assert_eq(tdm_graph_destroy(g), 0, "a dead device's graph is destroyed all the same");
	cr_assert_eq(tdm_stream_release(s), 0);
	env_close(&e);
	return true;
}
GRAPH_TEST(a_failed_device_refuses_graphs, 60)

/* A trap captured runs only in a replay: the device works until then, the replay's await
 * resumes with -EIO. */
static bool a_trap_in_a_graph_fails_its_replay(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	cr_assert_eq(tdm_launch_fault(s), 0);
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(tdm_launch_spin(s, 1000), 0);
	await_ok(&e, s); /* the capture did not run the trap */
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), -EIO, "the replay's await");
	cr_assert_eq(tdm_graph_launch(s, g), -EIO, "the device failed");
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	tdm_stream *t;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &t), -ENODEV);
	env_close(&e);
	return true;
}
GRAPH_TEST(a_trap_in_a_graph_fails_its_replay, 60)

/* Destroy during a replay: 0 at once, the replay runs to its end, its await says 0. */
static bool a_graph_destroyed_during_its_replay_finishes_it(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	struct bufs b;
	bufs_open(&e, &b);
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, LONG_NS), 0);
	struct job j = {.b = &b, .a = 4.0f};
	cr_assert_eq(job_step(s, &j), 0);
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED);
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	cr_assert_eq(tdm_graph_launch(s, g), 0);
	cr_assert_eq(tdm_graph_destroy(g), 0, "destroyed with replays in flight");
	cr_assert_eq(tdm_graph_launch(s, g), -EINVAL);
	await_ok(&e, s);
	assert_scaled(b.out, 4.0f, "the replays ran to their end");
	cr_assert_eq(tdm_stream_release(s), 0);
	bufs_close(&b, true);
	close_usable(&e);
	return true;
}
GRAPH_TEST(a_graph_destroyed_during_its_replay_finishes_it, 60)

/* ---- found in review ------------------------------------------------------------------------- */

/* A step that runs its own key again on its stream (directly, while the outer run holds the
 * key's entry): the inner run must not take the entry the outer one uses, so it runs as it is and
 * counts nothing; the key is captured on the third outer run, not earlier. */
struct nested {
	int inner_rc;
	int calls;
};

static int nested_inner(tdm_stream *s, void *arg)
{
	(void)s;
	((struct nested *)arg)->calls++;
	return 0;
}

static int nested_step(tdm_stream *s, void *arg)
{
	struct nested *n = arg;
	n->inner_rc = tdm_graph_run(s, 11, nested_inner, n, 0);
	return tdm_launch_spin(s, 0);
}

static bool graph_run_of_its_own_key_from_its_step_runs_directly(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct nested n = {0};
	cr_assert_eq(tdm_graph_run(s, 11, nested_step, &n, 0), TDM_GRAPH_DIRECT);
	cr_assert_eq(n.inner_rc, TDM_GRAPH_DIRECT, "the inner run: %d", n.inner_rc);
	cr_assert_eq(tdm_graph_run(s, 11, nested_step, &n, 0), TDM_GRAPH_DIRECT,
	             "the inner runs counted toward the key's capture");
	await_ok(&e, s);
	cr_assert_eq(tdm_stream_release(s), 0);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_run_of_its_own_key_from_its_step_runs_directly, 60)

/* tdm_graph_forget of the key being run (from its step) drops it: 0, and the key starts over. */
struct forgetting {
	tdm_gpu *gpu;
	int rc;
};

static int forgetting_step(tdm_stream *s, void *arg)
{
	struct forgetting *f = arg;
	f->rc = tdm_graph_forget(f->gpu, 12);
	return tdm_launch_spin(s, 0);
}

static bool graph_forget_of_a_key_in_use_drops_it(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	struct forgetting f = {.gpu = e.gpu, .rc = 1};
	cr_assert_eq(tdm_graph_run(s, 12, forgetting_step, &f, 0), TDM_GRAPH_DIRECT);
	cr_assert_eq(f.rc, 0, "forget of the key in use: %d", f.rc);
	cr_assert_eq(stats(&e).cached, 0);
	cr_assert_eq(tdm_graph_forget(e.gpu, 12), -ENOENT);
	await_ok(&e, s);
	cr_assert_eq(tdm_stream_release(s), 0);
	close_usable(&e);
	return true;
}
GRAPH_TEST(graph_forget_of_a_key_in_use_drops_it, 60)

/* Only the capturing thread forks streams into its capture: an edge from another thread, from
 * an event recorded in the capture, is -EINVAL and its stream stays out of the capture. */
struct fork_from {
	tdm_stream *s;
	tdm_event *ev;
	int rc;
};

static void *fork_from_thread(void *arg)
{
	struct fork_from *f = arg;
	f->rc = tdm_stream_wait_event(f->s, f->ev);
	return NULL;
}

static bool only_the_capturing_thread_forks_into_its_capture(tdm_backend be)
{
	struct env e;
	if (!open_be(&e, be, NULL))
		return false;
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_stream *b = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	tdm_event *ev;
	cr_assert_eq(tdm_event_get(e.gpu, 0, &ev), 0);
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0);
	cr_assert_eq(tdm_event_record(ev, s), 0);
	struct fork_from f = {.s = b, .ev = ev, .rc = 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, fork_from_thread, &f), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(f.rc, -EINVAL, "a fork from another thread: %d", f.rc);
	tdm_graph *g = NULL;
	cr_assert_eq(tdm_graph_capture_end(s, &g), TDM_GRAPH_INSTANTIATED,
	             "the refused fork left the capture unjoined");
	cr_assert_eq(tdm_launch_spin(b, 0), 0);
	await_ok(&e, b);
	cr_assert_eq(tdm_stream_release(b), 0, "the refused stream joined nothing");
	cr_assert_eq(tdm_graph_destroy(g), 0);
	cr_assert_eq(tdm_event_put(ev), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	close_usable(&e);
	return true;
}
GRAPH_TEST(only_the_capturing_thread_forks_into_its_capture, 60)

#ifndef TANDEM_TEST_NO_CUDA
/* On CUDA, a call the driver refuses in a capture (here cudaMalloc, through tdm_device_alloc)
 * invalidates it, and the enqueues after fail: the capture is abandoned, and the device must not
 * be taken for dead (its query of the capturing stream reads as an error). */
Test(graph_cuda, an_invalidated_capture_leaves_the_device_alive, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	if (!open_be(&e, TDM_BACKEND_CUDA, NULL))
		cr_skip_test("no CUDA device");
	tdm_stream *s = lease(&e, 0, TDM_STREAM_EXCLUSIVE);
	cr_assert_eq(tdm_graph_capture_begin(s), 0);
	void *p = NULL;
	(void)tdm_device_alloc(e.gpu, 0, 4096, &p); /* refused by the driver in a capture */
	for (int i = 0; i < 3; i++)
		(void)tdm_launch_spin(s, 0);
	tdm_graph *g = NULL;
	int rc = tdm_graph_capture_end(s, &g);
	cr_assert_eq(rc, -ECANCELED, "the end of an invalidated capture: %d", rc);
	cr_assert_null(g);
	cr_assert_eq(tdm_launch_spin(s, 0), 0, "the device was taken for dead");
	await_ok(&e, s);
	if (p != NULL)
		cr_assert_eq(tdm_device_free(e.gpu, 0, p), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	close_usable(&e);
}
#endif
