// SPDX-License-Identifier: MIT
/*
 * The await calls: each numbers what it waits for, suspends the task (executor/await.h) and
 * hands it to the poller, or to its own worker for a word the worker may watch itself.
 */
#include <errno.h>
#include <stdlib.h>

#include "gpu_internal.h"
#include "metrics.h"

/*
 * Counts an await as active while the layer's word is `want`. Seq_cst on both sides: pairs with
 * the destroy's store of the word (tdm_gpu_destroy, before it sets stopping) and the poller's
 * load of active after it saw stopping (Dekker): either this call sees the word changed, or the
 * poller sees its count. `active` is kept across the object's reuse (struct tdm__gpu), so that a
 * stale handle's add and take-away, on whatever layer holds the slot now, balance.
 */
int tdm__await_register(struct tdm__gpu *gpu, const tdm_gpu *want)
{
	atomic_fetch_add_explicit(&gpu->active, 1, memory_order_seq_cst);
	uint64_t now = atomic_load_explicit(&gpu->hobj.h, memory_order_seq_cst);
	if (now != (uint64_t)(uintptr_t)want) {
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_seq_cst);
		return tdm__gpu_refusal(gpu, want, now);
	}
	return 0;
}

static int fail_now(struct tdm__task *t, int rc)
{
	return t != NULL ? tdm__task_fail(t, rc) : rc;
}

/*
 * A word await held by its worker (tdm__task_hold): the same test the poller makes (the word at
 * or past the await's number), then the poller's bookkeeping for a completion. An error the
 * backend reports for that number is delivered here, and a dead device marked failed, as the
 * poller would: asking word_status consumes the report.
 */
static int held_poll(struct tdm__task *t, int *rc)
{
	struct tdm__stream *s = TDM__AW_PTR(t);
	struct tdm__gpu *gpu = s->dev->gpu;
	/* Acquire: pairs with the device's write (the backend's store in sim); the work before
	 * the write is complete. */
	if (__atomic_load_n(s->word, __ATOMIC_ACQUIRE) < TDM__AW(t)->seq)
		return 0;
	const struct tdm__backend_ops *ops = gpu->ops;
	*rc = ops->word_status != NULL ? ops->word_status(gpu->b, s->bs, TDM__AW(t)->seq) : 0;
	tdm__fail_if_dead(s, *rc); /* then the poller fails the device's other awaits */
	atomic_fetch_add_explicit(&gpu->n_direct, 1, memory_order_relaxed);
	tdm__metrics_await_done(gpu, t);
	/* The last access to gpu. Release: pairs with the poller's seq_cst load of active before
	 * it ends, after which tdm_gpu_destroy may free gpu. */
	atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
	return 1;
}

/*
 * tdm__poller_submit for an await that holds nothing tdm_gpu_destroy waits for besides its count
 * in active. Once pushed, t is the poller's: its await can complete (a deadline cancelled by a
 * destroy, an event already done, a held await's word), the poller end and the layer be freed
 * before tdm__poller_submit's bump of the event count returns. One more count in active keeps
 * the poller, and so the layer, alive until then; the await's own count is still there, so the
 * poller cannot have ended before it. Release: pairs with the poller's seq_cst load of active
 * before it ends. A stream await submitted by its own task needs none of this: the task's lease
 * holds tdm_gpu_destroy back (it waits for every lease), and the task is still running here.
 */
void tdm__await_submit(struct tdm__gpu *gpu, struct tdm__task *t)
{
	atomic_fetch_add_explicit(&gpu->active, 1, memory_order_relaxed);
	tdm__poller_submit(gpu, t);
	atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
}

static void held_handoff(struct tdm__task *t)
{
	/* The handing worker is not t's runner: t may have returned and released its lease. */
	tdm__await_submit(((struct tdm__stream *)TDM__AW_PTR(t))->dev->gpu, t);
}

int tdm_await_stream(tdm_task *pub, tdm_stream *lease)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL || lease == NULL || !tdm__lease_held(lease))
		return fail_now(t, -EINVAL);
	if (lease->cap != NULL)
		return fail_now(t, tdm__capture_refuse(lease)); /* recorded work never completes */
	struct tdm__stream *s = lease->st;
	struct tdm__gdev *d = s->dev;
	struct tdm__gpu *gpu = d->gpu;
	if (tdm__task_executor(t) != gpu->ex)
		return fail_now(t, -EINVAL);
	uint64_t t0 = tdm__metrics_await_t0(gpu); /* 0: not timed (metrics off) */
	/* Acquire: pairs with the release in tdm__device_fail. */
	if (atomic_load_explicit(&d->failed, memory_order_acquire))
		return fail_now(t, -EIO);
	int rc = tdm__await_register(gpu, gpu->self); /* the lease holds the layer: its own */
	if (rc != 0)
		return fail_now(t, rc);
	/* Relaxed: a hint the poller keeps; either mechanism is correct. */
	bool word =
	    d->words && (!d->adaptive || atomic_load_explicit(&s->quick, memory_order_relaxed));
	struct tdm__event *e = NULL;
	if (!word) {
		rc = tdm__event_take(d, &e);
		/* Adaptive: no event to be had (-ENOMEM, say) is no reason to fail; a word works.
		 */
		if (rc != 0 && d->adaptive) {
			word = true;
			rc = 0;
		}
	}
	/*
	 * Numbering and enqueueing under one lock keeps the stream's operations in number order, so
	 * the word only grows, and the poller's FIFO (sorted by number) is the stream's order.
	 * Without it, two tasks sharing the stream could enqueue 6 before 5: the word would end at
	 * 5, and a poller that never read the 6 in between would wait for it forever. Events are
	 * numbered too: a word written past an event's number means the event's work is done.
	 */
	if (rc == 0) {
		pthread_mutex_lock(&s->wlock);
		uint64_t seq = s->seq + 1;
		rc = word ? gpu->ops->write_value(gpu->b, s->bs, s->word, seq)
		          : gpu->ops->event_record(gpu->b, e->be, s->bs);
		if (rc == 0)
			s->seq = seq;
		pthread_mutex_unlock(&s->wlock);
		if (word) {
			TDM__AW(t)->obj = s;
			TDM__AW(t)->seq = seq;
		} else {
			e->seq = seq;
			TDM__AW(t)->obj = (void *)((uintptr_t)s | TDM__AW_STREAM_EVENT);
			TDM__AW(t)->seq = (uint64_t)(uintptr_t)e;
		}
	}
	if (rc != 0) {
		if (e != NULL)
			tdm__event_give(e);
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_relaxed);
		return fail_now(t, tdm__enqueued(lease, rc));
	}
	if (t0 != 0) /* before t is handed on: its completion may come at once */
		tdm__metrics_await_begin(gpu, t, t0);
	tdm__task_suspend(t);
	/* A word is one memory read: the worker may watch it itself while it has nothing else to
	 * run, and resume the task with no other thread on the round trip. */
	if (!word || !gpu->direct || !tdm__task_hold(t, held_poll, held_handoff))
		tdm__poller_submit(gpu, t);
	return TDM_SUSPENDED;
}

int tdm_await_event(tdm_task *pub, tdm_event *h)
{
	struct tdm__event *e = tdm__event_of(h); /* its word: held by a user now */
	if (e == NULL) {
		struct tdm__task *t = tdm__task_cast(pub);
		return fail_now(t, -EINVAL);
	}
	return tdm__await_event(pub, e);
}

int tdm__await_event(tdm_task *pub, struct tdm__event *e)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL)
		return fail_now(t, -EINVAL);
	struct tdm__gpu *gpu = e->gpu; /* type-stable: read before the layer is known alive */
	/* Counted first: the count keeps the poller, and so the backend, alive for the query
	 * even when tdm_gpu_destroy runs meanwhile; against the layer's handle, so that a destroy
	 * begun already refuses it. */
	int rc = tdm__await_register(gpu, e->layer);
	if (rc != 0)
		return fail_now(t, rc == -ESHUTDOWN ? rc : -EINVAL);
	if (tdm__task_executor(t) != gpu->ex) {
		/* Release: as below, pairs with the poller's seq_cst load of active. */
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
		return fail_now(t, -EINVAL);
	}
	uint64_t t0 = tdm__metrics_await_t0(gpu); /* 0: not timed (metrics off) */
	/* Counted first, like the query below: the lease handles it reads live until destroy. */
	struct tdm__capture *c = tdm__capture_of_event(e);
	if (c != NULL) { /* a record in a capture never completes; its query would invalidate it */
		/* Release: as below, pairs with the poller's seq_cst load of active. */
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
		return fail_now(t, tdm__capture_refuse(c->root));
	}
	/* Already done: go on without a round trip through the poller. Release: the query
	 * happens before the poller's seq_cst load of active that lets it end. */
	int q = gpu->ops->event_query(gpu->b, e->be);
	if (q != -EAGAIN) {
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
		return fail_now(t, q);
	}
	TDM__AW(t)->obj = (void *)((uintptr_t)e | TDM__AW_EVENT);
	if (t0 != 0) /* before t is handed on: its completion may come at once */
		tdm__metrics_await_begin(gpu, t, t0);
	tdm__task_suspend(t);
	tdm__await_submit(gpu, t);
	return TDM_SUSPENDED;
}

int tdm_await_deadline(tdm_task *pub, tdm_gpu *h, uint64_t deadline_ns)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL)
		return fail_now(t, -EINVAL);
	struct tdm__gpu *gpu = tdm__gpu_find(h);
	if (gpu == NULL)
		return fail_now(t, -EINVAL);
	/* Counted first, against the handle's word: from here the layer stays (its destroy waits
	 * for active), and its fields are this handle's. */
	int rc = tdm__await_register(gpu, h);
	if (rc != 0)
		return fail_now(t, rc);
	if (tdm__task_executor(t) != gpu->ex || deadline_ns <= tdm_now_ns()) {
		rc = tdm__task_executor(t) != gpu->ex ? -EINVAL : 0;
		/* Release: pairs with the poller's seq_cst load of active before it ends. */
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
		return fail_now(t, rc);
	}
	TDM__AW(t)->obj = (void *)((uintptr_t)gpu | TDM__AW_DEADLINE);
	TDM__AW(t)->seq = deadline_ns;
	tdm__task_suspend(t);
	tdm__await_submit(gpu, t);
	return TDM_SUSPENDED;
}
