// SPDX-License-Identifier: MIT
/*
 * Task groups (fork-join).
 *
 * pending counts the group's unfinished tasks plus one reference held by the group's owner,
 * dropped when it waits. Whoever drops the count to zero finishes the group by exchanging
 * `waiter` to TDM__GROUP_DONE; that exchange is the last access any task makes to the group, so
 * a waiter that sees DONE may free the group at once (it usually lives on the waiter's stack).
 * A waiter on a worker runs other tasks until it sees DONE; any other waiter publishes a record
 * in `waiter` and sleeps on it, and the finisher signals that record.
 *
 * `result` is what the wait reports. A task that finishes with a nonzero value (a resumable
 * task's return value; -ECANCELED for a task that shutdown cancelled) writes it before its
 * decrement of pending, and the wait reads it after the last one: a value is taken only while
 * result is 0 (the first wins), except -ECANCELED (a cancelled task's, or one a task returned),
 * which replaces any value. Tasks that finish with 0, every plain task among them, do not touch
 * it.
 */
#include <errno.h>
#include <sched.h>

#include "internal.h"

_Static_assert(sizeof(struct tdm__group) <= sizeof(tdm_group), "tdm_group holds a tdm__group");
_Static_assert(_Alignof(struct tdm__group) <= _Alignof(tdm_group), "and is aligned for it");

struct blocked_waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done; /* lock */
};

static struct tdm__group *group_of(tdm_group *g)
{
	struct tdm__group *ig = (struct tdm__group *)(void *)g;
	return (g != NULL && ig->magic == TDM__GROUP_MAGIC && ig->ex != NULL) ? ig : NULL;
}

int tdm_group_init(tdm_group *g, tdm_executor *ex)
{
	if (g == NULL || ex == NULL)
		return -EINVAL;
	struct tdm__group *ig = (struct tdm__group *)(void *)g;
	ig->ex = ex;
	atomic_init(&ig->pending, 1);
	atomic_init(&ig->waiter, 0);
	atomic_init(&ig->result, 0);
	ig->magic = TDM__GROUP_MAGIC;
	return 0;
}

int tdm__group_add(tdm_group *g, tdm_fn fn, tdm_resume_fn resume, void *arg)
{
	struct tdm__group *ig = group_of(g);
	if (ig == NULL)
		return -EINVAL;
	/* Relaxed: the spawner holds a reference (its own task's, or the owner's), so the count
	 * cannot reach zero concurrently; the enqueue publishes the task itself. */
	atomic_fetch_add_explicit(&ig->pending, 1, memory_order_relaxed);
	int rc = tdm__submit_to(ig->ex, fn, resume, arg, ig);
	if (rc != 0)
		atomic_fetch_sub_explicit(&ig->pending, 1, memory_order_relaxed);
	return rc;
}

int tdm_group_spawn(tdm_group *g, tdm_fn fn, void *arg)
{
	if (fn == NULL)
		return -EINVAL;
	return tdm__group_add(g, fn, NULL, arg);
}

/* The group's result, once every task finished (the caller's decrement of pending acquired
 * theirs). Relaxed: that decrement orders the tasks' writes of result before this load. */
static int result_of(struct tdm__group *g)
{
	return atomic_load_explicit(&g->result, memory_order_relaxed);
}

static void finish(struct tdm__group *g)
{
	int result = result_of(g);
	/* Acq_rel: acquire the waiter's record (its CAS is release); release everything the
	 * group's tasks did to the waiter's acquire load of DONE. Last access to g. */
	uintptr_t w = atomic_exchange_explicit(&g->waiter, TDM__GROUP_DONE, memory_order_acq_rel);
	/* Nobody waits yet, or an awaiting task is about to publish itself: its CAS fails on DONE
	 * and it resumes itself (tdm_await_group). */
	if (w == 0 || w == TDM__WAITER_CLAIMED)
		return;
	if (w & TDM__WAITER_TASK) {
		tdm__task_wake((struct tdm__task *)(w & ~TDM__WAITER_TASK), result);
		return;
	}
	struct blocked_waiter *bw = (struct blocked_waiter *)w;
	pthread_mutex_lock(&bw->lock);
	bw->done = true;
	pthread_cond_signal(&bw->cond);
	pthread_mutex_unlock(&bw->lock);
}

void tdm__group_task_done(struct tdm__group *g, int result)
{
	/* Relaxed, both: the decrement below (release) carries the value to whoever reads it after
	 * the last decrement. One modification order: a -ECANCELED stored after a task's value
	 * replaces it, a task's value after -ECANCELED (or after any other) finds the CAS fail. */
	if (result == -ECANCELED) {
		atomic_store_explicit(&g->result, -ECANCELED, memory_order_relaxed);
	} else if (result != 0) {
		int32_t none = 0;
		atomic_compare_exchange_strong_explicit(&g->result, &none, result,
		                                        memory_order_relaxed, memory_order_relaxed);
	}
	/* Acq_rel: the last decrement acquires every earlier task's release, then finish()
	 * passes it all on to the waiter. */
	if (atomic_fetch_sub_explicit(&g->pending, 1, memory_order_acq_rel) == 1)
		finish(g);
}

static void wait_helping(struct tdm__worker *w, struct tdm__group *g)
{
	unsigned idle = 0;
	/* Acquire: pairs with the exchange in finish(). */
	while (atomic_load_explicit(&g->waiter, memory_order_acquire) != TDM__GROUP_DONE) {
		struct tdm__task *t = tdm__find_task(w, true);
		if (t != NULL) {
			tdm__run_task(w, t);
			idle = 0;
		} else if (++idle < 64) {
			tdm__cpu_relax();
		} else {
			/* The group's last tasks run elsewhere; let them have the CPU. */
			sched_yield();
		}
	}
}

static void wait_blocking(struct tdm__group *g)
{
	struct blocked_waiter bw = {.done = false};
	pthread_mutex_init(&bw.lock, NULL);
	pthread_cond_init(&bw.cond, NULL);
	uintptr_t expected = 0;
	/* Release: the record is initialised before the finisher can see it. On failure the
	 * value is DONE and the acquire pairs with the exchange in finish(). */
	if (atomic_compare_exchange_strong_explicit(&g->waiter, &expected, (uintptr_t)&bw,
	                                            memory_order_acq_rel, memory_order_acquire)) {
		pthread_mutex_lock(&bw.lock);
		while (!bw.done)
			pthread_cond_wait(&bw.cond, &bw.lock);
		pthread_mutex_unlock(&bw.lock);
	}
	pthread_cond_destroy(&bw.cond);
	pthread_mutex_destroy(&bw.lock);
}

int tdm_await_group(tdm_task *pub, tdm_group *g)
{
	struct tdm__task *t = tdm__task_cast(pub);
	struct tdm__group *ig = group_of(g);
	if (t == NULL || ig == NULL) {
		if (t != NULL)
			t->result = -EINVAL;
		return -EINVAL;
	}
	/* A group of another executor is refused, as every handle of another executor is, before
	 * anything of g changes: its owner can still wait on it. */
	if (ig->ex != tdm__task_executor(t))
		return t->result = -EINVAL;
	/* Claim the waiter slot before the owner's reference is dropped: of two tasks awaiting g
	 * at once, the second finds it taken. (A check alone let both drop a reference: one went
	 * on before the group's tasks finished, the other was never woken.) Relaxed: the slot
	 * carries nothing yet; the task is published by the CAS below. */
	uintptr_t free_slot = 0;
	if (!atomic_compare_exchange_strong_explicit(&ig->waiter, &free_slot, TDM__WAITER_CLAIMED,
	                                             memory_order_relaxed, memory_order_relaxed))
		return t->result = -EBUSY;
	/* Drop the owner's reference; if it was the last, every task already finished. Acq_rel:
	 * the acquire pairs with the acq_rel decrements in tdm__group_task_done (the tasks' work is
	 * seen when it returns at once); the release orders the owner's earlier accesses to the
	 * group before the last decrement, whose acquire reads this one's in the RMW chain. */
	if (atomic_fetch_sub_explicit(&ig->pending, 1, memory_order_acq_rel) == 1) {
		/* Over already, and no task touches the group again: mark it awaited, as finish()
		 * does, so that a second await is -EBUSY rather than a wait for a finisher that
		 * never comes. Relaxed: only this owner reads it from here on. */
		atomic_store_explicit(&ig->waiter, TDM__GROUP_DONE, memory_order_relaxed);
		return t->result = result_of(ig);
	}
	tdm__task_suspend(t);
	uintptr_t expected = TDM__WAITER_CLAIMED;
	/* Release: publishes the suspended task to finish(). On failure the group is DONE: the
	 * acquire pairs with finish()'s exchange, and the task goes on without suspending. */
	if (atomic_compare_exchange_strong_explicit(&ig->waiter, &expected,
	                                            (uintptr_t)t | TDM__WAITER_TASK,
	                                            memory_order_acq_rel, memory_order_acquire))
		return TDM_SUSPENDED;
	tdm__task_wake(t, result_of(ig));
	return TDM_SUSPENDED;
}

int tdm_group_wait(tdm_group *g)
{
	struct tdm__group *ig = group_of(g);
	if (ig == NULL)
		return -EINVAL;
	/* Drop the owner's reference; if it was the last, every task already finished. Acq_rel: as
	 * in tdm_await_group, pairs with the decrements in tdm__group_task_done. */
	if (atomic_fetch_sub_explicit(&ig->pending, 1, memory_order_acq_rel) != 1) {
		struct tdm__worker *w = tdm__self_of(ig->ex);
		if (w != NULL)
			wait_helping(w, ig);
		else
			wait_blocking(ig);
	}
	int rc = result_of(ig);
	/* Ready for reuse: no task refers to the group any more. */
	atomic_store_explicit(&ig->pending, 1, memory_order_relaxed);
	atomic_store_explicit(&ig->waiter, 0, memory_order_relaxed);
	atomic_store_explicit(&ig->result, 0, memory_order_relaxed);
	return rc;
}
