"""Checkpoints through s3torchconnector's checkpoint API (`storage.s3_client: s3torchconnector`).

What a PyTorch job does with `torch.save(state, S3Checkpoint(...).writer(uri))`: each object is
one streaming writer (the connector's S3Writer over the AWS CRT, which cuts the stream into
multipart-upload parts of its `part_size` and uploads them from its own threads), and the
restore reads each object through the connector's reader. The bytes are iogen's, not a
model's: the same names and bytes as the boto3 path (iogen/checkpoint/objects.py's part_maker,
each part a view of the thread's stamped, framed, reused buffer), written part by part.

- Writes: `S3Checkpoint.writer(uri)`, one `write()` per part, then `close()` (CompleteMultipartUpload:
  the object exists from there). The connector takes `bytes`, not a buffer: one copy of each part
  (as botocore's), then the CRT copies it into its part buffers. One writer per object:
  `checkpoint.write_threads` objects stream at once (a thread per object), never two threads on one.
- Reads: the connector's range-based reader without its buffer (`S3ReaderConstructor.range_based(0)`,
  through the S3Checkpoint's own client): `readinto` of one part-sized, reused buffer per thread,
  each call one ranged GET whose body chunks the CRT hands over as `bytes` (one copy) that the reader
  copies into the buffer (a second). `S3Checkpoint.reader(uri)` itself (s3torchconnector 1.5) takes
  no reader and gives the sequential reader, which keeps every byte it read of the object in memory
  (a BytesIO): a rank's memory would be its checkpoint's size. `checkpoint.read_threads` objects at once.
- Failures: S3Writer has no abort. Its native stream aborts the multipart upload when released
  without close (checked by tests/objectstore/test_s3torch_checkpoint.py), while IOBase's finalizer
  would close, i.e. complete, a half-written object: so a failed or interrupted object is marked
  closed and its stream released, and no partial object appears under the final key.
- Figures: the CRT hides its requests (count, retries, 503s, per-request latency); what iogen sees
  is per object: objects, bytes, errors and the time of each object's write (open to completion)
  or read, in `put_object_stream` / `get_object_stream` (iogen.objectstore.StreamStats); the bucket
  check and the HEADs before a read phase go through boto3 and are counted as requests.
"""
from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from ..errors import DataError
from ..objectkeys import root_parts, split_uri
from ..objectstore import MAX_ATTEMPTS, StreamStats, connector_args
from .objects import ObjectCheckpointer, ObjectCheckpointIO


def open_connector(wl, store, part_bytes: int):
    """An S3Checkpoint on the workload's endpoint, region and addressing (as store's boto3 client resolves
    them), parts of part_bytes, 5 attempts as boto3's."""
    from s3torchconnector import S3Checkpoint

    return S3Checkpoint(**connector_args(wl.storage, store, part_bytes=part_bytes, max_attempts=MAX_ATTEMPTS))


def connector_error(uri: str, exc: BaseException, what: str) -> DataError:
    """A DataError naming the object, with the HTTP status and S3 error code the connector's message holds."""
    text = str(exc)
    status = re.search(r"response_status: (\d+)", text)
    code = re.search(r"<Code>(\w+)</Code>", text)
    if status or code:
        detail = " ".join(x for x in ((f"HTTP {status.group(1)}" if status else ""),
                                      code.group(1) if code else "") if x)
    else:
        detail = text.splitlines()[0][:200] if text else type(exc).__name__
    return DataError(uri, f"{what} through s3torchconnector failed: {detail}")


def _abandon(writer) -> None:
    """Drop an unfinished S3Writer without completing its upload (see the module doc)."""
    writer._closed = True  # IOBase's finalizer would close() (complete) it
    writer.stream = None  # the native stream, released unclosed, aborts the multipart upload


def warm_connector(s3, wl) -> None:
    """Build the connector's native client, and its first connection, now: outside the timed windows."""
    from s3torchconnector import S3Exception

    bucket, prefix = root_parts(wl.storage.storage_root)
    try:  # S3Checkpoint has no public call that does not move an object; a LIST of one key is the cheapest
        next(iter(s3._client.list_objects(bucket, prefix, max_keys=1)), None)
    except S3Exception as exc:
        raise connector_error(f"s3://{bucket}/{prefix}", exc, "LIST") from None


class StreamFigures:
    """Thread-safe StreamStats per operation (put_object_stream, get_object_stream), drained per phase."""

    def __init__(self):
        self._lock = threading.Lock()
        self._stats: dict[str, StreamStats] = {}

    def record(self, op: str, nbytes: int, duration_ns: int, failed: bool = False) -> None:
        """One object's write or read: its bytes and time, or a failure."""
        with self._lock:
            s = self._stats.setdefault(op, StreamStats())
            if failed:
                s.errors += 1
            else:
                s.record(nbytes, duration_ns)

    def drain(self) -> dict:
        """Figures since the last drain, then reset."""
        with self._lock:
            stats, self._stats = self._stats, {}
        return {op: s.to_dict() for op, s in stats.items()}


def stream_object(s3, uri: str, size: int, part_bytes: int, part_of, figures: StreamFigures,
                  stop: threading.Event | None = None) -> int:
    """Write one object through S3Checkpoint.writer(uri), part_of(i) for part i; no partial object on failure."""
    from s3torchconnector import S3Exception

    t0 = time.perf_counter_ns()
    writer = None
    done = False
    try:
        writer = s3.writer(uri)
        for i in range(max(1, -(-size // part_bytes))):
            if stop is not None and stop.is_set():
                raise _Stopped()
            n = min(part_bytes, size - i * part_bytes)
            writer.write(part_of(i)[:n].tobytes())  # the connector takes bytes, not a buffer: one copy per part
        writer.close()  # CompleteMultipartUpload: the object exists from here
        done = True
    except S3Exception as exc:
        raise connector_error(uri, exc, "upload") from None
    finally:
        if not done:
            if writer is not None:
                _abandon(writer)
            figures.record("put_object_stream", 0, 0, failed=True)
    figures.record("put_object_stream", size, time.perf_counter_ns() - t0)
    return size


class _Stopped(Exception):
    """Another object failed or the run was interrupted: this one stops between parts."""


def _run_objects(pool, work, items) -> list:
    """work(item) for each item on pool; on a failure or an interrupt the others stop between parts first."""
    stop = threading.Event()
    futures = [pool.submit(work, item, stop) for item in items]
    try:
        return [f.result() for f in futures]
    except BaseException:
        stop.set()
        wait(futures)  # every writer aborted or finished before the error leaves
        raise


class ConnectorCheckpointIO(ObjectCheckpointIO):
    """ObjectCheckpointIO whose timed writes and reads go through s3torchconnector (see the module doc)."""

    def __init__(self, wl, **kw):
        super().__init__(wl, **kw)  # boto3: the bucket HEAD before any work, the presence HEADs
        self.s3 = open_connector(wl, self.store, self.part_bytes)
        self.streams = StreamFigures()
        warm_connector(self.s3, wl)

    def write_files(self, paths_layouts, stamp: int) -> int:
        """Stream every (URI, layout) as one object, write_threads objects at once; returns the bytes."""
        self.prepare_write()
        part = self.part_maker(paths_layouts, stamp)
        sizes = [lay.size_bytes for _, lay in paths_layouts]

        def one(j, stop):
            return stream_object(self.s3, paths_layouts[j][0], sizes[j], self.part_bytes,
                                 lambda i: part(j, i), self.streams, stop)

        return sum(_run_objects(self._write_pool, one, range(len(paths_layouts))))

    def read_files(self, uris_sizes) -> int:
        """Read every object whole through the connector's reader into a reused buffer; returns bytes read."""
        from s3torchconnector import S3Exception, S3ReaderConstructor

        p = self.part_bytes
        if self._read_pool is None:
            self._read_pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="iogen-ckpt-get")
        unbuffered = S3ReaderConstructor.range_based(buffer_size=0)

        def one(item, stop):
            uri, size = item
            loc = self._local
            if getattr(loc, "rbuf", None) is None:
                loc.rbuf = np.empty(p, np.uint8)  # allocated at the first read, reused after
            view = memoryview(loc.rbuf)
            t0 = time.perf_counter_ns()
            got = 0
            try:
                bucket, key = split_uri(uri)
                reader = self.s3._client.get_object(bucket, key, reader_constructor=unbuffered)
                while got < size:
                    if stop.is_set():
                        raise _Stopped()
                    n = reader.readinto(view[:min(p, size - got)])
                    if not n:
                        break
                    got += n
            except S3Exception as exc:
                self.streams.record("get_object_stream", 0, 0, failed=True)
                raise connector_error(uri, exc, "read") from None
            if got != size:
                self.streams.record("get_object_stream", 0, 0, failed=True)
                raise DataError(uri, f"checkpoint object is truncated: read {got} of {size} bytes", offset=got)
            self.streams.record("get_object_stream", got, time.perf_counter_ns() - t0)
            return got

        return sum(_run_objects(self._read_pool, one, list(uris_sizes)))

    def figures(self) -> dict:
        """boto3's request figures (HEADs) and the connector's per-object figures since the last call."""
        return {**self.store.drain(), **self.streams.drain()}


class ConnectorCheckpointer(ObjectCheckpointer):
    """ObjectCheckpointer whose rank 0 streams each checkpoint through S3Checkpoint.writer (one object,
    one stream: checkpoint.write_threads has no parallel parts to share here). Deleting the superseded
    object goes through boto3, outside the timed windows."""

    def __init__(self, wl, world):
        super().__init__(wl, world)
        self.streams = StreamFigures()
        self.s3 = None
        if world.rank == 0:
            self.s3 = open_connector(wl, self.store, self.part_bytes)
            warm_connector(self.s3, wl)

    def _write_file(self, epoch: int, step: int) -> str:
        uri = f"{self.folder}/{self.name}-epoch{epoch}-step{step}.ckpt"
        self._stamp = self.count + 1
        stream_object(self.s3, uri, self.size_bytes, self.part_bytes, self._part, self.streams)
        self._supersede(uri)
        return uri

    def finish(self) -> None:
        """End of run: boto3's requests (deletes) and the connector's per-object figures, for the summary."""
        super().finish()
        if self.store is not None:
            self.figures = {**(self.figures or {}), **self.streams.drain()}
        return None


def checkpointer(wl, world):
    """The training checkpointer on object storage for the workload's storage.s3_client."""
    if wl.storage.s3_client == "s3torchconnector":
        return ConnectorCheckpointer(wl, world)
    return ObjectCheckpointer(wl, world)
