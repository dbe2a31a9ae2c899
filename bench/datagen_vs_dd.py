"""Whole-run comparison: iogen's dataset generation against a plain sequential write.

Both write the same number of files of the same sizes to the same folder, in the same run,
alternating (baseline, iogen, baseline, iogen, ...) with a `sync` between runs so neither
starts with the other's dirty pages; the median of each is reported. The baseline is the
simplest writer that does the same work, with as many writers as iogen: `--workers` threads (iogen's
datagen workers), thread t writing files t, t+W, ... from one 1 MiB buffer of random bytes with
os.write, which releases the GIL, each under a temporary name renamed into place, as iogen publishes
every file (never a half-written file under a final name) (`--dd` also times `dd if=/dev/zero
bs=1M`, one process at a time). With --fsync both fsync every file before closing it (what the
disk sustains); without it they measure how fast data reaches the page cache. After each run's
files are removed, benchenv.settle_after_delete() syncs and drops the clean caches (root), so no
writer pays ext4's scan past the inodes the previous run freed.

    python bench/datagen_vs_dd.py --folder /scratch/iogen-bench --format npz --files 16 --file-mib 64
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def baseline(folder: str, sizes: list[int], fsync: bool, workers: int) -> float:
    """Write the files with a plain os.write loop in `workers` threads, each under a temporary name
    renamed into place (what iogen does for every file); return seconds."""
    from concurrent.futures import ThreadPoolExecutor

    os.makedirs(folder, exist_ok=True)
    buf = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)

    def write(i):
        path = f"{folder}/plain_{i}"
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        left = sizes[i]
        while left:
            left -= os.write(fd, buf[:min(left, buf.size)])
        if fsync:
            os.fsync(fd)
        os.close(fd)
        os.replace(path + ".tmp", path)

    def share(t):
        for i in range(t, len(sizes), workers):
            write(i)

    with ThreadPoolExecutor(workers) as pool:
        t0 = time.perf_counter()
        list(pool.map(share, range(workers)))
        return time.perf_counter() - t0


def dd(folder: str, sizes: list[int], fsync: bool) -> float:
    """Write the files with dd from /dev/zero; return seconds."""
    os.makedirs(folder, exist_ok=True)
    t0 = time.perf_counter()
    for i, size in enumerate(sizes):
        cmd = ["dd", "if=/dev/zero", f"of={folder}/dd_{i}", "bs=1M", f"count={size >> 20}", "status=none"]
        if fsync:
            cmd.append("conv=fsync")
        subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def iogen_generate(folder: str, fmt_name: str, files: int, record_bytes: int, samples: int,
                   workers: int, fsync: bool) -> tuple[float, int]:
    """Generate a split with iogen; return (seconds, file bytes written)."""
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import make_format

    fmt = make_format(fmt_name, samples_per_file=samples)
    layout = DatasetLayout(folder, "train", files, samples, record_bytes, 0, 1, fmt.suffix)
    t0 = time.perf_counter()
    result = generate(layout, fmt, workers=workers, fsync=fsync)
    return time.perf_counter() - t0, result.bytes_written


def clear(folder: str) -> bool:
    """Remove what a run wrote, flush dirty pages and drop the clean caches (benchenv.settle_after_delete),
    outside the timings; return whether the caches were dropped."""
    from benchenv import settle_after_delete

    shutil.rmtree(folder, ignore_errors=True)
    return settle_after_delete()


def main(argv=None) -> int:
    """Run the comparison and print a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", default=None, help="where to write (default: a temporary folder in the cwd)")
    p.add_argument("--format", default="npz", choices=["npz", "tfrecord", "hdf5"])
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--file-mib", type=int, default=64, help="payload per file, MiB")
    p.add_argument("--samples", type=int, default=1, help="samples per file")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fsync", action="store_true")
    p.add_argument("--dd", action="store_true", help="also time dd if=/dev/zero")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer, settle_note

    before = machine_line()
    dropped = True
    root = args.folder or tempfile.mkdtemp(prefix="iogen-bench-", dir=".")
    record_bytes = (args.file_mib << 20) // args.samples
    times = {"plain": [], "dd": [], "iogen": []}
    iogen_bytes = 0
    for _ in range(args.rounds):
        dropped &= clear(f"{root}/plain")
        times["plain"].append(baseline(f"{root}/plain", [args.file_mib << 20] * args.files, args.fsync,
                                       args.workers))
        dropped &= clear(f"{root}/plain")
        if args.dd:
            times["dd"].append(dd(f"{root}/dd", [args.file_mib << 20] * args.files, args.fsync))
            dropped &= clear(f"{root}/dd")
        seconds, iogen_bytes = iogen_generate(f"{root}/iogen", args.format, args.files, record_bytes,
                                              args.samples, args.workers, args.fsync)
        times["iogen"].append(seconds)
        dropped &= clear(f"{root}/iogen")
    if not args.folder:
        shutil.rmtree(root, ignore_errors=True)

    plain_bytes = args.files * (args.file_mib << 20)
    rows = [(f"plain os.write loop + rename ({args.workers} threads)", plain_bytes, times["plain"])]
    if args.dd:
        rows.append(("dd if=/dev/zero bs=1M", plain_bytes, times["dd"]))
    rows.append((f"iogen datagen {args.format} ({args.workers} workers)", iogen_bytes, times["iogen"]))
    base_rate = plain_bytes / statistics.median(times["plain"])
    print(f"{args.files} files x {args.file_mib} MiB, {args.samples} samples/file, fsync={args.fsync}, "
          f"median of {args.rounds} alternating rounds, python {sys.version.split()[0]}; {settle_note(dropped)}\n")
    print("| writer | GiB | median s | GiB/s | vs plain |")
    print("|---|---|---|---|---|")
    for label, nbytes, ts in rows:
        rate = nbytes / statistics.median(ts)
        print(f"| {label} | {nbytes / 2**30:.2f} | {statistics.median(ts):.2f} | {rate / 2**30:.2f} | "
              f"{rate / base_rate:.2f}x |")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
