#!/usr/bin/env python3
"""The table of docs/BENCHMARKS.md, rendered from bench/results.jsonl.

bench/results.jsonl holds one JSON object per line, one per claim: the claim, the figure, the
reference measured in the same run, the goal, the command(s) that reproduce it, a link to the
details, the date and the machine, and where kept the bench's last JSON line ("json"). The table
in docs/BENCHMARKS.md lies between the two marker comments below and is written only by this
script.

  scripts/benchmarks_table.py            rewrite the table in docs/BENCHMARKS.md
  scripts/benchmarks_table.py --check    exit 1 if the table differs from the records
  BENCH ... | scripts/benchmarks_table.py --record "CLAIM" --command "BENCH ..." \\
      --figure "{key} Gbit/s" --reference "iperf3 {iperf3} → {ratio}" [--goal G] [--area A]
                                         add (or replace) the record of CLAIM from the bench's
                                         output, then rewrite the table

--record reads the bench's output on stdin and keeps its last line that is a JSON object.
{key} in --figure, --reference and --goal is that object's value (a.b for nested objects);
the record keeps the object itself under "json". A record with the same claim is replaced
where it stands; a new claim goes at the end, or after the last record of its --area.

Python 3 standard library only.
"""

import argparse
import datetime
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.path.join(ROOT, "bench", "results.jsonl")
DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")
BEGIN = "<!-- benchmarks-table:begin (scripts/benchmarks_table.py writes this table) -->"
END = "<!-- benchmarks-table:end -->"
DEFAULT_MACHINE = "vm-2core"
COLUMNS = ["area", "claim", "figure", "reference (same run)", "goal", "command", "details"]
REQUIRED = ["area", "claim", "figure", "reference", "goal", "command", "details", "date", "machine"]


def load_records(path):
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{number}: not JSON: {e}")
            missing = [k for k in REQUIRED if k not in record]
            if missing:
                raise SystemExit(f"{path}:{number}: missing {', '.join(missing)}")
            if not isinstance(record["command"], list) or not record["command"]:
                raise SystemExit(f"{path}:{number}: command must be a non-empty list")
            records.append(record)
    claims = [r["claim"] for r in records]
    duplicates = sorted({c for c in claims if claims.count(c) > 1})
    if duplicates:
        raise SystemExit(f"{path}: claims recorded twice: {duplicates}")
    return records


def save_records(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def cell(text):
    return str(text).replace("\n", " ").replace("|", "\\|")


def render_table(records):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    previous = None
    for r in records:
        if r["command"] == previous:
            command = "same as above"
        else:
            command = "; ".join(f"`{c}`" for c in r["command"])
        previous = r["command"]
        row = [r["area"], r["claim"], r["figure"], r["reference"], r["goal"], command, r["details"]]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def render_doc(doc_text, records, doc_path=DOC):
    if doc_text.count(BEGIN) != 1 or doc_text.count(END) != 1:
        raise SystemExit(f"{doc_path}: needs exactly one of each marker:\n{BEGIN}\n{END}")
    head, rest = doc_text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + render_table(records) + END + tail


def last_json_object(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise SystemExit("--record: no line of the input is a JSON object (a bench's last line)")


def fill(template, figures):
    def value(match):
        node = figures
        for part in match.group(1).split("."):
            if not isinstance(node, dict) or part not in node:
                raise SystemExit(f"--record: the bench's JSON has no {match.group(1)!r}")
            node = node[part]
        return str(node)

    return re.sub(r"\{([A-Za-z0-9_.]+)\}", value, template)


def make_record(args, figures):
    return {
        "area": args.area,
        "claim": args.record,
        "figure": fill(args.figure, figures),
        "reference": fill(args.reference, figures),
        "goal": fill(args.goal, figures),
        "command": args.command,
        "details": args.details,
        "date": args.date or datetime.date.today().isoformat(),
        "machine": args.machine,
        "json": figures,
    }


def insert(records, record):
    for i, r in enumerate(records):
        if r["claim"] == record["claim"]:
            records[i] = record
            return records
    last = max((i for i, r in enumerate(records) if r["area"] == record["area"]), default=None)
    if last is None:
        records.append(record)
    else:
        records.insert(last + 1, record)
    return records


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if docs/BENCHMARKS.md's table is stale")
    p.add_argument("--records", default=RECORDS, help="the records file (default bench/results.jsonl)")
    p.add_argument("--doc", default=DOC, help="the page holding the table (default docs/BENCHMARKS.md)")
    p.add_argument("--record", metavar="CLAIM", help="record CLAIM from the bench output on stdin")
    p.add_argument("--command", action="append", help="the command that reproduces it (repeatable)")
    p.add_argument("--figure", default="", help="the figure; {key} takes the bench JSON's value")
    p.add_argument("--reference", default="—", help="the reference measured in the same run")
    p.add_argument("--goal", default="—")
    p.add_argument("--area", default="other")
    p.add_argument("--details", default="—", help="a markdown link to the write-up")
    p.add_argument("--date", help="the day of the run (default today)")
    p.add_argument("--machine", default=DEFAULT_MACHINE)
    args = p.parse_args(argv)

    records = load_records(args.records)
    if args.record:
        if args.check:
            p.error("--record and --check do not go together")
        if not args.command or not args.figure:
            p.error("--record needs --command and --figure")
        records = insert(records, make_record(args, last_json_object(sys.stdin.read())))
        save_records(args.records, records)

    with open(args.doc, encoding="utf-8") as f:
        current = f.read()
    wanted = render_doc(current, records, args.doc)
    if args.check:
        if current != wanted:
            print(f"{args.doc} is stale: run scripts/benchmarks_table.py", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        with open(args.doc, "w", encoding="utf-8") as f:
            f.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
