"""One rank fails: every rank exits non-zero, with that rank's message, within a bounded time.

Each launch's `timeout=` is the bound: a hang fails the test. Timings are not asserted.
"""
import glob
import os

import pytest

pytestmark = pytest.mark.mpi

BOUND_S = 90


def _no_shuffle(mpi, **extra):
    """Tiny data read in file order: with 8 files on 2 ranks, rank 1 reads files 4..7."""
    return mpi.tiny(**{"reader.file_shuffle": "off", "reader.sample_shuffle": "off", **extra})


def _generate(mpi, overrides):
    res = mpi.single(mpi.iogen("datagen", "default", *overrides, "-q"))
    assert res.returncode == 0, res.stderr


def _summary(mpi):
    (run_dir,) = mpi.run_dirs()
    return mpi.load_json(os.path.join(run_dir, "summary.json"))


def test_truncated_file_fails_every_rank_before_the_run(mpi):
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": False})
    _generate(mpi, overrides)
    bad = mpi.tmp_path / "data" / "train" / "img_6_of_8.npz"  # only rank 1 reads it
    os.truncate(bad, 1000)
    res = mpi.launch(2, mpi.iogen("run", "default", *overrides, "-q"), timeout=BOUND_S)
    assert res.returncode != 0, res
    assert res.rank_codes == {0: 2, 1: 2}, res  # both ranks exit 2 (bad data), none hangs
    assert str(bad) in res.output, res
    # the native loader indexes every file before the run folder exists: nothing is left behind
    assert mpi.run_dirs() == [], res


def test_exception_mid_run_on_one_of_four_ranks(mpi):
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True, "dataset.num_files_train": 16})
    res = mpi.launch(4, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_FAIL": "2:step:3"}, timeout=BOUND_S)
    assert res.returncode != 0, res
    assert res.rank_codes == {r: 3 for r in range(4)}, res  # 3: the run failed (1 is the gate's alone)
    assert "rank 2 (" in res.output and "injected failure at step barrier 3" in res.output, res
    doc = _summary(mpi)
    assert doc["iogen"]["complete"] is False and "rank 2" in doc["iogen"]["incomplete_reason"]
    assert doc["num_accelerators"] == 4


def test_failure_before_the_run_folder_leaves_nothing_behind(mpi):
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_FAIL": "1:loader"}, timeout=BOUND_S)
    assert res.rank_codes == {0: 3, 1: 3}, res
    assert "rank 1 (" in res.output and "injected loader failure on rank 1" in res.output, res
    assert mpi.run_dirs() == []


def test_generation_failure_on_one_rank(mpi):
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_FAIL": "1:generate"}, timeout=BOUND_S)
    assert res.rank_codes == {0: 2, 1: 2}, res
    assert "rank 1 (" in res.output and "No space left on device (injected)" in res.output, res
    assert mpi.run_dirs() == []


def test_a_stuck_rank_times_out_and_the_job_is_aborted(mpi):
    """Rank 1 stops inside a step; rank 0 gives up after the step timeout, then aborts the job."""
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_FAIL": "1:hang:2", "IOGEN_MPI_STEP_TIMEOUT_S": 2,
                          "IOGEN_MPI_GRACE_S": 2}, timeout=BOUND_S)
    assert res.returncode != 0, res
    assert "rank 0 (" in res.output and "waited 2 s in the step barrier" in res.output, res
    assert "aborting the job" in res.output, res
    # a rank MPI_Abort ends records no code; one that records one says "the run failed"
    assert res.rank_codes.get(0, 3) == 3 and res.rank_codes.get(1, 3) == 3, res


def test_a_killed_rank_ends_the_job(mpi):
    """A rank that dies without a word (SIGKILL): the launcher ends the others; nobody hangs."""
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     # should the launcher be slow to end the survivor, iogen's own watchdog
                     # does, well inside the bound
                     env={"IOGEN_TEST_FAIL": "1:kill:2", "IOGEN_MPI_STEP_TIMEOUT_S": "20",
                          "IOGEN_MPI_GRACE_S": "10"}, timeout=BOUND_S)
    assert res.returncode != 0, res
    assert res.rank_codes.get(0, 1) != 0 and res.rank_codes.get(1, 1) != 0, res


def test_a_stopped_rank_is_found_by_its_neighbour_and_the_job_is_aborted(mpi):
    """SIGSTOP: the rank neither fails nor dies. With the step timeout and grace at their defaults
    (1800 s + 60 s), only the heartbeat can end the job inside the launch's bound."""
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_FAIL": "1:stop:2", "IOGEN_MPI_LIVENESS_S": "3"}, timeout=BOUND_S)
    assert res.returncode != 0, res
    assert "rank 1 stops itself" in res.output, res
    assert "rank 0: rank 1 has not been heard from for" in res.output and "aborting the job" in res.output, res


def test_heartbeats_do_not_end_a_run_whose_ranks_finish_apart(mpi):
    """A rank that ends first says goodbye: its neighbour, still busy, is not aborted."""
    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True})
    res = mpi.launch(2, [mpi.driver("run.py"), "run", "default", *overrides, "-q"],
                     env={"IOGEN_TEST_LINGER": "0:3", "IOGEN_MPI_LIVENESS_S": "1"}, timeout=BOUND_S)
    assert res.returncode in (0, 1), res  # 1: the AU gate on a busy machine
    assert "has not been heard from" not in res.output, res


def test_sigterm_to_mpiexec_interrupts_every_rank_and_keeps_the_summary(mpi):
    """What Slurm and schedulers send first: Hydra forwards it, every rank exits 130 with a summary."""
    import signal
    import subprocess
    import sys
    import time

    overrides = _no_shuffle(mpi, **{"workflow.generate_data": True, "train.epochs": 500,
                                    "train.computation_time": 0.01})
    _generate(mpi, overrides)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_LOCAL"))}
    from ..conftest import default_signals

    proc = subprocess.Popen([mpiexec, "-n", "2", sys.executable, *mpi.iogen("run", "default", *overrides, "-q")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(mpi.tmp_path),
                            preexec_fn=default_signals())  # whatever dispositions the suite inherited
    try:
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline and not any(
                os.path.getsize(p) > 4096 for p in glob.glob(str(mpi.tmp_path / "results" / "*" / "steps" / "*"))):
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=BOUND_S)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.count("interrupted by SIGTERM") >= 2, err  # both ranks
    doc = _summary(mpi)
    assert doc["iogen"]["complete"] is False and "SIGTERM" in doc["iogen"]["incomplete_reason"]
