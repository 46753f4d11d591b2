// SPDX-License-Identifier: MIT
/*
 * The GPU layer's internal header: devices, pooled streams and events, and the poller's state.
 * Lock rules: dev->lock guards lazy creation of a device's streams; dev->ev_lock its event pool
 * (never held across a driver call: the poller takes it); a stream's wlock numbers its awaits and
 * enqueues their writes or records; the poller's own lists are touched only by the poller thread.
 * Nothing here is held across a call into the executor.
 */
#ifndef TDM_GPU_GPU_INTERNAL_H
#define TDM_GPU_GPU_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <errno.h>
#include <time.h>

#include <ck_ec.h>

#include "backend/backend.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/ec.h"
#include "base/gate.h"
#include "base/handle.h"
#include "base/stack.h"
#include "executor/await.h"
#include "tandem_gpu.h"

#define TDM__PRIO_CLASSES 2 /* normal, high */

struct tdm__gdev;
struct tdm__gpu;
struct tdm__event;

/* A stream of a device's set, shared by the leases that hold it. */
struct tdm__stream {
	struct tdm__gdev *dev;
	void *bs;       /* the backend's stream */
	uint64_t *word; /* completion word, in pinned memory, a cache line of its own */
	/* Last sequence number handed to an await on this stream; under wlock. */
	_Alignas(TDM__CACHELINE) uint64_t seq;
	_Atomic int leases;    /* shared leases held; TDM__EXCLUSIVE when exclusive */
	pthread_mutex_t wlock; /* numbers awaits and enqueues their writes in one step */
	/* Adaptive completion: its awaits complete soon after reaching the head, so a word's write
	 * does not linger. Written by the poller, read by awaits (relaxed: a hint). */
	_Atomic bool quick;

	/* Poller only. */
	_Alignas(TDM__CACHELINE) struct tdm__task *head, *tail; /* awaits, by sequence */
	struct tdm__stream *busy_next;
	bool busy;
	uint64_t done;         /* highest number known complete: word read, or event done */
	uint64_t moved_ns;     /* when its oldest await last changed (completed, or FIFO filled) */
	uint64_t next_look_ns; /* stalled: when the poller looks at it again */
	/* How long its awaits waited at the head, a moving average; 0: none yet. */
	uint64_t typical_ns;

	/* Device-side stamps (stamps.c): under `lock`, the queue of stamps enqueued and not yet
	 * resolved, the free ones, every one made (for destroy) and how many; last_end and
	 * track, the resolver's; index and high, set at creation. */
	_Alignas(TDM__CACHELINE) struct {
		pthread_mutex_t lock;
		struct stamp *head, *tail, *free, *all;
		unsigned made;
		/* Launches through the gate (written under `lock`, read by the stamps thread
		 * without it: relaxed, a count), and those timed. */
		_Atomic uint64_t launches;
		uint64_t timed;
		uint64_t last_end;
		struct tdm__track *track;
		unsigned index; /* class * nstreams + slot */
		bool high;
	} sq;
};

#define TDM__EXCLUSIVE (1 << 30)

/* A capture in progress (graph.c), kept in the lease handle it began on (root), which lives
 * as long as the layer: a misuse from another thread (an await of an event recorded in it)
 * reads memory that stays, never a freed capture. Begun by `thread`; streams that joined it
 * through an event edge (thread only); abandoned by a call that a capture refuses (atomic,
 * relaxed: that call may come from another thread; only its end reads it, on its thread, after
 * the calls that the task made itself). */
struct tdm__capture {
	struct tdm_stream *root;
	pthread_t thread;
	_Atomic bool abandoned;
	struct tdm_stream **joined;
	unsigned njoined, capjoined;
	struct tdm__capture *next; /* the layer's open captures, under graph_lock */
};

/*
 * A lease: what tdm_stream_lease hands out, one per lease, so that a release names its holder
 * and not only the stream (streams.c). dev and bs are st's, copied at the lease, so that work
 * calls reach the backend without going through st. Handles are recycled: a released one is
 * refused while it is free, not once another lease took it again.
 */
struct tdm_stream {
	_Alignas(TDM__CACHELINE) struct tdm__gdev *dev; /* a line each: held by one holder */
	void *bs;
	struct tdm__stream *st;
	/* Set by the lease (release: publishes dev, bs, st and exclusive with it), cleared by the
	 * release (an acq_rel exchange: of two releases of one lease, racing or not, one finds it
	 * held, and that one reads the fields the lease published). Read with acquire by work and
	 * awaits, as a check of misuse that then reads the same fields. */
	_Atomic bool held;
	bool exclusive;
	struct tdm_stream *next_free; /* on a free list (streams.c) */
	/* The task that took the lease (tdm__task_fn_now), 0: a thread outside any task; published
	 * with held, for tdm_gpu_destroy's message about the leases it waits for. */
	uintptr_t task;
	/* Graph capture (graph.c): the capture this stream records into (its own, `capture`, or
	 * one it joined), NULL outside one; cap_gen counts the captures begun on it, so that an
	 * event recorded in an earlier one is known stale. Written by the capturing thread; atomic
	 * (seq_cst, plain loads on x86) because another thread's misuse may read them, through an
	 * event recorded in the capture. */
	struct tdm__capture *_Atomic cap;
	_Atomic uint64_t cap_gen;
	struct tdm__capture capture;
	/* The stamps of the launch in progress through the gate (stamps.c), its holder's. */
	struct stamp *stamp;
};

/* graph.c: a call that a capture refuses was made on s (s->cap set): the capture is abandoned;
 * -EBUSY. */
int tdm__capture_refuse(struct tdm_stream *s);
/* graph.c: the capture an event recorded on s belongs to (tdm_event_record), and whether e's
 * record is part of a capture still open (tdm_stream_wait_event, tdm_await_event). */
void tdm__capture_note_record(struct tdm__event *e, struct tdm_stream *s);
struct tdm__capture *tdm__capture_of_event(const struct tdm__event *e);
/* graph.c: s waits on e, recorded in capture c: s joins c. -EINVAL (s shared, or in another
 * capture), -ENOMEM. */
int tdm__capture_join(struct tdm_stream *s, struct tdm__capture *c);
/* graph.c: at tdm_stream_release of a capturing root: ends and discards its capture. -EBUSY:
 * s only joined a capture, or this thread cannot end it. */
int tdm__capture_release(struct tdm_stream *s);
/* dag.c: the DAGs left at tdm_gpu_destroy, destroyed (their handles refused from then). */
struct tdm__dag;
void tdm__dags_fini(struct tdm__gpu *gpu);
/* graph.c: the graphs, their cache and the captures left open, with the layer's life. */
int tdm__graphs_init(struct tdm__gpu *gpu);
void tdm__graphs_fini(struct tdm__gpu *gpu);

/* Whether s is a lease still held (tdm_stream's note). */
static inline bool tdm__lease_held(const struct tdm_stream *s)
{
	/* Acquire: pairs with the release store in tdm_stream_lease. */
	return atomic_load_explicit(&s->held, memory_order_acquire);
}

/* Free lease handles, oldest first (streams.c). */
struct tdm__lease_list {
	struct tdm_stream *head, *tail;
	unsigned n;
};

/* A worker's own free list, touched by that worker only; on a line of its own. */
struct tdm__lease_cache {
	_Alignas(TDM__CACHELINE) struct tdm__lease_list l;
};

/* When a shared lease may leave its worker's own stream for a less loaded one (two choices). */
enum {
	TDM__BALANCE_NEVER,  /* always the own stream */
	TDM__BALANCE_ALWAYS, /* whatever the own stream's pace */
	TDM__BALANCE_SLOW,   /* default: unless the own stream is quick (adaptive completion) */
};

/*
 * An event: a device's pooled one (stream awaits take them, and users through tdm_event_get), in
 * the events' handle table (events.c, base/handle.h): type-stable, so that a stale handle, put
 * back or of a destroyed layer, is refused by its word and never reads freed memory. Its word
 * holds a handle while a user holds the event (tdm_event_get to tdm_event_put), and says dead
 * while it is in its pool or lent to a stream await. A DAG's own events (dag.c) are allocated
 * apart, never handed out, their word 0.
 */
struct tdm__event {
	struct tdm__hobj hobj;
	struct tdm__gdev *dev;
	void *be; /* the backend's event */
	struct tdm__event *next_free;
	uint64_t seq; /* while a stream await holds it: the await's place on the stream */
	/* The stream of its latest tdm_event_record, by its owner: an edge from it to the same
	 * stream is in stream order already (tdm_stream_wait_event). NULL: none since taken. */
	struct tdm__stream *last;
	/* Recorded in a capture (graph.c): its root and that root's cap_gen then; NULL: not. */
	struct tdm_stream *cap_root;
	uint64_t cap_gen;
	/* Its layer and that layer's handle, for the calls that must enter the layer's gate
	 * before they touch the pool (tdm_event_put, tdm_await_event). */
	struct tdm__gpu *gpu;
	tdm_gpu *layer;
};

/* Status check of a device that made no progress (poller.c), and of a device a lease finds
 * where the backend cannot say it is dead without a query (streams.c, found_dead). */
#define TDM__CHECK_NS 1000000ull
struct tdm__gdev {
	struct tdm__gpu *gpu;
	int index;
	struct tdm__device_info info;
	bool words;        /* completion words possible and allowed */
	bool adaptive;     /* words only on quick streams (TDM_COMPLETION_ADAPTIVE) */
	unsigned nstreams; /* per priority class */
	int prio[TDM__PRIO_CLASSES];
	_Atomic(struct tdm__stream *) *streams[TDM__PRIO_CLASSES]; /* created lazily */
	uint64_t *word_block; /* pinned: one cache line per stream */
	_Atomic unsigned rr;  /* spreads threads that are not workers */
	_Atomic int failed;   /* a sticky error was seen */
	/* When a lease next asks the backend whether the device died (streams.c, found_dead;
	 * written at most once per TDM__CHECK_NS, and only where the backend has no flag). */
	_Atomic uint64_t check_ns;
	unsigned launch_limit; /* threads launching here at once (topology's plan) */
	cpu_set_t cpus;        /* the CPUs nearest the device (topology's plan), if has_cpus */
	bool has_cpus;
	_Alignas(TDM__CACHELINE) _Atomic int launching;
	pthread_mutex_t lock;
	/* Pooled events, under ev_lock, which is held only for list work, never across a driver
	 * call (the poller takes it to give events back). */
	pthread_mutex_t ev_lock;
	struct tdm__event *free_events;
	struct tdm__event **all_events; /* every event ever made, for destroy */
	unsigned nall_events, cap_events;
	/* Staged copies whose host function has not run yet (memory.c), under stage_lock, held
	 * only for list work: a dead context skips host functions, so the device's failure gives
	 * their pinned blocks back (tdm__staging_orphan). */
	pthread_mutex_t stage_lock;
	struct tdm__stage *staged;

	/* Poller only, on a line of its own: written on every sweep that makes progress, it must
	 * not share a line with what every lease, launch and await reads (failed, streams). */
	_Alignas(TDM__CACHELINE) uint64_t last_alive; /* ns of the last progress or healthy query */
};

struct tdm__pinned; /* pinned.c */

/*
 * A GPU layer, in its handle table (base/handle.h, layer.c): type-stable, so that a call with a
 * stale handle, or one racing the destroy, touches memory that stays. The first part is kept
 * across the object's reuse, because such calls may still touch it (balanced: each adds and
 * takes away); create zeroes the rest, from `ex`.
 */
struct tdm__gpu {
	struct tdm__hobj hobj; /* its word: the handle it answers to (tdm__gpu_enter) */
	/* Registered awaits not yet completed; with `stopping` decides when the poller exits.
	 * tdm__await_register's Dekker pair is with the handle's word. */
	_Alignas(TDM__CACHELINE) _Atomic int64_t active;
	/* tdm_stream_lease and the other calls on the layer in flight, closed by the destroy's
	 * store of the handle's word (base/gate.h, tdm__gate_enter_h). */
	struct tdm__gate leases;

	/* Zeroed by create from here. */
	_Alignas(TDM__CACHELINE) tdm_executor *ex;
	tdm_gpu *self; /* its handle, for the calls it makes on itself through the API */
	/* Diagnostic switches (tdm_gpu_debug, testing/tandem_sim.h), set before the layer is used:
	 * workers may watch their own word awaits; shared leases' two choices, TDM__BALANCE_SLOW by
	 * default. */
	bool direct;
	int balance;
	struct tdm__pinned *pinned; /* the pinned host pool */
	struct tdm__topology *topo; /* facts and decisions per device (topology.h); immutable */
	tdm_gpu_config cfg;
	const struct tdm__backend_ops *ops;
	struct tdm__backend *b;
	int ndev;
	struct tdm__gdev *devs;
	struct tdm__lease_cache *lease_cache; /* one per worker of ex (streams.c) */
	unsigned nlease_cache;
	bool nvml; /* TANDEM_NVML: load NVML for discovery (topology/discover.c) */
	/* CUDA_DEVICE_MAX_CONNECTIONS as a tdm_gpu_create of this process set it by
	 * TDM_CONNECTIONS_AUTO (0: none, or a value the config named), and whether this one wanted
	 * to set it and found CUDA started: for the topology's decisions. */
	unsigned connections_by_tandem;
	bool connections_late;

	/* Awaits handed to the poller, newest first. */
	_Alignas(TDM__CACHELINE) struct tdm__stack submit;
	struct ck_ec32 ec; /* bumped after a submit; the idle poller sleeps on it */
	/* Set by the destroy once it closed the handle: the poller ends when no await is left. */
	_Alignas(TDM__CACHELINE) _Atomic int stopping;
	/* Placement's rotation: written on every TDM_DEVICE_ANY lease, so kept off the line of
	 * ops, b and devs at the top, which every launch reads. */
	_Atomic unsigned place_rr;
	/* Device schedulers alive (dsched.c), each made inside the `leases` gate: the destroy
	 * waits for them as for leases. */
	_Atomic int dscheds;
	/* Free lease handles for threads that are not workers, and what a worker's list
	 * overflows or lacks; every handle's chunk, freed at destroy (streams.c). */
	pthread_mutex_t lease_lock;
	struct tdm__lease_list lease_free;     /* lease_lock */
	struct tdm__lease_chunk *lease_chunks; /* lease_lock */
	/* The device schedulers alive, for tdm_gpu_destroy's message (dsched.c). */
	struct tdm__dsched *dsched_list; /* lease_lock */
	/* The DAGs alive (dag.c), destroyed by tdm_gpu_destroy where left. */
	struct tdm__dag *dags; /* lease_lock */

	/* Graphs (graph.c): every handle, those free (oldest first), the open captures, and
	 * tdm_graph_run's cache. */
	struct tdm__graphs *graphs;
	/* Device-side stamps (stamps.c), for the trace and the metrics. */
	struct tdm__stamps *stamps;

	/* Poller only. */
	_Alignas(TDM__CACHELINE) pthread_t poller;
	struct tdm__stream *busy; /* streams with awaits */
	/* Spinning sweeps; every TDM__STALL_EVERY-th looks at stalled word streams. */
	unsigned sweeps;
	uint64_t due_ns;      /* the earliest completion expected (typical_ns); UINT64_MAX: none */
	uint64_t due_late_ns; /* how long past due_ns that completion is still spun for */
	unsigned due_home;    /* the worker whose task that completion wakes */
	bool due_long;        /* that completion's typical wait outlasts a worker's spin */
	uint64_t sleep_over_ns;    /* how late a back-off step wakes, a moving average */
	unsigned stalled_events;   /* stalled streams waiting on an event, at the last sweep */
	struct tdm__task *ev_head; /* awaits on user events, unordered */
	struct tdm__task *ds_head; /* awaits on device schedulers' items (dsched.c), unordered */
	uint64_t ds_alive_ns;      /* when one of those last completed (or was checked on) */
	struct tdm__task **heap;   /* deadline awaits, a binary min-heap on their slots' seq */
	unsigned nheap, capheap;
	_Atomic uint64_t n_word, n_event; /* stream awaits taken in, by mechanism (tdm_gpu_stats) */
	_Atomic uint64_t n_switch, n_event_poll, n_sweep, n_sleep, n_due,
	    n_prewake;           /* tdm_gpu_stats, too */
	struct tdm__task **wake; /* the batch a sweep completes */
	int *wake_rc;
	unsigned nwake, capwake;

	/* Word awaits a worker saw complete itself (tdm__task_hold), counted by the workers: a
	 * line of its own, last, so that their adds never touch what the poller writes. */
	_Alignas(TDM__CACHELINE) _Atomic uint64_t n_direct;
	struct tdm__metrics *metrics; /* metrics.c: made by create, freed by destroy; read-only */
};

/* The GPU layers' handle table (layer.c, base/handle.h): 16 layers a chunk, 65536 at once. */
#define TDM__GPU_TAG 0x11u
#define TDM__GPU_SHIFT 4
#define TDM__GPU_CHUNKS 4096
extern char *_Atomic tdm__gpu_chunks[TDM__GPU_CHUNKS];

/* The object handle h may name (its word not checked yet), or NULL: not a layer's handle. */
static inline struct tdm__gpu *tdm__gpu_find(const tdm_gpu *h)
{
	return (struct tdm__gpu *)tdm__h_find(tdm__gpu_chunks, TDM__GPU_TAG, TDM__GPU_SHIFT,
	                                      TDM__GPU_CHUNKS, sizeof(struct tdm__gpu), h);
}

/* -EINVAL where h is no layer's handle, -ESHUTDOWN where its layer's destroy began (or ended):
 * the refusal of a check that read `now` in the layer's word. */
static inline int tdm__gpu_refusal(const struct tdm__gpu *gpu, const tdm_gpu *h, uint64_t now)
{
	return tdm__h_why(gpu, h, now) == TDM__H_NOT_HANDLE ? -EINVAL : -ESHUTDOWN;
}

/*
 * Enters the layer handle h names, through its gate: the layer, live until tdm__gate_leave(*in)
 * (its destroy drains the gate before it frees anything), or NULL with *rc the refusal. The
 * check is the gate's own load (base/gate.h): a lease pays nothing more than before handles.
 */
static inline struct tdm__gpu *tdm__gpu_enter(const tdm_gpu *h, _Atomic unsigned **in, int *rc)
{
	struct tdm__gpu *gpu = tdm__gpu_find(h);
	if (gpu == NULL) {
		*rc = -EINVAL;
		return NULL;
	}
	uint64_t now;
	*in = tdm__gate_enter_h(&gpu->leases, &gpu->hobj.h, (uint64_t)(uintptr_t)h, &now);
	if (*in == NULL) {
		*rc = tdm__gpu_refusal(gpu, h, now);
		return NULL;
	}
	return gpu;
}

/* The body of a public call on a layer: enters the gate of handle h (tdm__gpu_enter), returns
 * `call`'s result with `gpu` the layer, and leaves; the refusal when h is not let in. */
#define TDM__GPU_CALL(h, call)                                                                     \
	do {                                                                                       \
		_Atomic unsigned *in_;                                                             \
		int rc_;                                                                           \
		struct tdm__gpu *gpu = tdm__gpu_enter((h), &in_, &rc_);                            \
		if (gpu == NULL)                                                                   \
			return rc_;                                                                \
		rc_ = (call);                                                                      \
		tdm__gate_leave(in_);                                                              \
		return rc_;                                                                        \
	} while (0)

/* A suspended task's await slot (executor/await.h): obj says what it awaits here, seq a number. */
#define TDM__AW(t) tdm__await_of(t)

/* What a task awaits, in the low bits of its slot's obj (objects are 64-byte aligned). */
enum {
	TDM__AW_STREAM_WORD = 0,
	TDM__AW_STREAM_EVENT =
	    1,             /* the slot's seq holds the pooled tdm_event *, which holds the seq */
	TDM__AW_EVENT = 2, /* a user's event */
	TDM__AW_DEADLINE = 3,
	TDM__AW_DSCHED = 4, /* an item of a device scheduler (dsched.c): seq holds its ticket */
};
#define TDM__AW_KIND(t) ((unsigned)((uintptr_t)TDM__AW(t)->obj & 7u))
#define TDM__AW_PTR(t) ((void *)((uintptr_t)TDM__AW(t)->obj & ~(uintptr_t)7u))

/* poller.c */
void *tdm__poller_main(void *arg);
/* Hands a suspended task's await to the poller. */
void tdm__poller_submit(struct tdm__gpu *gpu, struct tdm__task *t);
/* await.c: counts an await in gpu->active while the layer's word is `want` (the layer's handle:
 * its destroy has not begun); else -ESHUTDOWN, or -EINVAL where want is no handle of gpu's. */
int tdm__await_register(struct tdm__gpu *gpu, const tdm_gpu *want);
/* await.c: tdm__poller_submit for an await whose task may be resumed, and the layer freed,
 * before the call returns (one held by nothing tdm_gpu_destroy waits for but `active`). */
void tdm__await_submit(struct tdm__gpu *gpu, struct tdm__task *t);
/* work.c: an operation's -EIO (rc) may come from a dead device; if the stream says -EIO too, the
 * device is marked failed (leases and awaits on it fail at once from here on). True then. */
bool tdm__fail_if_dead(struct tdm__stream *s, int rc);

/* The result of an enqueue on lease s, after tdm__fail_if_dead had its look at it. In a graph
 * capture an enqueue's failure abandons the capture instead: the driver invalidates a capture
 * for a call it cannot hold (yours on tdm_stream_native too), later enqueues then fail, and a
 * query of the capturing stream would read as a dead device. A device that did die shows at the
 * capture's end. */
static inline int tdm__enqueued(struct tdm_stream *s, int rc)
{
	if (rc != 0 && s->cap != NULL) {
		(void)tdm__capture_refuse(s);
		return rc;
	}
	tdm__fail_if_dead(s->st, rc);
	return rc;
}

/* Returns from the calling function what `call`, an enqueue on lease s made through the launch
 * gate, returned: -EINVAL for a NULL or released s, -EIO at once on a failed device. */
#define TDM__LAUNCH(s, kind, bytes, call)                                                          \
	do {                                                                                       \
		if ((s) == NULL || !tdm__lease_held(s))                                            \
			return -EINVAL;                                                            \
		if (atomic_load_explicit(&(s)->dev->failed, memory_order_relaxed))                 \
			return -EIO;                                                               \
		tdm__launch_begin((s), (kind), (bytes));                                           \
		int rc_ = (call);                                                                  \
		tdm__launch_end(s);                                                                \
		return tdm__enqueued((s), rc_);                                                    \
	} while (0)

/* streams.c: tdm_launch_begin/end for tandem's own enqueues, which say what they enqueue (a
 * gpu/stamps.h tdm__span_kind, and bytes for copies and memsets) for the stamps. */
void tdm__launch_begin(struct tdm_stream *s, int kind, uint64_t bytes);
void tdm__launch_end(struct tdm_stream *s);
/*
 * poller.c: how long after `now` the poller looks again at a stream whose oldest await, on an
 * event, has waited since moved_ns (past stall_us). typical_ns: how long the stream's awaits
 * typically wait (0: unknown); lead and late: the due window around moved_ns + typical_ns, in
 * which the answer is 0 (look on every sweep); stalled: how many streams are looked at this way
 * (the answer is at most that many back-off steps). Pure, for the tests.
 */
uint64_t tdm__look_step(uint64_t now, uint64_t moved_ns, uint64_t typical_ns, uint64_t lead,
                        uint64_t late, unsigned stalled);

/* pinned.c: tdm_pinned_alloc and _free for the layer's own use (staging, schedulers, pipelines),
 * on a layer its caller knows alive. */
int tdm__pinned_alloc(struct tdm__gpu *gpu, size_t bytes, void **out);
int tdm__pinned_free(struct tdm__gpu *gpu, void *p);
int tdm__pinned_stats_get(struct tdm__gpu *gpu, tdm_pinned_stats *out);
/* memory.c: tdm_device_alloc and _free likewise. */
int tdm__device_alloc(struct tdm__gpu *gpu, int device, size_t bytes, void **out);
int tdm__device_free(struct tdm__gpu *gpu, int device, void *p);
/* pinned.c: the pool's life, with the tdm_gpu's */
int tdm__pinned_init(struct tdm__gpu *gpu);
void tdm__pinned_fini(struct tdm__gpu *gpu);
/* 1 if p lies in one of the pool's chunks. */
int tdm__pinned_owns(struct tdm__gpu *gpu, const void *p);

/* memory.c */
int tdm__is_pinned(struct tdm__gpu *gpu, const void *p);
int tdm__memcpy_staged(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind);

/* topology/layer.c: the devices' facts and decisions, from the backend (cuda: live discovery; sim:
 * its device_info; none: empty), planned with gpu->cfg's overrides and the executor's worker
 * count (the stream set). Call once the backend is
 * open and gpu->ndev set, before the config's defaults are filled in (a nonzero launch_limit or
 * streams_per_device counts as the user's choice). -ENOMEM. */
struct tdm__topology;
int tdm__topology_for_backend(struct tdm__gpu *gpu);
void tdm__topology_free(struct tdm__topology *t);

/* events.c */
int tdm__event_take(struct tdm__gdev *d, struct tdm__event **out);
void tdm__event_give(struct tdm__event *e);

/* events.c: the event handle h names, held by a user now (its word is h), or NULL. One load of
 * the word, after the arithmetic of the find. */
struct tdm__event *tdm__event_of(const tdm_event *h);
/* events.c: tdm_event_record and tdm_stream_wait_event on an event the caller holds (a DAG's,
 * a pipeline's, or a checked handle's). */
int tdm__event_record(struct tdm__event *e, struct tdm_stream *s);
int tdm__stream_wait_event(struct tdm_stream *s, struct tdm__event *e);
/* await.c: tdm_await_event on an event the caller holds (a pipeline's pooled one). */
int tdm__await_event(tdm_task *t, struct tdm__event *e);
/* events.c: a layer's events back to the table, their backend events destroyed (destroy). */
void tdm__events_fini(struct tdm__gdev *d);

/* streams.c: the streams of priority class c on d that nobody holds exclusively (those not made
 * yet among them): a snapshot, for a holder that must leave one to shared leases. */
unsigned tdm__streams_open(const struct tdm__gdev *d, int c);
/* The lease handles' lists, with the layer's life: -ENOMEM; fini is safe on a zeroed gpu. */
int tdm__leases_init(struct tdm__gpu *gpu);
void tdm__leases_fini(struct tdm__gpu *gpu);
/* "task NAME" for a task function recorded by tdm__task_fn_now (its tdm_task_name, else its
 * symbol), "a thread outside any task" for 0 (streams.c). */
void tdm__task_who(uintptr_t task, char *out, size_t len);
/* tdm_gpu_destroy, past its drain of the leases' gate, has waited waited_s seconds: a line on
 * stderr for each lease still held (device, stream, the task that took it); returns how many. */
unsigned tdm__leases_say(struct tdm__gpu *gpu, unsigned waited_s);
/* The same for each device scheduler not destroyed (dsched.c). */
unsigned tdm__dscheds_say(struct tdm__gpu *gpu, unsigned waited_s);

/* layer.c */
void tdm__device_fail(struct tdm__gdev *d);
/* memory.c: the blocks of d's staged copies whose host functions have not run go back to the
 * pinned pool (d failed: they never will); at destroy (the streams are gone: no host function
 * runs any more), the bookkeeping goes too. */
void tdm__staging_orphan(struct tdm__gdev *d);
void tdm__staging_fini(struct tdm__gdev *d);

#endif /* TDM_GPU_INTERNAL_H */
