// SPDX-License-Identifier: MIT
/*
 * tandem_mpi: a tandem task awaits an MPI request without blocking a worker.
 *
 * A separate library (libtandem_mpi, CMake target tandem::mpi, pkg-config tandem_mpi) over MPI
 * and tandem's public API only; libtandem itself never depends on MPI. A tdm_mpi context attaches
 * a progress thread of its own to an executor: a task that awaits a request (tdm_await_mpi)
 * suspends, the progress thread tests the outstanding requests in batches (MPI_Testsome over a
 * compact array, 32 at a time) and hands each task back when its request completes. Every call
 * returns 0 or a negative errno (tdm_mpi_strerror); the await returns TDM_SUSPENDED or, when the
 * task can go on at once, its result, as the awaits of tandem.h do. Why it is built so:
 * docs/design/mpi.md.
 *
 * Thread level: tandem_mpi makes every MPI call it makes (the await's MPI_Test, the progress
 * thread's MPI_Testsome, MPI_Cancel, the helpers' MPI_Isend and MPI_Irecv) under one lock per
 * process, so MPI_THREAD_SERIALIZED is enough. A program whose own threads or tasks call MPI
 * while a context exists takes the same lock around those calls (tdm_mpi_lock), or initialises
 * MPI with MPI_THREAD_MULTIPLE.
 *
 * Order of life: MPI initialised (tdm_mpi_init, or by the program), tdm_executor_create,
 * tdm_mpi_create; then tdm_mpi_destroy before tdm_executor_destroy (the executor's destroy would
 * wait for, or cancel, tasks that only the context can resume), and MPI_Finalize after
 * tdm_mpi_destroy.
 */
#ifndef TANDEM_MPI_H
#define TANDEM_MPI_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "tandem.h"
#include "tandem_gpu.h" /* tdm_gpu, tdm_stream: the device-buffer helpers */

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is what it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct tdm_mpi tdm_mpi;

/*
 * Initialises MPI for tandem_mpi, or checks the MPI the program initialised. Where MPI is not
 * initialised, calls MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, provided) (argc and argv
 * may be NULL); where the program initialised it already, uses it as it is and reports its level
 * (MPI_Query_thread). provided may be NULL; else it receives the level MPI gives (also on
 * -EPROTONOSUPPORT). Either way the program calls MPI_Finalize at its end, after
 * tdm_mpi_destroy. Call it from the thread that will finalise MPI, before any thread calls MPI.
 * -EPROTONOSUPPORT: MPI's thread level is below MPI_THREAD_SERIALIZED (MPI stays initialised;
 * tdm_mpi_create would refuse it).  -ESHUTDOWN: MPI was finalised already.  -EIO:
 * MPI_Init_thread failed.
 */
int tdm_mpi_init(int *argc, char ***argv, int *provided);

typedef struct tdm_mpi_config {
	/* The progress thread tests its requests without sleeping for this long after the last
	 * completion (or new request), then sleeps in steps while requests are outstanding. 0: 200
	 * us. At most 1 s. */
	unsigned spin_us;
	/* The first sleep step. Steps grow with the time since the last completion (1/32 of it),
	 * from sleep_us up to max_sleep_us: a completion after a long wait is seen at most 1/32 of
	 * that wait late, and never more than max_sleep_us. 0: 20 us and 1000 us. At most 1 s;
	 * max_sleep_us not below sleep_us. With no request outstanding the thread sleeps until
	 * one comes. */
	unsigned sleep_us;
	unsigned max_sleep_us;
	/* A pass of MPI_Testsome calls that takes longer than this per 32 requests is taken to
	 * have moved data (MPI progresses a large message inside its calls, fragment by fragment)
	 * and counts as activity, like a completion: the thread spins on while a transfer is under
	 * way. The first pass after a sleep is not judged (cold caches). 0: 1000 ns. At most 1 s.
	 */
	unsigned busy_ns;
	/* tdm_mpi_destroy cancels the requests still outstanding and waits this long for them to
	 * complete (a send that MPI cannot cancel completes only when it is matched); those left
	 * are freed (MPI_Request_free) and their tasks resumed with -ECANCELED all the same. 0:
	 * 1000 ms. At most 600000. */
	unsigned cancel_wait_ms;
	/* The progress thread's name, cut to 15 bytes. NULL: "tdm-mpi". */
	const char *thread_name;
	/* Nonzero: the device-buffer helpers always go through pinned host memory, even where MPI
	 * is CUDA-aware. */
	int stage_device;
} tdm_mpi_config;

/* Fills *cfg with the defaults (all zero); does nothing when cfg is NULL. */
void tdm_mpi_config_init(tdm_mpi_config *cfg);

/*
 * Makes a progress context for the tasks of ex, and starts its progress thread. cfg may be NULL
 * for the defaults. Several contexts may exist at once (one per executor, say); they share the
 * process's MPI lock.
 * -EINVAL: ex or out is NULL, or a field of cfg out of its range.  -ENOTCONN: MPI is not
 * initialised.  -ESHUTDOWN: MPI was finalised.  -EPROTONOSUPPORT: MPI's thread level is below
 * MPI_THREAD_SERIALIZED.  -ENOMEM.  -EAGAIN: the thread could not be started.
 */
int tdm_mpi_create(tdm_executor *ex, const tdm_mpi_config *cfg, tdm_mpi **out);

/*
 * Stops the context: each request still awaited is cancelled (MPI_Cancel) and completed, its
 * status and request written as tdm_await_mpi says, and its task resumed with -ECANCELED, or
 * with its own result (0 or -EIO) where it completed rather than being cancelled; then the
 * progress thread ends and m is freed. Nothing waits for a message: a request that has not
 * completed cancel_wait_ms after its cancel is freed (MPI_Request_free; MPI may still read a
 * send's buffer until it is matched, so keep that buffer until MPI_Finalize) and its task resumed
 * with -ECANCELED. Call it before tdm_executor_destroy of m's executor (whose workers take the
 * resumed tasks) and before MPI_Finalize. Awaits on m that begin after the destroy began get
 * -ESHUTDOWN; none may begin once it may have returned (m is freed).
 * -EINVAL: m is NULL.  -EALREADY: a destroy of m is running already.
 */
int tdm_mpi_destroy(tdm_mpi *m);

/*
 * Awaits *req: resumes t once the request completes. One MPI_Test at the call: a request
 * complete already continues at once (returns its result; the task does not suspend). Else
 * returns TDM_SUSPENDED, and the progress thread resumes t when the request completes. Either
 * way, on completion: *status is the request's status (status may be MPI_STATUS_IGNORE), its
 * MPI_ERROR field MPI_SUCCESS or the MPI error class of the failure (MPI_ERR_TRUNCATE, say);
 * *req is MPI_REQUEST_NULL (MPI freed the request); and the result (the return value when at
 * once, else tdm_task_result after the resume) is 0, or -EIO when MPI reported an error for the
 * request (only where the request's communicator returns errors, MPI_ERRORS_RETURN: MPI's
 * default handler aborts the program instead), or -ECANCELED when tdm_mpi_destroy cancelled it
 * (MPI_Test_cancelled then says so of *status), or -ESHUTDOWN when the program finalised MPI
 * while it was outstanding (*status untouched). Neither *req nor *status may be touched until
 * the task resumes; they and the request's buffer must live until then.
 * Fails at once, setting tdm_task_result to the same errno (where t is the running task) and
 * leaving *req as it was (the request is still the caller's):
 * -EINVAL: t is NULL or not the task running on the calling thread, m or req is NULL, *req is
 * MPI_REQUEST_NULL, or m is a context of another executor than t's.  -ESHUTDOWN: MPI was
 * finalised, or m's destroy began.  -ENOMEM: no memory to keep the request.  -ECANCELED: t's
 * executor is being destroyed in TDM_SHUTDOWN_CANCEL (tdm_await_notify says why).
 */
int tdm_await_mpi(tdm_task *t, tdm_mpi *m, MPI_Request *req, MPI_Status *status);

/*
 * The process's MPI lock, which tandem_mpi holds over each MPI call it makes: take it around the
 * program's own MPI calls while a context exists and MPI runs at MPI_THREAD_SERIALIZED (a task
 * may hold it, but not across an await). Not recursive: no call of tandem_mpi may be made while
 * holding it. A blocking call made under it (MPI_Wait, MPI_Barrier) stops every context's
 * progress and every await until it returns. m only names the lock (any context does).
 * -EINVAL: m is NULL.
 */
int tdm_mpi_lock(tdm_mpi *m);
int tdm_mpi_unlock(tdm_mpi *m);

/*
 * MPI_Isend and MPI_Irecv under the lock; await *req with tdm_await_mpi. buf must live, and a
 * send's be left unchanged, until the await completes.
 * -EINVAL: m or req is NULL, or count negative.  -ESHUTDOWN: MPI was finalised.  -EIO: MPI
 * refused the call (only where the communicator returns errors); *req is MPI_REQUEST_NULL then.
 */
int tdm_mpi_isend(tdm_mpi *m, const void *buf, int count, MPI_Datatype type, int dest, int tag,
                  MPI_Comm comm, MPI_Request *req);
int tdm_mpi_irecv(tdm_mpi *m, void *buf, int count, MPI_Datatype type, int source, int tag,
                  MPI_Comm comm, MPI_Request *req);

/* Counts since tdm_mpi_create, read with relaxed loads (a snapshot, not a consistent cut). */
typedef struct tdm_mpi_stats {
	uint64_t awaits;          /* tdm_await_mpi calls that reached MPI_Test */
	uint64_t immediate;       /* of those, requests complete at the call (no suspension) */
	uint64_t suspended;       /* awaits handed to the progress thread */
	uint64_t completed;       /* of those, resumed with 0 */
	uint64_t failed;          /* resumed with -EIO (immediate ones included) */
	uint64_t cancelled;       /* resumed with -ECANCELED by tdm_mpi_destroy */
	uint64_t testsome;        /* MPI_Testsome calls of the progress thread */
	uint64_t sleeps;          /* its sleep steps while requests were outstanding */
	uint64_t idle_waits;      /* times it slept with no request outstanding */
	uint64_t max_outstanding; /* most requests it held at once */
} tdm_mpi_stats;

/* -EINVAL: m or out is NULL. */
int tdm_mpi_stats_get(const tdm_mpi *m, tdm_mpi_stats *out);

/*
 * 1 where the device-buffer helpers hand device pointers to MPI itself: MPI says it is
 * CUDA-aware (MPIX_Query_cuda_support, where mpi-ext.h has it), stage_device is off, and gpu's
 * backend is cuda; else 0 (they stage through pinned memory). -EINVAL: m or gpu is NULL.
 */
int tdm_mpi_device_direct(const tdm_mpi *m, const tdm_gpu *gpu);

/*
 * A transfer of a device buffer, done by a helper that reads as one state machine. The caller
 * fills the public fields, keeps x (and its stream lease) until the await is over, and awaits:
 *
 *     TDM_AWAIT(t, tdm_mpi_send_device(t, &j->x));
 *     if ((j->err = tdm_task_result(t)) != 0) ...
 *
 * Send: once the GPU work enqueued on `stream` before the call is done, the buffer's bytes go to
 * `peer`: staged (a copy to a pinned block, in stream order, awaited, then MPI_Isend of the
 * block) or direct (the stream awaited, then MPI_Isend of the device pointer: see
 * tdm_mpi_device_direct). Receive: the message from `peer` lands in the device buffer: staged
 * (MPI_Irecv into a pinned block, awaited, then a copy to the device on `stream`, awaited) or
 * direct (the stream awaited, then MPI_Irecv into the device pointer). Both await the MPI
 * request with tdm_await_mpi. The result (the return value when at once, else tdm_task_result)
 * is 0 or the first error: tdm_await_mpi's (-EIO, -ECANCELED), the GPU layer's (-EIO from the
 * stream, -ENOMEM from the pinned pool), or one of these at once: -EINVAL: t not the running
 * task, a NULL field (mpi, gpu, stream, buf), bytes above INT_MAX, or mpi of another executor
 * than t's; errors of tdm_spawn (the helper runs as a task of t's executor, awaited as a group).
 * status receives the MPI request's status (the count of a receive: MPI_Get_count with MPI_BYTE).
 */
typedef struct tdm_mpi_device_xfer {
	tdm_mpi *mpi;
	tdm_gpu *gpu;
	tdm_stream *stream; /* a lease of the buffer's device, held by the caller */
	void *buf;          /* device memory, bytes long */
	size_t bytes;       /* to send; the most a receive takes */
	int peer, tag;
	MPI_Comm comm;
	MPI_Status status; /* out */
	/* The helper's own state: not to be touched. */
	struct {
		tdm_group group;
		MPI_Request req;
		void *pinned;
		int err;
	} tdm__state;
} tdm_mpi_device_xfer;

int tdm_mpi_send_device(tdm_task *t, tdm_mpi_device_xfer *x);
int tdm_mpi_recv_device(tdm_task *t, tdm_mpi_device_xfer *x);

/* A message for any value tandem_mpi returns (its own errors said in MPI's terms, the rest as
 * tdm_strerror says them); never NULL. */
const char *tdm_mpi_strerror(int err);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_MPI_H */
