// SPDX-License-Identifier: MIT
/*
 * Device topology: what the machine has (GPUs, MIG instances, PCI bus, NUMA node, nearby CPUs,
 * NVML's view) and what tandem decides per device (stream bound, launch limit, pool threshold,
 * where to pin). Private to the GPU layer and its tests; tdm_gpu_device_info (tandem_gpu.h) is
 * the public view.
 *
 * One struct carries the facts whatever their source: live discovery (CUDA runtime + NVML loaded
 * with dlopen + sysfs), a recorded fixture (tests/fixtures/<name>.topo, format at the top of
 * tests/support/topology_fixture.c), or the sim backend's device_info. Decisions are a pure
 * function of one device's facts and a decide_env, so they are tested on recorded machines.
 *
 * A topology is immutable once built: any thread may read it without a lock.
 */
#ifndef TDM_GPU_TOPOLOGY_H
#define TDM_GPU_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem_gpu.h"

/* String sizes, with the NUL; the public tdm_device_info uses the same (checked in layer.c). */
#define TDM__TOPO_NAME 96
#define TDM__TOPO_UUID 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define TDM__TOPO_BUS 32  /* NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE */
#define TDM__TOPO_CPUS 512
#define TDM__TOPO_PROFILE 32
#define TDM__TOPO_NOTE 160
#define TDM__TOPO_WHY 192

/*
 * One device: a whole GPU or one MIG instance. Counts and sizes are 0 when unknown, strings "".
 * For a MIG instance, bus id, NUMA node and CPUs are its physical GPU's.
 */
struct tdm__topo_dev {
	int index; /* CUDA ordinal in this process; -1: NVML shows it, CUDA does not */
	char name[TDM__TOPO_NAME];
	char uuid[TDM__TOPO_UUID]; /* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx or MIG-... */
	int sm_count;
	uint64_t mem_bytes;
	char pci_bus_id[TDM__TOPO_BUS]; /* dddd:bb:dd.f, lower case (sysfs's spelling) */
	int numa_node;                  /* -1: unknown */
	char cpus[TDM__TOPO_CPUS];      /* cpulist nearest the device (sysfs local_cpulist) */
	int copy_engines;               /* async copy engines */
	int mig_mode; /* of the physical GPU: TDM_MIG_ENABLED, _DISABLED, _UNKNOWN */
	bool mig;     /* this entry is a MIG instance */
	char mig_profile[TDM__TOPO_PROFILE]; /* "1g.10gb"; "" unless mig (or unknown) */
	int gi_id, ci_id;                    /* GPU / compute instance ids; -1 unless mig */
	char parent_uuid[TDM__TOPO_UUID];    /* the physical GPU: the entry's own uuid unless mig */
	int parent_index;                    /* the physical GPU's NVML index; -1: unknown */
	int parent_sm_count;                 /* SMs of the whole physical GPU; 0: unknown */
	int parent_instances;                /* MIG instances on the physical GPU; 0 unless known */
};

struct tdm__topology {
	char source[TDM__TOPO_NOTE];    /* "cuda", "sim", "none", "fixture <path>" */
	char note[TDM__TOPO_NOTE];      /* what machine this is (a fixture's `note`) */
	char cuda_note[TDM__TOPO_NOTE]; /* what the CUDA runtime said, or why it says nothing */
	bool visible_devices_set;       /* CUDA_VISIBLE_DEVICES was set (maybe to "") */
	char visible_devices[TDM__TOPO_NOTE]; /* its raw value */
	int max_connections; /* CUDA_DEVICE_MAX_CONNECTIONS: 0 unset or empty, -1 no number of 1
	                        or more, else the queues CUDA makes of it (1..32) */
	char max_connections_raw[32];   /* as set, for messages */
	char affinity[TDM__TOPO_CPUS];  /* CPUs the process may run on; "": unknown (any) */
	bool nvml;                      /* NVML was loaded and initialised */
	char nvml_note[TDM__TOPO_NOTE]; /* driver version, or why NVML is not available */
	int ndev;                       /* what CUDA enumerates, by ordinal: the device entries */
	struct tdm__topo_dev *devs;
	int nmachine;                   /* what NVML shows: each GPU, then its MIG instances */
	struct tdm__topo_dev *machine;  /* without NVML: a copy of devs */
	struct tdm__device_plan *plans; /* ndev of them once tdm__topology_plan ran, else NULL */
};

/* What decisions depend on beyond the device. */
struct tdm__decide_env {
	int max_connections;       /* as in struct tdm__topology */
	unsigned streams_override; /* tdm_gpu_config.streams_per_device; 0: decide */
	unsigned launch_override;  /* tdm_gpu_config.launch_limit; 0: decide */
	unsigned workers;          /* the executor's workers; 0: unknown */
	const char *allowed_cpus;  /* cpulist the process may run on; NULL or "": any */
	/* CUDA_DEVICE_MAX_CONNECTIONS as tdm_gpu_prepare set it by TDM_CONNECTIONS_AUTO in this
	 * process, 0: not so set (how decisions read it: the top of topology/decide.c). */
	unsigned connections_by_tandem;
	/* tdm_gpu_prepare wanted to set it, and CUDA had started in the process first. */
	bool connections_late;
};

/* The CUDA_DEVICE_MAX_CONNECTIONS tdm_gpu_config.connections asks tdm_gpu_prepare to set (rules
 * at the top of topology/decide.c), given the config's streams_per_device, the executor's workers
 * and CUDA_VISIBLE_DEVICES (NULL: unset); 0: none. */
unsigned tdm__connections_wanted(int connections, unsigned streams_per_device, unsigned workers,
                                 const char *visible_devices);

/* Decisions for one device, each with the one line that says why. */
struct tdm__device_plan {
	unsigned streams;              /* stream bound per priority class */
	unsigned launch_limit;         /* threads launching on the device at once */
	uint64_t pool_release_bytes;   /* memory pool release threshold; 0: keep the default */
	int pin_node;                  /* NUMA node to pin workers and the poller near; -1: none */
	char pin_cpus[TDM__TOPO_CPUS]; /* "": do not pin */
	char why_streams[TDM__TOPO_WHY];
	char why_launch[TDM__TOPO_WHY];
	char why_pool[TDM__TOPO_WHY];
	char why_pin[TDM__TOPO_WHY];
	char why_mig[TDM__TOPO_WHY];
	unsigned dsched_blocks; /* a device scheduler's default share: blocks, an SM each */
	char why_dsched[TDM__TOPO_WHY];
};

/* The rules, for tests and callers that want to state them. */
#define TDM__TOPO_DEFAULT_QUEUES 8 /* CUDA's default hardware work queues per context */
#define TDM__TOPO_MAX_QUEUES 32    /* the most CUDA makes (CUDA_DEVICE_MAX_CONNECTIONS 1..32) */
#define TDM__TOPO_MIN_MIG_STREAMS 2
#define TDM__TOPO_FULL_LAUNCH 16 /* a whole device's launch limit; why: gpu-streams.md */
#define TDM__TOPO_MIG_SLICES 7   /* compute slices of a whole A100/H100/H200 in MIG mode */
#define TDM__TOPO_REF_SMS 132   /* an H100/H200: the whole GPU assumed when nothing else is known */
#define TDM__TOPO_DSCHED_DIV 16 /* a device scheduler takes 1/16 of the SMs by default */

/*
 * Live discovery: CUDA runtime devices (none without TANDEM_HAVE_CUDA), enriched by NVML when
 * libnvidia-ml.so.1 loads (unless nvml is false: TANDEM_NVML=0), NUMA node and CPUs from
 * sysfs. Never fails for want of a device or a driver: then it returns 0 with ndev == 0, and
 * cuda_note and nvml_note say why. -EINVAL: out is NULL. -ENOMEM.
 */
int tdm__topology_discover(struct tdm__topology **out, bool nvml);

/*
 * Parses a fixture: path_or_text is the text itself when it holds a newline, else a file path.
 * -EINVAL: malformed, with "line N: what" in err (err may be NULL). -ENOENT, -EACCES, ...: the
 * file cannot be read (err says so). -ENOMEM.
 */
int tdm__topology_load(const char *path_or_text, struct tdm__topology **out, char *err,
                       size_t errlen);

/* A topology with no devices and the process's environment facts, for the `none` backend. */
int tdm__topology_empty(const char *source, struct tdm__topology **out);

void tdm__topology_free(struct tdm__topology *t);

/* env from the topology's facts and a config (NULL: no overrides). */
void tdm__decide_env_init(struct tdm__decide_env *env, const struct tdm__topology *t,
                          const tdm_gpu_config *cfg);

/* The decisions for one device (rules at the top of decide.c). */
void tdm__topology_decide(const struct tdm__topo_dev *d, const struct tdm__decide_env *env,
                          struct tdm__device_plan *out);

/* Decides every device entry into t->plans. -ENOMEM. */
int tdm__topology_plan(struct tdm__topology *t, const struct tdm__decide_env *env);

/* A readable report of t (facts, the NVML view, and plans if made). -EIO on a write error. */
int tdm__topology_print(const struct tdm__topology *t, FILE *out);

/* ---- pieces, exposed for tests ---- */

/* The sysfs facts of a PCI device under root ("/sys/bus/pci/devices" when NULL). */
void tdm__topology_sysfs(const char *root, const char *bus_id, int *numa_node, char *cpus,
                         size_t len);
/* "GPU-" + the 16 bytes as 8-4-4-4-12 lower-case hex. len >= 41. */
void tdm__topology_uuid(const unsigned char bytes[16], const char *prefix, char *out, size_t len);
/* Any "domain:bus:device.function" (NVML's 8-digit domain too) as dddd:bb:dd.f; -EINVAL. */
int tdm__topology_bus_id(const char *in, char *out, size_t len);
/* Compute slices of a MIG profile ("3g.20gb" -> 3); 0 if it has none. */
int tdm__topology_profile_slices(const char *profile);
/* CPUs in a cpulist ("0-3,8" -> 5); -EINVAL if malformed. "" has 0. */
int tdm__cpulist_count(const char *list);
/* The CPUs in both lists, as a cpulist. -EINVAL if either is malformed. */
int tdm__cpulist_and(const char *a, const char *b, char *out, size_t len);

/* ---- shared by the topology's files and the tests' fixture parser ---- */

/* snprintf that may cut: notes and reasons are for people. */
__attribute__((format(printf, 3, 4))) void tdm__topo_say(char *buf, size_t len, const char *fmt,
                                                         ...);
/* Copies src (NULL: "") into dst, cut to len - 1 characters. */
void tdm__topo_copy(char *dst, size_t len, const char *src);
double tdm__topo_gib(uint64_t bytes);
/* Unknowns: index, NUMA node, instance ids and parent index -1, MIG mode unknown, rest 0. */
void tdm__topo_dev_blank(struct tdm__topo_dev *d);
/* A MIG instance's facts that are its physical GPU's (machine entry gpu): bus id, NUMA node,
 * CPUs, MIG mode, parent uuid, index and SM count. */
void tdm__topo_inherit_gpu(struct tdm__topo_dev *inst, const struct tdm__topo_dev *gpu);
/* Appends a copy of d to *arr, of *n entries. -ENOMEM. */
int tdm__topo_dev_push(struct tdm__topo_dev **arr, int *n, const struct tdm__topo_dev *d);
/* An empty topology (no devices, no facts), or NULL. */
struct tdm__topology *tdm__topo_new(const char *source);
/* The calling process's CUDA variables and CPU affinity into t. */
void tdm__topo_env_facts(struct tdm__topology *t);
void tdm__topo_set_max_connections(struct tdm__topology *t, const char *raw);
void tdm__topo_set_visible_devices(struct tdm__topology *t, const char *raw);
/* machine = a copy of devs (what CUDA shows), where NVML shows nothing. -ENOMEM. */
int tdm__topo_machine_from_devs(struct tdm__topology *t);
/* "NVIDIA A100-SXM4-40GB MIG 3g.20gb" -> "3g.20gb"; false if the name names no profile. */
bool tdm__topo_profile_from_name(const char *name, char *out, size_t len);

#endif /* TDM_GPU_TOPOLOGY_H */
