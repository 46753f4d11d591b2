// SPDX-License-Identifier: MIT
/*
 * base/ec.h: the event counts' waits keep their deadline. Time here is a fake clock that a
 * wait moves to the end of the step it was asked to sleep, so what is checked is which steps
 * ck_ec asks for, not how long anything takes.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <time.h>

#include "base/ec.h"

static struct timespec fake_now, latest_step;
static unsigned steps;

static int ns_after(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec > b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec > b->tv_nsec);
}

static int fake_gettime(const struct ck_ec_ops *ops, struct timespec *out)
{
	(void)ops;
	*out = fake_now;
	return 0;
}

/* Sleeps to the step's end at once; a step without end stands for a sleep of 10 s. */
static void fake_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expected,
                        const struct timespec *step)
{
	(void)st;
	(void)addr;
	(void)expected;
	steps++;
	struct timespec end = fake_now;
	if (step != NULL)
		end = *step;
	else
		end.tv_sec += 10;
	if (ns_after(&end, &latest_step))
		latest_step = end;
	if (ns_after(&end, &fake_now))
		fake_now = end;
}

static void fake_wake32(const struct ck_ec_ops *ops, const uint32_t *addr)
{
	(void)ops;
	(void)addr;
}

static const struct ck_ec_ops fake_ops = {
    .gettime = fake_gettime, .wait32 = fake_wait32, .wake32 = fake_wake32};
static const struct ck_ec_mode fake_mode = {.ops = &fake_ops, .single_producer = false};

static struct timespec after_start(long ms)
{
	struct timespec t = {.tv_sec = 100 + ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	return t;
}

/* Deadlines between ck_ec's backoff steps (2 ms, x8 each) and past its last (1 s). */
Test(ec, a_wait_until_a_deadline_never_sleeps_past_it)
{
	static const long ms[] = {1, 5, 15, 45, 135, 700, 2500};
	for (unsigned i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		struct ck_ec32 ec;
		ck_ec32_init(&ec, 0);
		fake_now = after_start(0);
		latest_step = fake_now;
		steps = 0;
		struct timespec dl = after_start(ms[i]);
		cr_assert_eq(tdm__ec32_wait_until(&ec, &fake_mode, 0, &dl), -1, "%ld ms", ms[i]);
		cr_assert_gt(steps, 0u, "%ld ms: never slept", ms[i]);
		cr_assert(!ns_after(&latest_step, &dl), "%ld ms: slept until %ld.%09ld", ms[i],
		          (long)latest_step.tv_sec, latest_step.tv_nsec);
	}
}

Test(ec, a_wait_until_returns_at_once_when_the_count_moved)
{
	struct ck_ec32 ec;
	ck_ec32_init(&ec, 0);
	ck_ec32_inc(&ec, &fake_mode);
	fake_now = after_start(0);
	steps = 0;
	struct timespec dl = after_start(50);
	cr_assert_eq(tdm__ec32_wait_until(&ec, &fake_mode, 0, &dl), 0);
	cr_assert_eq(steps, 0u);
}
