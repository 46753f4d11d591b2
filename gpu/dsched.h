// SPDX-License-Identifier: MIT
/*
 * The device scheduler's internal header (tandem_dsched.h is the API): a scheduler's state, and
 * what the poller and the testing library reach of it. docs/design/dsched.md has the protocol.
 */
#ifndef TDM_GPU_DSCHED_H
#define TDM_GPU_DSCHED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/cpu.h"
#include "base/gate.h"
#include "base/handle.h"
#include "gpu_internal.h"
#include "tandem_dsched.h"

/*
 * A scheduler. Items are numbered by a sequence s = 0, 1, 2, ... (the ticket is s + 1); item s
 * lives in slot s & mask of the queue until it completes, and the slot's completion word holds
 * the last ticket completed there: tickets of one slot complete in order (a slot is written
 * again only once its item completed), so ticket t is over exactly when done[(t - 1) & mask] >= t.
 */
struct tdm__dsched {
	/* Its word (base/handle.h): the handle while live, closing once its destroy began, dead
	 * after. Kept across the object's reuse with the gate, which calls with a stale handle may
	 * still touch (they add and take away); create zeroes the rest, from gpu. */
	struct tdm__hobj hobj;
	/* Submits, awaits and queries in flight; closed by the destroy's store of the word. */
	struct tdm__gate gate;

	_Alignas(TDM__CACHELINE) struct tdm__gpu *gpu;
	struct tdm__gdev *dev;
	struct tdm__dsched_queue q; /* what the kernel runs on */
	void *mem;      /* the pinned block of q.stop, q.done and q.items (the pool's) */
	void *dmem;     /* q.dev: device memory (stream-ordered unless dmem_sync) */
	bool dmem_sync; /* dmem came from device_alloc: no stream-ordered memory */
	void *bs;       /* the backend stream the kernel runs on, the scheduler's own */
	void *engine;   /* the backend's handle of the running kernel */
	/* Per slot, the ticket tdm_dsched_destroy cancelled there (0: none): written by the destroy
	 * before its release store of the slot's completion word, read after an acquire load of
	 * it; atomic (relaxed) because a reader of an earlier ticket of the slot may look at it
	 * while the destroy writes it. */
	uint64_t *cancelled;
	unsigned nhandlers, blocks, warps, capacity;
	/* On gpu->dsched_list (under gpu->lease_lock) while alive, with the task that made it
	 * (tdm__task_fn_now; 0: none), for tdm_gpu_destroy's message. */
	struct tdm__dsched *next, *prev;
	uintptr_t task;

	/* The next sequence number to hand out (tickets 1..tail are out): a CAS among submitters.
	 */
	_Alignas(TDM__CACHELINE) _Atomic uint64_t tail;
	/*
	 * Per thread's stripe (the gate's, base/gate.h), so that workers awaiting and resuming at
	 * once do not share a line: awaits registered on it minus awaits ended on it (a stripe may
	 * go below 0; the sum is the awaits registered and not yet resumed, whose tasks' slots name
	 * this scheduler, and the destroy waits for it to be 0 before it frees anything), and the
	 * counts of tdm_dsched_stats (relaxed).
	 */
	struct {
		_Alignas(TDM__CACHELINE) _Atomic int64_t awaiting;
		_Atomic uint64_t full, awaits, direct;
	} stripe[TDM__GATE_STRIPES];
	/* The poller's, alone: when it last asked the backend about the scheduler's stream. */
	_Alignas(TDM__CACHELINE) uint64_t checked_ns;
};

/* The scheduler handle h names while it is live (its word), else NULL: for the testing library,
 * whose calls must not race the destroy. */
struct tdm__dsched *tdm__dsched_of(const tdm_dsched *h);

/* The await of task t (its slot names a scheduler, TDM__AW_DSCHED): 1 when it is over, with its
 * result in *rc; 0 not yet. Reads only; any thread that holds the await (the poller, or the
 * worker watching it). */
int tdm__dsched_poll(struct tdm__task *t, int *rc);
/* Done with an await of ds (its task is being woken): the caller's last access to ds. */
void tdm__dsched_await_end(struct tdm__dsched *ds);
/* The poller, every TDM__CHECK_NS without progress: asks the backend about ds's stream (once
 * per `now`) and marks the device failed if it died (a trapping handler). */
void tdm__dsched_health(struct tdm__dsched *ds, uint64_t now);

#endif /* TDM_GPU_DSCHED_H */
