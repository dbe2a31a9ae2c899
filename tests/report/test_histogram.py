"""The log-linear latency histogram: exact merges, percentiles within the stated error, JSON."""
import json

import numpy as np
import pytest

from iogen.common.histogram import NUM_BUCKETS, RELATIVE_ERROR, LatencyHistogram, bucket_bounds, bucket_index


def _numpy_nearest_rank(values, q):
    """The order statistic the histogram approximates (numpy's inverted-CDF percentile)."""
    return np.percentile(values, q, method="inverted_cdf")


def test_small_values_are_exact_and_buckets_tile_the_range():
    v = np.arange(0, 128)
    assert np.array_equal(bucket_index(v), v)
    low, high = bucket_bounds(np.arange(NUM_BUCKETS))
    assert low[0] == 0 and high[-1] == 2**63 - 1
    assert np.array_equal(low[1:], high[:-1] + 1)  # no gaps, no overlaps
    # every bucket is at most 1/128 of its lowest value wide
    width = (high - low + 1).astype(np.float64)
    assert np.all(width[128:] / low[128:] <= 1 / 128)


@pytest.mark.parametrize("value", [128, 255, 256, 1000, 2**31 - 1, 2**31, 2**53 + 1, 2**62 - 1, 2**62, 2**63 - 1])
def test_values_land_inside_their_bucket(value):
    low, high = bucket_bounds(bucket_index(np.array([value])))
    assert low[0] <= value <= high[0]


def test_merge_is_exact():
    rng = np.random.default_rng(7)
    a = rng.lognormal(11, 2, 5000).astype(np.int64)
    b = rng.integers(0, 10**9, 3000)
    ha, hb = LatencyHistogram().record(a), LatencyHistogram().record(b)
    both = LatencyHistogram().record(np.concatenate([a, b]))
    assert ha + hb == both
    assert LatencyHistogram.merged([ha, hb]) == both
    # merging is adding the count arrays (what an MPI Allreduce does)
    assert np.array_equal(ha.counts + hb.counts, both.counts)
    assert both.max_ns == max(a.max(), b.max()) and both.min_ns == min(a.min(), b.min())
    assert both.sum_ns == int(a.sum()) + int(b.sum())
    # recording in pieces equals recording at once
    pieces = LatencyHistogram()
    for chunk in np.array_split(np.concatenate([a, b]), 7):
        pieces.record(chunk)
    assert pieces == both


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: rng.lognormal(mean=13.0, sigma=1.0, size=200_000),  # ~0.4 ms median
        lambda rng: rng.lognormal(mean=9.0, sigma=2.5, size=200_000),  # heavy tail
        lambda rng: rng.uniform(1e3, 5e7, size=200_000),
        lambda rng: rng.uniform(0, 5000, size=200_000),  # exact region and its neighbours
    ],
)
def test_percentiles_within_stated_error(make):
    rng = np.random.default_rng(42)
    values = make(rng).astype(np.int64)
    h = LatencyHistogram().record(values)
    for q in (0, 1, 50, 90, 99, 99.9, 100):
        exact = _numpy_nearest_rank(values, q)
        got = h.percentile(q)
        assert abs(got - exact) <= RELATIVE_ERROR * max(exact, 1.0), (q, exact, got)
        # and close to numpy's default (linear) percentile too on this much data
        assert abs(got - np.percentile(values, q)) <= 2 * RELATIVE_ERROR * max(exact, 1.0)
    assert h.percentile(100) == values.max()
    assert h.percentile(0) == values.min()
    assert h.mean_ns() == pytest.approx(values.mean(), rel=1e-12)


def test_percentile_array_and_summary():
    h = LatencyHistogram().record(np.arange(1, 101))
    assert np.array_equal(h.percentile([50, 90]), [50.0, 90.0])  # exact below 128 ns
    s = h.summary()
    assert s["count"] == 100 and s["p50_ns"] == 50.0 and s["p99_9_ns"] == 100.0 and s["max_ns"] == 100


def test_empty_histogram():
    h = LatencyHistogram()
    assert h.count == 0 and np.isnan(h.percentile(50)) and np.isnan(h.mean_ns())
    assert h.summary()["p99_ns"] is None
    assert h + LatencyHistogram().record([5]) == LatencyHistogram().record([5])


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        LatencyHistogram().record([-1])
    with pytest.raises(ValueError):
        LatencyHistogram().percentile(101)
    with pytest.raises(ValueError):
        LatencyHistogram(np.zeros(10, dtype=np.int64))


def test_json_round_trip_is_sparse_and_exact():
    rng = np.random.default_rng(3)
    h = LatencyHistogram().record(rng.lognormal(12, 1, 10_000).astype(np.int64))
    doc = json.loads(json.dumps(h.to_dict()))
    assert len(doc["buckets"]) == np.count_nonzero(h.counts) < NUM_BUCKETS
    assert LatencyHistogram.from_dict(doc) == h
    bad = dict(doc, sub_bits=5)
    with pytest.raises(ValueError):
        LatencyHistogram.from_dict(bad)
