// SPDX-License-Identifier: MIT
/*
 * tandem's own trace: tdm_trace_start / tdm_trace_flush / tdm_trace_stop and TANDEM_TRACE=path,
 * written as Chrome trace-event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open
 * (docs/design/observe.md, "Trace"; docs/guide/tracing.md).
 *
 * Recording: each thread that records gets a buffer of its own at its first event, put on a list
 * under `lock` once: a chain of chunks of TANDEM_TRACE_EVENTS 24-byte events (65536 by default).
 * An event is a clock read, a 24-byte store and a release store of the chunk's count, and no
 * lock. A full chunk is handed to the writer (linked behind it, the writer woken) and the thread
 * goes on in a fresh one; a thread that has WAITING_MAX full chunks not yet written (the writer
 * is that far behind) or no memory for one stops recording for the rest of the trace, counting
 * what it drops (the file keeps a prefix of that thread, well formed). Buffers stay with their
 * thread across traces: a trace is a session number, and a thread whose buffer holds an older
 * session's events starts it over at its next event. A thread that ends while a trace records
 * leaves its buffer on the list for the writer to finish (its events and its name) and the stop
 * to free; otherwise it frees it as it ends.
 *
 * Writing, as the run goes: the file is opened at the start and a writer thread appends what
 * the buffers published every PERIOD_NS, when a chunk fills, and at tdm_trace_flush, each pass
 * under `lock`: the file is Chrome's JSON array form, "[" and one event a line, each followed
 * by a comma, which the viewers read unterminated, so a run that is killed leaves a trace up to
 * its last pass. Per thread, "B"/"E" events are balanced as they come (an end whose begin came
 * before the start is left out); a flow ("s"/"f") is written once both its ends are seen, with
 * a fresh id, and an end still alone after HOLD_NS is forgotten. The stop makes a last pass,
 * closes the runs still open, writes the names, the counts and "]", and turns the first line
 * "[" into the object form {"traceEvents":[ (the same 16 bytes) with "otherData" at the end.
 *
 * One trace per process at a time, owned by one executor; it records every thread of the process
 * (the workers of other executors too).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "observe.h"
#include "say.h"
#include "tandem.h"

#define DEFAULT_EVENTS 65536u
#define WAITING_MAX 8u             /* full chunks a thread may have waiting for the writer */
#define PERIOD_NS 100000000ull     /* the writer's pass, at the latest */
#define HOLD_NS 10000000000ull     /* a flow's end waits this long for its other end */
#define HOLD_DONE_NS 1000000000ull /* a GPU span and a resume wait this long for each other */
#define THREAD_NAME_LEN 48
#define NAME_DEPTH 64 /* spans nest deeper than this on a thread: their ends named "task" */
#define NAME_LEN 64
#define OUT_CAP (1u << 20) /* the writer's output buffer: written whole lines at a time */
/* The first line as the stop leaves it, and as the run writes it: the same length. */
#define HEAD_DONE "{\"traceEvents\":["
#define HEAD_RUN "[               "
_Static_assert(sizeof(HEAD_DONE) == sizeof(HEAD_RUN), "the stop rewrites the first line");

struct event {
	uint64_t ts; /* tdm_now_ns */
	uint64_t word;
	uint32_t kind;
};

/*
 * A run of events. Written by its buffer's one recorder (its thread, or a track's owner), read
 * by the trace's writer under `lock`: next with acquire (pairs with the release store in
 * reserve: once it is set, n is final), then n with acquire (pairs with the release stores in
 * publish: ev[0, n) are written).
 */
struct chunk {
	_Atomic uint32_t n;
	uint32_t cap;
	_Atomic(struct chunk *) next;
	struct event ev[];
};

struct buffer {
	struct buffer *next; /* lock */
	bool dead;           /* lock: its thread ended (its track closed) while a trace recorded */
	/* The session its events belong to: release store by its recorder (start_over), acquire
	 * load by the writer, which leaves a buffer of another session alone. */
	_Atomic uint32_t session;
	/* Its recorder's own, reset by start_over. */
	struct chunk *cur;        /* the chunk it records into */
	uint32_t cap;             /* events per chunk in this session */
	uint32_t made;            /* chunks it added in this session */
	bool dropping;            /* it stopped recording for the rest of the session */
	_Atomic uint64_t dropped; /* relaxed: a count, written by the recorder, read at the stop */
	_Atomic uint32_t freed;   /* relaxed: chunks the writer freed in this session; a count */
	int tid;
	bool track;                 /* a track (tdm__trace_track_open), not a thread */
	char name[THREAD_NAME_LEN]; /* lock */
	/* The writer's, under lock; start_over resets them before its release store of session
	 * (the last session's writer is done: its stop returned before this session began). */
	struct chunk *head;     /* the oldest chunk of the session not yet freed */
	uint32_t rd;            /* head's events written */
	unsigned depth;         /* open spans */
	uint64_t last;          /* the last event's time */
	uint64_t prev_end;      /* a track's last GPU span's end */
	uint64_t untimed, lost; /* a track's largest "launches untimed" and "spans lost" */
	/* The writer's alone, under lock, across sessions. */
	char (*open)[NAME_LEN]; /* the open spans' names (NAME_DEPTH of them), or NULL */
	uint32_t named;         /* the session whose file has its name, as named_as */
	char named_as[THREAD_NAME_LEN];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct buffer *buffers; /* lock */
static void *owner;            /* lock: the executor whose trace records, NULL when none */
static char *out_path;         /* lock */
static uint64_t started_ns;    /* lock */
/* Events per chunk for the next session: written under lock, read relaxed by threads that
 * start their buffer over (a size: a thread that reads the next session's value while it starts
 * this one over only sizes its chunks by it). */
static _Atomic uint32_t cap_next;
static _Atomic uint32_t session;     /* the current (or last) trace; 0: none yet */
static uint64_t tasks_before;        /* lock: the owner's tasks run when its trace started */
static int next_track_tid = 1 << 30; /* lock: tracks' tids, above any thread's */

/* Wakes the writer early: a chunk filled, or the stop. Initialised once, before the first
 * session is published (start_once). */
static sem_t wake;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
/* tdm__trace_writer_hold: the writer's thread makes no pass (relaxed: a switch for tests). */
static _Atomic bool held;

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

static struct chunk *chunk_new(uint32_t cap)
{
	struct chunk *c = malloc(sizeof(*c) + (size_t)cap * sizeof(struct event));
	if (c == NULL)
		return NULL;
	atomic_init(&c->n, 0);
	c->cap = cap;
	atomic_init(&c->next, NULL);
	return c;
}

/* A chain of chunks that nothing else reads or writes any more. */
static void chain_free(struct chunk *c)
{
	while (c != NULL) {
		/* Relaxed: the caller owns the chain (see callers). */
		struct chunk *next = atomic_load_explicit(&c->next, memory_order_relaxed);
		free(c);
		c = next;
	}
}

static void buffer_free(struct buffer *b)
{
	chain_free(b->head);
	free(b->open);
	free(b);
}

/* A buffer's owner is done with it (its thread ended, or its track closed): freed now, or, while
 * a trace runs, left on the list for the writer to finish and the stop to free. */
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
	buffer_free(b); /* no trace: no writer reads it */
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
		pthread_mutex_lock(&lock); /* the writer reads it */
		snprintf(mine->name, sizeof(mine->name), "%s", name);
		pthread_mutex_unlock(&lock);
	} else if (!mine_closed) {
		mine = buffer_new();
	}
}

/* The buffer begins session s (its recorder alone writes it; the last stop that read it
 * returned before s began: the acquire load of session that showed s pairs with its release). */
static void start_over(struct buffer *b, uint32_t s)
{
	chain_free(b->head); /* the last session's, which its writer is done with */
	b->cap = atomic_load_explicit(&cap_next, memory_order_relaxed);
	b->head = b->cur = chunk_new(b->cap);
	b->made = 0;
	b->dropping = b->cur == NULL;
	/* Relaxed, both: counts, published with the session below. */
	atomic_store_explicit(&b->freed, 0, memory_order_relaxed);
	atomic_store_explicit(&b->dropped, 0, memory_order_relaxed);
	b->rd = 0;
	b->depth = 0;
	b->last = 0;
	b->prev_end = 0;
	b->untimed = b->lost = 0;
	/* Release: pairs with the writer's acquire load; the chunk and the writer's fields are
	 * set. */
	atomic_store_explicit(&b->session, s, memory_order_release);
}

/*
 * Room for k more events of the current session in b, whose one recorder calls this: where
 * they go, to be published by publish(b, k); or NULL, the k counted as dropped. A full chunk
 * is handed to the writer and a fresh one taken; a recorder the writer is WAITING_MAX chunks
 * behind (or without memory) stops recording for the session: what it wrote stays well formed.
 */
static struct event *reserve(struct buffer *b, uint32_t k)
{
	/* Acquire: pairs with the release store in tdm_trace_start; the last stop's reads of
	 * this buffer are over before a new session shows here. */
	uint32_t s = atomic_load_explicit(&session, memory_order_acquire);
	/* Relaxed: the recorder's own word. */
	if (atomic_load_explicit(&b->session, memory_order_relaxed) != s)
		start_over(b, s);
	if (b->dropping)
		goto drop;
	struct chunk *c = b->cur;
	uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed); /* its own count */
	if (c->cap - n < k) {
		/* Relaxed: a count; the writer frees chunks only after it reads them. */
		if (b->made - atomic_load_explicit(&b->freed, memory_order_relaxed) >= WAITING_MAX)
			goto stop;
		struct chunk *fresh = chunk_new(b->cap);
		if (fresh == NULL)
			goto stop;
		b->made++;
		/* Release: pairs with the writer's acquire load of next; c's count (stored with
		 * release by publish) is final. */
		atomic_store_explicit(&c->next, fresh, memory_order_release);
		b->cur = c = fresh;
		n = 0;
		sem_post(&wake); /* a chunk to write */
	}
	return &c->ev[n];
stop:
	b->dropping = true;
drop:
	/* Relaxed: the recorder's own count, read at the stop. */
	atomic_store_explicit(&b->dropped,
	                      atomic_load_explicit(&b->dropped, memory_order_relaxed) + k,
	                      memory_order_relaxed);
	return NULL;
}

static void publish(struct buffer *b, uint32_t k)
{
	struct chunk *c = b->cur;
	/* Release: pairs with the writer's acquire load of n; the k events are written. */
	atomic_store_explicit(&c->n, atomic_load_explicit(&c->n, memory_order_relaxed) + k,
	                      memory_order_release);
}

void tdm__trace_record(enum tdm__trace_kind kind, uint64_t word)
{
	struct buffer *b = mine;
	if (b == NULL) {
		if (mine_closed || (b = mine = buffer_new()) == NULL)
			return;
	}
	struct event *e = reserve(b, 1);
	if (e == NULL)
		return;
	*e = (struct event){tdm_now_ns(), word, (uint32_t)kind};
	publish(b, 1);
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
	struct event *e = reserve(b, 3); /* the three in one chunk, published at once */
	if (e == NULL)
		return;
	e[0] = (struct event){start, end, TDM__TR_GPU_SPAN};
	e[1] = (struct event){launch, bytes << 8 | (kind & 0xffu), TDM__TR_GPU_INFO};
	e[2] = (struct event){0, task, TDM__TR_GPU_TASK};
	publish(b, 3);
}

void tdm__trace_track_counter(struct tdm__track *tr, enum tdm__trace_counter c, uint64_t ts,
                              uint64_t value)
{
	struct buffer *b = (struct buffer *)tr;
	if (b == NULL || !recording())
		return;
	struct event *e = reserve(b, 1);
	if (e == NULL)
		return;
	*e = (struct event){ts, value << 8 | (unsigned)c, TDM__TR_COUNTER};
	publish(b, 1);
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

/* ---- the writer ---- */

/* A flow's end waiting for its other end. Launches pair whatever their times (key 0: a device
 * clock a few microseconds off may put the GPU span's start before its launch), the others in
 * time (key: the time). */
struct fend {
	uint64_t id, key, ts;
	int tid;
	bool in; /* the finish ("f"); else a start */
};

/* A GPU span of a task (its next await flow, task) and an await's resume, for the "done"
 * arrow from the last span to end before the resume to it. */
struct dspan {
	uint64_t task, start, end;
	int tid;
	bool used;
};
struct dres {
	uint64_t id, ts;
	int tid;
	size_t best; /* the span that leads here, its index + 1; 0: none yet */
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

/* The writer's state, under lock, for the trace that records. */
static struct {
	int fd;
	int err; /* the file's first error, negated */
	int pid;
	uint32_t s; /* its session */
	char *out;  /* OUT_CAP bytes, written whole lines at a time */
	size_t used;
	uint32_t pairs; /* flows written */
	struct fend *ends;
	size_t nends, cap_ends;
	struct dspan *spans;
	size_t nspans, cap_spans;
	struct dres *res;
	size_t nres, cap_res;
	bool short_of_memory; /* an end was left out: no room for it */
	pthread_t thread;
} w;

static void out_flush(void)
{
	size_t done = 0;
	while (done < w.used && w.err == 0) {
		ssize_t k = write(w.fd, w.out + done, w.used - done);
		if (k < 0 && errno != EINTR)
			w.err = -errno;
		else if (k > 0)
			done += (size_t)k;
	}
	w.used = 0;
}

/* One line, or several that belong together (a flow's two ends), written whole. */
static void emit(const char *line, int len)
{
	if (len <= 0)
		return;
	if (w.used + (size_t)len > OUT_CAP)
		out_flush();
	memcpy(w.out + w.used, line, (size_t)len);
	w.used += (size_t)len;
}

/* Microseconds since the start, with nanoseconds: "12.345". */
static const char *us(uint64_t ts, char out[32])
{
	uint64_t d = ts > started_ns ? ts - started_ns : 0;
	snprintf(out, 32, "%llu.%03u", (unsigned long long)(d / 1000), (unsigned)(d % 1000));
	return out;
}

/* s as a JSON string, quotes included. */
static const char *quote(const char *s, char *out, size_t len)
{
	size_t k = 0;
	out[k++] = '"';
	for (; *s != '\0' && k + 8 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			k += (size_t)snprintf(out + k, len - k, "\\%c", c);
		else if (c < 0x20)
			k += (size_t)snprintf(out + k, len - k, "\\u%04x", c);
		else
			out[k++] = (char)c;
	}
	out[k++] = '"';
	out[k] = '\0';
	return out;
}

#define LINE 1024
#define QUOTED (NAME_LEN * 6 + 3)

/* A span's begin or end: both carry the name (viewers such as speedscope pair them by it). */
static void put_slice(char ph, int tid, uint64_t ts, const char *name)
{
	char l[LINE], t[32], q[QUOTED];
	emit(l, snprintf(l, sizeof(l),
	                 "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"cat\":\"tandem\","
	                 "\"name\":%s},\n",
	                 ph, w.pid, tid, us(ts, t),
	                 quote(name != NULL ? name : "task", q, sizeof(q))));
}

static int flow_line(char *l, size_t len, bool in, int tid, uint64_t ts, uint32_t id)
{
	char t[32];
	/* Both ends carry one name and category: viewers pair them by (cat, name, id). */
	return snprintf(l, len,
	                "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"cat\":\"flow\","
	                "\"name\":\"%s\",\"id\":%u%s},\n",
	                in ? 'f' : 's', w.pid, tid, us(ts, t), flow_names[id & 3u], id,
	                in ? ",\"bp\":\"e\"" : "");
}

/* A flow from (tid0, ts0) to (tid1, ts1), its two ends in one write. */
static void put_flow(unsigned type, int tid0, uint64_t ts0, int tid1, uint64_t ts1)
{
	char l[2 * LINE];
	uint32_t id = ++w.pairs * 4u + type;
	int k = flow_line(l, LINE, false, tid0, ts0, id);
	k += flow_line(l + k, LINE, true, tid1, ts1, id);
	emit(l, k);
}

static void put_name(const struct buffer *b)
{
	char l[LINE], q[QUOTED];
	emit(l,
	     snprintf(l, sizeof(l),
	              "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"ts\":0.000,\"name\":\"thread_name\","
	              "\"args\":{\"name\":%s}},\n",
	              w.pid, b->tid, quote(b->name, q, sizeof(q))));
	if (b->track) /* after the threads */
		emit(l, snprintf(l, sizeof(l),
		                 "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"ts\":0.000,"
		                 "\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}},\n",
		                 w.pid, b->tid, b->tid - (1 << 30) + 1000));
}

/* The process's name; after it, end: ",\n", or "\n" for the array's last event. */
static void put_process_name(const char *end)
{
	char l[LINE];
	emit(l,
	     snprintf(l, sizeof(l),
	              "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"ts\":0.000,\"name\":\"process_name\","
	              "\"args\":{\"name\":\"tandem\"}}%s",
	              w.pid, end));
}

/* Room for one more of an array that grows; false (the entry left out) without memory. */
static bool room(void **a, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return true;
	size_t c = *cap != 0 ? *cap * 2 : 1024;
	void *p = realloc(*a, c * size);
	if (p == NULL) {
		w.short_of_memory = true;
		return false;
	}
	*a = p;
	*cap = c;
	return true;
}

static void add_end(uint64_t id, uint64_t key, uint64_t ts, int tid, bool in)
{
	if (room((void **)&w.ends, w.nends, &w.cap_ends, sizeof(*w.ends)))
		w.ends[w.nends++] = (struct fend){id, key, ts, tid, in};
}

static int end_cmp(const void *a, const void *b)
{
	const struct fend *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (int)x->in - (int)y->in; /* a start before its finish at one time */
}

static int span_cmp(const void *a, const void *b)
{
	const struct dspan *x = a, *y = b;
	if (x->task != y->task)
		return x->task < y->task ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static int res_cmp(const void *a, const void *b)
{
	const struct dres *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* One event of a thread's: spans balanced as they come, flows' ends kept for pairing, and a
 * flow's end outside any span given a zero-length one of its own (viewers tie a flow's ends to
 * enclosing slices). */
static void thread_event(struct buffer *b, const struct event *e)
{
	char name[NAME_LEN];
	if (b->open == NULL)
		b->open = calloc(NAME_DEPTH, NAME_LEN); /* without: the ends are named "task" */
#define OPEN(d) ((d) < NAME_DEPTH && b->open != NULL ? b->open[d] : NULL)
	b->last = e->ts;
	switch ((enum tdm__trace_kind)e->kind) {
	case TDM__TR_RUN_BEGIN:
		tdm__observe_fn_name((void (*)(void))(uintptr_t)e->word, name, sizeof(name));
		put_slice('B', b->tid, e->ts, name);
		if (OPEN(b->depth) != NULL)
			snprintf(OPEN(b->depth), NAME_LEN, "%s", name);
		b->depth++;
		break;
	case TDM__TR_PARK_BEGIN:
		put_slice('B', b->tid, e->ts, "parked");
		if (OPEN(b->depth) != NULL)
			snprintf(OPEN(b->depth), NAME_LEN, "parked");
		b->depth++;
		break;
	case TDM__TR_RUN_END:
	case TDM__TR_PARK_END:
		if (b->depth == 0)
			break; /* begun before the start */
		b->depth--;
		put_slice('E', b->tid, e->ts, OPEN(b->depth));
		break;
	case TDM__TR_SPAWN:
	case TDM__TR_SUSPEND:
	case TDM__TR_FLOW_IN:
	case TDM__TR_LAUNCH: {
		bool in = e->kind == TDM__TR_FLOW_IN, launch = e->kind == TDM__TR_LAUNCH;
		if (b->depth == 0) {
			const char *own = in ? "resume" : launch ? "launch" : "spawn";
			put_slice('B', b->tid, e->ts, own);
			put_slice('E', b->tid, e->ts, own);
		}
		add_end(e->word, launch ? 0 : e->ts, e->ts, b->tid, in);
		/* An await's resume: the GPU spans of its task lead here. */
		if (in && (e->word & 1u) && !(e->word >> 63) &&
		    room((void **)&w.res, w.nres, &w.cap_res, sizeof(*w.res)))
			w.res[w.nres++] = (struct dres){e->word, e->ts, b->tid, 0};
		break;
	}
	case TDM__TR_STEAL: { /* an instant, on the thread */
		char l[LINE], t[32];
		emit(l, snprintf(
		            l, sizeof(l),
		            "{\"ph\":\"i\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"s\":\"t\","
		            "\"cat\":\"tandem\",\"name\":\"steal\",\"args\":{\"victim\":%llu}},\n",
		            w.pid, b->tid, us(e->ts, t), (unsigned long long)e->word));
		break;
	}
	default: /* a track's kinds: not in a thread's buffer */
		break;
	}
#undef OPEN
}

/* One event of a track's, of `avail` published: a counter, or a GPU span (three events), begin
 * and end, that never overlaps the last (a stream runs its work in order: a span that seems to
 * begin before the last one ended began when it did). How many it took. */
static uint32_t track_event(struct buffer *b, const struct event *e, uint32_t avail)
{
	char l[LINE], t[32], q[QUOTED];
	if (e->kind == TDM__TR_COUNTER) {
		unsigned c = (unsigned)(e->word & 0xffu);
		uint64_t v = e->word >> 8;
		if (c >= TDM__CTR_COUNT)
			return 1;
		if (c == TDM__CTR_UNTIMED && v > b->untimed)
			b->untimed = v;
		if (c == TDM__CTR_SPANS_LOST && v > b->lost)
			b->lost = v;
		char name[THREAD_NAME_LEN + 32];
		snprintf(name, sizeof(name), "%s: %s", b->name, counter_names[c]);
		emit(l, snprintf(l, sizeof(l),
		                 "{\"ph\":\"C\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"cat\":\"tandem\","
		                 "\"name\":%s,\"args\":{\"value\":%llu}},\n",
		                 w.pid, b->tid, us(e->ts, t), quote(name, q, sizeof(q)),
		                 (unsigned long long)v));
		return 1;
	}
	if (e->kind != TDM__TR_GPU_SPAN || avail < 3)
		return 1;
	uint64_t start = e->ts, end = e->word;
	if (start < b->prev_end)
		start = b->prev_end;
	if (end < start)
		end = start;
	b->prev_end = end;
	b->last = end;
	unsigned kind = (unsigned)(e[1].word & 0xffu);
	uint64_t bytes = e[1].word >> 8, task = e[2].word;
	const char *name =
	    kind < sizeof(span_names) / sizeof(span_names[0]) ? span_names[kind] : "work";
	char args[48] = "";
	if (bytes != 0)
		snprintf(args, sizeof(args), ",\"args\":{\"bytes\":%llu}",
		         (unsigned long long)bytes);
	/* A begin and an end, not a complete event: a viewer that adds a complete event's length
	 * to its start in floating point (speedscope) finds spans that touch overlapping. The end
	 * as its begin: viewers pair them by both. */
	int k = snprintf(l, sizeof(l),
	                 "{\"ph\":\"B\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"cat\":\"gpu\","
	                 "\"name\":\"%s\"%s},\n",
	                 w.pid, b->tid, us(start, t), name, args);
	k += snprintf(l + k, sizeof(l) - (size_t)k,
	              "{\"ph\":\"E\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"cat\":\"gpu\","
	              "\"name\":\"%s\"%s},\n",
	              w.pid, b->tid, us(end, t), name, args);
	emit(l, k);
	if (e[1].ts != 0) /* its launch's finish, at its start */
		add_end(e[1].ts, 0, start, b->tid, true);
	if (task != 0 && room((void **)&w.spans, w.nspans, &w.cap_spans, sizeof(*w.spans)))
		w.spans[w.nspans++] = (struct dspan){task, start, end, b->tid, false};
	return 3;
}

/* What b's recorder published since the last pass: written, and the chunks read freed. */
static void drain(struct buffer *b)
{
	for (struct chunk *c; (c = b->head) != NULL;) {
		/* Acquire: pairs with the release store in reserve; once next shows, n is
		 * final. Loaded before n for that. */
		struct chunk *next = atomic_load_explicit(&c->next, memory_order_acquire);
		/* Acquire: pairs with the release stores in publish; ev[0, n) are written. */
		uint32_t n = atomic_load_explicit(&c->n, memory_order_acquire);
		for (uint32_t i = b->rd; i < n;) {
			if (b->track) {
				i += track_event(b, &c->ev[i], n - i);
			} else {
				thread_event(b, &c->ev[i]);
				i++;
			}
		}
		b->rd = n;
		if (next == NULL)
			return;
		free(c); /* its recorder moved on to next: it never touches c again */
		b->head = next;
		b->rd = 0;
		/* Relaxed: a count the recorder reads to bound its chunks (reserve). */
		atomic_store_explicit(&b->freed,
		                      atomic_load_explicit(&b->freed, memory_order_relaxed) + 1,
		                      memory_order_relaxed);
	}
}

/* Flows whose two ends are in: written; the ends still alone kept for the next pass, up to
 * HOLD_NS (all dropped at the last pass). */
static void pair_flows(uint64_t now, bool last)
{
	if (w.nends > 1) /* qsort's array may not be NULL, even empty */
		qsort(w.ends, w.nends, sizeof(*w.ends), end_cmp);
	size_t kept = 0;
	for (size_t i = 0; i < w.nends; i++) {
		const struct fend *e = &w.ends[i];
		if (!e->in && i + 1 < w.nends && w.ends[i + 1].in && w.ends[i + 1].id == e->id) {
			unsigned type = (e->id >> 63) ? FLOW_LAUNCH
			                : (e->id & 1) ? FLOW_AWAIT
			                              : FLOW_SPAWN;
			put_flow(type, e->tid, e->ts, w.ends[i + 1].tid, w.ends[i + 1].ts);
			i++;
		} else if (!last && e->ts + HOLD_NS >= now) {
			w.ends[kept++] = *e;
		}
	}
	w.nends = kept;

	/* Done flows: a span of task flow F that ended at E leads to F's first resume at or after
	 * E; of the spans that lead to one resume, the last to end draws the arrow. */
	if (w.nres > 1)
		qsort(w.res, w.nres, sizeof(*w.res), res_cmp);
	if (w.nspans > 1)
		qsort(w.spans, w.nspans, sizeof(*w.spans), span_cmp);
	for (size_t j = 0; j < w.nspans; j++) {
		struct dspan *sp = &w.spans[j];
		size_t lo = 0, hi = w.nres; /* the first resume at or after (task, end) */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (w.res[mid].id < sp->task ||
			    (w.res[mid].id == sp->task && w.res[mid].ts < sp->end))
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == w.nres || w.res[lo].id != sp->task)
			continue;
		sp->used = true;
		if (w.res[lo].best == 0 || w.spans[w.res[lo].best - 1].end <= sp->end)
			w.res[lo].best = j + 1;
	}
	kept = 0;
	for (size_t r = 0; r < w.nres; r++) {
		const struct dres *rs = &w.res[r];
		if (rs->best != 0) {
			const struct dspan *sp = &w.spans[rs->best - 1];
			/* From inside the span: its last nanosecond. */
			put_flow(FLOW_DONE, sp->tid, sp->end > sp->start ? sp->end - 1 : sp->start,
			         rs->tid, rs->ts);
		} else if (!last && rs->ts + HOLD_DONE_NS >= now) {
			w.res[kept++] = *rs;
		}
	}
	w.nres = kept;
	kept = 0;
	for (size_t j = 0; j < w.nspans; j++) {
		struct dspan *sp = &w.spans[j];
		if (!sp->used && !last && sp->end + HOLD_DONE_NS >= now)
			w.spans[kept++] = *sp;
	}
	w.nspans = kept;
}

/* One pass of the writer (lock held): the buffers of the session, and every thread's name. */
static void pass(bool last)
{
	uint64_t now = tdm_now_ns();
	for (struct buffer *b = buffers; b != NULL; b = b->next) {
		if (b->named != w.s || strcmp(b->named_as, b->name) != 0) {
			put_name(b);
			b->named = w.s;
			memcpy(b->named_as, b->name, sizeof(b->named_as));
		}
		/* Acquire: pairs with the release store in start_over. */
		if (atomic_load_explicit(&b->session, memory_order_acquire) == w.s)
			drain(b);
	}
	pair_flows(now, last);
	out_flush();
}

/* The last pass, the runs still open closed, the counts, and the file's end (lock held). */
static int finish(uint64_t stop_ns, uint64_t tasks, uint64_t *dropped_out)
{
	pass(true);
	uint64_t dropped = 0, untimed = 0, lost = 0;
	for (struct buffer *b = buffers; b != NULL; b = b->next) {
		/* Acquire: pairs with the release store in start_over. */
		if (atomic_load_explicit(&b->session, memory_order_acquire) != w.s)
			continue;
		/* Relaxed: a count. */
		uint64_t d = atomic_load_explicit(&b->dropped, memory_order_relaxed);
		dropped += d;
		untimed += b->untimed;
		lost += b->lost;
		/* Spans still open: at the stop, or at the last event before the drops. */
		while (b->depth > 0) {
			b->depth--;
			put_slice('E', b->tid, d > 0 ? b->last : stop_ns,
			          b->depth < NAME_DEPTH && b->open != NULL ? b->open[b->depth]
			                                                   : NULL);
		}
	}
	char l[LINE];
	emit(l,
	     snprintf(l, sizeof(l),
	              "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"ts\":0.000,\"name\":\"process_name\","
	              "\"args\":{\"name\":\"tandem\"}}\n],\n\"displayTimeUnit\":\"ns\",\n"
	              "\"otherData\":{\"version\":\"%d.%d.%d\",\"dropped\":%llu,"
	              "\"tasks_run\":%llu,\"untimed\":%llu,\"gpu_spans_lost\":%llu}}\n",
	              w.pid, TDM_VERSION_MAJOR, TDM_VERSION_MINOR, TDM_VERSION_PATCH,
	              (unsigned long long)dropped, (unsigned long long)tasks,
	              (unsigned long long)untimed, (unsigned long long)lost));
	out_flush();
	/* The first line: from the array form to the object form, in place. */
	if (w.err == 0 &&
	    pwrite(w.fd, HEAD_DONE, sizeof(HEAD_DONE) - 1, 0) != (ssize_t)(sizeof(HEAD_DONE) - 1))
		w.err = errno != 0 ? -errno : -EIO;
	if (close(w.fd) != 0 && w.err == 0)
		w.err = -errno;
	w.fd = -1;
	free(w.out);
	free(w.ends);
	free(w.spans);
	free(w.res);
	w.out = NULL;
	w.ends = NULL;
	w.spans = NULL;
	w.res = NULL;
	*dropped_out = dropped;
	return w.err;
}

/* The writer's thread: a pass every PERIOD_NS, or as soon as a chunk fills, until its session's
 * stop. */
static void *writer_main(void *arg)
{
	uint32_t s = (uint32_t)(uintptr_t)arg;
	pthread_setname_np(pthread_self(), "tdm-trace");
	for (;;) {
		struct timespec dl;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_nsec += (long)PERIOD_NS;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		while (sem_clockwait(&wake, CLOCK_MONOTONIC, &dl) != 0 && errno == EINTR)
			;
		while (sem_trywait(&wake) == 0)
			; /* one pass for every wake-up so far */
		pthread_mutex_lock(&lock);
		/* Relaxed: session changes under lock. */
		bool on =
		    owner != NULL && atomic_load_explicit(&session, memory_order_relaxed) == s;
		/* Relaxed: a test's switch (tdm__trace_writer_hold), set before the work it holds
		 * back; a pass it skips is done by the flush or the stop, under this lock. */
		if (on && !atomic_load_explicit(&held, memory_order_relaxed))
			pass(false);
		pthread_mutex_unlock(&lock);
		if (!on)
			return NULL;
	}
}

void tdm__trace_writer_hold(bool on)
{
	atomic_store_explicit(&held, on, memory_order_relaxed); /* a switch, see held */
}

static void init_wake(void)
{
	if (sem_init(&wake, 0, 0) != 0)
		abort(); /* only with a count of 0 out of range: cannot happen */
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
		cap = v < 3 ? 3 : (uint32_t)v; /* a GPU span's three events fit in one chunk */
	}
	pthread_once(&start_once, init_wake);
	pthread_mutex_lock(&lock);
	if (owner != NULL) {
		pthread_mutex_unlock(&lock);
		return -EALREADY;
	}
	int rc = 0;
	char *p = strdup(path);
	char *out = malloc(OUT_CAP);
	int fd = -1;
	if (p == NULL || out == NULL) {
		rc = -ENOMEM;
		goto fail;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto fail;
	}
	/* Relaxed: session changes under lock. */
	uint32_t s = atomic_load_explicit(&session, memory_order_relaxed) + 1;
	memset(&w, 0, sizeof(w));
	w.fd = fd;
	w.pid = (int)getpid();
	w.s = s;
	w.out = out;
	emit(HEAD_RUN "\n", (int)sizeof(HEAD_RUN)); /* a trace killed now is an empty array */
	put_process_name(",\n"); /* for a file cut before the stop's; the stop's ends the array */
	out_flush();
	if (w.err != 0) { /* before the writer exists: the lock is never let go on the way out */
		rc = w.err;
		goto fail;
	}
	/* The writer waits for lock, which this holds until the session is published. */
	int e = pthread_create(&w.thread, NULL, writer_main, (void *)(uintptr_t)s);
	if (e != 0) {
		rc = -e;
		goto fail;
	}
	owner = ex;
	out_path = p;
	tasks_before = tasks_run(ex);
	atomic_store_explicit(&cap_next, cap, memory_order_relaxed); /* see cap_next */
	started_ns = tdm_now_ns();
	/* Release: pairs with the acquire load in reserve: the stop that read the buffers of
	 * the last session returned (under lock, before this). */
	atomic_store_explicit(&session, s, memory_order_release);
	/* Release: pairs with the acquire loads of tdm__obs in the hooks (tdm__tracing,
	 * observe.c): a hook that sees the bit sees the new session. */
	atomic_fetch_or_explicit(&tdm__obs, TDM__OBS_TRACE, memory_order_release);
	pthread_mutex_unlock(&lock);
	return 0;
fail:
	if (fd >= 0)
		close(fd); /* never unlinked: the path may be a device, or a file of the user's */
	free(p);
	free(out);
	w.out = NULL;
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Stops the trace and writes its end; lock held, owner the executor. *writer: the writer's
 * thread, for the caller to wake and join once it lets go of lock. */
static int stop_locked(pthread_t *writer)
{
	/* Relaxed: nothing is published by clearing it; a hook that still sees the bit records
	 * into this session's buffers past what is read below, which is harmless. */
	atomic_fetch_and_explicit(&tdm__obs, ~(unsigned)TDM__OBS_TRACE, memory_order_relaxed);
	uint64_t stop_ns = tdm_now_ns();
	uint64_t dropped = 0;
	uint64_t tasks = tasks_run(owner) - tasks_before;
	int rc = finish(stop_ns, tasks, &dropped);
	if (dropped > 0)
		fprintf(
		    stderr,
		    "tandem: trace %s: %llu events dropped (a thread was %u chunks of %u events "
		    "ahead of the writer: TANDEM_TRACE_EVENTS raises the chunk)\n",
		    out_path, (unsigned long long)dropped, WAITING_MAX,
		    atomic_load_explicit(&cap_next, memory_order_relaxed));
	/* The buffers of threads that ended meanwhile, written now. */
	for (struct buffer **p = &buffers; *p != NULL;) {
		struct buffer *b = *p;
		if (b->dead) {
			*p = b->next;
			buffer_free(b);
		} else {
			p = &b->next;
		}
	}
	free(out_path);
	out_path = NULL;
	owner = NULL;
	*writer = w.thread;
	return rc;
}

static void writer_join(pthread_t writer)
{
	sem_post(&wake); /* it finds its session stopped */
	pthread_join(writer, NULL);
}

/* What the flushers hold goes into the trace (the trace still records). */
static void flush_all(void)
{
	pthread_mutex_lock(&flush_lock);
	for (struct flusher *f = flushers; f != NULL; f = f->next)
		f->fn(f->arg);
	pthread_mutex_unlock(&flush_lock);
}

int tdm_trace_flush(tdm_executor *ex)
{
	if (ex == NULL)
		return -EINVAL;
	pthread_mutex_lock(&lock);
	bool mine_to_flush = owner == ex;
	pthread_mutex_unlock(&lock);
	if (!mine_to_flush)
		return -EINVAL;
	flush_all();
	pthread_mutex_lock(&lock);
	if (owner != ex) {
		pthread_mutex_unlock(&lock);
		return -EINVAL; /* stopped meanwhile */
	}
	w.short_of_memory = false;
	pass(false);
	int rc = w.err != 0 ? w.err : w.short_of_memory ? -ENOMEM : 0;
	pthread_mutex_unlock(&lock);
	return rc;
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
	pthread_t writer;
	int rc = stop_locked(&writer);
	pthread_mutex_unlock(&lock);
	writer_join(writer);
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
	pthread_t writer;
	int rc = stop_locked(&writer);
	pthread_mutex_unlock(&lock);
	writer_join(writer);
	if (rc != 0)
		fprintf(stderr, "tandem: trace %s: %s\n", path, tdm_strerror(rc));
}
