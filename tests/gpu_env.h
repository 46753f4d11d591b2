// SPDX-License-Identifier: MIT
/*
 * What the GPU layer's tests share: an executor and a GPU layer opened and closed together, a
 * resumable task run to its end from the test's thread, and the tasks more than one file drives
 * (a copy's round trip, a deadline, a fault, a run of awaits whose counts are taken before each).
 * Each tests/test_*.c is a program of its own that includes this once; the functions are static
 * inline so that a program need not use them all. As in common.h, the helpers that assert run on
 * the test's thread only; the tasks record what they saw (SEE) for the test thread to assert.
 */
#ifndef TDM_TESTS_GPU_ENV_H
#define TDM_TESTS_GPU_ENV_H

#include "common.h"

#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>

#include "tandem.h"
#include "tandem_gpu.h"

struct env {
	tdm_executor *ex;
	tdm_gpu *gpu;
};

/* Starts an executor of `workers` and a GPU layer with config g; false when g's backend has no
 * device. */
static inline bool env_open_cfg(struct env *e, unsigned workers, const tdm_gpu_config *g)
{
	e->ex = tdm_test_create(workers);
	int rc = tdm_gpu_create(&e->gpu, e->ex, g);
	if (rc == -ENODEV || rc == -ENOTSUP) {
		tdm_test_destroy(e->ex);
		return false;
	}
	cr_assert_eq(rc, 0, "tdm_gpu_create: %s", tdm_strerror(rc));
	return true;
}

/* Starts an executor and a GPU layer on the backend; false when that backend has no device. */
static inline bool env_open(struct env *e, tdm_backend backend, tdm_completion completion,
                            unsigned workers)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = backend;
	g.completion = completion;
	return env_open_cfg(e, workers, &g);
}

/* The simulator with two devices (device 1 for the checks that need a second one). */
static inline void env_open_sim2(struct env *e, unsigned workers)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.sim_devices = 2;
	cr_assert(env_open_cfg(e, workers, &g));
}

static inline void env_close(struct env *e)
{
	tdm_test_destroy(e->ex);
	cr_assert_eq(tdm_gpu_destroy(e->gpu), 0);
}

/* Spawns fn(arg) as a resumable task and waits for it from this (outside) thread. */
static inline int run_one(struct env *e, tdm_resume_fn fn, void *arg)
{
	tdm_group g;
	tdm_group_init(&g, e->ex);
	int rc = tdm_spawn(e->ex, fn, arg, &g);
	cr_assert_eq(rc, 0);
	return tdm_group_wait(&g);
}

/* What a task saw (SEE, common.h). */
struct seen {
	int rc;
	int line;
};

/* In a task whose state c has gpu, s and sn: leases a stream of device 0 into c->s, or records
 * why not and ends the task (nothing else of it can run without the stream). */
#define LEASE_OR_END(c, flags)                                                                     \
	do {                                                                                       \
		SEE(&(c)->sn, tdm_stream_lease((c)->gpu, 0, (flags), &(c)->s));                    \
		if ((c)->sn.rc != 0)                                                               \
			return 0;                                                                  \
	} while (0)

#define LEN 4096

struct copy_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *dev;
	int results[4];
	int steps;
	struct seen sn;
};

/* Copies in, doubles through a round trip, copies out; each step awaited. */
static inline int copy_task(tdm_task *t, void *arg)
{
	struct copy_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	SEE(&c->sn, tdm_memcpy_async(c->s, c->dev, c->host, LEN * sizeof(int), TDM_COPY_H2D));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->results[c->steps++] = tdm_task_result(t);
	memset(c->host, 0, LEN * sizeof(int));
	SEE(&c->sn, tdm_memcpy_async(c->s, c->host, c->dev, LEN * sizeof(int), TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->results[c->steps++] = tdm_task_result(t);
	tdm_stream_release(c->s);
	TDM_END(t);
}

static inline void await_stream_sees_work_done(struct env *e)
{
	struct copy_state c = {.gpu = e->gpu};
	cr_assert_eq(tdm_host_alloc(e->gpu, LEN * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(e->gpu, 0, LEN * sizeof(int), (void **)&c.dev), 0);
	for (int i = 0; i < LEN; i++)
		c.host[i] = i * 7;
	cr_assert_eq(run_one(e, copy_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.steps, 2, "the task ran to its end, past both awaits");
	cr_assert_eq(c.results[0], 0);
	cr_assert_eq(c.results[1], 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[i], i * 7, "data at %d came back", i);
	tdm_device_free(e->gpu, 0, c.dev);
	tdm_host_free(e->gpu, c.host);
}

struct roundtrip {
	tdm_gpu *gpu;
	int device;
	tdm_stream *s;
	int *host, *dev;
	int result;
	struct seen sn;
};

/* Host to device and back on a shared lease of c->device, one await for both. */
static inline int roundtrip_task(tdm_task *t, void *arg)
{
	struct roundtrip *c = arg;
	TDM_BEGIN(t);
	SEE(&c->sn, tdm_stream_lease(c->gpu, c->device, 0, &c->s));
	if (c->sn.rc != 0)
		return 0;
	SEE(&c->sn, tdm_memcpy_async(c->s, c->dev, c->host, LEN * sizeof(int), TDM_COPY_H2D));
	SEE(&c->sn, tdm_memcpy_async(c->s, c->host + LEN, c->dev, LEN * sizeof(int), TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

/* Memory of `device` still goes through a stream and back, and the executor still runs tasks. */
static inline void assert_device_usable(tdm_executor *ex, tdm_gpu *gpu, int device)
{
	struct roundtrip c = {.gpu = gpu, .device = device, .result = 1};
	cr_assert_eq(tdm_host_alloc(gpu, 2 * LEN * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(gpu, device, LEN * sizeof(int), (void **)&c.dev), 0);
	for (int i = 0; i < LEN; i++) {
		c.host[i] = i * 3 + device;
		c.host[LEN + i] = -1;
	}
	tdm_test_run_one(ex, roundtrip_task, &c);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], i * 3 + device, "int %d came back from device %d", i,
		             device);
	cr_assert_eq(tdm_device_free(gpu, device, c.dev), 0);
	cr_assert_eq(tdm_host_free(gpu, c.host), 0);
	tdm_test_assert_usable(ex);
}

/* After a test's bad calls: the layer still moves data through a stream, and the executor
 * still runs tasks; then both are closed. */
static inline void close_usable(struct env *e)
{
	await_stream_sees_work_done(e);
	tdm_test_assert_usable(e->ex);
	env_close(e);
}

struct deadline_state {
	tdm_gpu *gpu;
	uint64_t deadline, resumed;
	int rc, past;
};

static inline int deadline_task(tdm_task *t, void *arg)
{
	struct deadline_state *c = arg;
	TDM_BEGIN(t);
	c->past = tdm_await_deadline(t, c->gpu, 1); /* long past: continues at once */
	c->deadline = tdm_now_ns() + 5000000;
	TDM_AWAIT(t, tdm_await_deadline(t, c->gpu, c->deadline));
	c->resumed = tdm_now_ns();
	c->rc = tdm_task_result(t);
	TDM_END(t);
}

static inline void await_deadline(struct env *e)
{
	struct deadline_state c = {.gpu = e->gpu};
	cr_assert_eq(run_one(e, deadline_task, &c), 0);
	cr_assert_eq(c.past, 0);
	cr_assert_eq(c.rc, 0);
	cr_assert_geq(c.resumed, c.deadline, "not resumed before its deadline");
}

struct fault_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int inject; /* 0 none, else a tdm_sim_fault, or -1 for a trapping kernel */
	int rc, after;
	struct seen sn; /* the calls up to the first await */
};

static inline int fault_task(tdm_task *t, void *arg)
{
	struct fault_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	if (c->inject > 0)
		SEE(&c->sn, tdm_sim_inject(c->s, (tdm_sim_fault)c->inject));
	if (c->inject < 0)
		SEE(&c->sn, tdm_launch_fault(c->s));
	else
		SEE(&c->sn, tdm_launch_spin(c->s, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->rc = tdm_task_result(t);
	/* The stream goes on after an operation's error, not after a device's (a dead device
	 * refuses this launch: `after` says which, so its result is not recorded). */
	(void)tdm_launch_spin(c->s, 1000);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->after = tdm_task_result(t);
	tdm_stream_release(c->s);
	TDM_END(t);
}

static inline void open_two(struct env *e, int placement)
{
	e->ex = tdm_test_create(2);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.sim_devices = 2;
	g.placement = placement;
	cr_assert_eq(tdm_gpu_create(&e->gpu, e->ex, &g), 0);
	cr_assert_eq(tdm_gpu_device_count(e->gpu), 2);
}

/* Kills device `dev` of e with a sticky fault and waits until it refuses work. */
static inline void kill_device(struct env *e, int dev)
{
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e->gpu, dev, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_launch_fault(s), 0);
	while (tdm_launch_spin(s, 0) == 0)
		sched_yield();
	tdm_stream_release(s);
}

struct adapt_state {
	tdm_stream *s;
	uint32_t ns[16]; /* kernel length of each step */
	int nsteps, step;
	tdm_sim_gate *gate; /* NULL, or step gate_step closes it instead of its kernel */
	int gate_step;
	int rc;
	tdm_gpu *gpu;
	tdm_gpu_stats before[16]; /* the counts before each step's await */
	tdm_gpu_stats last;
	struct seen sn;
};

/* An executor of `workers` and a sim GPU layer with adaptive completion, whose awaits count as
 * stalled past stall_us. */
static inline void env_open_adaptive(struct env *e, unsigned workers, unsigned stall_us)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.completion = TDM_COMPLETION_ADAPTIVE;
	g.stall_us = stall_us;
	cr_assert(env_open_cfg(e, workers, &g));
}

/* One kernel and one await per step, with the counts taken before each await. */
static inline int adapt_task(tdm_task *t, void *arg)
{
	struct adapt_state *a = arg;
	TDM_BEGIN(t);
	for (a->step = 0; a->step < a->nsteps; a->step++) {
		if (a->gate != NULL && a->step == a->gate_step)
			SEE(&a->sn, tdm_sim_gate_close(a->s, a->gate));
		else
			SEE(&a->sn, tdm_launch_spin(a->s, a->ns[a->step]));
		SEE(&a->sn, tdm_gpu_stats_get(a->gpu, &a->before[a->step]));
		TDM_AWAIT(t, tdm_await_stream(t, a->s));
		if (tdm_task_result(t) != 0)
			a->rc = tdm_task_result(t);
	}
	TDM_END(t);
}

#endif /* TDM_TESTS_GPU_ENV_H */
