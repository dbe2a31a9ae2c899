"""Wait percentiles and per-interval series computed post hoc from step logs."""
import numpy as np
import pytest

from iogen.report.timeseries import (
    auto_interval_s,
    busy_ns_per_bin,
    interval_series,
    spread_per_bin,
    read_run_steps,
    run_timeseries,
)
from iogen.metrics.latency import wait_histograms, window_mask
from iogen.common.steplog import STEP_DTYPE, read_steplog

from .conftest import MS, write_steps


def rows_of(spec):
    """STEP_DTYPE rows from (epoch, step, t_request, t_ready, t_compute_end, t_step_end, samples, bytes)."""
    rows = np.zeros(len(spec), dtype=STEP_DTYPE)
    for i, (epoch, step, a, b, c, d, samples, nbytes) in enumerate(spec):
        rows[i]["epoch"], rows[i]["step"] = epoch, step
        rows[i]["t_request"], rows[i]["t_ready"], rows[i]["t_compute_end"], rows[i]["t_step_end"] = a, b, c, d
        rows[i]["samples"], rows[i]["bytes"] = samples, nbytes
    return rows


def test_busy_time_is_split_exactly_at_interval_edges():
    # intervals [2, 5) and [7, 12) against bins [0, 4) [4, 8) [8, 12)
    got = busy_ns_per_bin([2, 7], [5, 12], [0, 4, 8, 12])
    assert got.tolist() == [2.0, 2.0, 4.0]
    assert busy_ns_per_bin([7, 2], [12, 5], [0, 4, 8, 12]).tolist() == [2.0, 2.0, 4.0]  # any order
    assert busy_ns_per_bin([], [], [0, 10]).tolist() == [0.0]
    assert busy_ns_per_bin([0], [100], [10, 20, 30]).tolist() == [10.0, 10.0]


def test_amounts_are_spread_over_their_steps():
    # steps [0, 10) with 4 samples and [10, 30) with 8: bins [0, 5) [5, 15) [15, 30)
    assert spread_per_bin([0, 10], [10, 30], [4, 8], [0, 5, 15, 30]).tolist() == [2.0, 4.0, 6.0]
    assert spread_per_bin([10, 0], [30, 10], [8, 4], [0, 5, 15, 30]).tolist() == [2.0, 4.0, 6.0]
    assert spread_per_bin([3], [3], [5], [0, 2, 4]).tolist() == [0.0, 5.0]  # zero length: at its start
    assert spread_per_bin([], [], [], [0, 10]).tolist() == [0.0]


def test_steady_steps_give_a_steady_throughput():
    # 10 steps of 9 ns each, 1 sample: 20 ns intervals hold 2.22 steps; counting whole steps
    # would give 2 or 3 samples per interval, the time-weighted count 20/9 every time
    rows = rows_of([(1, i, 9 * i, 9 * i, 9 * i + 5, 9 * (i + 1), 1, 1) for i in range(10)])
    s = interval_series(rows, interval_ns=20, origin_ns=0, end_ns=80)
    assert s["samples_s"] == pytest.approx([1 / 9e-9] * 4)


def test_interval_series_by_hand():
    # two steps in [0, 20) ns with 10 ns intervals:
    # step 0: wait [0, 2), compute [2, 8), barrier [8, 10): 4 samples, 2 MiB over [0, 10)
    # step 1: wait [10, 14), compute [14, 20):               4 samples, 1 MiB over [10, 20)
    rows = rows_of([(1, 0, 0, 2, 8, 10, 4, 2 * 2**20), (1, 1, 10, 14, 20, 20, 4, 2**20)])
    s = interval_series(rows, interval_ns=10, origin_ns=0)
    assert s["t_s"] == [0.0, 1e-8]
    assert s["samples_s"] == pytest.approx([4 / 10e-9, 4 / 10e-9])
    assert s["mib_s"] == pytest.approx([2 / 10e-9, 1 / 10e-9])
    assert s["au_percentage"] == pytest.approx([60.0, 60.0])
    assert s["wait_percentage"] == pytest.approx([20.0, 40.0])
    # a shorter last interval is divided by its own length
    s = interval_series(rows, interval_ns=15, origin_ns=0)
    assert s["au_percentage"] == pytest.approx([(6 + 1) / 15 * 100, 5 / 5 * 100])


def test_window_mask_matches_the_metrics_window():
    rows = rows_of([(e, s, 0, 0, 0, 0, 1, 1) for e in (1, 2) for s in range(4)])
    assert window_mask(rows, 1, 0).tolist() == [False, True, True, True] * 2
    assert window_mask(rows, 1, 1).tolist() == [False, True, True, False] * 2
    # an empty window falls back to every step, as iogen.metrics does
    assert window_mask(rows, 3, 3).all()
    shuffled = rows[::-1]
    assert window_mask(shuffled, 1, 0).tolist() == [True, True, True, False] * 2


def test_wait_histograms_merge_ranks_and_skip_the_first_step(tmp_path):
    (tmp_path / "steps").mkdir()
    # rank 0 waits 1 ms per step except a slow first step; rank 1 waits 3 ms
    write_steps(tmp_path / "steps" / "rank-00000.steps", 0, 5, wait_ns=[50 * MS] + [1 * MS] * 9,
                compute_ns=MS, epochs=2)
    write_steps(tmp_path / "steps" / "rank-00001.steps", 1, 5, wait_ns=3 * MS, compute_ns=MS, epochs=2)
    logs = read_run_steps(tmp_path)
    assert [h["rank"] for h, _ in logs] == [0, 1]
    per_epoch, whole = wait_histograms(logs, exclude_start_steps=1)
    assert sorted(per_epoch) == [1, 2]
    assert whole.count == 2 * 2 * 4  # ranks x epochs x (5 - 1) window steps
    assert whole.max_ns == 3 * MS  # the 50 ms first step is outside the window
    assert whole.percentile(50) == pytest.approx(1 * MS, rel=0.01)
    assert whole.percentile(99) == 3 * MS
    _, with_first = wait_histograms(logs, exclude_start_steps=0)
    assert with_first.max_ns == 50 * MS


def test_run_timeseries_aligns_ranks_on_wall_clock(tmp_path):
    (tmp_path / "steps").mkdir()
    write_steps(tmp_path / "steps" / "rank-00000.steps", 0, 10, wait_ns=MS, compute_ns=9 * MS)
    write_steps(tmp_path / "steps" / "rank-00001.steps", 1, 10, wait_ns=MS, compute_ns=9 * MS)
    logs = read_run_steps(tmp_path)
    ts = run_timeseries(logs, interval_s=0.02)
    assert ts["interval_s"] == 0.02 and [r["rank"] for r in ts["ranks"]] == [0, 1]
    r0 = ts["ranks"][0]
    # 10 ms steps, 20 ms intervals: 2 batches of 4 samples per interval; 90% compute, 10% wait
    assert len(r0["t_s"]) >= 5
    assert r0["samples_s"][1] == pytest.approx(8 / 0.02)
    assert r0["au_percentage"][1] == pytest.approx(90.0)
    assert r0["wait_percentage"][1] == pytest.approx(10.0)
    header, rows = read_steplog(tmp_path / "steps" / "rank-00000.steps")
    assert ts["origin_wall_ns"] <= header["wall_start_ns"] + int(rows["t_request"][0] - header["mono_start_ns"])
    auto = run_timeseries(logs, interval_s=None)
    assert auto["interval_s"] == auto_interval_s(0.1, 0.01)


def test_auto_interval():
    assert auto_interval_s(3600.0) == 1.0
    assert auto_interval_s(3.0) == 0.1
    assert auto_interval_s(3.0, step_s=0.2) == 1.0  # at least 4 steps per interval
