// SPDX-License-Identifier: MIT
/* tdm_metrics_print (tandem_gpu.h): a tdm_gpu_metrics as a table for a human. */
#include <errno.h>
#include <stdio.h>

#include "tandem_gpu.h"

/* ns as a human reads it: "812 ns", "12.3 us", "4.56 ms", "1.234 s". */
static const char *human_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns < 1000)
		snprintf(buf, len, "%llu ns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%.1f us", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, len, "%.2f ms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.3f s", (double)ns / 1e9);
	return buf;
}

static void print_copy(FILE *f, const char *dir, uint64_t bytes, uint64_t ns, double fraction,
                       double gbps, double gbps_window, double peak, double share)
{
	char b[32];
	fprintf(f, "  %s  %.3f GB, copying %5.1f%% (%s) at %.2f GB/s, %.2f GB/s over the window",
	        dir, (double)bytes / 1e9, fraction * 100.0, human_ns(ns, b, sizeof(b)), gbps,
	        gbps_window);
	if (peak > 0)
		fprintf(f, ", %.1f%% of peak %.2f GB/s\n", share * 100.0, peak);
	else
		fprintf(f, ", peak unknown\n");
}

int tdm_metrics_print(const tdm_gpu_metrics *m, FILE *f)
{
	if (m == NULL || f == NULL)
		return -EINVAL;
	char b1[32], b2[32], b3[32], b4[32];
	uint64_t window = m->end_ns > m->start_ns ? m->end_ns - m->start_ns : 0;
	fprintf(f, "tandem metrics: window %s, %s\n", human_ns(window, b1, sizeof(b1)),
	        m->running ? "running" : "stopped");
	if (m->spans_lost != 0)
		fprintf(f, "  %llu launches' spans lost (not in the figures)\n",
		        (unsigned long long)m->spans_lost);
	int ndev = m->ndevices < TDM_METRICS_MAX_DEVICES ? m->ndevices : TDM_METRICS_MAX_DEVICES;
	for (int i = 0; i < ndev; i++) {
		const tdm_device_metrics *d = &m->devices[i];
		fprintf(f,
		        "device %d: busy %5.1f%% (%s; %llu kernels, %llu graphs, %llu copies, "
		        "%llu memsets)\n",
		        d->device, d->busy_fraction * 100.0, human_ns(d->busy_ns, b1, sizeof(b1)),
		        (unsigned long long)d->kernels, (unsigned long long)d->graphs,
		        (unsigned long long)d->copies, (unsigned long long)d->memsets);
		print_copy(f, "H2D", d->h2d_bytes, d->h2d_ns, d->h2d_fraction, d->h2d_gbps,
		           d->h2d_gbps_window, d->h2d_peak_gbps, d->h2d_share);
		print_copy(f, "D2H", d->d2h_bytes, d->d2h_ns, d->d2h_fraction, d->d2h_gbps,
		           d->d2h_gbps_window, d->d2h_peak_gbps, d->d2h_share);
		if (d->d2d_bytes != 0 || d->memset_bytes != 0)
			fprintf(f, "  D2D  %.3f GB, memsets %.3f GB\n", (double)d->d2d_bytes / 1e9,
			        (double)d->memset_bytes / 1e9);
		if (d->unplaced_ns != 0)
			fprintf(f, "  unplaced (spans that came late): %s\n",
			        human_ns(d->unplaced_ns, b1, sizeof(b1)));
		unsigned ns =
		    d->nstreams < TDM_METRICS_MAX_STREAMS ? d->nstreams : TDM_METRICS_MAX_STREAMS;
		if (ns != 0)
			fprintf(f, "  %-12s %10s %12s %12s\n", "stream", "spans", "busy", "idle");
		for (unsigned k = 0; k < ns; k++) {
			const tdm_stream_metrics *s = &d->streams[k];
			char name[24];
			snprintf(name, sizeof(name), "%s %u", s->high ? "high" : "normal",
			         s->index);
			fprintf(f, "  %-12s %10llu %12s %12s\n", name, (unsigned long long)s->spans,
			        human_ns(s->busy_ns, b1, sizeof(b1)),
			        human_ns(s->idle_ns, b2, sizeof(b2)));
		}
		if (d->streams_over != 0)
			fprintf(f, "  (%u more streams left out)\n", d->streams_over);
	}
	const tdm_await_metrics *a = &m->awaits;
	fprintf(f, "awaits: %llu, p50 %s, p99 %s, max %s, mean %s", (unsigned long long)a->count,
	        human_ns(a->p50_ns, b1, sizeof(b1)), human_ns(a->p99_ns, b2, sizeof(b2)),
	        human_ns(a->max_ns, b3, sizeof(b3)), human_ns(a->mean_ns, b4, sizeof(b4)));
	if (a->untimed != 0)
		fprintf(f, " (%llu untimed)", (unsigned long long)a->untimed);
	fprintf(f, "\n");
	return ferror(f) ? -EIO : 0;
}
