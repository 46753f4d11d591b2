// SPDX-License-Identifier: MIT
/*
 * perf/raw_cuda.cu: the plain-CUDA baselines of gpu-latency and gpu-throughput (raw_cuda.h), the
 * floors tandem's GPU layer is compared with. Its kernels are its own, shaped like those of
 * gpu/backend/kernels.cu (1x1, launched with cudaLaunchKernelEx, the spin timed on %globaltimer),
 * so that both sides launch the same work. Driver functions come through
 * cudaGetDriverEntryPointByVersion, as in gpu/backend/cuda.c: nothing here links libcuda.
 */
#include "raw_cuda.h"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <time.h>

#include <cuda.h> /* driver types and enums only */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "cuda_common.cuh"

/* The driver ABI asked for, fixed so that each pointer matches its versioned PFN typedef. */
#define RAW_CUDA_ABI 12000

namespace
{

/* ---- kernels ---------------------------------------------------------------------------- */

// The background load of gpu-latency: spins until *stop turns nonzero, or max_ns passed (a guard,
// so that a bug here cannot hang the run for long). stop lives in device memory, set by a
// cudaMemsetAsync on the measured stream once the samples are taken, so the polling costs no PCIe
// traffic; the sleep keeps it to an L2 read a microsecond.
__global__ void background_kernel(const volatile unsigned *stop, uint64_t max_ns)
{
	const uint64_t t0 = globaltimer();
	while (*stop == 0 && globaltimer() - t0 < max_ns) {
#if __CUDA_ARCH__ >= 700
		__nanosleep(1000);
#endif
	}
}

/* ---- latency floors ---------------------------------------------------------------------- */

void CUDART_CB set_flag(void *p)
{
	// Release: the host's acquire load of the flag sees the callback's run complete; the
	// callback runs after the kernel, so the kernel is done. No CUDA call is allowed here.
	static_cast<std::atomic<unsigned> *>(p)->store(1, std::memory_order_release);
}

/*
 * One floor's resources. Destruction tears everything down in the safe order whatever failed:
 * stop the background kernels, wait for every stream, then destroy.
 */
struct floor_state {
	cudaStream_t s = nullptr;
	std::vector<cudaStream_t> bg;
	unsigned *stop = nullptr; // device memory
	cudaEvent_t ev = nullptr;
	uint64_t *word = nullptr;           // mapped pinned host memory
	uint64_t *bg_words = nullptr;       // where the background's pending writes land
	std::vector<cudaEvent_t> bg_events; // the background's pending event records
	CUdeviceptr word_dev = 0;
	PFN_cuStreamWriteValue64_v11070 write_value64 = nullptr;
	uint64_t seq = 0;
	std::atomic<unsigned> flag{0};

	floor_state() = default;
	floor_state(const floor_state &) = delete;
	floor_state &operator=(const floor_state &) = delete;

	// On the measured stream, which has a hardware queue of its own (gpu-latency keeps the
	// streams within CUDA_DEVICE_MAX_CONNECTIONS): a stream sharing a queue with a background
	// stream would wait behind the kernel it is meant to stop.
	int stop_background()
	{
		if (s == nullptr || stop == nullptr || bg.empty())
			return 0;
		CUDA_TRY(cudaMemsetAsync(stop, 0xff, sizeof(*stop), s));
		for (cudaStream_t b : bg)
			CUDA_TRY(cudaStreamSynchronize(b));
		return 0;
	}

	// The background kernels must still run after the last sample, or the floor had less load
	// than its row says.
	int background_still_running()
	{
		for (cudaStream_t b : bg) {
			const cudaError_t e = cudaStreamQuery(b);
			if (e == cudaSuccess)
				return fail_msg(-ETIMEDOUT,
				                "the background kernels ended before the "
				                "last sample");
			if (e != cudaErrorNotReady)
				return fail("cudaStreamQuery", e);
		}
		return 0;
	}

	~floor_state()
	{
		(void)stop_background();
		for (cudaStream_t b : bg)
			(void)cudaStreamDestroy(b);
		if (bg_words != nullptr)
			(void)cudaFreeHost(bg_words);
		for (cudaEvent_t e : bg_events)
			(void)cudaEventDestroy(e);
		if (stop != nullptr)
			(void)cudaFree(stop);
		if (s != nullptr) {
			(void)cudaStreamSynchronize(s);
			(void)cudaStreamDestroy(s);
		}
		if (ev != nullptr)
			(void)cudaEventDestroy(ev);
		if (word != nullptr)
			(void)cudaFreeHost(word);
		(void)cudaGetLastError();
	}
};

template <typename F> void driver_sym(const char *name, F *fn)
{
	cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	void *p = nullptr;

	static_assert(sizeof(F) == sizeof(void *), "driver entry points must fit a void *");
	if (cudaGetDriverEntryPointByVersion(name, &p, RAW_CUDA_ABI, cudaEnableDefault, &q) !=
	        cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		p = nullptr;
	(void)cudaGetLastError();
	memcpy(fn, &p, sizeof(p));
}

int open_word(floor_state &f)
{
	PFN_cuDeviceGet_v2000 device_get = nullptr;
	PFN_cuDeviceGetAttribute_v2000 device_attr = nullptr;
	int memops64 = 0, map_host = 0;
	CUdevice dev;
	void *dptr = nullptr;

	driver_sym("cuStreamWriteValue64", &f.write_value64);
	driver_sym("cuDeviceGet", &device_get);
	driver_sym("cuDeviceGetAttribute", &device_attr);
	if (device_get != nullptr && device_attr != nullptr && device_get(&dev, 0) == CUDA_SUCCESS)
		(void)device_attr(&memops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
		                  dev);
	CUDA_TRY(cudaDeviceGetAttribute(&map_host, cudaDevAttrCanMapHostMemory, 0));
	if (f.write_value64 == nullptr || memops64 == 0 || map_host == 0)
		return fail_msg(-ENOTSUP,
		                "cuStreamWriteValue64 to mapped host memory: not supported "
		                "by this driver or device");
	// A cache line of its own: the host spins on it while the device writes it.
	CUDA_TRY(cudaHostAlloc(reinterpret_cast<void **>(&f.word), 64,
	                       cudaHostAllocMapped | cudaHostAllocPortable));
	*f.word = 0;
	CUDA_TRY(cudaHostGetDevicePointer(&dptr, f.word, 0));
	f.word_dev = (CUdeviceptr)(uintptr_t)dptr;
	return 0;
}

int open_floor(floor_state &f, raw_cuda_floor how, unsigned bg_streams, unsigned bg_pending,
               unsigned bg_events, uint64_t samples)
{
	CUDA_TRY(cudaSetDevice(0));
	// The measured stream first, then the background ones, as gpu-latency leases tandem's.
	CUDA_TRY(cudaStreamCreateWithFlags(&f.s, cudaStreamNonBlocking));
	if (bg_streams > 0) {
		CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&f.stop), sizeof(*f.stop)));
		// Done before any background kernel starts: cudaMemset would be asynchronous (and
		// on the legacy stream, which non-blocking streams do not wait for).
		CUDA_TRY(cudaMemsetAsync(f.stop, 0, sizeof(*f.stop), f.s));
		CUDA_TRY(cudaStreamSynchronize(f.s));
		for (unsigned i = 0; i < bg_streams; i++) {
			cudaStream_t b;
			CUDA_TRY(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
			f.bg.push_back(b);
		}
		// The guard: 30 s, plus 1 ms a round trip (some 50x what one takes).
		const uint64_t guard_ns = 30000000000ull + samples * 1000000ull;
		for (cudaStream_t b : f.bg) {
			const cudaLaunchConfig_t c = one_thread(b);
			CUDA_TRY(cudaLaunchKernelEx(&c, background_kernel,
			                            static_cast<const volatile unsigned *>(f.stop),
			                            guard_ns));
		}
		// The completion writes tandem's background awaits hold, queued behind the kernels:
		// pending stream-memory operations on other channels are part of the load.
		if (bg_pending > 0) {
			PFN_cuStreamWriteValue64_v11070 wv = nullptr;
			void *dptr = nullptr;
			driver_sym("cuStreamWriteValue64", &wv);
			if (wv == nullptr)
				return fail_msg(-ENOTSUP, "cuStreamWriteValue64 not found");
			CUDA_TRY(cudaHostAlloc(reinterpret_cast<void **>(&f.bg_words),
			                       64 * f.bg.size(),
			                       cudaHostAllocMapped | cudaHostAllocPortable));
			CUDA_TRY(cudaHostGetDevicePointer(&dptr, f.bg_words, 0));
			for (size_t j = 0; j < f.bg.size(); j++)
				for (unsigned k = 0; k < bg_pending; k++)
					if (wv(f.bg[j], (CUdeviceptr)(uintptr_t)dptr + 64 * j,
					       k + 1, 0) != CUDA_SUCCESS)
						return fail_msg(-EIO,
						                "cuStreamWriteValue64 failed");
		}
		// And the event records of the awaits that used events, after the writes: the
		// order does not matter, since a pending record holds up nothing (perf/README.md).
		for (unsigned k = 0; k < bg_events; k++)
			for (cudaStream_t b : f.bg) {
				cudaEvent_t e;
				CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
				f.bg_events.push_back(e);
				CUDA_TRY(cudaEventRecord(e, b));
			}
	}
	switch (how) {
	case RAW_CUDA_EVENT:
		CUDA_TRY(cudaEventCreateWithFlags(&f.ev, cudaEventDisableTiming));
		return 0;
	case RAW_CUDA_WORD:
		return open_word(f);
	case RAW_CUDA_SYNC:
	case RAW_CUDA_HOSTFUNC:
		return 0;
	default:
		return fail_msg(-EINVAL, "raw_cuda_latency: unknown floor");
	}
}

// One round trip, from the launch to the moment the host knows the kernel finished.
int round_trip(floor_state &f, raw_cuda_floor how)
{
	cudaError_t e;

	CUDA_TRY(launch(f.s, 0));
	switch (how) {
	case RAW_CUDA_EVENT:
		CUDA_TRY(cudaEventRecord(f.ev, f.s));
		while ((e = cudaEventQuery(f.ev)) == cudaErrorNotReady) {
		}
		return e == cudaSuccess ? 0 : fail("cudaEventQuery", e);
	case RAW_CUDA_WORD: {
		const uint64_t want = ++f.seq;
		// DEFAULT, as tandem's completion words: ordered after the kernel, with a fence.
		const CUresult r = f.write_value64((CUstream)f.s, f.word_dev, (cuuint64_t)want,
		                                   CU_STREAM_WRITE_VALUE_DEFAULT);
		if (r != CUDA_SUCCESS)
			return fail_msg(-EIO, "cuStreamWriteValue64 failed");
		// Acquire: pairs with the device's fenced write; the kernel before it is done.
		while (__atomic_load_n(f.word, __ATOMIC_ACQUIRE) < want) {
		}
		return 0;
	}
	case RAW_CUDA_SYNC:
		CUDA_TRY(cudaStreamSynchronize(f.s));
		return 0;
	case RAW_CUDA_HOSTFUNC:
		CUDA_TRY(cudaLaunchHostFunc(f.s, set_flag, &f.flag));
		// Acquire: pairs with the release store in set_flag.
		while (f.flag.load(std::memory_order_acquire) == 0) {
		}
		f.flag.store(0, std::memory_order_relaxed);
		return 0;
	default:
		return fail_msg(-EINVAL, "raw_cuda_latency: unknown floor");
	}
}

} // namespace

extern "C" const char *raw_cuda_error(void)
{
	return last_error;
}

extern "C" int raw_cuda_device_name(char *buf, size_t len)
{
	cudaDeviceProp prop;
	int n = 0;

	if (buf == nullptr || len == 0)
		return -EINVAL;
	buf[0] = '\0';
	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
		(void)cudaGetLastError();
		return fail_msg(-ENODEV, "no CUDA device");
	}
	CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
	snprintf(buf, len, "%s", prop.name);
	return 0;
}

extern "C" int raw_cuda_latency(enum raw_cuda_floor how, unsigned bg_streams, unsigned bg_pending,
                                unsigned bg_events, uint64_t warmup, uint64_t n, uint64_t *ns)
{
	floor_state f;
	int rc;

	last_error[0] = '\0';
	if (ns == nullptr || (unsigned)how >= RAW_CUDA_NFLOORS)
		return fail_msg(-EINVAL, "raw_cuda_latency: bad argument");
	rc = open_floor(f, how, bg_streams, bg_pending, bg_events, warmup + n);
	if (rc != 0)
		return rc;
	for (uint64_t i = 0; i < warmup + n; i++) {
		const uint64_t t0 = now_ns();
		rc = round_trip(f, how);
		const uint64_t t1 = now_ns();
		if (rc != 0)
			return rc;
		if (i >= warmup)
			ns[i - warmup] = t1 - t0;
	}
	rc = f.background_still_running();
	if (rc != 0)
		return rc;
	return f.stop_background();
}

/* ---- throughput baselines ---------------------------------------------------------------- */

struct raw_cuda_tp;

namespace
{

struct slot_arg {
	raw_cuda_tp *tp;
	unsigned slot;
};

} // namespace

/*
 * Lock rule: every field below `m` is read and written with m held, by the workers, the
 * callbacks (hostfunc) and the thread in raw_cuda_tp_run; streams and sizes are immutable after
 * create. No CUDA call is made with m held.
 */
struct raw_cuda_tp {
	raw_cuda_tp_kind kind;
	unsigned workers, window;
	std::vector<cudaStream_t> streams;
	std::vector<std::thread> threads;
	std::vector<slot_arg> args;

	std::mutex m;
	std::condition_variable work, done;
	bool quit = false;
	uint64_t n = 0;
	uint32_t ns = 0;
	int err = 0;
	char msg[256] = "";
	// sync: a new run is a new generation; `running` workers have not finished their share.
	uint64_t gen = 0;
	unsigned running = 0;
	// hostfunc: slots whose task finished (or that are fresh), a ring of `window` entries; each
	// slot is in it at most once. busy[slot]: a task was started in it and not yet counted.
	std::vector<unsigned> ring;
	unsigned head = 0, count = 0;
	std::vector<unsigned char> busy;
	uint64_t next = 0, finished = 0;
};

namespace
{

// With m held: the first error wins, and ends the run.
void tp_fail(raw_cuda_tp *tp, const char *what, cudaError_t e)
{
	if (tp->err == 0) {
		tp->err = errno_of(e);
		snprintf(tp->msg, sizeof(tp->msg), "%s: %s", what, cudaGetErrorString(e));
	}
	(void)cudaGetLastError();
}

void sync_worker(raw_cuda_tp *tp, unsigned i)
{
	cudaStream_t s = tp->streams[i];
	uint64_t seen = 0;

	(void)cudaSetDevice(0);
	std::unique_lock<std::mutex> l(tp->m);
	for (;;) {
		tp->work.wait(l, [&] { return tp->quit || tp->gen != seen; });
		if (tp->quit)
			return;
		seen = tp->gen;
		const uint64_t share = tp->n / tp->workers + (i < tp->n % tp->workers ? 1 : 0);
		const uint32_t ns = tp->ns;
		const char *what = nullptr;
		cudaError_t e = cudaSuccess;
		l.unlock();
		for (uint64_t k = 0; k < share; k++) {
			e = launch(s, ns);
			what = "kernel launch";
			if (e == cudaSuccess) {
				e = cudaStreamSynchronize(s);
				what = "cudaStreamSynchronize";
			}
			if (e != cudaSuccess)
				break;
		}
		l.lock();
		if (e != cudaSuccess)
			tp_fail(tp, what, e);
		if (--tp->running == 0)
			tp->done.notify_all();
	}
}

void ring_push(raw_cuda_tp *tp, unsigned slot)
{
	tp->ring[(tp->head + tp->count++) % tp->window] = slot;
}

// Runs on a CUDA driver thread once the slot's kernel finished; it must not call CUDA.
void CUDART_CB slot_done(void *p)
{
	slot_arg *a = static_cast<slot_arg *>(p);
	raw_cuda_tp *tp = a->tp;

	{
		std::lock_guard<std::mutex> g(tp->m);
		ring_push(tp, a->slot);
	}
	tp->work.notify_one();
}

void hostfunc_worker(raw_cuda_tp *tp)
{
	(void)cudaSetDevice(0);
	std::unique_lock<std::mutex> l(tp->m);
	for (;;) {
		tp->work.wait(l, [&] { return tp->quit || tp->count > 0; });
		if (tp->quit)
			return;
		const unsigned slot = tp->ring[tp->head];
		tp->head = (tp->head + 1) % tp->window;
		tp->count--;
		// The continuation of the task that ran in this slot: count it, start the next.
		if (tp->busy[slot]) {
			tp->busy[slot] = 0;
			if (++tp->finished == tp->n)
				tp->done.notify_all();
		}
		if (tp->next >= tp->n)
			continue;
		tp->next++;
		tp->busy[slot] = 1;
		const uint32_t ns = tp->ns;
		l.unlock();
		cudaStream_t s = tp->streams[slot % tp->workers];
		const char *what = "kernel launch";
		cudaError_t e = launch(s, ns);
		if (e == cudaSuccess) {
			what = "cudaLaunchHostFunc";
			e = cudaLaunchHostFunc(s, slot_done, &tp->args[slot]);
		}
		l.lock();
		if (e != cudaSuccess) {
			tp_fail(tp, what, e);
			tp->next = tp->finished = tp->n;
			tp->done.notify_all();
		}
	}
}

} // namespace

extern "C" int raw_cuda_tp_create(struct raw_cuda_tp **out, enum raw_cuda_tp_kind kind,
                                  unsigned workers, unsigned window)
{
	last_error[0] = '\0';
	if (out == nullptr || workers == 0 ||
	    (kind != RAW_CUDA_TP_SYNC && kind != RAW_CUDA_TP_HOSTFUNC) ||
	    (kind == RAW_CUDA_TP_HOSTFUNC && window == 0))
		return fail_msg(-EINVAL, "raw_cuda_tp_create: bad argument");
	CUDA_TRY(cudaSetDevice(0));
	raw_cuda_tp *tp = new (std::nothrow) raw_cuda_tp;
	if (tp == nullptr)
		return fail_msg(-ENOMEM, "raw_cuda_tp_create: out of memory");
	tp->kind = kind;
	tp->workers = workers;
	tp->window = kind == RAW_CUDA_TP_HOSTFUNC ? window : workers;
	*out = tp;
	for (unsigned i = 0; i < workers; i++) {
		cudaStream_t s;
		const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
		if (e != cudaSuccess) {
			const int rc = fail("cudaStreamCreateWithFlags", e);
			raw_cuda_tp_destroy(tp);
			*out = nullptr;
			return rc;
		}
		tp->streams.push_back(s);
	}
	tp->ring.assign(tp->window, 0);
	tp->busy.assign(tp->window, 0);
	for (unsigned i = 0; i < tp->window; i++)
		tp->args.push_back(slot_arg{tp, i});
	// Built with -fno-exceptions (as gpu/backend/kernels.cu): a thread that cannot start
	// terminates the program, which for a benchmark's set-up is as good as an error code.
	for (unsigned i = 0; i < workers; i++) {
		if (kind == RAW_CUDA_TP_SYNC)
			tp->threads.emplace_back(sync_worker, tp, i);
		else
			tp->threads.emplace_back(hostfunc_worker, tp);
	}
	return 0;
}

extern "C" int raw_cuda_tp_run(struct raw_cuda_tp *tp, uint64_t n, uint32_t kernel_ns,
                               uint64_t *elapsed_ns)
{
	last_error[0] = '\0';
	if (tp == nullptr || elapsed_ns == nullptr || n == 0)
		return fail_msg(-EINVAL, "raw_cuda_tp_run: bad argument");
	std::unique_lock<std::mutex> l(tp->m);
	tp->n = n;
	tp->ns = kernel_ns;
	tp->err = 0;
	const uint64_t t0 = now_ns();
	if (tp->kind == RAW_CUDA_TP_SYNC) {
		tp->running = tp->workers;
		tp->gen++;
	} else {
		tp->next = tp->finished = 0;
		tp->head = tp->count = 0;
		for (unsigned i = 0; i < tp->window; i++) {
			tp->busy[i] = 0;
			ring_push(tp, i);
		}
	}
	tp->work.notify_all();
	tp->done.wait(l, [&] {
		return tp->kind == RAW_CUDA_TP_SYNC ? tp->running == 0 : tp->finished >= tp->n;
	});
	*elapsed_ns = now_ns() - t0;
	if (tp->err != 0) {
		snprintf(last_error, sizeof(last_error), "%s", tp->msg);
		return tp->err;
	}
	return 0;
}

extern "C" void raw_cuda_tp_destroy(struct raw_cuda_tp *tp)
{
	if (tp == nullptr)
		return;
	{
		std::lock_guard<std::mutex> g(tp->m);
		tp->quit = true;
	}
	tp->work.notify_all();
	for (std::thread &t : tp->threads)
		t.join();
	// Callbacks still queued (after a failed run) only touch tp under m: let them run first.
	for (cudaStream_t s : tp->streams) {
		(void)cudaStreamSynchronize(s);
		(void)cudaStreamDestroy(s);
	}
	(void)cudaGetLastError();
	delete tp;
}
