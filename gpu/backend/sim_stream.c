// SPDX-License-Identifier: MIT
/*
 * The sim backend's streams (sim_internal.h): each an in-order queue of operations, drained by a
 * thread of its own; the operations as that thread runs them; the erred values its completion
 * words report.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "sim_internal.h"

#define SIM_SPIN_LIMIT_NS 50000u /* shorter kernels busy-wait: a sleep would overshoot them */

static void run_spin(uint32_t ns)
{
	if (ns == 0)
		return;
	if (ns < SIM_SPIN_LIMIT_NS) {
		uint64_t end = tdm__now_ns() + ns;
		while (tdm__now_ns() < end) {
		}
		return;
	}
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
	                      .tv_nsec = (long)(ns % 1000000000u)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* ---- the stream thread ---- */

/* Remembers that the write of `value` covers failed work. */
/* False when there was no memory to remember it: the device is failed instead, and the
 * word must not be written (its await would read success). */
static bool add_erred(struct sim_stream *s, uint64_t value)
{
	pthread_mutex_lock(&s->err_lock);
	unsigned n = atomic_load_explicit(&s->nerred, memory_order_relaxed);
	if (n == s->cap_erred) {
		unsigned cap = s->cap_erred != 0 ? 2 * s->cap_erred : 8;
		uint64_t *p = realloc(s->erred, cap * sizeof(*p));
		if (p == NULL) {
			/* No memory to remember the error: fail the device rather than lose it. */
			pthread_mutex_unlock(&s->err_lock);
			dev_fail(s->dev);
			return false;
		}
		s->erred = p;
		s->cap_erred = cap;
	}
	s->erred[n] = value;
	atomic_store_explicit(&s->nerred, n + 1, memory_order_relaxed);
	pthread_mutex_unlock(&s->err_lock);
	return true;
}

static void mark_event(struct sim_event *e, uint64_t gen, bool failed, uint64_t stamp)
{
	uint64_t want = gen << 1 | (failed ? 1u : 0u);
	uint64_t cur = atomic_load_explicit(&e->done, memory_order_relaxed);
	/* Relaxed: published by the release CAS below (sim_timer_time's acquire load of done). */
	if ((cur >> 1) < gen)
		atomic_store_explicit(&e->stamp_ns, stamp, memory_order_relaxed);
	/* Release: pairs with the acquire load of `done` in sim_event_query; the work before the
	 * record happens before a query that reports it done. Records of one event on different
	 * streams may run out of order: only a newer generation replaces an older one. */
	while ((cur >> 1) < gen &&
	       !atomic_compare_exchange_weak_explicit(&e->done, &cur, want, memory_order_release,
	                                              memory_order_relaxed)) {
	}
}

/* The wait of an edge: until record `gen` of e has run. False when it failed, or when e's device
 * died first (a dead device's records never run: nothing else would end the wait). */
static bool wait_event(struct sim_event *e, uint64_t gen)
{
	for (unsigned spins = 0;; spins++) {
		/* Acquire: pairs with the release CAS in mark_event; the waited work's effects
		 * happen before what this stream runs next. */
		uint64_t done = atomic_load_explicit(&e->done, memory_order_acquire);
		if ((done >> 1) >= gen)
			return (done & 1) == 0;
		if (dev_dead(e->dev))
			return false;
		if (spins < 1000)
			sched_yield();
		else
			tdm__sleep_ns(20000);
	}
}

/*
 * The device ranges of a copy or a kernel are checked when it runs, under the table's read lock,
 * held until the access is over: a block freed since the enqueue (device_free does not wait for
 * the work queued on it) is not there, and then the device fails, as a GPU's does on an illegal
 * address. A block whose free_async is queued is still there for the work queued before it.
 */
static void run_copy(struct sim_stream *s, const struct sim_op *o)
{
	struct sim_mem *m = &s->b->mem;
	size_t n = o->u.copy.bytes;
	tdm__sim_mem_read_begin(m);
	bool ok = (!o->u.copy.dst_dev || tdm__sim_mem_reaches(m, o->u.copy.dst, n, true)) &&
	          (!o->u.copy.src_dev || tdm__sim_mem_reaches(m, o->u.copy.src, n, true));
	if (ok)
		memcpy(o->u.copy.dst, o->u.copy.src, n);
	tdm__sim_mem_read_end(m);
	if (!ok)
		dev_fail(s->dev);
}

/* dst's bytes set to value; checked when it runs as a copy's device side is (run_copy). */
static void run_memset(struct sim_stream *s, const struct sim_op *o)
{
	struct sim_mem *m = &s->b->mem;
	tdm__sim_mem_read_begin(m);
	bool ok = tdm__sim_mem_reaches(m, o->u.memset.dst, o->u.memset.bytes, true);
	if (ok)
		memset(o->u.memset.dst, o->u.memset.value, o->u.memset.bytes);
	tdm__sim_mem_read_end(m);
	if (!ok)
		dev_fail(s->dev);
}

/* y[i] = a * x[i]; no check at launch (a kernel's arguments are only pointers): see run_copy. */
static void run_scale(struct sim_stream *s, const struct sim_op *o)
{
	struct sim_mem *m = &s->b->mem;
	size_t n = o->u.scale.n;
	tdm__sim_mem_read_begin(m);
	bool ok = n <= SIZE_MAX / sizeof(float) &&
	          tdm__sim_mem_reaches(m, o->u.scale.y, n * sizeof(float), true) &&
	          tdm__sim_mem_reaches(m, o->u.scale.x, n * sizeof(float), true);
	if (ok)
		for (size_t i = 0; i < n; i++)
			o->u.scale.y[i] = o->u.scale.a * o->u.scale.x[i];
	tdm__sim_mem_read_end(m);
	if (!ok)
		dev_fail(s->dev);
}

static void execute_op(struct sim_stream *s, struct sim_op *o)
{
	if (o->fault == TDM_SIM_FAULT_STICKY)
		dev_fail(s->dev);
	if (dev_dead(s->dev)) {
		/* A dead context runs nothing; a queued record still lets go of its event, and a
		 * queued free still frees (a dead CUDA context's memory goes with the context).
		 * Host functions are skipped, as cudaLaunchHostFunc's are after a context error. */
		if (o->kind == SIM_MARK || o->kind == SIM_WAIT)
			event_unref(o->u.mark.ev);
		else if (o->kind == SIM_FREE)
			(void)tdm__sim_mem_free(&s->b->mem, o->u.block, SIM_MEM_DEVICE, -1, true);
		return;
	}
	if (o->fault == TDM_SIM_FAULT_OP) {
		s->pending_err = true;
		return;
	}
	switch (o->kind) {
	case SIM_SPIN:
		run_spin(o->u.ns);
		break;
	case SIM_BUSY:
		pthread_mutex_lock(&s->dev->busy);
		run_spin(o->u.ns);
		pthread_mutex_unlock(&s->dev->busy);
		break;
	case SIM_SCALE:
		run_scale(s, o);
		break;
	case SIM_TRAP:
		dev_fail(s->dev);
		break;
	case SIM_COPY:
		run_copy(s, o);
		break;
	case SIM_MEMSET:
		run_memset(s, o);
		break;
	case SIM_WRITE:
		if (s->pending_err) {
			s->pending_err = false;
			if (!add_erred(s, o->u.write.value))
				break; /* the device is dead: its awaits fail through the stall
				          check */
		}
		/* Release: pairs with the acquire load of the word by its reader (poller.c,
		 * sweep_stream, or await.c, held_poll on a worker): all earlier work of this
		 * stream, and the erred value just added, happen before a read that sees this
		 * value. */
		__atomic_store_n(o->u.write.word, o->u.write.value, __ATOMIC_RELEASE);
		break;
	case SIM_MARK:
		mark_event(o->u.mark.ev, o->u.mark.gen, s->pending_err,
		           o->queued_ns > s->free_ns ? o->queued_ns : s->free_ns);
		s->pending_err = false;
		event_unref(o->u.mark.ev);
		break;
	case SIM_FREE:
		(void)tdm__sim_mem_free(&s->b->mem, o->u.block, SIM_MEM_DEVICE, -1, true);
		break;
	case SIM_HOST_FN:
		o->u.host_fn.fn(o->u.host_fn.arg);
		break;
	case SIM_PREFETCH:
		break; /* host memory is where it would be prefetched to */
	case SIM_WAIT:
		if (!wait_event(o->u.mark.ev, o->u.mark.gen))
			s->pending_err = true;
		event_unref(o->u.mark.ev);
		break;
	case SIM_GRAPH:
		break; /* tdm__sim_execute hands it to sim_graph.c */
	}
}

void tdm__sim_execute(struct sim_stream *s, struct sim_op *o)
{
	if (o->kind == SIM_GRAPH) {
		/* Its nodes come back here one by one, each counted as a writer on its own. */
		tdm__sim_replay_run(s, o);
		return;
	}
	bool writes = o->kind == SIM_COPY || o->kind == SIM_MEMSET || o->kind == SIM_SCALE ||
	              o->kind == SIM_HOST_FN;
	/* Seq_cst, before the look at the device: pairs with dead_status (dev_dead's note). */
	if (writes)
		atomic_fetch_add_explicit(&s->dev->writers, 1, memory_order_seq_cst);
	execute_op(s, o);
	if (writes)
		/* Release: pairs with the seq_cst load in dead_status. */
		atomic_fetch_sub_explicit(&s->dev->writers, 1, memory_order_release);
}

static void *stream_main(void *arg)
{
	struct sim_stream *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (s->head == NULL && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		struct sim_op *batch = s->head;
		if (batch == NULL)
			break; /* stopped and drained */
		s->head = s->tail = NULL;
		pthread_mutex_unlock(&s->lock);
		while (batch != NULL) {
			struct sim_op *o = batch;
			batch = o->next;
			tdm__sim_execute(s, o);
			s->free_ns = tdm__now_ns();
			free(o);
			/* Release: pairs with the acquire load in tdm__sim_stream_query; a stream
			 * reported idle has its work's effects visible to the caller. */
			atomic_fetch_sub_explicit(&s->outstanding, 1, memory_order_release);
		}
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---- enqueue ---- */

/* Queues a copy of `op`; -EIO at once on a dead device, as CUDA fails launches into a dead
 * context. */
int tdm__sim_submit(struct sim_stream *s, struct sim_op op)
{
	if (dev_dead(s->dev))
		return -EIO;
	/* A capturing stream records the operation instead (records and waits have hooks of their
	 * own, in sim.c, before they come here). */
	if (op.kind != SIM_MARK && op.kind != SIM_WAIT && tdm__sim_capturing(s)) {
		int rc = tdm__sim_capture_op(s, &op);
		if (rc <= 0)
			return rc;
	}
	struct sim_op *o = malloc(sizeof(*o));
	if (o == NULL)
		return -ENOMEM;
	*o = op;
	o->queued_ns = tdm__now_ns();
	/* Work takes an armed fault; so does a replay with a work node, for the first of them. */
	bool work = o->kind < SIM_WRITE || (o->kind == SIM_GRAPH && tdm__sim_replay_works(o));
	pthread_mutex_lock(&s->lock);
	if (work && s->armed != 0) {
		o->fault = s->armed;
		s->armed = 0;
	}
	/* Under the lock, so that one stream's records of an event get generations in queue
	 * order. Relaxed: the event's queries learn of the record through the caller's own
	 * hand-off of the event (same thread, or the poller's submit queue). */
	if (o->kind == SIM_MARK)
		o->u.mark.gen =
		    atomic_fetch_add_explicit(&o->u.mark.ev->recorded, 1, memory_order_relaxed) + 1;
	bool idle = s->head == NULL; /* the thread waits only on an empty queue */
	o->next = NULL;
	if (s->tail != NULL)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	/* Relaxed: s->lock orders it before the stream thread takes the op, so the op's release
	 * decrement in stream_main never precedes it; and the enqueuing thread reads its own
	 * increment, so its next stream_query cannot report the stream idle early. */
	atomic_fetch_add_explicit(&s->outstanding, 1, memory_order_relaxed);
	if (idle)
		pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- streams ---- */

int tdm__sim_stream_create(struct tdm__backend *b, int dev, int priority, void **out)
{
	/* CUDA clamps a priority to the device's range; every sim stream has a thread of its
	 * own, so there is nothing for a priority to order. */
	(void)priority;
	if (b == NULL || out == NULL || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO;
	struct sim_stream *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->b = b;
	s->dev = &b->devs[dev];
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	pthread_mutex_init(&s->err_lock, NULL);
	if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
		pthread_mutex_destroy(&s->err_lock);
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return -EAGAIN;
	}
	pthread_mutex_lock(&b->lock);
	unsigned id = b->next_id++;
	list_add(&b->streams, &s->link);
	pthread_mutex_unlock(&b->lock);
	char name[16]; /* the kernel's limit, with the NUL */
	snprintf(name, sizeof(name), "tdm-sim%u", id % 100000000u);
	pthread_setname_np(s->thread, name);
	*out = s;
	return 0;
}

void tdm__sim_stream_destroy(struct tdm__backend *b, void *stream)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return;
	if (tdm__sim_capturing(s))
		tdm__sim_capture_leave(s);
	pthread_mutex_lock(&b->lock);
	list_del(&s->link);
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL); /* the thread exits only once its queue is empty */
	pthread_mutex_destroy(&s->err_lock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s->erred);
	free(s);
}

int tdm__sim_stream_query(struct tdm__backend *b, void *stream)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	if (dev_dead(s->dev)) {
		/* Seq_cst: with run_item's increment in sim_dsched.c, as dead_status's load with
		 * execute's: a handler that saw the device alive is seen running here. */
		if (atomic_load_explicit(&s->handlers, memory_order_seq_cst) != 0)
			return -EAGAIN;
		return dead_status(s->dev);
	}
	/* A query on a capturing stream is illegal (cudaErrorStreamCaptureUnsupported): it
	 * invalidates the capture. */
	if (tdm__sim_capturing(s)) {
		int rc = tdm__sim_capture_refuse(s);
		if (rc != 0)
			return rc;
	}
	/* Acquire: pairs with the release decrement in stream_main after each operation. */
	return atomic_load_explicit(&s->outstanding, memory_order_acquire) == 0 ? 0 : -EAGAIN;
}

void *tdm__sim_stream_native(struct tdm__backend *b, void *stream)
{
	(void)b;
	(void)stream;
	return NULL;
}

/* Reports each erred value once: whoever completes the await (the poller, or the worker that
 * watched it, await.c held_poll) asks once, under err_lock, which keeps the set small. */
int tdm__sim_word_status(struct tdm__backend *b, void *stream, uint64_t value)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	/* Relaxed: the caller saw the word at `value` or later through its acquire load, which
	 * pairs with the release store in execute(); an erred value is added before that store,
	 * so it is visible here already. */
	if (atomic_load_explicit(&s->nerred, memory_order_relaxed) == 0)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&s->err_lock);
	unsigned n = atomic_load_explicit(&s->nerred, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		if (s->erred[i] == value) {
			s->erred[i] = s->erred[n - 1];
			atomic_store_explicit(&s->nerred, n - 1, memory_order_relaxed);
			rc = -EIO;
			break;
		}
	}
	pthread_mutex_unlock(&s->err_lock);
	return rc;
}
