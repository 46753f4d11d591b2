#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The tree against an earlier one on the GPU machine, side by side in one call: both built with
# CUDA, this tree's tests (cuda suites under compute-sanitizer memcheck too) and examples, then
# the GPU and CPU benchmarks of the two trees in turn, PASSES times (default 2).
# Prepare here first:
#   ../shared/device/prepare-deps.sh
#   rm -rf .before && mkdir .before && git archive REV | tar -x -C .before
#   (.before must be ignored: echo /.before/ >> .git/info/exclude)
# then run with carry [".devdeps", ".before"]:
#   bash scripts/gpu-ab.sh [build|test|bench|all]
# build: both trees only. test: build, then this tree's tests. bench: build (kept from an
# earlier call on a warm machine), then the benchmarks (BENCH_SET=handles: the handle checks'
# hot paths instead of the default set). all: everything.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/tandem-out}
mkdir -p "$OUT"
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
A=build-gpu
B=.before/build-gpu
log() { printf '\n==== %s %s ====\n' "$(date -u +%T)" "$*" | tee -a "$OUT/summary.txt"; }

build_both() {
	log build
	{ date -u; nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv; nproc; } \
		>>"$OUT/machine.txt" 2>&1
	local jobs=$(($(nproc) / 2))
	(cmake -S . -B $A -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON &&
		cmake --build $A -j$jobs) >"$OUT/build.log" 2>&1 &
	(cmake -S .before -B $B -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON &&
		cmake --build $B -j$jobs) >"$OUT/build-before.log" 2>&1 &
	local ok=0
	wait %1 || { ok=1; tail -30 "$OUT/build.log" | tee -a "$OUT/summary.txt"; }
	wait %2 || { ok=1; tail -30 "$OUT/build-before.log" | tee -a "$OUT/summary.txt"; }
	return $ok
}

# memcheck NAME BINARY FILTER: one test at a time under compute-sanitizer.
memcheck() {
	timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
		"$2" --jobs 1 --filter "$3" >"$OUT/memcheck-$1.log" 2>&1
	echo "memcheck $1 exit $? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-$1.log" | tail -1)" \
		"$(grep -E 'Synthesis' "$OUT/memcheck-$1.log" | tail -1)" | tee -a "$OUT/summary.txt"
}

tests() {
	log ctest
	ctest --test-dir $A --output-on-failure -j8 >"$OUT/ctest.log" 2>&1
	tail -25 "$OUT/ctest.log" | tee -a "$OUT/summary.txt"
	log compute-sanitizer memcheck, cuda suites
	if command -v compute-sanitizer >/dev/null; then
		# test_faults' trapping-kernel test is left out: the API errors after the trap are
		# its point.
		memcheck await $A/tests/test_await 'await_cuda*/*'
		memcheck memory $A/tests/test_memory 'memory/*cuda*'
		memcheck pipeline $A/tests/test_pipeline 'pipeline_cuda/*'
		memcheck pinned $A/tests/test_pinned 'pinned_cuda/*'
		memcheck edges $A/tests/test_edges 'edges_cuda/*'
	else
		echo "no compute-sanitizer" | tee -a "$OUT/summary.txt"
	fi
	log examples
	for e in $A/examples/*; do
		[ -x "$e" ] || continue
		echo "-- $(basename "$e")" | tee -a "$OUT/summary.txt"
		timeout 60 "$e" 2>&1 | tail -3 | tee -a "$OUT/summary.txt"
	done
}

# one TREE NAME ARGS...: tandem-bench of TREE's build, JSON appended to NAME-TREE.jsonl.
one() {
	local tree=$1 name=$2 bin
	shift 2
	if [ "$tree" = before ]; then bin=$B/perf/tandem-bench; else bin=$A/perf/tandem-bench; fi
	timeout 240 "$bin" "$@" --json >>"$OUT/$name-$tree.jsonl" 2>>"$OUT/$name-$tree.err"
	echo "$name $tree: exit $?" >>"$OUT/summary.txt"
}

# BENCH_SET=handles: the hot paths a handle check sits on (issue 32), before and after in turn:
# 1 us kernels from 1 and 16 workers, fib(30), a graph cache hit, device-scheduler submits.
benches_handles() {
	log "benchmarks (handles), ${PASSES:-3} passes, before and after in turn"
	for p in $(seq 1 "${PASSES:-3}"); do
		for t in before after; do
			one $t throughput gpu-throughput --workers 1,16 --kernel-us 1 --reps 5
			one $t cpu fib --n 30 --threads 1,16 --impl tandem
			one $t graph gpu-graph --parts setup,chain
			one $t dsched gpu-dsched --parts rate,rtt
		done
	done
	wc -l "$OUT"/*.jsonl | tee -a "$OUT/summary.txt"
}

benches() {
	if [ "${BENCH_SET:-}" = handles ]; then
		benches_handles
		return
	fi
	log benchmarks, ${PASSES:-2} passes, before and after in turn
	for p in $(seq 1 "${PASSES:-2}"); do
		for t in before after; do
			one $t latency gpu-latency --workers 1,16 --n 10000
			one $t throughput gpu-throughput --workers 1,8,16
			one $t cpu fib --n 30 --threads 1,8,16
			one $t cpu skynet --depth 6 --threads 1,8,16
		done
		for t in after before; do
			one $t pipeline pipeline
		done
	done
	wc -l "$OUT"/*.jsonl | tee -a "$OUT/summary.txt"
}

case $what in
build) build_both ;;
test) build_both && tests ;;
bench) build_both && benches ;;
all) build_both && tests && benches ;;
*) echo "unknown mode: $what (build|test|bench|all)" >&2; exit 2 ;;
esac
log finished
# The device tool brings back at most 8 files: summary.txt beside one archive of the rest.
tar czf /tmp/logs.tgz -C "$OUT" --exclude summary.txt . && find "$OUT" -mindepth 1 \
	! -name summary.txt -delete && mv /tmp/logs.tgz "$OUT/logs.tgz"
