"""DLIO's indexed_binary and mmap_indexed_binary: raw samples in a data file, and two index files beside it.

A data file `<prefix>_<i>_of_<N>.indexed_binary` (or `.mmap_indexed_binary`, DLIO names files after
the format) holds the samples back to back, nothing else. Beside it, as DLIO's generator writes
them (Megatron's index split in two):

    <data file>.off.idx   one little-endian uint64 a sample: the byte offset of sample j in the data file
    <data file>.sz.idx    one little-endian uint64 a sample: its size in bytes

iogen writes sample j at offset j x record_bytes with size record_bytes; its content is bytes
[j x record_bytes, (j + 1) x record_bytes) of the file's seeded stream, as in every format. The
index files are a pure function of (samples, record_bytes): `sidecar_images` gives their bytes,
which datagen writes (and stages, uploads, verifies) beside each data file (iogen/data/sidecars.py).

Reading is DLIO's: the index files are read first (DLIO's IndexedBinaryReader reads
num_samples_per_file offsets and sizes), then each sample is the byte range they name. An index
file that is missing, truncated (not a whole number of entries), holds another count than its
twin or than dataset.num_samples_per_file, or names a range past the end of the data file is a
DataError naming the index file and the byte offset of the entry (exit 2), found when the file is
indexed: before the first step (the native loader indexes every file up front).

mmap_indexed_binary (DLIO's IndexedBinaryMMapReader: np.memmap of the data file) reads a sample by
copying its range out of a read-only memory map of the file: the page faults are the I/O
(`read_mapped`, what the native loader and the framework loaders' reader call instead of pread on
this machine's files; each file is mapped once per call and released, so no page stays mapped
between batches). There is no map of an object: the config refuses it on object stores.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from ..errors import ConfigError, DataError, ReadFailure
from ..common.checksum import crc32c
from .base import (CHUNK_BYTES, FileIndex, FileShape, Format, check_sample_ids, is_fileobj, payload_chunks,
                   read_at, source_name, source_size)

OFF_SUFFIX = ".off.idx"
SZ_SUFFIX = ".sz.idx"
ENTRY = np.dtype("<u8")  # DLIO's struct 'Q' (native order: little-endian where it runs)
# Offsets and sizes past this are corrupt whatever the file (and would overflow int64 sums).
_MAX_ENTRY = 1 << 62


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class IndexedBinaryFormat(Format):
    """DLIO's indexed_binary (see the module doc)."""

    name = "indexed_binary"
    suffix = "indexed_binary"
    # Files beside each data file, named data file + suffix (datagen, manifest, verify, staging).
    sidecar_suffixes = (OFF_SUFFIX, SZ_SUFFIX)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.compression != "none":
            raise ConfigError(f"dataset.compression = {self.compression!r}: {self.name} files are not "
                              "compressed; use none")

    # -- writing ----------------------------------------------------------------------------

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """The samples streamed from the file's stream, back to back; (bytes, CRC-32C)."""
        data_bytes = int(num_samples) * int(record_bytes)
        buf = np.empty(CHUNK_BYTES, np.uint8)
        crc = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            for chunk in payload_chunks(seed, stream, 0, data_bytes, buf):
                crc = crc32c(chunk, crc)
                _write_all(fd, chunk)
        finally:
            os.close(fd)
        return data_bytes, crc

    def sidecar_images(self, num_samples: int, record_bytes: int, start: int = 0,
                       stop: int | None = None) -> list[tuple[str, bytes]]:
        """(suffix, bytes) of each index file of a data file iogen writes with these settings: its entries
        [start, stop) (default: all), so a writer streams the index of a file of billions of samples."""
        n, rb = int(num_samples), int(record_bytes)
        stop = n if stop is None else min(int(stop), n)
        start = min(int(start), stop)
        offsets = np.arange(start, stop, dtype=ENTRY) * ENTRY.type(rb)
        sizes = np.full(stop - start, rb, ENTRY)
        return [(OFF_SUFFIX, offsets.tobytes()), (SZ_SUFFIX, sizes.tobytes())]

    # -- the index ----------------------------------------------------------------------------

    def _sidecar(self, source, suffix: str) -> tuple[str, bytes]:
        """(name, bytes) of one index file of a data file (a path, or an object's file: through its store)."""
        name = source_name(source) + suffix
        if is_fileobj(source):
            store = getattr(source, "store", None)
            data = store.get_bytes(name) if store is not None else None
        else:
            try:
                with open(name, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                data = None
            except IsADirectoryError:
                raise DataError(name, "is a directory, not an index file") from None
            except OSError as exc:
                raise DataError(name, f"cannot read the index file: {exc.strerror}") from None
        if data is None:
            raise DataError(name, f"index file of {source_name(source)} is missing (generate the dataset "
                                  "with `iogen datagen`)")
        return name, data

    def read_index(self, source) -> tuple[np.ndarray, np.ndarray, int]:
        """(offsets, sizes, data file bytes), every entry checked against the data file (module doc);
        the count is not compared with the workload's here (probe_file reports it)."""
        data_bytes = source_size(source)
        (off_name, off_raw), (sz_name, sz_raw) = (self._sidecar(source, s) for s in self.sidecar_suffixes)
        for name, raw in ((off_name, off_raw), (sz_name, sz_raw)):
            if len(raw) % ENTRY.itemsize:
                whole = len(raw) - len(raw) % ENTRY.itemsize
                raise DataError(name, f"truncated index file: {len(raw)} bytes, not a whole number of "
                                      f"{ENTRY.itemsize}-byte entries", whole)
        offsets = np.frombuffer(off_raw, ENTRY)
        sizes = np.frombuffer(sz_raw, ENTRY)
        if offsets.size != sizes.size:
            raise DataError(sz_name, f"holds {sizes.size} sizes, {off_name} holds {offsets.size} offsets: the "
                                     "index files disagree", ENTRY.itemsize * min(offsets.size, sizes.size))
        big = (offsets >= _MAX_ENTRY) | (sizes >= _MAX_ENTRY)
        offsets = offsets.view("<i8")  # no copy: 16 bytes a sample in memory, as DLIO's reader holds
        sizes = sizes.view("<i8")
        past = big | (offsets > data_bytes - sizes)
        if past.any():
            j = int(np.flatnonzero(past)[0])
            raise DataError(off_name, f"entry {j} (offset {int(offsets[j]) if not big[j] else 'huge'}, size "
                                      f"{int(sizes[j]) if not big[j] else 'huge'}) runs past the end of "
                                      f"{source_name(source)} ({data_bytes} bytes)", ENTRY.itemsize * j)
        return offsets, sizes, data_bytes

    def index_file(self, path) -> FileIndex:
        """The samples' byte ranges, from the index files (checked: module doc)."""
        offsets, sizes, data_bytes = self.read_index(path)
        want = self.samples_per_file
        if want is not None and offsets.size != int(want):
            name = source_name(path) + OFF_SUFFIX
            raise DataError(name, f"holds {offsets.size} entries, the workload reads {int(want)} samples a file "
                                  "(dataset.num_samples_per_file)", ENTRY.itemsize * min(offsets.size, int(want)))
        return FileIndex(offsets, sizes, "raw", data_bytes)

    # -- reading ----------------------------------------------------------------------------

    def read_samples(self, path, sample_ids) -> list:
        """Each sample's bytes as a uint8 array, read at the range its index names."""
        index = self.index_file(path)
        ids = check_sample_ids(source_name(path), sample_ids, len(index))
        name = source_name(path)
        out = []
        if is_fileobj(path):
            for j in ids.tolist():
                out.append(np.frombuffer(read_at(path, name, int(index.offsets[j]), int(index.lengths[j])), np.uint8))
            return out
        with open(path, "rb") as fh:
            for j in ids.tolist():
                out.append(np.frombuffer(read_at(fh, name, int(index.offsets[j]), int(index.lengths[j])), np.uint8))
        return out

    # -- checks -----------------------------------------------------------------------------

    def check_file(self, path, num_samples, record_bytes) -> list[str]:
        """Problems of a data file and its index files against iogen's layout (for verify)."""
        try:
            offsets, sizes, data_bytes = self.read_index(path)
        except DataError as exc:
            where = f" at byte offset {exc.offset}" if exc.offset is not None else ""
            return [f"{exc.path}{where}: {exc.message}"]
        out = []
        n, rb = int(num_samples), int(record_bytes)
        if offsets.size != n:
            out.append(f"the index holds {offsets.size} samples, expected {n}")
        elif not (np.array_equal(sizes, np.full(n, rb)) and np.array_equal(offsets, np.arange(n) * rb)):
            out.append(f"the index is not iogen's layout: samples of {rb} bytes back to back")
        if data_bytes != n * rb:
            out.append(f"the data file holds {data_bytes} bytes, expected {n * rb}")
        return out

    def probe_file(self, path) -> FileShape:
        """Samples and record size (of sample 0) from the index files."""
        offsets, sizes, _ = self.read_index(path)
        return FileShape(int(offsets.size), int(sizes[0]) if sizes.size else 0, None, "uint8", "none",
                         "rows" if np.array_equal(offsets, np.cumsum(sizes) - sizes) else "dlio")


class MmapIndexedBinaryFormat(IndexedBinaryFormat):
    """DLIO's mmap_indexed_binary: indexed_binary's files, samples copied out of a memory map of the data file."""

    name = "mmap_indexed_binary"
    suffix = "mmap_indexed_binary"

    def read_mapped(self, handles, offsets, lengths, required, buf, buf_offsets) -> int:
        """Storage.read_handles' contract over descriptors: each file of the call is mapped read-only once,
        its ranges copied out of the map (the page faults read the file; numpy copies without the GIL)
        and the map released, so between batches no page stays mapped (an eviction between epochs
        drops them, and each epoch's reads fault again, as DLIO's reader maps its files per epoch). A
        range past the end of the file is the core's ReadFailure (index, errno 0, offset, bytes there)."""
        return copy_mapped(handles, offsets, lengths, required, buf, buf_offsets)

    def read_samples(self, path, sample_ids) -> list:
        """Each sample's bytes copied out of a memory map of the file (DLIO's np.memmap); objects by ranges."""
        if is_fileobj(path):
            return super().read_samples(path, sample_ids)
        index = self.index_file(path)
        ids = check_sample_ids(source_name(path), sample_ids, len(index))
        if index.file_bytes == 0:
            return [np.empty(0, np.uint8) for _ in ids.tolist()]
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mm:
            view = np.frombuffer(mm, np.uint8)
            out = [view[int(index.offsets[j]):int(index.offsets[j] + index.lengths[j])].copy() for j in ids.tolist()]
            del view
        return out


def copy_mapped(handles, offsets, lengths, required, buf, buf_offsets) -> int:
    """Ranges of files (descriptors) copied out of read-only maps into buf at buf_offsets (None: back
    to back); returns the bytes copied. See MmapIndexedBinaryFormat.read_mapped."""
    handles = np.asarray(handles, np.int64).reshape(-1)
    offsets = np.asarray(offsets, np.int64).reshape(-1)
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    required = np.asarray(required, np.int64).reshape(-1)
    if buf_offsets is None:
        buf_offsets = np.zeros(lengths.size, np.int64)
        np.cumsum(lengths[:-1], out=buf_offsets[1:])
    buf_offsets = np.asarray(buf_offsets, np.int64).reshape(-1)
    out = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    total = 0
    for fd in np.unique(handles).tolist():
        entries = np.flatnonzero(handles == fd)
        try:
            size = os.fstat(fd).st_size
            mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ) if size else None
        except OSError as exc:
            raise ReadFailure(int(entries[0]), exc.errno or 5, int(offsets[entries[0]]), 0) from None
        view = np.empty(0, np.uint8)
        try:
            if mapped is not None:
                view = np.frombuffer(mapped, np.uint8)
            for k in entries.tolist():
                off, n, at = int(offsets[k]), int(lengths[k]), int(buf_offsets[k])
                got = max(0, min(n, view.size - off))
                if got < int(required[k]):
                    raise ReadFailure(k, 0, off, got)
                if got:
                    out[at:at + got] = view[off:off + got]
                total += got
        finally:
            del view
            if mapped is not None:
                mapped.close()
    return total
