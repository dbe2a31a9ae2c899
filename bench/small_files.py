"""Bytes-only reads of small files: iogen's native loader against a plain open/read/close loop.

MLPerf Storage v3.0's retinanet reads 1,170,301 JPEG files of 322,957 B, one file a sample:
the metadata-heavy path. Both contenders read the same generated JPEG files, page cache warm,
with the same number of threads, alternating in one process (issue 23's goal: iogen >= 0.9x the
plain loop):

- plain loop: `--threads` Python threads, thread t opening, reading (one os.readv of the whole
  file into its own buffer, GIL released) and closing files t, t+T, ...: the simplest reader there is;
- iogen native: the whole run (`iogen run`: plan, loader, engine, step log, metrics), compute 0,
  `reader.reopen_files` on (one open and one close per sample, as the plain loop and a map-style
  dataset do) and off (files opened once), with the default reader.prefetch_size 2: the batches in
  flight are the PyTorch loader's (and DLIO 2.0's) with --threads workers, read_threads x
  ceil(prefetch_size / read_threads) (8 with 8 threads; config.limits.batches_ahead; until round 9
  the native loader kept prefetch_size, 2). samples/s from its own summary. Its first step is
  left out of its figures (metric.exclude_start_steps), the plain loop times everything (its
  threads never wait for one another: no batches).

Beside each rate: the process's user + system CPU microseconds a file (the plain loop's around its
pass; iogen's over its metrics window, summary.json `iogen.cpu`), to judge a change on a busy machine.

    .venv/bin/python bench/small_files.py --files 2000 --threads 8 --batch 24 --reps 5
"""
from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def plain_files_s(paths, threads: int, size: int, pool) -> tuple[float, float, float]:
    """Open, read whole and close every file, thread t taking files t, t+T, ...: (files/s, user and
    system CPU us a file)."""
    bufs = [bytearray(size) for _ in range(threads)]

    def share(t):
        buf, n = bufs[t], 0
        for p in paths[t::threads]:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.readv(fd, [buf])  # the whole file: the buffer is its size
            finally:
                os.close(fd)
            n += 1
        return n

    (u0, s0), t0 = _cpu(), time.perf_counter()
    done = sum(pool.map(share, range(threads)))
    elapsed, (u1, s1) = time.perf_counter() - t0, _cpu()
    return done / elapsed, (u1 - u0) / done * 1e6, (s1 - s0) / done * 1e6


def iogen_samples_s(base, extra) -> tuple[float, float, float]:
    """One full `iogen run` in this process; (its samples/s (every sample one file), user and system
    CPU us a sample over its metrics window (summary.json iogen.cpu))."""
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    out = run(load_workload("default", base + extra), SingleWorld(), quiet=True)
    cpu = out.summary["iogen"]["cpu"]
    n = cpu["window_samples"] or 1
    return (out.summary["iogen"]["metrics"]["train"]["throughput_mean_samples_s"],
            (cpu["window_user_cpu_s"] or 0) / n * 1e6, (cpu["window_system_cpu_s"] or 0) / n * 1e6)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--record-bytes", type=int, default=322_957)
    ap.add_argument("--format", default="jpeg", choices=["jpeg", "png"])
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--threads", type=int, default=8, help="threads of both (iogen's reader.read_threads)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None, help="dataset folder (default: a temporary folder)")
    args = ap.parse_args(argv)

    from iogen import core_switch as core

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    before = machine_line()
    workdir = args.dir or tempfile.mkdtemp(prefix="iogen-bench-")
    base = [f"dataset.data_folder={workdir}/data", f"output.folder={workdir}/results",
            f"dataset.format={args.format}", "dataset.num_samples_per_file=1",
            f"dataset.num_files_train={args.files}", f"dataset.record_length_bytes={args.record_bytes}",
            "dataset.record_length_bytes_stdev=0", f"reader.batch_size={args.batch}",
            f"reader.read_threads={args.threads}", "reader.data_loader=native", "train.computation_time=0",
            f"train.epochs={args.epochs}", "metric.au=0", "workflow.evaluation=False"]
    iogen_samples_s(base, ["workflow.generate_data=True", "train.epochs=1"])  # generate once, warm imports
    base.append("workflow.generate_data=False")
    paths = sorted(glob.glob(os.path.join(workdir, "data", "train", "**", f"*.{args.format}"), recursive=True))
    warm_buf = core.reader.aligned_buffer(1 << 20)
    pool = ThreadPoolExecutor(args.threads)
    rows = []
    for _ in range(args.reps):
        row = []
        for contender in ("plain", "reopen", "open once"):
            for p in paths:
                core.probes.pread_loop_baseline(p, 1 << 20, warm_buf)
            if contender == "plain":
                row.append(plain_files_s(paths, args.threads, args.record_bytes, pool))
            else:
                row.append(iogen_samples_s(base, [f"reader.reopen_files={contender != 'open once'}"]))
        rows.append(row)
    print(f"small files, bytes only: {len(paths)} {args.format} files x {args.record_bytes:,} B, {args.threads} threads "
          f"each, batch {args.batch} (iogen), compute 0, page cache warm, {args.reps} repetitions alternating "
          f"(medians, min-max), core {core.core_description()}\n")
    print("| contender | files/s | vs plain loop | CPU us a file (user + sys) |")
    print("|---|---|---|---|")
    labels = (f"plain open/os.readv/close loop ({args.threads} threads)",
              "iogen native, reader.reopen_files=True (open/read/close per sample)",
              "iogen native, files opened once")
    for k, label in enumerate(labels):
        vals = [r[k][0] for r in rows]
        ratios = [r[k][0] / r[0][0] for r in rows]
        user = statistics.median(r[k][1] for r in rows)
        system = statistics.median(r[k][2] for r in rows)
        print(f"| {label} | {statistics.median(vals):,.0f} ({min(vals):,.0f}-{max(vals):,.0f}) | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{user:.1f} + {system:.1f} |")
    print()
    print_footer(before, __file__, argv)
    if not args.dir:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
