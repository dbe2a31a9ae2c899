"""train.accelerators_per_process: one process steps several emulated accelerators; every
per-accelerator figure means what it means with one rank per accelerator."""
import os

import numpy as np
import pytest

from iogen.common.steplog import PHASE_TRAIN, read_steplog
from iogen.metrics import FIELD, rank_epochs_array

from ..conftest import run_iogen

pytestmark = pytest.mark.mpi


def _per_accelerator(run_dir):
    """{accelerator id: its [epochs, fields] array}, recomputed from the step logs (rows by their rank)."""
    out = {}
    for name in sorted(os.listdir(os.path.join(run_dir, "steps"))):
        _, rows = read_steplog(os.path.join(run_dir, "steps", name))
        for a in np.unique(rows["rank"]).tolist():
            out[a] = rank_epochs_array(rows[rows["rank"] == a], PHASE_TRAIN)
    return out


def _run(mpi, n, *extra):
    overrides = mpi.tiny(**{"dataset.num_files_train": 96, "dataset.data_folder": str(mpi.tmp_path / "data"),
                            "reader.file_shuffle": "seed", "reader.sample_shuffle": "seed", "train.epochs": 2,
                            "train.computation_time": 0.002, "train.seed": 7})
    before = set(mpi.run_dirs())
    res = mpi.launch(n, mpi.iogen("run", "default", *overrides, *extra, "-q"))
    assert res.returncode in (0, 1), res  # 1: the AU gate, which a loaded machine may miss
    (run_dir,) = set(mpi.run_dirs()) - before
    return res, run_dir


def test_the_same_workload_both_ways(mpi):
    gen = run_iogen("datagen", "default", *mpi.tiny(**{"dataset.num_files_train": 96,
                                                      "dataset.data_folder": str(mpi.tmp_path / "data")}))
    assert gen.returncode == 0, gen.stderr
    ways = {
        "4 ranks": _run(mpi, 4),
        "2 ranks x 2": _run(mpi, 2, "train.accelerators_per_process=2"),
        "1 rank x 4": _run(mpi, 1, "train.accelerators_per_process=4"),
        "2 ranks x 3, 4 in all": _run(mpi, 2, "train.accelerators_per_process=3", "train.accelerators=4"),
    }
    figures = {}
    for way, (res, run_dir) in ways.items():
        assert "on 4 accelerator(s)" in res.stdout, (way, res)
        doc = mpi.load_json(os.path.join(run_dir, "summary.json"))
        assert doc["num_accelerators"] == 4 and doc["iogen"]["complete"], way
        facts = doc["iogen"]["facts"]["accelerators"]
        assert facts["total"] == 4
        assert facts["mode"] == ("one rank per accelerator" if way == "4 ranks" else
                                 f"{facts['per_process']} accelerators per process")
        per = _per_accelerator(run_dir)
        assert sorted(per) == [0, 1, 2, 3], way
        # every per-accelerator count is its own plan's, whatever process stepped it
        figures[way] = {a: per[a][:, [FIELD["steps"], FIELD["samples"], FIELD["bytes"], FIELD["steps_all"],
                                      FIELD["samples_all"], FIELD["bytes_all"], FIELD["requested_compute_ns_total"]]]
                        for a in per}
        for a, arr in per.items():  # AU, from the same rows by the same function: a fraction of the step time
            assert np.all((arr[:, FIELD["au"]] > 0) & (arr[:, FIELD["au"]] <= 1)), (way, a)
            # the accelerator's step spans: request <= ready <= compute end <= step end, as for a rank
        m = doc["metric"]
        au = np.stack([per[a][:, FIELD["au"]] for a in range(4)])
        assert m["train_au_percentage"] == pytest.approx((au.mean(axis=0) * 100).tolist(), rel=1e-9), way
        thr = np.stack([per[a][:, FIELD["throughput_samples_s"]] for a in range(4)])
        assert m["train_throughput_samples_per_second"] == pytest.approx(thr.sum(axis=0).tolist(), rel=1e-9), way
        epochs = mpi.load_json(os.path.join(run_dir, "epochs.json"))
        assert sorted({int(r["rank"]) for r in epochs["train"]}) == [0, 1, 2, 3], way
    base = figures.pop("4 ranks")
    for way, fig in figures.items():
        for a in range(4):
            np.testing.assert_array_equal(fig[a], base[a], err_msg=f"{way}, accelerator {a}")


def test_step_spans_are_ordered_for_every_accelerator(mpi):
    gen = run_iogen("datagen", "default", *mpi.tiny(**{"dataset.num_files_train": 96,
                                                      "dataset.data_folder": str(mpi.tmp_path / "data")}))
    assert gen.returncode == 0, gen.stderr
    _, run_dir = _run(mpi, 2, "train.accelerators_per_process=3")
    for name in os.listdir(os.path.join(run_dir, "steps")):
        _, rows = read_steplog(os.path.join(run_dir, "steps", name))
        assert len(np.unique(rows["rank"])) == 3
        assert np.all(rows["t_request"] <= rows["t_ready"]) and np.all(rows["t_ready"] <= rows["t_compute_end"])
        assert np.all(rows["t_compute_end"] <= rows["t_step_end"])
        # the requested compute is each accelerator's own draw: accelerators differ where the draws do
        for step in np.unique(rows["step"]):
            same = rows[(rows["step"] == step) & (rows["epoch"] == 1)]
            assert len(set(same["t_step_end"].tolist())) == 1  # they leave the barrier together
