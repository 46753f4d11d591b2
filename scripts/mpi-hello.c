// SPDX-License-Identifier: MIT
/* Smoke test of an MPI installation (scripts/mpi-env.sh): rank 0 sends an int to rank 1, which
 * sends it back incremented; prints "mpi ok" on success. mpicc -o mpi-hello scripts/mpi-hello.c
 * && mpirun -np 2 ./mpi-hello */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	int rank, size, value = 0, ok = 1;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) {
		fprintf(stderr, "mpi-hello: needs 2 ranks, has %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (rank == 0) {
		value = 41;
		MPI_Send(&value, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
		MPI_Recv(&value, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		ok = value == 42;
	} else if (rank == 1) {
		MPI_Recv(&value, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		value++;
		MPI_Send(&value, 1, MPI_INT, 0, 1, MPI_COMM_WORLD);
	}
	MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (rank == 0)
		puts(ok ? "mpi ok" : "mpi FAILED");
	MPI_Finalize();
	return ok ? 0 : 1;
}
