// SPDX-License-Identifier: MIT
/*
 * Device topology's report (tdm__topology_print): the facts, NVML's view of the machine and the
 * plans, for people (examples/topology, tandem-bench topology).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "topology.h"

/* ---- the report --------------------------------------------------------------------------- */

static const char *mig_word(int mode)
{
	return mode == TDM_MIG_ENABLED    ? "enabled"
	       : mode == TDM_MIG_DISABLED ? "disabled"
	                                  : "unknown";
}

static bool why_same(const struct tdm__device_plan *a, const struct tdm__device_plan *b)
{
	return strcmp(a->why_streams, b->why_streams) == 0 &&
	       strcmp(a->why_launch, b->why_launch) == 0 && strcmp(a->why_pool, b->why_pool) == 0 &&
	       strcmp(a->why_pin, b->why_pin) == 0 && strcmp(a->why_mig, b->why_mig) == 0 &&
	       strcmp(a->why_dsched, b->why_dsched) == 0;
}

static void print_mem(FILE *f, uint64_t bytes)
{
	if (bytes == 0)
		fprintf(f, "%10s", "?");
	else
		fprintf(f, "%6.1f GiB", tdm__topo_gib(bytes));
}

int tdm__topology_print(const struct tdm__topology *t, FILE *f)
{
	if (t == NULL || f == NULL)
		return -EINVAL;
	fprintf(f, "topology: %s%s%s\n", t->source, t->note[0] ? ": " : "", t->note);
	fprintf(f, "CUDA: %s\n", t->cuda_note);
	fprintf(f, "NVML: %s (%s)\n", t->nvml ? "available" : "not available", t->nvml_note);
	if (t->visible_devices_set)
		fprintf(f, "CUDA_VISIBLE_DEVICES=\"%s\"\n", t->visible_devices);
	else
		fprintf(f, "CUDA_VISIBLE_DEVICES unset\n");
	if (t->max_connections_raw[0] != '\0')
		fprintf(f, "CUDA_DEVICE_MAX_CONNECTIONS=%s (%s)\n", t->max_connections_raw,
		        t->max_connections < 0
		            ? "not a number of 1 or more: CUDA's default"
		            : "as CUDA reads it: the leading number, at most 32");
	else
		fprintf(f, "CUDA_DEVICE_MAX_CONNECTIONS unset\n");
	fprintf(f, "process CPUs: %s\n", t->affinity[0] ? t->affinity : "unknown");

	fprintf(f, "\n%d device(s) as CUDA enumerates them (each with its own streams and pool)\n",
	        t->ndev);
	if (t->ndev > 0)
		fprintf(f, "%3s  %-36s %4s %10s %3s %-12s %4s  %-12s %s\n", "dev", "name", "SMs",
		        "memory", "CE", "bus id", "NUMA", "CPUs", "MIG");
	for (int i = 0; i < t->ndev; i++) {
		const struct tdm__topo_dev *d = &t->devs[i];
		fprintf(f, "%3d  %-36.36s %4d ", d->index, d->name, d->sm_count);
		print_mem(f, d->mem_bytes);
		fprintf(f, " %3d %-12s %4d  %-12s ", d->copy_engines,
		        d->pci_bus_id[0] ? d->pci_bus_id : "?", d->numa_node,
		        d->cpus[0] ? d->cpus : "?");
		if (d->mig)
			fprintf(f, "instance %s, GI %d CI %d\n", d->mig_profile, d->gi_id,
			        d->ci_id);
		else
			fprintf(f, "%s\n", mig_word(d->mig_mode));
	}
	if (t->ndev > 0 && t->plans != NULL) {
		fprintf(f, "\ndecisions\n%3s  %7s %6s %14s  %-42s %s\n", "dev", "streams", "launch",
		        "pool threshold", "uuid", "pin");
		for (int i = 0; i < t->ndev; i++) {
			const struct tdm__device_plan *pl = &t->plans[i];
			fprintf(f, "%3d  %7u %6u %10.1f GiB  %-42s ", t->devs[i].index, pl->streams,
			        pl->launch_limit, tdm__topo_gib(pl->pool_release_bytes),
			        t->devs[i].uuid[0] ? t->devs[i].uuid : "?");
			if (pl->pin_cpus[0] == '\0')
				fprintf(f, "none\n");
			else if (pl->pin_node >= 0)
				fprintf(f, "node %d, CPUs %s\n", pl->pin_node, pl->pin_cpus);
			else
				fprintf(f, "CPUs %s\n", pl->pin_cpus);
		}
	}
	for (int i = 0; i < t->ndev && t->plans != NULL; i++) {
		const struct tdm__device_plan *pl = &t->plans[i];
		const struct tdm__topo_dev *d = &t->devs[i];
		fprintf(f, "\ndevice %d", d->index);
		if (d->mig)
			fprintf(f, ", on physical GPU %d (%s)", d->parent_index,
			        d->parent_uuid[0] ? d->parent_uuid : "uuid unknown");
		if (i > 0 && why_same(pl, &t->plans[i - 1])) {
			fprintf(f, ": the same reasons as device %d\n", t->devs[i - 1].index);
			continue;
		}
		fprintf(f, "\n  - %s\n  - %s\n  - %s\n  - %s\n  - %s\n  - %s\n", pl->why_streams,
		        pl->why_launch, pl->why_pool, pl->why_pin, pl->why_mig, pl->why_dsched);
	}

	fprintf(f, "\nmachine (%s): %d entr%s\n", t->nvml ? "as NVML shows it" : "as CUDA shows it",
	        t->nmachine, t->nmachine == 1 ? "y" : "ies");
	for (int i = 0; i < t->nmachine; i++) {
		const struct tdm__topo_dev *e = &t->machine[i];
		char seen[32];
		if (e->index >= 0)
			tdm__topo_say(seen, sizeof(seen), "CUDA device %d", e->index);
		else
			tdm__topo_say(seen, sizeof(seen), "not visible to CUDA here");
		if (!e->mig) {
			fprintf(f, "  GPU %d  %-28.28s %s  MIG %s", e->parent_index, e->name,
			        e->uuid, mig_word(e->mig_mode));
			if (e->mig_mode == TDM_MIG_ENABLED)
				fprintf(f, " (%d instances)", e->parent_instances);
			fprintf(f, "  %s\n", seen);
		} else {
			fprintf(f, "    MIG %-8s GI %2d CI %d  %s  %3d SMs ", e->mig_profile,
			        e->gi_id, e->ci_id, e->uuid, e->sm_count);
			print_mem(f, e->mem_bytes);
			fprintf(f, "  %s\n", seen);
		}
	}
	return ferror(f) ? -EIO : 0;
}
