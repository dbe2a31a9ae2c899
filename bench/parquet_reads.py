"""Parquet (issue 24): iogen's reads and generation against plain loops doing the same work.

Three comparisons on a scaled-down dlrm (or flux) dataset, page cache warm, compute 0, the
contenders alternating in one process:

1. reads, native: a whole iogen run with the native loader (`--threads` read threads) against a
   plain loop that preads the same column-chunk ranges (each row group's selected chunks, as
   the footer gives them, coalesced as pyarrow reads them) with the same threads: a core call a
   range from a Python loop (the figure recorded until round 7), and in C (each thread's ranges in
   one core call, no GIL between them);
2. reads, PyTorch: a whole iogen run with the PyTorch loader (`--threads` workers) against two
   plain torch DataLoaders, same workers, reading with
   `pyarrow.parquet.ParquetFile(path).read_row_group(i, columns=[...])`:
   a. the issue's goal: items are row groups (each read once; the worker hands back two counts);
   b. the same work as iogen: the same batches of samples (batch_size, in order), each worker
      reading the row groups its batches need with a cache of its last ones (as the DLIO fork's
      per-worker cache does: a group split between two workers' batches is read by both) and
      handing the batch's selected columns back as tensors;
3. generation: iogen's direct writer against a plain write of the same number of bytes (fill +
   os.write) and pyarrow's ParquetWriter of the same content, same threads.

    .venv/bin/python bench/parquet_reads.py --workload dlrm --files 8 --rows 49152 --batch 4096
    .venv/bin/python bench/parquet_reads.py --workload flux --files 16 --rows 32 --batch 8 --threads 4
    .venv/bin/python bench/parquet_reads.py --workload dlrm --files 4 --rows 24576 --codec zstd

Prints Markdown tables of medians and the ratios iogen / baseline, and each contender's CPU
(user + system of this process and its DataLoader workers) per sample; for the native reads also
CPU seconds per GiB read (the loops': theirs; iogen's: its metrics window's, from its summary).
`--native-only` runs comparison 1 alone.
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
from benchenv import machine_line, print_footer  # noqa: E402  (first: it takes --no-cooldown off argv)


def cpu_s() -> float:
    """User + system seconds of this process and its waited-for children (DataLoader workers)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def measured(fn, *args):
    """(fn's result, CPU seconds it took)."""
    c0 = cpu_s()
    out = fn(*args)
    return out, cpu_s() - c0


def overrides(args, workdir, loader):
    return [f"dataset.data_folder={workdir}/data", f"output.folder={workdir}/results",
            f"dataset.num_files_train={args.files}", f"dataset.num_samples_per_file={args.rows}",
            f"dataset.compression={args.codec}", f"reader.batch_size={args.batch}",
            f"reader.read_threads={args.threads}", f"reader.data_loader={loader}",
            "reader.file_shuffle=off", "reader.sample_shuffle=off", "train.computation_time=0",
            "train.epochs=1", "metric.au=0"] + (
        [f"dataset.parquet.row_group_size={args.row_group}"] if args.row_group else [])


def iogen_run(args, workdir, loader):
    """One whole iogen run; (MiB/s read, samples/s, CPU s per GiB read in the metrics window) from its summary."""
    from iogen.world.communicator import SingleWorld
    from iogen.config import load_workload
    from iogen.run.runner import run

    wl = load_workload(args.workload, overrides(args, workdir, loader))
    out = run(wl, SingleWorld(), quiet=True)
    train = out.summary["iogen"]["metrics"]["train"]
    return train["io_mean_mib_s"], train["throughput_mean_samples_s"], out.summary["iogen"]["cpu"]["window_cpu_s_per_gib"]


def chunk_ranges(fmt, paths):
    """(path index, offset, length) of every selected, coalesced chunk range of every file."""
    out = []
    for k, p in enumerate(paths):
        gi = fmt.group_index(p)
        out += [(k, int(o), int(n)) for o, n in zip(gi.offsets, gi.lengths)]
    return out


def pread_ranges_mib_s(paths, ranges, threads, core, pool, per_range: bool = True) -> float:
    """Plain C preads of the same ranges, thread t taking ranges t, t+T, ...: MiB/s. per_range: one
    core call a range from a Python loop (the GIL taken between ranges); else each thread's ranges in
    one core call (a loop in C, the GIL released throughout), every range into the thread's buffer."""
    import numpy as np

    fds = [core.reader.open_file(p, False) for p in paths]
    biggest = max(n for _, _, n in ranges)
    bufs = [core.reader.aligned_buffer(biggest) for _ in range(threads)]

    def share(t):
        mine = ranges[t::threads]
        f = np.array([fds[k] for k, _, _ in mine], np.int64)
        o = np.array([x for _, x, _ in mine], np.int64)
        n = np.array([x for _, _, x in mine], np.int64)
        if not per_range:
            return core.reader.pread_into(f, o, n, n, bufs[t], np.zeros(len(mine), np.int64))
        total = 0
        for i in range(len(mine)):  # one range at a time into the thread's buffer
            total += core.reader.pread_into(f[i:i + 1], o[i:i + 1], n[i:i + 1], n[i:i + 1], bufs[t],
                                            np.zeros(1, np.int64))
        return total

    try:
        t0 = time.perf_counter()
        total = sum(pool.map(share, range(threads)))
        return total / 2**20 / (time.perf_counter() - t0)
    finally:
        for fd in fds:
            core.reader.close_file(fd)


def pyarrow_loop_samples_s(paths, columns, workers: int) -> tuple[float, float]:
    """A plain torch DataLoader over (file, row group) items read with read_row_group: (MiB/s of
    decoded columns, rows/s)."""
    import pyarrow.parquet as pq
    import torch
    from torch.utils.data import DataLoader, Dataset

    items = []
    for p in paths:
        meta = pq.read_metadata(p)
        items += [(p, g) for g in range(meta.num_row_groups)]

    class Groups(Dataset):
        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            p, g = items[i]
            t = pq.ParquetFile(p).read_row_group(g, columns=columns)
            return torch.tensor([t.num_rows, t.nbytes])

    loader = DataLoader(Groups(), batch_size=None, num_workers=workers, prefetch_factor=2 if workers else None)
    t0 = time.perf_counter()
    rows = nbytes = 0
    for x in loader:
        rows += int(x[0])
        nbytes += int(x[1])
    dt = time.perf_counter() - t0
    return nbytes / 2**20 / dt, rows / dt


def pyarrow_batches_samples_s(paths, columns, rows_per_file: int, batch: int, workers: int) -> float:
    """A plain torch DataLoader of the batches iogen reads (batch_size samples in order, the last short one
    dropped), each worker reading its batches' row groups with read_row_group and keeping its last two,
    handing each batch's selected columns back as tensors: samples/s."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

    group_rows = pq.read_metadata(paths[0]).row_group(0).num_rows
    total = len(paths) * rows_per_file

    class Batches(Dataset):
        def __init__(self):
            self.cache = {}

        def __len__(self):
            return total

        def group(self, f, g):
            table = self.cache.get((f, g))
            if table is None:
                table = pq.ParquetFile(paths[f]).read_row_group(g, columns=columns)
                self.cache[(f, g)] = table
                while len(self.cache) > 2:
                    self.cache.pop(next(iter(self.cache)))
            return table

        def __getitems__(self, ids):
            parts, i = [], 0
            while i < len(ids):  # in order: each run of rows inside one row group is one slice
                f, row = divmod(ids[i], rows_per_file)
                g, start = divmod(row, group_rows)
                n = min(len(ids) - i, group_rows - start, rows_per_file - row)
                parts.append(self.group(f, g).slice(start, n))
                i += n
            out = []
            for c in columns:
                arrays = [p.column(c).combine_chunks() for p in parts]
                arrays = [a.flatten() if a.type.num_fields else a for a in arrays]
                out.append(torch.from_numpy(np.concatenate([a.to_numpy(zero_copy_only=False) for a in arrays])))
            return len(ids), out

    loader = DataLoader(Batches(), batch_sampler=BatchSampler(SequentialSampler(range(total)), batch, True),
                        num_workers=workers, collate_fn=lambda x: x, prefetch_factor=2 if workers else None)
    t0 = time.perf_counter()
    rows = sum(n for n, _ in loader)
    return rows / (time.perf_counter() - t0)


def gen_mib_s(fmt, workdir, files, rows, row_bytes, threads, pool, writer) -> tuple[float, float]:
    """(MiB/s, CPU seconds (user + system, this process's) per GiB written)."""
    def one(i):
        path = os.path.join(workdir, f"gen_{i}.parquet")
        size = writer(path, i)
        os.unlink(path)
        return size

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    total = sum(pool.map(one, range(files)))
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return total / 2**20 / dt, cpu / (total / 2**30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="dlrm", choices=["dlrm", "flux"])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rows", type=int, default=49152, help="dataset.num_samples_per_file")
    ap.add_argument("--row-group", type=int, default=None, help="dataset.parquet.row_group_size")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--codec", default="none", choices=["none", "snappy", "gzip", "lz4", "zstd"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--native-only", action="store_true",
                    help="only the native reads against the pread loops (no PyTorch contenders, no generation)")
    args = ap.parse_args(argv)

    import numpy as np

    from iogen import core_switch as core
    from iogen.config import load_workload
    from iogen.data.layout import DatasetLayout
    from iogen.data.generate import generate
    from iogen.formats import get_format
    from iogen.formats.base import fill_random

    before = machine_line()
    workdir = args.dir or tempfile.mkdtemp(prefix="iogen-bench-parquet-")
    wl = load_workload(args.workload, overrides(args, workdir, "native"))
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    generate(layout, fmt)
    paths = sorted(glob.glob(os.path.join(workdir, "data", "train", "**", "*.parquet"), recursive=True))
    ranges = chunk_ranges(fmt, paths)
    pool = ThreadPoolExecutor(args.threads)
    warm_buf = core.reader.aligned_buffer(8 << 20)

    def warm():
        for p in paths:
            core.probes.pread_loop_baseline(p, 8 << 20, warm_buf)

    native, plain, plain_c, torch_runs, arrow, same = [], [], [], [], [], []
    read_gib = sum(n for _, _, n in ranges) / 2**30
    gib_cpu = {"plain": [], "plain_c": []}  # CPU s per GiB of the loops (iogen's: its window's, from its summary)
    cpu = {k: [] for k in ("plain", "plain_c", "native", "torch", "arrow", "same")}
    rows_read = args.files * args.rows
    rows_iogen = rows_read // args.batch * args.batch  # the last short batch dropped
    for _ in range(args.reps):
        warm()
        r, c = measured(pread_ranges_mib_s, paths, ranges, args.threads, core, pool)
        plain.append(r)
        cpu["plain"].append(c / rows_read)
        gib_cpu["plain"].append(c / read_gib)
        warm()
        r, c = measured(pread_ranges_mib_s, paths, ranges, args.threads, core, pool, False)
        plain_c.append(r)
        cpu["plain_c"].append(c / rows_read)
        gib_cpu["plain_c"].append(c / read_gib)
        warm()
        r, c = measured(iogen_run, args, workdir, "native")
        native.append(r)
        cpu["native"].append(c / rows_iogen)
        if args.native_only:
            continue
        warm()
        r, c = measured(iogen_run, args, workdir, "pytorch")
        torch_runs.append(r)
        cpu["torch"].append(c / rows_iogen)
        warm()
        r, c = measured(pyarrow_loop_samples_s, paths, fmt.selected_columns, args.threads)
        arrow.append(r)
        cpu["arrow"].append(c / rows_read)
        warm()
        r, c = measured(pyarrow_batches_samples_s, paths, list(fmt.selected_columns), args.rows, args.batch,
                        args.threads)
        same.append(r)
        cpu["same"].append(c / rows_iogen)

    rb = int(wl.dataset.record_length_bytes)
    gen_files = max(args.threads, 2)

    def iogen_writer(path, i):
        return fmt.write_file_crc(path, args.rows, rb, 7, i)[0]

    sizes = {}

    def plain_writer(path, i):
        n = sizes.setdefault("n", os.path.getsize(paths[0]))
        buf = np.empty(n, np.uint8)
        fill_random(buf, 7, i)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(buf)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return n

    def pyarrow_writer(path, i):
        fmt._write_pyarrow(path, args.rows, 7, i)
        return os.path.getsize(path)

    gens = []
    for _ in range(0 if args.native_only else args.reps):
        g_iogen = gen_mib_s(fmt, workdir, gen_files, args.rows, rb, args.threads, pool, iogen_writer)
        g_plain = gen_mib_s(fmt, workdir, gen_files, args.rows, rb, args.threads, pool, plain_writer)
        g_arrow = gen_mib_s(fmt, workdir, gen_files, args.rows, rb, args.threads, pool, pyarrow_writer)
        gens.append((g_iogen, g_plain, g_arrow))

    med = statistics.median
    print(f"parquet {args.workload}: {args.files} files x {args.rows} rows, row groups of {fmt.row_group_size}, "
          f"codec {args.codec}, {len(fmt.selected_columns)} of {len(fmt.columns)} columns read, batch {args.batch}, "
          f"{args.threads} threads/workers, compute 0, page cache warm, {args.reps} repetitions")
    print()
    def us(k):  # CPU microseconds a sample, whole contender (setup included)
        return f"{med(cpu[k]) * 1e6:,.2f}"

    print("| contender | MiB/s (median) | samples/s (median) | CPU us a sample (median; iogen: the whole run, "
          "setup and result files included) | CPU s per GiB read (median; iogen: its metrics window's) |")
    print("|---|---|---|---|---|")
    print(f"| pread loop of the selected chunk ranges, a core call a range ({args.threads} threads) | "
          f"{med(plain):,.0f} | | {us('plain')} | {med(gib_cpu['plain']):.3f} |")
    print(f"| pread loop of the selected chunk ranges, in C: one core call a thread ({args.threads} threads) | "
          f"{med(plain_c):,.0f} | | {us('plain_c')} | {med(gib_cpu['plain_c']):.3f} |")
    print(f"| iogen native (whole run) | {med(r[0] for r in native):,.0f} | {med(r[1] for r in native):,.0f} | "
          f"{us('native')} | {med(r[2] for r in native):.3f} |")
    if args.native_only:
        print()
        print(f"ratio iogen native / pread loop, a core call a range: {med(r[0] / p for r, p in zip(native, plain)):.2f}")
        print(f"ratio iogen native / pread loop in C, one call a thread: "
              f"{med(r[0] / p for r, p in zip(native, plain_c)):.2f}")
        print()
        print_footer(before, __file__, argv)
        return 0
    print(f"| plain DataLoader of read_row_group, a row group an item ({args.threads} workers; MiB/s of decoded "
          f"columns) | {med(r[0] for r in arrow):,.0f} | {med(r[1] for r in arrow):,.0f} | {us('arrow')} | |")
    print(f"| plain DataLoader of read_row_group, iogen's batches, columns returned ({args.threads} workers) | | "
          f"{med(same):,.0f} | {us('same')} | |")
    print(f"| iogen pytorch (whole run; MiB/s of selected bytes delivered) | {med(r[0] for r in torch_runs):,.0f} | "
          f"{med(r[1] for r in torch_runs):,.0f} | {us('torch')} | |")
    print()
    print(f"ratio iogen native / pread loop, a core call a range (docs/benchmarks.md's figure until round 7): "
          f"{med(r[0] / p for r, p in zip(native, plain)):.2f}")
    print(f"ratio iogen native / pread loop in C, one call a thread: "
          f"{med(r[0] / p for r, p in zip(native, plain_c)):.2f}")
    print(f"ratio iogen pytorch / plain read_row_group DataLoader, a row group an item (samples/s; the issue's "
          f"goal): {med(t[1] / a[1] for t, a in zip(torch_runs, arrow)):.2f}")
    print(f"ratio iogen pytorch / plain read_row_group DataLoader of the same batches (samples/s): "
          f"{med(t[1] / a for t, a in zip(torch_runs, same)):.2f}")
    print()
    print(f"| generation, {gen_files} files, {args.threads} threads | MiB/s (median) | CPU s/GiB (median) |")
    print("|---|---|---|")
    print(f"| iogen (direct writer, {args.codec}) | {med(g[0][0] for g in gens):,.0f} | {med(g[0][1] for g in gens):.2f} |")
    print(f"| plain fill + write of the same bytes | {med(g[1][0] for g in gens):,.0f} | "
          f"{med(g[1][1] for g in gens):.2f} |")
    print(f"| pyarrow ParquetWriter ({args.codec}) | {med(g[2][0] for g in gens):,.0f} | "
          f"{med(g[2][1] for g in gens):.2f} |")
    print()
    print(f"ratio iogen / plain write: {med(g[0][0] / g[1][0] for g in gens):.2f} (MiB/s), "
          f"{med(g[1][1] / g[0][1] for g in gens):.2f} (plain's CPU per GiB / iogen's)")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
