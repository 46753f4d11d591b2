// SPDX-License-Identifier: MIT
/*
 * tandem's own trace (base/trace.c): tdm_trace_start/stop and TANDEM_TRACE write Chrome
 * trace-event JSON, one event a line, which this file reads back line by line: exactly one span
 * per task run (the executor's tasks_run), named by the task's function; spans balanced on each
 * thread, nested where a task waits for a group on its worker; every flow's two ends present
 * (spawn to first run, await to resume); threads named; nothing dropped (drops, and a trace
 * cut by a kill: tests/test_trace_stream.c). And the errors.
 */
#include "gpu_env.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_internal.h" /* tdm__gpu_find: the layer a handle names */
#include "stamps.h"       /* tdm__stamps_untimed: how far a trace's pace has got */

TDM_TEST_SUITE(trace);

#define MAX_TIDS 64
#define MAX_FLOWS 200000

struct trace {
	bool head, tail;     /* {"traceEvents":[ first; the otherData line last */
	long long dropped;   /* -1: not found */
	unsigned long lines; /* event lines */
	unsigned long plain, awaiting, parent, other_runs, parked;
	unsigned long spans; /* B events */
	bool balanced;       /* no E without its B, nothing open at the end, per thread */
	int tids[MAX_TIDS], depth[MAX_TIDS], ntids;
	unsigned long spawn_s, spawn_f, await_s, await_f, launch_s, launch_f, done_s, done_f;
	/* GPU tracks: complete events, by kind; overlapping ones on one track; kernels' lengths
	 * (us); tracks named "GPU ..."; counter samples. */
	unsigned long gpu_spans, kernels, copies, counters, steals;
	unsigned long untimed, lost;            /* the counters' largest samples */
	unsigned long ready_samples, ready_max; /* "executor N: ready tasks" */
	bool gpu_overlap, gpu_track;
	double kernel_min, kernel_max, kernel_sum, last_end[MAX_TIDS], gpu_open[MAX_TIDS];
	double kernel_dur[64]; /* the first 64 kernels' lengths */
	int gpu_tids[MAX_TIDS], ngpu_tids;
	long long tasks_run; /* otherData; -1: not found */
	bool flows_paired;   /* each id: one "s", then one "f" */
	bool worker, poller;
	unsigned max_depth;
};

static unsigned char *flow_seen; /* by id: bit 0 "s" seen, bit 1 "f" seen */
static double (*flow_ts)[2];     /* by id: when each end happened */

static int *depth_of(struct trace *r, int tid)
{
	for (int i = 0; i < r->ntids; i++)
		if (r->tids[i] == tid)
			return &r->depth[i];
	cr_assert_lt(r->ntids, MAX_TIDS);
	r->tids[r->ntids] = tid;
	r->depth[r->ntids] = 0;
	return &r->depth[r->ntids++];
}

/* The string value of "key":"..." in line, into out; false when absent. */
static bool str_of(const char *line, const char *key, char *out, size_t len)
{
	char pat[32];
	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	const char *p = strstr(line, pat);
	if (p == NULL)
		return false;
	p += strlen(pat);
	const char *q = strchr(p, '"');
	if (q == NULL || (size_t)(q - p) >= len)
		return false;
	memcpy(out, p, (size_t)(q - p));
	out[q - p] = '\0';
	return true;
}

static struct trace read_trace(const char *path)
{
	struct trace r;
	memset(&r, 0, sizeof(r));
	r.dropped = -1;
	r.tasks_run = -1;
	r.kernel_min = 1e300;
	r.balanced = true;
	r.flows_paired = true;
	free(flow_seen);
	flow_seen = calloc(MAX_FLOWS, 1);
	flow_ts = calloc(MAX_FLOWS, sizeof(*flow_ts));
	cr_assert(flow_seen != NULL && flow_ts != NULL);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "the trace %s was written", path);
	char line[1024];
	bool first = true;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (first) {
			r.head = strcmp(line, "{\"traceEvents\":[\n") == 0;
			first = false;
			continue;
		}
		if (strncmp(line, "\"otherData\":", 12) == 0) {
			const char *d = strstr(line, "\"dropped\":");
			if (d != NULL)
				r.dropped = atoll(d + 10);
			const char *tr = strstr(line, "\"tasks_run\":");
			if (tr != NULL)
				r.tasks_run = atoll(tr + 12);
			r.tail = strcmp(line + strlen(line) - 3, "}}\n") == 0;
			continue;
		}
		char ph;
		int pid, tid;
		double ts;
		if (sscanf(line, "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":%lf", &ph, &pid, &tid,
		           &ts) != 4)
			continue;
		r.lines++;
		char name[128] = "", cat[32] = "";
		str_of(line, "name", name, sizeof(name));
		str_of(line, "cat", cat, sizeof(cat));
		if ((ph == 'B' || ph == 'E') && strcmp(cat, "gpu") == 0) {
			/* A GPU span: on a track of its own, never nested. */
			int k = 0;
			while (k < r.ngpu_tids && r.gpu_tids[k] != tid)
				k++;
			if (k == r.ngpu_tids) {
				cr_assert_lt(k, MAX_TIDS);
				r.gpu_tids[r.ngpu_tids++] = tid;
				r.last_end[k] = 0;
				r.gpu_open[k] = -1;
			}
			if (ph == 'B') {
				cr_assert_lt(r.gpu_open[k], 0, "GPU spans never nest: %s", line);
				/* Written to the nanosecond: 0.0005 us is rounding. */
				if (ts + 0.0005 < r.last_end[k])
					r.gpu_overlap = true;
				r.gpu_open[k] = ts;
				if (strncmp(name, "copy ", 5) == 0)
					cr_assert_not_null(strstr(line, "\"args\":{\"bytes\":"),
					                   "%s", line);
				continue;
			}
			cr_assert_geq(r.gpu_open[k], 0, "a GPU span ends after it began: %s", line);
			double dur = ts - r.gpu_open[k];
			r.gpu_open[k] = -1;
			r.last_end[k] = ts;
			r.gpu_spans++;
			if (strcmp(name, "kernel") == 0) {
				if (r.kernels < 64)
					r.kernel_dur[r.kernels] = dur;
				r.kernels++;
				r.kernel_sum += dur;
				if (dur < r.kernel_min)
					r.kernel_min = dur;
				if (dur > r.kernel_max)
					r.kernel_max = dur;
			} else if (strncmp(name, "copy ", 5) == 0) {
				r.copies++;
			}
			continue;
		}
		if (ph == 'B') {
			int *d = depth_of(&r, tid);
			++*d;
			if ((unsigned)*d > r.max_depth)
				r.max_depth = (unsigned)*d;
			r.spans++;
			if (strcmp(name, "plain_task") == 0)
				r.plain++;
			else if (strcmp(name, "await_task") == 0)
				r.awaiting++;
			else if (strcmp(name, "parent_task") == 0)
				r.parent++;
			else if (strcmp(name, "parked") == 0)
				r.parked++;
			else if (strcmp(name, "spawn") != 0 && strcmp(name, "resume") != 0)
				r.other_runs++;
		} else if (ph == 'E') {
			int *d = depth_of(&r, tid);
			if (*d == 0)
				r.balanced = false;
			else
				--*d;
		} else if (ph == 's' || ph == 'f') {
			const char *p = strstr(line, "\"id\":");
			cr_assert_not_null(p, "a flow has an id: %s", line);
			long id = atol(p + 5);
			cr_assert(id > 0 && id < MAX_FLOWS, "flow id %ld", id);
			static const char *const types[] = {"spawn", "await", "launch", "done"};
			cr_assert_str_eq(cat, "flow");
			cr_assert_str_eq(name, types[id & 3], "a flow's id says its type");
			unsigned long *ends[][2] = {{&r.spawn_s, &r.spawn_f},
			                            {&r.await_s, &r.await_f},
			                            {&r.launch_s, &r.launch_f},
			                            {&r.done_s, &r.done_f}};
			/* Threads are written one after another: a finish may come first. */
			if (ph == 's') {
				if (flow_seen[id] & 1)
					r.flows_paired = false;
				flow_seen[id] |= 1;
				flow_ts[id][0] = ts;
				*ends[id & 3][0] += 1;
			} else {
				if (flow_seen[id] & 2)
					r.flows_paired = false;
				flow_seen[id] |= 2;
				flow_ts[id][1] = ts;
				cr_assert_not_null(strstr(line, "\"bp\":\"e\""));
				*ends[id & 3][1] += 1;
			}
		} else if (ph == 'i') {
			cr_assert_str_eq(name, "steal");
			cr_assert_not_null(strstr(line, "\"args\":{\"victim\":"), "%s", line);
			r.steals++;
		} else if (ph == 'C') {
			cr_assert_not_null(strstr(line, "\"args\":{\"value\":"), "%s", line);
			r.counters++;
			const char *v = strstr(line, "\"args\":{\"value\":");
			unsigned long n = strtoul(v + 16, NULL, 10); /* counts: the largest */
			if (strstr(line, "GPU launches untimed") != NULL && n > r.untimed)
				r.untimed = n;
			if (strstr(line, "GPU spans lost") != NULL && n > r.lost)
				r.lost = n;
			if (strstr(line, "\"name\":\"executor ") != NULL &&
			    strstr(line, ": ready tasks\"") != NULL) {
				r.ready_samples++;
				if (n > r.ready_max)
					r.ready_max = n;
			}
		} else if (ph == 'M') {
			if (strstr(line, "\"args\":{\"name\":\"GPU ") != NULL)
				r.gpu_track = true;
			/* Any worker: one that the machine has not yet scheduled when the
			 * trace stops has named nothing; those that ran tasks have. */
			if (strstr(line, "\"args\":{\"name\":\"tandem worker ") != NULL)
				r.worker = true;
			if (strstr(line, "\"args\":{\"name\":\"tandem poller\"}") != NULL)
				r.poller = true;
		}
	}
	fclose(f);
	for (int i = 0; i < r.ntids; i++)
		if (r.depth[i] != 0)
			r.balanced = false;
	for (long id = 0; id < MAX_FLOWS; id++)
		/* A launch's finish, on a GPU track, may seem to come first on cuda, whose
		 * device clock is anchored to the host's within microseconds. */
		if (flow_seen[id] == 1 || flow_seen[id] == 2 ||
		    (flow_seen[id] == 3 && (id & 3) != 2 && flow_ts[id][1] < flow_ts[id][0]))
			r.flows_paired = false;
	free(flow_ts);
	flow_ts = NULL;
	free(flow_seen);
	flow_seen = NULL;
	return r;
}

#define temp_path(out, len) tdm_test_temp_path("tandem-trace", (out), (len))

/* A counter of tdm_worker_stats (its offset), summed over ex's workers. */
static uint64_t stat_sum(tdm_executor *ex, size_t off)
{
	uint64_t n = 0;
	for (int i = 0; i < tdm_executor_workers(ex); i++) {
		tdm_worker_stats s;
		cr_assert_eq(tdm_executor_stats(ex, (unsigned)i, &s), 0);
		n += *(const uint64_t *)(const void *)((const char *)&s + off);
	}
	return n;
}
#define tasks_run(ex) stat_sum((ex), offsetof(tdm_worker_stats, tasks_run))
#define steals_won(ex) stat_sum((ex), offsetof(tdm_worker_stats, steals_won))

/* ---- the tasks (not static: -rdynamic names them by their symbols) ---- */

static atomic_uint plain_runs;

void plain_task(void *arg)
{
	(void)arg;
	atomic_fetch_add(&plain_runs, 1);
}

#define CHILDREN 8

/* Waits for a group on its worker: the wait runs the children there, nested in its span. */
void parent_task(void *arg)
{
	tdm_executor *ex = arg;
	tdm_group g;
	tdm_group_init(&g, ex);
	for (int i = 0; i < CHILDREN; i++)
		tdm_group_spawn(&g, plain_task, NULL);
	tdm_group_wait(&g);
}

#define AWAITS 3

struct awaiter {
	tdm_gpu *gpu;
	tdm_stream *s;
	int i, rc;
};

/* AWAITS awaits of a stream, each of which suspends the task whatever the machine's pace: its
 * completion is enqueued behind the call (a deadline's await goes on at once when the deadline
 * has passed, as it may have on a loaded machine). */
int await_task(tdm_task *t, void *arg)
{
	struct awaiter *a = arg;
	TDM_BEGIN(t);
	a->rc = tdm_stream_lease(a->gpu, 0, 0, &a->s);
	if (a->rc != 0)
		return 0;
	for (a->i = 0; a->i < AWAITS; a->i++) {
		TDM_AWAIT(t, tdm_await_stream(t, a->s));
		if (tdm_task_result(t) != 0)
			a->rc = tdm_task_result(t);
	}
	tdm_stream_release(a->s);
	TDM_END(t);
}

#define PLAIN 200
#define PARENTS 4
#define AWAITERS 16

/* Runs PLAIN plain tasks, PARENTS parents (each CHILDREN plain children) and AWAITERS tasks of
 * AWAITS stream awaits each, from this thread, and waits for all. */
static void run_work(struct env *e, struct awaiter *aw)
{
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e->ex), 0);
	for (int i = 0; i < PLAIN; i++)
		cr_assert_eq(tdm_group_spawn(&g, plain_task, NULL), 0);
	for (int i = 0; i < PARENTS; i++)
		cr_assert_eq(tdm_group_spawn(&g, parent_task, e->ex), 0);
	for (int i = 0; i < AWAITERS; i++) {
		aw[i] = (struct awaiter){.gpu = e->gpu};
		cr_assert_eq(tdm_spawn(e->ex, await_task, &aw[i], &g), 0);
	}
	cr_assert_eq(tdm_group_wait(&g), 0);
	for (int i = 0; i < AWAITERS; i++)
		cr_assert_eq(aw[i].rc, 0, "awaiter %d: %s", i, tdm_strerror(aw[i].rc));
}

static void check_full(const struct trace *r, uint64_t runs)
{
	cr_assert(r->head && r->tail, "the file begins and ends as Chrome trace JSON");
	cr_assert_eq(r->dropped, 0, "nothing dropped");
	cr_assert(r->balanced, "B/E balanced on every thread");
	cr_assert(r->flows_paired, "every flow has both ends, once");
	cr_assert_eq(r->plain, PLAIN + PARENTS * CHILDREN, "one span per plain task run");
	cr_assert_eq(r->parent, PARENTS);
	cr_assert_eq(r->other_runs, 0);
	/* A resumable task's run may take up a wake that landed while it was returning: fewer runs
	 * than calls, but exactly one span per run (tasks_run counts runs). */
	cr_assert_geq(r->awaiting, AWAITERS);
	cr_assert_eq(r->plain + r->parent + r->awaiting, runs, "spans %lu, runs %llu",
	             r->plain + r->parent + r->awaiting, (unsigned long long)runs);
	cr_assert_eq(r->spawn_s, PLAIN + PARENTS * (CHILDREN + 1) + AWAITERS,
	             "a spawn flow per task");
	cr_assert_eq(r->spawn_f, r->spawn_s);
	cr_assert_eq(r->await_s, AWAITERS * AWAITS, "an await flow per await");
	cr_assert_eq(r->await_f, r->await_s);
	cr_assert(r->worker, "a worker thread named");
	cr_assert(r->poller, "the poller thread named");
}

Test(trace, records_runs_flows_and_names)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	/* Every await through the poller, which has then run (and named itself) before the first
	 * await resumes: a worker watching its own awaits would leave it idle. */
	cr_assert_eq(tdm_gpu_debug(e.gpu, NULL, "0"), 0);
	char path[64];
	temp_path(path, sizeof(path));
	struct awaiter aw[AWAITERS];
	uint64_t before = tasks_run(e.ex), stolen = steals_won(e.ex);
	cr_assert_eq(tdm_trace_start(e.ex, path), 0);
	run_work(&e, aw);
	uint64_t runs = tasks_run(e.ex) - before;
	stolen = steals_won(e.ex) - stolen;
	cr_assert_eq(tdm_trace_stop(e.ex), 0);
	struct trace r = read_trace(path);
	check_full(&r, runs);
	cr_assert_eq(r.steals, stolen, "a steal instant per steal: %lu, %llu", r.steals,
	             (unsigned long long)stolen);
	cr_assert_eq(r.tasks_run, (long long)runs, "otherData.tasks_run");
	cr_assert_geq(r.max_depth, 2, "a group wait on a worker nests its children's spans");

	/* Stopped: more work records nothing, and a second trace holds only its own work. */
	run_work(&e, aw);
	char path2[64];
	temp_path(path2, sizeof(path2));
	before = tasks_run(e.ex);
	cr_assert_eq(tdm_trace_start(e.ex, path2), 0);
	run_work(&e, aw);
	runs = tasks_run(e.ex) - before;
	cr_assert_eq(tdm_trace_stop(e.ex), 0);
	r = read_trace(path2);
	check_full(&r, runs);
	env_close(&e);
	unlink(path);
	unlink(path2);
}

/* Whether one of ex's workers parked twice since `from` (their parks counts then): the first
 * of those sleeps is then recorded, both ends, whatever the machine's pace (a worker counts a
 * park before it records the sleep, and its next park after it recorded the wake). */
static bool parked_twice(tdm_executor *ex, const uint64_t *from)
{
	for (int i = 0; i < tdm_executor_workers(ex); i++) {
		tdm_worker_stats s;
		cr_assert_eq(tdm_executor_stats(ex, (unsigned)i, &s), 0);
		if (s.parks >= from[i] + 2)
			return true;
	}
	return false;
}

/* The parked span: a worker that sleeps while traced. Each task wakes a worker, which sleeps
 * again once it ran it; tasks are submitted one at a time, each once the last ran and a worker
 * slept since, until one worker slept twice. */
Test(trace, parks)
{
	tdm_executor *ex = tdm_test_create(2);
	char path[64];
	temp_path(path, sizeof(path));
	atomic_store(&plain_runs, 0);
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	uint64_t from[2];
	for (unsigned i = 0; i < 2; i++) {
		tdm_worker_stats s;
		cr_assert_eq(tdm_executor_stats(ex, i, &s), 0);
		from[i] = s.parks;
	}
	unsigned rounds = 0;
	while (!parked_twice(ex, from)) {
		uint64_t parks = tdm_test_stats_total(ex).parks;
		cr_assert_eq(tdm_submit(ex, plain_task, NULL), 0);
		rounds++;
		while (atomic_load(&plain_runs) < rounds || tdm_test_stats_total(ex).parks == parks)
			tdm_test_sleep_us(100);
	}
	cr_assert_eq(tdm_trace_stop(ex), 0);
	struct trace r = read_trace(path);
	cr_assert(r.balanced && r.flows_paired);
	cr_assert_eq(r.plain, rounds);
	cr_assert_eq(r.spawn_s, rounds, "spawns from outside a task: each in a span of its own");
	cr_assert_gt(r.parked, 0, "idle workers' sleeps are spans");
	tdm_test_destroy(ex);
	unlink(path);
}

static void *submitter(void *arg)
{
	for (int i = 0; i < 10; i++)
		if (tdm_submit(arg, plain_task, NULL) != 0)
			return arg;
	return NULL;
}

/* A thread that records and ends before the stop: its events are written all the same. */
Test(trace, thread_that_ends)
{
	tdm_executor *ex = tdm_test_create(2);
	char path[64];
	temp_path(path, sizeof(path));
	atomic_store(&plain_runs, 0);
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, submitter, ex), 0);
	void *failed;
	cr_assert_eq(pthread_join(th, &failed), 0);
	cr_assert_null(failed);
	while (atomic_load(&plain_runs) < 10)
		tdm_test_sleep_us(100);
	tdm_test_destroy(ex); /* joins the workers: every run has ended; writes the trace */
	struct trace r = read_trace(path);
	cr_assert(r.balanced && r.flows_paired);
	cr_assert_eq(r.plain, 10);
	cr_assert_eq(r.spawn_s, 10, "the ended thread's spawns are in the file");
	cr_assert_eq(r.spawn_f, 10);
	unlink(path);
}

Test(trace, errors)
{
	tdm_executor *ex = tdm_test_create(1);
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(NULL, path), -EINVAL);
	cr_assert_eq(tdm_trace_start(ex, NULL), -EINVAL);
	cr_assert_eq(tdm_trace_start(ex, ""), -EINVAL);
	cr_assert_eq(tdm_trace_stop(NULL), -EINVAL);
	cr_assert_eq(tdm_trace_stop(ex), -EINVAL, "no trace runs");
	cr_assert_eq(setenv("TANDEM_TRACE_EVENTS", "lots", 1), 0);
	cr_assert_eq(tdm_trace_start(ex, path), -EINVAL);
	cr_assert_eq(unsetenv("TANDEM_TRACE_EVENTS"), 0);

	cr_assert_eq(tdm_trace_start(ex, "/nonexistent-tandem-dir/t.json"), -ENOENT,
	             "the file's error, at the start");
	cr_assert_eq(tdm_trace_stop(ex), -EINVAL, "none started");
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	cr_assert_eq(tdm_trace_start(ex, path), -EALREADY);
	tdm_executor *other = tdm_test_create(1);
	cr_assert_eq(tdm_trace_start(other, path), -EALREADY, "one trace per process");
	cr_assert_eq(tdm_trace_stop(other), -EINVAL, "not its trace");
	cr_assert_eq(tdm_trace_stop(ex), 0);
	cr_assert_eq(tdm_trace_stop(ex), -EINVAL, "stopped");
	cr_assert_eq(tdm_trace_start(other, path), 0, "free again");
	cr_assert_eq(tdm_submit(other, plain_task, NULL), 0);
	tdm_test_destroy(other); /* writes the trace it still owns */
	struct trace r = read_trace(path);
	cr_assert(r.head && r.tail && r.balanced);
	cr_assert_eq(r.plain, 1);
	tdm_test_destroy(ex);
	unlink(path);
}

/* TANDEM_TRACE=path: from the create to the destroy, with no call. */
Test(trace, environment)
{
	char path[64];
	temp_path(path, sizeof(path));
	unlink(path);
	cr_assert_eq(setenv("TANDEM_TRACE", path, 1), 0);
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	cr_assert_eq(tdm_trace_start(e.ex, path), -EALREADY, "TANDEM_TRACE started one");
	struct awaiter aw[AWAITERS];
	run_work(&e, aw);
	uint64_t runs = tasks_run(e.ex);
	cr_assert_eq(access(path, F_OK), 0, "written as the run goes");
	/* The layer first: its poller ends while the trace runs, and is still named. */
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
	tdm_test_destroy(e.ex);
	struct trace r = read_trace(path);
	check_full(&r, runs);
	unlink(path);
}

/* ---- GPU spans (gpu/stamps.c) ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

#define SPINS 20
#define SPIN_NS 200000u

struct spinner {
	tdm_gpu *gpu;
	tdm_stream *s;
	int i;
};

/* Launches SPINS kernels of SPIN_NS, awaiting each, on an exclusive stream. */
int spin_task(tdm_task *t, void *arg)
{
	struct spinner *sp = arg;
	TDM_BEGIN(t);
	cr_assert_eq(tdm_stream_lease(sp->gpu, 0, TDM_STREAM_EXCLUSIVE, &sp->s), 0);
	for (sp->i = 0; sp->i < SPINS; sp->i++) {
		cr_assert_eq(tdm_launch_spin(sp->s, SPIN_NS), 0);
		TDM_AWAIT(t, tdm_await_stream(t, sp->s));
		cr_assert_eq(tdm_task_result(t), 0);
	}
	cr_assert_eq(tdm_stream_release(sp->s), 0);
	TDM_END(t);
}

/* Each kernel a span on its stream's track, as long as the kernel ran (at least SPIN_NS, and
 * within 1 us of it on a GPU), with its launch's flow into it and a flow from it to the run
 * that resumed its awaiting task; spans never overlap on a track; counters sampled. */
static bool gpu_spans(tdm_backend backend)
{
	struct env e;
	if (!env_open(&e, backend, TDM_COMPLETION_AUTO, 2))
		return false;
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(e.ex, path), 0);
	struct spinner sp = {.gpu = e.gpu};
	cr_assert_eq(run_one(&e, spin_task, &sp), 0);
	cr_assert_eq(tdm_trace_stop(e.ex), 0);
	struct trace r = read_trace(path);
	cr_assert(r.head && r.tail);
	cr_assert_eq(r.dropped, 0);
	cr_assert(r.flows_paired, "every flow has both ends, once");
	cr_assert(r.gpu_track, "a GPU stream's track is named");
	cr_assert_eq(r.kernels, SPINS, "a span per kernel: %lu", r.kernels);
	cr_assert_eq(r.gpu_spans, SPINS);
	cr_assert(!r.gpu_overlap, "spans on one track never overlap");
	cr_assert_eq(r.launch_s, SPINS, "a launch flow per kernel");
	cr_assert_eq(r.launch_f, SPINS);
	cr_assert_eq(r.done_s, SPINS, "a flow from each kernel to the resume: %lu", r.done_s);
	cr_assert_eq(r.done_f, SPINS);
	cr_assert_eq(r.await_s, SPINS);
	cr_assert_geq(r.counters, 1, "counters sampled");
	double want = SPIN_NS / 1000.0, mean = r.kernel_sum / (double)r.kernels;
	fprintf(stderr, "%s kernel spans of a %.0f us kernel: min %.3f mean %.3f max %.3f us\n",
	        backend == TDM_BACKEND_CUDA ? "cuda" : "sim", want, r.kernel_min, mean,
	        r.kernel_max);
	cr_assert_leq(SPINS, 64);
	/* A spinning kernel runs at least its length. Its span starts where the launch reached
	 * the device, taken as the launch call's return: a host preempted between the driver's
	 * submission and that return (a loaded 2-CPU machine under a sanitizer) starts one late,
	 * so the median is what is asserted, not every span. */
	qsort(r.kernel_dur, SPINS, sizeof(double), cmp_double);
	double median = (r.kernel_dur[SPINS / 2 - 1] + r.kernel_dur[SPINS / 2]) / 2;
	cr_assert_geq(median, want - 1.0, "median %.3f", median);
	if (backend == TDM_BACKEND_CUDA)
		cr_assert_leq(median, want + 1.0, "median %.3f: within 1 us of the kernel", median);
	env_close(&e);
	unlink(path);
	return true;
}

Test(trace, gpu_spans)
{
	cr_assert(gpu_spans(TDM_BACKEND_SIM));
}

Test(trace, gpu_spans_cuda)
{
	if (!gpu_spans(TDM_BACKEND_CUDA))
		cr_skip_test("no CUDA device");
}

/* Without a trace (and without metrics), nothing is stamped: no track, no span. */
Test(trace, no_spans_when_off)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct spinner sp = {.gpu = e.gpu};
	cr_assert_eq(run_one(&e, spin_task, &sp), 0); /* untraced */
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(e.ex, path), 0);
	cr_assert_eq(tdm_trace_stop(e.ex), 0);
	struct trace r = read_trace(path);
	cr_assert_eq(r.gpu_spans, 0, "the untraced kernels left no spans");
	env_close(&e);
	unlink(path);
}

/* ---- names ---- */

void named_task(void *arg)
{
	(void)arg;
}

void long_named_task(void *arg)
{
	(void)arg;
}

int named_resumable(tdm_task *t, void *arg)
{
	(void)t;
	(void)arg;
	return 0;
}

/* A task function named in the user's words shows under that name, every run; the calls'
 * errors. */
Test(trace, task_names)
{
	cr_assert_eq(tdm_task_name(NULL, "x"), -EINVAL);
	cr_assert_eq(tdm_task_name(named_task, NULL), -EINVAL);
	cr_assert_eq(tdm_task_name(named_task, ""), -EINVAL);
	cr_assert_eq(tdm_resumable_name(NULL, "x"), -EINVAL);
	cr_assert_eq(tdm_task_name(named_task, "load a \"batch\""), 0);
	cr_assert_eq(tdm_task_name(named_task, "another"), -EALREADY, "a name stays");
	cr_assert_eq(tdm_resumable_name(named_resumable, "decode"), 0);
	/* 62 bytes, then a 2-byte character that the 63-byte cut would split: it goes whole. */
	char long_name[80];
	memset(long_name, 'a', 62);
	strcpy(long_name + 62, "\xc3\xa9");
	cr_assert_eq(tdm_task_name(long_named_task, long_name), 0);

	tdm_executor *ex = tdm_test_create(2);
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(tdm_group_spawn(&g, named_task, NULL), 0);
		cr_assert_eq(tdm_spawn(ex, named_resumable, NULL, &g), 0);
	}
	cr_assert_eq(tdm_group_spawn(&g, long_named_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(tdm_trace_stop(ex), 0);
	tdm_test_destroy(ex);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	char line[1024];
	unsigned load = 0, decode = 0, by_symbol = 0, cut = 0;
	char want_cut[80];
	snprintf(want_cut, sizeof(want_cut), "\"name\":\"%.62s\"", long_name);
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "{\"ph\":\"B\"", 9) != 0)
			continue;
		load += strstr(line, "\"name\":\"load a \\\"batch\\\"\"") != NULL;
		decode += strstr(line, "\"name\":\"decode\"") != NULL;
		by_symbol += strstr(line, "\"name\":\"named_") != NULL;
		cut += strstr(line, want_cut) != NULL;
	}
	fclose(f);
	cr_assert_eq(load, 5, "each run under its name (escaped): %u", load);
	cr_assert_eq(decode, 5, "%u", decode);
	cr_assert_eq(by_symbol, 0, "not under the symbol");
	cr_assert_eq(cut, 1, "a name cut at 63 bytes loses its partial character: %u", cut);
	unlink(path);
}

void late_named_task(void *arg)
{
	(void)arg;
}

/* A function that already ran while traced has its name (its symbol): a later tdm_task_name is
 * -EALREADY, and its runs, those before the call and those after, keep the symbol. */
Test(trace, a_name_after_a_traced_run_is_too_late)
{
	tdm_executor *ex = tdm_test_create(1);
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, late_named_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(tdm_task_name(late_named_task, "late"), -EALREADY);
	cr_assert_eq(tdm_group_spawn(&g, late_named_task, NULL), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(tdm_trace_stop(ex), 0);
	tdm_test_destroy(ex);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	char line[1024];
	unsigned late = 0, by_symbol = 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "{\"ph\":\"B\"", 9) != 0)
			continue;
		late += strstr(line, "\"name\":\"late\"") != NULL;
		by_symbol += strstr(line, "\"name\":\"late_named_task\"") != NULL;
	}
	fclose(f);
	cr_assert_eq(late, 0, "the earlier runs were not renamed");
	cr_assert_eq(by_symbol, 2, "both runs under the symbol: %u", by_symbol);
	unlink(path);
}

/* TANDEM_STAMPS=0, read when a layer is made: its launches are not stamped, so a trace has
 * its CPU side only (for measuring the stamps' own share of a traced run's cost). */
Test(trace, stamps_off_by_environment)
{
	setenv("TANDEM_STAMPS", "0", 1);
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	unsetenv("TANDEM_STAMPS");
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(e.ex, path), 0);
	struct spinner sp = {.gpu = e.gpu};
	cr_assert_eq(run_one(&e, spin_task, &sp), 0);
	cr_assert_eq(tdm_trace_stop(e.ex), 0);
	struct trace r = read_trace(path);
	cr_assert_eq(r.gpu_spans, 0, "no spans with the stamps off");
	cr_assert_eq(r.await_s, SPINS, "the CPU side is all there");
	env_close(&e);
	unlink(path);
}

/* ---- what a trace times ---- */

#define BURSTS 50
#define BURST 100

struct burster {
	tdm_gpu *gpu;
	tdm_stream *s;
	bool until_untimed; /* go on past BURSTS until the trace's pace left a launch untimed */
	unsigned bursts;
};

/* Launches bursts of BURST empty kernels on an exclusive stream, awaiting each burst: BURSTS of
 * them, or, until_untimed, as many more as it takes the trace's pace (its thread, each period)
 * to see their rate and leave a launch untimed, however slowly the machine runs them. */
int burst_task(tdm_task *t, void *arg)
{
	struct burster *b = arg;
	TDM_BEGIN(t);
	cr_assert_eq(tdm_stream_lease(b->gpu, 0, TDM_STREAM_EXCLUSIVE, &b->s), 0);
	for (b->bursts = 0; b->bursts < BURSTS ||
	                    (b->until_untimed && tdm__stamps_untimed(tdm__gpu_find(b->gpu)) == 0);
	     b->bursts++) {
		for (int k = 0; k < BURST; k++)
			cr_assert_eq(tdm_launch_spin(b->s, 0), 0);
		TDM_AWAIT(t, tdm_await_stream(t, b->s));
		cr_assert_eq(tdm_task_result(t), 0);
	}
	cr_assert_eq(tdm_stream_release(b->s), 0);
	TDM_END(t);
}

/* A trace of a layer made with TANDEM_STAMPS=mode (NULL: unset) and TANDEM_STAMPS_RATE=1000,
 * metrics on or not, over the launches of burst_task (*launches: how many). */
static struct trace burst_trace(const char *mode, bool metrics, bool until_untimed,
                                unsigned long *launches)
{
	if (mode != NULL)
		setenv("TANDEM_STAMPS", mode, 1);
	setenv("TANDEM_STAMPS_RATE", "1000", 1);
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	unsetenv("TANDEM_STAMPS");
	unsetenv("TANDEM_STAMPS_RATE");
	char path[64];
	temp_path(path, sizeof(path));
	if (metrics)
		cr_assert_eq(tdm_gpu_metrics_start(e.gpu), 0);
	cr_assert_eq(tdm_trace_start(e.ex, path), 0);
	struct burster b = {.gpu = e.gpu, .until_untimed = until_untimed};
	cr_assert_eq(run_one(&e, burst_task, &b), 0);
	cr_assert_eq(tdm_trace_stop(e.ex), 0);
	if (metrics)
		cr_assert_eq(tdm_gpu_metrics_stop(e.gpu), 0);
	struct trace r = read_trace(path);
	env_close(&e);
	unlink(path);
	*launches = (unsigned long)b.bursts * BURST;
	return r;
}

/* Launches faster than TANDEM_STAMPS_RATE a second: a trace times only some, and counts the
 * others (each launch is a span or counted, none is missing). */
Test(trace, launches_past_the_rate_go_untimed_and_counted)
{
	unsigned long n;
	struct trace r = burst_trace(NULL, false, true, &n);
	cr_assert_gt(r.untimed, 0, "the launch rate passed 1000 a second");
	cr_assert_gt(r.gpu_spans, 0, "some were timed");
	cr_assert_eq(r.gpu_spans + r.untimed + r.lost, n, "%lu + %lu + %lu of %lu", r.gpu_spans,
	             r.untimed, r.lost, n);
	cr_assert(r.flows_paired, "every flow has both ends, untimed launches none");
}

/* TANDEM_STAMPS=all, or metrics on: every launch is timed. */
Test(trace, all_or_metrics_time_every_launch)
{
	unsigned long n;
	struct trace r = burst_trace("all", false, false, &n);
	cr_assert_eq(r.untimed, 0);
	cr_assert_eq(r.gpu_spans + r.lost, n, "%lu + %lu of %lu", r.gpu_spans, r.lost, n);
	r = burst_trace(NULL, true, false, &n);
	cr_assert_eq(r.untimed, 0, "metrics time every launch");
	cr_assert_eq(r.gpu_spans + r.lost, n, "%lu + %lu of %lu", r.gpu_spans, r.lost, n);
}

/* ---- the ready tasks counter ---- */

#define FANOUT 20000

static void busy_child(void *arg)
{
	(void)arg;
	uint64_t end = tdm_now_ns() + 2000;
	while (tdm_now_ns() < end)
		;
}

static void fan_out(void *arg)
{
	tdm_group *g = arg;
	for (int i = 0; i < FANOUT; i++)
		cr_assert_eq(tdm_group_spawn(g, busy_child, NULL), 0);
}

/* A worker that queues many tasks at once: the trace's "ready tasks" counter of the executor
 * is sampled while they wait, and shows them. */
Test(trace, ready_tasks_counter)
{
	tdm_executor *ex = tdm_test_create(2);
	char path[64];
	temp_path(path, sizeof(path));
	cr_assert_eq(tdm_trace_start(ex, path), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, fan_out, &g), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(tdm_trace_stop(ex), 0);
	tdm_test_destroy(ex);
	struct trace r = read_trace(path);
	cr_assert_gt(r.ready_samples, 0, "the counter was sampled");
	cr_assert_gt(r.ready_max, 0, "and saw the queued tasks");
	unlink(path);
}
