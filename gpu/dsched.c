// SPDX-License-Identifier: MIT
/*
 * The device scheduler (tandem_dsched.h): a persistent kernel started once per scheduler, fed
 * through a queue in pinned host memory. This file owns the host side of the protocol: the
 * queue's memory, claiming slots and publishing items (submit), the completion words as awaits
 * and queries read them, and the life of a scheduler (create, destroy and what each item became).
 * The kernel is the program's (tandem_dsched.cuh), started by the backend (dsched_start: cuda's
 * launcher, or the sim's host threads). The protocol and every fence it relies on:
 * docs/design/dsched.md.
 *
 * Awaits: a task awaiting an item suspends and is held by its own worker, which watches the
 * item's completion word while it has nothing else to run (held_poll), or handed to the GPU
 * layer's poller (poller.c, kind TDM__AW_DSCHED), which looks at every such await on each sweep.
 * Items complete out of order (many warps), so a stream's one growing word cannot number them:
 * each slot has a completion word of its own.
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/say.h"
#include "dsched.h"
#include "metrics.h"
#include "topology/topology.h"

#define DS_DEFAULT_WARPS 15u
#define DS_DEFAULT_CAPACITY 4096u
#define DS_MIN_CAPACITY 16u
#define DS_MAX_CAPACITY 65536u
/* q.dev: [0] the claims, [1] the front, [2] when it moved; a line of its own. */
#define DS_DEV_BYTES 64u
/* The pinned block: the stop words (one a block, each on a 128-byte line of its own: several
 * warps reading one line of host memory queue behind each other), then the completion words,
 * then the items; each part on lines of its own, so that the device's writes (done) and the
 * host's (items) share none. */
#define DS_STOP_LINE (TDM__DSCHED_STOP_STRIDE * sizeof(uint64_t))

void tdm_dsched_config_init(tdm_dsched_config *cfg)
{
	if (cfg != NULL)
		memset(cfg, 0, sizeof(*cfg));
}

/* The calling thread's stripe of ds->stripe (and of the gate). */
static inline unsigned my_stripe(void)
{
	return tdm__gate_mine != 0 ? tdm__gate_mine - 1 : tdm__gate_stripe_new();
}

/* ---- the completion words ---- */

static inline uint64_t slot_of(const struct tdm__dsched *ds, uint64_t s)
{
	return s & ds->q.mask;
}

/* The last ticket completed in slot. Acquire: pairs with the kernel's release of the word (its
 * fence before the store; sim: the release store) and with the destroy's release store for a
 * cancelled item; what the handler wrote (or the destroy's cancelled mark) is seen after it. */
static inline uint64_t done_word(const struct tdm__dsched *ds, uint64_t slot)
{
	return __atomic_load_n(&ds->q.done[slot], __ATOMIC_ACQUIRE);
}

/* Whether item s may be written: its slot's previous item (s - capacity) completed, so no warp
 * reads the slot any more (the kernel writes the word after it copied the item out). */
static inline bool slot_free(const struct tdm__dsched *ds, uint64_t s)
{
	return s < ds->capacity || done_word(ds, slot_of(ds, s)) >= s + 1 - ds->capacity;
}

/* 1 when item `ticket` is over, with its result in *rc; 0 not yet. A failed device fails every
 * item (whatever its word says: a dead context's memory is not to be trusted), once the backend
 * says nothing runs on the scheduler's stream any more (sim: a handler still writing). */
static int item_state(struct tdm__dsched *ds, uint64_t ticket, int *rc)
{
	/* Acquire: pairs with the release in tdm__device_fail. */
	if (atomic_load_explicit(&ds->dev->failed, memory_order_acquire)) {
		if (ds->gpu->ops->stream_query(ds->gpu->b, ds->bs) == -EAGAIN)
			return 0;
		*rc = -EIO;
		return 1;
	}
	uint64_t slot = slot_of(ds, ticket - 1);
	if (done_word(ds, slot) < ticket)
		return 0;
	/* Relaxed: after the acquire above, which a cancelling destroy's release store of the
	 * word pairs with (struct tdm__dsched's note). */
	*rc = __atomic_load_n(&ds->cancelled[slot], __ATOMIC_RELAXED) == ticket ? -ECANCELED : 0;
	return 1;
}

/* ---- publishing ---- */

/* Claims n consecutive sequence numbers whose slots are free: 0 and *first, or -EAGAIN. */
static int claim(struct tdm__dsched *ds, unsigned n, uint64_t *first)
{
	/* Relaxed, the load and the CAS: the tail only numbers the items among submitters; the
	 * slots' reuse is ordered by the acquire loads of their completion words (slot_free). */
	uint64_t s = atomic_load_explicit(&ds->tail, memory_order_relaxed);
	for (;;) {
		for (unsigned k = 0; k < n; k++)
			if (!slot_free(ds, s + k)) {
				atomic_fetch_add_explicit(&ds->stripe[my_stripe()].full, 1,
				                          memory_order_relaxed);
				return -EAGAIN;
			}
		if (atomic_compare_exchange_weak_explicit(
		        &ds->tail, &s, s + n, memory_order_relaxed, memory_order_relaxed))
			break;
	}
	*first = s;
	return 0;
}

/* Writes item s: every word, each tagged with the ticket's low 32 bits, word 0 (handler and
 * size) last. */
static void put_item(struct tdm__dsched *ds, uint64_t s, unsigned handler, const void *args,
                     unsigned size)
{
	uint64_t *item = ds->q.items + slot_of(ds, s) * TDM__DSCHED_WORDS;
	uint64_t tag = (uint64_t)(uint32_t)(s + 1) << 32;
	uint32_t pay[TDM__DSCHED_WORDS - 1] = {0};
	if (size > 0)
		memcpy(pay, args, size);
	/*
	 * Release, each word: pairs with the kernel's acquire fence after it has seen every word
	 * it needs carry this tag (tandem_dsched.cuh; sim: its acquire loads): what the caller
	 * wrote before the submit happens before the handler runs. Each word is read whole and
	 * says by its tag which item it belongs to, so the order in which the words reach the
	 * device does not matter; the slot's previous item has completed (slot_free), and its
	 * words have different tags. Every word is written, so none left over from an older
	 * item of the slot can carry this tag.
	 */
	for (unsigned k = 1; k < TDM__DSCHED_WORDS; k++)
		__atomic_store_n(&item[k], tag | pay[k - 1], __ATOMIC_RELEASE);
	__atomic_store_n(&item[0], tag | (uint64_t)handler | (uint64_t)size << 16,
	                 __ATOMIC_RELEASE);
}

/* 16 schedulers a chunk (each some 4 KiB, most of it its stripes), 65536 at once. */
#define DS_TAG 0x13u
#define DS_SHIFT 4
#define DS_CHUNKS 4096
static char *_Atomic ds_chunks[DS_CHUNKS];
static struct tdm__htable ds_handles = TDM__HTABLE_INIT("device scheduler", DS_TAG, DS_SHIFT,
                                                        DS_CHUNKS, struct tdm__dsched, ds_chunks);

static struct tdm__dsched *ds_find(const tdm_dsched *h)
{
	return tdm__h_find(ds_chunks, DS_TAG, DS_SHIFT, DS_CHUNKS, sizeof(struct tdm__dsched), h);
}

_Static_assert(offsetof(struct tdm__dsched, hobj) == 0, "tdm__h_live reads the word first");

struct tdm__dsched *tdm__dsched_of(const tdm_dsched *h)
{
	return tdm__h_live(ds_chunks, DS_TAG, DS_SHIFT, DS_CHUNKS, sizeof(struct tdm__dsched), h);
}

/*
 * The gate of submits, awaits and queries (base/gate.h, tdm__gate_enter_h): the scheduler h
 * names, live until tdm__gate_leave(*in), or NULL and *rc: -ESHUTDOWN once its destroy began,
 * -EINVAL once it ended, or for what is no scheduler's handle. The handle's check is the gate's
 * own load of the word: a submit pays what it paid before handles.
 */
static inline struct tdm__dsched *ds_enter(const tdm_dsched *h, _Atomic unsigned **in, int *rc)
{
	struct tdm__dsched *ds = ds_find(h);
	uint64_t now;
	if (ds != NULL &&
	    (*in = tdm__gate_enter_h(&ds->gate, &ds->hobj.h, (uint64_t)(uintptr_t)h, &now)) != NULL)
		return ds;
	*rc = ds != NULL && tdm__h_why(ds, h, now) == TDM__H_IS_CLOSING ? -ESHUTDOWN : -EINVAL;
	return NULL;
}

/* Pushes n checked items under consecutive tickets: 0 and *first (may be NULL), or an error.
 * Inside the gate. */
static int push(struct tdm__dsched *ds, const tdm_dsched_item *items, unsigned n, uint64_t *first)
{
	uint64_t s;
	int rc = -EIO;
	/* Relaxed: a check that spares the queue work no device will run; an item pushed as the
	 * device dies fails at its await. */
	if (!atomic_load_explicit(&ds->dev->failed, memory_order_relaxed))
		rc = claim(ds, n, &s);
	if (rc == 0) {
		for (unsigned k = 0; k < n; k++)
			put_item(ds, s + k, items[k].handler, items[k].args, items[k].size);
		if (ds->gpu->ops->dsched_kick != NULL) /* sim: its threads may sleep */
			ds->gpu->ops->dsched_kick(ds->gpu->b, ds->engine);
		if (first != NULL)
			*first = s + 1;
	}
	return rc;
}

int tdm_dsched_submit(tdm_dsched *h, unsigned handler, const void *args, size_t size,
                      uint64_t *ticket)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__dsched *ds = ds_enter(h, &in, &rc);
	if (ds == NULL)
		return rc;
	if (handler >= ds->nhandlers || (size > 0 && args == NULL)) {
		rc = -EINVAL;
	} else if (size > TDM_DSCHED_ARGS_MAX) {
		rc = -EMSGSIZE;
	} else {
		tdm_dsched_item one = {handler, (unsigned)size, args};
		rc = push(ds, &one, 1, ticket);
	}
	tdm__gate_leave(in);
	return rc;
}

/* The items' own errors, 0 when they may be pushed. */
static int items_check(const struct tdm__dsched *ds, const tdm_dsched_item *items, unsigned n)
{
	if (items == NULL || n == 0 || n > ds->capacity)
		return -EINVAL;
	for (unsigned k = 0; k < n; k++) {
		if (items[k].handler >= ds->nhandlers ||
		    (items[k].size > 0 && items[k].args == NULL))
			return -EINVAL;
		if (items[k].size > TDM_DSCHED_ARGS_MAX)
			return -EMSGSIZE;
	}
	return 0;
}

int tdm_dsched_submit_batch(tdm_dsched *h, const tdm_dsched_item *items, unsigned n,
                            uint64_t *first)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__dsched *ds = ds_enter(h, &in, &rc);
	if (ds == NULL)
		return rc;
	rc = items_check(ds, items, n);
	if (rc == 0)
		rc = push(ds, items, n, first);
	tdm__gate_leave(in);
	return rc;
}

/* ---- awaits and queries ---- */

/* A ticket handed out already. Relaxed: the caller got it from a submit that happens before. */
static bool ticket_valid(struct tdm__dsched *ds, uint64_t ticket)
{
	return ticket != 0 && ticket <= atomic_load_explicit(&ds->tail, memory_order_relaxed);
}

int tdm_dsched_query(tdm_dsched *h, uint64_t ticket)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__dsched *ds = ds_enter(h, &in, &rc);
	if (ds == NULL)
		return rc;
	rc = -EINVAL;
	if (ticket_valid(ds, ticket) && item_state(ds, ticket, &rc) == 0)
		rc = -EAGAIN;
	tdm__gate_leave(in);
	return rc;
}

int tdm__dsched_poll(struct tdm__task *t, int *rc)
{
	return item_state(TDM__AW_PTR(t), TDM__AW(t)->seq, rc);
}

void tdm__dsched_await_end(struct tdm__dsched *ds)
{
	/* Release: pairs with the destroy's acquire loads (awaits_out); this holder's reads of ds
	 * happen before the destroy frees it. */
	atomic_fetch_sub_explicit(&ds->stripe[my_stripe()].awaiting, 1, memory_order_release);
}

void tdm__dsched_health(struct tdm__dsched *ds, uint64_t now)
{
	if (ds->checked_ns == now)
		return;
	ds->checked_ns = now;
	struct tdm__gpu *gpu = ds->gpu;
	/* A running kernel's stream is busy (-EAGAIN); -EIO: a sticky error killed the context. */
	if (gpu->ops->stream_query(gpu->b, ds->bs) == -EIO)
		tdm__device_fail(ds->dev);
}

/* A held await (tdm__task_hold): the poller's test, then the poller's bookkeeping. */
static int held_poll(struct tdm__task *t, int *rc)
{
	struct tdm__dsched *ds = TDM__AW_PTR(t);
	if (item_state(ds, TDM__AW(t)->seq, rc) == 0)
		return 0;
	struct tdm__gpu *gpu = ds->gpu;
	atomic_fetch_add_explicit(&ds->stripe[my_stripe()].direct, 1, memory_order_relaxed);
	tdm__dsched_await_end(ds); /* the last access to ds */
	tdm__metrics_await_done(gpu, t);
	/* The last access to gpu. Release: pairs with the poller's seq_cst load of active before
	 * it ends, after which tdm_gpu_destroy may free gpu. */
	atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
	return 1;
}

static void held_handoff(struct tdm__task *t)
{
	/* The await still counts in ds->stripe: ds, and so its layer, live until it is over. */
	tdm__await_submit(((struct tdm__dsched *)TDM__AW_PTR(t))->gpu, t);
}

static int fail_now(struct tdm__task *t, int rc)
{
	return t != NULL ? tdm__task_fail(t, rc) : rc;
}

int tdm_await_dsched(tdm_task *pub, tdm_dsched *h, uint64_t ticket)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL)
		return fail_now(t, -EINVAL);
	_Atomic unsigned *in;
	int rc;
	struct tdm__dsched *ds = ds_enter(h, &in, &rc);
	if (ds == NULL)
		return fail_now(t, rc);
	struct tdm__gpu *gpu = ds->gpu;
	rc = 0;
	if (tdm__task_executor(t) != gpu->ex || !ticket_valid(ds, ticket))
		rc = -EINVAL;
	else if (item_state(ds, ticket, &rc) == 0)
		rc = 1; /* not over yet: suspend */
	if (rc == 1) {
		rc = tdm__await_register(gpu, gpu->self); /* ds holds its layer */
		if (rc == 0) {
			/* Counted while inside the gate: the destroy, past its drain, waits for it
			 * (the gate's leave, a release, orders the count before the drain's end).
			 */
			unsigned k = my_stripe();
			atomic_fetch_add_explicit(&ds->stripe[k].awaiting, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&ds->stripe[k].awaits, 1, memory_order_relaxed);
			TDM__AW(t)->obj = (void *)((uintptr_t)ds | TDM__AW_DSCHED);
			TDM__AW(t)->seq = ticket;
			rc = 1;
		}
	}
	/* The await's own count keeps ds alive past the gate from here. */
	tdm__gate_leave(in);
	if (rc != 1)
		return fail_now(t, rc);
	tdm__task_suspend(t);
	/* A completion word is one memory read: the worker may watch it itself while it has
	 * nothing else to run. After the hand-off, ds and gpu may be gone. */
	if (!gpu->direct || !tdm__task_hold(t, held_poll, held_handoff))
		tdm__await_submit(gpu, t);
	return TDM_SUSPENDED;
}

/* ---- life ---- */

/* Every block's stop word (each on a line of its own: docs/design/dsched.md). Release: pairs
 * with the fetchers' loads of their block's word (sim: acquire loads of block 0's); the kernel
 * is not started yet when dsched_open sets it. */
static void set_stop(struct tdm__dsched *ds, uint64_t stop)
{
	for (unsigned k = 0; k < ds->blocks; k++)
		__atomic_store_n(&ds->q.stop[(size_t)k * TDM__DSCHED_STOP_STRIDE], stop,
		                 __ATOMIC_RELEASE);
}

static bool pow2(unsigned v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

/* What create holds, freed in reverse: the stream (after the device memory's stream-ordered
 * free), the pinned block, the cancel marks; then the scheduler goes back to the table, its word
 * dead. */
static void release_parts(struct tdm__dsched *ds)
{
	struct tdm__gpu *gpu = ds->gpu;
	const struct tdm__backend_ops *ops = gpu->ops;
	/* A dead device refuses the stream-ordered free (it enqueues nothing): freed at once then,
	 * as a dead context's memory is (and with no kernel left to wait for). */
	if (ds->dmem != NULL && (ds->dmem_sync || ops->free_async(gpu->b, ds->bs, ds->dmem) != 0))
		(void)ops->device_free(gpu->b, ds->dev->index, ds->dmem);
	if (ds->bs != NULL)
		ops->stream_destroy(gpu->b, ds->bs);
	if (ds->mem != NULL)
		(void)tdm__pinned_free(gpu, ds->mem);
	free(ds->cancelled);
	/* Release: the frees happen before a check that reads the word dead, and the reuse. */
	uint64_t w = atomic_load_explicit(&ds->hobj.h, memory_order_relaxed);
	atomic_store_explicit(&ds->hobj.h, (w & ~TDM__H_STATE) | TDM__H_DEAD, memory_order_release);
	tdm__h_put(&ds_handles, &ds->hobj);
}

/* Device memory for q.dev, zeroed in the stream's order before the kernel starts. Stream-ordered
 * where the backend has it: cudaFree would wait for every kernel of the device, another
 * scheduler's among them. */
static int take_dev_memory(struct tdm__dsched *ds)
{
	struct tdm__gpu *gpu = ds->gpu;
	const struct tdm__backend_ops *ops = gpu->ops;
	int rc = ops->malloc_async(gpu->b, ds->bs, DS_DEV_BYTES, &ds->dmem);
	if (rc == -ENOTSUP) {
		ds->dmem_sync = true;
		rc = ops->device_alloc(gpu->b, ds->dev->index, DS_DEV_BYTES, &ds->dmem);
	}
	if (rc != 0) {
		ds->dmem = NULL;
		return rc;
	}
	return ops->memset_async != NULL
	           ? ops->memset_async(gpu->b, ds->bs, ds->dmem, 0, DS_DEV_BYTES)
	           : -ENOTSUP;
}

static int dsched_open(struct tdm__dsched *ds, const tdm_dsched_config *cfg)
{
	struct tdm__gpu *gpu = ds->gpu;
	const struct tdm__backend_ops *ops = gpu->ops;
	size_t done_bytes = ((size_t)ds->capacity * sizeof(uint64_t) + 255u) & ~(size_t)255u;
	size_t stop_bytes = ((size_t)ds->blocks * DS_STOP_LINE + 255u) & ~(size_t)255u;
	size_t bytes =
	    stop_bytes + done_bytes + (size_t)ds->capacity * TDM__DSCHED_WORDS * sizeof(uint64_t);
	ds->cancelled = calloc(ds->capacity, sizeof(*ds->cancelled));
	if (ds->cancelled == NULL)
		return -ENOMEM;
	int rc = tdm__pinned_alloc(gpu, bytes, &ds->mem);
	if (rc != 0) {
		ds->mem = NULL;
		return rc;
	}
	memset(ds->mem, 0, bytes);
	ds->q.stop = ds->mem;
	ds->q.done = (uint64_t *)((char *)ds->mem + stop_bytes);
	ds->q.items = (uint64_t *)((char *)ds->mem + stop_bytes + done_bytes);
	ds->q.mask = ds->capacity - 1;
	ds->q.flags = cfg->scope == TDM_DSCHED_SCOPE_DEVICE ? TDM__DSCHED_DEVICE_SCOPE : 0;
	/* No stop yet: every sequence number may run. */
	set_stop(ds, TDM__DSCHED_CANCEL - 1);
	/* Its own stream, of the high priority: its blocks get the first SMs that free up. */
	rc = ops->stream_create(gpu->b, ds->dev->index, ds->dev->prio[1], &ds->bs);
	if (rc != 0) {
		ds->bs = NULL;
		return rc;
	}
	if ((rc = take_dev_memory(ds)) != 0)
		return rc;
	ds->q.dev = ds->dmem;
	struct tdm__dsched_run run = {.handlers = cfg->handlers,
	                              .queue = ds->q,
	                              .device = ds->dev->index,
	                              .blocks = ds->blocks,
	                              .warps = ds->warps};
	rc = ops->dsched_start(gpu->b, ds->bs, &run, &ds->engine);
	/* A launch refused by a dead context: the device's failure, as for any enqueue. */
	if (rc == -EIO && ops->stream_query(gpu->b, ds->bs) == -EIO)
		tdm__device_fail(ds->dev);
	return rc;
}

/* tdm_dsched_create inside the layer's gate: the checks that need the layer, the scheduler. */
static int dsched_create(struct tdm__gpu *gpu, int device, const tdm_dsched_config *cfg,
                         tdm_dsched **out)
{
	const tdm_dsched_handlers *h = cfg->handlers;
	const char *table = h->name != NULL ? h->name : "(unnamed)";
	if (gpu->ops == NULL || gpu->ndev == 0)
		return device < 0 ? -EINVAL : -ENODEV;
	if (device < 0 || device >= gpu->ndev)
		return -EINVAL;
	struct tdm__gdev *d = &gpu->devs[device];
	unsigned sms = (unsigned)(d->info.sm_count > 0 ? d->info.sm_count : 1);
	if (cfg->blocks > sms)
		return tdm__refuse(-EINVAL, "tdm_dsched_config.blocks=%u: above device %d's %u SMs",
		                   cfg->blocks, device, sms);
	if (gpu->ops->dsched_start == NULL || !d->info.maps_host)
		return tdm__refuse(
		    -ENOTSUP,
		    "device %d (%s): cannot reach pinned host memory, where a device "
		    "scheduler's queue lives",
		    device, d->info.name);
	if (gpu->ops == &tdm__backend_sim ? h->host == NULL : h->launch == NULL)
		return tdm__refuse(-ENOTSUP, "table %.64s: no %s for the %s backend", table,
		                   gpu->ops == &tdm__backend_sim ? "host functions" : "launch",
		                   gpu->ops->name);
	/* Acquire: pairs with the release in tdm__device_fail. */
	if (atomic_load_explicit(&d->failed, memory_order_acquire))
		return -ENODEV;
	uint64_t handle;
	struct tdm__dsched *ds = tdm__h_take(&ds_handles, &handle);
	if (ds == NULL)
		return -ENOMEM;
	/* The word and the gate stay as they are (struct tdm__dsched). */
	memset(&ds->gpu, 0, sizeof(*ds) - offsetof(struct tdm__dsched, gpu));
	/* Relaxed: the word keeps saying dead (or 0) until the publication below; only its
	 * generation moves here, so that release_parts marks this one dead if it fails. */
	atomic_store_explicit(&ds->hobj.h, handle | TDM__H_DEAD, memory_order_relaxed);
	ds->gpu = gpu;
	ds->dev = d;
	ds->nhandlers = h->count;
	ds->blocks = cfg->blocks != 0 ? cfg->blocks : gpu->topo->plans[device].dsched_blocks;
	if (ds->blocks == 0)
		ds->blocks = 1;
	ds->warps = cfg->warps != 0 ? cfg->warps : DS_DEFAULT_WARPS;
	ds->capacity = cfg->capacity != 0 ? cfg->capacity : DS_DEFAULT_CAPACITY;
	int rc = dsched_open(ds, cfg);
	if (rc != 0) {
		release_parts(ds);
		return rc;
	}
	ds->task = tdm__task_fn_now();
	pthread_mutex_lock(&gpu->lease_lock);
	ds->next = gpu->dsched_list;
	if (ds->next != NULL)
		ds->next->prev = ds;
	gpu->dsched_list = ds;
	pthread_mutex_unlock(&gpu->lease_lock);
	/* Counted inside the layer's gate: tdm_gpu_destroy, past its drain, sees it. */
	atomic_fetch_add_explicit(&gpu->dscheds, 1, memory_order_relaxed);
	tdm__h_publish(&ds->hobj, handle);
	*out = (tdm_dsched *)(uintptr_t)handle;
	return 0;
}

int tdm_dsched_create(tdm_gpu *layer, int device, const tdm_dsched_config *cfg, tdm_dsched **out)
{
	tdm__detail_begin("tdm_dsched_create");
	if (cfg == NULL || cfg->handlers == NULL || out == NULL)
		return -EINVAL;
	const tdm_dsched_handlers *h = cfg->handlers;
	const char *table = h->name != NULL ? h->name : "(unnamed)";
	if (h->abi != TDM_DSCHED_ABI)
		return tdm__refuse(
		    -EINVAL,
		    "tdm_dsched_handlers.abi=%u (table %.64s): not TDM_DSCHED_ABI (%u); "
		    "rebuild the table with this tandem's headers",
		    h->abi, table, TDM_DSCHED_ABI);
	if (h->count == 0 || h->count > TDM_DSCHED_MAX_HANDLERS)
		return tdm__refuse(-EINVAL,
		                   "tdm_dsched_handlers.count=%u (table %.64s): not 1 to %u",
		                   h->count, table, TDM_DSCHED_MAX_HANDLERS);
	if (cfg->warps > TDM_DSCHED_MAX_WARPS)
		return tdm__refuse(-EINVAL, "tdm_dsched_config.warps=%u: above %u", cfg->warps,
		                   TDM_DSCHED_MAX_WARPS);
	if (cfg->scope != TDM_DSCHED_SCOPE_SYSTEM && cfg->scope != TDM_DSCHED_SCOPE_DEVICE)
		return tdm__refuse(-EINVAL,
		                   "tdm_dsched_config.scope=%u: not TDM_DSCHED_SCOPE_SYSTEM (0) or "
		                   "TDM_DSCHED_SCOPE_DEVICE (1)",
		                   cfg->scope);
	if (cfg->capacity != 0 && (!pow2(cfg->capacity) || cfg->capacity < DS_MIN_CAPACITY ||
	                           cfg->capacity > DS_MAX_CAPACITY))
		return tdm__refuse(
		    -EINVAL, "tdm_dsched_config.capacity=%u: not a power of two from %u to %u",
		    cfg->capacity, DS_MIN_CAPACITY, DS_MAX_CAPACITY);
	TDM__GPU_CALL(layer, dsched_create(gpu, device, cfg, out));
}

/* The counts of tdm_dsched_stats into *out. */
static void stats_of(const struct tdm__dsched *ds, tdm_dsched_stats *out)
{
	memset(out, 0, sizeof(*out));
	/* Relaxed: counters; a snapshot is all that is promised. */
	out->submitted = atomic_load_explicit(&ds->tail, memory_order_relaxed);
	for (unsigned k = 0; k < TDM__GATE_STRIPES; k++) {
		out->full += atomic_load_explicit(&ds->stripe[k].full, memory_order_relaxed);
		out->awaits += atomic_load_explicit(&ds->stripe[k].awaits, memory_order_relaxed);
		out->direct += atomic_load_explicit(&ds->stripe[k].direct, memory_order_relaxed);
	}
	out->blocks = ds->blocks;
	out->warps = ds->warps;
	out->capacity = ds->capacity;
	out->scope = (ds->q.flags & TDM__DSCHED_DEVICE_SCOPE) != 0 ? TDM_DSCHED_SCOPE_DEVICE
	                                                           : TDM_DSCHED_SCOPE_SYSTEM;
}

/*
 * Whether awaits registered on ds are not all over. Past the destroy's gate drain none is
 * registered any more: the stripes only go down while they are read, so a sum of 0 read stripe
 * by stripe means 0 at the end of the reading (each stripe read at or above its final value).
 * Acquire: pairs with tdm__dsched_await_end; those awaits' reads of ds come before the frees.
 */
static bool awaits_out(struct tdm__dsched *ds)
{
	int64_t sum = 0;
	for (unsigned k = 0; k < TDM__GATE_STRIPES; k++)
		sum += atomic_load_explicit(&ds->stripe[k].awaiting, memory_order_acquire);
	return sum != 0;
}

/* The last ticket of `slot` among tickets 1..tail, or 0 when none went there. */
static uint64_t last_ticket(const struct tdm__dsched *ds, uint64_t slot, uint64_t tail)
{
	if (tail <= slot)
		return 0;
	return slot + 1 + (tail - 1 - slot) / ds->capacity * ds->capacity;
}

int tdm_dsched_destroy(tdm_dsched *h, int how, tdm_dsched_stats *out)
{
	struct tdm__dsched *ds = ds_find(h);
	if (ds == NULL || (how != TDM_DSCHED_DRAIN && how != TDM_DSCHED_CANCEL))
		return -EINVAL;
	/* Closes the handle: of two destroys one changes the word, the other says -EINVAL, as
	 * does one after the destroy. Seq_cst: the gate's Dekker pair (tdm__gate_enter_h); every
	 * submit is out after the drain, so every sequence number below the tail is published.
	 * Its acquire side pairs with create's publication of the word: the fields are this
	 * scheduler's. */
	uint64_t live = (uint64_t)(uintptr_t)h;
	if (!atomic_compare_exchange_strong_explicit(&ds->hobj.h, &live, live | TDM__H_CLOSING,
	                                             memory_order_seq_cst, memory_order_relaxed))
		return -EINVAL;
	struct tdm__gpu *gpu = ds->gpu;
	const struct tdm__backend_ops *ops = gpu->ops;
	tdm__gate_drain(&ds->gate);
	uint64_t tail = atomic_load_explicit(&ds->tail, memory_order_relaxed);
	/* No item at or past the tail runs, and with CANCEL none a runner has not started. */
	set_stop(ds, tail | (how == TDM_DSCHED_CANCEL ? TDM__DSCHED_CANCEL : 0));
	ops->dsched_join(gpu->b, ds->bs, ds->engine);
	/* The kernel is over: a word not written now never will be. A dead device fails what it
	 * did not complete; a live one, under CANCEL, had it cancelled. The stream is idle now but
	 * on a dead sim device, whose query says -EAGAIN while other work still writes memory. */
	int q;
	while ((q = ops->stream_query(gpu->b, ds->bs)) == -EAGAIN)
		sched_yield();
	if (q == -EIO)
		tdm__device_fail(ds->dev);
	bool dead = atomic_load_explicit(&ds->dev->failed, memory_order_acquire);
	uint64_t cancelled = 0, failed = 0;
	for (uint64_t slot = 0; slot < ds->capacity; slot++) {
		uint64_t last = last_ticket(ds, slot, tail);
		/* Earlier tickets of the slot completed before it was written again. */
		if (last == 0 || done_word(ds, slot) >= last)
			continue;
		if (dead) {
			failed++;
			continue;
		}
		cancelled++;
		__atomic_store_n(&ds->cancelled[slot], last, __ATOMIC_RELAXED);
		/* Release: pairs with item_state's acquire load; the mark above is seen with it. */
		__atomic_store_n(&ds->q.done[slot], last, __ATOMIC_RELEASE);
	}
	/* The awaits still out are resumed by the poller or their workers, now that every item is
	 * over. Acquire: pairs with tdm__dsched_await_end; their reads of ds come before the frees.
	 */
	while (awaits_out(ds))
		sched_yield();
	/* Calls refused since the first drain touched the gate: let them leave it. */
	tdm__gate_drain(&ds->gate);
	if (out != NULL) {
		stats_of(ds, out);
		out->cancelled = cancelled;
		out->failed = failed;
		out->completed = tail - cancelled - failed;
	}
	pthread_mutex_lock(&gpu->lease_lock);
	if (ds->prev != NULL)
		ds->prev->next = ds->next;
	else
		gpu->dsched_list = ds->next;
	if (ds->next != NULL)
		ds->next->prev = ds->prev;
	pthread_mutex_unlock(&gpu->lease_lock);
	release_parts(ds);
	/* Release: pairs with tdm_gpu_destroy's acquire load; this scheduler's frees come first. */
	atomic_fetch_sub_explicit(&gpu->dscheds, 1, memory_order_release);
	return 0;
}

unsigned tdm__dscheds_say(struct tdm__gpu *gpu, unsigned waited_s)
{
	unsigned n = 0;
	pthread_mutex_lock(&gpu->lease_lock);
	for (const struct tdm__dsched *ds = gpu->dsched_list; ds != NULL; ds = ds->next) {
		char who[80];
		tdm__task_who(ds->task, who, sizeof(who));
		tdm__say(
		    "tdm_gpu_destroy waits for a device scheduler not destroyed (%u s so far): "
		    "device %d, made by %s",
		    waited_s, ds->dev->index, who);
		n++;
	}
	pthread_mutex_unlock(&gpu->lease_lock);
	return n;
}

int tdm_dsched_stats_get(const tdm_dsched *h, tdm_dsched_stats *out)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__dsched *ds = ds_enter(h, &in, &rc);
	if (ds == NULL)
		return rc;
	if (out != NULL)
		stats_of(ds, out);
	tdm__gate_leave(in);
	return out != NULL ? 0 : -EINVAL;
}
