// SPDX-License-Identifier: MIT
/*
 * The sim backend's own header: its devices, streams, operations and events, shared by sim.c
 * (devices, memory, events, the calls that enqueue work, the ops table), sim_stream.c (each
 * stream's thread and queue) and sim_graph.c (captures, graphs and their replays). The lock rules
 * are at the top of sim.c.
 */
#ifndef TDM_GPU_SIM_INTERNAL_H
#define TDM_GPU_SIM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend.h"
#include "sim_memory.h"

/* A node of a circular list with a sentinel, first member of what it links. */
struct sim_link {
	struct sim_link *prev, *next;
};

struct sim_dev {
	/* Sticky. Seq_cst (dev_dead): it pairs with `writers`. */
	atomic_bool failed;
	/* Operations that write host or device memory (copies, scales, host functions: the
	 * staging copy out of tdm_memcpy_async is one) running on the device's streams. Once the
	 * device is dead, its streams and events report failure only when none runs: no task
	 * resumes with -EIO, whichever way it awaited, while its buffers are still being written.
	 */
	atomic_uint writers;
	/* Held for the length of a busy kernel: the device's SMs, all of them. */
	pthread_mutex_t busy;
};

struct tdm__backend {
	int ndev;
	int sm_count; /* what each device reports (tdm_gpu_config.sim_sm_count) */
	struct sim_dev *devs;
	pthread_mutex_t lock;
	struct sim_link streams, events; /* lock */
	unsigned next_id;                /* lock: numbers stream threads */
	struct sim_mem mem;              /* device blocks and pinned ranges: sim_memory.h */
	/* Guards every capture, and the capture fields of every stream and event (sim_graph.c). */
	pthread_mutex_t graph_lock;
	struct sim_link captures; /* graph_lock: captures begun and not ended */
	uint64_t next_capture;    /* graph_lock: the id of the next capture, from 1 */
};

enum sim_op_kind {
	/* work: may take an armed fault */
	SIM_SPIN,
	SIM_BUSY,
	SIM_SCALE,
	SIM_TRAP,
	SIM_COPY,
	SIM_MEMSET, /* u.memset: device memory set byte by byte, checked as a copy's device side */
	/* completion points */
	SIM_WRITE,
	SIM_MARK,
	/* host-side actions in stream order: like completion points they take no fault */
	SIM_FREE,
	SIM_HOST_FN,
	SIM_PREFETCH,
	SIM_WAIT, /* an edge: until an event's record (u.mark) has run on its stream */
	/* a replay of an executable graph (u.replay, sim_graph.c): it runs the graph's nodes in
	 * order, each as the operation it was captured as; it takes an armed fault for its first
	 * work node */
	SIM_GRAPH,
};

struct sim_event;
struct sim_replay;
struct sim_capture;

struct sim_op {
	struct sim_op *next;
	enum sim_op_kind kind;
	int fault;          /* the tdm_sim_fault it took at enqueue, or 0 */
	uint64_t queued_ns; /* when it was enqueued (tdm__now_ns): an idle device takes it then */
	union {
		uint32_t ns;
		struct {
			float *y;
			const float *x;
			float a;
			size_t n;
		} scale;
		struct {
			void *dst;
			const void *src;
			size_t bytes;
			bool dst_dev, src_dev; /* which sides are device memory, to be checked */
		} copy;
		struct {
			void *dst;
			int value;
			size_t bytes;
		} memset;
		struct {
			uint64_t *word;
			uint64_t value;
		} write;
		struct {
			struct sim_event *ev;
			uint64_t gen;
		} mark;
		void *block; /* SIM_FREE */
		struct {
			void (*fn)(void *);
			void *arg;
		} host_fn;
		struct sim_replay *replay; /* SIM_GRAPH: a reference, dropped once it ran */
	} u;
};

struct sim_stream {
	struct sim_link link; /* b->lock */
	struct tdm__backend *b;
	struct sim_dev *dev;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;          /* the thread waits here for work or stop */
	struct sim_op *head, *tail;   /* lock */
	bool stop;                    /* lock */
	int armed;                    /* lock: fault for the next work operation */
	_Atomic uint64_t outstanding; /* operations enqueued and not finished */
	/* Device-scheduler handlers running on it (sim_dsched.c). A dead device's other streams
	 * do not wait for them, as a dead context's kernels do not run on: only this stream's
	 * query says busy (-EAGAIN) until they returned. Seq_cst, as the device's `writers`. */
	atomic_uint handlers;
	bool pending_err; /* stream thread only: a failed op awaits its completion point */
	uint64_t free_ns; /* stream thread only: when its last operation finished */

	pthread_mutex_t err_lock;
	uint64_t *erred; /* err_lock: word values whose write followed failed work */
	unsigned cap_erred;
	atomic_uint nerred; /* written under err_lock; read outside it as a fast path */

	/* The capture the stream takes part in (begun on it, or joined), and its index among the
	 * capture's streams: b->graph_lock. */
	struct sim_capture *capture;
	unsigned capture_index;
	/* Whether `capture` is set: written under b->graph_lock, read outside it by every enqueue
	 * as a fast path (sim_graph.c, tdm__sim_capturing). */
	atomic_bool capturing;
};

struct sim_event {
	struct sim_link link; /* b->lock, until event_destroy */
	struct sim_dev *dev;
	_Atomic uint64_t recorded; /* generation of the latest record; 0: never recorded */
	_Atomic uint64_t done;     /* (generation << 1) | failed, of the newest record that ran */
	atomic_uint refs;          /* the owner's, and one per record still queued */
	/* When the newest record that ran ran, as a device would have run it: when it was
	 * enqueued, or when the stream's operation before it finished, whichever is later (the
	 * stream's thread may have been asleep when it came). Written before the release CAS of
	 * `done` and read after an acquire load that saw that generation (sim_timer_time); a
	 * timer's records run in one stream's order, so the store is one writer's. */
	_Atomic uint64_t stamp_ns;
	/* Its latest record, when that was made in a capture: the capture's id (0: none) and the
	 * capture's node of the record. b->graph_lock. */
	uint64_t capture_id;
	size_t capture_node;
	/* Whether capture_id is set: written under b->graph_lock, read outside it as a fast path.
	 */
	atomic_bool captured;
};

/* ---- helpers ---- */

static inline void list_init(struct sim_link *head)
{
	head->prev = head->next = head;
}

static inline void list_add(struct sim_link *head, struct sim_link *l)
{
	l->next = head->next;
	l->prev = head;
	head->next->prev = l;
	head->next = l;
}

static inline void list_del(struct sim_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
}

static inline bool dev_ok(const struct tdm__backend *b, int dev)
{
	return dev >= 0 && dev < b->ndev;
}

/* Seq_cst, both: with the device's `writers` count they form a Dekker pair (execute, and
 * dead_status): an operation that saw the device alive is seen writing by a query that saw it
 * dead. */
static inline bool dev_dead(const struct sim_dev *d)
{
	return atomic_load_explicit(&d->failed, memory_order_seq_cst);
}

/* What a query on a dead device answers: -EIO, or -EAGAIN while an operation that began before
 * the death still writes memory. Seq_cst: pairs with the increment in execute (dev_dead's
 * note); a zero seen here also follows that operation's release decrement, and so its writes. */
static inline int dead_status(struct sim_dev *d)
{
	return atomic_load_explicit(&d->writers, memory_order_seq_cst) != 0 ? -EAGAIN : -EIO;
}

static inline void dev_fail(struct sim_dev *d)
{
	/* Seq_cst: dev_dead's note; the store falls in the total order between an execute that
	 * saw the device alive and a query that saw it dead. */
	atomic_store_explicit(&d->failed, true, memory_order_seq_cst);
}

static inline void event_unref(struct sim_event *e)
{
	/* Acq_rel: each holder's release orders its last use of e before the drop; the acquire
	 * of the final drop pairs with those, so the free comes after every use. */
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
		free(e);
}

/* ---- sim_stream.c ---- */

/* Queues a copy of `op` on s: -EIO at once on a dead device, -ENOMEM. */
int tdm__sim_submit(struct sim_stream *s, struct sim_op op);
int tdm__sim_stream_create(struct tdm__backend *b, int dev, int priority, void **out);
void tdm__sim_stream_destroy(struct tdm__backend *b, void *stream);
int tdm__sim_stream_query(struct tdm__backend *b, void *stream);
void *tdm__sim_stream_native(struct tdm__backend *b, void *stream);
int tdm__sim_word_status(struct tdm__backend *b, void *stream, uint64_t value);
/* Runs one operation on s's thread, as the stream's queue would (a replay's nodes too). */
void tdm__sim_execute(struct sim_stream *s, struct sim_op *o);

/* ---- sim_dsched.c: the device scheduler's kernel, on host threads ---- */

int tdm__sim_dsched_start(struct tdm__backend *b, void *stream, const struct tdm__dsched_run *r,
                          void **engine);
void tdm__sim_dsched_join(struct tdm__backend *b, void *stream, void *engine);
void tdm__sim_dsched_kick(struct tdm__backend *b, void *engine);

/* ---- sim_graph.c: the hooks the rest of the backend calls ---- */

/*
 * Whether s may be in a capture: the fast path of every hook below, which answers for sure only
 * under b->graph_lock. Relaxed: the flag is written under graph_lock by capture_begin, a join
 * (stream_wait_event) or a capture's end; a thread that made that call, or was handed the stream
 * after it (through the caller's own synchronisation), reads the new value by coherence; another
 * thread enqueuing at the same moment races with the caller's own call, and either answer is one
 * of the two orders the race allows.
 */
static inline bool tdm__sim_capturing(struct sim_stream *s)
{
	return atomic_load_explicit(&s->capturing, memory_order_relaxed);
}

/* Records `op` (a work operation or a completion word; not SIM_MARK or SIM_WAIT) into the
 * capture of s instead of queueing it: 0; 1 when s is not capturing after all (queue it);
 * -EBUSY, invalidating the capture, for an operation a capture refuses (free, prefetch, a graph
 * launch) or on a capture invalidated already; -ENOMEM, invalidating it too. */
int tdm__sim_capture_op(struct sim_stream *s, const struct sim_op *op);
/* An event record on s: into s's capture as a capture point (0), or 1: s is not capturing, and
 * a capture point e held is forgotten (a real record follows). -ENOMEM. */
int tdm__sim_capture_record(struct tdm__backend *b, struct sim_event *e, struct sim_stream *s);
/* stream_wait_event when s is capturing or e holds a capture point: 0 (s joined e's capture,
 * or waits inside its own), 1: nothing of a capture (queue the wait as usual), -EBUSY (an edge
 * across a capture's boundary, or between two captures: both are invalidated), -ENOMEM. */
int tdm__sim_capture_wait(struct tdm__backend *b, struct sim_stream *s, struct sim_event *e);
/* event_query of an event that holds a capture point: -EBUSY, invalidating the capture while
 * it lasts; 1 once the capture ended (the point is forgotten: the event's records answer). */
int tdm__sim_capture_event_query(struct tdm__backend *b, struct sim_event *e);
/* A call a capture refuses on s (stream_query, malloc_async, free_async, prefetch): -EBUSY,
 * invalidating s's capture, or 0 when s is not capturing. */
int tdm__sim_capture_refuse(struct sim_stream *s);
/* stream_destroy: s leaves its capture, which is invalidated. */
void tdm__sim_capture_leave(struct sim_stream *s);
/* close: frees the captures never ended (their streams are gone). */
void tdm__sim_capture_fini(struct tdm__backend *b);
/* On s's thread: runs a SIM_GRAPH operation, on a dead device too (it then runs nothing), and
 * drops its reference. */
void tdm__sim_replay_run(struct sim_stream *s, struct sim_op *o);
/* Whether a SIM_GRAPH operation has a work node, which an armed fault goes to. */
bool tdm__sim_replay_works(const struct sim_op *o);

int tdm__sim_capture_begin(struct tdm__backend *b, void *stream);
int tdm__sim_capture_end(struct tdm__backend *b, void *stream, void **graph);
int tdm__sim_graph_instantiate(struct tdm__backend *b, void *graph, void **exec);
int tdm__sim_graph_update(struct tdm__backend *b, void *exec, void *graph);
int tdm__sim_graph_launch(struct tdm__backend *b, void *exec, void *stream);
void tdm__sim_graph_free(struct tdm__backend *b, void *graph);
void tdm__sim_graph_exec_free(struct tdm__backend *b, void *exec);

#endif /* TDM_GPU_SIM_INTERNAL_H */
