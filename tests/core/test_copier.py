"""copier.copy_range: byte-exact copies, O_DIRECT-style padded writes, and which side failed."""
import os

import numpy as np
import pytest

from iogen.errors import CopyFailure


def _file(path, nbytes, seed=1):
    data = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


def _copy(core, src, dst, nbytes, piece, align=1):
    buf = np.zeros(piece, np.uint8)
    s = os.open(src, os.O_RDONLY)
    d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        copied, crc = core.copier.copy_range(s, d, nbytes, buf, align)
        assert crc == 0  # no checksum asked for
        return copied
    finally:
        os.close(s)
        os.close(d)


@pytest.mark.parametrize("nbytes, piece", [(0, 4096), (1, 4096), (4096, 4096), (10_000, 4096), (123_457, 1000)])
def test_copies_every_byte(core, tmp_path, nbytes, piece):
    data = _file(tmp_path / "src", nbytes)
    assert _copy(core, tmp_path / "src", tmp_path / "dst", nbytes, piece) == nbytes
    assert (tmp_path / "dst").read_bytes() == data


def test_padded_writes_then_truncate_give_the_same_bytes(core, tmp_path):
    data = _file(tmp_path / "src", 10_001)
    assert _copy(core, tmp_path / "src", tmp_path / "dst", 10_001, 8192, align=4096) == 10_001
    # every write was a whole number of 4096-byte blocks: the file is padded until truncated
    assert os.path.getsize(tmp_path / "dst") == 12_288
    os.truncate(tmp_path / "dst", 10_001)
    assert (tmp_path / "dst").read_bytes() == data


def test_short_source_returns_what_it_copied(core, tmp_path):
    data = _file(tmp_path / "src", 5000)
    assert _copy(core, tmp_path / "src", tmp_path / "dst", 9000, 4096) == 5000
    assert (tmp_path / "dst").read_bytes() == data


def test_both_implementations_agree(cython_core, python_core, tmp_path):
    _file(tmp_path / "src", 70_000, seed=7)
    for core in (cython_core, python_core):
        _copy(core, tmp_path / "src", tmp_path / core.name, 70_000, 3000)
    assert (tmp_path / "cython").read_bytes() == (tmp_path / "python").read_bytes()


def test_failing_side_is_named(core, tmp_path):
    _file(tmp_path / "src", 100)
    buf = np.zeros(64, np.uint8)
    s = os.open(tmp_path / "src", os.O_RDONLY)
    ro = os.open(tmp_path / "src", os.O_RDONLY)  # writing to a read-only descriptor: EBADF
    try:
        with pytest.raises(CopyFailure) as exc:
            core.copier.copy_range(s, ro, 100, buf, 1)
        assert exc.value.side == "write" and exc.value.offset == 0
        d = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with pytest.raises(CopyFailure) as exc:
                core.copier.copy_range(d, d, 100, buf, 1)  # reading a write-only descriptor
            assert exc.value.side == "read"
        finally:
            os.close(d)
    finally:
        os.close(s)
        os.close(ro)


@pytest.mark.parametrize("args, match", [
    ((-1, 1, 10, 64, 1), "src_fd"),
    ((0, 1, -1, 64, 1), "nbytes"),
    ((0, 1, 10, 64, 0), "write_align"),
    ((0, 1, 10, 100, 64), "multiple"),
])
def test_bad_arguments_are_refused(core, args, match):
    src, dst, nbytes, piece, align = args
    with pytest.raises(ValueError, match=match):
        core.copier.copy_range(src, dst, nbytes, np.zeros(piece, np.uint8), align)


@pytest.mark.parametrize("nbytes, piece, align", [(0, 4096, 1), (10_000, 4096, 1), (123_457, 1000, 1),
                                                  (10_001, 8192, 4096)])
def test_checksum_is_the_crc32c_of_the_bytes_copied(core, tmp_path, nbytes, piece, align):
    from iogen.common.checksum import crc32c

    data = _file(tmp_path / "src", nbytes, seed=3)
    s = os.open(tmp_path / "src", os.O_RDONLY)
    d = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        copied, crc = core.copier.copy_range(s, d, nbytes, np.zeros(piece, np.uint8), align, True)
    finally:
        os.close(s)
        os.close(d)
    assert copied == nbytes and crc == crc32c(data)

