// SPDX-License-Identifier: MIT
/*
 * The sim backend's memory (sim_memory.h): a sorted array of disjoint ranges under a
 * reader-writer lock, searched by binary search. Reads (every copy and kernel the sim runs, and
 * every is_pinned) far outnumber the changes (allocations and frees).
 */
#include "sim_memory.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SIM_HOST_ALIGN ((size_t)64)
#define SIM_DEV_ALIGN ((size_t)256) /* cudaMalloc's alignment */

int tdm__sim_mem_init(struct sim_mem *m, int ndev)
{
	memset(m, 0, sizeof(*m));
	m->held = calloc((size_t)ndev, sizeof(*m->held));
	if (m->held == NULL)
		return -ENOMEM;
	pthread_rwlock_init(&m->lock, NULL);
	return 0;
}

void tdm__sim_mem_fini(struct sim_mem *m)
{
	pthread_rwlock_destroy(&m->lock);
	free(m->r);
	free((void *)m->held);
	memset(m, 0, sizeof(*m));
}

/* The index of the last range that starts at or below a, or -1. Lock held. */
static ptrdiff_t find(const struct sim_mem *m, uintptr_t a)
{
	size_t lo = 0, hi = m->n; /* ranges before lo start at or below a; from hi on, above */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->r[mid].lo <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (ptrdiff_t)lo - 1;
}

/* The range that starts exactly at lo, or -1. Lock held. */
static ptrdiff_t find_start(const struct sim_mem *m, uintptr_t lo)
{
	ptrdiff_t i = find(m, lo);
	return i >= 0 && m->r[i].lo == lo ? i : -1;
}

/*
 * Records [lo, hi). A registration that overlaps a pinned range is -EEXIST, one that overlaps a
 * device block -EINVAL. Device and host blocks are fresh memory: a registration they overlap
 * was freed by its owner without host_unregister, and it goes. -ENOMEM.
 */
static int add(struct sim_mem *m, uintptr_t lo, uintptr_t hi, enum sim_mem_kind kind, int dev)
{
	int rc = 0;
	pthread_rwlock_wrlock(&m->lock);
	ptrdiff_t i = find(m, lo);
	size_t first = i >= 0 && m->r[i].hi > lo ? (size_t)i : (size_t)(i + 1);
	size_t end = first;
	while (end < m->n && m->r[end].lo < hi)
		end++;
	for (size_t k = first; k < end; k++) {
		if (kind == SIM_MEM_REGISTERED) {
			rc = m->r[k].kind == SIM_MEM_DEVICE ? -EINVAL : -EEXIST;
			goto out;
		}
		/* Fresh memory overlaps only what its owner freed unrecorded: a registration.
		 * Anything else recorded is live memory, which no allocator hands out twice. */
		if (m->r[k].kind != SIM_MEM_REGISTERED) {
			rc = -EEXIST;
			goto out;
		}
	}
	if (end > first) {
		memmove(&m->r[first], &m->r[end], (m->n - end) * sizeof(*m->r));
		m->n -= end - first;
	}
	if (m->n == m->cap) {
		size_t cap = m->cap != 0 ? 2 * m->cap : 16;
		struct sim_range *p = realloc(m->r, cap * sizeof(*p));
		if (p == NULL) {
			rc = -ENOMEM;
			goto out;
		}
		m->r = p;
		m->cap = cap;
	}
	memmove(&m->r[first + 1], &m->r[first], (m->n - first) * sizeof(*m->r));
	m->r[first] = (struct sim_range){.lo = lo, .hi = hi, .dev = dev, .kind = kind};
	m->n++;
out:
	pthread_rwlock_unlock(&m->lock);
	return rc;
}

/* Takes off the table the range that starts at lo, if it is as tdm__sim_mem_free wants it: 0 and
 * the range in *out; -EINVAL otherwise, leaving the table as it was. */
static int del(struct sim_mem *m, uintptr_t lo, enum sim_mem_kind kind, int dev, bool freeing,
               struct sim_range *out)
{
	int rc = -EINVAL;
	pthread_rwlock_wrlock(&m->lock);
	ptrdiff_t i = find_start(m, lo);
	if (i >= 0 && m->r[i].kind == kind && m->r[i].freeing == freeing &&
	    (dev < 0 || m->r[i].dev == dev)) {
		*out = m->r[i];
		memmove(&m->r[i], &m->r[i + 1], (m->n - (size_t)i - 1) * sizeof(*m->r));
		m->n--;
		rc = 0;
	}
	pthread_rwlock_unlock(&m->lock);
	return rc;
}

int tdm__sim_mem_alloc(struct sim_mem *m, enum sim_mem_kind kind, int dev, size_t bytes, void **out)
{
	size_t align = kind == SIM_MEM_DEVICE ? SIM_DEV_ALIGN : SIM_HOST_ALIGN;
	if (bytes > SIZE_MAX - align)
		return -ENOMEM;
	if (kind == SIM_MEM_DEVICE) {
		/* Reserve first, so that concurrent allocations never hold more than the device
		 * has. */
		uint64_t held = atomic_load_explicit(&m->held[dev], memory_order_relaxed);
		do {
			if ((uint64_t)bytes > TDM__SIM_DEV_TOTAL - held)
				return -ENOMEM;
		} while (!atomic_compare_exchange_weak_explicit(&m->held[dev], &held, held + bytes,
		                                                memory_order_relaxed,
		                                                memory_order_relaxed));
	}
	/* aligned_alloc wants a multiple of the alignment. */
	void *p = aligned_alloc(align, (bytes + align - 1) & ~(align - 1));
	if (p == NULL || add(m, (uintptr_t)p, (uintptr_t)p + bytes, kind, dev) != 0) {
		free(p);
		if (kind == SIM_MEM_DEVICE)
			atomic_fetch_sub_explicit(&m->held[dev], bytes, memory_order_relaxed);
		return -ENOMEM;
	}
	*out = p;
	return 0;
}

int tdm__sim_mem_free(struct sim_mem *m, void *p, enum sim_mem_kind kind, int dev, bool freeing)
{
	struct sim_range r;
	int rc = del(m, (uintptr_t)p, kind, dev, freeing, &r);
	if (rc != 0)
		return rc;
	if (kind == SIM_MEM_DEVICE)
		atomic_fetch_sub_explicit(&m->held[r.dev], r.hi - r.lo, memory_order_relaxed);
	free(p); /* off the table first: no stream thread reaches it any more */
	return 0;
}

int tdm__sim_mem_set_freeing(struct sim_mem *m, const void *p, bool on)
{
	int rc = -EINVAL;
	pthread_rwlock_wrlock(&m->lock);
	ptrdiff_t i = find_start(m, (uintptr_t)p);
	if (i >= 0 && m->r[i].kind == SIM_MEM_DEVICE && m->r[i].freeing != on) {
		m->r[i].freeing = on;
		rc = 0;
	}
	pthread_rwlock_unlock(&m->lock);
	return rc;
}

int tdm__sim_mem_register(struct sim_mem *m, void *p, size_t bytes)
{
	if ((uintptr_t)p > UINTPTR_MAX - bytes)
		return -EINVAL;
	return add(m, (uintptr_t)p, (uintptr_t)p + bytes, SIM_MEM_REGISTERED, -1);
}

int tdm__sim_mem_unregister(struct sim_mem *m, void *p)
{
	struct sim_range r;
	return del(m, (uintptr_t)p, SIM_MEM_REGISTERED, -1, false, &r);
}

int tdm__sim_mem_is_pinned(struct sim_mem *m, const void *p)
{
	uintptr_t a = (uintptr_t)p;
	pthread_rwlock_rdlock(&m->lock);
	ptrdiff_t i = find(m, a);
	int pinned = i >= 0 && a < m->r[i].hi && m->r[i].kind != SIM_MEM_DEVICE;
	pthread_rwlock_unlock(&m->lock);
	return pinned;
}

uint64_t tdm__sim_mem_free_bytes(struct sim_mem *m, int dev)
{
	return TDM__SIM_DEV_TOTAL - atomic_load_explicit(&m->held[dev], memory_order_relaxed);
}

void tdm__sim_mem_read_begin(struct sim_mem *m)
{
	pthread_rwlock_rdlock(&m->lock);
}

void tdm__sim_mem_read_end(struct sim_mem *m)
{
	pthread_rwlock_unlock(&m->lock);
}

bool tdm__sim_mem_reaches(const struct sim_mem *m, const void *p, size_t bytes, bool freeing_ok)
{
	if (bytes == 0)
		return true;
	uintptr_t a = (uintptr_t)p;
	if (a > UINTPTR_MAX - bytes)
		return false;
	ptrdiff_t i = find(m, a);
	if (i < 0 || a + bytes > m->r[i].hi)
		return false; /* before every range, or past the end of the one it starts in */
	return m->r[i].kind != SIM_MEM_DEVICE || !m->r[i].freeing || freeing_ok;
}
