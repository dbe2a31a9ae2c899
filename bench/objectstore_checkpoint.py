"""Checkpoint writes to S3: iogen's Checkpointer against a plain boto3 multipart loop.

Both upload --model-mib of bytes as one object, in parts of max(--transfer-mib, 5 MiB) with
--threads parts in flight, alternating, medians of --reps: iogen through its checkpointer
(rank 0 of a world of one: content generated before the timing, parts stamped, one copy per
part into bytes, every request counted) and a plain loop (create_multipart_upload, upload_part
of slices of one prepared bytes object from a ThreadPoolExecutor, complete). Without
--endpoint a local moto server is started (a test server in Python: absolute figures mean
nothing; the ratio is the figure).

    .venv/bin/python bench/objectstore_checkpoint.py --model-mib 64 --threads 4 --reps 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line  # noqa: E402
from objectstore_reads import new_bucket, run_on_s3  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-mib", type=int, default=64)
    ap.add_argument("--transfer-mib", type=int, default=8)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    return run_on_s3(ap, _bench, argv)


def _bench(args, endpoint, moto: bool) -> int:
    import numpy as np

    from iogen.checkpoint import Checkpointer
    from iogen.world.communicator import get_world
    from iogen.config import load_workload

    client, bucket = new_bucket(__file__, "iogen-ckpt", args.threads)
    size = args.model_mib << 20
    part = max(5 << 20, args.transfer_mib << 20)
    # write_threads stays at its default: during training the schema refuses other values
    wl = load_workload("default", [
        "storage.storage_type=s3", f"storage.storage_root={bucket}", "dataset.format=npz",
        "workflow.checkpoint=True", f"model.model_size_bytes={size}", "checkpoint.checkpoint_folder=ck",
        f"checkpoint.transfer_size={part}"])
    threads = wl.checkpoint.write_threads
    ck = Checkpointer(wl, get_world())
    content = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8).tobytes()
    pool = ThreadPoolExecutor(threads)
    n = [0]

    def iogen() -> float:
        n[0] += 1
        t0 = time.perf_counter()
        ck._write_file(n[0], 0)
        t = time.perf_counter() - t0
        ck.cleanup()
        return t

    def plain() -> float:
        key = "plain/ckpt"
        t0 = time.perf_counter()
        up = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

        def one(i):
            r = client.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i + 1,
                                   Body=content[i * part:(i + 1) * part])
            return {"ETag": r["ETag"], "PartNumber": i + 1}

        parts = list(pool.map(one, range(-(-size // part))))
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        return time.perf_counter() - t0

    iogen(), plain()
    t_io, t_pl = [], []
    for rep in range(args.reps):  # the order alternates too, so neither always follows the other
        if rep % 2:
            t_pl.append(plain())
            t_io.append(iogen())
        else:
            t_io.append(iogen())
            t_pl.append(plain())
    ck.finish()
    pool.shutdown()
    mi, mp = statistics.median(t_io), statistics.median(t_pl)
    mib = size / 2**20
    print(f"after: {machine_line()}")
    print(f"server: {endpoint}{' (moto, a local test server in Python)' if moto else ''}; one object of "
          f"{args.model_mib} MiB in {-(-size // part)} parts of {part >> 20} MiB, {threads} threads "
          f"(checkpoint.write_threads), medians of {args.reps}")
    print()
    print("| contender | MiB/s | s per checkpoint |")
    print("|---|---:|---:|")
    print(f"| iogen Checkpointer | {mib / mi:.1f} | {mi:.3f} |")
    print(f"| plain boto3 multipart loop | {mib / mp:.1f} | {mp:.3f} |")
    print()
    print(f"ratio iogen / baseline (throughput): {mp / mi:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
