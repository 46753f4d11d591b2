// SPDX-License-Identifier: MIT
/*
 * What a run shows to observers: NVTX ranges and names for a profiler (Nsight Systems), and
 * tandem's own trace (base/trace.c, tdm_trace_start). Every hook is behind tdm__observing(), one
 * relaxed load of a word that stays zero unless an observer is on, so a run nobody watches pays a
 * predictable branch per hook and nothing else (docs/design/observe.md). The executor calls the
 * task and worker hooks, the GPU layer the poller, stream and mark hooks; observe.c dispatches to
 * the observers that are on. Without the NVTX header at build time (TANDEM_HAVE_NVTX unset) only
 * the trace turns them on.
 */
#ifndef TDM_BASE_OBSERVE_H
#define TDM_BASE_OBSERVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	TDM__OBS_NVTX = 1u << 0,  /* an NVTX tool is attached (NVTX_INJECTION64_PATH set) */
	TDM__OBS_TRACE = 1u << 1, /* a trace records (tdm_trace_start .. tdm_trace_stop) */
	/* some GPU layer's metrics are on (tdm_gpu_metrics_start .. stop, gpu/metrics.c) */
	TDM__OBS_METRICS = 1u << 2,
};

/* Which observers are on (TDM__OBS_*): NVTX's set once by tdm__observe_init (a release RMW), the
 * trace's set and cleared by tdm_trace_start/stop (release RMWs, base/trace.c), the metrics' by
 * tdm__observe_metrics (release RMWs). Read relaxed here: a hint whose change only decides
 * whether later hooks are reported. A hook that reports loads it again with acquire (observe.c,
 * tdm__tracing), which pairs with those RMWs; the metrics' hooks ask their layer instead
 * (tdm__metrics_on, gpu/stamps.h). */
extern _Atomic unsigned tdm__obs;

static inline bool tdm__observing(void)
{
	return atomic_load_explicit(&tdm__obs, memory_order_relaxed) != 0;
}

/* Whether the trace records; only after tdm__observing() said yes. Acquire: pairs with the
 * release RMW in tdm_trace_start, which publishes the trace's session before its bit. */
static inline bool tdm__tracing(void)
{
	return (atomic_load_explicit(&tdm__obs, memory_order_acquire) & TDM__OBS_TRACE) != 0;
}

/* What the trace records (base/trace.c): each a timestamp, a kind and one word. */
enum tdm__trace_kind {
	TDM__TR_RUN_BEGIN,  /* a task's run begins; word: its function */
	TDM__TR_RUN_END,    /* ... ends */
	TDM__TR_SPAWN,      /* a task is spawned (a flow starts); word: the flow's id */
	TDM__TR_SUSPEND,    /* a task suspends in an await (a flow starts); word: the flow's id */
	TDM__TR_FLOW_IN,    /* a run takes up the task's open flow; word: the flow's id */
	TDM__TR_PARK_BEGIN, /* a worker parks (sleeps) */
	TDM__TR_PARK_END,   /* ... and wakes */
	TDM__TR_LAUNCH,     /* a launch the GPU stamps (a flow to its GPU span); word: its id */
	TDM__TR_STEAL,      /* a worker stole a task; word: the victim's index */
	/* On tracks only (tdm__trace_track_*): a GPU span is three events in a row, GPU_SPAN (ts:
	 * the device start; word: the device end), GPU_INFO (ts: the launch's flow id; word:
	 * bytes << 8 | kind) and GPU_TASK (word: the task's next await flow, 0: none). */
	TDM__TR_GPU_SPAN,
	TDM__TR_GPU_INFO,
	TDM__TR_GPU_TASK,
	TDM__TR_COUNTER, /* word: value << 8 | enum tdm__trace_counter */
};

/* The counters a trace samples (the GPU layer's stamps thread, every millisecond or so). */
enum tdm__trace_counter {
	TDM__CTR_AWAITS,     /* GPU awaits outstanding */
	TDM__CTR_PINNED,     /* pinned host bytes in use */
	TDM__CTR_SWEEPS,     /* the poller's sweeps since the last sample */
	TDM__CTR_SLEEPS,     /* the poller's sleeps since the last sample */
	TDM__CTR_SPANS_LOST, /* GPU spans dropped (no stamp free) */
	TDM__CTR_UNTIMED,    /* launches left untimed to bound the trace's cost */
	TDM__CTR_READY,      /* tasks queued in an executor's deques */
	TDM__CTR_COUNT
};

/* A track of the trace that is not a thread: a GPU stream's spans, a layer's counters. Written
 * by one thread at a time (its owner serialises the writes with a lock of its own), at any time:
 * what is recorded while no trace runs is dropped at once. Open and close from any thread; a
 * track closed while a trace records stays until that trace is written. */
struct tdm__track;
struct tdm__track *tdm__trace_track_open(const char *name);
void tdm__trace_track_close(struct tdm__track *tr);
/* A GPU span (tdm_now_ns's clock): kind a gpu/stamps.h tdm__span_kind; launch: its launch
 * flow's id (TDM__TR_LAUNCH on the launching thread; ids with the top bit set, made unique by
 * gpu/stamps.c), 0 for none; task: the launching task's
 * next await flow (tdm__trace_await_flow), 0 for none. */
void tdm__trace_track_span(struct tdm__track *tr, uint64_t start, uint64_t end, unsigned kind,
                           uint64_t bytes, uint64_t launch, uint64_t task);
void tdm__trace_track_counter(struct tdm__track *tr, enum tdm__trace_counter c, uint64_t ts,
                              uint64_t value);
/* executor/worker.c: the flow id the running task's next await will have; 0 outside a task. */
uint64_t tdm__trace_await_flow(void);

/* Called at a trace's stop before it is written (with the trace still recording), for
 * whatever holds events not yet recorded: the GPU layers' stamps. Register and unregister from
 * any thread; unregister returns once no stop runs fn. */
void tdm__trace_flusher_add(void (*fn)(void *), void *arg);
void tdm__trace_flusher_remove(void (*fn)(void *), void *arg);

/* Records one event into the calling thread's buffer, with no lock: only where tdm__tracing()
 * said yes. A full buffer drops the event and counts it. */
void tdm__trace_record(enum tdm__trace_kind kind, uint64_t word);

/* For tests: while on, the trace's writer thread makes no pass of its own (tdm_trace_flush
 * and the stop still do), so that a thread's chunks pile up and it drops what comes after. */
void tdm__trace_writer_hold(bool on);

/* The calling thread's name in a trace (tdm__observe_thread stores it). */
void tdm__trace_thread_name(const char *name);

/* Whatever trace `ex` owns, started by TANDEM_TRACE or tdm_trace_start: executor.c calls the
 * first at create (TANDEM_TRACE=path starts one) and the second at destroy, once the workers
 * are joined (a trace that ex still owns is written then). */
void tdm__trace_executor_created(void *ex);
void tdm__trace_executor_destroyed(void *ex);

/* The name of a task function (fn cast as in tdm__observe_run_begin), from the name table that
 * NVTX's ranges use: dladdr once per function. */
void tdm__observe_fn_name(void (*fn)(void), char *out, size_t len);

/* Names the task function fn in the trace and NVTX, instead of its symbol: 0, or -EINVAL (fn 0,
 * name NULL or empty), -EALREADY (named already: by a call, or by a run seen while observed),
 * -ENOSPC (the table of names is full). tdm_task_name and tdm_resumable_name call it. */
int tdm__observe_name(uintptr_t fn, const char *name);

/* Looks once per process for the observers the environment asks for; any thread, any time
 * (idempotent). tdm_executor_create and tdm_gpu_create call it before they start threads. */
void tdm__observe_init(void);

/* The calling thread's name in the profiler and the trace: "tandem worker 3", "tandem poller".
 * Called whether or not anything observes (once per thread): a trace started later names the
 * thread too. */
void tdm__observe_thread(const char *name);

/*
 * A task's run on a worker begins (fn: the task's function, any type cast to this one, for its
 * name) and ends. Begin
 * returns the run's token, which the caller keeps on its own stack and hands to the matching end:
 * runs nest when a task waits for a group on its worker, and the C stack nests them for free. A
 * run is a start/end range, not a push/pop one: a resumed task may run on another thread.
 * The caller calls end exactly when it called begin (it reads tdm__observing() once per run).
 */
uint64_t tdm__observe_run_begin(void (*fn)(void));
void tdm__observe_run_end(uint64_t token);

/* A stream the GPU layer made: native is the backend's own handle (a cudaStream_t) or NULL
 * where there is none (sim), which nothing names. Named "tandem dev D normal|high K". */
void tdm__observe_stream(void *native, int device, bool high, unsigned index);

/* A point event: "tandem: device 0 failed". */
void tdm__observe_mark(const char *what);

/* A GPU layer's metrics go on (true) or off (false), in pairs: TDM__OBS_METRICS is set while at
 * least one layer of the process has them on (gpu/metrics.c). Any thread. */
void tdm__observe_metrics(bool on);

#endif /* TDM_BASE_OBSERVE_H */
