// SPDX-License-Identifier: MIT
/*
 * The executor's seam for awaitables: all that a layer which suspends tasks and wakes them later
 * (gpu/, and every later layer) may know of the executor. Such a layer includes this header and
 * no other of the executor's (docs/design/layout.md).
 *
 * A resumable task that awaits calls tdm__task_suspend() on itself while it runs, before it
 * publishes itself to whoever will wake it, and then returns TDM_SUSPENDED from the await call.
 * Later, exactly once, any thread calls tdm__task_wake() with the await's result: the task runs
 * again on the worker that suspended it (through its inbox), unless an idle worker steals it
 * first. The wake may come before the task has returned to its worker; the executor makes that
 * safe. While tasks are suspended the executor does not terminate.
 *
 * Between its suspend and its wake a task's await slot (struct tdm__await) is the awaitable's:
 * its link for the awaitable's lists, and two words for what the task awaits. Nothing else of a
 * task is.
 */
#ifndef TDM_EXECUTOR_AWAIT_H
#define TDM_EXECUTOR_AWAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/stack.h"
#include "tandem.h"

struct tdm__task; /* a resumable task: opaque but for its await slot */

/* A task's await slot: the awaitable's from tdm__task_suspend until the task is woken. */
struct tdm__await {
	struct tdm__link link; /* free while the task is suspended */
	void *obj;
	uint64_t seq;
};

/* The slot is the start of its task (executor/internal.h checks it), so the two convert by a
 * cast, as does a link taken from a stack of slots. */
static inline struct tdm__await *tdm__await_of(struct tdm__task *t)
{
	return (struct tdm__await *)(void *)t;
}
#define tdm__task_of(l) ((struct tdm__task *)(void *)(l))

/* NULL unless t is the resumable task running on the calling thread. */
struct tdm__task *tdm__task_cast(tdm_task *t);

/* Tasks live in slabs of TDM__SLAB_BYTES, aligned to their size, whose first word names their
 * executor: a task finds its executor by masking its own address. */
#define TDM__SLAB_BYTES 32768u

static inline struct tdm_executor *tdm__task_executor(const struct tdm__task *t)
{
	return *(struct tdm_executor *const *)(const void *)((uintptr_t)t &
	                                                     ~(uintptr_t)(TDM__SLAB_BYTES - 1));
}

/* The worker that last ran t, where a wake sends it (an index of its executor's workers). */
unsigned tdm__task_home(const struct tdm__task *t);

/* An await call that fails at once: t's result (tdm_task_result) is rc, which it returns. */
int tdm__task_fail(struct tdm__task *t, int rc);

void tdm__task_suspend(struct tdm__task *t);
void tdm__task_wake(struct tdm__task *t, int result);
/* Several at once, all of one executor: one inbox push per worker and one wake-up decision for
 * the batch. results NULL: all 0. */
void tdm__task_wake_batch(struct tdm__task **tasks, const int *results, unsigned n);

/*
 * A wake is due soon (the awaitable expects a completion): unless a worker is looking for work
 * already, wake a parked one (`home` if it is parked), so that the task is taken by a spinning
 * worker rather than after a futex wake-up. A hint: it publishes no work, and the woken worker
 * spins for its usual window, then parks again. True when it woke one.
 */
bool tdm__expect_wake(struct tdm_executor *ex, unsigned home);

/*
 * For an awaitable whose completion is cheap to look at (one memory read, say),
 * called by t's await after tdm__task_suspend(t), instead of handing t to its waker: when t runs
 * on a worker's own loop (not inside a group wait), and that worker holds no other await and
 * has no task of its own queued, the worker keeps the await and returns true. It then looks at
 * it with poll while it spins for work, and runs t itself once poll says it is over: no other
 * thread on the round trip. It hands the await off (handoff) before it runs any other task and
 * before it parks. False: the caller hands t to its waker now.
 *
 * poll is called by the holding worker only. 1: over, the result in *rc, and the await's own
 * bookkeeping done (its waker will never see it); 0: not yet. handoff gives the await to its
 * usual waker, as if it had never been held.
 */
bool tdm__task_hold(struct tdm__task *t, int (*poll)(struct tdm__task *t, int *rc),
                    void (*handoff)(struct tdm__task *t));

/*
 * Holds on an executor. While any is taken the executor does not terminate, which also keeps it
 * alive for the release (the holder's last access to it): for a caller that submits from
 * outside over a while and must not find the executor freed between two submissions. A hold is
 * taken from outside the workers, through the gate that outside submissions take: -ESHUTDOWN,
 * and no hold, once tdm_executor_destroy has begun. Every hold taken must be released, with the
 * same `awake`.
 *
 * An awake hold is for a user that knows completions will come soon and often for a while: one
 * idle worker at a time, the keeper, then looks for work without parking, so that those
 * completions are resumed by a worker that is awake instead of after a futex wake-up. The first
 * worker to go idle while a hold is taken takes the role and keeps it, running tasks in between,
 * until no awake hold is left; it searches even when max_searching others already do. It costs
 * one core while a hold is taken. Taking one wakes a worker if none is looking for work, so that
 * a keeper is awake before the holder's first task.
 */
int tdm__hold(struct tdm_executor *ex, bool awake);
void tdm__release(struct tdm_executor *ex, bool awake);

/*
 * The calling thread's place among an executor's workers: tdm__worker_index(ex) is its index
 * when it is a worker of ex, else -1 (tdm_worker_index, inline for hot paths that keep per-worker
 * state). Written by each worker thread for itself.
 */
struct tdm__worker_id {
	const struct tdm_executor *ex; /* NULL: not a worker */
	unsigned index;
};
extern _Thread_local struct tdm__worker_id tdm__worker_id __attribute__((visibility("hidden")));

static inline int tdm__worker_index(const struct tdm_executor *ex)
{
	return ex != NULL && tdm__worker_id.ex == ex ? (int)tdm__worker_id.index : -1;
}

/* The function of the task running on the calling thread (its tdm_fn or tdm_resume_fn, as an
 * integer; tdm__observe_fn_name names it), 0 outside a task: who took a lease, for the message of
 * a tdm_gpu_destroy that waits for it. */
uintptr_t tdm__task_fn_now(void);

#endif /* TDM_EXECUTOR_AWAIT_H */
