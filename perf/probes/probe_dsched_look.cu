// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_dsched_look.cu: what one look at pinned host memory costs a polling warp,
 * by how the look reads and by how many warps poll at once (issue 21; not built by CMake). P
 * warps, one per block, each reads its own 128-byte line of pinned memory LOOKS times back to
 * back; the mean time of a look (globaltimer), and the looks a second of all P together. Modes:
 *   1x8     lane 0 reads one 8-byte word
 *   16x8    lanes 0..15 read the line's 16 words (8 bytes each)
 *   16x8+s  the same, and lane 16 a stop word every poller shares (another line)
 *   8x16    lanes 0..7 read the line with 16-byte loads
 *   1x8+s   lane 0 its word, lane 1 the shared stop word
 *   1x8+f   1x8, then fence.acq_rel.sys (what an acquire fence adds)
 *   st+f    lane 0 stores a word to its line, then fence.acq_rel.sys (a completion's cost)
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/pdl perf/probes/probe_dsched_look.cu && /tmp/pdl
 */
#include "probe.h"

#include <vector>

#define LOOKS 2000
#define MODES 7
static const char *const mode_names[MODES] = {"1x8",   "16x8",  "16x8+s", "8x16",
                                              "1x8+s", "1x8+f", "st+f"};

static __device__ __forceinline__ uint64_t gclock(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void poll(volatile uint64_t *lines, volatile uint64_t *stop, int mode,
                     unsigned long long *ns_out, unsigned long long *sink)
{
	const unsigned lane = threadIdx.x & 31u;
	volatile uint64_t *line = lines + (size_t)blockIdx.x * 16;
	uint64_t acc = 0, t0 = gclock();
	for (int i = 0; i < LOOKS; i++) {
		uint64_t w = 0;
		switch (mode) {
		case 0:
			if (lane == 0)
				w = line[0];
			break;
		case 1:
			if (lane < 16)
				w = line[lane];
			break;
		case 2:
			if (lane < 16)
				w = line[lane];
			else if (lane == 16)
				w = *stop;
			break;
		case 3:
			if (lane < 8) {
				uint64_t a, b;
				asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
				             : "=l"(a), "=l"(b)
				             : "l"(line + 2 * lane)
				             : "memory");
				w = a + b;
			}
			break;
		case 4:
			if (lane == 0)
				w = line[0];
			else if (lane == 1)
				w = *stop;
			break;
		case 5:
			if (lane == 0) {
				w = line[0];
				asm volatile("fence.acq_rel.sys;" ::: "memory");
			}
			break;
		case 6:
			if (lane == 0) {
				line[1] = (uint64_t)i;
				asm volatile("fence.acq_rel.sys;" ::: "memory");
			}
			break;
		}
		/* The warp waits for its loads before the next look, as a poller does. */
		acc += __shfl_sync(0xffffffffu, w, 0) + __shfl_sync(0xffffffffu, w, 1);
	}
	uint64_t t1 = gclock();
	if (lane == 0) {
		ns_out[blockIdx.x] = t1 - t0;
		sink[blockIdx.x] = acc;
	}
}

int main()
{
	CK(cudaSetDevice(0));
	const int pollers[] = {1, 8, 32, 128};
	uint64_t *lines, *stop;
	CK(cudaHostAlloc((void **)&lines, 128 * 128, cudaHostAllocMapped | cudaHostAllocPortable));
	CK(cudaHostAlloc((void **)&stop, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
	unsigned long long *ns, *sink;
	CK(cudaMalloc((void **)&ns, 128 * sizeof(*ns)));
	CK(cudaMalloc((void **)&sink, 128 * sizeof(*sink)));
	printf("mean ns per look (all pollers' mean), and looks/s of all pollers together\n");
	printf("%-8s", "mode");
	for (int p : pollers)
		printf(" %10s%-3d %12s", "P=", p, "looks/s");
	printf("\n");
	for (int m = 0; m < MODES; m++) {
		printf("%-8s", mode_names[m]);
		for (int p : pollers) {
			poll<<<p, 32>>>(lines, stop, m, ns, sink); /* warm */
			CK(cudaDeviceSynchronize());
			uint64_t h0 = now_ns();
			poll<<<p, 32>>>(lines, stop, m, ns, sink);
			CK(cudaDeviceSynchronize());
			uint64_t wall = now_ns() - h0;
			std::vector<unsigned long long> v(p);
			CK(cudaMemcpy(v.data(), ns, p * sizeof(*ns), cudaMemcpyDeviceToHost));
			double mean = 0;
			for (auto x : v)
				mean += (double)x;
			mean /= (double)p * LOOKS;
			printf(" %13.0f %12.3g", mean, (double)p * LOOKS / ((double)wall / 1e9));
		}
		printf("\n");
	}
	return 0;
}
