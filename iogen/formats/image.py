"""What JPEG and PNG share: one image a file, a sample is the file's bytes, sizes exact to the byte.

MLPerf Storage v3.0's image reader (retinanet) keeps each file's bytes and decodes nothing, so a
sample here is the whole file: index [0, size), payload = the file. The formats build files of
exactly `record_bytes` (the drawn size) that Pillow, torchvision and tf.io.decode_image open and
decode completely: the image's pixel data is seeded noise (unique per file, incompressible), and
the bytes an image of whole rows cannot take go into a comment (JPEG COM) or a private ancillary
chunk (PNG) of seeded noise, which decoders skip. The noise is not fill_random's stream (the other
formats') but the image stream of the same (seed, stream), iogen.core_switch.fill.image_noise: 16-byte
block j is two AES rounds of j under keys made from the stream's (iogen/_core/img_noise.h), which
the CPU's VAES makes at the speed the buffer's cache takes writes, a third less CPU than the
fill's multiplies; an image is noise nearly to its last byte, so this is most of its build. A file is assembled in one buffer per writer
thread: datagen hands its recipe (Format.file_recipe) to the backend, which on POSIX builds and publishes
it in one core call (core.publish.write_image, write_images for a run).

What each check costs (docs/formats.md): a read checks the size and the start and end markers
(payload_spans: a few bytes of what was read; stream_records: the same, each file read through a
reading thread's reused buffer when nobody keeps the batch's bytes); `iogen verify` and check_file walk the whole
structure (JPEG segments and the scan's markers, PNG chunks and every chunk's CRC-32).
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import ConfigError, DataError
from .base import (FileIndex, FileShape, Format, RecordError, check_sample_ids, error_text, is_fileobj,
                   read_at, source_name, source_size)
from ..common.checksum import crc32c

_buffers = threading.local()


def thread_buffer(nbytes: int) -> np.ndarray:
    """This thread's image buffer, at least nbytes (grown, never shrunk; valid until its next call)."""
    buf = getattr(_buffers, "buf", None)
    if buf is None or buf.size < nbytes:
        buf = np.empty(max(nbytes, 1 << 16), np.uint8)
        _buffers.buf = buf
    return buf[:nbytes]


_OP_KINDS = {"fill": 1, "fill_crc32": 2, "jpeg_scan": 3, "png_stored": 4}  # core.fill.build_image's; copy is 0


def image_recipe(copies, fills) -> tuple[np.ndarray, bytes]:
    """(ops, blob) for core.fill.build_image: copies [(offset, bytes)] gathered into one blob, then the
    fills [(kind name, offset, count, stream byte, a, b)] (a and b default 0)."""
    rows, blob = [], b""
    for at, data in copies:
        rows.append((0, at, len(data), len(blob), 0, 0))
        blob += data
    for kind, at, count, source, *ab in fills:
        ab += [0] * (2 - len(ab))
        rows.append((_OP_KINDS[kind], at, count, source, *ab))
    ops = np.array(rows, np.int64)
    ops.flags.writeable = False
    return ops, blob


class ImageRecipe:
    """A file to build: its buffer (this thread's), the format's operations and blob, its seed and stream. The
    POSIX backend builds and publishes it in one core call (core.publish.write_image); `build()` fills the
    buffer and returns it (any other backend, file_image)."""

    __slots__ = ("buf", "ops", "blob", "seed", "stream")

    def __init__(self, buf, ops, blob, seed, stream):
        self.buf, self.ops, self.blob, self.seed, self.stream = buf, ops, blob, seed, stream

    def __len__(self):
        return self.buf.size

    def build(self):
        from .. import core_switch as core

        core.fill.build_image(self.buf, self.ops, self.blob, self.seed, self.stream)
        return self.buf


class ImageFormat(Format):
    """Base of the one-image-a-file formats (JPEG, PNG): see the module doc."""

    # the file's first and last bytes (what a read checks); set by each format
    head_marker = b""
    tail_marker = b""
    min_file_bytes = 1

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.samples_per_file not in (None, 1):
            raise ConfigError(f"dataset.num_samples_per_file = {self.samples_per_file}: a {self.name} file holds one "
                              "image (one sample); set it to 1")
        if self.record_dims:
            raise ConfigError(f"dataset.record_dims: a {self.name} sample is its file's bytes (its size is "
                              "dataset.record_length_bytes); remove record_dims")
        if self.record_dtype != np.uint8:
            raise ConfigError(f"dataset.record_element_type = {self.record_dtype.name!r}: a {self.name} sample is "
                              "its file's bytes (uint8)")

    def variant(self) -> dict:
        """The settings that change a file's bytes, with the image layout's version (each format's own: a
        dataset written with another version of the format's layout is other settings, never mixed)."""
        return dict(super().variant(), image_layout=self.layout_version)

    layout_version = 0  # set by each format, raised whenever the bytes it writes for the same settings change

    # -- writing ----------------------------------------------------------------------------

    def _check_size(self, record_bytes: int) -> None:
        if record_bytes < self.min_file_bytes:
            raise ConfigError(f"dataset.record_length_bytes: a {self.name} file of {record_bytes} bytes is too small "
                              f"(an image of one block needs at least {self.min_file_bytes}; with "
                              "record_length_bytes_stdev, every drawn size must reach it)")

    def check_sizes(self, smallest: int, drawn: bool) -> None:
        if drawn and smallest < self.min_file_bytes:
            raise ConfigError(f"dataset.record_length_bytes_stdev: the smallest file size it draws is {smallest} "
                              f"bytes, below the {self.min_file_bytes} a {self.name} image of one block needs; lower "
                              "the stdev or raise dataset.record_length_bytes")
        self._check_size(smallest)

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """Write the image whole (it is built in memory); return (bytes, CRC-32C)."""
        image = self.file_image(num_samples, record_bytes, seed, stream)
        import os

        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(image)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return len(image), crc32c(image)

    def file_image(self, num_samples, record_bytes, seed, stream):
        """The whole file in this thread's buffer (exactly record_bytes bytes)."""
        return self.file_recipe(num_samples, record_bytes, seed, stream).build()

    def file_recipe(self, num_samples, record_bytes, seed, stream) -> ImageRecipe:
        """The file to build in this thread's buffer (exactly record_bytes bytes), not built yet."""
        if int(num_samples) != 1:
            raise ValueError(f"a {self.name} file holds one sample, not {num_samples}")
        record_bytes = int(record_bytes)
        self._check_size(record_bytes)
        ops, blob = self.recipe(record_bytes)
        return ImageRecipe(thread_buffer(record_bytes), ops, blob, seed, stream)

    def recipe(self, record_bytes: int) -> tuple[np.ndarray, bytes]:
        """(ops, blob): core.fill.build_image's operations that build a file of record_bytes (image_recipe)."""
        raise NotImplementedError

    # -- reading ----------------------------------------------------------------------------

    def fixed_index(self, num_samples, record_bytes):
        """The sample is the whole file."""
        rb = int(record_bytes)
        return FileIndex(np.zeros(1, np.int64), np.array([rb], np.int64), "raw", rb)

    def index_file(self, path):
        """The sample is the whole file: [0, size)."""
        size = source_size(path)
        if size < len(self.head_marker) + len(self.tail_marker):
            raise DataError(source_name(path), f"{size} bytes: too short for a {self.name} image")
        return FileIndex(np.zeros(1, np.int64), np.array([size], np.int64), "raw", size)

    def payload_spans(self, buf, starts, lengths):
        """Each file read whole: its start and end markers checked (what costs almost nothing)."""
        starts = np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        mv = memoryview(buf).cast("B")
        head, tail = self.head_marker, self.tail_marker
        for i, (s, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
            if n < len(head) + len(tail) or mv[s:s + len(head)] != head or mv[s + n - len(tail):s + n] != tail:
                raise RecordError(i, self._not_whole())
        return starts, lengths

    def stream_records(self, fds, offsets, lengths, scratch, verify_crcs: bool):
        """Read each file whole through scratch (a thread's reused buffer, which stays in cache; nothing is
        kept) and check its start and end markers as it lands, in one core call without the GIL (the
        native loader's streamed reads): (bytes, first bad entry or -1, what). verify_crcs: an image
        carries no record checksum, so nothing more to check (verify checks the whole structure)."""
        from .. import core_switch as core

        nbytes, bad = core.reader.pread_marked(fds, offsets, lengths, scratch, self.head_marker, self.tail_marker)
        return nbytes, bad, f"record is {self._not_whole()}" if bad >= 0 else ""

    def stream_files(self, paths, offsets, lengths, scratch):
        """stream_records over paths: each file opened, read whole through scratch and closed by one core
        call (GIL released; reader.reopen_files' open, read and close a sample). A file that does not
        open is the OSError naming it."""
        from .. import core_switch as core

        nbytes, bad = core.reader.open_pread_marked(paths, offsets, lengths, scratch, self.head_marker,
                                                    self.tail_marker)
        return nbytes, bad, f"record is {self._not_whole()}" if bad >= 0 else ""

    def _not_whole(self) -> str:
        return (f"not a whole {self.name} image: its first bytes are not {self.head_marker.hex()} or its last are "
                f"not {self.tail_marker.hex()} (truncated or overwritten)")

    def read_samples(self, path, sample_ids):
        """The file's bytes (a uint8 array), start and end markers checked."""
        size = source_size(path)
        name = source_name(path)
        check_sample_ids(name, sample_ids, 1)
        if is_fileobj(path):
            data = read_at(path, name, 0, size)
        else:
            with open(path, "rb") as fh:
                data = fh.read()
        arr = np.frombuffer(data, np.uint8)
        try:
            self.payload_spans(arr, [0], [arr.size])
        except RecordError as exc:
            raise DataError(name, exc.reason) from None
        return [arr for _ in np.asarray(sample_ids).reshape(-1)]

    def payload_of(self, sample) -> np.ndarray:
        """The file's bytes."""
        return np.asarray(sample, np.uint8).reshape(-1)

    # -- checking ---------------------------------------------------------------------------

    def _whole(self, path) -> tuple[bytes, str]:
        name = source_name(path)
        size = source_size(path)
        if is_fileobj(path):
            return read_at(path, name, 0, size), name
        with open(path, "rb") as fh:
            return fh.read(), name

    def check_file(self, path, num_samples, record_bytes):
        """The whole structure (walk), and the size the workload asks for."""
        try:
            data, name = self._whole(path)
            self.walk(data, name)
        except DataError as exc:
            return [error_text(exc)]
        problems = []
        if int(num_samples) != 1:
            problems.append(f"a {self.name} file holds 1 sample, the workload says {num_samples}")
        if len(data) != int(record_bytes):
            problems.append(f"{len(data)} bytes, the workload's record is {int(record_bytes)} bytes")
        return problems

    def probe_file(self, path):
        """One sample of the file's size; the image's dimensions from its header."""
        data, name = self._whole(path)
        dims = self.walk(data, name)
        return FileShape(1, len(data), dims, "uint8", "none")

    def walk(self, data: bytes, name: str) -> tuple:
        """Check the whole structure; return the image's (height, width, channels). DataError naming
        the file and offset of the first problem."""
        raise NotImplementedError
