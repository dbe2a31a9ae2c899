"""Start-up costs: `iogen --help` against a bare interpreter, and the time to the first step of a run.

    .venv/bin/python bench/startup.py --reps 10

Time to first step = from spawning `iogen run default` to the first step's t_request, placed
in wall-clock time with the step log's header (data generated beforehand, so only start-up,
config, planning and loader set-up are counted).
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def wall(cmd) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    from iogen.common.steplog import read_steplog

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import command_line, machine_line

    load_before = machine_line()

    py = [sys.executable]
    os.environ["PYTHONSAFEPATH"] = "1"  # measure the installed package, not a checkout beside cwd
    bare = [wall(py + ["-c", "pass"]) for _ in range(args.reps)]
    helps = [wall(py + ["-m", "iogen", "--help"]) for _ in range(args.reps)]
    work = tempfile.mkdtemp(prefix="iogen-startup-")
    common = ["default", f"dataset.data_folder={work}/data", f"output.folder={work}/results", "--quiet"]
    subprocess.run(py + ["-m", "iogen", "datagen", *common], check=True, capture_output=True)
    firsts = []
    for _ in range(args.reps):
        before = set(glob.glob(f"{work}/results/*"))
        t0_ns = time.time_ns()
        subprocess.run(py + ["-m", "iogen", "run", *common, "workflow.generate_data=False", "metric.au=0"],
                       check=True, capture_output=True)
        (run_dir,) = set(glob.glob(f"{work}/results/*")) - before
        header, rows = read_steplog(os.path.join(run_dir, "steps", "rank-00000.steps"))
        first_wall_ns = int(rows["t_request"][0]) - int(header["mono_start_ns"]) + int(header["wall_start_ns"])
        firsts.append((first_wall_ns - t0_ns) / 1e9)
    med = statistics.median
    print(f"start-up, {args.reps} repetitions, medians")
    print()
    print("| what | seconds |")
    print("|---|---|")
    print(f"| `python -c pass` | {med(bare):.3f} |")
    print(f"| `iogen --help` | {med(helps):.3f} |")
    print(f"| `iogen run default` to its first step (native loader, data present) | {med(firsts):.3f} |")
    print()
    print(f"before: {load_before}")
    print(f"after: {machine_line()}")
    print(f"command: {command_line(__file__, argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
