// SPDX-License-Identifier: MIT
/*
 * tandem_mpi under mpirun (ctest runs it with 2 and with 4 ranks, oversubscribed): tasks await
 * MPI requests without blocking their workers. Every rank runs the same steps, in order:
 *
 *   init       tdm_mpi_create before MPI is initialised, tdm_mpi_init, bad configurations
 *   bad input  each refused await's errno (call and task result), the request left usable
 *   at once    a request complete at the await continues at once; one completed later resumes
 *   many       1000 receives outstanding at once per rank, then 1000 sends, round a ring
 *   errors     a truncated receive (MPI_ERRORS_RETURN): -EIO and MPI_ERR_TRUNCATE kept
 *   cancel     tdm_mpi_destroy with receives nobody will match (and generalized requests that
 *              complete when cancelled, or do not): -ECANCELED, or the request's own result
 *   finalised  after MPI_Finalize: -ESHUTDOWN
 *
 * The order of events is fixed by barriers, never by time: a receive posted before the barrier
 * that its sender waits for cannot complete at its await, so it suspends. Generalized requests
 * (MPI_Grequest_start) give requests that complete exactly when the test says.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"
#include "tandem_mpi.h"

#include "mpi_check.h"

#define MANY 1000 /* receives outstanding at once per rank, and sends */
#define WORDS 4   /* ints per message of the ring */
#define NCANCEL 16

static int rank, size;
static tdm_executor *ex;
static tdm_mpi *m;

/* MPI calls of this thread while a context exists go through the context's lock
 * (MPI_THREAD_SERIALIZED). */
#define LOCKED(call)                                                                               \
	do {                                                                                       \
		tdm_mpi_lock(m);                                                                   \
		call;                                                                              \
		tdm_mpi_unlock(m);                                                                 \
	} while (0)

static tdm_executor *make_executor(void)
{
	tdm_config c;
	tdm_config_init(&c);
	c.workers = 2;
	tdm_executor *e;
	CHECK_EQ(tdm_executor_create(&e, &c), 0);
	return e;
}

static void wait_for(atomic_int *counter, int value)
{
	while (atomic_load(counter) < value)
		sched_yield();
}

/* ---- generalized requests: complete when the test says ---- */

struct greq {
	bool report_cancelled;   /* what the status says once complete */
	bool complete_on_cancel; /* MPI_Cancel completes it (a cancel that works) */
	atomic_int cancel_calls;
	MPI_Request handle;
};

static int greq_query(void *extra, MPI_Status *status)
{
	struct greq *g = extra;
	MPI_Status_set_elements(status, MPI_BYTE, 0);
	MPI_Status_set_cancelled(status, g->report_cancelled);
	status->MPI_SOURCE = MPI_UNDEFINED;
	status->MPI_TAG = MPI_UNDEFINED;
	return MPI_SUCCESS;
}

static int greq_free(void *extra)
{
	(void)extra;
	return MPI_SUCCESS;
}

/* Called inside MPI_Cancel, by tdm_mpi_destroy's thread, under the MPI lock. */
static int greq_cancel(void *extra, int complete)
{
	struct greq *g = extra;
	atomic_fetch_add(&g->cancel_calls, 1);
	if (g->complete_on_cancel && !complete)
		MPI_Grequest_complete(g->handle);
	return MPI_SUCCESS;
}

static void greq_start(struct greq *g)
{
	LOCKED(CHECK_EQ(MPI_Grequest_start(greq_query, greq_free, greq_cancel, g, &g->handle),
	                MPI_SUCCESS));
}

/* ---- a task that awaits one request ---- */

struct one {
	tdm_mpi *m;
	MPI_Request *req;
	MPI_Status status;
	int runs;   /* times the task function ran */
	int rc;     /* what the await call returned */
	int result; /* tdm_task_result after it */
	atomic_int returned;
};

static int one_task(tdm_task *t, void *arg)
{
	struct one *o = arg;
	o->runs++;
	TDM_BEGIN(t);
	o->rc = tdm_await_mpi(t, o->m, o->req, &o->status);
	atomic_store(&o->returned, 1);
	TDM_AWAIT(t, o->rc);
	o->result = tdm_task_result(t);
	TDM_END(t);
}

static void run_one(struct one *o)
{
	tdm_group g;
	CHECK_EQ(tdm_group_init(&g, ex), 0);
	CHECK_EQ(tdm_spawn(ex, one_task, o, &g), 0);
	CHECK_EQ(tdm_group_wait(&g), 0);
}

/* ---- init ---- */

static void test_init(int *argc, char ***argv)
{
	tdm_mpi *never = NULL;
	CHECK_EQ(tdm_mpi_create(ex, NULL, &never), -ENOTCONN);
	CHECK(never == NULL);
	int provided = -1;
	CHECK_EQ(tdm_mpi_init(argc, argv, &provided), 0);
	CHECK(provided >= MPI_THREAD_SERIALIZED);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	check_rank = rank;
	/* Initialised already: used as it is, its level reported. */
	int again = -1;
	CHECK_EQ(tdm_mpi_init(NULL, NULL, &again), 0);
	CHECK_EQ(again, provided);
	CHECK_EQ(tdm_mpi_init(NULL, NULL, NULL), 0);

	tdm_mpi_config c;
	tdm_mpi_config_init(&c);
	CHECK_EQ(tdm_mpi_create(NULL, &c, &never), -EINVAL);
	CHECK_EQ(tdm_mpi_create(ex, &c, NULL), -EINVAL);
	c.sleep_us = 100;
	c.max_sleep_us = 50;
	CHECK_EQ(tdm_mpi_create(ex, &c, &never), -EINVAL);
	tdm_mpi_config_init(&c);
	c.spin_us = 2000000;
	CHECK_EQ(tdm_mpi_create(ex, &c, &never), -EINVAL);
	tdm_mpi_config_init(&c);
	c.cancel_wait_ms = 600001;
	CHECK_EQ(tdm_mpi_create(ex, &c, &never), -EINVAL);
	CHECK(never == NULL);

	tdm_mpi_config_init(&c);
	c.cancel_wait_ms = 300; /* the cancel test's request that never completes */
	CHECK_EQ(tdm_mpi_create(ex, &c, &m), 0);
	CHECK_EQ(tdm_mpi_destroy(NULL), -EINVAL);
	CHECK_EQ(tdm_mpi_lock(NULL), -EINVAL);
	CHECK_EQ(tdm_mpi_unlock(NULL), -EINVAL);
	tdm_mpi_stats st;
	CHECK_EQ(tdm_mpi_stats_get(NULL, &st), -EINVAL);
	CHECK_EQ(tdm_mpi_stats_get(m, NULL), -EINVAL);
	CHECK(strcmp(tdm_mpi_strerror(-ENOTCONN), tdm_strerror(-ENOTCONN)) != 0);
	CHECK(strcmp(tdm_mpi_strerror(-EINVAL), tdm_strerror(-EINVAL)) == 0);
}

/* ---- bad input ---- */

struct bad {
	tdm_mpi *other; /* a context of another executor */
	MPI_Request *live;
	int rc[4], result[4];
};

static int bad_task(tdm_task *t, void *arg)
{
	struct bad *b = arg;
	MPI_Request null = MPI_REQUEST_NULL;
	b->rc[0] = tdm_await_mpi(t, NULL, b->live, NULL);
	b->result[0] = tdm_task_result(t);
	b->rc[1] = tdm_await_mpi(t, m, NULL, NULL);
	b->result[1] = tdm_task_result(t);
	b->rc[2] = tdm_await_mpi(t, m, &null, MPI_STATUS_IGNORE);
	b->result[2] = tdm_task_result(t);
	b->rc[3] = tdm_await_mpi(t, b->other, b->live, NULL);
	b->result[3] = tdm_task_result(t);
	return 0;
}

/* Suspends on a notification and keeps its task pointer, for an await made on its behalf by a
 * thread it is not running on. */
struct parked {
	tdm_notify n;
	tdm_task *t;
	atomic_int suspended;
};

static int parked_task(tdm_task *t, void *arg)
{
	struct parked *p = arg;
	TDM_BEGIN(t);
	p->t = t;
	TDM_AWAIT(t, (atomic_store(&p->suspended, 1), tdm_await_notify(t, &p->n)));
	TDM_END(t);
}

static void test_bad_input(void)
{
	tdm_executor *ex2 = make_executor();
	tdm_mpi *m2;
	CHECK_EQ(tdm_mpi_create(ex2, NULL, &m2), 0); /* two contexts at once: one MPI lock */

	struct greq gr = {0};
	greq_start(&gr);
	MPI_Request live = gr.handle;
	struct bad b = {.other = m2, .live = &live};
	tdm_group g;
	CHECK_EQ(tdm_group_init(&g, ex), 0);
	CHECK_EQ(tdm_spawn(ex, bad_task, &b, &g), 0);
	CHECK_EQ(tdm_group_wait(&g), 0);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(b.rc[i], -EINVAL);
		CHECK_EQ(b.result[i], -EINVAL);
	}
	CHECK(live == gr.handle); /* untouched: still the caller's */

	/* No task, or a task that is not running on this thread. */
	CHECK_EQ(tdm_await_mpi(NULL, m, &live, NULL), -EINVAL);
	struct parked p = {0};
	CHECK_EQ(tdm_notify_init(&p.n, ex), 0);
	CHECK_EQ(tdm_group_init(&g, ex), 0);
	CHECK_EQ(tdm_spawn(ex, parked_task, &p, &g), 0);
	wait_for(&p.suspended, 1);
	CHECK_EQ(tdm_await_mpi(p.t, m, &live, NULL), -EINVAL);
	CHECK_EQ(tdm_notify_fire(&p.n), 0);
	CHECK_EQ(tdm_group_wait(&g), 0);
	CHECK(live == gr.handle);

	/* Helpers: bad arguments. */
	MPI_Request r;
	CHECK_EQ(tdm_mpi_isend(NULL, &r, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &r), -EINVAL);
	CHECK_EQ(tdm_mpi_irecv(m, &r, -1, MPI_INT, 0, 0, MPI_COMM_WORLD, &r), -EINVAL);
	CHECK_EQ(tdm_mpi_irecv(m, &r, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, NULL), -EINVAL);

	/* The runtime goes on: the request refused above is awaited now, complete. */
	LOCKED(MPI_Grequest_complete(gr.handle));
	struct one o = {.m = m, .req = &live};
	run_one(&o);
	CHECK_EQ(o.rc, 0);
	CHECK_EQ(o.result, 0);
	CHECK(live == MPI_REQUEST_NULL);

	CHECK_EQ(tdm_mpi_destroy(m2), 0);
	CHECK_EQ(tdm_executor_destroy(ex2), 0);
}

/* ---- at once, and later ---- */

static void test_at_once(void)
{
	tdm_mpi_stats before, after;
	CHECK_EQ(tdm_mpi_stats_get(m, &before), 0);

	/* Complete before the await: the task goes on in the same run. */
	struct greq done = {0};
	greq_start(&done);
	LOCKED(MPI_Grequest_complete(done.handle));
	MPI_Request req = done.handle;
	struct one o = {.m = m, .req = &req};
	o.status.MPI_ERROR = -1;
	run_one(&o);
	CHECK_EQ(o.rc, 0);
	CHECK_EQ(o.result, 0);
	CHECK_EQ(o.runs, 1); /* never suspended */
	CHECK(req == MPI_REQUEST_NULL);
	CHECK_EQ(o.status.MPI_ERROR, MPI_SUCCESS);
	CHECK_EQ(tdm_mpi_stats_get(m, &after), 0);
	CHECK_EQ(after.immediate, before.immediate + 1);
	CHECK_EQ(after.suspended, before.suspended);

	/* Complete after the await: suspended, resumed by the progress thread. */
	struct greq later = {0};
	greq_start(&later);
	req = later.handle;
	struct one o2 = {.m = m, .req = &req};
	o2.status.MPI_ERROR = -1;
	tdm_group g;
	CHECK_EQ(tdm_group_init(&g, ex), 0);
	CHECK_EQ(tdm_spawn(ex, one_task, &o2, &g), 0);
	wait_for(&o2.returned, 1);
	CHECK_EQ(o2.rc, TDM_SUSPENDED);
	LOCKED(MPI_Grequest_complete(later.handle));
	CHECK_EQ(tdm_group_wait(&g), 0);
	CHECK_EQ(o2.result, 0);
	CHECK_EQ(o2.runs, 2);
	CHECK(req == MPI_REQUEST_NULL);
	CHECK_EQ(o2.status.MPI_ERROR, MPI_SUCCESS);
	CHECK_EQ(tdm_mpi_stats_get(m, &after), 0);
	CHECK_EQ(after.suspended, before.suspended + 1);
	CHECK(after.completed >= before.completed + 1);
}

/* ---- many at once, round a ring ---- */

struct msg {
	MPI_Request req;
	MPI_Status status;
	int buf[WORDS];
	int tag;
	int rc, result;
};

static struct msg recvs[MANY], sends[MANY];
static atomic_int posted;

static int recv_task(tdm_task *t, void *arg)
{
	struct msg *x = arg;
	TDM_BEGIN(t);
	x->rc = tdm_mpi_irecv(m, x->buf, WORDS, MPI_INT, (rank + size - 1) % size, x->tag,
	                      MPI_COMM_WORLD, &x->req);
	if (x->rc != 0)
		return x->rc;
	x->rc = tdm_await_mpi(t, m, &x->req, &x->status);
	atomic_fetch_add(&posted, 1);
	TDM_AWAIT(t, x->rc);
	x->result = tdm_task_result(t);
	TDM_END(t);
}

static int send_task(tdm_task *t, void *arg)
{
	struct msg *x = arg;
	TDM_BEGIN(t);
	for (int k = 0; k < WORDS; k++)
		x->buf[k] = rank * 1000000 + x->tag * 10 + k;
	x->rc = tdm_mpi_isend(m, x->buf, WORDS, MPI_INT, (rank + 1) % size, x->tag, MPI_COMM_WORLD,
	                      &x->req);
	if (x->rc != 0)
		return x->rc;
	TDM_AWAIT(t, x->rc = tdm_await_mpi(t, m, &x->req, &x->status));
	x->result = tdm_task_result(t);
	TDM_END(t);
}

static void test_many(void)
{
	atomic_store(&posted, 0);
	tdm_group gr, gs;
	CHECK_EQ(tdm_group_init(&gr, ex), 0);
	CHECK_EQ(tdm_group_init(&gs, ex), 0);
	for (int i = 0; i < MANY; i++) {
		recvs[i] = (struct msg){.tag = i, .req = MPI_REQUEST_NULL};
		CHECK_EQ(tdm_spawn(ex, recv_task, &recvs[i], &gr), 0);
	}
	/* Every receive awaited before any rank sends: all suspend, and the progress thread holds
	 * them all at once (tested 32 at a time) before the barrier lets the sends go. */
	wait_for(&posted, MANY);
	tdm_mpi_stats st;
	do {
		sched_yield();
		CHECK_EQ(tdm_mpi_stats_get(m, &st), 0);
	} while (st.max_outstanding < MANY);
	LOCKED(MPI_Barrier(MPI_COMM_WORLD));
	for (int i = 0; i < MANY; i++) {
		sends[i] = (struct msg){.tag = i, .req = MPI_REQUEST_NULL};
		CHECK_EQ(tdm_spawn(ex, send_task, &sends[i], &gs), 0);
	}
	CHECK_EQ(tdm_group_wait(&gs), 0);
	CHECK_EQ(tdm_group_wait(&gr), 0);
	int from = (rank + size - 1) % size;
	for (int i = 0; i < MANY; i++) {
		struct msg *r = &recvs[i], *s = &sends[i];
		CHECK_EQ(r->rc, TDM_SUSPENDED);
		CHECK_EQ(r->result, 0);
		CHECK(r->req == MPI_REQUEST_NULL);
		CHECK_EQ(r->status.MPI_SOURCE, from);
		CHECK_EQ(r->status.MPI_TAG, i);
		CHECK_EQ(r->status.MPI_ERROR, MPI_SUCCESS);
		int got = -1;
		LOCKED(MPI_Get_count(&r->status, MPI_INT, &got));
		CHECK_EQ(got, WORDS);
		for (int k = 0; k < WORDS; k++)
			CHECK_EQ(r->buf[k], from * 1000000 + i * 10 + k);
		CHECK(s->rc == 0 || s->rc == TDM_SUSPENDED);
		CHECK_EQ(s->result, 0);
		CHECK(s->req == MPI_REQUEST_NULL);
	}
}

/* ---- errors ---- */

struct trunc {
	MPI_Comm comm;
	MPI_Request req;
	MPI_Status status;
	int buf[100];
	int tag, count;
	bool send;
	int rc, result;
	atomic_int returned;
};

static int trunc_task(tdm_task *t, void *arg)
{
	struct trunc *x = arg;
	int partner = rank ^ 1;
	TDM_BEGIN(t);
	if (x->send)
		x->rc =
		    tdm_mpi_isend(m, x->buf, x->count, MPI_INT, partner, x->tag, x->comm, &x->req);
	else
		x->rc =
		    tdm_mpi_irecv(m, x->buf, x->count, MPI_INT, partner, x->tag, x->comm, &x->req);
	if (x->rc != 0)
		return x->rc;
	x->rc = tdm_await_mpi(t, m, &x->req, &x->status);
	atomic_store(&x->returned, 1);
	TDM_AWAIT(t, x->rc);
	x->result = tdm_task_result(t);
	TDM_END(t);
}

static void test_errors(void)
{
	/* Ranks in pairs (0, 1), (2, 3): the even one sends 100 ints, the odd one takes 10. */
	bool sender = rank % 2 == 0;
	MPI_Comm comm;
	LOCKED(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
	LOCKED(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
	tdm_mpi_stats before, after;
	CHECK_EQ(tdm_mpi_stats_get(m, &before), 0);

	/* Tag 7: the receive is awaited (and suspends) before the send is made. Tag 8: the message
	 * is there before the receive is posted. */
	static struct trunc a, b;
	a = (struct trunc){.comm = comm, .tag = 7, .count = sender ? 100 : 10, .send = sender};
	b = (struct trunc){.comm = comm, .tag = 8, .count = sender ? 100 : 10, .send = sender};
	tdm_group g;
	CHECK_EQ(tdm_group_init(&g, ex), 0);
	if (!sender) {
		CHECK_EQ(tdm_spawn(ex, trunc_task, &a, &g), 0);
		wait_for(&a.returned, 1);
		CHECK_EQ(a.rc, TDM_SUSPENDED);
	} else {
		CHECK_EQ(tdm_spawn(ex, trunc_task, &b, &g), 0);
		wait_for(&b.returned, 1);
	}
	LOCKED(MPI_Barrier(MPI_COMM_WORLD));
	CHECK_EQ(tdm_spawn(ex, trunc_task, sender ? &a : &b, &g), 0);
	CHECK_EQ(tdm_group_wait(&g), 0);
	if (sender) {
		CHECK_EQ(a.result, 0);
		CHECK_EQ(b.result, 0);
	} else {
		for (struct trunc *x = &a; x != NULL; x = x == &a ? &b : NULL) {
			CHECK_EQ(x->result, -EIO);
			CHECK_EQ(x->status.MPI_ERROR, MPI_ERR_TRUNCATE);
			CHECK(x->req == MPI_REQUEST_NULL);
		}
		CHECK_EQ(tdm_mpi_stats_get(m, &after), 0);
		CHECK_EQ(after.failed, before.failed + 2);
	}
	LOCKED(MPI_Comm_free(&comm));
}

/* ---- cancellation at shutdown ---- */

static struct msg pending[NCANCEL];

static int pending_task(tdm_task *t, void *arg)
{
	struct msg *x = arg;
	TDM_BEGIN(t);
	/* Tag 999: nobody sends it. */
	x->rc =
	    tdm_mpi_irecv(m, x->buf, WORDS, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &x->req);
	if (x->rc != 0)
		return x->rc;
	x->rc = tdm_await_mpi(t, m, &x->req, &x->status);
	atomic_fetch_add(&posted, 1);
	TDM_AWAIT(t, x->rc);
	x->result = tdm_task_result(t);
	TDM_END(t);
}

static void test_cancel(void)
{
	atomic_store(&posted, 0);
	tdm_group g;
	CHECK_EQ(tdm_group_init(&g, ex), 0);
	for (int i = 0; i < NCANCEL; i++) {
		pending[i] = (struct msg){.req = MPI_REQUEST_NULL};
		CHECK_EQ(tdm_spawn(ex, pending_task, &pending[i], &g), 0);
	}
	/* Generalized requests: one whose cancel works, one that completes when cancelled rather
	 * than being cancelled, one that never completes (freed once cancel_wait_ms is over). */
	static struct greq works = {.complete_on_cancel = true, .report_cancelled = true};
	static struct greq finishes = {.complete_on_cancel = true, .report_cancelled = false};
	static struct greq stuck = {.complete_on_cancel = false, .report_cancelled = false};
	struct greq *gq[3] = {&works, &finishes, &stuck};
	MPI_Request handles[3];
	static struct one o[3];
	for (int i = 0; i < 3; i++) {
		greq_start(gq[i]);
		handles[i] = gq[i]->handle;
		o[i] = (struct one){.m = m, .req = &handles[i]};
		CHECK_EQ(tdm_spawn(ex, one_task, &o[i], &g), 0);
		wait_for(&o[i].returned, 1);
		CHECK_EQ(o[i].rc, TDM_SUSPENDED);
	}
	wait_for(&posted, NCANCEL);
	CHECK_EQ(tdm_mpi_destroy(m), 0);
	m = NULL;
	/* Every task resumed before the destroy returned. */
	CHECK_EQ(tdm_group_wait(&g), 0);
	for (int i = 0; i < NCANCEL; i++) {
		CHECK_EQ(pending[i].rc, TDM_SUSPENDED);
		CHECK_EQ(pending[i].result, -ECANCELED);
		CHECK(pending[i].req == MPI_REQUEST_NULL);
		int cancelled = 0;
		MPI_Test_cancelled(&pending[i].status, &cancelled); /* no context now: no lock */
		CHECK(cancelled);
	}
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(atomic_load(&gq[i]->cancel_calls), 1);
		CHECK(handles[i] == MPI_REQUEST_NULL);
	}
	CHECK_EQ(o[0].result, -ECANCELED);
	CHECK_EQ(o[1].result, 0); /* completed after all: its own result */
	CHECK_EQ(o[2].result, -ECANCELED);
	int cancelled = 0;
	MPI_Test_cancelled(&o[2].status, &cancelled);
	CHECK(cancelled);
	/* The stuck one was freed: it completes now, and MPI lets it go. */
	MPI_Grequest_complete(stuck.handle);

	/* A new context on the same executor works. */
	CHECK_EQ(tdm_mpi_create(ex, NULL, &m), 0);
	struct greq done = {0};
	greq_start(&done);
	LOCKED(MPI_Grequest_complete(done.handle));
	MPI_Request req = done.handle;
	struct one again = {.m = m, .req = &req};
	run_one(&again);
	CHECK_EQ(again.rc, 0);
	CHECK_EQ(again.result, 0);
}

/* ---- after MPI_Finalize ---- */

static void test_finalised(void)
{
	/* A handle that is not MPI_REQUEST_NULL, kept past its request's free: the await must
	 * refuse it without asking MPI anything. */
	MPI_Request stale;
	struct greq gr = {0};
	greq_start(&gr);
	stale = gr.handle;
	LOCKED(MPI_Grequest_complete(gr.handle); MPI_Request_free(&gr.handle));
	LOCKED(MPI_Barrier(MPI_COMM_WORLD));
	CHECK_EQ(MPI_Finalize(), MPI_SUCCESS); /* m idle: it makes no MPI call */

	CHECK_EQ(tdm_mpi_init(NULL, NULL, NULL), -ESHUTDOWN);
	tdm_mpi *never = NULL;
	CHECK_EQ(tdm_mpi_create(ex, NULL, &never), -ESHUTDOWN);
	MPI_Request r;
	int x = 0;
	CHECK_EQ(tdm_mpi_isend(m, &x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &r), -ESHUTDOWN);
	CHECK_EQ(tdm_mpi_irecv(m, &x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &r), -ESHUTDOWN);
	struct one o = {.m = m, .req = &stale};
	run_one(&o);
	CHECK_EQ(o.rc, -ESHUTDOWN);
	CHECK_EQ(o.result, -ESHUTDOWN);
	CHECK_EQ(tdm_mpi_destroy(m), 0);
	m = NULL;
}

int main(int argc, char **argv)
{
	ex = make_executor();
	test_init(&argc, &argv);
	test_bad_input();
	test_at_once();
	test_many();
	test_errors();
	test_cancel();
	test_finalised();
	CHECK_EQ(tdm_executor_destroy(ex), 0);
	if (rank == 0)
		printf("mpi_await: %d ranks: ok\n", size);
	return 0;
}
