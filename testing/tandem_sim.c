// SPDX-License-Identifier: MIT
/*
 * The test and benchmark hooks (tandem_sim.h): the backend's test operations behind the same
 * launch gate as the library's own work, and the GPU layer's diagnostic switches. Part of the
 * tree, not of the API: it reaches the layer's structs through gpu/gpu_internal.h, and is built
 * into tandem_testing over tandem_static, never into the shared library (docs/design/layout.md).
 */
#include <errno.h>
#include <semaphore.h>
#include <string.h>

#include "gpu/dsched.h"
#include "gpu/gpu_internal.h"
#include "gpu/stamps.h"
#include "tandem_sim.h"

#define B(s) ((s)->dev->gpu)

int tdm_launch_spin(tdm_stream *s, uint32_t ns)
{
	TDM__LAUNCH(s, TDM__SPAN_KERNEL, 0, B(s)->ops->launch_spin(B(s)->b, s->bs, ns));
}

int tdm_launch_busy(tdm_stream *s, uint32_t ns)
{
	TDM__LAUNCH(s, TDM__SPAN_KERNEL, 0, B(s)->ops->launch_busy(B(s)->b, s->bs, ns));
}

int tdm_launch_fault(tdm_stream *s)
{
	TDM__LAUNCH(s, TDM__SPAN_KERNEL, 0, B(s)->ops->launch_fault(B(s)->b, s->bs));
}

int tdm_sim_inject(tdm_stream *s, tdm_sim_fault fault)
{
	if (s == NULL || B(s)->ops->sim_inject == NULL)
		return -EINVAL;
	return B(s)->ops->sim_inject(B(s)->b, s->bs, fault);
}

/* On the stream's thread: holds the stream until the gate opens. sem_wait pairs with the
 * opener's sem_post: what the test did before the open happens before the work behind it. */
static void gate_pass(void *arg)
{
	tdm_sim_gate *g = arg;
	while (sem_wait(&g->open) != 0 && errno == EINTR) {
	}
}

int tdm_sim_gate_close(tdm_stream *s, tdm_sim_gate *g)
{
	if (s == NULL || g == NULL || !tdm__lease_held(s) || B(s)->ops->sim_inject == NULL)
		return -EINVAL;
	/* Relaxed: the capture is this thread's own (it began it), or none. */
	if (atomic_load_explicit(&s->cap, memory_order_relaxed) != NULL)
		return -EBUSY;
	if (sem_init(&g->open, 0, 0) != 0)
		return -EINVAL;
	return tdm__enqueued(s, B(s)->ops->host_fn(B(s)->b, s->bs, gate_pass, g));
}

int tdm_sim_gate_open(tdm_sim_gate *g)
{
	if (g == NULL)
		return -EINVAL;
	return sem_post(&g->open) == 0 ? 0 : -errno;
}

int tdm_dsched_sim_inject(tdm_dsched *h, tdm_sim_fault fault)
{
	struct tdm__dsched *ds = tdm__dsched_of(h);
	if (ds == NULL || fault != TDM_SIM_FAULT_STICKY || ds->gpu->ops->sim_inject == NULL)
		return -EINVAL;
	return ds->gpu->ops->sim_inject(ds->gpu->b, ds->bs, fault);
}

const void *tdm_lease_stream(const tdm_stream *s)
{
	return s != NULL && tdm__lease_held(s) ? (const void *)s->st : NULL;
}

int tdm_gpu_debug(tdm_gpu *h, const char *lease_balance, const char *worker_watch)
{
	int balance = TDM__BALANCE_SLOW;
	bool direct = true;
	struct tdm__gpu *gpu = tdm__gpu_find(h);
	/* Acquire: pairs with create's publication of the word. Set before the layer is used
	 * (testing/tandem_sim.h): no gate. */
	if (gpu == NULL ||
	    atomic_load_explicit(&gpu->hobj.h, memory_order_acquire) != (uint64_t)(uintptr_t)h)
		return -EINVAL;
	if (lease_balance != NULL && strcmp(lease_balance, "never") == 0)
		balance = TDM__BALANCE_NEVER;
	else if (lease_balance != NULL && strcmp(lease_balance, "always") == 0)
		balance = TDM__BALANCE_ALWAYS;
	else if (lease_balance != NULL)
		return -EINVAL;
	if (worker_watch != NULL && strcmp(worker_watch, "0") == 0)
		direct = false;
	else if (worker_watch != NULL && strcmp(worker_watch, "1") != 0)
		return -EINVAL;
	gpu->balance = balance;
	gpu->direct = direct;
	return 0;
}
