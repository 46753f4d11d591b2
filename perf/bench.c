// SPDX-License-Identifier: MIT
/*
 * perf/bench.c: tandem-bench, the driver (options, timing, table and JSON output) and the tandem
 * implementations of the CPU benchmarks; the GPU benchmarks live in bench_gpu.c and get their
 * options from here. perf/README.md says what each benchmark measures and why the implementations
 * are shaped the way they are.
 */
#include "bench.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tandem.h"

/*
 * Every subcommand tandem-bench accepts, in the order the usage lists them: the dispatch (main,
 * parse_args) and the usage both read this table, so the usage names all of them. Entries
 * 0..BENCH_COUNT-1 are indexed by bench_kind and parsed by parse_args; the ones after it parse
 * their own options (`own`, handed the whole command line). `synopsis` follows the name on the
 * usage's first lines, `what` is its line in the list.
 */
static const struct subcommand {
	const char *name;
	int (*own)(int argc, char **argv);
	const char *synopsis, *what;
} subcommands[] = {
    [BENCH_FIB] = {"fib", NULL, "[options]", "fork-join fib(n), a task per call"},
    [BENCH_SKYNET] = {"skynet", NULL, "[options]", "wide fork-join: a 10-ary tree of tasks"},
    [BENCH_SPAWN] = {"spawn", NULL, "[options]", "N empty tasks submitted from outside the pool"},
    [BENCH_IDLE] = {"idle", NULL, "[options]", "CPU burnt by a pool with nothing to do"},
    [BENCH_ALL] = {"all", NULL, "[options]", "fib, skynet, spawn and idle with their defaults"},
    [BENCH_GPU_LATENCY] = {"gpu-latency", NULL, "[options]",
                           "await round trip of an empty kernel, beside plain-CUDA floors"},
    [BENCH_GPU_THROUGHPUT] = {"gpu-throughput", NULL, "[options]",
                              "tasks/s of tasks that await one kernel each, beside plain CUDA"},
    {"gpu-idle", bench_gpu_idle, "[--backend cuda|sim] [--json]",
     "CPU burnt by a GPU layer's workers and poller with nothing outstanding"},
    {"topology", bench_topology, "[--backend cuda|sim] [--json]",
     "the devices found and what tandem decided for each"},
    {"pinned", bench_pinned, "[options]   (tandem-bench SUBCOMMAND --help)",
     "pinned host memory: tandem's pool beside cudaHostAlloc and malloc"},
    {"pipeline", bench_pipeline, "[options]   (tandem-bench SUBCOMMAND --help)",
     "tdm_pipeline_run, copy- and compute-bound, against its bounds"},
    {"gpu-scaling", bench_gpu_scaling, "[options]   (tandem-bench SUBCOMMAND --help)",
     "compute-bound tasks spread over 1..G GPUs"},
    {"gpu-graph", bench_gpu_graph, "[options]   (tandem-bench SUBCOMMAND --help)",
     "GPU graphs: replay vs launches, awaited, beside hand-written CUDA graphs"},
    {"gpu-dsched", bench_gpu_dsched, "[options]   (tandem-bench SUBCOMMAND --help)",
     "tiny steps on the device scheduler vs launches, graphs and a persistent kernel"},
#ifdef TANDEM_HAVE_MPI
    {"mpi-pingpong", bench_mpi, "[options]   (under mpirun -np 2; perf/bench_mpi.c)",
     "MPI round trips: tdm_await_mpi beside MPI_Wait and an MPI_Test loop, with CPU use"},
    {"mpi-overlap", bench_mpi, "[options]   (under mpirun -np 2)",
     "fib on every worker with 10,000 MPI requests outstanding, against without"},
    {"mpi-scaling", bench_mpi, "[options]   (under mpirun -np R)",
     "compute-bound GPU tasks spread over the ranks, one GPU each"},
#endif
};
#define NSUBCOMMANDS ((int)(sizeof(subcommands) / sizeof(subcommands[0])))
#define bench_name(kind) (subcommands[(kind)].name)

#define MAX_THREAD_CONFIGS 64
#define MAX_IMPLS 4

/* ---- tandem ---------------------------------------------------------------------------------- */

static void must(int err, const char *what)
{
	if (err == 0)
		return;
	fprintf(stderr, "tandem-bench: %s: %s\n", what, tdm_strerror(err));
	abort();
}

static void *tandem_setup(unsigned threads)
{
	tdm_config cfg;
	tdm_executor *ex = NULL;

	tdm_config_init(&cfg);
	cfg.workers = threads;
	must(tdm_executor_create(&ex, &cfg), "tdm_executor_create");
	return ex;
}

static void tandem_teardown(void *ctx)
{
	must(tdm_executor_destroy(ctx), "tdm_executor_destroy");
}

/* The root is a task too, submitted from this non-worker thread, which blocks in the wait. */
static void tandem_run_root(tdm_executor *ex, tdm_fn fn, void *arg)
{
	tdm_group g;

	must(tdm_group_init(&g, ex), "tdm_group_init");
	must(tdm_group_spawn(&g, fn, arg), "tdm_group_spawn");
	must(tdm_group_wait(&g), "tdm_group_wait");
}

/* A child's argument lives in its parent's frame, which outlives it: the parent waits for it. */
struct tandem_fib {
	tdm_executor *ex;
	int n;
	uint64_t out;
};

static uint64_t tandem_fib_rec(tdm_executor *ex, int n);

static void tandem_fib_task(void *arg)
{
	struct tandem_fib *f = arg;

	f->out = tandem_fib_rec(f->ex, f->n);
}

static uint64_t tandem_fib_rec(tdm_executor *ex, int n)
{
	struct tandem_fib child = {ex, n - 1, 0};
	tdm_group g;
	uint64_t y;

	if (n < 2)
		return (uint64_t)n;
	must(tdm_group_init(&g, ex), "tdm_group_init");
	must(tdm_group_spawn(&g, tandem_fib_task, &child), "tdm_group_spawn");
	y = tandem_fib_rec(ex, n - 2);
	must(tdm_group_wait(&g), "tdm_group_wait");
	return child.out + y;
}

static uint64_t tandem_fib(void *ctx, int n)
{
	struct tandem_fib root = {ctx, n, 0};

	tandem_run_root(ctx, tandem_fib_task, &root);
	return root.out;
}

uint64_t bench_tandem_fib(struct tdm_executor *ex, int n)
{
	return tandem_fib(ex, n);
}

struct tandem_sky {
	tdm_executor *ex;
	uint64_t num, size, out;
};

static void tandem_sky_task(void *arg)
{
	struct tandem_sky *s = arg, kid[10];
	uint64_t step = s->size / 10;
	tdm_group g;

	if (s->size == 1) {
		s->out = s->num;
		return;
	}
	must(tdm_group_init(&g, s->ex), "tdm_group_init");
	for (uint64_t i = 0; i < 10; i++) {
		kid[i] = (struct tandem_sky){s->ex, s->num + i * step, step, 0};
		must(tdm_group_spawn(&g, tandem_sky_task, &kid[i]), "tdm_group_spawn");
	}
	must(tdm_group_wait(&g), "tdm_group_wait");
	s->out = 0;
	for (int i = 0; i < 10; i++)
		s->out += kid[i].out;
}

static uint64_t tandem_skynet(void *ctx, int depth)
{
	struct tandem_sky root = {ctx, 0, 1, 0};

	for (int i = 0; i < depth; i++)
		root.size *= 10;
	tandem_run_root(ctx, tandem_sky_task, &root);
	return root.out;
}

static void tandem_nop(void *arg)
{
	(void)arg;
}

/* Tasks the workers ran so far; after a group wait, its tasks' counts are seen (tdm__run_task
 * counts a task before the group learns it finished). */
static uint64_t tandem_tasks_run(tdm_executor *ex)
{
	uint64_t sum = 0;
	tdm_worker_stats st;

	for (int i = 0; i < tdm_executor_workers(ex); i++)
		if (tdm_executor_stats(ex, (unsigned)i, &st) == 0)
			sum += st.tasks_run;
	return sum;
}

static void tandem_spawn(void *ctx, uint64_t n)
{
	tdm_group g;
	/* The check: the tasks do nothing, so a wait that returned early would only look fast.
	 * A read of each worker's counter, before and after: nothing per task. */
	uint64_t before = tandem_tasks_run(ctx), ran;

	must(tdm_group_init(&g, ctx), "tdm_group_init");
	for (uint64_t i = 0; i < n; i++)
		must(tdm_group_spawn(&g, tandem_nop, NULL), "tdm_group_spawn");
	must(tdm_group_wait(&g), "tdm_group_wait");
	ran = tandem_tasks_run(ctx) - before;
	if (ran != n) {
		fprintf(stderr,
		        "tandem-bench: spawn: %llu of %llu tasks ran before the wait returned\n",
		        (unsigned long long)ran, (unsigned long long)n);
		abort();
	}
}

static const struct bench_impl tandem_impl = {
    "tandem", tandem_setup, tandem_teardown, tandem_fib, tandem_skynet, tandem_spawn, NULL,
};

/* ---- options --------------------------------------------------------------------------------- */

struct opts {
	enum bench_kind bench;
	unsigned threads[MAX_THREAD_CONFIGS];
	int nthreads;
	int reps, reps_given;
	const struct bench_impl *impl[MAX_IMPLS];
	int nimpl, want[MAX_IMPLS], slot[MAX_IMPLS]; /* slot: IMPL_* of impl[k] */
	unsigned cpus;
	uint64_t n, depth;
	int n_given, depth_given;
	int json;
	/* GPU benchmarks only. */
	unsigned workers[MAX_THREAD_CONFIGS];
	int nworkers;
	uint64_t outstanding[MAX_THREAD_CONFIGS], kernel_us[MAX_THREAD_CONFIGS];
	int noutstanding, nkernel;
	int sim, backend_given;
	unsigned launch_limit; /* 0: the topology's default */
};

/*
 * The usage, from the subcommand table: a line per synopsis, naming every subcommand that has it,
 * a line per subcommand, then the options parse_args takes.
 */
static void usage(FILE *f)
{
	for (int i = 0; i < NSUBCOMMANDS; i++) {
		int first = 1;

		for (int j = 0; j < i && first; j++)
			first = strcmp(subcommands[j].synopsis, subcommands[i].synopsis) != 0;
		if (!first)
			continue;
		fputs(i == 0 ? "usage: tandem-bench " : "       tandem-bench ", f);
		for (int j = i, sep = 0; j < NSUBCOMMANDS; j++) {
			if (strcmp(subcommands[j].synopsis, subcommands[i].synopsis) != 0)
				continue;
			fprintf(f, "%s%s", sep ? "|" : "", subcommands[j].name);
			sep = 1;
		}
		fprintf(f, " %s\n", subcommands[i].synopsis);
	}
	fputs("subcommands:\n", f);
	for (int i = 0; i < NSUBCOMMANDS; i++)
		fprintf(f, "  %-15s %s\n", subcommands[i].name, subcommands[i].what);
	fputs("options of", f);
	for (int k = 0; k < BENCH_COUNT; k++)
		fprintf(f, "%s%s", k ? ", " : " ", bench_name(k));
	fputs(":\n"
	      "  --threads LIST  comma-separated thread counts (default: 1,<CPUs>)\n"
	      "  --reps N        timed reps per config, after 1 untimed warm-up (default 10;\n"
	      "                  idle: 1 window unless given; gpu-throughput: 3; gpu-latency: 3\n"
	      "                  rounds of every implementation, medians over them)\n"
	      "  --impl LIST     any of tandem,tbb,libgomp,libomp; omp: both OpenMP runtimes\n"
	      "                  (default: all to be had; --impl alone lists them)\n"
	      "  --n N           fib: n (default 30, at most 60); spawn: tasks (default 1000000);\n"
	      "                  idle: seconds measured (default 2); gpu-latency: timed round\n"
	      "                  trips (default 20000); gpu-throughput: tasks (default 20000)\n"
	      "  --depth D       skynet: tree depth, 0..9 (default 6)\n"
	      "  --json          one JSON object per line instead of a table\n"
	      "gpu-latency and gpu-throughput only:\n"
	      "  --backend B     cuda or sim (default cuda; no device exits with status 3)\n"
	      "  --workers LIST  executor workers (default: gpu-latency 1,<CPUs>;\n"
	      "                  gpu-throughput 1,2,4,8,16)\n"
	      "  --outstanding LIST  gpu-latency: other GPU awaits outstanding (default "
	      "0,1000,10000)\n"
	      "  --kernel-us LIST    gpu-throughput: kernel length in us (default 1,10,100)\n"
	      "  --launch-limit N    gpu-latency, gpu-throughput: threads launching on the device\n"
	      "                      at once, 1..1024 (default: the topology's, 16 on an H200)\n",
	      f);
}

__attribute__((format(printf, 1, 2))) _Noreturn static void bad(const char *fmt, ...)
{
	va_list ap;

	fputs("tandem-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	usage(stderr);
	exit(2);
}

int bench_parse_list(const char *s, unsigned *out, int *n, int max, unsigned lo, unsigned hi)
{
	*n = 0;
	for (const char *p = s;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char buf[32];
		uint64_t v;

		if (len == 0 || len >= sizeof(buf) || *n == max)
			return -1;
		memcpy(buf, p, len);
		buf[len] = '\0';
		if (bench_parse_u64(buf, lo, hi, &v) != 0)
			return -1;
		out[(*n)++] = (unsigned)v;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

int bench_parse_uint(const char *s, unsigned *out, unsigned lo, unsigned hi)
{
	uint64_t v;

	if (bench_parse_u64(s, lo, hi, &v) != 0)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int bench_parse_parts(const char *s, const char *const *names, int nnames, unsigned *parts)
{
	*parts = 0;
	for (const char *p = s;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		int k;

		for (k = 0; k < nnames; k++)
			if (strlen(names[k]) == len && memcmp(p, names[k], len) == 0)
				break;
		if (k == nnames)
			return -1;
		*parts |= 1u << k;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

int bench_next_opt(int argc, char **argv, const char *cmd, int *json, struct bench_opt *o)
{
	for (; o->i < argc; o->i++) {
		const char *a = argv[o->i], *eq;
		if (strcmp(a, cmd) == 0)
			continue;
		if (strcmp(a, "--json") == 0) {
			*json = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
			return 2;
		if (strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "tandem-bench %s: unexpected argument '%s'\n", cmd, a);
			return -1;
		}
		eq = strchr(a, '=');
		o->name = a;
		o->len = eq != NULL ? (size_t)(eq - a) : strlen(a);
		if (eq != NULL)
			o->value = eq + 1;
		else if (o->i + 1 < argc)
			o->value = argv[++o->i];
		else {
			fprintf(stderr, "tandem-bench %s: %s needs a value\n", cmd, a);
			return -1;
		}
		o->i++;
		return 1;
	}
	return 0;
}

int bench_opt_is(const struct bench_opt *o, const char *name)
{
	return o->len == strlen(name) && memcmp(o->name, name, o->len) == 0;
}

void bench_opt_refuse(const struct bench_opt *o, const char *cmd, int unknown)
{
	if (unknown)
		fprintf(stderr, "tandem-bench %s: unknown option '%.*s'\n", cmd, (int)o->len,
		        o->name);
	else
		fprintf(stderr, "tandem-bench %s: bad value '%s' for %.*s\n", cmd, o->value,
		        (int)o->len, o->name);
}

/* bench_parse_u64 on the len characters at s (a token of a comma-separated list). */
static int parse_u64(const char *s, size_t len, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char buf[32];

	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return bench_parse_u64(buf, lo, hi, out);
}

/* Calls item(token, len, o) for each comma-separated token of list; empty tokens are errors. */
static void each_token(const char *opt, const char *list, struct opts *o,
                       void (*item)(const char *opt, const char *tok, size_t len, struct opts *o))
{
	for (const char *p = list;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		if (len == 0)
			bad("%s: empty item in '%s'", opt, list);
		item(opt, p, len, o);
		if (!comma)
			return;
		p = comma + 1;
	}
}

static void threads_item(const char *opt, const char *tok, size_t len, struct opts *o)
{
	uint64_t v;

	if (parse_u64(tok, len, 1, TDM_MAX_WORKERS, &v) != 0)
		bad("%s: '%.*s' is not a thread count in 1..%d", opt, (int)len, tok,
		    TDM_MAX_WORKERS);
	if (o->nthreads == MAX_THREAD_CONFIGS)
		bad("%s: more than %d thread counts", opt, MAX_THREAD_CONFIGS);
	o->threads[o->nthreads++] = (unsigned)v;
}

static void workers_item(const char *opt, const char *tok, size_t len, struct opts *o)
{
	uint64_t v;

	if (parse_u64(tok, len, 1, TDM_MAX_WORKERS, &v) != 0)
		bad("%s: '%.*s' is not a worker count in 1..%d", opt, (int)len, tok,
		    TDM_MAX_WORKERS);
	if (o->nworkers == MAX_THREAD_CONFIGS)
		bad("%s: more than %d worker counts", opt, MAX_THREAD_CONFIGS);
	o->workers[o->nworkers++] = (unsigned)v;
}

static void outstanding_item(const char *opt, const char *tok, size_t len, struct opts *o)
{
	uint64_t v;

	if (parse_u64(tok, len, 0, 1000000, &v) != 0)
		bad("%s: '%.*s' is not a count in 0..1000000", opt, (int)len, tok);
	if (o->noutstanding == MAX_THREAD_CONFIGS)
		bad("%s: more than %d counts", opt, MAX_THREAD_CONFIGS);
	o->outstanding[o->noutstanding++] = v;
}

/* At most 1 s: tdm_launch_spin takes the length in nanoseconds as a uint32_t. */
static void kernel_us_item(const char *opt, const char *tok, size_t len, struct opts *o)
{
	uint64_t v;

	if (parse_u64(tok, len, 0, 1000000, &v) != 0)
		bad("%s: '%.*s' is not a kernel length in 0..1000000 us", opt, (int)len, tok);
	if (o->nkernel == MAX_THREAD_CONFIGS)
		bad("%s: more than %d kernel lengths", opt, MAX_THREAD_CONFIGS);
	o->kernel_us[o->nkernel++] = v;
}

static const struct bench_impl *tandem_get(void)
{
	return &tandem_impl;
}

/*
 * The implementations, in the order the table and the JSON list them, whatever order --impl gave:
 * tandem, oneTBB, the OpenMP runtime built into tandem-bench (libgomp with gcc) and LLVM's libomp
 * in a child process (bench_child.c). Each getter is NULL where that one is not to be had.
 */
enum { IMPL_TANDEM, IMPL_TBB, IMPL_OMP, IMPL_LIBOMP };
static const struct bench_impl *(*const impl_get[MAX_IMPLS])(void) = {tandem_get, bench_tbb,
                                                                      bench_omp, bench_libomp};
static const char *const impl_fallback[MAX_IMPLS] = {"tandem", "tbb", "libgomp", "libomp"};

static const char *impl_name(int k)
{
	const struct bench_impl *im = impl_get[k]();

	return im != NULL ? im->name : impl_fallback[k];
}

static int is_omp(int k)
{
	return k == IMPL_OMP || k == IMPL_LIBOMP;
}

static int is_libomp(const struct bench_impl *im)
{
	return im != NULL && strcmp(im->name, "libomp") == 0;
}

/*
 * `--impl` alone: each implementation, what it is and whether this tandem-bench has it; both
 * OpenMP runtimes always, whichever runtime the compiler gave tandem-bench.
 */
static void list_impls(FILE *f)
{
	const struct bench_impl *omp = bench_omp();
	const char *omp_name = omp != NULL ? omp->name : "";

	fputs("implementations (--impl LIST, any of these; omp: every OpenMP runtime here):\n", f);
	fputs("  tandem   tandem's executor\n", f);
	fprintf(f, "  tbb      oneTBB (tbb::task_group, tbb::task_arena)%s\n",
	        bench_tbb() ? "" : ": not here (oneTBB not found when configuring)");
	fputs("  libgomp  OpenMP tasks, GCC's runtime", f);
	if (strcmp(omp_name, "libgomp") == 0)
		fputs(", in this process\n", f);
	else if (omp == NULL)
		fputs(": not here (OpenMP not found when configuring)\n", f);
	else
		fprintf(f, ": not here (tandem-bench was built with %s)\n", omp_name);
	fputs("  libomp   OpenMP tasks, LLVM's runtime", f);
	if (is_libomp(omp))
		fputs(", in this process (tandem-bench built by clang)\n", f);
	else
		fprintf(f, ", in a child process: %s%s\n", bench_libomp_path(),
		        bench_libomp() ? ""
		                       : " (not found: built where clang and libomp-dev are; "
		                         "TANDEM_BENCH_LIBOMP names another)");
	if (omp != NULL && strcmp(omp_name, "libgomp") != 0 && !is_libomp(omp))
		fprintf(f, "  %-8s OpenMP tasks, the compiler's runtime, in this process\n",
		        omp_name);
}

/* impl names one implementation, or omp every OpenMP runtime to be had. */
static void impl_item(const char *opt, const char *tok, size_t len, struct opts *o)
{
	int matched = 0, had = 0;
	int omp = len == 3 && memcmp(tok, "omp", 3) == 0;

	for (int k = 0; k < MAX_IMPLS; k++) {
		const char *name = impl_name(k);

		if (omp ? !is_omp(k) : strlen(name) != len || memcmp(tok, name, len) != 0)
			continue;
		matched = 1;
		if (impl_get[k]()) {
			o->want[k] = 1;
			had = 1;
		}
	}
	for (int k = 0; k < MAX_IMPLS && !matched; k++)
		matched =
		    strlen(impl_fallback[k]) == len && memcmp(tok, impl_fallback[k], len) == 0;
	if (!matched)
		bad("%s: unknown implementation '%.*s' (tandem-bench fib --impl lists them)", opt,
		    (int)len, tok);
	if (!had && omp)
		bad("%s: no OpenMP runtime is to be had here (tandem-bench fib --impl says why)",
		    opt);
	if (!had)
		bad("%s: %.*s is not to be had here (tandem-bench fib --impl says why)", opt,
		    (int)len, tok);
}

unsigned bench_cpus(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { NVALUED = 10 };
	static const char *const valued[NVALUED] = {
	    "--threads", "--reps",        "--impl",      "--n",       "--depth",
	    "--workers", "--outstanding", "--kernel-us", "--backend", "--launch-limit"};
	int have_cmd = 0, gpu;
	uint64_t v;

	memset(o, 0, sizeof(*o));
	o->reps = 10;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *val;
		size_t len;
		int k;

		if (a[0] != '-') {
			if (have_cmd)
				bad("unexpected argument '%s'", a);
			for (k = 0; k < BENCH_COUNT && strcmp(a, bench_name(k)) != 0; k++)
				;
			if (k == BENCH_COUNT)
				bad("unknown subcommand '%s'", a);
			o->bench = (enum bench_kind)k;
			have_cmd = 1;
			continue;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(a, "--json") == 0) {
			o->json = 1;
			continue;
		}
		if (strncmp(a, "--json=", 7) == 0)
			bad("--json takes no value");
		/* Every other option takes a value, as "--opt V" or "--opt=V". */
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		for (k = 0; k < NVALUED && (strlen(valued[k]) != len || memcmp(a, valued[k], len));
		     k++)
			;
		if (k == NVALUED)
			bad("unknown option '%.*s'", (int)len, a);
		if (eq)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else if (k == 2) /* --impl without a list: what there is */
			val = "list";
		else
			bad("%s needs a value", a);
		if (k == 2 && strcmp(val, "list") == 0) {
			list_impls(stdout);
			exit(0);
		}
		switch (k) {
		case 0:
			each_token(valued[k], val, o, threads_item);
			break;
		case 1:
			if (bench_parse_u64(val, 1, 1000000, &v) != 0)
				bad("--reps: '%s' is not a count in 1..1000000", val);
			o->reps = (int)v;
			o->reps_given = 1;
			break;
		case 2:
			each_token(valued[k], val, o, impl_item);
			break;
		case 3:
			if (bench_parse_u64(val, 0, UINT64_MAX, &o->n) != 0)
				bad("--n: '%s' is not a number", val);
			o->n_given = 1;
			break;
		case 4:
			if (bench_parse_u64(val, 0, 9, &o->depth) != 0)
				bad("--depth: '%s' is not a depth in 0..9", val);
			o->depth_given = 1;
			break;
		case 5:
			each_token(valued[k], val, o, workers_item);
			break;
		case 6:
			each_token(valued[k], val, o, outstanding_item);
			break;
		case 7:
			each_token(valued[k], val, o, kernel_us_item);
			break;
		case 9:
			if (bench_parse_u64(val, 1, 1024, &v) != 0)
				bad("--launch-limit: '%s' is not a count in 1..1024", val);
			o->launch_limit = (unsigned)v;
			break;
		default:
			if (strcmp(val, "cuda") != 0 && strcmp(val, "sim") != 0)
				bad("--backend: '%s' is neither cuda nor sim", val);
			o->sim = strcmp(val, "sim") == 0;
			o->backend_given = 1;
			break;
		}
	}
	if (!have_cmd)
		bad("missing subcommand");
	/* Options that belong to the other family, or to the other GPU benchmark, are errors. */
	gpu = o->bench == BENCH_GPU_LATENCY || o->bench == BENCH_GPU_THROUGHPUT;
	if (gpu && o->nthreads)
		bad("--threads does not apply to %s (--workers does)", bench_name(o->bench));
	if (gpu && (o->want[0] | o->want[1] | o->want[2] | o->want[3]))
		bad("--impl does not apply to %s", bench_name(o->bench));
	if (gpu && o->depth_given)
		bad("--depth applies to skynet only");
	if (!gpu && (o->nworkers || o->backend_given || o->launch_limit))
		bad("--%s applies to gpu-latency and gpu-throughput only", o->nworkers ? "workers"
		                                                           : o->backend_given
		                                                               ? "backend"
		                                                               : "launch-limit");
	if (o->bench == BENCH_GPU_LATENCY && o->reps_given && o->reps > BENCH_LAT_MAX_ROUNDS)
		bad("--reps: gpu-latency takes at most %d rounds", BENCH_LAT_MAX_ROUNDS);
	if (o->bench != BENCH_GPU_LATENCY && o->noutstanding)
		bad("--outstanding applies to gpu-latency only");
	if (o->bench != BENCH_GPU_THROUGHPUT && o->nkernel)
		bad("--kernel-us applies to gpu-throughput only");
	if (o->n_given) {
		/* Each bench has its own meaning and range for --n; skynet and all have none. */
		static const uint64_t lo[] = {0, 0, 1, 1, 0, 1, 1},
		                      hi[] = {60, 0, 1000000000, 3600, 0, 10000000, 10000000};

		if (o->bench == BENCH_SKYNET || o->bench == BENCH_ALL)
			bad("--n does not apply to %s", bench_name(o->bench));
		if (o->n < lo[o->bench] || o->n > hi[o->bench])
			bad("--n for %s must be in %llu..%llu", bench_name(o->bench),
			    (unsigned long long)lo[o->bench], (unsigned long long)hi[o->bench]);
	}
	if (o->depth_given && o->bench != BENCH_SKYNET)
		bad("--depth applies to skynet only");
	o->cpus = bench_cpus();
	if (gpu)
		return; /* bench_gpu.c has its own implementations and defaults */
	if (o->nthreads == 0) {
		o->threads[o->nthreads++] = 1;
		if (o->cpus > 1)
			o->threads[o->nthreads++] = o->cpus;
	}
	for (int k = 0, any = o->want[0] | o->want[1] | o->want[2] | o->want[3]; k < MAX_IMPLS;
	     k++) {
		if (any && !o->want[k])
			continue;
		if (impl_get[k]()) {
			o->slot[o->nimpl] = k;
			o->impl[o->nimpl++] = impl_get[k]();
		} else if (k != IMPL_LIBOMP || !is_libomp(bench_omp()))
			fprintf(stderr,
			        "tandem-bench: note: no %s baseline here (tandem-bench fib --impl "
			        "says why)\n",
			        impl_name(k));
	}
}

/* ---- running and reporting ------------------------------------------------------------------- */

struct result {
	double median_ms, min_ms, cpu_percent;
};

static void print_header(const struct opts *o, enum bench_kind b, uint64_t param, int reps)
{
	if (b == BENCH_IDLE)
		printf("\nidle %llu s: process CPU, %% of one core (median of %d window%s)\n",
		       (unsigned long long)param, reps, reps == 1 ? "" : "s");
	else
		printf("\n%s %s=%llu: median / min ms of %d reps\n", bench_name(b),
		       b == BENCH_SKYNET ? "depth" : "n", (unsigned long long)param, reps);
	printf("%7s", "threads");
	for (int k = 0; k < o->nimpl; k++)
		printf(" %21s", o->impl[k]->name);
	printf("  %10s  %s\n", "tandem/tbb", "tandem/best-OpenMP");
}

/*
 * A row, then tandem's figure over oneTBB's and over the better OpenMP runtime's (the lower
 * figure, named), where both were run: libgomp slows as its team grows (perf/README.md, fib), so
 * a ratio against it alone would flatter tandem.
 */
static void print_row(const struct opts *o, enum bench_kind b, unsigned threads,
                      const struct result *r)
{
	double mine = -1, tbb = -1, omp = -1;
	const char *omp_name = NULL;

	printf("%7u", threads);
	for (int k = 0; k < o->nimpl; k++) {
		double v = b == BENCH_IDLE ? r[k].cpu_percent : r[k].median_ms;

		if (b == BENCH_IDLE)
			printf(" %20.3f%%", r[k].cpu_percent);
		else
			printf(" %10.3f / %8.3f", r[k].median_ms, r[k].min_ms);
		if (o->slot[k] == IMPL_TANDEM)
			mine = v;
		else if (o->slot[k] == IMPL_TBB)
			tbb = v;
		else if (omp < 0 || v < omp) {
			omp = v;
			omp_name = o->impl[k]->name;
		}
	}
	/* An idle baseline can measure 0.00%: no ratio then rather than a division by zero. */
	if (mine >= 0 && tbb > 0)
		printf("  %9.2fx", mine / tbb);
	else
		printf("  %10s", "-");
	if (mine >= 0 && omp > 0)
		printf("  %8.2fx (%s)\n", mine / omp, omp_name);
	else
		printf("  %9s\n", "-");
}

static void print_json(const struct opts *o, const struct bench_impl *im, enum bench_kind b,
                       unsigned threads, uint64_t param, int reps, const struct result *r)
{
	printf("{\"bench\":\"%s\",\"impl\":\"%s\",\"threads\":%u,\"n\":%llu,\"reps\":%d,"
	       "\"median_ms\":%.3f,\"min_ms\":%.3f",
	       bench_name(b), im->name, threads, (unsigned long long)param, reps, r->median_ms,
	       r->min_ms);
	if (b == BENCH_IDLE)
		printf(",\"cpu_percent\":%.3f", r->cpu_percent);
	printf(",\"cpus\":%u}\n", o->cpus);
}

static void run_bench(const struct opts *o, enum bench_kind b, uint64_t param)
{
	/* An idle window is seconds long and quiet; one is enough unless asked for more. */
	int reps = b == BENCH_IDLE && !o->reps_given ? 1 : o->reps;
	double *ms = malloc((size_t)reps * sizeof(*ms)), *pct = malloc((size_t)reps * sizeof(*pct));

	if (!ms || !pct) {
		fprintf(stderr, "tandem-bench: out of memory\n");
		exit(1);
	}
	if (!o->json)
		print_header(o, b, param, reps);
	for (int t = 0; t < o->nthreads; t++) {
		struct result r[MAX_IMPLS];

		for (int k = 0; k < o->nimpl; k++) {
			const struct bench_impl *im = o->impl[k];

			if (im->measure != NULL) {
				im->measure(o->threads[t], b, param, reps, ms, pct);
			} else {
				void *ctx = im->setup(o->threads[t]);

				bench_measure(im, ctx, b, param, reps, ms, pct);
				im->teardown(ctx);
			}
			r[k].cpu_percent = b == BENCH_IDLE ? bench_median(pct, reps) : 0;
			r[k].median_ms = bench_median(ms, reps);
			r[k].min_ms = ms[0]; /* bench_median() sorted ms */
			if (o->json) {
				print_json(o, im, b, o->threads[t], param, reps, &r[k]);
				fflush(stdout);
			}
		}
		if (!o->json) {
			print_row(o, b, o->threads[t], r);
			fflush(stdout);
		}
	}
	free(ms);
	free(pct);
}

/* Hands the options to bench_gpu.c, with the GPU benchmarks' defaults filled in. */
static int run_gpu(struct opts *o)
{
	struct bench_gpu_opts g;

	if (o->nworkers == 0 && o->bench == BENCH_GPU_LATENCY) {
		o->workers[o->nworkers++] = 1;
		if (o->cpus > 1)
			o->workers[o->nworkers++] = o->cpus;
	} else if (o->nworkers == 0) {
		/* Not capped at the CPUs: the machine this is meant for has 16. */
		for (unsigned w = 1; w <= 16; w *= 2)
			o->workers[o->nworkers++] = w;
	}
	if (o->noutstanding == 0) {
		o->outstanding[o->noutstanding++] = 0;
		o->outstanding[o->noutstanding++] = 1000;
		o->outstanding[o->noutstanding++] = 10000;
	}
	if (o->nkernel == 0) {
		o->kernel_us[o->nkernel++] = 1;
		o->kernel_us[o->nkernel++] = 10;
		o->kernel_us[o->nkernel++] = 100;
	}
	g.sim = o->sim;
	g.launch_limit = o->launch_limit;
	g.workers = o->workers;
	g.nworkers = o->nworkers;
	g.outstanding = o->outstanding;
	g.noutstanding = o->noutstanding;
	g.kernel_us = o->kernel_us;
	g.nkernel = o->nkernel;
	g.n = o->n_given ? o->n : 20000;
	g.reps = o->reps_given ? o->reps : 3;
	g.json = o->json;
	g.cpus = o->cpus;
	if (o->bench == BENCH_GPU_LATENCY)
		return bench_gpu_latency(&g);
	return bench_gpu_throughput(&g);
}

int main(int argc, char **argv)
{
	static const uint64_t defaults[] = {30, 6, 1000000, 2};
	struct opts o;

	for (int i = 1; i < argc; i++)
		for (int k = BENCH_COUNT; k < NSUBCOMMANDS; k++)
			if (strcmp(argv[i], subcommands[k].name) == 0)
				return subcommands[k].own(argc, argv);
	parse_args(argc, argv, &o);
	if (o.bench == BENCH_GPU_LATENCY || o.bench == BENCH_GPU_THROUGHPUT)
		return run_gpu(&o);
	for (int b = BENCH_FIB; b < BENCH_ALL; b++) {
		uint64_t param = defaults[b];

		if (o.bench != BENCH_ALL && o.bench != (enum bench_kind)b)
			continue;
		if (b == BENCH_SKYNET && o.depth_given)
			param = o.depth;
		else if (b != BENCH_SKYNET && o.n_given)
			param = o.n;
		run_bench(&o, (enum bench_kind)b, param);
	}
	return 0;
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
