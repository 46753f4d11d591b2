#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One call on the GPU machine for issue 20 (tandem_mpi), and the off-path A/B of the final tree:
# this tree built with CUDA and tandem_mpi against the Open MPI staged in .devdeps
# (scripts/stage-mpi.sh, scripts/mpi-env.sh), its MPI tests, the MPI pipeline example across 2 and
# 3 ranks on the GPU, the three MPI benchmarks, and, with BEFORE=REV, fib and gpu-throughput side
# by side with .trees/REV (tracing off).
# Prepare here: ../shared/device/prepare-deps.sh && bash scripts/stage-mpi.sh; for the A/B,
# mkdir -p .trees/REV && git archive REV | tar -x -C .trees/REV. Run with carry
# [".devdeps", ".trees/REV"]:   BEFORE=REV bash scripts/gpu-mpi.sh
# Logs: $OUT/summary.txt and $OUT/logs.tgz.
export CMAKE_PREFIX_PATH=$PWD/.devdeps/root/usr
export LD_LIBRARY_PATH=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
# shellcheck source=scripts/mpi-env.sh
source scripts/mpi-env.sh || exit 1
export GPU_CMAKE_ARGS="-DTANDEM_MPI=ON $TANDEM_MPI_CMAKE_ARGS"
# shellcheck source=scripts/gpu-common.sh
source scripts/gpu-common.sh
grep -E "MPI" "$OUT/build.log" | head -5 | tee -a "$S"

log "ctest (MPI tests, and the rest)"
ctest --test-dir $A --output-on-failure -j8 >"$OUT/ctest.log" 2>&1
grep -E "tests passed|Failed|\*\*\*|mpi" "$OUT/ctest.log" | tail -20 | tee -a "$S"

log "mpi_pipeline on the GPU"
for np in 2 3; do
	timeout 120 mpirun -np $np $A/examples/mpi_pipeline >"$OUT/mpi-pipeline-$np.log" 2>&1
	echo "-- np $np exit $?: $(tail -3 "$OUT/mpi-pipeline-$np.log" | tr '\n' ' ')" | tee -a "$S"
done

log "mpi-pingpong"
timeout 200 mpirun -np 2 $A/perf/tandem-bench mpi-pingpong --iters 2000 --json \
	>"$OUT/mpi-pingpong.jsonl" 2>"$OUT/mpi-pingpong.err"
echo "exit $?" | tee -a "$S"
python3 - "$OUT/mpi-pingpong.jsonl" <<'PY' | tee -a "$S"
import json, sys
for l in open(sys.argv[1]):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    print("%-9s %8d B  p50 %9.2f us  p99 %9.2f us  cpu rank0 %.2f max %.2f" % (
        r["impl"], r["bytes"], r["p50_us"], r["p99_us"], r["cpu_rank0"], r["cpu_max"]))
PY

log "mpi-overlap"
for p in 1 2; do
	timeout 200 mpirun -np 2 $A/perf/tandem-bench mpi-overlap --requests 10000 --n 30 --reps 10 \
		--json >>"$OUT/mpi-overlap.jsonl" 2>>"$OUT/mpi-overlap.err"
	echo "pass $p exit $?" | tee -a "$S"
done
cat "$OUT/mpi-overlap.jsonl" | tee -a "$S"

log "mpi-scaling (one GPU: ranks share it)"
for np in 1 2 4; do
	timeout 200 mpirun -np $np $A/perf/tandem-bench mpi-scaling --tasks 20000 --kernel-us 100 \
		--workers 4 --reps 5 --json >>"$OUT/mpi-scaling.jsonl" 2>>"$OUT/mpi-scaling.err"
	echo "np $np exit $?" | tee -a "$S"
done
cat "$OUT/mpi-scaling.jsonl" | tee -a "$S"

log "idle: CPU of a rank with a context and nothing outstanding"
cat >/tmp/idle.c <<'C'
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#include "tandem.h"
#include "tandem_mpi.h"
int main(int argc, char **argv)
{
	tdm_mpi_init(&argc, &argv, NULL);
	tdm_executor *ex;
	tdm_executor_create(&ex, NULL);
	tdm_mpi *m;
	tdm_mpi_create(ex, NULL, &m);
	struct rusage a, b;
	getrusage(RUSAGE_SELF, &a);
	sleep(2);
	getrusage(RUSAGE_SELF, &b);
	double s = (b.ru_utime.tv_sec - a.ru_utime.tv_sec) + (b.ru_stime.tv_sec - a.ru_stime.tv_sec) +
	           ((b.ru_utime.tv_usec - a.ru_utime.tv_usec) + (b.ru_stime.tv_usec - a.ru_stime.tv_usec)) * 1e-6;
	printf("idle: %.3f%% of a core over 2 s (executor + mpi context)\n", s / 2 * 100);
	tdm_mpi_destroy(m);
	tdm_executor_destroy(ex);
	MPI_Finalize();
	return 0;
}
C
mpicc -O2 -Iinclude -o /tmp/idle /tmp/idle.c -L$A -ltandem_mpi -ltandem -Wl,-rpath,$PWD/$A &&
	timeout 30 mpirun -np 1 /tmp/idle 2>&1 | tail -2 | tee -a "$S"

ab_off
jsonl_summary
