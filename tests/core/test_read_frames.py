"""tfrecord.read_frames: adjacent frames read as runs, headers, data CRCs and payload layout checked in one call."""
import os
import struct

import numpy as np
import pytest

from iogen._core._common import FRAME_BAD_DATA_CRC, FRAME_BAD_HEADER, FRAME_OK, RUN_PIECE_BYTES
from iogen.errors import ReadFailure

HEAD = b"HEAD:"
TAIL = b":T"


def _payload(i, n):
    """Data of n bytes laid out as HEAD + filler + TAIL (the 'layout' the tests match)."""
    return HEAD + bytes([i % 251]) * (n - len(HEAD) - len(TAIL)) + TAIL


def _file(core, path, data_sizes):
    """A TFRecord file of records with HEAD/TAIL layout; (offsets, frame lengths, frames)."""
    frames = [core.tfrecord.frame(_payload(i, n)) for i, n in enumerate(data_sizes)]
    path.write_bytes(b"".join(frames))
    offsets = np.cumsum([0] + [len(f) for f in frames[:-1]]).astype(np.int64)
    return offsets, np.array([len(f) for f in frames], np.int64), frames


def _read(core, fds, offsets, lengths, buf, dst, check=True, data_length=-1, head=HEAD, tail=TAIL):
    n = len(offsets)
    fds = np.broadcast_to(np.asarray(fds, np.int64), (n,)).copy()
    return core.tfrecord.read_frames(fds, np.asarray(offsets, np.int64), np.asarray(lengths, np.int64), buf,
                                     np.asarray(dst, np.int64), check, data_length, head, tail)


@pytest.fixture
def opened(tmp_path):
    fds = []

    def open_(path):
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]

    yield open_
    for fd in fds:
        os.close(fd)


def test_runs_and_scattered_frames_land_where_asked(core, tmp_path, opened):
    # frames 0-2 adjacent (one run, spanning pieces), 4 then 3 (two runs), from two files
    sizes = [100, 300_000, 5_000, 70, 200]
    offsets, lengths, frames = _file(core, tmp_path / "a.tfrecord", sizes)
    offsets_b, lengths_b, frames_b = _file(core, tmp_path / "b.tfrecord", sizes)
    fa, fb = opened(tmp_path / "a.tfrecord"), opened(tmp_path / "b.tfrecord")
    order = [0, 1, 2, 4, 3]
    fds = [fa] * 5 + [fb, fb]
    offs = list(offsets[order]) + list(offsets_b[[0, 1]])
    lens = list(lengths[order]) + list(lengths_b[[0, 1]])
    want = [frames[i] for i in order] + frames_b[:2]
    dst = np.concatenate(([0], np.cumsum(lens)[:-1]))
    buf = np.zeros(int(sum(lens)), np.uint8)
    total, bad, what, unmatched = _read(core, fds, offs, lens, buf, dst)
    assert (total, bad, what) == (sum(lens), -1, FRAME_OK)
    assert unmatched == 0  # no layout given (data_length -1): nothing is matched
    assert bytes(buf) == b"".join(want)


def test_layout_is_matched_for_records_of_its_length(core, tmp_path, opened):
    offsets, lengths, _ = _file(core, tmp_path / "a.tfrecord", [64, 64, 64, 80, 64])
    fd = opened(tmp_path / "a.tfrecord")
    buf = np.zeros(int(lengths.sum()), np.uint8)
    # the fourth record has another length: the first one not of the layout
    assert _read(core, fd, offsets, lengths, buf, offsets, data_length=64) == (int(lengths.sum()), -1, FRAME_OK, 3)
    assert _read(core, fd, offsets[:3], lengths[:3], buf, offsets[:3], data_length=64)[3] == -1
    assert _read(core, fd, offsets[:3], lengths[:3], buf, offsets[:3], data_length=64, head=b"HEAX")[3] == 0
    assert _read(core, fd, offsets[:3], lengths[:3], buf, offsets[:3], data_length=64, tail=b"X")[3] == 0
    assert _read(core, fd, offsets[:3], lengths[:3], buf, offsets[:3], data_length=64, head=b"", tail=b"")[3] == -1


def test_a_bad_data_crc_is_named_unless_crcs_are_off(core, tmp_path, opened):
    path = tmp_path / "a.tfrecord"
    offsets, lengths, _ = _file(core, path, [100, 400_000, 300])
    data = bytearray(path.read_bytes())
    data[int(offsets[1]) + 300_000] ^= 0x01  # frame 1, in the run's second piece
    data[int(offsets[2]) + 40] ^= 0x01
    path.write_bytes(bytes(data))
    fd = opened(path)
    buf = np.zeros(int(lengths.sum()), np.uint8)
    total, bad, what, unmatched = _read(core, fd, offsets, lengths, buf, offsets, data_length=100)
    assert (total, bad, what, unmatched) == (int(lengths.sum()), 1, FRAME_BAD_DATA_CRC, 1)
    assert bytes(buf) == bytes(data)  # every frame still read
    assert _read(core, fd, offsets, lengths, buf, offsets, check=False)[1:3] == (-1, FRAME_OK)


@pytest.mark.parametrize("corrupt", ["length", "length_crc"])
def test_a_header_unlike_the_index_is_named_even_with_crcs_off(core, tmp_path, opened, corrupt):
    path = tmp_path / "a.tfrecord"
    offsets, lengths, _ = _file(core, path, [100, 200, 300])
    data = bytearray(path.read_bytes())
    at = int(offsets[1])
    if corrupt == "length":  # a valid header announcing another length than the index holds
        data[at:at + 12] = core.tfrecord.write_frame_header(150)
    else:
        data[at + 9] ^= 0x40
    path.write_bytes(bytes(data))
    fd = opened(path)
    buf = np.zeros(int(lengths.sum()), np.uint8)
    for check in (True, False):
        assert _read(core, fd, offsets, lengths, buf, offsets, check=check)[1:3] == (1, FRAME_BAD_HEADER)


@pytest.mark.parametrize("check", [True, False])  # pieces of 256 KiB, or 8 MiB without CRCs
def test_a_short_file_names_the_entry_and_what_was_read(core, tmp_path, opened, check):
    path = tmp_path / "a.tfrecord"
    offsets, lengths, _ = _file(core, path, [100, 200, 600_000, 50])
    cut = int(offsets[2]) + RUN_PIECE_BYTES + 1000  # inside frame 2, past the run's first piece
    os.truncate(path, cut)
    fd = opened(path)
    buf = np.zeros(int(lengths.sum()), np.uint8)
    with pytest.raises(ReadFailure) as err:
        _read(core, fd, offsets, lengths, buf, offsets, check=check)
    assert (err.value.index, err.value.offset, err.value.nread) == (2, int(offsets[2]), cut - int(offsets[2]))
    os.truncate(path, int(offsets[3]))  # the last frame missing entirely
    with pytest.raises(ReadFailure) as err:
        _read(core, fd, offsets, lengths, buf, offsets, check=check)
    assert (err.value.index, err.value.nread) == (3, 0)


@pytest.mark.parametrize("lengths, dst, data_length, head, match", [
    ([8], [0], -1, b"", "at least 16"),
    ([116], [0], 10, b"x" * 11, "must fit"),
    ([116], [10], -1, b"", "exceeds the buffer"),
])
def test_bad_arguments_are_refused_before_any_read(core, tmp_path, opened, lengths, dst, data_length, head, match):
    offsets, _, _ = _file(core, tmp_path / "a.tfrecord", [100])
    fd = opened(tmp_path / "a.tfrecord")
    buf = np.zeros(116, np.uint8)
    with pytest.raises(ValueError, match=match):
        _read(core, fd, offsets, lengths, buf, dst, data_length=data_length, head=head, tail=b"")


def test_both_cores_agree_on_random_batches(cython_core, python_core, tmp_path, opened):
    rng = np.random.default_rng(7)
    sizes = rng.integers(16, 90_000, 40).tolist()
    offsets, lengths, _ = _file(cython_core, tmp_path / "a.tfrecord", sizes)
    path = tmp_path / "a.tfrecord"
    data = bytearray(path.read_bytes())
    victim = int(rng.integers(5, 40))
    struct.pack_into("<B", data, int(offsets[victim]) + 12 + 7, data[int(offsets[victim]) + 12 + 7] ^ 0xFF)
    path.write_bytes(bytes(data))
    fd = opened(path)
    for trial in range(5):
        pick = np.sort(rng.choice(40, 25, replace=False)) if trial % 2 else rng.permutation(40)[:25]
        lens = lengths[pick]
        dst = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
        answers = []
        for core in (cython_core, python_core):
            buf = np.zeros(int(lens.sum()), np.uint8)
            answers.append((_read(core, fd, offsets[pick], lens, buf, dst, data_length=int(sizes[pick[0]])),
                            bytes(buf)))
        assert answers[0] == answers[1]


def test_a_run_is_read_and_checked_with_the_gil_released(cython_core, tmp_path, opened):
    from .test_gil import LIMIT, python_progress_during

    # 64 adjacent 1 MiB frames: one run, 256 MiB read and checked over 4 calls
    offsets, lengths, _ = _file(cython_core, tmp_path / "a.tfrecord", [1 << 20] * 64)
    fd = opened(tmp_path / "a.tfrecord")
    buf = np.zeros(int(lengths.sum()), np.uint8)

    def call():
        for _ in range(4):
            assert _read(cython_core, fd, offsets, lengths, buf, offsets, data_length=1 << 20)[1:] == (-1, 0, -1)

    assert python_progress_during(call) == LIMIT


def test_long_crcs_agree_with_the_table_path_at_every_size_and_alignment(cython_core):
    # inputs of 1 KiB and more take the carry-less-multiply folding where the CPU has it:
    # every 256-byte block count, 16-byte tail and unaligned start, from any starting CRC
    rng = np.random.default_rng(11)
    data = rng.integers(0, 256, 70_000, dtype=np.uint8).tobytes()
    crc_core = cython_core.crc
    sizes = [1023, 1024, 1025, 1040, 1279, 1280, 1281, 4096 + 15, 65_536] + rng.integers(1024, 69_000, 40).tolist()
    for n in sizes:
        start = int(rng.integers(0, 64))
        crc = int(rng.integers(0, 1 << 32))
        view = memoryview(data)[start:start + n]
        assert crc_core.crc32c(view, crc) == crc_core.crc32c_software(view, crc), (n, start, crc)
