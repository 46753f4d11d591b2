#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Bisect a benchmark cell over several trees in one call on the GPU machine: each tree under
# .trees/NAME (git archive of a commit, made here) builds tandem-bench with CUDA, then the cell
# runs PASSES times, the trees in a rotated order each pass so no tree always runs first.
# Prepare here:
#   for r in REV...; do mkdir -p .trees/$r && git archive $r | tar -x -C .trees/$r; done
#   (.trees must be ignored: echo /.trees/ >> .git/info/exclude)
# then run with carry [".devdeps", ".trees"]:
#   PASSES=8 bash scripts/gpu-bisect.sh gpu-throughput --workers 1,8 --kernel-us 1
# Output: $OUT/summary.txt, and $OUT/logs.tgz holding bisect-NAME.jsonl per tree and the logs.
set -uo pipefail
OUT=${OUT:-/tmp/tandem-out}
mkdir -p "$OUT"
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
trees=()
for d in .trees/*/; do trees+=("$(basename "$d")"); done
n=${#trees[@]}
jobs=$(($(nproc) / n))
[ "$jobs" -ge 1 ] || jobs=1
for t in "${trees[@]}"; do
	(cmake -S .trees/$t -B .trees/$t/build-gpu -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON &&
		cmake --build .trees/$t/build-gpu -j$jobs --target tandem-bench) \
		>"$OUT/build-$t.log" 2>&1 &
done
wait
for t in "${trees[@]}"; do
	[ -x .trees/$t/build-gpu/perf/tandem-bench ] || { echo "build of $t failed" >>"$OUT/summary.txt"; tail -20 "$OUT/build-$t.log" >>"$OUT/summary.txt"; }
done
for p in $(seq 0 $((${PASSES:-4} - 1))); do
	# DEADLINE: seconds of this script after which no further pass starts.
	[ "$SECONDS" -lt "${DEADLINE:-100000}" ] || { echo "deadline after $p passes" >>"$OUT/summary.txt"; break; }
	for i in $(seq 0 $((n - 1))); do
		t=${trees[$(((i + p) % n))]}
		timeout 120 .trees/$t/build-gpu/perf/tandem-bench "$@" --json \
			>>"$OUT/bisect-$t.jsonl" 2>>"$OUT/bisect-$t.err"
		echo "pass $p $t exit $?" >>"$OUT/summary.txt"
	done
done
# The device tool brings back at most 8 files: summary.txt beside one archive of the rest.
tar czf /tmp/bisect-logs.tgz -C "$OUT" --exclude summary.txt . && find "$OUT" -mindepth 1 \
	! -name summary.txt -delete && mv /tmp/bisect-logs.tgz "$OUT/logs.tgz"
