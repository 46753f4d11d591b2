// SPDX-License-Identifier: MIT
/*
 * DAGs of GPU steps (tandem_graph.h, "DAGs"): a host-side list of nodes (kernels through a
 * callback, copies, memsets) with their dependencies, lowered onto streams for the first runs,
 * then captured into a graph (graph.c) and replayed.
 *
 * Structure plan (once per structure). Nodes go to lanes, in id order (a topological order, since
 * a node depends only on earlier ones): a node follows a dependency's lane when that dependency
 * is still the lane's latest node (a chain stays on its stream); else it takes the first lane
 * whose latest node is one of its ancestors (nothing is serialised that was not ordered already);
 * else a new lane. The lanes are the DAG's width.
 *
 * Run plan (once per structure and stream count k). Lane l runs on stream l % k: stream 0 is the
 * caller's s, streams 1..k-1 exclusive leases of s's device taken for the run. Running each
 * stream's nodes in id order keeps every dependency between nodes of one stream; one between
 * streams becomes an edge: an event recorded after the producer, waited on by the consumer's
 * stream right before the consumer. Edges already implied are left out: each stream keeps a
 * vector clock (the latest node of every stream it is ordered after, through its own order and
 * the edges it waited on, transitively), and a dependency its stream's clock covers needs none.
 * At the end each other stream is joined into s the same way (unless s's clock covers its last
 * node already), so that awaiting s covers everything; and at the start every other stream waits
 * on a fork event recorded on s, so that the DAG runs after the work enqueued on s before it.
 * That fork is also how those streams join a capture (tdm_stream_wait_event on an event recorded
 * in it) and why a run may follow the previous one on s before that one is done: all of the next
 * run's work comes after the previous run's joins in s's order.
 *
 * Streams: extra leases are taken only while the device keeps a stream for shared leases (as
 * tdm_pipeline_run leaves one), at most TDM_DAG_MAX_STREAMS - 1 and the width less one; none to
 * be had is k = 1: every node on s, no events. They are released once the run's work is
 * enqueued (queued work stays), or, for a capture, once it ended (a stream joined to a capture
 * cannot be released before).
 *
 * Events: the DAG's own, made with the backend for it (not the device's pool) and kept across
 * runs, one per node that some edge waits on, a fork and one join per stream for the error path.
 * Not pooled, because an edge may still wait on one when the run's task resumes elsewhere, or the
 * DAG is destroyed: a pooled event given back could be taken and recorded by another owner first,
 * and the sim's edge waits for "a record at least as new as the one it saw", which another
 * owner's newer record on another stream could satisfy early (CUDA's cudaStreamWaitEvent takes
 * the record at the call and is immune). The DAG's own are recorded only by its runs, in s's
 * order (above), and destroyed (event_destroy: freed once their queued records and waits ran) at
 * tdm_dag_destroy, which therefore never waits and is safe with work in flight.
 *
 * Capture: after capture_after lowered runs of one structure (tdm_gpu_config.graph_capture_after,
 * 2 by default, as tdm_graph_run counts), a run lowers the DAG between tdm_graph_capture_begin(s)
 * and tdm_graph_capture_end(s, &g), the other streams joining and leaving through the fork and
 * join edges, and launches g; later runs launch g alone, on s, with no lease taken. A parameter
 * change (tdm_dag_set_*) marks the DAG dirty: the next run captures again into g, which
 * capture_end updates in place when the topology is unchanged (it is, unless the run got another
 * number of streams). A node failing in a capture abandons it; so does a call a capture refuses
 * (a staged copy); either way the run lowers the DAG instead, and when that succeeds the failure
 * was the capture's: the structure is not captured again until it changes.
 *
 * Handles: a DAG is an object of the DAGs' handle table (base/handle.h), never freed, so that a
 * stale handle is refused by its word. Every call holds the DAG while it runs: one CAS of the
 * word from the handle to the handle marked busy, which a call racing it (on another thread, or
 * from a node's callback) finds and says -EBUSY; a destroyed DAG's word says dead (-EINVAL). A
 * run holds it while it enqueues, so that its own callbacks can neither free the DAG under
 * `lower` nor grow its arrays past the plan. A DAG is on its layer's list from create to
 * destroy; tdm_gpu_destroy destroys those left.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "tandem_graph.h"

enum { NODE_KERNEL, NODE_COPY, NODE_MEMSET };

#define NONE UINT_MAX

struct dnode {
	int kind;
	unsigned dep0, ndeps; /* d->deps[dep0 .. dep0 + ndeps), distinct, highest first */
	unsigned lane;        /* the structure plan */
	tdm_dag_fn fn;        /* kernel */
	void *arg;
	void *dst; /* copy, memset */
	const void *src;
	size_t bytes;
	tdm_copy_kind ckind;
	int value;
};

struct tdm__dag {
	struct tdm__hobj hobj; /* its word: the handle, busy while a call holds it */
	struct tdm__gpu *gpu;
	struct tdm__dag *next, *prev; /* on gpu->dags (gpu->lease_lock) while linked */
	bool linked;

	struct dnode *node;
	unsigned n, cap;
	unsigned *deps;
	unsigned ndep, capdep;

	/* The structure plan: node[].lane, valid while `planned`. */
	bool planned;
	unsigned lanes;
	/* The run plan for k streams (0: none): the edges each node waits on before it runs
	 * (producers waits[wstart[i] .. wstart[i + 1])), whether an event is recorded after it, and
	 * the producers s waits on at the end. */
	unsigned plan_k;
	unsigned *wstart, *waits, *joins;
	unsigned nwaits, capwaits, njoins;
	bool *rec;

	/* Events, the DAG's own, of device ev_dev (-1: none made yet). */
	int ev_dev;
	struct tdm__event **ev; /* per node, NULL until an edge needs it; cap entries */
	struct tdm__event *fork;
	struct tdm__event *jev[TDM_DAG_MAX_STREAMS]; /* the error path's joins */

	/* The graph and how runs go. */
	tdm_graph *g;
	int capture_after;
	unsigned same_runs; /* lowered runs of this structure */
	bool captured;      /* g holds a capture of this structure */
	bool dirty;         /* parameters changed since that capture */
	bool nocapture;     /* this structure's capture failed where its lowering did not */

	tdm_dag_stats st;
};

/* ---- events ---------------------------------------------------------------------------- */

/* An event of device dv, the DAG's own (the top of this file): made with the backend, never in
 * the device's pool; only the fields tdm_event_record and tdm_stream_wait_event read are set. */
static int event_new(struct tdm__gdev *dv, struct tdm__event **out)
{
	struct tdm__gpu *gpu = dv->gpu;
	size_t sz =
	    (sizeof(struct tdm__event) + TDM__CACHELINE - 1) / TDM__CACHELINE * TDM__CACHELINE;
	struct tdm__event *e = aligned_alloc(TDM__CACHELINE, sz);
	if (e == NULL)
		return -ENOMEM;
	memset(e, 0, sz); /* its word 0: never a user's */
	e->dev = dv;
	e->gpu = gpu;
	int rc = gpu->ops->event_create(gpu->b, dv->index, &e->be);
	if (rc != 0) {
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

/* Records and waits still queued on it keep the backend's event until they ran (sim: their
 * references; CUDA: cudaEventDestroy of a pending event frees it once complete). */
static void event_free(struct tdm__gpu *gpu, struct tdm__event *e)
{
	if (e == NULL)
		return;
	gpu->ops->event_destroy(gpu->b, e->be);
	free(e);
}

static void events_free(struct tdm__dag *d)
{
	for (unsigned i = 0; i < d->n; i++) {
		event_free(d->gpu, d->ev[i]);
		d->ev[i] = NULL;
	}
	event_free(d->gpu, d->fork);
	d->fork = NULL;
	for (unsigned j = 0; j < TDM_DAG_MAX_STREAMS; j++) {
		event_free(d->gpu, d->jev[j]);
		d->jev[j] = NULL;
	}
	d->ev_dev = -1;
}

static int event_need(struct tdm__gdev *dv, struct tdm__event **e)
{
	return *e != NULL ? 0 : event_new(dv, e);
}

/* ---- building ---------------------------------------------------------------------------- */

/* 64 DAGs a chunk, a million at once. */
#define DAG_TAG 0x15u
#define DAG_SHIFT 6
#define DAG_CHUNKS 16384
static char *_Atomic dag_chunks[DAG_CHUNKS];
static struct tdm__htable dag_handles =
    TDM__HTABLE_INIT("DAG", DAG_TAG, DAG_SHIFT, DAG_CHUNKS, struct tdm__dag, dag_chunks);

/*
 * Holds the DAG handle h names for a call: its word from h to h busy. NULL and *rc: -EBUSY when
 * another call holds it (a run, on this thread from a callback or on another), -EINVAL when h
 * names no live DAG (NULL, destroyed, not a DAG's). One CAS, where a run took one before
 * handles too (its flag against a racing run).
 */
static struct tdm__dag *dag_hold(const tdm_dag *h, int *rc)
{
	struct tdm__dag *d =
	    tdm__h_find(dag_chunks, DAG_TAG, DAG_SHIFT, DAG_CHUNKS, sizeof(struct tdm__dag), h);
	uint64_t w = (uint64_t)(uintptr_t)h;
	/* Acquire: pairs with the release store of the word by the call that held d before
	 * (dag_leave) or by its create: what they did to d happens before this call reads it. */
	if (d != NULL &&
	    atomic_compare_exchange_strong_explicit(&d->hobj.h, &w, w | TDM__H_BUSY,
	                                            memory_order_acquire, memory_order_relaxed))
		return d;
	*rc = d != NULL && tdm__h_why(d, h, w) == TDM__H_IS_BUSY ? -EBUSY : -EINVAL;
	return NULL;
}

/* The call is done with d. Release: pairs with the next call's acquire CAS (dag_hold). */
static void dag_leave(struct tdm__dag *d, const tdm_dag *h)
{
	atomic_store_explicit(&d->hobj.h, (uint64_t)(uintptr_t)h, memory_order_release);
}

int tdm_dag_create(tdm_gpu *layer, tdm_dag **out)
{
	if (out == NULL)
		return -EINVAL;
	/* Inside the layer's gate, as a lease: a DAG made while the layer is going is refused,
	 * and one made before is on the list the destroy, past its drain, destroys. */
	_Atomic unsigned *gate;
	int rc;
	struct tdm__gpu *gpu = tdm__gpu_enter(layer, &gate, &rc);
	if (gpu == NULL)
		return rc;
	uint64_t h;
	struct tdm__dag *d = tdm__h_take(&dag_handles, &h);
	if (d == NULL) {
		tdm__gate_leave(gate);
		return -ENOMEM;
	}
	memset((char *)d + sizeof(d->hobj), 0, sizeof(*d) - sizeof(d->hobj));
	d->gpu = gpu;
	d->ev_dev = -1;
	int after = gpu->cfg.graph_capture_after;
	d->capture_after = after == TDM_GRAPH_CAPTURE_FIRST ? 0 : after != 0 ? after : 2;
	pthread_mutex_lock(&gpu->lease_lock);
	d->next = gpu->dags;
	if (d->next != NULL)
		d->next->prev = d;
	gpu->dags = d;
	d->linked = true;
	pthread_mutex_unlock(&gpu->lease_lock);
	tdm__h_publish(&d->hobj, h);
	tdm__gate_leave(gate);
	*out = (tdm_dag *)(uintptr_t)h;
	return 0;
}

/* For a call with a bad argument: -EBUSY or -EINVAL as the handle would say, else -EINVAL (the
 * argument's). A DAG held by another call says -EBUSY whatever the arguments. */
static int dag_check(const tdm_dag *h)
{
	int rc;
	struct tdm__dag *d = dag_hold(h, &rc);
	if (d == NULL)
		return rc;
	dag_leave(d, h);
	return -EINVAL;
}

/* Frees d's parts and gives it back to the table, its word dead; d is held (dag_hold). */
/* Off its layer's list, unless the layer's destroy took it off first (and waits for it). */
static void dag_unlink(struct tdm__dag *d)
{
	struct tdm__gpu *gpu = d->gpu;
	pthread_mutex_lock(&gpu->lease_lock);
	if (d->linked) {
		if (d->prev != NULL)
			d->prev->next = d->next;
		else
			gpu->dags = d->next;
		if (d->next != NULL)
			d->next->prev = d->prev;
		d->linked = false;
	}
	pthread_mutex_unlock(&gpu->lease_lock);
}

static void dag_free(struct tdm__dag *d)
{
	if (d->g != NULL)
		(void)tdm_graph_destroy(d->g); /* replays in flight run to their end */
	events_free(d);
	free(d->node);
	free(d->deps);
	free(d->ev);
	free(d->wstart);
	free(d->waits);
	free(d->joins);
	free(d->rec);
	/* Off the list only now, its parts freed: the layer's destroy either finds it on the
	 * list and waits for this hold, or returns after these frees, never before them (they
	 * read the layer's backend). */
	dag_unlink(d);
	/* Release: the frees happen before a check that reads the word dead, and the reuse. */
	uint64_t w = atomic_load_explicit(&d->hobj.h, memory_order_relaxed) & ~TDM__H_STATE;
	atomic_store_explicit(&d->hobj.h, w | TDM__H_DEAD, memory_order_release);
	tdm__h_put(&dag_handles, &d->hobj);
}

int tdm_dag_destroy(tdm_dag *h)
{
	int rc;
	struct tdm__dag *d = dag_hold(h, &rc);
	if (d == NULL)
		return rc;
	dag_free(d);
	return 0;
}

void tdm__dags_fini(struct tdm__gpu *gpu)
{
	for (;;) {
		pthread_mutex_lock(&gpu->lease_lock);
		struct tdm__dag *d = gpu->dags;
		if (d != NULL) {
			gpu->dags = d->next;
			if (d->next != NULL)
				d->next->prev = NULL;
			d->linked = false;
		}
		pthread_mutex_unlock(&gpu->lease_lock);
		if (d == NULL)
			return;
		/* Relaxed: the word's handle, read to hold it as a call would. A call holding it
		 * now (a DAG call on another thread, racing this destroy) is waited for; one that
		 * destroys it is too, and then the word is no longer this handle's. */
		uint64_t w = atomic_load_explicit(&d->hobj.h, memory_order_relaxed) & ~TDM__H_STATE;
		for (;;) {
			int rc;
			if (dag_hold((const tdm_dag *)(uintptr_t)w, &rc) != NULL) {
				dag_free(d);
				break;
			}
			if (rc != -EBUSY)
				break; /* destroyed by its own call meanwhile */
			sched_yield();
		}
	}
}

/* The structure changed: plans go; the graph stays, for the next capture to replace. */
static void restructure(struct tdm__dag *d)
{
	d->planned = false;
	d->plan_k = 0;
	d->same_runs = 0;
	d->captured = false;
	d->dirty = false;
	d->nocapture = false;
}

static int cmp_desc(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* Appends node nd with its deps: its id, or a negative errno (nothing added). */
static int add_node(struct tdm__dag *d, struct dnode nd, const int *deps, unsigned ndeps)
{
	if (ndeps > 0 && deps == NULL)
		return -EINVAL;
	for (unsigned k = 0; k < ndeps; k++)
		if (deps[k] < 0 || (unsigned)deps[k] >= d->n)
			return -EINVAL;
	if (d->n >= (unsigned)INT_MAX || ndeps > UINT_MAX - d->ndep)
		return -ENOMEM;
	if (d->n == d->cap) {
		unsigned cap = d->cap != 0 ? 2 * d->cap : 16;
		struct dnode *p = realloc(d->node, (size_t)cap * sizeof(*p));
		if (p == NULL)
			return -ENOMEM;
		d->node = p;
		struct tdm__event **e = realloc(d->ev, (size_t)cap * sizeof(*e));
		if (e == NULL)
			return -ENOMEM;
		memset(e + d->cap, 0, (size_t)(cap - d->cap) * sizeof(*e));
		d->ev = e;
		d->cap = cap;
	}
	if (d->ndep + ndeps > d->capdep) {
		unsigned cap = d->capdep != 0 ? d->capdep : 16;
		while (cap < d->ndep + ndeps)
			cap = cap <= UINT_MAX / 2 ? 2 * cap : UINT_MAX;
		unsigned *p = realloc(d->deps, (size_t)cap * sizeof(*p));
		if (p == NULL)
			return -ENOMEM;
		d->deps = p;
		d->capdep = cap;
	}
	unsigned m = 0;
	if (ndeps > 0) {
		unsigned *dp = d->deps + d->ndep;
		for (unsigned k = 0; k < ndeps; k++)
			dp[k] = (unsigned)deps[k];
		qsort(dp, ndeps, sizeof(*dp), cmp_desc);
		for (unsigned k = 0; k < ndeps; k++)
			if (m == 0 || dp[m - 1] != dp[k])
				dp[m++] = dp[k];
	}
	nd.dep0 = d->ndep;
	nd.ndeps = m;
	d->ndep += m;
	d->node[d->n] = nd;
	restructure(d);
	return (int)d->n++;
}

/* The body of a public call on DAG handle h: holds it (dag_hold), returns `call`'s result with
 * `d` the DAG, and leaves it. */
#define DAG_CALL(h, call)                                                                          \
	do {                                                                                       \
		int rc_;                                                                           \
		struct tdm__dag *d = dag_hold((h), &rc_);                                          \
		if (d == NULL)                                                                     \
			return rc_;                                                                \
		rc_ = (call);                                                                      \
		dag_leave(d, (h));                                                                 \
		return rc_;                                                                        \
	} while (0)

int tdm_dag_kernel(tdm_dag *h, tdm_dag_fn fn, void *arg, const int *deps, unsigned ndeps)
{
	if (fn == NULL)
		return dag_check(h);
	DAG_CALL(
	    h, add_node(d, (struct dnode){.kind = NODE_KERNEL, .fn = fn, .arg = arg}, deps, ndeps));
}

int tdm_dag_copy(tdm_dag *h, void *dst, const void *src, size_t bytes, tdm_copy_kind kind,
                 const int *deps, unsigned ndeps)
{
	if (dst == NULL || src == NULL || kind < TDM_COPY_H2D || kind > TDM_COPY_D2D)
		return dag_check(h);
	DAG_CALL(
	    h,
	    add_node(d,
	             (struct dnode){
	                 .kind = NODE_COPY, .dst = dst, .src = src, .bytes = bytes, .ckind = kind},
	             deps, ndeps));
}

int tdm_dag_memset(tdm_dag *h, void *dst, int value, size_t bytes, const int *deps, unsigned ndeps)
{
	if (dst == NULL)
		return dag_check(h);
	DAG_CALL(h, add_node(d,
	                     (struct dnode){
	                         .kind = NODE_MEMSET, .dst = dst, .value = value, .bytes = bytes},
	                     deps, ndeps));
}

static struct dnode *node_of(struct tdm__dag *d, int node, int kind)
{
	if (node < 0 || (unsigned)node >= d->n || d->node[node].kind != kind)
		return NULL;
	return &d->node[node];
}

static int set_kernel_arg(struct tdm__dag *d, int node, void *arg)
{
	struct dnode *nd = node_of(d, node, NODE_KERNEL);
	if (nd == NULL)
		return -EINVAL;
	if (nd->arg != arg) {
		nd->arg = arg;
		d->dirty = true;
	}
	return 0;
}

static int set_copy(struct tdm__dag *d, int node, void *dst, const void *src, size_t bytes)
{
	struct dnode *nd = node_of(d, node, NODE_COPY);
	if (nd == NULL || dst == NULL || src == NULL)
		return -EINVAL;
	if (nd->dst != dst || nd->src != src || nd->bytes != bytes) {
		nd->dst = dst;
		nd->src = src;
		nd->bytes = bytes;
		d->dirty = true;
	}
	return 0;
}

static int set_memset(struct tdm__dag *d, int node, void *dst, int value, size_t bytes)
{
	struct dnode *nd = node_of(d, node, NODE_MEMSET);
	if (nd == NULL || dst == NULL)
		return -EINVAL;
	if (nd->dst != dst || nd->value != value || nd->bytes != bytes) {
		nd->dst = dst;
		nd->value = value;
		nd->bytes = bytes;
		d->dirty = true;
	}
	return 0;
}

static int stats_get(const struct tdm__dag *d, tdm_dag_stats *out)
{
	if (out == NULL)
		return -EINVAL;
	*out = d->st;
	out->nodes = d->n;
	out->width = d->planned ? d->lanes : 0;
	return 0;
}

int tdm_dag_set_kernel_arg(tdm_dag *h, int node, void *arg)
{
	DAG_CALL(h, set_kernel_arg(d, node, arg));
}

int tdm_dag_set_copy(tdm_dag *h, int node, void *dst, const void *src, size_t bytes)
{
	DAG_CALL(h, set_copy(d, node, dst, src, bytes));
}

int tdm_dag_set_memset(tdm_dag *h, int node, void *dst, int value, size_t bytes)
{
	DAG_CALL(h, set_memset(d, node, dst, value, bytes));
}

int tdm_dag_stats_get(const tdm_dag *h, tdm_dag_stats *out)
{
	DAG_CALL(h, stats_get(d, out));
}

/* ---- plans ------------------------------------------------------------------------------- */

/* Whether node a is an ancestor of node i (a < i): a search up i's dependencies that never goes
 * below a (ids only fall along them). mark/stack: scratch of n entries; mark holds stamps. */
static bool ancestor(const struct tdm__dag *d, unsigned a, unsigned i, unsigned *mark,
                     unsigned stamp, unsigned *stack)
{
	unsigned top = 0;
	stack[top++] = i;
	while (top > 0) {
		const struct dnode *nd = &d->node[stack[--top]];
		for (unsigned k = 0; k < nd->ndeps; k++) {
			unsigned p = d->deps[nd->dep0 + k];
			if (p == a)
				return true;
			if (p < a)
				break; /* highest first: the rest are below a too */
			if (mark[p] == stamp)
				continue;
			mark[p] = stamp;
			stack[top++] = p; /* each node once per search: top stays below n */
		}
	}
	return false;
}

/* The structure plan: every node's lane (the top of this file). -ENOMEM. */
static int plan_lanes(struct tdm__dag *d)
{
	unsigned n = d->n;
	unsigned *last = malloc((size_t)n * sizeof(*last));
	unsigned *mark = calloc(n, sizeof(*mark));
	unsigned *stack = malloc((size_t)n * sizeof(*stack));
	if (last == NULL || mark == NULL || stack == NULL) {
		free(last);
		free(mark);
		free(stack);
		return -ENOMEM;
	}
	unsigned lanes = 0, stamp = 0;
	for (unsigned i = 0; i < n; i++) {
		struct dnode *nd = &d->node[i];
		unsigned lane = NONE;
		for (unsigned k = 0; k < nd->ndeps && lane == NONE; k++) {
			unsigned p = d->deps[nd->dep0 + k];
			if (last[d->node[p].lane] == p)
				lane = d->node[p].lane;
		}
		for (unsigned l = 0; l < lanes && lane == NONE && nd->ndeps > 0; l++)
			if (ancestor(d, last[l], i, mark, ++stamp, stack))
				lane = l;
		if (lane == NONE)
			lane = lanes++;
		nd->lane = lane;
		last[lane] = i;
	}
	free(last);
	free(mark);
	free(stack);
	d->lanes = lanes;
	d->planned = true;
	d->plan_k = 0;
	return 0;
}

/* The run plan for k streams (the top of this file). -ENOMEM. */
static int plan_run(struct tdm__dag *d, unsigned k)
{
	unsigned n = d->n;
	/* clock[j * k + q]: the latest node of stream q that stream j is ordered after (NONE:
	 * none); snap[i * k + q]: node i's stream's clock right after i. */
	unsigned *clock = malloc((size_t)k * k * sizeof(*clock));
	unsigned *snap = malloc((size_t)n * k * sizeof(*snap));
	unsigned *wstart = realloc(d->wstart, ((size_t)n + 1) * sizeof(*wstart));
	if (wstart != NULL)
		d->wstart = wstart;
	bool *rec = realloc(d->rec, (size_t)n * sizeof(*rec));
	if (rec != NULL)
		d->rec = rec;
	unsigned *joins = realloc(d->joins, (size_t)k * sizeof(*joins));
	if (joins != NULL)
		d->joins = joins;
	if (clock == NULL || snap == NULL || wstart == NULL || rec == NULL || joins == NULL) {
		free(clock);
		free(snap);
		return -ENOMEM;
	}
	for (size_t x = 0; x < (size_t)k * k; x++)
		clock[x] = NONE;
	memset(rec, 0, (size_t)n * sizeof(*rec));
	d->nwaits = 0;
	d->njoins = 0;
	int rc = 0;
	for (unsigned i = 0; i < n && rc == 0; i++) {
		const struct dnode *nd = &d->node[i];
		unsigned j = nd->lane % k;
		unsigned *cj = clock + (size_t)j * k;
		wstart[i] = d->nwaits;
		for (unsigned m = 0; m < nd->ndeps; m++) { /* highest first: later ones covered */
			unsigned p = d->deps[nd->dep0 + m], q = d->node[p].lane % k;
			if (q == j || (cj[q] != NONE && cj[q] >= p))
				continue; /* in j's order already */
			if (d->nwaits == d->capwaits) {
				unsigned cap = d->capwaits != 0 ? 2 * d->capwaits : 16;
				unsigned *w = realloc(d->waits, (size_t)cap * sizeof(*w));
				if (w == NULL) {
					rc = -ENOMEM;
					break;
				}
				d->waits = w;
				d->capwaits = cap;
			}
			d->waits[d->nwaits++] = p;
			rec[p] = true;
			const unsigned *sp = snap + (size_t)p * k;
			for (unsigned x = 0; x < k; x++)
				if (sp[x] != NONE && (cj[x] == NONE || sp[x] > cj[x]))
					cj[x] = sp[x];
		}
		cj[j] = i;
		memcpy(snap + (size_t)i * k, cj, (size_t)k * sizeof(*cj));
	}
	wstart[n] = d->nwaits;
	/* Joins: each other stream's last node, unless s is ordered after it already. */
	for (unsigned q = 1; q < k && rc == 0; q++) {
		unsigned lastq = clock[(size_t)q * k + q];
		if (lastq == NONE || (clock[q] != NONE && clock[q] >= lastq))
			continue;
		d->joins[d->njoins++] = lastq;
		rec[lastq] = true;
		const unsigned *sp = snap + (size_t)lastq * k;
		for (unsigned x = 0; x < k; x++)
			if (sp[x] != NONE && (clock[x] == NONE || sp[x] > clock[x]))
				clock[x] = sp[x];
	}
	free(clock);
	free(snap);
	d->plan_k = rc == 0 ? k : 0;
	return rc;
}

/* The events the plan for k streams records, made on dv where missing. */
static int plan_events(struct tdm__dag *d, struct tdm__gdev *dv, unsigned k)
{
	int rc = 0;
	for (unsigned i = 0; i < d->n && rc == 0; i++)
		if (d->rec[i])
			rc = event_need(dv, &d->ev[i]);
	if (rc == 0 && k > 1)
		rc = event_need(dv, &d->fork);
	for (unsigned j = 1; j < k && rc == 0; j++)
		rc = event_need(dv, &d->jev[j]);
	return rc;
}

/* ---- runs -------------------------------------------------------------------------------- */

/* The priority class of lease s (its stream is in that class's set of its device). */
static unsigned prio_class(const tdm_stream *s)
{
	const struct tdm__gdev *dv = s->dev;
	for (unsigned k = 0; k < dv->nstreams; k++)
		/* Relaxed: an identity compare; s's stream was published to this thread by its
		 * lease already. */
		if (atomic_load_explicit(&dv->streams[1][k], memory_order_relaxed) == s->st)
			return 1;
	return 0;
}

/* Up to `want` more exclusive leases of s's device into x, while the device keeps a stream
 * of s's class open to shared leases: how many were had. */
static unsigned lease_more(struct tdm__dag *d, tdm_stream *s, unsigned want, tdm_stream **x)
{
	struct tdm__gdev *dv = s->dev;
	unsigned c = prio_class(s);
	unsigned flags = TDM_STREAM_EXCLUSIVE | (c != 0 ? TDM_STREAM_HIGH_PRIORITY : 0);
	unsigned n = 0;
	while (n < want && tdm__streams_open(dv, (int)c) > 1) {
		if (tdm_stream_lease(d->gpu->self, dv->index, flags, &x[n]) != 0)
			break;
		/* A snapshot before: another holder may have taken the last open one since. */
		if (tdm__streams_open(dv, (int)c) == 0) {
			(void)tdm_stream_release(x[n]);
			break;
		}
		n++;
	}
	return n;
}

static void release_more(tdm_stream **x, unsigned n)
{
	for (unsigned j = 0; j < n; j++)
		(void)tdm_stream_release(x[j]); /* their work stays queued */
}

static int enqueue_node(const struct dnode *nd, tdm_stream *s)
{
	switch (nd->kind) {
	case NODE_KERNEL: {
		int rc = nd->fn(s, nd->arg);
		return rc < 0 ? rc : 0;
	}
	case NODE_COPY:
		return tdm_memcpy_async(s, nd->dst, nd->src, nd->bytes, nd->ckind);
	default:
		return tdm_memset_async(s, nd->dst, nd->value, nd->bytes);
	}
}

/* Enqueues the DAG on st[0..k) by the plan for k: 0, or the first error (the rest not
 * enqueued). */
static int lower(struct tdm__dag *d, tdm_stream **st, unsigned k)
{
	int rc = 0;
	if (k > 1) {
		rc = tdm__event_record(d->fork, st[0]);
		for (unsigned j = 1; j < k && rc == 0; j++)
			rc = tdm__stream_wait_event(st[j], d->fork);
	}
	for (unsigned i = 0; i < d->n && rc == 0; i++) {
		const struct dnode *nd = &d->node[i];
		tdm_stream *x = st[nd->lane % k];
		for (unsigned w = d->wstart[i]; w < d->wstart[i + 1] && rc == 0; w++)
			rc = tdm__stream_wait_event(x, d->ev[d->waits[w]]);
		if (rc == 0)
			rc = enqueue_node(nd, x);
		if (rc == 0 && d->rec[i])
			rc = tdm__event_record(d->ev[i], x);
	}
	for (unsigned m = 0; m < d->njoins && rc == 0; m++)
		rc = tdm__stream_wait_event(st[0], d->ev[d->joins[m]]);
	return rc;
}

/* After a failed lowering: the other streams' work joined into s, as far as that goes, so that
 * an await of s covers what was enqueued. */
static void join_back(struct tdm__dag *d, tdm_stream **st, unsigned k)
{
	for (unsigned j = 1; j < k; j++)
		if (tdm__event_record(d->jev[j], st[j]) == 0)
			(void)tdm__stream_wait_event(st[0], d->jev[j]);
}

/* Streams for a run into st (st[0] = s), plans and events for them: k, the stream count. A
 * shortage of anything falls back to fewer streams; only -ENOMEM with s alone fails. */
static int prepare(struct tdm__dag *d, tdm_stream *s, tdm_stream **st, unsigned *k)
{
	unsigned want = d->lanes < TDM_DAG_MAX_STREAMS ? d->lanes : TDM_DAG_MAX_STREAMS;
	st[0] = s;
	unsigned n = want > 1 && d->gpu->ops->stream_wait_event != NULL
	                 ? 1 + lease_more(d, s, want - 1, st + 1)
	                 : 1;
	for (;;) {
		int rc = d->plan_k == n ? 0 : plan_run(d, n);
		if (rc == 0)
			rc = plan_events(d, s->dev, n);
		if (rc == 0) {
			*k = n;
			return 0;
		}
		release_more(st + 1, n - 1);
		if (n == 1)
			return rc;
		n = 1;
	}
}

/* A lowered run: TDM_GRAPH_DIRECT, or a negative errno (what was enqueued joined into s). */
static int run_lowered(struct tdm__dag *d, tdm_stream *s)
{
	tdm_stream *st[TDM_DAG_MAX_STREAMS];
	unsigned k;
	int rc = prepare(d, s, st, &k);
	if (rc != 0)
		return rc;
	d->st.streams = k;
	rc = lower(d, st, k);
	if (rc != 0)
		join_back(d, st, k);
	release_more(st + 1, k - 1);
	return rc != 0 ? rc : TDM_GRAPH_DIRECT;
}

/* A captured run: what capture_end said (TDM_GRAPH_INSTANTIATED or _UPDATED) once g is launched;
 * 0: the capture failed, nothing ran, lower instead; or a negative errno. */
static int run_captured(struct tdm__dag *d, tdm_stream *s)
{
	tdm_stream *st[TDM_DAG_MAX_STREAMS];
	unsigned k;
	int rc = prepare(d, s, st, &k);
	if (rc != 0)
		return rc;
	rc = tdm_graph_capture_begin(s);
	if (rc != 0) {
		release_more(st + 1, k - 1);
		return rc == -EIO ? rc : 0;
	}
	int lrc = lower(d, st, k);
	if (lrc != 0)
		(void)tdm__capture_refuse(s); /* abandoned: the end discards it */
	tdm_graph *g = d->g;
	rc = tdm_graph_capture_end(s, &g);
	release_more(st + 1, k - 1); /* joined streams are free again only now */
	/* Refused, or the driver could not instantiate or update it (-EIO, -ENOMEM on a device
	 * that still works): lower instead, as for a refused capture. */
	if (rc == -ECANCELED ||
	    (rc < 0 && !atomic_load_explicit(&s->dev->failed, memory_order_relaxed)))
		return 0;
	if (rc < 0)
		return rc;
	d->g = g;
	d->captured = true;
	d->dirty = false;
	d->st.streams = k;
	int lr = tdm_graph_launch(s, g);
	return lr < 0 ? lr : rc;
}

/* Enqueues a run of d on s: how it ran (TDM_GRAPH_*), or a negative errno. */
static int enqueue_run(struct tdm__dag *d, tdm_stream *s)
{
	if (d->ev_dev >= 0 && d->ev_dev != s->dev->index) {
		/* Another device: its events and graph are of no use there. */
		events_free(d);
		if (d->g != NULL)
			(void)tdm_graph_destroy(d->g);
		d->g = NULL;
		restructure(d);
	}
	d->ev_dev = s->dev->index;
	if (!d->planned) {
		int rc = plan_lanes(d);
		if (rc != 0)
			return rc;
	}
	if (d->captured && !d->dirty) {
		int rc = tdm_graph_launch(s, d->g);
		return rc < 0 ? rc : TDM_GRAPH_REPLAYED;
	}
	bool tried = false;
	if (d->gpu->ops->capture_begin != NULL && !d->nocapture &&
	    (d->captured || d->same_runs >= (unsigned)d->capture_after)) {
		int rc = run_captured(d, s);
		if (rc != 0)
			return rc;
		tried = true;
	}
	int rc = run_lowered(d, s);
	if (rc > 0) {
		d->same_runs++;
		if (tried) {
			d->nocapture = true; /* its capture failed where the lowering did not */
			d->captured = false;
		}
	}
	return rc;
}

static int fail_now(struct tdm__task *t, int rc)
{
	return t != NULL ? tdm__task_fail(t, rc) : rc;
}

int tdm_dag_run(tdm_task *pub, tdm_stream *s, tdm_dag *h)
{
	struct tdm__task *t = tdm__task_cast(pub);
	if (t == NULL || s == NULL || !tdm__lease_held(s) || !s->exclusive)
		return fail_now(t, -EINVAL);
	/* Held for the run: the acquire of dag_hold pairs with the release of the call before
	 * this one, on whatever thread, so its changes to d happen before this run reads them. */
	int rc;
	struct tdm__dag *d = dag_hold(h, &rc);
	if (d == NULL)
		return fail_now(t, rc);
	if (s->dev->gpu != d->gpu || tdm__task_executor(t) != d->gpu->ex) {
		dag_leave(d, h);
		return fail_now(t, -EINVAL);
	}
	if (s->cap != NULL) {
		dag_leave(d, h);
		return fail_now(t, tdm__capture_refuse(s));
	}
	if (d->n == 0) {
		dag_leave(d, h);
		return tdm_await_stream(pub, s);
	}
	int how = enqueue_run(d, s);
	d->st.last = how > 0 ? how : 0;
	if (how > 0) {
		d->st.runs++;
		d->st.lowered += how == TDM_GRAPH_DIRECT;
		d->st.captured += how == TDM_GRAPH_INSTANTIATED;
		d->st.updated += how == TDM_GRAPH_UPDATED;
		d->st.replayed += how == TDM_GRAPH_REPLAYED;
	}
	dag_leave(d, h);
	if (how < 0)
		return fail_now(t, how);
	return tdm_await_stream(pub, s);
}
