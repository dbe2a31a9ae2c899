"""What every format provides: write a file, index its samples, decode them, check its structure.

Formats know bytes; loaders know scheduling. A format object is built once from the workload's
dataset section (`iogen.formats.get_format`) and holds no open files, so it is cheap to pass to
threads and processes.

Content: sample j of a file holds bytes [j * record_bytes, (j + 1) * record_bytes) of the
pseudo-random stream (seed, stream) of `iogen.core_switch.fill.fill_random`; the stream is the file's
(see DatasetLayout.stream_of). So a file is a pure function of (seed, stream, sizes): byte
identical across reruns, incompressible, and no two files share content. (The image formats take
their noise from `image_noise`, the same (seed, stream)'s image stream: iogen.formats.image.)
"""
from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError

# Bytes generated and written per step. Small enough to stay in L2/L3 between the fill, the
# CRC and the write that each touch it; large enough that per-call overhead is negligible.
CHUNK_BYTES = 1 << 20


def fill_random(buf, seed: int, stream: int, offset_bytes: int = 0) -> None:
    """Fill buf with the bytes of stream (seed, stream) at absolute offset_bytes (iogen.core_switch.fill).

    The compiled fill and its pure twin produce identical bytes (tested in tests/core), so files
    do not depend on which core wrote them; iogen.core_switch chooses, and never falls back silently.
    """
    from .. import core_switch as core

    core.fill.fill_random(buf, seed, stream, offset_bytes)


def payload_chunks(seed: int, stream: int, start_bytes: int, nbytes: int, buf: np.ndarray):
    """Yield memoryviews of buf holding stream bytes [start_bytes, start_bytes + nbytes) in order.

    The same buffer is refilled for every chunk: consume each view before taking the next.
    """
    view = memoryview(buf)
    pos = 0
    while pos < nbytes:
        n = min(len(view), nbytes - pos)
        part = view[:n]
        fill_random(part, seed, stream, start_bytes + pos)
        yield part
        pos += n


def sample_bytes(seed: int, stream: int, sample: int, record_bytes: int) -> np.ndarray:
    """The expected content of one sample (for tests and checks)."""
    out = np.empty(record_bytes, np.uint8)
    fill_random(out, seed, stream, sample * record_bytes)
    return out


class RecordError(ValueError):
    """Entry `index` of a batch is not a well-formed record of its format (the loader names the file)."""

    def __init__(self, index: int, reason: str):
        self.index = int(index)
        self.reason = reason
        super().__init__(f"entry {self.index}: {reason}")


@dataclass(frozen=True)
class FileIndex:
    """Where each sample of a file lies: byte ranges the native loader reads with pread.

    framing "raw": [offsets[i], offsets[i] + lengths[i]) is sample i's payload, nothing else.
    framing "tfrecord": the range is sample i's whole record frame: 8-byte little-endian data
    length, 4-byte masked CRC-32C of those 8 bytes, the data (a serialized tf.train.Example),
    4-byte masked CRC-32C of the data. A reader checks the data CRC with the frame in hand:
    data = [offset + 12, offset + length - 4), its CRC at offset + length - 4.
    """

    offsets: np.ndarray
    lengths: np.ndarray
    framing: str = "raw"
    file_bytes: int = 0
    extra: dict = field(default_factory=dict)

    def __len__(self):
        return int(self.offsets.size)


@dataclass(frozen=True)
class GroupIndex:
    """Where a file's samples lie when they are rows of groups read whole (Parquet row groups).

    Group g holds rows [first_row[g], first_row[g + 1]); reading it means reading the byte ranges
    offsets[ptr[g]:ptr[g + 1]] (lengths alike): for Parquet, the chunks of the columns a run
    reads. A loader reads a group once for all the samples of it a batch needs, and may keep it
    (a row-group cache) for later batches.
    """

    first_row: np.ndarray
    ptr: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray

    @property
    def groups(self) -> int:
        return int(self.first_row.size - 1)

    def group_of(self, rows) -> np.ndarray:
        """The group of each row."""
        return np.searchsorted(self.first_row, np.asarray(rows, np.int64), side="right") - 1

    def ranges(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, lengths) of the byte ranges that make up group g."""
        lo, hi = int(self.ptr[g]), int(self.ptr[g + 1])
        return self.offsets[lo:hi], self.lengths[lo:hi]


@dataclass(frozen=True)
class FileShape:
    """What one data file holds, read from its headers or framing (probe_file): no payload is read.

    samples: records in the file; record_bytes: payload bytes of one record (of record 0 where
    records may differ); dims: one record's array shape (None for TFRecord); compression as the
    workload names it ("none", "zip", "gzip", "lzf"); layout "rows" (sample i is row i, as
    iogen writes) or "dlio" (NPZ x shaped (d1, d2, samples), as DLIO writes it).
    """

    samples: int
    record_bytes: int
    dims: tuple | None = None
    dtype: str | None = None
    compression: str = "none"
    layout: str = "rows"


class Format:
    """Base class: one file format with one variant (compression, element type, chunking)."""

    name = "?"
    suffix = "?"
    # tf.data reads these files with its own reader (TFRecordDataset), as a TensorFlow job does;
    # other formats reach tf.data through iogen's reader. Bytes of framing around each record's
    # data, and the tf.train.Example feature holding the payload, for such formats.
    tfdata_native = False
    frame_overhead_bytes = 0
    payload_feature = None

    def __init__(self, compression: str = "none", compression_level: int | None = None,
                 record_dtype="uint8", record_dims=None, samples_per_file: int | None = None):
        self.compression = compression
        self.compression_level = compression_level
        self.record_dtype = np.dtype(record_dtype)
        self.record_dims = tuple(int(d) for d in record_dims) if record_dims else None
        self.samples_per_file = samples_per_file

    # -- what the rest of iogen reads -------------------------------------------------------

    @property
    def element_bytes(self) -> int:
        """Record sizes are whole multiples of this."""
        return self.record_dtype.itemsize

    @property
    def byte_addressable(self) -> bool:
        """Whether index_file can return byte ranges (False for compressed variants)."""
        return self.compression == "none"

    def variant(self) -> dict:
        """Every setting that changes the bytes of a file (stored in the manifest)."""
        # the level matters only when something is compressed
        level = self.compression_level if self.compression != "none" else None
        return {"format": self.name, "compression": self.compression, "compression_level": level,
                "record_element_type": self.record_dtype.name,
                "record_dims": list(self.record_dims) if self.record_dims else None}

    def describe(self) -> str:
        """Short human name, e.g. 'npz' or 'tfrecord+gzip'."""
        return self.name if self.compression == "none" else f"{self.name}+{self.compression}"

    # -- the contract -----------------------------------------------------------------------

    def write_file(self, path, num_samples: int, record_bytes: int, seed: int, stream: int) -> int:
        """Write exactly `path` (streaming, bounded memory); return the bytes written."""
        return self.write_file_crc(path, num_samples, record_bytes, seed, stream)[0]

    def write_file_crc(self, path, num_samples: int, record_bytes: int, seed: int,
                       stream: int) -> tuple[int, int]:
        """Like write_file, also returning the CRC-32C of the whole file (for the manifest)."""
        raise NotImplementedError

    def check_sizes(self, smallest: int, drawn: bool) -> None:
        """ConfigError when the smallest record size a split has (`drawn`: drawn with
        record_length_bytes_stdev) makes a file this format cannot write; checked before any file is written."""

    def file_image(self, num_samples: int, record_bytes: int, seed: int, stream: int):
        """The whole file's bytes in a buffer this thread owns (valid until its next call), when the
        format builds such a file in memory; None otherwise (write_file_crc writes it). Datagen
        hands the buffer to iogen.core_switch.publish, which writes, renames and journals it in one call."""
        return None

    def file_recipe(self, num_samples: int, record_bytes: int, seed: int, stream: int):
        """What datagen publishes of a file built in memory: file_image's buffer, or (the image formats) a
        recipe not built yet, whose build() fills and returns it and which the POSIX backend builds and
        publishes in one core call (iogen.core_switch.publish.write_image); None as file_image."""
        return self.file_image(num_samples, record_bytes, seed, stream)

    def index_file(self, path) -> FileIndex | None:
        """Byte range of each sample, or None when samples are not byte-addressable."""
        raise NotImplementedError

    def group_index(self, path) -> GroupIndex | None:
        """For formats whose samples are rows of groups read whole (Parquet): the groups and the
        byte ranges each one is read as (GroupIndex), the file's headers checked. None (the
        default): samples are read as index_file's ranges or decoded by read_samples."""
        return None

    def fixed_index(self, num_samples: int, record_bytes: int) -> FileIndex | None:
        """The index of a file iogen's writer wrote with these settings, by arithmetic (no read),
        when the format's layout fixes it (a reader of remote objects then needs no request);
        None when it does not (compressed variants, HDF5: the library places the data)."""
        return None

    def read_samples(self, path, sample_ids) -> list:
        """Decode samples of a file (numpy arrays or bytes), in the order asked."""
        raise NotImplementedError

    def check_file(self, path, num_samples: int, record_bytes: int) -> list[str]:
        """Structural problems of a file, as sentences; empty when it is sound."""
        raise NotImplementedError

    def probe_file(self, path) -> FileShape:
        """What the file holds (samples, record size, dims, compression), from headers only.

        Used by the run's data check on datasets without a manifest; a file this format cannot
        parse is a DataError naming it.
        """
        raise NotImplementedError

    def count_records(self, path) -> int:
        """Records in the file, its whole framing checked: what a framework's own reader may be handed.

        Formats with `tfdata_native` implement it (TFRecord); the loader runs it on every file
        before the framework reads it.
        """
        raise NotImplementedError(f"{self.name}: count_records")

    # -- a sample's payload: what a model gets of a record ----------------------------------

    # Element type and shape of a payload as a model gets it (TFRecord: the image's raw bytes).
    @property
    def payload_dtype(self) -> np.dtype:
        """Element type of a payload."""
        return self.record_dtype

    @property
    def payload_dims(self) -> tuple[int, ...] | None:
        """Shape of a payload (None: 1-D)."""
        return self.record_dims

    def payload_spans(self, buf, starts, lengths) -> tuple[np.ndarray, np.ndarray]:
        """Where each sample's payload lies in buf, given the index_file ranges read to buf[starts].

        Returns int64 (payload starts, payload lengths); a record whose structure does not parse
        raises RecordError with its entry. Raw ranges are their own payload.
        """
        return np.asarray(starts, np.int64), np.asarray(lengths, np.int64)

    def payload_of(self, sample) -> np.ndarray:
        """The payload of one read_samples result, as a flat uint8 array (RecordError when it does not parse)."""
        return np.ascontiguousarray(sample).reshape(-1).view(np.uint8)

    def new_epoch(self) -> None:
        """A framework loader calls this as an epoch starts: what the format caches of its reads (Parquet's
        row groups) starts empty, so each epoch reads its data again. Nothing by default."""

    # Bytes of every sample's payload when decode_payloads gives one 2-D array of rows and can write
    # them into a given one (its `out`: Parquet's selected columns); None: payloads as they come.
    decoded_row_bytes = None

    def decode_payloads(self, path, sample_ids) -> tuple[int, object]:
        """(bytes decoded, payloads) of samples of one file, in the order asked: a list of flat uint8
        arrays, or one 2-D uint8 array (a row a sample) where the format has its samples so (Parquet
        rows: one copy for a batch, not one a sample). A record that does not parse raises
        RecordError with its place in sample_ids. The default: read_samples, then payload_of."""
        nbytes, out = 0, []
        for i, sample in enumerate(self.read_samples(path, sample_ids)):
            size = getattr(sample, "nbytes", None)
            nbytes += int(size) if size is not None else len(sample)
            try:
                out.append(self.payload_of(sample))
            except RecordError as exc:
                raise RecordError(i, exc.reason) from None
        return nbytes, out

    def record_shape(self, record_bytes: int) -> tuple[int, ...]:
        """Shape of one record's array: record_dims, else (record_bytes // element size,)."""
        if self.record_dims:
            return self.record_dims
        return (record_bytes // self.element_bytes,)

    def __repr__(self):
        return f"<{type(self).__name__} {self.describe()}>"


def file_size_or_error(path) -> int:
    """Size of a data file; a missing one, or a directory or device in its place, is a DataError naming it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataError(path, "data file is missing (generate it with `iogen datagen`)") from None
    except OSError as exc:
        raise DataError(path, f"cannot stat the data file: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise DataError(path, f"is {kind}, not a data file")
    return st.st_size


@contextlib.contextmanager
def parsing(path, what: str, offset=None):
    """Exceptions a third-party parser raises on corrupt bytes become one DataError naming the file.

    zipfile, numpy's .npy header reader (ast.literal_eval of the file's text) and h5py each raise
    their own kinds on bad input (KeyError, BadZipFile, zlib.error, NotImplementedError,
    tokenize.TokenError, AttributeError, ...): to a user they all mean "this file is corrupt".
    """
    try:
        yield
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - see above: any failure to parse untrusted bytes
        text = " ".join(str(exc).split()) or "no detail"
        raise DataError(path, f"{what} ({type(exc).__name__}: {text[:200]})", offset) from None


def is_fileobj(source) -> bool:
    """Whether a format method's `path` is an open binary file object (an object's
    iogen.storage.objectfile.ObjectFile) rather than a path: index_file and read_samples take either."""
    return hasattr(source, "readinto")


def source_name(source) -> str:
    """What messages call a path or a file object (its `name`: an object's s3:// URI)."""
    return source.name if is_fileobj(source) else os.fspath(source)


def source_size(source) -> int:
    """Size of a data file, or of a file object (its `size`, else its end)."""
    if not is_fileobj(source):
        return file_size_or_error(source)
    size = getattr(source, "size", None)
    return int(size) if size is not None else source.seek(0, os.SEEK_END)


def read_at(fobj, name, offset: int, length: int) -> bytes:
    """Exactly length bytes at offset of an open file (pread) or file object (seek, read); short is a DataError."""
    try:
        fd = fobj.fileno()
    except (OSError, AttributeError, ValueError):  # io.UnsupportedOperation is an OSError
        fd = None
    if fd is not None:
        return pread_exact(fd, name, offset, length)
    if offset < 0 or length < 0:
        raise DataError(name, f"a header points at {length} bytes at byte offset {offset}: corrupt", max(offset, 0))
    fobj.seek(offset)
    data = fobj.read(length)
    if len(data) != length:
        raise DataError(name, f"file ends after {offset + len(data)} bytes, "
                              f"{length} bytes needed here (truncated?)", offset + len(data))
    return data


def check_sample_ids(path, sample_ids, num_samples: int) -> np.ndarray:
    """Sample ids as int64; ids outside the file are a DataError naming the file."""
    ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= num_samples):
        bad = int(ids[(ids < 0) | (ids >= num_samples)][0])
        raise DataError(path, f"sample {bad} asked for, the file holds {num_samples} samples")
    return ids


def pread_exact(fd: int, path, offset: int, length: int) -> bytes:
    """Read exactly length bytes at offset; a short read is a DataError with the offset."""
    if offset < 0 or length < 0:  # from a corrupt header: os.pread would say only "Invalid argument"
        raise DataError(path, f"a header points at {length} bytes at byte offset {offset}: corrupt", max(offset, 0))
    try:
        data = os.pread(fd, length, offset)
    except OSError as exc:
        raise DataError(path, f"read failed: {exc.strerror}", offset) from None
    if len(data) != length:
        raise DataError(path, f"file ends after {offset + len(data)} bytes, "
                              f"{length} bytes needed here (truncated?)", offset + len(data))
    return data


def error_text(exc: DataError) -> str:
    """A DataError's message without its path (for lists already grouped by file)."""
    return exc.message if exc.offset is None else f"at byte offset {exc.offset}: {exc.message}"
