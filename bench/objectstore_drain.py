"""Checkpoint drain to S3: iogen's upload of local files (iogen/data/copy.py's Copier.copy_out) against a plain boto3 loop.

Both upload the same --files local files of --file-mib each as objects, in parts of --part-mib
with --threads parts in flight across the files, alternating in one process, medians of --reps:
iogen's Copier.copy_out (what a drain to a bucket runs: every part a task, read into the thread's
reused buffer, one bytes copy for botocore, requests counted, unfinished uploads aborted on
failure; threads and clients made before the timing, as the Drainer makes them before the first
checkpoint) and a plain loop (create_multipart_upload per file, then a ThreadPoolExecutor of
--threads workers each opening the file, seeking and reading its part, upload_part, then
complete). Without --endpoint a local moto server is started (a test server in Python: absolute
figures mean nothing; the ratio is the figure).

    .venv/bin/python bench/objectstore_drain.py --files 4 --file-mib 32 --part-mib 8 --threads 2 --reps 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import alternated_medians, new_bucket, ratio_table, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--file-mib", type=int, default=32)
    ap.add_argument("--part-mib", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="checkpoint.drain_threads (its default, 2)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--src", default=None, help="local folder for the files (default: a new temporary one)")
    return run_on_s3(ap, _bench, argv)


def _bench(args, endpoint, moto: bool) -> int:
    import time

    import numpy as np

    from iogen.data.copy import Copier
    from iogen.storage.s3 import ObjectStore

    client, bucket = new_bucket(__file__, "iogen-drain", args.threads)
    size, part = args.file_mib << 20, args.part_mib << 20
    src = args.src or tempfile.mkdtemp(prefix="iogen-bench-drain-")
    os.makedirs(src, exist_ok=True)
    rng = np.random.default_rng(7)
    paths = []
    for i in range(args.files):
        paths.append(os.path.join(src, f"ckpt_{i}.pt"))
        with open(paths[-1], "wb") as f:
            f.write(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    store = ObjectStore(max_pool_connections=max(10, args.threads))
    copier = Copier(store, args.threads, store.upload_part_bytes(part), "bench-drain-put")
    pool = ThreadPoolExecutor(args.threads)

    def iogen() -> float:
        t0 = time.perf_counter()
        copier.copy_out([(p, f"s3://{bucket}/iogen/ckpt_{i}.pt") for i, p in enumerate(paths)])
        return time.perf_counter() - t0

    def plain() -> float:
        t0 = time.perf_counter()
        ups = [client.create_multipart_upload(Bucket=bucket, Key=f"plain/ckpt_{i}.pt")["UploadId"]
               for i in range(args.files)]
        nparts = -(-size // part)

        def one(task):
            i, k = task
            with open(paths[i], "rb") as f:
                f.seek(k * part)
                data = f.read(part)
            r = client.upload_part(Bucket=bucket, Key=f"plain/ckpt_{i}.pt", UploadId=ups[i], PartNumber=k + 1,
                                   Body=data)
            return i, {"ETag": r["ETag"], "PartNumber": k + 1}

        done: dict = {}
        for i, p in pool.map(one, [(i, k) for i in range(args.files) for k in range(nparts)]):
            done.setdefault(i, []).append(p)
        for i in range(args.files):
            client.complete_multipart_upload(Bucket=bucket, Key=f"plain/ckpt_{i}.pt", UploadId=ups[i],
                                             MultipartUpload={"Parts": done[i]})
        return time.perf_counter() - t0

    mi, mp = alternated_medians(iogen, plain, args.reps)
    pool.shutdown()
    copier.close()
    figures = store.drain()
    if args.src is None:
        shutil.rmtree(src, ignore_errors=True)
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; {args.files} files of "
          f"{args.file_mib} MiB in parts of {args.part_mib} MiB, {args.threads} threads, medians of {args.reps}; "
          f"iogen part PUTs over all rounds: {figures.get('put', {}).get('requests')}")
    ratio_table(args.files * size / 2**20, "drain", ("iogen Copier.copy_out (drain)", mi),
                ("plain boto3 multipart loop", mp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
