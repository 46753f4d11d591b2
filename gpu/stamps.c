// SPDX-License-Identifier: MIT
/*
 * Device-side stamps (stamps.h; docs/design/observe.md, "GPU spans").
 *
 * While the trace records or the layer's metrics are on, every launch through the gate is
 * followed on its stream by a timer record (t1), and one launch in SAMPLE_EVERY per stream, and
 * each first one, is also preceded by one (t0). A trace without metrics times one launch in
 * `every` per stream (pace: at most `rate` a second) and counts the others untimed. A thread of the
 * layer's own, started at the first stamp, resolves the streams' queues every millisecond into
 * spans of device time:
 *
 * - the end is t1: when the stream finished the launch's work (exact, to the timer's 0.5 us);
 * - the start is the latest of: the end of the stream's previous span (a stream runs its work
 *   in order), and the moment the launch reached the device. That moment is the host's clock
 *   when the launch call returned plus the device's submission latency, learned from the t0
 *   samples: a t0 recorded on an idle stream runs that latency after its record call, so the
 *   smallest (t0 on the device - host time before its record) over the recent samples is it
 *   (it also absorbs the unknown device time of the reference timer the others are read
 *   against, struct devclock). A
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
#include <time.h>

#include "base/clock.h"
#include "base/observe.h"
#include "base/say.h"
#include "gpu_internal.h"
#include "stamps.h"

#define MAX_STAMPS 4096u          /* stamps per stream */
#define SAMPLE_EVERY 16u          /* a t0 on one launch in this many, per stream */
#define PERIOD_NS 1000000ull      /* the resolver's period while stamping */
#define IDLE_NS 50000000ull       /* and while not: it looks whether stamping began */
#define WAIT_MAX_NS 2000000000ull /* how long a flush that waits waits for a stream's work */
#define DRIFT_NS_PER_S 1000ull    /* how fast the offset may rise (see learn) */
#define DRIFT_MAX_NS 2000         /* and at most, between two samples */
#define REF_AGE_NS 4000000000ull  /* a reference older than this is replaced (float ms) */
#define RATE_DEFAULT 50000u       /* timed launches per second per layer, trace alone (auto) */
#define EVERY_MAX 1024u           /* `every` at most (struct tdm__stamps) */

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

/*
 * Per device, the resolver's: its clock, and its offset to the host's. A device's timers are
 * read against one of them, `ref` (a first timer that ran, kept out of the pool): a timer's
 * device time is base + (its record - ref's record). The offset is device time - host time of
 * a submission reaching the device, learnt from the sampled first timers (`learn`).
 */
struct devclock {
	void *ref;         /* NULL until the first sampled first timer ran */
	int64_t base;      /* device time of ref's record */
	uint64_t ref_host; /* host clock before ref's record, to know its age */
	bool known;        /* offset learnt */
	int64_t ns;        /* the offset */
	uint64_t at;       /* host clock of the offset's last sample */
};

struct tdm__stamps {
	pthread_mutex_t resolve;
	struct devclock *clk;              /* resolve: per device */
	struct tdm__track *counters;       /* resolve */
	uint64_t last_sweeps, last_sleeps; /* resolve */
	unsigned layer;                    /* the process's layers, numbered from 1 */
	/* Read at create: TANDEM_STAMPS=0 leaves the trace without GPU spans (and the metrics
	 * without device figures), TANDEM_STAMPS_PERIOD_US sets the resolver's period: for
	 * measuring what each part of a traced run costs (perf/README.md). */
	bool off;
	uint64_t period_ns;
	/* TANDEM_STAMPS=all times every launch; by default (auto) a trace without metrics times
	 * one launch in `every` per stream, `every` set by the thread each period so that the
	 * layer times at most `rate` launches a second (docs/design/observe.md, "What a traced
	 * launch costs"). Metrics time every launch. */
	bool all;
	uint64_t rate;
	_Atomic unsigned every;   /* relaxed: written by the thread, read by launches as a hint */
	_Atomic uint64_t untimed; /* relaxed: a count of launches left untimed by `every` */
	uint64_t seen, seen_at;   /* the thread's: launches counted at its last look, and when */
	uint64_t untimed_said;    /* report_lost's (a trace stop, destroy): untimed reported */
	_Atomic uint64_t lost;    /* relaxed: a count, since the last report */
	_Atomic uint64_t lost_total; /* relaxed: a count, since the layer began */
	_Atomic int first_error;     /* relaxed: the first error that lost a span */

	pthread_mutex_t tlock; /* the thread's life */
	pthread_cond_t cond;   /* tlock: stop */
	pthread_t thread;      /* tlock */
	bool stop;             /* tlock */
	/* Written under tlock; read relaxed by launches as a hint (start_thread looks again). */
	_Atomic bool started;
};

static bool stamping(const struct tdm__gpu *gpu)
{
	return !gpu->stamps->off && (tdm__tracing() || tdm__metrics_on(gpu));
}

static void lose(struct tdm__stamps *ss, int rc)
{
	/* Relaxed, all: counts for a report. */
	atomic_fetch_add_explicit(&ss->lost, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&ss->lost_total, 1, memory_order_relaxed);
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

/* A t0 sample: device time of the record against the host's before its call. The smallest
 * over recent samples is the offset (samples on a busy stream ran later); between samples it
 * may rise by DRIFT_NS_PER_S, at most DRIFT_MAX_NS, so that a drifting clock is followed and a
 * busy stream's late samples cannot lift it far. */
static void learn(struct devclock *c, int64_t sample, uint64_t now)
{
	if (c->known) {
		uint64_t dt = now - c->at;
		int64_t rise = (int64_t)(dt / 1000000000ull * DRIFT_NS_PER_S +
		                         dt % 1000000000ull * DRIFT_NS_PER_S / 1000000000ull);
		if (rise > DRIFT_MAX_NS)
			rise = DRIFT_MAX_NS;
		if (sample > c->ns + rise)
			sample = c->ns + rise;
	}
	c->known = true;
	c->ns = sample;
	c->at = now;
}

/* The device time of timer t (base + t - ref): 0, or the backend's error. */
static int dev_time(struct tdm__gpu *gpu, const struct devclock *c, void *t, int64_t *out)
{
	int64_t d = 0;
	int rc = gpu->ops->timer_elapsed(gpu->b, c->ref, t, &d);
	if (rc == 0)
		*out = c->base + d;
	return rc;
}

/* st's first timer ran (sampled): the device's reference becomes it when there is none yet or
 * the one there is getting old (a float of milliseconds loses microseconds past seconds). The
 * old reference, or a new timer, takes its place in st. */
static void maybe_rebase(struct tdm__gpu *gpu, struct devclock *c, struct stamp *st, int dev)
{
	if (c->ref != NULL && st->host_t0 - c->ref_host < REF_AGE_NS)
		return;
	void *spare = c->ref;
	int64_t base = 0;
	if (spare != NULL) {
		int64_t d = 0;
		if (gpu->ops->timer_elapsed(gpu->b, c->ref, st->t0, &d) != 0)
			return;
		base = c->base + d;
	} else if (gpu->ops->timer_create(gpu->b, dev, &spare) != 0) {
		return;
	}
	c->ref = st->t0;
	c->base = base;
	c->ref_host = st->host_t0;
	st->t0 = spare;
}

/*
 * The span of st, resolved (rc 0), or -EAGAIN while its work runs, or another error. Written in
 * the host's clock as it sees submissions: device time less the offset (submission latency and
 * the clocks' difference), so that a launch reaches the device at the moment its call returned,
 * and its span never begins before its launch on the host's timeline.
 */
static int resolve_one(struct tdm__gpu *gpu, struct tdm__stream *s, struct stamp *st,
                       uint64_t *start_out, uint64_t *end_out)
{
	struct devclock *c = &gpu->stamps->clk[s->dev->index];
	int64_t end = 0, t0 = 0;
	if (c->ref == NULL) {
		if (!st->sampled)
			return -ENODATA; /* no clock yet: the first launch of a stream is sampled */
		int64_t d = 0;
		int rc = gpu->ops->timer_elapsed(gpu->b, st->t0, st->t1, &d);
		if (rc != 0)
			return rc;
		maybe_rebase(gpu, c, st, s->dev->index);
		if (c->ref == NULL)
			return -ENOMEM;
		st->sampled = false; /* its first timer is the reference now: at base, 0 */
		t0 = 0;
		end = d;
		learn(c, t0 - (int64_t)st->host_t0, tdm__now_ns());
	} else {
		int rc = dev_time(gpu, c, st->t1, &end);
		if (rc != 0)
			return rc;
		if (st->sampled && dev_time(gpu, c, st->t0, &t0) == 0) {
			learn(c, t0 - (int64_t)st->host_t0, tdm__now_ns());
			maybe_rebase(gpu, c, st, s->dev->index);
		} else {
			st->sampled = false;
		}
	}
	/* Work that ended before its call began says the offset is too high (learnt from too
	 * few samples): it is at most that. */
	if (end - c->ns < (int64_t)st->host_launch)
		learn(c, end - (int64_t)st->host_launch, tdm__now_ns());
	uint64_t e = (uint64_t)(end - c->ns);
	/* In the host's clock the launch reached the device between the start of its call and
	 * its return (the driver submits within the call): at the return, unless the work had
	 * ended by then; never before the stream's last work ended. */
	uint64_t start = st->host_end < e ? st->host_end : e;
	if (start < st->host_launch)
		start = st->host_launch;
	if (start < s->sq.last_end)
		start = s->sq.last_end;
	if (st->sampled && (uint64_t)(t0 - c->ns) > start)
		start = (uint64_t)(t0 - c->ns);
	if (start > e)
		start = e;
	*start_out = start;
	*end_out = e;
	return 0;
}

/* Resolves s's queue as far as its work has run; resolve held. wait: until all of it has (at
 * most WAIT_MAX_NS), or its device failed. */
static void resolve_stream(struct tdm__gpu *gpu, struct tdm__stream *s, bool wait,
                           uint64_t deadline)
{
	pthread_mutex_lock(&s->sq.lock);
	struct stamp *q = s->sq.head;
	s->sq.head = s->sq.tail = NULL;
	pthread_mutex_unlock(&s->sq.lock);
	if (q == NULL)
		return;
	/* Resolved stamps go back in one batch: the stream's lock is the launching tasks' too. */
	struct stamp *done = NULL, *done_last = NULL;
	while (q != NULL) {
		uint64_t start = 0, end = 0;
		int rc = resolve_one(gpu, s, q, &start, &end);
		if (rc == -EAGAIN && wait && tdm__now_ns() < deadline &&
		    /* Relaxed: a hint to stop waiting; a failed device's timers say -EIO. */
		    !atomic_load_explicit(&s->dev->failed, memory_order_relaxed)) {
			tdm__sleep_ns(20000);
			continue;
		}
		if (rc == -EAGAIN)
			break; /* not yet: the rest goes back */
		struct stamp *st = q;
		q = q->next;
		st->next = done;
		done = st;
		if (done_last == NULL)
			done_last = st;
		if (rc != 0) { /* a failed device: its work has no times */
			lose(gpu->stamps, rc);
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
	}
	struct stamp *last = q;
	while (last != NULL && last->next != NULL)
		last = last->next;
	pthread_mutex_lock(&s->sq.lock);
	if (done != NULL) {
		done_last->next = s->sq.free;
		s->sq.free = done;
	}
	if (q != NULL) { /* what has not run, in front of what was appended meanwhile */
		last->next = s->sq.head;
		if (s->sq.head == NULL)
			s->sq.tail = last;
		s->sq.head = q;
	}
	pthread_mutex_unlock(&s->sq.lock);
}

static void sample_counters(struct tdm__gpu *gpu)
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
	if (gpu->pinned != NULL && tdm__pinned_stats_get(gpu, &ps) == 0)
		tdm__trace_track_counter(ss->counters, TDM__CTR_PINNED, now, ps.bytes_in_use);
	uint64_t sw = atomic_load_explicit(&gpu->n_sweep, memory_order_relaxed);
	uint64_t sl = atomic_load_explicit(&gpu->n_sleep, memory_order_relaxed);
	tdm__trace_track_counter(ss->counters, TDM__CTR_SWEEPS, now, sw - ss->last_sweeps);
	tdm__trace_track_counter(ss->counters, TDM__CTR_SLEEPS, now, sl - ss->last_sleeps);
	ss->last_sweeps = sw;
	ss->last_sleeps = sl;
	tdm__trace_track_counter(ss->counters, TDM__CTR_SPANS_LOST, now,
	                         atomic_load_explicit(&ss->lost, memory_order_relaxed));
	tdm__trace_track_counter(ss->counters, TDM__CTR_UNTIMED, now,
	                         atomic_load_explicit(&ss->untimed, memory_order_relaxed));
}

#define EACH_STREAM(gpu, s)                                                                        \
	for (int i_ = 0; i_ < (gpu)->ndev; i_++)                                                   \
		for (int c_ = 0; c_ < TDM__PRIO_CLASSES; c_++)                                     \
			for (unsigned k_ = 0; k_ < (gpu)->devs[i_].nstreams; k_++)                 \
				if (((s) = atomic_load_explicit(&(gpu)->devs[i_].streams[c_][k_],  \
				                                memory_order_acquire)) != NULL)

void tdm__stamps_flush(struct tdm__gpu *gpu, bool wait)
{
	struct tdm__stamps *ss = gpu->stamps;
	if (ss == NULL || gpu->ops == NULL || gpu->ops->timer_create == NULL)
		return;
	pthread_mutex_lock(&ss->resolve);
	uint64_t deadline = wait ? tdm__now_ns() + WAIT_MAX_NS : 0; /* for the whole flush */
	struct tdm__stream *s;
	/* Acquire (EACH_STREAM): pairs with the release that published each stream. */
	EACH_STREAM(gpu, s)
	resolve_stream(gpu, s, wait, deadline);
	pthread_mutex_unlock(&ss->resolve);
}

/*
 * The thread's, each period: a trace without metrics times one launch in `every` per stream,
 * the least power of two that keeps the layer's timed launches under `rate` a second at the
 * last period's launch rate. Each timing event costs the launching thread a driver call, which
 * at a million launches a second is most of what a launch costs (docs/design/observe.md).
 */
static void pace(struct tdm__gpu *gpu, uint64_t now)
{
	struct tdm__stamps *ss = gpu->stamps;
	uint64_t n = 0;
	struct tdm__stream *s;
	/* Acquire (EACH_STREAM): pairs with the release that published each stream. */
	EACH_STREAM(gpu, s)
	n += atomic_load_explicit(&s->sq.launches, memory_order_relaxed); /* a count */
	uint64_t dt = now - ss->seen_at, dn = n - ss->seen;
	bool first = ss->seen_at == 0;
	ss->seen = n;
	ss->seen_at = now;
	if (ss->all || first || dt == 0)
		return;
	/* Launches a second over the layer's budget, rounded up to a power of two. */
	uint64_t want = dn * 1000000000ull / dt;
	unsigned every = 1;
	while (every < EVERY_MAX && want > ss->rate * every)
		every *= 2;
	/* Relaxed: a hint for the launches (take). */
	atomic_store_explicit(&ss->every, every, memory_order_relaxed);
}

/* Says once per layer what was lost, and why. */
static void report_lost(struct tdm__gpu *gpu)
{
	struct tdm__stamps *ss = gpu->stamps;
	/* Relaxed, both: counts for a report. */
	uint64_t lost = atomic_exchange_explicit(&ss->lost, 0, memory_order_relaxed);
	int err = atomic_exchange_explicit(&ss->first_error, 0, memory_order_relaxed);
	if (lost > 0)
		fprintf(stderr, "tandem: %llu GPU spans lost: %s%s\n", (unsigned long long)lost,
		        err != 0 ? "their times could not be read: "
		                 : "a stream had its stamps out",
		        err != 0 ? tdm_strerror(err) : " (4096 a stream)");
	/* Relaxed: a count for a report. */
	uint64_t untimed = atomic_load_explicit(&ss->untimed, memory_order_relaxed);
	if (untimed > ss->untimed_said) {
		fprintf(stderr,
		        "tandem: %llu GPU launches untimed: the trace timed at most %llu a second "
		        "(TANDEM_STAMPS=all times each, TANDEM_STAMPS_RATE sets the rate)\n",
		        (unsigned long long)(untimed - ss->untimed_said),
		        (unsigned long long)ss->rate);
		ss->untimed_said = untimed;
	}
}

/* The trace's stop asks (tdm__trace_flusher_add): what has run goes in, what runs now too. */
static void flush_for_trace(void *arg)
{
	struct tdm__gpu *gpu = arg;
	tdm__stamps_flush(gpu, true);
	pthread_mutex_lock(&gpu->stamps->resolve);
	sample_counters(gpu);
	pthread_mutex_unlock(&gpu->stamps->resolve);
	report_lost(gpu);
}

static void *resolver_main(void *arg)
{
	struct tdm__gpu *gpu = arg;
	struct tdm__stamps *ss = gpu->stamps;
	pthread_setname_np(pthread_self(), "tdm-stamps");
	tdm__observe_thread("tandem stamps");
	pthread_mutex_lock(&ss->tlock);
	while (!ss->stop) {
		pthread_mutex_unlock(&ss->tlock);
		tdm__stamps_flush(gpu, false);
		pace(gpu, tdm__now_ns());
		pthread_mutex_lock(&ss->resolve);
		sample_counters(gpu);
		pthread_mutex_unlock(&ss->resolve);
		pthread_mutex_lock(&ss->tlock);
		if (ss->stop)
			break;
		/* Every millisecond while stamping; with nothing to stamp, every IDLE_NS, so that
		 * a trace or a metrics window started later is served without a wake-up of its
		 * own (the condition's clock is CLOCK_MONOTONIC: no jump of the wall clock stalls
		 * it). */
		uint64_t step = stamping(gpu) ? ss->period_ns : IDLE_NS;
		struct timespec dl;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += (time_t)(step / 1000000000ull);
		dl.tv_nsec += (long)(step % 1000000000ull);
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&ss->cond, &ss->tlock, &dl);
	}
	pthread_mutex_unlock(&ss->tlock);
	return NULL;
}

/* ---- stamping a launch ---- */

/* A free stamp of s, or a new one: NULL when s has MAX_STAMPS out, or none can be made. */
static struct stamp *take(struct tdm__gpu *gpu, struct tdm__stream *s, bool *sample, bool *untimed)
{
	/* Relaxed: a hint; metrics time every launch (their figures are sums over all). */
	unsigned every = atomic_load_explicit(&gpu->stamps->every, memory_order_relaxed);
	if (every > 1 && tdm__metrics_on(gpu))
		every = 1;
	pthread_mutex_lock(&s->sq.lock);
	/* Relaxed, both: written under the lock alone (no read-modify-write needed); pace reads
	 * it without the lock, as a count. */
	uint64_t launches = atomic_load_explicit(&s->sq.launches, memory_order_relaxed) + 1;
	atomic_store_explicit(&s->sq.launches, launches, memory_order_relaxed);
	*untimed = every > 1 && launches % every != 0;
	if (*untimed) {
		pthread_mutex_unlock(&s->sq.lock);
		return NULL;
	}
	struct stamp *st = s->sq.free;
	/* Every launch at first, so that the latency's minimum is soon found. */
	*sample = s->sq.timed < 4 * SAMPLE_EVERY || s->sq.timed % SAMPLE_EVERY == 0;
	s->sq.timed++;
	if (st != NULL) {
		s->sq.free = st->next;
		pthread_mutex_unlock(&s->sq.lock);
		return st;
	}
	if (s->sq.made >= MAX_STAMPS) {
		pthread_mutex_unlock(&s->sq.lock);
		return NULL;
	}
	s->sq.made++; /* claimed: the limit holds while the pair is made */
	pthread_mutex_unlock(&s->sq.lock);
	int dev = s->dev->index;
	st = calloc(1, sizeof(*st));
	if (st != NULL && gpu->ops->timer_create(gpu->b, dev, &st->t0) == 0) {
		if (gpu->ops->timer_create(gpu->b, dev, &st->t1) == 0) {
			pthread_mutex_lock(&s->sq.lock);
			st->all_next = s->sq.all;
			s->sq.all = st;
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

static void start_thread(struct tdm__stamps *ss, struct tdm__gpu *gpu)
{
	pthread_mutex_lock(&ss->tlock);
	/* Relaxed, both: written under tlock, which orders them; launches read it as a hint. */
	if (!atomic_load_explicit(&ss->started, memory_order_relaxed) && !ss->stop)
		atomic_store_explicit(&ss->started,
		                      pthread_create(&ss->thread, NULL, resolver_main, gpu) == 0,
		                      memory_order_relaxed);
	else
		pthread_cond_signal(&ss->cond); /* it may wait with nothing to stamp */
	pthread_mutex_unlock(&ss->tlock);
}

/* A launch flow's id: unique in the process without a counter shared per launch (a number the
 * thread takes once, and its own count), in the space of launch ids (the top bit). */
static uint64_t launch_id(void)
{
	static _Atomic uint64_t threads;
	static _Thread_local uint64_t me, count;
	if (me == 0) /* relaxed: a unique number is all it is */
		me = atomic_fetch_add_explicit(&threads, 1, memory_order_relaxed) + 1;
	return (1ull << 63) | ((me & 0x7fffffu) << 40) | (++count & 0xffffffffffull);
}

void tdm__stamp_begin(struct tdm_stream *s, enum tdm__span_kind kind, uint64_t bytes)
{
	struct tdm__gpu *gpu = s->dev->gpu;
	struct tdm__stamps *ss = gpu->stamps;
	s->stamp = NULL;
	if (ss == NULL || gpu->ops->timer_create == NULL || !stamping(gpu) ||
	    /* Relaxed: the capture is this thread's own (it began it), or none. */
	    atomic_load_explicit(&s->cap, memory_order_relaxed) != NULL)
		return; /* a capture would record the timers into its graph */
	/* Relaxed: a hint; start_thread reads it again under tlock. The thread also paces: it
	 * starts with the first launch, timed or not. */
	if (!atomic_load_explicit(&ss->started, memory_order_relaxed))
		start_thread(ss, gpu);
	bool sample = false, untimed = false;
	struct stamp *st = take(gpu, s->st, &sample, &untimed);
	if (st == NULL) {
		if (untimed) /* relaxed: a count */
			atomic_fetch_add_explicit(&ss->untimed, 1, memory_order_relaxed);
		else
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
}

void tdm__stamp_end(struct tdm_stream *s)
{
	struct stamp *st = s->stamp;
	if (st == NULL)
		return;
	s->stamp = NULL;
	struct tdm__gpu *gpu = s->dev->gpu;
	struct tdm__stream *q = s->st;
	st->next = NULL;
	st->host_end = tdm__now_ns();
	pthread_mutex_lock(&q->sq.lock);
	int rc = gpu->ops->event_record(gpu->b, st->t1, s->bs);
	if (rc != 0) {
		st->next = q->sq.free;
		q->sq.free = st;
		lose(gpu->stamps, rc);
	} else if (q->sq.tail != NULL) {
		q->sq.tail->next = st;
		q->sq.tail = st;
	} else {
		q->sq.head = q->sq.tail = st;
	}
	pthread_mutex_unlock(&q->sq.lock);
}

uint64_t tdm__stamps_lost(struct tdm__gpu *gpu)
{
	/* Relaxed: a count. */
	return gpu->stamps != NULL
	           ? atomic_load_explicit(&gpu->stamps->lost_total, memory_order_relaxed)
	           : 0;
}

uint64_t tdm__stamps_untimed(struct tdm__gpu *gpu)
{
	/* Relaxed: a count. */
	return gpu->stamps != NULL
	           ? atomic_load_explicit(&gpu->stamps->untimed, memory_order_relaxed)
	           : 0;
}

/* ---- life ---- */

int tdm__stamps_init(struct tdm__gpu *gpu)
{
	struct tdm__stamps *ss = calloc(1, sizeof(*ss));
	if (ss == NULL)
		return -ENOMEM;
	ss->clk = calloc((size_t)gpu->ndev + 1, sizeof(*ss->clk));
	if (ss->clk == NULL) {
		free(ss);
		return -ENOMEM;
	}
	/* Ignored rather than refused, said once each (base/say.h): stamps only measure. */
	const char *mode = getenv("TANDEM_STAMPS");
	ss->off = mode != NULL && strcmp(mode, "0") == 0;
	ss->all = mode != NULL && strcmp(mode, "all") == 0;
	if (mode != NULL && !ss->off && !ss->all && strcmp(mode, "auto") != 0)
		(void)tdm__refuse(0, "TANDEM_STAMPS=%s: ignored: not one of 0, all, auto", mode);
	const char *rate = getenv("TANDEM_STAMPS_RATE");
	char *end = NULL;
	unsigned long r = rate != NULL ? strtoul(rate, &end, 10) : 0;
	ss->rate = r >= 1000 && r <= 100000000ul && end != NULL && *end == '\0' ? r : RATE_DEFAULT;
	if (rate != NULL && ss->rate != r)
		(void)tdm__refuse(0,
		                  "TANDEM_STAMPS_RATE=%s: ignored: not a number from 1000 to "
		                  "100000000",
		                  rate);
	atomic_init(&ss->every, 1u);
	const char *period = getenv("TANDEM_STAMPS_PERIOD_US");
	unsigned long us = period != NULL ? strtoul(period, &end, 10) : 0;
	bool us_ok = us >= 100 && us <= 1000000 && end != NULL && *end == '\0';
	ss->period_ns = us_ok ? us * 1000ull : PERIOD_NS;
	if (period != NULL && !us_ok)
		(void)tdm__refuse(0,
		                  "TANDEM_STAMPS_PERIOD_US=%s: ignored: not a number from 100 to "
		                  "1000000",
		                  period);
	static atomic_uint layers;
	ss->layer = atomic_fetch_add_explicit(&layers, 1, memory_order_relaxed) + 1; /* a name */
	pthread_mutex_init(&ss->resolve, NULL);
	pthread_mutex_init(&ss->tlock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ss->cond, &ca);
	pthread_condattr_destroy(&ca);
	gpu->stamps = ss;
	tdm__trace_flusher_add(flush_for_trace, gpu);
	return 0;
}

/* After the last lease is back: no launch stamps any more. Waits for the spans in flight, so
 * that a trace still recording gets them, then frees every timer. */
void tdm__stamps_fini(struct tdm__gpu *gpu)
{
	struct tdm__stamps *ss = gpu->stamps;
	if (ss == NULL)
		return;
	tdm__trace_flusher_remove(flush_for_trace, gpu);
	pthread_mutex_lock(&ss->tlock);
	ss->stop = true;
	bool joined = atomic_load_explicit(&ss->started, memory_order_relaxed); /* under tlock */
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
		s->sq.made = 0;
	}
	tdm__trace_track_close(ss->counters);
	pthread_mutex_destroy(&ss->resolve);
	pthread_mutex_destroy(&ss->tlock);
	pthread_cond_destroy(&ss->cond);
	for (int i = 0; i < gpu->ndev; i++)
		if (ss->clk[i].ref != NULL)
			gpu->ops->event_destroy(gpu->b, ss->clk[i].ref);
	free(ss->clk);
	free(ss);
	gpu->stamps = NULL;
}
