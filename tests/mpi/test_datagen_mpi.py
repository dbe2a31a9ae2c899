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


def test_a_foreign_file_at_a_listed_name_stops_every_rank_before_any_writes(mpi):
    """Issue 36.3 under MPI: a file of the user's at a name the manifest lists, of another size (rank 1's share),
    and a symbolic link at rank 1's journal name: rank 0 refuses before any rank writes, every rank exits 2 with
    that message, and nothing in the data folder (or the link's target) changes."""
    from ..conftest import tree_state

    data = mpi.tmp_path / "data"
    overrides = _overrides(mpi, data, "npz")
    assert mpi.launch(2, mpi.iogen("datagen", "default", *overrides, "-q")).returncode == 0
    victim = sorted((data / "train").glob("*/*.npz"))[1]
    victim.write_bytes(b"mine")
    for case in ("file", "journal"):
        if case == "journal":
            victim.unlink()  # the dataset is incomplete: the full plan would run
            (mpi.tmp_path / "precious").write_bytes(b"precious")
            (data / "train" / ".iogen-journal.r1-of-2.jsonl").symlink_to(mpi.tmp_path / "precious")
        before = tree_state(mpi.tmp_path, skip=[p.name for p in mpi.tmp_path.glob("ranks-*")])
        res = mpi.launch(2, mpi.iogen("datagen", "default", *overrides, "-q"))
        assert res.returncode == 2 and res.rank_codes == {0: 2, 1: 2}, res
        said = f"{victim}: has 4 bytes" if case == "file" else ".iogen-journal.r1-of-2.jsonl: is a symbolic link"
        errors = [line for line in res.stderr.splitlines() if line.startswith("iogen: error:") and said in line]
        assert len(errors) == 2, res.stderr  # every rank says it (rank 1: "rank 0 (...) failed: ...")
        assert tree_state(mpi.tmp_path, skip=[p.name for p in mpi.tmp_path.glob("ranks-*")]) == before
