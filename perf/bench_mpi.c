// SPDX-License-Identifier: MIT
/*
 * perf/bench_mpi.c: tandem_mpi's benchmarks (built when tandem_mpi is; run under mpirun).
 *
 *   mpirun -np 2 tandem-bench mpi-pingpong [--sizes LIST] [--iters N] [--json]
 *   mpirun -np 2 tandem-bench mpi-overlap [--requests N] [--n N] [--workers N] [--reps N] [--json]
 *   mpirun -np R tandem-bench mpi-scaling [--backend cuda|sim] [--tasks N] [--kernel-us N]
 *                                         [--workers N] [--reps N] [--json]
 *
 * mpi-pingpong: rank 0 sends `size` bytes to rank 1, which sends them back; the round trip's p50
 * and p99, and the CPU the rank's process burnt per second of it (user + system over wall,
 * from getrusage: 1.0 is one core), for three ways of waiting side by side in one run: a task
 * that awaits each request (tandem: tdm_await_mpi, the worker free meanwhile), the main thread
 * in MPI_Wait, and the main thread in a busy MPI_Test loop.
 *
 * mpi-overlap: fib(n) on every worker of an executor (rank 0), with and without `requests`
 * receives outstanding, each awaited by a task of the same executor; rank 1 sends the
 * messages that complete them once rank 0 is done. The ratio says what the outstanding
 * requests (and the progress thread that tests them) take from the executor.
 *
 * mpi-scaling: gpu-scaling's compute-bound tasks (a kernel of kernel-us each, awaited) spread
 * over the R ranks of the run, each rank on its GPU (local rank modulo the devices it sees:
 * ranks share a GPU where there are more of them) with an executor of its own; tasks/s of the
 * whole run, from a barrier to the last rank's end. Run it with -np 1, 2, 4 ... for the curve.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_mpi.h"
#include "tandem_sim.h"

static int rank, nranks;

static int unknown(const char *cmd, const char *arg);

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "tandem-bench mpi (rank %d): %s: %s\n", rank, what, tdm_strerror(rc));
	MPI_Abort(MPI_COMM_WORLD, 1);
}

#define MUST(call)                                                                                 \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_ < 0)                                                                       \
			die(#call, rc_);                                                           \
	} while (0)

/* Starts MPI (tdm_mpi_init: MPI_THREAD_SERIALIZED) once. */
static int start_mpi(int *argc, char ***argv, int want_ranks)
{
	int provided = 0;
	int rc = tdm_mpi_init(argc, argv, &provided);
	if (rc != 0) {
		fprintf(stderr, "tandem-bench mpi: tdm_mpi_init: %s\n", tdm_strerror(rc));
		return 2;
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (want_ranks > 0 && nranks != want_ranks) {
		if (rank == 0)
			fprintf(stderr,
			        "tandem-bench mpi: run it with mpirun -np %d (got %d ranks)\n",
			        want_ranks, nranks);
		MPI_Finalize();
		return 2;
	}
	return 0;
}

static tdm_executor *make_executor(unsigned workers)
{
	tdm_config c;
	tdm_config_init(&c);
	c.workers = workers;
	tdm_executor *ex = NULL;
	MUST(tdm_executor_create(&ex, &c));
	return ex;
}

/* ---- mpi-pingpong ---- */

struct pp {
	tdm_mpi *m;
	char *buf;
	int size, iters, i;
	uint64_t *rtt; /* rank 0: each round trip, ns */
	uint64_t t0;
	MPI_Request req;
	MPI_Status st;
};

/* Rank 0: send, await; receive, await; iters times. Rank 1: the mirror. */
static int pp_task(tdm_task *t, void *arg)
{
	struct pp *p = arg;
	TDM_BEGIN(t);
	for (p->i = 0; p->i < p->iters; p->i++) {
		if (rank == 0) {
			p->t0 = now_ns();
			MUST(tdm_mpi_isend(p->m, p->buf, p->size, MPI_BYTE, 1, 7, MPI_COMM_WORLD,
			                   &p->req));
			TDM_AWAIT(t, tdm_await_mpi(t, p->m, &p->req, &p->st));
			MUST(tdm_task_result(t));
			MUST(tdm_mpi_irecv(p->m, p->buf, p->size, MPI_BYTE, 1, 7, MPI_COMM_WORLD,
			                   &p->req));
			TDM_AWAIT(t, tdm_await_mpi(t, p->m, &p->req, &p->st));
			MUST(tdm_task_result(t));
			p->rtt[p->i] = now_ns() - p->t0;
		} else {
			MUST(tdm_mpi_irecv(p->m, p->buf, p->size, MPI_BYTE, 0, 7, MPI_COMM_WORLD,
			                   &p->req));
			TDM_AWAIT(t, tdm_await_mpi(t, p->m, &p->req, &p->st));
			MUST(tdm_task_result(t));
			MUST(tdm_mpi_isend(p->m, p->buf, p->size, MPI_BYTE, 0, 7, MPI_COMM_WORLD,
			                   &p->req));
			TDM_AWAIT(t, tdm_await_mpi(t, p->m, &p->req, &p->st));
			MUST(tdm_task_result(t));
		}
	}
	TDM_END(t);
}

static void wait_done(MPI_Request *r, bool busy)
{
	if (!busy) {
		MPI_Wait(r, MPI_STATUS_IGNORE);
		return;
	}
	int done = 0;
	while (!done)
		MPI_Test(r, &done, MPI_STATUS_IGNORE);
}

/* The main thread's own ping-pong: MPI_Wait (busy false) or an MPI_Test loop. */
static void pp_plain(char *buf, int size, int iters, uint64_t *rtt, bool busy)
{
	MPI_Request r;
	int peer = 1 - rank;
	for (int i = 0; i < iters; i++) {
		uint64_t t0 = now_ns();
		if (rank == 0) {
			MPI_Isend(buf, size, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r);
			wait_done(&r, busy);
			MPI_Irecv(buf, size, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r);
			wait_done(&r, busy);
			rtt[i] = now_ns() - t0;
		} else {
			MPI_Irecv(buf, size, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r);
			wait_done(&r, busy);
			MPI_Isend(buf, size, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r);
			wait_done(&r, busy);
		}
	}
}

static int bench_mpi_pingpong(int argc, char **argv)
{
	unsigned sizes[32] = {8, 64, 512, 4096, 32768, 262144, 1048576, 4194304}, iters = 2000;
	int nsizes = 8, json = 0, bad = 0;
	for (int i = 1; i < argc && !bad; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--iters") == 0 && ++i)
			bad = bench_parse_uint(v, &iters, 10, 10000000);
		else if (strcmp(argv[i], "--sizes") == 0 && ++i)
			bad = bench_parse_list(v, sizes, &nsizes, 32, 1, 1u << 30);
		else if (strncmp(argv[i], "--", 2) == 0)
			return unknown("mpi-pingpong", argv[i]);
	}
	if (bad) {
		fprintf(stderr,
		        "mpi-pingpong: --iters 10..10^7, --sizes a list of 1..2^30 bytes\n");
		return 2;
	}
	int rc = start_mpi(&argc, &argv, 2);
	if (rc != 0)
		return rc;
	uint64_t maxsz = 0;
	for (int k = 0; k < nsizes; k++)
		maxsz = sizes[k] > maxsz ? sizes[k] : maxsz;
	char *buf = calloc(1, maxsz);
	uint64_t *rtt = calloc((size_t)iters, sizeof(*rtt));
	if (buf == NULL || rtt == NULL)
		die("calloc", -ENOMEM);
	static const char *impls[] = {"tandem", "mpi-wait", "mpi-test"};
	for (int k = 0; k < nsizes; k++) {
		int size = (int)sizes[k];
		/* Big messages: fewer round trips, at least 50 (about 64 MiB each way). */
		int most = (int)iters; /* rtt has room for iters */
		int n = size <= 65536 ? most : (int)(64ull * 1048576 / (uint64_t)size);
		n = n < 50 ? 50 : n;
		n = n > most ? most : n;
		for (int im = 0; im < 3; im++) {
			tdm_executor *ex = NULL;
			tdm_mpi *m = NULL;
			if (im == 0) {
				ex = make_executor(2);
				MUST(tdm_mpi_create(ex, NULL, &m));
			}
			for (int warm = 1; warm >= 0; warm--) {
				int cnt = warm ? (n < 100 ? n : 100) : n;
				/* Under the context's lock while one exists
				 * (MPI_THREAD_SERIALIZED): nothing is outstanding, so its progress
				 * thread loses nothing. */
				if (m != NULL)
					tdm_mpi_lock(m);
				MPI_Barrier(MPI_COMM_WORLD);
				if (m != NULL)
					tdm_mpi_unlock(m);
				double c0 = cpu_s();
				uint64_t w0 = now_ns();
				if (im == 0) {
					struct pp p = {.m = m,
					               .buf = buf,
					               .size = size,
					               .iters = cnt,
					               .rtt = rtt};
					tdm_group g;
					MUST(tdm_group_init(&g, ex));
					MUST(tdm_spawn(ex, pp_task, &p, &g));
					MUST(tdm_group_wait(&g));
				} else {
					pp_plain(buf, size, cnt, rtt, im == 2);
				}
				double wall = (now_ns() - w0) * 1e-9, cpu = cpu_s() - c0;
				if (warm)
					continue;
				/* The peer's CPU share, for the row. */
				double cpus[2] = {cpu / wall, 0};
				double peer = 0;
				if (m != NULL)
					tdm_mpi_lock(m);
				MPI_Reduce(&cpus[0], &peer, 1, MPI_DOUBLE, MPI_MAX, 0,
				           MPI_COMM_WORLD);
				if (m != NULL)
					tdm_mpi_unlock(m);
				if (rank != 0)
					continue;
				qsort(rtt, (size_t)cnt, sizeof(*rtt), bench_cmp_u64);
				double p50 = rtt[cnt / 2] / 1e3, p99 = rtt[(cnt * 99) / 100] / 1e3;
				if (json)
					printf(
					    "{\"bench\":\"mpi-pingpong\",\"impl\":\"%s\",\"bytes\":"
					    "%d,"
					    "\"n\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
					    "\"cpu_rank0\":%.3f,\"cpu_max\":%.3f,\"ranks\":%d}\n",
					    impls[im], size, cnt, p50, p99, cpus[0], peer, nranks);
				else
					printf("mpi-pingpong %-9s %8d B  n %5d  p50 %9.2f us  p99 "
					       "%9.2f "
					       "us  cpu %.2f (max of ranks %.2f)\n",
					       impls[im], size, cnt, p50, p99, cpus[0], peer);
				fflush(stdout);
			}
			if (im == 0) {
				MUST(tdm_mpi_destroy(m));
				MUST(tdm_executor_destroy(ex));
			}
		}
	}
	free(buf);
	free(rtt);
	MPI_Finalize();
	return 0;
}

/* ---- mpi-overlap ---- */

struct waiter {
	tdm_mpi *m;
	int word;
	MPI_Request req;
	MPI_Status st;
};

static int waiter_task(tdm_task *t, void *arg)
{
	struct waiter *w = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_mpi(t, w->m, &w->req, &w->st));
	MUST(tdm_task_result(t));
	TDM_END(t);
}

/* fib(n) on ex, from this (outside) thread: ms. */
static double fib_ms(tdm_executor *ex, int n)
{
	uint64_t t0 = now_ns();
	uint64_t got = bench_tandem_fib(ex, n);
	double ms = (now_ns() - t0) / 1e6;
	if (got == 0)
		die("fib", -EIO);
	return ms;
}

static int bench_mpi_overlap(int argc, char **argv)
{
	unsigned ureq = 10000, un = 30, ureps = 10, workers = 0;
	int json = 0, bad = 0;
	for (int i = 1; i < argc && !bad; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--requests") == 0 && ++i)
			bad = bench_parse_uint(v, &ureq, 1, 10000000);
		else if (strcmp(argv[i], "--n") == 0 && ++i)
			bad = bench_parse_uint(v, &un, 10, 40);
		else if (strcmp(argv[i], "--reps") == 0 && ++i)
			bad = bench_parse_uint(v, &ureps, 1, 100);
		else if (strcmp(argv[i], "--workers") == 0 && ++i)
			bad = bench_parse_uint(v, &workers, 0, TDM_MAX_WORKERS);
		else if (strncmp(argv[i], "--", 2) == 0)
			return unknown("mpi-overlap", argv[i]);
	}
	if (bad) {
		fprintf(stderr,
		        "mpi-overlap: --requests 1..10^7, --n 10..40, --reps 1..100, "
		        "--workers 0..%d\n",
		        TDM_MAX_WORKERS);
		return 2;
	}
	int n = (int)un, reps = (int)ureps, requests = (int)ureq;
	int rc = start_mpi(&argc, &argv, 2);
	if (rc != 0)
		return rc;
	double with[100], without[100];
	int progress_runs = 0;
	if (rank == 0) {
		tdm_executor *ex = make_executor(workers);
		tdm_mpi *m = NULL;
		MUST(tdm_mpi_create(ex, NULL, &m));
		struct waiter *w = calloc((size_t)requests, sizeof(*w));
		if (w == NULL)
			die("calloc", -ENOMEM);
		fib_ms(ex, n); /* warm */
		for (int r = 0; r < reps; r++)
			without[r] = fib_ms(ex, n);
		tdm_group g;
		MUST(tdm_group_init(&g, ex));
		for (int i = 0; i < requests; i++) {
			w[i].m = m;
			MUST(tdm_mpi_irecv(m, &w[i].word, 1, MPI_INT, 1, 11, MPI_COMM_WORLD,
			                   &w[i].req));
			MUST(tdm_spawn(ex, waiter_task, &w[i], &g));
		}
		for (int r = 0; r < reps; r++)
			with[r] = fib_ms(ex, n);
		progress_runs = reps;
		tdm_mpi_lock(m);
		MPI_Barrier(MPI_COMM_WORLD); /* rank 1 sends now */
		tdm_mpi_unlock(m);
		MUST(tdm_group_wait(&g));
		MUST(tdm_mpi_destroy(m));
		unsigned nw = (unsigned)tdm_executor_workers(ex);
		MUST(tdm_executor_destroy(ex));
		free(w);
		qsort(with, (size_t)reps, sizeof(double), bench_cmp_double);
		qsort(without, (size_t)reps, sizeof(double), bench_cmp_double);
		double a = without[reps / 2], b = with[reps / 2];
		if (json)
			printf("{\"bench\":\"mpi-overlap\",\"n\":%d,\"workers\":%u,\"requests\":%d,"
			       "\"reps\":%d,\"without_ms\":%.3f,\"with_ms\":%.3f,\"kept\":%.4f,"
			       "\"without_min_ms\":%.3f,\"with_min_ms\":%.3f}\n",
			       n, nw, requests, progress_runs, a, b, a / b, without[0], with[0]);
		else
			printf("mpi-overlap fib(%d) on %u workers: %.2f ms alone, %.2f ms with %d "
			       "requests outstanding: keeps %.3f of its throughput\n",
			       n, nw, a, b, requests, a / b);
	} else {
		int *words = calloc((size_t)requests, sizeof(int));
		MPI_Request *rs = calloc((size_t)requests, sizeof(*rs));
		if (words == NULL || rs == NULL)
			die("calloc", -ENOMEM);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < requests; i++)
			MPI_Isend(&words[i], 1, MPI_INT, 0, 11, MPI_COMM_WORLD, &rs[i]);
		MPI_Waitall(requests, rs, MPI_STATUSES_IGNORE);
		free(words);
		free(rs);
	}
	MPI_Finalize();
	return 0;
}

/* ---- mpi-scaling ---- */

struct spin_task {
	tdm_gpu *gpu;
	int device;
	uint64_t ns;
	tdm_stream *s;
};

static int spin_task(tdm_task *t, void *arg)
{
	struct spin_task *k = arg;
	TDM_BEGIN(t);
	MUST(tdm_stream_lease(k->gpu, k->device, TDM_STREAM_SHARED, &k->s));
	MUST(tdm_launch_spin(k->s, (uint32_t)k->ns));
	TDM_AWAIT(t, tdm_await_stream(t, k->s));
	MUST(tdm_task_result(t));
	MUST(tdm_stream_release(k->s));
	TDM_END(t);
}

static int bench_mpi_scaling(int argc, char **argv)
{
	int sim = 0, json = 0, bad = 0;
	unsigned utasks = 20000, ukernel = 100, workers = 0, ureps = 5;
	for (int i = 1; i < argc && !bad; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : "";
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--backend") == 0 && ++i) {
			sim = strcmp(v, "sim") == 0;
			bad = !sim && strcmp(v, "cuda") != 0;
		} else if (strcmp(argv[i], "--tasks") == 0 && ++i)
			bad = bench_parse_uint(v, &utasks, 1, 100000000);
		else if (strcmp(argv[i], "--kernel-us") == 0 && ++i)
			bad = bench_parse_uint(v, &ukernel, 0, 4000000);
		else if (strcmp(argv[i], "--workers") == 0 && ++i)
			bad = bench_parse_uint(v, &workers, 0, TDM_MAX_WORKERS);
		else if (strcmp(argv[i], "--reps") == 0 && ++i)
			bad = bench_parse_uint(v, &ureps, 1, 100);
		else if (strncmp(argv[i], "--", 2) == 0)
			return unknown("mpi-scaling", argv[i]);
	}
	if (bad) {
		fprintf(stderr,
		        "mpi-scaling: --backend cuda|sim, --tasks 1..10^8, --kernel-us "
		        "0..4e6, --workers 0..%d, --reps 1..100\n",
		        TDM_MAX_WORKERS);
		return 2;
	}
	uint64_t tasks = utasks, kernel_us = ukernel;
	int reps = (int)ureps;
	int rc = start_mpi(&argc, &argv, 0);
	if (rc != 0)
		return rc;
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	int local = lr != NULL ? atoi(lr) : rank;
	tdm_executor *ex = make_executor(workers);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = sim ? TDM_BACKEND_SIM : TDM_BACKEND_CUDA;
	tdm_gpu *gpu = NULL;
	rc = tdm_gpu_create(&gpu, ex, &g);
	if (rc != 0) {
		fprintf(stderr, "mpi-scaling (rank %d): tdm_gpu_create: %s\n", rank,
		        tdm_strerror(rc));
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	int ndev = tdm_gpu_device_count(gpu);
	int device = ndev > 0 ? local % ndev : 0;
	/* This rank's share of the tasks. */
	uint64_t mine = tasks / (uint64_t)nranks + ((uint64_t)rank < tasks % (uint64_t)nranks);
	struct spin_task *ks = calloc(mine, sizeof(*ks));
	if (ks == NULL)
		die("calloc", -ENOMEM);
	double secs[100];
	for (int r = -1; r < reps; r++) { /* r = -1: warm */
		MPI_Barrier(MPI_COMM_WORLD);
		uint64_t t0 = now_ns();
		tdm_group grp;
		MUST(tdm_group_init(&grp, ex));
		for (uint64_t i = 0; i < mine; i++) {
			ks[i] = (struct spin_task){gpu, device, kernel_us * 1000, NULL};
			MUST(tdm_spawn(ex, spin_task, &ks[i], &grp));
		}
		MUST(tdm_group_wait(&grp));
		double mysec = (now_ns() - t0) * 1e-9, all = 0;
		MPI_Reduce(&mysec, &all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (r >= 0)
			secs[r] = all;
	}
	/* Distinct GPUs in use across the ranks: a bit per (host-local) device, or-ed. */
	int used = (int)(1u << (device & 31)), all_used = 0;
	MPI_Reduce(&used, &all_used, 1, MPI_INT, MPI_BOR, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		qsort(secs, (size_t)reps, sizeof(double), bench_cmp_double);
		double med = secs[reps / 2];
		int gpus = __builtin_popcount((unsigned)all_used);
		if (json)
			printf("{\"bench\":\"mpi-scaling\",\"backend\":\"%s\",\"ranks\":%d,"
			       "\"gpus\":%d,"
			       "\"kernel_us\":%llu,\"tasks\":%llu,\"workers\":%u,\"reps\":%d,"
			       "\"median_s\":%.6f,\"tasks_per_s\":%.1f,\"min_s\":%.6f}\n",
			       sim ? "sim" : "cuda", nranks, gpus, (unsigned long long)kernel_us,
			       (unsigned long long)tasks, (unsigned)tdm_executor_workers(ex), reps,
			       med, tasks / med, secs[0]);
		else
			printf(
			    "mpi-scaling %s: %d ranks on %d GPU(s)%s, %llu tasks of %llu us: %.1f "
			    "tasks/s (median of %d)\n",
			    sim ? "sim" : "cuda", nranks, gpus,
			    gpus < nranks ? " (ranks share a GPU)" : "", (unsigned long long)tasks,
			    (unsigned long long)kernel_us, tasks / med, reps);
	}
	free(ks);
	MUST(tdm_executor_destroy(ex));
	MUST(tdm_gpu_destroy(gpu));
	MPI_Finalize();
	return 0;
}

/* An option none of the parsers took. */
static int unknown(const char *cmd, const char *arg)
{
	fprintf(stderr, "%s: unknown option %s (see the top of perf/bench_mpi.c)\n", cmd, arg);
	return 2;
}

int bench_mpi(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "mpi-pingpong") == 0)
			return bench_mpi_pingpong(argc, argv);
		if (strcmp(argv[i], "mpi-overlap") == 0)
			return bench_mpi_overlap(argc, argv);
		if (strcmp(argv[i], "mpi-scaling") == 0)
			return bench_mpi_scaling(argc, argv);
	}
	return 2;
}
