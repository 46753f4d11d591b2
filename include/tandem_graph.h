// SPDX-License-Identifier: MIT
/*
 * tandem's GPU graphs: work captured once from a stream and replayed as one unit (a CUDA Graph),
 * awaited like any other stream work. Why, and what each call costs: docs/design/graphs.md.
 *
 *   tdm_graph_capture_begin(s);          s: an exclusive lease
 *   ... launches and copies on s ...     recorded, not run
 *   tdm_graph_capture_end(s, &g);        g: an executable graph of s's device
 *   tdm_graph_launch(s, g);              one unit of work on s
 *   return tdm_await_stream(t, s);       the worker runs other tasks meanwhile
 *
 * Or, in one call: tdm_graph_run(s, key, step, arg, 0) runs `step` directly the first times,
 * captures it once it has repeated, and replays the cached graph after that.
 *
 * Every call returns a negative errno on failure (tdm_strerror). Device-side edges between
 * streams (tdm_stream_wait_event) are in tandem_gpu.h.
 */
#ifndef TANDEM_GRAPH_H
#define TANDEM_GRAPH_H

#include <stdint.h>

#include "tandem_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct tdm_graph tdm_graph;

/* What a capture end or a tdm_graph_run did (positive results). */
enum {
	TDM_GRAPH_DIRECT = 1,       /* tdm_graph_run: the step ran on the stream, not captured */
	TDM_GRAPH_INSTANTIATED = 2, /* the capture became a new executable graph */
	TDM_GRAPH_UPDATED = 3,      /* the capture updated the graph in place (same topology) */
	TDM_GRAPH_REPLAYED = 4, /* tdm_graph_run: the cached graph was launched; step not called */
};

/*
 * Starts capturing s: until tdm_graph_capture_end, the work enqueued on s (tandem's launches and
 * copies, and your own launches on tdm_stream_native(s)) is recorded into a graph, not run.
 * Capture is thread-local (cudaStreamCaptureModeThreadLocal): other threads' work on other
 * streams is never swept in; begin and end must run on one thread, in one run of the task, with
 * no await between them. Another stream joins the capture by tdm_stream_wait_event on an event
 * recorded on a capturing stream, and must be joined back (s waits on an event recorded on it
 * after its last work) before the end.
 * What a capture may hold: kernels, tdm_memcpy_async between device memory and pinned host
 * memory (or device to device), tdm_memcpy_peer_async, tdm_event_record, tdm_stream_wait_event.
 * Anything else on a capturing stream (an await, a copy from pageable memory, stream-ordered
 * allocation, prefetch, a graph launch) is refused with -EBUSY and abandons the capture:
 * tdm_graph_capture_end then says -ECANCELED, and the stream is usable again.
 * -EINVAL: s is NULL, released, or a shared lease (other tasks' work would be swept in).
 * -EBUSY: s is capturing already.  -EIO: s's device failed, or the driver refused.
 * -ENOTSUP: a backend without graphs.
 */
int tdm_graph_capture_begin(tdm_stream *s);

/*
 * Ends the capture of s. *g NULL: a new graph, instantiated from the capture, goes to *g
 * (TDM_GRAPH_INSTANTIATED). *g a graph of s's device: the capture replaces its work, in place
 * when the topology is unchanged (cudaGraphExecUpdate: TDM_GRAPH_UPDATED; only parameters
 * differ) and by a new instantiation behind the same handle when it is not
 * (TDM_GRAPH_INSTANTIATED). The capture's source graph is kept with g for later updates, and
 * freed with it. Either way s is no longer capturing once this returns, whatever it returns.
 * -EINVAL: s is NULL, released or not capturing; g is NULL (the capture is discarded); *g is
 * destroyed or of another device or layer; or this thread did not begin the capture (the one
 * exception to "whatever it returns": the capture goes on, end it from its thread).
 * -ECANCELED: the capture was abandoned (a refused call in it), or the backend invalidated it
 * (a stream forked into it was not joined back); nothing changes in *g.
 * -EIO: the device failed.  -ENOMEM.  -ENOTSUP: a backend without graphs.
 */
int tdm_graph_capture_end(tdm_stream *s, tdm_graph **g);

/*
 * Enqueues one replay of g on s (cudaGraphLaunch): after the work enqueued on s before it, and
 * after g's previous replay on any stream (replays of one graph never overlap; use one graph
 * per stream to run a step on several streams at once). One exception: after a capture end
 * re-instantiated g (TDM_GRAPH_INSTANTIATED into an existing graph), its next replay is ordered
 * after the earlier ones only on the same stream. Await it as any work on s.
 * -EINVAL: s or g is NULL, s is released, g is destroyed (also with its layer), no graph's
 * handle, or of another device or GPU layer.
 * -EBUSY: s is capturing (the capture is abandoned).  -EIO: the device failed, or the driver
 * refused.  -ENOMEM: no memory to queue it (sim).
 */
int tdm_graph_launch(tdm_stream *s, tdm_graph *g);

/*
 * Destroys g. Replays in flight run to their end; their resources are freed then (the driver's
 * cudaGraphExecDestroy; the sim likewise): never blocks, never -EBUSY. Graphs left at
 * tdm_gpu_destroy are destroyed there. -EINVAL: g is NULL or no graph's handle, or destroyed
 * already (by a call, or with its GPU layer; also once a later capture reused its memory: handles
 * carry a generation, tandem_gpu.h).
 */
int tdm_graph_destroy(tdm_graph *g);

/* Enqueues a step's work on s (kernels, copies, edges, as in a capture); 0 or a negative errno,
 * which tdm_graph_run returns. */
typedef int (*tdm_graph_step)(tdm_stream *s, void *arg);

enum {
	/* The step's parameters changed since it was captured: capture it again and update the
	 * cached graph (in place when the topology is unchanged). */
	TDM_GRAPH_RECAPTURE = 1 << 0,
};

/*
 * Runs a step through the layer's graph cache, keyed by (key, s's stream): the first
 * tdm_gpu_config.graph_capture_after runs of a key call step(s, arg) directly
 * (TDM_GRAPH_DIRECT); the next captures it and launches the graph (TDM_GRAPH_INSTANTIATED); later
 * runs launch the cached graph without calling step (TDM_GRAPH_REPLAYED), unless
 * TDM_GRAPH_RECAPTURE asks for a new capture (TDM_GRAPH_UPDATED or TDM_GRAPH_INSTANTIATED). A key
 * therefore names a step and its parameters: the same key must enqueue the same work. The cache
 * holds tdm_gpu_config.graph_cache entries per layer (a key's graph, or the count of its runs
 * before capture), the least recently run evicted first; a run that finds every entry in use by
 * other runs calls step directly (TDM_GRAPH_DIRECT).
 * Await the work as any work on s.
 * -EINVAL: s or step is NULL, s is released or shared (a capture needs an exclusive lease), an
 * unknown flag.  -EBUSY: s is capturing.  -ECANCELED: the step made a call a capture refuses
 * (nothing cached; the key starts over).  -EIO, -ENOMEM as for capture and launch.  The step's own
 * negative result, when it fails (a capture it was in is abandoned; nothing cached).
 */
int tdm_graph_run(tdm_stream *s, uint64_t key, tdm_graph_step step, void *arg, unsigned flags);

/* Drops every cached graph of key (on every stream) from gpu's cache: 0, or -ENOENT: none was
 * cached or counted.  -EINVAL: gpu is NULL or no GPU layer's handle.  -ESHUTDOWN: the GPU layer
 * is being destroyed, or was. */
int tdm_graph_forget(tdm_gpu *gpu, uint64_t key);

typedef struct tdm_graph_stats {
	uint64_t direct;       /* tdm_graph_run calls that ran the step directly */
	uint64_t instantiated; /* graphs instantiated (capture ends and cache captures) */
	uint64_t updated;      /* captures that updated a graph in place */
	uint64_t replayed;     /* cache hits */
	uint64_t evicted;      /* cache entries evicted for room (graphs, and keys not yet
	                        * captured whose runs were being counted) */
	uint64_t abandoned;    /* captures abandoned or invalidated */
	unsigned cached;       /* cache entries now: graphs, and keys counted toward capture */
} tdm_graph_stats;
/* -EINVAL: gpu or out is NULL, or gpu no GPU layer's handle.  -ESHUTDOWN: the GPU layer is
 * being destroyed, or was. */
int tdm_graph_stats_get(tdm_gpu *gpu, tdm_graph_stats *out);

/* ---- DAGs of GPU steps ---- */

/*
 * A DAG: a host-side description of GPU steps (kernels through a launch callback, copies,
 * memsets) and of what each needs done before it, run as one awaitable:
 *
 *   tdm_dag *d;
 *   tdm_dag_create(gpu, &d);
 *   int in = tdm_dag_copy(d, x, host, bytes, TDM_COPY_H2D, NULL, 0);
 *   int z = tdm_dag_memset(d, y, 0, bytes, NULL, 0);            independent: runs beside `in`
 *   int deps[] = {in, z};
 *   tdm_dag_kernel(d, step, &args, deps, 2);                     after both
 *   ...
 *   TDM_AWAIT(t, tdm_dag_run(t, s, d));                          s: an exclusive lease
 *
 * The first runs lower the DAG onto streams: s, and for branches that may run at once more
 * exclusive leases of s's device, taken for the run, with event edges between them
 * (tdm_stream_wait_event). Once it has run tdm_gpu_config.graph_capture_after times (0: 2) with
 * one structure, the next run captures that lowering into a graph (tandem_graph.h's capture),
 * and later runs replay the graph on s alone; after a parameter change (tdm_dag_set_*) the next
 * run captures again and updates the graph in place. Nodes are numbered 0, 1, 2... as they are
 * added and depend only on earlier ones, so a DAG has no cycle. Each call on a DAG holds it while
 * it runs: a call that finds it held says -EBUSY, whether it races another thread's call or is
 * made by one of the DAG's own node callbacks during a run. DAGs left at tdm_gpu_destroy are
 * destroyed there. Every call below that takes a DAG says -EINVAL when d is NULL, no DAG's
 * handle, or destroyed (by a call, or with its layer), and -EBUSY when another call holds d.
 */
typedef struct tdm_dag tdm_dag;

/* A kernel node: enqueues its work on s (tandem's launches and copies, or your own on
 * tdm_stream_native(s)) and nothing else, since it may run inside a capture; 0 or a negative
 * errno. Called by the runs that lower or capture the DAG, never by a replay. While it runs, its
 * run holds the DAG: every call on that DAG (tdm_dag_destroy, tdm_dag_run, adding a node,
 * tdm_dag_set_*, tdm_dag_stats_get) says -EBUSY and changes nothing. */
typedef int (*tdm_dag_fn)(tdm_stream *s, void *arg);

/* At most this many streams run one DAG at once, s among them. */
#define TDM_DAG_MAX_STREAMS 16

/* An empty DAG for gpu's devices. -EINVAL: gpu or out is NULL, or gpu no GPU layer's handle.
 * -ESHUTDOWN: the GPU layer is being destroyed, or was.  -ENOMEM. */
int tdm_dag_create(tdm_gpu *gpu, tdm_dag **out);

/*
 * Destroys d and its graph. Never blocks: work of a run still in flight runs to its end, and the
 * DAG's events and graph are freed once it has (as tdm_graph_destroy's replays).
 * -EINVAL: d is NULL, no DAG's handle, or destroyed already.  -EBUSY: another call holds d (its
 * run, from one of its node callbacks, say); d stays.
 */
int tdm_dag_destroy(tdm_dag *d);

/*
 * Adds a node that runs after the nodes deps names (ndeps ids of earlier nodes of d; deps may be
 * NULL when ndeps is 0; an id named twice counts once): a kernel (fn(s, arg) enqueues it), a
 * copy (as tdm_memcpy_async: pageable host memory is staged, which a capture refuses, so a DAG
 * with such a copy stays lowered), or a memset (as tdm_memset_async). Returns the node's id, >= 0.
 * Adding a node changes the structure: the next runs lower it again, and the capture after them
 * instantiates a new graph. -EINVAL: d is NULL or destroyed, deps is NULL with ndeps > 0, an id
 * is not an earlier node's; fn, dst or src NULL; an unknown copy kind.  -EBUSY: another call holds
 * d (its run, from one of its callbacks, say); nothing added.  -ENOMEM.
 */
int tdm_dag_kernel(tdm_dag *d, tdm_dag_fn fn, void *arg, const int *deps, unsigned ndeps);
int tdm_dag_copy(tdm_dag *d, void *dst, const void *src, size_t bytes, tdm_copy_kind kind,
                 const int *deps, unsigned ndeps);
int tdm_dag_memset(tdm_dag *d, void *dst, int value, size_t bytes, const int *deps, unsigned ndeps);

/*
 * Changes a node's parameters; the structure stays. A lowered run uses them as they are; once the
 * DAG is captured, the next run captures it again and updates the graph in place
 * (TDM_GRAPH_UPDATED), or instantiates it anew where the driver cannot update it. Setting the
 * values a node has already changes nothing. A copy keeps its kind. -EINVAL: d is NULL or
 * destroyed, node is not a node of d of that kind, dst or src is NULL.  -EBUSY: another call
 * holds d (its run, from one of its callbacks, say); nothing changes.
 */
int tdm_dag_set_kernel_arg(tdm_dag *d, int node, void *arg);
int tdm_dag_set_copy(tdm_dag *d, int node, void *dst, const void *src, size_t bytes);
int tdm_dag_set_memset(tdm_dag *d, int node, void *dst, int value, size_t bytes);

/*
 * Runs d after the work enqueued on s before the call, and resumes t once every node is done:
 * returns TDM_SUSPENDED, or the result at once, as tdm_await_stream(t, s) does (it ends with
 * one). Result 0, or -EIO when a node failed.
 * s is an exclusive lease, the DAG's root: nodes of other branches run on more exclusive leases
 * of s's device (at most TDM_DAG_MAX_STREAMS streams in all, no more than the DAG's width),
 * taken while the device has a stream to spare for shared leases and released before the call
 * returns; with none to be had every node runs on s, in id order: correct, less concurrent.
 * How it ran, in tdm_dag_stats.last: TDM_GRAPH_DIRECT (lowered: callbacks called, copies and
 * memsets enqueued; also every run where the backend has no graphs, or after a capture was
 * refused, until the structure changes), TDM_GRAPH_INSTANTIATED (captured into a new graph,
 * launched on s), TDM_GRAPH_UPDATED (captured again after a parameter change, the graph updated
 * in place, launched) or TDM_GRAPH_REPLAYED (the graph launched as it was: no callback called, no
 * other lease taken). A run may follow the previous one on s before that one is done (stream
 * order keeps them apart); on another root stream, only once it is done.
 * At once, the task's result set to the same errno: -EINVAL: t is not the task running on this
 * thread, s or d is NULL, d destroyed or no DAG's handle, s is released, shared or of another GPU
 * layer.  -EBUSY: s is capturing (its capture is abandoned), or another call holds d (a run on
 * another thread, or a call from one of this run's own callbacks).  A callback's negative
 * result, or an enqueue's error (-EIO, -ENOMEM, -EINVAL): the work enqueued before it was joined
 * into s, so an await of s covers it; await it before reusing the nodes' memory.  The errors of
 * tdm_await_stream.
 */
int tdm_dag_run(tdm_task *t, tdm_stream *s, tdm_dag *d);

typedef struct tdm_dag_stats {
	int last;          /* how the last run went (above); 0: none yet, or it failed */
	unsigned nodes;    /* in d */
	unsigned width;    /* lanes its lowering spreads over, the streams it could use (0 before
	                      the first run of its structure) */
	unsigned streams;  /* streams the last lowering or capture used, s among them */
	uint64_t runs;     /* runs that enqueued their work */
	uint64_t lowered;  /* ... as TDM_GRAPH_DIRECT */
	uint64_t captured; /* ... as TDM_GRAPH_INSTANTIATED */
	uint64_t updated;  /* ... as TDM_GRAPH_UPDATED */
	uint64_t replayed; /* ... as TDM_GRAPH_REPLAYED */
} tdm_dag_stats;
/* -EINVAL: d or out is NULL, d destroyed.  -EBUSY: another call holds d. */
int tdm_dag_stats_get(const tdm_dag *d, tdm_dag_stats *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_GRAPH_H */
