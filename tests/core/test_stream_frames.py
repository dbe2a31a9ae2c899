"""tfrecord.stream_frames: frames read through one small reused buffer, every check made as they land.

The native loader's streamed reads (nobody keeps the batch): adjacent frames are packed into
reads that fit the scratch buffer, each header, data CRC and payload layout is checked as the
pieces land; a bad frame ends the call with its index, a frame whose layout is not known yet
ends it after its pack (held in the scratch for the caller to parse); the bytes counted are
the frames read.
"""
import os
import struct

import numpy as np
import pytest

from iogen._core._common import FRAME_BAD_DATA_CRC, FRAME_BAD_HEADER, FRAME_OK, RUN_PIECE_BYTES
from iogen.errors import ReadFailure

from .test_read_frames import HEAD, TAIL, _file, opened  # noqa: F401 - the fixture

NO_TABLE = (np.empty(0, np.int64), np.empty(0, np.uint8), np.zeros(1, np.int64), np.empty(0, np.uint8),
            np.zeros(1, np.int64))


def _table(*data_lengths, head=HEAD, tail=TAIL):
    """Layouts for records of these data lengths, all HEAD ... TAIL (the test files' layout)."""
    k = len(data_lengths)
    return (np.array(sorted(data_lengths), np.int64), np.frombuffer(head * k, np.uint8).copy(),
            np.arange(k + 1, dtype=np.int64) * len(head), np.frombuffer(tail * k, np.uint8).copy(),
            np.arange(k + 1, dtype=np.int64) * len(tail))


def _stream(core, fds, offsets, lengths, scratch, first=0, check=True, table=NO_TABLE):
    n = len(offsets)
    fds = np.broadcast_to(np.asarray(fds, np.int64), (n,)).copy()
    return core.tfrecord.stream_frames(fds, np.asarray(offsets, np.int64), np.asarray(lengths, np.int64), scratch,
                                       first, check, *table)


def test_frames_of_known_layouts_are_read_through_the_scratch_and_counted(core, tmp_path, opened):
    sizes = [100, 300_000, 5_000, 70, 100, 5_000]  # packs: frames 0-1, then 2-5
    offsets, lengths, frames = _file(core, tmp_path / "a.tfrecord", sizes)
    fd = opened(tmp_path / "a.tfrecord")
    scratch = np.zeros(310_000, np.uint8)
    table = _table(*set(sizes))
    for check in (True, False):
        assert _stream(core, fd, offsets, lengths, scratch, check=check, table=table) == \
            (int(lengths.sum()), -1, FRAME_OK, -1, -1, 6)
    # shuffled: frames one by one, from any entry on
    order = [5, 0, 3, 2]
    assert _stream(core, fd, offsets[order], lengths[order], scratch, first=1, table=table) == \
        (int(lengths[order[1:]].sum()), -1, FRAME_OK, -1, -1, 4)
    # the last pack's frames sit at the start of the scratch, one after the other
    _stream(core, fd, offsets[2:], lengths[2:], scratch, table=table)
    assert bytes(scratch[:int(lengths[2:].sum())]) == b"".join(frames[2:])


def test_a_frame_of_a_new_layout_ends_the_call_after_its_pack_held_in_the_scratch(core, tmp_path, opened):
    offsets, lengths, frames = _file(core, tmp_path / "a.tfrecord", [64, 64, 64, 80, 64, 64])
    fd = opened(tmp_path / "a.tfrecord")
    scratch = np.zeros(int(lengths[:5].sum()), np.uint8)  # packs: frames 0-4, then 5
    # no layout known: the first frame is unmatched; the call ends after its pack
    assert _stream(core, fd, offsets, lengths, scratch) == (int(lengths[:5].sum()), -1, FRAME_OK, 0, 0, 5)
    # records of 64 known: the fourth (80) is new; it and the rest of its pack lie in the scratch from `held`
    total, bad, what, unmatched, held, after = _stream(core, fd, offsets, lengths, scratch, table=_table(64))
    assert (total, bad, what, unmatched, after) == (int(lengths[:5].sum()), -1, FRAME_OK, 3, 5)
    assert bytes(scratch[held:held + int(lengths[3:5].sum())]) == frames[3] + frames[4]
    # going on after the pack: the rest is of the known layout
    assert _stream(core, fd, offsets, lengths, scratch, first=5, table=_table(64)) == \
        (int(lengths[5]), -1, FRAME_OK, -1, -1, 6)
    # bytes unlike the known layout's (same length) stop it too
    assert _stream(core, fd, offsets, lengths, scratch, table=_table(64, 80, head=b"HEAX"))[3] == 0
    assert _stream(core, fd, offsets, lengths, scratch, table=_table(64, 80, tail=b"X"))[3] == 0
    assert _stream(core, fd, offsets, lengths, scratch, table=_table(64, 80, head=b"", tail=b""))[3] == -1
    # a bad CRC later in the pack of a new layout is still found
    data = bytearray((tmp_path / "a.tfrecord").read_bytes())
    data[int(offsets[4]) + 30] ^= 0x01
    (tmp_path / "a.tfrecord").write_bytes(bytes(data))
    assert _stream(core, fd, offsets, lengths, scratch, table=_table(64)) == \
        (int(lengths[:5].sum()), 4, FRAME_BAD_DATA_CRC, -1, -1, 5)


@pytest.mark.parametrize("check", [True, False])
def test_a_corrupt_record_in_the_middle_of_a_pack_is_named(core, tmp_path, opened, check):
    path = tmp_path / "a.tfrecord"
    sizes = [100, 400_000, 300, 300, 300]
    offsets, lengths, _ = _file(core, path, sizes)
    data = bytearray(path.read_bytes())
    data[int(offsets[3]) + 40] ^= 0x01  # frame 3's data: in the middle of the pack 2..4
    path.write_bytes(bytes(data))
    fd = opened(path)
    scratch = np.zeros(500_000, np.uint8)
    table = _table(*set(sizes))
    got = _stream(core, fd, offsets, lengths, scratch, check=check, table=table)
    if check:
        assert got == (int(lengths[:4].sum()), 3, FRAME_BAD_DATA_CRC, -1, -1, 4)
    else:
        assert got == (int(lengths.sum()), -1, FRAME_OK, -1, -1, 5)
    # a CRC bad in a frame's second piece (frame 1: 400 KB, read in 256 KiB pieces)
    data[int(offsets[3]) + 40] ^= 0x01
    data[int(offsets[1]) + RUN_PIECE_BYTES + 5] ^= 0x80
    path.write_bytes(bytes(data))
    assert _stream(core, fd, offsets, lengths, scratch, check=check, table=table)[1:3] == \
        ((1, FRAME_BAD_DATA_CRC) if check else (-1, FRAME_OK))


@pytest.mark.parametrize("corrupt", ["length", "length_crc"])
def test_a_header_unlike_the_index_is_named_even_with_crcs_off(core, tmp_path, opened, corrupt):
    path = tmp_path / "a.tfrecord"
    offsets, lengths, _ = _file(core, path, [100, 200, 300])
    data = bytearray(path.read_bytes())
    at = int(offsets[1])
    if corrupt == "length":
        data[at:at + 12] = core.tfrecord.write_frame_header(150)
    else:
        data[at + 9] ^= 0x40
    path.write_bytes(bytes(data))
    fd = opened(path)
    scratch = np.zeros(4096, np.uint8)
    for check in (True, False):
        assert _stream(core, fd, offsets, lengths, scratch, check=check, table=_table(100, 200, 300)) == \
            (int(lengths[:2].sum()), 1, FRAME_BAD_HEADER, -1, -1, 2)


@pytest.mark.parametrize("check", [True, False])
def test_a_short_file_names_the_entry_and_what_was_read(core, tmp_path, opened, check):
    path = tmp_path / "a.tfrecord"
    offsets, lengths, _ = _file(core, path, [100, 200, 600_000, 50])
    cut = int(offsets[2]) + RUN_PIECE_BYTES + 1000  # inside frame 2, past its first piece
    os.truncate(path, cut)
    fd = opened(path)
    scratch = np.zeros(1 << 20, np.uint8)
    table = _table(100, 200, 600_000, 50)
    with pytest.raises(ReadFailure) as err:
        _stream(core, fd, offsets, lengths, scratch, check=check, table=table)
    assert (err.value.index, err.value.offset, err.value.nread) == (2, int(offsets[2]), cut - int(offsets[2]))
    os.truncate(path, int(offsets[3]))  # the last frame missing entirely
    with pytest.raises(ReadFailure) as err:
        _stream(core, fd, offsets, lengths, scratch, check=check, table=table)
    assert (err.value.index, err.value.nread) == (3, 0)


@pytest.mark.parametrize("lengths, first, table, match", [
    ([8], 0, NO_TABLE, "at least 16"),
    ([200], 0, NO_TABLE, "fits the scratch"),
    ([116], 2, NO_TABLE, "first must be"),
    ([116], 0, _table(100, head=b"x" * 99), "must fit"),
    ([116], 0, (np.array([100, 50], np.int64),) + _table(100, 50)[1:], "ascending"),
    ([116], 0, _table(100)[:2] + (np.array([0], np.int64),) + _table(100)[3:], "offsets"),
])
def test_bad_arguments_are_refused_before_any_read(core, tmp_path, opened, lengths, first, table, match):
    offsets, _, _ = _file(core, tmp_path / "a.tfrecord", [100])
    fd = opened(tmp_path / "a.tfrecord")
    with pytest.raises(ValueError, match=match):
        _stream(core, fd, offsets, lengths, np.zeros(128, np.uint8), first=first, table=table)


def test_both_cores_agree_on_random_batches(cython_core, python_core, tmp_path, opened):
    rng = np.random.default_rng(11)
    sizes = rng.choice([900, 20_000, 90_000], 40).tolist()
    offsets, lengths, _ = _file(cython_core, tmp_path / "a.tfrecord", sizes)
    path = tmp_path / "a.tfrecord"
    data = bytearray(path.read_bytes())
    victim = int(rng.integers(5, 40))
    struct.pack_into("<B", data, int(offsets[victim]) + 12 + 7, data[int(offsets[victim]) + 12 + 7] ^ 0xFF)
    path.write_bytes(bytes(data))
    fd = opened(path)
    for trial in range(6):
        pick = np.sort(rng.choice(40, 25, replace=False)) if trial % 2 else rng.permutation(40)[:25]
        table = _table(900, 20_000) if trial % 3 else _table(900, 20_000, 90_000)
        answers = []
        for core in (cython_core, python_core):
            scratch = np.zeros(200_000, np.uint8)
            try:
                got = _stream(core, fd, offsets[pick], lengths[pick], scratch, first=trial, check=trial != 4,
                              table=table)
            except ReadFailure as exc:  # not expected: the file is whole
                got = ("failed", exc.index)
            held = got[4] if got[0] != "failed" and got[4] >= 0 else 0
            answers.append((got, bytes(scratch[held:held + 2048])))
        assert answers[0] == answers[1]


def test_a_slice_is_streamed_and_checked_with_the_gil_released(cython_core, tmp_path, opened):
    from .test_gil import LIMIT, python_progress_during

    # 64 adjacent 1 MiB frames through a 2 MiB scratch, 4 times: 256 MiB read and checked
    offsets, lengths, _ = _file(cython_core, tmp_path / "a.tfrecord", [1 << 20] * 64)
    fd = opened(tmp_path / "a.tfrecord")
    scratch = np.zeros(2 << 20, np.uint8)

    def call():
        for _ in range(4):
            assert _stream(cython_core, fd, offsets, lengths, scratch, table=_table(1 << 20))[1:] == \
                (-1, FRAME_OK, -1, -1, 64)

    assert python_progress_during(call) == LIMIT
