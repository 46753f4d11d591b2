// SPDX-License-Identifier: MIT
/*
 * What tests/nvtx_inject.c, the test suite's own NVTX tool, saw: counts of the NVTX calls it
 * implements, and the strings they carried. test_nvtx loads it as a profiler is loaded
 * (NVTX_INJECTION64_PATH) and reads this through dlsym; test_nvtx_off links it in as a static
 * injection. Counts only grow; the tests compare before and after.
 */
#ifndef TDM_TESTS_NVTX_INJECT_H
#define TDM_TESTS_NVTX_INJECT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define NVTX_INJECT_NAMES 64 /* thread names and registered strings kept */
#define NVTX_INJECT_LEN 96

struct nvtx_inject {
	/* Calls on the "tandem" domain, and calls on any other (none expected). */
	atomic_ulong range_starts, range_ends, marks, strings;
	atomic_ulong foreign;
	/* An end of an id no start returned, or ended twice; an end on a thread whose innermost
	 * open range is another (tandem's runs nest on their thread); a range of no message. */
	atomic_ulong bad_ends, misnested, unnamed;
	atomic_ulong max_depth; /* the most ranges open on one thread at once */
	atomic_ulong domains, thread_names, stream_names;
	atomic_ulong other_marks; /* nvtxMarkA: the off test's probe */
	/* Under lock: what the calls carried. */
	pthread_mutex_t lock;
	unsigned nthreads, nstrings;
	char threads[NVTX_INJECT_NAMES][NVTX_INJECT_LEN];
	char string[NVTX_INJECT_NAMES][NVTX_INJECT_LEN];
	atomic_ulong string_uses[NVTX_INJECT_NAMES]; /* ranges named by each string */
	char last_mark[NVTX_INJECT_LEN], last_stream[NVTX_INJECT_LEN];
};

/* The tool's record, for the tests: exported by the module, linked into test_nvtx_off. */
struct nvtx_inject *nvtx_inject_state(void);

#endif /* TDM_TESTS_NVTX_INJECT_H */
