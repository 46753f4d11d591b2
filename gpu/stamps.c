/*
 * Device-side stamps (stamps.h; docs/design/observe.md, "GPU spans").
 *
 * While the trace records or the layer's metrics are on, every launch through the gate is
 * followed on its stream by a timer record (t1), and one launch in SAMPLE_EVERY per stream, and
 * each first one, is also preceded by one (t0). A thread of the layer's own, started at the
 * first stamp, resolves the streams' queues every millisecond into spans of device time:
 *
 * - the end is t1: when the stream finished the launch's work (exact, to the timer's 0.5 us);
 * - the start is the latest of: the end of the stream's previous span (a stream runs its work
 *   in order), and the moment the launch reached the device. That moment is the host's clock
 *   when the launch call returned plus the device's submission latency, learned from the t0
 *   samples: a t0 recorded on an idle stream runs that latency after its record call, so the
 *   smallest (t0 on the device - host time before its record) over the recent samples is it
 *   (it also absorbs the error of the backend's anchor between the clocks). A
 *   t0 recorded before the launch would itself be a start too early by the launch call's own
 *   length (about 5 us on the H200) on an idle stream: it is only a lower bound.
 *
 * Spans go to the stream's trace track and to the metrics. The same thread samples the trace's
 * counters. Stamps are pooled per stream, at most MAX_STAMPS: a launch that finds none free is
 * not stamped and is counted lost (the trace's "GPU spans lost" counter, and a line on stderr).
 *
 * Locks: a stream's sq.lock guards its queue, free list and the record of t1 with the append
 * (so two tasks sharing a stream append in the order their records reach it); `resolve`
 * serialises resolvers (the thread, a trace's stop, a metrics read, destroy), which alone
 * write the tracks, each stream's last_end and the devices' latency estimates.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/observe.h"
#include "gpu_internal.h"
#include "stamps.h"

#define MAX_STAMPS 4096u          /* stamps per stream */
#define SAMPLE_EVERY 16u          /* a t0 on one launch in this many, per stream */
#define PERIOD_NS 1000000ull      /* the resolver's period */
#define WAIT_MAX_NS 2000000000ull /* how long a flush that waits waits for a stream's work */
#define DRIFT_NS_PER_S 1000ull    /* how fast the latency estimate may rise (see latency) */

struct stamp {
	void *t0, *t1;
	struct stamp *next;
	struct stamp *all_next; /* every stamp of the stream, for fini */
	bool sampled;           /* t0 recorded */
	uint64_t host_t0;       /* host clock before t0's record call */
	uint64_t host_launch;   /* host clock as the launch call began */
	uint64_t host_end;      /* host clock after the launch call returned */
	uint64_t bytes;
	uint64_t launch; /* the launch flow's id; 0: none */
	uint64_t task;   /* the launching task's next await flow; 0: none */
	enum tdm__span_kind kind;
};

/* Per device, the resolver's: device time - host time of a submission reaching the device. */
struct latency {
	bool known;
	int64_t ns;
	uint64_t at; /* host clock of the estimate's last change */
};

struct tdm__stamps {
	pthread_mutex_t resolve;
	struct latency *lat;               /* resolve: per device */
	struct tdm__track *counters;       /* resolve */
	uint64_t last_sweeps, last_sleeps; /* resolve */
	unsigned layer;                    /* the process's layers, numbered from 1 */
	_Atomic uint64_t lost;             /* relaxed: a count */
	_Atomic int first_error;           /* relaxed: the first error that lost a span */

	pthread_mutex_t tlock; /* the thread's life */
	pthread_cond_t cond;   /* tlock: stop */
	pthread_t thread;      /* tlock */
	bool stop;             /* tlock */
	/* Written under tlock; read relaxed by launches as a hint (start_thread looks again). */
	_Atomic bool started;
};

static bool stamping(const struct tdm_gpu *gpu)
{
	return tdm__tracing() || tdm__metrics_on(gpu);
}

static void lose(struct tdm__stamps *ss, int rc)
{
	/* Relaxed, both: counts for a report. */
	atomic_fetch_add_explicit(&ss->lost, 1, memory_order_relaxed);
	int none = 0;
	atomic_compare_exchange_strong_explicit(&ss->first_error, &none, rc, memory_order_relaxed,
	                                        memory_order_relaxed);
}

/* ---- the resolver ---- */

static struct tdm__track *track_of(struct tdm__stream *s)
{
	if (s->sq.track == NULL) {
		char name[48];
		snprintf(name, sizeof(name), "GPU %d stream %s %u", s->dev->index,
		         s->sq.high ? "high" : "normal", s->sq.index % s->dev->nstreams);
		s->sq.track = tdm__trace_track_open(name);
	}
	return s->sq.track;
}

static void give_back(struct tdm__stream *s, struct stamp *st)
{
	pthread_mutex_lock(&s->sq.lock);
	st->next = s->sq.free;
	s->sq.free = st;
	s->sq.taken--;
	pthread_mutex_unlock(&s->sq.lock);
}

/* A t0 sample: device time of the record against the host's after its call. The smallest over
 * recent samples is the submission latency (samples on a busy stream ran later); it may rise
 * by DRIFT_NS_PER_S, so that a drifting anchor is followed. */
static void learn(struct latency *l, int64_t sample, uint64_t now)
{
	if (l->known) {
		uint64_t rise = (now - l->at) / 1000000000ull * DRIFT_NS_PER_S +
		                (now - l->at) % 1000000000ull * DRIFT_NS_PER_S / 1000000000ull;
		if (sample > l->ns + (int64_t)rise)
			return;
	}
	l->known = true;
	l->ns = sample;
	l->at = now;
}

/*
 * The span of st, resolved (rc 0), or -EAGAIN while its work runs, or another error. Written in
 * the host's clock as it sees submissions: device time less the device's submission latency
 * (which also takes out the anchor's error), so that a launch reaches the device at the moment
 * its call returned, and its span never begins before its launch on the host's timeline.
 */
static int resolve_one(struct tdm_gpu *gpu, struct tdm__stream *s, struct stamp *st,
                       uint64_t *start_out, uint64_t *end_out)
{
	const struct tdm__backend_ops *ops = gpu->ops;
	struct latency *l = &gpu->stamps->lat[s->dev->index];
	uint64_t end = 0, t0 = 0;
	int rc = ops->timer_time(gpu->b, st->t1, &end);
	if (rc != 0)
		return rc;
	bool sampled = st->sampled && ops->timer_time(gpu->b, st->t0, &t0) == 0;
	if (sampled)
		learn(l, (int64_t)(t0 - st->host_t0), tdm__now_ns());
	/* In the host's clock the launch reached the device between the start of its call and
	 * its return (the driver submits within the call): at the return, unless the work had
	 * ended by then. Work that ended before its call began says the latency is too high
	 * (learnt from too few samples): it is forgotten, to be learnt again. */
	if (l->known && (int64_t)end - l->ns < (int64_t)st->host_launch)
		l->known = false;
	int64_t shift = l->known ? l->ns : 0;
	end = (uint64_t)((int64_t)end - shift);
	uint64_t start = st->host_end < end ? st->host_end : end;
	if (!l->known || start < st->host_launch)
		start = l->known ? st->host_launch : 0;
	if (start < s->sq.last_end) /* never before the stream's last work ended */
		start = s->sq.last_end;
	if (sampled && (uint64_t)((int64_t)t0 - shift) > start)
		start = (uint64_t)((int64_t)t0 - shift);
	if (start > end)
		start = end;
	*start_out = start;
	*end_out = end;
	return 0;
}

/* Resolves s's queue as far as its work has run; resolve held. wait: until all of it has (at
 * most WAIT_MAX_NS), or its device failed. */
static void resolve_stream(struct tdm_gpu *gpu, struct tdm__stream *s, bool wait)
{
	uint64_t deadline = wait ? tdm__now_ns() + WAIT_MAX_NS : 0;
	pthread_mutex_lock(&s->sq.lock);
	struct stamp *q = s->sq.head;
	s->sq.head = s->sq.tail = NULL;
	pthread_mutex_unlock(&s->sq.lock);
	while (q != NULL) {
		uint64_t start = 0, end = 0;
		int rc = resolve_one(gpu, s, q, &start, &end);
		if (rc == -EAGAIN && wait && tdm__now_ns() < deadline &&
		    !atomic_load_explicit(&s->dev->failed, memory_order_relaxed)) {
			tdm__sleep_ns(20000);
			continue;
		}
		if (rc == -EAGAIN)
			break; /* not yet: the rest goes back */
		struct stamp *st = q;
		q = q->next;
		if (rc != 0) { /* a failed device: its work has no times */
			lose(gpu->stamps, rc);
			give_back(s, st);
			continue;
		}
		s->sq.last_end = end;
		if (tdm__observing() && tdm__tracing())
			tdm__trace_track_span(track_of(s), start, end, (unsigned)st->kind,
			                      st->bytes, st->launch, st->task);
		if (tdm__metrics_on(gpu)) {
			struct tdm__span sp = {start,         end,         st->bytes,
			                       s->dev->index, s->sq.index, st->kind};
			tdm__metrics_span(gpu, &sp);
		}
		give_back(s, st);
	}
	if (q == NULL)
		return;
	/* What has not run goes back in front of what was appended meanwhile. */
	pthread_mutex_lock(&s->sq.lock);
	struct stamp *last = q;
	while (last->next != NULL)
		last = last->next;
	last->next = s->sq.head;
	if (s->sq.head == NULL)
		s->sq.tail = last;
	s->sq.head = q;
	pthread_mutex_unlock(&s->sq.lock);
}

static void sample_counters(struct tdm_gpu *gpu)
{
	struct tdm__stamps *ss = gpu->stamps;
	if (!tdm__observing() || !tdm__tracing())
		return;
	if (ss->counters == NULL) {
		char name[32];
		snprintf(name, sizeof(name), "gpu layer %u", ss->layer);
		ss->counters = tdm__trace_track_open(name);
	}
	uint64_t now = tdm__now_ns();
	/* Relaxed, all: counts sampled for a picture, nothing read through them. */
	int64_t active = atomic_load_explicit(&gpu->active, memory_order_relaxed);
	tdm__trace_track_counter(ss->counters, TDM__CTR_AWAITS, now,
	                         active > 0 ? (uint64_t)active : 0);
	tdm_pinned_stats ps;
	if (gpu->pinned != NULL && tdm_pinned_stats_get(gpu, &ps) == 0)
		tdm__trace_track_counter(ss->counters, TDM__CTR_PINNED, now, ps.bytes_in_use);
	uint64_t sw = atomic_load_explicit(&gpu->n_sweep, memory_order_relaxed);
	uint64_t sl = atomic_load_explicit(&gpu->n_sleep, memory_order_relaxed);
	tdm__trace_track_counter(ss->counters, TDM__CTR_SWEEPS, now, sw - ss->last_sweeps);
	tdm__trace_track_counter(ss->counters, TDM__CTR_SLEEPS, now, sl - ss->last_sleeps);
	ss->last_sweeps = sw;
	ss->last_sleeps = sl;
	tdm__trace_track_counter(ss->counters, TDM__CTR_SPANS_LOST, now,
	                         atomic_load_explicit(&ss->lost, memory_order_relaxed));
}

#define EACH_STREAM(gpu, s)                                                                        \
	for (int i_ = 0; i_ < (gpu)->ndev; i_++)                                                   \
		for (int c_ = 0; c_ < TDM__PRIO_CLASSES; c_++)                                     \
			for (unsigned k_ = 0; k_ < (gpu)->devs[i_].nstreams; k_++)                 \
				if (((s) = atomic_load_explicit(&(gpu)->devs[i_].streams[c_][k_],  \
				                                memory_order_acquire)) != NULL)

void tdm__stamps_flush(struct tdm_gpu *gpu, bool wait)
{
	struct tdm__stamps *ss = gpu->stamps;
	if (ss == NULL || gpu->ops == NULL || gpu->ops->timer_create == NULL)
		return;
	pthread_mutex_lock(&ss->resolve);
	struct tdm__stream *s;
	/* Acquire (EACH_STREAM): pairs with the release that published each stream. */
	EACH_STREAM(gpu, s)
	resolve_stream(gpu, s, wait);
	pthread_mutex_unlock(&ss->resolve);
}

/* Says once per layer what was lost, and why. */
static void report_lost(struct tdm_gpu *gpu)
{
	struct tdm__stamps *ss = gpu->stamps;
	uint64_t lost = atomic_exchange_explicit(&ss->lost, 0, memory_order_relaxed);
	int err = atomic_exchange_explicit(&ss->first_error, 0, memory_order_relaxed);
	if (lost > 0)
		fprintf(stderr,
		        "tandem: %llu GPU spans lost (%s): no stamp free (%u a stream), or "
		        "their device failed\n",
		        (unsigned long long)lost, err != 0 ? tdm_strerror(err) : "no stamp free",
		        MAX_STAMPS);
}

/* The trace's stop asks (tdm__trace_flusher_add): what has run goes in, what runs now too. */
static void flush_for_trace(void *arg)
{
	struct tdm_gpu *gpu = arg;
	tdm__stamps_flush(gpu, true);
	pthread_mutex_lock(&gpu->stamps->resolve);
	sample_counters(gpu);
	pthread_mutex_unlock(&gpu->stamps->resolve);
	report_lost(gpu);
}

static void *resolver_main(void *arg)
{
	struct tdm_gpu *gpu = arg;
	struct tdm__stamps *ss = gpu->stamps;
	pthread_setname_np(pthread_self(), "tdm-stamps");
	tdm__observe_thread("tandem stamps");
	pthread_mutex_lock(&ss->tlock);
	while (!ss->stop) {
		pthread_mutex_unlock(&ss->tlock);
		tdm__stamps_flush(gpu, false);
		pthread_mutex_lock(&ss->resolve);
		sample_counters(gpu);
		pthread_mutex_unlock(&ss->resolve);
		pthread_mutex_lock(&ss->tlock);
		if (ss->stop)
			break;
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += (long)PERIOD_NS;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		if (stamping(gpu))
			pthread_cond_timedwait(&ss->cond, &ss->tlock, &dl);
		else
			pthread_cond_wait(&ss->cond,
			                  &ss->tlock); /* the next first stamp wakes it */
	}
	pthread_mutex_unlock(&ss->tlock);
	return NULL;
}

/* ---- stamping a launch ---- */

/* A free stamp of s, or a new one: NULL when s has MAX_STAMPS out, or none can be made. */
static struct stamp *take(struct tdm_gpu *gpu, struct tdm__stream *s, bool *sample)
{
	pthread_mutex_lock(&s->sq.lock);
	struct stamp *st = s->sq.free;
	/* Every launch at first, so that the latency's minimum is soon found. */
	*sample = s->sq.launches < 4 * SAMPLE_EVERY || s->sq.launches % SAMPLE_EVERY == 0;
	s->sq.launches++;
	if (st != NULL) {
		s->sq.free = st->next;
		s->sq.taken++;
		pthread_mutex_unlock(&s->sq.lock);
		return st;
	}
	if (s->sq.made >= MAX_STAMPS) {
		pthread_mutex_unlock(&s->sq.lock);
		return NULL;
	}
	s->sq.made++; /* claimed: the limit holds while the pair is made */
	pthread_mutex_unlock(&s->sq.lock);
	int dev = s->dev->index, rc = -ENOMEM;
	st = calloc(1, sizeof(*st));
	if (st != NULL && (rc = gpu->ops->timer_create(gpu->b, dev, &st->t0)) == 0) {
		if ((rc = gpu->ops->timer_create(gpu->b, dev, &st->t1)) == 0) {
			pthread_mutex_lock(&s->sq.lock);
			st->all_next = s->sq.all;
			s->sq.all = st;
			s->sq.taken++;
			pthread_mutex_unlock(&s->sq.lock);
			return st;
		}
		gpu->ops->event_destroy(gpu->b, st->t0);
	}
	free(st);
	pthread_mutex_lock(&s->sq.lock);
	s->sq.made--;
	pthread_mutex_unlock(&s->sq.lock);
	return NULL;
}

static void start_thread(struct tdm__stamps *ss, struct tdm_gpu *gpu)
{
	pthread_mutex_lock(&ss->tlock);
	if (!atomic_load_explicit(&ss->started, memory_order_relaxed) && !ss->stop)
		atomic_store_explicit(&ss->started,
		                      pthread_create(&ss->thread, NULL, resolver_main, gpu) == 0,
		                      memory_order_relaxed);
	else
		pthread_cond_signal(&ss->cond); /* it may wait with nothing to stamp */
	pthread_mutex_unlock(&ss->tlock);
}

/* A launch flow's id: unique in the process without a shared counter (the thread's id and its
 * own count), in the space of launch ids (the top bit). */
static uint64_t launch_id(void)
{
	static _Thread_local uint64_t tid, count;
	if (tid == 0)
		tid = (uint64_t)syscall(SYS_gettid) & 0x3fffffu;
	return (1ull << 63) | (tid << 40) | (++count & 0xffffffffffull);
}

void tdm__stamp_begin(struct tdm_stream *s, enum tdm__span_kind kind, uint64_t bytes)
{
	struct tdm_gpu *gpu = s->dev->gpu;
	struct tdm__stamps *ss = gpu->stamps;
	s->stamp = NULL;
	if (ss == NULL || gpu->ops->timer_create == NULL || !stamping(gpu) ||
	    atomic_load_explicit(&s->cap, memory_order_relaxed) != NULL)
		return; /* a capture would record the timers into its graph */
	bool sample;
	struct stamp *st = take(gpu, s->st, &sample);
	if (st == NULL) {
		lose(ss, 0);
		return;
	}
	/* Read before the record: the record reaches the device after it, so no sample is
	 * below the true latency (host noise only adds to a sample, and the minimum drops it). */
	st->host_t0 = sample ? tdm__now_ns() : 0;
	st->sampled = sample && gpu->ops->event_record(gpu->b, st->t0, s->bs) == 0;
	st->kind = kind;
	st->bytes = bytes;
	st->launch = 0;
	st->task = 0;
	if (tdm__tracing()) {
		st->launch = launch_id();
		st->task = tdm__trace_await_flow();
		tdm__trace_record(TDM__TR_LAUNCH, st->launch);
	}
	s->stamp = st;
	st->host_launch = tdm__now_ns();
	/* Relaxed: a hint; start_thread reads it again under tlock. */
	if (!atomic_load_explicit(&ss->started, memory_order_relaxed))
		start_thread(ss, gpu);
}

void tdm__stamp_end(struct tdm_stream *s)
{
	struct stamp *st = s->stamp;
	if (st == NULL)
		return;
	s->stamp = NULL;
	struct tdm_gpu *gpu = s->dev->gpu;
	struct tdm__stream *q = s->st;
	st->next = NULL;
	st->host_end = tdm__now_ns();
	pthread_mutex_lock(&q->sq.lock);
	if (gpu->ops->event_record(gpu->b, st->t1, s->bs) != 0) {
		st->next = q->sq.free;
		q->sq.free = st;
		q->sq.taken--;
	} else if (q->sq.tail != NULL) {
		q->sq.tail->next = st;
		q->sq.tail = st;
	} else {
		q->sq.head = q->sq.tail = st;
	}
	pthread_mutex_unlock(&q->sq.lock);
}

/* ---- life ---- */

int tdm__stamps_init(struct tdm_gpu *gpu)
{
	struct tdm__stamps *ss = calloc(1, sizeof(*ss));
	if (ss == NULL)
		return -ENOMEM;
	ss->lat = calloc((size_t)gpu->ndev + 1, sizeof(*ss->lat));
	if (ss->lat == NULL) {
		free(ss);
		return -ENOMEM;
	}
	static atomic_uint layers;
	ss->layer = atomic_fetch_add_explicit(&layers, 1, memory_order_relaxed) + 1; /* a name */
	pthread_mutex_init(&ss->resolve, NULL);
	pthread_mutex_init(&ss->tlock, NULL);
	pthread_cond_init(&ss->cond, NULL);
	gpu->stamps = ss;
	tdm__trace_flusher_add(flush_for_trace, gpu);
	return 0;
}

/* After the last lease is back: no launch stamps any more. Waits for the spans in flight, so
 * that a trace still recording gets them, then frees every timer. */
void tdm__stamps_fini(struct tdm_gpu *gpu)
{
	struct tdm__stamps *ss = gpu->stamps;
	if (ss == NULL)
		return;
	tdm__trace_flusher_remove(flush_for_trace, gpu);
	pthread_mutex_lock(&ss->tlock);
	ss->stop = true;
	bool joined = atomic_load_explicit(&ss->started, memory_order_relaxed);
	pthread_cond_signal(&ss->cond);
	pthread_mutex_unlock(&ss->tlock);
	if (joined)
		pthread_join(ss->thread, NULL);
	tdm__stamps_flush(gpu, true);
	report_lost(gpu);
	struct tdm__stream *s;
	EACH_STREAM(gpu, s)
	{
		tdm__trace_track_close(s->sq.track);
		s->sq.track = NULL;
		for (struct stamp *st = s->sq.all, *next; st != NULL; st = next) {
			next = st->all_next;
			gpu->ops->event_destroy(gpu->b, st->t0);
			gpu->ops->event_destroy(gpu->b, st->t1);
			free(st);
		}
		s->sq.all = s->sq.free = s->sq.head = s->sq.tail = NULL;
		s->sq.made = s->sq.taken = 0;
	}
	tdm__trace_track_close(ss->counters);
	pthread_mutex_destroy(&ss->resolve);
	pthread_mutex_destroy(&ss->tlock);
	pthread_cond_destroy(&ss->cond);
	free(ss->lat);
	free(ss);
	gpu->stamps = NULL;
}
