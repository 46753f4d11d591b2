// SPDX-License-Identifier: MIT
/*
 * Pooled events: each device keeps the events it made, for stream awaits (event completion)
 * and for users (tdm_event_get, _put, _record).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

int tdm__event_take(struct tdm__gdev *d, struct tdm_event **out)
{
	struct tdm_gpu *gpu = d->gpu;
	pthread_mutex_lock(&d->ev_lock);
	struct tdm_event *e = d->free_events;
	if (e != NULL) {
		d->free_events = e->next_free;
		atomic_store_explicit(&e->pooled, false, memory_order_relaxed);
		pthread_mutex_unlock(&d->ev_lock);
		*out = e;
		return 0;
	}
	pthread_mutex_unlock(&d->ev_lock);
	/*
	 * A new one, made without the lock: the poller gives events back under ev_lock, and a
	 * driver call can wait a long time (for a context lock that a thread blocked on a full
	 * stream holds, say); the poller must never wait behind one.
	 */
	e = aligned_alloc(TDM__CACHELINE, TDM__CACHELINE);
	if (e == NULL)
		return -ENOMEM;
	memset(e, 0, sizeof(*e));
	e->dev = d;
	int rc = gpu->ops->event_create(gpu->b, d->index, &e->be);
	if (rc != 0) {
		free(e);
		return rc;
	}
	pthread_mutex_lock(&d->ev_lock);
	if (d->nall_events == d->cap_events) {
		unsigned cap = d->cap_events != 0 ? 2 * d->cap_events : 64;
		struct tdm_event **all = realloc(d->all_events, cap * sizeof(*all));
		if (all == NULL) {
			pthread_mutex_unlock(&d->ev_lock);
			gpu->ops->event_destroy(gpu->b, e->be);
			free(e);
			return -ENOMEM;
		}
		d->all_events = all;
		d->cap_events = cap;
	}
	d->all_events[d->nall_events++] = e;
	pthread_mutex_unlock(&d->ev_lock);
	*out = e;
	return 0;
}

/* Back to the free list; false (and nothing done) when it is there already. */
static bool event_push(struct tdm_event *e)
{
	struct tdm__gdev *d = e->dev;
	pthread_mutex_lock(&d->ev_lock);
	bool was = atomic_load_explicit(&e->pooled, memory_order_relaxed);
	if (!was) {
		e->next_free = d->free_events;
		d->free_events = e;
		atomic_store_explicit(&e->pooled, true, memory_order_relaxed);
	}
	pthread_mutex_unlock(&d->ev_lock);
	return !was;
}

void tdm__event_give(struct tdm_event *e)
{
	(void)event_push(e);
}

int tdm_event_get(tdm_gpu *gpu, int device, tdm_event **out)
{
	if (gpu == NULL || out == NULL)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	if (device < 0 || device >= gpu->ndev)
		return -EINVAL;
	int rc = tdm__event_take(&gpu->devs[device], out);
	/* A new owner's event is complete until it records it (tdm_await_event says so), even
	 * when its last record, for a stream await, captured a failed operation. */
	if (rc == 0 && gpu->ops->event_reset != NULL)
		gpu->ops->event_reset(gpu->b, (*out)->be);
	if (rc == 0) {
		(*out)->last = NULL;
		(*out)->cap_root = NULL;
	}
	return rc;
}

int tdm_event_put(tdm_event *e)
{
	if (e == NULL)
		return -EINVAL;
	/* A second put would put it on the free list twice, for two owners to take. */
	return event_push(e) ? 0 : -EINVAL;
}

int tdm_event_record(tdm_event *e, tdm_stream *s)
{
	if (e == NULL || s == NULL || !tdm__lease_held(s) || e->dev != s->dev ||
	    tdm__event_put_back(e))
		return -EINVAL;
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	struct tdm_gpu *gpu = s->dev->gpu;
	int rc = tdm__enqueued(s, gpu->ops->event_record(gpu->b, e->be, s->bs));
	if (rc == 0) {
		e->last = s->st;
		tdm__capture_note_record(e, s);
	}
	return rc;
}

int tdm_stream_wait_event(tdm_stream *s, tdm_event *e)
{
	if (e == NULL || s == NULL || !tdm__lease_held(s) || e->dev->gpu != s->dev->gpu ||
	    tdm__event_put_back(e))
		return -EINVAL;
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	if (e->last == s->st)
		return 0; /* recorded on this stream: what follows runs after it anyway */
	struct tdm_gpu *gpu = s->dev->gpu;
	if (gpu->ops->stream_wait_event == NULL)
		return -ENOTSUP;
	/* Graph captures (graph.c): an edge from a record in a capture forks s into it; an edge
	 * into a capture from work outside it would tie the graph to that one run: refused. */
	struct tdm__capture *c = tdm__capture_of_event(e);
	if (c == NULL && s->cap != NULL && e->last != NULL)
		return tdm__capture_refuse(s);
	if (c != NULL && s->cap != NULL && s->cap != c)
		return tdm__capture_refuse(s);
	if (c != NULL && s->cap == NULL && !s->exclusive)
		return -EINVAL; /* a shared stream would sweep other tasks' work into the graph */
	if (c != NULL && s->cap == NULL && !pthread_equal(c->thread, pthread_self()))
		return -EINVAL; /* only the capturing thread forks streams into its capture */
	int rc = tdm__enqueued(s, gpu->ops->stream_wait_event(gpu->b, s->bs, e->be));
	if (rc == 0 && c != NULL && (rc = tdm__capture_join(s, c)) != 0)
		(void)tdm__capture_refuse(c->root); /* joined on the device, not here: discard it */
	return rc;
}
