// SPDX-License-Identifier: MIT
/*
 * perf/bench_pinned.c: `tandem-bench pinned`, the cost of one allocation and free of pinned host
 * memory: tandem's pool, warm, from a worker (inside a task) and from a thread that is not a
 * worker, beside cudaHostAlloc + cudaFreeHost (through tdm_host_alloc / tdm_host_free, which
 * call them directly; cuda backend only) and malloc + free, for 4 KiB, 64 KiB, 1 MiB and 16 MiB.
 * It parses its own options; bench.c only hands it the command line. perf/README.md says what
 * it measures and how.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_gpu.h"

#define MAX_REPS 1000
/* cudaHostAlloc takes milliseconds per MiB: a few pairs a rep are enough. */
#define HOST_PAIRS 10

static const size_t sizes[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

enum impl { POOL_WORKER, POOL_OUTSIDE, HOST_ALLOC, MALLOC, NIMPL };
static const char *const impl_names[NIMPL] = {"pool-worker", "pool-outside", "cudaHostAlloc",
                                              "malloc"};

struct opts {
	int sim, json;
	unsigned reps;
	uint64_t pairs; /* per rep, pool and malloc */
};

/* What one measurement needs; a task on a worker fills ns[] for the worker's run. */
struct run {
	const struct opts *o;
	tdm_executor *ex;
	tdm_gpu *gpu;
	enum impl impl;
	size_t bytes;
	int rc;
	double ns[MAX_REPS]; /* per pair, one per rep */
	uint64_t warm_pinned,
	    end_pinned; /* the pool's bytes_pinned after the warm-up, at the end */
};

static void usage(FILE *f)
{
	fputs(
	    "usage: tandem-bench pinned [--backend cuda|sim] [--reps N] [--n N] [--json]\n"
	    "  --backend B  cuda or sim (default cuda; no device exits with status 3)\n"
	    "  --reps N     timed reps per (implementation, size), after one untimed (default 11)\n"
	    "  --n N        alloc+free pairs per rep for the pool and malloc (default 100000;\n"
	    "               cudaHostAlloc: 10)\n"
	    "  --json       one JSON object per line instead of a table\n",
	    f);
}

_Noreturn static void bad(const char *msg, const char *arg)
{
	fprintf(stderr, "tandem-bench: pinned: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
	usage(stderr);
	exit(2);
}

static uint64_t number(const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
	uint64_t v;
	if (s == NULL || s[0] < '0' || s[0] > '9')
		bad("expected a number after", opt);
	if (bench_parse_u64(s, lo, hi, &v) != 0)
		bad("value out of range for", opt);
	return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	int seen_cmd = 0;
	memset(o, 0, sizeof(*o));
	o->reps = 11;
	o->pairs = 100000;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *val;
		size_t len = eq != NULL ? (size_t)(eq - a) : strlen(a);
		if (!seen_cmd && strcmp(a, "pinned") == 0) {
			seen_cmd = 1;
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
		val = eq != NULL ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
		if (len == 9 && strncmp(a, "--backend", len) == 0) {
			if (val == NULL || (strcmp(val, "cuda") != 0 && strcmp(val, "sim") != 0))
				bad("--backend takes cuda or sim, not", val ? val : "nothing");
			o->sim = strcmp(val, "sim") == 0;
		} else if (len == 6 && strncmp(a, "--reps", len) == 0) {
			o->reps = (unsigned)number("--reps", val, 1, MAX_REPS);
		} else if (len == 3 && strncmp(a, "--n", len) == 0) {
			o->pairs = number("--n", val, 1, 100000000);
		} else {
			bad("unknown option", a);
		}
	}
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Keeps the compiler from pairing malloc with free away. */
static void *volatile sink;

/* ns per pair over `pairs` pairs; 0 or a negative errno in r->rc. */
static double time_pairs(struct run *r, uint64_t pairs)
{
	void *p = NULL;
	int rc = 0;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < pairs && rc == 0; i++) {
		switch (r->impl) {
		case POOL_WORKER:
		case POOL_OUTSIDE:
			rc = tdm_pinned_alloc(r->gpu, r->bytes, &p);
			if (rc == 0)
				rc = tdm_pinned_free(r->gpu, p);
			break;
		case HOST_ALLOC:
			rc = tdm_host_alloc(r->gpu, r->bytes, &p);
			if (rc == 0)
				rc = tdm_host_free(r->gpu, p);
			break;
		default:
			p = malloc(r->bytes);
			rc = p != NULL ? 0 : -ENOMEM;
			sink = p;
			free(p);
			break;
		}
	}
	uint64_t t1 = now_ns();
	if (rc != 0 && r->rc == 0)
		r->rc = rc;
	return (double)(t1 - t0) / (double)pairs;
}

/* One untimed rep (the warm-up: chunks pinned, caches filled), then the timed ones. */
static void measure(struct run *r)
{
	uint64_t pairs = r->impl == HOST_ALLOC ? HOST_PAIRS : r->o->pairs;
	tdm_pinned_stats s;
	time_pairs(r, r->impl == HOST_ALLOC ? 1 : pairs);
	tdm_pinned_stats_get(r->gpu, &s);
	r->warm_pinned = s.bytes_pinned;
	for (unsigned k = 0; k < r->o->reps; k++)
		r->ns[k] = time_pairs(r, pairs);
	tdm_pinned_stats_get(r->gpu, &s);
	r->end_pinned = s.bytes_pinned;
}

static void measure_task(void *arg)
{
	struct run *r = arg;
	if (tdm_worker_index(r->ex) < 0)
		r->rc = -EPERM; /* cannot happen: a task runs on a worker */
	measure(r);
}

static const char *size_name(size_t b, char *buf, size_t len)
{
	if (b >= (1u << 20))
		snprintf(buf, len, "%zu MiB", b >> 20);
	else
		snprintf(buf, len, "%zu KiB", b >> 10);
	return buf;
}

int bench_pinned(int argc, char **argv)
{
	struct opts o;
	tdm_config c;
	tdm_gpu_config g;
	tdm_executor *ex = NULL;
	tdm_gpu *gpu = NULL;
	int rc;

	parse(argc, argv, &o);
	tdm_config_init(&c);
	c.workers = 1; /* the worker runs the measuring task; nothing else runs */
	if ((rc = tdm_executor_create(&ex, &c)) != 0) {
		fprintf(stderr, "tandem-bench: tdm_executor_create: %s\n", tdm_strerror(rc));
		return 1;
	}
	tdm_gpu_config_init(&g);
	/* Default pool settings: 64 MiB chunks, so every size here is a size class of the pool. */
	rc = bench_gpu_create(ex, &g, o.sim, "pinned", &gpu);
	if (rc == -ENODEV) {
		tdm_executor_destroy(ex);
		return 3;
	}
	if (rc != 0) {
		fprintf(stderr, "tandem-bench: tdm_gpu_create: %s\n", tdm_strerror(rc));
		tdm_executor_destroy(ex);
		return 1;
	}

	struct run *r = calloc(1, sizeof(*r));
	double result[NSIZES][NIMPL];
	if (r == NULL) {
		fprintf(stderr, "tandem-bench: out of memory\n");
		return 1;
	}
	if (!o.json)
		printf("pinned alloc+free, backend %s: ns per pair, bench_median of %u reps "
		       "(pool and malloc: %llu pairs a rep; cudaHostAlloc: %d)\n",
		       o.sim ? "sim" : "cuda", o.reps, (unsigned long long)o.pairs, HOST_PAIRS);
	for (size_t s = 0; s < NSIZES; s++) {
		for (int k = 0; k < NIMPL; k++) {
			tdm_pinned_stats after;
			result[s][k] = -1;
			if (k == HOST_ALLOC && o.sim)
				continue; /* the sim's host_alloc is aligned_alloc: not a baseline
				           */
			memset(r, 0, sizeof(*r));
			*r = (struct run){
			    .o = &o, .ex = ex, .gpu = gpu, .impl = (enum impl)k, .bytes = sizes[s]};
			if (k == POOL_WORKER) {
				tdm_group grp;
				tdm_group_init(&grp, ex);
				tdm_group_spawn(&grp, measure_task, r);
				tdm_group_wait(&grp);
			} else {
				measure(r);
			}
			tdm_pinned_stats_get(gpu, &after);
			if (r->rc != 0) {
				fprintf(stderr, "tandem-bench: pinned: %s, %zu bytes: %s\n",
				        impl_names[k], sizes[s], tdm_strerror(r->rc));
				return 1;
			}
			result[s][k] = bench_median(r->ns, o.reps);
			if (o.json) {
				printf(
				    "{\"bench\":\"pinned\",\"impl\":\"%s\",\"backend\":\"%s\","
				    "\"bytes\":%zu,\"ns_per_op\":%.1f,\"min_ns\":%.1f,\"reps\":%u,"
				    "\"pairs\":%llu,\"chunks\":%llu,\"bytes_pinned\":%llu}\n",
				    impl_names[k], o.sim ? "sim" : "cuda", sizes[s], result[s][k],
				    r->ns[0], o.reps,
				    (unsigned long long)(k == HOST_ALLOC ? HOST_PAIRS : o.pairs),
				    (unsigned long long)after.chunks,
				    (unsigned long long)after.bytes_pinned);
				fflush(stdout);
			}
			/* The warm-up pinned what the timed reps need; growth would be timed. */
			if (k <= POOL_OUTSIDE && r->end_pinned != r->warm_pinned)
				fprintf(stderr,
				        "tandem-bench: note: the pool grew from %llu to %llu bytes "
				        "during the timed reps of %s, %zu bytes\n",
				        (unsigned long long)r->warm_pinned,
				        (unsigned long long)r->end_pinned, impl_names[k], sizes[s]);
		}
	}
	if (!o.json) {
		printf("%8s", "bytes");
		for (int k = 0; k < NIMPL; k++)
			printf(" %14s", impl_names[k]);
		printf("\n");
		for (size_t s = 0; s < NSIZES; s++) {
			char buf[32];
			printf("%8s", size_name(sizes[s], buf, sizeof(buf)));
			for (int k = 0; k < NIMPL; k++)
				if (result[s][k] < 0)
					printf(" %14s", "-");
				else
					printf(" %14.1f", result[s][k]);
			printf("\n");
		}
	}
	free(r);
	tdm_gpu_destroy(gpu);
	tdm_executor_destroy(ex);
	return 0;
}
