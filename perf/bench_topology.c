// SPDX-License-Identifier: MIT
/*
 * tandem-bench topology: what tandem found on this machine and decided for each device, one
 * JSON object per device with --json (examples/topology prints the same for people).
 *   tandem-bench topology [--backend cuda|sim] [--json]
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "tandem.h"
#include "tandem_gpu.h"

static void json_str(const char *key, const char *v, int comma)
{
	printf("\"%s\":\"", key);
	for (const char *c = v; *c != '\0'; c++)
		if (*c == '"' || *c == '\\')
			printf("\\%c", *c);
		else if ((unsigned char)*c >= 0x20)
			putchar(*c);
	printf("\"%s", comma ? "," : "");
}

int bench_topology(int argc, char **argv)
{
	int json;
	tdm_executor *ex;
	tdm_gpu *gpu;
	int status = bench_open_gpu(argc, argv, "topology", &json, &ex, &gpu);
	if (status != 0)
		return status;
	for (int d = 0; d < tdm_gpu_device_count(gpu); d++) {
		tdm_device_info in;
		if (tdm_gpu_device_info(gpu, d, &in) != 0)
			continue;
		if (json) {
			printf("{\"bench\":\"topology\",\"backend\":\"%s\",\"device\":%d,",
			       tdm_gpu_backend_name(gpu), in.index);
			json_str("name", in.name, 1);
			json_str("uuid", in.uuid, 1);
			printf("\"sms\":%d,\"memory_bytes\":%llu,\"numa_node\":%d,\"is_mig\":%d,"
			       "\"mig_mode\":%d,\"streams\":%u,\"launch_limit\":%u,\"dsched_"
			       "blocks\":%u,",
			       in.sm_count, (unsigned long long)in.memory_bytes, in.numa_node,
			       in.is_mig, in.mig_mode, in.streams, in.launch_limit,
			       in.dsched_blocks);
			json_str("pci_bus_id", in.pci_bus_id, 1);
			json_str("cpus", in.cpus, 1);
			json_str("why_streams", in.why_streams, 1);
			json_str("why_launch", in.why_launch, 1);
			json_str("why_mig", in.why_mig, 1);
			json_str("why_dsched", in.why_dsched, 0);
			printf("}\n");
		} else {
			printf("device %d: %s (%s), %d SMs, bus %s\n  %s\n  %s\n  %s\n", in.index,
			       in.name, in.uuid, in.sm_count,
			       in.pci_bus_id[0] != '\0' ? in.pci_bus_id : "?", in.why_streams,
			       in.why_launch, in.why_mig);
		}
	}
	tdm_gpu_destroy(gpu);
	tdm_executor_destroy(ex);
	return 0;
}
