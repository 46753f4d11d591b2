// SPDX-License-Identifier: MIT
/*
 * The cuda backend's graph operations (backend.h, "graphs"; docs/design/graphs.md): stream
 * capture into a cudaGraph_t, instantiation, update in place, replay and destruction, over the
 * CUDA runtime. Only with TANDEM_HAVE_CUDA (CMakeLists.txt compiles it into CUDA builds alone).
 *
 * A source graph and an executable graph remember their device, as streams and events do
 * (cuda_internal.h): the device of the stream the capture began on. Instantiation and update run
 * with that device current, entered and left as the other slow paths of cuda.c are (the caller's
 * own device given back); capture and launch, which act on a stream, go through the stream's
 * device like every launch (TDM__CUDA_ON_STREAM).
 *
 * Errors: a call the driver refuses leaves a non-sticky "last error" in the runtime, which user
 * code on the same worker would take for its own: every failing path here clears it
 * (tdm__cuda_fail or cudaGetLastError). A sticky error (the context died) makes every call fail,
 * and shows as -EIO.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "cuda_internal.h"

/*
 * cudaGraphUpload at instantiation: the first launch of a fresh executable graph otherwise
 * uploads it itself (its work descriptors to the device), which makes that first replay slower
 * than the later ones. graph_instantiate has no stream of the caller's, so an upload would go
 * into cudaStreamPerThread (ordered with nothing of tandem's; the driver serialises uploads and
 * launches of one executable graph). Off: on an H200 (CUDA 13, a chain of 8 kernels of 2 us;
 * perf/raw_graph.cu, raw_graph_chain_graph's setup) the first replay took ~40 us against ~27 us
 * for later ones, and an upload (+ sync) ~19 us, so uploading at instantiation costs more than
 * the first replay saves; it would only move that cost off a latency-critical first replay.
 */
#ifndef TDM__CUDA_GRAPH_UPLOAD
#define TDM__CUDA_GRAPH_UPLOAD 0
#endif

struct tdm__cuda_graph {
	cudaGraph_t g;
	int dev; /* of the stream that was captured */
};

struct tdm__cuda_exec {
	cudaGraphExec_t x;
	int dev; /* of the source graph it was instantiated from */
};

/* ---- errors ------------------------------------------------------------------------------ */

/* The errors of a capture's rules (a call illegal in a capture, a fork not joined back...). */
static bool tdm__cuda_capture_error(cudaError_t e)
{
	switch (e) {
	case cudaErrorStreamCaptureUnsupported:
	case cudaErrorStreamCaptureInvalidated:
	case cudaErrorStreamCaptureMerge:
	case cudaErrorStreamCaptureUnjoined:
	case cudaErrorStreamCaptureIsolation:
	case cudaErrorStreamCaptureImplicit:
	case cudaErrorCapturedEvent:
		return true;
	default:
		return false;
	}
}

/*
 * For the graph calls that enqueue or build (instantiate, update, launch): -ENOMEM when the
 * driver ran out of memory, -EIO for anything else, as cuda.c's launches report (nothing was
 * enqueued or built). The last error is cleared.
 */
static int tdm__cuda_graph_fail(cudaError_t e)
{
	(void)cudaGetLastError();
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* ---- capture ----------------------------------------------------------------------------- */

int tdm__cuda_capture_begin(struct tdm__backend *b, void *stream)
{
	const struct tdm__cuda_stream *st = stream;
	enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
	cudaError_t e;

	(void)b;
	if (st == NULL)
		return -EINVAL;
	/* Capturing already, or joined to another stream's capture (which makes it capture too),
	 * or in an invalidated capture not yet ended: each refuses a new capture. Asked first, so
	 * that a refused begin leaves no error behind and does not invalidate that capture. A
	 * sticky error fails the query: -EIO. */
	e = cudaStreamIsCapturing(st->s, &status);
	if (e != cudaSuccess)
		return tdm__cuda_graph_fail(e);
	if (status != cudaStreamCaptureStatusNone)
		return -EBUSY;
	TDM__CUDA_ON_STREAM(e, st, cudaStreamBeginCapture(st->s, cudaStreamCaptureModeThreadLocal));
	if (e == cudaSuccess)
		return 0;
	/* Another thread began a capture on the stream between the query and the begin. */
	if (e == cudaErrorIllegalState || tdm__cuda_capture_error(e)) {
		(void)cudaGetLastError();
		return -EBUSY;
	}
	return tdm__cuda_graph_fail(e);
}

/*
 * After a capture_end that failed: the stream must not be left capturing (backend.h). Ending a
 * capture sequence takes every stream that joined it out of capture mode as well (measured:
 * invalidated and unjoined captures alike), so the origin stream's state is all there is to
 * check. On a stream that is not the origin, or from the wrong thread, the second end fails as
 * the first did, harmlessly. Whatever graph a second end returns is discarded.
 */
static void tdm__cuda_capture_abandon(const struct tdm__cuda_stream *st)
{
	enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
	cudaGraph_t g = NULL;

	if (cudaStreamIsCapturing(st->s, &status) == cudaSuccess &&
	    status != cudaStreamCaptureStatusNone &&
	    cudaStreamEndCapture(st->s, &g) == cudaSuccess && g != NULL)
		(void)cudaGraphDestroy(g);
	(void)cudaGetLastError();
}

int tdm__cuda_capture_end(struct tdm__backend *b, void *stream, void **graph)
{
	const struct tdm__cuda_stream *st = stream;
	struct tdm__cuda_graph *w;
	cudaGraph_t g = NULL;
	cudaError_t e;

	(void)b;
	if (st == NULL || graph == NULL)
		return -EINVAL;
	*graph = NULL;
	/* Allocated before the end, which must happen whatever else fails. */
	w = malloc(sizeof(*w));
	/* No retry as launches have (TDM__CUDA_ON_STREAM): a failed end may have ended the capture
	 * already. The device is made exactly current instead, at the price of a cudaGetDevice. */
	(void)tdm__cuda_use_exact(st->dev);
	e = cudaStreamEndCapture(st->s, &g);
	if (e == cudaSuccess && g != NULL) {
		if (w == NULL) {
			(void)cudaGraphDestroy(g);
			(void)cudaGetLastError();
			return -ENOMEM;
		}
		w->g = g;
		w->dev = st->dev;
		*graph = w;
		return 0;
	}
	free(w);
	(void)cudaGetLastError();
	if (g != NULL)
		(void)cudaGraphDestroy(g);
	tdm__cuda_capture_abandon(st);
	/* Not the thread that began it (the mode is not relaxed). The driver then terminates the
	 * capture (measured on an H200, driver of CUDA 13: the stream is no longer capturing and
	 * the owner's end says cudaErrorIllegalState); were one to leave it going, the abandon
	 * above, from this thread, could not end it either. */
	if (e == cudaErrorStreamCaptureWrongThread)
		return -EINVAL;
	/* The stream is not capturing (cudaErrorIllegalState), or is not where the capture began
	 * (Unmatched: a stream that joined one, whose capture the driver then invalidates for its
	 * owner to end): nothing was ended here. */
	if (e == cudaErrorIllegalState || e == cudaErrorStreamCaptureUnmatched)
		return -EINVAL;
	/* Invalidated (a call illegal in a capture reached the runtime), a fork not joined back,
	 * any other rule of capture broken; success with no graph (undocumented) counts as
	 * invalidated. Each ends the capture, with every stream that joined it. */
	if (e == cudaSuccess || tdm__cuda_capture_error(e))
		return -ECANCELED;
	return tdm__cuda_graph_fail(e);
}

/* ---- executable graphs ------------------------------------------------------------------- */

int tdm__cuda_graph_instantiate(struct tdm__backend *b, void *graph, void **exec)
{
	const struct tdm__cuda_graph *w = graph;
	struct tdm__cuda_exec *x;
	cudaError_t e;
	int prev;

	(void)b;
	if (w == NULL || exec == NULL)
		return -EINVAL;
	*exec = NULL;
	x = malloc(sizeof(*x));
	if (x == NULL)
		return -ENOMEM;
	/* The CUDA 12 form: flags 0 (no auto-free of graph allocations, no device launch, no
	 * upload: see TDM__CUDA_GRAPH_UPLOAD). */
	e = tdm__cuda_enter(w->dev, &prev);
	if (e == cudaSuccess)
		e = cudaGraphInstantiate(&x->x, w->g, 0);
#if TDM__CUDA_GRAPH_UPLOAD
	if (e == cudaSuccess) {
		e = cudaGraphUpload(x->x, cudaStreamPerThread);
		if (e != cudaSuccess)
			(void)cudaGraphExecDestroy(x->x);
	}
#endif
	tdm__cuda_leave(w->dev, prev);
	if (e != cudaSuccess) {
		free(x);
		return tdm__cuda_graph_fail(e);
	}
	x->dev = w->dev;
	*exec = x;
	return 0;
}

/*
 * cudaGraphExecUpdate performs the update entirely or not at all: a refusal (the graph's
 * topology, a node's type, a kernel's function or context, or a parameter the driver cannot
 * patch in place differs) leaves exec unchanged, and the caller instantiates anew. Replays of
 * exec in flight are not affected; the update applies from its next launch.
 */
int tdm__cuda_graph_update(struct tdm__backend *b, void *exec, void *graph)
{
	const struct tdm__cuda_exec *x = exec;
	const struct tdm__cuda_graph *w = graph;
	cudaGraphExecUpdateResultInfo info = {0};
	cudaError_t e;
	int prev;

	(void)b;
	if (x == NULL || w == NULL)
		return -EINVAL;
	/* Kernels of another device's context can never be patched in: instantiate anew. */
	if (x->dev != w->dev)
		return -ESTALE;
	e = tdm__cuda_enter(x->dev, &prev);
	if (e == cudaSuccess)
		e = cudaGraphExecUpdate(x->x, w->g, &info);
	tdm__cuda_leave(x->dev, prev);
	if (e == cudaSuccess)
		return 0;
	(void)cudaGetLastError();
	/* cudaErrorGraphExecUpdateFailure: refused by the rules of update, whatever info.result
	 * says (TopologyChanged, NodeTypeChanged, FunctionChanged, UnsupportedFunctionChange,
	 * ParametersChanged, AttributesChanged, NotSupported, or the catch-all Error). Anything
	 * else came from the device or the driver. */
	if (e == cudaErrorGraphExecUpdateFailure)
		return -ESTALE;
	return tdm__cuda_graph_fail(e);
}

/* One replay, ordered after the stream's earlier work and after exec's previous replay (the
 * driver's rule for cudaGraphLaunch, on whatever stream that one ran). */
int tdm__cuda_graph_launch(struct tdm__backend *b, void *exec, void *stream)
{
	const struct tdm__cuda_exec *x = exec;
	const struct tdm__cuda_stream *st = stream;
	cudaError_t e;

	(void)b;
	if (x == NULL || st == NULL || x->dev != st->dev)
		return -EINVAL;
	TDM__CUDA_ON_STREAM(e, st, cudaGraphLaunch(x->x, st->s));
	return e == cudaSuccess ? 0 : tdm__cuda_graph_fail(e);
}

/* ---- freeing ----------------------------------------------------------------------------- */

/* After a sticky error the destroy fails; the wrapper is freed all the same, and the driver's
 * resources go with the context. */
void tdm__cuda_graph_free(struct tdm__backend *b, void *graph)
{
	struct tdm__cuda_graph *w = graph;
	int prev;

	(void)b;
	if (w == NULL)
		return;
	(void)tdm__cuda_enter(w->dev, &prev);
	(void)cudaGraphDestroy(w->g);
	(void)cudaGetLastError();
	tdm__cuda_leave(w->dev, prev);
	free(w);
}

/*
 * Never blocks: cudaGraphExecDestroy of an executable graph with replays in flight does not stop
 * or wait for them; the driver frees its resources asynchronously once they completed
 * (cuGraphExecDestroy: "if the executable graph is in-flight, it will not be terminated, but
 * rather freed asynchronously on completion").
 */
void tdm__cuda_graph_exec_free(struct tdm__backend *b, void *exec)
{
	struct tdm__cuda_exec *x = exec;
	int prev;

	(void)b;
	if (x == NULL)
		return;
	(void)tdm__cuda_enter(x->dev, &prev);
	(void)cudaGraphExecDestroy(x->x);
	(void)cudaGetLastError();
	tdm__cuda_leave(x->dev, prev);
	free(x);
}
