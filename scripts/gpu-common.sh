# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# The head of the scripts that make one call on the GPU machine (gpu-check.sh, gpu-trace.sh),
# sourced by them: $OUT and its summary, log (a stamped heading, also to the summary), the logs
# packed into $OUT/logs.tgz at exit (the device tool brings back 8 files at most), and this tree
# built with CUDA in build-gpu ($A) beside the tree in .trees/$BEFORE, if given ($B, its
# tandem-bench only). Exits when this tree does not build.
set -uo pipefail
OUT=${OUT:-/tmp/tandem-out}
mkdir -p "$OUT"
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
# tandem-bench's libomp rows: the program scripts/stage-libomp.sh staged (no clang there).
[ -x .devdeps/libomp/tandem-bench-libomp ] &&
	export TANDEM_BENCH_LIBOMP=$PWD/.devdeps/libomp/tandem-bench-libomp
S=$OUT/summary.txt
log() { printf '\n==== %s %s ====\n' "$(date -u +%T)" "$*" | tee -a "$S"; }
pack() {
	log finished
	# Traces (*.json) stay behind: each is tens of megabytes.
	tar czf /tmp/logs.tgz -C "$OUT" --exclude summary.txt --exclude '*.json' . &&
		find "$OUT" -mindepth 1 ! -name summary.txt -delete && mv /tmp/logs.tgz "$OUT/logs.tgz"
}
trap pack EXIT
A=build-gpu
B=${BEFORE:+.trees/$BEFORE/build-gpu}

log build
{ date -u; nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv; nproc; } >>"$S" 2>&1
# GPU_CMAKE_ARGS: more options for this tree's build; by default tandem_mpi off: the Open MPI
# staged in .devdeps is found through CMAKE_PREFIX_PATH, but runs only as scripts/mpi-env.sh
# relocates it (scripts/gpu-mpi.sh sources that and turns tandem_mpi on).
# shellcheck disable=SC2086
(cmake -S . -B $A -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON ${GPU_CMAKE_ARGS:--DTANDEM_MPI=OFF} &&
	cmake --build $A -j12) \
	>"$OUT/build.log" 2>&1 &
pa=$! pb=
if [ -n "$B" ]; then
	(cmake -S .trees/$BEFORE -B $B -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON &&
		cmake --build $B -j4 --target tandem-bench) >"$OUT/build-before.log" 2>&1 &
	pb=$!
fi
wait $pa || { tail -40 "$OUT/build.log" | tee -a "$S"; exit 1; }
[ -z "$pb" ] || wait $pb || tail -20 "$OUT/build-before.log" | tee -a "$S"

# The off path against $BEFORE: fib(30) and gpu-throughput with 1 us kernels (1 and 16), this
# tree's tandem-bench and $B's, PASSES times (3 by default) in alternating order, into
# $OUT/fib-{before,after}.jsonl and $OUT/ab-{before,after}.jsonl. Nothing without $B.
ab_off() {
	[ -n "$B" ] || return 0
	log "off: fib and gpu-throughput against $BEFORE"
	local p t bin
	for p in $(seq 1 "${PASSES:-3}"); do
		for t in before after; do
			[ $((p % 2)) = 0 ] && t=$([ $t = before ] && echo after || echo before)
			bin=$A/perf/tandem-bench
			[ $t = before ] && bin=$B/perf/tandem-bench
			timeout 120 "$bin" fib --n 30 --threads 1,16 --reps 10 --impl tandem --json \
				>>"$OUT/fib-$t.jsonl" 2>>"$OUT/fib-$t.err"
			timeout 120 "$bin" gpu-throughput --workers 1,16 --kernel-us 1 --reps 5 --json \
				>>"$OUT/ab-$t.jsonl" 2>>"$OUT/ab-$t.err"
			echo "pass $p $t exit $?" >>"$S"
		done
	done
}

# Every $OUT/*.jsonl, per (bench, impl, workers or threads): its runs' count, median, min and
# max of tasks_per_s (or median_ms), into the summary.
jsonl_summary() {
	python3 - "$OUT" <<'PY' | tee -a "$S"
import json, sys, statistics as st, collections, os
for f in sorted(os.listdir(sys.argv[1])):
    if not f.endswith(".jsonl"):
        continue
    d = collections.defaultdict(list)
    for l in open(os.path.join(sys.argv[1], f)):
        try:
            r = json.loads(l)
        except ValueError:
            continue
        k = (r.get("bench"), r.get("impl"), r.get("workers", r.get("threads")))
        v = r.get("tasks_per_s", r.get("median_ms", r.get("ms")))
        if v is not None:
            d[k].append(v)
    for k, v in sorted(d.items(), key=str):
        print(f, k, len(v), "median %.4g" % st.median(v), "min %.4g max %.4g" % (min(v), max(v)))
PY
}
