"""TFRecord: framed, serialized tf.train.Example records, written and read without TensorFlow.

A file is a sequence of frames (tensorflow/core/lib/io/record_writer.cc):

    uint64 length (LE) | uint32 masked CRC-32C of the length bytes | data | uint32 masked CRC-32C of data

Each record's data is a tf.train.Example with DLIO's features: `size` (int64, iogen writes the
image's byte count there) and `image` (bytes: the sample's payload). iogen writes `size` first
and `image` last, so the payload is the tail of the data. Files written by TensorFlow or DLIO
(any feature order, any features) are read the same way: the index comes from the framing
alone. `compression: gzip` gzips the whole file, as tf.io.TFRecordOptions("GZIP") does (MLPerf
HPC's CosmoFlow data); such files are decoded by streaming decompression, never indexed.
"""
from __future__ import annotations

import gzip
import io
import os
import struct
import threading
import zlib
from collections import OrderedDict

import numpy as np

from .._core._common import (FRAME_BAD_DATA_CRC, FRAME_BAD_HEADER, FRAME_FOOTER_BYTES, FRAME_HEADER_BYTES,
                             FRAME_OVERHEAD_BYTES, MASK_DELTA)
from ..errors import DataError
from .base import (CHUNK_BYTES, FileIndex, FileShape, Format, RecordError, check_sample_ids, error_text,
                   fill_random, file_size_or_error, is_fileobj, payload_chunks, read_at, source_name, source_size)
from ..common.checksum import crc32c, crc_combine
from .example_proto import ExampleDecodeError, decode_example, image_example_prefix, image_span

# The frame layout is defined once, beside the core that scans it.
HEADER_BYTES = FRAME_HEADER_BYTES
FOOTER_BYTES = FRAME_FOOTER_BYTES
FRAME_OVERHEAD = FRAME_OVERHEAD_BYTES
# Index arrays kept for read_samples, in records (16 bytes each): bounds the cache at ~64 MiB.
_INDEX_CACHE_RECORDS = 4 << 20
# gzip files up to this size are inflated in one call (zlib releases the GIL), else streamed.
_INFLATE_WHOLE_BYTES = 64 << 20
# Below this, images are filled many per call and copied into their frames.
_SMALL_RECORD_BYTES = 64 << 10
_NO_BYTES = np.empty(0, np.uint8)
# What read_frames found wrong with a frame, as the loaders say it (with the file and offset)
_FRAME_PROBLEMS = {
    FRAME_BAD_DATA_CRC: "record checksum mismatch",
    FRAME_BAD_HEADER: "record header does not announce the length the file's index holds "
                      "(or its CRC does not match): the file changed since it was indexed",
}


def _tf():
    """The TFRecord mechanism of the core iogen.core_switch chose (compiled, or the twin knowingly)."""
    from .. import core_switch as core

    return core.tfrecord


def _crc():
    """The CRC-32C of the core iogen.core_switch chose."""
    from .. import core_switch as core

    return core.crc


def _framing_error():
    from ..errors import FramingError  # one class shared by both cores

    return FramingError


def _mask(crcs: np.ndarray) -> np.ndarray:
    """TFRecord's CRC mask, vectorised: ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32."""
    c = crcs.astype(np.uint64)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + MASK_DELTA & 0xFFFFFFFF).astype("<u4")


class _Sink:
    """Writes a file through an optional gzip compressor, keeping its size and CRC-32C."""

    def __init__(self, path, gzip_level=None):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.crc = 0
        self.size = 0
        # wbits 31: a gzip stream with a fixed header (no name, mtime 0), so reruns are identical
        self.z = zlib.compressobj(gzip_level, zlib.DEFLATED, 31) if gzip_level is not None else None

    def write(self, data) -> None:
        """Append bytes (compressed first when gzip is on)."""
        if self.z is not None:
            data = self.z.compress(data)
            if not data:
                return
        self._out(data)

    def _out(self, data) -> None:
        view = memoryview(data).cast("B")
        self.crc = crc32c(view, self.crc)
        self.size += len(view)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def write_data(self, data) -> None:
        """Append bytes to a plain file leaving the CRC to join_crc (the caller CRCs them itself)."""
        view = memoryview(data).cast("B")
        self.size += len(view)
        while view:
            view = view[os.write(self.fd, view):]

    def join_crc(self, crc: int, nbytes: int) -> None:
        """Extend the file's CRC with that of the last nbytes passed to write_data."""
        self.crc = crc_combine(self.crc, crc, nbytes)

    def close(self) -> None:
        """Flush the compressor and close the file."""
        try:
            if self.z is not None:
                self._out(self.z.flush())
        finally:
            os.close(self.fd)


class _ImageLayouts:
    """The Example bytes around the image, by data length, of records already parsed.

    iogen's and DLIO's writers give every record of one size the same features in the same
    order, so once a record of a length is parsed, a later one whose bytes before and after the
    image equal it is as well-formed and has its image at the same place: one vectorised
    compare per batch instead of a parse per record.
    """

    MAX_ENTRIES = 1024

    def __init__(self):
        self.known = {}  # data length -> (head uint8 array, tail uint8 array)
        self._version = 0  # bumped at every change of `known`
        self._table = (-1, None)  # (version, the table stream_frames takes) of the last table()

    def table(self):
        """The known layouts as core.tfrecord.stream_frames takes them: (data lengths ascending,
        heads, head offsets, tails, tail offsets); rebuilt only after `known` changed."""
        version, table = self._table
        if version == self._version:
            return table
        version = self._version  # read first: a change while building makes the next call rebuild
        items = sorted(self.known.items())
        lens = np.array([length for length, _ in items], np.int64)
        head_at = np.zeros(len(items) + 1, np.int64)
        tail_at = np.zeros(len(items) + 1, np.int64)
        np.cumsum([h.size for _, (h, _) in items], out=head_at[1:])
        np.cumsum([t.size for _, (_, t) in items], out=tail_at[1:])
        heads = np.concatenate([h for _, (h, _) in items] + [_NO_BYTES])
        tails = np.concatenate([t for _, (_, t) in items] + [_NO_BYTES])
        table = (lens, heads, head_at, tails, tail_at)
        self._table = (version, table)
        return table

    def spans(self, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        """(image starts, image lengths) of the Examples buf[starts[i]:starts[i] + lengths[i]]."""
        match = _tf().match_layout
        out_s = np.empty(starts.size, np.int64)
        out_l = np.empty(starts.size, np.int64)
        same = starts.size and lengths.min() == lengths.max()
        for length in ([int(lengths[0])] if same else np.unique(lengths).tolist()):
            rows = np.arange(starts.size) if same else np.flatnonzero(lengths == length)
            at = np.ascontiguousarray(starts[rows])
            k = 0
            while k < rows.size:
                hit = self.known.get(length)
                if hit is not None:  # the core compares every record with the known layout, GIL released
                    head, tail = hit
                    bad = match(buf, at, length, head, tail, k)
                    stop = rows.size if bad < 0 else bad
                    out_s[rows[k:stop]] = at[k:stop] + head.size
                    out_l[rows[k:stop]] = length - head.size - tail.size
                    k = stop
                    if k == rows.size:
                        break
                # the first record that does not match is parsed; its layout is tried on the rest
                i, s0 = int(rows[k]), int(at[k])
                try:
                    a, b = image_span(buf[s0:s0 + length])
                except ExampleDecodeError as exc:
                    raise RecordError(i, f"not a tf.train.Example with an 'image' bytes feature: {exc}") from None
                out_s[i], out_l[i] = s0 + a, b - a
                if len(self.known) >= self.MAX_ENTRIES:
                    self.known.clear()
                self.known[length] = (buf[s0:s0 + a].copy(), buf[s0 + b:s0 + length].copy())
                self._version += 1
                k += 1
        return out_s, out_l


def _read_upto(f, nbytes: int) -> bytes:
    """Up to nbytes of stream f, read in pieces: a corrupt length (2**60, 2**63) costs only what is there."""
    if nbytes <= CHUNK_BYTES:
        return f.read(nbytes)
    parts, left = [], nbytes
    while left:
        part = f.read(min(left, CHUNK_BYTES))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


class TFRecordFormat(Format):
    """TFRecord files of DLIO-style tf.train.Example records; optional whole-file gzip."""

    name = "tfrecord"
    suffix = "tfrecord"
    tfdata_native = True
    frame_overhead_bytes = FRAME_OVERHEAD
    payload_feature = "image"

    def __init__(self, **kw):
        super().__init__(**kw)
        self._layouts = _ImageLayouts()
        self._index_cache: OrderedDict = OrderedDict()
        self._cached_records = 0
        self._lock = threading.Lock()

    def __getstate__(self):  # picklable for process pools: the cache and lock stay behind
        state = dict(self.__dict__)
        state.update(_index_cache=OrderedDict(), _cached_records=0, _lock=None, _layouts=_ImageLayouts())
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def byte_addressable(self) -> bool:
        """Plain files are indexed by their framing; gzip files are not byte-addressable."""
        return self.compression == "none"

    def _gzip_level(self):
        if self.compression != "gzip":
            return None
        return 6 if self.compression_level is None else int(self.compression_level)

    # -- writing ----------------------------------------------------------------------------

    def write_file_crc(self, path, num_samples, record_bytes, seed, stream):
        """Stream the records; small ones are framed many at a time in one numpy buffer."""
        tf, crc_core = _tf(), _crc()
        n, rb = int(num_samples), int(record_bytes)
        prefix = image_example_prefix(rb, rb)
        data_len = len(prefix) + rb
        header = tf.write_frame_header(data_len)  # the same for every record of the file
        prefix_crc = crc_core.crc32c(prefix)
        frame_bytes = FRAME_OVERHEAD + data_len
        sink = _Sink(path, self._gzip_level())
        try:
            if frame_bytes <= CHUNK_BYTES:
                self._write_batched(sink, tf, n, rb, seed, stream, header + prefix)
            else:
                buf = np.empty(CHUNK_BYTES, np.uint8)
                # Plain files: a record's data CRC is also the CRC of those bytes of the file, so the
                # file's CRC joins it instead of reading the data a second time.
                write = sink.write_data if sink.z is None else sink.write
                for j in range(n):
                    sink.write(header)
                    write(prefix)
                    crc = prefix_crc
                    for chunk in payload_chunks(seed, stream, j * rb, rb, buf):
                        crc = crc_core.crc32c(chunk, crc)
                        write(chunk)
                    if sink.z is None:
                        sink.join_crc(crc, data_len)
                    sink.write(_mask(np.array([crc])).tobytes())
        finally:
            sink.close()
        return sink.size, sink.crc

    @staticmethod
    def _write_batched(sink, tf, n, rb, seed, stream, head: bytes) -> None:
        # k frames are assembled as rows of a (k, frame) array: the shared header and Example
        # prefix are set once; images are filled (sample j's payload starts at j * rb in the
        # content stream), then the core writes every row's CRC into its last 4 bytes in one
        # call. Per-call overhead (~1 us) matters for small records, so those are filled k at a
        # time and copied in.
        h = len(head)
        frame_bytes = h + rb + FOOTER_BYTES
        k = max(1, min(n, CHUNK_BYTES // frame_bytes))
        out = np.empty((k, frame_bytes), np.uint8)
        out[:, :h] = np.frombuffer(head, np.uint8)
        flat = memoryview(out.reshape(-1))
        images = [flat[r * frame_bytes + h:r * frame_bytes + h + rb] for r in range(k)]
        small = rb < _SMALL_RECORD_BYTES
        staging = np.empty(k * rb if small else 0, np.uint8)
        for j0 in range(0, n, k):
            m = min(k, n - j0)
            if small:
                fill_random(staging[:m * rb], seed, stream, j0 * rb)
                out[:m, h:h + rb] = staging[:m * rb].reshape(m, rb)
            else:
                for r in range(m):
                    fill_random(images[r], seed, stream, (j0 + r) * rb)
            tf.set_data_crcs(flat, frame_bytes, m)
            sink.write(out[:m].reshape(-1))

    # -- indexing ---------------------------------------------------------------------------

    def _scan(self, path) -> tuple[np.ndarray, np.ndarray, int]:
        """(data offsets, data lengths, file size) from the framing; errors name path and offset."""
        if is_fileobj(path):
            return self._scan_headers(path)
        size = file_size_or_error(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            offsets, lengths = _tf().index_records(fd, size)
        except _framing_error() as exc:
            raise DataError(path, exc.reason, exc.offset) from None
        finally:
            os.close(fd)
        return np.asarray(offsets, np.int64), np.asarray(lengths, np.int64), size

    @staticmethod
    def _scan_headers(fobj):
        """_scan of a file object (a remote object): one read of each frame's header, in order."""
        crc_core, name, size = _crc(), source_name(fobj), source_size(fobj)
        offsets, lengths = [], []
        pos = 0
        while pos < size:
            if size - pos < HEADER_BYTES:
                raise DataError(name, "truncated record header", pos)
            header = read_at(fobj, name, pos, HEADER_BYTES)
            length, length_crc = struct.unpack("<QI", header)
            if crc_core.masked_crc32c(header[:8]) != length_crc:
                raise DataError(name, "record length CRC mismatch", pos)
            if length > size - pos - FRAME_OVERHEAD:
                raise DataError(name, f"record of {length} bytes cut short (truncated?)", pos)
            offsets.append(pos + HEADER_BYTES)
            lengths.append(length)
            pos += FRAME_OVERHEAD + length
        return np.array(offsets, np.int64), np.array(lengths, np.int64), size

    def fixed_index(self, num_samples, record_bytes):
        """Plain files of iogen's records: every frame holds the same Example bytes around an image
        of record_bytes, so frame i starts at i * frame bytes."""
        if not self.byte_addressable:
            return None
        n, rb = int(num_samples), int(record_bytes)
        frame = FRAME_OVERHEAD + len(image_example_prefix(rb, rb)) + rb
        return FileIndex(np.arange(n, dtype=np.int64) * frame, np.full(n, frame, np.int64), "tfrecord", n * frame)

    def index_file(self, path):
        """Whole frames (header, data, data CRC): see FileIndex; None for gzip files."""
        if not self.byte_addressable:
            return None
        offsets, lengths, size = self._scan(path)
        return FileIndex(offsets - HEADER_BYTES, lengths + FRAME_OVERHEAD, "tfrecord", size)

    def count_records(self, path) -> int:
        """Records in the file, its whole framing checked (lengths, length CRCs, no frame cut short).

        What a framework's own TFRecord reader may be handed safely: tf.data trusts a length
        with a valid CRC and crashes on 2**60. Plain files: the index scan (headers only);
        gzip files: the decompressed stream's headers, the data skipped, not kept.
        """
        return self.count_frames(path)[0]

    def count_frames(self, path) -> tuple[int, int]:
        """(records, offset where the last one ends: the file's size, or in a gzip file the
        decompressed stream's), the whole framing checked as count_records does."""
        if self.byte_addressable:
            offsets, _, size = self._scan(path)
            return int(offsets.size), int(size)
        file_size_or_error(path)
        # streamed whatever the file's size: a small file of compressible records may inflate to GiBs
        frames, records = self._frames_gzip(path, stream=True), 0
        while True:
            try:
                next(frames)
            except StopIteration as end:  # the generator returns the stream's end offset
                return records, int(end.value)
            records += 1

    # -- the payload: the `image` feature's bytes ---------------------------------------------

    @property
    def payload_dtype(self) -> np.dtype:
        """An image is raw bytes, whatever record_element_type says (tf.io.decode_raw to uint8)."""
        return np.dtype(np.uint8)

    @property
    def payload_dims(self):
        """Images are 1-D bytes."""
        return None

    def payload_spans(self, buf, starts, lengths):
        """The image of each whole frame read to buf[starts[i]:starts[i] + lengths[i]], its Example parsed.

        A record whose CRC is valid but whose data is not a tf.train.Example with an `image`
        bytes feature is a RecordError, as tf.io.parse_single_example fails on it.
        """
        buf = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
        starts = np.asarray(starts, np.int64)
        lengths = np.asarray(lengths, np.int64)
        return self._layouts.spans(buf.reshape(-1).view(np.uint8), starts + HEADER_BYTES, lengths - FRAME_OVERHEAD)

    def payload_of(self, sample) -> np.ndarray:
        """The image of one record's data (a read_samples result)."""
        data = np.frombuffer(sample, np.uint8)
        s, e = self._layouts.spans(data, np.zeros(1, np.int64), np.array([data.size], np.int64))
        return data[int(s[0]):int(s[0] + e[0])]

    def check_read(self, buf, buf_offsets, lengths) -> int:
        """Check the data CRCs of whole frames read into buf; -1 when all match, else the first bad entry."""
        starts = np.asarray(buf_offsets, np.int64)
        lens = np.asarray(lengths, np.int64)
        return int(_tf().check_data_crcs(buf, starts + HEADER_BYTES, lens - FRAME_OVERHEAD,
                                         starts + lens - FOOTER_BYTES))

    def pread_checked(self, fds, offsets, lengths, buf, buf_offsets):
        """Read whole frames (index_file ranges) and check each data CRC as it lands: (bytes, first bad or -1)."""
        return _tf().pread_frames(fds, offsets, lengths, buf, buf_offsets)

    def pread_records(self, fds, offsets, lengths, buf, buf_offsets, verify_crcs: bool):
        """Read whole frames (index_file ranges), adjacent ones as runs, everything checked as it lands.

        One core call (GIL released) reads the frames and checks each header against the index,
        each data CRC (when verify_crcs) and each Example against the layout already parsed for
        its length; records it could not match are parsed here (payload_spans), so a record
        that is not an Example with an image raises RecordError as payload_spans does.
        Returns (bytes, first entry with a bad header or data CRC or -1, what is wrong with it).
        """
        lengths = np.asarray(lengths, np.int64)
        layout = None
        if lengths.size and lengths.min() == lengths.max():
            data_length = int(lengths[0]) - FRAME_OVERHEAD
            layout = self._layouts.known.get(data_length)
        head, tail = layout if layout is not None else (_NO_BYTES, _NO_BYTES)
        nbytes, bad, what, unmatched = _tf().read_frames(
            fds, offsets, lengths, buf, buf_offsets, bool(verify_crcs),
            data_length if layout is not None else -1, head, tail)
        if bad >= 0:
            return nbytes, bad, _FRAME_PROBLEMS[what]
        if unmatched >= 0:  # a new layout (first batch, or another record size): parse from there
            starts = np.asarray(buf_offsets, np.int64)
            try:
                self.payload_spans(buf, starts[unmatched:], lengths[unmatched:])
            except RecordError as exc:
                raise RecordError(exc.index + unmatched, exc.reason) from None
        return nbytes, -1, ""

    def stream_records(self, fds, offsets, lengths, scratch, verify_crcs: bool):
        """Read whole frames (index_file ranges) through scratch, a reused buffer that stays in cache,
        checking everything as it lands; nothing of them is kept: (bytes, first bad entry or -1, what).

        The checks are pread_records': each header against the index, each data CRC (when
        verify_crcs), each Example against the layout of its length (core.tfrecord.stream_frames,
        GIL released, every layout known so far in one table). A record of a length no layout
        covers yet (or whose bytes differ) ends the core call after the read that holds it: the
        records of that read from it on are parsed here from the scratch (payload_spans: a record
        that is not an Example with an image raises RecordError) and the next call goes on after
        them. Every frame must fit in scratch; bytes: each frame's, read once.
        """
        offsets = np.asarray(offsets, np.int64)
        lengths = np.asarray(lengths, np.int64)
        stream = _tf().stream_frames
        first, total = 0, 0
        while True:
            nbytes, bad, what, unmatched, held, first = stream(fds, offsets, lengths, scratch, first,
                                                               bool(verify_crcs), *self._layouts.table())
            total += nbytes
            if bad >= 0:
                return total, bad, _FRAME_PROBLEMS[what]
            if unmatched < 0:
                return total, -1, ""
            # a new layout (a record size not seen yet, or other bytes): its read's records from
            # it on lie one after the other in the scratch; parsed (or matched), then known
            starts = held + offsets[unmatched:first] - offsets[unmatched]
            try:
                self.payload_spans(scratch, starts, lengths[unmatched:first])
            except RecordError as exc:
                raise RecordError(unmatched + exc.index, exc.reason) from None

    def _cached_index(self, path):
        st = os.stat(path)
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._index_cache.get(key)
            if hit is not None:
                self._index_cache.move_to_end(key)
                return hit
        offsets, lengths, _ = self._scan(path)
        with self._lock:
            self._index_cache[key] = (offsets, lengths)
            self._cached_records += offsets.size
            while self._cached_records > _INDEX_CACHE_RECORDS and len(self._index_cache) > 1:
                _, (old, _) = self._index_cache.popitem(last=False)
                self._cached_records -= old.size
        return offsets, lengths

    # -- decoding ---------------------------------------------------------------------------

    def read_samples(self, path, sample_ids):
        """Each asked record's data (a serialized tf.train.Example) as bytes, CRC-checked.

        path may be a file object (a remote object): a gzip one is read whole, in order."""
        source_size(path)
        if self.compression == "gzip":
            return self._read_gzip(path, sample_ids)
        if is_fileobj(path):
            index = self.index_file(path)
            ids = check_sample_ids(path.name, sample_ids, len(index))
            out = []
            for i in ids:
                start, n = int(index.offsets[i]), int(index.lengths[i])
                raw = read_at(path, path.name, start, n)
                if self.check_read(np.frombuffer(raw, np.uint8), [0], [n]) >= 0:
                    raise DataError(path.name, f"record {i}: data CRC mismatch", start)
                out.append(raw[HEADER_BYTES:n - FOOTER_BYTES])
            return out
        offsets, lengths = self._cached_index(path)
        ids = check_sample_ids(path, sample_ids, offsets.size)
        crc_core = _crc()
        out = []
        fd = os.open(path, os.O_RDONLY)
        try:
            for i in ids:
                start, n = int(offsets[i]), int(lengths[i])
                raw = os.pread(fd, n + FOOTER_BYTES, start)
                if len(raw) != n + FOOTER_BYTES:
                    raise DataError(path, "record cut short (file truncated?)", start + len(raw))
                data = raw[:n]
                if crc_core.masked_crc32c(data) != struct.unpack_from("<I", raw, n)[0]:
                    raise DataError(path, f"record {i}: data CRC mismatch", start - HEADER_BYTES)
                out.append(data)
        finally:
            os.close(fd)
        return out

    @staticmethod
    def _gunzipped(path, stream: bool = False):
        """A readable decompressed stream: inflated in one GIL-free call when the file is small.

        stream: always decompressed as read (memory bounded by the reads, not by the file).
        A file object (a remote object) is read from its start to its end, as tf.data's zlib
        stream reader reads a gzip file: it cannot start anywhere else."""
        if stream or source_size(path) > _INFLATE_WHOLE_BYTES:
            if is_fileobj(path):  # read in the object's parts, not gzip's small reads
                return gzip.GzipFile(fileobj=io.BufferedReader(path, getattr(path, "part_bytes", CHUNK_BYTES)))
            return gzip.open(path, "rb")
        if is_fileobj(path):
            path.seek(0)
            raw = path.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
        parts = []
        while raw:  # a gzip file may hold several members back to back
            z = zlib.decompressobj(zlib.MAX_WBITS | 16)
            parts.append(z.decompress(raw))
            if not z.eof:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
            raw = z.unused_data
        return io.BytesIO(b"".join(parts))

    def _frames_gzip(self, path, want=None, check_all=False, stream=False):
        """Yield (record number, decompressed frame offset, data or None) streaming a gzip file.

        stream: never inflate the whole file at once (_gunzipped); data not kept is skipped in
        CHUNK_BYTES reads, so memory stays bounded whatever the file holds."""
        crc_core = _crc()
        name = source_name(path)
        pos = 0
        last = max(want) if want else None
        try:
            with self._gunzipped(path, stream) as f:
                i = 0
                while last is None or i <= last:
                    header = f.read(HEADER_BYTES)
                    if not header:
                        return pos  # the decompressed stream's end
                    if len(header) < HEADER_BYTES:
                        raise DataError(name, "truncated record header (in the decompressed stream)", pos)
                    length, length_crc = struct.unpack("<QI", header)
                    if crc_core.masked_crc32c(header[:8]) != length_crc:
                        raise DataError(name, "record length CRC mismatch (in the decompressed stream)", pos)
                    keep = check_all or (want is not None and i in want)
                    if keep:
                        raw = _read_upto(f, length + FOOTER_BYTES)
                        if len(raw) != length + FOOTER_BYTES:
                            raise DataError(name, "truncated record (in the decompressed stream)", pos)
                        data = raw[:length]
                        if crc_core.masked_crc32c(data) != struct.unpack_from("<I", raw, length)[0]:
                            raise DataError(name, f"record {i}: data CRC mismatch (in the decompressed stream)", pos)
                    else:
                        data, left = None, length + FOOTER_BYTES
                        while left:
                            got = len(f.read(min(left, CHUNK_BYTES)))
                            if not got:
                                raise DataError(name, "truncated record (in the decompressed stream)", pos)
                            left -= got
                    yield i, pos, data
                    pos += FRAME_OVERHEAD + length
                    i += 1
        except (EOFError, OSError, zlib.error) as exc:
            raise DataError(name, f"gzip stream is corrupt or cut short ({exc}); decompressed "
                                  f"offset {pos}", pos) from None

    def _read_gzip(self, path, sample_ids):
        name = source_name(path)
        ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
        if ids.size and ids.min() < 0:
            raise DataError(name, f"sample {int(ids.min())} asked for")
        want = set(int(i) for i in ids)
        found = {i: data for i, _, data in self._frames_gzip(path, want) if i in want}
        missing = want - set(found)
        if missing:
            raise DataError(name, f"sample {min(missing)} asked for, the file holds {len(found) and max(found) + 1 or 0}"
                                  " or fewer records")
        return [found[int(i)] for i in ids]

    # -- checking ---------------------------------------------------------------------------

    def check_file(self, path, num_samples, record_bytes):
        """Framing, both CRCs and the Example of every record, the record count, and the first Example's image."""
        n, rb = int(num_samples), int(record_bytes)
        data_len = len(image_example_prefix(rb, rb)) + rb
        try:
            file_size_or_error(path)
            if self.compression == "gzip":
                lengths, first = [], None
                for i, pos, data in self._frames_gzip(path, check_all=True):
                    lengths.append(len(data))
                    first = data if first is None else first
                    try:
                        self.payload_of(data)
                    except RecordError as exc:
                        raise DataError(path, f"record {i} is {exc.reason} (in the decompressed stream)", pos) from None
                lengths = np.array(lengths, np.int64)
            else:
                offsets, lengths, _ = self._scan(path)
                self._check_data_crcs(path, offsets, lengths)
                first = None
                if offsets.size:
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        first = os.pread(fd, int(lengths[0]), int(offsets[0]))
                    finally:
                        os.close(fd)
        except DataError as exc:
            return [error_text(exc)]
        problems = []
        if lengths.size != n:
            problems.append(f"{lengths.size} records, expected {n}")
        bad = np.flatnonzero(lengths != data_len)
        if bad.size:
            problems.append(f"record {int(bad[0])} holds {int(lengths[bad[0]])} data bytes, expected {data_len}")
        if first is not None:
            try:
                example = decode_example(first)
                image = example.get("image") or [b""]
                if not isinstance(image[0], bytes):
                    problems.append("record 0: feature 'image' holds numbers, not bytes")
                elif len(image[0]) != rb:
                    problems.append(f"record 0: image of {len(image[0])} bytes, expected {rb}")
            except ExampleDecodeError as exc:
                problems.append(f"record 0 is not a tf.train.Example: {exc}")
        return problems

    def probe_file(self, path):
        """Records counted from the framing (no data CRCs); record 0's `image` gives the record size.

        A gzip file (found by its magic bytes, whatever the workload says) is counted by
        streaming decompression: the whole file is inflated.
        """
        file_size_or_error(path)
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        if gz:
            count, first = 0, None
            for i, _, data in self._frames_gzip(path, check_all=True):
                first = data if i == 0 else first
                count = i + 1
        else:
            offsets, lengths, _ = self._scan(path)
            count, first = int(offsets.size), None
            if count:
                fd = os.open(path, os.O_RDONLY)
                try:
                    first = os.pread(fd, int(lengths[0]), int(offsets[0]))
                finally:
                    os.close(fd)
        record_bytes = 0
        if first is not None:
            try:
                image = decode_example(first).get("image") or [first]
                record_bytes = len(image[0] if isinstance(image[0], bytes) else first)
            except ExampleDecodeError:
                record_bytes = len(first)
        return FileShape(count, record_bytes, None, None, "gzip" if gz else "none")

    def _check_data_crcs(self, path, offsets, lengths) -> None:
        """Read the file once, in spans of whole frames, checking every record's data CRC and Example.

        Records over 8 MiB are CRC-checked piece by piece and their Example is not parsed.
        """
        tf, crc_core = _tf(), _crc()
        starts = offsets - HEADER_BYTES
        ends = offsets + lengths + FOOTER_BYTES
        fd = os.open(path, os.O_RDONLY)
        try:
            i = 0
            while i < offsets.size:
                if ends[i] - starts[i] > 8 * CHUNK_BYTES:  # a big record: CRC it piece by piece
                    crc, pos, end = 0, int(offsets[i]), int(offsets[i] + lengths[i])
                    while pos < end:
                        piece = os.pread(fd, min(8 * CHUNK_BYTES, end - pos), pos)
                        crc = crc_core.crc32c(piece, crc)
                        pos += len(piece)
                    stored = struct.unpack("<I", os.pread(fd, FOOTER_BYTES, end))[0]
                    if int(_mask(np.array([crc]))[0]) != stored:
                        raise DataError(path, f"record {i}: data CRC mismatch", int(starts[i]))
                    i += 1
                    continue
                j = int(np.searchsorted(ends, starts[i] + 8 * CHUNK_BYTES, side="right"))
                j = max(j, i + 1)
                span = os.pread(fd, int(ends[j - 1] - starts[i]), int(starts[i]))
                rel = starts[i:j] - starts[i]
                bad = tf.check_data_crcs(span, rel + HEADER_BYTES, lengths[i:j],
                                         rel + HEADER_BYTES + lengths[i:j])
                if bad >= 0:
                    raise DataError(path, f"record {i + bad}: data CRC mismatch", int(starts[i + bad]))
                try:  # every record's Example parses, as a reader needs it to
                    self._layouts.spans(np.frombuffer(span, np.uint8), rel + HEADER_BYTES, lengths[i:j])
                except RecordError as exc:
                    raise DataError(path, f"record {i + exc.index} is {exc.reason}", int(starts[i + exc.index])) from None
                i = j
        finally:
            os.close(fd)
