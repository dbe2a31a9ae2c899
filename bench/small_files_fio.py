"""Small files on disk, page cache evicted: iogen's native loader beside fio and a plain loop.

Issue 23 asks for a reading of the metadata-heavy path from the device, beside fio's small-file
read rate with the same threads. Three contenders read files of the same size and count from the
same filesystem, each with its files dropped from the page cache first, alternating in one run:

- fio: its own `--nrfiles` files of `--record-bytes` each, laid out once (`--create_only`), then
  `--rw=read --bs=<file size> --ioengine=psync --openfiles=1 --file_service_type=sequential
  --invalidate=1`, `--threads` jobs (each job its share of the files: one open, one whole-file
  read and one close a file). files/s = fio's read IOPS (one I/O a file).
- plain loop: `--threads` Python threads opening, reading whole (os.readv) and closing iogen's
  files, each file evicted beforehand with posix_fadvise(DONTNEED);
- iogen native: `iogen run` over its generated JPEG files, batch `--batch`, compute 0,
  `reader.reopen_files=True`, `reader.evict_page_cache=True` (every epoch's files dropped before
  it starts); samples/s from its summary, whose `iogen.reads_from` must say "storage".

fio reads files fio wrote and iogen reads its JPEG files: the same sizes, count and folder, not
the same blocks. No goal ratio is set: this is the device's small-file rate beside iogen's.

    .venv/bin/python bench/small_files_fio.py --files 4000 --threads 8 --batch 24 --reps 3 --dir /var/tmp/sff
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line, print_footer  # noqa: E402
from small_files import plain_files_s  # noqa: E402


def evict(paths) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fio_args(folder: str, files: int, threads: int, size: int) -> list:
    return ["fio", "--name=smallfiles", f"--directory={folder}", f"--numjobs={threads}",
            f"--nrfiles={max(1, files // threads)}", f"--filesize={size}", f"--bs={size}", "--rw=read",
            "--ioengine=psync", "--openfiles=1", "--file_service_type=sequential", "--group_reporting",
            "--output-format=json"]


def fio_files_s(args_: list) -> float:
    res = subprocess.run([*args_, "--invalidate=1"], capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"fio failed ({res.returncode}): {res.stderr[-2000:]}")
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    return doc["jobs"][0]["read"]["iops"]


def iogen_run(base, extra) -> dict:
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    return run(load_workload("default", base + extra), SingleWorld(), quiet=True).summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--record-bytes", type=int, default=322_957)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--threads", type=int, default=8, help="fio jobs, loop threads and iogen's reader.read_threads")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work folder on the filesystem under test (default: a temporary folder)")
    args = ap.parse_args(argv)
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (Debian: apt-get install fio)")
    if args.files % args.threads:
        raise SystemExit(f"--files {args.files} must be a multiple of --threads {args.threads} (fio's files per job)")

    before = machine_line()
    work = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="iogen-sff-"))
    fio_dir = os.path.join(work, "fio")
    os.makedirs(fio_dir, exist_ok=True)
    base = [f"dataset.data_folder={work}/data", f"output.folder={work}/results", "dataset.format=jpeg",
            "dataset.num_samples_per_file=1", f"dataset.num_files_train={args.files}",
            f"dataset.record_length_bytes={args.record_bytes}", "dataset.record_length_bytes_stdev=0",
            f"reader.batch_size={args.batch}", f"reader.read_threads={args.threads}", "reader.data_loader=native",
            "train.computation_time=0", f"train.epochs={args.epochs}", "metric.au=0", "workflow.evaluation=False"]
    iogen_run(base, ["workflow.generate_data=True", "train.epochs=1"])
    base += ["workflow.generate_data=False", "reader.reopen_files=True", "reader.evict_page_cache=True"]
    paths = sorted(glob.glob(os.path.join(work, "data", "train", "**", "*.jpeg"), recursive=True))
    fio = fio_args(fio_dir, args.files, args.threads, args.record_bytes)
    subprocess.run([*fio, "--create_only=1"], capture_output=True, check=True, timeout=1800)
    pool = ThreadPoolExecutor(args.threads)
    rows, sources = [], set()
    for _ in range(args.reps):
        os.sync()
        f = fio_files_s(fio)
        evict(paths)
        p = plain_files_s(paths, args.threads, args.record_bytes, pool)[0]
        summary = iogen_run(base, [])
        sources.add(str((summary["iogen"].get("reads_from") or {}).get("source")))
        rows.append((f, p, summary["iogen"]["metrics"]["train"]["throughput_mean_samples_s"]))
    print(f"small files on disk, page cache evicted: {args.files} files x {args.record_bytes:,} B, {args.threads} "
          f"threads/jobs each, batch {args.batch} (iogen, reopen_files, evict_page_cache; reads_from: "
          f"{', '.join(sorted(sources))}), {args.reps} repetitions alternating (medians, min-max), folder {work}\n")
    print("| contender | files/s | vs fio |")
    print("|---|---|---|")
    labels = (f"fio psync, {args.threads} jobs, one read a file, openfiles=1, invalidate=1",
              f"plain open/os.readv/close loop ({args.threads} threads), fadvise DONTNEED first",
              "iogen native, bytes only")
    for k, label in enumerate(labels):
        vals = [r[k] for r in rows]
        ratios = [r[k] / r[0] for r in rows]
        print(f"| {label} | {statistics.median(vals):,.0f} ({min(vals):,.0f}-{max(vals):,.0f}) | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    print()
    print_footer(before, __file__, argv)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
