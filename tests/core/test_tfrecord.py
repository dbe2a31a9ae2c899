"""tfrecord: CRC-32C, frames, indexing and batch CRC checks on both cores (and against TensorFlow)."""
import os
import struct

import numpy as np
import pytest

# RFC 3720 (iSCSI) appendix B.4 test vectors for CRC-32C, plus the common check value.
KNOWN_CRCS = [
    (b"123456789", 0xE3069283),
    (b"", 0),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


def random_bytes(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("data, expected", KNOWN_CRCS)
def test_crc32c_known_vectors(core, data, expected):
    assert core.crc.crc32c(data) == expected


@pytest.mark.parametrize("data, expected", KNOWN_CRCS)
def test_software_path_known_vectors(cython_core, data, expected):
    assert cython_core.crc.crc32c_software(data) == expected


def test_crc32c_extends(core):
    data = random_bytes(1_000, seed=1)
    for cut in (0, 1, 7, 500, 999, 1_000):
        assert core.crc.crc32c(data[cut:], core.crc.crc32c(data[:cut])) == core.crc.crc32c(data)


@pytest.mark.parametrize("nbytes", [1, 7, 8, 9, 255, 767, 768, 769, 8_191, 24_575, 24_576, 24_577, 60_001])
@pytest.mark.parametrize("start", [0, 1, 5])
def test_hardware_and_software_paths_agree(cython_core, nbytes, start):
    # Covers the three-stream long and short blocks, their joins, and unaligned heads and tails.
    data = memoryview(random_bytes(nbytes + start, seed=nbytes))[start:]
    crc_core = cython_core.crc
    assert crc_core.crc32c(data) == crc_core.crc32c_software(data)
    assert crc_core.crc32c(data, 0x12345678) == crc_core.crc32c_software(data, 0x12345678)


def test_implementations_agree_on_random_data(cython_core, python_core):
    for n in (3, 100, 3_000):
        data = random_bytes(n, seed=n)
        assert cython_core.crc.crc32c(data) == python_core.crc.crc32c(data)
        assert cython_core.crc.masked_crc32c(data) == python_core.crc.masked_crc32c(data)


def test_crc32c_reads_any_contiguous_buffer(core):
    arr = np.arange(10, dtype=np.uint32)
    expected = core.crc.crc32c(arr.tobytes())
    assert core.crc.crc32c(arr) == expected
    assert core.crc.crc32c(bytearray(arr.tobytes())) == expected
    assert core.crc.crc32c(memoryview(arr.tobytes())) == expected


@pytest.mark.parametrize("crc", [-1, 2**32, "x"])
def test_crc32c_rejects_bad_crc(core, crc):
    with pytest.raises((ValueError, TypeError)):
        core.crc.crc32c(b"abc", crc)


def test_masked_crc_formula(core):
    crc = core.crc.crc32c(b"123456789")
    expected = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert core.crc.masked_crc32c(b"123456789") == expected


def test_has_hw_crc32c_is_a_bool(core):
    assert isinstance(core.crc.has_hw_crc32c(), bool)
    if core.name == "python":
        assert core.crc.has_hw_crc32c() is False


def test_frame_layout(core):
    data = b"hello tfrecord"
    framed = core.tfrecord.frame(data)
    header = core.tfrecord.write_frame_header(len(data))
    assert len(header) == 12 and framed[:12] == header
    length, length_crc = struct.unpack("<QI", header)
    assert length == len(data)
    assert length_crc == core.crc.masked_crc32c(header[:8])
    assert framed[12:-4] == data
    assert struct.unpack("<I", framed[-4:])[0] == core.crc.masked_crc32c(data)


def test_frames_identical_across_implementations(cython_core, python_core):
    for data in (b"", b"x", random_bytes(5_000)):
        assert cython_core.tfrecord.frame(data) == python_core.tfrecord.frame(data)
    assert cython_core.tfrecord.frame(np.arange(4, dtype=np.int64)) == \
        python_core.tfrecord.frame(np.arange(4, dtype=np.int64))


@pytest.mark.parametrize("length", [-1, 2**64])
def test_write_frame_header_rejects_bad_length(core, length):
    with pytest.raises(ValueError):
        core.tfrecord.write_frame_header(length)


RECORD_SIZES = [0, 1, 100, 5_000, 20_000, 3, 40_000]


@pytest.fixture
def tfr(tmp_path, cython_core):
    """A TFRecord file of RECORD_SIZES records; returns (path, bytes, records)."""
    records = [random_bytes(n, seed=i) for i, n in enumerate(RECORD_SIZES)]
    content = b"".join(cython_core.tfrecord.frame(r) for r in records)
    path = tmp_path / "data.tfrecord"
    path.write_bytes(content)
    return path, content, records


def index(core, path, size=None, check=True):
    fd = os.open(path, os.O_RDONLY)
    try:
        return core.tfrecord.index_records(fd, os.path.getsize(path) if size is None else size, check)
    finally:
        os.close(fd)


def expected_offsets(sizes):
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at + 12)
        at += 16 + n
    return np.array(offsets, dtype=np.int64)


def test_index_records_on_hand_built_frames(core, tfr):
    path, content, records = tfr
    offsets, lengths = index(core, path)
    assert offsets.dtype == np.int64 and lengths.dtype == np.int64
    assert np.array_equal(lengths, RECORD_SIZES)
    assert np.array_equal(offsets, expected_offsets(RECORD_SIZES))
    for o, n, r in zip(offsets, lengths, records):
        assert content[o:o + n] == r


def test_index_records_spans_many_windows(core, tmp_path, python_core):
    # Small records: many headers per index window, and headers that straddle window edges.
    sizes = [(i * 37) % 500 for i in range(300)]
    path = tmp_path / "many.tfrecord"
    path.write_bytes(b"".join(python_core.tfrecord.frame(bytes(n)) for n in sizes))
    offsets, lengths = index(core, path)
    assert np.array_equal(lengths, sizes)
    assert np.array_equal(offsets, expected_offsets(sizes))


def test_index_records_empty_file(core, tmp_path):
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")
    offsets, lengths = index(core, path)
    assert offsets.shape == lengths.shape == (0,)


@pytest.mark.parametrize("cut, where, reason", [
    (1, "last", "truncated record"),        # data CRC of the last record cut short
    (40_004, "last", "truncated record"),   # last record's data cut
    (40_010, "last", "truncated record header"),  # header cut after 6 bytes
])
def test_truncated_file_raises_framing_error_with_offset(core, tfr, cut, where, reason):
    path, content, _ = tfr
    path.write_bytes(content[:len(content) - cut])
    last_frame_at = len(content) - 16 - RECORD_SIZES[-1]
    with pytest.raises(core.tfrecord.FramingError) as info:
        index(core, path)
    assert info.value.offset == last_frame_at
    assert info.value.reason.startswith(reason)
    assert f"at byte offset {last_frame_at}" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_file_shorter_than_announced_size(core, tfr):
    path, content, _ = tfr
    with pytest.raises(core.tfrecord.FramingError) as info:
        index(core, path, size=len(content) + 100)
    assert info.value.offset == len(content)


def test_corrupt_length_is_caught_by_length_crc(core, tfr):
    path, content, _ = tfr
    third = int(expected_offsets(RECORD_SIZES)[2]) - 12
    corrupt = bytearray(content)
    corrupt[third] ^= 0x01  # length 100 -> 101: still fits in the file, only the CRC can tell
    path.write_bytes(bytes(corrupt))
    with pytest.raises(core.tfrecord.FramingError) as info:
        index(core, path)
    assert info.value.offset == third
    assert "length CRC" in info.value.reason
    # Without the length check the bad length is believed, and the walk goes astray.
    with pytest.raises(core.tfrecord.FramingError):
        index(core, path, check=False)


def test_framing_error_is_shared_by_both_cores(cython_core, python_core):
    assert cython_core.tfrecord.FramingError is python_core.tfrecord.FramingError


def test_check_data_crcs(core, tfr):
    path, content, _ = tfr
    offsets, lengths = index(core, path)
    buf = np.frombuffer(content, dtype=np.uint8)
    assert core.tfrecord.check_data_crcs(buf, offsets, lengths, offsets + lengths) == -1
    for victim in (1, 4, 6):
        corrupt = bytearray(content)
        corrupt[offsets[victim]] ^= 0x80
        assert core.tfrecord.check_data_crcs(corrupt, offsets, lengths, offsets + lengths) == victim
    # A flipped stored CRC counts too.
    corrupt = bytearray(content)
    corrupt[offsets[5] + lengths[5]] ^= 0x01
    assert core.tfrecord.check_data_crcs(corrupt, offsets, lengths, offsets + lengths) == 5


def test_check_data_crcs_records_gathered_out_of_file_order(core, tfr):
    path, content, records = tfr
    offsets, lengths = index(core, path)
    # A loader copies data + stored CRC of each record into one batch buffer, in plan order.
    order = [6, 2, 4]
    pieces = [content[offsets[i]:offsets[i] + lengths[i] + 4] for i in order]
    buf = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    data_at = np.cumsum([0] + [len(p) for p in pieces[:-1]]).astype(np.int64)
    batch_lengths = lengths[order]
    assert core.tfrecord.check_data_crcs(buf, data_at, batch_lengths, data_at + batch_lengths) == -1


@pytest.mark.parametrize("case", ["data", "crc", "mismatch"])
def test_check_data_crcs_validates_ranges(core, case):
    buf = np.zeros(20, dtype=np.uint8)
    data, lengths, crcs = np.array([0], np.int64), np.array([10], np.int64), np.array([10], np.int64)
    if case == "data":
        lengths = np.array([21], np.int64)
    elif case == "crc":
        crcs = np.array([17], np.int64)
    else:
        crcs = np.array([10, 10], np.int64)
    with pytest.raises(ValueError):
        core.tfrecord.check_data_crcs(buf, data, lengths, crcs)


@pytest.mark.tensorflow
def test_interoperates_with_tensorflow(core, tmp_path):
    tf = pytest.importorskip("tensorflow")
    records = [random_bytes(n, seed=n) for n in (0, 10, 70_000, 3)]
    theirs = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for r in records:
            writer.write(r)
    content = theirs.read_bytes()
    offsets, lengths = index(core, theirs)
    assert [content[o:o + n] for o, n in zip(offsets, lengths)] == records
    buf = np.frombuffer(content, dtype=np.uint8)
    assert core.tfrecord.check_data_crcs(buf, offsets, lengths, offsets + lengths) == -1
    assert content == b"".join(core.tfrecord.frame(r) for r in records)
    # And TensorFlow reads our frames, verifying their CRCs as it goes.
    ours = tmp_path / "ours.tfrecord"
    ours.write_bytes(b"".join(core.tfrecord.frame(r) for r in records))
    dataset = tf.data.TFRecordDataset(str(ours))
    assert [t.numpy() for t in dataset] == records


def _frames_file(core, tmp_path, sizes):
    path = tmp_path / "frames.tfrecord"
    frames = [core.tfrecord.frame(bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    path.write_bytes(b"".join(frames))
    offsets = np.cumsum([0] + [len(f) for f in frames[:-1]]).astype(np.int64)
    lengths = np.array([len(f) for f in frames], np.int64)
    return path, offsets, lengths, frames


def test_pread_frames_reads_and_checks(core, tmp_path):
    path, offsets, lengths, frames = _frames_file(core, tmp_path, [10, 5000, 70000, 1])
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = np.zeros(int(lengths.sum()) + 100, np.uint8)
        dst = (offsets[::-1] + 7).astype(np.int64)  # anywhere in the buffer, any order
        n = lengths.size
        nbytes, bad = core.tfrecord.pread_frames(np.full(n, fd, np.int64), offsets[::-1].copy(),
                                                 lengths[::-1].copy(), buf, dst)
        assert (nbytes, bad) == (int(lengths.sum()), -1)
        for f, at in zip(frames[::-1], dst):
            assert bytes(buf[at:at + len(f)]) == f
    finally:
        os.close(fd)


def test_pread_frames_names_the_first_bad_frame(core, tmp_path):
    path, offsets, lengths, _ = _frames_file(core, tmp_path, [100, 200, 300])
    data = bytearray(path.read_bytes())
    data[int(offsets[1]) + 20] ^= 0xFF  # inside frame 1's data
    data[int(offsets[2]) + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = np.zeros(int(lengths.sum()), np.uint8)
        nbytes, bad = core.tfrecord.pread_frames(np.full(3, fd, np.int64), offsets, lengths, buf, offsets)
        assert bad == 1 and nbytes == int(lengths.sum())  # every frame still read
    finally:
        os.close(fd)


def test_pread_frames_short_file_is_a_read_failure(core, tmp_path):
    from iogen.errors import ReadFailure

    path, offsets, lengths, _ = _frames_file(core, tmp_path, [100, 200])
    os.truncate(path, int(offsets[1]) + 50)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = np.zeros(int(lengths.sum()), np.uint8)
        with pytest.raises(ReadFailure) as err:
            core.tfrecord.pread_frames(np.full(2, fd, np.int64), offsets, lengths, buf, offsets)
        assert err.value.index == 1 and err.value.offset == int(offsets[1]) and err.value.nread == 50
        with pytest.raises(ValueError, match="at least 16"):
            core.tfrecord.pread_frames(np.full(1, fd, np.int64), offsets[:1], np.array([8], np.int64), buf,
                                       offsets[:1])
    finally:
        os.close(fd)


def test_pread_frames_large_frames_in_pieces(core, tmp_path):
    from iogen.errors import ReadFailure

    # frames larger than the core's read piece (256 KiB): checked piece by piece, same answer
    path, offsets, lengths, frames = _frames_file(core, tmp_path, [700_000, 300_000])
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = np.zeros(int(lengths.sum()), np.uint8)
        assert core.tfrecord.pread_frames(np.full(2, fd, np.int64), offsets, lengths, buf, offsets) == (
            int(lengths.sum()), -1)
        assert bytes(buf) == b"".join(frames)
    finally:
        os.close(fd)
    data = bytearray(path.read_bytes())
    data[500_000] ^= 0x01  # in the third piece of frame 0
    path.write_bytes(bytes(data[:600_000]) + bytes(data[600_000:]))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert core.tfrecord.pread_frames(np.full(2, fd, np.int64), offsets, lengths, buf, offsets)[1] == 0
        os.truncate(path, 600_000)  # cut inside frame 0's third piece
        with pytest.raises(ReadFailure) as err:
            core.tfrecord.pread_frames(np.full(1, fd, np.int64), offsets[:1], lengths[:1], buf, offsets[:1])
        assert err.value.index == 0 and err.value.nread == 600_000
    finally:
        os.close(fd)


def test_match_layout_finds_the_first_record_unlike_the_layout(core):
    # three records of 10 bytes: head "HD", tail "TL"; the second has a different head
    buf = np.frombuffer(b"..HDxxxxxxTLHEyyyyyyTLHDzzzzzzTL", np.uint8)
    starts = np.array([2, 12, 22], np.int64)
    assert core.tfrecord.match_layout(buf, starts, 10, b"HD", b"TL") == 1
    assert core.tfrecord.match_layout(buf, starts, 10, b"HD", b"TL", 2) == -1
    assert core.tfrecord.match_layout(buf, starts, 10, b"HD", b"") == 1
    assert core.tfrecord.match_layout(buf, starts, 10, b"", b"TL") == -1
    assert core.tfrecord.match_layout(buf, starts, 10, b"", b"") == -1
    assert core.tfrecord.match_layout(buf, starts, 10, b"HD", b"TL", 3) == -1


@pytest.mark.parametrize("starts, length, head", [([25], 10, b"HD"), ([-1], 10, b"HD"), ([0], 3, b"HDTL")])
def test_match_layout_refuses_ranges_outside_the_buffer(core, starts, length, head):
    buf = np.zeros(30, np.uint8)
    with pytest.raises(ValueError):
        core.tfrecord.match_layout(buf, np.array(starts, np.int64), length, head, b"")


@pytest.mark.parametrize("data_bytes, count", [(0, 3), (1, 1), (300, 7), (70_000, 2), (5, 0)])
def test_set_data_crcs_seals_frames_end_to_end(core, data_bytes, count):
    # frames laid end to end with their footers unset: each gets frame()'s masked data CRC
    rng = np.random.default_rng(data_bytes + count)
    payloads = [rng.integers(0, 256, data_bytes, dtype=np.uint8).tobytes() for _ in range(count)]
    expected = b"".join(core.tfrecord.frame(p) for p in payloads)
    frame_bytes = data_bytes + 16
    buf = bytearray(expected)
    for r in range(count):
        buf[(r + 1) * frame_bytes - 4:(r + 1) * frame_bytes] = b"\xff" * 4
    buf += b"tail"  # bytes after the frames stay as they are
    assert core.tfrecord.set_data_crcs(buf, frame_bytes, count) is None
    assert bytes(buf) == expected + b"tail"


@pytest.mark.parametrize("frame_bytes, count, size, match", [
    (15, 1, 100, "frame_bytes must be >= 16"),
    (16, 2, 31, "do not fit"),
    (16, -1, 100, "do not fit"),
])
def test_set_data_crcs_refuses_bad_batches(core, frame_bytes, count, size, match):
    with pytest.raises(ValueError, match=match):
        core.tfrecord.set_data_crcs(bytearray(size), frame_bytes, count)
    with pytest.raises(ValueError, match="writable"):
        core.tfrecord.set_data_crcs(bytes(64), 16, 1)
