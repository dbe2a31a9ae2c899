"""The tool's own ceiling: AU with data in page cache and short compute steps.

With every batch already in memory, any AU below 100% is iogen's own overhead (step loop,
loader hand-off, sleep error). DLIO's time.sleep-based emulation reaches 15-20% lower AU here.

    .venv/bin/python bench/au_ceiling.py --compute 0.01 --reps 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compute", type=float, default=0.01, help="train.computation_time, seconds")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--files", type=int, default=256)
    args = ap.parse_args(argv)
    from iogen.comm import SingleWorld
    from iogen.config import load_workload
    from iogen.runner import run

    work = tempfile.mkdtemp(prefix="iogen-au-")
    base = [f"dataset.data_folder={work}/data", f"output.folder={work}/results",
            f"dataset.num_files_train={args.files}", f"train.computation_time={args.compute}",
            "train.epochs=2", "metric.au=0"]
    run(load_workload("default", base + ["workflow.generate_data=True"]), SingleWorld(), quiet=True)
    aus, errs = [], []
    for _ in range(args.reps):
        out = run(load_workload("default", base + ["workflow.generate_data=False"]), SingleWorld(), quiet=True)
        train = out.summary["iogen"]["metrics"]["train"]
        aus.append(train["au_mean_percentage"])
        errs.append(statistics.mean(train["per_epoch"]["sleep_error_mean_ns"]) / 1e3)
    print(f"AU ceiling: default workload ({args.files} files x 1 MiB, batch 4, 2 read threads), page cache warm, "
          f"compute {args.compute * 1e3:g} ms/step, {args.reps} runs")
    print()
    print(f"AU median {statistics.median(aus):.2f}% (min {min(aus):.2f}, max {max(aus):.2f}); "
          f"mean sleep overshoot {statistics.median(errs):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
