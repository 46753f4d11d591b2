// SPDX-License-Identifier: MIT
/*
 * Specification of task groups (fork-join): a wait returns only after every task spawned into
 * the group has finished, including tasks spawned by those tasks; it makes their writes visible;
 * on a worker it runs other tasks instead of blocking; groups nest and can be reused.
 */
#include "common.h"

#include <string.h>

TDM_TEST_SUITE(group);

/* ---- nested fork-join: Fibonacci --------------------------------------------------------- */

struct fib {
	int n;
	long result;
};

static tdm_executor *fib_ex;
static atomic_size_t fib_errors;

static void fib_task(void *arg)
{
	struct fib *f = arg;
	if (f->n < 2) {
		f->result = f->n;
		return;
	}
	struct fib a = {.n = f->n - 1}, b = {.n = f->n - 2};
	tdm_group g;
	if (tdm_group_init(&g, fib_ex) != 0 || tdm_group_spawn(&g, fib_task, &a) != 0 ||
	    tdm_group_spawn(&g, fib_task, &b) != 0) {
		atomic_fetch_add(&fib_errors, 1);
		/* Still wait: a spawned child may refer to a or b on this stack. */
	}
	if (tdm_group_wait(&g) != 0)
		atomic_fetch_add(&fib_errors, 1);
	f->result = a.result + b.result;
}

static long fib_serial(int n)
{
	long a = 0, b = 1;
	for (int i = 0; i < n; i++) {
		long t = a + b;
		a = b;
		b = t;
	}
	return a;
}

static void check_fib(unsigned workers, int n)
{
	fib_ex = tdm_test_create(workers);
	struct fib root = {.n = n};
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, fib_ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, fib_task, &root), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&fib_errors), 0, "%zu group calls inside tasks failed",
	             atomic_load(&fib_errors));
	cr_assert_eq(root.result, fib_serial(n), "fib(%d) = %ld, expected %ld", n, root.result,
	             fib_serial(n));
	tdm_test_destroy(fib_ex);
}

Test(group, nested_fork_join_computes_fibonacci, .timeout = TDM_TEST_TIMEOUT(120))
{
	check_fib(4, (int)tdm_test_size(22, 18));
}

/* One worker: every nested wait must run the children itself, or it never returns. */
Test(group, wait_on_the_only_worker_runs_the_children_itself, .timeout = TDM_TEST_TIMEOUT(60))
{
	check_fib(1, (int)tdm_test_size(20, 16));
}

/* ---- skynet: a 10-ary tree of depth 4 ---------------------------------------------------- */

struct sky {
	long num, size, sum;
};

static tdm_executor *sky_ex;
static atomic_size_t sky_errors;

static void sky_task(void *arg)
{
	struct sky *s = arg;
	if (s->size == 1) {
		s->sum = s->num;
		return;
	}
	struct sky child[10];
	long step = s->size / 10;
	tdm_group g;
	if (tdm_group_init(&g, sky_ex) != 0) {
		atomic_fetch_add(&sky_errors, 1);
		return;
	}
	for (int i = 0; i < 10; i++) {
		child[i] = (struct sky){.num = s->num + i * step, .size = step, .sum = -1};
		if (tdm_group_spawn(&g, sky_task, &child[i]) != 0)
			atomic_fetch_add(&sky_errors, 1);
	}
	if (tdm_group_wait(&g) != 0)
		atomic_fetch_add(&sky_errors, 1);
	s->sum = 0;
	for (int i = 0; i < 10; i++)
		s->sum += child[i].sum;
}

Test(group, skynet_tree_of_depth_four_sums_every_leaf, .timeout = TDM_TEST_TIMEOUT(60))
{
	sky_ex = tdm_test_create(4);
	struct sky root = {.num = 0, .size = 10000, .sum = -1};
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, sky_ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, sky_task, &root), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&sky_errors), 0);
	cr_assert_eq(root.sum, 10000L * 9999L / 2, "sum %ld", root.sum);
	tdm_test_destroy(sky_ex);
}

/* ---- a wait inside a task ---------------------------------------------------------------- */

enum { GW_CHILDREN = 64 };

static struct {
	tdm_executor *ex;
	atomic_int finished[GW_CHILDREN];
	atomic_int wait_rc;
	atomic_int
	    unfinished_after_wait; /* children not finished when the parent's wait returned */
	atomic_int parent_done;
} gw;

static void gw_child(void *arg)
{
	tdm_test_spin(20000); /* long enough that other workers steal and are still busy */
	atomic_store_explicit(&gw.finished[(uintptr_t)arg], 1, memory_order_release);
}

static void gw_parent(void *arg)
{
	(void)arg;
	tdm_group g;
	int rc = tdm_group_init(&g, gw.ex);
	for (uintptr_t i = 0; rc == 0 && i < GW_CHILDREN; i++)
		rc = tdm_group_spawn(&g, gw_child, (void *)i);
	int wrc = tdm_group_wait(&g);
	atomic_store(&gw.wait_rc, rc != 0 ? rc : wrc);
	int unfinished = 0;
	for (int i = 0; i < GW_CHILDREN; i++)
		unfinished += !atomic_load_explicit(&gw.finished[i], memory_order_acquire);
	atomic_store(&gw.unfinished_after_wait, unfinished);
	atomic_store(&gw.parent_done, 1);
}

Test(group, wait_inside_a_task_returns_after_all_children_finished, .timeout = TDM_TEST_TIMEOUT(60))
{
	gw.ex = tdm_test_create(4);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < GW_CHILDREN; i++)
			atomic_store(&gw.finished[i], 0);
		atomic_store(&gw.wait_rc, -1);
		atomic_store(&gw.unfinished_after_wait, -1);
		atomic_store(&gw.parent_done, 0);
		tdm_group outer;
		cr_assert_eq(tdm_group_init(&outer, gw.ex), 0);
		cr_assert_eq(tdm_group_spawn(&outer, gw_parent, NULL), 0);
		cr_assert_eq(tdm_group_wait(&outer), 0);
		cr_assert_eq(atomic_load(&gw.parent_done), 1);
		cr_assert_eq(atomic_load(&gw.wait_rc), 0, "round %d: %s", round,
		             tdm_strerror(atomic_load(&gw.wait_rc)));
		cr_assert_eq(atomic_load(&gw.unfinished_after_wait), 0,
		             "round %d: the wait returned with %d children unfinished", round,
		             atomic_load(&gw.unfinished_after_wait));
	}
	tdm_test_destroy(gw.ex);
}

/* ---- what a wait guarantees -------------------------------------------------------------- */

Test(group, wait_with_nothing_spawned_returns_zero, .timeout = TDM_TEST_TIMEOUT(10))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	tdm_test_destroy(ex);
}

/* Plain (non-atomic) writes by the tasks must be visible after the wait: it is the join. */
enum { VIS_TASKS = 1000 };
static int vis_values[VIS_TASKS];

static void vis_task(void *arg)
{
	size_t i = (uintptr_t)arg;
	tdm_test_spin(100);
	vis_values[i] = (int)i + 1;
}

Test(group, writes_of_the_tasks_are_visible_after_the_wait, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(4);
	for (int round = 0; round < 10; round++) {
		memset(vis_values, 0, sizeof vis_values);
		tdm_group g;
		cr_assert_eq(tdm_group_init(&g, ex), 0);
		for (uintptr_t i = 0; i < VIS_TASKS; i++)
			cr_assert_eq(tdm_group_spawn(&g, vis_task, (void *)i), 0);
		cr_assert_eq(tdm_group_wait(&g), 0);
		for (int i = 0; i < VIS_TASKS; i++)
			cr_assert_eq(vis_values[i], i + 1, "round %d, task %d", round, i);
	}
	tdm_test_destroy(ex);
}

/* Tasks spawn more tasks into their own group; the wait covers the whole tree. */
static struct {
	tdm_group group;
	atomic_size_t ran;
	atomic_size_t errors;
} tree;

static void tree_task(void *arg)
{
	uintptr_t depth = (uintptr_t)arg;
	atomic_fetch_add_explicit(&tree.ran, 1, memory_order_relaxed);
	if (depth == 0)
		return;
	tdm_test_spin(500);
	for (int i = 0; i < 3; i++)
		if (tdm_group_spawn(&tree.group, tree_task, (void *)(depth - 1)) != 0)
			atomic_fetch_add(&tree.errors, 1);
}

Test(group, wait_covers_tasks_spawned_into_the_group_by_its_tasks, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(4);
	cr_assert_eq(tdm_group_init(&tree.group, ex), 0);
	/* 3-ary tree of depth 8: (3^9 - 1) / 2 tasks. */
	cr_assert_eq(tdm_group_spawn(&tree.group, tree_task, (void *)(uintptr_t)8), 0);
	cr_assert_eq(tdm_group_wait(&tree.group), 0);
	size_t ran_at_return = atomic_load(&tree.ran);
	cr_assert_eq(atomic_load(&tree.errors), 0);
	cr_assert_eq(ran_at_return, (size_t)9841, "%zu of 9841 tasks had run when wait returned",
	             ran_at_return);
	tdm_test_destroy(ex);
}

Test(group, group_can_be_reused_after_a_wait, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	for (int round = 0; round < 200; round++) {
		atomic_int ran[3] = {0};
		for (int i = 0; i < 3; i++)
			cr_assert_eq(tdm_group_spawn(&g, tdm_test_set_flag, &ran[i]), 0, "round %d",
			             round);
		cr_assert_eq(tdm_group_wait(&g), 0, "round %d", round);
		for (int i = 0; i < 3; i++)
			cr_assert_eq(atomic_load(&ran[i]), 1, "round %d: task %d had not run",
			             round, i);
	}
	tdm_test_destroy(ex);
}

/* ---- what the group's tasks return ------------------------------------------------------- */

/* A resumable task that returns its value; `running` is set once it has started. */
struct ret {
	int value;
	atomic_int running;
};

static int ret_task(tdm_task *t, void *arg)
{
	(void)t;
	struct ret *r = arg;
	atomic_store_explicit(&r->running, 1, memory_order_release);
	return r->value;
}

/* Spawns r into g and returns once it has finished, its count in g included: ex has one
 * worker, so the group that tdm_test_assert_usable waits for runs after it. */
static void spawn_and_finish(tdm_executor *ex, tdm_group *g, struct ret *r)
{
	atomic_store(&r->running, 0);
	cr_assert_eq(tdm_spawn(ex, ret_task, r, g), 0);
	while (!atomic_load_explicit(&r->running, memory_order_acquire))
		sched_yield();
	tdm_test_assert_usable(ex);
}

/*
 * The wait returns the first nonzero value a resumable task of the group returned, in the order
 * they finished, not the smallest nor the last; plain tasks and tasks that return 0 leave it be;
 * the next use of the group starts from 0 again. The value used to go nowhere (the wait said 0).
 */
Test(group, wait_returns_the_first_nonzero_value_its_tasks_returned,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	const int orders[2][2] = {{-EIO, -ENOMEM}, {-ENOMEM, -EIO}};
	for (int k = 0; k < 2; k++) {
		struct ret zero = {.value = 0}, a = {.value = orders[k][0]},
		           b = {.value = orders[k][1]};
		atomic_int ran = 0;
		spawn_and_finish(ex, &g, &zero);
		cr_assert_eq(tdm_group_spawn(&g, tdm_test_set_flag, &ran), 0);
		spawn_and_finish(ex, &g, &a);
		spawn_and_finish(ex, &g, &zero);
		spawn_and_finish(ex, &g, &b);
		int rc = tdm_group_wait(&g);
		cr_assert_eq(rc, orders[k][0], "order %d: the wait returned %d (%s)", k, rc,
		             tdm_strerror(rc));
		cr_assert_eq(atomic_load(&ran), 1);
		/* Reused: nothing returned nonzero this time. */
		spawn_and_finish(ex, &g, &zero);
		cr_assert_eq(tdm_group_wait(&g), 0, "order %d: the group kept the last value", k);
	}
	/* A positive value is passed on as it is. */
	struct ret positive = {.value = 7};
	spawn_and_finish(ex, &g, &positive);
	cr_assert_eq(tdm_group_wait(&g), 7);
	tdm_test_destroy(ex);
}

/* A task cancelled by shutdown makes the wait say -ECANCELED, even when another task of the
 * group returned an error before. */
struct cancel_wait {
	tdm_group *g;
	int rc;
};

static void *wait_thread(void *arg)
{
	struct cancel_wait *c = arg;
	c->rc = tdm_group_wait(c->g);
	return NULL;
}

static int await_forever(tdm_task *t, void *arg)
{
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_notify(t, (tdm_notify *)arg));
	TDM_END(t);
}

static atomic_int cw_cancelled;

static void cw_on_cancel(void *user, tdm_fn fn, void *arg)
{
	(void)user;
	(void)fn;
	(void)arg;
	atomic_fetch_add(&cw_cancelled, 1);
}

Test(group, a_cancelled_task_takes_precedence_over_a_returned_error,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 1;
	cfg.shutdown = TDM_SHUTDOWN_CANCEL;
	cfg.on_cancel = cw_on_cancel;
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	tdm_group g;
	tdm_notify never;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_notify_init(&never, ex), 0);
	struct ret failed = {.value = -EIO};
	spawn_and_finish(ex, &g, &failed);
	/* Never fired: the destroy cancels it. */
	cr_assert_eq(tdm_spawn(ex, await_forever, &never, &g), 0);
	struct cancel_wait c = {.g = &g, .rc = 12345};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, wait_thread, &c), 0);
	tdm_test_destroy(ex);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(atomic_load(&cw_cancelled), 1);
	cr_assert_eq(c.rc, -ECANCELED, "the wait returned %d (%s)", c.rc, tdm_strerror(c.rc));
}
