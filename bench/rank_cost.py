"""What one emulated accelerator (a rank) costs the host per step: CPU seconds per rank-step.

Runs `iogen run retinanet` (JPEG files, MLPerf Storage v3.0's batch and read threads unless
overridden) with `--ranks` ranks (under mpiexec when more than 1) for `--epochs-short` and
`--epochs-long` epochs, alternating, and takes the CPU time (user + system) of the whole process
tree (ranks, their reader threads and DataLoader workers, mpiexec) from RUSAGE_CHILDREN. The
difference between the long and the short runs, over the difference in their rank-steps, is the
cost of a step without the start-up (imports, calibration, workers, plan): what a host pays per
emulated accelerator per step, which decides how many accelerators a few cores can emulate.

    python bench/rank_cost.py --folder /scratch/iogen-bench --loaders native,pytorch --ranks 1,4
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", default=None, help="where the dataset and runs go (default: a temporary folder)")
    p.add_argument("--files", type=int, default=960)
    p.add_argument("--record-bytes", type=int, default=322_957)
    p.add_argument("--loaders", default="native,pytorch")
    p.add_argument("--ranks", default="1", help="comma-separated rank counts, e.g. 1,4")
    p.add_argument("--compute", type=float, default=0.04755, help="train.computation_time (s); b200's by default")
    p.add_argument("--epochs-short", type=int, default=1)
    p.add_argument("--epochs-long", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mpiexec", default=os.path.join(os.path.dirname(sys.executable), "mpiexec"))
    p.add_argument("extra", nargs="*", help="more iogen overrides (key=value)")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    before = machine_line()
    root = args.folder or tempfile.mkdtemp(prefix="iogen-bench-", dir=".")
    data = os.path.join(root, "data")
    base = [f"dataset.data_folder={data}", f"dataset.num_files_train={args.files}",
            f"dataset.record_length_bytes={args.record_bytes}", "dataset.record_length_bytes_stdev=0",
            f"train.computation_time={args.compute}", *args.extra]
    gen = subprocess.run([sys.executable, "-m", "iogen", "datagen", "retinanet", *base, "-q"],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        raise SystemExit(f"iogen datagen failed: {gen.stderr.strip()[-2000:]}")
    rows = []
    try:
        for loader in [x for x in args.loaders.split(",") if x]:
            for ranks in [int(x) for x in args.ranks.split(",") if x]:
                per, aus = [], []
                for _ in range(args.rounds):
                    got = {}
                    for epochs in (args.epochs_short, args.epochs_long):
                        over = [*base, f"reader.data_loader={loader}", f"train.epochs={epochs}"]
                        got[epochs] = measure(sys.executable, args.mpiexec, ranks, over, os.path.join(root, "out"))
                    (c0, s0, _), (c1, s1, au) = got[args.epochs_short], got[args.epochs_long]
                    per.append((c1 - c0) / max(1, s1 - s0))
                    aus.append(au)
                rows.append((loader, ranks, statistics.median(per), min(per), max(per), statistics.median(aus)))
    finally:
        if not args.folder:
            shutil.rmtree(root, ignore_errors=True)
    print(f"retinanet, {args.files} files x {args.record_bytes:,} B, compute {args.compute} s, epochs "
          f"{args.epochs_long} - {args.epochs_short}, median of {args.rounds} rounds; CPU of the whole process tree\n")
    print("| loader | ranks | CPU ms per rank-step (min-max) | AU % (long run) |")
    print("|---|---|---|---|")
    for loader, ranks, med, lo, hi, au in rows:
        print(f"| {loader} | {ranks} | {med * 1e3:.2f} ({lo * 1e3:.2f}-{hi * 1e3:.2f}) | {au:.1f} |")
    print()
    print_footer(before, __file__, argv)
    return 0


def measure(python, mpiexec, ranks, overrides, out) -> tuple[float, int, float]:
    """(CPU s, rank-steps from every rank's step log, AU %) of one run."""
    from iogen.common.steplog import read_steplog

    cmd = [python, "-m", "iogen", "run", "retinanet", *overrides, f"output.folder={out}", "-q"]
    if ranks > 1:
        cmd = [mpiexec, "-n", str(ranks), *cmd]
    before = _cpu_children()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    cpu = _cpu_children() - before
    if proc.returncode not in (0, 1):  # 1: the AU gate not met, still measured
        raise SystemExit(f"iogen run failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    (run_dir,) = [os.path.join(out, d) for d in os.listdir(out)]
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as fh:
        au = float(json.load(fh)["metric"]["train_au_mean_percentage"])
    steps_dir = os.path.join(run_dir, "steps")
    rank_steps = sum(int(read_steplog(os.path.join(steps_dir, f))[1].size) for f in os.listdir(steps_dir))
    shutil.rmtree(out)
    return cpu, rank_steps, au


if __name__ == "__main__":
    sys.exit(main())
