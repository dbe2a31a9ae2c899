"""The native loader on object storage: the plan's samples read by concurrent ranged GETs.

Selected for `reader.data_loader: native` with `storage.storage_type: s3`. The plan, batches and
step metrics are the native loader's; only the byte source differs: each sample's byte range
(from the format's index) is read by ranged GETs of at most `reader.transfer_size` bytes
(8 MiB by default), `reader.read_threads` of them in flight, straight into one of the loader's
reusable batch buffers (prefetch_size + 2 of them, grown only when a batch needs more).
TFRecord frames are CRC-checked after the read, as the native loader does on files. Objects
whose samples are not byte ranges (compressed variants) are decoded by their format through an
ObjectFile (iogen/objectfile.py), one task per object of a batch on the same threads.

Indexing (iogen/loaders/objecttable.py): lazily, only the objects a batch touches, by
arithmetic where the format's layout is fixed (no request), else through the format's reader
on an ObjectFile; those requests are reported apart (`object_store.index`).
"""
from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import DataError
from ..formats.base import RecordError
from .base import Batch, Loader
from .objecttable import ObjectTable
from .preprocess import Preprocess, sleep_ns

DEFAULT_PART_BYTES = 8 << 20
_MAKE_LOCK = threading.Lock()  # one store and table per process, however many threads ask first


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
        from ..storage import backend_class, get_storage

        rd = wl.reader
        self.threads = max(1, int(rd.read_threads))
        self.prefetch = max(0, int(rd.prefetch_size))
        self.part_bytes = int(rd.transfer_size or DEFAULT_PART_BYTES)
        self.store = get_storage(wl, self.threads)
        self._index_store = backend_class(wl).from_workload(wl, self.threads)  # its requests: object_store.index
        self._check = getattr(fmt, "check_read", None) if rd.verify_checksums else None
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="iogen-get")
        # DLIO's per-sample preprocessing, spent by the reading threads after a batch's GETs (so
        # it overlaps the engine's compute), drawn as the native loader on files draws it
        self.preprocess = Preprocess(wl, layout, world, salt=Preprocess.NATIVE_SALT)
        self.table = ObjectTable(layout, fmt, self._index_store, self.part_bytes)
        self.setup_figures = self.store.drain()  # the bucket's HEAD (get_storage's check), not indexing
        self.index_figures = merge_index(None, self._index_store.drain())
        self.epoch_figures: list[dict] = []
        # sized before the run for a batch of the largest records (grown if a batch needs more)
        batch = rd.batch_size if layout.split == "train" else rd.batch_size_eval
        fixed = fmt.fixed_index(1, layout.max_record_bytes) if layout.num_files else None
        per_sample = int(fixed.lengths[0]) if fixed is not None else layout.max_record_bytes
        self._buffers = [np.zeros(batch * per_sample, np.uint8) for _ in range(self.prefetch + 2)]

    # -- an epoch ------------------------------------------------------------------------

    def _submit(self, step: int, gids: np.ndarray):
        spf = self.layout.samples_per_file
        files, samples = gids // spf, gids % spf
        self.table.learn(files, self._pool)
        if self.table.decoded(files):
            futures = [self._pool.submit(decode_object, self.table, self.fmt, self.store, int(f), samples[files == f])
                       for f in np.unique(files)]
            return futures + self._preprocess(futures, gids.size), None, files, None, None, None, 0
        offs, lens = self.table.ranges(files, samples)
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
        return futures + self._preprocess(futures, gids.size), buf, files, offs, starts, lens, total

    def _preprocess(self, futures, samples: int) -> list:
        """The batch's preprocessing: its per-sample times summed, spent in min(threads, samples)
        equal shares, each by a reading thread once the batch's GETs are done (queued after them,
        so a share never waits for a GET that no thread has started)."""
        if not self.preprocess.on:
            return []
        total_ns = self.preprocess.batch_ns(samples)
        shares = max(1, min(self.threads, samples))
        return [self._pool.submit(_spend_after, futures, total_ns // shares) for _ in range(shares)]

    def _finish(self, item) -> Batch:
        futures, buf, files, offs, starts, lens, total = item
        if buf is None:  # decoded: the bytes are the decoded sizes, as the native loader counts them
            decoded = [r for r in (fut.result() for fut in futures) if r is not None]
            return Batch(int(files.size), sum(n for n, _ in decoded), [p for _, ps in decoded for p in ps])
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
            self.index_figures = merge_index(self.index_figures, self._index_store.drain())

    def evict(self) -> None:
        """Nothing to evict: objects are not in this node's page cache."""

    def close(self) -> None:
        """Stop the reader threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _spend_after(futures, ns: int) -> None:
    """Wait for a batch's reads, then spend ns as preprocessing (nothing if a read failed)."""
    from concurrent.futures import wait

    wait(futures)
    if not any(f.cancelled() or f.exception() is not None for f in futures):
        sleep_ns(ns)


def merge_index(*figures) -> dict:
    """Index request figures gathered so far, merged (None and empty parts skipped)."""
    from ..metrics.objectstore import merge_figures

    return merge_figures(f for f in figures if f)


def decode_object(table, fmt, store, f: int, samples) -> tuple[int, list]:
    """(decoded bytes, payloads) of samples of object f, decoded by its format through an ObjectFile."""
    uri = table.layout.paths[f]
    with table.open(f, store) as fobj:
        try:
            decoded = fmt.read_samples(fobj, samples)
        except DataError as exc:
            fobj.reraise(exc)
    nbytes, payloads = 0, []
    for i, sample in zip(np.asarray(samples).tolist(), decoded):
        try:
            payloads.append(fmt.payload_of(sample))  # it must parse, as a framework's parser needs it to
        except RecordError as exc:
            raise DataError(uri, f"record {i}: {exc.reason}") from None
        nbytes += getattr(sample, "nbytes", None) or len(sample)
    return nbytes, payloads


class ObjectSampleReader:
    """The framework loaders' SampleReader over objects: `read(gids, alloc) -> BatchRead`.

    Each sample's range is read by sequential ranged GETs of at most transfer_size bytes, in the
    calling process (a PyTorch DataLoader worker, as a map-style dataset's __getitem__ reads):
    the parallelism is the workers'. Each process makes its own client (boto3 clients do not
    survive a fork) and its own ObjectTable: it indexes the objects it reads as it first reads
    them (iogen/loaders/objecttable.py). Compressed objects are decoded by their format through
    an ObjectFile. `drain()` hands back this process's request figures since the last call (the
    indexing requests under the key "index"), so a worker's figures travel to the main process
    with each batch.
    """

    def __init__(self, wl, layout, fmt):
        from ..storage import backend_class, get_storage

        rd = wl.reader
        self._make_store = (backend_class(wl), wl)  # each process makes its own (pickled by reference and value)
        self.layout = layout  # a DatasetLayout pickles as its parameters, no list of keys
        self.samples_per_file = layout.samples_per_file
        self.fmt = fmt
        self.part_bytes = int(rd.transfer_size or DEFAULT_PART_BYTES)
        self._check = getattr(fmt, "check_read", None) if rd.verify_checksums else None
        store = get_storage(wl, max(1, int(rd.read_threads)))
        self.setup_figures = store.drain()  # the bucket's HEAD (get_storage's check), not indexing
        self.index_figures = None
        self._store, self._index_store, self._table, self._pid = store, None, None, os.getpid()

    def __getstate__(self):
        return {**self.__dict__, "_store": None, "_index_store": None, "_table": None, "_pid": None}

    def store(self):
        """This process's store (made on first use after a fork or spawn), and its table."""
        if self._store is not None and self._pid == os.getpid() and self._table is not None:
            return self._store
        with _MAKE_LOCK:
            if self._store is not None and self._pid == os.getpid() and self._table is not None:
                return self._store
            cls, wl = self._make_store
            if self._store is None or self._pid != os.getpid():
                self._store = cls.from_workload(wl)
            self._index_store = cls.from_workload(wl)
            self._table = ObjectTable(self.layout, self.fmt, self._index_store, self.part_bytes)
            self._pid = os.getpid()
            return self._store

    def path(self, f: int) -> str:
        """The s3:// URI of object f."""
        return self.layout.paths[int(f)]

    def drain(self) -> dict:
        """This process's request figures since the last drain; its indexing requests under "index"."""
        figures = self.store().drain()
        index = self._index_store.drain()
        if index:
            figures["index"] = index
        return figures

    def read(self, gids, alloc=None):
        """Read samples gids (in that order) into one buffer from alloc(nbytes) (default: a new array)."""
        from .sampling import BatchRead

        gids = np.asarray(gids, np.int64).reshape(-1)
        files, samples = gids // self.samples_per_file, gids % self.samples_per_file
        store = self.store()
        table = self._table
        if table.decoded(files):
            return self._decode(table, store, files, samples, alloc)
        offs, lens = table.ranges(files, samples)
        starts = np.zeros(lens.size, np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        total = int(lens.sum())
        buf = alloc(total) if alloc is not None else np.empty(total, np.uint8)
        self._fill(store, buf, files, offs, lens, starts)
        pstarts, plens = checked_spans(self.layout, self.fmt, self._check, buf, files, offs, starts, lens)
        return BatchRead(buf, pstarts, plens, total)

    def _fill(self, store, buf, files, offs, lens, starts) -> None:
        """Each sample's span into buf at its start: ranged GETs of at most transfer_size bytes
        (the byte source; iogen/loaders/s3torch.py reads through s3torchconnector instead)."""
        for f, off, ln, st in zip(files.tolist(), offs.tolist(), lens.tolist(), starts.tolist()):
            uri = self.layout.paths[f]
            for p in range(0, ln, self.part_bytes):
                part = min(self.part_bytes, ln - p)
                store.readinto(uri, off + p, buf[st + p:st + p + part])

    def _decode(self, table, store, files, samples, alloc):
        """Compressed samples: decoded per object by the format through an ObjectFile, in the order asked."""
        from .sampling import packed

        payloads = [None] * files.size
        nbytes = 0
        for f in dict.fromkeys(files.tolist()):
            where = np.flatnonzero(files == f)
            n, decoded = decode_object(table, self.fmt, store, f, samples[where])
            nbytes += n
            for i, p in zip(where.tolist(), decoded):
                payloads[i] = p
        return packed(payloads, nbytes, alloc or (lambda n: np.empty(n, np.uint8)))
