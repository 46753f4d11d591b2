// SPDX-License-Identifier: MIT
/*
 * Prints what tandem found out about this machine's GPUs and what it decided for each: devices,
 * MIG state, PCI bus, NUMA node and nearest CPUs, the stream bound, the launch limit, the memory
 * pool threshold, where the device's workers would be pinned, and the reason for each decision.
 * Runs on the real GPU where there is one and on the simulator otherwise (saying so). A check to
 * run first on a new machine:  ./build/examples/topology
 *
 * TANDEM_NVML=0 skips NVML; CUDA_VISIBLE_DEVICES and CUDA_DEVICE_MAX_CONNECTIONS are honoured.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"
#include "example_gpu.h"

static const char *mig_mode_name(int mode)
{
	switch (mode) {
	case TDM_MIG_ENABLED:
		return "enabled";
	case TDM_MIG_DISABLED:
		return "disabled";
	default:
		return "unknown";
	}
}

static const char *or_unknown(const char *s)
{
	return s[0] != '\0' ? s : "?";
}

static void print_facts(const tdm_device_info *d, int n)
{
	printf("\n%3s  %-34s %4s %10s %3s %-12s %4s  %-12s %s\n", "dev", "name", "SMs", "memory",
	       "CE", "bus id", "NUMA", "CPUs", "MIG");
	for (int i = 0; i < n; i++) {
		printf("%3d  %-34.34s %4d %6.1f GiB %3d %-12s %4d  %-12s ", d[i].index, d[i].name,
		       d[i].sm_count, (double)d[i].memory_bytes / (1 << 30), d[i].copy_engines,
		       or_unknown(d[i].pci_bus_id), d[i].numa_node, or_unknown(d[i].cpus));
		if (d[i].is_mig)
			printf("instance %s, GI %d CI %d, one of %d on GPU %d\n", d[i].mig_profile,
			       d[i].gpu_instance, d[i].compute_instance, d[i].mig_instances,
			       d[i].parent_index);
		else
			printf("%s\n", mig_mode_name(d[i].mig_mode));
	}
}

static void print_decisions(const tdm_device_info *d, int n)
{
	printf("\n%3s  %7s %6s %14s  %s\n", "dev", "streams", "launch", "pool threshold",
	       "pin workers and poller to");
	for (int i = 0; i < n; i++) {
		printf("%3d  %7u %6u %10.1f GiB  ", d[i].index, d[i].streams, d[i].launch_limit,
		       (double)d[i].pool_release_bytes / (1 << 30));
		if (d[i].pin_cpus[0] == '\0')
			printf("(not pinned)\n");
		else if (d[i].pin_numa_node >= 0)
			printf("NUMA node %d, CPUs %s\n", d[i].pin_numa_node, d[i].pin_cpus);
		else
			printf("CPUs %s\n", d[i].pin_cpus);
	}
	for (int i = 0; i < n; i++) {
		printf("\ndevice %d: %s\n", d[i].index, or_unknown(d[i].uuid));
		if (d[i].is_mig)
			printf("  on physical GPU %d: %s\n", d[i].parent_index,
			       or_unknown(d[i].parent_uuid));
		printf("  - %s\n  - %s\n  - %s\n  - %s\n  - %s\n  - %s\n", d[i].why_streams,
		       d[i].why_launch, d[i].why_pool, d[i].why_pin, d[i].why_mig, d[i].why_dsched);
	}
}

int main(void)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	uint64_t t0 = tdm_now_ns();
	if (example_open(&ex, &gpu, NULL) != 0)
		return 1;
	uint64_t t1 = tdm_now_ns();
	int n = tdm_gpu_device_count(gpu);
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	const char *conns = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	printf(
	    "%d device(s); opening the executor and GPU layer took %.1f ms, discovery included\n",
	    n, (double)(t1 - t0) / 1e6);
	printf("CUDA_VISIBLE_DEVICES: %s\n", visible != NULL ? visible : "(unset)");
	printf("CUDA_DEVICE_MAX_CONNECTIONS: %s\n", conns != NULL ? conns : "(unset)");

	tdm_device_info *info = n > 0 ? calloc((size_t)n, sizeof(*info)) : NULL;
	int status = 0;
	if (n > 0 && info == NULL) {
		fprintf(stderr, "out of memory\n");
		status = 1;
	}
	for (int i = 0; i < n && status == 0; i++) {
		int rc = tdm_gpu_device_info(gpu, i, &info[i]);
		if (rc != 0) {
			fprintf(stderr, "tdm_gpu_device_info(%d): %s\n", i, tdm_strerror(rc));
			status = 1;
		}
	}
	if (status == 0 && n > 0) {
		if (info[0].nvml)
			printf("NVML: available (%s)\n", info[0].nvml_note);
		else
			printf("NVML: not available (%s)\n", info[0].nvml_note);
		print_facts(info, n);
		print_decisions(info, n);
	}
	free(info);
	example_close(ex, gpu);
	return status;
}
