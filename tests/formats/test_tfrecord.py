"""TFRecord without TensorFlow: framing, Example codec, index, gzip, CRC checks, errors."""
import gzip
import struct

import numpy as np
import pytest

from iogen.errors import DataError
from iogen.formats import make_format
from iogen.formats.base import sample_bytes
from iogen.common.checksum import crc32c
from iogen.formats.example_proto import decode_example, encode_example, image_example_prefix

SEED, STREAM = 3, 9


def write(tmp_path, name="a.tfrecord", n=5, record_bytes=300, **kw):
    fmt = make_format("tfrecord", samples_per_file=n, **kw)
    path = tmp_path / name
    size, crc = fmt.write_file_crc(path, n, record_bytes, SEED, STREAM)
    return fmt, path, size, crc


def test_example_codec_round_trip():
    image = bytes(range(256)) * 3
    assert decode_example(image_example_prefix(len(image), 42) + image) == {"size": [42], "image": [image]}
    # the streaming prefix is exactly what a whole-message encoder produces
    assert image_example_prefix(len(image), 42) + image == encode_example({"size": [42], "image": image})
    mixed = decode_example(encode_example({"f": [1.5, -2.0], "n": [-3, 1 << 40], "s": "abc"}))
    assert mixed == {"f": [1.5, -2.0], "n": [-3, 1 << 40], "s": [b"abc"]}


def test_round_trip_frames_and_payload(tmp_path):
    fmt, path, size, crc = write(tmp_path)
    raw = path.read_bytes()
    assert size == len(raw) and crc == crc32c(raw)
    index = fmt.index_file(path)
    assert index.framing == "tfrecord" and len(index) == 5
    for i in range(5):
        frame = raw[index.offsets[i]:index.offsets[i] + index.lengths[i]]
        (length,) = struct.unpack_from("<Q", frame)
        assert length == index.lengths[i] - 16
        example = decode_example(frame[12:-4])
        assert example["image"] == [sample_bytes(SEED, STREAM, i, 300).tobytes()]
        assert example["size"] == [300]
        # the payload is the tail of the frame's data
        assert frame[-4 - 300:-4] == sample_bytes(SEED, STREAM, i, 300).tobytes()
    records = fmt.read_samples(path, [3, 1])
    assert records == [raw[index.offsets[i] + 12:index.offsets[i] + index.lengths[i] - 4] for i in (3, 1)]
    assert fmt.check_file(path, 5, 300) == []
    assert fmt.check_file(path, 6, 300) == ["5 records, expected 6"]


def test_batched_and_streamed_writers_agree(tmp_path):
    # records larger than a write chunk are streamed piece by piece; small ones are batched
    big = (1 << 20) + 7
    fmt, path, size, crc = write(tmp_path, n=2, record_bytes=big)
    raw = path.read_bytes()
    # the file's CRC joins the records' data CRCs instead of reading the data twice
    assert size == len(raw) and crc == crc32c(raw)
    _, gz, _, gz_crc = write(tmp_path, "big.tfrecord.gz", n=2, record_bytes=big, compression="gzip")
    assert gzip.decompress(gz.read_bytes()) == raw and gz_crc == crc32c(gz.read_bytes())
    index = fmt.index_file(path)
    data = fmt.read_samples(path, [1])[0]
    assert decode_example(data)["image"][0] == sample_bytes(SEED, STREAM, 1, big).tobytes()
    assert index.lengths.tolist() == [len(image_example_prefix(big, big)) + big + 16] * 2
    assert fmt.check_file(path, 2, big) == []


def test_byte_identical_reruns(tmp_path):
    _, a, _, _ = write(tmp_path, "a.tfrecord", compression="gzip")
    _, b, _, _ = write(tmp_path, "b.tfrecord", compression="gzip")
    assert a.read_bytes() == b.read_bytes()


def test_check_read_finds_the_bad_frame(tmp_path):
    fmt, path, _, _ = write(tmp_path)
    index = fmt.index_file(path)
    buf = np.frombuffer(path.read_bytes(), np.uint8).copy()
    assert fmt.check_read(buf, index.offsets, index.lengths) == -1
    buf[index.offsets[2] + 100] ^= 1
    assert fmt.check_read(buf, index.offsets, index.lengths) == 2


def test_gzip_variant(tmp_path):
    fmt, path, size, crc = write(tmp_path, compression="gzip", compression_level=1)
    plain_fmt, plain, _, _ = write(tmp_path, "plain.tfrecord")
    assert gzip.decompress(path.read_bytes()) == plain.read_bytes()
    assert crc == crc32c(path.read_bytes())
    assert fmt.index_file(path) is None and not fmt.byte_addressable
    assert fmt.read_samples(path, [4, 0, 4]) == plain_fmt.read_samples(plain, [4, 0, 4])
    assert fmt.check_file(path, 5, 300) == []
    with pytest.raises(DataError, match="sample 7"):
        fmt.read_samples(path, [7])


def test_corrupt_and_truncated_files_name_path_and_offset(tmp_path):
    fmt, path, size, _ = write(tmp_path)
    frame = size // 5
    raw = bytearray(path.read_bytes())
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(bytes(raw[:frame * 3 + 20]))
    with pytest.raises(DataError) as err:
        fmt.index_file(cut)
    assert err.value.path == str(cut) and err.value.offset == frame * 3
    assert "offset" in fmt.check_file(cut, 5, 300)[0]
    # a flipped length byte: the length CRC catches it at that frame
    bad_len = bytearray(raw)
    bad_len[frame * 2] ^= 0x40
    (tmp_path / "len.tfrecord").write_bytes(bytes(bad_len))
    with pytest.raises(DataError) as err:
        fmt.index_file(tmp_path / "len.tfrecord")
    assert err.value.offset == frame * 2
    # a flipped payload byte: the data CRC catches it when the record is read or checked
    bad_data = bytearray(raw)
    bad_data[frame * 4 + 200] ^= 1
    (tmp_path / "data.tfrecord").write_bytes(bytes(bad_data))
    with pytest.raises(DataError) as err:
        fmt.read_samples(tmp_path / "data.tfrecord", [4])
    assert err.value.offset == frame * 4
    assert fmt.read_samples(tmp_path / "data.tfrecord", [3])  # other records still read
    assert f"offset {frame * 4}" in fmt.check_file(tmp_path / "data.tfrecord", 5, 300)[0]
    with pytest.raises(DataError, match="missing"):
        fmt.read_samples(tmp_path / "nope.tfrecord", [0])


def test_truncated_gzip_is_a_data_error(tmp_path):
    fmt, path, size, _ = write(tmp_path, compression="gzip")
    path.write_bytes(path.read_bytes()[: size // 2])
    with pytest.raises(DataError) as err:
        fmt.read_samples(path, [4])
    assert err.value.path == str(path) and err.value.offset is not None
    assert fmt.check_file(path, 5, 300)


def test_count_frames_of_gzip_streams_in_bounded_memory(tmp_path):
    """A small gzip file of compressible records inflates to far more than it holds: counted as a stream."""
    import tracemalloc

    from iogen.core_switch import tfrecord

    fmt = make_format("tfrecord", samples_per_file=4, compression="gzip")
    data = bytes(16 << 20)  # 16 MiB of zeros per record: 64 MiB decompressed, ~65 KiB compressed
    frame = tfrecord.frame(data)
    path = tmp_path / "zeros.tfrecord.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        for _ in range(4):
            f.write(frame)
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        assert fmt.count_frames(path) == (4, 4 * len(frame))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20  # not the 64 MiB stream, nor one 16 MiB record
    # cut inside its compressed bytes: the error names the file and the decompressed offset
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError) as err:
        fmt.count_frames(path)
    assert err.value.path == str(path) and err.value.offset is not None
