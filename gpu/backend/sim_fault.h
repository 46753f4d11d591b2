// SPDX-License-Identifier: MIT
/*
 * The faults the simulator can be armed with. The backend interface carries them for its test
 * operation (backend.h); the testing library's tdm_sim_inject (testing/tandem_sim.h) names them
 * to the tests. Nothing of the public API.
 */
#ifndef TDM_GPU_BACKEND_SIM_FAULT_H
#define TDM_GPU_BACKEND_SIM_FAULT_H

typedef enum tdm_sim_fault {
	/* The next operation enqueued on the stream fails; the await covering it resumes with
	 * -EIO; the stream and the device go on working. */
	TDM_SIM_FAULT_OP = 1,
	/* The next operation enqueued on the stream faults the device for good (like a kernel
	 * that traps): every await on the device resumes with -EIO, new ones fail at once. */
	TDM_SIM_FAULT_STICKY = 2,
} tdm_sim_fault;

#endif /* TDM_GPU_BACKEND_SIM_FAULT_H */
