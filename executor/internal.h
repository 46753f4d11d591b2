// SPDX-License-Identifier: MIT
/*
 * The executor's internal header: the layout of executors, workers and tasks. Nothing here is
 * API, and nothing outside executor/ includes it but the executor's own tests: awaitables go
 * through the seam, await.h.
 *
 * Lock rules: the only lock on a worker's path is the idle lock (ex->idle_lock), taken to park,
 * to wake a sleeper and to decide termination; the task pool lock is taken only to move batches
 * of free tasks. No thread ever holds both.
 */
#ifndef TDM_INTERNAL_H
#define TDM_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ck_ec.h>

#include "await.h"
#include "base/cpu.h"
#include "base/ec.h"
#include "base/gate.h"
#include "base/stack.h"
#include "deque.h"
#include "tandem.h"

/* ---- tasks ---- */

enum {
	TDM__TASK_RESUMABLE = 1u << 0, /* fn is a tdm_resume_fn, re-entered after awaits */
	/* The trace (worker.c): a flow (spawn or await) is open into the task's next run; the open
	 * one is an await's; bits 8-15: the task's flow generation. */
	TDM__TASK_FLOW = 1u << 1,
	TDM__TASK_FLOW_AWAIT = 1u << 2,
};

/* A resumable task's run state: who owns it between an await and its wake-up. */
enum {
	TDM__RUNNING = 0, /* a worker runs it */
	TDM__PARKED = 1,  /* suspended: the waker owns it and will enqueue it */
	TDM__WOKEN = 2,   /* woken before its worker finished suspending it: resume at once */
};

struct tdm__group;

/* One cache line. Allocated from per-worker caches over the executor's slabs. */
struct tdm__task {
	/* First: the await slot (await.h), seen here by its members' own names. link: injection
	 * queue, inboxes, free lists, and an awaitable's lists while the task is suspended; the
	 * await words: the awaitable's then. */
	union {
		struct tdm__await aw;
		struct {
			struct tdm__link link;
			void *await_obj;
			uint64_t await_seq;
		};
	};
	union {
		tdm_fn fn;
		tdm_resume_fn resume;
	};
	void *arg;
	struct tdm__group *group;
	_Atomic uint32_t rstate;
	uint16_t flags;
	uint16_t home; /* worker that last ran it; where a wake sends it */
	unsigned pc;   /* resume point (TDM_AWAIT) */
	int32_t result;
};

_Static_assert(offsetof(struct tdm__task, aw) == 0 &&
                   offsetof(struct tdm__task, link) == offsetof(struct tdm__await, link) &&
                   offsetof(struct tdm__task, await_obj) == offsetof(struct tdm__await, obj) &&
                   offsetof(struct tdm__task, await_seq) == offsetof(struct tdm__await, seq),
               "a task starts with its await slot (await.h)");

/* ---- task groups (layout behind tdm_group) ---- */

#define TDM__GROUP_MAGIC 0x7464676du /* "tdgm" */

struct tdm__group {
	struct tdm_executor *ex;
	/* Tasks not finished, plus one held by the waiter until it waits (see group.c). */
	_Atomic int64_t pending;
	/* NULL, a blocked waiter's record, or TDM__GROUP_DONE once the count reached zero. */
	_Atomic(uintptr_t) waiter;
	/* What the wait returns: 0, -ECANCELED once a task was cancelled, else the first nonzero
	 * value a task finished with (group.c). */
	_Atomic int32_t result;
	uint32_t magic;
};

#define TDM__GROUP_DONE ((uintptr_t)1)
#define TDM__WAITER_TASK ((uintptr_t)2) /* tag bit: waiter is a suspended resumable task */
/* An awaiting task took the slot and has not published itself yet (tdm_await_group). */
#define TDM__WAITER_CLAIMED ((uintptr_t)3)

/* A task of g finished with result: -ECANCELED when shutdown cancelled it, 0 for a plain task. */
void tdm__group_task_done(struct tdm__group *g, int result);

/* ---- workers ---- */

struct tdm__worker_counters {
	_Atomic uint64_t tasks_run, tasks_cancelled, steals_tried, steals_won, injected, inbox,
	    parks, wakeups, parks_last;
};

/* Owner-only increment: a plain load and store, readers see a possibly stale value. */
#define tdm__count(w, field)                                                                       \
	atomic_store_explicit(&(w)->stats.field,                                                   \
	                      atomic_load_explicit(&(w)->stats.field, memory_order_relaxed) + 1,   \
	                      memory_order_relaxed)

/*
 * An await a worker keeps to itself while it has nothing else to do (tdm__task_hold): it looks
 * at the await's completion in its spin instead of waiting for the await's waker to find it.
 */
struct tdm__held {
	struct tdm__task *t; /* NULL: none */
	/* Called by the holding worker only. 1: over, the result in *rc, and the await's own
	 * bookkeeping done (its waker will never see it); 0: not yet. */
	int (*poll)(struct tdm__task *t, int *rc);
	/* Gives the await to its usual waker, as if it had never been held. */
	void (*handoff)(struct tdm__task *t);
};

struct tdm__worker {
	struct tdm__deque deque; /* cache-line aligned inside */

	/* Written by other threads (wakers): a line of its own. */
	_Alignas(TDM__CACHELINE) struct tdm__stack inbox;
	_Alignas(TDM__CACHELINE) struct ck_ec32 ec; /* parking: one sleeper, this worker */
	_Atomic bool notified;                      /* set by the waker before ec is bumped */

	/* Owner only from here. */
	_Alignas(TDM__CACHELINE) struct tdm_executor *ex;
	unsigned index;
	bool searching;
	uint32_t tick;
	uint64_t rng;
	struct tdm__link *free; /* task cache */
	unsigned nfree;
	unsigned depth;        /* tasks running on this thread: 2 and more inside a group wait */
	struct tdm__held held; /* at most one await, held only by the worker loop's own task */
	pthread_t thread;
	struct tdm__worker_counters stats;
};

/*
 * Slabs are TDM__SLAB_BYTES long and aligned to their size, their executor first, so a task finds
 * its executor by masking its own address (tdm__task_executor, await.h): tasks need no executor
 * pointer of their own.
 */
struct tdm__slab {
	struct tdm_executor *ex;
	struct tdm__slab *next;
};
_Static_assert(offsetof(struct tdm__slab, ex) == 0, "a slab's first word is its executor");

struct tdm_executor {
	struct tdm__worker *workers;
	unsigned nworkers;
	uint32_t id; /* serial number, never 0: what a notification knows of its executor */
	unsigned max_searching;
	tdm_config cfg;
	char name_prefix[16];

	/* Submissions from threads that are not workers. */
	_Alignas(TDM__CACHELINE) struct tdm__stack inject;

	/*
	 * Idle accounting as in Tokio's scheduler: the number of workers searching for work
	 * (low 16 bits) and the number not parked (high 16 bits), changed atomically so that a
	 * publisher can decide with one load whether anyone must be woken.
	 */
	_Alignas(TDM__CACHELINE) _Atomic uint32_t idle_state;
	pthread_mutex_t idle_lock;
	unsigned nsleepers; /* idle_lock */
	unsigned *sleepers; /* idle_lock: stack of parked worker indices */
	bool submit_closed; /* idle_lock: destroy saw no outside submission in flight */

	_Alignas(TDM__CACHELINE) _Atomic int shutdown; /* destroy has begun */
	_Atomic int cancelling;                        /* ... in TDM_SHUTDOWN_CANCEL mode */
	_Atomic int terminate;                         /* workers must exit */
	_Atomic int64_t suspended;                     /* tasks suspended in an await */
	/* Holds taken (tdm__hold; termination waits for their release), the awake ones among
	 * them, and the worker that keeps awake for those: its index + 1, 0 when none. */
	_Atomic unsigned holds;
	_Atomic unsigned awake_holds;
	_Atomic unsigned keeper;
	/* Tasks suspended on a notification, and whether new ones are refused (resumable.c, both
	 * under its process-wide lock): for tdm_executor_destroy in TDM_SHUTDOWN_CANCEL. */
	struct tdm__task *notify_waiters;
	bool notify_closed;

	/* Submissions from outside threads and holds in flight, closed by shutdown (the gate:
	 * base/gate.h). */
	struct tdm__gate outside;

	/* The trace's "ready tasks" counter (worker.c, tdm__ready_sample): its track, the lock
	 * that makes one sampler at a time its writer, and when the next sample is due. */
	pthread_mutex_t ready_lock;
	struct tdm__track *ready_track; /* ready_lock */
	_Atomic uint64_t ready_next;    /* relaxed: a hint of when to look again */

	/* Task memory: free tasks beyond the workers' caches, and every slab for destroy. */
	_Alignas(TDM__CACHELINE) pthread_mutex_t pool_lock;
	struct tdm__link *pool_free; /* pool_lock */
	struct tdm__slab *slabs;     /* pool_lock */
};

#define TDM__IDLE_SEARCHING 1u
#define TDM__IDLE_UNPARKED (1u << 16)
#define tdm__idle_searching(s) ((s)&0xffffu)
#define tdm__idle_unparked(s) ((s) >> 16)

/* The worker the calling thread is, or NULL. */
extern _Thread_local struct tdm__worker *tdm__self;

static inline struct tdm__worker *tdm__self_of(const struct tdm_executor *ex)
{
	struct tdm__worker *w = tdm__self;
	return (w != NULL && w->ex == ex) ? w : NULL;
}

/* worker.c: while tracing, samples the tasks queued in ex's deques into the trace's "ready
 * tasks" counter, at most once a millisecond (whichever worker comes first). */
void tdm__ready_sample(struct tdm_executor *ex);

/* task.c */
struct tdm__task *tdm__task_alloc(struct tdm_executor *ex, struct tdm__worker *w);
void tdm__task_free(struct tdm_executor *ex, struct tdm__worker *w, struct tdm__task *t);
void tdm__task_pool_fini(struct tdm_executor *ex);

/* executor.c */
/* Exactly one of fn and resume is set. */
int tdm__submit_to(struct tdm_executor *ex, tdm_fn fn, tdm_resume_fn resume, void *arg,
                   struct tdm__group *g);

/* worker.c */
void *tdm__worker_main(void *arg);
int tdm__enqueue(struct tdm_executor *ex, struct tdm__task *t);
void tdm__run_task(struct tdm__worker *w, struct tdm__task *t);
struct tdm__task *tdm__find_task(struct tdm__worker *w, bool steal);
void tdm__after_local_push(struct tdm__worker *w);

/* park.c */
void tdm__notify_parked(struct tdm_executor *ex);
/* Ends w's sleep (or its next one): the flag carries the ordering, the event count the wake. */
void tdm__unpark(struct tdm__worker *w);
bool tdm__work_pending(struct tdm_executor *ex);
void tdm__try_terminate(struct tdm_executor *ex);
/* Drops the suspended count by n (tasks woken); the caller's last access to the executor. */
void tdm__suspended_done(struct tdm_executor *ex, unsigned n);
/* bounded: at most max_searching searchers; the keeper of an awake hold passes unbounded. */
bool tdm__transition_to_searching(struct tdm__worker *w, bool bounded);
void tdm__transition_from_searching(struct tdm__worker *w);
bool tdm__park(struct tdm__worker *w);

/* resumable.c, for tdm_executor_destroy in TDM_SHUTDOWN_CANCEL. Close: takes every task of ex
 * suspended on a notification off it (the notification is unfired and unawaited again) and
 * makes later awaits of unfired notifications on ex say -ECANCELED at once; before `cancelling`
 * is set, while no on_cancel has run (one may free a notification a cancelled task would have
 * fired). Cancel: wakes those tasks with -ECANCELED, once `cancelling` is set (they are then
 * reported to on_cancel, not resumed). */
struct tdm__task *tdm__notify_close(struct tdm_executor *ex);
void tdm__notify_cancel(struct tdm__task *waiters);

extern _Thread_local struct tdm__task *tdm__current;

#endif /* TDM_INTERNAL_H */
