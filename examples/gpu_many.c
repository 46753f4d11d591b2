// SPDX-License-Identifier: MIT
/*
 * Ten thousand concurrent tasks, each with its own chain of GPU work: a kernel, an await, a
 * second kernel on the first one's output, an await. All are in flight at once on a handful of
 * pooled streams; no thread blocks on any of them. Checks every task's result. Runs on the
 * simulator where there is no GPU.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "example_gpu.h"

#define TASKS 10000
#define SLICE 64 /* floats per task */
#define MAX_DEVICES 16

static atomic_uint finished, failed;

struct chain {
	tdm_gpu *gpu;
	tdm_stream *s;
	float *x, *y; /* this task's slices of its device's buffers */
	float host[SLICE];
	int device;
};

/* x from the host, y = 2x; then y = 3y, and y back to the host: 6x. */
static int chain_run(tdm_task *t, void *arg)
{
	struct chain *c = arg;
	TDM_BEGIN(t);
	if (tdm_stream_lease(c->gpu, c->device, TDM_STREAM_SHARED, &c->s) != 0) {
		atomic_fetch_add(&failed, 1);
		return -ENODEV;
	}
	if (tdm_memcpy_async(c->s, c->x, c->host, sizeof(c->host), TDM_COPY_H2D) != 0 ||
	    tdm_launch_scale(c->s, c->y, c->x, 2.0f, SLICE) != 0)
		goto failed;
	TDM_AWAIT(t, tdm_await_stream(t, c->s)); /* the worker runs other chains meanwhile */
	if (tdm_task_result(t) != 0 || tdm_launch_scale(c->s, c->y, c->y, 3.0f, SLICE) != 0 ||
	    tdm_memcpy_async(c->s, c->host, c->y, sizeof(c->host), TDM_COPY_D2H) != 0)
		goto failed;
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	if (tdm_task_result(t) != 0)
		goto failed;
	for (int k = 0; k < SLICE; k++)
		if (c->host[k] != 6.0f * (float)k)
			goto failed;
	tdm_stream_release(c->s);
	atomic_fetch_add(&finished, 1);
	return 0;
failed:
	tdm_stream_release(c->s);
	atomic_fetch_add(&failed, 1);
	TDM_END(t);
}

int main(void)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (example_open(&ex, &gpu, NULL) != 0)
		return 1;
	int ndev = tdm_gpu_device_count(gpu);
	ndev = ndev < MAX_DEVICES ? ndev : MAX_DEVICES;
	struct chain *chains = calloc(TASKS, sizeof(*chains));
	float *x[MAX_DEVICES] = {0}, *y[MAX_DEVICES] = {0};
	int ok = chains != NULL;
	for (int d = 0; ok && d < ndev; d++)
		ok = tdm_device_alloc(gpu, d, TASKS * SLICE * sizeof(float), (void **)&x[d]) == 0 &&
		     tdm_device_alloc(gpu, d, TASKS * SLICE * sizeof(float), (void **)&y[d]) == 0;
	uint64_t t0 = tdm_now_ns();
	tdm_group g;
	tdm_group_init(&g, ex);
	for (unsigned i = 0; ok && i < TASKS; i++) {
		int d = (int)(i % (unsigned)ndev);
		chains[i] = (struct chain){.gpu = gpu,
		                           .device = d,
		                           .x = x[d] + (size_t)i * SLICE,
		                           .y = y[d] + (size_t)i * SLICE};
		for (int k = 0; k < SLICE; k++)
			chains[i].host[k] = (float)k;
		if (tdm_spawn(ex, chain_run, &chains[i], &g) != 0)
			atomic_fetch_add(&failed, 1);
	}
	tdm_group_wait(&g);
	double ms = (double)(tdm_now_ns() - t0) / 1e6;
	printf("%u of %d task chains finished with the right result (%u failures) in %.1f ms\n",
	       atomic_load(&finished), TASKS, atomic_load(&failed), ms);
	for (int d = 0; d < ndev; d++) {
		tdm_device_free(gpu, d, x[d]);
		tdm_device_free(gpu, d, y[d]);
	}
	example_close(ex, gpu);
	free(chains);
	return (ok && atomic_load(&finished) == TASKS && atomic_load(&failed) == 0) ? 0 : 1;
}
