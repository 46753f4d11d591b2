// SPDX-License-Identifier: MIT
/*
 * perf/dsched_cuda.cu: the CUDA side of `tandem-bench gpu-dsched` (dsched_cuda.h says what each
 * entry point measures): the benchmark's handler table, the hand-written persistent-kernel floors
 * (after ../shared/device/persistent_rt.cu, extended to a step length and several host threads),
 * the compute-bound kernel whose time shows what the scheduler's SMs cost other kernels, and the
 * probes of the calls that wait for every kernel of the device.
 */
#include "dsched_cuda.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_common.cuh"
#include "tandem_dsched.cuh"

/* ---- the handler table --------------------------------------------------------------------- */

TDM_DSCHED_HANDLER(bench_spin)
{
	uint32_t ns;
	(void)size;
	memcpy(&ns, args, sizeof(ns));
#ifdef __CUDA_ARCH__
	const uint64_t t0 = tdm__dsched_clock();
	while (tdm__dsched_clock() - t0 < ns) {
	}
#else
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	const uint64_t t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	while (ns != 0) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0 >= ns)
			break;
	}
#endif
}

TDM_DSCHED_TABLE(bench_dsched_steps, bench_spin);

namespace
{

/* ---- the floors ---------------------------------------------------------------------------- */

__global__ void pingpong_kernel(volatile uint64_t *req, volatile uint64_t *ack, uint64_t n)
{
	if (threadIdx.x != 0)
		return;
	for (uint64_t i = 1; i <= n; i++) {
		while (*req < i) {
		}
		__threadfence_system();
		*ack = i;
		__threadfence_system();
	}
}

// Each warp's lane 0 claims items, waits for its slot's sequence word, spins ns, then writes the
// item's completion word (per slot: the last item completed there).
__global__ void ring_kernel(volatile uint64_t *slot, volatile uint64_t *done,
                            unsigned long long *next, uint64_t mask, uint64_t n, uint32_t ns)
{
	if ((threadIdx.x & 31u) != 0)
		return;
	for (;;) {
		const uint64_t i = atomicAdd(next, 1ull);
		if (i >= n)
			return;
		while (slot[i & mask] != i + 1) {
		}
		__threadfence_system();
		if (ns != 0) {
			const uint64_t t0 = globaltimer();
			while (globaltimer() - t0 < ns) {
			}
		}
		__threadfence_system();
		done[i & mask] = i + 1;
	}
}

// A fixed amount of arithmetic per block, over many more blocks than fit at once: the kernel's
// time is the work over the SMs it gets.
__global__ void work_kernel(float *out, unsigned iters)
{
	float a = (float)threadIdx.x, b = 1.0001f;
	for (unsigned i = 0; i < iters; i++)
		a = a * b + 0.5f;
	if (a == -1.0f) // never: keeps the loop
		out[blockIdx.x] = a;
}

struct host_block {
	void *p = nullptr;
	~host_block()
	{
		if (p != nullptr)
			(void)cudaFreeHost(p);
	}
};

struct dev_block {
	void *p = nullptr;
	~dev_block()
	{
		if (p != nullptr)
			(void)cudaFree(p);
	}
};

struct async_block {
	void *p = nullptr;
	cudaStream_t s;
	explicit async_block(cudaStream_t st) : s(st)
	{
	}
	~async_block()
	{
		if (p != nullptr)
			(void)cudaFreeAsync(p, s);
	}
};

struct stream_block {
	cudaStream_t s = nullptr;
	~stream_block()
	{
		if (s != nullptr) {
			(void)cudaStreamSynchronize(s);
			(void)cudaStreamDestroy(s);
		}
	}
};

int use_device0()
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		(void)cudaGetLastError();
		return fail_msg(-ENODEV, "no CUDA device");
	}
	CUDA_TRY(cudaSetDevice(0));
	return 0;
}

} // namespace

extern "C" const char *dsched_cuda_error(void)
{
	return last_error;
}

extern "C" int dsched_floor_pingpong(uint64_t reps, struct dsched_floor_rtt *out)
{
	const uint64_t warm = 1000;
	int rc = use_device0();
	if (rc != 0)
		return rc;
	host_block hb;
	CUDA_TRY(cudaHostAlloc(&hb.p, 256, cudaHostAllocMapped | cudaHostAllocPortable));
	memset(hb.p, 0, 256);
	uint64_t *req = (uint64_t *)hb.p, *ack = req + 8; // lines of their own
	stream_block st;
	CUDA_TRY(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	cudaLaunchConfig_t c = one_thread(st.s);
	c.blockDim = dim3(32);
	CUDA_TRY(cudaLaunchKernelEx(&c, pingpong_kernel, (volatile uint64_t *)req,
	                            (volatile uint64_t *)ack, warm + reps));
	std::vector<double> v;
	v.reserve(reps);
	for (uint64_t i = 1; i <= warm + reps; i++) {
		const uint64_t t0 = now_ns();
		__atomic_store_n(req, i, __ATOMIC_RELEASE);
		while (__atomic_load_n(ack, __ATOMIC_ACQUIRE) < i) {
		}
		if (i > warm)
			v.push_back((double)(now_ns() - t0) / 1e3);
	}
	CUDA_TRY(cudaStreamSynchronize(st.s));
	std::sort(v.begin(), v.end());
	out->n = v.size();
	out->p50_us = v[v.size() / 2];
	out->p99_us = v[v.size() * 99 / 100];
	out->min_us = v[0];
	return 0;
}

extern "C" int dsched_floor_ring(unsigned warps, unsigned threads, uint32_t ns, uint64_t items,
                                 double *per_s)
{
	const uint64_t slots = 1u << 16, mask = slots - 1;
	if (warps == 0 || threads == 0 || items == 0)
		return fail_msg(-EINVAL, "dsched_floor_ring: zero warps, threads or items");
	int rc = use_device0();
	if (rc != 0)
		return rc;
	host_block hs, hd;
	CUDA_TRY(cudaHostAlloc(&hs.p, slots * 8, cudaHostAllocMapped | cudaHostAllocPortable));
	CUDA_TRY(cudaHostAlloc(&hd.p, slots * 8, cudaHostAllocMapped | cudaHostAllocPortable));
	memset(hs.p, 0, slots * 8);
	memset(hd.p, 0, slots * 8);
	uint64_t *slot = (uint64_t *)hs.p, *done = (uint64_t *)hd.p;
	dev_block next;
	CUDA_TRY(cudaMalloc(&next.p, 8));
	CUDA_TRY(cudaMemset(next.p, 0, 8));
	stream_block st;
	CUDA_TRY(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	cudaLaunchConfig_t c = one_thread(st.s);
	c.gridDim = dim3((warps + 31) / 32);
	c.blockDim = dim3(std::min(warps, 32u) * 32);
	CUDA_TRY(cudaLaunchKernelEx(&c, ring_kernel, (volatile uint64_t *)slot,
	                            (volatile uint64_t *)done, (unsigned long long *)next.p, mask,
	                            items, ns));
	// Thread k pushes items k, k + threads, ... and reaps its own in order; an item's slot is
	// free once the item `slots` before it (the same thread's) completed.
	std::atomic<unsigned> ready{0};
	std::atomic<bool> go{false};
	std::vector<std::thread> th;
	uint64_t t0 = 0;
	for (unsigned k = 0; k < threads; k++)
		th.emplace_back([&, k] {
			ready.fetch_add(1);
			while (!go.load(std::memory_order_acquire)) {
			}
			uint64_t reaped = k;
			for (uint64_t i = k; i < items; i += threads) {
				while (i >= slots &&
				       __atomic_load_n(&done[(i - slots) & mask],
				                       __ATOMIC_ACQUIRE) < i - slots + 1) {
				}
				__atomic_store_n(&slot[i & mask], i + 1, __ATOMIC_RELEASE);
				while (reaped < i &&
				       __atomic_load_n(&done[reaped & mask], __ATOMIC_ACQUIRE) >=
				           reaped + 1)
					reaped += threads;
			}
			for (; reaped < items; reaped += threads)
				while (__atomic_load_n(&done[reaped & mask], __ATOMIC_ACQUIRE) <
				       reaped + 1) {
				}
		});
	while (ready.load() < threads) {
	}
	t0 = now_ns();
	go.store(true, std::memory_order_release);
	for (auto &t : th)
		t.join();
	const uint64_t t1 = now_ns();
	CUDA_TRY(cudaStreamSynchronize(st.s));
	*per_s = (double)items / ((double)(t1 - t0) / 1e9);
	return 0;
}

extern "C" int dsched_work_ms(unsigned reps, double *median_ms)
{
	int rc = use_device0();
	if (rc != 0)
		return rc;
	int sms = 0;
	CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	// 64 blocks of 256 threads per SM: many waves, so that the time follows the SMs it gets.
	const unsigned blocks = (unsigned)(sms > 0 ? sms : 1) * 64u, iters = 20000;
	// Stream-ordered memory: cudaFree would wait for the scheduler's kernel.
	stream_block st;
	CUDA_TRY(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	async_block out(st.s);
	CUDA_TRY(cudaMallocAsync(&out.p, blocks * sizeof(float), st.s));
	cudaEvent_t e0, e1;
	CUDA_TRY(cudaEventCreate(&e0));
	CUDA_TRY(cudaEventCreate(&e1));
	std::vector<double> v;
	cudaLaunchConfig_t c = one_thread(st.s);
	c.gridDim = dim3(blocks);
	c.blockDim = dim3(256);
	for (unsigned r = 0; r < reps + 1; r++) {
		CUDA_TRY(cudaEventRecord(e0, st.s));
		CUDA_TRY(cudaLaunchKernelEx(&c, work_kernel, (float *)out.p, iters));
		CUDA_TRY(cudaEventRecord(e1, st.s));
		CUDA_TRY(cudaEventSynchronize(e1));
		float ms = 0;
		CUDA_TRY(cudaEventElapsedTime(&ms, e0, e1));
		if (r > 0) // the first run warms up
			v.push_back(ms);
	}
	(void)cudaEventDestroy(e0);
	(void)cudaEventDestroy(e1);
	std::sort(v.begin(), v.end());
	*median_ms = v[v.size() / 2];
	return 0;
}

extern "C" const char *const dsched_probes[] = {"launch+sync", "cudaMallocAsync+cudaFreeAsync",
                                                "cudaMalloc",  "cudaHostAlloc",
                                                "cudaMemcpy",  "cudaFreeHost",
                                                "cudaFree",    "cudaDeviceSynchronize",
                                                NULL};

extern "C" int dsched_probe(const char *name, double *us)
{
	int rc = use_device0();
	if (rc != 0)
		return rc;
	static void *dev_kept, *host_kept; // made by the probes before them, freed by later ones
	stream_block st;
	CUDA_TRY(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	const uint64_t t0 = now_ns();
	if (strcmp(name, "launch+sync") == 0) {
		CUDA_TRY(launch(st.s, 1000));
		CUDA_TRY(cudaStreamSynchronize(st.s));
	} else if (strcmp(name, "cudaMallocAsync+cudaFreeAsync") == 0) {
		void *p = nullptr;
		CUDA_TRY(cudaMallocAsync(&p, 1 << 20, st.s));
		CUDA_TRY(cudaFreeAsync(p, st.s));
		CUDA_TRY(cudaStreamSynchronize(st.s));
	} else if (strcmp(name, "cudaMalloc") == 0) {
		CUDA_TRY(cudaMalloc(&dev_kept, 1 << 20));
	} else if (strcmp(name, "cudaHostAlloc") == 0) {
		CUDA_TRY(cudaHostAlloc(&host_kept, 1 << 20, cudaHostAllocPortable));
	} else if (strcmp(name, "cudaMemcpy") == 0) {
		void *d = nullptr;
		char h[4096];
		CUDA_TRY(cudaMallocAsync(&d, sizeof(h), st.s));
		CUDA_TRY(cudaStreamSynchronize(st.s));
		CUDA_TRY(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
		CUDA_TRY(cudaFreeAsync(d, st.s));
	} else if (strcmp(name, "cudaFreeHost") == 0) {
		if (host_kept == nullptr)
			CUDA_TRY(cudaHostAlloc(&host_kept, 1 << 20, cudaHostAllocPortable));
		const uint64_t t = now_ns();
		CUDA_TRY(cudaFreeHost(host_kept));
		host_kept = nullptr;
		*us = (double)(now_ns() - t) / 1e3;
		return 0;
	} else if (strcmp(name, "cudaFree") == 0) {
		if (dev_kept == nullptr)
			CUDA_TRY(cudaMalloc(&dev_kept, 1 << 20));
		const uint64_t t = now_ns();
		CUDA_TRY(cudaFree(dev_kept));
		dev_kept = nullptr;
		*us = (double)(now_ns() - t) / 1e3;
		return 0;
	} else if (strcmp(name, "cudaDeviceSynchronize") == 0) {
		CUDA_TRY(cudaDeviceSynchronize());
	} else {
		return fail_msg(-ENOENT, "no such probe");
	}
	*us = (double)(now_ns() - t0) / 1e3;
	return 0;
}
