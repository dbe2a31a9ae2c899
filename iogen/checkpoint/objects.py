"""Training checkpoints on object storage: rank 0 uploads `model.model_size_bytes` as one object.

The same schedule as on files (iogen/checkpoint/training.py's Checkpointer decides when), the
same event figures (time of the write, every rank waiting at a barrier), but the checkpoint is
a multipart upload to `s3://<bucket>/[<prefix>/]<checkpoint_folder>/<name>-epoch<E>-step<S>.ckpt`:
parts of max(checkpoint.transfer_size, 5 MiB) (S3's smallest part), checkpoint.write_threads of
them in flight. The content is generated once, before any timed window, as the file writer's is
(the core's seeded fill; constant bytes with randomize_tensor False); each part's first 16 bytes
are stamped with the checkpoint and part numbers, so no two parts are the same bytes. An upload
that fails is aborted (no partial object); only the newest checkpoint is kept (the previous one
is deleted outside the timed windows). The requests are counted (iogen.object_store.checkpoint).
The object is written through the storage backend's write_stream (iogen/storage/): boto3's
multipart upload, or with `storage.s3_client: s3torchconnector` one S3Checkpoint writer stream,
whose per-object figures join the requests.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import core
from ..storage.s3 import part_size_bytes  # a checkpoint-only run's part size: whole transfer-size blocks
from .training import Checkpointer

MIN_PART_BYTES = 5 << 20


class ObjectCheckpointer(Checkpointer):
    """Checkpointer whose rank 0 writes objects (see the module doc)."""

    def __init__(self, wl, world):
        from ..storage import backend_class, get_storage

        ck = wl.checkpoint
        self._schedule(wl, world)
        self.folder = backend_class(wl).checkpoint_folder(wl)
        self.drainer = None
        self.io = None
        self.store = None
        self.figures = None
        if world.rank != 0:
            return
        self.part_bytes = max(MIN_PART_BYTES, int(ck.transfer_size))
        threads = max(1, int(ck.write_threads))
        self.store = get_storage(wl, threads)  # boto3's multipart uploads, or s3torchconnector's writer streams
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="iogen-ckpt-put")
        content = np.empty(min(self.part_bytes, max(1, self.size_bytes)), np.uint8)
        if ck.randomize_tensor:
            core.fill.fill_random(content, int(wl.train.seed), 1000, 0)
        else:
            content[:] = 1
        self._content = content
        self._local = threading.local()
        self._stamp = 0
        # Each upload thread makes its client and its copy of the content now, not inside the
        # first checkpoint's timed write (a client costs ~0.1 s): one task per thread, held at a barrier.
        ready = threading.Barrier(threads)

        def warm(_):
            self.store.client()
            self._part(0)
            ready.wait(timeout=60)

        list(self._pool.map(warm, range(threads)))
        self.store.prepare_stream(self.part_bytes)  # a streaming client's own client and connection, now

    def _part(self, i: int):
        """Part i's bytes, in this thread's copy of the content, stamped (checkpoint, part)."""
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = self._content.copy()
        if buf.size >= 16:
            buf[:16].view(np.uint64)[:] = (self._stamp, i)
        return buf

    def _write_file(self, epoch: int, step: int) -> str:
        uri = f"{self.folder}/{self.name}-epoch{epoch}-step{step}.ckpt"
        self._stamp = self.count + 1
        self.store.write_stream(uri, self.size_bytes, self.part_bytes, self._part, self._pool)
        self._supersede(uri)
        return uri

    def cleanup(self) -> None:
        """Delete superseded checkpoint objects (outside the timed windows)."""
        while self.stale:
            self.store.remove(self.stale.pop())

    def finish(self) -> None:
        """End of run: stop the upload threads; keep the request figures for the summary."""
        if self.store is not None:
            self._pool.shutdown(wait=True)
            self.figures = self.store.drain()
        return None


class ObjectCheckpointIO:
    """CheckpointIO's interface (iogen/checkpoint/io.py) over objects, for checkpoint-only runs.

    Each of a rank's checkpoint files is an object under the same name, with the same bytes as
    CheckpointIO writes: the content (transfer_size bytes of the core's seeded fill) repeated,
    the first 8 bytes of each transfer-size block stamped (stamp ^ file offset), the layout's
    framing over it. Parts are part_size_bytes(transfer_size); `threads` parts in flight across
    the rank's objects (iogen.storage.s3.ObjectStore.put_objects). Each upload thread holds one
    part-sized copy of the content, stamped and framed in place for each part (then restored), and
    botocore gets one bytes copy of it per part: memory is about 2 x threads x part size, never
    a file's size. Reads are ranged GETs of one part size, `read_threads` in flight, each thread
    reading into its one reused buffer; a missing or short object is a DataError naming it.
    """

    def __init__(self, wl, *, threads: int, transfer_bytes: int, seed: int, randomize: bool = True,
                 read_threads: int | None = None):
        from ..storage import get_storage

        self.threads = max(1, int(threads))
        self.read_threads = max(1, int(read_threads or threads))
        self.transfer = int(transfer_bytes)
        self.part_bytes = part_size_bytes(self.transfer)
        self.seed = seed
        self.randomize = randomize
        self.store = get_storage(wl, max(self.threads, self.read_threads))  # HEADs the bucket: exit 2 before work
        self.store.prepare_stream(self.part_bytes)  # a streaming client's own client and connection, now
        self._write_pool = None
        self._read_pool = None
        self._pristine = None
        self._local = threading.local()

    def prepare_write(self) -> None:
        """The content and every upload thread's client and part buffer, now (outside the timed windows)."""
        if self._pristine is not None:
            return
        content = np.empty(self.transfer, np.uint8)
        if self.randomize:
            core.fill.fill_random(content, self.seed, 1000, 0)
        else:
            content[:] = 1  # DLIO's randomize_tensor False
        self._pristine = np.tile(content, self.part_bytes // self.transfer)
        self._write_pool = ThreadPoolExecutor(self.threads, thread_name_prefix="iogen-ckpt-put")
        ready = threading.Barrier(self.threads)

        def warm(_):
            self.store.client()
            self._write_buf()
            ready.wait(timeout=60)

        list(self._write_pool.map(warm, range(self.threads)))

    def _write_buf(self):
        loc = self._local
        if getattr(loc, "wbuf", None) is None:
            loc.wbuf = self._pristine.copy()
            loc.dirty = []
        return loc.wbuf

    def part_maker(self, paths_layouts, stamp: int):
        """part(j, i): part i of object j, the bytes CheckpointIO writes at that offset of the file, as a
        view of the calling thread's part buffer (stamped and framed in place; valid until its next call)."""
        p, t = self.part_bytes, self.transfer
        sizes = [lay.size_bytes for _, lay in paths_layouts]
        frames = []  # per object: part -> [(offset in part, bytes)]
        for _, lay in paths_layouts:
            by_part: dict[int, list] = {}
            for off, data in lay.framing:
                pos = 0
                while pos < len(data):
                    part, inner = divmod(off + pos, p)
                    n = min(len(data) - pos, p - inner)
                    by_part.setdefault(part, []).append((inner, data[pos:pos + n]))
                    pos += n
            frames.append(by_part)
        pristine = self._pristine

        def part_of(j: int, i: int):
            buf = self._write_buf()
            loc = self._local
            for a, b in loc.dirty:  # undo the previous part's stamps and framing
                buf[a:b] = pristine[a:b]
            loc.dirty = []
            start = i * p
            n = min(p, sizes[j] - start)
            for k in range(0, n, t):
                if min(t, n - k) >= 8:  # as core.ckpt.write_range stamps a block
                    buf[k:k + 8] = np.frombuffer(((stamp ^ (start + k)) & _MASK64).to_bytes(8, "little"), np.uint8)
                    loc.dirty.append((k, k + 8))
            for inner, data in frames[j].get(i, ()):
                buf[inner:inner + len(data)] = np.frombuffer(data, np.uint8)
                loc.dirty.append((inner, inner + len(data)))
            return buf[:n]

        return part_of

    def write_files(self, paths_layouts, stamp: int) -> int:
        """Upload every (URI, layout) as one object; returns the bytes in them. DataError naming one on failure."""
        self.prepare_write()
        items = [(uri, lay.size_bytes) for uri, lay in paths_layouts]
        return self.store.write_objects(items, self.part_bytes, self.part_maker(paths_layouts, stamp), self._write_pool)

    def release_write_buffers(self) -> None:
        """Drop the content and the upload threads' buffers (before a read phase)."""
        if self._write_pool is not None:
            self._write_pool.shutdown(wait=True)  # its threads, and their buffers, end
        self._write_pool = None
        self._pristine = None

    def check_present(self, uris_sizes) -> None:
        """HEAD each object (outside the timed windows): DataError naming the first missing or wrong-sized one."""
        from ..errors import DataError

        for uri, size in uris_sizes:
            found = self.store.head(uri)
            if found is None:
                raise DataError(uri, "checkpoint object is missing (write it first with "
                                     "checkpoint.num_checkpoints_write)")
            if found[0] != size:
                what = "truncated" if found[0] < size else "longer than expected"
                raise DataError(uri, f"checkpoint object is {what}: {found[0]} bytes, expected {size} "
                                     "(written with other model settings, or cut short)")

    def read_files(self, uris_sizes) -> int:
        """Read every object whole into reused buffers (the backend's read_objects); returns bytes read."""
        p = self.part_bytes
        if self._read_pool is None:
            self._read_pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="iogen-ckpt-get")

        def buffer():
            loc = self._local
            if getattr(loc, "rbuf", None) is None:
                loc.rbuf = np.empty(p, np.uint8)  # allocated at the first read, reused after
            return loc.rbuf

        return self.store.read_objects(list(uris_sizes), p, self._read_pool, buffer)  # a short one: DataError

    def figures(self) -> dict:
        """The backend's figures since the last call (requests; with s3torchconnector its per-object figures too)."""
        return self.store.drain()

    def close(self) -> None:
        """Stop the threads and release the buffers."""
        for pool in (self._write_pool, self._read_pool):
            if pool is not None:
                pool.shutdown(wait=True)
        self._write_pool = self._read_pool = None
        self._pristine = None


_MASK64 = (1 << 64) - 1
