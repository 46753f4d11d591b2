// SPDX-License-Identifier: MIT
/*
 * The sim backend's memory (sim_memory.c): it allocates the simulated devices' memory and the
 * pinned host memory, and keeps a table of every range a simulated device may reach, so that a
 * free, a copy or a kernel is checked against it as CUDA checks a pointer.
 *
 * Three kinds of range, in one sorted, disjoint table:
 * - device blocks (device_alloc, malloc_async, managed_alloc), host memory standing for a
 *   device's, each with the device it counts against. A block with a free_async queued is
 *   `freeing`: no other free may take it and no new work may name it, while the work queued
 *   before the free still reaches it;
 * - host_alloc blocks and registered buffers: pinned host memory, which a device reaches too
 *   (mapped, as with CUDA's unified addressing) and which is_pinned looks up. Nothing is locked.
 *
 * A block leaves the table before its memory is freed, under the write lock; a stream thread
 * holds the read lock from the check of an access to the access's end, so that no free runs
 * under it.
 */
#ifndef TDM_GPU_SIM_MEMORY_H
#define TDM_GPU_SIM_MEMORY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TDM__SIM_DEV_TOTAL ((uint64_t)80 << 30) /* memory of each simulated device */

enum sim_mem_kind {
	SIM_MEM_DEVICE,
	SIM_MEM_HOST,       /* a host_alloc block */
	SIM_MEM_REGISTERED, /* a buffer of the caller's, host_register'ed */
};

struct sim_range {
	uintptr_t lo, hi; /* [lo, hi) */
	int dev;          /* SIM_MEM_DEVICE: the device whose memory it is */
	enum sim_mem_kind kind;
	bool freeing; /* SIM_MEM_DEVICE: a free_async of it is queued */
};

struct sim_mem {
	pthread_rwlock_t lock;
	struct sim_range *r; /* lock: sorted by lo, disjoint */
	size_t n, cap;       /* lock */
	/* Per device: bytes allocated and not yet freed, at most TDM__SIM_DEV_TOTAL. Relaxed: a
	 * count that publishes nothing; the memory itself is handed over by the caller. */
	_Atomic uint64_t *held;
};

/* -ENOMEM. */
int tdm__sim_mem_init(struct sim_mem *m, int ndev);
/* The table only: memory still allocated is its owners' (a leak LeakSanitizer reports). */
void tdm__sim_mem_fini(struct sim_mem *m);

/* A device block of dev (SIM_MEM_DEVICE: -ENOMEM past the device's free memory, as cudaMalloc,
 * where malloc would overcommit) or a host_alloc block (SIM_MEM_HOST; dev is ignored). -ENOMEM. */
int tdm__sim_mem_alloc(struct sim_mem *m, enum sim_mem_kind kind, int dev, size_t bytes,
                       void **out);
/*
 * Frees the block that starts at p if it is of `kind`, (a device block) of device `dev` unless
 * dev < 0, and freeing exactly when `freeing` says. -EINVAL otherwise (a pointer never
 * allocated, inside a block but not at its start, freed already, or of another kind or device),
 * and nothing is freed.
 */
int tdm__sim_mem_free(struct sim_mem *m, void *p, enum sim_mem_kind kind, int dev, bool freeing);
/* Marks the device block that starts at p freeing (on) or live again (off): -EINVAL when there
 * is no such block in the other state. */
int tdm__sim_mem_set_freeing(struct sim_mem *m, const void *p, bool on);

/* Registers [p, p + bytes): -EEXIST when it overlaps pinned memory, -EINVAL device memory or
 * past the address space, -ENOMEM. */
int tdm__sim_mem_register(struct sim_mem *m, void *p, size_t bytes);
/* -EINVAL unless p starts a registered range. */
int tdm__sim_mem_unregister(struct sim_mem *m, void *p);
/* 1: p is in a host_alloc block or a registered buffer; 0 otherwise. */
int tdm__sim_mem_is_pinned(struct sim_mem *m, const void *p);
/* What dev has left to allocate. */
uint64_t tdm__sim_mem_free_bytes(struct sim_mem *m, int dev);

/* The read lock, for a check and the access it allows. */
void tdm__sim_mem_read_begin(struct sim_mem *m);
void tdm__sim_mem_read_end(struct sim_mem *m);
/*
 * With the read lock held: whether a device may reach [p, p + bytes), which must lie within one
 * range, a device block (a freeing one only when `freeing_ok`) or pinned host memory. Zero bytes
 * reach nowhere and are always fine.
 */
bool tdm__sim_mem_reaches(const struct sim_mem *m, const void *p, size_t bytes, bool freeing_ok);

#endif /* TDM_GPU_SIM_MEMORY_H */
