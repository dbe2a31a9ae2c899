"""Staging under mpiexec with two simulated nodes (IOGEN_NODE): each node stages its share once."""
import glob
import os

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.data.layout import DatasetLayout
from iogen.plan import plan_for

pytestmark = pytest.mark.mpi

NODES = "a,a,b,b"


def _node_files(overrides, rank_nodes):
    """The files each node's ranks read over the run, from the plan itself."""
    wl = load_workload("default", overrides)
    layout = DatasetLayout.from_workload(wl, "train")
    out = {}
    for rank, node in enumerate(rank_nodes):
        for epoch in range(1, wl.train.epochs + 1):
            plan = plan_for(wl, layout, epoch=epoch, rank=rank, world_size=len(rank_nodes),
                            seed=wl.train.seed, phase="train")
            out.setdefault(node, set()).update(os.path.basename(layout.paths[f])
                                               for f in np.unique(plan.batches // layout.samples_per_file))
    return out


@pytest.mark.parametrize("loader", ["native", "pytorch"])
def test_two_nodes_stage_their_share_once_and_read_only_it(mpi, file_opens, loader):
    local = mpi.tmp_path / "local"
    overrides = mpi.tiny(**{"dataset.num_files_train": 16, "reader.file_shuffle": "seed",
                            "reader.sample_shuffle": "seed", "train.epochs": 2, "reader.data_loader": loader,
                            "reader.read_threads": 1, "workflow.stage_data": True,
                            "staging.folder": str(local / "{node}"), "staging.keep": True})
    gen = mpi.single(mpi.iogen("datagen", "default", *overrides, "-q"))
    assert gen.returncode == 0, gen.stderr
    src = mpi.tmp_path / "data" / "train"
    watch = file_opens([src])
    res = mpi.launch(4, mpi.iogen("run", "default", *overrides), env={"IOGEN_NODE": NODES})
    assert res.returncode == 0, res
    expected = _node_files(overrides, NODES.split(","))
    staged = {node: {os.path.basename(p) for p in glob.glob(str(local / node / "train" / "*.npz"))}
              for node in ("a", "b")}
    assert staged == expected  # each node holds exactly what its ranks read: none missing, none extra
    opens = {os.path.basename(p) for p in watch.counts() if p.endswith(".npz")}
    assert opens == set().union(*expected.values())  # only what some node staged was opened
    (run_dir,) = mpi.run_dirs()
    st = mpi.load_json(os.path.join(run_dir, "summary.json"))["iogen"]["staging"]
    assert sorted(n["node"] for n in st["nodes"]) == ["a", "b"]
    assert {n["node"]: n["files"] for n in st["nodes"]} == {k: len(v) for k, v in expected.items()}
    assert st["t_staging_node_min_s"] <= st["t_staging_node_max_s"] <= st["t_staging_s"]
    assert st["t_staging_over_t_epoch"] > 0
    # The run reads the staged copies only: with the shared copy's bytes destroyed (sizes kept,
    # so the data check passes) a rerun that reuses the staged copies still reads valid files.
    for path in glob.glob(str(src / "*.npz")):
        with open(path, "r+b") as f:
            f.write(bytes(os.path.getsize(path)))
    again = mpi.launch(4, mpi.iogen("run", "default", *overrides, "staging.reuse=True"), env={"IOGEN_NODE": NODES})
    assert again.returncode == 0, again
    st = mpi.load_json(os.path.join(mpi.run_dirs()[-1], "summary.json"))["iogen"]["staging"]
    assert st["reused"] is True and st["staged_files"] == 0


def _tree(root):
    from ..conftest import tree_state

    return tree_state(root)


def test_one_nodes_staging_folder_on_the_data_stops_every_rank_with_nothing_touched(mpi):
    """Issue 21.1: node b's staging folder is a link to the dataset; only rank 1 sees it. Every
    rank exits 2 before anything is copied (node a stages nothing either), the data intact."""
    local = mpi.tmp_path / "local"
    overrides = mpi.tiny(**{"workflow.stage_data": True, "staging.folder": str(local / "{node}"),
                            "staging.scope": "full"})
    gen = mpi.single(mpi.iogen("datagen", "default", *overrides, "-q"))
    assert gen.returncode == 0, gen.stderr
    local.mkdir()
    os.symlink(mpi.tmp_path / "data", local / "b")
    before = _tree(mpi.tmp_path / "data")
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides), env={"IOGEN_NODE": "a,b"})
    assert res.rank_codes == {0: 2, 1: 2}, res
    assert "staging.folder" in res.output and "dataset.data_folder" in res.output and "rank 1" in res.output, res
    assert "Traceback" not in res.output, res
    assert _tree(mpi.tmp_path / "data") == before
    assert os.listdir(local) == ["b"] and mpi.run_dirs() == []


def test_a_node_that_finished_staging_removes_its_copy_when_another_node_fails(mpi):
    """Issue 21.3: node b's stager fails (a file where its split folder goes); node a's stager
    finishes its copy whatever the order, meets the failure at the end-of-staging barrier, and
    still removes everything it staged."""
    local = mpi.tmp_path / "local"
    overrides = mpi.tiny(**{"workflow.stage_data": True, "staging.folder": str(local / "{node}"),
                            "staging.scope": "full"})
    gen = mpi.single(mpi.iogen("datagen", "default", *overrides, "-q"))
    assert gen.returncode == 0, gen.stderr
    (local / "b").mkdir(parents=True)
    (local / "b" / "train").write_text("not a folder")
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides), env={"IOGEN_NODE": "a,b"})
    assert res.rank_codes == {0: 2, 1: 2}, res
    assert str(local / "b" / "train") in res.output and "Traceback" not in res.output, res
    assert sorted(os.listdir(local)) == ["b"], res  # node a's staged copy (and its folder) is gone
    assert (local / "b" / "train").read_text() == "not a folder"
