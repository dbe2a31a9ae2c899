"""The summary table of a `bench/run_all.sh` output folder: one row per benchmark's output.

Each row: the benchmark (its output file), the commit and date of the session (run_all.sh's
`meta`), the load before and after (the script's `before:`/`after:` lines, else its `cool-down:`
line), the command that reproduces it, and whether its figures count toward a target (the
`cool-down:` verdict of bench/benchenv.py). The figures themselves are in each output file; the
summary table of docs/benchmarks.md is filled from both.

    .venv/bin/python bench/summarize.py OUT_DIR > OUT_DIR/summary.md
"""
from __future__ import annotations

import os
import re
import sys

LOAD = re.compile(r"load average ([\d.]+) / ([\d.]+) / ([\d.]+)")
COOL = re.compile(r"^cool-down: .*?load before ([\d.]+) / [\d.]+ / [\d.]+, after ([\d.]+) / [\d.]+ / [\d.]+; "
                  r"(COUNTS|does NOT count) toward a target: (.*)$")


def read_output(text: str) -> dict:
    """What one script's output says about itself: load before/after (1 min), command, verdict."""
    out = {"load_before": None, "load_after": None, "command": None, "counts": None, "why": None}
    for line in text.splitlines():
        m = COOL.match(line)
        if m:
            out["counts"] = m.group(3) == "COUNTS"
            out["why"] = m.group(4)
            out["load_before"] = out["load_before"] or m.group(1)
            out["load_after"] = m.group(2)
        elif line.startswith("before:") and LOAD.search(line):
            out["load_before"] = LOAD.search(line).group(1)
        elif line.startswith("command:"):
            out["command"] = line.split(":", 1)[1].strip()
    return out


def summary(folder: str) -> str:
    meta = {}
    if os.path.exists(os.path.join(folder, "meta")):
        with open(os.path.join(folder, "meta"), encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.strip().partition(" ")
                meta[key] = value
    rows = ["| benchmark | commit | date | load before → after (1 min) | reproduce | counts |",
            "|---|---|---|---|---|---|"]
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".md") or name in ("summary.md", "micro.md"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as fh:
            o = read_output(fh.read())
        counts = ("n/a (no cool-down line: the script failed or predates it)" if o["counts"] is None
                  else "yes" if o["counts"] else f"no: {o['why']}")
        rows.append(f"| {name[:-3]} | {meta.get('commit', 'unknown')} | {meta.get('started', 'unknown')} | "
                    f"{o['load_before'] or '?'} → {o['load_after'] or '?'} | `{o['command'] or '?'}` | {counts} |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not os.path.isdir(args[0]):
        print("usage: bench/summarize.py OUT_DIR (a bench/run_all.sh output folder)", file=sys.stderr)
        return 2
    sys.stdout.write(summary(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
