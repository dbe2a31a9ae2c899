"""NPZ: streaming writer, zip/npy index, decode path, structure checks, numpy interop."""
import os
import zipfile
import zlib

import numpy as np
import pytest

from iogen.errors import DataError
from iogen.formats import get_format, make_format
from iogen.formats.base import sample_bytes
from iogen.common.checksum import crc32c

SEED, STREAM = 11, 5


def write(tmp_path, name="a.npz", n=3, record_bytes=1000, **kw):
    fmt = make_format("npz", samples_per_file=n, **kw)
    path = tmp_path / name
    size, crc = fmt.write_file_crc(path, n, record_bytes, SEED, STREAM)
    return fmt, path, size, crc


def test_round_trip_index_ranges_hold_the_written_bytes(tmp_path):
    fmt, path, size, crc = write(tmp_path)
    raw = path.read_bytes()
    assert size == len(raw) and crc == crc32c(raw)
    index = fmt.index_file(path)
    assert index.framing == "raw" and index.lengths.tolist() == [1000] * 3
    # the padding extra field puts x's data on a page boundary
    assert index.offsets[0] % 4096 == 0
    for i in range(3):
        got = raw[index.offsets[i]:index.offsets[i] + index.lengths[i]]
        assert got == sample_bytes(SEED, STREAM, i, 1000).tobytes()
    samples = fmt.read_samples(path, [2, 0, 2])
    assert [s.tobytes() for s in samples] == [sample_bytes(SEED, STREAM, i, 1000).tobytes() for i in (2, 0, 2)]
    assert fmt.check_file(path, 3, 1000) == []


def test_numpy_load_reads_iogen_files(tmp_path):
    _, path, _, _ = write(tmp_path, n=4, record_bytes=64)
    with np.load(path) as data:
        assert set(data.files) == {"x", "y"}
        x, y = data["x"], data["y"]
    assert x.shape == (4, 64) and x.dtype == np.uint8
    assert y.tolist() == [0, 0, 0, 0]
    assert x[3].tobytes() == sample_bytes(SEED, STREAM, 3, 64).tobytes()
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None  # member CRCs are right


def test_element_type_and_record_dims(tmp_path):
    fmt, path, _, _ = write(tmp_path, n=2, record_bytes=4 * 6, record_dtype="float32", record_dims=(2, 3))
    with np.load(path) as data:
        assert data["x"].shape == (2, 2, 3) and data["x"].dtype == np.float32
    assert [s.shape for s in fmt.read_samples(path, [1])] == [(2, 3)]
    assert fmt.index_file(path).lengths.tolist() == [24, 24]
    assert fmt.check_file(path, 2, 24) == []
    assert fmt.check_file(path, 3, 24) != []


def test_byte_identical_for_same_seed_and_different_per_stream(tmp_path):
    fmt, a, _, _ = write(tmp_path, "a.npz")
    fmt.write_file(tmp_path / "b.npz", 3, 1000, SEED, STREAM)
    fmt.write_file(tmp_path / "c.npz", 3, 1000, SEED, STREAM + 1)
    assert a.read_bytes() == (tmp_path / "b.npz").read_bytes()
    assert a.read_bytes() != (tmp_path / "c.npz").read_bytes()


def test_content_is_incompressible_and_padding_small(tmp_path):
    fmt, path, size, _ = write(tmp_path, n=1, record_bytes=1 << 16)
    assert size < (1 << 16) + 4096 + 512  # one page of alignment padding at most, in the local header
    with zipfile.ZipFile(path) as zf:
        assert len(zf.getinfo("x.npy").extra) <= 28  # the central directory carries no padding
    start = int(fmt.index_file(path).offsets[0])
    payload = path.read_bytes()[start:start + (1 << 16)]
    assert len(zlib.compress(payload, 6)) > len(payload)


def test_compressed_variant_decodes_and_has_no_index(tmp_path):
    fmt, path, size, crc = write(tmp_path, n=3, record_bytes=500, compression="zip", compression_level=1)
    assert crc == crc32c(path.read_bytes())
    assert not fmt.byte_addressable and fmt.index_file(path) is None
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("x.npy").compress_type == zipfile.ZIP_DEFLATED
    with np.load(path) as data:
        x = data["x"]
    got = fmt.read_samples(path, [2, 1])
    assert got[0].tobytes() == x[2].tobytes() == sample_bytes(SEED, STREAM, 2, 500).tobytes()
    assert got[1].tobytes() == x[1].tobytes()
    assert fmt.check_file(path, 3, 500) == []
    # the stored format notices that a file is compressed
    assert any("compress" in p for p in make_format("npz").check_file(path, 3, 500))


def test_reads_numpy_savez_files_in_both_layouts(tmp_path):
    rows = np.arange(3 * 8, dtype=np.uint8).reshape(3, 8)
    np.savez(tmp_path / "rows.npz", x=rows, y=np.zeros(3))
    fmt = make_format("npz", samples_per_file=3)
    index = fmt.index_file(tmp_path / "rows.npz")
    raw = (tmp_path / "rows.npz").read_bytes()
    assert raw[index.offsets[1]:index.offsets[1] + 8] == rows[1].tobytes()
    # DLIO's layout: x shaped (dim, dim, samples); a sample is x[..., i], not a byte range
    dlio = np.random.default_rng(0).integers(0, 255, (4, 4, 3), dtype=np.uint8)
    np.savez(tmp_path / "dlio.npz", x=dlio, y=[0, 0, 0])
    assert fmt.index_file(tmp_path / "dlio.npz") is None
    got = fmt.read_samples(tmp_path / "dlio.npz", [2])
    assert np.array_equal(got[0], dlio[..., 2])
    # one sample per file: the whole array is the sample, byte-addressable
    np.savez(tmp_path / "one.npz", x=dlio[..., :1], y=[0])
    one = make_format("npz", samples_per_file=1)
    index = one.index_file(tmp_path / "one.npz")
    assert index.lengths.tolist() == [16]
    np.savez_compressed(tmp_path / "dz.npz", x=dlio, y=[0, 0, 0])
    got = make_format("npz", compression="zip", samples_per_file=3).read_samples(tmp_path / "dz.npz", [0, 2])
    assert np.array_equal(got[1], dlio[..., 2])


def test_missing_truncated_and_corrupt_files_raise_data_error(tmp_path):
    fmt, path, size, _ = write(tmp_path, n=3, record_bytes=5000)
    with pytest.raises(DataError, match="missing") as err:
        fmt.index_file(tmp_path / "nope.npz")
    assert err.value.path.endswith("nope.npz")
    raw = path.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(raw[: size // 2])
    with pytest.raises(DataError) as err:
        fmt.index_file(cut)
    assert err.value.path == str(cut) and err.value.offset == size // 2
    problems = fmt.check_file(cut, 3, 5000)
    assert problems and "offset" in problems[0]
    # a corrupt local header is found at its offset
    bad = bytearray(raw)
    bad[0:4] = b"XXXX"
    (tmp_path / "bad.npz").write_bytes(bytes(bad))
    with pytest.raises(DataError) as err:
        fmt.read_samples(tmp_path / "bad.npz", [0])
    assert err.value.offset == 0
    with pytest.raises(DataError, match="sample 3"):
        fmt.read_samples(path, [3])


def test_corrupt_compressed_member_is_a_data_error(tmp_path):
    fmt, path, size, _ = write(tmp_path, n=2, record_bytes=4000, compression="zip")
    raw = bytearray(path.read_bytes())
    raw[size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        fmt.read_samples(path, [1])
    assert err.value.path == str(path)


def test_get_format_from_dataset_section(workload):
    fmt = get_format(workload(compression="zip").dataset)
    assert fmt.name == "npz" and fmt.suffix == "npz" and fmt.compression == "zip"
    assert fmt.samples_per_file == 3
    from iogen.errors import ConfigError
    with pytest.raises(ConfigError, match="compression"):
        get_format(workload(compression="gzip").dataset)
    with pytest.raises(ConfigError, match="format"):
        get_format(workload(format="hdf5_opt").dataset)


def test_large_sample_written_in_chunks_matches_reference(tmp_path):
    # several write chunks per sample, and a sample size that is not a multiple of 8
    fmt, path, _, _ = write(tmp_path, n=2, record_bytes=(1 << 20) * 2 + 13)
    index = fmt.index_file(path)
    with open(path, "rb") as f:
        f.seek(int(index.offsets[1]))
        assert f.read(int(index.lengths[1])) == sample_bytes(SEED, STREAM, 1, (1 << 20) * 2 + 13).tobytes()
    assert os.path.getsize(path) > 2 * ((1 << 20) * 2 + 13)
