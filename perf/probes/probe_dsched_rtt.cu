// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_dsched_rtt.cu: the device scheduler's kernel (tandem_dsched.cuh) driven from
 * one host thread over its queue, with no executor and no poller (issue 21; not built by CMake):
 * the host writes an item and spins on its completion word. Per shape (blocks x runner warps):
 *   rtt    one item at a time, submit to the host seeing its word: p50 / p99 / min
 *   rate   one host thread keeps up to 1024 items outstanding: items/s
 *   cost   a compute-bound kernel on every SM beside the idle scheduler, against alone
 * The first version of this probe (2026-12-02, git history) ran a copy of the first kernel with
 * knobs: its round trip grew with the warps polling (1x1 2.8 us, 1x32 95 us, 8x32 788 us).
 *
 * With -DSTAGES, the kernel stamps each item's stages (tandem_dsched.cuh, TDM__DSCHED_STAMP) and
 * the rtt line is followed by the medians, over the last round trips, of: the look that found
 * the item (issued to seen), the hand-over (seen to the runner awake), the runner (awake to its
 * completion word stored), and the rest of the round trip (the bus both ways, and the wait for a
 * look after the host's store); then of the fetcher's looks: the one that found the item (its
 * load, issued to returned), the one before it, the time between the two (the loop), and from
 * the issue of one to the next. -DTDM__DSCHED_LOOK_ITEMS=1 makes each look read one claim's item.
 *
 *   nvcc -O2 -arch=sm_90 -I include -o /tmp/pdr perf/probes/probe_dsched_rtt.cu
 *   /tmp/pdr [RTT_REPS [sys|dev [CAPACITY]]]
 * With PDR_DELAY_NS=N in the environment, the host waits N ns after each answer before it writes
 * the next item (a longer host path, which moves where the item lands between two looks:
 * docs/design/dsched.md, "The fourth form").
 * sys: TDM_DSCHED_SCOPE_SYSTEM, else TDM_DSCHED_SCOPE_DEVICE; CAPACITY: the queue's (default
 * 4096, at most that).
 */
#include "probe.h"

#include <string.h>
#include <algorithm>
#include <vector>

#include "tandem_dsched.h"

#define CAP 4096u

#ifdef STAGES
__device__ unsigned long long probe_stamps[CAP][8];
#define TDM__DSCHED_STAMP(s, k, t) (probe_stamps[(s) & (CAP - 1u)][k] = (t))
#endif

#include "tandem_dsched.cuh"

TDM_DSCHED_HANDLER(nothing)
{
	(void)args;
	(void)size;
}
TDM_DSCHED_TABLE(probe_steps, nothing);

struct shape {
	unsigned blocks, warps;
};

__global__ void work_kernel(float *out, unsigned iters)
{
	float a = (float)threadIdx.x, b = 1.0001f;
	for (unsigned i = 0; i < iters; i++)
		a = a * b + 0.5f;
	if (a == -1.0f)
		out[blockIdx.x] = a;
}

static double work_ms(cudaStream_t st, float *out, unsigned blocks)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	std::vector<double> v;
	for (int r = 0; r < 6; r++) {
		CK(cudaEventRecord(e0, st));
		work_kernel<<<blocks, 256, 0, st>>>(out, 20000);
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		if (r > 0)
			v.push_back(ms);
	}
	std::sort(v.begin(), v.end());
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return v[v.size() / 2];
}

static uint64_t ring_mask = CAP - 1; /* the queue's capacity - 1 */

static void put(uint64_t *items, uint64_t s)
{
	uint64_t *it = items + (s & ring_mask) * TDM__DSCHED_WORDS;
	uint64_t tag = (uint64_t)(uint32_t)(s + 1) << 32;
	for (unsigned k = 1; k < TDM__DSCHED_WORDS; k++)
		__atomic_store_n(&it[k], tag, __ATOMIC_RELEASE);
	__atomic_store_n(&it[0], tag, __ATOMIC_RELEASE);
}

static uint64_t done_of(uint64_t *done, uint64_t s)
{
	return __atomic_load_n(&done[s & ring_mask], __ATOMIC_ACQUIRE);
}

int main(int argc, char **argv)
{
	unsigned reps = argc > 1 ? (unsigned)atoi(argv[1]) : 5000;
	const bool sys_scope = argc > 2 && strcmp(argv[2], "sys") == 0;
	if (argc > 3) {
		const unsigned c = (unsigned)atoi(argv[3]);
		if (c < 16 || c > CAP || (c & (c - 1)) != 0) {
			fprintf(stderr, "capacity: a power of two in 16..%u\n", CAP);
			return 2;
		}
		ring_mask = c - 1;
	}
	const char *delay_env = getenv("PDR_DELAY_NS");
	const uint64_t delay_ns = delay_env != NULL ? strtoull(delay_env, NULL, 10) : 0;
	CK(cudaSetDevice(0));
	int sms = 0;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	int lo, hi;
	CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
	cudaStream_t ks, ws;
	CK(cudaStreamCreateWithPriority(&ks, cudaStreamNonBlocking, hi));
	CK(cudaStreamCreateWithFlags(&ws, cudaStreamNonBlocking));
	size_t bytes = 16 * 128 + CAP * 8 + (size_t)CAP * TDM__DSCHED_WORDS * 8;
	char *mem;
	CK(cudaHostAlloc((void **)&mem, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
	uint64_t *dev;
	CK(cudaMalloc((void **)&dev, 64));
	float *out;
	CK(cudaMalloc((void **)&out, (size_t)sms * 64 * sizeof(float)));
	const unsigned wblocks = (unsigned)sms * 64u;
	double alone = work_ms(ws, out, wblocks);
	printf("sms %d, work kernel alone %.3f ms, %s scope, capacity %llu, delay %llu ns\n", sms,
	       alone, sys_scope ? "system" : "device", (unsigned long long)ring_mask + 1,
	       (unsigned long long)delay_ns);
	const shape shapes[] = {{1, 1}, {1, 15}, {8, 15}, {8, 31}, {16, 15}};
	printf("%-26s %9s %9s %9s %12s %10s %6s\n", "blocks x warps", "p50_us", "p99_us", "min_us",
	       "rate_per_s", "cost_ms", "ratio");
	for (const shape &k : shapes) {
		memset(mem, 0, bytes);
		struct tdm__dsched_queue q;
		q.stop = (uint64_t *)mem; /* 16 blocks' stop words at most */
		q.done = (uint64_t *)(mem + 16 * 128);
		q.items = (uint64_t *)(mem + 16 * 128 + CAP * 8);
		q.dev = dev;
		q.mask = ring_mask;
		q.flags = sys_scope ? 0u : TDM__DSCHED_DEVICE_SCOPE;
		for (unsigned b = 0; b < k.blocks; b++)
			q.stop[b * TDM__DSCHED_STOP_STRIDE] = TDM__DSCHED_CANCEL - 1;
		CK(cudaMemsetAsync(dev, 0, 64, ks));
		tdm_dsched_launch l = {};
		l.stream = ks;
		l.device = 0;
		l.blocks = k.blocks;
		l.threads = (k.warps + 1) * 32;
		l.queue = q;
		CK((cudaError_t)probe_steps_launch(&l));
		uint64_t s = 0;
		/* warm: 200 items one by one */
		for (; s < 200; s++) {
			put(q.items, s);
			while (done_of(q.done, s) < s + 1) {
			}
		}
		std::vector<uint64_t> v;
		v.reserve(reps);
		const uint64_t cap_ns = now_ns() + 3000000000ull;
		for (unsigned r = 0; r < reps && now_ns() < cap_ns; r++, s++) {
			uint64_t t0 = now_ns();
			put(q.items, s);
			while (done_of(q.done, s) < s + 1) {
			}
			const uint64_t t1 = now_ns();
			v.push_back(t1 - t0);
			while (now_ns() - t1 < delay_ns) {
			}
		}
#ifdef STAGES
		/* The stages of the last round trips (each slot holds the last item there). */
		std::vector<uint64_t> st[9];
		{
			static unsigned long long h[CAP][8];
			CK(cudaMemcpyFromSymbolAsync(h, probe_stamps, sizeof(h), 0,
			                             cudaMemcpyDeviceToHost, ws));
			CK(cudaStreamSynchronize(ws));
			const size_t m = v.size() < CAP ? v.size() : CAP;
			for (size_t i = 0; i < m; i++) {
				const uint64_t q_s = s - m + i;
				const unsigned long long *t = h[q_s & (CAP - 1u)];
				const uint64_t rtt = v[v.size() - m + i];
				const uint64_t dev = t[3] - t[0];
				st[0].push_back(t[1] - t[0]);
				st[4].push_back(t[4] - t[0]);
				st[1].push_back(t[2] - t[1]);
				st[2].push_back(t[3] - t[2]);
				st[3].push_back(rtt > dev ? rtt - dev : 0);
				/* the look that found it, to its return; the look before it; the
				 * loop between them; one look to the next */
				st[5].push_back(t[7] - t[0]);
				if (t[5] != 0 && t[6] >= t[5] && t[0] >= t[6]) {
					st[6].push_back(t[6] - t[5]);
					st[7].push_back(t[0] - t[6]);
					st[8].push_back(t[0] - t[5]);
				}
			}
			for (auto &x : st)
				std::sort(x.begin(), x.end());
		}
#endif
		std::sort(v.begin(), v.end());
		/* rate: 200k items, up to 1024 outstanding (the capacity at most) */
		const uint64_t n = 200000, first = s;
		uint64_t reaped = s, t0 = now_ns(), end = first + n;
		while (reaped < end) {
			if (now_ns() - t0 > 2000000000ull)
				end = s; /* 2 s at most: what was pushed is reaped */
			while (s < end && s - reaped < std::min<uint64_t>(1024, ring_mask + 1))
				put(q.items, s++);
			while (reaped < s && done_of(q.done, reaped) >= reaped + 1)
				reaped++;
		}
		double rate = (double)(end - first) / ((double)(now_ns() - t0) / 1e9);
		/* idle 1 ms, then the cost */
		uint64_t until = now_ns() + 1000000;
		while (now_ns() < until) {
		}
		double beside = work_ms(ws, out, wblocks);
		for (unsigned b = 0; b < k.blocks; b++)
			__atomic_store_n(&q.stop[b * TDM__DSCHED_STOP_STRIDE], s, __ATOMIC_RELEASE);
		CK(cudaStreamSynchronize(ks));
		char name[32];
		snprintf(name, sizeof(name), "%ux%u", k.blocks, k.warps);
		printf("%-26s %9.2f %9.2f %9.2f %12.0f %10.3f %6.2f\n", name, v[v.size() / 2] / 1e3,
		       v[v.size() * 99 / 100] / 1e3, v[0] / 1e3, rate, beside, beside / alone);
#ifdef STAGES
		printf("  stages p50 (us): look %.2f (returned %.2f), hand-over %.2f, runner %.2f, "
		       "the rest %.2f\n",
		       st[0][st[0].size() / 2] / 1e3, st[4][st[4].size() / 2] / 1e3,
		       st[1][st[1].size() / 2] / 1e3, st[2][st[2].size() / 2] / 1e3,
		       st[3][st[3].size() / 2] / 1e3);
		if (!st[6].empty())
			printf(
			    "  looks p50 (us): the finding one %.2f, the one before %.2f (of %zu), "
			    "between them %.2f, issue to issue %.2f\n",
			    st[5][st[5].size() / 2] / 1e3, st[6][st[6].size() / 2] / 1e3,
			    st[6].size(), st[7][st[7].size() / 2] / 1e3,
			    st[8][st[8].size() / 2] / 1e3);
#endif
		fflush(stdout);
	}
	printf("work kernel alone again %.3f ms\n", work_ms(ws, out, wblocks));
	return 0;
}
