#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One call on the GPU machine for issue 21, the device scheduler (tandem_dsched.h): this tree
# built with CUDA; test_dsched (its cuda suite), then that suite under compute-sanitizer memcheck
# and racecheck (the trapping-handler test left out: its trap is the point), with fewer items;
# examples/gpu_dsched; `tandem-bench gpu-dsched` (rtt, rate, cost, then the crossover sweep with
# shorter rounds); and which CUDA calls wait for a running scheduler (each `beside` probe in a
# process of its own: one that waits ends its process). Every stage has a timeout, and a stage
# is skipped when the budget (5.5 minutes from the start, the build included) would not hold it.
# Prepare here: ../shared/device/prepare-deps.sh. Run with carry [".devdeps"]:
#   bash scripts/gpu-dsched.sh
# Logs: $OUT/summary.txt, and $OUT/logs.tgz (every log, the benchmark's JSON among them).
START=$(date +%s)
BUDGET=${BUDGET:-330}
source scripts/gpu-common.sh
# stage SECONDS NAME: true when SECONDS more fit the budget; else says it skipped NAME.
stage() {
	local l=$((BUDGET - ($(date +%s) - START)))
	if [ "$l" -lt "$1" ]; then
		echo "skipped $2: ${l}s left of the budget, it may take $1s" | tee -a "$S"
		return 1
	fi
	return 0
}
# left: seconds left of the budget.
left() { echo $((BUDGET - ($(date +%s) - START))); }
T=$A/tests/test_dsched
B=$A/perf/tandem-bench
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# The kernel alone, from one host thread (perf/probes/probe_dsched_rtt.cu): its default build in
# both scopes (TDM_DSCHED_SCOPE_DEVICE, then SYSTEM) and with a queue of 64 items, and with each
# item's stages stamped.
if [ "${PROBE:-1}" = 1 ] && stage ${PROBE_SECS:-60} "probe_dsched_rtt"; then
	log "probe_dsched_rtt: the kernel from one host thread, no executor"
	P=perf/probes/probe_dsched_rtt.cu
	# PROBE_VARIANTS: more builds, NAME=FLAGS each (FLAGS with commas for spaces).
	VARIANTS="w4= stages=-DSTAGES ${PROBE_VARIANTS:-}"
	for nv in $VARIANTS; do
		f=${nv#*=}
		# shellcheck disable=SC2086
		nvcc -O2 -arch=sm_90 -I include ${f//,/ } -o "/tmp/pdr-${nv%%=*}" $P &
	done
	wait
	# Runs: BUILD[:SCOPE[:CAPACITY]] (probe_dsched_rtt's arguments after the round trips).
	for run in ${PROBE_BASE:-w4 w4:sys w4:dev:64 stages stages:dev:64} ${PROBE_RUNS:-}; do
		IFS=: read -r v scope cap <<<"$run"
		echo "run $run" >>"$OUT/probe.txt"
		# shellcheck disable=SC2086
		timeout 40 /tmp/pdr-$v 20000 ${scope:-dev} $cap >>"$OUT/probe.txt" 2>&1
	done
	tee -a "$S" <"$OUT/probe.txt"
fi

# What the form of a look costs a round trip (perf/probes/probe_dsched_item.cu): with ITEM=1.
if [ "${ITEM:-0}" = 1 ] && stage 30 "probe_dsched_item"; then
	log "probe_dsched_item: one warp, one host thread, by the form of a look"
	nvcc -O2 -arch=sm_90 -o /tmp/pdi perf/probes/probe_dsched_item.cu &&
		timeout 25 /tmp/pdi 20000 2>&1 | tee -a "$S"
fi

if stage 30 test_dsched; then
	log "test_dsched (sim and cuda suites)"
	timeout $(($(left) < 120 ? $(left) - 10 : 110)) $T --jobs 4 --verbose \
		>"$OUT/test_dsched.log" 2>&1
	echo "test_dsched exit $?" | tee -a "$S"
	grep -E "FAIL|SKIP|Synthesis" "$OUT/test_dsched.log" | tail -15 | tee -a "$S"
fi

if [ -x "$CS" ]; then
	for tool in memcheck racecheck; do
		stage 70 "compute-sanitizer $tool" || continue
		log "compute-sanitizer $tool: the cuda suite but its trap"
		TDM_TEST_DSCHED_ITEMS=800 timeout 65 "$CS" --tool $tool --error-exitcode 9 \
			--target-processes all $T --jobs 1 --filter 'dsched_cuda/!(trap*)' \
			>"$OUT/$tool.log" 2>&1
		echo "$tool exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" |
			sort | uniq -c | tr '\n' ' ')" | tee -a "$S"
		grep -E "Synthesis|FAIL" "$OUT/$tool.log" | tail -5 | tee -a "$S"
	done
else
	echo "no compute-sanitizer" | tee -a "$S"
fi

if stage 20 examples/gpu_dsched; then
	log "examples/gpu_dsched"
	timeout 15 $A/examples/gpu_dsched 2>&1 | tail -3 | tee -a "$S"
fi

# bench SECONDS PARTS ARGS...: tandem-bench gpu-dsched --parts PARTS, its JSON into dsched.jsonl.
bench() {
	local secs=$1 parts=$2
	shift 2
	stage $((secs + 5)) "gpu-dsched $parts" || return
	log "tandem-bench gpu-dsched --parts $parts $*"
	timeout $secs $B gpu-dsched --parts $parts --json "$@" >>"$OUT/dsched.jsonl" \
		2>>"$OUT/dsched.err"
	echo "exit $?" | tee -a "$S"
}
bench 30 rtt
bench 30 rtt --capacity 64
bench 90 rate --steps 1000
bench 25 cost
bench 45 crossover --steps 300 --rounds 1
tail -3 "$OUT/dsched.err" 2>/dev/null | tee -a "$S"

if stage 40 "gpu-dsched beside"; then
	log "which CUDA calls wait for a running scheduler"
	for p in launch+sync cudaMallocAsync+cudaFreeAsync cudaMalloc cudaHostAlloc cudaMemcpy \
		cudaFreeHost cudaFree cudaDeviceSynchronize; do
		stage 12 "probe $p" || break
		timeout 10 $B gpu-dsched --parts beside --probe "$p" >"$OUT/beside-$p.log" 2>&1
		echo "$p: exit $? $(grep -E ' us$|waits|error' "$OUT/beside-$p.log" | tail -1)" |
			tee -a "$S"
	done
fi

log "figures"
touch "$OUT/dsched.jsonl"
python3 - "$OUT/dsched.jsonl" <<'PY' | tee -a "$S"
import json, sys
rows = []
for l in open(sys.argv[1]):
    try:
        rows.append(json.loads(l))
    except ValueError:
        pass
if rows:
    r0 = rows[0]
    print("device %s, scheduler %s blocks x %s warps" % (r0.get("device"), r0.get("blocks"),
                                                         r0.get("warps")))
rate = {}
for r in rows:
    if r["part"] == "rate":
        rate[(r["workers"], r["step_us"], r["impl"])] = r["steps_per_s"]
impls = ["dsched", "dsched-batch", "launch", "graph", "floor"]
if rate:
    print("rate, steps/s:  workers step_us " + " ".join("%13s" % i for i in impls))
    for w, s in sorted({(k[0], k[1]) for k in rate}):
        print("               %7d %7d " % (w, s) +
              " ".join("%13.0f" % rate.get((w, s, i), 0) for i in impls) +
              "   dsched/launch %.1fx" % (rate.get((w, s, "dsched"), 0) /
                                          max(rate.get((w, s, "launch"), 1), 1)))
for r in rows:
    if r["part"] == "rtt":
        print("rtt %-8s p50 %7.2f us  p99 %7.2f us  min %6.2f us%s%s" % (
            r["impl"], r["p50_us"], r["p99_us"], r["min_us"],
            "  p50-floor %+.2f us" % r["p50_minus_floor_us"] if "p50_minus_floor_us" in r else "",
            "  awaits %d, direct %d" % (r["awaits"], r["direct"]) if "awaits" in r else "")
            + "  (capacity %s)" % r.get("capacity"))
    elif r["part"] == "cost":
        print("cost: %s" % {k: r[k] for k in r if k.endswith("_ms") or k.startswith("ratio")
                            or k in ("sms", "sm_share")})
    elif r["part"] == "crossover":
        if r["impl"] == "summary":
            print("crossover: %s us (launch at %.0f%% of dsched), workers %d" % (
                r["crossover_us"], 100 * r["share"], r["workers"]))
        else:
            print("sweep %5d us: dsched %11.0f launch %11.0f graph %11.0f launch/dsched %.2f" % (
                r["step_us"], r["dsched_steps_per_s"], r["launch_steps_per_s"],
                r["graph_steps_per_s"], r["ratio_launch_dsched"]))
PY
echo "total $(($(date +%s) - START)) s" | tee -a "$S"
