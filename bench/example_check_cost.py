"""What parsing each TFRecord Example costs the native loader (issue 11.10).

The native loader checks that every record's data is a tf.train.Example with an `image` bytes
feature (`Format.payload_spans`), as tf.data's parse does. This times one epoch of the native
loader over the same warm files, alternating in one process: with the check, and with a format
whose payload_spans is the raw identity (the loader as it was before the check). Same threads,
same prefetch, CRCs checked in both. Prints medians and the ratio checked / unchecked.

    .venv/bin/python bench/example_check_cost.py                       # resnet50-like records
    .venv/bin/python bench/example_check_cost.py --samples-per-file 1 --record-bytes 2828486 --batch 4 --files 96
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import sys  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--samples-per-file", type=int, default=512)
    ap.add_argument("--record-bytes", type=int, default=114_660)
    ap.add_argument("--batch", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.formats.base import Format
    from iogen.loaders.native import NativeLoader
    from iogen.plan import plan_for

    folder = args.dir or tempfile.mkdtemp(prefix="iogen-bench-example-")
    wl = load_workload("default", [
        f"dataset.data_folder={folder}", "dataset.format=tfrecord", f"dataset.num_files_train={args.files}",
        f"dataset.num_samples_per_file={args.samples_per_file}", f"dataset.record_length_bytes={args.record_bytes}",
        "dataset.record_length_bytes_stdev=0", f"reader.batch_size={args.batch}",
        f"reader.read_threads={args.threads}", "reader.prefetch_size=2", "train.computation_time=0"])
    layout = DatasetLayout.from_workload(wl, "train")
    checked = get_format(wl.dataset)
    generate(layout, checked)
    unchecked = get_format(wl.dataset)
    unchecked.payload_spans = Format.payload_spans.__get__(unchecked)  # raw ranges: no parse
    plan = plan_for(wl, layout, epoch=1, rank=0, world_size=1, seed=wl.train.seed)

    def epoch_s(fmt) -> float:
        with NativeLoader(wl, layout, fmt, SingleWorld()) as loader:
            t0 = time.perf_counter()
            nbytes = sum(b.bytes for b in loader.epoch(plan))
            return nbytes / (1 << 20) / (time.perf_counter() - t0)

    epoch_s(checked)  # warm the page cache and the layout cache
    rates = {"checked": [], "unchecked": []}
    for rep in range(args.reps):  # alternating which goes first, so neither always follows the other
        for name in (("checked", "unchecked") if rep % 2 else ("unchecked", "checked")):
            rates[name].append(epoch_s(checked if name == "checked" else unchecked))
    load = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"| records | Example checked MiB/s | unchecked MiB/s | ratio | load (1 min) |")
    print(f"|---|---|---|---|---|")
    print(f"| {args.files} x {args.samples_per_file} x {args.record_bytes:,} B, batch {args.batch}, "
          f"{args.threads} threads | {med['checked']:,.0f} | {med['unchecked']:,.0f} | "
          f"{med['checked'] / med['unchecked']:.2f}x | {load:.1f} |")


if __name__ == "__main__":
    main()
