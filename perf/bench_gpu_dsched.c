// SPDX-License-Identifier: MIT
/*
 * tandem-bench gpu-dsched: tiny GPU steps through the device scheduler (tandem_dsched.h) beside
 * tandem's launch path, graph replay and a hand-written persistent kernel (dsched_cuda.cu), in
 * one run. Parts (--parts), each a block of the table or rows of `"part":...` in the JSON:
 *
 *   rate       steps per second from W workers, T = W x --tasks-per-worker tasks each running
 *              --steps steps back to back (one step: a spin of --step-us on the device, awaited):
 *              `dsched` (tdm_dsched_submit + tdm_await_dsched), `dsched-batch` (--batch items in
 *              one tdm_dsched_submit_batch, each awaited), `launch` (tdm_launch_spin on a shared
 *              lease + tdm_await_stream), `graph` (a graph of that one kernel, captured once per
 *              round on an exclusive lease, replayed + awaited), and the floor `floor` (W host
 *              threads pushing into and reaping from a ring a persistent kernel of as many warps
 *              as the scheduler's polls: dsched_floor_ring).
 *   rtt        the round trip of one step, one task on one worker, submit (or launch) to resume:
 *              p50, p99, min; beside the floor's ping-pong (dsched_floor_pingpong).
 *   crossover  the rate part at the most workers over --cross-us: the shortest step at which
 *              the launch path reaches 0.9 of the scheduler's steps/s.
 *   cost       what the scheduler's SMs cost other kernels: a compute-bound kernel's time
 *              without a scheduler, beside an idle one and beside one running steps.
 *   beside     (only when named) which CUDA calls wait for the scheduler's kernel, each timed
 *              while one runs; a call still waiting after 3 s ends the process (status 5),
 *              saying which.
 *
 * perf/README.md ("gpu-dsched") says how to read each row. No timing is asserted anywhere.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_dsched.h"
#include "tandem_gpu.h"
#include "tandem_graph.h"
#include "tandem_sim.h" /* tdm_launch_spin, tdm_launch_busy (tandem_testing) */

#if defined(TANDEM_HAVE_CUDA) && TANDEM_HAVE_CUDA
#define HAVE_RAW 1
#include "dsched_cuda.h"
#else
#define HAVE_RAW 0
/* Without CUDA the table is host functions alone, for the simulator. */
static void host_spin(void *args, unsigned size)
{
	uint32_t ns;
	(void)size;
	memcpy(&ns, args, sizeof(ns));
	uint64_t end = tdm_now_ns() + ns;
	while (ns != 0 && tdm_now_ns() < end) {
	}
}
TDM_DSCHED_HOST_TABLE(bench_dsched_steps, host_spin);
#endif

#define DS_MAX_LIST 32
#define DS_MAX_BATCH 64
#define DS_CROSS_SHARE 0.9 /* launches "catch up" at this share of the scheduler's rate */

enum { PART_RATE = 1, PART_RTT = 2, PART_CROSS = 4, PART_COST = 8, PART_BESIDE = 16 };
static const char *const part_names[] = {"rate", "rtt", "crossover", "cost", "beside"};
#define NPARTS 5

enum { IMPL_DSCHED, IMPL_BATCH, IMPL_LAUNCH, IMPL_GRAPH, IMPL_FLOOR, NIMPL };
static const char *const impl_names[NIMPL] = {"dsched", "dsched-batch", "launch", "graph", "floor"};

struct ds_opts {
	int sim, json;
	unsigned workers[DS_MAX_LIST], step_us[DS_MAX_LIST], cross_us[DS_MAX_LIST];
	int nworkers, nstep, ncross;
	unsigned steps, tasks_per_worker, batch, rounds, blocks, warps, scope, capacity;
	uint64_t rtt_reps;
	unsigned parts;
	const char *probe;
};

/* One configuration's executor, GPU layer and scheduler. */
struct ds_env {
	const struct ds_opts *o;
	tdm_executor *ex;
	tdm_gpu *gpu;
	tdm_dsched *ds;
	unsigned workers, tasks;
	char device[96];
	unsigned sms, blocks, warps; /* the device's SMs, the scheduler's share */
	unsigned scope;              /* the scheduler's tdm_dsched_config.scope */
	unsigned capacity;           /* its queue, as tdm_dsched_stats says (0: none made yet) */
};

/* ---- common ---------------------------------------------------------------------------------- */

_Noreturn static void ds_die(const char *what, int err)
{
	fprintf(stderr, "tandem-bench gpu-dsched: %s: %s\n", what, tdm_strerror(err));
	exit(1);
}

static void ds_stalled(int sig)
{
	static const char msg[] = "tandem-bench gpu-dsched: a measurement did not finish in time: "
	                          "giving up (exit status 4)\n";
	(void)sig;
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(4);
}

static void json_head(const struct ds_env *e, const char *part, const char *impl)
{
	printf("{\"bench\":\"gpu-dsched\",\"part\":\"%s\",\"impl\":\"%s\",\"backend\":\"%s\","
	       "\"device\":\"%s\",\"blocks\":%u,\"warps\":%u,\"scope\":\"%s\",\"capacity\":%u",
	       part, impl, e->o->sim ? "sim" : "cuda", e->device, e->blocks, e->warps,
	       e->scope == TDM_DSCHED_SCOPE_DEVICE ? "device" : "system", e->capacity);
}

/*
 * The scheduler of e, started (resume) or destroyed (pause). A scheduler's kernel never ends, and
 * CUDA calls that wait for every kernel of the device (cudaFree, cudaFreeHost, and what else
 * `--parts beside` finds) would wait for it: the rows that are not the scheduler's (the launch
 * path, graphs, the hand-written floors, which allocate and free) run without one, as tandem
 * runs without one today.
 */
static void ds_resume(struct ds_env *e)
{
	if (e->ds != NULL)
		return;
	tdm_dsched_config dc;
	tdm_dsched_config_init(&dc);
	dc.handlers = &bench_dsched_steps;
	dc.blocks = e->blocks;
	dc.warps = e->warps;
	dc.scope = e->scope;
	dc.capacity = e->o->capacity;
	int rc = tdm_dsched_create(e->gpu, 0, &dc, &e->ds);
	if (rc != 0)
		ds_die("tdm_dsched_create", rc);
	tdm_dsched_stats st;
	(void)tdm_dsched_stats_get(e->ds, &st);
	e->blocks = st.blocks;
	e->warps = st.warps;
	e->capacity = st.capacity;
}

static void ds_pause(struct ds_env *e)
{
	if (e->ds == NULL)
		return;
	int rc = tdm_dsched_destroy(e->ds, TDM_DSCHED_DRAIN, NULL);
	if (rc != 0)
		ds_die("tdm_dsched_destroy", rc);
	e->ds = NULL;
}

static void open_env(struct ds_env *e, const struct ds_opts *o, unsigned workers, unsigned tasks)
{
	tdm_config c;
	tdm_gpu_config gc;
	tdm_device_info di;
	memset(e, 0, sizeof(*e));
	e->o = o;
	e->workers = workers;
	e->tasks = tasks;
	tdm_config_init(&c);
	c.workers = workers;
	int rc = tdm_executor_create(&e->ex, &c);
	if (rc != 0)
		ds_die("tdm_executor_create", rc);
	/* An exclusive stream per task of the graph rows, and one left to shared leases. */
	tdm_gpu_config_init(&gc);
	gc.streams_per_device = tasks + 1 > 8 ? (tasks + 1 < 1024 ? tasks + 1 : 1024) : 8;
	rc = bench_gpu_create(e->ex, &gc, o->sim, "gpu-dsched", &e->gpu);
	if (rc != 0) {
		tdm_executor_destroy(e->ex);
		if (rc == -ENODEV)
			exit(3);
		ds_die("tdm_gpu_create", rc);
	}
	snprintf(e->device, sizeof(e->device), "%s", o->sim ? "tandem simulator" : "?");
	if (tdm_gpu_device_info(e->gpu, 0, &di) == 0) {
		if (di.name[0] != '\0')
			snprintf(e->device, sizeof(e->device), "%s", di.name);
		e->sms = (unsigned)di.sm_count;
	}
	e->blocks = o->blocks;
	e->warps = o->warps;
	e->scope = o->scope;
	ds_resume(e);
}

static void close_env(struct ds_env *e)
{
	ds_pause(e);
	int rc;
	if ((rc = tdm_executor_destroy(e->ex)) != 0)
		ds_die("tdm_executor_destroy", rc);
	if ((rc = tdm_gpu_destroy(e->gpu)) != 0)
		ds_die("tdm_gpu_destroy", rc);
}

/* ---- the step tasks -------------------------------------------------------------------------- */

struct step_task {
	int impl;
	tdm_gpu *gpu;
	tdm_dsched *ds;
	tdm_stream *s;
	tdm_graph *g;
	uint32_t ns;
	uint64_t n, i, ticket, t0, full;
	unsigned batch, left;
	uint64_t *samples; /* n round trips, or NULL */
	_Atomic int *stop; /* nonzero: end early (cost's background) */
	int err;
	const char *what;
};

static int step_fail(struct step_task *c, int err, const char *what)
{
	c->err = err;
	c->what = what;
	if (c->s != NULL)
		(void)tdm_stream_release(c->s);
	c->s = NULL;
	return err;
}

/* Enqueues the task's next step(s); -EAGAIN: the scheduler's queue was full. */
static int step_push(struct step_task *c)
{
	if (c->impl == IMPL_DSCHED) {
		c->left = 1;
		return tdm_dsched_submit(c->ds, 0, &c->ns, sizeof(c->ns), &c->ticket);
	}
	if (c->impl == IMPL_BATCH) {
		tdm_dsched_item it[DS_MAX_BATCH];
		unsigned k = c->n - c->i < c->batch ? (unsigned)(c->n - c->i) : c->batch;
		for (unsigned j = 0; j < k; j++)
			it[j] = (tdm_dsched_item){0, sizeof(c->ns), &c->ns};
		c->left = k;
		return tdm_dsched_submit_batch(c->ds, it, k, &c->ticket);
	}
	c->left = 1;
	return c->impl == IMPL_GRAPH ? tdm_graph_launch(c->s, c->g) : tdm_launch_spin(c->s, c->ns);
}

static int step_fn(tdm_task *t, void *arg)
{
	struct step_task *c = arg;
	int rc;
	TDM_BEGIN(t);
	if (c->impl == IMPL_LAUNCH || c->impl == IMPL_GRAPH) {
		rc = tdm_stream_lease(
		    c->gpu, 0, c->impl == IMPL_GRAPH ? TDM_STREAM_EXCLUSIVE : TDM_STREAM_SHARED,
		    &c->s);
		if (rc != 0)
			return step_fail(c, rc, "tdm_stream_lease");
	}
	if (c->impl == IMPL_GRAPH) {
		if ((rc = tdm_graph_capture_begin(c->s)) != 0)
			return step_fail(c, rc, "tdm_graph_capture_begin");
		rc = tdm_launch_spin(c->s, c->ns);
		int end = tdm_graph_capture_end(c->s, &c->g);
		if (rc != 0 || end < 0)
			return step_fail(c, rc != 0 ? rc : end, "a graph's capture");
	}
	for (c->i = 0; c->i < c->n;) {
		if (c->stop != NULL && atomic_load_explicit(c->stop, memory_order_relaxed))
			break;
		c->t0 = tdm_now_ns();
		rc = step_push(c);
		if (rc == -EAGAIN) {
			c->full++; /* the queue is full: other tasks' items complete meanwhile */
			continue;
		}
		if (rc != 0)
			return step_fail(c, rc, impl_names[c->impl]);
		for (; c->left > 0; c->left--, c->i++) {
			if (c->impl == IMPL_DSCHED || c->impl == IMPL_BATCH) {
				TDM_AWAIT(t, tdm_await_dsched(t, c->ds, c->ticket));
				c->ticket++;
			} else {
				TDM_AWAIT(t, tdm_await_stream(t, c->s));
			}
			if (tdm_task_result(t) != 0)
				return step_fail(c, tdm_task_result(t), "an await");
			if (c->samples != NULL)
				c->samples[c->i] = tdm_now_ns() - c->t0;
		}
	}
	if (c->g != NULL)
		(void)tdm_graph_destroy(c->g);
	c->g = NULL;
	if (c->s != NULL)
		(void)tdm_stream_release(c->s);
	c->s = NULL;
	TDM_END(t);
}

/* T tasks of impl, n steps each; the wall ns from the first spawn to the end of the wait, or 0
 * when a task failed (said on stderr). */
static uint64_t run_steps(struct ds_env *e, int impl, uint32_t ns, uint64_t n, uint64_t *samples,
                          _Atomic int *stop, uint64_t *full)
{
	struct step_task *c = calloc(e->tasks, sizeof(*c));
	if (c == NULL)
		ds_die("calloc", -ENOMEM);
	tdm_group g;
	tdm_group_init(&g, e->ex);
	/* A minute, plus 20 times what the steps should take at 100k steps/s (none for a run that
	 * ends on `stop`). */
	if (stop == NULL)
		alarm(60 + (unsigned)(20 * (double)n * e->tasks * (1e-5 + ns * 1e-9)));
	uint64_t t0 = tdm_now_ns();
	for (unsigned k = 0; k < e->tasks; k++) {
		c[k] = (struct step_task){.impl = impl,
		                          .gpu = e->gpu,
		                          .ds = e->ds,
		                          .ns = ns,
		                          .n = n,
		                          .batch = e->o->batch,
		                          .samples = samples,
		                          .stop = stop};
		int rc = tdm_spawn(e->ex, step_fn, &c[k], &g);
		if (rc != 0)
			ds_die("tdm_spawn", rc);
	}
	(void)tdm_group_wait(&g);
	uint64_t span = tdm_now_ns() - t0;
	if (stop == NULL)
		alarm(0);
	for (unsigned k = 0; k < e->tasks; k++) {
		if (full != NULL)
			*full += c[k].full;
		if (c[k].err != 0) {
			fprintf(stderr, "tandem-bench gpu-dsched: %s left out: %s: %s\n",
			        impl_names[impl], c[k].what, tdm_strerror(c[k].err));
			span = 0;
			break;
		}
	}
	free(c);
	return span;
}

/* Steps per second of impl: the median of --rounds rounds after an untimed one; 0 when the row
 * is left out. */
static double rate_of(struct ds_env *e, int impl, uint32_t ns, uint64_t *full)
{
	const struct ds_opts *o = e->o;
	double v[64];
	unsigned nv = 0;
	if (impl == IMPL_DSCHED || impl == IMPL_BATCH)
		ds_resume(e);
	else
		ds_pause(e);
	if (impl == IMPL_FLOOR) {
#if HAVE_RAW
		if (o->sim)
			return 0;
		for (unsigned r = 0; r < o->rounds && r < 64; r++) {
			double per_s = 0;
			int rc = dsched_floor_ring(e->blocks * e->warps, e->workers, ns,
			                           (uint64_t)o->steps * e->tasks, &per_s);
			if (rc != 0) {
				fprintf(stderr, "tandem-bench gpu-dsched: floor left out: %s\n",
				        dsched_cuda_error());
				return 0;
			}
			v[nv++] = per_s;
		}
		return bench_median(v, nv);
#else
		return 0;
#endif
	}
	if (run_steps(e, impl, ns, o->steps / 10 + 1, NULL, NULL, NULL) == 0)
		return 0;
	for (unsigned r = 0; r < o->rounds && r < 64; r++) {
		uint64_t span = run_steps(e, impl, ns, o->steps, NULL, NULL, full);
		if (span == 0)
			return 0;
		v[nv++] = (double)o->steps * e->tasks / ((double)span / 1e9);
	}
	return bench_median(v, nv);
}

/* ---- rate ------------------------------------------------------------------------------------ */

static void part_rate(const struct ds_opts *o)
{
	if (!o->json)
		printf(
		    "\nrate: steps/s, W workers x %u tasks each running %u steps (spin of step_us, "
		    "awaited); median of %u rounds\n%7s %7s %6s %-13s %13s %9s %8s\n",
		    o->tasks_per_worker, o->steps, o->rounds, "workers", "tasks", "step", "impl",
		    "steps/s", "/launch", "full");
	for (int w = 0; w < o->nworkers; w++) {
		struct ds_env e;
		unsigned workers = o->workers[w];
		open_env(&e, o, workers, workers * o->tasks_per_worker);
		for (int s = 0; s < o->nstep; s++) {
			uint32_t ns = o->step_us[s] * 1000u;
			double r[NIMPL];
			uint64_t full[NIMPL] = {0};
			for (int i = 0; i < NIMPL; i++)
				r[i] = rate_of(&e, i, ns, &full[i]);
			for (int i = 0; i < NIMPL; i++) {
				if (r[i] <= 0)
					continue;
				double vs = r[IMPL_LAUNCH] > 0 ? r[i] / r[IMPL_LAUNCH] : 0;
				if (o->json) {
					json_head(&e, "rate", impl_names[i]);
					printf(",\"workers\":%u,\"tasks\":%u,\"step_us\":%u,"
					       "\"steps\":%u,"
					       "\"rounds\":%u,\"steps_per_s\":%.1f,\"full\":%llu",
					       workers, i == IMPL_FLOOR ? workers : e.tasks,
					       o->step_us[s], o->steps, o->rounds, r[i],
					       (unsigned long long)full[i]);
					if (vs > 0)
						printf(",\"ratio_launch\":%.3f", vs);
					if (i == IMPL_DSCHED && r[IMPL_FLOOR] > 0)
						printf(",\"ratio_floor\":%.3f",
						       r[i] / r[IMPL_FLOOR]);
					printf("}\n");
				} else {
					printf("%7u %7u %4uus %-13s %13.0f", workers,
					       i == IMPL_FLOOR ? workers : e.tasks, o->step_us[s],
					       impl_names[i], r[i]);
					if (vs > 0)
						printf(" %8.2fx", vs);
					else
						printf(" %9s", "-");
					printf(" %8llu\n", (unsigned long long)full[i]);
				}
			}
			fflush(stdout);
		}
		close_env(&e);
	}
}

/* ---- rtt ------------------------------------------------------------------------------------- */

static void part_rtt(const struct ds_opts *o)
{
	struct ds_env e;
	open_env(&e, o, 1, 1);
	uint64_t warm = o->rtt_reps / 10 + 10, n = warm + o->rtt_reps;
	uint64_t *samples = malloc(n * sizeof(*samples));
	if (samples == NULL)
		ds_die("malloc", -ENOMEM);
	double floor_p50 = 0;
	if (!o->json)
		printf(
		    "\nrtt: round trip of one step of 0 us, submit (or launch) to resume, one task "
		    "on one worker; %llu samples after %llu\n%-13s %10s %10s %10s %12s\n",
		    (unsigned long long)o->rtt_reps, (unsigned long long)warm, "impl", "p50_us",
		    "p99_us", "min_us", "p50-floor");
#if HAVE_RAW
	if (!o->sim) {
		struct dsched_floor_rtt f;
		ds_pause(&e);
		if (dsched_floor_pingpong(o->rtt_reps, &f) == 0) {
			floor_p50 = f.p50_us;
			if (o->json) {
				json_head(&e, "rtt", "floor");
				printf(",\"samples\":%llu,\"p50_us\":%.3f,\"p99_us\":%.3f,"
				       "\"min_us\":%.3f}\n",
				       (unsigned long long)f.n, f.p50_us, f.p99_us, f.min_us);
			} else {
				printf("%-13s %10.2f %10.2f %10.2f %12s\n", "floor", f.p50_us,
				       f.p99_us, f.min_us, "");
			}
		} else {
			fprintf(stderr, "tandem-bench gpu-dsched: floor left out: %s\n",
			        dsched_cuda_error());
		}
	}
#endif
	/* The scheduler in the scope asked for, then in the other one (a name of its own), then
	 * the launch path and graphs. */
	const unsigned other =
	    o->scope == TDM_DSCHED_SCOPE_DEVICE ? TDM_DSCHED_SCOPE_SYSTEM : TDM_DSCHED_SCOPE_DEVICE;
	const struct {
		int impl;
		unsigned scope;
		const char *name;
	} rows[] = {{IMPL_DSCHED, o->scope, impl_names[IMPL_DSCHED]},
	            {IMPL_DSCHED, other,
	             other == TDM_DSCHED_SCOPE_SYSTEM ? "dsched-system" : "dsched-device"},
	            {IMPL_LAUNCH, o->scope, impl_names[IMPL_LAUNCH]},
	            {IMPL_GRAPH, o->scope, impl_names[IMPL_GRAPH]}};
	tdm_dsched_stats st = {0};
	for (unsigned k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		int impl = rows[k].impl;
		if (impl == IMPL_DSCHED && e.scope != rows[k].scope)
			ds_pause(&e); /* made again in the row's scope */
		e.scope = rows[k].scope;
		if (impl == IMPL_DSCHED)
			ds_resume(&e);
		else
			ds_pause(&e);
		if (run_steps(&e, impl, 0, n, samples, NULL, NULL) == 0)
			continue;
		if (impl == IMPL_DSCHED && k == 0)
			(void)tdm_dsched_stats_get(e.ds, &st);
		qsort(samples + warm, o->rtt_reps, sizeof(*samples), bench_cmp_u64);
		const uint64_t *v = samples + warm;
		double p50 = (double)v[o->rtt_reps / 2] / 1e3,
		       p99 = (double)v[o->rtt_reps * 99 / 100] / 1e3, mn = (double)v[0] / 1e3;
		if (o->json) {
			json_head(&e, "rtt", rows[k].name);
			printf(",\"samples\":%llu,\"p50_us\":%.3f,\"p99_us\":%.3f,\"min_us\":%.3f",
			       (unsigned long long)o->rtt_reps, p50, p99, mn);
			if (floor_p50 > 0)
				printf(",\"p50_minus_floor_us\":%.3f", p50 - floor_p50);
			if (impl == IMPL_DSCHED && k == 0)
				printf(",\"awaits\":%llu,\"direct\":%llu",
				       (unsigned long long)st.awaits,
				       (unsigned long long)st.direct);
			printf("}\n");
		} else {
			printf("%-13s %10.2f %10.2f %10.2f", rows[k].name, p50, p99, mn);
			if (floor_p50 > 0)
				printf(" %+11.2f", p50 - floor_p50);
			printf("\n");
		}
		fflush(stdout);
	}
	if (!o->json)
		printf("dsched awaits: %llu suspended, %llu seen by their own worker\n",
		       (unsigned long long)st.awaits, (unsigned long long)st.direct);
	free(samples);
	close_env(&e);
}

/* ---- crossover ------------------------------------------------------------------------------- */

static void part_cross(const struct ds_opts *o)
{
	unsigned workers = 0;
	for (int w = 0; w < o->nworkers; w++)
		if (o->workers[w] > workers)
			workers = o->workers[w];
	struct ds_env e;
	open_env(&e, o, workers, workers * o->tasks_per_worker);
	if (!o->json)
		printf("\ncrossover: steps/s at %u workers x %u tasks over step lengths; launches "
		       "catch "
		       "up at %.0f%% of the scheduler's rate\n%8s %13s %13s %13s %9s\n",
		       workers, o->tasks_per_worker, DS_CROSS_SHARE * 100, "step_us", "dsched",
		       "launch", "graph", "launch/ds");
	int cross = -1;
	for (int s = 0; s < o->ncross; s++) {
		uint32_t ns = o->cross_us[s] * 1000u;
		double d = rate_of(&e, IMPL_DSCHED, ns, NULL),
		       l = rate_of(&e, IMPL_LAUNCH, ns, NULL),
		       g = rate_of(&e, IMPL_GRAPH, ns, NULL);
		double ratio = d > 0 ? l / d : 0;
		if (cross < 0 && ratio >= DS_CROSS_SHARE)
			cross = s;
		if (o->json) {
			json_head(&e, "crossover", "sweep");
			printf(",\"workers\":%u,\"tasks\":%u,\"step_us\":%u,\"dsched_steps_per_s\":"
			       "%.1f,"
			       "\"launch_steps_per_s\":%.1f,\"graph_steps_per_s\":%.1f,"
			       "\"ratio_launch_dsched\":%.3f}\n",
			       workers, e.tasks, o->cross_us[s], d, l, g, ratio);
		} else {
			printf("%8u %13.0f %13.0f %13.0f %8.2fx\n", o->cross_us[s], d, l, g, ratio);
		}
		fflush(stdout);
	}
	if (o->json) {
		json_head(&e, "crossover", "summary");
		printf(",\"workers\":%u,\"share\":%.2f,\"crossover_us\":", workers, DS_CROSS_SHARE);
		if (cross >= 0)
			printf("%u}\n", o->cross_us[cross]);
		else
			printf("null,\"longest_us\":%u}\n", o->cross_us[o->ncross - 1]);
	} else if (cross >= 0) {
		printf("crossover: launches reach %.0f%% of the scheduler's rate at %u us steps\n",
		       DS_CROSS_SHARE * 100, o->cross_us[cross]);
	} else {
		printf(
		    "crossover: launches stay below %.0f%% of the scheduler's rate up to %u us\n",
		    DS_CROSS_SHARE * 100, o->cross_us[o->ncross - 1]);
	}
	close_env(&e);
}

/* ---- cost ------------------------------------------------------------------------------------ */

struct busy_task {
	tdm_gpu *gpu;
	tdm_stream *s;
	unsigned i;
	double ms[16];
	int err;
};

/* sim: the "compute-bound kernel" is tdm_launch_busy (the device's busy lock, 2 ms), awaited. */
static int busy_fn(tdm_task *t, void *arg)
{
	struct busy_task *c = arg;
	TDM_BEGIN(t);
	if ((c->err = tdm_stream_lease(c->gpu, 0, 0, &c->s)) != 0)
		return 0;
	for (c->i = 0; c->i < 6; c->i++) {
		c->ms[c->i] = (double)tdm_now_ns();
		if ((c->err = tdm_launch_busy(c->s, 2000000)) != 0)
			break;
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		c->ms[c->i] = ((double)tdm_now_ns() - c->ms[c->i]) / 1e6;
	}
	tdm_stream_release(c->s);
	TDM_END(t);
}

static double work_ms(struct ds_env *e)
{
#if HAVE_RAW
	if (!e->o->sim) {
		double ms = 0;
		if (dsched_work_ms(5, &ms) != 0) {
			fprintf(stderr, "tandem-bench gpu-dsched: cost: %s\n", dsched_cuda_error());
			return 0;
		}
		return ms;
	}
#endif
	struct busy_task c = {.gpu = e->gpu};
	tdm_group g;
	tdm_group_init(&g, e->ex);
	if (tdm_spawn(e->ex, busy_fn, &c, &g) != 0)
		return 0;
	(void)tdm_group_wait(&g);
	return c.err != 0 ? 0 : bench_median(c.ms + 1, 5);
}

struct background {
	struct ds_env *e;
	_Atomic int stop;
};

static void *background_steps(void *arg)
{
	struct background *b = arg;
	(void)run_steps(b->e, IMPL_DSCHED, 1000, UINT64_MAX / 2, NULL, &b->stop, NULL);
	return NULL;
}

static void part_cost(const struct ds_opts *o)
{
	struct ds_env e;
	unsigned workers = o->workers[o->nworkers - 1];
	open_env(&e, o, workers, workers * o->tasks_per_worker);
	/* Without a scheduler first: the one open_env made goes, and comes back after. */
	ds_pause(&e);
	double alone = work_ms(&e);
	ds_resume(&e);
	double idle = work_ms(&e);
	struct background b = {.e = &e};
	pthread_t th;
	if (pthread_create(&th, NULL, background_steps, &b) != 0)
		ds_die("pthread_create", -EAGAIN);
	struct timespec ts = {0, 20000000};
	nanosleep(&ts, NULL);
	double busy = work_ms(&e);
	atomic_store(&b.stop, 1);
	pthread_join(th, NULL);
	double share = e.sms > 0 ? (double)e.blocks / e.sms : 0;
	if (o->json) {
		json_head(&e, "cost", o->sim ? "tdm_launch_busy" : "work-kernel");
		printf(",\"sms\":%u,\"sm_share\":%.4f,\"alone_ms\":%.4f,\"beside_idle_ms\":%.4f,"
		       "\"beside_busy_ms\":%.4f",
		       e.sms, share, alone, idle, busy);
		if (alone > 0)
			printf(",\"ratio_idle\":%.4f,\"ratio_busy\":%.4f", idle / alone,
			       busy / alone);
		printf("}\n");
	} else {
		printf("\ncost: a compute-bound kernel (%s), bench_median ms: alone %.3f, beside "
		       "an idle "
		       "scheduler %.3f (%.3fx), beside one running 1 us steps from %u tasks %.3f "
		       "(%.3fx); the scheduler holds %u of %u SMs (%.1f%%)%s\n",
		       o->sim ? "sim: tdm_launch_busy, 2 ms" : "dsched_work_ms", alone, idle,
		       alone > 0 ? idle / alone : 0, e.tasks, busy, alone > 0 ? busy / alone : 0,
		       e.blocks, e.sms, share * 100,
		       o->sim ? "; the simulator measures no SMs" : "");
	}
	close_env(&e);
}

/* ---- beside ---------------------------------------------------------------------------------- */

#if HAVE_RAW
static const char *volatile probing;

static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		const char *p = probing;
		struct timespec ts = {3, 0};
		nanosleep(&ts, NULL);
		if (p != NULL && p == probing) {
			printf("beside: %s still waits after 3 s: it waits for the scheduler's "
			       "kernel\n",
			       p);
			fflush(stdout);
			_exit(5);
		}
	}
	return NULL;
}
#endif

static void part_beside(const struct ds_opts *o)
{
#if HAVE_RAW
	if (o->sim) {
		printf("\nbeside: cuda only\n");
		return;
	}
	struct ds_env e;
	open_env(&e, o, 1, 1);
	pthread_t th;
	if (pthread_create(&th, NULL, watchdog, NULL) != 0)
		ds_die("pthread_create", -EAGAIN);
	if (!o->json)
		printf("\nbeside: CUDA calls made while a scheduler runs (a call that waits for it "
		       "ends the run)\n");
	for (int i = 0; dsched_probes[i] != NULL; i++) {
		const char *p = dsched_probes[i];
		if (o->probe != NULL && strcmp(o->probe, p) != 0)
			continue;
		if (!o->json)
			printf("  %-30s ...", p);
		fflush(stdout);
		double us = 0;
		probing = p;
		int rc = dsched_probe(p, &us);
		probing = NULL;
		if (o->json) {
			json_head(&e, "beside", p);
			if (rc == 0)
				printf(",\"us\":%.2f,\"waits\":false}\n", us);
			else
				printf(",\"error\":\"%s\"}\n", dsched_cuda_error());
		} else if (rc == 0) {
			printf(" %10.2f us\n", us);
		} else {
			printf(" %s\n", dsched_cuda_error());
		}
		fflush(stdout);
	}
	close_env(&e);
#else
	(void)o;
	printf("\nbeside: cuda only (a build with CUDA)\n");
#endif
}

/* ---- options and main ------------------------------------------------------------------------ */

static int ds_usage(FILE *f)
{
	fputs(
	    "usage: tandem-bench gpu-dsched [options]\n"
	    "  --backend cuda|sim     default cuda (no device: exit status 3); sim runs tandem's\n"
	    "                         simulator, without the plain-CUDA rows, with small defaults\n"
	    "  --workers LIST         executor workers (default 1,4,16; sim 1,2)\n"
	    "  --step-us LIST         each step's device work, us (default 0,1,10; sim 0,1)\n"
	    "  --steps N              steps per task and round (default 2000; sim 40)\n"
	    "  --tasks-per-worker N   tasks running steps at once, per worker (default 4; sim 2)\n"
	    "  --batch N              dsched-batch: items per batch, 1..64 (default 32; sim 8)\n"
	    "  --rounds N             timed rounds, the median reported (default 3; sim 1)\n"
	    "  --rtt-reps N           rtt: timed round trips (default 20000; sim 200)\n"
	    "  --cross-us LIST        crossover: step lengths, us (default\n"
	    "                         0,1,2,5,10,20,50,100,200; sim 0,10)\n"
	    "  --blocks N --warps N   the scheduler's share (default the device's: 0)\n"
	    "  --capacity N           the scheduler's queue, a power of two (default 4096)\n"
	    "  --scope device|system  the scheduler's tdm_dsched_config.scope (default device:\n"
	    "                         the steps write nothing); rtt measures both\n"
	    "  --parts LIST           any of rate,rtt,crossover,cost,beside (default all but\n"
	    "                         beside)\n"
	    "  --probe NAME           beside: this probe alone\n"
	    "  --json                 one JSON object per line\n",
	    f);
	return 2;
}

static int ds_parse(int argc, char **argv, struct ds_opts *o)
{
	int given_workers = 0, given_step = 0, given_cross = 0, given_steps = 0, given_tpw = 0,
	    given_batch = 0, given_rounds = 0, given_rtt = 0;
	memset(o, 0, sizeof(*o));
	o->parts = PART_RATE | PART_RTT | PART_CROSS | PART_COST;
	o->scope = TDM_DSCHED_SCOPE_DEVICE;
	struct bench_opt op = {.i = 1};
	int r;
	while ((r = bench_next_opt(argc, argv, "gpu-dsched", &o->json, &op)) != 0) {
		if (r == 2) {
			(void)ds_usage(stdout);
			exit(0);
		}
		if (r < 0)
			return ds_usage(stderr);
		const char *v = op.value;
		int bad = 0;
		uint64_t u = 0;
#define IS(name) bench_opt_is(&op, name)
		if (IS("--backend")) {
			o->sim = strcmp(v, "sim") == 0;
			bad = !o->sim && strcmp(v, "cuda") != 0;
		} else if (IS("--workers")) {
			bad = bench_parse_list(v, o->workers, &o->nworkers, DS_MAX_LIST, 1,
			                       TDM_MAX_WORKERS);
			given_workers = 1;
		} else if (IS("--step-us")) {
			bad = bench_parse_list(v, o->step_us, &o->nstep, DS_MAX_LIST, 0, 1000000);
			given_step = 1;
		} else if (IS("--cross-us")) {
			bad = bench_parse_list(v, o->cross_us, &o->ncross, DS_MAX_LIST, 0, 1000000);
			given_cross = 1;
		} else if (IS("--steps")) {
			bad = bench_parse_uint(v, &o->steps, 1, 100000000u);
			given_steps = 1;
		} else if (IS("--tasks-per-worker")) {
			bad = bench_parse_uint(v, &o->tasks_per_worker, 1, 1024);
			given_tpw = 1;
		} else if (IS("--batch")) {
			bad = bench_parse_uint(v, &o->batch, 1, DS_MAX_BATCH);
			given_batch = 1;
		} else if (IS("--rounds")) {
			bad = bench_parse_uint(v, &o->rounds, 1, 64);
			given_rounds = 1;
		} else if (IS("--rtt-reps")) {
			bad = bench_parse_u64(v, 10, 100000000u, &u);
			o->rtt_reps = u;
			given_rtt = 1;
		} else if (IS("--blocks")) {
			bad = bench_parse_uint(v, &o->blocks, 0, 1024);
		} else if (IS("--capacity")) {
			bad = bench_parse_uint(v, &o->capacity, 16, 65536) ||
			      (o->capacity & (o->capacity - 1)) != 0;
		} else if (IS("--scope")) {
			o->scope = strcmp(v, "system") == 0 ? TDM_DSCHED_SCOPE_SYSTEM
			                                    : TDM_DSCHED_SCOPE_DEVICE;
			bad = strcmp(v, "system") != 0 && strcmp(v, "device") != 0;
		} else if (IS("--warps")) {
			bad = bench_parse_uint(v, &o->warps, 0, TDM_DSCHED_MAX_WARPS);
		} else if (IS("--parts")) {
			bad = bench_parse_parts(v, part_names, NPARTS, &o->parts);
		} else if (IS("--probe")) {
			o->probe = v;
		} else {
			bench_opt_refuse(&op, "gpu-dsched", 1);
			return ds_usage(stderr);
		}
#undef IS
		if (bad) {
			bench_opt_refuse(&op, "gpu-dsched", 0);
			return ds_usage(stderr);
		}
	}
	/* The simulator's defaults are small: it checks code paths, it measures no GPU. */
	if (!given_workers) {
		static const unsigned def[] = {1, 4, 16}, sim[] = {1, 2};
		o->nworkers = o->sim ? 2 : 3;
		memcpy(o->workers, o->sim ? sim : def, (size_t)o->nworkers * sizeof(unsigned));
	}
	if (!given_step) {
		static const unsigned def[] = {0, 1, 10};
		o->nstep = o->sim ? 2 : 3;
		memcpy(o->step_us, def, (size_t)o->nstep * sizeof(unsigned));
	}
	if (!given_cross) {
		static const unsigned def[] = {0, 1, 2, 5, 10, 20, 50, 100, 200}, sim[] = {0, 10};
		o->ncross = o->sim ? 2 : 9;
		memcpy(o->cross_us, o->sim ? sim : def, (size_t)o->ncross * sizeof(unsigned));
	}
	if (!given_steps)
		o->steps = o->sim ? 40 : 2000;
	if (!given_tpw)
		o->tasks_per_worker = o->sim ? 2 : 4;
	if (!given_batch)
		o->batch = o->sim ? 8 : 32;
	if (!given_rounds)
		o->rounds = o->sim ? 1 : 3;
	if (!given_rtt)
		o->rtt_reps = o->sim ? 200 : 20000;
	return 0;
}

int bench_gpu_dsched(int argc, char **argv)
{
	struct ds_opts o;
	int rc = ds_parse(argc, argv, &o);
	if (rc != 0)
		return rc;
	/* A module loaded lazily while a scheduler runs would wait for its kernel; and a first
	 * launch loading one inside a timed round would be measured. */
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	signal(SIGALRM, ds_stalled);
	if (!o.json)
		printf("gpu-dsched on %s: %s\n", o.sim ? "sim" : "cuda",
		       HAVE_RAW && !o.sim ? "hand-written floors beside (dsched_cuda.cu)"
		                          : "no plain-CUDA rows (sim, or a build without CUDA)");
	if (o.parts & PART_RATE)
		part_rate(&o);
	if (o.parts & PART_RTT)
		part_rtt(&o);
	if (o.parts & PART_CROSS)
		part_cross(&o);
	if (o.parts & PART_COST)
		part_cost(&o);
	if (o.parts & PART_BESIDE)
		part_beside(&o);
	return 0;
}
