// SPDX-License-Identifier: MIT
/*
 * tandem's own trace: tdm_trace_start / tdm_trace_stop and TANDEM_TRACE=path, written as Chrome
 * trace-event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open
 * (docs/design/observe.md, "Trace").
 *
 * Recording: each thread that records gets a buffer of its own at its first event (a fixed
 * number of 24-byte events, TANDEM_TRACE_EVENTS, 65536 by default), put on a list under `lock`
 * once; after that an event is a clock read, a 24-byte store and a release store of the
 * buffer's count, and no lock. A full buffer drops what comes later and counts it; the count
 * goes into the file and to stderr. Buffers stay with their thread across traces: a trace is a
 * session number, and a thread whose buffer holds an older session's events starts it over at
 * its next event. A thread that ends while a trace records leaves its buffer on the list for
 * the stop to write (its events and its name) and free; otherwise it frees it as it ends.
 *
 * Writing, at stop: the trace bit is cleared, then, under `lock`, each buffer of this session is
 * read up to the count its thread last published (a thread still inside a hook may add one
 * event after that: it is not read). Per thread, "B"/"E" events are balanced (an end whose begin
 * came before the start is left out; a run still open at the stop is closed there); flows
 * ("s"/"f") are paired by id and timestamp across threads and given fresh ids, and a flow with
 * one end only (begun before the start, or ended after the stop) is left out. One event per line.
 *
 * One trace per process at a time, owned by one executor; it records every thread of the process
 * (the workers of other executors too).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "observe.h"
#include "say.h"
#include "tandem.h"

#define DEFAULT_EVENTS 65536u
#define THREAD_NAME_LEN 48

struct event {
	uint64_t ts; /* tdm_now_ns */
	uint64_t word;
	uint32_t kind;
};

struct buffer {
	struct buffer *next; /* lock */
	bool dead;           /* lock: its thread ended while this trace recorded */
	/* Written by the thread alone; the stop reads them, under lock: session with acquire
	 * (pairs with the release store in start_over), n with acquire (pairs with the release
	 * store in tdm__trace_record: events[0, n) are written). */
	_Atomic uint32_t session;
	_Atomic uint32_t n;
	_Atomic uint64_t dropped; /* relaxed: a count, written by the thread alone */
	uint32_t cap;
	int tid;
	bool track; /* a track (tdm__trace_track_open), not a thread */
	char name[THREAD_NAME_LEN];
	struct event *events;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct buffer *buffers; /* lock */
static void *owner;            /* lock: the executor whose trace records, NULL when none */
static char *out_path;         /* lock */
static uint64_t started_ns;    /* lock */
/* Events per buffer for the next session: written under lock, read relaxed by threads that
 * start their buffer over (a size: a thread that reads the next session's value while it starts
 * this one over only sizes its buffer by it). */
static _Atomic uint32_t cap_next;
static _Atomic uint32_t session;     /* the current (or last) trace; 0: none yet */
static uint64_t tasks_before;        /* lock: the owner's tasks run when its trace started */
static int next_track_tid = 1 << 30; /* lock: tracks' tids, above any thread's */

/* Flushers: registered under flush_lock, which a stop holds while it calls them. */
struct flusher {
	void (*fn)(void *);
	void *arg;
	struct flusher *next;
};
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static struct flusher *flushers; /* flush_lock */

static _Thread_local struct buffer *mine;
static _Thread_local bool mine_closed; /* its thread is ending: record nothing more */
static _Thread_local char thread_name[THREAD_NAME_LEN];

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* A buffer's owner is done with it (its thread ended, or its track closed): freed now, or, while
 * a trace runs, left on the list for the stop to write (its events and its name) and free. */
static void buffer_release(struct buffer *b)
{
	pthread_mutex_lock(&lock);
	if (owner != NULL) {
		b->dead = true;
		pthread_mutex_unlock(&lock);
		return;
	}
	for (struct buffer **p = &buffers; *p != NULL; p = &(*p)->next)
		if (*p == b) {
			*p = b->next;
			break;
		}
	pthread_mutex_unlock(&lock);
	free(b->events);
	free(b);
}

/* A thread that recorded ends. */
static void thread_ended(void *arg)
{
	struct buffer *b = arg;
	mine_closed = true;
	mine = NULL;
	buffer_release(b);
}

static void make_key(void)
{
	if (pthread_key_create(&exit_key, thread_ended) != 0)
		abort(); /* only at the first traced event of the process: no keys left */
}

static struct buffer *buffer_new(void)
{
	pthread_once(&exit_once, make_key);
	struct buffer *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return NULL;
	b->tid = (int)syscall(SYS_gettid);
	if (thread_name[0] != '\0') {
		snprintf(b->name, sizeof(b->name), "%s", thread_name);
	} else {
		char own[16] = "";
		pthread_getname_np(pthread_self(), own, sizeof(own));
		snprintf(b->name, sizeof(b->name), "%s", own[0] != '\0' ? own : "thread");
	}
	if (pthread_setspecific(exit_key, b) != 0) {
		free(b);
		return NULL;
	}
	pthread_mutex_lock(&lock);
	b->next = buffers;
	buffers = b;
	pthread_mutex_unlock(&lock);
	return b;
}

/* A tandem thread names itself as it starts: its buffer (without events until it records) is
 * on the list from then, so that every trace names it, whether or not it records. */
void tdm__trace_thread_name(const char *name)
{
	snprintf(thread_name, sizeof(thread_name), "%s", name);
	if (mine != NULL) {
		pthread_mutex_lock(&lock); /* the stop reads it */
		snprintf(mine->name, sizeof(mine->name), "%s", name);
		pthread_mutex_unlock(&lock);
	} else if (!mine_closed) {
		mine = buffer_new();
	}
}

/* The thread's buffer begins session s (the thread alone writes it; the last stop that read it
 * returned before s began: the acquire load of session that showed s pairs with its release). */
static void start_over(struct buffer *b, uint32_t s)
{
	uint32_t cap = atomic_load_explicit(&cap_next, memory_order_relaxed);
	if (b->cap != cap) {
		free(b->events);
		b->events = malloc((size_t)cap * sizeof(struct event));
		b->cap = b->events != NULL ? cap : 0;
	}
	atomic_store_explicit(&b->n, 0, memory_order_relaxed);
	atomic_store_explicit(&b->dropped, 0, memory_order_relaxed);
	/* Release: pairs with the stop's acquire load; the events array and cap are set. */
	atomic_store_explicit(&b->session, s, memory_order_release);
}

/* Room for k more events of the current session in b, whose one writer calls this: the index
 * of the first, or UINT32_MAX (the k counted as dropped). */
static uint32_t reserve(struct buffer *b, uint32_t k)
{
	/* Acquire: pairs with the release store in tdm_trace_start; the last stop's reads of
	 * this buffer are over before a new session shows here. */
	uint32_t s = atomic_load_explicit(&session, memory_order_acquire);
	/* Relaxed: the writer's own word. */
	if (atomic_load_explicit(&b->session, memory_order_relaxed) != s)
		start_over(b, s);
	uint32_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
	if (b->cap < k || n > b->cap - k) {
		/* Relaxed: the writer's own count, read at the stop. */
		atomic_store_explicit(&b->dropped,
		                      atomic_load_explicit(&b->dropped, memory_order_relaxed) + k,
		                      memory_order_relaxed);
		return UINT32_MAX;
	}
	return n;
}

void tdm__trace_record(enum tdm__trace_kind kind, uint64_t word)
{
	struct buffer *b = mine;
	if (b == NULL) {
		if (mine_closed || (b = mine = buffer_new()) == NULL)
			return;
	}
	uint32_t n = reserve(b, 1);
	if (n == UINT32_MAX)
		return;
	b->events[n] = (struct event){tdm_now_ns(), word, (uint32_t)kind};
	/* Release: pairs with the stop's acquire load of n; events[n] is written. */
	atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

/* ---- tracks ---- */

struct tdm__track *tdm__trace_track_open(const char *name)
{
	struct buffer *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return NULL;
	b->track = true;
	snprintf(b->name, sizeof(b->name), "%s", name);
	pthread_mutex_lock(&lock);
	b->tid = next_track_tid++;
	b->next = buffers;
	buffers = b;
	pthread_mutex_unlock(&lock);
	return (struct tdm__track *)b;
}

void tdm__trace_track_close(struct tdm__track *tr)
{
	struct buffer *b = (struct buffer *)tr;
	if (b != NULL)
		buffer_release(b);
}

/* Only while the trace records: a track written meanwhile would start over into a session
 * that no stop reads (harmless, but its memory is spent for nothing). */
static bool recording(void)
{
	return tdm__observing() && tdm__tracing();
}

void tdm__trace_track_span(struct tdm__track *tr, uint64_t start, uint64_t end, unsigned kind,
                           uint64_t bytes, uint64_t launch, uint64_t task)
{
	struct buffer *b = (struct buffer *)tr;
	if (b == NULL || !recording())
		return;
	uint32_t n = reserve(b, 3);
	if (n == UINT32_MAX)
		return;
	b->events[n] = (struct event){start, end, TDM__TR_GPU_SPAN};
	b->events[n + 1] = (struct event){launch, bytes << 8 | (kind & 0xffu), TDM__TR_GPU_INFO};
	b->events[n + 2] = (struct event){0, task, TDM__TR_GPU_TASK};
	/* Release: pairs with the stop's acquire load of n; the three are written. */
	atomic_store_explicit(&b->n, n + 3, memory_order_release);
}

void tdm__trace_track_counter(struct tdm__track *tr, enum tdm__trace_counter c, uint64_t ts,
                              uint64_t value)
{
	struct buffer *b = (struct buffer *)tr;
	if (b == NULL || !recording())
		return;
	uint32_t n = reserve(b, 1);
	if (n == UINT32_MAX)
		return;
	b->events[n] = (struct event){ts, value << 8 | (unsigned)c, TDM__TR_COUNTER};
	/* Release: pairs with the stop's acquire load of n. */
	atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

void tdm__trace_flusher_add(void (*fn)(void *), void *arg)
{
	struct flusher *f = malloc(sizeof(*f));
	if (f == NULL)
		return; /* its spans then reach the trace only as its thread resolves them */
	*f = (struct flusher){fn, arg, NULL};
	pthread_mutex_lock(&flush_lock);
	f->next = flushers;
	flushers = f;
	pthread_mutex_unlock(&flush_lock);
}

void tdm__trace_flusher_remove(void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&flush_lock);
	for (struct flusher **p = &flushers; *p != NULL; p = &(*p)->next)
		if ((*p)->fn == fn && (*p)->arg == arg) {
			struct flusher *f = *p;
			*p = f->next;
			free(f);
			break;
		}
	pthread_mutex_unlock(&flush_lock);
}

static uint64_t tasks_run(tdm_executor *ex)
{
	uint64_t sum = 0;
	int n = tdm_executor_workers(ex);
	for (int w = 0; w < n; w++) {
		tdm_worker_stats st;
		if (tdm_executor_stats(ex, (unsigned)w, &st) == 0)
			sum += st.tasks_run;
	}
	return sum;
}

int tdm_trace_start(tdm_executor *ex, const char *path)
{
	tdm__detail_begin("tdm_trace_start");
	if (ex == NULL || path == NULL || path[0] == '\0')
		return -EINVAL;
	uint32_t cap = DEFAULT_EVENTS;
	const char *env = getenv("TANDEM_TRACE_EVENTS");
	if (env != NULL && env[0] != '\0') {
		char *end;
		unsigned long v = strtoul(env, &end, 10);
		if (*end != '\0' || v == 0 || v > (1ul << 26))
			return tdm__refuse(-EINVAL,
			                   "TANDEM_TRACE_EVENTS=%s: not a number from 1 to %lu",
			                   env, 1ul << 26);
		cap = (uint32_t)v;
	}
	pthread_mutex_lock(&lock);
	if (owner != NULL) {
		pthread_mutex_unlock(&lock);
		return -EALREADY;
	}
	char *p = strdup(path);
	if (p == NULL) {
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	owner = ex;
	out_path = p;
	tasks_before = tasks_run(ex);
	atomic_store_explicit(&cap_next, cap, memory_order_relaxed); /* see cap_next */
	started_ns = tdm_now_ns();
	/* Release: pairs with the acquire load in tdm__trace_record: the stop that read the
	 * buffers of the last session returned (under lock, before this). */
	atomic_store_explicit(&session, atomic_load_explicit(&session, memory_order_relaxed) + 1,
	                      memory_order_release);
	/* Release: pairs with the acquire loads of tdm__obs in the hooks (tdm__tracing,
	 * observe.c): a hook that sees the bit sees the new session. */
	atomic_fetch_or_explicit(&tdm__obs, TDM__OBS_TRACE, memory_order_release);
	pthread_mutex_unlock(&lock);
	return 0;
}

/* ---- writing ---- */

/* A flow's end, for pairing: a launch's ends pair whatever their timestamps (a device clock a
 * few microseconds off may put the GPU span's start before its launch), the others in time. */
struct flow {
	uint64_t id, ts;
	size_t ev; /* the event's index among all the session's events */
	bool in;   /* the finish ("f"); else a start */
};

/* Flow types: the low two bits of an id written to the file. */
enum { FLOW_SPAWN, FLOW_AWAIT, FLOW_LAUNCH, FLOW_DONE };
static const char *const flow_names[] = {"spawn", "await", "launch", "done"};
static const char *const span_names[] = {"kernel",   "copy H2D", "copy D2H",
                                         "copy D2D", "memset",   "graph"};
static const char *const counter_names[] = {
    "awaits outstanding", "pinned bytes in use",  "poller sweeps", "poller sleeps",
    "GPU spans lost",     "GPU launches untimed", "ready tasks"};
_Static_assert(sizeof(counter_names) / sizeof(counter_names[0]) == TDM__CTR_COUNT,
               "a name per counter");

static bool is_flow(const struct buffer *b, const struct event *e)
{
	if (b->track)
		return e->kind == TDM__TR_GPU_SPAN && e[1].ts != 0; /* its launch's finish */
	return (e->kind >= TDM__TR_SPAWN && e->kind <= TDM__TR_FLOW_IN) ||
	       e->kind == TDM__TR_LAUNCH;
}

static int flow_cmp(const void *a, const void *b)
{
	const struct flow *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return (int)x->in - (int)y->in; /* a start before its finish at one timestamp */
}

/* Microseconds since the start, with nanoseconds: "12.345". */
static void put_ts(FILE *f, uint64_t ts)
{
	uint64_t d = ts > started_ns ? ts - started_ns : 0;
	fprintf(f, "%llu.%03u", (unsigned long long)(d / 1000), (unsigned)(d % 1000));
}

static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void put_head(FILE *f, char ph, int pid, int tid, uint64_t ts)
{
	fprintf(f, "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":", ph, pid, tid);
	put_ts(f, ts);
}

/* A span's begin or end: both carry the name (viewers such as speedscope pair them by it). */
static void put_slice(FILE *f, char ph, int pid, int tid, uint64_t ts, const char *name)
{
	put_head(f, ph, pid, tid, ts);
	fputs(",\"cat\":\"tandem\",\"name\":", f);
	put_str(f, name != NULL ? name : "task");
	fputs("},\n", f);
}

#define NAME_DEPTH 64 /* spans nest deeper than this on a thread: their ends named "task" */
#define NAME_LEN 64

static void put_flow(FILE *f, bool in, int pid, int tid, uint64_t ts, uint32_t id)
{
	put_head(f, in ? 'f' : 's', pid, tid, ts);
	/* Both ends carry one name and category: viewers pair them by (cat, name, id). */
	fprintf(f, ",\"cat\":\"flow\",\"name\":\"%s\",\"id\":%u%s},\n", flow_names[id & 3u], id,
	        in ? ",\"bp\":\"e\"" : "");
}

/* One thread's events: spans balanced, flows that lost an end left out, and a flow outside any
 * span given a zero-length one of its own (viewers tie a flow's ends to enclosing slices). */
static void put_thread(FILE *f, int pid, const struct buffer *b, uint32_t n, const uint32_t *fid,
                       const uint32_t *did, uint64_t stop_ns)
{
	unsigned depth = 0;
	uint64_t last = started_ns;
	char name[NAME_LEN];
	static char open[NAME_DEPTH][NAME_LEN]; /* the open spans' names: the writer holds lock */
#define OPEN(d) ((d) < NAME_DEPTH ? open[d] : NULL)
	for (uint32_t i = 0; i < n; i++) {
		const struct event *e = &b->events[i];
		last = e->ts;
		switch ((enum tdm__trace_kind)e->kind) {
		case TDM__TR_RUN_BEGIN:
			tdm__observe_fn_name((void (*)(void))(uintptr_t)e->word, name,
			                     sizeof(name));
			put_slice(f, 'B', pid, b->tid, e->ts, name);
			if (OPEN(depth) != NULL)
				snprintf(OPEN(depth), NAME_LEN, "%s", name);
			depth++;
			break;
		case TDM__TR_PARK_BEGIN:
			put_slice(f, 'B', pid, b->tid, e->ts, "parked");
			if (OPEN(depth) != NULL)
				snprintf(OPEN(depth), NAME_LEN, "parked");
			depth++;
			break;
		case TDM__TR_RUN_END:
		case TDM__TR_PARK_END:
			if (depth == 0)
				break; /* begun before the start */
			depth--;
			put_slice(f, 'E', pid, b->tid, e->ts, OPEN(depth));
			break;
		case TDM__TR_SPAWN:
		case TDM__TR_SUSPEND:
		case TDM__TR_FLOW_IN:
		case TDM__TR_LAUNCH: {
			bool in = e->kind == TDM__TR_FLOW_IN;
			if (fid[i] == 0 && did[i] == 0)
				break;
			const char *own = in                          ? "resume"
			                  : e->kind == TDM__TR_LAUNCH ? "launch"
			                                              : "spawn";
			if (depth == 0)
				put_slice(f, 'B', pid, b->tid, e->ts, own);
			if (fid[i] != 0)
				put_flow(f, in, pid, b->tid, e->ts, fid[i]);
			if (did[i] != 0) /* the GPU span this resume followed */
				put_flow(f, true, pid, b->tid, e->ts, did[i]);
			if (depth == 0)
				put_slice(f, 'E', pid, b->tid, e->ts, own);
			break;
		}
		case TDM__TR_STEAL: /* an instant, on the thread */
			put_head(f, 'i', pid, b->tid, e->ts);
			fprintf(f,
			        ",\"s\":\"t\",\"cat\":\"tandem\",\"name\":\"steal\","
			        "\"args\":{\"victim\":%llu}},\n",
			        (unsigned long long)e->word);
			break;
		default: /* a track's kinds: not in a thread's buffer */
			break;
		}
	}
	/* Spans still open: at the stop, or at the last event where the buffer filled. */
	uint64_t close =
	    atomic_load_explicit(&b->dropped, memory_order_relaxed) > 0 ? last : stop_ns;
	while (depth > 0) {
		depth--;
		put_slice(f, 'E', pid, b->tid, close, OPEN(depth));
	}
#undef OPEN
}

/* A track's events: GPU spans, begin and end, that never overlap (a stream runs its work in
 * order: a span that seems to begin before the last one ended began when it did), with their
 * launch's finish at the start and the resume's start at the end; counters. */
static void put_track(FILE *f, int pid, const struct buffer *b, uint32_t n, const uint32_t *fid,
                      const uint32_t *did)
{
	uint64_t prev_end = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct event *e = &b->events[i];
		if (e->kind == TDM__TR_COUNTER) {
			unsigned c = (unsigned)(e->word & 0xffu);
			if (c >= TDM__CTR_COUNT)
				continue;
			put_head(f, 'C', pid, b->tid, e->ts);
			fputs(",\"cat\":\"tandem\",\"name\":", f);
			char name[THREAD_NAME_LEN + 32];
			snprintf(name, sizeof(name), "%s: %s", b->name, counter_names[c]);
			put_str(f, name);
			fprintf(f, ",\"args\":{\"value\":%llu}},\n",
			        (unsigned long long)(e->word >> 8));
			continue;
		}
		if (e->kind != TDM__TR_GPU_SPAN || i + 2 >= n)
			continue;
		uint64_t start = e->ts, end = e->word;
		if (start < prev_end)
			start = prev_end;
		if (end < start)
			end = start;
		prev_end = end;
		unsigned kind = (unsigned)(e[1].word & 0xffu);
		uint64_t bytes = e[1].word >> 8;
		const char *name =
		    kind < sizeof(span_names) / sizeof(span_names[0]) ? span_names[kind] : "work";
		/* A begin and an end, not a complete event: a viewer that adds a complete event's
		 * length to its start in floating point (speedscope) finds spans that touch
		 * overlapping. */
		put_head(f, 'B', pid, b->tid, start);
		fprintf(f, ",\"cat\":\"gpu\",\"name\":\"%s\"", name);
		if (bytes != 0)
			fprintf(f, ",\"args\":{\"bytes\":%llu}", (unsigned long long)bytes);
		fputs("},\n", f);
		if (fid[i] != 0)
			put_flow(f, true, pid, b->tid, start, fid[i]);
		if (did[i] != 0) /* from inside the span: its last nanosecond */
			put_flow(f, false, pid, b->tid, end > start ? end - 1 : start, did[i]);
		put_head(f, 'E', pid, b->tid, end); /* as its begin: viewers pair them by both */
		fprintf(f, ",\"cat\":\"gpu\",\"name\":\"%s\"", name);
		if (bytes != 0)
			fprintf(f, ",\"args\":{\"bytes\":%llu}", (unsigned long long)bytes);
		fputs("},\n", f);
		i += 2;
	}
}

static void put_name(FILE *f, int pid, const struct buffer *b)
{
	put_head(f, 'M', pid, b->tid, started_ns);
	fputs(",\"name\":\"thread_name\",\"args\":{\"name\":", f);
	put_str(f, b->name);
	fputs("}},\n", f);
	if (b->track) { /* after the threads */
		put_head(f, 'M', pid, b->tid, started_ns);
		fprintf(f, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}},\n",
		        b->tid - (1 << 30) + 1000);
	}
}

/* The first entry of fl[0, n) at or after (id, ts). */
static size_t flow_lower(const struct flow *fl, size_t n, uint64_t id, uint64_t ts)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (fl[mid].id < id || (fl[mid].id == id && fl[mid].ts < ts))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Pairs the flows: fid[ev] is the written id of each flow event that has both ends. Then the
 * GPU spans of tasks: each resume of an await gets a "done" flow (did[]) from the span of that
 * task that ended last before it.
 */
static int pair_flows(struct buffer **bs, const uint32_t *ns, const size_t *first, size_t nb,
                      size_t nflows, uint32_t *fid, uint32_t *did)
{
	struct flow *fl = calloc(nflows + 1, sizeof(*fl));
	size_t *best = calloc(nflows + 1, sizeof(*best)); /* per resume: its span's ev + 1 */
	uint64_t *best_end = calloc(nflows + 1, sizeof(*best_end));
	if (fl == NULL || best == NULL || best_end == NULL) {
		free(fl);
		free(best);
		free(best_end);
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t j = 0; j < nb; j++)
		for (uint32_t i = 0; i < ns[j]; i++) {
			const struct event *e = &bs[j]->events[i];
			if (bs[j]->track && i + 2 >= ns[j])
				break;
			if (!is_flow(bs[j], e))
				continue;
			if (bs[j]->track) /* a launch's finish: paired whatever the time */
				fl[k++] = (struct flow){e[1].ts, 0, first[j] + i, true};
			else if (e->kind == TDM__TR_LAUNCH)
				fl[k++] = (struct flow){e->word, 0, first[j] + i, false};
			else
				fl[k++] = (struct flow){e->word, e->ts, first[j] + i,
				                        e->kind == TDM__TR_FLOW_IN};
		}
	qsort(fl, k, sizeof(*fl), flow_cmp);
	uint32_t pairs = 0;
	for (size_t i = 0; i + 1 < k; i++)
		if (!fl[i].in && fl[i + 1].in && fl[i].id == fl[i + 1].id) {
			pairs++;
			unsigned type = (fl[i].id >> 63) ? FLOW_LAUNCH
			                : (fl[i].id & 1) ? FLOW_AWAIT
			                                 : FLOW_SPAWN;
			fid[fl[i].ev] = fid[fl[i + 1].ev] = pairs * 4 + type;
			i++;
		}
	/* Done flows: a span of task flow F that ended at E leads to F's first resume at or
	 * after E; of the spans that lead to one resume, the last to end draws the arrow. */
	for (size_t j = 0; j < nb; j++) {
		if (!bs[j]->track)
			continue;
		for (uint32_t i = 0; i + 2 < ns[j]; i++) {
			const struct event *e = &bs[j]->events[i];
			if (e->kind != TDM__TR_GPU_SPAN)
				continue;
			uint64_t task = e[2].word, end = e->word;
			i += 2;
			if (task == 0)
				continue;
			for (size_t r = flow_lower(fl, k, task, end); r < k && fl[r].id == task;
			     r++)
				if (fl[r].in) {
					if (best[r] == 0 || best_end[r] <= end) {
						best[r] = first[j] + (i - 2) + 1;
						best_end[r] = end;
					}
					break;
				}
		}
	}
	for (size_t r = 0; r < k; r++)
		if (best[r] != 0) {
			pairs++;
			did[best[r] - 1] = did[fl[r].ev] = pairs * 4 + FLOW_DONE;
		}
	free(fl);
	free(best);
	free(best_end);
	return 0;
}

/* Writes the session s's buffers to path; lock held, the trace bit cleared. */
static int write_trace(const char *path, uint32_t s, uint64_t stop_ns, uint64_t tasks,
                       uint64_t *dropped_out)
{
	/* The buffers of this session and how much of each was published. */
	size_t nb = 0, total = 0, nflows = 0;
	for (struct buffer *b = buffers; b != NULL; b = b->next)
		nb++;
	struct buffer **bs = calloc(nb + 1, sizeof(*bs));
	uint32_t *ns = calloc(nb + 1, sizeof(*ns));
	size_t *first = calloc(nb + 1, sizeof(*first));
	uint32_t *fid = NULL, *did = NULL;
	int rc = 0;
	uint64_t dropped = 0;
	if (bs == NULL || ns == NULL || first == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	nb = 0;
	for (struct buffer *b = buffers; b != NULL; b = b->next) {
		/* Acquire: pairs with the release store in start_over. */
		if (atomic_load_explicit(&b->session, memory_order_acquire) != s)
			continue;
		bs[nb] = b;
		/* Acquire: pairs with the release stores in tdm__trace_record and the track
		 * writers. */
		ns[nb] = atomic_load_explicit(&b->n, memory_order_acquire);
		first[nb] = total;
		total += ns[nb];
		dropped += atomic_load_explicit(&b->dropped, memory_order_relaxed);
		for (uint32_t i = 0; i < ns[nb]; i++) {
			if (b->track && i + 2 >= ns[nb])
				break;
			nflows += is_flow(b, &b->events[i]);
		}
		nb++;
	}
	fid = calloc(total + 1, sizeof(*fid));
	did = calloc(total + 1, sizeof(*did));
	if (fid == NULL || did == NULL ||
	    (rc = pair_flows(bs, ns, first, nb, nflows, fid, did)) != 0) {
		rc = -ENOMEM;
		goto out;
	}

	FILE *f = fopen(path, "w");
	if (f == NULL) {
		rc = -errno;
		goto out;
	}
	int pid = (int)getpid();
	fputs("{\"traceEvents\":[\n", f);
	for (size_t j = 0; j < nb; j++) {
		if (bs[j]->track)
			put_track(f, pid, bs[j], ns[j], &fid[first[j]], &did[first[j]]);
		else
			put_thread(f, pid, bs[j], ns[j], &fid[first[j]], &did[first[j]], stop_ns);
	}
	/* Every thread's name, those that recorded nothing too (a poller, an idle worker). */
	for (struct buffer *b = buffers; b != NULL; b = b->next)
		put_name(f, pid, b);
	fprintf(f,
	        "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"ts\":0.000,\"name\":\"process_name\","
	        "\"args\":{\"name\":\"tandem\"}}\n],\n\"displayTimeUnit\":\"ns\",\n"
	        "\"otherData\":{\"version\":\"%d.%d.%d\",\"dropped\":%llu,\"tasks_run\":%llu}}\n",
	        pid, TDM_VERSION_MAJOR, TDM_VERSION_MINOR, TDM_VERSION_PATCH,
	        (unsigned long long)dropped, (unsigned long long)tasks);
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -EIO;
out:
	free(fid);
	free(did);
	free(bs);
	free(ns);
	free(first);
	*dropped_out = dropped;
	return rc;
}

/* Stops the trace and writes it; lock held, ex the owner. */
static int stop_locked(void)
{
	/* Relaxed: nothing is published by clearing it; a hook that still sees the bit records
	 * into this session's buffers past what is read below, which is harmless. */
	atomic_fetch_and_explicit(&tdm__obs, ~(unsigned)TDM__OBS_TRACE, memory_order_relaxed);
	uint64_t stop_ns = tdm_now_ns();
	uint32_t s = atomic_load_explicit(&session, memory_order_relaxed); /* changes under lock */
	uint64_t dropped = 0;
	uint64_t tasks = tasks_run(owner) - tasks_before;
	int rc = write_trace(out_path, s, stop_ns, tasks, &dropped);
	if (dropped > 0)
		fprintf(stderr,
		        "tandem: trace %s: %llu events dropped (a thread's buffer was full: "
		        "TANDEM_TRACE_EVENTS raises its %u events)\n",
		        out_path, (unsigned long long)dropped,
		        atomic_load_explicit(&cap_next, memory_order_relaxed));
	/* The buffers of threads that ended meanwhile, written now. */
	for (struct buffer **p = &buffers; *p != NULL;) {
		struct buffer *b = *p;
		if (b->dead) {
			*p = b->next;
			free(b->events);
			free(b);
		} else {
			p = &b->next;
		}
	}
	free(out_path);
	out_path = NULL;
	owner = NULL;
	return rc;
}

/* What the flushers hold goes into the trace, before its stop (the trace still records). */
static void flush_all(void)
{
	pthread_mutex_lock(&flush_lock);
	for (struct flusher *f = flushers; f != NULL; f = f->next)
		f->fn(f->arg);
	pthread_mutex_unlock(&flush_lock);
}

int tdm_trace_stop(tdm_executor *ex)
{
	if (ex == NULL)
		return -EINVAL;
	pthread_mutex_lock(&lock);
	bool mine_to_stop = owner == ex;
	pthread_mutex_unlock(&lock);
	if (mine_to_stop)
		flush_all();
	pthread_mutex_lock(&lock);
	if (owner != ex) {
		pthread_mutex_unlock(&lock);
		return -EINVAL;
	}
	int rc = stop_locked();
	pthread_mutex_unlock(&lock);
	return rc;
}

void tdm__trace_executor_created(void *ex)
{
	const char *path = getenv("TANDEM_TRACE");
	if (path == NULL || path[0] == '\0')
		return;
	int rc = tdm_trace_start(ex, path);
	if (rc != 0 && rc != -EALREADY)
		(void)tdm__refuse(0, "TANDEM_TRACE=%s: not traced: %s", path, tdm_strerror(rc));
}

void tdm__trace_executor_destroyed(void *ex)
{
	pthread_mutex_lock(&lock);
	bool mine_to_stop = owner == ex;
	pthread_mutex_unlock(&lock);
	if (!mine_to_stop)
		return;
	flush_all();
	pthread_mutex_lock(&lock);
	if (owner != ex) {
		pthread_mutex_unlock(&lock);
		return;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s", out_path);
	int rc = stop_locked();
	pthread_mutex_unlock(&lock);
	if (rc != 0)
		fprintf(stderr, "tandem: trace %s: %s\n", path, tdm_strerror(rc));
}
