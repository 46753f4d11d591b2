// SPDX-License-Identifier: MIT
/* The gate (gate.h): stripes taken in turn, and the drain. */
#include <sched.h>

#include "gate.h"

_Thread_local unsigned tdm__gate_mine;

/* This thread's stripe of every gate: threads take them in turn, at their first entry. */
unsigned tdm__gate_stripe_new(void)
{
	static _Atomic unsigned next;
	tdm__gate_mine =
	    atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % TDM__GATE_STRIPES + 1;
	return tdm__gate_mine - 1;
}

void tdm__gate_drain(struct tdm__gate *g)
{
	/* Seq_cst: the other half of the Dekker pair (gate.h). */
	for (unsigned i = 0; i < TDM__GATE_STRIPES; i++)
		while (atomic_load_explicit(&g->stripe[i].n, memory_order_seq_cst) != 0)
			sched_yield();
}
