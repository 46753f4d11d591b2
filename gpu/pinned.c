/*
 * The pinned host memory pool (placeholder until the pool lands: plain host_alloc per block).
 */
#include <errno.h>

#include "gpu_internal.h"

int tdm__pinned_init(struct tdm_gpu *gpu)
{
	(void)gpu;
	return 0;
}

void tdm__pinned_fini(struct tdm_gpu *gpu)
{
	(void)gpu;
}

int tdm__pinned_owns(struct tdm_gpu *gpu, const void *p)
{
	(void)gpu;
	(void)p;
	return 0;
}

/* Placeholder: one host_alloc per block, until the pool lands. */
int tdm_pinned_alloc(tdm_gpu *gpu, size_t bytes, void **out)
{
	if (gpu == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	return gpu->ops->host_alloc(gpu->b, bytes, out);
}

int tdm_pinned_free(tdm_gpu *gpu, void *p)
{
	if (gpu == NULL || p == NULL)
		return -EINVAL;
	gpu->ops->host_free(gpu->b, p);
	return 0;
}
