"""Scaling across ranks: 1, 2 and 4 ranks (`mpiexec -n N iogen run`) on one generated dataset.

Each rank emulates one accelerator, so with ideal storage the aggregate samples/s grows with
the ranks and AU stays put. Two scenarios: "compute" (10 ms of emulated compute per step: the
accelerators set the pace) and "io" (no compute: the read path sets the pace). The dataset is
generated once; every run reads it from the page cache unless --evict is given.

    .venv/bin/python bench/mpi_scaling.py                      # table for docs/mpi.md
    .venv/bin/python bench/mpi_scaling.py --ranks 1,2,4,8 --repeat 5 --files 512

Prints a Markdown table: per scenario and rank count, the median over --repeat runs of the
aggregate samples/s (and its range), samples/s per rank, AU (mean over ranks) and its spread
over ranks, MiB/s read, and the mean time per step waiting for the batch (wait) and in the
barrier (comm).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count

SCENARIOS = {"compute": 0.01, "io": 0.0}


def _mpiexec() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if not found:
        raise SystemExit("mpiexec not found: pip install mpich (or load your site MPI)")
    return found


def _clean_env() -> dict:
    prefixes = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "HYDRA_", "MPI_LOCAL")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _run(ranks: int, overrides: list[str], work: str) -> dict:
    """One `iogen run` on `ranks` ranks; returns its summary.json."""
    iogen = [sys.executable, "-m", "iogen", "run", "default", *overrides, "-q"]
    cmd = iogen if ranks == 1 else [_mpiexec(), "-n", str(ranks), *iogen]
    res = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=900, cwd=work)
    if res.returncode not in (0, 1):  # 1: the AU gate, irrelevant here
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    run_dir = next(line.split("results: ", 1)[1].strip() for line in res.stdout.splitlines()
                   if line.startswith("results: "))
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _row(docs: list[dict]) -> dict:
    def med(get):
        return statistics.median(get(d) for d in docs)

    def train(d):
        return d["iogen"]["metrics"]["train"]

    return {
        "samples_s": med(lambda d: d["metric"]["train_throughput_mean_samples_per_second"]),
        "au_pct": med(lambda d: d["metric"]["train_au_mean_percentage"]),
        "mib_s": med(lambda d: train(d)["io_mean_mib_s"]),
        "comm_ms": med(lambda d: statistics.mean(train(d)["per_epoch"]["comm_mean_ns"]) / 1e6),
        "wait_ms": med(lambda d: statistics.mean(train(d)["per_epoch"]["wait_mean_ns"]) / 1e6),
        "samples_s_range": (min(d["metric"]["train_throughput_mean_samples_per_second"] for d in docs),
                            max(d["metric"]["train_throughput_mean_samples_per_second"] for d in docs)),
        "au_spread": med(lambda d: statistics.mean(
            hi - lo for hi, lo in zip(train(d)["per_epoch"]["au_max_percentage"],
                                      train(d)["per_epoch"]["au_min_percentage"]))),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per point (the median is shown)")
    ap.add_argument("--files", type=int, default=256, help="files of one sample each")
    ap.add_argument("--record-bytes", type=int, default=256 * 1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="compute,io")
    ap.add_argument("--evict", action="store_true", help="evict the dataset from the page cache every epoch")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    ranks = [int(x) for x in args.ranks.split(",")]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    before = machine_line()
    work = tempfile.mkdtemp(prefix="iogen-mpi-scaling-")
    base = [f"dataset.data_folder={work}/data", f"output.folder={work}/results",
            f"dataset.num_files_train={args.files}", f"dataset.record_length_bytes={args.record_bytes}",
            "dataset.record_length_bytes_stdev=0", f"reader.batch_size={args.batch}",
            f"train.epochs={args.epochs}", "metric.au=0", f"reader.evict_page_cache={args.evict}"]
    try:
        gen = subprocess.run([sys.executable, "-m", "iogen", "datagen", "default", *base, "-q"],
                             capture_output=True, text=True, env=_clean_env(), cwd=work)
        if gen.returncode != 0:
            raise SystemExit(gen.stderr)
        base.append("workflow.generate_data=False")
        rows = []
        for scenario in args.scenarios.split(","):
            compute_s = SCENARIOS[scenario]
            for n in ranks:
                docs = [_run(n, base + [f"train.computation_time={compute_s}"], work) for _ in range(args.repeat)]
                rows.append((scenario, compute_s, n, _row(docs)))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"iogen MPI scaling: default workload, {args.files} files x {args.record_bytes // 1024} KiB, "
          f"batch {args.batch}, {args.epochs} epochs, page cache {'evicted every epoch' if args.evict else 'warm'}; "
          f"{cpus} CPUs, {platform.machine()}, median of {args.repeat} runs")
    print()
    print("| scenario | ranks | samples/s, all ranks (min-max) | samples/s per rank | AU % (mean over ranks) "
          "| AU max-min over ranks (pp) | MiB/s | wait ms/step | comm ms/step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for scenario, compute_s, n, r in rows:
        label = f"{scenario} ({compute_s * 1e3:g} ms/step)"
        lo, hi = r["samples_s_range"]
        print(f"| {label} | {n} | {r['samples_s']:,.0f} ({lo:,.0f}-{hi:,.0f}) | {r['samples_s'] / n:,.0f} | "
              f"{r['au_pct']:.1f} | {r['au_spread']:.1f} | {r['mib_s']:,.0f} | {r['wait_ms']:.3f} | "
              f"{r['comm_ms']:.3f} |")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
