// SPDX-License-Identifier: MIT
/*
 * A GPU pipeline: batches of floats go to the GPU, are doubled there and come back. While the
 * GPU computes batch N, the CPU prepares batch N+1 and batch N-1 is copied back:
 *
 *     slot A:  prepare N+1 (CPU), copy it in
 *     slot B:  compute N (GPU)
 *     slot C:  copy out N-1, consume it (CPU)
 *
 * tdm_pipeline_run does the scheduling. Each of the `in_flight` slots has its own pinned and
 * device buffers; it prepares a batch, enqueues copy in, compute and copy out back to back on
 * the batch's stream, awaits them once (its worker runs other slots meanwhile), consumes, and
 * starts over with the same buffers. The batches take turns on two streams (batch i on stream
 * i % 2), so that one batch's copies overlap its neighbours' compute on the GPU.
 *
 * This program fills each batch with a sequence it can predict, checks every element that comes
 * back, checks that batches arrive in order, and prints "correct" or "WRONG" (exit status 0 only
 * when correct). It runs on the real GPU where there is one and on tandem's simulator otherwise.
 */
#include <stdint.h>
#include <stdio.h>

#include "tandem.h"
#include "example_gpu.h"

#define BATCHES 48
#define FLOATS (1u << 20) /* per batch: 4 MiB in, 4 MiB out */
#define FACTOR 2.0f

/* What the callbacks share. prepare and (ordered) consume run one call at a time, so plain
 * fields are enough; the callbacks run on the executor's workers, and each slot's first batch
 * on the thread that called tdm_pipeline_run. */
struct job {
	uint64_t next_expected; /* consume: the batch index that must come next */
	uint64_t wrong;         /* elements or batches that were not what they should be */
	uint64_t checksum;      /* sum of every element that came back */
};

/* The input of batch i: exact small integers, so that FACTOR * x is exact in float. */
static float input(uint64_t i, uint32_t k)
{
	return (float)((i * 7919u + k) % 65536u);
}

/* CPU, batch N+1: fill the slot's pinned input buffer. */
static int prepare(tdm_batch *b, void *user)
{
	(void)user;
	if (b->index == BATCHES)
		return TDM_PIPELINE_END;
	float *x = b->host_in;
	for (uint32_t k = 0; k < FLOATS; k++)
		x[k] = input(b->index, k);
	return 0;
}

/* GPU, batch N: enqueue the kernel on the batch's stream; the pipeline has already enqueued the
 * copy in before it and will enqueue the copy out after it. */
static int compute(tdm_batch *b, void *user)
{
	(void)user;
	return tdm_launch_scale(b->stream, b->dev_out, b->dev_in, FACTOR, FLOATS);
}

/* CPU, batch N-1 (once copied back): check every element. */
static int consume(tdm_batch *b, void *user)
{
	struct job *j = user;
	const float *y = b->host_out;
	if (b->index != j->next_expected)
		j->wrong++; /* ordered mode: never */
	j->next_expected = b->index + 1;
	for (uint32_t k = 0; k < FLOATS; k++) {
		if (y[k] != FACTOR * input(b->index, k))
			j->wrong++;
		j->checksum += (uint64_t)y[k];
	}
	return 0;
}

int main(void)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (example_open(&ex, &gpu, NULL) != 0)
		return 1;

	struct job j = {0};
	tdm_pipeline_config cfg = {
	    .device = 0,
	    .in_flight = 3, /* prepare, GPU, consume: one batch each, at once */
	    .in_bytes = FLOATS * sizeof(float),
	    .out_bytes = FLOATS * sizeof(float),
	    .ordered =
	        1, /* consume sees batches 0, 1, 2, ... whatever order the GPU ends them in */
	    .prepare = prepare,
	    .compute = compute,
	    .consume = consume,
	    .user = &j,
	};
	tdm_pipeline_stats st;
	/* What the device did meanwhile, from its own clock: how busy, how fast each way. */
	static tdm_gpu_metrics m; /* 36 KiB: not on the stack */
	int mrc = tdm_gpu_metrics_start(gpu);
	int rc = tdm_pipeline_run(gpu, &cfg, &st); /* blocks this thread, which is not a worker */
	if (mrc == 0 && tdm_gpu_metrics_stop(gpu) == 0 && tdm_gpu_metrics_get(gpu, &m) == 0)
		tdm_metrics_print(&m, stdout);

	/* Each input value v in 0..65535 appears once per 65536 consecutive k, and FLOATS is a
	 * multiple of that: every batch sums to FLOATS / 65536 * FACTOR * (0 + ... + 65535). */
	uint64_t per_batch = (uint64_t)(FLOATS / 65536u) * 65535u * 65536u; /* FACTOR * sum */
	int correct = rc == 0 && st.batches == BATCHES && st.failed == 0 && j.wrong == 0 &&
	              j.next_expected == BATCHES && j.checksum == per_batch * BATCHES;
	double gb = (double)(st.bytes_in + st.bytes_out) / 1e9;
	printf("%llu batches of %u floats in %.3f s: %.2f GB/s through the GPU, checksum %llu\n",
	       (unsigned long long)st.batches, FLOATS, st.seconds,
	       st.seconds > 0 ? gb / st.seconds : 0.0, (unsigned long long)j.checksum);
	if (rc != 0)
		printf("tdm_pipeline_run: %s (%llu batches failed)\n", tdm_strerror(rc),
		       (unsigned long long)st.failed);
	printf("%s\n", correct ? "correct" : "WRONG");

	example_close(ex, gpu);
	return correct ? 0 : 1;
}
