// SPDX-License-Identifier: MIT
/*
 * tandem's test and benchmark hooks: kernels that only spin, keep a device busy or trap, faults
 * injected into the simulator, and the GPU layer's diagnostic switches. Built into the static
 * library tandem_testing, which tandem's tests and tandem-bench link; not installed, not part of
 * the API.
 *
 * Every call returns 0 or a negative errno (tdm_strerror).
 */
#ifndef TANDEM_SIM_H
#define TANDEM_SIM_H

#include <semaphore.h>
#include <stdint.h>

#include "tandem_dsched.h"
#include "tandem_gpu.h"
#include "../gpu/backend/sim_fault.h" /* tdm_sim_fault, shared with the backend interface */

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Kernels. Each of them: -EINVAL: s is NULL or released (nothing is enqueued).  -EIO: s's device
 * failed (a trapping kernel, say), or the launch did.  -ENOMEM: no memory to queue it (sim).
 */
/* A kernel that runs about `ns` nanoseconds (0: an empty kernel). */
int tdm_launch_spin(tdm_stream *s, uint32_t ns);
/*
 * A compute-bound kernel: it keeps every SM of the stream's device busy for about `ns`
 * nanoseconds, so such kernels run one after another on a device (1e9/ns of them a second),
 * whichever streams they are on. For benchmarks of work that saturates a device.
 */
int tdm_launch_busy(tdm_stream *s, uint32_t ns);
/* A kernel that traps: a sticky device error, for tests of error handling. */
int tdm_launch_fault(tdm_stream *s);

/* ---- the simulator ---- */

/* -EINVAL: s is NULL or not a sim stream, or fault is unknown. */
int tdm_sim_inject(tdm_stream *s, tdm_sim_fault fault);

/*
 * A gate in a sim stream's order: the work enqueued on s after tdm_sim_gate_close(s, g) waits
 * until tdm_sim_gate_open(g), as behind a kernel that runs until the host lets it end. For tests
 * that need work still queued, or a stream still busy, at a point of their own choosing, so that
 * no clock decides it. The gate is not a launch: no stamp, no span, no count in the metrics.
 * g is the caller's, set up by the close (nothing to free), and must stay alive until the work
 * after it has run (an await of that work completed) or s's device failed (a dead device skips
 * the gate, as it skips every host function). Each closed gate is opened once, before its stream
 * is needed again: a stream's lease is released, and the layer destroyed, only after that work.
 * -EINVAL: s or g is NULL, s is released or not a sim stream.  -EBUSY: s is capturing a graph.
 * -EIO: s's device failed.  -ENOMEM: no memory to queue it.
 */
typedef struct tdm_sim_gate {
	sem_t open;
} tdm_sim_gate;
int tdm_sim_gate_close(tdm_stream *s, tdm_sim_gate *g);
/* Lets the work behind g run (once per close). -EINVAL: g is NULL. */
int tdm_sim_gate_open(tdm_sim_gate *g);

/* A device scheduler on sim (tandem_dsched.h) takes a fault: the next item one of its threads is
 * about to run kills the device instead (TDM_SIM_FAULT_STICKY), as a handler that traps kills a
 * CUDA context. -EINVAL: ds is NULL or not on sim, or another fault (on a GPU no item fails
 * alone: a handler returns, or the context dies). */
int tdm_dsched_sim_inject(tdm_dsched *ds, tdm_sim_fault fault);

/* Which stream a lease is on, as an identity only: the same for every lease of one stream (each
 * lease is a handle of its own). NULL for a NULL or released s. For tests of placement. */
const void *tdm_lease_stream(const tdm_stream *s);

/*
 * The GPU layer's diagnostic switches, for measuring what two of its choices change; set on a
 * layer before any task uses it. lease_balance: when a shared lease may leave its worker's own
 * stream for a less loaded one: "never", "always" (whatever the own stream's pace), or NULL (the
 * default: unless the own stream is quick). worker_watch: whether a worker may watch its own word
 * awaits: "0" (never: every await goes to the poller), "1" or NULL (the default, yes).
 * -EINVAL: gpu is NULL, or a value is none of those (nothing is changed then).
 */
int tdm_gpu_debug(tdm_gpu *gpu, const char *lease_balance, const char *worker_watch);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_SIM_H */
