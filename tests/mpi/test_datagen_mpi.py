"""Generation across ranks: each rank writes its share, and the files are those one process writes."""
import filecmp
import os

import pytest

pytestmark = pytest.mark.mpi


def _files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = path
    return out


def _overrides(mpi, data, fmt):
    return mpi.tiny(**{"dataset.data_folder": data, "dataset.format": fmt, "dataset.num_files_train": 7,
                       "dataset.num_files_eval": 3, "dataset.num_subfolders_train": 2,
                       "dataset.num_samples_per_file": 3, "dataset.record_length_bytes": 3000,
                       "dataset.record_length_bytes_stdev": 500})


def _data_files(root):
    return {k: v for k, v in _files(root).items() if not os.path.basename(k).startswith(".iogen-")}


@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
@pytest.mark.parametrize("n", [2, 4])
def test_datagen_across_ranks_writes_the_same_files(mpi, fmt, n):
    one, many = mpi.tmp_path / "one", mpi.tmp_path / "many"
    single = mpi.single(mpi.iogen("datagen", "default", *_overrides(mpi, one, fmt), "-q"))
    assert single.returncode == 0, single.stderr
    res = mpi.launch(n, mpi.iogen("datagen", "default", *_overrides(mpi, many, fmt), "-q"))
    assert res.returncode == 0, res
    a, b = _data_files(one), _data_files(many)
    assert sorted(a) == sorted(b) and len(a) == 10
    for rel in a:
        assert filecmp.cmp(a[rel], b[rel], shallow=False), rel
    assert not [p for p in _files(many) if ".tmp." in p]  # no leftovers


def test_run_generate_across_ranks_writes_one_manifest_per_split(mpi):
    data = mpi.tmp_path / "data"
    overrides = _overrides(mpi, data, "npz") + ["workflow.generate_data=True", "workflow.evaluation=True",
                                                 "reader.batch_size_eval=1"]
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides, "-q"))
    assert res.returncode == 0, res
    names = set(_files(data))
    assert "train/.iogen-manifest.json" in names and "valid/.iogen-manifest.json" in names
    assert not [p for p in names if "journal" in p]  # the ranks' journals are merged and removed
    check = mpi.single(mpi.iogen("verify", "default", *overrides))
    assert check.returncode == 0, check.stdout + check.stderr


def test_datagen_across_ranks_writes_the_manifests(mpi):
    data = mpi.tmp_path / "data"
    overrides = _overrides(mpi, data, "npz")
    res = mpi.launch(2, mpi.iogen("datagen", "default", *overrides, "-q"))
    assert res.returncode == 0, res
    check = mpi.single(mpi.iogen("verify", "default", *overrides))
    assert check.returncode == 0, check.stdout + check.stderr
    # again over the complete dataset: rank 0 finds both splits complete, no rank writes, the manifests stay
    manifests = [data / split / ".iogen-manifest.json" for split in ("train", "valid")]
    before = [(m.read_bytes(), os.stat(m).st_mtime_ns) for m in manifests]
    res = mpi.launch(2, mpi.iogen("datagen", "default", *overrides))
    assert res.returncode == 0, res
    assert "0 written by rank 0 of 2, 4 already there" in res.stdout, res.stdout  # rank 0's share of 7 train files
    assert [(m.read_bytes(), os.stat(m).st_mtime_ns) for m in manifests] == before
    assert not [p for p in _files(data) if "journal" in p or ".tmp." in p]
