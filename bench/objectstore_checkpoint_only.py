"""Checkpoint-only runs on S3: iogen's CheckpointIO against a plain boto3 loop, write and read.

One rank's checkpoint files of a small llama3-8b (--hidden; torch layout) are written as objects
and read back, --threads requests in flight, alternating, medians of --reps: iogen through
CheckpointIO (what `iogen run` uses: parts stamped and framed from reused buffers, one
bytes copy per part, every request counted; restore by ranged GETs into reused buffers) and a
plain loop (the same objects and part size: create_multipart_upload / upload_part of slices of
prepared bytes / complete, or one put_object; reads: ranged get_object of the same parts,
Body.read(), from a ThreadPoolExecutor). With s3torchconnector installed, two more: iogen through
CheckpointIO on the s3torchconnector backend (`storage.s3_client: s3torchconnector`: S3Checkpoint.writer per object fed
with the same stamped parts, restore by the connector's unbuffered range reader into reused
buffers) and a plain S3Checkpoint loop (the same objects, the same part size, --threads objects
at once from a ThreadPoolExecutor: writer(uri).write() of part-sized slices of prepared bytes,
close(); reads: the same range reader, readinto a buffer per thread). With obstore and s3dlio
installed, iogen on each of those backends against that client's own plain loop (_rust_contenders). Each object is one stream
in both, so at most min(--threads, files) objects move at once. Without --endpoint a local moto server is started (a
test server in Python: absolute figures mean nothing; the ratios are the figures).

    .venv/bin/python bench/objectstore_checkpoint_only.py --hidden 512 --threads 4 --reps 3
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import new_bucket, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512, help="model.transformer.hidden_size (2 layers)")
    ap.add_argument("--transfer-mib", type=int, default=4, help="checkpoint.transfer_size")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-connector", action="store_true", help="leave out the s3torchconnector contenders")
    ap.add_argument("--no-rust", action="store_true", help="leave out the obstore and s3dlio contenders")
    return run_on_s3(ap, _bench, argv)


def _bench(args, endpoint, moto: bool) -> int:
    import numpy as np

    from iogen.checkpoint.model import ModelSpec
    from iogen.checkpoint.io import CheckpointIO, checkpoint_storage
    from iogen.checkpoint.phases import RankFiles
    from iogen.config import load_workload

    client, bucket = new_bucket(__file__, "iogen-ckpt", args.threads)
    h = args.hidden
    wl = load_workload("llama3-8b", [
        "storage.storage_type=s3", f"storage.storage_root={bucket}", "checkpoint.checkpoint_folder=ck",
        "checkpoint.fsync=False", "model.num_layers=2", f"model.transformer.hidden_size={h}",
        f"model.transformer.ffn_hidden_size={2 * h}", "model.transformer.vocab_size=512",
        "model.transformer.num_attention_heads=4", "model.transformer.num_kv_heads=2",
        f"checkpoint.transfer_size={args.transfer_mib << 20}"])
    files = RankFiles(ModelSpec.from_workload(wl), 0, 1, "torch")
    io = CheckpointIO(checkpoint_storage(wl, args.threads), threads=args.threads,
                      transfer_bytes=args.transfer_mib << 20, seed=1, read_threads=args.threads)
    part = io.part_bytes
    sizes = [lay.size_bytes for lay in files.layouts]
    total = sum(sizes)
    content = np.random.default_rng(3).integers(0, 256, max(sizes), dtype=np.uint8).tobytes()
    pool = ThreadPoolExecutor(args.threads)
    iogen_write, iogen_read = _iogen_timers(io, files, f"s3://{bucket}/ck")

    def plain_write() -> float:
        keys = [f"plain/{name}" for name in files.names]
        t0 = time.perf_counter()
        ups = {}
        for key, size in zip(keys, sizes):
            if size > part:
                ups[key] = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

        def one(task):
            key, size, i = task
            if key not in ups:
                client.put_object(Bucket=bucket, Key=key, Body=content[:size])
                return key, None
            r = client.upload_part(Bucket=bucket, Key=key, UploadId=ups[key], PartNumber=i + 1,
                                   Body=content[i * part:min(size, (i + 1) * part)])
            return key, {"ETag": r["ETag"], "PartNumber": i + 1}

        tasks = [(k, s, i) for k, s in zip(keys, sizes) for i in range(max(1, -(-s // part)))]
        parts = {}
        for key, p in pool.map(one, tasks):
            if p:
                parts.setdefault(key, []).append(p)
        for key, up in ups.items():
            client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts[key]})
        return time.perf_counter() - t0

    def plain_read() -> float:
        keys = [f"plain/{name}" for name in files.names]
        t0 = time.perf_counter()

        def one(task):
            key, off, m = task
            return len(client.get_object(Bucket=bucket, Key=key, Range=f"bytes={off}-{off + m - 1}")["Body"].read())

        tasks = [(k, off, min(part, s - off)) for k, s in zip(keys, sizes) for off in range(0, s, part)]
        got = sum(pool.map(one, tasks))
        assert got == total
        return time.perf_counter() - t0

    pairs = [(("iw", iogen_write), ("pw", plain_write)), (("ir", iogen_read), ("pr", plain_read))]
    connector = None
    if not args.no_connector and importlib.util.find_spec("s3torchconnector"):
        connector = _connector_contenders(wl, files, bucket, args.threads, content, pool)
        pairs += connector
    rust = {}  # the Rust clients: iogen's backend on each against the client's own plain loop
    for name in ("obstore", "s3dlio"):
        if not args.no_rust and importlib.util.find_spec(name):
            rust[name] = _rust_contenders(name, wl, files, bucket, args.threads, content, pool, endpoint)
            pairs += rust[name]
    io.prepare_write()
    for pair in pairs:  # warm-up: clients, connections
        for _, fn in pair:
            fn()
    res = {k: [] for pair in pairs for k, _ in pair}
    for rep in range(args.reps):  # the order alternates, so neither always follows the other
        for pair in pairs:
            for key, fn in (pair if rep % 2 == 0 else pair[::-1]):
                res[key].append(fn())
    io.close()
    pool.shutdown()
    med = {k: statistics.median(v) for k, v in res.items()}
    mib = total / 2**20
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; one rank's checkpoint: "
          f"{len(sizes)} files, {mib:.1f} MiB, parts of {part >> 20} MiB, {args.threads} threads, medians of "
          f"{args.reps}")
    print()
    print("| contender | write MiB/s | read MiB/s |")
    print("|---|---:|---:|")
    print(f"| iogen CheckpointIO | {mib / med['iw']:.1f} | {mib / med['ir']:.1f} |")
    print(f"| plain boto3 loop | {mib / med['pw']:.1f} | {mib / med['pr']:.1f} |")
    if connector:
        print(f"| iogen CheckpointIO (s3torchconnector) | {mib / med['cw']:.1f} | {mib / med['cr']:.1f} |")
        print(f"| plain S3Checkpoint loop | {mib / med['qw']:.1f} | {mib / med['qr']:.1f} |")
    else:
        print("| s3torchconnector contenders | not measured (not installed, or --no-connector) | |")
    for name in ("obstore", "s3dlio"):
        if name in rust:
            w = name[:2]
            print(f"| iogen CheckpointIO ({name}) | {mib / med[w + 'iw']:.1f} | {mib / med[w + 'ir']:.1f} |")
            print(f"| plain {name} loop | {mib / med[w + 'pw']:.1f} | {mib / med[w + 'pr']:.1f} |")
        else:
            print(f"| {name} contenders | not measured (not installed, or --no-rust) | |")
    print()
    print(f"ratio iogen / baseline (throughput): write {med['pw'] / med['iw']:.2f}x, read {med['pr'] / med['ir']:.2f}x")
    if connector:
        print(f"ratio iogen / baseline through s3torchconnector: write {med['qw'] / med['cw']:.2f}x, "
              f"read {med['qr'] / med['cr']:.2f}x")
    for name in rust:
        w = name[:2]
        print(f"ratio iogen / baseline through {name}: write {med[w + 'pw'] / med[w + 'iw']:.2f}x, "
              f"read {med[w + 'pr'] / med[w + 'ir']:.2f}x")
    return 0


def _iogen_timers(io, files, folder):
    """(write, read) timers of an iogen checkpoint IO: each write a new checkpoint, each read the newest."""
    n = [0]
    sizes = [lay.size_bytes for lay in files.layouts]

    def write() -> float:
        n[0] += 1
        uris = files.paths(folder, n[0])
        t0 = time.perf_counter()
        io.write_files(list(zip(uris, files.layouts)), stamp=n[0] << 20 | 1)
        return time.perf_counter() - t0

    def read() -> float:
        uris = files.paths(folder, n[0])
        t0 = time.perf_counter()
        assert io.read_files(list(zip(uris, sizes))) == sum(sizes)
        return time.perf_counter() - t0

    return write, read


def _connector_contenders(wl, files, bucket, threads, content, pool):
    """(write pair, read pair) through s3torchconnector: iogen's CheckpointIO on the s3torchconnector
    backend (what iogen run uses with storage.s3_client s3torchconnector), a plain S3Checkpoint loop."""
    import numpy as np
    from s3torchconnector import S3ReaderConstructor

    from iogen.checkpoint.io import CheckpointIO, checkpoint_storage
    from iogen.storage.s3torch import open_connector

    wl = wl.model_copy(update={"storage": wl.storage.model_copy(update={"s3_client": "s3torchconnector"})})
    cio = CheckpointIO(checkpoint_storage(wl, threads), threads=threads, transfer_bytes=wl.checkpoint.transfer_size,
                       seed=1, read_threads=threads)
    part = cio.part_bytes
    s3 = open_connector(wl, cio.store, part)  # the plain loop's own S3Checkpoint: same settings
    sizes = [lay.size_bytes for lay in files.layouts]
    total = sum(sizes)
    unbuffered = S3ReaderConstructor.range_based(buffer_size=0)
    local = threading.local()
    cio.prepare_write()
    iogen_write, iogen_read = _iogen_timers(cio, files, f"s3://{bucket}/ck-s3tc")

    uris = [f"s3://{bucket}/plain-s3tc/{name}" for name in files.names]

    def plain_write() -> float:
        def one(item):
            uri, size = item
            try:
                with s3.writer(uri) as w:
                    for off in range(0, size, part):
                        w.write(content[off:min(size, off + part)])
            except Exception as exc:  # noqa: BLE001 - only RGW's missing completion header is taken
                if 'Header "ETag" not found' not in str(exc):
                    raise
                # Ceph RGW 16.2 leaves the header out of CompleteMultipartUpload's answer (docs/objectstore.md):
                # the loop checks the object by a HEAD, as iogen's backend does
                bucket_, _, key = uri[5:].partition("/")
                assert cio.store.client().head_object(Bucket=bucket_, Key=key)["ContentLength"] == size
            return size

        t0 = time.perf_counter()
        assert sum(pool.map(one, zip(uris, sizes))) == total
        return time.perf_counter() - t0

    def plain_read() -> float:
        def one(item):
            uri, size = item
            buf = getattr(local, "buf", None)
            if buf is None:
                buf = local.buf = memoryview(np.empty(part, np.uint8))
            bucket_, _, key = uri[5:].partition("/")
            r = s3._client.get_object(bucket_, key, reader_constructor=unbuffered)
            got = 0
            while got < size:
                m = r.readinto(buf[:min(part, size - got)])
                if not m:
                    break
                got += m
            return got

        t0 = time.perf_counter()
        assert sum(pool.map(one, zip(uris, sizes))) == total
        return time.perf_counter() - t0

    return [(("cw", iogen_write), ("qw", plain_write)), (("cr", iogen_read), ("qr", plain_read))]


def _rust_contenders(name, wl, files, bucket, threads, content, pool, endpoint):
    """(write pair, read pair) through obstore or s3dlio: iogen's CheckpointIO on that backend
    (`storage.s3_client: obstore | s3dlio`) against a plain loop of the client's own calls, the same
    objects, part size and threads: one object a thread, an object over one part through the client's
    multipart upload (obstore.put(use_multipart, chunk_size, max_concurrency=4) / s3dlio's
    MultipartUploadWriter(part_size, max_in_flight=4), as iogen's backends), else one PUT; reads: a
    ranged GET per part (get_range) from --threads threads."""
    from iogen.checkpoint.io import CheckpointIO, checkpoint_storage

    wl = wl.model_copy(update={"storage": wl.storage.model_copy(update={"s3_client": name})})
    cio = CheckpointIO(checkpoint_storage(wl, threads), threads=threads, transfer_bytes=wl.checkpoint.transfer_size,
                       seed=1, read_threads=threads)
    part = cio.part_bytes
    sizes = [lay.size_bytes for lay in files.layouts]
    total = sum(sizes)
    cio.prepare_write()
    iogen_write, iogen_read = _iogen_timers(cio, files, f"s3://{bucket}/ck-{name}")
    keys = [f"plain-{name}/{n}" for n in files.names]
    if name == "obstore":
        import obstore
        from obstore.store import S3Store

        store = S3Store(bucket, endpoint=endpoint, allow_http=endpoint.startswith("http://"),
                        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), virtual_hosted_style_request=False)

        def put(key, size):
            obstore.put(store, key, content[:size], use_multipart=size > part, chunk_size=part, max_concurrency=4)

        def get(key, off, n):
            return len(memoryview(obstore.get_range(store, key, start=off, length=n)))
    else:
        import s3dlio

        cio.store._configured()  # s3dlio's one client of this process, bound to the endpoint

        def put(key, size):
            uri = f"s3://{bucket}/{key}"
            if size <= part:
                s3dlio.put_bytes(uri, content[:size])
                return
            w = s3dlio.MultipartUploadWriter.from_uri(uri, part_size=part, max_in_flight=4, abort_on_drop=True)
            for off in range(0, size, part):
                w.write(content[off:min(size, off + part)])
            w.close()

        def get(key, off, n):
            return len(memoryview(s3dlio.get_range(f"s3://{bucket}/{key}", off, n)))

    def plain_write() -> float:
        t0 = time.perf_counter()
        list(pool.map(lambda item: put(*item), zip(keys, sizes)))
        return time.perf_counter() - t0

    def plain_read() -> float:
        tasks = [(k, off, min(part, s - off)) for k, s in zip(keys, sizes) for off in range(0, s, part)]
        t0 = time.perf_counter()
        assert sum(pool.map(lambda t: get(*t), tasks)) == total
        return time.perf_counter() - t0

    w = name[:2]
    return [((w + "iw", iogen_write), (w + "pw", plain_write)), ((w + "ir", iogen_read), (w + "pr", plain_read))]


if __name__ == "__main__":
    sys.exit(main())
