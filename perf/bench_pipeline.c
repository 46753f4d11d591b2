// SPDX-License-Identifier: MIT
/*
 * perf/bench_pipeline.c: `tandem-bench pipeline`, tdm_pipeline_run on a copy-bound and a
 * compute-bound load, and beside it in the same run: the same work done synchronously, a
 * hand-written double-buffered CUDA version (pipeline_cuda.cu; CUDA builds on --backend cuda),
 * each GPU stage alone (the ideal a pipeline can reach) and the bidirectional copy rate. This file
 * owns the subcommand's options, its tandem-side implementations, timing and output;
 * perf/README.md says what is measured and why.
 */
#include "bench.h"
#include "pipeline_cuda.h"
#include "raw_cuda.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_sim.h" /* the kernels of tests and benchmarks (tandem_testing) */

#if defined(TANDEM_HAVE_CUDA) && TANDEM_HAVE_CUDA
#define HAVE_RAW 1
#else
#define HAVE_RAW 0
#endif

#define MIB ((size_t)1 << 20)

/* ---- the loads ------------------------------------------------------------------------------- */

struct load {
	const char *name;
	size_t bytes;     /* copied in and copied out per batch */
	uint32_t busy_ns; /* 0: the trivial kernel (y = 2x over the batch's first
	                     PIPE_CUDA_TRIVIAL_BYTES); else a kernel this long + a stamp copy */
};

/* The sim copies with memcpy on one thread per stream: smaller copy-bound batches keep a run
 * there to seconds (its figures only show that the code paths work). */
static const struct load loads_cuda[] = {{"copy-bound", 64 * MIB, 0},
                                         {"compute-bound", 1 * MIB, 2000000}};
static const struct load loads_sim[] = {{"copy-bound", 8 * MIB, 0},
                                        {"compute-bound", 1 * MIB, 2000000}};

/* What every implementation's host stages and kernels share. */
struct work {
	const struct load *l;
	int native;       /* cuda build on cuda: the busy kernel fills the device */
	int stamp_kernel; /* native only: the busy kernel copies the stamp (--stamp kernel) */
	atomic_uint bad;  /* batches whose stamp came back wrong */
	uint64_t batches; /* tandem pipeline: prepare ends after this many */
};

/* The host stages touch almost nothing, so that they are never the bottleneck: prepare stamps the
 * batch index into the first float, consume checks it came back (doubled by the scale kernel,
 * copied as it is by the busy load's stamp copy). */
static float stamp_of(uint64_t index)
{
	return (float)(index % 1048576u + 1u);
}

static void stamp(void *host_in, uint64_t index, void *user)
{
	(void)user;
	*(float *)host_in = stamp_of(index);
}

static void check(const void *host_out, uint64_t index, void *user)
{
	struct work *w = user;
	float want = stamp_of(index) * (w->l->busy_ns == 0 ? 2.0f : 1.0f);

	if (*(const float *)host_out != want)
		atomic_fetch_add(&w->bad, 1);
}

/* --trace: when batch 0's copy in was enqueued and its kernel launched (the calls' returns), on
 * tandem's side; set by the batch-0 task of the run being traced, read after the run. */
static uint64_t first_copied_ns, first_launched_ns;

/* The GPU stage on tandem's side: the same kernels as pipeline_cuda.cu's. */
static int work_compute(const struct work *w, tdm_stream *s, void *dev_out, const void *dev_in,
                        uint64_t index)
{
	int rc;

	(void)index; /* the trace's key; only the native busy kernel is traced */
	if (w->l->busy_ns == 0)
		return tdm_launch_scale(s, dev_out, dev_in, 2.0f,
		                        PIPE_CUDA_TRIVIAL_BYTES / sizeof(float));
#if HAVE_RAW
	if (w->native) {
		/* Our own launch on tandem's stream: bounded like tandem's own launches. */
		tdm_launch_begin(s);
		rc = pipe_cuda_busy(tdm_stream_native(s), w->l->busy_ns,
		                    w->stamp_kernel ? dev_out : NULL, dev_in, (int64_t)index);
		tdm_launch_end(s);
		if (w->stamp_kernel)
			return rc;
	} else
#endif
		rc = tdm_launch_spin(s, w->l->busy_ns);
	if (rc == 0)
		rc = tdm_memcpy_async(s, dev_out, dev_in, PIPE_CUDA_STAMP_BYTES, TDM_COPY_D2D);
	return rc;
}

/* ---- common ---------------------------------------------------------------------------------- */

_Noreturn static void die(const char *what, int err)
{
	fprintf(stderr, "tandem-bench pipeline: %s: %s\n", what, tdm_strerror(err));
	exit(1);
}

static void pmust(int err, const char *what)
{
	if (err != 0)
		die(what, err);
}

struct opts {
	int sim, json;
	int trace;        /* --trace: the compute-bound kernels' device-clock timeline, per run */
	int stamp_kernel; /* --stamp kernel: the busy kernel copies the stamp (no device copy) */
	int no_spin;      /* --no-spin: tdm_pipeline_config.no_spin */
	int metrics;      /* --metrics: one more run of the pipeline with tdm_gpu_metrics on */
	uint64_t batches;
	unsigned in_flight, streams, reps, cpus; /* streams 0: the pipeline's default */
};

struct env {
	tdm_executor *ex;
	tdm_gpu *gpu;
	/* One set of buffers for the synchronous version and the stages alone. */
	void *hin, *hout, *din, *dout;
};

/* The executor and the GPU layer; a backend without a device exits with status 3. */
static void env_open_gpu(struct env *e, const struct opts *o)
{
	tdm_config c;
	tdm_gpu_config g;
	int rc;

	tdm_config_init(&c);
	/* A worker per slot: no slot's task waits for a worker, and no idle worker spins beside
	 * the poller for nothing. */
	c.workers = o->in_flight < o->cpus ? o->in_flight : o->cpus;
	if (c.workers < 2)
		c.workers = 2;
	pmust(tdm_executor_create(&e->ex, &c), "tdm_executor_create");
	tdm_gpu_config_init(&g);
	rc = bench_gpu_create(e->ex, &g, o->sim, "pipeline", &e->gpu);
	if (rc == -ENODEV)
		exit(3);
	pmust(rc, "tdm_gpu_create");
}

static void env_open(struct env *e, const struct opts *o, size_t bytes)
{
	env_open_gpu(e, o);
	pmust(tdm_pinned_alloc(e->gpu, bytes, &e->hin), "tdm_pinned_alloc");
	pmust(tdm_pinned_alloc(e->gpu, bytes, &e->hout), "tdm_pinned_alloc");
	pmust(tdm_device_alloc(e->gpu, 0, bytes, &e->din), "tdm_device_alloc");
	pmust(tdm_device_alloc(e->gpu, 0, bytes, &e->dout), "tdm_device_alloc");
	memset(e->hin, 0, bytes);
	memset(e->hout, 0, bytes);
}

static void env_close(struct env *e)
{
	tdm_device_free(e->gpu, 0, e->dout);
	tdm_device_free(e->gpu, 0, e->din);
	tdm_pinned_free(e->gpu, e->hout);
	tdm_pinned_free(e->gpu, e->hin);
	pmust(tdm_gpu_destroy(e->gpu), "tdm_gpu_destroy");
	pmust(tdm_executor_destroy(e->ex), "tdm_executor_destroy");
}

/* Spawns fn(arg) as a resumable task from this (outside) thread and waits for it. */
static void run_task(struct env *e, tdm_resume_fn fn, void *arg)
{
	tdm_group g;

	pmust(tdm_group_init(&g, e->ex), "tdm_group_init");
	pmust(tdm_spawn(e->ex, fn, arg, &g), "tdm_spawn");
	pmust(tdm_group_wait(&g), "tdm_group_wait");
}

/* ---- tandem: tdm_pipeline_run ---------------------------------------------------------------- */

static int pipe_prepare(tdm_batch *b, void *user)
{
	struct work *w = user;

	if (b->index == w->batches)
		return TDM_PIPELINE_END;
	stamp(b->host_in, b->index, w);
	return 0;
}

static int pipe_compute(tdm_batch *b, void *user)
{
	/* The pipeline calls compute right after it enqueued the copy in. */
	if (b->index == 0)
		first_copied_ns = tdm_now_ns();
	int rc = work_compute(user, b->stream, b->dev_out, b->dev_in, b->index);
	if (b->index == 0)
		first_launched_ns = tdm_now_ns();
	return rc;
}

static int pipe_consume(tdm_batch *b, void *user)
{
	check(b->host_out, b->index, user);
	return 0;
}

/* Each of these returns the run's seconds and, in at[0] and at[1], its start and end on
 * tdm_now_ns's clock (for --trace). */
static double tandem_pipeline(struct env *e, struct work *w, const struct opts *o, uint64_t n,
                              uint64_t at[2])
{
	tdm_pipeline_config c = {
	    .device = 0,
	    .in_flight = o->in_flight,
	    .streams = o->streams,
	    .no_spin = o->no_spin,
	    .in_bytes = w->l->bytes,
	    .out_bytes = w->l->bytes,
	    .ordered = 1,
	    .prepare = pipe_prepare,
	    .compute = pipe_compute,
	    .consume = pipe_consume,
	    .user = w,
	};
	tdm_pipeline_stats st;

	w->batches = n;
	pmust(tdm_pipeline_run(e->gpu, &c, &st), "tdm_pipeline_run");
	if (st.batches != n)
		die("tdm_pipeline_run: batches missing", -EIO);
	at[0] = st.start_ns;
	at[1] = st.end_ns;
	return st.seconds;
}

/* ---- sync, and the stages alone: one task, one stream ---------------------------------------- */

enum which {
	W_SYNC,    /* per batch: prepare, copy in, compute, copy out, await, consume */
	W_H2D,     /* n copies in, back to back, one await */
	W_COMPUTE, /* n kernels, back to back, one await */
	W_D2H,     /* n copies out, back to back, one await */
	W_BIDIR,   /* n copies in on one stream and n copies out on another, at once */
};

struct one {
	struct env *e;
	struct work *w;
	enum which which;
	tdm_stream *s, *s2;
	uint64_t n, i, t0, t1;
	int err;
};

static int one_fail(struct one *k, int rc)
{
	if (k->err == 0)
		k->err = rc;
	return rc;
}

static int one_task(tdm_task *t, void *arg)
{
	struct one *k = arg;
	struct env *e = k->e;
	size_t bytes = k->w->l->bytes;
	int rc = 0;

	TDM_BEGIN(t);
	k->t0 = tdm_now_ns();
	if (k->which == W_SYNC) {
		for (k->i = 0; k->i < k->n; k->i++) {
			stamp(e->hin, k->i, k->w);
			rc = tdm_memcpy_async(k->s, e->din, e->hin, bytes, TDM_COPY_H2D);
			if (k->i == 0)
				first_copied_ns = tdm_now_ns();
			if (rc == 0)
				rc = work_compute(k->w, k->s, e->dout, e->din, k->i);
			if (k->i == 0)
				first_launched_ns = tdm_now_ns();
			if (rc == 0)
				rc = tdm_memcpy_async(k->s, e->hout, e->dout, bytes, TDM_COPY_D2H);
			if (rc != 0)
				return one_fail(k, rc);
			TDM_AWAIT(t, tdm_await_stream(t, k->s));
			if (tdm_task_result(t) != 0)
				return one_fail(k, tdm_task_result(t));
			check(e->hout, k->i, k->w);
		}
		k->t1 = tdm_now_ns();
		return 0;
	}
	for (uint64_t i = 0; i < k->n && rc == 0; i++) {
		if (k->which == W_H2D || k->which == W_BIDIR)
			rc = tdm_memcpy_async(k->s, e->din, e->hin, bytes, TDM_COPY_H2D);
		if (rc == 0 && k->which == W_COMPUTE) {
			if (i == 0)
				first_copied_ns = tdm_now_ns(); /* no copy: the moment it began */
			rc = work_compute(k->w, k->s, e->dout, e->din, i);
			if (i == 0)
				first_launched_ns = tdm_now_ns();
		}
		if (rc == 0 && k->which == W_D2H)
			rc = tdm_memcpy_async(k->s, e->hout, e->dout, bytes, TDM_COPY_D2H);
		if (rc == 0 && k->which == W_BIDIR)
			rc = tdm_memcpy_async(k->s2, e->hout, e->dout, bytes, TDM_COPY_D2H);
	}
	if (rc != 0)
		return one_fail(k, rc);
	TDM_AWAIT(t, tdm_await_stream(t, k->s));
	if (tdm_task_result(t) != 0)
		return one_fail(k, tdm_task_result(t));
	if (k->which == W_BIDIR) {
		TDM_AWAIT(t, tdm_await_stream(t, k->s2));
		if (tdm_task_result(t) != 0)
			return one_fail(k, tdm_task_result(t));
	}
	k->t1 = tdm_now_ns();
	TDM_END(t);
}

static double tandem_one(struct env *e, struct work *w, enum which which, uint64_t n,
                         uint64_t at[2])
{
	struct one k = {.e = e, .w = w, .which = which, .n = n};

	/* Exclusive: nothing else runs on the measured streams. */
	pmust(tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &k.s), "tdm_stream_lease");
	if (which == W_BIDIR)
		pmust(tdm_stream_lease(e->gpu, 0, TDM_STREAM_EXCLUSIVE, &k.s2), "tdm_stream_lease");
	run_task(e, one_task, &k);
	tdm_stream_release(k.s);
	if (k.s2 != NULL)
		tdm_stream_release(k.s2);
	if (k.err != 0)
		die("sync or stage task", k.err);
	at[0] = k.t0;
	at[1] = k.t1;
	return (double)(k.t1 - k.t0) / 1e9;
}

/* ---- the report ------------------------------------------------------------------------------ */

enum impl { I_TANDEM, I_SYNC, I_DB, I_H2D, I_COMPUTE, I_D2H, I_BIDIR, I_COUNT };
static const char *const impl_names[I_COUNT] = {"tandem",    "sync",          "cuda-double-buffer",
                                                "h2d-alone", "compute-alone", "d2h-alone",
                                                "bidir-copy"};

/* Bytes each row moved over PCIe per batch, in units of the batch size (compute moves none). */
static const int impl_copies[I_COUNT] = {2, 2, 2, 1, 0, 1, 2};

struct row {
	int have;
	double s[64]; /* seconds of each rep */
	double median;
};

static void finish_row(struct row *r, unsigned reps)
{
	qsort(r->s, reps, sizeof(r->s[0]), bench_cmp_double);
	r->median = reps % 2 ? r->s[reps / 2] : (r->s[reps / 2 - 1] + r->s[reps / 2]) / 2;
	r->have = 1;
}

static double gb_per_s(const struct load *l, enum impl i, uint64_t n, double s)
{
	return (double)impl_copies[i] * (double)l->bytes * (double)n / s / 1e9;
}

/* The most overlap efficiency any implementation of the load can show in this run: the copies
 * in and out share the link, so nothing that moves both beats bidir-copy (ideal / its time; for
 * the compute-bound load, where the kernels are the ideal, it is above 1 and says nothing). */
static double overlap_ceiling(double ideal, const struct row *r)
{
	return ideal / r[I_BIDIR].median;
}

static void report(const struct opts *o, const char *device, const struct load *l,
                   const struct row *r, const tdm_gpu_stats *ts)
{
	uint64_t n = o->batches;
	double ideal = r[I_H2D].median;

	if (r[I_COMPUTE].median > ideal)
		ideal = r[I_COMPUTE].median;
	if (r[I_D2H].median > ideal)
		ideal = r[I_D2H].median;
	for (int i = 0; i < I_COUNT; i++) {
		if (!r[i].have)
			continue;
		double s = r[i].median;
		if (o->json) {
			printf("{\"bench\":\"pipeline\",\"impl\":\"%s\",\"config\":\"%s\","
			       "\"backend\":\"%s\",\"device\":\"%s\",\"batches\":%llu,"
			       "\"in_bytes\":%zu,\"out_bytes\":%zu,\"kernel_us\":%u,",
			       impl_names[i], l->name, o->sim ? "sim" : "cuda", device,
			       (unsigned long long)n, l->bytes, l->bytes, l->busy_ns / 1000u);
			if (impl_copies[i] > 0)
				printf("\"gb_per_s\":%.3f,", gb_per_s(l, i, n, s));
			else
				printf("\"gb_per_s\":null,");
			printf("\"batches_per_s\":%.1f,", (double)n / s);
			if (i == I_TANDEM) {
				printf("\"overlap_efficiency\":%.4f,\"overlap_ceiling\":%.4f,"
				       "\"ideal_seconds\":%.6f,\"vs_bidir\":%.4f,"
				       "\"vs_compute_alone\":%.4f,",
				       ideal / s, overlap_ceiling(ideal, r), ideal,
				       r[I_BIDIR].median / s, s / r[I_COMPUTE].median);
				if (r[I_DB].have)
					printf("\"vs_double_buffer\":%.4f,", r[I_DB].median / s);
				printf("\"in_flight\":%u,\"streams\":%u,\"spin\":%s,", o->in_flight,
				       o->streams, o->no_spin ? "false" : "true");
				/* The poller's counts over the timed runs (tdm_gpu_stats). */
				bench_stats_json(ts);
				putchar(',');
			}
			/* Every timed run, fastest first: the spread behind the median. */
			printf("\"runs\":[");
			for (unsigned k = 0; k < o->reps; k++)
				printf("%s%.6f", k > 0 ? "," : "", r[i].s[k]);
			printf("],");
			if (l->busy_ns != 0)
				printf("\"stamp\":\"%s\",",
				       !o->sim && HAVE_RAW && o->stamp_kernel ? "kernel" : "copy");
			printf("\"seconds\":%.6f,\"reps\":%u,\"cpus\":%u}\n", s, o->reps, o->cpus);
			continue;
		}
		printf("%-14s %-19s %9.4f", l->name, impl_names[i], s);
		if (impl_copies[i] > 0)
			printf(" %9.2f", gb_per_s(l, i, n, s));
		else
			printf(" %9s", "-");
		printf(" %11.1f", (double)n / s);
		if (i == I_TANDEM)
			printf(" %8.3f", ideal / s);
		printf("\n");
	}
	if (o->json) {
		fflush(stdout);
		return;
	}
	/* The figures the pipeline is judged by, each against its target. */
	const double t = r[I_TANDEM].median;
	const char *tag_note = o->sim ? " (sim: not meaningful)" : "";
	if (l->busy_ns == 0)
		printf(
		    "  tandem / bidir-copy %.3f (target >= 0.90), overlap efficiency %.3f (target "
		    ">= 0.90; the copies in both directions alone reach %.3f in this run)",
		    r[I_BIDIR].median / t, ideal / t, overlap_ceiling(ideal, r));
	else
		printf(
		    "  tandem vs compute-alone %+.2f%% (target <= +5%%), overlap efficiency %.3f",
		    (t / r[I_COMPUTE].median - 1.0) * 100.0, ideal / t);
	if (r[I_DB].have)
		printf(", tandem / double-buffer %.3fx (target >= 1.00)", r[I_DB].median / t);
	printf("%s\n", tag_note);
	fflush(stdout);
}

/* ---- running it ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fputs("usage: tandem-bench pipeline [options]\n"
	      "  --backend B     cuda or sim (default cuda; no device exits with status 3)\n"
	      "  --batches N     batches per run (default 200 on cuda, 20 on sim)\n"
	      "  --in-flight K   slots of the tandem pipeline, 1..64 (default 8)\n"
	      "  --streams S     streams its batches take turns on, 1..K (default: the\n"
	      "                  pipeline's, 0 in the output)\n"
	      "  --no-spin       no worker stays awake for the pipeline (tdm_pipeline_config\n"
	      "                  no_spin)\n"
	      "  --reps R        timed runs of each implementation, 1..64 (default 15)\n"
	      "  --stamp S       compute-bound: copy (a 64-byte device copy after the kernel) or\n"
	      "                  kernel (the kernel copies it; default); sim always copies\n"
	      "  --trace         compute-bound, cuda only: also where each run's time went, from\n"
	      "                  the kernels' own device-clock spans (one line per run)\n"
	      "  --metrics       after the timed runs, one more run of the tandem pipeline with\n"
	      "                  tdm_gpu_metrics on (the copies alone as the peak), beside its\n"
	      "                  own rate (one line)\n"
	      "  --json          one JSON object per line instead of a table\n",
	      f);
}

_Noreturn static void bad(const char *what, const char *val)
{
	fprintf(stderr, "tandem-bench pipeline: %s '%s'\n", what, val);
	usage(stderr);
	exit(2);
}

static uint64_t parse_count(const char *opt, const char *val, uint64_t lo, uint64_t hi)
{
	uint64_t v;

	if (bench_parse_u64(val, lo, hi, &v) != 0)
		bad(opt, val);
	return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	int batches_given = 0;

	memset(o, 0, sizeof(*o));
	o->in_flight = 8;
	o->reps = 15;
	o->stamp_kernel = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *val = NULL;
		size_t len = eq != NULL ? (size_t)(eq - a) : strlen(a);
		char name[32];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(a, "--json") == 0) {
			o->json = 1;
			continue;
		}
		if (strcmp(a, "--trace") == 0) {
			o->trace = 1;
			continue;
		}
		if (strcmp(a, "--no-spin") == 0) {
			o->no_spin = 1;
			continue;
		}
		if (strcmp(a, "--metrics") == 0) {
			o->metrics = 1;
			continue;
		}
		if (strcmp(a, "pipeline") == 0)
			continue; /* the subcommand: bench.c hands over the whole command line */
		if (len >= sizeof(name))
			bad("unknown option", a);
		memcpy(name, a, len);
		name[len] = '\0';
		if (strcmp(name, "--backend") != 0 && strcmp(name, "--batches") != 0 &&
		    strcmp(name, "--in-flight") != 0 && strcmp(name, "--reps") != 0 &&
		    strcmp(name, "--stamp") != 0 && strcmp(name, "--streams") != 0)
			bad("unknown option", a);
		if (eq != NULL)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else
			bad("a value is missing after", a);
		if (strcmp(name, "--backend") == 0) {
			if (strcmp(val, "cuda") != 0 && strcmp(val, "sim") != 0)
				bad("--backend: neither cuda nor sim:", val);
			o->sim = strcmp(val, "sim") == 0;
		} else if (strcmp(name, "--batches") == 0) {
			o->batches = parse_count("--batches: not in 1..1000000:", val, 1, 1000000);
			batches_given = 1;
		} else if (strcmp(name, "--in-flight") == 0) {
			o->in_flight = (unsigned)parse_count("--in-flight: not in 1..64:", val, 1,
			                                     TDM_PIPELINE_MAX_IN_FLIGHT);
		} else if (strcmp(name, "--streams") == 0) {
			o->streams = (unsigned)parse_count("--streams: not in 1..64:", val, 1,
			                                   TDM_PIPELINE_MAX_IN_FLIGHT);
		} else if (strcmp(name, "--stamp") == 0) {
			if (strcmp(val, "copy") != 0 && strcmp(val, "kernel") != 0)
				bad("--stamp: neither copy nor kernel:", val);
			o->stamp_kernel = strcmp(val, "kernel") == 0;
		} else {
			o->reps = (unsigned)parse_count("--reps: not in 1..64:", val, 1, 64);
		}
	}
	if (!batches_given)
		o->batches = o->sim ? 20 : 200;
	if (o->streams > o->in_flight) {
		fprintf(stderr, "tandem-bench pipeline: --streams %u is more than --in-flight %u\n",
		        o->streams, o->in_flight);
		exit(2);
	}
	if (o->trace && (o->sim || !HAVE_RAW))
		bad("--trace: needs --backend cuda in a CUDA build; backend",
		    o->sim ? "sim" : "cuda");
	o->cpus = bench_cpus();
}

#if HAVE_RAW
/* --trace: is this run traced? The busy kernel is the only one that records. */
static int traced(const struct opts *o, const struct work *w)
{
	return o->trace && w->native && w->l->busy_ns != 0;
}
#endif

static void trace_begin(const struct opts *o, const struct work *w, uint64_t n)
{
	first_copied_ns = first_launched_ns = 0;
#if HAVE_RAW
	if (traced(o, w) && pipe_cuda_trace_begin(n) != 0)
		die(pipe_cuda_error(), -EIO);
#else
	(void)o, (void)w, (void)n;
#endif
}

/* One line per traced run: its host-clock time split into the kernels' device-clock span and
 * the rest (host start-up, the first copy in, the last copy out, finding the end). */
static void trace_end(const struct opts *o, const struct work *w, enum impl i, unsigned rep,
                      uint64_t n, const uint64_t at[2], const struct pipe_cuda_db *db)
{
#if HAVE_RAW
	struct pipe_cuda_trace t;

	if (!traced(o, w))
		return;
	if (pipe_cuda_trace_read(n, at[0], at[1], &t) != 0)
		die(pipe_cuda_error(), -EIO);
	uint64_t copied = first_copied_ns, launched = first_launched_ns;
	if (i == I_DB)
		pipe_cuda_db_first_issue(db, &copied, &launched);
	/* The lead's host part: batch 0's copy in and kernel launch returned this long after the
	 * start (-1: not seen). */
	double copied_us = copied >= at[0] && copied != 0 ? (double)(copied - at[0]) / 1e3 : -1;
	double launched_us =
	    launched >= at[0] && launched != 0 ? (double)(launched - at[0]) / 1e3 : -1;
	double seconds = (double)(at[1] - at[0]) / 1e9, span = (double)t.span_ns / 1e9;
	if (o->json)
		printf("{\"bench\":\"pipeline-trace\",\"config\":\"%s\",\"impl\":\"%s\","
		       "\"rep\":%u,\"in_flight\":%u,\"seconds\":%.6f,\"span_s\":%.6f,"
		       "\"outside_span_us\":%.1f,\"kernels_s\":%.6f,\"gap_sum_us\":%.1f,"
		       "\"gap_max_us\":%.1f,\"idle_gaps\":%llu,\"out_of_order\":%llu,"
		       "\"lead_us\":%.1f,\"copied_us\":%.1f,\"launched_us\":%.1f,"
		       "\"tail_us\":%.1f,\"clock_window_us\":%.1f}\n",
		       w->l->name, impl_names[i], rep, o->in_flight, seconds, span,
		       (seconds - span) * 1e6, (double)t.kernels_ns / 1e9,
		       (double)t.gap_sum_ns / 1e3, (double)t.gap_max_ns / 1e3,
		       (unsigned long long)t.idle_gaps, (unsigned long long)t.out_of_order,
		       (double)t.lead_ns / 1e3, copied_us, launched_us, (double)t.tail_ns / 1e3,
		       (double)t.clock_window_ns / 1e3);
	else
		printf("  trace %-19s run %u: %.6f s = kernels' span %.6f s + %.1f us outside it "
		       "(%.1f before the first kernel, its copy in and launch issued at %.1f and "
		       "%.1f; %.1f after the last, +-%.1f); gaps between "
		       "kernels %+.1f us in all, largest %+.1f us, %llu with the device idle "
		       "first; %llu steps back in batch order\n",
		       impl_names[i], rep, seconds, span, (seconds - span) * 1e6,
		       (double)t.lead_ns / 1e3, copied_us, launched_us, (double)t.tail_ns / 1e3,
		       (double)t.clock_window_ns / 1e3, (double)t.gap_sum_ns / 1e3,
		       (double)t.gap_max_ns / 1e3, (unsigned long long)t.idle_gaps,
		       (unsigned long long)t.out_of_order);
#else
	(void)o, (void)w, (void)i, (void)rep, (void)n, (void)at, (void)db;
#endif
}

/*
 * --metrics: the tandem pipeline once more, its device measured by tdm_gpu_metrics from the
 * stamps, against its own figures: the copies' rate over the run against the metrics' bytes
 * over the window, and the share of the copies-alone rate (set as the peak).
 */
static void metrics_run(struct env *e, struct work *w, const struct opts *o, const struct load *l,
                        const struct row *r)
{
	uint64_t n = o->batches, at[2];
	double h2d_peak = gb_per_s(l, I_H2D, n, r[I_H2D].median);
	double d2h_peak = gb_per_s(l, I_D2H, n, r[I_D2H].median);
	static tdm_gpu_metrics m; /* 36 KiB */

	pmust(tdm_gpu_metrics_peak(e->gpu, 0, h2d_peak, d2h_peak), "tdm_gpu_metrics_peak");
	pmust(tdm_gpu_metrics_start(e->gpu), "tdm_gpu_metrics_start");
	double s = tandem_pipeline(e, w, o, n, at);
	pmust(tdm_gpu_metrics_stop(e->gpu), "tdm_gpu_metrics_stop");
	pmust(tdm_gpu_metrics_get(e->gpu, &m), "tdm_gpu_metrics_get");
	const tdm_device_metrics *d = &m.devices[0];
	double window = (double)(m.end_ns - m.start_ns) / 1e9;
	double own = gb_per_s(l, I_TANDEM, n, s);
	/* The metrics' bytes over the run's own seconds: the same measure as gb_per_s. */
	double from_metrics = (double)(d->h2d_bytes + d->d2h_bytes) / s / 1e9;
	if (o->json) {
		printf("{\"bench\":\"pipeline-metrics\",\"config\":\"%s\",\"backend\":\"%s\","
		       "\"batches\":%llu,\"seconds\":%.6f,\"window_seconds\":%.6f,"
		       "\"gb_per_s\":%.3f,\"metrics_gb_per_s\":%.3f,\"h2d_bytes\":%llu,"
		       "\"d2h_bytes\":%llu,\"h2d_gbps_window\":%.3f,\"d2h_gbps_window\":%.3f,"
		       "\"h2d_gbps\":%.3f,\"d2h_gbps\":%.3f,\"h2d_peak\":%.3f,\"d2h_peak\":%.3f,"
		       "\"h2d_share\":%.4f,\"d2h_share\":%.4f,\"busy_fraction\":%.4f,"
		       "\"h2d_fraction\":%.4f,\"d2h_fraction\":%.4f,\"kernels\":%llu,"
		       "\"copies\":%llu,\"awaits\":%llu,\"await_p50_ns\":%llu,"
		       "\"await_p99_ns\":%llu}\n",
		       l->name, o->sim ? "sim" : "cuda", (unsigned long long)n, s, window, own,
		       from_metrics, (unsigned long long)d->h2d_bytes,
		       (unsigned long long)d->d2h_bytes, d->h2d_gbps_window, d->d2h_gbps_window,
		       d->h2d_gbps, d->d2h_gbps, h2d_peak, d2h_peak, d->h2d_share, d->d2h_share,
		       d->busy_fraction, d->h2d_fraction, d->d2h_fraction,
		       (unsigned long long)d->kernels, (unsigned long long)d->copies,
		       (unsigned long long)m.awaits.count, (unsigned long long)m.awaits.p50_ns,
		       (unsigned long long)m.awaits.p99_ns);
		fflush(stdout);
		return;
	}
	printf("%s, the pipeline with metrics on: %.2f GB/s by its own count, %.2f GB/s from the "
	       "metrics' bytes\n",
	       l->name, own, from_metrics);
	tdm_metrics_print(&m, stdout);
}

static void run_load(const struct opts *o, const char *device, const struct load *l)
{
	struct env e;
	struct work w = {.l = l, .native = HAVE_RAW && !o->sim};
	w.stamp_kernel = w.native && o->stamp_kernel;
	struct row r[I_COUNT];
	uint64_t n = o->batches, warm = 2 * (uint64_t)o->in_flight;

	if (warm > n)
		warm = n;
	memset(r, 0, sizeof(r));
	atomic_init(&w.bad, 0);
	env_open(&e, o, l->bytes);
#if HAVE_RAW
	struct pipe_cuda_db *db = NULL;
	struct pipe_cuda_work pw = {l->bytes, l->busy_ns, w.stamp_kernel, stamp, check, &w};
	if (!o->sim) {
		int rc = pipe_cuda_db_create(&db, &pw);
		if (rc != 0) {
			fprintf(stderr,
			        "tandem-bench pipeline: cuda-double-buffer left out: %s (%s)\n",
			        pipe_cuda_error(), tdm_strerror(rc));
			db = NULL;
		}
	}
#endif
	/* Warm-up, untimed: streams, events, the pinned pool's chunks, first touch. */
	uint64_t at[2];
	tandem_pipeline(&e, &w, o, warm, at);
	tandem_one(&e, &w, W_SYNC, warm, at);
	tandem_one(&e, &w, W_BIDIR, warm, at);
	/* The rows that make the ideal too: a cold first round of one would raise the ideal, and
	 * with it the overlap efficiency, where --reps is small. */
	tandem_one(&e, &w, W_H2D, warm, at);
	tandem_one(&e, &w, W_COMPUTE, warm, at);
	tandem_one(&e, &w, W_D2H, warm, at);
#if HAVE_RAW
	if (db != NULL && pipe_cuda_db_run(db, warm, &at[0], &at[1]) != 0)
		die(pipe_cuda_error(), -EIO);
#endif
	/* Reps interleaved, so that a drift of the machine over the run hits every row alike. */
	tdm_gpu_stats ts, t0, t1;
	memset(&ts, 0, sizeof(ts));
	for (unsigned k = 0; k < o->reps; k++) {
		trace_begin(o, &w, n);
		pmust(tdm_gpu_stats_get(e.gpu, &t0), "tdm_gpu_stats_get");
		r[I_TANDEM].s[k] = tandem_pipeline(&e, &w, o, n, at);
		pmust(tdm_gpu_stats_get(e.gpu, &t1), "tdm_gpu_stats_get");
		bench_stats_add_delta(&ts, &t0, &t1);
		trace_end(o, &w, I_TANDEM, k, n, at, NULL);
		trace_begin(o, &w, n);
		r[I_SYNC].s[k] = tandem_one(&e, &w, W_SYNC, n, at);
		trace_end(o, &w, I_SYNC, k, n, at, NULL);
#if HAVE_RAW
		if (db != NULL) {
			trace_begin(o, &w, n);
			int rc = pipe_cuda_db_run(db, n, &at[0], &at[1]);
			if (rc != 0)
				die(pipe_cuda_error(), rc);
			r[I_DB].s[k] = (double)(at[1] - at[0]) / 1e9;
			trace_end(o, &w, I_DB, k, n, at, db);
		}
#endif
		r[I_H2D].s[k] = tandem_one(&e, &w, W_H2D, n, at);
		trace_begin(o, &w, n);
		r[I_COMPUTE].s[k] = tandem_one(&e, &w, W_COMPUTE, n, at);
		trace_end(o, &w, I_COMPUTE, k, n, at, NULL);
		r[I_D2H].s[k] = tandem_one(&e, &w, W_D2H, n, at);
		r[I_BIDIR].s[k] = tandem_one(&e, &w, W_BIDIR, n, at);
	}
	for (int i = 0; i < I_COUNT; i++)
		if (i != I_DB)
			finish_row(&r[i], o->reps);
	if (o->metrics)
		metrics_run(&e, &w, o, l, r);
#if HAVE_RAW
	if (db != NULL)
		finish_row(&r[I_DB], o->reps);
	pipe_cuda_db_destroy(db);
#endif
	env_close(&e);
	if (atomic_load(&w.bad) != 0) {
		fprintf(stderr, "tandem-bench pipeline: %s: %u batches came back wrong\n", l->name,
		        atomic_load(&w.bad));
		exit(1);
	}
	report(o, device, l, r, &ts);
}

int bench_pipeline(int argc, char **argv)
{
	struct opts o;
	char device[96];
	const struct load *loads;

	parse(argc, argv, &o);
	loads = o.sim ? loads_sim : loads_cuda;
	struct env probe;
	env_open_gpu(&probe, &o); /* before any output: no device exits with status 3 */
	pmust(tdm_gpu_destroy(probe.gpu), "tdm_gpu_destroy");
	pmust(tdm_executor_destroy(probe.ex), "tdm_executor_destroy");
	snprintf(device, sizeof(device), "%s", o.sim ? "tandem simulator" : "?");
#if HAVE_RAW
	if (!o.sim && raw_cuda_device_name(device, sizeof(device)) != 0)
		snprintf(device, sizeof(device), "?");
	for (char *p = device; *p != '\0'; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
			*p = ' '; /* it goes into JSON strings as it is */
#endif
	if (!o.json) {
		printf("pipeline on %s (%s): %llu batches per run, tandem with %u in flight "
		       "(ordered), --streams %u (0: the default)%s, median of %u runs\n",
		       o.sim ? "sim" : "cuda", device, (unsigned long long)o.batches, o.in_flight,
		       o.streams, o.no_spin ? ", --no-spin" : "", o.reps);
		printf("%-14s %-19s %9s %9s %11s %8s\n", "config", "impl", "seconds", "GB/s",
		       "batches/s", "overlap");
	}
	for (int k = 0; k < 2; k++)
		run_load(&o, device, &loads[k]);
	return 0;
}
