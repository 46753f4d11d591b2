// SPDX-License-Identifier: MIT
/*
 * The pinned host memory pool, specified on the simulator and, where a device exists, on CUDA
 * (skipped elsewhere, left out of builds without CUDA): reuse without growth, the cap, frees from
 * other threads, usable and aligned blocks of every size, the statistics, and the errors. Tasks
 * never assert (Criterion's assertions belong to the test's thread): they record what they saw and
 * the test checks it.
 */
#include "common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h" /* tdm__pinned_owns */
#include "tandem.h"
#include "tandem_gpu.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

struct env {
	tdm_executor *ex;
	tdm_gpu *gpu;
};

/* An executor and a GPU layer on `backend` with the pool's chunk size and cap; skips the test
 * when the backend has no device. */
static void env_open(struct env *e, tdm_backend backend, unsigned workers, size_t chunk, size_t cap)
{
	e->ex = tdm_test_create(workers);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = backend;
	g.pinned_chunk_bytes = chunk;
	g.pinned_cap_bytes = cap;
	int rc = tdm_gpu_create(&e->gpu, e->ex, &g);
	if (rc == -ENODEV) {
		tdm_test_destroy(e->ex);
		cr_skip_test("no device for this backend");
	}
	cr_assert_eq(rc, 0, "tdm_gpu_create: %s", tdm_strerror(rc));
}

static void env_close(struct env *e)
{
	cr_assert_eq(tdm_gpu_destroy(e->gpu), 0);
	tdm_test_destroy(e->ex);
}

static tdm_pinned_stats stats(struct env *e)
{
	tdm_pinned_stats s;
	int rc = tdm_pinned_stats_get(e->gpu, &s);
	cr_assert_eq(rc, 0, "tdm_pinned_stats_get: %s", tdm_strerror(rc));
	return s;
}

/* Runs fn(arg) as one task on a worker and waits for it here. */
static void on_worker(struct env *e, tdm_fn fn, void *arg)
{
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e->ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, fn, arg), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
}

/* What a task saw (SEE, common.h), and the pool it works on. */
struct seen {
	tdm_gpu *gpu;
	int rc;
	int line;
};

/* ---- reuse without growth ---- */

static const size_t mixed_sizes[] = {1, 300, 4096, 5000, 65536, 200000, 700000};
#define NMIXED (sizeof(mixed_sizes) / sizeof(mixed_sizes[0]))
#define PER_SIZE 8

struct rounds {
	struct seen sn;
	unsigned n;
};

/* n rounds of: PER_SIZE blocks of each mixed size, then all freed. */
static void do_rounds(struct rounds *r)
{
	void *p[NMIXED][PER_SIZE];
	for (unsigned round = 0; round < r->n; round++) {
		for (size_t i = 0; i < NMIXED; i++)
			for (int j = 0; j < PER_SIZE; j++) {
				p[i][j] = NULL;
				SEE(&r->sn, tdm_pinned_alloc(r->sn.gpu, mixed_sizes[i], &p[i][j]));
			}
		for (size_t i = 0; i < NMIXED; i++)
			for (int j = 0; j < PER_SIZE; j++)
				if (p[i][j] != NULL)
					SEE(&r->sn, tdm_pinned_free(r->sn.gpu, p[i][j]));
	}
}

static void rounds_task(void *arg)
{
	do_rounds(arg);
}

static void reuse_after_warm_up_pins_nothing_more(tdm_backend backend, bool worker)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	struct rounds r = {.sn = {.gpu = e.gpu}, .n = 1};
	if (worker)
		on_worker(&e, rounds_task, &r);
	else
		do_rounds(&r);
	ASSERT_SEEN(&r.sn);
	tdm_pinned_stats warm = stats(&e);
	cr_assert_gt(warm.chunks, 0);
	cr_assert_eq(warm.bytes_in_use, 0);

	r.n = (unsigned)tdm_test_size(2000, 200);
	if (worker)
		on_worker(&e, rounds_task, &r);
	else
		do_rounds(&r);
	ASSERT_SEEN(&r.sn);
	tdm_pinned_stats after = stats(&e);
	cr_assert_eq(after.chunks, warm.chunks, "chunks %llu after warm-up, then %llu",
	             (unsigned long long)warm.chunks, (unsigned long long)after.chunks);
	cr_assert_eq(after.bytes_pinned, warm.bytes_pinned);
	cr_assert_eq(after.high_water, warm.high_water);
	cr_assert_eq(after.bytes_in_use, 0);
	env_close(&e);
}

/* ---- the cap ---- */

struct cap_run {
	struct seen sn;
	unsigned got;         /* 64 KiB blocks before the first failure */
	int fail_rc;          /* that failure */
	int small_rc;         /* a 1-byte allocation at the cap */
	int big_rc;           /* a dedicated (3 MiB) allocation at the cap */
	int whole_rc[3];      /* three 1 MiB blocks after everything was freed */
	unsigned small_after; /* 256-byte blocks allocated after those were freed */
};

#define CAP_BLOCKS 40

static void do_cap(struct cap_run *c)
{
	tdm_gpu *gpu = c->sn.gpu;
	void *p[CAP_BLOCKS] = {0}, *whole[3] = {0}, *tiny[64] = {0}, *q = NULL;
	int rc = 0;
	for (c->got = 0; c->got < CAP_BLOCKS; c->got++)
		if ((rc = tdm_pinned_alloc(gpu, 64 * KIB, &p[c->got])) != 0)
			break;
	c->fail_rc = rc;
	c->small_rc = tdm_pinned_alloc(gpu, 1, &q);
	if (c->small_rc == 0)
		SEE(&c->sn, tdm_pinned_free(gpu, q));
	c->big_rc = tdm_pinned_alloc(gpu, 3 * MIB, &q);
	if (c->big_rc == 0)
		SEE(&c->sn, tdm_pinned_free(gpu, q));
	for (unsigned i = 0; i < c->got; i++)
		SEE(&c->sn, tdm_pinned_free(gpu, p[i]));
	/* Freed 64 KiB runs coalesce into whole chunks again. */
	for (int i = 0; i < 3; i++)
		c->whole_rc[i] = tdm_pinned_alloc(gpu, 1 * MIB, &whole[i]);
	for (int i = 0; i < 3; i++)
		if (c->whole_rc[i] == 0)
			SEE(&c->sn, tdm_pinned_free(gpu, whole[i]));
	for (c->small_after = 0; c->small_after < 64; c->small_after++)
		if (tdm_pinned_alloc(gpu, 256, &tiny[c->small_after]) != 0)
			break;
	for (unsigned i = 0; i < c->small_after; i++)
		SEE(&c->sn, tdm_pinned_free(gpu, tiny[i]));
}

static void cap_task(void *arg)
{
	do_cap(arg);
}

static void allocations_past_the_cap_fail_until_blocks_are_freed(tdm_backend backend, bool worker)
{
	struct env e;
	env_open(&e, backend, 2, 1 * MIB, 2 * MIB);
	struct cap_run c = {.sn = {.gpu = e.gpu}};
	if (worker)
		on_worker(&e, cap_task, &c);
	else
		do_cap(&c);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.got, 32, "2 MiB hold 32 blocks of 64 KiB, got %u", c.got);
	cr_assert_eq(c.fail_rc, -ENOMEM, "past the cap: %d", c.fail_rc);
	cr_assert_eq(c.small_rc, -ENOMEM, "a small block at the cap: %d", c.small_rc);
	cr_assert_eq(c.big_rc, -ENOMEM, "a dedicated block at the cap: %d", c.big_rc);
	cr_assert_eq(c.whole_rc[0], 0, "a whole chunk after frees: %d", c.whole_rc[0]);
	cr_assert_eq(c.whole_rc[1], 0, "the second whole chunk after frees: %d", c.whole_rc[1]);
	cr_assert_eq(c.whole_rc[2], -ENOMEM, "a third chunk is past the cap: %d", c.whole_rc[2]);
	cr_assert_eq(c.small_after, 64);
	tdm_pinned_stats s = stats(&e);
	cr_assert_eq(s.bytes_pinned, 2 * MIB);
	cr_assert_eq(s.chunks, 2);
	cr_assert_eq(s.bytes_in_use, 0);
	cr_assert_eq(s.high_water, 2 * MIB);
	env_close(&e);
}

/* ---- frees from other threads ---- */

#define XBLOCKS 64
#define XTASKS 8

struct cross {
	struct seen sn;
	void *p[XTASKS][XBLOCKS];
	unsigned task;
	atomic_uint next;
};

static size_t cross_size(unsigned t, unsigned i)
{
	return 1 + (size_t)((t * 7919u + i * 104729u) % (300u * 1024u));
}

static void cross_alloc_task(void *arg)
{
	struct cross *x = arg;
	unsigned t = atomic_fetch_add(&x->next, 1);
	for (unsigned i = 0; i < XBLOCKS; i++) {
		SEE(&x->sn, tdm_pinned_alloc(x->sn.gpu, cross_size(t, i), &x->p[t][i]));
		if (x->p[t][i] != NULL)
			memset(x->p[t][i], (int)t, cross_size(t, i));
	}
}

static void cross_free_task(void *arg)
{
	struct cross *x = arg;
	unsigned t = atomic_fetch_add(&x->next, 1);
	for (unsigned i = 0; i < XBLOCKS; i++)
		if (x->p[t][i] != NULL)
			SEE(&x->sn, tdm_pinned_free(x->sn.gpu, x->p[t][i]));
}

static void spawn_all(struct env *e, tdm_fn fn, struct cross *x)
{
	tdm_group g;
	atomic_store(&x->next, 0);
	cr_assert_eq(tdm_group_init(&g, e->ex), 0);
	for (unsigned t = 0; t < XTASKS; t++)
		cr_assert_eq(tdm_group_spawn(&g, fn, x), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
}

static void blocks_freed_on_other_threads_return_to_the_pool(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 4, 1 * MIB, 0);
	struct cross *x = calloc(1, sizeof(*x));
	cr_assert_not_null(x);
	x->sn.gpu = e.gpu;
	uint64_t want = 0;
	for (unsigned t = 0; t < XTASKS; t++)
		for (unsigned i = 0; i < XBLOCKS; i++)
			want += cross_size(t, i);

	/* Allocated on workers, freed here. */
	spawn_all(&e, cross_alloc_task, x);
	ASSERT_SEEN(&x->sn);
	tdm_pinned_stats s = stats(&e);
	cr_assert_geq(s.bytes_in_use, want, "in use %llu, asked for %llu",
	              (unsigned long long)s.bytes_in_use, (unsigned long long)want);
	for (unsigned t = 0; t < XTASKS; t++)
		for (unsigned i = 0; i < XBLOCKS; i++) {
			size_t n = cross_size(t, i);
			unsigned char *b = x->p[t][i];
			cr_assert(b[0] == (unsigned char)t && b[n - 1] == (unsigned char)t,
			          "block %u/%u kept its bytes", t, i);
			cr_assert_eq(tdm_pinned_free(e.gpu, b), 0);
		}
	cr_assert_eq(stats(&e).bytes_in_use, 0);

	/* Allocated here, freed on workers. */
	for (unsigned t = 0; t < XTASKS; t++)
		for (unsigned i = 0; i < XBLOCKS; i++)
			cr_assert_eq(tdm_pinned_alloc(e.gpu, cross_size(t, i), &x->p[t][i]), 0);
	spawn_all(&e, cross_free_task, x);
	ASSERT_SEEN(&x->sn);
	cr_assert_eq(stats(&e).bytes_in_use, 0);

	/* Allocated on workers, freed on (other) workers. */
	memset(x->p, 0, sizeof(x->p));
	spawn_all(&e, cross_alloc_task, x);
	spawn_all(&e, cross_free_task, x);
	ASSERT_SEEN(&x->sn);
	s = stats(&e);
	cr_assert_eq(s.bytes_in_use, 0);
	cr_assert_geq(s.high_water, want);
	cr_assert_leq(s.high_water, s.bytes_pinned);
	free(x);
	env_close(&e);
}

/* ---- blocks ---- */

struct usable {
	struct seen sn;
	size_t chunk;
	unsigned bad_align, bad_bytes;
	uint64_t in_use_min; /* sum of the requests */
};

static void do_usable(struct usable *u)
{
	const size_t c = u->chunk;
	const size_t sizes[] = {1,        2,      255,   256,  257,   768,   1000,          1024,
	                        1025,     4095,   4096,  4097, 65535, 65536, 65537,         100000,
	                        262144,   262145, c - 1, c,    c + 1, 2 * c, 3 * c + 12345, c / 2,
	                        c / 2 + 1};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	unsigned char *p[N] = {0};
	u->in_use_min = 0;
	for (int i = 0; i < N; i++) {
		SEE(&u->sn, tdm_pinned_alloc(u->sn.gpu, sizes[i], (void **)&p[i]));
		if (p[i] == NULL)
			continue;
		u->in_use_min += sizes[i];
		if ((uintptr_t)p[i] % 256 != 0)
			u->bad_align++;
		memset(p[i], 0x40 + i, sizes[i]);
	}
	/* All alive at once: no two overlap. */
	for (int i = 0; i < N; i++)
		for (size_t k = 0; p[i] != NULL && k < sizes[i]; k++)
			if (p[i][k] != (unsigned char)(0x40 + i)) {
				u->bad_bytes++;
				break;
			}
	for (int i = 0; i < N; i++)
		if (p[i] != NULL)
			SEE(&u->sn, tdm_pinned_free(u->sn.gpu, p[i]));
}

static void usable_task(void *arg)
{
	do_usable(arg);
}

static void blocks_hold_the_requested_bytes_aligned_to_256(tdm_backend backend, bool worker)
{
	struct env e;
	env_open(&e, backend, 2, 1 * MIB, 0);
	struct usable u = {.sn = {.gpu = e.gpu}, .chunk = 1 * MIB};
	if (worker)
		on_worker(&e, usable_task, &u);
	else
		do_usable(&u);
	ASSERT_SEEN(&u.sn);
	cr_assert_eq(u.bad_align, 0, "%u blocks not aligned to 256 bytes", u.bad_align);
	cr_assert_eq(u.bad_bytes, 0, "%u blocks overlapped another", u.bad_bytes);
	tdm_pinned_stats s = stats(&e);
	cr_assert_eq(s.bytes_in_use, 0);
	cr_assert_geq(s.high_water, u.in_use_min);
	env_close(&e);
}

static void dedicated_blocks_are_kept_for_the_next_large_request(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	void *a, *b;
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 3 * MIB, &a), 0);
	tdm_pinned_stats s1 = stats(&e);
	cr_assert_eq(s1.chunks, 1);
	cr_assert_eq(s1.bytes_pinned, 3 * MIB);
	cr_assert_eq(s1.bytes_in_use, 3 * MIB);
	cr_assert_eq(tdm_pinned_free(e.gpu, a), 0);
	cr_assert_eq(stats(&e).bytes_in_use, 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 3 * MIB - 5000, &b), 0);
	cr_assert_eq(b, a, "the freed dedicated chunk served the next large request");
	tdm_pinned_stats s2 = stats(&e);
	cr_assert_eq(s2.chunks, 1);
	cr_assert_eq(s2.bytes_pinned, 3 * MIB);
	cr_assert_eq(tdm_pinned_free(e.gpu, b), 0);
	cr_assert_eq(stats(&e).bytes_in_use, 0);
	env_close(&e);
}

static void pool_memory_counts_as_pinned(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	char *small, *big, *heap = malloc(4096);
	cr_assert_not_null(heap);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 1000, (void **)&small), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 2 * MIB, (void **)&big), 0);
	cr_assert(tdm__pinned_owns(tdm__gpu_find(e.gpu), small));
	cr_assert(tdm__pinned_owns(tdm__gpu_find(e.gpu), small + 999));
	cr_assert(tdm__pinned_owns(tdm__gpu_find(e.gpu), big));
	cr_assert(tdm__pinned_owns(tdm__gpu_find(e.gpu), big + 2 * MIB - 1));
	cr_assert(!tdm__pinned_owns(tdm__gpu_find(e.gpu), heap));
	cr_assert(!tdm__pinned_owns(tdm__gpu_find(e.gpu), NULL));
	cr_assert(!tdm__pinned_owns(NULL, small));
	cr_assert_eq(tdm_pinned_free(e.gpu, small), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, big), 0);
	free(heap);
	env_close(&e);
}

/* ---- statistics ---- */

struct hw_run {
	struct seen sn;
};

/* 10 x 4 KiB, 5 of them freed, one 64 KiB, all freed. */
static void do_high_water(struct hw_run *h)
{
	void *p[10], *q;
	for (int i = 0; i < 10; i++)
		SEE(&h->sn, tdm_pinned_alloc(h->sn.gpu, 4096, &p[i]));
	for (int i = 0; i < 5; i++)
		SEE(&h->sn, tdm_pinned_free(h->sn.gpu, p[i]));
	SEE(&h->sn, tdm_pinned_alloc(h->sn.gpu, 64 * KIB, &q));
	for (int i = 5; i < 10; i++)
		SEE(&h->sn, tdm_pinned_free(h->sn.gpu, p[i]));
	SEE(&h->sn, tdm_pinned_free(h->sn.gpu, q));
}

static void high_water_task(void *arg)
{
	do_high_water(arg);
}

static void high_water_is_the_largest_in_use(tdm_backend backend, bool worker)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	tdm_pinned_stats s = stats(&e);
	cr_assert_eq(s.bytes_pinned, 0, "nothing is pinned before the first allocation");
	cr_assert_eq(s.chunks, 0);
	cr_assert_eq(s.high_water, 0);
	struct hw_run h = {.sn = {.gpu = e.gpu}};
	if (worker)
		on_worker(&e, high_water_task, &h);
	else
		do_high_water(&h);
	ASSERT_SEEN(&h.sn);
	s = stats(&e);
	/* Peaks: 10 x 4 KiB = 40 KiB, then 5 x 4 KiB + 64 KiB = 84 KiB. */
	cr_assert_eq(s.high_water, 84 * KIB, "high water %llu", (unsigned long long)s.high_water);
	cr_assert_eq(s.bytes_in_use, 0);
	cr_assert_eq(s.chunks, 1);
	cr_assert_eq(s.bytes_pinned, 1 * MIB);
	env_close(&e);
}

/* One round: a task allocates these on a worker, the test's thread frees them. */
static const size_t one_way_sizes[] = {4096, 4096, 4096, 4096,      4096,      4096,   4096,
                                       4096, 4096, 4096, 512 * KIB, 512 * KIB, 3 * MIB};
#define NONE_WAY (sizeof(one_way_sizes) / sizeof(one_way_sizes[0]))

struct one_way {
	struct seen sn;
	void *p[NONE_WAY];
};

static void one_way_task(void *arg)
{
	struct one_way *w = arg;
	for (size_t i = 0; i < NONE_WAY; i++)
		SEE(&w->sn, tdm_pinned_alloc(w->sn.gpu, one_way_sizes[i], &w->p[i]));
}

static void high_water_holds_when_workers_allocate_and_others_free(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	struct one_way w = {.sn = {.gpu = e.gpu}};
	uint64_t round = 0;
	for (size_t i = 0; i < NONE_WAY; i++)
		round += one_way_sizes[i];
	for (int r = 0; r < 50; r++) {
		on_worker(&e, one_way_task, &w);
		ASSERT_SEEN(&w.sn);
		for (size_t i = 0; i < NONE_WAY; i++)
			cr_assert_eq(tdm_pinned_free(e.gpu, w.p[i]), 0);
	}
	tdm_pinned_stats s = stats(&e);
	cr_assert_eq(s.bytes_in_use, 0);
	/* At most one round is in use at once; the mark may run over by what the worker's
	 * cache of 4 KiB blocks holds (32 of them), never by what the rounds add up to. */
	cr_assert_geq(s.high_water, round);
	cr_assert_leq(s.high_water, round + 32 * 4096, "high water %llu, a round %llu",
	              (unsigned long long)s.high_water, (unsigned long long)round);
	env_close(&e);
}

/*
 * A worker's cached block and a large block allocated elsewhere are in use together, and then the
 * worker frees the large one: the mark is both. (The worker's free folds its cache's count and
 * the freed bytes into one add; the total between the two must still reach the mark.)
 */
struct free_big {
	struct seen sn;
	void *small, *big;
	bool do_free;
};

static void free_big_task(void *arg)
{
	struct free_big *f = arg;
	if (f->do_free)
		SEE(&f->sn, tdm_pinned_free(f->sn.gpu, f->big));
	else
		SEE(&f->sn, tdm_pinned_alloc(f->sn.gpu, 4096, &f->small));
}

static void high_water_counts_a_large_block_a_worker_frees(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	struct free_big f = {.sn = {.gpu = e.gpu}};
	on_worker(&e, free_big_task, &f); /* 4 KiB from the worker's cache */
	ASSERT_SEEN(&f.sn);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4 * MIB, &f.big), 0);
	f.do_free = true;
	on_worker(&e, free_big_task, &f); /* the 4 MiB block freed by the worker */
	ASSERT_SEEN(&f.sn);
	tdm_pinned_stats s = stats(&e);
	cr_assert_geq(s.high_water, 4 * MIB + 4096, "high water %llu",
	              (unsigned long long)s.high_water);
	cr_assert_eq(tdm_pinned_free(e.gpu, f.small), 0);
	cr_assert_eq(stats(&e).bytes_in_use, 0);
	env_close(&e);
}

/* ---- concurrency ---- */

#define SLOTS 64

struct stress {
	struct seen sn;
	_Atomic(void *) slot[SLOTS];
	unsigned ops;
	atomic_uint seed;
};

/* Each step allocates a block and swaps it into a random slot; whatever was there (another
 * task's, another thread's) is checked and freed. */
static void stress_task(void *arg)
{
	struct stress *st = arg;
	uint64_t r = 0x9e3779b97f4a7c15ull * (atomic_fetch_add(&st->seed, 1) + 1);
	for (unsigned i = 0; i < st->ops; i++) {
		uint64_t x = tdm_test_rand(&r);
		size_t n = (x % 64 == 0) ? 1 + (size_t)(x >> 8) % (2 * MIB)
		                         : 1 + (size_t)(x >> 8) % (96 * KIB);
		unsigned char *p = NULL;
		SEE(&st->sn, tdm_pinned_alloc(st->sn.gpu, n, (void **)&p));
		if (p == NULL)
			continue;
		p[0] = (unsigned char)n;
		p[n - 1] = (unsigned char)n;
		/* Acq_rel: the block's bytes, written before, reach whoever takes it out. */
		unsigned char *old =
		    atomic_exchange_explicit(&st->slot[(x >> 40) % SLOTS], p, memory_order_acq_rel);
		if (old != NULL)
			SEE(&st->sn, tdm_pinned_free(st->sn.gpu, old));
	}
}

static void concurrent_alloc_and_free_keep_the_counts_exact(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 4, 1 * MIB, 0);
	struct stress *st = calloc(1, sizeof(*st));
	cr_assert_not_null(st);
	st->sn.gpu = e.gpu;
	st->ops = (unsigned)tdm_test_size(20000, 2000);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	for (int t = 0; t < 16; t++)
		cr_assert_eq(tdm_group_spawn(&g, stress_task, st), 0);
	stress_task(st); /* this thread too: the shared lists under contention */
	cr_assert_eq(tdm_group_wait(&g), 0);
	ASSERT_SEEN(&st->sn);
	for (int i = 0; i < SLOTS; i++) {
		void *p = atomic_load(&st->slot[i]);
		if (p != NULL)
			cr_assert_eq(tdm_pinned_free(e.gpu, p), 0);
	}
	tdm_pinned_stats s = stats(&e);
	cr_assert_eq(s.bytes_in_use, 0);
	cr_assert_leq(s.high_water, s.bytes_pinned);
	free(st);
	env_close(&e);
}

static void destroy_frees_blocks_still_handed_out(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 2, 1 * MIB, 0);
	void *p;
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 100, &p), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 500 * KIB, &p), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 5 * MIB, &p), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 7 * MIB, &p), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, p), 0); /* a spare */
	env_close(&e); /* LeakSanitizer checks that every chunk went back */
}

/* ---- errors ---- */

static void bad_arguments_get_their_documented_errors(tdm_backend backend)
{
	struct env e;
	env_open(&e, backend, 1, 1 * MIB, 0);
	void *p = NULL, *big = NULL;
	char *heap = malloc(512);
	cr_assert_not_null(heap);
	tdm_pinned_stats s;
	cr_assert_eq(tdm_pinned_alloc(NULL, 64, &p), -EINVAL);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 64, NULL), -EINVAL);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 0, &p), -EINVAL);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, SIZE_MAX, &p), -ENOMEM);
	cr_assert_eq(tdm_pinned_free(NULL, heap), -EINVAL);
	cr_assert_eq(tdm_pinned_free(e.gpu, NULL), -EINVAL);
	cr_assert_eq(tdm_pinned_free(e.gpu, heap), -EINVAL, "memory not from the pool");
	cr_assert_eq(tdm_pinned_stats_get(NULL, &s), -EINVAL);
	cr_assert_eq(tdm_pinned_stats_get(e.gpu, NULL), -EINVAL);

	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4096, &p), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, (char *)p + 256), -EINVAL, "inside a block");
	cr_assert_eq(tdm_pinned_free(e.gpu, (char *)p + 1), -EINVAL, "unaligned");
	cr_assert_eq(tdm_pinned_free(e.gpu, (char *)p + 8192), -EINVAL, "a block not handed out");
	cr_assert_eq(tdm_pinned_free(e.gpu, p), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, p), -EINVAL, "a double free");
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 5 * MIB, &big), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, (char *)big + 4096), -EINVAL);
	cr_assert_eq(tdm_pinned_free(e.gpu, big), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, big), -EINVAL, "a double free of a dedicated block");

	/* The refused frees left the pool as it was. */
	s = stats(&e);
	cr_assert_eq(s.bytes_in_use, 0);
	void *a, *b;
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4096, &a), 0);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4096, &b), 0);
	cr_assert_neq(a, b, "the double free did not put a block on a list twice");
	cr_assert_eq(tdm_pinned_free(e.gpu, a), 0);
	cr_assert_eq(tdm_pinned_free(e.gpu, b), 0);

	cr_assert_eq(tdm_host_register(NULL, heap, 512), -EINVAL);
	cr_assert_eq(tdm_host_register(e.gpu, NULL, 512), -EINVAL);
	cr_assert_eq(tdm_host_register(e.gpu, heap, 0), -EINVAL);
	cr_assert_eq(tdm_host_unregister(NULL, heap), -EINVAL);
	cr_assert_eq(tdm_host_unregister(e.gpu, NULL), -EINVAL);
	/* Both backends register (CUDA rounds the range out to whole pages). */
	cr_assert_eq(tdm_host_register(e.gpu, heap, 512), 0);
	if (backend == TDM_BACKEND_SIM) {
		/* As CUDA answers: an overlapping range, and a pointer never registered. */
		cr_assert_eq(tdm_host_register(e.gpu, heap + 256, 256), -EEXIST);
		cr_assert_eq(tdm_host_unregister(e.gpu, heap + 256), -EINVAL);
	}
	cr_assert_eq(tdm_host_unregister(e.gpu, heap), 0);
	if (backend == TDM_BACKEND_SIM)
		cr_assert_eq(tdm_host_unregister(e.gpu, heap), -EINVAL, "unregistered twice");
	free(heap);
	env_close(&e);
}

Test(pinned_errors, a_layer_without_a_backend_has_no_pool)
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_gpu *gpu;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_NONE;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), 0);
	void *p = NULL;
	char buf[64];
	tdm_pinned_stats s;
	cr_assert_eq(tdm_pinned_alloc(gpu, 64, &p), -ENODEV);
	cr_assert_eq(tdm_pinned_free(gpu, buf), -ENODEV);
	cr_assert_eq(tdm_pinned_stats_get(gpu, &s), -ENODEV);
	cr_assert_eq(tdm_host_register(gpu, buf, sizeof(buf)), -ENODEV);
	cr_assert_eq(tdm_host_unregister(gpu, buf), -ENODEV);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	tdm_test_destroy(ex);
}

/* The defaults on the simulator, for the tests that change a field and create the layer. */
static tdm_gpu_config sim_config(void)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	return g;
}

Test(pinned_errors, a_chunk_size_past_64_gib_is_refused)
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_gpu *gpu = NULL;
	tdm_gpu_config g = sim_config();
	g.pinned_chunk_bytes = (size_t)1 << 40;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	g.backend = TDM_BACKEND_NONE; /* no pool then, but the value is refused all the same */
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	tdm_test_destroy(ex);
}

/* A cap smaller than the pool's 64 KiB page could hold no block at all (every allocation said
 * -ENOMEM): refused at create; 64 KiB itself serves small blocks. */
Test(pinned_errors, a_cap_below_64_kib_is_refused)
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_gpu *gpu = NULL;
	tdm_gpu_config g = sim_config();
	g.pinned_cap_bytes = 1;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	g.pinned_cap_bytes = 64 * KIB - 1;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	g.pinned_cap_bytes = 64 * KIB;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), 0);
	void *p;
	cr_assert_eq(tdm_pinned_alloc(gpu, 4096, &p), 0);
	cr_assert_eq(tdm_pinned_free(gpu, p), 0);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	tdm_test_destroy(ex);
}

/* Either destroy may come first: between the two, the pool's calls still work and read nothing
 * of the executor (the stats read its worker count, a use-after-free under ASan before). */
Test(pinned_errors, the_pool_works_between_the_executors_destroy_and_the_layers)
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_gpu *gpu = NULL;
	tdm_gpu_config g = sim_config();
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), 0);
	void *p;
	cr_assert_eq(tdm_pinned_alloc(gpu, 4096, &p), 0);
	tdm_test_destroy(ex);
	tdm_pinned_stats s;
	cr_assert_eq(tdm_pinned_stats_get(gpu, &s), 0);
	cr_assert_eq(s.bytes_in_use, 4096);
	cr_assert_eq(tdm_pinned_free(gpu, p), 0);
	cr_assert_eq(tdm_pinned_stats_get(gpu, &s), 0);
	cr_assert_eq(s.bytes_in_use, 0);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
}

/* ---- every behaviour on both backends ---- */

#define PINNED_TESTS(suite, backend)                                                               \
	TDM_TEST_SUITE(suite);                                                                     \
	Test(suite, reuse_after_warm_up_pins_nothing_more, .timeout = TDM_TEST_TIMEOUT(60))        \
	{                                                                                          \
		reuse_after_warm_up_pins_nothing_more(backend, false);                             \
	}                                                                                          \
	Test(suite, reuse_after_warm_up_pins_nothing_more_on_a_worker,                             \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		reuse_after_warm_up_pins_nothing_more(backend, true);                              \
	}                                                                                          \
	Test(suite, allocations_past_the_cap_fail_until_blocks_are_freed,                          \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		allocations_past_the_cap_fail_until_blocks_are_freed(backend, false);              \
	}                                                                                          \
	Test(suite, allocations_past_the_cap_fail_until_blocks_are_freed_on_a_worker,              \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		allocations_past_the_cap_fail_until_blocks_are_freed(backend, true);               \
	}                                                                                          \
	Test(suite, blocks_freed_on_other_threads_return_to_the_pool,                              \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		blocks_freed_on_other_threads_return_to_the_pool(backend);                         \
	}                                                                                          \
	Test(suite, blocks_hold_the_requested_bytes_aligned_to_256,                                \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		blocks_hold_the_requested_bytes_aligned_to_256(backend, false);                    \
	}                                                                                          \
	Test(suite, blocks_hold_the_requested_bytes_aligned_to_256_on_a_worker,                    \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		blocks_hold_the_requested_bytes_aligned_to_256(backend, true);                     \
	}                                                                                          \
	Test(suite, dedicated_blocks_are_kept_for_the_next_large_request,                          \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		dedicated_blocks_are_kept_for_the_next_large_request(backend);                     \
	}                                                                                          \
	Test(suite, pool_memory_counts_as_pinned, .timeout = TDM_TEST_TIMEOUT(60))                 \
	{                                                                                          \
		pool_memory_counts_as_pinned(backend);                                             \
	}                                                                                          \
	Test(suite, high_water_is_the_largest_in_use, .timeout = TDM_TEST_TIMEOUT(60))             \
	{                                                                                          \
		high_water_is_the_largest_in_use(backend, false);                                  \
	}                                                                                          \
	Test(suite, high_water_is_the_largest_in_use_on_a_worker, .timeout = TDM_TEST_TIMEOUT(60)) \
	{                                                                                          \
		high_water_is_the_largest_in_use(backend, true);                                   \
	}                                                                                          \
	Test(suite, high_water_holds_when_workers_allocate_and_others_free,                        \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		high_water_holds_when_workers_allocate_and_others_free(backend);                   \
	}                                                                                          \
	Test(suite, high_water_counts_a_large_block_a_worker_frees,                                \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		high_water_counts_a_large_block_a_worker_frees(backend);                           \
	}                                                                                          \
	Test(suite, concurrent_alloc_and_free_keep_the_counts_exact,                               \
	     .timeout = TDM_TEST_TIMEOUT(60))                                                      \
	{                                                                                          \
		concurrent_alloc_and_free_keep_the_counts_exact(backend);                          \
	}                                                                                          \
	Test(suite, destroy_frees_blocks_still_handed_out, .timeout = TDM_TEST_TIMEOUT(60))        \
	{                                                                                          \
		destroy_frees_blocks_still_handed_out(backend);                                    \
	}                                                                                          \
	Test(suite, bad_arguments_get_their_documented_errors, .timeout = TDM_TEST_TIMEOUT(60))    \
	{                                                                                          \
		bad_arguments_get_their_documented_errors(backend);                                \
	}

/*
 * A double free of a dedicated block racing the drop of its spare. The free looks the block's
 * chunk up without a lock, and the chunk of a block already freed is a spare, which another
 * thread's allocation may drop (its memory back to the backend) between that lookup and the
 * free's check under the pool's lock. The header of a dropped chunk stays readable (pool->dead),
 * so the free is refused; before, it read the freed header: ThreadSanitizer reports that read
 * against the free within a few rounds, AddressSanitizer only when the read lands after the free.
 *
 * Each round makes the drop happen while the test double-frees: the other thread cycles through
 * five sizes of dedicated block, none of which a spare of another size (or the test's 80 KiB)
 * can serve (a spare serves requests from half its size to its own), so each of its allocations
 * drops the oldest spares beyond the three the pool keeps, and the fourth after the test's free
 * drops the test's spare. The test double-frees until the other thread has made six more, then
 * allocates again. What is checked in every build: each double free says -EINVAL, or 0 where the
 * backend gave a new chunk the dropped one's address (the double free then frees the other
 * thread's block, which no allocator can tell from a valid free: that thread's own free is
 * refused then), and nothing stays counted in use.
 */
struct churn {
	tdm_gpu *gpu;
	atomic_int stop;
	atomic_uint made; /* allocations made */
};

static void *churn_dedicated(void *arg)
{
	struct churn *c = arg;
	/* Each over twice the last, and the smallest over twice the test's block. */
	static const size_t kib[] = {168, 340, 700, 1420, 2900};
	while (!atomic_load(&c->stop))
		for (unsigned i = 0; i < sizeof(kib) / sizeof(kib[0]); i++) {
			void *q;
			if (tdm_pinned_alloc(c->gpu, kib[i] * KIB, &q) == 0)
				(void)tdm_pinned_free(c->gpu, q);
			/* Release: pairs with the test thread's acquire loads of made. */
			atomic_fetch_add_explicit(&c->made, 1, memory_order_release);
		}
	return NULL;
}

Test(pinned_errors, a_double_free_racing_the_drop_of_its_spare_is_refused,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	env_open(&e, TDM_BACKEND_SIM, 1, 64 * KIB, 0); /* blocks past 64 KiB are dedicated */
	struct churn c = {.gpu = e.gpu};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, churn_dedicated, &c), 0);
	unsigned rounds = (unsigned)tdm_test_size(2000, 200), frees = 0;
	for (unsigned it = 0; it < rounds; it++) {
		void *p;
		cr_assert_eq(tdm_pinned_alloc(e.gpu, 80 * KIB, &p), 0);
		cr_assert_eq(tdm_pinned_free(e.gpu, p), 0);
		unsigned until = atomic_load_explicit(&c.made, memory_order_acquire) + 6;
		while (atomic_load_explicit(&c.made, memory_order_acquire) < until) {
			int rc = tdm_pinned_free(e.gpu, p);
			cr_assert(rc == -EINVAL || rc == 0, "double free: %d", rc);
			frees++;
			sched_yield(); /* the other thread's turn, on a single core too */
		}
	}
	atomic_store(&c.stop, 1);
	cr_assert_eq(pthread_join(t, NULL), 0);
	tdm_pinned_stats s = stats(&e);
	cr_assert_eq(s.bytes_in_use, 0, "%llu bytes still in use after %u double frees",
	             (unsigned long long)s.bytes_in_use, frees);
	env_close(&e);
}

PINNED_TESTS(pinned_sim, TDM_BACKEND_SIM)
#ifndef TANDEM_TEST_NO_CUDA
PINNED_TESTS(pinned_cuda, TDM_BACKEND_CUDA)
#endif
