// SPDX-License-Identifier: MIT
/*
 * tandem's device scheduler: tiny GPU steps without a kernel launch each.
 *
 * A scheduler is one persistent kernel on a bounded share of a device's SMs, started once, that
 * polls a queue in pinned host memory. The host pushes an item (a handler's index and up to
 * TDM_DSCHED_ARGS_MAX bytes of arguments, copied into the item); a block's fetcher warp takes
 * it and hands it to one of the block's runner warps, which runs the handler and writes the
 * item's completion word into pinned memory; a task awaiting the
 * item resumes through the GPU layer's poller, or through its own worker watching the word. No
 * launch per step: on the H200 a launch costs about 4.9 us of host time, an item a store.
 * Opt-in: a program that never creates a scheduler pays nothing for it. When to use it and when
 * not, the protocol and its memory ordering: docs/design/dsched.md.
 *
 * Handlers are device functions of the program's own .cu file, listed in a table
 * (tandem_dsched.cuh: TDM_DSCHED_HANDLER, TDM_DSCHED_TABLE): the table carries the scheduler
 * kernel compiled with them, and their host twins, which the `sim` backend runs on host threads
 * standing in for the kernel's runner warps. A program without CUDA gives host functions only
 * (TDM_DSCHED_HOST_TABLE below) and runs on `sim`.
 *
 * While a scheduler runs, its kernel never ends: CUDA calls that wait for every kernel of the
 * device wait for it too, until tdm_dsched_destroy. Those are cudaDeviceSynchronize, cudaFree and
 * cudaFreeHost (so tdm_device_free, tdm_managed_free, tdm_host_free; tdm_device_free_async and
 * tdm_pinned_free do not wait), and loading a module lazily (CUDA_MODULE_LOADING=LAZY, CUDA's
 * default: the first launch of a kernel not loaded yet). Set CUDA_MODULE_LOADING=EAGER before
 * CUDA starts, or load your kernels (cudaFuncGetAttributes) before the first scheduler.
 * Launches, copies and stream-ordered memory on other streams run beside it, on the SMs it leaves.
 *
 * Every call returns 0 or a negative errno (tdm_strerror); tdm_await_dsched returns TDM_SUSPENDED
 * or, when the item is over already, its result.
 */
#ifndef TANDEM_DSCHED_H
#define TANDEM_DSCHED_H

#include <stddef.h>
#include <stdint.h>

#include "tandem_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: what this header declares is what it exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct tdm_dsched tdm_dsched;

/* Bytes of arguments one item carries, copied into the item at submit. */
#define TDM_DSCHED_ARGS_MAX 60
/* Handlers one table may hold (indices 0..TDM_DSCHED_MAX_HANDLERS - 1). */
#define TDM_DSCHED_MAX_HANDLERS 65535u
/* Warps of a block that run items, at most (tdm_dsched_config.warps): a block of 1024 threads
 * with its fetcher. */
#define TDM_DSCHED_MAX_WARPS 31u
/* The layout of the queue that a table's kernel was compiled against (tdm_dsched_handlers.abi).
 */
#define TDM_DSCHED_ABI 3u

/* A handler as the simulator runs it: the host twin of a device handler, same arguments. It
 * gets a copy of the item's `size` bytes of arguments, aligned to 8 bytes. */
typedef void (*tdm_dsched_host_fn)(void *args, unsigned size);

/*
 * The queue as the kernel sees it: the one parameter of a table's kernel. Private to tandem and
 * tandem_dsched.cuh (its layout is TDM_DSCHED_ABI): an item is TDM__DSCHED_WORDS 64-bit words,
 * each a 32-bit tag (the item's ticket, cut to 32 bits) over 32 bits of payload; word 0's
 * payload is the handler (bits 0..15) and the size (bits 16..23), words 1.. carry the arguments,
 * 4 bytes each. docs/design/dsched.md says why each word carries its own tag.
 */
#define TDM__DSCHED_WORDS 16
/* Words from one block's stop word to the next's: a 128-byte line each. */
#define TDM__DSCHED_STOP_STRIDE 16
#define TDM__DSCHED_CANCEL (1ull << 63) /* in *stop: items not started are not run */
struct tdm__dsched_queue {
	uint64_t *items; /* capacity x TDM__DSCHED_WORDS words, pinned host memory */
	uint64_t *done;  /* capacity completion words, pinned: the last ticket completed per slot */
	/* pinned: one word a block, TDM__DSCHED_STOP_STRIDE words apart, each the same: items of
	 * internal sequence >= (word & ~CANCEL) never run */
	uint64_t *stop;
	uint64_t *dev;  /* device memory: [0] claims, [1] the front, [2] when the front moved */
	uint64_t mask;  /* capacity - 1 */
	unsigned flags; /* TDM__DSCHED_DEVICE_SCOPE: the runners' fence is GPU-scope */
};
#define TDM__DSCHED_DEVICE_SCOPE 1u

/* What a table's launcher is handed: start the kernel on `stream` (a cudaStream_t of `device`)
 * with `blocks` blocks of `threads` threads and `queue` as its parameter. */
typedef struct tdm_dsched_launch {
	void *stream;
	int device;
	unsigned blocks, threads;
	struct tdm__dsched_queue queue;
} tdm_dsched_launch;

/*
 * A table of handlers, made by TDM_DSCHED_TABLE (tandem_dsched.cuh) in a .cu file, or by
 * TDM_DSCHED_HOST_TABLE (below) for the simulator alone. Index i names the i-th handler listed.
 */
typedef struct tdm_dsched_handlers {
	unsigned abi;   /* TDM_DSCHED_ABI of the code that made it */
	unsigned count; /* handlers, 1..TDM_DSCHED_MAX_HANDLERS */
	/* cuda: starts the table's kernel (0, or the cudaError_t of the launch); NULL: none. */
	int (*launch)(const tdm_dsched_launch *l);
	/* sim: the handlers' host twins, count of them; NULL: none. */
	const tdm_dsched_host_fn *host;
	const char *name; /* the table's name, for messages */
} tdm_dsched_handlers;

/* A table of host functions only, for the simulator (a program without CUDA, a test): defines
 * `static const tdm_dsched_handlers name`. */
#define TDM_DSCHED_HOST_TABLE(name, ...)                                                           \
	static const tdm_dsched_host_fn name##_host_fns[] = {__VA_ARGS__};                         \
	static const tdm_dsched_handlers name = {                                                  \
	    TDM_DSCHED_ABI, (unsigned)(sizeof(name##_host_fns) / sizeof(name##_host_fns[0])),      \
	    NULL, name##_host_fns, #name}

typedef struct tdm_dsched_config {
	const tdm_dsched_handlers *handlers; /* required; must outlive the scheduler */
	/* Blocks of the kernel, each on an SM of its own (1..the device's SMs). 0: the device's
	 * tdm_device_info.dsched_blocks, a 16th of its SMs, at least 1 (8 of an H200's 132, 1 of
	 * a 1g MIG instance's 16). */
	unsigned blocks;
	/* Warps per block that run items, each one item at a time (1..TDM_DSCHED_MAX_WARPS).
	 * 0: 15 (blocks of 512 threads). Each block has one warp more, which takes items from the
	 * queue and hands them to its runners. sim: a host thread stands in for each warp that
	 * runs items, at most 8 in all. */
	unsigned warps;
	/* Items the queue holds, submitted and not completed: a power of two, 16..65536. 0: 4096.
	 */
	unsigned capacity;
	/* Whose view the handlers' writes are ordered in before their items complete:
	 * TDM_DSCHED_SCOPE_SYSTEM (0, the default) or TDM_DSCHED_SCOPE_DEVICE. */
	unsigned scope;
} tdm_dsched_config;

/* tdm_dsched_config.scope: what an item's completion publishes of what its handler wrote. */
enum {
	/* Everything: its writes to host memory (pinned, mapped) and to device memory are seen by
	 * every thread once the item's await resumes. The completion word follows a system-scope
	 * fence, which waits for the GPU's writes to reach host memory: a round trip over the
	 * bus (on an H200 it makes a step's round trip about 1.4 us longer; perf/README.md). */
	TDM_DSCHED_SCOPE_SYSTEM = 0,
	/* Its writes to device memory, in the order the GPU's own work and copies see (a
	 * GPU-scope fence): for handlers that work on device memory and their arguments, read
	 * back by later steps, kernels or copies. A handler that also writes host memory the
	 * host will read calls tdm_dsched_fence_system() (tandem_dsched.cuh) after those writes. */
	TDM_DSCHED_SCOPE_DEVICE = 1,
};

/* Fills *cfg with the defaults (all zero); does nothing when cfg is NULL. */
void tdm_dsched_config_init(tdm_dsched_config *cfg);

/*
 * Starts a scheduler on `device` of gpu: its queue (pinned memory from the pool, device memory
 * from the stream-ordered allocator), a stream of its own, and the table's kernel on it (sim:
 * host threads). Any thread. Destroy every scheduler before its GPU layer: tdm_gpu_destroy
 * waits for them, as for leases.
 * -EINVAL: gpu, cfg, cfg->handlers or out is NULL; device out of range; the table's abi is not
 * TDM_DSCHED_ABI, or its count is 0 or above TDM_DSCHED_MAX_HANDLERS; blocks above the
 * device's SMs, warps above TDM_DSCHED_MAX_WARPS, capacity not a power of two in 16..65536,
 * scope not a TDM_DSCHED_SCOPE_ value.
 * -ENOTSUP: the table has nothing for this backend (cuda: no launch; sim: no host functions),
 * or the device cannot reach pinned host memory (cuda).
 * A refused field of cfg or of the table, and the -ENOTSUP, is named with its value on stderr and
 * in tdm_error_detail (tandem.h).  -ENODEV: no device (backend none), or
 * it failed.  -ESHUTDOWN: the GPU layer is being destroyed, or was.  -EINVAL also: gpu is no GPU
 * layer's handle.  -ENOMEM, -EAGAIN (sim: no thread).
 * -EIO: the launch failed (the launcher's CUDA error).
 */
int tdm_dsched_create(tdm_gpu *gpu, int device, const tdm_dsched_config *cfg, tdm_dsched **out);

/* What tdm_dsched_destroy does with items submitted before it. */
enum {
	/* Every item runs; then the kernel stops. The default. */
	TDM_DSCHED_DRAIN = 0,
	/* Items that a runner warp has started run to their end; the others never run, and their
	 * awaits resume with -ECANCELED. */
	TDM_DSCHED_CANCEL = 1,
};

/* Counts of a scheduler, read with relaxed loads (a snapshot). */
typedef struct tdm_dsched_stats {
	uint64_t submitted; /* items accepted: tickets handed out */
	uint64_t full;      /* submits refused with -EAGAIN: the queue had no room */
	uint64_t awaits;    /* awaits that suspended their task */
	uint64_t direct;    /* of those, the ones their own worker saw complete */
	/* From tdm_dsched_destroy, 0 before: of `submitted`, the items that ran to their end, the
	 * ones that never started (TDM_DSCHED_CANCEL), and the ones whose device failed before
	 * they completed. They add up to submitted. */
	uint64_t completed, cancelled, failed;
	unsigned blocks, warps, capacity; /* the share it took, and its queue */
	unsigned scope;                   /* tdm_dsched_config.scope */
} tdm_dsched_stats;

/*
 * Stops the scheduler and frees it: submits, awaits and queries made once it began fail with
 * -ESHUTDOWN; then, by `how`, every item runs (TDM_DSCHED_DRAIN) or the items not started are
 * cancelled (TDM_DSCHED_CANCEL); it waits until the kernel has stopped (blocking the calling
 * thread: on a worker, that worker runs nothing meanwhile) and every await on it has been
 * resumed, with 0, -ECANCELED, or -EIO where the device failed. out (may be NULL) gets the
 * final counts, which say how many items completed, were cancelled or failed. Calls racing it
 * must be done before an item they await is over (the contract of tdm_gpu_destroy).
 * -EINVAL: ds is NULL or no scheduler's handle, its destroy began already (a second destroy, or
 * one racing the first), or how is neither TDM_DSCHED_DRAIN nor TDM_DSCHED_CANCEL (nothing done).
 */
int tdm_dsched_destroy(tdm_dsched *ds, int how, tdm_dsched_stats *out);

/*
 * Pushes one item: handler `handler` of the table will run once, on one thread (lane 0) of a
 * runner warp of the kernel, with a copy of the `size` bytes at args (args may be NULL when size is
 * 0). *ticket (may be NULL) names the item for tdm_await_dsched and tdm_dsched_query: tickets grow
 * by one per item from 1. Never blocks. What the caller wrote before the call (its buffers) is
 * seen by the handler; the handler's writes are seen after its await resumes (those to host
 * memory: with TDM_DSCHED_SCOPE_SYSTEM, or tdm_dsched_fence_system() in the handler). Items start
 * in about ticket order; with one runner in all (blocks and warps 1) they run one at a time in
 * ticket order, else several run at once and complete in any order. Any thread.
 * -EINVAL: ds is NULL, destroyed or no scheduler's handle, handler not below the table's count,
 * args NULL with size > 0.  -EMSGSIZE: size above TDM_DSCHED_ARGS_MAX.  -EAGAIN: the queue has no
 * room (capacity items submitted and not completed): nothing pushed; await an earlier item, or try
 * again. -EIO: the device failed.  -ESHUTDOWN: tdm_dsched_destroy began (and has not returned: once
 * it has, -EINVAL).
 */
int tdm_dsched_submit(tdm_dsched *ds, unsigned handler, const void *args, size_t size,
                      uint64_t *ticket);

/* One item of a batch. */
typedef struct tdm_dsched_item {
	unsigned handler;
	unsigned size;
	const void *args;
} tdm_dsched_item;

/*
 * Pushes n items at once, all or none, under consecutive tickets from *first (may be NULL): one
 * claim of the queue for the lot. Errors as tdm_dsched_submit, for any item (nothing pushed);
 * -EINVAL also: items NULL, n 0 or above the capacity.
 */
int tdm_dsched_submit_batch(tdm_dsched *ds, const tdm_dsched_item *items, unsigned n,
                            uint64_t *first);

/*
 * Awaits item `ticket`: TDM_SUSPENDED, the task resumed once the item completed, or at once the
 * item's result when it is over already (also tdm_task_result): 0, -ECANCELED (cancelled by
 * tdm_dsched_destroy), -EIO (the device failed: a handler trapped, say; every await on it
 * resumes with -EIO). On sim, where a handler is host code that a dead device cannot stop,
 * the awaits of a scheduler's items wait for its handlers still running to return; the awaits
 * on the device's streams do not (CUDA ends every kernel of a dead context). Awaiting a batch:
 * await its tickets in turn (those over already return at once). Any number of tasks may await
 * one ticket.
 * -EINVAL: t is NULL or not the task running on the calling thread, ds NULL, destroyed, no
 * scheduler's handle or of another executor's GPU layer, ticket 0 or not handed out yet.
 * -ESHUTDOWN: the GPU layer or the scheduler is being destroyed.
 */
int tdm_await_dsched(tdm_task *t, tdm_dsched *ds, uint64_t ticket);

/* Whether item `ticket` is over, without waiting: 0 (completed), -EAGAIN (not yet),
 * -ECANCELED, -EIO (the device failed).  -EINVAL: ds NULL, destroyed or no scheduler's handle,
 * ticket 0 or not handed out yet.  -ESHUTDOWN: tdm_dsched_destroy began (and has not returned). */
int tdm_dsched_query(tdm_dsched *ds, uint64_t ticket);

/* -EINVAL: ds or out is NULL, ds destroyed or no scheduler's handle.  -ESHUTDOWN: its destroy
 * runs. */
int tdm_dsched_stats_get(const tdm_dsched *ds, tdm_dsched_stats *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_DSCHED_H */
