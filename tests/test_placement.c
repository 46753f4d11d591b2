// SPDX-License-Identifier: MIT
/*
 * Where leases go: a lease for any device skips a failed device and falls over to one with room,
 * by each placement policy (round robin, least loaded, nearest); a worker's shared leases
 * balance over the device's stream set unless its own stream has turned quick. On the simulator
 * with two devices, or one with two streams.
 */
#include "gpu_env.h"

#include <stdlib.h>

TDM_TEST_SUITE(placement);

/* A lease for any device goes to one that has not failed, whatever the policy (least loaded
 * picked the failed device every time: its leases were all released), and -ENODEV once every
 * device failed. */
Test(placement, any_device_skips_a_failed_one, .timeout = TDM_TEST_TIMEOUT(30))
{
	static const int policies[] = {TDM_PLACE_ROUND_ROBIN, TDM_PLACE_LEAST_LOADED,
	                               TDM_PLACE_NEAREST};
	for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
		struct env e;
		open_two(&e, policies[p]);
		kill_device(&e, 0);
		tdm_stream *held[20];
		for (int i = 0; i < 20; i++) {
			cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &held[i]), 0,
			             "policy %d, lease %d", policies[p], i);
			cr_assert_eq(tdm_stream_device(held[i]), 1);
		}
		for (int i = 0; i < 20; i++)
			cr_assert_eq(tdm_stream_release(held[i]), 0);
		kill_device(&e, 1);
		tdm_stream *s;
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), -ENODEV);
		env_close(&e);
	}
}

/* A lease for any device that finds the placement's pick full takes a stream of another device,
 * whatever the policy (it said -EBUSY while the other device had streams free), and says -EBUSY
 * only when every device is full; it leases again once a stream comes back. */
Test(placement, any_device_falls_over_to_a_device_with_room, .timeout = TDM_TEST_TIMEOUT(30))
{
	static const int policies[] = {TDM_PLACE_ROUND_ROBIN, TDM_PLACE_LEAST_LOADED,
	                               TDM_PLACE_NEAREST};
	enum { MAX_HELD = 256 };
	for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
		struct env e;
		open_two(&e, policies[p]);
		tdm_stream *held[MAX_HELD], *s;
		int n0 = 0, n;
		/* Device 0 full: every stream of its set held exclusively. */
		while (tdm_stream_lease(e.gpu, 0, TDM_STREAM_EXCLUSIVE, &s) == 0) {
			cr_assert_lt(n0, MAX_HELD / 2 - 1);
			held[n0++] = s;
		}
		cr_assert_gt(n0, 0);
		/* Shared leases for any device go to device 1 (round robin picks device 0 for one
		 * of every two; least loaded picks it while device 1 holds more leases, as here).
		 */
		tdm_stream *load[MAX_HELD / 2];
		for (int i = 0; i <= n0; i++)
			cr_assert_eq(tdm_stream_lease(e.gpu, 1, 0, &load[i]), 0);
		for (int i = 0; i < 4; i++) {
			cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), 0,
			             "policy %d, shared lease %d", policies[p], i);
			cr_assert_eq(tdm_stream_device(s), 1);
			cr_assert_eq(tdm_stream_release(s), 0);
		}
		for (int i = 0; i <= n0; i++)
			cr_assert_eq(tdm_stream_release(load[i]), 0);
		/* Exclusive ones too, until device 1 is full as well (its set is as large). */
		for (n = n0; n < 2 * n0; n++) {
			cr_assert_eq(
			    tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, TDM_STREAM_EXCLUSIVE, &held[n]),
			    0, "policy %d, exclusive lease %d", policies[p], n - n0);
			cr_assert_eq(tdm_stream_device(held[n]), 1);
		}
		/* Both full: -EBUSY, for an exclusive lease and for a shared one. */
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, TDM_STREAM_EXCLUSIVE, &s),
		             -EBUSY);
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), -EBUSY);
		/* One of device 1's streams back: leases for any device take it again. */
		cr_assert_eq(tdm_stream_release(held[--n]), 0);
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), 0);
			cr_assert_eq(tdm_stream_device(s), 1);
			cr_assert_eq(tdm_stream_release(s), 0);
		}
		while (n > 0)
			cr_assert_eq(tdm_stream_release(held[--n]), 0);
		env_close(&e);
	}
}

Test(placement, round_robin_spreads_leases_over_devices)
{
	struct env e;
	open_two(&e, TDM_PLACE_ROUND_ROBIN);
	tdm_stream *s[4];
	int seen[2] = {0, 0};
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s[i]), 0);
		seen[tdm_stream_device(s[i])]++;
	}
	cr_assert_eq(seen[0], 2);
	cr_assert_eq(seen[1], 2);
	for (int i = 0; i < 4; i++)
		tdm_stream_release(s[i]);
	env_close(&e);
}

Test(placement, least_loaded_picks_the_device_with_fewer_leases)
{
	struct env e;
	open_two(&e, TDM_PLACE_LEAST_LOADED);
	tdm_stream *held[3], *s;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(tdm_stream_lease(e.gpu, 0, 0, &held[i]), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tdm_stream_lease(e.gpu, TDM_DEVICE_ANY, 0, &s), 0);
		cr_assert_eq(tdm_stream_device(s), 1, "device 0 holds more leases");
		tdm_stream_release(s);
	}
	for (int i = 0; i < 3; i++)
		tdm_stream_release(held[i]);
	env_close(&e);
}

/* A worker's shared leases, held at once: its own stream alone without the two choices. */
#define BALANCE_LEASES 10
static tdm_stream *balance_held[BALANCE_LEASES];
static int balance_rc;

static int balance_task(tdm_task *t, void *arg)
{
	tdm_gpu *gpu = arg;
	(void)t;
	for (int i = 0; i < BALANCE_LEASES; i++)
		if ((balance_rc = tdm_stream_lease(gpu, 0, TDM_STREAM_SHARED, &balance_held[i])) !=
		    0)
			return balance_rc;
	return 0;
}

/*
 * Two streams made (by two leases from this thread, which take the set's slots in turn), one
 * of them still leased: a worker's shared leases then go where clearly fewer leases are held,
 * not all to the worker's own stream.
 */
Test(placement, shared_leases_balance_over_the_stream_set)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = 2;
	cr_assert(env_open_cfg(&e, 1, &g));
	tdm_stream *a, *b;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &b), 0);
	const void *sa = tdm_lease_stream(a), *sb = tdm_lease_stream(b);
	cr_assert_neq(sa, sb, "two leases from outside the workers take the two slots in turn");
	cr_assert_eq(tdm_stream_release(b), 0);
	cr_assert_eq(run_one(&e, balance_task, e.gpu), 0);
	cr_assert_eq(balance_rc, 0);
	int on_a = 1, on_b = 0; /* a's own lease counts */
	for (int i = 0; i < BALANCE_LEASES; i++) {
		const void *si = tdm_lease_stream(balance_held[i]);
		cr_assert(si == sa || si == sb);
		on_a += si == sa;
		on_b += si == sb;
	}
	/* A stream is left for one with at least 3 fewer leases (at these counts). */
	cr_assert_leq(abs(on_a - on_b), 3, "leases: %d on one stream, %d on the other", on_a, on_b);
	for (int i = 0; i < BALANCE_LEASES; i++)
		cr_assert_eq(tdm_stream_release(balance_held[i]), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	env_close(&e);
}

Test(placement, bad_placement_is_refused)
{
	tdm_executor *ex;
	tdm_gpu *gpu;
	tdm_gpu_config g;
	cr_assert_eq(tdm_executor_create(&ex, NULL), 0);
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.placement = 9;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), -EINVAL);
	cr_assert_eq(tdm_executor_destroy(ex), 0);
}

/*
 * The same two streams, but the worker's own one has turned quick first (adaptive completion:
 * an await that completed soon after reaching the head): its worker sets the stream's pace, so
 * its shared leases stay on it, however many it holds. Lease balance "always" (tdm_gpu_debug)
 * balances them still, as a stream that is not quick; "never" keeps them, as the default does.
 */
static void quick_stream_leases(const char *balance, int *on_a, int *on_b)
{
	struct env e;
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	g.streams_per_device = 2;
	g.completion = TDM_COMPLETION_ADAPTIVE;
	g.stall_us = 10000000; /* no await here stalls: only 10 s would count, however loaded */
	cr_assert(env_open_cfg(&e, 1, &g));
	cr_assert_eq(tdm_gpu_debug(e.gpu, balance, NULL), 0); /* NULL: the default */
	tdm_stream *a, *b;
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &a), 0);
	cr_assert_eq(tdm_stream_lease(e.gpu, 0, TDM_STREAM_SHARED, &b), 0);
	const void *sa = tdm_lease_stream(a), *sb = tdm_lease_stream(b);
	cr_assert_neq(sa, sb);
	cr_assert_eq(tdm_stream_release(b), 0);
	/* Two short awaits on a, the worker's own stream: the first turns it quick. */
	struct adapt_state q = {.gpu = e.gpu, .s = a, .nsteps = 2, .ns = {1000, 1000}};
	cr_assert_eq(run_one(&e, adapt_task, &q), 0);
	ASSERT_SEEN(&q.sn);
	cr_assert_eq(q.rc, 0);
	cr_assert_eq(tdm_gpu_stats_get(e.gpu, &q.last), 0);
	cr_assert_eq(q.last.switches, 1, "a turned quick");
	cr_assert_eq(run_one(&e, balance_task, e.gpu), 0);
	cr_assert_eq(balance_rc, 0);
	*on_a = 1; /* a's own lease counts */
	*on_b = 0;
	for (int i = 0; i < BALANCE_LEASES; i++) {
		const void *si = tdm_lease_stream(balance_held[i]);
		cr_assert(si == sa || si == sb);
		*on_a += si == sa;
		*on_b += si == sb;
	}
	for (int i = 0; i < BALANCE_LEASES; i++)
		cr_assert_eq(tdm_stream_release(balance_held[i]), 0);
	cr_assert_eq(tdm_stream_release(a), 0);
	env_close(&e);
}

Test(placement, a_quick_stream_keeps_its_workers_shared_leases, .timeout = TDM_TEST_TIMEOUT(60))
{
	int on_a, on_b;
	quick_stream_leases(NULL, &on_a, &on_b);
	cr_assert_eq(on_a, BALANCE_LEASES + 1, "leases: %d on the quick stream, %d on the other",
	             on_a, on_b);
	quick_stream_leases("always", &on_a, &on_b);
	cr_assert_leq(abs(on_a - on_b), 3, "always: %d on the quick stream, %d on the other", on_a,
	              on_b);
	quick_stream_leases("never", &on_a, &on_b);
	cr_assert_eq(on_a, BALANCE_LEASES + 1, "never: %d on the own stream, %d on the other", on_a,
	             on_b);
}
