""".npy: numpy.load opens iogen's files, rows are byte ranges after a page-aligned header, DLIO's
(d1, d2, samples) files are read as x[..., i], and bad headers are DataErrors naming the file."""
import numpy as np
import pytest

from iogen.errors import DataError
from iogen.formats import make_format
from iogen.formats.base import sample_bytes
from iogen.common.checksum import file_crc32c


def write(tmp_path, n=5, rb=1000, dtype="uint8", dims=None, name="f.npy", stream=3):
    fmt = make_format("npy", record_dtype=dtype, record_dims=dims, samples_per_file=n)
    path = str(tmp_path / name)
    size, crc = fmt.write_file_crc(path, n, rb, 42, stream)
    assert crc == file_crc32c(path)
    return fmt, path, size


@pytest.mark.parametrize("dtype, dims, rb", [("uint8", None, 1000), ("float32", [10, 25], 1000),
                                             ("int16", None, 4098)])
def test_numpy_loads_it_and_rows_are_the_samples_bytes(tmp_path, dtype, dims, rb):
    fmt, path, size = write(tmp_path, rb=rb, dtype=dtype, dims=dims)
    arr = np.load(path)
    assert arr.shape == (5,) + fmt.record_shape(rb) and arr.dtype == np.dtype(dtype)
    index = fmt.index_file(path)
    assert index.offsets[0] == 4096 and size == 4096 + 5 * rb  # data page-aligned
    fixed = fmt.fixed_index(5, rb)
    assert np.array_equal(index.offsets, fixed.offsets) and np.array_equal(index.lengths, fixed.lengths)
    with open(path, "rb") as fh:
        data = fh.read()
    for i in range(5):
        want = sample_bytes(42, 3, i, rb)
        assert data[index.offsets[i]:index.offsets[i] + rb] == want.tobytes()
        assert np.ascontiguousarray(arr[i]).view(np.uint8).reshape(-1).tobytes() == want.tobytes()
    got = fmt.read_samples(path, [4, 0])
    assert got[0].tobytes() == arr[4].tobytes() and got[1].tobytes() == arr[0].tobytes()  # NaNs: bytes
    assert fmt.check_file(path, 5, rb) == []
    shape = fmt.probe_file(path)
    assert (shape.samples, shape.record_bytes, shape.layout) == (5, rb, "rows")


def test_dlio_layout_is_read_as_strided_samples(tmp_path):
    x = np.random.default_rng(1).integers(0, 255, size=(8, 8, 6), dtype=np.uint8)
    path = str(tmp_path / "dlio.npy")
    np.save(path, x)
    fmt = make_format("npy", samples_per_file=6)
    assert fmt.index_file(path) is None
    assert np.array_equal(fmt.read_samples(path, [2])[0], x[..., 2])
    shape = fmt.probe_file(path)
    assert (shape.samples, shape.record_bytes, shape.layout) == (6, 64, "dlio")


def test_bad_headers_name_the_file(tmp_path):
    fmt, path, _ = write(tmp_path)
    with open(path, "rb") as fh:
        data = fh.read()
    cases = {"magic": b"XNUMPY" + data[6:], "version": data[:6] + b"\x09\x00" + data[8:],
             "dict": data[:10] + b"{'descr': 'zz', " + data[26:], "cut": data[:5000],
             "short header": data[:20]}
    for what, content in cases.items():
        p = tmp_path / f"{what}.npy"
        p.write_bytes(content)
        with pytest.raises(DataError) as err:
            fmt.index_file(str(p))
        assert str(p) in str(err.value), what
        assert fmt.check_file(str(p), 5, 1000), what
    other = tmp_path / "shape.npy"
    np.save(other, np.zeros((5, 999), np.uint8))
    assert "expected (5, 1000)" in " ".join(fmt.check_file(str(other), 5, 1000))
