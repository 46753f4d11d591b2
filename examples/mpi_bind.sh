#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One process per GPU or MIG instance under mpirun: each rank takes the device of its local rank.
#
#   mpirun -np N --bind-to none examples/mpi_bind.sh PROGRAM [ARGS...]
#
# The rank's local rank (its number among the ranks of its host: OMPI_COMM_WORLD_LOCAL_RANK
# under Open MPI, MPI_LOCALRANKID under MPICH, SLURM_LOCALID under srun) picks, round robin, one
# of the host's devices, and CUDA_VISIBLE_DEVICES names only that one, so that PROGRAM sees it as
# device 0 and tandem sizes its streams, launch limit and pools to it (a MIG instance gets its
# share). The devices: the entries of CUDA_VISIBLE_DEVICES where it is set; else the MIG
# instances `nvidia-smi -L` lists, as examples/mig_launch.sh takes them (a CUDA process
# enumerates at most one MIG instance, hence one process each); else the GPUs it lists. With
# none (no driver, no nvidia-smi) PROGRAM runs as it is: tandem's examples then say they run on
# the GPU simulator.
#
# --bind-to none: Open MPI binds each rank to one core by default (two or fewer ranks), or to a
# socket; a tandem process runs a worker per CPU it may use, plus the GPU poller and the MPI
# progress thread. To give each rank a share of the cores instead, use --map-by
# ppr:R:node:PE=C (R ranks per node, C cores each) and no --bind-to.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: mpirun ... $0 PROGRAM [ARGS...]" >&2; exit 2; }
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-0}}}
devices=()
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
	IFS=, read -ra devices <<<"$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi >/dev/null; then
	mapfile -t devices < <(nvidia-smi -L 2>/dev/null | sed -n 's/.*(UUID: \(MIG-[^)]*\)).*/\1/p')
	if [ ${#devices[@]} -eq 0 ]; then
		mapfile -t devices < <(nvidia-smi -L 2>/dev/null |
			sed -n 's/^GPU .*(UUID: \(GPU-[^)]*\)).*/\1/p')
	fi
fi
if [ ${#devices[@]} -gt 0 ]; then
	export CUDA_VISIBLE_DEVICES=${devices[$((local_rank % ${#devices[@]}))]}
fi
exec "$@"
