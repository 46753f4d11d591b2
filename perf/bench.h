// SPDX-License-Identifier: MIT
/*
 * perf/bench.h: what the driver (bench.c) shares with the baseline files (bench_tbb.cpp,
 * bench_omp.c): one table of entry points per implementation, so that the driver times every
 * implementation through the same code path; and what it hands to the GPU benchmarks
 * (bench_gpu.c), which time their implementations themselves.
 */
#ifndef TANDEM_PERF_BENCH_H
#define TANDEM_PERF_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The benchmarks; the GPU ones come after `all`, which runs the CPU ones only. */
enum bench_kind {
	BENCH_FIB,
	BENCH_SKYNET,
	BENCH_SPAWN,
	BENCH_IDLE,
	BENCH_ALL,
	BENCH_GPU_LATENCY,
	BENCH_GPU_THROUGHPUT,
	BENCH_COUNT
};

/*
 * One implementation of the benchmarks. setup() builds everything that must stay out of the timed
 * region (thread pool, arena, team size) for `threads` threads and returns it as ctx; it aborts
 * rather than fail. The other entry points are the timed computations: fib and skynet return their
 * result so that the driver can check it; spawn returns once all n tasks have run.
 * An implementation measured in another process (the libomp baseline, bench_child.c) has only
 * a name and measure(), which fills in what bench_measure() would (ms and pct, reps each) and
 * ends the process on failure.
 */
struct bench_impl {
	const char *name;
	void *(*setup)(unsigned threads);
	void (*teardown)(void *ctx);
	uint64_t (*fib)(void *ctx, int n);
	uint64_t (*skynet)(void *ctx, int depth);
	void (*spawn)(void *ctx, uint64_t n);
	void (*measure)(unsigned threads, enum bench_kind b, uint64_t param, int reps, double *ms,
	                double *pct);
};

/*
 * NULL when the baseline was not built in (TANDEM_HAVE_TBB / TANDEM_HAVE_OMP not set). bench_omp
 * is the OpenMP runtime of the compiler that built tandem-bench, named by it (TANDEM_OMP_NAME:
 * libgomp with gcc, libomp with clang). bench_libomp (bench_child.c): LLVM's libomp through the
 * program tandem-bench-libomp, where bench_omp is not libomp itself and that program is found
 * (TANDEM_BENCH_LIBOMP, else beside tandem-bench); bench_libomp_path says where it was looked for.
 */
const struct bench_impl *bench_tbb(void);
const struct bench_impl *bench_omp(void);
const struct bench_impl *bench_libomp(void);
const char *bench_libomp_path(void);

/*
 * bench_run.c: one configuration of fib, skynet, spawn (b, with its n or depth) or idle (param:
 * seconds a window) on ctx: an untimed warm-up, then reps timed runs into ms[0..reps) (idle:
 * reps windows' CPU ms, and their CPU percentages into pct; else pct[i] = 0). A wrong result
 * aborts.
 */
void bench_measure(const struct bench_impl *im, void *ctx, enum bench_kind b, uint64_t param,
                   int reps, double *ms, double *pct);

/* What the options say for gpu-latency and gpu-throughput (the lists are never empty). */
struct bench_gpu_opts {
	int sim; /* --backend sim; else cuda */
	const unsigned *workers;
	int nworkers;
	const uint64_t *outstanding; /* gpu-latency: other awaits outstanding */
	int noutstanding;
	const uint64_t *kernel_us; /* gpu-throughput: kernel lengths */
	int nkernel;
	uint64_t n; /* gpu-latency: timed round trips; gpu-throughput: tasks per run */
	int reps;   /* gpu-throughput: timed runs per configuration; gpu-latency: interleaved rounds
	             */
	int json;
	unsigned cpus;
	unsigned launch_limit; /* --launch-limit; 0: the topology's default */
};

/* gpu-latency's most interleaved rounds (--reps). */
#define BENCH_LAT_MAX_ROUNDS 64

/*
 * Each runs its benchmark and returns the process's exit status; no device for the backend exits
 * with 3 at once, and a configuration that stops making progress ends the process with 4.
 */
int bench_gpu_latency(const struct bench_gpu_opts *o);
int bench_gpu_throughput(const struct bench_gpu_opts *o);

/*
 * The subcommands that parse their own options from the whole command line (their name in it)
 * and return the process's exit status (3: the backend has no device): bench_pipeline.c,
 * bench_pinned.c, bench_gpu_scaling.c, bench_gpu_graph.c, bench_gpu_idle.c, bench_topology.c,
 * bench_gpu_dsched.c.
 */
int bench_pipeline(int argc, char **argv);
int bench_pinned(int argc, char **argv);
int bench_gpu_scaling(int argc, char **argv);
int bench_gpu_graph(int argc, char **argv);
int bench_gpu_dsched(int argc, char **argv);
int bench_gpu_idle(int argc, char **argv);
int bench_topology(int argc, char **argv);
/* bench_mpi.c (built with tandem_mpi, TANDEM_HAVE_MPI): mpi-pingpong, mpi-overlap and
 * mpi-scaling, by the subcommand named in argv; run under mpirun. */
int bench_mpi(int argc, char **argv);

/* bench_gpu_open.c: adds b - a, counter by counter, to *sum (the poller's counts over a run). */
struct tdm_gpu_stats;
void bench_stats_add_delta(struct tdm_gpu_stats *sum, const struct tdm_gpu_stats *a,
                           const struct tdm_gpu_stats *b);
/* bench_gpu_open.c: s as JSON members ("awaits_word":..., ..., "direct":...), no braces and no
 * comma at either end: the one form every subcommand prints the poller's counts in. */
void bench_stats_json(const struct tdm_gpu_stats *s);

/* bench_run.c: s, plain decimal digits (no sign, no blanks), as a number in [lo, hi]: 0 and
 * *out, or -1. */
int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* bench.c, for the subcommands' own parsers, each 0 or -1: a comma-separated list of at most
 * max numbers in [lo, hi] into out[0..*n); one number in [lo, hi]; a comma-separated list of
 * names among names[0..nnames) as a bit mask (bit k: names[k]). */
int bench_parse_list(const char *s, unsigned *out, int *n, int max, unsigned lo, unsigned hi);
int bench_parse_uint(const char *s, unsigned *out, unsigned lo, unsigned hi);
int bench_parse_parts(const char *s, const char *const *names, int nnames, unsigned *parts);
/* bench.c, the option loop of a subcommand's own parser: argv[o->i] on, one option a call,
 * "--name V" or "--name=V" (name: not terminated, len bytes), "--json" setting *json, the
 * subcommand's own name skipped. Start with o->i = 1. Returns 1: an option in *o; 0: no more;
 * 2: --help or -h; -1: not an option, or no value (said on stderr as "tandem-bench CMD: ..."). */
struct bench_opt {
	int i;
	const char *name, *value;
	size_t len;
};
int bench_next_opt(int argc, char **argv, const char *cmd, int *json, struct bench_opt *o);
/* Whether o is option `name` ("--name"). */
int bench_opt_is(const struct bench_opt *o, const char *name);
/* Says on stderr that o is unknown (unknown != 0) or that its value is bad. */
void bench_opt_refuse(const struct bench_opt *o, const char *cmd, int unknown);
/* bench.c: qsort comparators, ascending; and the median of v[0..n) (v sorted on the way; the
 * mean of the middle two for an even n; 0 for n = 0). */
int bench_cmp_double(const void *a, const void *b);
int bench_cmp_u64(const void *a, const void *b);
double bench_median(double *v, size_t n);
/* bench.c: fib(n) as the fib benchmark computes it, on ex, from this (outside) thread. */
struct tdm_executor;
uint64_t bench_tandem_fib(struct tdm_executor *ex, int n);
/* bench.c: the CPUs this process may run on (its affinity mask; else the CPUs online). */
unsigned bench_cpus(void);

struct tdm_executor;
struct tdm_gpu;
struct tdm_gpu_config;
/*
 * bench_gpu_open.c: tdm_gpu_create on --backend's choice (sim or cuda, never AUTO) with g's other
 * settings, for subcommand cmd (NULL: none named). -ENODEV, said on stderr with the hint of
 * --backend sim, when the backend has no device (the caller exits with status 3); else
 * tdm_gpu_create's result.
 */
int bench_gpu_create(struct tdm_executor *ex, struct tdm_gpu_config *g, int sim, const char *cmd,
                     struct tdm_gpu **out);
/* `--backend cuda|sim` and `--json` for `cmd`, then an executor and a GPU layer. 0, or the exit
 * status: 2 usage, 3 no device, 1 otherwise (a message was printed). */
int bench_open_gpu(int argc, char **argv, const char *cmd, int *json, struct tdm_executor **ex,
                   struct tdm_gpu **gpu);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PERF_BENCH_H */
