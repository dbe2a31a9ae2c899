"""Parquet: MLPerf Storage's dlrm and flux format (columns, row groups, a codec), written with pyarrow.

A file holds `num_samples_per_file` rows of the workload's columns (`dataset.parquet.columns`):
each column a scalar of its dtype, or a fixed-size list of `size` values (non-nullable), in row
groups of `parquet.row_group_size` rows (the last one shorter), compressed with the workload's
codec (none, snappy, gzip, lz4, zstd). Plain encoding, no dictionary, no statistics: the data is
seeded noise, which a dictionary or statistics would only make bigger and slower to write.

Content: row group g of a file holds the bytes [first_row(g) * record_bytes, ...) of the file's
stream (iogen.formats.base), laid out column after column (column c takes rows x its row bytes).
So a file is a pure function of (seed, stream, columns, row group size, codec).

Writing: files are written directly (iogen.formats.parquet_direct: page headers, PLAIN values,
each page compressed by pyarrow's codec when there is one, and the footer; about a page in memory
at a time). The manifest's CRC-32C is computed on the bytes as written.

Reading:
- `group_index` (the native loader): for each row group, the byte ranges of the selected
  (`read: true`) columns' chunks, from the footer: [dictionary page or first data page,
  + total_compressed_size), coalesced as pyarrow's pre-buffering does (chunks less than 8 KiB
  apart read as one range, up to 32 MiB): exactly the bytes pyarrow's
  `ParquetFile(...).read_row_group(i, columns=...)` reads with its default settings.
- `read_samples` (framework loaders): pyarrow's `ParquetFile.read_row_group(i, columns=...)`,
  with a per-thread cache of row groups bounded in bytes, as MLPerf Storage's DLIO fork keeps.
- Every footer is checked against the workload (schema: names, dtypes, list sizes; row count;
  row-group sizes; codec) before it is used: a difference is a DataError naming file and column.
"""
from __future__ import annotations

import collections
import io
import os
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, DataError
from .base import (FileShape, Format, GroupIndex, check_sample_ids, error_text, fill_random, is_fileobj,
                   read_at, source_name, source_size)
from ..common.checksum import crc32c

# pyarrow's writer default when no row group size is given (rows)
DEFAULT_ROW_GROUP = 1024 * 1024
# A framework reader thread keeps row groups up to this many bytes (selected columns, decoded).
CACHE_BYTES = 256 << 20
# Footers (pyarrow's parsed FileMetaData) a format object keeps for read_samples: at least
# FOOTERS_KEPT, and more while their memory stays within FOOTER_CACHE_BYTES. A parsed footer takes
# about FOOTER_MEMORY_FACTOR times its serialized size (a dlrm file's, 768 row groups x 200
# columns: well over 100 MB, so two; a scaled-down dataset's: all of them).
FOOTERS_KEPT = 2
FOOTER_CACHE_BYTES = 256 << 20
FOOTER_MEMORY_FACTOR = 16

# codec as the workload names it -> pyarrow's writer name, and the names a footer reports
CODECS = {"none": "NONE", "snappy": "SNAPPY", "gzip": "GZIP", "lz4": "LZ4", "zstd": "ZSTD"}
_FOOTER_CODECS = {"UNCOMPRESSED": "none", "SNAPPY": "snappy", "GZIP": "gzip", "LZ4": "lz4", "LZ4_RAW": "lz4",
                  "ZSTD": "zstd", "BROTLI": "brotli", "LZO": "lzo"}
MAGIC = b"PAR1"
# What is read of an object's end for its footer, in one read (pyarrow's own first footer read)
FOOTER_READ = 64 << 10


# pyarrow's pre-buffering (ParquetFile's default, pre_buffer=True) coalesces the column chunks
# it reads: ranges less than HOLE_BYTES apart are read as one, up to RANGE_BYTES (Arrow's
# CacheOptions defaults: hole_size_limit 8 KiB, range_size_limit 32 MiB)
HOLE_BYTES = 8192
RANGE_BYTES = 32 << 20


def coalesce(ranges, hole: int = HOLE_BYTES, limit: int = RANGE_BYTES) -> list[tuple[int, int]]:
    """(offset, length) ranges merged as Arrow's ReadRangeCache merges them: sorted, ranges whose
    gap is at most `hole` joined while the joined range stays within `limit` bytes."""
    out: list[list[int]] = []
    for o, n in sorted((int(o), int(n)) for o, n in ranges if n > 0):
        if out:
            start, end = out[-1]
            if o - end <= hole and max(end, o + n) - start <= limit:
                out[-1][1] = max(end, o + n)
                continue
        out.append([o, o + n])
    return [(s, e - s) for s, e in out]


@dataclass(frozen=True)
class Column:
    """One declared column: name, element dtype, values per row, whether a run reads it."""

    name: str
    dtype: str
    values: int = 1
    read: bool = True

    @property
    def row_bytes(self) -> int:
        return self.values * np.dtype(self.dtype).itemsize


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the parquet extra
        raise ConfigError("dataset.format = 'parquet' needs pyarrow: pip install 'iogen[parquet]'") from None
    return pa, pq


def arrow_schema_of(columns):
    """The Arrow schema of declared columns: non-nullable scalars, non-nullable fixed-size lists."""
    pa, _ = _pa()
    fields = []
    for c in columns:
        t = pa.from_numpy_dtype(np.dtype(c.dtype))
        if c.values > 1:
            t = pa.list_(pa.field("element", t, nullable=False), c.values)
        fields.append(pa.field(c.name, t, nullable=False))
    return pa.schema(fields)


def _same_type(got, want) -> bool:
    """Whether a file's column type holds what the workload declares: the same element type, and for a
    list the same list size where the file fixes it; nullability and the list's flavour (list,
    large list, fixed-size list: what other writers use) aside."""
    import pyarrow.types as pt

    if not (pt.is_list(got) or pt.is_large_list(got) or pt.is_fixed_size_list(got)):
        return got == want and not pt.is_fixed_size_list(want)
    if not pt.is_fixed_size_list(want) or got.value_type != want.value_type:
        return False
    return not pt.is_fixed_size_list(got) or got.list_size == want.list_size


class _CrcFile:
    """A write-only file object that keeps the CRC-32C and length of what passes through it."""

    def __init__(self, path):
        self.fh = open(path, "wb")
        self.crc = 0
        self.size = 0
        self.closed = False

    def write(self, data):
        mv = memoryview(data).cast("B")
        self.crc = crc32c(mv, self.crc)
        self.size += mv.nbytes
        self.fh.write(mv)
        return mv.nbytes

    def tell(self):
        return self.size

    def flush(self):
        self.fh.flush()

    def writable(self):
        return True

    def seekable(self):
        return False

    def readable(self):
        return False

    def close(self):
        if not self.closed:
            self.closed = True
            self.fh.close()


def _chunk_ranges(rg, columns) -> list[tuple[int, int]]:
    """The coalesced byte ranges of row group rg's chunks of these columns (what pyarrow pre-buffers)."""
    chunks = []
    for j in columns:
        col = rg.column(j)
        chunks.append((col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset,
                       col.total_compressed_size))
    return coalesce(chunks)


class _ObjectReads(io.RawIOBase):
    """What pyarrow reads an object through: pieces of it already in memory (the footer's end, a row
    group's coalesced chunk ranges: each fetched by one read, on the calling thread), any other read
    passed to its file object (an ObjectFile) as exactly that range (`readinto_exact` where the file
    object has it: no block cache)."""

    def __init__(self, fobj, size: int, pieces=()):
        super().__init__()
        self.fobj, self.size = fobj, int(size)
        self.pieces = [(int(o), memoryview(b).cast("B")) for o, b in pieces]
        self._read = getattr(fobj, "readinto_exact", None) or fobj.readinto
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        self._pos = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence] + int(offset)
        return self._pos

    def readinto(self, b):
        mv = memoryview(b).cast("B")
        n = max(0, min(mv.nbytes, self.size - self._pos))
        for start, data in self.pieces:
            if start <= self._pos and self._pos + n <= start + data.nbytes:
                mv[:n] = data[self._pos - start:self._pos - start + n]
                break
        else:
            if n:
                self.fobj.seek(self._pos)
                n = self._read(mv[:n])
        self._pos += n
        return n


class _Group:
    """A cached row group: its selected columns as pyarrow decoded them ((at, values): a (rows, bytes)
    uint8 view of each column, at its byte offset in a row), and their rows matrix once one was made."""

    __slots__ = ("columns", "size", "meta", "rows", "nbytes")

    def __init__(self, columns, size: int, meta):
        self.columns = columns
        self.size = int(size)
        self.meta = meta  # the footer held, so its id names it while the entry lives
        self.rows = None
        self.nbytes = sum(v.nbytes for _, v in columns)

    def put(self, out: np.ndarray, start: int, n: int) -> None:
        """out[:n] = rows start..start + n of the selected columns' bytes."""
        for at, values in self.columns:
            _put_columns(out, at, values[start:start + n])


def _footer_memory(meta) -> int:
    """What a parsed footer takes in memory, estimated from its serialized size."""
    return int(meta.serialized_size) * FOOTER_MEMORY_FACTOR


def _put_columns(rows: np.ndarray, at: int, values: np.ndarray) -> None:
    """rows[:, at:at + width] = values (a column's bytes, a row each), copied as the widest unsigned
    words that fit its place and width: numpy copies a 2-D uint8 block a byte row at a time, which
    for a 4-byte column of 6,144 rows costs ten times a copy of 6,144 words."""
    width = values.shape[1]
    for word in (8, 4, 2):
        if values.flags.c_contiguous and not (at % word or width % word or rows.shape[1] % word
                                                  or values.ctypes.data % word or rows.ctypes.data % word):
            dtype = np.dtype(f"u{word}")
            rows.view(dtype)[:, at // word:(at + width) // word] = values.view(dtype)
            return
    rows[:, at:at + width] = values


def _pyarrow_file(pq, source, meta, group=None, columns=()):
    """pyarrow's ParquetFile of a path, or of an object's file object: then, given a row group, its
    chunks of these columns fetched first, as their coalesced ranges (group_index's: what the native
    loader reads), one read each; pyarrow's reads of them are served from memory."""
    if not is_fileobj(source):
        return pq.ParquetFile(source, metadata=meta)
    pieces = []
    if group is not None:
        name = source_name(source)
        fetch = _ObjectReads(source, source_size(source))
        pieces = [(o, read_at(fetch, name, o, n)) for o, n in _chunk_ranges(meta.row_group(group), columns)]
    return pq.ParquetFile(_ObjectReads(source, source_size(source), pieces), metadata=meta)


class ParquetFormat(Format):
    """Parquet files of the workload's columns (see the module doc)."""

    name = "parquet"
    suffix = "parquet"

    def __init__(self, *args, columns=None, row_group_size=None, record_bytes=None, **kw):
        super().__init__(*args, **kw)
        if columns is None:
            # no declared columns: one column `data` of record_length_bytes bytes a row
            columns = [Column("data", "uint8", int(record_bytes or 1), True)]
        self.columns = tuple(c if isinstance(c, Column) else Column(*c) for c in columns)
        self.row_group_size = int(row_group_size or DEFAULT_ROW_GROUP)
        self.selected = tuple(i for i, c in enumerate(self.columns) if c.read)
        if not self.selected:
            raise ConfigError("dataset.parquet.columns: no column has read: true; a run must read at least one column")
        self.row_bytes = sum(c.row_bytes for c in self.columns)
        self._init_caches()

    def _init_caches(self):
        # per format object (a fresh object, a fresh cache), dropped when pickled to a worker
        self._footer_lock = threading.Lock()
        self._footers: collections.OrderedDict = collections.OrderedDict()
        self._footer_bytes = 0  # their estimated memory (_footer_memory)
        self._local = threading.local()
        self._epoch = 0  # new_epoch() counts; a thread's row-group cache belongs to one

    def __getstate__(self):
        state = dict(self.__dict__)
        for name in ("_footer_lock", "_footers", "_footer_bytes", "_local", "_epoch"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_caches()

    # -- what the rest of iogen reads -------------------------------------------------------

    @property
    def byte_addressable(self) -> bool:
        """Rows are not byte ranges (a row's values lie in every column chunk): see group_index."""
        return False

    def variant(self) -> dict:
        """The settings that change a file's bytes (read flags do not)."""
        return dict(super().variant(), **{
            "parquet.row_group_size": self.row_group_size,
            "parquet.columns": [[c.name, c.dtype, c.values] for c in self.columns],
            "parquet.writer": "iogen-direct-1",
        })

    @property
    def selected_columns(self) -> list[str]:
        return [self.columns[i].name for i in self.selected]

    def arrow_schema(self):
        """The declared columns as an Arrow schema (non-nullable; lists of size > 1 fixed-size)."""
        schema = self.__dict__.get("_schema")
        if schema is None:  # built once (a dlrm schema: 200 fields, about a millisecond)
            schema = self._schema = arrow_schema_of(self.columns)
        return schema

    # -- writing ----------------------------------------------------------------------------

    def _check_record(self, record_bytes: int) -> None:
        if int(record_bytes) != self.row_bytes:
            raise ConfigError(f"dataset.record_length_bytes = {record_bytes}: a row of dataset.parquet.columns "
                              f"holds {self.row_bytes} bytes")

    def group_table(self, g: int, rows: int, seed: int, stream: int, schema=None):
        """Row group g (rows rows) as a pyarrow Table of the file's content."""
        pa, _ = _pa()
        schema = schema or self.arrow_schema()
        buf = np.empty(rows * self.row_bytes, np.uint8)
        fill_random(buf, seed, stream, g * self.row_group_size * self.row_bytes)
        arrays, pos = [], 0
        for c, field in zip(self.columns, schema):
            n = rows * c.row_bytes
            values = pa.array(buf[pos:pos + n].view(c.dtype))
            pos += n
            if c.values > 1:
                values = pa.FixedSizeListArray.from_arrays(values, type=field.type)
            arrays.append(values)
        return pa.Table.from_arrays(arrays, schema=schema)

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """Write the file with iogen's direct writer (pages and footer; a codec through pyarrow's
        codecs); return (bytes, CRC-32C of what was written)."""
        self._check_record(record_bytes)
        from . import parquet_direct

        return parquet_direct.write(self, path, num_samples, seed, stream)

    def _write_pyarrow(self, path, num_samples, seed, stream):
        """The same content through pyarrow's ParquetWriter (tests and benchmarks compare with it)."""
        _, pq = _pa()
        schema = self.arrow_schema()
        out = _CrcFile(path)
        try:
            level = self.compression_level if self.compression in ("gzip", "zstd") else None
            writer = pq.ParquetWriter(out, schema, compression=CODECS[self.compression], compression_level=level,
                                      use_dictionary=False, write_statistics=False)
            try:
                rows_left, g = int(num_samples), 0
                while rows_left > 0:
                    rows = min(self.row_group_size, rows_left)
                    writer.write_table(self.group_table(g, rows, seed, stream, schema), row_group_size=rows)
                    rows_left -= rows
                    g += 1
            finally:
                writer.close()
        finally:
            out.close()
        return out.size, out.crc

    # -- the footer -------------------------------------------------------------------------

    def metadata(self, path, cache: bool = True):
        """The file's footer (pyarrow FileMetaData), checked against the workload; kept when `cache`
        (FOOTERS_KEPT, or more within FOOTER_CACHE_BYTES)"""
        name = source_name(path)
        key = None
        if not cache:
            return self._read_footer(path, name)
        if is_fileobj(path):
            # an object (an ObjectFile: its s3:// name and size), which does not change during a run
            key = ("object", name, source_size(path))
        else:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise DataError(name, "data file is missing (generate it with `iogen datagen`)") from None
            key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
        if key is not None:
            with self._footer_lock:
                if key in self._footers:
                    self._footers.move_to_end(key)
                    return self._footers[key]
        meta = self._read_footer(path, name)
        if key is not None:
            with self._footer_lock:
                footers = self._footers
                if key in footers:  # another thread read it meanwhile: keep that one
                    return footers[key]
                footers[key] = meta
                self._footer_bytes += _footer_memory(meta)
                while len(footers) > FOOTERS_KEPT and self._footer_bytes > FOOTER_CACHE_BYTES:
                    self._footer_bytes -= _footer_memory(footers.popitem(last=False)[1])
        return meta

    def _read_footer(self, path, name):
        _, pq = _pa()
        size = source_size(path)
        if size < 12:
            raise DataError(name, f"{size} bytes: too short for a Parquet file (truncated?)")
        if is_fileobj(path):
            # an object: its last FOOTER_READ bytes by one read (pyarrow's footer, served from them),
            # its first 4 from them too where they cover the object
            end = read_at(path, name, max(0, size - FOOTER_READ), min(size, FOOTER_READ))
            head = end[:4] if size <= FOOTER_READ else read_at(path, name, 0, 4)
            tail = end[-4:]
            source = _ObjectReads(path, size, [(size - len(end), end)])
        else:
            source = path
            with open(path, "rb") as fh:
                head = fh.read(4)
                fh.seek(size - 4)
                tail = fh.read(4)
        if head != MAGIC:
            raise DataError(name, f"not a Parquet file: starts with {head.hex()}, not {MAGIC.hex()} (PAR1)", 0)
        if tail != MAGIC:
            raise DataError(name, f"not a whole Parquet file: ends with {tail.hex()}, not {MAGIC.hex()} (PAR1): "
                                  "truncated?", size - 4)
        try:
            meta = pq.read_metadata(source)
        except Exception as exc:  # noqa: BLE001 - any failure to parse an untrusted footer
            text = " ".join(str(exc).split())[:200]
            raise DataError(name, f"corrupt Parquet footer ({type(exc).__name__}: {text})") from None
        self._check_meta(meta, name, size)
        return meta

    def _check_meta(self, meta, name, size) -> None:
        """DataError naming the file, the column and what differs from the workload."""
        try:
            schema = meta.schema.to_arrow_schema()
        except Exception as exc:  # noqa: BLE001
            raise DataError(name, f"Parquet schema cannot be read ({type(exc).__name__}: {exc})") from None
        want = self.arrow_schema()
        have = {f.name: f for f in schema}
        for f in want:
            got = have.get(f.name)
            if got is None:
                raise DataError(name, f"column {f.name!r} is missing (the file has {', '.join(have) or 'none'})")
            if not _same_type(got.type, f.type):
                raise DataError(name, f"column {f.name!r} is {got.type}, the workload declares {f.type}")
        if list(have) != [f.name for f in want]:  # an extra column, or another order
            raise DataError(name, f"columns are {', '.join(have)}; the workload declares "
                                  f"{', '.join(f.name for f in want)} (in that order)")
        if meta.num_columns != len(want):
            raise DataError(name, f"{meta.num_columns} leaf columns, the workload declares {len(want)}")
        rows = meta.num_rows
        if self.samples_per_file is not None and rows != int(self.samples_per_file):
            raise DataError(name, f"holds {rows} rows, dataset.num_samples_per_file is {self.samples_per_file}")
        n = meta.num_row_groups
        everything = range(len(want))
        for g in range(n):
            rg = meta.row_group(g)
            expect = min(self.row_group_size, rows - g * self.row_group_size)
            if rg.num_rows != expect:
                raise DataError(name, f"row group {g} holds {rg.num_rows} rows, dataset.parquet.row_group_size "
                                      f"{self.row_group_size} gives it {expect}")
            # every chunk a run reads; all chunks of the first and last groups (codec, and the
            # chunks nearest the footer: a truncated file): 160,000 chunks of a dlrm footer in
            # Python would cost a second a file
            for j in (everything if g in (0, n - 1) else self.selected):
                col = rg.column(j)
                codec = _FOOTER_CODECS.get(str(col.compression), str(col.compression).lower())
                if codec != self.compression:
                    raise DataError(name, f"column {want[j].name!r} of row group {g} is compressed with {codec}, "
                                          f"dataset.compression is {self.compression}")
                start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                if start < 4 or start + col.total_compressed_size > size - 8:
                    raise DataError(name, f"column {want[j].name!r} of row group {g}: its chunk "
                                          f"[{start}, {start + col.total_compressed_size}) is not inside the file "
                                          f"of {size} bytes (truncated?)", max(0, start))
        if -(-rows // self.row_group_size) != n:
            raise DataError(name, f"{n} row groups, {rows} rows in groups of {self.row_group_size} make "
                                  f"{-(-rows // self.row_group_size)}")

    def group_index(self, path) -> GroupIndex:
        """Each row group's first row and the byte ranges of the selected columns' chunks (the footer
        read for this, not kept: the index is what a loader keeps)."""
        meta = self.metadata(path, cache=False)
        n = meta.num_row_groups
        first = np.zeros(n + 1, np.int64)
        offs, lens, ptr = [], [], [0]
        for g in range(n):
            rg = meta.row_group(g)
            first[g + 1] = first[g] + rg.num_rows
            for o, n in _chunk_ranges(rg, self.selected):
                offs.append(o)
                lens.append(n)
            ptr.append(len(offs))
        return GroupIndex(first, np.asarray(ptr, np.int64), np.asarray(offs, np.int64), np.asarray(lens, np.int64))

    # -- reading ----------------------------------------------------------------------------

    def index_file(self, path):
        """None: rows are read a row group at a time (group_index), not as byte ranges."""
        return None

    def new_epoch(self) -> None:
        """Every thread's row-group cache starts empty (at its next read): each epoch reads its row
        groups again, as the native loader's cache does (a footer read stays cached)."""
        self._epoch += 1

    def _cache(self):
        local = self._local
        cache = getattr(local, "groups", None)
        if cache is None or local.epoch != self._epoch:
            cache = local.groups = collections.OrderedDict()
            local.bytes = 0
            local.epoch = self._epoch
        return cache

    def _group_rows(self, path, g: int, fetched: list | None = None) -> np.ndarray:
        """Row group g's selected columns as a (rows, selected bytes) uint8 matrix (made once a cached
        group is wanted so: gathers of scattered rows)."""
        group = self._group(path, g, fetched)
        if group.rows is None:
            group.rows = np.empty((group.size, self.selected_bytes), np.uint8)
            group.put(group.rows, 0, group.size)
            self._local.bytes += group.rows.nbytes
            group.nbytes += group.rows.nbytes
            self._trim(self._cache())
        return group.rows

    def _trim(self, cache) -> None:
        """Least recently used groups out until the cache holds at most CACHE_BYTES (one stays)."""
        while self._local.bytes > CACHE_BYTES and len(cache) > 1:
            _, old = cache.popitem(last=False)
            self._local.bytes -= old.nbytes

    def _group(self, path, g: int, fetched: list | None = None) -> "_Group":
        """Row group g's selected columns as read, from this thread's cache or pyarrow; a fetch adds the
        bytes pyarrow reads for it (its coalesced chunk ranges) to `fetched`."""
        _, pq = _pa()
        name = source_name(path)
        meta = self.metadata(path)
        key = (name, id(meta), g)  # a changed file has another footer object
        cache = self._cache()
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        try:
            if is_fileobj(path):
                pf = _pyarrow_file(pq, path, meta, g, self.selected)
            else:  # this thread's last file stays open while it reads that file (no open a row group)
                last = getattr(self._local, "file", None)
                if last is None or last[0] != key[:2]:
                    self._local.file = None  # the last one closes (its footer too, unless cached)
                    last = self._local.file = (key[:2], _pyarrow_file(pq, path, meta), meta)  # meta held: its id names it
                pf = last[1]
            table = pf.read_row_group(g, columns=self.selected_columns)
        except Exception as exc:  # noqa: BLE001 - corrupt pages
            text = " ".join(str(exc).split())[:200]
            raise DataError(name, f"row group {g} cannot be read ({type(exc).__name__}: {text})") from None
        columns, at = [], 0
        for j, col_name in zip(self.selected, self.selected_columns):
            chunked = table.column(col_name)
            arr = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
            if arr.null_count:
                raise DataError(name, f"column {col_name!r} of row group {g} holds nulls; the workload's columns "
                                      "have a value in every row")
            if hasattr(arr, "flatten") and arr.type.num_fields:
                arr = arr.flatten()
            want = table.num_rows * self.columns[j].values
            if len(arr) != want or arr.null_count:
                raise DataError(name, f"column {col_name!r} of row group {g} holds {len(arr)} values, "
                                      f"{table.num_rows} rows of {self.columns[j].values} make {want}")
            values = np.asarray(arr.to_numpy(zero_copy_only=False)).reshape(table.num_rows, -1).view(np.uint8)
            columns.append((at, values))
            at += values.shape[1]
        if fetched is not None:
            fetched.append(sum(n for _, n in _chunk_ranges(meta.row_group(g), self.selected)))
        group = cache[key] = _Group(columns, table.num_rows, meta)  # the footer held: its id names it
        self._local.bytes += group.nbytes
        self._trim(cache)
        return group

    def read_samples(self, path, sample_ids):
        """Each row's selected columns (a uint8 row of their bytes), through pyarrow's read_row_group."""
        name = source_name(path)
        meta = self.metadata(path)
        ids = check_sample_ids(name, sample_ids, meta.num_rows)
        groups = ids // self.row_group_size
        out = [None] * ids.size
        for g in np.unique(groups).tolist():
            rows = self._group_rows(path, int(g))
            where = np.flatnonzero(groups == g)
            for i in where.tolist():
                out[i] = rows[int(ids[i]) - g * self.row_group_size]
        return out

    def decode_payloads(self, path, sample_ids, out=None):
        """The rows' selected columns as one (samples, selected bytes) uint8 array (one copy a batch),
        and the bytes read for them: the chunk ranges of the row groups fetched now (a row group in
        this thread's cache costs none), as the native loader counts them."""
        name = source_name(path)
        meta = self.metadata(path)
        ids = check_sample_ids(name, sample_ids, meta.num_rows)
        size = self.row_group_size
        if out is None:
            out = np.empty((ids.size, self.selected_bytes), np.uint8)
        fetched: list = []
        # runs of consecutive rows inside one row group are copied as slices (a batch read in order:
        # a run or two), anything else row by row
        if ids.size:
            cut = np.flatnonzero((np.diff(ids) != 1) | (np.diff(ids // size) != 0)) + 1
            bounds = [0, *cut.tolist(), int(ids.size)]
        else:
            bounds = [0]
        if len(bounds) * 4 > ids.size + 8:  # short runs (shuffled): by row group, rows gathered
            groups = ids // size
            for g in np.unique(groups).tolist():
                where = groups == g
                out[where] = self._group_rows(path, int(g), fetched)[ids[where] - g * size]
            return sum(fetched), out
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            first = int(ids[lo])
            g = first // size
            start = first - g * size
            group = self._group(path, g, fetched)
            if group.rows is not None:
                out[lo:hi] = group.rows[start:start + hi - lo]
            else:  # straight from the columns: no matrix of the whole group
                group.put(out[lo:hi], start, hi - lo)
        return sum(fetched), out

    @property
    def selected_bytes(self) -> int:
        """Bytes of a row's selected columns (as decoded)."""
        return sum(self.columns[i].row_bytes for i in self.selected)

    @property
    def decoded_row_bytes(self) -> int:
        """decode_payloads writes rows of the selected columns' bytes (Format.decoded_row_bytes)."""
        return self.selected_bytes

    def payload_of(self, sample) -> np.ndarray:
        return np.asarray(sample, np.uint8).reshape(-1)

    def record_shape(self, record_bytes: int) -> tuple[int, ...]:
        return (int(record_bytes),)

    # -- checking ---------------------------------------------------------------------------

    def check_file(self, path, num_samples, record_bytes):
        """The footer against the workload, then every row group decoded (all columns)."""
        _, pq = _pa()
        name = source_name(path)
        try:
            meta = self.metadata(path)
        except DataError as exc:
            return [error_text(exc)]
        problems = []
        if meta.num_rows != int(num_samples):
            problems.append(f"holds {meta.num_rows} rows, the workload says {num_samples}")
        if int(record_bytes) != self.row_bytes:
            problems.append(f"a row holds {self.row_bytes} bytes, the workload's record is {record_bytes}")
        try:
            pf = _pyarrow_file(pq, path, meta)
            for g in range(meta.num_row_groups):
                pf.read_row_group(g)
        except Exception as exc:  # noqa: BLE001
            text = " ".join(str(exc).split())[:200]
            problems.append(f"row group {g} does not decode ({type(exc).__name__}: {text})")
        del name
        return problems

    def probe_file(self, path):
        """Rows, row bytes and codec from the footer (checked against the workload's columns)."""
        meta = self.metadata(path)
        return FileShape(meta.num_rows, self.row_bytes, None, None, self.compression)
