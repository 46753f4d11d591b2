// SPDX-License-Identifier: MIT
/*
 * The await calls' and the poller's side of the metrics (gpu/metrics.c; the stamps' side is in
 * stamps.h). An await made while its layer's metrics are on is timed from its call to the moment
 * its completion is seen, by the poller (add_wake) or by the worker that held it (held_poll).
 * A task's await slot has no word to spare for the call's time (executor/await.h: link, obj and
 * seq are all the awaitable's, and a stream await uses all three), so the time waits in a side
 * table of the layer's, keyed by the task, from the call to the completion.
 */
#ifndef TDM_GPU_METRICS_H
#define TDM_GPU_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/observe.h"
#include "stamps.h"

struct tdm__task;

/* t's await, made at t0_ns, is timed: its time is kept until its completion. Called before t is
 * handed to whoever completes it. A full table leaves it untimed (counted). Any thread. */
void tdm__metrics_await_begin(struct tdm__gpu *gpu, const struct tdm__task *t, uint64_t t0_ns);
/* t's await completed, seen now: its round trip goes to the histogram if it was timed. */
void tdm__metrics_await_end(struct tdm__gpu *gpu, const struct tdm__task *t);

/* At an await call: the time to keep for it, 0 while the layer's metrics are off. Off, it costs
 * one relaxed load of tdm__obs (unless another observer is on). */
static inline uint64_t tdm__metrics_await_t0(const struct tdm__gpu *gpu)
{
	if (!tdm__observing() || !tdm__metrics_on(gpu))
		return 0;
	return tdm__now_ns();
}

/* At a completion of t's await, however it ended. Off, one relaxed load of tdm__obs. An await
 * timed while on that completes after tdm_gpu_metrics_stop keeps its entry until the next start
 * clears the table. */
static inline void tdm__metrics_await_done(struct tdm__gpu *gpu, const struct tdm__task *t)
{
	if (tdm__observing() && tdm__metrics_on(gpu))
		tdm__metrics_await_end(gpu, t);
}

#endif /* TDM_GPU_METRICS_H */
