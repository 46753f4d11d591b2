// SPDX-License-Identifier: MIT
/*
 * The layer's metrics (tdm_gpu_metrics_*, tandem_gpu.h): per device, the union of its kernel and
 * graph spans, of each copy direction's spans, bytes, and per stream its work and the idle time
 * between; for the layer, a histogram of await round trips. Fed by the stamps (tdm__metrics_span,
 * gpu/stamps.h) and by the await calls and their completions (metrics.h). docs/design/observe.md,
 * "Metrics".
 *
 * Lock rules: m->lock orders the calls of the API (start, stop, get, peak) and is held across
 * tdm__stamps_flush, which calls tdm__metrics_span; a device's lock guards its window and its
 * figures, and is taken by the spans with nothing else held; a shard's lock guards its part of
 * the await table. No lock is held across a call out of this file but the flush.
 *
 * The state the spans and awaits reach (devs, aw) is made at the first start and published with
 * a release store, read with acquire loads: tdm__metrics_on is a relaxed load, so that nothing
 * is published through it.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/observe.h"
#include "base/gate.h"
#include "gpu_internal.h"
#include "iset.h"
#include "metrics.h"
#include "stamps.h"

enum { SET_COMPUTE, SET_H2D, SET_D2H, SETS };

/* ---- per device ---- */

struct mstream {
	uint64_t spans, busy_ns, idle_ns;
	uint64_t last_end; /* the end of its latest span in the window; 0: none yet */
};

struct mdev {
	pthread_mutex_t lock;
	uint64_t win_start, win_end; /* win_end: UINT64_MAX while running */
	struct iset set[SETS];
	uint64_t count[TDM__SPAN_KINDS], bytes[TDM__SPAN_KINDS];
	unsigned nslots; /* both classes' streams: normal 0..n-1, then high */
	unsigned per_class;
	struct mstream *streams;
};

/* ---- await round trips: a log-linear histogram ---- */

/* Values below 16 have a bucket each; each power of two from 16 up is split into 16. */
#define HIST_SUB_BITS 4u
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (HIST_SUB + (64u - HIST_SUB_BITS) * HIST_SUB)

static unsigned hist_index(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	unsigned k = 63u - (unsigned)__builtin_clzll(v); /* k >= HIST_SUB_BITS */
	unsigned sub = (unsigned)(v >> (k - HIST_SUB_BITS)) & (HIST_SUB - 1);
	return HIST_SUB + (k - HIST_SUB_BITS) * HIST_SUB + sub;
}

/* The midpoint of bucket i's values. */
static uint64_t hist_value(unsigned i)
{
	if (i < HIST_SUB)
		return i;
	unsigned shift = (i - HIST_SUB) / HIST_SUB, sub = (i - HIST_SUB) % HIST_SUB;
	uint64_t lo = (uint64_t)(HIST_SUB + sub) << shift, width = 1ull << shift;
	return lo + (width - 1) / 2;
}

/* ---- awaits in flight: the side table ---- */

/* Open addressing, linear probes, kept at most 3/4 full; AW_SHARDS locks spread the awaits of
 * many workers. */
#define AW_SHARDS 64u
#define AW_SLOTS 256u
#define AW_FILL 192u

struct aw_slot {
	const void *task; /* NULL: free */
	uint64_t t0;
};

struct aw_shard {
	_Alignas(TDM__CACHELINE) pthread_mutex_t lock;
	unsigned n;
	struct aw_slot slot[AW_SLOTS];
};

static uint64_t aw_hash(const void *t)
{
	uint64_t x = (uint64_t)(uintptr_t)t;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static unsigned aw_home(const void *t)
{
	return (unsigned)(aw_hash(t) >> 8) & (AW_SLOTS - 1);
}

/* ---- the layer's state ---- */

struct tdm__metrics {
	_Atomic bool on; /* relaxed: a hint; the state it leads to is published by devs and aw */
	int ndev;        /* min(gpu->ndev, TDM_METRICS_MAX_DEVICES) */
	pthread_mutex_t lock;
	bool started, running;                   /* lock */
	uint64_t start_ns, stop_ns;              /* lock */
	uint64_t lost_at_start;                  /* lock: tdm__stamps_lost at the start */
	double peak[TDM_METRICS_MAX_DEVICES][2]; /* lock: H2D, D2H; 0 unknown */
	struct mdev *_Atomic devs;               /* made at the first start (release) */
	struct aw_shard *_Atomic aw;             /* idem */
	_Atomic uint64_t untimed;
	/* Written by every timed completion: lines of their own. */
	_Alignas(TDM__CACHELINE) _Atomic uint64_t hist_sum, hist_max;
	_Atomic uint64_t hist[HIST_BUCKETS];
};

int tdm__metrics_init(struct tdm__gpu *gpu)
{
	struct tdm__metrics *m = aligned_alloc(TDM__CACHELINE, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	memset(m, 0, sizeof(*m));
	m->ndev = gpu->ndev < TDM_METRICS_MAX_DEVICES ? gpu->ndev : TDM_METRICS_MAX_DEVICES;
	pthread_mutex_init(&m->lock, NULL);
	gpu->metrics = m;
	return 0;
}

void tdm__metrics_fini(struct tdm__gpu *gpu)
{
	struct tdm__metrics *m = gpu->metrics;
	if (m == NULL)
		return;
	/* Relaxed: the layer is being freed, nothing else runs (the destroy joined its threads). */
	if (atomic_load_explicit(&m->on, memory_order_relaxed))
		tdm__observe_metrics(false);
	/* Acquire: pairs with the release store in make_state (as every reader's). */
	struct mdev *devs = atomic_load_explicit(&m->devs, memory_order_acquire);
	if (devs != NULL) {
		for (int i = 0; i < m->ndev; i++) {
			for (int k = 0; k < SETS; k++)
				free(devs[i].set[k].v);
			free(devs[i].streams);
			pthread_mutex_destroy(&devs[i].lock);
		}
		free(devs);
	}
	/* Acquire: pairs with the release store in make_state. */
	struct aw_shard *aw = atomic_load_explicit(&m->aw, memory_order_acquire);
	if (aw != NULL) {
		for (unsigned i = 0; i < AW_SHARDS; i++)
			pthread_mutex_destroy(&aw[i].lock);
		free(aw);
	}
	pthread_mutex_destroy(&m->lock);
	free(m);
	gpu->metrics = NULL;
}

bool tdm__metrics_on(const struct tdm__gpu *gpu)
{
	const struct tdm__metrics *m = gpu->metrics;
	/* Relaxed: a hint (tdm__metrics_span and the await table load their state with acquire). */
	return m != NULL && atomic_load_explicit(&m->on, memory_order_relaxed);
}

/* The state of the first start; m->lock held. */
static int make_state(struct tdm__gpu *gpu, struct tdm__metrics *m)
{
	/* Relaxed: m->lock held, under which it is stored. */
	if (atomic_load_explicit(&m->devs, memory_order_relaxed) != NULL)
		return 0;
	struct mdev *devs = calloc(m->ndev > 0 ? (size_t)m->ndev : 1, sizeof(*devs));
	struct aw_shard *aw = aligned_alloc(TDM__CACHELINE, AW_SHARDS * sizeof(*aw));
	if (devs == NULL || aw == NULL)
		goto fail;
	for (int i = 0; i < m->ndev; i++) {
		struct mdev *d = &devs[i];
		d->per_class = gpu->devs[i].nstreams;
		d->nslots = d->per_class * TDM__PRIO_CLASSES;
		d->streams = calloc(d->nslots > 0 ? d->nslots : 1, sizeof(*d->streams));
		if (d->streams == NULL) {
			for (int k = 0; k < i; k++)
				free(devs[k].streams);
			goto fail;
		}
	}
	for (int i = 0; i < m->ndev; i++)
		pthread_mutex_init(&devs[i].lock, NULL);
	memset(aw, 0, AW_SHARDS * sizeof(*aw));
	for (unsigned i = 0; i < AW_SHARDS; i++)
		pthread_mutex_init(&aw[i].lock, NULL);
	/* Release: pairs with the acquire loads in tdm__metrics_span and the await table; the
	 * locks and arrays are made. */
	atomic_store_explicit(&m->devs, devs, memory_order_release);
	atomic_store_explicit(&m->aw, aw, memory_order_release);
	return 0;
fail:
	free(devs);
	free(aw);
	return -ENOMEM;
}

static int metrics_start(struct tdm__gpu *gpu)
{
	struct tdm__metrics *m = gpu->metrics;
	pthread_mutex_lock(&m->lock);
	int rc = make_state(gpu, m);
	if (rc != 0) {
		pthread_mutex_unlock(&m->lock);
		return rc;
	}
	/* Relaxed, both: m->lock held, under which they are stored. */
	struct mdev *devs = atomic_load_explicit(&m->devs, memory_order_relaxed);
	struct aw_shard *aw = atomic_load_explicit(&m->aw, memory_order_relaxed);
	uint64_t now = tdm__now_ns();
	for (int i = 0; i < m->ndev; i++) {
		struct mdev *d = &devs[i];
		pthread_mutex_lock(&d->lock);
		for (int k = 0; k < SETS; k++)
			tdm__iset_reset(&d->set[k]);
		memset(d->count, 0, sizeof(d->count));
		memset(d->bytes, 0, sizeof(d->bytes));
		memset(d->streams, 0, d->nslots * sizeof(*d->streams));
		d->win_start = now;
		d->win_end = UINT64_MAX;
		pthread_mutex_unlock(&d->lock);
	}
	/* Awaits timed before: their entries go (a restart times from here). */
	for (unsigned i = 0; i < AW_SHARDS; i++) {
		pthread_mutex_lock(&aw[i].lock);
		aw[i].n = 0;
		memset(aw[i].slot, 0, sizeof(aw[i].slot));
		pthread_mutex_unlock(&aw[i].lock);
	}
	/* Relaxed: counters; a round trip completing meanwhile may land in either window. */
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		atomic_store_explicit(&m->hist[i], 0, memory_order_relaxed);
	atomic_store_explicit(&m->hist_sum, 0, memory_order_relaxed);
	atomic_store_explicit(&m->hist_max, 0, memory_order_relaxed);
	atomic_store_explicit(&m->untimed, 0, memory_order_relaxed);
	m->start_ns = now;
	m->lost_at_start = tdm__stamps_lost(gpu);
	m->stop_ns = 0;
	m->started = true;
	if (!m->running) {
		m->running = true;
		/* Relaxed: what the stamps and awaits reach from here is published by devs and aw
		 * (release, make_state) and guarded by the devices' and shards' locks. */
		atomic_store_explicit(&m->on, true, memory_order_relaxed);
		tdm__observe_metrics(true);
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int metrics_stop(struct tdm__gpu *gpu)
{
	struct tdm__metrics *m = gpu->metrics;
	pthread_mutex_lock(&m->lock);
	if (!m->running) {
		pthread_mutex_unlock(&m->lock);
		return -EALREADY;
	}
	/* The window ends first; the flush then delivers what ran up to now, cut at the end. */
	uint64_t now = tdm__now_ns();
	/* Relaxed: m->lock held, under which it is stored. */
	struct mdev *devs = atomic_load_explicit(&m->devs, memory_order_relaxed);
	for (int i = 0; i < m->ndev; i++) {
		pthread_mutex_lock(&devs[i].lock);
		devs[i].win_end = now;
		pthread_mutex_unlock(&devs[i].lock);
	}
	tdm__stamps_flush(gpu, false);
	m->stop_ns = now;
	m->running = false;
	/* Relaxed: as in start; spans that still come are cut at the window's end. */
	atomic_store_explicit(&m->on, false, memory_order_relaxed);
	tdm__observe_metrics(false);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int metrics_peak(struct tdm__gpu *gpu, int device, double h2d_gbps, double d2h_gbps)
{
	struct tdm__metrics *m = gpu->metrics;
	if (device < 0 || device >= m->ndev || !isfinite(h2d_gbps) || !isfinite(d2h_gbps) ||
	    h2d_gbps < 0 || d2h_gbps < 0)
		return -EINVAL;
	pthread_mutex_lock(&m->lock);
	m->peak[device][0] = h2d_gbps;
	m->peak[device][1] = d2h_gbps;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* ---- spans ---- */

static void add_span(struct mdev *d, const struct tdm__span *sp)
{
	uint64_t a = sp->start_ns, b = sp->end_ns > sp->start_ns ? sp->end_ns : sp->start_ns;
	if (a >= d->win_end || b < d->win_start)
		return; /* outside the window */
	uint64_t ca = a > d->win_start ? a : d->win_start;
	uint64_t cb = b < d->win_end ? b : d->win_end;
	unsigned kind =
	    (unsigned)sp->kind < TDM__SPAN_KINDS ? (unsigned)sp->kind : TDM__SPAN_KERNEL;
	d->count[kind]++;
	uint64_t bytes = sp->bytes;
	if ((ca != a || cb != b) && b > a) /* cut by the window: its share of the bytes */
		bytes = (uint64_t)((double)bytes * (double)(cb - ca) / (double)(b - a));
	d->bytes[kind] += bytes;
	switch (kind) {
	case TDM__SPAN_KERNEL:
	case TDM__SPAN_GRAPH:
		tdm__iset_add(&d->set[SET_COMPUTE], ca, cb);
		break;
	case TDM__SPAN_H2D:
		tdm__iset_add(&d->set[SET_H2D], ca, cb);
		break;
	case TDM__SPAN_D2H:
		tdm__iset_add(&d->set[SET_D2H], ca, cb);
		break;
	default:
		break;
	}
	if (sp->stream < d->nslots) {
		struct mstream *st = &d->streams[sp->stream];
		st->spans++;
		st->busy_ns += cb - ca;
		if (st->last_end != 0 && ca > st->last_end)
			st->idle_ns += ca - st->last_end;
		if (cb > st->last_end)
			st->last_end = cb;
	}
}

void tdm__metrics_span(struct tdm__gpu *gpu, const struct tdm__span *sp)
{
	struct tdm__metrics *m = gpu->metrics;
	if (m == NULL || sp == NULL || sp->device < 0 || sp->device >= m->ndev)
		return;
	/* Acquire: pairs with the release store in make_state. */
	struct mdev *devs = atomic_load_explicit(&m->devs, memory_order_acquire);
	if (devs == NULL)
		return;
	struct mdev *d = &devs[sp->device];
	pthread_mutex_lock(&d->lock);
	add_span(d, sp);
	pthread_mutex_unlock(&d->lock);
}

/* ---- awaits ---- */

void tdm__metrics_await(struct tdm__gpu *gpu, uint64_t latency_ns)
{
	struct tdm__metrics *m = gpu->metrics;
	if (m == NULL)
		return;
	/* Relaxed: counters, read as a snapshot by tdm_gpu_metrics_get. */
	atomic_fetch_add_explicit(&m->hist[hist_index(latency_ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->hist_sum, latency_ns, memory_order_relaxed);
	uint64_t max = atomic_load_explicit(&m->hist_max, memory_order_relaxed);
	while (latency_ns > max &&
	       !atomic_compare_exchange_weak_explicit(&m->hist_max, &max, latency_ns,
	                                              memory_order_relaxed, memory_order_relaxed)) {
	}
}

static struct aw_shard *aw_table(struct tdm__gpu *gpu)
{
	struct tdm__metrics *m = gpu->metrics;
	/* Acquire: pairs with the release store in make_state. */
	return m != NULL ? atomic_load_explicit(&m->aw, memory_order_acquire) : NULL;
}

void tdm__metrics_await_begin(struct tdm__gpu *gpu, const struct tdm__task *t, uint64_t t0_ns)
{
	struct aw_shard *aw = aw_table(gpu);
	if (aw == NULL)
		return;
	struct aw_shard *sh = &aw[aw_hash(t) & (AW_SHARDS - 1)];
	pthread_mutex_lock(&sh->lock);
	unsigned i = aw_home(t);
	while (sh->slot[i].task != NULL && sh->slot[i].task != t)
		i = (i + 1) & (AW_SLOTS - 1);
	if (sh->slot[i].task == t) {
		sh->slot[i].t0 = t0_ns; /* left from an await that was not seen to end */
	} else if (sh->n < AW_FILL) {
		sh->slot[i] = (struct aw_slot){t, t0_ns};
		sh->n++;
	} else {
		/* Relaxed: a count. */
		atomic_fetch_add_explicit(&gpu->metrics->untimed, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&sh->lock);
}

void tdm__metrics_await_end(struct tdm__gpu *gpu, const struct tdm__task *t)
{
	struct aw_shard *aw = aw_table(gpu);
	if (aw == NULL)
		return;
	struct aw_shard *sh = &aw[aw_hash(t) & (AW_SHARDS - 1)];
	uint64_t t0 = 0;
	bool found = false;
	pthread_mutex_lock(&sh->lock);
	unsigned i = aw_home(t);
	while (sh->slot[i].task != NULL && sh->slot[i].task != t)
		i = (i + 1) & (AW_SLOTS - 1);
	if (sh->slot[i].task == t) {
		found = true;
		t0 = sh->slot[i].t0;
		/* Backward shift: the entries after it that probed past i move up, so that every
		 * entry stays reachable from its home without tombstones. */
		unsigned j = i;
		for (;;) {
			j = (j + 1) & (AW_SLOTS - 1);
			if (sh->slot[j].task == NULL)
				break;
			unsigned h = aw_home(sh->slot[j].task);
			/* Moves when its home is not within (i, j], cyclically. */
			bool between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
			if (!between) {
				sh->slot[i] = sh->slot[j];
				i = j;
			}
		}
		sh->slot[i].task = NULL;
		sh->n--;
	}
	pthread_mutex_unlock(&sh->lock);
	if (found) {
		uint64_t now = tdm__now_ns();
		tdm__metrics_await(gpu, now > t0 ? now - t0 : 0);
	}
}

/* ---- reading ---- */

static double rate(uint64_t bytes, uint64_t ns)
{
	return ns != 0 ? (double)bytes / (double)ns : 0.0; /* bytes per ns: GB/s */
}

static void read_device(struct mdev *d, uint64_t end, const double peak[2], tdm_device_metrics *o)
{
	uint64_t start = d->win_start;
	if (d->win_end < end)
		end = d->win_end;
	o->window_ns = end > start ? end - start : 0;
	o->busy_ns = tdm__iset_total(&d->set[SET_COMPUTE], end);
	o->h2d_ns = tdm__iset_total(&d->set[SET_H2D], end);
	o->d2h_ns = tdm__iset_total(&d->set[SET_D2H], end);
	double w = (double)o->window_ns;
	o->busy_fraction = o->window_ns != 0 ? (double)o->busy_ns / w : 0.0;
	o->kernels = d->count[TDM__SPAN_KERNEL];
	o->graphs = d->count[TDM__SPAN_GRAPH];
	o->copies = d->count[TDM__SPAN_H2D] + d->count[TDM__SPAN_D2H] + d->count[TDM__SPAN_D2D];
	o->memsets = d->count[TDM__SPAN_MEMSET];
	o->h2d_bytes = d->bytes[TDM__SPAN_H2D];
	o->d2h_bytes = d->bytes[TDM__SPAN_D2H];
	o->d2d_bytes = d->bytes[TDM__SPAN_D2D];
	o->memset_bytes = d->bytes[TDM__SPAN_MEMSET];
	o->h2d_fraction = o->window_ns != 0 ? (double)o->h2d_ns / w : 0.0;
	o->d2h_fraction = o->window_ns != 0 ? (double)o->d2h_ns / w : 0.0;
	o->h2d_gbps = rate(o->h2d_bytes, o->h2d_ns);
	o->d2h_gbps = rate(o->d2h_bytes, o->d2h_ns);
	o->h2d_gbps_window = rate(o->h2d_bytes, o->window_ns);
	o->d2h_gbps_window = rate(o->d2h_bytes, o->window_ns);
	o->h2d_peak_gbps = peak[0];
	o->d2h_peak_gbps = peak[1];
	o->h2d_share = peak[0] > 0 ? o->h2d_gbps_window / peak[0] : -1.0;
	o->d2h_share = peak[1] > 0 ? o->d2h_gbps_window / peak[1] : -1.0;
	for (int k = 0; k < SETS; k++)
		o->unplaced_ns += d->set[k].unplaced_ns;
	for (unsigned i = 0; i < d->nslots; i++) {
		const struct mstream *st = &d->streams[i];
		if (st->spans == 0)
			continue;
		if (o->nstreams == TDM_METRICS_MAX_STREAMS) {
			o->streams_over++;
			continue;
		}
		tdm_stream_metrics *so = &o->streams[o->nstreams++];
		so->high = i >= d->per_class;
		so->index = i % d->per_class;
		so->spans = st->spans;
		so->busy_ns = st->busy_ns;
		so->idle_ns = st->idle_ns;
	}
}

/* The value at rank ceil(q% of count) of a snapshot of the buckets. */
static uint64_t percentile(const uint64_t *h, uint64_t count, unsigned q, uint64_t max)
{
	if (count == 0)
		return 0;
	uint64_t rank = (count * q + 99) / 100, seen = 0;
	if (rank == 0)
		rank = 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h[i];
		if (seen >= rank) {
			uint64_t v = hist_value(i);
			return v < max ? v : max;
		}
	}
	return max;
}

static void read_awaits(struct tdm__metrics *m, tdm_await_metrics *o)
{
	uint64_t h[HIST_BUCKETS], count = 0; /* 8 KiB of stack */
	/* Relaxed: a snapshot; counts added meanwhile may be in it or not. */
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		h[i] = atomic_load_explicit(&m->hist[i], memory_order_relaxed);
		count += h[i];
	}
	uint64_t max = atomic_load_explicit(&m->hist_max, memory_order_relaxed);
	o->count = count;
	o->max_ns = max;
	o->p50_ns = percentile(h, count, 50, max);
	o->p99_ns = percentile(h, count, 99, max);
	o->mean_ns =
	    count != 0 ? atomic_load_explicit(&m->hist_sum, memory_order_relaxed) / count : 0;
	o->untimed = atomic_load_explicit(&m->untimed, memory_order_relaxed);
}

static int metrics_get(struct tdm__gpu *gpu, tdm_gpu_metrics *out)
{
	struct tdm__metrics *m = gpu->metrics;
	pthread_mutex_lock(&m->lock);
	if (!m->started) {
		pthread_mutex_unlock(&m->lock);
		return -ENOENT;
	}
	/* What ran up to now, into the figures (cut at the window's end once stopped). */
	tdm__stamps_flush(gpu, false);
	uint64_t end = m->running ? tdm__now_ns() : m->stop_ns;
	memset(out, 0, sizeof(*out));
	out->running = m->running;
	out->start_ns = m->start_ns;
	out->spans_lost = tdm__stamps_lost(gpu) - m->lost_at_start;
	out->end_ns = end;
	out->ndevices = m->ndev;
	/* Relaxed: m->lock held, under which it is stored. */
	struct mdev *devs = atomic_load_explicit(&m->devs, memory_order_relaxed);
	for (int i = 0; i < m->ndev; i++) {
		out->devices[i].device = i;
		pthread_mutex_lock(&devs[i].lock);
		read_device(&devs[i], end, m->peak[i], &out->devices[i]);
		pthread_mutex_unlock(&devs[i].lock);
	}
	read_awaits(m, &out->awaits);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/*
 * The calls, through the layer's gate (TDM__GPU_CALL): a call that races tdm_gpu_destroy either
 * enters before the destroy closes the handle, and the destroy waits for it to leave before it
 * frees anything, or is refused with -ESHUTDOWN.
 */
int tdm_gpu_metrics_start(tdm_gpu *h)
{
	TDM__GPU_CALL(h, metrics_start(gpu));
}

int tdm_gpu_metrics_stop(tdm_gpu *h)
{
	TDM__GPU_CALL(h, metrics_stop(gpu));
}

int tdm_gpu_metrics_peak(tdm_gpu *h, int device, double h2d_gbps, double d2h_gbps)
{
	TDM__GPU_CALL(h, metrics_peak(gpu, device, h2d_gbps, d2h_gbps));
}

int tdm_gpu_metrics_get(tdm_gpu *h, tdm_gpu_metrics *out)
{
	TDM__GPU_CALL(h, out == NULL ? -EINVAL : metrics_get(gpu, out));
}
