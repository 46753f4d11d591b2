// SPDX-License-Identifier: MIT
/*
 * Checks for the MPI test programs (tests/mpi_*.c). They are plain programs, one process per
 * rank under mpirun, not Criterion suites: Criterion runs each test in a forked process, which MPI
 * does not survive. A failed check says where and what on stderr and ends the rank with status 1
 * at once (mpirun then ends the job and fails). Checks run on the main thread only: tasks record
 * what they saw, and main checks it after the tasks' group was waited for.
 */
#ifndef TANDEM_TESTS_MPI_CHECK_H
#define TANDEM_TESTS_MPI_CHECK_H

#include <stdio.h>
#include <unistd.h>

static int check_rank = -1; /* set once known */

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", check_rank,          \
			        __FILE__, __LINE__, #cond);                                        \
			fflush(stderr);                                                            \
			_exit(1);                                                                  \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);                    \
		if (check_a_ != check_b_) {                                                        \
			fprintf(stderr, "rank %d: %s:%d: check failed: %s == %s (%lld != %lld)\n", \
			        check_rank, __FILE__, __LINE__, #a, #b, check_a_, check_b_);       \
			fflush(stderr);                                                            \
			_exit(1);                                                                  \
		}                                                                                  \
	} while (0)

#endif
