// SPDX-License-Identifier: MIT
/*
 * What the plain-CUDA baselines (raw_cuda.cu, raw_graph.cu, pipeline_cuda.cu) share: their clock,
 * the mapping of CUDA errors to negative errno values, the message kept for the caller,
 * %globaltimer, and the one-thread empty and spin kernels that mirror tdm_launch_spin.
 * Each file includes it into its own anonymous namespace, so each keeps its own last_error
 * behind its own *_error() accessor.
 */
#ifndef TANDEM_PERF_CUDA_COMMON_CUH
#define TANDEM_PERF_CUDA_COMMON_CUH

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <cuda_runtime.h>

namespace
{

thread_local char last_error[256];

inline uint64_t now_ns()
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

inline int errno_of(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorStubLibrary:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorDevicesUnavailable:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/* Records what failed for the file's *_error() and clears the runtime's last error. */
inline int fail(const char *what, cudaError_t e)
{
	snprintf(last_error, sizeof(last_error), "%s: %s", what, cudaGetErrorString(e));
	(void)cudaGetLastError();
	return errno_of(e);
}

inline int fail_msg(int rc, const char *what)
{
	snprintf(last_error, sizeof(last_error), "%s", what);
	return rc;
}

__device__ __forceinline__ uint64_t globaltimer()
{
	uint64_t t;
	// volatile: each read must happen where it is written, or the loop would be hoisted.
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void empty_kernel()
{
}

__global__ void spin_kernel(uint32_t ns)
{
	const uint64_t t0 = globaltimer();
	while (globaltimer() - t0 < ns) {
	}
}

inline cudaLaunchConfig_t one_thread(cudaStream_t s)
{
	cudaLaunchConfig_t c = {};
	c.gridDim = dim3(1);
	c.blockDim = dim3(1);
	c.dynamicSmemBytes = 0;
	c.stream = s;
	c.attrs = nullptr;
	c.numAttrs = 0;
	return c;
}

// As tdm_launch_spin: the empty kernel for 0, else the spin kernel; one thread.
inline cudaError_t launch(cudaStream_t s, uint32_t ns)
{
	const cudaLaunchConfig_t c = one_thread(s);
	if (ns == 0)
		return cudaLaunchKernelEx(&c, empty_kernel);
	return cudaLaunchKernelEx(&c, spin_kernel, ns);
}

} // namespace

#define CUDA_TRY(call)                                                                             \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return fail(#call, e_);                                                    \
	} while (0)

#endif
