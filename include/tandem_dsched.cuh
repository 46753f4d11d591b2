/*
 * tandem's device scheduler, the device side: include in the .cu file that defines the handlers
 * (nvcc, sm_70 or later). The scheduler kernel is compiled here, in the program's own module,
 * with the program's handlers: each item is a direct call through a table of the same module, no
 * device function pointer crosses modules. The host API is tandem_dsched.h.
 *
 *     #include "tandem_dsched.cuh"
 *
 *     struct add_args { int *out; int value; };
 *     TDM_DSCHED_HANDLER(add)            // void add(void *args, unsigned size), host and device
 *     {
 *             struct add_args *a = (struct add_args *)args;
 *             *a->out += a->value;
 *     }
 *     TDM_DSCHED_HANDLER(nothing) { (void)args; (void)size; }
 *
 *     TDM_DSCHED_TABLE(my_steps, add, nothing);    // index 0: add, 1: nothing
 *
 * and from C: `extern const tdm_dsched_handlers my_steps;`, cfg.handlers = &my_steps. A handler
 * runs on one thread (lane 0) of a warp, with a copy of the item's arguments; it must return
 * (a warp that never comes back holds its share of the kernel), and a trap in it kills the
 * device's context (a sticky error: every await on the device resumes with -EIO). The same
 * source is compiled for the host, as the twin the `sim` backend runs: code that only a device
 * can run goes under `#ifdef __CUDA_ARCH__`. Device-only handlers (plain __device__ functions)
 * go into TDM_DSCHED_DEVICE_TABLE, which has no host twins (sim refuses it).
 *
 * The protocol, and what each load, store and fence below pairs with: docs/design/dsched.md.
 */
#ifndef TANDEM_DSCHED_CUH
#define TANDEM_DSCHED_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "tandem_dsched.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "tandem_dsched.cuh needs sm_70 or later (__nanosleep)"
#endif

/* Defines a handler, `void name(void *args, unsigned size)`, for the device and the host. */
#define TDM_DSCHED_HANDLER(name) static __host__ __device__ void name(void *args, unsigned size)

/* Threads of a block of the scheduler kernel at most: 32 warps. */
#define TDM__DSCHED_MAX_THREADS 1024
/* After an item was seen, the warps nearest the front poll without sleeping for this long. */
#define TDM__DSCHED_SPIN_NS 200000ull
/* The farthest warps sleep at most this long between looks. */
#define TDM__DSCHED_NAP_MAX_NS 20000u

typedef void (*tdm__dsched_device_fn)(void *args, unsigned size);

static __device__ __forceinline__ uint64_t tdm__dsched_clock(void)
{
	uint64_t t;
	/* volatile: each read where it is written (a loop would hoist it otherwise). */
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* A system-scope acquire-release fence (fence.acq_rel.sys): with the loop's volatile accesses
 * (relaxed, system scope), what the host's release stores and acquire loads pair with. Lighter
 * than __threadfence_system (fence.sc.sys), which orders nothing more that the loop needs. */
static __device__ __forceinline__ void tdm__dsched_fence(void)
{
	asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/*
 * The scheduler's loop, run by every warp of the kernel: claim the next sequence number, wait
 * until its item is published (or the scheduler stops), run it, write its completion word.
 */
static __device__ __forceinline__ void
tdm__dsched_loop(const struct tdm__dsched_queue q, const tdm__dsched_device_fn *fns, unsigned nfns)
{
	__shared__ __align__(16) uint32_t args[TDM__DSCHED_MAX_THREADS / 32][TDM__DSCHED_WORDS];
	const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
	volatile uint64_t *front = q.dev + 1, *front_ns = q.dev + 2;
	for (;;) {
		unsigned long long s = 0;
		/* Device memory, device scope: only the kernel's warps claim. */
		if (lane == 0)
			s = atomicAdd((unsigned long long *)q.dev, 1ull);
		s = __shfl_sync(0xffffffffu, s, 0);
		const uint64_t slot = s & q.mask;
		const volatile uint64_t *item = q.items + slot * TDM__DSCHED_WORDS;
		const uint32_t tag = (uint32_t)(s + 1);
		uint64_t w = 0, w0 = 0, stop;
		unsigned size = 0;
		for (;;) {
			/*
			 * One look: lanes 0..15 read the item's words, lane 16 the stop word, all
			 * in one round trip over the bus. Volatile 64-bit loads: each word is read
			 * whole, so a word whose tag is this item's carries this item's payload,
			 * whatever order the submitter's stores reach the device in (they are
			 * release stores: gpu/dsched.c, put_item).
			 */
			if (lane < TDM__DSCHED_WORDS)
				w = item[lane];
			else if (lane == TDM__DSCHED_WORDS)
				w = *(volatile uint64_t *)q.stop;
			stop = __shfl_sync(0xffffffffu, w, TDM__DSCHED_WORDS);
			if ((stop & TDM__DSCHED_CANCEL) != 0 || s >= (stop & ~TDM__DSCHED_CANCEL))
				return; /* destroy: cancelled, or past the last item (drain) */
			w0 = __shfl_sync(0xffffffffu, w, 0);
			if ((uint32_t)(w0 >> 32) == tag) {
				size = (unsigned)(w0 >> 16) & 0xffu;
				const unsigned nw = (size + 3u) / 4u;
				const bool ok =
				    lane == 0 || lane > nw || (uint32_t)(w >> 32) == tag;
				if (__all_sync(0xffffffffu, ok))
					break;
				continue; /* part of the item is still on its way: look again now */
			}
			/* Not there yet. Warps within 4 items of the front look again at once while
			 * items came recently; farther ones nap, longer the farther they are, so
			 * that an idle scheduler does not keep the bus busy. */
			if (lane == 0) {
				const uint64_t f = *front;
				const uint64_t ahead = s + 1 > f ? s + 1 - f : 0;
				unsigned nap;
				if (ahead <= 4)
					nap = tdm__dsched_clock() - *front_ns < TDM__DSCHED_SPIN_NS
					          ? 0u
					          : 1000u;
				else
					nap = ahead > TDM__DSCHED_NAP_MAX_NS / 256u
					          ? TDM__DSCHED_NAP_MAX_NS
					          : (unsigned)ahead * 256u;
				if (nap != 0)
					__nanosleep(nap);
			}
			__syncwarp();
		}
		if (lane >= 1 && lane <= (size + 3u) / 4u)
			args[warp][lane - 1] = (uint32_t)w;
		__syncwarp();
		if (lane == 0) {
			/* Acquire: pairs with the submitter's release stores of the item's words;
			 * what it wrote before the submit (the buffers the handler reads) is seen
			 * below. */
			tdm__dsched_fence();
			const unsigned h = (unsigned)w0 & 0xffffu;
			if (h < nfns)
				fns[h](args[warp], size);
			/* Release: the handler's writes, and its reads of the item, before the
			 * completion word; pairs with the host's acquire load of it (gpu/dsched.c,
			 * done_word), after which the slot may be written again. */
			tdm__dsched_fence();
			*(volatile uint64_t *)&q.done[slot] = s + 1;
			/* The front, for the naps above: a hint (relaxed), in device memory; after
			 * the completion word, which it must not delay. */
			atomicMax((unsigned long long *)(q.dev + 1), s + 1);
			*front_ns = tdm__dsched_clock();
		}
		__syncwarp();
	}
}

/* The launcher a table carries: the kernel on the scheduler's stream, the caller's current
 * device given back after it. */
#define TDM__DSCHED_LAUNCHER(name)                                                                 \
	static int name##_launch(const tdm_dsched_launch *l)                                       \
	{                                                                                          \
		int prev = -1;                                                                     \
		if (cudaGetDevice(&prev) != cudaSuccess)                                           \
			prev = -1;                                                                 \
		cudaError_t e = cudaSetDevice(l->device);                                          \
		if (e == cudaSuccess) {                                                            \
			cudaLaunchConfig_t c = {};                                                 \
			c.gridDim = dim3(l->blocks);                                               \
			c.blockDim = dim3(l->threads);                                             \
			c.stream = (cudaStream_t)l->stream;                                        \
			e = cudaLaunchKernelEx(&c, name##_kernel, l->queue);                       \
		}                                                                                  \
		if (prev >= 0 && prev != l->device)                                                \
			(void)cudaSetDevice(prev);                                                 \
		if (e != cudaSuccess)                                                              \
			(void)cudaGetLastError();                                                  \
		return (int)e;                                                                     \
	}

#define TDM__DSCHED_KERNEL(name)                                                                   \
	static __global__ void __launch_bounds__(TDM__DSCHED_MAX_THREADS)                          \
	    name##_kernel(const struct tdm__dsched_queue q)                                        \
	{                                                                                          \
		tdm__dsched_loop(                                                                  \
		    q, name##_device_fns,                                                          \
		    (unsigned)(sizeof(name##_device_fns) / sizeof(name##_device_fns[0])));         \
	}

/*
 * Defines `const tdm_dsched_handlers name` (external, C linkage) for handlers defined with
 * TDM_DSCHED_HANDLER: their device table, the kernel that runs them, its launcher, and their host
 * twins for sim. Index i is the i-th handler listed.
 */
#define TDM_DSCHED_TABLE(name, ...)                                                                \
	static __device__ const tdm__dsched_device_fn name##_device_fns[] = {__VA_ARGS__};         \
	static const tdm_dsched_host_fn name##_host_fns[] = {__VA_ARGS__};                         \
	TDM__DSCHED_KERNEL(name)                                                                   \
	TDM__DSCHED_LAUNCHER(name)                                                                 \
	extern "C" const tdm_dsched_handlers name = {                                              \
	    TDM_DSCHED_ABI, (unsigned)(sizeof(name##_host_fns) / sizeof(name##_host_fns[0])),      \
	    name##_launch, name##_host_fns, #name}

/* The same for device-only handlers (`__device__ void f(void *args, unsigned size)`): no host
 * twins, so the scheduler runs on cuda alone (sim: -ENOTSUP). */
#define TDM_DSCHED_DEVICE_TABLE(name, ...)                                                         \
	static __device__ const tdm__dsched_device_fn name##_device_fns[] = {__VA_ARGS__};         \
	TDM__DSCHED_KERNEL(name)                                                                   \
	TDM__DSCHED_LAUNCHER(name)                                                                 \
	extern "C" const tdm_dsched_handlers name = {                                              \
	    TDM_DSCHED_ABI, (unsigned)(sizeof(name##_device_fns) / sizeof(name##_device_fns[0])),  \
	    name##_launch, NULL, #name}

#endif /* TANDEM_DSCHED_CUH */
