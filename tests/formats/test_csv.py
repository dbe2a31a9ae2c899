"""CSV: iogen's fixed-width tables read as DLIO's (csv module), rows as byte ranges, DLIO's
variable-width tables indexed by their line ends, and broken tables named."""
import csv

import numpy as np
import pytest

from iogen.errors import DataError
from iogen.formats import make_format
from iogen.formats.base import RecordError, sample_bytes
from iogen.common.checksum import file_crc32c

N, VALUES = 12, 50


def write(tmp_path, n=N, values=VALUES, name="t.csv"):
    fmt = make_format("csv", samples_per_file=n)
    path = str(tmp_path / name)
    size, crc = fmt.write_file_crc(path, n, values, 42, 5)
    assert crc == file_crc32c(path)
    return fmt, path, size


def test_a_csv_reader_gets_the_samples_values(tmp_path):
    fmt, path, size = write(tmp_path)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == [""] + [str(j) for j in range(VALUES)]  # pandas's header, unnamed index
    assert len(rows) == N + 1
    for i, row in enumerate(rows[1:]):
        assert int(row[0]) == i
        assert [int(v) for v in row[1:]] == sample_bytes(42, 5, i, VALUES).tolist()
    index = fmt.index_file(path)
    fixed = fmt.fixed_index(N, VALUES)
    assert np.array_equal(index.offsets, fixed.offsets) and index.file_bytes == size
    assert set(index.lengths.tolist()) == {2 + 4 * VALUES + 1}  # index "00".."11", ",ddd" each, "\n"
    got = fmt.read_samples(path, [11, 3])
    assert got[0].tolist() == sample_bytes(42, 5, 11, VALUES).tolist() and got[1].dtype == np.uint8
    assert fmt.check_file(path, N, VALUES) == []
    shape = fmt.probe_file(path)
    assert (shape.samples, shape.record_bytes, shape.dtype) == (N, VALUES, "uint8")


def test_dlio_variable_width_tables_are_indexed_by_line_ends(tmp_path):
    rng = np.random.default_rng(3)
    table = rng.integers(0, 255, size=(7, 9))
    path = tmp_path / "dlio.csv"
    with open(path, "w", newline="") as fh:  # what pandas' to_csv writes
        w = csv.writer(fh, lineterminator="\n")
        w.writerow([""] + list(range(9)))
        for i, row in enumerate(table):
            w.writerow([i] + row.tolist())
    fmt = make_format("csv", samples_per_file=7)
    index = fmt.index_file(str(path))
    assert len(index) == 7 and len(set(index.lengths.tolist())) > 1
    assert fmt.read_samples(str(path), [6])[0].tolist() == table[6].tolist()
    assert fmt.check_file(str(path), 7, 9) == []


def test_broken_tables_are_named(tmp_path):
    fmt, path, _ = write(tmp_path)
    with open(path, "rb") as fh:
        data = fh.read()
    cut = tmp_path / "cut.csv"
    cut.write_bytes(data[:-10])
    with pytest.raises(DataError, match="no line end"):
        fmt.index_file(str(cut))
    bad = tmp_path / "header.csv"
    bad.write_bytes(b"a,b,c\n" + data[data.index(b"\n") + 1:])
    with pytest.raises(DataError, match="header line"):
        fmt.index_file(str(bad))
    letters = tmp_path / "letters.csv"
    letters.write_bytes(data[:-4] + b"x12\n")
    assert "not an integer" in " ".join(fmt.check_file(str(letters), N, VALUES))
    assert str(letters) in str(pytest.raises(DataError, fmt.read_samples, str(letters), [N - 1]).value)
    buf = np.frombuffer(data, np.uint8).copy()
    idx = fmt.index_file(path)
    buf[idx.offsets[2] + idx.lengths[2] - 1] = ord("7")  # row 2 loses its line end
    with pytest.raises(RecordError):
        fmt.payload_spans(buf, idx.offsets, idx.lengths)
