"""s3torchconnector calls in one process: iogen's connector reader against plain read/readinto loops.

No DataLoader, no workers: the same 64 samples (one per object, --record-kib each, at the
sample's offset inside its NPZ object) read four ways through s3torchconnector 1.5.0's
S3MapDataset with the range-based reader and no reader buffer, alternating, medians of --reps:

- `iogen reader.read`: iogen's ConnectorSampleReader.read per batch of --batch (readers per
  object and batch, HEAD and GET timed, records checked, the batch's figures);
- `plain read(n)`: per sample `dataset[i]`, seek, `read(n)` (a new bytes per sample);
- `plain readinto`: per sample `dataset[i]`, seek, `readinto` a reused buffer;
- `plain readinto, per batch`: a batch's readers opened first, then seek + `readinto` each.

It separates iogen's own per-sample work from the connector's calls. Without --endpoint a moto
server on 127.0.0.1 is started (a test server in Python): absolute times mean nothing about a
real store.

    .venv/bin/python bench/objectstore_s3torch_calls.py
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import new_bucket, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--record-kib", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--reps", type=int, default=8)
    return run_on_s3(ap, _bench, argv)


def _bench(args, endpoint, moto: bool) -> int:
    import numpy as np
    from s3torchconnector import S3MapDataset, S3ReaderConstructor

    from iogen.world.communicator import get_world
    from iogen.config import load_workload
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.loaders import get_loader
    from iogen.data.generate import generate_dataset
    from iogen.storage.s3 import open_store
    from iogen.storage.s3torch import connector_args
    from iogen.plan import make_plan

    _, bucket = new_bucket(__file__, "iogen-bench", 1)
    wl = load_workload("default", [
        "storage.storage_type=s3", f"storage.storage_root={bucket}", "dataset.data_folder=bench",
        "dataset.format=npz", f"dataset.num_files_train={args.files}", "dataset.num_samples_per_file=1",
        f"dataset.record_length_bytes={args.record_kib * 1024}", "dataset.record_length_bytes_stdev=0",
        f"reader.batch_size={args.batch}", "reader.read_threads=0", "reader.data_loader=pytorch",
        "storage.s3_client=s3torchconnector", "train.computation_time=0"])
    fmt = get_format(wl.dataset)
    layout = DatasetLayout.from_workload(wl, "train")
    store = open_store(wl)
    generate_dataset(store, [layout], fmt, get_world())
    loader = get_loader(wl, layout, fmt, get_world())
    reader = loader.dataloader.dataset.reader
    plan = make_plan(num_files=layout.num_files, samples_per_file=1, batch_size=args.batch)
    gids = plan.batches.reshape(-1)
    reader.store()  # this process's object table
    assert not reader._table.decoded(gids)  # learns the objects
    offs, lens = (np.asarray(a).tolist() for a in reader._table.ranges(gids, gids * 0))
    where = dict(zip(gids.tolist(), zip(offs, lens)))
    uris = [layout.paths[f] for f in range(layout.num_files)]
    m = S3MapDataset.from_objects(uris, reader_constructor=S3ReaderConstructor.range_based(buffer_size=0),
                                  **connector_args(wl.storage, store))
    ln_max = max(lens)
    buf = np.empty(ln_max * args.batch, np.uint8)
    mv = memoryview(buf).cast("B")

    def iogen():
        for row in plan.batches:
            reader.read(row)

    def plain_read():
        for g in gids.tolist():
            off, ln = where[g]
            r = m[g]
            r.seek(off)
            r.read(ln)

    def plain_readinto():
        for g in gids.tolist():
            off, ln = where[g]
            r = m[g]
            r.seek(off)
            r.readinto(mv[:ln])

    def plain_batch():
        for row in plan.batches.tolist():
            readers = [m[g] for g in row]
            for k, (g, r) in enumerate(zip(row, readers)):
                off, ln = where[g]
                r.seek(off)
                r.readinto(mv[k * ln_max:k * ln_max + ln])

    ways = [("iogen reader.read", iogen), ("plain read(n)", plain_read), ("plain readinto", plain_readinto),
            ("plain readinto, per batch", plain_batch)]
    for _, fn in ways:
        fn()  # connections open
    times = {name: [] for name, _ in ways}
    for rep in range(args.reps):
        for name, fn in (ways if rep % 2 == 0 else ways[::-1]):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    loader.close()
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; {len(gids)} samples of "
          f"{args.record_kib} KiB, one per object, batch {args.batch}, one process, medians of {args.reps}")
    print()
    print("| way | ms per sample (HEAD + GET) |")
    print("|---|---:|")
    for name, _ in ways:
        print(f"| {name} | {statistics.median(times[name]) * 1e3 / len(gids):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
