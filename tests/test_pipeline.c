// SPDX-License-Identifier: MIT
/*
 * tdm_pipeline_run, specified: order of consume, every batch once, back-pressure, buffer reuse,
 * failures of each stage, shutdown with batches in flight, and bad configs. The behaviours run on
 * the simulator everywhere and on CUDA where a device exists (skipped elsewhere, left out of
 * builds without CUDA); injected faults
 * are sim only. The callbacks run on workers: they record what they see in atomics and arrays,
 * and the test thread asserts afterwards.
 */
#include "common.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "tandem_gpu.h"

#define MAXB 256         /* batches a test records */
#define WORDS 512        /* uint64_t per buffer: 4 KiB */
#define NONE UINT64_MAX  /* no batch */
#define NEVER UINT64_MAX /* prepare never ends */

struct env {
	tdm_executor *ex;
	tdm_gpu *gpu;
};

/* An executor and a GPU layer on the backend; false when that backend has no device. */
static bool env_open_cfg(struct env *e, tdm_backend backend, unsigned workers,
                         tdm_shutdown_mode mode, unsigned streams)
{
	tdm_config c;
	tdm_config_init(&c);
	c.workers = workers;
	c.shutdown = mode;
	e->ex = tdm_test_create_cfg(&c);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = backend;
	g.streams_per_device = streams;
	int rc = tdm_gpu_create(&e->gpu, e->ex, &g);
	if (rc == -ENODEV) {
		tdm_test_destroy(e->ex);
		return false;
	}
	cr_assert_eq(rc, 0, "tdm_gpu_create: %s", tdm_strerror(rc));
	return true;
}

static bool env_open(struct env *e, tdm_backend backend)
{
	return env_open_cfg(e, backend, 4, TDM_SHUTDOWN_DRAIN, 0);
}

static void env_close(struct env *e)
{
	tdm_test_destroy(e->ex);
	cr_assert_eq(tdm_gpu_destroy(e->gpu), 0);
}

/* ---- the callbacks, and what they record ---- */

struct rec {
	/* What the callbacks do. */
	uint64_t total;   /* prepare ends after this many batches (NEVER: it does not) */
	uint32_t spin_ns; /* compute: a kernel this long first ... */
	bool vary;        /* ... plus more for the earlier batches of each 4: they end late */
	uint64_t fail_prepare, fail_compute, fail_consume; /* that batch's stage fails (NONE) */
	int fail_rc, consume_rc;                           /* with these */
	uint64_t inject_at; /* sim: prepare arms this fault on the batch's stream (NONE) */
	tdm_sim_fault inject;
	unsigned consume_sleep_us; /* a slow consumer */
	uint64_t slow_at;          /* this batch's consume takes 200 ms (NONE) */
	/* What they saw. */
	atomic_size_t prepared, consumed;
	atomic_long outstanding, max_outstanding; /* prepared and not yet consumed */
	atomic_uint bad;                          /* wrong data, lengths or calls */
	atomic_uint seen[MAXB];                   /* consume calls per batch */
	atomic_size_t npos;
	uint64_t order[MAXB];                  /* batch indices in the order consume saw them */
	uintptr_t in_buf[MAXB], out_buf[MAXB]; /* each batch's host_in and host_out, disguised */
	uintptr_t stream[MAXB];                /* the stream compute saw for each batch */
	tdm_executor *ex;                      /* set: prepare notes whether it ran on a worker */
	bool on_worker[MAXB];
};

static void rec_init(struct rec *r, uint64_t total)
{
	memset(r, 0, sizeof(*r));
	r->total = total;
	r->fail_prepare = r->fail_compute = r->fail_consume = r->inject_at = r->slow_at = NONE;
	r->fail_rc = r->consume_rc = -EIO;
}

static uint64_t word(uint64_t index, unsigned k)
{
	return index * 1000003u + k;
}

/* Recorded pointers are disguised, so that a buffer the pipeline leaks does not look reachable
 * from here to LeakSanitizer. */
static uintptr_t disguise(const void *p)
{
	return ~(uintptr_t)p;
}

/* Distinct values among p[0..n). */
static unsigned distinct(const uintptr_t *p, unsigned n)
{
	unsigned d = 0;
	for (unsigned i = 0; i < n; i++) {
		unsigned j = 0;
		while (j < i && p[j] != p[i])
			j++;
		d += j == i;
	}
	return d;
}

static int rec_prepare(tdm_batch *b, void *user)
{
	struct rec *r = user;
	if (b->index == r->total)
		return TDM_PIPELINE_END;
	atomic_fetch_add(&r->prepared, 1);
	long now = atomic_fetch_add(&r->outstanding, 1) + 1;
	long max = atomic_load(&r->max_outstanding);
	while (now > max && !atomic_compare_exchange_weak(&r->max_outstanding, &max, now)) {
	}
	if (b->index < MAXB) {
		r->in_buf[b->index] = disguise(b->host_in);
		if (r->ex != NULL)
			r->on_worker[b->index] = tdm_worker_index(r->ex) >= 0;
	}
	if (b->in_len != WORDS * sizeof(uint64_t) || b->status != 0)
		atomic_fetch_add(&r->bad, 1);
	uint64_t *w = b->host_in;
	for (unsigned k = 0; k < WORDS; k++)
		w[k] = word(b->index, k);
	if (b->index == r->inject_at && tdm_sim_inject(b->stream, r->inject) != 0)
		atomic_fetch_add(&r->bad, 1);
	if (b->index == r->fail_prepare) {
		atomic_fetch_sub(&r->outstanding, 1); /* it will never be consumed */
		return r->fail_rc;
	}
	return 0;
}

/* A kernel (varied length), then dev_in copied to dev_out on the device. */
static int rec_compute(tdm_batch *b, void *user)
{
	struct rec *r = user;
	uint32_t ns = r->spin_ns;
	if (b->index < MAXB)
		r->stream[b->index] = (uintptr_t)b->stream;
	if (r->vary)
		ns += (uint32_t)(3 - b->index % 4) * 400000u;
	if (ns > 0 && tdm_launch_spin(b->stream, ns) != 0)
		atomic_fetch_add(&r->bad, 1);
	if (b->index == r->fail_compute) {
		atomic_fetch_sub(&r->outstanding, 1);
		return r->fail_rc;
	}
	return tdm_memcpy_async(b->stream, b->dev_out, b->dev_in, b->in_len, TDM_COPY_D2D);
}

static int rec_consume(tdm_batch *b, void *user)
{
	struct rec *r = user;
	if (r->consume_sleep_us > 0)
		tdm_test_sleep_us(r->consume_sleep_us);
	if (b->index == r->slow_at)
		tdm_test_sleep_us(200000);
	if (b->index < MAXB)
		r->out_buf[b->index] = disguise(b->host_out);
	const uint64_t *w = b->host_out;
	if (b->status != 0 || b->out_len != b->in_len)
		atomic_fetch_add(&r->bad, 1);
	for (unsigned k = 0; k < b->out_len / sizeof(uint64_t); k++)
		if (w[k] != word(b->index, k)) {
			atomic_fetch_add(&r->bad, 1);
			break;
		}
	if (b->index < MAXB)
		atomic_fetch_add(&r->seen[b->index], 1);
	size_t pos = atomic_fetch_add(&r->npos, 1);
	if (pos < MAXB)
		r->order[pos] = b->index;
	/* Release: the test thread's acquire load in tdm_test_wait_count sees the counts. */
	atomic_fetch_sub(&r->outstanding, 1);
	atomic_fetch_add_explicit(&r->consumed, 1, memory_order_release);
	if (b->index == r->fail_consume)
		return r->consume_rc;
	return 0;
}

static tdm_pipeline_config rec_config(struct rec *r, unsigned in_flight, int ordered)
{
	tdm_pipeline_config c = {
	    .device = 0,
	    .in_flight = in_flight,
	    .in_bytes = WORDS * sizeof(uint64_t),
	    .out_bytes = WORDS * sizeof(uint64_t),
	    .ordered = ordered,
	    .prepare = rec_prepare,
	    .compute = rec_compute,
	    .consume = rec_consume,
	    .user = r,
	};
	return c;
}

/* ---- the behaviours, each written once ---- */

/* Batches end out of order on the GPU (earlier ones run longer); consume sees 0, 1, 2, ... */
static void ordered_consume_sees_batch_order(struct env *e)
{
	static struct rec r;
	rec_init(&r, 40);
	r.vary = true;
	tdm_pipeline_config c = rec_config(&r, 4, 1);
	tdm_pipeline_stats st;
	uint64_t before = tdm_now_ns();
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	uint64_t after = tdm_now_ns();
	cr_assert_eq(atomic_load(&r.bad), 0, "every batch came back with its own data");
	cr_assert_eq(atomic_load(&r.npos), 40);
	for (uint64_t i = 0; i < 40; i++)
		cr_assert_eq(r.order[i], i, "consume call %llu saw batch %llu",
		             (unsigned long long)i, (unsigned long long)r.order[i]);
	cr_assert_eq(st.batches, 40);
	cr_assert_eq(st.failed, 0);
	cr_assert_eq(st.cancelled, 0);
	cr_assert_eq(st.first_error, 0);
	cr_assert_eq(st.bytes_in, 40 * c.in_bytes);
	cr_assert_eq(st.bytes_out, 40 * c.out_bytes);
	/* The run's two moments lie within the call, and seconds is the time between them. */
	cr_assert_geq(st.start_ns, before);
	cr_assert_gt(st.end_ns, st.start_ns);
	cr_assert_leq(st.end_ns, after);
	cr_assert_float_eq(st.seconds, (double)(st.end_ns - st.start_ns) / 1e9, 1e-9);
}

static void unordered_consumes_every_batch_once(struct env *e)
{
	static struct rec r;
	rec_init(&r, 60);
	r.vary = true;
	tdm_pipeline_config c = rec_config(&r, 5, 0);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	cr_assert_eq(atomic_load(&r.bad), 0);
	for (uint64_t i = 0; i < 60; i++)
		cr_assert_eq(atomic_load(&r.seen[i]), 1, "batch %llu consumed once",
		             (unsigned long long)i);
	cr_assert_eq(atomic_load(&r.npos), 60);
	cr_assert_eq(st.batches, 60);
	cr_assert_eq(st.failed + st.cancelled, 0);
}

/* A slow consumer: a slot prepares again only once its batch was consumed. */
static void slow_consumer_bounds_batches_in_flight(struct env *e, int ordered)
{
	static struct rec r;
	rec_init(&r, 30);
	r.consume_sleep_us = 2000;
	tdm_pipeline_config c = rec_config(&r, 3, ordered);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	cr_assert_eq(atomic_load(&r.bad), 0);
	cr_assert_eq(st.batches, 30);
	cr_assert_leq(atomic_load(&r.max_outstanding), 3,
	              "%ld batches were prepared and not consumed at once, with 3 slots",
	              atomic_load(&r.max_outstanding));
	cr_assert_eq(atomic_load(&r.outstanding), 0);
}

static void buffers_are_recycled(struct env *e)
{
	static struct rec r;
	tdm_pinned_stats before, warm, after;
	for (int run = 0; run < 3; run++) {
		rec_init(&r, 50);
		tdm_pipeline_config c = rec_config(&r, 4, 1);
		tdm_pipeline_stats st;
		if (run == 0)
			cr_assert_eq(tdm_pinned_stats_get(e->gpu, &before), 0);
		cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
		cr_assert_eq(st.batches, 50);
		cr_assert_eq(atomic_load(&r.bad), 0);
		cr_assert_leq(distinct(r.in_buf, 50), 4, "50 batches in the host_in of 4 slots");
		cr_assert_leq(distinct(r.out_buf, 50), 4, "and in their host_out buffers");
		if (run == 0)
			cr_assert_eq(tdm_pinned_stats_get(e->gpu, &warm), 0);
	}
	cr_assert_eq(tdm_pinned_stats_get(e->gpu, &after), 0);
	cr_assert_eq(warm.bytes_in_use, before.bytes_in_use, "every buffer went back to the pool");
	cr_assert_eq(after.bytes_in_use, before.bytes_in_use);
	cr_assert_eq(after.bytes_pinned, warm.bytes_pinned, "later runs pinned nothing new");
	cr_assert_eq(after.chunks, warm.chunks);
}

/* compute fails for batch 5 of 20: only that batch fails, and its turn passes on. */
static void failed_compute_fails_only_its_batch(struct env *e, int ordered)
{
	static struct rec r;
	rec_init(&r, 20);
	r.fail_compute = 5;
	tdm_pipeline_config c = rec_config(&r, 3, ordered);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), -EIO);
	cr_assert_eq(st.batches, 19);
	cr_assert_eq(st.failed, 1);
	cr_assert_eq(st.first_error, -EIO);
	cr_assert_eq(st.cancelled, 0);
	cr_assert_eq(atomic_load(&r.seen[5]), 0, "consume never saw the failed batch");
	cr_assert_eq(atomic_load(&r.bad), 0);
	for (uint64_t i = 0; i < 20; i++)
		cr_assert_eq(atomic_load(&r.seen[i]), i == 5 ? 0u : 1u);
	if (ordered)
		for (uint64_t k = 0; k < 19; k++)
			cr_assert_eq(r.order[k], k < 5 ? k : k + 1);
	cr_assert_eq(st.bytes_in, 19 * c.in_bytes, "only consumed batches count bytes");
}

static void failed_prepare_passes_its_turn_on(struct env *e)
{
	static struct rec r;
	rec_init(&r, 20);
	r.fail_prepare = 3;
	r.fail_rc = -EPROTO;
	r.vary = true;
	tdm_pipeline_config c = rec_config(&r, 4, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), -EPROTO);
	cr_assert_eq(st.batches, 19);
	cr_assert_eq(st.failed, 1);
	cr_assert_eq(st.first_error, -EPROTO);
	for (uint64_t k = 0; k < 19; k++)
		cr_assert_eq(r.order[k], k < 3 ? k : k + 1);
	cr_assert_eq(atomic_load(&r.bad), 0);
}

static void failed_consume_counts_as_failed(struct env *e)
{
	static struct rec r;
	rec_init(&r, 20);
	r.fail_consume = 11;
	r.consume_rc = -EBADMSG;
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), -EBADMSG);
	cr_assert_eq(st.batches, 19);
	cr_assert_eq(st.failed, 1);
	cr_assert_eq(st.first_error, -EBADMSG);
	cr_assert_eq(atomic_load(&r.npos), 20, "consume was called for every batch");
}

/* Of two failed batches, first_error is the one with the lower index, even when the other
 * fails first (batch 4's consume is slow, batch 9's compute fails meanwhile). */
static void first_error_is_the_lowest_batch(struct env *e)
{
	static struct rec r;
	rec_init(&r, 20);
	r.fail_compute = 9;
	r.fail_rc = -ENOSPC;
	r.fail_consume = 4;
	r.consume_rc = -EBADMSG;
	r.slow_at = 4;
	tdm_pipeline_config c = rec_config(&r, 4, 0);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), -EBADMSG);
	cr_assert_eq(st.first_error, -EBADMSG);
	cr_assert_eq(st.failed, 2);
	cr_assert_eq(st.batches, 18);
}

static void empty_input_runs_nothing(struct env *e)
{
	static struct rec r;
	rec_init(&r, 0);
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	cr_assert_eq(st.batches + st.failed + st.cancelled, 0);
	cr_assert_eq(st.seconds, 0.0);
	cr_assert_eq(st.start_ns, 0);
	cr_assert_eq(st.end_ns, 0);
	cr_assert_eq(atomic_load(&r.npos), 0);
}

/* compute NULL: dev_in goes back out; out_len follows a shorter in_len. */
static int short_prepare(tdm_batch *b, void *user)
{
	int rc = rec_prepare(b, user);
	if (rc == 0)
		b->in_len = (100 + b->index) * sizeof(uint64_t);
	return rc;
}

static void copy_only_pipeline_returns_its_input(struct env *e)
{
	static struct rec r;
	rec_init(&r, 30);
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	c.compute = NULL;
	c.prepare = short_prepare;
	c.out_bytes = 2 * c.in_bytes;
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 30);
	cr_assert_eq(atomic_load(&r.bad), 0, "out_len == in_len, and the words came back");
	cr_assert_eq(st.bytes_in, st.bytes_out);
}

/* ---- shutdown ---- */

struct runner {
	tdm_gpu *gpu;
	tdm_pipeline_config cfg;
	tdm_pipeline_stats st;
	int rc;
};

static void *run_pipeline(void *arg)
{
	struct runner *u = arg;
	u->rc = tdm_pipeline_run(u->gpu, &u->cfg, &u->st);
	return NULL;
}

/* The executor is destroyed (cancel mode) while batches are in flight: no hang, no leak. */
static void shutdown_cancels_a_running_pipeline(tdm_backend backend, int ordered)
{
	struct env e;
	if (!env_open_cfg(&e, backend, 2, TDM_SHUTDOWN_CANCEL, 0))
		cr_skip_test("no device for this backend");
	static struct rec r;
	rec_init(&r, NEVER);
	r.spin_ns = 300000;
	r.vary = true;
	static struct runner u;
	u.gpu = e.gpu;
	u.cfg = rec_config(&r, 4, ordered);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, run_pipeline, &u), 0);
	tdm_test_wait_count(&r.consumed, 10);
	cr_assert_eq(tdm_executor_destroy(e.ex), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	/* prepare never ends: only the shutdown ends the run. */
	cr_assert_eq(u.rc, -ECANCELED, "tdm_pipeline_run: %s", tdm_strerror(u.rc));
	cr_assert_eq(u.st.failed, 0);
	cr_assert_eq(u.st.batches + u.st.failed + u.st.cancelled, atomic_load(&r.prepared),
	             "every prepared batch is consumed, failed or cancelled");
	cr_assert_eq(u.st.batches, atomic_load(&r.npos));
	cr_assert_eq(atomic_load(&r.bad), 0);
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
}

/* The GPU layer is destroyed under a running pipeline: the slots' next awaits fail at once, each
 * slot stops (its stream drained before its buffers go), the run returns -ESHUTDOWN, and the
 * destroy, which waits for the slots' leases, returns. */
static void gpu_destroy_stops_a_running_pipeline(tdm_backend backend, int ordered)
{
	struct env e;
	if (!env_open(&e, backend))
		cr_skip_test("no device for this backend");
	static struct rec r;
	rec_init(&r, NEVER);
	r.spin_ns = 300000;
	r.vary = true;
	static struct runner u;
	u.gpu = e.gpu;
	u.cfg = rec_config(&r, 4, ordered);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, run_pipeline, &u), 0);
	tdm_test_wait_count(&r.consumed, 10);
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(u.rc, -ESHUTDOWN, "tdm_pipeline_run: %s", tdm_strerror(u.rc));
	cr_assert_eq(u.st.first_error, -ESHUTDOWN);
	cr_assert_geq(u.st.failed, 1);
	cr_assert_eq(u.st.cancelled, 0);
	cr_assert_eq(u.st.batches + u.st.failed, atomic_load(&r.prepared));
	cr_assert_eq(atomic_load(&r.bad), 0);
	tdm_test_destroy(e.ex);
}

/* ---- suites: each behaviour on each backend ---- */

#define WITH_ENV(backend, body)                                                                    \
	do {                                                                                       \
		struct env e;                                                                      \
		if (!env_open(&e, backend))                                                        \
			cr_skip_test("no device for this backend");                                \
		body;                                                                              \
		env_close(&e);                                                                     \
	} while (0)

#define PIPELINE_TESTS(suite, backend)                                                             \
	Test(suite, ordered_consume_sees_batch_order, .timeout = TDM_TEST_TIMEOUT(60))             \
	{                                                                                          \
		WITH_ENV(backend, ordered_consume_sees_batch_order(&e));                           \
	}                                                                                          \
	Test(suite, unordered_consumes_every_batch_once, .timeout = TDM_TEST_TIMEOUT(60))          \
	{                                                                                          \
		WITH_ENV(backend, unordered_consumes_every_batch_once(&e));                        \
	}                                                                                          \
	Test(suite, slow_consumer_bounds_batches_in_flight_ordered,                                \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		WITH_ENV(backend, slow_consumer_bounds_batches_in_flight(&e, 1));                  \
	}                                                                                          \
	Test(suite, slow_consumer_bounds_batches_in_flight_unordered,                              \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		WITH_ENV(backend, slow_consumer_bounds_batches_in_flight(&e, 0));                  \
	}                                                                                          \
	Test(suite, buffers_are_recycled, .timeout = TDM_TEST_TIMEOUT(60))                         \
	{                                                                                          \
		WITH_ENV(backend, buffers_are_recycled(&e));                                       \
	}                                                                                          \
	Test(suite, failed_compute_fails_only_its_batch_ordered, .timeout = TDM_TEST_TIMEOUT(60))  \
	{                                                                                          \
		WITH_ENV(backend, failed_compute_fails_only_its_batch(&e, 1));                     \
	}                                                                                          \
	Test(suite, failed_compute_fails_only_its_batch_unordered,                                 \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		WITH_ENV(backend, failed_compute_fails_only_its_batch(&e, 0));                     \
	}                                                                                          \
	Test(suite, failed_prepare_passes_its_turn_on, .timeout = TDM_TEST_TIMEOUT(60))            \
	{                                                                                          \
		WITH_ENV(backend, failed_prepare_passes_its_turn_on(&e));                          \
	}                                                                                          \
	Test(suite, failed_consume_counts_as_failed, .timeout = TDM_TEST_TIMEOUT(60))              \
	{                                                                                          \
		WITH_ENV(backend, failed_consume_counts_as_failed(&e));                            \
	}                                                                                          \
	Test(suite, first_error_is_the_lowest_batch, .timeout = TDM_TEST_TIMEOUT(60))              \
	{                                                                                          \
		WITH_ENV(backend, first_error_is_the_lowest_batch(&e));                            \
	}                                                                                          \
	Test(suite, empty_input_runs_nothing, .timeout = TDM_TEST_TIMEOUT(60))                     \
	{                                                                                          \
		WITH_ENV(backend, empty_input_runs_nothing(&e));                                   \
	}                                                                                          \
	Test(suite, copy_only_pipeline_returns_its_input, .timeout = TDM_TEST_TIMEOUT(60))         \
	{                                                                                          \
		WITH_ENV(backend, copy_only_pipeline_returns_its_input(&e));                       \
	}                                                                                          \
	Test(suite, shutdown_cancels_a_running_ordered_pipeline, .timeout = TDM_TEST_TIMEOUT(60))  \
	{                                                                                          \
		shutdown_cancels_a_running_pipeline(backend, 1);                                   \
	}                                                                                          \
	Test(suite, shutdown_cancels_a_running_unordered_pipeline,                                 \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		shutdown_cancels_a_running_pipeline(backend, 0);                                   \
	}                                                                                          \
	Test(suite, gpu_destroy_stops_a_running_ordered_pipeline, .timeout = TDM_TEST_TIMEOUT(60)) \
	{                                                                                          \
		gpu_destroy_stops_a_running_pipeline(backend, 1);                                  \
	}                                                                                          \
	Test(suite, gpu_destroy_stops_a_running_unordered_pipeline,                                \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		gpu_destroy_stops_a_running_pipeline(backend, 0);                                  \
	}

TDM_TEST_SUITE(pipeline_sim);
PIPELINE_TESTS(pipeline_sim, TDM_BACKEND_SIM)
#ifndef TANDEM_TEST_NO_CUDA
TDM_TEST_SUITE(pipeline_cuda);
PIPELINE_TESTS(pipeline_cuda, TDM_BACKEND_CUDA)
#endif

/* ---- sim only: injected faults ---- */

/* The copy in of batch 7 fails (a one-shot fault on its stream); the stream goes on. */
Test(pipeline_sim, failed_copy_fails_only_its_batch, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM));
	static struct rec r;
	rec_init(&r, 20);
	r.inject_at = 7;
	r.inject = TDM_SIM_FAULT_OP;
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EIO);
	cr_assert_eq(st.batches, 19);
	cr_assert_eq(st.failed, 1);
	cr_assert_eq(st.first_error, -EIO);
	cr_assert_eq(atomic_load(&r.seen[7]), 0);
	for (uint64_t k = 0; k < 19; k++)
		cr_assert_eq(r.order[k], k < 7 ? k : k + 1);
	cr_assert_eq(atomic_load(&r.bad), 0);
	env_close(&e);
}

/* The device dies during batch 3: the batches after it fail at once, none hangs. One slot, so
 * that no other batch is half-way through a copy when the device dies. */
Test(pipeline_sim, sticky_fault_fails_the_remaining_batches, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM));
	static struct rec r;
	rec_init(&r, 20);
	r.inject_at = 3;
	r.inject = TDM_SIM_FAULT_STICKY;
	tdm_pipeline_config c = rec_config(&r, 1, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EIO);
	cr_assert_eq(st.batches, 3);
	cr_assert_eq(st.failed, 17);
	cr_assert_eq(st.first_error, -EIO);
	cr_assert_eq(atomic_load(&r.prepared), 20, "the input was drained");
	env_close(&e);
}

/* ---- streams ---- */

/* Two streams in the set, one held exclusively here: the pipeline takes the other alone, and
 * its batches all take turns on it. */
Test(pipeline_sim, slots_share_a_stream_when_none_is_left, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 4, TDM_SHUTDOWN_DRAIN, 2));
	tdm_stream *held;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &held), 0);
	static struct rec r;
	rec_init(&r, 30);
	r.vary = true;
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 30);
	cr_assert_eq(atomic_load(&r.bad), 0);
	for (uint64_t k = 0; k < 30; k++)
		cr_assert_eq(r.order[k], k);
	/* Every stream held exclusively elsewhere: nothing to lease, nothing to borrow. */
	tdm_stream *other;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &other), 0);
	rec_init(&r, 30);
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EBUSY);
	cr_assert_eq(atomic_load(&r.prepared), 0);
	tdm_stream_release(other);
	tdm_stream_release(held);
	env_close(&e);
}

/*
 * What a stream sees of the batches: compute is called between the batch's copy in and copy out,
 * so a compute that starts while another batch's compute on the same stream has not returned, or
 * after a later batch's, means two batches' work interleaved on that stream, or out of index
 * order. compute sleeps, to give such a second batch the time to come in.
 */
struct lanes {
	struct rec r;
	pthread_mutex_t lock;
	unsigned n;
	uintptr_t stream[8];
	bool busy[8];
	uint64_t next[8]; /* the lowest index the lane may see next */
	unsigned overlaps, steps_back, lanes_full;
};

static int lanes_compute(tdm_batch *b, void *user)
{
	struct lanes *l = user;
	unsigned k = 0;
	pthread_mutex_lock(&l->lock);
	while (k < l->n && l->stream[k] != (uintptr_t)b->stream)
		k++;
	if (k == l->n && l->n < 8)
		l->stream[l->n++] = (uintptr_t)b->stream;
	bool ok = k < l->n;
	if (!ok)
		l->lanes_full++;
	else {
		l->overlaps += l->busy[k];
		l->steps_back += b->index < l->next[k];
		l->busy[k] = true;
		l->next[k] = b->index + 1;
	}
	pthread_mutex_unlock(&l->lock);
	tdm_test_sleep_us(300);
	if (ok) {
		pthread_mutex_lock(&l->lock);
		l->busy[k] = false;
		pthread_mutex_unlock(&l->lock);
	}
	return rec_compute(b, &l->r);
}

static int lanes_prepare(tdm_batch *b, void *user)
{
	return rec_prepare(b, &((struct lanes *)user)->r);
}

static int lanes_consume(tdm_batch *b, void *user)
{
	return rec_consume(b, &((struct lanes *)user)->r);
}

/* Runs 24 batches, in_flight and streams as given, on e; the streams the batches ran on. */
static unsigned lanes_run(struct env *e, struct lanes *l, unsigned in_flight, unsigned streams)
{
	memset(l, 0, sizeof(*l));
	rec_init(&l->r, 24);
	pthread_mutex_init(&l->lock, NULL);
	tdm_pipeline_config c = rec_config(&l->r, in_flight, 0);
	c.streams = streams;
	c.prepare = lanes_prepare;
	c.compute = lanes_compute;
	c.consume = lanes_consume;
	c.user = l;
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 24);
	cr_assert_eq(atomic_load(&l->r.bad), 0);
	cr_assert_eq(l->lanes_full, 0);
	cr_assert_eq(l->overlaps, 0, "two batches enqueued on one stream at once");
	cr_assert_eq(l->steps_back, 0, "a stream saw a batch after a later one");
	pthread_mutex_destroy(&l->lock);
	return l->n;
}

/*
 * Each stream gets one batch's work at a time, in index order. With a stream set of one, the
 * second lease (shared) gives the stream the first one holds: the pipeline must then run on one
 * stream, under one order lock, not on that stream twice under two.
 */
Test(pipeline_sim, a_stream_takes_one_batch_at_a_time_in_order, .timeout = TDM_TEST_TIMEOUT(60))
{
	static struct lanes l;
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 4, TDM_SHUTDOWN_DRAIN, 6));
	cr_assert_eq(lanes_run(&e, &l, 4, 2), 2);
	cr_assert_eq(lanes_run(&e, &l, 6, 3), 3);
	env_close(&e);
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 4, TDM_SHUTDOWN_DRAIN, 1));
	cr_assert_eq(lanes_run(&e, &l, 4, 2), 1, "one stream in the set: one stream used");
	cr_assert_eq(lanes_run(&e, &l, 4, 0), 1);
	env_close(&e);
}

/* Runs 24 batches with in_flight and streams as given; true when batch i ran on the same stream
 * as batch i % want and the batches saw `want` streams in all. */
static bool turns_on(struct env *e, unsigned in_flight, unsigned streams, unsigned want)
{
	static struct rec r;
	rec_init(&r, 24);
	r.vary = true; /* batches end out of order: the stream is the index's, not the slot's */
	tdm_pipeline_config c = rec_config(&r, in_flight, 0);
	c.streams = streams;
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e->gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 24);
	cr_assert_eq(atomic_load(&r.bad), 0);
	for (unsigned i = 0; i < 24; i++)
		if (r.stream[i] != r.stream[i % want])
			return false;
	return distinct(r.stream, 24) == want;
}

Test(pipeline_sim, batches_take_turns_on_the_streams, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 4, TDM_SHUTDOWN_DRAIN, 6));
	cr_assert(turns_on(&e, 4, 0, 2), "the default: two streams, batch i on i %% 2");
	cr_assert(turns_on(&e, 4, 3, 3));
	cr_assert(turns_on(&e, 5, 5, 5));
	cr_assert(turns_on(&e, 1, 0, 1), "one batch in flight: one stream");
	env_close(&e);
}

/*
 * While a pipeline runs, a worker stays awake: batches of 1 ms kernels, one at a time, each
 * longer than a worker's spin before it parks, would otherwise find every worker asleep, the
 * last one parking once per batch. Those parks (parks_last) are counted, not timed; the other
 * worker's parks are not: on a slow machine (ThreadSanitizer on two cores) a completion can land
 * while the keeper still runs the batch before, wake the other worker and let it park again, and
 * the keeper is still awake.
 */
Test(pipeline_sim, a_worker_stays_awake_while_it_runs, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 2, TDM_SHUTDOWN_DRAIN, 0));
	static struct rec r;
	for (int no_spin = 0; no_spin < 2; no_spin++) {
		rec_init(&r, 30);
		r.spin_ns = 1000000;
		tdm_pipeline_config c = rec_config(&r, 1, 1);
		c.no_spin = no_spin;
		tdm_pipeline_stats st;
		uint64_t all_asleep = tdm_test_stats_total(e.ex).parks_last;
		cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), 0);
		all_asleep = tdm_test_stats_total(e.ex).parks_last - all_asleep;
		cr_assert_eq(st.batches, 30);
		cr_assert_eq(atomic_load(&r.bad), 0);
		if (!no_spin)
			cr_assert_lt(all_asleep, 10, "every worker asleep %llu times in 30 batches",
			             (unsigned long long)all_asleep);
	}
	env_close(&e);
}

/* The thread that called tdm_pipeline_run prepares (and enqueues) a batch for each slot as it
 * starts it, the workers the rest. */
Test(pipeline_sim, the_caller_starts_the_first_batches, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM));
	static struct rec r;
	rec_init(&r, 30);
	r.ex = e.ex;
	tdm_pipeline_config c = rec_config(&r, 5, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 30);
	cr_assert_eq(atomic_load(&r.bad), 0);
	/* At most one per slot, batch 0 always: the slots' tasks start as soon as their slot is
	 * primed and may take batches in between, or all of them (the sim is quick), before the
	 * caller primes the last slot. */
	unsigned on_caller = 0;
	for (unsigned i = 0; i < 30; i++)
		on_caller += !r.on_worker[i];
	cr_assert(!r.on_worker[0]);
	cr_assert_leq(on_caller, 5);
	env_close(&e);
}

/* Keeps a worker busy until released, so that a destroy in drain mode stays in progress. */
static void block_until(void *arg)
{
	atomic_int *go = arg;
	while (atomic_load(go) == 0)
		tdm_test_sleep_us(200);
}

static void *destroy_executor(void *arg)
{
	return (void *)(intptr_t)tdm_executor_destroy(arg);
}

static void nothing(void *arg)
{
	(void)arg;
}

/* Opens a sim layer and starts its executor's destroy (drain mode), which a running task holds
 * in progress until *go; returns once it has begun (an outside submission is refused). */
static void destroy_in_progress(struct env *e, atomic_int *go, pthread_t *th)
{
	cr_assert(env_open_cfg(e, TDM_BACKEND_SIM, 2, TDM_SHUTDOWN_DRAIN, 0));
	atomic_store(go, 0);
	cr_assert_eq(tdm_submit(e->ex, block_until, go), 0);
	cr_assert_eq(pthread_create(th, NULL, destroy_executor, e->ex), 0);
	while (tdm_submit(e->ex, nothing, NULL) != -ESHUTDOWN)
		tdm_test_sleep_us(100);
}

/* Lets the destroy of destroy_in_progress finish, then closes the layer. */
static void destroy_finish(struct env *e, atomic_int *go, pthread_t th)
{
	atomic_store(go, 1);
	void *drc;
	cr_assert_eq(pthread_join(th, &drc), 0);
	cr_assert_eq((intptr_t)drc, 0);
	cr_assert_eq(tdm_gpu_destroy(e->gpu), 0);
}

/*
 * The executor's destroy begins while the caller primes the first slot (in batch 0's prepare,
 * on the caller's thread), with nothing else to wait for: the slot's task cannot be started
 * (tdm_spawn says -ESHUTDOWN), that batch is finished on the caller's thread (consumed, counted),
 * not stranded, and the run says why it stopped. The run's hold keeps the destroy waiting until
 * the run is over, with or without no_spin: without the hold (no_spin, before), the destroy
 * freed the executor under the spawn (ASan: use-after-free in tdm_spawn).
 */
struct destroy_at_prepare {
	struct rec r;
	tdm_executor *ex;
	pthread_t th;
	bool started;
	int create_rc; /* pthread_create's, asserted by the test thread */
};

static int prepare_then_destroy(tdm_batch *b, void *user)
{
	struct destroy_at_prepare *d = user;
	if (b->index == 0 && !d->started) {
		d->started = true;
		d->create_rc = pthread_create(&d->th, NULL, destroy_executor, d->ex);
		if (d->create_rc != 0)
			return -EAGAIN; /* no destroy under way: the test reports why */
		while (tdm_submit(d->ex, nothing, NULL) != -ESHUTDOWN)
			tdm_test_sleep_us(100);
		/* Time for a destroy that does not wait for the run to end, and free the executor
		 * (as it did with no_spin); one that waits, as it must, just waits longer. */
		tdm_test_sleep_us(50000);
	}
	return rec_prepare(b, &d->r);
}

static int destroy_rec_compute(tdm_batch *b, void *user)
{
	return rec_compute(b, &((struct destroy_at_prepare *)user)->r);
}

static int destroy_rec_consume(tdm_batch *b, void *user)
{
	return rec_consume(b, &((struct destroy_at_prepare *)user)->r);
}

static void a_destroy_begun_in_the_set_up_waits_for_the_run(int no_spin)
{
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 2, TDM_SHUTDOWN_DRAIN, 0));
	static struct destroy_at_prepare d;
	memset(&d, 0, sizeof(d));
	d.ex = e.ex;
	rec_init(&d.r, 20);
	tdm_pipeline_config c = rec_config(&d.r, 3, 1);
	c.prepare = prepare_then_destroy;
	c.compute = destroy_rec_compute;
	c.consume = destroy_rec_consume;
	c.user = &d;
	c.no_spin = no_spin;
	tdm_pipeline_stats st;
	int rc = tdm_pipeline_run(e.gpu, &c, &st);
	cr_assert(d.started);
	cr_assert_eq(d.create_rc, 0, "pthread_create: %s", strerror(d.create_rc));
	cr_assert_eq(rc, -ESHUTDOWN, "tdm_pipeline_run: %s", tdm_strerror(rc));
	cr_assert_eq(atomic_load(&d.r.prepared), 1, "only the first slot was primed");
	cr_assert_eq(st.batches, 1, "its batch was consumed, not stranded");
	cr_assert_eq(st.cancelled, 0);
	cr_assert_eq(atomic_load(&d.r.npos), 1);
	cr_assert_eq(d.r.order[0], 0);
	cr_assert_eq(atomic_load(&d.r.bad), 0);
	void *drc;
	cr_assert_eq(pthread_join(d.th, &drc), 0);
	cr_assert_eq((intptr_t)drc, 0);
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
}

Test(pipeline_sim, a_destroy_begun_in_the_set_up_waits_for_the_run, .timeout = TDM_TEST_TIMEOUT(60))
{
	a_destroy_begun_in_the_set_up_waits_for_the_run(0);
}

Test(pipeline_sim, a_destroy_begun_in_the_set_up_waits_for_a_no_spin_run,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	a_destroy_begun_in_the_set_up_waits_for_the_run(1);
}

/* The run's hold is refused once the executor's destroy has begun (it would outlive the
 * executor otherwise): the run says -ESHUTDOWN before it prepares anything, and the layer and
 * the destroy go on. */
Test(pipeline_sim, a_run_after_the_executors_destroy_began_is_refused_at_once,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	static atomic_int go;
	pthread_t th;
	destroy_in_progress(&e, &go, &th);
	static struct rec r;
	rec_init(&r, 20);
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -ESHUTDOWN);
	cr_assert_eq(atomic_load(&r.prepared), 0, "nothing prepared");
	destroy_finish(&e, &go, th);
}

/*
 * A pipeline leaves one stream of the set to other tasks' shared leases, counting streams that
 * other holders keep exclusively: with a set of 2 and one stream held exclusively elsewhere (as
 * another pipeline does), a run takes the other stream shared, and a shared lease during the
 * run is served (-EBUSY before: the run took the last stream exclusively).
 */
struct lease_in_compute {
	struct rec r;
	tdm_gpu *gpu;
	atomic_int rc_min; /* the lowest rc of the shared leases tried in compute */
};

static int compute_then_lease(tdm_batch *b, void *user)
{
	struct lease_in_compute *l = user;
	tdm_stream *s;
	int rc = tdm_stream_lease(l->gpu, 0, TDM_STREAM_SHARED, &s);
	if (rc == 0)
		tdm_stream_release(s);
	int cur = atomic_load(&l->rc_min);
	while (rc < cur && !atomic_compare_exchange_weak(&l->rc_min, &cur, rc)) {
	}
	return rec_compute(b, &l->r);
}

static int lease_rec_prepare(tdm_batch *b, void *user)
{
	return rec_prepare(b, &((struct lease_in_compute *)user)->r);
}

static int lease_rec_consume(tdm_batch *b, void *user)
{
	return rec_consume(b, &((struct lease_in_compute *)user)->r);
}

Test(pipeline_sim, a_run_leaves_a_stream_to_shared_leases_when_others_hold_one,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 2, TDM_SHUTDOWN_DRAIN, 2));
	tdm_stream *mine;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &mine), 0);
	static struct lease_in_compute l;
	memset(&l, 0, sizeof(l));
	rec_init(&l.r, 10);
	l.gpu = e.gpu;
	tdm_pipeline_config c = rec_config(&l.r, 1, 1);
	c.prepare = lease_rec_prepare;
	c.compute = compute_then_lease;
	c.consume = lease_rec_consume;
	c.user = &l;
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 10);
	cr_assert_eq(atomic_load(&l.r.bad), 0);
	cr_assert_eq(atomic_load(&l.rc_min), 0, "a shared lease during the run: %s",
	             tdm_strerror(atomic_load(&l.rc_min)));
	cr_assert_eq(tdm_stream_release(mine), 0);
	env_close(&e);
}

Test(pipeline_sim, more_slots_than_streams, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open_cfg(&e, TDM_BACKEND_SIM, 4, TDM_SHUTDOWN_DRAIN, 2));
	static struct rec r;
	rec_init(&r, 40);
	tdm_pipeline_config c = rec_config(&r, 6, 0);
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), 0);
	cr_assert_eq(st.batches, 40);
	cr_assert_eq(atomic_load(&r.bad), 0);
	/* And the set still serves shared leases to others afterwards. */
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	tdm_stream_release(s);
	env_close(&e);
}

/* ---- bad input ---- */

TDM_TEST_SUITE(pipeline_errors);

struct worker_call {
	tdm_gpu *gpu;
	tdm_pipeline_config cfg;
	int rc;
};

static void call_from_worker(void *arg)
{
	struct worker_call *w = arg;
	w->rc = tdm_pipeline_run(w->gpu, &w->cfg, NULL);
}

Test(pipeline_errors, bad_configs_are_refused, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM));
	static struct rec r;
	rec_init(&r, 5);
	tdm_pipeline_config good = rec_config(&r, 3, 1), c;
	tdm_pipeline_stats st;

	memset(&st, 0xff, sizeof(st));
	cr_assert_eq(tdm_pipeline_run(NULL, &good, &st), -EINVAL);
	cr_assert_eq(st.batches, 0, "stats zeroed on every return");
	cr_assert_eq(tdm_pipeline_run(e.gpu, NULL, &st), -EINVAL);
	c = good;
	c.prepare = NULL;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c = good;
	c.in_bytes = 0;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c = good;
	c.out_bytes = 0;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c = good;
	c.in_flight = TDM_PIPELINE_MAX_IN_FLIGHT + 1;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c = good;
	c.streams = good.in_flight + 1;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c.in_flight = 0; /* the default, 8 */
	c.streams = 9;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c = good;
	c.device = 1;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	c.device = -1;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	cr_assert_eq(atomic_load(&r.prepared), 0, "nothing ran");

	/* From a worker of the executor: refused, it would wait on itself. */
	struct worker_call w = {.gpu = e.gpu, .cfg = good, .rc = 1};
	tdm_group g;
	tdm_group_init(&g, e.ex);
	cr_assert_eq(tdm_group_spawn(&g, call_from_worker, &w), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(w.rc, -EDEADLK);

	/* Still usable, with stats NULL. */
	cr_assert_eq(tdm_pipeline_run(e.gpu, &good, NULL), 0);
	cr_assert_eq(atomic_load(&r.npos), 5);
	env_close(&e);
}

/* prepare raises in_len past in_bytes for batch 2, compute out_len past out_bytes for 3. */
static int long_prepare(tdm_batch *b, void *user)
{
	int rc = rec_prepare(b, user);
	if (rc == 0 && b->index == 2) {
		b->in_len += 8;
		atomic_fetch_sub(&((struct rec *)user)->outstanding, 1);
	}
	return rc;
}

static int long_compute(tdm_batch *b, void *user)
{
	int rc = rec_compute(b, user);
	if (b->index == 3)
		b->out_len += 8;
	return rc;
}

Test(pipeline_errors, lengths_past_the_buffers_fail_the_batch, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM));
	static struct rec r;
	rec_init(&r, 6);
	tdm_pipeline_config c = rec_config(&r, 2, 1);
	c.prepare = long_prepare;
	c.compute = long_compute;
	tdm_pipeline_stats st;
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, &st), -EINVAL);
	cr_assert_eq(st.failed, 2);
	cr_assert_eq(st.batches, 4);
	cr_assert_eq(atomic_load(&r.seen[2]) + atomic_load(&r.seen[3]), 0);
	cr_assert_eq(atomic_load(&r.bad), 0);
	env_close(&e);
}

Test(pipeline_errors, no_device_backend, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_NONE));
	static struct rec r;
	rec_init(&r, 5);
	tdm_pipeline_config c = rec_config(&r, 3, 1);
	cr_assert_eq(tdm_pipeline_run(e.gpu, &c, NULL), -ENODEV);
	env_close(&e);
}
