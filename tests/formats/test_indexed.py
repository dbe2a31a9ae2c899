"""indexed_binary / mmap_indexed_binary: DLIO's data file plus .off.idx and .sz.idx index files; samples are
the ranges the index names (pread, or copied out of a memory map), and bad index files are DataErrors
naming the index file and the entry's byte offset."""
import os

import numpy as np
import pytest

from iogen.errors import DataError, ReadFailure
from iogen.formats import make_format
from iogen.formats.base import sample_bytes
from iogen.common.checksum import file_crc32c

NAMES = ("indexed_binary", "mmap_indexed_binary")


def write(tmp_path, name="indexed_binary", n=6, rb=1000, stream=3):
    """A data file of fmt and its index files, as datagen writes them."""
    fmt = make_format(name, samples_per_file=n)
    path = str(tmp_path / f"img_0_of_1.{fmt.suffix}")
    size, crc = fmt.write_file_crc(path, n, rb, 42, stream)
    assert (size, crc) == (n * rb, file_crc32c(path))
    for suffix, data in fmt.sidecar_images(n, rb):
        with open(path + suffix, "wb") as fh:
            fh.write(data)
    return fmt, path


@pytest.mark.parametrize("name", NAMES)
def test_index_files_are_dlio_s_and_samples_are_their_ranges(tmp_path, name):
    fmt, path = write(tmp_path, name)
    assert fmt.sidecar_suffixes == (".off.idx", ".sz.idx") and fmt.suffix == name
    # DLIO's reader: np.int64 offsets and sizes, num_samples_per_file of each
    offsets = np.fromfile(path + ".off.idx", np.int64)
    sizes = np.fromfile(path + ".sz.idx", np.int64)
    assert offsets.tolist() == [j * 1000 for j in range(6)] and sizes.tolist() == [1000] * 6
    index = fmt.index_file(path)
    assert index.offsets.tolist() == offsets.tolist() and index.lengths.tolist() == sizes.tolist()
    got = fmt.read_samples(path, [5, 0, 2])
    assert [g.tobytes() for g in got] == [sample_bytes(42, 3, j, 1000).tobytes() for j in (5, 0, 2)]
    assert fmt.check_file(path, 6, 1000) == []
    shape = fmt.probe_file(path)
    assert (shape.samples, shape.record_bytes, shape.layout) == (6, 1000, "rows")
    assert fmt.fixed_index(6, 1000) is None  # the index files are read, as DLIO reads them
    part = fmt.sidecar_images(6, 1000, 2, 4)  # entries [2, 4): what a writer streams
    assert [np.frombuffer(d, "<u8").tolist() for _, d in part] == [[2000, 3000], [1000, 1000]]


def test_files_differ_by_stream(tmp_path):
    fmt = make_format("indexed_binary")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fmt.write_file(a, 4, 64, 42, 1)
    fmt.write_file(b, 4, 64, 42, 2)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() != fb.read()


def _damage(path, suffix, data):
    with open(path + suffix, "wb") as fh:
        fh.write(data)


@pytest.mark.parametrize("case, file, offset, words", [
    ("truncated", ".off.idx", 40, "not a whole number"),
    ("counts", ".sz.idx", 40, "holds 5 sizes"),
    ("past end", ".off.idx", 24, "runs past the end"),
    ("huge", ".off.idx", 8, "runs past the end"),
    ("workload count", ".off.idx", 48, "dataset.num_samples_per_file"),
    ("missing", ".sz.idx", None, "is missing"),
])
def test_bad_index_files_name_the_file_and_offset(tmp_path, case, file, offset, words):
    fmt, path = write(tmp_path)
    off = np.arange(6, dtype="<u8") * 1000
    if case == "truncated":
        _damage(path, ".off.idx", off.tobytes()[:-3])
    elif case == "counts":
        _damage(path, ".sz.idx", np.full(5, 1000, "<u8").tobytes())
    elif case == "past end":
        off[3] = 5500
        _damage(path, ".off.idx", off.tobytes())
    elif case == "huge":
        off[1] = 2**64 - 1
        _damage(path, ".off.idx", off.tobytes())
    elif case == "workload count":
        fmt = make_format("indexed_binary", samples_per_file=7)
    else:
        os.unlink(path + ".sz.idx")
    with pytest.raises(DataError) as err:
        fmt.index_file(path)
    assert err.value.path == path + file and err.value.offset == offset and words in err.value.message
    if case != "workload count":
        assert fmt.check_file(path, 6, 1000)  # verify names it too
        with pytest.raises(DataError):
            fmt.probe_file(path)


def test_check_file_finds_another_layout(tmp_path):
    fmt, path = write(tmp_path)
    assert "expected 7" in fmt.check_file(path, 7, 1000)[0]
    _damage(path, ".sz.idx", np.full(6, 999, "<u8").tobytes())
    assert "not iogen's layout" in fmt.check_file(path, 6, 1000)[0]


def test_mapped_reads_copy_the_ranges_and_stop_at_the_end(tmp_path):
    fmt, path = write(tmp_path, "mmap_indexed_binary")
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = np.zeros(3000, np.uint8)
        n = fmt.read_mapped(np.array([fd, fd, fd]), np.array([5000, 0, 2000]), np.full(3, 1000),
                            np.full(3, 1000), buf, np.array([0, 1000, 2000]))
        assert n == 3000
        assert buf.tobytes() == b"".join(sample_bytes(42, 3, j, 1000).tobytes() for j in (5, 0, 2))
        with pytest.raises(ReadFailure) as err:
            fmt.read_mapped(np.array([fd, fd]), np.array([0, 5500]), np.full(2, 1000), np.full(2, 1000), buf,
                            np.array([0, 1000]))
        assert (err.value.index, err.value.offset, err.value.nread) == (1, 5500, 500)
    finally:
        os.close(fd)
    # no map outlives the call: a descriptor number reused for another file reads that file
    other = str(tmp_path / "other")
    fmt.write_file(other, 6, 1000, 42, 9)
    fd2 = os.open(other, os.O_RDONLY)
    try:
        buf = np.zeros(1000, np.uint8)
        fmt.read_mapped(np.array([fd2]), np.array([0]), np.array([1000]), np.array([1000]), buf, None)
        assert buf.tobytes() == sample_bytes(42, 9, 0, 1000).tobytes()
    finally:
        os.close(fd2)


def test_mapped_reads_are_page_faults(tmp_path):
    import resource

    def faults():
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_minflt + ru.ru_majflt

    fmt = make_format("mmap_indexed_binary")
    path = str(tmp_path / "big")
    fmt.write_file(path, 8, 4 << 20, 42, 1)  # 8 samples 4 MiB apart: no fault can map two of them
    offsets = np.arange(8, dtype=np.int64) * (4 << 20)
    ones = np.ones(8, np.int64)
    buf = np.ones(8, np.uint8)  # touched: its own pages fault before the count starts
    fd = os.open(path, os.O_RDONLY)
    try:
        before = faults()
        fmt.read_mapped(np.full(8, fd), offsets, ones, ones, buf, None)
        assert faults() - before >= 8  # one fault a sample at least: the faults are the reads
        assert buf.tolist() == [sample_bytes(42, 1, j, 4 << 20)[0] for j in range(8)]
    finally:
        os.close(fd)
