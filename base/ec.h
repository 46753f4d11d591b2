/*
 * The mode every ConcurrencyKit event count of tandem's uses (a parked worker's, the GPU
 * poller's): futex waits and wakes on the monotonic clock, any number of producers.
 */
#ifndef TDM_BASE_EC_H
#define TDM_BASE_EC_H

#include <ck_ec.h>

extern const struct ck_ec_mode tdm__ec_mode;

#endif /* TDM_BASE_EC_H */
