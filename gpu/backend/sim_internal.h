/*
 * The sim backend's own header: its devices, streams, operations and events, shared by sim.c
 * (devices, memory, events, the calls that enqueue work, the ops table) and sim_stream.c (each
 * stream's thread and queue). The lock rules are at the top of sim.c.
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
	struct sim_dev *devs;
	pthread_mutex_t lock;
	struct sim_link streams, events; /* lock */
	unsigned next_id;                /* lock: numbers stream threads */
	struct sim_mem mem;              /* device blocks and pinned ranges: sim_memory.h */
};

enum sim_op_kind {
	/* work: may take an armed fault */
	SIM_SPIN,
	SIM_BUSY,
	SIM_SCALE,
	SIM_TRAP,
	SIM_COPY,
	/* completion points */
	SIM_WRITE,
	SIM_MARK,
	/* host-side actions in stream order: like completion points they take no fault */
	SIM_FREE,
	SIM_HOST_FN,
	SIM_PREFETCH,
	SIM_WAIT, /* an edge: until an event's record (u.mark) has run on its stream */
};

struct sim_event;

struct sim_op {
	struct sim_op *next;
	enum sim_op_kind kind;
	int fault; /* the tdm_sim_fault it took at enqueue, or 0 */
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
	bool pending_err; /* stream thread only: a failed op awaits its completion point */

	pthread_mutex_t err_lock;
	uint64_t *erred; /* err_lock: word values whose write followed failed work */
	unsigned cap_erred;
	atomic_uint nerred; /* written under err_lock; read outside it as a fast path */
};

struct sim_event {
	struct sim_link link; /* b->lock, until event_destroy */
	struct sim_dev *dev;
	_Atomic uint64_t recorded; /* generation of the latest record; 0: never recorded */
	_Atomic uint64_t done;     /* (generation << 1) | failed, of the newest record that ran */
	atomic_uint refs;          /* the owner's, and one per record still queued */
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

#endif /* TDM_GPU_SIM_INTERNAL_H */
