// SPDX-License-Identifier: MIT
/*
 * The Chase-Lev work-stealing deque, in the C11 formulation proved correct on weak memory models
 * by Lê, Pop, Cohen and Zappa Nardelli ("Correct and Efficient Work-Stealing for Weak Memory
 * Models", PPoPP 2013). The owner pushes and takes at the bottom; thieves steal at the top.
 *
 * Two deliberate departures from the paper's figure, both at least as strong:
 * - push publishes `bottom` with a release store instead of a release fence followed by a
 *   relaxed store, and steal reads `bottom` with an acquire load. Same ordering on every target,
 *   and ThreadSanitizer (which does not model standalone fences) can see the happens-before edge
 *   from the writes to a task to the thief that runs it.
 * - Buffers replaced by growth are not freed while thieves may still read them: they are kept on
 *   a retired list until tdm__deque_fini(). Growth doubles, so retired buffers together hold
 *   fewer slots than the live one: memory stays within 2x of the high-water mark.
 *
 * Items are pointers other than NULL and TDM__DEQUE_ABORT (tasks are cache-line aligned). The
 * owner calls tdm__deque_push and tdm__deque_take; any thread may steal.
 */
#ifndef TDM_DEQUE_H
#define TDM_DEQUE_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/cpu.h"

/* Returned by steal when it lost a race with the owner or another thief: try again. */
#define TDM__DEQUE_ABORT ((void *)(uintptr_t)1)

struct tdm__deque_buf {
	int64_t mask; /* capacity - 1; capacity is a power of two */
	struct tdm__deque_buf *retired_next;
	_Atomic(void *) slot[];
};

struct tdm__deque {
	/* Thieves CAS top; keep it off the owner's line so pushes do not bounce it. */
	_Alignas(TDM__CACHELINE) _Atomic int64_t top;
	char pad0_[TDM__CACHELINE - sizeof(_Atomic int64_t)];
	_Alignas(TDM__CACHELINE) _Atomic int64_t bottom;
	_Atomic(struct tdm__deque_buf *) buf;
	struct tdm__deque_buf *retired; /* owner only */
	char pad1_[TDM__CACHELINE - sizeof(_Atomic int64_t) - 2 * sizeof(void *)];
};

static inline struct tdm__deque_buf *tdm__deque_buf_new(int64_t capacity)
{
	struct tdm__deque_buf *b = malloc(sizeof(*b) + (size_t)capacity * sizeof(_Atomic(void *)));
	if (b == NULL)
		return NULL;
	b->mask = capacity - 1;
	b->retired_next = NULL;
	return b;
}

static inline int tdm__deque_init(struct tdm__deque *d, unsigned log2_capacity)
{
	if (log2_capacity > 30)
		return -EINVAL;
	struct tdm__deque_buf *b = tdm__deque_buf_new((int64_t)1 << log2_capacity);
	if (b == NULL)
		return -ENOMEM;
	atomic_init(&d->top, 0);
	atomic_init(&d->bottom, 0);
	atomic_init(&d->buf, b);
	d->retired = NULL;
	return 0;
}

/* No other thread may use d any more. */
static inline void tdm__deque_fini(struct tdm__deque *d)
{
	free(atomic_load_explicit(&d->buf, memory_order_relaxed));
	for (struct tdm__deque_buf *r = d->retired, *next; r != NULL; r = next) {
		next = r->retired_next;
		free(r);
	}
	d->retired = NULL;
	atomic_store_explicit(&d->buf, NULL, memory_order_relaxed);
}

/* Owner only. Copies the live range [t, b) into a buffer twice the size. */
static inline struct tdm__deque_buf *
tdm__deque_grow(struct tdm__deque *d, struct tdm__deque_buf *old, int64_t t, int64_t b)
{
	struct tdm__deque_buf *n = tdm__deque_buf_new((old->mask + 1) * 2);
	if (n == NULL)
		return NULL;
	for (int64_t i = t; i < b; i++)
		atomic_store_explicit(
		    &n->slot[i & n->mask],
		    atomic_load_explicit(&old->slot[i & old->mask], memory_order_relaxed),
		    memory_order_relaxed);
	/*
	 * Release: a thief that loads the new buffer (acquire, in steal) sees the copied slots.
	 * The old buffer stays readable (retired, not freed) for thieves that loaded it before.
	 */
	atomic_store_explicit(&d->buf, n, memory_order_release);
	old->retired_next = d->retired;
	d->retired = old;
	return n;
}

static inline int tdm__deque_push(struct tdm__deque *d, void *item)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
	/* Acquire pairs with the CAS on top in steal/take: a slot a thief took is free again. */
	int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
	struct tdm__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
	if (b - t > a->mask) {
		a = tdm__deque_grow(d, a, t, b);
		if (a == NULL)
			return -ENOMEM;
	}
	atomic_store_explicit(&a->slot[b & a->mask], item, memory_order_relaxed);
	/*
	 * Release: publishes the slot (and everything the owner wrote to the item before the
	 * push) to the thief whose acquire load of bottom sees b + 1 (in tdm__deque_steal).
	 */
	atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
	return 0;
}

static inline void *tdm__deque_take(struct tdm__deque *d)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
	struct tdm__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
	atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
	/*
	 * Seq_cst fence: orders the store of bottom before the load of top. Pairs with the
	 * seq_cst fence in steal (between its load of top and its load of bottom): either the
	 * thief sees the decremented bottom, or the owner sees the thief's incremented top, so
	 * owner and thief never both take the last item.
	 */
	atomic_thread_fence(memory_order_seq_cst);
	int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
	void *x = NULL;
	if (t <= b) {
		x = atomic_load_explicit(&a->slot[b & a->mask], memory_order_relaxed);
		if (t == b) {
			/*
			 * Last item: race the thieves for it through top. Seq_cst, as in the
			 * paper: an RMW on top like the thieves' CAS in tdm__deque_steal, so
			 * only one of them moves top from t and takes the item.
			 */
			if (!atomic_compare_exchange_strong_explicit(
			        &d->top, &t, t + 1, memory_order_seq_cst, memory_order_relaxed))
				x = NULL;
			atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
		}
	} else {
		atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
	}
	return x;
}

static inline void *tdm__deque_steal(struct tdm__deque *d)
{
	/* Acquire, as in the paper: pairs with the release half of the seq_cst CAS on top (in
	 * tdm__deque_take, or another thief's here) that wrote the value read. */
	int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
	/* Seq_cst fence: pairs with the one in take (see there). */
	atomic_thread_fence(memory_order_seq_cst);
	/* Acquire pairs with the release store of bottom in push: the slot is written. */
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
	if (t >= b)
		return NULL;
	/* Acquire pairs with the release store in grow: the copied slots are visible. */
	struct tdm__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_acquire);
	void *x = atomic_load_explicit(&a->slot[t & a->mask], memory_order_relaxed);
	/*
	 * The CAS claims slot t; on failure someone else did and x must not be used. Seq_cst, as
	 * in the paper: against the owner's last-item CAS in take, one of them wins; its release
	 * half pairs with the acquire load of top in push (slot t is reused only after x is read).
	 */
	if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
	                                             memory_order_relaxed))
		return TDM__DEQUE_ABORT;
	return x;
}

/* Approximate: exact only when no other thread uses d. */
static inline int64_t tdm__deque_size(const struct tdm__deque *d)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
	int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
	return b > t ? b - t : 0;
}

static inline size_t tdm__deque_capacity(const struct tdm__deque *d)
{
	return (size_t)atomic_load_explicit(&d->buf, memory_order_relaxed)->mask + 1;
}

#endif /* TDM_DEQUE_H */
