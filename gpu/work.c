// SPDX-License-Identifier: MIT
/*
 * Work helpers: copies, memsets and the built-in kernel on a leased stream, each through the
 * launch gate (TDM__LAUNCH), and what an enqueue's -EIO says about the device. The kernels for
 * tests and benchmarks are in testing/tandem_sim.c.
 */
#include <errno.h>

#include "gpu_internal.h"
#include "stamps.h"

bool tdm__fail_if_dead(struct tdm__stream *s, int rc)
{
	if (rc != -EIO || s->dev->gpu->ops->stream_query(s->dev->gpu->b, s->bs) != -EIO)
		return false;
	tdm__device_fail(s->dev);
	return true;
}

#define B(s) ((s)->dev->gpu)

static int copy_span(tdm_copy_kind kind)
{
	return kind == TDM_COPY_H2D   ? TDM__SPAN_H2D
	       : kind == TDM_COPY_D2H ? TDM__SPAN_D2H
	                              : TDM__SPAN_D2D;
}

int tdm_memcpy_async(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind)
{
	if (dst == NULL || src == NULL || kind < TDM_COPY_H2D || kind > TDM_COPY_D2D)
		return -EINVAL;
	if (s != NULL && ((kind == TDM_COPY_H2D && !tdm__is_pinned(B(s), src)) ||
	                  (kind == TDM_COPY_D2H && !tdm__is_pinned(B(s), dst))))
		TDM__LAUNCH(s, copy_span(kind), bytes,
		            tdm__memcpy_staged(s, dst, src, bytes, kind));
	TDM__LAUNCH(s, copy_span(kind), bytes,
	            B(s)->ops->memcpy_async(B(s)->b, s->bs, dst, src, bytes, kind));
}

int tdm_memset_async(tdm_stream *s, void *dst, int value, size_t bytes)
{
	if (dst == NULL)
		return -EINVAL;
	TDM__LAUNCH(s, TDM__SPAN_MEMSET, bytes,
	            B(s)->ops->memset_async != NULL
	                ? B(s)->ops->memset_async(B(s)->b, s->bs, dst, value, bytes)
	                : -ENOTSUP);
}

int tdm_launch_scale(tdm_stream *s, float *y, const float *x, float a, size_t n)
{
	if (y == NULL || x == NULL)
		return -EINVAL;
	TDM__LAUNCH(s, TDM__SPAN_KERNEL, 0, B(s)->ops->launch_scale(B(s)->b, s->bs, y, x, a, n));
}
