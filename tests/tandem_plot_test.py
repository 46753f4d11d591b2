#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/tandem-plot refuses a wrong or malformed input file (missing, not JSON, empty, another
subcommand's data, rows without their fields) with exit status 2 and one line on stderr, never a
traceback; and draws good files (each subcommand once, so that the refusals are not all it does).
Exits 77 (skipped) where matplotlib is missing: tandem-plot then refuses everything alike."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "tandem-plot")

FIB = {"bench": "fib", "impl": "tandem", "threads": 1, "n": 20, "reps": 3, "median_ms": 1.5,
       "min_ms": 1.2, "cpus": 2}
LAT = {"bench": "gpu-latency", "impl": "tandem", "workers": 1, "outstanding": 0, "min_us": 5.0,
       "p50_us": 8.0, "p99_us": 20.0, "max_us": 40.0,
       "cdf_p": [0, 0.5, 0.99, 1], "cdf_us": [5.0, 8.0, 20.0, 40.0]}
PIPE = {"bench": "pipeline", "impl": "tandem", "config": "copy-bound", "seconds": 0.5,
        "runs": [0.4, 0.5, 0.6]}
TRACE = {"traceEvents": [
    {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "tandem worker 0"}},
    {"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 5.0, "name": "job", "cat": "tandem"}]}


class TandemPlot(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def file(self, name, content):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb" if isinstance(content, bytes) else "w") as fh:
            fh.write(content)
        return path

    def jsonl(self, name, *rows):
        return self.file(name, "".join(json.dumps(r) + "\n" for r in rows))

    def run_plot(self, what, *inputs):
        out = os.path.join(self.dir.name, "out.png")
        return subprocess.run([sys.executable, PLOT, what, *inputs, "-o", out],
                              capture_output=True, text=True, timeout=120)

    def refused(self, what, path, says):
        p = self.run_plot(what, path)
        with self.subTest(what=what, file=os.path.basename(path)):
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            lines = p.stderr.splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertTrue(lines[0].startswith("tandem-plot: "), lines[0])
            self.assertIn(says, lines[0])

    def test_missing_file(self):
        missing = os.path.join(self.dir.name, "no-such-file.jsonl")
        for what in ("timeline", "scaling", "latency", "pipeline"):
            self.refused(what, missing, "No such file")

    def test_empty_file(self):
        empty = self.file("empty.jsonl", "")
        blank = self.file("blank.json", "\n  \n")
        for what in ("timeline", "scaling", "latency", "pipeline"):
            self.refused(what, empty, "empty")
            self.refused(what, blank, "empty")

    def test_not_json(self):
        text = self.file("notes.txt", "fib 30: 83 ms\n")
        binary = self.file("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
        for what in ("timeline", "scaling", "latency", "pipeline"):
            self.refused(what, text, "not JSON")
            self.refused(what, binary, "not text")

    def test_another_subcommands_data(self):
        trace = self.file("trace.json", json.dumps(TRACE, indent=1))
        rows = self.jsonl("cpu.jsonl", FIB, dict(FIB, threads=2))
        for what in ("scaling", "latency", "pipeline"):
            self.refused(what, trace, "a trace, not tandem-bench --json lines")
        self.refused("timeline", rows, "not a trace")
        self.refused("latency", rows, "no gpu-latency rows")
        self.refused("pipeline", rows, "no pipeline rows")
        self.refused("scaling", self.jsonl("lat.jsonl", LAT), "no gpu-throughput")
        self.refused("timeline", self.file("obj.json", '{"bench": "fib"}'), "not a trace")
        self.refused("timeline", self.file("nums.json", "[1, 2]"), "other than events")

    def test_malformed_rows(self):
        no_field = {k: v for k, v in LAT.items() if k != "p50_us"}
        self.refused("latency", self.jsonl("a.jsonl", no_field), 'without "p50_us"')
        self.refused("scaling", self.jsonl("b.jsonl", dict(FIB, median_ms="fast")),
                     '"median_ms" is "fast", not a number')
        self.refused("scaling", self.jsonl("c.jsonl", FIB, [1, 2]), "not a tandem-bench")
        self.refused("scaling", self.jsonl("d.jsonl", {"impl": "x"}), 'no "bench"')
        self.refused("scaling", self.file("e.jsonl", json.dumps(FIB) + "\n{\"bench\":\n"),
                     "e.jsonl:2: not JSON")
        bad_cdf = dict(LAT, cdf_p=[0, 1], cdf_us=[1.0])
        self.refused("latency", self.jsonl("f.jsonl", bad_cdf), "cdf_p")

    def test_good_files_draw(self):
        trace = self.file("trace.json", json.dumps(TRACE))
        cut = self.file("cut.json", json.dumps(TRACE["traceEvents"])[:-1] + ",\n")
        for what, path in (("timeline", trace), ("timeline", cut),
                           ("scaling", self.jsonl("cpu.jsonl", FIB, dict(FIB, threads=2))),
                           ("latency", self.jsonl("lat.jsonl", LAT, PIPE)),
                           ("latency", self.jsonl("old.jsonl", {k: v for k, v in LAT.items()
                                                                if not k.startswith("cdf")})),
                           ("pipeline", self.jsonl("pipe.jsonl", PIPE))):
            with self.subTest(what=what, file=os.path.basename(path)):
                p = self.run_plot(what, path)
                self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                      capture_output=True).returncode != 0:
        print("matplotlib not found: skipped")
        sys.exit(77)
    unittest.main()
