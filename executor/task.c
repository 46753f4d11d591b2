// SPDX-License-Identifier: MIT
/*
 * Task memory. Tasks are one cache line each, carved from aligned slabs (internal.h). Each worker
 * keeps a private free list (no atomics on the hot path); a worker whose list grows long (it
 * frees tasks that others allocated) gives a batch back to the executor's pool, and a worker
 * whose list is empty takes a batch from the pool or a new slab. Threads that are not workers
 * allocate from the pool under its lock. Slabs are freed only by tdm__task_pool_fini().
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TDM__SLAB_TASKS (TDM__SLAB_BYTES / TDM__CACHELINE - 1) /* the first line is the header */
/* Tasks a worker's cache takes from the pool at once, and keeps at most twice over: the pool lock
 * is taken once per batch, not per task. */
#define TDM__CACHE_BATCH 128

_Static_assert(sizeof(struct tdm__task) == TDM__CACHELINE, "a task is one cache line");

/* pool_lock held. Links a new slab's tasks and returns the first; NULL on ENOMEM. */
static struct tdm__link *pool_new_slab(struct tdm_executor *ex)
{
	struct tdm__slab *slab = aligned_alloc(TDM__SLAB_BYTES, TDM__SLAB_BYTES);
	if (slab == NULL)
		return NULL;
	slab->ex = ex;
	slab->next = ex->slabs;
	ex->slabs = slab;
	struct tdm__task *tasks = (struct tdm__task *)(void *)((char *)slab + TDM__CACHELINE);
	for (unsigned i = 0; i < TDM__SLAB_TASKS - 1; i++)
		tasks[i].link.next = &tasks[i + 1].link;
	tasks[TDM__SLAB_TASKS - 1].link.next = NULL;
	return &tasks[0].link;
}

/* Takes up to `want` tasks from the pool (or a new slab) as a NULL-terminated list. */
static struct tdm__link *pool_take(struct tdm_executor *ex, unsigned want, unsigned *got)
{
	pthread_mutex_lock(&ex->pool_lock);
	struct tdm__link *first = ex->pool_free;
	if (first == NULL) {
		first = pool_new_slab(ex);
		if (first == NULL) {
			pthread_mutex_unlock(&ex->pool_lock);
			*got = 0;
			return NULL;
		}
		ex->pool_free = first;
	}
	struct tdm__link *last = first;
	unsigned n = 1;
	while (n < want && last->next != NULL) {
		last = last->next;
		n++;
	}
	ex->pool_free = last->next;
	last->next = NULL;
	pthread_mutex_unlock(&ex->pool_lock);
	*got = n;
	return first;
}

struct tdm__task *tdm__task_alloc(struct tdm_executor *ex, struct tdm__worker *w)
{
	struct tdm__link *l;
	if (w != NULL) {
		if (w->free == NULL) {
			w->free = pool_take(ex, TDM__CACHE_BATCH, &w->nfree);
			if (w->free == NULL)
				return NULL;
		}
		l = w->free;
		w->free = l->next;
		w->nfree--;
	} else {
		unsigned got;
		l = pool_take(ex, 1, &got);
		if (l == NULL)
			return NULL;
	}
	struct tdm__task *t = tdm__task_of(l);
	memset(t, 0, sizeof(*t));
	return t;
}

void tdm__task_free(struct tdm_executor *ex, struct tdm__worker *w, struct tdm__task *t)
{
	if (w != NULL) {
		t->link.next = w->free;
		w->free = &t->link;
		if (++w->nfree < 2 * TDM__CACHE_BATCH)
			return;
		/* Give the older half back so a worker that only frees cannot hoard memory. */
		struct tdm__link *keep_last = w->free;
		for (unsigned i = 1; i < TDM__CACHE_BATCH; i++)
			keep_last = keep_last->next;
		struct tdm__link *give = keep_last->next, *give_last = give;
		while (give_last->next != NULL)
			give_last = give_last->next;
		keep_last->next = NULL;
		w->nfree = TDM__CACHE_BATCH;
		pthread_mutex_lock(&ex->pool_lock);
		give_last->next = ex->pool_free;
		ex->pool_free = give;
		pthread_mutex_unlock(&ex->pool_lock);
		return;
	}
	pthread_mutex_lock(&ex->pool_lock);
	t->link.next = ex->pool_free;
	ex->pool_free = &t->link;
	pthread_mutex_unlock(&ex->pool_lock);
}

void tdm__task_pool_fini(struct tdm_executor *ex)
{
	for (struct tdm__slab *s = ex->slabs, *next; s != NULL; s = next) {
		next = s->next;
		free(s);
	}
	ex->slabs = NULL;
	ex->pool_free = NULL;
}
