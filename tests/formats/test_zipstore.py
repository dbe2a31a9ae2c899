"""NPZ's struct-built stored archives: the same bytes as Python's zipfile writes, to the byte."""
import struct
import zipfile
import zlib

import numpy as np
import pytest

from iogen.formats import make_format, zipstore
from iogen.formats.base import CHUNK_BYTES, payload_chunks
from iogen.common.checksum import crc32c
from iogen.formats.npz import _WHOLE_FILE_BYTES, _align_extra, _member_info, npy_header

SEED, STREAM = 23, 4


def zipfile_npz(path, shape, dtype, seed, stream):
    """The stored NPZ writer iogen had before zipstore: zipfile with force_zip64, x page-aligned."""
    header = npy_header(shape, dtype)
    data_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    x_info = _member_info("x.npy", zipfile.ZIP_STORED, None)
    x_info.extra = _align_extra("x.npy", len(header))
    buf = np.empty(CHUNK_BYTES, np.uint8)
    with zipfile.ZipFile(path, "w") as zf:
        with zf.open(x_info, "w", force_zip64=True) as out:
            out.write(header)
            for chunk in payload_chunks(seed, stream, 0, data_bytes, buf):
                out.write(chunk)
        x_info.extra = b""  # the central directory carries no padding
        labels = np.zeros(shape[0], np.int64)
        with zf.open(_member_info("y.npy", zipfile.ZIP_STORED, None), "w", force_zip64=True) as out:
            out.write(npy_header(labels.shape, labels.dtype))
            out.write(labels.tobytes())


@pytest.mark.parametrize("n, record_bytes, dims, element", [
    (1, 112_640, None, "uint8"),        # one ImageNet-like sample: written whole
    (7, 5_000, None, "uint8"),
    (0, 4_096, None, "uint8"),          # no samples at all
    (3, 2_048, [16, 32], "float32"),    # record_dims: x is (3, 16, 32)
    (3, 3_000_000, None, "uint8"),      # over _WHOLE_FILE_BYTES: streamed, header patched after
])
def test_npz_writer_matches_zipfile_byte_for_byte(tmp_path, n, record_bytes, dims, element):
    fmt = make_format("npz", samples_per_file=n, record_dims=dims, record_dtype=element)
    ours, ref = tmp_path / "ours.npz", tmp_path / "ref.npz"
    size, crc = fmt.write_file_crc(ours, n, record_bytes, SEED, STREAM)
    zipfile_npz(ref, (n,) + fmt.record_shape(record_bytes), fmt.record_dtype, SEED, STREAM)
    raw = ours.read_bytes()
    assert raw == ref.read_bytes()
    assert size == len(raw) and crc == crc32c(raw)
    assert (len(raw) > _WHOLE_FILE_BYTES) == (n * record_bytes > 4 << 20)
    with zipfile.ZipFile(ours) as zf:
        assert zf.testzip() is None  # every member's CRC-32 is right


class _SparseSink:
    """A seekable file for zipfile that keeps what is written in pieces under 1 MiB (headers)."""

    def __init__(self):
        self.pos, self.pieces = 0, {}

    def tell(self):
        return self.pos

    def seek(self, pos, whence=0):
        self.pos = pos
        return pos

    def write(self, data):
        n = memoryview(data).nbytes
        if n < 1 << 20:
            self.pieces[self.pos] = bytes(data)
        self.pos += n
        return n

    def flush(self):
        pass


@pytest.mark.slow
def test_archive_past_2_gib_has_zipfile_zip64_directory_and_end_records():
    """Sizes and offsets over 2**31 - 1 take zipfile's zip64 fields in the central directory."""
    body_bytes = (1 << 31) + 12_345
    head = npy_header((body_bytes,), np.uint8)
    y = npy_header((1,), np.int64) + bytes(8)
    sink, zeros = _SparseSink(), memoryview(bytes(64 << 20))
    x_info = _member_info("x.npy", zipfile.ZIP_STORED, None)
    x_info.extra = _align_extra("x.npy", len(head))
    with zipfile.ZipFile(sink, "w") as zf:
        with zf.open(x_info, "w", force_zip64=True) as out:
            out.write(head)
            left = body_bytes
            while left:
                left -= out.write(zeros[:min(left, len(zeros))])
        x_info.extra = b""
        with zf.open(_member_info("y.npy", zipfile.ZIP_STORED, None), "w", force_zip64=True) as out:
            out.write(y)
    layout = zipstore.StoredLayout(b"x.npy", head, body_bytes, _align_extra("x.npy", len(head)),
                                   [(b"y.npy", y, zlib.crc32(y))])
    assert sink.pos == layout.file_bytes
    x_crc = x_info.CRC
    tail_at = len(layout.head) + body_bytes
    tail = bytearray(layout.tail)
    struct.pack_into("<I", tail, layout.tail_crc_at, x_crc)
    written = b"".join(v for k, v in sorted(sink.pieces.items()) if k >= tail_at)
    assert written == bytes(tail)
    assert b"PK\x06\x06" in written  # the zip64 end record is there
    head_bytes = bytearray(layout.head[:layout.header_bytes])
    struct.pack_into("<I", head_bytes, zipstore.LOCAL_CRC_AT, x_crc)
    assert sink.pieces[0] == bytes(head_bytes)  # the local header zipfile rewrote at close
