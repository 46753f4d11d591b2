// SPDX-License-Identifier: MIT
/*
 * The GPU layer's life: its config and environment switches, choosing a backend, the devices
 * (each planned by the topology before it is made), CUDA_DEVICE_MAX_CONNECTIONS, create and
 * destroy, and the layer's getters and statistics. Streams are in streams.c, events in events.c,
 * awaits in await.c, the work helpers in work.c, memory in memory.c and pinned.c.
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/cpulist.h"
#include "base/observe.h"
#include "base/say.h"
#include "gpu_internal.h"
#include "stamps.h"
#include "topology/topology.h"

void tdm_gpu_config_init(tdm_gpu_config *cfg)
{
	if (cfg != NULL)
		memset(cfg, 0, sizeof(*cfg));
}

/*
 * The index in names[0..n) of environment variable `name`'s value; dflt when it is unset or
 * empty; -EINVAL for any other value, said with the values it may have (base/say.h): a typo must
 * not silently pick another setting. Every TANDEM_* switch tdm_gpu_create reads goes through
 * here, so they all refuse bad values alike.
 */
static int env_choice(const char *name, const char *const *names, int n, int dflt)
{
	const char *v = getenv(name);
	if (v == NULL || *v == '\0')
		return dflt;
	char list[64] = "";
	for (int i = 0; i < n; i++) {
		if (strcmp(v, names[i]) == 0)
			return i;
		size_t len = strlen(list);
		snprintf(list + len, sizeof(list) - len, "%s%s", i > 0 ? ", " : "", names[i]);
	}
	return tdm__refuse(-EINVAL, "%s=%s: not one of %s", name, v, list);
}

static int pick_backend(tdm_gpu_config *cfg, const struct tdm__backend_ops **out)
{
	tdm_backend kind = cfg->backend;
	if (kind == TDM_BACKEND_AUTO) {
		static const char *const names[] = {"cuda", "sim", "none"};
		static const tdm_backend kinds[] = {TDM_BACKEND_CUDA, TDM_BACKEND_SIM,
		                                    TDM_BACKEND_NONE};
		int k = env_choice("TANDEM_GPU", names, 3, 0);
		if (k < 0)
			return k;
		kind = kinds[k];
	}
	cfg->backend = kind;
	switch (kind) {
	case TDM_BACKEND_CUDA:
		*out = &tdm__backend_cuda;
		return 0;
	case TDM_BACKEND_SIM:
		*out = &tdm__backend_sim;
		return 0;
	case TDM_BACKEND_NONE:
		*out = NULL;
		return 0;
	default:
		return tdm__refuse(-EINVAL, "tdm_gpu_config.backend=%d: not a tdm_backend (0 to 3)",
		                   (int)kind);
	}
}

static void destroy_devices(struct tdm__gpu *gpu)
{
	for (int i = 0; i < gpu->ndev; i++) {
		struct tdm__gdev *d = &gpu->devs[i];
		for (int c = 0; c < TDM__PRIO_CLASSES; c++) {
			if (d->streams[c] == NULL)
				continue;
			for (unsigned k = 0; k < d->nstreams; k++) {
				struct tdm__stream *s = atomic_load(&d->streams[c][k]);
				if (s == NULL)
					continue;
				gpu->ops->stream_destroy(gpu->b, s->bs);
				pthread_mutex_destroy(&s->wlock);
				pthread_mutex_destroy(&s->sq.lock);
				free(s);
			}
			free(d->streams[c]);
		}
		tdm__events_fini(d);
		if (d->word_block != NULL)
			gpu->ops->host_free(gpu->b, d->word_block);
		/* After the streams: their host functions have run, or never will. */
		tdm__staging_fini(d);
		pthread_mutex_destroy(&d->lock);
		pthread_mutex_destroy(&d->ev_lock);
		pthread_mutex_destroy(&d->stage_lock);
	}
	free(gpu->devs);
	gpu->devs = NULL;
}

static int init_device(struct tdm__gpu *gpu, int i)
{
	struct tdm__gdev *d = &gpu->devs[i];
	d->gpu = gpu;
	d->index = i;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->ev_lock, NULL);
	pthread_mutex_init(&d->stage_lock, NULL);
	int rc = gpu->ops->device_info(gpu->b, i, &d->info);
	if (rc != 0)
		return rc;
	/* Sized for this device: a MIG instance gets fewer streams and launchers than a whole
	 * GPU. topology/decide.c owns the rules (and the user's overrides); tdm_gpu_create planned
	 * every device before this runs. */
	const struct tdm__device_plan *plan = &gpu->topo->plans[i];
	d->nstreams = plan->streams;
	d->launch_limit = plan->launch_limit;
	if (plan->pin_cpus[0] != '\0')
		d->has_cpus = tdm__cpulist_parse(plan->pin_cpus, &d->cpus) == 0;
	/* Keep freed device memory for reuse up to the plan's share of the device (a MIG instance's
	 * pool is its own). Best effort: without it allocations only get slower. */
	if (plan->pool_release_bytes != 0 && gpu->ops->pool_release != NULL)
		(void)gpu->ops->pool_release(gpu->b, i, plan->pool_release_bytes);
	d->prio[0] = d->info.prio_least;
	d->prio[1] = d->info.prio_greatest;
	d->words = d->info.can_write_value64 && gpu->ops->write_value != NULL &&
	           gpu->cfg.completion != TDM_COMPLETION_EVENT;
	if ((gpu->cfg.completion == TDM_COMPLETION_WORD ||
	     gpu->cfg.completion == TDM_COMPLETION_ADAPTIVE) &&
	    !d->words)
		return tdm__refuse(
		    -ENOTSUP,
		    "completion %s (tdm_gpu_config.completion or TANDEM_COMPLETION): "
		    "device %d (%s) cannot write completion words",
		    gpu->cfg.completion == TDM_COMPLETION_WORD ? "word" : "adaptive", i,
		    d->info.name);
	/* The default where words can be written: see TDM_COMPLETION_ADAPTIVE in tandem_gpu.h. */
	d->adaptive = d->words && (gpu->cfg.completion == TDM_COMPLETION_ADAPTIVE ||
	                           gpu->cfg.completion == TDM_COMPLETION_AUTO);
	for (int c = 0; c < TDM__PRIO_CLASSES; c++) {
		d->streams[c] = calloc(d->nstreams, sizeof(*d->streams[c]));
		if (d->streams[c] == NULL)
			return -ENOMEM;
	}
	if (d->words) {
		size_t bytes = (size_t)d->nstreams * TDM__PRIO_CLASSES * TDM__CACHELINE;
		rc = gpu->ops->host_alloc(gpu->b, bytes, (void **)&d->word_block);
		if (rc != 0)
			return rc;
		memset(d->word_block, 0, bytes);
	}
	return 0;
}

/*
 * CUDA_DEVICE_MAX_CONNECTIONS as tdm_gpu_prepare set it, kept for the process, since CUDA keeps
 * it: every later tdm_gpu_create's decisions need it (docs/design/gpu-streams.md). The lock orders
 * tandem's own reads of these; the environment itself is the caller's to keep single-threaded
 * around tdm_gpu_prepare (tandem_gpu.h).
 */
static pthread_mutex_t connections_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned connections_set; /* connections_lock: the value written; 0: none */
static bool connections_auto;    /* connections_lock: written by TDM_CONNECTIONS_AUTO */
static bool connections_late;    /* connections_lock: a prepare found CUDA started */

/* The fields tdm_gpu_create and tdm_gpu_prepare refuse (tandem_gpu.h lists them): 0, or
 * -EINVAL said for the first field refused (base/say.h). */
static int config_check(const tdm_gpu_config *cfg)
{
#define REFUSE(field, fmt, why)                                                                    \
	tdm__refuse(-EINVAL, "tdm_gpu_config." #field "=" fmt ": " why, cfg->field)
	if ((unsigned)cfg->completion > TDM_COMPLETION_ADAPTIVE)
		return REFUSE(completion, "%d", "not a tdm_completion (0 to 3)");
	if ((unsigned)cfg->placement > TDM_PLACE_NEAREST)
		return REFUSE(placement, "%d", "not a tdm_placement (0 to 2)");
	if ((unsigned)cfg->pageable > TDM_PAGEABLE_REFUSE)
		return REFUSE(pageable, "%d",
		              "not TDM_PAGEABLE_STAGE (0) or TDM_PAGEABLE_REFUSE (1)");
	if (cfg->streams_per_device > 1024)
		return REFUSE(streams_per_device, "%u", "above 1024");
	if (cfg->launch_limit > 1024)
		return REFUSE(launch_limit, "%u", "above 1024");
	if (cfg->pinned_chunk_bytes > ((size_t)64 << 30))
		return REFUSE(pinned_chunk_bytes, "%zu", "above 64 GiB");
	if (cfg->pinned_cap_bytes != 0 && cfg->pinned_cap_bytes < ((size_t)64 << 10))
		return REFUSE(pinned_cap_bytes, "%zu", "below 64 KiB, the pool's page (0: no cap)");
	if (cfg->connections < TDM_CONNECTIONS_KEEP || cfg->connections > TDM__TOPO_MAX_QUEUES)
		return REFUSE(connections, "%d", "not from -1 (TDM_CONNECTIONS_KEEP) to 32");
	if (cfg->graph_capture_after < TDM_GRAPH_CAPTURE_FIRST)
		return REFUSE(graph_capture_after, "%d", "below -1 (TDM_GRAPH_CAPTURE_FIRST)");
	if (cfg->graph_cache > (1u << 20))
		return REFUSE(graph_cache, "%u", "above 1048576");
	if (cfg->sim_sm_count > 1024)
		return REFUSE(sim_sm_count, "%u", "above 1024");
#undef REFUSE
	return 0;
}

int tdm_gpu_prepare(const tdm_gpu_config *cfg_in, unsigned workers)
{
	tdm__detail_begin("tdm_gpu_prepare");
	tdm_gpu_config cfg;
	if (cfg_in != NULL)
		cfg = *cfg_in;
	else
		tdm_gpu_config_init(&cfg);
	int rc = config_check(&cfg);
	if (rc != 0)
		return rc;
	const struct tdm__backend_ops *ops = NULL;
	rc = pick_backend(&cfg, &ops);
	if (rc != 0)
		return rc;
	if (workers == 0) {
		cpu_set_t cpus;
		workers = tdm__cpus_allowed(&cpus);
	}
	unsigned want = tdm__connections_wanted(cfg.connections, cfg.streams_per_device, workers,
	                                        getenv("CUDA_VISIBLE_DEVICES"));
	if (want == 0 || ops == NULL || ops->set_connections == NULL)
		return 0;
	pthread_mutex_lock(&connections_lock);
	rc = ops->set_connections(want);
	if (rc == 0) {
		connections_set = want;
		connections_auto = cfg.connections == TDM_CONNECTIONS_AUTO;
	} else if (rc == -EALREADY) {
		connections_late = true;
	}
	pthread_mutex_unlock(&connections_lock);
	return rc == 0 ? (int)want : rc;
}

/* What tdm_gpu_prepare did, for this layer's decisions. */
static void read_connections(struct tdm__gpu *gpu)
{
	pthread_mutex_lock(&connections_lock);
	gpu->connections_by_tandem = connections_auto ? connections_set : 0;
	gpu->connections_late = connections_late && connections_set == 0;
	pthread_mutex_unlock(&connections_lock);
}

/* Every layer, in type-stable memory (base/handle.h): a call with a stale handle reads a word
 * that says the layer is gone, never freed memory. */
char *_Atomic tdm__gpu_chunks[TDM__GPU_CHUNKS];
static struct tdm__htable gpu_handles = TDM__HTABLE_INIT(
    "GPU layer", TDM__GPU_TAG, TDM__GPU_SHIFT, TDM__GPU_CHUNKS, struct tdm__gpu, tdm__gpu_chunks);

/* gpu, its parts freed, back to the table: its handle says destroyed from here. Release: the
 * frees before happen before a check that reads the word so (and before the object's reuse). */
static void layer_put(struct tdm__gpu *gpu)
{
	uint64_t w = (uint64_t)(uintptr_t)gpu->self;
	atomic_store_explicit(&gpu->hobj.h, w | TDM__H_DEAD, memory_order_release);
	tdm__h_put(&gpu_handles, &gpu->hobj);
}

/* The default backend (cuda, TDM_BACKEND_AUTO) found no device: say so once, and that the
 * simulator is a variable away (the examples fall back to it: examples/example_gpu.h). */
static void no_gpu(const struct tdm__backend_ops *ops)
{
	char why[160] = "no device";
	if (ops->why_none != NULL)
		ops->why_none(why, sizeof(why));
	const char *set = getenv("TANDEM_GPU");
	if (set != NULL && *set != '\0')
		(void)tdm__refuse(-ENODEV,
		                  "TANDEM_GPU=%s: no GPU (%s); TANDEM_GPU=sim runs tandem's GPU "
		                  "simulator instead",
		                  set, why);
	else
		(void)tdm__refuse(-ENODEV,
		                  "no GPU for the default backend, cuda (%s); TANDEM_GPU=sim runs "
		                  "tandem's GPU simulator instead",
		                  why);
}

int tdm_gpu_create(tdm_gpu **out, tdm_executor *ex, const tdm_gpu_config *cfg_in)
{
	tdm__detail_begin("tdm_gpu_create");
	if (out == NULL || ex == NULL)
		return -EINVAL;
	tdm__observe_init(); /* before the poller starts: it names itself */
	tdm_gpu_config cfg;
	if (cfg_in != NULL)
		cfg = *cfg_in;
	else
		tdm_gpu_config_init(&cfg);
	int rc = config_check(&cfg);
	if (rc != 0)
		return rc;
	if (cfg.completion == TDM_COMPLETION_AUTO) {
		/* Unset: modes[3], automatic (adaptive where words can be written). */
		static const char *const names[] = {"word", "event", "adaptive"};
		static const tdm_completion modes[] = {TDM_COMPLETION_WORD, TDM_COMPLETION_EVENT,
		                                       TDM_COMPLETION_ADAPTIVE,
		                                       TDM_COMPLETION_AUTO};
		int k = env_choice("TANDEM_COMPLETION", names, 3, 3);
		if (k < 0)
			return k;
		cfg.completion = modes[k];
	}
	/* Kept in gpu->nvml for discovery (tdm__topology_discover). */
	static const char *const nvml[] = {"0", "off", "1", "on"};
	int use_nvml = env_choice("TANDEM_NVML", nvml, 4, 2);
	if (use_nvml < 0)
		return use_nvml;
	bool by_default = cfg.backend == TDM_BACKEND_AUTO; /* cuda unless TANDEM_GPU says */
	const struct tdm__backend_ops *ops = NULL;
	rc = pick_backend(&cfg, &ops);
	if (rc != 0)
		return rc;
	uint64_t handle;
	struct tdm__gpu *gpu = tdm__h_take(&gpu_handles, &handle);
	if (gpu == NULL)
		return -ENOMEM;
	/* The part that calls with a stale handle may touch stays as it is (struct tdm__gpu). */
	memset(&gpu->ex, 0, sizeof(*gpu) - offsetof(struct tdm__gpu, ex));
	gpu->self = (tdm_gpu *)(uintptr_t)handle;
	if (cfg.poll_spin_us == 0)
		cfg.poll_spin_us = 200;
	if (cfg.stall_us == 0)
		cfg.stall_us = 50;
	gpu->ex = ex;
	gpu->nvml = use_nvml >= 2;
	gpu->direct = true;
	gpu->balance = TDM__BALANCE_SLOW;
	gpu->cfg = cfg;
	gpu->ops = ops;
	ck_ec32_init(&gpu->ec, 0);
	if (ops != NULL) {
		read_connections(gpu);
		rc = ops->open(&gpu->b, &cfg);
		if (rc == -ENODEV && by_default && ops == &tdm__backend_cuda)
			no_gpu(ops);
		if (rc != 0) {
			layer_put(gpu);
			return rc;
		}
		gpu->ndev = ops->device_count(gpu->b);
		if (gpu->ndev < 0) {
			rc = gpu->ndev;
			gpu->ndev = 0;
			goto fail;
		}
		gpu->devs = aligned_alloc(TDM__CACHELINE, (size_t)gpu->ndev * sizeof(*gpu->devs));
		if (gpu->devs == NULL && gpu->ndev > 0) {
			rc = -ENOMEM;
			gpu->ndev = 0;
			goto fail;
		}
		memset(gpu->devs, 0, (size_t)gpu->ndev * sizeof(*gpu->devs));
		if ((rc = tdm__topology_for_backend(gpu)) != 0)
			goto fail;
		for (int i = 0; i < gpu->ndev; i++)
			if ((rc = init_device(gpu, i)) != 0) {
				gpu->ndev = i + 1;
				goto fail;
			}
	}
	if (ops == NULL && (rc = tdm__topology_for_backend(gpu)) != 0)
		goto fail;
	if ((rc = tdm__leases_init(gpu)) != 0)
		goto fail;
	if ((rc = tdm__graphs_init(gpu)) != 0)
		goto fail;
	if (ops != NULL && (rc = tdm__pinned_init(gpu)) != 0)
		goto fail;
	if ((rc = tdm__metrics_init(gpu)) != 0) /* before the stamps, which ask it */
		goto fail;
	if (ops != NULL && (rc = tdm__stamps_init(gpu)) != 0)
		goto fail;
	if (pthread_create(&gpu->poller, NULL, tdm__poller_main, gpu) != 0) {
		rc = -EAGAIN;
		goto fail;
	}
	/* Off by default: unmeasured on a machine of several NUMA nodes (docs/design/poller.md). */
	if (cfg.pin_poller && gpu->ndev > 0 && gpu->devs[0].has_cpus)
		pthread_setaffinity_np(gpu->poller, sizeof(cpu_set_t), &gpu->devs[0].cpus);
	tdm__h_publish(&gpu->hobj, handle);
	*out = gpu->self;
	return 0;
fail:
	tdm__stamps_fini(gpu);
	tdm__graphs_fini(gpu);
	tdm__leases_fini(gpu);
	if (gpu->pinned != NULL)
		tdm__pinned_fini(gpu);
	if (gpu->devs != NULL)
		destroy_devices(gpu);
	if (gpu->b != NULL)
		ops->close(gpu->b);
	tdm__metrics_fini(gpu); /* after the stamps: their last flush feeds it */
	tdm__topology_free(gpu->topo);
	layer_put(gpu);
	return rc;
}

/* When tdm_gpu_destroy first says what it waits for, and how often again (tandem_gpu.h). */
#define WAIT_SAY_FIRST_NS 1000000000ull
#define WAIT_SAY_EVERY_NS 10000000000ull

/* Whether a stream of gpu is still leased. */
static bool held_streams(struct tdm__gpu *gpu)
{
	for (int i = 0; i < gpu->ndev; i++)
		for (int c = 0; c < TDM__PRIO_CLASSES; c++)
			for (unsigned k = 0; k < gpu->devs[i].nstreams; k++) {
				struct tdm__stream *s = atomic_load(&gpu->devs[i].streams[c][k]);
				/* Acquire: pairs with the release in tdm_stream_release. */
				if (s != NULL &&
				    atomic_load_explicit(&s->leases, memory_order_acquire) != 0)
					return true;
			}
	return false;
}

int tdm_gpu_destroy(tdm_gpu *h)
{
	struct tdm__gpu *gpu = tdm__gpu_find(h);
	if (gpu == NULL)
		return -EINVAL;
	uint64_t live = (uint64_t)(uintptr_t)h;
	/* Acquire: pairs with create's publication of the word; ex is this layer's. */
	if (atomic_load_explicit(&gpu->hobj.h, memory_order_acquire) != live)
		return -EINVAL; /* destroyed, being destroyed, or no layer's */
	if (tdm_worker_index(gpu->ex) >= 0)
		return -EDEADLK; /* the tasks it waits for may need this very worker */
	/* Closes the handle: of two destroys one gets here, the other says -EINVAL. Seq_cst: the
	 * gate's Dekker pair (tdm__gate_enter_h: calls that enter after it see the word changed,
	 * the drain below sees the others) and tdm__await_register's (either the registrant sees
	 * the word changed, or the poller, which loads active after it sees stopping, sees its
	 * count). */
	if (!atomic_compare_exchange_strong_explicit(&gpu->hobj.h, &live, live | TDM__H_CLOSING,
	                                             memory_order_seq_cst, memory_order_relaxed))
		return -EINVAL;
	/* Seq_cst: after the word's store in the same total order; the poller reads it. */
	atomic_store_explicit(&gpu->stopping, 1, memory_order_seq_cst);
	/* Leases in progress: let them finish, so that the scan of leases below sees theirs.
	 * Nothing a lease waits for depends on this thread. */
	tdm__gate_drain(&gpu->leases);
	/* Write barrier, pairing with ck_ec32_value in tdm__poller_main: a poller asleep on ec
	 * wakes, and its next loads of stopping see the store above. */
	ck_ec32_inc(&gpu->ec, &tdm__ec_mode);
	pthread_join(gpu->poller, NULL);
	/* Tasks resumed from their last await still hold their leases for a moment, and device
	 * schedulers hold their streams, pinned and device memory like leases: wait until every
	 * stream is given back and every scheduler destroyed before the streams go. A wait past a
	 * second is a lease or scheduler the program forgot: say which, then every 10 s. */
	uint64_t began = tdm__now_ns(), next_say = began + WAIT_SAY_FIRST_NS;
	while (held_streams(gpu) ||
	       /* Acquire: pairs with the release in tdm_dsched_destroy. */
	       atomic_load_explicit(&gpu->dscheds, memory_order_acquire) != 0) {
		sched_yield();
		uint64_t now = tdm__now_ns();
		if (now < next_say)
			continue;
		unsigned waited_s = (unsigned)((now - began) / 1000000000u);
		if (tdm__leases_say(gpu, waited_s) + tdm__dscheds_say(gpu, waited_s) > 0)
			tdm__say("tdm_gpu_destroy keeps waiting until each is released "
			         "(tdm_stream_release) or destroyed (tdm_dsched_destroy)");
		next_say = now + WAIT_SAY_EVERY_NS;
	}
	/* Awaits refused since the drain above still touch `active` (an await counts itself
	 * before it sees the handle's word, and the poller may have ended before), and calls
	 * refused at the gate touch it: both are kept with the object (struct tdm__gpu), but an
	 * await that got in before the close must be done with the layer. Wait for their leaves
	 * and their drops of `active` (releases, paired with the drain's loads and the acquire
	 * load here), so that their accesses happen before the frees below. */
	tdm__gate_drain(&gpu->leases);
	while (atomic_load_explicit(&gpu->active, memory_order_acquire) != 0)
		sched_yield();
	/* DAGs first (each destroys its graph), graphs before the streams: an open capture ends
	 * on its stream. */
	tdm__dags_fini(gpu);
	tdm__graphs_fini(gpu);
	tdm__leases_fini(gpu); /* every handle is back: its lease's count was dropped after */
	tdm__stamps_fini(gpu); /* no launch stamps now; its spans still in flight go in */
	free(gpu->heap);
	free(gpu->wake);
	free(gpu->wake_rc);
	if (gpu->ops != NULL) {
		/* Streams first: destroying one waits for its host functions, and staged copies
		 * give their blocks back to the pool from there. The pool still needs the backend
		 * to unpin its chunks, so it goes before close. */
		destroy_devices(gpu);
		if (gpu->pinned != NULL)
			tdm__pinned_fini(gpu);
		gpu->ops->close(gpu->b);
	}
	tdm__metrics_fini(gpu); /* last: the stamps' final flush (tdm__stamps_fini) feeds it */
	tdm__topology_free(gpu->topo);
	layer_put(gpu);
	return 0;
}

const char *tdm_gpu_backend_name(const tdm_gpu *h)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(h, &in, &rc);
	if (gpu == NULL)
		return "none";
	const char *name = gpu->ops != NULL ? gpu->ops->name : "none"; /* static strings */
	tdm__gate_leave(in);
	return name;
}

int tdm_gpu_device_count(const tdm_gpu *h)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(h, &in, &rc);
	if (gpu == NULL)
		return rc;
	rc = gpu->ndev;
	tdm__gate_leave(in);
	return rc;
}

int tdm_gpu_completion(const tdm_gpu *h, int device)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(h, &in, &rc);
	if (gpu == NULL)
		return rc;
	rc = -EINVAL;
	if (device >= 0 && device < gpu->ndev) {
		const struct tdm__gdev *d = &gpu->devs[device];
		rc = !d->words     ? TDM_COMPLETION_EVENT
		     : d->adaptive ? TDM_COMPLETION_ADAPTIVE
		                   : TDM_COMPLETION_WORD;
	}
	tdm__gate_leave(in);
	return rc;
}

int tdm_gpu_stats_get(const tdm_gpu *h, tdm_gpu_stats *out)
{
	_Atomic unsigned *in;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(h, &in, &rc);
	if (gpu == NULL)
		return rc;
	if (out == NULL) {
		tdm__gate_leave(in);
		return -EINVAL;
	}
	/* Relaxed: counters, each with one writer (the poller) but n_direct (atomic adds by the
	 * workers); a snapshot is all that is promised. */
	out->awaits_word = atomic_load_explicit(&gpu->n_word, memory_order_relaxed);
	out->awaits_event = atomic_load_explicit(&gpu->n_event, memory_order_relaxed);
	out->switches = atomic_load_explicit(&gpu->n_switch, memory_order_relaxed);
	out->event_polls = atomic_load_explicit(&gpu->n_event_poll, memory_order_relaxed);
	out->sweeps = atomic_load_explicit(&gpu->n_sweep, memory_order_relaxed);
	out->sleeps = atomic_load_explicit(&gpu->n_sleep, memory_order_relaxed);
	out->due_spins = atomic_load_explicit(&gpu->n_due, memory_order_relaxed);
	out->prewakes = atomic_load_explicit(&gpu->n_prewake, memory_order_relaxed);
	out->direct = atomic_load_explicit(&gpu->n_direct, memory_order_relaxed);
	out->awaits_word += out->direct;
	tdm__gate_leave(in);
	return 0;
}

void tdm__device_fail(struct tdm__gdev *d)
{
	/* Release: pairs with the acquire loads of failed in tdm_stream_lease, tdm_await_stream,
	 * and pipeline.c (batch_settle, slot_prime). Only the flag is read there; the launches'
	 * and the poller's loads are relaxed. The first to fail it gives the staging blocks back;
	 * the exchange only decides who (stage_lock orders the lists). */
	if (atomic_exchange_explicit(&d->failed, 1, memory_order_release) == 0) {
		tdm__staging_orphan(d);
		if (tdm__observing()) {
			char what[48];
			snprintf(what, sizeof(what), "tandem: device %d failed", d->index);
			tdm__observe_mark(what);
		}
	}
}
