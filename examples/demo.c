// SPDX-License-Identifier: MIT
/*
 * tandem's first example: fork-join on the CPU executor.
 *
 * Sums the squares of 0..N-1 by splitting the range in halves until pieces are small, each half
 * a task in a task group, and checks the result against the closed form. Then runs tasks
 * spawned from main (a thread outside the executor) and, once every task is done, prints the
 * per-worker counters, whose tasks add up to the tasks spawned.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"

#define N 2000000ull
#define GRAIN 10000ull

static tdm_executor *ex;
static atomic_uint forked; /* fork-join tasks spawned, the root among them */

struct range {
	uint64_t lo, hi, sum;
};

static void sum_squares(void *arg)
{
	struct range *r = arg;
	if (r->hi - r->lo <= GRAIN) {
		uint64_t s = 0;
		for (uint64_t i = r->lo; i < r->hi; i++)
			s += i * i;
		r->sum = s;
		return;
	}
	uint64_t mid = r->lo + (r->hi - r->lo) / 2;
	struct range left = {r->lo, mid, 0}, right = {mid, r->hi, 0};
	tdm_group g;
	tdm_group_init(&g, ex);
	int rc = tdm_group_spawn(&g, sum_squares, &left);
	if (rc == 0)
		atomic_fetch_add(&forked, 1);
	else /* no memory for a task: do the work here instead */
		sum_squares(&left);
	sum_squares(&right);
	/* On a worker this runs other tasks until `left` is done; it never blocks the thread. */
	tdm_group_wait(&g);
	r->sum = left.sum + right.sum;
}

static atomic_uint hits;

static void hit(void *arg)
{
	(void)arg;
	atomic_fetch_add(&hits, 1);
}

int main(void)
{
	tdm_config cfg;
	tdm_config_init(&cfg); /* one worker per CPU, drain on shutdown */
	int rc = tdm_executor_create(&ex, &cfg);
	if (rc != 0) {
		fprintf(stderr, "tdm_executor_create: %s\n", tdm_strerror(rc));
		return 1;
	}
	int workers = tdm_executor_workers(ex);
	printf("tandem demo: %d workers\n", workers);

	struct range all = {0, N, 0};
	tdm_group g;
	tdm_group_init(&g, ex);
	rc = tdm_group_spawn(&g, sum_squares, &all);
	if (rc == 0) {
		atomic_fetch_add(&forked, 1);
		rc = tdm_group_wait(&g); /* from main, a plain blocking wait */
	}
	/* Sum of i^2 for i < N; fits in 64 bits for this N. */
	uint64_t n = N - 1, expect = n * (n + 1) / 2 * (2 * n + 1) / 3;
	printf("sum of squares below %llu: %" PRIu64 " (%s)\n", N, all.sum,
	       all.sum == expect ? "correct" : "WRONG");

	/* From a thread outside the executor, tasks go through its injection queue. The group's
	 * wait returns once all 1000 have run: the counters read below include them. */
	tdm_group_init(&g, ex);
	for (int i = 0; i < 1000 && rc == 0; i++)
		rc = tdm_group_spawn(&g, hit, NULL);
	int wrc = tdm_group_wait(&g);
	if (rc == 0)
		rc = wrc;
	printf("spawned from main: %u of 1000 ran\n", atomic_load(&hits));

	tdm_worker_stats st;
	uint64_t ran = 0;
	for (int i = 0; i < workers; i++)
		if (tdm_executor_stats(ex, (unsigned)i, &st) == 0) {
			ran += st.tasks_run;
			printf("worker %d: %" PRIu64 " tasks, %" PRIu64 "/%" PRIu64
			       " steals won, %" PRIu64 " parks\n",
			       i, st.tasks_run, st.steals_won, st.steals_tried, st.parks);
		}
	uint64_t spawned = (uint64_t)atomic_load(&forked) + atomic_load(&hits);
	printf("workers ran %" PRIu64 " tasks: %u fork-join + %u from main (%s)\n", ran,
	       atomic_load(&forked), atomic_load(&hits), ran == spawned ? "adds up" : "WRONG");
	tdm_executor_destroy(ex); /* drains: nothing is left to run */
	return (rc == 0 && all.sum == expect && atomic_load(&hits) == 1000 && ran == spawned) ? 0
	                                                                                      : 1;
}
