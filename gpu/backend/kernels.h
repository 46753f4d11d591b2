// SPDX-License-Identifier: MIT
/*
 * The kernels of the cuda backend (kernels.cu, compiled by nvcc) as plain C entry points for
 * cuda.c. Each wrapper only launches: the caller has made the stream's device current and checked
 * the arguments. They return what the launch call itself returned (cudaLaunchKernelEx), never a
 * stale last error left by some unrelated earlier call as cudaGetLastError would; nothing is
 * enqueued unless it is cudaSuccess. A context already dead of a sticky error fails every launch
 * with that error.
 * Built only with TANDEM_HAVE_CUDA.
 */
#ifndef TDM_GPU_KERNELS_H
#define TDM_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of tdm__kernel_scale. */
#define TDM__SCALE_BLOCK 256u
/* Threads per block of tdm__kernel_busy, and its blocks that fit on one SM at once by its launch
 * bounds: 8 x 256 = 2048 threads, the most an SM of sm_80 or sm_90 holds. */
#define TDM__BUSY_BLOCK 256u
#define TDM__BUSY_BLOCKS_PER_SM 8u

/* An empty kernel, 1x1: the floor of launch-to-completion latency. */
cudaError_t tdm__kernel_empty(cudaStream_t s);
/* One thread that spins on %globaltimer until ns (> 0) nanoseconds have passed. */
cudaError_t tdm__kernel_spin(cudaStream_t s, uint32_t ns);
/* y[i] = a * x[i] for i < n, grid-stride over `blocks` blocks of TDM__SCALE_BLOCK threads. y may
 * equal x. */
cudaError_t tdm__kernel_scale(cudaStream_t s, unsigned blocks, float *y, const float *x, float a,
                              size_t n);
/*
 * `blocks` blocks of TDM__BUSY_BLOCK threads, each spinning on %globaltimer until ns nanoseconds
 * have passed since the block started. With blocks = SMs x the blocks that fit on one SM, the
 * grid occupies every SM for about ns, so that busy kernels run one after another on a device.
 */
cudaError_t tdm__kernel_busy(cudaStream_t s, unsigned blocks, uint32_t ns);
/* One thread that executes a trap: a sticky error that ends the device's context. */
cudaError_t tdm__kernel_fault(cudaStream_t s);
/* Loads every kernel above into device dev's context now rather than at its first launch
 * (lazy loading); the calling thread's current device is left as it was. */
cudaError_t tdm__kernels_load(int dev);

#ifdef __cplusplus
}
#endif
#endif /* TDM_GPU_KERNELS_H */
