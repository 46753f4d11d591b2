// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_sm_ops.cu: what one step of the device scheduler's fetcher loop costs on an
 * SM (issue 21; not built by CMake). One warp runs a dependent chain of 256 of each operation
 * (each step's operand depends on the last one's result) and prints, per operation, the cycles
 * (clock64) and nanoseconds (%globaltimer) a step took: a %globaltimer read, a clock64 read, a
 * shuffle, an mbarrier test, an acquire load of device memory, a volatile load of device memory,
 * an acquire load of pinned host memory (18 steps), nanosleep 0. Three rounds.
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/pso perf/probes/probe_sm_ops.cu && /tmp/pso
 */
#include "probe.h"

#define OPS 8
#define CHAIN 256
#define HOST_CHAIN 18

static __device__ __forceinline__ uint64_t gtimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ uint64_t load_acquire(const volatile uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__global__ void ops(unsigned long long *out, const volatile uint64_t *devw,
                    const volatile uint64_t *host)
{
	__shared__ unsigned long long bar;
	const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
	if (threadIdx.x == 0)
		asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(b) : "memory");
	__syncwarp();
	unsigned long long acc = 0;
	for (int m = 0; m < OPS; m++) {
		const int n = m == 6 ? HOST_CHAIN : CHAIN;
		const long long c0 = clock64();
		const uint64_t g0 = gtimer();
		for (int i = 0; i < n; i++) {
			uint64_t v = 0;
			unsigned ok = 0;
			switch (m) {
			case 0:
				acc += gtimer();
				break;
			case 1:
				asm volatile("mov.u64 %0, %%clock64;" : "=l"(v));
				acc += v;
				break;
			case 2:
				acc += __shfl_sync(~0u, acc + i, i & 31);
				break;
			case 3:
				asm volatile("{\n\t.reg .pred p;\n\t"
				             "mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n\t"
				             "selp.u32 %0, 1, 0, p;\n\t}"
				             : "=r"(ok)
				             : "r"(b), "r"((unsigned)acc & 1u)
				             : "memory");
				acc += ok + 1;
				break;
			case 4:
			case 6:
				v = load_acquire((m == 4 ? devw : host) + (acc & 1));
				acc += v + 1;
				break;
			case 5:
				v = devw[acc & 1];
				acc += v + 1;
				break;
			default:
				asm volatile("nanosleep.u32 0;" ::: "memory");
				acc++;
				break;
			}
		}
		const long long c1 = clock64();
		const uint64_t g1 = gtimer();
		if (threadIdx.x == 0) {
			out[2 * m] = (unsigned long long)(c1 - c0) / n;
			out[2 * m + 1] = (g1 - g0) / n;
		}
	}
	if (acc == 12345) /* never: keeps the chain */
		out[2 * OPS] = acc;
}

int main()
{
	static const char *const names[OPS] = {"globaltimer",
	                                       "clock64",
	                                       "shfl",
	                                       "mbarrier test",
	                                       "ld.acquire.sys dev",
	                                       "ld.volatile dev",
	                                       "ld.acquire.sys host",
	                                       "nanosleep 0"};
	unsigned long long *out;
	uint64_t *devw, *host;
	CK(cudaMalloc((void **)&out, (2 * OPS + 1) * sizeof(*out)));
	CK(cudaMalloc((void **)&devw, 64));
	CK(cudaMemset(devw, 0, 64));
	CK(cudaHostAlloc((void **)&host, 128, cudaHostAllocMapped));
	host[0] = host[1] = 0;
	printf("%-6s %-20s %8s %8s\n", "round", "operation", "cycles", "ns");
	for (int r = 0; r < 3; r++) {
		ops<<<1, 32>>>(out, devw, host);
		CK(cudaDeviceSynchronize());
		unsigned long long x[2 * OPS];
		CK(cudaMemcpy(x, out, sizeof(x), cudaMemcpyDeviceToHost));
		for (int m = 0; m < OPS; m++)
			printf("%-6d %-20s %8llu %8llu\n", r, names[m], x[2 * m], x[2 * m + 1]);
	}
	return 0;
}
