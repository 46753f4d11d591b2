#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One call on the GPU machine (16 cores; or anywhere): the CPU scaling figures. This tree built in
# a fresh folder (Release, no CUDA, no MPI, no tests), then `tandem-bench fib` and `skynet` with
# --json at THREADS for every implementation, tandem, oneTBB, libgomp and libomp, and the CPU
# scaling plot drawn from them (where matplotlib is). libomp: the tandem-bench-libomp that
# scripts/stage-libomp.sh staged into .devdeps/libomp (the GPU machine has no clang), else the
# one this build made. Every implementation must be there: the figure compares them.
# Prepare here, in the project root:
#   ../shared/device/prepare-deps.sh && scripts/stage-libomp.sh     # ck, oneTBB; libomp
# Run with carry [".devdeps"]:
#   bash scripts/gpu-cpu-bench.sh
# $OUT gets summary.txt, machine.txt, build.log, bench.err, DATE-MACHINE-TREE-cpu.jsonl (the
# file for perf/plot-data/, which `make plots` draws) and cpu-scaling.png: 6 files.
# Settings (environment): THREADS (1,2,4,8,16), FIB_N (30), SKYNET_DEPTH (6), REPS (10),
# BUILD (build-cpu), MACHINE (in the file name; default h200 or h100 from nvidia-smi, else
# cpu<N>), TREE (in the file name; default the commit, short), CPU_CMAKE_ARGS (more options for
# the build). A quick run on 2 cores:
#   THREADS=1,2 FIB_N=22 SKYNET_DEPTH=4 REPS=3 OUT=/tmp/cpu bash scripts/gpu-cpu-bench.sh
set -uo pipefail
OUT=${OUT:-/tmp/tandem-out}
THREADS=${THREADS:-1,2,4,8,16} FIB_N=${FIB_N:-30} SKYNET_DEPTH=${SKYNET_DEPTH:-6} REPS=${REPS:-10}
BUILD=${BUILD:-build-cpu}
mkdir -p "$OUT"
if [ -d .devdeps/root/usr ]; then
	export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
	export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
S=$OUT/summary.txt
log() { printf '\n==== %s %s ====\n' "$(date -u +%T)" "$*" | tee -a "$S"; }
fail() { echo "gpu-cpu-bench: $*" | tee -a "$S" >&2; exit 1; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $gpu in
*H200*) machine=h200 ;;
*H100*) machine=h100 ;;
*) machine=cpu$(nproc) ;;
esac
MACHINE=${MACHINE:-$machine}
TREE=${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo tree)}
data=$OUT/$(date -u +%F)-$MACHINE-$TREE-cpu.jsonl
{ date -u; git log --oneline -1 2>/dev/null; git status --short 2>/dev/null | head
  echo "GPU: ${gpu:-none}"; nproc; grep -m1 'model name' /proc/cpuinfo; gcc --version | head -1
  cat .devdeps/libomp/README 2>/dev/null; } >"$OUT/machine.txt" 2>&1

log "build in $BUILD (fresh, Release, no CUDA)"
rm -rf "$BUILD"
# shellcheck disable=SC2086 # CPU_CMAKE_ARGS is a word list
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=OFF -DTANDEM_MPI=OFF \
	-DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_EXAMPLES=OFF ${CPU_CMAKE_ARGS:-} &&
	cmake --build "$BUILD" -j"$(nproc)" --target tandem-bench; } >"$OUT/build.log" 2>&1; then
	tail -40 "$OUT/build.log" | tee -a "$S"
	fail "the build failed"
fi
grep "tandem-bench baselines" "$OUT/build.log" | tee -a "$S"
bench=$BUILD/perf/tandem-bench
if [ -x .devdeps/libomp/tandem-bench-libomp ]; then
	export TANDEM_BENCH_LIBOMP=$PWD/.devdeps/libomp/tandem-bench-libomp
fi
"$bench" fib --impl | tee -a "$S"
for impl in tandem tbb libgomp libomp; do
	"$bench" fib --n 10 --threads 1 --reps 1 --impl "$impl" >/dev/null 2>>"$OUT/bench.err" ||
		fail "no $impl here (tandem-bench fib --impl above says why; libomp: scripts/stage-libomp.sh)"
done

# Each within 4 minutes, so that build and both fit the device tool's 10 (on 16 cores, about a
# minute and a half each: 11 runs of each implementation at each thread count).
log "fib --n $FIB_N and skynet --depth $SKYNET_DEPTH, threads $THREADS, $REPS reps, every impl"
: >"$data"
timeout 240 "$bench" fib --n "$FIB_N" --threads "$THREADS" --reps "$REPS" --json \
	>>"$data" 2>>"$OUT/bench.err" || fail "fib: exit $? (bench.err)"
timeout 240 "$bench" skynet --depth "$SKYNET_DEPTH" --threads "$THREADS" --reps "$REPS" --json \
	>>"$data" 2>>"$OUT/bench.err" || fail "skynet: exit $? (bench.err)"
# The table: each bench and thread count, the medians, tandem over oneTBB and over the better
# OpenMP (as tandem-bench's own table has them).
python3 - "$data" <<'PY' | tee -a "$S"
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
impls = ["tandem", "tbb", "libgomp", "libomp"]
by = collections.defaultdict(dict)
for r in rows:
    by[(r["bench"], r["n"], r["threads"])][r["impl"]] = r["median_ms"]
print(f"{'bench':>8} {'threads':>7} " + " ".join(f"{i:>9}" for i in impls) +
      "  tandem/tbb  tandem/best-OpenMP")
for (b, n, t), ms in sorted(by.items()):
    omp = min((ms[i], i) for i in ("libgomp", "libomp") if i in ms)
    print(f"{b + ' ' + str(n):>8} {t:>7} " + " ".join(f"{ms.get(i, float('nan')):9.2f}" for i in impls) +
          f"  {ms['tandem'] / ms['tbb']:9.2f}x  {ms['tandem'] / omp[0]:8.2f}x ({omp[1]})")
PY

log plot
if scripts/tandem-plot scaling "$data" -o "$OUT/cpu-scaling.png" \
	--title "fib and skynet, $MACHINE machine, $(nproc) cores ($(date -u +%F), $TREE)" \
	>>"$S" 2>&1; then
	echo "drawn: cpu-scaling.png" | tee -a "$S"
else
	echo "not drawn here (no matplotlib?): make plots draws it from perf/plot-data/" | tee -a "$S"
fi
log finished
echo "data: $data" | tee -a "$S"
