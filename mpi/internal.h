// SPDX-License-Identifier: MIT
/*
 * What the sources of tandem_mpi share beyond include/tandem_mpi.h. Hidden (the library's
 * visibility preset), never installed.
 */
#ifndef TANDEM_MPI_INTERNAL_H
#define TANDEM_MPI_INTERNAL_H

#include "tandem_mpi.h"

/* The process's MPI lock (tdm_mpi_lock without a context). */
void tdm__mpi_lock(void);
void tdm__mpi_unlock(void);

/* Makes `result` t's result (tdm_task_result) and returns it, the way an await call that ends at
 * once does: through a notification fired with it and awaited. -EINVAL, and t's result left
 * alone, when t is NULL or not the task running on the calling thread. */
int tdm__mpi_settle(tdm_task *t, int result);

/* The executor m serves. */
tdm_executor *tdm__mpi_executor(const tdm_mpi *m);

#endif
