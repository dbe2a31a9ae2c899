"""Staging from S3: iogen's download (iogen/data/copy.py's Copier.copy_in) against a plain boto3 download loop.

Both download the same --files objects of --object-mib each to local files in --dest, with
--threads threads, alternating in one process, medians of --reps: iogen's Copier.copy_in (every
--transfer-kib part a ranged GET into a thread's reused buffer, pwrite at its offset of a
temporary name (one core call), each part's CRC-32C computed and the joined CRC checked against the object's, the
file renamed when complete, every request counted) and a plain loop doing the same requests (a
ThreadPoolExecutor of --threads workers, each task one --transfer-kib ranged get_object of one
object, written with os.pwrite at its offset of the local file; no checksum, no temporary name).
--transfer-kib defaults to 8 MiB, iogen's own `staging.transfer_size` from a bucket. The local
files are removed between rounds.
Without --endpoint a local moto server is started (a test server in Python whose own cost
dominates every request: absolute figures mean nothing; the ratio is the figure).

    .venv/bin/python bench/objectstore_staging.py --files 16 --object-mib 32 --threads 4 --reps 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import alternated_medians, new_bucket, ratio_table, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--object-mib", type=int, default=8)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--transfer-kib", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dest", default=None, help="local folder (default: a new one under the system's temp folder)")
    return run_on_s3(ap, _bench, argv)


def _bench(args, endpoint, moto: bool) -> int:
    import numpy as np

    from iogen.data.copy import Copier, CopyJob
    from iogen.common.checksum import crc32c, format_crc
    from iogen.storage.s3 import ObjectStore

    client, bucket = new_bucket(__file__, "iogen-stage", args.threads)
    size = args.object_mib << 20
    piece = args.transfer_kib << 10
    rng = np.random.default_rng(5)
    crcs = {}
    for i in range(args.files):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        client.put_object(Bucket=bucket, Key=f"ds/obj_{i}", Body=data)
        crcs[i] = format_crc(crc32c(data))
    dest = args.dest or tempfile.mkdtemp(prefix="iogen-bench-stage-")
    os.makedirs(dest, exist_ok=True)
    store = ObjectStore(max_pool_connections=max(10, args.threads))
    # both make their clients before the timing: iogen one per thread (as the stager does before
    # T_staging), the baseline one shared client
    copier = Copier(store, args.threads, piece, "bench-stage")
    pool = ThreadPoolExecutor(args.threads)

    def clean():
        for name in os.listdir(dest):
            os.unlink(os.path.join(dest, name))

    def iogen() -> float:
        clean()
        jobs = [CopyJob(f"s3://{bucket}/ds/obj_{i}", os.path.join(dest, f"obj_{i}"), size, crcs[i])
                for i in range(args.files)]
        t0 = time.perf_counter()
        copier.copy_in(jobs)
        return time.perf_counter() - t0

    parts = [(i, off) for i in range(args.files) for off in range(0, size, piece)]

    def one(part):
        i, off = part
        end = min(size, off + piece) - 1
        data = client.get_object(Bucket=bucket, Key=f"ds/obj_{i}", Range=f"bytes={off}-{end}")["Body"].read()
        fd = os.open(os.path.join(dest, f"obj_{i}"), os.O_WRONLY)
        try:
            os.pwrite(fd, data, off)
        finally:
            os.close(fd)

    def plain() -> float:
        clean()
        t0 = time.perf_counter()
        for i in range(args.files):  # the files exist before the parts land, as iogen's temporaries do
            os.close(os.open(os.path.join(dest, f"obj_{i}"), os.O_WRONLY | os.O_CREAT, 0o644))
        list(pool.map(one, parts))
        return time.perf_counter() - t0

    mi, mp = alternated_medians(iogen, plain, args.reps)
    pool.shutdown()
    copier.close()
    figures = store.drain()
    clean()
    if args.dest is None:
        shutil.rmtree(dest, ignore_errors=True)
    mib = args.files * size / 2**20
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; {args.files} objects "
          f"of {args.object_mib} MiB, {args.threads} threads, {args.transfer_kib} KiB parts/pieces, "
          f"medians of {args.reps}; iogen GETs over all rounds: {figures.get('get', {}).get('requests')}")
    ratio_table(mib, "round", ("iogen Copier.copy_in (CRC checked)", mi), ("plain boto3 ranged get_object + pwrite loop", mp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
