"""epoch_metrics on hand-computed step rows (times in ms, written out below)."""
import numpy as np
import pytest

from iogen.metrics import EPOCH_FIELDS, MIB, EpochMetrics, epoch_metrics, rank_epochs_array
from iogen.common.steplog import PHASE_EVAL, PHASE_TRAIN

MS = 1_000_000  # ns per ms

# Five steps: (t_request, t_ready, t_compute_end, t_step_end) in ms. The first step waits
# 500 ms (a cold start, excluded by default); every step computes 700 ms.
FIVE = [
    (0, 500, 1200, 1300),
    (1300, 1400, 2100, 2150),
    (2150, 2350, 3050, 3100),
    (3100, 3150, 3850, 3900),
    (3900, 4000, 4700, 4800),
]


def test_default_window_excludes_first_step(rows_from):
    m = epoch_metrics(rows_from(FIVE, samples=10, bytes_=40_960))
    # Window = steps 1..4: T = 4800 - 1300 = 3500 ms; compute = 4 x 700 = 2800 ms.
    assert m.steps == 4 and m.steps_all == 5
    assert m.T_ns == 3500 * MS
    assert m.au == pytest.approx(2800 / 3500)
    assert m.samples == 40
    assert m.bytes == 4 * 40_960
    assert m.io_bytes_s == pytest.approx(4 * 40_960 / 3.5)
    # Waits 100 + 200 + 50 + 100; barriers 50 + 50 + 50 + 100; gaps 0 (back-to-back steps).
    assert m.wait_ns_total == 450 * MS
    assert m.wait_ns_mean == pytest.approx(112.5 * MS)
    assert m.comm_ns_total == 250 * MS
    assert m.compute_ns_mean == pytest.approx(700 * MS)
    assert m.gap_ns_total == 0
    assert m.blocks == 1 and m.checkpoints == 0
    assert not m.window_fallback


def test_n_steps_counted_in_numerator_and_denominator(rows_from):
    # DLIO's bug: throughput over the N-1 steps after the first counted only N-2 batches
    # ((len - 2) / total_time * batch): here 30 samples / 3.5 s = 8.57/s instead of 40 / 3.5.
    m = epoch_metrics(rows_from(FIVE, samples=10))
    assert m.throughput_samples_s == pytest.approx(40 / 3.5)
    assert m.throughput_samples_s != pytest.approx(30 / 3.5)
    assert m.throughput_samples_s == pytest.approx(m.samples / (m.T_ns / 1e9))


def test_exclusion_at_both_ends(rows_from):
    m = epoch_metrics(rows_from(FIVE), exclude_start_steps=2, exclude_end_steps=1)
    # Window = steps 2..3: T = 3900 - 2150 = 1750 ms, 2 steps.
    assert m.steps == 2
    assert m.T_ns == 1750 * MS
    assert m.au == pytest.approx(1400 / 1750)
    assert m.throughput_samples_s == pytest.approx(20 / 1.75)
    m0 = epoch_metrics(rows_from(FIVE), exclude_start_steps=0)
    assert m0.steps == 5 and m0.T_ns == 4800 * MS


def test_rows_out_of_order_are_sorted_by_step(rows_from):
    rows = rows_from(FIVE)
    assert epoch_metrics(rows[::-1]) == epoch_metrics(rows)


def test_au_is_mlperfs_requested_compute_and_achieved_is_beside_it(rows_from):
    # Requested 690 ms each; the sleep achieved 700 ms (and one step 720 ms, below).
    times = [list(t) for t in FIVE]
    times[4][2] += 20  # step 4 computes 720 ms; its barrier shrinks by 20 ms
    m = epoch_metrics(rows_from(times, requested_ms=[690] * 5))
    assert m.compute_ns_total == (700 * 3 + 720) * MS
    assert m.requested_compute_ns_total == 4 * 690 * MS
    # MLPerf Storage / DLIO: the configured compute over wall time; sleep overshoot is not compute
    assert m.au == pytest.approx(2760 / 3500)
    assert m.au_achieved == pytest.approx(2820 / 3500)
    assert m.sleep_error_ns_mean == pytest.approx((10 + 10 + 10 + 30) / 4 * MS)
    assert m.sleep_error_ns_max_abs == 30 * MS


def test_checkpoint_splits_epoch_into_step_weighted_blocks(rows_from):
    # A 1000 ms checkpoint after step 2, inside step 2's t_step_end (2100 + 1000 = 3100).
    times = [
        (0, 100, 600, 700),
        (700, 800, 1300, 1400),
        (1400, 1500, 2000, 3100),
        (3100, 3400, 3900, 4000),
        (4000, 4300, 4800, 4900),
        (4900, 5200, 5700, 5800),
    ]
    m = epoch_metrics(rows_from(times, samples=10, checkpoint_ms=[0, 0, 1000, 0, 0, 0]))
    # Block A = steps 1, 2: T_A = (3100 - 1000) - 700 = 1400 ms, compute 1000 ms, 20 samples.
    # Block B = steps 3, 4, 5: T_B = 5800 - 3100 = 2700 ms, compute 1500 ms, 30 samples.
    assert m.blocks == 2
    assert m.T_ns == (1400 + 2700) * MS
    assert m.au == pytest.approx((2 * 1000 / 1400 + 3 * 1500 / 2700) / 5)
    assert m.au != pytest.approx(2500 / 4100)  # not one sum over one window
    assert m.throughput_samples_s == pytest.approx((2 * 20 / 1.4 + 3 * 30 / 2.7) / 5)
    assert m.checkpoints == 1 and m.checkpoint_ns_total == 1000 * MS
    # The checkpoint is not barrier time: step 2's barrier is 2100 - 2000 = 100 ms.
    assert m.comm_ns_total == (100 + 100 + 100 + 100 + 100) * MS


def test_one_block_is_exactly_sum_over_t(rows_from):
    m = epoch_metrics(rows_from(FIVE, samples=3, bytes_=MIB))
    t_s = m.T_ns / 1e9
    assert m.au == pytest.approx(m.compute_ns_total / m.T_ns, rel=1e-12)
    assert m.throughput_samples_s == pytest.approx(m.samples / t_s, rel=1e-12)
    assert m.io_bytes_s == pytest.approx(m.bytes / t_s, rel=1e-12)


def test_mib_is_two_to_the_twenty(rows_from):
    # 1 MiB per 1 s step: 1.0 MiB/s, not 1.048576 (MB) and not 0.95 (mislabelled MiB as MB).
    times = [(i * 1000, i * 1000, i * 1000 + 500, (i + 1) * 1000) for i in range(4)]
    m = epoch_metrics(rows_from(times, samples=2, bytes_=MIB))
    assert m.io_mib_s == pytest.approx(1.0)
    assert m.throughput_samples_s == pytest.approx(2.0)
    # DLIO's nominal figure: samples/s x record_length_bytes / 2**20.
    assert m.nominal_mib_s(3 * MIB) == pytest.approx(6.0)
    assert m.nominal_mib_s(1_000_000) == pytest.approx(2 * 1_000_000 / 1_048_576)


def test_empty_window_falls_back_to_all_steps(rows_from):
    m = epoch_metrics(rows_from(FIVE[:1]))
    assert m.window_fallback
    assert m.steps == 1 and m.T_ns == 1300 * MS
    assert m.au == pytest.approx(700 / 1300)
    m = epoch_metrics(rows_from(FIVE[:3]), exclude_start_steps=2, exclude_end_steps=1)
    assert m.window_fallback and m.steps == 3


def test_zero_steps_give_nan_and_flag_without_warnings(rows_from):
    m = epoch_metrics(rows_from([]))
    assert m.steps == 0 and m.window_fallback
    assert np.isnan(m.au) and np.isnan(m.throughput_samples_s) and np.isnan(m.io_mib_s)
    assert np.isnan(m.wait_ns_mean)


def test_zero_length_window_is_nan_not_inf(rows_from):
    m = epoch_metrics(rows_from([(5, 5, 5, 5)]), exclude_start_steps=0)
    assert m.T_ns == 0 and np.isnan(m.au) and np.isnan(m.throughput_samples_s)


def test_mixed_epochs_are_refused(rows_from):
    rows = np.concatenate([rows_from(FIVE, epoch=1), rows_from(FIVE, epoch=2)])
    with pytest.raises(ValueError, match="one epoch"):
        epoch_metrics(rows)
    with pytest.raises(ValueError, match=">= 0"):
        epoch_metrics(rows_from(FIVE), exclude_start_steps=-1)


def test_vector_form_roundtrips(rows_from):
    m = epoch_metrics(rows_from(FIVE, epoch=3, rank=2), clock_offset_ns=10**12)
    vec = m.to_array()
    assert vec.dtype == np.float64 and vec.shape == (len(EPOCH_FIELDS),)
    assert EpochMetrics.from_array(vec) == m
    assert m.first_request_ns == 10**12 and m.last_end_ns == 10**12 + 4800 * MS


def test_rank_epochs_array_groups_epochs_and_pads_missing(rows_from):
    rows = np.concatenate([
        rows_from(FIVE, epoch=2, rank=1),
        rows_from(FIVE[:2], epoch=1, rank=1),
        rows_from(FIVE, epoch=1, rank=1, phase=PHASE_EVAL),
    ])
    a = rank_epochs_array(rows)
    assert a.shape == (2, len(EPOCH_FIELDS))
    assert a[:, EPOCH_FIELDS.index("epoch")].tolist() == [1, 2]
    assert a[:, EPOCH_FIELDS.index("steps")].tolist() == [1, 4]
    b = rank_epochs_array(rows, phase=PHASE_TRAIN, epochs=[1, 2, 3])
    missing = EpochMetrics.from_array(b[2])
    assert missing.epoch == 3 and missing.rank == 1 and missing.steps == 0
    assert missing.window_fallback and np.isnan(missing.au)
    ev = rank_epochs_array(rows, phase=PHASE_EVAL)
    assert ev.shape[0] == 1 and ev[0, EPOCH_FIELDS.index("phase")] == PHASE_EVAL
