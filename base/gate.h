// SPDX-License-Identifier: MIT
/*
 * A gate for calls that may race the destroy of what they use. A call enters, counted on its
 * thread's stripe (each stripe on its own line, so that concurrent callers do not share one),
 * unless `closed` is set; the destroyer stores `closed` (seq_cst), then waits until every stripe
 * is zero (tdm__gate_drain). Dekker: the entry's seq_cst increment, then its seq_cst load of
 * closed, against the destroyer's seq_cst store of closed, then its seq_cst loads of the
 * stripes: either the call sees closed and backs out, or the destroyer sees its count and waits
 * for its leave. A leave is release: what the call did happens before the drain returns.
 * A call that backs out has touched the gate all the same: the destroyer drains once more right
 * before it frees the gate, so that every call that entered is done with it by then; a call
 * reads nothing else of what is gated before it enters. That narrows the window, not closes it:
 * a call that reaches the gate after the second drain has looked at its stripe touches freed
 * memory. So the users' contract (tandem.h: the executor's) is that a caller racing a destroy is
 * done with its call before something the destroy waits for is over. A gate kept in a handle's
 * type-stable object (tdm__gate_enter_h, base/handle.h: the GPU layer's, a device scheduler's) is
 * never freed, and closes the window: a call may reach it at any time.
 */
#ifndef TDM_BASE_GATE_H
#define TDM_BASE_GATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"

#define TDM__GATE_STRIPES 32
struct tdm__gate {
	struct {
		_Alignas(TDM__CACHELINE) _Atomic unsigned n;
	} stripe[TDM__GATE_STRIPES];
};
/* This thread's stripe + 1 (0 until its first entry); taken in turn (tdm__gate_stripe_new), or
 * set by a thread that knows its place among the gate's users (an executor's worker: its index). */
extern _Thread_local unsigned tdm__gate_mine;
unsigned tdm__gate_stripe_new(void);

/* The stripe entered, or NULL (nothing counted) when closed is set. Inline: hot callers enter
 * on every call. */
static inline _Atomic unsigned *tdm__gate_enter(struct tdm__gate *g, _Atomic int *closed)
{
	unsigned k = tdm__gate_mine != 0 ? tdm__gate_mine - 1 : tdm__gate_stripe_new();
	_Atomic unsigned *n = &g->stripe[k].n;
	/* Seq_cst, both: the Dekker pair with tdm__gate_drain's caller (above). */
	atomic_fetch_add_explicit(n, 1, memory_order_seq_cst);
	if (!atomic_load_explicit(closed, memory_order_seq_cst))
		return n;
	/* Release: pairs with the drain's loads. */
	atomic_fetch_sub_explicit(n, 1, memory_order_release);
	return NULL;
}

/*
 * The same for a gate kept in a handle's object (base/handle.h): the call is let in while the
 * object's word `h` is `want` (the caller's handle, live), as the destroyer stores another value
 * (seq_cst) before its drain. The word's load is the gate's one load of `closed`: the handle's
 * check costs the gate nothing more. The object stays (type-stable), so that a call refused
 * here, even long after the destroy, touched memory that is.
 */
static inline _Atomic unsigned *tdm__gate_enter_h(struct tdm__gate *g, _Atomic uint64_t *h,
                                                  uint64_t want, uint64_t *now)
{
	unsigned k = tdm__gate_mine != 0 ? tdm__gate_mine - 1 : tdm__gate_stripe_new();
	_Atomic unsigned *n = &g->stripe[k].n;
	/* Seq_cst, both: the Dekker pair with tdm__gate_drain's caller, as in tdm__gate_enter; the
	 * load also acquires what the object's create published with its word. */
	atomic_fetch_add_explicit(n, 1, memory_order_seq_cst);
	*now = atomic_load_explicit(h, memory_order_seq_cst);
	if (*now == want)
		return n;
	/* Release: pairs with the drain's loads. */
	atomic_fetch_sub_explicit(n, 1, memory_order_release);
	return NULL;
}

static inline void tdm__gate_leave(_Atomic unsigned *n)
{
	/* Release: pairs with the drain's loads; the caller's last access to what is gated. */
	atomic_fetch_sub_explicit(n, 1, memory_order_release);
}

/* Waits until no call is inside; the caller stored closed (seq_cst) before. */
void tdm__gate_drain(struct tdm__gate *g);

#endif /* TDM_BASE_GATE_H */
