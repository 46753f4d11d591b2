// SPDX-License-Identifier: MIT
/*
 * The executor's side of holding an await (tdm__task_hold), with a stand-in awaitable instead of
 * a GPU stream: a worker with nothing else queued holds the await and looks at it while it spins,
 * hands it off before it runs any other work, and does not hold it when its own work is queued.
 * Everything the stand-in's callbacks see on the worker is recorded for the test thread.
 */
#include "common.h"

#include <stdatomic.h>
#include <stdbool.h>

#include "gpu_internal.h" /* tdm__task_hold and the executor's internals it needs */

TDM_TEST_SUITE(hold);

/* What a task saw (SEE, common.h). */
struct seen {
	int rc;
	int line;
};

/*
 * The executor's side of holding, with a stand-in awaitable: the first look at the held await
 * queues other work on the worker (a plain task), and the await is over only once it was
 * handed off. The worker must hand it off before it runs that task: a worker that kept the
 * await while it ran other work would leave it with nobody watching.
 */
struct hold_state {
	tdm_executor *ex;
	atomic_int looks, handed_off, other_saw_handoff;
	int result;
	struct seen sn; /* written on the one worker only */
};

static struct hold_state *hold_st; /* the stand-in's callbacks get only the task */

static void hold_other(void *arg)
{
	struct hold_state *h = arg;
	atomic_store(&h->other_saw_handoff, atomic_load(&h->handed_off) + 1);
}

static int hold_poll(struct tdm__task *t, int *rc)
{
	(void)t;
	(void)rc;
	/* From the worker's spin: tdm_submit from a worker queues on its own deque. */
	if (atomic_fetch_add(&hold_st->looks, 1) == 0)
		SEE(&hold_st->sn, tdm_submit(hold_st->ex, hold_other, hold_st));
	return 0; /* over only through the handoff */
}

static void hold_handoff(struct tdm__task *t)
{
	atomic_store(&hold_st->handed_off, 1);
	tdm__task_wake(t, 7);
}

static int hold_await(tdm_task *pub)
{
	struct tdm__task *t = tdm__task_cast(pub);
	SEE_TRUE(&hold_st->sn, t != NULL);
	if (t == NULL)
		return -EINVAL; /* not suspended: the task goes on, and the test sees the record */
	tdm__task_suspend(t);
	bool held = tdm__task_hold(t, hold_poll, hold_handoff);
	SEE_TRUE(&hold_st->sn, held); /* nothing else queued: held */
	if (!held)
		tdm__task_wake(t, 0); /* its own waker, or it would never resume */
	return TDM_SUSPENDED;
}

static int hold_task(tdm_task *t, void *arg)
{
	struct hold_state *h = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, hold_await(t));
	h->result = tdm_task_result(t);
	TDM_END(t);
}

/* Runs fn(h) as the only task of a one-worker executor, to its end. */
static void hold_run(struct hold_state *h, tdm_resume_fn fn)
{
	h->result = -1;
	h->sn = (struct seen){0};
	atomic_init(&h->looks, 0);
	atomic_init(&h->handed_off, 0);
	atomic_init(&h->other_saw_handoff, 0);
	h->ex = tdm_test_create(1);
	hold_st = h;
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, h->ex), 0);
	cr_assert_eq(tdm_spawn(h->ex, fn, h, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_destroy(h->ex);
	ASSERT_SEEN(&h->sn);
}

Test(hold, held_await_is_handed_off_before_other_work, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct hold_state h;
	hold_run(&h, hold_task);
	cr_assert_eq(h.result, 7, "resumed through the handoff's wake");
	cr_assert_geq(atomic_load(&h.looks), 1);
	cr_assert_eq(atomic_load(&h.other_saw_handoff), 2, "the other task ran after the handoff");
}

static void noop(void *arg)
{
	(void)arg;
}

/* With its own work queued the worker would only hand the await off at once: not held. */
static int refused_await(tdm_task *pub, struct hold_state *h)
{
	struct tdm__task *t = tdm__task_cast(pub);
	SEE_TRUE(&h->sn, t != NULL);
	if (t == NULL)
		return -EINVAL; /* not suspended: the task goes on, and the test sees the record */
	SEE(&h->sn, tdm_submit(h->ex, noop, NULL)); /* onto this worker's deque */
	tdm__task_suspend(t);
	h->result = tdm__task_hold(t, hold_poll, hold_handoff) ? 1 : 0;
	if (h->result == 0)
		tdm__task_wake(t, 0); /* not held: its own waker, at once */
	return TDM_SUSPENDED;
}

static int hold_refused_task(tdm_task *t, void *arg)
{
	struct hold_state *h = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, refused_await(t, h));
	TDM_END(t);
}

Test(hold, not_held_with_work_queued, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct hold_state h;
	hold_run(&h, hold_refused_task);
	cr_assert_eq(h.result, 0, "held although work was queued");
}
