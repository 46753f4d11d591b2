// SPDX-License-Identifier: MIT
/*
 * tandem_mpi: MPI requests as awaitables (include/tandem_mpi.h), on tandem's public API only.
 *
 * An await that does not complete at its MPI_Test takes a record from its context's pool, makes
 * the record's notification, suspends its task on it (tdm_await_notify) and only then pushes the
 * record to the context's intake: from the push on, the progress thread may complete the request,
 * fire the notification and reuse the record, so nothing may read the record after it. The
 * progress thread moves what the intake holds into a compact array of requests, tests them with
 * MPI_Testsome 32 at a time, writes each completed request's status back to its caller and fires
 * its record with the request's result (tdm_notify_fire_result). docs/design/mpi.md says why.
 *
 * Locking: one mutex per process (mpi_lock) covers every MPI call made here, so that
 * MPI_THREAD_SERIALIZED suffices whatever the number of contexts, and with it each context's
 * intake, pool, request array and flags, and the condition its progress thread sleeps on. The
 * progress thread drops it between chunks of 32 and while it fires.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "mpi/internal.h"

#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_Query_cuda_support, where the MPI has it (Open MPI) */
#endif
#endif

#define CHUNK 32     /* requests per MPI_Testsome, as pika tests them */
#define SLAB_RECS 64 /* records allocated at once */
#define NS_PER_US 1000ull
#define MAX_US 1000000u         /* spin_us, sleep_us, max_sleep_us: at most 1 s */
#define MAX_CANCEL_MS 600000u   /* cancel_wait_ms: at most 10 min */
#define CANCEL_POLL_NS 50000ull /* the destroy's sleep between tests of cancelled requests */
#define POLITE_SPINS 4096       /* how long the progress thread lets a waiting caller in first */

/* A suspended await: its notification, where the caller wants the outcome, and the request. */
struct rec {
	tdm_notify n;
	struct rec *next; /* in the intake or the pool */
	MPI_Request *req;
	MPI_Status *status; /* or MPI_STATUS_IGNORE */
	MPI_Request handle; /* *req at the await */
};

struct slab {
	struct slab *next;
	struct rec recs[SLAB_RECS];
};

struct tdm_mpi {
	tdm_executor *ex;
	pthread_t thread;
	pthread_cond_t cv; /* the progress thread sleeps on it, with mpi_lock */
	uint64_t spin_ns, sleep_ns, max_sleep_ns, cancel_wait_ns, busy_ns;
	bool cuda_aware;   /* MPI says so (MPIX_Query_cuda_support) */
	bool stage_device; /* tdm_mpi_config.stage_device */
	char name[16];

	/* Under mpi_lock. */
	struct rec *intake; /* newest first */
	struct rec *pool;
	struct slab *slabs;
	size_t records;    /* in all slabs: the arrays below hold as many */
	MPI_Request *reqs; /* the outstanding requests, compact: n of them */
	struct rec **recs; /* their records, NULL once completed until compacted */
	size_t n;
	bool sleeping; /* the progress thread waits on cv: a push signals it */
	bool closing;  /* tdm_mpi_destroy began: awaits are refused */
	/* Pushes to the intake (and the destroy's start), counted under the lock: the progress
	 * thread watches it without the lock while it spins with nothing outstanding. */
	_Atomic uint64_t pushes;

	/* Relaxed counters (tdm_mpi_stats). */
	_Atomic uint64_t awaits, immediate, suspended, completed, failed, cancelled, testsome,
	    sleeps, idle_waits, max_outstanding;
};

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
/* Callers blocked on mpi_lock: the progress threads let them in before they take it again. */
static atomic_uint lock_waiters;

static void count(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

void tdm__mpi_lock(void)
{
	atomic_fetch_add_explicit(&lock_waiters, 1, memory_order_relaxed);
	pthread_mutex_lock(&mpi_lock);
	atomic_fetch_sub_explicit(&lock_waiters, 1, memory_order_relaxed);
}

void tdm__mpi_unlock(void)
{
	pthread_mutex_unlock(&mpi_lock);
}

/* The progress thread takes the lock again after a chunk: a caller waiting for it goes first
 * (for a while), or a thread that spins on MPI_Testsome could keep the awaits out. */
static void lock_polite(void)
{
	for (unsigned i = 0;
	     i < POLITE_SPINS && atomic_load_explicit(&lock_waiters, memory_order_relaxed) != 0;
	     i++)
		cpu_relax();
	pthread_mutex_lock(&mpi_lock);
}

/* MPI_Finalized may be called at any time, by any thread. */
static bool mpi_finalized(void)
{
	int fin = 0;
	MPI_Finalized(&fin);
	return fin != 0;
}

int tdm__mpi_settle(tdm_task *t, int result)
{
	tdm_executor *ex = tdm_task_executor(t);
	if (ex == NULL)
		return -EINVAL;
	/* A notification fired with the result and awaited at once: the await returns the result
	 * and makes it the task's (tdm_task_result), or -EINVAL when t is not the running task. */
	tdm_notify n;
	tdm_notify_init(&n, ex);
	tdm_notify_fire_result(&n, result);
	return tdm_await_notify(t, &n);
}

/* ---- life ---- */

int tdm_mpi_init(int *argc, char ***argv, int *provided)
{
	if (mpi_finalized())
		return -ESHUTDOWN;
	int init = 0, level = MPI_THREAD_SINGLE;
	MPI_Initialized(&init);
	if (!init) {
		if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &level) != MPI_SUCCESS)
			return -EIO;
	} else {
		tdm__mpi_lock();
		MPI_Query_thread(&level);
		tdm__mpi_unlock();
	}
	if (provided != NULL)
		*provided = level;
	/* The levels are ordered: SINGLE < FUNNELED < SERIALIZED < MULTIPLE. */
	return level < MPI_THREAD_SERIALIZED ? -EPROTONOSUPPORT : 0;
}

void tdm_mpi_config_init(tdm_mpi_config *cfg)
{
	if (cfg != NULL)
		memset(cfg, 0, sizeof(*cfg));
}

static void *progress_main(void *arg);

int tdm_mpi_create(tdm_executor *ex, const tdm_mpi_config *cfg, tdm_mpi **out)
{
	tdm_mpi_config defaults;
	if (cfg == NULL) {
		tdm_mpi_config_init(&defaults);
		cfg = &defaults;
	}
	if (ex == NULL || out == NULL || cfg->spin_us > MAX_US || cfg->sleep_us > MAX_US ||
	    cfg->max_sleep_us > MAX_US || cfg->cancel_wait_ms > MAX_CANCEL_MS ||
	    cfg->busy_ns > MAX_US * 1000u)
		return -EINVAL;
	unsigned sleep_us = cfg->sleep_us != 0 ? cfg->sleep_us : 20;
	unsigned max_sleep_us = cfg->max_sleep_us != 0 ? cfg->max_sleep_us : 1000;
	if (max_sleep_us < sleep_us)
		return -EINVAL;
	int init = 0;
	MPI_Initialized(&init);
	if (!init)
		return -ENOTCONN;
	if (mpi_finalized())
		return -ESHUTDOWN;
	int level = MPI_THREAD_SINGLE;
	tdm__mpi_lock();
	MPI_Query_thread(&level);
	bool cuda_aware = false;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
	cuda_aware = MPIX_Query_cuda_support() == 1;
#endif
	tdm__mpi_unlock();
	if (level < MPI_THREAD_SERIALIZED)
		return -EPROTONOSUPPORT;

	struct tdm_mpi *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	m->ex = ex;
	m->spin_ns = (cfg->spin_us != 0 ? cfg->spin_us : 200) * NS_PER_US;
	m->sleep_ns = sleep_us * NS_PER_US;
	m->max_sleep_ns = max_sleep_us * NS_PER_US;
	m->cancel_wait_ns = (cfg->cancel_wait_ms != 0 ? cfg->cancel_wait_ms : 1000) * 1000000ull;
	m->busy_ns = cfg->busy_ns != 0 ? cfg->busy_ns : 1000;
	m->cuda_aware = cuda_aware;
	m->stage_device = cfg->stage_device != 0;
	strncpy(m->name, cfg->thread_name != NULL ? cfg->thread_name : "tdm-mpi",
	        sizeof(m->name) - 1);
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0) {
		free(m);
		return -ENOMEM;
	}
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of tdm_now_ns */
	int rc = pthread_cond_init(&m->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0) {
		free(m);
		return -ENOMEM;
	}
	if (pthread_create(&m->thread, NULL, progress_main, m) != 0) {
		pthread_cond_destroy(&m->cv);
		free(m);
		return -EAGAIN;
	}
	*out = m;
	return 0;
}

/* ---- records ---- */

/* A record from the pool, which grows by a slab, and the request arrays with it, so that the
 * progress thread can always take in every record in use. NULL: no memory. Under mpi_lock. */
static struct rec *rec_get(struct tdm_mpi *m)
{
	if (m->pool == NULL) {
		size_t cap = m->records + SLAB_RECS;
		MPI_Request *reqs = realloc(m->reqs, cap * sizeof(*reqs));
		if (reqs == NULL)
			return NULL;
		m->reqs = reqs;
		struct rec **recs = realloc(m->recs, cap * sizeof(*recs));
		if (recs == NULL)
			return NULL;
		m->recs = recs;
		struct slab *s = calloc(1, sizeof(*s));
		if (s == NULL)
			return NULL;
		s->next = m->slabs;
		m->slabs = s;
		m->records = cap;
		for (unsigned i = 0; i < SLAB_RECS; i++) {
			s->recs[i].next = m->pool;
			m->pool = &s->recs[i];
		}
	}
	struct rec *r = m->pool;
	m->pool = r->next;
	return r;
}

static void rec_put(struct tdm_mpi *m, struct rec *r)
{
	r->next = m->pool;
	m->pool = r;
}

/* The intake into the array, oldest first. Under mpi_lock. Returns whether any came. */
static bool take_intake(struct tdm_mpi *m)
{
	struct rec *r = m->intake;
	if (r == NULL)
		return false;
	m->intake = NULL;
	struct rec *fifo = NULL;
	while (r != NULL) {
		struct rec *next = r->next;
		r->next = fifo;
		fifo = r;
		r = next;
	}
	for (r = fifo; r != NULL; r = r->next) {
		m->reqs[m->n] = r->handle;
		m->recs[m->n] = r;
		m->n++;
	}
	if (m->n > atomic_load_explicit(&m->max_outstanding, memory_order_relaxed))
		atomic_store_explicit(&m->max_outstanding, m->n, memory_order_relaxed);
	return true;
}

/* ---- the await ---- */

int tdm_await_mpi(tdm_task *t, tdm_mpi *m, MPI_Request *req, MPI_Status *status)
{
	tdm_executor *ex = tdm_task_executor(t);
	if (ex == NULL)
		return -EINVAL;
	if (m == NULL || req == NULL || *req == MPI_REQUEST_NULL || m->ex != ex)
		return tdm__mpi_settle(t, -EINVAL);
	if (mpi_finalized())
		return tdm__mpi_settle(t, -ESHUTDOWN);
	/* Checks that t is the running task (before the request is touched) and makes the task's
	 * result 0 for an await that completes at once. */
	int rc = tdm__mpi_settle(t, 0);
	if (rc != 0)
		return rc;

	tdm__mpi_lock();
	if (m->closing) {
		tdm__mpi_unlock();
		return tdm__mpi_settle(t, -ESHUTDOWN);
	}
	count(&m->awaits, 1);
	int flag = 0;
	MPI_Status st;
	int mrc = MPI_Test(req, &flag, &st);
	if (mrc != MPI_SUCCESS || flag) {
		int cls = MPI_SUCCESS;
		if (mrc != MPI_SUCCESS) {
			/* Completed in error (its communicator returns errors). */
			MPI_Error_class(mrc, &cls);
			if (*req != MPI_REQUEST_NULL)
				MPI_Request_free(req);
		}
		tdm__mpi_unlock();
		count(&m->immediate, 1);
		if (status != MPI_STATUS_IGNORE) {
			*status = st;
			status->MPI_ERROR = cls;
		}
		if (cls == MPI_SUCCESS)
			return 0; /* the result is 0 already */
		count(&m->failed, 1);
		return tdm__mpi_settle(t, -EIO);
	}
	struct rec *r = rec_get(m);
	if (r == NULL) {
		tdm__mpi_unlock();
		return tdm__mpi_settle(t, -ENOMEM);
	}
	tdm_notify_init(&r->n, ex);
	r->req = req;
	r->status = status;
	r->handle = *req;
	/* Suspend first, publish after: once pushed, the record may be fired and reused by the
	 * progress thread at any moment (it takes it in as soon as this thread lets go of the
	 * lock), and an await still reading the notification would read freed memory. */
	rc = tdm_await_notify(t, &r->n);
	if (rc != TDM_SUSPENDED) {
		/* The executor's destroy began (-ECANCELED): nothing suspended, the request stays
		 * the caller's. */
		rec_put(m, r);
		tdm__mpi_unlock();
		return rc;
	}
	r->next = m->intake;
	m->intake = r;
	count(&m->pushes, 1);
	count(&m->suspended, 1);
	if (m->sleeping)
		pthread_cond_signal(&m->cv);
	tdm__mpi_unlock();
	return TDM_SUSPENDED;
}

/* ---- the progress thread ---- */

struct done {
	struct rec *r;
	int result;
};

/*
 * The request at i completed with MPI error code err (MPI_SUCCESS, or its failure): its status
 * and request go back to the caller, its record into d to be fired. cancelling: the destroy
 * cancelled it; what it became decides the result. Under mpi_lock.
 */
static void complete(struct tdm_mpi *m, size_t i, MPI_Status *st, int err, bool cancelling,
                     struct done *d)
{
	struct rec *r = m->recs[i];
	m->recs[i] = NULL;
	int cls = MPI_SUCCESS;
	if (err != MPI_SUCCESS)
		MPI_Error_class(err, &cls);
	if (m->reqs[i] != MPI_REQUEST_NULL) /* a failed test may leave it allocated */
		MPI_Request_free(&m->reqs[i]);
	int result = cls == MPI_SUCCESS ? 0 : -EIO;
	int was_cancelled = 0;
	if (cancelling && cls == MPI_SUCCESS)
		MPI_Test_cancelled(st, &was_cancelled);
	if (was_cancelled)
		result = -ECANCELED;
	if (r->status != MPI_STATUS_IGNORE) {
		*r->status = *st;
		r->status->MPI_ERROR = cls;
	}
	*r->req = MPI_REQUEST_NULL;
	d->r = r;
	d->result = result;
	count(result == 0 ? &m->completed : result == -EIO ? &m->failed : &m->cancelled, 1);
}

/* Fires what a chunk completed, without the lock (a fire resumes a task), then gives the records
 * back to the pool. Called and returns with mpi_lock held. */
static void fire(struct tdm_mpi *m, struct done *d, unsigned nd)
{
	pthread_mutex_unlock(&mpi_lock);
	for (unsigned k = 0; k < nd; k++)
		tdm_notify_fire_result(&d[k].r->n, d[k].result);
	lock_polite();
	for (unsigned k = 0; k < nd; k++)
		rec_put(m, d[k].r);
}

/* Drops the completed entries from the arrays, keeping the order. Under mpi_lock. */
static void compact(struct tdm_mpi *m)
{
	size_t j = 0;
	for (size_t i = 0; i < m->n; i++) {
		if (m->recs[i] == NULL)
			continue;
		m->reqs[j] = m->reqs[i];
		m->recs[j] = m->recs[i];
		j++;
	}
	m->n = j;
}

/*
 * Tests every outstanding request, CHUNK at a time, and resumes the tasks of those complete.
 * Lets go of the lock between chunks (it holds it from before until after). Returns how many
 * completed.
 */
static unsigned sweep(struct tdm_mpi *m, bool cancelling)
{
	unsigned total = 0;
	int idx[CHUNK];
	MPI_Status st[CHUNK];
	struct done d[CHUNK];
	size_t n = m->n; /* the intake is taken in between sweeps only */
	for (size_t base = 0; base < n; base += CHUNK) {
		int cnt = n - base < CHUNK ? (int)(n - base) : CHUNK;
		int outcount = 0;
		unsigned nd = 0;
		int rc = MPI_Testsome(cnt, &m->reqs[base], &outcount, idx, st);
		count(&m->testsome, 1);
		if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) {
			if (outcount == MPI_UNDEFINED)
				outcount = 0;
			for (int k = 0; k < outcount; k++) {
				int err = rc == MPI_ERR_IN_STATUS ? st[k].MPI_ERROR : MPI_SUCCESS;
				complete(m, base + (size_t)idx[k], &st[k], err, cancelling,
				         &d[nd++]);
			}
		} else {
			/* The call itself failed: which requests completed is not said. Each alone.
			 */
			for (int k = 0; k < cnt; k++) {
				int flag = 0;
				MPI_Status s;
				int r = MPI_Test(&m->reqs[base + (size_t)k], &flag, &s);
				if (r != MPI_SUCCESS || flag)
					complete(m, base + (size_t)k, &s, r, cancelling, &d[nd++]);
			}
		}
		total += nd;
		if (nd > 0) {
			fire(m, d, nd);
		} else if (base + CHUNK < n) {
			pthread_mutex_unlock(&mpi_lock);
			lock_polite();
		}
	}
	compact(m);
	return total;
}

/* MPI was finalised under the context's requests (the program's error): nothing can be asked of
 * them any more. Their tasks resume with -ESHUTDOWN. Under mpi_lock. */
static void fail_finalised(struct tdm_mpi *m)
{
	struct done d[CHUNK];
	while (m->n > 0) {
		unsigned nd = 0;
		for (size_t i = m->n; i-- > 0 && nd < CHUNK;) {
			struct rec *r = m->recs[i];
			*r->req = MPI_REQUEST_NULL;
			d[nd].r = r;
			d[nd++].result = -ESHUTDOWN;
			m->n = i;
		}
		fire(m, d, nd);
	}
}

static void timed_wait(struct tdm_mpi *m, uint64_t ns)
{
	uint64_t until = tdm_now_ns() + ns;
	struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
	                      .tv_nsec = (long)(until % 1000000000ull)};
	m->sleeping = true;
	pthread_cond_timedwait(&m->cv, &mpi_lock, &ts);
	m->sleeping = false;
}

/*
 * The destroy's part: every request still outstanding is cancelled, then tested until complete
 * (cancelled, or completed after all) for at most cancel_wait_ns; what is left is freed and its
 * task resumed with -ECANCELED all the same. Under mpi_lock.
 */
static void cancel_all(struct tdm_mpi *m)
{
	take_intake(m); /* awaits are refused from now on: nothing more comes */
	if (m->n == 0)
		return;
	if (mpi_finalized()) {
		fail_finalised(m);
		return;
	}
	for (size_t i = 0; i < m->n; i++)
		MPI_Cancel(&m->reqs[i]);
	uint64_t until = tdm_now_ns() + m->cancel_wait_ns;
	for (;;) {
		sweep(m, true);
		if (m->n == 0 || tdm_now_ns() >= until)
			break;
		timed_wait(m, CANCEL_POLL_NS);
	}
	struct done d[CHUNK];
	while (m->n > 0) {
		unsigned nd = 0;
		for (size_t i = m->n; i-- > 0 && nd < CHUNK;) {
			struct rec *r = m->recs[i];
			MPI_Request_free(&m->reqs[i]);
			*r->req = MPI_REQUEST_NULL;
			if (r->status != MPI_STATUS_IGNORE) {
				r->status->MPI_ERROR = MPI_SUCCESS;
				MPI_Status_set_cancelled(r->status, 1);
			}
			count(&m->cancelled, 1);
			d[nd].r = r;
			d[nd++].result = -ECANCELED;
			m->n = i;
		}
		fire(m, d, nd);
	}
}

static void *progress_main(void *arg)
{
	struct tdm_mpi *m = arg;
	/* The sleep steps are tens of microseconds: Linux's default timer slack (50 us) would
	 * stretch each to three times that (docs/design/poller.md). */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
	pthread_setname_np(pthread_self(), m->name);
	uint64_t last = tdm_now_ns(); /* the last completion or new request */
	bool warm = false;
	tdm__mpi_lock();
	for (;;) {
		if (take_intake(m))
			last = tdm_now_ns();
		if (m->closing)
			break;
		if (m->n == 0) {
			if (tdm_now_ns() - last < m->spin_ns) {
				/* Nothing outstanding, but requests came lately: the next one is
				 * likely soon, and a wake-up from the condition costs tens to
				 * hundreds of microseconds on virtual CPUs (the poller's rule, and
				 * its reason: docs/design/mpi.md). Watch the pushes without the
				 * lock for the rest of the spin. */
				uint64_t seen =
				    atomic_load_explicit(&m->pushes, memory_order_relaxed);
				pthread_mutex_unlock(&mpi_lock);
				while (atomic_load_explicit(&m->pushes, memory_order_relaxed) ==
				           seen &&
				       tdm_now_ns() - last < m->spin_ns)
					cpu_relax();
				lock_polite();
				continue;
			}
			/* Nothing outstanding: sleep until an await pushes or the destroy comes. */
			count(&m->idle_waits, 1);
			m->sleeping = true;
			while (m->intake == NULL && !m->closing)
				pthread_cond_wait(&m->cv, &mpi_lock);
			m->sleeping = false;
			warm = false;
			continue;
		}
		if (mpi_finalized()) {
			fail_finalised(m);
			continue;
		}
		/* A sweep that took long moved data: MPI progresses a large message only inside
		 * its calls (fragment by fragment, without a single-copy mechanism), so it counts
		 * as activity, as a completion does, or a 64 MiB message would crawl at one
		 * fragment per sleep step. The first sweep after a sleep runs on cold caches and is
		 * not judged: a second one follows it at once. */
		uint64_t chunks = (m->n + CHUNK - 1) / CHUNK;
		uint64_t start = tdm_now_ns();
		unsigned fired = sweep(m, false);
		uint64_t now = tdm_now_ns();
		bool busy = warm && now - start > m->busy_ns * chunks;
		if (fired > 0 || busy)
			last = now;
		if (m->intake != NULL || m->n == 0)
			continue;
		if (!warm) {
			warm = true;
			continue;
		}
		uint64_t quiet = now - last;
		if (quiet < m->spin_ns) {
			/* Spin: completions follow one another. Let the callers in meanwhile. */
			pthread_mutex_unlock(&mpi_lock);
			cpu_relax();
			lock_polite();
			continue;
		}
		/* Back off: a completion after a long wait is seen within 1/32 of it, at most
		 * max_sleep_ns late; a push wakes the thread at once. */
		uint64_t step = quiet / 32;
		step = step < m->sleep_ns ? m->sleep_ns : step;
		step = step > m->max_sleep_ns ? m->max_sleep_ns : step;
		count(&m->sleeps, 1);
		timed_wait(m, step);
		warm = false;
	}
	cancel_all(m);
	tdm__mpi_unlock();
	return NULL;
}

int tdm_mpi_destroy(tdm_mpi *m)
{
	if (m == NULL)
		return -EINVAL;
	tdm__mpi_lock();
	if (m->closing) {
		tdm__mpi_unlock();
		return -EALREADY;
	}
	m->closing = true;
	count(&m->pushes, 1);
	pthread_cond_signal(&m->cv);
	tdm__mpi_unlock();
	pthread_join(m->thread, NULL);
	/* Every record is back in the pool: the thread fired them all before it ended. */
	while (m->slabs != NULL) {
		struct slab *s = m->slabs;
		m->slabs = s->next;
		free(s);
	}
	free(m->reqs);
	free(m->recs);
	pthread_cond_destroy(&m->cv);
	free(m);
	return 0;
}

/* ---- the program's own MPI calls ---- */

int tdm_mpi_lock(tdm_mpi *m)
{
	if (m == NULL)
		return -EINVAL;
	tdm__mpi_lock();
	return 0;
}

int tdm_mpi_unlock(tdm_mpi *m)
{
	if (m == NULL)
		return -EINVAL;
	tdm__mpi_unlock();
	return 0;
}

int tdm_mpi_isend(tdm_mpi *m, const void *buf, int count_, MPI_Datatype type, int dest, int tag,
                  MPI_Comm comm, MPI_Request *req)
{
	if (m == NULL || req == NULL || count_ < 0)
		return -EINVAL;
	if (mpi_finalized())
		return -ESHUTDOWN;
	tdm__mpi_lock();
	int rc = MPI_Isend(buf, count_, type, dest, tag, comm, req);
	tdm__mpi_unlock();
	if (rc != MPI_SUCCESS) {
		*req = MPI_REQUEST_NULL;
		return -EIO;
	}
	return 0;
}

int tdm_mpi_irecv(tdm_mpi *m, void *buf, int count_, MPI_Datatype type, int source, int tag,
                  MPI_Comm comm, MPI_Request *req)
{
	if (m == NULL || req == NULL || count_ < 0)
		return -EINVAL;
	if (mpi_finalized())
		return -ESHUTDOWN;
	tdm__mpi_lock();
	int rc = MPI_Irecv(buf, count_, type, source, tag, comm, req);
	tdm__mpi_unlock();
	if (rc != MPI_SUCCESS) {
		*req = MPI_REQUEST_NULL;
		return -EIO;
	}
	return 0;
}

/* ---- what it did ---- */

int tdm_mpi_stats_get(const tdm_mpi *m, tdm_mpi_stats *out)
{
	if (m == NULL || out == NULL)
		return -EINVAL;
	/* The counters are atomics only to be read here: a cast, not a change, of constness. */
	struct tdm_mpi *mm = (struct tdm_mpi *)(uintptr_t)m;
#define READ(f) atomic_load_explicit(&mm->f, memory_order_relaxed)
	*out = (tdm_mpi_stats){
	    .awaits = READ(awaits),
	    .immediate = READ(immediate),
	    .suspended = READ(suspended),
	    .completed = READ(completed),
	    .failed = READ(failed),
	    .cancelled = READ(cancelled),
	    .testsome = READ(testsome),
	    .sleeps = READ(sleeps),
	    .idle_waits = READ(idle_waits),
	    .max_outstanding = READ(max_outstanding),
	};
#undef READ
	return 0;
}

tdm_executor *tdm__mpi_executor(const tdm_mpi *m)
{
	return m->ex;
}

int tdm_mpi_device_direct(const tdm_mpi *m, const tdm_gpu *gpu)
{
	if (m == NULL || gpu == NULL)
		return -EINVAL;
	return m->cuda_aware && !m->stage_device && strcmp(tdm_gpu_backend_name(gpu), "cuda") == 0;
}

const char *tdm_mpi_strerror(int err)
{
	switch (err) {
	case -ENOTCONN:
		return "MPI is not initialised";
	case -EPROTONOSUPPORT:
		return "MPI's thread level is below MPI_THREAD_SERIALIZED";
	case -ESHUTDOWN:
		return "MPI was finalised, or the context or executor is being destroyed";
	case -EIO:
		return "MPI reported an error (the status's MPI_ERROR holds its class), or a "
		       "device "
		       "error";
	case -ECANCELED:
		return "cancelled by shutdown (tdm_mpi_destroy, or the executor's)";
	case -EALREADY:
		return "a destroy of this context is running already";
	default:
		return tdm_strerror(err);
	}
}
