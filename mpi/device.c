// SPDX-License-Identifier: MIT
/*
 * Device buffers over MPI (tdm_mpi_send_device, tdm_mpi_recv_device): each transfer is a
 * resumable task of its own, spawned into the transfer's group and awaited as that group, so
 * that the caller writes one TDM_AWAIT and the helper reads top to bottom: await the GPU, stage
 * through pinned memory (or hand MPI the device pointer where MPI is CUDA-aware), await MPI.
 */
#include <errno.h>
#include <limits.h>

#include "mpi/internal.h"

#define ST(x) ((x)->tdm__state)

static int send_task(tdm_task *t, void *arg)
{
	tdm_mpi_device_xfer *x = arg;
	TDM_BEGIN(t);
	ST(x).pinned = NULL;
	ST(x).req = MPI_REQUEST_NULL;
	ST(x).err = 0;
	if (tdm_mpi_device_direct(x->mpi, x->gpu) == 1) {
		/* MPI reads the device buffer itself: the GPU work that makes it must be done. */
		TDM_AWAIT(t, tdm_await_stream(t, x->stream));
		ST(x).err = tdm_task_result(t);
	} else if (x->bytes > 0) {
		ST(x).err = tdm_pinned_alloc(x->gpu, x->bytes, &ST(x).pinned);
		/* In stream order after the work that makes the buffer: one await covers both. */
		if (ST(x).err == 0)
			ST(x).err = tdm_memcpy_async(x->stream, ST(x).pinned, x->buf, x->bytes,
			                             TDM_COPY_D2H);
		if (ST(x).err == 0) {
			TDM_AWAIT(t, tdm_await_stream(t, x->stream));
			ST(x).err = tdm_task_result(t);
		}
	}
	if (ST(x).err == 0)
		ST(x).err =
		    tdm_mpi_isend(x->mpi, ST(x).pinned != NULL ? ST(x).pinned : x->buf,
		                  (int)x->bytes, MPI_BYTE, x->peer, x->tag, x->comm, &ST(x).req);
	if (ST(x).err == 0) {
		TDM_AWAIT(t, tdm_await_mpi(t, x->mpi, &ST(x).req, &x->status));
		ST(x).err = tdm_task_result(t);
	}
	if (ST(x).pinned != NULL)
		tdm_pinned_free(x->gpu, ST(x).pinned);
	return ST(x).err;
	TDM_END(t);
}

static int recv_task(tdm_task *t, void *arg)
{
	tdm_mpi_device_xfer *x = arg;
	TDM_BEGIN(t);
	ST(x).pinned = NULL;
	ST(x).req = MPI_REQUEST_NULL;
	ST(x).err = 0;
	if (tdm_mpi_device_direct(x->mpi, x->gpu) == 1) {
		/* MPI writes the device buffer itself: work enqueued before on the stream, which
		 * may still read it, must be done. */
		TDM_AWAIT(t, tdm_await_stream(t, x->stream));
		ST(x).err = tdm_task_result(t);
	} else if (x->bytes > 0) {
		ST(x).err = tdm_pinned_alloc(x->gpu, x->bytes, &ST(x).pinned);
	}
	if (ST(x).err == 0)
		ST(x).err =
		    tdm_mpi_irecv(x->mpi, ST(x).pinned != NULL ? ST(x).pinned : x->buf,
		                  (int)x->bytes, MPI_BYTE, x->peer, x->tag, x->comm, &ST(x).req);
	if (ST(x).err == 0) {
		TDM_AWAIT(t, tdm_await_mpi(t, x->mpi, &ST(x).req, &x->status));
		ST(x).err = tdm_task_result(t);
	}
	if (ST(x).err == 0 && ST(x).pinned != NULL) {
		int got = 0;
		tdm__mpi_lock();
		MPI_Get_count(&x->status, MPI_BYTE, &got);
		tdm__mpi_unlock();
		if (got > 0)
			ST(x).err = tdm_memcpy_async(x->stream, x->buf, ST(x).pinned, (size_t)got,
			                             TDM_COPY_H2D);
		if (ST(x).err == 0 && got > 0) {
			/* The pinned block goes back only once the copy has read it. */
			TDM_AWAIT(t, tdm_await_stream(t, x->stream));
			ST(x).err = tdm_task_result(t);
		}
	}
	if (ST(x).pinned != NULL)
		tdm_pinned_free(x->gpu, ST(x).pinned);
	return ST(x).err;
	TDM_END(t);
}

static int start(tdm_task *t, tdm_mpi_device_xfer *x, tdm_resume_fn fn)
{
	tdm_executor *ex = tdm_task_executor(t);
	if (ex == NULL)
		return -EINVAL;
	if (x == NULL || x->mpi == NULL || x->gpu == NULL || x->stream == NULL || x->buf == NULL ||
	    x->bytes > INT_MAX || tdm__mpi_executor(x->mpi) != ex)
		return tdm__mpi_settle(t, -EINVAL);
	/* t must be the running task before anything is spawned on its behalf. */
	int rc = tdm__mpi_settle(t, 0);
	if (rc != 0)
		return rc;
	rc = tdm_group_init(&ST(x).group, ex);
	if (rc == 0)
		rc = tdm_spawn(ex, fn, x, &ST(x).group);
	if (rc != 0)
		return tdm__mpi_settle(t, rc);
	/* The group's result is what the helper returned. */
	return tdm_await_group(t, &ST(x).group);
}

int tdm_mpi_send_device(tdm_task *t, tdm_mpi_device_xfer *x)
{
	return start(t, x, send_task);
}

int tdm_mpi_recv_device(tdm_task *t, tdm_mpi_device_xfer *x)
{
	return start(t, x, recv_task);
}
