"""The native loader on object storage: the plan's samples read by concurrent ranged GETs.

Selected for `reader.data_loader: native` with `storage.storage_type: s3`. The plan, batches and
step metrics are the native loader's; only the byte source differs: each sample's byte range
(from the format's index) is read by ranged GETs of at most `reader.transfer_size` bytes
(8 MiB by default), `reader.read_threads` of them in flight, straight into one of the loader's
reusable batch buffers (prefetch_size + 2 of them, grown only when a batch needs more).
TFRecord frames are CRC-checked after the read, as the native loader does on files.

Indexing: the formats index a file by its headers and framing, read from a local file. Before
the run (outside every epoch's figures), each object is fetched once into scratch (an
anonymous memory file, iogen.objectdata.scratch_path), indexed and dropped; those GETs are
reported apart (`object_store.index`).
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import DataError
from ..formats.base import RecordError
from .base import Batch, Loader

DEFAULT_PART_BYTES = 8 << 20


def checked_spans(layout, fmt, check, buf, files, offs, starts, lens):
    """Check a batch's records as they landed (CRC-32C where the format has one, then the payload
    framing) and return the payload spans; a bad record is a DataError naming its object and offset."""
    if check is not None:
        bad = check(buf, starts, lens)
        if bad >= 0:
            raise DataError(layout.paths[int(files[bad])], "record data CRC-32C mismatch (corrupt object)",
                            int(offs[bad]))
    try:
        return fmt.payload_spans(buf, starts, lens)
    except RecordError as exc:
        raise DataError(layout.paths[int(files[exc.index])], exc.reason, int(offs[exc.index])) from None


class ObjectLoader(Loader):
    """Ranged GETs into reusable buffers (see the module doc)."""

    name = "native"

    def __init__(self, wl, layout, fmt, world):
        super().__init__(wl, layout, fmt, world)
        from ..objectstore import open_store

        rd = wl.reader
        self.threads = max(1, int(rd.read_threads))
        self.prefetch = max(0, int(rd.prefetch_size))
        self.part_bytes = int(rd.transfer_size or DEFAULT_PART_BYTES)
        self.store = open_store(wl, self.threads)
        self._check = getattr(fmt, "check_read", None) if rd.verify_checksums else None
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="iogen-get")
        self.offsets, self.lengths = index_objects(self.store, layout, fmt, self._pool)
        self.index_figures = self.store.drain()
        self.epoch_figures: list[dict] = []
        batch = rd.batch_size if layout.split == "train" else rd.batch_size_eval
        per_sample = int(self.lengths.max()) if self.lengths.size else 0
        self._buffers = [np.zeros(batch * per_sample, np.uint8) for _ in range(self.prefetch + 2)]

    # -- an epoch ------------------------------------------------------------------------

    def _submit(self, step: int, gids: np.ndarray):
        spf = self.layout.samples_per_file
        files, samples = gids // spf, gids % spf
        offs = self.offsets[files, samples]
        lens = self.lengths[files, samples]
        starts = np.zeros(lens.size, np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        total = int(lens.sum())
        slot = step % len(self._buffers)
        if self._buffers[slot].size < total:  # grow-only
            self._buffers[slot] = np.zeros(total, np.uint8)
        buf = self._buffers[slot]
        futures = []
        for f, off, ln, st in zip(files.tolist(), offs.tolist(), lens.tolist(), starts.tolist()):
            uri = self.layout.paths[f]
            for p in range(0, ln, self.part_bytes):
                part = min(self.part_bytes, ln - p)
                futures.append(self._pool.submit(self.store.readinto, uri, off + p, buf[st + p:st + p + part]))
        return futures, buf, files, offs, starts, lens, total

    def _finish(self, item) -> Batch:
        futures, buf, files, offs, starts, lens, total = item
        for fut in futures:
            fut.result()  # a DataError names the bucket, key and status
        checked_spans(self.layout, self.fmt, self._check, buf, files, offs, starts, lens)
        return Batch(int(lens.size), total, buf[:total])

    def epoch(self, plan):
        """Yield plan.steps batches; prefetch_size batches' GETs in flight ahead of the one in hand."""
        pending = deque()
        ahead = self.prefetch + 1
        try:
            for step in range(min(plan.steps, ahead)):
                pending.append(self._submit(step, plan.batches[step]))
            for step in range(plan.steps):
                batch = self._finish(pending.popleft())
                if step + ahead < plan.steps:
                    pending.append(self._submit(step + ahead, plan.batches[step + ahead]))
                yield batch
        finally:
            for item in pending:
                for fut in item[0]:
                    fut.cancel()
            for item in pending:
                for fut in item[0]:
                    if not fut.cancelled():
                        try:
                            fut.result()
                        except BaseException:
                            pass
            self.epoch_figures.append(self.store.drain())

    def evict(self) -> None:
        """Nothing to evict: objects are not in this node's page cache."""

    def close(self) -> None:
        """Stop the reader threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def index_objects(store, layout, fmt, pool) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lengths) shaped (files, samples_per_file): each object's samples, from its index."""
    spf, n = layout.samples_per_file, layout.num_files
    offsets = np.zeros((n, spf), np.int64)
    lengths = np.zeros((n, spf), np.int64)
    for i, (off, ln) in enumerate(pool.map(lambda i: _index_one(store, layout, fmt, i), range(n))):
        offsets[i], lengths[i] = off, ln
    return offsets, lengths


def _index_one(store, layout, fmt, i: int):
    """Object i indexed by its format from a scratch copy (memory): only the ranges the format
    names (Format.index_ranges, ranged GETs into a sparse copy) when it can, else the whole object."""
    from ..objectdata import scratch_path

    uri = layout.paths[i]
    head = store.head(uri)
    if head is None:
        raise DataError(uri, "object does not exist (HTTP 404 on HEAD): generate it with `iogen datagen`")
    size = head[0]
    ranges = fmt.index_ranges(size)
    with scratch_path(size, layout.suffix) as tmp:
        index = None
        if ranges is not None:
            with open(tmp, "r+b" if os.path.exists(tmp) else "wb") as f:
                f.truncate(size)  # a sparse copy: the ranges are the only bytes read
                for off, n in ranges:
                    buf = np.empty(n, np.uint8)
                    store.readinto(uri, off, buf)
                    f.seek(off)
                    f.write(buf)
            try:
                index = fmt.index_file(tmp)
            except DataError:
                index = None  # headers outside the ranges: fetch it whole
        if index is None:
            with open(tmp, "wb") as f:
                for chunk in store.get_chunks(uri):
                    f.write(chunk)
            try:
                index = fmt.index_file(tmp)
            except DataError as exc:  # name the object, not the scratch file
                raise DataError(uri, exc.message, exc.offset) from None
    if index is None:
        raise DataError(uri, "samples are not byte-addressable (compressed?); object storage reads "
                             "uncompressed npz and tfrecord only")
    spf = layout.samples_per_file
    if len(index) < spf:
        raise DataError(uri, f"holds {len(index)} sample(s), the workload reads {spf} per file "
                             "(dataset.num_samples_per_file)")
    return index.offsets[:spf], index.lengths[:spf]


class ObjectSampleReader:
    """The framework loaders' SampleReader over objects: `read(gids, alloc) -> BatchRead`.

    Each sample's range is read by sequential ranged GETs of at most transfer_size bytes, in the
    calling process (a PyTorch DataLoader worker, as a map-style dataset's __getitem__ reads):
    the parallelism is the workers'. The objects are indexed once, in the process that builds
    the reader; each process makes its own client (boto3 clients do not survive a fork).
    `drain()` hands back this process's request figures since the last call, so a worker's
    figures travel to the main process with each batch.
    """

    def __init__(self, wl, layout, fmt):
        from ..objectstore import open_store
        from .sampling import _LayoutView

        st, rd = wl.storage, wl.reader
        self._client_args = (st.endpoint_url, st.region, st.addressing_style)
        self.layout = _LayoutView(layout)
        self.samples_per_file = layout.samples_per_file
        self.fmt = fmt
        self.part_bytes = int(rd.transfer_size or DEFAULT_PART_BYTES)
        self._check = getattr(fmt, "check_read", None) if rd.verify_checksums else None
        store = open_store(wl, max(1, int(rd.read_threads)))
        with ThreadPoolExecutor(max(1, int(rd.read_threads)), thread_name_prefix="iogen-index") as pool:
            self.offsets, self.lengths = index_objects(store, layout, fmt, pool)
        self.index_figures = store.drain()
        self._store, self._pid = store, os.getpid()

    def __getstate__(self):
        return {**self.__dict__, "_store": None, "_pid": None}

    def store(self):
        """This process's store (made on first use after a fork or spawn)."""
        if self._store is None or self._pid != os.getpid():
            from ..objectstore import ObjectStore

            endpoint, region, style = self._client_args
            self._store, self._pid = ObjectStore(endpoint, region, style), os.getpid()
        return self._store

    def drain(self) -> dict:
        """This process's request figures since the last drain."""
        return self.store().drain()

    def read(self, gids, alloc=None):
        """Read samples gids (in that order) into one buffer from alloc(nbytes) (default: a new array)."""
        from .sampling import BatchRead

        gids = np.asarray(gids, np.int64).reshape(-1)
        files, samples = gids // self.samples_per_file, gids % self.samples_per_file
        offs, lens = self.offsets[files, samples], self.lengths[files, samples]
        starts = np.zeros(lens.size, np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        total = int(lens.sum())
        buf = alloc(total) if alloc is not None else np.empty(total, np.uint8)
        store = self.store()
        for f, off, ln, st in zip(files.tolist(), offs.tolist(), lens.tolist(), starts.tolist()):
            uri = self.layout.paths[f]
            for p in range(0, ln, self.part_bytes):
                part = min(self.part_bytes, ln - p)
                store.readinto(uri, off + p, buf[st + p:st + p + part])
        pstarts, plens = checked_spans(self.layout, self.fmt, self._check, buf, files, offs, starts, lens)
        return BatchRead(buf, pstarts, plens, total)
