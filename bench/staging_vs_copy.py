"""Staging copy (iogen.data.staging.copy_files) against plain parallel copies of the same files.

All contenders copy the same files from one folder to another on the same file system, with
the same number of threads, alternating in one process so they see the same machine state (each
contender goes first in turn, after one untimed warm-up round); before every copy the
destination is emptied, dirty pages are written back (sync) and the sources re-read into the
page cache.

- iogen: `copy_files` as `workflow.stage_data` runs it: `--threads` threads, each with one
  reusable aligned buffer of `--transfer-mib`, pread/pwrite in C with the GIL released, each
  file's CRC-32C computed as it is copied and checked against the manifest's, temporary name
  then rename (the baselines check nothing);
- pread/pwrite loop: the same threads, each a Python loop of os.pread/os.pwrite through one
  buffer of the same size (what a script without iogen's core would do);
- shutil.copyfile: the same threads, each calling shutil.copyfile (sendfile in the kernel on
  Linux: no user-space buffer at all, the fastest a plain copy gets here).

    .venv/bin/python bench/staging_vs_copy.py --files 32 --file-mib 8 --threads 2 --reps 5 --transfer-mib 1

Prints a Markdown table of medians (GiB/s) and the ratios iogen / baseline.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def make_files(folder, n, nbytes):
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    data = np.random.default_rng(1).integers(0, 256, nbytes, np.uint8).tobytes()
    paths = []
    for i in range(n):
        p = os.path.join(folder, f"f{i:05d}.bin")
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
    return paths


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def fresh(dst):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)


CRCS: dict = {}  # the manifest's CRC-32C of each file: iogen checks every copy against it, as staging does


def run_iogen(paths, dst, threads, piece):
    from iogen.data.copy import CopyJob, copy_files

    jobs = [CopyJob(p, os.path.join(dst, os.path.basename(p)), os.path.getsize(p), CRCS[p]) for p in paths]
    copy_files(jobs, threads, piece)


def run_loop(paths, dst, threads, piece):
    def one(p):
        buf = bytearray(piece)
        view = memoryview(buf)
        src = os.open(p, os.O_RDONLY)
        out = os.open(os.path.join(dst, os.path.basename(p)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            off = 0
            while True:
                n = os.preadv(src, [view], off)
                if n == 0:
                    break
                os.pwrite(out, view[:n], off)
                off += n
        finally:
            os.close(src)
            os.close(out)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, paths))


def run_shutil(paths, dst, threads, piece):
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: shutil.copyfile(p, os.path.join(dst, os.path.basename(p))), paths))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--file-mib", type=float, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--transfer-mib", type=float, default=1, help="staging.transfer_size in MiB (its default, 1)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to put the files (default: a temporary folder under /var/tmp)")
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="iogen-stagebench-", dir=args.dir or "/var/tmp")
    piece = int(args.transfer_mib * 2**20) // 4096 * 4096
    try:
        paths = make_files(os.path.join(root, "src"), args.files, int(args.file_mib * 2**20))
        total = sum(os.path.getsize(p) for p in paths)
        from iogen.common.checksum import file_crc32c, format_crc

        CRCS.update({p: format_crc(file_crc32c(p)) for p in paths})
        dst = os.path.join(root, "dst")
        contenders = {"iogen copy_files": run_iogen, "pread/pwrite loop": run_loop, "shutil.copyfile": run_shutil}
        rates = {k: [] for k in contenders}
        os.sync()  # the sources' own write-back must not land in the first timed copy
        load0 = os.getloadavg()[0]
        names = list(contenders)
        for rep in range(args.reps + 1):  # rep 0 warms imports and caches, untimed
            order = names[rep % len(names):] + names[:rep % len(names)]  # each goes first in turn
            for name in order:
                fresh(dst)
                os.sync()  # the previous copy's dirty pages are written back outside the timing
                warm(paths)
                t0 = time.perf_counter()
                contenders[name](paths, dst, args.threads, piece)
                if rep:
                    rates[name].append(total / 2**30 / (time.perf_counter() - t0))
        load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"{args.files} files x {args.file_mib} MiB, {args.threads} threads, transfer {args.transfer_mib} MiB, "
          f"{args.reps} reps, load average {load0:.1f} before / {load1:.1f} after\n")
    print("| contender | median GiB/s | all reps (GiB/s) | iogen / this |")
    print("|---|---|---|---|")
    for k in contenders:
        reps = ", ".join(f"{x:.2f}" for x in rates[k])
        print(f"| {k} | {med[k]:.2f} | {reps} | {med['iogen copy_files'] / med[k]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
