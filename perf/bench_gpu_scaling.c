// SPDX-License-Identifier: MIT
/*
 * tandem-bench gpu-scaling: whether tandem turns more GPUs into more throughput for compute-bound
 * tasks. A fixed number of tasks, each a kernel that fills its device for kernel_us
 * (tdm_launch_busy) and its await, go to the first G devices (task i to device i % G) and run on W
 * workers; tasks per second, and the speed-up over one GPU at the same W. Busy kernels run one
 * after another on a device, so one device caps at 1e6 / kernel_us tasks a second, and G devices
 * at G times that (the ideal, printed beside). perf/README.md says more.
 *   tandem-bench gpu-scaling [--backend cuda|sim] [--tasks N] [--kernel-us US] [--gpus LIST]
 *                            [--workers LIST] [--reps N] [--sim-devices N] [--json]
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_sim.h" /* the kernels of tests and benchmarks (tandem_testing) */

#define SC_MAX_LIST 64
#define SC_MAX_KERNEL_US 4000000u /* tdm_launch_busy takes a uint32_t of ns */

struct sc_opts {
	int sim, json;
	unsigned tasks, kernel_us, reps, sim_devices;
	unsigned gpus[SC_MAX_LIST], workers[SC_MAX_LIST];
	int ngpus, nworkers; /* ngpus 0: 1..the devices the backend sees */
};

/* One run: the tasks of one (G, W), and the first failure among them. */
struct sc_run {
	tdm_gpu *gpu;
	uint32_t ns;
	_Atomic int err;
	const char *what; /* set by the task whose error went into err */
};

struct sc_task {
	struct sc_run *run;
	int device;
	tdm_stream *s;
};

static int sc_fail(struct sc_run *r, int err, const char *what)
{
	int none = 0;

	/* what is read by the main thread only after tdm_group_wait, which orders it. */
	if (atomic_compare_exchange_strong(&r->err, &none, err))
		r->what = what;
	return err;
}

/* A shared lease of the task's device, one busy kernel, its await, the release. */
static int sc_task_fn(tdm_task *t, void *arg)
{
	struct sc_task *k = arg;
	int rc;

	TDM_BEGIN(t);
	rc = tdm_stream_lease(k->run->gpu, k->device, TDM_STREAM_SHARED, &k->s);
	if (rc != 0)
		return sc_fail(k->run, rc, "tdm_stream_lease");
	rc = tdm_launch_busy(k->s, k->run->ns);
	if (rc != 0) {
		tdm_stream_release(k->s);
		return sc_fail(k->run, rc, "tdm_launch_busy");
	}
	TDM_AWAIT(t, tdm_await_stream(t, k->s));
	rc = tdm_task_result(t);
	tdm_stream_release(k->s);
	if (rc != 0)
		return sc_fail(k->run, rc, "tdm_await_stream");
	TDM_END(t);
}

/* A run that stops making progress ends the process (status 4) instead of hanging it. */
static void sc_stalled(int sig)
{
	static const char msg[] = "tandem-bench gpu-scaling: a run did not finish in time; giving "
	                          "up (exit status 4)\n";

	(void)sig;
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(4);
}

_Noreturn static void sc_die(const char *what, int err)
{
	fprintf(stderr, "tandem-bench gpu-scaling: %s: %s\n", what, tdm_strerror(err));
	exit(1);
}

/* Nanoseconds from the first spawn (from this thread, not a worker) to the group's end. */
static uint64_t sc_once(tdm_executor *ex, struct sc_run *r, struct sc_task *tasks,
                        const struct sc_opts *o, unsigned g)
{
	/* Twenty times one device's ideal, and never under a minute. */
	uint64_t limit_s = 60 + 20ull * o->tasks * o->kernel_us / 1000000u;
	tdm_group grp;
	uint64_t t0, t1;
	int rc;

	for (unsigned i = 0; i < o->tasks; i++)
		tasks[i] = (struct sc_task){r, (int)(i % g), NULL};
	atomic_store(&r->err, 0);
	r->what = NULL;
	rc = tdm_group_init(&grp, ex);
	if (rc != 0)
		sc_die("tdm_group_init", rc);
	alarm((unsigned)(limit_s < 86400 ? limit_s : 86400));
	t0 = tdm_now_ns();
	for (unsigned i = 0; i < o->tasks; i++) {
		rc = tdm_spawn(ex, sc_task_fn, &tasks[i], &grp);
		if (rc != 0)
			sc_die("tdm_spawn", rc);
	}
	rc = tdm_group_wait(&grp);
	t1 = tdm_now_ns();
	alarm(0);
	if (rc != 0)
		sc_die("tdm_group_wait", rc);
	if (atomic_load(&r->err) != 0)
		sc_die(r->what, atomic_load(&r->err));
	return t1 - t0;
}

struct sc_result {
	unsigned gpus;
	double median_ms, min_ms, tps;
};

/*
 * Every G of the list on one executor of W workers and one GPU layer, which see all devices: only
 * the spread of the tasks changes with G. Fills res[0..*nres) and returns 0, or the exit status.
 */
static int sc_workers(const struct sc_opts *o, unsigned workers, struct sc_result *res, int *nres,
                      int *ndev, char *device, size_t device_len)
{
	tdm_config c;
	tdm_gpu_config gc;
	tdm_executor *ex = NULL;
	tdm_gpu *gpu = NULL;
	struct sc_task *tasks = NULL;
	double *ms = NULL;
	int rc;

	tdm_config_init(&c);
	c.workers = workers;
	rc = tdm_executor_create(&ex, &c);
	if (rc != 0)
		sc_die("tdm_executor_create", rc);
	tdm_gpu_config_init(&gc);
	gc.sim_devices = o->sim_devices;
	rc = bench_gpu_create(ex, &gc, o->sim, "gpu-scaling", &gpu);
	if (rc != 0) {
		tdm_executor_destroy(ex);
		if (rc != -ENODEV)
			sc_die("tdm_gpu_create", rc);
		return 3;
	}
	*ndev = tdm_gpu_device_count(gpu);
	tdm_device_info info;
	if (tdm_gpu_device_info(gpu, 0, &info) == 0)
		snprintf(device, device_len, "%s", info.name);
	for (int i = 0; i < o->ngpus; i++) {
		if ((int)o->gpus[i] > *ndev) {
			fprintf(stderr,
			        "tandem-bench gpu-scaling: --gpus %u: the %s backend sees %d "
			        "device%s\n",
			        o->gpus[i], o->sim ? "sim" : "cuda", *ndev, *ndev == 1 ? "" : "s");
			tdm_gpu_destroy(gpu);
			tdm_executor_destroy(ex);
			return 2;
		}
	}
	tasks = malloc((size_t)o->tasks * sizeof(*tasks));
	ms = malloc((size_t)o->reps * sizeof(*ms));
	if (tasks == NULL || ms == NULL)
		sc_die("malloc", -ENOMEM);

	struct sc_run r = {.gpu = gpu, .ns = o->kernel_us * 1000u};
	int n = o->ngpus > 0 ? o->ngpus : (*ndev < SC_MAX_LIST ? *ndev : SC_MAX_LIST);
	for (int i = 0; i < n; i++) {
		unsigned g = o->ngpus > 0 ? o->gpus[i] : (unsigned)i + 1;

		/* Warm-up: the streams and events of the devices this G uses, first touch of the
		 * tasks, the kernel's first launch on each device. */
		(void)sc_once(ex, &r, tasks, o, g);
		for (unsigned k = 0; k < o->reps; k++)
			ms[k] = (double)sc_once(ex, &r, tasks, o, g) / 1e6;
		qsort(ms, o->reps, sizeof(*ms), bench_cmp_double);
		res[i].gpus = g;
		res[i].median_ms =
		    o->reps % 2 ? ms[o->reps / 2] : (ms[o->reps / 2 - 1] + ms[o->reps / 2]) / 2;
		res[i].min_ms = ms[0];
		res[i].tps = (double)o->tasks / (res[i].median_ms / 1e3);
	}
	*nres = n;
	free(ms);
	free(tasks);
	rc = tdm_gpu_destroy(gpu);
	if (rc != 0)
		sc_die("tdm_gpu_destroy", rc);
	rc = tdm_executor_destroy(ex);
	if (rc != 0)
		sc_die("tdm_executor_destroy", rc);
	return 0;
}

static void sc_json_str(const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
}

static void sc_report(const struct sc_opts *o, const char *device, int ndev, unsigned workers,
                      const struct sc_result *res, int n)
{
	double base = 0;

	/* The speed-up is over G = 1 at the same worker count: only when the list has it. */
	for (int i = 0; i < n; i++)
		if (res[i].gpus == 1)
			base = res[i].tps;
	for (int i = 0; i < n; i++) {
		double ideal = res[i].gpus * 1e6 / o->kernel_us;

		if (o->json) {
			printf("{\"bench\":\"gpu-scaling\",\"impl\":\"tandem\",\"backend\":\"%s\","
			       "\"device\":\"",
			       o->sim ? "sim" : "cuda");
			sc_json_str(device);
			printf("\",\"devices\":%d,\"gpus\":%u,\"workers\":%u,\"tasks\":%u,"
			       "\"kernel_us\":%u,\"reps\":%u,\"tasks_per_s\":%.1f,"
			       "\"ideal_tasks_per_s\":%.1f,\"speedup\":",
			       ndev, res[i].gpus, workers, o->tasks, o->kernel_us, o->reps,
			       res[i].tps, ideal);
			if (base > 0)
				printf("%.3f", res[i].tps / base);
			else
				printf("null");
			printf(",\"median_ms\":%.3f,\"min_ms\":%.3f}\n", res[i].median_ms,
			       res[i].min_ms);
		} else {
			printf("%5u %8u %12.1f %12.1f %7.0f%% ", res[i].gpus, workers, res[i].tps,
			       ideal, 100.0 * res[i].tps / ideal);
			if (base > 0)
				printf("%8.2fx", res[i].tps / base);
			else
				printf("%9s", "-");
			printf(" %10.2f %10.2f\n", res[i].median_ms, res[i].min_ms);
		}
	}
	fflush(stdout);
}

/* A comma-separated list of integers in [lo, hi]; 0 on success. */
static int sc_list(const char *s, unsigned *out, int *n, unsigned lo, unsigned hi)
{
	*n = 0;
	while (*s != '\0') {
		char *end;
		unsigned long v;

		if (*n == SC_MAX_LIST || *s < '0' || *s > '9')
			return -1;
		errno = 0;
		v = strtoul(s, &end, 10);
		if (errno != 0 || end == s || v < lo || v > hi)
			return -1;
		out[(*n)++] = (unsigned)v;
		s = end;
		if (*s == ',' && s[1] != '\0')
			s++;
		else if (*s != '\0')
			return -1;
	}
	return *n > 0 ? 0 : -1;
}

static int sc_uint(const char *s, unsigned *out, unsigned lo, unsigned hi)
{
	unsigned v[1];
	int n;

	if (sc_list(s, v, &n, lo, hi) != 0 || n != 1)
		return -1;
	*out = v[0];
	return 0;
}

static int sc_usage(FILE *f)
{
	fputs("usage: tandem-bench gpu-scaling [options]\n"
	      "  --backend cuda|sim  default cuda (no device: exit status 3)\n"
	      "  --tasks N           tasks per run (default 2000)\n"
	      "  --kernel-us US      length of each task's busy kernel, 1..4000000 (default 500)\n"
	      "  --gpus LIST         GPU counts G, task i on device i % G (default 1..devices)\n"
	      "  --workers LIST      executor workers (default 4,16)\n"
	      "  --reps N            timed runs per (G, workers), after one warm-up (default 3)\n"
	      "  --sim-devices N     devices of the sim backend (default 2)\n"
	      "  --json              one JSON object per line\n",
	      f);
	return 2;
}

int bench_gpu_scaling(int argc, char **argv)
{
	struct sc_opts o = {.tasks = 2000, .kernel_us = 500, .reps = 3, .sim_devices = 2};
	struct sc_result res[SC_MAX_LIST];
	char device[96] = "";
	int rc = 0, ndev = 0, nres = 0;

	o.workers[0] = 4;
	o.workers[1] = 16;
	o.nworkers = 2;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (strcmp(a, "gpu-scaling") == 0)
			continue;
		if (strcmp(a, "--json") == 0) {
			o.json = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			(void)sc_usage(stdout);
			return 0;
		}
		if (v == NULL)
			return sc_usage(stderr);
		if (strcmp(a, "--backend") == 0) {
			o.sim = strcmp(v, "sim") == 0;
			bad = !o.sim && strcmp(v, "cuda") != 0;
		} else if (strcmp(a, "--tasks") == 0) {
			bad = sc_uint(v, &o.tasks, 1, 100000000u);
		} else if (strcmp(a, "--kernel-us") == 0) {
			bad = sc_uint(v, &o.kernel_us, 1, SC_MAX_KERNEL_US);
		} else if (strcmp(a, "--gpus") == 0) {
			bad = sc_list(v, o.gpus, &o.ngpus, 1, 1024);
		} else if (strcmp(a, "--workers") == 0) {
			bad = sc_list(v, o.workers, &o.nworkers, 1, TDM_MAX_WORKERS);
		} else if (strcmp(a, "--reps") == 0) {
			bad = sc_uint(v, &o.reps, 1, 1000);
		} else if (strcmp(a, "--sim-devices") == 0) {
			bad = sc_uint(v, &o.sim_devices, 1, 1024);
		} else {
			bad = 1;
		}
		if (bad)
			return sc_usage(stderr);
		i++;
	}
	signal(SIGALRM, sc_stalled);
	for (int w = 0; w < o.nworkers; w++) {
		rc = sc_workers(&o, o.workers[w], res, &nres, &ndev, device, sizeof(device));
		if (rc != 0)
			break;
		if (w == 0 && !o.json) {
			printf(
			    "gpu-scaling on %s (%d device%s, device 0: %s): %u tasks a run, each a "
			    "busy kernel of %u us filling its device and its await; median of %u "
			    "runs\n",
			    o.sim ? "sim" : "cuda", ndev, ndev == 1 ? "" : "s", device, o.tasks,
			    o.kernel_us, o.reps);
			printf("ideal = G x 1e6 / kernel_us tasks/s (busy kernels serialise on a "
			       "device); speedup = tasks/s over G = 1 at the same workers\n");
			printf("%5s %8s %12s %12s %8s %9s %10s %10s\n", "gpus", "workers",
			       "tasks/s", "ideal", "of ideal", "speedup", "median_ms", "min_ms");
		}
		sc_report(&o, device, ndev, o.workers[w], res, nres);
	}
	return rc;
}
