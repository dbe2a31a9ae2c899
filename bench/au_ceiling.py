"""The tool's own ceiling: AU with data in page cache and short compute steps.

With every file in the page cache, any AU below 100% is iogen's own overhead (step loop,
loader hand-off, sleep error). The baseline, timed in the same run on the same files, is the
loop a time.sleep-based emulator (DLIO's) runs, with iogen's threads: 2 reader threads (the
default workload's reader.read_threads) read whole batches with the C pread loop, prefetch_size
(2) batches ahead of the step; the step takes the next batch and calls time.sleep(compute).
Its AU is requested compute / wall time over the same window as iogen's (each epoch's first
step left out), so all it loses is time.sleep's overshoot, the hand-off and the loop itself.

    .venv/bin/python bench/au_ceiling.py --compute 0.01 --reps 5
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import threading
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def sleep_loop_au(paths: list, batch: int, epochs: int, compute_s: float, threads: int = 2,
                  prefetch: int = 2) -> float:
    """AU (%) of the baseline: per epoch, batches of `batch` files read by `threads` threads
    `prefetch` batches ahead; each step waits for its batch, then time.sleep(compute)."""
    from concurrent.futures import ThreadPoolExecutor

    from iogen import core_switch as core

    bufs = [core.reader.aligned_buffer(4 << 20) for _ in range(threads * batch)]
    local = threading.local()
    slots = iter(range(len(bufs)))
    lock = threading.Lock()

    def read_batch(files):
        if not hasattr(local, "buf"):
            with lock:
                local.buf = bufs[next(slots)]
        return sum(core.probes.pread_loop_baseline(p, 1 << 20, local.buf) for p in files)

    batches = [paths[k:k + batch] for k in range(0, len(paths) - batch + 1, batch)]
    compute_total, wall_total = 0.0, 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(epochs):
            pending = [pool.submit(read_batch, b) for b in batches[:prefetch + 1]]
            start = None
            for i in range(len(batches)):
                pending.pop(0).result()
                if i + prefetch + 1 < len(batches):
                    pending.append(pool.submit(read_batch, batches[i + prefetch + 1]))
                time.sleep(compute_s)
                if i == 0:
                    start = time.perf_counter()  # the window opens after the first step, as iogen's
            if len(batches) > 1:
                wall_total += time.perf_counter() - start
                compute_total += (len(batches) - 1) * compute_s
    return 100.0 * compute_total / wall_total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compute", type=float, default=0.01, help="train.computation_time, seconds")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--files", type=int, default=256)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    work = tempfile.mkdtemp(prefix="iogen-au-")
    base = [f"dataset.data_folder={work}/data", f"output.folder={work}/results",
            f"dataset.num_files_train={args.files}", f"train.computation_time={args.compute}",
            "train.epochs=2", "metric.au=0"]
    run(load_workload("default", base + ["workflow.generate_data=True"]), SingleWorld(), quiet=True)
    before = machine_line()
    aus, errs, base_aus = [], [], []
    paths = sorted(glob.glob(os.path.join(work, "data", "train", "**", "*.npz"), recursive=True))
    for _ in range(args.reps):
        out = run(load_workload("default", base + ["workflow.generate_data=False"]), SingleWorld(), quiet=True)
        train = out.summary["iogen"]["metrics"]["train"]
        aus.append(train["au_mean_percentage"])
        errs.append(statistics.mean(train["per_epoch"]["sleep_error_mean_ns"]) / 1e3)
        base_aus.append(sleep_loop_au(paths, 4, 2, args.compute))
    print(f"AU ceiling: default workload ({args.files} files x 1 MiB, batch 4, 2 read threads), page cache warm, "
          f"compute {args.compute * 1e3:g} ms/step, {args.reps} runs")
    print()
    print("| contender | AU % median (min-max) |")
    print("|---|---|")
    print(f"| iogen (whole run, calibrated sleep) | {statistics.median(aus):.2f} ({min(aus):.2f}-{max(aus):.2f}) |")
    print(f"| time.sleep loop, 2 pread threads 2 batches ahead (same files, same window) | "
          f"{statistics.median(base_aus):.2f} "
          f"({min(base_aus):.2f}-{max(base_aus):.2f}) |")
    print()
    print(f"iogen - baseline: {statistics.median(a - b for a, b in zip(aus, base_aus)):+.2f} AU points (median); "
          f"iogen's mean sleep overshoot {statistics.median(errs):.1f} us")
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
