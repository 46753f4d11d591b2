/*
 * What the plain-CUDA baselines (raw_cuda.cu, pipeline_cuda.cu) share: their clock, the mapping
 * of CUDA errors to negative errno values, the message kept for the caller, and %globaltimer.
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

} // namespace

#define CUDA_TRY(call)                                                                             \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess)                                                             \
			return fail(#call, e_);                                                    \
	} while (0)

#endif
