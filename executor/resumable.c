// SPDX-License-Identifier: MIT
/*
 * Resumable tasks (async/await in C) and the awaitables that need nothing but the executor: host
 * notifications. Task groups are awaited in group.c; other layers await through await.h.
 */
#include <errno.h>

#include "internal.h"

int tdm__group_add(tdm_group *g, tdm_fn fn, tdm_resume_fn resume, void *arg);

int tdm_spawn(tdm_executor *ex, tdm_resume_fn fn, void *arg, tdm_group *g)
{
	if (ex == NULL || fn == NULL)
		return -EINVAL;
	if (g != NULL) {
		if (((struct tdm__group *)(void *)g)->ex != ex)
			return -EINVAL;
		return tdm__group_add(g, NULL, fn, arg);
	}
	return tdm__submit_to(ex, NULL, fn, arg, NULL);
}

unsigned *tdm_task_pc(tdm_task *t)
{
	return &((struct tdm__task *)(void *)t)->pc;
}

int tdm_task_result(const tdm_task *t)
{
	return t != NULL ? ((const struct tdm__task *)(const void *)t)->result : -EINVAL;
}

tdm_executor *tdm_task_executor(const tdm_task *t)
{
	return t != NULL ? tdm__task_executor((const struct tdm__task *)(const void *)t) : NULL;
}

/* ---- host notifications ---- */

#define NOTIFY_MAGIC 0x74646e66u /* "tdnf" */

/*
 * A fired notification keeps the result its awaiting task resumes with in its state word, so that
 * tdm_notify keeps its public size: the word is odd once fired (a task is cache-line aligned, so
 * a task's address is even), and the result, 0 or negative, is held negated above the low bit.
 * Fired with 0 the word is 1, as it was before fires carried a result.
 */
#define NOTIFY_FIRED_BIT ((uintptr_t)1)

static uintptr_t fired_state(int result)
{
	uint64_t negated = (uint64_t)(0 - (int64_t)result); /* result <= 0: no overflow */
	return (uintptr_t)(negated << 1) | NOTIFY_FIRED_BIT;
}

static bool is_fired(uintptr_t state)
{
	return (state & NOTIFY_FIRED_BIT) != 0;
}

static int fired_result(uintptr_t state)
{
	return (int)-(int64_t)(state >> 1);
}

struct notify {
	/* 0, the awaiting task, or fired_state(result) (odd). */
	_Atomic(uintptr_t) state;
	uint32_t magic;
	uint32_t ex_id; /* the executor's id: only its tasks may await the notification */
};

_Static_assert(sizeof(struct notify) <= sizeof(tdm_notify), "tdm_notify holds a notify");

static struct notify *notify_of(tdm_notify *n)
{
	struct notify *in = (struct notify *)(void *)n;
	return (n != NULL && in->magic == NOTIFY_MAGIC) ? in : NULL;
}

int tdm_notify_init(tdm_notify *n, tdm_executor *ex)
{
	if (n == NULL || ex == NULL)
		return -EINVAL;
	/* Reads nothing of *n: it may be fresh memory (tests/fresh_init.c runs under valgrind). */
	struct notify *in = (struct notify *)(void *)n;
	/* Relaxed: the caller hands the notification to other threads after this returns. */
	atomic_store_explicit(&in->state, 0, memory_order_relaxed);
	in->magic = NOTIFY_MAGIC;
	in->ex_id = ex->id;
	return 0;
}

int tdm_notify_reset(tdm_notify *n)
{
	struct notify *in = notify_of(n);
	if (in == NULL)
		return -EINVAL;
	/* A task awaits it: starting it over would lose that task (no fire could reach it), and
	 * the executor's destroy would wait for it for ever. The CAS takes only a fired state
	 * (or an unfired one nobody awaits) back to 0, so a task that registers meanwhile is
	 * not lost either. Relaxed: only the task's pointer is compared, not what it points to;
	 * the caller hands the notification on after this returns. */
	uintptr_t cur = atomic_load_explicit(&in->state, memory_order_relaxed);
	do {
		if (cur != 0 && !is_fired(cur))
			return -EBUSY;
	} while (!atomic_compare_exchange_weak_explicit(&in->state, &cur, 0, memory_order_relaxed,
	                                                memory_order_relaxed));
	return 0;
}

/*
 * The tasks suspended on notifications, per executor, so that a destroy in TDM_SHUTDOWN_CANCEL
 * can cancel them: nothing may fire them any more (the task that would have may be cancelled),
 * and the destroy would wait for them for ever. A waiter's publication (the CAS in
 * tdm_await_notify), its fire (the exchange) and the destroy's sweep all happen under one
 * process-wide lock: notifications are not a hot path, and a fire knows no executor until it has
 * the task. While suspended here a task's await fields are this layer's: link.next and await_obj
 * chain the list (next, prev), await_seq holds the notification.
 */
static pthread_mutex_t waiters_lock = PTHREAD_MUTEX_INITIALIZER;

static void waiter_link(struct tdm_executor *ex, struct tdm__task *t, struct notify *in)
{
	t->link.next = ex->notify_waiters != NULL ? &ex->notify_waiters->link : NULL;
	t->await_obj = NULL;
	t->await_seq = (uint64_t)(uintptr_t)in;
	if (ex->notify_waiters != NULL)
		ex->notify_waiters->await_obj = t;
	ex->notify_waiters = t;
}

static void waiter_unlink(struct tdm_executor *ex, struct tdm__task *t)
{
	struct tdm__task *prev = t->await_obj;
	struct tdm__task *next = t->link.next != NULL ? tdm__task_of(t->link.next) : NULL;
	if (prev != NULL)
		prev->link.next = t->link.next;
	else
		ex->notify_waiters = next;
	if (next != NULL)
		next->await_obj = prev;
}

struct tdm__task *tdm__notify_close(struct tdm_executor *ex)
{
	pthread_mutex_lock(&waiters_lock);
	ex->notify_closed = true;
	struct tdm__task *t = ex->notify_waiters;
	ex->notify_waiters = NULL;
	/* Each still its notification's waiter (a fire would have taken it off the list, under
	 * this lock): the notification goes back to unfired, the task to tdm__notify_cancel.
	 * Relaxed: under the lock that every publication and fire of a waiter takes. */
	for (struct tdm__task *k = t; k != NULL;
	     k = k->link.next != NULL ? tdm__task_of(k->link.next) : NULL) {
		struct notify *in = (struct notify *)(uintptr_t)k->await_seq;
		atomic_store_explicit(&in->state, 0, memory_order_relaxed);
	}
	pthread_mutex_unlock(&waiters_lock);
	return t;
}

void tdm__notify_cancel(struct tdm__task *t)
{
	while (t != NULL) {
		struct tdm__task *next = t->link.next != NULL ? tdm__task_of(t->link.next) : NULL;
		tdm__task_wake(t, -ECANCELED); /* reuses t->link: next was read before */
		t = next;
	}
}

int tdm_notify_fire_result(tdm_notify *n, int result)
{
	struct notify *in = notify_of(n);
	if (in == NULL || result > 0)
		return -EINVAL;
	pthread_mutex_lock(&waiters_lock);
	/* Acq_rel: acquires the awaiting task (release CAS in tdm_await_notify); releases what
	 * the firing thread wrote before to the task, through tdm__task_wake, or to a task that
	 * awaits later, through its acquire load of the state. */
	uintptr_t prev =
	    atomic_exchange_explicit(&in->state, fired_state(result), memory_order_acq_rel);
	struct tdm__task *t = prev != 0 && !is_fired(prev) ? (struct tdm__task *)prev : NULL;
	if (t != NULL)
		waiter_unlink(tdm__task_executor(t), t);
	pthread_mutex_unlock(&waiters_lock);
	if (t != NULL)
		tdm__task_wake(t, result);
	return 0;
}

int tdm_notify_fire(tdm_notify *n)
{
	return tdm_notify_fire_result(n, 0);
}

int tdm_await_notify(tdm_task *pub, tdm_notify *n)
{
	struct tdm__task *t = tdm__task_cast(pub);
	struct notify *in = notify_of(n);
	if (t == NULL || in == NULL) {
		if (t != NULL)
			t->result = -EINVAL;
		return -EINVAL;
	}
	struct tdm_executor *ex = tdm__task_executor(t);
	/* Of another executor: its destroy would not find this task among its waiters, and this
	 * executor's would reset a notification it does not own. */
	if (in->ex_id != ex->id)
		return t->result = -EINVAL;
	uintptr_t cur = atomic_load_explicit(&in->state, memory_order_acquire);
	if (is_fired(cur))
		return t->result = fired_result(cur); /* acquire: pairs with the fire's exchange */
	if (cur != 0)
		return t->result = -EBUSY;
	pthread_mutex_lock(&waiters_lock);
	/* A destroy in TDM_SHUTDOWN_CANCEL took the waiters off (tdm__notify_close): one
	 * suspending now would wait for ever. */
	if (ex->notify_closed) {
		pthread_mutex_unlock(&waiters_lock);
		return t->result = -ECANCELED;
	}
	tdm__task_suspend(t);
	uintptr_t expected = 0;
	/* Release: publishes the suspended task to tdm_notify_fire. On failure, the acquire pairs
	 * with the fire's exchange: the task resumes seeing the firer's writes. */
	if (atomic_compare_exchange_strong_explicit(&in->state, &expected, (uintptr_t)t,
	                                            memory_order_acq_rel, memory_order_acquire)) {
		waiter_link(ex, t, in);
		pthread_mutex_unlock(&waiters_lock);
		return TDM_SUSPENDED;
	}
	pthread_mutex_unlock(&waiters_lock);
	/* Fired, or taken by another task, meanwhile: t was never published, so nobody else can
	 * wake it; undo the count and go on at once, as the load above would have. */
	tdm__suspended_done(ex, 1);
	return t->result = is_fired(expected) ? fired_result(expected) : -EBUSY;
}
