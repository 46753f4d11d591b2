// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_dsched_phase.cu: whether the round trip depends on when the host's item lands
 * between two looks, and whether a second polling warp takes that away (issue 21; not built by
 * CMake). One host thread writes item i (128 bytes, tagged), spins on the answer, then waits
 * DELAY ns more before item i + 1 (standing in for a host path longer than a spin: tandem's
 * resume and submit). The poller takes item i with ld.acquire.sys (8 lanes, 16 bytes each, the
 * kernel's look) and answers (fence.acq_rel.gpu, a volatile store). Per mode, the round trip's
 * p50 (without the delay) at each DELAY:
 *   1w        one warp looks at the item, look after look (the kernel's fetcher today)
 *   2w/dup    two warps, each on a copy of its own (the host writes the item twice); a warp
 *             issues its look no sooner than half a look after the other's last
 *   2w/same   two warps on the one copy, staggered the same way
 *   2w/free   two warps on two copies, not staggered
 * A round trip that rises and falls with DELAY, with the period of a look, says the phase
 * decides it; its spread between DELAYs is what a second warp should halve.
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/pdp perf/probes/probe_dsched_phase.cu && /tmp/pdp [REPS]
 */
#include "probe.h"

#include <string.h>
#include <algorithm>
#include <vector>

#define SLOTS 64u
#define MODES 4
static const char *const names[MODES] = {"1w", "2w/dup", "2w/same", "2w/free"};

static __device__ __forceinline__ uint64_t gclock(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void pp(int mode, const uint64_t *items, const uint64_t *dup, volatile uint64_t *ack,
                   unsigned n, unsigned *won)
{
	__shared__ unsigned long long done, issued[2], look[2];
	const unsigned lane = threadIdx.x & 31u, w = threadIdx.x >> 5, other = w ^ 1u;
	const unsigned nw = blockDim.x >> 5;
	if (threadIdx.x == 0) {
		done = 0;
		issued[0] = issued[1] = 0;
		look[0] = look[1] = 1200;
	}
	__syncthreads();
	const uint64_t *copy = mode == 1 || mode == 3 ? (w == 0 ? items : dup) : items;
	for (;;) {
		const unsigned long long target = *(volatile unsigned long long *)&done + 1u;
		if (target > n)
			break;
		if (nw == 2 && mode != 3 && lane == 0) {
			/* half a look after the other warp's last issue, at least */
			const unsigned long long half =
			    *(volatile unsigned long long *)&look[w] / 2u;
			for (;;) {
				const unsigned long long
				    t = gclock(),
				    o = *(volatile unsigned long long *)&issued[other];
				if (t - o >= half || o > t)
					break;
			}
		}
		__syncwarp();
		const uint64_t t0 = gclock();
		if (lane == 0)
			*(volatile unsigned long long *)&issued[w] = t0;
		uint64_t a = 0, b = 0;
		if (lane < 8)
			asm volatile("ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];"
			             : "=l"(a), "=l"(b)
			             : "l"(copy + (size_t)(target % SLOTS) * 16 + 2 * lane)
			             : "memory");
		const bool ok = lane >= 8 || ((uint32_t)(a >> 32) == (uint32_t)target &&
		                              (uint32_t)(b >> 32) == (uint32_t)target);
		const bool all = __all_sync(~0u, ok);
		if (lane == 0) {
			*(volatile unsigned long long *)&look[w] = gclock() - t0;
			if (all && atomicCAS(&done, target - 1u, target) == target - 1u) {
				asm volatile("fence.acq_rel.gpu;" ::: "memory");
				*ack = target;
				won[target - 1] = w;
			}
		}
		__syncwarp();
	}
}

static void put(uint64_t *items, uint64_t *dup, int mode, unsigned i)
{
	uint64_t *it = items + (size_t)(i % SLOTS) * 16, *it2 = dup + (size_t)(i % SLOTS) * 16;
	const uint64_t tag = (uint64_t)i << 32;
	for (unsigned k = 16; k-- > 0;) {
		__atomic_store_n(&it[k], tag | k, __ATOMIC_RELEASE);
		if (mode == 1 || mode == 3)
			__atomic_store_n(&it2[k], tag | k, __ATOMIC_RELEASE);
	}
}

int main(int argc, char **argv)
{
	const unsigned reps = argc > 1 ? (unsigned)atoi(argv[1]) : 5000, warm = 300;
	static const unsigned delays[] = {0, 150, 300, 450, 600, 750, 900, 1050, 1200, 1350};
	const unsigned nd = sizeof(delays) / sizeof(delays[0]);
	CK(cudaSetDevice(0));
	size_t bytes = 2 * SLOTS * 128 + 256;
	char *mem;
	CK(cudaHostAlloc((void **)&mem, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
	uint64_t *items = (uint64_t *)mem, *dup = items + SLOTS * 16, *ack = dup + SLOTS * 16;
	const unsigned n = warm + reps;
	unsigned *won_d;
	CK(cudaMalloc((void **)&won_d, n * sizeof(*won_d)));
	std::vector<unsigned> won(n);
	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	printf("p50 round trip (us) by the host's delay (ns); spread = max - min of the p50s; "
	       "w1 = share won by warp 1\n%-8s",
	       "mode");
	for (unsigned d = 0; d < nd; d++)
		printf(" %6u", delays[d]);
	printf(" %7s %6s %6s\n", "spread", "p99@0", "w1");
	for (int mode = 0; mode < MODES; mode++) {
		printf("%-8s", names[mode]);
		double lo = 1e9, hi = 0, p99 = 0;
		unsigned long w1 = 0, tot = 0;
		for (unsigned d = 0; d < nd; d++) {
			memset(mem, 0, bytes);
			pp<<<1, mode == 0 ? 32 : 64, 0, st>>>(mode, items, dup, ack, n, won_d);
			CK(cudaGetLastError());
			std::vector<uint64_t> v;
			v.reserve(reps);
			ping_pong([&](unsigned i) { put(items, dup, mode, i); }, ack, n, warm,
			          delays[d], v);
			CK(cudaStreamSynchronize(st));
			CK(cudaMemcpy(won.data(), won_d, n * sizeof(*won_d),
			              cudaMemcpyDeviceToHost));
			for (unsigned i = warm; i < n; i++, tot++)
				w1 += won[i];
			std::sort(v.begin(), v.end());
			const double p50 = v[v.size() / 2] / 1e3;
			lo = std::min(lo, p50);
			hi = std::max(hi, p50);
			if (d == 0)
				p99 = v[v.size() * 99 / 100] / 1e3;
			printf(" %6.2f", p50);
			fflush(stdout);
		}
		printf(" %7.2f %6.2f %6.2f\n", hi - lo, p99, (double)w1 / (double)tot);
	}
	return 0;
}
