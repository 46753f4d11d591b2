#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA, run every test (the cuda suites included), the
# cuda tests under compute-sanitizer, the GPU examples, and the benchmarks; logs go to $OUT.
# Prepare here first: ../shared/device/prepare-deps.sh; then run with carry [".devdeps"]:
#   bash scripts/gpu-machine.sh [all|test|bench|scaling|pipeline]
# pipeline: the build, test_pipeline's cuda suite (plain and under memcheck), then
# `tandem-bench pipeline --trace` PIPE_CALLS times (default 4) and once with --reps 15: the
# figures issue 4 is judged by, with the lead and tail of each compute-bound run.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/tandem-out}
mkdir -p "$OUT"
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
B=build-gpu
log() { printf '\n==== %s ====\n' "$*" | tee -a "$OUT/summary.txt"; }

{ date -u; nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv; nproc; } \
	>"$OUT/machine.txt" 2>&1
log build
if ! { cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON &&
	cmake --build $B -j"$(nproc)"; } >"$OUT/build.log" 2>&1; then
	tail -40 "$OUT/build.log" | tee -a "$OUT/summary.txt"
	exit 1
fi

if [ "$what" = pipeline ]; then
	log test_pipeline, cuda suite
	$B/tests/test_pipeline --filter 'pipeline_cuda/*' >"$OUT/test-pipeline.log" 2>&1
	tail -1 "$OUT/test-pipeline.log" | tee -a "$OUT/summary.txt"
	if command -v compute-sanitizer >/dev/null; then
		timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
			$B/tests/test_pipeline --jobs 1 --filter 'pipeline_cuda/*' \
			>"$OUT/memcheck-pipeline.log" 2>&1
		echo "memcheck exit $?" | tee -a "$OUT/summary.txt"
		grep -E "ERROR SUMMARY|Synthesis" "$OUT/memcheck-pipeline.log" | tail -2 |
			tee -a "$OUT/summary.txt"
	fi
	log pipeline benchmarks
	for k in $(seq 1 "${PIPE_CALLS:-4}") reps15; do
		args=(--json --trace)
		[ "$k" = reps15 ] && args=(--json --reps 15)
		timeout 180 $B/perf/tandem-bench pipeline "${args[@]}" >"$OUT/pipeline-$k.jsonl" \
			2>"$OUT/pipeline-$k.err"
		echo "pipeline $k (${args[*]}): exit $?" | tee -a "$OUT/summary.txt"
		grep '"impl":"tandem"' "$OUT/pipeline-$k.jsonl" | grep -o \
			'"config":"[a-z-]*"\|"vs_[a-z_]*":[0-9.]*\|"overlap_efficiency":[0-9.]*' |
			tr '\n' ' ' | tee -a "$OUT/summary.txt"
		echo | tee -a "$OUT/summary.txt"
	done
	timeout 120 $B/perf/tandem-bench pinned --json >"$OUT/pinned.jsonl" 2>&1
	echo "pinned: exit $?" | tee -a "$OUT/summary.txt"
	exit 0
fi

if [ "$what" != bench ]; then
	log ctest
	ctest --test-dir $B --output-on-failure -j4 >"$OUT/ctest.log" 2>&1
	tail -15 "$OUT/ctest.log" | tee -a "$OUT/summary.txt"
	log compute-sanitizer memcheck, cuda suites
	if command -v compute-sanitizer >/dev/null; then
		# --jobs 1: one test process at a time under the sanitizer. The trapping-kernel
		# test is left out: its API errors after the trap are the point of that test.
		timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
			$B/tests/test_gpu --jobs 1 --filter 'gpu_cuda*/[!t]*' >"$OUT/memcheck.log" 2>&1
		echo "memcheck exit $?" | tee -a "$OUT/summary.txt"
		grep -E "ERROR SUMMARY|Synthesis" "$OUT/memcheck.log" | tail -5 | tee -a "$OUT/summary.txt"
	fi
	log examples
	for e in gpu_await gpu_many pipeline demo; do
		timeout 60 $B/examples/$e 2>&1 | tail -3 | tee -a "$OUT/summary.txt"
	done
	timeout 60 $B/examples/topology >"$OUT/topology.txt" 2>&1
	TANDEM_TOPO_PRINT=1 timeout 60 $B/tests/test_topology --filter 'topology/live*' \
		>>"$OUT/topology.txt" 2>&1
	head -20 "$OUT/topology.txt" | tee -a "$OUT/summary.txt"
fi

if [ "$what" = scaling ]; then
	log gpu-scaling
	timeout 300 $B/perf/tandem-bench gpu-scaling --json >"$OUT/bench-scaling.jsonl" \
		2>"$OUT/bench-scaling.err"
	cat "$OUT/bench-scaling.jsonl" "$OUT/bench-scaling.err" | tail -20 | tee -a "$OUT/summary.txt"
	exit 0
fi

if [ "$what" != test ]; then
	log benchmarks
	bench=$B/perf/tandem-bench
	timeout 120 $bench gpu-latency --json >"$OUT/bench-gpu.jsonl" 2>"$OUT/bench-gpu.err"
	timeout 240 $bench gpu-throughput --json >>"$OUT/bench-gpu.jsonl" 2>>"$OUT/bench-gpu.err"
	timeout 30 $bench gpu-idle --json >>"$OUT/bench-gpu.jsonl" 2>>"$OUT/bench-gpu.err"
	timeout 120 $bench pinned --json >>"$OUT/bench-gpu.jsonl" 2>>"$OUT/bench-gpu.err"
	timeout 180 $bench pipeline --json >>"$OUT/bench-gpu.jsonl" 2>>"$OUT/bench-gpu.err"
	timeout 120 $bench fib --n 30 --threads 1,2,8,16 --json >"$OUT/bench-cpu.jsonl" 2>&1
	timeout 120 $bench skynet --depth 6 --threads 1,2,8,16 --json >>"$OUT/bench-cpu.jsonl" 2>&1
	wc -l "$OUT"/bench-*.jsonl | tee -a "$OUT/summary.txt"
	tail -5 "$OUT/bench-gpu.err" | tee -a "$OUT/summary.txt"
fi
