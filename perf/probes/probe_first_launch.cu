// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_first_launch.cu: why tandem's first launch of a pipeline run returns later
 * than the hand-written double buffer's (not built by CMake; sixth session of 2026-11-30).
 * From the main thread, after 20 ms idle: a 1 MiB copy in, then a device-filling 2 ms kernel,
 * then a 1 MiB copy out; it times the copy call and the launch call. Variants differ in one
 * thing each from plain CUDA (A); rounds interleave the variants. Results: perf/README.md,
 * runs 39 and 40 (raw logs in perf/results until commit fa223cb).
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/pfl perf/probes/probe_first_launch.cu && /tmp/pfl [ROUNDS]
 */
#include "probe.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

__device__ __forceinline__ uint64_t gt()
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void busy(uint32_t ns, float *out, const float *in)
{
	const uint64_t t0 = gt();
	while (gt() - t0 < ns) {
	}
	if (blockIdx.x == 0 && threadIdx.x < 16)
		out[threadIdx.x] = in[threadIdx.x];
}

struct variant {
	const char *name;
	cudaStream_t s;
	void *din, *dout, *hin, *hout;
	bool drain; /* an event recorded and polled on the stream just before */
	cudaEvent_t ev;
	std::vector<double> copy_us, launch_us, total_us;
};

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 15;
	const size_t MiB = 1 << 20;
	int sms = 0, per = 0;
	CK(cudaSetDevice(0));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, busy, 1024, 0));
	int least, greatest;
	CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
	cudaMemPool_t pool;
	CK(cudaDeviceGetDefaultMemPool(&pool, 0));
	uint64_t thr = UINT64_MAX;
	CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
	char *chunk;
	CK(cudaHostAlloc((void **)&chunk, 64 * MiB, cudaHostAllocPortable | cudaHostAllocMapped));

	enum { A, B, C, D, F, G, H, NV };
	std::vector<variant> v(NV);
	const char *names[NV] = {"A plain",
	                         "B priority-created stream",
	                         "C cudaMallocAsync buffers",
	                         "D mapped pool chunk host",
	                         "F event drained before",
	                         "G all of B C D F",
	                         "H A after a 300 us spin"};
	for (int k = 0; k < NV; k++) {
		variant &x = v[k];
		x.name = names[k];
		if (k == B || k == G)
			CK(cudaStreamCreateWithPriority(&x.s, cudaStreamNonBlocking, least));
		else
			CK(cudaStreamCreateWithFlags(&x.s, cudaStreamNonBlocking));
		if (k == C || k == G) {
			CK(cudaMallocAsync(&x.din, MiB, x.s));
			CK(cudaMallocAsync(&x.dout, MiB, x.s));
			CK(cudaStreamSynchronize(x.s));
		} else {
			CK(cudaMalloc(&x.din, MiB));
			CK(cudaMalloc(&x.dout, MiB));
		}
		if (k == D || k == G) {
			x.hin = chunk + (2 * k) * MiB + 256;
			x.hout = chunk + (2 * k + 1) * MiB + 512;
		} else {
			CK(cudaHostAlloc(&x.hin, MiB, cudaHostAllocPortable));
			CK(cudaHostAlloc(&x.hout, MiB, cudaHostAllocPortable));
		}
		x.drain = k == F || k == G;
		CK(cudaEventCreateWithFlags(&x.ev, cudaEventDisableTiming));
	}
	for (int r = -2; r < rounds; r++) {
		for (int k = 0; k < NV; k++) {
			variant &x = v[k];
			usleep(20000);
			if (k == H) /* the thread kept running just before, as after a spin-wait */
				for (uint64_t t = now_ns(); now_ns() - t < 300000;) {
				}
			if (x.drain) {
				CK(cudaEventRecord(x.ev, x.s));
				while (cudaEventQuery(x.ev) == cudaErrorNotReady) {
				}
			}
			uint64_t t0 = now_ns();
			CK(cudaMemcpyAsync(x.din, x.hin, MiB, cudaMemcpyHostToDevice, x.s));
			uint64_t t1 = now_ns();
			busy<<<sms * per, 1024, 0, x.s>>>(2000000, (float *)x.dout,
			                                  (const float *)x.din);
			uint64_t t2 = now_ns();
			CK(cudaMemcpyAsync(x.hout, x.dout, MiB, cudaMemcpyDeviceToHost, x.s));
			CK(cudaStreamSynchronize(x.s));
			uint64_t t3 = now_ns();
			if (r >= 0) {
				x.copy_us.push_back((t1 - t0) / 1e3);
				x.launch_us.push_back((t2 - t1) / 1e3);
				x.total_us.push_back((t3 - t0) / 1e3);
			}
		}
	}
	auto med = [](std::vector<double> a) {
		std::sort(a.begin(), a.end());
		return a[a.size() / 2];
	};
	printf("first copy and launch after 20 ms idle, main thread, median of %d (us)\n", rounds);
	for (auto &x : v)
		printf("%-28s copy call %6.1f  launch call %6.1f  total %8.1f\n", x.name,
		       med(x.copy_us), med(x.launch_us), med(x.total_us));
	return 0;
}
