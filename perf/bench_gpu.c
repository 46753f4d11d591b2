// SPDX-License-Identifier: MIT
/*
 * perf/bench_gpu.c: the GPU benchmarks of tandem-bench, gpu-latency and gpu-throughput: tandem's
 * GPU layer on the cuda or sim backend and, in CUDA builds on cuda, the plain-CUDA baselines of
 * raw_cuda.cu beside it in the same run. perf/README.md says what each measures and why it is
 * shaped this way. The options come from bench.c (struct bench_gpu_opts).
 */
#include "bench.h"
#include "raw_cuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_sim.h" /* the kernels of tests and benchmarks (tandem_testing) */

/* The raw CUDA baselines exist only in CUDA builds, and run only on --backend cuda. */
#if defined(TANDEM_HAVE_CUDA) && TANDEM_HAVE_CUDA
#define HAVE_RAW 1
#else
#define HAVE_RAW 0
#endif

/* Untimed round trips before the timed ones (gpu-latency, both sides). */
#define GPU_WARMUP 1000
/* Background awaits per background stream at most: CUDA blocks the enqueuing call once a stream
 * holds about a thousand pending operations, and each await enqueues one. */
#define BG_PER_STREAM 500
#define BG_MIN_STREAMS 4
/* Longest background kernel launched at once (tdm_launch_spin takes a uint32_t of ns). */
#define BG_CHUNK_NS 2000000000ull

/* ---- common ---------------------------------------------------------------------------------- */

_Noreturn static void die(const char *what, int err)
{
	fprintf(stderr, "tandem-bench: %s: %s\n", what, tdm_strerror(err));
	exit(1);
}

static void gmust(int err, const char *what)
{
	if (err != 0)
		die(what, err);
}

static void sleep_us(unsigned us)
{
	struct timespec ts = {0, (long)us * 1000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

struct env {
	tdm_executor *ex;
	tdm_gpu *gpu;
};

/* An executor of `workers` and a GPU layer on the chosen backend; no device exits with 3. */
static void env_open(struct env *e, const struct bench_gpu_opts *o, unsigned workers,
                     unsigned streams_per_device)
{
	tdm_config c;
	tdm_gpu_config g;
	int rc;

	tdm_config_init(&c);
	c.workers = workers;
	gmust(tdm_executor_create(&e->ex, &c), "tdm_executor_create");
	tdm_gpu_config_init(&g);
	g.streams_per_device = streams_per_device;
	g.launch_limit = o->launch_limit;
	rc = bench_gpu_create(e->ex, &g, o->sim, NULL, &e->gpu);
	if (rc == -ENODEV)
		exit(3);
	gmust(rc, "tdm_gpu_create");
}

static void env_close(struct env *e)
{
	gmust(tdm_gpu_destroy(e->gpu), "tdm_gpu_destroy");
	gmust(tdm_executor_destroy(e->ex), "tdm_executor_destroy");
}

/*
 * The watchdog turns a configuration that stopped making progress into an error instead of a
 * hang: a thread that once a second sums the workers' tasks_run (tdm_executor_stats, read without
 * stopping them; a resumed task counts again) and ends the process with status 4 once the sum has
 * not moved for stall_ns. The measured threads pay nothing but that one wake-up a second.
 */
struct watchdog {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* on CLOCK_MONOTONIC */
	int stop;            /* lock */
	tdm_executor *ex;
	_Atomic uint64_t stall_ns;
	char what[160];
};

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;
	int workers = tdm_executor_workers(w->ex);
	uint64_t last = UINT64_MAX, since = tdm_now_ns();

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		struct timespec dl;
		uint64_t sum = 0, now;

		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += 1;
		pthread_cond_timedwait(&w->cond, &w->lock, &dl);
		if (w->stop)
			break;
		for (int i = 0; i < workers; i++) {
			tdm_worker_stats st;

			if (tdm_executor_stats(w->ex, (unsigned)i, &st) == 0)
				sum += st.tasks_run;
		}
		now = tdm_now_ns();
		if (sum != last) {
			last = sum;
			since = now;
		} else if (now - since > atomic_load(&w->stall_ns)) {
			fflush(stdout);
			fprintf(stderr,
			        "tandem-bench: %s: no task has run for %.0f s: awaits that never "
			        "complete; giving up (exit status 4)\n",
			        w->what, (double)(now - since) / 1e9);
			_exit(4);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

__attribute__((format(printf, 4, 5))) static void
watchdog_start(struct watchdog *w, tdm_executor *ex, uint64_t stall_ns, const char *fmt, ...)
{
	pthread_condattr_t ca;
	va_list ap;

	w->stop = 0;
	w->ex = ex;
	atomic_init(&w->stall_ns, stall_ns);
	va_start(ap, fmt);
	vsnprintf(w->what, sizeof(w->what), fmt, ap);
	va_end(ap);
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&w->thread, NULL, watchdog_main, w) != 0)
		die("watchdog", -EAGAIN);
}

/* Before the executor goes: the watchdog reads its statistics. */
static void watchdog_stop(struct watchdog *w)
{
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

/* No progress for this long, plus what the configuration may legitimately spend waiting. */
#define STALL_NS 10000000000ull

/* What the report's header names: backend, completion mechanism and device. */
struct gpu_info {
	const char *backend, *completion;
	char device[96];
	/* What tandem decided for device 0 with the default configuration (tdm_gpu_device_info). */
	unsigned streams, launch_limit;
	/* CUDA_DEVICE_MAX_CONNECTIONS once tandem's GPU layer is open (NULL: unset, CUDA's 8). */
	const char *connections;
};

/* The GPU layer of `workers` on o's backend, as a run of that many workers will have it. */
static void gpu_probe(const struct bench_gpu_opts *o, unsigned workers, struct gpu_info *info)
{
	struct env e;
	tdm_device_info di;

	env_open(&e, o, workers, 0);
	info->backend = o->sim ? "sim" : "cuda";
	switch (tdm_gpu_completion(e.gpu, 0)) {
	case TDM_COMPLETION_WORD:
		info->completion = "word";
		break;
	case TDM_COMPLETION_ADAPTIVE:
		info->completion = "adaptive";
		break;
	default:
		info->completion = "event";
		break;
	}
	snprintf(info->device, sizeof(info->device), "%s", o->sim ? "tandem simulator" : "?");
	info->streams = info->launch_limit = 0;
	if (tdm_gpu_device_info(e.gpu, 0, &di) == 0) {
		if (di.name[0] != '\0')
			snprintf(info->device, sizeof(info->device), "%s", di.name);
		info->streams = di.streams;
		info->launch_limit = di.launch_limit;
	}
#if HAVE_RAW
	if (!o->sim && strcmp(info->device, "?") == 0 &&
	    raw_cuda_device_name(info->device, sizeof(info->device)) != 0)
		snprintf(info->device, sizeof(info->device), "?");
#endif
	env_close(&e);
}

/* s as a JSON string body; device names are plain, but a quote must not break the line. */
static void json_str(const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
}

/* ---- gpu-latency ----------------------------------------------------------------------------- */

/*
 * The probabilities at which gpu-latency reports its distribution (cdf_p, cdf_us in the JSON):
 * every percent, then the tail, so that tandem-plot draws the CDF as a curve.
 */
#define LAT_NQ 104
static double lat_q_p(int i)
{
	static const double tail[] = {0.995, 0.999, 0.9999, 1.0};

	return i < 100 ? i / 100.0 : tail[i - 100];
}

struct lat_stats {
	double p50, p99, min, mean, max; /* microseconds */
	double q[LAT_NQ];                /* at lat_q_p(i), microseconds */
};

/* Nearest rank: the smallest sample with at least p of all samples at or below it. */
static double rank_us(const uint64_t *sorted, uint64_t n, double p)
{
	uint64_t k = (uint64_t)(p * (double)n + 0.999999);

	return (double)sorted[k > 0 ? k - 1 : 0] / 1e3;
}

static struct lat_stats lat_stats(uint64_t *ns, uint64_t n)
{
	struct lat_stats s;
	double sum = 0;

	qsort(ns, (size_t)n, sizeof(*ns), bench_cmp_u64);
	for (uint64_t i = 0; i < n; i++)
		sum += (double)ns[i];
	s.p50 = rank_us(ns, n, 0.50);
	s.p99 = rank_us(ns, n, 0.99);
	s.min = (double)ns[0] / 1e3;
	s.max = (double)ns[n - 1] / 1e3;
	for (int i = 0; i < LAT_NQ; i++)
		s.q[i] = rank_us(ns, n, lat_q_p(i));
	s.mean = sum / (double)n / 1e3;
	return s;
}

/* The background: `outstanding` tasks, each suspended on a stream that runs a long kernel. */
struct bg_state {
	atomic_uint_fast64_t suspended, done, failed;
};

struct bg_task {
	struct bg_state *bg;
	tdm_stream *s;
};

static int bg_await(tdm_task *t, struct bg_task *b)
{
	int rc = tdm_await_stream(t, b->s);

	/* TDM_SUSPENDED: the poller holds the await, which is now outstanding. Only the shared
	 * counter is touched after that: the task itself may already be resuming elsewhere. */
	if (rc == TDM_SUSPENDED)
		atomic_fetch_add(&b->bg->suspended, 1);
	return rc;
}

static int bg_task_fn(tdm_task *t, void *arg)
{
	struct bg_task *b = arg;

	TDM_BEGIN(t);
	TDM_AWAIT(t, bg_await(t, b));
	if (tdm_task_result(t) != 0)
		atomic_fetch_add(&b->bg->failed, 1);
	atomic_fetch_add(&b->bg->done, 1);
	TDM_END(t);
}

/* The measured task; everything that lives across an await is here. */
struct lat_task {
	tdm_stream *s;
	struct bg_state *bg; /* NULL: no background */
	uint64_t warmup, n, i, t0, probe_ns, bg_done;
	uint64_t *ns;
	tdm_notify go;
	/* 0: first warm-up running; 1: probe_ns is set, awaiting go; 2: finished or failed. */
	_Atomic int phase;
	int err;
	const char *what;
};

static int lat_fail(struct lat_task *m, int err, const char *what)
{
	m->err = err;
	m->what = what;
	/* Release: err and what are set before the main thread's acquire load sees 2. */
	atomic_store_explicit(&m->phase, 2, memory_order_release);
	return err;
}

/*
 * GPU_WARMUP round trips with no background (their time sizes the background kernels), a pause
 * until the background is in place, GPU_WARMUP more, then n timed ones, each from just before the
 * launch to just after the resume.
 */
static int lat_task_fn(tdm_task *t, void *arg)
{
	struct lat_task *m = arg;
	uint64_t t1;
	int rc;

	TDM_BEGIN(t);
	m->t0 = tdm_now_ns();
	for (m->i = 0; m->i < m->warmup; m->i++) {
		rc = tdm_launch_spin(m->s, 0);
		if (rc != 0)
			return lat_fail(m, rc, "tdm_launch_spin");
		TDM_AWAIT(t, tdm_await_stream(t, m->s));
		if (tdm_task_result(t) != 0)
			return lat_fail(m, tdm_task_result(t), "tdm_await_stream");
	}
	m->probe_ns = tdm_now_ns() - m->t0;
	/* Release: publishes probe_ns to the main thread's acquire load of phase. */
	atomic_store_explicit(&m->phase, 1, memory_order_release);
	TDM_AWAIT(t, tdm_await_notify(t, &m->go));
	for (m->i = 0; m->i < m->warmup + m->n; m->i++) {
		m->t0 = tdm_now_ns();
		rc = tdm_launch_spin(m->s, 0);
		if (rc != 0)
			return lat_fail(m, rc, "tdm_launch_spin");
		TDM_AWAIT(t, tdm_await_stream(t, m->s));
		t1 = tdm_now_ns();
		if (tdm_task_result(t) != 0)
			return lat_fail(m, tdm_task_result(t), "tdm_await_stream");
		if (m->i >= m->warmup)
			m->ns[m->i - m->warmup] = t1 - m->t0;
	}
	/* Background awaits that completed before the last sample: then the row did not have all
	 * of them outstanding to the end. */
	m->bg_done = m->bg != NULL ? atomic_load(&m->bg->done) : 0;
	atomic_store_explicit(&m->phase, 2, memory_order_release);
	TDM_END(t);
}

struct lat_result {
	struct lat_stats st;
	unsigned stream_set; /* tandem's streams per set on device 0 in this configuration */
	uint64_t bg_early;
	unsigned bg_streams; /* distinct background streams */
	double bg_setup_ms, bg_kernel_ms;
	uint64_t bg_words, bg_events; /* the background awaits' mechanisms (tdm_gpu_stats) */
};

/* Whether v[j] already appears among v[0..j-1]. */
static int seen_before(tdm_stream *const *v, unsigned j)
{
	for (unsigned k = 0; k < j; k++)
		if (v[k] == v[j])
			return 1;
	return 0;
}

/*
 * How many background streams: at most BG_PER_STREAM awaits on each, at least BG_MIN_STREAMS, and
 * fewer than the hardware queues (`connections`) so that the measured stream keeps a queue of its
 * own: a stream that shares one with a background stream waits behind its long kernel.
 */
static unsigned bg_stream_count(uint64_t outstanding, unsigned connections)
{
	uint64_t k = (outstanding + BG_PER_STREAM - 1) / BG_PER_STREAM;

	if (outstanding == 0)
		return 0;
	if (k < BG_MIN_STREAMS)
		k = BG_MIN_STREAMS;
	if (connections >= 2 && k > connections - 1)
		k = connections - 1;
	return k > 0 ? (unsigned)k : 1;
}

/* The streams per set tandem chose on device 0: one per worker where there are more workers than
 * work queues (gpu/topology/decide.c), so it depends on the configuration. */
static unsigned stream_set_of(tdm_gpu *gpu)
{
	tdm_device_info di;
	return tdm_gpu_device_info(gpu, 0, &di) == 0 ? di.streams : 0;
}

static void tandem_latency(const struct bench_gpu_opts *o, unsigned workers, uint64_t outstanding,
                           unsigned nbg, unsigned nstreams, uint64_t *ns, struct lat_result *res)
{
	struct env e;
	struct lat_task m;
	struct bg_state bg;
	struct bg_task *bgt = NULL;
	tdm_stream **bgs = NULL;
	tdm_group g, bgg;
	struct watchdog wd;
	uint64_t t_bg = 0;
	int phase;

	memset(res, 0, sizeof(*res));
	memset(&m, 0, sizeof(m));
	atomic_init(&bg.suspended, 0);
	atomic_init(&bg.done, 0);
	atomic_init(&bg.failed, 0);
	atomic_init(&m.phase, 0);
	m.warmup = GPU_WARMUP;
	m.n = o->n;
	m.ns = ns;
	m.bg = outstanding > 0 ? &bg : NULL;
	if (outstanding > 0) {
		bgt = calloc((size_t)outstanding, sizeof(*bgt));
		bgs = calloc(nbg, sizeof(*bgs));
		if (bgt == NULL || bgs == NULL)
			die("gpu-latency", -ENOMEM);
	}

	env_open(&e, o, workers, nstreams);
	res->stream_set = stream_set_of(e.gpu);
	watchdog_start(&wd, e.ex, STALL_NS, "gpu-latency workers=%u outstanding=%llu", workers,
	               (unsigned long long)outstanding);
	/* The measured stream first and exclusive: no other work is ever enqueued on it. The
	 * background streams are shared leases of the others; an exclusive lease is skipped. */
	gmust(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &m.s),
	      "tdm_stream_lease (measured)");
	for (unsigned j = 0; j < nbg; j++) {
		gmust(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &bgs[j]),
		      "tdm_stream_lease (background)");
		res->bg_streams += !seen_before(bgs, j);
	}
	if (res->bg_streams < nbg)
		fprintf(
		    stderr,
		    "tandem-bench: warning: gpu-latency outstanding=%llu: %u background leases "
		    "landed on %u streams (a smaller stream set than asked for): more awaits per "
		    "stream than intended\n",
		    (unsigned long long)outstanding, nbg, res->bg_streams);
	gmust(tdm_notify_init(&m.go, e.ex), "tdm_notify_init");
	gmust(tdm_group_init(&g, e.ex), "tdm_group_init");
	gmust(tdm_spawn(e.ex, lat_task_fn, &m, &g), "tdm_spawn");
	while ((phase = atomic_load_explicit(&m.phase, memory_order_acquire)) == 0)
		sleep_us(200);
	if (phase == 2) {
		tdm_group_wait(&g);
		die(m.what, m.err);
	}

	if (outstanding > 0) {
		/*
		 * The background kernels must outlast the measurement, whose length is known only
		 * roughly: 4x the idle round trip for every remaining one, plus time to start the
		 * background. Too short shows as bg_early > 0; too long only costs the wait at the
		 * end. One stream's work completes in order, so its kernels run back to back.
		 */
		double mean = (double)m.probe_ns / (double)m.warmup;
		uint64_t total = 500000000ull + outstanding * 20000ull +
		                 (uint64_t)(4.0 * mean * (double)(m.warmup + m.n));
		uint64_t chunks = (total + BG_CHUNK_NS - 1) / BG_CHUNK_NS;

		res->bg_kernel_ms = (double)total / 1e6;
		/* The end of the run waits for the background kernels. */
		atomic_store(&wd.stall_ns, STALL_NS + total);
		for (unsigned j = 0; j < nbg; j++)
			for (uint64_t k = 0; k < chunks && !seen_before(bgs, j); k++)
				gmust(tdm_launch_spin(bgs[j], (uint32_t)(total / chunks)),
				      "tdm_launch_spin (background)");
		t_bg = tdm_now_ns();
		gmust(tdm_group_init(&bgg, e.ex), "tdm_group_init");
		/*
		 * In batches of one await per background stream, each batch spawned once the one
		 * before is suspended: then no two awaits on one stream run at once, and each
		 * stream gets its completion-word writes in the order of their sequence numbers
		 * (gpu/await.c, tdm_await_stream). Awaits racing on a shared stream can enqueue
		 * their writes out of order, and that is a different test: this one wants them all
		 * outstanding.
		 */
		tdm_gpu_stats st0, st1;
		gmust(tdm_gpu_stats_get(e.gpu, &st0), "tdm_gpu_stats_get");
		for (uint64_t i = 0; i < outstanding; i++) {
			if (i > 0 && i % nbg == 0)
				while (atomic_load(&bg.suspended) + atomic_load(&bg.failed) < i)
					sleep_us(50);
			bgt[i] = (struct bg_task){&bg, bgs[i % nbg]};
			gmust(tdm_spawn(e.ex, bg_task_fn, &bgt[i], &bgg), "tdm_spawn (background)");
		}
		/* Measure only once every background await is with the poller: first every one
		 * suspended, then every one counted by the poller, since a worker may still watch
		 * its last await itself (tdm_gpu_stats.direct) and hand it over only after its
		 * spin. */
		while (atomic_load(&bg.suspended) + atomic_load(&bg.failed) < outstanding)
			sleep_us(200);
		if (atomic_load(&bg.failed) > 0)
			die("background await", -EIO);
		for (;;) {
			gmust(tdm_gpu_stats_get(e.gpu, &st1), "tdm_gpu_stats_get");
			res->bg_words = st1.awaits_word - st0.awaits_word;
			res->bg_events = st1.awaits_event - st0.awaits_event;
			if (res->bg_words + res->bg_events >= outstanding)
				break;
			sleep_us(50);
		}
		res->bg_setup_ms = (double)(tdm_now_ns() - t_bg) / 1e6;
	}

	gmust(tdm_notify_fire(&m.go), "tdm_notify_fire");
	gmust(tdm_group_wait(&g), "tdm_group_wait");
	if (m.err != 0)
		die(m.what, m.err);
	res->bg_early = m.bg_done;
	if (outstanding > 0) {
		/* They finish with their kernels; wait for them before tearing down. */
		gmust(tdm_group_wait(&bgg), "tdm_group_wait (background)");
		if (atomic_load(&bg.failed) > 0)
			die("background await", -EIO);
	}
	for (unsigned j = 0; j < nbg; j++)
		gmust(tdm_stream_release(bgs[j]), "tdm_stream_release");
	gmust(tdm_stream_release(m.s), "tdm_stream_release");
	watchdog_stop(&wd);
	env_close(&e);
	free(bgt);
	free(bgs);
	if (res->bg_early > 0)
		fprintf(stderr,
		        "tandem-bench: warning: gpu-latency workers=%u outstanding=%llu: %llu "
		        "background awaits completed before the last sample (background kernels "
		        "of %.0f ms were too short); that row had fewer awaits outstanding\n",
		        workers, (unsigned long long)outstanding, (unsigned long long)res->bg_early,
		        res->bg_kernel_ms);
	res->st = lat_stats(ns, o->n);
}

/* CUDA_DEVICE_MAX_CONNECTIONS as CUDA reads it (gpu/topology/facts.c): the hardware queues a
 * process gets; its leading number, at most 32, else 8. */
static unsigned cuda_connections(void)
{
	const char *env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	long v = env != NULL ? strtol(env, NULL, 10) : 0;

	return v < 1 ? 8 : v > 32 ? 32 : (unsigned)v;
}

struct lat_ctx {
	const struct bench_gpu_opts *o;
	const struct gpu_info *info;
	unsigned connections;
};

static void lat_header(const struct lat_ctx *c)
{
	printf("\ngpu-latency on %s (%s, completion %s): launch of an empty kernel to resume, us, "
	       "%llu round trips after %d warm-up\n",
	       c->info->backend, c->info->device, c->info->completion, (unsigned long long)c->o->n,
	       GPU_WARMUP);
	printf("%11s %4s  %-14s %7s %9s %9s %9s %11s %11s\n", "outstanding", "bg", "impl",
	       "workers", "p50", "p99", "min", "p50-floor", "p99-floor");
}

/* floor: the faster (p50) of the cuda-event and cuda-word rows of the same group, or NULL. */
static void lat_report(const struct lat_ctx *c, const char *impl, unsigned workers,
                       uint64_t outstanding, unsigned nbg, const struct lat_result *r,
                       const struct lat_stats *floor)
{
	const struct bench_gpu_opts *o = c->o;

	if (!o->json) {
		printf("%11llu %4u  %-14s %7u %9.3f %9.3f %9.3f", (unsigned long long)outstanding,
		       nbg, impl, workers, r->st.p50, r->st.p99, r->st.min);
		if (floor != NULL && strcmp(impl, "tandem") == 0)
			printf(" %+11.3f %+11.3f", r->st.p50 - floor->p50, r->st.p99 - floor->p99);
		printf("%s\n", r->bg_early > 0 ? "  (background ended early)" : "");
		fflush(stdout);
		return;
	}
	printf("{\"bench\":\"gpu-latency\",\"impl\":\"%s\",\"backend\":\"%s\",\"device\":\"", impl,
	       c->info->backend);
	json_str(c->info->device);
	putchar('"');
	if (strcmp(impl, "tandem") == 0)
		printf(",\"completion\":\"%s\",\"stream_set\":%u,\"launch_limit\":%u",
		       c->info->completion, r->stream_set, c->info->launch_limit);
	printf(",\"rounds\":%d", o->reps);
	printf(",\"workers\":%u,\"outstanding\":%llu,\"bg_streams\":%u,"
	       "\"kernel_us\":0,\"n\":%llu,\"warmup\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
	       "\"min_us\":%.3f,\"mean_us\":%.3f,\"max_us\":%.3f",
	       workers, (unsigned long long)outstanding, nbg, (unsigned long long)o->n, GPU_WARMUP,
	       r->st.p50, r->st.p99, r->st.min, r->st.mean, r->st.max);
	if (floor != NULL && strcmp(impl, "tandem") == 0)
		printf(",\"floor_p50_us\":%.3f,\"floor_p99_us\":%.3f", floor->p50, floor->p99);
	for (int i = 0; i < LAT_NQ; i++)
		printf("%s%g", i == 0 ? ",\"cdf_p\":[" : ",", lat_q_p(i));
	for (int i = 0; i < LAT_NQ; i++)
		printf("%s%.3f", i == 0 ? "],\"cdf_us\":[" : ",", r->st.q[i]);
	putchar(']');
	if (strcmp(impl, "tandem") == 0 && outstanding > 0)
		printf(",\"bg_setup_ms\":%.3f,\"bg_kernel_ms\":%.3f,\"bg_early\":%llu",
		       r->bg_setup_ms, r->bg_kernel_ms, (unsigned long long)r->bg_early);
	if (outstanding > 0)
		printf(",\"bg_words\":%llu,\"bg_events\":%llu", (unsigned long long)r->bg_words,
		       (unsigned long long)r->bg_events);
	printf(",\"connections\":%u,\"cpus\":%u}\n", c->connections, o->cpus);
	fflush(stdout);
}

/* The median of v[0..n) (sorted here). */
/*
 * rounds results, each `stride` apart from first, into one: p50, p99 and each quantile of the
 * distribution are the medians over the rounds, min the least, max the most, mean the mean; the
 * background facts are the first round's, bg_early the most of any round.
 */
static void lat_rounds(const struct lat_result *first, int stride, int rounds,
                       struct lat_result *out)
{
	double p50[BENCH_LAT_MAX_ROUNDS], p99[BENCH_LAT_MAX_ROUNDS], q[BENCH_LAT_MAX_ROUNDS];
	int n = rounds < BENCH_LAT_MAX_ROUNDS ? rounds : BENCH_LAT_MAX_ROUNDS;

	*out = first[0];
	out->st.mean = 0;
	for (int r = 0; r < n; r++) {
		const struct lat_result *x = &first[r * stride];
		p50[r] = x->st.p50;
		p99[r] = x->st.p99;
		out->st.min = x->st.min < out->st.min ? x->st.min : out->st.min;
		out->st.max = x->st.max > out->st.max ? x->st.max : out->st.max;
		out->st.mean += x->st.mean / n;
		out->bg_early = x->bg_early > out->bg_early ? x->bg_early : out->bg_early;
	}
	out->st.p50 = bench_median(p50, n);
	out->st.p99 = bench_median(p99, n);
	for (int i = 0; i < LAT_NQ; i++) {
		for (int r = 0; r < n; r++)
			q[r] = first[r * stride].st.q[i];
		out->st.q[i] = bench_median(q, n);
	}
}

int bench_gpu_latency(const struct bench_gpu_opts *o)
{
	struct gpu_info info;
	struct lat_ctx c = {o, &info, 0};
	uint64_t *ns;

	/*
	 * Before anything initialises CUDA: 32 hardware queues (CUDA's default is 8), so that the
	 * measured stream and up to 31 background streams each get one of their own, on both
	 * sides. A value already in the environment is kept.
	 */
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
	/* And every module loaded at start: a floor's first launch of a kernel (lazy loading, the
	 * default) while its background kernels spin would wait for them to end. */
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	c.connections = cuda_connections();
	gpu_probe(o, 1, &info);
	ns = malloc((size_t)o->n * sizeof(*ns));
	if (ns == NULL)
		die("gpu-latency", -ENOMEM);
	if (!o->json)
		lat_header(&c);
	for (int k = 0; k < o->noutstanding; k++) {
		uint64_t outstanding = o->outstanding[k];
		unsigned nbg = bg_stream_count(outstanding, c.connections);
		unsigned nstreams = c.connections > nbg + 1 ? c.connections : nbg + 1;
		const struct lat_stats *floor = NULL;

		/*
		 * Rounds (--reps, default 3), each running tandem at every worker count and then
		 * every floor, so that a drift of the machine hits tandem and the floors alike;
		 * each row reports the median over the rounds of its p50 and of its p99. tandem
		 * runs first in a round so that the floors can carry the same background on the
		 * GPU: as many pending writes and event records per background stream as tandem's
		 * background awaits used (those of the first round's first worker count; the JSON
		 * has them).
		 */
		int R = o->reps, nw = o->nworkers;
		struct lat_result *tr = calloc((size_t)R * (size_t)nw, sizeof(*tr));
		struct lat_result agg;
		if (tr == NULL)
			die("gpu-latency", -ENOMEM);
#if HAVE_RAW
		static const char *const floor_names[RAW_CUDA_NFLOORS] = {
		    "cuda-event", "cuda-word", "cuda-sync", "cuda-hostfunc"};
		struct lat_result *fr = calloc((size_t)R * RAW_CUDA_NFLOORS, sizeof(*fr));
		int fhave[RAW_CUDA_NFLOORS];
		struct lat_stats floor_st;
		unsigned per_w = 0, per_e = 0;

		if (fr == NULL)
			die("gpu-latency", -ENOMEM);
		for (int f = 0; f < RAW_CUDA_NFLOORS; f++)
			fhave[f] = !o->sim;
#endif
		for (int r = 0; r < R; r++) {
			for (int w = 0; w < nw; w++)
				tandem_latency(o, o->workers[w], outstanding, nbg, nstreams, ns,
				               &tr[r * nw + w]);
#if HAVE_RAW
			if (r == 0 && nbg > 0 && nw > 0) {
				per_w = (unsigned)((tr[0].bg_words + nbg - 1) / nbg);
				per_e = (unsigned)((tr[0].bg_events + nbg - 1) / nbg);
			}
			for (int f = 0; f < RAW_CUDA_NFLOORS; f++) {
				struct lat_result *x = &fr[r * RAW_CUDA_NFLOORS + f];
				if (!fhave[f])
					continue;
				int rc = raw_cuda_latency((enum raw_cuda_floor)f, nbg, per_w, per_e,
				                          GPU_WARMUP, o->n, ns);
				if (rc != 0) {
					fprintf(stderr, "tandem-bench: %s left out: %s (%s)\n",
					        floor_names[f], raw_cuda_error(), tdm_strerror(rc));
					fhave[f] = 0;
					continue;
				}
				x->st = lat_stats(ns, o->n);
				x->bg_words = (uint64_t)per_w * nbg;
				x->bg_events = (uint64_t)per_e * nbg;
			}
#endif
		}
#if HAVE_RAW
		for (int f = 0; f < RAW_CUDA_NFLOORS; f++) {
			if (!fhave[f])
				continue;
			lat_rounds(&fr[f], RAW_CUDA_NFLOORS, R, &agg);
			/* The raw spin floor: the faster of the two spinning mechanisms. */
			if ((f == RAW_CUDA_EVENT || f == RAW_CUDA_WORD) &&
			    (floor == NULL || agg.st.p50 < floor_st.p50)) {
				floor_st = agg.st;
				floor = &floor_st;
			}
			lat_report(&c, floor_names[f], 1, outstanding, nbg, &agg, NULL);
		}
		free(fr);
#endif
		for (int w = 0; w < nw; w++) {
			lat_rounds(&tr[w], nw, R, &agg);
			lat_report(&c, "tandem", o->workers[w], outstanding, agg.bg_streams, &agg,
			           floor);
		}
		free(tr);
	}
	free(ns);
	return 0;
}

/* ---- gpu-throughput -------------------------------------------------------------------------- */

struct tp_run {
	tdm_gpu *gpu;
	uint32_t ns;
	_Atomic int err; /* the first failure; its task also sets what */
	const char *what;
};

struct tp_task {
	struct tp_run *run;
	tdm_stream *s; /* kept after the release, to count the streams a run used */
};

static int tp_fail(struct tp_run *r, int err, const char *what)
{
	int none = 0;

	/* what is read by the main thread only after tdm_group_wait, which orders it. */
	if (atomic_compare_exchange_strong(&r->err, &none, err))
		r->what = what;
	return err;
}

/* One task: a shared lease, one kernel, its await, the release. */
static int tp_task_fn(tdm_task *t, void *arg)
{
	struct tp_task *k = arg;
	int rc;

	TDM_BEGIN(t);
	rc = tdm_stream_lease(k->run->gpu, 0, TDM_STREAM_SHARED, &k->s);
	if (rc != 0)
		return tp_fail(k->run, rc, "tdm_stream_lease");
	rc = tdm_launch_spin(k->s, k->run->ns);
	if (rc != 0) {
		tdm_stream_release(k->s);
		return tp_fail(k->run, rc, "tdm_launch_spin");
	}
	TDM_AWAIT(t, tdm_await_stream(t, k->s));
	rc = tdm_task_result(t);
	tdm_stream_release(k->s);
	if (rc != 0)
		return tp_fail(k->run, rc, "tdm_await_stream");
	TDM_END(t);
}

/* Nanoseconds from the first spawn (from this thread, not a worker) to the group's end. */
static uint64_t tandem_tp_once(struct env *e, struct tp_run *r, struct tp_task *tasks, uint64_t n)
{
	tdm_group g;
	uint64_t t0, t1;

	for (uint64_t i = 0; i < n; i++)
		tasks[i] = (struct tp_task){r, NULL};
	gmust(tdm_group_init(&g, e->ex), "tdm_group_init");
	t0 = tdm_now_ns();
	for (uint64_t i = 0; i < n; i++)
		gmust(tdm_spawn(e->ex, tp_task_fn, &tasks[i], &g), "tdm_spawn");
	gmust(tdm_group_wait(&g), "tdm_group_wait");
	t1 = tdm_now_ns();
	if (atomic_load(&r->err) != 0)
		die(r->what, atomic_load(&r->err));
	return t1 - t0;
}

static unsigned distinct_streams(const struct tp_task *tasks, uint64_t n)
{
	uint64_t *p = malloc((size_t)n * sizeof(*p));
	unsigned count = 0;

	if (p == NULL)
		return 0;
	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint64_t)(uintptr_t)tasks[i].s;
	qsort(p, (size_t)n, sizeof(*p), bench_cmp_u64);
	for (uint64_t i = 0; i < n; i++)
		count += i == 0 || p[i] != p[i - 1];
	free(p);
	return count;
}

struct tp_result {
	int have;
	double tps, tps_best, median_ms, min_ms;
	unsigned streams;
	unsigned stream_set; /* tandem: its streams per set on device 0 in this configuration */
	uint64_t in_flight;
	tdm_gpu_stats st; /* tandem: the poller's counts over the timed runs */
};

/* ms[] of reps runs (sorted here) into the result. */
static void tp_summary(struct tp_result *r, double *ms, int reps, uint64_t n)
{
	qsort(ms, (size_t)reps, sizeof(*ms), bench_cmp_double);
	r->median_ms = reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2;
	r->min_ms = ms[0];
	r->tps = (double)n / (r->median_ms / 1e3);
	r->tps_best = (double)n / (r->min_ms / 1e3);
	r->have = 1;
}

static void tandem_throughput(const struct bench_gpu_opts *o, unsigned workers, uint32_t ns,
                              double *ms, struct tp_result *res)
{
	struct env e;
	struct tp_run r;
	struct watchdog wd;
	struct tp_task *tasks = malloc((size_t)o->n * sizeof(*tasks));

	if (tasks == NULL)
		die("gpu-throughput", -ENOMEM);
	env_open(&e, o, workers, 0);
	res->stream_set = stream_set_of(e.gpu);
	watchdog_start(&wd, e.ex, STALL_NS + 2ull * ns, "gpu-throughput workers=%u kernel_us=%u",
	               workers, ns / 1000u);
	r.gpu = e.gpu;
	r.ns = ns;
	atomic_init(&r.err, 0);
	r.what = NULL;
	/* Warm-up: creates the streams and events, first touch of the task memory. */
	tandem_tp_once(&e, &r, tasks, o->n);
	tdm_gpu_stats st0, st1;
	gmust(tdm_gpu_stats_get(e.gpu, &st0), "tdm_gpu_stats_get");
	for (int i = 0; i < o->reps; i++)
		ms[i] = (double)tandem_tp_once(&e, &r, tasks, o->n) / 1e6;
	gmust(tdm_gpu_stats_get(e.gpu, &st1), "tdm_gpu_stats_get");
	memset(&res->st, 0, sizeof(res->st));
	bench_stats_add_delta(&res->st, &st0, &st1);
	res->streams = distinct_streams(tasks, o->n);
	res->in_flight = o->n;
	watchdog_stop(&wd);
	env_close(&e);
	free(tasks);
	tp_summary(res, ms, o->reps, o->n);
}

#if HAVE_RAW
static void raw_throughput(const struct bench_gpu_opts *o, enum raw_cuda_tp_kind kind,
                           unsigned workers, uint32_t ns, double *ms, struct tp_result *res)
{
	static const char *const names[] = {"cuda-sync", "cuda-hostfunc"};
	unsigned window = kind == RAW_CUDA_TP_HOSTFUNC ? 4 * workers : workers;
	struct raw_cuda_tp *tp;
	uint64_t el;
	int rc;

	res->have = 0;
	rc = raw_cuda_tp_create(&tp, kind, workers, window);
	for (int i = -1; rc == 0 && i < o->reps; i++) {
		rc = raw_cuda_tp_run(tp, o->n, ns, &el);
		if (i >= 0) /* -1: the warm-up */
			ms[i] = (double)el / 1e6;
	}
	if (rc != 0) {
		fprintf(stderr, "tandem-bench: %s left out (workers=%u): %s (%s)\n", names[kind],
		        workers, raw_cuda_error(), tdm_strerror(rc));
		raw_cuda_tp_destroy(tp);
		return;
	}
	raw_cuda_tp_destroy(tp);
	res->streams = workers;
	res->in_flight = window;
	tp_summary(res, ms, o->reps, o->n);
}
#endif

enum { TP_TANDEM, TP_SYNC, TP_HOSTFUNC, TP_NIMPL };
static const char *const tp_names[TP_NIMPL] = {"tandem", "cuda-sync", "cuda-hostfunc"};

static void tp_header(const struct bench_gpu_opts *o, const struct gpu_info *info, int nimpl)
{
	printf("\ngpu-throughput on %s (%s; tandem: completion %s, %u streams per set (or one "
	       "per worker where there are more workers, at most 32; past 8, tdm_gpu_prepare sets "
	       "CUDA_DEVICE_MAX_CONNECTIONS to the set's size where it is unset: the JSON's "
	       "connections), launch limit %u): tasks/s, "
	       "median of %d runs of %llu tasks (a kernel and its await each); each worker count "
	       "in a process of its own\n",
	       info->backend, info->device, info->completion, info->streams, info->launch_limit,
	       o->reps, (unsigned long long)o->n);
	printf("%7s %9s", "workers", "kernel_us");
	for (int k = 0; k < nimpl; k++)
		printf(" %14s", tp_names[k]);
	printf("  %12s %16s\n", "tandem/best", "tandem/hostfunc");
}

static void tp_row(uint64_t kernel_us, unsigned workers, const struct tp_result *r, int nimpl)
{
	double best = 0;

	printf("%7u %9llu", workers, (unsigned long long)kernel_us);
	for (int k = 0; k < nimpl; k++) {
		if (r[k].have)
			printf(" %14.0f", r[k].tps);
		else
			printf(" %14s", "-");
		if (k != TP_TANDEM && r[k].have && r[k].tps > best)
			best = r[k].tps;
	}
	if (best > 0)
		printf("  %11.2fx", r[TP_TANDEM].tps / best);
	else
		printf("  %12s", "-");
	if (nimpl > TP_HOSTFUNC && r[TP_HOSTFUNC].have)
		printf(" %15.2fx\n", r[TP_TANDEM].tps / r[TP_HOSTFUNC].tps);
	else
		printf(" %16s\n", "-");
	fflush(stdout);
}

static void tp_json(const struct bench_gpu_opts *o, const struct gpu_info *info, int impl,
                    uint64_t kernel_us, unsigned workers, const struct tp_result *r)
{
	printf("{\"bench\":\"gpu-throughput\",\"impl\":\"%s\",\"backend\":\"%s\",\"device\":\"",
	       tp_names[impl], info->backend);
	json_str(info->device);
	putchar('"');
	if (impl == TP_TANDEM) {
		printf(",\"completion\":\"%s\",\"stream_set\":%u,\"launch_limit\":%u,",
		       info->completion, r->stream_set, info->launch_limit);
		bench_stats_json(&r->st);
	}
	if (info->connections != NULL)
		printf(",\"connections\":\"%s\"", info->connections);
	else
		printf(",\"connections\":null");
	printf(",\"workers\":%u,\"kernel_us\":%llu,\"n\":%llu,\"reps\":%d,"
	       "\"tasks_per_s\":%.1f,\"best_tasks_per_s\":%.1f,\"median_ms\":%.3f,\"min_ms\":%.3f,"
	       "\"streams\":%u,\"in_flight\":%llu,\"cpus\":%u}\n",
	       workers, (unsigned long long)kernel_us, (unsigned long long)o->n, o->reps, r->tps,
	       r->tps_best, r->median_ms, r->min_ms, r->streams, (unsigned long long)r->in_flight,
	       o->cpus);
	fflush(stdout);
}

/* The rows of `workers`; the header first where `header`. */
static int throughput_of(const struct bench_gpu_opts *o, unsigned workers, int header)
{
	struct gpu_info info;
	int nimpl = HAVE_RAW && !o->sim ? TP_NIMPL : 1;
	double *ms = malloc((size_t)o->reps * sizeof(*ms));

	if (ms == NULL)
		die("gpu-throughput", -ENOMEM);
	/* tandem's GPU layer first, so that what tdm_gpu_prepare sets before CUDA starts
	 * (CUDA_DEVICE_MAX_CONNECTIONS for more than 8 workers) holds for every row, the baselines'
	 * too, as in a program of that many workers. */
	gpu_probe(o, workers, &info);
	info.connections = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	if (header && !o->json)
		tp_header(o, &info, nimpl);
	for (int k = 0; k < o->nkernel; k++) {
		uint32_t ns = (uint32_t)(o->kernel_us[k] * 1000u);
		struct tp_result r[TP_NIMPL];

		memset(r, 0, sizeof(r));
		tandem_throughput(o, workers, ns, ms, &r[TP_TANDEM]);
#if HAVE_RAW
		if (nimpl > 1) {
			raw_throughput(o, RAW_CUDA_TP_SYNC, workers, ns, ms, &r[TP_SYNC]);
			raw_throughput(o, RAW_CUDA_TP_HOSTFUNC, workers, ns, ms, &r[TP_HOSTFUNC]);
		}
#endif
		if (!o->json) {
			tp_row(o->kernel_us[k], workers, r, nimpl);
			continue;
		}
		for (int i = 0; i < nimpl; i++)
			if (r[i].have)
				tp_json(o, &info, i, o->kernel_us[k], workers, &r[i]);
	}
	free(ms);
	return 0;
}

/*
 * Each worker count runs in a process of its own, one after another, as a program of that many
 * workers would: CUDA reads CUDA_DEVICE_MAX_CONNECTIONS once per process, and tdm_gpu_prepare
 * (bench_gpu_create) sets it for more than 8 workers. This process starts no CUDA itself. Fewest
 * workers first: should a configuration stall (the watchdog then ends its process with 4), the
 * ones with most workers, where workers share streams and awaits race on them, come last.
 */
int bench_gpu_throughput(const struct bench_gpu_opts *o)
{
	for (int w = 0; w < o->nworkers; w++) {
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		if (pid < 0)
			die("gpu-throughput: fork", -errno);
		if (pid == 0) {
			int code = throughput_of(o, o->workers[w], w == 0);
			fflush(stdout);
			_exit(code);
		}
		int status;
		while (waitpid(pid, &status, 0) < 0)
			if (errno != EINTR)
				die("gpu-throughput: waitpid", -errno);
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (code != 0)
			return code;
	}
	return 0;
}
