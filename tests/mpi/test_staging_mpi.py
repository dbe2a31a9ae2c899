"""Staging under mpiexec with two simulated nodes (IOGEN_NODE): each node stages its share once."""
import glob
import os

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.dataset import DatasetLayout
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
