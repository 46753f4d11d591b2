// SPDX-License-Identifier: MIT
/*
 * The mode every ConcurrencyKit event count of tandem's uses (a parked worker's, the GPU
 * poller's): futex waits and wakes on the monotonic clock, any number of producers.
 */
#ifndef TDM_BASE_EC_H
#define TDM_BASE_EC_H

#include <ck_ec.h>

extern const struct ck_ec_mode tdm__ec_mode;

/*
 * ck_ec32_wait with its deadline kept: ck_ec sleeps in backoff steps (2 ms, then 8x longer
 * each, then for good) that it does not cut at the caller's deadline, so a wait for 5 ms could
 * last 16 ms and one for 135 ms a second. Each step here ends at the deadline at the latest.
 * 0: the count moved past snap; -1: the deadline passed.
 */
int tdm__ec32_wait_until(struct ck_ec32 *ec, const struct ck_ec_mode *mode, uint32_t snap,
                         const struct timespec *deadline);

#endif /* TDM_BASE_EC_H */
