"""Image generation: `iogen datagen` of JPEG and PNG against a plain write of the same bytes.

Both write `--files` files of `--record-bytes` each (MLPerf Storage v3.0's retinanet size by
default) with the same number of threads, alternating (each round starting with the next contender,
so none always writes right after the same one's deletes) with the folder removed, a `sync` and the
kernel's clean caches dropped before and after each run (benchenv.settle_after_delete: on ext4
without a journal a writer right after a big delete otherwise pays an inode scan per file, its
system time the previous run's deletes), and report the median of each and this process's user + system CPU
microseconds a file (issue 23's goal: iogen >= 0.8x the plain write). The
plain writer is datagen_vs_dd.py's: thread t opens, writes and closes files t, t+W, ... from one
buffer of random bytes with os.write (GIL released), each under a temporary name renamed into
place, the work iogen does for every file (never a half-written file under a final name). iogen builds every file whole in memory (the
JPEG scan and PNG's stored blocks in the core) and publishes it, build and publish of a run of files
(up to 64) in one core call with the GIL released (core.publish.write_images), as `iogen datagen` does. A second table gives the in-memory build alone (no write), one thread, per file.

    python bench/datagen_images.py --folder /scratch/iogen-bench --files 2000 --workers 2
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count

FORMATS = ("jpeg", "png")


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


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
    from benchenv import machine_line, print_footer, settle_note
    from datagen_vs_dd import baseline, clear

    before = machine_line()
    root = args.folder or tempfile.mkdtemp(prefix="iogen-bench-", dir=".")
    sizes = [args.record_bytes] * args.files
    contenders = ["plain", *formats]
    times = {c: [] for c in contenders}
    cpu = {c: [] for c in contenders}  # (user, system) CPU seconds of this process during each run
    written = {}
    dropped = True
    try:
        for r in range(args.rounds):
            # each round starts with another contender: none always follows the same one's deletes
            for c in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
                dropped &= clear(f"{root}/{c}")
                u0, s0 = _cpu()
                if c == "plain":
                    seconds = baseline(f"{root}/plain", sizes, args.fsync, args.workers)
                else:
                    seconds, written[c] = iogen_generate(f"{root}/{c}", c, args.files, args.record_bytes,
                                                         args.workers, args.fsync)
                u1, s1 = _cpu()
                times[c].append(seconds)
                cpu[c].append((u1 - u0, s1 - s0))
                dropped &= clear(f"{root}/{c}")
    finally:
        if not args.folder:
            shutil.rmtree(root, ignore_errors=True)

    plain_bytes = sum(sizes)
    base = plain_bytes / statistics.median(times["plain"])
    print(f"{args.files} files x {args.record_bytes:,} B, fsync={args.fsync}, {args.workers} threads each, "
          f"median of {args.rounds} rounds, each round starting with the next contender; {settle_note(dropped)}\n")
    print("| writer | files/s | MiB/s | vs plain | CPU us a file (user + sys) |")
    print("|---|---|---|---|---|")
    rows = [("plain", f"plain open/os.write/close/rename ({args.workers} threads)", plain_bytes)]
    rows += [(f, f"iogen datagen {f} ({args.workers} workers)", written[f]) for f in formats]
    for c, label, nbytes in rows:
        med = statistics.median(times[c])
        rate = nbytes / med
        user = statistics.median(u for u, _ in cpu[c]) / args.files * 1e6
        system = statistics.median(s for _, s in cpu[c]) / args.files * 1e6
        print(f"| {label} | {args.files / med:,.0f} | {rate / 2**20:,.1f} | {rate / base:.2f}x | "
              f"{user:.0f} + {system:.0f} |")
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
