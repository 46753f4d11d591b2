/*
 * The `sim` backend: an in-process GPU for machines without one. It owns the simulated devices,
 * their streams (each an in-order queue drained by a thread of its own, "tdm-sim<N>"), their
 * events, and the record of injected faults. "Device" memory is host memory, so copies and
 * kernels are plain loads and stores done by the stream's thread.
 *
 * It mirrors CUDA where the two overlap, because the poller, pools and awaits above it are the
 * ones that run on CUDA: work on a stream runs in order; an event never recorded counts as done
 * and re-recording resets it; destroying a stream waits for its work; destroying an event with a
 * record still queued is allowed (it goes when the record has run); and once a device failed
 * every later operation on it is skipped and every enqueue fails at once with -EIO.
 *
 * Faults (tdm_sim_inject) arm a stream; the next work operation enqueued on it (a copy or a
 * kernel) takes the fault. Completion points (write_value, event records) never do: a skipped
 * completion word would hang its await instead of failing it. TDM_SIM_FAULT_OP: the operation
 * does nothing, and the next completion point that runs on the stream reports -EIO (word_status
 * for that value, or event_query) while the stream goes on. TDM_SIM_FAULT_STICKY: the operation
 * kills the device, as a trapping kernel does.
 *
 * Memory: each device simulates 80 GiB. Its memory (device_alloc, malloc_async, managed_alloc)
 * is host memory, recorded with its device and size in the memory table (sim_memory.h), beside
 * the pinned host ranges (host_alloc blocks and registered buffers; nothing is actually locked).
 * A free takes its block off the table, so a pointer never allocated, freed twice, or (for
 * device_free) named with another device is refused with -EINVAL, as cudaFree refuses it. A
 * free_async is an operation of the stream: the memory stays valid for the work enqueued before
 * it. Copies check their device sides when enqueued, and refuse a range that leaves its
 * allocation with -EINVAL, as cudaMemcpyAsync does; when a copy or a kernel runs, every device
 * range it reads or writes is checked again, and one that is not (or no longer) allocated fails
 * the device, as an illegal address does on a GPU: the host process never touches it.
 *
 * A busy kernel (launch_busy) fills the whole device, so it runs on its stream's thread under
 * the device's busy lock, held for the kernel's length: busy kernels on a device's streams run one
 * after another, as on a saturated GPU, while other work (spin kernels, copies) runs beside them.
 *
 * Lock rules: b->lock guards the lists of live streams and events; s->lock guards a stream's
 * queue, `stop` and `armed`; s->err_lock guards its erred values; b->mem's lock guards the
 * memory table, and a stream thread holds it for reading while a copy or a kernel runs; d->busy
 * is held by a stream thread while it runs a busy kernel. No thread holds two at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "base/clock.h"
#include "sim_memory.h"

#define SIM_MAX_DEVICES 1024
#define SIM_SPIN_LIMIT_NS 50000u /* shorter kernels busy-wait: a sleep would overshoot them */

/* A node of a circular list with a sentinel, first member of what it links. */
struct sim_link {
	struct sim_link *prev, *next;
};

struct sim_dev {
	/* Sticky. Seq_cst (dev_dead): it pairs with `writers`. */
	atomic_bool failed;
	/* Operations that write host or device memory (copies, scales, host functions: the
	 * staging copy out of tdm_memcpy_async is one) running on the device's streams. Once the
	 * device is dead, its streams and events report failure only when none runs: no task
	 * resumes with -EIO, whichever way it awaited, while its buffers are still being written.
	 */
	atomic_uint writers;
	/* Held for the length of a busy kernel: the device's SMs, all of them. */
	pthread_mutex_t busy;
};

struct tdm__backend {
	int ndev;
	struct sim_dev *devs;
	pthread_mutex_t lock;
	struct sim_link streams, events; /* lock */
	unsigned next_id;                /* lock: numbers stream threads */
	struct sim_mem mem;              /* device blocks and pinned ranges: sim_memory.h */
};

enum sim_op_kind {
	/* work: may take an armed fault */
	SIM_SPIN,
	SIM_BUSY,
	SIM_SCALE,
	SIM_TRAP,
	SIM_COPY,
	/* completion points */
	SIM_WRITE,
	SIM_MARK,
	/* host-side actions in stream order: like completion points they take no fault */
	SIM_FREE,
	SIM_HOST_FN,
	SIM_PREFETCH,
};

struct sim_event;

struct sim_op {
	struct sim_op *next;
	enum sim_op_kind kind;
	int fault; /* the tdm_sim_fault it took at enqueue, or 0 */
	union {
		uint32_t ns;
		struct {
			float *y;
			const float *x;
			float a;
			size_t n;
		} scale;
		struct {
			void *dst;
			const void *src;
			size_t bytes;
			bool dst_dev, src_dev; /* which sides are device memory, to be checked */
		} copy;
		struct {
			uint64_t *word;
			uint64_t value;
		} write;
		struct {
			struct sim_event *ev;
			uint64_t gen;
		} mark;
		void *block; /* SIM_FREE */
		struct {
			void (*fn)(void *);
			void *arg;
		} host_fn;
	} u;
};

struct sim_stream {
	struct sim_link link; /* b->lock */
	struct tdm__backend *b;
	struct sim_dev *dev;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;          /* the thread waits here for work or stop */
	struct sim_op *head, *tail;   /* lock */
	bool stop;                    /* lock */
	int armed;                    /* lock: fault for the next work operation */
	_Atomic uint64_t outstanding; /* operations enqueued and not finished */
	bool pending_err; /* stream thread only: a failed op awaits its completion point */

	pthread_mutex_t err_lock;
	uint64_t *erred; /* err_lock: word values whose write followed failed work */
	unsigned cap_erred;
	atomic_uint nerred; /* written under err_lock; read outside it as a fast path */
};

struct sim_event {
	struct sim_link link; /* b->lock, until event_destroy */
	struct sim_dev *dev;
	_Atomic uint64_t recorded; /* generation of the latest record; 0: never recorded */
	_Atomic uint64_t done;     /* (generation << 1) | failed, of the newest record that ran */
	atomic_uint refs;          /* the owner's, and one per record still queued */
};

/* ---- helpers ---- */

static void list_init(struct sim_link *head)
{
	head->prev = head->next = head;
}

static void list_add(struct sim_link *head, struct sim_link *l)
{
	l->next = head->next;
	l->prev = head;
	head->next->prev = l;
	head->next = l;
}

static void list_del(struct sim_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
}

static bool dev_ok(const struct tdm__backend *b, int dev)
{
	return dev >= 0 && dev < b->ndev;
}

/* Seq_cst, both: with the device's `writers` count they form a Dekker pair (execute, and
 * dead_status): an operation that saw the device alive is seen writing by a query that saw it
 * dead. */
static bool dev_dead(const struct sim_dev *d)
{
	return atomic_load_explicit(&d->failed, memory_order_seq_cst);
}

/* What a query on a dead device answers: -EIO, or -EAGAIN while an operation that began before
 * the death still writes memory. Seq_cst: pairs with the increment in execute (dev_dead's
 * note); a zero seen here also follows that operation's release decrement, and so its writes. */
static int dead_status(struct sim_dev *d)
{
	return atomic_load_explicit(&d->writers, memory_order_seq_cst) != 0 ? -EAGAIN : -EIO;
}

static void dev_fail(struct sim_dev *d)
{
	/* Seq_cst: dev_dead's note; the store falls in the total order between an execute that
	 * saw the device alive and a query that saw it dead. */
	atomic_store_explicit(&d->failed, true, memory_order_seq_cst);
}

static void run_spin(uint32_t ns)
{
	if (ns == 0)
		return;
	if (ns < SIM_SPIN_LIMIT_NS) {
		uint64_t end = tdm__now_ns() + ns;
		while (tdm__now_ns() < end) {
		}
		return;
	}
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
	                      .tv_nsec = (long)(ns % 1000000000u)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

static void event_unref(struct sim_event *e)
{
	/* Acq_rel: each holder's release orders its last use of e before the drop; the acquire
	 * of the final drop pairs with those, so the free comes after every use. */
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
		free(e);
}

/* ---- the stream thread ---- */

/* Remembers that the write of `value` covers failed work. */
/* False when there was no memory to remember it: the device is failed instead, and the
 * word must not be written (its await would read success). */
static bool add_erred(struct sim_stream *s, uint64_t value)
{
	pthread_mutex_lock(&s->err_lock);
	unsigned n = atomic_load_explicit(&s->nerred, memory_order_relaxed);
	if (n == s->cap_erred) {
		unsigned cap = s->cap_erred != 0 ? 2 * s->cap_erred : 8;
		uint64_t *p = realloc(s->erred, cap * sizeof(*p));
		if (p == NULL) {
			/* No memory to remember the error: fail the device rather than lose it. */
			pthread_mutex_unlock(&s->err_lock);
			dev_fail(s->dev);
			return false;
		}
		s->erred = p;
		s->cap_erred = cap;
	}
	s->erred[n] = value;
	atomic_store_explicit(&s->nerred, n + 1, memory_order_relaxed);
	pthread_mutex_unlock(&s->err_lock);
	return true;
}

static void mark_event(struct sim_event *e, uint64_t gen, bool failed)
{
	uint64_t want = gen << 1 | (failed ? 1u : 0u);
	uint64_t cur = atomic_load_explicit(&e->done, memory_order_relaxed);
	/* Release: pairs with the acquire load of `done` in sim_event_query; the work before the
	 * record happens before a query that reports it done. Records of one event on different
	 * streams may run out of order: only a newer generation replaces an older one. */
	while ((cur >> 1) < gen &&
	       !atomic_compare_exchange_weak_explicit(&e->done, &cur, want, memory_order_release,
	                                              memory_order_relaxed)) {
	}
}

/*
 * The device ranges of a copy or a kernel are checked when it runs, under the table's read lock,
 * held until the access is over: a block freed since the enqueue (device_free does not wait for
 * the work queued on it) is not there, and then the device fails, as a GPU's does on an illegal
 * address. A block whose free_async is queued is still there for the work queued before it.
 */
static void run_copy(struct sim_stream *s, const struct sim_op *o)
{
	struct sim_mem *m = &s->b->mem;
	size_t n = o->u.copy.bytes;
	tdm__sim_mem_read_begin(m);
	bool ok = (!o->u.copy.dst_dev || tdm__sim_mem_reaches(m, o->u.copy.dst, n, true)) &&
	          (!o->u.copy.src_dev || tdm__sim_mem_reaches(m, o->u.copy.src, n, true));
	if (ok)
		memcpy(o->u.copy.dst, o->u.copy.src, n);
	tdm__sim_mem_read_end(m);
	if (!ok)
		dev_fail(s->dev);
}

/* y[i] = a * x[i]; no check at launch (a kernel's arguments are only pointers): see run_copy. */
static void run_scale(struct sim_stream *s, const struct sim_op *o)
{
	struct sim_mem *m = &s->b->mem;
	size_t n = o->u.scale.n;
	tdm__sim_mem_read_begin(m);
	bool ok = n <= SIZE_MAX / sizeof(float) &&
	          tdm__sim_mem_reaches(m, o->u.scale.y, n * sizeof(float), true) &&
	          tdm__sim_mem_reaches(m, o->u.scale.x, n * sizeof(float), true);
	if (ok)
		for (size_t i = 0; i < n; i++)
			o->u.scale.y[i] = o->u.scale.a * o->u.scale.x[i];
	tdm__sim_mem_read_end(m);
	if (!ok)
		dev_fail(s->dev);
}

static void execute_op(struct sim_stream *s, struct sim_op *o)
{
	if (o->fault == TDM_SIM_FAULT_STICKY)
		dev_fail(s->dev);
	if (dev_dead(s->dev)) {
		/* A dead context runs nothing; a queued record still lets go of its event, and a
		 * queued free still frees (a dead CUDA context's memory goes with the context).
		 * Host functions are skipped, as cudaLaunchHostFunc's are after a context error. */
		if (o->kind == SIM_MARK)
			event_unref(o->u.mark.ev);
		else if (o->kind == SIM_FREE)
			(void)tdm__sim_mem_free(&s->b->mem, o->u.block, SIM_MEM_DEVICE, -1, true);
		return;
	}
	if (o->fault == TDM_SIM_FAULT_OP) {
		s->pending_err = true;
		return;
	}
	switch (o->kind) {
	case SIM_SPIN:
		run_spin(o->u.ns);
		break;
	case SIM_BUSY:
		pthread_mutex_lock(&s->dev->busy);
		run_spin(o->u.ns);
		pthread_mutex_unlock(&s->dev->busy);
		break;
	case SIM_SCALE:
		run_scale(s, o);
		break;
	case SIM_TRAP:
		dev_fail(s->dev);
		break;
	case SIM_COPY:
		run_copy(s, o);
		break;
	case SIM_WRITE:
		if (s->pending_err) {
			s->pending_err = false;
			if (!add_erred(s, o->u.write.value))
				break; /* the device is dead: its awaits fail through the stall
				          check */
		}
		/* Release: pairs with the acquire load of the word by its reader (poller.c,
		 * sweep_stream, or await.c, held_poll on a worker): all earlier work of this
		 * stream, and the erred value just added, happen before a read that sees this
		 * value. */
		__atomic_store_n(o->u.write.word, o->u.write.value, __ATOMIC_RELEASE);
		break;
	case SIM_MARK:
		mark_event(o->u.mark.ev, o->u.mark.gen, s->pending_err);
		s->pending_err = false;
		event_unref(o->u.mark.ev);
		break;
	case SIM_FREE:
		(void)tdm__sim_mem_free(&s->b->mem, o->u.block, SIM_MEM_DEVICE, -1, true);
		break;
	case SIM_HOST_FN:
		o->u.host_fn.fn(o->u.host_fn.arg);
		break;
	case SIM_PREFETCH:
		break; /* host memory is where it would be prefetched to */
	}
}

static void execute(struct sim_stream *s, struct sim_op *o)
{
	bool writes = o->kind == SIM_COPY || o->kind == SIM_SCALE || o->kind == SIM_HOST_FN;
	/* Seq_cst, before the look at the device: pairs with dead_status (dev_dead's note). */
	if (writes)
		atomic_fetch_add_explicit(&s->dev->writers, 1, memory_order_seq_cst);
	execute_op(s, o);
	if (writes)
		/* Release: pairs with the seq_cst load in dead_status. */
		atomic_fetch_sub_explicit(&s->dev->writers, 1, memory_order_release);
}

static void *stream_main(void *arg)
{
	struct sim_stream *s = arg;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (s->head == NULL && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		struct sim_op *batch = s->head;
		if (batch == NULL)
			break; /* stopped and drained */
		s->head = s->tail = NULL;
		pthread_mutex_unlock(&s->lock);
		while (batch != NULL) {
			struct sim_op *o = batch;
			batch = o->next;
			execute(s, o);
			free(o);
			/* Release: pairs with the acquire load in sim_stream_query; a stream
			 * reported idle has its work's effects visible to the caller. */
			atomic_fetch_sub_explicit(&s->outstanding, 1, memory_order_release);
		}
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* ---- enqueue ---- */

/* Queues a copy of `op`; -EIO at once on a dead device, as CUDA fails launches into a dead
 * context. */
static int submit(struct sim_stream *s, struct sim_op op)
{
	if (dev_dead(s->dev))
		return -EIO;
	struct sim_op *o = malloc(sizeof(*o));
	if (o == NULL)
		return -ENOMEM;
	*o = op;
	pthread_mutex_lock(&s->lock);
	if (o->kind < SIM_WRITE && s->armed != 0) {
		o->fault = s->armed;
		s->armed = 0;
	}
	/* Under the lock, so that one stream's records of an event get generations in queue
	 * order. Relaxed: the event's queries learn of the record through the caller's own
	 * hand-off of the event (same thread, or the poller's submit queue). */
	if (o->kind == SIM_MARK)
		o->u.mark.gen =
		    atomic_fetch_add_explicit(&o->u.mark.ev->recorded, 1, memory_order_relaxed) + 1;
	bool idle = s->head == NULL; /* the thread waits only on an empty queue */
	o->next = NULL;
	if (s->tail != NULL)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	/* Relaxed: s->lock orders it before the stream thread takes the op, so the op's release
	 * decrement in stream_main never precedes it; and the enqueuing thread reads its own
	 * increment, so its next stream_query cannot report the stream idle early. */
	atomic_fetch_add_explicit(&s->outstanding, 1, memory_order_relaxed);
	if (idle)
		pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- devices ---- */

static int sim_open(struct tdm__backend **out, const tdm_gpu_config *cfg)
{
	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	unsigned n = cfg != NULL && cfg->sim_devices != 0 ? cfg->sim_devices : 1;
	if (n > SIM_MAX_DEVICES)
		return -EINVAL;
	struct tdm__backend *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	b->devs = calloc(n, sizeof(*b->devs));
	if (b->devs == NULL || tdm__sim_mem_init(&b->mem, (int)n) != 0) {
		free(b->devs);
		free(b);
		return -ENOMEM;
	}
	b->ndev = (int)n;
	for (unsigned i = 0; i < n; i++)
		pthread_mutex_init(&b->devs[i].busy, NULL);
	pthread_mutex_init(&b->lock, NULL);
	list_init(&b->streams);
	list_init(&b->events);
	*out = b;
	return 0;
}

static void sim_stream_destroy(struct tdm__backend *b, void *stream);
static void sim_event_destroy(struct tdm__backend *b, void *ev);

static void sim_close(struct tdm__backend *b)
{
	if (b == NULL)
		return;
	/* Streams first: draining them lets go of the events their queued records hold. */
	while (b->streams.next != &b->streams)
		sim_stream_destroy(b, b->streams.next);
	while (b->events.next != &b->events)
		sim_event_destroy(b, b->events.next);
	/* The stream threads that take a device's busy lock are gone. */
	for (int i = 0; i < b->ndev; i++)
		pthread_mutex_destroy(&b->devs[i].busy);
	pthread_mutex_destroy(&b->lock);
	tdm__sim_mem_fini(&b->mem);
	free(b->devs);
	free(b);
}

static int sim_device_count(struct tdm__backend *b)
{
	return b != NULL ? b->ndev : -EINVAL;
}

static int sim_device_info(struct tdm__backend *b, int dev, struct tdm__device_info *out)
{
	if (b == NULL || out == NULL || !dev_ok(b, dev))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "tandem sim device %d", dev);
	out->sm_count = 132;
	out->prio_least = 0;
	out->prio_greatest = -5;
	out->can_write_value64 = true;
	out->async_engines = 3;
	return 0;
}

/* ---- memory: sim_memory.h ---- */

static int sim_host_alloc(struct tdm__backend *b, size_t bytes, void **out)
{
	if (b == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	return tdm__sim_mem_alloc(&b->mem, SIM_MEM_HOST, -1, bytes, out);
}

/* Only what host_alloc gave and is not freed yet: anything else (a registered buffer, foreign
 * memory, a block freed already) is -EINVAL, as cudaFreeHost refuses it, and stays untouched. */
static int sim_host_free(struct tdm__backend *b, void *p)
{
	if (b == NULL)
		return -EINVAL;
	return p != NULL ? tdm__sim_mem_free(&b->mem, p, SIM_MEM_HOST, -1, false) : 0;
}

static int sim_host_register(struct tdm__backend *b, void *p, size_t bytes)
{
	if (b == NULL || p == NULL || bytes == 0)
		return -EINVAL;
	return tdm__sim_mem_register(&b->mem, p, bytes);
}

/* p must be the address that was registered. */
static int sim_host_unregister(struct tdm__backend *b, void *p)
{
	if (b == NULL || p == NULL)
		return -EINVAL;
	return tdm__sim_mem_unregister(&b->mem, p);
}

static int sim_is_pinned(struct tdm__backend *b, const void *p)
{
	if (b == NULL || p == NULL)
		return 0;
	return tdm__sim_mem_is_pinned(&b->mem, p);
}

static int sim_device_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	if (b == NULL || out == NULL || bytes == 0 || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO; /* as cudaMalloc after a sticky error */
	return tdm__sim_mem_alloc(&b->mem, SIM_MEM_DEVICE, dev, bytes, out);
}

/* Memory of any of the three allocators, if it is dev's: cudaFree would take another device's
 * too, which tandem refuses on both backends. A dead device's memory is freed all the same. */
static int sim_device_free(struct tdm__backend *b, int dev, void *p)
{
	if (b == NULL || !dev_ok(b, dev))
		return -EINVAL;
	return p != NULL ? tdm__sim_mem_free(&b->mem, p, SIM_MEM_DEVICE, dev, false) : 0;
}

/* Managed memory is device memory here: it counts against the device it was asked for. */
static int sim_managed_alloc(struct tdm__backend *b, int dev, size_t bytes, void **out)
{
	return sim_device_alloc(b, dev, bytes, out);
}

/* Like cudaFree, it takes any device memory, of any device. */
static int sim_managed_free(struct tdm__backend *b, void *p)
{
	if (b == NULL)
		return -EINVAL;
	return p != NULL ? tdm__sim_mem_free(&b->mem, p, SIM_MEM_DEVICE, -1, false) : 0;
}

static int sim_advise(struct tdm__backend *b, const void *p, size_t bytes, tdm_mem_advice advice,
                      int dev)
{
	(void)bytes;
	if (b == NULL || p == NULL || advice < TDM_ADVISE_READ_MOSTLY ||
	    advice > TDM_ADVISE_ACCESSED_BY || dev >= b->ndev)
		return -EINVAL;
	return 0; /* a hint about where pages should live; all of them live in host memory */
}

/* Like cudaMemGetInfo, it fails on a dead device. */
static int sim_mem_info(struct tdm__backend *b, int dev, size_t *free_bytes, size_t *total_bytes)
{
	if (b == NULL || free_bytes == NULL || total_bytes == NULL || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO;
	*free_bytes = (size_t)tdm__sim_mem_free_bytes(&b->mem, dev);
	*total_bytes = (size_t)TDM__SIM_DEV_TOTAL;
	return 0;
}

/* ---- streams ---- */

static int sim_stream_create(struct tdm__backend *b, int dev, int priority, void **out)
{
	/* CUDA clamps a priority to the device's range; every sim stream has a thread of its
	 * own, so there is nothing for a priority to order. */
	(void)priority;
	if (b == NULL || out == NULL || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO;
	struct sim_stream *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->b = b;
	s->dev = &b->devs[dev];
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	pthread_mutex_init(&s->err_lock, NULL);
	if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
		pthread_mutex_destroy(&s->err_lock);
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return -EAGAIN;
	}
	pthread_mutex_lock(&b->lock);
	unsigned id = b->next_id++;
	list_add(&b->streams, &s->link);
	pthread_mutex_unlock(&b->lock);
	char name[16]; /* the kernel's limit, with the NUL */
	snprintf(name, sizeof(name), "tdm-sim%u", id % 100000000u);
	pthread_setname_np(s->thread, name);
	*out = s;
	return 0;
}

static void sim_stream_destroy(struct tdm__backend *b, void *stream)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return;
	pthread_mutex_lock(&b->lock);
	list_del(&s->link);
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL); /* the thread exits only once its queue is empty */
	pthread_mutex_destroy(&s->err_lock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s->erred);
	free(s);
}

static int sim_stream_query(struct tdm__backend *b, void *stream)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	if (dev_dead(s->dev))
		return dead_status(s->dev);
	/* Acquire: pairs with the release decrement in stream_main after each operation. */
	return atomic_load_explicit(&s->outstanding, memory_order_acquire) == 0 ? 0 : -EAGAIN;
}

static void *sim_stream_native(struct tdm__backend *b, void *stream)
{
	(void)b;
	(void)stream;
	return NULL;
}

/* ---- events ---- */

static int sim_event_create(struct tdm__backend *b, int dev, void **out)
{
	if (b == NULL || out == NULL || !dev_ok(b, dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dev]))
		return -EIO;
	struct sim_event *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	e->dev = &b->devs[dev];
	atomic_init(&e->refs, 1);
	pthread_mutex_lock(&b->lock);
	list_add(&b->events, &e->link);
	pthread_mutex_unlock(&b->lock);
	*out = e;
	return 0;
}

static void sim_event_destroy(struct tdm__backend *b, void *ev)
{
	struct sim_event *e = ev;
	if (b == NULL || e == NULL)
		return;
	pthread_mutex_lock(&b->lock);
	list_del(&e->link);
	pthread_mutex_unlock(&b->lock);
	event_unref(e);
}

static int sim_event_record(struct tdm__backend *b, void *ev, void *stream)
{
	struct sim_event *e = ev;
	struct sim_stream *s = stream;
	if (b == NULL || e == NULL || s == NULL || e->dev != s->dev)
		return -EINVAL;
	/* Relaxed: the caller holds the owner's reference, so the count cannot reach 0 here. */
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
	int rc = submit(s, (struct sim_op){.kind = SIM_MARK, .u.mark.ev = e});
	if (rc != 0)
		event_unref(e);
	return rc;
}

static int sim_event_query(struct tdm__backend *b, void *ev)
{
	struct sim_event *e = ev;
	if (b == NULL || e == NULL)
		return -EINVAL;
	if (dev_dead(e->dev))
		return dead_status(e->dev);
	/* Relaxed: see submit(); a record made by this thread, or handed to it, is seen. */
	uint64_t rec = atomic_load_explicit(&e->recorded, memory_order_relaxed);
	if (rec == 0)
		return 0;
	/* Acquire: pairs with the release CAS in mark_event. */
	uint64_t done = atomic_load_explicit(&e->done, memory_order_acquire);
	if ((done >> 1) < rec)
		return -EAGAIN;
	return (done & 1) != 0 ? -EIO : 0;
}

/* The error of the last record goes; its generation stays, so that a record still pending is
 * still waited for. Relaxed: the new owner got the event through the pool's lock. */
static void sim_event_reset(struct tdm__backend *b, void *ev)
{
	(void)b;
	struct sim_event *e = ev;
	atomic_fetch_and_explicit(&e->done, ~(uint64_t)1, memory_order_relaxed);
}

/* ---- work ---- */

static int sim_write_value(struct tdm__backend *b, void *stream, uint64_t *word, uint64_t value)
{
	/* cuStreamWriteValue64 wants an 8-byte aligned address. */
	if (b == NULL || stream == NULL || word == NULL || ((uintptr_t)word & 7u) != 0)
		return -EINVAL;
	return submit(stream, (struct sim_op){.kind = SIM_WRITE, .u.write = {word, value}});
}

/* Reports each erred value once: whoever completes the await (the poller, or the worker that
 * watched it, await.c held_poll) asks once, under err_lock, which keeps the set small. */
static int sim_word_status(struct tdm__backend *b, void *stream, uint64_t value)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	/* Relaxed: the caller saw the word at `value` or later through its acquire load, which
	 * pairs with the release store in execute(); an erred value is added before that store,
	 * so it is visible here already. */
	if (atomic_load_explicit(&s->nerred, memory_order_relaxed) == 0)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&s->err_lock);
	unsigned n = atomic_load_explicit(&s->nerred, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		if (s->erred[i] == value) {
			s->erred[i] = s->erred[n - 1];
			atomic_store_explicit(&s->nerred, n - 1, memory_order_relaxed);
			rc = -EIO;
			break;
		}
	}
	pthread_mutex_unlock(&s->err_lock);
	return rc;
}

/*
 * A copy whose device sides lie within live allocations (device blocks, or pinned host memory,
 * which a device reaches too): -EINVAL otherwise, as cudaMemcpyAsync refuses a range past the
 * end of an allocation. A dead device says -EIO first, as a CUDA call returns the sticky error.
 */
static int submit_copy(struct tdm__backend *b, struct sim_stream *s, void *dst, bool dst_dev,
                       const void *src, bool src_dev, size_t bytes)
{
	if (dev_dead(s->dev))
		return -EIO;
	tdm__sim_mem_read_begin(&b->mem);
	bool ok = (!dst_dev || tdm__sim_mem_reaches(&b->mem, dst, bytes, false)) &&
	          (!src_dev || tdm__sim_mem_reaches(&b->mem, src, bytes, false));
	tdm__sim_mem_read_end(&b->mem);
	if (!ok)
		return -EINVAL;
	return submit(
	    s, (struct sim_op){.kind = SIM_COPY, .u.copy = {dst, src, bytes, dst_dev, src_dev}});
}

static int sim_memcpy_async(struct tdm__backend *b, void *stream, void *dst, const void *src,
                            size_t bytes, tdm_copy_kind kind)
{
	if (b == NULL || stream == NULL || dst == NULL || src == NULL || kind < TDM_COPY_H2D ||
	    kind > TDM_COPY_D2D)
		return -EINVAL;
	return submit_copy(b, stream, dst, kind != TDM_COPY_D2H, src, kind != TDM_COPY_H2D, bytes);
}

static int sim_launch_spin(struct tdm__backend *b, void *stream, uint32_t ns)
{
	if (b == NULL || stream == NULL)
		return -EINVAL;
	return submit(stream, (struct sim_op){.kind = SIM_SPIN, .u.ns = ns});
}

static int sim_launch_busy(struct tdm__backend *b, void *stream, uint32_t ns)
{
	if (b == NULL || stream == NULL)
		return -EINVAL;
	return submit(stream, (struct sim_op){.kind = SIM_BUSY, .u.ns = ns});
}

static int sim_launch_scale(struct tdm__backend *b, void *stream, float *y, const float *x, float a,
                            size_t n)
{
	if (b == NULL || stream == NULL || y == NULL || x == NULL)
		return -EINVAL;
	return submit(stream, (struct sim_op){.kind = SIM_SCALE, .u.scale = {y, x, a, n}});
}

static int sim_launch_fault(struct tdm__backend *b, void *stream)
{
	if (b == NULL || stream == NULL)
		return -EINVAL;
	return submit(stream, (struct sim_op){.kind = SIM_TRAP});
}

/* Allocates at once: the memory is valid for the stream's later work, as cudaMallocAsync
 * promises, and already before. */
static int sim_malloc_async(struct tdm__backend *b, void *stream, size_t bytes, void **out)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (dev_dead(s->dev))
		return -EIO;
	return tdm__sim_mem_alloc(&b->mem, SIM_MEM_DEVICE, (int)(s->dev - b->devs), bytes, out);
}

/*
 * The free runs when the stream reaches it; from the call on, the block is freeing, so a second
 * free of it is -EINVAL, as is a pointer that is not device memory (cudaFreeAsync's
 * cudaErrorInvalidValue). A refused free (-EIO, -ENOMEM) leaves p with the caller, live.
 */
static int sim_free_async(struct tdm__backend *b, void *stream, void *p)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	if (p == NULL)
		return 0;
	if (dev_dead(s->dev))
		return -EIO;
	int rc = tdm__sim_mem_set_freeing(&b->mem, p, true);
	if (rc != 0)
		return rc;
	rc = submit(s, (struct sim_op){.kind = SIM_FREE, .u.block = p});
	if (rc != 0)
		(void)tdm__sim_mem_set_freeing(&b->mem, p, false);
	return rc;
}

static int sim_prefetch(struct tdm__backend *b, void *stream, const void *p, size_t bytes, int dev)
{
	if (b == NULL || stream == NULL || p == NULL || dev >= b->ndev)
		return -EINVAL;
	if (bytes == 0)
		return 0;
	return submit(stream, (struct sim_op){.kind = SIM_PREFETCH});
}

/* fn runs on the stream's thread, after the work before it and before the work after it. */
static int sim_host_fn(struct tdm__backend *b, void *stream, void (*fn)(void *), void *arg)
{
	if (b == NULL || stream == NULL || fn == NULL)
		return -EINVAL;
	return submit(stream, (struct sim_op){.kind = SIM_HOST_FN, .u.host_fn = {fn, arg}});
}

/* A copy like any other (it may take an armed fault), refused if either side's device is dead. */
static int sim_memcpy_peer_async(struct tdm__backend *b, void *stream, void *dst, int dst_dev,
                                 const void *src, int src_dev, size_t bytes)
{
	if (b == NULL || stream == NULL || dst == NULL || src == NULL || !dev_ok(b, dst_dev) ||
	    !dev_ok(b, src_dev))
		return -EINVAL;
	if (dev_dead(&b->devs[dst_dev]) || dev_dead(&b->devs[src_dev]))
		return -EIO;
	return submit_copy(b, stream, dst, true, src, true, bytes);
}

static int sim_inject(struct tdm__backend *b, void *stream, tdm_sim_fault fault)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || (fault != TDM_SIM_FAULT_OP && fault != TDM_SIM_FAULT_STICKY))
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if ((int)fault > s->armed) /* a sticky fault outranks an armed one-shot */
		s->armed = (int)fault;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

const struct tdm__backend_ops tdm__backend_sim = {
    .name = "sim",
    .open = sim_open,
    .close = sim_close,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_query = sim_stream_query,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_reset = sim_event_reset,
    .write_value = sim_write_value,
    .word_status = sim_word_status,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .device_alloc = sim_device_alloc,
    .device_free = sim_device_free,
    .memcpy_async = sim_memcpy_async,
    .launch_spin = sim_launch_spin,
    .launch_scale = sim_launch_scale,
    .launch_fault = sim_launch_fault,
    .stream_native = sim_stream_native,
    .sim_inject = sim_inject,
    .malloc_async = sim_malloc_async,
    .free_async = sim_free_async,
    .host_register = sim_host_register,
    .host_unregister = sim_host_unregister,
    .is_pinned = sim_is_pinned,
    .managed_alloc = sim_managed_alloc,
    .managed_free = sim_managed_free,
    .prefetch = sim_prefetch,
    .advise = sim_advise,
    .mem_info = sim_mem_info,
    .host_fn = sim_host_fn,
    .memcpy_peer_async = sim_memcpy_peer_async,
    .launch_busy = sim_launch_busy,
};
