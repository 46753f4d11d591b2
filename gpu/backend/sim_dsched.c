// SPDX-License-Identifier: MIT
/*
 * The sim backend's device scheduler: the protocol of tandem_dsched.cuh's kernel on host threads
 * ("tdm-dsched<N>"), one per runner warp of the kernel up to SIM_DS_MAX_THREADS (a host has
 * fewer cores than a GPU has warps), each claiming, fetching and running one item at a time
 * with the table's host twins (the kernel's split of a block into a fetcher and its runners
 * only keeps a GPU's pollers few: nothing the host sees depends on it). The queue is the same
 * memory in the same layout, so that the host side (gpu/dsched.c) runs the protocol it runs on
 * cuda: claims, tagged words, the stop word (block 0's), completion words.
 * Where the kernel relies on a fence, this relies on an acquire load (ThreadSanitizer models
 * those, not fences).
 *
 * The kernel runs on the scheduler's stream: while the threads live, the stream counts one
 * operation outstanding, so that its query says busy (-EAGAIN), as cudaStreamQuery does for a
 * running kernel, and -EIO once the device died. A fault armed on that stream (the testing
 * library's tdm_dsched_sim_inject) is taken by the next item a thread is about to run: the device
 * dies, as a handler that traps kills a CUDA context. A handler running counts on its stream
 * (sim_stream.handlers), so that the scheduler's own awaits on a dead device resume only once
 * it returned; the device's other streams fail at once, as a dead context's do, however long a
 * handler (one that waits for the host, say) goes on.
 *
 * Idle, the threads sleep: once no item was seen for SIM_DS_SPIN_NS, a thread whose item has
 * not come waits on the scheduler's event count, which the host's publish (dsched_kick) and the
 * destroy's join move, so that an idle scheduler costs no CPU.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ec.h"
#include "sim_internal.h"

/* For this long after an item was seen, the threads nearest the front look again after a
 * yield, the others after a nap of SIM_DS_NAP_NS per item they are ahead (at most
 * SIM_DS_NAP_MAX_NS); past it, every thread sleeps on the event count until an item is
 * published or the scheduler stops. */
#define SIM_DS_SPIN_NS 100000ull
#define SIM_DS_NAP_NS 2000ull
#define SIM_DS_NAP_MAX_NS 20000ull
#define SIM_DS_IDLE UINT64_MAX /* nap_ns: no item for SIM_DS_SPIN_NS, sleep until kicked */
/* Threads standing in for the kernel's warps, at most. */
#define SIM_DS_MAX_THREADS 8u

struct sim_dsched {
	struct tdm__backend *b;
	struct sim_stream *s;
	struct tdm__dsched_run r;
	unsigned nthreads; /* started */
	pthread_t *threads;
	struct ck_ec32 ec; /* moved by every publish and by the join: idle threads sleep on it */
};

/* Takes a fault armed on the scheduler's stream (sim.c's sim_inject arms it): the device dies,
 * under the stream's lock, so that a thread that finds nothing armed after it sees the device
 * dead (run_item looks after this call). True when this thread took it. */
static bool take_fault(struct sim_stream *s)
{
	pthread_mutex_lock(&s->lock);
	bool f = s->armed != 0;
	s->armed = 0;
	if (f)
		dev_fail(s->dev); /* the handler "traps": the context is gone */
	pthread_mutex_unlock(&s->lock);
	return f;
}

/* The front: the highest ticket a thread has seen published (a hint for the naps; relaxed). */
static void front_move(uint64_t *front, uint64_t ticket)
{
	uint64_t f = __atomic_load_n(front, __ATOMIC_RELAXED);
	while (f < ticket && !__atomic_compare_exchange_n(front, &f, ticket, true, __ATOMIC_RELAXED,
	                                                  __ATOMIC_RELAXED)) {
	}
}

/* How long to wait before the next look at item s (tandem_dsched.cuh's naps, slower). */
static uint64_t nap_ns(const struct tdm__dsched_queue *q, uint64_t s)
{
	uint64_t f = __atomic_load_n(&q->dev[1], __ATOMIC_RELAXED);
	uint64_t ahead = s + 1 > f ? s + 1 - f : 0;
	bool recent =
	    tdm__now_ns() - __atomic_load_n(&q->dev[2], __ATOMIC_RELAXED) < SIM_DS_SPIN_NS;
	if (!recent)
		return SIM_DS_IDLE;
	if (ahead <= 2)
		return 0;
	return ahead * SIM_DS_NAP_NS < SIM_DS_NAP_MAX_NS ? ahead * SIM_DS_NAP_NS
	                                                 : SIM_DS_NAP_MAX_NS;
}

/* The item of sequence s, once its words all carry its tag: true, with them in w; false when
 * the scheduler stops first (or the device died). */
static bool wait_item(struct sim_dsched *e, uint64_t s, uint64_t w[TDM__DSCHED_WORDS])
{
	const struct tdm__dsched_queue *q = &e->r.queue;
	const uint64_t *item = q->items + (s & q->mask) * TDM__DSCHED_WORDS;
	const uint32_t tag = (uint32_t)(s + 1);
	/* Where the last look found nothing with the scheduler idle: the count it saw before that
	 * look, to sleep on; looked is false while the look since the count was read is owed. */
	uint32_t snap = 0;
	bool looked = false;
	for (;;) {
		if (dev_dead(e->s->dev))
			return false; /* a dead context runs nothing */
		/* Acquire: pairs with the destroy's release store of the stop word. */
		uint64_t stop = __atomic_load_n(q->stop, __ATOMIC_ACQUIRE);
		if ((stop & TDM__DSCHED_CANCEL) != 0 || s >= (stop & ~TDM__DSCHED_CANCEL))
			return false;
		/* Acquire, each word: pairs with the submitter's release stores (dsched.c,
		 * put_item), as the kernel's fence does after its volatile loads; a word with this
		 * item's tag carries this item's payload. */
		w[0] = __atomic_load_n(&item[0], __ATOMIC_ACQUIRE);
		if ((uint32_t)(w[0] >> 32) == tag) {
			unsigned nw = ((unsigned)(w[0] >> 16 & 0xffu) + 3u) / 4u;
			bool ok = nw < TDM__DSCHED_WORDS;
			for (unsigned k = 1; ok && k <= nw; k++) {
				w[k] = __atomic_load_n(&item[k], __ATOMIC_ACQUIRE);
				ok = (uint32_t)(w[k] >> 32) == tag;
			}
			if (ok)
				return true;
			continue; /* part of the item is still on its way */
		}
		uint64_t nap = nap_ns(q, s);
		if (nap == SIM_DS_IDLE) {
			/* Read the count, then look once more (the loop's top), then sleep unless
			 * the count moved: a publish after that look moves it after its words
			 * (kick). ck_ec32_value's read barrier pairs with ck_ec32_inc's write
			 * barrier in tdm__sim_dsched_kick and stop_threads. */
			if (looked) {
				ck_ec32_wait(&e->ec, &tdm__ec_mode, snap, NULL);
				looked = false;
			} else {
				snap = ck_ec32_value(&e->ec);
				looked = true;
			}
		} else if (nap == 0) {
			looked = false;
			sched_yield();
		} else {
			looked = false;
			tdm__sleep_ns(nap);
		}
	}
}

/* Runs item s, whose words are w: the handler on a copy of its arguments, then its word. */
static bool run_item(struct sim_dsched *e, uint64_t s, const uint64_t w[TDM__DSCHED_WORDS])
{
	const struct tdm__dsched_queue *q = &e->r.queue;
	struct sim_dev *d = e->s->dev;
	unsigned handler = (unsigned)(w[0] & 0xffffu), size = (unsigned)(w[0] >> 16 & 0xffu);
	if (size > TDM_DSCHED_ARGS_MAX) /* never, from tdm_dsched_submit */
		size = TDM_DSCHED_ARGS_MAX;
	uint64_t args[(TDM__DSCHED_WORDS - 1) / 2 + 1]; /* 8-byte aligned, as the kernel's */
	uint32_t pay[TDM__DSCHED_WORDS - 1];
	for (unsigned k = 1; k < TDM__DSCHED_WORDS; k++)
		pay[k - 1] = (uint32_t)w[k];
	memcpy(args, pay, size);
	front_move(&q->dev[1], s + 1);
	__atomic_store_n(&q->dev[2], tdm__now_ns(), __ATOMIC_RELAXED);
	if (take_fault(e->s))
		return false;
	/* Seq_cst, before the look at the device: pairs with the seq_cst load of handlers in
	 * tdm__sim_stream_query (dev_dead's note). */
	atomic_fetch_add_explicit(&e->s->handlers, 1, memory_order_seq_cst);
	bool alive = !dev_dead(d);
	if (alive && handler < e->r.handlers->count)
		e->r.handlers->host[handler](args, size);
	/* Release: pairs with that load; a query that sees none running sees their writes. */
	atomic_fetch_sub_explicit(&e->s->handlers, 1, memory_order_release);
	if (!alive)
		return false;
	/* Release: pairs with the host's acquire load of the word (dsched.c, done_word): the
	 * handler's writes are seen with it, and the slot may be written again. */
	__atomic_store_n(&q->done[s & q->mask], s + 1, __ATOMIC_RELEASE);
	return true;
}

static void *warp_main(void *arg)
{
	struct sim_dsched *e = arg;
	uint64_t w[TDM__DSCHED_WORDS];
	for (;;) {
		/* Relaxed: the claims only number the items among the threads; each item's content
		 * comes through its words. */
		uint64_t s = __atomic_fetch_add(&e->r.queue.dev[0], 1, __ATOMIC_RELAXED);
		if (!wait_item(e, s, w) || !run_item(e, s, w))
			return NULL;
	}
}

static void stop_threads(struct sim_dsched *e)
{
	/* The stop word is written (the destroy's release store): wake the sleepers to read it.
	 * ck_ec32_inc's write barrier pairs with ck_ec32_value's read barrier in wait_item. */
	ck_ec32_inc(&e->ec, &tdm__ec_mode);
	for (unsigned i = 0; i < e->nthreads; i++)
		pthread_join(e->threads[i], NULL);
	/* Release: pairs with the acquire load in tdm__sim_stream_query; the kernel's effects are
	 * seen by a query that finds the stream idle. */
	atomic_fetch_sub_explicit(&e->s->outstanding, 1, memory_order_release);
	free(e->threads);
	free(e);
}

int tdm__sim_dsched_start(struct tdm__backend *b, void *stream, const struct tdm__dsched_run *r,
                          void **engine)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || r == NULL || engine == NULL || r->blocks == 0 ||
	    r->warps == 0)
		return -EINVAL;
	unsigned n =
	    r->blocks * r->warps < SIM_DS_MAX_THREADS ? r->blocks * r->warps : SIM_DS_MAX_THREADS;
	if (r->handlers->host == NULL)
		return -ENOTSUP;
	/* The work enqueued before (the zeroing of the claims): run first, as in stream order.
	 * Its operations' release decrements pair with the query's acquire load. */
	int q;
	while ((q = tdm__sim_stream_query(b, s)) == -EAGAIN)
		sched_yield();
	if (q != 0)
		return q == -EIO ? -EIO : q;
	struct sim_dsched *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	e->threads = calloc(n, sizeof(*e->threads));
	if (e->threads == NULL) {
		free(e);
		return -ENOMEM;
	}
	e->b = b;
	e->s = s;
	e->r = *r;
	ck_ec32_init(&e->ec, 0);
	/* Relaxed: the enqueuing thread's own later queries see it (as tdm__sim_submit's). */
	atomic_fetch_add_explicit(&s->outstanding, 1, memory_order_relaxed);
	static atomic_uint next_id;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&e->threads[i], NULL, warp_main, e) != 0) {
			/* Stop the threads started: the stop word is the host's, but nothing else
			 * reads it before this call returns. Release: as the destroy's. */
			__atomic_store_n(r->queue.stop, TDM__DSCHED_CANCEL, __ATOMIC_RELEASE);
			stop_threads(e);
			return -EAGAIN;
		}
		e->nthreads++;
		char name[16];
		snprintf(name, sizeof(name), "tdm-dsched%u",
		         atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed) % 100000u);
		pthread_setname_np(e->threads[i], name);
	}
	*engine = e;
	return 0;
}

void tdm__sim_dsched_kick(struct tdm__backend *b, void *engine)
{
	(void)b;
	struct sim_dsched *e = engine;
	/* A plain atomic add unless a thread sleeps. Its write barrier orders the item's words,
	 * stored before it (dsched.c, put_item), before the count moves: pairs with the read
	 * barrier of ck_ec32_value in wait_item. */
	ck_ec32_inc(&e->ec, &tdm__ec_mode);
}

void tdm__sim_dsched_join(struct tdm__backend *b, void *stream, void *engine)
{
	(void)b;
	(void)stream;
	if (engine != NULL)
		stop_threads(engine);
}
