"""Object reads: iogen's native object loader against a plain boto3 ranged-GET loop, same objects.

Both read the same samples of the same objects (each sample's byte range, split into parts of
--transfer-kib), with --threads requests in flight, through boto3, alternating in one process.
iogen: the loader's epoch over a plan (ranged GETs into its reusable batch buffers, TFRecord
CRCs checked, request counting and latency histograms). Baseline: a ThreadPoolExecutor of
--threads workers calling one shared boto3 client's get_object(Range=...) and .read() on the
same ranges, in the same order. Indexing is outside both timings (HDF5: h5py opens each object
through iogen's ObjectFile to find its contiguous records' offset, once, before either runs).

Without --endpoint the script starts moto's standalone server on 127.0.0.1 (pip install
'moto[server]'): a local test server in Python, whose own cost dominates every request, so the
absolute figures say nothing about a real store; the ratio and the per-request overhead
((t_iogen - t_baseline) / requests) are what it measures.

    .venv/bin/python bench/objectstore_reads.py --files 16 --samples-per-file 8 --record-kib 256 --threads 4
    .venv/bin/python bench/objectstore_reads.py --format tfrecord --record-kib 1024 --transfer-kib 256
    .venv/bin/python bench/objectstore_reads.py --format hdf5 --files 16 --samples-per-file 8 --record-kib 256
"""
from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import command_line, machine_line  # noqa: E402


def start_moto():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
            return proc, endpoint
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("moto server did not start")
            time.sleep(0.1)


@contextlib.contextmanager
def s3_endpoint(endpoint=None):
    """Yield (endpoint, is_local_moto): the given endpoint, or a moto server started for the bench
    (with throwaway credentials set only where none are), stopped afterwards; AWS_ENDPOINT_URL set."""
    proc = None
    if endpoint is None:
        for k, v in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"),
                     ("AWS_DEFAULT_REGION", "us-east-1")):
            os.environ.setdefault(k, v)
        proc, endpoint = start_moto()
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    try:
        yield endpoint, proc is not None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()


def run_on_s3(ap, bench, argv=None) -> int:
    """Parse the script's options plus --endpoint, then bench(args, endpoint, moto=...) on that
    endpoint or on a moto server started for it (s3_endpoint)."""
    ap.add_argument("--endpoint", help="an S3 endpoint to use instead of a local moto server")
    args = ap.parse_args(argv)
    with s3_endpoint(args.endpoint) as (endpoint, moto):
        return bench(args, endpoint, moto=moto)


def new_bucket(script: str, prefix: str, threads: int):
    """Print the machine and command lines, then (a boto3 client with `threads` connections, a new bucket)."""
    import boto3
    import botocore.config

    print(f"before: {machine_line()}")
    print(f"command: {command_line(script)}")
    bucket = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", config=botocore.config.Config(max_pool_connections=max(10, threads)))
    client.create_bucket(Bucket=bucket)
    return client, bucket


def alternated_medians(iogen, baseline, reps: int) -> tuple[float, float]:
    """One untimed call of each (clients, connections), then reps of each, the order alternating
    so neither always follows the other; the median seconds of iogen and of the baseline."""
    iogen(), baseline()
    t_io, t_base = [], []
    for rep in range(reps):
        if rep % 2:
            t_base.append(baseline())
            t_io.append(iogen())
        else:
            t_io.append(iogen())
            t_base.append(baseline())
    return statistics.median(t_io), statistics.median(t_base)


def ratio_table(mib: float, per: str, iogen: tuple[str, float], baseline: tuple[str, float]) -> None:
    """Print MiB/s and seconds per `per` of iogen and the baseline ((name, median seconds)), then the ratio."""
    print()
    print(f"| contender | MiB/s | s per {per} |")
    print("|---|---:|---:|")
    for name, t in (iogen, baseline):
        print(f"| {name} | {mib / t:.1f} | {t:.3f} |")
    print()
    print(f"ratio iogen / baseline (throughput): {baseline[1] / iogen[1]:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", help="an S3 endpoint to use instead of a local moto server")
    ap.add_argument("--bucket", help="an existing bucket (default: a new one)")
    ap.add_argument("--format", default="npz", choices=["npz", "tfrecord", "hdf5"])
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--samples-per-file", type=int, default=8)
    ap.add_argument("--record-kib", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--transfer-kib", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prefetch", type=int, default=2, help="reader.prefetch_size")
    args = ap.parse_args(argv)

    with s3_endpoint(args.endpoint) as (endpoint, _):
        return _bench(args, endpoint)


def _bench(args, endpoint) -> int:
    import boto3
    import botocore.config

    from iogen.world.communicator import get_world
    from iogen.config import load_workload
    from iogen.data.layout import DatasetLayout
    from iogen.formats import get_format
    from iogen.loaders import get_loader
    from iogen.data.generate import generate_dataset
    from iogen.storage.s3 import open_store
    from iogen.plan import make_plan

    print(f"before: {machine_line()}")
    print(f"command: {command_line(__file__)}")
    bucket = args.bucket or "iogen-bench-" + uuid.uuid4().hex[:8]
    client = boto3.client("s3", config=botocore.config.Config(max_pool_connections=max(10, args.threads)))
    if not args.bucket:
        client.create_bucket(Bucket=bucket)
    wl = load_workload("default", [
        "storage.storage_type=s3", f"storage.storage_root={bucket}", "dataset.data_folder=bench",
        f"dataset.format={args.format}", f"dataset.num_files_train={args.files}",
        f"dataset.num_samples_per_file={args.samples_per_file}",
        f"dataset.record_length_bytes={args.record_kib * 1024}", "dataset.record_length_bytes_stdev=0",
        f"reader.batch_size={args.batch}", f"reader.read_threads={args.threads}",
        f"reader.transfer_size={args.transfer_kib * 1024}", f"reader.prefetch_size={args.prefetch}",
        "train.computation_time=0"])
    world = get_world()
    fmt = get_format(wl.dataset)
    layout = DatasetLayout.from_workload(wl, "train")
    generate_dataset(open_store(wl), [layout], fmt, world)
    loader = get_loader(wl, layout, fmt, world)  # the native loader, over the workload's storage
    plan = make_plan(num_files=layout.num_files, samples_per_file=layout.samples_per_file,
                     batch_size=args.batch)
    gids = plan.batches.reshape(-1)
    spf = layout.samples_per_file
    part = args.transfer_kib * 1024
    first = sum(b.bytes for b in loader.epoch(plan))  # the objects' index is learnt as they are read: outside both timings
    _, offsets, lengths, _ = loader.table.ranges(gids // spf, gids % spf)
    ranges = []
    for g, off, ln in zip(gids.tolist(), offsets.tolist(), lengths.tolist()):
        f = g // spf
        key = layout.paths[f].split("/", 3)[3]
        ranges += [(key, off + p, min(part, ln - p)) for p in range(0, ln, part)]
    total_bytes = sum(r[2] for r in ranges)
    assert first == total_bytes, (first, total_bytes)

    def get(r):
        key, off, ln = r
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={off}-{off + ln - 1}")["Body"]
        return len(body.read())

    pool = ThreadPoolExecutor(args.threads)

    cpu = {"iogen": [], "baseline": []}  # this process's CPU seconds per pass (user+sys, every thread)

    def baseline() -> float:
        c0, t0 = time.process_time(), time.perf_counter()
        got = sum(pool.map(get, ranges))
        assert got == total_bytes
        cpu["baseline"].append(time.process_time() - c0)
        return time.perf_counter() - t0

    def iogen() -> float:
        c0, t0 = time.process_time(), time.perf_counter()
        got = sum(b.bytes for b in loader.epoch(plan))
        assert got == total_bytes, (got, total_bytes)
        cpu["iogen"].append(time.process_time() - c0)
        return time.perf_counter() - t0

    iogen(), baseline()  # connections opened, server warm
    cpu = {"iogen": [], "baseline": []}
    t_io, t_base = [], []
    for rep in range(args.reps):  # the order alternates too, so neither always follows the other
        if rep % 2:
            t_base.append(baseline())
            t_io.append(iogen())
        else:
            t_io.append(iogen())
            t_base.append(baseline())
    loader.close()
    pool.shutdown()
    mi, mb = statistics.median(t_io), statistics.median(t_base)
    ci, cb = (statistics.median(cpu[k]) / len(ranges) * 1e6 for k in ("iogen", "baseline"))
    mib = total_bytes / 2**20
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if not args.endpoint else ''}; "
          f"{args.files} {args.format} objects, {len(gids)} samples of {args.record_kib} KiB, "
          f"{len(ranges)} ranged GETs of <= {args.transfer_kib} KiB per pass, {args.threads} threads, "
          f"medians of {args.reps}")
    print()
    print("| contender | MiB/s | GETs/s | s per pass | CPU us per GET |")
    print("|---|---:|---:|---:|---:|")
    print(f"| iogen object loader | {mib / mi:.1f} | {len(ranges) / mi:.0f} | {mi:.3f} | {ci:.0f} |")
    print(f"| plain boto3 loop | {mib / mb:.1f} | {len(ranges) / mb:.0f} | {mb:.3f} | {cb:.0f} |")
    print()
    print(f"ratio iogen / baseline (throughput): {mb / mi:.2f}x; "
          f"per-request overhead: {(mi - mb) / len(ranges) * 1e6:+.0f} us; CPU per request: {ci - cb:+.0f} us "
          "(this process's user+sys; a server on this machine works in its own processes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
