// SPDX-License-Identifier: MIT
/*
 * Handles: what a user holds for an object it destroys (a GPU layer, a device scheduler, a DAG,
 * a graph, an event), checked as CUDA's driver checks its own. The pointer the API hands out is
 * not an address: it encodes (generation, index, kind), and the index names an object in its
 * kind's table, whose memory is never freed while the process lives (type-stable: an object's
 * slot holds an object of that kind for ever, reused by later ones). Each object starts with a
 * word `h`, the handle it answers to now. A call checks its handle with one load of that word:
 * equal, the object is live and this handle's; anything else, the call is refused, and the word
 * says why (destroyed, being destroyed, never this kind's). Why this design, and the figures
 * that decided it: docs/design/handles.md.
 *
 *   bits 63..8+n  generation: 1, 2, ... per slot, one more each time the slot is reused
 *   bits 8+n-1..8 index into the kind's table, n = shift + log2(nchunks), at most 24 bits
 *   bits  7..0    the kind's tag (odd, so that no aligned address of any object reads as a
 *                 handle), bits 7 and 6 clear; in the object's word they carry its state
 *
 * A kind's table grows by chunks of 1 << shift objects, each allocated once and never freed, at
 * most nchunks (a power of two) of them; an object takes a power of two of bytes, so that the
 * handle's index is the object's address by masks and shifts, with no bound to compare. Free
 * objects are reused oldest first, so that a stale handle's slot is taken again as late as
 * possible (and then its generation differs: the check still refuses it, until 2^32 or more
 * reuses of one slot wrap its generation).
 */
#ifndef TDM_BASE_HANDLE_H
#define TDM_BASE_HANDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

_Static_assert(sizeof(void *) == 8, "handles encode 64 bits in a pointer");

/* States of an object's word, in its tag byte (a handle handed out has neither bit). */
#define TDM__H_BUSY 0x40ull    /* live, and a call holds it (DAG: its calls exclude each other) */
#define TDM__H_CLOSING 0x80ull /* its destroy began */
#define TDM__H_DEAD 0xc0ull    /* destroyed; the slot is free or waits to be */
#define TDM__H_STATE 0xc0ull
#define TDM__H_TAG 0xffull

/* The first member of every object a table holds. */
struct tdm__hobj {
	/* The handle this object answers to, with its state bits (TDM__H_*); 0 before its first
	 * use. Written with release (or seq_cst) by the object's create and destroy, read with
	 * acquire by the checks, so that a check that finds it equal reads the object as its create
	 * left it. */
	_Atomic uint64_t h;
	uint32_t next_free; /* the next free object's index + 1 (the table's lock) */
};

/* The bytes an object of `size` bytes takes in its table: a power of two, a cache line at least.
 * Folds to a constant for a constant size. */
static inline size_t tdm__h_stride(size_t size)
{
	return size <= TDM__CACHELINE
	           ? TDM__CACHELINE
	           : (size_t)1 << (64 - __builtin_clzll((unsigned long long)size - 1));
}

/* A kind's table: 1 << shift objects a chunk, nchunks chunks at most (a power of two). */
struct tdm__htable {
	const char *kind;
	uint64_t tag;
	unsigned shift, nchunks;
	size_t size;          /* tdm__h_stride of the object's */
	char *_Atomic *chunk; /* nchunks entries, NULL until made */
	pthread_mutex_t lock; /* what follows */
	uint32_t made;        /* objects made: indices 0..made-1 */
	uint32_t head, tail;  /* the free objects, oldest first: index + 1, 0: none */
};

#define TDM__HTABLE_INIT(kind_, tag_, shift_, nchunks_, type_, chunks_)                            \
	{                                                                                          \
		.kind = (kind_), .tag = (tag_), .shift = (shift_), .nchunks = (nchunks_),          \
		.size = sizeof(type_) <= TDM__CACHELINE                                            \
		            ? TDM__CACHELINE                                                       \
		            : (size_t)1 << (64 - __builtin_clzll(sizeof(type_) - 1)),              \
		.chunk = (chunks_), .lock = PTHREAD_MUTEX_INITIALIZER,                             \
	}

/*
 * The object handle h names in a table of these constants, or NULL when h cannot be one of its
 * handles (another tag, a chunk never made): masks and shifts of h, and one load of the chunk's
 * address, which is written once. Whether the object is h's is the caller's one load of its
 * word. Inline with constant arguments, so that the compiler folds the table's shape into the
 * caller.
 */
static inline void *tdm__h_find(char *_Atomic *chunk, uint64_t tag, unsigned shift,
                                unsigned nchunks, size_t size, const void *handle)
{
	uint64_t h = (uint64_t)(uintptr_t)handle;
	if ((h & TDM__H_TAG) != tag)
		return NULL;
	/* Acquire: pairs with the release store that publishes a chunk (tdm__h_take); the
	 * objects' words in it read as made. NULL: no object of that index was ever made. */
	char *c =
	    atomic_load_explicit(&chunk[(h >> (8 + shift)) & (nchunks - 1)], memory_order_acquire);
	if (c == NULL)
		return NULL;
	return c + ((h >> 8) & ((1u << shift) - 1)) * tdm__h_stride(size);
}

/*
 * The object handle h names if it is live and h's now, else NULL: tdm__h_find, then one load of
 * the object's word, which must be its first member (a struct tdm__hobj). Acquire: pairs with
 * tdm__h_publish's release, so what the object's creator set before publishing is seen. For
 * lookups outside a gate; a gate loads the word itself (tdm__gate_enter_h).
 */
static inline void *tdm__h_live(char *_Atomic *chunk, uint64_t tag, unsigned shift,
                                unsigned nchunks, size_t size, const void *handle)
{
	struct tdm__hobj *o = tdm__h_find(chunk, tag, shift, nchunks, size, handle);
	if (o == NULL ||
	    atomic_load_explicit(&o->h, memory_order_acquire) != (uint64_t)(uintptr_t)handle)
		return NULL;
	return o;
}

/* Why a check of handle h against o's word `now` (loaded by that check) failed. */
enum tdm__h_why {
	TDM__H_NOT_HANDLE, /* not a handle of this kind: another kind's, never handed out, garbage
	                    */
	TDM__H_IS_BUSY,    /* h's object is live, and a call holds it */
	TDM__H_IS_CLOSING, /* h's object is being destroyed */
	TDM__H_IS_DEAD,    /* h's object was destroyed */
};

static inline enum tdm__h_why tdm__h_why(const void *o, const void *handle, uint64_t now)
{
	uint64_t h = (uint64_t)(uintptr_t)handle;
	/* h and now name the same object (tdm__h_find): above the tag, they differ by their
	 * generations alone. */
	if (o == NULL || (h & TDM__H_STATE) != 0 || now == 0 || (h >> 8) > (now >> 8))
		return TDM__H_NOT_HANDLE; /* a generation not handed out yet */
	if ((h >> 8) < (now >> 8))
		return TDM__H_IS_DEAD; /* its slot was reused since */
	switch (now & TDM__H_STATE) {
	case TDM__H_BUSY:
		return TDM__H_IS_BUSY;
	case TDM__H_CLOSING:
		return TDM__H_IS_CLOSING;
	case TDM__H_DEAD:
		return TDM__H_IS_DEAD;
	default:
		return TDM__H_NOT_HANDLE; /* live, but not h: cannot be, h's bits being its own */
	}
}

/*
 * A free object of t and its new handle (*h): one freed earliest, else a new one (zeroed, in a
 * new chunk where the last is full). Its word still says what it was (0, or its last handle
 * dead): the caller sets the object up, then publishes *h (tdm__h_publish). NULL: no memory for
 * a chunk, or t holds as many live objects as it can (-ENOMEM for the caller).
 */
void *tdm__h_take(struct tdm__htable *t, uint64_t *h);
/* o is h's from now on: its check succeeds. Release: pairs with the checks' acquire loads. */
static inline void tdm__h_publish(struct tdm__hobj *o, uint64_t h)
{
	atomic_store_explicit(&o->h, h, memory_order_release);
}
/* The bits below a table's generations: tag and index. */
static inline unsigned tdm__h_low_bits(const struct tdm__htable *t)
{
	return 8 + t->shift + (unsigned)__builtin_ctz(t->nchunks);
}

/* The handle after w (a word of t's): the next generation, wrapped past 0 to 1 (0 is the word of
 * an object never used), with w's index and tag. */
static inline uint64_t tdm__h_next(const struct tdm__htable *t, uint64_t w)
{
	unsigned low = tdm__h_low_bits(t);
	uint64_t gen = (w >> low) + 1;
	if ((gen << low) == 0)
		gen = 1;
	return gen << low | (w & ((1ull << low) - 1) & ~TDM__H_STATE);
}

/* The next handle of o, an object of t its caller holds: for kinds whose objects are handed out
 * again without going back to the table (pooled events). Relaxed: only the object's holder
 * changes its generation. */
static inline uint64_t tdm__h_renew(const struct tdm__htable *t, struct tdm__hobj *o)
{
	return tdm__h_next(t, atomic_load_explicit(&o->h, memory_order_relaxed));
}
/* o, destroyed (its word says TDM__H_DEAD), back to t's free objects. */
void tdm__h_put(struct tdm__htable *t, struct tdm__hobj *o);

#endif /* TDM_BASE_HANDLE_H */
