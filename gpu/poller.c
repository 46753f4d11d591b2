// SPDX-License-Identifier: MIT
/*
 * The poller: one thread per tdm_gpu that owns every outstanding await and hands tasks back to
 * the workers when their await is over. Its lists (busy streams, event awaits, the deadline heap)
 * are touched by the poller thread alone; other threads reach it only through the submit stack
 * and its event count. Why it looks at streams as it does, with the measurements:
 * docs/design/poller.md.
 *
 * - Work on one stream completes in order, so each stream keeps a FIFO of its awaits and a sweep
 *   looks only at each busy stream's oldest: the cost of a sweep grows with busy streams, not
 *   with outstanding awaits.
 * - Completion words: an await enqueues a write of the stream's next sequence number into pinned
 *   memory; the poller reads that word. Numbers are taken and their writes (or event records)
 *   enqueued under the stream's lock (await.c, tdm_await_stream), so the word only grows: every
 *   await numbered at or below the value read is complete, an event await among them too.
 *   FIFOs stay sorted by number because submissions may still reach the poller out of order.
 * - Adaptive completion: a stream is `quick` while its awaits complete within TDM__STALL_NS of
 *   reaching its head; its awaits then use words, else events (await.c). The poller sets and
 *   clears the flag here, as it sees awaits complete or stall.
 * - A device none of whose streams made progress for TDM__CHECK_NS is asked for the status of
 *   one waiting stream: a sticky device error never writes the word, and this is where it is
 *   found.
 * - Idling: spin while anything completed within poll_spin_us, then sleep in short steps while
 *   awaits are outstanding, and sleep on the event count when nothing is.
 * - Due completions: each stream keeps how long its awaits typically wait at the head; when one
 *   is due, the poller wakes due_lead before (TDM__DUE_LEAD_NS plus how late its sleeps wake,
 *   at most TDM__DUE_MAX_NS in all) and spins, looking at that stream on every sweep, until the
 *   completion is seen or due_late has passed (1/16 of the typical wait, at least a back-off
 *   step, at most TDM__DUE_MAX_NS), instead of seeing it at the end of a sleep step. Periodic
 *   work (a pipeline's batches, a loop of long kernels) is seen at once, at the cost of at most
 *   2 x TDM__DUE_MAX_NS of spinning per completion, and only while awaits are outstanding.
 *   Where the await waits longer than a worker spins before it parks, the due spin begins by
 *   waking a worker (tdm__expect_wake), so that the futex wake-up happens during the lead and
 *   not after the completion: a spinning worker takes the task.
 * - Awaits on device schedulers' items (dsched.c) complete out of order, each by a word of its
 *   own: they wait in one list, every one looked at on every sweep (sweep_dsched).
 * - Everything a sweep completes is woken in one batch (tdm__task_wake_batch).
 * - Not every await reaches the poller: a word await made by a worker's own task while that
 *   worker has nothing else to run is watched by the worker itself (tdm__task_hold, await.c
 *   held_poll), and handed over here only when the worker finds other work or parks. The
 *   poller's estimates (typical_ns, quick) see only the awaits it takes in, and a handed-off
 *   await's wait counts from the handoff (up to a worker's spin before parking late: such a
 *   stream reaches stall_us that much later).
 */
#include <errno.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <time.h>

#include "base/observe.h"
#include "dsched.h"
#include "gpu_internal.h"
#include "metrics.h"

/*
 * Sleep step while awaits are outstanding, past the spin window: the most a completion of long
 * GPU work waits to be seen. The poller's timer slack is set to a microsecond at start (Linux's
 * default would stretch every step by far more than the step). A step costs a few percent of a
 * core, and only while GPU work is outstanding (the due spin below adds to that where
 * completions are due).
 */
#define TDM__BACKOFF_NS 20000ull
/* Wake this long before a due completion (a sleep step's wake-up can be late). */
#define TDM__DUE_LEAD_NS 10000ull
/* The most a due spin starts early, and the most it goes on past the due time. */
#define TDM__DUE_MAX_NS 250000ull
/* Awaits that typically wait longer than this find their worker parked (a worker's spin before
 * it parks, executor/worker.c): a due spin for one wakes a worker first. */
#define TDM__PREWAKE_NS 100000ull

void tdm__poller_submit(struct tdm__gpu *gpu, struct tdm__task *t)
{
	tdm__stack_push(&gpu->submit, &TDM__AW(t)->link);
	/* ck_ec32_inc is a plain atomic add unless the poller sleeps; it orders the push above
	 * before the count change that wakes the poller (a write barrier, ck_ec's documented
	 * contract). Pairs with ck_ec32_value's read barrier in tdm__poller_main. */
	ck_ec32_inc(&gpu->ec, &tdm__ec_mode);
}

static int grow(void **arr, unsigned *cap, size_t elem, unsigned need)
{
	if (need <= *cap)
		return 0;
	unsigned n = *cap != 0 ? *cap : 256;
	while (n < need)
		n *= 2;
	void *p = realloc(*arr, n * elem);
	if (p == NULL)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

static void add_wake(struct tdm__gpu *gpu, struct tdm__task *t, int rc)
{
	tdm__metrics_await_done(gpu, t); /* every completion the poller sees comes through here */
	/* capwake is both arrays' capacity: it moves only once both have grown (were it to move
	 * with wake alone, a failed growth of wake_rc would leave it short for good). */
	unsigned cap = gpu->capwake, cap_rc = gpu->capwake;
	if (grow((void **)&gpu->wake, &cap, sizeof(*gpu->wake), gpu->nwake + 1) != 0 ||
	    grow((void **)&gpu->wake_rc, &cap_rc, sizeof(*gpu->wake_rc), cap) != 0) {
		/* No memory for the batch: wake this one alone rather than lose it. */
		tdm__task_wake(t, rc);
	} else {
		gpu->capwake = cap;
		gpu->wake[gpu->nwake] = t;
		gpu->wake_rc[gpu->nwake++] = rc;
	}
	atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_relaxed);
}

/* ---- deadlines: a binary min-heap on their slots' seq ---- */

static void heap_push(struct tdm__gpu *gpu, struct tdm__task *t)
{
	if (grow((void **)&gpu->heap, &gpu->capheap, sizeof(*gpu->heap), gpu->nheap + 1) != 0) {
		add_wake(gpu, t, -ENOMEM);
		return;
	}
	unsigned i = gpu->nheap++;
	while (i > 0 && TDM__AW(gpu->heap[(i - 1) / 2])->seq > TDM__AW(t)->seq) {
		gpu->heap[i] = gpu->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	gpu->heap[i] = t;
}

static struct tdm__task *heap_pop(struct tdm__gpu *gpu)
{
	struct tdm__task *top = gpu->heap[0], *last = gpu->heap[--gpu->nheap];
	unsigned i = 0, n = gpu->nheap;
	for (;;) {
		unsigned c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && TDM__AW(gpu->heap[c + 1])->seq < TDM__AW(gpu->heap[c])->seq)
			c++;
		if (TDM__AW(gpu->heap[c])->seq >= TDM__AW(last)->seq)
			break;
		gpu->heap[i] = gpu->heap[c];
		i = c;
	}
	if (n > 0)
		gpu->heap[i] = last;
	return top;
}

/* ---- intake ---- */

/* A stream await's place on its stream (its word value, or its event's number). An event await
 * always holds its event: tdm_await_stream hands it over only once the record was enqueued. */
static uint64_t aw_seq(struct tdm__task *t)
{
	if (TDM__AW_KIND(t) == TDM__AW_STREAM_WORD)
		return TDM__AW(t)->seq;
	return ((const struct tdm__event *)(uintptr_t)TDM__AW(t)->seq)->seq;
}

static void stream_insert(struct tdm__gpu *gpu, struct tdm__stream *s, struct tdm__task *t,
                          uint64_t now)
{
	TDM__AW(t)->link.next = NULL;
	if (s->head == NULL) {
		s->head = s->tail = t;
		s->moved_ns = now;
		if (!s->busy) {
			s->busy = true;
			s->busy_next = gpu->busy;
			gpu->busy = s;
			if (s->dev->last_alive == 0)
				s->dev->last_alive = now;
		}
		return;
	}
	/* Sequence order; submissions arrive nearly sorted, so this is almost always O(1). */
	uint64_t seq = aw_seq(t);
	if (aw_seq(s->tail) <= seq) {
		TDM__AW(s->tail)->link.next = &TDM__AW(t)->link;
		s->tail = t;
		return;
	}
	struct tdm__task **pp = &s->head;
	while (aw_seq(*pp) <= seq)
		pp = (struct tdm__task **)&TDM__AW(*pp)->link.next;
	TDM__AW(t)->link.next = &TDM__AW(*pp)->link;
	*pp = t;
}

/* One more in a statistics counter that only this thread writes (relaxed: readers take a
 * snapshot, tdm_gpu_stats_get). */
static void count_one(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

static void intake(struct tdm__gpu *gpu, uint64_t now)
{
	/* Newest first; reverse so that FIFOs fill in submission order. */
	struct tdm__link *l = tdm__stack_take_all(&gpu->submit), *rev = NULL;
	while (l != NULL) {
		struct tdm__link *next = l->next;
		l->next = rev;
		rev = l;
		l = next;
	}
	for (l = rev; l != NULL;) {
		struct tdm__task *t = tdm__task_of(l);
		l = l->next;
		switch (TDM__AW_KIND(t)) {
		case TDM__AW_STREAM_WORD:
		case TDM__AW_STREAM_EVENT:
			count_one(TDM__AW_KIND(t) == TDM__AW_STREAM_WORD ? &gpu->n_word
			                                                 : &gpu->n_event);
			stream_insert(gpu, TDM__AW_PTR(t), t, now);
			break;
		case TDM__AW_EVENT:
			TDM__AW(t)->link.next =
			    gpu->ev_head != NULL ? &TDM__AW(gpu->ev_head)->link : NULL;
			gpu->ev_head = t;
			break;
		case TDM__AW_DEADLINE:
			heap_push(gpu, t);
			break;
		case TDM__AW_DSCHED:
			if (gpu->ds_head == NULL)
				gpu->ds_alive_ns = now;
			TDM__AW(t)->link.next =
			    gpu->ds_head != NULL ? &TDM__AW(gpu->ds_head)->link : NULL;
			gpu->ds_head = t;
			break;
		}
	}
}

/* ---- sweeps ---- */

/*
 * A stream whose oldest await has not moved for stall_us (TDM__STALL_NS) waits on long work, and
 * stops being `quick`. While the poller spins, such a stream is looked at less often, so that
 * thousands of awaits behind long kernels on many streams do not slow the sweeps that find short
 * work done:
 * - oldest await on a word: on one sweep in TDM__STALL_EVERY (a memory read; a sleeping sweep,
 *   one per back-off step, looks at it every time);
 * - oldest await on an event: again only after 1/TDM__LOOK_DIV of the time it has waited, at
 *   most TDM__LOOK_MAX_NS later, sleeping or not: a look is a driver call (cudaEventQuery), and
 *   many such streams would cost every sweep a microsecond or more. The completion of work that
 *   ran for t is seen at most t/TDM__LOOK_DIV or TDM__LOOK_MAX_NS late, and so is a device
 *   failure found through such a stream. Near the time its await is due (from how long
 *   the stream's awaits typically wait), it is looked at after a quarter of the distance to
 *   that time at most: a completion a little earlier or later than expected is then seen within
 *   a quarter of the estimate's error, not 3% of the whole wait (a pipeline's slot that sees
 *   its batch late enqueues the next one late; that one completes early against the estimate,
 *   and the error would carry on from batch to batch). Inside the due window, on every sweep.
 *   And whatever the estimate says, with n such streams each is looked at within n back-off
 *   steps: the looks share out about one driver call per step, a few percent of the poller's
 *   core (it wakes every step anyway while awaits are outstanding), and the completion of a
 *   lone long await (the last batch of a pipeline, one long kernel) is looked for at least every
 *   step (docs/design/poller.md has what the share saved).
 */
#define TDM__STALL_NS(gpu) ((uint64_t)(gpu)->cfg.stall_us * 1000ull) /* defaulted at create */
#define TDM__STALL_EVERY 16u
#define TDM__LOOK_DIV 32u
#define TDM__LOOK_MAX_NS 1000000ull
#define TDM__LOOK_MIN_NS 2000ull /* near the due window: a look's poller time stays small */

static void fail_stream_awaits(struct tdm__gpu *gpu, struct tdm__stream *s, int rc)
{
	while (s->head != NULL) {
		struct tdm__task *t = s->head;
		s->head = (struct tdm__task *)(void *)TDM__AW(t)->link.next;
		if (TDM__AW_KIND(t) == TDM__AW_STREAM_EVENT)
			tdm__event_give((struct tdm__event *)(uintptr_t)TDM__AW(t)->seq);
		add_wake(gpu, t, rc);
	}
	s->tail = NULL;
}

/* Returns whether anything completed. */
static bool sweep_stream(struct tdm__gpu *gpu, struct tdm__stream *s, uint64_t now)
{
	struct tdm__gdev *d = s->dev;
	const struct tdm__backend_ops *ops = gpu->ops;
	bool progress = false;
	if (atomic_load_explicit(&d->failed, memory_order_relaxed)) {
		/* Not while the backend still finishes an operation that writes memory (the sim's
		 * copies; a dead CUDA context runs nothing and says -EIO at once): a task must not
		 * resume while its buffers are being written. */
		if (ops->stream_query(gpu->b, s->bs) == -EAGAIN)
			return false;
		fail_stream_awaits(gpu, s, -EIO);
		return true;
	}
	while (s->head != NULL) {
		struct tdm__task *t = s->head;
		int rc;
		if (s->word != NULL) {
			/* Acquire: pairs with the device's write (the backend's store in sim); the
			 * work before the write is complete. */
			uint64_t v = __atomic_load_n(s->word, __ATOMIC_ACQUIRE);
			if (v > s->done)
				s->done = v;
		}
		if (TDM__AW_KIND(t) == TDM__AW_STREAM_WORD) {
			if (s->done < TDM__AW(t)->seq)
				break;
			rc = ops->word_status != NULL
			         ? ops->word_status(gpu->b, s->bs, TDM__AW(t)->seq)
			         : 0;
		} else {
			struct tdm__event *e = (struct tdm__event *)(uintptr_t)TDM__AW(t)->seq;
			/*
			 * Queried even when a later word has passed its number: the work is done
			 * then, but only the event can say whether it failed (an operation's error
			 * reaches the next completion point after it).
			 */
			rc = ops->event_query(gpu->b, e->be);
			count_one(&gpu->n_event_poll);
			if (rc == -EAGAIN)
				break;
			/* Everything before it is done too, if it is: an event that says -EIO may
			 * be a dead device's, whose work never ran (word awaits still complete
			 * from their word). */
			if (rc == 0 && e->seq > s->done)
				s->done = e->seq;
			tdm__event_give(e);
		}
		if (!progress) {
			/*
			 * How long the head waited, averaged low: a shorter wait halves the
			 * difference, a longer one moves it by 1/8. A completion earlier than
			 * expected is missed by the due spin (a sleep step finds it), a later one
			 * only costs spinning up to due_late, so the estimate leans early (and a
			 * loaded machine's late outliers barely move it).
			 */
			uint64_t waited = now - s->moved_ns, ty = s->typical_ns;
			s->typical_ns = ty == 0       ? waited
			                : waited < ty ? ty - (ty - waited) / 2
			                              : ty + (waited - ty) / 8;
		}
		/* Adaptive completion: this await's work ended soon after it reached the head.
		 * Relaxed: a hint for new awaits (await.c); either mechanism is correct. */
		if (d->adaptive && now - s->moved_ns < TDM__STALL_NS(gpu) &&
		    !atomic_load_explicit(&s->quick, memory_order_relaxed)) {
			atomic_store_explicit(&s->quick, true, memory_order_relaxed);
			count_one(&gpu->n_switch);
		}
		s->head = (struct tdm__task *)(void *)TDM__AW(t)->link.next;
		add_wake(gpu, t, rc);
		progress = true;
		if (tdm__fail_if_dead(s, rc)) {
			fail_stream_awaits(gpu, s, -EIO);
			return true;
		}
	}
	if (s->head == NULL) {
		s->tail = NULL;
		return progress;
	}
	/*
	 * A sticky error kills the whole device, so one status query per device per
	 * TDM__CHECK_NS is enough, and none while any of its streams makes progress. Querying
	 * every waiting stream instead takes the driver's lock once per stream, which the
	 * workers' launches wait for: it showed as latency with thousands of awaits pending.
	 */
	if (progress) {
		d->last_alive = now;
	} else if (now - d->last_alive > TDM__CHECK_NS) {
		d->last_alive = now;
		if (ops->stream_query(gpu->b, s->bs) == -EIO) {
			tdm__device_fail(d);
			fail_stream_awaits(gpu, s, -EIO);
			return true;
		}
	}
	return progress;
}

/* How long past its due time a completion is still spun for: 1/16 of the typical wait (a
 * poller woken late on a loaded machine still finds it due), at least a back-off step, at most
 * TDM__DUE_MAX_NS (a missed estimate of long work must not cost a core for long). */
static uint64_t due_late(const struct tdm__stream *s)
{
	uint64_t late = s->typical_ns / 16;
	return late < TDM__BACKOFF_NS   ? TDM__BACKOFF_NS
	       : late > TDM__DUE_MAX_NS ? TDM__DUE_MAX_NS
	                                : late;
}

/* The earliest due completion over the busy streams, leaving out those overdue past due_late
 * (their estimate was wrong; sleep steps see them). */
static void note_due(struct tdm__gpu *gpu, const struct tdm__stream *s, uint64_t now)
{
	if (s->typical_ns == 0)
		return;
	uint64_t due = s->moved_ns + s->typical_ns, late = due_late(s);
	if (due + late >= now && due < gpu->due_ns) {
		gpu->due_ns = due;
		gpu->due_late_ns = late;
		gpu->due_home = tdm__task_home(s->head);
		gpu->due_long = s->typical_ns > TDM__PREWAKE_NS;
	}
}

/* How long before a due completion the poller stops sleeping: TDM__DUE_LEAD_NS plus how late
 * its sleep steps typically wake (on some machines far more than the slack),
 * at most TDM__DUE_MAX_NS. */
static uint64_t due_lead(const struct tdm__gpu *gpu)
{
	uint64_t lead = TDM__DUE_LEAD_NS + gpu->sleep_over_ns;
	return lead < TDM__DUE_MAX_NS ? lead : TDM__DUE_MAX_NS;
}

/* The due window: from lead before the due time to late after it. */
static bool in_due_window(uint64_t now, uint64_t due, uint64_t lead, uint64_t late)
{
	return now + lead >= due && now <= due + late;
}

/* Whether stream s's await is due now (the window due_soon spins through, for this stream). */
static bool stream_due(const struct tdm__gpu *gpu, const struct tdm__stream *s, uint64_t now)
{
	return s->typical_ns != 0 &&
	       in_due_window(now, s->moved_ns + s->typical_ns, due_lead(gpu), due_late(s));
}

uint64_t tdm__look_step(uint64_t now, uint64_t moved_ns, uint64_t typical_ns, uint64_t lead,
                        uint64_t late, unsigned stalled)
{
	uint64_t wait = (now - moved_ns) / TDM__LOOK_DIV;
	uint64_t step = wait < TDM__LOOK_MAX_NS ? wait : TDM__LOOK_MAX_NS;
	/* The share: with n such streams, each is looked at within n back-off steps. */
	uint64_t share = TDM__BACKOFF_NS * (stalled > 0 ? stalled : 1u);
	if (share < step)
		step = share;
	if (typical_ns == 0)
		return step;
	uint64_t due = moved_ns + typical_ns;
	if (in_due_window(now, due, lead, late))
		return 0; /* due: on every sweep (the due spin) */
	uint64_t dist = due > now ? due - now : now - due, near = dist / 4;
	if (near < TDM__LOOK_MIN_NS)
		near = TDM__LOOK_MIN_NS;
	if (near < step)
		step = near;
	/* Never past the start of the due window. */
	if (due > now + lead && due - lead - now < step)
		step = due - lead - now;
	return step;
}

/* A completion is due within due_lead, or was within its due_late. */
static bool due_soon(const struct tdm__gpu *gpu, uint64_t now)
{
	return gpu->due_ns != UINT64_MAX &&
	       in_due_window(now, gpu->due_ns, due_lead(gpu), gpu->due_late_ns);
}

/*
 * Awaits on device schedulers' items (dsched.c): each item has a completion word of its own
 * (items complete out of order), so every such await is looked at on every sweep, one memory
 * read each. A scheduler whose awaits saw no completion for TDM__CHECK_NS has its stream asked
 * whether the device died (a handler that traps kills the context; the words then never come).
 * An await's end is the poller's last access to its scheduler (the scheduler's destroy waits
 * for its awaits, then frees it); the scheduler's other awaits still in the list keep it alive.
 */
static bool sweep_dsched(struct tdm__gpu *gpu, uint64_t now)
{
	bool progress = false, check = now - gpu->ds_alive_ns > TDM__CHECK_NS;
	if (check)
		gpu->ds_alive_ns = now;
	struct tdm__task **tp = &gpu->ds_head;
	while (*tp != NULL) {
		struct tdm__task *t = *tp;
		struct tdm__dsched *ds = TDM__AW_PTR(t);
		if (check)
			tdm__dsched_health(ds, now);
		int rc;
		if (tdm__dsched_poll(t, &rc) == 0) {
			tp = (struct tdm__task **)&TDM__AW(t)->link.next;
			continue;
		}
		*tp = (struct tdm__task *)(void *)TDM__AW(t)->link.next;
		add_wake(gpu, t, rc);
		tdm__dsched_await_end(ds);
		progress = true;
	}
	if (progress)
		gpu->ds_alive_ns = now;
	return progress;
}

static bool sweep(struct tdm__gpu *gpu, uint64_t now, bool spinning)
{
	bool progress = false;
	count_one(&gpu->n_sweep);
	gpu->due_ns = UINT64_MAX;
	bool look_at_stalled_words = !spinning || ++gpu->sweeps % TDM__STALL_EVERY == 0;
	unsigned stalled_events = 0; /* for the next sweep's look steps */
	struct tdm__stream **pp = &gpu->busy;
	while (*pp != NULL) {
		struct tdm__stream *s = *pp;
		bool stalled = now - s->moved_ns > TDM__STALL_NS(gpu);
		bool on_event = TDM__AW_KIND(s->head) == TDM__AW_STREAM_EVENT;
		stalled_events += stalled && on_event;
		if (stalled) {
			/* Relaxed: a hint for new awaits (await.c); either mechanism is correct. */
			if (s->dev->adaptive &&
			    atomic_load_explicit(&s->quick, memory_order_relaxed)) {
				atomic_store_explicit(&s->quick, false, memory_order_relaxed);
				count_one(&gpu->n_switch);
			}
			if (!stream_due(gpu, s, now) &&
			    (on_event ? now < s->next_look_ns : !look_at_stalled_words)) {
				note_due(gpu, s, now);
				pp = &s->busy_next;
				continue;
			}
		}
		bool moved = sweep_stream(gpu, s, now);
		if (moved) {
			s->moved_ns = now;
		} else if (stalled && on_event) {
			/* On every sweep while it is due (the estimate leans early: one look at
			 * the due time would mostly miss). */
			s->next_look_ns =
			    now + tdm__look_step(now, s->moved_ns, s->typical_ns, due_lead(gpu),
			                         due_late(s), gpu->stalled_events);
		}
		progress |= moved;
		if (s->head == NULL) {
			s->busy = false;
			*pp = s->busy_next;
		} else {
			note_due(gpu, s, now);
			pp = &s->busy_next;
		}
	}
	gpu->stalled_events = stalled_events;
	/* User events: few, each queried. On a failed device too: the backend says -EIO, or
	 * -EAGAIN while an operation that began before the failure still writes memory. */
	struct tdm__task **tp = &gpu->ev_head;
	while (*tp != NULL) {
		struct tdm__task *t = *tp;
		struct tdm__event *e = TDM__AW_PTR(t);
		int rc = gpu->ops->event_query(gpu->b, e->be);
		if (rc == -EAGAIN) {
			tp = (struct tdm__task **)&TDM__AW(t)->link.next;
			continue;
		}
		*tp = (struct tdm__task *)(void *)TDM__AW(t)->link.next;
		add_wake(gpu, t, rc);
		progress = true;
	}
	if (gpu->ds_head != NULL && sweep_dsched(gpu, now))
		progress = true;
	bool stopping = atomic_load_explicit(&gpu->stopping, memory_order_relaxed);
	while (gpu->nheap > 0 && (stopping || TDM__AW(gpu->heap[0])->seq <= now)) {
		struct tdm__task *t = heap_pop(gpu);
		add_wake(gpu, t, TDM__AW(t)->seq <= now ? 0 : -ECANCELED);
		progress = true;
	}
	return progress;
}

static void flush_wakes(struct tdm__gpu *gpu)
{
	if (gpu->nwake == 0)
		return;
	tdm__task_wake_batch(gpu->wake, gpu->wake_rc, gpu->nwake);
	gpu->nwake = 0;
}

static bool outstanding(struct tdm__gpu *gpu)
{
	return gpu->busy != NULL || gpu->ev_head != NULL || gpu->nheap > 0 || gpu->ds_head != NULL;
}

void *tdm__poller_main(void *arg)
{
	struct tdm__gpu *gpu = arg;
	uint64_t spin_ns = (uint64_t)gpu->cfg.poll_spin_us * 1000ull;
	prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
	pthread_setname_np(pthread_self(), "tdm-poller");
	tdm__observe_thread("tandem poller"); /* named for a trace started later too */
	uint64_t last_activity = tdm_now_ns();
	bool due_spinning = false;
	gpu->due_ns = UINT64_MAX;
	for (;;) {
		/* A read barrier, pairing with ck_ec32_inc in tdm__poller_submit and
		 * tdm_gpu_destroy: a bump in snap means the submit stack load and the loads of
		 * stopping below see what came before it; a bump not in snap ends the waits. */
		uint32_t snap = ck_ec32_value(&gpu->ec);
		bool fresh = !tdm__stack_empty(&gpu->submit);
		uint64_t now = tdm_now_ns();
		if (fresh)
			intake(gpu, now);
		bool due = due_soon(gpu, now);
		if (due && !due_spinning) {
			count_one(&gpu->n_due);
			/* Its worker has likely parked: wake one now, during the lead, so that the
			 * task is resumed by a spinning worker instead of after a futex wake-up. */
			if (gpu->due_long && tdm__expect_wake(gpu->ex, gpu->due_home))
				count_one(&gpu->n_prewake);
		}
		due_spinning = due;
		if (sweep(gpu, now, now - last_activity < spin_ns || due) || fresh)
			last_activity = now;
		flush_wakes(gpu);
		if (outstanding(gpu) || now - last_activity < spin_ns) {
			if (now - last_activity < spin_ns || due_soon(gpu, now)) {
				tdm__cpu_relax();
				continue;
			}
			/* Long GPU work: look again soon, at the next due completion, or at the
			 * next deadline. */
			uint64_t step = TDM__BACKOFF_NS, lead = due_lead(gpu);
			if (gpu->due_ns != UINT64_MAX && gpu->due_ns > now + lead &&
			    gpu->due_ns - lead - now < step)
				step = gpu->due_ns - lead - now;
			if (gpu->busy == NULL && gpu->ev_head == NULL && gpu->nheap > 0 &&
			    TDM__AW(gpu->heap[0])->seq > now)
				step = TDM__AW(gpu->heap[0])->seq - now;
			struct timespec dl;
			uint64_t until = now + step;
			dl.tv_sec = (time_t)(until / 1000000000ull);
			dl.tv_nsec = (long)(until % 1000000000ull);
			count_one(&gpu->n_sleep);
			if (step <= TDM__BACKOFF_NS) {
				uint64_t asleep = tdm_now_ns();
				tdm__sleep_ns(step);
				/* How late it woke, at most a back-off step counted (a preempted
				 * poller's one long sleep says nothing of the next): a moving
				 * average over 8. */
				uint64_t woke = tdm_now_ns(), over = 0;
				if (woke > asleep + step)
					over = woke - asleep - step;
				if (over > TDM__BACKOFF_NS)
					over = TDM__BACKOFF_NS;
				gpu->sleep_over_ns =
				    gpu->sleep_over_ns - gpu->sleep_over_ns / 8 + over / 8;
			} else
				tdm__ec32_wait_until(&gpu->ec, &tdm__ec_mode, snap, &dl);
			continue;
		}
		/* Seq_cst: pairs with tdm__await_register (await.c) and the store in
		 * tdm_gpu_destroy: a registrant that missed `stopping` is counted in `active` here.
		 */
		if (atomic_load_explicit(&gpu->stopping, memory_order_seq_cst) &&
		    atomic_load_explicit(&gpu->active, memory_order_seq_cst) == 0 &&
		    tdm__stack_empty(&gpu->submit))
			break;
		if (atomic_load_explicit(&gpu->stopping, memory_order_relaxed)) {
			/* Registered awaits are still on their way into the submit stack. */
			tdm__cpu_relax();
			continue;
		}
		/* Nothing outstanding: sleep until a submission bumps the count past snap. */
		count_one(&gpu->n_sleep);
		ck_ec32_wait(&gpu->ec, &tdm__ec_mode, snap, NULL);
		last_activity = tdm_now_ns();
	}
	return NULL;
}
