// SPDX-License-Identifier: MIT
/*
 * Pipelines (tdm_pipeline_run): slots that carry batches through prepare, copy in, compute, copy
 * out and consume. This file owns a pipeline's whole life: checking the config, the slots'
 * buffers and stream leases, the slots' tasks, the order of consume, the stats, and giving every
 * resource back.
 *
 * Why it is shaped this way (the measurements: docs/design/pipeline.md):
 * - One await per batch. A slot enqueues copy in, compute and copy out back to back on its
 *   batch's stream and awaits the stream once. The stream runs the three in order; batches on
 *   the other stream overlap with it (one batch's copy in beside another's kernel and a third's
 *   copy out, on the device's separate copy engines). An await per stage would add a round trip
 *   per stage and leave the stream idle during each.
 * - Slots are not streams. The batches take turns on a few streams (two by default), in index
 *   order, each batch's work in one piece (the order lock): that is the hand-written double
 *   buffer's shape on the device, with in_flight batches queued ahead of it on the host's side.
 *   A stream per slot lets device-filling kernels of many batches stand ready at once and
 *   interleave, which lengthens the run, and copies in one direction on many streams share the
 *   bus where one at a time streams it.
 * - A worker stays awake while the pipeline runs (an awake tdm__hold, unless cfg.no_spin): a
 *   batch's completion otherwise often finds every worker asleep, and the futex wake-up it then
 *   waits for adds to the whole run when it is the last batch's.
 * - Back-pressure comes free: a slot takes its next batch only after its last one was consumed,
 *   so in_flight bounds the memory and the batches between prepare and the end of consume.
 * - No task ever waits for another task. In ordered mode a slot whose batch is done before its
 *   turn parks the batch in `ring`, and its task ends; whoever consumes batch i goes on with
 *   i+1, i+2, ... while they are parked, and starts a new task for each slot it frees. A task
 *   suspended on a notify that another slot fires would hang shutdown: in TDM_SHUTDOWN_CANCEL
 *   mode the executor cancels woken tasks instead of running them, so the slot that should pass
 *   the turn on may never run again, and the executor does not terminate while a task is
 *   suspended. The only awaits here are on GPU work, which always ends.
 * - Resources belong to the pipeline, not to its tasks: a task cancelled by shutdown never runs
 *   again, so tdm_pipeline_run takes everything before the first task and gives it all back after
 *   the group's wait, on its own thread.
 * - A slot task that got through a batch without suspending (everything failed at once) ends and
 *   starts its successor instead of looping: that is the point where shutdown can cancel it.
 *
 * Lock rules: prep_lock serialises prepare and guards the batch counter; lock guards the consume
 * order (ring, next_consume) and the stats. Neither is held across an await or a call of consume,
 * and no thread holds both. A stream's order lock is taken under prep_lock (before prepare) and
 * held, without prep_lock, until the batch's await is recorded or nothing was enqueued: never
 * across a suspension, so shutdown cannot strand it. A slot's own fields are used by one task at a
 * time: its current task, or, for a batch parked in the ring, the task that consumes it; the
 * hand-over goes through `lock`, and tdm_spawn publishes the slot to its next task.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/say.h"
#include "gpu_internal.h"

#define DEFAULT_IN_FLIGHT 8  /* the fastest measured (docs/design/pipeline.md) */
#define DEFAULT_STREAMS 2    /* at most; see the file comment */
#define DRAIN_SPIN_NS 200000 /* stream_drain spins this long before it polls in sleeps */
#define DRAIN_POLL_NS 20000  /* then its poll step: a retired slot is rare, latency moot */

struct pipe;

/* A stream the batches take turns on, and the lock that keeps each batch's work on it in one
 * piece: taken under prep_lock as the batch is numbered, so that batches reach the stream in
 * index order, and given back once the batch's await is recorded. */
struct pstream {
	tdm_stream *s;
	pthread_mutex_t order;
};

struct slot {
	struct pipe *p;
	tdm_batch b;        /* the batch it carries; buffers stay from batch to batch, the stream
	                       is the batch's (b.index % nstreams) */
	struct pstream *ps; /* the current batch's stream while its order lock is held, else NULL */
	tdm_stream *home;   /* where its device buffers were allocated and are freed */
	bool dev_async;     /* dev_in and dev_out are stream-ordered (on home) */
	struct tdm__event *ev; /* primed: recorded after the batch's work, awaited instead of the
	                         stream (the caller enqueued the batch, its task awaits it) */
	struct tdm__event *ev_left; /* an event whose await failed at once: the teardown waits for
	                              it (its work may still run), then gives it back */
	bool primed;                /* the current batch was taken and enqueued by slot_prime */
	bool busy;     /* carries a batch that prepare gave and that is not finished yet */
	bool enqueued; /* the current batch put work on the stream */
	bool waited;   /* the current batch's await suspended: the poller saw its work end */
	bool retired;  /* takes no more batches: work of its may still run on the stream */
};

struct pipe {
	struct tdm__gpu *gpu;
	tdm_gpu *handle; /* the layer's, for the leases */
	tdm_pipeline_config cfg;
	unsigned n; /* slots */
	unsigned nstreams;
	struct pstream streams[TDM_PIPELINE_MAX_IN_FLIGHT];
	tdm_group group;

	pthread_mutex_t prep_lock;
	uint64_t next_index; /* prep_lock */
	bool ended;          /* prep_lock: prepare returned TDM_PIPELINE_END */
	uint64_t t_first;    /* prep_lock: when the first prepare began; 0 before it (the
	                        monotonic clock is never 0 once the system runs) */

	pthread_mutex_t lock;
	/* Ordered mode: the batch whose turn it is, and the batches done before their turn, by
	 * index % n. Batches between prepare and the end of consume are at most n, and all have
	 * indices in [next_consume, next_consume + n): the entries never collide. */
	uint64_t next_consume;                         /* lock */
	struct slot *ring[TDM_PIPELINE_MAX_IN_FLIGHT]; /* lock */
	tdm_pipeline_stats st;                         /* lock */
	uint64_t first_error_index;                    /* lock */
	uint64_t t_last;                               /* lock: when the last batch finished */
	int run_err; /* lock: a failure of the pipeline itself, not of a batch */

	struct slot slots[];
};

static int batch_error(int rc)
{
	return rc < 0 ? rc : -EINVAL;
}

static void note_run_error(struct pipe *p, int rc)
{
	pthread_mutex_lock(&p->lock);
	if (p->run_err == 0)
		p->run_err = rc;
	pthread_mutex_unlock(&p->lock);
}

/* ---- the stages ---- */

/* The batch's work (and its await, if any) is on the stream: the next batch may follow. */
static void batch_order_done(struct slot *s)
{
	if (s->ps != NULL) {
		pthread_mutex_unlock(&s->ps->order);
		s->ps = NULL;
	}
}

/* Gives s the next batch and prepares it; false when the input is over. */
static bool batch_take(struct slot *s)
{
	struct pipe *p = s->p;
	tdm_batch *b = &s->b;
	bool taken = false;

	s->enqueued = false;
	s->waited = false;
	pthread_mutex_lock(&p->prep_lock);
	if (!p->ended) {
		if (p->t_first == 0)
			p->t_first = tdm_now_ns();
		/* The stream is the batch's from prepare on (prepare may use it), and batches
		 * reach it in index order: the order lock is taken under prep_lock. */
		struct pstream *ps = &p->streams[p->next_index % p->nstreams];
		pthread_mutex_lock(&ps->order);
		s->ps = ps;
		b->index = p->next_index;
		b->in_len = p->cfg.in_bytes;
		b->out_len = p->cfg.out_bytes;
		b->stream = ps->s;
		b->status = 0;
		int rc = p->cfg.prepare(b, p->cfg.user);
		if (rc == TDM_PIPELINE_END) {
			p->ended = true;
			batch_order_done(s);
		} else {
			p->next_index++;
			b->status = rc == 0 ? 0 : batch_error(rc);
			if (b->status == 0 && b->in_len > p->cfg.in_bytes)
				b->status = -EINVAL;
			taken = true;
		}
	}
	pthread_mutex_unlock(&p->prep_lock);
	if (taken)
		s->busy = true;
	return taken;
}

/* Copy in, compute, copy out, back to back on the slot's stream; the first failure stops it. */
static void batch_enqueue(struct slot *s)
{
	struct pipe *p = s->p;
	tdm_batch *b = &s->b;
	int rc = 0;

	if (b->in_len > 0) {
		rc = tdm_memcpy_async(b->stream, b->dev_in, b->host_in, b->in_len, TDM_COPY_H2D);
		s->enqueued = rc == 0;
	}
	if (rc == 0 && p->cfg.compute != NULL) {
		rc = p->cfg.compute(b, p->cfg.user);
		s->enqueued = true; /* it may have enqueued work before it failed */
	} else if (rc == 0 && b->out_len > b->in_len) {
		b->out_len = b->in_len; /* copy only: what went in comes out */
	}
	if (rc == 0 && b->out_len > p->cfg.out_bytes)
		rc = -EINVAL;
	if (rc == 0 && b->out_len > 0) {
		rc = tdm_memcpy_async(b->stream, b->host_out, b->dev_out, b->out_len, TDM_COPY_D2H);
		s->enqueued |= rc == 0;
	}
	if (rc != 0)
		b->status = batch_error(rc);
}

static int batch_await(tdm_task *t, struct slot *s)
{
	if (s->ev != NULL) {
		/* Primed: the event covers the batch's work. Done already (0, or the work's
		 * error) counts as waited; failing at once (-ESHUTDOWN) leaves the work running.
		 * slot_prime gave the order lock back already. */
		struct tdm__event *ev = s->ev;
		s->waited = true;
		int rc = tdm__await_event(t, ev);
		if (rc != TDM_SUSPENDED && rc != 0 && rc != -EIO)
			s->waited = false;
		return rc;
	}
	/* Set before the call: once it returns TDM_SUSPENDED the task may already run again on
	 * another worker, and this thread must not touch the slot (the order lock is the pipe's,
	 * and this thread's: it took it in batch_take). */
	struct pstream *ps = s->ps;
	s->ps = NULL;
	s->waited = true;
	int rc = tdm_await_stream(t, s->b.stream);
	pthread_mutex_unlock(&ps->order);
	if (rc != TDM_SUSPENDED)
		s->waited = false;
	return rc;
}

static void batch_settle(struct slot *s, int result)
{
	if (s->b.status == 0)
		s->b.status = result;
	if (s->ev != NULL) {
		if (s->waited)
			tdm__event_give(s->ev);
		else
			s->ev_left = s->ev; /* the teardown waits for it, then gives it back */
		s->ev = NULL;
	}
	/*
	 * An await that suspended resumed once the poller saw the work end (or fail). One that
	 * failed at once (the GPU layer shutting down, no memory for its completion) leaves the
	 * work running: the slot's buffers may not be reused, so the slot retires, and the
	 * teardown drains its stream before freeing them. A failed device runs nothing more:
	 * there the slot goes on, and its later batches fail at once. Acquire: pairs with the
	 * release in tdm__device_fail.
	 */
	if (!s->waited && !atomic_load_explicit(&s->b.stream->dev->failed, memory_order_acquire))
		s->retired = true;
}

/* Consume stage: runs without a lock. */
static void batch_consume(struct slot *s)
{
	struct pipe *p = s->p;
	tdm_batch *b = &s->b;

	if (b->status == 0 && p->cfg.consume != NULL) {
		int rc = p->cfg.consume(b, p->cfg.user);
		if (rc != 0)
			b->status = batch_error(rc);
	}
}

/* Counts a finished batch; p->lock held. */
static void batch_account(struct slot *s)
{
	struct pipe *p = s->p;
	const tdm_batch *b = &s->b;
	uint64_t now = tdm_now_ns();

	if (b->status == 0) {
		p->st.batches++;
		p->st.bytes_in += b->in_len;
		p->st.bytes_out += b->out_len;
	} else {
		p->st.failed++;
		if (p->st.first_error == 0 || b->index < p->first_error_index) {
			p->st.first_error = b->status;
			p->first_error_index = b->index;
		}
	}
	if (now > p->t_last)
		p->t_last = now;
	s->busy = false;
}

static int slot_task(tdm_task *t, void *arg);

/* Starts a new task for s; the caller must not touch s afterwards. */
static int slot_spawn(struct slot *s)
{
	return tdm_spawn(s->p->gpu->ex, slot_task, s, &s->p->group);
}

/*
 * Ordered mode: parks s's finished batch, then, if the batch whose turn it is is parked, takes
 * the consumer's part: consumes it and every parked batch after it, in order, and starts a task
 * for each other slot it freed. Only the task that takes ring[next_consume % n] out of the ring
 * consumes, and next_consume moves on only after that consume returned, so one task at a time
 * consumes, in index order. True when s's own batch was consumed here (s goes on).
 */
static bool batch_turn(struct slot *s)
{
	struct pipe *p = s->p;
	bool self = false;

	pthread_mutex_lock(&p->lock);
	p->ring[s->b.index % p->n] = s;
	for (;;) {
		struct slot *c = p->ring[p->next_consume % p->n];
		if (c == NULL)
			break; /* its turn's batch is still on the GPU, or being consumed */
		p->ring[p->next_consume % p->n] = NULL;
		pthread_mutex_unlock(&p->lock);
		batch_consume(c);
		pthread_mutex_lock(&p->lock);
		batch_account(c);
		p->next_consume++;
		if (c == s) {
			self = true;
		} else if (!c->retired) {
			/* After next_consume moved: c's next batch may land on c's old entry. */
			pthread_mutex_unlock(&p->lock);
			int rc = slot_spawn(c);
			if (rc != 0)
				note_run_error(p, rc); /* the slot stops; the others go on */
			pthread_mutex_lock(&p->lock);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return self;
}

/* After a batch: true when the calling task goes on with s's next batch. */
static bool batch_done(struct slot *s)
{
	struct pipe *p = s->p;

	if (p->cfg.ordered) {
		if (!batch_turn(s))
			return false; /* parked: its consumer starts the slot's next task */
	} else {
		batch_consume(s);
		pthread_mutex_lock(&p->lock);
		batch_account(s);
		pthread_mutex_unlock(&p->lock);
	}
	if (s->retired)
		return false;
	if (s->waited)
		return true;
	/* Nothing suspended this batch: end here and let a new task go on, so that a slot whose
	 * batches all fail at once still meets the executor between batches (where shutdown can
	 * cancel it). Without memory for that task, loop on. */
	return slot_spawn(s) != 0;
}

/* One slot: batches one after another, until the input is over or the slot is handed on. */
static int slot_task(tdm_task *t, void *arg)
{
	struct slot *s = arg;

	TDM_BEGIN(t);
	for (;;) {
		if (!s->primed) {
			if (!batch_take(s))
				break;
			if (s->b.status == 0)
				batch_enqueue(s);
		}
		s->primed = false;
		if (s->enqueued) {
			TDM_AWAIT(t, batch_await(t, s));
			batch_settle(s, tdm_task_result(t));
		} else {
			batch_order_done(s); /* nothing of it reached the stream */
		}
		if (!batch_done(s))
			return 0;
	}
	TDM_END(t);
}

/* ---- set-up and teardown ---- */

/*
 * The streams the batches take turns on: exclusive while at least one stream of the set stays
 * for other tasks' shared leases (counting every holder's exclusive streams: other pipelines'
 * too), shared past that. When no other stream can be leased (none left, or the shared lease
 * gave one the pipeline holds already), the batches take turns on fewer streams; -EBUSY only
 * when none could be had.
 */
static int streams_lease(struct pipe *p, unsigned want)
{
	const struct tdm__gdev *d = &p->gpu->devs[p->cfg.device];
	for (unsigned k = 0; k < want; k++) {
		struct pstream *ps = &p->streams[k];
		int rc = -EBUSY;
		if (tdm__streams_open(d, 0) >= 2)
			rc = tdm_stream_lease(p->handle, p->cfg.device, TDM_STREAM_EXCLUSIVE,
			                      &ps->s);
		/* Another holder took one meanwhile, and this took the last open stream: give it
		 * back (two racing pipelines may both do so, and share: never none left). */
		if (rc == 0 && tdm__streams_open(d, 0) == 0) {
			tdm_stream_release(ps->s);
			rc = -EBUSY;
		}
		if (rc == -EBUSY)
			rc = tdm_stream_lease(p->handle, p->cfg.device, TDM_STREAM_SHARED, &ps->s);
		if (rc == -EBUSY && k > 0)
			break;
		if (rc != 0)
			return rc;
		bool again = false; /* a shared lease may give a stream this pipeline holds */
		for (unsigned j = 0; j < k; j++)
			again |= p->streams[j].s->st == ps->s->st;
		if (again) {
			tdm_stream_release(ps->s);
			ps->s = NULL;
			break;
		}
		pthread_mutex_init(&ps->order, NULL);
		p->nstreams = k + 1;
	}
	return 0;
}

/* A poll step of stream_drain: spin for the first DRAIN_SPIN_NS, then sleep. */
static void drain_step(uint64_t since)
{
	if (tdm_now_ns() - since < DRAIN_SPIN_NS)
		tdm__cpu_relax();
	else
		tdm__sleep_ns(DRAIN_POLL_NS);
}

/* Waits until e's work is done, and gives e back; 0 or the work's error. */
static int event_finish(struct tdm__event *e)
{
	struct tdm__gpu *gpu = e->dev->gpu;
	uint64_t since = tdm_now_ns();
	int rc;
	while ((rc = gpu->ops->event_query(gpu->b, e->be)) == -EAGAIN)
		drain_step(since);
	tdm__event_give(e);
	return rc;
}

/*
 * Waits until the work enqueued on s so far is done: an event recorded now and polled (the
 * poller may be stopping). A failed device refuses the record: it runs nothing more. It spins
 * first: at the set-up the drains end within microseconds, and a caller that slept just before
 * it starts the first batches issues its first copy and launch about twice as slowly as a
 * thread that kept running (docs/design/pipeline.md).
 */
static void stream_drain(tdm_stream *s)
{
	struct tdm__gdev *d = s->dev;
	struct tdm__gpu *gpu = d->gpu;
	struct tdm__event *e;
	uint64_t since = tdm_now_ns();

	if (tdm__event_take(d, &e) != 0) {
		while (gpu->ops->stream_query(gpu->b, s->bs) == -EAGAIN)
			drain_step(since);
		return;
	}
	if (tdm__event_record(e, s) == 0)
		(void)event_finish(e);
	else
		tdm__event_give(e);
}

/*
 * Device memory is stream-ordered on the slot's stream, where all its use is: no device-wide
 * synchronisation at the teardown (cudaFree has one), and the device's pool serves the next
 * pipeline. A backend without it gets plain allocations.
 */
static int slot_device_alloc(struct slot *s, size_t bytes, void **out)
{
	struct pipe *p = s->p;
	if (s->dev_async) {
		int rc = tdm_device_alloc_async(s->home, bytes, out);
		if (rc != -ENOTSUP)
			return rc;
		s->dev_async = false;
	}
	return tdm__device_alloc(p->gpu, p->cfg.device, bytes, out);
}

static void slot_device_free(struct slot *s, void *ptr)
{
	struct pipe *p = s->p;
	/* Ordered after home's work; the buffer's last use, on whichever stream, is over (every
	 * batch's await resumed, and a retired slot's stream was drained). A refused free (a
	 * failed device) leaves it to us. */
	if (!s->dev_async || tdm_device_free_async(s->home, ptr) != 0)
		tdm__device_free(p->gpu, p->cfg.device, ptr);
}

static int slot_setup(struct pipe *p, unsigned k)
{
	struct slot *s = &p->slots[k];
	tdm_batch *b = &s->b;
	int rc;

	s->p = p;
	s->home = p->streams[k % p->nstreams].s;
	s->dev_async = true;
	if ((rc = tdm__pinned_alloc(p->gpu, p->cfg.in_bytes, &b->host_in)) != 0 ||
	    (rc = tdm__pinned_alloc(p->gpu, p->cfg.out_bytes, &b->host_out)) != 0 ||
	    (rc = slot_device_alloc(s, p->cfg.in_bytes, &b->dev_in)) != 0)
		return rc;
	if (p->cfg.compute == NULL)
		b->dev_out = b->dev_in; /* copy only: nothing is written to a second buffer */
	else if ((rc = slot_device_alloc(s, p->cfg.out_bytes, &b->dev_out)) != 0)
		return rc;
	return 0;
}

/* Gives back what slot_setup took (any part of it). Before the streams' leases: while a lease
 * is held, tdm_gpu_destroy waits, so the pools the memory goes back to still exist. */
static void slot_teardown(struct slot *s)
{
	struct pipe *p = s->p;
	tdm_batch *b = &s->b;

	if (p == NULL)
		return; /* never set up */
	if (s->retired && b->stream != NULL)
		stream_drain(b->stream); /* its last batch's work may still run there */
	/* A primed batch whose task never awaited it (cancelled by shutdown), or whose await
	 * failed at once: its work may still run. */
	if (s->ev != NULL)
		event_finish(s->ev);
	if (s->ev_left != NULL)
		event_finish(s->ev_left);
	if (b->host_in != NULL)
		tdm__pinned_free(p->gpu, b->host_in);
	if (b->host_out != NULL)
		tdm__pinned_free(p->gpu, b->host_out);
	if (b->dev_out != NULL && b->dev_out != b->dev_in)
		slot_device_free(s, b->dev_out);
	if (b->dev_in != NULL)
		slot_device_free(s, b->dev_in);
}

/*
 * On the caller's thread: takes s's first batch and enqueues it, with an event after its work
 * that s's task will await; then the task starts at the await. The thread that set the
 * pipeline up has the driver's paths warm in its caches: a worker's first copy and launch of a
 * run return later than the caller's would, and the first kernel starts that much later
 * (docs/design/pipeline.md). Without an event (none to be had), the task takes the batch itself.
 */
static void slot_prime(struct slot *s)
{
	struct tdm__gdev *d = &s->p->gpu->devs[s->p->cfg.device];
	struct tdm__event *ev;

	if (tdm__event_take(d, &ev) != 0)
		return;
	if (!batch_take(s)) {
		tdm__event_give(ev);
		return; /* the input is over: the task finds that out itself */
	}
	s->primed = true;
	if (s->b.status == 0)
		batch_enqueue(s);
	if (s->enqueued) {
		int rc = tdm__event_record(ev, s->b.stream);
		if (rc == 0) {
			s->ev = ev;
			ev = NULL;
		} else {
			/* A failed device (it runs nothing more) or a refused record: the batch
			 * fails, and its work is drained at the teardown like a retired slot's. */
			s->b.status = batch_error(rc);
			s->enqueued = false;
			/* Acquire: pairs with the release in tdm__device_fail. */
			if (!atomic_load_explicit(&d->failed, memory_order_acquire))
				s->retired = true;
		}
	}
	batch_order_done(s);
	if (ev != NULL)
		tdm__event_give(ev);
}

/*
 * A primed slot whose task could not start: its batch is finished here, on the caller's thread
 * (waited for, consumed or failed, counted, its ordered turn passed on), and the slot stops, so
 * that neither the batch nor the batches after it in ordered mode are stranded.
 */
static void slot_finish_here(struct slot *s)
{
	if (!s->primed)
		return; /* nothing taken: the other slots carry the input */
	s->primed = false;
	s->retired = true; /* takes no more batches, and nobody starts a task for it */
	if (s->ev != NULL) {
		int rc = event_finish(s->ev);
		s->ev = NULL;
		s->waited = true;
		batch_settle(s, rc);
	}
	(void)batch_done(s);
}

/* Starts the slots' tasks and waits for them: 0, -ECANCELED, or why a task could not start. */
static int pipe_run(struct pipe *p)
{
	int rc = tdm_group_init(&p->group, p->gpu->ex);
	if (rc != 0)
		return rc;
	int spawn_rc = 0;
	for (unsigned k = 0; k < p->n && spawn_rc == 0; k++) {
		slot_prime(&p->slots[k]);
		spawn_rc = slot_spawn(&p->slots[k]);
		if (spawn_rc != 0)
			slot_finish_here(&p->slots[k]);
	}
	/* The slots that did start run to the end; the input goes through fewer of them. */
	rc = tdm_group_wait(&p->group);
	if (spawn_rc != 0 && p->run_err == 0) /* the tasks are over: no lock needed */
		p->run_err = spawn_rc;
	return rc;
}

/* tdm_pipeline_run inside the layer's gate (below): the layer stays while it runs. */
static int pipeline_run(struct tdm__gpu *gpu, const tdm_pipeline_config *cfg,
                        tdm_pipeline_stats *stats)
{
	if (cfg == NULL)
		return -EINVAL;
	if (cfg->prepare == NULL)
		return tdm__refuse(-EINVAL, "tdm_pipeline_config.prepare=NULL: required");
	if (cfg->in_bytes == 0 || cfg->out_bytes == 0)
		return tdm__refuse(-EINVAL,
		                   "tdm_pipeline_config.%s=0: a slot's buffers must not be empty",
		                   cfg->in_bytes == 0 ? "in_bytes" : "out_bytes");
	if (cfg->in_flight > TDM_PIPELINE_MAX_IN_FLIGHT)
		return tdm__refuse(-EINVAL,
		                   "tdm_pipeline_config.in_flight=%u: above "
		                   "TDM_PIPELINE_MAX_IN_FLIGHT (%u)",
		                   cfg->in_flight, (unsigned)TDM_PIPELINE_MAX_IN_FLIGHT);
	unsigned n = cfg->in_flight != 0 ? cfg->in_flight : DEFAULT_IN_FLIGHT;
	if (cfg->streams > n)
		return tdm__refuse(-EINVAL, "tdm_pipeline_config.streams=%u: above in_flight (%u)",
		                   cfg->streams, n);
	if (gpu->ndev == 0)
		return -ENODEV;
	/* Its runs in a trace or a profiler: named once per process (-EALREADY afterwards). */
	(void)tdm_resumable_name(slot_task, "tandem pipeline batch");
	if (cfg->device < 0 || cfg->device >= gpu->ndev)
		return tdm__refuse(-EINVAL, "tdm_pipeline_config.device=%d: not from 0 to %d",
		                   cfg->device, gpu->ndev - 1);
	if (tdm_worker_index(gpu->ex) >= 0)
		return -EDEADLK; /* the slots' tasks may need this very worker */

	struct pipe *p = calloc(1, sizeof(*p) + n * sizeof(struct slot));
	if (p == NULL)
		return -ENOMEM;
	p->gpu = gpu;
	p->handle = gpu->self;
	p->cfg = *cfg;
	p->n = n;
	pthread_mutex_init(&p->prep_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);

	/* A hold on the executor from before the set-up to after the last submission: a concurrent
	 * destroy waits for its release instead of freeing the executor between two of the slots'
	 * spawns. Awake unless cfg.no_spin: a worker then stays awake for the batches, and is
	 * running when the slots' tasks start. Refused once the executor's destroy began: nothing
	 * has been set up yet. */
	if (tdm__hold(gpu->ex, !p->cfg.no_spin) != 0) {
		pthread_mutex_destroy(&p->lock);
		pthread_mutex_destroy(&p->prep_lock);
		free(p);
		return -ESHUTDOWN;
	}
	unsigned want = cfg->streams != 0     ? cfg->streams
	                : n < DEFAULT_STREAMS ? n
	                                      : DEFAULT_STREAMS;
	int rc = streams_lease(p, want);
	for (unsigned k = 0; k < n && rc == 0; k++)
		rc = slot_setup(p, k);
	/* A slot's buffers were allocated in its home stream's order, and its batches use them on
	 * every stream: the allocations are done before the first batch. */
	for (unsigned k = 0; k < p->nstreams && rc == 0; k++)
		stream_drain(p->streams[k].s);
	int wait_rc = 0;
	if (rc == 0)
		wait_rc = pipe_run(p);
	/* The last use of the executor here: a taken hold blocks termination, so a concurrent
	 * tdm_executor_destroy cannot free the executor before this release. */
	tdm__release(gpu->ex, !p->cfg.no_spin); /* the copy: a callback may change the caller's */

	/* Every task is over (the group's wait orders their writes before what follows). */
	uint64_t cancelled = 0;
	for (unsigned k = 0; k < n; k++) {
		cancelled += p->slots[k].busy;
		slot_teardown(&p->slots[k]);
	}
	for (unsigned k = 0; k < p->nstreams; k++) {
		tdm_stream_release(p->streams[k].s);
		/* A task that recorded its await unlocks the order lock only after the await call
		 * returned, by which time the batch may be over, and the group with it: wait for
		 * that unlock (the task touches nothing of the pipeline after it). */
		pthread_mutex_lock(&p->streams[k].order);
		pthread_mutex_unlock(&p->streams[k].order);
		pthread_mutex_destroy(&p->streams[k].order);
	}
	if (rc == 0) {
		p->st.cancelled = cancelled;
		if (p->t_first != 0 && p->t_last > p->t_first) {
			p->st.seconds = (double)(p->t_last - p->t_first) / 1e9;
			p->st.start_ns = p->t_first;
			p->st.end_ns = p->t_last;
		}
		if (stats != NULL)
			*stats = p->st;
		if (wait_rc == -ECANCELED || cancelled > 0)
			rc = -ECANCELED;
		else if (p->st.first_error != 0)
			rc = p->st.first_error;
		else if (wait_rc != 0)
			rc = wait_rc;
		else
			rc = p->run_err;
	}
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->prep_lock);
	free(p);
	return rc;
}

int tdm_pipeline_run(tdm_gpu *h, const tdm_pipeline_config *cfg, tdm_pipeline_stats *stats)
{
	if (stats != NULL)
		memset(stats, 0, sizeof(*stats));
	tdm__detail_begin("tdm_pipeline_run");
	/* Inside the gate for the whole run: a destroy that begins meanwhile refuses the run's
	 * leases and awaits (its batches fail with -ESHUTDOWN), and waits for it to return. */
	TDM__GPU_CALL(h, pipeline_run(gpu, cfg, stats));
}
