"""CSV: DLIO's `format: csv`, a table of uint8 values, one sample a row (as pandas writes it).

DLIO writes `pandas.DataFrame(records).to_csv(path)`: a header line `,0,1,...,N-1` (the index
column has no name), then one line a sample, `i,v0,v1,...`, N = record_length values of uint8;
its reader loads the whole table (`pd.read_csv(...).to_numpy()`) and takes row i.

iogen writes the same table with fixed-width fields: the index zero-padded to the digits of the
last index, every value as three digits (`007`), so every row has the same length, w + 4 N + 1
bytes, and row i lies at header + i x row bytes: the native loader preads rows, and pandas and
the csv module read the file as DLIO's (leading zeros parse as the same integers). Values are the
file's stream bytes (seeded, unique per file). A sample's payload is its row's text as read; its
decoded values (read_samples) are uint8. Files written by DLIO (variable-width rows) are indexed by
scanning for line ends once per file.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import ConfigError, DataError
from .base import (FileIndex, FileShape, Format, RecordError, check_sample_ids, error_text, fill_random, is_fileobj,
                   read_at, source_name, source_size)
from ..common.checksum import crc32c

# values of one row written per step, in rows: about this many bytes of text
_WRITE_BYTES = 4 << 20
_LUT = np.array([list(b",%03d" % v) for v in range(256)], np.uint8)  # value -> b",ddd"
# a header line longer than this is not a header iogen or DLIO writes
_MAX_HEADER_BYTES = 64 << 20


def index_width(num_samples: int) -> int:
    """Digits of the index column: those of the last index."""
    return len(str(max(int(num_samples) - 1, 0)))


def header_line(values: int) -> bytes:
    """pandas's header of a DataFrame of `values` columns with an unnamed index."""
    return ("," + ",".join(str(j) for j in range(int(values))) + "\n").encode()


class CsvFormat(Format):
    """CSV tables of uint8 values, fixed-width rows (see the module doc)."""

    name = "csv"
    suffix = "csv"

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.compression != "none":
            raise ConfigError(f"dataset.compression = {self.compression!r}: iogen writes csv uncompressed; use none")
        if self.record_dims:
            raise ConfigError("dataset.record_dims: a csv sample is a row of dataset.record_length_bytes values; "
                              "remove record_dims")
        if self.record_dtype != np.uint8:
            raise ConfigError(f"dataset.record_element_type = {self.record_dtype.name!r}: a csv sample is a row of "
                              "uint8 values (DLIO's); use uint8")

    # -- writing ----------------------------------------------------------------------------

    def row_bytes(self, num_samples: int, values: int) -> int:
        return index_width(num_samples) + 4 * int(values) + 1

    def rows_text(self, first: int, rows: int, num_samples: int, values: int, seed: int, stream: int) -> np.ndarray:
        """Rows first..first+rows as text, (rows, row bytes) uint8."""
        w = index_width(num_samples)
        vals = np.empty(rows * values, np.uint8)
        fill_random(vals, seed, stream, first * values)
        out = np.empty((rows, w + 4 * values + 1), np.uint8)
        idx = np.arange(first, first + rows, dtype=np.int64)
        for k in range(w):  # digit k from the left
            out[:, k] = 48 + (idx // 10 ** (w - 1 - k)) % 10
        out[:, w:w + 4 * values] = _LUT[vals.reshape(rows, values)].reshape(rows, 4 * values)
        out[:, -1] = 10
        return out

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """Header, then the rows in pieces of about 4 MiB; (bytes, CRC-32C)."""
        n, values = int(num_samples), int(record_bytes)
        head = header_line(values)
        row = self.row_bytes(n, values)
        step = max(1, _WRITE_BYTES // row)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, head)
            crc, size = crc32c(head), len(head)
            for first in range(0, n, step):
                text = self.rows_text(first, min(step, n - first), n, values, seed, stream)
                crc = crc32c(text, crc)
                size += text.nbytes
                _write_all(fd, text)
        finally:
            os.close(fd)
        return size, crc

    # -- the table --------------------------------------------------------------------------

    def _header(self, path) -> tuple[int, int, str, int]:
        """(values a row, header bytes, name, file size) from the header line."""
        name = source_name(path)
        size = source_size(path)
        got, pos = b"", 0
        while b"\n" not in got:
            if pos >= min(size, _MAX_HEADER_BYTES):
                raise DataError(name, "no header line (no line end in the first "
                                      f"{min(size, _MAX_HEADER_BYTES)} bytes): not a csv table", 0)
            part = self._read(path, name, pos, min(1 << 20, size - pos))
            got += part
            pos += len(part)
        line = got[:got.index(b"\n") + 1]
        fields = line[:-1].rstrip(b"\r").split(b",")
        if len(fields) < 2 or fields[0] not in (b"", b"Unnamed: 0"):
            raise DataError(name, "the header line is not an index column and value columns (',0,1,...')", 0)
        if [f.strip() for f in fields[1:]] != [str(j).encode() for j in range(len(fields) - 1)]:
            raise DataError(name, f"the header line names columns other than 0..{len(fields) - 2}", 0)
        return len(fields) - 1, len(line), name, size

    @staticmethod
    def _read(path, name, offset, length) -> bytes:
        if is_fileobj(path):
            return read_at(path, name, offset, length)
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    def fixed_index(self, num_samples, record_bytes):
        """iogen's rows: fixed width after the header."""
        n, values = int(num_samples), int(record_bytes)
        head, row = len(header_line(values)), self.row_bytes(n, values)
        return FileIndex(head + np.arange(n, dtype=np.int64) * row, np.full(n, row, np.int64), "raw",
                         head + n * row, {"values": values})

    def index_file(self, path):
        """Each row's byte range: arithmetic for iogen's fixed-width rows, else line ends found by a scan."""
        values, head, name, size = self._header(path)
        n = self.samples_per_file
        if n is not None:
            fixed = self.fixed_index(n, values)
            if fixed.file_bytes == size:
                first = self._read(path, name, head, int(fixed.lengths[0]) if n else 0)
                if n == 0 or (first.endswith(b"\n") and first.count(b",") == values):
                    return fixed
        ends = self._line_ends(path, name, head, size)
        starts = np.concatenate(([head], ends[:-1] + 1)).astype(np.int64) if ends.size else np.zeros(0, np.int64)
        return FileIndex(starts, (ends + 1 - starts).astype(np.int64), "raw", size, {"values": values})

    def _line_ends(self, path, name, start: int, size: int) -> np.ndarray:
        out, pos = [], start
        while pos < size:
            part = np.frombuffer(self._read(path, name, pos, min(8 << 20, size - pos)), np.uint8)
            if not part.size:
                break
            out.append(np.flatnonzero(part == 10) + pos)
            pos += part.size
        ends = np.concatenate(out) if out else np.zeros(0, np.int64)
        if size > start and (not ends.size or ends[-1] != size - 1):
            raise DataError(name, "the last row has no line end (truncated?)", int(ends[-1] + 1) if ends.size else start)
        return ends

    # -- payloads ---------------------------------------------------------------------------

    def payload_spans(self, buf, starts, lengths):
        """A row's text is its payload; a row that does not end its line is not a whole row."""
        starts = np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        arr = np.frombuffer(memoryview(buf).cast("B"), np.uint8)
        if lengths.size:
            bad = np.flatnonzero((lengths <= 0) | (arr[np.maximum(starts + lengths - 1, 0)] != 10))
            if bad.size:
                raise RecordError(int(bad[0]), "not a whole csv row: it does not end with a line end")
        return starts, lengths

    @staticmethod
    def parse_row(text: bytes, values: int, name: str, sample: int) -> np.ndarray:
        """A row's values as uint8 (the index column dropped); a malformed row is a DataError."""
        fields = text.rstrip(b"\r\n").split(b",")
        if len(fields) != values + 1:
            raise DataError(name, f"row {sample} holds {len(fields) - 1} values, the header names {values}")
        try:
            nums = np.array([int(f) for f in fields[1:]], np.int64)
        except ValueError:
            raise DataError(name, f"row {sample} holds a value that is not an integer") from None
        if nums.size and (nums.min() < 0 or nums.max() > 255):
            raise DataError(name, f"row {sample} holds a value outside 0..255")
        return nums.astype(np.uint8)

    def read_samples(self, path, sample_ids):
        """Each row's values (uint8), parsed as a csv reader would."""
        index = self.index_file(path)
        name = source_name(path)
        values = int(index.extra["values"])
        ids = check_sample_ids(name, sample_ids, len(index))
        out = []
        for i in ids.tolist():
            text = self._read(path, name, int(index.offsets[i]), int(index.lengths[i]))
            out.append(self.parse_row(text, values, name, i))
        return out

    # -- checking ---------------------------------------------------------------------------

    def check_file(self, path, num_samples, record_bytes):
        """Header, then every row: its index, its value count, digits only."""
        try:
            index = self.index_file(path)
        except DataError as exc:
            return [error_text(exc)]
        name = source_name(path)
        problems = []
        values = int(index.extra["values"])
        if values != int(record_bytes):
            problems.append(f"rows hold {values} values, the workload's record is {int(record_bytes)}")
        if len(index) != int(num_samples):
            problems.append(f"holds {len(index)} rows, the workload says {int(num_samples)}")
        for i in range(len(index)):
            text = self._read(path, name, int(index.offsets[i]), int(index.lengths[i]))
            try:
                self.parse_row(text, values, name, i)
                if int(text.split(b",", 1)[0]) != i:
                    raise DataError(name, f"row {i} has index {text.split(b',', 1)[0][:20]!r}")
            except (DataError, ValueError) as exc:
                problems.append(error_text(exc) if isinstance(exc, DataError) else f"row {i}: bad index")
                break
        return problems

    def probe_file(self, path):
        """Rows and values a row, from the header and the rows' line ends."""
        index = self.index_file(path)
        return FileShape(len(index), int(index.extra["values"]), None, "uint8", "none")

    def record_shape(self, record_bytes: int) -> tuple[int, ...]:
        return (int(record_bytes),)


def _write_all(fd: int, data) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]
