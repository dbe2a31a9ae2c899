"""Every sample is read exactly once per epoch across 1..8 real ranks: plans and actual runs."""
import glob

import numpy as np
import pytest

from iogen.common.steplog import PHASE_TRAIN, read_steplog

pytestmark = pytest.mark.mpi


def _assert_exactly_once(gids_per_rank, total, dropped):
    flat = np.concatenate([g.ravel() for g in gids_per_rank])
    assert len(set(map(len, gids_per_rank))) == 1  # equal steps on every rank
    assert np.unique(flat).size == flat.size  # no sample on two ranks, or twice on one
    assert flat.size == total - dropped  # no gaps beyond the global drop-last
    assert flat.min() >= 0 and flat.max() < total


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("files, spf, batch, fshuf, sshuf", [
    (13, 3, 2, "off", "off"),
    (10, 4, 3, "seed", "seed"),
    (7, 5, 1, "seed", "off"),
])
def test_plans_gathered_from_real_ranks(mpi, n, files, spf, batch, fshuf, sshuf):
    res = mpi.launch(n, [mpi.driver("plans.py"), mpi.tmp_path, files, spf, batch, 3, fshuf, sshuf])
    assert res.returncode == 0, res
    got = np.load(mpi.tmp_path / f"plans-{n}.npz")
    for epoch in (1, 2, 3):
        _assert_exactly_once(list(got[f"e{epoch}"]), files * spf, int(got[f"dropped{epoch}"]))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_a_real_run_reads_each_sample_once(mpi, n):
    record = mpi.tmp_path / "record"
    record.mkdir()
    # 12 files x 2 samples, batch 2: 24 samples; 3 ranks drop nothing, 4 ranks drop nothing
    overrides = mpi.tiny(**{"dataset.num_files_train": 12, "dataset.num_samples_per_file": 2,
                            "reader.batch_size": 2, "reader.file_shuffle": "seed",
                            "reader.sample_shuffle": "seed", "workflow.generate_data": True})
    res = mpi.launch(n, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_RECORD": record})
    assert res.returncode == 0, res
    (run_dir,) = mpi.run_dirs()
    plans = [np.load(record / f"gids-rank{r}.npz") for r in range(n)]
    for epoch in (1, 2):
        per_rank = [p[f"train-{epoch}"] for p in plans]
        _assert_exactly_once(per_rank, 24, 24 % (2 * n))
        # and the loaders really read them: the step logs count the same samples per rank
        for r in range(n):
            _, rows = read_steplog(glob.glob(f"{run_dir}/steps/rank-{r:05d}.steps")[0])
            mine = rows[(rows["phase"] == PHASE_TRAIN) & (rows["epoch"] == epoch)]
            assert int(mine["samples"].sum()) == per_rank[r].size
            assert int(mine["bytes"].sum()) == per_rank[r].size * 65536
    # a different epoch reads a different order (shuffles change with the epoch)
    assert not np.array_equal(plans[0]["train-1"], plans[0]["train-2"])


@pytest.mark.parametrize("n", range(1, 9))
def test_plans_of_1_to_8_real_ranks_are_the_simulated_ones(mpi, n):
    # what each real rank computes alone is what one process computes for every rank (so the
    # simulated worlds of tests/plan/test_plan_scale.py up to 65,536 ranks stand for real ones);
    # the same seed gives the same plan in another process, and every epoch has its own order
    from iogen.plan import make_plan

    files, spf, batch = 29, 3, 2
    res = mpi.launch(n, [mpi.driver("plans.py"), mpi.tmp_path, files, spf, batch, 2, "seed", "seed"])
    assert res.returncode == 0, res
    got = np.load(mpi.tmp_path / f"plans-{n}.npz")
    for epoch in (1, 2):
        _assert_exactly_once(list(got[f"e{epoch}"]), files * spf, int(got[f"dropped{epoch}"]))
        for r in range(n):
            here = make_plan(num_files=files, samples_per_file=spf, batch_size=batch, world_size=n, rank=r,
                             epoch=epoch, seed=7, file_shuffle="seed", sample_shuffle="seed")
            assert np.array_equal(got[f"e{epoch}"][r], here.batches.ravel())
    assert not np.array_equal(got["e1"], got["e2"])
