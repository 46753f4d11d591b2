// SPDX-License-Identifier: MIT
/*
 * The pipeline of examples/pipeline.c across processes, one per GPU (or MIG instance): rank 0
 * prepares batches of floats and sends them out, the other ranks double them on their GPU and
 * send them back, and rank 0 checks every element. Run it under mpirun, at least 2 ranks:
 *
 *     mpirun -np 3 --bind-to none examples/mpi_bind.sh build/examples/mpi_pipeline
 *
 * (examples/mpi_bind.sh gives each rank the GPU or MIG instance of its local rank; without a
 * GPU every rank runs on tandem's GPU simulator, saying so.)
 *
 * No thread ever blocks in MPI: every transfer is a task that awaits its request.
 *   rank 0      one task per batch: fill it, post the receive of its result, send it
 *               (tdm_mpi_isend, tdm_await_mpi), await the result, check it.
 *   ranks 1..   IN_FLIGHT slots, each a task with its own stream and device buffers, looping:
 *                 receive a batch into the device   tdm_mpi_recv_device (MPI into pinned
 *                                                   memory, copied to the GPU, awaited)
 *                 double it on the GPU              tdm_launch_scale on the slot's stream
 *                 send the result from the device   tdm_mpi_send_device (the kernel and the
 *                                                   copy back awaited, then MPI, awaited)
 *               so that while one slot's batch is on the GPU, another's is on the wire: the
 *               stages of examples/pipeline.c, with MPI where its host prepares and consumes.
 * Batch i goes to rank 1 + i % (ranks - 1) with tag i; it prints "correct" or "WRONG" (exit
 * status 0 only when correct, on every rank).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"
#include "tandem_mpi.h"
#include "example_gpu.h"

#define BATCHES 24
#define FLOATS (1u << 16) /* per batch: 256 KiB each way */
#define FACTOR 2.0f
#define IN_FLIGHT 3 /* slots per GPU rank */

static int rank, ranks;
static tdm_mpi *mpi;

/* The input of batch i: exact small integers, so that FACTOR * x is exact in float. */
static float input(uint64_t i, uint32_t k)
{
	return (float)((i * 7919u + k) % 65536u);
}

/* ---- rank 0: prepare, send, receive, check ---- */

struct batch {
	uint64_t i;
	float *x, *y;
	MPI_Request send, recv;
	uint64_t wrong;
};

static int batch_task(tdm_task *t, void *arg)
{
	struct batch *b = arg;
	int rc;
	TDM_BEGIN(t);
	for (uint32_t k = 0; k < FLOATS; k++)
		b->x[k] = input(b->i, k);
	{ /* a block of its own: the awaits' resumes below may not jump past a declaration */
		int peer = 1 + (int)(b->i % (uint64_t)(ranks - 1)), tag = (int)b->i;
		if ((rc = tdm_mpi_irecv(mpi, b->y, FLOATS, MPI_FLOAT, peer, tag, MPI_COMM_WORLD,
		                        &b->recv)) != 0)
			return rc;
		if ((rc = tdm_mpi_isend(mpi, b->x, FLOATS, MPI_FLOAT, peer, tag, MPI_COMM_WORLD,
		                        &b->send)) != 0)
			return rc; /* (an example: the receive is left to MPI_Finalize) */
	}
	TDM_AWAIT(t, tdm_await_mpi(t, mpi, &b->send, MPI_STATUS_IGNORE));
	if ((rc = tdm_task_result(t)) != 0)
		return rc;
	TDM_AWAIT(t, tdm_await_mpi(t, mpi, &b->recv, MPI_STATUS_IGNORE));
	if ((rc = tdm_task_result(t)) != 0)
		return rc;
	for (uint32_t k = 0; k < FLOATS; k++)
		b->wrong += b->y[k] != FACTOR * input(b->i, k);
	TDM_END(t);
}

static int coordinate(tdm_executor *ex)
{
	static struct batch b[BATCHES];
	tdm_group g;
	tdm_group_init(&g, ex);
	uint64_t start = tdm_now_ns();
	int rc = 0;
	for (uint64_t i = 0; i < BATCHES && rc == 0; i++) {
		b[i] = (struct batch){.i = i,
		                      .x = malloc(FLOATS * sizeof(float)),
		                      .y = malloc(FLOATS * sizeof(float))};
		rc = b[i].x != NULL && b[i].y != NULL ? tdm_spawn(ex, batch_task, &b[i], &g)
		                                      : -ENOMEM;
	}
	int wrc = tdm_group_wait(&g); /* the first error a batch's task returned, or 0 */
	double s = (double)(tdm_now_ns() - start) / 1e9;
	uint64_t wrong = 0;
	for (uint64_t i = 0; i < BATCHES; i++) {
		wrong += b[i].wrong;
		free(b[i].x);
		free(b[i].y);
	}
	if (rc == 0)
		rc = wrc;
	if (rc != 0)
		printf("rank 0: %s\n", tdm_mpi_strerror(rc));
	printf("%d batches of %u floats through %d GPU rank(s) in %.3f s, %llu elements wrong\n",
	       BATCHES, FLOATS, ranks - 1, s, (unsigned long long)wrong);
	int correct = rc == 0 && wrong == 0;
	printf("%s\n", correct ? "correct" : "WRONG");
	return correct ? 0 : 1;
}

/* ---- ranks 1..: receive, compute, send ---- */

struct slot {
	tdm_gpu *gpu;
	int device;
	tdm_stream *s;
	void *dev_in, *dev_out;
	tdm_mpi_device_xfer in, out;
	int err;
	unsigned batches;
};

static atomic_int tickets; /* batches taken by this rank's slots */
static int my_batches;     /* batches this rank gets */

static int slot_task(tdm_task *t, void *arg)
{
	struct slot *sl = arg;
	TDM_BEGIN(t);
	if ((sl->err = tdm_stream_lease(sl->gpu, sl->device, TDM_STREAM_SHARED, &sl->s)) != 0)
		return sl->err;
	while (atomic_fetch_add(&tickets, 1) < my_batches) {
		/* Any batch of rank 0's for this rank: its tag says which. */
		sl->in = (tdm_mpi_device_xfer){.mpi = mpi,
		                               .gpu = sl->gpu,
		                               .stream = sl->s,
		                               .buf = sl->dev_in,
		                               .bytes = FLOATS * sizeof(float),
		                               .peer = 0,
		                               .tag = MPI_ANY_TAG,
		                               .comm = MPI_COMM_WORLD};
		TDM_AWAIT(t, tdm_mpi_recv_device(t, &sl->in));
		if ((sl->err = tdm_task_result(t)) != 0)
			break;
		sl->err = tdm_launch_scale(sl->s, sl->dev_out, sl->dev_in, FACTOR, FLOATS);
		if (sl->err != 0)
			break;
		sl->out = (tdm_mpi_device_xfer){.mpi = mpi,
		                                .gpu = sl->gpu,
		                                .stream = sl->s,
		                                .buf = sl->dev_out,
		                                .bytes = FLOATS * sizeof(float),
		                                .peer = 0,
		                                .tag = sl->in.status.MPI_TAG,
		                                .comm = MPI_COMM_WORLD};
		TDM_AWAIT(t, tdm_mpi_send_device(t, &sl->out));
		if ((sl->err = tdm_task_result(t)) != 0)
			break;
		sl->batches++;
	}
	tdm_stream_release(sl->s);
	return sl->err;
	TDM_END(t);
}

static int compute(tdm_executor *ex, tdm_gpu *gpu, int local_rank)
{
	for (int i = 0; i < BATCHES; i++)
		my_batches += 1 + i % (ranks - 1) == rank;
	int devices = tdm_gpu_device_count(gpu);
	if (devices <= 0) {
		fprintf(stderr, "rank %d: no device\n", rank);
		return 1;
	}
	int device = local_rank % devices; /* one visible (examples/mpi_bind.sh): device 0 */
	static struct slot slots[IN_FLIGHT];
	tdm_group g;
	tdm_group_init(&g, ex);
	int rc = 0;
	for (int k = 0; k < IN_FLIGHT && rc == 0; k++) {
		slots[k] = (struct slot){.gpu = gpu, .device = device};
		if ((rc = tdm_device_alloc(gpu, device, FLOATS * sizeof(float),
		                           &slots[k].dev_in)) == 0 &&
		    (rc = tdm_device_alloc(gpu, device, FLOATS * sizeof(float),
		                           &slots[k].dev_out)) == 0)
			rc = tdm_spawn(ex, slot_task, &slots[k], &g);
	}
	int wrc = tdm_group_wait(&g);
	unsigned done = 0;
	for (int k = 0; k < IN_FLIGHT; k++) {
		done += slots[k].batches;
		tdm_device_free(gpu, device, slots[k].dev_in);
		tdm_device_free(gpu, device, slots[k].dev_out);
	}
	if (rc == 0)
		rc = wrc;
	tdm_mpi_stats st;
	tdm_mpi_stats_get(mpi, &st);
	printf("rank %d: %u batches on device %d (%s), %llu awaits suspended, %llu at once%s%s\n",
	       rank, done, device, tdm_mpi_device_direct(mpi, gpu) ? "direct" : "staged",
	       (unsigned long long)st.suspended, (unsigned long long)st.immediate,
	       rc != 0 ? ": " : "", rc != 0 ? tdm_mpi_strerror(rc) : "");
	return rc == 0 && done == (unsigned)my_batches ? 0 : 1;
}

int main(int argc, char **argv)
{
	int provided;
	int rc = tdm_mpi_init(&argc, &argv, &provided);
	if (rc != 0) {
		fprintf(stderr, "tdm_mpi_init: %s\n", tdm_mpi_strerror(rc));
		return 1;
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &ranks);
	/* This host's ranks, numbered from 0: which of its GPUs this rank takes. */
	MPI_Comm host;
	int local_rank = 0;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
	MPI_Comm_rank(host, &local_rank);
	MPI_Comm_free(&host);
	if (ranks < 2) {
		fprintf(stderr, "mpi_pipeline: run it under mpirun with at least 2 ranks\n");
		MPI_Finalize();
		return 1;
	}
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (example_open(&ex, &gpu, NULL) != 0) {
		MPI_Abort(MPI_COMM_WORLD, 1);
		return 1;
	}
	if ((rc = tdm_mpi_create(ex, NULL, &mpi)) != 0) {
		fprintf(stderr, "tdm_mpi_create: %s\n", tdm_mpi_strerror(rc));
		MPI_Abort(MPI_COMM_WORLD, 1);
		return 1;
	}
	int status = rank == 0 ? coordinate(ex) : compute(ex, gpu, local_rank);
	tdm_mpi_destroy(mpi); /* before the executor, whose workers its tasks run on */
	example_close(ex, gpu);
	MPI_Finalize();
	return status;
}
