// SPDX-License-Identifier: MIT
/*
 * The sim backend's graphs (backend.h, "graphs"): stream capture, source and executable graphs,
 * their update in place, and their replays, with CUDA's observable semantics (ordering, errors).
 *
 * Capture. capture_begin makes its stream the root of a capture; from then on what is enqueued on
 * it (kernels, copies, completion words, host functions) is appended to the capture's node list
 * instead of being queued (tdm__sim_submit asks tdm__sim_capture_op first). An event recorded on
 * a capturing stream becomes a capture point (a SIM_MARK node; the event's own records are left
 * alone), and a stream that waits on it joins the capture (a SIM_WAIT node, with an edge to the
 * mark): its later work is appended too. Every node remembers the stream it came from, the node
 * before it on that stream and, for a wait, the mark it waits for: the dependency structure,
 * which capture_end checks (every stream's last node must be an ancestor of the root's last
 * one: joined back, or the capture is cancelled, as cudaErrorStreamCaptureUnjoined) and
 * graph_update compares. Any dependency goes from an earlier node to a later one, so running the
 * nodes one by one in capture order is a valid schedule of the graph: that is how it is replayed.
 *
 * What a capture refuses, as CUDA does, invalidates it (capture_end then says -ECANCELED): a
 * query of a capturing stream or of an event recorded in the capture, stream-ordered allocation
 * and free, prefetch, a graph launch, and a wait across the capture's boundary (on an event last
 * recorded outside it, or in another capture: cudaErrorStreamCaptureIsolation and ...Merge).
 * Those calls say -EBUSY, as does every later enqueue on a stream of an invalidated capture; the
 * streams capture (and refuse) until the root's capture_end, which only the thread that began
 * the capture may call: elsewhere it is -EINVAL and the capture goes on, as with
 * cudaErrorStreamCaptureWrongThread. A capture takes no armed fault: the fault stays armed for
 * the next work that runs on the stream. A capture whose root stream is destroyed ends there.
 *
 * Nodes hold copies of their parameters (pointers, sizes, lengths, factors, words and values,
 * host functions and their arguments); the copies' device ranges were checked at capture as at
 * any enqueue, and are checked again whenever a replay runs them, as any copy's are.
 *
 * Replay. A source graph is an immutable node list; an executable graph (struct sim_exec) holds
 * a refcounted node list of its own, its parameters, which graph_update swaps for a new one
 * (same topology: same nodes, kinds, streams and edges, in the same order) while replays in
 * flight keep the one they were launched with. graph_launch queues one SIM_GRAPH operation on the
 * stream; its replay (struct sim_replay) holds the parameters and the replay launched before it,
 * which it waits for before it runs (replays of one graph never overlap, on any streams). The
 * executable graph holds only its latest replay, each replay its predecessor until it ran: freeing
 * the graph never waits, and what replays still need goes with the last of them. A replay runs its
 * nodes through tdm__sim_execute, as the queue would run them: a trap kills the device, a dead
 * device runs nothing, an armed fault taken at launch goes to the first work node; marks and waits
 * are edges inside the graph, which the serial order satisfies, and do nothing.
 *
 * Locks: b->graph_lock guards every capture and the capture fields of streams and events; an
 * executable graph's lock guards its parameters and latest replay, and is held across the enqueue
 * of a replay (sim.c's lock rules).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "sim_internal.h"

#define NONE SIZE_MAX /* no node */

struct sim_node {
	struct sim_op op; /* kind and parameters; `next` and `fault` unused, mark.ev NULL */
	unsigned stream;  /* the index of the capture's stream it was enqueued on */
	size_t prev;      /* the node before it on that stream, or NONE */
	size_t edge;      /* SIM_WAIT: the SIM_MARK node it waits for; NONE otherwise */
};

/* A node list: a source graph, or an executable graph's parameters. Immutable once made. */
struct sim_nodes {
	atomic_uint refs; /* a source graph: 1; parameters: the exec's, one per replay holding it */
	struct sim_dev *dev;
	bool works; /* a node is work (takes an armed fault) */
	size_t n;
	struct sim_node node[];
};

/* A stream taking part in a capture, and its last node (NONE: none yet). */
struct sim_member {
	struct sim_stream *s; /* NULL once destroyed */
	size_t last;
};

struct sim_capture {
	struct sim_link link; /* first member; b->captures */
	uint64_t id;
	struct sim_dev *dev; /* the root's */
	pthread_t thread;    /* that began it */
	bool invalid;
	struct sim_node *node;
	size_t n, cap;
	struct sim_member *member; /* the streams taking part, the root first */
	unsigned nmember, cap_member;
};

struct sim_replay {
	atomic_uint refs; /* its operation's, and its exec's latest or its successor's */
	/* Release store once its nodes ran (or were skipped on a dead device); acquire load by the
	 * replay after it (wait_replay). */
	atomic_bool done;
	struct sim_replay *prev; /* a reference until this replay starts; then NULL */
	struct sim_nodes *nodes; /* a reference: the parameters at launch */
};

struct sim_exec {
	pthread_mutex_t lock;
	struct sim_dev *dev;
	struct sim_nodes *nodes; /* lock: a reference, the parameters of later launches */
	struct sim_replay *last; /* lock: a reference to the latest replay, or NULL */
};

/* ---- node lists ---- */

static struct sim_nodes *nodes_new(struct sim_dev *dev, const struct sim_node *node, size_t n)
{
	if (n > (SIZE_MAX - sizeof(struct sim_nodes)) / sizeof(struct sim_node))
		return NULL;
	struct sim_nodes *g = malloc(sizeof(*g) + n * sizeof(struct sim_node));
	if (g == NULL)
		return NULL;
	atomic_init(&g->refs, 1);
	g->dev = dev;
	g->n = n;
	g->works = false;
	for (size_t i = 0; i < n; i++) {
		g->node[i] = node[i];
		if (node[i].op.kind < SIM_WRITE)
			g->works = true;
	}
	return g;
}

static void nodes_unref(struct sim_nodes *g)
{
	/* Acq_rel: each holder's release orders its reads of the nodes before the drop; the
	 * acquire of the final drop pairs with those, so the free comes after every read. */
	if (g != NULL && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
		free(g);
}

/* Same nodes of the same kinds, from the same streams, with the same edges, in one order. */
static bool same_topology(const struct sim_nodes *a, const struct sim_nodes *g)
{
	if (a->n != g->n)
		return false;
	for (size_t i = 0; i < a->n; i++) {
		const struct sim_node *x = &a->node[i], *y = &g->node[i];
		if (x->op.kind != y->op.kind || x->stream != y->stream || x->prev != y->prev ||
		    x->edge != y->edge)
			return false;
	}
	return true;
}

/* ---- captures (b->graph_lock held) ---- */

static struct sim_capture *find_capture(struct tdm__backend *b, uint64_t id)
{
	for (struct sim_link *l = b->captures.next; l != &b->captures; l = l->next)
		if (((struct sim_capture *)(void *)l)->id == id)
			return (struct sim_capture *)(void *)l;
	return NULL;
}

/* The event's capture, while it lasts; a point of an ended capture is forgotten. */
static struct sim_capture *event_capture(struct tdm__backend *b, struct sim_event *e)
{
	if (e->capture_id == 0)
		return NULL;
	struct sim_capture *c = find_capture(b, e->capture_id);
	if (c == NULL) {
		e->capture_id = 0;
		/* Relaxed: tdm__sim_capturing's note. */
		atomic_store_explicit(&e->captured, false, memory_order_relaxed);
	}
	return c;
}

/* Appends a node on the capture's stream `idx`: 0, or -ENOMEM, invalidating the capture. */
static int add_node(struct sim_capture *c, unsigned idx, const struct sim_op *op, size_t edge)
{
	if (c->n == c->cap) {
		size_t cap = c->cap != 0 ? 2 * c->cap : 16;
		struct sim_node *p =
		    cap <= SIZE_MAX / sizeof(*p) ? realloc(c->node, cap * sizeof(*p)) : NULL;
		if (p == NULL) {
			c->invalid = true;
			return -ENOMEM;
		}
		c->node = p;
		c->cap = cap;
	}
	struct sim_node *nd = &c->node[c->n];
	nd->op = *op;
	nd->op.next = NULL;
	nd->op.fault = 0;
	nd->stream = idx;
	nd->prev = c->member[idx].last;
	nd->edge = edge;
	c->member[idx].last = c->n++;
	return 0;
}

/* s takes part in c from now on: 0, or -ENOMEM, invalidating c. */
static int add_member(struct sim_capture *c, struct sim_stream *s)
{
	if (c->nmember == c->cap_member) {
		unsigned cap = c->cap_member != 0 ? 2 * c->cap_member : 4;
		struct sim_member *p = realloc(c->member, cap * sizeof(*p));
		if (p == NULL) {
			c->invalid = true;
			return -ENOMEM;
		}
		c->member = p;
		c->cap_member = cap;
	}
	c->member[c->nmember] = (struct sim_member){s, NONE};
	s->capture = c;
	s->capture_index = c->nmember++;
	/* Relaxed: tdm__sim_capturing's note. */
	atomic_store_explicit(&s->capturing, true, memory_order_relaxed);
	return 0;
}

/* No stream takes part in c any more, and c is no capture of b's: it can be freed. */
static void detach(struct sim_capture *c)
{
	for (unsigned i = 0; i < c->nmember; i++) {
		struct sim_stream *s = c->member[i].s;
		if (s == NULL)
			continue;
		s->capture = NULL;
		/* Relaxed: tdm__sim_capturing's note. */
		atomic_store_explicit(&s->capturing, false, memory_order_relaxed);
	}
	list_del(&c->link);
}

static void capture_free(struct sim_capture *c)
{
	free(c->node);
	free(c->member);
	free(c);
}

/* Every stream's last node is the root's last node or one of its ancestors: 1; 0: a stream was
 * not joined back; -ENOMEM. */
static int joined_back(const struct sim_capture *c)
{
	if (c->member[0].last == NONE)
		return c->nmember == 1; /* a stream joins only through a mark: never here */
	bool *seen = calloc(c->n, sizeof(*seen));
	size_t *stack = malloc(c->n * sizeof(*stack));
	if (seen == NULL || stack == NULL) {
		free(seen);
		free(stack);
		return -ENOMEM;
	}
	size_t top = 0;
	stack[top++] = c->member[0].last;
	seen[c->member[0].last] = true;
	while (top > 0) {
		const struct sim_node *nd = &c->node[stack[--top]];
		size_t from[2] = {nd->prev, nd->edge};
		for (int k = 0; k < 2; k++) {
			if (from[k] != NONE && !seen[from[k]]) {
				seen[from[k]] = true;
				stack[top++] = from[k]; /* each node once: top stays below n */
			}
		}
	}
	int rc = 1;
	for (unsigned i = 0; i < c->nmember && rc == 1; i++)
		if (c->member[i].last != NONE && !seen[c->member[i].last])
			rc = 0;
	free(seen);
	free(stack);
	return rc;
}

/* ---- the hooks (sim_internal.h) ---- */

int tdm__sim_capture_op(struct sim_stream *s, const struct sim_op *op)
{
	struct tdm__backend *b = s->b;
	int rc;
	pthread_mutex_lock(&b->graph_lock);
	struct sim_capture *c = s->capture;
	if (c == NULL) {
		rc = 1;
	} else if (c->invalid) {
		rc = -EBUSY;
	} else if (op->kind == SIM_FREE || op->kind == SIM_PREFETCH || op->kind == SIM_GRAPH) {
		c->invalid = true;
		rc = -EBUSY;
	} else {
		rc = add_node(c, s->capture_index, op, NONE);
	}
	pthread_mutex_unlock(&b->graph_lock);
	return rc;
}

int tdm__sim_capture_record(struct tdm__backend *b, struct sim_event *e, struct sim_stream *s)
{
	int rc = 1;
	pthread_mutex_lock(&b->graph_lock);
	struct sim_capture *c = s->capture;
	if (c == NULL) {
		e->capture_id = 0; /* a real record follows: it is the latest */
		/* Relaxed: tdm__sim_capturing's note. */
		atomic_store_explicit(&e->captured, false, memory_order_relaxed);
	} else if (c->invalid) {
		rc = -EBUSY;
	} else {
		size_t at = c->n;
		rc = add_node(c, s->capture_index, &(struct sim_op){.kind = SIM_MARK}, NONE);
		if (rc == 0) {
			e->capture_id = c->id;
			e->capture_node = at;
			/* Relaxed: tdm__sim_capturing's note. */
			atomic_store_explicit(&e->captured, true, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&b->graph_lock);
	return rc;
}

int tdm__sim_capture_wait(struct tdm__backend *b, struct sim_stream *s, struct sim_event *e)
{
	int rc;
	pthread_mutex_lock(&b->graph_lock);
	struct sim_capture *cs = s->capture, *ce = event_capture(b, e);
	if (cs == NULL && ce == NULL) {
		rc = 1; /* an edge between real records */
	} else if (ce == NULL) {
		/* Relaxed: as in sim_stream_wait_event. A never recorded event has nothing to wait
		 * for, in a capture too; a real record is outside the capture: isolation. */
		if (atomic_load_explicit(&e->recorded, memory_order_relaxed) == 0) {
			rc = 0;
		} else {
			cs->invalid = true;
			rc = -EBUSY;
		}
	} else if (cs != NULL && cs != ce) {
		cs->invalid = ce->invalid = true; /* it would merge two captures */
		rc = -EBUSY;
	} else {
		rc = cs == NULL ? add_member(ce, s) : 0; /* a fork: s joins e's capture */
		if (rc == 0 && ce->invalid)
			rc = -EBUSY;
		else if (rc == 0)
			rc = add_node(ce, s->capture_index, &(struct sim_op){.kind = SIM_WAIT},
			              e->capture_node);
	}
	pthread_mutex_unlock(&b->graph_lock);
	return rc;
}

int tdm__sim_capture_event_query(struct tdm__backend *b, struct sim_event *e)
{
	int rc = 1;
	pthread_mutex_lock(&b->graph_lock);
	struct sim_capture *c = event_capture(b, e);
	if (c != NULL) {
		c->invalid = true;
		rc = -EBUSY;
	}
	pthread_mutex_unlock(&b->graph_lock);
	return rc;
}

int tdm__sim_capture_refuse(struct sim_stream *s)
{
	struct tdm__backend *b = s->b;
	int rc = 0;
	pthread_mutex_lock(&b->graph_lock);
	if (s->capture != NULL) {
		s->capture->invalid = true;
		rc = -EBUSY;
	}
	pthread_mutex_unlock(&b->graph_lock);
	return rc;
}

void tdm__sim_capture_leave(struct sim_stream *s)
{
	struct tdm__backend *b = s->b;
	struct sim_capture *gone = NULL;
	pthread_mutex_lock(&b->graph_lock);
	struct sim_capture *c = s->capture;
	if (c != NULL) {
		c->invalid = true;
		if (s->capture_index == 0) {
			detach(c); /* no end can come for it any more */
			gone = c;
		} else {
			c->member[s->capture_index].s = NULL;
			s->capture = NULL;
			/* Relaxed: tdm__sim_capturing's note. */
			atomic_store_explicit(&s->capturing, false, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&b->graph_lock);
	if (gone != NULL)
		capture_free(gone);
}

void tdm__sim_capture_fini(struct tdm__backend *b)
{
	while (b->captures.next != &b->captures) {
		struct sim_capture *c = (struct sim_capture *)(void *)b->captures.next;
		detach(c);
		capture_free(c);
	}
}

/* ---- replays ---- */

static void replay_unref(struct sim_replay *r)
{
	/* Acq_rel: each holder's release orders its use of r (the stream thread's run, which
	 * clears prev) before the drop; the acquire of the final drop pairs with those, so the
	 * free comes after every use. A replay freed before it ran holds its predecessor still. */
	while (r != NULL && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
		struct sim_replay *prev = r->prev;
		nodes_unref(r->nodes);
		free(r);
		r = prev;
	}
}

/* Until the previous replay of the graph ran, or its device died (a dead device runs nothing:
 * there is nothing left to order after). */
static void wait_replay(const struct sim_replay *prev, const struct sim_dev *dev)
{
	for (unsigned spins = 0;; spins++) {
		/* Acquire: pairs with the release store of `done` in tdm__sim_replay_run; the
		 * previous replay's work happens before this one's. */
		if (atomic_load_explicit(&prev->done, memory_order_acquire))
			return;
		if (dev_dead(dev))
			return;
		if (spins < 1000)
			sched_yield();
		else
			tdm__sleep_ns(20000);
	}
}

bool tdm__sim_replay_works(const struct sim_op *o)
{
	return o->u.replay->nodes->works;
}

void tdm__sim_replay_run(struct sim_stream *s, struct sim_op *o)
{
	struct sim_replay *r = o->u.replay;
	if (r->prev != NULL) {
		wait_replay(r->prev, s->dev);
		replay_unref(r->prev);
		r->prev = NULL;
	}
	const struct sim_nodes *g = r->nodes;
	int fault = o->fault;
	for (size_t i = 0; i < g->n; i++) {
		const struct sim_node *nd = &g->node[i];
		/* Edges inside the graph: the serial order holds them already. */
		if (nd->op.kind == SIM_MARK || nd->op.kind == SIM_WAIT)
			continue;
		struct sim_op op = nd->op;
		op.fault = 0;
		if (fault != 0 && op.kind < SIM_WRITE) {
			op.fault = fault;
			fault = 0;
		}
		tdm__sim_execute(s, &op);
	}
	/* Release: pairs with the acquire load in wait_replay, by the replay launched next. */
	atomic_store_explicit(&r->done, true, memory_order_release);
	replay_unref(r);
}

/* ---- the operations ---- */

int tdm__sim_capture_begin(struct tdm__backend *b, void *stream)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL)
		return -EINVAL;
	if (dev_dead(s->dev))
		return -EIO;
	struct sim_capture *c = calloc(1, sizeof(*c));
	struct sim_member *m = malloc(4 * sizeof(*m));
	if (c == NULL || m == NULL) {
		free(c);
		free(m);
		return -ENOMEM;
	}
	c->member = m;
	c->cap_member = 4;
	c->dev = s->dev;
	c->thread = pthread_self();
	pthread_mutex_lock(&b->graph_lock);
	if (s->capture != NULL) {
		pthread_mutex_unlock(&b->graph_lock);
		capture_free(c);
		return -EBUSY; /* capturing, or joined to a capture */
	}
	c->id = b->next_capture++;
	list_add(&b->captures, &c->link);
	(void)add_member(c, s); /* room for it was made above */
	pthread_mutex_unlock(&b->graph_lock);
	return 0;
}

int tdm__sim_capture_end(struct tdm__backend *b, void *stream, void **graph)
{
	struct sim_stream *s = stream;
	if (b == NULL || s == NULL || graph == NULL)
		return -EINVAL;
	*graph = NULL;
	pthread_mutex_lock(&b->graph_lock);
	struct sim_capture *c = s->capture;
	/* Not capturing, joined to another stream's capture, or another thread's: nothing
	 * changes (cudaErrorStreamCaptureWrongThread leaves the capture going). */
	if (c == NULL || s->capture_index != 0 || !pthread_equal(c->thread, pthread_self())) {
		pthread_mutex_unlock(&b->graph_lock);
		return -EINVAL;
	}
	detach(c);
	pthread_mutex_unlock(&b->graph_lock);
	/* The capture is this thread's alone now. */
	int rc = 0;
	if (dev_dead(c->dev))
		rc = -EIO;
	else if (c->invalid)
		rc = -ECANCELED;
	else if ((rc = joined_back(c)) >= 0)
		rc = rc == 1 ? 0 : -ECANCELED;
	if (rc == 0) {
		struct sim_nodes *g = nodes_new(c->dev, c->node, c->n);
		if (g != NULL)
			*graph = g;
		else
			rc = -ENOMEM;
	}
	capture_free(c);
	return rc;
}

int tdm__sim_graph_instantiate(struct tdm__backend *b, void *graph, void **exec)
{
	struct sim_nodes *g = graph;
	if (b == NULL || g == NULL || exec == NULL)
		return -EINVAL;
	*exec = NULL;
	if (dev_dead(g->dev))
		return -EIO;
	struct sim_exec *x = calloc(1, sizeof(*x));
	if (x == NULL)
		return -ENOMEM;
	x->nodes = nodes_new(g->dev, g->node, g->n); /* the caller keeps g */
	if (x->nodes == NULL) {
		free(x);
		return -ENOMEM;
	}
	x->dev = g->dev;
	pthread_mutex_init(&x->lock, NULL);
	*exec = x;
	return 0;
}

int tdm__sim_graph_update(struct tdm__backend *b, void *exec, void *graph)
{
	struct sim_exec *x = exec;
	struct sim_nodes *g = graph;
	if (b == NULL || x == NULL || g == NULL || g->dev != x->dev)
		return -EINVAL;
	if (dev_dead(x->dev))
		return -EIO;
	struct sim_nodes *fresh = nodes_new(g->dev, g->node, g->n);
	if (fresh == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&x->lock);
	struct sim_nodes *old = x->nodes;
	bool same = same_topology(old, fresh);
	if (same)
		x->nodes = fresh; /* later launches; replays in flight keep theirs */
	pthread_mutex_unlock(&x->lock);
	nodes_unref(same ? old : fresh);
	return same ? 0 : -ESTALE;
}

int tdm__sim_graph_launch(struct tdm__backend *b, void *exec, void *stream)
{
	struct sim_exec *x = exec;
	struct sim_stream *s = stream;
	if (b == NULL || x == NULL || s == NULL || s->dev != x->dev)
		return -EINVAL;
	if (dev_dead(s->dev))
		return -EIO;
	struct sim_replay *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	atomic_init(&r->refs, 2); /* the operation's, and the exec's as its latest */
	atomic_init(&r->done, false);
	/* Held across the enqueue (sim.c's lock rules): replays of x queued on one stream are in
	 * the order of x's chain, so none waits for one queued behind it. */
	pthread_mutex_lock(&x->lock);
	r->nodes = x->nodes;
	/* Relaxed: x->lock keeps the exec's reference, so the count cannot reach 0 here. */
	atomic_fetch_add_explicit(&r->nodes->refs, 1, memory_order_relaxed);
	r->prev = x->last; /* the exec's reference goes to r */
	x->last = r;
	int rc = tdm__sim_submit(s, (struct sim_op){.kind = SIM_GRAPH, .u.replay = r});
	if (rc != 0)
		x->last = r->prev; /* and its reference back */
	pthread_mutex_unlock(&x->lock);
	if (rc != 0) {
		nodes_unref(r->nodes);
		free(r);
	}
	return rc;
}

void tdm__sim_graph_free(struct tdm__backend *b, void *graph)
{
	(void)b;
	nodes_unref(graph);
}

void tdm__sim_graph_exec_free(struct tdm__backend *b, void *exec)
{
	struct sim_exec *x = exec;
	(void)b;
	if (x == NULL)
		return;
	pthread_mutex_lock(&x->lock);
	struct sim_nodes *nodes = x->nodes;
	struct sim_replay *last = x->last;
	pthread_mutex_unlock(&x->lock);
	pthread_mutex_destroy(&x->lock);
	free(x);
	/* Replays in flight hold what they need; the last one frees it when it ran. */
	replay_unref(last);
	nodes_unref(nodes);
}
