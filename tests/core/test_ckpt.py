"""core.ckpt: checkpoint blocks written and read from one reused buffer (both implementations)."""
import os

import numpy as np
import pytest

from iogen._core._common import aligned_buffer


def _buf(nbytes, seed=3):
    buf = aligned_buffer(nbytes)
    buf[:] = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    return buf


def test_write_range_repeats_the_buffer_with_stamped_blocks(core, tmp_path):
    path = str(tmp_path / "f")
    buf, t = _buf(4096), 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        assert core.ckpt.write_range(fd, buf, 0, 3 * t + 100, t, 0xABC) == 3 * t + 100
    finally:
        os.close(fd)
    data = np.fromfile(path, np.uint8)
    assert data.size == 3 * t + 100
    for k in range(4):
        block = data[k * t:(k + 1) * t]
        stamp = int.from_bytes(block[:8].tobytes(), "little")
        assert stamp == 0xABC ^ (k * t)  # every block differs, so deduplication cannot fold them
        assert np.array_equal(block[8:], buf[8:block.size])


def test_unstamped_blocks_are_the_buffer(core, tmp_path):
    path = str(tmp_path / "f")
    buf = _buf(8192)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        core.ckpt.write_range(fd, buf, 8192, 8192 + 5000, 8192, 0)
    finally:
        os.close(fd)
    data = np.fromfile(path, np.uint8)
    assert data.size == 8192 + 5000 and not data[:8192].any()  # a hole before start
    assert np.array_equal(data[8192:], buf[:5000])


def test_read_range_reads_blocks_and_stops_at_end_of_file(core, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 40)  # 10240 bytes
    buf = aligned_buffer(4096)
    fd = os.open(str(path), os.O_RDONLY)
    try:
        assert core.ckpt.read_range(fd, buf, 0, 10240, 4096) == 10240
        assert bytes(buf[:2048]) == (bytes(range(256)) * 40)[8192:]  # the last block read
        assert core.ckpt.read_range(fd, buf, 8192, 20000, 4096) == 2048  # short: the file ends
    finally:
        os.close(fd)


@pytest.mark.parametrize("args, message", [
    ((-1, 0, 10, 4096), "file descriptor"),
    ((0, 100, 200, 4096), "multiple of transfer"),
    ((0, 0, 10, 8192), "smaller than transfer"),
    ((0, 0, 10, 0), "transfer must be"),
])
def test_bad_arguments_are_value_errors(core, args, message):
    fd, start, end, transfer = args
    with pytest.raises(ValueError, match=message):
        core.ckpt.write_range(fd, aligned_buffer(4096), start, end, transfer, 0)
    with pytest.raises(ValueError, match=message):
        core.ckpt.read_range(fd, aligned_buffer(4096), start, end, transfer)


def test_write_error_is_an_os_error(core, tmp_path):
    path = tmp_path / "ro"
    path.write_bytes(b"x")
    fd = os.open(str(path), os.O_RDONLY)
    try:
        with pytest.raises(OSError) as err:
            core.ckpt.write_range(fd, aligned_buffer(4096), 0, 4096, 4096, 1)
        assert err.value.errno == 9  # EBADF: not open for writing
    finally:
        os.close(fd)


def test_both_implementations_write_the_same_bytes(cython_core, python_core, tmp_path):
    buf = _buf(4096)
    for impl in (cython_core, python_core):
        fd = os.open(str(tmp_path / impl.name), os.O_WRONLY | os.O_CREAT)
        try:
            impl.ckpt.write_range(fd, buf, 4096, 5 * 4096 + 17, 4096, 77)
        finally:
            os.close(fd)
    assert (tmp_path / "cython").read_bytes() == (tmp_path / "python").read_bytes()


def test_write_behind_keeps_the_bytes_and_is_no_error_where_unsupported(core, tmp_path):
    path = str(tmp_path / "f")
    buf, t = _buf(65536), 65536
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        core.ckpt.write_range(fd, buf, 0, 5 * t, t, 7)
        core.ckpt.write_behind(fd, 0, 2 * t, False)  # write-back started
        core.ckpt.write_behind(fd, 0, 2 * t, True)  # waited for and dropped from the page cache
        core.ckpt.write_behind(fd, 2 * t, 3 * t, True)
        core.ckpt.write_behind(fd, 0, 0, True)  # nothing to do
        with pytest.raises(ValueError):
            core.ckpt.write_behind(fd, -1, t, False)
    finally:
        os.close(fd)
    data = np.fromfile(path, np.uint8)
    assert data.size == 5 * t
    assert all(int.from_bytes(data[k * t:k * t + 8].tobytes(), "little") == 7 ^ (k * t) for k in range(5))
    assert np.array_equal(data[8:t], buf[8:t])
    r, w = os.pipe()  # a pipe cannot: no error, write-behind is an optimisation
    try:
        core.ckpt.write_behind(w, 0, t, True)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(OSError):
        core.ckpt.write_behind(w, 0, t, True)  # closed: EBADF
