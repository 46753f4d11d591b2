// SPDX-License-Identifier: MIT
/*
 * Stream sets, placement, leases and the launch gate. Why, with the measurements:
 * docs/design/gpu-streams.md.
 *
 * Streams: each device has TDM__PRIO_CLASSES sets of `nstreams` streams, created on first use.
 * A worker's shared leases go to "its" stream of a set (worker index modulo the set size): its
 * thread-local pool is a fixed slice of the bounded set (its size: gpu/topology/decide.c), so
 * workers never make streams of their own beyond it, and a worker's shared lease takes no lock
 * once the stream exists (its handle too comes from the worker's own list, refilled under a
 * lock once per LEASE_BATCH; a thread that is not a worker takes that lock each time). Unless
 * another stream of the set, already made, holds clearly fewer leases: a lease compares its own
 * stream with one other (a different one each time; "two choices") and takes the less loaded when
 * the difference is more than 2 plus 1/16 of the own stream's leases, so that the work on each
 * stream does not follow how many tasks each worker happened to start. Only while the own stream is
 * not quick, though (adaptive completion: its awaits complete soon after reaching the head): a
 * quick stream drains as fast as its worker fills it, so the worker, not the GPU, sets the pace,
 * and a move only puts two workers' launches on one stream. A slow stream's leases may still move
 * onto a quick one: that stream drains fast, which is where a GPU-bound worker's work should go.
 * Exclusive leases take any stream with no lease at all.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/observe.h"
#include "base/say.h"
#include "gpu_internal.h"
#include "stamps.h"

/* The stream at slot k of class c, created on first use. */
static int stream_at(struct tdm__gdev *d, int c, unsigned k, struct tdm__stream **out)
{
	/* Acquire: pairs with the release store below; the stream's fields are initialised. */
	struct tdm__stream *s = atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
	if (s != NULL) {
		*out = s;
		return 0;
	}
	struct tdm__gpu *gpu = d->gpu;
	int rc = 0;
	bool made = false; /* by this call: named for a profiler (class 1 is the high one) */
	pthread_mutex_lock(&d->lock);
	s = atomic_load_explicit(&d->streams[c][k], memory_order_relaxed);
	if (s == NULL) {
		s = aligned_alloc(TDM__CACHELINE, sizeof(*s));
		if (s == NULL) {
			rc = -ENOMEM;
		} else {
			memset(s, 0, sizeof(*s));
			s->dev = d;
			pthread_mutex_init(&s->sq.lock, NULL);
			s->sq.index = (unsigned)c * d->nstreams + k;
			s->sq.high = c == 1;
			pthread_mutex_init(&s->wlock, NULL);
			if (d->words)
				s->word = d->word_block +
				          ((size_t)c * d->nstreams + k) * (TDM__CACHELINE / 8);
			rc = gpu->ops->stream_create(gpu->b, d->index, d->prio[c], &s->bs);
			if (rc != 0) {
				free(s);
				s = NULL;
			} else {
				/* Release: publishes the initialised stream to lock-free readers.
				 */
				atomic_store_explicit(&d->streams[c][k], s, memory_order_release);
				made = true;
			}
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (made && tdm__observing() && gpu->ops->stream_native != NULL)
		tdm__observe_stream(gpu->ops->stream_native(gpu->b, s->bs), d->index, c == 1, k);
	*out = s;
	return rc;
}

unsigned tdm__streams_open(const struct tdm__gdev *d, int c)
{
	unsigned open = 0;
	for (unsigned k = 0; k < d->nstreams; k++) {
		/* Acquire: pairs with the release that publishes a made stream (stream_at). */
		struct tdm__stream *s =
		    atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
		/* Relaxed: a snapshot; the caller checks again after it took a stream. */
		open += s == NULL ||
		        atomic_load_explicit(&s->leases, memory_order_relaxed) < TDM__EXCLUSIVE;
	}
	return open;
}

/*
 * The stream leases held on a device (an exclusive one counts once), summed from the streams'
 * own counts rather than kept in a device-wide counter that every lease and release would
 * write. Relaxed: a hint for placement; a lease in flight may be missed.
 */
static int device_load(struct tdm__gdev *d)
{
	int load = 0;
	for (int c = 0; c < TDM__PRIO_CLASSES; c++)
		for (unsigned k = 0; k < d->nstreams; k++) {
			/* Acquire: pairs with the release that publishes a made stream (stream_at).
			 */
			struct tdm__stream *s =
			    atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
			if (s == NULL)
				continue;
			int l = atomic_load_explicit(&s->leases, memory_order_relaxed);
			load += l >= TDM__EXCLUSIVE ? 1 : l;
		}
	return load;
}

static bool device_failed(struct tdm__gdev *d)
{
	/* Acquire: pairs with the release in tdm__device_fail. */
	return atomic_load_explicit(&d->failed, memory_order_acquire) != 0;
}

/* The device for a TDM_DEVICE_ANY lease: among those that have not failed (a failed one would
 * refuse the lease; least loaded picked it every time, its leases all released); when every
 * one has failed, any (the lease says -ENODEV). */
static int place(struct tdm__gpu *gpu)
{
	unsigned n = (unsigned)gpu->ndev;
	unsigned rr = atomic_fetch_add_explicit(&gpu->place_rr, 1, memory_order_relaxed);
	int first_live = -1;
	for (unsigned k = 0; k < n && first_live < 0; k++)
		if (!device_failed(&gpu->devs[(rr + k) % n]))
			first_live = (int)((rr + k) % n);
	if (first_live < 0)
		return (int)(rr % n);
	switch (gpu->cfg.placement) {
	case TDM_PLACE_LEAST_LOADED: {
		/* Start the scan at rr so that ties spread instead of piling on device 0. */
		int best = first_live, best_load = INT32_MAX;
		for (unsigned k = 0; k < n; k++) {
			int i = (int)((rr + k) % n);
			if (device_failed(&gpu->devs[i]))
				continue;
			int load = device_load(&gpu->devs[i]);
			if (load < best_load) {
				best = i;
				best_load = load;
			}
		}
		return best;
	}
	case TDM_PLACE_NEAREST: {
		int cpu = sched_getcpu();
		for (unsigned k = 0; cpu >= 0 && k < n; k++) {
			int i = (int)((rr + k) % n);
			if (gpu->devs[i].has_cpus && CPU_ISSET(cpu, &gpu->devs[i].cpus) &&
			    !device_failed(&gpu->devs[i]))
				return i;
		}
		return first_live;
	}
	default:
		return first_live;
	}
}

/*
 * Shared leases: slot k, or the other slot this call compares it with when that stream exists
 * and holds fewer leases (see the top of this file). The lease counts are read relaxed: a hint
 * for balance; the lease itself is taken with its own atomic in tdm_stream_lease.
 */
static unsigned two_choices(struct tdm__gdev *d, int c, unsigned k)
{
	static _Thread_local unsigned turn;
	unsigned other = (k + 1 + turn++ % (d->nstreams - 1)) % d->nstreams;
	/* Acquire: pair with the release that publishes a made stream (stream_at). */
	struct tdm__stream *mine = atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
	if (mine == NULL || d->gpu->balance == TDM__BALANCE_NEVER)
		return k;
	/* A quick stream keeps its worker's leases (the top of this file). Relaxed: the poller's
	 * hint, as for the completion mechanism. */
	if (d->gpu->balance == TDM__BALANCE_SLOW &&
	    atomic_load_explicit(&mine->quick, memory_order_relaxed))
		return k;
	struct tdm__stream *s = atomic_load_explicit(&d->streams[c][other], memory_order_acquire);
	if (s == NULL)
		return k;
	int lm = atomic_load_explicit(&mine->leases, memory_order_relaxed);
	int lo = atomic_load_explicit(&s->leases, memory_order_relaxed);
	/* Leave the own stream only for a clear difference: moving costs the locality of one
	 * worker per stream (docs/design/gpu-streams.md, two choices). */
	return lo + 2 + lm / 16 < lm ? other : k;
}

/*
 * Lease handles, one per lease (gpu_internal.h, struct tdm_stream), recycled through free lists:
 * each worker's own (gpu->lease_cache, touched by that worker only: no atomic, no lock) and a
 * shared one under lease_lock, for threads that are not workers and for the batches a worker's
 * list lacks or overflows (a task may lease on one worker and release on another). A worker's
 * lease costs a pop and a few stores to lines the worker most likely holds, a release one
 * exchange and a push, next to the gate's and the stream count's atomics that a lease takes
 * anyway; a worker takes the lock only once per batch of handles, and then only when its
 * leases and releases do not balance. Lists are oldest first, so that a released handle is
 * reused as late as the list allows: until then a stale use of it is refused.
 */
#define LEASE_BATCH 32 /* handles made at once, and moved at once between lists */

struct tdm__lease_chunk {
	struct tdm__lease_chunk *next;
	struct tdm_stream h[LEASE_BATCH];
};

static struct tdm_stream *list_pop(struct tdm__lease_list *l)
{
	struct tdm_stream *h = l->head;
	if (h != NULL) {
		l->head = h->next_free;
		if (l->head == NULL)
			l->tail = NULL;
		l->n--;
	}
	return h;
}

static void list_push(struct tdm__lease_list *l, struct tdm_stream *h)
{
	h->next_free = NULL;
	if (l->tail != NULL)
		l->tail->next_free = h;
	else
		l->head = h;
	l->tail = h;
	l->n++;
}

/* The oldest k handles of `from` (all, when it holds fewer) to the end of `to`. */
static void list_move(struct tdm__lease_list *from, struct tdm__lease_list *to, unsigned k)
{
	for (struct tdm_stream *h; k > 0 && (h = list_pop(from)) != NULL; k--)
		list_push(to, h);
}

int tdm__leases_init(struct tdm__gpu *gpu)
{
	int workers = tdm_executor_workers(gpu->ex);
	unsigned n = workers > 0 ? (unsigned)workers : 0;
	/* One more than needed: never empty, so that a NULL lease_cache means not initialised. */
	gpu->lease_cache = aligned_alloc(TDM__CACHELINE, (n + 1) * sizeof(*gpu->lease_cache));
	if (gpu->lease_cache == NULL)
		return -ENOMEM;
	memset(gpu->lease_cache, 0, (n + 1) * sizeof(*gpu->lease_cache));
	gpu->nlease_cache = n;
	pthread_mutex_init(&gpu->lease_lock, NULL);
	gpu->lease_chunks = NULL;
	memset(&gpu->lease_free, 0, sizeof(gpu->lease_free));
	return 0;
}

/*
 * Chunks of layers destroyed, for later layers: lease handles are never freed, like the objects of
 * base/handle.h, so that a stale handle kept past its layer's destroy reads `held` false and is
 * refused (-EINVAL) rather than read after a free. Every handle of a chunk here is released.
 */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tdm__lease_chunk *spare_chunks; /* spare_lock */

/* A chunk for a layer's handles: a spare one, else a new one zeroed. NULL: no memory. */
static struct tdm__lease_chunk *chunk_get(void)
{
	pthread_mutex_lock(&spare_lock);
	struct tdm__lease_chunk *ch = spare_chunks;
	if (ch != NULL)
		spare_chunks = ch->next;
	pthread_mutex_unlock(&spare_lock);
	if (ch != NULL)
		return ch; /* its handles as their releases left them: not held */
	ch = aligned_alloc(TDM__CACHELINE, sizeof(*ch));
	if (ch != NULL)
		memset(ch, 0, sizeof(*ch));
	return ch;
}

void tdm__leases_fini(struct tdm__gpu *gpu)
{
	if (gpu->lease_cache == NULL)
		return; /* never initialised */
	while (gpu->lease_chunks != NULL) {
		struct tdm__lease_chunk *ch = gpu->lease_chunks;
		gpu->lease_chunks = ch->next;
		pthread_mutex_lock(&spare_lock);
		ch->next = spare_chunks;
		spare_chunks = ch;
		pthread_mutex_unlock(&spare_lock);
	}
	free(gpu->lease_cache);
	gpu->lease_cache = NULL;
	gpu->nlease_cache = 0;
	pthread_mutex_destroy(&gpu->lease_lock);
}

void tdm__task_who(uintptr_t task, char *out, size_t len)
{
	if (task == 0) {
		snprintf(out, len, "a thread outside any task");
		return;
	}
	char name[64];
	tdm__observe_fn_name((void (*)(void))task, name, sizeof(name));
	snprintf(out, len, "task %s", name);
}

unsigned tdm__leases_say(struct tdm__gpu *gpu, unsigned waited_s)
{
	unsigned n = 0;
	/* The chunks hold every handle ever made; none is made past the destroy's drain of the
	 * gate, and the lock orders this walk after the last one that was. */
	pthread_mutex_lock(&gpu->lease_lock);
	for (const struct tdm__lease_chunk *ch = gpu->lease_chunks; ch != NULL; ch = ch->next)
		for (unsigned i = 0; i < LEASE_BATCH; i++) {
			const struct tdm_stream *h = &ch->h[i];
			/* Acquire: pairs with the release store of held in tdm_stream_lease, which
			 * published st, exclusive and task; no lease rewrites them past the drain.
			 */
			if (!atomic_load_explicit(&h->held, memory_order_acquire))
				continue;
			const struct tdm__stream *st = h->st;
			char who[80];
			tdm__task_who(h->task, who, sizeof(who));
			tdm__say("tdm_gpu_destroy waits for a stream lease not released (%u s so "
			         "far): device %d, stream %s %u, %s, taken by %s",
			         waited_s, st->dev->index, st->sq.high ? "high" : "normal",
			         st->sq.index % st->dev->nstreams,
			         h->exclusive ? "exclusive" : "shared", who);
			n++;
		}
	pthread_mutex_unlock(&gpu->lease_lock);
	return n;
}

/* The calling thread's list when it is a worker of gpu's executor, else NULL. */
static struct tdm__lease_list *lease_cache(struct tdm__gpu *gpu, int wi)
{
	return wi >= 0 && (unsigned)wi < gpu->nlease_cache ? &gpu->lease_cache[wi].l : NULL;
}

/* A handle off the shared list (a new chunk's, when it is empty), and for a worker a batch more
 * onto its list c. NULL: no memory. */
static struct tdm_stream *handle_get_slow(struct tdm__gpu *gpu, struct tdm__lease_list *c)
{
	pthread_mutex_lock(&gpu->lease_lock);
	if (gpu->lease_free.head == NULL) {
		pthread_mutex_unlock(&gpu->lease_lock);
		struct tdm__lease_chunk *ch = chunk_get();
		if (ch == NULL)
			return NULL;
		pthread_mutex_lock(&gpu->lease_lock);
		ch->next = gpu->lease_chunks;
		gpu->lease_chunks = ch;
		for (unsigned i = 0; i < LEASE_BATCH; i++)
			list_push(&gpu->lease_free, &ch->h[i]);
	}
	struct tdm_stream *h = list_pop(&gpu->lease_free);
	if (c != NULL)
		list_move(&gpu->lease_free, c, LEASE_BATCH);
	pthread_mutex_unlock(&gpu->lease_lock);
	return h;
}

static struct tdm_stream *handle_get(struct tdm__gpu *gpu, int wi)
{
	struct tdm__lease_list *c = lease_cache(gpu, wi);
	struct tdm_stream *h = c != NULL ? list_pop(c) : NULL;
	return h != NULL ? h : handle_get_slow(gpu, c);
}

/* h back on the calling thread's list; a worker's list past two batches gives its oldest batch
 * to the shared list. */
static void handle_put(struct tdm__gpu *gpu, int wi, struct tdm_stream *h)
{
	struct tdm__lease_list *c = lease_cache(gpu, wi);
	if (c != NULL) {
		list_push(c, h);
		if (c->n < 2 * LEASE_BATCH)
			return;
	}
	pthread_mutex_lock(&gpu->lease_lock);
	if (c != NULL)
		list_move(c, &gpu->lease_free, LEASE_BATCH);
	else
		list_push(&gpu->lease_free, h);
	pthread_mutex_unlock(&gpu->lease_lock);
}

static int lease(struct tdm__gpu *gpu, int device, unsigned flags, int wi,
                 struct tdm__stream **out);

int tdm_stream_lease(tdm_gpu *handle, int device, unsigned flags, tdm_stream **out)
{
	if (out == NULL ||
	    (flags & ~(unsigned)(TDM_STREAM_EXCLUSIVE | TDM_STREAM_HIGH_PRIORITY)) != 0)
		return -EINVAL;
	/* Through the gate, before any other access to the layer: the handle's check is the
	 * gate's load (tdm__gpu_enter). A lease that entered before the destroy closed the handle
	 * is waited for, and what it took is then seen by destroy's scan of the leases; one refused
	 * touched only the layer's type-stable part. */
	_Atomic unsigned *n;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(handle, &n, &rc);
	if (gpu == NULL)
		return rc;
	int wi = tdm__worker_index(gpu->ex);
	struct tdm_stream *h = NULL;
	struct tdm__stream *st = NULL;
	if (gpu->ndev == 0)
		rc = -ENODEV;
	else if (device != TDM_DEVICE_ANY && (device < 0 || device >= gpu->ndev))
		rc = -EINVAL;
	else if ((h = handle_get(gpu, wi)) == NULL)
		rc = -ENOMEM;
	else if ((rc = lease(gpu, device, flags, wi, &st)) != 0)
		handle_put(gpu, wi, h);
	if (rc == 0) {
		h->st = st;
		h->dev = st->dev;
		h->bs = st->bs;
		h->exclusive = (flags & TDM_STREAM_EXCLUSIVE) != 0;
		h->stamp = NULL;
		h->task =
		    tdm__task_fn_now(); /* a load or two: who to name if it is never released */
		/* Release: pairs with the acquire in tdm__lease_held and the acq_rel exchange in
		 * tdm_stream_release, so that a check that finds h held reads this lease's fields,
		 * even one made by a stale handle's holder racing this reuse. */
		atomic_store_explicit(&h->held, true, memory_order_release);
		*out = h;
	}
	tdm__gate_leave(n);
	return rc;
}

static int lease_on(struct tdm__gpu *gpu, int device, unsigned flags, int wi,
                    struct tdm__stream **out);

/* TDM_DEVICE_ANY: the placement's device first; when it has no stream to give (-EBUSY) or failed
 * since (-ENODEV), the other live devices in turn, so that the lease says -EBUSY only when no
 * device could take it, and -ENODEV only when every device failed. */
static int lease(struct tdm__gpu *gpu, int device, unsigned flags, int wi, struct tdm__stream **out)
{
	if (device != TDM_DEVICE_ANY)
		return lease_on(gpu, device, flags, wi, out);
	int first = place(gpu);
	bool busy = false;
	for (int k = 0; k < gpu->ndev; k++) {
		int i = (first + k) % gpu->ndev;
		if (k > 0 && device_failed(&gpu->devs[i]))
			continue;
		int rc = lease_on(gpu, i, flags, wi, out);
		if (rc == -EBUSY)
			busy = true;
		else if (rc != -ENODEV)
			return rc; /* the lease, or an error making a stream */
	}
	return busy ? -EBUSY : -ENODEV;
}

/* Whether d died without the layer knowing yet (a trap, with no await or launch since): the
 * backend's own flag where it has one (sim), read on every lease; else (cuda) a query of s,
 * the stream just leased (-EIO: a sticky error), at most once per TDM__CHECK_NS per device,
 * by the lease that moves the check's time on. Found dead, d is failed for the layer. */
static bool found_dead(struct tdm__gpu *gpu, struct tdm__gdev *d, struct tdm__stream *s)
{
	const struct tdm__backend_ops *ops = gpu->ops;
	bool dead;
	if (ops->device_dead != NULL) {
		dead = ops->device_dead(gpu->b, d->index);
	} else {
		if (s == NULL)
			return false;
		uint64_t now = tdm__now_ns();
		/* Relaxed, load and CAS: the time only picks which lease queries. */
		uint64_t next = atomic_load_explicit(&d->check_ns, memory_order_relaxed);
		if (now < next || !atomic_compare_exchange_strong_explicit(
		                      &d->check_ns, &next, now + TDM__CHECK_NS,
		                      memory_order_relaxed, memory_order_relaxed))
			return false;
		dead = ops->stream_query(gpu->b, s->bs) == -EIO;
	}
	if (dead)
		tdm__device_fail(d);
	return dead;
}

/* A lease lease_on took, given back: d was found dead behind it. */
static void lease_undo(struct tdm__stream *s, unsigned flags)
{
	/* Release: as tdm_stream_release's decrement; nothing was done with it. */
	atomic_fetch_sub_explicit(&s->leases, (flags & TDM_STREAM_EXCLUSIVE) ? TDM__EXCLUSIVE : 1,
	                          memory_order_release);
}

static int lease_take(struct tdm__gpu *gpu, struct tdm__gdev *d, unsigned flags, int wi,
                      struct tdm__stream **out);

static int lease_on(struct tdm__gpu *gpu, int device, unsigned flags, int wi,
                    struct tdm__stream **out)
{
	struct tdm__gdev *d = &gpu->devs[device];
	if (device_failed(d) || found_dead(gpu, d, NULL))
		return -ENODEV;
	int rc = lease_take(gpu, d, flags, wi, out);
	if (rc == 0 && gpu->ops->device_dead == NULL && found_dead(gpu, d, *out)) {
		lease_undo(*out, flags);
		return -ENODEV;
	}
	/* A stream the dead device could not make: the device's death, not the stream's. */
	if (rc == -EIO && found_dead(gpu, d, NULL))
		return -ENODEV;
	return rc;
}

/* A stream of d leased, in *out: 0, -EBUSY (none to give), or an error making one. */
static int lease_take(struct tdm__gpu *gpu, struct tdm__gdev *d, unsigned flags, int wi,
                      struct tdm__stream **out)
{
	(void)gpu;
	int c = (flags & TDM_STREAM_HIGH_PRIORITY) ? 1 : 0;
	unsigned first =
	    wi >= 0 ? (unsigned)wi : atomic_fetch_add_explicit(&d->rr, 1, memory_order_relaxed);
	if (!(flags & TDM_STREAM_EXCLUSIVE) && d->nstreams > 1)
		first = two_choices(d, c, first % d->nstreams);
	for (unsigned i = 0; i < d->nstreams; i++) {
		struct tdm__stream *s;
		int rc = stream_at(d, c, (first + i) % d->nstreams, &s);
		if (rc != 0)
			return rc;
		if (flags & TDM_STREAM_EXCLUSIVE) {
			int none = 0;
			/* Acquire: pairs with the release decrements in tdm_stream_release; the
			 * earlier holders' use of the stream happens before this lease. */
			if (atomic_compare_exchange_strong_explicit(
			        &s->leases, &none, TDM__EXCLUSIVE, memory_order_acquire,
			        memory_order_relaxed)) {
				*out = s;
				return 0;
			}
			continue;
		}
		/* Shared: take it unless someone holds it exclusively. Acquire: pairs with the
		 * release in tdm_stream_release of an exclusive holder that let it go. */
		int prev = atomic_fetch_add_explicit(&s->leases, 1, memory_order_acquire);
		if (prev < TDM__EXCLUSIVE) {
			*out = s;
			return 0;
		}
		atomic_fetch_sub_explicit(&s->leases, 1, memory_order_relaxed);
	}
	return -EBUSY;
}

int tdm_stream_release(tdm_stream *s)
{
	if (s == NULL)
		return -EINVAL;
	/* A capture (graph.c) by this holder: its root ends and discards it; a stream that only
	 * joined one stays until its root ends it. Read before the exchange: the holder's own. */
	if (tdm__lease_held(s) && s->cap != NULL) {
		int rc = tdm__capture_release(s);
		if (rc != 0)
			return rc;
	}
	/* Acq_rel: the exchange lets one release of two through; its acquire pairs with the
	 * release store in tdm_stream_lease, so that the one let through reads that lease's st and
	 * exclusive, and its release orders the holder's use before the handle's reuse. */
	if (!atomic_exchange_explicit(&s->held, false, memory_order_acq_rel))
		return -EINVAL;
	struct tdm__stream *st = s->st;
	struct tdm__gpu *gpu = st->dev->gpu;
	int n = s->exclusive ? TDM__EXCLUSIVE : 1;
	/* The handle goes back before the count drops: tdm_gpu_destroy frees the lists once every
	 * count is 0. */
	handle_put(gpu, tdm__worker_index(gpu->ex), s);
	/* Release: the holder's use of the stream (and the handle's return) happens before the
	 * next exclusive lease and before tdm_gpu_destroy's acquire scan of the counts. */
	atomic_fetch_sub_explicit(&st->leases, n, memory_order_release);
	return 0;
}

void *tdm_stream_native(const tdm_stream *s)
{
	if (s == NULL || !tdm__lease_held(s) || s->dev->gpu->ops->stream_native == NULL)
		return NULL;
	return s->dev->gpu->ops->stream_native(s->dev->gpu->b, s->bs);
}

int tdm_stream_device(const tdm_stream *s)
{
	return s != NULL && tdm__lease_held(s) ? s->dev->index : -EINVAL;
}

static void gate_enter(struct tdm_stream *s)
{
	struct tdm__gdev *d = s->dev;
	unsigned limit = d->launch_limit;
	for (unsigned spins = 0;; spins++) {
		int cur = atomic_load_explicit(&d->launching, memory_order_relaxed);
		/* Acquire: pairs with the release decrement in gate_leave (a semaphore). Only
		 * the count matters: the driver orders its own state. */
		if ((unsigned)cur < limit &&
		    atomic_compare_exchange_weak_explicit(
		        &d->launching, &cur, cur + 1, memory_order_acquire, memory_order_relaxed))
			return;
		/* A launch takes microseconds: spin a little, then give the CPU to the launchers
		 * and the poller rather than burn it (more threads than cores otherwise). */
		if (spins < 64)
			tdm__cpu_relax();
		else
			sched_yield();
	}
}

static void gate_leave(struct tdm_stream *s)
{
	/* Release: pairs with the acquire CAS in gate_enter. */
	atomic_fetch_sub_explicit(&s->dev->launching, 1, memory_order_release);
}

/*
 * The calling thread's open launch brackets (tdm_launch_begin/end, and tandem's own enqueues
 * inside them). The gate bounds threads, not brackets: only the outermost takes a slot of its
 * device's gate (and stamps), so that a thread never waits for a slot it holds itself, which
 * hung the 17th nested begin of a device whose launch_limit is 16. Thread-local: begin and end
 * on one thread, with no await between (tandem_gpu.h).
 */
static _Thread_local struct {
	unsigned depth;
	struct tdm_stream *outer; /* the outermost bracket's stream: its gate slot, its stamp */
} nest;

static void bracket_open(struct tdm_stream *s, int kind, uint64_t bytes)
{
	if (nest.depth++ > 0)
		return;
	nest.outer = s;
	gate_enter(s);
	if (tdm__observing())
		tdm__stamp_begin(s, (enum tdm__span_kind)kind, bytes);
}

static void bracket_close(void)
{
	if (--nest.depth > 0)
		return;
	struct tdm_stream *s = nest.outer;
	if (s->stamp != NULL) /* its own: also when observing stopped since the begin */
		tdm__stamp_end(s);
	gate_leave(s);
}

void tdm__launch_begin(struct tdm_stream *s, int kind, uint64_t bytes)
{
	bracket_open(s, kind, bytes); /* inside a user's bracket at its deepest too: one more */
}

void tdm__launch_end(struct tdm_stream *s)
{
	(void)s;
	bracket_close();
}

/* Bounds the launching threads; while stamps are on, brackets the user's launch with them
 * (a "kernel" span: tandem cannot see what the user enqueues). */
int tdm_launch_begin(tdm_stream *s)
{
	if (s == NULL || !tdm__lease_held(s))
		return -EINVAL;
	if (nest.depth >= TDM_LAUNCH_NEST_MAX)
		return -EBUSY;
	bracket_open(s, TDM__SPAN_KERNEL, 0);
	return 0;
}

int tdm_launch_end(tdm_stream *s)
{
	if (s == NULL || nest.depth == 0)
		return -EINVAL;
	bracket_close();
	return 0;
}
