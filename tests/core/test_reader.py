"""reader: batched pread into caller buffers, checked against plain os.pread on both cores."""
import ctypes
import errno
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

from iogen.errors import ReadFailure

FILE_BYTES = 10_000


def i64(*values):
    return np.array(values, dtype=np.int64)


@pytest.fixture
def data_file(tmp_path):
    """A small file of random bytes; returns (path, content)."""
    content = np.random.default_rng(3).integers(0, 256, FILE_BYTES, dtype=np.uint8).tobytes()
    path = tmp_path / "data.bin"
    path.write_bytes(content)
    return path, content


@pytest.fixture
def fd(core, data_file):
    fd = core.reader.open_file(str(data_file[0]), False)
    yield fd
    core.reader.close_file(fd)


@pytest.mark.parametrize("nbytes, alignment", [(0, 4096), (1, 4096), (10_000, 4096), (100, 512), (64, 1)])
def test_aligned_buffer(core, nbytes, alignment):
    buf = core.reader.aligned_buffer(nbytes, alignment)
    assert buf.dtype == np.uint8 and buf.ndim == 1 and buf.shape == (nbytes,)
    if nbytes:  # numpy gives empty arrays no meaningful data pointer
        assert buf.ctypes.data % alignment == 0
    assert buf.flags.writeable and buf.flags.c_contiguous
    assert not buf.any()


@pytest.mark.parametrize("nbytes, alignment", [(-1, 4096), (10, 0), (10, 3000)])
def test_aligned_buffer_rejects_bad_arguments(core, nbytes, alignment):
    with pytest.raises(ValueError):
        core.reader.aligned_buffer(nbytes, alignment)


def test_pread_into_matches_os_pread(core, data_file, fd):
    _, content = data_file
    offsets = i64(0, 123, 9_000, 5_000, 9_990, 777)
    lengths = i64(100, 4_000, 1_000, 0, 50, 1)
    # The entry at 9_990 asks for 50 bytes but only 10 exist: allowed, since it requires 5.
    required = i64(100, 4_000, 1_000, 0, 5, 1)
    buf_offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    buf = np.full(int(lengths.sum()), 0xEE, dtype=np.uint8)
    fds = np.full(len(offsets), fd, dtype=np.int64)
    total = core.reader.pread_into(fds, offsets, lengths, required, buf, buf_offsets)
    expected = [os.pread(fd, int(n), int(o)) for o, n in zip(offsets, lengths)]
    assert total == sum(len(e) for e in expected) == 5_111
    for chunk, at, n in zip(expected, buf_offsets, lengths):
        assert buf[at:at + len(chunk)].tobytes() == chunk
        # Past end of file nothing is written: the caller's filler stays.
        assert (buf[at + len(chunk):at + n] == 0xEE).all()


def test_pread_into_reads_several_files_into_one_buffer(core, tmp_path):
    paths = [tmp_path / f"f{i}" for i in range(3)]
    for i, p in enumerate(paths):
        p.write_bytes(bytes([i + 1]) * 100)
    fds = [core.reader.open_file(str(p), False) for p in paths]
    try:
        buf = bytearray(300)
        total = core.reader.pread_into(i64(*fds), i64(0, 0, 0), i64(100, 100, 100), i64(100, 100, 100),
                                       buf, i64(200, 0, 100))
    finally:
        for f in fds:
            core.reader.close_file(f)
    assert total == 300
    assert bytes(buf) == b"\x02" * 100 + b"\x03" * 100 + b"\x01" * 100


def test_short_read_below_required_raises_read_failure(core, fd):
    buf = np.zeros(2_000, dtype=np.uint8)
    with pytest.raises(ReadFailure) as info:
        core.reader.pread_into(i64(fd, fd), i64(0, 9_500), i64(1_000, 1_000), i64(1_000, 600),
                               buf, i64(0, 1_000))
    err = info.value
    assert (err.index, err.errno, err.offset, err.nread) == (1, 0, 9_500, 500)
    assert "500 bytes" in str(err)


def test_read_past_end_of_file_returns_zero_when_nothing_required(core, fd):
    buf = np.zeros(100, dtype=np.uint8)
    assert core.reader.pread_into(i64(fd), i64(FILE_BYTES + 5), i64(100), i64(0), buf, i64(0)) == 0


def test_pread_error_becomes_read_failure_with_errno(core, tmp_path):
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(ReadFailure) as info:
            core.reader.pread_into(i64(dir_fd), i64(0), i64(10), i64(10), bytearray(10), i64(0))
    finally:
        os.close(dir_fd)
    assert info.value.errno == errno.EISDIR and info.value.index == 0


@pytest.mark.parametrize("case", ["overflow", "negative_length", "negative_offset", "required",
                                  "mismatch", "negative_buf_offset", "huge_fd"])
def test_bad_ranges_raise_value_error_before_reading(core, fd, case):
    args = dict(fds=i64(fd), offsets=i64(0), lengths=i64(10), required=i64(10), buf_offsets=i64(0))
    buf = np.zeros(10, dtype=np.uint8)
    if case == "overflow":
        args["buf_offsets"] = i64(1)
    elif case == "negative_length":
        args["lengths"], args["required"] = i64(-1), i64(-1)
    elif case == "negative_offset":
        args["offsets"] = i64(-10)
    elif case == "required":
        args["required"] = i64(11)
    elif case == "mismatch":
        args["offsets"] = i64(0, 10)
    elif case == "huge_fd":
        args["fds"] = i64(2**32 + fd)  # would alias fd if truncated to a C int
    else:
        args["buf_offsets"] = i64(-1)
    with pytest.raises(ValueError):
        core.reader.pread_into(args["fds"], args["offsets"], args["lengths"], args["required"],
                               buf, args["buf_offsets"])
    assert not buf.any()


def test_read_only_buffer_is_rejected(core, fd):
    with pytest.raises(ValueError, match="writable"):
        core.reader.pread_into(i64(fd), i64(0), i64(4), i64(4), b"\0" * 4, i64(0))


def test_threads_read_disjoint_slices_of_one_buffer(core, data_file, fd):
    _, content = data_file
    buf = core.reader.aligned_buffer(FILE_BYTES)
    n_threads, piece = 4, FILE_BYTES // 4
    totals = [None] * n_threads

    def work(k):
        offsets = np.arange(k * piece, (k + 1) * piece, 250, dtype=np.int64)
        lengths = np.full(len(offsets), 250, dtype=np.int64)
        totals[k] = core.reader.pread_into(np.full(len(offsets), fd, dtype=np.int64), offsets, lengths,
                                           lengths, buf, offsets)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert totals == [piece] * n_threads
    assert buf.tobytes() == content


def test_open_missing_file_is_file_not_found_with_path(core, tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError) as info:
        core.reader.open_file(missing, False)
    assert info.value.filename == missing


def test_open_direct_reads_aligned_blocks_or_says_unsupported(core, tmp_path):
    path = tmp_path / "direct.bin"
    path.write_bytes(bytes(range(256)) * 32)  # 8 KiB
    try:
        fd = core.reader.open_file(str(path), True)
    except OSError as exc:
        assert exc.errno == errno.EINVAL and "O_DIRECT not supported" in str(exc)
        return
    try:
        buf = core.reader.aligned_buffer(8192)
        assert core.reader.pread_into(i64(fd), i64(0), i64(8192), i64(8192), buf, i64(0)) == 8192
    finally:
        core.reader.close_file(fd)
    assert buf.tobytes() == path.read_bytes()


def test_close_file_closes(core, data_file):
    fd = core.reader.open_file(str(data_file[0]), False)
    core.reader.close_file(fd)
    with pytest.raises(OSError) as info:
        os.fstat(fd)
    assert info.value.errno == errno.EBADF


def test_evict_file_accepts_open_file_and_rejects_bad_fd(core, data_file, fd):
    core.reader.evict_file(fd)
    # Eviction drops cached pages only: the content is unchanged.
    assert os.pread(fd, FILE_BYTES, 0) == data_file[1]
    with pytest.raises(OSError) as info:
        core.reader.evict_file(-1)
    assert info.value.errno == errno.EBADF


def resident_pages(path):
    """How many of the file's pages are in the page cache (mincore over a read-only mapping)."""
    size = os.path.getsize(path)
    libc = ctypes.CDLL(None, use_errno=True)
    npages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * npages)()
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), size, prot=mmap.PROT_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8)
        rc = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec)
        del view  # release the buffer before the mapping closes
    assert rc == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec)


def test_evict_file_drops_freshly_written_pages(core, tmp_path):
    # Just-written pages are dirty, and fadvise DONTNEED alone leaves dirty pages cached.
    path = tmp_path / "fresh.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    if resident_pages(path) == 0:
        pytest.skip("the page cache did not keep the written file")
    fd = core.reader.open_file(str(path), False)
    try:
        core.reader.evict_file(fd)
        left = resident_pages(path)
        if left:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if resident_pages(path):
                pytest.skip("this file system keeps file pages in memory (tmpfs)")
    finally:
        core.reader.close_file(fd)
    assert left == 0


@pytest.mark.parametrize("block_bytes", [1_000, 4_096, 10_000, 65_536])
def test_pread_loop_baseline_reads_whole_file(core, data_file, block_bytes):
    path, content = data_file
    buf = core.reader.aligned_buffer(65_536)
    assert core.probes.pread_loop_baseline(str(path), block_bytes, buf) == FILE_BYTES
    # The last block read sits at the start of the buffer.
    last_start = (FILE_BYTES - 1) // block_bytes * block_bytes
    assert buf[:FILE_BYTES - last_start].tobytes() == content[last_start:]


def test_pread_loop_baseline_rejects_small_buffer(core, data_file):
    with pytest.raises(ValueError):
        core.probes.pread_loop_baseline(str(data_file[0]), 4096, bytearray(100))


def test_pread_marked_reads_each_range_whole_through_scratch_and_checks_its_markers(core, tmp_path):
    good = tmp_path / "good"
    good.write_bytes(b"AB" + b"x" * 96 + b"YZ")  # 100 bytes
    bad = tmp_path / "bad"
    bad.write_bytes(b"AB" + b"x" * 96 + b"Y!")
    fds = [core.reader.open_file(str(p), False) for p in (good, bad)]
    scratch = np.zeros(128, np.uint8)
    try:
        g, b = fds
        assert core.reader.pread_marked(i64(g, g), i64(0, 0), i64(100, 100), scratch, b"AB", b"YZ") == (200, -1)
        assert bytes(scratch[:100]) == good.read_bytes()
        # the first range that does not start and end with the markers; reading stops there
        assert core.reader.pread_marked(i64(g, b, g), i64(0, 0, 0), i64(100, 100, 100), scratch, b"AB", b"YZ") \
            == (200, 1)
        assert core.reader.pread_marked(i64(g), i64(1), i64(99), scratch, b"AB", b"YZ") == (99, 0)  # no head
        assert core.reader.pread_marked(i64(g), i64(0), i64(3), scratch, b"AB", b"YZ") == (3, 0)  # too short
        with pytest.raises(ReadFailure) as info:  # the file cannot fill the range
            core.reader.pread_marked(i64(g, g), i64(0, 50), i64(100, 100), scratch, b"AB", b"YZ")
        assert (info.value.index, info.value.errno, info.value.offset, info.value.nread) == (1, 0, 50, 50)
        with pytest.raises(ValueError, match="scratch"):
            core.reader.pread_marked(i64(g), i64(0), i64(129), scratch, b"AB", b"YZ")
        with pytest.raises(ValueError, match="equal lengths"):
            core.reader.pread_marked(i64(g, g), i64(0), i64(100), scratch, b"AB", b"YZ")
    finally:
        for fd in fds:
            core.reader.close_file(fd)


def test_open_pread_marked_opens_reads_and_closes_each_path(core, tmp_path):
    good = tmp_path / "good"
    good.write_bytes(b"AB" + b"x" * 96 + b"YZ")
    bad = tmp_path / "bad"
    bad.write_bytes(b"AB" + b"x" * 96 + b"Y!")
    scratch = np.zeros(128, np.uint8)
    before = len(os.listdir("/proc/self/fd"))
    assert core.reader.open_pread_marked([str(good), os.fsencode(good)], i64(0, 0), i64(100, 100), scratch,
                                         b"AB", b"YZ") == (200, -1)
    assert core.reader.open_pread_marked([str(good), str(bad), str(good)], i64(0, 0, 0), i64(100, 100, 100),
                                         scratch, b"AB", b"YZ") == (200, 1)
    with pytest.raises(ReadFailure) as info:
        core.reader.open_pread_marked([str(good), str(good)], i64(0, 50), i64(100, 100), scratch, b"AB", b"YZ")
    assert (info.value.index, info.value.nread) == (1, 50)
    with pytest.raises(FileNotFoundError) as missing:
        core.reader.open_pread_marked([str(good), str(tmp_path / "gone")], i64(0, 0), i64(100, 100), scratch,
                                      b"AB", b"YZ")
    assert missing.value.filename == str(tmp_path / "gone")
    with pytest.raises(ValueError, match="scratch"):
        core.reader.open_pread_marked([str(good)], i64(0), i64(129), scratch, b"AB", b"YZ")
    assert len(os.listdir("/proc/self/fd")) == before  # every file it opened, closed (failures too)


def _names(*rels: str) -> np.ndarray:
    width = max(len(r) for r in rels)
    assert all(len(r) == width for r in rels)
    return np.frombuffer("".join(rels).encode(), np.uint8).reshape(len(rels), width).copy()


def test_stat_sizes_gives_each_files_size_and_minus_one_where_missing(core, tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "a1").write_bytes(b"x" * 7)
    (tmp_path / "bb22").write_bytes(b"")
    (tmp_path / "cc33").symlink_to(tmp_path / "s" / "a1")  # a link is followed, as os.stat follows it
    out = np.zeros(5, np.int64)
    core.reader.stat_sizes(str(tmp_path), _names("s/a1", "bb22", "cc33", "dd44", "q/zz"), out)
    assert out.tolist() == [7, 0, 7, -1, -1]
    # a folder that is not there holds no file: every size -1, as os.stat of each path says
    out[:] = 0
    core.reader.stat_sizes(str(tmp_path / "nope"), _names("a1", "b2"), out[:2])
    assert out[:2].tolist() == [-1, -1]
    core.reader.stat_sizes(str(tmp_path), np.zeros((0, 3), np.uint8), np.zeros(0, np.int64))  # nothing to stat


def test_stat_sizes_raises_other_failures_naming_the_file(core, tmp_path):
    (tmp_path / "f").write_bytes(b"1")
    # a component that is a file, not a folder: os.stat's NotADirectoryError, naming the path
    with pytest.raises(NotADirectoryError) as info:
        core.reader.stat_sizes(str(tmp_path), _names("f/a1", "f/b2"), np.zeros(2, np.int64))
    assert info.value.filename == str(tmp_path / "f/a1")
    with pytest.raises(ValueError, match="out holds 1 sizes for 2 names"):
        core.reader.stat_sizes(str(tmp_path), _names("a1", "b2"), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="names of 4096 bytes"):
        core.reader.stat_sizes(str(tmp_path), np.full((1, 4096), ord("a"), np.uint8), np.zeros(1, np.int64))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
@pytest.mark.parametrize("impl", ["iogen._core.reader", "iogen._core.pure.reader"])
def test_stat_sizes_needs_no_read_permission_on_the_folder_as_os_stat_needs_none(impl):
    # a folder another user may enter but not list (0711): os.stat of a file in it works, and so must stat_sizes
    top = tempfile.mkdtemp(prefix="iogen-statx-", dir="/tmp")
    try:
        os.chmod(top, 0o755)
        folder = os.path.join(top, "d")
        os.mkdir(folder, 0o711)
        os.chmod(folder, 0o711)
        with open(os.path.join(folder, "ab"), "wb") as fh:
            fh.write(b"123")
        code = (f"import numpy as np, importlib; m = importlib.import_module({impl!r}); out = np.zeros(2, np.int64); "
                f"m.stat_sizes({folder!r}, np.frombuffer(b'abcd', np.uint8).reshape(2, 2).copy(), out); "
                "print(out.tolist())")
        res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=60, cwd="/")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "[3, -1]"
    finally:
        shutil.rmtree(top)
