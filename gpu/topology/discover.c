// SPDX-License-Identifier: MIT
/*
 * Live discovery (tdm__topology_discover): the CUDA runtime's devices, completed by NVML and sysfs.
 * NVML is loaded at run time (dlopen, never linked): the build machine's toolkit has no nvml.h
 * and CI has no driver; the few declarations it needs are written here from NVML's documented API.
 *
 * 1. The CUDA runtime's devices, by ordinal: name, UUID (formatted GPU-...), SMs, memory, PCI
 *    bus id, async copy engines. One CUDA process enumerates at most one MIG instance (CUDA
 *    12/13), and its 16 UUID bytes are the instance's own, which CUDA does not mark as MIG.
 * 2. NVML, if libnvidia-ml.so.1 loads and initialises: each CUDA device is looked up as
 *    GPU-<uuid> (a whole GPU), then MIG-<uuid> (an instance), then by PCI bus id (its physical
 *    GPU; a GPU in MIG mode is never enumerated whole by CUDA, so a device found only this way on
 *    a MIG-enabled GPU is one of its instances, matched by UUID among them). That gives MIG mode,
 *    GPU/compute instance ids, profile, parent GPU and its instance count. Every GPU and instance
 *    NVML shows (NVML ignores CUDA_VISIBLE_DEVICES) becomes the machine view. Without NVML the
 *    facts are CUDA's alone, MIG mode is unknown (unless the name carries " MIG <profile>") and
 *    nvml_note says why.
 * 3. sysfs: /sys/bus/pci/devices/<dddd:bb:dd.f>/numa_node and local_cpulist.
 * Without TANDEM_HAVE_CUDA nothing is found and NVML is not loaded: there is nothing to complete.
 * A machine without a driver or a device gives 0 devices, and notes that say why, never an error.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology.h"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

/*
 * The few NVML declarations we need, written from NVML's documented API (nvml.h is not on the
 * build machine): nvmlReturn_t is an enum (int-sized) with NVML_SUCCESS = 0 and
 * NVML_ERROR_NOT_SUPPORTED = 3; nvmlDevice_t is an opaque pointer; NVML_DEVICE_MIG_ENABLE = 1;
 * NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE are 96; nvmlMemory_t is
 * {total, free, used} in unsigned long long; nvmlPciInfo_t (filled by nvmlDeviceGetPciInfo_v3)
 * is {char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
 * char busId[32]}, given spare room here in case a later NVML grows it.
 */
typedef int tdm__nvml_ret;
typedef struct tdm__nvml_device *tdm__nvml_dev;
#define NVML_OK 0
#define NVML_NOT_SUPPORTED 3
#define NVML_MIG_ENABLE 1u
#define NVML_STR 96

struct tdm__nvml_memory {
	unsigned long long total, free, used;
};

struct tdm__nvml_pci {
	char bus_id_legacy[16];
	unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
	char spare[64];
};

struct tdm__nvml {
	void *lib;
	/* required */
	tdm__nvml_ret (*init)(void);
	tdm__nvml_ret (*shutdown)(void);
	tdm__nvml_ret (*count)(unsigned *);
	tdm__nvml_ret (*by_index)(unsigned, tdm__nvml_dev *);
	tdm__nvml_ret (*uuid)(tdm__nvml_dev, char *, unsigned);
	/* optional: NULL where this NVML lacks them */
	const char *(*error_string)(tdm__nvml_ret);
	tdm__nvml_ret (*driver_version)(char *, unsigned);
	tdm__nvml_ret (*by_uuid)(const char *, tdm__nvml_dev *);
	tdm__nvml_ret (*by_bus)(const char *, tdm__nvml_dev *);
	tdm__nvml_ret (*name)(tdm__nvml_dev, char *, unsigned);
	tdm__nvml_ret (*index)(tdm__nvml_dev, unsigned *);
	tdm__nvml_ret (*pci)(tdm__nvml_dev, struct tdm__nvml_pci *);
	tdm__nvml_ret (*memory)(tdm__nvml_dev, struct tdm__nvml_memory *);
	tdm__nvml_ret (*mig_mode)(tdm__nvml_dev, unsigned *, unsigned *);
	tdm__nvml_ret (*is_mig)(tdm__nvml_dev, unsigned *);
	tdm__nvml_ret (*gi_id)(tdm__nvml_dev, unsigned *);
	tdm__nvml_ret (*ci_id)(tdm__nvml_dev, unsigned *);
	tdm__nvml_ret (*parent_of)(tdm__nvml_dev, tdm__nvml_dev *);
	tdm__nvml_ret (*max_mig)(tdm__nvml_dev, unsigned *);
	tdm__nvml_ret (*mig_by_index)(tdm__nvml_dev, unsigned, tdm__nvml_dev *);
};

/* dlsym's object pointer into a function pointer: ISO C has no conversion between the two, POSIX
 * guarantees the representation, so the bytes are copied. */
static bool nvml_sym(void *lib, const char *name, void *fp, size_t size)
{
	void *p = dlsym(lib, name);
	_Static_assert(sizeof(p) == sizeof(void (*)(void)), "function pointers fit a void *");
	if (size != sizeof(p))
		return false;
	memcpy(fp, &p, sizeof(p));
	return p != NULL;
}

#define NVML_SYM(nv, field, name) nvml_sym((nv)->lib, name, &(nv)->field, sizeof((nv)->field))

static const char *nvml_err(const struct tdm__nvml *nv, tdm__nvml_ret r)
{
	static _Thread_local char buf[32];
	if (nv->error_string != NULL) {
		const char *s = nv->error_string(r);
		if (s != NULL)
			return s;
	}
	tdm__topo_say(buf, sizeof(buf), "NVML error %d", r);
	return buf;
}

/* Loads and initialises NVML unless told not to (TANDEM_NVML, read by tdm_gpu_create); on
 * false, note says why and nothing stays loaded. */
static bool nvml_open(struct tdm__nvml *nv, bool wanted, char *note, size_t len)
{
	memset(nv, 0, sizeof(*nv));
	if (!wanted) {
		tdm__topo_say(note, len, "skipped: TANDEM_NVML is 0 or off");
		return false;
	}
	(void)dlerror();
	nv->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (nv->lib == NULL) {
		const char *e = dlerror();
		if (e == NULL || strstr(e, "No such file") != NULL)
			tdm__topo_say(note, len, "libnvidia-ml.so.1 not found");
		else
			tdm__topo_say(note, len, "libnvidia-ml.so.1 did not load: %s", e);
		return false;
	}
	const char *missing = NULL;
	if (!NVML_SYM(nv, init, "nvmlInit_v2"))
		missing = "nvmlInit_v2";
	else if (!NVML_SYM(nv, shutdown, "nvmlShutdown"))
		missing = "nvmlShutdown";
	else if (!NVML_SYM(nv, count, "nvmlDeviceGetCount_v2"))
		missing = "nvmlDeviceGetCount_v2";
	else if (!NVML_SYM(nv, by_index, "nvmlDeviceGetHandleByIndex_v2"))
		missing = "nvmlDeviceGetHandleByIndex_v2";
	else if (!NVML_SYM(nv, uuid, "nvmlDeviceGetUUID"))
		missing = "nvmlDeviceGetUUID";
	if (missing != NULL) {
		tdm__topo_say(note, len, "libnvidia-ml.so.1 lacks %s", missing);
		dlclose(nv->lib);
		nv->lib = NULL;
		return false;
	}
	(void)NVML_SYM(nv, error_string, "nvmlErrorString");
	(void)NVML_SYM(nv, driver_version, "nvmlSystemGetDriverVersion");
	(void)NVML_SYM(nv, by_uuid, "nvmlDeviceGetHandleByUUID");
	(void)NVML_SYM(nv, by_bus, "nvmlDeviceGetHandleByPciBusId_v2");
	(void)NVML_SYM(nv, name, "nvmlDeviceGetName");
	(void)NVML_SYM(nv, index, "nvmlDeviceGetIndex");
	(void)NVML_SYM(nv, pci, "nvmlDeviceGetPciInfo_v3");
	(void)NVML_SYM(nv, memory, "nvmlDeviceGetMemoryInfo");
	(void)NVML_SYM(nv, mig_mode, "nvmlDeviceGetMigMode");
	(void)NVML_SYM(nv, is_mig, "nvmlDeviceIsMigDeviceHandle");
	(void)NVML_SYM(nv, gi_id, "nvmlDeviceGetGpuInstanceId");
	(void)NVML_SYM(nv, ci_id, "nvmlDeviceGetComputeInstanceId");
	(void)NVML_SYM(nv, parent_of, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
	(void)NVML_SYM(nv, max_mig, "nvmlDeviceGetMaxMigDeviceCount");
	(void)NVML_SYM(nv, mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
	tdm__nvml_ret r = nv->init();
	if (r != NVML_OK) {
		tdm__topo_say(note, len, "nvmlInit_v2 failed: %s", nvml_err(nv, r));
		nv->lib = NULL; /* loaded, not unloaded: see nvml_close */
		return false;
	}
	char ver[NVML_STR] = "";
	if (nv->driver_version != NULL && nv->driver_version(ver, sizeof(ver)) == NVML_OK)
		tdm__topo_say(note, len, "driver %s", ver);
	else
		tdm__topo_say(note, len, "available");
	return true;
}

/*
 * Shuts NVML down but leaves the library loaded: unloading it would leave what it keeps
 * allocated reachable only from unmapped globals (a leak to LeakSanitizer), and dlopen's
 * reference count makes the next load free.
 */
static void nvml_close(struct tdm__nvml *nv)
{
	if (nv->lib != NULL)
		(void)nv->shutdown();
	nv->lib = NULL;
}

static int nvml_mig_mode(const struct tdm__nvml *nv, tdm__nvml_dev h)
{
	unsigned cur = 0, pending = 0;
	if (nv->mig_mode == NULL)
		return TDM_MIG_UNKNOWN;
	tdm__nvml_ret r = nv->mig_mode(h, &cur, &pending);
	if (r == NVML_NOT_SUPPORTED)
		return TDM_MIG_DISABLED; /* a GPU without MIG runs whole */
	if (r != NVML_OK)
		return TDM_MIG_UNKNOWN;
	return cur == NVML_MIG_ENABLE ? TDM_MIG_ENABLED : TDM_MIG_DISABLED;
}

static bool nvml_is_mig(const struct tdm__nvml *nv, tdm__nvml_dev h)
{
	unsigned v = 0;
	return nv->is_mig != NULL && nv->is_mig(h, &v) == NVML_OK && v != 0;
}

/* A string property of h (fn: nv->uuid or nv->name, NULL where absent) into out. */
static bool nvml_str(tdm__nvml_ret (*fn)(tdm__nvml_dev, char *, unsigned), tdm__nvml_dev h,
                     char *out, size_t len)
{
	char buf[NVML_STR] = "";
	if (fn == NULL || fn(h, buf, sizeof(buf)) != NVML_OK)
		return false;
	buf[sizeof(buf) - 1] = '\0';
	tdm__topo_copy(out, len, buf);
	return true;
}

/* The hex part of a UUID, prefix ("GPU-", "MIG-") dropped. */
static const char *uuid_hex(const char *uuid)
{
	const char *dash = strchr(uuid, '-');
	return dash != NULL && dash - uuid == 3 ? dash + 1 : uuid;
}

/* A MIG instance's own facts from its NVML handle. */
static void nvml_instance_facts(const struct tdm__nvml *nv, tdm__nvml_dev m,
                                struct tdm__topo_dev *d)
{
	unsigned v;
	struct tdm__nvml_memory mem;
	char name[NVML_STR];
	d->mig = true;
	(void)nvml_str(nv->uuid, m, d->uuid, sizeof(d->uuid));
	if (nv->gi_id != NULL && nv->gi_id(m, &v) == NVML_OK)
		d->gi_id = (int)v;
	if (nv->ci_id != NULL && nv->ci_id(m, &v) == NVML_OK)
		d->ci_id = (int)v;
	if (nvml_str(nv->name, m, name, sizeof(name))) {
		if (d->name[0] == '\0')
			tdm__topo_copy(d->name, sizeof(d->name), name);
		(void)tdm__topo_profile_from_name(name, d->mig_profile, sizeof(d->mig_profile));
	}
	if (d->mem_bytes == 0 && nv->memory != NULL && nv->memory(m, &mem) == NVML_OK)
		d->mem_bytes = mem.total;
}

/* Instances on a GPU in MIG mode: calls fn for each; returns how many. */
static int nvml_instances(const struct tdm__nvml *nv, tdm__nvml_dev gpu,
                          bool (*fn)(tdm__nvml_dev m, void *arg), void *arg)
{
	unsigned max = 0;
	int n = 0;
	if (nv->max_mig == NULL || nv->mig_by_index == NULL || nv->max_mig(gpu, &max) != NVML_OK)
		return 0;
	for (unsigned k = 0; k < max && k < 64; k++) {
		tdm__nvml_dev m;
		if (nv->mig_by_index(gpu, k, &m) != NVML_OK)
			continue;
		n++;
		if (fn != NULL && !fn(m, arg))
			fn = NULL;
	}
	return n;
}

struct match_arg {
	const struct tdm__nvml *nv;
	const char *hex;
	tdm__nvml_dev found;
};

static bool match_uuid(tdm__nvml_dev m, void *arg)
{
	struct match_arg *a = arg;
	char u[NVML_STR];
	if (nvml_str(a->nv->uuid, m, u, sizeof(u)) && strcmp(uuid_hex(u), a->hex) == 0) {
		a->found = m;
		return false;
	}
	return true;
}

/* Completes a CUDA device's facts from NVML (order of lookups: see the top of the file). */
static void nvml_enrich(const struct tdm__nvml *nv, struct tdm__topo_dev *d)
{
	tdm__nvml_dev h, whole = NULL, inst = NULL;
	char hex[TDM__TOPO_UUID], key[TDM__TOPO_UUID];
	unsigned v;
	tdm__topo_copy(hex, sizeof(hex), uuid_hex(d->uuid));
	if (nv->by_uuid != NULL && d->uuid[0] != '\0') {
		tdm__topo_say(key, sizeof(key), "GPU-%s", hex);
		if (nv->by_uuid(key, &h) == NVML_OK) {
			if (nvml_is_mig(nv, h)) {
				inst = h;
			} else {
				/* NVML knows it as a whole GPU: not an instance, whatever
				 * its name. */
				whole = h;
				d->mig = false;
				d->mig_profile[0] = '\0';
				d->parent_sm_count = d->sm_count;
			}
		}
		tdm__topo_say(key, sizeof(key), "MIG-%s", hex);
		if (whole == NULL && inst == NULL && nv->by_uuid(key, &h) == NVML_OK)
			inst = h;
	}
	if (inst != NULL && nv->parent_of != NULL && nv->parent_of(inst, &h) == NVML_OK)
		whole = h;
	if (whole == NULL && nv->by_bus != NULL && d->pci_bus_id[0] != '\0' &&
	    nv->by_bus(d->pci_bus_id, &h) == NVML_OK)
		whole = h;
	if (whole == NULL)
		return; /* NVML does not know it: CUDA's facts stand */
	d->mig_mode = nvml_mig_mode(nv, whole);
	if (d->mig_mode == TDM_MIG_ENABLED && inst == NULL) {
		/* CUDA never enumerates a MIG-mode GPU whole: this is one of its instances. */
		struct match_arg a = {.nv = nv, .hex = hex};
		(void)nvml_instances(nv, whole, match_uuid, &a);
		inst = a.found;
		d->mig = true;
	}
	if (d->mig_mode == TDM_MIG_ENABLED)
		d->parent_instances = nvml_instances(nv, whole, NULL, NULL);
	(void)nvml_str(nv->uuid, whole, d->parent_uuid, sizeof(d->parent_uuid));
	if (nv->index != NULL && nv->index(whole, &v) == NVML_OK)
		d->parent_index = (int)v;
	if (inst != NULL)
		nvml_instance_facts(nv, inst, d);
	if (d->mig && d->mig_profile[0] == '\0')
		(void)tdm__topo_profile_from_name(d->name, d->mig_profile, sizeof(d->mig_profile));
	if (!d->mig)
		tdm__topo_copy(d->parent_uuid, sizeof(d->parent_uuid), d->uuid);
	else
		d->parent_sm_count = 0; /* CUDA never shows the whole GPU in MIG mode: unknown */
}

/* A CUDA device with the same UUID, or NULL. */
static struct tdm__topo_dev *find_dev(struct tdm__topology *t, const char *uuid)
{
	for (int i = 0; i < t->ndev; i++)
		if (uuid[0] != '\0' && strcmp(uuid_hex(t->devs[i].uuid), uuid_hex(uuid)) == 0)
			return &t->devs[i];
	return NULL;
}

/* What only CUDA knows, onto a machine entry that a CUDA device of this process is. */
static void cuda_facts(struct tdm__topology *t, struct tdm__topo_dev *e)
{
	const struct tdm__topo_dev *c = find_dev(t, e->uuid);
	if (c != NULL) {
		e->index = c->index;
		e->sm_count = c->sm_count;
		e->copy_engines = c->copy_engines;
	}
}

struct machine_arg {
	const struct tdm__nvml *nv;
	struct tdm__topology *t;
	const struct tdm__topo_dev *gpu;
	int rc;
};

static bool add_instance(tdm__nvml_dev m, void *arg)
{
	struct machine_arg *a = arg;
	struct tdm__topo_dev e;
	tdm__topo_dev_blank(&e);
	nvml_instance_facts(a->nv, m, &e);
	tdm__topo_inherit_gpu(&e, a->gpu);
	cuda_facts(a->t, &e);
	a->rc = tdm__topo_dev_push(&a->t->machine, &a->t->nmachine, &e);
	return a->rc == 0;
}

/* Every GPU NVML shows, each followed by its MIG instances. */
static int nvml_machine(const struct tdm__nvml *nv, struct tdm__topology *t)
{
	unsigned n = 0;
	if (nv->count(&n) != NVML_OK)
		return 0;
	for (unsigned i = 0; i < n && i < 1024; i++) {
		tdm__nvml_dev h;
		struct tdm__topo_dev e;
		struct tdm__nvml_pci pci;
		struct tdm__nvml_memory mem;
		if (nv->by_index(i, &h) != NVML_OK)
			continue;
		tdm__topo_dev_blank(&e);
		e.parent_index = (int)i;
		(void)nvml_str(nv->uuid, h, e.uuid, sizeof(e.uuid));
		(void)nvml_str(nv->name, h, e.name, sizeof(e.name));
		tdm__topo_copy(e.parent_uuid, sizeof(e.parent_uuid), e.uuid);
		e.mig_mode = nvml_mig_mode(nv, h);
		if (nv->memory != NULL && nv->memory(h, &mem) == NVML_OK)
			e.mem_bytes = mem.total;
		memset(&pci, 0, sizeof(pci));
		if (nv->pci != NULL && nv->pci(h, &pci) == NVML_OK) {
			pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
			if (tdm__topology_bus_id(pci.bus_id, e.pci_bus_id, sizeof(e.pci_bus_id)) ==
			    0)
				tdm__topology_sysfs(NULL, e.pci_bus_id, &e.numa_node, e.cpus,
				                    sizeof(e.cpus));
		}
		cuda_facts(t, &e);
		e.parent_sm_count = e.sm_count;
		if (e.mig_mode == TDM_MIG_ENABLED)
			e.parent_instances = nvml_instances(nv, h, NULL, NULL);
		int rc = tdm__topo_dev_push(&t->machine, &t->nmachine, &e);
		if (rc != 0)
			return rc;
		if (e.mig_mode == TDM_MIG_ENABLED) {
			/* &e, not the pushed copy: adding instances moves t->machine. */
			struct machine_arg a = {.nv = nv, .t = t, .gpu = &e};
			(void)nvml_instances(nv, h, add_instance, &a);
			if (a.rc != 0)
				return a.rc;
		}
	}
	/* What only the whole GPU knows, onto the CUDA devices that are its instances. */
	for (int i = 0; i < t->ndev; i++) {
		struct tdm__topo_dev *d = &t->devs[i];
		for (int k = 0; d->mig && k < t->nmachine; k++)
			if (!t->machine[k].mig && strcmp(t->machine[k].uuid, d->parent_uuid) == 0) {
				if (d->parent_sm_count == 0)
					d->parent_sm_count = t->machine[k].sm_count;
				if (d->parent_instances == 0)
					d->parent_instances = t->machine[k].parent_instances;
			}
	}
	return 0;
}

/* The runtime's devices into t->devs; a runtime that sees none leaves ndev at 0 and says why. */
static int cuda_devices(struct tdm__topology *t)
{
	int n = 0, rt = 0, drv = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n <= 0) {
		tdm__topo_say(t->cuda_note, sizeof(t->cuda_note),
		              "no device: cudaGetDeviceCount: %s",
		              e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		(void)cudaGetLastError();
		return 0;
	}
	(void)cudaRuntimeGetVersion(&rt);
	(void)cudaDriverGetVersion(&drv);
	tdm__topo_say(t->cuda_note, sizeof(t->cuda_note),
	              "CUDA runtime %d.%d, driver %d.%d: %d device(s)", rt / 1000, rt % 1000 / 10,
	              drv / 1000, drv % 1000 / 10, n);
	t->devs = calloc((size_t)n, sizeof(*t->devs));
	if (t->devs == NULL)
		return -ENOMEM;
	t->ndev = n;
	for (int i = 0; i < n; i++) {
		struct tdm__topo_dev *d = &t->devs[i];
		struct cudaDeviceProp p;
		tdm__topo_dev_blank(d);
		d->index = i;
		memset(&p, 0, sizeof(p));
		e = cudaGetDeviceProperties(&p, i);
		if (e != cudaSuccess) {
			tdm__topo_say(d->name, sizeof(d->name), "(cudaGetDeviceProperties: %s)",
			              cudaGetErrorString(e));
			(void)cudaGetLastError();
			continue;
		}
		p.name[sizeof(p.name) - 1] = '\0';
		tdm__topo_copy(d->name, sizeof(d->name), p.name);
		tdm__topology_uuid((const unsigned char *)p.uuid.bytes, "GPU-", d->uuid,
		                   sizeof(d->uuid));
		tdm__topo_copy(d->parent_uuid, sizeof(d->parent_uuid), d->uuid);
		d->sm_count = p.multiProcessorCount;
		d->mem_bytes = p.totalGlobalMem;
		d->copy_engines = p.asyncEngineCount;
		tdm__topo_say(d->pci_bus_id, sizeof(d->pci_bus_id), "%04x:%02x:%02x.0",
		              (unsigned)p.pciDomainID, (unsigned)p.pciBusID,
		              (unsigned)p.pciDeviceID);
		tdm__topology_sysfs(NULL, d->pci_bus_id, &d->numa_node, d->cpus, sizeof(d->cpus));
		/* Without NVML, a name that names a MIG profile is the only sign of an instance. */
		if (tdm__topo_profile_from_name(d->name, d->mig_profile, sizeof(d->mig_profile))) {
			d->mig = true;
			d->parent_uuid[0] = '\0'; /* its GPU's: unknown without NVML */
		}
		d->parent_sm_count = d->mig ? 0 : d->sm_count;
	}
	return 0;
}
#endif /* TANDEM_HAVE_CUDA */

int tdm__topology_discover(struct tdm__topology **out, bool nvml)
{
	if (out == NULL)
		return -EINVAL;
	struct tdm__topology *t = tdm__topo_new("cuda");
	if (t == NULL)
		return -ENOMEM;
	tdm__topo_env_facts(t);
	int rc = 0;
#ifdef TANDEM_HAVE_CUDA
	struct tdm__nvml nv;
	rc = cuda_devices(t);
	if (rc == 0)
		t->nvml = nvml_open(&nv, nvml, t->nvml_note, sizeof(t->nvml_note));
	if (t->nvml) {
		for (int i = 0; i < t->ndev; i++)
			nvml_enrich(&nv, &t->devs[i]);
		rc = nvml_machine(&nv, t);
		nvml_close(&nv);
	} else if (rc == 0) {
		rc = tdm__topo_machine_from_devs(t);
	}
#else
	(void)nvml;
	/* Nothing for NVML to complete: the sanitizer builds, CUDA-less, never load it. */
	tdm__topo_say(t->cuda_note, sizeof(t->cuda_note), "no device: CUDA support not built in");
	tdm__topo_say(t->nvml_note, sizeof(t->nvml_note), "not asked: CUDA support not built in");
#endif
	if (rc != 0) {
		tdm__topology_free(t);
		return rc;
	}
	*out = t;
	return 0;
}
