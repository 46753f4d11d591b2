// SPDX-License-Identifier: MIT
/*
 * The executor's public life cycle: configuration, creation, submission, statistics, and
 * destruction (drain or cancel, then join and free everything).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/cpulist.h"
#include "base/observe.h"
#include "base/say.h"
#include "internal.h"

uint64_t tdm_now_ns(void)
{
	return tdm__now_ns();
}

void tdm_config_init(tdm_config *cfg)
{
	if (cfg == NULL)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->shutdown = TDM_SHUTDOWN_DRAIN;
}

/* The i-th CPU (round robin) of the affinity mask. */
static int nth_cpu(const cpu_set_t *set, unsigned i, unsigned ncpus)
{
	unsigned want = i % ncpus, seen = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set) && seen++ == want)
			return c;
	return -1;
}

static void *worker_start(void *arg)
{
	struct tdm__worker *w = arg;
	char name[32];
	snprintf(name, sizeof(name), "%s%u", w->ex->name_prefix, w->index);
	name[15] = '\0'; /* the kernel's limit for thread names */
	pthread_setname_np(pthread_self(), name);
	/* The profiler's and the trace's name is not cut to 15 characters. Named whether or not
	 * anything observes now: a trace may start later. */
	char full[48];
	if (w->ex->id == 1)
		snprintf(full, sizeof(full), "tandem worker %u", w->index);
	else
		snprintf(full, sizeof(full), "tandem worker %u (executor %u)", w->index,
		         (unsigned)w->ex->id);
	tdm__observe_thread(full);
	return tdm__worker_main(w);
}

static void stop_workers(struct tdm_executor *ex, unsigned started)
{
	pthread_mutex_lock(&ex->idle_lock);
	/* Release: pairs with the acquire load of terminate in tdm__park, once the unpark below
	 * ends each worker's sleep. */
	atomic_store_explicit(&ex->terminate, 1, memory_order_release);
	pthread_mutex_unlock(&ex->idle_lock);
	for (unsigned i = 0; i < started; i++)
		tdm__unpark(&ex->workers[i]);
	for (unsigned i = 0; i < started; i++)
		pthread_join(ex->workers[i].thread, NULL);
}

static void free_executor(struct tdm_executor *ex, unsigned ndeques)
{
	for (unsigned i = 0; i < ndeques; i++)
		tdm__deque_fini(&ex->workers[i].deque);
	tdm__task_pool_fini(ex);
	pthread_mutex_destroy(&ex->pool_lock);
	pthread_mutex_destroy(&ex->idle_lock);
	tdm__trace_track_close(ex->ready_track); /* a trace recording keeps its samples */
	pthread_mutex_destroy(&ex->ready_lock);
	free(ex->sleepers);
	free(ex->workers);
	free(ex);
}

int tdm_executor_create(tdm_executor **out, const tdm_config *cfg_in)
{
	tdm_config cfg;
	tdm__detail_begin("tdm_executor_create");
	if (out == NULL)
		return -EINVAL;
	tdm__observe_init(); /* before any worker starts: they name themselves */
	if (cfg_in != NULL)
		cfg = *cfg_in;
	else
		tdm_config_init(&cfg);
	if (cfg.workers > TDM_MAX_WORKERS)
		return tdm__refuse(-EINVAL, "tdm_config.workers=%u: above TDM_MAX_WORKERS (%d)",
		                   cfg.workers, TDM_MAX_WORKERS);
	if (cfg.shutdown != TDM_SHUTDOWN_DRAIN && cfg.shutdown != TDM_SHUTDOWN_CANCEL)
		return tdm__refuse(-EINVAL,
		                   "tdm_config.shutdown=%d: not TDM_SHUTDOWN_DRAIN (0) or "
		                   "TDM_SHUTDOWN_CANCEL (1)",
		                   (int)cfg.shutdown);
	cpu_set_t cpus;
	unsigned ncpus = tdm__cpus_allowed(&cpus);
	if (cfg.cpus != NULL) {
		cpu_set_t want, both;
		if (tdm__cpulist_parse(cfg.cpus, &want) != 0)
			return tdm__refuse(-EINVAL,
			                   "tdm_config.cpus=\"%.200s\": not a CPU list such as "
			                   "\"0-3,8\", or empty",
			                   cfg.cpus);
		CPU_AND(&both, &want, &cpus);
		if (!CPU_EQUAL(&both, &want)) {
			char allowed[128];
			if (tdm__cpulist_format(&cpus, allowed, sizeof(allowed)) < 0)
				snprintf(allowed, sizeof(allowed), "?");
			return tdm__refuse(-EINVAL,
			                   "tdm_config.cpus=\"%.200s\": CPUs this process may not "
			                   "run on (it may on %s)",
			                   cfg.cpus, allowed);
		}
		cpus = want;
		ncpus = (unsigned)CPU_COUNT(&cpus);
	}
	unsigned n = cfg.workers != 0 ? cfg.workers : ncpus;
	if (n > TDM_MAX_WORKERS)
		n = TDM_MAX_WORKERS;
	if (cfg.max_searching > n)
		return tdm__refuse(-EINVAL, "tdm_config.max_searching=%u: above the workers (%u)",
		                   cfg.max_searching, n);

	struct tdm_executor *ex = aligned_alloc(TDM__CACHELINE, sizeof(*ex));
	if (ex == NULL)
		return -ENOMEM;
	memset(ex, 0, sizeof(*ex));
	ex->cfg = cfg;
	ex->nworkers = n;
	/* Relaxed: a serial number, handed to the caller with ex; no data goes with it. Unique
	 * among the last 2^32 - 1 executors created. */
	static _Atomic uint32_t last_id;
	do
		ex->id = atomic_fetch_add_explicit(&last_id, 1, memory_order_relaxed) + 1;
	while (ex->id == 0);
	ex->max_searching = cfg.max_searching != 0 ? cfg.max_searching : (n + 1) / 2;
	snprintf(ex->name_prefix, sizeof(ex->name_prefix), "%s",
	         cfg.thread_name_prefix != NULL ? cfg.thread_name_prefix : "tdm-w");
	ex->cfg.thread_name_prefix = NULL; /* the caller's strings need not outlive the call */
	ex->cfg.cpus = NULL;
	pthread_mutex_init(&ex->idle_lock, NULL);
	pthread_mutex_init(&ex->pool_lock, NULL);
	pthread_mutex_init(&ex->ready_lock, NULL);
	atomic_init(&ex->ready_next, 0);
	atomic_init(&ex->idle_state, n * TDM__IDLE_UNPARKED);
	ex->sleepers = calloc(n, sizeof(*ex->sleepers));
	ex->workers = aligned_alloc(TDM__CACHELINE, n * sizeof(struct tdm__worker));
	if (ex->sleepers == NULL || ex->workers == NULL) {
		free_executor(ex, 0);
		return -ENOMEM;
	}
	memset(ex->workers, 0, n * sizeof(struct tdm__worker));
	uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)ex;
	for (unsigned i = 0; i < n; i++) {
		struct tdm__worker *w = &ex->workers[i];
		if (tdm__deque_init(&w->deque, 8) != 0) {
			free_executor(ex, i);
			return -ENOMEM;
		}
		w->ex = ex;
		w->index = i;
		w->rng = (seed + 0x9E3779B97F4A7C15ULL * (i + 1)) | 1;
		ck_ec32_init(&w->ec, 0);
	}

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	/* Unpinned, the workers may still use only the CPUs of the list they were given. */
	if (cfg.cpus != NULL && !cfg.pin_workers)
		pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus);
	for (unsigned i = 0; i < n; i++) {
		struct tdm__worker *w = &ex->workers[i];
		int cpu = cfg.pin_workers ? nth_cpu(&cpus, i, ncpus) : -1;
		if (cpu >= 0) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
		}
		if (pthread_create(&w->thread, &attr, worker_start, w) != 0) {
			pthread_attr_destroy(&attr);
			stop_workers(ex, i);
			free_executor(ex, n);
			return -EAGAIN;
		}
	}
	pthread_attr_destroy(&attr);
	tdm__trace_executor_created(ex); /* TANDEM_TRACE=path */
	*out = ex;
	return 0;
}

int tdm_executor_destroy(tdm_executor *ex)
{
	if (ex == NULL)
		return -EINVAL;
	if (tdm__self_of(ex) != NULL)
		return -EDEADLK;
	/* Tasks awaiting notifications that nothing may fire now (a cancelled task would have):
	 * taken off them before any on_cancel runs (it may free such a notification), cancelled
	 * below, as a woken task is, rather than waited for. */
	struct tdm__task *notify_waiters = NULL;
	if (ex->cfg.shutdown == TDM_SHUTDOWN_CANCEL) {
		notify_waiters = tdm__notify_close(ex);
		/* Release: the close's writes into the notifications happen before any on_cancel
		 * (pairs with the acquire load in tdm__run_task), which may free one. */
		atomic_store_explicit(&ex->cancelling, 1, memory_order_release);
	}
	/* Release: cancelling is set before any worker can see shutdown (the acquire loads in
	 * terminate_locked, tdm__try_terminate and tdm__submit_to). Seq_cst is more than that
	 * pairing needs: the termination decision itself is made under idle_lock. */
	atomic_store_explicit(&ex->shutdown, 1, memory_order_seq_cst);
	/* Outside submissions and holds that missed the store: their tasks are pushed (to run, or
	 * to be reported cancelled), their holds counted, before termination may be decided. */
	tdm__gate_drain(&ex->outside);
	pthread_mutex_lock(&ex->idle_lock);
	ex->submit_closed = true;
	pthread_mutex_unlock(&ex->idle_lock);
	/* After cancelling is set (the wake's push releases it to the worker that pops the task):
	 * each is reported to on_cancel, not resumed. */
	tdm__notify_cancel(notify_waiters);
	/* Workers that are all asleep already will not park again: decide for them. */
	tdm__try_terminate(ex);
	for (unsigned i = 0; i < ex->nworkers; i++)
		pthread_join(ex->workers[i].thread, NULL);
	/* The last waker (tdm__suspended_done) or hold releaser (tdm__release) may still be
	 * inside its unlock of idle_lock: taking the lock once orders its last access before the
	 * free. */
	pthread_mutex_lock(&ex->idle_lock);
	pthread_mutex_unlock(&ex->idle_lock);
	/* Outside calls that entered the gate after the first drain are refusals (-ESHUTDOWN) that
	 * still touch the gate and the shutdown flag: wait for their leave (release, paired with
	 * the drain's loads) so that their accesses happen before the free. */
	tdm__gate_drain(&ex->outside);
	/* A trace ex owns (TANDEM_TRACE, or one not stopped) is written now: every run is over. */
	tdm__trace_executor_destroyed(ex);
	/* Termination requires empty queues, nothing suspended and no hold: nothing is left to
	 * run, and nobody uses the executor. */
	free_executor(ex, ex->nworkers);
	return 0;
}

int tdm_executor_workers(const tdm_executor *ex)
{
	return ex != NULL ? (int)ex->nworkers : -EINVAL;
}

int tdm_worker_index(const tdm_executor *ex)
{
	struct tdm__worker *w = tdm__self_of(ex);
	return w != NULL ? (int)w->index : -1;
}

static int submit(struct tdm_executor *ex, struct tdm__worker *w, tdm_fn fn, tdm_resume_fn resume,
                  void *arg, struct tdm__group *g);

int tdm__submit_to(struct tdm_executor *ex, tdm_fn fn, tdm_resume_fn resume, void *arg,
                   struct tdm__group *g)
{
	struct tdm__worker *w = tdm__self_of(ex);
	/* A worker runs a task of ex, which destroy's termination waits for. */
	if (w != NULL)
		return submit(ex, w, fn, resume, arg, g);
	/* From outside, through the gate: destroy waits for the push (and its wake-up) instead
	 * of terminating, or freeing ex, under it. */
	_Atomic unsigned *n = tdm__gate_enter(&ex->outside, &ex->shutdown);
	if (n == NULL)
		return -ESHUTDOWN;
	int rc = submit(ex, NULL, fn, resume, arg, g);
	tdm__gate_leave(n); /* the last access to ex */
	return rc;
}

static int submit(struct tdm_executor *ex, struct tdm__worker *w, tdm_fn fn, tdm_resume_fn resume,
                  void *arg, struct tdm__group *g)
{
	struct tdm__task *t = tdm__task_alloc(ex, w);
	if (t == NULL)
		return -ENOMEM;
	if (resume != NULL) {
		t->resume = resume;
		t->flags = TDM__TASK_RESUMABLE;
	} else {
		t->fn = fn;
	}
	t->arg = arg;
	t->group = g;
	t->home = w != NULL ? (uint16_t)w->index : 0;
	int rc = tdm__enqueue(ex, t);
	if (rc != 0)
		tdm__task_free(ex, w, t);
	return rc;
}

int tdm_submit(tdm_executor *ex, tdm_fn fn, void *arg)
{
	if (ex == NULL || fn == NULL)
		return -EINVAL;
	return tdm__submit_to(ex, fn, NULL, arg, NULL);
}

int tdm_executor_stats(const tdm_executor *ex, unsigned worker, tdm_worker_stats *out)
{
	if (ex == NULL || out == NULL || worker >= ex->nworkers)
		return -EINVAL;
	const struct tdm__worker_counters *c = &ex->workers[worker].stats;
#define TDM__READ(f) out->f = atomic_load_explicit(&c->f, memory_order_relaxed)
	TDM__READ(tasks_run);
	TDM__READ(tasks_cancelled);
	TDM__READ(steals_tried);
	TDM__READ(steals_won);
	TDM__READ(injected);
	TDM__READ(inbox);
	TDM__READ(parks);
	TDM__READ(wakeups);
	TDM__READ(parks_last);
#undef TDM__READ
	return 0;
}

const char *tdm_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument";
	case -ENOMEM:
		return "out of memory";
	case -EAGAIN:
		return "try again: no thread could be started, or a queue is full";
	case -EMSGSIZE:
		return "arguments too large";
	case -ESHUTDOWN:
		return "shutting down";
	case -ECANCELED:
		return "task cancelled by shutdown";
	case -EDEADLK:
		return "call would wait for the calling worker itself";
	case -ENODEV:
		return "no such device";
	case -EIO:
		return "I/O or device error";
	case -ETIMEDOUT:
		return "deadline passed";
	case -EBUSY:
		return "resource busy";
	case -EEXIST:
		return "already exists";
	case -EALREADY:
		return "too late: already started";
	case -ENOTSUP:
		return "not supported";
	case -EFAULT:
		return "memory of a kind this call refuses";
	case -ENOSPC:
		return "no room left in a fixed table";
	default:
		/* What else a call hands on from the C library (fopen's -ENOENT, -EACCES). */
		if (err < 0 && err > -4096 && strerrordesc_np(-err) != NULL)
			return strerrordesc_np(-err);
		return "unknown error";
	}
}
