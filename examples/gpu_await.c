// SPDX-License-Identifier: MIT
/*
 * One async task that copies a buffer to the GPU, scales it there and copies it back, awaiting
 * each step without holding its worker. Runs on the real GPU where there is one and on the
 * simulator otherwise (saying so). Checks the result.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"
#include "example_gpu.h"

#define N (1u << 20)

/* Everything that lives across an await is here, not in locals. */
struct job {
	tdm_gpu *gpu;
	tdm_stream *s;
	float *host; /* pinned */
	float *dx, *dy;
	int step_failed;
};

static int job_run(tdm_task *t, void *arg)
{
	struct job *j = arg;
	TDM_BEGIN(t);
	if (tdm_stream_lease(j->gpu, 0, TDM_STREAM_SHARED, &j->s) != 0)
		return -ENODEV;

	tdm_memcpy_async(j->s, j->dx, j->host, N * sizeof(float), TDM_COPY_H2D);
	TDM_AWAIT(t, tdm_await_stream(t, j->s)); /* the worker runs other tasks meanwhile */
	j->step_failed |= tdm_task_result(t) != 0;

	tdm_launch_scale(j->s, j->dy, j->dx, 2.0f, N);
	TDM_AWAIT(t, tdm_await_stream(t, j->s));
	j->step_failed |= tdm_task_result(t) != 0;

	tdm_memcpy_async(j->s, j->host, j->dy, N * sizeof(float), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, j->s));
	j->step_failed |= tdm_task_result(t) != 0;

	tdm_stream_release(j->s);
	TDM_END(t);
}

int main(void)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (example_open(&ex, &gpu, NULL) != 0)
		return 1;

	struct job j = {.gpu = gpu};
	if (tdm_host_alloc(gpu, N * sizeof(float), (void **)&j.host) != 0 ||
	    tdm_device_alloc(gpu, 0, N * sizeof(float), (void **)&j.dx) != 0 ||
	    tdm_device_alloc(gpu, 0, N * sizeof(float), (void **)&j.dy) != 0) {
		fprintf(stderr, "out of memory\n");
		example_close(ex, gpu);
		return 1;
	}
	for (unsigned i = 0; i < N; i++)
		j.host[i] = (float)i;

	tdm_group g;
	tdm_group_init(&g, ex);
	int rc = tdm_spawn(ex, job_run, &j, &g);
	if (rc == 0)
		rc = tdm_group_wait(&g);

	unsigned bad = 0;
	for (unsigned i = 0; i < N; i++)
		bad += j.host[i] != 2.0f * (float)i;
	printf("copy in, scale, copy out of %u floats: %s\n", N,
	       (rc == 0 && !j.step_failed && bad == 0) ? "correct" : "WRONG");

	tdm_device_free(gpu, 0, j.dx);
	tdm_device_free(gpu, 0, j.dy);
	tdm_host_free(gpu, j.host);
	example_close(ex, gpu);
	return (rc == 0 && !j.step_failed && bad == 0) ? 0 : 1;
}
