"""NPZ: the zip of .npy members that numpy.savez writes, streamed so any size fits in memory.

iogen's layout: member `x` shaped (num_samples, *record) where record is record_dims or
(record_bytes / element size,), C order, so sample i is one contiguous row; member `y` holds
num_samples int64 labels (zeros, as DLIO writes). Members are written with zip64 headers, as
numpy.savez writes them, so files over 4 GiB work. The `x` member's local header carries a
padding extra field (ID 0xD935, the one Android's zipalign uses; the central directory has
none) so that x's data starts on a 4096-byte boundary: O_DIRECT reads of a row then need no
extra leading page.

DLIO writes x shaped (dim, dim, num_samples): a sample is a strided slice, not a byte range.
iogen reads such files too: index_file returns None for them (unless one sample per file, which
is the whole array) and read_samples decodes them.

compression "zip" is numpy.savez_compressed (deflate); its samples are decoded, never indexed.
"""
from __future__ import annotations

import functools
import io
import math
import os
import struct
import threading
import zipfile
import zlib

import numpy as np

from ..errors import DataError
from .base import (CHUNK_BYTES, FileIndex, FileShape, Format, check_sample_ids, error_text,
                   is_fileobj, parsing, payload_chunks, read_at, source_name, source_size)
from . import zipstore
from ..common.checksum import crc32c, crc_combine, file_crc32c

ALIGN_BYTES = 4096
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: reruns give identical bytes
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_ZIP64_EXTRA_BYTES = 20  # zipfile appends it to the local header when force_zip64
_PAD_EXTRA_ID = 0xD935


def npy_header(shape, dtype) -> bytes:
    """The .npy preamble (magic, version, padded dict) numpy writes for this shape and dtype."""
    return _npy_header(tuple(int(s) for s in shape), np.dtype(dtype))


@functools.lru_cache(maxsize=256)
def _npy_header(shape: tuple, dtype: np.dtype) -> bytes:
    # cached: numpy's header writer costs ~20 us, and a dataset's files share a few shapes
    buf = io.BytesIO()
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(buf, d)
    except ValueError:  # header over 64 KiB: version 2.0, as numpy does
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, d)
    return buf.getvalue()


def _align_extra(name: str, header_len: int) -> bytes:
    """A zip extra field that pads the local header so the npy data starts page-aligned."""
    used = _LOCAL_HEADER.size + len(name) + _ZIP64_EXTRA_BYTES + header_len
    pad = (-used) % ALIGN_BYTES
    if pad < 6:  # room for the field's own header and its 2-byte alignment value
        pad += ALIGN_BYTES
    return struct.pack("<HHH", _PAD_EXTRA_ID, pad - 4, ALIGN_BYTES) + bytes(pad - 6)


# Stored archives up to this size are assembled in memory and written with one call.
_WHOLE_FILE_BYTES = 4 * CHUNK_BYTES


@functools.lru_cache(maxsize=64)
def _stored_layout(header: bytes, data_bytes: int, num_samples: int) -> zipstore.StoredLayout:
    """The archive around x's data: x's local header (page-aligning pad, zip64 sizes), y, directory.

    The bytes zipfile writes for numpy.savez's members; the central directory's x entry carries
    no padding, as zipalign leaves it. Cached: every file of a dataset split has one or a few
    shapes.
    """
    y = npy_header((num_samples,), np.int64) + bytes(8 * num_samples)
    return zipstore.StoredLayout(b"x.npy", header, data_bytes, _align_extra("x.npy", len(header)),
                                 [(b"y.npy", y, zlib.crc32(y))])


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]


# Each writer thread's file buffer, holding the head and tail of the layout it last wrote.
_thread_buffers = threading.local()


def _whole_file_buffer(layout):
    """(buffer, view of x's body in it) of this thread for a file of `layout`: head and tail already
    in place, so a file costs only its body and two CRC fields (one buffer a thread, at most
    _WHOLE_FILE_BYTES)."""
    held = getattr(_thread_buffers, "held", None)
    if held is not None and held[0] is layout:
        return held[1], held[2]
    buf = np.empty(layout.file_bytes, np.uint8)
    h = len(layout.head)
    buf[:h] = np.frombuffer(layout.head, np.uint8)
    buf[h + layout.body_bytes:] = np.frombuffer(layout.tail, np.uint8)
    body = buf[h:h + layout.body_bytes]
    _thread_buffers.held = (layout, buf, body)
    return buf, body


_CRC_FIELD = struct.Struct("<I")


def _fill_crc32():
    """core.fill.fill_random_crc32, imported on first use (a missing compiled core fails the writer)."""
    global _FILL_CRC32
    if _FILL_CRC32 is None:
        from .. import core_switch as core

        _FILL_CRC32 = core.fill.fill_random_crc32
    return _FILL_CRC32


_FILL_CRC32 = None


def _stored_image(layout, seed, stream):
    """The file assembled in this thread's buffer: content and x's CRC-32 in one pass of the core,
    the CRC patched into x's local header and central directory entry."""
    buf, body = _whole_file_buffer(layout)
    x_crc = (_FILL_CRC32 or _fill_crc32())(body, seed, stream, 0, layout.lead_crc32)
    _CRC_FIELD.pack_into(buf, zipstore.LOCAL_CRC_AT, x_crc)
    _CRC_FIELD.pack_into(buf, len(layout.head) + layout.body_bytes + layout.tail_crc_at, x_crc)
    return buf


def _write_stored_whole(path, layout, seed, stream):
    """Assemble the file in one buffer and write it with one core call (which CRC-32Cs it)."""
    from .. import core_switch as core

    buf = _stored_image(layout, seed, stream)
    return layout.file_bytes, core.publish.write_file(path, buf)


def _write_stored_streamed(path, layout, seed, stream):
    """Stream x's data after its local header, then patch the header's CRC-32 in place.

    The file's CRC-32C joins the header's (known last) with that of everything after it.
    """
    from .. import core_switch as core

    head = layout.head
    x_crc = layout.lead_crc32
    rest_crc = crc32c(head[layout.header_bytes:])
    buf = memoryview(np.empty(CHUNK_BYTES, np.uint8))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, head)
        for pos in range(0, layout.body_bytes, CHUNK_BYTES):
            chunk = buf[:min(CHUNK_BYTES, layout.body_bytes - pos)]
            x_crc = core.fill.fill_random_crc32(chunk, seed, stream, pos, x_crc)
            rest_crc = crc32c(chunk, rest_crc)
            _write_all(fd, chunk)
        tail = bytearray(layout.tail)
        struct.pack_into("<I", tail, layout.tail_crc_at, x_crc)
        rest_crc = crc32c(tail, rest_crc)
        _write_all(fd, tail)
        header = bytearray(head[:layout.header_bytes])
        struct.pack_into("<I", header, zipstore.LOCAL_CRC_AT, x_crc)
        os.pwrite(fd, bytes(header[zipstore.LOCAL_CRC_AT:zipstore.LOCAL_CRC_AT + 4]), zipstore.LOCAL_CRC_AT)
    finally:
        os.close(fd)
    rest_bytes = layout.file_bytes - layout.header_bytes
    return layout.file_bytes, crc_combine(crc32c(header), rest_crc, rest_bytes)


def _member_info(name: str, method: int, level) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
    info.external_attr = 0o600 << 16  # what zipfile gives members numpy.savez writes
    info.compress_type = method
    # ZipFile.open(ZipInfo) takes the level from the member (renamed in Python 3.13)
    if hasattr(info, "compress_level"):
        info.compress_level = level
    else:
        info._compresslevel = level
    return info


class Member:
    """Where a .npy member's array lies in the file."""

    __slots__ = ("compressed", "member_offset", "member_bytes", "data_offset", "shape", "fortran", "dtype")


class NpzFormat(Format):
    """numpy .npz: stored (byte-addressable) or deflate-compressed (`compression: zip`)."""

    name = "npz"
    suffix = "npz"

    @property
    def byte_addressable(self) -> bool:
        """Stored members are byte-addressable; deflated ones are not."""
        return self.compression != "zip"

    # -- writing ----------------------------------------------------------------------------

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """Stream x then y into a zip; the file's CRC-32C is computed from the bytes as written."""
        shape = (int(num_samples),) + self.record_shape(int(record_bytes))
        data_bytes = int(num_samples) * int(record_bytes)
        if math.prod(shape) * self.element_bytes != data_bytes:
            raise ValueError(f"record_bytes {record_bytes} does not fit record shape {shape[1:]}")
        header = npy_header(shape, self.record_dtype)
        if self.compression == "zip":
            return self._write_deflated(path, int(num_samples), header, data_bytes, seed, stream)
        layout = _stored_layout(header, data_bytes, int(num_samples))
        if layout.file_bytes <= _WHOLE_FILE_BYTES:
            return _write_stored_whole(path, layout, seed, stream)
        return _write_stored_streamed(path, layout, seed, stream)

    def file_image(self, num_samples, record_bytes, seed, stream):
        """A stored archive up to 4 MiB, assembled in this thread's buffer; None for larger or deflated ones."""
        if self.compression == "zip":
            return None
        layout = self._layout_of(num_samples, record_bytes)
        if layout.file_bytes > _WHOLE_FILE_BYTES:
            return None
        return _stored_image(layout, seed, stream)

    @functools.lru_cache(maxsize=64)  # per format object and size: a dataset has one or a few
    def _layout_of(self, num_samples, record_bytes) -> zipstore.StoredLayout:
        """The stored archive's layout for files of these sizes."""
        shape = (int(num_samples),) + self.record_shape(int(record_bytes))
        data_bytes = int(num_samples) * int(record_bytes)
        if math.prod(shape) * self.element_bytes != data_bytes:
            raise ValueError(f"record_bytes {record_bytes} does not fit record shape {shape[1:]}")
        return _stored_layout(npy_header(shape, self.record_dtype), data_bytes, int(num_samples))

    def _write_deflated(self, path, num_samples, header, data_bytes, seed, stream):
        """numpy.savez_compressed's layout through zipfile (deflate's own cost dwarfs zipfile's)."""
        method, level = zipfile.ZIP_DEFLATED, self.compression_level
        buf = np.empty(CHUNK_BYTES, np.uint8)
        with zipfile.ZipFile(path, "w", compression=method, compresslevel=level) as zf:
            with zf.open(_member_info("x.npy", method, level), "w", force_zip64=True) as out:
                out.write(header)
                for chunk in payload_chunks(seed, stream, 0, data_bytes, buf):
                    out.write(chunk)
            labels = np.zeros(num_samples, np.int64)
            with zf.open(_member_info("y.npy", method, level), "w", force_zip64=True) as out:
                out.write(npy_header(labels.shape, labels.dtype))
                out.write(labels.tobytes())
        return os.stat(path).st_size, file_crc32c(path)

    # -- finding the array ------------------------------------------------------------------

    def _member(self, fobj, path, size: int, name: str = "x.npy") -> Member:
        """The member's place and array header; whatever the zip and .npy parsers raise names the file."""
        with parsing(path, f"zip or .npy header of {name!r} is corrupt"):
            return self._find_member(fobj, path, size, name)

    def _find_member(self, fobj, path, size: int, name: str) -> Member:
        try:
            zf = zipfile.ZipFile(fobj)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise DataError(path, f"not a readable zip archive ({exc}); truncated or corrupt?",
                            offset=size) from None
        try:
            info = zf.getinfo(name)
        except KeyError:
            raise DataError(path, f"has no member {name!r} (members: {zf.namelist()})") from None
        m = Member()
        m.compressed = info.compress_type != zipfile.ZIP_STORED
        m.member_bytes = info.file_size
        hdr = read_at(fobj, path, info.header_offset, _LOCAL_HEADER.size)
        fields = _LOCAL_HEADER.unpack(hdr)
        if fields[0] != b"PK\x03\x04":
            raise DataError(path, f"bad zip local header of {name!r}", offset=info.header_offset)
        m.member_offset = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        if m.compressed:
            m.data_offset = None
            with zf.open(info) as member:
                self._read_npy_header(member, path, m, m.member_offset)
            return m
        fobj.seek(m.member_offset)
        self._read_npy_header(fobj, path, m, m.member_offset)
        m.data_offset = fobj.tell()
        data_end = m.data_offset + math.prod(m.shape) * m.dtype.itemsize
        if data_end > m.member_offset + m.member_bytes:
            raise DataError(path, f"member {name!r} is shorter than its array", offset=m.member_offset)
        if data_end > size:
            raise DataError(path, f"file ends at byte {size}, array {name!r} needs {data_end} (truncated?)",
                            offset=size)
        return m

    @staticmethod
    def _read_npy_header(fobj, path, m: Member, offset: int) -> None:
        try:
            version = np.lib.format.read_magic(fobj)
            if version == (1, 0):
                m.shape, m.fortran, m.dtype = np.lib.format.read_array_header_1_0(fobj)
            else:
                m.shape, m.fortran, m.dtype = np.lib.format.read_array_header_2_0(fobj)
        except (ValueError, zipfile.BadZipFile, EOFError, OSError) as exc:
            raise DataError(path, f"bad .npy header ({exc})", offset=offset) from None
        if any(int(d) < 0 for d in m.shape) or math.prod(m.shape) * m.dtype.itemsize >= 1 << 62:
            raise DataError(path, f"bad .npy header: shape {tuple(m.shape)} of {m.dtype} is impossible",
                            offset=offset)

    def _rows(self, m: Member) -> int | None:
        """Samples if x is laid out one sample per contiguous row, else None."""
        n = self.samples_per_file
        if not m.fortran and len(m.shape) >= 1 and (n is None or m.shape[0] == n):
            return int(m.shape[0])
        return None

    def _open(self, path):
        """(an open binary file, its size, its name) of a path or a file object (ObjectFile)."""
        size = source_size(path)
        if is_fileobj(path):
            return path, size, source_name(path)
        return open(path, "rb"), size, path

    def fixed_index(self, num_samples, record_bytes):
        """Stored archives are laid out by zipstore from the shape alone: x's data follows its local
        header and .npy header, rows back to back."""
        if not self.byte_addressable:
            return None
        n, rb = int(num_samples), int(record_bytes)
        shape = (n,) + self.record_shape(rb)
        layout = _stored_layout(npy_header(shape, self.record_dtype), n * rb, n)
        data_offset = len(layout.head)
        return FileIndex(data_offset + np.arange(n, dtype=np.int64) * rb, np.full(n, rb, np.int64), "raw",
                         layout.file_bytes, {"data_offset": data_offset})

    def index_file(self, path):
        """Row ranges of x: data offset (found once, from the zip and npy headers) + i * row bytes."""
        if not self.byte_addressable:
            return None
        fobj, size, path = self._open(path)
        with fobj:
            m = self._member(fobj, path, size)
        if m.compressed:
            return None
        total = math.prod(m.shape) * m.dtype.itemsize
        rows = self._rows(m)
        if rows is None:
            if self.samples_per_file != 1:
                return None  # DLIO's (dim, dim, samples): samples are strided slices
            offsets, lengths = np.array([m.data_offset], np.int64), np.array([total], np.int64)
        else:
            row_bytes = total // rows if rows else 0
            offsets = m.data_offset + np.arange(rows, dtype=np.int64) * row_bytes
            lengths = np.full(rows, row_bytes, np.int64)
        return FileIndex(offsets, lengths, "raw", size, {"data_offset": m.data_offset})

    # -- decoding ---------------------------------------------------------------------------

    def read_samples(self, path, sample_ids):
        """Samples as numpy arrays shaped like one record (rows of x, or DLIO's x[..., i])."""
        fobj, size, path = self._open(path)
        with fobj:
            m = self._member(fobj, path, size)
            rows = self._rows(m)
            count = rows if rows is not None else (m.shape[-1] if m.shape else 1)
            if rows is None and self.samples_per_file == 1:
                count = 1
            ids = check_sample_ids(path, sample_ids, count)
            if m.compressed:
                with parsing(path, "cannot decompress member 'x.npy'", m.member_offset):
                    return self._read_compressed(fobj, path, m, ids, rows)
            if is_fileobj(fobj):  # no map of a remote object: x's bytes read whole
                total = math.prod(m.shape) * m.dtype.itemsize
                arr = np.frombuffer(read_at(fobj, path, m.data_offset, total), m.dtype).reshape(
                    m.shape, order="F" if m.fortran else "C")
                return self._pick(arr, ids, rows)
            with parsing(path, "cannot map member 'x.npy'", m.data_offset):
                arr = np.memmap(fobj, dtype=m.dtype, mode="r", offset=m.data_offset, shape=tuple(m.shape),
                                order="F" if m.fortran else "C")
                return self._pick(arr, ids, rows)

    def _pick(self, arr, ids, rows):
        """Samples ids of x: its rows, the whole array (one sample per file) or DLIO's x[..., i]."""
        if rows is not None:
            return [np.array(arr[i]) for i in ids]
        if self.samples_per_file == 1:
            return [np.array(arr) for _ in ids]
        return [np.array(arr[..., i]) for i in ids]

    def _read_compressed(self, fobj, path, m: Member, ids, rows):
        """Inflate x from its start to the last row asked for (the whole member when rows are strided);
        zipfile reads the deflated bytes in pieces as large as the reads asked of it."""
        try:
            with zipfile.ZipFile(fobj) as zf, zf.open("x.npy") as member:
                version = np.lib.format.read_magic(member)
                reader = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                          else np.lib.format.read_array_header_2_0)
                reader(member)
                if rows is None:
                    arr = np.frombuffer(member.read(), dtype=m.dtype).reshape(
                        m.shape, order="F" if m.fortran else "C")
                    if self.samples_per_file == 1:
                        return [arr.copy() for _ in ids]
                    return [np.array(arr[..., i]) for i in ids]
                row_shape = tuple(m.shape[1:])
                row_bytes = math.prod(row_shape) * m.dtype.itemsize
                wanted = {}
                pos = 0
                for i in sorted(set(int(i) for i in ids)):
                    skip = (i - pos) * row_bytes
                    while skip:
                        skip -= len(member.read(min(skip, CHUNK_BYTES * 8)) or _eof(path, m))
                    data = member.read(row_bytes)
                    if len(data) != row_bytes:
                        _eof(path, m)
                    wanted[i] = np.frombuffer(data, dtype=m.dtype).reshape(row_shape)
                    pos = i + 1
                return [wanted[int(i)].copy() for i in ids]
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            raise DataError(path, f"cannot decompress member 'x.npy' ({exc})", offset=m.member_offset) from None

    # -- checking ---------------------------------------------------------------------------

    def check_file(self, path, num_samples, record_bytes):
        """Zip readable, members x and y present with the expected npy headers and sizes."""
        try:
            fobj, size, path = self._open(path)
            with fobj:
                m = self._member(fobj, path, size)
                labels = self._member(fobj, path, size, "y.npy")
        except DataError as exc:
            return [error_text(exc)]
        problems = []
        want_shape = (int(num_samples),) + self.record_shape(int(record_bytes))
        if tuple(m.shape) != want_shape or m.fortran:
            problems.append(f"x has shape {tuple(m.shape)}{' (Fortran order)' if m.fortran else ''}, "
                            f"expected {want_shape}")
        if m.dtype != self.record_dtype:
            problems.append(f"x has dtype {m.dtype}, expected {self.record_dtype}")
        if m.compressed != (self.compression == "zip"):
            problems.append(f"x is {'deflate-compressed' if m.compressed else 'stored'}, the workload "
                            f"says compression {self.compression!r}")
        if tuple(labels.shape) != (int(num_samples),):
            problems.append(f"y has shape {tuple(labels.shape)}, expected ({int(num_samples)},)")
        return problems


    def probe_file(self, path):
        """x's shape from the zip and npy headers: iogen's (samples, *record) or DLIO's (d1, d2, samples)."""
        fobj, size, path = self._open(path)
        with fobj:
            m = self._member(fobj, path, size)
        shape = tuple(int(d) for d in m.shape)
        compression = "zip" if m.compressed else "none"
        if not shape:
            return FileShape(1, m.dtype.itemsize, (), m.dtype.name, compression)
        # iogen never writes a 3-D x without record_dims: such an x is DLIO's (d1, d2, samples).
        if len(shape) == 3 and not self.record_dims and not m.fortran:
            dims = shape[:2]
            return FileShape(shape[2], math.prod(dims) * m.dtype.itemsize, dims, m.dtype.name,
                             compression, "dlio")
        dims = shape[1:]
        return FileShape(shape[0], math.prod(dims) * m.dtype.itemsize, dims, m.dtype.name, compression)


def _eof(path, m):
    raise DataError(path, "member 'x.npy' ends before its array (truncated?)", offset=m.member_offset)
