// SPDX-License-Identifier: MIT
/*
 * A traced program that never ends, for tests/test_trace_stream.c to kill: TANDEM_TRACE=path
 * traces it from its executor's create; it runs batches of a static task (named in the trace
 * from the program's symbol table: this program is linked without -rdynamic) until a signal
 * ends it.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <time.h>

#include "tandem.h"

static atomic_ulong runs;

static void victim_task(void *arg)
{
	(void)arg;
	atomic_fetch_add_explicit(&runs, 1, memory_order_relaxed);
}

int main(void)
{
	/* Never outlives the test that kills it, even one that fails before its kill. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
		return 1;
	tdm_config cfg;
	tdm_config_init(&cfg);
	cfg.workers = 2;
	tdm_executor *ex;
	if (tdm_executor_create(&ex, &cfg) != 0)
		return 1;
	for (;;) {
		tdm_group g;
		tdm_group_init(&g, ex);
		for (int i = 0; i < 20; i++)
			if (tdm_group_spawn(&g, victim_task, NULL) != 0)
				return 1;
		tdm_group_wait(&g);
		struct timespec pause = {0, 1000000}; /* a file that grows slowly */
		nanosleep(&pause, NULL);
	}
}
