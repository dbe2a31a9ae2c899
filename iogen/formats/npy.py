""".npy: one numpy array a file (DLIO's `format: npy`), uncompressed.

iogen's layout: the array shaped (num_samples, *record) (record_dims, or record_bytes / element
size values), C order, so sample i is one contiguous row: byte-addressable, read with pread by
the native loader. The header (magic, version 1.0, the dict) is padded with spaces to 4096 bytes
(numpy accepts any padding), so the data starts on a page boundary and O_DIRECT reads of a row
need no extra leading page. `numpy.load` opens every file.

DLIO's generator writes np.save of (dim1, dim2, num_samples) uint8: a sample is the strided slice
x[..., i] (DLIO's reader: np.load, then x[..., i]). iogen reads such files too: index_file
returns None for them (unless one sample per file, which is the whole array) and read_samples
decodes them through a memory map.
"""
from __future__ import annotations

import ast
import math
import os

import numpy as np

from ..errors import ConfigError, DataError
from .base import (CHUNK_BYTES, FileIndex, FileShape, Format, check_sample_ids, error_text, is_fileobj,
                   payload_chunks, read_at, source_name, source_size)
from ..common.checksum import crc32c
from .npz import Member, npy_header

ALIGN_BYTES = 4096
MAGIC = b"\x93NUMPY"


def aligned_header(shape, dtype) -> bytes:
    """numpy's version 1.0 header for (shape, dtype), padded with spaces to a multiple of 4096 bytes."""
    plain = npy_header(shape, dtype)
    if plain[6:8] != b"\x01\x00":
        return plain  # a dict too long for version 1.0 (never for iogen's shapes): numpy's own
    text = plain[10:].rstrip(b" \n")
    total = -(-(10 + len(text) + 1) // ALIGN_BYTES) * ALIGN_BYTES
    if total - 10 > 0xFFFF:
        return plain
    body = text + b" " * (total - 10 - len(text) - 1) + b"\n"
    return plain[:8] + (total - 10).to_bytes(2, "little") + body


class NpyFormat(Format):
    """numpy .npy files (see the module doc)."""

    name = "npy"
    suffix = "npy"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.compression != "none":
            raise ConfigError(f"dataset.compression = {self.compression!r}: npy files are not compressed; use none")

    # -- writing ----------------------------------------------------------------------------

    def _shape(self, num_samples, record_bytes):
        shape = (int(num_samples),) + self.record_shape(int(record_bytes))
        if math.prod(shape) * self.element_bytes != int(num_samples) * int(record_bytes):
            raise ValueError(f"record_bytes {record_bytes} does not fit record shape {shape[1:]}")
        return shape

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """The padded header, then the rows streamed from the file's stream; (bytes, CRC-32C)."""
        header = aligned_header(self._shape(num_samples, record_bytes), self.record_dtype)
        data_bytes = int(num_samples) * int(record_bytes)
        buf = np.empty(CHUNK_BYTES, np.uint8)
        crc = crc32c(header)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, header)
            for chunk in payload_chunks(seed, stream, 0, data_bytes, buf):
                crc = crc32c(chunk, crc)
                _write_all(fd, chunk)
        finally:
            os.close(fd)
        return len(header) + data_bytes, crc

    # -- the header -------------------------------------------------------------------------

    def header(self, path) -> Member:
        """The array's shape, order, dtype and where its data starts; a bad header names the file."""
        name = source_name(path)
        size = source_size(path)
        if is_fileobj(path):
            head = read_at(path, name, 0, min(size, 10))
        else:
            with open(path, "rb") as fh:
                head = fh.read(10)
        if len(head) < 10 or head[:6] != MAGIC:
            raise DataError(name, f"not a .npy file: starts with {head[:6].hex() or 'nothing'}, not "
                                  f"{MAGIC.hex()}", 0)
        major = head[6]
        if major == 1:
            hlen, start = int.from_bytes(head[8:10], "little"), 10
        elif major in (2, 3):
            more = read_at(path, name, 8, 4) if is_fileobj(path) else _pread(path, 8, 4)
            hlen, start = int.from_bytes(more, "little"), 12
        else:
            raise DataError(name, f"bad .npy header: version {major}.{head[7]}", 6)
        if start + hlen > size or hlen > 1 << 20:
            raise DataError(name, f"bad .npy header: {hlen} bytes of header, the file has {size} (truncated?)", 8)
        text = read_at(path, name, start, hlen) if is_fileobj(path) else _pread(path, start, hlen)
        try:
            d = ast.literal_eval(text.decode("latin1"))
            shape = tuple(int(s) for s in d["shape"])
            fortran = bool(d["fortran_order"])
            dtype = np.dtype(np.lib.format.descr_to_dtype(d["descr"]))
        except Exception as exc:  # noqa: BLE001 - any failure to parse untrusted header text
            raise DataError(name, f"bad .npy header ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})",
                            start) from None
        if any(s < 0 for s in shape) or dtype.hasobject or math.prod(shape) * dtype.itemsize >= 1 << 62:
            raise DataError(name, f"bad .npy header: shape {shape} of {dtype} is impossible", start)
        m = Member()
        m.compressed = False
        m.member_offset = 0
        m.data_offset = start + hlen
        m.shape, m.fortran, m.dtype = shape, fortran, dtype
        m.member_bytes = size
        end = m.data_offset + math.prod(shape) * dtype.itemsize
        if end > size:
            raise DataError(name, f"file ends at byte {size}, the array needs {end} (truncated?)", size)
        return m

    def _rows(self, m: Member) -> int | None:
        """Samples if the array holds one sample per contiguous row, else None (DLIO's layout)."""
        n = self.samples_per_file
        if m.fortran or not m.shape:
            return None
        if len(m.shape) == 3 and not self.record_dims and n is not None and m.shape[-1] == n and m.shape[0] != n:
            return None  # DLIO's (d1, d2, samples)
        if n is None or m.shape[0] == n:
            return int(m.shape[0])
        return None

    # -- reading ----------------------------------------------------------------------------

    def fixed_index(self, num_samples, record_bytes):
        """Rows back to back after the padded header."""
        n, rb = int(num_samples), int(record_bytes)
        data_offset = len(aligned_header(self._shape(n, rb), self.record_dtype))
        return FileIndex(data_offset + np.arange(n, dtype=np.int64) * rb, np.full(n, rb, np.int64), "raw",
                         data_offset + n * rb, {"data_offset": data_offset})

    def index_file(self, path):
        """Row ranges from the header: data offset + i * row bytes (None for DLIO's strided layout)."""
        m = self.header(path)
        total = math.prod(m.shape) * m.dtype.itemsize
        rows = self._rows(m)
        if rows is None:
            if self.samples_per_file != 1:
                return None
            offsets, lengths = np.array([m.data_offset], np.int64), np.array([total], np.int64)
        else:
            row_bytes = total // rows if rows else 0
            offsets = m.data_offset + np.arange(rows, dtype=np.int64) * row_bytes
            lengths = np.full(rows, row_bytes, np.int64)
        return FileIndex(offsets, lengths, "raw", m.member_bytes, {"data_offset": m.data_offset})

    def read_samples(self, path, sample_ids):
        """Samples as arrays shaped like one record: rows, or DLIO's x[..., i], through a memory map."""
        name = source_name(path)
        m = self.header(path)
        rows = self._rows(m)
        count = rows if rows is not None else (1 if self.samples_per_file == 1 else (m.shape[-1] if m.shape else 1))
        ids = check_sample_ids(name, sample_ids, count)
        order = "F" if m.fortran else "C"
        if is_fileobj(path):
            total = math.prod(m.shape) * m.dtype.itemsize
            arr = np.frombuffer(read_at(path, name, m.data_offset, total), m.dtype).reshape(m.shape, order=order)
        else:
            try:
                arr = np.memmap(path, dtype=m.dtype, mode="r", offset=m.data_offset, shape=m.shape, order=order)
            except (OSError, ValueError) as exc:
                raise DataError(name, f"cannot map the array ({exc})", m.data_offset) from None
        if rows is not None:
            return [np.array(arr[i]) for i in ids]
        if self.samples_per_file == 1:
            return [np.array(arr) for _ in ids]
        return [np.array(arr[..., i]) for i in ids]

    # -- checking ---------------------------------------------------------------------------

    def check_file(self, path, num_samples, record_bytes):
        """The header's shape, order and dtype are the workload's; the file is exactly header + data."""
        try:
            m = self.header(path)
        except DataError as exc:
            return [error_text(exc)]
        problems = []
        want = (int(num_samples),) + self.record_shape(int(record_bytes))
        if tuple(m.shape) != want or m.fortran:
            problems.append(f"the array has shape {tuple(m.shape)}{' (Fortran order)' if m.fortran else ''}, "
                            f"expected {want}")
        if m.dtype != self.record_dtype:
            problems.append(f"the array has dtype {m.dtype}, expected {self.record_dtype}")
        end = m.data_offset + math.prod(m.shape) * m.dtype.itemsize
        if m.member_bytes != end:
            problems.append(f"{m.member_bytes - end} bytes after the array's end (byte {end})")
        return problems

    def probe_file(self, path):
        """The array's shape: iogen's (samples, *record) or DLIO's (d1, d2, samples)."""
        m = self.header(path)
        shape = tuple(int(d) for d in m.shape)
        if not shape:
            return FileShape(1, m.dtype.itemsize, (), m.dtype.name, "none")
        if len(shape) == 3 and not self.record_dims and not m.fortran and self._rows(m) is None:
            dims = shape[:2]
            return FileShape(shape[2], math.prod(dims) * m.dtype.itemsize, dims, m.dtype.name, "none", "dlio")
        dims = shape[1:]
        return FileShape(shape[0], math.prod(dims) * m.dtype.itemsize, dims, m.dtype.name, "none")


def _pread(path, offset: int, length: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(length)
    if len(data) != length:
        raise DataError(os.fspath(path), f"file ends after {offset + len(data)} bytes, {length} needed here "
                                         "(truncated?)", offset + len(data))
    return data


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]
