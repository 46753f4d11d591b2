// SPDX-License-Identifier: MIT
/*
 * tandem-bench gpu-idle: the CPU an executor with a GPU layer (workers and poller) burns while
 * nothing is outstanding, after a burst of GPU awaits, as % of one core over a 2 s window.
 *   tandem-bench gpu-idle [--backend cuda|sim] [--json]
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_sim.h" /* the kernels of tests and benchmarks (tandem_testing) */

struct burst {
	tdm_gpu *gpu;
	tdm_stream *s;
	int i;
};

/* Wakes every thread once (poller included) so the window sees the idle state after work. */
static int burst_task(tdm_task *t, void *arg)
{
	struct burst *b = arg;
	TDM_BEGIN(t);
	if (tdm_stream_lease(b->gpu, 0, 0, &b->s) != 0)
		return -ENODEV;
	for (b->i = 0; b->i < 100; b->i++) {
		tdm_launch_spin(b->s, 1000);
		TDM_AWAIT(t, tdm_await_stream(t, b->s));
	}
	tdm_stream_release(b->s);
	TDM_END(t);
}

static double now_ms(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int bench_gpu_idle(int argc, char **argv)
{
	int json;
	tdm_executor *ex;
	tdm_gpu *gpu;
	int status = bench_open_gpu(argc, argv, "gpu-idle", &json, &ex, &gpu);
	if (status != 0)
		return status;
	struct burst b = {.gpu = gpu};
	tdm_group g;
	tdm_group_init(&g, ex);
	tdm_spawn(ex, burst_task, &b, &g);
	tdm_group_wait(&g);
	struct timespec pause = {0, 100000000};
	nanosleep(&pause, NULL); /* past the poller's spin window and the workers' */
	double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
	struct timespec window = {2, 0};
	nanosleep(&window, NULL);
	double c1 = now_ms(CLOCK_PROCESS_CPUTIME_ID), w1 = now_ms(CLOCK_MONOTONIC);
	double pct = (c1 - c0) / (w1 - w0) * 100.0;
	int workers = tdm_executor_workers(ex);
	if (json)
		printf("{\"bench\": \"gpu-idle\", \"impl\": \"tandem\", \"backend\": \"%s\", "
		       "\"workers\": %d, \"cpu_ms\": %.3f, \"cpu_percent\": %.4f}\n",
		       tdm_gpu_backend_name(gpu), workers, c1 - c0, pct);
	else
		printf("gpu-idle (%s, %d workers + poller): %.3f ms CPU in %.0f ms = %.4f%% of one "
		       "core\n",
		       tdm_gpu_backend_name(gpu), workers, c1 - c0, w1 - w0, pct);
	tdm_gpu_destroy(gpu);
	tdm_executor_destroy(ex);
	return 0;
}
