// SPDX-License-Identifier: MIT
/*
 * Pooled events: each device keeps the events it made, for stream awaits (event completion)
 * and for users (tdm_event_get, _put, _record). Every event is an object of the events' handle
 * table (base/handle.h), never freed: a user's handle is checked by the event's word, which a put
 * and the layer's destroy change, so that a stale handle is refused rather than read freed.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

/* 256 events a chunk, a million at once. */
#define EVENT_TAG 0x19u
#define EVENT_SHIFT 8
#define EVENT_CHUNKS 4096
static char *_Atomic event_chunks[EVENT_CHUNKS];
static struct tdm__htable event_handles = TDM__HTABLE_INIT(
    "event", EVENT_TAG, EVENT_SHIFT, EVENT_CHUNKS, struct tdm__event, event_chunks);

_Static_assert(offsetof(struct tdm__event, hobj) == 0, "tdm__h_live reads the word first");

/* The event h names if it is live (its word published by tdm_event_get), else NULL. */
struct tdm__event *tdm__event_of(const tdm_event *h)
{
	return tdm__h_live(event_chunks, EVENT_TAG, EVENT_SHIFT, EVENT_CHUNKS,
	                   sizeof(struct tdm__event), h);
}

/* e back to the table, its word dead (a handle it had is refused from here). Release: what was
 * done with e happens before a check that reads the word so, and before its reuse. */
static void event_drop(struct tdm__event *e)
{
	uint64_t w = atomic_load_explicit(&e->hobj.h, memory_order_relaxed);
	atomic_store_explicit(&e->hobj.h, w | TDM__H_DEAD, memory_order_release);
	tdm__h_put(&event_handles, &e->hobj);
}

int tdm__event_take(struct tdm__gdev *d, struct tdm__event **out)
{
	struct tdm__gpu *gpu = d->gpu;
	pthread_mutex_lock(&d->ev_lock);
	struct tdm__event *e = d->free_events;
	if (e != NULL) {
		d->free_events = e->next_free;
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
	uint64_t h;
	e = tdm__h_take(&event_handles, &h);
	if (e == NULL)
		return -ENOMEM;
	/* Not a user's: its word says the handle it was given is dead; tdm_event_get issues the
	 * next. Relaxed: nothing of it is published to a checker that could find it equal. */
	atomic_store_explicit(&e->hobj.h, h | TDM__H_DEAD, memory_order_relaxed);
	memset((char *)e + sizeof(e->hobj), 0, sizeof(*e) - sizeof(e->hobj));
	e->dev = d;
	e->gpu = gpu;
	e->layer = gpu->self;
	int rc = gpu->ops->event_create(gpu->b, d->index, &e->be);
	if (rc != 0) {
		event_drop(e);
		return rc;
	}
	pthread_mutex_lock(&d->ev_lock);
	if (d->nall_events == d->cap_events) {
		unsigned cap = d->cap_events != 0 ? 2 * d->cap_events : 64;
		struct tdm__event **all = realloc(d->all_events, cap * sizeof(*all));
		if (all == NULL) {
			pthread_mutex_unlock(&d->ev_lock);
			gpu->ops->event_destroy(gpu->b, e->be);
			event_drop(e);
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

void tdm__event_give(struct tdm__event *e)
{
	struct tdm__gdev *d = e->dev;
	pthread_mutex_lock(&d->ev_lock);
	e->next_free = d->free_events;
	d->free_events = e;
	pthread_mutex_unlock(&d->ev_lock);
}

void tdm__events_fini(struct tdm__gdev *d)
{
	struct tdm__gpu *gpu = d->gpu;
	for (unsigned k = 0; k < d->nall_events; k++) {
		struct tdm__event *e = d->all_events[k];
		gpu->ops->event_destroy(gpu->b, e->be);
		event_drop(e); /* a user's handle not put back says destroyed from here */
	}
	free(d->all_events);
	d->all_events = NULL;
	d->nall_events = d->cap_events = 0;
}

static int event_get(struct tdm__gpu *gpu, int device, tdm_event **out)
{
	if (out == NULL)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	if (device < 0 || device >= gpu->ndev)
		return -EINVAL;
	struct tdm__event *e;
	int rc = tdm__event_take(&gpu->devs[device], &e);
	if (rc != 0)
		return rc;
	/* A new owner's event is complete until it records it (tdm_await_event says so), even
	 * when its last record, for a stream await, captured a failed operation. */
	if (gpu->ops->event_reset != NULL)
		gpu->ops->event_reset(gpu->b, e->be);
	e->last = NULL;
	e->cap_root = NULL;
	/* A handle of its own, one generation past the last: the handles of its earlier owners
	 * are refused. */
	uint64_t h = tdm__h_renew(&event_handles, &e->hobj);
	tdm__h_publish(&e->hobj, h);
	*out = (tdm_event *)(uintptr_t)h;
	return 0;
}

int tdm_event_get(tdm_gpu *h, int device, tdm_event **out)
{
	TDM__GPU_CALL(h, event_get(gpu, device, out));
}

int tdm_event_put(tdm_event *h)
{
	struct tdm__event *e = tdm__event_of(h);
	if (e == NULL)
		return -EINVAL; /* NULL, put back already, of a destroyed layer, or not an event */
	/* Its layer's gate first: while this put is inside it, the layer's destroy cannot take
	 * the event back and hand it to another layer, so the pool given to below is the one
	 * the event came from. e->layer is as tdm_event_get published it (the acquire in
	 * tdm__event_of); a layer being destroyed refuses, and its destroy, which takes back
	 * every event its layer made, destroys this one with the others. */
	_Atomic unsigned *in;
	int rc;
	bool inside = tdm__gpu_enter(e->layer, &in, &rc) != NULL;
	/* Acq_rel: of two puts of one handle, racing or not, one changes the word; its release
	 * orders the owner's use before the event's next owner. */
	uint64_t want = (uint64_t)(uintptr_t)h;
	if (!atomic_compare_exchange_strong_explicit(&e->hobj.h, &want, want | TDM__H_DEAD,
	                                             memory_order_acq_rel, memory_order_relaxed)) {
		if (inside)
			tdm__gate_leave(in);
		return -EINVAL;
	}
	if (inside) {
		tdm__event_give(e);
		tdm__gate_leave(in);
	}
	return 0;
}

int tdm__event_record(struct tdm__event *e, tdm_stream *s)
{
	if (s == NULL || !tdm__lease_held(s) || e->dev != s->dev)
		return -EINVAL;
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	struct tdm__gpu *gpu = s->dev->gpu;
	int rc = tdm__enqueued(s, gpu->ops->event_record(gpu->b, e->be, s->bs));
	if (rc == 0) {
		e->last = s->st;
		tdm__capture_note_record(e, s);
	}
	return rc;
}

int tdm__stream_wait_event(tdm_stream *s, struct tdm__event *e)
{
	if (s == NULL || !tdm__lease_held(s) || e->gpu != s->dev->gpu)
		return -EINVAL;
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	if (e->last == s->st)
		return 0; /* recorded on this stream: what follows runs after it anyway */
	struct tdm__gpu *gpu = s->dev->gpu;
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

/* A user's event: its word checked first (one load), then s's lease, which keeps the layer,
 * and so the event's device, alive while the call runs. */
int tdm_event_record(tdm_event *h, tdm_stream *s)
{
	struct tdm__event *e = tdm__event_of(h);
	return e != NULL ? tdm__event_record(e, s) : -EINVAL;
}

int tdm_stream_wait_event(tdm_stream *s, tdm_event *h)
{
	struct tdm__event *e = tdm__event_of(h);
	return e != NULL ? tdm__stream_wait_event(s, e) : -EINVAL;
}
