#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/trace-check on traces made here: a good one (worker and GPU tracks, flows, counters)
passes; each broken copy of it fails, with the reason it was broken for."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "trace-check")
PID, MAIN, W0, W1, GPU = 7, 7, 8, 9, 1 << 30


def ev(ph, tid, ts, **kw):
    return dict(ph=ph, pid=PID, tid=tid, ts=ts, **kw)


def good():
    """Two workers, a GPU stream track, as base/trace.c writes them: a spawn from main, a task
    that launches a kernel, awaits it and resumes on the other worker, a nested run."""
    B = lambda tid, ts, name: ev("B", tid, ts, cat="tandem", name=name)
    E = lambda tid, ts: ev("E", tid, ts)
    flow = lambda ph, tid, ts, name, i: ev(ph, tid, ts, cat="flow", name=name, id=i,
                                           **({"bp": "e"} if ph == "f" else {}))
    events = [
        B(MAIN, 1.0, "spawn"), flow("s", MAIN, 1.0, "spawn", 2), E(MAIN, 1.0),
        B(W0, 2.0, "job"), flow("f", W0, 2.0, "spawn", 2),
        flow("s", W0, 3.0, "launch", 4),
        B(W0, 3.5, "child"), E(W0, 3.8),  # a run nested in another
        flow("s", W0, 4.0, "await", 3), E(W0, 4.5),
        B(W0, 5.0, "parked"), E(W0, 20.0),
        B(W1, 12.0, "job"), flow("f", W1, 12.0, "await", 3), flow("f", W1, 12.0, "done", 6),
        E(W1, 13.0),
        ev("X", GPU, 2.6, dur=0.6, cat="gpu", name="copy H2D", args={"bytes": 256}),
        ev("X", GPU, 3.2, dur=8.0, cat="gpu", name="kernel"),
        ev("X", GPU, 11.2, dur=0.5, cat="gpu", name="copy D2H", args={"bytes": 256}),
        flow("f", GPU, 3.2, "launch", 4), flow("s", GPU, 11.7, "done", 6),
        ev("C", W0, 4.0, cat="tandem", name="awaits outstanding", args={"value": 1}),
        ev("M", MAIN, 0.0, name="thread_name", args={"name": "main"}),
        ev("M", W0, 0.0, name="thread_name", args={"name": "tandem worker 0"}),
        ev("M", W1, 0.0, name="thread_name", args={"name": "tandem worker 1"}),
        ev("M", GPU, 0.0, name="thread_name", args={"name": "GPU 0 stream normal 0"}),
        ev("M", 0, 0.0, name="process_name", args={"name": "tandem"}),
    ]
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"version": "0.5.0", "dropped": 0, "tasks_run": 3}}


def find(doc, **match):
    return next(e for e in doc["traceEvents"] if all(e.get(k) == v for k, v in match.items()))


class TraceCheck(unittest.TestCase):
    def run_check(self, doc, *args, raw=None):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(raw if raw is not None else json.dumps(doc, indent=None))
        try:
            r = subprocess.run([sys.executable, CHECK, f.name, *args], capture_output=True,
                               text=True, timeout=60)
        finally:
            os.unlink(f.name)
        return r.returncode, r.stdout + r.stderr

    def passes(self, doc, *args):
        rc, out = self.run_check(doc, *args)
        self.assertEqual(rc, 0, out)
        self.assertIn("trace-check: OK", out)
        return out

    def fails(self, doc, why, *args, raw=None):
        rc, out = self.run_check(doc, *args, raw=raw)
        self.assertEqual(rc, 1, out)
        self.assertIn("trace-check: FAIL", out)
        self.assertIn(why, out)

    def test_good(self):
        out = self.passes(good())
        self.assertIn("3 task spans", out)
        self.assertIn("3 GPU spans", out)
        self.assertIn("2 workers, 1 GPU tracks", out)
        self.passes(good(), "--tasks", "3", "--gpu-spans")
        self.passes(good(), "--tasks", "run")

    def test_no_tasks_run_skips(self):
        d = good()
        del d["otherData"]["tasks_run"]
        self.passes(d, "--tasks", "3")
        rc, out = self.run_check(d, "--tasks", "run")
        self.assertEqual(rc, 77, out)
        self.assertIn("no tasks_run", out)

    def unterminated(self, events, tail=""):
        """The array form as a run writes it: "[", then one event a line, each with a comma."""
        return "[               \n" + "".join(json.dumps(e) + ",\n" for e in events) + tail

    def test_unterminated_array(self):
        events = good()["traceEvents"]
        cut = events[:events.index(find(good(), ph="B", tid=W1))]  # W0 parked, still open
        for raw in (self.unterminated(events), self.unterminated(cut),
                    self.unterminated(cut, '{"ph":"B","pid":7,"ti'),  # a line cut by a kill
                    self.unterminated(events)[:-2] + "\n]\n"):  # an array, ended
            rc, out = self.run_check(None, raw=raw)
            self.assertEqual(rc, 0, out)
        rc, out = self.run_check(None, raw=self.unterminated(cut))
        self.assertIn("unterminated", out)
        # The flows whose other end is not in yet are allowed; a span still open is too.
        rc, out = self.run_check(None, "--tasks", "run", raw=self.unterminated(cut))
        self.assertEqual(rc, 77, out)
        bad = cut + [ev("E", W1, 30.0)]
        self.fails(None, "an E without its B", raw=self.unterminated(bad))

    def test_unterminated_flow_past_its_threads_record(self):
        # W1's spans in a chunk not written yet: a flow end on W1 cannot be checked in a cut
        # file, and is allowed there; in a finished file the same is an error.
        events = [e for e in good()["traceEvents"]
                  if not (e.get("tid") == W1 and e["ph"] in ("B", "E", "X"))]
        rc, out = self.run_check(None, raw=self.unterminated(events))
        self.assertEqual(rc, 0, out)
        d = good()
        d["traceEvents"] = events
        self.fails(d, "lies in no span")

    def test_not_json(self):
        self.fails(None, "not a JSON file", raw=json.dumps(good())[:-20])
        self.fails(None, "no \"traceEvents\"", raw='{"events": []}')

    def test_missing_fields(self):
        for match, field, why in [
            (dict(ph="B", name="job", tid=W1), "name", 'has no "name"'),
            (dict(ph="E", tid=W1), "ts", 'has no "ts"'),
            (dict(ph="X", name="kernel"), "dur", 'has no "dur"'),
            (dict(ph="s", name="await"), "id", 'has no "id"'),
            (dict(ph="f", name="done"), "cat", 'has no "cat"'),
            (dict(ph="M", tid=W0), "args", 'has no "args"'),
            (dict(ph="C"), "name", 'has no "name"'),
            (dict(ph="B", name="parked"), "pid", 'has no "pid"'),
        ]:
            with self.subTest(match=match, field=field):
                d = good()
                del find(d, **match)[field]
                self.fails(d, why)

    def test_bad_values(self):
        d = good()
        find(d, ph="X", name="kernel")["dur"] = -1.0
        self.fails(d, "negative dur")
        d = good()
        find(d, ph="C")["args"] = {"value": "many"}
        self.fails(d, "args must be numbers")
        d = good()
        find(d, ph="B", name="parked")["ts"] = "5.0"
        self.fails(d, '"ts" is not a number')
        d = good()
        find(d, ph="B", name="parked")["ph"] = "Q"
        self.fails(d, "unknown phase")

    def test_unbalanced(self):
        d = good()
        d["traceEvents"].remove(find(d, ph="B", name="parked"))
        self.fails(d, "an E without its B")
        d = good()
        d["traceEvents"].append(ev("B", W1, 30.0, cat="tandem", name="job"))
        self.fails(d, "never ended")
        d = good()
        find(d, ph="E", tid=W0, ts=20.0)["ts"] = 4.9
        self.fails(d, "goes back in time")

    def test_overlap(self):
        d = good()
        find(d, ph="X", name="copy D2H")["ts"] = 10.9  # kernel ends at 11.2
        self.fails(d, "overlaps")
        d = good()  # a run on the GPU track, partly over the kernel
        d["traceEvents"] += [ev("B", GPU, 10.0, name="x"), ev("E", GPU, 12.0)]
        self.fails(d, "overlaps")
        d = good()  # nested exactly: fine
        d["traceEvents"].append(ev("X", GPU, 5.0, dur=6.2, cat="gpu", name="kernel"))
        self.passes(d)

    def test_flows(self):
        d = good()
        d["traceEvents"].remove(find(d, ph="f", name="await"))
        self.fails(d, "1 start(s) and 0 finish(es)")
        d = good()
        d["traceEvents"].remove(find(d, ph="s", name="done"))
        self.fails(d, "0 start(s) and 1 finish(es)")
        d = good()
        d["traceEvents"].append(ev("s", W1, 12.5, cat="flow", name="await", id=3))
        self.fails(d, "2 start(s)")
        d = good()
        find(d, ph="s", name="launch")["ts"] = 3.4  # after its finish at 3.2
        self.fails(d, "before it starts")
        d = good()
        find(d, ph="s", name="await")["ts"] = 4.7  # between the run and the park
        self.fails(d, "lies in no span")
        d = good()
        find(d, ph="f", name="done")["name"] = "await"
        self.fails(d, "goes on as flow/await")

    def test_task_count(self):
        self.fails(good(), "otherData.tasks_run is 3, not 4", "--tasks", "4")
        d = good()
        del d["otherData"]["tasks_run"]
        self.fails(d, "3 task spans, not 4", "--tasks", "4")
        d = good()
        d["otherData"]["tasks_run"] = 4
        self.fails(d, "but otherData.tasks_run is 4")
        self.fails(d, "otherData.tasks_run is 4, not 3", "--tasks", "3")
        d = good()
        d["otherData"]["dropped"] = 5
        self.passes(d)
        self.fails(d, "5 events were dropped", "--tasks", "3")

    def test_gpu_spans(self):
        d = good()
        d["traceEvents"] = [e for e in d["traceEvents"] if e["ph"] == "M" or (
            e["tid"] != GPU and e.get("name") not in ("launch", "done"))]
        self.passes(d)
        self.fails(d, "no GPU span", "--gpu-spans")


if __name__ == "__main__":
    unittest.main(verbosity=1)
