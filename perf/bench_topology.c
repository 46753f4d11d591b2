/*
 * tandem-bench topology: what tandem found on this machine and decided for each device, one
 * JSON object per device with --json (examples/topology prints the same for people).
 *   tandem-bench topology [--backend cuda|sim] [--json]
 */
#include <stdio.h>
#include <string.h>

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
	tdm_gpu_config gc;
	tdm_gpu_config_init(&gc);
	gc.backend = TDM_BACKEND_CUDA;
	int json = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "topology") == 0)
			continue;
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
			const char *b = argv[++i];
			if (strcmp(b, "sim") == 0)
				gc.backend = TDM_BACKEND_SIM;
			else if (strcmp(b, "cuda") != 0)
				goto usage;
		} else {
			goto usage;
		}
	}
	tdm_executor *ex;
	tdm_gpu *gpu;
	if (tdm_executor_create(&ex, NULL) != 0)
		return 1;
	int rc = tdm_gpu_create(&gpu, ex, &gc);
	if (rc != 0) {
		fprintf(stderr, "tandem-bench topology: %s\n", tdm_strerror(rc));
		tdm_executor_destroy(ex);
		return rc == -ENODEV ? 3 : 1;
	}
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
			       "\"mig_mode\":%d,\"streams\":%u,\"launch_limit\":%u,",
			       in.sm_count, (unsigned long long)in.memory_bytes, in.numa_node,
			       in.is_mig, in.mig_mode, in.streams, in.launch_limit);
			json_str("pci_bus_id", in.pci_bus_id, 1);
			json_str("cpus", in.cpus, 1);
			json_str("why_streams", in.why_streams, 1);
			json_str("why_launch", in.why_launch, 1);
			json_str("why_mig", in.why_mig, 0);
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
usage:
	fprintf(stderr, "usage: tandem-bench topology [--backend cuda|sim] [--json]\n");
	return 2;
}
