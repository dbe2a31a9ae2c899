"""HDF5: DLIO's layout, contiguous data streamed by pwrite, chunking and compression, h5py/h5dump interop."""
import shutil
import subprocess

import numpy as np
import pytest

from iogen.errors import DataError
from iogen.formats import get_format, make_format
from iogen.formats.base import sample_bytes
from iogen.common.checksum import crc32c

h5py = pytest.importorskip("h5py")

SEED, STREAM = 21, 4
VARIANTS = [
    {},
    {"enable_chunking": True},
    {"enable_chunking": True, "chunk_size": 256},
    {"compression": "gzip", "compression_level": 1},
    {"compression": "gzip", "chunk_size": 100},
    {"compression": "lzf"},
]


def write(tmp_path, name="a.hdf5", n=3, record_bytes=1000, **kw):
    fmt = make_format("hdf5", samples_per_file=n, **kw)
    path = tmp_path / name
    size, crc = fmt.write_file_crc(path, n, record_bytes, SEED, STREAM)
    return fmt, path, size, crc


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "contiguous")
def test_round_trip_every_variant(tmp_path, kw):
    fmt, path, size, crc = write(tmp_path, **kw)
    raw = path.read_bytes()
    assert size == len(raw) and crc == crc32c(raw)
    expected = [sample_bytes(SEED, STREAM, i, 1000) for i in range(3)]
    with h5py.File(path, "r") as f:
        assert f["records"].shape == (3, 1000) and f["records"].dtype == np.uint8
        assert f["labels"][:].tolist() == [0, 0, 0]
        assert all(np.array_equal(f["records"][i], expected[i]) for i in range(3))
        assert f["records"].compression == (None if "compression" not in kw else kw["compression"])
    index = fmt.index_file(path)
    if index is not None:
        assert index.lengths.tolist() == [1000] * 3
        for i in range(3):
            assert raw[index.offsets[i]:index.offsets[i] + 1000] == expected[i].tobytes()
    assert [s.tobytes() for s in fmt.read_samples(path, [2, 0])] == [expected[2].tobytes(), expected[0].tobytes()]
    assert fmt.check_file(path, 3, 1000) == []
    # byte-identical reruns (no timestamps in the file)
    fmt.write_file(tmp_path / "again.hdf5", 3, 1000, SEED, STREAM)
    assert (tmp_path / "again.hdf5").read_bytes() == raw


def test_which_variants_are_byte_addressable(tmp_path):
    contiguous, path, _, _ = write(tmp_path, "c.hdf5")
    index = contiguous.index_file(path)
    assert index.offsets[0] % 4096 == 0  # page-aligned records
    # one whole sample per chunk, no filter: still byte ranges (one chunk per sample)
    chunked, path, _, _ = write(tmp_path, "k.hdf5", enable_chunking=True)
    assert chunked.index_file(path) is not None
    partial, path, _, _ = write(tmp_path, "p.hdf5", enable_chunking=True, chunk_size=256)
    assert partial.index_file(path) is None
    gz, path, _, _ = write(tmp_path, "g.hdf5", compression="gzip")
    assert gz.index_file(path) is None


def test_record_dims_and_element_type_like_deepcam(tmp_path):
    wl_dataset = type("D", (), dict(format="hdf5", compression="none", compression_level=4,
                                    record_element_type="float32", record_dims=[4, 6, 5],
                                    num_samples_per_file=2, enable_chunking=False, chunk_size=0))
    fmt = get_format(wl_dataset)
    rb = 4 * 6 * 5 * 4
    fmt.write_file(tmp_path / "d.hdf5", 2, rb, SEED, STREAM)
    with h5py.File(tmp_path / "d.hdf5", "r") as f:
        assert f["records"].shape == (2, 4, 6, 5) and f["records"].dtype == np.float32
        first = f["records"][1]
    assert first.tobytes() == sample_bytes(SEED, STREAM, 1, rb).tobytes()
    assert fmt.read_samples(tmp_path / "d.hdf5", [1])[0].shape == (4, 6, 5)
    assert fmt.index_file(tmp_path / "d.hdf5").lengths.tolist() == [rb, rb]
    chunked = make_format("hdf5", compression="gzip", record_dtype="float32", record_dims=(4, 6, 5),
                          chunk_size=2 * 6 * 5 * 4)
    assert chunked.chunk_shape((4, 6, 5)) == (1, 2, 6, 5)
    chunked.write_file(tmp_path / "e.hdf5", 2, rb, SEED, STREAM)
    assert chunked.read_samples(tmp_path / "e.hdf5", [1])[0].tobytes() == first.tobytes()


def test_reads_dlio_style_files_written_by_h5py(tmp_path):
    records = np.random.default_rng(2).integers(0, 255, (4, 8, 8), dtype=np.uint8)
    with h5py.File(tmp_path / "img_0_of_1.hdf5", "w") as f:
        f.create_dataset("records", data=records)
        f.create_dataset("labels", data=[0] * 4)
    fmt = make_format("hdf5", samples_per_file=4)
    index = fmt.index_file(tmp_path / "img_0_of_1.hdf5")
    raw = (tmp_path / "img_0_of_1.hdf5").read_bytes()
    assert raw[index.offsets[3]:index.offsets[3] + 64] == records[3].tobytes()
    assert np.array_equal(fmt.read_samples(tmp_path / "img_0_of_1.hdf5", [2])[0], records[2])


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump (Debian hdf5-tools) is not installed")
@pytest.mark.parametrize("kw", [{}, {"compression": "gzip"}, {"enable_chunking": True, "record_dtype": "float32"}])
def test_h5dump_reads_iogen_files(tmp_path, kw):
    # (no LZF case: that filter is h5py's own, h5dump does not have it)
    _, path, _, _ = write(tmp_path, n=2, record_bytes=64, **kw)
    done = subprocess.run(["h5dump", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 'DATASET "records"' in done.stdout and "SIMPLE { ( 2, " in done.stdout


def test_missing_truncated_and_corrupt_files(tmp_path):
    fmt, path, size, _ = write(tmp_path, n=3, record_bytes=5000)
    with pytest.raises(DataError, match="missing"):
        fmt.index_file(tmp_path / "nope.hdf5")
    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(path.read_bytes()[: size - 3000])
    with pytest.raises(DataError) as err:
        fmt.index_file(cut)
    assert err.value.path == str(cut) and err.value.offset is not None
    assert fmt.check_file(cut, 3, 5000)
    junk = tmp_path / "junk.hdf5"
    junk.write_bytes(b"not an hdf5 file at all" * 10)
    with pytest.raises(DataError) as err:
        fmt.read_samples(junk, [0])
    assert err.value.path == str(junk)
    gz, gpath, gsize, _ = write(tmp_path, "g.hdf5", n=2, record_bytes=5000, compression="gzip")
    raw = bytearray(gpath.read_bytes())
    with h5py.File(gpath, "r") as f:  # find the first chunk, to damage it
        chunk = f["records"].id.get_chunk_info_by_coord((0, 0))
    raw[chunk.byte_offset + 10: chunk.byte_offset + 40] = bytes(30)
    gpath.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        gz.read_samples(gpath, [0])
    assert err.value.path == str(gpath)
    assert gz.check_file(gpath, 2, 5000)
