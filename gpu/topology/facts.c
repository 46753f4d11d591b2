// SPDX-License-Identifier: MIT
/*
 * Device topology's facts (topology.h): the struct's small helpers, cpulists, ids and MIG
 * profiles, the sysfs reader, and building a topology. Live discovery (CUDA, NVML, sysfs) is in
 * discover.c, the decisions in decide.c, the report in report.c, the GPU layer's topology and
 * tdm_gpu_device_info in layer.c, recorded machines in the tests' support code.
 */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpulist.h"
#include "topology.h"

/* ---- small helpers ---------------------------------------------------------------------- */

/* snprintf that may cut: reasons and notes are for people, a cut one is still useful. */
void tdm__topo_say(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

void tdm__topo_copy(char *dst, size_t len, const char *src)
{
	size_t n = src != NULL ? strlen(src) : 0;
	if (len == 0)
		return;
	if (n >= len)
		n = len - 1;
	if (n > 0)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

double tdm__topo_gib(uint64_t bytes)
{
	return (double)bytes / (double)(1ull << 30);
}

void tdm__topo_dev_blank(struct tdm__topo_dev *d)
{
	memset(d, 0, sizeof(*d));
	d->index = -1;
	d->numa_node = -1;
	d->mig_mode = TDM_MIG_UNKNOWN;
	d->gi_id = -1;
	d->ci_id = -1;
	d->parent_index = -1;
}

void tdm__topo_inherit_gpu(struct tdm__topo_dev *inst, const struct tdm__topo_dev *gpu)
{
	tdm__topo_copy(inst->pci_bus_id, sizeof(inst->pci_bus_id), gpu->pci_bus_id);
	inst->numa_node = gpu->numa_node;
	tdm__topo_copy(inst->cpus, sizeof(inst->cpus), gpu->cpus);
	inst->mig_mode = gpu->mig_mode;
	tdm__topo_copy(inst->parent_uuid, sizeof(inst->parent_uuid), gpu->uuid);
	inst->parent_index = gpu->parent_index;
	inst->parent_sm_count = gpu->sm_count;
}

/* ---- cpulists ("0-3,8,10-11"; base/cpulist.h) ---------------------------------------------- */

int tdm__cpulist_count(const char *list)
{
	cpu_set_t set;
	if (list == NULL)
		return -EINVAL;
	if (*list == '\0')
		return 0; /* an unknown list: no CPU known */
	int rc = tdm__cpulist_parse(list, &set);
	return rc != 0 ? rc : CPU_COUNT(&set);
}

int tdm__cpulist_and(const char *a, const char *b, char *out, size_t len)
{
	cpu_set_t x, y, both;
	if (a == NULL || b == NULL || tdm__cpulist_parse(a, &x) != 0 ||
	    tdm__cpulist_parse(b, &y) != 0)
		return -EINVAL;
	CPU_AND(&both, &x, &y);
	return tdm__cpulist_format(&both, out, len);
}

/* ---- ids ---------------------------------------------------------------------------------- */

void tdm__topology_uuid(const unsigned char b[16], const char *prefix, char *out, size_t len)
{
	tdm__topo_say(out, len,
	              "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	              prefix, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
	              b[11], b[12], b[13], b[14], b[15]);
}

int tdm__topology_bus_id(const char *in, char *out, size_t len)
{
	unsigned dom, bus, dev, fn;
	int used = 0;
	if (in == NULL || sscanf(in, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) != 4 ||
	    in[used] != '\0' || bus > 0xff || dev > 0x1f || fn > 7)
		return -EINVAL;
	tdm__topo_say(out, len, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return 0;
}

int tdm__topology_profile_slices(const char *profile)
{
	int k = 0;
	if (profile == NULL || !isdigit((unsigned char)profile[0]))
		return 0;
	while (isdigit((unsigned char)*profile) && k < 100)
		k = 10 * k + (*profile++ - '0');
	return *profile == 'g' ? k : 0;
}

/* "NVIDIA A100-SXM4-40GB MIG 3g.20gb" -> "3g.20gb"; false if the name names no profile. */
bool tdm__topo_profile_from_name(const char *name, char *out, size_t len)
{
	const char *m = strstr(name, "MIG ");
	if (m == NULL)
		return false;
	m += 4;
	size_t n = strcspn(m, " \t");
	if (n == 0 || n >= len || tdm__topology_profile_slices(m) == 0)
		return false;
	memcpy(out, m, n);
	out[n] = '\0';
	return true;
}

/* ---- sysfs -------------------------------------------------------------------------------- */

static bool read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return false;
	bool ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

void tdm__topology_sysfs(const char *root, const char *bus_id, int *numa_node, char *cpus,
                         size_t len)
{
	char path[512], line[TDM__TOPO_CPUS + 2];
	*numa_node = -1;
	if (len > 0)
		cpus[0] = '\0';
	if (bus_id == NULL || bus_id[0] == '\0' || strchr(bus_id, '/') != NULL)
		return;
	if (root == NULL)
		root = "/sys/bus/pci/devices";
	tdm__topo_say(path, sizeof(path), "%s/%s/numa_node", root, bus_id);
	if (read_line(path, line, sizeof(line))) {
		char *end;
		long v = strtol(line, &end, 10);
		if (end != line && *end == '\0' && v >= 0 && v < 65536)
			*numa_node = (int)v;
	}
	tdm__topo_say(path, sizeof(path), "%s/%s/local_cpulist", root, bus_id);
	/* A list that does not parse, or does not fit, is unknown: never a wrong, cut one. */
	if (read_line(path, line, sizeof(line)) && strlen(line) < len &&
	    tdm__cpulist_count(line) > 0)
		tdm__topo_copy(cpus, len, line);
}

/* ---- topologies --------------------------------------------------------------------------- */

void tdm__topo_set_max_connections(struct tdm__topology *t, const char *raw)
{
	t->max_connections = 0;
	t->max_connections_raw[0] = '\0';
	if (raw == NULL)
		return;
	tdm__topo_copy(t->max_connections_raw, sizeof(t->max_connections_raw), raw);
	/* As CUDA reads it (measured: docs/design/gpu-streams.md): the leading number, blanks and
	 * a sign before it allowed, anything after it ignored ("4x" is 4), capped at 32 ("64" is
	 * 32); empty is unset, and no number of 1 or more (0 among them) is CUDA's default. */
	if (raw[0] == '\0')
		return;
	char *end;
	errno = 0;
	long v = strtol(raw, &end, 10);
	if (end == raw || v < 1)
		t->max_connections = -1;
	else
		t->max_connections =
		    v > TDM__TOPO_MAX_QUEUES || errno == ERANGE ? TDM__TOPO_MAX_QUEUES : (int)v;
}

void tdm__topo_set_visible_devices(struct tdm__topology *t, const char *raw)
{
	t->visible_devices_set = raw != NULL;
	tdm__topo_copy(t->visible_devices, sizeof(t->visible_devices), raw);
}

struct tdm__topology *tdm__topo_new(const char *source)
{
	struct tdm__topology *t = calloc(1, sizeof(*t));
	if (t != NULL)
		tdm__topo_copy(t->source, sizeof(t->source), source);
	return t;
}

/* The calling process's environment: CUDA variables and CPU affinity. */
void tdm__topo_env_facts(struct tdm__topology *t)
{
	tdm__topo_set_visible_devices(t, getenv("CUDA_VISIBLE_DEVICES"));
	tdm__topo_set_max_connections(t, getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
	cpu_set_t cs;
	CPU_ZERO(&cs);
	if (sched_getaffinity(0, sizeof(cs), &cs) == 0)
		(void)tdm__cpulist_format(&cs, t->affinity, sizeof(t->affinity));
}

void tdm__topology_free(struct tdm__topology *t)
{
	if (t == NULL)
		return;
	free(t->devs);
	free(t->machine);
	free(t->plans);
	free(t);
}

int tdm__topology_empty(const char *source, struct tdm__topology **out)
{
	if (out == NULL)
		return -EINVAL;
	struct tdm__topology *t = tdm__topo_new(source != NULL ? source : "none");
	if (t == NULL)
		return -ENOMEM;
	tdm__topo_env_facts(t);
	tdm__topo_say(t->cuda_note, sizeof(t->cuda_note), "no devices");
	tdm__topo_say(t->nvml_note, sizeof(t->nvml_note), "not asked");
	*out = t;
	return 0;
}

/* Appends a copy of d to *arr (of *n). */
int tdm__topo_dev_push(struct tdm__topo_dev **arr, int *n, const struct tdm__topo_dev *d)
{
	struct tdm__topo_dev *a = realloc(*arr, (size_t)(*n + 1) * sizeof(*a));
	if (a == NULL)
		return -ENOMEM;
	a[*n] = *d;
	*arr = a;
	(*n)++;
	return 0;
}

int tdm__topo_machine_from_devs(struct tdm__topology *t)
{
	if (t->ndev == 0)
		return 0;
	t->machine = malloc((size_t)t->ndev * sizeof(*t->machine));
	if (t->machine == NULL)
		return -ENOMEM;
	memcpy(t->machine, t->devs, (size_t)t->ndev * sizeof(*t->machine));
	t->nmachine = t->ndev;
	return 0;
}
