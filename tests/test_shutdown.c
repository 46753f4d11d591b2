// SPDX-License-Identifier: MIT
/*
 * Specification of tdm_executor_destroy(): TDM_SHUTDOWN_DRAIN runs every queued task and every
 * task they spawn; TDM_SHUTDOWN_CANCEL reports every task that has not started to on_cancel
 * instead (exactly once each) and groups that lost tasks say -ECANCELED; outside submissions
 * after destroy began get -ESHUTDOWN; a worker that tries to destroy its own executor gets
 * -EDEADLK.
 *
 * Several tests need a task that is running "during the shutdown". They use a blocker: a task
 * that spins until an outside thread, submitting in a loop, has been refused with -ESHUTDOWN,
 * which proves that destroy has begun; then the blocker does what the test is about. With one
 * worker, busy in the blocker, nothing queued can start before the shutdown.
 */
#include "common.h"

#include <stdlib.h>

#include "internal.h" /* pool_lock: holds an outside submission inside */

TDM_TEST_SUITE(shutdown);

/* ---- bookkeeping: every task is run or cancelled, and we count which ------------------------ */

static int user_token; /* its address is the on_cancel_user of every executor here */

static struct {
	atomic_uint *state; /* per item: +1 when run, +1 when cancelled */
	size_t nitems;
	atomic_size_t ran, cancelled; /* items */
	atomic_size_t probes_ran, probes_cancelled;
	atomic_size_t wrong_user, unknown_fn, bad_arg;
	atomic_size_t errors; /* calls inside tasks that failed */
	atomic_int last_error;
} sd;

static void sd_items(size_t n)
{
	sd.nitems = n;
	sd.state = calloc(n != 0 ? n : 1, sizeof *sd.state);
	cr_assert_not_null(sd.state);
}

static void sd_error(int rc)
{
	atomic_fetch_add(&sd.errors, 1);
	atomic_store(&sd.last_error, rc);
}

static void sd_mark(void *arg, atomic_size_t *counter)
{
	size_t i = (uintptr_t)arg;
	if (i >= sd.nitems) {
		atomic_fetch_add(&sd.bad_arg, 1);
		return;
	}
	atomic_fetch_add(&sd.state[i], 1);
	atomic_fetch_add(counter, 1);
}

/* An item task: a little work, so that queues are still full when destroy starts. */
static void item_task(void *arg)
{
	tdm_test_spin(2000);
	sd_mark(arg, &sd.ran);
}

static void probe_task(void *arg)
{
	(void)arg;
	atomic_fetch_add(&sd.probes_ran, 1);
}

/* Parents (item_parent) and children (item_task) are told apart in on_cancel by fn. */
static void item_parent(void *arg);

static void on_cancel(void *user, tdm_fn fn, void *arg)
{
	if (user != &user_token)
		atomic_fetch_add(&sd.wrong_user, 1);
	if (fn == item_task || fn == item_parent)
		sd_mark(arg, &sd.cancelled);
	else if (fn == probe_task)
		atomic_fetch_add(&sd.probes_cancelled, 1);
	else
		atomic_fetch_add(&sd.unknown_fn, 1);
}

static tdm_executor *create_executor(unsigned workers, tdm_shutdown_mode mode)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = workers;
	cfg.shutdown = mode;
	cfg.on_cancel = on_cancel;
	cfg.on_cancel_user = &user_token;
	return tdm_test_create_cfg(&cfg);
}

static void assert_bookkeeping_clean(void)
{
	cr_assert_eq(atomic_load(&sd.errors), 0, "%zu calls inside tasks failed, last: %d (%s)",
	             atomic_load(&sd.errors), atomic_load(&sd.last_error),
	             tdm_strerror(atomic_load(&sd.last_error)));
	cr_assert_eq(atomic_load(&sd.wrong_user), 0, "on_cancel got another user pointer");
	cr_assert_eq(atomic_load(&sd.unknown_fn), 0, "on_cancel got a function never submitted");
	cr_assert_eq(atomic_load(&sd.bad_arg), 0,
	             "a task or on_cancel got an argument never given");
}

/* Items lo..hi-1 each ran or were cancelled exactly once. */
static void assert_each_item_once(size_t lo, size_t hi)
{
	size_t never = 0, twice = 0;
	for (size_t i = lo; i < hi; i++) {
		unsigned c = atomic_load(&sd.state[i]);
		never += c == 0;
		twice += c > 1;
	}
	cr_assert(never == 0 && twice == 0,
	          "of %zu tasks %zu were neither run nor cancelled, %zu were run or cancelled "
	          "more than once",
	          hi - lo, never, twice);
}

/* ---- the blocker ------------------------------------------------------------------------- */

static struct {
	tdm_executor *ex;
	atomic_int started;
	atomic_int released;    /* set once destroy has refused an outside submission */
	atomic_size_t accepted; /* probes accepted before that */
	atomic_int refusal;     /* what the prober's last submission returned */
	void (*during_shutdown)(void);
} blk;

static void *prober_main(void *arg)
{
	(void)arg;
	for (;;) {
		int rc = tdm_submit(blk.ex, probe_task, NULL);
		if (rc != 0) {
			atomic_store(&blk.refusal, rc);
			break;
		}
		atomic_fetch_add(&blk.accepted, 1);
		tdm_test_sleep_us(50); /* a handful of probes, not a flood */
	}
	/* Last access to blk.ex: from here destroy may finish and free it. */
	atomic_store_explicit(&blk.released, 1, memory_order_release);
	return NULL;
}

static void blocker_task(void *arg)
{
	(void)arg;
	atomic_store_explicit(&blk.started, 1, memory_order_release);
	while (!atomic_load_explicit(&blk.released, memory_order_acquire))
		sched_yield();
	if (blk.during_shutdown != NULL)
		blk.during_shutdown();
}

/*
 * Starts the blocker on ex (whose single worker it occupies), lets `queue` put work behind it,
 * then destroys ex while the prober knocks; returns once destroy has returned 0.
 */
static void destroy_with_blocker(tdm_executor *ex, void (*queue)(tdm_executor *),
                                 void (*during_shutdown)(void))
{
	blk.ex = ex;
	blk.during_shutdown = during_shutdown;
	cr_assert_eq(tdm_submit(ex, blocker_task, NULL), 0);
	while (!atomic_load_explicit(&blk.started, memory_order_acquire))
		sched_yield();
	if (queue != NULL)
		queue(ex);
	pthread_t prober;
	cr_assert_eq(pthread_create(&prober, NULL, prober_main, NULL), 0);
	tdm_test_destroy(ex);
	pthread_join(prober, NULL);
	cr_assert_eq(atomic_load(&blk.refusal), -ESHUTDOWN,
	             "a submission from outside during destroy returned %d (%s)",
	             atomic_load(&blk.refusal), tdm_strerror(atomic_load(&blk.refusal)));
}

/* ---- destroy from a task ----------------------------------------------------------------- */

static struct {
	tdm_executor *ex;
	atomic_int rc;
} self_destroy;

static void self_destroy_task(void *arg)
{
	(void)arg;
	atomic_store(&self_destroy.rc, tdm_executor_destroy(self_destroy.ex));
}

Test(shutdown, destroy_from_a_task_of_the_executor_returns_edeadlk, .timeout = TDM_TEST_TIMEOUT(30))
{
	self_destroy.ex = tdm_test_create(2);
	atomic_store(&self_destroy.rc, 12345);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, self_destroy.ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, self_destroy_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&self_destroy.rc), -EDEADLK, "destroy from a task returned %d",
	             atomic_load(&self_destroy.rc));
	tdm_test_assert_usable(self_destroy.ex);
	tdm_test_destroy(self_destroy.ex);
}

/* ---- drain ------------------------------------------------------------------------------- */

static void submit_items(tdm_executor *ex, size_t lo, size_t hi)
{
	for (size_t i = lo; i < hi; i++) {
		int rc = tdm_submit(ex, item_task, (void *)(uintptr_t)i);
		cr_assert_eq(rc, 0, "submit %zu: %s", i, tdm_strerror(rc));
	}
}

Test(shutdown, drain_runs_every_queued_task, .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t n = tdm_test_size(100000, 10000);
	sd_items(n);
	tdm_executor *ex = create_executor(2, TDM_SHUTDOWN_DRAIN);
	submit_items(ex, 0, n);
	tdm_test_destroy(ex);
	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&sd.cancelled), 0);
	cr_assert_eq(atomic_load(&sd.ran), n, "%zu of %zu queued tasks ran", atomic_load(&sd.ran),
	             n);
	assert_each_item_once(0, n);
}

Test(shutdown, drain_never_calls_on_cancel, .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t n = tdm_test_size(20000, 2000);
	sd_items(n);
	tdm_executor *ex = create_executor(2, TDM_SHUTDOWN_DRAIN);
	submit_items(ex, 0, n);
	tdm_test_destroy(ex);
	cr_assert_eq(atomic_load(&sd.cancelled) + atomic_load(&sd.probes_cancelled) +
	                 atomic_load(&sd.unknown_fn),
	             0, "on_cancel was called under TDM_SHUTDOWN_DRAIN");
}

/*
 * Parents are items 0, C+1, 2(C+1), ...; parent p's children are the C items after it. A parent
 * submits its children from its worker, so during the shutdown too.
 */
enum { CHILDREN = 8 };
static tdm_executor *parents_ex;
static atomic_int parent_ran[100000];

static void item_parent(void *arg)
{
	size_t base = (uintptr_t)arg;
	atomic_store(&parent_ran[base / (CHILDREN + 1)], 1);
	sd_mark(arg, &sd.ran);
	for (size_t j = 1; j <= CHILDREN; j++) {
		int rc = tdm_submit(parents_ex, item_task, (void *)(uintptr_t)(base + j));
		if (rc != 0)
			sd_error(rc);
	}
}

static void submit_parents(tdm_executor *ex, size_t parents)
{
	for (size_t p = 0; p < parents; p++) {
		int rc = tdm_submit(ex, item_parent, (void *)(uintptr_t)(p * (CHILDREN + 1)));
		cr_assert_eq(rc, 0, "submit parent %zu: %s", p, tdm_strerror(rc));
	}
}

Test(shutdown, drain_runs_tasks_that_queued_tasks_spawn, .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t parents = tdm_test_size(10000, 1000);
	sd_items(parents * (CHILDREN + 1));
	parents_ex = create_executor(2, TDM_SHUTDOWN_DRAIN);
	submit_parents(parents_ex, parents);
	tdm_test_destroy(parents_ex);
	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&sd.ran), sd.nitems, "%zu of %zu tasks ran", atomic_load(&sd.ran),
	             sd.nitems);
	assert_each_item_once(0, sd.nitems);
}

Test(shutdown, outside_submission_after_destroy_began_returns_eshutdown,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = create_executor(1, TDM_SHUTDOWN_DRAIN);
	destroy_with_blocker(ex, NULL, NULL); /* asserts the -ESHUTDOWN */
	cr_assert_eq(atomic_load(&sd.probes_ran), atomic_load(&blk.accepted),
	             "%zu submissions accepted before the shutdown, %zu ran",
	             atomic_load(&blk.accepted), atomic_load(&sd.probes_ran));
}

/*
 * An outside submission that passed its shutdown check before destroy began is waited for: its
 * task runs (drain mode), and destroy neither terminates nor frees the executor under it. The
 * test holds the submission inside, on the task pool's lock, under which an outside thread takes
 * its task's memory. Without the wait, destroy frees the executor (and the lock) under it.
 */
struct in_flight {
	tdm_executor *ex;
	atomic_int step; /* 1: submitting, 2: returned */
	int rc;
};
static atomic_int in_flight_ran;

static void in_flight_task(void *arg)
{
	(void)arg;
	atomic_fetch_add(&in_flight_ran, 1);
}

static void *in_flight_submit(void *arg)
{
	struct in_flight *f = arg;
	atomic_store(&f->step, 1);
	f->rc = tdm_submit(f->ex, in_flight_task, NULL);
	atomic_store(&f->step, 2);
	return NULL;
}

static void *in_flight_destroy(void *arg)
{
	return (void *)(intptr_t)tdm_executor_destroy(arg);
}

Test(shutdown, destroy_waits_for_an_outside_submission_in_flight, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = create_executor(1, TDM_SHUTDOWN_DRAIN);
	static struct in_flight f;
	f.ex = ex;
	pthread_mutex_lock(&ex->pool_lock);
	pthread_t s, d;
	cr_assert_eq(pthread_create(&s, NULL, in_flight_submit, &f), 0);
	while (atomic_load(&f.step) == 0)
		sched_yield();
	/* Pauses, not timing assertions: time for the submission to reach the lock (one that has
	 * not by then is refused with -ESHUTDOWN, also right), then for destroy to get as far as
	 * it goes. */
	tdm_test_sleep_us(20000);
	cr_assert_eq(pthread_create(&d, NULL, in_flight_destroy, ex), 0);
	tdm_test_sleep_us(20000);
	/* Returned already only if it had not yet begun when destroy did: then refused. */
	cr_assert(atomic_load(&f.step) == 1 || f.rc == -ESHUTDOWN,
	          "the submission returned %d while the test held the lock", f.rc);
	pthread_mutex_unlock(&ex->pool_lock);
	void *drc;
	cr_assert_eq(pthread_join(d, &drc), 0);
	cr_assert_eq(pthread_join(s, NULL), 0);
	cr_assert_eq((int)(intptr_t)drc, 0);
	cr_assert(f.rc == 0 || f.rc == -ESHUTDOWN, "the submission: %d (%s)", f.rc,
	          tdm_strerror(f.rc));
	cr_assert_eq(atomic_load(&in_flight_ran), f.rc == 0 ? 1 : 0,
	             "accepted (%d), so it must run in drain mode", f.rc);
}

/*
 * Outside threads submit in a loop while the test thread destroys the executor, each until its
 * first refusal. A task running when the destroy begins keeps it from finishing until every
 * submitter was refused, so each refusal is over before the free; the destroy must order the
 * refusals' accesses (its gate, its shutdown flag) before that free itself. The submitters tell
 * the task with a relaxed counter on purpose: an acquire there would give ThreadSanitizer the
 * order that the destroy has to provide. (ThreadSanitizer reported the refusals against the
 * free until the destroy waited for every caller inside its gate before freeing.)
 */
enum { RACE_SUBMITTERS = 3 };

static struct {
	tdm_executor *ex;
	atomic_int started;
	atomic_int refused; /* relaxed only: see above */
	atomic_size_t accepted;
	int rc[RACE_SUBMITTERS];
} race;

static void race_blocker(void *arg)
{
	(void)arg;
	atomic_store_explicit(&race.started, 1, memory_order_release);
	while (atomic_load_explicit(&race.refused, memory_order_relaxed) < RACE_SUBMITTERS)
		sched_yield();
}

static void *race_submitter(void *arg)
{
	int *rc = arg;
	/* A pause between submissions: most refusals come after the destroy's first look at its
	 * gate, which would otherwise have ordered them by chance. */
	while ((*rc = tdm_submit(race.ex, probe_task, NULL)) == 0) {
		atomic_fetch_add(&race.accepted, 1);
		tdm_test_sleep_us(20);
	}
	atomic_fetch_add_explicit(&race.refused, 1, memory_order_relaxed);
	return NULL;
}

Test(shutdown, outside_submissions_racing_the_destroy_touch_no_freed_memory,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t rounds = tdm_test_size(60, 12);
	for (size_t round = 0; round < rounds; round++) {
		tdm_shutdown_mode mode = round % 2 ? TDM_SHUTDOWN_CANCEL : TDM_SHUTDOWN_DRAIN;
		race.ex = create_executor(1, mode);
		atomic_store(&race.started, 0);
		atomic_store(&race.refused, 0);
		atomic_store(&race.accepted, 0);
		atomic_store(&sd.probes_ran, 0);
		atomic_store(&sd.probes_cancelled, 0);
		cr_assert_eq(tdm_submit(race.ex, race_blocker, NULL), 0);
		while (!atomic_load_explicit(&race.started, memory_order_acquire))
			sched_yield();
		pthread_t th[RACE_SUBMITTERS];
		for (int i = 0; i < RACE_SUBMITTERS; i++) {
			race.rc[i] = 12345;
			cr_assert_eq(pthread_create(&th[i], NULL, race_submitter, &race.rc[i]), 0);
		}
		while (atomic_load(&race.accepted) < RACE_SUBMITTERS)
			sched_yield();
		tdm_test_destroy(race.ex);
		for (int i = 0; i < RACE_SUBMITTERS; i++) {
			cr_assert_eq(pthread_join(th[i], NULL), 0);
			cr_assert_eq(race.rc[i], -ESHUTDOWN, "round %zu: submitter %d got %d (%s)",
			             round, i, race.rc[i], tdm_strerror(race.rc[i]));
		}
		size_t done = atomic_load(&sd.probes_ran) + atomic_load(&sd.probes_cancelled);
		cr_assert_eq(done, atomic_load(&race.accepted),
		             "round %zu: %zu submissions accepted, %zu run or cancelled", round,
		             atomic_load(&race.accepted), done);
		if (mode == TDM_SHUTDOWN_DRAIN)
			cr_assert_eq(atomic_load(&sd.probes_cancelled), 0);
	}
}

/* During the shutdown, the blocker spawns K children: with tdm_submit, then into a group. */
enum { K = 200 };
static tdm_executor *during_ex;
static atomic_int during_wait_rc;

static void submit_children_during_shutdown(void)
{
	for (size_t i = 0; i < K; i++) {
		int rc = tdm_submit(during_ex, item_task, (void *)(uintptr_t)i);
		if (rc != 0)
			sd_error(rc);
	}
}

static void group_children_during_shutdown(void)
{
	tdm_group g;
	int rc = tdm_group_init(&g, during_ex);
	for (size_t i = 0; rc == 0 && i < K; i++)
		rc = tdm_group_spawn(&g, item_task, (void *)(uintptr_t)i);
	if (rc != 0)
		sd_error(rc);
	atomic_store(&during_wait_rc, tdm_group_wait(&g));
}

Test(shutdown, drain_runs_tasks_spawned_by_a_task_during_the_shutdown,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	sd_items(K);
	during_ex = create_executor(1, TDM_SHUTDOWN_DRAIN);
	destroy_with_blocker(during_ex, NULL, submit_children_during_shutdown);
	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&sd.ran), K);
	assert_each_item_once(0, K);
}

Test(shutdown, drain_group_wait_in_a_task_during_the_shutdown_returns_zero,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	sd_items(K);
	atomic_store(&during_wait_rc, 12345);
	during_ex = create_executor(1, TDM_SHUTDOWN_DRAIN);
	destroy_with_blocker(during_ex, NULL, group_children_during_shutdown);
	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&during_wait_rc), 0, "wait returned %d (%s)",
	             atomic_load(&during_wait_rc), tdm_strerror(atomic_load(&during_wait_rc)));
	cr_assert_eq(atomic_load(&sd.ran), K);
	assert_each_item_once(0, K);
}

/* ---- cancel ------------------------------------------------------------------------------ */

enum { QUEUED = 1000 };

static void queue_items(tdm_executor *ex)
{
	submit_items(ex, 0, QUEUED);
}

Test(shutdown, cancel_reports_each_queued_task_to_on_cancel_instead_of_running_it,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	sd_items(QUEUED);
	tdm_executor *ex = create_executor(1, TDM_SHUTDOWN_CANCEL);
	destroy_with_blocker(ex, queue_items, NULL);
	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&sd.ran), 0, "%zu queued tasks ran under TDM_SHUTDOWN_CANCEL",
	             atomic_load(&sd.ran));
	cr_assert_eq(atomic_load(&sd.cancelled), QUEUED);
	assert_each_item_once(0, QUEUED);
	cr_assert_eq(atomic_load(&sd.probes_ran), 0);
	cr_assert_eq(atomic_load(&sd.probes_cancelled), atomic_load(&blk.accepted));
}

Test(shutdown, on_cancel_gets_the_configured_user_pointer, .timeout = TDM_TEST_TIMEOUT(30))
{
	sd_items(QUEUED);
	tdm_executor *ex = create_executor(1, TDM_SHUTDOWN_CANCEL);
	destroy_with_blocker(ex, queue_items, NULL);
	cr_assert_gt(atomic_load(&sd.cancelled), 0);
	cr_assert_eq(atomic_load(&sd.wrong_user), 0, "on_cancel got another user pointer");
}

Test(shutdown, cancel_reports_tasks_spawned_during_the_shutdown, .timeout = TDM_TEST_TIMEOUT(30))
{
	sd_items(K);
	during_ex = create_executor(1, TDM_SHUTDOWN_CANCEL);
	destroy_with_blocker(during_ex, NULL, submit_children_during_shutdown);
	assert_bookkeeping_clean(); /* includes: every tdm_submit from the task returned 0 */
	cr_assert_eq(atomic_load(&sd.ran), 0, "%zu tasks spawned during the shutdown ran",
	             atomic_load(&sd.ran));
	cr_assert_eq(atomic_load(&sd.cancelled), K);
	assert_each_item_once(0, K);
}

Test(shutdown, cancel_makes_group_wait_return_ecanceled, .timeout = TDM_TEST_TIMEOUT(30))
{
	sd_items(K);
	atomic_store(&during_wait_rc, 12345);
	during_ex = create_executor(1, TDM_SHUTDOWN_CANCEL);
	destroy_with_blocker(during_ex, NULL, group_children_during_shutdown);
	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&during_wait_rc), -ECANCELED, "wait returned %d (%s)",
	             atomic_load(&during_wait_rc), tdm_strerror(atomic_load(&during_wait_rc)));
	cr_assert_eq(atomic_load(&sd.cancelled), K);
	assert_each_item_once(0, K);
}

/*
 * No blocker here: several workers race the shutdown, so any mix of run and cancelled is right,
 * as long as every task is one or the other exactly once, and a parent that ran had all its
 * children accepted (and each of those run or cancelled).
 */
Test(shutdown, cancel_runs_or_cancels_every_task_exactly_once, .timeout = TDM_TEST_TIMEOUT(60))
{
	size_t parents = tdm_test_size(10000, 1000);
	sd_items(parents * (CHILDREN + 1));
	parents_ex = create_executor(4, TDM_SHUTDOWN_CANCEL);
	submit_parents(parents_ex, parents);
	tdm_test_destroy(parents_ex);
	assert_bookkeeping_clean();

	size_t expected = 0, ran_parents = 0;
	for (size_t p = 0; p < parents; p++) {
		size_t base = p * (CHILDREN + 1);
		cr_assert_eq(atomic_load(&sd.state[base]), 1,
		             "parent %zu was run or cancelled %u times", p,
		             atomic_load(&sd.state[base]));
		if (atomic_load(&parent_ran[p])) {
			ran_parents++;
			expected += 1 + CHILDREN;
			assert_each_item_once(base + 1, base + 1 + CHILDREN);
		} else {
			expected += 1;
			for (size_t j = 1; j <= CHILDREN; j++)
				cr_assert_eq(atomic_load(&sd.state[base + j]), 0,
				             "a child of a cancelled parent was seen");
		}
	}
	cr_assert_eq(atomic_load(&sd.ran) + atomic_load(&sd.cancelled), expected,
	             "run %zu + cancelled %zu != %zu submitted (%zu parents ran)",
	             atomic_load(&sd.ran), atomic_load(&sd.cancelled), expected, ran_parents);
	cr_log_info("%zu run, %zu cancelled, %zu of %zu parents ran", atomic_load(&sd.ran),
	            atomic_load(&sd.cancelled), ran_parents, parents);
}

/*
 * A task spawns many children into a group and waits while the test thread destroys the
 * executor in cancel mode. Whatever the interleaving, every child is run or cancelled once, and
 * the wait says -ECANCELED exactly when at least one of them was cancelled.
 */
static struct {
	tdm_executor *ex;
	size_t children;
	atomic_int started;
	atomic_int wait_rc;
	atomic_int finished;
} racing;

static void racing_parent(void *arg)
{
	(void)arg;
	atomic_store_explicit(&racing.started, 1, memory_order_release);
	tdm_group g;
	int rc = tdm_group_init(&g, racing.ex);
	for (size_t i = 0; rc == 0 && i < racing.children; i++)
		rc = tdm_group_spawn(&g, item_task, (void *)(uintptr_t)i);
	if (rc != 0)
		sd_error(rc);
	atomic_store(&racing.wait_rc, tdm_group_wait(&g));
	atomic_store(&racing.finished, 1);
}

Test(shutdown, cancel_group_wait_says_ecanceled_iff_a_child_was_cancelled,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	racing.children = tdm_test_size(20000, 2000);
	sd_items(racing.children);
	atomic_store(&racing.wait_rc, 12345);
	racing.ex = create_executor(4, TDM_SHUTDOWN_CANCEL);
	cr_assert_eq(tdm_submit(racing.ex, racing_parent, NULL), 0);
	while (!atomic_load_explicit(&racing.started, memory_order_acquire))
		sched_yield();
	tdm_test_destroy(racing.ex);

	assert_bookkeeping_clean();
	cr_assert_eq(atomic_load(&racing.finished), 1, "destroy returned before a running task");
	assert_each_item_once(0, racing.children);
	int rc = atomic_load(&racing.wait_rc);
	size_t cancelled = atomic_load(&sd.cancelled);
	if (cancelled > 0)
		cr_assert_eq(rc, -ECANCELED, "%zu children were cancelled but the wait returned %d",
		             cancelled, rc);
	else
		cr_assert_eq(rc, 0, "no child was cancelled but the wait returned %d", rc);
	cr_log_info("%zu of %zu children cancelled", cancelled, racing.children);
}
