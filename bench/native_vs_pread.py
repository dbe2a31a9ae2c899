"""Whole-run comparison: iogen's native loader against a plain pread loop on the same files.

Both read the same files, page cache warm, compute 0, alternating in one process so they see
the same machine state. The baseline is the best the machine does with the threads iogen is
given: `--threads` threads (iogen's reader.read_threads), each reading its share of the files
sequentially with pread into its own buffer (iogen.core_switch.probes.pread_loop_baseline, C, no GIL).
iogen runs the full pipeline (plan, loader, engine, step log, metrics) and its MiB/s comes from
its own summary: bytes really read over the measured window.

    .venv/bin/python bench/native_vs_pread.py --files 64 --record-mib 4 --reps 5
    .venv/bin/python bench/native_vs_pread.py --format tfrecord --files 96 --record-mib 2.7 --batch 4
    .venv/bin/python bench/native_vs_pread.py --format tfrecord --files 8 --samples-per-file 512 \
        --record-mib 0.10935 --batch 400

Prints a Markdown table: medians over repetitions and the ratios iogen / baseline. A second
baseline reads the same files into prefetch_size + 1 rotating batch-sized buffers, the memory
any loader that hands out whole batches writes to: against the one small buffer of the plain
loop, that alone costs a third of the bandwidth here once the buffers outgrow the L3 cache.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def warm(paths, buf, core) -> None:
    """Read every file once so both contenders start from a warm page cache."""
    for p in paths:
        core.probes.pread_loop_baseline(p, 1 << 20, buf)


def baseline_mib_s(paths, bufs, core, pool) -> float:
    """Plain sequential pread of every file, thread t reading files t, t+T, ... into its own
    buffer (the C loop releases the GIL, so the T threads read in parallel): MiB/s."""
    threads = len(bufs)

    def share(t):
        return sum(core.probes.pread_loop_baseline(p, 4 << 20, bufs[t]) for p in paths[t::threads])

    t0 = time.perf_counter()
    total = sum(pool.map(share, range(threads)))
    return total / 2**20 / (time.perf_counter() - t0)


def batch_loop_mib_s(paths, batch, slots, core, pool, threads) -> float:
    """The same whole-file preads, but into rotating batch-sized buffers: the memory a loader
    that hands out whole batches must write to. Thread t reads batches t, t+T, ... (T = the
    threads iogen reads with); max(slots, T) buffers, so no two threads share one. Separates
    where the bytes land (cache or DRAM) from the tool's own overhead."""
    import numpy as np

    sizes = np.array([os.path.getsize(p) for p in paths], np.int64)
    fds = np.array([core.reader.open_file(p, False) for p in paths], np.int64)
    per = int(sizes.max()) * batch
    slots = max(slots, threads)
    bufs = [core.reader.aligned_buffer(per) for _ in range(slots)]
    for b in bufs:
        b[::4096] = 0
    starts = list(range(0, len(paths), batch))

    def share(t):
        total = 0
        for j in range(t, len(starts), threads):
            k = starts[j]
            f, ln = fds[k:k + batch], sizes[k:k + batch]  # whole files: a batch of files
            dst = np.concatenate(([0], np.cumsum(ln)[:-1]))
            total += core.reader.pread_into(f, np.zeros_like(ln), ln, ln, bufs[j % slots], dst)
        return total

    try:
        t0 = time.perf_counter()
        total = sum(pool.map(share, range(threads)))
        return total / 2**20 / (time.perf_counter() - t0)
    finally:
        for fd in fds:
            core.reader.close_file(int(fd))


def iogen_run(base_overrides, extra):
    """One full iogen run; (MiB/s read, samples/s, AU %) from its summary."""
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    wl = load_workload("default", base_overrides + extra)
    out = run(wl, SingleWorld(), quiet=True)
    train = out.summary["iogen"]["metrics"]["train"]
    return train["io_mean_mib_s"], train["throughput_mean_samples_s"], train["au_mean_percentage"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="npz", choices=["npz", "tfrecord", "hdf5"])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--samples-per-file", type=int, default=1)
    ap.add_argument("--record-mib", type=float, default=4.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="reader.read_threads for iogen")
    ap.add_argument("--prefetch", type=int, default=2, help="reader.prefetch_size for iogen")
    ap.add_argument("--no-verify", action="store_true", help="reader.verify_checksums=False (TFRecord CRCs)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="dataset folder (default: a temporary folder)")
    args = ap.parse_args(argv)

    from iogen import core_switch as core

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    before = machine_line()
    workdir = args.dir or tempfile.mkdtemp(prefix="iogen-bench-")
    record = int(args.record_mib * 2**20)
    base = [
        f"dataset.data_folder={workdir}/data", f"output.folder={workdir}/results",
        f"dataset.format={args.format}", f"dataset.num_samples_per_file={args.samples_per_file}",
        f"dataset.num_files_train={args.files}", f"dataset.record_length_bytes={record}",
        "dataset.record_length_bytes_stdev=0", f"reader.batch_size={args.batch}",
        "train.computation_time=0", "train.epochs=2", "metric.au=0", "workflow.generate_data=True",
    ]
    iogen_run(base, [])  # generate the data once (and warm up imports)
    paths = sorted(glob.glob(os.path.join(workdir, "data", "train", "**", f"*.{args.format}"), recursive=True))
    buf = core.reader.aligned_buffer(8 << 20)
    thread_bufs = [core.reader.aligned_buffer(4 << 20) for _ in range(args.threads)]
    pool = ThreadPoolExecutor(args.threads)
    extra = [f"reader.read_threads={args.threads}", f"reader.prefetch_size={args.prefetch}",
             f"reader.verify_checksums={not args.no_verify}",
             "workflow.generate_data=False"]
    rows = []
    slots = args.prefetch + 1
    for _ in range(args.reps):
        warm(paths, buf, core)
        b = baseline_mib_s(paths, thread_bufs, core, pool)
        warm(paths, buf, core)
        bb = batch_loop_mib_s(paths, max(1, args.batch // args.samples_per_file), slots, core, pool,
                              args.threads)
        warm(paths, buf, core)
        i_mib, i_sps, _ = iogen_run(base, extra)
        rows.append((b, i_mib, i_sps, bb))
    b_med = statistics.median(r[0] for r in rows)
    i_med = statistics.median(r[1] for r in rows)
    s_med = statistics.median(r[2] for r in rows)
    bb_med = statistics.median(r[3] for r in rows)
    ratios = [r[1] / r[0] for r in rows]
    ratios_bb = [r[1] / r[3] for r in rows]
    print(f"native {args.format} read vs pread loop: {args.files} files x {args.samples_per_file} x "
          f"{record:,} B records, batch {args.batch}, checksums {'off' if args.no_verify else 'checked'}, "
          f"read_threads {args.threads}, prefetch {args.prefetch}, compute 0, page cache warm, {args.reps} repetitions, core "
          f"{core.core_description()}")
    print()
    print("| contender | MiB/s (median) | samples/s (median) |")
    print("|---|---|---|")
    print(f"| pread loop (C, {args.threads} thread(s), 4 MiB reads) | {b_med:,.0f} | {b_med / args.record_mib:,.0f} |")
    print(f"| pread loop, {args.threads} thread(s), into {max(slots, args.threads)} rotating buffers "
          f"(whole files, {max(1, args.batch // args.samples_per_file)} at a time) | {bb_med:,.0f} | "
          f"{bb_med / args.record_mib:,.0f} |")
    print(f"| iogen native (whole run: plan, loader, engine, step log, metrics) | {i_med:,.0f} | {s_med:,.0f} |")
    print()
    print(f"ratio iogen / pread loop: median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    print(f"ratio iogen / pread loop into batch buffers: median {statistics.median(ratios_bb):.2f} "
          f"(min {min(ratios_bb):.2f}, max {max(ratios_bb):.2f})")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
