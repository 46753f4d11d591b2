// SPDX-License-Identifier: MIT
/*
 * The device scheduler (tandem_dsched.h), specified on sim everywhere and on cuda where a device
 * exists (left out of builds without CUDA): every item runs exactly once and its await resumes
 * after the handler's writes; one warp runs items in ticket order; a full queue says -EAGAIN; an
 * unknown handler, an oversized argument block and bad tickets are refused; a trapping handler
 * fails the device and every await on it; a destroy with items outstanding drains or cancels
 * them and says which; a MIG-sized device gets a MIG-sized share; streams stay usable beside it.
 * On sim the handlers are host functions (a TDM_DSCHED_HOST_TABLE here); on cuda, and on sim
 * once more, the table of tests/dsched_handlers.cu. Tasks record what they saw; the test thread
 * asserts.
 */
#include "gpu_env.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "tandem_dsched.h"
#include "dsched.h" /* the scheduler's stop words: when its destroy told the kernel to stop */
#include "dsched_steps.h"

/* A scheduler's kernel never ends: a module loaded lazily while one runs would wait for it. */
__attribute__((constructor)) static void eager_modules(void)
{
	setenv("CUDA_MODULE_LOADING", "EAGER", 1);
}

/* Items of the exactly-once tests; TDM_TEST_DSCHED_ITEMS overrides it (scripts/gpu-dsched.sh
 * runs fewer under compute-sanitizer, which slows every load of the kernel). */
static uint32_t many(void)
{
	const char *v = getenv("TDM_TEST_DSCHED_ITEMS");
	long n = v != NULL ? strtol(v, NULL, 10) : 0;
	return n >= 64 && n <= 1000000 ? (uint32_t)n : (uint32_t)tdm_test_size(20000, 2000);
}

/* ---- the host handlers: tests/dsched_steps.h says what each does ---- */

static void h_record(void *args, unsigned size)
{
	const struct record_args *a = args;
	(void)size;
	a->counts[a->index] += 1;
}

static void h_append(void *args, unsigned size)
{
	const struct append_args *a = args;
	(void)size;
	a->log[*a->n] = a->value;
	*a->n += 1;
}

static void h_spin(void *args, unsigned size)
{
	const struct spin_args *a = args;
	(void)size;
	uint64_t end = tdm_now_ns() + a->ns;
	while (tdm_now_ns() < end) {
	}
}

static void h_nothing(void *args, unsigned size)
{
	(void)args;
	(void)size;
}

static void h_big(void *args, unsigned size)
{
	const struct big_args *a = args;
	uint64_t sum = size;
	for (int i = 0; i < BIG_VALS; i++)
		sum += a->vals[i];
	*BIG_OUT(a) = sum;
}

static void h_hold(void *args, unsigned size)
{
	const struct hold_args *a = args;
	(void)size;
	__atomic_store_n(a->entered, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(a->release, __ATOMIC_ACQUIRE) == 0)
		sched_yield();
}

TDM_DSCHED_HOST_TABLE(sim_steps, h_record, h_append, h_spin, h_nothing, h_big, h_hold,
                      h_nothing /* STEP_TRAP: sim traps by tdm_dsched_sim_inject */);
_Static_assert(STEP_COUNT == 7, "a host handler per step");

/* ---- helpers ----
 * On cuda, calls that wait for every kernel of the device (cudaFree, cudaFreeHost, maybe the
 * pinned allocation itself) would wait for the scheduler's: memory is taken before a scheduler
 * starts and given back after it stopped. */

static tdm_dsched *make_scoped(struct env *e, const tdm_dsched_handlers *h, unsigned blocks,
                               unsigned warps, unsigned capacity, unsigned scope)
{
	tdm_dsched_config c;
	tdm_dsched_config_init(&c);
	c.handlers = h;
	c.blocks = blocks;
	c.warps = warps;
	c.capacity = capacity;
	c.scope = scope;
	tdm_dsched *ds = NULL;
	int rc = tdm_dsched_create(e->gpu, 0, &c, &ds);
	cr_assert_eq(rc, 0, "tdm_dsched_create: %s", tdm_strerror(rc));
	return ds;
}

static tdm_dsched *make(struct env *e, const tdm_dsched_handlers *h, unsigned blocks,
                        unsigned warps, unsigned capacity)
{
	return make_scoped(e, h, blocks, warps, capacity, TDM_DSCHED_SCOPE_SYSTEM);
}

static void *pinned(struct env *e, size_t bytes)
{
	void *p = NULL;
	cr_assert_eq(tdm_host_alloc(e->gpu, bytes, &p), 0);
	memset(p, 0, bytes);
	return p;
}

static uint64_t submit_one(tdm_dsched *ds, unsigned handler, const void *args, size_t size)
{
	uint64_t t = 0;
	int rc;
	while ((rc = tdm_dsched_submit(ds, handler, args, size, &t)) == -EAGAIN)
		sched_yield();
	cr_assert_eq(rc, 0, "tdm_dsched_submit: %s", tdm_strerror(rc));
	return t;
}

/* Waits from the test thread until item t is over: its result. */
static int wait_item(tdm_dsched *ds, uint64_t t)
{
	int rc;
	while ((rc = tdm_dsched_query(ds, t)) == -EAGAIN)
		sched_yield();
	return rc;
}

static void destroy(tdm_dsched *ds, int how, tdm_dsched_stats *st)
{
	int rc = tdm_dsched_destroy(ds, how, st);
	cr_assert_eq(rc, 0, "tdm_dsched_destroy: %s", tdm_strerror(rc));
	if (st != NULL)
		cr_assert_eq(st->completed + st->cancelled + st->failed, st->submitted,
		             "every item said: %llu + %llu + %llu of %llu",
		             (unsigned long long)st->completed, (unsigned long long)st->cancelled,
		             (unsigned long long)st->failed, (unsigned long long)st->submitted);
}

/* ---- every item exactly once, awaited by many tasks ---- */

struct submitter {
	tdm_dsched *ds;
	uint32_t *counts;
	uint32_t first, n, i, batch, left;
	uint64_t ticket;
	int bad; /* the first unexpected result */
	struct seen sn;
};

/* Items first..first+n-1, each awaited after its submit (batch 0), or `batch` at a time in one
 * batched submit, each of them awaited in turn. Every await resumes after its handler wrote. */
static int submit_task(tdm_task *t, void *arg)
{
	struct submitter *c = arg;
	TDM_BEGIN(t);
	for (c->i = 0; c->i < c->n;) {
		int rc;
		if (c->batch == 0) {
			struct record_args a = {c->counts, c->first + c->i};
			rc = tdm_dsched_submit(c->ds, STEP_RECORD, &a, sizeof(a), &c->ticket);
			c->left = 1;
		} else {
			struct record_args a[64];
			tdm_dsched_item it[64];
			uint32_t k = c->n - c->i < c->batch ? c->n - c->i : c->batch;
			for (uint32_t j = 0; j < k; j++) {
				a[j] = (struct record_args){c->counts, c->first + c->i + j};
				it[j] = (tdm_dsched_item){STEP_RECORD, sizeof(a[j]), &a[j]};
			}
			rc = tdm_dsched_submit_batch(c->ds, it, k, &c->ticket);
			c->left = k;
		}
		if (rc == -EAGAIN)
			continue; /* full: items of other tasks complete meanwhile */
		SEE(&c->sn, rc);
		if (rc != 0)
			return 0;
		for (; c->left > 0; c->left--, c->i++, c->ticket++) {
			TDM_AWAIT(t, tdm_await_dsched(t, c->ds, c->ticket));
			if (tdm_task_result(t) != 0 && c->bad == 0)
				c->bad = tdm_task_result(t);
			if (c->counts[c->first + c->i] != 1 && c->bad == 0)
				c->bad = -EPROTO; /* the handler's write is seen after the await */
		}
	}
	TDM_END(t);
}

static void every_item_once(struct env *e, const tdm_dsched_handlers *h, uint32_t batch,
                            unsigned scope)
{
	const uint32_t n = many(), tasks = 16;
	uint32_t *counts = pinned(e, n * sizeof(uint32_t));
	tdm_dsched *ds = make_scoped(e, h, 4, 8, 256, scope);
	tdm_dsched_stats s;
	cr_assert_eq(tdm_dsched_stats_get(ds, &s), 0);
	cr_assert_eq(s.scope, scope, "the scope asked for");
	struct submitter st[16];
	tdm_group g;
	tdm_group_init(&g, e->ex);
	for (uint32_t k = 0; k < tasks; k++) {
		st[k] = (struct submitter){.ds = ds,
		                           .counts = counts,
		                           .first = k * (n / tasks),
		                           .n = n / tasks,
		                           .batch = batch};
		cr_assert_eq(tdm_spawn(e->ex, submit_task, &st[k], &g), 0);
	}
	cr_assert_eq(tdm_group_wait(&g), 0);
	for (uint32_t k = 0; k < tasks; k++) {
		ASSERT_SEEN(&st[k].sn);
		cr_assert_eq(st[k].bad, 0, "task %u saw %s", k, tdm_strerror(st[k].bad));
	}
	destroy(ds, TDM_DSCHED_DRAIN, &s);
	for (uint32_t i = 0; i < n / tasks * tasks; i++)
		cr_assert_eq(counts[i], 1, "item %u ran %u times", i, counts[i]);
	cr_assert_eq(s.submitted, n / tasks * tasks);
	cr_assert_eq(s.completed, s.submitted);
	cr_assert_gt(s.awaits, 0, "some awaits suspended their task");
	cr_assert_eq(tdm_host_free(e->gpu, counts), 0);
}

/* ---- one warp: ticket order ---- */

static void one_warp_runs_in_ticket_order(struct env *e, const tdm_dsched_handlers *h)
{
	const uint32_t n = many() / 6 < 3000 ? many() / 6 : 3000;
	uint32_t *log = pinned(e, (n + 1) * sizeof(uint32_t)), *count = log + n;
	/* A small queue, so that every slot is written again many times over. */
	tdm_dsched *ds = make(e, h, 1, 1, 16);
	uint64_t prev = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct append_args a = {count, log, i};
		uint64_t t = submit_one(ds, STEP_APPEND, &a, sizeof(a));
		cr_assert_eq(t, prev + 1, "tickets grow by one: %llu after %llu",
		             (unsigned long long)t, (unsigned long long)prev);
		prev = t;
	}
	cr_assert_eq(wait_item(ds, prev), 0);
	tdm_dsched_stats s;
	destroy(ds, TDM_DSCHED_DRAIN, &s);
	cr_assert_eq(*count, n);
	for (uint32_t i = 0; i < n; i++)
		cr_assert_eq(log[i], i, "item %u ran %u-th", log[i], i);
	cr_assert_eq(s.completed, n);
	cr_assert_eq(tdm_host_free(e->gpu, log), 0);
}

/* ---- a full argument block, batches ---- */

struct big_state {
	tdm_dsched *ds;
	uint64_t *out;
	uint64_t first;
	uint32_t i;
	int rc[16];
	struct seen sn;
};

static int big_task(tdm_task *t, void *arg)
{
	struct big_state *c = arg;
	TDM_BEGIN(t);
	{
		struct big_args a[16];
		tdm_dsched_item it[16];
		for (uint32_t k = 0; k < 16; k++) {
			a[k].out_lo = (uint32_t)(uintptr_t)&c->out[k];
			a[k].out_hi = (uint32_t)((uint64_t)(uintptr_t)&c->out[k] >> 32);
			for (int v = 0; v < BIG_VALS; v++)
				a[k].vals[v] = k * 1000u + (uint32_t)v * 7u + 0x01020304u;
			it[k] = (tdm_dsched_item){STEP_BIG, sizeof(a[k]), &a[k]};
		}
		SEE(&c->sn, tdm_dsched_submit_batch(c->ds, it, 16, &c->first));
	}
	if (c->sn.rc != 0)
		return 0;
	for (c->i = 0; c->i < 16; c->i++) {
		TDM_AWAIT(t, tdm_await_dsched(t, c->ds, c->first + c->i));
		c->rc[c->i] = tdm_task_result(t);
	}
	TDM_END(t);
}

static void batch_of_full_items(struct env *e, const tdm_dsched_handlers *h)
{
	uint64_t *out = pinned(e, 16 * sizeof(uint64_t));
	tdm_dsched *ds = make(e, h, 2, 4, 64);
	uint64_t t0 = submit_one(ds, STEP_NOTHING, NULL, 0);
	struct big_state c = {.ds = ds, .out = out};
	cr_assert_eq(run_one(e, big_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.first, t0 + 1, "a batch's tickets follow the last one");
	for (uint32_t k = 0; k < 16; k++) {
		uint64_t want = TDM_DSCHED_ARGS_MAX;
		for (int v = 0; v < BIG_VALS; v++)
			want += k * 1000u + (uint32_t)v * 7u + 0x01020304u;
		cr_assert_eq(c.rc[k], 0);
		cr_assert_eq(c.out[k], want, "item %u: every byte of its arguments arrived", k);
	}
	destroy(ds, TDM_DSCHED_DRAIN, NULL);
	cr_assert_eq(tdm_host_free(e->gpu, c.out), 0);
}

/* ---- a full queue ---- */

static void full_queue_says_eagain(struct env *e, const tdm_dsched_handlers *h)
{
	uint32_t *flags = pinned(e, 2 * sizeof(uint32_t));
	tdm_dsched *ds = make(e, h, 1, 1, 16);
	struct hold_args hold = {&flags[0], &flags[1]};
	uint64_t first = submit_one(ds, STEP_HOLD, &hold, sizeof(hold));
	while (__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) == 0)
		sched_yield(); /* the one warp runs it, and its slot stays taken */
	uint64_t t = 0;
	for (int i = 1; i < 16; i++)
		cr_assert_eq(tdm_dsched_submit(ds, STEP_NOTHING, NULL, 0, &t), 0, "item %d fits",
		             i);
	cr_assert_eq(t, first + 15);
	cr_assert_eq(tdm_dsched_submit(ds, STEP_NOTHING, NULL, 0, &t), -EAGAIN,
	             "16 in a queue of 16");
	tdm_dsched_item one = {STEP_NOTHING, 0, NULL};
	uint64_t bt = 0;
	cr_assert_eq(tdm_dsched_submit_batch(ds, &one, 1, &bt), -EAGAIN);
	cr_assert_eq(tdm_dsched_query(ds, first), -EAGAIN);
	tdm_dsched_stats s;
	cr_assert_eq(tdm_dsched_stats_get(ds, &s), 0);
	cr_assert_eq(s.full, 2);
	cr_assert_eq(s.submitted, 16);
	__atomic_store_n(&flags[1], 1, __ATOMIC_RELEASE);
	cr_assert_eq(wait_item(ds, first + 15), 0);
	cr_assert_eq(tdm_dsched_submit(ds, STEP_NOTHING, NULL, 0, &t), 0, "room again");
	cr_assert_eq(t, first + 16, "nothing refused took a ticket");
	destroy(ds, TDM_DSCHED_DRAIN, &s);
	cr_assert_eq(s.completed, 17);
	cr_assert_eq(tdm_host_free(e->gpu, flags), 0);
}

/* ---- refusals ---- */

struct bad_await {
	tdm_dsched *ds;
	uint64_t ticket;
	int rc, result;
};

static int bad_await_task(tdm_task *t, void *arg)
{
	struct bad_await *c = arg;
	TDM_BEGIN(t);
	c->rc = tdm_await_dsched(t, c->ds, c->ticket);
	c->result = tdm_task_result(t);
	TDM_END(t);
}

static int await_at_once(struct env *e, tdm_dsched *ds, uint64_t ticket)
{
	struct bad_await c = {ds, ticket, 1, 1};
	tdm_test_run_one(e->ex, bad_await_task, &c);
	cr_assert_eq(c.rc, c.result, "an await that returns at once sets the task's result");
	return c.rc;
}

static void refusals(struct env *e, const tdm_dsched_handlers *h)
{
	tdm_dsched *ds = make(e, h, 1, 2, 32);
	uint8_t args[TDM_DSCHED_ARGS_MAX + 1] = {0};
	uint64_t t = 0;
	cr_assert_eq(tdm_dsched_submit(ds, STEP_COUNT, NULL, 0, &t), -EINVAL, "unknown handler");
	cr_assert_eq(tdm_dsched_submit(ds, 65535, NULL, 0, &t), -EINVAL);
	cr_assert_eq(tdm_dsched_submit(ds, STEP_NOTHING, args, sizeof(args), &t), -EMSGSIZE);
	cr_assert_eq(tdm_dsched_submit(ds, STEP_NOTHING, NULL, 4, &t), -EINVAL);
	cr_assert_eq(tdm_dsched_submit(NULL, STEP_NOTHING, NULL, 0, &t), -EINVAL);
	tdm_dsched_item items[3] = {
	    {STEP_NOTHING, 0, NULL}, {STEP_COUNT, 0, NULL}, {STEP_NOTHING, 0, NULL}};
	cr_assert_eq(tdm_dsched_submit_batch(ds, items, 3, &t), -EINVAL, "one bad item: none");
	items[1] = (tdm_dsched_item){STEP_NOTHING, TDM_DSCHED_ARGS_MAX + 1, args};
	cr_assert_eq(tdm_dsched_submit_batch(ds, items, 3, &t), -EMSGSIZE);
	cr_assert_eq(tdm_dsched_submit_batch(ds, items, 0, &t), -EINVAL);
	cr_assert_eq(tdm_dsched_submit_batch(ds, NULL, 1, &t), -EINVAL);
	cr_assert_eq(tdm_dsched_submit_batch(ds, items, 33, &t), -EINVAL,
	             "more than the queue holds");
	/* Fits exactly: the largest argument block. */
	t = submit_one(ds, STEP_NOTHING, args, TDM_DSCHED_ARGS_MAX);
	cr_assert_eq(t, 1, "nothing refused took a ticket");
	cr_assert_eq(wait_item(ds, 1), 0);
	cr_assert_eq(tdm_dsched_query(ds, 0), -EINVAL);
	cr_assert_eq(tdm_dsched_query(ds, 2), -EINVAL, "not handed out yet");
	cr_assert_eq(tdm_dsched_query(NULL, 1), -EINVAL);
	cr_assert_eq(await_at_once(e, ds, 0), -EINVAL);
	cr_assert_eq(await_at_once(e, ds, 2), -EINVAL);
	cr_assert_eq(await_at_once(e, NULL, 1), -EINVAL);
	cr_assert_eq(await_at_once(e, ds, 1), 0, "over already: at once, with its result");
	cr_assert_eq(tdm_await_dsched(NULL, ds, 1), -EINVAL);
	cr_assert_eq(tdm_dsched_stats_get(ds, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_destroy(ds, 2, NULL), -EINVAL, "an unknown how: nothing done");
	cr_assert_eq(tdm_dsched_destroy(NULL, TDM_DSCHED_DRAIN, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_query(ds, 1), 0, "still running");
	destroy(ds, TDM_DSCHED_DRAIN, NULL);
}

static int fake_launch(const tdm_dsched_launch *l)
{
	(void)l;
	return 0;
}

static void bad_configs(struct env *e, const tdm_dsched_handlers *h)
{
	tdm_dsched_config c;
	tdm_dsched *ds = NULL;
	tdm_dsched_config_init(&c);
	c.handlers = h;
	cr_assert_eq(tdm_dsched_create(NULL, 0, &c, &ds), -EINVAL);
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, NULL, &ds), -EINVAL);
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, NULL), -EINVAL);
	cr_assert_eq(tdm_dsched_create(e->gpu, -1, &c, &ds), -EINVAL);
	cr_assert_eq(tdm_dsched_create(e->gpu, tdm_gpu_device_count(e->gpu), &c, &ds), -EINVAL);
	c.warps = TDM_DSCHED_MAX_WARPS + 1;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL);
	c.warps = 0;
	c.scope = TDM_DSCHED_SCOPE_DEVICE + 1;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL, "an unknown scope");
	c.scope = TDM_DSCHED_SCOPE_SYSTEM;
	unsigned caps[] = {8, 100, 131072};
	for (unsigned i = 0; i < 3; i++) {
		c.capacity = caps[i];
		cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL, "capacity %u",
		             caps[i]);
	}
	c.capacity = 0;
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(e->gpu, 0, &info), 0);
	c.blocks = (unsigned)info.sm_count + 1;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL, "more blocks than SMs");
	c.blocks = 0;
	tdm_dsched_handlers bad = *h;
	c.handlers = &bad;
	bad.abi = TDM_DSCHED_ABI + 1;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL, "another ABI");
	bad.abi = TDM_DSCHED_ABI;
	bad.count = 0;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL);
	bad.count = h->count;
	c.handlers = NULL;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -EINVAL);
	/* A table with nothing this backend runs. */
	bool sim = strcmp(tdm_gpu_backend_name(e->gpu), "sim") == 0;
	bad.launch = sim ? fake_launch : NULL;
	bad.host = sim ? NULL : bad.host;
	c.handlers = &bad;
	cr_assert_eq(tdm_dsched_create(e->gpu, 0, &c, &ds), -ENOTSUP);
}

/* ---- a trapping handler ---- */

struct item_await {
	tdm_dsched *ds;
	uint64_t ticket;
	int rc;
};

static int item_await_task(tdm_task *t, void *arg)
{
	struct item_await *c = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_dsched(t, c->ds, c->ticket));
	c->rc = tdm_task_result(t);
	TDM_END(t);
}

/* Spawns a task awaiting item `ticket` into g. */
static void spawn_await(struct env *e, tdm_group *g, struct item_await *a, tdm_dsched *ds,
                        uint64_t ticket)
{
	*a = (struct item_await){ds, ticket, 1};
	cr_assert_eq(tdm_spawn(e->ex, item_await_task, a, g), 0);
}

/*
 * sim: the fault is injected, and the next item a thread takes kills the device instead of
 * running. cuda: a real trap, on a scheduler of two warps: one holds an item that never ends (a
 * task awaits it before the trap), the other takes the trap; no warp is left to run the items
 * submitted after it. On a GPU a trap kills the context some time after it runs, so items on
 * other warps may still complete meanwhile: here none can.
 */
static void trapping_handler_fails_the_device(struct env *e, const tdm_dsched_handlers *h, bool sim)
{
	uint32_t *counts = pinned(e, 16 * sizeof(uint32_t));
	uint32_t *flags = pinned(e, 2 * sizeof(uint32_t)); /* the hold's entered, release */
	tdm_dsched *ds = sim ? make(e, h, 2, 2, 64) : make(e, h, 1, 2, 64);
	for (uint32_t i = 0; i < 10; i++) {
		struct record_args a = {counts, i};
		submit_one(ds, STEP_RECORD, &a, sizeof(a));
	}
	for (uint64_t t = 1; t <= 10; t++)
		cr_assert_eq(wait_item(ds, t), 0);
	/* Awaits on items that never run, suspended before the fault or after it. */
	struct item_await aw[5];
	unsigned naw = 0, lost = 0;
	tdm_group g;
	tdm_group_init(&g, e->ex);
	if (sim) {
		cr_assert_eq(tdm_dsched_sim_inject(ds, TDM_SIM_FAULT_STICKY), 0);
	} else {
		struct hold_args a = {&flags[0], &flags[1]};
		spawn_await(e, &g, &aw[naw++], ds, submit_one(ds, STEP_HOLD, &a, sizeof(a)));
		while (__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) == 0)
			sched_yield();
		submit_one(ds, STEP_TRAP, NULL, 0);
		lost = 2; /* the hold and the trap */
	}
	while (naw < 5) {
		struct record_args a = {counts, 10 + naw};
		uint64_t t = 0;
		int rc = tdm_dsched_submit(ds, STEP_RECORD, &a, sizeof(a), &t);
		if (rc == -EIO) {
			/* The device was found dead already (sim: the first of these items
			 * took the fault): submits say so. */
			aw[naw++] = (struct item_await){ds, 0, -EIO};
			continue;
		}
		cr_assert_eq(rc, 0, "tdm_dsched_submit: %s", tdm_strerror(rc));
		spawn_await(e, &g, &aw[naw++], ds, t);
		lost++;
	}
	cr_assert_eq(tdm_group_wait(&g), 0);
	for (uint32_t i = 0; i < 5; i++)
		cr_assert_eq(aw[i].rc, -EIO, "await %u: %s", i, tdm_strerror(aw[i].rc));
	/* The device is failed for the whole layer now. */
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e->gpu, 0, 0, &s), -ENODEV);
	uint64_t t;
	cr_assert_eq(tdm_dsched_submit(ds, STEP_NOTHING, NULL, 0, &t), -EIO);
	cr_assert_eq(tdm_dsched_query(ds, 10), -EIO, "a failed device fails every item");
	cr_assert_eq(await_at_once(e, ds, 1), -EIO);
	tdm_dsched_stats st;
	destroy(ds, TDM_DSCHED_DRAIN, &st);
	/* Every item submitted after the first ten failed: none ran. */
	cr_assert_eq(st.failed, lost);
	cr_assert_eq(st.completed, 10);
	cr_assert_eq(st.cancelled, 0);
	for (uint32_t i = 10; i < 16; i++)
		cr_assert_eq(counts[i], 0, "item %u ran", i);
	(void)tdm_host_free(e->gpu, flags);
	(void)tdm_host_free(e->gpu, counts);
}

/* ---- destroy with items outstanding ---- */

struct releaser {
	const struct tdm__dsched *ds; /* type-stable: readable while its destroy runs */
	uint32_t *release;
};

/* Whether the destroy has told every block of ds's kernel to stop: each stop word moved off
 * "none yet" (gpu/dsched.c, set_stop). */
static bool told_to_stop(const struct tdm__dsched *ds)
{
	for (unsigned k = 0; k < ds->blocks; k++)
		/* Acquire: pairs with set_stop's release stores. */
		if (__atomic_load_n(&ds->q.stop[(size_t)k * TDM__DSCHED_STOP_STRIDE],
		                    __ATOMIC_ACQUIRE) == TDM__DSCHED_CANCEL - 1)
			return false;
	return true;
}

/* Lets the held item go once the destroy has told the kernel to stop, however long the destroy
 * takes to get there. */
static void *release_after_destroy_began(void *arg)
{
	struct releaser *r = arg;
	while (!told_to_stop(r->ds))
		tdm_test_sleep_us(500);
	__atomic_store_n(r->release, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void destroy_with_items_outstanding(struct env *e, const tdm_dsched_handlers *h, int how)
{
	enum { N = 50 };
	uint32_t *mem = pinned(e, (N + 2) * sizeof(uint32_t)), *counts = mem + 2;
	tdm_dsched *ds = make(e, h, 1, 1, 128);
	struct hold_args hold = {&mem[0], &mem[1]};
	uint64_t first = submit_one(ds, STEP_HOLD, &hold, sizeof(hold));
	cr_assert_eq(first, 1);
	while (__atomic_load_n(&mem[0], __ATOMIC_ACQUIRE) == 0)
		sched_yield();
	for (uint32_t i = 0; i < N; i++) {
		struct record_args a = {counts, i};
		submit_one(ds, STEP_RECORD, &a, sizeof(a));
	}
	/* Tasks awaiting the held item and every 5th of the others, suspended. */
	struct item_await aw[1 + N / 5];
	tdm_group g;
	tdm_group_init(&g, e->ex);
	for (uint32_t i = 0; i < 1 + N / 5; i++) {
		spawn_await(e, &g, &aw[i], ds, i == 0 ? first : first + 1 + (i - 1) * 5);
	}
	/* Every await registered before the destroy begins (one registered later would say
	 * -ESHUTDOWN): none of the items can complete while the hold runs, so each suspends. */
	for (;;) { /* no bound: awaits that never suspend are a hang, the test's timeout */
		tdm_dsched_stats now;
		cr_assert_eq(tdm_dsched_stats_get(ds, &now), 0);
		if (now.awaits >= 1 + N / 5)
			break;
		sched_yield();
	}
	struct releaser r = {tdm__dsched_of(ds), &mem[1]};
	cr_assert_not_null(r.ds);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, release_after_destroy_began, &r), 0);
	tdm_dsched_stats st;
	destroy(ds, how, &st);
	pthread_join(th, NULL);
	cr_assert_eq(tdm_group_wait(&g), 0);
	cr_assert_eq(st.submitted, 1 + N);
	cr_assert_eq(st.failed, 0);
	cr_assert_eq(aw[0].rc, 0, "the item running when the destroy came completed");
	if (how == TDM_DSCHED_CANCEL) {
		cr_assert_eq(st.completed, 1);
		cr_assert_eq(st.cancelled, N, "cancelled: %llu", (unsigned long long)st.cancelled);
		for (uint32_t i = 1; i < 1 + N / 5; i++)
			cr_assert_eq(aw[i].rc, -ECANCELED, "await %u: %s", i,
			             tdm_strerror(aw[i].rc));
		for (uint32_t i = 0; i < N; i++)
			cr_assert_eq(counts[i], 0, "a cancelled item never ran");
	} else {
		cr_assert_eq(st.completed, 1 + N);
		cr_assert_eq(st.cancelled, 0);
		for (uint32_t i = 1; i < 1 + N / 5; i++)
			cr_assert_eq(aw[i].rc, 0);
		for (uint32_t i = 0; i < N; i++)
			cr_assert_eq(counts[i], 1, "every item ran");
	}
	cr_assert_eq(tdm_host_free(e->gpu, mem), 0);
}

/* ---- streams beside it ---- */

struct beside_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	float *host, *dev;
	int rc;
	struct seen sn;
};

#define BESIDE_N 4096

/* Stream-ordered memory, a copy each way and a kernel on a stream of the set, awaited: no call
 * here waits for every kernel of the device. */
static int beside_task(tdm_task *t, void *arg)
{
	struct beside_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	SEE(&c->sn, tdm_device_alloc_async(c->s, BESIDE_N * sizeof(float), (void **)&c->dev));
	SEE(&c->sn,
	    tdm_memcpy_async(c->s, c->dev, c->host, BESIDE_N * sizeof(float), TDM_COPY_H2D));
	SEE(&c->sn, tdm_launch_scale(c->s, c->dev, c->dev, 3.0f, BESIDE_N));
	SEE(&c->sn, tdm_memcpy_async(c->s, c->host + BESIDE_N, c->dev, BESIDE_N * sizeof(float),
	                             TDM_COPY_D2H));
	SEE(&c->sn, tdm_device_free_async(c->s, c->dev));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->rc = tdm_task_result(t);
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void streams_usable_beside_it(struct env *e, const tdm_dsched_handlers *h)
{
	uint32_t *flags = pinned(e, 2 * sizeof(uint32_t));
	struct beside_state c = {.gpu = e->gpu, .rc = 1};
	cr_assert_eq(tdm_pinned_alloc(e->gpu, 2 * BESIDE_N * sizeof(float), (void **)&c.host), 0);
	for (int i = 0; i < BESIDE_N; i++)
		c.host[i] = (float)i;
	tdm_dsched *ds = make(e, h, 1, 4, 64);
	struct hold_args hold = {&flags[0], &flags[1]};
	uint64_t held = submit_one(ds, STEP_HOLD, &hold, sizeof(hold));
	while (__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) == 0)
		sched_yield();
	cr_assert_eq(run_one(e, beside_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc, 0);
	for (int i = 0; i < BESIDE_N; i++)
		cr_assert_eq(c.host[BESIDE_N + i], 3.0f * (float)i, "element %d", i);
	/* Items go on beside the held one. */
	cr_assert_eq(wait_item(ds, submit_one(ds, STEP_NOTHING, NULL, 0)), 0);
	cr_assert_eq(tdm_dsched_query(ds, held), -EAGAIN);
	__atomic_store_n(&flags[1], 1, __ATOMIC_RELEASE);
	cr_assert_eq(wait_item(ds, held), 0);
	destroy(ds, TDM_DSCHED_DRAIN, NULL);
	cr_assert_eq(tdm_pinned_free(e->gpu, c.host), 0);
	cr_assert_eq(tdm_host_free(e->gpu, flags), 0);
}

/* ---- suites ---- */

static bool open_backend(struct env *e, tdm_backend b, unsigned workers)
{
	return env_open(e, b, TDM_COMPLETION_AUTO, workers);
}

#define DSCHED_TESTS(suite, backend, table, sim)                                                   \
	TDM_TEST_SUITE(suite);                                                                     \
	Test(suite, every_item_runs_once_and_its_await_sees_it, .timeout = TDM_TEST_TIMEOUT(120))  \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 4))                                                 \
			cr_skip_test("no device for this backend");                                \
		every_item_once(&e, table, 0, TDM_DSCHED_SCOPE_SYSTEM);                            \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, device_scope_runs_every_item_once, .timeout = TDM_TEST_TIMEOUT(120))           \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 4))                                                 \
			cr_skip_test("no device for this backend");                                \
		every_item_once(&e, table, 0, TDM_DSCHED_SCOPE_DEVICE);                            \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, batches_run_once_each, .timeout = TDM_TEST_TIMEOUT(120))                       \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 4))                                                 \
			cr_skip_test("no device for this backend");                                \
		every_item_once(&e, table, 16, TDM_DSCHED_SCOPE_SYSTEM);                           \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, one_warp_runs_items_in_ticket_order, .timeout = TDM_TEST_TIMEOUT(120))         \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		one_warp_runs_in_ticket_order(&e, table);                                          \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, a_full_argument_block_arrives_whole, .timeout = TDM_TEST_TIMEOUT(60))          \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		batch_of_full_items(&e, table);                                                    \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, full_queue_says_eagain, .timeout = TDM_TEST_TIMEOUT(60))                       \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		full_queue_says_eagain(&e, table);                                                 \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, unknown_handler_and_bad_tickets_are_refused, .timeout = TDM_TEST_TIMEOUT(60))  \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		refusals(&e, table);                                                               \
		bad_configs(&e, table);                                                            \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, trapping_handler_fails_every_await, .timeout = TDM_TEST_TIMEOUT(60))           \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		trapping_handler_fails_the_device(&e, table, sim);                                 \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, destroy_cancels_items_not_started, .timeout = TDM_TEST_TIMEOUT(60))            \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		destroy_with_items_outstanding(&e, table, TDM_DSCHED_CANCEL);                      \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, destroy_drains_items_outstanding, .timeout = TDM_TEST_TIMEOUT(60))             \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		destroy_with_items_outstanding(&e, table, TDM_DSCHED_DRAIN);                       \
		env_close(&e);                                                                     \
	}                                                                                          \
	Test(suite, streams_stay_usable_beside_it, .timeout = TDM_TEST_TIMEOUT(60))                \
	{                                                                                          \
		struct env e;                                                                      \
		if (!open_backend(&e, backend, 2))                                                 \
			cr_skip_test("no device for this backend");                                \
		streams_usable_beside_it(&e, table);                                               \
		env_close(&e);                                                                     \
	}

DSCHED_TESTS(dsched_sim, TDM_BACKEND_SIM, &sim_steps, true)
#ifndef TANDEM_TEST_NO_CUDA
DSCHED_TESTS(dsched_cuda, TDM_BACKEND_CUDA, &test_dsched_steps, false)

/* The table a .cu file makes carries host twins: the simulator runs them. */
Test(dsched_sim, a_cu_table_runs_on_sim_through_its_host_twins, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(open_backend(&e, TDM_BACKEND_SIM, 2));
	one_warp_runs_in_ticket_order(&e, &test_dsched_steps);
	batch_of_full_items(&e, &test_dsched_steps);
	env_close(&e);
}
#endif

/* ---- sim only ---- */

/* A MIG instance's share: a 16th of its SMs, at least 1. */
Test(dsched_sim, a_mig_sized_device_gets_a_mig_sized_share, .timeout = TDM_TEST_TIMEOUT(60))
{
	static const struct {
		unsigned sms, blocks;
	} cases[] = {{0, 8}, {16, 1}, {1, 1}, {60, 3}};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		tdm_gpu_config g;
		tdm_gpu_config_init(&g);
		g.backend = TDM_BACKEND_SIM;
		g.sim_sm_count = cases[i].sms;
		struct env e;
		cr_assert(env_open_cfg(&e, 2, &g));
		tdm_device_info info;
		cr_assert_eq(tdm_gpu_device_info(e.gpu, 0, &info), 0);
		cr_assert_eq(info.dsched_blocks, cases[i].blocks, "%u SMs: %u blocks (%s)",
		             info.sm_count, info.dsched_blocks, info.why_dsched);
		cr_assert_not_null(strstr(info.why_dsched, "device scheduler"), "%s",
		                   info.why_dsched);
		uint32_t *counts = pinned(&e, 100 * sizeof(uint32_t));
		tdm_dsched *ds = make(&e, &sim_steps, 0, 0, 0);
		tdm_dsched_stats st;
		cr_assert_eq(tdm_dsched_stats_get(ds, &st), 0);
		cr_assert_eq(st.blocks, cases[i].blocks);
		cr_assert_eq(st.warps, 15, "the default");
		cr_assert_eq(st.capacity, 4096);
		uint64_t t = 0;
		for (uint32_t k = 0; k < 100; k++) {
			struct record_args a = {counts, k};
			t = submit_one(ds, STEP_RECORD, &a, sizeof(a));
		}
		cr_assert_eq(wait_item(ds, t), 0);
		destroy(ds, TDM_DSCHED_DRAIN, &st);
		for (uint32_t k = 0; k < 100; k++)
			cr_assert_eq(counts[k], 1);
		/* Every SM of it, but not one more. */
		tdm_dsched_config c;
		tdm_dsched_config_init(&c);
		c.handlers = &sim_steps;
		c.blocks = (unsigned)info.sm_count + 1;
		cr_assert_eq(tdm_dsched_create(e.gpu, 0, &c, &ds), -EINVAL);
		if (info.sm_count <= 16) {
			c.blocks = (unsigned)info.sm_count;
			cr_assert_eq(tdm_dsched_create(e.gpu, 0, &c, &ds), 0);
			destroy(ds, TDM_DSCHED_CANCEL, NULL);
		}
		cr_assert_eq(tdm_host_free(e.gpu, counts), 0);
		env_close(&e);
	}
}

Test(dsched_sim, no_device_no_scheduler)
{
	struct env e;
	cr_assert(open_backend(&e, TDM_BACKEND_NONE, 1));
	tdm_dsched_config c;
	tdm_dsched_config_init(&c);
	c.handlers = &sim_steps;
	tdm_dsched *ds;
	cr_assert_eq(tdm_dsched_create(e.gpu, 0, &c, &ds), -ENODEV);
	env_close(&e);
}

/* The threads of this process named tdm-dsched*: how many, and how many of them are blocked in
 * a futex wait (/proc/self/task/N/syscall names the call a blocked thread is in). */
static void dsched_threads(unsigned *all, unsigned *in_futex)
{
	*all = *in_futex = 0;
	DIR *dir = opendir("/proc/self/task");
	cr_assert_not_null(dir);
	struct dirent *de;
	while ((de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[300], line[256] = {0};
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue; /* gone meanwhile */
		bool ours =
		    fgets(line, sizeof(line), f) != NULL && strncmp(line, "tdm-dsched", 10) == 0;
		fclose(f);
		if (!ours)
			continue;
		(*all)++;
		snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", de->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		long nr = -1;
		if (fgets(line, sizeof(line), f) != NULL && sscanf(line, "%ld", &nr) == 1 &&
		    nr == SYS_futex)
			(*in_futex)++;
		fclose(f);
	}
	closedir(dir);
}

/* Idle schedulers cost no CPU: 64 of them on one device, with nothing queued, have every thread
 * asleep on a futex (their event count) rather than napping and looking again; each wakes for
 * the items published to it, and the destroys end them all. */
Test(dsched_sim, idle_schedulers_sleep_until_an_item_comes, .timeout = TDM_TEST_TIMEOUT(120))
{
	enum { N = 64 };
	struct env e;
	cr_assert(open_backend(&e, TDM_BACKEND_SIM, 2));
	uint32_t *counts = pinned(&e, N * sizeof(uint32_t));
	tdm_dsched *ds[N];
	for (unsigned i = 0; i < N; i++)
		ds[i] = make(&e, &sim_steps, 0, 0, 0);
	unsigned all, asleep;
	do {
		sched_yield();
		dsched_threads(&all, &asleep);
	} while (asleep < all);
	cr_assert_geq(all, N, "a thread per scheduler at least: %u", all);
	/* Each wakes for an item published to it, runs it, and sleeps again. */
	for (unsigned i = 0; i < N; i++) {
		struct record_args a = {counts, i};
		cr_assert_eq(wait_item(ds[i], submit_one(ds[i], STEP_RECORD, &a, sizeof(a))), 0);
	}
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(counts[i], 1, "scheduler %u ran its item", i);
	do {
		sched_yield();
		dsched_threads(&all, &asleep);
	} while (asleep < all);
	for (unsigned i = 0; i < N; i++)
		destroy(ds[i], i % 2 ? TDM_DSCHED_DRAIN : TDM_DSCHED_CANCEL, NULL);
	dsched_threads(&all, &asleep);
	cr_assert_eq(all, 0, "%u scheduler threads left", all);
	cr_assert_eq(tdm_host_free(e.gpu, counts), 0);
	env_close(&e);
}

struct later {
	tdm_dsched *ds;
	int rc;
};

static void *destroy_later(void *arg)
{
	struct later *l = arg;
	tdm_test_sleep_us(30000);
	l->rc = tdm_dsched_destroy(l->ds, TDM_DSCHED_DRAIN, NULL);
	return NULL;
}

/* tdm_gpu_destroy waits for a scheduler's destroy, as for a lease's release. */
Test(dsched_sim, the_layer_outlives_its_schedulers, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	cr_assert(open_backend(&e, TDM_BACKEND_SIM, 2));
	tdm_dsched *ds = make(&e, &sim_steps, 2, 2, 64);
	struct spin_args a = {1000000};
	submit_one(ds, STEP_SPIN, &a, sizeof(a));
	struct later l = {ds, 1};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, destroy_later, &l), 0);
	tdm_test_destroy(e.ex);
	cr_assert_eq(tdm_gpu_destroy(e.gpu), 0);
	pthread_join(th, NULL);
	cr_assert_eq(l.rc, 0);
}
