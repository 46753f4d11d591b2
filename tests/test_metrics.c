// SPDX-License-Identifier: MIT
/*
 * The layer's metrics (tdm_gpu_metrics_*, gpu/metrics.c): the documented errors; the await
 * histogram's count, percentiles, mean and max on known round trips; the span accounting on
 * synthetic spans fed as the stamps feed them (the union of kernel and graph spans across
 * streams, each copy direction's union, bytes and rates, each stream's busy and idle time, spans
 * cut at the window's edges, and what happens past the interval bound); the awaits of a real
 * run timed; and, through the real stamps on the simulator, kernels of known length with known
 * idle gaps between them read back within 5%.
 */
#include "gpu_env.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu_internal.h" /* struct tdm__gpu's word: a layer being destroyed */
#include "metrics.h"
#include "stamps.h"

TDM_TEST_SUITE(metrics);

static tdm_gpu_metrics mx; /* 36 KiB: not on the stack */

static void open_sim(struct env *e)
{
	cr_assert(env_open(e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
}

static void get(tdm_gpu *gpu)
{
	int rc = tdm_gpu_metrics_get(gpu, &mx);
	cr_assert_eq(rc, 0, "tdm_gpu_metrics_get: %s", tdm_strerror(rc));
}

/* ---- errors ---- */

Test(metrics, calls_refuse_bad_arguments_with_their_errors)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_stop(NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_get(NULL, &mx), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_get(e.gpu, NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_peak(NULL, 0, 1, 1), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, -1, 1, 1), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 1, 1, 1), -EINVAL, "one sim device");
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 0, -1, 1), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 0, 1, NAN), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 0, INFINITY, 1), -EINVAL);
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 0, 0, 0), 0, "0: unknown");
	cr_assert_eq(tdm_metrics_print(NULL, stdout), -EINVAL);
	cr_assert_eq(tdm_metrics_print(&mx, NULL), -EINVAL);
	close_usable(&e);
}

Test(metrics, nothing_to_read_or_stop_before_the_first_start)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_get(e.gpu, &mx), -ENOENT);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), -EALREADY);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	get(e.gpu);
	cr_assert_eq(mx.running, 1);
	cr_assert_eq(mx.ndevices, 1);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), -EALREADY, "stopped already");
	get(e.gpu);
	cr_assert_eq(mx.running, 0, "readable after the stop");
	cr_assert_geq(mx.end_ns, mx.start_ns);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0, "started again");
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0, "and over while it runs");
	close_usable(&e);
}

Test(metrics, a_layer_being_destroyed_says_eshutdown)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	/* What a call sees while tdm_gpu_destroy runs; put back before the real destroy. */
	struct tdm__gpu *gpu = tdm__gpu_find(e.gpu);
	uint64_t live = atomic_load(&gpu->hobj.h);
	atomic_store(&gpu->hobj.h, live | TDM__H_CLOSING);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), -ESHUTDOWN);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), -ESHUTDOWN);
	cr_assert_eq(tdm_gpu_metrics_get(e.gpu, &mx), -ESHUTDOWN);
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 0, 1, 1), -ESHUTDOWN);
	atomic_store(&gpu->hobj.h, live);
	env_close(&e); /* with the metrics still on: the destroy turns them off */
}

Test(metrics, print_fails_with_eio_when_the_writes_fail)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	get(e.gpu);
	FILE *f = fopen("/dev/full", "w");
	if (f != NULL) {
		setvbuf(f, NULL, _IONBF, 0);
		cr_assert_eq(tdm_metrics_print(&mx, f), -EIO);
		fclose(f);
	}
	env_close(&e);
}

/* ---- the await histogram ---- */

Test(metrics, await_percentiles_come_from_the_round_trips)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	/* 1 us .. 100 us, one each. */
	for (uint64_t v = 1000; v <= 100000; v += 1000)
		tdm__metrics_await(tdm__gpu_find(e.gpu), v);
	get(e.gpu);
	cr_assert_eq(mx.awaits.count, 100);
	cr_assert_eq(mx.awaits.max_ns, 100000, "the max is exact");
	cr_assert_eq(mx.awaits.mean_ns, 50500);
	/* A bucket's midpoint: within 1/32 of the value at that rank. */
	cr_assert_leq(llabs((long long)mx.awaits.p50_ns - 50000), 50000 / 32, "p50 %llu",
	              (unsigned long long)mx.awaits.p50_ns);
	cr_assert_leq(llabs((long long)mx.awaits.p99_ns - 99000), 99000 / 32, "p99 %llu",
	              (unsigned long long)mx.awaits.p99_ns);
	cr_assert_leq(mx.awaits.p99_ns, mx.awaits.max_ns);

	/* A start begins again; below 32 ns every value has a bucket of its own. */
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	for (uint64_t v = 1; v <= 20; v++)
		tdm__metrics_await(tdm__gpu_find(e.gpu), v);
	get(e.gpu);
	cr_assert_eq(mx.awaits.count, 20, "the restart dropped the earlier ones");
	cr_assert_eq(mx.awaits.p50_ns, 10);
	cr_assert_eq(mx.awaits.p99_ns, 20);
	cr_assert_eq(mx.awaits.max_ns, 20);
	env_close(&e);
}

/* ---- spans ---- */

static void span(tdm_gpu *gpu, uint64_t base, unsigned stream, enum tdm__span_kind kind,
                 uint64_t start_us, uint64_t end_us, uint64_t bytes)
{
	struct tdm__span sp = {
	    base + start_us * 1000, base + end_us * 1000, bytes, 0, stream, kind};
	tdm__metrics_span(tdm__gpu_find(gpu), &sp);
}

/* The metrics' window began at least 10 ms ago: spans from its start + 1 ms on are inside. */
static uint64_t open_window(tdm_gpu *gpu)
{
	cr_assert_eq(tdm_gpu_metrics_start(gpu), 0);
	tdm_test_sleep_us(10000);
	get(gpu);
	return mx.start_ns + 1000000;
}

static unsigned streams_per_class(tdm_gpu *gpu)
{
	static tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(gpu, 0, &info), 0);
	return info.streams;
}

Test(metrics, busy_is_the_union_of_kernel_and_graph_spans_across_streams)
{
	struct env e;
	open_sim(&e);
	unsigned high0 = streams_per_class(e.gpu); /* the first stream of the high class */
	cr_assert_eq(tdm_gpu_metrics_peak(e.gpu, 0, 20.0, 0), 0);
	uint64_t b = open_window(e.gpu);
	/* Each stream's spans in order; the streams interleaved out of global order. */
	span(e.gpu, b, 1, TDM__SPAN_KERNEL, 50, 150, 0);
	span(e.gpu, b, 1, TDM__SPAN_GRAPH, 350, 600, 0);
	span(e.gpu, b, 0, TDM__SPAN_KERNEL, 0, 100, 0);
	span(e.gpu, b, high0, TDM__SPAN_H2D, 600, 800, 1000000);
	span(e.gpu, b, 0, TDM__SPAN_KERNEL, 300, 400, 0);
	span(e.gpu, b, 1, TDM__SPAN_D2H, 800, 900, 1000000);
	span(e.gpu, b, 0, TDM__SPAN_H2D, 500, 700, 2000000);
	span(e.gpu, b, high0, TDM__SPAN_KERNEL, 1000, 1100, 0);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	get(e.gpu);
	const tdm_device_metrics *d = &mx.devices[0];
	cr_assert_eq(d->window_ns, mx.end_ns - mx.start_ns);
	/* [0,150) + [300,600) + [1000,1100) us */
	cr_assert_eq(d->busy_ns, 550000, "busy %llu", (unsigned long long)d->busy_ns);
	cr_assert_float_eq(d->busy_fraction, 550000.0 / (double)d->window_ns, 1e-12);
	cr_assert_eq(d->kernels, 4);
	cr_assert_eq(d->graphs, 1);
	cr_assert_eq(d->copies, 3);
	/* H2D: [500,800) us, 3 MB: 10 GB/s while copying. */
	cr_assert_eq(d->h2d_ns, 300000);
	cr_assert_eq(d->h2d_bytes, 3000000);
	cr_assert_float_eq(d->h2d_gbps, 10.0, 1e-9);
	cr_assert_float_eq(d->h2d_gbps_window, 3000000.0 / (double)d->window_ns, 1e-12);
	cr_assert_float_eq(d->h2d_fraction, 300000.0 / (double)d->window_ns, 1e-12);
	cr_assert_float_eq(d->h2d_peak_gbps, 20.0, 0);
	cr_assert_float_eq(d->h2d_share, d->h2d_gbps_window / 20.0, 1e-12);
	cr_assert_eq(d->d2h_ns, 100000);
	cr_assert_eq(d->d2h_bytes, 1000000);
	cr_assert_float_eq(d->d2h_gbps, 10.0, 1e-9);
	cr_assert_float_eq(d->d2h_share, -1.0, 0, "no D2H peak: not computed");
	cr_assert_eq(d->unplaced_ns, 0);
	/* Per stream, in slot order: normal 0, normal 1, high 0. */
	cr_assert_eq(d->nstreams, 3);
	cr_assert_eq(d->streams_over, 0);
	const tdm_stream_metrics *s = d->streams;
	cr_assert(s[0].high == 0 && s[0].index == 0);
	cr_assert_eq(s[0].spans, 3);
	cr_assert_eq(s[0].busy_ns, 400000);
	cr_assert_eq(s[0].idle_ns, 300000, "(300-100) + (500-400) us");
	cr_assert(s[1].high == 0 && s[1].index == 1);
	cr_assert_eq(s[1].spans, 3);
	cr_assert_eq(s[1].busy_ns, 450000);
	cr_assert_eq(s[1].idle_ns, 400000, "(350-150) + (800-600) us");
	cr_assert(s[2].high == 1 && s[2].index == 0);
	cr_assert_eq(s[2].spans, 2);
	cr_assert_eq(s[2].busy_ns, 300000);
	cr_assert_eq(s[2].idle_ns, 200000, "(1000-800) us");

	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert_not_null(f);
	cr_assert_eq(tdm_metrics_print(&mx, f), 0);
	fclose(f);
	cr_assert_not_null(strstr(text, "device 0: busy"), "%s", text);
	cr_assert_not_null(strstr(text, "high 0"), "%s", text);
	cr_assert_not_null(strstr(text, "awaits: 0"), "%s", text);
	free(text);
	env_close(&e);
}

Test(metrics, spans_are_cut_at_the_window_edges)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	get(e.gpu);
	uint64_t start = mx.start_ns;
	/* Half before the start: half its time and half its bytes count. */
	struct tdm__span sp = {start - 1000, start + 1000, 2000, 0, 0, TDM__SPAN_H2D};
	tdm__metrics_span(tdm__gpu_find(e.gpu), &sp);
	struct tdm__span before = {start - 3000, start - 2000, 0, 0, 0, TDM__SPAN_KERNEL};
	tdm__metrics_span(tdm__gpu_find(e.gpu), &before);
	tdm_test_sleep_us(1000);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	get(e.gpu);
	uint64_t end = mx.end_ns;
	/* After the stop: what lies in the window still counts, the rest not. */
	struct tdm__span late = {end - 500, end + 500, 0, 0, 0, TDM__SPAN_KERNEL};
	tdm__metrics_span(tdm__gpu_find(e.gpu), &late);
	struct tdm__span after = {end + 1000, end + 2000, 0, 0, 0, TDM__SPAN_KERNEL};
	tdm__metrics_span(tdm__gpu_find(e.gpu), &after);
	get(e.gpu);
	const tdm_device_metrics *d = &mx.devices[0];
	cr_assert_eq(d->h2d_ns, 1000);
	cr_assert_eq(d->h2d_bytes, 1000);
	cr_assert_eq(d->busy_ns, 500);
	cr_assert_eq(d->kernels, 1);
	env_close(&e);
}

Test(metrics, past_the_interval_bound_late_spans_count_from_the_fold)
{
	struct env e;
	open_sim(&e);
	uint64_t b = open_window(e.gpu);
	/* 5000 separate 10 ns kernels, 10 ns apart, on stream 0: more than the 4096 intervals a
	 * device keeps, so the older half is folded into a sum (exact so far). */
	for (uint64_t i = 0; i < 5000; i++) {
		struct tdm__span sp = {b + 20 * i, b + 20 * i + 10, 0, 0, 0, TDM__SPAN_KERNEL};
		tdm__metrics_span(tdm__gpu_find(e.gpu), &sp);
	}
	get(e.gpu);
	cr_assert_eq(mx.devices[0].busy_ns, 50000);
	cr_assert_eq(mx.devices[0].unplaced_ns, 0);
	/* A span of stream 1 over the first 100 of them comes late: their time was folded, so it
	 * is not counted (the true union would be 1000 ns more), and says so. */
	struct tdm__span late = {b, b + 2000, 0, 0, 1, TDM__SPAN_KERNEL};
	tdm__metrics_span(tdm__gpu_find(e.gpu), &late);
	get(e.gpu);
	cr_assert_eq(mx.devices[0].busy_ns, 50000);
	cr_assert_eq(mx.devices[0].unplaced_ns, 2000);
	env_close(&e);
}

/* ---- the real path on sim ---- */

struct awaits_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int n, done;
	struct seen sn;
};

static int awaits_task(tdm_task *t, void *arg)
{
	struct awaits_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	for (c->done = 0; c->done < c->n; c->done++) {
		SEE(&c->sn, tdm_launch_spin(c->s, 20000));
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		SEE(&c->sn, tdm_task_result(t));
	}
	tdm_stream_release(c->s);
	TDM_END(t);
}

Test(metrics, awaits_are_timed_while_on_and_only_then)
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	struct awaits_state c = {.gpu = e.gpu, .n = 20};
	cr_assert_eq(run_one(&e, awaits_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	get(e.gpu);
	cr_assert_eq(mx.awaits.count, 20, "count %llu", (unsigned long long)mx.awaits.count);
	cr_assert_eq(mx.awaits.untimed, 0);
	cr_assert_gt(mx.awaits.p50_ns, 0);
	cr_assert_leq(mx.awaits.p50_ns, mx.awaits.p99_ns);
	cr_assert_leq(mx.awaits.p99_ns, mx.awaits.max_ns);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	struct awaits_state off = {.gpu = e.gpu, .n = 5};
	cr_assert_eq(run_one(&e, awaits_task, &off), 0);
	ASSERT_SEEN(&off.sn);
	get(e.gpu);
	cr_assert_eq(mx.awaits.count, 20, "not timed once stopped");
	env_close(&e);
}

/*
 * Kernels of KERNEL_NS on one exclusive stream, with the stream idle between them: after each
 * kernel's await the task waits GAP_NS before it launches the next, and notes when it launched
 * each kernel and when it resumed from its await. Kernel i ran inside [launched i, resumed i],
 * for at least KERNEL_NS (the sim's nanosleep never ends early); the gap after it began after
 * resumed i - its round trip's excess and ended before launched i+1 + the next one's. So the
 * figures have hard bounds from the host's notes whatever the load, and on a machine that ran
 * the kernels on time (every round trip within 5% of KERNEL_NS: the sim's stream thread and the
 * poller were scheduled) the bounds are within 5% of the kernels' lengths and the gaps the task
 * made, which the figures must then match.
 */
#define KERNELS 4
#define KERNEL_NS 20000000u /* sim: a nanosleep; its overshoot is small against this */
#define GAP_NS 100000000ull

struct gaps_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int i;
	uint64_t resumed[KERNELS], launched[KERNELS];
	struct seen sn;
};

static int gaps_task(tdm_task *t, void *arg)
{
	struct gaps_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	for (c->i = 0; c->i < KERNELS; c->i++) {
		c->launched[c->i] = tdm_now_ns();
		SEE(&c->sn, tdm_launch_spin(c->s, KERNEL_NS));
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		c->resumed[c->i] = tdm_now_ns();
		SEE(&c->sn, tdm_task_result(t));
		if (c->i + 1 < KERNELS) {
			/* The stream sits idle from the kernel's end to past this deadline. */
			TDM_AWAIT(t, tdm_await_deadline(t, c->gpu, tdm_now_ns() + GAP_NS));
			SEE(&c->sn, tdm_task_result(t));
		}
	}
	tdm_stream_release(c->s);
	TDM_END(t);
}

Test(metrics, kernels_and_idle_gaps_on_sim_read_back_within_5_percent,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	struct gaps_state c = {.gpu = e.gpu};
	cr_assert_eq(run_one(&e, gaps_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	get(e.gpu);
	tdm_metrics_print(&mx, stderr);
	const tdm_device_metrics *d = &mx.devices[0];
	double k = KERNEL_NS, busy = KERNELS * k, idle = 0, trips = 0, idle_max = 0;
	bool on_time = true;
	for (int i = 0; i < KERNELS; i++) {
		double trip = (double)(c.resumed[i] - c.launched[i]);
		trips += trip;
		on_time &= trip <= 1.05 * k;
		if (i + 1 < KERNELS) {
			idle += (double)(c.launched[i + 1] - c.resumed[i]); /* each >= GAP_NS */
			idle_max += (double)(c.resumed[i + 1] - c.launched[i]) - 2 * k;
		}
	}
	cr_assert_eq(d->kernels, KERNELS, "every kernel a span: %llu",
	             (unsigned long long)d->kernels);
	cr_assert_eq(d->nstreams, 1, "one stream ran them");
	const tdm_stream_metrics *s = &d->streams[0];
	cr_assert_eq(s->spans, KERNELS);
	cr_assert_eq(s->busy_ns, d->busy_ns, "one stream: its busy time is the device's");
	/* The hard bounds. */
	cr_assert(d->busy_ns >= busy && d->busy_ns <= trips,
	          "busy %llu ns: at least the kernels' %.0f, at most their round trips' %.0f",
	          (unsigned long long)d->busy_ns, busy, trips);
	cr_assert(s->idle_ns >= idle && s->idle_ns <= idle_max,
	          "idle %llu ns: at least the gaps' %.0f, at most %.0f",
	          (unsigned long long)s->idle_ns, idle, idle_max);
	/* Within 5%, where the machine ran the kernels on time. */
	if (on_time) {
		cr_assert(d->busy_ns <= busy * 1.05, "busy %llu ns, the kernels ran %.0f",
		          (unsigned long long)d->busy_ns, busy);
		cr_assert(s->idle_ns <= idle * 1.05, "idle %llu ns, the gaps were %.0f",
		          (unsigned long long)s->idle_ns, idle);
	} else {
		cr_log_info("a loaded machine: kernels' round trips %.0f ns against %.0f; only the "
		            "bounds were checked",
		            trips, busy);
	}
	cr_assert_float_eq(d->busy_fraction, (double)d->busy_ns / (double)d->window_ns, 1e-12);
	cr_assert_eq(mx.awaits.count, KERNELS, "the stream awaits timed, not the deadlines");
	env_close(&e);
}

/* ---- nothing lost silently ---- */

#define FLOOD 5000u
#define STREAM_STAMPS 4096u /* stamps a stream has (gpu/stamps.c, MAX_STAMPS) */

struct flood_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	tdm_sim_gate gate;
	int rc;
};

/* FLOOD kernels on one stream behind a closed gate, then one await: none of them can run, and
 * so give its stamp back, before the last is launched, whatever the machine's pace. The first
 * STREAM_STAMPS are stamped, the rest go unstamped. */
static int flood_task(tdm_task *t, void *arg)
{
	struct flood_state *c = arg;
	TDM_BEGIN(t);
	c->rc = tdm_stream_lease(c->gpu, 0, TDM_STREAM_EXCLUSIVE, &c->s);
	if (c->rc != 0)
		return c->rc;
	c->rc = tdm_sim_gate_close(c->s, &c->gate);
	if (c->rc != 0) {
		tdm_stream_release(c->s);
		return c->rc;
	}
	for (unsigned i = 0; i < FLOOD && c->rc == 0; i++)
		c->rc = tdm_launch_spin(c->s, 1000);
	(void)tdm_sim_gate_open(&c->gate); /* after a failure too: the stream must drain */
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	tdm_stream_release(c->s);
	TDM_END(t);
}

Test(metrics, spans_not_measured_are_counted_lost, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	open_sim(&e);
	cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	struct flood_state c = {.gpu = e.gpu};
	cr_assert_eq(run_one(&e, flood_task, &c), 0);
	cr_assert_eq(c.rc, 0);
	cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	get(e.gpu);
	const tdm_device_metrics *d = &mx.devices[0];
	cr_assert_eq(d->kernels, STREAM_STAMPS, "every stamp used, none given back: %llu",
	             (unsigned long long)d->kernels);
	cr_assert_eq(mx.spans_lost, FLOOD - STREAM_STAMPS,
	             "the launches past the stamps counted lost: %llu",
	             (unsigned long long)mx.spans_lost);
	env_close(&e);
}
