// SPDX-License-Identifier: MIT
/*
 * The device scheduler's test handlers, by index, and their arguments: implemented twice, as
 * host functions for the simulator (tests/test_dsched.c) and as a TDM_DSCHED_TABLE of a .cu file
 * for cuda and for sim (tests/dsched_handlers.cu, CUDA builds only), with the same indices and
 * the same effects. Memory they write is pinned (tdm_host_alloc): a device reaches it.
 */
#ifndef TDM_TESTS_DSCHED_STEPS_H
#define TDM_TESTS_DSCHED_STEPS_H

#include <stdint.h>

#include "tandem_dsched.h"

enum {
	STEP_RECORD,  /* counts[index] += 1 */
	STEP_APPEND,  /* log[(*n)++] = value: with one warp, the order items ran in */
	STEP_SPIN,    /* about ns nanoseconds of busy work */
	STEP_NOTHING, /* returns */
	STEP_BIG,     /* *out = the sum of vals: every byte of a full item's arguments arrived */
	STEP_HOLD,    /* *entered = 1, then waits until *release is nonzero */
	STEP_TRAP,    /* cuda: a trap (a sticky error); sim: returns (tdm_dsched_sim_inject) */
	STEP_COUNT,
};

struct record_args {
	uint32_t *counts;
	uint32_t index;
};

struct append_args {
	uint32_t *n, *log;
	uint32_t value;
};

struct spin_args {
	uint32_t ns;
};

/* 60 bytes, 4-byte aligned: the pointer in two halves. */
#define BIG_VALS 13
struct big_args {
	uint32_t out_lo, out_hi;
	uint32_t vals[BIG_VALS];
};
#define BIG_OUT(a) ((uint64_t *)(uintptr_t)((uint64_t)(a)->out_hi << 32 | (a)->out_lo))
#ifdef __cplusplus
static_assert(sizeof(struct big_args) == TDM_DSCHED_ARGS_MAX, "a full item's arguments");
#else
_Static_assert(sizeof(struct big_args) == TDM_DSCHED_ARGS_MAX, "a full item's arguments");
#endif

struct hold_args {
	uint32_t *entered, *release;
};

#ifdef __cplusplus
extern "C" {
#endif
/* tests/dsched_handlers.cu: the table, made by TDM_DSCHED_TABLE. */
extern const tdm_dsched_handlers test_dsched_steps;
#ifdef __cplusplus
}
#endif

#endif /* TDM_TESTS_DSCHED_STEPS_H */
