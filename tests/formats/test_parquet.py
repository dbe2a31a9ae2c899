"""Parquet: files pyarrow reads with the declared schema, group ranges equal to pyarrow's reads,
footers checked against the workload, and the config's parquet section."""
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError, DataError
from iogen.formats import make_format
from iogen.common.checksum import file_crc32c
from iogen.formats.parquet import coalesce

COLS = [("a", "float32", 1, True), ("b", "float16", 3, False), ("c", "int8", 1, True), ("d", "float64", 5, True),
        ("e", "int32", 2, False)]
ROW = 4 + 6 + 1 + 40 + 8
ROWS, GROUP = 250, 64


def fmt(codec="none", cols=COLS, group=GROUP, rows=ROWS):
    return make_format("parquet", compression=codec, columns=cols, row_group_size=group, samples_per_file=rows)


def write(tmp_path, name="f.parquet", stream=1, codec="none", **kw):
    f = fmt(codec, **kw)
    path = str(tmp_path / name)
    size, crc = f.write_file_crc(path, kw.get("rows", ROWS), ROW if "cols" not in kw else f.row_bytes, 42, stream)
    assert size == os.path.getsize(path) and crc == file_crc32c(path)
    return f, path


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "lz4", "zstd"])
def test_pyarrow_reads_the_declared_schema_row_groups_and_codec(tmp_path, codec):
    f, path = write(tmp_path, codec=codec)
    table = pq.read_table(path, schema=f.arrow_schema())
    assert table.num_rows == ROWS and table.schema.equals(f.arrow_schema())
    assert str(table.schema.field("d").type) == "fixed_size_list<element: double not null>[5]"
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [64, 64, 64, 58]
    want = {"none": "UNCOMPRESSED", "lz4": "LZ4_RAW"}.get(codec, codec.upper())
    assert {meta.row_group(0).column(j).compression for j in range(5)} <= {want, "LZ4"}
    shape = f.probe_file(path)
    assert (shape.samples, shape.record_bytes, shape.compression) == (ROWS, ROW, codec)
    assert f.check_file(path, ROWS, ROW) == []


def test_content_is_seeded_and_unique_per_file(tmp_path):
    _, p1 = write(tmp_path, "1.parquet", stream=1)
    _, p1b = write(tmp_path, "1b.parquet", stream=1)
    _, p2 = write(tmp_path, "2.parquet", stream=2)
    with open(p1, "rb") as x, open(p1b, "rb") as y:
        assert x.read() == y.read()
    a, b = pq.read_table(p1), pq.read_table(p2)
    assert not np.array_equal(a.column("a").to_numpy().view(np.uint32), b.column("a").to_numpy().view(np.uint32))


class Recording:
    """A file object that records every (offset, length) read through it."""

    def __init__(self, path):
        self.fh = open(path, "rb")
        self.reads = []
        self.closed = False

    def read(self, n=-1):
        at = self.fh.tell()
        data = self.fh.read(n)
        self.reads.append((at, len(data)))
        return data

    def seek(self, *a):
        return self.fh.seek(*a)

    def tell(self):
        return self.fh.tell()

    def seekable(self):
        return True

    def readable(self):
        return True

    def close(self):
        self.fh.close()


def covered(ranges) -> list:
    """The bytes a set of ranges covers, as sorted disjoint (offset, length) runs."""
    return coalesce(ranges, hole=0, limit=1 << 62)


@pytest.mark.parametrize("codec, rows, group, ranges", [("none", ROWS, GROUP, 1), ("zstd", ROWS, GROUP, 1),
                                                        ("none", 9000, 4096, 2), ("gzip", 9000, 4096, 2)])
def test_group_ranges_are_the_bytes_pyarrow_reads_for_the_selected_columns(tmp_path, codec, rows, group, ranges):
    f, path = write(tmp_path, codec=codec, rows=rows, group=group)
    gi = f.group_index(path)
    assert list(gi.first_row) == list(range(0, rows, group)) + [rows]
    # small chunks: one coalesced range; 4096 rows: column b (24 KiB, not read) leaves a gap
    assert len(gi.ranges(0)[0]) == ranges
    for g in range(gi.groups):
        rec = Recording(path)
        pf = pq.ParquetFile(rec)  # pyarrow's defaults, as DLIO's fork calls it
        rec.reads.clear()  # the footer: read once per file, apart
        pf.read_row_group(g, columns=f.selected_columns)
        offs, lens = gi.ranges(g)
        assert covered(rec.reads) == covered(zip(offs, lens)), g
        rec.close()


def test_read_samples_gives_each_rows_selected_bytes(tmp_path):
    f, path = write(tmp_path)
    table = pq.read_table(path)
    parts = []
    for name, dt, width, read in COLS:
        if read:
            col = table.column(name).combine_chunks()
            values = col.flatten() if width > 1 else col
            parts.append(values.to_numpy().astype(dt).reshape(ROWS, width).view(np.uint8))
    want = np.concatenate(parts, axis=1)
    ids = [0, 63, 64, 249, 64]
    for r, s in zip(ids, f.read_samples(path, ids)):
        assert s.nbytes == 4 + 1 + 40 and np.array_equal(f.payload_of(s), want[r])
    # a batch's rows: runs copied from the cached columns (fresh groups, cached ones, into a given
    # array), scattered rows gathered; bytes counted for the row groups fetched now only
    for ids in ([5, 6, 7, 63, 64, 65, 200], list(range(70, 130)), [249, 3, 64, 64, 0, 1, 2, 3, 4]):
        f.new_epoch()
        fresh = f.decode_payloads(path, ids)
        assert fresh[0] > 0 and np.array_equal(fresh[1], want[ids])
        out = np.zeros((len(ids), 45), np.uint8)
        assert f.decode_payloads(path, ids, out=out)[0] == 0 and np.array_equal(out, want[ids])


def _expect_error(f, path, *words):
    with pytest.raises(DataError) as err:
        f.metadata(path)
    text = str(err.value)
    assert path in text
    for w in words:
        assert w in text, text


def test_bad_files_are_data_errors_naming_file_and_what_differs(tmp_path):
    f, path = write(tmp_path)
    with open(path, "rb") as fh:
        data = fh.read()

    def variant(name, content):
        p = tmp_path / name
        p.write_bytes(content)
        return str(p)

    _expect_error(f, variant("magic.parquet", b"XXXX" + data[4:]), "not a Parquet file")
    _expect_error(f, variant("cut.parquet", data[:-50]), "truncated")
    n = int.from_bytes(data[-8:-4], "little")
    footer_at = len(data) - 8 - n
    _expect_error(f, variant("footer.parquet", data[:footer_at] + b"\x07" * n + data[-8:]), "corrupt Parquet footer")
    # a truncated column chunk: the file ends before a chunk the footer names
    _expect_error(f, variant("chunk.parquet", data[:200] + data[footer_at:]), "not inside the file")
    # another dtype, a missing column, another row-group size, another row count
    _, p = write(tmp_path, "dtype.parquet", cols=[("a", "float64", 1, True)] + COLS[1:])
    _expect_error(f, p, "column 'a' is double", "declares float")
    _, p = write(tmp_path, "missing.parquet", cols=COLS[:4])
    _expect_error(f, p, "column 'e' is missing")
    _, p = write(tmp_path, "groups.parquet", group=100)
    _expect_error(f, p, "row group 0 holds 100 rows", "row_group_size 64")
    _, p = write(tmp_path, "rows.parquet", rows=200)
    _expect_error(f, p, "holds 200 rows", "num_samples_per_file is 250")
    _, p = write(tmp_path, "codec.parquet", codec="snappy")
    _expect_error(f, p, "column 'a'", "compressed with snappy")


DLRM_LIKE = {
    "format": "parquet", "num_files_train": 1, "num_samples_per_file": 100, "record_length": 13,
    "parquet": {"row_group_size": 10, "read_mode": "row_group",
                "columns": [{"name": "x", "dtype": "float32", "read": True},
                            {"name": "y", "dtype": "float64", "read": False},
                            {"name": "z", "dtype": "int8", "read": False}]},
}


def _load(tmp_path, **dataset):
    import yaml

    ds = {**DLRM_LIKE, "data_folder": str(tmp_path / "d"), **dataset}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"model": {"name": "t"}, "dataset": ds,
                                    "reader": {"data_loader": "native", "batch_size": 4},
                                    "train": {"computation_time": 0.0}}))
    return load_workload(str(path), [])


def test_config_accepts_both_published_spellings(tmp_path):
    wl = _load(tmp_path)
    assert wl.dataset.record_length_bytes == 13 and wl.dataset.parquet.row_group_size == 10
    flux = {"parquet": {"columns": [{"name": "t5", "dtype": "float32", "size": 7},
                                    {"name": "ts", "dtype": "float32", "width": 3}]}, "record_length": 40}
    wl = _load(tmp_path, **flux)
    assert wl.dataset.parquet.row_group_size is None and wl.dataset.record_length_bytes == 40
    from iogen.formats import get_format

    assert get_format(wl.dataset).row_group_size == 1024 * 1024  # pyarrow's writer default
    wl = _load(tmp_path, record_length_bytes=13, parquet={**DLRM_LIKE["parquet"], "compression": "zstd"})
    assert wl.dataset.compression == "zstd"


@pytest.mark.parametrize("change, words", [
    ({"columns": [{"name": "x", "dtype": "float128"}]}, ["dataset.parquet.columns", "dtype"]),
    ({"columns": [{"name": "x", "dtype": "float32", "read": False}]}, ["no column has read: true"]),
    ({"read_mode": "default"}, ["read_mode", "not implemented"]),
    ({"bogus": 1}, ["dataset.parquet", "bogus"]),
])
def test_bad_parquet_entries_name_the_key(tmp_path, change, words):
    pq_section = {**DLRM_LIKE["parquet"], **change}
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, parquet=pq_section, record_length=4)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_record_length_must_match_the_columns(tmp_path):
    with pytest.raises(ConfigError, match="a row of the columns holds 13 bytes"):
        _load(tmp_path, record_length=14)


ALL_TYPES = [("f4", "float32", 1, True), ("f2", "float16", 3, False), ("i1", "int8", 1, True),
             ("f8", "float64", 5, True), ("u2", "uint16", 2, False), ("u1", "uint8", 1, True),
             ("u4", "uint32", 1, True), ("u8", "uint64", 1, True), ("i2", "int16", 1, True), ("i4", "int32", 4, True),
             ("i8", "int64", 1, False)]


@pytest.mark.parametrize("rows, group, page, codec, segment", [
    (250, 100, 1 << 20, "none", 8 << 20), (7, 3, 64, "none", 8 << 20), (30, 16, 256, "none", 300),
    (250, 100, 1 << 20, "zstd", 8 << 20), (7, 3, 64, "snappy", 8 << 20), (30, 16, 256, "gzip", 8 << 20),
    (30, 16, 256, "lz4", 8 << 20)])
def test_the_direct_writer_gives_pyarrows_table(tmp_path, monkeypatch, rows, group, page, codec, segment):
    from iogen.formats import parquet_direct

    monkeypatch.setattr(parquet_direct, "PAGE_BYTES", page)  # 64: a page a row, pages of lists too
    monkeypatch.setattr(parquet_direct, "SEGMENT_BYTES", segment)  # 300: a row group in many core calls
    f = fmt(codec, cols=ALL_TYPES, group=group, rows=rows)
    direct, ref = str(tmp_path / "direct.parquet"), str(tmp_path / "ref.parquet")
    size, crc = f.write_file_crc(direct, rows, f.row_bytes, 42, 9)
    assert size == os.path.getsize(direct) and crc == file_crc32c(direct)
    f._write_pyarrow(ref, rows, 42, 9)
    a, b = pq.read_table(ref), pq.read_table(direct, schema=f.arrow_schema())
    assert b.schema.equals(f.arrow_schema()) and b.num_rows == rows
    for name in a.column_names:  # the same values (compared as bytes: NaNs)
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if x.type.num_fields:
            x, y = x.flatten(), y.flatten()
        assert x.to_numpy().tobytes() == y.to_numpy().tobytes(), name
    meta = pq.read_metadata(direct)
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [
        min(group, rows - s) for s in range(0, rows, group)]
    assert f.check_file(direct, rows, f.row_bytes) == [] and f.probe_file(direct).samples == rows
    assert f.variant()["parquet.writer"] == "iogen-direct-1"
    want = {"none": "UNCOMPRESSED", "lz4": "LZ4"}.get(codec, codec.upper())  # pyarrow shows LZ4_RAW as LZ4
    assert meta.row_group(0).column(0).compression == want


def test_the_dlio_forks_generator_knobs_load_with_a_warning(tmp_path):
    section = {**DLRM_LIKE["parquet"], "use_s3dlio_gen": True, "generation_batch_size": 10000}
    with pytest.warns(Warning) as rec:
        wl = _load(tmp_path, parquet=section)
    text = " ".join(str(w.message) for w in rec)
    assert "dataset.parquet.use_s3dlio_gen = True chooses the DLIO fork's" in text
    assert "dataset.parquet.generation_batch_size = 10000" in text
    assert wl.dataset.parquet.row_group_size == 10


@pytest.mark.parametrize("over, words", [
    ({"reader": {"data_loader": "pytorch", "batch_size": 4, "odirect": True}}, "reader.odirect = True"),
    ({"reader": {"data_loader": "native", "batch_size": 4, "reopen_files": True}}, "reader.reopen_files = True"),
])
def test_reader_keys_parquet_cannot_honour_are_refused(tmp_path, over, words):
    import yaml

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"model": {"name": "t"}, "dataset": {**DLRM_LIKE, "data_folder": str(tmp_path)},
                                    "train": {"computation_time": 0.0}, **over}))
    with pytest.raises(ConfigError, match=words):
        load_workload(str(path), [])


def test_other_writers_list_flavours_are_read(tmp_path):
    import pyarrow as pa

    # a variable-size, nullable list column (what a writer without fixed-size lists gives), 2 values a row
    f = fmt(cols=[("a", "float32", 1, True), ("b", "int16", 2, True)], group=10, rows=25)
    table = pa.table({"a": pa.array(np.arange(25, dtype=np.float32)),
                      "b": pa.array([[i, -i] for i in range(25)], type=pa.list_(pa.int16()))})
    path = str(tmp_path / "other.parquet")
    pq.write_table(table, path, row_group_size=10, compression="none")
    assert f.probe_file(path).samples == 25
    got = f.read_samples(path, [7])[0]
    assert got.tobytes() == np.float32(7).tobytes() + np.array([7, -7], np.int16).tobytes()
    pq.write_table(table.set_column(1, "b", pa.array([[i] * 3 for i in range(25)], type=pa.list_(pa.int16(), 3))),
                   path, row_group_size=10, compression="none")
    with pytest.raises(DataError, match="column 'b' is fixed_size_list"):
        fmt(cols=[("a", "float32", 1, True), ("b", "int16", 2, True)], group=10, rows=25).metadata(path)


def test_ragged_or_null_lists_are_data_errors(tmp_path):
    import pyarrow as pa

    f = fmt(cols=[("b", "int16", 2, True)], group=10, rows=3)
    path = str(tmp_path / "ragged.parquet")
    for values, words in (([[1, 2], [3], [4, 5]], "holds 5 values, 3 rows of 2 make 6"),
                          ([[1, 2], None, [4, 5]], "holds nulls")):
        pq.write_table(pa.table({"b": pa.array(values, type=pa.list_(pa.int16()))}), path, compression="none")
        f = fmt(cols=[("b", "int16", 2, True)], group=10, rows=3)  # a fresh object: no cached row group
        with pytest.raises(DataError, match=words):
            f.read_samples(path, [0])


def test_small_footers_stay_cached_past_two_files(tmp_path, monkeypatch):
    import iogen.formats.parquet as parquet

    f = fmt()
    paths = [write(tmp_path, name=f"f{i}.parquet", stream=i)[1] for i in range(3)]
    first = [f.metadata(p) for p in paths]
    # three footers of a few KB: all kept (the bound is their memory), none parsed again
    assert all(f.metadata(p) is m for p, m in zip(paths, first))
    monkeypatch.setattr(parquet, "FOOTER_CACHE_BYTES", 1)
    f = fmt()
    first = [f.metadata(p) for p in paths]
    assert f.metadata(paths[2]) is first[2] and f.metadata(paths[0]) is not first[0]  # 2 kept at least
