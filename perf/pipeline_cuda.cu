// SPDX-License-Identifier: MIT
/*
 * perf/pipeline_cuda.cu: the plain-CUDA side of `tandem-bench pipeline` (pipeline_cuda.h): the
 * device-filling kernel of the compute-bound load, which tandem's side launches on its own streams
 * too, and the hand-written double-buffered pipeline tandem is compared with. Its scale kernel is
 * shaped like gpu/backend/kernels.cu's (the same grid-stride loop, 256-thread blocks, at most 8
 * blocks per SM, launched with cudaLaunchKernelEx), so that both sides run the same work.
 */
#include "pipeline_cuda.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_common.cuh"

namespace
{

/* ---- kernels ---------------------------------------------------------------------------- */

constexpr unsigned BUSY_BLOCK = 1024;
constexpr unsigned SCALE_BLOCK = 256; // TDM__SCALE_BLOCK

// Every thread spins: a block keeps its SM's thread slots until its last thread ends. With out
// set, block 0 then copies the batch's stamp (PIPE_CUDA_STAMP_BYTES) from in to out. With tr set
// (--trace), each block's thread 0 folds its start into tr[0] (min) and its end into tr[1] (max):
// the kernel's span on the device's clock.
__global__ void busy_kernel(uint32_t ns, float *out, const float *in, unsigned long long *tr)
{
	const uint64_t t0 = globaltimer();
	if (tr != nullptr && threadIdx.x == 0)
		atomicMin(&tr[0], (unsigned long long)t0);
	while (globaltimer() - t0 < ns) {
	}
	if (out != nullptr && blockIdx.x == 0 &&
	    threadIdx.x < PIPE_CUDA_STAMP_BYTES / sizeof(float))
		out[threadIdx.x] = in[threadIdx.x];
	if (tr != nullptr && threadIdx.x == 0)
		atomicMax(&tr[1], (unsigned long long)globaltimer());
}

__global__ void scale_kernel(float *y, const float *x, float a, size_t n)
{
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		y[i] = a * x[i];
}

// One thread reads the device's clock into host-mapped memory, for lining it up with the host's.
__global__ void clock_kernel(volatile unsigned long long *w)
{
	*w = globaltimer();
	__threadfence_system();
}

cudaLaunchConfig_t config(cudaStream_t s, unsigned blocks, unsigned threads)
{
	cudaLaunchConfig_t c = {};
	c.gridDim = dim3(blocks);
	c.blockDim = dim3(threads);
	c.dynamicSmemBytes = 0;
	c.stream = s;
	c.attrs = nullptr;
	c.numAttrs = 0;
	return c;
}

/* Device 0's shape: SMs, and busy_kernel blocks resident per SM at once. */
struct shape {
	int sms = 0, busy_per_sm = 0;
	int rc = 0;
};

shape query_shape()
{
	shape sh;
	cudaError_t e = cudaDeviceGetAttribute(&sh.sms, cudaDevAttrMultiProcessorCount, 0);
	if (e == cudaSuccess)
		e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&sh.busy_per_sm, busy_kernel,
		                                                  BUSY_BLOCK, 0);
	sh.rc = e == cudaSuccess ? 0 : fail("device shape", e);
	return sh;
}

/* Looked up once; tandem's workers launch the busy kernel at once, and a function-local static
 * is initialised once, thread-safely (C++11). */
int device_shape(shape *out)
{
	static const shape cached = query_shape();
	*out = cached;
	return cached.rc;
}

/* --trace: two words (start, end) per batch index, on device 0; null until the first
 * pipe_cuda_trace_begin, then kept (a later untraced launch writes into it harmlessly: each
 * begin resets it). Set by begin between runs, read by launches during them; the runs' spawns
 * and waits order the two. */
unsigned long long *trace_words = nullptr;
uint64_t trace_n = 0;

unsigned long long *trace_slot(int64_t index)
{
	if (trace_words == nullptr || index < 0 || (uint64_t)index >= trace_n)
		return nullptr;
	return trace_words + 2 * (uint64_t)index;
}

cudaError_t launch_busy(cudaStream_t s, const shape &sh, uint32_t ns, void *out, const void *in,
                        int64_t index)
{
	const unsigned per_sm = sh.busy_per_sm > 0 ? (unsigned)sh.busy_per_sm : 1;
	const cudaLaunchConfig_t c = config(s, (unsigned)sh.sms * per_sm, BUSY_BLOCK);
	return cudaLaunchKernelEx(&c, busy_kernel, ns, static_cast<float *>(out),
	                          static_cast<const float *>(in), trace_slot(index));
}

cudaError_t launch_scale(cudaStream_t s, const shape &sh, float *y, const float *x, size_t n)
{
	const size_t cap = (size_t)(sh.sms > 0 ? sh.sms : 1) * 8;
	const size_t want = (n + SCALE_BLOCK - 1) / SCALE_BLOCK;
	const cudaLaunchConfig_t c = config(s, (unsigned)(want < cap ? want : cap), SCALE_BLOCK);
	return cudaLaunchKernelEx(&c, scale_kernel, y, x, 2.0f, n);
}

} // namespace

extern "C" const char *pipe_cuda_error(void)
{
	return last_error;
}

extern "C" int pipe_cuda_busy(void *stream, uint32_t ns, void *out, const void *in, int64_t index)
{
	shape sh;
	int rc = device_shape(&sh);

	if (rc != 0)
		return rc;
	CUDA_TRY(launch_busy(static_cast<cudaStream_t>(stream), sh, ns, out, in, index));
	return 0;
}

extern "C" int pipe_cuda_trace_begin(uint64_t batches)
{
	if (batches == 0)
		return fail_msg(-EINVAL, "pipe_cuda_trace_begin: no batches");
	if (batches > trace_n) {
		if (trace_words != nullptr)
			CUDA_TRY(cudaFree(trace_words));
		trace_words = nullptr;
		trace_n = 0;
		CUDA_TRY(cudaMalloc(&trace_words, batches * 2 * sizeof(unsigned long long)));
		trace_n = batches;
	}
	// Starts all ones (atomicMin's identity), ends zero (atomicMax's); the words interleave,
	// so two strided sets. Synchronous: done before the run enqueues anything.
	CUDA_TRY(cudaMemset2D(trace_words, 2 * sizeof(unsigned long long), 0xff,
	                      sizeof(unsigned long long), trace_n));
	CUDA_TRY(cudaMemset2D(trace_words + 1, 2 * sizeof(unsigned long long), 0,
	                      sizeof(unsigned long long), trace_n));
	CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

namespace
{

/*
 * The device clock minus CLOCK_MONOTONIC: a one-thread kernel stores %globaltimer in mapped
 * memory while the host spins on it; the store happened between the launch and the moment the
 * host saw it, so the best of a few tries (the shortest window) bounds the offset within that
 * window. The host side is taken as the moment seen (the store reaches the host within ~1 us).
 */
int clock_offset(int64_t *offset_ns, uint64_t *window_ns)
{
	unsigned long long *w = nullptr;
	cudaStream_t s = nullptr;
	int rc = 0;
	cudaError_t e = cudaHostAlloc(&w, sizeof(*w), cudaHostAllocMapped);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	*window_ns = UINT64_MAX;
	for (int k = 0; e == cudaSuccess && k < 20; k++) {
		volatile unsigned long long *v = w;
		*v = 0;
		const uint64_t t0 = now_ns();
		clock_kernel<<<1, 1, 0, s>>>(w);
		if ((e = cudaGetLastError()) != cudaSuccess)
			break;
		// Spin; now and then ask whether the kernel ended without storing (a fault) or
		// never ran, so that a failure ends the bench instead of hanging it.
		for (unsigned i = 1; *v == 0; i++) {
			if (i % 4096 != 0)
				continue;
			const cudaError_t q = cudaStreamQuery(s);
			if (q != cudaErrorNotReady && *v == 0) {
				e = q != cudaSuccess ? q : cudaErrorUnknown;
				break;
			}
			if (now_ns() - t0 > 1000000000ull) {
				e = cudaErrorLaunchTimeout;
				break;
			}
		}
		if (e != cudaSuccess)
			break;
		const uint64_t t1 = now_ns();
		if (t1 - t0 < *window_ns) {
			*window_ns = t1 - t0;
			*offset_ns = (int64_t)*v - (int64_t)t1;
		}
		e = cudaStreamSynchronize(s);
	}
	if (e != cudaSuccess)
		rc = fail("clock offset", e);
	if (s != nullptr)
		(void)cudaStreamDestroy(s);
	if (w != nullptr)
		(void)cudaFreeHost(w);
	return rc;
}

} // namespace

extern "C" int pipe_cuda_trace_read(uint64_t batches, uint64_t host_start_ns, uint64_t host_end_ns,
                                    struct pipe_cuda_trace *out)
{
	if (out == nullptr || batches == 0 || batches > trace_n)
		return fail_msg(-EINVAL, "pipe_cuda_trace_read: no trace of that many batches");
	std::vector<unsigned long long> w(2 * batches);
	// Every run waits for its work before it returns; the device-wide wait is for certainty.
	CUDA_TRY(cudaDeviceSynchronize());
	CUDA_TRY(
	    cudaMemcpy(w.data(), trace_words, w.size() * sizeof(w[0]), cudaMemcpyDeviceToHost));
	std::vector<uint64_t> order(batches);
	for (uint64_t i = 0; i < batches; i++) {
		if (w[2 * i] == ~0ull || w[2 * i + 1] == 0)
			return fail_msg(-EIO,
			                "pipe_cuda_trace_read: a batch's kernel left no trace");
		order[i] = i;
	}
	// By start; equal starts by index, so that a tie is never counted as out of order.
	std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
		return w[2 * a] != w[2 * b] ? w[2 * a] < w[2 * b] : a < b;
	});
	*out = pipe_cuda_trace{};
	out->gap_max_ns = batches > 1 ? INT64_MIN : 0;
	uint64_t first = w[2 * order[0]], last = 0;
	for (uint64_t k = 0; k < batches; k++) {
		const uint64_t i = order[k], start = w[2 * i], end = w[2 * i + 1];
		if (k > 0 && start > last + PIPE_CUDA_IDLE_NS)
			out->idle_gaps++; // every kernel so far had ended: the device had no work
		last = std::max<uint64_t>(last, end);
		out->kernels_ns += end - start;
		if (k > 0 && i < order[k - 1])
			out->out_of_order++;
		if (k + 1 < batches) {
			const int64_t gap = (int64_t)w[2 * order[k + 1]] - (int64_t)end;
			out->gap_sum_ns += gap;
			out->gap_max_ns = std::max(out->gap_max_ns, gap);
		}
	}
	out->span_ns = last - first;
	int64_t offset;
	int rc = clock_offset(&offset, &out->clock_window_ns);
	if (rc != 0)
		return rc;
	out->lead_ns = ((int64_t)first - offset) - (int64_t)host_start_ns;
	out->tail_ns = (int64_t)host_end_ns - ((int64_t)last - offset);
	return 0;
}

/* ---- the double-buffered pipeline --------------------------------------------------------- */

struct pipe_cuda_db {
	pipe_cuda_work w;
	shape sh;
	cudaStream_t s[2] = {nullptr, nullptr};
	void *hin[2] = {nullptr, nullptr}, *hout[2] = {nullptr, nullptr};
	void *din[2] = {nullptr, nullptr}, *dout[2] = {nullptr, nullptr};
	uint64_t copied_ns = 0, launched_ns = 0; /* batch 0's, for the trace */
};

namespace
{

int enqueue(pipe_cuda_db *db, int k, uint64_t index)
{
	const pipe_cuda_work &w = db->w;
	cudaStream_t s = db->s[k];

	CUDA_TRY(cudaMemcpyAsync(db->din[k], db->hin[k], w.bytes, cudaMemcpyHostToDevice, s));
	if (index == 0)
		db->copied_ns = now_ns();
	if (w.busy_ns == 0) {
		CUDA_TRY(launch_scale(s, db->sh, static_cast<float *>(db->dout[k]),
		                      static_cast<const float *>(db->din[k]),
		                      PIPE_CUDA_TRIVIAL_BYTES / sizeof(float)));
	} else if (w.stamp_in_kernel) {
		CUDA_TRY(
		    launch_busy(s, db->sh, w.busy_ns, db->dout[k], db->din[k], (int64_t)index));
	} else {
		CUDA_TRY(launch_busy(s, db->sh, w.busy_ns, nullptr, nullptr, (int64_t)index));
		CUDA_TRY(cudaMemcpyAsync(db->dout[k], db->din[k], PIPE_CUDA_STAMP_BYTES,
		                         cudaMemcpyDeviceToDevice, s));
	}
	if (index == 0)
		db->launched_ns = now_ns();
	CUDA_TRY(cudaMemcpyAsync(db->hout[k], db->dout[k], w.bytes, cudaMemcpyDeviceToHost, s));
	return 0;
}

} // namespace

extern "C" void pipe_cuda_db_first_issue(const struct pipe_cuda_db *db, uint64_t *copied_ns,
                                         uint64_t *launched_ns)
{
	*copied_ns = db->copied_ns;
	*launched_ns = db->launched_ns;
}

extern "C" void pipe_cuda_db_destroy(struct pipe_cuda_db *db)
{
	if (db == nullptr)
		return;
	for (int k = 0; k < 2; k++) {
		if (db->s[k] != nullptr) {
			(void)cudaStreamSynchronize(db->s[k]);
			(void)cudaStreamDestroy(db->s[k]);
		}
		(void)cudaFreeHost(db->hin[k]);
		(void)cudaFreeHost(db->hout[k]);
		(void)cudaFree(db->din[k]);
		(void)cudaFree(db->dout[k]);
	}
	(void)cudaGetLastError();
	delete db;
}

extern "C" int pipe_cuda_db_create(struct pipe_cuda_db **out, const struct pipe_cuda_work *w)
{
	last_error[0] = '\0';
	if (out == nullptr || w == nullptr || w->bytes < PIPE_CUDA_STAMP_BYTES ||
	    w->prepare == nullptr || w->consume == nullptr)
		return fail_msg(-EINVAL, "pipe_cuda_db_create: bad argument");
	pipe_cuda_db *db = new (std::nothrow) pipe_cuda_db;
	if (db == nullptr)
		return fail_msg(-ENOMEM, "pipe_cuda_db_create: out of memory");
	db->w = *w;
	int rc = device_shape(&db->sh);
	cudaError_t e = cudaSuccess;
	for (int k = 0; rc == 0 && k < 2; k++) {
		// Default priority and non-blocking, like tandem's pooled streams.
		if ((e = cudaStreamCreateWithFlags(&db->s[k], cudaStreamNonBlocking)) !=
		        cudaSuccess ||
		    (e = cudaHostAlloc(&db->hin[k], w->bytes, cudaHostAllocPortable)) !=
		        cudaSuccess ||
		    (e = cudaHostAlloc(&db->hout[k], w->bytes, cudaHostAllocPortable)) !=
		        cudaSuccess ||
		    (e = cudaMalloc(&db->din[k], w->bytes)) != cudaSuccess ||
		    (e = cudaMalloc(&db->dout[k], w->bytes)) != cudaSuccess)
			rc = fail("pipe_cuda_db_create", e);
	}
	if (rc != 0) {
		pipe_cuda_db_destroy(db);
		return rc;
	}
	*out = db;
	return 0;
}

extern "C" int pipe_cuda_db_run(struct pipe_cuda_db *db, uint64_t batches, uint64_t *start_ns,
                                uint64_t *end_ns)
{
	const pipe_cuda_work &w = db->w;
	const uint64_t t0 = now_ns();

	// Batch i on set i % 2; its set is free once batch i-2 is consumed.
	for (uint64_t i = 0; i < batches + 2; i++) {
		const int k = (int)(i % 2);
		if (i >= 2) {
			CUDA_TRY(cudaStreamSynchronize(db->s[k]));
			w.consume(db->hout[k], i - 2, w.user);
		}
		if (i < batches) {
			w.prepare(db->hin[k], i, w.user);
			int rc = enqueue(db, k, i);
			if (rc != 0)
				return rc;
		}
	}
	*start_ns = t0;
	*end_ns = now_ns();
	return 0;
}
