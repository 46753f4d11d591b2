// SPDX-License-Identifier: MIT
/*
 * A program outside tandem's tree using tandem_mpi, built against an installed prefix
 * (cmake/install-test.sh): tandem_mpi.h compiles cleanly in strict C11, and a task awaits an MPI
 * request through the installed libraries (one process: a request to itself). Public API only.
 */
#include <stdio.h>

#include <tandem.h>
#include <tandem_mpi.h>

static tdm_mpi *mpi;

struct job {
	int out, in;
	MPI_Request send, recv;
};

static int job(tdm_task *t, void *arg)
{
	struct job *j = arg;
	int rc;
	TDM_BEGIN(t);
	if ((rc = tdm_mpi_irecv(mpi, &j->in, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &j->recv)) != 0 ||
	    (rc = tdm_mpi_isend(mpi, &j->out, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &j->send)) != 0)
		return rc;
	TDM_AWAIT(t, tdm_await_mpi(t, mpi, &j->send, MPI_STATUS_IGNORE));
	if ((rc = tdm_task_result(t)) != 0)
		return rc;
	TDM_AWAIT(t, tdm_await_mpi(t, mpi, &j->recv, MPI_STATUS_IGNORE));
	return tdm_task_result(t);
	TDM_END(t);
}

static int check(const char *what, int err)
{
	if (err)
		fprintf(stderr, "consumer_mpi: %s: %s\n", what, tdm_mpi_strerror(err));
	return err;
}

int main(int argc, char **argv)
{
	tdm_executor *ex;
	if (check("tdm_mpi_init", tdm_mpi_init(&argc, &argv, NULL)) ||
	    check("tdm_executor_create", tdm_executor_create(&ex, NULL)) ||
	    check("tdm_mpi_create", tdm_mpi_create(ex, NULL, &mpi)))
		return 1;
	struct job j = {.out = 42, .in = 0};
	tdm_group g;
	tdm_group_init(&g, ex);
	int rc = check("tdm_spawn", tdm_spawn(ex, job, &j, &g));
	if (rc == 0)
		rc = check("the job", tdm_group_wait(&g));
	tdm_mpi_destroy(mpi);
	tdm_executor_destroy(ex);
	MPI_Finalize();
	if (rc != 0 || j.in != 42) {
		fprintf(stderr, "consumer_mpi: received %d, not 42\n", j.in);
		return 1;
	}
	printf("consumer_mpi: ok\n");
	return 0;
}
