"""What the run's data check (iogen/data/check.py) costs, against a plain stat loop over the same files.

    .venv/bin/python bench/datacheck_cost.py --files 100000 --folder /tmp/iogen-datacheck

Generates FILES one-sample NPZ files once (kept in FOLDER for reruns), then times, each REPS
times (medians): the check with the manifest (manifest parse + one stat per file), the check
without it (directory listing + stat + a probe of 8 files), and the baseline: json.load of the
manifest and os.stat of every path in one thread (what the check does when the stats are
answered from cached metadata, as here: see iogen.data.bulk.STAT_POOL_MIN_NS) and, beside it, the
same loop in STAT_THREADS threads over blocks of STAT_BLOCK paths (the check on a slow file
system). Linear
extrapolation to 1M files is printed beside each figure: per-file costs (stat, parse) dominate.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import command_line, machine_line  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--folder", default="/tmp/iogen-datacheck")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    from iogen.config import load_workload
    from iogen.data.check import check_dataset
    from iogen.data.bulk import STAT_BLOCK, STAT_THREADS, all_paths
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.data.manifest import manifest_path

    print(command_line(__file__, argv))
    print(machine_line())
    wl = load_workload("default", [f"dataset.data_folder={args.folder}", f"dataset.num_files_train={args.files}",
                                   "dataset.num_samples_per_file=1", "dataset.record_length_bytes=64",
                                   "dataset.format=npz", "reader.batch_size=1"])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    t0 = time.perf_counter()
    res = generate(layout, fmt)
    print(f"generation: {res.files_written} written, {res.files_skipped} kept, {time.perf_counter() - t0:.1f} s")
    manifest = manifest_path(layout)

    def baseline_one_thread():
        with open(manifest) as f:
            json.load(f)
        for p in all_paths(layout):  # the same path strings the check builds
            os.stat(p)

    def baseline():
        # the check's own threads: STAT_THREADS threads, each stat-ing blocks of STAT_BLOCK paths
        from concurrent.futures import ThreadPoolExecutor

        with open(manifest) as f:
            json.load(f)
        paths = all_paths(layout)

        def block(start):
            for p in paths[start:start + STAT_BLOCK]:
                os.stat(p)

        with ThreadPoolExecutor(STAT_THREADS) as pool:
            list(pool.map(block, range(0, len(paths), STAT_BLOCK)))

    def without_manifest():
        shutil.move(manifest, manifest + ".aside")
        try:
            t = time.perf_counter()
            check_dataset(layout, fmt)
            return time.perf_counter() - t
        finally:
            shutil.move(manifest + ".aside", manifest)

    def timed(fn):
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    rows = []
    for name, fn in (("baseline: json.load(manifest) + os.stat per file, 1 thread (the check's, metadata cached)",
                      lambda: timed(baseline_one_thread)),
                     (f"the same loop in {STAT_THREADS} threads (the check's on a slow file system)",
                      lambda: timed(baseline)),
                     ("data check with manifest", lambda: timed(lambda: check_dataset(layout, fmt))),
                     ("data check without manifest (listing, stat, 8 probes)", without_manifest)):
        fn()  # warm the dentry and inode caches once
        rows.append((name, statistics.median(fn() for _ in range(args.reps))))
    base = rows[0][1]
    scale = 1_000_000 / args.files
    print()
    print(f"{args.files:,} files, median of {args.reps}, metadata cached (warm)")
    print()
    print("| what | seconds | x baseline | extrapolated to 1M files (s) |")
    print("|---|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.3f} | {s / base:.2f} | {s * scale:.1f} |")
    print()
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
