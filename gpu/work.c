/*
 * Work helpers: copies and the built-in kernels on a leased stream, each through the launch
 * gate, and what an enqueue's -EIO says about the device.
 */
#include <errno.h>

#include "gpu_internal.h"

bool tdm__fail_if_dead(struct tdm_stream *s, int rc)
{
	if (rc != -EIO || s->dev->gpu->ops->stream_query(s->dev->gpu->b, s->bs) != -EIO)
		return false;
	tdm__device_fail(s->dev);
	return true;
}

#define LAUNCH(s, call)                                                                            \
	do {                                                                                       \
		if ((s) == NULL)                                                                   \
			return -EINVAL;                                                            \
		if (atomic_load_explicit(&(s)->dev->failed, memory_order_relaxed))                 \
			return -EIO;                                                               \
		tdm_launch_begin(s);                                                               \
		int rc_ = (call);                                                                  \
		tdm_launch_end(s);                                                                 \
		return tdm__enqueued((s), rc_);                                                    \
	} while (0)

#define B(s) ((s)->dev->gpu)

int tdm_memcpy_async(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind)
{
	if (dst == NULL || src == NULL || kind < TDM_COPY_H2D || kind > TDM_COPY_D2D)
		return -EINVAL;
	if (s != NULL && ((kind == TDM_COPY_H2D && !tdm__is_pinned(B(s), src)) ||
	                  (kind == TDM_COPY_D2H && !tdm__is_pinned(B(s), dst))))
		LAUNCH(s, tdm__memcpy_staged(s, dst, src, bytes, kind));
	LAUNCH(s, B(s)->ops->memcpy_async(B(s)->b, s->bs, dst, src, bytes, kind));
}

int tdm_launch_spin(tdm_stream *s, uint32_t ns)
{
	LAUNCH(s, B(s)->ops->launch_spin(B(s)->b, s->bs, ns));
}

int tdm_launch_busy(tdm_stream *s, uint32_t ns)
{
	LAUNCH(s, B(s)->ops->launch_busy(B(s)->b, s->bs, ns));
}

int tdm_launch_scale(tdm_stream *s, float *y, const float *x, float a, size_t n)
{
	if (y == NULL || x == NULL)
		return -EINVAL;
	LAUNCH(s, B(s)->ops->launch_scale(B(s)->b, s->bs, y, x, a, n));
}

int tdm_launch_fault(tdm_stream *s)
{
	LAUNCH(s, B(s)->ops->launch_fault(B(s)->b, s->bs));
}

int tdm_sim_inject(tdm_stream *s, tdm_sim_fault fault)
{
	if (s == NULL || B(s)->ops->sim_inject == NULL)
		return -EINVAL;
	return B(s)->ops->sim_inject(B(s)->b, s->bs, fault);
}
