// SPDX-License-Identifier: MIT
/*
 * The set-up shared by the GPU subcommands: bench_gpu_create for all of them, and for the small
 * ones (gpu-idle, topology) their option parsing too: `--backend cuda|sim` and `--json`, then an
 * executor and a GPU layer on that backend.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_gpu.h"

void bench_stats_add_delta(tdm_gpu_stats *sum, const tdm_gpu_stats *a, const tdm_gpu_stats *b)
{
	sum->awaits_word += b->awaits_word - a->awaits_word;
	sum->awaits_event += b->awaits_event - a->awaits_event;
	sum->switches += b->switches - a->switches;
	sum->event_polls += b->event_polls - a->event_polls;
	sum->sweeps += b->sweeps - a->sweeps;
	sum->sleeps += b->sleeps - a->sleeps;
	sum->due_spins += b->due_spins - a->due_spins;
	sum->prewakes += b->prewakes - a->prewakes;
	sum->direct += b->direct - a->direct;
}

void bench_stats_json(const tdm_gpu_stats *s)
{
	printf("\"awaits_word\":%llu,\"awaits_event\":%llu,\"switches\":%llu,"
	       "\"event_polls\":%llu,\"sweeps\":%llu,\"sleeps\":%llu,\"due_spins\":%llu,"
	       "\"prewakes\":%llu,\"direct\":%llu",
	       (unsigned long long)s->awaits_word, (unsigned long long)s->awaits_event,
	       (unsigned long long)s->switches, (unsigned long long)s->event_polls,
	       (unsigned long long)s->sweeps, (unsigned long long)s->sleeps,
	       (unsigned long long)s->due_spins, (unsigned long long)s->prewakes,
	       (unsigned long long)s->direct);
}

int bench_gpu_create(tdm_executor *ex, tdm_gpu_config *g, int sim, const char *cmd, tdm_gpu **out)
{
	/* Never AUTO: TANDEM_GPU in the environment must not change what is measured. */
	g->backend = sim ? TDM_BACKEND_SIM : TDM_BACKEND_CUDA;
	/* As a program of this many workers would start: each stream a hardware queue where CUDA
	 * has not started yet (-EEXIST, -EALREADY: it keeps what it has). */
	int workers = tdm_executor_workers(ex);
	(void)tdm_gpu_prepare(g, workers > 0 ? (unsigned)workers : 0);
	int rc = tdm_gpu_create(out, ex, g);
	if (rc == 0 && tdm_gpu_device_count(*out) < 1) {
		tdm_gpu_destroy(*out);
		*out = NULL;
		rc = -ENODEV;
	}
	if (rc == -ENODEV)
		fprintf(stderr,
		        "tandem-bench%s%s: --backend %s: no device (tdm_gpu_create: %s)%s; "
		        "--backend sim runs on tandem's GPU simulator\n",
		        cmd != NULL ? " " : "", cmd != NULL ? cmd : "", sim ? "sim" : "cuda",
		        tdm_strerror(rc),
#if defined(TANDEM_HAVE_CUDA) && TANDEM_HAVE_CUDA
		        ""
#else
		        "; this tandem-bench was built without CUDA"
#endif
		);
	return rc;
}

int bench_open_gpu(int argc, char **argv, const char *cmd, int *json, struct tdm_executor **ex,
                   struct tdm_gpu **gpu)
{
	tdm_gpu_config gc;
	int sim = 0;
	*json = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], cmd) == 0)
			continue;
		if (strcmp(argv[i], "--json") == 0) {
			*json = 1;
		} else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc &&
		           (strcmp(argv[i + 1], "sim") == 0 || strcmp(argv[i + 1], "cuda") == 0)) {
			sim = strcmp(argv[++i], "sim") == 0;
		} else {
			fprintf(stderr, "usage: tandem-bench %s [--backend cuda|sim] [--json]\n",
			        cmd);
			return 2;
		}
	}
	if (tdm_executor_create(ex, NULL) != 0)
		return 1;
	tdm_gpu_config_init(&gc);
	int rc = bench_gpu_create(*ex, &gc, sim, cmd, gpu);
	if (rc != 0) {
		if (rc != -ENODEV)
			fprintf(stderr, "tandem-bench %s: %s\n", cmd, tdm_strerror(rc));
		tdm_executor_destroy(*ex);
		return rc == -ENODEV ? 3 : 1;
	}
	return 0;
}
