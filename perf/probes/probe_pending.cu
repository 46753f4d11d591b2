// SPDX-License-Identifier: MIT
/*
 * perf/probes/probe_pending.cu: the plain-CUDA probe behind TDM_COMPLETION_ADAPTIVE (not built by
 * CMake). Round trip of an empty kernel and a completion mechanism on one stream, while other
 * streams each run a kernel that spins until the end and hold pending operations behind it.
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/probe perf/probes/probe_pending.cu -lcuda
 *   CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32 /tmp/probe STREAMS PENDING KIND MECH
 * [N]
 *
 * STREAMS background streams; PENDING operations queued behind each one's kernel, of KIND write
 * (cuStreamWriteValue64), event (cudaEventRecord), mixed (one write, then events) or none; MECH
 * E (event record + cudaEventQuery spin), W (cuStreamWriteValue64 + host spin) or K (the kernel
 * itself stores the word: a lower bound). Prints p50 and p99 of N round trips (default 20000)
 * after 1000 untimed ones. Results: perf/README.md, run 1 (raw log in perf/results until commit
 * fa223cb).
 */
#include "probe.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <vector>
#include <algorithm>
#define DK(x)                                                                                      \
	do {                                                                                       \
		CUresult e_ = (x);                                                                 \
		if (e_ != CUDA_SUCCESS) {                                                          \
			fprintf(stderr, "%s:%d drv %d\n", __FILE__, __LINE__, (int)e_);            \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
__global__ void empty()
{
}
__global__ void empty_store(volatile uint64_t *w, uint64_t v)
{
	if (!w)
		return;
	__threadfence_system();
	*w = v;
}
__global__ void bgk(const volatile unsigned *stop)
{
	if (!stop)
		return;
	while (*stop == 0) {
		__nanosleep(1000);
	}
}
int main(int argc, char **argv)
{
	int nbg = atoi(argv[1]);    // background streams
	int pend = atoi(argv[2]);   // pending ops per bg stream
	const char *kind = argv[3]; // write | event | mixed | none
	const char *mech = argv[4]; // E | W | K
	int n = argc > 5 ? atoi(argv[5]) : 20000;
	CK(cudaSetDevice(0));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	unsigned *stop;
	CK(cudaMalloc(&stop, 4));
	CK(cudaMemset(stop, 0, 4));
	CK(cudaDeviceSynchronize());
	// Load every kernel before the background runs (lazy loading would wait for it).
	empty<<<1, 1, 0, s>>>();
	empty_store<<<1, 1, 0, s>>>(nullptr, 0);
	bgk<<<1, 1, 0, s>>>(nullptr);
	CK(cudaStreamSynchronize(s));
	std::vector<cudaStream_t> bg(nbg);
	uint64_t *words;
	CK(cudaHostAlloc(&words, 4096 * 64, cudaHostAllocMapped));
	memset(words, 0, 4096 * 64);
	uint64_t *dw;
	CK(cudaHostGetDevicePointer((void **)&dw, words, 0));
	std::vector<cudaEvent_t> evs;
	for (int i = 0; i < nbg; i++) {
		CK(cudaStreamCreateWithFlags(&bg[i], cudaStreamNonBlocking));
		bgk<<<1, 1, 0, bg[i]>>>(stop);
		for (int k = 0; k < pend; k++) {
			bool w = !strcmp(kind, "write") || (!strcmp(kind, "mixed") && k == 0);
			if (w) {
				DK(cuStreamWriteValue64((CUstream)bg[i],
				                        (CUdeviceptr)(dw + 8 * (i + 1)), k + 1, 0));
			} else if (strcmp(kind, "none")) {
				cudaEvent_t e;
				CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
				CK(cudaEventRecord(e, bg[i]));
				evs.push_back(e);
			}
		}
	}
	cudaEvent_t ev;
	CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	std::vector<uint64_t> t(n);
	volatile uint64_t *w0 = words;
	uint64_t seq = 0;
	for (int i = 0; i < n + 1000; i++) {
		uint64_t t0 = now_ns();
		seq++;
		if (mech[0] == 'K') {
			empty_store<<<1, 1, 0, s>>>(dw, seq);
			while (*w0 < seq) {
			}
		} else {
			empty<<<1, 1, 0, s>>>();
			if (mech[0] == 'E') {
				CK(cudaEventRecord(ev, s));
				while (cudaEventQuery(ev) == cudaErrorNotReady) {
				}
			} else {
				DK(cuStreamWriteValue64((CUstream)s, (CUdeviceptr)dw, seq, 0));
				while (*w0 < seq) {
				}
			}
		}
		uint64_t t1 = now_ns();
		if (i >= 1000)
			t[i - 1000] = t1 - t0;
	}
	std::sort(t.begin(), t.end());
	const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	printf("conn=%s nbg=%d pend=%d kind=%s mech=%s p50=%.2f p99=%.2f\n", conn ? conn : "8", nbg,
	       pend, kind, mech, t[n / 2] / 1e3, t[n * 99 / 100] / 1e3);
	for (int i = 0; i < nbg; i++) {
		if (cudaStreamQuery(bg[i]) == cudaSuccess)
			printf("  bg %d ended early!\n", i);
	}
	unsigned one = 1;
	CK(cudaMemcpyAsync(stop, &one, 4, cudaMemcpyHostToDevice, s));
	CK(cudaDeviceSynchronize());
	return 0;
}
