// SPDX-License-Identifier: MIT
/*
 * Notifications and groups made on fresh (uninitialised) memory, used, and reused: plain C, not
 * Criterion, so that `make valgrind` runs it under valgrind as it runs the demo. Initialising
 * reads nothing of the memory: an init that looked at what the memory held (to refuse starting
 * over a notification a task awaits) made valgrind report a jump on uninitialised memory in
 * every program that made one. ctest runs it too: exit 0 when every call returned what it should.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tandem.h"

static int failures;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fresh_init.c:%d: %s\n", __LINE__, #cond);                 \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

struct waiter {
	tdm_notify *n;
	int result;
};

static int wait_task(tdm_task *t, void *arg)
{
	struct waiter *w = arg;
	TDM_BEGIN(t);
	TDM_AWAIT(t, tdm_await_notify(t, w->n));
	w->result = tdm_task_result(t);
	TDM_END(t);
}

int main(void)
{
	tdm_config c;
	tdm_config_init(&c);
	c.workers = 2;
	tdm_executor *ex;
	if (tdm_executor_create(&ex, &c) != 0)
		return 1;
	/* malloc, not calloc: memory nobody wrote, as a stack variable's is. */
	tdm_notify *n = malloc(sizeof(*n));
	tdm_group *g = malloc(sizeof(*g));
	if (n == NULL || g == NULL)
		return 1;
	CHECK(tdm_notify_init(n, ex) == 0);
	CHECK(tdm_group_init(g, ex) == 0);
	for (int round = 0; round < 3; round++) {
		struct waiter w = {.n = n, .result = 1};
		CHECK(tdm_spawn(ex, wait_task, &w, g) == 0);
		CHECK(tdm_notify_fire(n) == 0);
		CHECK(tdm_group_wait(g) == 0); /* and g is ready again */
		CHECK(w.result == 0);
		CHECK(tdm_notify_reset(n) == 0);
	}
	free(n);
	free(g);
	CHECK(tdm_executor_destroy(ex) == 0);
	if (failures == 0)
		printf("fresh_init: ok\n");
	return failures == 0 ? 0 : 1;
}
