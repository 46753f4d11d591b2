// SPDX-License-Identifier: MIT
/*
 * A worker's life: find a task (own deque, then inbox and injection queue, then other workers),
 * run it, and park when there is none. Also where tasks enter the executor (tdm__enqueue) and
 * where suspended tasks come back: from their waker (tdm__task_wake), or, for an await the
 * worker held itself (tdm__task_hold), straight from the worker's own loop (held_take).
 *
 * Fairness: every TDM__GLOBAL_TICK tasks a worker looks at its inbox and at the injection queue
 * before its own deque, so a worker busy with a long chain of local spawns still takes in
 * woken and submitted tasks.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/observe.h"
#include "internal.h"

/* How often the inbox and the injection queue come first (see above): every 61st task, as Go's
 * and Tokio's schedulers do. */
#define TDM__GLOBAL_TICK 61

_Thread_local struct tdm__worker *tdm__self;
_Thread_local struct tdm__worker_id tdm__worker_id;
_Thread_local struct tdm__task *tdm__current;

static uint64_t next_rand(struct tdm__worker *w)
{
	/* xorshift64*: cheap and good enough to spread victims. */
	uint64_t x = w->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	w->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/*
 * Moves a list taken from a stack (newest first) onto the worker's deque, newest first, so that
 * the oldest ends at the bottom and the owner runs it next, while thieves take the newest.
 * Returns the oldest, taken back at once; NULL if the list was empty.
 */
static struct tdm__task *adopt_list(struct tdm__worker *w, struct tdm__link *l)
{
	if (l == NULL)
		return NULL;
	if (l->next == NULL)
		return tdm__task_of(l);
	while (l->next != NULL) {
		struct tdm__link *next = l->next;
		if (tdm__deque_push(&w->deque, tdm__task_of(l)) != 0) {
			/* No memory to grow the deque: hand the rest back rather than lose it. */
			struct tdm__link *last = l;
			while (last->next != NULL)
				last = last->next;
			tdm__stack_push_chain(&w->inbox, l->next, last);
			l->next = NULL;
			return tdm__task_of(l);
		}
		l = next;
	}
	tdm__after_local_push(w);
	return tdm__task_of(l);
}

static struct tdm__task *take_inbox(struct tdm__worker *w, struct tdm__worker *from)
{
	struct tdm__task *t = adopt_list(w, tdm__stack_take_all(&from->inbox));
	if (t != NULL)
		tdm__count(w, inbox);
	return t;
}

static struct tdm__task *take_inject(struct tdm__worker *w)
{
	struct tdm__task *t = adopt_list(w, tdm__stack_take_all(&w->ex->inject));
	if (t != NULL)
		tdm__count(w, injected);
	return t;
}

static struct tdm__task *steal(struct tdm__worker *w)
{
	struct tdm_executor *ex = w->ex;
	unsigned n = ex->nworkers;
	if (n > 1) {
		unsigned start = (unsigned)(next_rand(w) % n);
		for (unsigned i = 0; i < n; i++) {
			struct tdm__worker *v = &ex->workers[(start + i) % n];
			if (v == w)
				continue;
			tdm__count(w, steals_tried);
			void *x;
			do
				x = tdm__deque_steal(&v->deque);
			while (x == TDM__DEQUE_ABORT);
			if (x != NULL) {
				tdm__count(w, steals_won);
				if (tdm__observing() && tdm__tracing())
					tdm__trace_record(TDM__TR_STEAL,
					                  (uint64_t)(v - ex->workers));
				return x;
			}
			/* A busy worker's woken tasks may run elsewhere. */
			struct tdm__task *t = take_inbox(w, v);
			if (t != NULL)
				return t;
		}
	}
	return take_inject(w);
}

void tdm__ready_sample(struct tdm_executor *ex)
{
	uint64_t now = tdm__now_ns();
	/* Relaxed: a hint; the lock orders the samples and the track. */
	if (now < atomic_load_explicit(&ex->ready_next, memory_order_relaxed) ||
	    pthread_mutex_trylock(&ex->ready_lock) != 0)
		return;
	atomic_store_explicit(&ex->ready_next, now + 1000000u, memory_order_relaxed);
	if (ex->ready_track == NULL) {
		char name[32];
		snprintf(name, sizeof(name), "executor %u", (unsigned)ex->id);
		ex->ready_track = tdm__trace_track_open(name);
	}
	/* The deques only: what the injection queue and the inboxes hold moves into a deque as
	 * a worker takes it. */
	uint64_t n = 0;
	for (unsigned i = 0; i < ex->nworkers; i++)
		n += (uint64_t)tdm__deque_size(&ex->workers[i].deque);
	tdm__trace_track_counter(ex->ready_track, TDM__CTR_READY, now, n);
	pthread_mutex_unlock(&ex->ready_lock);
}

struct tdm__task *tdm__find_task(struct tdm__worker *w, bool may_steal)
{
	struct tdm__task *t;
	if (++w->tick % TDM__GLOBAL_TICK == 0) {
		if (tdm__observing() && tdm__tracing())
			tdm__ready_sample(w->ex);
		if ((t = take_inbox(w, w)) != NULL || (t = take_inject(w)) != NULL)
			return t;
	}
	if ((t = tdm__deque_take(&w->deque)) != NULL)
		return t;
	if ((t = take_inbox(w, w)) != NULL || (t = take_inject(w)) != NULL)
		return t;
	return may_steal ? steal(w) : NULL;
}

/* After the owner pushed onto its deque: wake a sleeper if nobody is looking for work. */
void tdm__after_local_push(struct tdm__worker *w)
{
	struct tdm_executor *ex = w->ex;
	if (w->searching)
		return; /* tdm__transition_from_searching will wake the next one */
	/*
	 * Relaxed pre-check, no fence: when every worker is awake (the common case under load)
	 * this costs one load. Missing a worker that parks at this very moment only delays
	 * parallelism, never a task: it sits on this worker's own deque, which this worker
	 * drains before it parks, and the next push sees the sleeper.
	 */
	uint32_t s = atomic_load_explicit(&ex->idle_state, memory_order_relaxed);
	if (tdm__idle_searching(s) == 0 && tdm__idle_unparked(s) < ex->nworkers)
		tdm__notify_parked(ex);
}

/*
 * Trace flows (base/trace.c): an arrow from where a task was spawned, or where it suspended in an
 * await, to the run that takes it up. The id: the task's address and a generation the task
 * counts in its flags (task memory is reused), the low bit set for an await. The task's owner
 * alone writes its flags: the spawner before the push, the runner before the await publishes it.
 */
static uint64_t flow_id(const struct tdm__task *t)
{
	return ((uint64_t)(uintptr_t)t << 9) | (uint64_t)((t->flags >> 8) << 1) |
	       ((t->flags & TDM__TASK_FLOW_AWAIT) ? 1u : 0u);
}

static void flow_out(struct tdm__task *t, bool await)
{
	if (!tdm__tracing())
		return;
	unsigned gen = ((t->flags >> 8) + 1u) & 0xffu;
	t->flags = (uint16_t)((t->flags & 0xffu & ~(unsigned)TDM__TASK_FLOW_AWAIT) |
	                      TDM__TASK_FLOW | (await ? TDM__TASK_FLOW_AWAIT : 0u) | (gen << 8));
	tdm__trace_record(await ? TDM__TR_SUSPEND : TDM__TR_SPAWN, flow_id(t));
}

uint64_t tdm__trace_await_flow(void)
{
	const struct tdm__task *t = tdm__current;
	if (t == NULL)
		return 0;
	/* What flow_out will make of it at the task's next await. */
	unsigned gen = ((t->flags >> 8) + 1u) & 0xffu;
	return ((uint64_t)(uintptr_t)t << 9) | (uint64_t)(gen << 1) | 1u;
}

uintptr_t tdm__task_fn_now(void)
{
	const struct tdm__task *t = tdm__current;
	if (t == NULL)
		return 0;
	return (t->flags & TDM__TASK_RESUMABLE) ? (uintptr_t)t->resume : (uintptr_t)t->fn;
}

/* A run takes up t's open flow, if any; only while observed (the caller asked). */
static void flow_in(struct tdm__task *t)
{
	if (!(t->flags & TDM__TASK_FLOW))
		return;
	t->flags &= (uint16_t)~TDM__TASK_FLOW;
	if (tdm__tracing())
		tdm__trace_record(TDM__TR_FLOW_IN, flow_id(t));
}

/* Runs a resumable task until it finishes or parks; true when it finished. */
static bool resume(struct tdm__task *t, bool observed)
{
	for (;;) {
		if (observed)
			flow_in(t);
		atomic_store_explicit(&t->rstate, TDM__RUNNING, memory_order_relaxed);
		int rc = t->resume((tdm_task *)t, t->arg);
		if (rc != TDM_PENDING) {
			t->result = rc;
			return true;
		}
		uint32_t expect = TDM__RUNNING;
		/* Release: hands the task to its waker (acquire exchange in tdm__task_wake). */
		if (atomic_compare_exchange_strong_explicit(&t->rstate, &expect, TDM__PARKED,
		                                            memory_order_acq_rel,
		                                            memory_order_acquire))
			return false;
		/* Woken while it was returning: the await is over, go on at once. The acquire
		 * above pairs with the waker's exchange and makes its result visible. */
	}
}

void tdm__run_task(struct tdm__worker *w, struct tdm__task *t)
{
	struct tdm_executor *ex = w->ex;
	/* Acquire: pairs with the release store in tdm_executor_destroy; on_cancel may free a
	 * notification the destroy's close wrote into just before. */
	bool cancelled = atomic_load_explicit(&ex->cancelling, memory_order_acquire) != 0;
	if (cancelled) {
		if (ex->cfg.on_cancel != NULL)
			ex->cfg.on_cancel(ex->cfg.on_cancel_user,
			                  (t->flags & TDM__TASK_RESUMABLE) ? NULL : t->fn, t->arg);
		tdm__count(w, tasks_cancelled);
	} else {
		t->home = (uint16_t)w->index;
		/* Saved and restored: a group wait inside t runs other tasks on this thread. */
		struct tdm__task *outer = tdm__current;
		tdm__current = t;
		w->depth++;
		bool finished = true;
		bool resumable = (t->flags & TDM__TASK_RESUMABLE) != 0;
		/* Read once: the run's end is reported exactly when its begin was. The token
		 * stays in this frame, so runs nested by a group wait nest their ranges. */
		bool observed = tdm__observing();
		uint64_t run = 0;
		if (observed)
			run = tdm__observe_run_begin(resumable ? (void (*)(void))t->resume
			                                       : (void (*)(void))t->fn);
		if (resumable) {
			finished = resume(t, observed);
		} else {
			if (observed)
				flow_in(t);
			t->fn(t->arg);
		}
		if (observed)
			tdm__observe_run_end(run);
		w->depth--;
		tdm__current = outer;
		tdm__count(w, tasks_run);
		if (!finished)
			return; /* parked: its waker owns it now */
	}
	struct tdm__group *g = t->group;
	/* What the group is handed: a resumable task's return value (resume() stored it), 0 for a
	 * plain one (its result is never written after the allocation cleared it). */
	int result = cancelled ? -ECANCELED : t->result;
	tdm__task_free(ex, w, t);
	if (g != NULL)
		tdm__group_task_done(g, result);
}

int tdm__enqueue(struct tdm_executor *ex, struct tdm__task *t)
{
	struct tdm__worker *w = tdm__self_of(ex);
	if (tdm__observing())
		flow_out(t, false); /* before the push: a thief may run t at once */
	if (w != NULL) {
		int rc = tdm__deque_push(&w->deque, t);
		if (rc == 0)
			tdm__after_local_push(w);
		return rc;
	}
	tdm__stack_push(&ex->inject, &t->link);
	tdm__notify_parked(ex);
	return 0;
}

/* How long an idle worker looks for work before it parks while tasks are suspended: a wake that
 * lands meanwhile costs no futex sleep and wake-up (docs/design/executor.md). */
#define TDM__SPIN_BEFORE_PARK_NS 100000

static bool claim_woken(struct tdm__task *t, int result);

bool tdm__task_hold(struct tdm__task *t, int (*poll)(struct tdm__task *t, int *rc),
                    void (*handoff)(struct tdm__task *t))
{
	struct tdm__worker *w = tdm__self_of(tdm__task_executor(t));
	/* Depth 1: t runs on the worker loop itself. Inside a group wait the loop that would look
	 * at the await is the wait's, which does not: the waiter could wait for t forever. With
	 * work queued that its loop takes first (its deque, its inbox, the injection queue) the
	 * worker would only hand the await off at once: not held. */
	if (w == NULL || w->depth != 1 || w->held.t != NULL || tdm__deque_size(&w->deque) > 0 ||
	    !tdm__stack_empty(&w->inbox) || !tdm__stack_empty(&w->ex->inject))
		return false;
	w->held = (struct tdm__held){t, poll, handoff};
	return true;
}

/* The held await's task if the await is over (now this worker's to run), else NULL. */
static struct tdm__task *held_take(struct tdm__worker *w)
{
	struct tdm__task *t = w->held.t;
	int rc = 0;
	if (t == NULL || w->held.poll(t, &rc) == 0)
		return NULL;
	w->held.t = NULL;
	/* The loop looks only after tdm__run_task returned, so t is parked and this claim (the
	 * one a waker makes) succeeds: no other thread knows of t. A failed claim would mean a
	 * second owner, and a task resumed twice: stop rather than go on. */
	if (!claim_woken(t, rc))
		abort();
	tdm__suspended_done(w->ex, 1);
	return t;
}

/* Before the worker runs another task or parks: the held await goes to its waker. */
static void held_release(struct tdm__worker *w)
{
	struct tdm__task *t = w->held.t;
	if (t != NULL) {
		w->held.t = NULL;
		w->held.handoff(t);
	}
}

static bool awake_held(const struct tdm_executor *ex)
{
	/* Relaxed: a hint for who spins; the executor's lifetime does not hang on it
	 * (tdm__release decides termination under idle_lock). */
	return atomic_load_explicit(&ex->awake_holds, memory_order_relaxed) > 0;
}

/* Whether w is the keeper now: it was already, or it takes the free role while a hold is
 * taken: the first worker to go idle. Relaxed: the role only decides who spins; no data goes with
 * it. */
static bool keeper_claim(struct tdm__worker *w)
{
	struct tdm_executor *ex = w->ex;
	unsigned me = w->index + 1, none = 0;
	if (atomic_load_explicit(&ex->keeper, memory_order_relaxed) == me)
		return true;
	return awake_held(ex) &&
	       atomic_compare_exchange_strong_explicit(&ex->keeper, &none, me, memory_order_relaxed,
	                                               memory_order_relaxed);
}

/* Whether w holds the keeper role and a hold is still taken. Relaxed, as keeper_claim. */
static bool keeper_held(const struct tdm__worker *w)
{
	return atomic_load_explicit(&w->ex->keeper, memory_order_relaxed) == w->index + 1 &&
	       awake_held(w->ex);
}

static void keeper_drop(struct tdm__worker *w)
{
	unsigned me = w->index + 1;
	atomic_compare_exchange_strong_explicit(&w->ex->keeper, &me, 0, memory_order_relaxed,
	                                        memory_order_relaxed);
}

/*
 * The idle spin: while tasks are suspended (or a hold is taken), look for work for a while before
 * parking; the keeper (see tdm__hold) goes on for as long as a hold is taken. The held
 * await and the own inbox are a load each; a full search (every victim) now and then, every few
 * iterations for the keeper, which is the only worker awake when a completion lands in a parked
 * worker's inbox: a searching worker means nobody is woken for it.
 */
static struct tdm__task *idle_spin(struct tdm__worker *w)
{
	struct tdm_executor *ex = w->ex;
	struct tdm__task *t = NULL;
	if (atomic_load_explicit(&ex->suspended, memory_order_relaxed) == 0 && !awake_held(ex))
		return NULL;
	uint64_t until = tdm_now_ns() + TDM__SPIN_BEFORE_PARK_NS;
	bool keeping = keeper_claim(w);
	for (unsigned i = 1; t == NULL; i++) {
		if (tdm_now_ns() >= until) {
			/* A hold taken while this worker spun: it may be the only one awake. */
			if (!keeping && !(keeping = keeper_claim(w)))
				break;
			/* Past the usual window the keeper hands its held await to the waker as a
			 * parking worker would: only the waker notices an await that will never
			 * complete (its poll may say "not yet" for ever). */
			held_release(w);
		}
		if (keeping && !awake_held(ex))
			break; /* it gives the role up as it parks */
		tdm__cpu_relax();
		if ((t = held_take(w)) == NULL)
			t = (i % (keeping ? 8 : 64) == 0) ? tdm__find_task(w, true)
			                                  : take_inbox(w, w);
	}
	return t;
}

void *tdm__worker_main(void *arg)
{
	struct tdm__worker *w = arg;
	tdm__self = w;
	tdm__worker_id = (struct tdm__worker_id){w->ex, w->index};
	/* Workers take gate stripes by index, not in the order threads first enter a gate, so that
	 * up to TDM__GATE_STRIPES workers never share one (a layer may enter a gate on every
	 * task). */
	tdm__gate_mine = w->index % TDM__GATE_STRIPES + 1;
	for (;;) {
		struct tdm__task *t = tdm__find_task(w, false);
		if (t == NULL)
			t = held_take(w);
		/* The keeper of an awake hold searches past the bound: were it to park because
		 * others search, and they park after their spin (the role still its own when they
		 * looked), every worker would sleep while the hold is taken. Asked only when the
		 * bound refuses. */
		if (t == NULL && (tdm__transition_to_searching(w, true) ||
		                  (keeper_held(w) && tdm__transition_to_searching(w, false)))) {
			t = tdm__find_task(w, true);
			/* Tasks are suspended: one will be woken soon, likely into this worker's
			 * inbox, or it is the await this worker holds. Looking for a while costs
			 * less than a futex sleep and wake-up on the await's round trip. */
			if (t == NULL)
				t = idle_spin(w);
		}
		/* Whatever comes next (another task, or a sleep), the held await must not wait
		 * for this worker: its waker takes it. */
		held_release(w);
		if (t != NULL) {
			if (w->searching)
				tdm__transition_from_searching(w);
			tdm__run_task(w, t);
			continue;
		}
		/* A parked worker is never the keeper: the role would stay with it while it sleeps
		 * and no other worker could take it. */
		keeper_drop(w);
		if (!tdm__park(w))
			break;
	}
	tdm__self = NULL;
	tdm__worker_id = (struct tdm__worker_id){NULL, 0};
	return NULL;
}

/* ---- the seam for awaitables (await.h) ---- */

struct tdm__task *tdm__task_cast(tdm_task *pub)
{
	struct tdm__task *t = (struct tdm__task *)(void *)pub;
	/* Only the task running on this thread may await. */
	return (t != NULL && t == tdm__current && (t->flags & TDM__TASK_RESUMABLE)) ? t : NULL;
}

unsigned tdm__task_home(const struct tdm__task *t)
{
	return t->home;
}

int tdm__task_fail(struct tdm__task *t, int rc)
{
	return t->result = rc;
}

void tdm__task_suspend(struct tdm__task *t)
{
	if (tdm__observing())
		flow_out(t, true); /* the run that resumes t takes it up */
	/* Counted before the task is published to its waker, so the count cannot drop first. */
	atomic_fetch_add_explicit(&tdm__task_executor(t)->suspended, 1, memory_order_relaxed);
}

/* Returns whether the caller now owns t and must enqueue it. */
static bool claim_woken(struct tdm__task *t, int result)
{
	t->result = result;
	/* Acq_rel: releases result to the runner (its CAS fails and acquires) or to whoever runs
	 * the task next; acquires the runner's release of a parked task. */
	if (atomic_exchange_explicit(&t->rstate, TDM__WOKEN, memory_order_acq_rel) != TDM__PARKED)
		return false; /* still returning on its worker, which resumes it itself */
	atomic_store_explicit(&t->rstate, TDM__RUNNING, memory_order_relaxed);
	return true;
}

void tdm__task_wake(struct tdm__task *t, int result)
{
	struct tdm_executor *ex = tdm__task_executor(t);
	if (claim_woken(t, result)) {
		tdm__stack_push(&ex->workers[t->home % ex->nworkers].inbox, &t->link);
		tdm__notify_parked(ex);
	}
	tdm__suspended_done(ex, 1);
}

void tdm__task_wake_batch(struct tdm__task **tasks, const int *results, unsigned n)
{
	if (n == 0)
		return;
	/* One batch belongs to one executor (the seam's rule). */
	struct tdm_executor *ex = tdm__task_executor(tasks[0]);
	/* Chain the claimed tasks per home worker, in wake order, then push each chain once. */
	struct tdm__link *first[64] = {0}, *last[64] = {0};
	unsigned nw = ex->nworkers < 64 ? ex->nworkers : 64;
	bool any = false;
	for (unsigned i = 0; i < n; i++) {
		struct tdm__task *t = tasks[i];
		if (!claim_woken(t, results != NULL ? results[i] : 0))
			continue;
		unsigned h = t->home % ex->nworkers;
		if (h >= nw) {
			tdm__stack_push(&ex->workers[h].inbox, &t->link);
		} else {
			/* Newest first, as a stack would hold them. */
			t->link.next = first[h];
			first[h] = &t->link;
			if (last[h] == NULL)
				last[h] = &t->link;
		}
		any = true;
	}
	for (unsigned h = 0; h < nw; h++)
		if (first[h] != NULL)
			tdm__stack_push_chain(&ex->workers[h].inbox, first[h], last[h]);
	if (any)
		tdm__notify_parked(ex);
	tdm__suspended_done(ex, n);
}
