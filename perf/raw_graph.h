// SPDX-License-Identifier: MIT
/*
 * perf/raw_graph.h: the plain-CUDA baselines of `tandem-bench gpu-graph` (raw_graph.cu, compiled
 * by nvcc only in CUDA builds, TANDEM_HAVE_CUDA), as C entry points for bench_gpu_graph.c.
 * Nothing here names a CUDA type, so the C driver stays free of CUDA headers; call these only
 * under TANDEM_HAVE_CUDA.
 *
 * Everything runs on device 0 with the runtime's primary context (the one tandem's cuda backend
 * uses), on non-blocking streams created and destroyed inside each call; captures are
 * thread-local (cudaStreamCaptureModeThreadLocal), as tandem's. The kernels are 1x1 and are
 * launched with cudaLaunchKernelEx, as tandem's launch_spin: for ns > 0 one thread spins on
 * %globaltimer until ns nanoseconds passed since it started; for ns = 0 an empty kernel. Every
 * function returns 0 or a negative errno (-EINVAL: a bad parameter; -ENODEV: no device; -ENOMEM;
 * -EIO: any other CUDA error, or an update the driver refused) and on failure leaves a message
 * for raw_graph_error(). No timing is asserted: these are floors to compare tandem with.
 *
 * Timing: CLOCK_MONOTONIC on the host. A "rep" is one unit of work (a chain, a DAG) from just
 * before its first launch call to just after cudaStreamSynchronize returned; reps run back to
 * back on one thread, after `warmup` untimed ones. per_s = reps / (time from the first timed
 * rep's start to the last one's end).
 *
 * What each function measures:
 *
 *   raw_graph_chain_stream (a)   K spin kernels of ns on one stream, launched one by one, then
 *                                cudaStreamSynchronize; R reps. out: chains/s, median chain
 *                                round trip.
 *   raw_graph_chain_graph  (b)   the same chain captured once into a graph and instantiated
 *                                (untimed), then R reps of cudaGraphLaunch + cudaStreamSynchronize.
 *                                out: chains/s, median round trip. setup (may be NULL): medians
 *                                over setup_trials fresh graphs of capture, instantiate, the
 *                                first replay of a new executable graph with and without a
 *                                prior cudaGraphUpload, the upload itself, cudaGraphExecUpdate
 *                                with a recaptured chain of other kernel durations (same
 *                                topology: updated in place), and cudaGraphExecDestroy.
 *   raw_graph_streams      (c)   S threads, one stream each; each replays its own executable
 *                                graph of the chain (use_graph != 0) or launches the chain
 *                                kernel by kernel (use_graph == 0), R times, each rep followed
 *                                by cudaStreamSynchronize. Setup (streams, capture,
 *                                instantiation, warm-up) is untimed; the time runs from the
 *                                start signal to the last thread's last sync. out: total
 *                                kernels/s and chains/s over all streams.
 *   raw_graph_diamond      (d)   a fan-out/fan-in DAG: a root kernel, `branches` kernels
 *                                (4 typical) each on a stream of its own forked from the root
 *                                by an event + cudaStreamWaitEvent, joined back by one event
 *                                each onto the root's stream, then a join kernel; each kernel
 *                                spins ns. Three rates, R reps each with a sync on the root's
 *                                stream: `forked` (the DAG on branches + 1 streams), `serial`
 *                                (the same branches + 2 kernels on one stream), `graph` (the
 *                                forked DAG captured once, replayed with cudaGraphLaunch).
 *                                The round trip's floor is 3 x ns forked, (branches + 2) x ns
 *                                serial.
 */
#ifndef TANDEM_PERF_RAW_GRAPH_H
#define TANDEM_PERF_RAW_GRAPH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The parameters every baseline takes; each reads the fields it names. */
struct raw_graph_params {
	unsigned kernels;      /* K: kernels per chain, >= 1 (a, b, c) */
	uint32_t ns;           /* each kernel's spin; 0: the empty kernel (all) */
	uint64_t warmup;       /* untimed reps before the timed ones (all; c: per thread) */
	uint64_t reps;         /* R: timed reps, >= 1 (all; c: per thread) */
	unsigned streams;      /* S: threads and streams, 1..1024 (c); 16 typical */
	unsigned branches;     /* the DAG's width, 1..64 (d); 0 means 4 */
	unsigned setup_trials; /* samples of each setup cost (b); 0 means 16 */
};

/* A rate and the round trip of one rep. */
struct raw_graph_rate {
	uint64_t reps;       /* timed reps */
	uint64_t elapsed_ns; /* wall time of the timed reps, back to back */
	double per_s;        /* reps per second: chains/s or DAGs/s */
	uint64_t median_ns;  /* median round trip of one rep: first launch call to sync's return */
	uint64_t min_ns;     /* the fastest rep */
};

/* What a graph costs to make, each the median over setup_trials samples (b). */
struct raw_graph_setup {
	unsigned trials;             /* samples taken of each */
	uint64_t capture_ns;         /* cudaStreamBeginCapture, K launches, cudaStreamEndCapture */
	uint64_t instantiate_ns;     /* cudaGraphInstantiate(flags 0) of the captured chain */
	uint64_t first_launch_ns;    /* first cudaGraphLaunch + sync of a new executable graph */
	uint64_t upload_ns;          /* cudaGraphUpload + sync of a new executable graph */
	uint64_t uploaded_launch_ns; /* first cudaGraphLaunch + sync after that upload */
	uint64_t update_ns;          /* cudaGraphExecUpdate (the call alone) to a recaptured chain
	                              * whose kernels spin ns + 1 (ns > 0; empty kernels stay
	                              * empty), alternating with ns: same topology, in place */
	uint64_t exec_destroy_ns;    /* cudaGraphExecDestroy of an idle executable graph */
};

/* Totals over all streams (c). */
struct raw_graph_multi {
	unsigned streams;     /* S */
	uint64_t elapsed_ns;  /* start signal to the last thread's last sync */
	double kernels_per_s; /* S x R x K / elapsed */
	double chains_per_s;  /* S x R / elapsed */
};

/* The fan-out/fan-in DAG's three forms (d). */
struct raw_graph_dag {
	unsigned branches; /* the width used */
	struct raw_graph_rate forked, serial, graph;
};

/* What the calling thread's last failed call said; "" when none failed. */
const char *raw_graph_error(void);

/* (a) K kernels launched one by one on one stream + sync, R times. */
int raw_graph_chain_stream(const struct raw_graph_params *p, struct raw_graph_rate *out);
/* (b) the chain as one graph, replayed R times; setup may be NULL (not measured then). */
int raw_graph_chain_graph(const struct raw_graph_params *p, struct raw_graph_rate *out,
                          struct raw_graph_setup *setup);
/* (c) S threads x streams, each replaying its own graph of the chain (use_graph != 0) or
 * launching the chain kernel by kernel, R times with a sync each. */
int raw_graph_streams(const struct raw_graph_params *p, int use_graph, struct raw_graph_multi *out);
/* (d) the DAG forked over streams, serialised on one, and captured as a graph. */
int raw_graph_diamond(const struct raw_graph_params *p, struct raw_graph_dag *out);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_PERF_RAW_GRAPH_H */
