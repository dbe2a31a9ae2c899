"""Checkpoint write and restore: iogen's writer/reader against a plain pwrite/pread loop, same run.

One rank's shard of `--shard-gib` GiB (a torch.save file of `--tensors` fp16 tensors) is written
by iogen's checkpoint writer (iogen.checkpoint.io: `--threads` threads, `--transfer-mib` pieces
from reused buffers, fsync, temporary name and rename) and, as the baseline, by the simplest
writer that does the same work: the same number of threads, each pwrite-ing its contiguous
share of one file of the same size from its own buffer of the same transfer size, stamped per
block as iogen stamps them, so both write the same kind of bytes (os.pwrite releases the GIL),
then fsync. Restore: iogen's reader against a plain pread loop with the same threads
and piece size, each after dropping the file from the page cache, on each one's file and (a
third reading) the plain loop on iogen's file, which separates the reader from the file's place
on disk. Each side writes a fresh
file each time, and the order alternates (baseline first, then iogen first, ...) `--repeat`
times, with a sync and a pause (`--settle-s`) before each timed write; medians, per-repetition
ratios and their geometric mean are printed (> 1 means iogen is faster). Peak RSS of iogen writing
and reading the shard is measured in a fresh child process (getrusage ru_maxrss), against the
child's RSS before the work.

    python bench/checkpoint_vs_dd.py --folder /scratch/iogen-bench --shard-gib 4 --threads 4
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def _tensors(shard_bytes: int, count: int):
    from iogen.checkpoint.model import Tensor

    per = shard_bytes // count // 2
    return [Tensor((str(i),), "fp16", per) for i in range(count)]


def _evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def plain_write(path: str, size: int, threads: int, transfer: int, stamp: int) -> float:
    """Write `size` bytes to `path` with `threads` pwrite loops and fsync; return seconds."""
    content = np.random.default_rng(0).integers(0, 256, transfer, dtype=np.uint8)
    share = -(-size // threads)
    share += (-share) % transfer
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def work(t):
        buf = content.copy()  # one buffer per thread, as iogen has
        words = buf[:8].view(np.uint64)
        off, end = t * share, min(size, (t + 1) * share)
        while off < end:
            if stamp:
                words[0] = stamp ^ off  # the same unique-per-block bytes iogen writes
            off += os.pwrite(fd, buf[:min(transfer, end - off)], off)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - t0


def plain_read(path: str, threads: int, transfer: int) -> float:
    """Read `path` whole with `threads` pread loops; return seconds."""
    size = os.path.getsize(path)
    share = -(-size // threads)
    share += (-share) % transfer
    fd = os.open(path, os.O_RDONLY)

    def work(t):
        buf = bytearray(transfer)
        view = memoryview(buf)
        off, end = t * share, min(size, (t + 1) * share)
        while off < end:
            n = os.preadv(fd, [view[:min(transfer, end - off)]], off)
            if n == 0:
                break
            off += n

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    os.close(fd)
    return time.perf_counter() - t0


def iogen_io(threads: int, transfer: int):
    from iogen.checkpoint.io import CheckpointIO

    return CheckpointIO(threads=threads, transfer_bytes=transfer, odirect=False, fsync=True, seed=1)


def iogen_write(io, path: str, layout, stamp: int) -> float:
    """Write the shard with iogen's checkpoint writer; return seconds (content already prepared)."""
    t0 = time.perf_counter()
    io.write_files([(path, layout)], stamp=stamp)
    return time.perf_counter() - t0


def iogen_read(io, path: str, size: int) -> float:
    t0 = time.perf_counter()
    io.read_files([(path, size)])
    return time.perf_counter() - t0


def child_rss(args) -> None:
    """In a fresh process: RSS before, then peak RSS after writing and after reading the shard."""
    from iogen.checkpoint.torchzip import torch_layout

    layout = torch_layout(_tensors(args.shard_gib << 30, args.tensors))
    path = os.path.join(args.folder, "rss.pt")
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # noqa: E731
    out = {"base_bytes": rss()}
    io = iogen_io(args.threads, args.transfer_mib << 20)
    io.prepare_write()
    iogen_write(io, path, layout, 1)
    out["after_write_bytes"] = rss()
    _evict(path)
    iogen_read(io, path, layout.size_bytes)
    out["after_read_bytes"] = rss()
    io.close()
    os.unlink(path)
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default="/tmp/iogen-bench-ckpt")
    ap.add_argument("--shard-gib", type=int, default=1)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--transfer-mib", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stamp", type=int, default=1, help="block stamp (0: repeated blocks, both sides)")
    ap.add_argument("--settle-s", type=float, default=3.0, help="pause after sync before each timed write")
    ap.add_argument("--child-rss", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    if args.child_rss:
        child_rss(args)
        return 0
    from iogen.checkpoint.torchzip import torch_layout

    load_before = os.getloadavg()
    transfer = args.transfer_mib << 20
    layout = torch_layout(_tensors(args.shard_gib << 30, args.tensors))
    mine, plain = os.path.join(args.folder, "iogen.pt"), os.path.join(args.folder, "plain.bin")
    io = iogen_io(args.threads, transfer)
    io.prepare_write()
    times = {"write_plain": [], "write_iogen": [], "read_plain": [], "read_iogen": [], "read_plain_same": []}
    try:
        for rep in range(args.repeat):
            # Each side writes a fresh file (the previous one deleted and synced outside the timing);
            # the order alternates, so neither always runs right after the other's flush.
            def write_plain():
                times["write_plain"].append(plain_write(plain, layout.size_bytes, args.threads, transfer,
                                                        args.stamp))

            def write_iogen():
                times["write_iogen"].append(iogen_write(io, mine, layout, args.stamp))

            for side in ((write_plain, write_iogen) if rep % 2 == 0 else (write_iogen, write_plain)):
                for path in (mine, plain):
                    if os.path.exists(path) and side.__name__.endswith(("plain" if path == plain else "iogen")):
                        os.unlink(path)
                subprocess.run(["sync"], check=False)
                time.sleep(args.settle_s)  # let the device drain the previous writer's data
                side()
            for side in (("plain", "iogen") if rep % 2 == 0 else ("iogen", "plain")):
                if side == "plain":
                    _evict(plain)
                    times["read_plain"].append(plain_read(plain, args.threads, transfer))
                else:
                    _evict(mine)
                    times["read_iogen"].append(iogen_read(io, mine, layout.size_bytes))
            # the plain loop on iogen's own file: separates the reader from where the file lies on disk
            _evict(mine)
            times["read_plain_same"].append(plain_read(mine, args.threads, transfer))
    finally:
        io.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    # per repetition iogen/plain, and their geometric mean (the order alternates: even repeats balance it)
    pair = {ph: [p / i for p, i in zip(times[f"{ph}_plain"], times[f"{ph}_iogen"])] for ph in ("write", "read")}
    gmean = {ph: math.exp(statistics.fmean(math.log(x) for x in v)) for ph, v in pair.items()}
    gib = layout.size_bytes / 2**30
    print(f"shard {gib:.2f} GiB ({layout.size_bytes:,} bytes), {args.threads} threads, {args.transfer_mib} MiB "
          f"pieces, fsync on writes, page cache dropped before reads, median of {args.repeat}")
    for phase in ("write", "read"):
        p, i = med[f"{phase}_plain"], med[f"{phase}_iogen"]
        print(f"{phase}: plain {gib / p:.3f} GiB/s, iogen {gib / i:.3f} GiB/s, iogen/plain {p / i:.2f}x "
              f"(all: plain {[round(x, 2) for x in times[phase + '_plain']]} s, "
              f"iogen {[round(x, 2) for x in times[phase + '_iogen']]} s); per repetition "
              f"{[round(x, 2) for x in pair[phase]]}, geometric mean {gmean[phase]:.2f}x")
    same, i = med["read_plain_same"], med["read_iogen"]
    print(f"read, same file (iogen's): plain {gib / same:.3f} GiB/s, iogen {gib / i:.3f} GiB/s, iogen/plain "
          f"{same / i:.2f}x (all: plain {[round(x, 2) for x in times['read_plain_same']]} s)")
    for path in (mine, plain):
        os.unlink(path)
    child = subprocess.run([sys.executable, __file__, "--child-rss", "--folder", args.folder, "--shard-gib",
                            str(args.shard_gib), "--tensors", str(args.tensors), "--threads", str(args.threads),
                            "--transfer-mib", str(args.transfer_mib)], capture_output=True, text=True, check=True)
    rss = json.loads(child.stdout)
    mib = lambda b: b / 2**20  # noqa: E731
    print(f"peak RSS: base {mib(rss['base_bytes']):.0f} MiB, writing {mib(rss['after_write_bytes']):.0f} MiB, "
          f"reading {mib(rss['after_read_bytes']):.0f} MiB (shard {gib:.2f} GiB; threads x transfer = "
          f"{args.threads * args.transfer_mib} MiB)")
    print(f"load average before {' / '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("command: python bench/checkpoint_vs_dd.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
