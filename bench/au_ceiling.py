"""The tool's own ceiling: AU with data in page cache and short compute steps.

With every batch already in memory, any AU below 100% is iogen's own overhead (step loop,
loader hand-off, sleep error). The baseline, timed in the same run with the same steps, is the
loop a time.sleep-based emulator (DLIO's) runs with data already in memory: hand over a batch
that is ready, time.sleep(compute); its AU is requested compute / wall time, so all it loses is
time.sleep's overshoot and the loop itself. No read threads: the baseline reads nothing.

    .venv/bin/python bench/au_ceiling.py --compute 0.01 --reps 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def sleep_loop_au(steps: int, compute_s: float, batches: list) -> float:
    """AU of the baseline: `steps` steps of (take a ready batch, time.sleep(compute)), in %."""
    t0 = time.perf_counter()
    for i in range(steps):
        batch = batches[i % len(batches)]
        batch[0]  # the batch is handed over, as a loader's next() would
        time.sleep(compute_s)
    return 100.0 * steps * compute_s / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compute", type=float, default=0.01, help="train.computation_time, seconds")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--files", type=int, default=256)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import command_line, machine_line

    from iogen.comm import SingleWorld
    from iogen.config import load_workload
    from iogen.runner import run

    work = tempfile.mkdtemp(prefix="iogen-au-")
    base = [f"dataset.data_folder={work}/data", f"output.folder={work}/results",
            f"dataset.num_files_train={args.files}", f"train.computation_time={args.compute}",
            "train.epochs=2", "metric.au=0"]
    run(load_workload("default", base + ["workflow.generate_data=True"]), SingleWorld(), quiet=True)
    before = machine_line()
    aus, errs, base_aus = [], [], []
    batches = [bytearray(4 << 20) for _ in range(3)]
    for _ in range(args.reps):
        out = run(load_workload("default", base + ["workflow.generate_data=False"]), SingleWorld(), quiet=True)
        train = out.summary["iogen"]["metrics"]["train"]
        aus.append(train["au_mean_percentage"])
        errs.append(statistics.mean(train["per_epoch"]["sleep_error_mean_ns"]) / 1e3)
        steps = sum(int(s) for s in train["per_epoch"].get("steps", [])) or args.files // 4 * 2
        base_aus.append(sleep_loop_au(steps, args.compute, batches))
    print(f"AU ceiling: default workload ({args.files} files x 1 MiB, batch 4, 2 read threads), page cache warm, "
          f"compute {args.compute * 1e3:g} ms/step, {args.reps} runs")
    print()
    print("| contender | AU % median (min-max) |")
    print("|---|---|")
    print(f"| iogen (whole run, calibrated sleep) | {statistics.median(aus):.2f} ({min(aus):.2f}-{max(aus):.2f}) |")
    print(f"| time.sleep loop, batches in memory (same steps) | {statistics.median(base_aus):.2f} "
          f"({min(base_aus):.2f}-{max(base_aus):.2f}) |")
    print()
    print(f"iogen - baseline: {statistics.median(a - b for a, b in zip(aus, base_aus)):+.2f} AU points (median); "
          f"iogen's mean sleep overshoot {statistics.median(errs):.1f} us")
    print(f"before: {before}")
    print(f"after: {machine_line()}")
    print(f"command: {command_line(__file__, argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
