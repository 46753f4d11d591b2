// SPDX-License-Identifier: MIT
/*
 * An intrusive multi-producer stack whose consumer takes everything at once (the executor's
 * injection queue and inboxes, the GPU poller's intake). ck_stack offers the same (push_upmc,
 * batch_pop_upmc) but loads its head with plain volatile reads, which ThreadSanitizer reports as
 * races; these few lines in C11 atomics are the same algorithm, checkable by the sanitizer.
 * Taking the whole stack at once is immune to ABA.
 */
#ifndef TDM_BASE_STACK_H
#define TDM_BASE_STACK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct tdm__link {
	struct tdm__link *next;
};

struct tdm__stack {
	_Atomic(struct tdm__link *) head;
};

/* Pushes first..last, already linked, at once. */
static inline void tdm__stack_push_chain(struct tdm__stack *s, struct tdm__link *first,
                                         struct tdm__link *last)
{
	struct tdm__link *h = atomic_load_explicit(&s->head, memory_order_relaxed);
	do
		last->next = h;
	/* Release: the links and what lies behind them reach the consumer's acquire exchange. */
	while (!atomic_compare_exchange_weak_explicit(&s->head, &h, first, memory_order_release,
	                                              memory_order_relaxed));
}

static inline void tdm__stack_push(struct tdm__stack *s, struct tdm__link *e)
{
	tdm__stack_push_chain(s, e, e);
}

/* Newest first. Acquire pairs with the release CAS of every push it takes. */
static inline struct tdm__link *tdm__stack_take_all(struct tdm__stack *s)
{
	if (atomic_load_explicit(&s->head, memory_order_relaxed) == NULL)
		return NULL;
	return atomic_exchange_explicit(&s->head, NULL, memory_order_acquire);
}

static inline bool tdm__stack_empty(struct tdm__stack *s)
{
	return atomic_load_explicit(&s->head, memory_order_relaxed) == NULL;
}

#endif /* TDM_BASE_STACK_H */
