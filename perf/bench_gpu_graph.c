// SPDX-License-Identifier: MIT
/*
 * tandem-bench gpu-graph: what tandem's GPU graphs (tandem_graph.h) cost and gain beside launching
 * kernel by kernel, and beside the same graphs driven by hand in plain CUDA (raw_graph.cu), in one
 * run. Five parts (--parts), each a block of the table or rows of `"part":...` in the JSON:
 *
 *   chain   a chain of K spin kernels awaited by one task: K x tdm_launch_spin + tdm_await_stream
 *           (tandem-launch), one tdm_graph_launch of the chain captured once + tdm_await_stream
 *           (tandem-graph), beside raw_graph_chain_graph (cuda-graph) and raw_graph_chain_stream
 *           (cuda-stream).
 *   multi   W workers, W tasks each on an exclusive lease of its own running such chains back to
 *           back (graph replays, or launches), beside raw_graph_streams with S = W threads.
 *   single  the round trip of an awaited graph of one kernel (kernel_us, and the empty kernel):
 *           the chain part at K = 1, and tandem's p50 minus plain CUDA's.
 *   setup   host costs: capture, instantiation, update in place, destroy, one tdm_graph_launch
 *           call, one tdm_graph_run call that hits the cache; beside raw_graph_chain_graph's
 *           setup figures.
 *   dag     a diamond of 1 + 4 + 1 kernels: forked over 5 exclusive leases with event edges,
 *           serialised on one stream, captured as a graph; beside raw_graph_diamond. Its
 *           implementations are rows of dag_impls[], so that another (a tdm_dag one) is a row
 *           more.
 *
 * perf/README.md ("gpu-graph") says what each row measures. No timing is asserted anywhere.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "raw_graph.h"
#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_graph.h"
#include "tandem_sim.h" /* tdm_launch_spin (tandem_testing) */

/* The plain-CUDA baselines exist only in CUDA builds, and run only on --backend cuda. */
#if defined(TANDEM_HAVE_CUDA) && TANDEM_HAVE_CUDA
#define HAVE_RAW 1
#else
#define HAVE_RAW 0
#endif

#define GG_MAX_LIST 32
#define GG_BRANCHES 4             /* the diamond's width */
#define GG_SETUP_TRIALS 16        /* samples of each host cost, as raw_graph's default */
#define GG_MAX_KERNEL_US 1000000u /* tdm_launch_spin takes a uint32_t of ns */

enum { PART_CHAIN = 1, PART_MULTI = 2, PART_SINGLE = 4, PART_SETUP = 8, PART_DAG = 16 };
static const char *const part_names[] = {"chain", "multi", "single", "setup", "dag"};
#define NPARTS 5

struct gg_opts {
	int sim, json;
	unsigned reps, rounds, workers, kernel_us;
	unsigned chains[GG_MAX_LIST], dag_us[GG_MAX_LIST];
	int nchains, ndag;
	unsigned parts;
	int reps_given, workers_given;
};

struct gg_env {
	tdm_executor *ex;
	tdm_gpu *gpu;
	const struct gg_opts *o;
	const char *backend;
	char device[96];
	const char
	    *connections; /* CUDA_DEVICE_MAX_CONNECTIONS once the layer is open; NULL unset */
};

/* ---- common ---------------------------------------------------------------------------------- */

_Noreturn static void gg_die(const char *what, int err)
{
	fprintf(stderr, "tandem-bench gpu-graph: %s: %s\n", what, tdm_strerror(err));
	exit(1);
}

static void gg_stalled(int sig)
{
	static const char msg[] = "tandem-bench gpu-graph: a measurement did not finish in time: "
	                          "awaits that never complete? giving up (exit status 4)\n";

	(void)sig;
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(4);
}

/* An alarm for a measurement expected to take about `ns`: a minute plus 20 times that. */
static void gg_alarm(double ns)
{
	double s = 60 + 20 * ns / 1e9;

	alarm(s < 86400 ? (unsigned)s : 86400u);
}

/* Sorts v; its median (the mean of the middle two for an even n); 0 for n = 0. */
static uint64_t median_u64(uint64_t *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_u64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void json_str(const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
}

/* The start of every JSON object: bench, part, impl and the run's facts. */
static void json_head(const struct gg_env *e, const char *part, const char *impl)
{
	printf("{\"bench\":\"gpu-graph\",\"part\":\"%s\",\"impl\":\"%s\",\"backend\":\"%s\","
	       "\"device\":\"",
	       part, impl, e->backend);
	json_str(e->device);
	printf("\",\"workers\":%u,\"connections\":", e->o->workers);
	if (e->connections != NULL) {
		putchar('"');
		json_str(e->connections);
		putchar('"');
	} else {
		printf("null");
	}
}

static void json_ratio(const char *name, double num, double den)
{
	if (num > 0 && den > 0)
		printf(",\"%s\":%.4f", name, num / den);
	else
		printf(",\"%s\":null", name);
}

static void print_ratio(double num, double den)
{
	if (num > 0 && den > 0)
		printf(" %8.2fx", num / den);
	else
		printf(" %9s", "-");
}

/* Untimed reps before the timed ones, on every side. */
static uint64_t gg_warmup(const struct gg_opts *o)
{
	return o->reps / 10 + 2;
}

/* Spawns n resumable tasks fn(args[i]) into one group from this thread and waits for them; the
 * wall nanoseconds from the first spawn to the end of the wait. */
static uint64_t run_tasks(struct gg_env *e, tdm_resume_fn fn, void *args, size_t size, unsigned n,
                          double expect_ns)
{
	tdm_group g;
	uint64_t t0, t1;
	int rc;

	rc = tdm_group_init(&g, e->ex);
	if (rc != 0)
		gg_die("tdm_group_init", rc);
	gg_alarm(expect_ns);
	t0 = tdm_now_ns();
	for (unsigned i = 0; i < n; i++) {
		rc = tdm_spawn(e->ex, fn, (char *)args + (size_t)i * size, &g);
		if (rc != 0)
			gg_die("tdm_spawn", rc);
	}
	(void)tdm_group_wait(&g); /* each task's own error is in its state */
	t1 = tdm_now_ns();
	alarm(0);
	return t1 - t0;
}

/* A rate of reps round trips: per second over the timed span, median and fastest round trip. */
struct rate {
	int have;
	uint64_t reps;
	double per_s, median_us, min_us;
};

static struct rate rate_of(uint64_t *samples, uint64_t n, uint64_t span_ns)
{
	struct rate r = {0};

	if (n == 0 || span_ns == 0)
		return r;
	r.have = 1;
	r.reps = n;
	r.per_s = (double)n / ((double)span_ns / 1e9);
	r.median_us = (double)median_u64(samples, (size_t)n) / 1e3;
	r.min_us = (double)samples[0] / 1e3;
	return r;
}

#if HAVE_RAW
static struct rate rate_raw(const struct raw_graph_rate *x)
{
	struct rate r = {1, x->reps, x->per_s, (double)x->median_ns / 1e3, (double)x->min_ns / 1e3};

	return r;
}

static void raw_left_out(const char *what, int rc)
{
	fprintf(stderr, "tandem-bench gpu-graph: %s left out: %s (%s)\n", what, raw_graph_error(),
	        tdm_strerror(rc));
}
#endif

static void tandem_left_out(const char *impl, const char *what, int rc)
{
	fprintf(stderr, "tandem-bench gpu-graph: %s left out: %s: %s\n", impl, what,
	        tdm_strerror(rc));
}

/* ---- chains: one task on an exclusive lease, launches or graph replays ------------------------
 */

/* A task's state: everything that lives across its awaits. */
struct chain {
	tdm_stream *s;
	tdm_graph *g; /* graph mode: captured on the task's first run when NULL, kept after */
	int graph;    /* 1: one tdm_graph_launch of g per rep; 0: K tdm_launch_spin */
	unsigned k;
	uint32_t ns;
	uint64_t warmup, reps, i, t0, first_ns, last_ns;
	uint64_t *samples; /* reps round trips, or NULL */
	int err;
	const char *what;
};

static int chain_fail(struct chain *c, int err, const char *what)
{
	c->err = err;
	c->what = what;
	return err;
}

static int launch_chain(tdm_stream *s, unsigned k, uint32_t ns)
{
	for (unsigned j = 0; j < k; j++) {
		int rc = tdm_launch_spin(s, ns);

		if (rc != 0)
			return rc;
	}
	return 0;
}

/* begin, K launches, end: a new graph of the chain into *g; 0 or a negative errno. */
static int capture_chain(tdm_stream *s, unsigned k, uint32_t ns, tdm_graph **g, const char **what)
{
	int rc = tdm_graph_capture_begin(s);

	if (rc != 0) {
		*what = "tdm_graph_capture_begin";
		return rc;
	}
	rc = launch_chain(s, k, ns);
	if (rc != 0) {
		*what = "tdm_launch_spin (capturing)";
		(void)tdm_graph_capture_end(s, g);
		return rc;
	}
	rc = tdm_graph_capture_end(s, g);
	if (rc < 0) {
		*what = "tdm_graph_capture_end";
		return rc;
	}
	return 0;
}

static int chain_fn(tdm_task *t, void *arg)
{
	struct chain *c = arg;
	uint64_t t1;
	int rc;

	TDM_BEGIN(t);
	if (c->graph && c->g == NULL) {
		const char *what = NULL;

		rc = capture_chain(c->s, c->k, c->ns, &c->g, &what);
		if (rc != 0)
			return chain_fail(c, rc, what);
	}
	for (c->i = 0; c->i < c->warmup + c->reps; c->i++) {
		c->t0 = tdm_now_ns();
		rc = c->graph ? tdm_graph_launch(c->s, c->g) : launch_chain(c->s, c->k, c->ns);
		if (rc != 0)
			return chain_fail(c, rc, c->graph ? "tdm_graph_launch" : "tdm_launch_spin");
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		t1 = tdm_now_ns();
		if (tdm_task_result(t) != 0)
			return chain_fail(c, tdm_task_result(t), "tdm_await_stream");
		if (c->i >= c->warmup) {
			if (c->i == c->warmup)
				c->first_ns = c->t0;
			if (c->samples != NULL)
				c->samples[c->i - c->warmup] = t1 - c->t0;
			c->last_ns = t1;
		}
	}
	TDM_END(t);
}

/* A guess at a chain's round trip, for the stall alarm only. */
static double chain_expect_ns(unsigned k, uint32_t ns)
{
	return (double)k * ((double)ns + 10000.0);
}

/* One task: warm-up and reps round trips of the chain on s; the rate, or have = 0 (said why). */
static struct rate tandem_chain(struct gg_env *e, tdm_stream *s, int graph, unsigned k, uint32_t ns,
                                uint64_t *samples)
{
	const struct gg_opts *o = e->o;
	struct chain c = {.s = s,
	                  .graph = graph,
	                  .k = k,
	                  .ns = ns,
	                  .warmup = gg_warmup(o),
	                  .reps = o->reps,
	                  .samples = samples};
	struct rate r = {0};

	run_tasks(e, chain_fn, &c, sizeof(c), 1,
	          (double)(c.warmup + c.reps) * chain_expect_ns(k, ns));
	if (c.g != NULL) {
		int rc = tdm_graph_destroy(c.g);

		if (rc != 0 && c.err == 0)
			chain_fail(&c, rc, "tdm_graph_destroy");
	}
	if (c.err != 0) {
		tandem_left_out(graph ? "tandem-graph" : "tandem-launch", c.what, c.err);
		return r;
	}
	return rate_of(samples, c.reps, c.last_ns - c.first_ns);
}

enum { CH_TANDEM_LAUNCH, CH_TANDEM_GRAPH, CH_CUDA_GRAPH, CH_CUDA_STREAM, CH_N };
static const char *const ch_names[CH_N] = {"tandem-launch", "tandem-graph", "cuda-graph",
                                           "cuda-stream"};

/* The four round trips of a chain of k kernels of ns each. */
static void chain_rates(struct gg_env *e, unsigned k, uint32_t ns, struct rate r[CH_N])
{
	const struct gg_opts *o = e->o;
	uint64_t *samples = malloc((size_t)o->reps * sizeof(*samples));
	tdm_stream *s = NULL;
	int rc;

	memset(r, 0, CH_N * sizeof(*r));
	if (samples == NULL)
		gg_die("malloc", -ENOMEM);
	rc = tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &s);
	if (rc != 0)
		gg_die("tdm_stream_lease (exclusive)", rc);
	r[CH_TANDEM_LAUNCH] = tandem_chain(e, s, 0, k, ns, samples);
	r[CH_TANDEM_GRAPH] = tandem_chain(e, s, 1, k, ns, samples);
	rc = tdm_stream_release(s);
	if (rc != 0)
		gg_die("tdm_stream_release", rc);
	free(samples);
#if HAVE_RAW
	if (!o->sim) {
		struct raw_graph_params p = {
		    .kernels = k, .ns = ns, .warmup = gg_warmup(o), .reps = o->reps};
		struct raw_graph_rate x;

		rc = raw_graph_chain_graph(&p, &x, NULL);
		if (rc == 0)
			r[CH_CUDA_GRAPH] = rate_raw(&x);
		else
			raw_left_out("cuda-graph", rc);
		rc = raw_graph_chain_stream(&p, &x);
		if (rc == 0)
			r[CH_CUDA_STREAM] = rate_raw(&x);
		else
			raw_left_out("cuda-stream", rc);
	}
#endif
}

static void chain_header(const struct gg_env *e)
{
	const struct gg_opts *o = e->o;

	printf("\nchain: K kernels of %u us awaited by one task (tandem, an exclusive lease) or "
	       "synchronised (cuda); median of %u reps after %llu warm-up\n",
	       o->kernel_us, o->reps, (unsigned long long)gg_warmup(o));
	printf("%6s %-14s %12s %12s %11s %11s\n", "K", "impl", "chains/s", "kernels/s", "median_us",
	       "min_us");
}

static void chain_report(const struct gg_env *e, const char *part, unsigned k, uint32_t ns,
                         const struct rate r[CH_N])
{
	double tg = r[CH_TANDEM_GRAPH].per_s, cg = r[CH_CUDA_GRAPH].per_s,
	       tl = r[CH_TANDEM_LAUNCH].per_s;

	for (int i = 0; i < CH_N; i++) {
		if (!r[i].have)
			continue;
		if (e->o->json) {
			json_head(e, part, ch_names[i]);
			printf(",\"kernels\":%u,\"kernel_us\":%.3f,\"reps\":%llu,\"chains_per_s\":%"
			       ".1f,"
			       "\"kernels_per_s\":%.1f,\"median_us\":%.3f,\"min_us\":%.3f",
			       k, (double)ns / 1e3, (unsigned long long)r[i].reps, r[i].per_s,
			       r[i].per_s * k, r[i].median_us, r[i].min_us);
			if (i == CH_TANDEM_GRAPH) {
				json_ratio("ratio_cuda_graph", tg, cg);
				json_ratio("ratio_tandem_launch", tg, tl);
				if (r[CH_CUDA_GRAPH].have)
					printf(",\"p50_minus_cuda_graph_us\":%.3f",
					       r[i].median_us - r[CH_CUDA_GRAPH].median_us);
				else
					printf(",\"p50_minus_cuda_graph_us\":null");
			}
			printf("}\n");
		} else {
			printf("%6u %-14s %12.1f %12.1f %11.2f %11.2f\n", k, ch_names[i],
			       r[i].per_s, r[i].per_s * k, r[i].median_us, r[i].min_us);
		}
	}
	if (!e->o->json) {
		printf("%6u %-14s", k, "ratios");
		printf(" tandem-graph/cuda-graph");
		print_ratio(tg, cg);
		printf("   tandem-graph/tandem-launch");
		print_ratio(tg, tl);
		if (r[CH_TANDEM_GRAPH].have && r[CH_CUDA_GRAPH].have)
			printf("   p50 tandem-graph - cuda-graph %+.2f us",
			       r[CH_TANDEM_GRAPH].median_us - r[CH_CUDA_GRAPH].median_us);
		printf("\n");
	}
	fflush(stdout);
}

static void part_chain(struct gg_env *e)
{
	const struct gg_opts *o = e->o;
	uint32_t ns = o->kernel_us * 1000u;

	if (!o->json)
		chain_header(e);
	for (int i = 0; i < o->nchains; i++) {
		struct rate r[CH_N];

		chain_rates(e, o->chains[i], ns, r);
		chain_report(e, "chain", o->chains[i], ns, r);
	}
}

/* ---- single: the round trip of an awaited graph of one kernel ---------------------------------
 */

static void part_single(struct gg_env *e)
{
	const struct gg_opts *o = e->o;
	uint32_t lens[2] = {o->kernel_us * 1000u, 0};
	int n = o->kernel_us > 0 ? 2 : 1;

	if (!o->json) {
		printf(
		    "\nsingle: round trip of one kernel (kernel_us %u, then the empty kernel) as a "
		    "graph of one node (and launched); median of %u reps\n",
		    o->kernel_us, o->reps);
		printf("%6s %-14s %12s %12s %11s %11s\n", "K", "impl", "chains/s", "kernels/s",
		       "median_us", "min_us");
	}
	for (int i = 0; i < n; i++) {
		struct rate r[CH_N];

		if (!o->json)
			printf("kernel_us %.3f:\n", (double)lens[i] / 1e3);
		chain_rates(e, 1, lens[i], r);
		chain_report(e, "single", 1, lens[i], r);
	}
}

/* ---- multi: W tasks, each on an exclusive lease of its own ------------------------------------
 */

enum { MU_TANDEM_GRAPH, MU_TANDEM_LAUNCH, MU_CUDA_GRAPH, MU_CUDA_STREAM, MU_N };
static const char *const mu_names[MU_N] = {"tandem-graph", "tandem-launch", "cuda-graph",
                                           "cuda-stream"};

struct multi_res {
	int have;
	double kernels_per_s, chains_per_s; /* medians over rounds */
	double min_kps, max_kps;
};

static struct multi_res multi_of(double *kps, unsigned rounds, unsigned k)
{
	struct multi_res m = {0};

	m.have = 1;
	m.kernels_per_s = bench_median(kps, rounds); /* sorts kps */
	m.min_kps = kps[0];
	m.max_kps = kps[rounds - 1];
	m.chains_per_s = m.kernels_per_s / k;
	return m;
}

static struct multi_res tandem_multi(struct gg_env *e, tdm_stream **s, unsigned w, int graph,
                                     unsigned k, uint32_t ns)
{
	const struct gg_opts *o = e->o;
	struct chain *c = calloc(w, sizeof(*c));
	double *kps = calloc(o->rounds, sizeof(*kps));
	struct multi_res m = {0};
	const char *what = NULL;
	int err = 0;

	if (c == NULL || kps == NULL)
		gg_die("calloc", -ENOMEM);
	/* Untimed: each task captures its own graph (one graph per stream: replays of one graph
	 * never overlap) and runs the warm-up. */
	for (unsigned j = 0; j < w; j++)
		c[j] = (struct chain){
		    .s = s[j], .graph = graph, .k = k, .ns = ns, .warmup = gg_warmup(o)};
	run_tasks(e, chain_fn, c, sizeof(*c), w, (double)gg_warmup(o) * chain_expect_ns(k, ns) * w);
	for (unsigned r = 0; r < o->rounds; r++) {
		uint64_t el;

		for (unsigned j = 0; j < w && err == 0; j++) {
			err = c[j].err;
			what = c[j].what;
		}
		if (err != 0)
			break;
		for (unsigned j = 0; j < w; j++) {
			c[j].warmup = 0;
			c[j].reps = o->reps;
			c[j].samples = NULL;
		}
		el = run_tasks(e, chain_fn, c, sizeof(*c), w,
		               (double)o->reps * chain_expect_ns(k, ns) * w);
		kps[r] = (double)w * o->reps * k / ((double)el / 1e9);
	}
	for (unsigned j = 0; j < w && err == 0; j++) {
		err = c[j].err;
		what = c[j].what;
	}
	for (unsigned j = 0; j < w; j++) {
		if (c[j].g != NULL) {
			int rc = tdm_graph_destroy(c[j].g);

			if (rc != 0 && err == 0) {
				err = rc;
				what = "tdm_graph_destroy";
			}
		}
	}
	if (err != 0)
		tandem_left_out(graph ? "tandem-graph" : "tandem-launch", what, err);
	else
		m = multi_of(kps, o->rounds, k);
	free(kps);
	free(c);
	return m;
}

static void part_multi(struct gg_env *e)
{
	const struct gg_opts *o = e->o;
	unsigned w = o->workers;
	uint32_t ns = o->kernel_us * 1000u;
	tdm_stream **s = calloc(w, sizeof(*s));
	unsigned leased = 0;
	int rc = 0;

	if (s == NULL)
		gg_die("calloc", -ENOMEM);
	if (!o->json) {
		printf(
		    "\nmulti: %u tasks, each on an exclusive lease of its own, running %u chains "
		    "of K kernels of %u us back to back (cuda: %u threads, a stream each); "
		    "median of %u rounds\n",
		    w, o->reps, o->kernel_us, w, o->rounds);
		printf("%6s %-14s %14s %14s %14s %14s\n", "K", "impl", "kernels/s", "chains/s",
		       "min kernels/s", "max kernels/s");
	}
	for (; leased < w; leased++) {
		rc = tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &s[leased]);
		if (rc != 0)
			break;
	}
	if (rc != 0)
		tandem_left_out("multi (tandem rows)",
		                "tdm_stream_lease (exclusive, one per worker)", rc);
	for (int i = 0; i < o->nchains; i++) {
		unsigned k = o->chains[i];
		struct multi_res m[MU_N];

		memset(m, 0, sizeof(m));
		if (rc == 0) {
			m[MU_TANDEM_GRAPH] = tandem_multi(e, s, w, 1, k, ns);
			m[MU_TANDEM_LAUNCH] = tandem_multi(e, s, w, 0, k, ns);
		}
#if HAVE_RAW
		if (!o->sim) {
			struct raw_graph_params p = {.kernels = k,
			                             .ns = ns,
			                             .warmup = gg_warmup(o),
			                             .reps = o->reps,
			                             .streams = w};
			for (int g = 1; g >= 0; g--) {
				double *kps = calloc(o->rounds, sizeof(*kps));
				int rr = 0;

				if (kps == NULL)
					gg_die("calloc", -ENOMEM);
				for (unsigned r = 0; r < o->rounds && rr == 0; r++) {
					struct raw_graph_multi x;

					rr = raw_graph_streams(&p, g, &x);
					kps[r] = x.kernels_per_s;
				}
				if (rr == 0)
					m[g ? MU_CUDA_GRAPH : MU_CUDA_STREAM] =
					    multi_of(kps, o->rounds, k);
				else
					raw_left_out(
					    g ? "cuda-graph (multi)" : "cuda-stream (multi)", rr);
				free(kps);
			}
		}
#endif
		for (int j = 0; j < MU_N; j++) {
			if (!m[j].have)
				continue;
			if (o->json) {
				json_head(e, "multi", mu_names[j]);
				printf(",\"streams\":%u,\"kernels\":%u,\"kernel_us\":%u,"
				       "\"reps\":%u,\"rounds\":%u,\"kernels_per_s\":%.1f,"
				       "\"chains_per_s\":%.1f,\"min_kernels_per_s\":%.1f,"
				       "\"max_kernels_per_s\":%.1f",
				       w, k, o->kernel_us, o->reps, o->rounds, m[j].kernels_per_s,
				       m[j].chains_per_s, m[j].min_kps, m[j].max_kps);
				if (j == MU_TANDEM_GRAPH) {
					json_ratio("ratio_cuda_graph", m[j].kernels_per_s,
					           m[MU_CUDA_GRAPH].kernels_per_s);
					json_ratio("ratio_tandem_launch", m[j].kernels_per_s,
					           m[MU_TANDEM_LAUNCH].kernels_per_s);
				}
				printf("}\n");
			} else {
				printf("%6u %-14s %14.1f %14.1f %14.1f %14.1f\n", k, mu_names[j],
				       m[j].kernels_per_s, m[j].chains_per_s, m[j].min_kps,
				       m[j].max_kps);
			}
		}
		if (!o->json) {
			printf("%6u %-14s tandem-graph/cuda-graph", k, "ratios");
			print_ratio(m[MU_TANDEM_GRAPH].kernels_per_s,
			            m[MU_CUDA_GRAPH].kernels_per_s);
			printf("   tandem-graph/tandem-launch");
			print_ratio(m[MU_TANDEM_GRAPH].kernels_per_s,
			            m[MU_TANDEM_LAUNCH].kernels_per_s);
			printf("\n");
		}
		fflush(stdout);
	}
	for (unsigned j = 0; j < leased; j++)
		(void)tdm_stream_release(s[j]);
	free(s);
}

/* ---- setup: host costs of capture, instantiation, update, launch, a cache hit -----------------
 */

struct setup_task {
	tdm_stream *s;
	unsigned k, trials;
	uint32_t ns;
	uint64_t key;
	tdm_graph *g;
	unsigned i;
	int hit_mode; /* the last tdm_graph_run's result */
	/* samples, trials of each */
	uint64_t *record, *inst, *capture, *update, *destroy, *launch, *hit;
	unsigned nhit, runs;
	unsigned updated, reinstantiated; /* what the update captures' ends said */
	uint64_t direct, instantiated, replayed;
	int err;
	const char *what;
};

static int setup_fail(struct setup_task *c, int err, const char *what)
{
	c->err = err;
	c->what = what;
	return err;
}

static int setup_step(tdm_stream *s, void *arg)
{
	const struct setup_task *c = arg;

	return launch_chain(s, c->k, c->ns);
}

static int setup_fn(tdm_task *t, void *arg)
{
	struct setup_task *c = arg;
	uint64_t t0, t1, t2;
	int rc;

	TDM_BEGIN(t);
	/* Capture (begin + K launches) and instantiation (the end of a capture into no graph),
	 * then an update (a capture of the chain with other kernel lengths ended into that
	 * graph: same topology), then the destroy of the idle graph. No await: nothing runs. */
	for (c->i = 0; c->i < c->trials; c->i++) {
		tdm_graph *g = NULL;
		uint32_t other = c->ns > 0 ? (c->i % 2 ? c->ns : c->ns + 1) : 0;

		t0 = tdm_now_ns();
		rc = tdm_graph_capture_begin(c->s);
		if (rc != 0)
			return setup_fail(c, rc, "tdm_graph_capture_begin");
		rc = launch_chain(c->s, c->k, c->ns);
		if (rc != 0) {
			(void)tdm_graph_capture_end(c->s, &g);
			return setup_fail(c, rc, "tdm_launch_spin (capturing)");
		}
		t1 = tdm_now_ns();
		rc = tdm_graph_capture_end(c->s, &g);
		t2 = tdm_now_ns();
		if (rc < 0)
			return setup_fail(c, rc, "tdm_graph_capture_end (new graph)");
		if (rc != TDM_GRAPH_INSTANTIATED) {
			(void)tdm_graph_destroy(g);
			return setup_fail(c, -EPROTO,
			                  "tdm_graph_capture_end (new graph) did not "
			                  "say TDM_GRAPH_INSTANTIATED");
		}
		c->record[c->i] = t1 - t0;
		c->inst[c->i] = t2 - t1;
		c->capture[c->i] = t2 - t0;

		rc = tdm_graph_capture_begin(c->s);
		if (rc == 0)
			rc = launch_chain(c->s, c->k, other);
		t0 = tdm_now_ns();
		{
			int end = tdm_graph_capture_end(c->s, &g);

			rc = rc != 0 ? rc : end;
		}
		t1 = tdm_now_ns();
		if (rc < 0) {
			(void)tdm_graph_destroy(g);
			return setup_fail(c, rc, "capture into an existing graph");
		}
		c->updated += rc == TDM_GRAPH_UPDATED;
		c->reinstantiated += rc == TDM_GRAPH_INSTANTIATED;
		c->update[c->i] = t1 - t0;

		t0 = tdm_now_ns();
		rc = tdm_graph_destroy(g);
		t1 = tdm_now_ns();
		if (rc != 0)
			return setup_fail(c, rc, "tdm_graph_destroy");
		c->destroy[c->i] = t1 - t0;
	}
	/* One tdm_graph_launch call (host time of the call; the replay is awaited after it). */
	{
		const char *what = NULL;

		rc = capture_chain(c->s, c->k, c->ns, &c->g, &what);
		if (rc != 0)
			return setup_fail(c, rc, what);
	}
	for (c->i = 0; c->i < c->trials + 2; c->i++) {
		t0 = tdm_now_ns();
		rc = tdm_graph_launch(c->s, c->g);
		t1 = tdm_now_ns();
		if (rc != 0)
			return setup_fail(c, rc, "tdm_graph_launch");
		if (c->i >= 2) /* the first two: the graph's upload, first touch */
			c->launch[c->i - 2] = t1 - t0;
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		if (tdm_task_result(t) != 0)
			return setup_fail(c, tdm_task_result(t), "tdm_await_stream");
	}
	/* tdm_graph_run through the cache: direct runs, the capture, then hits, each awaited; the
	 * host time of the calls that said TDM_GRAPH_REPLAYED. */
	for (c->runs = 0; c->nhit < c->trials && c->runs < c->trials + 64; c->runs++) {
		t0 = tdm_now_ns();
		rc = tdm_graph_run(c->s, c->key, setup_step, c, 0);
		t1 = tdm_now_ns();
		if (rc < 0)
			return setup_fail(c, rc, "tdm_graph_run");
		c->direct += rc == TDM_GRAPH_DIRECT;
		c->instantiated += rc == TDM_GRAPH_INSTANTIATED || rc == TDM_GRAPH_UPDATED;
		if (rc == TDM_GRAPH_REPLAYED) {
			c->replayed++;
			c->hit[c->nhit++] = t1 - t0;
		}
		TDM_AWAIT(t, tdm_await_stream(t, c->s));
		if (tdm_task_result(t) != 0)
			return setup_fail(c, tdm_task_result(t), "tdm_await_stream");
	}
	if (c->nhit == 0)
		return setup_fail(c, -EPROTO, "tdm_graph_run never said TDM_GRAPH_REPLAYED");
	TDM_END(t);
}

static void part_setup(struct gg_env *e)
{
	const struct gg_opts *o = e->o;
	uint32_t ns = o->kernel_us * 1000u;
	unsigned trials = GG_SETUP_TRIALS;

	if (!o->json) {
		printf(
		    "\nsetup: host costs in us, median of %u samples each (tandem: in a task on an "
		    "exclusive lease; cuda: raw_graph_chain_graph)\n",
		    trials);
		printf("%6s %-7s %9s %9s %9s %9s %9s %9s %9s %11s\n", "K", "impl", "record",
		       "instant.", "capture", "update", "destroy", "launch", "hit", "first_run");
	}
	for (int i = 0; i < o->nchains; i++) {
		unsigned k = o->chains[i];
		struct setup_task c = {.k = k, .trials = trials, .ns = ns};
		uint64_t *buf = calloc((size_t)trials * 7, sizeof(*buf));
		int rc;

		if (buf == NULL)
			gg_die("calloc", -ENOMEM);
		c.record = buf;
		c.inst = buf + trials;
		c.capture = buf + 2 * trials;
		c.update = buf + 3 * trials;
		c.destroy = buf + 4 * trials;
		c.launch = buf + 5 * trials;
		c.hit = buf + 6 * trials;
		c.key = 0x67726170680000ull + k; /* a key of its own per K */
		rc = tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &c.s);
		if (rc != 0)
			gg_die("tdm_stream_lease (exclusive)", rc);
		run_tasks(e, setup_fn, &c, sizeof(c), 1,
		          (double)(trials * 2 + 64) * chain_expect_ns(k, ns) * 3);
		if (c.g != NULL && tdm_graph_destroy(c.g) != 0 && c.err == 0)
			setup_fail(&c, -EINVAL, "tdm_graph_destroy");
		(void)tdm_graph_forget(e->gpu, c.key);
		rc = tdm_stream_release(c.s);
		if (rc != 0)
			gg_die("tdm_stream_release", rc);
		if (c.err != 0) {
			tandem_left_out("setup (tandem)", c.what, c.err);
		} else {
			double rec = (double)median_u64(c.record, trials) / 1e3,
			       ins = (double)median_u64(c.inst, trials) / 1e3,
			       cap = (double)median_u64(c.capture, trials) / 1e3,
			       upd = (double)median_u64(c.update, trials) / 1e3,
			       des = (double)median_u64(c.destroy, trials) / 1e3,
			       lau = (double)median_u64(c.launch, trials) / 1e3,
			       hit = (double)median_u64(c.hit, c.nhit) / 1e3;

			if (c.updated != trials)
				fprintf(
				    stderr,
				    "tandem-bench gpu-graph: note: K=%u: %u of %u captures into an "
				    "existing graph of the same topology updated it in place (%u "
				    "instantiated anew)\n",
				    k, c.updated, trials, c.reinstantiated);
			if (o->json) {
				json_head(e, "setup", "tandem");
				printf(",\"kernels\":%u,\"kernel_us\":%u,\"trials\":%u,\"record_"
				       "us\":%.3f,"
				       "\"instantiate_us\":%.3f,\"capture_us\":%.3f,\"update_us\":%"
				       ".3f,"
				       "\"updated_in_place\":%u,\"destroy_us\":%.3f,\"launch_us\":%"
				       ".3f,"
				       "\"hit_us\":%.3f,\"hits\":%u,\"cache_direct\":%llu,"
				       "\"cache_instantiated\":%llu}\n",
				       k, o->kernel_us, trials, rec, ins, cap, upd, c.updated, des,
				       lau, hit, c.nhit, (unsigned long long)c.direct,
				       (unsigned long long)c.instantiated);
			} else {
				printf("%6u %-7s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %11s\n",
				       k, "tandem", rec, ins, cap, upd, des, lau, hit, "-");
			}
		}
		free(buf);
#if HAVE_RAW
		if (!o->sim) {
			struct raw_graph_params p = {
			    .kernels = k, .ns = ns, .warmup = 0, .reps = 1, .setup_trials = trials};
			struct raw_graph_rate x;
			struct raw_graph_setup su;

			rc = raw_graph_chain_graph(&p, &x, &su);
			if (rc != 0) {
				raw_left_out("setup (cuda)", rc);
			} else if (o->json) {
				json_head(e, "setup", "cuda");
				printf(",\"kernels\":%u,\"kernel_us\":%u,\"trials\":%u,\"capture_"
				       "us\":%.3f,"
				       "\"instantiate_us\":%.3f,\"capture_instantiate_us\":%.3f,"
				       "\"update_us\":%.3f,\"destroy_us\":%.3f,\"first_launch_us\":"
				       "%.3f,"
				       "\"upload_us\":%.3f,\"uploaded_launch_us\":%.3f}\n",
				       k, o->kernel_us, su.trials, (double)su.capture_ns / 1e3,
				       (double)su.instantiate_ns / 1e3,
				       (double)(su.capture_ns + su.instantiate_ns) / 1e3,
				       (double)su.update_ns / 1e3, (double)su.exec_destroy_ns / 1e3,
				       (double)su.first_launch_ns / 1e3, (double)su.upload_ns / 1e3,
				       (double)su.uploaded_launch_ns / 1e3);
			} else {
				printf("%6u %-7s %9.2f %9.2f %9.2f %9.2f %9.2f %9s %9s %11.2f\n", k,
				       "cuda", (double)su.capture_ns / 1e3,
				       (double)su.instantiate_ns / 1e3,
				       (double)(su.capture_ns + su.instantiate_ns) / 1e3,
				       (double)su.update_ns / 1e3, (double)su.exec_destroy_ns / 1e3,
				       "-", "-", (double)su.first_launch_ns / 1e3);
			}
		}
#endif
		fflush(stdout);
	}
}

/* ---- dag: a diamond of 1 + 4 + 1 kernels ----------------------------------------------------- */

/*
 * What every implementation of the diamond gets: s[0] the root's and join's stream, s[1..] one
 * exclusive lease per branch, an event per stream, the kernels' length. An implementation is a
 * row of dag_impls[]: setup (in the measuring task, before the warm-up; may capture), submit (one
 * DAG's work, no await), await (of one DAG: a tdm_await_* call), teardown (on the main thread,
 * after the task). A DAG API's row (tdm_dag) fits the same four hooks: build the DAG in setup,
 * run it in submit, await it in await, free it in teardown; `state` is its own.
 */
struct dag_ctx {
	tdm_gpu *gpu;
	tdm_stream *s[GG_BRANCHES + 1];
	tdm_event *ev[GG_BRANCHES + 1];
	unsigned branches;
	uint32_t ns;
	tdm_graph *g; /* tandem-graph */
	void *state;  /* any other implementation's own */
};

struct dag_impl {
	const char *name;
	const char *kind; /* forked, serial or graph: the cuda row it compares with */
	int (*setup)(struct dag_ctx *c, const char **what);
	int (*submit)(struct dag_ctx *c, const char **what);
	int (*await)(tdm_task *t, struct dag_ctx *c);
	void (*teardown)(struct dag_ctx *c);
};

/* root on s0; each branch waits on it, runs, records; s0 waits on every branch; join on s0 */
static int dag_forked_submit(struct dag_ctx *c, const char **what)
{
	int rc;

	*what = "tdm_launch_spin (root)";
	if ((rc = tdm_launch_spin(c->s[0], c->ns)) != 0)
		return rc;
	*what = "tdm_event_record (root)";
	if ((rc = tdm_event_record(c->ev[0], c->s[0])) != 0)
		return rc;
	for (unsigned b = 1; b <= c->branches; b++) {
		*what = "tdm_stream_wait_event (fork)";
		if ((rc = tdm_stream_wait_event(c->s[b], c->ev[0])) != 0)
			return rc;
		*what = "tdm_launch_spin (branch)";
		if ((rc = tdm_launch_spin(c->s[b], c->ns)) != 0)
			return rc;
		*what = "tdm_event_record (branch)";
		if ((rc = tdm_event_record(c->ev[b], c->s[b])) != 0)
			return rc;
	}
	for (unsigned b = 1; b <= c->branches; b++) {
		*what = "tdm_stream_wait_event (join)";
		if ((rc = tdm_stream_wait_event(c->s[0], c->ev[b])) != 0)
			return rc;
	}
	*what = "tdm_launch_spin (join)";
	return tdm_launch_spin(c->s[0], c->ns);
}

static int dag_serial_submit(struct dag_ctx *c, const char **what)
{
	*what = "tdm_launch_spin";
	return launch_chain(c->s[0], c->branches + 2, c->ns);
}

static int dag_graph_setup(struct dag_ctx *c, const char **what)
{
	int rc;

	*what = "tdm_graph_capture_begin";
	if ((rc = tdm_graph_capture_begin(c->s[0])) != 0)
		return rc;
	rc = dag_forked_submit(c, what);
	{
		int end = tdm_graph_capture_end(c->s[0], &c->g);

		if (rc == 0 && end < 0) {
			*what = "tdm_graph_capture_end";
			rc = end;
		}
	}
	return rc;
}

static int dag_graph_submit(struct dag_ctx *c, const char **what)
{
	*what = "tdm_graph_launch";
	return tdm_graph_launch(c->s[0], c->g);
}

static void dag_graph_teardown(struct dag_ctx *c)
{
	if (c->g != NULL)
		(void)tdm_graph_destroy(c->g);
	c->g = NULL;
}

static int dag_await_root(tdm_task *t, struct dag_ctx *c)
{
	return tdm_await_stream(t, c->s[0]);
}

/* tdm_dag (tandem_graph.h): the same diamond described once; the warm-up's first runs lower it
 * onto streams with event edges, then it is captured, and the timed runs replay it. */
static int dag_dag_spin(tdm_stream *s, void *arg)
{
	return tdm_launch_spin(s, *(const uint32_t *)arg);
}

static int dag_dag_setup(struct dag_ctx *c, const char **what)
{
	tdm_dag *d;
	int rc, root, join[GG_BRANCHES];

	*what = "tdm_dag_create";
	if ((rc = tdm_dag_create(c->gpu, &d)) != 0)
		return rc;
	*what = "tdm_dag_kernel";
	if ((root = tdm_dag_kernel(d, dag_dag_spin, &c->ns, NULL, 0)) < 0) {
		tdm_dag_destroy(d);
		return root;
	}
	for (unsigned b = 0; b < c->branches; b++)
		if ((join[b] = tdm_dag_kernel(d, dag_dag_spin, &c->ns, &root, 1)) < 0) {
			tdm_dag_destroy(d);
			return join[b];
		}
	if ((rc = tdm_dag_kernel(d, dag_dag_spin, &c->ns, join, c->branches)) < 0) {
		tdm_dag_destroy(d);
		return rc;
	}
	c->state = d;
	return 0;
}

static int dag_dag_submit(struct dag_ctx *c, const char **what)
{
	(void)c;
	*what = "tdm_dag_run";
	return 0; /* tdm_dag_run enqueues and awaits in one call */
}

static int dag_dag_await(tdm_task *t, struct dag_ctx *c)
{
	return tdm_dag_run(t, c->s[0], c->state);
}

static void dag_dag_teardown(struct dag_ctx *c)
{
	if (c->state != NULL)
		(void)tdm_dag_destroy(c->state);
	c->state = NULL;
}

static const struct dag_impl dag_impls[] = {
    {"tandem-forked", "forked", NULL, dag_forked_submit, dag_await_root, NULL},
    {"tandem-serial", "serial", NULL, dag_serial_submit, dag_await_root, NULL},
    {"tandem-graph", "graph", dag_graph_setup, dag_graph_submit, dag_await_root,
     dag_graph_teardown},
    {"tandem-dag", "graph", dag_dag_setup, dag_dag_submit, dag_dag_await, dag_dag_teardown},
};
#define NDAG_IMPLS ((int)(sizeof(dag_impls) / sizeof(dag_impls[0])))

struct dag_task {
	const struct dag_impl *impl;
	struct dag_ctx *ctx;
	uint64_t warmup, reps, i, t0, first_ns, last_ns;
	uint64_t *samples;
	int err;
	const char *what;
};

static int dag_fail(struct dag_task *d, int err, const char *what)
{
	d->err = err;
	d->what = what;
	return err;
}

static int dag_fn(tdm_task *t, void *arg)
{
	struct dag_task *d = arg;
	const char *what = NULL;
	uint64_t t1;
	int rc;

	TDM_BEGIN(t);
	if (d->impl->setup != NULL && (rc = d->impl->setup(d->ctx, &what)) != 0)
		return dag_fail(d, rc, what);
	for (d->i = 0; d->i < d->warmup + d->reps; d->i++) {
		d->t0 = tdm_now_ns();
		rc = d->impl->submit(d->ctx, &what);
		if (rc != 0)
			return dag_fail(d, rc, what);
		TDM_AWAIT(t, d->impl->await(t, d->ctx));
		t1 = tdm_now_ns();
		if (tdm_task_result(t) != 0)
			return dag_fail(d, tdm_task_result(t), "await");
		if (d->i >= d->warmup) {
			if (d->i == d->warmup)
				d->first_ns = d->t0;
			d->samples[d->i - d->warmup] = t1 - d->t0;
			d->last_ns = t1;
		}
	}
	TDM_END(t);
}

enum { DAG_CUDA_FORKED, DAG_CUDA_SERIAL, DAG_CUDA_GRAPH, DAG_CUDA_N };
static const char *const dag_cuda_names[DAG_CUDA_N] = {"cuda-forked", "cuda-serial", "cuda-graph"};
static const char *const dag_kinds[DAG_CUDA_N] = {"forked", "serial", "graph"};

static int kind_index(const char *kind)
{
	for (int i = 0; i < DAG_CUDA_N; i++)
		if (strcmp(kind, dag_kinds[i]) == 0)
			return i;
	return -1;
}

static void dag_row(const struct gg_env *e, const char *name, const char *kind, uint32_t ns,
                    const struct rate *r, double serial_per_s, const struct rate *cuda)
{
	if (e->o->json) {
		json_head(e, "dag", name);
		printf(",\"shape\":\"%s\",\"branches\":%u,\"kernels\":%u,\"kernel_us\":%.3f,"
		       "\"reps\":%llu,\"dags_per_s\":%.1f,\"median_us\":%.3f,\"min_us\":%.3f,"
		       "\"floor_us\":%.3f",
		       kind, GG_BRANCHES, GG_BRANCHES + 2, (double)ns / 1e3,
		       (unsigned long long)r->reps, r->per_s, r->median_us, r->min_us,
		       (double)ns / 1e3 * (strcmp(kind, "serial") == 0 ? GG_BRANCHES + 2 : 3));
		if (strcmp(kind, "serial") != 0)
			json_ratio("ratio_serial", r->per_s, serial_per_s);
		if (cuda != NULL)
			json_ratio("ratio_cuda", r->per_s, cuda->have ? cuda->per_s : 0);
		printf("}\n");
		return;
	}
	printf("%9.1f %-14s %12.1f %11.2f %11.2f", (double)ns / 1e3, name, r->per_s, r->median_us,
	       r->min_us);
	if (strcmp(kind, "serial") != 0)
		print_ratio(r->per_s, serial_per_s);
	else
		printf(" %9s", "");
	if (cuda != NULL)
		print_ratio(r->per_s, cuda->have ? cuda->per_s : 0);
	printf("\n");
}

static void part_dag(struct gg_env *e)
{
	const struct gg_opts *o = e->o;
	struct dag_ctx c = {.gpu = e->gpu, .branches = GG_BRANCHES};
	uint64_t *samples = malloc((size_t)o->reps * sizeof(*samples));
	int rc = 0;
	unsigned leased = 0, events = 0;
	const char *what = NULL;

	if (samples == NULL)
		gg_die("malloc", -ENOMEM);
	if (!o->json) {
		printf("\ndag: a diamond (a root kernel, %u branches of one kernel each, a join "
		       "kernel), each awaited (tandem) or synchronised (cuda); median of %u reps; "
		       "forked/serial: DAGs/s over the same side's serial row; vs cuda: over the "
		       "cuda row of the same shape\n",
		       GG_BRANCHES, o->reps);
		printf("%9s %-14s %12s %11s %11s %9s %9s\n", "kernel_us", "impl", "DAGs/s",
		       "median_us", "min_us", "/serial", "vs cuda");
	}
	for (; leased <= GG_BRANCHES && rc == 0; leased++) {
		what = "tdm_stream_lease (exclusive)";
		rc = tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &c.s[leased]);
	}
	if (rc != 0)
		leased--;
	for (; events <= GG_BRANCHES && rc == 0; events++) {
		what = "tdm_event_get";
		rc = tdm_event_get(e->gpu, 0, &c.ev[events]);
	}
	if (rc != 0 && events > 0)
		events--;
	if (rc != 0)
		tandem_left_out("dag (tandem rows)", what, rc);
	for (int i = 0; i < o->ndag; i++) {
		uint32_t ns = o->dag_us[i] * 1000u;
		struct rate tr[NDAG_IMPLS], cr[DAG_CUDA_N];
		double tserial = 0, cserial = 0;

		memset(tr, 0, sizeof(tr));
		memset(cr, 0, sizeof(cr));
		c.ns = ns;
		for (int j = 0; j < NDAG_IMPLS && rc == 0; j++) {
			struct dag_task d = {.impl = &dag_impls[j],
			                     .ctx = &c,
			                     .warmup = gg_warmup(o),
			                     .reps = o->reps,
			                     .samples = samples};

			run_tasks(e, dag_fn, &d, sizeof(d), 1,
			          (double)(d.warmup + d.reps) * 6 * (ns + 20000.0));
			if (dag_impls[j].teardown != NULL)
				dag_impls[j].teardown(&c);
			if (d.err != 0) {
				tandem_left_out(dag_impls[j].name, d.what, d.err);
				continue;
			}
			tr[j] = rate_of(samples, d.reps, d.last_ns - d.first_ns);
			if (strcmp(dag_impls[j].kind, "serial") == 0 && tserial == 0)
				tserial = tr[j].per_s;
		}
#if HAVE_RAW
		if (!o->sim) {
			struct raw_graph_params p = {.ns = ns,
			                             .warmup = gg_warmup(o),
			                             .reps = o->reps,
			                             .branches = GG_BRANCHES};
			struct raw_graph_dag x;
			int rr = raw_graph_diamond(&p, &x);

			if (rr == 0) {
				cr[DAG_CUDA_FORKED] = rate_raw(&x.forked);
				cr[DAG_CUDA_SERIAL] = rate_raw(&x.serial);
				cr[DAG_CUDA_GRAPH] = rate_raw(&x.graph);
				cserial = cr[DAG_CUDA_SERIAL].per_s;
			} else {
				raw_left_out("cuda diamond", rr);
			}
		}
#endif
		for (int j = 0; j < DAG_CUDA_N; j++)
			if (cr[j].have)
				dag_row(e, dag_cuda_names[j], dag_kinds[j], ns, &cr[j], cserial,
				        NULL);
		for (int j = 0; j < NDAG_IMPLS; j++) {
			int ki = kind_index(dag_impls[j].kind);

			if (tr[j].have)
				dag_row(e, dag_impls[j].name, dag_impls[j].kind, ns, &tr[j],
				        tserial, ki >= 0 && (HAVE_RAW && !o->sim) ? &cr[ki] : NULL);
		}
		fflush(stdout);
	}
	for (unsigned j = 0; j < events; j++)
		(void)tdm_event_put(c.ev[j]);
	for (unsigned j = 0; j < leased; j++)
		(void)tdm_stream_release(c.s[j]);
	free(samples);
}

/* ---- options and main ------------------------------------------------------------------------ */

static int gg_usage(FILE *f)
{
	fputs("usage: tandem-bench gpu-graph [options]\n"
	      "  --backend cuda|sim  default cuda (no device: exit status 3); sim runs tandem's\n"
	      "                      simulator, without the plain-CUDA rows, with small defaults\n"
	      "  --reps N            timed reps of each measurement, after N/10+2 untimed ones\n"
	      "                      (default 200; sim 5); multi: chains per task and round\n"
	      "  --rounds N          multi: rounds, the median reported (default 3)\n"
	      "  --chains LIST       K, kernels per chain (default 10,100,1000; sim 10,100)\n"
	      "  --workers N         executor workers, and multi's tasks and streams (default 16;\n"
	      "                      sim 4)\n"
	      "  --kernel-us US      each chain kernel's spin, 0..1000000, 0 the empty kernel\n"
	      "                      (default 1)\n"
	      "  --dag-us LIST       dag: each diamond kernel's spin in us (default 1,10,100;\n"
	      "                      sim 1,10)\n"
	      "  --parts LIST        any of chain,multi,single,setup,dag (default all)\n"
	      "  --json              one JSON object per line\n",
	      f);
	return 2;
}

static int gg_parse(int argc, char **argv, struct gg_opts *o)
{
	int chains_given = 0, dag_given = 0;

	memset(o, 0, sizeof(*o));
	o->reps = 200;
	o->rounds = 3;
	o->workers = 16;
	o->kernel_us = 1;
	o->parts = (1u << NPARTS) - 1;
	struct bench_opt op = {.i = 1};
	int r;
	while ((r = bench_next_opt(argc, argv, "gpu-graph", &o->json, &op)) != 0) {
		if (r == 2) {
			(void)gg_usage(stdout);
			exit(0);
		}
		if (r < 0)
			return gg_usage(stderr);
		const char *v = op.value;
		int bad = 0;
#define IS(name) bench_opt_is(&op, name)
		if (IS("--backend")) {
			o->sim = strcmp(v, "sim") == 0;
			bad = !o->sim && strcmp(v, "cuda") != 0;
		} else if (IS("--reps")) {
			bad = bench_parse_uint(v, &o->reps, 1, 10000000u);
			o->reps_given = 1;
		} else if (IS("--rounds")) {
			bad = bench_parse_uint(v, &o->rounds, 1, 1000);
		} else if (IS("--chains")) {
			bad = bench_parse_list(v, o->chains, &o->nchains, GG_MAX_LIST, 1, 100000);
			chains_given = 1;
		} else if (IS("--workers")) {
			bad = bench_parse_uint(v, &o->workers, 1, TDM_MAX_WORKERS);
			o->workers_given = 1;
		} else if (IS("--kernel-us")) {
			bad = bench_parse_uint(v, &o->kernel_us, 0, GG_MAX_KERNEL_US);
		} else if (IS("--dag-us")) {
			bad = bench_parse_list(v, o->dag_us, &o->ndag, GG_MAX_LIST, 0,
			                       GG_MAX_KERNEL_US);
			dag_given = 1;
		} else if (IS("--parts")) {
			bad = bench_parse_parts(v, part_names, NPARTS, &o->parts);
		} else {
			bench_opt_refuse(&op, "gpu-graph", 1);
			return gg_usage(stderr);
		}
#undef IS
		if (bad) {
			bench_opt_refuse(&op, "gpu-graph", 0);
			return gg_usage(stderr);
		}
	}
	/* The simulator's defaults are small: it checks code paths, it measures nothing of a GPU.
	 */
	if (!o->reps_given && o->sim)
		o->reps = 5;
	if (!o->workers_given && o->sim)
		o->workers = 4;
	if (!chains_given) {
		static const unsigned def[] = {10, 100, 1000};
		o->nchains = o->sim ? 2 : 3;
		memcpy(o->chains, def, sizeof(def));
	}
	if (!dag_given) {
		static const unsigned def[] = {1, 10, 100};
		o->ndag = o->sim ? 2 : 3;
		memcpy(o->dag_us, def, sizeof(def));
	}
	return 0;
}

int bench_gpu_graph(int argc, char **argv)
{
	struct gg_opts o;
	struct gg_env e = {0};
	tdm_config c;
	tdm_gpu_config gc;
	tdm_device_info di;
	int rc = gg_parse(argc, argv, &o);

	if (rc != 0)
		return rc;
	e.o = &o;
	e.backend = o.sim ? "sim" : "cuda";
	/* Every kernel module loaded at start, on both sides: a first launch (lazy loading, CUDA's
	 * default) inside a capture or a timed rep would be measured. */
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	signal(SIGALRM, gg_stalled);
	tdm_config_init(&c);
	c.workers = o.workers;
	rc = tdm_executor_create(&e.ex, &c);
	if (rc != 0)
		gg_die("tdm_executor_create", rc);
	/* A stream per worker at least, so that multi's W exclusive leases and dag's five exist;
	 * bench_gpu_create's tdm_gpu_prepare gives each a hardware queue of its own (at most 32)
	 * before CUDA starts, for the plain-CUDA rows of this process too. */
	tdm_gpu_config_init(&gc);
	gc.streams_per_device = o.workers > 8 ? o.workers : 8;
	rc = bench_gpu_create(e.ex, &gc, o.sim, "gpu-graph", &e.gpu);
	if (rc != 0) {
		tdm_executor_destroy(e.ex);
		if (rc == -ENODEV)
			return 3;
		gg_die("tdm_gpu_create", rc);
	}
	e.connections = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	snprintf(e.device, sizeof(e.device), "%s", o.sim ? "tandem simulator" : "?");
	if (tdm_gpu_device_info(e.gpu, 0, &di) == 0 && di.name[0] != '\0')
		snprintf(e.device, sizeof(e.device), "%s", di.name);
	if (!o.json)
		printf("gpu-graph on %s (%s), %u workers, CUDA_DEVICE_MAX_CONNECTIONS %s; %s\n",
		       e.backend, e.device, o.workers, e.connections ? e.connections : "unset",
		       HAVE_RAW && !o.sim ? "plain-CUDA rows beside (raw_graph.cu)"
		                          : "no plain-CUDA rows (sim, or a build without CUDA)");
	if (o.parts & PART_CHAIN)
		part_chain(&e);
	if (o.parts & PART_MULTI)
		part_multi(&e);
	if (o.parts & PART_SINGLE)
		part_single(&e);
	if (o.parts & PART_SETUP)
		part_setup(&e);
	if (o.parts & PART_DAG)
		part_dag(&e);
	if (!o.json) {
		tdm_graph_stats st;

		if (tdm_graph_stats_get(e.gpu, &st) == 0)
			printf("\ngraph cache over the run: %llu direct, %llu instantiated, %llu "
			       "updated, %llu replayed, %llu evicted, %llu abandoned, %u cached\n",
			       (unsigned long long)st.direct, (unsigned long long)st.instantiated,
			       (unsigned long long)st.updated, (unsigned long long)st.replayed,
			       (unsigned long long)st.evicted, (unsigned long long)st.abandoned,
			       st.cached);
	}
	rc = tdm_gpu_destroy(e.gpu);
	if (rc != 0)
		gg_die("tdm_gpu_destroy", rc);
	rc = tdm_executor_destroy(e.ex);
	if (rc != 0)
		gg_die("tdm_executor_destroy", rc);
	return 0;
}
