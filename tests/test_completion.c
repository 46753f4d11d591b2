// SPDX-License-Identifier: MIT
/*
 * How awaits complete: which mechanism each stream await uses (completion words, events, or
 * adaptive between the two as the stream's awaits turn quick or stall), the poller's look steps
 * around a due completion, and the word awaits a worker watches itself (tdm__task_hold) while it
 * has nothing else to run, never from inside a group wait, never with the switch off. On the
 * simulator. What these cost in time is measured by tandem-bench, not asserted here.
 */
#include "gpu_env.h"

#include <stdlib.h>

#include "gpu_internal.h" /* tdm__look_step */

TDM_TEST_SUITE(completion_sim_words);
TDM_TEST_SUITE(completion_sim_adaptive);
TDM_TEST_SUITE(completion_poller);

/*
 * A stream starts on events; awaits that complete soon after reaching the head switch it to
 * words; one that waits past stall_us switches it back to events, until a quick one again. The
 * long step is a gate (tandem_sim.h), opened only once the poller has seen it stall (its switch
 * back to events counted), so no clock decides whether it counts as long; stall_us is 1 s so
 * that the short ones count as quick however slowly a loaded, sanitized build runs them. The
 * counts are the poller's, taken at intake, so each step's mechanism shows in the counts before
 * the next step.
 */
Test(completion_sim_adaptive, mechanism_follows_how_long_awaits_wait,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	struct env e;
	env_open_adaptive(&e, 1, 1000000);
	cr_assert_eq(tdm_gpu_completion(e.gpu, 0), TDM_COMPLETION_ADAPTIVE);
	tdm_sim_gate gate;
	struct adapt_state a = {.gpu = e.gpu,
	                        .nsteps = 6,
	                        .ns = {1000, 1000, 1000, 0, 1000, 1000},
	                        .gate = &gate,
	                        .gate_step = 3};
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	cr_assert_eq(tdm_spawn(e.ex, adapt_task, &a, &g), 0);
	/* To words (step 1), then back to events: the gated step seen stalled. */
	tdm_gpu_stats st;
	TDM_TEST_WAIT_UNTIL(tdm_gpu_stats_get(e.gpu, &st) == 0 && st.switches >= 2);
	cr_assert_eq(tdm_sim_gate_open(&gate), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	ASSERT_SEEN(&a.sn);
	cr_assert_eq(a.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
	/* The mechanism of step k: what changed between before[k] and before[k+1] (or last). */
	char got[8] = {0};
	for (int k = 0; k < a.nsteps; k++) {
		const tdm_gpu_stats *x = &a.before[k],
		                    *y = k + 1 < a.nsteps ? &a.before[k + 1] : &a.last;
		cr_assert_eq((y->awaits_word - x->awaits_word) +
		                 (y->awaits_event - x->awaits_event),
		             1, "one await per step");
		got[k] = y->awaits_word > x->awaits_word ? 'w' : 'e';
	}
	/* fresh stream: event; quick: words, the long one included (its stall is seen only
	 * later); after the long one: event; then quick again: word. */
	cr_assert_str_eq(got, "ewwwew");
	cr_assert_eq(a.last.switches, 3, "to words, to events, to words");
	tdm_stream_release(a.s);
	env_close(&e);
}

/*
 * Awaits of equal length, one after another on one stream: from the second on, the poller knows
 * when the next is due and spins through it (tdm_gpu_stats.due_spins), waking the parked worker
 * first (prewakes) where the wait is longer than a worker spins. Whether a given completion lands
 * inside its due window depends on how punctual the machine is, so the counts are reported by
 * tandem-bench (gpu-throughput and pipeline, --json), not asserted here: every await resumes with
 * its work's result, each is counted once, and a prewake is only ever a due spin's.
 */
static void evenly_spaced_awaits_all_resume(tdm_completion completion)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, completion, 1));
	struct adapt_state a = {.gpu = e.gpu, .nsteps = 16};
	for (int k = 0; k < a.nsteps; k++)
		a.ns[k] = 20000000u; /* longer than a worker spins before it parks */
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
	cr_assert_eq(run_one(&e, adapt_task, &a), 0);
	ASSERT_SEEN(&a.sn);
	cr_assert_eq(a.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
	cr_assert_eq(a.last.awaits_word + a.last.awaits_event, 16,
	             "awaits: %llu words, %llu events", (unsigned long long)a.last.awaits_word,
	             (unsigned long long)a.last.awaits_event);
	cr_assert_leq(a.last.prewakes, a.last.due_spins, "prewakes: %llu of %llu due spins",
	              (unsigned long long)a.last.prewakes, (unsigned long long)a.last.due_spins);
	tdm_stream_release(a.s);
	env_close(&e);
}

/*
 * When the poller looks again at a stalled stream whose oldest await is on an event. Far from
 * the time the await is due, after 1/32 of its wait (at most 1 ms); inside the due window, on
 * every sweep; near the window, after a quarter of the distance to the due time, so that a
 * completion a little earlier or later than expected is seen soon; never later than the stalled
 * streams' share of looks allows.
 */
Test(completion_poller, look_step_tightens_near_the_due_time)
{
	const uint64_t us = 1000, ms = 1000000;
	const uint64_t typ = 16 * ms, lead = 10 * us, late = 250 * us, due = typ;
	const unsigned many = 1000; /* stalled streams: a share (20 ms) that limits nothing */
	/* Nothing known: the relative rule, capped at 1 ms. */
	cr_assert_eq(tdm__look_step(3200 * us, 0, 0, lead, late, many), 100 * us);
	cr_assert_eq(tdm__look_step(100 * ms, 0, 0, lead, late, many), 1 * ms);
	/* Far from due: still the relative rule (1/32 of 2 ms). */
	cr_assert_eq(tdm__look_step(2 * ms, 0, typ, lead, late, many), 2 * ms / 32);
	/* Inside the window, from lead before to late after: every sweep. */
	cr_assert_eq(tdm__look_step(due - lead, 0, typ, lead, late, many), 0);
	cr_assert_eq(tdm__look_step(due, 0, typ, lead, late, many), 0);
	cr_assert_eq(tdm__look_step(due + late, 0, typ, lead, late, many), 0);
	/* 400 us before due: a quarter of that (the relative rule alone would say 487 us). */
	cr_assert_eq(tdm__look_step(due - 400 * us, 0, typ, lead, late, many), 100 * us);
	/* Never past the start of the window (a lead of 100 us: it starts in 20 us, a quarter of
	 * the distance would be 30 us). */
	cr_assert_eq(tdm__look_step(due - 120 * us, 0, typ, 100 * us, late, many), 20 * us);
	/* Past the window: a quarter of how far past (the relative rule would say 512 us). */
	cr_assert_eq(tdm__look_step(due + 400 * us, 0, typ, lead, late, many), 100 * us);
	/* Right beside the window with no lead: at least 2 us between looks. */
	cr_assert_eq(tdm__look_step(due - 4 * us, 0, typ, 0, late, many), 2 * us);
	/* The times are absolute: the same answers for a wait that began later. */
	cr_assert_eq(tdm__look_step(5 * ms + due - 400 * us, 5 * ms, typ, lead, late, many),
	             100 * us);
	/* The share: with 1 (or no count yet) stalled stream, within a back-off step (20 us) of
	 * any look, however far from due; with 8, within 8 steps. */
	cr_assert_eq(tdm__look_step(100 * ms, 0, 0, lead, late, 1), 20 * us);
	cr_assert_eq(tdm__look_step(100 * ms, 0, 0, lead, late, 0), 20 * us);
	cr_assert_eq(tdm__look_step(due - 4 * ms, 0, typ, lead, late, 1), 20 * us);
	cr_assert_eq(tdm__look_step(due + 4 * ms, 0, typ, lead, late, 8), 160 * us);
	/* A step already shorter than the share stays. */
	cr_assert_eq(tdm__look_step(due - 40 * us, 0, typ, lead, late, 8), 10 * us);
	cr_assert_eq(tdm__look_step(due, 0, typ, lead, late, 1), 0);
}

/* ---- word awaits that a worker watches itself (tdm__task_hold) ---- */

/* 16 short awaits, one after another, by the only task of one worker, with the worker watch
 * switch (tdm_gpu_debug) as given (NULL: the default); their stats. */
static tdm_gpu_stats short_awaits_alone(const char *watch)
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 1));
	cr_assert_eq(tdm_gpu_debug(e.gpu, NULL, watch), 0); /* NULL: the default */
	struct adapt_state a = {.gpu = e.gpu, .nsteps = 16};
	for (int k = 0; k < a.nsteps; k++)
		a.ns[k] = 1000;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
	cr_assert_eq(run_one(&e, adapt_task, &a), 0);
	ASSERT_SEEN(&a.sn);
	cr_assert_eq(a.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
	tdm_stream_release(a.s);
	env_close(&e);
	cr_assert_eq(a.last.awaits_word, 16, "every await counted once");
	return a.last;
}

/*
 * The worker has nothing else to run and watches each word itself (tdm__task_hold): an await it
 * saw complete counts as direct, one it handed over after its 100 us spin goes to the poller.
 * Which of the two a given await takes depends on how soon the simulator's thread runs, so only
 * what holds either way is asserted: each await resumes once with its result and is counted
 * once, direct ones among the words (tandem-bench's --json reports how many are direct).
 */
Test(completion_sim_words, an_idle_workers_own_word_awaits_resume_once_each,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_gpu_stats st = short_awaits_alone(NULL);
	cr_assert_leq(st.direct, st.awaits_word, "direct: %llu of %llu",
	              (unsigned long long)st.direct, (unsigned long long)st.awaits_word);
	cr_assert_eq(st.awaits_event, 0);
}

/* The diagnostic switch: every await goes to the poller. */
Test(completion_sim_words, worker_watch_switch_off_sends_every_await_to_the_poller,
     .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_gpu_stats st = short_awaits_alone("0");
	cr_assert_eq(st.direct, 0);
}

struct nested_state {
	tdm_gpu *gpu;
	tdm_stream *s;
	tdm_executor *ex;
	int rc;
	struct seen sn; /* the child's calls, then the parent's */
};

static int nested_child(tdm_task *t, void *arg)
{
	struct nested_state *n = arg;
	TDM_BEGIN(t);
	SEE(&n->sn, tdm_launch_spin(n->s, 1000));
	TDM_AWAIT(t, tdm_await_stream(t, n->s));
	n->rc = tdm_task_result(t);
	TDM_END(t);
}

/* A plain task that waits for a group from inside the worker: the child's await runs in the
 * wait's loop, which watches no held await. */
static void nested_parent(void *arg)
{
	struct nested_state *n = arg;
	tdm_group g;
	SEE(&n->sn, tdm_group_init(&g, n->ex));
	if (n->sn.rc != 0)
		return;
	SEE(&n->sn, tdm_spawn(n->ex, nested_child, n, &g));
	/* The child's writes are ordered before the wait's return; the parent's after it. */
	SEE(&n->sn, tdm_group_wait(&g));
}

/* The child's word await must go to the poller: held by the worker, whose loop is busy in the
 * group wait, it would never complete. */
Test(completion_sim_words, await_inside_a_group_wait_is_not_held, .timeout = TDM_TEST_TIMEOUT(30))
{
	struct env e;
	cr_assert(env_open(&e, TDM_BACKEND_SIM, TDM_COMPLETION_WORD, 1));
	struct nested_state n = {.gpu = e.gpu, .ex = e.ex, .rc = -1};
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &n.s), 0);
	tdm_group g;
	cr_assert_eq(tdm_group_init(&g, e.ex), 0);
	cr_assert_eq(tdm_group_spawn(&g, nested_parent, &n), 0);
	cr_assert_eq(tdm_group_wait(&g), 0);
	ASSERT_SEEN(&n.sn);
	cr_assert_eq(n.rc, 0);
	tdm_gpu_stats st;
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &st), 0);
	cr_assert_eq(st.direct, 0);
	tdm_stream_release(n.s);
	env_close(&e);
}

Test(completion_sim_words, evenly_spaced_awaits_all_resume, .timeout = TDM_TEST_TIMEOUT(60))
{
	evenly_spaced_awaits_all_resume(TDM_COMPLETION_WORD);
}

/* Adaptive: 20 ms awaits wait on events, which the poller asks while they are due. */
Test(completion_sim_adaptive, evenly_spaced_awaits_all_resume, .timeout = TDM_TEST_TIMEOUT(60))
{
	evenly_spaced_awaits_all_resume(TDM_COMPLETION_ADAPTIVE);
}

Test(completion_sim_words, forced_mechanisms_never_mix, .timeout = TDM_TEST_TIMEOUT(60))
{
	for (int m = 0; m < 2; m++) {
		struct env e;
		cr_assert(env_open(&e, TDM_BACKEND_SIM,
		                   m == 0 ? TDM_COMPLETION_WORD : TDM_COMPLETION_EVENT, 1));
		struct adapt_state a = {.gpu = e.gpu, .nsteps = 3, .ns = {1000, 1000, 1000}};
		cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &a.s), 0);
		cr_assert_eq(run_one(&e, adapt_task, &a), 0);
		ASSERT_SEEN(&a.sn);
		cr_assert_eq(tdm_gpu_stats_get(e.gpu, &a.last), 0);
		cr_assert_eq(m == 0 ? a.last.awaits_word : a.last.awaits_event, 3);
		cr_assert_eq(m == 0 ? a.last.awaits_event : a.last.awaits_word, 0);
		cr_assert_eq(a.last.switches, 0);
		/* Events are asked at least once each; words never are. */
		if (m == 0)
			cr_assert_eq(a.last.event_polls, 0);
		else
			cr_assert_geq(a.last.event_polls, 3);
		tdm_stream_release(a.s);
		env_close(&e);
	}
}
