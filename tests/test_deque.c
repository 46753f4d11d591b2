// SPDX-License-Identifier: MIT
/*
 * Specification of the Chase-Lev work-stealing deque (executor/deque.h): the owner pushes and
 * takes at the bottom (LIFO), thieves steal from the top (FIFO), the buffer grows without losing
 * or reordering items, and under concurrency every pushed item leaves the deque exactly once.
 * Items are the integers 1..n encoded as pointers (see ITEM), so that NULL never stands for one.
 */
#include "common.h"

#include <stdlib.h>

#include "deque.h"

TDM_TEST_SUITE(deque);

/*
 * Items are scaled like aligned pointers: TDM__DEQUE_ABORT is a small odd value that no real item
 * (a task pointer) can take, so item i is i * 16, never 0 and never TDM__DEQUE_ABORT.
 */
#define ITEM(i) ((void *)((uintptr_t)(i)*16u))
#define INDEX(p) ((size_t)((uintptr_t)(p) / 16u))

/* A steal that retries lost races; single-threaded it should never lose one. */
static void *steal_retrying(struct tdm__deque *d)
{
	void *item;
	while ((item = tdm__deque_steal(d)) == TDM__DEQUE_ABORT) {
	}
	return item;
}

static void init_deque(struct tdm__deque *d, unsigned log2_capacity)
{
	int rc = tdm__deque_init(d, log2_capacity);
	cr_assert_eq(rc, 0, "tdm__deque_init(%u): %d", log2_capacity, rc);
}

/* ---- single thread ---------------------------------------------------------------------- */

Test(deque, take_on_new_deque_returns_null)
{
	struct tdm__deque d;
	init_deque(&d, 4);
	cr_expect_null(tdm__deque_take(&d));
	tdm__deque_fini(&d);
}

Test(deque, steal_on_new_deque_returns_null)
{
	struct tdm__deque d;
	init_deque(&d, 4);
	cr_expect_null(tdm__deque_steal(&d));
	tdm__deque_fini(&d);
}

Test(deque, take_returns_items_in_lifo_order)
{
	struct tdm__deque d;
	init_deque(&d, 4);
	for (size_t i = 1; i <= 5; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0);
	for (size_t i = 5; i >= 1; i--)
		cr_assert_eq(tdm__deque_take(&d), ITEM(i), "take #%zu", 6 - i);
	cr_expect_null(tdm__deque_take(&d));
	tdm__deque_fini(&d);
}

Test(deque, steal_returns_items_in_fifo_order)
{
	struct tdm__deque d;
	init_deque(&d, 4);
	for (size_t i = 1; i <= 5; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0);
	for (size_t i = 1; i <= 5; i++)
		cr_assert_eq(steal_retrying(&d), ITEM(i), "steal #%zu", i);
	cr_expect_null(steal_retrying(&d));
	tdm__deque_fini(&d);
}

Test(deque, interleaved_push_take_steal_see_both_ends)
{
	struct tdm__deque d;
	init_deque(&d, 4);
	cr_assert_eq(tdm__deque_push(&d, ITEM(1)), 0);
	cr_assert_eq(tdm__deque_push(&d, ITEM(2)), 0);
	cr_assert_eq(tdm__deque_push(&d, ITEM(3)), 0);
	cr_assert_eq(steal_retrying(&d), ITEM(1), "steal takes the oldest");
	cr_assert_eq(tdm__deque_take(&d), ITEM(3), "take takes the newest");
	cr_assert_eq(tdm__deque_push(&d, ITEM(4)), 0);
	cr_assert_eq(steal_retrying(&d), ITEM(2));
	cr_assert_eq(tdm__deque_take(&d), ITEM(4));
	cr_assert_null(tdm__deque_take(&d));
	cr_assert_null(steal_retrying(&d));
	tdm__deque_fini(&d);
}

Test(deque, deque_stays_usable_after_taking_the_last_item)
{
	struct tdm__deque d;
	init_deque(&d, 2);
	for (size_t round = 1; round <= 20; round++) {
		cr_assert_eq(tdm__deque_push(&d, ITEM(round)), 0);
		cr_assert_eq(tdm__deque_take(&d), ITEM(round), "round %zu", round);
		cr_assert_null(tdm__deque_take(&d), "round %zu: take on empty", round);
		cr_assert_null(steal_retrying(&d), "round %zu: steal on empty", round);
	}
	cr_assert_eq(tdm__deque_push(&d, ITEM(100)), 0);
	cr_assert_eq(tdm__deque_push(&d, ITEM(101)), 0);
	cr_assert_eq(steal_retrying(&d), ITEM(100));
	cr_assert_eq(tdm__deque_take(&d), ITEM(101));
	tdm__deque_fini(&d);
}

Test(deque, size_counts_items_pushed_and_not_removed)
{
	struct tdm__deque d;
	init_deque(&d, 4);
	cr_assert_eq(tdm__deque_size(&d), 0);
	for (size_t i = 1; i <= 6; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0);
	cr_assert_eq(tdm__deque_size(&d), 6);
	(void)tdm__deque_take(&d);
	(void)steal_retrying(&d);
	cr_assert_eq(tdm__deque_size(&d), 4);
	while (tdm__deque_take(&d) != NULL) {
	}
	cr_assert_eq(tdm__deque_size(&d), 0);
	tdm__deque_fini(&d);
}

Test(deque, init_capacity_is_two_to_the_log2_capacity)
{
	struct tdm__deque d;
	init_deque(&d, 5);
	cr_assert_eq(tdm__deque_capacity(&d), (size_t)32);
	tdm__deque_fini(&d);
}

Test(deque, init_rejects_log2_capacity_above_30)
{
	struct tdm__deque d;
	cr_assert_eq(tdm__deque_init(&d, 31), -EINVAL);
	cr_assert_eq(tdm__deque_init(&d, 64), -EINVAL);
}

Test(deque, capacity_grows_when_push_exceeds_it)
{
	struct tdm__deque d;
	init_deque(&d, 2);
	size_t initial = tdm__deque_capacity(&d);
	for (size_t i = 1; i <= initial + 1; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0);
	cr_assert_gt(tdm__deque_capacity(&d), initial);
	cr_assert_geq(tdm__deque_capacity(&d), initial + 1);
	tdm__deque_fini(&d);
}

Test(deque, log2_capacity_zero_holds_many_items)
{
	struct tdm__deque d;
	init_deque(&d, 0);
	for (size_t i = 1; i <= 100; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0);
	cr_assert_geq(tdm__deque_capacity(&d), (size_t)100);
	for (size_t i = 100; i >= 1; i--)
		cr_assert_eq(tdm__deque_take(&d), ITEM(i));
	tdm__deque_fini(&d);
}

Test(deque, growth_keeps_every_item_in_lifo_order)
{
	enum { N = 10000 };
	struct tdm__deque d;
	init_deque(&d, 2);
	for (size_t i = 1; i <= N; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0, "push %zu", i);
	cr_assert_geq(tdm__deque_capacity(&d), (size_t)N);
	cr_assert_eq(tdm__deque_size(&d), N);
	for (size_t i = N; i >= 1; i--)
		cr_assert_eq(tdm__deque_take(&d), ITEM(i), "take expected item %zu", i);
	cr_assert_null(tdm__deque_take(&d));
	tdm__deque_fini(&d);
}

Test(deque, growth_keeps_every_item_in_fifo_order)
{
	enum { N = 10000 };
	struct tdm__deque d;
	init_deque(&d, 2);
	for (size_t i = 1; i <= N; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0, "push %zu", i);
	for (size_t i = 1; i <= N; i++)
		cr_assert_eq(steal_retrying(&d), ITEM(i), "steal expected item %zu", i);
	cr_assert_null(steal_retrying(&d));
	tdm__deque_fini(&d);
}

/* The top index has moved past the buffer's end before the buffer grows: the copy must wrap. */
Test(deque, growth_after_wraparound_keeps_every_item)
{
	enum { N = 1000 };
	struct tdm__deque d;
	init_deque(&d, 2);
	for (size_t i = 1; i <= 3; i++) {
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0);
		cr_assert_eq(steal_retrying(&d), ITEM(i));
	}
	for (size_t i = 1; i <= N; i++)
		cr_assert_eq(tdm__deque_push(&d, ITEM(i)), 0, "push %zu", i);
	for (size_t i = 1; i <= N / 2; i++)
		cr_assert_eq(steal_retrying(&d), ITEM(i), "steal expected item %zu", i);
	for (size_t i = N; i > N / 2; i--)
		cr_assert_eq(tdm__deque_take(&d), ITEM(i), "take expected item %zu", i);
	cr_assert_null(tdm__deque_take(&d));
	tdm__deque_fini(&d);
}

/* ---- concurrency ------------------------------------------------------------------------ */

enum { THIEVES = 4 };

struct stress {
	struct tdm__deque deque;
	size_t n;                /* items 1..n */
	atomic_uint *seen;       /* seen[i - 1]: times item i left the deque */
	atomic_size_t removed;   /* items that left the deque, by anyone */
	atomic_size_t stolen;    /* of which by thieves */
	atomic_int owner_done;   /* the owner has pushed everything and found the deque empty */
	atomic_size_t bad_items; /* values that were never pushed */
	pthread_barrier_t start;
};

static void stress_init(struct stress *s, size_t n, unsigned log2_capacity)
{
	s->n = n;
	s->seen = calloc(n, sizeof *s->seen);
	cr_assert_not_null(s->seen);
	for (size_t i = 0; i < n; i++)
		atomic_init(&s->seen[i], 0);
	atomic_init(&s->removed, 0);
	atomic_init(&s->stolen, 0);
	atomic_init(&s->owner_done, 0);
	atomic_init(&s->bad_items, 0);
	init_deque(&s->deque, log2_capacity);
	cr_assert_eq(pthread_barrier_init(&s->start, NULL, THIEVES + 1), 0);
}

static void stress_record(struct stress *s, void *item)
{
	size_t i = INDEX(item);
	if ((uintptr_t)item % 16u != 0 || i < 1 || i > s->n) {
		atomic_fetch_add(&s->bad_items, 1);
		return;
	}
	atomic_fetch_add_explicit(&s->seen[i - 1], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->removed, 1, memory_order_release);
}

/* Thieves steal until the owner has pushed everything and emptied the deque. */
static void *stress_thief(void *arg)
{
	struct stress *s = arg;
	pthread_barrier_wait(&s->start);
	unsigned idle = 0;
	for (;;) {
		void *item = tdm__deque_steal(&s->deque);
		if (item == TDM__DEQUE_ABORT)
			continue;
		if (item != NULL) {
			stress_record(s, item);
			atomic_fetch_add_explicit(&s->stolen, 1, memory_order_relaxed);
			idle = 0;
			continue;
		}
		/* The owner drains the deque before it says it is done; nothing is pushed after. */
		if (atomic_load_explicit(&s->owner_done, memory_order_acquire))
			break;
		if (++idle % 64 == 0)
			sched_yield();
	}
	return NULL;
}

static void stress_run(struct stress *s, void (*owner)(struct stress *))
{
	pthread_t thieves[THIEVES];
	for (int t = 0; t < THIEVES; t++)
		cr_assert_eq(pthread_create(&thieves[t], NULL, stress_thief, s), 0);
	pthread_barrier_wait(&s->start);
	owner(s);
	atomic_store_explicit(&s->owner_done, 1, memory_order_release);
	for (int t = 0; t < THIEVES; t++)
		pthread_join(thieves[t], NULL);
}

static void stress_check_and_fini(struct stress *s, size_t initial_capacity)
{
	cr_assert_eq(atomic_load(&s->bad_items), 0,
	             "a take or steal returned a value never pushed");
	size_t missing = 0, duplicated = 0, first_bad = 0;
	for (size_t i = 0; i < s->n; i++) {
		unsigned c = atomic_load(&s->seen[i]);
		if (c != 1 && first_bad == 0)
			first_bad = i + 1;
		missing += c == 0;
		duplicated += c > 1;
	}
	cr_assert(
	    missing == 0 && duplicated == 0,
	    "of %zu items %zu never came out and %zu came out more than once (first: item %zu)",
	    s->n, missing, duplicated, first_bad);
	cr_assert_eq(atomic_load(&s->removed), s->n);
	cr_log_info("%zu of %zu items stolen, capacity %zu", atomic_load(&s->stolen), s->n,
	            tdm__deque_capacity(&s->deque));
	cr_assert_gt(tdm__deque_capacity(&s->deque), initial_capacity,
	             "the deque never grew, so growth under stealing was not exercised");
	cr_assert_null(tdm__deque_take(&s->deque));
	cr_assert_null(steal_retrying(&s->deque));
	tdm__deque_fini(&s->deque);
	pthread_barrier_destroy(&s->start);
	free(s->seen);
}

/* Bursts of pushes of varied size (so the deque grows while thieves steal), then some takes. */
static void owner_push_bursts_and_take(struct stress *s)
{
	uint64_t rng = 0x9e3779b97f4a7c15ULL;
	size_t next = 1;
	while (next <= s->n) {
		size_t burst = 1 + (size_t)(tdm_test_rand(&rng) % 700);
		for (size_t k = 0; k < burst && next <= s->n; k++, next++) {
			int rc = tdm__deque_push(&s->deque, ITEM(next));
			cr_assert_eq(rc, 0, "push %zu: %d", next, rc);
		}
		size_t takes = (size_t)(tdm_test_rand(&rng) % (burst + 1));
		for (size_t k = 0; k < takes; k++) {
			void *item = tdm__deque_take(&s->deque);
			if (item == NULL)
				break;
			stress_record(s, item);
		}
	}
	void *item;
	while ((item = tdm__deque_take(&s->deque)) != NULL)
		stress_record(s, item);
}

Test(deque, owner_and_four_thieves_remove_every_item_exactly_once, .timeout = TDM_TEST_TIMEOUT(120))
{
	static struct stress s;
	stress_init(&s, tdm_test_size(1000000, 100000), 3);
	stress_run(&s, owner_push_bursts_and_take);
	stress_check_and_fini(&s, 8);
}

/* The owner never takes: thieves alone must get every item out, while the deque grows. */
static void owner_only_pushes(struct stress *s)
{
	for (size_t i = 1; i <= s->n; i++) {
		int rc = tdm__deque_push(&s->deque, ITEM(i));
		cr_assert_eq(rc, 0, "push %zu: %d", i, rc);
	}
}

Test(deque, thieves_steal_every_item_exactly_once_while_owner_pushes,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	static struct stress s;
	stress_init(&s, tdm_test_size(1000000, 100000), 1);
	stress_run(&s, owner_only_pushes);
	stress_check_and_fini(&s, 2);
}

/*
 * The one-item race: the owner pushes a single item and immediately takes it back while thieves
 * try to steal it. Exactly one side must win each item. A few large bursts first make the deque
 * grow, so the race also runs against a grown buffer.
 */
static void owner_races_for_last_item(struct stress *s)
{
	size_t next = 1;
	size_t warmup = s->n / 4;
	for (; next <= warmup; next++)
		cr_assert_eq(tdm__deque_push(&s->deque, ITEM(next)), 0);
	void *item;
	while ((item = tdm__deque_take(&s->deque)) != NULL)
		stress_record(s, item);
	for (; next <= s->n; next++) {
		cr_assert_eq(tdm__deque_push(&s->deque, ITEM(next)), 0);
		item = tdm__deque_take(&s->deque);
		if (item != NULL)
			stress_record(s, item);
	}
}

Test(deque, take_and_steal_racing_for_the_last_item_remove_it_once,
     .timeout = TDM_TEST_TIMEOUT(120))
{
	static struct stress s;
	stress_init(&s, tdm_test_size(1000000, 100000), 2);
	stress_run(&s, owner_races_for_last_item);
	stress_check_and_fini(&s, 4);
}
