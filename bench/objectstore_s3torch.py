"""PyTorch reads through s3torchconnector: iogen's pytorch loader against a plain s3torchconnector DataLoader.

Both read the same samples (each sample's byte range inside its object) of the same objects
through s3torchconnector 1.5.0's datasets, with the range-based reader and no reader buffer, in
a torch DataLoader with --workers worker processes and the same prefetch, alternating in one
process (the order alternates too), medians of --reps passes:

- map: iogen's loader (storage.s3_client=s3torchconnector, reader.pytorch_dataset=map: an
  S3MapDataset, the plan as the batch sampler, batches into shared-memory buffers, TFRecord CRCs
  checked, calls counted and timed) against a plain map-style Dataset whose __getitem__ takes
  `S3MapDataset[file]`, seeks to the sample and reads it (`read(n)`), under a batch sampler of
  the same batches, persistent workers, default collation of the bytes into a list.
- iterable: iogen's loader (reader.pytorch_dataset=iterable: an S3IterableDataset per worker
  and epoch, sharded by the plan) against `S3IterableDataset.from_objects(enable_sharding=True)`
  whose transform seeks to the object's sample and reads it, batched by the DataLoader;
  persistent workers on both sides.

With one sample per object (--samples-per-file 1, the default) both issue one HEAD and one GET
per sample; with more, iogen's readers are per object and batch (fewer HEADs) while the plain
loop makes one per sample, and the request counts are printed. Without --endpoint the script
starts moto's standalone server on 127.0.0.1 (a test server in Python, whose own cost dominates
every request): the ratio and the per-sample overhead are what it measures.

    .venv/bin/python bench/objectstore_s3torch.py --files 64 --record-kib 256 --workers 4
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import new_bucket, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="npz", choices=["npz", "tfrecord"])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--samples-per-file", type=int, default=1)
    ap.add_argument("--record-kib", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--prefetch", type=int, default=8, help="reader.prefetch_size (batches in flight in all)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--modes", default="map,iterable")
    # "This DataLoader will create N worker processes ... suggested max": both sides use --workers
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    return run_on_s3(ap, _bench, argv)


class PlainMap:
    """A plain map-style Dataset over S3MapDataset: sample i = seek + read of its range."""

    def __init__(self, s3map, where):
        self.s3map, self.where = s3map, where  # where[gid] = (file, offset, length)

    def __len__(self):
        return len(self.where)

    def __getitem__(self, gid):
        f, off, ln = self.where[gid]
        reader = self.s3map[f]
        reader.seek(off)
        return reader.read(ln)


def _bench(args, endpoint, moto: bool) -> int:
    import math

    import torch
    from s3torchconnector import S3IterableDataset, S3MapDataset, S3ReaderConstructor
    from torch.utils.data import DataLoader

    from iogen.world.communicator import get_world
    from iogen.config import load_workload
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.loaders import get_loader
    from iogen.data.generate import generate_dataset
    from iogen.storage.s3 import open_store
    from iogen.plan import make_plan

    _, bucket = new_bucket(__file__, "iogen-bench", 1)
    base = ["storage.storage_type=s3", f"storage.storage_root={bucket}", "dataset.data_folder=bench",
            f"dataset.format={args.format}", f"dataset.num_files_train={args.files}",
            f"dataset.num_samples_per_file={args.samples_per_file}",
            f"dataset.record_length_bytes={args.record_kib * 1024}", "dataset.record_length_bytes_stdev=0",
            f"reader.batch_size={args.batch}", f"reader.read_threads={args.workers}",
            f"reader.prefetch_size={args.prefetch}", "train.computation_time=0", "reader.data_loader=pytorch",
            "storage.s3_client=s3torchconnector"]
    world = get_world()
    wl = load_workload("default", base)
    fmt = get_format(wl.dataset)
    layout = DatasetLayout.from_workload(wl, "train")
    generate_dataset(open_store(wl), [layout], fmt, world)
    plan = make_plan(num_files=layout.num_files, samples_per_file=layout.samples_per_file, batch_size=args.batch)
    gids = plan.batches.reshape(-1)
    spf = layout.samples_per_file
    uris = [layout.paths[f] for f in range(layout.num_files)]
    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    from s3torchconnector import S3ClientConfig

    conf = dict(region=region, endpoint=endpoint, s3client_config=S3ClientConfig(force_path_style=True),
                reader_constructor=S3ReaderConstructor.range_based(buffer_size=0))
    prefetch_factor = max(1, math.ceil(args.prefetch / max(1, args.workers)))
    rows = []
    for mode in [m for m in args.modes.split(",") if m]:
        wl_mode = load_workload("default", base + [f"reader.pytorch_dataset={mode}"])
        loader = get_loader(wl_mode, layout, fmt, world)
        where = _where(loader, gids, spf)
        total = sum(ln for _, _, ln in where.values())
        if mode == "map":
            ds = PlainMap(S3MapDataset.from_objects(uris, **conf), where)
            plain = DataLoader(ds, batch_sampler=[b.tolist() for b in plan.batches], num_workers=args.workers,
                               prefetch_factor=prefetch_factor, persistent_workers=True, collate_fn=list)
        else:
            assert spf == 1, "the iterable baseline reads one sample per object: --samples-per-file 1"
            by_key = {uris[f].split("/", 3)[3]: (off, ln) for f, off, ln in where.values()}

            def transform(reader, by_key=by_key):
                off, ln = by_key[reader.key]
                reader.seek(off)
                return reader.read(ln)
            ordered = [uris[int(g) // spf] for g in gids]
            ds = S3IterableDataset.from_objects(ordered, transform=transform, enable_sharding=True, **conf)
            plain = DataLoader(ds, batch_size=args.batch, num_workers=args.workers, prefetch_factor=prefetch_factor,
                               persistent_workers=True, collate_fn=list)

        def run_iogen():
            t0 = time.perf_counter()
            got = sum(b.bytes for b in loader.epoch(plan))
            return time.perf_counter() - t0, got

        def run_plain():
            t0 = time.perf_counter()
            got = sum(len(x) for batch in plain for x in batch)
            return time.perf_counter() - t0, got

        run_iogen(), run_plain()  # workers up, connections open, server warm
        t_io, t_pl, figs = [], [], []
        for rep in range(args.reps):
            pair = (run_plain, run_iogen) if rep % 2 else (run_iogen, run_plain)
            for fn in pair:
                t, got = fn()
                assert got >= total, (fn.__name__, got, total)
                (t_io if fn is run_iogen else t_pl).append(t)
        figs = loader.epoch_figures[-1]
        loader.close()
        mi, mp = statistics.median(t_io), statistics.median(t_pl)
        rows.append((mode, total, mi, mp, figs))
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; {args.files} "
          f"{args.format} objects, {len(gids)} samples of {args.record_kib} KiB per pass, batch {args.batch}, "
          f"{args.workers} DataLoader workers, prefetch {args.prefetch}, s3torchconnector "
          f"{__import__('s3torchconnector').__version__}, torch {torch.__version__}, medians of {args.reps}")
    print()
    print("| dataset | iogen MiB/s | plain MiB/s | ratio iogen/plain | per-sample overhead | iogen GETs + HEADs per pass |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, total, mi, mp, figs in rows:
        mib = total / 2**20
        heads = (figs.get("head") or {}).get("requests", 0)
        print(f"| {mode} | {mib / mi:.1f} | {mib / mp:.1f} | {mp / mi:.2f}x | {(mi - mp) / len(gids) * 1e6:+.0f} us "
              f"| {figs['get']['requests']} + {heads} |")
    return 0


def _where(loader, gids, spf) -> dict:
    """{gid: (file, offset, length)} from the loader's own reader (its object table)."""
    import numpy as np

    reader = loader.dataloader.dataset.reader
    files, samples = gids // spf, gids % spf
    reader.store()  # this process's object table
    assert not reader._table.decode_only(files)  # learns the objects
    _, offs, lens, _ = reader._table.ranges(files, samples)
    return {int(g): (int(f), int(o), int(n)) for g, f, o, n in zip(gids.tolist(), files.tolist(),
                                                                  np.asarray(offs).tolist(), np.asarray(lens).tolist())}


if __name__ == "__main__":
    sys.exit(main())
