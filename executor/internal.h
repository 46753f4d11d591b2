/*
 * The executor's internal header: the layout of executors, workers and tasks, and the one seam
 * through which the GPU layer plugs in ("here is a task that is suspended; here is how to wake
 * it"). Nothing here is API.
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
#include <stdint.h>

#include <ck_ec.h>

#include "deque.h"
#include "tandem.h"

#if defined(__x86_64__) || defined(__i386__)
#define tdm__cpu_relax() __builtin_ia32_pause()
#else
#define tdm__cpu_relax() ((void)0)
#endif

/*
 * An intrusive multi-producer stack whose consumer takes everything at once (the injection
 * queue and the inboxes). ck_stack offers the same (push_upmc, batch_pop_upmc) but loads its
 * head with plain volatile reads, which ThreadSanitizer reports as races; these few lines in C11
 * atomics are the same algorithm, checkable by the sanitizer. Taking the whole stack at once
 * is immune to ABA.
 */
struct tdm__link {
	struct tdm__link *next;
};

struct tdm__stack {
	_Atomic(struct tdm__link *) head;
};

/* Pushes first..last, already linked, at once. */
static inline void tdm__stack_push_chain(struct tdm__stack *s, struct tdm__link *first,
                                         struct tdm__link *last)
{
	struct tdm__link *h = atomic_load_explicit(&s->head, memory_order_relaxed);
	do
		last->next = h;
	/* Release: the links and the tasks behind them reach the consumer's acquire exchange. */
	while (!atomic_compare_exchange_weak_explicit(&s->head, &h, first, memory_order_release,
	                                              memory_order_relaxed));
}

static inline void tdm__stack_push(struct tdm__stack *s, struct tdm__link *e)
{
	tdm__stack_push_chain(s, e, e);
}

/* Newest first. Acquire pairs with the release CAS of every push it takes. */
static inline struct tdm__link *tdm__stack_take_all(struct tdm__stack *s)
{
	if (atomic_load_explicit(&s->head, memory_order_relaxed) == NULL)
		return NULL;
	return atomic_exchange_explicit(&s->head, NULL, memory_order_acquire);
}

static inline bool tdm__stack_empty(struct tdm__stack *s)
{
	return atomic_load_explicit(&s->head, memory_order_relaxed) == NULL;
}

/* ---- tasks ---- */

enum {
	TDM__TASK_RESUMABLE = 1u << 0, /* fn is a tdm_resume_fn, re-entered after awaits */
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
	struct tdm__link link; /* first: injection queue, inboxes, free lists, await FIFOs */
	union {
		tdm_fn fn;
		tdm_resume_fn resume;
	};
	void *arg;
	struct tdm__group *group;
	/* Owned by the layer the task awaits in (the GPU poller: its stream and sequence). */
	void *await_obj;
	uint64_t await_seq;
	_Atomic uint32_t rstate;
	uint16_t flags;
	uint16_t home; /* worker that last ran it; where a wake sends it */
	unsigned pc;   /* resume point (TDM_AWAIT) */
	int32_t result;
};

#define tdm__task_of(l) ((struct tdm__task *)(void *)(l))

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

	/* Written by other threads (wakers, the GPU poller): a line of its own. */
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
 * Slabs are TDM__SLAB_BYTES long and aligned to their size, so a task finds its executor by
 * masking its own address: tasks need no executor pointer of their own.
 */
#define TDM__SLAB_BYTES 32768u

struct tdm__slab {
	struct tdm__slab *next;
	struct tdm_executor *ex;
};

static inline struct tdm_executor *tdm__task_executor(const struct tdm__task *t)
{
	return ((const struct tdm__slab *)((uintptr_t)t & ~(uintptr_t)(TDM__SLAB_BYTES - 1)))->ex;
}

/*
 * A gate for calls that may race the destroy of what they use. A call enters, counted on its
 * thread's stripe (each stripe on its own line, so that concurrent callers do not share one),
 * unless `closed` is set; the destroyer stores `closed` (seq_cst), then waits until every stripe
 * is zero (tdm__gate_drain). Dekker: the entry's seq_cst increment, then its seq_cst load of
 * closed, against the destroyer's seq_cst store of closed, then its seq_cst loads of the
 * stripes: either the call sees closed and backs out, or the destroyer sees its count and waits
 * for its leave. A leave is release: what the call did happens before the drain returns.
 * tdm_executor_destroy gates outside submissions and holds; tdm_gpu_destroy, leases.
 */
#define TDM__GATE_STRIPES 32
struct tdm__gate {
	struct {
		_Alignas(TDM__CACHELINE) _Atomic unsigned n;
	} stripe[TDM__GATE_STRIPES];
};
/* This thread's stripe + 1 (0 until its first entry); taken in turn (tdm__gate_stripe_new). */
extern _Thread_local unsigned tdm__gate_mine;
unsigned tdm__gate_stripe_new(void);

/* The stripe entered, or NULL (nothing counted) when closed is set. Inline: stream leases
 * enter on every task. */
static inline _Atomic unsigned *tdm__gate_enter(struct tdm__gate *g, _Atomic int *closed)
{
	unsigned k = tdm__gate_mine != 0 ? tdm__gate_mine - 1 : tdm__gate_stripe_new();
	_Atomic unsigned *n = &g->stripe[k].n;
	/* Seq_cst, both: the Dekker pair with tdm__gate_drain's caller (above). */
	atomic_fetch_add_explicit(n, 1, memory_order_seq_cst);
	if (!atomic_load_explicit(closed, memory_order_seq_cst))
		return n;
	/* Release: pairs with the drain's loads. */
	atomic_fetch_sub_explicit(n, 1, memory_order_release);
	return NULL;
}

static inline void tdm__gate_leave(_Atomic unsigned *n)
{
	/* Release: pairs with the drain's loads; the caller's last access to what is gated. */
	atomic_fetch_sub_explicit(n, 1, memory_order_release);
}

void tdm__gate_drain(struct tdm__gate *g);

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
	_Atomic int64_t suspended;                     /* tasks held by the GPU layer */
	/* Holds taken (tdm__hold; termination waits for their release), the awake ones among
	 * them, and the worker that keeps awake for those: its index + 1, 0 when none. */
	_Atomic unsigned holds;
	_Atomic unsigned awake_holds;
	_Atomic unsigned keeper;
	/* Tasks suspended on a notification, and whether new ones are refused (resumable.c, both
	 * under its process-wide lock): for tdm_executor_destroy in TDM_SHUTDOWN_CANCEL. */
	struct tdm__task *notify_waiters;
	bool notify_closed;

	/* Submissions from outside threads and holds in flight, closed by shutdown. */
	struct tdm__gate outside;

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

/* task.c */
struct tdm__task *tdm__task_alloc(struct tdm_executor *ex, struct tdm__worker *w);
void tdm__task_free(struct tdm_executor *ex, struct tdm__worker *w, struct tdm__task *t);
void tdm__task_pool_fini(struct tdm_executor *ex);

/* executor.c */
/* "0-3,8" into set. -EINVAL when malformed or empty. */
int tdm__cpulist_parse(const char *list, cpu_set_t *set);
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
extern const struct ck_ec_mode tdm__ec_mode;
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

/*
 * The seam for the GPU layer (and every other awaitable). A resumable task that awaits calls
 * tdm__task_suspend() on itself while it runs, before it publishes itself to whoever will wake
 * it, and then returns TDM_SUSPENDED from the await call. Later, exactly once, any thread calls
 * tdm__task_wake() with the await's result: the task runs again on the worker that suspended it
 * (through its inbox), unless an idle worker steals it first. The wake may come before the task
 * has returned to its worker; the run states above make that safe. While tasks are suspended the
 * executor does not terminate.
 */
void tdm__task_suspend(struct tdm__task *t);
void tdm__task_wake(struct tdm__task *t, int result);
/* Several at once: one inbox push per worker and one wake-up decision for the batch. */
void tdm__task_wake_batch(struct tdm__task **tasks, const int *results, unsigned n);
/*
 * A wake is due soon (the GPU poller expects a completion): unless a worker is looking for work
 * already, wake a parked one (`home` if it is parked), so that the task is taken by a spinning
 * worker rather than after a futex wake-up. A hint: it publishes no work, and the woken worker
 * spins for its usual window, then parks again. True when it woke one.
 */
bool tdm__expect_wake(struct tdm_executor *ex, unsigned home);
/*
 * Awake holds: a user that knows completions will come soon and often for a while (a GPU
 * pipeline while it runs) takes a hold; while any hold is taken, one idle worker at a time, the
 * keeper, looks for work without parking, so that those completions are resumed by a worker
 * that is awake instead of after a futex wake-up (50-300 us on some virtual machines). The
 * worker that first idles past its usual spin takes the role and keeps it, running tasks in
 * between, until no hold is left; the others spin and park as usual. It costs one core while a
 * hold is taken, as a thread spinning in cudaStreamSynchronize does. Taking a hold wakes a
 * worker if none is looking for work, so that a keeper is awake before the holder's first task.
 * Every hold taken must be released: while one is taken the executor does not terminate
 * (which also keeps it alive for the release, the holder's last access to it), and the worker
 * holding the keeper role does not park: it searches even when max_searching others already do.
 * A hold is taken from outside the workers, so it goes through the outside gate as a submission
 * does: -ESHUTDOWN, and no hold, once tdm_executor_destroy has begun.
 *
 * With awake false the hold only keeps the executor from terminating (and alive) until its
 * release: for a caller that submits from outside over a while (a pipeline with no_spin) and
 * must not find the executor freed between two submissions. Release with the same awake.
 */
int tdm__hold(struct tdm_executor *ex, bool awake);
void tdm__release(struct tdm_executor *ex, bool awake);

/* resumable.c, for tdm_executor_destroy in TDM_SHUTDOWN_CANCEL. Close: takes every task of ex
 * suspended on a notification off it (the notification is unfired and unawaited again) and
 * makes later awaits of unfired notifications on ex say -ECANCELED at once; before `cancelling`
 * is set, while no on_cancel has run (one may free a notification a cancelled task would have
 * fired). Cancel: wakes those tasks with -ECANCELED, once `cancelling` is set (they are then
 * reported to on_cancel, not resumed). */
struct tdm__task *tdm__notify_close(struct tdm_executor *ex);
void tdm__notify_cancel(struct tdm__task *waiters);

/*
 * For an awaitable whose completion is cheap to look at (a completion word: one memory read),
 * called by t's await after tdm__task_suspend(t), instead of handing t to its waker: when t runs
 * on a worker's own loop (not inside a group wait), and that worker holds no other await and
 * has no task of its own queued, the worker keeps the await and returns true. It then looks at it
 * with poll while it spins for work, and runs t itself once poll says it is over: no other thread
 * on the round trip. It hands the await off (handoff) before it runs any other task and before it
 * parks. False: the caller hands t to its waker now.
 */
bool tdm__task_hold(struct tdm__task *t, int (*poll)(struct tdm__task *t, int *rc),
                    void (*handoff)(struct tdm__task *t));
struct tdm__task *tdm__task_cast(tdm_task *t); /* NULL unless t is a running resumable task */
extern _Thread_local struct tdm__task *tdm__current;

#endif /* TDM_INTERNAL_H */
