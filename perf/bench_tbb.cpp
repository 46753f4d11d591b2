// SPDX-License-Identifier: MIT
/*
 * perf/bench_tbb.cpp: the oneTBB baselines. Without TANDEM_HAVE_TBB it only says "not built in".
 */
#include "bench.h"

#if defined(TANDEM_HAVE_TBB) && TANDEM_HAVE_TBB

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

namespace
{

struct tbb_ctx {
	/*
	 * Without it TBB keeps at most CPUs - 1 workers in the process: the spawn arena, which
	 * wants `threads` workers, would get one fewer than tandem even at threads == CPUs, and
	 * any threads > CPUs would be cut down quietly.
	 */
	tbb::global_control limit;
	/* fib, skynet: the main thread joins via execute() and takes 1 of the `threads` slots. */
	tbb::task_arena joined;
	/* spawn: no slot kept for the main thread, which only submits; `threads` workers run. */
	tbb::task_arena workers;

	explicit tbb_ctx(unsigned threads)
	    : limit(tbb::global_control::max_allowed_parallelism, threads + 1),
	      joined(static_cast<int>(threads)), workers(static_cast<int>(threads), 0)
	{
		joined.initialize();
		workers.initialize();
	}
};

void *tbb_setup(unsigned threads)
{
	return new tbb_ctx(threads);
}

void tbb_teardown(void *ctx)
{
	delete static_cast<tbb_ctx *>(ctx);
}

uint64_t fib(int n)
{
	if (n < 2)
		return static_cast<uint64_t>(n);
	uint64_t x = 0;
	tbb::task_group g;
	g.run([&x, n] { x = fib(n - 1); });
	uint64_t y = fib(n - 2);
	g.wait();
	return x + y;
}

uint64_t tbb_fib(void *ctx, int n)
{
	uint64_t r = 0;
	static_cast<tbb_ctx *>(ctx)->joined.execute([&r, n] { r = fib(n); });
	return r;
}

uint64_t skynet(uint64_t num, uint64_t size)
{
	if (size == 1)
		return num;
	uint64_t part[10];
	uint64_t step = size / 10;
	tbb::task_group g;
	for (uint64_t i = 0; i < 10; i++)
		g.run([&part, num, step, i] { part[i] = skynet(num + i * step, step); });
	g.wait();
	uint64_t sum = 0;
	for (uint64_t p : part)
		sum += p;
	return sum;
}

uint64_t tbb_skynet(void *ctx, int depth)
{
	uint64_t size = 1;
	for (int i = 0; i < depth; i++)
		size *= 10;
	uint64_t r = 0;
	static_cast<tbb_ctx *>(ctx)->joined.execute([&r, size] { r = skynet(0, size); });
	return r;
}

/*
 * enqueue() is TBB's way to hand work to an arena from a thread that does not run it, but it has
 * no join: the tasks count themselves down, and the last one wakes the submitter.
 */
void tbb_spawn(void *ctx, uint64_t n)
{
	struct {
		std::atomic<uint64_t> left;
		std::mutex m;
		std::condition_variable cv;
		bool done = false;
	} st;
	if (n == 0)
		return;
	st.left.store(n, std::memory_order_relaxed);
	tbb::task_arena &a = static_cast<tbb_ctx *>(ctx)->workers;
	for (uint64_t i = 0; i < n; i++) {
		a.enqueue([&st] {
			if (st.left.fetch_sub(1, std::memory_order_acq_rel) != 1)
				return;
			std::lock_guard<std::mutex> lk(st.m);
			st.done = true;
			st.cv.notify_one();
		});
	}
	std::unique_lock<std::mutex> lk(st.m);
	st.cv.wait(lk, [&st] { return st.done; });
}

const bench_impl impl = {"tbb", tbb_setup, tbb_teardown, tbb_fib, tbb_skynet, tbb_spawn, nullptr};

} // namespace

const struct bench_impl *bench_tbb(void)
{
	return &impl;
}

#else

const struct bench_impl *bench_tbb(void)
{
	return nullptr;
}

#endif
