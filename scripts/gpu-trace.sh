#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One call on the GPU machine for issue 19's GPU half: this tree built with CUDA, its tests
# (the trace's GPU spans printed), the examples traced and checked, gpu-throughput with 1 us
# kernels untraced against traced, and the cost of the hooks when off: fib and gpu-throughput
# side by side with an earlier tree in .trees/BEFORE, PASSES times in alternating order.
# Prepare here: ../shared/device/prepare-deps.sh; mkdir -p .trees/REV && git archive REV | tar -x
# -C .trees/REV (.trees ignored). Run with carry [".devdeps", ".trees/REV"]:
#   BEFORE=REV PASSES=3 bash scripts/gpu-trace.sh
# Logs: $OUT/summary.txt and $OUT/logs.tgz (the device tool brings back 8 files at most).
source scripts/gpu-common.sh

log "trace and metrics tests on cuda"
for t in test_trace test_metrics; do
	[ -x $A/tests/$t ] || continue
	timeout 200 $A/tests/$t --verbose >"$OUT/$t.log" 2>&1
	echo "$t exit $?" | tee -a "$S"
	grep -E "kernel spans|Synthesis|FAIL|metrics:" "$OUT/$t.log" | head -20 | tee -a "$S"
done

log ctest
ctest --test-dir $A --output-on-failure -j8 >"$OUT/ctest.log" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -15 | tee -a "$S"

log "examples traced"
for e in gpu_many pipeline gpu_graph; do
	TANDEM_TRACE=$OUT/$e.json timeout 120 $A/examples/$e >"$OUT/ex-$e.log" 2>&1
	echo "-- $e exit $?: $(tail -1 "$OUT/ex-$e.log")" | tee -a "$S"
	if [ -x scripts/trace-check ]; then
		python3 scripts/trace-check "$OUT/$e.json" 2>&1 | tail -3 | tee -a "$S"
	fi
	python3 - "$OUT/$e.json" <<'PY' | tee -a "$S"
import json, sys, collections, statistics as st
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        x[e["name"]].append(e["dur"])
lost = max([e["args"]["value"] for e in ev if e["ph"] == "C" and "lost" in e["name"]] or [0])
flows = collections.Counter(e["name"] for e in ev if e["ph"] == "s")
print(" ", d["otherData"], "lost", lost, dict(flows), {k: (len(v), round(st.median(v), 3)) for k, v in x.items()})
PY
done

log "pipeline with metrics"
timeout 300 $A/perf/tandem-bench pipeline --metrics --reps 5 --json >"$OUT/pipeline.jsonl" \
	2>"$OUT/pipeline.err"
echo "pipeline exit $?" | tee -a "$S"
grep -E '"pipeline-metrics"|"impl":"(tandem|bidir-copy|h2d-alone|d2h-alone)"' "$OUT/pipeline.jsonl" |
	python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    keep = ("bench", "impl", "config", "gb_per_s", "metrics_gb_per_s", "h2d_gbps_window",
            "d2h_gbps_window", "h2d_share", "d2h_share", "busy_fraction", "h2d_peak", "d2h_peak",
            "seconds", "window_seconds", "await_p50_ns", "await_p99_ns")
    print({k: r[k] for k in keep if k in r})' | tee -a "$S"

log "gpu-throughput 1 us: untraced against traced, and the trace's parts"
# on: the whole trace (launches past TANDEM_STAMPS_RATE untimed); all: every launch timed
# (TANDEM_STAMPS=all); nostamps: its CPU side alone (TANDEM_STAMPS=0).
for p in 1 2 3; do
	for mode in off on all nostamps; do
		case $mode in
		off) env= ;;
		on) env="TANDEM_TRACE=/tmp/tp.json TANDEM_TRACE_EVENTS=3000000" ;;
		nostamps) env="TANDEM_TRACE=/tmp/tp.json TANDEM_TRACE_EVENTS=3000000 TANDEM_STAMPS=0" ;;
		all) env="TANDEM_TRACE=/tmp/tp.json TANDEM_TRACE_EVENTS=3000000 TANDEM_STAMPS=all" ;;
		esac
		env $env timeout 200 $A/perf/tandem-bench gpu-throughput --workers 1,16 --kernel-us 1 \
			--reps 5 --json >>"$OUT/tp-$mode.jsonl" 2>>"$OUT/tp-$mode.err"
		echo "pass $p $mode exit $?" >>"$S"
	done
done
ls -la /tmp/tp.json >>"$S" 2>&1
tail -3 "$OUT/tp-on.err" >>"$S"

ab_off
jsonl_summary
