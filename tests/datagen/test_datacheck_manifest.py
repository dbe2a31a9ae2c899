"""The data check's manifest comparison by file index and its path formatting: the same answers as by name."""
import json
import os

import pytest

from iogen.config import load_workload
from iogen.data.check import check_dataset
from iogen.data.bulk import DLIO_NAME, _NamePattern, all_paths, dlio_name_counts, listed_files, path_block, stat_layout_sizes
from iogen.data.generate import generate
from iogen.data.layout import DatasetLayout
from iogen.errors import DataError
from iogen.formats import get_format
from iogen.data.manifest import MANIFEST_NAME, FileColumns, manifest_text, read_manifest


def wl_of(tmp_path, **over):
    """A tiny NPZ workload in tmp_path/data (8 files of 4 samples, 4 subfolders unless overridden)."""
    base = {"dataset.format": "npz", "dataset.data_folder": str(tmp_path / "data"),
            "dataset.num_files_train": 8, "dataset.num_samples_per_file": 4,
            "dataset.record_length_bytes": 512, "dataset.record_length_bytes_stdev": 0,
            "dataset.num_subfolders_train": 4, "reader.batch_size": 2, "workflow.generate_data": False}
    base.update(over)
    return load_workload("default", [f"{k}={v}" for k, v in base.items()])


def check(wl):
    return check_dataset(DatasetLayout.from_workload(wl, "train"), get_format(wl.dataset))


@pytest.fixture(params=["iogen", "json"])
def writer(request):
    """How an edited manifest is written: as iogen writes one (the check reads its "files" as columns, in the
    core), or as plain json.dumps (another form: the check parses it as JSON); each edit is checked both ways."""
    return request.param


def edit_manifest(tmp_path, change, writer="json"):
    """Rewrite the train manifest's file list through change(files) -> files."""
    path = tmp_path / "data" / "train" / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["files"] = change(data["files"])
    path.write_text(manifest_text(data) if writer == "iogen" else json.dumps(data))
    layout = DatasetLayout.from_workload(wl_of(tmp_path), "train")
    columns = isinstance(read_manifest(layout, columns=True)["files"], FileColumns)
    assert columns == (writer == "iogen" and all(len(f) == 5 and type(f["size_bytes"]) is int for f in data["files"]))


@pytest.mark.parametrize("num_files,subfolders,on_disk,prefix", [
    (10, 0, 10, "img"), (37, 12, 100, "img"), (1000, 7, 1000, "a%b"), (5, 1, 5, "x_1")])
def test_path_block_is_the_layouts_paths(num_files, subfolders, on_disk, prefix):
    layout = DatasetLayout("/data%", "train", num_files, 1, 64, 0, 0, "npz", prefix, subfolders, files_on_disk=on_disk)
    assert all_paths(layout) == list(layout.paths)
    assert path_block(layout, 3, 5) == list(layout.paths[3:5])
    # the names the core's stat loop takes: a row of bytes each, the same text
    rows = _NamePattern(layout).rows(0, num_files)
    assert [r.tobytes().decode() for r in rows] == [p[len(layout.folder) + 1:] for p in layout.paths]


@pytest.mark.parametrize("num_files,subfolders,on_disk", [(8, 0, 8), (37, 12, 100), (1000, 7, 1000)])
def test_manifest_names_are_keyed_by_file_index(num_files, subfolders, on_disk):
    layout = DatasetLayout("/d", "train", num_files, 1, 64, 0, 0, "npz", "img", subfolders, files_on_disk=on_disk)
    cut = len(layout.folder) + 1
    rel = [p[cut:] for p in layout.paths]
    entries = [{"file": name, "size_bytes": i, "record_bytes": 64, "samples": 1} for i, name in enumerate(rel)]
    # names that are not files of the layout: another N, a wrong subfolder, a non-digit, non-strings
    entries[::-1] = entries
    entries += [{"file": "img_1_of_9.npz", "size_bytes": 5}, {"file": "9/" + rel[0]}, {"file": rel[0][:-5] + "x.npz"},
                {"file": None}, {"file": 3}, "not an entry"]
    if subfolders > 1:  # file 1's name in file 0's subfolder
        entries.append({"file": rel[0].split("/")[0] + "/" + rel[1].split("/")[1], "size_bytes": 99})
    listed, known = listed_files(layout, entries, "m")
    assert known.all()
    assert listed[0].tolist() == list(range(num_files))


def test_a_duplicated_entry_counts_as_its_last(tmp_path, writer):
    generate(wl_of(tmp_path))
    edit_manifest(tmp_path, lambda files: files + [{**files[3], "size_bytes": 1}], writer)
    with pytest.raises(DataError) as err:
        check(wl_of(tmp_path))
    assert "lists 1" in str(err.value) and "img_3_of_8.npz" in str(err.value)
    edit_manifest(tmp_path, lambda files: files + [{**files[3], "size_bytes": files[0]["size_bytes"]}], writer)
    assert check(wl_of(tmp_path)).num_files == 8


def test_unlisted_file_is_named_in_index_order(tmp_path, writer):
    generate(wl_of(tmp_path))
    edit_manifest(tmp_path, lambda files: [f for f in files if not f["file"].endswith(("_5_of_8.npz", "_6_of_8.npz"))],
                  writer)
    with pytest.raises(DataError) as err:
        check(wl_of(tmp_path))
    assert str(err.value).startswith(str(tmp_path / "data" / "train" / "1" / "img_5_of_8.npz"))
    assert "is not listed in" in str(err.value)


def test_non_integer_size_in_manifest_is_a_data_error(tmp_path, writer):
    generate(wl_of(tmp_path))
    edit_manifest(tmp_path, lambda files: files[:2] + [{**files[2], "size_bytes": "big"}] + files[3:], writer)
    with pytest.raises(DataError) as err:
        check(wl_of(tmp_path))
    assert MANIFEST_NAME in str(err.value) and "not an integer" in str(err.value)


def test_an_entry_without_a_size_is_a_size_mismatch(tmp_path, writer):
    generate(wl_of(tmp_path))
    edit_manifest(tmp_path, lambda files: files[:1] + [{k: v for k, v in files[1].items() if k != "size_bytes"}]
                  + files[2:], writer)
    with pytest.raises(DataError) as err:
        check(wl_of(tmp_path))
    assert "img_1_of_8.npz" in str(err.value) and "lists -1" in str(err.value)


def test_stat_of_the_layout_marks_missing_files(tmp_path):
    generate(wl_of(tmp_path))
    layout = DatasetLayout.from_workload(wl_of(tmp_path), "train")
    os.unlink(layout.paths[6])
    sizes = stat_layout_sizes(layout)
    assert sizes[6] == -1
    assert [int(s) for i, s in enumerate(sizes) if i != 6] == [os.stat(p).st_size for i, p in enumerate(layout.paths)
                                                               if i != 6]


@pytest.mark.parametrize("pool_min_ns", [0, 10**12])
def test_stat_in_the_pool_or_in_one_thread_gives_the_same_sizes(tmp_path, monkeypatch, pool_min_ns):
    # 0: every block counts as slow, so blocks after the first go to the pool; 10^12: none does
    import iogen.data.bulk as dc

    generate(wl_of(tmp_path))
    layout = DatasetLayout.from_workload(wl_of(tmp_path), "train")
    monkeypatch.setattr(dc, "STAT_BLOCK", 3)
    monkeypatch.setattr(dc, "STAT_POOL_MIN_NS", pool_min_ns)
    os.unlink(layout.paths[7])
    assert stat_layout_sizes(layout).tolist() == [os.stat(p).st_size for p in layout.paths[:7]] + [-1]


def test_stat_of_names_that_are_not_ascii_and_a_failing_stat(tmp_path):
    # a non-ASCII prefix: the paths are stat'ed one by one (os.stat), not as rows of bytes
    layout = DatasetLayout(str(tmp_path / "d"), "train", 4, 1, 64, 0, 0, "npz", "é", 2)
    for i, path in enumerate(layout.paths[:3]):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"x" * i)
    assert not _NamePattern(layout).ascii
    assert stat_layout_sizes(layout).tolist() == [0, 1, 2, -1]
    # a subfolder that is a file: the stat fails otherwise than "missing", named, for either kind of name
    for prefix in ("img", "é"):
        layout = DatasetLayout(str(tmp_path / prefix), "train", 4, 1, 64, 0, 0, "npz", prefix, 2)
        os.makedirs(layout.folder)
        (tmp_path / prefix / "train" / "0").write_bytes(b"")
        with pytest.raises(DataError) as err:
            stat_layout_sizes(layout)
        assert str(err.value).startswith(layout.paths[0]) and "cannot be stat'ed: Not a directory" in str(err.value)


def _regex_counts(names):
    counts = {}
    for name in names:
        m = DLIO_NAME.match(name)
        if m:
            key = (m["prefix"], m["suffix"], int(m["n"]))
            counts[key] = counts.get(key, 0) + 1
    return counts


TRICKY_NAMES = ["img_001_of_10.npz", "a_1_23_of_5.npz", "a__of_5.npz", "_1_of_2.x", "x_1_of_2.", "x_1_of_.npz",
                "x_a_of_2.npz", "x_1_of_2.np_z", "x_1_of_2_of_3.h5", "p_of_q_1_of_2.tfrecord", "", "_of_",
                "é_1_of_2.npz", "x_01_of_002.npz", "x_1_of_2.npz.tmp", ".iogen-manifest.json", "y_5_of_10.hdf5"]


@pytest.mark.parametrize("np_strings", [True, False])
def test_name_counts_in_numpy_are_the_regexs(monkeypatch, np_strings):
    # False: the path taken under numpy < 2.2 (no np.strings.rpartition)
    import random

    import iogen.data.bulk as dfs

    if np_strings and not dfs._NP_STRINGS:
        pytest.skip("this numpy has no np.strings.rpartition")
    monkeypatch.setattr(dfs, "_NP_STRINGS", np_strings)
    assert dlio_name_counts(TRICKY_NAMES) == _regex_counts(TRICKY_NAMES)
    assert dlio_name_counts(TRICKY_NAMES)[("a_1", "npz", 5)] == 1
    rnd = random.Random(1)
    for _ in range(200):
        names = ["".join(rnd.choice("ab_of0123.9xé") for _ in range(rnd.randint(0, 14))) for _ in range(40)]
        names += rnd.sample(TRICKY_NAMES, 4)
        assert dlio_name_counts(names) == _regex_counts(names)


# -- a manifest that exists but is not an iogen manifest (issue: it silently disabled the checks) --

CORRUPT_MANIFESTS = {
    "not JSON": b'{"files": [',
    "a list": b"[]",
    "null": b"null",
    "no files list": b'{"params": {}}',
    "files not a list": b'{"files": {"a": 1}}',
    "an entry that is not an object": b'{"files": ["img_0_of_8.npz"]}',
    "nested too deep": b"[" * 200_000 + b"]" * 200_000,
    "not UTF-8": b'{"files": ["\xff"]}',
}


@pytest.mark.parametrize("what", sorted(CORRUPT_MANIFESTS))
def test_a_corrupt_manifest_is_exit_2_naming_it_for_run_verify_and_datagen(tmp_path, iogen_cmd, what):
    wl = wl_of(tmp_path)
    generate(wl)
    path = tmp_path / "data" / "train" / MANIFEST_NAME
    path.write_bytes(CORRUPT_MANIFESTS[what])
    with pytest.raises(DataError) as err:
        check(wl)  # the run's data check
    assert err.value.path == str(path) and "corrupt dataset manifest" in str(err.value)
    if what not in ("not JSON", "a list"):
        return  # the command line's answer is the same for every kind: two are enough
    args = ["dataset.format=npz", f"dataset.data_folder={tmp_path / 'data'}", "dataset.num_files_train=8",
            "dataset.num_samples_per_file=4", "dataset.record_length_bytes=512",
            "dataset.record_length_bytes_stdev=0", "dataset.num_subfolders_train=4"]
    for cmd in ("verify", "datagen"):
        res = iogen_cmd(cmd, "default", *args)
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and f"{path}: corrupt dataset manifest" in res.stderr, res.stderr
    res = iogen_cmd("datagen", "default", *args, "--overwrite")  # replaced as asked, every file reused
    assert res.returncode == 0, res.stderr
    assert json.loads(path.read_text())["num_files"] == 8
