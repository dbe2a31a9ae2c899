"""Whole-run comparison of the loaders: tf.data and PyTorch DataLoader against iogen's native path.

For each case (a format and a dataset shape), the same files are read by full iogen runs (plan,
loader, engine, step log, metrics) with reader.data_loader native, tensorflow and pytorch,
alternating in one process so all see the same machine state: compute 0 (pure I/O), page cache
warm (every file is read once before each repetition), samples/s and MiB/s (bytes really read,
over the measured window) from each run's own summary. Medians over repetitions; the ratio to
native is the median of the per-repetition ratios.

Cases (sizes from the bundled workloads):
  large-<fmt>   1 sample per file of 2,828,486 bytes (cosmoflow's records), npz, hdf5, tfrecord
  small-tfrecord  256 samples per file of 114,660 bytes (resnet50's records), files in order
  dlio-npz      5 MiB NPZ records, native and PyTorch loaders only (DLIO itself is measured
                beside iogen by bench/vs_dlio.py, never typed in here)

    .venv/bin/python bench/loaders_compare.py --reps 5

Prints Markdown tables and the command line.
"""
from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count

LOADERS = ("native", "tensorflow", "pytorch")

CASES = {
    # name: (format, files, samples per file, record bytes, batch, extra overrides)
    "large-npz": ("npz", 96, 1, 2_828_486, 4, []),
    "large-hdf5": ("hdf5", 96, 1, 2_828_486, 4, []),
    "large-tfrecord": ("tfrecord", 96, 1, 2_828_486, 4, []),
    "small-tfrecord": ("tfrecord", 8, 256, 114_660, 64, ["reader.sample_shuffle=off", "reader.file_shuffle=seed"]),
    "dlio-npz": ("npz", 64, 1, 5 << 20, 4, []),
}


def warm(paths, buf, core) -> None:
    """Read every file once so every contender starts from a warm page cache."""
    for p in paths:
        core.probes.pread_loop_baseline(p, 1 << 20, buf)


def one_run(base, loader, extra):
    """One full iogen run: (samples/s, MiB/s) from its summary (means over epochs)."""
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    wl = load_workload("default", base + [f"reader.data_loader={loader}"] + extra)
    out = run(wl, SingleWorld(), quiet=True)
    train = out.summary["iogen"]["metrics"]["train"]
    return train["throughput_mean_samples_s"], train["io_mean_mib_s"]


def run_case(name, args, workdir, core, buf):
    fmt, files, spf, record, batch, extra = CASES[name]
    folder = os.path.join(workdir, name)
    base = [
        f"dataset.data_folder={folder}/data", f"output.folder={workdir}/results",
        f"dataset.format={fmt}", f"dataset.num_files_train={files}", f"dataset.num_samples_per_file={spf}",
        f"dataset.record_length_bytes={record}", "dataset.record_length_bytes_stdev=0",
        f"reader.batch_size={batch}", f"reader.read_threads={args.threads}",
        f"reader.computation_threads={args.threads}", f"reader.prefetch_size={args.prefetch}",
        "train.computation_time=0", f"train.epochs={args.epochs}", "metric.au=0", *extra,
    ]
    one_run(base + ["workflow.generate_data=True", "train.epochs=1"], "native", [])  # generate once
    base.append("workflow.generate_data=False")
    paths = sorted(glob.glob(os.path.join(folder, "data", "train", "**", f"*.{fmt}"), recursive=True))
    loaders = ("native", "pytorch") if name == "dlio-npz" else LOADERS
    results = {ld: [] for ld in loaders}
    for _ in range(args.reps):
        for ld in loaders:
            warm(paths, buf, core)
            results[ld].append(one_run(base, ld, []))
    return fmt, files, spf, record, batch, loaders, results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    ap.add_argument("--threads", type=int, default=4, help="reader.read_threads (and computation_threads)")
    ap.add_argument("--prefetch", type=int, default=2, help="reader.prefetch_size")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="dataset folder (default: a temporary folder)")
    args = ap.parse_args(argv)

    from iogen import core_switch as core

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    before = machine_line()
    workdir = args.dir or tempfile.mkdtemp(prefix="iogen-loaders-")
    buf = core.reader.aligned_buffer(8 << 20)
    rows = []
    for name in args.cases.split(","):
        fmt, files, spf, record, batch, loaders, results = run_case(name, args, workdir, core, buf)
        native = results["native"]
        for ld in loaders:
            sps = statistics.median(r[0] for r in results[ld])
            mib = statistics.median(r[1] for r in results[ld])
            ratio = statistics.median(r[0] / n[0] for r, n in zip(results[ld], native))
            spread = (min(r[0] for r in results[ld]), max(r[0] for r in results[ld]))
            rows.append((name, fmt, f"{files} x {spf} x {record:,} B, batch {batch}", ld, sps, mib, ratio, spread))
        print(f"done: {name}", file=sys.stderr, flush=True)

    import numpy

    versions = [f"python {platform.python_version()}", f"numpy {numpy.__version__}"]
    for mod in ("tensorflow", "torch"):
        if mod in sys.modules:
            versions.append(f"{mod} {sys.modules[mod].__version__}")
    print(f"iogen loaders, compute 0, page cache warm, read_threads {args.threads}, prefetch {args.prefetch}, "
          f"{args.epochs} epochs per run, {args.reps} repetitions (medians); {os.cpu_count()} CPUs; core "
          f"{core.core_description()}; {', '.join(versions)}")
    print()
    print("| case | format | files x samples x record, batch | loader | samples/s | MiB/s | vs native | samples/s min-max |")
    print("|---|---|---|---|---:|---:|---:|---|")
    for name, fmt, shape, ld, sps, mib, ratio, (lo, hi) in rows:
        print(f"| {name} | {fmt} | {shape} | {ld} | {sps:,.0f} | {mib:,.0f} | {ratio:.2f}x | {lo:,.0f}-{hi:,.0f} |")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
