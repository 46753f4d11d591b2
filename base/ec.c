// SPDX-License-Identifier: MIT
/* The event counts' mode (ec.h): ck_ec's operations over futexes. */
#include <limits.h>
#include <stdint.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ec.h"

static int ec_gettime(const struct ck_ec_ops *ops, struct timespec *out)
{
	(void)ops;
	return clock_gettime(CLOCK_MONOTONIC, out);
}

static void ec_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expected,
                      const struct timespec *deadline)
{
	struct timespec rel, *relp = NULL;
	if (deadline != NULL) {
		/* FUTEX_WAIT takes a relative timeout; val3 stays 0 (a bitset there would turn
		 * a wait without timeout into a busy loop, the known ck_ec pitfall). */
		rel.tv_sec = deadline->tv_sec - st->now.tv_sec;
		rel.tv_nsec = deadline->tv_nsec - st->now.tv_nsec;
		if (rel.tv_nsec < 0) {
			rel.tv_nsec += 1000000000L;
			rel.tv_sec--;
		}
		if (rel.tv_sec < 0)
			return;
		relp = &rel;
	}
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, relp, NULL, 0);
}

static void ec_wake32(const struct ck_ec_ops *ops, const uint32_t *addr)
{
	(void)ops;
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static const struct ck_ec_ops ec_ops = {
    .gettime = ec_gettime,
    .wait32 = ec_wait32,
    .wake32 = ec_wake32,
};

/* ck_ec's predicate hook: the step's deadline, no later than the caller's (st->data). */
static int clamp_step(const struct ck_ec_wait_state *st, struct timespec *step)
{
	const struct timespec *dl = st->data;
	if (step->tv_sec > dl->tv_sec ||
	    (step->tv_sec == dl->tv_sec && step->tv_nsec > dl->tv_nsec))
		*step = *dl;
	return 0;
}

int tdm__ec32_wait_until(struct ck_ec32 *ec, const struct ck_ec_mode *mode, uint32_t snap,
                         const struct timespec *deadline)
{
	return ck_ec32_wait_pred(ec, mode, snap, clamp_step, (void *)(uintptr_t)deadline, deadline);
}

const struct ck_ec_mode tdm__ec_mode = {.ops = &ec_ops, .single_producer = false};
