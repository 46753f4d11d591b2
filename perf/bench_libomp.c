// SPDX-License-Identifier: MIT
/*
 * perf/bench_libomp.c: tandem-bench-libomp, the OpenMP baseline of bench_omp.c built by clang
 * against LLVM's libomp (perf/libomp/CMakeLists.txt). tandem-bench (perf/bench_child.c) runs it
 * as a child for the libomp rows, because libgomp (in tandem-bench, built by gcc) and libomp in
 * one process would both claim the OpenMP entry points. It times one configuration with
 * bench_run.c, as tandem-bench times the others, and prints each repetition on a line:
 *
 *   tandem-bench-libomp fib|skynet|spawn|idle THREADS PARAM REPS
 *   -> REPS lines "MS PERCENT" (wall ms, or for idle CPU ms and CPU percent); exit status 0
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	static const char *const kinds[] = {"fib", "skynet", "spawn", "idle"};
	const struct bench_impl *im = bench_omp();
	uint64_t threads, param, reps;
	double *ms, *pct;
	void *ctx;
	int b = 0;

	while (argc == 5 && b < 4 && strcmp(argv[1], kinds[b]) != 0)
		b++;
	if (argc != 5 || b == 4 || bench_parse_u64(argv[2], 1, 4096, &threads) != 0 ||
	    bench_parse_u64(argv[3], 0, 1000000000, &param) != 0 ||
	    bench_parse_u64(argv[4], 1, 1000000, &reps) != 0) {
		fprintf(stderr,
		        "usage: tandem-bench-libomp fib|skynet|spawn|idle THREADS PARAM REPS\n");
		return 2;
	}
	if (im == NULL) {
		fprintf(stderr, "tandem-bench-libomp: built without OpenMP\n");
		return 1;
	}
	ms = calloc(reps, sizeof(*ms));
	pct = calloc(reps, sizeof(*pct));
	if (ms == NULL || pct == NULL) {
		fprintf(stderr, "tandem-bench-libomp: out of memory\n");
		return 1;
	}
	ctx = im->setup((unsigned)threads);
	bench_measure(im, ctx, (enum bench_kind)b, param, (int)reps, ms, pct);
	im->teardown(ctx);
	for (uint64_t i = 0; i < reps; i++)
		printf("%.6f %.6f\n", ms[i], pct[i]);
	free(ms);
	free(pct);
	return fflush(stdout) == 0 ? 0 : 1;
}
