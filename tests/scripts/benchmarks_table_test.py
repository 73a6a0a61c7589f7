#!/usr/bin/env python3
"""scripts/benchmarks_table.py on a scratch records file and page: --record takes the bench's
last JSON line, fills {key} from it, replaces a claim where it stands, and --check sees a stale
table. The repository's own table is checked by the ctest benchmarks_table."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "benchmarks_table.py")
PAGE = """# Bench

<!-- benchmarks-table:begin (scripts/benchmarks_table.py writes this table) -->
<!-- benchmarks-table:end -->

after
"""


class BenchmarksTableTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.records = os.path.join(self.dir.name, "results.jsonl")
        self.doc = os.path.join(self.dir.name, "BENCH.md")
        open(self.records, "w").close()
        with open(self.doc, "w") as f:
            f.write(PAGE)

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, *args, stdin=""):
        return subprocess.run([sys.executable, SCRIPT, "--records", self.records, "--doc", self.doc,
                               *args], input=stdin, capture_output=True, text=True)

    def record(self, claim, output, figure="{rate} Gbit/s"):
        return self.run_script("--record", claim, "--command", "bash bench/x.sh 2GiB", "--area", "net",
                               "--figure", figure, "--reference", "iperf3 {ref.rate} → **{ratio}**",
                               "--goal", "≥ 0.9", "--date", "2026-12-06", stdin=output)

    def test_record_renders_and_checks(self):
        bench_output = 'progress\n{"rate": 9.5, "ref": {"rate": 10.0}, "ratio": 0.95}\n'
        result = self.record("loopback TCP", bench_output)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.records) as f:
            saved = [json.loads(line) for line in f]
        self.assertEqual(len(saved), 1)
        self.assertEqual(saved[0]["figure"], "9.5 Gbit/s")
        self.assertEqual(saved[0]["reference"], "iperf3 10.0 → **0.95**")
        self.assertEqual(saved[0]["json"]["ratio"], 0.95)
        self.assertEqual(saved[0]["command"], ["bash bench/x.sh 2GiB"])
        page = open(self.doc).read()
        self.assertIn("| net | loopback TCP | 9.5 Gbit/s | iperf3 10.0 → **0.95** | ≥ 0.9 | "
                      "`bash bench/x.sh 2GiB` | — |", page)
        self.assertTrue(page.endswith("<!-- benchmarks-table:end -->\n\nafter\n"))
        self.assertEqual(self.run_script("--check").returncode, 0)

        # A second record of the same claim replaces the first.
        self.record("loopback TCP", '{"rate": 9.9, "ref": {"rate": 10.0}, "ratio": 0.99}\n')
        with open(self.records) as f:
            saved = [json.loads(line) for line in f]
        self.assertEqual([r["figure"] for r in saved], ["9.9 Gbit/s"])

        # A hand edit between the markers makes the page stale.
        page = open(self.doc).read().replace("9.9 Gbit/s", "11 Gbit/s")
        with open(self.doc, "w") as f:
            f.write(page)
        self.assertEqual(self.run_script("--check").returncode, 1)
        self.assertEqual(self.run_script().returncode, 0)
        self.assertEqual(self.run_script("--check").returncode, 0)

    def test_record_refuses_output_without_json_or_key(self):
        self.assertNotEqual(self.record("c", "no json here\n").returncode, 0)
        self.assertNotEqual(self.record("c", '{"rate": 1}\n', figure="{missing}").returncode, 0)
        self.assertEqual(open(self.records).read(), "")


if __name__ == "__main__":
    unittest.main()
