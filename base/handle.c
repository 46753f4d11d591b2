// SPDX-License-Identifier: MIT
/* Handle tables (handle.h): taking and giving back objects, under each table's lock. */
#include <stdlib.h>
#include <string.h>

#include "handle.h"

static struct tdm__hobj *obj_at(struct tdm__htable *t, uint32_t i)
{
	/* Relaxed: the caller holds the lock, under which every chunk was published. */
	char *c = atomic_load_explicit(&t->chunk[i >> t->shift], memory_order_relaxed);
	return (struct tdm__hobj *)(void *)(c + (size_t)(i & ((1u << t->shift) - 1)) * t->size);
}

void *tdm__h_take(struct tdm__htable *t, uint64_t *h)
{
	struct tdm__hobj *o = NULL;
	uint32_t i = 0;
	pthread_mutex_lock(&t->lock);
	if (t->head != 0) {
		i = t->head - 1;
		o = obj_at(t, i);
		t->head = o->next_free;
		if (t->head == 0)
			t->tail = 0;
	} else if (t->made < ((uint64_t)t->nchunks << t->shift)) {
		i = t->made;
		if ((i & ((1u << t->shift) - 1)) == 0) {
			size_t bytes = t->size << t->shift;
			char *c = aligned_alloc(TDM__CACHELINE, bytes);
			if (c == NULL) {
				pthread_mutex_unlock(&t->lock);
				return NULL;
			}
			memset(c, 0, bytes);
			/* Release: pairs with the acquire load in tdm__h_find; a check through the
			 * new chunk reads its zeroed words. Never freed: the table's objects stay
			 * for the process's life, so that a stale handle's check reads memory that
			 * is. */
			atomic_store_explicit(&t->chunk[i >> t->shift], c, memory_order_release);
		}
		t->made++;
		o = obj_at(t, i);
	}
	if (o != NULL) {
		o->next_free = 0;
		/* Relaxed: only takes and puts, under this lock, change the generation (and an
		 * event's holder, tdm__h_renew). */
		uint64_t w = atomic_load_explicit(&o->h, memory_order_relaxed);
		*h = tdm__h_next(t, w != 0 ? w : (uint64_t)i << 8 | t->tag);
	}
	pthread_mutex_unlock(&t->lock);
	return o;
}

void tdm__h_put(struct tdm__htable *t, struct tdm__hobj *o)
{
	/* Relaxed: the index is the object's own, fixed since its chunk was made. */
	uint64_t w = atomic_load_explicit(&o->h, memory_order_relaxed);
	uint32_t i = (uint32_t)((w >> 8) & ((1ull << (tdm__h_low_bits(t) - 8)) - 1));
	pthread_mutex_lock(&t->lock);
	o->next_free = 0;
	if (t->tail != 0)
		obj_at(t, t->tail - 1)->next_free = i + 1;
	else
		t->head = i + 1;
	t->tail = i + 1;
	pthread_mutex_unlock(&t->lock);
}
