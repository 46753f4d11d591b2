/*
 * What a run shows to observers: NVTX ranges and names for a profiler (Nsight Systems), and
 * later tandem's own trace. Every hook is behind tdm__observing(), one relaxed load of a word
 * that stays zero unless an observer is on, so a run nobody watches pays a predictable branch per
 * hook and nothing else (docs/design/observe.md). The executor calls the task and worker hooks,
 * the GPU layer the poller, stream and mark hooks; observe.c dispatches to the observers that are
 * on. Without the NVTX header at build time (TANDEM_HAVE_NVTX unset) the hooks do nothing and
 * tdm__obs stays 0.
 */
#ifndef TDM_BASE_OBSERVE_H
#define TDM_BASE_OBSERVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum {
	TDM__OBS_NVTX = 1u << 0, /* an NVTX tool is attached (NVTX_INJECTION64_PATH set) */
};

/* Which observers are on (TDM__OBS_*); set once by tdm__observe_init (a release store), read
 * relaxed here: a hint whose change only decides whether later hooks are reported. A hook that
 * reports loads it again with acquire (observe.c), which pairs with that store. */
extern _Atomic unsigned tdm__obs;

static inline bool tdm__observing(void)
{
	return atomic_load_explicit(&tdm__obs, memory_order_relaxed) != 0;
}

/* Looks once per process for the observers the environment asks for; any thread, any time
 * (idempotent). tdm_executor_create and tdm_gpu_create call it before they start threads. */
void tdm__observe_init(void);

/* The calling thread's name in the profiler: "tandem worker 3", "tandem poller". */
void tdm__observe_thread(const char *name);

/*
 * A task's run on a worker begins (fn: the task's function, any type cast to this one, for its
 * name) and ends. Begin
 * returns the run's token, which the caller keeps on its own stack and hands to the matching end:
 * runs nest when a task waits for a group on its worker, and the C stack nests them for free. A
 * run is a start/end range, not a push/pop one: a resumed task may run on another thread.
 * The caller calls end exactly when it called begin (it reads tdm__observing() once per run).
 */
uint64_t tdm__observe_run_begin(void (*fn)(void));
void tdm__observe_run_end(uint64_t token);

/* A stream the GPU layer made: native is the backend's own handle (a cudaStream_t) or NULL
 * where there is none (sim), which nothing names. Named "tandem dev D normal|high K". */
void tdm__observe_stream(void *native, int device, bool high, unsigned index);

/* A point event: "tandem: device 0 failed". */
void tdm__observe_mark(const char *what);

#endif /* TDM_BASE_OBSERVE_H */
