// SPDX-License-Identifier: MIT
/*
 * Specification of the executor (tandem.h): every submitted or spawned task runs exactly once,
 * from the test's thread, from tasks and from many outside threads at once; workers know their
 * index, names and CPUs; and idle workers park and are woken without ever losing a wake-up.
 */
#include "common.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* tdm__hold: the keeper's role and the searching count */

TDM_TEST_SUITE(executor);
TDM_TEST_SUITE(park);

/* ---- a million tiny tasks ---------------------------------------------------------------- */

/*
 * The test thread spawns PARENTS tasks into one group; each parent spawns CHILDREN more into the
 * same group from its worker. Every task marks its own slot, so "exactly once" is checked per
 * task, not just as a total.
 */
static struct {
	tdm_group group;
	size_t children;   /* per parent */
	atomic_uint *runs; /* parent p is slot p * (children + 1), its children follow it */
	atomic_size_t spawn_errors;
	atomic_int last_error;
} tiny;

static void tiny_child(void *arg)
{
	atomic_fetch_add_explicit(&tiny.runs[(uintptr_t)arg], 1, memory_order_relaxed);
}

static void tiny_parent(void *arg)
{
	size_t base = (uintptr_t)arg;
	atomic_fetch_add_explicit(&tiny.runs[base], 1, memory_order_relaxed);
	for (size_t j = 1; j <= tiny.children; j++) {
		int rc = tdm_group_spawn(&tiny.group, tiny_child, (void *)(uintptr_t)(base + j));
		if (rc != 0) {
			atomic_fetch_add(&tiny.spawn_errors, 1);
			atomic_store(&tiny.last_error, rc);
		}
	}
}

Test(executor, every_one_of_a_million_tiny_tasks_runs_exactly_once,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	size_t parents = tdm_test_size(1000, 100);
	tiny.children = 999;
	size_t total = parents * (tiny.children + 1);
	tiny.runs = calloc(total, sizeof *tiny.runs);
	cr_assert_not_null(tiny.runs);

	tdm_executor *ex = tdm_test_create(4);
	cr_assert_eq(tdm_group_init(&tiny.group, ex), 0);
	for (size_t p = 0; p < parents; p++) {
		int rc = tdm_group_spawn(&tiny.group, tiny_parent,
		                         (void *)(uintptr_t)(p * (tiny.children + 1)));
		cr_assert_eq(rc, 0, "spawn of parent %zu: %s", p, tdm_strerror(rc));
	}
	cr_assert_eq(tdm_group_wait(&tiny.group), 0);
	cr_assert_eq(atomic_load(&tiny.spawn_errors), 0, "%zu spawns from tasks failed, last: %s",
	             atomic_load(&tiny.spawn_errors), tdm_strerror(atomic_load(&tiny.last_error)));

	size_t never = 0, twice = 0;
	for (size_t i = 0; i < total; i++) {
		unsigned c = atomic_load(&tiny.runs[i]);
		never += c == 0;
		twice += c > 1;
	}
	cr_assert(never == 0 && twice == 0, "of %zu tasks %zu never ran and %zu ran more than once",
	          total, never, twice);
	tdm_test_destroy(ex);
	free(tiny.runs);
}

/* ---- eight outside threads submitting at once --------------------------------------------- */

enum { SUBMITTERS = 8 };

static struct {
	tdm_executor *ex;
	size_t per_thread;
	atomic_uint *runs;
	atomic_size_t done;
	atomic_size_t submit_errors;
	atomic_int last_error;
	pthread_barrier_t start;
} many;

static void many_task(void *arg)
{
	atomic_fetch_add_explicit(&many.runs[(uintptr_t)arg], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&many.done, 1, memory_order_release);
}

static void *many_submitter(void *arg)
{
	size_t base = (uintptr_t)arg * many.per_thread;
	pthread_barrier_wait(&many.start);
	for (size_t i = 0; i < many.per_thread; i++) {
		int rc = tdm_submit(many.ex, many_task, (void *)(uintptr_t)(base + i));
		if (rc != 0) {
			atomic_fetch_add(&many.submit_errors, 1);
			atomic_store(&many.last_error, rc);
		}
	}
	return NULL;
}

Test(executor, submissions_from_eight_outside_threads_at_once_each_run_once,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	many.per_thread = tdm_test_size(50000, 5000);
	size_t total = SUBMITTERS * many.per_thread;
	many.runs = calloc(total, sizeof *many.runs);
	cr_assert_not_null(many.runs);
	many.ex = tdm_test_create(4);
	cr_assert_eq(pthread_barrier_init(&many.start, NULL, SUBMITTERS), 0);

	pthread_t threads[SUBMITTERS];
	for (uintptr_t t = 0; t < SUBMITTERS; t++)
		cr_assert_eq(pthread_create(&threads[t], NULL, many_submitter, (void *)t), 0);
	for (int t = 0; t < SUBMITTERS; t++)
		pthread_join(threads[t], NULL);
	cr_assert_eq(atomic_load(&many.submit_errors), 0, "%zu submissions failed, last: %s",
	             atomic_load(&many.submit_errors), tdm_strerror(atomic_load(&many.last_error)));

	tdm_test_wait_count(&many.done, total);
	size_t never = 0, twice = 0;
	for (size_t i = 0; i < total; i++) {
		unsigned c = atomic_load(&many.runs[i]);
		never += c == 0;
		twice += c > 1;
	}
	cr_assert(never == 0 && twice == 0, "of %zu tasks %zu never ran and %zu ran more than once",
	          total, never, twice);
	tdm_test_destroy(many.ex);
	pthread_barrier_destroy(&many.start);
	free(many.runs);
}

/* ---- tasks that submit tasks ------------------------------------------------------------- */

static struct {
	tdm_executor *ex;
	size_t children;
	atomic_size_t done;
	atomic_size_t off_worker;
	atomic_size_t submit_errors;
} nested;

static void nested_child(void *arg)
{
	(void)arg;
	if (tdm_worker_index(nested.ex) < 0)
		atomic_fetch_add(&nested.off_worker, 1);
	atomic_fetch_add_explicit(&nested.done, 1, memory_order_release);
}

static void nested_parent(void *arg)
{
	(void)arg;
	for (size_t i = 0; i < nested.children; i++)
		if (tdm_submit(nested.ex, nested_child, NULL) != 0)
			atomic_fetch_add(&nested.submit_errors, 1);
}

Test(executor, tasks_submitted_from_a_worker_run_on_workers, .timeout = TDM_TEST_TIMEOUT(60))
{
	nested.children = tdm_test_size(100000, 10000);
	nested.ex = tdm_test_create(4);
	cr_assert_eq(tdm_submit(nested.ex, nested_parent, NULL), 0);
	tdm_test_wait_count(&nested.done, nested.children);
	cr_assert_eq(atomic_load(&nested.submit_errors), 0);
	cr_assert_eq(atomic_load(&nested.off_worker), 0,
	             "a task ran on a thread that is no worker");
	tdm_test_destroy(nested.ex);
	cr_assert_eq(atomic_load(&nested.done), nested.children, "a task ran more than once");
}

/* ---- who runs tasks ---------------------------------------------------------------------- */

enum { IDX_WORKERS = 3, IDX_TASKS = 2000 };

static struct {
	tdm_executor *ex;
	tdm_executor *other;
	atomic_int min, max;
	atomic_size_t other_not_minus_one;
} idx;

static void idx_task(void *arg)
{
	(void)arg;
	int i = tdm_worker_index(idx.ex);
	int m = atomic_load(&idx.min);
	while (i < m && !atomic_compare_exchange_weak(&idx.min, &m, i)) {
	}
	m = atomic_load(&idx.max);
	while (i > m && !atomic_compare_exchange_weak(&idx.max, &m, i)) {
	}
	if (idx.other != NULL && tdm_worker_index(idx.other) != -1)
		atomic_fetch_add(&idx.other_not_minus_one, 1);
}

Test(executor, worker_index_is_minus_one_outside_the_workers, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	cr_assert_eq(tdm_worker_index(ex), -1);
	tdm_test_destroy(ex);
}

static void null_index_task(void *arg)
{
	atomic_store((atomic_int *)arg, tdm_worker_index(NULL));
}

/* Asked on a worker, where the calling thread is a worker of some executor, but not of NULL. */
Test(executor, worker_index_of_a_null_executor_is_minus_one, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(1);
	cr_assert_eq(tdm_worker_index(NULL), -1);
	atomic_int seen = 7;
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, null_index_task, &seen), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&seen), -1, "a worker's index for a NULL executor");
	tdm_test_assert_usable(ex);
	tdm_test_destroy(ex);
}

Test(executor, worker_index_inside_a_task_is_within_the_worker_count,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	idx.ex = tdm_test_create(IDX_WORKERS);
	idx.other = NULL;
	atomic_store(&idx.min, 1 << 30);
	atomic_store(&idx.max, -(1 << 30));
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, idx.ex), 0);
	for (int t = 0; t < IDX_TASKS; t++)
		cr_assert_eq(tdm_group_spawn(&g, idx_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_geq(atomic_load(&idx.min), 0);
	cr_assert_lt(atomic_load(&idx.max), IDX_WORKERS);
	cr_assert_eq(tdm_executor_workers(idx.ex), IDX_WORKERS);
	tdm_test_destroy(idx.ex);
}

Test(executor, worker_index_is_minus_one_for_another_executors_worker,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	idx.ex = tdm_test_create(2);
	idx.other = tdm_test_create(2);
	atomic_store(&idx.min, 1 << 30);
	atomic_store(&idx.max, -(1 << 30));
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, idx.ex), 0);
	for (int t = 0; t < 100; t++)
		cr_assert_eq(tdm_group_spawn(&g, idx_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&idx.other_not_minus_one), 0);
	tdm_test_destroy(idx.other);
	tdm_test_destroy(idx.ex);
}

/* Thread names: each task compares its thread's name with what the configuration implies. */
static struct {
	tdm_executor *ex;
	const char *prefix; /* as configured; NULL for the default */
	atomic_size_t checked, wrong;
	char seen[16]; /* one wrong name, for the message */
	pthread_mutex_t seen_lock;
} names;

static void name_task(void *arg)
{
	(void)arg;
	char got[16] = {0}, want[64];
	pthread_getname_np(pthread_self(), got, sizeof got);
	snprintf(want, sizeof want, "%s%d", names.prefix != NULL ? names.prefix : "tdm-w",
	         tdm_worker_index(names.ex));
	want[15] = '\0';
	if (strcmp(got, want) != 0) {
		pthread_mutex_lock(&names.seen_lock);
		memcpy(names.seen, got, sizeof got);
		pthread_mutex_unlock(&names.seen_lock);
		atomic_fetch_add(&names.wrong, 1);
	}
	atomic_fetch_add(&names.checked, 1);
}

static void check_names(const char *prefix)
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 3;
	/* A copy that dies before the workers do: the executor must not keep the pointer. */
	char *copy = prefix != NULL ? strdup(prefix) : NULL;
	cfg.thread_name_prefix = copy;
	names.prefix = prefix;
	pthread_mutex_init(&names.seen_lock, NULL);
	names.ex = tdm_test_create_cfg(&cfg);
	if (copy != NULL)
		memset(copy, 'X', strlen(copy));
	free(copy);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, names.ex), 0);
	for (int t = 0; t < 300; t++)
		cr_assert_eq(tdm_group_spawn(&g, name_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(atomic_load(&names.checked), 300);
	cr_assert_eq(atomic_load(&names.wrong), 0, "a worker was named \"%s\"", names.seen);
	tdm_test_destroy(names.ex);
	pthread_mutex_destroy(&names.seen_lock);
}

Test(executor, worker_threads_are_named_prefix_then_index, .timeout = TDM_TEST_TIMEOUT(30))
{
	check_names("tst-");
}

Test(executor, worker_thread_names_default_to_tdm_w_prefix, .timeout = TDM_TEST_TIMEOUT(30))
{
	check_names(NULL);
}

Test(executor, worker_thread_names_are_cut_to_15_bytes, .timeout = TDM_TEST_TIMEOUT(30))
{
	check_names("a-prefix-of-twenty-");
}

/*
 * Pinning: worker i may run only on the (i mod n)-th CPU of the process's affinity mask. Every
 * worker is checked, not only those that happen to run a task: threads are found in
 * /proc/self/task by their names ("pinw<i>", see the naming tests above).
 */
static int pinned_workers_checked(const int *cpus, int ncpus, unsigned workers, size_t *wrong)
{
	int found = 0;
	DIR *dir = opendir("/proc/self/task");
	cr_assert_not_null(dir);
	struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		char path[300], comm[32] = {0};
		unsigned index;
		char tail;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		int ok = fgets(comm, sizeof comm, f) != NULL;
		fclose(f);
		if (!ok || sscanf(comm, "pinw%u%c", &index, &tail) != 2 || tail != '\n' ||
		    index >= workers)
			continue;
		cpu_set_t set;
		CPU_ZERO(&set);
		pid_t tid = (pid_t)atoi(e->d_name);
		if (sched_getaffinity(tid, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1 ||
		    !CPU_ISSET(cpus[index % (unsigned)ncpus], &set))
			(*wrong)++;
		found++;
	}
	closedir(dir);
	return found;
}

/* Waits until every worker named "pinw<i>" is up, then checks each one's CPU. */
static void expect_pinned(const int *cpus, int ncpus, unsigned workers)
{
	size_t wrong = 0;
	int found = 0;
	/* Workers name themselves as they start: poll until all are there (no deadline: one that
	 * never comes is a hang, which the test's timeout fails). */
	for (;;) {
		wrong = 0;
		found = pinned_workers_checked(cpus, ncpus, workers, &wrong);
		if (found == (int)workers)
			break;
		tdm_test_sleep_us(10000);
	}
	cr_assert_eq(found, (int)workers, "found %d of %u workers by name", found, workers);
	cr_assert_eq(wrong, 0, "%zu workers are not pinned to their CPU", wrong);
}

Test(executor, pinned_workers_run_on_the_cpus_of_the_affinity_mask_round_robin,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	cpu_set_t set;
	CPU_ZERO(&set);
	cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
	static int cpus[CPU_SETSIZE];
	int ncpus = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			cpus[ncpus++] = c;
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = (unsigned)ncpus + 1; /* one more than the CPUs: the round wraps */
	cfg.pin_workers = 1;
	cfg.thread_name_prefix = "pinw";
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	expect_pinned(cpus, ncpus, cfg.workers);
	tdm_test_destroy(ex);
}

/* The lowest CPU this process may run on, also written as a one-CPU list. */
static int first_allowed_cpu(char *list, size_t len)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
	int first = -1;
	for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &set))
			first = c;
	snprintf(list, len, "%d", first);
	return first;
}

Test(executor, pinned_workers_run_on_the_cpus_of_the_given_list, .timeout = TDM_TEST_TIMEOUT(30))
{
	char list[16];
	int first = first_allowed_cpu(list, sizeof list);
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 3;
	cfg.pin_workers = 1;
	cfg.cpus = list; /* one CPU: every worker lands on it */
	cfg.thread_name_prefix = "pinw";
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	int cpus[1] = {first};
	expect_pinned(cpus, 1, cfg.workers);
	tdm_test_destroy(ex);
}

/* Without pinning, the workers still run only on the CPUs of the list. */
static atomic_int unpinned_cpus;

static void count_allowed_cpus(void *arg)
{
	(void)arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
	atomic_store(&unpinned_cpus, CPU_COUNT(&set));
}

Test(executor, unpinned_workers_keep_to_the_given_list, .timeout = TDM_TEST_TIMEOUT(30))
{
	char list[16];
	first_allowed_cpu(list, sizeof list);
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 2;
	cfg.cpus = list; /* one CPU, not pinned: both workers share it */
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	cr_assert_eq(tdm_submit(ex, count_allowed_cpus, NULL), 0);
	tdm_test_destroy(ex); /* drains */
	cr_assert_eq(atomic_load(&unpinned_cpus), 1, "a worker may run on %d CPUs",
	             atomic_load(&unpinned_cpus));
}

Test(executor, workers_default_to_one_per_cpu_of_the_given_list, .timeout = TDM_TEST_TIMEOUT(30))
{
	char list[16];
	first_allowed_cpu(list, sizeof list);
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.cpus = list;
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	cr_assert_eq(tdm_executor_workers(ex), 1);
	tdm_test_destroy(ex);
}

/* ---- parking and waking ------------------------------------------------------------------ */

static tdm_worker_stats wait_for_parks(tdm_executor *ex)
{
	tdm_worker_stats total;
	TDM_TEST_WAIT_UNTIL((total = tdm_test_stats_total(ex)).parks > 0);
	return total;
}

Test(park, idle_workers_park, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_worker_stats total = wait_for_parks(ex);
	cr_assert_gt(total.parks, 0, "no worker parked while there was no work");
	tdm_test_destroy(ex);
}

/* Of two idle workers, the second to park is the one that leaves every worker asleep. */
Test(park, the_last_worker_to_sleep_is_counted, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_worker_stats total = wait_for_parks(ex);
	TDM_TEST_WAIT_UNTIL((total = tdm_test_stats_total(ex)).parks_last > 0);
	cr_assert_geq(total.parks_last, 1, "both workers idle, none counted as the last to sleep");
	cr_assert_lt(total.parks_last, total.parks, "the first worker to park left one awake");
	tdm_test_destroy(ex);
}

Test(park, parked_worker_counts_a_wakeup_when_work_arrives, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(2);
	cr_assert_gt(wait_for_parks(ex).parks, 0);
	tdm_test_assert_usable(ex);
	tdm_worker_stats total;
	TDM_TEST_WAIT_UNTIL((total = tdm_test_stats_total(ex)).wakeups > 0);
	cr_assert_gt(total.wakeups, 0, "a task ran after every worker parked, yet no wake-up");
	tdm_test_destroy(ex);
}

/*
 * The keeper of an awake hold does not park, even when it goes idle while another worker
 * searches and max_searching (1 of 2 workers) is taken: were it to park, and the other worker
 * park after its spin (the role still the keeper's when it looked), every worker would sleep
 * while the hold is taken. The keeper runs task t until the other worker, woken for task s, ran
 * s and searches; then the keeper idles with the bound taken.
 */
struct keeper_case {
	tdm_executor *ex;
	atomic_int k;      /* the worker that ran t */
	atomic_bool s_ran; /* s ran (on the other worker) */
	unsigned other;    /* the other worker, and its parks before s */
	_Atomic uint64_t other_parks;
};

/* Whether c's other worker has parked again since it was woken for s. */
static bool other_parked_again(struct keeper_case *c)
{
	tdm_worker_stats s;
	return tdm_executor_stats(c->ex, c->other, &s) == 0 &&
	       s.parks != atomic_load(&c->other_parks);
}

/* Runs until s ran and its worker searches; or, should this look miss its search (a moment),
 * until that worker parked again: the keeper then idles without the bound taken, which the test
 * checks all the same. No deadline: neither coming is a hang, which the test's timeout fails. */
static void keeper_t(void *arg)
{
	struct keeper_case *c = arg;
	atomic_store(&c->k, tdm_worker_index(c->ex));
	while (
	    !(atomic_load(&c->s_ran) &&
	      (tdm__idle_searching(atomic_load(&c->ex->idle_state)) > 0 || other_parked_again(c))))
		sched_yield();
}

static void keeper_s(void *arg)
{
	struct keeper_case *c = arg;
	atomic_store(&c->s_ran, true);
}

static uint64_t worker_parks(tdm_executor *ex, unsigned w)
{
	tdm_worker_stats s;
	cr_assert_eq(tdm_executor_stats(ex, w, &s), 0);
	return s.parks;
}

Test(park, the_keeper_of_a_hold_searches_past_the_bound, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 2;
	cfg.max_searching = 1;
	tdm_executor *ex = tdm_test_create_cfg(&cfg);
	static struct keeper_case c;
	c.ex = ex;
	atomic_store(&c.k, -1);
	atomic_store(&c.s_ran, false);
	cr_assert_eq(tdm__hold(ex, true), 0);
	/* A keeper, and the other worker asleep after its spin. */
	unsigned keeper = 0;
	TDM_TEST_WAIT_UNTIL((keeper = atomic_load(&ex->keeper)) != 0 &&
	                    worker_parks(ex, 2 - keeper) > 0);
	cr_assert_neq(keeper, 0, "a hold taken, no keeper");
	unsigned k = keeper - 1, other = 1 - k;
	cr_assert_gt(worker_parks(ex, other), 0, "the other worker never parked");

	uint64_t k_parks = worker_parks(ex, k), other_parks = worker_parks(ex, other);
	c.other = other;
	atomic_store(&c.other_parks, other_parks);
	cr_assert_eq(tdm_submit(ex, keeper_t, &c), 0);
	TDM_TEST_WAIT_UNTIL(atomic_load(&c.k) >= 0);
	cr_assert_eq(atomic_load(&c.k), (int)k, "t ran on worker %d, not on the keeper %u",
	             atomic_load(&c.k), k);
	cr_assert_eq(tdm_submit(ex, keeper_s, &c), 0);
	/* The other worker parks again after its spin, the keeper being awake. */
	TDM_TEST_WAIT_UNTIL(worker_parks(ex, other) != other_parks ||
	                    worker_parks(ex, k) != k_parks);
	cr_assert_eq(worker_parks(ex, k), k_parks, "the keeper parked while the hold was taken");
	cr_assert_eq(atomic_load(&ex->keeper), keeper, "the keeper lost its role");
	tdm__release(ex, true);
	tdm_test_destroy(ex);
}

/*
 * A varied pause before each submission: none, a spin of random length, or a sleep long enough
 * for the workers to park. The submissions land before, during and after the workers' way into
 * the park, which is where a lost wake-up hides.
 */
static void pause_before_submission(uint64_t *rng)
{
	uint64_t r = tdm_test_rand(rng);
	switch (r % 8) {
	case 0:
		tdm_test_sleep_us(1000);
		break;
	case 1:
	case 2:
	case 3:
		tdm_test_spin((unsigned)((r >> 8) % 20000));
		break;
	default:
		break;
	}
}

enum { PARK_ROUNDS = 2000 };

/*
 * The waiter blocks in tdm_group_wait, so each round needs two wake-ups: a worker's for the task
 * and the waiter's for the finished group. Losing either hangs the round until the timeout.
 */
static void blocking_rounds(unsigned workers, uint64_t seed)
{
	tdm_executor *ex = tdm_test_create(workers);
	uint64_t rng = seed;
	for (int round = 0; round < PARK_ROUNDS; round++) {
		pause_before_submission(&rng);
		atomic_int ran = 0;
		tdm_group g;
		cr_assert_eq(tdm_group_init(&g, ex), 0);
		cr_assert_eq(tdm_group_spawn(&g, tdm_test_set_flag, &ran), 0);
		cr_assert_eq(tdm_group_wait(&g), 0, "%u workers, round %d", workers, round);
		cr_assert_eq(atomic_load(&ran), 1, "%u workers, round %d: wait returned first",
		             workers, round);
	}
	/* tasks_run is counted after the task's function returns: let the last one land. */
	tdm_worker_stats total;
	TDM_TEST_WAIT_UNTIL((total = tdm_test_stats_total(ex)).tasks_run >= PARK_ROUNDS);
	cr_assert_eq(total.tasks_run, PARK_ROUNDS, "%u workers: stats count %llu tasks run, %d ran",
	             workers, (unsigned long long)total.tasks_run, PARK_ROUNDS);
	cr_assert_gt(total.parks, 0, "%u workers never parked: the test proved nothing", workers);
	tdm_test_destroy(ex);
}

Test(park, blocking_group_wait_sees_every_task_submitted_to_parking_workers,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	blocking_rounds(1, 42);
	blocking_rounds(2, 43);
	blocking_rounds(4, 44);
}

/*
 * The test thread spins here, so the only sleepers are the workers: each round needs their
 * wake-up alone. Submitting right after the previous task ran lands while its worker looks for
 * more work and heads for the park, the window where a wake-up gets lost; one worker makes that
 * window the only way the task can run.
 */
static void spinning_rounds(unsigned workers, uint64_t seed)
{
	tdm_executor *ex = tdm_test_create(workers);
	uint64_t rng = seed;
	for (int round = 0; round < PARK_ROUNDS; round++) {
		pause_before_submission(&rng);
		atomic_int ran = 0;
		cr_assert_eq(tdm_submit(ex, tdm_test_set_flag, &ran), 0);
		while (!atomic_load_explicit(&ran, memory_order_acquire))
			sched_yield();
	}
	cr_assert_gt(tdm_test_stats_total(ex).parks, 0, "%u workers never parked", workers);
	tdm_test_destroy(ex);
}

Test(park, submission_wakes_a_parked_worker_every_time, .timeout = TDM_TEST_TIMEOUT(30))
{
	spinning_rounds(1, 7);
	spinning_rounds(2, 8);
	spinning_rounds(4, 9);
}

/* Each worker's gate stripe is its own index's (stream leases enter a gate on every task, and
 * two workers on one stripe would share its cache line); it was 0 until a worker's first gate
 * entry and then taken in turn with every other thread. */
#define STRIPE_WORKERS 4
static _Atomic unsigned stripe_seen[STRIPE_WORKERS];

static void record_stripe(void *arg)
{
	tdm_executor *ex = arg;
	int w = tdm_worker_index(ex);
	if (w >= 0 && w < STRIPE_WORKERS)
		atomic_store(&stripe_seen[w], tdm__gate_mine);
}

Test(executor, workers_take_gate_stripes_by_index, .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_executor *ex = tdm_test_create(STRIPE_WORKERS);
	for (int w = 0; w < STRIPE_WORKERS; w++)
		atomic_store(&stripe_seen[w], 1000);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	for (int i = 0; i < 4000; i++)
		cr_assert_eq(tdm_group_spawn(&g, record_stripe, ex), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	int ran = 0;
	for (int w = 0; w < STRIPE_WORKERS; w++) {
		unsigned seen = atomic_load(&stripe_seen[w]);
		ran += seen != 1000;
		cr_assert(seen == 1000 || seen == (unsigned)w % TDM__GATE_STRIPES + 1,
		          "worker %d on stripe %u", w, seen);
	}
	cr_assert_gt(ran, 0, "no worker ran a task");
	tdm_test_destroy(ex);
}
