// SPDX-License-Identifier: MIT
/*
 * Device topology's decisions (topology.h): a pure function of one device's facts and a
 * decide_env, so that they are tested on recorded machines. The rules are stated here; why, with
 * the measurements, in docs/design/topology.md and gpu-streams.md.
 *
 * ---- Decisions (tdm__topology_decide); the reasons and figures: docs/design/gpu-streams.md ----
 * - base work queues Q: CUDA_DEVICE_MAX_CONNECTIONS as CUDA reads it (its leading number, at
 *   most 32), else 8 (CUDA's default; more streams than queues alias onto the same queues).
 *   A value tdm_gpu_prepare set by TDM_CONNECTIONS_AUTO counts as unset here: it only gives the
 *   streams queues (a value tdm_gpu_config.connections named counts as the user's).
 * - CUDA_DEVICE_MAX_CONNECTIONS that tdm_gpu_prepare sets (tdm__connections_wanted):
 *   tdm_gpu_config.connections if 1..32; with AUTO, the stream set's size (streams_per_device,
 *   else the workers) when it is above 8, at most 32, so that no two streams share a queue;
 *   none where CUDA_VISIBLE_DEVICES names a MIG instance (its set is a share of 8 queues). A
 *   value AUTO sets changes no decision, and AUTO sets none for 8 or fewer.
 * - share of a MIG instance: its SMs over its GPU's when both are known, else its compute slices
 *   over 7 (the profile "<k>g..."), else its SMs over TDM__TOPO_REF_SMS, saying so.
 * - streams per priority class: tdm_gpu_config.streams_per_device if set; a whole device Q, or
 *   one per worker when there are more workers than Q (at most 32, the most work queues CUDA
 *   makes): each worker's own slot is then a stream no other worker's slot is, whose launches
 *   and completion writes two workers would otherwise take turns at; a MIG instance
 *   ceil(Q x share), at least min(2, Q), at most Q (1g of 7 slices: 2), however many workers
 *   there are.
 * - launch limit: tdm_gpu_config.launch_limit if set; a whole device 16, the most measured and
 *   the fastest; a MIG instance ceil(16 x share), 1..16 (a 1g instance: 3 by its share of 7
 *   slices, 2 by 16 of 132 SMs where the parent's SM count is known).
 * - pool release threshold: half the device's (or the instance's own) memory; 0 if unknown.
 *   Each CUDA device, a MIG instance included, is its own entry with its own pool: never shared.
 * - pinning: the device's nearest CPUs (local_cpulist) within the process's affinity, and its
 *   NUMA node; nothing when unknown or when none of them is the process's.
 * - a device scheduler's default share (tandem_dsched.h): a 16th of the device's SMs (of a MIG
 *   instance's own), at least 1: 8 of an H200's 132, 1 of a 1g instance's 16 (why 1/16:
 *   docs/design/dsched.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "topology.h"

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

/* The base work queues Q, with the sentence that says where they come from. */
static unsigned base_queues(const struct tdm__decide_env *env, char *why, size_t len)
{
	unsigned base = TDM__TOPO_DEFAULT_QUEUES;
	if (env->connections_by_tandem != 0 &&
	    env->max_connections == (int)env->connections_by_tandem) {
		tdm__topo_say(
		    why, len,
		    "CUDA_DEVICE_MAX_CONNECTIONS=%u set by tandem (%u hardware queues; the "
		    "set as with CUDA's default %u)",
		    env->connections_by_tandem, env->connections_by_tandem, base);
	} else if (env->max_connections >= 1 && env->max_connections <= TDM__TOPO_MAX_QUEUES) {
		base = (unsigned)env->max_connections;
		tdm__topo_say(why, len, "CUDA_DEVICE_MAX_CONNECTIONS=%u work queues", base);
	} else if (env->max_connections != 0) {
		tdm__topo_say(
		    why, len,
		    "CUDA_DEVICE_MAX_CONNECTIONS not a number of 1 or more, CUDA's default "
		    "%u work queues",
		    base);
	} else if (env->connections_late) {
		tdm__topo_say(
		    why, len,
		    "CUDA_DEVICE_MAX_CONNECTIONS unset, default %u work queues (CUDA started "
		    "before tandem could set it)",
		    base);
	} else {
		tdm__topo_say(why, len, "CUDA_DEVICE_MAX_CONNECTIONS unset, default %u work queues",
		              base);
	}
	return base;
}

/* A device's share of its GPU: num / den (1 / 1 for a whole device), in percent, and for a MIG
 * instance the fact it was taken from. */
struct share {
	uint64_t num, den;
	unsigned pct;
	char why[96];
};

/* A MIG instance's share of its GPU, from the best fact there is. */
static void mig_share(const struct tdm__topo_dev *d, struct share *sh)
{
	int slices = tdm__topology_profile_slices(d->mig_profile);
	sh->num = 1;
	sh->den = 1;
	if (d->mig && d->sm_count > 0 && d->parent_sm_count >= d->sm_count) {
		sh->num = (uint64_t)d->sm_count;
		sh->den = (uint64_t)d->parent_sm_count;
		tdm__topo_say(sh->why, sizeof(sh->why), "%d of %d SMs", d->sm_count,
		              d->parent_sm_count);
	} else if (d->mig && slices > 0 && slices <= TDM__TOPO_MIG_SLICES) {
		sh->num = (uint64_t)slices;
		sh->den = TDM__TOPO_MIG_SLICES;
		tdm__topo_say(sh->why, sizeof(sh->why), "%d of %d compute slices, %s", slices,
		              TDM__TOPO_MIG_SLICES, d->mig_profile);
	} else if (d->mig && d->sm_count > 0) {
		sh->num =
		    (uint64_t)(d->sm_count < TDM__TOPO_REF_SMS ? d->sm_count : TDM__TOPO_REF_SMS);
		sh->den = TDM__TOPO_REF_SMS;
		tdm__topo_say(sh->why, sizeof(sh->why), "%d SMs of an assumed %d: GPU size unknown",
		              d->sm_count, TDM__TOPO_REF_SMS);
	} else if (d->mig) {
		sh->num = 1;
		sh->den = TDM__TOPO_MIG_SLICES;
		tdm__topo_say(sh->why, sizeof(sh->why), "size unknown: assumed 1 of %d slices",
		              TDM__TOPO_MIG_SLICES);
	}
	sh->pct = (unsigned)(100 * sh->num / sh->den);
}

static void decide_streams(const struct tdm__topo_dev *d, const struct tdm__decide_env *env,
                           unsigned base, const char *base_why, const struct share *sh,
                           struct tdm__device_plan *out)
{
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
		out->streams = clamp_u(scale_up(base, sh->num, sh->den), lo, base);
		tdm__topo_say(
		    out->why_streams, sizeof(out->why_streams),
		    "%u streams: %u work queues x the instance's %u%% (%s), rounded up, at least "
		    "%u",
		    out->streams, base, sh->pct, sh->why, lo);
	}
}

/* Concurrent launches. */
static void decide_launch(const struct tdm__topo_dev *d, const struct tdm__decide_env *env,
                          const struct share *sh, struct tdm__device_plan *out)
{
	if (env->launch_override != 0) {
		out->launch_limit = env->launch_override;
		tdm__topo_say(out->why_launch, sizeof(out->why_launch),
		              "launch limit %u: tdm_gpu_config.launch_limit", out->launch_limit);
	} else if (!d->mig) {
		out->launch_limit = TDM__TOPO_FULL_LAUNCH;
		tdm__topo_say(
		    out->why_launch, sizeof(out->why_launch),
		    "launch limit %u: tasks ran fastest with %u launching threads (more not "
		    "measured; docs/design/gpu-streams.md)",
		    out->launch_limit, TDM__TOPO_FULL_LAUNCH);
	} else {
		out->launch_limit = clamp_u(scale_up(TDM__TOPO_FULL_LAUNCH, sh->num, sh->den), 1,
		                            TDM__TOPO_FULL_LAUNCH);
		tdm__topo_say(out->why_launch, sizeof(out->why_launch),
		              "launch limit %u: %u (a whole device) x the instance's %u%%, rounded "
		              "up, at least 1",
		              out->launch_limit, TDM__TOPO_FULL_LAUNCH, sh->pct);
	}
}

/* The memory pool's release threshold. */
static void decide_pool(const struct tdm__topo_dev *d, struct tdm__device_plan *out)
{
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
}

/* Where to pin: the device's CPUs within the process's, and its NUMA node. */
static void decide_pin(const struct tdm__topo_dev *d, const struct tdm__decide_env *env,
                       struct tdm__device_plan *out)
{
	int rc;
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
}

/* What MIG makes of the device (a sentence only: MIG's effect is in the share). */
static void decide_mig(const struct tdm__topo_dev *d, struct tdm__device_plan *out)
{
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

/* A device scheduler's default share. */
static void decide_dsched(const struct tdm__topo_dev *d, struct tdm__device_plan *out)
{
	if (d->sm_count <= 0) {
		out->dsched_blocks = 1;
		tdm__topo_say(out->why_dsched, sizeof(out->why_dsched),
		              "device scheduler: 1 block by default, the SM count unknown");
		return;
	}
	unsigned sms = (unsigned)d->sm_count, blocks = sms / TDM__TOPO_DSCHED_DIV;
	if (blocks == 0)
		blocks = 1;
	out->dsched_blocks = blocks;
	tdm__topo_say(
	    out->why_dsched, sizeof(out->why_dsched),
	    "device scheduler: %u block%s (an SM each) by default, 1/%d of the %s %u SMs, "
	    "at least 1; %u left to other kernels",
	    blocks, blocks == 1 ? "" : "s", TDM__TOPO_DSCHED_DIV,
	    d->mig ? "instance's" : "device's", sms, sms - blocks);
}

void tdm__topology_decide(const struct tdm__topo_dev *d, const struct tdm__decide_env *env,
                          struct tdm__device_plan *out)
{
	static const struct tdm__decide_env none = {0};
	char base_why[160];
	struct share sh;

	memset(out, 0, sizeof(*out));
	if (env == NULL)
		env = &none;
	unsigned base = base_queues(env, base_why, sizeof(base_why));
	mig_share(d, &sh);
	decide_streams(d, env, base, base_why, &sh, out);
	decide_launch(d, env, &sh, out);
	decide_pool(d, out);
	decide_pin(d, env, out);
	decide_mig(d, out);
	decide_dsched(d, out);
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
