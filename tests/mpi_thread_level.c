// SPDX-License-Identifier: MIT
/*
 * An MPI that the program initialised itself below MPI_THREAD_SERIALIZED: tdm_mpi_init reports
 * the level and refuses it, tdm_mpi_create too (ctest runs it under mpirun with one rank).
 */
#include <errno.h>

#include "tandem.h"
#include "tandem_mpi.h"

#include "mpi_check.h"

int main(int argc, char **argv)
{
	int provided = -1;
	CHECK_EQ(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), MPI_SUCCESS);
	MPI_Comm_rank(MPI_COMM_WORLD, &check_rank);
	if (provided >= MPI_THREAD_SERIALIZED) {
		/* An MPI may give more than asked: then there is nothing to refuse. */
		printf("MPI gave thread level %d for FUNNELED: skipped\n", provided);
		MPI_Finalize();
		return 77;
	}
	int level = -1;
	CHECK_EQ(tdm_mpi_init(&argc, &argv, &level), -EPROTONOSUPPORT);
	CHECK_EQ(level, provided); /* used as it is */
	tdm_executor *ex;
	CHECK_EQ(tdm_executor_create(&ex, NULL), 0);
	tdm_mpi *m = NULL;
	CHECK_EQ(tdm_mpi_create(ex, NULL, &m), -EPROTONOSUPPORT);
	CHECK(m == NULL);
	CHECK_EQ(tdm_executor_destroy(ex), 0);
	CHECK_EQ(MPI_Finalize(), MPI_SUCCESS);
	printf("mpi_thread_level: FUNNELED refused: ok\n");
	return 0;
}
