// SPDX-License-Identifier: MIT
/*
 * Memory through the GPU layer: peer copies between devices; pageable host memory staged through
 * the pinned pool (or refused), in stream order even through one buffer, and the staging given
 * back when the device dies; stream-ordered allocation freed after its last use; managed memory
 * refused past the device's free memory, prefetched and advised. On the simulator, and on CUDA
 * where a device exists (the tests named _cuda; skipped elsewhere, left out of builds without
 * CUDA). Tasks record what they saw; the test thread asserts.
 */
#include "gpu_env.h"

#include <stdlib.h>
#include <string.h>

TDM_TEST_SUITE(memory);

struct peer_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *d0, *d1;
	int rc_in, rc_peer, rc_out, result;
	struct seen sn;
};

static int peer_task(tdm_task *t, void *arg)
{
	struct peer_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	c->rc_in = tdm_memcpy_async(c->s, c->d0, c->host, LEN * sizeof(int), TDM_COPY_H2D);
	c->rc_peer = tdm_memcpy_peer_async(c->s, c->d1, 1, c->d0, 0, LEN * sizeof(int));
	memset(c->host + LEN, 0, LEN * sizeof(int));
	c->rc_out = tdm_memcpy_async(c->s, c->host + LEN, c->d1, LEN * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

Test(memory, peer_copy_moves_data_between_devices)
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	struct peer_state c = {.gpu = e.gpu, .rc_in = 1, .rc_peer = 1, .rc_out = 1, .result = 1};
	cr_assert_eq(tdm_host_alloc(e.gpu, 2 * LEN * sizeof(int), (void **)&c.host), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&c.d0), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 1, LEN * sizeof(int), (void **)&c.d1), 0);
	for (int i = 0; i < LEN; i++)
		c.host[i] = 3 * i + 1;
	cr_assert_eq(run_one(&e, peer_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc_in, 0, "copy to device 0: %s", tdm_strerror(c.rc_in));
	cr_assert_eq(c.rc_peer, 0, "peer copy to device 1: %s", tdm_strerror(c.rc_peer));
	cr_assert_eq(c.rc_out, 0, "copy from device 1: %s", tdm_strerror(c.rc_out));
	cr_assert_eq(c.result, 0, "the await: %s", tdm_strerror(c.result));
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], 3 * i + 1);
	tdm_device_free(e.gpu, 0, c.d0);
	tdm_device_free(e.gpu, 1, c.d1);
	tdm_host_free(e.gpu, c.host);
	env_close(&e);
}

struct pageable_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *in, *out, *dev; /* in and out: plain malloc, pageable */
	int rc_in, rc_out, res, after;
	struct seen sn;
};

static int pageable_task(tdm_task *t, void *arg)
{
	struct pageable_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	c->rc_in = tdm_memcpy_async(c->s, c->dev, c->in, LEN * sizeof(int), TDM_COPY_H2D);
	c->rc_out = tdm_memcpy_async(c->s, c->out, c->dev, LEN * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void pageable_copies(tdm_backend backend, int policy)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = backend;
	g.pageable = policy;
	if (!env_open_cfg(&e, 2, &g)) {
		cr_assert_neq(backend, TDM_BACKEND_SIM, "the simulator always opens");
		cr_skip_test("no device for this backend");
	}
	struct pageable_state st = {.gpu = e.gpu, .rc_in = 1, .rc_out = 1};
	st.in = malloc(LEN * sizeof(int));
	st.out = calloc(LEN, sizeof(int));
	cr_assert_not_null(st.in);
	cr_assert_not_null(st.out);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&st.dev), 0);
	for (int i = 0; i < LEN; i++)
		st.in[i] = i ^ 0x5a5a;
	cr_assert_eq(run_one(&e, pageable_task, &st), 0);
	ASSERT_SEEN(&st.sn);
	if (policy == TDM_PAGEABLE_STAGE) {
		cr_assert_eq(st.rc_in, 0);
		cr_assert_eq(st.rc_out, 0);
		for (int i = 0; i < LEN; i++)
			cr_assert_eq(st.out[i], i ^ 0x5a5a, "staged round trip at %d", i);
		tdm_pinned_stats ps;
		cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), 0);
		cr_assert_eq(ps.bytes_in_use, 0, "staging blocks went back to the pool");
	} else {
		cr_assert_eq(st.rc_in, -EFAULT);
		cr_assert_eq(st.rc_out, -EFAULT);
	}
	tdm_device_free(e.gpu, 0, st.dev);
	free(st.in);
	free(st.out);
	env_close(&e);
}

Test(memory, pageable_copies_are_staged_through_the_pinned_pool, .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_copies(TDM_BACKEND_SIM, TDM_PAGEABLE_STAGE);
}

Test(memory, pageable_copies_are_refused_when_asked, .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_copies(TDM_BACKEND_SIM, TDM_PAGEABLE_REFUSE);
}

/*
 * Data going round through one pageable host buffer on one stream: src to device buffer a, a to
 * h, the last `tail` ints of h to device buffer b, b to back; one await. Staged, the copy into h
 * happens in a host function on the stream, and the copy from h must read h after it. It read h
 * at the call before, and sent what h held then: zeros.
 *   - queued: the copies queue behind 2 ms of work (h is still to be written at the call);
 *   - mid-write: 32 MiB, and the copy from h is made once a quarter of h has changed (the host
 *     function is writing it: its ticket was taken off the list before it wrote, so the copy
 *     found nothing pending). Not under ThreadSanitizer: it reads h during the write, on
 *     purpose. Not glibc's first bytes either: its memcpy stores them last.
 *   - dead: a sticky fault ahead of the copies; the staged blocks, the in-order one among them,
 *     go back to the pool with the device's failure.
 */
enum round_kind { ROUND_QUEUED, ROUND_MID_WRITE, ROUND_DEAD };

struct round_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	enum round_kind kind;
	size_t n, tail;
	int *src, *a, *h, *b, *back;
	int rc[4], result, saw_write;
	struct seen sn;
};

static int round_task(tdm_task *t, void *arg)
{
	struct round_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	c->rc[0] = tdm_memcpy_async(c->s, c->a, c->src, c->n * sizeof(int), TDM_COPY_H2D);
	if (c->kind != ROUND_MID_WRITE)
		SEE(&c->sn, tdm_launch_spin(c->s, 2000000));
	if (c->kind == ROUND_DEAD)
		SEE(&c->sn, tdm_sim_inject(c->s, TDM_SIM_FAULT_STICKY));
	c->rc[1] = tdm_memcpy_async(c->s, c->h, c->a, c->n * sizeof(int), TDM_COPY_D2H);
	/* Until the host function's write has reached a quarter of h (no deadline: a write that
	 * never comes is a hang, which the test's timeout fails). */
	while (c->kind == ROUND_MID_WRITE && !c->saw_write)
		c->saw_write = __atomic_load_n(&c->h[c->n / 4], __ATOMIC_RELAXED) != 0;
	c->rc[2] = tdm_memcpy_async(c->s, c->b, c->h + (c->n - c->tail), c->tail * sizeof(int),
	                            TDM_COPY_H2D);
	c->rc[3] = tdm_memcpy_async(c->s, c->back, c->b, c->tail * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	(void)tdm_stream_release(c->s); /* a dead device may refuse */
	TDM_END(t);
}

static void pageable_round_trip(tdm_backend backend, enum round_kind kind, size_t n, size_t tail)
{
	struct env e;
	if (!env_open(&e, backend, TDM_COMPLETION_AUTO, 2)) {
		cr_assert_neq(backend, TDM_BACKEND_SIM, "the simulator always opens");
		cr_skip_test("no device for this backend");
	}
	struct round_state c = {
	    .gpu = e.gpu, .kind = kind, .n = n, .tail = tail, .rc = {1, 1, 1, 1}, .result = 1};
	c.src = malloc(n * sizeof(int));
	c.h = calloc(n, sizeof(int));
	c.back = calloc(tail, sizeof(int));
	cr_assert(c.src != NULL && c.h != NULL && c.back != NULL);
	for (size_t i = 0; i < n; i++)
		c.src[i] = (int)i + 1;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, n * sizeof(int), (void **)&c.a), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, tail * sizeof(int), (void **)&c.b), 0);
	cr_assert_eq(run_one(&e, round_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	tdm_pinned_stats ps;
	cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), 0);
	cr_assert_eq(ps.bytes_in_use, 0, "staging blocks went back to the pool");
	if (kind == ROUND_DEAD) {
		cr_assert_eq(c.result, -EIO, "the await: %s", tdm_strerror(c.result));
	} else {
		for (int k = 0; k < 4; k++)
			cr_assert_eq(c.rc[k], 0, "copy %d: %s", k, tdm_strerror(c.rc[k]));
		cr_assert_eq(c.result, 0, "the await: %s", tdm_strerror(c.result));
		cr_assert(kind != ROUND_MID_WRITE || c.saw_write, "the write into h was seen");
		size_t wrong = 0;
		for (size_t i = 0; i < tail; i++)
			wrong += c.back[i] != c.src[n - tail + i];
		cr_assert_eq(wrong, 0, "%zu of %zu ints sent before the pending write reached them",
		             wrong, tail);
	}
	tdm_device_free(e.gpu, 0, c.a);
	tdm_device_free(e.gpu, 0, c.b);
	free(c.src);
	free(c.h);
	free(c.back);
	env_close(&e);
}

Test(memory, pageable_round_trip_through_one_buffer_keeps_stream_order,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_round_trip(TDM_BACKEND_SIM, ROUND_QUEUED, LEN, LEN);
}

Test(memory, a_copy_from_a_buffer_being_written_waits_for_the_write,
     .timeout = TDM_TEST_TIMEOUT(60))
{
#ifdef TDM_TEST_TSAN
	cr_skip_test("reads the buffer while the host function writes it, on purpose");
#endif
	pageable_round_trip(TDM_BACKEND_SIM, ROUND_MID_WRITE, (size_t)8 << 20, (size_t)256 << 10);
}

Test(memory, a_dead_devices_round_trip_gives_its_blocks_back, .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_round_trip(TDM_BACKEND_SIM, ROUND_DEAD, LEN, LEN);
}

#ifndef TANDEM_TEST_NO_CUDA
Test(memory, pageable_round_trip_through_one_buffer_keeps_stream_order_cuda,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_round_trip(TDM_BACKEND_CUDA, ROUND_QUEUED, LEN, LEN);
}

/* On CUDA, pageable is what cudaPointerGetAttributes calls unregistered host memory, and the
 * staged copy's pinned blocks come back through host functions (cudaLaunchHostFunc). */
Test(memory, pageable_copies_are_staged_through_the_pinned_pool_cuda,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_copies(TDM_BACKEND_CUDA, TDM_PAGEABLE_STAGE);
}

Test(memory, pageable_copies_are_refused_when_asked_cuda, .timeout = TDM_TEST_TIMEOUT(30))
{
	pageable_copies(TDM_BACKEND_CUDA, TDM_PAGEABLE_REFUSE);
}
#endif

/*
 * A device that dies with staged copies queued skips their host functions, as CUDA does after a
 * context error, so nothing else would give their pinned blocks back: the device's failure does,
 * and the pool (its cap shared by every device) has them again.
 */
static int dead_staging_task(tdm_task *t, void *arg)
{
	struct pageable_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	/* 200 ms of work ahead: the copies and their host functions wait in the queue (a task
	 * held off its CPU longer than that sees its second copy refused, and still checks that
	 * the first one's block came back). */
	SEE(&c->sn, tdm_launch_spin(c->s, 200000000));
	SEE(&c->sn, tdm_sim_inject(c->s, TDM_SIM_FAULT_STICKY));
	c->rc_in = tdm_memcpy_async(c->s, c->dev, c->in, LEN * sizeof(int), TDM_COPY_H2D);
	c->rc_out = tdm_memcpy_async(c->s, c->out, c->dev, LEN * sizeof(int), TDM_COPY_D2H);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->res = tdm_task_result(t);
	/* Refused by the dead device, whoever noticed the death first. */
	c->after = tdm_launch_spin(c->s, 1000);
	tdm_stream_release(c->s);
	TDM_END(t);
}

Test(memory, a_dead_devices_staged_copies_give_their_blocks_back, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	struct pageable_state st = {.gpu = e.gpu, .rc_in = 1, .rc_out = 1, .res = 1};
	st.in = calloc(LEN, sizeof(int));
	st.out = calloc(LEN, sizeof(int));
	cr_assert_not_null(st.in);
	cr_assert_not_null(st.out);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), (void **)&st.dev), 0);
	cr_assert_eq(run_one(&e, dead_staging_task, &st), 0);
	ASSERT_SEEN(&st.sn);
	cr_assert(st.rc_in == 0 || st.rc_in == -EIO, "the first copy: %d", st.rc_in);
	cr_assert(st.rc_out == 0 || st.rc_out == -EIO, "the second copy: %d", st.rc_out);
	cr_assert_eq(st.res, -EIO);
	cr_assert_eq(st.after, -EIO);
	tdm_pinned_stats ps;
	cr_assert_eq(tdm_pinned_stats_get(e.gpu, &ps), 0);
	cr_assert_eq(ps.bytes_in_use, 0, "%llu bytes of staging kept by the dead device",
	             (unsigned long long)ps.bytes_in_use);
	(void)tdm_device_free(e.gpu, 0, st.dev); /* the dead device may refuse: destroy frees it */
	free(st.in);
	free(st.out);
	env_close(&e);
}

struct ordered_free_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *dev;
	int rc_alloc, rc_free;
	struct seen sn; /* the lease, and the uses between the two */
};

/* Allocates on the stream, uses the memory, frees it right after the last use, then awaits. */
static int ordered_free_task(tdm_task *t, void *arg)
{
	struct ordered_free_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, 0);
	c->rc_alloc = tdm_device_alloc_async(c->s, LEN * sizeof(int), (void **)&c->dev);
	if (c->rc_alloc == 0) {
		SEE(&c->sn,
		    tdm_memcpy_async(c->s, c->dev, c->host, LEN * sizeof(int), TDM_COPY_H2D));
		/* the free must wait for this and the copy */
		SEE(&c->sn, tdm_launch_spin(c->s, 5000000));
		SEE(&c->sn,
		    tdm_memcpy_async(c->s, c->host + LEN, c->dev, LEN * sizeof(int), TDM_COPY_D2H));
		c->rc_free = tdm_device_free_async(c->s, c->dev);
	}
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	tdm_stream_release(c->s);
	TDM_END(t);
}

static void stream_ordered_free_after_last_use(struct env *e)
{
	struct ordered_free_state c = {.gpu = e->gpu, .rc_alloc = 1, .rc_free = 1};
	cr_assert_eq(tdm_host_alloc(e->gpu, 2 * LEN * sizeof(int), (void **)&c.host), 0);
	for (int i = 0; i < LEN; i++) {
		c.host[i] = 7 * i;
		c.host[LEN + i] = -1;
	}
	cr_assert_eq(run_one(e, ordered_free_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc_alloc, 0);
	cr_assert_eq(c.rc_free, 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], 7 * i, "read back before the free ran, at %d", i);
	tdm_host_free(e->gpu, c.host);
}

Test(memory, stream_ordered_free_after_last_use_sim, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	stream_ordered_free_after_last_use(&e);
	env_close(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
Test(memory, stream_ordered_free_after_last_use_cuda, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		cr_skip_test("no CUDA device");
	stream_ordered_free_after_last_use(&e);
	env_close(&e);
}
#endif

/*
 * Managed memory is refused past the device's free memory, exact at the boundary: with all of
 * the simulated device but 1 MiB held (device memory in 1 GiB blocks, which the host reserves but
 * never touches), 1 MiB + 1 is refused, 1 MiB granted, and that managed block counts against the
 * device. (A request far past the device proves nothing: the host's allocator refuses it as
 * well.) Skipped under the sanitizers and valgrind, whose allocators touch shadow memory for
 * every reserved byte.
 */
#define HOLD_BLOCK ((size_t)1 << 30)
#define HOLD_MIB ((size_t)1 << 20)

Test(memory, managed_memory_one_byte_past_free_memory_is_refused, .timeout = TDM_TEST_TIMEOUT(60))
{
	if (TDM_TEST_SANITIZED || TDM_TEST_UNDER_VALGRIND())
		cr_skip_test("reserves the simulated device's 80 GiB of address space");
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 1));
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(e.gpu, 0, &info), 0);
	cr_assert_gt(info.memory_bytes, 2 * HOLD_MIB, "the device's memory: %llu bytes",
	             (unsigned long long)info.memory_bytes);
	size_t hold = (size_t)info.memory_bytes - HOLD_MIB, nblocks = 0;
	void *blocks[256];
	while (hold > 0) {
		cr_assert_lt(nblocks, sizeof(blocks) / sizeof(blocks[0]), "a device of %llu bytes",
		             (unsigned long long)info.memory_bytes);
		size_t n = hold < HOLD_BLOCK ? hold : HOLD_BLOCK;
		int rc = tdm_device_alloc(e.gpu, 0, n, &blocks[nblocks]);
		if (rc == -ENOMEM && nblocks > 0) { /* the host would not reserve more */
			while (nblocks > 0)
				tdm_device_free(e.gpu, 0, blocks[--nblocks]);
			env_close(&e);
			cr_skip_test("the host reserved only %llu bytes of address space",
			             (unsigned long long)(info.memory_bytes - HOLD_MIB - hold));
		}
		cr_assert_eq(rc, 0, "holding device memory: %s", tdm_strerror(rc));
		nblocks++;
		hold -= n;
	}
	void *p = NULL, *q = NULL;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, HOLD_MIB + 1, &p), -ENOMEM,
	             "one byte past free memory");
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, HOLD_MIB, &p), 0, "all of free memory");
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, 1, &q), -ENOMEM,
	             "the managed block counts against the device");
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, HOLD_MIB, &p), 0, "freed, it is free again");
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	while (nblocks > 0)
		tdm_device_free(e.gpu, 0, blocks[--nblocks]);
	env_close(&e);
}

struct managed_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	int *host, *managed;
	int peer; /* the device the memory visits between device 0 and the host */
	int rc_to_dev, rc_to_peer, rc_to_host, result;
	struct seen sn;
};

/* Managed memory moved about by prefetches ordered between copies on one stream: to device 0,
 * filled from the host, to the peer device, back to the host (device < 0), copied out; awaited
 * once. */
static int managed_task(tdm_task *t, void *arg)
{
	struct managed_state *c = arg;
	TDM_BEGIN(t);
	LEASE_OR_END(c, TDM_STREAM_EXCLUSIVE);
	c->rc_to_dev = tdm_mem_prefetch(c->s, c->managed, LEN * sizeof(int), 0);
	SEE(&c->sn, tdm_memcpy_async(c->s, c->managed, c->host, LEN * sizeof(int), TDM_COPY_H2D));
	c->rc_to_peer = tdm_mem_prefetch(c->s, c->managed, LEN * sizeof(int), c->peer);
	c->rc_to_host = tdm_mem_prefetch(c->s, c->managed, LEN * sizeof(int), -1);
	SEE(&c->sn,
	    tdm_memcpy_async(c->s, c->host + LEN, c->managed, LEN * sizeof(int), TDM_COPY_D2H));
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	c->result = tdm_task_result(t);
	SEE(&c->sn, tdm_stream_release(c->s));
	TDM_END(t);
}

/* Advice of each kind, for a device and for the host, then prefetches to device 0, to the peer
 * and to the host between copies: all accepted, and the data goes through. */
static void managed_memory_is_prefetched_and_advised(struct env *e, int peer)
{
	const size_t bytes = LEN * sizeof(int);
	struct managed_state c = {.gpu = e->gpu,
	                          .peer = peer,
	                          .rc_to_dev = 1,
	                          .rc_to_peer = 1,
	                          .rc_to_host = 1,
	                          .result = 1};
	cr_assert_eq(tdm_managed_alloc(e->gpu, 0, bytes, (void **)&c.managed), 0);
	cr_assert_eq(tdm_host_alloc(e->gpu, 2 * bytes, (void **)&c.host), 0);
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_READ_MOSTLY, 0), 0);
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_PREFERRED_LOCATION, peer),
	             0);
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_PREFERRED_LOCATION, -1), 0,
	             "device < 0 is the host");
	cr_assert_eq(tdm_mem_advise(e->gpu, c.managed, bytes, TDM_ADVISE_ACCESSED_BY, peer), 0);
	for (int i = 0; i < LEN; i++) {
		c.host[i] = 5 * i + 3;
		c.host[LEN + i] = -1;
	}
	cr_assert_eq(run_one(e, managed_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.rc_to_dev, 0, "prefetch to device 0: %s", tdm_strerror(c.rc_to_dev));
	cr_assert_eq(c.rc_to_peer, 0, "prefetch to device %d: %s", peer,
	             tdm_strerror(c.rc_to_peer));
	cr_assert_eq(c.rc_to_host, 0, "prefetch to the host: %s", tdm_strerror(c.rc_to_host));
	cr_assert_eq(c.result, 0, "the await: %s", tdm_strerror(c.result));
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[LEN + i], 5 * i + 3, "managed memory round trip at %d", i);
	cr_assert_eq(tdm_managed_free(e->gpu, c.managed), 0);
	tdm_host_free(e->gpu, c.host);
}

Test(memory, managed_memory_is_prefetched_and_advised, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	managed_memory_is_prefetched_and_advised(&e, 1);
	env_close(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
/*
 * The same on CUDA (cudaMallocManaged, cudaMemAdvise, cudaMemPrefetchAsync under the calls),
 * with the second device as the peer where there is one. Before it, the refusal: CUDA itself
 * grants managed memory past the device's size (it oversubscribes; on the H200 with CUDA 13.0,
 * cudaMallocManaged of the device's size + 1 byte returned success), so the -ENOMEM is tandem's
 * check alone; the refused call allocates nothing.
 */
Test(memory, managed_memory_on_cuda, .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	if (!env_open(&e, TDM_BACKEND_CUDA, TDM_COMPLETION_AUTO, 2))
		cr_skip_test("no CUDA device");
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(e.gpu, 0, &info), 0);
	void *p = NULL;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, (size_t)info.memory_bytes + 1, &p), -ENOMEM,
	             "one byte past the device's %llu bytes",
	             (unsigned long long)info.memory_bytes);
	cr_assert_null(p);
	int n = tdm_gpu_device_count(e.gpu);
	cr_assert_eq(tdm_mem_advise(e.gpu, &info, sizeof info, TDM_ADVISE_READ_MOSTLY, n), -EINVAL,
	             "device %d of %d", n, n);
	managed_memory_is_prefetched_and_advised(&e, n > 1 ? 1 : 0);
	tdm_test_assert_usable(e.ex);
	env_close(&e);
}
#endif

/*
 * The documented -EINVAL of each argument (memory.c checks them before the backend, which
 * accepts a zero-sized prefetch and ignores an advice's size), and the layer goes on working:
 * the same managed memory, prefetched again, carries a copy's round trip. The sim takes any
 * memory for prefetch and advice, managed or not, so that is not refused here.
 */
Test(memory, prefetch_and_advise_refuse_bad_arguments, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	const size_t bytes = LEN * sizeof(int);
	void *p;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, bytes, &p), 0);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);

	cr_assert_eq(tdm_mem_prefetch(NULL, p, bytes, 0), -EINVAL, "no stream");
	cr_assert_eq(tdm_mem_prefetch(s, NULL, bytes, 0), -EINVAL, "no memory");
	cr_assert_eq(tdm_mem_prefetch(s, p, 0, 0), -EINVAL, "zero bytes");
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 2), -EINVAL, "device 2 of 2");
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 1000), -EINVAL, "device 1000 of 2");

	cr_assert_eq(tdm_mem_advise(NULL, p, bytes, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL, "no gpu");
	cr_assert_eq(tdm_mem_advise(e.gpu, NULL, bytes, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL,
	             "no memory");
	cr_assert_eq(tdm_mem_advise(e.gpu, p, 0, TDM_ADVISE_READ_MOSTLY, 0), -EINVAL, "zero bytes");
	cr_assert_eq(tdm_mem_advise(e.gpu, p, bytes, (tdm_mem_advice)0, 0), -EINVAL,
	             "advice below the range");
	cr_assert_eq(
	    tdm_mem_advise(e.gpu, p, bytes, (tdm_mem_advice)(TDM_ADVISE_ACCESSED_BY + 1), 0),
	    -EINVAL, "advice above the range");
	cr_assert_eq(tdm_mem_advise(e.gpu, p, bytes, TDM_ADVISE_ACCESSED_BY, 2), -EINVAL,
	             "device 2 of 2");

	/* Still usable: the refused calls left the stream and the memory as they were. */
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 0), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	struct copy_state c = {.gpu = e.gpu, .dev = p};
	cr_assert_eq(tdm_host_alloc(e.gpu, bytes, (void **)&c.host), 0);
	for (int i = 0; i < LEN; i++)
		c.host[i] = i ^ 0x3c3c;
	cr_assert_eq(run_one(&e, copy_task, &c), 0);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.steps, 2);
	cr_assert_eq(c.results[0], 0);
	cr_assert_eq(c.results[1], 0);
	for (int i = 0; i < LEN; i++)
		cr_assert_eq(c.host[i], i ^ 0x3c3c, "data at %d came back through managed memory",
		             i);
	tdm_test_assert_usable(e.ex);
	tdm_host_free(e.gpu, c.host);
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	env_close(&e);
}

/* A prefetch is an operation of its stream: once the device has failed (a sticky fault on
 * another stream), it is refused at once with -EIO, as every enqueue is. */
Test(memory, prefetch_on_a_failed_device_is_refused, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_AUTO, 2));
	const size_t bytes = LEN * sizeof(int);
	void *p;
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, bytes, &p), 0);
	tdm_stream *s;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 0), 0, "the device still works");
	struct fault_state bad = {.gpu = e.gpu, .inject = TDM_SIM_FAULT_STICKY};
	cr_assert_eq(run_one(&e, fault_task, &bad), 0);
	ASSERT_SEEN(&bad.sn);
	cr_assert_eq(bad.rc, -EIO);
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, 0), -EIO);
	cr_assert_eq(tdm_mem_prefetch(s, p, bytes, -1), -EIO);
	(void)tdm_stream_release(s); /* the dead device may refuse */
	cr_assert_eq(tdm_managed_free(e.gpu, p), 0);
	env_close(&e);
}
