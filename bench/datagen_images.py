"""Image generation: `iogen datagen` of JPEG and PNG against a plain write of the same bytes.

Both write `--files` files of `--record-bytes` each (MLPerf Storage v3.0's retinanet size by
default) with the same number of threads, alternating (plain, jpeg, png, plain, ...) with a `sync`
between runs, and report the median of each (issue 23's goal: iogen >= 0.8x the plain write). The
plain writer is datagen_vs_dd.py's: thread t opens, writes and closes files t, t+W, ... from one
buffer of random bytes with os.write (GIL released). iogen builds every file whole in memory (the
JPEG scan and PNG's stored blocks in the core) and publishes it in one core call, as `iogen
datagen` does. A second table gives the in-memory build alone (no write), one thread, per file.

    python bench/datagen_images.py --folder /scratch/iogen-bench --files 2000 --workers 2
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count

FORMATS = ("jpeg", "png")


def iogen_generate(folder: str, fmt_name: str, files: int, record_bytes: int, workers: int,
                   fsync: bool) -> tuple[float, int]:
    """Generate a split of one-image files with iogen; return (seconds, file bytes written)."""
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import make_format

    fmt = make_format(fmt_name, samples_per_file=1)
    layout = DatasetLayout(folder, "train", files, 1, record_bytes, 0, 1, fmt.suffix)
    t0 = time.perf_counter()
    result = generate(layout, fmt, workers=workers, fsync=fsync)
    return time.perf_counter() - t0, result.bytes_written


def build_only(fmt_name: str, record_bytes: int, count: int) -> float:
    """Seconds per file to build `count` images in memory (one thread, no write)."""
    from iogen.formats import make_format

    fmt = make_format(fmt_name, samples_per_file=1)
    t0 = time.perf_counter()
    for i in range(count):
        fmt.file_image(1, record_bytes, 1, i)
    return (time.perf_counter() - t0) / count


def main(argv=None) -> int:
    """Run the comparison and print Markdown tables."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", default=None, help="where to write (default: a temporary folder in the cwd)")
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--record-bytes", type=int, default=322_957, help="bytes per file (retinanet's)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fsync", action="store_true")
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: jpeg,png")
    args = p.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    if not formats or any(f not in FORMATS for f in formats):
        p.error(f"--formats: a comma-separated list of {', '.join(FORMATS)}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer
    from datagen_vs_dd import baseline, clear

    before = machine_line()
    root = args.folder or tempfile.mkdtemp(prefix="iogen-bench-", dir=".")
    sizes = [args.record_bytes] * args.files
    times = {"plain": [], **{f: [] for f in formats}}
    written = {}
    try:
        for _ in range(args.rounds):
            clear(f"{root}/plain")
            times["plain"].append(baseline(f"{root}/plain", sizes, args.fsync, args.workers))
            clear(f"{root}/plain")
            for f in formats:
                seconds, written[f] = iogen_generate(f"{root}/{f}", f, args.files, args.record_bytes, args.workers,
                                                     args.fsync)
                times[f].append(seconds)
                clear(f"{root}/{f}")
    finally:
        if not args.folder:
            shutil.rmtree(root, ignore_errors=True)

    plain_bytes = sum(sizes)
    base = plain_bytes / statistics.median(times["plain"])
    print(f"{args.files} files x {args.record_bytes:,} B, fsync={args.fsync}, {args.workers} threads each, "
          f"median of {args.rounds} alternating rounds\n")
    print("| writer | files/s | MiB/s | vs plain |")
    print("|---|---|---|---|")
    rows = [(f"plain open/os.write/close ({args.workers} threads)", plain_bytes, times["plain"])]
    rows += [(f"iogen datagen {f} ({args.workers} workers)", written[f], times[f]) for f in formats]
    for label, nbytes, ts in rows:
        med = statistics.median(ts)
        rate = nbytes / med
        print(f"| {label} | {args.files / med:,.0f} | {rate / 2**20:,.1f} | {rate / base:.2f}x |")
    print()
    count = max(1, min(args.files, 500))
    print(f"in-memory build, one thread, {count} files each (no write):\n")
    print("| format | ms per file | MiB/s |")
    print("|---|---|---|")
    for f in formats:
        per = build_only(f, args.record_bytes, count)
        print(f"| {f} | {per * 1e3:.3f} | {args.record_bytes / per / 2**20:,.0f} |")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
