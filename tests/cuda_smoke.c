// SPDX-License-Identifier: MIT
/*
 * Smoke test of the cuda backend (gpu/backend/cuda.c + gpu/backend/kernels.cu) on a real GPU: every
 * op of tdm__backend_cuda once, through the ops table alone (no executor, no poller), the memory
 * ops (stream-ordered allocation, registration, managed memory, host functions, peer copies) after
 * the others, and the sticky fault last since it ends the device's context. Plain C, not Criterion:
 * the sticky fault must come last, in the one process.
 *
 * ctest runs it as cuda_smoke in every build with CUDA (CMakeLists.txt): exit 0 and "ALL PASS",
 * or the failed checks and exit 1. Without a GPU (or driver) it prints "open: -ENODEV (no
 * device)" and exits 77, which ctest reports as skipped.
 *
 * Checks are of behaviour only. Where one needs work still pending when it looks, the stream
 * waits at a gate (a host function that returns once the test opens it), so the answer does not
 * depend on how soon the test thread runs after a launch. How long kernels and copies take is
 * printed ("info" lines), never checked: tandem-bench measures speed.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "backend.h"

static const struct tdm__backend_ops *ops = &tdm__backend_cuda;
static struct tdm__backend *b;
static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (cond) {                                                                        \
			printf("  ok    ");                                                        \
		} else {                                                                           \
			printf("  FAIL  ");                                                        \
			failures++;                                                                \
		}                                                                                  \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
	} while (0)

/* A figure for the reader, never a check. */
#define INFO(...)                                                                                  \
	do {                                                                                       \
		printf("  info  ");                                                                \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Polls query(obj) until it is not -EAGAIN or timeout_ms passed; returns the last result. */
static int poll_until(int (*query)(struct tdm__backend *, void *), void *obj, unsigned timeout_ms,
                      uint64_t *waited_ns)
{
	uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000u;
	int rc;

	while ((rc = query(b, obj)) == -EAGAIN && now_ns() < deadline) {
	}
	if (waited_ns != NULL)
		*waited_ns = now_ns() - t0;
	return rc;
}

/*
 * A gate on a stream: a host function that returns only once the test opens it, so that the work
 * enqueued behind it is still pending, whatever the machine's load, until gate_open. It calls no
 * CUDA function (a host function must not). After 10 s it opens by itself: a driver that blocks
 * the test's next launch until the stream drains (CUDA_LAUNCH_BLOCKING=1) then fails the check
 * that needed the gate, instead of hanging.
 */
struct gate {
	int open;
};

static void gate_fn(void *arg)
{
	struct gate *g = arg;
	uint64_t t0 = now_ns();

	/* Acquire: pairs with the release store in gate_open. */
	while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE) && now_ns() - t0 < 10000000000u)
		sched_yield();
}

static int gate_close(void *s, struct gate *g)
{
	g->open = 0;
	return ops->host_fn(b, s, gate_fn, g);
}

static void gate_open(struct gate *g)
{
	/* Release: pairs with the acquire load in gate_fn. */
	__atomic_store_n(&g->open, 1, __ATOMIC_RELEASE);
}

static int cmp_u64(const void *a, const void *b2)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b2;

	return x < y ? -1 : x > y;
}

/* Round trip of an empty kernel, learnt by a completion word (or by stream_query). */
static void round_trip(void *s, uint64_t *word, int use_word)
{
	enum { N = 2000 };
	static uint64_t lat[N];
	uint64_t seq = __atomic_load_n(word, __ATOMIC_ACQUIRE);
	int bad = 0;

	for (int i = 0; i < N; i++) {
		uint64_t t0 = now_ns();

		bad |= ops->launch_spin(b, s, 0) != 0;
		if (use_word) {
			bad |= ops->write_value(b, s, word, ++seq) != 0;
			while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < seq) {
			}
		} else {
			while (ops->stream_query(b, s) == -EAGAIN) {
			}
		}
		lat[i] = now_ns() - t0;
	}
	qsort(lat, N, sizeof(lat[0]), cmp_u64);
	CHECK(!bad, "round trip, empty kernel + %s: p50 %.1f us, p99 %.1f us, min %.1f us",
	      use_word ? "completion word" : "stream_query", lat[N / 2] / 1e3,
	      lat[N * 99 / 100] / 1e3, lat[0] / 1e3);
}

/* ---- busy kernels ---- */

/* Launches a kernel of ns (busy or spin) on each of n streams, then polls them all; returns the
 * nanoseconds from the first launch to the last completion. */
static uint64_t launch_each(void *const *st, int n, int busy, uint32_t ns, int *rc)
{
	uint64_t t0 = now_ns();

	*rc = 0;
	for (int i = 0; i < n; i++)
		*rc |= busy ? ops->launch_busy(b, st[i], ns) : ops->launch_spin(b, st[i], ns);
	for (int i = 0; i < n && *rc == 0; i++)
		*rc = poll_until(ops->stream_query, st[i], 5000, NULL);
	return now_ns() - t0;
}

/* A busy kernel fills the device, so that two on two streams of one device serialise where two
 * spin kernels (one thread each) overlap: what each takes is printed, for the reader. */
static void smoke_busy(void *s, void *s2)
{
	void *both[2] = {s, s2};
	uint64_t el;
	int rc;

	(void)launch_each(both, 1, 1, 2000000, &rc); /* the first launch loads the kernel */
	el = launch_each(both, 1, 1, 2000000, &rc);
	CHECK(rc == 0, "launch_busy(2 ms) -> %d", rc);
	INFO("  ... done after %.2f ms", el / 1e6);
	el = launch_each(both, 2, 1, 2000000, &rc);
	CHECK(rc == 0, "  ... one on each of two streams of device 0 -> %d", rc);
	INFO("  ... both done after %.2f ms (they serialise)", el / 1e6);
	el = launch_each(both, 2, 0, 2000000, &rc);
	CHECK(rc == 0, "launch_spin(2 ms) on each of two streams of device 0 -> %d", rc);
	INFO("  ... both done after %.2f ms (they overlap)", el / 1e6);

	uint64_t t0 = now_ns();
	rc = 0;
	for (int i = 0; i < 100; i++)
		rc |= ops->launch_busy(b, s, 100000);
	if (rc == 0)
		rc = poll_until(ops->stream_query, s, 5000, NULL);
	el = now_ns() - t0;
	CHECK(rc == 0, "100 x launch_busy(100 us) back to back -> %d", rc);
	INFO("  ... done after %.2f ms", el / 1e6);
}

/* ---- memory ops ---- */

struct probe {
	const float *copied; /* written by the copy enqueued before the host function */
	float seen;
	int calls;
};

/* A host function: runs on a driver thread, must not call CUDA. */
static void probe_fn(void *arg)
{
	struct probe *p = arg;

	p->seen = *p->copied;
	__atomic_fetch_add(&p->calls, 1, __ATOMIC_RELEASE);
}

static size_t count_diff(const float *a, const float *x, size_t n)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += a[i] != x[i];
	return bad;
}

/* Stream-ordered memory: a 2 ms kernel sits between a copy into the block and a copy out of it,
 * and the free is enqueued at once; the copy out must still read the data. Then the cost of an
 * allocation from the retained pool. */
static void smoke_malloc_async(void *s, const float *h, float *h2, size_t n)
{
	const size_t bytes = n * sizeof(float);
	cudaMemPool_t pool;
	uint64_t thr = 0;
	cudaError_t e;
	float *d = NULL;
	void *p = NULL;
	int rc, bad = 0;
	uint64_t t0;

	e = cudaDeviceGetDefaultMemPool(&pool, 0);
	if (e == cudaSuccess)
		e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr);
	CHECK(e == cudaSuccess && thr == UINT64_MAX,
	      "default pool of device 0: release threshold %#llx (UINT64_MAX expected)",
	      (unsigned long long)thr);

	rc = ops->malloc_async(b, s, bytes, (void **)&d);
	CHECK(rc == 0 && d != NULL, "malloc_async(1 MiB) -> %d", rc);
	if (rc == 0) {
		for (size_t i = 0; i < n; i++)
			h2[i] = -1.0f;
		rc = ops->memcpy_async(b, s, d, h, bytes, TDM_COPY_H2D);
		rc |= ops->launch_spin(b, s, 2000000);
		rc |= ops->memcpy_async(b, s, h2, d, bytes, TDM_COPY_D2H);
		rc |= ops->free_async(b, s, d);
		CHECK(rc == 0, "  ... copy in, 2 ms kernel, copy out, free_async -> %d", rc);
		rc = poll_until(ops->stream_query, s, 5000, NULL);
		CHECK(rc == 0 && count_diff(h2, h, n) == 0,
		      "  ... the copy after the kernel read the block before its free: %zu wrong",
		      count_diff(h2, h, n));
	}
	CHECK(ops->malloc_async(b, s, 0, &p) == -EINVAL, "malloc_async(0 B) -> -EINVAL");
	CHECK(ops->free_async(b, s, NULL) == 0, "free_async(NULL) -> 0");

	/* The first allocation grew the pool; from here on it reuses. */
	t0 = now_ns();
	for (int i = 0; i < 10000; i++) {
		bad |= ops->malloc_async(b, s, (size_t)1 << 20, &p) != 0;
		bad |= ops->free_async(b, s, p) != 0;
	}
	CHECK(!bad, "malloc_async + free_async of 1 MiB, 10000 times");
	INFO("  ... %.2f us a pair", (now_ns() - t0) / 1e3 / 10000);
	/* The threshold matters across synchronizations: with 0, each one hands the memory back
	 * and the next allocation gets it from the driver again. */
	t0 = now_ns();
	for (int i = 0; i < 1000; i++) {
		bad |= ops->malloc_async(b, s, (size_t)1 << 20, &p) != 0;
		bad |= ops->free_async(b, s, p) != 0;
		bad |= cudaStreamSynchronize((cudaStream_t)ops->stream_native(b, s)) != cudaSuccess;
	}
	CHECK(!bad, "  ... with a cudaStreamSynchronize after each pair, 1000 times");
	INFO("  ... %.2f us a round", (now_ns() - t0) / 1e3 / 1000);
}

static void smoke_pinned(void *s, const float *h, size_t n)
{
	const size_t rb = (size_t)1 << 20;
	unsigned char *r = aligned_alloc(4096, rb), *back = malloc(rb), *plain = malloc(64);
	void *d = NULL;
	int rc;

	if (r == NULL || back == NULL || plain == NULL) {
		CHECK(0, "malloc for the registration checks");
		goto out;
	}
	memset(r, 0x5a, rb);
	memset(back, 0, rb);
	rc = ops->host_register(b, r, rb);
	CHECK(rc == 0, "host_register(1 MiB of aligned_alloc) -> %d", rc);
	CHECK(ops->is_pinned(b, r) == 1 && ops->is_pinned(b, r + rb - 1) == 1,
	      "  ... is_pinned at its start and at its last byte -> 1");
	rc = ops->host_register(b, r, rb);
	CHECK(rc == -EEXIST, "  ... registered again -> %d (-EEXIST expected)", rc);
	rc = ops->malloc_async(b, s, rb, &d);
	if (rc == 0) {
		rc = ops->memcpy_async(b, s, d, r, rb, TDM_COPY_H2D);
		rc |= ops->memcpy_async(b, s, back, d, rb, TDM_COPY_D2H);
		rc |= ops->free_async(b, s, d);
		if (rc == 0)
			rc = poll_until(ops->stream_query, s, 5000, NULL);
	}
	CHECK(rc == 0 && memcmp(r, back, rb) == 0, "  ... copied to the device and back -> %d", rc);
	rc = ops->host_unregister(b, r);
	CHECK(rc == 0, "host_unregister -> %d", rc);
	CHECK(ops->is_pinned(b, r) == 0, "  ... is_pinned after it -> 0");
	rc = ops->host_unregister(b, r);
	CHECK(rc == -EINVAL, "  ... unregistered again -> %d (-EINVAL expected)", rc);
	CHECK(ops->is_pinned(b, plain) == 0, "is_pinned(malloc) -> 0");
	CHECK(ops->is_pinned(b, h) == 1 && ops->is_pinned(b, h + n - 1) == 1,
	      "is_pinned(host_alloc), start and end -> 1");
	d = NULL;
	if (ops->device_alloc(b, 0, 64, &d) == 0) {
		CHECK(ops->is_pinned(b, d) == 0, "is_pinned(device memory) -> 0");
		ops->device_free(b, 0, d);
	}
	CHECK(cudaGetLastError() == cudaSuccess, "no error left behind for the user");
out:
	free(r);
	free(back);
	free(plain);
}

/* Managed memory: written by the host, scaled by a kernel after a prefetch to the device, read
 * by the host after a prefetch back. */
static void smoke_managed(void *s, size_t n, int ndev)
{
	const size_t bytes = n * sizeof(float);
	size_t f0 = 0, f = 0, t = 0, bad = 0;
	float *m = NULL;
	int rc;

	rc = ops->mem_info(b, 0, &f0, &t);
	CHECK(rc == 0 && t > 0 && f0 <= t, "mem_info(0) -> %d: %.2f GiB free of %.2f GiB", rc,
	      f0 / 1073741824.0, t / 1073741824.0);
	CHECK(ops->mem_info(b, ndev, &f, &t) == -EINVAL, "mem_info(ndev) -> -EINVAL");

	rc = ops->managed_alloc(b, 0, bytes, (void **)&m);
	CHECK(rc == 0 && m != NULL, "managed_alloc(1 MiB) -> %d", rc);
	if (rc != 0)
		return;
	CHECK(ops->is_pinned(b, m) == 0, "  ... is_pinned -> 0 (managed memory is pageable)");
	for (size_t i = 0; i < n; i++)
		m[i] = (float)i;
	rc = ops->advise(b, m, bytes, TDM_ADVISE_PREFERRED_LOCATION, 0);
	CHECK(rc == 0, "  ... advise(preferred location: device 0) -> %d", rc);
	rc = ops->advise(b, m, bytes, TDM_ADVISE_ACCESSED_BY, -1);
	CHECK(rc == 0, "  ... advise(accessed by: the host) -> %d", rc);
	rc = ops->advise(b, m, bytes, (tdm_mem_advice)9, 0);
	CHECK(rc == -EINVAL, "  ... advise(unknown advice) -> %d (-EINVAL expected)", rc);
	rc = ops->prefetch(b, s, m, bytes, 0);
	CHECK(rc == 0, "  ... prefetch to device 0 -> %d", rc);
	rc = ops->launch_scale(b, s, m, m, 3.0f, n);
	CHECK(rc == 0, "  ... launch_scale in place (m = 3 m) -> %d", rc);
	rc = ops->prefetch(b, s, m, bytes, -1);
	CHECK(rc == 0, "  ... prefetch to the host -> %d", rc);
	rc = poll_until(ops->stream_query, s, 5000, NULL);
	for (size_t i = 0; i < n; i++)
		bad += m[i] != 3.0f * (float)i;
	CHECK(rc == 0 && bad == 0, "  ... the host reads the kernel's result: %zu wrong", bad);
	rc = ops->advise(b, m, bytes, TDM_ADVISE_READ_MOSTLY, 0);
	CHECK(rc == 0, "  ... advise(read mostly) -> %d", rc);
	CHECK(ops->prefetch(b, s, m, bytes, ndev) == -EINVAL, "  ... prefetch to ndev -> -EINVAL");
	ops->managed_free(b, m);
	rc = ops->mem_info(b, 0, &f, &t);
	CHECK(rc == 0, "mem_info(0) after managed_free -> %d: %.2f GiB free", rc, f / 1073741824.0);
}

static void smoke_host_fn(void *s, const float *h, float *h2, size_t n)
{
	const size_t bytes = n * sizeof(float);
	struct probe pr = {.copied = &h2[1]};
	struct gate g;
	float *d = NULL;
	int rc, gated, held;

	for (size_t i = 0; i < n; i++)
		h2[i] = -1.0f;
	gated = gate_close(s, &g);
	rc = ops->malloc_async(b, s, bytes, (void **)&d);
	if (rc == 0) {
		rc = ops->memcpy_async(b, s, d, h, bytes, TDM_COPY_H2D);
		rc |= ops->launch_spin(b, s, 2000000);
		rc |= ops->memcpy_async(b, s, h2, d, bytes, TDM_COPY_D2H);
		rc |= ops->host_fn(b, s, probe_fn, &pr);
		rc |= ops->free_async(b, s, d);
	}
	held = __atomic_load_n(&pr.calls, __ATOMIC_ACQUIRE);
	gate_open(&g);
	CHECK(rc == 0 && gated == 0, "host_fn after a gate, a 2 ms kernel and a copy -> %d", rc);
	CHECK(held == 0, "  ... not called while the stream waits at the gate (%d calls)", held);
	rc = poll_until(ops->stream_query, s, 5000, NULL);
	CHECK(rc == 0 && __atomic_load_n(&pr.calls, __ATOMIC_ACQUIRE) == 1 && pr.seen == h[1],
	      "  ... called once, after the copy: saw %g (%g expected)", pr.seen, h[1]);
	CHECK(ops->host_fn(b, s, NULL, NULL) == -EINVAL, "host_fn(NULL) -> -EINVAL");
}

/* Same device always; across devices when there are two (device 0 -> 1 -> 0). */
static void smoke_peer(void *s, const float *h, float *h2, size_t n, int ndev)
{
	const size_t bytes = n * sizeof(float);
	void *d = NULL, *d2 = NULL, *d1 = NULL;
	int rc;

	rc = ops->device_alloc(b, 0, bytes, &d);
	rc |= ops->device_alloc(b, 0, bytes, &d2);
	CHECK(rc == 0, "device_alloc x2 for peer copies -> %d", rc);
	if (rc != 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		h2[i] = -1.0f;
	rc = ops->memcpy_async(b, s, d, h, bytes, TDM_COPY_H2D);
	rc |= ops->memcpy_peer_async(b, s, d2, 0, d, 0, bytes);
	rc |= ops->memcpy_async(b, s, h2, d2, bytes, TDM_COPY_D2H);
	if (rc == 0)
		rc = poll_until(ops->stream_query, s, 5000, NULL);
	CHECK(rc == 0 && count_diff(h2, h, n) == 0,
	      "memcpy_peer_async device 0 -> device 0: %d, %zu wrong", rc, count_diff(h2, h, n));
	CHECK(ops->memcpy_peer_async(b, s, d2, ndev, d, 0, bytes) == -EINVAL,
	      "memcpy_peer_async to ndev -> -EINVAL");
	if (ndev > 1 && ops->device_alloc(b, 1, bytes, &d1) == 0) {
		for (size_t i = 0; i < n; i++)
			h2[i] = -1.0f;
		rc = ops->memcpy_async(b, s, d2, h2, bytes, TDM_COPY_H2D);
		rc |= ops->memcpy_peer_async(b, s, d1, 1, d, 0, bytes);
		rc |= ops->memcpy_peer_async(b, s, d2, 0, d1, 1, bytes);
		rc |= ops->memcpy_async(b, s, h2, d2, bytes, TDM_COPY_D2H);
		if (rc == 0)
			rc = poll_until(ops->stream_query, s, 5000, NULL);
		CHECK(rc == 0 && count_diff(h2, h, n) == 0,
		      "memcpy_peer_async device 0 -> 1 -> 0: %d, %zu wrong", rc,
		      count_diff(h2, h, n));
		ops->device_free(b, 1, d1);
	} else if (ndev == 1) {
		printf("  skip  peer copy across devices: one device\n");
	}
out:
	ops->device_free(b, 0, d);
	ops->device_free(b, 0, d2);
}

static void smoke_memory(void *s, int ndev)
{
	const size_t n = (size_t)1 << 18; /* 1 MiB of floats */
	float *h = NULL, *h2 = NULL;
	int rc;

	rc = ops->host_alloc(b, n * sizeof(float), (void **)&h);
	rc |= ops->host_alloc(b, n * sizeof(float), (void **)&h2);
	CHECK(rc == 0, "host_alloc x2 of 1 MiB for the memory ops -> %d", rc);
	if (rc == 0) {
		for (size_t i = 0; i < n; i++)
			h[i] = (float)i * 0.25f;
		smoke_malloc_async(s, h, h2, n);
		smoke_pinned(s, h, n);
		smoke_managed(s, n, ndev);
		smoke_host_fn(s, h, h2, n);
		smoke_peer(s, h, h2, n, ndev);
	}
	ops->host_free(b, h);
	ops->host_free(b, h2);
}

int main(void)
{
	struct tdm__device_info info;
	void *s = NULL, *s_hi = NULL, *ev = NULL;
	uint64_t *words = NULL, waited = 0;
	float *h = NULL, *h2 = NULL, *dx = NULL, *dy = NULL, *dz = NULL;
	const size_t n = (size_t)1 << 22; /* 16 MiB of floats */
	int rc, ndev;

	rc = ops->open(&b, NULL);
	if (rc == -ENODEV) {
		printf("open: -ENODEV (no device)\n");
		return 77;
	}
	printf("backend %s\n", ops->name);
	CHECK(rc == 0, "open -> %d", rc);
	if (rc != 0)
		return 1;
	ndev = ops->device_count(b);
	CHECK(ndev >= 1, "device_count -> %d", ndev);

	rc = ops->device_info(b, 0, &info);
	CHECK(rc == 0,
	      "device_info(0) -> %d: \"%s\", %d SMs, priorities %d (least) .. %d (greatest), "
	      "write_value64 %d, %d async engines",
	      rc, info.name, info.sm_count, info.prio_least, info.prio_greatest,
	      (int)info.can_write_value64, info.async_engines);
	CHECK(ops->device_info(b, ndev, &info) == -EINVAL, "device_info(ndev) -> -EINVAL");

	/* ---- streams ---- */
	rc = ops->stream_create(b, 0, info.prio_least, &s);
	CHECK(rc == 0 && s != NULL, "stream_create(prio %d) -> %d", info.prio_least, rc);
	rc = ops->stream_create(b, 0, info.prio_greatest, &s_hi);
	CHECK(rc == 0 && s_hi != NULL, "stream_create(prio %d) -> %d", info.prio_greatest, rc);
	CHECK(ops->stream_create(b, ndev, 0, &s_hi) == -EINVAL, "stream_create(ndev) -> -EINVAL");
	CHECK(ops->stream_native(b, s) != NULL, "stream_native -> cudaStream_t %p",
	      ops->stream_native(b, s));
	CHECK(ops->stream_query(b, s) == 0, "stream_query on an idle stream -> 0");

	rc = ops->launch_spin(b, s, 0);
	CHECK(rc == 0, "launch_spin(0) (empty kernel) -> %d", rc);
	rc = poll_until(ops->stream_query, s, 5000, &waited);
	CHECK(rc == 0, "  ... stream_query -> %d", rc);
	INFO("  ... after %.1f us (the first launch loads the module)", waited / 1e3);

	{
		struct gate g;
		int gated = gate_close(s, &g);

		CHECK(gated == 0, "host_fn (a gate the test opens) -> %d", gated);
		rc = ops->launch_spin(b, s, 2000000);
		CHECK(rc == 0, "launch_spin(2 ms) behind the gate -> %d", rc);
		rc = ops->stream_query(b, s);
		gate_open(&g);
		CHECK(rc == -EAGAIN,
		      "  ... stream_query while the stream waits -> %d (-EAGAIN expected)", rc);
	}
	rc = poll_until(ops->stream_query, s, 5000, &waited);
	CHECK(rc == 0, "  ... then 0 once the gate opened -> %d", rc);
	INFO("  ... after %.2f ms (the kernel spins 2 ms)", waited / 1e6);

	rc = ops->launch_spin(b, s_hi, 100000);
	CHECK(rc == 0 && poll_until(ops->stream_query, s_hi, 5000, NULL) == 0,
	      "launch_spin(100 us) on the high-priority stream completes");

	smoke_busy(s, s_hi);

	/* ---- events ---- */
	rc = ops->event_create(b, 0, &ev);
	CHECK(rc == 0 && ev != NULL, "event_create -> %d", rc);
	CHECK(ops->event_query(b, ev) == 0, "event_query, never recorded -> 0");
	{
		struct gate g;
		int gated = gate_close(s, &g);

		ops->launch_spin(b, s, 2000000);
		rc = ops->event_record(b, ev, s);
		CHECK(rc == 0 && gated == 0, "event_record after a gate and a 2 ms kernel -> %d",
		      rc);
		rc = ops->event_query(b, ev);
		gate_open(&g);
		CHECK(rc == -EAGAIN,
		      "  ... event_query while the stream waits -> %d (-EAGAIN expected)", rc);
	}
	rc = poll_until(ops->event_query, ev, 5000, &waited);
	CHECK(rc == 0, "  ... then 0 once the gate opened -> %d", rc);
	INFO("  ... after %.2f ms", waited / 1e6);
	if (ndev > 1) {
		void *s1 = NULL;

		if (ops->stream_create(b, 1, 0, &s1) == 0) {
			CHECK(ops->event_record(b, ev, s1) == -EINVAL,
			      "event_record, event of device 0 on a stream of device 1 -> -EINVAL");
			/* The backend's per-thread device cache goes stale behind its back: the
			 * launch must still reach device 1. */
			cudaSetDevice(0);
			rc = ops->launch_spin(b, s1, 1000);
			CHECK(rc == 0 && poll_until(ops->stream_query, s1, 5000, NULL) == 0,
			      "launch on device 1 after the user's cudaSetDevice(0) -> %d", rc);

			void *two[2] = {s, s1};
			uint64_t el;

			(void)launch_each(&two[1], 1, 1, 2000000, &rc); /* loads it on device 1 */
			el = launch_each(two, 2, 1, 2000000, &rc);
			CHECK(rc == 0, "launch_busy(2 ms) on device 0 and on device 1 -> %d", rc);
			INFO("  ... both done after %.2f ms (two devices run them at once)",
			     el / 1e6);
			ops->stream_destroy(b, s1);
		}
	}

	/* ---- completion words ---- */
	rc = ops->host_alloc(b, 4096, (void **)&words);
	CHECK(rc == 0 && words != NULL, "host_alloc(4096) -> %d", rc);
	CHECK(ops->host_alloc(b, 0, (void **)&h) == -EINVAL && h == NULL,
	      "host_alloc(0) -> -EINVAL");
	if (words != NULL && info.can_write_value64) {
		struct gate g;
		int gated;
		uint64_t seen;

		memset(words, 0, 4096);
		gated = gate_close(s, &g);
		ops->launch_spin(b, s, 2000000);
		rc = ops->write_value(b, s, &words[8], 42);
		seen = __atomic_load_n(&words[8], __ATOMIC_ACQUIRE);
		gate_open(&g);
		CHECK(rc == 0 && gated == 0, "write_value(42) after a gate and a 2 ms kernel -> %d",
		      rc);
		CHECK(seen == 0, "  ... the word is still 0 while the stream waits (read %llu)",
		      (unsigned long long)seen);
		uint64_t t0 = now_ns();
		while (__atomic_load_n(&words[8], __ATOMIC_ACQUIRE) != 42 &&
		       now_ns() - t0 < 5000000000u) {
		}
		CHECK(words[8] == 42, "  ... the word reads 42 once the gate opened");
		INFO("  ... after %.2f ms", (now_ns() - t0) / 1e6);
		CHECK(ops->word_status == NULL || ops->word_status(b, s, 42) == 0,
		      "word_status -> 0");
		CHECK(ops->write_value(b, s, (uint64_t *)((char *)words + 4), 1) == -EINVAL,
		      "write_value to a misaligned word -> -EINVAL");
		round_trip(s, &words[8], 1);
	} else {
		printf("  skip  write_value: can_write_value64 is 0 on this device\n");
	}
	if (words != NULL)
		round_trip(s, &words[8], 0);

	/* ---- memory, copies, scale ---- */
	rc = ops->host_alloc(b, n * sizeof(float), (void **)&h);
	rc |= ops->host_alloc(b, n * sizeof(float), (void **)&h2);
	rc |= ops->device_alloc(b, 0, n * sizeof(float), (void **)&dx);
	rc |= ops->device_alloc(b, 0, n * sizeof(float), (void **)&dy);
	rc |= ops->device_alloc(b, 0, n * sizeof(float), (void **)&dz);
	CHECK(rc == 0, "host_alloc x2, device_alloc x3 of 16 MiB -> %d", rc);
	{
		void *huge = NULL;

		CHECK(ops->device_alloc(b, 0, (size_t)1 << 50, &huge) == -ENOMEM,
		      "device_alloc(1 PiB) -> -ENOMEM");
		ops->device_free(b, 0, huge);
	}
	if (rc == 0) {
		size_t bad = 0;

		for (size_t i = 0; i < n; i++) {
			h[i] = (float)i * 0.5f - 1000.0f;
			h2[i] = -1.0f;
		}
		rc = ops->memcpy_async(b, s, dx, h, n * sizeof(float), TDM_COPY_H2D);
		CHECK(rc == 0, "memcpy_async H2D -> %d", rc);
		rc = ops->launch_scale(b, s, dy, dx, 2.5f, n);
		CHECK(rc == 0, "launch_scale(y = 2.5 x) -> %d", rc);
		rc = ops->launch_scale(b, s, dy, dy, -1.0f, n);
		CHECK(rc == 0, "launch_scale in place (y = -y) -> %d", rc);
		rc = ops->memcpy_async(b, s, dz, dy, n * sizeof(float), TDM_COPY_D2D);
		CHECK(rc == 0, "memcpy_async D2D -> %d", rc);
		rc = ops->memcpy_async(b, s, h2, dz, n * sizeof(float), TDM_COPY_D2H);
		CHECK(rc == 0, "memcpy_async D2H -> %d", rc);
		rc = poll_until(ops->stream_query, s, 10000, &waited);
		for (size_t i = 0; i < n; i++)
			bad += h2[i] != -(2.5f * h[i]);
		CHECK(rc == 0 && bad == 0, "round trip of %zu floats: %zu wrong", n, bad);
		INFO("  ... in %.2f ms", waited / 1e6);
		CHECK(ops->memcpy_async(b, s, dx, h, 16, (tdm_copy_kind)9) == -EINVAL,
		      "memcpy_async with an unknown kind -> -EINVAL");
		CHECK(ops->memcpy_async(b, s, dx, h, 0, TDM_COPY_H2D) == 0,
		      "memcpy_async(0 B) -> 0");
		CHECK(ops->launch_scale(b, s, NULL, dx, 1.0f, 16) == -EINVAL,
		      "launch_scale(y NULL) -> -EINVAL");
		CHECK(ops->launch_scale(b, s, dy, dx, 1.0f, 0) == 0, "launch_scale(n 0) -> 0");
	}
	ops->device_free(b, 0, dx);
	ops->device_free(b, 0, dy);
	ops->device_free(b, 0, dz);
	ops->host_free(b, h);
	ops->host_free(b, h2);
	ops->event_destroy(b, ev);
	ops->stream_destroy(b, s_hi);
	printf("  ok    frees and destroys returned\n");

	/* ---- memory ops ---- */
	smoke_memory(s, ndev);

	/* ---- the sticky fault, last: it ends the context of device 0 ---- */
	rc = ops->launch_fault(b, s);
	CHECK(rc == 0, "launch_fault -> %d (the trap happens on the device, later)", rc);
	rc = poll_until(ops->stream_query, s, 10000, &waited);
	CHECK(rc == -EIO, "  ... stream_query -> %d (-EIO expected)", rc);
	CHECK(ops->stream_query(b, s) == -EIO, "  ... and again -EIO (sticky)");
	rc = ops->launch_spin(b, s, 0);
	CHECK(rc == -EIO, "  ... a launch on the dead device -> %d (-EIO expected)", rc);
	{
		struct probe pr = {.copied = NULL};
		void *p = NULL;

		rc = ops->malloc_async(b, s, 64, &p);
		CHECK(rc == -EIO, "  ... malloc_async on the dead device -> %d (-EIO expected)",
		      rc);
		rc = ops->host_fn(b, s, probe_fn, &pr);
		CHECK(rc == -EIO, "  ... host_fn on the dead device -> %d (-EIO expected)", rc);
	}
	ops->stream_destroy(b, s); /* must not hang on the dead context */
	ops->host_free(b, words);
	ops->close(b);
	printf("  ok    stream_destroy, close after the fault returned\n");

	if (failures == 0)
		printf("ALL PASS\n");
	else
		printf("%d FAILED\n", failures);
	return failures == 0 ? 0 : 1;
}
