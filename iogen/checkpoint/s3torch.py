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
  or read, in `put_object_stream` / `get_object_stream` (iogen.storage.figures.StreamStats; the connector calls themselves live in
  iogen/storage/s3torch.py); the bucket
  check and the HEADs before a read phase go through boto3 and are counted as requests.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from ..storage.s3torch import StreamFigures, open_connector, read_object, stream_object, warm_connector
from .objects import ObjectCheckpointIO


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
        warm_connector(self.s3, wl.storage)

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
        p = self.part_bytes
        if self._read_pool is None:
            self._read_pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="iogen-ckpt-get")

        def one(item, stop):
            uri, size = item
            loc = self._local
            if getattr(loc, "rbuf", None) is None:
                loc.rbuf = np.empty(p, np.uint8)  # allocated at the first read, reused after
            return read_object(self.s3, uri, size, memoryview(loc.rbuf), self.streams, stop)

        return sum(_run_objects(self._read_pool, one, list(uris_sizes)))

    def figures(self) -> dict:
        """boto3's request figures (HEADs) and the connector's per-object figures since the last call."""
        return {**self.store.drain(), **self.streams.drain()}
