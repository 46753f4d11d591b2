/*
 * The pinned host memory pool (tdm_pinned_alloc, _free, _stats_get, and tdm__pinned_owns for the
 * copy path), and tdm_host_register/_unregister, which only check their arguments and pass them
 * to the backend.
 *
 * Pinning is slow (cudaHostAlloc takes about 0.75 ms per MiB on an H200), so the pool pins large
 * chunks once and hands out blocks carved from them:
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

#include "gpu_internal.h"

_Static_assert(sizeof(void *) == 8, "the radix tree covers 48-bit addresses of a 64-bit target");

#define PIN_GRANULE_SHIFT 8 /* 256 bytes: block alignment, and the class step below 1 KiB */
#define PIN_PAGE_SHIFT 16
#define PIN_PAGE ((size_t)1 << PIN_PAGE_SHIFT) /* 64 KiB: what runs are made of */
#define PIN_OS_PAGE ((size_t)4096) /* chunk alignment, dedicated rounding, radix granule */
#define PIN_DEFAULT_CHUNK ((size_t)64 << 20)
#define PIN_MAX_CHUNK ((size_t)1 << 36) /* 64 GiB: keeps a chunk's page count in 32 bits */
#define PIN_NCLASS_MAX 108              /* class_of(PIN_MAX_CHUNK) + 1 */
#define PIN_CACHE_SLOTS 32
#define PIN_CACHE_CLASS_BYTES ((size_t)256 << 10)
#define PIN_NCACHED_MAX 36 /* class_of(PIN_CACHE_CLASS_BYTES) + 1 */
#define PIN_SPARES 4

#define RADIX_BITS 12
#define RADIX_N (1u << RADIX_BITS)
#define RADIX_KEY_BITS (48 - 12) /* 48-bit addresses in 4 KiB pages: three levels of 12 bits */

/* ---- size classes ---- */

/* The smallest class that holds s bytes, 0 < s <= PIN_MAX_CHUNK. */
static unsigned class_of(size_t s)
{
	if (s <= 1024)
		return (unsigned)((s - 1) >> PIN_GRANULE_SHIFT);
	size_t t = s - 1;
	unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)t); /* 2^e <= t */
	unsigned k = (unsigned)(t >> (e - 2)) & 3u;                          /* its quarter */
	return 4u + (e - 10u) * 4u + k;
}

/* Classes 0..3: 256..1024; then 2^e + k * 2^(e-2) for k = 1..4 and e = 10, 11, ... */
static size_t class_size(unsigned c)
{
	if (c < 4)
		return (size_t)(c + 1) << PIN_GRANULE_SHIFT;
	unsigned e = 10u + (c - 4u) / 4u, k = (c - 4u) % 4u + 1u;
	return ((size_t)1 << e) + ((size_t)k << (e - 2));
}

/* ---- structures ---- */

/* A 64 KiB page of a chunk; heap_lock. A used run marks all its pages; a free run only its two
 * ends, which is all that the run walk and coalescing read. */
struct pin_page {
	uint32_t head;  /* first page of the run */
	uint32_t len;   /* pages in the run (at the head; free runs: at both ends) */
	uint32_t count; /* reclaim's scratch, at a used run's head */
	uint32_t used;
};

struct pin_chunk {
	/* Fixed before the chunk is published in the radix tree, and while it is there. */
	char *base;           /* 4 KiB aligned */
	size_t bytes;         /* what the pool uses, and counts in bytes_pinned */
	_Atomic uint8_t *map; /* a byte per 256-byte granule; dedicated: NULL */
	bool dedicated;       /* never changes, even while the header lies on pool->dead */
	/* heap_lock from here (or the chunk is private to its creator). */
	bool own;  /* dedicated: handed out */
	void *raw; /* what host_alloc returned, for host_free */
	struct pin_page *pages;
	uint32_t npages, free_pages;
	struct pin_chunk *next, *prev;
};

struct pin_class {
	size_t size;
	uint32_t run_pages, run_blocks;
	unsigned cache_cap;   /* slots a worker's cache uses for it; 0: not cached */
	unsigned cache_batch; /* blocks moved at once between a cache and the shared list */
	_Alignas(TDM__CACHELINE) pthread_mutex_t lock;
	struct tdm__link *head; /* lock */
};

/* A worker's cache. Only its worker touches it, except the statistics' relaxed loads. */
struct pin_cache {
	/* Stored by the worker, loaded by tdm_pinned_stats_get: bytes handed out from this
	 * cache minus bytes freed into it since the last fold, the largest delta since then, and
	 * the shared in-use count right after that fold. */
	_Alignas(TDM__CACHELINE) _Atomic int64_t delta;
	_Atomic int64_t peak, base;
	unsigned n[PIN_NCACHED_MAX];
	void *slot[PIN_NCACHED_MAX][PIN_CACHE_SLOTS]; /* a stack per class: the top is hot */
};

struct radix_leaf {
	_Atomic(struct pin_chunk *) e[RADIX_N];
};
struct radix_mid {
	_Atomic(struct radix_leaf *) e[RADIX_N];
};

struct tdm__pinned {
	struct tdm_gpu *gpu;
	tdm_executor *ex;  /* compared with, never read: the executor may be destroyed first */
	unsigned nworkers; /* ex's, copied at init */
	size_t chunk_bytes, cap, max_class;
	unsigned nclass, ncached;
	struct pin_cache *caches; /* one per worker of ex */

	/* Relaxed: counters, read as a whole only once the threads quiesce. */
	_Alignas(TDM__CACHELINE) _Atomic int64_t in_use;
	_Atomic uint64_t high_water;
	_Alignas(TDM__CACHELINE) _Atomic uint64_t bytes_pinned, nchunks;
	_Atomic size_t shared_free; /* bytes in the shared lists: is a reclaim worth it? */
	_Atomic bool misaligned;    /* host_alloc gave less than 4 KiB alignment (the sim) */

	_Alignas(TDM__CACHELINE) pthread_mutex_t heap_lock;
	struct pin_chunk *regular, *dedicated, *spares; /* heap_lock */
	/* heap_lock: headers of dedicated chunks given back to the backend (the file's header
	 * says why they are kept until fini). */
	struct pin_chunk *dead;
	unsigned nspares; /* heap_lock */
	size_t reserved;  /* heap_lock: pinned or being pinned, counted against the cap */
	pthread_mutex_t grow_lock;

	struct pin_class cls[PIN_NCLASS_MAX];
	/* Written under heap_lock, read by anyone (radix_get). */
	_Atomic(struct radix_mid *) root[RADIX_N];
};

/* ---- the radix tree: address -> chunk ---- */

/* The chunk whose range holds p, or NULL. Lock-free. */
static inline struct pin_chunk *radix_get(struct tdm__pinned *pool, const void *p)
{
	uintptr_t key = (uintptr_t)p >> 12;
	if (key >> RADIX_KEY_BITS)
		return NULL;
	/* Acquire (all three): pairs with the release stores in radix_node and radix_set, so
	 * that a node's zeroed entries and a chunk's fixed fields are seen initialised. */
	struct radix_mid *m = atomic_load_explicit(&pool->root[key >> 24], memory_order_acquire);
	if (m == NULL)
		return NULL;
	struct radix_leaf *l =
	    atomic_load_explicit(&m->e[(key >> 12) & (RADIX_N - 1)], memory_order_acquire);
	if (l == NULL)
		return NULL;
	return atomic_load_explicit(&l->e[key & (RADIX_N - 1)], memory_order_acquire);
}

/* The leaf that holds key, made if `make`. heap_lock held: the only writer. */
static struct radix_leaf *radix_node(struct tdm__pinned *pool, uintptr_t key, bool make)
{
	_Atomic(struct radix_mid *) *ms = &pool->root[key >> 24];
	/* Relaxed loads here: heap_lock orders this thread after every earlier writer. */
	struct radix_mid *m = atomic_load_explicit(ms, memory_order_relaxed);
	if (m == NULL) {
		if (!make || (m = calloc(1, sizeof(*m))) == NULL)
			return NULL;
		/* Release: pairs with the acquire in radix_get (the zeroed node). */
		atomic_store_explicit(ms, m, memory_order_release);
	}
	_Atomic(struct radix_leaf *) *ls = &m->e[(key >> 12) & (RADIX_N - 1)];
	struct radix_leaf *l = atomic_load_explicit(ls, memory_order_relaxed);
	if (l == NULL) {
		if (!make || (l = calloc(1, sizeof(*l))) == NULL)
			return NULL;
		/* Release: pairs with the acquire in radix_get (the zeroed leaf). */
		atomic_store_explicit(ls, l, memory_order_release);
	}
	return l;
}

/* Points k's pages at v (k to publish it, NULL to withdraw it). heap_lock held. */
static int radix_set(struct tdm__pinned *pool, struct pin_chunk *k, struct pin_chunk *v)
{
	uintptr_t first = (uintptr_t)k->base >> 12;
	uintptr_t last = ((uintptr_t)k->base + k->bytes - 1) >> 12;
	if (last >> RADIX_KEY_BITS)
		return -ENOMEM;
	/* Every node first, so that a failed allocation leaves nothing half published. */
	if (v != NULL)
		for (uintptr_t key = first; key <= last; key = (key | (RADIX_N - 1)) + 1)
			if (radix_node(pool, key, true) == NULL)
				return -ENOMEM;
	for (uintptr_t key = first; key <= last;) {
		struct radix_leaf *l = radix_node(pool, key, false);
		uintptr_t end = key | (RADIX_N - 1);
		if (end > last)
			end = last;
		for (; key <= end; key++)
			/* Release: pairs with the acquire in radix_get; k's fixed fields were
			 * written before. */
			atomic_store_explicit(&l->e[key & (RADIX_N - 1)], v, memory_order_release);
	}
	return 0;
}

/* ---- chunks and runs (heap_lock) ---- */

static void list_push(struct pin_chunk **head, struct pin_chunk *k)
{
	k->prev = NULL;
	k->next = *head;
	if (*head != NULL)
		(*head)->prev = k;
	*head = k;
}

static void list_unlink(struct pin_chunk **head, struct pin_chunk *k)
{
	if (k->prev != NULL)
		k->prev->next = k->next;
	else
		*head = k->next;
	if (k->next != NULL)
		k->next->prev = k->prev;
	k->next = k->prev = NULL;
}

static void run_mark_free(struct pin_chunk *k, uint32_t h, uint32_t n)
{
	k->pages[h] = (struct pin_page){.head = h, .len = n};
	k->pages[h + n - 1] = (struct pin_page){.head = h, .len = n};
}

/* First fit of n pages in k: the run's first page, or UINT32_MAX. */
static uint32_t run_take(struct pin_chunk *k, uint32_t n)
{
	if (k->free_pages < n)
		return UINT32_MAX;
	for (uint32_t i = 0; i < k->npages; i += k->pages[i].len) {
		uint32_t len = k->pages[i].len;
		if (k->pages[i].used || len < n)
			continue;
		for (uint32_t j = i; j < i + n; j++)
			k->pages[j] = (struct pin_page){.head = i, .used = 1};
		k->pages[i].len = n;
		if (len > n)
			run_mark_free(k, i + n, len - n);
		k->free_pages -= n;
		return i;
	}
	return UINT32_MAX;
}

/* Gives back the used run at h, merged with free neighbours. */
static void run_release(struct pin_chunk *k, uint32_t h)
{
	uint32_t n = k->pages[h].len;
	k->free_pages += n;
	if (h + n < k->npages && !k->pages[h + n].used)
		n += k->pages[h + n].len;
	if (h > 0 && !k->pages[h - 1].used) {
		uint32_t ph = k->pages[h - 1].head;
		n += h - ph;
		h = ph;
	}
	run_mark_free(k, h, n);
}

/* A run for class c from any chunk, or NULL. */
static char *heap_take(struct tdm__pinned *pool, unsigned c)
{
	uint32_t n = pool->cls[c].run_pages;
	for (struct pin_chunk *k = pool->regular; k != NULL; k = k->next) {
		uint32_t h = run_take(k, n);
		if (h != UINT32_MAX)
			return k->base + ((size_t)h << PIN_PAGE_SHIFT);
	}
	return NULL;
}

static char *heap_take_locked(struct tdm__pinned *pool, unsigned c)
{
	pthread_mutex_lock(&pool->heap_lock); /* the chunk list and their pages */
	char *run = heap_take(pool, c);
	pthread_mutex_unlock(&pool->heap_lock);
	return run;
}

/* Pins `bytes` aligned to 4 KiB. Every failure is -ENOMEM (the pool has no memory to give) and
 * leaves *raw and *base as they were. */
static int pin_host_alloc(struct tdm__pinned *pool, size_t bytes, void **raw, char **base)
{
	struct tdm_gpu *gpu = pool->gpu;
	void *p = NULL;
	/* Relaxed: a hint; at worst one more try at the exact size. */
	if (!atomic_load_explicit(&pool->misaligned, memory_order_relaxed)) {
		if (gpu->ops->host_alloc(gpu->b, bytes, &p) != 0)
			return -ENOMEM;
		if (((uintptr_t)p & (PIN_OS_PAGE - 1)) == 0) {
			*raw = p;
			*base = p;
			return 0;
		}
		gpu->ops->host_free(gpu->b, p);
		atomic_store_explicit(&pool->misaligned, true, memory_order_relaxed);
	}
	/* cudaHostAlloc returns whole pages; a backend that does not (the sim) is asked for a
	 * page more, which the cap and the statistics leave out: it is not what was asked for. */
	if (bytes > SIZE_MAX - PIN_OS_PAGE || gpu->ops->host_alloc(gpu->b, bytes + PIN_OS_PAGE, &p))
		return -ENOMEM;
	*raw = p;
	*base = (char *)(((uintptr_t)p + PIN_OS_PAGE - 1) & ~(uintptr_t)(PIN_OS_PAGE - 1));
	return 0;
}

static void chunk_free(struct tdm__pinned *pool, struct pin_chunk *k)
{
	if (k->raw != NULL)
		pool->gpu->ops->host_free(pool->gpu->b, k->raw);
	free((void *)k->map);
	free(k->pages);
	free(k);
}

/*
 * A dedicated chunk's header back to pool->dead (kept until fini: the file's header), its memory
 * (if any) to the backend. Its `dedicated` is never written again (it stays true), the rest
 * only before it is published.
 */
static void dead_give(struct tdm__pinned *pool, struct pin_chunk *k)
{
	if (k->raw != NULL)
		pool->gpu->ops->host_free(pool->gpu->b, k->raw);
	k->raw = NULL;
	pthread_mutex_lock(&pool->heap_lock); /* pool->dead */
	k->next = pool->dead;
	pool->dead = k;
	pthread_mutex_unlock(&pool->heap_lock);
}

/* A header for a new dedicated chunk: a dead one, or a new one. No lock held. */
static struct pin_chunk *dedicated_header(struct tdm__pinned *pool)
{
	pthread_mutex_lock(&pool->heap_lock); /* pool->dead */
	struct pin_chunk *k = pool->dead;
	if (k != NULL)
		pool->dead = k->next;
	pthread_mutex_unlock(&pool->heap_lock);
	if (k == NULL && (k = calloc(1, sizeof(*k))) != NULL)
		k->dedicated = true;
	return k;
}

/* A new chunk, pinned and private to the caller, not yet published. No lock held. */
static int chunk_new(struct tdm__pinned *pool, size_t bytes, bool dedicated, struct pin_chunk **out)
{
	if (dedicated) {
		struct pin_chunk *d = dedicated_header(pool);
		if (d == NULL)
			return -ENOMEM;
		d->bytes = bytes;
		d->next = d->prev = NULL;
		d->own = false;
		if (pin_host_alloc(pool, bytes, &d->raw, &d->base) != 0) {
			dead_give(pool, d); /* raw is NULL: dead headers' and calloc's */
			return -ENOMEM;
		}
		*out = d;
		return 0;
	}
	struct pin_chunk *k = calloc(1, sizeof(*k));
	if (k == NULL)
		return -ENOMEM;
	k->bytes = bytes;
	k->npages = (uint32_t)(bytes >> PIN_PAGE_SHIFT);
	k->free_pages = k->npages;
	k->pages = malloc(k->npages * sizeof(*k->pages));
	k->map = calloc(bytes >> PIN_GRANULE_SHIFT, 1);
	if (k->pages == NULL || k->map == NULL) {
		chunk_free(pool, k);
		return -ENOMEM;
	}
	run_mark_free(k, 0, k->npages);
	if (pin_host_alloc(pool, bytes, &k->raw, &k->base) != 0) {
		chunk_free(pool, k);
		return -ENOMEM;
	}
	*out = k;
	return 0;
}

/* heap_lock: counts a published chunk in, or out. */
static void chunk_count(struct tdm__pinned *pool, struct pin_chunk *k, int sign)
{
	uint64_t pinned = atomic_load_explicit(&pool->bytes_pinned, memory_order_relaxed);
	uint64_t n = atomic_load_explicit(&pool->nchunks, memory_order_relaxed);
	/* Relaxed: only heap_lock holders write these; readers want a number, not an order. */
	atomic_store_explicit(&pool->bytes_pinned, sign > 0 ? pinned + k->bytes : pinned - k->bytes,
	                      memory_order_relaxed);
	atomic_store_explicit(&pool->nchunks, sign > 0 ? n + 1 : n - 1, memory_order_relaxed);
}

/*
 * heap_lock: withdraws the oldest spares onto *drop until at most `keep` are left and the cap
 * has `room` bytes free. The caller gives them back (spares_free) once it has unlocked.
 */
static void spares_drop(struct tdm__pinned *pool, size_t room, unsigned keep,
                        struct pin_chunk **drop)
{
	while (pool->spares != NULL &&
	       (pool->nspares > keep || pool->cap - pool->reserved < room)) {
		struct pin_chunk *k = pool->spares;
		while (k->next != NULL)
			k = k->next; /* the oldest: frees push at the head */
		list_unlink(&pool->spares, k);
		pool->nspares--;
		radix_set(pool, k, NULL);
		pool->reserved -= k->bytes;
		chunk_count(pool, k, -1);
		k->next = *drop;
		*drop = k;
	}
}

/* No lock held: the dropped spares' memory to the backend, their headers to pool->dead. */
static void spares_free(struct tdm__pinned *pool, struct pin_chunk *drop)
{
	while (drop != NULL) {
		struct pin_chunk *next = drop->next;
		dead_give(pool, drop);
		drop = next;
	}
}

/*
 * grow_lock held: pins a chunk (the chunk size, or what the cap leaves) and takes a run of class
 * c from it in the same critical section, so no other thread can take the room first.
 */
static int grow(struct tdm__pinned *pool, unsigned c, char **run)
{
	size_t need = (size_t)pool->cls[c].run_pages << PIN_PAGE_SHIFT;
	struct pin_chunk *drop = NULL, *k = NULL;
	pthread_mutex_lock(&pool->heap_lock);
	spares_drop(pool, pool->chunk_bytes, UINT32_MAX, &drop);
	size_t bytes = pool->chunk_bytes, room = pool->cap - pool->reserved;
	if (bytes > room)
		bytes = room & ~(PIN_PAGE - 1);
	if (bytes < need) {
		pthread_mutex_unlock(&pool->heap_lock);
		spares_free(pool, drop);
		return -ENOMEM;
	}
	pool->reserved += bytes;
	pthread_mutex_unlock(&pool->heap_lock);
	spares_free(pool, drop);

	int rc = chunk_new(pool, bytes, false, &k);
	pthread_mutex_lock(&pool->heap_lock);
	if (rc == 0 && (rc = radix_set(pool, k, k)) == 0) {
		list_push(&pool->regular, k);
		chunk_count(pool, k, +1);
		*run = heap_take(pool, c);
	} else {
		pool->reserved -= bytes;
	}
	pthread_mutex_unlock(&pool->heap_lock);
	if (rc != 0 && k != NULL)
		chunk_free(pool, k); /* pinned, but the radix tree had no room for it */
	return rc;
}

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
		run_release(k, k->pages[((char *)b - k->base) >> PIN_PAGE_SHIFT].head);
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
	if ((*run = heap_take_locked(pool, c)) != NULL)
		return 0;
	/* Reclaim before pinning more: it costs a walk of the free lists, pinning costs
	 * milliseconds and memory. Relaxed: a hint (empty lists give nothing back). */
	if (atomic_load_explicit(&pool->shared_free, memory_order_relaxed) > 0) {
		reclaim(pool);
		if ((*run = heap_take_locked(pool, c)) != NULL)
			return 0;
	}
	int rc = grow(pool, c, run);
	if (rc == 0)
		return *run != NULL ? 0 : -ENOMEM;
	if (mine == NULL)
		return rc;
	/* At the cap: this worker's own cache may complete a run. */
	cache_flush(pool, mine);
	reclaim(pool);
	*run = heap_take_locked(pool, c);
	return *run != NULL ? 0 : -ENOMEM;
}

/* A new run of class c. May reclaim, and pin a chunk. */
static int run_new(struct tdm__pinned *pool, struct pin_cache *mine, unsigned c, char **run)
{
	if ((*run = heap_take_locked(pool, c)) != NULL)
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
	struct tdm__worker *w = tdm__self_of(pool->ex); /* a worker of ex: index < ex->nworkers */
	return w != NULL ? &pool->caches[w->index] : NULL;
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
		list_unlink(&pool->spares, k);
		pool->nspares--;
		list_push(&pool->dedicated, k);
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
	spares_drop(pool, need, PIN_SPARES - 1, &drop);
	bool room = pool->cap - pool->reserved >= need;
	if (room)
		pool->reserved += need;
	pthread_mutex_unlock(&pool->heap_lock);
	spares_free(pool, drop);
	if (!room)
		return -ENOMEM;

	int rc = chunk_new(pool, need, true, &k);
	pthread_mutex_lock(&pool->heap_lock);
	char *base = NULL;
	if (rc == 0 && (rc = radix_set(pool, k, k)) == 0) {
		list_push(&pool->dedicated, k);
		chunk_count(pool, k, +1);
		k->own = true;
		base = k->base; /* under the lock: once unlocked, a racing stale free may turn k
		                   into a spare whose header is reused */
	} else {
		pool->reserved -= need;
	}
	pthread_mutex_unlock(&pool->heap_lock);
	if (rc != 0) {
		if (k != NULL)
			dead_give(pool, k); /* pinned, but the radix tree had no room for it */
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
	list_unlink(&pool->dedicated, k);
	list_push(&pool->spares, k);
	pool->nspares++;
	/* Read before unlocking: then any thread may drop the spare and reuse its header. */
	int64_t bytes = (int64_t)k->bytes;
	pthread_mutex_unlock(&pool->heap_lock);
	count_shared(pool, mine, -bytes);
	return 0;
}

int tdm_pinned_alloc(tdm_gpu *gpu, size_t bytes, void **out)
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

int tdm_pinned_free(tdm_gpu *gpu, void *p)
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

int tdm_pinned_stats_get(tdm_gpu *gpu, tdm_pinned_stats *out)
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

int tdm__pinned_owns(struct tdm_gpu *gpu, const void *p)
{
	struct tdm__pinned *pool = gpu != NULL ? gpu->pinned : NULL;
	return pool != NULL && p != NULL && radix_get(pool, p) != NULL;
}

int tdm_host_register(tdm_gpu *gpu, void *p, size_t bytes)
{
	if (gpu == NULL || p == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	if (gpu->ops->host_register == NULL)
		return -ENOTSUP;
	return gpu->ops->host_register(gpu->b, p, bytes);
}

int tdm_host_unregister(tdm_gpu *gpu, void *p)
{
	if (gpu == NULL || p == NULL)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	if (gpu->ops->host_unregister == NULL)
		return -ENOTSUP;
	return gpu->ops->host_unregister(gpu->b, p);
}

/* ---- life ---- */

int tdm__pinned_init(struct tdm_gpu *gpu)
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
	pool->nworkers = pool->ex->nworkers;
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

void tdm__pinned_fini(struct tdm_gpu *gpu)
{
	struct tdm__pinned *pool = gpu->pinned;
	if (pool == NULL)
		return;
	struct pin_chunk *lists[] = {pool->regular, pool->dedicated, pool->spares};
	for (unsigned i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		while (lists[i] != NULL) {
			struct pin_chunk *next = lists[i]->next;
			chunk_free(pool, lists[i]);
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
