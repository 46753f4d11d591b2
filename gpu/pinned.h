// SPDX-License-Identifier: MIT
/*
 * The pinned pool's private header: its constants, size classes, structures and the radix
 * tree's lookup, shared by pinned.c (the calls, shared lists, caches, statistics, life) and
 * pinned_heap.c (chunks, runs, the radix tree's writes, growth and spares). The design is at the
 * top of pinned.c.
 */
#ifndef TDM_GPU_PINNED_H
#define TDM_GPU_PINNED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
static inline unsigned class_of(size_t s)
{
	if (s <= 1024)
		return (unsigned)((s - 1) >> PIN_GRANULE_SHIFT);
	size_t t = s - 1;
	unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)t); /* 2^e <= t */
	unsigned k = (unsigned)(t >> (e - 2)) & 3u;                          /* its quarter */
	return 4u + (e - 10u) * 4u + k;
}

/* Classes 0..3: 256..1024; then 2^e + k * 2^(e-2) for k = 1..4 and e = 10, 11, ... */
static inline size_t class_size(unsigned c)
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
	struct tdm__gpu *gpu;
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

/* ---- pinned_heap.c (heap_lock held unless said otherwise) ---- */

void tdm__pin_list_push(struct pin_chunk **head, struct pin_chunk *k);
void tdm__pin_list_unlink(struct pin_chunk **head, struct pin_chunk *k);
void tdm__pin_run_release(struct pin_chunk *k, uint32_t h);
char *tdm__pin_heap_take_locked(struct tdm__pinned *pool, unsigned c);
void tdm__pin_chunk_free(struct tdm__pinned *pool, struct pin_chunk *k);
void tdm__pin_dead_give(struct tdm__pinned *pool, struct pin_chunk *k);
int tdm__pin_chunk_new(struct tdm__pinned *pool, size_t bytes, bool dedicated,
                       struct pin_chunk **out);
void tdm__pin_chunk_count(struct tdm__pinned *pool, struct pin_chunk *k, int sign);
void tdm__pin_spares_drop(struct tdm__pinned *pool, size_t room, unsigned keep,
                          struct pin_chunk **drop);
void tdm__pin_spares_free(struct tdm__pinned *pool, struct pin_chunk *drop);
int tdm__pin_grow(struct tdm__pinned *pool, unsigned c, char **run);
int tdm__pin_radix_set(struct tdm__pinned *pool, struct pin_chunk *k, struct pin_chunk *v);

#endif /* TDM_GPU_PINNED_H */
