#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Side-by-side figures of two trees from scripts/gpu-ab.sh's JSON lines.

usage: ab-compare.py DIR   (DIR holds NAME-before.jsonl and NAME-after.jsonl)
Prints, for tandem's rows, the median over passes of each tree and the ratio after/before:
gpu-latency p50/p99 (lower is better), gpu-throughput tasks/s, pipeline overlap and ratios,
fib/skynet median ms and the ratio to the best baseline of the same run.
"""
import json, statistics, sys, os
from collections import defaultdict

d = sys.argv[1]

def rows(name, tree):
    p = os.path.join(d, f"{name}-{tree}.jsonl")
    if not os.path.exists(p):
        return []
    out = []
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out

def table(title, name, key, fields, select=lambda r: r.get("impl") == "tandem"):
    vals = defaultdict(lambda: defaultdict(list))
    for tree in ("before", "after"):
        for r in rows(name, tree):
            if not select(r):
                continue
            for f in fields:
                if r.get(f) is not None:
                    vals[(key(r), f)][tree].append(float(r[f]))
    print(f"\n{title}")
    print(f"{'config':44} {'field':18} {'before':>10} {'after':>10} {'after/before':>12}")
    for (k, f), v in sorted(vals.items(), key=lambda kv: str(kv[0])):
        if not v["before"] or not v["after"]:
            continue
        b, a = statistics.median(v["before"]), statistics.median(v["after"])
        print(f"{k:44} {f:18} {b:10.3f} {a:10.3f} {a / b if b else float('nan'):12.3f}")

table("gpu-latency (us; lower is better)", "latency",
      lambda r: f"workers={r['workers']} outstanding={r['outstanding']}", ["p50_us", "p99_us"])
table("gpu-throughput (tasks/s; higher is better)", "throughput",
      lambda r: f"workers={r['workers']} kernel_us={r['kernel_us']}", ["tasks_per_s"])
table("pipeline", "pipeline", lambda r: r["config"],
      ["overlap_efficiency", "vs_bidir", "vs_double_buffer", "vs_compute_alone", "seconds"])

# fib and skynet: tandem's median ms, and its ratio to the fastest baseline in the same run.
def cpu_ratios(tree):
    by = defaultdict(dict)
    for r in rows("cpu", tree):
        by[(r["bench"], r["threads"])][r["impl"]] = r["median_ms"]
    out = {}
    for k, impls in by.items():
        if "tandem" in impls:
            base = [v for i, v in impls.items() if i != "tandem"]
            out[k] = (impls["tandem"], min(base) / impls["tandem"] if base else None)
    return out
b, a = cpu_ratios("before"), cpu_ratios("after")
print("\nfib / skynet (tandem median ms; speed-up over the fastest baseline)")
print(f"{'config':44} {'before ms':>10} {'after ms':>10} {'after/before':>12} {'x before':>9} {'x after':>9}")
for k in sorted(set(a) & set(b)):
    print(f"{str(k):44} {b[k][0]:10.3f} {a[k][0]:10.3f} {a[k][0] / b[k][0]:12.3f} "
          f"{(b[k][1] or 0):9.2f} {(a[k][1] or 0):9.2f}")
