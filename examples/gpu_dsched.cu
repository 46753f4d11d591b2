// SPDX-License-Identifier: MIT
/*
 * Tiny GPU steps without a launch each: a device scheduler (tandem_dsched.h) runs two handlers
 * defined in this file, and tasks submit steps to it one at a time, each step decided by the
 * task after the last one came back, and await them without holding their worker. Each task
 * owns a run of numbers in pinned memory and applies, round after round, "multiply by 3" or
 * "add the round" to it on the device; the host then checks every number against the same
 * sequence done on the CPU. Runs on the GPU where there is one and on the simulator otherwise
 * (saying so): there the same handlers run as host functions. Prints "correct".
 *
 * Built with nvcc (the handlers are device code); a C program keeps its tasks in a .c file and
 * declares the table: `extern const tdm_dsched_handlers steps;`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem_dsched.cuh"
#include "example_gpu.h"

#define TASKS 16
#define RUN 32 /* numbers per task: one step touches all of a task's run */
#define ROUNDS 200

/* A step's arguments travel inside the item (at most TDM_DSCHED_ARGS_MAX bytes): pointers to
 * memory the device reaches (pinned here), and scalars. */
struct step_args {
	uint32_t *x;
	uint32_t n;
	uint32_t k;
};

TDM_DSCHED_HANDLER(multiply)
{
	const struct step_args *a = (const struct step_args *)args;
	(void)size;
	for (uint32_t i = 0; i < a->n; i++)
		a->x[i] *= a->k;
}

TDM_DSCHED_HANDLER(add)
{
	const struct step_args *a = (const struct step_args *)args;
	(void)size;
	for (uint32_t i = 0; i < a->n; i++)
		a->x[i] += a->k;
}

/* Index 0: multiply, 1: add. */
TDM_DSCHED_TABLE(steps, multiply, add);
enum { STEP_MULTIPLY, STEP_ADD };

/* What decides the next step: here the run's first number, as the device left it. */
static unsigned next_step(uint32_t x0, int round)
{
	return (x0 + (uint32_t)round) % 3 == 0 ? STEP_ADD : STEP_MULTIPLY;
}

/* Everything that lives across an await is here, not in locals. */
struct job {
	tdm_dsched *ds;
	uint32_t *x;
	int iter, err;
	uint64_t ticket;
	uint64_t full; /* submits that found the queue full */
};

static int job_run(tdm_task *t, void *arg)
{
	struct job *j = (struct job *)arg;
	TDM_BEGIN(t);
	for (j->iter = 0; j->iter < ROUNDS; j->iter++) {
		{ /* a block of its own: C++ allows no jump (the await's resume) past a declaration
		   */
			struct step_args a = {j->x, RUN, 3};
			unsigned h = next_step(j->x[0], j->iter);
			if (h == STEP_ADD)
				a.k = (uint32_t)j->iter;
			int rc = tdm_dsched_submit(j->ds, h, &a, sizeof(a), &j->ticket);
			if (rc == -EAGAIN) { /* the queue is full: this round again */
				j->full++;
				j->iter--;
				continue;
			}
			if (rc != 0) {
				j->err = rc;
				break;
			}
		}
		TDM_AWAIT(t, tdm_await_dsched(t, j->ds, j->ticket)); /* the worker runs others */
		if ((j->err = tdm_task_result(t)) != 0)              /* -EIO: the device failed */
			break;
	}
	TDM_END(t);
}

int main(void)
{
	/* A scheduler's kernel never ends: a module CUDA loaded lazily while it runs would wait
	 * for it. Before CUDA starts. */
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (example_open(&ex, &gpu, NULL) != 0)
		return 1;
	uint32_t *x = NULL;
	int rc = tdm_host_alloc(gpu, TASKS * RUN * sizeof(uint32_t), (void **)&x);
	tdm_dsched_config cfg;
	tdm_dsched_config_init(&cfg);
	cfg.handlers = &steps; /* blocks, warps, capacity: the device's defaults */
	tdm_dsched *ds = NULL;
	if (rc == 0)
		rc = tdm_dsched_create(gpu, 0, &cfg, &ds);
	if (rc != 0) {
		fprintf(stderr, "tdm_host_alloc / tdm_dsched_create: %s\n", tdm_strerror(rc));
		example_close(ex, gpu);
		return 1;
	}
	for (uint32_t i = 0; i < TASKS * RUN; i++)
		x[i] = i;

	struct job jobs[TASKS];
	tdm_group g;
	tdm_group_init(&g, ex);
	for (int k = 0; k < TASKS; k++) {
		jobs[k] = (struct job){ds, x + k * RUN, 0, 0, 0, 0};
		if ((rc = tdm_spawn(ex, job_run, &jobs[k], &g)) != 0)
			fprintf(stderr, "tdm_spawn: %s\n", tdm_strerror(rc));
	}
	tdm_group_wait(&g);

	tdm_dsched_stats st;
	tdm_dsched_destroy(ds, TDM_DSCHED_DRAIN, &st);
	printf("%llu steps, %llu awaits suspended (%llu seen by their own worker), %u blocks x %u "
	       "warps\n",
	       (unsigned long long)st.submitted, (unsigned long long)st.awaits,
	       (unsigned long long)st.direct, st.blocks, st.warps);

	/* The same rounds on the CPU. */
	int bad = 0;
	for (int k = 0; k < TASKS; k++) {
		if (jobs[k].err != 0) {
			fprintf(stderr, "task %d: %s\n", k, tdm_strerror(jobs[k].err));
			bad = 1;
		}
		uint32_t want[RUN];
		for (uint32_t i = 0; i < RUN; i++)
			want[i] = (uint32_t)(k * RUN) + i;
		for (int r = 0; r < ROUNDS; r++) {
			unsigned h = next_step(want[0], r);
			for (uint32_t i = 0; i < RUN; i++)
				want[i] = h == STEP_ADD ? want[i] + (uint32_t)r : want[i] * 3u;
		}
		for (uint32_t i = 0; i < RUN; i++)
			if (x[k * RUN + i] != want[i] && !bad) {
				fprintf(stderr, "task %d, number %u: %u, expected %u\n", k, i,
				        x[k * RUN + i], want[i]);
				bad = 1;
			}
	}
	tdm_host_free(gpu, x);
	example_close(ex, gpu);
	printf("%s\n", bad ? "WRONG" : "correct");
	return bad;
}
