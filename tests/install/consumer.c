// SPDX-License-Identifier: MIT
/*
 * A program outside tandem's tree, built against an installed prefix (cmake/install-test.sh): the
 * public header compiles cleanly in strict C11, and the installed library runs a task. Public
 * API only.
 */
#include <stdatomic.h>
#include <stdio.h>

#include <tandem.h>

static void set_flag(void *arg)
{
	atomic_store((atomic_int *)arg, 1);
}

static int check(const char *what, int err)
{
	if (err)
		fprintf(stderr, "consumer: %s: %s\n", what, tdm_strerror(err));
	return err;
}

int main(void)
{
	atomic_int flag = 0;
	tdm_executor *ex;
	tdm_config cfg;

	tdm_config_init(&cfg);
	if (check("tdm_executor_create", tdm_executor_create(&ex, &cfg)))
		return 1;
	if (check("tdm_submit", tdm_submit(ex, set_flag, &flag)))
		return 1;
	/* The default shutdown mode drains: the task has run once destroy returns. */
	if (check("tdm_executor_destroy", tdm_executor_destroy(ex)))
		return 1;
	if (atomic_load(&flag) != 1) {
		fprintf(stderr, "consumer: the submitted task did not run\n");
		return 1;
	}
	printf("consumer: ok (tandem %d.%d.%d)\n", TDM_VERSION_MAJOR, TDM_VERSION_MINOR,
	       TDM_VERSION_PATCH);
	return 0;
}
