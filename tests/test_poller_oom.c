// SPDX-License-Identifier: MIT
/*
 * The poller when memory runs out: its batch of tasks to wake grows in two arrays (the tasks and
 * their results) that share one capacity. A failed growth of the second wakes the task alone;
 * the capacity must not have moved with the first array, or the next batches write past the
 * second. This program links with -Wl,--wrap=realloc (CMakeLists.txt): a realloc made on the
 * poller's thread can be made to fail.
 */
#include "common.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "tandem_gpu.h"

TDM_TEST_SUITE(poller_oom);

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);

/* Armed: the poller's next realloc of fail_bytes fails, once. */
static atomic_int armed;
static size_t fail_bytes;

void *__wrap_realloc(void *p, size_t n)
{
	if (atomic_load(&armed) && n == fail_bytes) {
		char name[16] = {0};
		prctl(PR_GET_NAME, name);
		if (strcmp(name, "tdm-poller") == 0 && atomic_exchange(&armed, 0))
			return NULL;
	}
	return __real_realloc(p, n);
}

struct sleeper {
	tdm_gpu *gpu;
	uint64_t when;
	int result;
};

static int sleeper_task(tdm_task *t, void *arg)
{
	struct sleeper *s = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_deadline(t, s->gpu, s->when));
	s->result = tdm_task_result(t);
	TDM_END(t);
}

/*
 * Rounds of deadlines that end together, so that the poller wakes them in one batch. The first
 * batch grows both arrays to 256 entries; the results' array (256 ints) fails once. Every task
 * still resumes, with 0, and the later, larger batches do not write past the results.
 */
Test(poller_oom, a_failed_growth_of_the_wake_batch_loses_nothing, .timeout = TDM_TEST_TIMEOUT(60))
{
	tdm_executor *ex = tdm_test_create(2);
	tdm_gpu_config g;
	tdm_gpu_config_init(&g);
	g.backend = TDM_BACKEND_SIM;
	tdm_gpu *gpu;
	cr_assert_eq(tdm_gpu_create(&gpu, ex, &g), 0);
	fail_bytes = 256 * sizeof(int);
	atomic_store(&armed, 1);
	enum { ROUNDS = 4, MAX = 600 };
	static struct sleeper s[MAX];
	for (int round = 0; round < ROUNDS; round++) {
		int n = 8 + round * 190;                  /* 8, 198, 388, 578: past 256 and 512 */
		uint64_t when = tdm_now_ns() + 200000000; /* after every await is made */
		tdm_group grp;
		cr_assert_eq(tdm_group_init(&grp, ex), 0);
		for (int i = 0; i < n; i++) {
			s[i] = (struct sleeper){.gpu = gpu, .when = when, .result = 1};
			cr_assert_eq(tdm_spawn(ex, sleeper_task, &s[i], &grp), 0);
		}
		cr_assert_eq(tdm_group_wait(&grp), 0);
		for (int i = 0; i < n; i++)
			cr_assert_eq(s[i].result, 0, "round %d, task %d: %d", round, i,
			             s[i].result);
	}
	cr_assert_eq(atomic_load(&armed), 0, "the injected failure never happened");
	tdm_test_destroy(ex);
	cr_assert_eq(tdm_gpu_destroy(gpu), 0);
}
