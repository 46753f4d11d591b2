#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One call on the GPU machine: this tree built with CUDA, its tests (the cuda suites of the
# graph, DAG, edge, await and memory-error tests under compute-sanitizer memcheck too), its
# examples, `tandem-bench gpu-graph`, and gpu-throughput side by side with an earlier tree in
# .trees/BEFORE (built there from `git archive`), PASSES times in alternating order.
# Prepare here: ../shared/device/prepare-deps.sh; mkdir -p .trees/REV && git archive REV | tar -x
# -C .trees/REV (.trees ignored). Run with carry [".devdeps", ".trees/REV"]:
#   BEFORE=REV PASSES=3 bash scripts/gpu-check.sh
# Logs: $OUT/summary.txt and $OUT/logs.tgz (the device tool brings back 8 files at most).
source scripts/gpu-common.sh

log ctest
ctest --test-dir $A --output-on-failure -j8 >"$OUT/ctest.log" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -15 | tee -a "$S"

log memcheck
mc() {
	[ -x "$A/tests/$1" ] || { echo "no $1" | tee -a "$S"; return; }
	timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$A/tests/$1" --jobs 1 \
		--filter "$2" >"$OUT/memcheck-$1.log" 2>&1
	echo "memcheck $1 $2: exit $? $(grep 'ERROR SUMMARY' "$OUT/memcheck-$1.log" | tail -1)" \
		"$(grep -cE '\[PASS\]|Synthesis' "$OUT/memcheck-$1.log")" | tee -a "$S"
}
mc test_graph 'graph_cuda/*'
mc test_dag 'dag_cuda/*'
mc test_edges 'edges_cuda/*'
mc test_memory_errors 'memory_errors_cuda/*'

log examples
for e in $A/examples/*; do
	[ -x "$e" ] || continue
	echo "-- $(basename "$e"): $(timeout 60 "$e" 2>&1 | tail -1)" | tee -a "$S"
done

log gpu-graph
timeout 240 $A/perf/tandem-bench gpu-graph --reps ${GRAPH_REPS:-100} --json \
	>"$OUT/gpu-graph.jsonl" 2>"$OUT/gpu-graph.err"
echo "gpu-graph exit $?" | tee -a "$S"
tail -3 "$OUT/gpu-graph.err" >>"$S"
python3 - "$OUT/gpu-graph.jsonl" <<'PY' >>"$S"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    keep = {k: v for k, v in r.items() if k not in ("bench", "backend", "device", "connections")}
    print(json.dumps(keep, separators=(",", ":")))
PY

if [ -n "$B" ]; then
	log "gpu-throughput A/B against $BEFORE"
	for p in $(seq 1 "${PASSES:-3}"); do
		for t in before after; do
			[ $((p % 2)) = 0 ] && t=$([ $t = before ] && echo after || echo before)
			bin=$A/perf/tandem-bench
			[ $t = before ] && bin=$B/perf/tandem-bench
			timeout 120 $bin gpu-throughput --workers 1,8 --kernel-us 1 --reps 5 --json \
				>>"$OUT/throughput-$t.jsonl" 2>>"$OUT/throughput-$t.err"
			echo "pass $p $t exit $?" >>"$S"
		done
	done
	python3 - "$OUT" <<'PY' | tee -a "$S"
import json, sys, statistics as st, collections
for t in ("before", "after"):
    d = collections.defaultdict(list)
    for l in open(f"{sys.argv[1]}/throughput-{t}.jsonl"):
        r = json.loads(l); d[(r["impl"], r["workers"])].append(r["tasks_per_s"])
    for k, v in sorted(d.items()):
        print(t, k, len(v), "median %.0f" % st.median(v), "min %.0f max %.0f" % (min(v), max(v)))
PY
fi
