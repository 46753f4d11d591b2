// SPDX-License-Identifier: MIT
/*
 * tandem: a C11 task runtime for host programs that keep many GPU tasks in flight.
 *
 * This header owns the public API of the CPU executor: its life and config, submission, task
 * groups, resumable tasks and their awaits, host notifications, statistics and errors. Names with
 * the `tdm_` prefix are API; names with `tdm__` are private even where they appear here. Every
 * call that can fail returns 0 or a negative errno value; tdm_strerror() turns any such code into
 * a message. A call that fails has no effect and leaves the executor usable. Why the executor is
 * built as it is: docs/design/executor.md.
 */
#ifndef TANDEM_H
#define TANDEM_H

#include <errno.h> /* the codes tandem returns, negated */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is what it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define TDM_VERSION_MAJOR 0
#define TDM_VERSION_MINOR 6
#define TDM_VERSION_PATCH 0

/* Largest number of workers one executor may have. */
#define TDM_MAX_WORKERS 1024

typedef struct tdm_executor tdm_executor;

/* A task: a function and its argument, run once on some worker. */
typedef void (*tdm_fn)(void *arg);

/*
 * Called once for each task that shutdown cancels instead of running (TDM_SHUTDOWN_CANCEL), on
 * the thread that cancels it, so that the owner of `arg` can release it. It must not submit work.
 * For a resumable task (tdm_spawn) fn is NULL and arg is its argument: one not yet started, or
 * one woken from an await after the shutdown began (it is not resumed; whatever it held across
 * the await, a stream lease included, is for on_cancel to release). A task whose await was over
 * before it had returned from the await call goes on running instead, as if it had not waited. It
 * may fire tdm_notify handles, and free them. Tasks awaiting a notification when the destroy
 * begins are taken off it (it is unfired and unawaited again) before any task is reported
 * cancelled, then reported here too (nothing may fire them any more: the task that would have
 * may be cancelled); an unfired notification awaited after the destroy began says -ECANCELED
 * at once.
 */
typedef void (*tdm_cancel_fn)(void *user, tdm_fn fn, void *arg);

/* What tdm_executor_destroy() does with tasks that are queued and have not started. */
typedef enum tdm_shutdown_mode {
	/* Run every queued task, and every task those tasks spawn, then stop. The default. */
	TDM_SHUTDOWN_DRAIN = 0,
	/*
	 * Let running tasks finish; every task not yet started (queued, or spawned during the
	 * shutdown) is reported to on_cancel instead of run, and counted in tasks_cancelled. A task
	 * group whose tasks were cancelled reports -ECANCELED from tdm_group_wait().
	 */
	TDM_SHUTDOWN_CANCEL = 1,
} tdm_shutdown_mode;

typedef struct tdm_config {
	/* Worker threads. 0: one per CPU this process may run on (sched_getaffinity). */
	unsigned workers;
	/* Nonzero: pin worker i to the i-th CPU (round robin) of `cpus`, or of the process's
	 * affinity mask when cpus is NULL. */
	int pin_workers;
	/* The CPUs the workers may use, as a list ("0-15,32-47"); NULL: the affinity mask. With
	 * workers == 0 there is one worker per CPU of the list. To run near a GPU, pass the list
	 * tdm_gpu_device_info() reports as pin_cpus. Must lie within the affinity mask. */
	const char *cpus;
	/* Worker thread names are "<prefix><index>", cut to 15 bytes. NULL: "tdm-w". */
	const char *thread_name_prefix;
	/* Workers allowed to look for work (steal) at once. 0: half the workers, at least 1. */
	unsigned max_searching;
	tdm_shutdown_mode shutdown;
	tdm_cancel_fn on_cancel; /* may be NULL */
	void *on_cancel_user;
} tdm_config;

/* Fills *cfg with the defaults documented above; does nothing when cfg is NULL. */
void tdm_config_init(tdm_config *cfg);

/*
 * Starts an executor and its workers. cfg may be NULL for the defaults.
 * -EINVAL: out is NULL, workers > TDM_MAX_WORKERS, max_searching > workers, shutdown is not a
 *          tdm_shutdown_mode, or cpus is malformed, empty, or outside the affinity mask; the
 *          field and its value are named on stderr and in tdm_error_detail.
 * -ENOMEM: out of memory.   -EAGAIN: a worker thread could not be started.
 */
int tdm_executor_create(tdm_executor **out, const tdm_config *cfg);

/*
 * Finishes or cancels every task (see tdm_shutdown_mode), joins every thread and frees
 * everything. Must not be called from one of the executor's own workers (-EDEADLK). Tasks
 * spawned by running tasks are still accepted and run or cancelled. Other threads may go on
 * submitting (tdm_submit, tdm_group_spawn, tdm_spawn) while it runs: once it began they get
 * -ESHUTDOWN, and it frees ex only after every submission that entered ex has returned. It
 * cannot wait for a submission it never saw: none may begin once the destroy may have returned,
 * so a thread that submits while a destroy runs must be done with its last submission before
 * something the destroy waits for is over (a task of ex still running, a notification awaited
 * in TDM_SHUTDOWN_DRAIN). Other calls into ex from other threads must be over before the
 * destroy begins.
 * -EINVAL: ex is NULL.
 */
int tdm_executor_destroy(tdm_executor *ex);

/* Number of workers of ex, or -EINVAL. */
int tdm_executor_workers(const tdm_executor *ex);

/* Index of the calling thread among ex's workers, or -1 when it is not one of them. */
int tdm_worker_index(const tdm_executor *ex);

/*
 * Runs fn(arg) once on some worker. From a worker of ex the task goes to that worker's own
 * deque (cheapest); from any other thread, through the injection queue, which never fills.
 * -EINVAL: ex or fn is NULL.  -ENOMEM: no memory for the task.  -ESHUTDOWN: ex is being
 * destroyed and the caller is not one of its workers.
 */
int tdm_submit(tdm_executor *ex, tdm_fn fn, void *arg);

/*
 * A task group: fork-join. The caller owns its memory (a stack variable is typical); its layout
 * is private. Tasks spawned into a group may spawn more into the same group. One thread at a
 * time waits on a group; after a wait returns the group may be reused or simply dropped.
 */
typedef struct tdm_group {
	uint64_t tdm__opaque[4];
} tdm_group;

/* Makes g on fresh memory (nothing of *g is read). After tdm_group_wait returns, g is reused as
 * it is, its result 0 again; after tdm_await_group, initialise it again. Initialising it while
 * tasks spawned into it run, or a task awaits it, loses them.  -EINVAL: g or ex is NULL. */
int tdm_group_init(tdm_group *g, tdm_executor *ex);

/* Like tdm_submit(), counted in g. Same errors; -EINVAL also when g is NULL or not
 * initialised. */
int tdm_group_spawn(tdm_group *g, tdm_fn fn, void *arg);

/*
 * Returns once every task spawned into g has finished. On a worker of g's executor the wait runs
 * other tasks meanwhile and never blocks the thread; on any other thread it blocks.
 * The group's result: -ECANCELED when at least one task was cancelled by shutdown (or returned
 * -ECANCELED itself), whatever the others returned; else the first nonzero value, in the order
 * the tasks finished, that a resumable task of g returned (tdm_spawn into g: tasks return 0 or
 * a negative errno by convention, and any other value is passed on as it is); else 0. Plain
 * tasks (tdm_group_spawn) count as 0.  -EINVAL: g is NULL or not initialised.
 */
int tdm_group_wait(tdm_group *g);

/*
 * Resumable tasks: async/await in C.
 *
 * A resumable task is a function re-entered after each await until it finishes. The macros make
 * it read top to bottom, in the manner of protothreads:
 *
 *     struct job { int i; tdm_stream *s; };           // everything that lives across awaits
 *     static int job(tdm_task *t, void *arg) {
 *             struct job *j = arg;
 *             TDM_BEGIN(t);
 *             ... enqueue GPU work on j->s ...
 *             TDM_AWAIT(t, tdm_await_stream(t, j->s));
 *             if (tdm_task_result(t) != 0) ...        // the await's outcome
 *             TDM_END(t);
 *     }
 *
 * The one rule: a local variable does not survive an await (the function returns and is called
 * again); what must live across an await lives in the task's state (`arg`). TDM_AWAIT may not
 * appear inside a `switch` of the task's own, and each TDM_AWAIT must be on its own line.
 *
 * The function returns TDM_PENDING only through TDM_AWAIT; any other value finishes the task and
 * is its result (0 or a negative errno), which a task spawned into a group hands to the group
 * (tdm_group_wait, tdm_await_group). A task resumes on the worker that suspended it unless an
 * idle worker steals it first.
 */
typedef struct tdm_task tdm_task;
typedef int (*tdm_resume_fn)(tdm_task *t, void *arg);

#define TDM_PENDING 1   /* returned by a resume function that awaits */
#define TDM_SUSPENDED 1 /* returned by a tdm_await_* call that suspended the task */

#if defined(__GNUC__) || defined(__clang__)
#define TDM__FALLTHROUGH __attribute__((fallthrough))
#else
#define TDM__FALLTHROUGH ((void)0)
#endif

#define TDM_BEGIN(t)                                                                               \
	switch (*tdm_task_pc(t)) {                                                                 \
	case 0:
#define TDM_AWAIT(t, call)                                                                         \
	do {                                                                                       \
		*tdm_task_pc(t) = __LINE__;                                                        \
		if ((call) == TDM_SUSPENDED)                                                       \
			return TDM_PENDING;                                                        \
		TDM__FALLTHROUGH;                                                                  \
	case __LINE__:;                                                                            \
	} while (0)
#define TDM_END(t)                                                                                 \
	}                                                                                          \
	return 0

/* Where the macros keep the resume point: for TDM_BEGIN and TDM_AWAIT only. */
unsigned *tdm_task_pc(tdm_task *t);

/*
 * Starts a resumable task: fn(t, arg) runs on a worker and again after each await until it
 * returns something other than TDM_PENDING. g may be NULL; else the task counts in g until it
 * finishes, and what it returned goes into the group's result (tdm_group_wait). Errors as
 * tdm_submit(); -EINVAL also when g is not a group initialised on ex (one of another executor,
 * or one not initialised).
 */
int tdm_spawn(tdm_executor *ex, tdm_resume_fn fn, void *arg, tdm_group *g);

/*
 * The outcome of the task's last await: 0, or the negative errno it resumed with (-EIO for a
 * failed GPU operation, -ECANCELED for a shutdown; after tdm_await_group, the group's result;
 * -ETIMEDOUT is never an error for deadlines: they resume with 0). An await call that fails at
 * once (a tdm_await_* here or in tandem_gpu.h that returns a negative errno) sets it to that
 * errno. -EINVAL: t is NULL.
 */
int tdm_task_result(const tdm_task *t);

/* The executor running t; NULL when t is NULL. */
tdm_executor *tdm_task_executor(const tdm_task *t);

/*
 * Awaits a task group: resumes t once every task spawned into g finished, with the group's
 * result (as tdm_group_wait returns it) as tdm_task_result. Returns TDM_SUSPENDED, or, when that
 * already holds, the result at once (the task continues without suspending). Afterwards the
 * group must be re-initialised before it is used again. -EINVAL: t is NULL or not the task
 * running on the calling thread, or g is NULL, not initialised, or of another executor than
 * t's (g is left as it was).  -EBUSY: another task already awaits g (or awaited it, and g was
 * not re-initialised since).
 */
int tdm_await_group(tdm_task *t, tdm_group *g);

/*
 * A one-shot host notification that any thread may fire, and at most one task awaits at a time.
 * Once fired it stays fired until tdm_notify_reset().
 */
typedef struct tdm_notify {
	uint64_t tdm__opaque[2];
} tdm_notify;

/* Makes n on fresh memory (nothing of *n is read), for tasks of ex to await (any thread may fire
 * it). To use it again, tdm_notify_reset: initialising a notification that a task awaits would
 * lose that task.  -EINVAL: n or ex is NULL. */
int tdm_notify_init(tdm_notify *n, tdm_executor *ex);
/* Unfired again, for reuse.  -EINVAL: n is NULL or not initialised.  -EBUSY: a task awaits n
 * (not fired yet): starting it over would lose that task. */
int tdm_notify_reset(tdm_notify *n);
/* Fires n, resuming its awaiting task if there is one: tdm_notify_fire_result(n, 0).
 * -EINVAL: n is NULL or not initialised. */
int tdm_notify_fire(tdm_notify *n);
/*
 * Fires n with a result: its awaiting task resumes with `result` as tdm_task_result, and so does
 * a task that awaits n later, until tdm_notify_reset (the await then returns it at once). A
 * second fire before a reset replaces the result for awaits that come after it. For a layer
 * that completes its own operations and hands their outcome on (tandem_mpi.h: -EIO,
 * -ECANCELED), and for an await call that must fail at once: fire a notification of its own
 * with the error, then await it. Since 0.5.0.
 * -EINVAL: n is NULL or not initialised, or result > 0 (results are 0 or a negative errno).
 */
int tdm_notify_fire_result(tdm_notify *n, int result);
/* TDM_SUSPENDED, or, at once when n has fired, the result it was fired with (0 by
 * tdm_notify_fire), which is also tdm_task_result. -EINVAL: t is NULL or not the task running on
 * the calling thread, or n is NULL, not initialised, or initialised on another executor than
 * t's.  -EBUSY: another task already awaits n.
 * -ECANCELED: n is unfired and the executor's destroy began in TDM_SHUTDOWN_CANCEL (a task
 * suspended on n then is reported to on_cancel instead of resumed). In TDM_SHUTDOWN_DRAIN
 * the destroy waits for every awaited notification to be fired. */
int tdm_await_notify(tdm_task *t, tdm_notify *n);

/* Per-worker counters, each written only by its worker and read without stopping it. */
typedef struct tdm_worker_stats {
	uint64_t tasks_run;       /* tasks executed */
	uint64_t tasks_cancelled; /* tasks reported cancelled at shutdown */
	uint64_t steals_tried;    /* attempts to take a task from another worker */
	uint64_t steals_won;      /* attempts that got one */
	uint64_t injected;        /* tasks taken from the injection queue */
	uint64_t inbox;           /* tasks taken from an inbox */
	uint64_t parks;           /* times the worker went to sleep */
	uint64_t wakeups;         /* times it was woken to look for work */
	uint64_t parks_last;      /* parks that left every worker asleep: the next task (a woken
	                             one among them) waits for a futex wake-up */
} tdm_worker_stats;

/* -EINVAL: ex or out is NULL, or worker >= tdm_executor_workers(ex). */
int tdm_executor_stats(const tdm_executor *ex, unsigned worker, tdm_worker_stats *out);

/*
 * A trace of what the process's workers do, written as Chrome trace-event JSON that Perfetto
 * (ui.perfetto.dev) and chrome://tracing open: per thread, each task run as a span named by its
 * function (from the program's symbol table, static functions too), worker sleeps, and arrows
 * from a task's spawn and from each of its awaits to the run that takes it up
 * (docs/guide/tracing.md; docs/design/observe.md, "Trace").
 *
 * The file is written as the run goes: each thread records into chunks of its own, with no
 * lock, and a writer thread appends them to the file every 100 ms and whenever a chunk fills,
 * in Chrome's JSON array form ("[" then events, each followed by a comma), which the viewers
 * read unterminated: a program that hangs, is killed or crashes leaves a trace up to the last
 * write. The stop ends the file and turns it into the object form {"traceEvents":[...],
 * "otherData":{...}} with the counts: "dropped" (events lost: a thread got 8 chunks ahead of
 * the writer, or had no memory; it then records nothing more until the stop, and the count is
 * printed to stderr), "untimed" (GPU launches the trace did not time, to bound its cost) and
 * "gpu_spans_lost". TANDEM_TRACE_EVENTS sets the events per chunk (65536 by default, 24 bytes
 * each), read at tdm_trace_start. One trace per process at a time, which records every thread
 * of the process.
 *
 * TANDEM_TRACE=path in the environment traces from tdm_executor_create to tdm_executor_destroy
 * (for the first executor created while no trace runs), with no code change.
 *
 * tdm_trace_start opens (creates, truncates) the file: -EINVAL: ex or path is NULL, path is
 * empty, or TANDEM_TRACE_EVENTS is not a number from 1 to 2^26 (named with its value on stderr
 * and in tdm_error_detail).  -EALREADY: a trace runs (this executor's or another's).  open's
 * errors, negated: -ENOENT (no such folder), -EACCES (not allowed), -EISDIR (path is a folder),
 * -ENAMETOOLONG, -EROFS, ... (tdm_strerror names each).  -EAGAIN: no thread for the writer.
 * -ENOMEM.
 */
int tdm_trace_start(tdm_executor *ex, const char *path);

/*
 * Writes to the file, before it returns, every event recorded so far (from any thread), with
 * the spans of GPU work already launched (waiting for that work, up to 2 s per GPU layer): a
 * point that a crash or a kill after it cannot take from the trace. A run still open is written
 * at its end, a flow once both its ends are in. Any thread, a task's too.
 * -EINVAL: ex is NULL or runs no trace.  write's errors, negated (-ENOSPC, -EIO, ...): the
 * file's first error, which the stop returns too.  -ENOMEM: this flush left some flows out.
 */
int tdm_trace_flush(tdm_executor *ex);

/*
 * Stops the trace ex started and ends its file (a destroy does both for a trace ex still
 * owns). The trace stops even when the file fails.  -EINVAL: ex is NULL or runs no trace.
 * write's errors, negated (-ENOSPC, -EFBIG, -EIO, ...): the file's first error. A flow left
 * out for want of memory is not an error of the stop (tdm_trace_flush reports its own).
 */
int tdm_trace_stop(tdm_executor *ex);

/* CLOCK_MONOTONIC now, in nanoseconds: the clock of deadlines (tdm_await_deadline). */
uint64_t tdm_now_ns(void);

/*
 * Names a task function in traces (tdm_trace_start) and NVTX ranges, in your words: every run
 * of fn is then shown as `name` (at most 63 bytes kept) instead of fn's symbol. Name it before
 * it first runs while observed: a function's name is taken once per process, at its first
 * observed run or at this call, and stays. -EINVAL: fn or name NULL, or name empty.
 * -EALREADY: fn has a name already (this call made before, or a run named it).  -ENOSPC: no
 * room for it in the table of names (256 slots, 8 looked at per function: a program with many
 * task functions; its runs are then named "task"). A name cut at 63 bytes loses a partial
 * UTF-8 character at its end.
 */
int tdm_task_name(tdm_fn fn, const char *name);
int tdm_resumable_name(tdm_resume_fn fn, const char *name);

/* A message for any value tandem returns; never NULL. */
const char *tdm_strerror(int err);

/*
 * What the last refusal of a configuration or of the environment on the calling thread was
 * about, or "": the field or variable, its value, why, and which call returned which errno, as in
 * "TANDEM_GPU=bogus: not one of cuda, sim, none (tdm_gpu_create returns -EINVAL)". Set by the
 * calls that check a config struct or read a TANDEM_* variable: tdm_executor_create,
 * tdm_gpu_prepare, tdm_gpu_create, tdm_trace_start, tdm_dsched_create and tdm_pipeline_run,
 * each of which clears it as it begins; any other call leaves it as it was. Also for -ENODEV from
 * tdm_gpu_create when the default backend (cuda) has no device: it says that TANDEM_GPU=sim runs
 * tandem's GPU simulator. The same text goes to stderr, after "tandem: ", once per process for
 * each distinct text. Never NULL; valid on this thread until its next such call.
 * docs/guide/errors.md lists every message. Since 0.6.0.
 */
const char *tdm_error_detail(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_H */
