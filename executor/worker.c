/*
 * A worker's life: find a task (own deque, then inbox and injection queue, then other workers),
 * run it, and park when there is none. Also where tasks enter the executor (tdm__enqueue) and
 * where the GPU layer's suspended tasks come back (tdm__task_wake).
 *
 * Fairness: every TDM__GLOBAL_TICK tasks a worker looks at its inbox and at the injection queue
 * before its own deque, so a worker busy with a long chain of local spawns still takes in
 * woken and submitted tasks.
 */
#include <sched.h>

#include "internal.h"

#define TDM__GLOBAL_TICK 61

_Thread_local struct tdm__worker *tdm__self;
static _Thread_local struct tdm__task *current_task;

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

struct tdm__task *tdm__find_task(struct tdm__worker *w, bool may_steal)
{
	struct tdm__task *t;
	if (++w->tick % TDM__GLOBAL_TICK == 0) {
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

void tdm__run_task(struct tdm__worker *w, struct tdm__task *t)
{
	struct tdm_executor *ex = w->ex;
	bool cancelled = atomic_load_explicit(&ex->cancelling, memory_order_relaxed) != 0;
	if (cancelled) {
		if (ex->cfg.on_cancel != NULL)
			ex->cfg.on_cancel(ex->cfg.on_cancel_user, t->fn, t->arg);
		tdm__count(w, tasks_cancelled);
	} else {
		t->home = (int32_t)w->index;
		t->flags &= ~(uint32_t)TDM__TASK_SUSPENDED;
		/* Saved and restored: a group wait inside t runs other tasks on this thread. */
		struct tdm__task *outer = current_task;
		current_task = t;
		t->fn(t->arg);
		current_task = outer;
		tdm__count(w, tasks_run);
		if (t->flags & TDM__TASK_SUSPENDED)
			return; /* owned by the GPU layer until tdm__task_wake */
	}
	struct tdm__group *g = t->group;
	tdm__task_free(ex, w, t);
	if (g != NULL)
		tdm__group_task_done(g, cancelled);
}

int tdm__enqueue(struct tdm_executor *ex, struct tdm__task *t)
{
	struct tdm__worker *w = tdm__self_of(ex);
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

void *tdm__worker_main(void *arg)
{
	struct tdm__worker *w = arg;
	tdm__self = w;
	for (;;) {
		struct tdm__task *t = tdm__find_task(w, false);
		if (t == NULL && tdm__transition_to_searching(w))
			t = tdm__find_task(w, true);
		if (t != NULL) {
			if (w->searching)
				tdm__transition_from_searching(w);
			tdm__run_task(w, t);
			continue;
		}
		if (!tdm__park(w))
			break;
	}
	tdm__self = NULL;
	return NULL;
}

/* ---- the seam for the GPU layer ---- */

struct tdm__task *tdm__current_task(void)
{
	return current_task;
}

void tdm__task_suspend(struct tdm__task *t)
{
	struct tdm_executor *ex = tdm__self->ex;
	t->flags |= TDM__TASK_SUSPENDED;
	atomic_fetch_add_explicit(&ex->suspended, 1, memory_order_relaxed);
}

void tdm__task_wake(struct tdm_executor *ex, struct tdm__task *t)
{
	unsigned home = t->home >= 0 ? (unsigned)t->home % ex->nworkers : 0;
	tdm__stack_push(&ex->workers[home].inbox, &t->link);
	tdm__notify_parked(ex);
	/* Release: the push above is visible to whoever sees the count drop (try_terminate). */
	if (atomic_fetch_sub_explicit(&ex->suspended, 1, memory_order_release) == 1)
		tdm__try_terminate(ex);
}
