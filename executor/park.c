// SPDX-License-Identifier: MIT
/*
 * Parking and waking workers, and deciding when a shutting-down executor may stop.
 *
 * The protocol is Tokio's: a shared word counts searching workers and unparked workers. A
 * publisher of work wakes one sleeper only when nobody is searching (a searcher would find the
 * work); a searcher that finds work and was the last searcher wakes one more (so parallelism
 * ramps up one worker at a time, without a thundering herd); the last searcher to park looks at
 * every queue once more before sleeping. At most max_searching workers search at once,
 * and the keeper of an awake hold besides (tdm__hold).
 *
 * No lost wake-up, by a Dekker argument: a publisher stores its work, then a seq_cst fence, then
 * loads idle_state; a parking worker changes idle_state with a seq_cst RMW, then a seq_cst
 * fence, then loads every queue. One of the two sees the other's store.
 *
 * Each worker sleeps on its own ConcurrencyKit event count, so a wake-up reaches exactly one
 * thread. ck_ec spins briefly, then sleeps in futex_wait with no timeout: zero CPU when idle.
 */
#include <limits.h>

#include "base/observe.h"
#include "internal.h"

void tdm__unpark(struct tdm__worker *w)
{
	/* Release: pairs with the acquire exchange in tdm__park; the event count bump below
	 * only ends the futex sleep, the flag carries the ordering. ck_ec32_inc is a write
	 * barrier: pairs with ck_ec32_value's read barrier in tdm__park (see there). */
	atomic_store_explicit(&w->notified, true, memory_order_release);
	ck_ec32_inc(&w->ec, &tdm__ec_mode);
}

static bool should_wake(struct tdm_executor *ex, uint32_t s)
{
	return tdm__idle_searching(s) == 0 && tdm__idle_unparked(s) < ex->nworkers;
}

/*
 * Wakes one parked worker if should_wake still holds under the lock: `prefer` if it is parked,
 * else the last to park. True when it woke one. The caller has checked should_wake already
 * (without the lock, as a fast path).
 */
static bool wake_one(struct tdm_executor *ex, unsigned prefer)
{
	pthread_mutex_lock(&ex->idle_lock);
	struct tdm__worker *w = NULL;
	if (ex->nsleepers > 0 &&
	    should_wake(ex, atomic_load_explicit(&ex->idle_state, memory_order_relaxed))) {
		unsigned k = ex->nsleepers - 1;
		for (unsigned i = 0; prefer != UINT_MAX && i < ex->nsleepers; i++)
			if (ex->sleepers[i] == prefer) {
				k = i;
				break;
			}
		w = &ex->workers[ex->sleepers[k]];
		ex->sleepers[k] = ex->sleepers[--ex->nsleepers];
		/* The woken worker starts as a searcher; count it now so that concurrent
		 * publishers do not wake a second one for the same work (tdm__park undoes both
		 * when it sleeps again). Seq_cst like every idle_state RMW: it is in the total
		 * order with the fences of tdm__notify_parked and tdm__park (the file comment). */
		atomic_fetch_add_explicit(&ex->idle_state, TDM__IDLE_UNPARKED | TDM__IDLE_SEARCHING,
		                          memory_order_seq_cst);
	}
	pthread_mutex_unlock(&ex->idle_lock);
	if (w != NULL)
		tdm__unpark(w);
	return w != NULL;
}

void tdm__notify_parked(struct tdm_executor *ex)
{
	/* Seq_cst fence: the caller's publication of work (a queue push) is ordered before the
	 * load of idle_state. Pairs with the fence in tdm__park after its idle_state RMW. The
	 * fence carries the ordering; the load's own seq_cst adds nothing to it. */
	atomic_thread_fence(memory_order_seq_cst);
	if (should_wake(ex, atomic_load_explicit(&ex->idle_state, memory_order_seq_cst)))
		wake_one(ex, UINT_MAX);
}

bool tdm__expect_wake(struct tdm_executor *ex, unsigned home)
{
	/* Relaxed: a hint. A worker that parks just after this load misses only the hint; the
	 * task's own wake-up (tdm__notify_parked, with its fence) still reaches it. */
	return should_wake(ex, atomic_load_explicit(&ex->idle_state, memory_order_relaxed)) &&
	       wake_one(ex, home);
}

bool tdm__work_pending(struct tdm_executor *ex)
{
	if (!tdm__stack_empty(&ex->inject))
		return true;
	for (unsigned i = 0; i < ex->nworkers; i++) {
		struct tdm__worker *w = &ex->workers[i];
		if (!tdm__stack_empty(&w->inbox) || tdm__deque_size(&w->deque) > 0)
			return true;
	}
	return false;
}

bool tdm__transition_to_searching(struct tdm__worker *w, bool bounded)
{
	if (w->searching)
		return true;
	struct tdm_executor *ex = w->ex;
	/* The bound is approximate (load, then add), as in Tokio: it limits contention, it is
	 * not needed for correctness. */
	uint32_t s = atomic_load_explicit(&ex->idle_state, memory_order_relaxed);
	if (bounded && tdm__idle_searching(s) >= ex->max_searching)
		return false;
	/* Seq_cst like every idle_state RMW (the file comment): a publisher whose seq_cst load
	 * in tdm__notify_parked sees this searcher wakes nobody; the searcher's way out
	 * (tdm__transition_from_searching or tdm__park, each a fence then a queue check) finds
	 * that work. */
	atomic_fetch_add_explicit(&ex->idle_state, TDM__IDLE_SEARCHING, memory_order_seq_cst);
	w->searching = true;
	return true;
}

void tdm__transition_from_searching(struct tdm__worker *w)
{
	w->searching = false;
	uint32_t prev = atomic_fetch_sub_explicit(&w->ex->idle_state, TDM__IDLE_SEARCHING,
	                                          memory_order_seq_cst);
	/*
	 * The last searcher found work; if more is queued, let one more worker look. Unlike
	 * Tokio, which wakes one unconditionally, look first: a worker that resumes a woken
	 * task must not pay for a futex wake on the latency path when nothing else is queued.
	 * Seq_cst fence: the searching decrement above is ordered before the queue loads; pairs
	 * with the fence in tdm__notify_parked, so a publisher that saw us searching (and woke
	 * nobody) has its work seen here.
	 */
	if (tdm__idle_searching(prev) == 1) {
		atomic_thread_fence(memory_order_seq_cst);
		if (tdm__work_pending(w->ex))
			tdm__notify_parked(w->ex);
	}
}

/*
 * Stops the workers if the executor is shutting down and no task can appear any more: every
 * worker is parked (none runs a task that could spawn), no task is queued, none is suspended,
 * and no hold is taken (its holder still uses the executor). Called with idle_lock held,
 * which also guards every transition of a worker from parked to unparked and the drops of the
 * suspended count and of the holds to zero (other drops cannot enable termination), so
 * the decision cannot race with a wake-up. The unparks happen under the lock too:
 * a thread that decided must not touch the executor after unlocking, since destroy may free it from
 * then on.
 */
static bool terminate_locked(struct tdm_executor *ex)
{
	/* Acquire: pairs with the store of shutdown in tdm_executor_destroy; only the flag is
	 * used (terminate is written under idle_lock, held here). */
	if (!atomic_load_explicit(&ex->shutdown, memory_order_acquire) ||
	    atomic_load_explicit(&ex->terminate, memory_order_relaxed))
		return false;
	/* Not before destroy saw every outside submission land: one that passed its shutdown
	 * check may not have pushed its task yet. */
	if (!ex->submit_closed)
		return false;
	/* Seq_cst fence: the loads of suspended and of the queues come after the caller's own
	 * updates (a park, a drop of suspended); pairs with the fence in tdm__notify_parked.
	 * Acquire loads of suspended and holds: pair with the release drops in
	 * tdm__suspended_done and tdm__release (the inbox pushes before them are seen). */
	atomic_thread_fence(memory_order_seq_cst);
	if (tdm__idle_unparked(atomic_load_explicit(&ex->idle_state, memory_order_relaxed)) != 0 ||
	    atomic_load_explicit(&ex->suspended, memory_order_acquire) != 0 ||
	    atomic_load_explicit(&ex->holds, memory_order_acquire) != 0 || tdm__work_pending(ex))
		return false;
	/* Release: pairs with the acquire load of terminate in tdm__park, after the unparks
	 * below end the workers' sleep. */
	atomic_store_explicit(&ex->terminate, 1, memory_order_release);
	for (unsigned i = 0; i < ex->nworkers; i++)
		tdm__unpark(&ex->workers[i]);
	return true;
}

/* For the last worker to park and for destroy: both outlive any free of the executor. */
void tdm__try_terminate(struct tdm_executor *ex)
{
	pthread_mutex_lock(&ex->idle_lock);
	bool stopped = terminate_locked(ex);
	pthread_mutex_unlock(&ex->idle_lock);
	/* Acquire: pairs with the store of shutdown in tdm_executor_destroy; only the flag. */
	if (!stopped && atomic_load_explicit(&ex->shutdown, memory_order_acquire) &&
	    tdm__work_pending(ex))
		tdm__notify_parked(ex);
}

void tdm__suspended_done(struct tdm_executor *ex, unsigned n)
{
	/*
	 * A drop that leaves the count above zero needs no lock: it enables no termination, so
	 * nobody has to decide again, and terminate_locked reads a nonzero count before and after
	 * it. Release: the inbox pushes that woke these tasks come before the drop, for whoever
	 * acquires the count (terminate_locked).
	 */
	int64_t cur = atomic_load_explicit(&ex->suspended, memory_order_relaxed);
	while (cur > (int64_t)n)
		if (atomic_compare_exchange_weak_explicit(&ex->suspended, &cur, cur - (int64_t)n,
		                                          memory_order_release,
		                                          memory_order_relaxed))
			return;
	/* The drop to zero happens under idle_lock, with the decision: destroy takes the lock
	 * once after its joins, so it frees the executor only after this unlock. */
	pthread_mutex_lock(&ex->idle_lock);
	if (atomic_fetch_sub_explicit(&ex->suspended, n, memory_order_release) == n)
		terminate_locked(ex);
	pthread_mutex_unlock(&ex->idle_lock);
	/* Nothing after this: with the count at zero the executor may be destroyed at once. */
}

int tdm__hold(struct tdm_executor *ex, bool awake)
{
	/* Through the outside gate, as a submission: destroy cannot decide termination, and free
	 * ex, under a hold that missed shutdown. */
	_Atomic unsigned *n = tdm__gate_enter(&ex->outside, &ex->shutdown);
	if (n == NULL)
		return -ESHUTDOWN;
	/* Relaxed: the count's drop to zero is what termination waits for, and that happens under
	 * idle_lock (tdm__release); the gate's leave below (release) orders the increment before
	 * destroy's drain, after which termination can first be decided. */
	atomic_fetch_add_explicit(&ex->holds, 1, memory_order_relaxed);
	if (!awake) {
		tdm__gate_leave(n); /* counted in holds now: termination waits for the release */
		return 0;
	}
	/* Relaxed: only who spins hangs on it; the fence below orders the increment for that. */
	atomic_fetch_add_explicit(&ex->awake_holds, 1, memory_order_relaxed);
	/* With every worker asleep nobody would take the role until work came: wake one now, so
	 * that the keeper is awake (and its CPU running) before the holder's first task.
	 * Seq_cst fence: the increment is ordered before expect_wake's load of idle_state; pairs
	 * with the fence in tdm__park after its idle_state RMW. Either this load sees the last
	 * worker's park, and wakes it, or that worker's load sees the hold, and it wakes one. */
	atomic_thread_fence(memory_order_seq_cst);
	tdm__expect_wake(ex, UINT_MAX);
	tdm__gate_leave(n); /* counted in holds now: termination waits for the release */
	return 0;
}

void tdm__release(struct tdm_executor *ex, bool awake)
{
	/*
	 * A taken hold keeps the executor from terminating (terminate_locked), so a concurrent
	 * destroy cannot free it before this access, even when every worker parked meanwhile (the
	 * role may not be taken yet). The drop to zero happens under idle_lock,
	 * with the decision, as in tdm__suspended_done: destroy takes the lock once after its
	 * joins, so it frees the executor only after this unlock. Release: pairs with the acquire
	 * load in terminate_locked.
	 */
	pthread_mutex_lock(&ex->idle_lock);
	/* Relaxed: the awake count only decides who spins (the keeper drops its role when it reads
	 * zero); termination hangs on holds alone. */
	if (awake)
		atomic_fetch_sub_explicit(&ex->awake_holds, 1, memory_order_relaxed);
	if (atomic_fetch_sub_explicit(&ex->holds, 1, memory_order_release) == 1)
		terminate_locked(ex);
	pthread_mutex_unlock(&ex->idle_lock);
	/* Nothing after this: with no hold left the executor may be destroyed at once. */
}

/* Returns false when the worker must exit. */
bool tdm__park(struct tdm__worker *w)
{
	struct tdm_executor *ex = w->ex;
	tdm__count(w, parks);

	pthread_mutex_lock(&ex->idle_lock);
	uint32_t dec = TDM__IDLE_UNPARKED | (w->searching ? TDM__IDLE_SEARCHING : 0);
	uint32_t prev = atomic_fetch_sub_explicit(&ex->idle_state, dec, memory_order_seq_cst);
	ex->sleepers[ex->nsleepers++] = w->index;
	pthread_mutex_unlock(&ex->idle_lock);
	bool last_searcher = w->searching && tdm__idle_searching(prev) == 1;
	bool last_unparked = tdm__idle_unparked(prev) == 1;
	w->searching = false;

	bool rewoke = false;
	if (last_searcher || last_unparked) {
		/* Seq_cst fence: the idle_state RMW above is ordered before these queue loads
		 * and the load of awake_holds; pairs with the fence in tdm__notify_parked (Dekker,
		 * see the file comment) and with the one in tdm__hold: the last worker to
		 * park while a hold is taken wakes one (itself, perhaps) to be the keeper, in case
		 * the hold was taken after it looked (idle_spin) and its wake-up found it awake. */
		atomic_thread_fence(memory_order_seq_cst);
		if (tdm__work_pending(ex) ||
		    (last_unparked &&
		     atomic_load_explicit(&ex->awake_holds, memory_order_relaxed) != 0)) {
			tdm__notify_parked(ex);
			rewoke = true;
		}
	}
	/* Every worker asleep, and nothing seen that wakes one. */
	if (last_unparked && !rewoke)
		tdm__count(w, parks_last);
	if (last_unparked)
		tdm__try_terminate(ex);

	/* Read once: the wake is recorded exactly when the sleep was. */
	bool traced = tdm__observing() && tdm__tracing();
	if (traced) {
		tdm__ready_sample(ex);
		tdm__trace_record(TDM__TR_PARK_BEGIN, 0);
	}
	for (;;) {
		/* Acquire: pairs with the release store in unpark. */
		if (atomic_exchange_explicit(&w->notified, false, memory_order_acquire))
			break;
		/* ck_ec32_value is a read barrier, pairing with ck_ec32_inc's write barrier in
		 * tdm__unpark: a snap that includes an unpark's bump makes the acquire load below
		 * see its flag; a bump not in snap ends the wait. */
		uint32_t snap = ck_ec32_value(&w->ec);
		if (atomic_load_explicit(&w->notified, memory_order_acquire))
			continue;
		ck_ec32_wait(&w->ec, &tdm__ec_mode, snap, NULL);
	}
	if (traced)
		tdm__trace_record(TDM__TR_PARK_END, 0);
	/* Acquire: pairs with the release store of terminate in terminate_locked or stop_workers
	 * (executor.c), made before the unpark that ended this sleep. */
	if (atomic_load_explicit(&ex->terminate, memory_order_acquire))
		return false;
	/* The waker counted us as unparked and searching. */
	w->searching = true;
	tdm__count(w, wakeups);
	return true;
}
