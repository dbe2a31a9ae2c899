"""`mpiexec -n N iogen run`: one result for the whole job, reduced from every rank's step log."""
import os

import numpy as np
import pytest

from iogen.metrics import FIELD, rank_epochs_array
from iogen.common.steplog import PHASE_TRAIN, read_steplog

pytestmark = pytest.mark.mpi


def _rank_arrays(run_dir, n):
    """Each rank's per-epoch metrics, recomputed here from its own step log."""
    out = []
    for r in range(n):
        header, rows = read_steplog(os.path.join(run_dir, "steps", f"rank-{r:05d}.steps"))
        assert header["rank"] == r and set(rows["rank"].tolist()) == {r}
        out.append(rank_epochs_array(rows, PHASE_TRAIN))
    return np.stack(out)


@pytest.mark.parametrize("n", [2, 4])
def test_one_summary_for_the_job(mpi, n):
    overrides = mpi.tiny(**{"dataset.num_files_train": 16, "workflow.generate_data": True,
                            "reader.file_shuffle": "seed", "reader.sample_shuffle": "seed"})
    res = mpi.launch(n, mpi.iogen("run", "default", *overrides, "-q"))
    assert res.returncode == 0, res
    assert res.stdout.count("results: ") == 1  # only rank 0 speaks
    assert f"on {n} accelerator(s)" in res.stdout
    (run_dir,) = mpi.run_dirs()  # one run folder, chosen by rank 0
    assert sorted(os.listdir(os.path.join(run_dir, "steps"))) == [f"rank-{r:05d}.steps" for r in range(n)]
    doc = mpi.load_json(os.path.join(run_dir, "summary.json"))
    assert doc["num_accelerators"] == n
    assert doc["iogen"]["complete"] is True
    m = doc["metric"]
    per_rank = _rank_arrays(run_dir, n)  # [ranks, epochs, fields]
    thr = per_rank[:, :, FIELD["throughput_samples_s"]]
    au = per_rank[:, :, FIELD["au"]]
    # throughput is the sum of the ranks', AU the mean, epoch by epoch
    assert m["train_throughput_samples_per_second"] == pytest.approx(thr.sum(axis=0).tolist(), rel=1e-9)
    assert m["train_au_percentage"] == pytest.approx((au.mean(axis=0) * 100).tolist(), rel=1e-9)
    assert m["train_au_mean_percentage"] == pytest.approx(float((au.mean(axis=0) * 100).mean()), rel=1e-9)
    per_epoch = doc["iogen"]["metrics"]["train"]["per_epoch"]
    assert per_epoch["au_min_percentage"] == pytest.approx((au.min(axis=0) * 100).tolist(), rel=1e-9)
    assert per_epoch["au_max_percentage"] == pytest.approx((au.max(axis=0) * 100).tolist(), rel=1e-9)
    # epochs.json: one row per rank and epoch
    epochs = mpi.load_json(os.path.join(run_dir, "epochs.json"))
    assert sorted({int(row["rank"]) for row in epochs["train"]}) == list(range(n))
    # host facts per node, and the data each node reads per epoch
    facts = doc["iogen"]["facts"]
    assert facts["num_ranks"] == n and facts["world_kind"] == "mpi"
    (node,) = facts["nodes"]  # one machine
    assert node["ranks"] == list(range(n)) and node["cpu_count"] >= 1 and node["memory_total_bytes"] > 0
    (share,) = doc["iogen"]["data_per_host"]
    assert share["ranks"] == n and share["epoch_samples"] == 16 and share["epoch_bytes"] == 16 * 65536
    assert "fits in its memory" in doc["iogen"]["page_cache_warning"]
    # CPU time summed over every rank's process tree, the window's samples over the same ranks
    cpu = doc["iogen"]["cpu"]
    assert cpu["window_samples"] == sum(per_epoch["samples"]) and cpu["invocation_cpu_s"] > cpu["window_cpu_s"] > 0


def test_single_process_and_mpi_run_the_same_code_path(mpi):
    """`iogen run` without a launcher is world size 1 and writes the same kind of folder."""
    overrides = mpi.tiny(**{"workflow.generate_data": True})
    single = mpi.single(mpi.iogen("run", "default", *overrides, "-q"))
    assert single.returncode == 0, single.stderr
    # ranks told to share CPUs (as with fewer than 2 CPUs a rank): the compute sleep spins the timer slack only
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides, "-q"), env={"IOGEN_MPI_SPIN_US": "0"})
    assert res.returncode == 0, res
    one, two = mpi.run_dirs()
    a, b = (mpi.load_json(os.path.join(d, "summary.json")) for d in (one, two))
    assert (a["num_accelerators"], b["num_accelerators"]) == (1, 2)
    assert b["iogen"]["sleep_spin_ns"] <= 50_000
    assert set(a["metric"]) == set(b["metric"])
    assert a["iogen"]["facts"]["world_kind"] == "single"
    # the same samples in total: each of the 2 ranks reads half of every epoch
    def samples(run_dir, n):
        return [int(read_steplog(os.path.join(run_dir, "steps", f"rank-{r:05d}.steps"))[1]["samples"].sum())
                for r in range(n)]
    assert samples(one, 1) == [16] and samples(two, 2) == [8, 8]


def test_page_cache_warning_is_off_with_odirect_per_node(mpi):
    overrides = mpi.tiny(**{"workflow.generate_data": True, "reader.odirect": True})
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides, "-q"))
    assert res.returncode == 0, res
    (run_dir,) = mpi.run_dirs()
    assert mpi.load_json(os.path.join(run_dir, "summary.json"))["iogen"]["page_cache_warning"] is None


def test_allreduce_of_configured_bytes_per_step(mpi):
    overrides = mpi.tiny(**{"workflow.generate_data": True, "train.allreduce_bytes": 1 << 20})
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides, "-q"))
    assert res.returncode == 0, res
    (run_dir,) = mpi.run_dirs()
    doc = mpi.load_json(os.path.join(run_dir, "summary.json"))
    assert doc["iogen"]["complete"] is True
    assert all(c > 0 for c in doc["iogen"]["metrics"]["train"]["per_epoch"]["comm_mean_ns"])


@pytest.mark.slow  # each spawned worker imports torch
@pytest.mark.torch
def test_the_run_driver_under_spawned_dataloader_workers(mpi, tmp_path):
    """PyTorch workers started with "spawn" import the driver again: it must not run itself in them."""
    record = tmp_path / "gids"
    record.mkdir()
    overrides = mpi.tiny(**{"workflow.generate_data": True, "train.epochs": 1, "reader.data_loader": "pytorch",
                            "reader.multiprocessing_context": "spawn", "reader.read_threads": 1})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_RECORD": str(record)})
    assert res.returncode == 0 and res.rank_codes == {0: 0, 1: 0}, res
    assert "exited unexpectedly" not in res.output and "bootstrapping phase" not in res.output
    (run_dir,) = mpi.run_dirs()
    assert mpi.load_json(os.path.join(run_dir, "summary.json"))["iogen"]["complete"] is True
    assert sorted(os.listdir(record)) == ["gids-rank0.npz", "gids-rank1.npz"]
