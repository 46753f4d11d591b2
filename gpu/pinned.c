// SPDX-License-Identifier: MIT
/*
 * The pinned host memory pool (tdm_pinned_alloc, _free, _stats_get, and tdm__pinned_owns for the
 * copy path).
 *
 * Pinning is slow (docs/design/memory.md has the figures), so the pool pins large chunks once and
 * hands out blocks carved from them:
 *
 * - Chunks: pinned_chunk_bytes each (default 64 MiB, rounded up to 64 KiB), pinned on demand as
 *   long as the total stays within pinned_cap_bytes (when the cap leaves less than a chunk, the
 *   last chunk is what is left), and kept until the tdm_gpu is destroyed. Past the cap an
 *   allocation fails with -ENOMEM: nothing ever falls back to pageable memory.
 * - Pages and runs: a chunk is cut into 64 KiB pages. A size class takes a run of a few
 *   contiguous pages (chosen at init so that at most 1/16 of the run is left over where a run
 *   of up to 8 more pages allows it) and carves it into blocks of its size. Runs go back to
 *   their chunk, and coalesce with free neighbours, only when the pool runs out of pages:
 *   `reclaim` then gives back every run whose blocks are all free in the shared lists.
 * - Size classes: 256, 512, 768 and 1024 bytes, then four per power of two (1280, 1536, 1792,
 *   2048, 2560, ...) up to the chunk size. Above 1 KiB a block wastes at most a fifth of its
 *   size (powers of two waste up to half, of memory that is capped); below, the 256-byte step
 *   that the alignment imposes anyway sets the waste. Every class is a multiple of 256, so
 *   every block is aligned to 256 bytes at least.
 * - Requests larger than the largest class get a dedicated chunk of their own size (rounded to
 *   4 KiB). A freed dedicated chunk stays pinned as a spare for the next large request, because
 *   tdm_pinned_free never calls the backend: it runs in host functions on the driver's thread
 *   (memory.c's staging), where CUDA calls are forbidden. Spares go back to the backend from
 *   allocations: down to PIN_SPARES - 1 before a new dedicated chunk is pinned, and all of them
 *   when the cap needs their room.
 * - From a pointer to its class in O(1) without a header: a radix tree over 4 KiB address pages
 *   finds the chunk, and the chunk's map has a byte per 256-byte granule holding class + 1 while
 *   the block that starts there is handed out, else 0. Both are read without a lock, and a free
 *   of anything but a handed-out block's start (a double free, an interior pointer, foreign
 *   memory) is refused with -EINVAL before it can corrupt a list. Two threads freeing the same
 *   block at the same moment are not caught: that would cost an atomic exchange per free. The
 *   header of a dedicated chunk whose memory went back to the backend is kept (pool->dead, and
 *   reused for the next dedicated chunk), so a lookup racing that is never left holding freed
 *   memory.
 * - Caches: each worker of the executor keeps up to PIN_CACHE_SLOTS free blocks per class, and
 *   at most PIN_CACHE_CLASS_BYTES of a class (classes above that are not cached: their blocks
 *   are too big to strand in one thread's cache, and a mutex costs nothing next to filling
 *   them), in arrays that only it touches: its allocations and frees take no lock and no atomic
 *   read-modify-write. An empty cache takes half its capacity from the class's shared free list
 *   (a mutex per class), a full one gives half back. Other threads use the shared lists. Any
 *   thread may free any block. Blocks in one worker's cache are invisible to the others and to
 *   reclaim, except that a worker at the cap empties its own cache into the shared lists first.
 *
 * Lock order: grow_lock, then one class lock or heap_lock, never a class lock and heap_lock
 * together. Only grow_lock is held across a backend call (one thread pins at a time; the
 * others' allocations go on from the lists and the chunks).
 *
 * Lifetime: tdm__pinned_fini gives every chunk back to the backend, including those with blocks
 * still handed out: blocks die with their tdm_gpu. Nothing may use the pool concurrently.
 *
 * Statistics: bytes_pinned and chunks change under heap_lock. bytes_in_use is a shared counter
 * plus each worker's `delta`: what the worker's cache handed out minus what it took back since
 * the worker last folded the delta into the shared counter (at its cache refills and spills,
 * and before any call that takes a lock anyway), so the warm path only stores to the worker's
 * own cache line. high_water is raised at every change of the shared counter, at each fold (by
 * the fold's base plus the worker's peak delta since the previous fold) and by
 * tdm_pinned_stats_get: exact for any one thread's sequence of calls; while several threads
 * allocate and free at once it may miss or overstate the peak by what the workers' caches hold
 * (at most PIN_CACHE_CLASS_BYTES per class and worker). bytes_in_use, bytes_pinned and chunks
 * are exact once the threads have quiesced (their calls happen before the stats call).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pinned.h"

/* ---- shared free lists ---- */

static void shared_push(struct tdm__pinned *pool, unsigned c, struct tdm__link *first,
                        struct tdm__link *last, size_t n)
{
	struct pin_class *pc = &pool->cls[c];
	pthread_mutex_lock(&pc->lock); /* the class's list */
	last->next = pc->head;
	pc->head = first;
	pthread_mutex_unlock(&pc->lock);
	/* Relaxed: a hint for run_slow; the lists themselves are under the class lock. */
	atomic_fetch_add_explicit(&pool->shared_free, n * pc->size, memory_order_relaxed);
}

/* Up to `want` blocks of class c into out[]; how many. */
static unsigned shared_pop(struct tdm__pinned *pool, unsigned c, void **out, unsigned want)
{
	struct pin_class *pc = &pool->cls[c];
	unsigned n = 0;
	pthread_mutex_lock(&pc->lock); /* the class's list */
	while (n < want && pc->head != NULL) {
		out[n++] = pc->head;
		pc->head = pc->head->next;
	}
	pthread_mutex_unlock(&pc->lock);
	if (n > 0) /* Relaxed: a hint, as in shared_push. */
		atomic_fetch_sub_explicit(&pool->shared_free, n * pc->size, memory_order_relaxed);
	return n;
}

/* Links blocks[0..n) into a chain and pushes it. */
static void shared_push_array(struct tdm__pinned *pool, unsigned c, void *const *blocks, unsigned n)
{
	if (n == 0)
		return;
	for (unsigned i = 0; i + 1 < n; i++)
		((struct tdm__link *)blocks[i])->next = blocks[i + 1];
	shared_push(pool, c, blocks[0], blocks[n - 1], n);
}

/* Empties a worker's cache into the shared lists. */
static void cache_flush(struct tdm__pinned *pool, struct pin_cache *mine)
{
	for (unsigned c = 0; c < pool->ncached; c++) {
		shared_push_array(pool, c, mine->slot[c], mine->n[c]);
		mine->n[c] = 0;
	}
}

/* heap_lock held: the head page of the run that block b lies in (its `count` is reclaim's). */
static struct pin_page *run_head(struct tdm__pinned *pool, const void *b)
{
	struct pin_chunk *k = radix_get(pool, b);
	return &k->pages[k->pages[((const char *)b - k->base) >> PIN_PAGE_SHIFT].head];
}

/*
 * grow_lock held, nothing else: drains every shared list, gives back each run whose blocks are
 * all among them, and puts the rest back. Blocks in workers' caches keep their runs in use.
 */
static void reclaim(struct tdm__pinned *pool)
{
	struct tdm__link *lists[PIN_NCLASS_MAX] = {0}, *release = NULL;
	for (unsigned c = 0; c < pool->nclass; c++) {
		struct pin_class *pc = &pool->cls[c];
		pthread_mutex_lock(&pc->lock); /* the class's list */
		lists[c] = pc->head;
		pc->head = NULL;
		pthread_mutex_unlock(&pc->lock);
	}
	size_t taken = 0;
	pthread_mutex_lock(&pool->heap_lock); /* the runs' pages */
	/* Count the free blocks of each run at its head page ... */
	for (unsigned c = 0; c < pool->nclass; c++)
		for (struct tdm__link *b = lists[c]; b != NULL; b = b->next) {
			run_head(pool, b)->count++;
			taken += pool->cls[c].size;
		}
	/* ... take out the blocks of full runs, keeping one block per run to name it ... */
	for (unsigned c = 0; c < pool->nclass; c++)
		for (struct tdm__link **pp = &lists[c]; *pp != NULL;) {
			struct tdm__link *b = *pp;
			struct pin_page *hp = run_head(pool, b);
			if (hp->count == pool->cls[c].run_blocks) {
				hp->count = UINT32_MAX;
				*pp = b->next;
				b->next = release;
				release = b;
			} else if (hp->count == UINT32_MAX) {
				*pp = b->next;
			} else {
				pp = &b->next;
			}
		}
	/* ... give those runs back; clear the others' scratch, counting what goes back. */
	for (struct tdm__link *b = release; b != NULL; b = b->next) {
		struct pin_chunk *k = radix_get(pool, b);
		tdm__pin_run_release(k, k->pages[((char *)b - k->base) >> PIN_PAGE_SHIFT].head);
	}
	struct tdm__link *last[PIN_NCLASS_MAX] = {0};
	size_t n[PIN_NCLASS_MAX] = {0};
	for (unsigned c = 0; c < pool->nclass; c++)
		for (struct tdm__link *b = lists[c]; b != NULL; b = b->next) {
			run_head(pool, b)->count = 0;
			last[c] = b;
			n[c]++;
		}
	pthread_mutex_unlock(&pool->heap_lock);
	/* Relaxed: a hint, read only by grow_lock's holder (this thread); shared_push adds back
	 * what stays. */
	atomic_fetch_sub_explicit(&pool->shared_free, taken, memory_order_relaxed);
	for (unsigned c = 0; c < pool->nclass; c++)
		if (lists[c] != NULL)
			shared_push(pool, c, lists[c], last[c], n[c]);
}

/* grow_lock held: a run for class c once the quick look failed. */
static int run_slow(struct tdm__pinned *pool, struct pin_cache *mine, unsigned c, char **run)
{
	/* Another thread may have made room while this one waited for grow_lock. */
	if ((*run = tdm__pin_heap_take_locked(pool, c)) != NULL)
		return 0;
	/* Reclaim before pinning more: it costs a walk of the free lists, pinning costs
	 * milliseconds and memory. Relaxed: a hint (empty lists give nothing back). */
	if (atomic_load_explicit(&pool->shared_free, memory_order_relaxed) > 0) {
		reclaim(pool);
		if ((*run = tdm__pin_heap_take_locked(pool, c)) != NULL)
			return 0;
	}
	int rc = tdm__pin_grow(pool, c, run);
	if (rc == 0)
		return *run != NULL ? 0 : -ENOMEM;
	if (mine == NULL)
		return rc;
	/* At the cap: this worker's own cache may complete a run. */
	cache_flush(pool, mine);
	reclaim(pool);
	*run = tdm__pin_heap_take_locked(pool, c);
	return *run != NULL ? 0 : -ENOMEM;
}

/* A new run of class c. May reclaim, and pin a chunk. */
static int run_new(struct tdm__pinned *pool, struct pin_cache *mine, unsigned c, char **run)
{
	if ((*run = tdm__pin_heap_take_locked(pool, c)) != NULL)
		return 0;
	pthread_mutex_lock(&pool->grow_lock); /* one thread reclaims or pins at a time */
	int rc = run_slow(pool, mine, c, run);
	pthread_mutex_unlock(&pool->grow_lock);
	return rc;
}

/* Blocks [from, pc->run_blocks) of a new run go to the shared list. */
static void run_share(struct tdm__pinned *pool, unsigned c, char *run, uint32_t from)
{
	struct pin_class *pc = &pool->cls[c];
	if (from >= pc->run_blocks)
		return;
	struct tdm__link *first = (struct tdm__link *)(run + from * pc->size), *last = first;
	for (uint32_t i = from + 1; i < pc->run_blocks; i++) {
		struct tdm__link *b = (struct tdm__link *)(run + i * pc->size);
		last->next = b;
		last = b;
	}
	shared_push(pool, c, first, last, pc->run_blocks - from);
}

/* ---- statistics ---- */

static void raise_high_water(struct tdm__pinned *pool, int64_t v)
{
	if (v <= 0)
		return;
	uint64_t cur = atomic_load_explicit(&pool->high_water, memory_order_relaxed);
	/* Relaxed: a maximum; nothing is published with it. */
	while ((uint64_t)v > cur &&
	       !atomic_compare_exchange_weak_explicit(&pool->high_water, &cur, (uint64_t)v,
	                                              memory_order_relaxed, memory_order_relaxed))
		;
}

/* Adds to the shared counter and raises high_water to the sum; the sum. */
static int64_t in_use_add(struct tdm__pinned *pool, int64_t bytes)
{
	/* Relaxed: a counter; nothing is published with it. */
	int64_t t = atomic_fetch_add_explicit(&pool->in_use, bytes, memory_order_relaxed) + bytes;
	raise_high_water(pool, t);
	return t;
}

/* The worker folds its delta, and `bytes` it counts on the shared counter at the same time, into
 * the shared counter (its slow path only): one read-modify-write for both. */
static void cache_fold(struct tdm__pinned *pool, struct pin_cache *mine, int64_t bytes)
{
	int64_t t =
	    in_use_add(pool, atomic_load_explicit(&mine->delta, memory_order_relaxed) + bytes);
	/* A free: the total before it (the delta counted, the block not yet gone) was in use. */
	if (bytes < 0)
		raise_high_water(pool, t - bytes);
	raise_high_water(pool, atomic_load_explicit(&mine->base, memory_order_relaxed) +
	                           atomic_load_explicit(&mine->peak, memory_order_relaxed));
	/* Relaxed, owner-only stores: a reader between the add and these counts d twice, which
	 * only a stats call racing with the worker can see. */
	atomic_store_explicit(&mine->delta, 0, memory_order_relaxed);
	atomic_store_explicit(&mine->peak, 0, memory_order_relaxed);
	atomic_store_explicit(&mine->base, t, memory_order_relaxed);
}

/*
 * Counting a block in or out. The warm path (a cached class on a worker) only loads and stores
 * the worker's own line. Everything else already takes a lock, and a worker there first folds
 * its delta: so a worker's delta only ever moves by what its caches hand out or take back
 * between refills and spills, however its blocks travel between threads.
 */
static inline void count_cached(struct pin_cache *mine, int64_t bytes)
{
	/* Relaxed loads and stores, no read-modify-write: only this worker writes its cache's
	 * counters; tdm_pinned_stats_get only reads them. */
	int64_t d = atomic_load_explicit(&mine->delta, memory_order_relaxed) + bytes;
	atomic_store_explicit(&mine->delta, d, memory_order_relaxed);
	if (d > atomic_load_explicit(&mine->peak, memory_order_relaxed))
		atomic_store_explicit(&mine->peak, d, memory_order_relaxed);
}

/* Threads that are not workers, and workers' locked paths (their delta folded in the same add). */
static void count_shared(struct tdm__pinned *pool, struct pin_cache *mine, int64_t bytes)
{
	if (mine != NULL)
		cache_fold(pool, mine, bytes);
	else
		in_use_add(pool, bytes);
}

/* ---- the calls ---- */

static inline struct pin_cache *cache_of(struct tdm__pinned *pool)
{
	int w = tdm__worker_index(pool->ex); /* a worker of ex: below its worker count */
	return w >= 0 ? &pool->caches[w] : NULL;
}

/*
 * The map byte of the block at p, in a chunk that is not dedicated (those use k->own under
 * heap_lock). Relaxed loads and stores suffice: a block passes from the thread that allocated
 * it to the one that frees it only through the caller's own synchronisation, and between
 * threads' caches only through a class lock.
 */
static inline _Atomic uint8_t *map_of(struct pin_chunk *k, const void *p)
{
	return &k->map[((const char *)p - k->base) >> PIN_GRANULE_SHIFT];
}

static int alloc_dedicated(struct tdm__pinned *pool, struct pin_cache *mine, size_t bytes,
                           void **out)
{
	if (bytes > SIZE_MAX - PIN_OS_PAGE)
		return -ENOMEM;
	size_t need = (bytes + PIN_OS_PAGE - 1) & ~(PIN_OS_PAGE - 1);
	struct pin_chunk *k = NULL, *drop = NULL;
	pthread_mutex_lock(&pool->heap_lock);
	/* The smallest spare that fits without wasting more than the request. */
	for (struct pin_chunk *s = pool->spares; s != NULL; s = s->next)
		if (s->bytes >= need && s->bytes / 2 <= need && (k == NULL || s->bytes < k->bytes))
			k = s;
	if (k != NULL) {
		tdm__pin_list_unlink(&pool->spares, k);
		pool->nspares--;
		tdm__pin_list_push(&pool->dedicated, k);
		k->own = true;
		/* Read under the lock: once it is released, a racing double free of a stale
		 * pointer to this block may make k a spare again, to be dropped and reused. */
		int64_t got = (int64_t)k->bytes;
		*out = k->base;
		pthread_mutex_unlock(&pool->heap_lock);
		count_shared(pool, mine, got);
		return 0;
	}
	/* Keep PIN_SPARES - 1 at most, so that this block's own free stays within bound. */
	tdm__pin_spares_drop(pool, need, PIN_SPARES - 1, &drop);
	bool room = pool->cap - pool->reserved >= need;
	if (room)
		pool->reserved += need;
	pthread_mutex_unlock(&pool->heap_lock);
	tdm__pin_spares_free(pool, drop);
	if (!room)
		return -ENOMEM;

	int rc = tdm__pin_chunk_new(pool, need, true, &k);
	pthread_mutex_lock(&pool->heap_lock);
	char *base = NULL;
	if (rc == 0 && (rc = tdm__pin_radix_set(pool, k, k)) == 0) {
		tdm__pin_list_push(&pool->dedicated, k);
		tdm__pin_chunk_count(pool, k, +1);
		k->own = true;
		base = k->base; /* under the lock: once unlocked, a racing stale free may turn k
		                   into a spare whose header is reused */
	} else {
		pool->reserved -= need;
	}
	pthread_mutex_unlock(&pool->heap_lock);
	if (rc != 0) {
		if (k != NULL)
			tdm__pin_dead_give(pool,
			                   k); /* pinned, but the radix tree had no room for it */
		return -ENOMEM;
	}
	count_shared(pool, mine, (int64_t)need);
	*out = base;
	return 0;
}

/* Never calls the backend: the block becomes a spare. */
static int free_dedicated(struct tdm__pinned *pool, struct pin_cache *mine, struct pin_chunk *k,
                          void *p)
{
	pthread_mutex_lock(&pool->heap_lock);
	/*
	 * Under the lock, so that even two racing frees of one block unlink it once. k is still
	 * the chunk at p first (a dropped spare's radix entries are gone, and a header being
	 * reused is not yet published), and only then are its other fields read.
	 */
	if (radix_get(pool, p) != k || p != k->base || !k->own) {
		pthread_mutex_unlock(&pool->heap_lock);
		return -EINVAL;
	}
	k->own = false;
	tdm__pin_list_unlink(&pool->dedicated, k);
	tdm__pin_list_push(&pool->spares, k);
	pool->nspares++;
	/* Read before unlocking: then any thread may drop the spare and reuse its header. */
	int64_t bytes = (int64_t)k->bytes;
	pthread_mutex_unlock(&pool->heap_lock);
	count_shared(pool, mine, -bytes);
	return 0;
}

int tdm__pinned_alloc(struct tdm__gpu *gpu, size_t bytes, void **out)
{
	if (gpu == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	struct tdm__pinned *pool = gpu->pinned;
	if (gpu->ops == NULL || pool == NULL)
		return -ENODEV;
	struct pin_cache *mine = cache_of(pool);
	if (bytes > pool->max_class)
		return alloc_dedicated(pool, mine, bytes, out);
	unsigned c = class_of(bytes);
	struct pin_class *pc = &pool->cls[c];
	void *p;
	if (mine != NULL && c < pool->ncached) {
		if (mine->n[c] == 0) {
			/* Half a cache from the shared list, or from a new run. */
			cache_fold(pool, mine, 0);
			unsigned got = shared_pop(pool, c, mine->slot[c], pc->cache_batch);
			if (got == 0) {
				char *run;
				int rc = run_new(pool, mine, c, &run);
				if (rc != 0)
					return rc;
				got = pc->cache_batch < pc->run_blocks ? pc->cache_batch
				                                       : pc->run_blocks;
				/* Highest address lowest, so the run is handed out in order. */
				for (unsigned i = 0; i < got; i++)
					mine->slot[c][i] = run + (size_t)(got - 1 - i) * pc->size;
				run_share(pool, c, run, got);
			}
			mine->n[c] = got;
		}
		p = mine->slot[c][--mine->n[c]];
		count_cached(mine, (int64_t)pc->size);
	} else {
		if (shared_pop(pool, c, &p, 1) == 0) {
			char *run;
			int rc = run_new(pool, mine, c, &run);
			if (rc != 0)
				return rc;
			p = run;
			run_share(pool, c, run, 1);
		}
		count_shared(pool, mine, (int64_t)pc->size);
	}
	atomic_store_explicit(map_of(radix_get(pool, p), p), (uint8_t)(c + 1),
	                      memory_order_relaxed);
	*out = p;
	return 0;
}

int tdm__pinned_free(struct tdm__gpu *gpu, void *p)
{
	if (gpu == NULL || p == NULL)
		return -EINVAL;
	struct tdm__pinned *pool = gpu->pinned;
	if (gpu->ops == NULL || pool == NULL)
		return -ENODEV;
	struct pin_chunk *k = radix_get(pool, p);
	if (k == NULL)
		return -EINVAL;
	struct pin_cache *mine = cache_of(pool);
	if (k->dedicated)
		return free_dedicated(pool, mine, k, p);
	if (((uintptr_t)p & ((1u << PIN_GRANULE_SHIFT) - 1)) != 0)
		return -EINVAL;
	_Atomic uint8_t *m = map_of(k, p);
	unsigned v = atomic_load_explicit(m, memory_order_relaxed);
	if (v == 0)
		return -EINVAL; /* not handed out: freed twice, or not a block's start */
	atomic_store_explicit(m, 0, memory_order_relaxed);
	unsigned c = v - 1;
	struct pin_class *pc = &pool->cls[c];
	if (mine != NULL && c < pool->ncached) {
		if (mine->n[c] == pc->cache_cap) {
			/* Full: the coldest half (the bottom of the stack) goes to the shared list.
			 */
			unsigned half = pc->cache_batch;
			cache_fold(pool, mine, 0);
			shared_push_array(pool, c, mine->slot[c], half);
			memmove(mine->slot[c], mine->slot[c] + half,
			        (mine->n[c] - half) * sizeof(void *));
			mine->n[c] -= half;
		}
		mine->slot[c][mine->n[c]++] = p;
		count_cached(mine, -(int64_t)pc->size);
	} else {
		struct tdm__link *b = p;
		shared_push(pool, c, b, b, 1);
		count_shared(pool, mine, -(int64_t)pc->size);
	}
	return 0;
}

int tdm__pinned_stats_get(struct tdm__gpu *gpu, tdm_pinned_stats *out)
{
	if (gpu == NULL || out == NULL)
		return -EINVAL;
	struct tdm__pinned *pool = gpu->pinned;
	if (gpu->ops == NULL || pool == NULL)
		return -ENODEV;
	/* Relaxed loads throughout: exact once the threads that used the pool are done, which
	 * the caller orders (a group wait, a join); a snapshot while they run. */
	int64_t in_use = atomic_load_explicit(&pool->in_use, memory_order_relaxed), peak = 0;
	for (unsigned w = 0; w < pool->nworkers; w++) {
		struct pin_cache *c = &pool->caches[w];
		in_use += atomic_load_explicit(&c->delta, memory_order_relaxed);
		int64_t p = atomic_load_explicit(&c->base, memory_order_relaxed) +
		            atomic_load_explicit(&c->peak, memory_order_relaxed);
		if (p > peak)
			peak = p;
	}
	if (in_use < 0)
		in_use = 0; /* a snapshot taken mid-fold */
	raise_high_water(pool, in_use);
	raise_high_water(pool, peak);
	out->bytes_pinned = atomic_load_explicit(&pool->bytes_pinned, memory_order_relaxed);
	out->bytes_in_use = (uint64_t)in_use;
	out->high_water = atomic_load_explicit(&pool->high_water, memory_order_relaxed);
	out->chunks = atomic_load_explicit(&pool->nchunks, memory_order_relaxed);
	return 0;
}

int tdm__pinned_owns(struct tdm__gpu *gpu, const void *p)
{
	struct tdm__pinned *pool = gpu != NULL ? gpu->pinned : NULL;
	return pool != NULL && p != NULL && radix_get(pool, p) != NULL;
}

/* ---- life ---- */

int tdm__pinned_init(struct tdm__gpu *gpu)
{
	size_t chunk =
	    gpu->cfg.pinned_chunk_bytes != 0 ? gpu->cfg.pinned_chunk_bytes : PIN_DEFAULT_CHUNK;
	size_t cap = gpu->cfg.pinned_cap_bytes != 0 ? gpu->cfg.pinned_cap_bytes : SIZE_MAX;
	if (chunk > PIN_MAX_CHUNK)
		return -EINVAL;
	chunk = (chunk + PIN_PAGE - 1) & ~(PIN_PAGE - 1);
	/* A cap below the chunk size makes the one chunk the cap allows the chunk size. */
	if (chunk > cap)
		chunk = cap >= PIN_PAGE ? cap & ~(PIN_PAGE - 1) : PIN_PAGE;

	/* sizeof is a multiple of the struct's alignment, which _Alignas makes TDM__CACHELINE. */
	struct tdm__pinned *pool = aligned_alloc(TDM__CACHELINE, sizeof(*pool));
	if (pool == NULL)
		return -ENOMEM;
	memset(pool, 0, sizeof(*pool));
	pool->gpu = gpu;
	pool->ex = gpu->ex;
	pool->chunk_bytes = chunk;
	pool->cap = cap;
	unsigned last = class_of(chunk);
	if (class_size(last) > chunk)
		last--;
	pool->nclass = last + 1;
	pool->max_class = class_size(last);
	for (unsigned c = 0; c < pool->nclass; c++) {
		struct pin_class *pc = &pool->cls[c];
		size_t s = class_size(c);
		pc->size = s;
		/* The run with the least left over, of the smallest few that can hold a block;
		 * the first with at most 1/16 left over wins. */
		uint32_t n0 = (uint32_t)((s + PIN_PAGE - 1) >> PIN_PAGE_SHIFT);
		uint32_t max = (uint32_t)(chunk >> PIN_PAGE_SHIFT);
		size_t best_waste = 0, best_run = 1;
		for (uint32_t n = n0; n < n0 + 8 && n <= max; n++) {
			size_t run = (size_t)n << PIN_PAGE_SHIFT, waste = run % s;
			if (n == n0 || waste * best_run < best_waste * run) {
				pc->run_pages = n;
				best_waste = waste;
				best_run = run;
			}
			if (waste * 16 <= run)
				break;
		}
		pc->run_blocks = (uint32_t)(((size_t)pc->run_pages << PIN_PAGE_SHIFT) / s);
		if (s <= PIN_CACHE_CLASS_BYTES) {
			size_t fit = PIN_CACHE_CLASS_BYTES / s;
			pc->cache_cap = fit < PIN_CACHE_SLOTS ? (unsigned)fit : PIN_CACHE_SLOTS;
			pc->cache_batch = pc->cache_cap > 1 ? pc->cache_cap / 2 : 1;
			pool->ncached = c + 1;
		}
		pthread_mutex_init(&pc->lock, NULL);
	}
	pool->nworkers = (unsigned)tdm_executor_workers(pool->ex);
	size_t caches_bytes = (size_t)pool->nworkers * sizeof(*pool->caches);
	pool->caches = aligned_alloc(TDM__CACHELINE, caches_bytes);
	if (pool->caches == NULL && caches_bytes > 0) {
		for (unsigned c = 0; c < pool->nclass; c++)
			pthread_mutex_destroy(&pool->cls[c].lock);
		free(pool);
		return -ENOMEM;
	}
	if (caches_bytes > 0)
		memset(pool->caches, 0, caches_bytes);
	pthread_mutex_init(&pool->heap_lock, NULL);
	pthread_mutex_init(&pool->grow_lock, NULL);
	gpu->pinned = pool;
	return 0;
}

void tdm__pinned_fini(struct tdm__gpu *gpu)
{
	struct tdm__pinned *pool = gpu->pinned;
	if (pool == NULL)
		return;
	struct pin_chunk *lists[] = {pool->regular, pool->dedicated, pool->spares};
	for (unsigned i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		while (lists[i] != NULL) {
			struct pin_chunk *next = lists[i]->next;
			tdm__pin_chunk_free(pool, lists[i]);
			lists[i] = next;
		}
	while (pool->dead != NULL) { /* headers only: their memory went back already */
		struct pin_chunk *next = pool->dead->next;
		free(pool->dead);
		pool->dead = next;
	}
	/* Relaxed: nothing uses the pool concurrently (the lifetime rule above). */
	for (unsigned i = 0; i < RADIX_N; i++) {
		struct radix_mid *m = atomic_load_explicit(&pool->root[i], memory_order_relaxed);
		if (m == NULL)
			continue;
		for (unsigned j = 0; j < RADIX_N; j++)
			free(atomic_load_explicit(&m->e[j], memory_order_relaxed));
		free(m);
	}
	for (unsigned c = 0; c < pool->nclass; c++)
		pthread_mutex_destroy(&pool->cls[c].lock);
	pthread_mutex_destroy(&pool->heap_lock);
	pthread_mutex_destroy(&pool->grow_lock);
	free(pool->caches);
	free(pool);
	gpu->pinned = NULL;
}

int tdm_pinned_alloc(tdm_gpu *h, size_t bytes, void **out)
{
	TDM__GPU_CALL(h, tdm__pinned_alloc(gpu, bytes, out));
}

int tdm_pinned_free(tdm_gpu *h, void *p)
{
	TDM__GPU_CALL(h, tdm__pinned_free(gpu, p));
}

int tdm_pinned_stats_get(tdm_gpu *h, tdm_pinned_stats *out)
{
	TDM__GPU_CALL(h, tdm__pinned_stats_get(gpu, out));
}
