"""Checkpoint write and restore: iogen's writer/reader against `dd ... conv=fsync` and plain loops, same run.

One rank's shard of `--shard-gib` GiB (a torch.save file of `--tensors` fp16 tensors) is written
by iogen's checkpoint writer (iogen.checkpoint.io: `--threads` threads, `--transfer-mib` pieces
from reused buffers, fsync, temporary name and rename) and, as the baseline, by the simplest
writer that does the same work: the same number of threads, each pwrite-ing its contiguous
share of one file of the same size from its own buffer of the same transfer size, stamped per
block as iogen stamps them, so both write the same kind of bytes (os.pwrite releases the GIL),
then fsync. Restore: iogen's reader against a plain pread loop with the same threads
and piece size, each after the same eviction (fdatasync, then fadvise DONTNEED), both on the
same file: iogen's checkpoint file (the goal's comparison), and also the plain writer's file.
The two files differ in their layout on disk (iogen's writer writes behind in 16 MiB pieces from
several threads, which ext4 places in the order they are written back: the extent counts are
printed), so comparing each reader on its own writer's file would compare the writers too; the
plain loop on both files gives that layout's effect. Every reading alternates its order with the
others. Each side writes a fresh
file each time, and the order alternates (baseline first, then iogen first, ...) `--repeat`
times, with a sync and a pause (`--settle-s`) before each timed write; medians, per-repetition
ratios and their geometric mean are printed (> 1 means iogen is faster). Peak RSS of iogen writing
and reading the shard is measured in a fresh child process (getrusage ru_maxrss), against the
child's RSS before the work.

Writes are also timed against `dd if=/dev/zero bs=1M conv=fsync` of the same bytes (the
reference the issue 25 goal names: iogen's checkpoint write time >= 0.9x dd's), in the same
rotation. `--whole` instead times the whole write-only invocation, start-up included: `iogen run
llama3-8b` scaled down to one rank's ZeRO-0 checkpoint (6 layers, hidden 1024, FFN 4096, vocabulary
32,000: model and optimizer files of about 2.2 GB in all),
one checkpoint written with fsync and none read, against dd of the same bytes (goal >= 0.8x).
`--drop-caches` drops the page cache (echo 3 > /proc/sys/vm/drop_caches, root only, the whole
machine's) before each timed write, as the issue's measurements did; without it each write
follows a sync and a pause.

    python bench/checkpoint_vs_dd.py --folder /scratch/iogen-bench --shard-gib 4 --threads 4
    python bench/checkpoint_vs_dd.py --folder /scratch/iogen-bench --whole --repeat 3
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


# the whole-invocation comparison: llama3-8b scaled down to one rank's ZeRO-0 checkpoint of about 2.2 GB
WHOLE_OVERRIDES = ("model.num_layers=6", "model.transformer.hidden_size=1024", "model.transformer.ffn_hidden_size=4096",
                   "model.transformer.vocab_size=32000", "model.parallelism.zero_stage=0",
                   "checkpoint.num_checkpoints_write=1", "checkpoint.num_checkpoints_read=0",
                   "checkpoint.time_between_checkpoints=0", "checkpoint.fsync=True")


def settle(drop_caches: bool, settle_s: float) -> None:
    """Before a timed write: sync, drop the page cache when asked (and allowed), and pause."""
    subprocess.run(["sync"], check=False)
    if drop_caches:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as fh:
                fh.write("3\n")
        except OSError as exc:
            raise SystemExit(f"--drop-caches: cannot write /proc/sys/vm/drop_caches ({exc.strerror}); run as root "
                             "or leave the flag out") from None
    time.sleep(settle_s)  # let the device drain the previous writer's data


def dd_write(path: str, size: int) -> float:
    """`dd if=/dev/zero of=path bs=1M conv=fsync` of exactly `size` bytes; return its wall seconds."""
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size}", "iflag=count_bytes", "conv=fsync"],
                   check=True, capture_output=True)
    return time.perf_counter() - t0


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


def _extents(path: str) -> str:
    """The file's extent count as `filefrag` (e2fsprogs) reports it, or why there is none."""
    try:
        out = subprocess.run(["filefrag", path], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (filefrag: {exc})"
    found = out.stdout.strip().rpartition(": ")[2]
    return found.split(" ")[0] if out.returncode == 0 and found.endswith("found") else "unknown (filefrag failed)"


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
    from iogen.storage.posix import PosixStorage

    return CheckpointIO(PosixStorage(), threads=threads, transfer_bytes=transfer, odirect=False, fsync=True, seed=1)


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

    layout = torch_layout(_tensors(int(args.shard_gib * 2**30), args.tensors))
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
    ap.add_argument("--shard-gib", type=float, default=1.0)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--transfer-mib", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stamp", type=int, default=1, help="block stamp (0: repeated blocks, both sides)")
    ap.add_argument("--settle-s", type=float, default=3.0, help="pause after sync before each timed write")
    ap.add_argument("--drop-caches", action="store_true",
                    help="drop the page cache before each timed write (root; the whole machine's)")
    ap.add_argument("--whole", action="store_true",
                    help="time the whole write-only `iogen run` (start-up included) against dd instead")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="--whole: one more override of the llama3-8b run (e.g. a smaller model for a smoke test)")
    ap.add_argument("--child-rss", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    if args.child_rss:
        child_rss(args)
        return 0
    if args.whole:
        return whole(args)
    from iogen.checkpoint.torchzip import torch_layout

    load_before = os.getloadavg()
    transfer = args.transfer_mib << 20
    layout = torch_layout(_tensors(int(args.shard_gib * 2**30), args.tensors))
    mine, plain = os.path.join(args.folder, "iogen.pt"), os.path.join(args.folder, "plain.bin")
    ddfile = os.path.join(args.folder, "dd.bin")
    io = iogen_io(args.threads, transfer)
    io.prepare_write()
    # reads: each reader (plain loop, iogen) on each writer's file (iogen's checkpoint, the plain loop's)
    reads = [(reader, file) for file in ("iogen", "plain") for reader in ("plain", "iogen")]
    times = {"write_plain": [], "write_iogen": [], "write_dd": [],
             **{f"read_{reader}@{file}": [] for reader, file in reads}}
    try:
        for rep in range(args.repeat):
            # Each side writes a fresh file (the previous one deleted and synced outside the timing);
            # the order alternates, so neither always runs right after the other's flush.
            def write_plain():
                times["write_plain"].append(plain_write(plain, layout.size_bytes, args.threads, transfer,
                                                        args.stamp))

            def write_iogen():
                times["write_iogen"].append(iogen_write(io, mine, layout, args.stamp))

            def write_dd():
                times["write_dd"].append(dd_write(ddfile, layout.size_bytes))

            sides = [write_plain, write_iogen, write_dd]
            for side in sides[rep % 3:] + sides[:rep % 3]:  # the order rotates
                own = {"write_plain": plain, "write_iogen": mine, "write_dd": ddfile}[side.__name__]
                if os.path.exists(own):
                    os.unlink(own)
                settle(args.drop_caches, args.settle_s)
                side()
            # every reader on every file, each after the same eviction, the order reversed every other
            # repetition: the readers are compared on the same file (the file's layout on disk, which its
            # writer decides, is the same for both), and the two files by the same reader
            for reader, file in (reads if rep % 2 == 0 else reads[::-1]):
                path = {"iogen": mine, "plain": plain}[file]
                _evict(path)
                times[f"read_{reader}@{file}"].append(plain_read(path, args.threads, transfer) if reader == "plain"
                                                      else iogen_read(io, path, layout.size_bytes))
            if rep == 0:
                extents = {"iogen": _extents(mine), "plain": _extents(plain)}
    finally:
        io.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    # per repetition iogen/plain, and their geometric mean (the order alternates: even repeats balance it)
    def pair(plain_key, iogen_key):
        return [p / i for p, i in zip(times[plain_key], times[iogen_key])]

    def gmean(xs):
        return math.exp(statistics.fmean(math.log(x) for x in xs))

    gib = layout.size_bytes / 2**30
    print(f"shard {gib:.2f} GiB ({layout.size_bytes:,} bytes), {args.threads} threads, {args.transfer_mib} MiB "
          f"pieces, fsync on writes, page cache dropped before reads, median of {args.repeat}")
    p, i = med["write_plain"], med["write_iogen"]
    w_pair = pair("write_plain", "write_iogen")
    print(f"write: plain {gib / p:.3f} GiB/s, iogen {gib / i:.3f} GiB/s, iogen/plain {p / i:.2f}x "
          f"(all: plain {[round(x, 2) for x in times['write_plain']]} s, "
          f"iogen {[round(x, 2) for x in times['write_iogen']]} s); per repetition "
          f"{[round(x, 2) for x in w_pair]}, geometric mean {gmean(w_pair):.2f}x")
    for file, what in (("iogen", "iogen's checkpoint file (the restore goal: >= 0.9x)"),
                       ("plain", "the plain loop's file")):
        p, i = med[f"read_plain@{file}"], med[f"read_iogen@{file}"]
        r_pair = pair(f"read_plain@{file}", f"read_iogen@{file}")
        print(f"read, both on {what}: plain {gib / p:.3f} GiB/s, iogen {gib / i:.3f} GiB/s, iogen/plain "
              f"{p / i:.2f}x (all: plain {[round(x, 2) for x in times[f'read_plain@{file}']]} s, iogen "
              f"{[round(x, 2) for x in times[f'read_iogen@{file}']]} s); per repetition "
              f"{[round(x, 2) for x in r_pair]}, geometric mean {gmean(r_pair):.2f}x")
    own, other = med["read_plain@plain"], med["read_plain@iogen"]
    print(f"file layout: the plain loop reads iogen's file at {own / other:.2f}x its own (extents: iogen's file "
          f"{extents['iogen']}, the plain loop's {extents['plain']}; the writer decides where the blocks lie)")
    d, w = med["write_dd"], med["write_iogen"]
    dd_pair = [x / y for x, y in zip(times["write_dd"], times["write_iogen"])]
    print(f"write vs dd conv=fsync: dd {gib / d:.3f} GiB/s, iogen {gib / w:.3f} GiB/s, iogen/dd {d / w:.2f}x "
          f"(all: dd {[round(x, 2) for x in times['write_dd']]} s); per repetition {[round(x, 2) for x in dd_pair]} "
          f"(goal >= 0.9x)")
    for path in (mine, plain, ddfile):
        if os.path.exists(path):
            os.unlink(path)
    child = subprocess.run([sys.executable, __file__, "--child-rss", "--folder", args.folder, "--shard-gib",
                            str(args.shard_gib), "--tensors", str(args.tensors), "--threads", str(args.threads),
                            "--transfer-mib", str(args.transfer_mib)], capture_output=True, text=True, check=True)
    rss = json.loads(child.stdout)
    mib = lambda b: b / 2**20  # noqa: E731
    print(f"peak RSS: base {mib(rss['base_bytes']):.0f} MiB, writing {mib(rss['after_write_bytes']):.0f} MiB, "
          f"reading {mib(rss['after_read_bytes']):.0f} MiB (shard {gib:.2f} GiB; threads x transfer = "
          f"{args.threads * args.transfer_mib} MiB)")
    print(f"drop caches before each write: {'yes' if args.drop_caches else 'no (sync and a pause)'}")
    print(f"load average before {' / '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("command: python bench/checkpoint_vs_dd.py " + " ".join(sys.argv[1:]))
    return 0


def whole(args) -> int:
    """The whole write-only invocation, start-up included, against dd of the same bytes, alternating."""
    import glob
    import shutil

    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    ckpt, out, ddfile = (os.path.join(args.folder, n) for n in ("whole-ckpt", "whole-results", "dd.bin"))
    cmd = [iogen, "run", "llama3-8b", *WHOLE_OVERRIDES, f"checkpoint.write_threads={args.threads}",
           f"checkpoint.transfer_size={args.transfer_mib << 20}", f"checkpoint.checkpoint_folder={ckpt}",
           f"output.folder={out}", *args.override, "--quiet"]
    load_before = os.getloadavg()
    times = {"iogen": [], "dd": [], "reported": []}
    size, files = None, []

    def clean():
        for path in (ckpt, out):
            shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(ddfile):
            os.unlink(ddfile)

    def run_iogen():
        nonlocal size
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        times["iogen"].append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"iogen failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
        written = [p for p in glob.glob(os.path.join(ckpt, "**", "*"), recursive=True) if os.path.isfile(p)]
        size = sum(os.path.getsize(p) for p in written)
        files.append(len(written))
        with open(glob.glob(os.path.join(out, "*", "summary.json"))[0], encoding="utf-8") as fh:
            times["reported"].append(json.load(fh)["metric"]["save_checkpoint_duration_mean_seconds"])

    def run_dd():
        times["dd"].append(dd_write(ddfile, size))

    # iogen first in the first repetition (dd needs its bytes), then the order alternates
    for rep in range(args.repeat):
        for side in ((run_iogen, run_dd) if rep % 2 == 0 else (run_dd, run_iogen)):
            clean()
            settle(args.drop_caches, args.settle_s)
            side()
    clean()
    med = {k: statistics.median(v) for k, v in times.items()}
    gb = size / 1e9
    print(f"whole write-only invocation: iogen run llama3-8b {' '.join(WHOLE_OVERRIDES + tuple(args.override))}, "
          f"{args.threads} write threads, {args.transfer_mib} MiB transfer: {size:,} bytes ({gb:.2f} GB) in "
          f"{files[-1]} file(s), median of {args.repeat}")
    print(f"iogen, whole process {med['iogen']:.2f} s (all {[round(x, 2) for x in times['iogen']]}), its reported "
          f"write {med['reported']:.2f} s (all {[round(x, 2) for x in times['reported']]}); dd conv=fsync "
          f"{med['dd']:.2f} s (all {[round(x, 2) for x in times['dd']]})")
    print(f"whole invocation vs dd: {med['dd'] / med['iogen']:.2f}x (goal >= 0.8x); reported write vs dd: "
          f"{med['dd'] / med['reported']:.2f}x (goal >= 0.9x)")
    print(f"drop caches before each write: {'yes' if args.drop_caches else 'no (sync and a pause)'}")
    print(f"load average before {' / '.join(f'{x:.2f}' for x in load_before)}, after "
          f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("command: python bench/checkpoint_vs_dd.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
