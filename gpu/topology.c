/*
 * Device topology (topology.h): the facts' struct and its helpers, the per-device decisions, the
 * report, the GPU layer's topology and tdm_gpu_device_info. Live discovery (CUDA, NVML, sysfs
 * facts) is in topology_discover.c, recorded machines in topology_fixture.c. The pieces both of
 * those use (cpulists, ids, MIG profiles, the sysfs reader) are here, where tests reach them.
 *
 * ---- Decisions (tdm__topology_decide) ----
 * - base work queues Q: CUDA_DEVICE_MAX_CONNECTIONS as CUDA reads it (its leading number, at
 *   most 32), else 8 (CUDA's default; more streams than queues alias onto the same queues).
 *   A value tandem set itself by TDM_CONNECTIONS_AUTO counts as unset here: it only gives the
 *   streams queues (a value tdm_gpu_config.connections named counts as the user's).
 * - CUDA_DEVICE_MAX_CONNECTIONS that tandem sets (tdm__connections_wanted; gpu.c sets it while
 *   it is unset and CUDA has not started): tdm_gpu_config.connections if 1..32; with AUTO, the
 *   stream set's size (streams_per_device, else the workers) when it is above 8, at most 32,
 *   so that no two streams share a queue; none where CUDA_VISIBLE_DEVICES names a MIG instance
 *   (its set is a share of 8 queues, below 8). A completion mark behind a kernel holds its queue
 *   until the kernel ends, so streams sharing a queue run one kernel at a time between them:
 *   16 workers, 100 us kernels on an H200, 59k-60k tasks/s over 8 queues, 149k-150k over 16
 *   (32: the same). A set value is also the base above, so set by hand at 8 workers it made
 *   16 or 32 streams, which measured 0.81-0.89x of cuda-sync against 1.02-1.03x with 8
 *   streams: hence a value AUTO sets changes no decision, and AUTO sets none for 8 or fewer
 *   (tandem-bench gpu-throughput, 2026-12-01).
 * - share of a MIG instance: its SMs over its GPU's when both are known, else its compute slices
 *   over 7 (the profile "<k>g..."), else its SMs over 132 (an H100/H200), saying so.
 * - streams per priority class: tdm_gpu_config.streams_per_device if set; a whole device Q, or
 *   one per worker when there are more workers than Q (at most 32, the most work queues CUDA
 *   makes): each worker's own slot is then a stream no other worker's slot is, whose launches
 *   and completion writes two workers would otherwise take turns at (16 workers, 10 us kernels
 *   on an H200: 239k tasks/s on 8 streams, 300k on 16, where one thread per stream ran
 *   309k-331k); a MIG instance ceil(Q x share), at least min(2, Q), at most Q (1g of 7 on an
 *   H100: 2), however many workers there are.
 * - launch limit: tdm_gpu_config.launch_limit if set; a whole device 16; a MIG instance
 *   ceil(16 x share), 1..16 (a 1g instance: 3 by its share of 7 slices, 2 by 16 of 132 SMs
 *   where the parent's SM count is known). This is the one place the measurement is kept
 *   (with perf/README.md); the other docs state the rule. Back-to-back empty launches peak at
 *   about 4 threads on an H200 (../shared/docs/gpu-facts.md), but tasks do more than launch:
 *   16 workers running 10 us tasks measured 0.85-0.96x of one thread per stream with 4
 *   launchers, 0.88-1.02x with 8 and 0.98-1.07x with 16 (tandem-bench gpu-throughput
 *   --launch-limit, 2026-11-30, three runs); 1 us tasks likewise. More than 16 was not
 *   measured, so 16 stays the bound.
 * - pool release threshold: half the device's (or the instance's own) memory; 0 if unknown.
 *   Each CUDA device, a MIG instance included, is its own entry with its own pool: never shared.
 * - pinning: the device's nearest CPUs (local_cpulist) within the process's affinity, and its
 *   NUMA node; nothing when unknown or when none of them is the process's.
 */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "topology.h"

#define FIELD_SIZE(type, field) sizeof(((type *)0)->field)
_Static_assert(FIELD_SIZE(tdm_device_info, name) == TDM__TOPO_NAME, "name size");
_Static_assert(FIELD_SIZE(tdm_device_info, uuid) == TDM__TOPO_UUID, "uuid size");
_Static_assert(FIELD_SIZE(tdm_device_info, parent_uuid) == TDM__TOPO_UUID, "uuid size");
_Static_assert(FIELD_SIZE(tdm_device_info, pci_bus_id) == TDM__TOPO_BUS, "bus id size");
_Static_assert(FIELD_SIZE(tdm_device_info, cpus) == TDM__TOPO_CPUS, "cpus size");
_Static_assert(FIELD_SIZE(tdm_device_info, pin_cpus) == TDM__TOPO_CPUS, "cpus size");
_Static_assert(FIELD_SIZE(tdm_device_info, mig_profile) == TDM__TOPO_PROFILE, "profile size");
_Static_assert(FIELD_SIZE(tdm_device_info, nvml_note) == TDM__TOPO_NOTE, "note size");
_Static_assert(FIELD_SIZE(tdm_device_info, why_streams) == TDM__TOPO_WHY, "why size");

#define TDM__MAX_CPUS 8192

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

/* ---- cpulists ("0-3,8,10-11") ------------------------------------------------------------ */

struct cpuset {
	uint64_t w[TDM__MAX_CPUS / 64];
};

static int cpuset_parse(const char *s, struct cpuset *set)
{
	memset(set, 0, sizeof(*set));
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '\0')
		return 0;
	for (;;) {
		char *end;
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		unsigned long a = strtoul(s, &end, 10), b = a;
		s = end;
		if (*s == '-') {
			s++;
			if (!isdigit((unsigned char)*s))
				return -EINVAL;
			b = strtoul(s, &end, 10);
			s = end;
		}
		if (a > b || b >= TDM__MAX_CPUS)
			return -EINVAL;
		for (unsigned long c = a; c <= b; c++)
			set->w[c / 64] |= 1ull << (c % 64);
		if (*s == ',') {
			s++;
			continue;
		}
		while (isspace((unsigned char)*s))
			s++;
		return *s == '\0' ? 0 : -EINVAL;
	}
}

static bool cpuset_has(const struct cpuset *set, unsigned c)
{
	return (set->w[c / 64] >> (c % 64)) & 1u;
}

static int cpuset_count(const struct cpuset *set)
{
	int n = 0;
	for (unsigned c = 0; c < TDM__MAX_CPUS; c++)
		n += cpuset_has(set, c);
	return n;
}

/* -ENOSPC (and "") when it does not fit. */
static int cpuset_format(const struct cpuset *set, char *out, size_t len)
{
	size_t at = 0;
	if (len == 0)
		return -ENOSPC;
	out[0] = '\0';
	for (unsigned c = 0; c < TDM__MAX_CPUS; c++) {
		if (!cpuset_has(set, c))
			continue;
		unsigned e = c;
		while (e + 1 < TDM__MAX_CPUS && cpuset_has(set, e + 1))
			e++;
		int n = e == c ? snprintf(out + at, len - at, "%s%u", at ? "," : "", c)
		               : snprintf(out + at, len - at, "%s%u-%u", at ? "," : "", c, e);
		if (n < 0 || (size_t)n >= len - at) {
			out[0] = '\0';
			return -ENOSPC;
		}
		at += (size_t)n;
		c = e;
	}
	return 0;
}

int tdm__cpulist_count(const char *list)
{
	struct cpuset set;
	if (list == NULL)
		return -EINVAL;
	int rc = cpuset_parse(list, &set);
	return rc != 0 ? rc : cpuset_count(&set);
}

int tdm__cpulist_and(const char *a, const char *b, char *out, size_t len)
{
	struct cpuset x, y;
	if (a == NULL || b == NULL || cpuset_parse(a, &x) != 0 || cpuset_parse(b, &y) != 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(x.w) / sizeof(x.w[0]); i++)
		x.w[i] &= y.w[i];
	return cpuset_format(&x, out, len);
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
	/* As CUDA reads it (measured on the H200 with CUDA 13.0, 2026-12-01: how many streams of
	 * two 20 ms kernels each ran side by side): the leading number, blanks and a sign before
	 * it allowed, anything after it ignored ("4x" is 4), capped at 32 ("64" is 32); empty is
	 * unset, and no number of 1 or more (0 among them) is CUDA's default. */
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
	if (sched_getaffinity(0, sizeof(cs), &cs) == 0) {
		struct cpuset set;
		memset(&set, 0, sizeof(set));
		for (unsigned c = 0; c < CPU_SETSIZE && c < TDM__MAX_CPUS; c++)
			if (CPU_ISSET(c, &cs))
				set.w[c / 64] |= 1ull << (c % 64);
		(void)cpuset_format(&set, t->affinity, sizeof(t->affinity));
	}
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

/* ---- decisions ---------------------------------------------------------------------------- */

void tdm__decide_env_init(struct tdm__decide_env *env, const struct tdm__topology *t,
                          const tdm_gpu_config *cfg)
{
	memset(env, 0, sizeof(*env));
	if (t != NULL) {
		env->max_connections = t->max_connections;
		env->allowed_cpus = t->affinity[0] != '\0' ? t->affinity : NULL;
	}
	if (cfg != NULL) {
		env->streams_override = cfg->streams_per_device;
		env->launch_override = cfg->launch_limit;
	}
}

/* A whole device's stream set: the override, else `base` queues' worth or one per worker past
 * them, at most TDM__TOPO_MAX_QUEUES (the rule at the top of this file). */
static unsigned whole_device_set(unsigned override, unsigned workers, unsigned base)
{
	if (override != 0)
		return override;
	if (workers <= base)
		return base;
	return workers < TDM__TOPO_MAX_QUEUES ? workers : TDM__TOPO_MAX_QUEUES;
}

unsigned tdm__connections_wanted(int connections, unsigned streams_per_device, unsigned workers,
                                 const char *visible_devices)
{
	if (connections >= 1 && connections <= TDM__TOPO_MAX_QUEUES)
		return (unsigned)connections;
	if (connections != TDM_CONNECTIONS_AUTO)
		return 0;
	/* A MIG instance's set is a share of CUDA's default queues: no queue to add. */
	if (visible_devices != NULL && strstr(visible_devices, "MIG-") != NULL)
		return 0;
	unsigned set = whole_device_set(streams_per_device, workers, TDM__TOPO_DEFAULT_QUEUES);
	if (set <= TDM__TOPO_DEFAULT_QUEUES)
		return 0;
	return set < TDM__TOPO_MAX_QUEUES ? set : TDM__TOPO_MAX_QUEUES;
}

/* ceil(k * num / den) */
static unsigned scale_up(unsigned k, uint64_t num, uint64_t den)
{
	return (unsigned)(((uint64_t)k * num + den - 1) / den);
}

static unsigned clamp_u(unsigned v, unsigned lo, unsigned hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void tdm__topology_decide(const struct tdm__topo_dev *d, const struct tdm__decide_env *env,
                          struct tdm__device_plan *out)
{
	static const struct tdm__decide_env none = {0};
	char base_why[160], share[96];
	unsigned base = TDM__TOPO_DEFAULT_QUEUES;
	uint64_t num = 1, den = 1;
	int rc;

	memset(out, 0, sizeof(*out));
	if (env == NULL)
		env = &none;
	if (env->connections_by_tandem != 0 &&
	    env->max_connections == (int)env->connections_by_tandem) {
		tdm__topo_say(
		    base_why, sizeof(base_why),
		    "CUDA_DEVICE_MAX_CONNECTIONS=%u set by tandem (%u hardware queues; the "
		    "set as with CUDA's default %u)",
		    env->connections_by_tandem, env->connections_by_tandem, base);
	} else if (env->max_connections >= 1 && env->max_connections <= TDM__TOPO_MAX_QUEUES) {
		base = (unsigned)env->max_connections;
		tdm__topo_say(base_why, sizeof(base_why),
		              "CUDA_DEVICE_MAX_CONNECTIONS=%u work queues", base);
	} else if (env->max_connections != 0) {
		tdm__topo_say(
		    base_why, sizeof(base_why),
		    "CUDA_DEVICE_MAX_CONNECTIONS not a number of 1 or more, CUDA's default "
		    "%u work queues",
		    base);
	} else if (env->connections_late) {
		tdm__topo_say(
		    base_why, sizeof(base_why),
		    "CUDA_DEVICE_MAX_CONNECTIONS unset, default %u work queues (CUDA started "
		    "before tandem could set it)",
		    base);
	} else {
		tdm__topo_say(base_why, sizeof(base_why),
		              "CUDA_DEVICE_MAX_CONNECTIONS unset, default %u work queues", base);
	}

	/* A MIG instance's share of its GPU, from the best fact there is. */
	int slices = tdm__topology_profile_slices(d->mig_profile);
	if (d->mig && d->sm_count > 0 && d->parent_sm_count >= d->sm_count) {
		num = (uint64_t)d->sm_count;
		den = (uint64_t)d->parent_sm_count;
		tdm__topo_say(share, sizeof(share), "%d of %d SMs", d->sm_count,
		              d->parent_sm_count);
	} else if (d->mig && slices > 0 && slices <= TDM__TOPO_MIG_SLICES) {
		num = (uint64_t)slices;
		den = TDM__TOPO_MIG_SLICES;
		tdm__topo_say(share, sizeof(share), "%d of %d compute slices, %s", slices,
		              TDM__TOPO_MIG_SLICES, d->mig_profile);
	} else if (d->mig && d->sm_count > 0) {
		num = (uint64_t)(d->sm_count < TDM__TOPO_REF_SMS ? d->sm_count : TDM__TOPO_REF_SMS);
		den = TDM__TOPO_REF_SMS;
		tdm__topo_say(share, sizeof(share), "%d SMs of an assumed %d: GPU size unknown",
		              d->sm_count, TDM__TOPO_REF_SMS);
	} else if (d->mig) {
		num = 1;
		den = TDM__TOPO_MIG_SLICES;
		tdm__topo_say(share, sizeof(share), "size unknown: assumed 1 of %d slices",
		              TDM__TOPO_MIG_SLICES);
	}
	unsigned pct = (unsigned)(100 * num / den);

	/* Streams. */
	if (env->streams_override != 0 || !d->mig)
		out->streams = whole_device_set(env->streams_override, env->workers, base);
	if (env->streams_override != 0) {
		tdm__topo_say(out->why_streams, sizeof(out->why_streams),
		              "%u streams: tdm_gpu_config.streams_per_device", out->streams);
	} else if (!d->mig && env->workers > base) {
		tdm__topo_say(out->why_streams, sizeof(out->why_streams),
		              "%u streams: one per worker (at most %u) over %s", out->streams,
		              TDM__TOPO_MAX_QUEUES, base_why);
	} else if (!d->mig) {
		tdm__topo_say(out->why_streams, sizeof(out->why_streams), "%u streams: %s", base,
		              base_why);
	} else {
		unsigned lo = base < TDM__TOPO_MIN_MIG_STREAMS ? base : TDM__TOPO_MIN_MIG_STREAMS;
		out->streams = clamp_u(scale_up(base, num, den), lo, base);
		tdm__topo_say(
		    out->why_streams, sizeof(out->why_streams),
		    "%u streams: %u work queues x the instance's %u%% (%s), rounded up, at least "
		    "%u",
		    out->streams, base, pct, share, lo);
	}

	/* Concurrent launches. */
	if (env->launch_override != 0) {
		out->launch_limit = env->launch_override;
		tdm__topo_say(out->why_launch, sizeof(out->why_launch),
		              "launch limit %u: tdm_gpu_config.launch_limit", out->launch_limit);
	} else if (!d->mig) {
		out->launch_limit = TDM__TOPO_FULL_LAUNCH;
		tdm__topo_say(
		    out->why_launch, sizeof(out->why_launch),
		    "launch limit %u: tasks ran fastest with %u launching threads (H200, 16 "
		    "workers; more not measured)",
		    out->launch_limit, TDM__TOPO_FULL_LAUNCH);
	} else {
		out->launch_limit =
		    clamp_u(scale_up(TDM__TOPO_FULL_LAUNCH, num, den), 1, TDM__TOPO_FULL_LAUNCH);
		tdm__topo_say(out->why_launch, sizeof(out->why_launch),
		              "launch limit %u: %u (a whole device) x the instance's %u%%, rounded "
		              "up, at least 1",
		              out->launch_limit, TDM__TOPO_FULL_LAUNCH, pct);
	}

	/* Memory pool. */
	if (d->mem_bytes > 0) {
		out->pool_release_bytes = d->mem_bytes / 2;
		tdm__topo_say(
		    out->why_pool, sizeof(out->why_pool),
		    "pool release threshold %.1f GiB: half of the %s %.1f GiB stays pooled "
		    "across frees%s",
		    tdm__topo_gib(out->pool_release_bytes), d->mig ? "instance's own" : "device's",
		    tdm__topo_gib(d->mem_bytes),
		    d->mig ? "; the pool is this instance's alone" : "");
	} else {
		tdm__topo_say(out->why_pool, sizeof(out->why_pool),
		              "pool release threshold: the backend's default, memory size unknown");
	}

	/* Pinning. */
	out->pin_node = -1;
	bool restricted = env->allowed_cpus != NULL && env->allowed_cpus[0] != '\0';
	if (d->cpus[0] == '\0') {
		tdm__topo_say(out->why_pin, sizeof(out->why_pin),
		              "not pinned: no CPU locality known for the device");
	} else if (restricted && (rc = tdm__cpulist_and(d->cpus, env->allowed_cpus, out->pin_cpus,
	                                                sizeof(out->pin_cpus))) != 0) {
		out->pin_cpus[0] = '\0';
		tdm__topo_say(out->why_pin, sizeof(out->why_pin),
		              rc == -ENOSPC
		                  ? "not pinned: the CPUs near it make a list longer than "
		                    "this report holds"
		                  : "not pinned: CPU lists unreadable");
	} else if (restricted && out->pin_cpus[0] == '\0') {
		tdm__topo_say(out->why_pin, sizeof(out->why_pin),
		              "not pinned: the device's CPUs %s are none of this process's (%s)",
		              d->cpus, env->allowed_cpus);
	} else {
		if (!restricted)
			tdm__topo_copy(out->pin_cpus, sizeof(out->pin_cpus), d->cpus);
		out->pin_node = d->numa_node;
		bool narrowed = strcmp(out->pin_cpus, d->cpus) != 0;
		if (d->numa_node >= 0)
			tdm__topo_say(out->why_pin, sizeof(out->why_pin),
			              "pin to NUMA node %d, CPUs %s: nearest the device%s%s%s",
			              d->numa_node, out->pin_cpus, narrowed ? " (of its " : "",
			              narrowed ? d->cpus : "",
			              narrowed ? ", those this process may use)" : "");
		else
			tdm__topo_say(
			    out->why_pin, sizeof(out->why_pin),
			    "pin to CPUs %s: nearest the device%s%s%s (NUMA node unknown)",
			    out->pin_cpus, narrowed ? " (of its " : "", narrowed ? d->cpus : "",
			    narrowed ? ", those this process may use)" : "");
	}

	/* MIG. */
	if (d->mig) {
		char gpu[32], ids[48], count[48];
		if (d->parent_index >= 0)
			tdm__topo_say(gpu, sizeof(gpu), "GPU %d", d->parent_index);
		else
			tdm__topo_say(gpu, sizeof(gpu), "its GPU");
		if (d->gi_id >= 0)
			tdm__topo_say(ids, sizeof(ids), " (GI %d, CI %d)", d->gi_id, d->ci_id);
		else
			ids[0] = '\0';
		if (d->parent_instances > 0)
			tdm__topo_say(count, sizeof(count), ", one of %d", d->parent_instances);
		else
			count[0] = '\0';
		tdm__topo_say(
		    out->why_mig, sizeof(out->why_mig),
		    "MIG instance %s%s of %s%s: its own device, streams and pool; one process per "
		    "instance uses the others",
		    d->mig_profile[0] ? d->mig_profile : "(profile unknown)", ids, gpu, count);
	} else if (d->mig_mode == TDM_MIG_DISABLED) {
		tdm__topo_say(out->why_mig, sizeof(out->why_mig),
		              "MIG disabled: the whole GPU is one device");
	} else if (d->mig_mode == TDM_MIG_ENABLED) {
		tdm__topo_say(out->why_mig, sizeof(out->why_mig),
		              "MIG enabled, yet CUDA shows the GPU whole: treated as one device");
	} else {
		tdm__topo_say(out->why_mig, sizeof(out->why_mig),
		              "MIG mode unknown (no NVML): treated as a whole GPU");
	}
}

int tdm__topology_plan(struct tdm__topology *t, const struct tdm__decide_env *env)
{
	if (t == NULL)
		return -EINVAL;
	free(t->plans);
	t->plans = NULL;
	if (t->ndev == 0)
		return 0;
	t->plans = calloc((size_t)t->ndev, sizeof(*t->plans));
	if (t->plans == NULL)
		return -ENOMEM;
	for (int i = 0; i < t->ndev; i++)
		tdm__topology_decide(&t->devs[i], env, &t->plans[i]);
	return 0;
}

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
	       strcmp(a->why_pin, b->why_pin) == 0 && strcmp(a->why_mig, b->why_mig) == 0;
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
		fprintf(f, "\n  - %s\n  - %s\n  - %s\n  - %s\n  - %s\n", pl->why_streams,
		        pl->why_launch, pl->why_pool, pl->why_pin, pl->why_mig);
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

/* ---- the GPU layer's topology ------------------------------------------------------------- */

/* Facts from the backend itself: the sim's devices, or cuda's when live discovery disagrees. */
static int from_backend(struct tdm_gpu *gpu, const char *why, bool sim, struct tdm__topology **out)
{
	struct tdm__topology *t = tdm__topo_new(gpu->ops->name);
	if (t == NULL)
		return -ENOMEM;
	tdm__topo_env_facts(t);
	tdm__topo_copy(t->cuda_note, sizeof(t->cuda_note), why);
	tdm__topo_say(t->nvml_note, sizeof(t->nvml_note), "not used: facts from the %s backend",
	              gpu->ops->name);
	if (gpu->ndev > 0) {
		t->devs = calloc((size_t)gpu->ndev, sizeof(*t->devs));
		if (t->devs == NULL) {
			tdm__topology_free(t);
			return -ENOMEM;
		}
		t->ndev = gpu->ndev;
	}
	for (int i = 0; i < t->ndev; i++) {
		struct tdm__topo_dev *d = &t->devs[i];
		struct tdm__device_info info;
		size_t free_b = 0, total = 0;
		tdm__topo_dev_blank(d);
		d->index = i;
		if (gpu->ops->device_info(gpu->b, i, &info) == 0) {
			tdm__topo_copy(d->name, sizeof(d->name), info.name);
			d->sm_count = info.sm_count;
			d->copy_engines = info.async_engines;
		}
		if (gpu->ops->mem_info != NULL &&
		    gpu->ops->mem_info(gpu->b, i, &free_b, &total) == 0)
			d->mem_bytes = total;
		if (sim) {
			const unsigned char b[16] = {
			    't', 'd', 'm', 's', 'i', 'm', 0, 0,
			    0,   0,   0,   0,   0,   0,   0, (unsigned char)i};
			tdm__topology_uuid(b, "SIM-", d->uuid, sizeof(d->uuid));
			d->mig_mode = TDM_MIG_DISABLED; /* the simulator has no MIG */
		}
		tdm__topo_copy(d->parent_uuid, sizeof(d->parent_uuid), d->uuid);
		d->parent_sm_count = d->sm_count;
	}
	int rc = tdm__topo_machine_from_devs(t);
	if (rc != 0) {
		tdm__topology_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int tdm__topology_for_backend(struct tdm_gpu *gpu)
{
	struct tdm__topology *t = NULL;
	char why[TDM__TOPO_NOTE];
	int rc;
	if (gpu == NULL)
		return -EINVAL;
	if (gpu->ops == NULL) {
		rc = tdm__topology_empty("none", &t);
	} else if (gpu->ops == &tdm__backend_cuda) {
		rc = tdm__topology_discover(&t, gpu->nvml);
		if (rc == 0 && t->ndev != gpu->ndev) {
			tdm__topo_say(
			    why, sizeof(why),
			    "live discovery saw %d device(s), the backend %d: the backend's facts",
			    t->ndev, gpu->ndev);
			tdm__topology_free(t);
			t = NULL;
			rc = from_backend(gpu, why, false, &t);
		}
	} else {
		tdm__topo_say(why, sizeof(why), "%d simulated device(s)", gpu->ndev);
		rc = from_backend(gpu, why, true, &t);
	}
	if (rc != 0)
		return rc;
	struct tdm__decide_env env;
	tdm__decide_env_init(&env, t, &gpu->cfg);
	int workers = tdm_executor_workers(gpu->ex);
	env.workers = workers > 0 ? (unsigned)workers : 0;
	env.connections_by_tandem = gpu->connections_by_tandem;
	env.connections_late = gpu->connections_late;
	rc = tdm__topology_plan(t, &env);
	if (rc != 0) {
		tdm__topology_free(t);
		return rc;
	}
	tdm__topology_free(gpu->topo);
	gpu->topo = t;
	return 0;
}

int tdm_gpu_device_info(const tdm_gpu *gpu, int device, tdm_device_info *out)
{
	if (gpu == NULL || out == NULL)
		return -EINVAL;
	const struct tdm__topology *t = gpu->topo;
	if (gpu->ndev == 0 || t == NULL || t->ndev == 0 || t->plans == NULL)
		return -ENODEV;
	if (device < 0 || device >= t->ndev)
		return -EINVAL;
	const struct tdm__topo_dev *d = &t->devs[device];
	const struct tdm__device_plan *p = &t->plans[device];
	memset(out, 0, sizeof(*out));
	out->index = d->index;
	tdm__topo_copy(out->name, sizeof(out->name), d->name);
	tdm__topo_copy(out->uuid, sizeof(out->uuid), d->uuid);
	out->sm_count = d->sm_count;
	out->memory_bytes = d->mem_bytes;
	tdm__topo_copy(out->pci_bus_id, sizeof(out->pci_bus_id), d->pci_bus_id);
	out->numa_node = d->numa_node;
	tdm__topo_copy(out->cpus, sizeof(out->cpus), d->cpus);
	out->copy_engines = d->copy_engines;
	out->mig_mode = d->mig_mode;
	out->is_mig = d->mig;
	tdm__topo_copy(out->mig_profile, sizeof(out->mig_profile), d->mig_profile);
	out->gpu_instance = d->gi_id;
	out->compute_instance = d->ci_id;
	out->mig_instances = d->parent_instances;
	tdm__topo_copy(out->parent_uuid, sizeof(out->parent_uuid), d->parent_uuid);
	out->parent_index = d->parent_index;
	out->nvml = t->nvml;
	tdm__topo_copy(out->nvml_note, sizeof(out->nvml_note), t->nvml_note);
	out->streams = p->streams;
	out->launch_limit = p->launch_limit;
	out->pool_release_bytes = p->pool_release_bytes;
	out->pin_numa_node = p->pin_node;
	tdm__topo_copy(out->pin_cpus, sizeof(out->pin_cpus), p->pin_cpus);
	tdm__topo_copy(out->why_streams, sizeof(out->why_streams), p->why_streams);
	tdm__topo_copy(out->why_launch, sizeof(out->why_launch), p->why_launch);
	tdm__topo_copy(out->why_pool, sizeof(out->why_pool), p->why_pool);
	tdm__topo_copy(out->why_pin, sizeof(out->why_pin), p->why_pin);
	tdm__topo_copy(out->why_mig, sizeof(out->why_mig), p->why_mig);
	return 0;
}
