// SPDX-License-Identifier: MIT
/*
 * The cuda backend's kernels (empty, spin, busy, scale, fault) and their extern "C" launch
 * wrappers, declared in kernels.h for cuda.c. The launch wrappers choose no device and check no
 * arguments: cuda.c does both before it calls in. Only tdm__kernels_load, run once per device
 * when the backend opens, makes that device current and restores the caller's.
 */
#include "kernels.h"

namespace
{

// Kept apart from the spin kernel, even for ns == 0, so that its latency is the pure floor: no
// timer reads, no loop, no parameter.
__global__ void empty_kernel()
{
}

__device__ __forceinline__ uint64_t globaltimer()
{
	uint64_t t;
	// volatile: each read must happen where it is written, or the loop would be hoisted.
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// %globaltimer counts nanoseconds of wall time (its resolution is coarser on some parts, up to a
// microsecond), so the kernel lasts about ns whatever the SM clock does.
__global__ void spin_kernel(uint32_t ns)
{
	const uint64_t t0 = globaltimer();
	while (globaltimer() - t0 < ns) {
	}
}

// Every thread of a block spins from the block's start, read once by thread 0: a block that the
// hardware schedules late (another kernel still held its SM) still spins for the whole ns, so the
// kernel occupies its SMs for at least ns. The launch bounds cap registers so that
// TDM__BUSY_BLOCKS_PER_SM blocks fit on an SM at once: the grid of cuda.c then fills the device
// in one wave, and a second busy kernel finds no room until the first one's blocks retire.
__global__ void __launch_bounds__(TDM__BUSY_BLOCK, TDM__BUSY_BLOCKS_PER_SM) busy_kernel(uint32_t ns)
{
	__shared__ uint64_t t0;

	if (threadIdx.x == 0)
		t0 = globaltimer();
	__syncthreads();
	while (globaltimer() - t0 < ns) {
	}
}

// No __restrict__: y == x (in place) is allowed.
__global__ void scale_kernel(float *y, const float *x, float a, size_t n)
{
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		y[i] = a * x[i];
}

__global__ void fault_kernel()
{
	__trap();
}

cudaLaunchConfig_t config(cudaStream_t s, unsigned blocks, unsigned threads)
{
	cudaLaunchConfig_t c = {};
	c.gridDim = dim3(blocks);
	c.blockDim = dim3(threads);
	c.dynamicSmemBytes = 0;
	c.stream = s;
	c.attrs = nullptr;
	c.numAttrs = 0;
	return c;
}

} // namespace

// cudaLaunchKernelEx returns the launch's own error, where `<<<>>>` + cudaGetLastError() would
// also pick up any earlier unrelated error left on this thread (by user code, say).
extern "C" cudaError_t tdm__kernel_empty(cudaStream_t s)
{
	const cudaLaunchConfig_t c = config(s, 1, 1);
	return cudaLaunchKernelEx(&c, empty_kernel);
}

extern "C" cudaError_t tdm__kernel_spin(cudaStream_t s, uint32_t ns)
{
	const cudaLaunchConfig_t c = config(s, 1, 1);
	return cudaLaunchKernelEx(&c, spin_kernel, ns);
}

extern "C" cudaError_t tdm__kernel_busy(cudaStream_t s, unsigned blocks, uint32_t ns)
{
	const cudaLaunchConfig_t c = config(s, blocks, TDM__BUSY_BLOCK);
	return cudaLaunchKernelEx(&c, busy_kernel, ns);
}

extern "C" cudaError_t tdm__kernel_scale(cudaStream_t s, unsigned blocks, float *y, const float *x,
                                         float a, size_t n)
{
	const cudaLaunchConfig_t c = config(s, blocks, TDM__SCALE_BLOCK);
	return cudaLaunchKernelEx(&c, scale_kernel, y, x, a, n);
}

extern "C" cudaError_t tdm__kernel_fault(cudaStream_t s)
{
	const cudaLaunchConfig_t c = config(s, 1, 1);
	return cudaLaunchKernelEx(&c, fault_kernel);
}

// CUDA loads kernels lazily by default (CUDA_MODULE_LOADING=LAZY since 12.2), and loading one may
// synchronise the context: the first launch of one of ours while a long kernel runs would block
// its worker until that kernel ends (the CUDA programming guide's lazy-loading hazards, which
// suggest preloading with cudaFuncGetAttributes). So each device loads them when the backend opens.
extern "C" cudaError_t tdm__kernels_load(int dev)
{
	int prev = -1;
	cudaError_t e = cudaGetDevice(&prev);
	if (e == cudaSuccess)
		e = cudaSetDevice(dev);
	if (e != cudaSuccess)
		return e;
	const void *const fns[] = {reinterpret_cast<const void *>(empty_kernel),
	                           reinterpret_cast<const void *>(spin_kernel),
	                           reinterpret_cast<const void *>(busy_kernel),
	                           reinterpret_cast<const void *>(scale_kernel),
	                           reinterpret_cast<const void *>(fault_kernel)};
	for (const void *f : fns) {
		cudaFuncAttributes a;
		e = cudaFuncGetAttributes(&a, f);
		if (e != cudaSuccess)
			break;
	}
	const cudaError_t r = cudaSetDevice(prev);
	return e != cudaSuccess ? e : r;
}
