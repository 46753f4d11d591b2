/*
 * The GPU layer's front: choosing a backend, devices, the bounded stream sets and the workers'
 * view of them, pooled events, the launch limit, work helpers, and the await calls that hand a
 * suspended task to the poller.
 *
 * Streams: each device has TDM__PRIO_CLASSES sets of `nstreams` streams, created on first use.
 * A worker's shared leases go to "its" stream of a set (worker index modulo the set size): its
 * thread-local pool is a fixed slice of the bounded set (its size: topology.c; one per worker
 * past the hardware queues, at most 32), so workers never make streams of their own beyond it,
 * and a shared lease never takes a lock once the stream exists. Unless
 * another stream of the set, already made, holds clearly fewer leases: a lease compares its own
 * stream with one other (a different one each time; "two choices") and takes the less loaded
 * when the difference is more than 2 plus 1/16 of the own stream's leases. Without
 * it the work on each stream follows how many tasks each worker happened to start: with 20,000
 * tasks of 100 us kernels on 8 streams, the most loaded stream decided the run's length
 * (perf/README.md, gpu-throughput). Only while the own stream is not quick, though (adaptive
 * completion: its awaits complete soon after reaching the head): a quick stream drains as fast
 * as its worker fills it, so the worker, not the GPU, sets the pace, and a move only puts two
 * workers' launches on one stream (1 us kernels at 8 workers on the H200: 324k-351k tasks/s with
 * moves, 401k-453k without; perf/README.md, 2026-12-01). A slow stream's leases may still move
 * onto a quick one: that stream drains fast, which is where a GPU-bound worker's work should go.
 * Exclusive leases take any stream with no lease at all.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "gpu_internal.h"
#include "topology.h"

void tdm_gpu_config_init(tdm_gpu_config *cfg)
{
	if (cfg != NULL)
		memset(cfg, 0, sizeof(*cfg));
}

/*
 * The index in names[0..n) of environment variable `name`'s value; dflt when it is unset or
 * empty; -1 for any other value: a typo must not silently pick another setting. Every TANDEM_*
 * switch tdm_gpu_create reads goes through here, so they all refuse bad values alike.
 */
static int env_choice(const char *name, const char *const *names, int n, int dflt)
{
	const char *v = getenv(name);
	if (v == NULL || *v == '\0')
		return dflt;
	for (int i = 0; i < n; i++)
		if (strcmp(v, names[i]) == 0)
			return i;
	return -1;
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
			return -EINVAL;
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
		return -EINVAL;
	}
}

static void destroy_devices(struct tdm_gpu *gpu)
{
	for (int i = 0; i < gpu->ndev; i++) {
		struct tdm__gdev *d = &gpu->devs[i];
		for (int c = 0; c < TDM__PRIO_CLASSES; c++) {
			if (d->streams[c] == NULL)
				continue;
			for (unsigned k = 0; k < d->nstreams; k++) {
				struct tdm_stream *s = atomic_load(&d->streams[c][k]);
				if (s == NULL)
					continue;
				gpu->ops->stream_destroy(gpu->b, s->bs);
				pthread_mutex_destroy(&s->wlock);
				free(s);
			}
			free(d->streams[c]);
		}
		for (unsigned k = 0; k < d->nall_events; k++) {
			gpu->ops->event_destroy(gpu->b, d->all_events[k]->be);
			free(d->all_events[k]);
		}
		free(d->all_events);
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

static int init_device(struct tdm_gpu *gpu, int i)
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
	 * GPU. topology.c owns the rules (and the user's overrides); tdm_gpu_create planned every
	 * device before this runs. */
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
		return -ENOTSUP;
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
 * tdm_gpu_config.connections: sets CUDA_DEVICE_MAX_CONNECTIONS as the rule at the top of
 * topology.c says. What was set is kept for the process, since CUDA keeps it: every later
 * tdm_gpu_create's decisions need it. The lock orders tandem's own setenv calls; no other
 * thread may read the environment meanwhile (tandem_gpu.h), other tdm_gpu_create calls
 * included.
 */
static pthread_mutex_t connections_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned connections_set; /* connections_lock: the value written; 0: none */
static bool connections_auto;    /* connections_lock: written by TDM_CONNECTIONS_AUTO */

/* True when this call set the variable. */
static bool set_connections(struct tdm_gpu *gpu)
{
	bool set = false;
	int workers = tdm_executor_workers(gpu->ex);
	unsigned want = tdm__connections_wanted(gpu->cfg.connections, gpu->cfg.streams_per_device,
	                                        workers > 0 ? (unsigned)workers : 0,
	                                        getenv("CUDA_VISIBLE_DEVICES"));
	pthread_mutex_lock(&connections_lock);
	if (want != 0 && gpu->ops->set_connections != NULL) {
		int rc = gpu->ops->set_connections(want);
		if (rc == 0) {
			connections_set = want;
			connections_auto = gpu->cfg.connections == TDM_CONNECTIONS_AUTO;
		}
		set = rc == 0;
		gpu->connections_late = rc == -EALREADY;
	}
	gpu->connections_by_tandem = connections_auto ? connections_set : 0;
	pthread_mutex_unlock(&connections_lock);
	return set;
}

/* The backend did not open (no device, no driver): the process gets its environment back, if the
 * variable still holds tandem's value. (Should CUDA have started before the open failed, it keeps
 * the value; the decisions are the same either way, CUDA's default's.) */
static void unset_connections(void)
{
	pthread_mutex_lock(&connections_lock);
	const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	char mine[16];
	snprintf(mine, sizeof(mine), "%u", connections_set);
	if (v != NULL && connections_set != 0 && strcmp(v, mine) == 0)
		unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
	connections_set = 0;
	connections_auto = false;
	pthread_mutex_unlock(&connections_lock);
}

int tdm_gpu_create(tdm_gpu **out, tdm_executor *ex, const tdm_gpu_config *cfg_in)
{
	if (out == NULL || ex == NULL)
		return -EINVAL;
	tdm_gpu_config cfg;
	if (cfg_in != NULL)
		cfg = *cfg_in;
	else
		tdm_gpu_config_init(&cfg);
	if ((unsigned)cfg.completion > TDM_COMPLETION_ADAPTIVE ||
	    (unsigned)cfg.placement > TDM_PLACE_NEAREST ||
	    (unsigned)cfg.pageable > TDM_PAGEABLE_REFUSE || cfg.streams_per_device > 1024 ||
	    cfg.launch_limit > 1024 || cfg.pinned_chunk_bytes > ((size_t)64 << 30) ||
	    cfg.connections < TDM_CONNECTIONS_KEEP || cfg.connections > TDM__TOPO_MAX_QUEUES ||
	    (cfg.pinned_cap_bytes != 0 && cfg.pinned_cap_bytes < ((size_t)64 << 10)))
		return -EINVAL;
	if (cfg.completion == TDM_COMPLETION_AUTO) {
		/* Unset: modes[3], automatic (adaptive where words can be written). */
		static const char *const names[] = {"word", "event", "adaptive"};
		static const tdm_completion modes[] = {TDM_COMPLETION_WORD, TDM_COMPLETION_EVENT,
		                                       TDM_COMPLETION_ADAPTIVE,
		                                       TDM_COMPLETION_AUTO};
		int k = env_choice("TANDEM_COMPLETION", names, 3, 3);
		if (k < 0)
			return -EINVAL;
		cfg.completion = modes[k];
	}
	/* Diagnostic switches, for measuring what the shared leases' two choices and the workers'
	 * own watching of their awaits change. */
	static const char *const balances[] = {
	    [TDM__BALANCE_NEVER] = "never", [TDM__BALANCE_ALWAYS] = "always"};
	int balance = env_choice("TANDEM_LEASE_BALANCE", balances, 2, TDM__BALANCE_SLOW);
	static const char *const watches[] = {"0", "1"};
	int watch = env_choice("TANDEM_WORKER_WATCH", watches, 2, 1);
	/* Kept in gpu->nvml for discovery (tdm__topology_discover). */
	static const char *const nvml[] = {"0", "off", "1", "on"};
	int use_nvml = env_choice("TANDEM_NVML", nvml, 4, 2);
	if (balance < 0 || watch < 0 || use_nvml < 0)
		return -EINVAL;
	const struct tdm__backend_ops *ops;
	int rc = pick_backend(&cfg, &ops);
	if (rc != 0)
		return rc;
	struct tdm_gpu *gpu = aligned_alloc(TDM__CACHELINE, sizeof(*gpu));
	if (gpu == NULL)
		return -ENOMEM;
	memset(gpu, 0, sizeof(*gpu));
	if (cfg.poll_spin_us == 0)
		cfg.poll_spin_us = 200;
	if (cfg.stall_us == 0)
		cfg.stall_us = 50;
	gpu->ex = ex;
	gpu->nvml = use_nvml >= 2;
	gpu->direct = watch == 1;
	gpu->balance = balance;
	gpu->cfg = cfg;
	gpu->ops = ops;
	ck_ec32_init(&gpu->ec, 0);
	if (ops != NULL) {
		bool set = set_connections(gpu);
		rc = ops->open(&gpu->b, &cfg);
		if (rc != 0 && set)
			unset_connections();
		if (rc != 0) {
			free(gpu);
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
	if (ops != NULL && (rc = tdm__pinned_init(gpu)) != 0)
		goto fail;
	if (pthread_create(&gpu->poller, NULL, tdm__poller_main, gpu) != 0) {
		rc = -EAGAIN;
		goto fail;
	}
	/* Off by default: our machines have one NUMA node, so its benefit is unmeasured here. */
	if (cfg.pin_poller && gpu->ndev > 0 && gpu->devs[0].has_cpus)
		pthread_setaffinity_np(gpu->poller, sizeof(cpu_set_t), &gpu->devs[0].cpus);
	*out = gpu;
	return 0;
fail:
	if (gpu->pinned != NULL)
		tdm__pinned_fini(gpu);
	if (gpu->devs != NULL)
		destroy_devices(gpu);
	if (gpu->b != NULL)
		ops->close(gpu->b);
	tdm__topology_free(gpu->topo);
	free(gpu);
	return rc;
}

int tdm_gpu_destroy(tdm_gpu *gpu)
{
	if (gpu == NULL)
		return -EINVAL;
	if (tdm_worker_index(gpu->ex) >= 0)
		return -EDEADLK; /* the tasks it waits for may need this very worker */
	/* Seq_cst: pairs with the registration in register_await (Dekker on active/stopping):
	 * either the registrant sees stopping, or the poller sees its count. */
	atomic_store_explicit(&gpu->stopping, 1, memory_order_seq_cst);
	/* Leases in progress: let them finish, so that the scan of leases below sees theirs.
	 * Nothing a lease waits for depends on this thread. */
	tdm__gate_drain(&gpu->leases);
	/* Write barrier, pairing with ck_ec32_value in tdm__poller_main: a poller asleep on ec
	 * wakes, and its next loads of stopping see the store above. */
	ck_ec32_inc(&gpu->ec, &tdm__ec_mode);
	pthread_join(gpu->poller, NULL);
	/* Tasks resumed from their last await still hold their leases for a moment: wait until
	 * every stream is given back before the streams go. */
	for (int i = 0; i < gpu->ndev; i++)
		for (int c = 0; c < TDM__PRIO_CLASSES; c++)
			for (unsigned k = 0; k < gpu->devs[i].nstreams; k++) {
				struct tdm_stream *s = atomic_load(&gpu->devs[i].streams[c][k]);
				/* Acquire: pairs with the release in tdm_stream_release. */
				while (s != NULL &&
				       atomic_load_explicit(&s->leases, memory_order_acquire) != 0)
					sched_yield();
			}
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
	tdm__topology_free(gpu->topo);
	free(gpu);
	return 0;
}

const char *tdm_gpu_backend_name(const tdm_gpu *gpu)
{
	if (gpu == NULL || gpu->ops == NULL)
		return "none";
	return gpu->ops->name;
}

int tdm_gpu_device_count(const tdm_gpu *gpu)
{
	return gpu != NULL ? gpu->ndev : -EINVAL;
}

int tdm_gpu_completion(const tdm_gpu *gpu, int device)
{
	if (gpu == NULL || device < 0 || device >= gpu->ndev)
		return -EINVAL;
	const struct tdm__gdev *d = &gpu->devs[device];
	return !d->words     ? TDM_COMPLETION_EVENT
	       : d->adaptive ? TDM_COMPLETION_ADAPTIVE
	                     : TDM_COMPLETION_WORD;
}

int tdm_gpu_stats_get(const tdm_gpu *gpu, tdm_gpu_stats *out)
{
	if (gpu == NULL || out == NULL)
		return -EINVAL;
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
	return 0;
}

void tdm__device_fail(struct tdm__gdev *d)
{
	/* Release: pairs with the acquire loads of failed in tdm_stream_lease, tdm_await_stream,
	 * and pipeline.c (batch_settle, slot_prime). Only the flag is read there; the launches'
	 * and the poller's loads are relaxed. The first to fail it gives the staging blocks back;
	 * the exchange only decides who (stage_lock orders the lists). */
	if (atomic_exchange_explicit(&d->failed, 1, memory_order_release) == 0)
		tdm__staging_orphan(d);
}

/* ---- streams ---- */

/* The stream at slot k of class c, created on first use. */
static int stream_at(struct tdm__gdev *d, int c, unsigned k, struct tdm_stream **out)
{
	/* Acquire: pairs with the release store below; the stream's fields are initialised. */
	struct tdm_stream *s = atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
	if (s != NULL) {
		*out = s;
		return 0;
	}
	struct tdm_gpu *gpu = d->gpu;
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	s = atomic_load_explicit(&d->streams[c][k], memory_order_relaxed);
	if (s == NULL) {
		s = aligned_alloc(TDM__CACHELINE, sizeof(*s));
		if (s == NULL) {
			rc = -ENOMEM;
		} else {
			memset(s, 0, sizeof(*s));
			s->dev = d;
			pthread_mutex_init(&s->wlock, NULL);
			if (d->words)
				s->word = d->word_block +
				          ((size_t)c * d->nstreams + k) * (TDM__CACHELINE / 8);
			rc = gpu->ops->stream_create(gpu->b, d->index, d->prio[c], &s->bs);
			if (rc != 0) {
				free(s);
				s = NULL;
			} else {
				/* Release: publishes the initialised stream to lock-free readers.
				 */
				atomic_store_explicit(&d->streams[c][k], s, memory_order_release);
			}
		}
	}
	pthread_mutex_unlock(&d->lock);
	*out = s;
	return rc;
}

unsigned tdm__streams_open(const struct tdm__gdev *d, int c)
{
	unsigned open = 0;
	for (unsigned k = 0; k < d->nstreams; k++) {
		/* Acquire: pairs with the release that publishes a made stream (stream_at). */
		struct tdm_stream *s =
		    atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
		/* Relaxed: a snapshot; the caller checks again after it took a stream. */
		open += s == NULL ||
		        atomic_load_explicit(&s->leases, memory_order_relaxed) < TDM__EXCLUSIVE;
	}
	return open;
}

/*
 * The stream leases held on a device (an exclusive one counts once), summed from the streams'
 * own counts rather than kept in a device-wide counter that every lease and release would
 * write. Relaxed: a hint for placement; a lease in flight may be missed.
 */
static int device_load(struct tdm__gdev *d)
{
	int load = 0;
	for (int c = 0; c < TDM__PRIO_CLASSES; c++)
		for (unsigned k = 0; k < d->nstreams; k++) {
			/* Acquire: pairs with the release that publishes a made stream (stream_at).
			 */
			struct tdm_stream *s =
			    atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
			if (s == NULL)
				continue;
			int l = atomic_load_explicit(&s->leases, memory_order_relaxed);
			load += l >= TDM__EXCLUSIVE ? 1 : l;
		}
	return load;
}

static bool device_failed(struct tdm__gdev *d)
{
	/* Acquire: pairs with the release in tdm__device_fail. */
	return atomic_load_explicit(&d->failed, memory_order_acquire) != 0;
}

/* The device for a TDM_DEVICE_ANY lease: among those that have not failed (a failed one would
 * refuse the lease; least loaded picked it every time, its leases all released); when every
 * one has failed, any (the lease says -ENODEV). */
static int place(struct tdm_gpu *gpu)
{
	unsigned n = (unsigned)gpu->ndev;
	unsigned rr = atomic_fetch_add_explicit(&gpu->place_rr, 1, memory_order_relaxed);
	int first_live = -1;
	for (unsigned k = 0; k < n && first_live < 0; k++)
		if (!device_failed(&gpu->devs[(rr + k) % n]))
			first_live = (int)((rr + k) % n);
	if (first_live < 0)
		return (int)(rr % n);
	switch (gpu->cfg.placement) {
	case TDM_PLACE_LEAST_LOADED: {
		/* Start the scan at rr so that ties spread instead of piling on device 0. */
		int best = first_live, best_load = INT32_MAX;
		for (unsigned k = 0; k < n; k++) {
			int i = (int)((rr + k) % n);
			if (device_failed(&gpu->devs[i]))
				continue;
			int load = device_load(&gpu->devs[i]);
			if (load < best_load) {
				best = i;
				best_load = load;
			}
		}
		return best;
	}
	case TDM_PLACE_NEAREST: {
		int cpu = sched_getcpu();
		for (unsigned k = 0; cpu >= 0 && k < n; k++) {
			int i = (int)((rr + k) % n);
			if (gpu->devs[i].has_cpus && CPU_ISSET(cpu, &gpu->devs[i].cpus) &&
			    !device_failed(&gpu->devs[i]))
				return i;
		}
		return first_live;
	}
	default:
		return first_live;
	}
}

/*
 * Shared leases: slot k, or the other slot this call compares it with when that stream exists
 * and holds fewer leases (see the top of this file). The lease counts are read relaxed: a hint
 * for balance; the lease itself is taken with its own atomic in tdm_stream_lease.
 */
static unsigned two_choices(struct tdm__gdev *d, int c, unsigned k)
{
	static _Thread_local unsigned turn;
	unsigned other = (k + 1 + turn++ % (d->nstreams - 1)) % d->nstreams;
	/* Acquire: pair with the release that publishes a made stream (stream_at). */
	struct tdm_stream *mine = atomic_load_explicit(&d->streams[c][k], memory_order_acquire);
	if (mine == NULL || d->gpu->balance == TDM__BALANCE_NEVER)
		return k;
	/* A quick stream keeps its worker's leases (the top of this file). Relaxed: the poller's
	 * hint, as for the completion mechanism. */
	if (d->gpu->balance == TDM__BALANCE_SLOW &&
	    atomic_load_explicit(&mine->quick, memory_order_relaxed))
		return k;
	struct tdm_stream *s = atomic_load_explicit(&d->streams[c][other], memory_order_acquire);
	if (s == NULL)
		return k;
	int lm = atomic_load_explicit(&mine->leases, memory_order_relaxed);
	int lo = atomic_load_explicit(&s->leases, memory_order_relaxed);
	/* Leave the own stream only for a clear difference: moving costs the locality of one
	 * worker per stream (measured: moving whenever the other held fewer cut 10 us kernels at 8
	 * workers from ~400k to ~300k tasks/s). */
	return lo + 2 + lm / 16 < lm ? other : k;
}

static int lease(struct tdm_gpu *gpu, int device, unsigned flags, int wi, tdm_stream **out);

int tdm_stream_lease(tdm_gpu *gpu, int device, unsigned flags, tdm_stream **out)
{
	if (gpu == NULL || out == NULL ||
	    (flags & ~(unsigned)(TDM_STREAM_EXCLUSIVE | TDM_STREAM_HIGH_PRIORITY)) != 0)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	if (device != TDM_DEVICE_ANY && (device < 0 || device >= gpu->ndev))
		return -EINVAL;
	/* Through the gate: a lease that missed stopping is waited for, and what it took is then
	 * seen by destroy's scan of the leases. */
	_Atomic unsigned *n = tdm__gate_enter(&gpu->leases, &gpu->stopping);
	if (n == NULL)
		return -ESHUTDOWN;
	int rc = lease(gpu, device, flags, tdm_worker_index(gpu->ex), out);
	tdm__gate_leave(n);
	return rc;
}

static int lease_on(struct tdm_gpu *gpu, int device, unsigned flags, int wi, tdm_stream **out);

/* TDM_DEVICE_ANY: the placement's device first; when it has no stream to give (-EBUSY) or failed
 * since (-ENODEV), the other live devices in turn, so that the lease says -EBUSY only when no
 * device could take it, and -ENODEV only when every device failed. */
static int lease(struct tdm_gpu *gpu, int device, unsigned flags, int wi, tdm_stream **out)
{
	if (device != TDM_DEVICE_ANY)
		return lease_on(gpu, device, flags, wi, out);
	int first = place(gpu);
	bool busy = false;
	for (int k = 0; k < gpu->ndev; k++) {
		int i = (first + k) % gpu->ndev;
		if (k > 0 && device_failed(&gpu->devs[i]))
			continue;
		int rc = lease_on(gpu, i, flags, wi, out);
		if (rc == -EBUSY)
			busy = true;
		else if (rc != -ENODEV)
			return rc; /* the lease, or an error making a stream */
	}
	return busy ? -EBUSY : -ENODEV;
}

static int lease_on(struct tdm_gpu *gpu, int device, unsigned flags, int wi, tdm_stream **out)
{
	struct tdm__gdev *d = &gpu->devs[device];
	if (device_failed(d))
		return -ENODEV;
	int c = (flags & TDM_STREAM_HIGH_PRIORITY) ? 1 : 0;
	unsigned first =
	    wi >= 0 ? (unsigned)wi : atomic_fetch_add_explicit(&d->rr, 1, memory_order_relaxed);
	if (!(flags & TDM_STREAM_EXCLUSIVE) && d->nstreams > 1)
		first = two_choices(d, c, first % d->nstreams);
	for (unsigned i = 0; i < d->nstreams; i++) {
		struct tdm_stream *s;
		int rc = stream_at(d, c, (first + i) % d->nstreams, &s);
		if (rc != 0)
			return rc;
		if (flags & TDM_STREAM_EXCLUSIVE) {
			int none = 0;
			/* Acquire: pairs with the release decrements in tdm_stream_release; the
			 * earlier holders' use of the stream happens before this lease. */
			if (atomic_compare_exchange_strong_explicit(
			        &s->leases, &none, TDM__EXCLUSIVE, memory_order_acquire,
			        memory_order_relaxed)) {
				*out = s;
				return 0;
			}
			continue;
		}
		/* Shared: take it unless someone holds it exclusively. Acquire: pairs with the
		 * release in tdm_stream_release of an exclusive holder that let it go. */
		int prev = atomic_fetch_add_explicit(&s->leases, 1, memory_order_acquire);
		if (prev < TDM__EXCLUSIVE) {
			*out = s;
			return 0;
		}
		atomic_fetch_sub_explicit(&s->leases, 1, memory_order_relaxed);
	}
	return -EBUSY;
}

int tdm_stream_release(tdm_stream *s)
{
	if (s == NULL)
		return -EINVAL;
	int cur = atomic_load_explicit(&s->leases, memory_order_relaxed);
	if (cur == 0)
		return -EINVAL;
	/* Release: the holder's use of the stream happens before the next exclusive lease. */
	if (cur >= TDM__EXCLUSIVE)
		atomic_fetch_sub_explicit(&s->leases, TDM__EXCLUSIVE, memory_order_release);
	else
		atomic_fetch_sub_explicit(&s->leases, 1, memory_order_release);
	return 0;
}

void *tdm_stream_native(const tdm_stream *s)
{
	if (s == NULL || s->dev->gpu->ops->stream_native == NULL)
		return NULL;
	return s->dev->gpu->ops->stream_native(s->dev->gpu->b, s->bs);
}

int tdm_stream_device(const tdm_stream *s)
{
	return s != NULL ? s->dev->index : -EINVAL;
}

void tdm_launch_begin(tdm_stream *s)
{
	struct tdm__gdev *d = s->dev;
	unsigned limit = d->launch_limit;
	for (unsigned spins = 0;; spins++) {
		int cur = atomic_load_explicit(&d->launching, memory_order_relaxed);
		/* Acquire: pairs with the release decrement in tdm_launch_end (a semaphore). Only
		 * the count matters: the driver orders its own state. */
		if ((unsigned)cur < limit &&
		    atomic_compare_exchange_weak_explicit(
		        &d->launching, &cur, cur + 1, memory_order_acquire, memory_order_relaxed))
			return;
		/* A launch takes microseconds: spin a little, then give the CPU to the launchers
		 * and the poller rather than burn it (more threads than cores otherwise). */
		if (spins < 64)
			tdm__cpu_relax();
		else
			sched_yield();
	}
}

void tdm_launch_end(tdm_stream *s)
{
	/* Release: pairs with the acquire CAS in tdm_launch_begin. */
	atomic_fetch_sub_explicit(&s->dev->launching, 1, memory_order_release);
}

/* ---- work helpers ---- */

bool tdm__fail_if_dead(struct tdm_stream *s, int rc)
{
	if (rc != -EIO || s->dev->gpu->ops->stream_query(s->dev->gpu->b, s->bs) != -EIO)
		return false;
	tdm__device_fail(s->dev);
	return true;
}

static int enqueued(struct tdm_stream *s, int rc)
{
	tdm__fail_if_dead(s, rc);
	return rc;
}

#define LAUNCH(s, call)                                                                            \
	do {                                                                                       \
		if ((s) == NULL)                                                                   \
			return -EINVAL;                                                            \
		if (atomic_load_explicit(&(s)->dev->failed, memory_order_relaxed))                 \
			return -EIO;                                                               \
		tdm_launch_begin(s);                                                               \
		int rc_ = (call);                                                                  \
		tdm_launch_end(s);                                                                 \
		return enqueued((s), rc_);                                                         \
	} while (0)

#define B(s) ((s)->dev->gpu)

int tdm_memcpy_async(tdm_stream *s, void *dst, const void *src, size_t bytes, tdm_copy_kind kind)
{
	if (dst == NULL || src == NULL || kind < TDM_COPY_H2D || kind > TDM_COPY_D2D)
		return -EINVAL;
	if (s != NULL && ((kind == TDM_COPY_H2D && !tdm__is_pinned(B(s), src)) ||
	                  (kind == TDM_COPY_D2H && !tdm__is_pinned(B(s), dst))))
		LAUNCH(s, tdm__memcpy_staged(s, dst, src, bytes, kind));
	LAUNCH(s, B(s)->ops->memcpy_async(B(s)->b, s->bs, dst, src, bytes, kind));
}

int tdm_launch_spin(tdm_stream *s, uint32_t ns)
{
	LAUNCH(s, B(s)->ops->launch_spin(B(s)->b, s->bs, ns));
}

int tdm_launch_busy(tdm_stream *s, uint32_t ns)
{
	LAUNCH(s, B(s)->ops->launch_busy(B(s)->b, s->bs, ns));
}

int tdm_launch_scale(tdm_stream *s, float *y, const float *x, float a, size_t n)
{
	if (y == NULL || x == NULL)
		return -EINVAL;
	LAUNCH(s, B(s)->ops->launch_scale(B(s)->b, s->bs, y, x, a, n));
}

int tdm_launch_fault(tdm_stream *s)
{
	LAUNCH(s, B(s)->ops->launch_fault(B(s)->b, s->bs));
}

int tdm_sim_inject(tdm_stream *s, tdm_sim_fault fault)
{
	if (s == NULL || B(s)->ops->sim_inject == NULL)
		return -EINVAL;
	return B(s)->ops->sim_inject(B(s)->b, s->bs, fault);
}

int tdm_device_alloc(tdm_gpu *gpu, int device, size_t bytes, void **out)
{
	if (gpu == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	if (device < 0 || device >= gpu->ndev)
		return -EINVAL;
	return gpu->ops->device_alloc(gpu->b, device, bytes, out);
}

int tdm_device_free(tdm_gpu *gpu, int device, void *p)
{
	if (gpu == NULL || device < 0 || device >= gpu->ndev)
		return -EINVAL;
	if (p == NULL)
		return 0;
	/* -EINVAL from the backend for what is not live memory of `device`: each checks the
	 * device, since cudaFree alone would free another device's memory. */
	return gpu->ops->device_free(gpu->b, device, p);
}

int tdm_host_alloc(tdm_gpu *gpu, size_t bytes, void **out)
{
	if (gpu == NULL || out == NULL || bytes == 0)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	return gpu->ops->host_alloc(gpu->b, bytes, out);
}

int tdm_host_free(tdm_gpu *gpu, void *p)
{
	if (gpu == NULL)
		return -EINVAL;
	if (gpu->ops == NULL)
		return -ENODEV;
	if (p == NULL)
		return 0;
	/* A block of the pinned pool may start its chunk, which the backend would free from
	 * under the pool. */
	if (tdm__pinned_owns(gpu, p))
		return -EINVAL;
	return gpu->ops->host_free(gpu->b, p);
}

/* ---- events ---- */

int tdm__event_take(struct tdm__gdev *d, struct tdm_event **out)
{
	struct tdm_gpu *gpu = d->gpu;
	pthread_mutex_lock(&d->ev_lock);
	struct tdm_event *e = d->free_events;
	if (e != NULL) {
		d->free_events = e->next_free;
		atomic_store_explicit(&e->pooled, false, memory_order_relaxed);
		pthread_mutex_unlock(&d->ev_lock);
		*out = e;
		return 0;
	}
	pthread_mutex_unlock(&d->ev_lock);
	/*
	 * A new one, made without the lock: the poller gives events back under ev_lock, and a
	 * driver call can wait a long time (for a context lock that a thread blocked on a full
	 * stream holds, say); the poller must never wait behind one.
	 */
	e = aligned_alloc(TDM__CACHELINE, TDM__CACHELINE);
	if (e == NULL)
		return -ENOMEM;
	memset(e, 0, sizeof(*e));
	e->dev = d;
	int rc = gpu->ops->event_create(gpu->b, d->index, &e->be);
	if (rc != 0) {
		free(e);
		return rc;
	}
	pthread_mutex_lock(&d->ev_lock);
	if (d->nall_events == d->cap_events) {
		unsigned cap = d->cap_events != 0 ? 2 * d->cap_events : 64;
		struct tdm_event **all = realloc(d->all_events, cap * sizeof(*all));
		if (all == NULL) {
			pthread_mutex_unlock(&d->ev_lock);
			gpu->ops->event_destroy(gpu->b, e->be);
			free(e);
			return -ENOMEM;
		}
		d->all_events = all;
		d->cap_events = cap;
	}
	d->all_events[d->nall_events++] = e;
	pthread_mutex_unlock(&d->ev_lock);
	*out = e;
	return 0;
}

/* Back to the free list; false (and nothing done) when it is there already. */
static bool event_push(struct tdm_event *e)
{
	struct tdm__gdev *d = e->dev;
	pthread_mutex_lock(&d->ev_lock);
	bool was = atomic_load_explicit(&e->pooled, memory_order_relaxed);
	if (!was) {
		e->next_free = d->free_events;
		d->free_events = e;
		atomic_store_explicit(&e->pooled, true, memory_order_relaxed);
	}
	pthread_mutex_unlock(&d->ev_lock);
	return !was;
}

void tdm__event_give(struct tdm_event *e)
{
	(void)event_push(e);
}

int tdm_event_get(tdm_gpu *gpu, int device, tdm_event **out)
{
	if (gpu == NULL || out == NULL)
		return -EINVAL;
	if (gpu->ndev == 0)
		return -ENODEV;
	if (device < 0 || device >= gpu->ndev)
		return -EINVAL;
	int rc = tdm__event_take(&gpu->devs[device], out);
	/* A new owner's event is complete until it records it (tdm_await_event says so), even
	 * when its last record, for a stream await, captured a failed operation. */
	if (rc == 0 && gpu->ops->event_reset != NULL)
		gpu->ops->event_reset(gpu->b, (*out)->be);
	return rc;
}

int tdm_event_put(tdm_event *e)
{
	if (e == NULL)
		return -EINVAL;
	/* A second put would put it on the free list twice, for two owners to take. */
	return event_push(e) ? 0 : -EINVAL;
}

/* Whether e is back in its pool: its owner put it. Relaxed: a check of misuse (a record or an
 * await racing the owner's own put is not caught). */
static bool event_put_back(const struct tdm_event *e)
{
	return atomic_load_explicit(&e->pooled, memory_order_relaxed);
}

int tdm_event_record(tdm_event *e, tdm_stream *s)
{
	if (e == NULL || s == NULL || e->dev != s->dev || event_put_back(e))
		return -EINVAL;
	if (atomic_load_explicit(&s->dev->failed, memory_order_relaxed))
		return -EIO;
	return enqueued(s, B(s)->ops->event_record(B(s)->b, e->be, s->bs));
}

/* ---- awaits ---- */

/*
 * Counts an await as active unless the layer is stopping. Seq_cst on both sides: pairs with
 * the store of stopping in tdm_gpu_destroy and the poller's load of active (Dekker).
 */
static int register_await(struct tdm_gpu *gpu)
{
	atomic_fetch_add_explicit(&gpu->active, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&gpu->stopping, memory_order_seq_cst)) {
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_seq_cst);
		return -ESHUTDOWN;
	}
	return 0;
}

static int fail_now(struct tdm__task *t, int rc)
{
	if (t != NULL)
		t->result = rc;
	return rc;
}

/*
 * A word await held by its worker (tdm__task_hold): the same test the poller makes (the word at
 * or past the await's number), then the poller's bookkeeping for a completion. An error the
 * backend reports for that number is delivered here, and a dead device marked failed, as the
 * poller would: asking word_status consumes the report.
 */
static int held_poll(struct tdm__task *t, int *rc)
{
	struct tdm_stream *s = TDM__AW_PTR(t);
	struct tdm_gpu *gpu = s->dev->gpu;
	/* Acquire: pairs with the device's write (the backend's store in sim); the work before
	 * the write is complete. */
	if (__atomic_load_n(s->word, __ATOMIC_ACQUIRE) < t->await_seq)
		return 0;
	const struct tdm__backend_ops *ops = gpu->ops;
	*rc = ops->word_status != NULL ? ops->word_status(gpu->b, s->bs, t->await_seq) : 0;
	tdm__fail_if_dead(s, *rc); /* then the poller fails the device's other awaits */
	atomic_fetch_add_explicit(&gpu->n_direct, 1, memory_order_relaxed);
	/* The last access to gpu. Release: pairs with the poller's seq_cst load of active before
	 * it ends, after which tdm_gpu_destroy may free gpu. */
	atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
	return 1;
}

/*
 * tdm__poller_submit for an await that holds nothing tdm_gpu_destroy waits for besides its count
 * in active. Once pushed, t is the poller's: its await can complete (a deadline cancelled by a
 * destroy, an event already done, a held await's word), the poller end and the layer be freed
 * before tdm__poller_submit's bump of the event count returns. One more count in active keeps
 * the poller, and so the layer, alive until then; the await's own count is still there, so the
 * poller cannot have ended before it. Release: pairs with the poller's seq_cst load of active
 * before it ends. A stream await submitted by its own task needs none of this: the task's lease
 * holds tdm_gpu_destroy back (it waits for every lease), and the task is still running here.
 */
static void submit_guarded(struct tdm_gpu *gpu, struct tdm__task *t)
{
	atomic_fetch_add_explicit(&gpu->active, 1, memory_order_relaxed);
	tdm__poller_submit(gpu, t);
	atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
}

static void held_handoff(struct tdm__task *t)
{
	/* The handing worker is not t's runner: t may have returned and released its lease. */
	submit_guarded(((struct tdm_stream *)TDM__AW_PTR(t))->dev->gpu, t);
}

int tdm_await_stream(tdm_task *pub, tdm_stream *s)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL || s == NULL)
		return fail_now(t, -EINVAL);
	struct tdm__gdev *d = s->dev;
	struct tdm_gpu *gpu = d->gpu;
	if (tdm__task_executor(t) != gpu->ex)
		return fail_now(t, -EINVAL);
	/* Acquire: pairs with the release in tdm__device_fail. */
	if (atomic_load_explicit(&d->failed, memory_order_acquire))
		return fail_now(t, -EIO);
	int rc = register_await(gpu);
	if (rc != 0)
		return fail_now(t, rc);
	/* Relaxed: a hint the poller keeps; either mechanism is correct. */
	bool word =
	    d->words && (!d->adaptive || atomic_load_explicit(&s->quick, memory_order_relaxed));
	struct tdm_event *e = NULL;
	if (!word) {
		rc = tdm__event_take(d, &e);
		/* Adaptive: no event to be had (-ENOMEM, say) is no reason to fail; a word works.
		 */
		if (rc != 0 && d->adaptive) {
			word = true;
			rc = 0;
		}
	}
	/*
	 * Numbering and enqueueing under one lock keeps the stream's operations in number order, so
	 * the word only grows, and the poller's FIFO (sorted by number) is the stream's order.
	 * Without it, two tasks sharing the stream could enqueue 6 before 5: the word would end at
	 * 5, and a poller that never read the 6 in between would wait for it forever. Events are
	 * numbered too: a word written past an event's number means the event's work is done.
	 */
	if (rc == 0) {
		pthread_mutex_lock(&s->wlock);
		uint64_t seq = s->seq + 1;
		rc = word ? gpu->ops->write_value(gpu->b, s->bs, s->word, seq)
		          : gpu->ops->event_record(gpu->b, e->be, s->bs);
		if (rc == 0)
			s->seq = seq;
		pthread_mutex_unlock(&s->wlock);
		if (word) {
			t->await_obj = s;
			t->await_seq = seq;
		} else {
			e->seq = seq;
			t->await_obj = (void *)((uintptr_t)s | TDM__AW_STREAM_EVENT);
			t->await_seq = (uint64_t)(uintptr_t)e;
		}
	}
	if (rc != 0) {
		if (e != NULL)
			tdm__event_give(e);
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_relaxed);
		return fail_now(t, enqueued(s, rc));
	}
	tdm__task_suspend(t);
	/* A word is one memory read: the worker may watch it itself while it has nothing else to
	 * run, and resume the task with no other thread on the round trip. */
	if (!word || !gpu->direct || !tdm__task_hold(t, held_poll, held_handoff))
		tdm__poller_submit(gpu, t);
	return TDM_SUSPENDED;
}

int tdm_await_event(tdm_task *pub, tdm_event *e)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL || e == NULL || event_put_back(e))
		return fail_now(t, -EINVAL);
	struct tdm_gpu *gpu = e->dev->gpu;
	if (tdm__task_executor(t) != gpu->ex)
		return fail_now(t, -EINVAL);
	/* Counted first: the count keeps the poller, and so the backend, alive for the query
	 * even when tdm_gpu_destroy runs meanwhile. */
	int rc = register_await(gpu);
	if (rc != 0)
		return fail_now(t, rc);
	/* Already done: go on without a round trip through the poller. Release: the query
	 * happens before the poller's seq_cst load of active that lets it end. */
	int q = gpu->ops->event_query(gpu->b, e->be);
	if (q != -EAGAIN) {
		atomic_fetch_sub_explicit(&gpu->active, 1, memory_order_release);
		return fail_now(t, q);
	}
	t->await_obj = (void *)((uintptr_t)e | TDM__AW_EVENT);
	tdm__task_suspend(t);
	submit_guarded(gpu, t);
	return TDM_SUSPENDED;
}

int tdm_await_deadline(tdm_task *pub, tdm_gpu *gpu, uint64_t deadline_ns)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL || gpu == NULL)
		return fail_now(t, -EINVAL);
	if (tdm__task_executor(t) != gpu->ex)
		return fail_now(t, -EINVAL);
	if (deadline_ns <= tdm_now_ns())
		return fail_now(t, 0);
	int rc = register_await(gpu);
	if (rc != 0)
		return fail_now(t, rc);
	t->await_obj = (void *)((uintptr_t)gpu | TDM__AW_DEADLINE);
	t->await_seq = deadline_ns;
	tdm__task_suspend(t);
	submit_guarded(gpu, t);
	return TDM_SUSPENDED;
}
