// SPDX-License-Identifier: MIT
/*
 * The pinned pool's heap (pinned.h): chunks pinned from the backend, the runs of pages carved
 * from them, the radix tree's writes, growth within the cap, and the spare dedicated chunks.
 * The design is at the top of pinned.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pinned.h"

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
int tdm__pin_radix_set(struct tdm__pinned *pool, struct pin_chunk *k, struct pin_chunk *v)
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

void tdm__pin_list_push(struct pin_chunk **head, struct pin_chunk *k)
{
	k->prev = NULL;
	k->next = *head;
	if (*head != NULL)
		(*head)->prev = k;
	*head = k;
}

void tdm__pin_list_unlink(struct pin_chunk **head, struct pin_chunk *k)
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
void tdm__pin_run_release(struct pin_chunk *k, uint32_t h)
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

char *tdm__pin_heap_take_locked(struct tdm__pinned *pool, unsigned c)
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
	struct tdm__gpu *gpu = pool->gpu;
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

void tdm__pin_chunk_free(struct tdm__pinned *pool, struct pin_chunk *k)
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
void tdm__pin_dead_give(struct tdm__pinned *pool, struct pin_chunk *k)
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
int tdm__pin_chunk_new(struct tdm__pinned *pool, size_t bytes, bool dedicated,
                       struct pin_chunk **out)
{
	if (dedicated) {
		struct pin_chunk *d = dedicated_header(pool);
		if (d == NULL)
			return -ENOMEM;
		d->bytes = bytes;
		d->next = d->prev = NULL;
		d->own = false;
		if (pin_host_alloc(pool, bytes, &d->raw, &d->base) != 0) {
			tdm__pin_dead_give(pool, d); /* raw is NULL: dead headers' and calloc's */
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
		tdm__pin_chunk_free(pool, k);
		return -ENOMEM;
	}
	run_mark_free(k, 0, k->npages);
	if (pin_host_alloc(pool, bytes, &k->raw, &k->base) != 0) {
		tdm__pin_chunk_free(pool, k);
		return -ENOMEM;
	}
	*out = k;
	return 0;
}

/* heap_lock: counts a published chunk in, or out. */
void tdm__pin_chunk_count(struct tdm__pinned *pool, struct pin_chunk *k, int sign)
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
void tdm__pin_spares_drop(struct tdm__pinned *pool, size_t room, unsigned keep,
                          struct pin_chunk **drop)
{
	while (pool->spares != NULL &&
	       (pool->nspares > keep || pool->cap - pool->reserved < room)) {
		struct pin_chunk *k = pool->spares;
		while (k->next != NULL)
			k = k->next; /* the oldest: frees push at the head */
		tdm__pin_list_unlink(&pool->spares, k);
		pool->nspares--;
		tdm__pin_radix_set(pool, k, NULL);
		pool->reserved -= k->bytes;
		tdm__pin_chunk_count(pool, k, -1);
		k->next = *drop;
		*drop = k;
	}
}

/* No lock held: the dropped spares' memory to the backend, their headers to pool->dead. */
void tdm__pin_spares_free(struct tdm__pinned *pool, struct pin_chunk *drop)
{
	while (drop != NULL) {
		struct pin_chunk *next = drop->next;
		tdm__pin_dead_give(pool, drop);
		drop = next;
	}
}

/*
 * grow_lock held: pins a chunk (the chunk size, or what the cap leaves) and takes a run of class
 * c from it in the same critical section, so no other thread can take the room first.
 */
int tdm__pin_grow(struct tdm__pinned *pool, unsigned c, char **run)
{
	size_t need = (size_t)pool->cls[c].run_pages << PIN_PAGE_SHIFT;
	struct pin_chunk *drop = NULL, *k = NULL;
	pthread_mutex_lock(&pool->heap_lock);
	tdm__pin_spares_drop(pool, pool->chunk_bytes, UINT32_MAX, &drop);
	size_t bytes = pool->chunk_bytes, room = pool->cap - pool->reserved;
	if (bytes > room)
		bytes = room & ~(PIN_PAGE - 1);
	if (bytes < need) {
		pthread_mutex_unlock(&pool->heap_lock);
		tdm__pin_spares_free(pool, drop);
		return -ENOMEM;
	}
	pool->reserved += bytes;
	pthread_mutex_unlock(&pool->heap_lock);
	tdm__pin_spares_free(pool, drop);

	int rc = tdm__pin_chunk_new(pool, bytes, false, &k);
	pthread_mutex_lock(&pool->heap_lock);
	if (rc == 0 && (rc = tdm__pin_radix_set(pool, k, k)) == 0) {
		tdm__pin_list_push(&pool->regular, k);
		tdm__pin_chunk_count(pool, k, +1);
		*run = heap_take(pool, c);
	} else {
		pool->reserved -= bytes;
	}
	pthread_mutex_unlock(&pool->heap_lock);
	if (rc != 0 && k != NULL)
		tdm__pin_chunk_free(pool, k); /* pinned, but the radix tree had no room for it */
	return rc;
}
