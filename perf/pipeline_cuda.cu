/*
 * perf/pipeline_cuda.cu: the plain-CUDA side of `tandem-bench pipeline` (pipeline_cuda.h): the
 * device-filling kernel of the compute-bound load, which tandem's side launches on its own streams
 * too, and the hand-written double-buffered pipeline tandem is compared with. Its scale kernel is
 * shaped like gpu/kernels.cu's (the same grid-stride loop, 256-thread blocks, at most 8 blocks per
 * SM, launched with cudaLaunchKernelEx), so that both sides run the same work.
 */
#include "pipeline_cuda.h"

#include <cerrno>
#include <cstdio>
#include <new>

#include <cuda_runtime.h>

#include "cuda_common.cuh"

namespace
{

/* ---- kernels ---------------------------------------------------------------------------- */

constexpr unsigned BUSY_BLOCK = 1024;
constexpr unsigned SCALE_BLOCK = 256; // TDM__SCALE_BLOCK

// Every thread spins: a block keeps its SM's thread slots until its last thread ends. With out
// set, block 0 then copies the batch's stamp (PIPE_CUDA_STAMP_BYTES) from in to out.
__global__ void busy_kernel(uint32_t ns, float *out, const float *in)
{
	const uint64_t t0 = globaltimer();
	while (globaltimer() - t0 < ns) {
	}
	if (out != nullptr && blockIdx.x == 0 &&
	    threadIdx.x < PIPE_CUDA_STAMP_BYTES / sizeof(float))
		out[threadIdx.x] = in[threadIdx.x];
}

__global__ void scale_kernel(float *y, const float *x, float a, size_t n)
{
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		y[i] = a * x[i];
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

cudaError_t launch_busy(cudaStream_t s, const shape &sh, uint32_t ns, void *out, const void *in)
{
	const unsigned per_sm = sh.busy_per_sm > 0 ? (unsigned)sh.busy_per_sm : 1;
	const cudaLaunchConfig_t c = config(s, (unsigned)sh.sms * per_sm, BUSY_BLOCK);
	return cudaLaunchKernelEx(&c, busy_kernel, ns, static_cast<float *>(out),
	                          static_cast<const float *>(in));
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

extern "C" int pipe_cuda_busy(void *stream, uint32_t ns, void *out, const void *in)
{
	shape sh;
	int rc = device_shape(&sh);

	if (rc != 0)
		return rc;
	CUDA_TRY(launch_busy(static_cast<cudaStream_t>(stream), sh, ns, out, in));
	return 0;
}

/* ---- the double-buffered pipeline --------------------------------------------------------- */

struct pipe_cuda_db {
	pipe_cuda_work w;
	shape sh;
	cudaStream_t s[2] = {nullptr, nullptr};
	void *hin[2] = {nullptr, nullptr}, *hout[2] = {nullptr, nullptr};
	void *din[2] = {nullptr, nullptr}, *dout[2] = {nullptr, nullptr};
};

namespace
{

int enqueue(pipe_cuda_db *db, int k)
{
	const pipe_cuda_work &w = db->w;
	cudaStream_t s = db->s[k];

	CUDA_TRY(cudaMemcpyAsync(db->din[k], db->hin[k], w.bytes, cudaMemcpyHostToDevice, s));
	if (w.busy_ns == 0) {
		CUDA_TRY(launch_scale(s, db->sh, static_cast<float *>(db->dout[k]),
		                      static_cast<const float *>(db->din[k]),
		                      PIPE_CUDA_TRIVIAL_BYTES / sizeof(float)));
	} else if (w.stamp_in_kernel) {
		CUDA_TRY(launch_busy(s, db->sh, w.busy_ns, db->dout[k], db->din[k]));
	} else {
		CUDA_TRY(launch_busy(s, db->sh, w.busy_ns, nullptr, nullptr));
		CUDA_TRY(cudaMemcpyAsync(db->dout[k], db->din[k], PIPE_CUDA_STAMP_BYTES,
		                         cudaMemcpyDeviceToDevice, s));
	}
	CUDA_TRY(cudaMemcpyAsync(db->hout[k], db->dout[k], w.bytes, cudaMemcpyDeviceToHost, s));
	return 0;
}

} // namespace

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

extern "C" int pipe_cuda_db_run(struct pipe_cuda_db *db, uint64_t batches, uint64_t *elapsed_ns)
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
			int rc = enqueue(db, k);
			if (rc != 0)
				return rc;
		}
	}
	*elapsed_ns = now_ns() - t0;
	return 0;
}
