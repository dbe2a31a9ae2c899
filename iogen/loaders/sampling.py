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
"""
from __future__ import annotations

import copy
import os
import threading
from typing import NamedTuple

import numpy as np

from .. import core
from ..errors import DataError, ReadFailure
from ..formats.base import RecordError
from .filetable import FileTable

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


class SampleReader:
    """Reads samples of one split by global id, in this process; safe to call from many threads."""

    def __init__(self, layout, fmt, *, direct: bool = False, verify: bool = True, reopen: bool = False):
        self.layout = _LayoutView(layout)
        self.fmt = fmt
        self.direct = bool(direct)
        self.reopen = bool(reopen)  # reader.reopen_files: one open and close per sample read
        self.samples_per_file = layout.samples_per_file
        self._check = getattr(fmt, "check_read", None) if verify else None
        self._read_checked = getattr(fmt, "pread_checked", None) if verify else None
        self._table = None
        self._pid = None
        self._lock = threading.Lock()

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
            # A forked child opens its own descriptors; the parent's stay the parent's to close.
            self._table = FileTable(self.layout, self.fmt, direct=self.direct, reopen=self.reopen)
            self._pid = pid
        return self._table

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
            return self._decode(files, samples, alloc)
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
                        raise DataError(self.path(files[bad]), "record checksum mismatch", offset=int(offsets[bad]))
                else:
                    nbytes = int(core.reader.pread_into(fds, start, read_len, required, buf, buf_off))
            except ReadFailure as exc:
                path = self.path(files[exc.index])
                if exc.errno:
                    raise DataError(path, f"read failed: {exc.strerror}", offset=exc.offset) from exc
                raise DataError(path, f"file is truncated: got {exc.nread} of the bytes a sample needs",
                                offset=exc.offset) from exc
        finally:
            for fd in transient:
                core.reader.close_file(fd)
        entry = buf_off + skip
        if self._check is not None and not checked:
            bad = self._check(buf, entry, lengths)
            if bad >= 0:
                raise DataError(self.path(files[bad]), "record checksum mismatch", offset=int(offsets[bad]))
        try:
            starts, lens = self.fmt.payload_spans(buf, entry, lengths)
        except RecordError as exc:
            raise DataError(self.path(files[exc.index]), f"record {int(samples[exc.index])}: {exc.reason}",
                            offset=int(offsets[exc.index])) from None
        return BatchRead(buf, starts, lens, nbytes)

    def _decode(self, files, samples, alloc) -> BatchRead:
        """Compressed samples: the format decodes them, per file, in the order asked."""
        payloads = [None] * files.size
        rows = []  # (where, 2-D payloads) of formats that decode a file's samples as one array
        nbytes = 0
        for f in dict.fromkeys(files.tolist()):
            where = np.flatnonzero(files == f)
            path = self.path(f)
            try:
                decoded, got = self.fmt.decode_payloads(path, samples[where])
            except RecordError as exc:
                raise DataError(path, f"record {int(samples[where[exc.index]])}: {exc.reason}") from None
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


def packed(payloads, nbytes: int, alloc) -> BatchRead:
    """Decoded payloads (flat uint8 arrays, in order) back to back in one buffer from alloc(nbytes)."""
    lengths = np.array([p.size for p in payloads], np.int64)
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    buf = alloc(int(lengths.sum()))
    for p, s in zip(payloads, starts.tolist()):
        buf[s:s + p.size] = p
    return BatchRead(buf, starts, lengths, nbytes)
