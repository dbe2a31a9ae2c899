"""The framework loaders' sample reader: read global sample ids for every format, shared by both.

Both framework loaders (tf.data and PyTorch) ask the same question: "read these global sample
ids, give me each sample's payload and the bytes read". `SampleReader.read` answers it for
every format through the format's own contract, so a new format needs no loader change:

- byte-addressable files (`Format.index_file` gives ranges): the ranges of the whole request are
  read by one `core.reader.pread_into` call (GIL released; O_DIRECT with aligned ranges when
  `reader.odirect`), into one caller-supplied buffer, and checked with `Format.check_read` when
  the format has it (TFRecord data CRCs). Bytes counted: the bytes read, framing included, as the
  native loader counts them.
- everything else (compressed variants, Parquet rows): the format decodes a file's samples
  (`Format.decode_payloads`: read_samples and payload_of, or one array of equal rows); bytes
  counted: the decoded sizes, as the native loader counts them.

A sample's payload is what the format says it is (`Format.payload_spans` for ranges read,
`Format.payload_of` for decoded samples): the row of an NPZ/HDF5 array, or the `image` feature
of a TFRecord's tf.train.Example, its Example parsed. `iogen.loaders.shaping` turns payloads
into arrays.

File handles are per process and opened lazily (`FileTable`, the native loader's index, created
on first use in each process); a reader pickled into a worker process carries the dataset's
parameters, never its open files, its indexes or its list of paths.

The bytes come through the workload's storage (`SampleReader.for_workload`): this machine's files
by default. On an object store each sample's range is read by sequential ranged GETs of at most
`reader.transfer_size` bytes, in the calling process (a PyTorch DataLoader worker, as a map-style
dataset's __getitem__ reads): the parallelism is the workers'. Each process makes its own client
(boto3 clients do not survive a fork) and its own FileTable, which indexes the objects it reads as
it first reads them (iogen/loaders/filetable.py), through a store of its own; compressed objects
are decoded by their format through an ObjectFile. `drain()` hands back this process's request
figures since the last call (the indexing requests under the key "index"; None where the storage
has no request figures), so a worker's figures travel to the main process with each batch.
"""
from __future__ import annotations

import copy
import os
import threading
from typing import NamedTuple

import numpy as np

from .. import core_switch as core
from ..errors import DataError, ReadFailure
from ..formats.base import RecordError
from .filetable import DEFAULT_PART_BYTES, FileTable, files_storage, split_pieces

ALIGN = 4096


class BatchRead(NamedTuple):
    """Samples read into one buffer: sample i's payload is buf[starts[i]:starts[i] + lengths[i]]."""

    buf: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    nbytes: int  # bytes read for the whole request (see the module doc)


def default_alloc(nbytes: int) -> np.ndarray:
    """A page-aligned uint8 buffer (usable for O_DIRECT): the core's aligned_buffer, at least 1 byte."""
    return core.reader.aligned_buffer(max(int(nbytes), 1), ALIGN)


def _round_up(x, to=ALIGN):
    return (x + to - 1) & ~(to - 1)


class _Paths:
    """A layout's file paths computed on demand: pickles as a few fields, not one string per file."""

    def __init__(self, layout):
        spec = copy.copy(layout)
        spec.paths = None
        spec.record_bytes = None
        self._spec = spec
        self._path = type(layout)._path
        self._n = layout.num_files

    def __getitem__(self, i):
        return self._path(self._spec, int(i))

    def __len__(self):
        return self._n


class _LayoutView:
    """What a worker process needs of a DatasetLayout (FileTable's fields), small to pickle."""

    def __init__(self, layout):
        self.num_files = layout.num_files
        self.samples_per_file = layout.samples_per_file
        self.paths = layout.paths if isinstance(layout, _LayoutView) else _Paths(layout)

    @property
    def record_bytes(self) -> np.ndarray:
        """One record size per file (what an object store's table indexes fixed layouts by), drawn on first use."""
        rb = self.__dict__.get("_record_bytes")
        if rb is None:
            spec = self.paths._spec
            rb = self._record_bytes = type(spec).record_bytes.func(spec)
        return rb

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_record_bytes"}


class SampleReader:
    """Reads samples of one split by global id, in this process; safe to call from many threads.

    storage: (backend class, workload) of the storage to read (each process makes its own from it),
    or None: this machine's files."""

    def __init__(self, layout, fmt, *, direct: bool = False, verify: bool = True, reopen: bool = False,
                 storage=None, part_bytes: int = DEFAULT_PART_BYTES):
        self.layout = _LayoutView(layout)
        self.fmt = fmt
        self.direct = bool(direct)
        self.reopen = bool(reopen)  # reader.reopen_files: one open and close per sample read
        self.samples_per_file = layout.samples_per_file
        self.part_bytes = int(part_bytes)
        self._storage = storage
        core_reads = storage is None or storage[0].capabilities.core_reads
        self.requests = storage is not None and "requests" in storage[0].capabilities.figures
        self._check = getattr(fmt, "check_read", None) if verify else None
        # each record's CRC checked as it lands, in the core's read (this machine's files)
        self._read_checked = getattr(fmt, "pread_checked", None) if verify and core_reads else None
        # formats read through a memory map (mmap_indexed_binary) copy their ranges out of it (files)
        self._read_mapped = getattr(fmt, "read_mapped", None) if core_reads and not self.direct else None
        self._table = None
        self._pid = None
        self._lock = threading.Lock()
        self.setup_figures = self.index_figures = None
        if self.requests:
            from ..storage import get_storage

            wl = storage[1]
            store = get_storage(wl, max(1, int(wl.reader.read_threads)))
            self.setup_figures = store.drain()  # the bucket's HEAD (get_storage's check), not indexing
            self._table = FileTable(self.layout, fmt, reopen=self.reopen, store=store,
                                    index_store=storage[0].from_workload(wl), part_bytes=self.part_bytes)
            self._pid = os.getpid()

    @staticmethod
    def settings(wl) -> dict:
        """The keyword arguments of the workload's reader settings and storage (O_DIRECT where it has it)."""
        from ..storage import backend_class

        r = wl.reader
        backend = backend_class(wl)
        # the workload travels to worker processes only where the storage is made from it (a client)
        storage = None if backend.capabilities.core_reads else (backend, wl)
        return {"direct": bool(r.odirect) and backend.capabilities.direct_io, "verify": bool(r.verify_checksums),
                "reopen": bool(r.reopen_files), "storage": storage,
                "part_bytes": int(r.transfer_size or DEFAULT_PART_BYTES)}

    @classmethod
    def for_workload(cls, wl, layout, fmt) -> "SampleReader":
        """The reader of the workload's storage with its reader settings."""
        return cls(layout, fmt, **cls.settings(wl))

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_table=None, _pid=None, _lock=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _files(self) -> FileTable:
        pid = os.getpid()
        if self._table is None or self._pid != pid:
            # A forked child opens its own descriptors (or clients); the parent's stay the parent's to close.
            if self._storage is None:
                store = index_store = files_storage()
            else:
                cls, wl = self._storage
                store, index_store = cls.from_workload(wl), cls.from_workload(wl)
            self._table = FileTable(self.layout, self.fmt, direct=self.direct, reopen=self.reopen, store=store,
                                    index_store=index_store, part_bytes=self.part_bytes)
            self._pid = pid
        return self._table

    def store(self):
        """This process's storage (made on first use after a fork or spawn)."""
        with self._lock:
            return self._files().store

    def drain(self) -> dict | None:
        """This process's request figures since the last drain, its indexing requests under "index";
        None where the storage has no request figures (files)."""
        if not self.requests:
            return None
        with self._lock:
            table = self._files()
        figures = table.store.drain()
        index = table.index_store.drain()
        if index:
            figures["index"] = index
        return figures

    def new_epoch(self) -> None:
        """An epoch starts in this process: the format's read caches start empty (Format.new_epoch)."""
        self.fmt.new_epoch()

    def path(self, f: int) -> str:
        """Path of file f."""
        return self.layout.paths[int(f)]

    def read(self, gids, alloc=default_alloc) -> BatchRead:
        """Read samples `gids` (in that order) into one buffer from `alloc(nbytes)`."""
        gids = np.asarray(gids, np.int64).reshape(-1)
        files, samples = gids // self.samples_per_file, gids % self.samples_per_file
        with self._lock:  # FileTable learns and opens files; it is not thread-safe
            table = self._files()
            decode = table.decode_only(files)
            if not decode:
                fds, offsets, lengths, transient = table.ranges(files, samples)
        if decode:
            return self._decode(table, files, samples, alloc)
        try:
            if self.direct:
                start = offsets & ~(ALIGN - 1)
                read_len = _round_up(offsets + lengths) - start
                required = offsets + lengths - start
                skip = offsets - start
            else:
                start, read_len, required, skip = offsets, lengths, lengths, 0
            padded = _round_up(read_len) if self.direct else read_len
            buf_off = np.zeros(gids.size, np.int64)
            np.cumsum(padded[:-1], out=buf_off[1:])
            buf = alloc(int(padded.sum()))
            checked = self._read_checked is not None and not self.direct
            try:
                if checked:
                    # each record's CRC checked as it lands, while it is in cache (TFRecord)
                    nbytes, bad = self._read_checked(fds, start, read_len, buf, buf_off)
                    nbytes = int(nbytes)
                    if bad >= 0:
                        raise DataError(self.path(files[bad]), "record checksum (CRC-32C) mismatch", offset=int(offsets[bad]))
                else:
                    nbytes = int(self._read(table, files, offsets, fds, start, read_len, required, buf, buf_off))
            except ReadFailure as exc:
                path = self.path(files[exc.index])
                if exc.errno:
                    raise DataError(path, f"read failed: {exc.strerror}", offset=exc.offset) from exc
                raise DataError(path, f"file is truncated: got {exc.nread} of the bytes a sample needs",
                                offset=exc.offset) from exc
        finally:
            table.close_handles(transient)
        entry = buf_off + skip
        if self._check is not None and not checked:
            bad = self._check(buf, entry, lengths)
            if bad >= 0:
                raise DataError(self.path(files[bad]), "record checksum (CRC-32C) mismatch", offset=int(offsets[bad]))
        try:
            starts, lens = self.fmt.payload_spans(buf, entry, lengths)
        except RecordError as exc:
            raise DataError(self.path(files[exc.index]), f"record {int(samples[exc.index])}: {exc.reason}",
                            offset=int(offsets[exc.index])) from None
        return BatchRead(buf, starts, lens, nbytes)

    def _read(self, table, files, offsets, fds, start, read_len, required, buf, buf_off) -> int:
        """The batch's ranges into buf through the storage: one call (the core's, on files); on an object
        store ranged GETs of at most part_bytes, one after another."""
        if read_len.size and read_len.max() > self.part_bytes and not table.core_reads:
            fds, start, read_len, required, buf_off, _ = split_pieces(self.part_bytes, fds, start, read_len,
                                                                      required, buf_off)
        if self._read_mapped is not None:
            return self._read_mapped(fds, start, read_len, required, buf, buf_off)
        return table.store.read_handles(fds, start, read_len, required, buf, buf_off)

    def _decode_file(self, table, f: int, ids, where, out=None):
        """fmt.decode_payloads of samples `ids` of file f (at places `where` of the batch), its errors named."""
        source = table.source(f)
        try:
            if out is None:
                return self.fmt.decode_payloads(source, ids)
            return self.fmt.decode_payloads(source, ids, out=out)
        except RecordError as exc:
            raise DataError(self.path(f), f"record {int(ids[exc.index])}: {exc.reason}") from None
        except DataError as exc:
            if hasattr(source, "reraise"):
                source.reraise(exc)  # the request error behind a library's error (h5py's)
            raise

    def _decode(self, table, files, samples, alloc) -> BatchRead:
        """Compressed samples: the format decodes them, per file, in the order asked (from the file, or
        through an ObjectFile on an object store)."""
        width = self.fmt.decoded_row_bytes
        if width:  # every sample a row of one width: each file's rows decoded into the batch's buffer
            buf = alloc(files.size * width)
            view = buf[:files.size * width].reshape(files.size, width)
            nbytes = 0
            one = files.size and files[0] == files[-1] and not (files != files[0]).any()
            for f in ([int(files[0])] if one else dict.fromkeys(files.tolist())):
                where = np.arange(files.size) if one else np.flatnonzero(files == f)
                lo, hi = int(where[0]), int(where[-1]) + 1
                dest = view[lo:hi] if hi - lo == where.size else None  # the file's samples adjacent
                decoded, got = self._decode_file(table, f, samples[where], where, dest)
                nbytes += decoded
                if dest is None:
                    view[where] = got
            return BatchRead(buf, np.arange(files.size, dtype=np.int64) * width, np.full(files.size, width, np.int64),
                             nbytes)
        payloads = [None] * files.size
        rows = []  # (where, 2-D payloads) of formats that decode a file's samples as one array
        nbytes = 0
        for f in dict.fromkeys(files.tolist()):
            where = np.flatnonzero(files == f)
            decoded, got = self._decode_file(table, f, samples[where], where)
            nbytes += decoded
            if isinstance(got, np.ndarray):
                rows.append((where, got))
            else:
                for i, p in zip(where.tolist(), got):
                    payloads[i] = p
        if rows and len({m.shape[1] for _, m in rows}) == 1 and sum(w.size for w, _ in rows) == files.size:
            width = rows[0][1].shape[1]  # every sample a row of one width: one copy a file
            buf = alloc(files.size * width)
            view = buf[:files.size * width].reshape(files.size, width)
            for where, m in rows:
                view[where] = m
            return BatchRead(buf, np.arange(files.size, dtype=np.int64) * width, np.full(files.size, width, np.int64),
                             nbytes)
        for where, m in rows:
            for i, p in zip(where.tolist(), m):
                payloads[i] = p
        return packed(payloads, nbytes, alloc)


def keep_figures(loader, reader) -> None:
    """A framework loader over a reader whose storage counts requests keeps their figures as the native
    loader does: the bucket check (setup_figures), the indexing and each epoch's reads."""
    if reader.requests:
        loader.index_figures, loader.epoch_figures = reader.index_figures, []
        loader.setup_figures = reader.setup_figures


def packed(payloads, nbytes: int, alloc) -> BatchRead:
    """Decoded payloads (flat uint8 arrays, in order) back to back in one buffer from alloc(nbytes)."""
    lengths = np.array([p.size for p in payloads], np.int64)
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    buf = alloc(int(lengths.sum()))
    for p, s in zip(payloads, starts.tolist()):
        buf[s:s + p.size] = p
    return BatchRead(buf, starts, lengths, nbytes)
