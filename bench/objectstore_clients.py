"""S3 clients on the same ranged reads: boto3, obstore, s3dlio, s3torchconnector, each plain and through iogen.

The measurement behind docs/objectstore.md's choice of client. Every contender reads the same
ranges (each of --objects objects of --object-mib cut into --range-kib pieces) with --threads
threads of a ThreadPoolExecutor, alternating, medians of --reps passes:

- boto3: one shared client, get_object(Range=...)["Body"].read();
- iogen: iogen.storage.s3.ObjectStore.readinto (a boto3 client per thread, counted, into a buffer);
- obstore: obstore.get_range on one S3Store (Rust, object_store crate);
- s3torchconnector: S3Client.get_object with the range-based reader, seek + readinto (AWS CRT);
- s3dlio: s3dlio.get_range (Rust, the AWS SDK for Rust; its client is one per process);
- iogen's obstore and s3dlio backends (storage.s3_client obstore | s3dlio): readinto, counted.

The last column compares each iogen backend with the plain loop of its own client (goal >= 0.9x).

Contenders whose package is missing are reported as not measured. Without --endpoint the
script starts moto's standalone server on 127.0.0.1: a local test server in Python, whose own
cost dominates, so the figures rank client overheads on a slow server, not real throughput.

    .venv/bin/python bench/objectstore_clients.py --objects 8 --object-mib 4 --range-kib 256 --threads 4
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import new_bucket, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=8)
    ap.add_argument("--object-mib", type=int, default=4)
    ap.add_argument("--range-kib", type=int, default=256)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    return run_on_s3(ap, _bench, argv)


def _bench(args, endpoint, moto: bool) -> int:

    from iogen.storage.s3 import ObjectStore

    region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    client, bucket = new_bucket(__file__, "iogen-clients", args.threads)
    size = args.object_mib << 20
    rng = np.random.default_rng(7)
    keys = [f"clients/obj-{i}" for i in range(args.objects)]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    piece = args.range_kib << 10
    ranges = [(k, off, min(piece, size - off)) for k in keys for off in range(0, size, piece)]
    total = sum(r[2] for r in ranges)
    local = threading.local()

    def buf():
        b = getattr(local, "buf", None)
        if b is None:
            b = local.buf = np.empty(piece, np.uint8)
        return b

    def boto3_get(r):
        k, off, n = r
        return len(client.get_object(Bucket=bucket, Key=k, Range=f"bytes={off}-{off + n - 1}")["Body"].read())

    store = ObjectStore(endpoint)

    def iogen_get(r):
        k, off, n = r
        return store.readinto(f"s3://{bucket}/{k}", off, buf()[:n])

    contenders = {"boto3 get_object loop": boto3_get, "iogen ObjectStore.readinto": iogen_get}
    missing = []
    if importlib.util.find_spec("obstore"):
        import obstore
        from obstore.store import S3Store

        ob = S3Store(bucket, endpoint=endpoint, allow_http=True, region=region,
                     virtual_hosted_style_request=False)

        def obstore_get(r):
            k, off, n = r
            return len(memoryview(obstore.get_range(ob, k, start=off, length=n)))

        contenders["obstore get_range"] = obstore_get
        from iogen.storage.obstore_s3 import ObstoreStorage

        ob_store = ObstoreStorage(endpoint, region, "path")

        def iogen_obstore_get(r):
            k, off, n = r
            return ob_store.readinto(f"s3://{bucket}/{k}", off, buf()[:n])

        contenders["iogen obstore backend readinto"] = iogen_obstore_get
    else:
        missing.append("obstore")
    if importlib.util.find_spec("s3dlio"):
        import s3dlio

        from iogen.storage.s3dlio_s3 import S3dlioStorage

        dl_store = S3dlioStorage(endpoint, region, "path")
        dl_store._configured()  # configures s3dlio's one client for this endpoint

        def s3dlio_get(r):
            k, off, n = r
            return len(memoryview(s3dlio.get_range(f"s3://{bucket}/{k}", off, n)))

        def iogen_s3dlio_get(r):
            k, off, n = r
            return dl_store.readinto(f"s3://{bucket}/{k}", off, buf()[:n])

        contenders["s3dlio get_range"] = s3dlio_get
        contenders["iogen s3dlio backend readinto"] = iogen_s3dlio_get
    else:
        missing.append("s3dlio")
    if importlib.util.find_spec("s3torchconnector"):
        from s3torchconnector import S3ReaderConstructor
        from s3torchconnector._s3client import S3Client, S3ClientConfig

        s3tc = S3Client(region, endpoint=endpoint, s3client_config=S3ClientConfig(force_path_style=True))
        ranged = S3ReaderConstructor.range_based()

        def s3tc_get(r):
            k, off, n = r
            reader = s3tc.get_object(bucket, k, reader_constructor=ranged)
            reader.seek(off)
            return reader.readinto(memoryview(buf())[:n])

        contenders["s3torchconnector range reader"] = s3tc_get
    else:
        missing.append("s3torchconnector")

    pool = ThreadPoolExecutor(args.threads)

    def one_pass(fn) -> tuple[float, float]:
        """(seconds, this process's CPU seconds) of one pass over the ranges."""
        c0, t0 = time.process_time(), time.perf_counter()
        got = sum(pool.map(fn, ranges))
        assert got == total, (fn, got, total)
        return time.perf_counter() - t0, time.process_time() - c0

    times = {name: [] for name in contenders}
    cpu = {name: [] for name in contenders}
    for fn in contenders.values():
        one_pass(fn)  # connections, clients
    for rep in range(args.reps):  # the order reversed every other pass: no contender always follows another
        for name, fn in (list if rep % 2 == 0 else reversed)(list(contenders.items())):
            t, c = one_pass(fn)
            times[name].append(t)
            cpu[name].append(c)
    pool.shutdown()
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; "
          f"{args.objects} objects of {args.object_mib} MiB, {len(ranges)} ranged GETs of {args.range_kib} KiB "
          f"per pass, {args.threads} threads, medians of {args.reps}")
    print()
    print("| client | MiB/s | GETs/s | vs boto3 | iogen vs its client's plain loop | CPU us per GET |")
    print("|---|---:|---:|---:|---:|---:|")
    base = statistics.median(times["boto3 get_object loop"])
    plain = {"iogen ObjectStore.readinto": "boto3 get_object loop",
             "iogen obstore backend readinto": "obstore get_range", "iogen s3dlio backend readinto": "s3dlio get_range"}
    for name, ts in times.items():
        m = statistics.median(ts)
        own = f"{statistics.median(times[plain[name]]) / m:.2f}x" if name in plain else ""
        c = statistics.median(cpu[name]) / len(ranges) * 1e6
        print(f"| {name} | {total / 2**20 / m:.1f} | {len(ranges) / m:.0f} | {base / m:.2f}x | {own} | {c:.0f} |")
    for name in missing:
        print(f"| {name} | not measured (not installed) | | | | |")
    print("\nCPU us per GET: this process's user+sys time per request (the server's, in its own processes, not "
          "included); iogen's backend against its client's plain loop is the per-request overhead iogen adds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
