// SPDX-License-Identifier: MIT
/*
 * Device-side stamps (gpu/stamps.c): while a trace records or a layer's metrics are on, every
 * launch made through the launch gate (tdm_launch_begin/end, and tandem's own copies, memsets,
 * kernels and graph launches) is followed on its stream by a timer the device records itself
 * (a CUDA timing event; on sim, an event that keeps the time a device would have run it at), and
 * one launch in 16 is preceded by one too (a trace without metrics times at most
 * TANDEM_STAMPS_RATE launches a second, 50,000 by default, and counts the others). A thread of the
 * layer's own resolves them every millisecond into spans of device time in tdm_now_ns's clock,
 * which go to the trace (a track per stream) and to the metrics (gpu/metrics.c).
 * docs/design/observe.md, "GPU spans".
 */
#ifndef TDM_GPU_STAMPS_H
#define TDM_GPU_STAMPS_H

#include <stdbool.h>
#include <stdint.h>

struct tdm__gpu;
struct tdm_stream;
struct tdm__stream;

/* What a span's work was. */
enum tdm__span_kind {
	TDM__SPAN_KERNEL, /* a kernel: the user's (tdm_launch_begin/end), or tandem's own */
	TDM__SPAN_H2D,    /* a copy host to device (bytes) */
	TDM__SPAN_D2H,    /* device to host */
	TDM__SPAN_D2D,    /* device to device, or between devices */
	TDM__SPAN_MEMSET, /* a memset (bytes) */
	TDM__SPAN_GRAPH,  /* a graph's replay */
	TDM__SPAN_KINDS
};

/* One piece of device work, resolved. */
struct tdm__span {
	uint64_t start_ns, end_ns; /* device-side, in tdm_now_ns's clock; start <= end */
	uint64_t bytes;            /* copies and memsets; 0 otherwise */
	int device;
	unsigned stream; /* the stream's index among its device's streams (tdm__gdev.streams) */
	enum tdm__span_kind kind;
};

/* ---- metrics.c: fed by the stamps, read by tdm_gpu_metrics_get ---- */

/* A span resolved while metrics are on; called in each stream's order (one stream's spans come
 * in order of start), from any thread, for any stream at once. */
void tdm__metrics_span(struct tdm__gpu *gpu, const struct tdm__span *sp);
/* An await of the layer completed latency_ns after it was made (the await call to the moment
 * its completion was seen); any thread. */
void tdm__metrics_await(struct tdm__gpu *gpu, uint64_t latency_ns);
/* The layer's metrics state: made with the layer, freed with it. */
int tdm__metrics_init(struct tdm__gpu *gpu);
void tdm__metrics_fini(struct tdm__gpu *gpu);
/* Whether the layer's metrics are on (tdm_gpu_metrics_start .. stop): a relaxed load. */
bool tdm__metrics_on(const struct tdm__gpu *gpu);

/* ---- stamps.c ---- */

/* The gate's enqueue on lease s begins and ends (only while tdm__observing()): brackets it with
 * stamps when the trace records or s's layer has metrics on, and s is not capturing. */
void tdm__stamp_begin(struct tdm_stream *s, enum tdm__span_kind kind, uint64_t bytes);
void tdm__stamp_end(struct tdm_stream *s);
/* Resolves the stamps of the layer that have happened (the layer's stamps thread every
 * millisecond while stamping, the trace's stop and tdm_gpu_metrics_get before they read); wait:
 * also those still pending, waiting for them up to 2 s in all (stop, destroy). */
void tdm__stamps_flush(struct tdm__gpu *gpu, bool wait);
/* Spans lost since the layer began: a monotonic count (the metrics take their window's). */
uint64_t tdm__stamps_lost(struct tdm__gpu *gpu);
/* Launches a trace left untimed (its pace) since the layer began: a monotonic count. */
uint64_t tdm__stamps_untimed(struct tdm__gpu *gpu);
int tdm__stamps_init(struct tdm__gpu *gpu);
void tdm__stamps_fini(struct tdm__gpu *gpu);

#endif /* TDM_GPU_STAMPS_H */
