"""Reading samples for the framework loaders: one function for every format, shared by both.

Both framework loaders (tf.data and PyTorch) ask the same question: "read these global sample
ids, give me each sample's payload and the bytes read". `SampleReader.read` answers it for
every format through the format's own contract, so a new format needs no loader change:

- byte-addressable files (`Format.index_file` gives ranges): the ranges of the whole request are
  read by one `core.reader.pread_into` call (GIL released; O_DIRECT with aligned ranges when
  `reader.odirect`), into one caller-supplied buffer, and checked with `Format.check_read` when
  the format has it (TFRecord data CRCs). Bytes counted: the bytes read, framing included, as the
  native loader counts them.
- everything else (compressed variants): `Format.read_samples` decodes; bytes counted: the
  decoded sizes, as the native loader counts them.

A sample's payload is the record itself: the row of an NPZ/HDF5 array, or the `image` feature of
a TFRecord's tf.train.Example. `SampleShaper` turns payloads into arrays: `record_dims` of
`record_element_type` when the dataset declares dims, 1-D otherwise, or DLIO's resized square
(`record_length_bytes_resize`) filled from the payload's bytes.

File handles are per process and opened lazily (`FileTable`, the native loader's index, created
on first use in each process); a reader pickled into a worker process carries the dataset's
parameters, never its open files, its indexes or its list of paths.
"""
from __future__ import annotations

import copy
import math
import os
import threading
from typing import NamedTuple

import numpy as np

from .. import core
from ..errors import DataError, ReadFailure
from ..formats.base import RecordError
from .filetable import FileTable

ALIGN = 4096


class Payload(NamedTuple):
    """`Batch.data` of the framework loaders: the ids read, in the order read, and the samples."""

    ids: object  # int64 tensor of global sample ids
    x: object  # (batch, *sample) tensor; ragged or a list when sample sizes differ


class BatchRead(NamedTuple):
    """Samples read into one buffer: sample i's payload is buf[starts[i]:starts[i] + lengths[i]]."""

    buf: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    nbytes: int  # bytes read for the whole request (see the module doc)


def default_alloc(nbytes: int) -> np.ndarray:
    """A page-aligned uint8 buffer (usable for O_DIRECT), not zeroed: reads fill it."""
    nbytes = max(int(nbytes), 1)
    raw = np.empty(nbytes + ALIGN, np.uint8)
    skip = (-raw.ctypes.data) % ALIGN
    return raw[skip:skip + nbytes]  # the view keeps `raw` alive


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
        nbytes = 0
        for f in dict.fromkeys(files.tolist()):
            where = np.flatnonzero(files == f)
            path = self.path(f)
            for i, sample in zip(where, self.fmt.read_samples(path, samples[where])):
                nbytes += _nbytes(sample)
                try:
                    payloads[i] = self.fmt.payload_of(sample)
                except RecordError as exc:
                    raise DataError(path, f"record {int(samples[i])}: {exc.reason}") from None
        lengths = np.array([p.size for p in payloads], np.int64)
        starts = np.zeros(files.size, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        buf = alloc(int(lengths.sum()))
        for p, s in zip(payloads, starts.tolist()):
            buf[s:s + p.size] = p
        return BatchRead(buf, starts, lengths, nbytes)


class SampleShaper:
    """Turns payload bytes into the arrays a model would get (dtype, shape; or DLIO's resize)."""

    def __init__(self, fmt, resize_bytes: int | None = None):
        self.resize_dim = math.isqrt(int(resize_bytes)) if resize_bytes else None
        self.dtype = np.dtype(np.uint8) if self.resize_dim else fmt.payload_dtype
        self.dims = None if self.resize_dim else fmt.payload_dims

    def shape_of(self, nbytes: int) -> tuple[int, ...] | None:
        """Shape of a payload of nbytes in this dtype; None when it does not divide (kept as bytes)."""
        if self.resize_dim:
            return (self.resize_dim, self.resize_dim)
        if self.dims and math.prod(self.dims) * self.dtype.itemsize == nbytes:
            return tuple(self.dims)
        if nbytes % self.dtype.itemsize == 0:
            return (nbytes // self.dtype.itemsize,)
        return None

    def sample(self, read: BatchRead, i: int) -> np.ndarray:
        """Sample i of a read as an array (a view of the read's buffer unless resized)."""
        s, n = int(read.starts[i]), int(read.lengths[i])
        raw = read.buf[s:s + n]
        if self.resize_dim:
            out = np.empty((self.resize_dim, self.resize_dim), np.uint8)
            fill_resized(out.reshape(-1), raw)
            return out
        shape = self.shape_of(n)
        if shape is None:
            return raw
        return raw.view(self.dtype).reshape(shape)

    def batch(self, read: BatchRead, alloc=np.empty):
        """The read as one (batch, *sample) array when every sample has the same shape, else a list.

        Equal samples lying at equal spacing in the buffer (every uncompressed read) are a strided
        view of the buffer, not a copy; resized samples are written into one `alloc` buffer.
        """
        n = read.starts.size
        if self.resize_dim:
            d = self.resize_dim
            out = alloc(n * d * d).reshape(n, d, d)
            for i in range(n):
                s, ln = int(read.starts[i]), int(read.lengths[i])
                fill_resized(out[i].reshape(-1), read.buf[s:s + ln])
            return out
        lengths = read.lengths
        if n == 0 or not np.all(lengths == lengths[0]):
            return [self.sample(read, i) for i in range(n)]
        shape = self.shape_of(int(lengths[0]))
        steps = np.diff(read.starts)
        itemsize = self.dtype.itemsize if shape is not None else 1
        stride = int(steps[0]) if steps.size else int(lengths[0])
        uniform = steps.size == 0 or np.all(steps == stride)
        if not uniform or stride % itemsize or int(read.starts[0]) % itemsize:
            return np.stack([self.sample(read, i) for i in range(n)])
        first = read.buf[int(read.starts[0]):int(read.starts[0]) + stride * (n - 1) + int(lengths[0])]
        if shape is None:
            return np.lib.stride_tricks.as_strided(first, (n, int(lengths[0])), (stride, 1), writeable=False)
        typed = first.view(self.dtype) if first.size % itemsize == 0 else None
        if typed is None:
            return np.stack([self.sample(read, i) for i in range(n)])
        inner = np.empty(shape, self.dtype).strides if shape else ()
        return np.lib.stride_tricks.as_strided(typed, (n,) + shape, (stride,) + inner, writeable=False)


def fill_resized(dst: np.ndarray, src: np.ndarray) -> None:
    """Fill 1-D uint8 dst with src's bytes, repeated as often as needed (or cut short)."""
    n = dst.size
    if src.size == 0:
        dst[:] = 0
        return
    k = min(n, src.size)
    dst[:k] = src[:k]
    while k < n:  # doubling copies: log2(n / len(src)) calls
        m = min(k, n - k)
        dst[k:k + m] = dst[:m]
        k += m


class Preprocess:
    """DLIO's per-sample preprocessing time (`reader.preprocess_time`), drawn per epoch, seeded.

    Spent by whoever read the sample, after reading it (a DataLoader worker, a tf.data map
    thread), as the native loader's reading threads do, so it overlaps the engine's compute.
    """

    def __init__(self, wl, layout, world):
        dist = wl.reader.preprocess_time
        self.dist = None if dist.is_zero else dist
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            [int(wl.train.seed), int(world.rank), 0 if layout.split == "train" else 1, 0x9F])))

    def draws(self, n: int):
        """n per-sample times in ns (int64), or None when preprocessing is off."""
        return None if self.dist is None else self.dist.sample_ns(self.rng, int(n)).astype(np.int64)


def sleep_ns(ns: int) -> None:
    """Spend ns nanoseconds as preprocessing (the core's calibrated sleep, GIL released)."""
    if ns > 0:
        core.clock.sleep_ns(int(ns))


def interleave_order(counts, cycle: int) -> np.ndarray:
    """Positions, in output order, of `Dataset.interleave(cycle_length=cycle, block_length=1)` over runs.

    Run r yields positions pos0[r] .. pos0[r] + counts[r] - 1 (pos0: runs laid end to end). This
    follows TensorFlow's InterleaveDataset (and its deterministic parallel form): a slot whose
    run is exhausted is found so when the cycle next visits it, emptied, and the cycle moves on;
    an empty slot visited while runs remain opens the next run and yields from it at once.
    """
    counts = [int(c) for c in counts]
    pos0 = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64) if counts else np.zeros(0, np.int64)
    if cycle <= 1:
        return np.arange(sum(counts), dtype=np.int64)
    slots = [None] * cycle
    out = []
    nxt = idx = open_ = 0
    while nxt < len(counts) or open_ > 0:
        s = slots[idx]
        if s is not None:
            r, k = s
            if k < counts[r]:
                out.append(pos0[r] + k)
                s[1] += 1
            else:
                slots[idx] = None
                open_ -= 1
            idx = (idx + 1) % cycle
        elif nxt < len(counts):
            slots[idx] = [nxt, 0]
            nxt += 1
            open_ += 1
        else:
            idx = (idx + 1) % cycle
    return np.asarray(out, np.int64)


def _nbytes(sample) -> int:
    nbytes = getattr(sample, "nbytes", None)
    return int(nbytes) if nbytes is not None else len(sample)


def plan_runs(gids: np.ndarray, samples_per_file: int):
    """Cut a sequence of global ids into runs of consecutive samples of one file.

    Returns int64 arrays (file, first sample, count, first position in gids), one entry per run.
    """
    gids = np.asarray(gids, np.int64).reshape(-1)
    if gids.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    files = gids // samples_per_file
    breaks = np.flatnonzero((np.diff(gids) != 1) | (np.diff(files) != 0)) + 1
    pos = np.concatenate(([0], breaks)).astype(np.int64)
    count = np.diff(np.concatenate((pos, [gids.size]))).astype(np.int64)
    return files[pos], gids[pos] % samples_per_file, count, pos
