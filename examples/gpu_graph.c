// SPDX-License-Identifier: MIT
/*
 * A step of three GPU operations (copy in, scale, copy out) run every iteration by one async task
 * through tandem's graph cache: the first two iterations run the step directly, the third captures
 * it into a CUDA graph, and every later one replays that graph as one unit, which the task awaits
 * without holding its worker. Runs on the real GPU where there is one and on the simulator
 * otherwise (saying so). Checks every iteration's result.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"
#include "tandem_graph.h"
#include "example_gpu.h"

#define N (1u << 16)
#define ITERATIONS 6
#define STEP_KEY 1 /* names the step and its parameters (buffers, factor) in the cache */

/* Everything that lives across an await is here, not in locals. */
struct job {
	tdm_gpu *gpu;
	tdm_stream *s;
	float *in, *out; /* pinned host buffers */
	float *dx, *dy;  /* device buffers */
	int it, how[ITERATIONS], err;
};

/* The step: what one iteration enqueues. Called directly, or recorded into the graph. */
static int step(tdm_stream *s, void *arg)
{
	struct job *j = arg;
	int rc = tdm_memcpy_async(s, j->dx, j->in, N * sizeof(float), TDM_COPY_H2D);
	if (rc == 0)
		rc = tdm_launch_scale(s, j->dy, j->dx, 2.0f, N);
	if (rc == 0)
		rc = tdm_memcpy_async(s, j->out, j->dy, N * sizeof(float), TDM_COPY_D2H);
	return rc;
}

static int job_run(tdm_task *t, void *arg)
{
	struct job *j = arg;
	TDM_BEGIN(t);
	/* Exclusive: a capture records everything enqueued on its stream. */
	if ((j->err = tdm_stream_lease(j->gpu, 0, TDM_STREAM_EXCLUSIVE, &j->s)) != 0)
		return 0;
	for (j->it = 0; j->it < ITERATIONS && j->err == 0; j->it++) {
		for (unsigned i = 0; i < N; i++)
			j->in[i] = (float)(i + (unsigned)j->it); /* new data, same buffers */
		/* In the state, not a local: the await's resume would jump past its declaration. */
		j->how[j->it] = tdm_graph_run(j->s, STEP_KEY, step, j, 0);
		if (j->how[j->it] < 0) {
			j->err = j->how[j->it];
			break;
		}
		TDM_AWAIT(t, tdm_await_stream(t, j->s)); /* the worker runs other tasks meanwhile */
		if ((j->err = tdm_task_result(t)) != 0)
			break;
		for (unsigned i = 0; i < N; i++)
			if (j->out[i] != 2.0f * (float)(i + (unsigned)j->it))
				j->err = -EIO;
	}
	tdm_stream_release(j->s);
	TDM_END(t);
}

static const char *how_name(int how)
{
	switch (how) {
	case TDM_GRAPH_DIRECT:
		return "ran directly";
	case TDM_GRAPH_INSTANTIATED:
		return "captured into a graph";
	case TDM_GRAPH_UPDATED:
		return "graph updated";
	case TDM_GRAPH_REPLAYED:
		return "graph replayed";
	}
	return "?";
}

int main(void)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (example_open(&ex, &gpu, NULL) != 0)
		return 1;

	struct job j = {.gpu = gpu};
	if (tdm_pinned_alloc(gpu, N * sizeof(float), (void **)&j.in) != 0 ||
	    tdm_pinned_alloc(gpu, N * sizeof(float), (void **)&j.out) != 0 ||
	    tdm_device_alloc(gpu, 0, N * sizeof(float), (void **)&j.dx) != 0 ||
	    tdm_device_alloc(gpu, 0, N * sizeof(float), (void **)&j.dy) != 0) {
		fprintf(stderr, "out of memory\n");
		tdm_pinned_free(gpu, j.in);
		tdm_pinned_free(gpu, j.out);
		tdm_device_free(gpu, 0, j.dx);
		example_close(ex, gpu);
		return 1;
	}

	tdm_group g;
	tdm_group_init(&g, ex);
	int rc = tdm_spawn(ex, job_run, &j, &g);
	if (rc == 0)
		rc = tdm_group_wait(&g);
	for (int i = 0; i < ITERATIONS && j.how[i] != 0; i++)
		printf("iteration %d: %s\n", i + 1, how_name(j.how[i]));
	if (j.err != 0)
		printf("failed: %s\n", tdm_strerror(j.err));

	tdm_graph_stats st;
	tdm_graph_stats_get(gpu, &st);
	bool ok = rc == 0 && j.err == 0 && st.replayed == ITERATIONS - 3;
	tdm_device_free(gpu, 0, j.dx);
	tdm_device_free(gpu, 0, j.dy);
	tdm_pinned_free(gpu, j.in);
	tdm_pinned_free(gpu, j.out);
	example_close(ex, gpu);
	printf("copy in, scale, copy out, %d times through the graph cache: %s\n", ITERATIONS,
	       ok ? "correct" : "WRONG");
	return ok ? 0 : 1;
}
