"""Across ranks and epochs: combine_ranks, run_metrics and the summary blocks, by hand."""
import json
import math

import numpy as np
import pytest

from iogen.metrics import (
    EPOCH_FIELDS,
    MIB,
    combine_ranks,
    dlio_metric_block,
    iogen_metric_block,
    rank_epochs_array,
    run_metrics,
    stack_ranks,
)
from iogen.common.steplog import PHASE_EVAL

# DLIO's summary.json `metric` keys (dlio_benchmark utils/statscounter.py, end_run).
DLIO_TRAIN_KEYS = {
    "train_au_percentage",
    "train_au_mean_percentage",
    "train_au_meet_expectation",
    "train_au_stdev_percentage",
    "train_throughput_samples_per_second",
    "train_throughput_mean_samples_per_second",
    "train_throughput_stdev_samples_per_second",
    "train_io_mean_MB_per_second",
    "train_io_stdev_MB_per_second",
}


@pytest.fixture
def two_ranks(uniform_rows):
    """Two ranks x two epochs of 5 steps, batch 10 samples of 1 MiB, no wait.

    rank 0: epoch 1 steps of 1000 ms computing 800 (AU 0.8, 10 samples/s),
            epoch 2 steps of 1000 ms computing 600 (AU 0.6, 10 samples/s);
    rank 1: epoch 1 steps of 2000 ms computing 800 (AU 0.4, 5 samples/s),
            epoch 2 steps of  500 ms computing 400 (AU 0.8, 20 samples/s).
    Epoch 1 starts at 0 ms, epoch 2 at 20000 ms on both ranks.
    """
    kw = dict(samples=10, bytes_=10 * MIB)  # bytes per step: 1 MiB per sample
    rank0 = np.concatenate([
        uniform_rows(5, 1000, 800, epoch=1, rank=0, **kw),
        uniform_rows(5, 1000, 600, start_ms=20_000, epoch=2, rank=0, **kw),
    ])
    rank1 = np.concatenate([
        uniform_rows(5, 2000, 800, epoch=1, rank=1, **kw),
        uniform_rows(5, 500, 400, start_ms=20_000, epoch=2, rank=1, **kw),
    ])
    return [rank0, rank1]


def test_combine_ranks_mean_sum_min_max(two_ranks):
    per_rank = np.stack([rank_epochs_array(r) for r in two_ranks])
    assert per_rank.shape == (2, 2, len(EPOCH_FIELDS))
    c = combine_ranks(per_rank)
    assert c.ranks == 2
    assert c.epoch.tolist() == [1, 2]
    assert c.au == pytest.approx([0.6, 0.7])  # mean over ranks
    assert c.au_min == pytest.approx([0.4, 0.6])
    assert c.au_max == pytest.approx([0.8, 0.8])
    assert c.throughput_samples_s == pytest.approx([15.0, 30.0])  # sum over ranks
    assert c.throughput_min_samples_s == pytest.approx([5.0, 10.0])
    assert c.throughput_max_samples_s == pytest.approx([10.0, 20.0])
    assert c.io_mib_s == pytest.approx([15.0, 30.0])
    assert c.io_min_bytes_s / MIB == pytest.approx([5.0, 10.0])
    assert c.steps.tolist() == [8, 8]
    # Span: every step of the epoch, first rank's start to last rank's end.
    assert c.span_ns.tolist() == [10_000e6, 5_000e6]
    assert c.compute_ns_mean == pytest.approx([800e6, 500e6])


def test_run_metrics_population_stdev_and_expectation(two_ranks):
    per_rank = stack_ranks(two_ranks)
    run = run_metrics(per_rank, au_threshold=0.64, record_length_bytes=MIB // 2)
    t = run.train
    assert t.au_mean_percentage == pytest.approx(65.0)
    # Population stdev of (60, 70) is 5; the sample stdev (ddof=1) would be 7.07.
    assert t.au_stdev_percentage == pytest.approx(5.0)
    assert t.throughput_mean_samples_s == pytest.approx(22.5)
    assert t.throughput_stdev_samples_s == pytest.approx(7.5)
    assert t.io_mean_mib_s == pytest.approx(22.5)  # 1 MiB really read per sample
    assert t.io_stdev_mib_s == pytest.approx(7.5)
    assert t.nominal_io_mean_mib_s == pytest.approx(11.25)  # but the record length says 0.5 MiB
    assert t.au_meet_expectation == "success"
    assert run.eval is None
    assert run_metrics(per_rank, au_threshold=0.66, record_length_bytes=MIB).train.au_meet_expectation == "fail"


def test_total_work_is_not_a_mean_of_rates(two_ranks):
    run = run_metrics(stack_ranks(two_ranks), au_threshold=0.9, record_length_bytes=MIB)
    t = run.train
    # Every step counts: 2 ranks x 2 epochs x 5 steps x 10 samples = 200 samples.
    # Spans: epoch 1 = 10 s (rank 1 ends last), epoch 2 = 5 s (rank 0 ends last).
    assert t.total_samples == 200
    assert t.span_ns == pytest.approx(15e9)
    assert t.total_work_samples_s == pytest.approx(200 / 15)
    assert t.total_work_mib_s == pytest.approx(200 / 15)
    assert t.total_work_samples_s != pytest.approx(t.throughput_mean_samples_s)


def test_dlio_block_has_dlio_keys_and_values(two_ranks):
    run = run_metrics(stack_ranks(two_ranks), au_threshold=0.64, record_length_bytes=2 * MIB)
    block = dlio_metric_block(run)
    assert set(block) == DLIO_TRAIN_KEYS
    assert block["train_au_percentage"] == pytest.approx([60.0, 70.0])
    assert block["train_throughput_samples_per_second"] == pytest.approx([15.0, 30.0])
    # DLIO's "MB" is MiB and nominal: mean samples/s x record_length_bytes / 2**20.
    assert block["train_io_mean_MB_per_second"] == pytest.approx(22.5 * 2)
    assert block["train_io_stdev_MB_per_second"] == pytest.approx(7.5 * 2)
    assert block["train_au_meet_expectation"] == "success"
    json.dumps(block, allow_nan=False)


def test_iogen_block_names_units(two_ranks):
    run = run_metrics(stack_ranks(two_ranks), au_threshold=0.64, record_length_bytes=MIB)
    block = iogen_metric_block(run)
    json.dumps(block, allow_nan=False)
    train = block["train"]
    assert train["io_mean_mib_s"] == pytest.approx(22.5)
    assert train["total_work_samples_s"] == pytest.approx(200 / 15)
    assert train["per_epoch"]["au_min_percentage"] == pytest.approx([40.0, 60.0])
    assert train["per_epoch"]["wait_mean_ns"] == [0.0, 0.0]
    units = ("_ns", "_mib_s", "_samples_s", "_percentage", "_bytes", "bytes", "samples", "steps",
             "checkpoints", "epoch", "window_fallback", "num_ranks")
    keys = list(block) + list(train) + list(train["per_epoch"])
    assert all(k.endswith(units) for k in keys if k not in ("train", "per_epoch", "au_gate")), keys


def test_eval_phase_reduced_the_same_way(two_ranks, uniform_rows):
    # Eval after epoch 2 only: 4 steps of 250 ms computing 200 ms (AU 0.8), batch 5.
    ev = [np.concatenate([r, uniform_rows(4, 250, 200, start_ms=40_000, epoch=2, rank=i,
                                          phase=PHASE_EVAL, samples=5)])
          for i, r in enumerate(two_ranks)]
    run = run_metrics(stack_ranks(ev), stack_ranks(ev, phase=PHASE_EVAL),
                      au_threshold=0.75, record_length_bytes=MIB)
    assert run.train.au_mean_percentage == pytest.approx(65.0)  # eval rows do not leak in
    assert run.eval.epochs.epoch.tolist() == [2]
    assert run.eval.au_mean_percentage == pytest.approx(80.0)
    assert run.eval.au_stdev_percentage == 0.0
    assert run.eval.throughput_mean_samples_s == pytest.approx(2 * 5 / 0.25)
    assert run.eval.au_meet_expectation == "success"
    block = dlio_metric_block(run)
    assert block["eval_au_percentage"] == pytest.approx([80.0])
    assert block["eval_throughput_mean_samples_per_second"] == pytest.approx(40.0)
    assert {k.replace("eval_", "train_", 1) for k in block if k.startswith("eval_")} == DLIO_TRAIN_KEYS
    assert "eval" in iogen_metric_block(run)


def test_missing_epoch_is_nan_in_memory_and_null_in_json(two_ranks):
    # Rank 1 crashed before epoch 2: its row for epoch 2 is NaN, so the epoch's AU is unknown.
    per_rank = np.stack([
        rank_epochs_array(two_ranks[0]),
        rank_epochs_array(two_ranks[1][two_ranks[1]["epoch"] == 1], epochs=[1, 2]),
    ])
    run = run_metrics(per_rank, au_threshold=0.5, record_length_bytes=MIB)
    assert run.train.epochs.au[0] == pytest.approx(0.6)
    assert math.isnan(run.train.epochs.au[1])
    assert run.train.epochs.window_fallback.tolist() == [False, True]
    block = dlio_metric_block(run)
    assert block["train_au_percentage"][1] is None
    assert block["train_au_meet_expectation"] == "fail"
    json.dumps(block, allow_nan=False)


def test_no_epochs_do_not_crash():
    empty = np.empty((1, 0, len(EPOCH_FIELDS)))
    run = run_metrics(empty, au_threshold=0.9, record_length_bytes=MIB)
    assert math.isnan(run.train.au_mean_percentage)
    assert run.train.au_meet_expectation == "fail"
    assert dlio_metric_block(run)["train_au_percentage"] == []
    with pytest.raises(ValueError, match="ranks>0"):
        combine_ranks(np.empty((0, 1, len(EPOCH_FIELDS))))


def test_no_compute_configured_means_no_au_gate(uniform_rows):
    # Pure I/O: the workload asked for no compute (requested 0) although the loop took 1 ms.
    rows = uniform_rows(5, 10, 1, requested_ms=[0] * 5)
    run = run_metrics(stack_ranks([rows]), au_threshold=0.9, record_length_bytes=MIB)
    assert run.train.au_mean_percentage == 0.0  # MLPerf's AU: requested compute / wall time
    assert run.train.au_achieved_mean_percentage == pytest.approx(10.0)
    assert run.train.au_meet_expectation == "fail"  # DLIO's key keeps DLIO's comparison
    assert run.train.au_gate == "not applied"
    gate = iogen_metric_block(run)["au_gate"]
    assert gate["applied"] is False and gate["met"] is None and "computation_time" in gate["reason"]


def test_au_gate_applies_when_compute_is_configured(uniform_rows):
    rows = uniform_rows(5, 10, 5)
    assert iogen_metric_block(run_metrics(stack_ranks([rows]), au_threshold=0.4,
                                          record_length_bytes=MIB))["au_gate"] == {
        "applied": True, "met": True, "reason": None}
    assert iogen_metric_block(run_metrics(stack_ranks([rows]), au_threshold=0.6,
                                          record_length_bytes=MIB))["au_gate"]["met"] is False


def test_sleep_error_beside_mlperfs_au(rows_from):
    # Requested 5 ms, slept 6 ms each step of 10 ms.
    rows = rows_from([(i * 10, i * 10, i * 10 + 6, (i + 1) * 10) for i in range(5)], requested_ms=[5] * 5)
    block = iogen_metric_block(run_metrics(stack_ranks([rows]), au_threshold=0.4, record_length_bytes=MIB))
    train = block["train"]
    assert train["au_mean_percentage"] == pytest.approx(50.0)
    assert train["au_achieved_mean_percentage"] == pytest.approx(60.0)
    assert train["sleep_error_mean_ns"] == pytest.approx(1e6)
    assert train["per_epoch"]["au_achieved_percentage"] == pytest.approx([60.0])
