"""CPU cost of the native loader's TFRecord read, per GiB, against a plain pread loop on the same files.

Whole-run bandwidth (bench/native_vs_pread.py) on a shared, oversubscribed machine measures
mostly how much CPU each contender is given; the CPU each one needs per byte is what decides
the ratio once the cores are contended, and it can be measured under load. This times, in one
thread (time.thread_time: this thread's CPU, not the machine's wall clock), alternating, the
page cache warm:

- the plain pread loop (C, 4 MiB reads into one 4 MiB buffer: it stays in the CPU's caches);
- the same loop reading each batch's bytes with one pread into rotating batch-sized buffers
  (the memory a loader that hands out whole batches writes to);
- iogen per record (the native loader's path before read_frames): one pread per frame with its
  data CRC checked as it lands (tfrecord.pread_frames), or plain pread_into when CRCs are off,
  then Format.payload_spans (the Example layout check);
- iogen by runs (the loader's path when batches are kept): TFRecordFormat.pread_records, one
  core call per batch slice that reads adjacent frames in 256 KiB pieces and checks headers,
  CRCs and Examples;
- iogen streamed (a run's path: nobody keeps the batch): TFRecordFormat.stream_records, the same
  reads and checks through one scratch buffer (`--scratch-kib`, default the native loader's:
  256 KiB or the largest frame) that stays in the cache, instead of batch-sized buffers.

The batches are the plan's with shuffle off (consecutive records), `--batch` records each.

    .venv/bin/python bench/tfrecord_read_cpu.py --dir WORK/tfs
    .venv/bin/python bench/tfrecord_read_cpu.py --dir WORK/tfl --files 48 --samples-per-file 1 \
        --record-bytes 2828533 --batch 4
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="dataset folder (generated here when empty)")
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--samples-per-file", type=int, default=512)
    ap.add_argument("--record-bytes", type=int, default=114_661)
    ap.add_argument("--batch", type=int, default=400)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--scratch-kib", type=int, default=None,
                    help="the streamed reads' buffer (default: the native loader's, grown to the largest frame)")
    args = ap.parse_args(argv)

    import numpy as np

    from iogen import core_switch as core
    from iogen.config import load_workload
    from iogen.data.generate import generate
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchenv import machine_line, print_footer

    before = machine_line()
    wl = load_workload("default", [
        f"dataset.data_folder={args.dir}/data", "dataset.format=tfrecord",
        f"dataset.num_files_train={args.files}", f"dataset.num_samples_per_file={args.samples_per_file}",
        f"dataset.record_length_bytes={args.record_bytes}", "dataset.record_length_bytes_stdev=0"])
    layout = DatasetLayout.from_workload(wl, "train")
    fmt = get_format(wl.dataset)
    if not glob.glob(os.path.join(args.dir, "data", "train", "**", "*.tfrecord"), recursive=True):
        generate(layout, fmt)
    paths = [layout.path(i) for i in range(layout.num_files)]
    fds = [core.reader.open_file(p, False) for p in paths]
    index = [fmt.index_file(p) for p in paths]
    # the batches: consecutive records, as a plan with shuffle off gives them
    all_fd = np.concatenate([np.full(ix.offsets.size, fd, np.int64) for ix, fd in zip(index, fds)])
    all_off = np.concatenate([ix.offsets for ix in index]).astype(np.int64)
    all_len = np.concatenate([ix.lengths for ix in index]).astype(np.int64)
    batches, runs = [], []  # runs: each batch's records of one file, as one read
    for lo in range(0, all_len.size - args.batch + 1, args.batch):
        sl = slice(lo, lo + args.batch)
        dst = np.zeros(args.batch, np.int64)
        np.cumsum(all_len[sl][:-1], out=dst[1:])
        f, o, n = all_fd[sl], all_off[sl], all_len[sl]
        cut = np.flatnonzero(np.diff(f)) + 1  # where the batch moves on to the next file
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [f.size]))
        sizes = np.array([int(n[a:b].sum()) for a, b in zip(starts, ends)], np.int64)
        runs.append((f[starts], o[starts], sizes, dst[starts]))
        batches.append((f, o, n, dst))
    total_bytes = int(sum(int(b[2].sum()) for b in batches))
    per_batch = max(int(b[2].sum()) for b in batches)
    bufs = [core.reader.aligned_buffer(per_batch) for _ in range(3)]
    for b in bufs:
        b[::4096] = 0
    hot = core.reader.aligned_buffer(4 << 20)

    def loop():
        for p in paths:
            core.probes.pread_loop_baseline(p, 4 << 20, hot)

    def loop_batches():
        for k, (f, o, n, d) in enumerate(runs):  # consecutive records: one pread per file of a batch
            core.reader.pread_into(f, o, n, n, bufs[k % 3], d)

    def per_record(verify):
        def run():
            for k, (f, o, n, d) in enumerate(batches):
                if verify:
                    _, bad = fmt.pread_checked(f, o, n, bufs[k % 3], d)
                    assert bad < 0
                else:
                    core.reader.pread_into(f, o, n, n, bufs[k % 3], d)
                fmt.payload_spans(bufs[k % 3], d, n)
        return run

    def by_runs(verify):
        def run():
            for k, (f, o, n, d) in enumerate(batches):
                assert fmt.pread_records(f, o, n, bufs[k % 3], d, verify)[1] < 0
        return run

    if args.scratch_kib is None:  # as the native loader sizes it
        from iogen.loaders.native import STREAM_SCRATCH_BYTES

        args.scratch_kib = -(-max(STREAM_SCRATCH_BYTES, int(all_len.max())) // 1024)
    scratch = core.reader.aligned_buffer(args.scratch_kib << 10)
    scratch[::4096] = 0

    def streamed(verify):
        def run():
            for f, o, n, d in batches:
                assert fmt.stream_records(f, o, n, scratch, verify)[1] < 0
        return run

    contenders = [
        ("pread loop (C, 4 MiB reads into one 4 MiB buffer)", loop),
        (f"pread loop, one pread per file of a batch into 3 rotating {per_batch:,} B buffers", loop_batches),
        ("iogen per record, CRCs checked (pread_frames + payload_spans)", per_record(True)),
        ("iogen by runs, CRCs checked (pread_records: read_frames)", by_runs(True)),
        (f"iogen streamed, CRCs checked (stream_records: stream_frames, {args.scratch_kib} KiB scratch)",
         streamed(True)),
        ("iogen per record, CRCs off (pread_into + payload_spans)", per_record(False)),
        ("iogen by runs, CRCs off (pread_records: read_frames)", by_runs(False)),
        (f"iogen streamed, CRCs off (stream_records, {args.scratch_kib} KiB scratch)", streamed(False)),
    ]
    for _, fn in contenders:  # warm the page cache, the layouts and the code
        fn()
    cpu = {name: [] for name, _ in contenders}
    for _ in range(args.reps):
        for name, fn in contenders:
            t0 = time.thread_time()
            fn()
            cpu[name].append(time.thread_time() - t0)
    for fd in fds:
        core.reader.close_file(fd)

    gib = total_bytes / 2**30
    base = statistics.median(cpu[contenders[0][0]]) / gib
    print(f"tfrecord read CPU per GiB: {args.files} files x {args.samples_per_file} x {args.record_bytes:,} B "
          f"records, batch {args.batch}, one thread, page cache warm, {args.reps} repetitions alternating, "
          f"{total_bytes / 2**20:,.0f} MiB each, core {core.core_description()}")
    print()
    print("| contender | CPU ms per GiB (median) | min-max | loop's CPU / this (the ratio a CPU-bound machine gives) |")
    print("|---|---|---|---|")
    for name, _ in contenders:
        per = [c / gib * 1e3 for c in cpu[name]]
        med = statistics.median(per)
        print(f"| {name} | {med:,.0f} | {min(per):,.0f}-{max(per):,.0f} | {base * 1e3 / med:.2f}x |")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
