"""Parquet written directly: page headers, column data and the footer, no pyarrow writer.

What iogen.formats.parquet writes, for every codec, a valid Parquet file
(format version 2.6, as pyarrow writes) that pyarrow reads with the declared schema:

    PAR1
    for each row group, for each column: its data pages (v1 headers, PLAIN values;
        list columns with their repetition and definition levels, RLE)
    FileMetaData (Thrift compact protocol), its length (4 bytes LE), PAR1

The schema is the one pyarrow writes for the Arrow schema (non-nullable scalars; non-nullable
fixed-size lists as a LIST group `list` / `element`; int8/int16/uint8/uint16/uint32 as INT32 with
their integer annotation, float16 as FIXED_LEN_BYTE_ARRAY(2) FLOAT16), with pyarrow's own
`ARROW:schema` metadata (taken from pyarrow once per schema), so readers get fixed-size lists
back. Values are PLAIN: the column's bytes as they lie in memory (narrow integers widened to
32 bits, as Parquet stores them); with a codec each page's body (levels and values) is compressed
by pyarrow's codec (snappy, gzip, zstd, LZ4_RAW for lz4, as pyarrow's writer does). Pages hold whole rows, about PAGE_BYTES of values each (one row
a page when a row is larger). A writer holds one column of one page group at a time, not a row
group: memory stays around a page whatever the row-group size.

Uncompressed, a row group is written by the core (fill.parquet_pages) from a _Layout worked out once
per (columns, rows): the operations that copy page headers and levels, fill values from the stream
and widen narrow integers, in pieces of about SEGMENT_BYTES, the CRC-32C taken in the same pass;
Python then encodes each column chunk's footer entry (its offsets) and writes the piece.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from .base import fill_random
from ..common.checksum import crc32c

PAGE_BYTES = 1 << 20
# the workload's codec -> (Parquet's CompressionCodec, pyarrow's codec name); lz4 is LZ4_RAW, what
# pyarrow writes for "lz4"
CODECS = {"none": (0, None), "snappy": (1, "snappy"), "gzip": (2, "gzip"), "zstd": (6, "zstd"), "lz4": (7, "lz4_raw")}
CREATED_BY = "iogen (direct Parquet writer)"

# Thrift compact protocol types
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _BINARY, _LIST, _STRUCT = 1, 2, 3, 4, 5, 6, 8, 9, 12
# Parquet enums
_INT32, _INT64, _FLOAT, _DOUBLE, _FIXED = 1, 2, 4, 5, 7
_REQUIRED, _REPEATED = 0, 2
_PLAIN, _RLE = 0, 3
_DATA_PAGE = 0
_CONVERTED_LIST = 3
# numpy dtype -> (physical type, stored dtype, converted type, integer (bit width, signed) or the
# logical type's name)
_TYPES = {
    "float32": (_FLOAT, "<f4", None, None),
    "float64": (_DOUBLE, "<f8", None, None),
    "float16": (_FIXED, "<f2", None, "float16"),
    "int8": (_INT32, "<i4", 15, (8, True)),
    "int16": (_INT32, "<i4", 16, (16, True)),
    "int32": (_INT32, "<i4", None, None),
    "int64": (_INT64, "<i8", None, None),
    "uint8": (_INT32, "<i4", 11, (8, False)),
    "uint16": (_INT32, "<i4", 12, (16, False)),
    "uint32": (_INT32, "<i4", 13, (32, False)),
    "uint64": (_INT64, "<i8", 14, (64, False)),
}


# -- Thrift compact protocol (write side) ---------------------------------------------------

def _varint(n: int) -> bytes:
    """n >= 0 as an unsigned varint (the lengths a file's offsets take, unrolled: the footer holds
    two a column chunk)."""
    if n < 0x4000:
        return bytes((n & 127 | 128, n >> 7)) if n >= 128 else bytes((n,))
    if n < 0x10000000:
        if n < 0x200000:
            return bytes((n & 127 | 128, (n >> 7) & 127 | 128, n >> 14))
        return bytes((n & 127 | 128, (n >> 7) & 127 | 128, (n >> 14) & 127 | 128, n >> 21))
    if n < 0x800000000:
        return bytes((n & 127 | 128, (n >> 7) & 127 | 128, (n >> 14) & 127 | 128, (n >> 21) & 127 | 128, n >> 28))
    return _varint_long(n)


def _varint_long(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


class _Struct:
    """Fields of one Thrift struct, written in increasing id order."""

    def __init__(self):
        self.out = bytearray()
        self.last = 0

    def _head(self, fid: int, ftype: int) -> None:
        delta = fid - self.last
        if 0 < delta <= 15:
            self.out.append((delta << 4) | ftype)
        else:
            self.out.append(ftype)
            self.out += _varint(_zigzag(fid))
        self.last = fid

    def _int(self, fid: int, v: int, ftype: int) -> "_Struct":
        self._head(fid, ftype)
        self.out += _varint(_zigzag(int(v)))
        return self

    def i16(self, fid: int, v: int) -> "_Struct":
        return self._int(fid, v, _I16)

    def i32(self, fid: int, v: int) -> "_Struct":
        return self._int(fid, v, _I32)

    def i64(self, fid: int, v: int) -> "_Struct":
        return self._int(fid, v, _I64)

    def binary(self, fid: int, v: bytes) -> "_Struct":
        self._head(fid, _BINARY)
        self.out += _varint(len(v)) + v
        return self

    def true(self, fid: int) -> "_Struct":
        self._head(fid, _BOOL_TRUE)
        return self

    def struct(self, fid: int, s: "_Struct") -> "_Struct":
        self._head(fid, _STRUCT)
        self.out += s.end()
        return self

    def list(self, fid: int, etype: int, items: list) -> "_Struct":
        self._head(fid, _LIST)
        n = len(items)
        self.out += bytes([(n << 4) | etype]) if n < 15 else bytes([0xF0 | etype]) + _varint(n)
        for item in items:
            if etype == _STRUCT:
                self.out += item.end()
            elif etype == _BINARY:
                self.out += _varint(len(item)) + item
            else:  # i32
                self.out += _varint(_zigzag(int(item)))
        return self

    def end(self) -> bytes:
        return bytes(self.out) + b"\x00"


# -- the schema -----------------------------------------------------------------------------

def _leaf(name: str, dtype: str) -> _Struct:
    phys, _, converted, integer = _TYPES[dtype]
    s = _Struct().i32(1, phys)
    if phys == _FIXED:
        s.i32(2, 2)
    s.i32(3, _REQUIRED).binary(4, name.encode())
    if converted is not None:
        s.i32(6, converted)
    if isinstance(integer, tuple):
        s.struct(10, _Struct().struct(10, _bits(*integer)))
    elif dtype == "float16":
        s.struct(10, _Struct().struct(15, _Struct()))
    return s


def _bits(width: int, signed: bool) -> _Struct:
    s = _Struct()
    s._head(1, _BYTE)
    s.out.append(width)
    s._head(2, _BOOL_TRUE if signed else _BOOL_FALSE)  # a bool's value is its field type
    return s


def schema_elements(columns) -> list:
    """SchemaElements: the root, then per column its leaf, or its LIST group, `list`, `element`."""
    out = [_Struct().binary(4, b"schema").i32(5, len(columns))]
    for c in columns:
        if c.values > 1:
            out.append(_Struct().i32(3, _REQUIRED).binary(4, c.name.encode()).i32(5, 1).i32(6, _CONVERTED_LIST)
                       .struct(10, _Struct().struct(3, _Struct())))
            out.append(_Struct().i32(3, _REPEATED).binary(4, b"list").i32(5, 1))
            out.append(_leaf("element", c.dtype))
        else:
            out.append(_leaf(c.name, c.dtype))
    return out


_ARROW_META: dict = {}


def arrow_schema_metadata(fmt) -> bytes:
    """pyarrow's ARROW:schema value for the format's Arrow schema (from a 0-row file pyarrow writes;
    kept per column set)."""
    import io

    import pyarrow.parquet as pq

    key = fmt.columns
    if key not in _ARROW_META:
        buf = io.BytesIO()
        pq.write_table(fmt.arrow_schema().empty_table(), buf)
        buf.seek(0)
        _ARROW_META[key] = pq.read_metadata(buf).metadata[b"ARROW:schema"]
    return _ARROW_META[key]


# -- levels ---------------------------------------------------------------------------------

def _rle_run(count: int, value: int) -> bytes:
    return _varint(count << 1) + bytes([value])


def _levels(rows: int, width: int) -> bytes:
    """A v1 page's repetition then definition levels for `rows` lists of `width` values (bit width 1)."""
    rep = (_rle_run(1, 0) + _rle_run(width - 1, 1)) * rows if width > 1 else _rle_run(rows, 0)
    dfn = _rle_run(rows * width, 1)
    return len(rep).to_bytes(4, "little") + rep + len(dfn).to_bytes(4, "little") + dfn


# -- the writer -----------------------------------------------------------------------------

class _Out:
    """An fd written in order (pieces gathered, written with writev), with the CRC-32C and length."""

    FLUSH_BYTES = 8 << 20

    def __init__(self, fd):
        self.fd, self.crc, self.pos = fd, 0, 0
        self.pending, self.pending_bytes = [], 0

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        self.crc = crc32c(view, self.crc)
        self.pos += view.nbytes
        self.pending.append(view)
        self.pending_bytes += view.nbytes
        if self.pending_bytes >= self.FLUSH_BYTES:
            self.flush()

    def write_now(self, view) -> None:
        """Write bytes whose CRC-32C the caller has added to self.crc (nothing pending), all of them now."""
        view = memoryview(view).cast("B")
        self.pos += view.nbytes
        while view:
            view = view[os.write(self.fd, view):]

    def flush(self) -> None:
        views, self.pending, self.pending_bytes = self.pending, [], 0
        while views:
            done = os.writev(self.fd, views[:1024])
            while done:
                if done >= views[0].nbytes:
                    done -= views[0].nbytes
                    views.pop(0)
                else:
                    views[0] = views[0][done:]
                    done = 0


def write(fmt, path, num_samples: int, seed: int, stream: int) -> tuple[int, int]:
    """Write the file; return (bytes, CRC-32C)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        out = _Out(fd)
        out.write(b"PAR1")
        codec_id, codec_name = CODECS[fmt.compression]
        codec = None
        if codec_name is not None:
            import pyarrow as pa

            level = fmt.compression_level if fmt.compression in ("gzip", "zstd") else None
            codec = pa.Codec(codec_name, compression_level=level)
        plans = _plans(fmt.columns, codec_id, PAGE_BYTES)
        row_groups = []
        rgs, n = fmt.row_group_size, int(num_samples)
        scratch = {}
        for g in range(-(-n // rgs)):
            rows = min(rgs, n - g * rgs)
            if codec is None:
                row_groups.append(_write_group_plain(fmt, plans, out, g, rows, seed, stream, scratch))
            else:
                row_groups.append(_write_group(fmt, plans, out, g, rows, seed, stream, codec))
        footer = _footer(fmt, n, row_groups)
        out.write(footer + len(footer).to_bytes(4, "little") + b"PAR1")
        out.flush()
        return out.pos, out.crc
    finally:
        os.close(fd)


class _Plan:
    """What writing one column needs, worked out once per file."""

    __slots__ = ("c", "widen", "stored", "per_page", "meta_head", "row_bytes")

    def __init__(self, c, codec_id: int, page_bytes: int):
        phys, stored, _, _ = _TYPES[c.dtype]
        self.c = c
        self.row_bytes = c.row_bytes
        self.stored = np.dtype(stored)
        self.widen = self.stored.itemsize != np.dtype(c.dtype).itemsize
        self.per_page = max(1, page_bytes // (c.values * self.stored.itemsize))
        path = [c.name.encode()] if c.values == 1 else [c.name.encode(), b"list", b"element"]
        head = _Struct().i32(1, phys).list(2, _I32, [_PLAIN, _RLE]).list(3, _BINARY, path).i32(4, codec_id)
        self.meta_head = bytes(head.out)  # fields 1-4 of ColumnMetaData; 5, 6, 7, 9 follow per chunk


@functools.lru_cache(maxsize=16)
def _plans(columns: tuple, codec_id: int, page_bytes: int) -> tuple:
    return tuple(_Plan(c, codec_id, page_bytes) for c in columns)


@functools.lru_cache(maxsize=4096)
def _page_head(num_values: int, body: int, stored: int) -> bytes:
    """A v1 data page header: PLAIN values, RLE levels; `body` bytes, `stored` of them once compressed."""
    dph = _Struct().i32(1, num_values).i32(2, _PLAIN).i32(3, _RLE).i32(4, _RLE)
    return _Struct().i32(1, _DATA_PAGE).i32(2, body).i32(3, stored).struct(5, dph).end()


@functools.lru_cache(maxsize=4096)
def _levels_cached(rows: int, width: int) -> bytes:
    return _levels(rows, width)


# a column's stream bytes are filled in one call up to this size, else a page at a time
_FILL_WHOLE_BYTES = 4 << 20


def _write_group(fmt, plans, out: _Out, g: int, rows: int, seed: int, stream: int, codec=None) -> bytes:
    """Write row group g; return its RowGroup struct, encoded."""
    at = g * fmt.row_group_size * fmt.row_bytes  # the group's place in the file's stream
    chunks = []
    start = out.pos
    group = None
    if rows * fmt.row_bytes <= _FILL_WHOLE_BYTES * 8:  # the group's stream bytes in one call
        group = np.empty(rows * fmt.row_bytes, np.uint8)
        fill_random(group, seed, stream, at)
    pos = unpacked = 0
    for p in plans:
        n = rows * p.row_bytes
        chunk, chunk_unpacked = _write_column(out, p, rows, seed, stream, at + pos,
                                              None if group is None else group[pos:pos + n], codec)
        chunks.append(chunk)
        unpacked += chunk_unpacked
        pos += n
    group_bytes = out.pos - start
    n = len(chunks)
    columns = (bytes([(n << 4) | _STRUCT]) if n < 15 else bytes([0xF0 | _STRUCT]) + _varint(n)) + b"".join(chunks)
    tail = _Struct()
    tail.last = 1
    tail.i64(2, unpacked).i64(3, rows).i64(5, start).i64(6, group_bytes).i16(7, g)
    return bytes([0x10 | _LIST]) + columns + tail.end()


# Uncompressed row groups are written by the core (fill.parquet_pages) from a layout worked out
# once per (columns, rows): the operations that write the group's bytes (page headers and levels
# copied, values filled from the stream, narrow integers widened), in pieces of about SEGMENT_BYTES.
SEGMENT_BYTES = 8 << 20
_WIDEN_KIND = {"int8": 1, "uint8": 2, "int16": 3, "uint16": 4}


class _Layout:
    """Row group bytes for `rows` rows, uncompressed: `segments` [(ops, bytes)] written in turn (ops'
    stream sources relative to the group's first stream byte), `heads` (what the copies take from),
    `chunks` per column (start in the group, its ColumnMetaData's fields after the plan's head up
    to data_page_offset), the group's `size` and its uncompressed total."""

    __slots__ = ("segments", "heads", "chunks", "size", "unpacked", "is_source")

    def __init__(self, plans, rows: int, segment_bytes: int):
        heads, head_at = bytearray(), {}
        ops, chunks = [], []
        pos = src = 0
        for p in plans:
            c, rb = p.c, p.row_bytes
            kind = _WIDEN_KIND.get(c.dtype, 0) if p.widen else 0
            start = pos
            for first in range(0, rows, p.per_page):
                k = min(p.per_page, rows - first)
                levels = _levels_cached(k, c.values) if c.values > 1 else b""
                data = k * c.values * p.stored.itemsize
                head = _page_head(k * c.values, len(levels) + data, len(levels) + data) + levels
                if head not in head_at:
                    head_at[head] = len(heads)
                    heads += head
                ops.append((5, pos, len(head), head_at[head]))
                pos += len(head)
                ops.append((kind, pos, k * c.values if kind else k * rb, src + first * rb))
                pos += data
            size = pos - start
            chunks.append((start, b"\x1c" + p.meta_head + b"\x16" + _varint(_zigzag(rows * c.values)) + b"\x16"
                           + _varint(size << 1) + b"\x16" + _varint(size << 1) + b"\x26"))
            src += rows * rb
        self.heads, self.chunks, self.size, self.unpacked = bytes(heads), chunks, pos, pos
        self.segments = []
        first = 0
        while first < len(ops):
            last = first + 1
            while last < len(ops) and ops[last][1] + _op_bytes(ops[last]) - ops[first][1] <= segment_bytes:
                last += 1
            seg = np.array(ops[first:last], np.int64).reshape(-1, 4)
            base = seg[0, 1]
            end = seg[-1, 1] + _op_bytes(ops[last - 1])
            seg[:, 1] -= base
            self.segments.append((seg, end - base))
            first = last
        self.is_source = [seg[:, 0] != 5 for seg, _ in self.segments]


def _op_bytes(op) -> int:
    return op[2] * 4 if 1 <= op[0] <= 4 else op[2]


@functools.lru_cache(maxsize=16)
def _layout(plans: tuple, rows: int, segment_bytes: int) -> _Layout:
    return _Layout(plans, rows, segment_bytes)


def _write_group_plain(fmt, plans, out: _Out, g: int, rows: int, seed: int, stream: int, scratch: dict) -> bytes:
    """Write row group g uncompressed through the core (one call a segment); return its RowGroup
    struct, encoded."""
    from .. import core_switch as core

    lay = _layout(plans, rows, SEGMENT_BYTES)
    at = g * fmt.row_group_size * fmt.row_bytes  # the group's place in the file's stream
    out.flush()
    start = out.pos
    need = max(n for _, n in lay.segments)
    buf = scratch.get("buf")
    if buf is None or buf.nbytes < need:
        buf = scratch["buf"] = np.empty(need, np.uint8)
    for (ops, n), is_source in zip(lay.segments, lay.is_source):
        if at:
            ops = ops.copy()
            ops[is_source, 3] += at
        view = buf[:n]
        out.crc = core.fill.parquet_pages(view, seed, stream, ops, lay.heads, out.crc)
        out.write_now(view)
    chunks = []
    for rel, mid in lay.chunks:  # ColumnChunk {2: file_offset, 3: ColumnMetaData {..., 9: data_page_offset}}
        offset = _varint((start + rel) << 1)
        chunks.append(b"\x26" + offset + mid + offset + b"\x00\x00")
    n = len(chunks)
    columns = (bytes([(n << 4) | _STRUCT]) if n < 15 else bytes([0xF0 | _STRUCT]) + _varint(n)) + b"".join(chunks)
    tail = _Struct()
    tail.last = 1
    tail.i64(2, lay.unpacked).i64(3, rows).i64(5, start).i64(6, lay.size).i16(7, g)
    return bytes([0x10 | _LIST]) + columns + tail.end()


def _write_column(out: _Out, p: _Plan, rows: int, seed: int, stream: int, at: int, whole=None,
                  codec=None) -> tuple[bytes, int]:
    """Write one column chunk (its stream bytes in `whole` when given; each page's body compressed
    with `codec`, a pyarrow Codec, when given); return its ColumnChunk struct, encoded, and its
    uncompressed size (page headers included)."""
    c, rb = p.c, p.row_bytes
    start = out.pos
    unpacked = 0
    if whole is None and rows * rb <= _FILL_WHOLE_BYTES:
        whole = np.empty(rows * rb, np.uint8)
        fill_random(whole, seed, stream, at)
    for first in range(0, rows, p.per_page):
        k = min(p.per_page, rows - first)
        if whole is not None:
            buf = whole[first * rb:(first + k) * rb]
        else:
            buf = np.empty(k * rb, np.uint8)
            fill_random(buf, seed, stream, at + first * rb)
        values = buf.view(c.dtype)
        data = values.astype(p.stored) if p.widen else values
        levels = _levels_cached(k, c.values) if c.values > 1 else b""
        body = len(levels) + data.nbytes
        if codec is None:
            head = _page_head(k * c.values, body, body)
            out.write(head + levels)
            out.write(data)
        else:
            packed = codec.compress(levels + data.tobytes() if levels else data)
            head = _page_head(k * c.values, body, packed.size)
            out.write(head)
            out.write(packed)
        unpacked += len(head) + body
    size = out.pos - start
    # ColumnChunk {2: file_offset, 3: ColumnMetaData {1-4: the plan's head, 5, 6, 7, 9}}
    meta = (p.meta_head + b"\x16" + _varint(_zigzag(rows * c.values)) + b"\x16" + _varint(unpacked << 1)
            + b"\x16" + _varint(size << 1) + b"\x26" + _varint(start << 1) + b"\x00")
    return b"\x26" + _varint(start << 1) + b"\x1c" + meta + b"\x00", unpacked


_FOOTER_PARTS: dict = {}


def _footer(fmt, num_rows: int, row_groups: list) -> bytes:
    parts = _FOOTER_PARTS.get(fmt.columns)
    if parts is None:
        # the schema (fields 1-2) and the key-value metadata and created_by (5-6): once per column set
        kv = _Struct().binary(1, b"ARROW:schema").binary(2, arrow_schema_metadata(fmt))
        tail = _Struct()
        tail.last = 4
        tail.list(5, _STRUCT, [kv]).binary(6, CREATED_BY.encode())
        parts = _FOOTER_PARTS[fmt.columns] = (bytes(_Struct().i32(1, 2).list(2, _STRUCT, schema_elements(fmt.columns)).out),
                                              tail.end())
    meta = _Struct()
    meta.out += parts[0]
    meta.last = 2
    meta.i64(3, num_rows)
    n = len(row_groups)
    meta._head(4, _LIST)
    meta.out += bytes([(n << 4) | _STRUCT]) if n < 15 else bytes([0xF0 | _STRUCT]) + _varint(n)
    return bytes(meta.out) + b"".join(row_groups) + parts[1]
