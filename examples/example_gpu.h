// SPDX-License-Identifier: MIT
/*
 * The prologue the GPU examples share: an executor and a GPU layer on the real GPU, or on
 * tandem's GPU simulator (saying so) where there is none.
 */
#ifndef TANDEM_EXAMPLE_GPU_H
#define TANDEM_EXAMPLE_GPU_H

#include <errno.h>
#include <stdio.h>

#include "tandem.h"
#include "tandem_gpu.h"

/* 0, or 1 after saying why, with nothing left to destroy. cfg may be NULL (defaults); with
 * TDM_BACKEND_AUTO (cuda unless TANDEM_GPU says otherwise) and no device, the simulator. */
static inline int example_open(tdm_executor **ex, tdm_gpu **gpu, tdm_gpu_config *cfg)
{
	tdm_gpu_config defaults;
	if (cfg == NULL) {
		tdm_gpu_config_init(&defaults);
		cfg = &defaults;
	}
	/* Before any thread starts: a hardware queue for each stream of a set larger than CUDA's
	 * default 8 (one stream per worker on machines of many cores). */
	(void)tdm_gpu_prepare(cfg, 0);
	int rc = tdm_executor_create(ex, NULL);
	if (rc != 0) {
		fprintf(stderr, "tdm_executor_create: %s\n", tdm_strerror(rc));
		return 1;
	}
	rc = tdm_gpu_create(gpu, *ex, cfg);
	if (rc == -ENODEV && cfg->backend == TDM_BACKEND_AUTO) {
		printf("no GPU found: running on tandem's GPU simulator\n");
		cfg->backend = TDM_BACKEND_SIM;
		rc = tdm_gpu_create(gpu, *ex, cfg);
	}
	if (rc != 0) {
		fprintf(stderr, "tdm_gpu_create: %s\n", tdm_strerror(rc));
		tdm_executor_destroy(*ex);
		return 1;
	}
	printf("backend: %s, %d device(s)\n", tdm_gpu_backend_name(*gpu),
	       tdm_gpu_device_count(*gpu));
	return 0;
}

static inline void example_close(tdm_executor *ex, tdm_gpu *gpu)
{
	tdm_gpu_destroy(gpu);
	tdm_executor_destroy(ex);
}

#endif
