"""End to end in one process: config -> datagen -> plan -> native loader -> engine -> outputs."""
import os

import numpy as np
import pytest

from iogen.world.communicator import SingleWorld
from iogen.config import load_workload
from iogen.report.rundir import steplog_path
from iogen.run.runner import run
from iogen.common.steplog import PHASE_EVAL, PHASE_TRAIN, read_steplog

from ..conftest import load_summary


def _run(overrides, **kw):
    wl = load_workload("default", overrides + ["workflow.generate_data=True"])
    return wl, run(wl, SingleWorld(), quiet=True, **kw)


def test_run_writes_a_complete_run_folder(tiny):
    wl, out = _run(tiny())
    files = sorted(os.listdir(out.run_dir))
    assert files == ["config.yaml", "epochs.json", "iogen.log", "steps", "summary.json"]
    doc = load_summary(out.run_dir)
    m = doc["metric"]
    for key in ("train_au_mean_percentage", "train_throughput_mean_samples_per_second",
                "train_io_mean_MB_per_second", "train_au_meet_expectation"):
        assert key in m
    assert 0 < m["train_au_mean_percentage"] <= 100
    assert doc["iogen"]["complete"] is True
    assert doc["schema_version"] == 2 and doc["num_accelerators"] == 1
    assert len(m["train_au_percentage"]) == 2  # one per epoch
    wait = doc["iogen"]["metrics"]["train"]["wait_latency"]
    assert wait["count"] == 2 * 3  # 4 steps per epoch, the first left out of the window
    assert wait["min_ns"] <= wait["p50_ns"] <= wait["p99_ns"] <= wait["max_ns"]


def test_step_rows_count_every_sample_and_real_bytes(tiny):
    wl, out = _run(tiny())
    header, rows = read_steplog(steplog_path(out.run_dir, 0))
    train = rows[rows["phase"] == PHASE_TRAIN]
    assert len(train) == 2 * 4  # 8 files / batch 2, 2 epochs
    assert np.all(train["samples"] == 2)
    assert np.all(train["bytes"] == 2 * 65536)  # NPZ rows are read exactly, no framing
    assert np.all(train["t_ready"] >= train["t_request"])
    assert np.all(train["t_compute_end"] - train["t_ready"] >= train["requested_compute_ns"])
    assert np.all(train["t_step_end"] >= train["t_compute_end"])
    assert np.all(train["requested_compute_ns"] == 1_000_000)


def test_two_runs_never_share_a_folder(tiny):
    _, a = _run(tiny())
    _, b = _run(tiny())
    assert a.run_dir != b.run_dir


def test_eval_and_checkpoints(tiny, tmp_path):
    overrides = tiny(**{
        "workflow.evaluation": True, "dataset.num_files_eval": 4, "reader.batch_size_eval": 2,
        "evaluation.eval_time": 0.001, "workflow.checkpoint": True,
        "checkpoint.checkpoint_folder": str(tmp_path / "ckpt"), "model.model_size_bytes": 1 << 20,
        "checkpoint.steps_between_checkpoints": 2, "checkpoint.fsync": True,
    })
    wl, out = _run(overrides)
    header, rows = read_steplog(steplog_path(out.run_dir, 0))
    ev = rows[rows["phase"] == PHASE_EVAL]
    assert len(ev) == 2 * 2
    train = rows[rows["phase"] == PHASE_TRAIN]
    assert np.count_nonzero(train["checkpoint_ns"]) == 4  # every 2nd of 8 train steps
    ckpts = os.listdir(tmp_path / "ckpt")
    assert len(ckpts) == 1 and os.path.getsize(tmp_path / "ckpt" / ckpts[0]) == 1 << 20
    doc = out.summary
    assert "eval_au_mean_percentage" in doc["metric"]
    assert len(doc["iogen"]["checkpoints"]) == 4


@pytest.mark.parametrize("threads,prefetch", [(1, 0), (4, 0), (2, 3)])
def test_loader_settings_read_the_same_bytes(tiny, threads, prefetch):
    wl, out = _run(tiny(**{"reader.read_threads": threads, "reader.prefetch_size": prefetch,
                           "reader.sample_shuffle": "seed"}))
    assert out.summary["iogen"]["metrics"]["train"]["total_bytes"] == 2 * 8 * 65536


def test_missing_data_fails_before_any_run_folder(tmp_path):
    overrides = [f"dataset.data_folder={tmp_path / 'nothing'}", f"output.folder={tmp_path / 'results'}"]
    wl = load_workload("default", overrides + ["workflow.generate_data=False"])
    from iogen.errors import DataError

    with pytest.raises(DataError, match="does not exist"):
        run(wl, SingleWorld(), quiet=True)
    assert not (tmp_path / "results").exists()


def test_odirect_reads_the_same_samples_and_counts_aligned_bytes(tiny):
    try:
        wl, out = _run(tiny(**{"reader.odirect": True}))
    except OSError as exc:  # a file system without O_DIRECT (tmpfs)
        pytest.skip(f"O_DIRECT unavailable here: {exc}")
    header, rows = read_steplog(steplog_path(out.run_dir, 0))
    train = rows[rows["phase"] == PHASE_TRAIN]
    assert np.all(train["samples"] == 2)
    # whole 4 KiB blocks around each 64 KiB record: at least the record, at most one extra block each side
    assert np.all(train["bytes"] >= 2 * 65536) and np.all(train["bytes"] <= 2 * (65536 + 2 * 4096))


def test_evicting_between_epochs_and_device_bytes(tiny):
    wl, out = _run(tiny(**{"reader.evict_page_cache": True}))
    dev = out.summary["iogen"]["device_read_bytes_per_epoch"]
    assert len(dev) == 2
    if all(v is not None for v in dev):
        # evicted before each epoch: the files came from the device again (at least most of them)
        assert all(v >= 0.5 * 8 * 65536 for v in dev), dev


def test_preprocess_time_is_spent_in_the_reader(storage):
    """reader.preprocess_time, 10 ms a sample, with no compute: the one reading thread spends each batch's
    2 x 10 ms after reading it (on objects: after the batch's GETs), and every step waits for it."""
    wl, out = _run(storage.overrides("npz", **{"reader.preprocess_time": 0.01, "train.computation_time": 0,
                                               "reader.read_threads": 1, "reader.prefetch_size": 0}))
    header, rows = read_steplog(steplog_path(out.run_dir, 0))
    train = rows[rows["phase"] == PHASE_TRAIN]
    assert train.size == 2 * 8  # 16 samples, batch 2, 2 epochs
    assert np.all(train["t_ready"] - train["t_request"] >= 2 * 10_000_000)
