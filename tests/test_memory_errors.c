// SPDX-License-Identifier: MIT
/*
 * Memory misuse, on the simulator (two devices), answered as CUDA answers it rather than by a
 * crash: frees of pointers never allocated, freed twice, or named with the wrong device are
 * -EINVAL and free nothing; a copy whose device side leaves its allocation is refused with
 * -EINVAL; device work that reaches memory outside every allocation when it runs (a kernel past
 * the end of its buffers, a copy from a block freed meanwhile) fails the device, as an illegal
 * address does, and the device's awaits resume with -EIO. After each misuse the runtime still
 * works: memory goes through a stream and back, other devices and a new GPU layer work.
 */
#include "common.h"
#include "gpu_env.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h" /* the sim's ops, for a stream held up by a host function */
#include "tandem.h"
#include "tandem_gpu.h"

TDM_TEST_SUITE(memory_errors);

static tdm_gpu *open_gpu(tdm_executor *ex)
{
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.sim_devices = 2;
	tdm_gpu *gpu = NULL;
	int rc = tdm_gpu_create(&gpu, ex, &g);
	cr_assert_eq(rc, 0, "tdm_gpu_create: %s", tdm_strerror(rc));
	return gpu;
}

static void close_both_usable(struct env *e)
{
	assert_device_usable(e->ex, e->gpu, 0);
	assert_device_usable(e->ex, e->gpu, 1);
	env_close(e);
}

/* ---- frees ---- */

Test(memory_errors, device_free_of_a_pointer_never_allocated_is_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	char *heap = malloc(4096);
	cr_assert_not_null(heap);
	void *pinned, *dev;
	cr_assert_eq(tdm_host_alloc(e.gpu, 4096, &pinned), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, heap + 512), -EINVAL, "malloc'd memory");
	cr_assert_eq(tdm_device_free(e.gpu, 0, pinned), -EINVAL, "pinned host memory");
	cr_assert_eq(tdm_device_free(e.gpu, 0, (char *)dev + 256), -EINVAL,
	             "inside an allocation, not at its start");
	/* Nothing was freed: each is still its owner's. */
	memset(heap, 1, 4096);
	free(heap);
	cr_assert_eq(tdm_host_free(e.gpu, pinned), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	close_both_usable(&e);
}

Test(memory_errors, device_free_twice_is_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	void *dev;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), -EINVAL);
	close_both_usable(&e);
}

Test(memory_errors, device_free_naming_another_device_is_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	void *dev;
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, LEN * sizeof(int), &dev), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 1, dev), -EINVAL, "device 0's memory freed as 1's");
	/* Still device 0's, and live: a copy may name it, and its own device frees it. */
	struct roundtrip c = {.gpu = e.gpu, .device = 0, .dev = dev, .result = 1};
	cr_assert_eq(tdm_host_alloc(e.gpu, 2 * LEN * sizeof(int), (void **)&c.host), 0);
	memset(c.host, 0, 2 * LEN * sizeof(int));
	tdm_test_run_one(e.ex, roundtrip_task, &c);
	ASSERT_SEEN(&c.sn);
	cr_assert_eq(c.result, 0);
	cr_assert_eq(tdm_host_free(e.gpu, c.host), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), 0);
	close_both_usable(&e);
}

Test(memory_errors, device_free_async_twice_is_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	tdm_stream *s;
	void *dev, *host;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_host_alloc(e.gpu, 4096, &host), 0);
	cr_assert_eq(tdm_device_alloc_async(s, 4096, &dev), 0);
	cr_assert_eq(tdm_memcpy_async(s, dev, host, 4096, TDM_COPY_H2D), 0);
	cr_assert_eq(tdm_device_free_async(s, dev), 0);
	cr_assert_eq(tdm_device_free_async(s, dev), -EINVAL, "its free is queued already");
	cr_assert_eq(tdm_device_free(e.gpu, 0, dev), -EINVAL, "its free is queued already");
	cr_assert_eq(tdm_memcpy_async(s, host, dev, 4096, TDM_COPY_D2H), -EINVAL,
	             "work enqueued after the free names it");
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0,
	             "the work before the free, and the free, ran");
	cr_assert_eq(tdm_device_free_async(s, dev), -EINVAL, "freed already");
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_host_free(e.gpu, host), 0);
	close_both_usable(&e);
}

Test(memory_errors, managed_free_of_memory_not_allocated_is_einval, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	char *heap = malloc(4096);
	cr_assert_not_null(heap);
	void *managed;
	cr_assert_eq(tdm_managed_free(e.gpu, heap + 512), -EINVAL, "malloc'd memory");
	memset(heap, 1, 4096);
	free(heap);
	cr_assert_eq(tdm_managed_alloc(e.gpu, 1, 4096, &managed), 0);
	cr_assert_eq(tdm_managed_free(e.gpu, managed), 0);
	cr_assert_eq(tdm_managed_free(e.gpu, managed), -EINVAL, "freed already");
	close_both_usable(&e);
}

Test(memory_errors, host_free_of_memory_host_alloc_did_not_give_is_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	char *heap = malloc(8192);
	cr_assert_not_null(heap);
	void *pinned, *block;
	cr_assert_eq(tdm_host_free(e.gpu, heap), -EINVAL, "malloc'd memory");
	cr_assert_eq(tdm_host_register(e.gpu, heap, 8192), 0);
	cr_assert_eq(tdm_host_free(e.gpu, heap), -EINVAL, "a registered buffer");
	cr_assert_eq(tdm_host_unregister(e.gpu, heap), 0, "still registered");
	memset(heap, 1, 8192);
	free(heap);
	cr_assert_eq(tdm_pinned_alloc(e.gpu, 4096, &block), 0);
	cr_assert_eq(tdm_host_free(e.gpu, block), -EINVAL, "a block of the pinned pool");
	cr_assert_eq(tdm_pinned_free(e.gpu, block), 0);
	cr_assert_eq(tdm_host_alloc(e.gpu, 4096, &pinned), 0);
	cr_assert_eq(tdm_host_free(e.gpu, pinned), 0);
	cr_assert_eq(tdm_host_free(e.gpu, pinned), -EINVAL, "freed already");
	close_both_usable(&e);
}

/* ---- copies ---- */

#define BIG ((size_t)256 << 20) /* far past the small allocations below */

Test(memory_errors, a_copy_past_the_end_of_its_allocations_is_einval,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	tdm_stream *s;
	void *a, *b, *host;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &a), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &b), 0);
	cr_assert_eq(tdm_host_alloc(e.gpu, 8192, &host), 0);
	cr_assert_eq(tdm_memcpy_async(s, b, a, BIG, TDM_COPY_D2D), -EINVAL);
	cr_assert_eq(tdm_memcpy_async(s, b, a, 4097, TDM_COPY_D2D), -EINVAL, "one byte past");
	cr_assert_eq(tdm_memcpy_async(s, (char *)b + 1, a, 4096, TDM_COPY_D2D), -EINVAL,
	             "one byte past the end of dst");
	cr_assert_eq(tdm_memcpy_async(s, a, host, 8192, TDM_COPY_H2D), -EINVAL);
	cr_assert_eq(tdm_memcpy_async(s, host, a, 8192, TDM_COPY_D2H), -EINVAL);
	char heap[64];
	cr_assert_eq(tdm_memcpy_async(s, a, heap, sizeof(heap), TDM_COPY_D2D), -EINVAL,
	             "a D2D copy from memory of no device");
	/* The device is fine: copies within bounds run. */
	cr_assert_eq(tdm_memcpy_async(s, b, a, 4096, TDM_COPY_D2D), 0);
	cr_assert_eq(tdm_test_await_stream(e.ex, s), 0);
	cr_assert_eq(tdm_stream_release(s), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, a), 0);
	cr_assert_eq(tdm_device_free(e.gpu, 0, b), 0);
	cr_assert_eq(tdm_host_free(e.gpu, host), 0);
	close_both_usable(&e);
}

/* ---- device work out of bounds: the device fails ---- */

/* After device 0 failed: its work fails, device 1 goes on, and a new GPU layer works. */
static void assert_only_device_0_failed(struct env *e, tdm_stream *s)
{
	cr_assert_eq(tdm_launch_spin(s, 0), -EIO, "later work on the failed device");
	cr_assert_eq(tdm_stream_release(s), 0);
	assert_device_usable(e->ex, e->gpu, 1);
	tdm_gpu *fresh = open_gpu(e->ex);
	assert_device_usable(e->ex, fresh, 0);
	cr_assert_eq(tdm_gpu_destroy(fresh), 0);
	env_close(e);
}

Test(memory_errors, a_kernel_past_its_allocation_fails_the_device, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	env_open_sim2(&e, 2);
	tdm_stream *s;
	float *y, *x;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 16 * sizeof(float), (void **)&y), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 16 * sizeof(float), (void **)&x), 0);
	cr_assert_eq(tdm_launch_scale(s, y, x, 2.0f, BIG / sizeof(float)), 0,
	             "a kernel's bounds are not checked at launch");
	cr_assert_eq(tdm_test_await_stream(e.ex, s), -EIO);
	cr_assert_eq(tdm_device_free(e.gpu, 0, y), 0, "a failed device's memory is freed");
	cr_assert_eq(tdm_device_free(e.gpu, 0, x), 0);
	assert_only_device_0_failed(&e, s);
}

/* ---- stream-ordered memory calls that find their device dead ---- */

/*
 * A sticky fault kills device 0 while nothing awaits on it, so only a call's own -EIO can tell
 * the layer. Each stream-ordered memory call that meets the dead device must mark it failed, as
 * launches and copies do: new leases on it are then -ENODEV. which: 0 alloc_async, 1 free_async,
 * 2 prefetch, 3 memcpy_peer_async.
 */
static void dead_device_seen_by(int which)
{
	struct env e;
	env_open_sim2(&e, 2);
	tdm_stream *s, *t;
	void *p0, *p1, *m;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &p0), 0);
	cr_assert_eq(tdm_device_alloc(e.gpu, 1, 4096, &p1), 0);
	cr_assert_eq(tdm_managed_alloc(e.gpu, 0, 4096, &m), 0);
	void *freeable = NULL, *spare = NULL;
	cr_assert_eq(tdm_device_alloc_async(s, 4096, &freeable), 0);
	/* For case 1: the device may die between a free that went through and the allocation of
	 * the next block to free; the next try frees this one, taken before the fault. */
	cr_assert_eq(tdm_device_alloc(e.gpu, 0, 4096, &spare), 0);
	cr_assert_eq(tdm_sim_inject(s, TDM_SIM_FAULT_STICKY), 0);
	cr_assert_eq(tdm_launch_spin(s, 0), 0, "the fault waits for the kernel to run");
	int rc;
	for (int i = 0;; i++) {
		cr_assert_lt(i, 100000, "the sticky fault never killed the device");
		switch (which) {
		case 0: {
			void *q = NULL;
			rc = tdm_device_alloc_async(s, 64, &q);
			if (rc == 0)
				cr_assert_eq(tdm_device_free(e.gpu, 0, q), 0);
			break;
		}
		case 1:
			rc = tdm_device_free_async(s, freeable);
			if (rc == 0) {
				/* Freed before the device died: a new block for the next try, or
				 * the spare where the device died meanwhile. */
				freeable = NULL;
				if (tdm_device_alloc(e.gpu, 0, 4096, &freeable) != 0) {
					cr_assert_not_null(spare, "the device died twice");
					freeable = spare;
					spare = NULL;
				}
			}
			break;
		case 2:
			rc = tdm_mem_prefetch(s, m, 4096, 0);
			break;
		default:
			rc = tdm_memcpy_peer_async(s, p1, 1, p0, 0, 4096);
			break;
		}
		if (rc != 0)
			break;
		tdm_test_sleep_us(100);
	}
	cr_assert_eq(rc, -EIO, "call %d on the dead device: %d", which, rc);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &t), -ENODEV,
	             "call %d saw the device dead but did not mark it failed", which);
	cr_assert_eq(tdm_stream_release(s), 0);
	(void)tdm_device_free(e.gpu, 0, p0);
	(void)tdm_device_free(e.gpu, 0, freeable); /* its async free never ran, or was refused */
	if (spare != NULL)
		(void)tdm_device_free(e.gpu, 0, spare);
	(void)tdm_managed_free(e.gpu, m);
	cr_assert_eq(tdm_device_free(e.gpu, 1, p1), 0);
	assert_device_usable(e.ex, e.gpu, 1);
	env_close(&e);
}

Test(memory_errors, alloc_async_on_a_dead_device_marks_it_failed, .timeout = TDM_TEST_TIMEOUT(30))
{
	dead_device_seen_by(0);
}

Test(memory_errors, free_async_on_a_dead_device_marks_it_failed, .timeout = TDM_TEST_TIMEOUT(30))
{
	dead_device_seen_by(1);
}

Test(memory_errors, prefetch_on_a_dead_device_marks_it_failed, .timeout = TDM_TEST_TIMEOUT(30))
{
	dead_device_seen_by(2);
}

Test(memory_errors, peer_copy_on_a_dead_device_marks_it_failed, .timeout = TDM_TEST_TIMEOUT(30))
{
	dead_device_seen_by(3);
}

/* ---- a copy from memory freed after it was enqueued (the sim's own check when work runs) ---- */

static const struct tdm__backend_ops *const ops = &tdm__backend_sim;

static void hold_until_let_go(void *arg)
{
	while (atomic_load_explicit((atomic_int *)arg, memory_order_acquire) == 0)
		tdm_test_sleep_us(100);
}

static int wait_stream(struct tdm__backend *b, void *s)
{
	int rc;
	while ((rc = ops->stream_query(b, s)) == -EAGAIN)
		tdm_test_sleep_us(100);
	return rc;
}

Test(memory_errors, a_copy_from_memory_freed_before_it_ran_fails_the_device,
     .timeout = TDM_TEST_TIMEOUT(30))
{
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.sim_devices = 2;
	struct tdm__backend *b;
	cr_assert_eq(ops->open(&b, &cfg), 0);
	void *s, *s1, *src, *dst;
	atomic_int go = 0;
	cr_assert_eq(ops->stream_create(b, 0, 0, &s), 0);
	cr_assert_eq(ops->host_alloc(b, 4096, &dst), 0);
	cr_assert_eq(ops->device_alloc(b, 0, 4096, &src), 0);
	/* The stream is held up until the copy's source is gone. */
	cr_assert_eq(ops->host_fn(b, s, hold_until_let_go, &go), 0);
	cr_assert_eq(ops->memcpy_async(b, s, dst, src, 4096, TDM_COPY_D2H), 0);
	cr_assert_eq(ops->device_free(b, 0, src), 0);
	/* Release: pairs with the acquire load in hold_until_let_go. */
	atomic_store_explicit(&go, 1, memory_order_release);
	cr_assert_eq(wait_stream(b, s), -EIO);
	cr_assert_eq(ops->launch_spin(b, s, 0), -EIO, "later work on the failed device");
	/* Device 1 goes on. */
	cr_assert_eq(ops->stream_create(b, 1, 0, &s1), 0);
	cr_assert_eq(ops->device_alloc(b, 1, 4096, &src), 0);
	memset(src, 7, 4096);
	cr_assert_eq(ops->memcpy_async(b, s1, dst, src, 4096, TDM_COPY_D2H), 0);
	cr_assert_eq(wait_stream(b, s1), 0);
	cr_assert_eq(((unsigned char *)dst)[4095], 7);
	cr_assert_eq(ops->device_free(b, 1, src), 0);
	cr_assert_eq(ops->host_free(b, dst), 0);
	ops->stream_destroy(b, s1);
	ops->stream_destroy(b, s);
	ops->close(b);
	/* And so does a GPU layer made afterwards. */
	struct env e;
	env_open_sim2(&e, 2);
	close_both_usable(&e);
}

#ifndef TANDEM_TEST_NO_CUDA
TDM_TEST_SUITE(memory_errors_cuda);

/* The same refusals on the cuda backend, where the driver answers for most of them (skipped
 * without a device). Only calls that fail at once are made: nothing here reaches the device. */
Test(memory_errors_cuda, frees_of_memory_not_live_are_einval, .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_CUDA;
	tdm_gpu *gpu = NULL;
	int rc = tdm_gpu_create(&gpu, ex, &g);
	if (rc == -ENODEV) {
		tdm_test_destroy(ex);
		cr_skip_test("no CUDA device");
	}
	cr_assert_eq(rc, 0, "%s", tdm_strerror(rc));
	char *heap = malloc(4096);
	cr_assert_not_null(heap);
	void *pinned, *dev;
	cr_assert_eq(tdm_host_alloc(gpu, 4096, &pinned), 0);
	cr_assert_eq(tdm_device_alloc(gpu, 0, 4096, &dev), 0);
	cr_assert_eq(tdm_device_free(gpu, 0, heap), -EINVAL, "malloc'd memory");
	cr_assert_eq(tdm_device_free(gpu, 0, pinned), -EINVAL, "pinned host memory");
	cr_assert_eq(tdm_managed_free(gpu, heap), -EINVAL, "malloc'd memory");
	cr_assert_eq(tdm_host_free(gpu, heap), -EINVAL, "malloc'd memory");
	if (tdm_gpu_device_count(gpu) > 1)
		cr_assert_eq(tdm_device_free(gpu, 1, dev), -EINVAL, "device 0's memory as 1's");
	cr_assert_eq(tdm_device_free(gpu, 0, dev), 0);
	cr_assert_eq(tdm_device_free(gpu, 0, dev), -EINVAL, "freed twice");
	cr_assert_eq(tdm_host_free(gpu, pinned), 0);
	cr_assert_eq(tdm_host_free(gpu, pinned), -EINVAL, "freed twice");
	memset(heap, 1, 4096);
	free(heap);
	assert_device_usable(ex, gpu, 0);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	tdm_test_destroy(ex);
}
#endif
