// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_stamp_cost.cu: what timing each kernel costs the launching threads, by the
 * means tandem could use (not built by CMake; 2026-12-02, issue 19's traced cost). N threads,
 * each on a stream of its own, launch 1 us kernels back to back (a stream synchronise every 64
 * launches bounds what is queued). Variants, interleaved per round:
 *   plain    the launches alone
 *   record   + a timing event recorded after each launch (never read)
 *   read     + a thread that reads each event against a reference (cudaEventElapsedTime) every
 *            1 ms, as gpu/stamps.c's resolver does
 *   cupti    CUPTI's activity API records each kernel's device start and end (concurrent kernel
 *            records, buffers handed over by CUPTI; a thread flushes them every 1 ms)
 *   cupti-x  cupti, with an external correlation id pushed and popped around each launch (how
 *            a launch would be tied to its task)
 * Prints launches/s per variant and thread count, and the records each timing variant got.
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/psc perf/probes/probe_stamp_cost.cu -lcupti -lpthread
 *   /tmp/psc [ROUNDS] [SECONDS]
 */
#include "probe.h"

#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <vector>

#define CU(x)                                                                                      \
	do {                                                                                       \
		CUptiResult r_ = (x);                                                              \
		if (r_ != CUPTI_SUCCESS) {                                                         \
			const char *s_ = "?";                                                      \
			cuptiGetResultString(r_, &s_);                                             \
			fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s_);                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

__global__ void spin_us(unsigned us)
{
	uint64_t t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < us * 1000ull);
}

enum { PLAIN, RECORD, READ, CUPTI, CUPTI_X, NVAR };
static const char *names[NVAR] = {"plain", "record", "read", "cupti", "cupti-x"};

#define RING 4096
struct thr {
	cudaStream_t s;
	cudaEvent_t ev[RING];
	std::atomic<uint64_t> tail{0}, head{0};
	uint64_t launches;
	pthread_t th;
};

static std::atomic<int> stop_flag, go_flag;
static int variant;
static std::atomic<uint64_t> records_read, cupti_records;
static cudaEvent_t ref;

static void *worker(void *p)
{
	thr *t = (thr *)p;
	while (!go_flag.load())
		;
	uint64_t n = 0;
	while (!stop_flag.load(std::memory_order_relaxed)) {
		if (variant == CUPTI_X)
			cuptiActivityPushExternalCorrelationId(
			    CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN, n + 1);
		spin_us<<<1, 32, 0, t->s>>>(1);
		if (variant == CUPTI_X) {
			uint64_t id;
			cuptiActivityPopExternalCorrelationId(
			    CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN, &id);
		}
		if (variant == RECORD || variant == READ) {
			uint64_t tl = t->tail.load(std::memory_order_relaxed);
			if (variant == READ)
				while (tl - t->head.load(std::memory_order_acquire) >= RING - 1 &&
				       !stop_flag.load())
					;
			CK(cudaEventRecord(t->ev[tl % RING], t->s));
			t->tail.store(tl + 1, std::memory_order_release);
		}
		if (++n % 64 == 0)
			CK(cudaStreamSynchronize(t->s));
	}
	CK(cudaStreamSynchronize(t->s));
	t->launches = n;
	return NULL;
}

static thr *thrs;
static int nthr;

static void *reader(void *)
{
	while (!stop_flag.load()) {
		for (int i = 0; i < nthr; i++) {
			thr *t = &thrs[i];
			uint64_t h = t->head.load(std::memory_order_relaxed);
			uint64_t tl = t->tail.load(std::memory_order_acquire);
			while (h < tl) {
				float ms;
				cudaError_t e = cudaEventElapsedTime(&ms, ref, t->ev[h % RING]);
				if (e == cudaErrorNotReady)
					break;
				h++;
				records_read++;
			}
			t->head.store(h, std::memory_order_release);
		}
		usleep(1000);
	}
	return NULL;
}

static void CUPTIAPI buf_req(uint8_t **buf, size_t *size, size_t *max)
{
	*size = 8 << 20;
	*buf = (uint8_t *)aligned_alloc(8, *size);
	*max = 0;
}

static void CUPTIAPI buf_done(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid)
{
	CUpti_Activity *r = NULL;
	uint64_t n = 0;
	while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS)
		if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			n++;
	cupti_records += n;
	free(buf);
}

static void *flusher(void *)
{
	while (!stop_flag.load()) {
		cuptiActivityFlushAll(0);
		usleep(1000);
	}
	return NULL;
}

static double run(int v, int n, double secs)
{
	variant = v;
	nthr = n;
	stop_flag = 0;
	go_flag = 0;
	for (int i = 0; i < n; i++) {
		thrs[i].tail = 0;
		thrs[i].head = 0;
	}
	if (v == CUPTI || v == CUPTI_X) {
		CU(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
		if (v == CUPTI_X)
			CU(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
	}
	for (int i = 0; i < n; i++)
		pthread_create(&thrs[i].th, NULL, worker, &thrs[i]);
	pthread_t rd;
	bool has_rd = v == READ || v == CUPTI || v == CUPTI_X;
	if (has_rd)
		pthread_create(&rd, NULL, v == READ ? reader : flusher, NULL);
	usleep(20000);
	uint64_t t0 = now_ns();
	go_flag = 1;
	usleep((useconds_t)(secs * 1e6));
	stop_flag = 1;
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(thrs[i].th, NULL);
		total += thrs[i].launches;
	}
	uint64_t t1 = now_ns();
	if (has_rd)
		pthread_join(rd, NULL);
	if (v == CUPTI || v == CUPTI_X) {
		CU(cuptiActivityFlushAll(1));
		CU(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
		if (v == CUPTI_X)
			CU(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
	}
	return total / ((t1 - t0) * 1e-9);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 3;
	double secs = argc > 2 ? atof(argv[2]) : 0.3;
	CK(cudaFree(0));
	CU(cuptiActivityRegisterCallbacks(buf_req, buf_done));
	int counts[] = {1, 4, 16};
	thrs = new thr[16];
	for (int i = 0; i < 16; i++) {
		CK(cudaStreamCreateWithFlags(&thrs[i].s, cudaStreamNonBlocking));
		for (int k = 0; k < RING; k++)
			CK(cudaEventCreate(&thrs[i].ev[k]));
	}
	CK(cudaEventCreate(&ref));
	CK(cudaEventRecord(ref, thrs[0].s));
	CK(cudaDeviceSynchronize());
	std::vector<double> res[NVAR][3];
	for (int r = 0; r < rounds; r++)
		for (int c = 0; c < 3; c++)
			for (int v = 0; v < NVAR; v++) {
				int vv = (v + r) % NVAR;
				records_read = 0;
				cupti_records = 0;
				double x = run(vv, counts[c], secs);
				res[vv][c].push_back(x);
				printf("round %d threads %2d %-8s %8.0f launches/s  read %lu cupti "
				       "%lu\n",
				       r, counts[c], names[vv], x,
				       (unsigned long)records_read.load(),
				       (unsigned long)cupti_records.load());
				fflush(stdout);
			}
	printf("\nmedians (launches/s; ratio to plain)\n");
	for (int c = 0; c < 3; c++) {
		double base = 0;
		for (int v = 0; v < NVAR; v++) {
			std::vector<double> x = res[v][c];
			std::sort(x.begin(), x.end());
			double m = x[x.size() / 2];
			if (v == 0)
				base = m;
			printf("threads %2d %-8s %8.0f  %.3f\n", counts[c], names[v], m, m / base);
		}
	}
	return 0;
}
