#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Use every MIG instance of a machine from tandem: one process per instance.
#
# Why: a CUDA process enumerates at most one MIG instance (CUDA 12 and 13), so one tandem process
# cannot drive several instances. Each process sees its instance as device 0, and tandem sizes
# that process's streams, launch limit and memory pool to the instance (a 1g instance gets 2
# streams and 2-3 launchers where a whole H200 gets 8 streams, or one per worker past 8 up to 32,
# and 16 launchers: examples/topology shows the plan).
#
#   examples/mig_launch.sh PROGRAM [ARGS...]
#
# Runs PROGRAM once per MIG instance listed by `nvidia-smi -L`, with CUDA_VISIBLE_DEVICES set to
# that instance's UUID, all at once, and waits for all of them; exits non-zero if any failed.
# On a machine without MIG instances it runs PROGRAM once on what is there and says so.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
mapfile -t uuids < <(nvidia-smi -L 2>/dev/null | sed -n 's/.*(UUID: \(MIG-[^)]*\)).*/\1/p')
if [ ${#uuids[@]} -eq 0 ]; then
	echo "no MIG instances found: running $1 once on the visible devices"
	exec "$@"
fi
pids=()
for u in "${uuids[@]}"; do
	echo "starting $1 on $u"
	CUDA_VISIBLE_DEVICES=$u "$@" > >(sed "s/^/[$u] /") 2>&1 &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=1
done
exit $rc
