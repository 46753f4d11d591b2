// SPDX-License-Identifier: MIT
/*
 * Graphs: capture on a leased stream, instantiate, update, replay (tandem_graph.h), and
 * tdm_graph_run's cache. Why, and the costs: docs/design/graphs.md.
 *
 * Captures: a capture belongs to the exclusive lease it began on (its root) and to the thread
 * that began it; streams join it through an event edge (tdm_stream_wait_event on an event
 * recorded in it). Its state lives in the lease handles (tdm_stream.cap), touched by that
 * thread only, so work and awaits check it with one load of a line they read anyway. A call the
 * capture refuses marks it abandoned (tdm__capture_refuse); its end then discards it.
 *
 * Graph handles: objects of the graphs' handle table (base/handle.h), never freed, so that a
 * destroyed graph, or one of a destroyed layer, is refused (-EINVAL) by its word rather than read
 * after a free; free ones are reused oldest first. Each has a lock, taken by its launches,
 * updates and destroy: the driver's graph objects are not thread-safe, and a launch racing a
 * destroy must find the graph dead, not freed. Its word changes only under that lock. A layer
 * keeps its live graphs on a list (graph_lock), and its destroy destroys those left.
 *
 * The cache: (key, stream) -> entry, in a ConcurrencyKit hash table under one lock, with a list
 * in order of use for eviction. An entry counts the direct runs of its key until it is captured.
 * An entry in use by a run (busy) is never evicted nor freed: the run launches or captures its
 * graph without the cache's lock held, and only one run uses an entry at a time (its stream is
 * held exclusively).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <ck_ht.h>

#include "gpu_internal.h"
#include "stamps.h"
#include "tandem_graph.h"

struct tdm__graph {
	struct tdm__hobj hobj; /* its word: the handle while live (changed under lock) */
	pthread_mutex_t lock;  /* dev, src, exec, the word's changes */
	struct tdm__gpu *gpu;
	struct tdm__gdev *dev;          /* the device its capture ran on */
	void *src, *exec;               /* the source graph (kept for updates) and the executable */
	struct tdm__graph *next, *prev; /* the layer's live graphs (graph_lock) */
	bool linked;
};

/* 64 graphs a chunk, a million at once. */
#define GRAPH_TAG 0x1du
#define GRAPH_SHIFT 6
#define GRAPH_CHUNKS 16384
static char *_Atomic graph_chunks[GRAPH_CHUNKS];
static struct tdm__htable graph_handles = TDM__HTABLE_INIT(
    "graph", GRAPH_TAG, GRAPH_SHIFT, GRAPH_CHUNKS, struct tdm__graph, graph_chunks);

/* The graph handle h names if it is live now (one load of its word), else NULL. Acquire: pairs
 * with the publication of the word in graph_new; its mutex is initialised. A caller locks it and
 * checks again (graph_live): a destroy may come in between. */
static struct tdm__graph *graph_of(const tdm_graph *h)
{
	return tdm__h_live(graph_chunks, GRAPH_TAG, GRAPH_SHIFT, GRAPH_CHUNKS,
	                   sizeof(struct tdm__graph), h);
}
_Static_assert(offsetof(struct tdm__graph, hobj) == 0, "tdm__h_live reads the word first");

/* Under g->lock: whether g is still h's. Relaxed: the word changes only under that lock. */
static bool graph_live(struct tdm__graph *g, const tdm_graph *h)
{
	return atomic_load_explicit(&g->hobj.h, memory_order_relaxed) == (uint64_t)(uintptr_t)h;
}

struct gkey {
	uint64_t key;
	const struct tdm__stream *st;
};

struct gentry {
	struct gkey k; /* the hash table's key bytes point here */
	unsigned runs; /* direct runs so far */
	bool busy;     /* a run uses it now */
	bool doomed;   /* forgotten or evicted while busy: the run frees it */
	struct tdm_graph *g;
	struct gentry *prev, *next; /* by use, most recent first */
};

struct tdm__graphs {
	pthread_mutex_t graph_lock; /* handles and open captures */
	struct tdm__graph *live;    /* the layer's live graphs */
	struct tdm__capture *open;

	pthread_mutex_t cache_lock; /* everything below */
	ck_ht_t ht;
	struct gentry *mru, *lru;
	unsigned n, cap;
	int capture_after;

	_Atomic uint64_t n_direct, n_inst, n_update, n_replay, n_evict, n_abandon;
};

/* ---- captures -------------------------------------------------------------------------- */

int tdm__capture_refuse(struct tdm_stream *s)
{
	struct tdm__capture *c = s->cap;
	if (c != NULL) /* relaxed: read by the capture's end, on its own thread (struct note) */
		atomic_store_explicit(&c->abandoned, true, memory_order_relaxed);
	return -EBUSY;
}

void tdm__capture_note_record(struct tdm__event *e, struct tdm_stream *s)
{
	struct tdm__capture *c = s->cap;
	if (c == NULL) {
		e->cap_root = NULL;
		return;
	}
	e->cap_root = c->root;
	e->cap_gen = c->root->cap_gen;
}

struct tdm__capture *tdm__capture_of_event(const struct tdm__event *e)
{
	const struct tdm_stream *r = e->cap_root;
	if (r == NULL)
		return NULL;
	struct tdm__capture *c = r->cap;
	return c == &r->capture && r->cap_gen == e->cap_gen ? c : NULL;
}

int tdm__capture_join(struct tdm_stream *s, struct tdm__capture *c)
{
	if (s->cap == c)
		return 0;
	if (s->cap != NULL || !s->exclusive || !pthread_equal(c->thread, pthread_self()))
		return -EINVAL;
	if (c->njoined == c->capjoined) {
		unsigned n = c->capjoined ? 2 * c->capjoined : 4;
		struct tdm_stream **j = realloc(c->joined, n * sizeof(*j));
		if (j == NULL)
			return -ENOMEM;
		c->joined = j;
		c->capjoined = n;
	}
	c->joined[c->njoined++] = s;
	s->cap = c;
	return 0;
}

static void unlink_open(struct tdm__graphs *gs, struct tdm__capture *c)
{
	pthread_mutex_lock(&gs->graph_lock);
	for (struct tdm__capture **p = &gs->open; *p != NULL; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&gs->graph_lock);
}

/* Ends c in the backend and forgets it: *src its source graph (NULL unless the backend gave
 * one); the backend's result, where -EINVAL (it had no capture to end) reads -ECANCELED. The
 * callers check the thread first: from another one the backend cannot end it (the sim keeps
 * it until its streams go, CUDA terminates it), and tandem's state is cleared all the same. */
static int capture_finish(struct tdm__gpu *gpu, struct tdm__capture *c, void **src)
{
	struct tdm_stream *root = c->root;
	*src = NULL;
	int rc = gpu->ops->capture_end(gpu->b, root->bs, src);
	if (rc == -EINVAL)
		rc = -ECANCELED;
	for (unsigned i = 0; i < c->njoined; i++)
		c->joined[i]->cap = NULL;
	root->cap = NULL;
	root->cap_gen++; /* events recorded in it no longer join anything */
	unlink_open(gpu->graphs, c);
	if (atomic_load_explicit(&c->abandoned, memory_order_relaxed) || rc != 0)
		atomic_fetch_add_explicit(&gpu->graphs->n_abandon, 1, memory_order_relaxed);
	free(c->joined);
	c->joined = NULL;
	c->njoined = c->capjoined = 0;
	return rc;
}

int tdm__capture_release(struct tdm_stream *s)
{
	struct tdm__capture *c = s->cap;
	if (c == NULL)
		return 0;
	if (c->root != s || !pthread_equal(c->thread, pthread_self()))
		return -EBUSY;
	struct tdm__gpu *gpu = s->dev->gpu;
	void *src;
	atomic_store_explicit(&c->abandoned, true, memory_order_relaxed);
	capture_finish(gpu, c, &src);
	if (src != NULL)
		gpu->ops->graph_free(gpu->b, src);
	return 0;
}

int tdm_graph_capture_begin(tdm_stream *s)
{
	if (s == NULL || !tdm__lease_held(s) || !s->exclusive)
		return -EINVAL;
	if (s->cap != NULL)
		return -EBUSY;
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	struct tdm__gpu *gpu = s->dev->gpu;
	if (gpu->ops->capture_begin == NULL)
		return -ENOTSUP;
	int rc = gpu->ops->capture_begin(gpu->b, s->bs);
	if (rc != 0)
		return tdm__enqueued(s, rc);
	/* Only now, once the backend chose this call (of two racing on one lease, a misuse, the
	 * other is -EBUSY there). */
	struct tdm__capture *c = &s->capture;
	c->root = s;
	c->thread = pthread_self();
	atomic_store_explicit(&c->abandoned, false, memory_order_relaxed);
	s->cap_gen++;
	s->cap = c;
	pthread_mutex_lock(&gpu->graphs->graph_lock);
	c->next = gpu->graphs->open;
	gpu->graphs->open = c;
	pthread_mutex_unlock(&gpu->graphs->graph_lock);
	return 0;
}

/* ---- graph handles --------------------------------------------------------------------- */

/* A new graph handle for d from src: TDM_GRAPH_INSTANTIATED, or a negative errno (src freed). */
static int graph_new(struct tdm__gpu *gpu, struct tdm__gdev *d, void *src, tdm_graph **out)
{
	void *exec;
	int rc = gpu->ops->graph_instantiate(gpu->b, src, &exec);
	if (rc != 0) {
		gpu->ops->graph_free(gpu->b, src);
		return rc;
	}
	uint64_t h;
	struct tdm__graph *g = tdm__h_take(&graph_handles, &h);
	if (g == NULL) {
		gpu->ops->graph_exec_free(gpu->b, exec);
		gpu->ops->graph_free(gpu->b, src);
		return -ENOMEM;
	}
	/* Relaxed: a word of 0 is an object never used, whose lock is made here once. */
	if (atomic_load_explicit(&g->hobj.h, memory_order_relaxed) == 0)
		pthread_mutex_init(&g->lock, NULL);
	struct tdm__graphs *gs = gpu->graphs;
	pthread_mutex_lock(&g->lock);
	g->gpu = gpu;
	g->dev = d;
	g->src = src;
	g->exec = exec;
	pthread_mutex_lock(&gs->graph_lock);
	g->prev = NULL;
	g->next = gs->live;
	if (g->next != NULL)
		g->next->prev = g;
	gs->live = g;
	g->linked = true;
	pthread_mutex_unlock(&gs->graph_lock);
	tdm__h_publish(&g->hobj, h);
	pthread_mutex_unlock(&g->lock);
	atomic_fetch_add_explicit(&gs->n_inst, 1, memory_order_relaxed);
	*out = (tdm_graph *)(uintptr_t)h;
	return TDM_GRAPH_INSTANTIATED;
}

/* Under g->lock, g live: frees its graphs and marks it dead; the caller gives it back to the
 * table (graph_put) once the lock is dropped. Release: the frees happen before a check that
 * reads the word dead. */
static void graph_kill(struct tdm__graph *g)
{
	g->gpu->ops->graph_exec_free(g->gpu->b, g->exec);
	g->gpu->ops->graph_free(g->gpu->b, g->src);
	g->exec = g->src = NULL;
	uint64_t w = atomic_load_explicit(&g->hobj.h, memory_order_relaxed);
	atomic_store_explicit(&g->hobj.h, w | TDM__H_DEAD, memory_order_release);
}

/* g's work becomes src's: in place where the topology allows, else a new executable graph.
 * src is taken in every case. */
static int graph_replace(struct tdm__gpu *gpu, struct tdm__gdev *d, const tdm_graph *h, void *src)
{
	const struct tdm__backend_ops *ops = gpu->ops;
	struct tdm__graph *g = graph_of(h);
	if (g == NULL) {
		ops->graph_free(gpu->b, src);
		return -EINVAL;
	}
	pthread_mutex_lock(&g->lock);
	if (!graph_live(g, h) || g->gpu != gpu || g->dev != d) {
		pthread_mutex_unlock(&g->lock);
		ops->graph_free(gpu->b, src);
		return -EINVAL;
	}
	int rc = ops->graph_update(gpu->b, g->exec, src);
	if (rc == 0) {
		atomic_fetch_add_explicit(&gpu->graphs->n_update, 1, memory_order_relaxed);
		rc = TDM_GRAPH_UPDATED;
	} else if (rc == -ESTALE) {
		void *exec;
		rc = ops->graph_instantiate(gpu->b, src, &exec);
		if (rc == 0) {
			ops->graph_exec_free(gpu->b, g->exec);
			g->exec = exec;
			atomic_fetch_add_explicit(&gpu->graphs->n_inst, 1, memory_order_relaxed);
			rc = TDM_GRAPH_INSTANTIATED;
		}
	}
	if (rc > 0) {
		ops->graph_free(gpu->b, g->src); /* kept until now: the source of later updates */
		g->src = src;
	} else {
		ops->graph_free(gpu->b, src);
	}
	pthread_mutex_unlock(&g->lock);
	return rc;
}

int tdm_graph_capture_end(tdm_stream *s, tdm_graph **g)
{
	if (s == NULL || !tdm__lease_held(s))
		return -EINVAL;
	struct tdm__capture *c = s->cap; /* once: another thread's misuse may race the end */
	if (c == NULL || c->root != s || !pthread_equal(c->thread, pthread_self()))
		return -EINVAL;
	struct tdm__gpu *gpu = s->dev->gpu;
	bool abandoned = atomic_load_explicit(&c->abandoned, memory_order_relaxed);
	void *src;
	int rc = capture_finish(gpu, c, &src);
	if (g == NULL) /* nowhere to put it: the capture ends all the same, discarded */
		rc = -EINVAL;
	if (rc == 0 && abandoned)
		rc = -ECANCELED;
	if (rc == 0 && atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		rc = -EIO;
	if (rc != 0) {
		if (src != NULL)
			gpu->ops->graph_free(gpu->b, src);
		return rc == -EIO ? tdm__enqueued(s, rc) : rc;
	}
	if (*g == NULL)
		return graph_new(gpu, s->dev, src, g);
	return graph_replace(gpu, s->dev, *g, src);
}

int tdm_graph_launch(tdm_stream *s, tdm_graph *h)
{
	struct tdm__graph *g = graph_of(h); /* its word: one load */
	if (s == NULL || g == NULL || !tdm__lease_held(s) || g->gpu != s->dev->gpu)
		return -EINVAL;
	if (s->cap != NULL)
		return tdm__capture_refuse(s);
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	struct tdm__gpu *gpu = s->dev->gpu;
	pthread_mutex_lock(&g->lock);
	int rc = -EINVAL;
	if (graph_live(g, h) && g->dev == s->dev) {
		tdm__launch_begin(s, TDM__SPAN_GRAPH, 0);
		rc = gpu->ops->graph_launch(gpu->b, g->exec, s->bs);
		tdm__launch_end(s);
	}
	pthread_mutex_unlock(&g->lock);
	return tdm__enqueued(s, rc);
}

int tdm_graph_destroy(tdm_graph *h)
{
	struct tdm__graph *g = graph_of(h);
	if (g == NULL)
		return -EINVAL; /* NULL, destroyed (by a call or with its layer), or not a graph */
	pthread_mutex_lock(&g->lock);
	if (!graph_live(g, h)) {
		pthread_mutex_unlock(&g->lock);
		return -EINVAL;
	}
	/* Killed first, then off the layer's list, g's lock held throughout: the layer's destroy
	 * either finds g on the list and waits for this lock, or returns after the kill, never
	 * before it (the kill reads the layer's backend). */
	graph_kill(g);
	struct tdm__graphs *gs = g->gpu->graphs;
	pthread_mutex_lock(&gs->graph_lock);
	if (g->linked) {
		if (g->prev != NULL)
			g->prev->next = g->next;
		else
			gs->live = g->next;
		if (g->next != NULL)
			g->next->prev = g->prev;
		g->linked = false;
	}
	pthread_mutex_unlock(&gs->graph_lock);
	pthread_mutex_unlock(&g->lock);
	tdm__h_put(&graph_handles, &g->hobj);
	return 0;
}

/* ---- the cache ------------------------------------------------------------------------- */

static void *ht_malloc(size_t n)
{
	return malloc(n);
}

static void *ht_realloc(void *p, size_t old, size_t n, bool defer)
{
	(void)old;
	(void)defer;
	return realloc(p, n);
}

static void ht_free(void *p, size_t n, bool defer)
{
	(void)n;
	(void)defer;
	free(p);
}

static struct ck_malloc ht_allocator = {
    .malloc = ht_malloc,
    .realloc = ht_realloc,
    .free = ht_free,
};

static struct gentry *cache_find(struct tdm__graphs *gs, const struct gkey *k)
{
	ck_ht_hash_t h;
	ck_ht_entry_t ent;
	ck_ht_hash(&h, &gs->ht, k, sizeof(*k));
	ck_ht_entry_key_set(&ent, k, sizeof(*k));
	return ck_ht_get_spmc(&gs->ht, h, &ent) ? ck_ht_entry_value(&ent) : NULL;
}

static void lru_unlink(struct tdm__graphs *gs, struct gentry *e)
{
	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		gs->mru = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		gs->lru = e->prev;
	e->prev = e->next = NULL;
}

static void lru_front(struct tdm__graphs *gs, struct gentry *e)
{
	e->next = gs->mru;
	e->prev = NULL;
	if (gs->mru != NULL)
		gs->mru->prev = e;
	gs->mru = e;
	if (gs->lru == NULL)
		gs->lru = e;
}

/* Takes e out of the table and the list (cache_lock); the caller frees it, unless busy. */
static void cache_unlink(struct tdm__graphs *gs, struct gentry *e)
{
	ck_ht_hash_t h;
	ck_ht_entry_t ent;
	ck_ht_hash(&h, &gs->ht, &e->k, sizeof(e->k));
	ck_ht_entry_key_set(&ent, &e->k, sizeof(e->k));
	ck_ht_remove_spmc(&gs->ht, h, &ent);
	lru_unlink(gs, e);
	gs->n--;
}

static void entry_free(struct gentry *e)
{
	if (e->g != NULL)
		tdm_graph_destroy(e->g);
	free(e);
}

/* The entry of k, made (and room made by evicting the least recently used idle entry) when there
 * is none; marked busy. NULL: no memory, or every entry is busy (then *full). Under cache_lock;
 * *victim: an evicted entry for the caller to free once the lock is dropped. */
static struct gentry *cache_take(struct tdm__graphs *gs, const struct gkey *k,
                                 struct gentry **victim, bool *full)
{
	*victim = NULL;
	*full = false;
	struct gentry *e = cache_find(gs, k);
	if (e != NULL && e->busy) {
		*full = true; /* a run of this key on this stream is under way (a step running
		                 itself) */
		return NULL;
	}
	if (e != NULL) {
		lru_unlink(gs, e);
		lru_front(gs, e);
		e->busy = true;
		return e;
	}
	if (gs->n >= gs->cap) {
		struct gentry *v = gs->lru;
		while (v != NULL && v->busy)
			v = v->prev;
		if (v == NULL) {
			*full = true;
			return NULL;
		}
		cache_unlink(gs, v);
		atomic_fetch_add_explicit(&gs->n_evict, 1, memory_order_relaxed);
		*victim = v;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	e->k = *k;
	ck_ht_hash_t h;
	ck_ht_entry_t ent;
	ck_ht_hash(&h, &gs->ht, &e->k, sizeof(e->k));
	ck_ht_entry_set(&ent, h, &e->k, sizeof(e->k), e);
	if (!ck_ht_put_spmc(&gs->ht, h, &ent)) {
		free(e);
		return NULL;
	}
	lru_front(gs, e);
	gs->n++;
	e->busy = true;
	return e;
}

/* The run is done with e: free it if it was dropped meanwhile. */
static void cache_give(struct tdm__graphs *gs, struct gentry *e)
{
	pthread_mutex_lock(&gs->cache_lock);
	e->busy = false;
	bool doomed = e->doomed;
	pthread_mutex_unlock(&gs->cache_lock);
	if (doomed)
		entry_free(e);
}

/* Captures step on s into e's graph (new, updated or re-instantiated) and launches it. */
static int capture_step(tdm_stream *s, struct gentry *e, tdm_graph_step step, void *arg)
{
	int rc = tdm_graph_capture_begin(s);
	if (rc != 0)
		return rc;
	int src = step(s, arg);
	if (src < 0 && s->cap != NULL)
		tdm__capture_refuse(s); /* a failed step's work is not instantiated, nor kept */
	struct tdm_graph *g = e->g;
	rc = tdm_graph_capture_end(s, &g);
	if (src < 0)
		rc = src; /* the step's own error first; its capture was discarded or kept aside */
	if (rc < 0) {
		if (src < 0 && g != NULL && g != e->g)
			tdm_graph_destroy(g);
		return rc;
	}
	e->g = g;
	int lrc = tdm_graph_launch(s, g);
	return lrc < 0 ? lrc : rc;
}

int tdm_graph_run(tdm_stream *s, uint64_t key, tdm_graph_step step, void *arg, unsigned flags)
{
	if (s == NULL || step == NULL || !tdm__lease_held(s) || !s->exclusive ||
	    (flags & ~(unsigned)TDM_GRAPH_RECAPTURE) != 0)
		return -EINVAL;
	if (s->cap != NULL)
		return tdm__capture_refuse(s);
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	struct tdm__gpu *gpu = s->dev->gpu;
	struct tdm__graphs *gs = gpu->graphs;
	if (gpu->ops->capture_begin == NULL) {
		int rc =
		    step(s, arg); /* a backend without graphs: as a cache that never captures */
		if (rc < 0)
			return rc;
		atomic_fetch_add_explicit(&gs->n_direct, 1, memory_order_relaxed);
		return TDM_GRAPH_DIRECT;
	}
	struct gkey k = {.key = key, .st = s->st};
	struct gentry *victim;
	bool full;
	pthread_mutex_lock(&gs->cache_lock);
	struct gentry *e = cache_take(gs, &k, &victim, &full);
	pthread_mutex_unlock(&gs->cache_lock);
	if (victim != NULL)
		entry_free(victim);
	if (e == NULL && full) {
		/* More runs at once than the cache has entries: this one runs as it is. */
		int rc = step(s, arg);
		if (rc < 0)
			return rc;
		atomic_fetch_add_explicit(&gs->n_direct, 1, memory_order_relaxed);
		return TDM_GRAPH_DIRECT;
	}
	if (e == NULL)
		return -ENOMEM;
	int rc;
	if (e->g != NULL && !(flags & TDM_GRAPH_RECAPTURE)) {
		rc = tdm_graph_launch(s, e->g);
		if (rc == 0) {
			atomic_fetch_add_explicit(&gs->n_replay, 1, memory_order_relaxed);
			rc = TDM_GRAPH_REPLAYED;
		}
	} else if (e->g == NULL && (int)e->runs < gs->capture_after) {
		rc = step(s, arg);
		if (rc >= 0) {
			e->runs++;
			atomic_fetch_add_explicit(&gs->n_direct, 1, memory_order_relaxed);
			rc = TDM_GRAPH_DIRECT;
		}
	} else {
		rc = capture_step(s, e, step, arg);
		if (rc < 0 && e->g == NULL)
			e->runs = 0; /* nothing cached: the key starts over */
	}
	cache_give(gs, e);
	return rc;
}

int tdm_graph_forget(tdm_gpu *h, uint64_t key)
{
	/* Through the layer's gate: destroy frees the cache after its drain. */
	_Atomic unsigned *gate;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(h, &gate, &rc);
	if (gpu == NULL)
		return rc;
	struct tdm__graphs *gs = gpu->graphs;
	struct gentry *drop = NULL;
	bool found = false;
	pthread_mutex_lock(&gs->cache_lock);
	for (struct gentry *e = gs->mru, *next; e != NULL; e = next) {
		next = e->next;
		if (e->k.key != key)
			continue;
		cache_unlink(gs, e);
		found = true;
		if (e->busy) {
			e->doomed = true;
		} else {
			e->next = drop;
			drop = e;
		}
	}
	pthread_mutex_unlock(&gs->cache_lock);
	while (drop != NULL) {
		struct gentry *e = drop;
		drop = e->next;
		entry_free(e);
	}
	tdm__gate_leave(gate);
	return found ? 0 : -ENOENT;
}

int tdm_graph_stats_get(tdm_gpu *h, tdm_graph_stats *out)
{
	_Atomic unsigned *gate;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(h, &gate, &rc);
	if (gpu == NULL)
		return rc;
	if (out == NULL) {
		tdm__gate_leave(gate);
		return -EINVAL;
	}
	struct tdm__graphs *gs = gpu->graphs;
	*out = (tdm_graph_stats){
	    .direct = atomic_load_explicit(&gs->n_direct, memory_order_relaxed),
	    .instantiated = atomic_load_explicit(&gs->n_inst, memory_order_relaxed),
	    .updated = atomic_load_explicit(&gs->n_update, memory_order_relaxed),
	    .replayed = atomic_load_explicit(&gs->n_replay, memory_order_relaxed),
	    .evicted = atomic_load_explicit(&gs->n_evict, memory_order_relaxed),
	    .abandoned = atomic_load_explicit(&gs->n_abandon, memory_order_relaxed),
	};
	pthread_mutex_lock(&gs->cache_lock);
	out->cached = gs->n;
	pthread_mutex_unlock(&gs->cache_lock);
	tdm__gate_leave(gate);
	return 0;
}

/* ---- the layer's life ------------------------------------------------------------------ */

int tdm__graphs_init(struct tdm__gpu *gpu)
{
	struct tdm__graphs *gs = calloc(1, sizeof(*gs));
	if (gs == NULL)
		return -ENOMEM;
	gs->cap = gpu->cfg.graph_cache ? gpu->cfg.graph_cache : 256;
	gs->capture_after = gpu->cfg.graph_capture_after == TDM_GRAPH_CAPTURE_FIRST ? 0
	                    : gpu->cfg.graph_capture_after ? gpu->cfg.graph_capture_after
	                                                   : 2;
	if (!ck_ht_init(&gs->ht, CK_HT_MODE_BYTESTRING, NULL, &ht_allocator, 64, 0x7a6d)) {
		free(gs);
		return -ENOMEM;
	}
	pthread_mutex_init(&gs->graph_lock, NULL);
	pthread_mutex_init(&gs->cache_lock, NULL);
	gpu->graphs = gs;
	return 0;
}

void tdm__graphs_fini(struct tdm__gpu *gpu)
{
	struct tdm__graphs *gs = gpu->graphs;
	if (gs == NULL)
		return;
	/* Captures left open: ended and discarded where this thread may (the backend discards the
	 * others with their streams). */
	while (gs->open != NULL) {
		struct tdm__capture *c = gs->open;
		void *src;
		atomic_store_explicit(&c->abandoned, true, memory_order_relaxed);
		capture_finish(gpu, c, &src);
		if (src != NULL)
			gpu->ops->graph_free(gpu->b, src);
	}
	while (gs->mru != NULL) {
		struct gentry *e = gs->mru;
		cache_unlink(gs, e);
		entry_free(e);
	}
	ck_ht_destroy(&gs->ht);
	/* The graphs left: destroyed here (tandem_graph.h), their handles refused from now. One
	 * destroyed by its own call meanwhile is off the list already, or dead once its lock is
	 * had. */
	for (;;) {
		pthread_mutex_lock(&gs->graph_lock);
		struct tdm__graph *g = gs->live;
		if (g != NULL) {
			gs->live = g->next;
			if (g->next != NULL)
				g->next->prev = NULL;
			g->linked = false;
		}
		pthread_mutex_unlock(&gs->graph_lock);
		if (g == NULL)
			break;
		pthread_mutex_lock(&g->lock);
		/* Relaxed: under the lock, as graph_live. */
		bool live =
		    (atomic_load_explicit(&g->hobj.h, memory_order_relaxed) & TDM__H_STATE) == 0;
		if (live)
			graph_kill(g);
		pthread_mutex_unlock(&g->lock);
		if (live)
			tdm__h_put(&graph_handles, &g->hobj);
	}
	pthread_mutex_destroy(&gs->graph_lock);
	pthread_mutex_destroy(&gs->cache_lock);
	free(gs);
	gpu->graphs = NULL;
}
