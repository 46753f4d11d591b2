// SPDX-License-Identifier: MIT
/*
 * Resumable tasks and the awaitables of the executor itself: host notifications and task
 * groups. The GPU awaitables are specified in test_await.c and its neighbours.
 */
#include "common.h" /* tdm_test_assert_usable */

#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* the executor's cancelling flag */
#include "tandem.h"

TDM_TEST_SUITE(resumable);

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MANY 2000
#else
#define MANY 10000
#endif

static tdm_executor *make(unsigned workers, tdm_shutdown_mode mode, tdm_cancel_fn on_cancel)
{
	tdm_config c;
	tdm_config_init(&c);
	c.workers = workers;
	c.shutdown = mode;
	c.on_cancel = on_cancel;
	tdm_executor *ex;
	cr_assert_eq(tdm_executor_create(&ex, &c), 0);
	return ex;
}

struct waiter {
	tdm_notify *n;
	int before, after; /* steps reached */
	int first_rc;      /* what the await call returned */
	int result;        /* tdm_task_result after it */
	int seen;          /* a value the firing thread wrote before firing */
	int *shared;
	int registered; /* the await call returned: suspended, or refused at once */
};

/* Tells the test thread once the await is registered (or was refused). */
static int await_and_flag(tdm_task *t, struct waiter *w)
{
	int rc = tdm_await_notify(t, w->n);
	__atomic_store_n(&w->registered, 1, __ATOMIC_RELEASE);
	return rc;
}

static int wait_task(tdm_task *t, void *arg)
{
	struct waiter *w = arg;
	TDM_BEGIN(t);
	__atomic_store_n(&w->before, 1, __ATOMIC_RELEASE); /* the test thread polls it */
	TDM_AWAIT(t, w->first_rc = await_and_flag(t, w));
	w->result = tdm_task_result(t);
	w->seen = w->shared != NULL ? *w->shared : 0;
	__atomic_store_n(&w->after, 1, __ATOMIC_RELEASE);
	TDM_END(t);
}

Test(resumable, notify_resumes_the_task_after_the_await_with_what_was_written_before,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	static int shared;
	struct waiter w = {.n = &n, .shared = &shared};
	tdm_group g;
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &w, &g), 0);
	while (!__atomic_load_n(&w.before, __ATOMIC_ACQUIRE))
		sched_yield();
	shared = 42; /* published by the fire */
	cr_assert_eq(tdm_notify_fire(&n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(w.after, 1);
	cr_assert_eq(w.result, 0);
	cr_assert_eq(w.seen, 42);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

Test(resumable, an_await_on_a_fired_notify_continues_at_once, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	cr_assert_eq(tdm_notify_fire(&n), 0);
	struct waiter w = {.n = &n};
	tdm_group g;
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &w, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(w.first_rc, 0, "no suspension: the condition already held");
	cr_assert_eq(w.after, 1);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/*
 * tdm_notify_fire_result: the awaiting task resumes with the result, and an await that comes
 * after the fire gets it at once, from the call and from tdm_task_result; a reset forgets it.
 */
Test(resumable, a_notify_fired_with_a_result_hands_it_to_its_task_now_and_later,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	static int shared;
	struct waiter w = {.n = &n, .shared = &shared};
	tdm_group g;
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &w, &g), 0);
	while (!__atomic_load_n(&w.registered, __ATOMIC_ACQUIRE))
		sched_yield();
	shared = 7;
	cr_assert_eq(tdm_notify_fire_result(&n, -EIO), 0);
	cr_assert_eq(tdm_group_wait(&g), 0, "the task itself returned 0");
	cr_assert_eq(w.first_rc, TDM_SUSPENDED);
	cr_assert_eq(w.result, -EIO, "resumed with the fire's result, not %d", w.result);
	cr_assert_eq(w.seen, 7);

	/* Fired already: the next await gets the result at once. */
	struct waiter later = {.n = &n};
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &later, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(later.first_rc, -EIO, "the await call returns the stored result");
	cr_assert_eq(later.result, -EIO, "and so does tdm_task_result");

	/* Every negative int survives the state word; a second fire replaces the result. */
	const int results[] = {-ECANCELED, -1, -4095, INT_MIN + 1, INT_MIN, 0};
	for (unsigned i = 0; i < sizeof(results) / sizeof(results[0]); i++) {
		cr_assert_eq(tdm_notify_fire_result(&n, -ENOMEM), 0);
		cr_assert_eq(tdm_notify_fire_result(&n, results[i]), 0);
		struct waiter again = {.n = &n};
		tdm_group_init(&g, ex);
		cr_assert_eq(tdm_spawn(ex, wait_task, &again, &g), 0);
		cr_assert_eq(tdm_group_wait(&g), 0);
		cr_assert_eq(again.first_rc, results[i], "result %d came back as %d", results[i],
		             again.first_rc);
		cr_assert_eq(again.result, results[i]);
	}

	/* A reset forgets the result; tdm_notify_fire is a fire with 0. */
	cr_assert_eq(tdm_notify_fire_result(&n, -EIO), 0);
	cr_assert_eq(tdm_notify_reset(&n), 0);
	cr_assert_eq(tdm_notify_fire(&n), 0);
	struct waiter plain = {.n = &n};
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &plain, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(plain.first_rc, 0);
	cr_assert_eq(plain.result, 0);

	/* Bad input changes nothing. */
	cr_assert_eq(tdm_notify_fire_result(&n, 1), -EINVAL, "results are 0 or negative");
	cr_assert_eq(tdm_notify_fire_result(&n, TDM_SUSPENDED), -EINVAL);
	cr_assert_eq(tdm_notify_fire_result(NULL, -EIO), -EINVAL);
	tdm_notify fresh;
	memset(&fresh, 0, sizeof(fresh));
	cr_assert_eq(tdm_notify_fire_result(&fresh, -EIO), -EINVAL, "not initialised");
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

Test(resumable, a_second_awaiter_of_one_notify_gets_ebusy, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	struct waiter a = {.n = &n}, b = {.n = &n};
	tdm_group g;
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &a, &g), 0);
	while (!__atomic_load_n(&a.before, __ATOMIC_ACQUIRE))
		sched_yield();
	/* a may not have registered yet; b then registers and a gets -EBUSY instead: either way
	 * exactly one of them waits and the other is refused at once. */
	cr_assert_eq(tdm_spawn(ex, wait_task, &b, &g), 0);
	while (!__atomic_load_n(&b.before, __ATOMIC_ACQUIRE))
		sched_yield();
	while (!__atomic_load_n(&a.after, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&b.after, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(tdm_notify_fire(&n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert((a.result == -EBUSY) != (b.result == -EBUSY), "a %d, b %d", a.result, b.result);
	cr_assert_eq(a.result + b.result, -EBUSY);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/*
 * Two tasks await one notification at the same moment (let go together from a spin): the one
 * refused gets -EBUSY from the call itself, as documented, and the other waits for the fire.
 * When both saw it free, the loser used to go through a wake-up instead (the call returned
 * TDM_SUSPENDED).
 */
/* The twin tests' two tasks meet here, so that their awaits come at the same moment (waiting at
 * most 50 ms, for when both landed on one worker). */
static void meet(atomic_int *ready)
{
	atomic_fetch_add(ready, 1);
	for (uint64_t until = tdm_now_ns() + 50000000;
	     atomic_load(ready) < 2 && tdm_now_ns() < until;)
		;
}

enum { NTWIN_ROUNDS = 300 };

struct ntwin_round {
	tdm_notify n;
	atomic_int ready, returned;
};

struct ntwin {
	struct ntwin_round *r;
	int first, result;
};

static int ntwin_task(tdm_task *t, void *arg)
{
	struct ntwin *a = arg;
	TDM_BEGIN(t);
	meet(&a->r->ready);
	a->first = tdm_await_notify(t, &a->r->n);
	atomic_fetch_add(&a->r->returned, 1);
	TDM_AWAIT(t, a->first);
	a->result = tdm_task_result(t);
	TDM_END(t);
}

Test(resumable, two_tasks_awaiting_one_notify_at_once_one_gets_ebusy_at_once,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	tdm_executor *ex = make(3, TDM_SHUTDOWN_DRAIN, NULL);
	static struct ntwin_round r;
	for (int round = 0; round < NTWIN_ROUNDS; round++) {
		atomic_store(&r.ready, 0);
		atomic_store(&r.returned, 0);
		cr_assert_eq(tdm_notify_init(&r.n, ex), 0);
		struct ntwin a = {.r = &r}, b = {.r = &r};
		tdm_group h;
		cr_assert_eq(tdm_group_init(&h, ex), 0);
		cr_assert_eq(tdm_spawn(ex, ntwin_task, &a, &h), 0);
		cr_assert_eq(tdm_spawn(ex, ntwin_task, &b, &h), 0);
		while (atomic_load(&r.returned) < 2)
			sched_yield();
		cr_assert((a.first == -EBUSY && b.first == TDM_SUSPENDED) ||
		              (b.first == -EBUSY && a.first == TDM_SUSPENDED),
		          "round %d: the awaits returned %d and %d", round, a.first, b.first);
		cr_assert_eq(tdm_notify_fire(&r.n), 0);
		cr_assert_eq(tdm_group_wait(&h), 0);
		cr_assert_eq((a.first == TDM_SUSPENDED ? a : b).result, 0);
		cr_assert_eq((a.first == -EBUSY ? a : b).result, -EBUSY);
	}
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* A notification a task awaits is not started over: that would lose the task for good. */
Test(resumable, resetting_an_awaited_notify_is_ebusy, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	struct waiter w = {.n = &n};
	tdm_group g;
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, wait_task, &w, &g), 0);
	while (!__atomic_load_n(&w.registered, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(tdm_notify_reset(&n), -EBUSY);
	cr_assert_eq(tdm_notify_fire(&n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(w.first_rc, TDM_SUSPENDED, "it waited (not fired before its await)");
	cr_assert_eq(w.result, 0, "the awaiting task resumed");
	cr_assert_eq(tdm_notify_reset(&n), 0, "fired: it may start over");
	cr_assert_eq(tdm_notify_fire(&n), 0, "and fire again");
	tdm_notify fresh;
	memset(&fresh, 0, sizeof(fresh));
	cr_assert_eq(tdm_notify_reset(&fresh), -EINVAL, "not initialised");
	cr_assert_eq(tdm_notify_reset(NULL), -EINVAL);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

static atomic_int children_done;

static void child(void *arg)
{
	(void)arg;
	for (volatile int i = 0; i < 1000; i++)
		;
	atomic_fetch_add(&children_done, 1);
}

struct parent {
	tdm_group g;
	int seen_children, result, empty_rc;
	tdm_group empty;
};

static int parent_task(tdm_task *t, void *arg)
{
	struct parent *p = arg;
	TDM_BEGIN(t);
	tdm_group_init(&p->empty, tdm_task_executor(t));
	p->empty_rc = tdm_await_group(t, &p->empty); /* nothing spawned: continues at once */
	tdm_group_init(&p->g, tdm_task_executor(t));
	for (int i = 0; i < 100; i++)
		tdm_group_spawn(&p->g, child, NULL);
	TDM_AWAIT(t, tdm_await_group(t, &p->g));
	p->result = tdm_task_result(t);
	p->seen_children = atomic_load(&children_done);
	TDM_END(t);
}

Test(resumable, await_group_resumes_after_every_task_of_the_group, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	atomic_store(&children_done, 0);
	struct parent p = {0};
	tdm_group g;
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_spawn(ex, parent_task, &p, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(p.empty_rc, 0);
	cr_assert_eq(p.result, 0);
	cr_assert_eq(p.seen_children, 100, "resumed only after all 100 children");
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* Many tasks, fired from another thread in a shuffled order while they are still suspending:
 * each resumes exactly once, whether the fire comes before or after its worker parks it. */
static struct waiter many[MANY];
static tdm_notify notes[MANY];

static void *fire_all(void *arg)
{
	int *order = arg;
	for (int i = 0; i < MANY; i++)
		tdm_notify_fire(&notes[order[i]]);
	return NULL;
}

Test(resumable, many_notifications_fired_while_tasks_suspend_resume_each_once,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_executor *ex = make(4, TDM_SHUTDOWN_DRAIN, NULL);
	static int order[MANY];
	for (int i = 0; i < MANY; i++) {
		cr_assert_eq(tdm_notify_init(&notes[i], ex), 0);
		many[i] = (struct waiter){.n = &notes[i]};
		order[i] = i;
	}
	srand(7);
	for (int i = MANY - 1; i > 0; i--) {
		int j = rand() % (i + 1), tmp = order[i];
		order[i] = order[j];
		order[j] = tmp;
	}
	tdm_group g;
	tdm_group_init(&g, ex);
	pthread_t firer;
	for (int i = 0; i < MANY; i++)
		cr_assert_eq(tdm_spawn(ex, wait_task, &many[i], &g), 0);
	cr_assert_eq(pthread_create(&firer, NULL, fire_all, order), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	pthread_join(firer, NULL);
	for (int i = 0; i < MANY; i++) {
		cr_assert_eq(many[i].after, 1, "task %d resumed", i);
		cr_assert_eq(many[i].result, 0);
	}
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

static atomic_int cancelled_resumables;

static void noop(void *arg)
{
	(void)arg;
}

static void count_cancel(void *user, tdm_fn fn, void *arg)
{
	(void)user;
	if (fn == NULL && arg != NULL)
		atomic_fetch_add(&cancelled_resumables, 1);
}

struct destroy_args {
	tdm_executor *ex;
	atomic_int done;
};

static void *destroy_thread(void *arg)
{
	struct destroy_args *d = arg;
	tdm_executor_destroy(d->ex);
	atomic_store(&d->done, 1);
	return NULL;
}

/* A task awaiting a notification nothing fires: a destroy in TDM_SHUTDOWN_CANCEL cancels it
 * (reported to on_cancel, the rest of it not run) and returns. It waited for ever before. */
Test(resumable, cancel_shutdown_cancels_a_task_awaiting_a_notification,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	atomic_store(&cancelled_resumables, 0);
	tdm_executor *ex = make(2, TDM_SHUTDOWN_CANCEL, count_cancel);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	struct waiter w = {.n = &n};
	cr_assert_eq(tdm_spawn(ex, wait_task, &w, NULL), 0);
	while (!__atomic_load_n(&w.registered, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(tdm_executor_destroy(ex), 0);
	cr_assert_eq(w.first_rc, TDM_SUSPENDED, "it waited");
	cr_assert_eq(w.after, 0, "the rest of the task did not run");
	cr_assert_eq(atomic_load(&cancelled_resumables), 1, "it was reported cancelled instead");
	cr_assert_eq(tdm_notify_fire(&n), 0, "the notification outlives the executor, unawaited");
}

/* A running task that awaits a notification once a destroy in TDM_SHUTDOWN_CANCEL has begun gets
 * -ECANCELED from the call and goes on (it would have waited for ever). */
struct late_waiter {
	tdm_notify *n;
	atomic_int started, go, done;
	int rc, result;
};

static int late_wait_task(tdm_task *t, void *arg)
{
	struct late_waiter *w = arg;
	TDM_BEGIN(t);
	atomic_store(&w->started, 1);
	while (!atomic_load(&w->go))
		sched_yield();
	TDM_AWAIT(t, w->rc = tdm_await_notify(t, w->n));
	w->result = tdm_task_result(t);
	atomic_store(&w->done, 1);
	TDM_END(t);
}

Test(resumable, an_await_after_a_cancel_shutdown_began_is_ecanceled,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_CANCEL, count_cancel);
	tdm_notify n;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	static struct late_waiter w;
	memset(&w, 0, sizeof(w));
	w.n = &n;
	cr_assert_eq(tdm_spawn(ex, late_wait_task, &w, NULL), 0);
	while (!atomic_load(&w.started)) /* running: the destroy lets it finish */
		sched_yield();
	struct destroy_args d = {.ex = ex};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, destroy_thread, &d), 0);
	while (tdm_submit(ex, noop, NULL) != -ESHUTDOWN)
		sched_yield();
	atomic_store(&w.go, 1); /* the task runs on: the destroy waits for it */
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&d.done), 1);
	cr_assert_eq(atomic_load(&w.done), 1, "the task went on");
	cr_assert_eq(w.rc, -ECANCELED);
	cr_assert_eq(w.result, -ECANCELED);
}

/*
 * A cancelled task's on_cancel frees the notification it would have fired, while the destroy
 * still has tasks awaiting notifications to take off them, the one on that notification last:
 * the destroy must not write into it then (ASan: a use-after-free before the waiters were taken
 * off ahead of every on_cancel). One worker: a blocker runs until the destroy has set
 * cancelling, with the firer queued behind it; many other waiters make the sweep long.
 */
#define MANY_WAITERS 20000

static tdm_notify *freed_by_cancel;

static void free_on_cancel(void *user, tdm_fn fn, void *arg)
{
	(void)user;
	if (fn != NULL && arg == (void *)&freed_by_cancel) {
		free(freed_by_cancel);
		freed_by_cancel = NULL;
	}
}

static void fire_it(void *arg)
{
	(void)arg;
	tdm_notify_fire(freed_by_cancel);
}

static atomic_int blocker_running, awaiting;

/* Until the destroy has set cancelling (internal.h): the firer behind it is then cancelled at
 * once, racing the destroy's sweep as closely as a program can. */
static void block_until_cancelling(void *arg)
{
	struct tdm_executor *ex = arg;
	atomic_store(&blocker_running, 1);
	while (!atomic_load(&ex->cancelling))
		sched_yield();
}

static int await_only(tdm_task *t, void *arg)
{
	TDM_BEGIN(t);
	atomic_fetch_add(&awaiting, 1);
	TDM_AWAIT(t, tdm_await_notify(t, arg));
	TDM_END(t);
}

Test(resumable, a_notification_freed_by_on_cancel_is_not_written_by_the_destroy,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	tdm_config c;
	tdm_config_init(&c);
	c.workers = 1;
	c.shutdown = TDM_SHUTDOWN_CANCEL;
	c.on_cancel = free_on_cancel;
	tdm_executor *ex;
	cr_assert_eq(tdm_executor_create(&ex, &c), 0);
	atomic_store(&blocker_running, 0);
	atomic_store(&awaiting, 0);
	freed_by_cancel = malloc(sizeof(*freed_by_cancel));
	tdm_notify *others = malloc(MANY_WAITERS * sizeof(*others));
	cr_assert(freed_by_cancel != NULL && others != NULL);
	cr_assert_eq(tdm_notify_init(freed_by_cancel, ex), 0);
	cr_assert_eq(tdm_spawn(ex, await_only, freed_by_cancel, NULL), 0); /* swept last */
	for (int i = 0; i < MANY_WAITERS; i++) {
		cr_assert_eq(tdm_notify_init(&others[i], ex), 0);
		cr_assert_eq(tdm_spawn(ex, await_only, &others[i], NULL), 0);
	}
	/* Every waiter suspended, then the blocker running on the one worker, then the firer
	 * queued behind it (submitted any earlier, the worker might run them in another order). */
	while (atomic_load(&awaiting) < MANY_WAITERS + 1)
		sched_yield();
	cr_assert_eq(tdm_submit(ex, block_until_cancelling, ex), 0);
	while (!atomic_load(&blocker_running))
		sched_yield();
	cr_assert_eq(tdm_submit(ex, fire_it, &freed_by_cancel), 0);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
	cr_assert_null(freed_by_cancel, "the firer was cancelled");
	free(others);
}

/*
 * Fires racing the destroy's sweep (a stress test of the sweep, under TSan in make test): each
 * awaiting task is resumed by its fire or cancelled by the destroy, exactly once, and the
 * destroy returns. A sweep and a fire that both took a task would wake it twice.
 */
#define RACE_TASKS 64

struct race_waiter {
	tdm_notify *n;
	atomic_int *registered, *resumed;
};

static int race_task(tdm_task *t, void *arg)
{
	struct race_waiter *w = arg;
	TDM_BEGIN(t);
	atomic_fetch_add(w->registered, 1);
	TDM_AWAIT(t, tdm_await_notify(t, w->n));
	atomic_fetch_add(w->resumed, 1);
	TDM_END(t);
}

struct race_firer {
	tdm_notify *n;
	atomic_int go;
};

static void *fire_each(void *arg)
{
	struct race_firer *f = arg;
	while (!atomic_load(&f->go))
		sched_yield();
	for (int i = 0; i < RACE_TASKS; i++)
		tdm_notify_fire(&f->n[i]);
	return NULL;
}

Test(resumable, fires_racing_a_cancel_shutdown_lose_no_task, .timeout = TDM_TEST_TIMEOUT(120))
{
	static tdm_notify n[RACE_TASKS];
	static struct race_waiter w[RACE_TASKS];
	for (int round = 0; round < 50; round++) {
		atomic_store(&cancelled_resumables, 0);
		atomic_int registered = 0, resumed = 0;
		tdm_executor *ex = make(3, TDM_SHUTDOWN_CANCEL, count_cancel);
		for (int i = 0; i < RACE_TASKS; i++) {
			cr_assert_eq(tdm_notify_init(&n[i], ex), 0);
			w[i] = (struct race_waiter){
			    .n = &n[i], .registered = &registered, .resumed = &resumed};
			cr_assert_eq(tdm_spawn(ex, race_task, &w[i], NULL), 0);
		}
		while (atomic_load(&registered) < RACE_TASKS)
			sched_yield();
		struct race_firer f = {.n = n};
		pthread_t th;
		cr_assert_eq(pthread_create(&th, NULL, fire_each, &f), 0);
		atomic_store(&f.go, 1);
		cr_assert_eq(tdm_executor_destroy(ex), 0);
		pthread_join(th, NULL);
		cr_assert_eq(atomic_load(&resumed) + atomic_load(&cancelled_resumables), RACE_TASKS,
		             "round %d: %d resumed, %d cancelled", round, atomic_load(&resumed),
		             atomic_load(&cancelled_resumables));
	}
}

Test(resumable, awaits_outside_a_running_task_are_refused)
{
	tdm_executor *ex = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify n;
	tdm_group g;
	cr_assert_eq(tdm_notify_init(&n, ex), 0);
	tdm_group_init(&g, ex);
	cr_assert_eq(tdm_await_notify(NULL, &n), -EINVAL);
	cr_assert_eq(tdm_await_group(NULL, &g), -EINVAL);
	cr_assert_eq(tdm_notify_init(NULL, ex), -EINVAL);
	cr_assert_eq(tdm_notify_init(&n, NULL), -EINVAL);
	tdm_notify zero = {{0}};
	cr_assert_eq(tdm_notify_fire(&zero), -EINVAL);
	cr_assert_eq(tdm_spawn(NULL, wait_task, NULL, NULL), -EINVAL);
	cr_assert_eq(tdm_spawn(ex, NULL, NULL, NULL), -EINVAL);
	cr_assert_eq(tdm_task_result(NULL), -EINVAL);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* ---- bad arguments ---- */

static int flag_task(tdm_task *t, void *arg)
{
	(void)t;
	atomic_store((atomic_int *)arg, 1);
	return 0;
}

Test(resumable, spawn_into_a_foreign_or_uninitialised_group_returns_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_executor *other = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_group foreign, zero;
	cr_assert_eq(tdm_group_init(&foreign, other), 0);
	memset(&zero, 0, sizeof zero);
	atomic_int ran = 0;
	cr_assert_eq(tdm_spawn(ex, flag_task, &ran, &foreign), -EINVAL,
	             "a group of another executor");
	cr_assert_eq(tdm_spawn(ex, flag_task, &ran, &zero), -EINVAL, "a group never initialised");
	/* Nothing was counted in the group: its wait returns at once. */
	cr_assert_eq(tdm_group_wait(&foreign), 0);
	tdm_test_assert_usable(ex);
	tdm_test_assert_usable(other);
	cr_assert_eq(atomic_load(&ran), 0, "a refused spawn ran its task anyway");
	cr_assert_eq(tdm_executor_destroy(other), 0);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

struct bad_awaits {
	tdm_group zero_group;
	tdm_notify zero_notify;
	tdm_notify fired; /* awaiting it sets the result back to 0 between the bad awaits */
	int rc[4], res[4];
	tdm_executor *exec;
};

/* Each bad await fails at once with -EINVAL, which is also the task's result. */
static int bad_await_task(tdm_task *t, void *arg)
{
	struct bad_awaits *b = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, b->rc[0] = tdm_await_group(t, NULL));
	b->res[0] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_notify(t, &b->fired));
	TDM_AWAIT(t, b->rc[1] = tdm_await_group(t, &b->zero_group));
	b->res[1] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_notify(t, &b->fired));
	TDM_AWAIT(t, b->rc[2] = tdm_await_notify(t, NULL));
	b->res[2] = tdm_task_result(t);
	TDM_AWAIT(t, tdm_await_notify(t, &b->fired));
	TDM_AWAIT(t, b->rc[3] = tdm_await_notify(t, &b->zero_notify));
	b->res[3] = tdm_task_result(t);
	b->exec = tdm_task_executor(t);
	TDM_END(t);
}

Test(resumable, awaits_of_null_or_uninitialised_objects_return_einval_as_the_result,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	struct bad_awaits b;
	memset(&b, 0, sizeof b);
	cr_assert_eq(tdm_notify_init(&b.fired, ex), 0);
	cr_assert_eq(tdm_notify_fire(&b.fired), 0);
	cr_assert_eq(tdm_notify_fire(NULL), -EINVAL);
	cr_assert_null(tdm_task_executor(NULL));
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_spawn(ex, bad_await_task, &b, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(b.rc[i], -EINVAL, "await %d returned %d", i, b.rc[i]);
		cr_assert_eq(b.res[i], -EINVAL, "await %d left the result %d", i, b.res[i]);
	}
	cr_assert_eq(b.exec, ex);
	tdm_test_assert_usable(ex);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* A resumable child that finishes once the gate fires. */
static int gated_child(tdm_task *t, void *arg)
{
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_notify(t, (tdm_notify *)arg));
	TDM_END(t);
}

struct group_awaiter {
	tdm_group *g;
	int first, result, again, again_result;
	int registered; /* the first await call returned */
};

static int await_group_and_flag(tdm_task *t, struct group_awaiter *a)
{
	int rc = tdm_await_group(t, a->g);
	__atomic_store_n(&a->registered, 1, __ATOMIC_RELEASE);
	return rc;
}

static int group_awaiter_task(tdm_task *t, void *arg)
{
	struct group_awaiter *a = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, a->first = await_group_and_flag(t, a));
	a->result = tdm_task_result(t);
	TDM_AWAIT(t, a->again = tdm_await_group(t, a->g));
	a->again_result = tdm_task_result(t);
	TDM_END(t);
}

/* A group that one task awaits is refused to a second, and, once its await is over, to the same
 * task until the group is initialised again. */
Test(resumable, awaiting_a_group_already_awaited_returns_ebusy, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify gate;
	cr_assert_eq(tdm_notify_init(&gate, ex), 0);
	tdm_group g, ha, hb;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_spawn(ex, gated_child, &gate, &g), 0);
	struct group_awaiter a = {.g = &g}, b = {.g = &g};
	cr_assert_eq(tdm_group_init(&ha, ex), 0);
	cr_assert_eq(tdm_spawn(ex, group_awaiter_task, &a, &ha), 0);
	/* The child waits for the gate, so a's await suspends. */
	while (!__atomic_load_n(&a.registered, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(tdm_group_init(&hb, ex), 0);
	cr_assert_eq(tdm_spawn(ex, group_awaiter_task, &b, &hb), 0);
	cr_assert_eq(tdm_group_wait(&hb), 0);
	cr_assert_eq(b.first, -EBUSY, "a second awaiter got %d", b.first);
	cr_assert_eq(b.result, -EBUSY);
	cr_assert_eq(tdm_notify_fire(&gate), 0);
	cr_assert_eq(tdm_group_wait(&ha), 0);
	cr_assert_eq(a.first, TDM_SUSPENDED);
	cr_assert_eq(a.result, 0, "the first awaiter resumed once the child finished");
	cr_assert_eq(a.again, -EBUSY, "the group awaited to its end, not re-initialised: %d",
	             a.again);
	cr_assert_eq(a.again_result, -EBUSY);
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_wait(&g), 0, "re-initialised, the group works again");
	tdm_test_assert_usable(ex);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/*
 * Two tasks await one group at the same moment (let go together from a spin): one is refused with
 * -EBUSY, the other suspends and resumes once the group's task finished, never before. The
 * rounds repeat the race: a check of the waiter slot alone, before the owner's reference was
 * dropped, let both through now and then (one went on at once, the other was never woken).
 */
enum { TWIN_ROUNDS = 300 };

struct twin_round {
	tdm_group g;
	tdm_notify gate;
	atomic_int ready, returned, child_done;
};

struct twin {
	struct twin_round *r;
	int first, result, saw_done;
};

static int twin_child(tdm_task *t, void *arg)
{
	struct twin_round *r = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_notify(t, &r->gate));
	atomic_store(&r->child_done, 1);
	TDM_END(t);
}

static int twin_task(tdm_task *t, void *arg)
{
	struct twin *a = arg;
	TDM_BEGIN(t);
	meet(&a->r->ready);
	a->first = tdm_await_group(t, &a->r->g);
	atomic_fetch_add(&a->r->returned, 1);
	TDM_AWAIT(t, a->first);
	a->result = tdm_task_result(t);
	a->saw_done = atomic_load(&a->r->child_done);
	TDM_END(t);
}

Test(resumable, two_tasks_awaiting_one_group_at_once_one_gets_ebusy,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	tdm_executor *ex = make(3, TDM_SHUTDOWN_DRAIN, NULL);
	static struct twin_round r;
	for (int round = 0; round < TWIN_ROUNDS; round++) {
		atomic_store(&r.ready, 0);
		atomic_store(&r.returned, 0);
		atomic_store(&r.child_done, 0);
		cr_assert_eq(tdm_notify_init(&r.gate, ex), 0);
		cr_assert_eq(tdm_group_init(&r.g, ex), 0);
		cr_assert_eq(tdm_spawn(ex, twin_child, &r, &r.g), 0);
		struct twin a = {.r = &r}, b = {.r = &r};
		tdm_group h;
		cr_assert_eq(tdm_group_init(&h, ex), 0);
		cr_assert_eq(tdm_spawn(ex, twin_task, &a, &h), 0);
		cr_assert_eq(tdm_spawn(ex, twin_task, &b, &h), 0);
		while (atomic_load(&r.returned) < 2)
			sched_yield();
		/* The child still waits for the gate: neither await may be over. */
		cr_assert((a.first == -EBUSY) != (b.first == -EBUSY),
		          "round %d: the awaits returned %d and %d", round, a.first, b.first);
		cr_assert(a.first == TDM_SUSPENDED || b.first == TDM_SUSPENDED,
		          "round %d: %d and %d, and the group's task has not finished", round,
		          a.first, b.first);
		cr_assert_eq(tdm_notify_fire(&r.gate), 0);
		cr_assert_eq(tdm_group_wait(&h), 0);
		struct twin *in = a.first == TDM_SUSPENDED ? &a : &b;
		cr_assert_eq(in->result, 0);
		cr_assert_eq(in->saw_done, 1, "round %d: resumed before the group's task finished",
		             round);
	}
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* A group that is over when it is awaited (here: it never had a task) resumes at once, and is
 * then refused to a second await as a group awaited to its end is; that second await used to
 * suspend for good. */
Test(resumable, awaiting_a_group_over_at_once_twice_returns_ebusy, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(2, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_group g, h;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	struct group_awaiter a = {.g = &g};
	cr_assert_eq(tdm_group_init(&h, ex), 0);
	cr_assert_eq(tdm_spawn(ex, group_awaiter_task, &a, &h), 0);
	cr_assert_eq(tdm_group_wait(&h), 0);
	cr_assert_eq(a.first, 0, "over already: the result at once, not %d", a.first);
	cr_assert_eq(a.result, 0);
	cr_assert_eq(a.again, -EBUSY, "awaited again: %d", a.again);
	cr_assert_eq(a.again_result, -EBUSY);
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_wait(&g), 0, "re-initialised, the group works again");
	tdm_test_assert_usable(ex);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* ---- handles of another executor ---- */

struct foreign {
	tdm_group *idle, *busy;
	tdm_notify *fired, *unfired;
	int rc[4], res[4];
	/* The await of the busy group, of the unfired notification, returned. */
	atomic_int busy_returned, unfired_returned;
};

static int await_busy_and_flag(tdm_task *t, struct foreign *f)
{
	int rc = tdm_await_group(t, f->busy);
	atomic_store_explicit(&f->busy_returned, 1, memory_order_release);
	return rc;
}

static int await_unfired_and_flag(tdm_task *t, struct foreign *f)
{
	int rc = tdm_await_notify(t, f->unfired);
	atomic_store_explicit(&f->unfired_returned, 1, memory_order_release);
	return rc;
}

/* Each await names a handle of another executor: -EINVAL at once, which is also the result. */
static int foreign_task(tdm_task *t, void *arg)
{
	struct foreign *f = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, f->rc[0] = tdm_await_group(t, f->idle));
	f->res[0] = tdm_task_result(t);
	TDM_AWAIT(t, f->rc[1] = await_busy_and_flag(t, f));
	f->res[1] = tdm_task_result(t);
	TDM_AWAIT(t, f->rc[2] = tdm_await_notify(t, f->fired));
	f->res[2] = tdm_task_result(t);
	TDM_AWAIT(t, f->rc[3] = await_unfired_and_flag(t, f));
	f->res[3] = tdm_task_result(t);
	TDM_END(t);
}

/*
 * A task of one executor awaits groups and notifications of another: each await is refused with
 * -EINVAL at once, and leaves the handle to its own executor, where it still works. The await of
 * such a group used to return 0 when the group was over, and never to return when it was busy;
 * the await of such a notification was accepted.
 */
Test(resumable, awaiting_a_group_or_notify_of_another_executor_returns_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_executor *other = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify gate, fired, unfired;
	cr_assert_eq(tdm_notify_init(&gate, other), 0);
	cr_assert_eq(tdm_notify_init(&fired, other), 0);
	cr_assert_eq(tdm_notify_fire(&fired), 0);
	cr_assert_eq(tdm_notify_init(&unfired, other), 0);
	tdm_group idle, busy;
	cr_assert_eq(tdm_group_init(&idle, other), 0);
	cr_assert_eq(tdm_group_init(&busy, other), 0);
	cr_assert_eq(tdm_spawn(other, gated_child, &gate, &busy), 0); /* busy until the gate */
	struct foreign f = {.idle = &idle, .busy = &busy, .fired = &fired, .unfired = &unfired};
	tdm_group h;
	cr_assert_eq(tdm_group_init(&h, ex), 0);
	cr_assert_eq(tdm_spawn(ex, foreign_task, &f, &h), 0);
	/* Each await that could suspend returned: let its group finish, fire its notification, so
	 * that an await wrongly accepted resumes and the test says so. */
	while (!atomic_load_explicit(&f.busy_returned, memory_order_acquire))
		sched_yield();
	cr_assert_eq(tdm_notify_fire(&gate), 0);
	while (!atomic_load_explicit(&f.unfired_returned, memory_order_acquire))
		sched_yield();
	cr_assert_eq(tdm_notify_fire(&unfired), 0);
	cr_assert_eq(tdm_group_wait(&h), 0);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(f.rc[i], -EINVAL, "await %d returned %d", i, f.rc[i]);
		cr_assert_eq(f.res[i], -EINVAL, "await %d left the result %d", i, f.res[i]);
	}
	/* The handles are still their executor's: its task awaits the notification, its owner
	 * waits for the groups. */
	cr_assert_eq(tdm_notify_reset(&unfired), 0);
	struct waiter w = {.n = &unfired};
	tdm_group hw;
	cr_assert_eq(tdm_group_init(&hw, other), 0);
	cr_assert_eq(tdm_spawn(other, wait_task, &w, &hw), 0);
	while (!__atomic_load_n(&w.registered, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(tdm_notify_fire(&unfired), 0);
	cr_assert_eq(tdm_group_wait(&hw), 0);
	cr_assert_eq(w.first_rc, TDM_SUSPENDED);
	cr_assert_eq(w.result, 0);
	cr_assert_eq(tdm_group_wait(&busy), 0);
	cr_assert_eq(tdm_group_wait(&idle), 0);
	tdm_test_assert_usable(ex);
	tdm_test_assert_usable(other);
	cr_assert_eq(tdm_executor_destroy(other), 0);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/* ---- a group's result, awaited ---- */

/* Returns its value: once the gate fires, or at once when it has none. */
struct returner {
	tdm_notify *gate;
	int value;
	atomic_int running; /* set when it has started: it finishes on the one worker */
};

static int returner_task(tdm_task *t, void *arg)
{
	struct returner *r = arg;
	TDM_BEGIN(t);
	atomic_store_explicit(&r->running, 1, memory_order_release);
	if (r->gate != NULL) {
		TDM_AWAIT(t, tdm_await_notify(t, r->gate));
	}
	return r->value;
	TDM_END(t);
}

/* With one worker: once a task of ex has started, a task submitted after it runs after it has
 * finished, its group's count included. */
static void after_the_running_task(tdm_executor *ex, atomic_int *running)
{
	while (!atomic_load_explicit(running, memory_order_acquire))
		sched_yield();
	tdm_test_assert_usable(ex);
}

/*
 * The await of a group reports what the group's tasks returned (the first nonzero value), both
 * when it suspends and when the group is over already; a task's return value went nowhere.
 */
Test(resumable, await_group_reports_the_first_nonzero_value_its_tasks_returned,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = make(1, TDM_SHUTDOWN_DRAIN, NULL);
	tdm_notify gate;
	cr_assert_eq(tdm_notify_init(&gate, ex), 0);

	/* Suspends: the child returns -EIO after the await began. */
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	struct returner late = {.gate = &gate, .value = -EIO};
	cr_assert_eq(tdm_spawn(ex, returner_task, &late, &g), 0);
	struct group_awaiter a = {.g = &g};
	tdm_group ha;
	cr_assert_eq(tdm_group_init(&ha, ex), 0);
	cr_assert_eq(tdm_spawn(ex, group_awaiter_task, &a, &ha), 0);
	while (!__atomic_load_n(&a.registered, __ATOMIC_ACQUIRE))
		sched_yield();
	cr_assert_eq(tdm_notify_fire(&gate), 0);
	cr_assert_eq(tdm_group_wait(&ha), 0);
	cr_assert_eq(a.first, TDM_SUSPENDED);
	cr_assert_eq(a.result, -EIO, "resumed with %d", a.result);

	/* Over already: -ENOMEM first, then 0 and -EIO; the await returns it at once. */
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	struct returner first = {.value = -ENOMEM}, zero = {.value = 0}, second = {.value = -EIO};
	cr_assert_eq(tdm_spawn(ex, returner_task, &first, &g), 0);
	after_the_running_task(ex, &first.running);
	cr_assert_eq(tdm_spawn(ex, returner_task, &zero, &g), 0);
	after_the_running_task(ex, &zero.running);
	cr_assert_eq(tdm_spawn(ex, returner_task, &second, &g), 0);
	after_the_running_task(ex, &second.running);
	struct group_awaiter b = {.g = &g};
	cr_assert_eq(tdm_group_init(&ha, ex), 0);
	cr_assert_eq(tdm_spawn(ex, group_awaiter_task, &b, &ha), 0);
	cr_assert_eq(tdm_group_wait(&ha), 0);
	cr_assert_eq(b.first, -ENOMEM, "over already: the result at once, not %d", b.first);
	cr_assert_eq(b.result, -ENOMEM);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}
