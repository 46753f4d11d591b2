// SPDX-License-Identifier: MIT
/*
 * perf/raw_graph.cu: the plain-CUDA baselines of gpu-graph (raw_graph.h): chains of spin kernels
 * launched one by one or replayed as CUDA graphs, on one stream and on many, and a fan-out/fan-in
 * DAG over streams. Its kernels are its own, shaped like those of gpu/backend/kernels.cu and
 * perf/raw_cuda.cu (1x1, cudaLaunchKernelEx, the spin timed on %globaltimer), so that both sides
 * launch the same work.
 */
#include "raw_graph.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_common.cuh"

namespace
{

/* ---- launches (the kernels and launch(): cuda_common.cuh) ------------------------------- */

cudaError_t launch_chain(cudaStream_t s, unsigned k, uint32_t ns)
{
	for (unsigned i = 0; i < k; i++) {
		const cudaError_t e = launch(s, ns);
		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

/* ---- resources, released in the safe order whatever failed ------------------------------ */

struct stream_res {
	cudaStream_t s = nullptr;
	stream_res() = default;
	stream_res(const stream_res &) = delete;
	stream_res &operator=(const stream_res &) = delete;
	~stream_res()
	{
		if (s != nullptr) {
			(void)cudaStreamSynchronize(s);
			(void)cudaStreamDestroy(s);
			(void)cudaGetLastError();
		}
	}
	int create()
	{
		CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
		return 0;
	}
};

struct event_res {
	cudaEvent_t e = nullptr;
	event_res() = default;
	event_res(const event_res &) = delete;
	event_res &operator=(const event_res &) = delete;
	~event_res()
	{
		if (e != nullptr) {
			(void)cudaEventDestroy(e);
			(void)cudaGetLastError();
		}
	}
	int create()
	{
		CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
		return 0;
	}
};

struct graph_res {
	cudaGraph_t g = nullptr;
	graph_res() = default;
	graph_res(const graph_res &) = delete;
	graph_res &operator=(const graph_res &) = delete;
	~graph_res()
	{
		reset();
	}
	void reset()
	{
		if (g != nullptr) {
			(void)cudaGraphDestroy(g);
			(void)cudaGetLastError();
			g = nullptr;
		}
	}
};

// Every user synchronises the streams it replayed on before it returns, so an executable graph
// is idle when destroyed (the driver would free one in flight at its completion anyway).
struct exec_res {
	cudaGraphExec_t x = nullptr;
	exec_res() = default;
	exec_res(const exec_res &) = delete;
	exec_res &operator=(const exec_res &) = delete;
	~exec_res()
	{
		reset();
	}
	void reset()
	{
		if (x != nullptr) {
			(void)cudaGraphExecDestroy(x);
			(void)cudaGetLastError();
			x = nullptr;
		}
	}
};

// Sample storage with a clean -ENOMEM rather than an exception.
struct samples {
	uint64_t *v = nullptr;
	uint64_t n = 0;
	samples() = default;
	samples(const samples &) = delete;
	samples &operator=(const samples &) = delete;
	~samples()
	{
		free(v);
	}
	int alloc(uint64_t count)
	{
		if (count > SIZE_MAX / sizeof(uint64_t))
			return fail_msg(-ENOMEM, "too many samples");
		v = static_cast<uint64_t *>(malloc((size_t)(count ? count : 1) * sizeof(uint64_t)));
		if (v == nullptr)
			return fail_msg(-ENOMEM, "out of memory for samples");
		n = count;
		return 0;
	}
	// Sorts in place.
	uint64_t median()
	{
		if (n == 0)
			return 0;
		std::sort(v, v + n);
		return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	}
	uint64_t min() const
	{
		return n == 0 ? 0 : *std::min_element(v, v + n);
	}
};

/* ---- shared steps ----------------------------------------------------------------------- */

// Device 0 current, and both kernels loaded into its context (lazy loading would otherwise load
// them inside the first timed rep, or inside a capture).
int open_device(cudaStream_t s)
{
	CUDA_TRY(launch(s, 0));
	CUDA_TRY(launch(s, 1));
	CUDA_TRY(cudaStreamSynchronize(s));
	return 0;
}

int set_device()
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
		(void)cudaGetLastError();
		return fail_msg(-ENODEV, "no CUDA device");
	}
	CUDA_TRY(cudaSetDevice(0));
	return 0;
}

int check(const raw_graph_params *p, bool chain)
{
	if (p == nullptr || p->reps == 0 || (chain && p->kernels == 0))
		return fail_msg(-EINVAL, "raw_graph: bad parameters");
	return 0;
}

// Captures what body(s) enqueues on s, thread-local. The capture is ended whatever body did.
template <typename F> int capture(cudaStream_t s, F body, cudaGraph_t *out)
{
	cudaGraph_t g = nullptr;

	*out = nullptr;
	CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	const int rc = body(s);
	const cudaError_t e = cudaStreamEndCapture(s, &g);
	if (rc != 0) {
		if (g != nullptr)
			(void)cudaGraphDestroy(g);
		(void)cudaGetLastError();
		return rc;
	}
	if (e != cudaSuccess)
		return fail("cudaStreamEndCapture", e);
	if (g == nullptr)
		return fail_msg(-EIO, "cudaStreamEndCapture: no graph");
	*out = g;
	return 0;
}

int capture_chain(cudaStream_t s, unsigned k, uint32_t ns, cudaGraph_t *out)
{
	return capture(
	    s,
	    [&](cudaStream_t cs) {
		    CUDA_TRY(launch_chain(cs, k, ns));
		    return 0;
	    },
	    out);
}

/*
 * `warmup` untimed reps, then `reps` timed ones, each rep() one round trip; out gets the rate
 * over the timed ones and their median and fastest round trip.
 */
template <typename F> int time_reps(const raw_graph_params *p, F rep, raw_graph_rate *out)
{
	samples t;
	int rc;

	*out = raw_graph_rate{};
	rc = t.alloc(p->reps);
	if (rc != 0)
		return rc;
	for (uint64_t i = 0; i < p->warmup; i++) {
		rc = rep();
		if (rc != 0)
			return rc;
	}
	const uint64_t start = now_ns();
	for (uint64_t i = 0; i < p->reps; i++) {
		const uint64_t t0 = now_ns();
		rc = rep();
		const uint64_t t1 = now_ns();
		if (rc != 0)
			return rc;
		t.v[i] = t1 - t0;
	}
	const uint64_t elapsed = now_ns() - start;
	out->reps = p->reps;
	out->elapsed_ns = elapsed;
	out->per_s = elapsed > 0 ? (double)p->reps * 1e9 / (double)elapsed : 0.0;
	out->min_ns = t.min();
	out->median_ns = t.median();
	return 0;
}

/* ---- (b) setup costs -------------------------------------------------------------------- */

int measure_setup(const raw_graph_params *p, cudaStream_t s, raw_graph_setup *out)
{
	const unsigned trials = p->setup_trials ? p->setup_trials : 16;
	const uint32_t alt = p->ns == 0 ? 0 : p->ns + 1;
	samples cap, inst, first, up, upfirst, upd, destroy;
	exec_res ux; // the executable graph the updates go to
	int rc;

	*out = raw_graph_setup{};
	if ((rc = cap.alloc(trials)) != 0 || (rc = inst.alloc(trials)) != 0 ||
	    (rc = first.alloc(trials)) != 0 || (rc = up.alloc(trials)) != 0 ||
	    (rc = upfirst.alloc(trials)) != 0 || (rc = upd.alloc(trials)) != 0 ||
	    (rc = destroy.alloc(trials)) != 0)
		return rc;
	for (unsigned t = 0; t < trials; t++) {
		graph_res g;
		exec_res x;
		uint64_t t0;

		// Capture, instantiate, first replay without an upload.
		t0 = now_ns();
		rc = capture_chain(s, p->kernels, p->ns, &g.g);
		cap.v[t] = now_ns() - t0;
		if (rc != 0)
			return rc;
		t0 = now_ns();
		CUDA_TRY(cudaGraphInstantiate(&x.x, g.g, 0));
		inst.v[t] = now_ns() - t0;
		t0 = now_ns();
		CUDA_TRY(cudaGraphLaunch(x.x, s));
		CUDA_TRY(cudaStreamSynchronize(s));
		first.v[t] = now_ns() - t0;
		// Idle now: the destroy's own cost.
		t0 = now_ns();
		(void)cudaGraphExecDestroy(x.x);
		destroy.v[t] = now_ns() - t0;
		x.x = nullptr;

		// Instantiate again, upload, then the first replay.
		CUDA_TRY(cudaGraphInstantiate(&x.x, g.g, 0));
		t0 = now_ns();
		CUDA_TRY(cudaGraphUpload(x.x, s));
		CUDA_TRY(cudaStreamSynchronize(s));
		up.v[t] = now_ns() - t0;
		t0 = now_ns();
		CUDA_TRY(cudaGraphLaunch(x.x, s));
		CUDA_TRY(cudaStreamSynchronize(s));
		upfirst.v[t] = now_ns() - t0;
		x.reset();

		// Update in place: the first trial's graph becomes the updated executable graph;
		// each later trial recaptures with the other duration (untimed) and updates it.
		if (t == 0) {
			CUDA_TRY(cudaGraphInstantiate(&ux.x, g.g, 0));
		}
		graph_res ng;
		rc = capture_chain(s, p->kernels, t % 2 == 0 ? alt : p->ns, &ng.g);
		if (rc != 0)
			return rc;
		cudaGraphExecUpdateResultInfo info = {};
		t0 = now_ns();
		const cudaError_t e = cudaGraphExecUpdate(ux.x, ng.g, &info);
		upd.v[t] = now_ns() - t0;
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			snprintf(last_error, sizeof(last_error),
			         "cudaGraphExecUpdate: %s (result %d)", cudaGetErrorString(e),
			         (int)info.result);
			return errno_of(e) == -ENOMEM ? -ENOMEM : -EIO;
		}
		// The updated graph runs (and its kernels are the new ones): replay it once.
		CUDA_TRY(cudaGraphLaunch(ux.x, s));
		CUDA_TRY(cudaStreamSynchronize(s));
	}
	out->trials = trials;
	out->capture_ns = cap.median();
	out->instantiate_ns = inst.median();
	out->first_launch_ns = first.median();
	out->upload_ns = up.median();
	out->uploaded_launch_ns = upfirst.median();
	out->update_ns = upd.median();
	out->exec_destroy_ns = destroy.median();
	return 0;
}

/* ---- (c) many streams ------------------------------------------------------------------- */

struct multi_state {
	const raw_graph_params *p;
	bool use_graph;
	std::mutex m;
	std::condition_variable cv;
	unsigned ready = 0, done = 0;
	bool go = false;
	int err = 0;
	char msg[256] = "";

	// With m held: the first error wins; its message is the failing thread's last_error.
	void record(int rc)
	{
		if (rc != 0 && err == 0) {
			err = rc;
			snprintf(msg, sizeof(msg), "%s", last_error);
		}
	}
};

// Everything a thread needs, made before the start signal.
int multi_setup(multi_state *ms, stream_res &s, graph_res &g, exec_res &x)
{
	const raw_graph_params *p = ms->p;
	int rc;

	CUDA_TRY(cudaSetDevice(0));
	if ((rc = s.create()) != 0 || (rc = open_device(s.s)) != 0)
		return rc;
	if (ms->use_graph) {
		rc = capture_chain(s.s, p->kernels, p->ns, &g.g);
		if (rc != 0)
			return rc;
		CUDA_TRY(cudaGraphInstantiate(&x.x, g.g, 0));
	}
	return 0;
}

int multi_rep(multi_state *ms, cudaStream_t s, cudaGraphExec_t x)
{
	if (ms->use_graph)
		CUDA_TRY(cudaGraphLaunch(x, s));
	else
		CUDA_TRY(launch_chain(s, ms->p->kernels, ms->p->ns));
	CUDA_TRY(cudaStreamSynchronize(s));
	return 0;
}

void multi_thread(multi_state *ms)
{
	const raw_graph_params *p = ms->p;
	stream_res s;
	graph_res g;
	exec_res x; // after s: destroyed before the stream is
	int rc;

	last_error[0] = '\0';
	rc = multi_setup(ms, s, g, x);
	for (uint64_t i = 0; rc == 0 && i < p->warmup; i++)
		rc = multi_rep(ms, s.s, x.x);
	{
		std::unique_lock<std::mutex> l(ms->m);
		ms->record(rc);
		ms->ready++;
		ms->cv.notify_all();
		ms->cv.wait(l, [&] { return ms->go; });
		if (ms->err != 0)
			rc = -ECANCELED; // someone's set-up failed: no run
	}
	for (uint64_t i = 0; rc == 0 && i < p->reps; i++)
		rc = multi_rep(ms, s.s, x.x);
	std::lock_guard<std::mutex> l(ms->m);
	if (rc != -ECANCELED)
		ms->record(rc);
	ms->done++;
	ms->cv.notify_all();
}

/* ---- (d) the diamond -------------------------------------------------------------------- */

struct diamond_res {
	stream_res root;
	std::vector<stream_res> br;
	event_res fork;
	std::vector<event_res> join;

	explicit diamond_res(unsigned n) : br(n), join(n)
	{
	}
};

// Root kernel, fork, one kernel per branch stream, join back, join kernel: all enqueued from s
// (the root stream, or a capturing one).
int diamond_enqueue(diamond_res &d, cudaStream_t s, uint32_t ns)
{
	CUDA_TRY(launch(s, ns));
	CUDA_TRY(cudaEventRecord(d.fork.e, s));
	for (size_t i = 0; i < d.br.size(); i++) {
		CUDA_TRY(cudaStreamWaitEvent(d.br[i].s, d.fork.e, 0));
		CUDA_TRY(launch(d.br[i].s, ns));
		CUDA_TRY(cudaEventRecord(d.join[i].e, d.br[i].s));
	}
	for (size_t i = 0; i < d.join.size(); i++)
		CUDA_TRY(cudaStreamWaitEvent(s, d.join[i].e, 0));
	CUDA_TRY(launch(s, ns));
	return 0;
}

} // namespace

/* ---- entry points ----------------------------------------------------------------------- */

extern "C" const char *raw_graph_error(void)
{
	return last_error;
}

extern "C" int raw_graph_chain_stream(const struct raw_graph_params *p, struct raw_graph_rate *out)
{
	stream_res s;
	int rc;

	last_error[0] = '\0';
	if (out == nullptr)
		return fail_msg(-EINVAL, "raw_graph: bad parameters");
	if ((rc = check(p, true)) != 0 || (rc = set_device()) != 0 || (rc = s.create()) != 0 ||
	    (rc = open_device(s.s)) != 0)
		return rc;
	return time_reps(
	    p,
	    [&] {
		    CUDA_TRY(launch_chain(s.s, p->kernels, p->ns));
		    CUDA_TRY(cudaStreamSynchronize(s.s));
		    return 0;
	    },
	    out);
}

extern "C" int raw_graph_chain_graph(const struct raw_graph_params *p, struct raw_graph_rate *out,
                                     struct raw_graph_setup *setup)
{
	stream_res s;
	graph_res g;
	exec_res x;
	int rc;

	last_error[0] = '\0';
	if (out == nullptr)
		return fail_msg(-EINVAL, "raw_graph: bad parameters");
	if ((rc = check(p, true)) != 0 || (rc = set_device()) != 0 || (rc = s.create()) != 0 ||
	    (rc = open_device(s.s)) != 0)
		return rc;
	if (setup != nullptr && (rc = measure_setup(p, s.s, setup)) != 0)
		return rc;
	if ((rc = capture_chain(s.s, p->kernels, p->ns, &g.g)) != 0)
		return rc;
	CUDA_TRY(cudaGraphInstantiate(&x.x, g.g, 0));
	return time_reps(
	    p,
	    [&] {
		    CUDA_TRY(cudaGraphLaunch(x.x, s.s));
		    CUDA_TRY(cudaStreamSynchronize(s.s));
		    return 0;
	    },
	    out);
}

extern "C" int raw_graph_streams(const struct raw_graph_params *p, int use_graph,
                                 struct raw_graph_multi *out)
{
	int rc;

	last_error[0] = '\0';
	if (out == nullptr || p == nullptr || p->streams == 0 || p->streams > 1024)
		return fail_msg(-EINVAL, "raw_graph: bad parameters");
	*out = raw_graph_multi{};
	if ((rc = check(p, true)) != 0 || (rc = set_device()) != 0)
		return rc;
	multi_state ms;
	ms.p = p;
	ms.use_graph = use_graph != 0;
	std::vector<std::thread> threads;
	threads.reserve(p->streams);
	// Built without exceptions in mind: a thread that cannot start terminates the program,
	// which for a benchmark's set-up is as good as an error code (as raw_cuda.cu).
	for (unsigned i = 0; i < p->streams; i++)
		threads.emplace_back(multi_thread, &ms);
	uint64_t t0, t1;
	{
		std::unique_lock<std::mutex> l(ms.m);
		ms.cv.wait(l, [&] { return ms.ready == p->streams; });
		t0 = now_ns();
		ms.go = true;
		ms.cv.notify_all();
		ms.cv.wait(l, [&] { return ms.done == p->streams; });
		t1 = now_ns();
	}
	for (std::thread &t : threads)
		t.join();
	if (ms.err != 0) {
		snprintf(last_error, sizeof(last_error), "%s", ms.msg);
		return ms.err;
	}
	const double elapsed = (double)(t1 - t0);
	out->streams = p->streams;
	out->elapsed_ns = t1 - t0;
	if (elapsed > 0) {
		const double chains = (double)p->streams * (double)p->reps;
		out->chains_per_s = chains * 1e9 / elapsed;
		out->kernels_per_s = chains * (double)p->kernels * 1e9 / elapsed;
	}
	return 0;
}

extern "C" int raw_graph_diamond(const struct raw_graph_params *p, struct raw_graph_dag *out)
{
	int rc;

	last_error[0] = '\0';
	if (out == nullptr || p == nullptr || p->branches > 64)
		return fail_msg(-EINVAL, "raw_graph: bad parameters");
	*out = raw_graph_dag{};
	if ((rc = check(p, false)) != 0 || (rc = set_device()) != 0)
		return rc;
	const unsigned n = p->branches ? p->branches : 4;
	out->branches = n;
	diamond_res d(n);
	if ((rc = d.root.create()) != 0 || (rc = d.fork.create()) != 0)
		return rc;
	for (unsigned i = 0; i < n; i++)
		if ((rc = d.br[i].create()) != 0 || (rc = d.join[i].create()) != 0)
			return rc;
	if ((rc = open_device(d.root.s)) != 0)
		return rc;
	const uint32_t ns = p->ns;
	cudaStream_t root = d.root.s;

	rc = time_reps(
	    p,
	    [&] {
		    const int r = diamond_enqueue(d, root, ns);
		    if (r != 0)
			    return r;
		    CUDA_TRY(cudaStreamSynchronize(root));
		    return 0;
	    },
	    &out->forked);
	if (rc != 0)
		return rc;
	rc = time_reps(
	    p,
	    [&] {
		    CUDA_TRY(launch_chain(root, n + 2, ns));
		    CUDA_TRY(cudaStreamSynchronize(root));
		    return 0;
	    },
	    &out->serial);
	if (rc != 0)
		return rc;
	// The same DAG, captured from the root stream: the branch streams join the capture through
	// the fork event and leave it through the join events.
	graph_res g;
	exec_res x;
	rc = capture(
	    root, [&](cudaStream_t cs) { return diamond_enqueue(d, cs, ns); }, &g.g);
	if (rc != 0)
		return rc;
	CUDA_TRY(cudaGraphInstantiate(&x.x, g.g, 0));
	rc = time_reps(
	    p,
	    [&] {
		    CUDA_TRY(cudaGraphLaunch(x.x, root));
		    CUDA_TRY(cudaStreamSynchronize(root));
		    return 0;
	    },
	    &out->graph);
	// x is destroyed before d's streams are synchronised; the driver frees it once idle, and it
	// is idle already: every rep ended with a sync.
	return rc;
}
