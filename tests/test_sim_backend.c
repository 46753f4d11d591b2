// SPDX-License-Identifier: MIT
/*
 * Specification of the `sim` backend, driven through its ops table as the poller and the pools
 * drive it: work on a stream runs in order and completion words and events report it; injected
 * faults reach exactly the completion point after them; a sticky fault kills the device; many
 * threads may enqueue at once; destroying streams, events and the backend waits for and frees
 * what they hold; busy kernels on one device run one after another; stream-ordered frees and host
 * functions wait for the work before them; pinned ranges, device memory counts and peer copies
 * behave as on CUDA. No test asserts a timing: where a check needs "the spin has not ended yet",
 * it is made only when the test measured that it ran before the spin could have ended.
 */
#include "common.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

TDM_TEST_SUITE(sim_backend);

static const struct tdm__backend_ops *const ops = &tdm__backend_sim;

#define SPIN_NS 20000000u /* 20 ms: long enough that the next line runs before it ends */

/* ---- helpers (test thread only: they assert) ---- */

static struct tdm__backend *open_sim(unsigned devices)
{
	tdm_gpu_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.backend = TDM_BACKEND_SIM;
	cfg.sim_devices = devices;
	struct tdm__backend *b = NULL;
	int rc = ops->open(&b, &cfg);
	cr_assert_eq(rc, 0, "open: %d", rc);
	cr_assert_not_null(b);
	return b;
}

static void *new_stream(struct tdm__backend *b, int dev)
{
	void *s = NULL;
	int rc = ops->stream_create(b, dev, 0, &s);
	cr_assert_eq(rc, 0, "stream_create: %d", rc);
	cr_assert_not_null(s);
	return s;
}

static void *new_event(struct tdm__backend *b, int dev)
{
	void *e = NULL;
	int rc = ops->event_create(b, dev, &e);
	cr_assert_eq(rc, 0, "event_create: %d", rc);
	return e;
}

static void *host_zeroed(struct tdm__backend *b, size_t bytes)
{
	void *p = NULL;
	cr_assert_eq(ops->host_alloc(b, bytes, &p), 0);
	memset(p, 0, bytes);
	return p;
}

static uint64_t load_word(const uint64_t *w)
{
	/* Acquire: pairs with the backend's release store of the word. */
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static void wait_word(const uint64_t *w, uint64_t at_least)
{
	while (load_word(w) < at_least)
		tdm_test_sleep_us(100);
}

/* Polls a query until it stops saying -EAGAIN; returns its answer. */
static int wait_stream(struct tdm__backend *b, void *s)
{
	int rc;
	while ((rc = ops->stream_query(b, s)) == -EAGAIN)
		tdm_test_sleep_us(100);
	return rc;
}

static int wait_event(struct tdm__backend *b, void *e)
{
	int rc;
	while ((rc = ops->event_query(b, e)) == -EAGAIN)
		tdm_test_sleep_us(100);
	return rc;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Whether the test got from `since` to here before a spin started after `since` could end. */
static bool before_spin_end(uint64_t since)
{
	return now_ns() - since < SPIN_NS;
}

/* ---- devices ---- */

Test(sim_backend, open_makes_the_configured_number_of_devices, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(3);
	cr_assert_eq(ops->device_count(b), 3);
	ops->close(b);
	b = open_sim(0);
	cr_assert_eq(ops->device_count(b), 1, "sim_devices = 0 means one device");
	ops->close(b);
	cr_assert_eq(ops->open(&b, NULL), 0);
	cr_assert_eq(ops->device_count(b), 1, "no config means one device");
	ops->close(b);
	cr_assert_str_eq(ops->name, "sim");
}

Test(sim_backend, device_info_describes_an_h200_like_device, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	struct tdm__device_info info;
	cr_assert_eq(ops->device_info(b, 1, &info), 0);
	cr_assert_str_eq(info.name, "tandem sim device 1");
	cr_assert_eq(info.sm_count, 132);
	cr_assert_eq(info.prio_least, 0);
	cr_assert_eq(info.prio_greatest, -5);
	cr_assert(info.can_write_value64);
	cr_assert_eq(info.async_engines, 3);
	ops->close(b);
}

Test(sim_backend, bad_arguments_return_einval, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e = new_event(b, 0), *p = NULL;
	uint64_t *w = host_zeroed(b, 64);
	struct tdm__device_info info;
	float f = 0;

	cr_assert_eq(ops->open(NULL, NULL), -EINVAL);
	cr_assert_eq(ops->device_count(NULL), -EINVAL);
	cr_assert_eq(ops->device_info(b, 1, &info), -EINVAL);
	cr_assert_eq(ops->device_info(b, -1, &info), -EINVAL);
	cr_assert_eq(ops->device_info(b, 0, NULL), -EINVAL);
	cr_assert_eq(ops->stream_create(b, 1, 0, &p), -EINVAL);
	cr_assert_eq(ops->stream_create(b, 0, 0, NULL), -EINVAL);
	cr_assert_eq(ops->stream_create(NULL, 0, 0, &p), -EINVAL);
	cr_assert_eq(ops->event_create(b, 1, &p), -EINVAL);
	cr_assert_eq(ops->stream_query(b, NULL), -EINVAL);
	cr_assert_eq(ops->event_query(b, NULL), -EINVAL);
	cr_assert_eq(ops->event_record(b, NULL, s), -EINVAL);
	cr_assert_eq(ops->event_record(b, e, NULL), -EINVAL);
	cr_assert_eq(ops->write_value(b, s, NULL, 1), -EINVAL);
	cr_assert_eq(ops->write_value(b, s, (uint64_t *)(void *)((char *)w + 4), 1), -EINVAL,
	             "a completion word must be 8-byte aligned");
	cr_assert_eq(ops->write_value(b, NULL, w, 1), -EINVAL);
	cr_assert_eq(ops->word_status(b, NULL, 1), -EINVAL);
	cr_assert_eq(ops->memcpy_async(b, s, NULL, w, 8, TDM_COPY_H2D), -EINVAL);
	cr_assert_eq(ops->memcpy_async(b, s, w, NULL, 8, TDM_COPY_H2D), -EINVAL);
	cr_assert_eq(ops->memcpy_async(b, s, w, w + 1, 8, (tdm_copy_kind)0), -EINVAL);
	cr_assert_eq(ops->memcpy_async(b, s, w, w + 1, 8, (tdm_copy_kind)4), -EINVAL);
	cr_assert_eq(ops->launch_spin(b, NULL, 0), -EINVAL);
	cr_assert_eq(ops->launch_busy(b, NULL, 0), -EINVAL);
	cr_assert_eq(ops->launch_scale(b, s, NULL, &f, 1.0f, 1), -EINVAL);
	cr_assert_eq(ops->launch_scale(b, s, &f, NULL, 1.0f, 1), -EINVAL);
	cr_assert_eq(ops->launch_fault(b, NULL), -EINVAL);
	cr_assert_eq(ops->sim_inject(b, s, (tdm_sim_fault)0), -EINVAL);
	cr_assert_eq(ops->sim_inject(b, s, (tdm_sim_fault)3), -EINVAL);
	cr_assert_eq(ops->sim_inject(b, NULL, TDM_SIM_FAULT_OP), -EINVAL);
	cr_assert_eq(ops->host_alloc(b, 0, &p), -EINVAL);
	cr_assert_eq(ops->host_alloc(b, 8, NULL), -EINVAL);
	cr_assert_eq(ops->device_alloc(b, 0, 0, &p), -EINVAL);
	cr_assert_eq(ops->device_alloc(b, 1, 8, &p), -EINVAL);
	cr_assert_eq(ops->device_alloc(b, 0, 8, NULL), -EINVAL);
	cr_assert_null(ops->stream_native(b, s));

	/* Nothing above was enqueued, and the stream still works. */
	cr_assert_eq(ops->stream_query(b, s), 0);
	cr_assert_eq(ops->write_value(b, s, w, 7), 0);
	wait_word(w, 7);
	ops->host_free(b, w);
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, memory_comes_back_aligned_and_usable, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	void *h = NULL, *d = NULL;
	cr_assert_eq(ops->host_alloc(b, 1, &h), 0);
	cr_assert_eq((uintptr_t)h % 64, 0, "host memory holds completion words a line each");
	memset(h, 0xAB, 1);
	ops->host_free(b, h);
	cr_assert_eq(ops->host_alloc(b, 100, &h), 0);
	cr_assert_eq((uintptr_t)h % 64, 0);
	memset(h, 0xAB, 100);
	cr_assert_eq(ops->device_alloc(b, 1, 100, &d), 0);
	memset(d, 0xCD, 100);
	ops->device_free(b, 1, d);
	ops->host_free(b, h);
	ops->close(b);
}

/* ---- order ---- */

Test(sim_backend, work_runs_in_stream_order, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { ROUNDS = 16, N = 4096 };
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	float *src[ROUNDS], *dst[ROUNDS], *d1[ROUNDS], *d2[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		src[r] = host_zeroed(b, N * sizeof(float));
		dst[r] = host_zeroed(b, N * sizeof(float));
		cr_assert_eq(ops->device_alloc(b, 0, N * sizeof(float), (void **)&d1[r]), 0);
		cr_assert_eq(ops->device_alloc(b, 0, N * sizeof(float), (void **)&d2[r]), 0);
		for (int i = 0; i < N; i++)
			src[r][i] = (float)(r * N + i);
	}
	/* Everything is enqueued before anything is checked, so the checks race the stream. */
	for (int r = 0; r < ROUNDS; r++) {
		cr_assert_eq(ops->launch_spin(b, s, 200000), 0);
		cr_assert_eq(
		    ops->memcpy_async(b, s, d1[r], src[r], N * sizeof(float), TDM_COPY_H2D), 0);
		cr_assert_eq(ops->launch_scale(b, s, d2[r], d1[r], 2.0f, N), 0);
		cr_assert_eq(
		    ops->memcpy_async(b, s, dst[r], d2[r], N * sizeof(float), TDM_COPY_D2H), 0);
		cr_assert_eq(ops->write_value(b, s, w, (uint64_t)r + 1), 0);
	}
	for (int r = 0; r < ROUNDS; r++) {
		wait_word(w, (uint64_t)r + 1);
		for (int i = 0; i < N; i++)
			cr_assert_eq(dst[r][i], 2.0f * (float)(r * N + i),
			             "round %d: the word was written before the data at %d", r, i);
		cr_assert_eq(ops->word_status(b, s, (uint64_t)r + 1), 0);
	}
	cr_assert_eq(wait_stream(b, s), 0);
	for (int r = 0; r < ROUNDS; r++) {
		ops->host_free(b, src[r]);
		ops->host_free(b, dst[r]);
		ops->device_free(b, 0, d1[r]);
		ops->device_free(b, 0, d2[r]);
	}
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_spin_kernel_delays_the_work_after_it, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	uint64_t seen = load_word(w);
	int q = ops->stream_query(b, s);
	if (before_spin_end(t0)) {
		cr_assert_eq(seen, 0, "the word was written before the spin ended");
		cr_assert_eq(q, -EAGAIN, "the stream was idle before the spin ended");
	}
	wait_word(w, 1);
	cr_assert_eq(wait_stream(b, s), 0);
	cr_assert_eq(load_word(w), 1);
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

/* ---- busy kernels ---- */

/* Polls until one of two words is set; returns 0 or 1, whichever it saw first. */
static int wait_either(const uint64_t *w0, const uint64_t *w1)
{
	for (;;) {
		if (load_word(w0) != 0)
			return 0;
		if (load_word(w1) != 0)
			return 1;
		tdm_test_sleep_us(100);
	}
}

Test(sim_backend, busy_kernels_on_two_streams_of_a_device_run_one_after_another,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s[2] = {new_stream(b, 0), new_stream(b, 0)};
	uint64_t *w = host_zeroed(b, 2 * 64);
	uint64_t *word[2] = {&w[0], &w[8]};
	uint64_t t0 = now_ns();
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(ops->launch_busy(b, s[i], SPIN_NS), 0);
		cr_assert_eq(ops->write_value(b, s[i], word[i], 1), 0);
	}
	/* Whichever kernel took the device first, the other starts when it ends and its word
	 * comes at least SPIN_NS after the first one's: not before 2 * SPIN_NS from t0. */
	int first = wait_either(word[0], word[1]);
	uint64_t other = load_word(word[1 - first]);
	if (now_ns() - t0 < 2ull * SPIN_NS)
		cr_assert_eq(other, 0,
		             "stream %d's busy kernel ended with stream %d's: they ran at once",
		             1 - first, first);
	wait_word(word[1 - first], 1);
	cr_assert_eq(load_word(word[first]), 1);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(wait_stream(b, s[i]), 0);
	ops->host_free(b, w);
	for (int i = 0; i < 2; i++)
		ops->stream_destroy(b, s[i]);
	ops->close(b);
}

/* ---- events ---- */

Test(sim_backend, an_event_is_pending_until_the_work_before_it_ran, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e = new_event(b, 0);
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	cr_assert_eq(ops->event_record(b, e, s), 0);
	int q = ops->event_query(b, e);
	if (before_spin_end(t0))
		cr_assert_eq(q, -EAGAIN, "the event completed before the spin ended");
	cr_assert_eq(wait_event(b, e), 0);
	cr_assert_eq(ops->event_query(b, e), 0, "a completed event stays completed");
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, an_event_never_recorded_is_done, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *e = new_event(b, 0);
	cr_assert_eq(ops->event_query(b, e), 0);
	ops->event_destroy(b, e);
	ops->close(b);
}

Test(sim_backend, recording_again_resets_an_event, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e = new_event(b, 0);
	cr_assert_eq(ops->event_record(b, e, s), 0);
	cr_assert_eq(wait_event(b, e), 0);
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	cr_assert_eq(ops->event_record(b, e, s), 0);
	int q = ops->event_query(b, e);
	if (before_spin_end(t0))
		cr_assert_eq(q, -EAGAIN, "the earlier record still answered for the event");
	cr_assert_eq(wait_event(b, e), 0);
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, an_event_reports_the_last_of_records_on_two_streams,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s1 = new_stream(b, 0), *s2 = new_stream(b, 0), *e = new_event(b, 0);
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s1, SPIN_NS), 0);
	cr_assert_eq(ops->event_record(b, e, s1), 0);
	cr_assert_eq(ops->event_record(b, e, s2), 0); /* s2 is idle: this record runs first */
	cr_assert_eq(wait_stream(b, s2), 0);
	int q = ops->event_query(b, e);
	if (before_spin_end(t0))
		cr_assert_eq(q, 0, "the latest record ran, so the event is done");
	cr_assert_eq(wait_stream(b, s1), 0);
	cr_assert_eq(ops->event_query(b, e), 0, "an older record ran late and undid a newer one");
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s1);
	ops->stream_destroy(b, s2);
	ops->close(b);
}

/* ---- faults ---- */

Test(sim_backend, a_one_shot_fault_fails_the_next_completion_word_only,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64), *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	src[0] = 11;
	src[1] = 22;
	cr_assert_eq(ops->sim_inject(b, s, TDM_SIM_FAULT_OP), 0);
	/* A completion point is not work: the fault waits for the copy. */
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	cr_assert_eq(ops->memcpy_async(b, s, &dst[0], &src[0], 8, TDM_COPY_D2D), 0);
	cr_assert_eq(ops->write_value(b, s, w, 2), 0);
	cr_assert_eq(ops->memcpy_async(b, s, &dst[1], &src[1], 8, TDM_COPY_D2D), 0);
	cr_assert_eq(ops->write_value(b, s, w, 3), 0);
	wait_word(w, 3);
	cr_assert_eq(ops->word_status(b, s, 1), 0, "the fault reached the write before it");
	cr_assert_eq(ops->word_status(b, s, 2), -EIO, "the fault did not reach its completion");
	cr_assert_eq(ops->word_status(b, s, 3), 0, "the fault reached past its completion");
	cr_assert_eq(dst[0], 0, "the failed copy was done");
	cr_assert_eq(dst[1], 22, "the stream stopped working after a one-shot fault");
	cr_assert_eq(ops->stream_query(b, s), 0, "a one-shot fault is not a device error");
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_one_shot_fault_fails_the_next_event_only, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e1 = new_event(b, 0), *e2 = new_event(b, 0);
	cr_assert_eq(ops->sim_inject(b, s, TDM_SIM_FAULT_OP), 0);
	cr_assert_eq(ops->launch_spin(b, s, 1000), 0);
	cr_assert_eq(ops->event_record(b, e1, s), 0);
	cr_assert_eq(ops->launch_spin(b, s, 1000), 0);
	cr_assert_eq(ops->event_record(b, e2, s), 0);
	cr_assert_eq(wait_event(b, e2), 0);
	cr_assert_eq(ops->event_query(b, e1), -EIO);
	cr_assert_eq(ops->event_record(b, e1, s), 0);
	cr_assert_eq(wait_event(b, e1), 0, "recording again did not clear the error");
	ops->event_destroy(b, e1);
	ops->event_destroy(b, e2);
	ops->stream_destroy(b, s);
	ops->close(b);
}

struct status_reader {
	struct tdm__backend *b;
	void *s;
	const uint64_t *w;
	unsigned n;
	int *rc; /* rc[v] for v in 1..n */
};

static void *read_statuses(void *arg)
{
	struct status_reader *r = arg;
	for (unsigned v = 1; v <= r->n; v++) {
		while (__atomic_load_n(r->w, __ATOMIC_ACQUIRE) < v) {
		}
		r->rc[v] = ops->word_status(r->b, r->s, v);
	}
	return NULL;
}

/* The poller asks for word statuses while the stream runs and faults are injected. */
Test(sim_backend, word_status_races_cleanly_with_the_stream, .timeout = TDM_TEST_TIMEOUT(20))
{
	unsigned n = (unsigned)tdm_test_size(4000, 400);
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	int *rc = calloc(n + 1, sizeof(*rc));
	cr_assert_not_null(rc);
	struct status_reader r = {.b = b, .s = s, .w = w, .n = n, .rc = rc};
	pthread_t reader;
	cr_assert_eq(pthread_create(&reader, NULL, read_statuses, &r), 0);
	for (unsigned v = 1; v <= n; v++) {
		if (v % 3 == 0)
			cr_assert_eq(ops->sim_inject(b, s, TDM_SIM_FAULT_OP), 0);
		cr_assert_eq(ops->launch_spin(b, s, 0), 0);
		cr_assert_eq(ops->write_value(b, s, w, v), 0);
	}
	cr_assert_eq(pthread_join(reader, NULL), 0);
	for (unsigned v = 1; v <= n; v++)
		cr_assert_eq(rc[v], v % 3 == 0 ? -EIO : 0, "value %u: %d", v, rc[v]);
	free(rc);
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

/* Work enqueued right behind a fatal operation: queued (and then skipped), or refused with -EIO
 * if the device died first. */
static void enqueue_behind_fault(int rc)
{
	cr_assert(rc == 0 || rc == -EIO, "enqueue behind a fault: %d", rc);
}

Test(sim_backend, a_sticky_fault_kills_the_device_for_good, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	void *s0 = new_stream(b, 0), *s1 = new_stream(b, 0), *other = new_stream(b, 1);
	void *e = new_event(b, 0);
	uint64_t *w = host_zeroed(b, 3 * 64), *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	uint64_t *w0 = &w[0], *w1 = &w[8], *w2 = &w[16];
	float f = 1.0f;

	/* Queued on another stream of the device before the fault, due to run after it. */
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s1, SPIN_NS), 0);
	cr_assert_eq(ops->write_value(b, s1, w1, 1), 0);

	cr_assert_eq(ops->sim_inject(b, s0, TDM_SIM_FAULT_STICKY), 0);
	cr_assert_eq(ops->launch_spin(b, s0, 0), 0);
	enqueue_behind_fault(ops->write_value(b, s0, w0, 1));
	cr_assert_eq(wait_stream(b, s0), -EIO);
	bool failed_before_s1_ran = before_spin_end(t0);

	cr_assert_eq(ops->stream_query(b, s1), -EIO);
	cr_assert_eq(ops->event_query(b, e), -EIO);
	cr_assert_eq(ops->memcpy_async(b, s1, dst, src, 8, TDM_COPY_D2D), -EIO);
	cr_assert_eq(ops->launch_spin(b, s1, 0), -EIO);
	cr_assert_eq(ops->launch_busy(b, s1, 0), -EIO);
	cr_assert_eq(ops->launch_scale(b, s1, &f, &f, 2.0f, 1), -EIO);
	cr_assert_eq(ops->launch_fault(b, s1), -EIO);
	cr_assert_eq(ops->write_value(b, s1, w1, 2), -EIO);
	cr_assert_eq(ops->event_record(b, e, s1), -EIO);
	void *p = NULL;
	cr_assert_eq(ops->stream_create(b, 0, 0, &p), -EIO);
	cr_assert_eq(ops->event_create(b, 0, &p), -EIO);
	cr_assert_eq(ops->device_alloc(b, 0, 64, &p), -EIO, "as cudaMalloc after a sticky error");

	/* The other device goes on. */
	cr_assert_eq(ops->write_value(b, other, w2, 5), 0);
	wait_word(w2, 5);
	cr_assert_eq(wait_stream(b, other), 0);

	/* Destroying a stream drains it: whatever was queued has had its chance to run. */
	ops->stream_destroy(b, s0);
	ops->stream_destroy(b, s1);
	cr_assert_eq(load_word(w0), 0, "a dead device wrote a completion word");
	if (failed_before_s1_ran)
		cr_assert_eq(load_word(w1), 0, "work queued before the fault ran after it");
	cr_assert_eq(f, 1.0f);
	ops->event_destroy(b, e);
	ops->stream_destroy(b, other);
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->close(b);
}

Test(sim_backend, a_trapping_kernel_kills_the_device, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e = new_event(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	cr_assert_eq(ops->launch_fault(b, s), 0, "a trap is found when it runs, not at launch");
	enqueue_behind_fault(ops->write_value(b, s, w, 1));
	cr_assert_eq(wait_stream(b, s), -EIO);
	cr_assert_eq(ops->event_query(b, e), -EIO);
	cr_assert_eq(ops->launch_spin(b, s, 0), -EIO);
	ops->stream_destroy(b, s);
	cr_assert_eq(load_word(w), 0);
	ops->event_destroy(b, e);
	ops->host_free(b, w);
	ops->close(b);
}

/* ---- many threads ---- */

enum { STREAMS = 4, THREADS = 8 };

struct enqueuer {
	struct tdm__backend *b;
	void **streams;
	unsigned index, n;
	uint64_t *own_word;  /* written 1..n in order, on one stream */
	uint64_t *slot;      /* copied to before each write of own_word */
	uint64_t *values;    /* values[i] = i + 1: the copies' sources */
	uint64_t *done;      /* n words, each written once to 1, spread over the streams */
	atomic_int failures; /* enqueue calls that did not return 0 */
};

static void *enqueue_many(void *arg)
{
	struct enqueuer *q = arg;
	void *mine = q->streams[q->index % STREAMS];
	for (unsigned i = 0; i < q->n; i++) {
		void *spread = q->streams[(q->index + i) % STREAMS];
		int rc = ops->memcpy_async(q->b, mine, q->slot, &q->values[i], 8, TDM_COPY_H2D);
		rc |= ops->write_value(q->b, mine, q->own_word, (uint64_t)i + 1);
		rc |= ops->launch_spin(q->b, spread, i % 7 == 0 ? 2000 : 0);
		rc |= ops->write_value(q->b, spread, &q->done[i], 1);
		if (rc != 0)
			atomic_fetch_add(&q->failures, 1);
	}
	return NULL;
}

Test(sim_backend, many_threads_enqueue_on_shared_streams_at_once, .timeout = TDM_TEST_TIMEOUT(20))
{
	unsigned n = (unsigned)tdm_test_size(2000, 200);
	struct tdm__backend *b = open_sim(1);
	void *streams[STREAMS];
	for (int i = 0; i < STREAMS; i++)
		streams[i] = new_stream(b, 0);
	struct enqueuer q[THREADS];
	pthread_t th[THREADS];
	for (unsigned t = 0; t < THREADS; t++) {
		q[t] = (struct enqueuer){.b = b, .streams = streams, .index = t, .n = n};
		q[t].own_word = host_zeroed(b, 64);
		q[t].slot = host_zeroed(b, 64);
		q[t].values = host_zeroed(b, n * sizeof(uint64_t));
		q[t].done = host_zeroed(b, n * sizeof(uint64_t));
		for (unsigned i = 0; i < n; i++)
			q[t].values[i] = i + 1;
	}
	for (unsigned t = 0; t < THREADS; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, enqueue_many, &q[t]), 0);
	for (unsigned t = 0; t < THREADS; t++)
		cr_assert_eq(pthread_join(th[t], NULL), 0);
	for (unsigned t = 0; t < THREADS; t++) {
		cr_assert_eq(atomic_load(&q[t].failures), 0);
		wait_word(q[t].own_word, n);
		cr_assert_eq(load_word(q[t].own_word), n);
		cr_assert_eq(*q[t].slot, n, "thread %u: the last copy had not landed", t);
	}
	for (int i = 0; i < STREAMS; i++)
		cr_assert_eq(wait_stream(b, streams[i]), 0);
	size_t completed = 0;
	for (unsigned t = 0; t < THREADS; t++)
		for (unsigned i = 0; i < n; i++)
			completed += load_word(&q[t].done[i]);
	cr_assert_eq(completed, (size_t)THREADS * n);
	for (unsigned t = 0; t < THREADS; t++) {
		ops->host_free(b, q[t].own_word);
		ops->host_free(b, q[t].slot);
		ops->host_free(b, q[t].values);
		ops->host_free(b, q[t].done);
	}
	for (int i = 0; i < STREAMS; i++)
		ops->stream_destroy(b, streams[i]);
	ops->close(b);
}

/* ---- memory ---- */

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

static size_t free_memory(struct tdm__backend *b, int dev)
{
	size_t free_bytes = 0, total = 0;
	cr_assert_eq(ops->mem_info(b, dev, &free_bytes, &total), 0);
	return free_bytes;
}

Test(sim_backend, mem_info_describes_an_80_gib_device, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	size_t free_bytes = 0, total = 0;
	cr_assert_eq(ops->mem_info(b, 0, &free_bytes, &total), 0);
	cr_assert_eq(total, 80 * GIB);
	cr_assert_eq(free_bytes, total, "nothing is allocated yet");
	ops->close(b);
}

Test(sim_backend, device_memory_of_every_kind_counts_until_freed, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	void *s = new_stream(b, 0), *d = NULL, *a = NULL, *m = NULL;
	size_t total = free_memory(b, 0);
	cr_assert_eq(ops->device_alloc(b, 0, 1 * MIB, &d), 0);
	cr_assert_eq(ops->malloc_async(b, s, 2 * MIB, &a), 0);
	cr_assert_eq(ops->managed_alloc(b, 0, 4 * MIB, &m), 0);
	cr_assert_eq(free_memory(b, 0), total - 7 * MIB);
	cr_assert_eq(free_memory(b, 1), total, "another device's memory was counted");
	ops->device_free(b, 0, d);
	ops->managed_free(b, m);
	cr_assert_eq(ops->free_async(b, s, a), 0);
	cr_assert_eq(wait_stream(b, s), 0);
	cr_assert_eq(free_memory(b, 0), total);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, device_memory_is_256_byte_aligned_and_usable, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *p[3] = {NULL, NULL, NULL};
	cr_assert_eq(ops->device_alloc(b, 0, 1, &p[0]), 0);
	cr_assert_eq(ops->malloc_async(b, s, 100, &p[1]), 0);
	cr_assert_eq(ops->managed_alloc(b, 0, 300, &p[2]), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq((uintptr_t)p[i] % 256, 0, "block %d: %p", i, p[i]);
	memset(p[0], 0xAB, 1);
	memset(p[1], 0xAB, 100);
	memset(p[2], 0xAB, 300);
	ops->device_free(b, 0, p[0]);
	cr_assert_eq(ops->free_async(b, s, p[1]), 0);
	ops->managed_free(b, p[2]);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, managed_alloc_refuses_more_than_the_free_memory, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *d = NULL, *m = NULL;
	cr_assert_eq(ops->device_alloc(b, 0, 1 * MIB, &d), 0);
	size_t free_bytes = free_memory(b, 0);
	cr_assert_eq(ops->managed_alloc(b, 0, free_bytes + 1, &m), -ENOMEM);
	cr_assert_null(m);
	cr_assert_eq(ops->managed_alloc(b, 0, SIZE_MAX, &m), -ENOMEM);
	cr_assert_eq(free_memory(b, 0), free_bytes, "a refused allocation was counted");
	cr_assert_eq(ops->managed_alloc(b, 0, 1 * MIB, &m), 0);
	cr_assert_not_null(m);
	memset(m, 0x5A, 1 * MIB);
	cr_assert_eq(free_memory(b, 0), free_bytes - 1 * MIB);
	ops->managed_free(b, m);
	cr_assert_eq(free_memory(b, 0), free_bytes);
	ops->device_free(b, 0, d);
	ops->close(b);
}

Test(sim_backend, device_alloc_refuses_more_than_the_free_memory, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *p = NULL;
	cr_assert_eq(ops->device_alloc(b, 0, 80 * GIB + 1, &p), -ENOMEM);
	cr_assert_eq(ops->malloc_async(b, s, 80 * GIB + 1, &p), -ENOMEM);
	cr_assert_null(p);
	cr_assert_eq(free_memory(b, 0), 80 * GIB);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, free_async_waits_for_the_work_before_it, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 4096 };
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	unsigned char *src = host_zeroed(b, N), *dst = host_zeroed(b, N), *d = NULL;
	for (int i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 7 + 1);
	size_t before = free_memory(b, 0);
	cr_assert_eq(ops->malloc_async(b, s, N, (void **)&d), 0);
	cr_assert_eq(ops->memcpy_async(b, s, d, src, N, TDM_COPY_H2D), 0);
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	/* Reads d after the spin: under ASan an early free is a use after free here. */
	cr_assert_eq(ops->memcpy_async(b, s, dst, d, N, TDM_COPY_D2H), 0);
	cr_assert_eq(ops->free_async(b, s, d), 0);
	size_t during = free_memory(b, 0);
	if (before_spin_end(t0))
		cr_assert_eq(during, before - N,
		             "the memory was freed before the stream reached it");
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	wait_word(w, 1);
	for (int i = 0; i < N; i++)
		cr_assert_eq(dst[i], (unsigned char)(i * 7 + 1), "byte %d", i);
	cr_assert_eq(free_memory(b, 0), before, "the free ran before the write after it");
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_free_queued_behind_a_fatal_fault_still_frees, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *d = NULL;
	cr_assert_eq(ops->malloc_async(b, s, 4096, &d), 0);
	cr_assert_eq(ops->launch_fault(b, s), 0);
	int rc = ops->free_async(b, s, d);
	enqueue_behind_fault(rc);
	if (rc != 0)
		ops->device_free(b, 0, d); /* a refused free leaves the memory with the caller */
	ops->stream_destroy(b, s);
	ops->close(b); /* a leak fails the test under ASan (the suite's fini) */
}

struct host_fn_probe {
	const uint64_t *copied; /* what a copy before the function wrote */
	const uint64_t *word;   /* written after the function */
	uint64_t seen_copied, seen_word;
	atomic_int calls;
};

static void probe(void *arg)
{
	struct host_fn_probe *p = arg;
	p->seen_copied = *p->copied;
	p->seen_word = load_word(p->word);
	/* Release: pairs with the acquire load of calls by the test thread. */
	atomic_fetch_add_explicit(&p->calls, 1, memory_order_release);
}

Test(sim_backend, a_host_function_runs_in_stream_order, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64), *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	struct host_fn_probe p = {.copied = dst, .word = w};
	src[0] = 42;
	uint64_t t0 = now_ns();
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	cr_assert_eq(ops->memcpy_async(b, s, dst, src, 8, TDM_COPY_D2H), 0);
	cr_assert_eq(ops->host_fn(b, s, probe, &p), 0);
	int calls = atomic_load_explicit(&p.calls, memory_order_acquire);
	if (before_spin_end(t0))
		cr_assert_eq(calls, 0, "the host function ran before the spin ended");
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	wait_word(w, 1);
	cr_assert_eq(atomic_load_explicit(&p.calls, memory_order_acquire), 1);
	cr_assert_eq(p.seen_copied, 42, "the host function ran before the copy before it");
	cr_assert_eq(p.seen_word, 0, "the host function ran after the write after it");
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_host_function_behind_a_fatal_fault_is_not_called,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t w = 0, copied = 0;
	struct host_fn_probe p = {.copied = &copied, .word = &w};
	cr_assert_eq(ops->launch_fault(b, s), 0);
	enqueue_behind_fault(ops->host_fn(b, s, probe, &p));
	ops->stream_destroy(b, s); /* drains the stream */
	cr_assert_eq(atomic_load_explicit(&p.calls, memory_order_acquire), 0,
	             "a dead device called a host function (cudaLaunchHostFunc does not)");
	ops->close(b);
}

Test(sim_backend, host_alloc_memory_is_pinned, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	char *h = NULL;
	cr_assert_eq(ops->host_alloc(b, 100, (void **)&h), 0);
	cr_assert_eq(ops->is_pinned(b, h), 1);
	cr_assert_eq(ops->is_pinned(b, h + 99), 1, "the last byte");
	ops->host_free(b, h);
	cr_assert_eq(ops->is_pinned(b, h), 0, "freed memory stayed pinned");
	ops->close(b);
}

Test(sim_backend, malloc_memory_is_not_pinned, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	char *p = malloc(100), *d = NULL;
	cr_assert_not_null(p);
	cr_assert_eq(ops->device_alloc(b, 0, 100, (void **)&d), 0);
	cr_assert_eq(ops->is_pinned(b, p), 0);
	cr_assert_eq(ops->is_pinned(b, d), 0, "device memory is not pinned host memory");
	cr_assert_eq(ops->is_pinned(b, NULL), 0);
	ops->device_free(b, 0, d);
	free(p);
	ops->close(b);
}

/* host_free frees only what host_alloc gave, as cudaFreeHost: a registered buffer stays its
 * owner's, and registered (freeing it anyway would free the owner's memory under it). */
Test(sim_backend, host_free_refuses_a_registered_buffer, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	char *p = malloc(300);
	cr_assert_not_null(p);
	cr_assert_eq(ops->host_register(b, p, 300), 0);
	ops->host_free(b, p);
	cr_assert_eq(ops->is_pinned(b, p), 1, "still registered");
	cr_assert_eq(ops->host_unregister(b, p), 0);
	free(p); /* the owner's own free: a double free if host_free had freed it */
	ops->close(b);
}

Test(sim_backend, a_registered_range_is_pinned_until_unregistered, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	char *p = malloc(300);
	cr_assert_not_null(p);
	cr_assert_eq(ops->host_register(b, p + 100, 100), 0);
	cr_assert_eq(ops->is_pinned(b, p + 99), 0, "before the range");
	cr_assert_eq(ops->is_pinned(b, p + 100), 1);
	cr_assert_eq(ops->is_pinned(b, p + 199), 1, "the last byte");
	cr_assert_eq(ops->is_pinned(b, p + 200), 0, "past the end");
	cr_assert_eq(ops->host_unregister(b, p + 100), 0);
	cr_assert_eq(ops->is_pinned(b, p + 100), 0);
	cr_assert_eq(ops->host_unregister(b, p + 100), -EINVAL, "unregistered twice");
	free(p);
	ops->close(b);
}

Test(sim_backend, registering_an_overlapping_range_fails, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	char *p = malloc(300), *h = NULL;
	cr_assert_not_null(p);
	cr_assert_eq(ops->host_alloc(b, 64, (void **)&h), 0);
	cr_assert_eq(ops->host_register(b, p + 100, 100), 0);
	cr_assert_eq(ops->host_register(b, p + 150, 100), -EEXIST);
	cr_assert_eq(ops->host_register(b, p, 101), -EEXIST);
	cr_assert_eq(ops->host_register(b, p, 300), -EEXIST, "a range around a registered one");
	cr_assert_eq(ops->host_register(b, h, 64), -EEXIST, "host_alloc memory is pinned already");
	cr_assert_eq(ops->host_unregister(b, h), -EINVAL, "host_alloc memory is not registered");
	cr_assert_eq(ops->host_register(b, p, 100), 0, "the range just before");
	cr_assert_eq(ops->host_register(b, p + 200, 100), 0, "the range just after");
	cr_assert_eq(ops->is_pinned(b, p + 299), 1);
	cr_assert_eq(ops->host_unregister(b, p), 0);
	cr_assert_eq(ops->host_unregister(b, p + 100), 0);
	cr_assert_eq(ops->host_unregister(b, p + 200), 0);
	cr_assert_eq(ops->is_pinned(b, h), 1);
	ops->host_free(b, h);
	free(p);
	ops->close(b);
}

/* Many blocks at once: the ranges stay sorted and each lookup finds its own. */
Test(sim_backend, is_pinned_finds_each_of_many_ranges, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 200 };
	struct tdm__backend *b = open_sim(1);
	char *h[N];
	for (int i = 0; i < N; i++)
		cr_assert_eq(ops->host_alloc(b, 32 + (size_t)i, (void **)&h[i]), 0);
	for (int i = 0; i < N; i += 2)
		ops->host_free(b, h[i]);
	for (int i = 1; i < N; i += 2) {
		cr_assert_eq(ops->is_pinned(b, h[i]), 1, "block %d", i);
		cr_assert_eq(ops->is_pinned(b, h[i] + 32 + i - 1), 1, "block %d, last byte", i);
	}
	for (int i = 1; i < N; i += 2)
		ops->host_free(b, h[i]);
	ops->close(b);
}

Test(sim_backend, prefetch_and_advise_accept_managed_memory, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	void *s = new_stream(b, 0), *m = NULL;
	uint64_t *w = host_zeroed(b, 64);
	cr_assert_eq(ops->managed_alloc(b, 0, 4096, &m), 0);
	cr_assert_eq(ops->prefetch(b, s, m, 4096, 1), 0);
	cr_assert_eq(ops->prefetch(b, s, m, 4096, -1), 0, "dev < 0 is the host");
	cr_assert_eq(ops->advise(b, m, 4096, TDM_ADVISE_READ_MOSTLY, 0), 0);
	cr_assert_eq(ops->advise(b, m, 4096, TDM_ADVISE_PREFERRED_LOCATION, -1), 0);
	cr_assert_eq(ops->advise(b, m, 4096, TDM_ADVISE_ACCESSED_BY, 1), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	wait_word(w, 1);
	cr_assert_eq(wait_stream(b, s), 0);
	ops->managed_free(b, m);
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_peer_copy_moves_data_between_two_devices, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 4096 };
	struct tdm__backend *b = open_sim(2);
	void *s0 = new_stream(b, 0), *s1 = new_stream(b, 1);
	uint64_t *w = host_zeroed(b, 64);
	unsigned char *src = host_zeroed(b, N), *dst = host_zeroed(b, N), *d0 = NULL, *d1 = NULL;
	for (int i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 13 + 5);
	cr_assert_eq(ops->device_alloc(b, 0, N, (void **)&d0), 0);
	cr_assert_eq(ops->device_alloc(b, 1, N, (void **)&d1), 0);
	cr_assert_eq(ops->memcpy_async(b, s0, d0, src, N, TDM_COPY_H2D), 0);
	cr_assert_eq(ops->memcpy_peer_async(b, s0, d1, 1, d0, 0, N), 0);
	cr_assert_eq(ops->write_value(b, s0, w, 1), 0);
	wait_word(w, 1);
	cr_assert_eq(ops->memcpy_async(b, s1, dst, d1, N, TDM_COPY_D2H), 0);
	cr_assert_eq(ops->write_value(b, s1, w, 2), 0);
	wait_word(w, 2);
	for (int i = 0; i < N; i++)
		cr_assert_eq(dst[i], (unsigned char)(i * 13 + 5), "byte %d", i);
	ops->device_free(b, 0, d0);
	ops->device_free(b, 1, d1);
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s0);
	ops->stream_destroy(b, s1);
	ops->close(b);
}

static void never_called(void *arg)
{
	(void)arg;
}

Test(sim_backend, memory_ops_return_einval_for_bad_arguments, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	void *s = new_stream(b, 0), *p = NULL;
	char buf[64];
	size_t f = 0, t = 0;

	cr_assert_eq(ops->malloc_async(b, NULL, 8, &p), -EINVAL);
	cr_assert_eq(ops->malloc_async(b, s, 0, &p), -EINVAL);
	cr_assert_eq(ops->malloc_async(b, s, 8, NULL), -EINVAL);
	cr_assert_eq(ops->free_async(b, NULL, buf), -EINVAL);
	cr_assert_eq(ops->host_register(b, NULL, 8), -EINVAL);
	cr_assert_eq(ops->host_register(b, buf, 0), -EINVAL);
	cr_assert_eq(ops->host_register(b, (void *)(UINTPTR_MAX - 3), 8), -EINVAL,
	             "a range past the end of the address space");
	cr_assert_eq(ops->host_unregister(b, NULL), -EINVAL);
	cr_assert_eq(ops->host_unregister(b, buf), -EINVAL, "never registered");
	cr_assert_eq(ops->managed_alloc(b, 2, 8, &p), -EINVAL);
	cr_assert_eq(ops->managed_alloc(b, -1, 8, &p), -EINVAL);
	cr_assert_eq(ops->managed_alloc(b, 0, 0, &p), -EINVAL);
	cr_assert_eq(ops->managed_alloc(b, 0, 8, NULL), -EINVAL);
	cr_assert_eq(ops->prefetch(b, NULL, buf, 8, 0), -EINVAL);
	cr_assert_eq(ops->prefetch(b, s, NULL, 8, 0), -EINVAL);
	cr_assert_eq(ops->prefetch(b, s, buf, 8, 2), -EINVAL);
	cr_assert_eq(ops->advise(b, NULL, 8, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL);
	cr_assert_eq(ops->advise(b, buf, 8, (tdm_mem_advice)0, 0), -EINVAL);
	cr_assert_eq(ops->advise(b, buf, 8, (tdm_mem_advice)4, 0), -EINVAL);
	cr_assert_eq(ops->advise(b, buf, 8, TDM_ADVISE_ACCESSED_BY, 2), -EINVAL);
	cr_assert_eq(ops->mem_info(b, 2, &f, &t), -EINVAL);
	cr_assert_eq(ops->mem_info(b, -1, &f, &t), -EINVAL);
	cr_assert_eq(ops->mem_info(b, 0, NULL, &t), -EINVAL);
	cr_assert_eq(ops->mem_info(b, 0, &f, NULL), -EINVAL);
	cr_assert_eq(ops->host_fn(b, NULL, never_called, NULL), -EINVAL);
	cr_assert_eq(ops->host_fn(b, s, NULL, NULL), -EINVAL);
	cr_assert_eq(ops->memcpy_peer_async(b, NULL, buf, 1, buf + 8, 0, 8), -EINVAL);
	cr_assert_eq(ops->memcpy_peer_async(b, s, NULL, 1, buf + 8, 0, 8), -EINVAL);
	cr_assert_eq(ops->memcpy_peer_async(b, s, buf, 1, NULL, 0, 8), -EINVAL);
	cr_assert_eq(ops->memcpy_peer_async(b, s, buf, 2, buf + 8, 0, 8), -EINVAL);
	cr_assert_eq(ops->memcpy_peer_async(b, s, buf, 1, buf + 8, -1, 8), -EINVAL);
	cr_assert_null(p);

	/* Nothing above was enqueued or counted. */
	cr_assert_eq(ops->stream_query(b, s), 0);
	cr_assert_eq(free_memory(b, 0), 80 * GIB);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, memory_ops_on_a_dead_device_fail_with_eio, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	void *s = new_stream(b, 0), *other = new_stream(b, 1), *p = NULL, *d1 = NULL;
	size_t f = 0, t = 0;
	char buf[64];
	cr_assert_eq(ops->device_alloc(b, 1, 64, &d1), 0);
	cr_assert_eq(ops->launch_fault(b, s), 0);
	cr_assert_eq(wait_stream(b, s), -EIO);
	cr_assert_eq(ops->malloc_async(b, s, 64, &p), -EIO);
	cr_assert_null(p);
	cr_assert_eq(ops->free_async(b, s, d1), -EIO);
	cr_assert_eq(ops->prefetch(b, s, buf, 64, -1), -EIO);
	cr_assert_eq(ops->host_fn(b, s, never_called, NULL), -EIO);
	cr_assert_eq(ops->memcpy_peer_async(b, s, d1, 1, buf, 0, 64), -EIO);
	cr_assert_eq(ops->memcpy_peer_async(b, other, d1, 1, buf, 0, 64), -EIO,
	             "a copy from a dead device, on a stream of a live one");
	cr_assert_eq(ops->mem_info(b, 0, &f, &t), -EIO);
	cr_assert_eq(ops->mem_info(b, 1, &f, &t), 0, "the other device goes on");
	ops->device_free(b, 1, d1);
	ops->stream_destroy(b, s);
	ops->stream_destroy(b, other);
	ops->close(b);
}

/* ---- lifetimes ---- */

Test(sim_backend, destroying_a_stream_waits_for_its_work, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64), *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	src[0] = 42;
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	cr_assert_eq(ops->memcpy_async(b, s, dst, src, 8, TDM_COPY_D2H), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	ops->stream_destroy(b, s);
	cr_assert_eq(dst[0], 42);
	cr_assert_eq(load_word(w), 1);
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->close(b);
}

Test(sim_backend, an_event_may_be_destroyed_while_its_record_is_queued,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e = new_event(b, 0);
	cr_assert_eq(ops->launch_spin(b, s, SPIN_NS), 0);
	cr_assert_eq(ops->event_record(b, e, s), 0);
	ops->event_destroy(b, e); /* the queued record keeps it until it has run */
	cr_assert_eq(wait_stream(b, s), 0);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, close_frees_streams_and_events_left_behind, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(2);
	for (int dev = 0; dev < 2; dev++) {
		void *s = new_stream(b, dev), *e = new_event(b, dev), *gone = new_event(b, dev);
		(void)new_event(b, dev);
		cr_assert_eq(ops->launch_spin(b, s, 1000000), 0);
		cr_assert_eq(ops->event_record(b, e, s), 0);
		cr_assert_eq(ops->event_record(b, gone, s), 0);
		ops->event_destroy(b, gone);
		cr_assert_eq(ops->sim_inject(b, s, TDM_SIM_FAULT_OP), 0);
		cr_assert_eq(ops->launch_spin(b, s, 0), 0);
		cr_assert_eq(ops->launch_spin(b, s, 0), 0);
	}
	ops->close(b); /* leaks, if any, fail the test under ASan (the suite's fini) */
}

Test(sim_backend, stream_threads_are_named, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	DIR *dir = opendir("/proc/self/task");
	cr_assert_not_null(dir);
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(dir)) != NULL) {
		char path[300], comm[32] = {0};
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		if (fgets(comm, sizeof(comm), f) != NULL)
			found = strncmp(comm, "tdm-sim0", 8) == 0;
		fclose(f);
	}
	closedir(dir);
	cr_assert(found, "no thread named tdm-sim0");
	ops->stream_destroy(b, s);
	ops->close(b);
}

/* ---- graphs ---- */

static void *end_capture(struct tdm__backend *b, void *s)
{
	void *g = NULL;
	int rc = ops->capture_end(b, s, &g);
	cr_assert_eq(rc, 0, "capture_end: %d", rc);
	cr_assert_not_null(g);
	return g;
}

static void *instantiate(struct tdm__backend *b, void *g)
{
	void *x = NULL;
	int rc = ops->graph_instantiate(b, g, &x);
	cr_assert_eq(rc, 0, "graph_instantiate: %d", rc);
	cr_assert_not_null(x);
	return x;
}

/* Host memory the simulated device reaches (pinned), n floats, x[i] = i + 1 when `count`. */
static float *floats(struct tdm__backend *b, size_t n, bool count)
{
	float *p = host_zeroed(b, n * sizeof(float));
	for (size_t i = 0; count && i < n; i++)
		p[i] = (float)(i + 1);
	return p;
}

/* Ends a capture that must have been cancelled. */
static void end_cancelled(struct tdm__backend *b, void *s)
{
	void *g = (void *)1;
	cr_assert_eq(ops->capture_end(b, s, &g), -ECANCELED);
	cr_assert_null(g, "a cancelled capture gave a graph");
}

Test(sim_backend, a_capture_records_work_instead_of_running_it, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 2 * 64), *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	uint64_t *captured = &w[0], *marker = &w[8];
	src[0] = 7;
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->capture_begin(b, s), -EBUSY, "capturing twice");
	cr_assert_eq(ops->memcpy_async(b, s, dst, src, 8, TDM_COPY_D2D), 0);
	cr_assert_eq(ops->write_value(b, s, captured, 1), 0);
	void *g = end_capture(b, s);
	/* The stream captures no more: this runs, and what was captured did not. */
	cr_assert_eq(ops->write_value(b, s, marker, 1), 0);
	wait_word(marker, 1);
	cr_assert_eq(wait_stream(b, s), 0);
	cr_assert_eq(load_word(captured), 0, "a captured completion word was written");
	cr_assert_eq(dst[0], 0, "a captured copy ran");
	void *x = instantiate(b, g);
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	cr_assert_eq(ops->write_value(b, s, marker, 2), 0);
	wait_word(marker, 2);
	cr_assert_eq(load_word(captured), 1, "the replay did not write the captured word");
	cr_assert_eq(dst[0], 7, "the replay did not copy");
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, replays_run_the_nodes_in_capture_order, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 64 };
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	float *h = floats(b, N, true), *d0 = NULL, *d1 = NULL;
	cr_assert_eq(ops->device_alloc(b, 0, N * sizeof(float), (void **)&d0), 0);
	cr_assert_eq(ops->device_alloc(b, 0, N * sizeof(float), (void **)&d1), 0);
	cr_assert_eq(ops->memcpy_async(b, s, d0, h, N * sizeof(float), TDM_COPY_H2D), 0);
	cr_assert_eq(wait_stream(b, s), 0);
	/* d1 = 2 d0, then d0 = 3 d1: 6 d0 in this order only; then back to h. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->launch_scale(b, s, d1, d0, 2.0f, N), 0);
	cr_assert_eq(ops->launch_scale(b, s, d0, d1, 3.0f, N), 0);
	cr_assert_eq(ops->memcpy_async(b, s, h, d0, N * sizeof(float), TDM_COPY_D2H), 0);
	void *g = end_capture(b, s);
	void *x = instantiate(b, g);
	ops->graph_free(b, g); /* the exec is a copy */
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	wait_word(w, 1);
	for (int i = 0; i < N; i++)
		cr_assert_eq(h[i], 36.0f * (float)(i + 1), "at %d: %f, not two replays in order", i,
		             (double)h[i]);
	ops->graph_exec_free(b, x);
	ops->device_free(b, 0, d0);
	ops->device_free(b, 0, d1);
	ops->host_free(b, h);
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

/* A graph of one scale kernel, y = a x, after a spin of `ns`. */
static void *capture_scale(struct tdm__backend *b, void *s, uint32_t ns, float *y, const float *x,
                           float a, size_t n)
{
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->launch_spin(b, s, ns), 0);
	cr_assert_eq(ops->launch_scale(b, s, y, x, a, n), 0);
	return end_capture(b, s);
}

Test(sim_backend, an_update_in_place_changes_later_replays_only, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 16 };
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	float *x = floats(b, N, true), *y = floats(b, N, false);
	float *out1 = floats(b, N, false), *out2 = floats(b, N, false);
	void *g2 = capture_scale(b, s, SPIN_NS, y, x, 2.0f, N);
	void *g5 = capture_scale(b, s, SPIN_NS, y, x, 5.0f, N);
	void *exec = instantiate(b, g2);
	cr_assert_eq(ops->graph_launch(b, exec, s), 0);
	cr_assert_eq(ops->memcpy_async(b, s, out1, y, N * sizeof(float), TDM_COPY_D2H), 0);
	/* Most likely while the first replay spins: it keeps the parameters of its launch. */
	cr_assert_eq(ops->graph_update(b, exec, g5), 0);
	cr_assert_eq(ops->graph_launch(b, exec, s), 0);
	cr_assert_eq(ops->memcpy_async(b, s, out2, y, N * sizeof(float), TDM_COPY_D2H), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	wait_word(w, 1);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(out1[i], 2.0f * x[i],
		             "the update reached a replay launched before it");
		cr_assert_eq(out2[i], 5.0f * x[i], "the update did not reach a later replay");
	}
	ops->graph_exec_free(b, exec);
	ops->graph_free(b, g2);
	ops->graph_free(b, g5);
	ops->host_free(b, x);
	ops->host_free(b, y);
	ops->host_free(b, out1);
	ops->host_free(b, out2);
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

/* A fork joined back: s records e, s1 waits for it, a spin (on s1, or on s when `spin_on_root`),
 * a scale y = a x on s1, which s waits for. The nodes' kinds are in one order either way. */
static void *capture_fork(struct tdm__backend *b, void *s, void *s1, void *e, bool spin_on_root,
                          float *y, const float *x, float a, size_t n)
{
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->event_record(b, e, s), 0);
	cr_assert_eq(ops->stream_wait_event(b, s1, e), 0);
	cr_assert_eq(ops->launch_spin(b, spin_on_root ? s : s1, 0), 0);
	cr_assert_eq(ops->launch_scale(b, s1, y, x, a, n), 0);
	cr_assert_eq(ops->event_record(b, e, s1), 0);
	cr_assert_eq(ops->stream_wait_event(b, s, e), 0);
	return end_capture(b, s);
}

Test(sim_backend, an_update_to_another_topology_is_estale, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 16 };
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *s1 = new_stream(b, 0), *e = new_event(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	float *x = floats(b, N, true), *y = floats(b, N, false);
	void *g = capture_scale(b, s, 0, y, x, 2.0f, N);
	void *exec = instantiate(b, g);

	/* One more node. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->launch_spin(b, s, 0), 0);
	cr_assert_eq(ops->launch_scale(b, s, y, x, 7.0f, N), 0);
	cr_assert_eq(ops->launch_spin(b, s, 0), 0);
	void *longer = end_capture(b, s);
	/* As many nodes, of another kind. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->launch_spin(b, s, 0), 0);
	cr_assert_eq(ops->memcpy_async(b, s, y, x, N * sizeof(float), TDM_COPY_D2D), 0);
	void *other_kind = end_capture(b, s);
	/* Forks: the same kinds of node in one order, one of them on another stream. */
	void *fork3 = capture_fork(b, s, s1, e, false, y, x, 3.0f, N);
	void *fork4 = capture_fork(b, s, s1, e, false, y, x, 4.0f, N);
	void *moved = capture_fork(b, s, s1, e, true, y, x, 9.0f, N);
	void *fexec = instantiate(b, fork3);

	cr_assert_eq(ops->graph_update(b, exec, longer), -ESTALE);
	cr_assert_eq(ops->graph_update(b, exec, other_kind), -ESTALE);
	cr_assert_eq(ops->graph_update(b, exec, fork3), -ESTALE);
	cr_assert_eq(ops->graph_update(b, fexec, moved), -ESTALE, "a node moved to another stream");
	cr_assert_eq(ops->graph_update(b, fexec, fork4), 0, "the same fork, another factor");
	cr_assert_eq(ops->graph_launch(b, exec, s), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	wait_word(w, 1);
	for (int i = 0; i < N; i++)
		cr_assert_eq(y[i], 2.0f * x[i], "a refused update changed the graph");
	cr_assert_eq(ops->graph_launch(b, fexec, s), 0);
	cr_assert_eq(ops->write_value(b, s, w, 2), 0);
	wait_word(w, 2);
	for (int i = 0; i < N; i++)
		cr_assert_eq(y[i], 4.0f * x[i], "a refused update changed the graph");
	ops->graph_exec_free(b, exec);
	ops->graph_exec_free(b, fexec);
	ops->graph_free(b, fork3);
	ops->graph_free(b, fork4);
	ops->graph_free(b, moved);
	ops->graph_free(b, g);
	ops->graph_free(b, longer);
	ops->graph_free(b, other_kind);
	ops->host_free(b, x);
	ops->host_free(b, y);
	ops->host_free(b, w);
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s);
	ops->stream_destroy(b, s1);
	ops->close(b);
}

Test(sim_backend, a_fork_joined_back_is_captured_from_both_streams, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 16 };
	struct tdm__backend *b = open_sim(1);
	void *s0 = new_stream(b, 0), *s1 = new_stream(b, 0);
	void *e0 = new_event(b, 0), *e1 = new_event(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	float *a = floats(b, N, true), *b2 = floats(b, N, false), *c6 = floats(b, N, false);
	float *out = floats(b, N, false);
	cr_assert_eq(ops->capture_begin(b, s0), 0);
	cr_assert_eq(ops->launch_scale(b, s0, b2, a, 2.0f, N), 0);
	cr_assert_eq(ops->event_record(b, e0, s0), 0);
	cr_assert_eq(ops->stream_wait_event(b, s1, e0), 0); /* s1 joins */
	cr_assert_eq(ops->capture_begin(b, s1), -EBUSY, "a joined stream began a capture");
	void *g = (void *)1;
	cr_assert_eq(ops->capture_end(b, s1, &g), -EINVAL, "a joined stream ended the capture");
	cr_assert_null(g);
	cr_assert_eq(ops->launch_spin(b, s1, 1000000), 0);
	cr_assert_eq(ops->launch_scale(b, s1, c6, b2, 3.0f, N), 0);
	cr_assert_eq(ops->event_record(b, e1, s1), 0);
	cr_assert_eq(ops->stream_wait_event(b, s0, e1), 0); /* and is joined back */
	cr_assert_eq(ops->launch_scale(b, s0, out, c6, 1.0f, N), 0);
	g = end_capture(b, s0);
	/* Neither stream captures now, and nothing ran. */
	cr_assert_eq(ops->write_value(b, s1, w, 1), 0);
	wait_word(w, 1);
	cr_assert_eq(wait_stream(b, s0), 0);
	cr_assert_eq(wait_stream(b, s1), 0);
	cr_assert_eq(b2[0] + c6[0] + out[0], 0.0f, "captured work ran");
	void *x = instantiate(b, g);
	cr_assert_eq(ops->graph_launch(b, x, s0), 0);
	cr_assert_eq(ops->write_value(b, s0, w, 2), 0);
	wait_word(w, 2);
	for (int i = 0; i < N; i++)
		cr_assert_eq(out[i], 6.0f * a[i], "at %d: the forked work ran out of order", i);
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	ops->host_free(b, a);
	ops->host_free(b, b2);
	ops->host_free(b, c6);
	ops->host_free(b, out);
	ops->host_free(b, w);
	ops->event_destroy(b, e0);
	ops->event_destroy(b, e1);
	ops->stream_destroy(b, s0);
	ops->stream_destroy(b, s1);
	ops->close(b);
}

Test(sim_backend, a_fork_not_joined_back_cancels_the_capture, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { N = 16 };
	struct tdm__backend *b = open_sim(1);
	void *s0 = new_stream(b, 0), *s1 = new_stream(b, 0);
	void *e0 = new_event(b, 0), *e1 = new_event(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	float *x = floats(b, N, true), *y = floats(b, N, false);
	for (int late = 0; late < 2; late++) {
		cr_assert_eq(ops->capture_begin(b, s0), 0);
		cr_assert_eq(ops->event_record(b, e0, s0), 0);
		cr_assert_eq(ops->stream_wait_event(b, s1, e0), 0);
		cr_assert_eq(ops->launch_scale(b, s1, y, x, 3.0f, N), 0);
		if (late) {
			/* Joined back, but s1 works on after the point s0 waited for. */
			cr_assert_eq(ops->event_record(b, e1, s1), 0);
			cr_assert_eq(ops->stream_wait_event(b, s0, e1), 0);
			cr_assert_eq(ops->launch_spin(b, s1, 0), 0);
		}
		end_cancelled(b, s0);
		/* Neither stream captures any more. */
		cr_assert_eq(ops->write_value(b, s1, w, (uint64_t)late + 1), 0);
		wait_word(w, (uint64_t)late + 1);
		cr_assert_eq(wait_stream(b, s0), 0);
		cr_assert_eq(y[0], 0.0f, "a cancelled capture's work ran");
	}
	cr_assert_eq(ops->capture_begin(b, s1), 0, "the joined stream stayed in the capture");
	void *g = end_capture(b, s1); /* an empty graph */
	ops->graph_free(b, g);
	ops->host_free(b, x);
	ops->host_free(b, y);
	ops->host_free(b, w);
	ops->event_destroy(b, e0);
	ops->event_destroy(b, e1);
	ops->stream_destroy(b, s0);
	ops->stream_destroy(b, s1);
	ops->close(b);
}

struct end_attempt {
	struct tdm__backend *b;
	void *s, *g;
	int rc;
};

static void *end_elsewhere(void *arg)
{
	struct end_attempt *t = arg;
	t->g = (void *)1;
	t->rc = ops->capture_end(t->b, t->s, &t->g);
	return NULL;
}

Test(sim_backend, a_capture_ends_only_on_the_thread_that_began_it, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 2 * 64);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	struct end_attempt t = {.b = b, .s = s};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, end_elsewhere, &t), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(t.rc, -EINVAL, "another thread ended the capture: %d", t.rc);
	cr_assert_null(t.g);
	/* The capture goes on. */
	cr_assert_eq(ops->write_value(b, s, &w[0], 1), 0);
	void *g = end_capture(b, s);
	cr_assert_eq(ops->write_value(b, s, &w[8], 1), 0);
	wait_word(&w[8], 1);
	cr_assert_eq(load_word(&w[0]), 0, "work after the refused end ran");
	void *x = instantiate(b, g);
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	wait_word(&w[0], 1);
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	ops->host_free(b, w);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_call_a_capture_refuses_cancels_it, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0), *e = new_event(b, 0), *p = NULL, *blk = NULL;
	uint64_t *w = host_zeroed(b, 64);
	cr_assert_eq(ops->device_alloc(b, 0, 256, &blk), 0);

	/* A stream query: the capture refuses it, and every enqueue after it. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->launch_spin(b, s, 0), 0);
	cr_assert_eq(ops->stream_query(b, s), -EBUSY);
	cr_assert_eq(ops->write_value(b, s, w, 1), -EBUSY);
	end_cancelled(b, s);
	cr_assert_eq(ops->stream_query(b, s), 0, "the stream still captures");

	/* A query of an event recorded in the capture; after the end the event is as it was. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->event_record(b, e, s), 0);
	cr_assert_eq(ops->event_query(b, e), -EBUSY);
	end_cancelled(b, s);
	cr_assert_eq(ops->event_query(b, e), 0);

	/* Stream-ordered allocation and free, prefetch: refused, nothing done. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->malloc_async(b, s, 64, &p), -EBUSY);
	end_cancelled(b, s);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->free_async(b, s, blk), -EBUSY);
	end_cancelled(b, s);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->prefetch(b, s, blk, 256, 0), -EBUSY);
	end_cancelled(b, s);

	/* A wait on an event recorded outside the capture (isolation). */
	cr_assert_eq(ops->event_record(b, e, s), 0);
	cr_assert_eq(wait_event(b, e), 0);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->stream_wait_event(b, s, e), -EBUSY);
	end_cancelled(b, s);

	/* A graph launch into a capture. */
	cr_assert_eq(ops->capture_begin(b, s), 0);
	void *g = end_capture(b, s);
	void *x = instantiate(b, g);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->graph_launch(b, x, s), -EBUSY);
	end_cancelled(b, s);

	cr_assert_eq(ops->device_free(b, 0, blk), 0, "a refused free_async freed the block");
	cr_assert_eq(ops->write_value(b, s, w, 2), 0);
	wait_word(w, 2);
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	ops->host_free(b, w);
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s);
	ops->close(b);
}

Test(sim_backend, a_trap_in_a_replay_fails_the_device, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->launch_fault(b, s), 0);
	void *g = end_capture(b, s);
	cr_assert_eq(ops->stream_query(b, s), 0, "a captured trap ran");
	void *x = instantiate(b, g);
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	enqueue_behind_fault(ops->write_value(b, s, w, 1));
	cr_assert_eq(wait_stream(b, s), -EIO);
	cr_assert_eq(ops->capture_begin(b, s), -EIO);
	cr_assert_eq(ops->graph_launch(b, x, s), -EIO);
	void *x2 = (void *)1;
	cr_assert_eq(ops->graph_instantiate(b, g, &x2), -EIO);
	cr_assert_null(x2);
	cr_assert_eq(ops->graph_update(b, x, g), -EIO);
	ops->stream_destroy(b, s);
	cr_assert_eq(load_word(w), 0, "work after the trap ran");
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	ops->host_free(b, w);
	ops->close(b);
}

Test(sim_backend, an_armed_fault_skips_the_capture_and_takes_a_replay,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s = new_stream(b, 0);
	uint64_t *w = host_zeroed(b, 64), *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	src[0] = 11;
	src[1] = 22;
	cr_assert_eq(ops->sim_inject(b, s, TDM_SIM_FAULT_OP), 0);
	cr_assert_eq(ops->capture_begin(b, s), 0);
	cr_assert_eq(ops->memcpy_async(b, s, &dst[0], &src[0], 8, TDM_COPY_D2D), 0);
	cr_assert_eq(ops->memcpy_async(b, s, &dst[1], &src[1], 8, TDM_COPY_D2D), 0);
	void *g = end_capture(b, s);
	void *x = instantiate(b, g);
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	cr_assert_eq(ops->write_value(b, s, w, 1), 0);
	cr_assert_eq(ops->graph_launch(b, x, s), 0);
	cr_assert_eq(ops->write_value(b, s, w, 2), 0);
	wait_word(w, 2);
	cr_assert_eq(ops->word_status(b, s, 1), -EIO, "the fault missed the first replay");
	cr_assert_eq(ops->word_status(b, s, 2), 0, "the fault reached the second replay");
	cr_assert_eq(dst[0], 11, "the second replay did not copy");
	cr_assert_eq(dst[1], 22);
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	ops->host_free(b, w);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s);
	ops->close(b);
}

struct overlap_probe {
	atomic_int inside, overlaps, calls;
};

static void overlap_check(void *arg)
{
	struct overlap_probe *p = arg;
	if (atomic_fetch_add(&p->inside, 1) != 0)
		atomic_fetch_add(&p->overlaps, 1);
	tdm_test_sleep_us(2000);
	atomic_fetch_sub(&p->inside, 1);
	atomic_fetch_add(&p->calls, 1);
}

Test(sim_backend, replays_of_one_graph_never_overlap, .timeout = TDM_TEST_TIMEOUT(20))
{
	enum { NS = 3, ROUNDS = 3 };
	struct tdm__backend *b = open_sim(1);
	void *s[NS];
	for (int i = 0; i < NS; i++)
		s[i] = new_stream(b, 0);
	struct overlap_probe p = {0};
	cr_assert_eq(ops->capture_begin(b, s[0]), 0);
	cr_assert_eq(ops->host_fn(b, s[0], overlap_check, &p), 0);
	void *g = end_capture(b, s[0]);
	void *x = instantiate(b, g);
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < NS; i++)
			cr_assert_eq(ops->graph_launch(b, x, s[i]), 0);
	for (int i = 0; i < NS; i++)
		cr_assert_eq(wait_stream(b, s[i]), 0);
	cr_assert_eq(atomic_load(&p.calls), NS * ROUNDS);
	cr_assert_eq(atomic_load(&p.overlaps), 0, "replays on two streams ran at once");
	ops->graph_exec_free(b, x);
	ops->graph_free(b, g);
	for (int i = 0; i < NS; i++)
		ops->stream_destroy(b, s[i]);
	ops->close(b);
}

Test(sim_backend, a_graph_freed_with_replays_in_flight_lets_them_finish,
     .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s0 = new_stream(b, 0), *s1 = new_stream(b, 0);
	uint64_t *src = host_zeroed(b, 64), *dst = host_zeroed(b, 64);
	src[0] = 5;
	cr_assert_eq(ops->capture_begin(b, s0), 0);
	cr_assert_eq(ops->launch_spin(b, s0, SPIN_NS / 4), 0);
	cr_assert_eq(ops->memcpy_async(b, s0, dst, src, 8, TDM_COPY_D2D), 0);
	void *g = end_capture(b, s0);
	void *x = instantiate(b, g);
	cr_assert_eq(ops->graph_launch(b, x, s0), 0);
	cr_assert_eq(ops->graph_launch(b, x, s1), 0);
	cr_assert_eq(ops->graph_launch(b, x, s0), 0);
	ops->graph_exec_free(b, x); /* does not wait */
	ops->graph_free(b, g);
	cr_assert_eq(wait_stream(b, s0), 0);
	cr_assert_eq(wait_stream(b, s1), 0);
	cr_assert_eq(dst[0], 5);
	ops->host_free(b, src);
	ops->host_free(b, dst);
	ops->stream_destroy(b, s0);
	ops->stream_destroy(b, s1);
	ops->close(b);
}

Test(sim_backend, a_capture_left_open_is_freed_with_its_streams, .timeout = TDM_TEST_TIMEOUT(20))
{
	struct tdm__backend *b = open_sim(1);
	void *s0 = new_stream(b, 0), *s1 = new_stream(b, 0), *e = new_event(b, 0);
	cr_assert_eq(ops->capture_begin(b, s0), 0);
	cr_assert_eq(ops->event_record(b, e, s0), 0);
	cr_assert_eq(ops->stream_wait_event(b, s1, e), 0);
	cr_assert_eq(ops->launch_spin(b, s1, 0), 0);
	ops->stream_destroy(b, s0); /* the root: the capture ends, and s1 is free again */
	cr_assert_eq(ops->stream_query(b, s1), 0);
	cr_assert_eq(ops->capture_begin(b, s1), 0);
	ops->event_destroy(b, e);
	ops->stream_destroy(b, s1);
	ops->close(b);
}
