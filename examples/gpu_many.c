/*
 * Ten thousand concurrent tasks, each with its own chain of GPU work: a short kernel, an await,
 * a second kernel, an await. All are in flight at once on a handful of pooled streams; no
 * thread blocks on any of them. Runs on the simulator where there is no GPU.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"
#include "tandem_gpu.h"
#include "tandem_sim.h" /* tdm_launch_spin, a kernel of a given length (tandem_testing) */

#define TASKS 10000

static atomic_uint finished, failed;

struct chain {
	tdm_gpu *gpu;
	tdm_stream *s;
	unsigned id;
};

static int chain_run(tdm_task *t, void *arg)
{
	struct chain *c = arg;
	TDM_BEGIN(t);
	if (tdm_stream_lease(c->gpu, (int)(c->id % (unsigned)tdm_gpu_device_count(c->gpu)), 0,
	                     &c->s) != 0) {
		atomic_fetch_add(&failed, 1);
		return -ENODEV;
	}
	tdm_launch_spin(c->s, 10000); /* 10 us */
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	if (tdm_task_result(t) != 0)
		atomic_fetch_add(&failed, 1);
	tdm_launch_spin(c->s, 10000);
	TDM_AWAIT(t, tdm_await_stream(t, c->s));
	if (tdm_task_result(t) != 0)
		atomic_fetch_add(&failed, 1);
	tdm_stream_release(c->s);
	atomic_fetch_add(&finished, 1);
	TDM_END(t);
}

int main(void)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	tdm_gpu_config cfg;
	if (tdm_executor_create(&ex, NULL) != 0)
		return 1;
	tdm_gpu_config_init(&cfg);
	int rc = tdm_gpu_create(&gpu, ex, &cfg);
	if (rc == -ENODEV) {
		printf("no GPU found: running on tandem's GPU simulator\n");
		cfg.backend = TDM_BACKEND_SIM;
		rc = tdm_gpu_create(&gpu, ex, &cfg);
	}
	if (rc != 0) {
		fprintf(stderr, "gpu: %s\n", tdm_strerror(rc));
		return 1;
	}
	struct chain *chains = calloc(TASKS, sizeof(*chains));
	if (chains == NULL)
		return 1;
	uint64_t t0 = tdm_now_ns();
	tdm_group g;
	tdm_group_init(&g, ex);
	for (unsigned i = 0; i < TASKS; i++) {
		chains[i] = (struct chain){.gpu = gpu, .id = i};
		if (tdm_spawn(ex, chain_run, &chains[i], &g) != 0)
			atomic_fetch_add(&failed, 1);
	}
	tdm_group_wait(&g);
	double ms = (double)(tdm_now_ns() - t0) / 1e6;
	printf("%s: %u of %d task chains finished (%u failures) in %.1f ms\n",
	       tdm_gpu_backend_name(gpu), atomic_load(&finished), TASKS, atomic_load(&failed), ms);
	tdm_gpu_destroy(gpu);
	tdm_executor_destroy(ex);
	free(chains);
	return (atomic_load(&finished) == TASKS && atomic_load(&failed) == 0) ? 0 : 1;
}
