// SPDX-License-Identifier: MIT
/*
 * Specification of device topology (gpu/topology/topology.h): recorded machines load through the
 * same struct as live discovery; the decisions on them follow the rules stated at the top of
 * gpu/topology/decide.c; a malformed fixture is refused with the line that is wrong; live discovery
 * on a machine without a driver finds nothing, says why, and does not crash; on a machine with a
 * GPU it reports what it found (our H200: MIG disabled); tdm_gpu_device_info shows the facts and
 * decisions of a tdm_gpu.
 *
 * Set TANDEM_TOPO_PRINT=1 to print each fixture's report (every_fixture_loads_and_prints) and
 * the live one.
 */
#include "common.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_internal.h"
#include "tandem_gpu.h"
#include "topology.h"

TDM_TEST_SUITE(topology);

#define MIB (1ull << 20)

static const char *const fixtures[] = {"none.topo", "h200.topo", "h100x8.topo",
                                       "h100-mig-7x1g.topo", "a100-mig-mixed.topo"};

/* tests/fixtures/<name>, found from this file's own path (the compiler's __FILE__), so the tests
 * run from any working directory; a relative __FILE__ falls back to the working directory. */
static void fixture_path(const char *name, char *out, size_t len)
{
	const char *slash = strrchr(__FILE__, '/');
	int dir = slash != NULL ? (int)(slash - __FILE__) : 0;
	snprintf(out, len, "%.*s%sfixtures/%s", dir, __FILE__, slash != NULL ? "/" : "tests/",
	         name);
	if (access(out, R_OK) != 0)
		snprintf(out, len, "tests/fixtures/%s", name);
}

static struct tdm__topology *load(const char *name)
{
	char path[1024], err[256];
	struct tdm__topology *t = NULL;
	fixture_path(name, path, sizeof(path));
	int rc = tdm__topology_load(path, &t, err, sizeof(err));
	cr_assert_eq(rc, 0, "load %s: %d: %s", path, rc, err);
	cr_assert_not_null(t);
	return t;
}

/* Decisions on t's devices with the environment its facts give. */
/* Plans t as tdm_gpu_create would for an executor of `workers` (0: unknown, as
 * tdm__decide_env_init leaves it). */
static void plan_for(struct tdm__topology *t, unsigned workers)
{
	struct tdm__decide_env env;
	tdm__decide_env_init(&env, t, NULL);
	if (workers != 0)
		env.workers = workers;
	cr_assert_eq(tdm__topology_plan(t, &env), 0);
}

static void plan(struct tdm__topology *t)
{
	plan_for(t, 0);
}

static bool want_print(void)
{
	const char *e = getenv("TANDEM_TOPO_PRINT");
	return e != NULL && *e != '\0' && strcmp(e, "0") != 0;
}

static const struct tdm__topo_dev *machine_by_gi(const struct tdm__topology *t, int gi)
{
	for (int i = 0; i < t->nmachine; i++)
		if (t->machine[i].mig && t->machine[i].gi_id == gi)
			return &t->machine[i];
	return NULL;
}

/* ---- fixtures load ---- */

Test(topology, every_fixture_loads_and_prints)
{
	for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
		struct tdm__topology *t = load(fixtures[i]);
		plan(t);
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		cr_assert_not_null(f);
		cr_assert_eq(tdm__topology_print(t, f), 0, "%s", fixtures[i]);
		fclose(f);
		cr_assert_not_null(strstr(buf, "NVML: "), "%s:\n%s", fixtures[i], buf);
		cr_assert_not_null(strstr(buf, t->note), "%s: the note is in the report",
		                   fixtures[i]);
		char line[96];
		snprintf(line, sizeof(line), "\n%d device(s) as CUDA enumerates them", t->ndev);
		cr_assert_not_null(strstr(buf, line), "%s: the device count:\n%s", fixtures[i],
		                   buf);
		for (int d = 0; d < t->ndev; d++) {
			/* The table's name column holds 36 characters. */
			snprintf(line, sizeof(line), "%.36s", t->devs[d].name);
			cr_assert_not_null(strstr(buf, line), "%s: device %d's name:\n%s",
			                   fixtures[i], d, buf);
			if (t->devs[d].uuid[0] != '\0')
				cr_assert_not_null(strstr(buf, t->devs[d].uuid),
				                   "%s: device %d's uuid:\n%s", fixtures[i], d,
				                   buf);
		}
		if (want_print())
			printf("==== %s\n%s\n", fixtures[i], buf);
		free(buf);
		tdm__topology_free(t);
	}
}

Test(topology, a_machine_without_gpu_has_no_devices)
{
	struct tdm__topology *t = load("none.topo");
	plan(t);
	cr_assert_eq(t->ndev, 0);
	cr_assert_eq(t->nmachine, 0);
	cr_assert_null(t->plans);
	cr_assert(!t->nvml);
	cr_assert_str_eq(t->nvml_note, "libnvidia-ml.so.1 not found");
	tdm__topology_free(t);
}

/* ---- one H200 ---- */

Test(topology, h200_facts)
{
	struct tdm__topology *t = load("h200.topo");
	cr_assert_eq(t->ndev, 1);
	const struct tdm__topo_dev *d = &t->devs[0];
	cr_assert_eq(d->index, 0);
	cr_assert_str_eq(d->name, "NVIDIA H200");
	cr_assert_eq(d->sm_count, 132);
	cr_assert_eq(d->mem_bytes, 143771 * MIB);
	cr_assert_eq(d->mig_mode, TDM_MIG_DISABLED);
	cr_assert(!d->mig);
	cr_assert_eq(d->gi_id, -1);
	cr_assert_str_eq(d->parent_uuid, d->uuid);
	cr_assert_eq(d->numa_node, 0);
	cr_assert_str_eq(d->cpus, "0-15");
	cr_assert_eq(d->copy_engines, 3);
	cr_assert_str_eq(d->pci_bus_id, "0000:18:00.0");
	cr_assert(t->nvml);
	tdm__topology_free(t);
}

Test(topology, h200_gets_8_streams_and_the_full_launch_limit)
{
	struct tdm__topology *t = load("h200.topo");
	plan(t);
	const struct tdm__device_plan *p = &t->plans[0];
	cr_assert_eq(p->streams, 8);
	cr_assert_not_null(strstr(p->why_streams, "CUDA_DEVICE_MAX_CONNECTIONS unset"), "%s",
	                   p->why_streams);
	cr_assert_eq(p->launch_limit, TDM__TOPO_FULL_LAUNCH);
	cr_assert_eq(p->pool_release_bytes, 143771 * MIB / 2);
	cr_assert_eq(p->pin_node, 0);
	cr_assert_str_eq(p->pin_cpus, "0-15");
	cr_assert_not_null(strstr(p->why_mig, "MIG disabled"), "%s", p->why_mig);
	cr_assert_eq(p->dsched_blocks, 8, "a device scheduler: 132 / 16 SMs");
	cr_assert_not_null(strstr(p->why_dsched, "124 left"), "%s", p->why_dsched);
	tdm__topology_free(t);
}

/* More workers than work queues: one stream each, at most 32; fewer: the queues' 8. MIG
 * instances keep their share. */
Test(topology, a_whole_device_gets_a_stream_per_worker_past_its_queues)
{
	static const struct {
		unsigned workers, streams;
	} cases[] = {{0, 8}, {1, 8}, {4, 8}, {8, 8}, {16, 16}, {40, 32}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tdm__topology *t = load("h200.topo");
		plan_for(t, cases[i].workers);
		cr_assert_eq(t->plans[0].streams, cases[i].streams, "%u workers: %u streams (%s)",
		             cases[i].workers, t->plans[0].streams, t->plans[0].why_streams);
		if (cases[i].streams > 8)
			cr_assert_not_null(strstr(t->plans[0].why_streams, "one per worker"));
		tdm__topology_free(t);
	}
	struct tdm__topology *t = load("h100-mig-7x1g.topo");
	plan_for(t, 16);
	cr_assert_eq(t->plans[0].streams, 2, "a 1g instance keeps its share");
	tdm__topology_free(t);
}

/* ---- eight GPUs on two NUMA nodes ---- */

Test(topology, eight_gpus_on_two_numa_nodes)
{
	struct tdm__topology *t = load("h100x8.topo");
	plan(t);
	cr_assert_eq(t->ndev, 8);
	for (int i = 0; i < 8; i++) {
		const struct tdm__topo_dev *d = &t->devs[i];
		const struct tdm__device_plan *p = &t->plans[i];
		int node = i < 4 ? 0 : 1;
		const char *cpus = i < 4 ? "0-55" : "56-111";
		cr_assert_eq(d->index, i);
		cr_assert_eq(d->numa_node, node, "gpu %d", i);
		cr_assert_str_eq(d->cpus, cpus, "gpu %d", i);
		cr_assert_eq(p->pin_node, node, "gpu %d", i);
		cr_assert_str_eq(p->pin_cpus, cpus, "gpu %d", i);
		cr_assert_eq(p->streams, 8);
		cr_assert_eq(p->launch_limit, TDM__TOPO_FULL_LAUNCH);
		cr_assert_eq(p->pool_release_bytes, 81559 * MIB / 2);
	}
	tdm__topology_free(t);
}

Test(topology, pinning_keeps_to_the_process_cpus)
{
	struct tdm__topology *t = load("h100x8.topo");
	struct tdm__decide_env env;
	tdm__decide_env_init(&env, t, NULL);
	env.allowed_cpus = "0-31";
	cr_assert_eq(tdm__topology_plan(t, &env), 0);
	cr_assert_str_eq(t->plans[0].pin_cpus, "0-31");
	cr_assert_eq(t->plans[0].pin_node, 0);
	cr_assert_str_eq(t->plans[5].pin_cpus, "");
	cr_assert_eq(t->plans[5].pin_node, -1);
	cr_assert_not_null(strstr(t->plans[5].why_pin, "not pinned"), "%s", t->plans[5].why_pin);
	tdm__topology_free(t);
}

/* ---- MIG ---- */

Test(topology, h100_split_7_ways_shows_all_and_cuda_sees_one)
{
	struct tdm__topology *t = load("h100-mig-7x1g.topo");
	cr_assert_eq(t->nmachine, 8, "the GPU and its 7 instances");
	cr_assert_eq(t->ndev, 1, "one CUDA process enumerates one instance");
	const struct tdm__topo_dev *d = &t->devs[0];
	cr_assert(d->mig);
	cr_assert_eq(d->mig_mode, TDM_MIG_ENABLED);
	cr_assert_str_eq(d->mig_profile, "1g.10gb");
	cr_assert_eq(d->gi_id, 9);
	cr_assert_eq(d->ci_id, 0);
	cr_assert_eq(strncmp(d->uuid, "MIG-", 4), 0);
	cr_assert_str_eq(d->uuid, t->visible_devices);
	cr_assert_str_eq(d->parent_uuid, "GPU-8100b000-0000-4000-8000-000000000000");
	cr_assert_eq(d->parent_index, 0);
	cr_assert_eq(d->parent_instances, 7);
	cr_assert_eq(d->parent_sm_count, 132);
	cr_assert_eq(d->sm_count, 16);
	cr_assert_eq(d->copy_engines, 1);
	cr_assert_eq(d->numa_node, 0, "an instance is where its GPU is");
	cr_assert_str_eq(d->cpus, "0-55");
	for (int gi = 7; gi <= 13; gi++) {
		const struct tdm__topo_dev *m = machine_by_gi(t, gi);
		cr_assert_not_null(m, "gi %d", gi);
		cr_assert_eq(m->index, gi == 9 ? 0 : -1, "only gi 9 is visible to CUDA");
	}
	tdm__topology_free(t);
}

Test(topology, a_1g_instance_of_132_sms_gets_2_streams_and_2_launchers)
{
	struct tdm__topology *t = load("h100-mig-7x1g.topo");
	plan(t);
	const struct tdm__device_plan *p = &t->plans[0];
	/* ceil(8 x 16/132) = 1, raised to the floor of 2; ceil(16 x 16/132) = 2. */
	cr_assert_eq(p->streams, TDM__TOPO_MIN_MIG_STREAMS);
	cr_assert_eq(p->launch_limit, 2);
	cr_assert_eq(p->pool_release_bytes, 9984 * MIB / 2, "half the instance's own memory");
	cr_assert_not_null(strstr(p->why_streams, "16 of 132 SMs"), "%s", p->why_streams);
	cr_assert_not_null(strstr(p->why_mig, "1g.10gb"), "%s", p->why_mig);
	cr_assert_not_null(strstr(p->why_mig, "one of 7"), "%s", p->why_mig);
	cr_assert_eq(p->pin_node, 0);
	/* A device scheduler's share: 1/16 of the instance's own 16 SMs, at least 1. */
	cr_assert_eq(p->dsched_blocks, 1);
	cr_assert_not_null(strstr(p->why_dsched, "instance's 16 SMs"), "%s", p->why_dsched);
	tdm__topology_free(t);
}

/* The documented rule for an instance with a known share sm/psm. */
static unsigned rule_streams(unsigned q, int sm, int psm)
{
	unsigned s = (unsigned)((q * (unsigned)sm + (unsigned)psm - 1) / (unsigned)psm);
	unsigned lo = q < 2 ? q : 2;
	return s < lo ? lo : s > q ? q : s;
}

Test(topology, a100_mixed_instances_get_bounds_by_their_share)
{
	struct tdm__topology *t = load("a100-mig-mixed.topo");
	struct tdm__decide_env env;
	tdm__decide_env_init(&env, t, NULL);
	static const struct {
		int gi, sms;
		uint64_t mib;
		unsigned streams, launch;
	} want[] = {
	    {2, 42, 20096, 4, 7}, {3, 28, 9984, 3, 5}, {9, 14, 4864, 2, 3}, {10, 14, 4864, 2, 3}};
	unsigned last = ~0u;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct tdm__topo_dev *m = machine_by_gi(t, want[i].gi);
		struct tdm__device_plan p;
		cr_assert_not_null(m);
		cr_assert_eq(m->sm_count, want[i].sms);
		tdm__topology_decide(m, &env, &p);
		cr_assert_eq(p.streams, want[i].streams, "gi %d: %s", want[i].gi, p.why_streams);
		cr_assert_eq(p.streams, rule_streams(8, m->sm_count, 108));
		cr_assert_leq(p.streams, last, "fewer SMs never get more streams");
		last = p.streams;
		cr_assert_eq(p.launch_limit, want[i].launch, "gi %d: %s", want[i].gi, p.why_launch);
		cr_assert_eq(p.pool_release_bytes, want[i].mib * MIB / 2, "its own memory");
	}
	tdm__topology_free(t);
}

Test(topology, no_two_mig_instances_share_a_device_entry)
{
	struct tdm__topology *t = load("a100-mig-mixed.topo");
	plan(t);
	for (int i = 0; i < t->nmachine; i++)
		for (int k = i + 1; k < t->nmachine; k++)
			cr_assert_str_neq(t->machine[i].uuid, t->machine[k].uuid);
	cr_assert_eq(t->ndev, 1);
	int matches = 0;
	for (int i = 0; i < t->nmachine; i++)
		matches += strcmp(t->machine[i].uuid, t->devs[0].uuid) == 0;
	cr_assert_eq(matches, 1, "the device entry is exactly one instance");
	cr_assert_str_eq(t->devs[0].mig_profile, "3g.20gb");
	cr_assert_eq(t->plans[0].pool_release_bytes, 20096 * MIB / 2,
	             "the pool is sized to the instance, not the GPU");
	tdm__topology_free(t);
}

/* ---- CUDA_DEVICE_MAX_CONNECTIONS and overrides ---- */

static struct tdm__device_plan decide_with(const struct tdm__topo_dev *d, int max_connections)
{
	struct tdm__decide_env env = {.max_connections = max_connections};
	struct tdm__device_plan p;
	tdm__topology_decide(d, &env, &p);
	return p;
}

Test(topology, max_connections_sets_the_stream_bound)
{
	struct tdm__topology *h200 = load("h200.topo");
	struct tdm__topology *mig = load("h100-mig-7x1g.topo");
	struct tdm__topology *a100 = load("a100-mig-mixed.topo");
	struct tdm__device_plan p = decide_with(&h200->devs[0], 16);
	cr_assert_eq(p.streams, 16);
	cr_assert_not_null(strstr(p.why_streams, "CUDA_DEVICE_MAX_CONNECTIONS=16"), "%s",
	                   p.why_streams);
	cr_assert_eq(decide_with(&h200->devs[0], 32).streams, 32);
	cr_assert_eq(decide_with(&h200->devs[0], 1).streams, 1);
	cr_assert_eq(decide_with(&mig->devs[0], 16).streams, 2);
	cr_assert_eq(decide_with(&mig->devs[0], 1).streams, 1, "never more than the queues");
	cr_assert_eq(decide_with(&a100->devs[0], 16).streams, rule_streams(16, 42, 108));
	p = decide_with(&h200->devs[0], -1);
	cr_assert_eq(p.streams, 8, "no number of 1 or more: CUDA's default");
	cr_assert_not_null(strstr(p.why_streams, "not a number of 1 or more"), "%s", p.why_streams);
	tdm__topology_free(h200);
	tdm__topology_free(mig);
	tdm__topology_free(a100);
}

/* CUDA_DEVICE_MAX_CONNECTIONS read as CUDA reads it (measured on the H200, CUDA 13.0: streams of
 * two 20 ms kernels each, timed): the leading number, capped at 32, CUDA's default without one. */
Test(topology, max_connections_is_read_as_cuda_reads_it)
{
	static const struct {
		const char *raw;
		int want;
	} cases[] = {{"16", 16},  {"64", 32}, {"99999999999999999999", 32},
	             {"4 ", 4},   {"4x", 4},  {" 4", 4},
	             {"+4", 4},   {"0", -1},  {"-3", -1},
	             {"abc", -1}, {"", 0}};
	struct tdm__topology *t = tdm__topo_new("test");
	cr_assert_not_null(t);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		tdm__topo_set_max_connections(t, cases[i].raw);
		cr_assert_eq(t->max_connections, cases[i].want, "\"%s\": %d", cases[i].raw,
		             t->max_connections);
	}
	tdm__topo_set_max_connections(t, NULL);
	cr_assert_eq(t->max_connections, 0);
	tdm__topology_free(t);
}

/* What tdm_gpu_config.connections asks tandem to set: the stream set's size past CUDA's 8 queues
 * with AUTO, at most 32, and nothing for a MIG instance; the config's own value; never with
 * KEEP. */
Test(topology, connections_tandem_sets_follow_the_stream_set)
{
	static const char *const mig = "MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/2";
	static const struct {
		int connections;
		unsigned streams_per_device, workers;
		const char *visible;
		unsigned want;
	} cases[] = {{TDM_CONNECTIONS_AUTO, 0, 16, NULL, 16},
	             {TDM_CONNECTIONS_AUTO, 0, 9, NULL, 9},
	             {TDM_CONNECTIONS_AUTO, 0, 8, NULL, 0},
	             {TDM_CONNECTIONS_AUTO, 0, 2, NULL, 0},
	             {TDM_CONNECTIONS_AUTO, 0, 0, NULL, 0},
	             {TDM_CONNECTIONS_AUTO, 0, 40, NULL, 32},
	             {TDM_CONNECTIONS_AUTO, 12, 2, NULL, 12},
	             {TDM_CONNECTIONS_AUTO, 4, 16, NULL, 0},
	             {TDM_CONNECTIONS_AUTO, 1024, 1, NULL, 32},
	             {TDM_CONNECTIONS_KEEP, 0, 16, NULL, 0},
	             {TDM_CONNECTIONS_AUTO, 0, 16, "0,1", 16},
	             {TDM_CONNECTIONS_AUTO, 0, 16, mig, 0},
	             {5, 0, 2, NULL, 5},
	             {32, 0, 64, mig, 32}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_assert_eq(tdm__connections_wanted(cases[i].connections,
		                                     cases[i].streams_per_device, cases[i].workers,
		                                     cases[i].visible),
		             cases[i].want, "case %zu", i);
}

/* A value tandem set gives the streams queues and changes no decision: the stream set and a MIG
 * instance's share are those of CUDA's default, and the reason says who set it. A value that is
 * not tandem's (the user's) is the base, as ever. */
Test(topology, a_connections_value_tandem_set_gives_queues_not_streams)
{
	struct tdm__topology *h200 = load("h200.topo");
	struct tdm__topology *mig = load("h100-mig-7x1g.topo");
	struct tdm__decide_env env = {.max_connections = 16, .connections_by_tandem = 16};
	struct tdm__device_plan p;
	env.workers = 16;
	tdm__topology_decide(&h200->devs[0], &env, &p);
	cr_assert_eq(p.streams, 16);
	cr_assert_not_null(strstr(p.why_streams, "one per worker"), "%s", p.why_streams);
	cr_assert_not_null(strstr(p.why_streams, "set by tandem"), "%s", p.why_streams);
	size_t len = strlen(p.why_streams);
	cr_assert(len > 0 && p.why_streams[len - 1] == ')', "cut short: %s", p.why_streams);
	env.workers = 4;
	tdm__topology_decide(&h200->devs[0], &env, &p);
	cr_assert_eq(p.streams, 8, "4 workers: CUDA's default set, not 16 streams");
	tdm__topology_decide(&mig->devs[0], &env, &p);
	cr_assert_eq(p.streams, decide_with(&mig->devs[0], 0).streams);
	env.max_connections = 12; /* someone else's value since */
	tdm__topology_decide(&h200->devs[0], &env, &p);
	cr_assert_eq(p.streams, 12);
	struct tdm__decide_env late = {.connections_late = true, .workers = 16};
	tdm__topology_decide(&h200->devs[0], &late, &p);
	cr_assert_eq(p.streams, 16);
	cr_assert_not_null(strstr(p.why_streams, "CUDA started before tandem"), "%s",
	                   p.why_streams);
	len = strlen(p.why_streams);
	cr_assert(len > 0 && p.why_streams[len - 1] == ')', "cut short: %s", p.why_streams);
	tdm__topology_free(h200);
	tdm__topology_free(mig);
}

Test(topology, decisions_read_the_env_struct_not_the_process_env)
{
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "2", 1); /* this test's own process */
	struct tdm__topology *t = load("h200.topo");
	plan(t);
	cr_assert_eq(t->max_connections, 0, "the fixture recorded it unset");
	cr_assert_eq(t->plans[0].streams, 8);
	tdm__topology_free(t);

	const char *text = "tandem-topology 1\n"
	                   "env CUDA_DEVICE_MAX_CONNECTIONS 12\n"
	                   "gpu 0 uuid=GPU-1 name=x sms=132 mig=disabled\n"
	                   "cuda 0 GPU-1\n";
	cr_assert_eq(tdm__topology_load(text, &t, NULL, 0), 0);
	cr_assert_eq(t->max_connections, 12);
	plan(t);
	cr_assert_eq(t->plans[0].streams, 12);
	tdm__topology_free(t);
}

Test(topology, config_overrides_win_and_say_so)
{
	struct tdm__topology *t = load("h100-mig-7x1g.topo");
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.streams_per_device = 5;
	cfg.launch_limit = 3;
	struct tdm__decide_env env;
	tdm__decide_env_init(&env, t, &cfg);
	cr_assert_eq(tdm__topology_plan(t, &env), 0);
	cr_assert_eq(t->plans[0].streams, 5);
	cr_assert_eq(t->plans[0].launch_limit, 3);
	cr_assert_not_null(strstr(t->plans[0].why_streams, "streams_per_device"));
	cr_assert_not_null(strstr(t->plans[0].why_launch, "launch_limit"));
	tdm__topology_free(t);
}

Test(topology, an_instance_of_unknown_size_is_sized_by_its_profile)
{
	/* Live discovery in MIG mode: CUDA cannot see the whole GPU, so its SM count is unknown. */
	struct tdm__topo_dev d;
	memset(&d, 0, sizeof(d));
	d.mig = true;
	d.sm_count = 42;
	d.numa_node = -1;
	d.parent_index = -1;
	d.gi_id = d.ci_id = -1;
	strcpy(d.mig_profile, "3g.20gb");
	struct tdm__device_plan p = decide_with(&d, 0);
	cr_assert_eq(p.streams, 4, "ceil(8 x 3/7)");
	cr_assert_eq(p.launch_limit, 7, "ceil(16 x 3/7)");
	cr_assert_not_null(strstr(p.why_streams, "3 of 7 compute slices"), "%s", p.why_streams);
	d.mig_profile[0] = '\0';
	d.sm_count = 16;
	p = decide_with(&d, 0);
	cr_assert_eq(p.streams, 2);
	cr_assert_not_null(strstr(p.why_streams, "assumed 132"), "%s", p.why_streams);
	cr_assert_eq(p.pool_release_bytes, 0, "memory unknown: the default threshold");
	cr_assert_eq(p.pin_node, -1);
	cr_assert_str_eq(p.pin_cpus, "");
}

/* ---- malformed fixtures ---- */

static void refused(const char *text, int line, const char *what)
{
	struct tdm__topology *t = (struct tdm__topology *)1;
	char err[256], prefix[32];
	int rc = tdm__topology_load(text, &t, err, sizeof(err));
	cr_assert_eq(rc, -EINVAL, "accepted:\n%s", text);
	cr_assert_eq(t, (struct tdm__topology *)1, "no topology on failure");
	snprintf(prefix, sizeof(prefix), "line %d: ", line);
	cr_assert_eq(strncmp(err, prefix, strlen(prefix)), 0, "'%s' does not start with '%s'", err,
	             prefix);
	cr_assert_not_null(strstr(err, what), "'%s' does not say '%s'", err, what);
}

#define HDR "tandem-topology 1\n"
#define GPU0 "gpu 0 uuid=GPU-0 name=\"A GPU\" sms=108 mig=enabled\n"

Test(topology, malformed_fixtures_are_refused_with_their_line)
{
	refused("gpu 0 uuid=GPU-0 name=x\n", 1, "header");
	refused("\n# only a comment\n", 1, "header");
	refused("# comment\ntandem-topology 2\n", 2, "version");
	refused(HDR "\ngadget 0\n", 3, "unknown record 'gadget'");
	refused(HDR "gpu 0 uuid=GPU-0 name=x smz=1\n", 2, "unknown key 'smz'");
	refused(HDR "gpu 0 uuid=GPU-0 name=x sms=many\n", 2, "sms");
	refused(HDR "gpu 0 uuid=GPU-0 name=\"x\n", 2, "unterminated");
	refused(HDR "gpu 0 uuid=GPU-0 name=x\ngpu 0 uuid=GPU-1 name=y\n", 3, "twice");
	refused(HDR "gpu 0 name=x\n", 2, "required");
	refused(HDR "gpu 0 uuid=GPU-0 name=x bus=pci0\n", 2, "bus");
	refused(HDR "gpu 0 uuid=GPU-0 name=x cpus=0-\n", 2, "cpus");
	refused(HDR "gpu 0 uuid=GPU-0 name=x mig=maybe\n", 2, "mig");
	refused(HDR "gpu 0 uuid=GPU-0 name=x numa\n", 2, "key=value");
	refused(HDR "mig 0 uuid=MIG-1 profile=1g.5gb\n", 2, "no earlier gpu");
	refused(HDR "gpu 0 uuid=GPU-0 name=x mig=disabled\nmig 0 uuid=MIG-1 profile=1g.5gb\n", 3,
	        "not enabled");
	refused(HDR GPU0 "mig 0 uuid=MIG-1 profile=big\n", 3, "profile");
	refused(HDR GPU0 "mig 0 uuid=GPU-0 profile=1g.5gb\n", 3, "twice");
	refused(HDR GPU0 "mig 0 uuid=MIG-1 profile=1g.5gb\ncuda 1 MIG-1\n", 4, "ordinals");
	refused(HDR GPU0 "cuda 0 GPU-9\n", 3, "no gpu or mig record");
	refused(HDR GPU0 "cuda 0 GPU-0\n", 3, "MIG mode");
	refused(HDR GPU0 "mig 0 uuid=MIG-1 profile=1g.5gb\ncuda 0 MIG-1\ncuda 1 MIG-1\n", 5,
	        "already");
	refused(HDR "env PATH /bin\n", 2, "CUDA_VISIBLE_DEVICES");
	refused(HDR "nvml maybe\n", 2, "nvml");
	refused(HDR "affinity none\n", 2, "affinity");
}

Test(topology, a_missing_fixture_file_is_enoent)
{
	struct tdm__topology *t = NULL;
	char err[256];
	cr_assert_eq(tdm__topology_load("/nonexistent/x.topo", &t, err, sizeof(err)), -ENOENT);
	cr_assert_null(t);
	cr_assert_not_null(strstr(err, "/nonexistent/x.topo"), "%s", err);
	cr_assert_eq(tdm__topology_load(NULL, &t, NULL, 0), -EINVAL);
}

Test(topology, fixture_text_with_comments_quotes_and_blanks)
{
	const char *text = "  # leading blanks and a comment\n"
	                   "\n" HDR "note a \"quoted\" note   \n"
	                   "env CUDA_VISIBLE_DEVICES\n"
	                   "nvml none \t NVML was switched off\n"
	                   "gpu 3 uuid=GPU-3 name=\"Some  GPU\"  bus=00000000:1B:00.0\tcpus=0-3,8\n"
	                   "cuda 0 GPU-3\n";
	struct tdm__topology *t = NULL;
	char err[256];
	cr_assert_eq(tdm__topology_load(text, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(t->note, "a \"quoted\" note");
	cr_assert(t->visible_devices_set);
	cr_assert_str_eq(t->visible_devices, "");
	cr_assert(!t->nvml);
	cr_assert_str_eq(t->nvml_note, "NVML was switched off");
	cr_assert_str_eq(t->devs[0].name, "Some  GPU");
	cr_assert_str_eq(t->devs[0].pci_bus_id, "0000:1b:00.0");
	cr_assert_str_eq(t->devs[0].cpus, "0-3,8");
	cr_assert_eq(t->devs[0].parent_index, 3);
	cr_assert_eq(t->devs[0].mig_mode, TDM_MIG_UNKNOWN);
	plan(t);
	cr_assert_not_null(strstr(t->plans[0].why_mig, "unknown"), "%s", t->plans[0].why_mig);
	tdm__topology_free(t);
}

/* ---- pieces ---- */

Test(topology, uuids_bus_ids_profiles_and_cpulists)
{
	const unsigned char b[16] = {0x5d, 0x5b, 0xa0, 0xd6, 0xd3, 0x3d, 0x2b, 0x2c,
	                             0x52, 0x4d, 0x9e, 0x3d, 0x8d, 0x2b, 0x8a, 0x77};
	char s[64];
	tdm__topology_uuid(b, "GPU-", s, sizeof(s));
	cr_assert_str_eq(s, "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77");
	cr_assert_eq(tdm__topology_bus_id("00000000:1B:00.0", s, sizeof(s)), 0);
	cr_assert_str_eq(s, "0000:1b:00.0");
	cr_assert_eq(tdm__topology_bus_id("0000:c3:00.1", s, sizeof(s)), 0);
	cr_assert_str_eq(s, "0000:c3:00.1");
	cr_assert_eq(tdm__topology_bus_id("c3:00.0", s, sizeof(s)), -EINVAL);
	cr_assert_eq(tdm__topology_bus_id("0000:c3:00.0 ", s, sizeof(s)), -EINVAL);
	cr_assert_eq(tdm__topology_profile_slices("1g.10gb"), 1);
	cr_assert_eq(tdm__topology_profile_slices("3g.20gb"), 3);
	cr_assert_eq(tdm__topology_profile_slices("7g.80gb"), 7);
	cr_assert_eq(tdm__topology_profile_slices("1c.3g.20gb"), 0);
	cr_assert_eq(tdm__topology_profile_slices(""), 0);
	cr_assert_eq(tdm__cpulist_count("0-3,8,10-11\n"), 7);
	cr_assert_eq(tdm__cpulist_count(""), 0);
	cr_assert_eq(tdm__cpulist_count("3-1"), -EINVAL);
	cr_assert_eq(tdm__cpulist_count("0,,1"), -EINVAL);
	cr_assert_eq(tdm__cpulist_and("0-55", "0-31,100-110", s, sizeof(s)), 0);
	cr_assert_str_eq(s, "0-31");
	cr_assert_eq(tdm__cpulist_and("0-3,8-9", "1,3,8-20", s, sizeof(s)), 0);
	cr_assert_str_eq(s, "1,3,8-9");
	cr_assert_eq(tdm__cpulist_and("56-111", "0-31", s, sizeof(s)), 0);
	cr_assert_str_eq(s, "");
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

Test(topology, sysfs_gives_numa_node_and_cpus)
{
	char root[] = "/tmp/tdm-topo-XXXXXX", dir[128], path[192], cpus[64];
	int node;
	cr_assert_not_null(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/0000:1b:00.0", root);
	cr_assert_eq(mkdir(dir, 0700), 0);
	snprintf(path, sizeof(path), "%s/numa_node", dir);
	write_file(path, "1\n");
	snprintf(path, sizeof(path), "%s/local_cpulist", dir);
	write_file(path, "56-111\n");
	tdm__topology_sysfs(root, "0000:1b:00.0", &node, cpus, sizeof(cpus));
	cr_assert_eq(node, 1);
	cr_assert_str_eq(cpus, "56-111");

	write_file(path, "garbage\n");
	snprintf(path, sizeof(path), "%s/numa_node", dir);
	write_file(path, "-1\n");
	tdm__topology_sysfs(root, "0000:1b:00.0", &node, cpus, sizeof(cpus));
	cr_assert_eq(node, -1, "sysfs's -1: unknown");
	cr_assert_str_eq(cpus, "", "an unreadable list is unknown");
	tdm__topology_sysfs(root, "0000:99:00.0", &node, cpus, sizeof(cpus));
	cr_assert_eq(node, -1);
	cr_assert_str_eq(cpus, "");

	snprintf(path, sizeof(path), "%s/local_cpulist", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/numa_node", dir);
	unlink(path);
	rmdir(dir);
	rmdir(root);
}

/* ---- live discovery ---- */

#ifdef TANDEM_HAVE_CUDA
static bool nvml_loads(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h != NULL)
		dlclose(h);
	return h != NULL;
}
#endif

Test(topology, live_discovery_without_a_device_finds_none_and_says_why)
{
	struct tdm__topology *t = NULL;
	cr_assert_eq(tdm__topology_discover(&t, true), 0);
	cr_assert_not_null(t);
	cr_assert_str_eq(t->source, "cuda");
	cr_assert_neq(t->cuda_note[0], '\0');
	cr_assert_neq(t->nvml_note[0], '\0');
#ifdef TANDEM_HAVE_CUDA
	if (!nvml_loads()) {
		cr_assert(!t->nvml, "NVML cannot be available without its library");
		cr_assert_str_eq(t->nvml_note, "libnvidia-ml.so.1 not found");
	}
#else
	cr_assert(!t->nvml, "without CUDA, NVML is not asked");
	cr_assert_eq(t->ndev, 0);
#endif
	if (t->ndev == 0) {
		cr_assert_not_null(strstr(t->cuda_note, "no device"), "%s", t->cuda_note);
		plan(t);
		cr_assert_null(t->plans);
	}
	if (!t->nvml)
		cr_assert_eq(t->nmachine, t->ndev, "without NVML the machine is what CUDA shows");
	if (want_print())
		tdm__topology_print(t, stdout);
	tdm__topology_free(t);
	cr_assert_eq(tdm__topology_discover(NULL, true), -EINVAL);
}

Test(topology, live_discovery_on_a_gpu_reports_its_facts)
{
	struct tdm__topology *t = NULL;
	cr_assert_eq(tdm__topology_discover(&t, true), 0);
	if (t->ndev == 0) {
		tdm__topology_free(t);
		cr_skip_test("no GPU here");
	}
	plan(t);
	if (want_print())
		tdm__topology_print(t, stdout);
	for (int i = 0; i < t->ndev; i++) {
		const struct tdm__topo_dev *d = &t->devs[i];
		char bus[32];
		cr_assert_eq(d->index, i);
		cr_assert(strncmp(d->uuid, "GPU-", 4) == 0 || strncmp(d->uuid, "MIG-", 4) == 0,
		          "%s", d->uuid);
		cr_assert_gt(d->sm_count, 0);
		cr_assert_gt(d->mem_bytes, 0);
		cr_assert_eq(tdm__topology_bus_id(d->pci_bus_id, bus, sizeof(bus)), 0, "%s",
		             d->pci_bus_id);
		cr_assert_str_eq(bus, d->pci_bus_id);
		cr_assert_geq(t->plans[i].streams, 1);
		cr_assert_geq(t->plans[i].launch_limit, 1);
		if (t->nvml) {
			cr_assert_neq(d->mig_mode, TDM_MIG_UNKNOWN, "NVML knows the MIG mode");
			cr_assert_geq(d->parent_index, 0, "NVML knows the physical GPU");
		}
		if (d->mig)
			cr_assert_eq(d->mig_mode, t->nvml ? TDM_MIG_ENABLED : TDM_MIG_UNKNOWN);
		if (strstr(d->name, "H200") != NULL && t->nvml) {
			/* Our GPU machine runs with MIG disabled and must stay so. */
			cr_assert_eq(d->mig_mode, TDM_MIG_DISABLED, "%s", d->name);
			cr_assert(!d->mig);
			cr_assert_eq(d->sm_count, 132);
			cr_assert_eq(t->plans[i].launch_limit, TDM__TOPO_FULL_LAUNCH);
			if (t->max_connections == 0)
				cr_assert_eq(t->plans[i].streams, 8);
		}
	}
	tdm__topology_free(t);
}

/* ---- the public view ---- */

/* A GPU layer on ex with cfg; tdm_gpu_create makes its topology (gpu->topo). */
static tdm_gpu *open_gpu(tdm_executor *ex, const tdm_gpu_config *cfg)
{
	tdm_gpu *gpu = NULL;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, cfg), 0);
	cr_assert_not_null(tdm__gpu_find(gpu)->topo);
	return gpu;
}

static void close_gpu(tdm_gpu *gpu, tdm_executor *ex)
{
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	tdm_test_destroy(ex);
}

Test(topology, device_info_on_the_sim_backend)
{
	unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
	tdm_executor *ex = tdm_test_create(2);
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.backend = TDM_BACKEND_SIM;
	cfg.sim_devices = 2;
	tdm_gpu *gpu = open_gpu(ex, &cfg);
	tdm_device_info info;
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(tdm_gpu_device_info(gpu, i, &info), 0);
		cr_assert_eq(info.index, i);
		cr_assert_gt(info.sm_count, 0);
		cr_assert_eq(strncmp(info.uuid, "SIM-", 4), 0, "%s", info.uuid);
		cr_assert_eq(info.mig_mode, TDM_MIG_DISABLED);
		cr_assert_eq(info.is_mig, 0);
		cr_assert_eq(info.nvml, 0);
		cr_assert_eq(info.streams, 8, "%s", info.why_streams);
		cr_assert_eq(info.launch_limit, TDM__TOPO_FULL_LAUNCH, "%s", info.why_launch);
		cr_assert_neq(info.why_pin[0], '\0');
	}
	cr_assert_eq(tdm_gpu_device_info(gpu, 2, &info), -EINVAL);
	cr_assert_eq(tdm_gpu_device_info(gpu, -1, &info), -EINVAL);
	cr_assert_eq(tdm_gpu_device_info(gpu, 0, NULL), -EINVAL);
	cr_assert_eq(tdm_gpu_device_info(NULL, 0, &info), -EINVAL);
	close_gpu(gpu, ex);
}

Test(topology, device_info_without_devices_is_enodev)
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.backend = TDM_BACKEND_NONE;
	tdm_gpu *gpu = open_gpu(ex, &cfg);
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(gpu, 0, &info), -ENODEV);
	cr_assert_eq(tdm__gpu_find(gpu)->topo->ndev, 0);
	close_gpu(gpu, ex);
}

/* A sim GPU layer on ex (streams_per_device as given, 0: decided) and device 0's info. */
static tdm_gpu *open_sim_info(tdm_executor *ex, unsigned streams_per_device, tdm_device_info *info)
{
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.backend = TDM_BACKEND_SIM;
	cfg.streams_per_device = streams_per_device;
	tdm_gpu *gpu = open_gpu(ex, &cfg);
	cr_assert_eq(tdm_gpu_device_info(gpu, 0, info), 0);
	return gpu;
}

Test(topology, streams_per_device_from_the_config_reaches_device_info)
{
	tdm_executor *ex = tdm_test_create(1);
	tdm_device_info info;
	tdm_gpu *gpu = open_sim_info(ex, 5, &info);
	cr_assert_eq(info.streams, 5);
	cr_assert_not_null(strstr(info.why_streams, "streams_per_device"), "%s", info.why_streams);
	close_gpu(gpu, ex);
}

/* The executor's worker count reaches the decision: 12 workers on the sim's device get 12
 * streams (the sim has no CUDA_DEVICE_MAX_CONNECTIONS of its own: 8 work queues). */
Test(topology, the_executors_workers_size_the_stream_set)
{
	tdm_executor *ex = tdm_test_create(12);
	tdm_device_info info;
	tdm_gpu *gpu = open_sim_info(ex, 0, &info);
	cr_assert_eq(info.streams, 12, "%u: %s", info.streams, info.why_streams);
	cr_assert_not_null(strstr(info.why_streams, "one per worker"), "%s", info.why_streams);
	close_gpu(gpu, ex);
}

/* tdm_gpu_prepare for 12 workers sets CUDA_DEVICE_MAX_CONNECTIONS to 12 while it is unset and
 * CUDA has not started (Criterion runs each test in a process of its own); the sim, KEEP and a
 * set of 8 or fewer streams leave it unset, a value already set is kept (-EEXIST), and
 * tdm_gpu_create never changes it. */
static int open_with(tdm_executor *ex, tdm_backend backend, int connections, tdm_gpu **gpu)
{
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.backend = backend;
	cfg.connections = connections;
	return tdm_gpu_create(gpu, ex, &cfg);
}

static int prepare_with(tdm_backend backend, int connections, unsigned workers)
{
	tdm_gpu_config cfg;
	tdm_gpu_config_init(&cfg);
	cfg.backend = backend;
	cfg.connections = connections;
	return tdm_gpu_prepare(&cfg, workers);
}

Test(topology, tdm_gpu_create_never_sets_connections, .timeout = TDM_TEST_TIMEOUT(60))
{
	static const char var[] = "CUDA_DEVICE_MAX_CONNECTIONS";
	unsetenv(var);
	tdm_executor *ex = tdm_test_create(12);
	tdm_gpu *gpu = NULL;
	int rc = open_with(ex, TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, &gpu);
	cr_assert(rc == 0 || rc == -ENODEV, "%d", rc);
	cr_assert_null(getenv(var), "tdm_gpu_create set %s", getenv(var));
	if (rc == 0)
		cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	cr_assert_eq(open_with(ex, TDM_BACKEND_SIM, -2, &gpu), -EINVAL);
	cr_assert_eq(open_with(ex, TDM_BACKEND_SIM, 33, &gpu), -EINVAL);
	tdm_test_destroy(ex);
}

Test(topology, tdm_gpu_prepare_sets_connections_only_where_they_are_wanted,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	static const char var[] = "CUDA_DEVICE_MAX_CONNECTIONS";
	unsetenv(var);
	unsetenv("CUDA_VISIBLE_DEVICES"); /* a MIG instance there would want no queues */
	cr_assert_eq(prepare_with(TDM_BACKEND_SIM, TDM_CONNECTIONS_AUTO, 12), 0);
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, TDM_CONNECTIONS_KEEP, 12), 0);
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, 8), 0);
	cr_assert_null(getenv(var), "set by the sim, KEEP or 8 workers: %s", getenv(var));
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, -2, 12), -EINVAL);
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, 33, 12), -EINVAL);
	tdm_gpu_config bad;
	tdm_gpu_config_init(&bad);
	bad.launch_limit = 2000; /* what tdm_gpu_create refuses, prepare refuses too */
	cr_assert_eq(tdm_gpu_prepare(&bad, 12), -EINVAL);
	cr_assert_null(getenv(var));
#ifdef TANDEM_TEST_NO_CUDA
	/* No cuda backend built in: nothing to give queues to. */
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, 12), 0);
	cr_assert_null(getenv(var));
	return;
#endif
	/* A value named in the config, whatever the workers. */
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, 5, 1), 5);
	cr_assert_str_eq(getenv(var), "5");
	unsetenv(var);
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, 12), 12);
	cr_assert_str_eq(getenv(var), "12");
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, 20, 12), -EEXIST, "a value set is kept");
	cr_assert_str_eq(getenv(var), "12");
	/* A layer made after it sees tandem's value, and keeps the set CUDA's default gives. */
	tdm_executor *ex = tdm_test_create(12);
	tdm_gpu *gpu = NULL;
	int rc = open_with(ex, TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, &gpu);
	cr_assert(rc == 0 || rc == -ENODEV, "%d", rc);
	if (rc == 0) {
		tdm_device_info info;
		cr_assert_eq(tdm_gpu_device_info(gpu, 0, &info), 0);
		cr_assert_eq(info.streams, 12, "%s", info.why_streams);
		cr_assert_not_null(strstr(info.why_streams, "set by tandem"), "%s",
		                   info.why_streams);
		cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	}
	tdm_test_destroy(ex);
	unsetenv(var);
}

/* Where CUDA started before tdm_gpu_prepare (here a first tdm_gpu of 2 workers), the variable
 * stays unset, the call says -EALREADY and the reason says why. GPU only. */
Test(topology, connections_wanted_after_cuda_started_are_reported, .timeout = TDM_TEST_TIMEOUT(60))
{
	static const char var[] = "CUDA_DEVICE_MAX_CONNECTIONS";
	unsetenv(var);
	unsetenv("CUDA_VISIBLE_DEVICES"); /* a MIG instance there would want no queues */
	tdm_executor *two = tdm_test_create(2);
	tdm_gpu *gpu = NULL;
	int rc = open_with(two, TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, &gpu);
	if (rc == -ENODEV) {
		tdm_test_destroy(two);
		cr_skip_test("no CUDA device");
	}
	cr_assert_eq(rc, 0);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
	tdm_test_destroy(two);
	cr_assert_eq(prepare_with(TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, 12), -EALREADY);
	cr_assert_null(getenv(var), "set after CUDA started: %s", getenv(var));
	tdm_executor *ex = tdm_test_create(12);
	cr_assert_eq(open_with(ex, TDM_BACKEND_CUDA, TDM_CONNECTIONS_AUTO, &gpu), 0);
	tdm_device_info info;
	cr_assert_eq(tdm_gpu_device_info(gpu, 0, &info), 0);
	cr_assert_not_null(strstr(info.why_streams, "CUDA started before tandem"), "%s",
	                   info.why_streams);
	close_gpu(gpu, ex);
}
