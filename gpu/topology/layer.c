// SPDX-License-Identifier: MIT
/*
 * The GPU layer's topology: facts from live discovery (cuda) or from the backend itself (sim,
 * or cuda when discovery disagrees), planned with the layer's config and worker count; and
 * tdm_gpu_device_info, the public view of one device's facts and plan.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_internal.h"
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

/* ---- the GPU layer's topology ------------------------------------------------------------- */

/* Facts from the backend itself: the sim's devices, or cuda's when live discovery disagrees. */
static int from_backend(struct tdm__gpu *gpu, const char *why, bool sim, struct tdm__topology **out)
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

int tdm__topology_for_backend(struct tdm__gpu *gpu)
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

static int device_info(const struct tdm__gpu *gpu, int device, tdm_device_info *out)
{
	if (out == NULL)
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
	out->dsched_blocks = p->dsched_blocks;
	tdm__topo_copy(out->why_dsched, sizeof(out->why_dsched), p->why_dsched);
	return 0;
}

int tdm_gpu_device_info(const tdm_gpu *h, int device, tdm_device_info *out)
{
	TDM__GPU_CALL(h, device_info(gpu, device, out));
}
