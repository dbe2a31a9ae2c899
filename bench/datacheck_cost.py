"""What the run's data check (iogen/data/check.py) costs, against a plain stat loop over the same files.

    .venv/bin/python bench/datacheck_cost.py --files 100000 --folder /tmp/iogen-datacheck
    .venv/bin/python bench/datacheck_cost.py --retinanet --files 1170301 --folder /tmp/iogen-datacheck-rn

Generates FILES one-sample NPZ files once (kept in FOLDER for reruns), then times, each REPS
times (medians): the check with the manifest (manifest parse + one stat per file), the check
without it (directory listing + stat + a probe of 8 files), and the baselines: json.load of the
manifest and os.stat of every path, in one thread, in as many threads as the check uses where the
stats are answered from cached metadata (a thread per CPU: iogen.data.bulk), and in STAT_THREADS
threads over blocks of STAT_BLOCK paths (the check's on a slow file system). Linear
extrapolation to 1M files is printed beside each figure: per-file costs (stat, parse) dominate.

--retinanet: MLPerf Storage v3.0's retinanet layout instead (FILES JPEG names, 322,957 B each; 1,170,301
in the v3.0 workload). The check reads only metadata, so the files are made sparse at their sizes (no
data is written) and the manifest is written as iogen writes it (iogen.data.manifest.write_manifest);
the check without a manifest is left out (it probes file contents).
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
from benchenv import machine_line, print_footer  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--folder", default="/tmp/iogen-datacheck")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--retinanet", action="store_true", help="the v3.0 retinanet layout, sparse files (see above)")
    args = ap.parse_args(argv)
    from iogen.config import load_workload
    from iogen.data.check import check_dataset
    from iogen.data.bulk import STAT_BLOCK, STAT_THREADS, _cpus, all_paths
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.data.manifest import manifest_path

    before = machine_line()
    if args.retinanet:
        wl = load_workload("retinanet", [f"dataset.data_folder={args.folder}", f"dataset.num_files_train={args.files}"],
                           accelerator="b200")
    else:
        wl = load_workload("default", [f"dataset.data_folder={args.folder}", f"dataset.num_files_train={args.files}",
                                       "dataset.num_samples_per_file=1", "dataset.record_length_bytes=64",
                                       "dataset.format=npz", "reader.batch_size=1"])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    t0 = time.perf_counter()
    if args.retinanet:
        print(f"sparse files: {sparse_files(layout, fmt)} made, {time.perf_counter() - t0:.1f} s")
    else:
        res = generate(layout, fmt)
        print(f"generation: {res.files_written} written, {res.files_skipped} kept, {time.perf_counter() - t0:.1f} s")
    manifest = manifest_path(layout)
    cpus = _cpus()

    def baseline_one_thread():
        with open(manifest) as f:
            json.load(f)
        for p in all_paths(layout):  # the same path strings the check builds
            os.stat(p)

    def baseline(threads):
        # threads, each stat-ing blocks of STAT_BLOCK paths
        from concurrent.futures import ThreadPoolExecutor

        with open(manifest) as f:
            json.load(f)
        paths = all_paths(layout)

        def block(start):
            for p in paths[start:start + STAT_BLOCK]:
                os.stat(p)

        with ThreadPoolExecutor(threads) as pool:
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
    contenders = [("baseline: json.load(manifest) + os.stat per file, 1 thread", lambda: timed(baseline_one_thread)),
                  (f"the same loop in {cpus} threads (the check's where metadata is cached: a thread per CPU)",
                   lambda: timed(lambda: baseline(cpus))),
                  (f"the same loop in {STAT_THREADS} threads (the check's on a slow file system)",
                   lambda: timed(lambda: baseline(STAT_THREADS))),
                  ("data check with manifest", lambda: timed(lambda: check_dataset(layout, fmt)))]
    if not args.retinanet:
        contenders.append(("data check without manifest (listing, stat, 8 probes)", without_manifest))
    for name, fn in contenders:
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
    print_footer(before, __file__, argv)
    return 0


def sparse_files(layout, fmt) -> int:
    """The layout's files at their sizes without data (made once, kept for reruns) and their manifest as
    iogen writes it (CRCs of zeros: the check does not read them); returns how many were made."""
    from iogen.data.bulk import all_paths
    from iogen.data.manifest import file_entry, manifest_path, write_manifest

    os.makedirs(layout.folder, exist_ok=True)
    cut, made, entries = len(layout.folder) + 1, 0, []
    for i, path in enumerate(all_paths(layout)):
        size = int(layout.record_bytes[i])
        if not os.path.exists(path) or os.stat(path).st_size != size:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
            made += 1
        entries.append(file_entry(path[cut:], size, "00000000", size, int(layout.samples_per_file)))
    if made or not os.path.exists(manifest_path(layout)):
        write_manifest(layout, fmt, entries, fsync=False)
    return made


if __name__ == "__main__":
    sys.exit(main())
